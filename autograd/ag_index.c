/* Indexing and joining with their backward: index_select, gather, concat,
 * stack and split. Index arguments are saved, never differentiated. */
#include "autograd.h"
#include "ag_internal.h"

/* ---- index_select, gather --------------------------------------------------- */

/* dout added back through the saved index, index_add_ for index_select
 * (i[1] = 0), scatter_add_ for gather (i[1] = 1): straight into the gradient
 * of a leaf that has one (an embedding table's), else into zeros(src) made on
 * the heap and handed over. */
static int indexed_backward(struct ag_node *n, const struct tensor *g)
{
	struct tensor *src = n->inputs[0];
	const struct tensor *idx = n->saved[0];
	int dim = (int)n->i[0];
	struct tensor *leaf = src->grad;
	bool direct = leaf && !src->node && leaf->dtype == g->dtype && tensor_is_contiguous(leaf) &&
		      tensor_same_shape(leaf, src);
	struct tensor *dsrc = leaf;
	if (!direct) {
		tensor_heap_begin();
		dsrc = tensor_zeros(src->dtype, src->storage->device, src->ndim, src->shape);
		tensor_heap_end();
		if (!dsrc)
			return tensor_last_status();
	}
	int rc =
	    n->i[1] ? tensor_scatter_add_(dsrc, dim, idx, g) : tensor_index_add_(dsrc, dim, idx, g);
	if (direct)
		return rc;
	if (rc < 0) {
		tensor_free(dsrc);
		return rc;
	}
	return ag_accumulate_take(src, dsrc);
}

static struct tensor *record_indexed(const char *op, struct tensor *src, int dim,
				     const struct tensor *idx, struct tensor *y, int kind)
{
	struct ag_node *n = ag_record(op, y, indexed_backward, 1, &src);
	if (n) {
		n->i[0] = tensor_dim_wrap(op, dim, src->ndim); /* valid: the forward succeeded */
		n->i[1] = kind;
		ag_save(n, (struct tensor *)idx);
	}
	return y;
}

struct tensor *ag_index_select(struct tensor *src, int dim, const struct tensor *idx)
{
	AG_OP_REGION;
	struct tensor *y = tensor_index_select(src, dim, idx);
	return record_indexed("index_select", src, dim, idx, y, 0);
}

struct tensor *ag_gather(struct tensor *src, int dim, const struct tensor *idx)
{
	AG_OP_REGION;
	struct tensor *y = tensor_gather(src, dim, idx);
	return record_indexed("gather", src, dim, idx, y, 1);
}

/* ---- concat, stack ---------------------------------------------------------- */

/* A node's output covers its inputs along dim i[0]; input k starts at i[1 + k].
 * An input with the output's ndim is a narrow of the output (concat parts and
 * the tail proxies below); one with a dim fewer is a select (stack parts). */
static int join_backward(struct ag_node *n, const struct tensor *g)
{
	int dim = (int)n->i[0];
	for (int k = 0; k < n->ninputs; k++) {
		struct tensor *x = n->inputs[k];
		if (!x->requires_grad)
			continue;
		struct tensor *gk = x->ndim == g->ndim
					? tensor_narrow(g, dim, n->i[1 + k], x->shape[dim])
					: tensor_select(g, dim, n->i[1 + k]);
		int rc = ag_accumulate(x, gk);
		if (rc < 0)
			return rc;
	}
	return TENSOR_OK;
}

/* Extent of ts[k] along the joined dim of the output. */
static int64_t join_len(const struct tensor *t, int dim, bool stack)
{
	return stack ? 1 : t->shape[dim];
}

/* Record y = join(ts[0..n-1]) along dim. A node holds at most AG_MAX_INPUTS
 * inputs, so for more, the tail ts[3..] is represented by a proxy: a narrow
 * view of y recorded (first, so that its backward runs after y's) as the
 * join of the tail. Proxies are views: nothing is copied. */
static void record_join(const char *op, struct tensor *y, int n, struct tensor *const *ts, int dim,
			bool stack)
{
	struct tensor *in[AG_MAX_INPUTS];
	int k = n <= AG_MAX_INPUTS ? n : AG_MAX_INPUTS - 1;
	int64_t starts[AG_MAX_INPUTS], pos = 0;
	for (int j = 0; j < k; j++) {
		in[j] = ts[j];
		starts[j] = pos;
		pos += join_len(ts[j], dim, stack);
	}
	if (k < n) {
		bool tail_grad = false;
		for (int j = k; j < n; j++)
			tail_grad = tail_grad || ts[j]->requires_grad;
		struct tensor *proxy = NULL;
		if (tail_grad) {
			proxy = tensor_narrow(y, dim, pos, y->shape[dim] - pos);
			if (!proxy)
				return;
			record_join(op, proxy, n - k, ts + k, dim, stack);
		}
		if (proxy && proxy->requires_grad) {
			in[k] = proxy;
			starts[k++] = pos;
		} else {
			tensor_free(proxy);
		}
	}
	struct ag_node *node = ag_record(op, y, join_backward, k, in);
	if (node) {
		node->i[0] = dim;
		for (int j = 0; j < k; j++)
			node->i[1 + j] = starts[j];
	}
}

static bool join_needs_grad(int n, struct tensor *const *ts)
{
	if (!ag_grad_enabled())
		return false;
	for (int i = 0; i < n; i++)
		if (ts[i]->requires_grad)
			return true;
	return false;
}

struct tensor *ag_concat(int n, struct tensor *const *ts, int dim)
{
	AG_OP_REGION;
	struct tensor *y = tensor_concat(n, ts, dim);
	if (y && join_needs_grad(n, ts))
		record_join("concat", y, n, ts, tensor_dim_wrap("concat", dim, y->ndim), false);
	return y;
}

struct tensor *ag_stack(int n, struct tensor *const *ts, int dim)
{
	AG_OP_REGION;
	struct tensor *y = tensor_stack(n, ts, dim);
	if (y && join_needs_grad(n, ts))
		record_join("stack", y, n, ts, tensor_dim_wrap("stack", dim, y->ndim), true);
	return y;
}

/* ---- split ------------------------------------------------------------------ */

/* The outputs are views; when recording, each is an ag_narrow of t, whose
 * backward adds its gradient into t's through the same window. */
int ag_split(struct tensor *t, int dim, int n, const int64_t *sizes, struct tensor **out)
{
	AG_OP_REGION;
	int rc = tensor_split(t, dim, n, sizes, out);
	if (rc < 0 || !ag_grad_enabled() || !t->requires_grad)
		return rc;
	int d = tensor_dim_wrap("split", dim, t->ndim);
	int64_t start = 0;
	for (int k = 0; k < n; k++) {
		struct tensor *v = ag_narrow(t, d, start, sizes[k]);
		if (!v) {
			for (int j = 0; j < n; j++) {
				tensor_free(out[j]);
				out[j] = NULL;
			}
			return tensor_last_status();
		}
		tensor_free(out[k]);
		out[k] = v;
		start += sizes[k];
	}
	return TENSOR_OK;
}
