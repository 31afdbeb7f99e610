/* CUDA backend parity with the CPU reference: every op of the device table
 * runs on both devices on the same inputs, each input in turn contiguous,
 * transposed, reversed, sliced (inner stride 2, with an offset) and broadcast
 * (stride 0), and the results must agree within a stated number of units in
 * the last place. Then the device's own behaviour: faults raised at the next
 * synchronisation, out of memory, mixed devices, the allocator's cache.
 * Skipped (exit 77) when the backend is not compiled in or no GPU is present. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"
#include "testutil.h"

/* The device under test: CUDA, or the CPU itself with CFORMER_PARITY_DEVICE=cpu
 * (a self-check of the table on a machine without a GPU). */
static enum tensor_device dev = TENSOR_CUDA;

/* ---- comparing a device result with the CPU's ------------------------------ */

/* |cuda - cpu| <= ulps * eps(dtype) * (|cpu| + 1) elementwise (integers:
 * exactly; NaN matches NaN, inf the same inf). */
static void assert_near(const char *what, const struct tensor *gpu, const struct tensor *cpu,
			double ulps)
{
	ck_assert_msg(gpu != NULL && cpu != NULL, "%s: %s", what, tensor_last_error());
	struct tensor *back = tensor_to_device(gpu, TENSOR_CPU);
	ck_assert_msg(back != NULL, "%s: %s", what, tensor_last_error());
	ck_assert_msg(tensor_same_shape(back, cpu), "%s: shapes differ", what);
	ck_assert_msg(back->dtype == cpu->dtype, "%s: dtypes differ", what);
	double *a = tu_values(back), *b = tu_values(cpu);
	double eps = cpu->dtype == TENSOR_F32 ? 0x1p-23 : cpu->dtype == TENSOR_F64 ? 0x1p-52 : 0;
	for (int64_t i = 0; i < tensor_numel(cpu); i++) {
		bool ok = (isnan(a[i]) && isnan(b[i])) || (isinf(b[i]) && a[i] == b[i]) ||
			  fabs(a[i] - b[i]) <= ulps * eps * (fabs(b[i]) + 1);
		if (!ok) {
			double x = a[i], y = b[i];
			free(a);
			free(b);
			ck_abort_msg("%s: element %lld: cuda %.17g, cpu %.17g (%.1f ulps allowed)",
				     what, (long long)i, x, y, ulps);
		}
	}
	free(a);
	free(b);
	tensor_free(back);
}

static struct tensor *to_cuda(const struct tensor *t)
{
	struct tensor *g = tensor_to_device(t, dev);
	ck_assert_msg(g != NULL, "%s", tensor_last_error());
	return g;
}

/* ---- the op table ------------------------------------------------------------ */

#define MAX_IN 4

struct pcase;
/* The op on inputs in[] (all on one device); may write in[0] in place and
 * return it. */
typedef struct tensor *(*op_fn)(struct tensor *const *in, const struct pcase *c);

enum { F32 = 1 << TENSOR_F32, F64 = 1 << TENSOR_F64, I32 = 1 << TENSOR_I32, I64 = 1 << TENSOR_I64 };
enum { FLOATS = F32 | F64, ALL = F32 | F64 | I32 | I64, INTS = I32 | I64 };
/* Input layouts (bit masks). */
enum { CONTIG = 1, TRANSPOSED = 2, REVERSED = 4, SLICED = 8, BROADCAST = 16 };
enum { VIEWS = TRANSPOSED | REVERSED | SLICED, LAYOUTS = VIEWS | BROADCAST };

struct pcase {
	const char *name;
	op_fn fn;
	int nin;
	int ndim[MAX_IN];
	int64_t shape[MAX_IN][4];
	double lo[MAX_IN], hi[MAX_IN]; /* uniform input domain (lo == hi: [-1, 1)) */
	int64_t index[MAX_IN];	       /* > 0: an i64 index input in [0, index) */
	bool quantize;		       /* inputs rounded to integers (ties for comparisons) */
	unsigned dtypes;	       /* data dtypes to try */
	unsigned layouts;	       /* layouts to try, each on one input at a time */
	unsigned inplace;	       /* inputs written in place: never broadcast */
	unsigned fixed;		       /* inputs that must stay contiguous */
	double ulps32, ulps64;	       /* tolerance, units of eps (|cpu| + 1) */
	int op;			       /* for the generic unary / binary / reduce rows */
	double alpha;
	int dim;
};

/* The storage shape for a view of `shape` in layout l, and the view. */
static void base_shape(unsigned l, int nd, const int64_t *shape, int64_t *out)
{
	for (int i = 0; i < nd; i++)
		out[i] = shape[i];
	if (l == TRANSPOSED) {
		out[nd - 2] = shape[nd - 1];
		out[nd - 1] = shape[nd - 2];
	} else if (l == REVERSED) {
		for (int i = 0; i < nd; i++)
			out[i] = shape[nd - 1 - i];
	} else if (l == SLICED) {
		out[nd - 1] = 2 * shape[nd - 1] + 1;
	} else if (l == BROADCAST) {
		out[0] = 1;
	}
}

static struct tensor *layout_view(struct tensor *base, unsigned l, int nd, const int64_t *shape)
{
	int perm[TENSOR_MAX_DIMS];
	switch (l) {
	case TRANSPOSED: return tensor_transpose(base, nd - 2, nd - 1);
	case REVERSED:
		for (int i = 0; i < nd; i++)
			perm[i] = nd - 1 - i;
		return tensor_permute(base, perm);
	case SLICED: return tensor_slice(base, nd - 1, 1, 1 + 2 * shape[nd - 1], 2);
	case BROADCAST: return tensor_expand(base, nd, shape);
	default: return base;
	}
}

