/* Linear layer: y = x W^T + b, weight [out, in] as PyTorch. */
#include <math.h>

#include "nn_internal.h"
#include "ag_internal.h"

int nn_linear_init(struct nn_linear *m, struct nn_params *ps, const char *name, int64_t in,
		   int64_t out, bool bias)
{
	if (!m || !ps)
		return tensor_error(TENSOR_ERR_ARG, "nn_linear_init: module or params is NULL");
	*m = (struct nn_linear){ 0 };
	if (in < 1 || out < 1)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_linear_init: '%s': in %lld and out %lld must be >= 1",
				    name ? name : "", (long long)in, (long long)out);
	char full[NN_NAME_MAX];
	double bound = 1.0 / sqrt((double)in); /* kaiming_uniform(a = sqrt 5) = U(+-1/sqrt(in)) */
	struct tensor *w = nn_name(full, name, "weight")
			       ? nn_param_new(ps, full, 2, (int64_t[]){ out, in }, false)
			       : NULL;
	int rc =
	    w ? nn_init_uniform(w, -bound, bound, nn_param_seed(ps, full)) : tensor_last_status();
	struct tensor *b = NULL;
	if (rc == TENSOR_OK && bias) {
		b = nn_name(full, name, "bias") ? nn_param_new(ps, full, 1, &out, true) : NULL;
		rc = b ? nn_init_uniform(b, -bound, bound, nn_param_seed(ps, full))
		       : tensor_last_status();
	}
	if (rc < 0)
		return rc; /* parameters already registered stay owned by ps */
	*m = (struct nn_linear){ .weight = w, .bias = b, .in = in, .out = out };
	return TENSOR_OK;
}

/* y = h W^T + b as one node: the GEMM accumulates onto the broadcast bias, so
 * there is no separate product to add and free. Saved: h and W as the product
 * read them (W's bf16 copy in a mixed-precision region). */
static int linear_bias_backward(struct ag_node *n, const struct tensor *g)
{
	struct tensor *h = n->saved[0], *w = n->saved[1];
	enum tensor_dtype prev = ag_node_precision_begin(n);
	int rc = TENSOR_OK;
	if (n->inputs[0]->requires_grad) /* dh = g W, g [..., out], W [out, in] */
		rc = ag_accumulate_take(n->inputs[0], ag_heap_matmul(g, w));
	if (rc == TENSOR_OK && n->inputs[1]->requires_grad) { /* dW = g^T h over all rows */
		int64_t rows = tensor_numel(g) / g->shape[g->ndim - 1];
		struct tensor *g2 =
		    tensor_reshape(g, 2, (int64_t[]){ rows, g->shape[g->ndim - 1] });
		struct tensor *h2 =
		    tensor_reshape(h, 2, (int64_t[]){ rows, h->shape[h->ndim - 1] });
		rc = ag_accumulate(n->inputs[1], tensor_matmul_to(tensor_transpose(g2, 0, 1), h2,
								  ag_product_dtype(g2)));
	}
	tensor_set_matmul_precision(prev);
	if (rc == TENSOR_OK && n->inputs[2]->requires_grad)
		rc = ag_accumulate(n->inputs[2], g); /* summed over the broadcast rows */
	return rc;
}

static struct tensor *linear_bias(struct tensor *h, struct tensor *w, struct tensor *b)
{
	AG_OP_REGION;
	struct tensor *rh = h, *rw = w;
	ag_autocast_pair(&rh, &rw);
	struct tensor *y = rw ? tensor_matmul_add(rh, tensor_transpose(rw, 0, 1), b) : NULL;
	struct tensor *in[3] = { h, w, b };
	struct ag_node *n = ag_record("linear", y, linear_bias_backward, 3, in);
	if (n) {
		ag_node_keep_precision(n);
		ag_save(n, rh);
		ag_save(n, rw);
	}
	return y;
}

struct tensor *nn_linear_forward(const struct nn_linear *m, struct tensor *x)
{
	if (nn_require_scope("nn_linear_forward") < 0 || !x)
		return NULL;
	if (!m || !m->weight) {
		tensor_error(TENSOR_ERR_ARG,
			     "nn_linear_forward: module is NULL or not initialised");
		return NULL;
	}
	char bx[128];
	if (x->ndim < 1 || x->shape[x->ndim - 1] != m->in) {
		tensor_error(TENSOR_ERR_SHAPE, "nn_linear_forward: x %s last dim != in %lld",
			     tensor_shape_str(x, bx, sizeof bx), (long long)m->in);
		return NULL;
	}
	if (x->dtype != m->weight->dtype) {
		tensor_error(TENSOR_ERR_DTYPE, "nn_linear_forward: x %s is %s, weight is %s",
			     tensor_shape_str(x, bx, sizeof bx), tensor_dtype_name(x->dtype),
			     tensor_dtype_name(m->weight->dtype));
		return NULL;
	}
	/* [..., in] contiguous: one GEMM over all rows; otherwise a batched
	 * matmul over x's strides (no copy). */
	int64_t shape[TENSOR_MAX_DIMS], rows = 1;
	for (int d = 0; d < x->ndim - 1; d++) {
		shape[d] = x->shape[d];
		rows *= x->shape[d];
	}
	shape[x->ndim - 1] = m->out;
	bool flatten = x->ndim > 2 && tensor_is_contiguous(x);
	struct tensor *h = flatten ? ag_view(x, 2, (int64_t[]){ rows, m->in }) : x;
	struct tensor *y = m->bias ? linear_bias(h, m->weight, m->bias)
				   : ag_matmul(h, ag_transpose(m->weight, 0, 1));
	return flatten ? ag_view(y, x->ndim, shape) : y;
}

void nn_linear_free(struct nn_linear *m)
{
	if (m)
		*m = (struct nn_linear){ 0 };
}
