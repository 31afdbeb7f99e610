/* Reduction front-ends: sum, mean, max, min and var over a list of dims, and argmax. */
#include <math.h>
#include <string.h>

#include "backend.h"

/* The dims a reduction folds, from the caller's list. */
struct red_dims {
	bool red[TENSOR_MAX_DIMS];
	int64_t count;		       /* elements folded into each output */
	int64_t keep[TENSOR_MAX_DIMS]; /* x's shape with the reduced dims 1 (keepdim) */
	int64_t drop[TENSOR_MAX_DIMS]; /* x's shape without them */
	int ndrop;
};

/* Validate dims (negative ones wrap; a 0-d x accepts 0 and -1, which reduce
 * nothing) and fill rd. ndims == 0 reduces every dim. */
static int parse_dims(const char *op, const struct tensor *x, int ndims, const int *dims,
		      struct red_dims *rd)
{
	char bx[128];
	int nd = x->ndim, lim = nd > 0 ? nd : 1;
	bool seen[TENSOR_MAX_DIMS] = { false };
	if (ndims < 0 || (ndims > 0 && !dims))
		return tensor_error(TENSOR_ERR_ARG, "%s: bad dims list (%d dims%s) for x %s", op,
				    ndims, dims ? "" : ", NULL",
				    tensor_shape_str(x, bx, sizeof bx));
	for (int k = 0; k < ndims; k++) {
		int d = dims[k] < 0 ? dims[k] + lim : dims[k];
		if (d < 0 || d >= lim)
			return tensor_error(
			    TENSOR_ERR_SHAPE, "%s: dim %d out of range for x %s, expected %d..%d",
			    op, dims[k], tensor_shape_str(x, bx, sizeof bx), -lim, lim - 1);
		if (seen[d])
			return tensor_error(TENSOR_ERR_SHAPE,
					    "%s: dim %d repeated in dims for x %s", op, dims[k],
					    tensor_shape_str(x, bx, sizeof bx));
		seen[d] = true;
	}
	rd->count = 1;
	rd->ndrop = 0;
	for (int d = 0; d < nd; d++) {
		rd->red[d] = ndims == 0 || seen[d];
		rd->keep[d] = rd->red[d] ? 1 : x->shape[d];
		if (rd->red[d])
			rd->count *= x->shape[d];
		else
			rd->drop[rd->ndrop++] = x->shape[d];
	}
	return TENSOR_OK;
}

/* max/min/argmax have no value for an empty dim. */
static int check_nonempty(const char *op, const struct tensor *x, const struct red_dims *rd)
{
	char bx[128];
	for (int d = 0; d < x->ndim; d++)
		if (rd->red[d] && x->shape[d] == 0)
			return tensor_error(TENSOR_ERR_SHAPE,
					    "%s: cannot reduce empty dim %d of x %s, expected a "
					    "non-empty dim",
					    op, d, tensor_shape_str(x, bx, sizeof bx));
	return TENSOR_OK;
}

static int check_float(const char *op, const struct tensor *x)
{
	char bx[128];
	if (x->dtype != TENSOR_F32 && x->dtype != TENSOR_F64)
		return tensor_error(TENSOR_ERR_DTYPE, "%s: x %s is %s, expected f32 or f64", op,
				    tensor_shape_str(x, bx, sizeof bx),
				    tensor_dtype_name(x->dtype));
	return TENSOR_OK;
}

/* A view of x without size-1 dims, with runs of adjacent reduced dims that
 * step as one (in either order; sum, max and min do not care) merged. */