/* Whether layout l applies to input j of c. */
static bool layout_fits(const struct pcase *c, int j, unsigned l)
{
	int nd = c->ndim[j];
	if (l == CONTIG)
		return true;
	if (!(c->layouts & l) || nd == 0 || (c->fixed >> j) & 1)
		return false;
	if ((l == TRANSPOSED || l == REVERSED) && nd < 2)
		return false;
	if (l == BROADCAST && ((c->inplace >> j) & 1 || c->shape[j][0] == 1))
		return false;
	return true;
}

/* Input j of case c in dtype dt and layout l, on the CPU and on CUDA (the
 * same values in the same layout). */
static void make_input(const struct pcase *c, int j, enum tensor_dtype dt, unsigned l,
		       uint64_t seed, struct tensor **cpu, struct tensor **gpu)
{
	int nd = c->ndim[j];
	int64_t bs[4];
	base_shape(l, nd, c->shape[j], bs);
	double lo = c->lo[j], hi = c->hi[j];
	if (lo == hi) {
		bool ints = dt == TENSOR_I32 || dt == TENSOR_I64;
		lo = ints ? -20 : -1;
		hi = -lo;
	}
	if (c->index[j] > 0) {
		lo = 0;
		hi = (double)c->index[j];
		dt = TENSOR_I64;
	}
	struct tensor *u = tensor_rand_uniform(TENSOR_F64, TENSOR_CPU, nd, bs, seed, lo, hi);
	ck_assert(u != NULL);
	if (c->quantize || c->index[j] > 0 || dt == TENSOR_I32 || dt == TENSOR_I64)
		u = tensor_cast(u, TENSOR_I64); /* toward zero */
	struct tensor *base = tensor_cast(u, dt);
	ck_assert_msg(base != NULL, "%s", tensor_last_error());
	*cpu = layout_view(base, l, nd, c->shape[j]);
	*gpu = layout_view(to_cuda(base), l, nd, c->shape[j]);
	ck_assert_msg(*cpu && *gpu, "%s", tensor_last_error());
}

static const char *layout_name(unsigned l)
{
	switch (l) {
	case TRANSPOSED: return "transposed";
	case REVERSED: return "reversed";
	case SLICED: return "sliced";
	case BROADCAST: return "broadcast";
	default: return "contiguous";
	}
}

/* Run case c in every dtype and layout it names. */
static void run_case(const struct pcase *c)
{
	for (int dt = 0; dt < TENSOR_NDTYPES; dt++) {
		if (!(c->dtypes & (1u << dt)))
			continue;
		double ulps = dt == TENSOR_F32 ? c->ulps32 : dt == TENSOR_F64 ? c->ulps64 : 0;
		for (int j = 0; j < c->nin; j++) {
			for (unsigned l = CONTIG; l <= BROADCAST; l <<= 1) {
				if (!layout_fits(c, j, l) || (l == CONTIG && j > 0))
					continue;
				tensor_scope_begin();
				struct tensor *cin[MAX_IN], *gin[MAX_IN];
				for (int i = 0; i < c->nin; i++)
					make_input(c, i, (enum tensor_dtype)dt, i == j ? l : CONTIG,
						   1000 + 17 * (uint64_t)i, &cin[i], &gin[i]);
				struct tensor *want = c->fn(cin, c);
				ck_assert_msg(want != NULL, "%s %s (cpu): %s", c->name,
					      tensor_dtype_name((enum tensor_dtype)dt),
					      tensor_last_error());
				struct tensor *got = c->fn(gin, c);
				char what[160];
				snprintf(what, sizeof what, "%s %s, input %d %s", c->name,
					 tensor_dtype_name((enum tensor_dtype)dt), j,
					 layout_name(l));
				assert_near(what, got, want, ulps);
				ck_assert_int_eq(tensor_last_status(), TENSOR_OK);
				tensor_scope_end();
			}
		}
	}
}

/* Several results as one flat tensor of the first one's dtype. */
static struct tensor *flat_cat(int n, struct tensor *const *ts)
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

/* ---- the ops ---------------------------------------------------------------- */

static struct tensor *op_unary(struct tensor *const *in, const struct pcase *c)
{
	return tensor_unary((enum tensor_unary_op)c->op, in[0], c->alpha);
}

static struct tensor *op_binary(struct tensor *const *in, const struct pcase *c)
{
	return tensor_binary((enum tensor_binary_op)c->op, in[0], in[1]);
}

static struct tensor *op_where(struct tensor *const *in, const struct pcase *c)
{
	/* in[2] in [-1, 2) truncated: 0 or 1 */
	struct tensor *cond =
	    tensor_cast(tensor_cast(in[2], TENSOR_I64), c->op ? TENSOR_I64 : TENSOR_F32);
	return tensor_where(cond, in[0], in[1]);
}

static struct tensor *op_masked_fill_(struct tensor *const *in, const struct pcase *c)
{
	ck_assert_int_eq(tensor_masked_fill_(in[0], in[1], c->alpha), TENSOR_OK);
	return in[0];
}

static struct tensor *op_reduce(struct tensor *const *in, const struct pcase *c)
{
	int d = c->dim, nd = d < 0 ? 0 : 1;
	bool keep = c->alpha != 0;
	switch (c->op) {
	case 0: return tensor_sum(in[0], nd, &d, keep);
	case 1: return tensor_max(in[0], nd, &d, keep);
	case 2: return tensor_min(in[0], nd, &d, keep);
	case 3: return tensor_argmax(in[0], d, keep);
	case 4: return tensor_mean(in[0], nd, &d, keep);
	default: return tensor_var(in[0], nd, &d, 1, keep);
	}
}

