/* Reductions and softmax with their backward. */
#include "autograd.h"
#include "ag_internal.h"

/* Node params for reductions: i[0] = number of reduced dims (0 = all),
 * i[1..] = the dims; f[0] = variance correction. */
static void save_dims(struct ag_node *n, int ndims, const int *dims)
{
	n->i[0] = ndims;
	for (int k = 0; k < ndims && k < 7; k++)
		n->i[1 + k] = dims[k];
}

/* dout broadcast back over the reduced dims of x: [.., 1, ..] expanded. */
static struct tensor *expand_back(const struct ag_node *n, const struct tensor *g, int64_t *count)
{
	const struct tensor *x = n->inputs[0];
	int64_t keep[TENSOR_MAX_DIMS];
	bool reduced[TENSOR_MAX_DIMS] = { false };
	int ndims = (int)n->i[0];
	for (int k = 0; k < ndims; k++)
		reduced[(n->i[1 + k] % x->ndim + x->ndim) % x->ndim] = true;
	*count = 1;
	for (int d = 0; d < x->ndim; d++) {
		bool r = ndims == 0 || reduced[d];
		keep[d] = r ? 1 : x->shape[d];
		if (r)
			*count *= x->shape[d];
	}
	return tensor_expand(tensor_reshape(g, x->ndim, keep), x->ndim, x->shape);
}

static int sum_backward(struct ag_node *n, const struct tensor *g)
{
	int64_t count;
	struct tensor *ge = expand_back(n, g, &count);
	if (n->f[1] != 0) /* mean */
		ge = tensor_mul_scalar(ge, 1.0 / (double)count);
	return ag_accumulate(n->inputs[0], ge);
}

static struct tensor *reduce_record(const char *op, struct tensor *x, struct tensor *y,
				    ag_backward_fn fn, int ndims, const int *dims)
{
	struct ag_node *n = ag_record(op, y, fn, 1, &x);
	if (n)
		save_dims(n, ndims, dims);
	return y;
}

struct tensor *ag_sum(struct tensor *x, int ndims, const int *dims, bool keepdim)
{
	AG_OP_REGION;
	return reduce_record("sum", x, tensor_sum(x, ndims, dims, keepdim), sum_backward, ndims,
			     dims);
}

struct tensor *ag_mean(struct tensor *x, int ndims, const int *dims, bool keepdim)
{
	AG_OP_REGION;
	struct tensor *y = tensor_mean(x, ndims, dims, keepdim);
	struct ag_node *n = ag_record("mean", y, sum_backward, 1, &x);
	if (n) {
		save_dims(n, ndims, dims);
		n->f[1] = 1;
	}
	return y;
}

/* max/min: the gradient goes to the extreme elements, split among ties. */
static int extreme_backward(struct ag_node *n, const struct tensor *g)
{
	int64_t count;
	struct tensor *x = n->saved[0];
	struct tensor *yk = expand_back(n, n->saved[1], &count);
	struct tensor *mask = tensor_eq(x, yk);
	int ndims = (int)n->i[0], dims[7];
	for (int k = 0; k < ndims; k++)
		dims[k] = (int)n->i[1 + k];
	struct tensor *ties = tensor_sum(mask, ndims, dims, true);
	struct tensor *share = tensor_div(mask, ties);
	return ag_accumulate(n->inputs[0], tensor_mul(expand_back(n, g, &count), share));
}

static struct tensor *extreme(const char *op, struct tensor *x, struct tensor *y, int ndims,
			      const int *dims)
{
	struct ag_node *n = ag_record(op, y, extreme_backward, 1, &x);
	if (n) {
		save_dims(n, ndims, dims);
		ag_save(n, x);
		ag_save(n, y);
	}
	return y;
}

struct tensor *ag_max(struct tensor *x, int ndims, const int *dims, bool keepdim)
{
	AG_OP_REGION;
	return extreme("max", x, tensor_max(x, ndims, dims, keepdim), ndims, dims);
}

struct tensor *ag_min(struct tensor *x, int ndims, const int *dims, bool keepdim)
{
	AG_OP_REGION;
	return extreme("min", x, tensor_min(x, ndims, dims, keepdim), ndims, dims);
}

/* var: d/dx = 2 (x - mean) / (N - correction) */
static int var_backward(struct ag_node *n, const struct tensor *g)
{
	int64_t count;
	struct tensor *x = n->saved[0];
	int ndims = (int)n->i[0], dims[7];
	for (int k = 0; k < ndims; k++)
		dims[k] = (int)n->i[1 + k];
	struct tensor *ge = expand_back(n, g, &count);
	struct tensor *centered = tensor_sub(x, tensor_mean(x, ndims, dims, true));
	double scale = 2.0 / (double)(count - (int64_t)n->f[0]);
	return ag_accumulate(n->inputs[0], tensor_mul(ge, tensor_mul_scalar(centered, scale)));
}

struct tensor *ag_var(struct tensor *x, int ndims, const int *dims, int correction, bool keepdim)
{
	AG_OP_REGION;
	struct tensor *y = tensor_var(x, ndims, dims, correction, keepdim);
	struct ag_node *n = ag_record("var", y, var_backward, 1, &x);
	if (n) {
		save_dims(n, ndims, dims);
		n->f[0] = correction;
		ag_save(n, x);
	}
	return y;
}

/* softmax: dx = y (g - sum(g y)); log_softmax: dx = g - exp(y) sum(g). */
static int softmax_backward(struct ag_node *n, const struct tensor *g)
{
	struct tensor *y = n->saved[0];
	int dim = (int)n->i[0];
	struct tensor *dx;
	if (n->i[1]) {
		struct tensor *s = tensor_sum(g, 1, &dim, true);
		dx = tensor_sub(g, tensor_mul(tensor_exp(y), s));
	} else {
		int nd = y->ndim, d = dim < 0 ? dim + nd : dim;
		if (nd == 0 || d == nd - 1) {
			dx = tensor_softmax_backward(y, g);
		} else { /* the kernel works along the last dim: bring dim there */
			struct tensor *yt = tensor_transpose(y, d, nd - 1);
			struct tensor *gt = tensor_transpose(g, d, nd - 1);
			dx = tensor_transpose(tensor_softmax_backward(yt, gt), d, nd - 1);
		}
	}
	return ag_accumulate(n->inputs[0], dx);
}

static struct tensor *softmax_record(const char *op, struct tensor *x, struct tensor *y, int dim,
				     bool log)
{
	struct ag_node *n = ag_record(op, y, softmax_backward, 1, &x);
	if (n) {
		n->i[0] = dim;
		n->i[1] = log;
		ag_save(n, y);
	}
	return y;
}

struct tensor *ag_softmax(struct tensor *x, int dim)
{
	AG_OP_REGION;
	return softmax_record("softmax", x, tensor_softmax(x, dim), dim, false);
}

struct tensor *ag_log_softmax(struct tensor *x, int dim)
{
	AG_OP_REGION;
	return softmax_record("log_softmax", x, tensor_log_softmax(x, dim), dim, true);
}
