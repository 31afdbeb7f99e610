/* Views and their backward: gradients flow back through the inverse view. */
#include "autograd.h"
#include "ag_internal.h"

/* Gradient of a reshaping view: reshape dout back to the input's shape. */
static int reshape_backward(struct ag_node *n, const struct tensor *g)
{
	struct tensor *x = n->inputs[0];
	tensor_heap_begin(); /* a view of dout when it can be: handed over, not copied */
	struct tensor *dx = tensor_reshape(g, x->ndim, x->shape);
	tensor_heap_end();
	return ag_accumulate_take(x, dx);
}

static struct tensor *record_reshape(const char *op, struct tensor *x, struct tensor *y)
{
	ag_record(op, y, reshape_backward, 1, &x);
	return y;
}

struct tensor *ag_view(struct tensor *t, int ndim, const int64_t *shape)
{
	AG_OP_REGION;
	return record_reshape("view", t, tensor_view(t, ndim, shape));
}

struct tensor *ag_reshape(struct tensor *t, int ndim, const int64_t *shape)
{
	AG_OP_REGION;
	return record_reshape("reshape", t, tensor_reshape(t, ndim, shape));
}

struct tensor *ag_squeeze(struct tensor *t, int dim)
{
	AG_OP_REGION;
	return record_reshape("squeeze", t, tensor_squeeze(t, dim));
}

struct tensor *ag_unsqueeze(struct tensor *t, int dim)
{
	AG_OP_REGION;
	return record_reshape("unsqueeze", t, tensor_unsqueeze(t, dim));
}

struct tensor *ag_contiguous(struct tensor *t)
{
	AG_OP_REGION;
	return record_reshape("contiguous", t, tensor_contiguous(t));
}

static int permute_backward(struct ag_node *n, const struct tensor *g)
{
	int inv[TENSOR_MAX_DIMS];
	for (int i = 0; i < g->ndim; i++)
		inv[n->i[i]] = i;
	return ag_accumulate(n->inputs[0], tensor_permute(g, inv));
}

struct tensor *ag_permute(struct tensor *t, const int *perm)
{
	AG_OP_REGION;
	struct tensor *y = tensor_permute(t, perm);
	struct ag_node *n = ag_record("permute", y, permute_backward, 1, &t);
	for (int i = 0; n && i < t->ndim; i++)
		n->i[i] = perm[i];
	return y;
}

struct tensor *ag_transpose(struct tensor *t, int d0, int d1)
{
	AG_OP_REGION;
	if (!t)
		return NULL;
	int a = tensor_dim_wrap("transpose", d0, t->ndim);
	int b = a < 0 ? -1 : tensor_dim_wrap("transpose", d1, t->ndim);
	if (b < 0)
		return NULL;
	int perm[TENSOR_MAX_DIMS];
	for (int i = 0; i < t->ndim; i++)
		perm[i] = i;
	perm[a] = b;
	perm[b] = a;
	return ag_permute(t, perm);
}

static int expand_backward(struct ag_node *n, const struct tensor *g)
{
	return ag_accumulate(n->inputs[0], g); /* ag_accumulate sums broadcast dims */
}

struct tensor *ag_expand(struct tensor *t, int ndim, const int64_t *shape)
{
	AG_OP_REGION;
	struct tensor *y = tensor_expand(t, ndim, shape);
	ag_record("expand", y, expand_backward, 1, &t);
	return y;
}

/* Gradient of a strided window into the input (slice, select, unfold): a
 * zero tensor of the input's shape with dout added through the same window.
 * i[0..2] = dim, start, step; i[3] = 1 for select (dim dropped), 2 for
 * unfold (window size in i[4]). */
static int window_backward(struct ag_node *n, const struct tensor *g)
{
	struct tensor *x = n->inputs[0];
	int dim = (int)n->i[0];
	int64_t start = n->i[1], step = n->i[2];
	tensor_heap_begin(); /* handed over as x's gradient, not copied */
	struct tensor *dx = tensor_zeros(x->dtype, x->storage->device, x->ndim, x->shape);
	tensor_heap_end();
	if (!dx)
		return tensor_last_status();
	int rc = TENSOR_OK;
	if (n->i[3] == 2) { /* unfold: window offset j lands at dim index w*step + j */
		int64_t size = n->i[4], nw = g->shape[dim];
		for (int64_t j = 0; j < size && rc == TENSOR_OK; j++) {
			struct tensor *dst =
			    tensor_slice(dx, dim, j, j + (nw - 1) * step + 1, step);
			struct tensor *gj = tensor_select(g, g->ndim - 1, j);
			struct tensor *sum = tensor_add(dst, gj);
			rc = sum ? tensor_copy_(dst, sum) : tensor_last_status();
		}
	} else {
		int64_t len = n->i[3] == 1 ? 1 : g->shape[dim];
		if (len > 0) {
			struct tensor *dst =
			    tensor_slice(dx, dim, start, start + (len - 1) * step + 1, step);
			const struct tensor *src = n->i[3] == 1 ? tensor_unsqueeze(g, dim) : g;
			rc = dst && src ? tensor_copy_(dst, src) : tensor_last_status();
		}
	}
	if (rc < 0) {
		tensor_free(dx);
		return rc;
	}
	return ag_accumulate_take(x, dx);
}

static struct tensor *record_window(const char *op, struct tensor *t, struct tensor *y, int dim,
				    int64_t start, int64_t step, int kind, int64_t size)
{
	struct ag_node *n = ag_record(op, y, window_backward, 1, &t);
	if (n) {
		n->i[0] = tensor_dim_wrap(op, dim, t->ndim);
		n->i[1] = start;
		n->i[2] = step;
		n->i[3] = kind;
		n->i[4] = size;
	}
	return y;
}

struct tensor *ag_slice(struct tensor *t, int dim, int64_t start, int64_t end, int64_t step)
{
	AG_OP_REGION;
	struct tensor *y = tensor_slice(t, dim, start, end, step);
	if (!y)
		return NULL;
	int d = tensor_dim_wrap("slice", dim, t->ndim);
	int64_t n = t->shape[d], s0 = start < 0 ? start + n : start; /* as tensor_slice clamps */
	s0 = s0 < 0 ? 0 : s0 > n ? n : s0;
	return record_window("slice", t, y, d, s0, step, 0, 0);
}

struct tensor *ag_narrow(struct tensor *t, int dim, int64_t start, int64_t len)
{
	AG_OP_REGION;
	struct tensor *y = tensor_narrow(t, dim, start, len);
	return y ? record_window("narrow", t, y, dim, start, 1, 0, 0) : NULL;
}

struct tensor *ag_select(struct tensor *t, int dim, int64_t index)
{
	AG_OP_REGION;
	struct tensor *y = tensor_select(t, dim, index);
	if (!y)
		return NULL;
	int d = tensor_dim_wrap("select", dim, t->ndim);
	return record_window("select", t, y, d, index < 0 ? index + t->shape[d] : index, 1, 1, 0);
}

struct tensor *ag_unfold(struct tensor *t, int dim, int64_t size, int64_t step)
{
	AG_OP_REGION;
	struct tensor *y = tensor_unfold(t, dim, size, step);
	return y ? record_window("unfold", t, y, dim, 0, step, 2, size) : NULL;
}