static struct tensor *op_matmul(struct tensor *const *in, const struct pcase *c)
{
	return c->nin == 3 ? tensor_matmul_add(in[0], in[1], in[2]) : tensor_matmul(in[0], in[1]);
}

static struct tensor *op_matmul_laid_out(struct tensor *const *in, const struct pcase *c)
{
	(void)c;
	return tensor_contiguous(tensor_matmul_laid_out(in[0], in[1], (int[]){ 0, 2, 1, 3 }));
}

static struct tensor *op_softmax(struct tensor *const *in, const struct pcase *c)
{
	return c->op ? tensor_log_softmax(in[0], c->dim) : tensor_softmax(in[0], c->dim);
}

static struct tensor *op_softmax_backward(struct tensor *const *in, const struct pcase *c)
{
	(void)c;
	struct tensor *y = tensor_softmax(in[0], -1);
	struct tensor *a = tensor_softmax_backward(y, in[1]);
	struct tensor *g = tensor_contiguous(in[1]);
	g = tensor_clone(g);
	ck_assert_int_eq(tensor_softmax_backward_(y, g), TENSOR_OK);
	return flat_cat(2, (struct tensor *[]){ a, g });
}

static struct tensor *op_softmax_(struct tensor *const *in, const struct pcase *c)
{
	(void)c;
	ck_assert_int_eq(tensor_softmax_(in[0]), TENSOR_OK);
	return in[0];
}

/* op 0: layer norm with w and b, 1: without, 2: RMS norm with w, 3: without. */
static struct tensor *op_norm(struct tensor *const *in, const struct pcase *c)
{
	struct tensor *mean = NULL, *rstd = NULL, *y;
	bool affine = c->op % 2 == 0;
	if (c->op < 2) {
		y = tensor_layer_norm(in[0], affine ? in[1] : NULL, affine ? in[2] : NULL, 1e-5,
				      &mean, &rstd);
		return flat_cat(3, (struct tensor *[]){ y, mean, rstd });
	}
	y = tensor_rms_norm(in[0], affine ? in[1] : NULL, 1e-5, &rstd);
	return flat_cat(2, (struct tensor *[]){ y, rstd });
}

/* in: x, g, w; op as op_norm's. */
static struct tensor *op_norm_backward(struct tensor *const *in, const struct pcase *c)
{
	struct tensor *mean = NULL, *rstd = NULL, *dx = NULL, *dw = NULL, *db = NULL;
	bool affine = c->op % 2 == 0, layer = c->op < 2;
	struct tensor *w = affine ? in[2] : NULL;
	if (layer)
		tensor_layer_norm(in[0], w, NULL, 1e-5, &mean, &rstd);
	else
		tensor_rms_norm(in[0], w, 1e-5, &rstd);
	int rc = tensor_norm_backward(in[1], in[0], mean, rstd, w, &dx, affine ? &dw : NULL,
				      affine && layer ? &db : NULL);
	ck_assert_msg(rc == TENSOR_OK, "%s", tensor_last_error());
	if (!affine)
		return dx;
	return layer ? flat_cat(3, (struct tensor *[]){ dx, dw, db })
		     : flat_cat(2, (struct tensor *[]){ dx, dw });
}

static struct tensor *op_index_select(struct tensor *const *in, const struct pcase *c)
{
	struct tensor *idx = c->op ? tensor_cast(in[1], TENSOR_I32) : in[1];
	return tensor_index_select(in[0], c->dim, idx);
}

static struct tensor *op_index_add_(struct tensor *const *in, const struct pcase *c)
{
	ck_assert_int_eq(tensor_index_add_(in[0], c->dim, in[1], in[2]), TENSOR_OK);
	return in[0];
}

static struct tensor *op_gather(struct tensor *const *in, const struct pcase *c)
{
	return tensor_gather(in[0], c->dim, in[1]);
}

static struct tensor *op_scatter_add_(struct tensor *const *in, const struct pcase *c)
{
	ck_assert_int_eq(tensor_scatter_add_(in[0], c->dim, in[1], in[2]), TENSOR_OK);
	return in[0];
}

/* Three AdamW steps (weight decay 0.01) on p, m, v from g. */
static struct tensor *op_adamw(struct tensor *const *in, const struct pcase *c)
{
	(void)c;
	struct tensor *p = tensor_clone(in[0]), *m = tensor_clone(in[1]), *v = tensor_clone(in[2]);
	for (int t = 1; t <= 3; t++)
		ck_assert_msg(tensor_adamw_(p, m, v, in[3], 1e-2, 0.9, 0.999, 1e-8, 0.01, t) ==
				  TENSOR_OK,
			      "%s", tensor_last_error());
	return flat_cat(3, (struct tensor *[]){ p, m, v });
}

/* Three SGD steps with momentum (op 1) or without (op 0). */
static struct tensor *op_sgd(struct tensor *const *in, const struct pcase *c)
{
	struct tensor *p = tensor_clone(in[0]), *b = c->op ? tensor_zeros(in[0]->dtype,
									     in[0]->storage->device,
									     in[0]->ndim,
									     in[0]->shape)
							   : NULL;
	for (int t = 1; t <= 3; t++)
		ck_assert_int_eq(tensor_sgd_(p, b, in[1], 0.1, c->op ? 0.9 : 0, 1e-3), TENSOR_OK);
	return b ? flat_cat(2, (struct tensor *[]){ p, b }) : p;
}

