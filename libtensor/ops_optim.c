/* Optimizer front-ends: the fused AdamW and SGD updates. */
#include <math.h>

#include "backend.h"

/* t[0..n): one shape, float dtype, device, and contiguous; all but the last
 * (the gradient) writable. */
static int check_state(const char *op, struct tensor *const *t, const char *const *name, int n)
{
	for (int i = 0; i < n; i++)
		if (!t[i])
			return tensor_error(TENSOR_ERR_ARG, "%s: %s is NULL", op, name[i]);
	int rc = tensor_check_float(op, t[0]);
	char b0[128], bi[128];
	tensor_shape_str(t[0], b0, sizeof b0);
	for (int i = 1; i < n && rc == TENSOR_OK; i++) {
		rc = tensor_check_pair(op, t[0], t[i]);
		if (rc == TENSOR_OK && !tensor_same_shape(t[0], t[i]))
			rc = tensor_error(TENSOR_ERR_SHAPE, "%s: %s %s differs from p %s", op,
					  name[i], tensor_shape_str(t[i], bi, sizeof bi), b0);
	}
	for (int i = 0; i < n && rc == TENSOR_OK; i++)
		if (!tensor_is_contiguous(t[i]))
			rc = tensor_error(TENSOR_ERR_STATE, "%s: %s %s is not contiguous", op,
					  name[i], tensor_shape_str(t[i], bi, sizeof bi));
	for (int i = 0; i < n - 1 && rc == TENSOR_OK; i++)
		rc = tensor_check_writable(op, t[i]);
	return rc;
}

int tensor_adamw_(struct tensor *p, struct tensor *m, struct tensor *v, const struct tensor *g,
		  double lr, double beta1, double beta2, double eps, double weight_decay,
		  int64_t step)
{
	static const char OP[] = "adamw_";
	static const char *const name[4] = { "p", "m", "v", "g" };
	struct tensor *t[4] = { p, m, v, (struct tensor *)g };
	int rc = check_state(OP, t, name, 4);
	if (rc < 0)
		return rc;
	if (!(lr >= 0 && isfinite(lr)) || !(beta1 >= 0 && beta1 < 1) ||
	    !(beta2 >= 0 && beta2 < 1) || !(eps > 0 && isfinite(eps)) ||
	    !(weight_decay >= 0 && isfinite(weight_decay)) || step < 1)
		return tensor_error(
		    TENSOR_ERR_ARG,
		    "%s: expected lr >= 0, betas in [0, 1), eps > 0, weight_decay >= "
		    "0 and step >= 1, got lr %g, betas (%g, %g), eps %g, "
		    "weight_decay %g, step %lld",
		    OP, lr, beta1, beta2, eps, weight_decay, (long long)step);
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(p->storage->device, adamw, OP);
	if (!be)
		return tensor_last_status();
	const double h[7] = { lr,
			      beta1,
			      beta2,
			      eps,
			      weight_decay,
			      1 - pow(beta1, (double)step),
			      1 - pow(beta2, (double)step) };
	return tensor_numel(p) > 0 ? be->adamw(p, m, v, g, h) : TENSOR_OK;
}

int tensor_sgd_(struct tensor *p, struct tensor *buf, const struct tensor *g, double lr,
		double momentum, double weight_decay)
{
	static const char OP[] = "sgd_";
	const char *const name[3] = { "p", buf ? "buf" : "g", "g" };
	struct tensor *t[3] = { p, buf ? buf : (struct tensor *)g, (struct tensor *)g };
	int rc = check_state(OP, t, name, buf ? 3 : 2);
	if (rc < 0)
		return rc;
	if (!(lr >= 0 && isfinite(lr)) || !(momentum >= 0 && isfinite(momentum)) ||
	    !(weight_decay >= 0 && isfinite(weight_decay)))
		return tensor_error(TENSOR_ERR_ARG,
				    "%s: expected finite lr, momentum and weight_decay >= 0, got "
				    "lr %g, momentum %g, weight_decay %g",
				    OP, lr, momentum, weight_decay);
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(p->storage->device, sgd, OP);
	if (!be)
		return tensor_last_status();
	const double h[3] = { lr, momentum, weight_decay };
	return tensor_numel(p) > 0 ? be->sgd(p, buf, g, h) : TENSOR_OK;
}
