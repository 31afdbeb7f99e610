/* The op table (op_table.h): the ops as the walkers call them, their
 * differentiable forms, the rows, and the input layouts. */
#include "op_table.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- inputs ---------------------------------------------------------------------- */

/* The storage shape for a view of `shape` in layout l. */
static void base_shape(unsigned l, int nd, const int64_t *shape, int64_t *out)
{
	for (int i = 0; i < nd; i++)
		out[i] = shape[i];
	if (l == OP_TRANSPOSED) {
		out[nd - 2] = shape[nd - 1];
		out[nd - 1] = shape[nd - 2];
	} else if (l == OP_REVERSED) {
		for (int i = 0; i < nd; i++)
			out[i] = shape[nd - 1 - i];
	} else if (l == OP_SLICED) {
		out[nd - 1] = 2 * shape[nd - 1] + 1;
	} else if (l == OP_BROADCAST) {
		out[0] = 1;
	}
}

bool op_layout_fits(const struct op_row *r, int j, unsigned l)
{
	int nd = r->ndim[j];
	if (l == OP_CONTIG)
		return true;
	if (!(r->layouts & l) || nd == 0 || (r->fixed >> j) & 1)
		return false;
	if ((l == OP_TRANSPOSED || l == OP_REVERSED) && nd < 2)
		return false;
	if (l == OP_BROADCAST && ((r->inplace >> j) & 1 || r->shape[j][0] == 1))
		return false;
	return true;
}

const char *op_layout_name(unsigned l)
{
	switch (l) {
	case OP_TRANSPOSED: return "transposed";
	case OP_REVERSED: return "reversed";
	case OP_SLICED: return "sliced";
	case OP_BROADCAST: return "broadcast";
	default: return "contiguous";
	}
}

/* The view of layout l over base, with ag ops when `ag` (so gradients reach base). */
static struct tensor *view_of(struct tensor *base, unsigned l, int nd, const int64_t *shape,
			      bool ag)
{
	int perm[TENSOR_MAX_DIMS];
	switch (l) {
	case OP_TRANSPOSED:
		return ag ? ag_transpose(base, nd - 2, nd - 1)
			  : tensor_transpose(base, nd - 2, nd - 1);
	case OP_REVERSED:
		for (int i = 0; i < nd; i++)
			perm[i] = nd - 1 - i;
		return ag ? ag_permute(base, perm) : tensor_permute(base, perm);
	case OP_SLICED:
		return ag ? ag_slice(base, nd - 1, 1, 1 + 2 * shape[nd - 1], 2)
			  : tensor_slice(base, nd - 1, 1, 1 + 2 * shape[nd - 1], 2);
	case OP_BROADCAST: return ag ? ag_expand(base, nd, shape) : tensor_expand(base, nd, shape);
	default: return base;
	}
}

/* The storage of input j in layout l, on the CPU: uniform values of the row's domain,
 * integers where the dtype or the row asks for them. */
static struct tensor *base_of(const struct op_row *r, int j, enum tensor_dtype dt, unsigned l,
			      uint64_t seed)
{
	int nd = r->ndim[j];
	int64_t bs[4];
	base_shape(l, nd, r->shape[j], bs);
	bool ints = dt == TENSOR_I32 || dt == TENSOR_I64;
	double lo = r->lo[j], hi = r->hi[j];
	if (lo == hi) {
		lo = ints ? -20 : -1;
		hi = -lo;
	}
	if (r->index[j] > 0) {
		lo = 0;
		hi = (double)r->index[j];
		dt = TENSOR_I64;
	}
	struct tensor *u = tensor_rand_uniform(TENSOR_F64, TENSOR_CPU, nd, bs, seed, lo, hi);
	if (r->quantize || r->index[j] > 0 || ints)
		u = tensor_cast(u, TENSOR_I64); /* toward zero */
	struct tensor *base = tensor_cast(u, dt);
	ck_assert_msg(base != NULL, "%s: input %d: %s", r->name, j, tensor_last_error());
	return base;
}

struct tensor *op_input(const struct op_row *r, int j, enum tensor_dtype dt, unsigned l,
			enum tensor_device dev, uint64_t seed)
{
	struct tensor *base = base_of(r, j, dt, l, seed);
	if (dev != TENSOR_CPU)
		base = tensor_to_device(base, dev);
	struct tensor *v = base ? view_of(base, l, r->ndim[j], r->shape[j], false) : NULL;
	ck_assert_msg(v != NULL, "%s: input %d: %s", r->name, j, tensor_last_error());
	return v;
}

struct tensor *op_grad_input(const struct op_row *r, int j, unsigned l, uint64_t seed)
{
	struct tensor *base = base_of(r, j, TENSOR_F64, l, seed);
	if (r->index[j] == 0 && !((r->nograd >> j) & 1))
		ck_assert_int_eq(ag_requires_grad(base, true), TENSOR_OK);
	return base;
}

struct tensor *op_grad_view(struct tensor *leaf, const struct op_row *r, int j, unsigned l)
{
	return view_of(leaf, l, r->ndim[j], r->shape[j], leaf->requires_grad);
}