static struct tensor *op_conv1d(struct tensor *const *in, const struct pcase *c)
{
	return tensor_conv1d(in[0], in[1], c->nin > 2 ? in[2] : NULL, c->op, (int64_t)c->alpha);
}

static struct tensor *op_copy(struct tensor *const *in, const struct pcase *c)
{
	return c->op ? tensor_cast(in[0], c->op == 1 ? TENSOR_F64 : TENSOR_I32)
		     : tensor_contiguous(in[0]);
}

static struct tensor *op_concat(struct tensor *const *in, const struct pcase *c)
{
	return tensor_concat(2, in, c->dim);
}

static struct tensor *op_dropout(struct tensor *const *in, const struct pcase *c)
{
	(void)c;
	struct tensor *a = tensor_dropout(in[0], 0.3, 99), *b = tensor_contiguous(in[0]);
	b = tensor_clone(b);
	ck_assert_int_eq(tensor_dropout_(b, 0.3, 99), TENSOR_OK);
	return flat_cat(2, (struct tensor *[]){ a, b });
}

/* ---- the table -------------------------------------------------------------- */

#define IN1(a, b) .nin = 1, .ndim = { a }, .shape = { b }
#define S(...) { __VA_ARGS__ }

/* The ops that are not generated by a loop below. */
static const struct pcase cases[] = {
	{ "where", op_where, 3, { 3, 2, 3 }, { S(4, 5, 6), S(5, 6), S(4, 5, 6) }, .lo = { 0, 0, -1 },
	  .hi = { 0, 0, 2 }, .dtypes = ALL, .layouts = LAYOUTS, .ulps32 = 0, .ulps64 = 0 },
	{ "where (i64 cond)", op_where, 3, { 2, 2, 1 }, { S(7, 9), S(7, 9), S(9) },
	  .lo = { 0, 0, -1 }, .hi = { 0, 0, 2 }, .dtypes = F32, .layouts = LAYOUTS, .op = 1 },
	{ "masked_fill_", op_masked_fill_, 2, { 2, 2 }, { S(6, 40), S(6, 40) }, .lo = { 0, -1 },
	  .hi = { 0, 2 }, .dtypes = ALL, .layouts = VIEWS | BROADCAST, .inplace = 1, .fixed = 1,
	  .alpha = -7 },
	{ "matmul", op_matmul, 2, { 2, 2 }, { S(7, 5), S(5, 9) }, .dtypes = FLOATS,
	  .layouts = LAYOUTS, .ulps32 = 32, .ulps64 = 32 },
	{ "matmul batched", op_matmul, 2, { 3, 3 }, { S(3, 7, 5), S(3, 5, 9) }, .dtypes = FLOATS,
	  .layouts = LAYOUTS, .ulps32 = 32, .ulps64 = 32 },
	{ "matmul linear", op_matmul, 2, { 3, 2 }, { S(4, 33, 64), S(64, 48) }, .dtypes = FLOATS,
	  .layouts = LAYOUTS, .ulps32 = 128, .ulps64 = 128 },
	{ "matmul broadcast batch", op_matmul, 2, { 4, 3 }, { S(2, 1, 7, 5), S(3, 5, 9) },
	  .dtypes = FLOATS, .layouts = LAYOUTS, .ulps32 = 32, .ulps64 = 32 },
	{ "matmul vector", op_matmul, 2, { 1, 2 }, { S(5), S(5, 9) }, .dtypes = FLOATS,
	  .layouts = LAYOUTS, .ulps32 = 32, .ulps64 = 32 },
	{ "matmul matrix-vector", op_matmul, 2, { 2, 1 }, { S(7, 5), S(5) }, .dtypes = FLOATS,
	  .layouts = LAYOUTS, .ulps32 = 32, .ulps64 = 32 },
	{ "matmul large", op_matmul, 2, { 2, 2 }, { S(192, 256), S(256, 160) }, .dtypes = FLOATS,
	  .layouts = VIEWS, .ulps32 = 512, .ulps64 = 512 },
	{ "matmul empty k", op_matmul, 2, { 2, 2 }, { S(3, 0), S(0, 4) }, .dtypes = FLOATS },
	{ "matmul_add", op_matmul, 3, { 3, 2, 1 }, { S(2, 6, 5), S(5, 9), S(9) }, .dtypes = FLOATS,
	  .layouts = LAYOUTS, .ulps32 = 32, .ulps64 = 32 },
	{ "matmul_laid_out", op_matmul_laid_out, 2, { 4, 4 }, { S(2, 3, 6, 4), S(2, 3, 4, 5) },
	  .dtypes = FLOATS, .layouts = LAYOUTS, .ulps32 = 32, .ulps64 = 32 },
	{ "softmax", op_softmax, IN1(3, S(3, 6, 37)), .dtypes = FLOATS, .layouts = LAYOUTS,
	  .ulps32 = 8, .ulps64 = 8, .dim = -1, .lo = { -8 }, .hi = { 8 } },
	{ "softmax long rows", op_softmax, IN1(2, S(5, 3000)), .dtypes = FLOATS,
	  .layouts = VIEWS, .ulps32 = 8, .ulps64 = 8, .dim = -1, .lo = { -8 }, .hi = { 8 } },
	{ "softmax dim 0", op_softmax, IN1(2, S(37, 6)), .dtypes = FLOATS, .layouts = LAYOUTS,
	  .ulps32 = 8, .ulps64 = 8, .dim = 0 },
	{ "log_softmax", op_softmax, IN1(3, S(3, 6, 37)), .dtypes = FLOATS, .layouts = LAYOUTS,
	  .ulps32 = 16, .ulps64 = 16, .op = 1, .dim = -1, .lo = { -8 }, .hi = { 8 } },
	{ "log_softmax long rows", op_softmax, IN1(2, S(3, 5000)), .dtypes = FLOATS,
	  .layouts = VIEWS, .ulps32 = 16, .ulps64 = 16, .op = 1, .dim = -1 },
	{ "softmax_", op_softmax_, IN1(2, S(9, 130)), .dtypes = FLOATS, .inplace = 1,
	  .ulps32 = 8, .ulps64 = 8 },
	{ "softmax_backward", op_softmax_backward, 2, { 2, 2 }, { S(6, 70), S(6, 70) },
	  .dtypes = FLOATS, .layouts = LAYOUTS, .ulps32 = 16, .ulps64 = 16 },
	{ "softmax_backward long rows", op_softmax_backward, 2, { 2, 2 },
	  { S(3, 4099), S(3, 4099) }, .dtypes = FLOATS, .layouts = VIEWS, .ulps32 = 16,
	  .ulps64 = 16 },
	{ "layer_norm", op_norm, 3, { 3, 1, 1 }, { S(3, 5, 37), S(37), S(37) }, .dtypes = FLOATS,
	  .layouts = LAYOUTS, .ulps32 = 32, .ulps64 = 32, .lo = { -3, 0.5, -1 },
	  .hi = { 5, 2, 1 } },
	{ "layer_norm no affine", op_norm, IN1(2, S(64, 512)), .dtypes = FLOATS,
	  .layouts = LAYOUTS, .ulps32 = 32, .ulps64 = 32, .op = 1 },
	{ "layer_norm long rows", op_norm, 3, { 2, 1, 1 }, { S(3, 3000), S(3000), S(3000) },
	  .dtypes = FLOATS, .layouts = VIEWS, .ulps32 = 32, .ulps64 = 32, .lo = { 100, 0.5, -1 },
	  .hi = { 101, 2, 1 } },
	{ "rms_norm", op_norm, 2, { 3, 1 }, { S(3, 5, 37), S(37) }, .dtypes = FLOATS,
	  .layouts = LAYOUTS, .ulps32 = 32, .ulps64 = 32, .op = 2 },
	{ "rms_norm no weight", op_norm, IN1(2, S(33, 128)), .dtypes = FLOATS,
	  .layouts = LAYOUTS, .ulps32 = 32, .ulps64 = 32, .op = 3 },
	{ "layer_norm backward", op_norm_backward, 3, { 3, 3, 1 },
	  { S(3, 5, 37), S(3, 5, 37), S(37) }, .dtypes = FLOATS, .layouts = LAYOUTS,
	  .ulps32 = 64, .ulps64 = 64 },
	{ "layer_norm backward many rows", op_norm_backward, 3, { 2, 2, 1 },
	  { S(4099, 64), S(4099, 64), S(64) }, .dtypes = FLOATS, .layouts = VIEWS,
	  .ulps32 = 4096, .ulps64 = 4096 },
	{ "layer_norm backward no affine", op_norm_backward, 3, { 2, 2, 1 },
	  { S(7, 130), S(7, 130), S(130) }, .dtypes = FLOATS, .layouts = LAYOUTS, .ulps32 = 64,
	  .ulps64 = 64, .op = 1 },
	{ "rms_norm backward", op_norm_backward, 3, { 3, 3, 1 },
	  { S(3, 5, 37), S(3, 5, 37), S(37) }, .dtypes = FLOATS, .layouts = LAYOUTS,
	  .ulps32 = 64, .ulps64 = 64, .op = 2 },
	{ "rms_norm backward no weight", op_norm_backward, 3, { 2, 2, 1 },
	  { S(7, 1500), S(7, 1500), S(1500) }, .dtypes = FLOATS, .layouts = VIEWS,
	  .ulps32 = 64, .ulps64 = 64, .op = 3 },
	{ "index_select dim 0", op_index_select, 2, { 2, 2 }, { S(11, 6), S(3, 4) },
	  .index = { 0, 11 }, .dtypes = ALL, .layouts = LAYOUTS },
	{ "index_select dim 1 (i32 ids)", op_index_select, 2, { 3, 1 }, { S(4, 9, 5), S(7) },
	  .index = { 0, 9 }, .dtypes = ALL, .layouts = LAYOUTS, .dim = 1, .op = 1 },
	{ "index_select embedding", op_index_select, 2, { 2, 2 }, { S(1000, 128), S(8, 64) },
	  .index = { 0, 1000 }, .dtypes = F32, .layouts = VIEWS },
	{ "index_add_ dim 0", op_index_add_, 3, { 2, 1, 2 }, { S(11, 6), S(40), S(40, 6) },
	  .index = { 0, 11 }, .dtypes = ALL, .layouts = LAYOUTS, .inplace = 1, .ulps32 = 8,
	  .ulps64 = 8 },
	{ "index_add_ dim 1", op_index_add_, 3, { 3, 1, 3 }, { S(3, 7, 5), S(9), S(3, 9, 5) },
	  .index = { 0, 7 }, .dtypes = ALL, .layouts = LAYOUTS, .inplace = 1, .ulps32 = 8,
	  .ulps64 = 8, .dim = 1 },
	{ "index_add_ embedding grad", op_index_add_, 3, { 2, 1, 2 },
	  { S(500, 128), S(2048), S(2048, 128) }, .index = { 0, 500 }, .dtypes = FLOATS,
	  .layouts = VIEWS, .inplace = 1, .ulps32 = 32, .ulps64 = 32 },
	{ "gather dim 1", op_gather, 2, { 2, 2 }, { S(5, 7), S(5, 3) }, .index = { 0, 7 },
	  .dtypes = ALL, .layouts = LAYOUTS, .dim = 1 },
	{ "gather dim 0", op_gather, 2, { 3, 3 }, { S(6, 4, 3), S(2, 4, 3) }, .index = { 0, 6 },
	  .dtypes = ALL, .layouts = LAYOUTS },
	{ "scatter_add_ dim 1", op_scatter_add_, 3, { 2, 2, 2 }, { S(5, 7), S(5, 9), S(5, 9) },
	  .index = { 0, 7 }, .dtypes = ALL, .layouts = LAYOUTS, .inplace = 1, .ulps32 = 8,
	  .ulps64 = 8, .dim = 1 },
	{ "scatter_add_ dim 0", op_scatter_add_, 3, { 2, 2, 2 }, { S(4, 6), S(9, 6), S(9, 6) },
	  .index = { 0, 4 }, .dtypes = ALL, .layouts = LAYOUTS, .inplace = 1, .ulps32 = 8,
	  .ulps64 = 8 },
	{ "adamw", op_adamw, 4, { 2, 2, 2, 2 }, { S(37, 129), S(37, 129), S(37, 129), S(37, 129) },
	  .lo = { -1, -0.1, 0, -1 }, .hi = { 1, 0.1, 0.01, 1 }, .dtypes = FLOATS, .layouts = 0,
	  .ulps32 = 4, .ulps64 = 4 },
	{ "sgd", op_sgd, 2, { 1, 1 }, { S(4097), S(4097) }, .dtypes = FLOATS, .ulps32 = 2,
	  .ulps64 = 2 },
	{ "sgd momentum", op_sgd, 2, { 1, 1 }, { S(4097), S(4097) }, .dtypes = FLOATS,
	  .ulps32 = 2, .ulps64 = 2, .op = 1 },
	{ "conv1d", op_conv1d, 3, { 3, 3, 1 }, { S(2, 3, 17), S(4, 3, 5), S(4) }, .dtypes = FLOATS,
	  .layouts = LAYOUTS, .ulps32 = 32, .ulps64 = 32, .op = 2, .alpha = 1 },
	{ "conv1d kernel = stride", op_conv1d, 2, { 3, 3 }, { S(2, 4, 16), S(5, 4, 4) },
	  .dtypes = FLOATS, .layouts = LAYOUTS, .ulps32 = 32, .ulps64 = 32, .op = 4 },
	{ "contiguous", op_copy, IN1(3, S(4, 5, 6)), .dtypes = ALL, .layouts = LAYOUTS },
	{ "cast to f64", op_copy, IN1(3, S(4, 5, 6)), .dtypes = ALL, .layouts = LAYOUTS,
	  .op = 1, .lo = { -100 }, .hi = { 100 } },
	{ "cast to i32", op_copy, IN1(3, S(4, 5, 6)), .dtypes = ALL, .layouts = LAYOUTS,
	  .op = 2, .lo = { -100 }, .hi = { 100 } },
	{ "concat", op_concat, 2, { 2, 2 }, { S(3, 4), S(3, 7) }, .dtypes = ALL,
	  .layouts = LAYOUTS, .dim = 1 },
	{ "dropout", op_dropout, IN1(2, S(67, 1031)), .dtypes = FLOATS, .layouts = VIEWS },
};

