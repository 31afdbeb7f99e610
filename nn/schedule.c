/* Learning-rate schedules: linear warmup, then constant, cosine annealing or
 * linear decay to a minimum, following Hugging Face's get_*_schedule_with_warmup.
 *
 * For step s (0-based), warmup W and total T:
 *   s < W:            base * s / W                      (0 at step 0, as HF)
 *   constant, s >= W: base                               (also after T)
 *   s >= T:           min                                (cosine, linear)
 *   otherwise, with progress q = (s - W) / (T - W) in [0, 1):
 *     cosine:  min + (base - min) * 0.5 * (1 + cos(pi q))
 *     linear:  min + (base - min) * (1 - q)
 * A warmup given as a ratio r is ceil(r T), as HF Trainer (a product within
 * 1e-9 of an integer counts as that integer, so 0.07 * 100 gives 7).
 */
#include <math.h>

#include "nn.h"

int nn_schedule_init(struct nn_schedule *s, enum nn_schedule_kind kind, double base_lr,
		     double min_lr, int64_t warmup, double warmup_ratio, int64_t total)
{
	static const char op[] = "nn_schedule_init";
	if (!s)
		return tensor_error(TENSOR_ERR_ARG, "%s: s is NULL", op);
	if (kind != NN_SCHEDULE_CONSTANT && kind != NN_SCHEDULE_COSINE &&
	    kind != NN_SCHEDULE_LINEAR)
		return tensor_error(TENSOR_ERR_ARG, "%s: unknown schedule kind %d", op, (int)kind);
	if (!(base_lr >= 0) || !isfinite(base_lr) || !(min_lr >= 0) || !isfinite(min_lr))
		return tensor_error(TENSOR_ERR_ARG,
				    "%s: learning rates (base %g, min %g) must be finite and >= 0",
				    op, base_lr, min_lr);
	if (min_lr > base_lr)
		return tensor_error(TENSOR_ERR_ARG, "%s: min_lr %g is above base_lr %g", op, min_lr,
				    base_lr);
	if (total < 1)
		return tensor_error(TENSOR_ERR_ARG, "%s: total %lld steps, expected >= 1", op,
				    (long long)total);
	if (warmup < 0) {
		if (!(warmup_ratio >= 0 && warmup_ratio < 1))
			return tensor_error(TENSOR_ERR_ARG, "%s: warmup_ratio %g is not in [0, 1)",
					    op, warmup_ratio);
		double w = warmup_ratio * (double)total, r = round(w);
		warmup = (int64_t)(fabs(w - r) <= 1e-9 * (r > 1 ? r : 1) ? r : ceil(w));
	}
	if (warmup > total)
		return tensor_error(TENSOR_ERR_ARG, "%s: warmup %lld is longer than total %lld", op,
				    (long long)warmup, (long long)total);
	*s = (struct nn_schedule){
		.kind = kind, .base_lr = base_lr, .min_lr = min_lr, .warmup = warmup, .total = total
	};
	return TENSOR_OK;
}

double nn_schedule_lr(const struct nn_schedule *s, int64_t step)
{
	if (!s) {
		tensor_error(TENSOR_ERR_ARG, "nn_schedule_lr: s is NULL");
		return NAN;
	}
	if (step < 0)
		step = 0;
	if (step < s->warmup)
		return s->base_lr * (double)step / (double)s->warmup;
	if (s->kind == NN_SCHEDULE_CONSTANT)
		return s->base_lr;
	if (step >= s->total)
		return s->min_lr;
	double q = (double)(step - s->warmup) / (double)(s->total - s->warmup);
	double f = s->kind == NN_SCHEDULE_COSINE ? 0.5 * (1 + cos(M_PI * q)) : 1 - q;
	return s->min_lr + (s->base_lr - s->min_lr) * f;
}