struct tensor *op_flat(int n, struct tensor *const *ts)
{
	struct tensor *flat[8];
	for (int i = 0; i < n; i++) {
		if (!ts[i])
			return NULL;
		struct tensor *c = tensor_contiguous(tensor_cast(ts[i], ts[0]->dtype));
		flat[i] = tensor_reshape(c, 1, (int64_t[]){ tensor_numel(ts[i]) });
	}
	return tensor_concat(n, flat, 0);
}

/* ---- the ops --------------------------------------------------------------------- */

static struct tensor *op_unary(struct tensor *const *in, const struct op_row *r)
{
	return tensor_unary((enum tensor_unary_op)r->op, in[0], r->alpha);
}

static struct tensor *grad_unary(struct tensor *const *in, const struct op_row *r)
{
	return ag_unary((enum tensor_unary_op)r->op, in[0], r->alpha);
}

static struct tensor *op_binary(struct tensor *const *in, const struct op_row *r)
{
	return tensor_binary((enum tensor_binary_op)r->op, in[0], in[1]);
}

static struct tensor *grad_binary(struct tensor *const *in, const struct op_row *r)
{
	return ag_binary((enum tensor_binary_op)r->op, in[0], in[1]);
}

/* in[2] in [-1, 2) truncated: a condition of 0 and 1, f32 or (op 1) i64. */
static struct tensor *cond_of(const struct tensor *c, const struct op_row *r)
{
	return tensor_cast(tensor_cast(c, TENSOR_I64), r->op ? TENSOR_I64 : TENSOR_F32);
}

static struct tensor *op_where(struct tensor *const *in, const struct op_row *r)
{
	return tensor_where(cond_of(in[2], r), in[0], in[1]);
}

static struct tensor *grad_where(struct tensor *const *in, const struct op_row *r)
{
	return ag_where(cond_of(in[2], r), in[0], in[1]);
}

static struct tensor *op_masked_fill(struct tensor *const *in, const struct op_row *r)
{
	return tensor_masked_fill(in[0], in[1], r->alpha);
}

static struct tensor *grad_masked_fill(struct tensor *const *in, const struct op_row *r)
{
	return ag_masked_fill(in[0], in[1], r->alpha);
}

static struct tensor *op_masked_fill_(struct tensor *const *in, const struct op_row *r)
{
	return tensor_masked_fill_(in[0], in[1], r->alpha) == TENSOR_OK ? in[0] : NULL;
}

/* op 0..5: sum, max, min, argmax, mean, var (correction 1); dim < 0: every dim;
 * alpha != 0: keepdim. */
static struct tensor *reduce_with(struct tensor *const *in, const struct op_row *r, bool ag)
{
	int d = r->dim, nd = d < 0 ? 0 : 1;
	bool keep = r->alpha != 0;
	switch (r->op) {
	case 0: return ag ? ag_sum(in[0], nd, &d, keep) : tensor_sum(in[0], nd, &d, keep);
	case 1: return ag ? ag_max(in[0], nd, &d, keep) : tensor_max(in[0], nd, &d, keep);
	case 2: return ag ? ag_min(in[0], nd, &d, keep) : tensor_min(in[0], nd, &d, keep);
	case 3: return tensor_argmax(in[0], d, keep);
	case 4: return ag ? ag_mean(in[0], nd, &d, keep) : tensor_mean(in[0], nd, &d, keep);
	default: return ag ? ag_var(in[0], nd, &d, 1, keep) : tensor_var(in[0], nd, &d, 1, keep);
	}
}

static struct tensor *op_reduce(struct tensor *const *in, const struct op_row *r)
{
	return reduce_with(in, r, false);
}

static struct tensor *grad_reduce(struct tensor *const *in, const struct op_row *r)
{
	return reduce_with(in, r, true);
}

static struct tensor *op_matmul(struct tensor *const *in, const struct op_row *r)
{
	return r->nin == 3 ? tensor_matmul_add(in[0], in[1], in[2]) : tensor_matmul(in[0], in[1]);
}

static struct tensor *grad_matmul(struct tensor *const *in, const struct op_row *r)
{
	struct tensor *p = ag_matmul(in[0], in[1]);
	return r->nin == 3 ? ag_add(p, in[2]) : p;
}

static struct tensor *op_matmul_sum(struct tensor *const *in, const struct op_row *r)
{
	(void)r;
	return tensor_matmul_sum_to(in[0], in[1], in[0]->dtype);
}

/* The reference products summed over their batch dims. */
static struct tensor *ref_matmul_sum(struct tensor *const *in, const struct op_row *r)
{
	struct tensor *p = ref_matmul(in, r);
	int dims[TENSOR_MAX_DIMS];
	for (int d = 0; p && d < p->ndim - 2; d++)
		dims[d] = d;
	return p ? tensor_sum(p, p->ndim - 2, dims, false) : NULL;
}

static const int heads_last[4] = { 0, 2, 1, 3 };

static struct tensor *op_matmul_laid_out(struct tensor *const *in, const struct op_row *r)
{
	(void)r;
	return tensor_contiguous(tensor_matmul_laid_out(in[0], in[1], heads_last));
}

static struct tensor *grad_matmul_laid_out(struct tensor *const *in, const struct op_row *r)
{
	(void)r;
	return ag_matmul_laid_out(in[0], in[1], heads_last);
}