START_TEST(test_table)
{
	run_case(&cases[_i]);
}
END_TEST

/* ---- the generated rows: every unary, binary and reduce op ----------------- */

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

START_TEST(test_unary)
{
	int op = _i;
	double alpha = op == TENSOR_POW_SCALAR	 ? 1.7
		       : op == TENSOR_ADD_SCALAR ? 3
		       : op == TENSOR_MUL_SCALAR ? -2
						 : 0;
	char name[64];
	snprintf(name, sizeof name, "unary op %d", op);
	for (int big = 0; big < 2; big++) {
		struct pcase c = { name, op_unary, 1, { 3 }, { S(3, 5, 7) }, .op = op,
				   .alpha = alpha, .dtypes = FLOATS, .layouts = LAYOUTS,
				   .ulps32 = 16, .ulps64 = 8 };
		if (big) { /* the vectorised path: many blocks, a tail */
			c.ndim[0] = 2;
			c.shape[0][0] = 64;
			c.shape[0][1] = 1031;
			c.layouts = SLICED;
		}
		if (positive_domain(op)) {
			c.lo[0] = 0.1;
			c.hi[0] = 3;
		} else {
			c.lo[0] = -6;
			c.hi[0] = 6;
		}
		run_case(&c);
		if (unary_takes_ints(op)) {
			c.dtypes = INTS;
			c.lo[0] = -50;
			c.hi[0] = 50;
			run_case(&c);
		}
	}
}
END_TEST

