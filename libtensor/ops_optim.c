/* Optimizer front-ends: the fused AdamW update. */
#include <math.h>

#include "backend.h"

static const char OP[] = "adamw_";

/* p, m, v and g: one shape, float dtype, device, and contiguous; p, m, v writable. */
static int check_adamw(struct tensor *const t[4])
{
	static const char *const name[4] = { "p", "m", "v", "g" };
	for (int i = 0; i < 4; i++)
		if (!t[i])
			return tensor_error(TENSOR_ERR_ARG, "%s: %s is NULL", OP, name[i]);
	int rc = tensor_check_float(OP, t[0]);
	char b0[128], bi[128];
	tensor_shape_str(t[0], b0, sizeof b0);
	for (int i = 1; i < 4 && rc == TENSOR_OK; i++) {
		rc = tensor_check_pair(OP, t[0], t[i]);
		if (rc == TENSOR_OK && !tensor_same_shape(t[0], t[i]))
			rc = tensor_error(TENSOR_ERR_SHAPE, "%s: %s %s differs from p %s", OP,
					  name[i], tensor_shape_str(t[i], bi, sizeof bi), b0);
	}
	for (int i = 0; i < 4 && rc == TENSOR_OK; i++)
		if (!tensor_is_contiguous(t[i]))
			rc = tensor_error(TENSOR_ERR_STATE, "%s: %s %s is not contiguous", OP,
					  name[i], tensor_shape_str(t[i], bi, sizeof bi));
	for (int i = 0; i < 3 && rc == TENSOR_OK; i++)
		rc = tensor_check_writable(OP, t[i]);
	return rc;
}

int tensor_adamw_(struct tensor *p, struct tensor *m, struct tensor *v, const struct tensor *g,
		  double lr, double beta1, double beta2, double eps, double weight_decay,
		  int64_t step)
{
	struct tensor *t[4] = { p, m, v, (struct tensor *)g };
	int rc = check_adamw(t);
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
	const struct tensor_backend *be = tensor_backend_get(p->storage->device);
	if (!be || TENSOR_SLOT(be, adamw, OP) < 0)
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