static struct tensor *merged_view(const struct tensor *x, const struct red_dims *rd, bool *red)
{
	int64_t sh[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
	int nd = 0;
	for (int d = 0; d < x->ndim; d++) {
		int64_t n = x->shape[d], s = x->strides[d];
		if (n == 1)
			continue;
		if (nd > 0 && red[nd - 1] && rd->red[d]) {
			if (st[nd - 1] == s * n) {
				sh[nd - 1] *= n;
				st[nd - 1] = s;
				continue;
			}
			if (s == st[nd - 1] * sh[nd - 1]) {
				sh[nd - 1] *= n;
				continue;
			}
		}
		sh[nd] = n;
		st[nd] = s;
		red[nd++] = rd->red[d];
	}
	return tensor_new_view(x, nd, sh, st, x->offset);
}

/* Reduce x over rd with the backend slot, one dim at a time (largest first,
 * so later passes read less); returns a new tensor of shape rd->keep. */
static struct tensor *reduce_keep(const char *op, enum tensor_reduce_op rop, const struct tensor *x,
				  const struct red_dims *rd)
{
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(x->storage->device, reduce, op);
	if (!be)
		return NULL;
	bool red[TENSOR_MAX_DIMS];
	struct tensor *cur = merged_view(x, rd, red);
	bool reduced = false;
	while (cur) {
		int d = -1;
		for (int k = 0; k < cur->ndim; k++)
			if (red[k] && cur->shape[k] != 1 &&
			    (d < 0 || cur->shape[k] >= cur->shape[d]))
				d = k;
		if (d < 0)
			break;
		int64_t sh[TENSOR_MAX_DIMS];
		memcpy(sh, cur->shape, sizeof sh);
		sh[d] = 1;
		struct tensor *o = tensor_new(x->dtype, x->storage->device, cur->ndim, sh);
		if (o && be->reduce(rop, o, cur, d) < 0) {
			tensor_free(o);
			o = NULL;
		}
		tensor_free(cur);
		cur = o;
		reduced = true;
	}
	if (cur && !reduced) { /* nothing to fold: a copy */
		struct tensor *c = tensor_clone(cur);
		tensor_free(cur);
		cur = c;
	}
	struct tensor *out = tensor_view(cur, x->ndim, rd->keep);
	tensor_free(cur);
	return out;
}

/* t (shape rd->keep) as the op's result: squeezed unless keepdim. */
static struct tensor *finish(struct tensor *t, const struct red_dims *rd, bool keepdim)
{
	if (!t || keepdim)
		return t;
	struct tensor *v = tensor_view(t, rd->ndrop, rd->drop);
	tensor_free(t);
	return v;
}

static struct tensor *reduce_op(const char *op, enum tensor_reduce_op rop, const struct tensor *x,
				int ndims, const int *dims, bool keepdim)
{
	struct red_dims rd;
	if (!x || tensor_check_operand(op, "", "x", x) < 0 || tensor_check_not_bf16(op, x) < 0 ||
	    parse_dims(op, x, ndims, dims, &rd) < 0)
		return NULL;
	if (rop != TENSOR_RED_SUM && check_nonempty(op, x, &rd) < 0)
		return NULL;
	return finish(reduce_keep(op, rop, x, &rd), &rd, keepdim);
}

struct tensor *tensor_sum(const struct tensor *x, int ndims, const int *dims, bool keepdim)
{
	return reduce_op("sum", TENSOR_RED_SUM, x, ndims, dims, keepdim);
}

struct tensor *tensor_max(const struct tensor *x, int ndims, const int *dims, bool keepdim)
{
	return reduce_op("max", TENSOR_RED_MAX, x, ndims, dims, keepdim);
}

struct tensor *tensor_min(const struct tensor *x, int ndims, const int *dims, bool keepdim)
{
	return reduce_op("min", TENSOR_RED_MIN, x, ndims, dims, keepdim);
}

/* sum(x) / count in the keepdim shape; count 0 gives NaN (0 * inf). */
static struct tensor *mean_keep(const char *op, const struct tensor *x, const struct red_dims *rd)
{
	struct tensor *s = reduce_keep(op, TENSOR_RED_SUM, x, rd);
	if (!s)
		return NULL;
	struct tensor *m = tensor_mul_scalar(s, rd->count ? 1.0 / (double)rd->count : INFINITY);
	tensor_free(s);
	return m;
}

struct tensor *tensor_mean(const struct tensor *x, int ndims, const int *dims, bool keepdim)
{
	struct red_dims rd;
	if (!x || tensor_check_operand("mean", "", "x", x) < 0 || check_float("mean", x) < 0 ||
	    parse_dims("mean", x, ndims, dims, &rd) < 0)
		return NULL;
	return finish(mean_keep("mean", x, &rd), &rd, keepdim);
}

/* Two passes: sum((x - mean)^2) / max(N - correction, 0), so N <= correction
 * divides by zero as PyTorch does (inf, or NaN when the sum is 0). */
struct tensor *tensor_var(const struct tensor *x, int ndims, const int *dims, int correction,
			  bool keepdim)
{
	struct red_dims rd;
	if (!x || tensor_check_operand("var", "", "x", x) < 0 || check_float("var", x) < 0 ||
	    parse_dims("var", x, ndims, dims, &rd) < 0)
		return NULL;
	struct tensor *m = mean_keep("var", x, &rd);
	struct tensor *d = m ? tensor_sub(x, m) : NULL;
	struct tensor *sq = d ? tensor_unary(TENSOR_SQUARE, d, 0) : NULL;
	struct tensor *ss = sq ? reduce_keep("var", TENSOR_RED_SUM, sq, &rd) : NULL;
	double div = (double)rd.count - (double)correction;
	struct tensor *v = ss ? tensor_mul_scalar(ss, div > 0 ? 1.0 / div : INFINITY) : NULL;
	tensor_free(ss);
	tensor_free(sq);
	tensor_free(d);
	tensor_free(m);
	return finish(v, &rd, keepdim);
}

struct tensor *tensor_argmax(const struct tensor *x, int dim, bool keepdim)
{
	struct red_dims rd;
	if (!x || tensor_check_not_bf16("argmax", x) < 0 ||
	    parse_dims("argmax", x, 1, &dim, &rd) < 0 || check_nonempty("argmax", x, &rd) < 0)
		return NULL;
	enum tensor_device dev = x->storage->device;
	if (x->ndim == 0)
		return tensor_zeros(TENSOR_I64, dev, 0, NULL);
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(dev, reduce, "argmax");
	if (!be)
		return NULL;
	int d = dim < 0 ? dim + x->ndim : dim;
	struct tensor *out = tensor_new(TENSOR_I64, dev, x->ndim, rd.keep);
	out = out ? tensor_op_result(out, be->reduce(TENSOR_RED_ARGMAX, out, x, d)) : NULL;
	return finish(out, &rd, keepdim);
}