START_TEST(test_binary)
{
	int op = _i;
	bool ints = op != TENSOR_DIV && op != TENSOR_POW, cmp = op >= TENSOR_EQ;
	char name[64];
	snprintf(name, sizeof name, "binary op %d", op);
	struct pcase c = { name, op_binary, 2, { 3, 2 }, { S(4, 5, 6), S(5, 6) }, .op = op,
			   .dtypes = ints ? ALL : FLOATS, .layouts = LAYOUTS, .quantize = cmp,
			   .ulps32 = 4, .ulps64 = 4 };
	for (int i = 0; i < 2; i++) {
		c.lo[i] = op == TENSOR_POW ? 0.5 : op == TENSOR_DIV && i ? 0.5 : -4;
		c.hi[i] = op == TENSOR_POW ? 2 : 4;
	}
	run_case(&c);
	/* broadcast both ways, and the long contiguous path */
	c.ndim[0] = 2, c.shape[0][0] = 6, c.shape[0][1] = 1;
	c.ndim[1] = 2, c.shape[1][0] = 1, c.shape[1][1] = 9;
	c.layouts = 0;
	run_case(&c);
	c.shape[0][0] = c.shape[1][0] = 64;
	c.shape[0][1] = c.shape[1][1] = 1031;
	c.layouts = SLICED;
	run_case(&c);
}
END_TEST