static struct tensor *op_softmax(struct tensor *const *in, const struct op_row *r)
{
	return r->op ? tensor_log_softmax(in[0], r->dim) : tensor_softmax(in[0], r->dim);
}

static struct tensor *grad_softmax(struct tensor *const *in, const struct op_row *r)
{
	return r->op ? ag_log_softmax(in[0], r->dim) : ag_softmax(in[0], r->dim);
}

static struct tensor *op_softmax_(struct tensor *const *in, const struct op_row *r)
{
	(void)r;
	return tensor_softmax_(in[0]) == TENSOR_OK ? in[0] : NULL;
}

/* y = softmax(in[0]); the backward of y for g = in[1], out of place and in place. */
static struct tensor *op_softmax_backward(struct tensor *const *in, const struct op_row *r)
{
	(void)r;
	struct tensor *y = tensor_softmax(in[0], -1);
	struct tensor *a = tensor_softmax_backward(y, in[1]);
	struct tensor *g = tensor_clone(tensor_contiguous(in[1]));
	if (tensor_softmax_backward_(y, g) != TENSOR_OK)
		return NULL;
	return op_flat(2, (struct tensor *[]){ a, g });
}

/* op 0: layer norm with w and b, 1: without, 2: RMS norm with w, 3: without. */
static struct tensor *op_norm(struct tensor *const *in, const struct op_row *r)
{
	struct tensor *mean = NULL, *rstd = NULL, *y;
	bool affine = r->op % 2 == 0;
	if (r->op < 2) {
		y = tensor_layer_norm(in[0], affine ? in[1] : NULL, affine ? in[2] : NULL, 1e-5,
				      &mean, &rstd);
		return op_flat(3, (struct tensor *[]){ y, mean, rstd });
	}
	y = tensor_rms_norm(in[0], affine ? in[1] : NULL, 1e-5, &rstd);
	return op_flat(2, (struct tensor *[]){ y, rstd });
}

static struct tensor *grad_norm(struct tensor *const *in, const struct op_row *r)
{
	bool affine = r->op % 2 == 0;
	if (r->op < 2)
		return ag_layer_norm(in[0], affine ? in[1] : NULL, affine ? in[2] : NULL, 1e-5);
	return ag_rms_norm(in[0], affine ? in[1] : NULL, 1e-5);
}

/* in: x, g, w; op as op_norm's: dx (, dw (, db)). */
static struct tensor *op_norm_backward(struct tensor *const *in, const struct op_row *r)
{
	struct tensor *mean = NULL, *rstd = NULL, *dx = NULL, *dw = NULL, *db = NULL;
	bool affine = r->op % 2 == 0, layer = r->op < 2;
	struct tensor *w = affine ? in[2] : NULL;
	if (layer)
		tensor_layer_norm(in[0], w, NULL, 1e-5, &mean, &rstd);
	else
		tensor_rms_norm(in[0], w, 1e-5, &rstd);
	int rc = tensor_norm_backward(in[1], in[0], mean, rstd, w, &dx, affine ? &dw : NULL,
				      affine && layer ? &db : NULL);
	if (rc < 0)
		return NULL;
	if (!affine)
		return dx;
	return layer ? op_flat(3, (struct tensor *[]){ dx, dw, db })
		     : op_flat(2, (struct tensor *[]){ dx, dw });
}

static struct tensor *index_of(struct tensor *idx, const struct op_row *r)
{
	return r->op ? tensor_cast(idx, TENSOR_I32) : idx;
}

static struct tensor *op_index_select(struct tensor *const *in, const struct op_row *r)
{
	return tensor_index_select(in[0], r->dim, index_of(in[1], r));
}

static struct tensor *grad_index_select(struct tensor *const *in, const struct op_row *r)
{
	return ag_index_select(in[0], r->dim, index_of(in[1], r));
}

static struct tensor *op_index_add_(struct tensor *const *in, const struct op_row *r)
{
	return tensor_index_add_(in[0], r->dim, in[1], in[2]) == TENSOR_OK ? in[0] : NULL;
}

static struct tensor *op_gather(struct tensor *const *in, const struct op_row *r)
{
	return tensor_gather(in[0], r->dim, in[1]);
}

static struct tensor *grad_gather(struct tensor *const *in, const struct op_row *r)
{
	return ag_gather(in[0], r->dim, in[1]);
}

static struct tensor *op_scatter_add_(struct tensor *const *in, const struct op_row *r)
{
	return tensor_scatter_add_(in[0], r->dim, in[1], in[2]) == TENSOR_OK ? in[0] : NULL;
}

/* Three AdamW steps (lr 1e-2, weight decay 0.01) on p, m, v from g. */
static struct tensor *op_adamw(struct tensor *const *in, const struct op_row *r)
{
	(void)r;
	struct tensor *p = tensor_clone(in[0]), *m = tensor_clone(in[1]), *v = tensor_clone(in[2]);
	for (int t = 1; t <= 3; t++)
		if (tensor_adamw_(p, m, v, in[3], 1e-2, 0.9, 0.999, 1e-8, 0.01, t) < 0)
			return NULL;
	return op_flat(3, (struct tensor *[]){ p, m, v });
}

