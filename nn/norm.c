/* LayerNorm and RMSNorm modules over the last dim. */
#include <math.h>

#include "nn_internal.h"

/* Shared checks of the init arguments; name the module in op. */
static int check_init(const char *op, const void *m, const struct nn_params *ps, const char *name,
		      int64_t dim, double eps)
{
	if (!m || !ps)
		return tensor_error(TENSOR_ERR_ARG, "%s: module or params is NULL", op);
	if (dim < 1)
		return tensor_error(TENSOR_ERR_ARG, "%s: '%s': dim %lld must be >= 1", op,
				    name ? name : "", (long long)dim);
	if (!(eps >= 0 && isfinite(eps)))
		return tensor_error(TENSOR_ERR_ARG, "%s: '%s': eps %g must be finite and >= 0", op,
				    name ? name : "", eps);
	return TENSOR_OK;
}

/* A no-decay parameter [dim] named prefix.suffix filled with value. */
static struct tensor *vector_param(struct nn_params *ps, const char *name, const char *suffix,
				   int64_t dim, double value)
{
	char full[NN_NAME_MAX];
	struct tensor *t =
	    nn_name(full, name, suffix) ? nn_param_new(ps, full, 1, &dim, true) : NULL;
	return t && tensor_fill_(t, value) == TENSOR_OK ? t : NULL;
}

/* x must be a tensor [..., dim] of the parameters' dtype. */
static bool check_input(const char *op, const struct tensor *w, int64_t dim, const struct tensor *x)
{
	char bx[128];
	if (!w) {
		tensor_error(TENSOR_ERR_ARG, "%s: module is NULL or not initialised", op);
		return false;
	}
	if (x->ndim < 1 || x->shape[x->ndim - 1] != dim) {
		tensor_error(TENSOR_ERR_SHAPE, "%s: x %s last dim != dim %lld", op,
			     tensor_shape_str(x, bx, sizeof bx), (long long)dim);
		return false;
	}
	if (x->dtype != w->dtype) {
		tensor_error(TENSOR_ERR_DTYPE, "%s: x %s is %s, weight is %s", op,
			     tensor_shape_str(x, bx, sizeof bx), tensor_dtype_name(x->dtype),
			     tensor_dtype_name(w->dtype));
		return false;
	}
	return true;
}

int nn_layer_norm_init(struct nn_layer_norm *m, struct nn_params *ps, const char *name, int64_t dim,
		       double eps)
{
	if (m)
		*m = (struct nn_layer_norm){ 0 };
	int rc = check_init("nn_layer_norm_init", m, ps, name, dim, eps);
	if (rc < 0)
		return rc;
	struct tensor *w = vector_param(ps, name, "weight", dim, 1.0);
	struct tensor *b = w ? vector_param(ps, name, "bias", dim, 0.0) : NULL;
	if (!b)
		return tensor_last_status();
	*m = (struct nn_layer_norm){ .weight = w, .bias = b, .dim = dim, .eps = eps };
	return TENSOR_OK;
}

struct tensor *nn_layer_norm_forward(const struct nn_layer_norm *m, struct tensor *x)
{
	if (nn_require_scope("nn_layer_norm_forward") < 0 || !x)
		return NULL;
	if (!check_input("nn_layer_norm_forward", m ? m->weight : NULL, m ? m->dim : 0, x))
		return NULL;
	return ag_layer_norm(x, m->weight, m->bias, m->eps);
}

void nn_layer_norm_free(struct nn_layer_norm *m)
{
	if (m)
		*m = (struct nn_layer_norm){ 0 };
}

int nn_rms_norm_init(struct nn_rms_norm *m, struct nn_params *ps, const char *name, int64_t dim,
		     double eps)
{
	if (m)
		*m = (struct nn_rms_norm){ 0 };
	int rc = check_init("nn_rms_norm_init", m, ps, name, dim, eps);
	if (rc < 0)
		return rc;
	struct tensor *w = vector_param(ps, name, "weight", dim, 1.0);
	if (!w)
		return tensor_last_status();
	*m = (struct nn_rms_norm){ .weight = w, .dim = dim, .eps = eps };
	return TENSOR_OK;
}

struct tensor *nn_rms_norm_forward(const struct nn_rms_norm *m, struct tensor *x)
{
	if (nn_require_scope("nn_rms_norm_forward") < 0 || !x)
		return NULL;
	if (!check_input("nn_rms_norm_forward", m ? m->weight : NULL, m ? m->dim : 0, x))
		return NULL;
	return ag_rms_norm(x, m->weight, m->eps);
}

void nn_rms_norm_free(struct nn_rms_norm *m)
{
	if (m)
		*m = (struct nn_rms_norm){ 0 };
}