/* sum, max, min, argmax, mean, var over each dim, all dims, with and without keepdim. */
START_TEST(test_reduce)
{
	int op = _i;
	static const int64_t shapes[][3] = { { 4, 5, 6 }, { 3, 2000, 1 }, { 2000, 3, 1 } };
	for (int s = 0; s < 3; s++) {
		for (int d = op == 3 ? 0 : -1; d < 3; d++) {
			struct pcase c = { "reduce", op_reduce, 1, { s ? 2 : 3 }, { { 0 } },
					   .op = op, .dim = d, .alpha = d == 1,
					   .dtypes = op < 4 ? ALL : FLOATS, .layouts = LAYOUTS,
					   .ulps32 = 64, .ulps64 = 64, .lo = { -4 }, .hi = { 4 } };
			if (d >= c.ndim[0])
				continue;
			memcpy(c.shape[0], shapes[s], sizeof shapes[s]);
			run_case(&c);
		}
	}
}
END_TEST

/* ---- the device's own behaviour ---------------------------------------------- */

START_TEST(test_random_parity)
{
	const int64_t s[] = { 37, 129 };
	const enum tensor_dtype dts[] = { TENSOR_F32, TENSOR_F64 };
	for (int k = 0; k < 2; k++) {
		assert_near("uniform", tensor_rand_uniform(dts[k], dev, 2, s, 11, -1, 2),
			    tensor_rand_uniform(dts[k], TENSOR_CPU, 2, s, 11, -1, 2), 0);
		/* Box-Muller calls log and cos, whose last bit can differ between
		 * CUDA's libm and glibc's (seen on an H100) */
		assert_near("normal", tensor_rand_normal(dts[k], dev, 2, s, 5, 0.5, 3),
			    tensor_rand_normal(dts[k], TENSOR_CPU, 2, s, 5, 0.5, 3), 4);
	}
	assert_near("full", tensor_full(TENSOR_I64, dev, 2, s, -3),
		    tensor_full(TENSOR_I64, TENSOR_CPU, 2, s, -3), 0);
	assert_near("arange", tensor_arange(TENSOR_F32, dev, 0, 10, 0.5),
		    tensor_arange(TENSOR_F32, TENSOR_CPU, 0, 10, 0.5), 0);
}
END_TEST

START_TEST(test_mixing_devices_is_an_error)
{
	const int64_t s[] = { 4 };
	struct tensor *c = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, s);
	struct tensor *g = tensor_zeros(TENSOR_F32, dev, 1, s);
	tu_assert_error(tensor_copy_(g, c) < 0, TENSOR_ERR_DEVICE, "copy_", "cuda");
	tu_assert_error(!tensor_add(c, g), TENSOR_ERR_DEVICE, "add", "different devices");
	tu_assert_error(!tensor_matmul(tensor_view(c, 2, (int64_t[]){ 2, 2 }),
				       tensor_view(g, 2, (int64_t[]){ 2, 2 })),
			TENSOR_ERR_DEVICE, "matmul", NULL);
	struct tensor *idx = tensor_zeros(TENSOR_I64, TENSOR_CPU, 1, s);
	tu_assert_error(!tensor_index_select(g, 0, idx), TENSOR_ERR_DEVICE, "index_select",
			"cuda");
	ck_assert_uint_ge(tensor_mem_stats(dev).live_bytes, 16);
}
END_TEST

/* An index out of range is found on the device without waiting for it, and
 * reported, with the op, the value and the bound, by the next copy to the
 * host; the kernel that used it touched nothing out of bounds, and the device
 * keeps working. */
START_TEST(test_index_fault_at_sync)
{
	struct tensor *src = to_cuda(tu_rand(TENSOR_F32, 2, (int64_t[]){ 5, 3 }, 1));
	struct tensor *idx =
	    to_cuda(tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ 4 },
				     (int64_t[]){ 1, 4, 7, 0 }));
	size_t syncs = tensor_mem_stats(dev).n_syncs;
	struct tensor *out = tensor_index_select(src, 0, idx);
	ck_assert_msg(out != NULL, "%s", tensor_last_error());
	ck_assert_uint_eq(tensor_mem_stats(dev).n_syncs, syncs);
	float host[12];
	tu_assert_error(tensor_to_host(out, host, sizeof host) < 0, TENSOR_ERR_ARG,
			"index_select: index 7 (at position 2) out of range for dim 0 of size 5",
			"synchronisation");
	/* cleared: the next copy succeeds and the good rows are right */
	ck_assert_int_eq(tensor_to_host(out, host, sizeof host), TENSOR_OK);
	float want[15];
	ck_assert_int_eq(tensor_to_host(src, want, sizeof want), TENSOR_OK);
	ck_assert(host[0] == want[3] && host[3] == want[12] && host[9] == want[0]);
	/* gather and the cross-entropy's targets go the same way */
	struct tensor *g = tensor_gather(src, 1, to_cuda(tensor_full(TENSOR_I64, TENSOR_CPU, 2,
								      (int64_t[]){ 5, 1 }, 3)));
	ck_assert(g != NULL);
	tu_assert_error(tensor_synchronize(dev) < 0, TENSOR_ERR_ARG, "gather", "size 3");
	struct tensor *t = to_cuda(tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ 5 },
						     (int64_t[]){ 0, 1, 2, -1, 3 }));
	struct tensor *loss = nn_cross_entropy(src, t, -1, 0);
	ck_assert(loss != NULL);
	tu_assert_error(tensor_synchronize(dev) < 0, TENSOR_ERR_ARG,
			"nn_cross_entropy: index 3 (at position 4)", "size 3");
	ck_assert_int_eq(tensor_synchronize(dev), TENSOR_OK);
}
END_TEST

