/* Gradient clipping by global norm. */
#include <math.h>

#include "nn.h"
#include "optim_internal.h"

/* ---- gradient clipping ------------------------------------------------------------ */

/* a[0]: running sum of squares (in double); a[1]: scale. */
static int sumsq_chunk(struct tensor *const *t, struct update *u)
{
	struct tensor *s = tensor_sum(tensor_unary(TENSOR_SQUARE, t[0], 0), 0, NULL, false);
	if (!s)
		return optim_failed();
	u->a[0] += tensor_get(s, NULL);
	return TENSOR_OK;
}

static int scale_chunk(struct tensor *const *t, struct update *u)
{
	return optim_store(t[0], tensor_mul_scalar(t[0], u->a[1]));
}

/* The gradients to clip: the flat buffer, or each parameter's gradient. */
static int for_grads(const char *op, struct nn_params *ps, struct update *u)
{
	if (ps->flat_grad) {
		int rc = tensor_check_writable(op, ps->flat_grad);
		return rc < 0 || tensor_numel(ps->flat_grad) == 0
			   ? rc
			   : optim_for_chunks(&ps->flat_grad, 1, u);
	}
	for (int i = 0; i < ps->n; i++) {
		struct tensor *g = ps->items[i].value->grad;
		if (!g || tensor_numel(g) == 0)
			continue;
		tensor_scope_begin();
		struct tensor *f = optim_flat1(op, g);
		int rc = f ? tensor_check_writable(op, g) : optim_failed();
		if (rc == TENSOR_OK)
			rc = optim_for_chunks(&f, 1, u);
		tensor_scope_end();
		if (rc < 0)
			return rc;
	}
	return TENSOR_OK;
}

double nn_clip_grad_norm(struct nn_params *ps, double max_norm)
{
	static const char op[] = "nn_clip_grad_norm";
	if (!ps)
		return tensor_error(TENSOR_ERR_ARG, "%s: ps is NULL", op);
	if (!(max_norm > 0))
		return tensor_error(TENSOR_ERR_ARG, "%s: max_norm %g must be > 0", op, max_norm);
	struct update u = { .chunk = sumsq_chunk };
	ag_no_grad_begin();
	int rc = for_grads(op, ps, &u);
	double norm = sqrt(u.a[0]);
	if (rc == TENSOR_OK && isfinite(norm) && norm > max_norm) {
		u.chunk = scale_chunk;
		u.a[1] = max_norm / (norm + 1e-6);
		rc = for_grads(op, ps, &u);
	}
	ag_no_grad_end();
	return rc < 0 ? rc : norm;
}