/* Three SGD steps (lr 0.1, weight decay 1e-3), with momentum 0.9 (op 1) or without. */
static struct tensor *op_sgd(struct tensor *const *in, const struct op_row *r)
{
	struct tensor *p = tensor_clone(in[0]), *b = NULL;
	if (r->op)
		b = tensor_zeros(p->dtype, p->storage->device, p->ndim, p->shape);
	for (int t = 1; t <= 3; t++)
		if (tensor_sgd_(p, b, in[1], 0.1, r->op ? 0.9 : 0, 1e-3) < 0)
			return NULL;
	return b ? op_flat(2, (struct tensor *[]){ p, b }) : p;
}

/* Stride r->op, padding r->alpha. */
static struct tensor *op_conv1d(struct tensor *const *in, const struct op_row *r)
{
	return tensor_conv1d(in[0], in[1], r->nin > 2 ? in[2] : NULL, r->op, (int64_t)r->alpha);
}

static struct tensor *grad_conv1d(struct tensor *const *in, const struct op_row *r)
{
	return ag_conv1d(in[0], in[1], r->nin > 2 ? in[2] : NULL, r->op, (int64_t)r->alpha);
}

/* op 0: contiguous; 1: cast to f64; 2: cast to i32. */
static struct tensor *op_copy(struct tensor *const *in, const struct op_row *r)
{
	return r->op ? tensor_cast(in[0], r->op == 1 ? TENSOR_F64 : TENSOR_I32)
		     : tensor_contiguous(in[0]);
}

static struct tensor *grad_copy(struct tensor *const *in, const struct op_row *r)
{
	return r->op ? ag_cast(in[0], TENSOR_F64) : ag_contiguous(in[0]);
}

static struct tensor *op_concat(struct tensor *const *in, const struct op_row *r)
{
	return tensor_concat(2, in, r->dim);
}

static struct tensor *grad_concat(struct tensor *const *in, const struct op_row *r)
{
	return ag_concat(2, in, r->dim);
}

/* p 0.3, seed 99: out of place, and in place on a contiguous copy. */
static struct tensor *op_dropout(struct tensor *const *in, const struct op_row *r)
{
	(void)r;
	struct tensor *a = tensor_dropout(in[0], 0.3, 99);
	struct tensor *b = tensor_clone(tensor_contiguous(in[0]));
	if (tensor_dropout_(b, 0.3, 99) != TENSOR_OK)
		return NULL;
	return op_flat(2, (struct tensor *[]){ a, b });
}

static struct tensor *grad_dropout(struct tensor *const *in, const struct op_row *r)
{
	(void)r;
	return ag_dropout(in[0], 0.3, 99, true);
}

/* ---- the rows -------------------------------------------------------------------- */

#define S(...)              \
	{                   \
		__VA_ARGS__ \
	}
#define IN1(a, b) .nin = 1, .ndim = { a }, .shape = { b }