START_TEST(test_out_of_memory)
{
	size_t live = tensor_mem_stats(dev).live_bytes;
	/* 8 TiB: more than any GPU holds */
	tu_assert_error(!tensor_empty(TENSOR_F32, dev, 2, (int64_t[]){ 1 << 20, 1 << 21 }),
			TENSOR_ERR_NOMEM, "cuda", NULL);
	tensor_scope_begin();
	tu_assert_error(!tensor_zeros(TENSOR_F64, dev, 1, (int64_t[]){ 1ll << 40 }),
			TENSOR_ERR_NOMEM, "cuda", NULL);
	tensor_scope_end();
	ck_assert_uint_eq(tensor_mem_stats(dev).live_bytes, live);
	/* the device still works */
	assert_near("after oom", tensor_full(TENSOR_F32, dev, 1, (int64_t[]){ 3 }, 2),
		    tensor_full(TENSOR_F32, TENSOR_CPU, 1, (int64_t[]){ 3 }, 2), 0);
}
END_TEST

/* Scopes of the same tensors again call neither cudaMalloc nor cudaFree, and
 * tensor_mem_trim gives the cache back. */
START_TEST(test_pool_steady_state)
{
	size_t before = 0;
	for (int it = 0; it < 3; it++) {
		if (it == 2)
			before = tensor_mem_stats(dev).n_device_allocs;
		tensor_scope_begin();
		struct tensor *a = tensor_rand_uniform(TENSOR_F32, dev, 2,
						       (int64_t[]){ 300, 700 }, 1, -1, 1);
		struct tensor *b = tensor_matmul(a, tensor_transpose(a, 0, 1));
		struct tensor *c = tensor_softmax(b, -1);
		ck_assert(c != NULL);
		tensor_scope_end();
		/* small heap tensors come from the pool too */
		tensor_heap_begin();
		struct tensor *h = tensor_zeros(TENSOR_F32, dev, 1, (int64_t[]){ 100 });
		tensor_heap_end();
		ck_assert(h != NULL);
		tensor_free(h);
	}
	ck_assert_uint_eq(tensor_mem_stats(dev).n_device_allocs, before);
	tensor_mem_trim();
	ck_assert_uint_gt(tensor_mem_stats(dev).n_device_allocs, before);
}
END_TEST

START_TEST(test_tf32_opt_in)
{
	struct tensor *a = tu_rand(TENSOR_F32, 2, (int64_t[]){ 64, 256 }, 3);
	struct tensor *b = tu_rand(TENSOR_F32, 2, (int64_t[]){ 256, 64 }, 4);
	struct tensor *want = tensor_matmul(a, b);
	ck_assert_int_eq(tensor_cuda_set_tf32(true), TENSOR_OK);
	struct tensor *fast = tensor_matmul(to_cuda(a), to_cuda(b));
	ck_assert_int_eq(tensor_cuda_set_tf32(false), TENSOR_OK);
	struct tensor *exact = tensor_matmul(to_cuda(a), to_cuda(b));
	assert_near("f32", exact, want, 512);
	/* TF32 rounds the inputs to 10 bits: close, but not f32-exact */
	tu_assert_same(tensor_to_device(fast, TENSOR_CPU), want, 2e-2);
}
END_TEST

int main(void)
{
	const char *self = getenv("CFORMER_PARITY_DEVICE");
	if (self && !strcmp(self, "cpu")) {
		dev = TENSOR_CPU;
		printf("test_cuda: the CPU against itself (CFORMER_PARITY_DEVICE=cpu)\n");
	} else if (!tensor_device_available(TENSOR_CUDA)) {
		printf("test_cuda: SKIP: %s\n",
#ifdef CFORMER_HAVE_CUDA
		       "no CUDA device is present"
#else
		       "the CUDA backend is not compiled in (./configure --with-cuda)"
#endif
		);
		return 77;
	}
	/* CUDA does not survive fork() once initialised, and the check above
	 * initialised it: this suite runs in one process */
	setenv("CK_FORK", "no", 1);
	Suite *s = suite_create("cuda");
	TCase *tc = tu_tcase("parity");
	tcase_add_loop_test(tc, test_table, 0, (int)(sizeof cases / sizeof cases[0]));
	tcase_add_loop_test(tc, test_unary, 0, TENSOR_NUNARY);
	tcase_add_loop_test(tc, test_binary, 0, TENSOR_NBINARY);
	tcase_add_loop_test(tc, test_reduce, 0, 6);
	tcase_add_test(tc, test_random_parity);
	suite_add_tcase(s, tc);
	if (dev == TENSOR_CUDA) {
		TCase *own = tu_tcase("device");
		tcase_add_test(own, test_mixing_devices_is_an_error);
		tcase_add_test(own, test_index_fault_at_sync);
		tcase_add_test(own, test_out_of_memory);
		tcase_add_test(own, test_pool_steady_state);
		tcase_add_test(own, test_tf32_opt_in);
		suite_add_tcase(s, own);
	}
	return tu_run(s);
}
