/* Position-wise feed-forward: plain fc2(dropout(act(fc1 x))) with biases, or
 * gated SwiGLU w2(dropout(silu(w1 x) * w3 x)) without biases (as LLaMA). */
#include "nn_internal.h"

int nn_feed_forward_init(struct nn_feed_forward *m, struct nn_params *ps, const char *name,
			 int64_t dim, int64_t hidden, enum nn_activation act, bool gated,
			 double dropout)
{
	if (!m || !ps)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_feed_forward_init: module or params is NULL");
	*m = (struct nn_feed_forward){ 0 };
	const char *nm = name ? name : "";
	if (dim < 1 || hidden < 1)
		return tensor_error(
		    TENSOR_ERR_ARG,
		    "nn_feed_forward_init: '%s': dim %lld, hidden %lld must be >= 1", nm,
		    (long long)dim, (long long)hidden);
	if ((unsigned)act >= NN_NACTIVATIONS)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_feed_forward_init: '%s': unknown activation %d", nm,
				    (int)act);
	if (gated && act != NN_SILU)
		return tensor_error(
		    TENSOR_ERR_ARG,
		    "nn_feed_forward_init: '%s': the gated (SwiGLU) form uses silu, got %s", nm,
		    nn_activation_name(act));
	struct nn_feed_forward f = { .gated = gated, .act = act, .dim = dim, .hidden = hidden };
	char n1[NN_NAME_MAX], n2[NN_NAME_MAX], n3[NN_NAME_MAX];
	if (!nn_name(n1, nm, gated ? "w1" : "fc1") || !nn_name(n2, nm, gated ? "w2" : "fc2") ||
	    !nn_name(n3, nm, "w3"))
		return tensor_last_status();
	int rc = nn_dropout_init(&f.dropout, ps, dropout);
	if (rc == TENSOR_OK)
		rc = nn_linear_init(&f.fc1, ps, n1, dim, hidden, !gated);
	if (rc == TENSOR_OK && gated)
		rc = nn_linear_init(&f.fc3, ps, n3, dim, hidden, false);
	if (rc == TENSOR_OK)
		rc = nn_linear_init(&f.fc2, ps, n2, hidden, dim, !gated);
	if (rc < 0)
		return rc;
	*m = f;
	return TENSOR_OK;
}

static struct tensor *forward_rows(const struct nn_feed_forward *m, struct tensor *x)
{
	struct tensor *h = nn_activation_forward(m->act, nn_linear_forward(&m->fc1, x));
	if (m->gated)
		h = ag_mul(h, nn_linear_forward(&m->fc3, x));
	return nn_linear_forward(&m->fc2, nn_dropout_forward(&m->dropout, h));
}

/* Rows per block of the no-grad forward: a block's [rows, hidden] stays in
 * cache, and the peak holds one block's instead of the whole input's. */
#define FF_BLOCK_ROWS 1024

/* Without gradients (and without dropout) the rows are independent: each
 * block runs in its own scope and is copied into the output. */
static struct tensor *forward_blocked(const struct nn_feed_forward *m, struct tensor *x,
				      int64_t rows)
{
	struct tensor *y = tensor_empty(x->dtype, x->storage->device, x->ndim, x->shape);
	struct tensor *x2 = tensor_view(x, 2, (int64_t[]){ rows, m->dim });
	struct tensor *y2 = y ? tensor_view(y, 2, (int64_t[]){ rows, m->dim }) : NULL;
	int rc = x2 && y2 ? TENSOR_OK : tensor_last_status();
	for (int64_t r0 = 0; r0 < rows && rc == TENSOR_OK; r0 += FF_BLOCK_ROWS) {
		int64_t cnt = rows - r0 < FF_BLOCK_ROWS ? rows - r0 : FF_BLOCK_ROWS;
		tensor_scope_begin();
		struct tensor *yb = forward_rows(m, tensor_narrow(x2, 0, r0, cnt));
		rc = yb ? tensor_copy_(tensor_narrow(y2, 0, r0, cnt), yb) : tensor_last_status();
		tensor_scope_end();
	}
	return rc == TENSOR_OK ? y : NULL;
}

struct tensor *nn_feed_forward_forward(const struct nn_feed_forward *m, struct tensor *x)
{
	if (nn_require_scope("nn_feed_forward_forward") < 0 || !x)
		return NULL;
	if (!m || !m->fc1.weight) {
		tensor_error(TENSOR_ERR_ARG,
			     "nn_feed_forward_forward: module is NULL or not initialised");
		return NULL;
	}
	char bx[128];
	if (x->ndim < 1 || x->shape[x->ndim - 1] != m->dim) {
		tensor_error(TENSOR_ERR_SHAPE, "nn_feed_forward_forward: x %s last dim != dim %lld",
			     tensor_shape_str(x, bx, sizeof bx), (long long)m->dim);
		return NULL;
	}
	int64_t rows = tensor_numel(x) / m->dim;
	bool dropping = m->dropout.ps && m->dropout.ps->training && m->dropout.p > 0;
	if (!ag_grad_enabled() && !dropping && rows > 2 * FF_BLOCK_ROWS && tensor_is_contiguous(x))
		return forward_blocked(m, x, rows);
	return forward_rows(m, x);
}

void nn_feed_forward_free(struct nn_feed_forward *m)
{
	if (m)
		*m = (struct nn_feed_forward){ 0 };
}