/* The ops that are not generated by the loops of op_rows. */
/* clang-format off */
static const struct op_row table[] = {
	{ "where", op_where, ref_where, grad_where, 3, { 3, 2, 3 },
	  { S(4, 5, 6), S(5, 6), S(4, 5, 6) }, .lo = { 0, 0, -1 }, .hi = { 0, 0, 2 },
	  .dtypes = OP_ALL, .layouts = OP_LAYOUTS, .nograd = 4 },
	{ "where (i64 cond)", op_where, ref_where, grad_where, 3, { 2, 2, 1 },
	  { S(7, 9), S(7, 9), S(9) }, .lo = { 0, 0, -1 }, .hi = { 0, 0, 2 },
	  .dtypes = OP_F32 | OP_F64, .layouts = OP_LAYOUTS, .nograd = 4, .op = 1 },
	{ "masked_fill", op_masked_fill, ref_masked_fill, grad_masked_fill, 2, { 3, 2 },
	  { S(3, 6, 40), S(6, 40) }, .lo = { 0, -1 }, .hi = { 0, 2 }, .dtypes = OP_ALL,
	  .layouts = OP_LAYOUTS, .nograd = 2, .alpha = -7 },
	{ "masked_fill_", op_masked_fill_, ref_masked_fill, NULL, 2, { 2, 2 },
	  { S(6, 40), S(6, 40) }, .lo = { 0, -1 }, .hi = { 0, 2 }, .dtypes = OP_ALL,
	  .layouts = OP_LAYOUTS, .inplace = 1, .fixed = 1, .alpha = -7 },
	{ "matmul", op_matmul, ref_matmul, grad_matmul, 2, { 2, 2 }, { S(7, 5), S(5, 9) },
	  .dtypes = OP_GEMM, .layouts = OP_LAYOUTS, .ulps32 = 32, .ulps64 = 32 },
	{ "matmul batched", op_matmul, ref_matmul, grad_matmul, 2, { 3, 3 },
	  { S(3, 7, 5), S(3, 5, 9) }, .dtypes = OP_GEMM, .layouts = OP_LAYOUTS, .ulps32 = 32,
	  .ulps64 = 32 },
	{ "matmul linear", op_matmul, ref_matmul, NULL, 2, { 3, 2 }, { S(4, 33, 64), S(64, 48) },
	  .dtypes = OP_GEMM, .layouts = OP_LAYOUTS, .ulps32 = 128, .ulps64 = 128, .tol32 = 1e-4 },
	{ "matmul broadcast batch", op_matmul, ref_matmul, grad_matmul, 2, { 4, 3 },
	  { S(2, 1, 7, 5), S(3, 5, 9) }, .dtypes = OP_GEMM, .layouts = OP_LAYOUTS, .ulps32 = 32,
	  .ulps64 = 32 },
	{ "matmul shared", op_matmul, ref_matmul, grad_matmul, 2, { 2, 3 },
	  { S(7, 5), S(3, 5, 9) }, .dtypes = OP_GEMM, .layouts = OP_LAYOUTS, .ulps32 = 32,
	  .ulps64 = 32 },
	{ "matmul_sum", op_matmul_sum, ref_matmul_sum, NULL, 2, { 3, 3 },
	  { S(4, 6, 5), S(4, 5, 9) }, .dtypes = OP_GEMM, .layouts = OP_LAYOUTS, .ulps32 = 64,
	  .ulps64 = 64 },
	{ "matmul vector", op_matmul, ref_matmul, grad_matmul, 2, { 1, 2 }, { S(5), S(5, 9) },
	  .dtypes = OP_GEMM, .layouts = OP_LAYOUTS, .ulps32 = 32, .ulps64 = 32 },
	{ "matmul matrix-vector", op_matmul, ref_matmul, grad_matmul, 2, { 2, 1 },
	  { S(7, 5), S(5) }, .dtypes = OP_GEMM, .layouts = OP_LAYOUTS, .ulps32 = 32,
	  .ulps64 = 32 },
	{ "matmul large", op_matmul, ref_matmul, NULL, 2, { 2, 2 }, { S(192, 256), S(256, 160) },
	  .dtypes = OP_GEMM, .layouts = OP_VIEWS, .ulps32 = 512, .ulps64 = 512, .tol32 = 2e-4 },
	{ "matmul empty k", op_matmul, ref_matmul, grad_matmul, 2, { 2, 2 }, { S(3, 0), S(0, 4) },
	  .dtypes = OP_GEMM },
	{ "matmul_add", op_matmul, ref_matmul, grad_matmul, 3, { 3, 2, 1 },
	  { S(2, 6, 5), S(5, 9), S(9) }, .dtypes = OP_GEMM, .layouts = OP_LAYOUTS, .ulps32 = 32,
	  .ulps64 = 32 },
	{ "matmul_laid_out", op_matmul_laid_out, ref_matmul, grad_matmul_laid_out, 2, { 4, 4 },
	  { S(2, 3, 6, 4), S(2, 3, 4, 5) }, .dtypes = OP_GEMM, .layouts = OP_LAYOUTS,
	  .ulps32 = 32, .ulps64 = 32 },
	{ "softmax", op_softmax, ref_softmax, grad_softmax, IN1(3, S(3, 6, 37)),
	  .dtypes = OP_FLOATS, .layouts = OP_LAYOUTS, .ulps32 = 8, .ulps64 = 8, .dim = -1,
	  .lo = { -8 }, .hi = { 8 } },
	{ "softmax long rows", op_softmax, ref_softmax, NULL, IN1(2, S(5, 3000)),
	  .dtypes = OP_FLOATS, .layouts = OP_VIEWS, .ulps32 = 8, .ulps64 = 8, .dim = -1,
	  .lo = { -8 }, .hi = { 8 } },
	{ "softmax dim 0", op_softmax, ref_softmax, grad_softmax, IN1(2, S(37, 6)),
	  .dtypes = OP_FLOATS, .layouts = OP_LAYOUTS, .ulps32 = 8, .ulps64 = 8, .dim = 0 },
	{ "log_softmax", op_softmax, ref_softmax, grad_softmax, IN1(3, S(3, 6, 37)),
	  .dtypes = OP_FLOATS, .layouts = OP_LAYOUTS, .ulps32 = 16, .ulps64 = 16, .op = 1,
	  .dim = -1, .lo = { -8 }, .hi = { 8 } },
	{ "log_softmax long rows", op_softmax, ref_softmax, NULL, IN1(2, S(3, 5000)),
	  .dtypes = OP_FLOATS, .layouts = OP_VIEWS, .ulps32 = 16, .ulps64 = 16, .op = 1,
	  .dim = -1 },
	{ "softmax_", op_softmax_, ref_softmax, NULL, IN1(2, S(9, 130)), .dtypes = OP_FLOATS,
	  .inplace = 1, .ulps32 = 8, .ulps64 = 8, .dim = -1 },
	{ "softmax_backward", op_softmax_backward, ref_softmax_backward, NULL, 2, { 2, 2 },
	  { S(6, 70), S(6, 70) }, .dtypes = OP_FLOATS, .layouts = OP_LAYOUTS, .fused = true,
	  .ulps32 = 16, .ulps64 = 16 },
	{ "softmax_backward long rows", op_softmax_backward, ref_softmax_backward, NULL, 2,
	  { 2, 2 }, { S(3, 4099), S(3, 4099) }, .dtypes = OP_FLOATS, .layouts = OP_VIEWS,
	  .fused = true, .ulps32 = 16, .ulps64 = 16 },
	{ "layer_norm", op_norm, ref_norm, grad_norm, 3, { 3, 1, 1 }, { S(3, 5, 37), S(37), S(37) },
	  .dtypes = OP_FLOATS, .layouts = OP_LAYOUTS, .ulps32 = 32, .ulps64 = 32,
	  .lo = { -3, 0.5, -1 }, .hi = { 5, 2, 1 } },
	{ "layer_norm no affine", op_norm, ref_norm, NULL, IN1(2, S(64, 512)), .dtypes = OP_FLOATS,
	  .layouts = OP_LAYOUTS, .ulps32 = 32, .ulps64 = 32, .op = 1 },
	{ "layer_norm long rows", op_norm, ref_norm, NULL, 3, { 2, 1, 1 },
	  { S(3, 3000), S(3000), S(3000) }, .dtypes = OP_FLOATS, .layouts = OP_VIEWS, .ulps32 = 32,
	  .ulps64 = 32, .lo = { 100, 0.5, -1 }, .hi = { 101, 2, 1 }, .tol64 = 1e-9 },
	{ "rms_norm", op_norm, ref_norm, grad_norm, 2, { 3, 1 }, { S(3, 5, 37), S(37) },
	  .dtypes = OP_FLOATS, .layouts = OP_LAYOUTS, .ulps32 = 32, .ulps64 = 32, .op = 2 },
	{ "rms_norm no weight", op_norm, ref_norm, grad_norm, IN1(2, S(9, 33)), .dtypes = OP_FLOATS,
	  .layouts = OP_LAYOUTS, .ulps32 = 32, .ulps64 = 32, .op = 3 },
	{ "layer_norm backward", op_norm_backward, ref_norm_backward, NULL, 3, { 3, 3, 1 },
	  { S(3, 5, 37), S(3, 5, 37), S(37) }, .dtypes = OP_FLOATS, .layouts = OP_LAYOUTS,
	  .ulps32 = 64, .ulps64 = 64 },
	{ "layer_norm backward many rows", op_norm_backward, ref_norm_backward, NULL, 3,
	  { 2, 2, 1 }, { S(4099, 64), S(4099, 64), S(64) }, .dtypes = OP_FLOATS,
	  .layouts = OP_VIEWS, .ulps32 = 4096, .ulps64 = 4096, .tol32 = 1e-3, .tol64 = 1e-9 },
	{ "layer_norm backward no affine", op_norm_backward, ref_norm_backward, NULL, 3,
	  { 2, 2, 1 }, { S(7, 130), S(7, 130), S(130) }, .dtypes = OP_FLOATS, .layouts = OP_LAYOUTS,
	  .ulps32 = 64, .ulps64 = 64, .op = 1 },
	{ "rms_norm backward", op_norm_backward, ref_norm_backward, NULL, 3, { 3, 3, 1 },
	  { S(3, 5, 37), S(3, 5, 37), S(37) }, .dtypes = OP_FLOATS, .layouts = OP_LAYOUTS,
	  .ulps32 = 64, .ulps64 = 64, .op = 2 },
	{ "rms_norm backward no weight", op_norm_backward, ref_norm_backward, NULL, 3, { 2, 2, 1 },
	  { S(7, 1500), S(7, 1500), S(1500) }, .dtypes = OP_FLOATS, .layouts = OP_VIEWS,
	  .ulps32 = 64, .ulps64 = 64, .op = 3 },
	{ "index_select dim 0", op_index_select, ref_index_select, grad_index_select, 2, { 2, 2 },
	  { S(11, 6), S(3, 4) }, .index = { 0, 11 }, .dtypes = OP_ALL, .layouts = OP_LAYOUTS },
	{ "index_select dim 1 (i32 ids)", op_index_select, ref_index_select, grad_index_select, 2,
	  { 3, 1 }, { S(4, 9, 5), S(7) }, .index = { 0, 9 }, .dtypes = OP_ALL,
	  .layouts = OP_LAYOUTS, .dim = 1, .op = 1 },
	{ "index_select embedding", op_index_select, ref_index_select, NULL, 2, { 2, 2 },
	  { S(1000, 128), S(8, 64) }, .index = { 0, 1000 }, .dtypes = OP_F32, .layouts = OP_VIEWS },
	{ "index_add_ dim 0", op_index_add_, ref_index_add, NULL, 3, { 2, 1, 2 },
	  { S(11, 6), S(40), S(40, 6) }, .index = { 0, 11 }, .dtypes = OP_ALL,
	  .layouts = OP_LAYOUTS, .inplace = 1, .ulps32 = 32, .ulps64 = 32 },
	{ "index_add_ dim 1", op_index_add_, ref_index_add, NULL, 3, { 3, 1, 3 },
	  { S(3, 7, 5), S(9), S(3, 9, 5) }, .index = { 0, 7 }, .dtypes = OP_ALL,
	  .layouts = OP_LAYOUTS, .inplace = 1, .ulps32 = 32, .ulps64 = 32, .dim = 1 },
	{ "index_add_ embedding grad", op_index_add_, ref_index_add, NULL, 3, { 2, 1, 2 },
	  { S(500, 128), S(2048), S(2048, 128) }, .index = { 0, 500 }, .dtypes = OP_FLOATS,
	  .layouts = OP_VIEWS, .inplace = 1, .ulps32 = 32, .ulps64 = 32 },
	{ "gather dim 1", op_gather, ref_gather, grad_gather, 2, { 2, 2 }, { S(5, 7), S(5, 3) },
	  .index = { 0, 7 }, .dtypes = OP_ALL, .layouts = OP_LAYOUTS, .dim = 1 },
	{ "gather dim 0", op_gather, ref_gather, grad_gather, 2, { 3, 3 },
	  { S(6, 4, 3), S(2, 4, 3) }, .index = { 0, 6 }, .dtypes = OP_ALL, .layouts = OP_LAYOUTS },
	{ "scatter_add_ dim 1", op_scatter_add_, ref_scatter_add, NULL, 3, { 2, 2, 2 },
	  { S(5, 7), S(5, 9), S(5, 9) }, .index = { 0, 7 }, .dtypes = OP_ALL, .layouts = OP_LAYOUTS,
	  .inplace = 1, .ulps32 = 32, .ulps64 = 32, .dim = 1 },
	{ "scatter_add_ dim 0", op_scatter_add_, ref_scatter_add, NULL, 3, { 2, 2, 2 },
	  { S(4, 6), S(9, 6), S(9, 6) }, .index = { 0, 4 }, .dtypes = OP_ALL, .layouts = OP_LAYOUTS,
	  .inplace = 1, .ulps32 = 32, .ulps64 = 32 },
	{ "adamw", op_adamw, ref_adamw, NULL, 4, { 2, 2, 2, 2 },
	  { S(37, 129), S(37, 129), S(37, 129), S(37, 129) }, .lo = { -1, -0.1, 0, -1 },
	  .hi = { 1, 0.1, 0.01, 1 }, .dtypes = OP_FLOATS, .ulps32 = 4, .ulps64 = 4 },
	{ "sgd", op_sgd, ref_sgd, NULL, 2, { 1, 1 }, { S(4097), S(4097) }, .dtypes = OP_FLOATS,
	  .ulps32 = 2, .ulps64 = 2 },
	{ "sgd momentum", op_sgd, ref_sgd, NULL, 2, { 1, 1 }, { S(4097), S(4097) },
	  .dtypes = OP_FLOATS, .ulps32 = 2, .ulps64 = 2, .op = 1 },
	{ "conv1d", op_conv1d, ref_conv1d, grad_conv1d, 3, { 3, 3, 1 },
	  { S(2, 3, 17), S(4, 3, 5), S(4) }, .dtypes = OP_FLOATS, .layouts = OP_LAYOUTS,
	  .ulps32 = 32, .ulps64 = 32, .op = 2, .alpha = 1 },
	{ "conv1d kernel = stride", op_conv1d, ref_conv1d, grad_conv1d, 2, { 3, 3 },
	  { S(2, 4, 16), S(5, 4, 4) }, .dtypes = OP_FLOATS, .layouts = OP_LAYOUTS, .ulps32 = 32,
	  .ulps64 = 32, .op = 4 },
	{ "contiguous", op_copy, ref_copy, grad_copy, IN1(3, S(4, 5, 6)), .dtypes = OP_STORE,
	  .layouts = OP_LAYOUTS },
	{ "cast to f64", op_copy, ref_copy, grad_copy, IN1(3, S(4, 5, 6)), .dtypes = OP_STORE,
	  .layouts = OP_LAYOUTS, .op = 1, .lo = { -100 }, .hi = { 100 } },
	{ "cast to i32", op_copy, ref_copy, NULL, IN1(3, S(4, 5, 6)), .dtypes = OP_STORE,
	  .layouts = OP_LAYOUTS, .op = 2, .lo = { -100 }, .hi = { 100 } },
	{ "concat", op_concat, ref_concat, grad_concat, 2, { 2, 2 }, { S(3, 4), S(3, 7) },
	  .dtypes = OP_STORE, .layouts = OP_LAYOUTS, .dim = 1 },
	{ "dropout", op_dropout, ref_dropout, NULL, IN1(2, S(67, 1031)), .dtypes = OP_FLOATS,
	  .layouts = OP_VIEWS },
	{ "dropout (gradient)", op_dropout, ref_dropout, grad_dropout, IN1(2, S(6, 7)),
	  .dtypes = OP_FLOATS, .layouts = OP_LAYOUTS },
};
/* clang-format on */
static bool unary_takes_ints(int op)
{
	return op == TENSOR_NEG || op == TENSOR_ABS || op == TENSOR_RELU || op == TENSOR_SQUARE ||
	       op == TENSOR_ADD_SCALAR || op == TENSOR_MUL_SCALAR;
}

