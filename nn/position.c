/* Position embeddings added to x [..., T, dim]: learned (a parameter) or
 * sinusoidal (a fixed table, Vaswani et al.). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "nn.h"
#include "nn_internal.h"
#include "ag_internal.h"
#include "mem.h"

/* PE[pos, 2i] = sin(pos / 10000^(2i/dim)), PE[pos, 2i+1] = cos(same), a heap
 * tensor of dtype (f32 or f64, as nn_params) on device. */
static struct tensor *sinusoid_table(enum tensor_dtype dt, enum tensor_device dev, int64_t max_len,
				     int64_t dim)
{
	size_t n = (size_t)max_len * (size_t)dim, size = tensor_dtype_size(dt);
	void *pe = n / (size_t)dim == (size_t)max_len && n <= SIZE_MAX / size
		       ? tensor_host_malloc(n * size)
		       : NULL;
	if (!pe) {
		tensor_error(TENSOR_ERR_NOMEM,
			     "nn_position_init: no memory for a [%lld,%lld] table",
			     (long long)max_len, (long long)dim);
		return NULL;
	}
	for (int64_t j = 0; j < dim; j++) {
		double inv_freq = pow(10000.0, -(double)(j - j % 2) / (double)dim);
		for (int64_t pos = 0; pos < max_len; pos++) {
			double a = (double)pos * inv_freq, v = j % 2 ? cos(a) : sin(a);
			if (dt == TENSOR_F64)
				((double *)pe)[pos * dim + j] = v;
			else
				((float *)pe)[pos * dim + j] = (float)v;
		}
	}
	tensor_heap_begin(); /* outlives every scope; freed by nn_params_free */
	struct tensor *t = tensor_from_data(dt, dev, 2, (int64_t[]){ max_len, dim }, pe);
	tensor_heap_end();
	free(pe);
	return t;
}

int nn_position_init(struct nn_position *m, struct nn_params *ps, const char *name, int64_t max_len,
		     int64_t dim, bool learned)
{
	if (!m || !ps)
		return tensor_error(TENSOR_ERR_ARG, "nn_position_init: module or params is NULL");
	*m = (struct nn_position){ 0 };
	if (max_len < 1 || dim < 1)
		return tensor_error(
		    TENSOR_ERR_ARG,
		    "nn_position_init: '%s': max_len %lld and dim %lld must be >= 1",
		    name ? name : "", (long long)max_len, (long long)dim);
	struct tensor *w;
	if (learned) {
		char full[NN_NAME_MAX];
		w = nn_name(full, name, "weight")
			? nn_param_new(ps, full, 2, (int64_t[]){ max_len, dim }, true)
			: NULL;
		if (w && nn_init_normal(w, 0, 0.02, nn_param_seed(ps, full)) < 0)
			return tensor_last_status();
	} else {
		w = sinusoid_table(ps->dtype, ps->device, max_len, dim);
		if (w && nn_params_keep(ps, w) < 0) {
			tensor_free(w);
			return tensor_last_status();
		}
	}
	if (!w)
		return tensor_last_status();
	*m =
	    (struct nn_position){ .learned = learned, .weight = w, .max_len = max_len, .dim = dim };
	return TENSOR_OK;
}

/* x + the table's first T rows; when reuse, into x's buffer (ag_add_reuse;
 * without gradients, x itself is returned). */
static struct tensor *position_add(const struct nn_position *m, struct tensor *x, bool reuse)
{
	if (nn_require_scope("nn_position_forward") < 0 || !x)
		return NULL;
	if (!m || !m->weight) {
		tensor_error(TENSOR_ERR_ARG,
			     "nn_position_forward: module is NULL or not initialised");
		return NULL;
	}
	char bx[128];
	if (x->ndim < 2 || x->shape[x->ndim - 1] != m->dim) {
		tensor_error(TENSOR_ERR_SHAPE,
			     "nn_position_forward: x %s must be [B, T, %lld] (or [..., T, %lld])",
			     tensor_shape_str(x, bx, sizeof bx), (long long)m->dim,
			     (long long)m->dim);
		return NULL;
	}
	if (x->dtype != m->weight->dtype) {
		tensor_error(TENSOR_ERR_DTYPE, "nn_position_forward: x %s is %s, table is %s",
			     tensor_shape_str(x, bx, sizeof bx), tensor_dtype_name(x->dtype),
			     tensor_dtype_name(m->weight->dtype));
		return NULL;
	}
	int64_t T = x->shape[x->ndim - 2];
	if (T > m->max_len) {
		tensor_error(
		    TENSOR_ERR_SHAPE, "nn_position_forward: x %s has T %lld > max_len %lld",
		    tensor_shape_str(x, bx, sizeof bx), (long long)T, (long long)m->max_len);
		return NULL;
	}
	if (reuse && !ag_grad_enabled()) { /* x itself, updated */
		struct tensor *table = tensor_narrow(m->weight, 0, 0, T);
		return table && tensor_add_(x, table) == TENSOR_OK ? x : NULL;
	}
	struct tensor *table = ag_narrow(m->weight, 0, 0, T);
	return reuse ? ag_add_reuse(x, table) : ag_add(x, table);
}