static bool positive_domain(int op)
{
	return op == TENSOR_LOG || op == TENSOR_SQRT || op == TENSOR_RSQRT ||
	       op == TENSOR_RECIPROCAL || op == TENSOR_POW_SCALAR;
}

/* Room for every generated row. */
#define NGEN (TENSOR_NUNARY * 4 + TENSOR_NBINARY * 3 + 6 * 3 * 4)

static struct op_row *generate(struct op_row *out)
{
	static char names[NGEN][48];
	int n = 0;
	for (int op = 0; op < TENSOR_NUNARY; op++) {
		double alpha = op == TENSOR_POW_SCALAR	 ? 1.7
			       : op == TENSOR_ADD_SCALAR ? 3
			       : op == TENSOR_MUL_SCALAR ? -2
							 : 0;
		bool deriv = op >= TENSOR_GELU_GRAD; /* the activations' derivatives: no backward */
		for (int big = 0; big < 2; big++) {
			for (int ints = 0; ints < 1 + unary_takes_ints(op); ints++) {
				struct op_row *r = &out[n];
				snprintf(names[n++], sizeof names[0], "unary %d%s%s", op,
					 big ? " long" : "", ints ? " (ints)" : "");
				*r = (struct op_row){ .name = names[n - 1],
						      .fn = op_unary,
						      .ref = ref_unary,
						      .grad =
							  deriv || big || ints ? NULL : grad_unary,
						      IN1(3, S(3, 5, 7)),
						      .op = op,
						      .alpha = alpha,
						      .dtypes = ints ? OP_INTS : OP_FLOATS,
						      .layouts = OP_LAYOUTS,
						      .ulps32 = 16,
						      .ulps64 = 8,
						      .tol32 = 2e-6,
						      .tol64 = 1e-12 };
				if (big) { /* the vectorised path: many blocks, a tail */
					r->ndim[0] = 2;
					r->shape[0][0] = 64;
					r->shape[0][1] = 1031;
					r->layouts = OP_SLICED;
				}
				r->lo[0] = ints ? -50 : positive_domain(op) ? 0.1 : -6;
				r->hi[0] = ints ? 50 : positive_domain(op) ? 3 : 6;
			}
		}
	}
	for (int op = 0; op < TENSOR_NBINARY; op++) {
		/* the activations' derivatives times a: float only, no backward, the ulps of
		 * the unary derivatives */
		bool deriv = op >= TENSOR_MUL_GELU_GRAD && op < TENSOR_EQ;
		bool ints = op != TENSOR_DIV && op != TENSOR_POW && !deriv, cmp = op >= TENSOR_EQ;
		for (int v = 0; v < 3; v++) {
			struct op_row *r = &out[n];
			snprintf(names[n++], sizeof names[0], "binary %d (%s)", op,
				 v == 0	  ? "suffix broadcast"
				 : v == 1 ? "both broadcast"
					  : "long");
			*r = (struct op_row){ .name = names[n - 1],
					      .fn = op_binary,
					      .ref = ref_binary,
					      .grad = cmp || deriv || v == 2 ? NULL : grad_binary,
					      .nin = 2,
					      .ndim = { 3, 2 },
					      .shape = { S(4, 5, 6), S(5, 6) },
					      .op = op,
					      .dtypes = ints ? OP_ALL : OP_FLOATS,
					      .layouts = OP_LAYOUTS,
					      .quantize = cmp,
					      .ulps32 = deriv ? 16 : 4,
					      .ulps64 = deriv ? 8 : 4,
					      .tol32 = deriv ? 2e-6 : 0,
					      .tol64 = deriv ? 1e-12 : 0 };
			for (int i = 0; i < 2; i++) {
				r->lo[i] = op == TENSOR_POW	   ? 0.5
					   : op == TENSOR_DIV && i ? 0.5
								   : -4;
				r->hi[i] = op == TENSOR_POW ? 2 : 4;
			}
			if (v == 1) {
				r->ndim[0] = r->ndim[1] = 2;
				r->shape[0][0] = 6, r->shape[0][1] = 1;
				r->shape[1][0] = 1, r->shape[1][1] = 9;
				r->layouts = 0;
			} else if (v == 2) {
				r->ndim[0] = r->ndim[1] = 2;
				r->shape[0][0] = r->shape[1][0] = 64;
				r->shape[0][1] = r->shape[1][1] = 1031;
				r->layouts = OP_SLICED;
			}
		}
	}
	static const int64_t shapes[3][3] = { { 4, 5, 6 }, { 3, 2000, 1 }, { 2000, 3, 1 } };
	static const char *const rnames[6] = { "sum", "max", "min", "argmax", "mean", "var" };
	for (int op = 0; op < 6; op++) {
		for (int s = 0; s < 3; s++) {
			int nd = s ? 2 : 3;
			for (int d = op == 3 ? 0 : -1; d < nd; d++) {
				struct op_row *r = &out[n];
				snprintf(names[n++], sizeof names[0], "%s %s dim %d", rnames[op],
					 s == 0	  ? "[4,5,6]"
					 : s == 1 ? "[3,2000]"
						  : "[2000,3]",
					 d);
				*r = (struct op_row){ .name = names[n - 1],
						      .fn = op_reduce,
						      .ref = ref_reduce,
						      .grad = op == 3 || s ? NULL : grad_reduce,
						      .nin = 1,
						      .ndim = { nd },
						      .op = op,
						      .dim = d,
						      .alpha = d == 1,
						      .dtypes = op < 4 ? OP_ALL : OP_FLOATS,
						      .layouts = OP_LAYOUTS,
						      .ulps32 = 64,
						      .ulps64 = 64,
						      .lo = { -4 },
						      .hi = { 4 } };
				memcpy(r->shape[0], shapes[s], sizeof shapes[s]);
			}
		}
	}
	return out + n;
}

const struct op_row *op_rows(int *n)
{
	static struct op_row rows[sizeof table / sizeof table[0] + NGEN];
	static int count;
	if (!count) {
		int t = (int)(sizeof table / sizeof table[0]);
		memcpy(rows, table, sizeof table);
		count = (int)(generate(rows + t) - rows);
	}
	*n = count;
	return rows;
}