struct tensor *nn_position_forward(const struct nn_position *m, struct tensor *x)
{
	return position_add(m, x, false);
}

struct tensor *nn_position_forward_reuse(const struct nn_position *m, struct tensor *x)
{
	return position_add(m, x, true);
}

void nn_position_free(struct nn_position *m)
{
	if (m)
		*m = (struct nn_position){ 0 };
}

int nn_conv_position_init(struct nn_conv_position *m, struct nn_params *ps, const char *name,
			  int64_t dim, int64_t kernel)
{
	if (!m || !ps)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_conv_position_init: module or params is NULL");
	*m = (struct nn_conv_position){ 0 };
	if (dim < 1 || kernel < 1 || kernel % 2 == 0)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_conv_position_init: '%s': dim %lld must be >= 1 and kernel "
				    "%lld odd and >= 1",
				    name ? name : "", (long long)dim, (long long)kernel);
	char full[NN_NAME_MAX];
	struct tensor *w = nn_name(full, name, "weight")
			       ? nn_param_new(ps, full, 3, (int64_t[]){ dim, dim, kernel }, false)
			       : NULL;
	if (!w)
		return tensor_last_status();
	*m = (struct nn_conv_position){ .weight = w, .dim = dim, .kernel = kernel };
	return TENSOR_OK; /* nn_param_new's zeros: the identity */
}

struct tensor *nn_conv_position_forward(const struct nn_conv_position *m, struct tensor *x,
					const struct tensor *mask)
{
	if (nn_require_scope("nn_conv_position_forward") < 0 || !x)
		return NULL;
	if (!m || !m->weight) {
		tensor_error(TENSOR_ERR_ARG,
			     "nn_conv_position_forward: module is NULL or not initialised");
		return NULL;
	}
	char bx[128];
	if (x->ndim != 3 || x->shape[2] != m->dim || x->dtype != m->weight->dtype) {
		tensor_error(x->ndim == 3 && x->shape[2] == m->dim ? TENSOR_ERR_DTYPE
								   : TENSOR_ERR_SHAPE,
			     "nn_conv_position_forward: x %s %s, expected [B, T, %lld] %s",
			     tensor_shape_str(x, bx, sizeof bx), tensor_dtype_name(x->dtype),
			     (long long)m->dim, tensor_dtype_name(m->weight->dtype));
		return NULL;
	}
	if (nn_check_mask("nn_conv_position_forward", mask, x, x->shape[1]) < 0)
		return NULL;
	/* no tape: the temporaries die in a scope of their own, not the caller's */
	bool scoped = !ag_grad_enabled();
	if (scoped)
		tensor_scope_begin();
	struct tensor *pad = mask ? nn_mask_compare(mask, x->dtype, true) : NULL; /* 1 = padding */
	struct tensor *pad3 = pad ? tensor_unsqueeze(pad, 2) : NULL;
	struct tensor *in = mask ? ag_masked_fill(x, pad3, 0) : x;
	/* [B, dim, T] channels first for the convolution, then back */
	struct tensor *c = ag_conv1d(ag_transpose(in, 1, 2), m->weight, NULL, 1, m->kernel / 2);
	struct tensor *y = c ? ag_add(x, ag_transpose(c, 1, 2)) : NULL;
	if (scoped) {
		y = y ? tensor_scope_keep(y) : NULL;
		tensor_scope_end();
	}
	return y;
}

void nn_conv_position_free(struct nn_conv_position *m)
{
	if (m)
		*m = (struct nn_conv_position){ 0 };
}
