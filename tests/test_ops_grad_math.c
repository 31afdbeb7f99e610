/* test_ops: gradient checks (central differences in f64 against sum(out * R), R fixed random) of
 * matmul, conv1d, reductions, softmax and views, on contiguous, strided, sliced and
 * broadcast inputs and on shapes from a seeded generator. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcases.h"
#include "testutil.h"
#include "test_ops.h"

/* ---- matmul --------------------------------------------------------------- */

/* ta / tb: the leaf holds the operand's matrix transposed and the function passes
 * ag_transpose of it, so matmul reads a transposed view. */
struct mm_ctx {
	bool ta, tb;
};

static struct tensor *f_matmul(struct tensor *const *in, void *ctx)
{
	const struct mm_ctx *c = ctx;
	struct tensor *a = c && c->ta ? ag_transpose(in[0], -1, -2) : in[0];
	struct tensor *b = c && c->tb ? ag_transpose(in[1], -1, -2) : in[1];
	return ag_matmul(a, b);
}

static struct tensor *f_matmul_laid_out(struct tensor *const *in, void *ctx)
{
	(void)ctx; /* the attention heads' layout, B's batch broadcast */
	return ag_matmul_laid_out(in[0], in[1], (const int[]){ 0, 2, 1, 3 });
}

static struct tensor *f_matmul_self(struct tensor *const *in, void *ctx)
{
	(void)ctx; /* x · x^T: two gradients into one input */
	return ag_matmul(in[0], ag_transpose(in[0], -1, -2));
}

/* The spec with its last two dims swapped. */
static struct spec transposed(struct spec s)
{
	if (s.ndim >= 2) {
		int64_t t = s.shape[s.ndim - 1];
		s.shape[s.ndim - 1] = s.shape[s.ndim - 2];
		s.shape[s.ndim - 2] = t;
	}
	return s;
}

START_TEST(test_matmul)
{
	rng_reset(7);
	struct spec pairs[][2] = {
		{ SPEC(-1, 1, 3, 4), SPEC(-1, 1, 4, 5) },
		{ SPEC(-1, 1, 1, 4), SPEC(-1, 1, 4, 1) },
		{ SPEC(-1, 1, 4, 1), SPEC(-1, 1, 1, 3) },
		{ SPEC(-1, 1, 4), SPEC(-1, 1, 4) },
		{ SPEC(-1, 1, 4), SPEC(-1, 1, 4, 5) },
		{ SPEC(-1, 1, 3, 4), SPEC(-1, 1, 4) },
		{ SPEC(-1, 1, 4), SPEC(-1, 1, 2, 4, 3) },
		{ SPEC(-1, 1, 2, 3, 4), SPEC(-1, 1, 4) },
		{ SPEC(-1, 1, 2, 3, 4), SPEC(-1, 1, 2, 4, 5) },
		{ SPEC(-1, 1, 2, 2, 3, 4), SPEC(-1, 1, 2, 2, 4, 2) },
		{ SPEC(-1, 1, 2, 1, 3, 4), SPEC(-1, 1, 3, 4, 2) }, /* batch broadcast both ways */
		{ SPEC(-1, 1, 3, 4), SPEC(-1, 1, 2, 4, 5) },	   /* shared A */
		{ SPEC(-1, 1, 2, 3, 4), SPEC(-1, 1, 4, 5) },	   /* shared B (Linear) */
		{ SPEC(-1, 1, 2, 2, 3, 4), SPEC(-1, 1, 4, 2) },	   /* shared B, 2 batch dims */
		{ SPEC(-1, 1, 1, 3, 4), SPEC(-1, 1, 2, 4, 5) },	   /* size-1 batch in A */
		{ SPEC(-1, 1, 2, 3, 4), SPEC(-1, 1, 1, 4, 5) },	   /* size-1 batch in B */
		{ SPEC(-1, 1, 2, 1, 3, 2), SPEC(-1, 1, 1, 2, 2, 3) },
		{ SPEC(-1, 1, 3, 4), SPEC(-1, 1, 2, 1, 4, 2) },
		{ SPEC(-1, 1, 1, 1), SPEC(-1, 1, 2, 1, 3) },
		{ SPEC(-1, 1, 1, 1), SPEC(-1, 1, 1, 1) },
	};
	for (int p = 0; p < ARRAY_LEN(pairs); p++) {
		check_all("matmul", f_matmul, NULL, 2, pairs[p]);
		struct mm_ctx t[] = { { true, false }, { false, true }, { true, true } };
		for (int k = 0; k < 3; k++) {
			struct spec s[2] = { pairs[p][0], pairs[p][1] };
			if ((t[k].ta && s[0].ndim < 2) || (t[k].tb && s[1].ndim < 2))
				continue;
			if (t[k].ta)
				s[0] = transposed(s[0]);
			if (t[k].tb)
				s[1] = transposed(s[1]);
			check_layout("matmul of transposed views", f_matmul, &t[k], 2, s, CONTIG);
			check_layout("matmul of transposed views", f_matmul, &t[k], 2, s, SLICED);
		}
		/* one side only */
		pairs[p][0].nograd = true;
		check_layout("matmul, B only", f_matmul, NULL, 2, pairs[p], CONTIG);
		pairs[p][0].nograd = false;
		pairs[p][1].nograd = true;
		check_layout("matmul, A only", f_matmul, NULL, 2, pairs[p], STRIDED);
		pairs[p][1].nograd = false;
	}
	struct spec sq = SPEC(-1, 1, 2, 3, 4);
	check_all("matmul x x^T", f_matmul_self, NULL, 1, &sq);
}
END_TEST

START_TEST(test_matmul_laid_out)
{
	const int64_t sa[4] = { 2, 3, 4, 5 }, sb[4] = { 1, 3, 5, 2 };
	struct tensor *a = gc_input(4, sa, 1, -1, 1, false), *b = gc_input(4, sb, 2, -1, 1, true);
	gc_assert("matmul laid out", f_matmul_laid_out, NULL, 2, (struct tensor *[]){ a, b });
}
END_TEST

START_TEST(test_matmul_random_shapes)
{
	rng_reset(8);
	for (int r = 0; r < 12; r++) {
		int64_t m = rng_int(1, 4), k = rng_int(1, 4), n = rng_int(1, 4);
		int nb = rng_int(0, 2);
		struct spec a = { .ndim = nb + 2, .lo = -1, .hi = 1 }, b = a;
		for (int d = 0; d < nb; d++) {
			int64_t s = rng_int(1, 3);
			int which = rng_int(0, 2); /* 0: both, 1: a broadcast, 2: b broadcast */
			a.shape[d] = which == 1 ? 1 : s;
			b.shape[d] = which == 2 ? 1 : s;
		}
		a.shape[nb] = m, a.shape[nb + 1] = k;
		b.shape[nb] = k, b.shape[nb + 1] = n;
		if (nb > 0 && rng_int(0, 2) == 0) { /* drop B's batch dims */
			b.ndim = 2;
			b.shape[0] = k, b.shape[1] = n;
		}
		if (rng_int(0, 3) == 0) { /* a 1-d operand */
			a.ndim = 1;
			a.shape[0] = k;
		}
		struct spec s[2] = { a, b };
		check_all("matmul (random shapes)", f_matmul, NULL, 2, s);
	}
}
END_TEST

START_TEST(test_matmul_empty)
{
	rng_reset(9);
	struct spec pairs[][2] = {
		{ SPEC(-1, 1, 3, 0), SPEC(-1, 1, 0, 2) }, /* k = 0: zeros */
		{ SPEC(-1, 1, 0, 3), SPEC(-1, 1, 3, 2) }, /* m = 0 */
		{ SPEC(-1, 1, 0, 3, 2), SPEC(-1, 1, 2, 2) },
		{ SPEC(-1, 1, 0, 3), SPEC(-1, 1, 2, 3, 2) },	/* shared A, m = 0 */
		{ SPEC(-1, 1, 3, 2), SPEC(-1, 1, 2, 2, 0) },	/* shared A, n = 0 */
		{ SPEC(-1, 1, 2, 3, 0), SPEC(-1, 1, 0, 2) },	/* shared B, k = 0 */
		{ SPEC(-1, 1, 2, 0, 3), SPEC(-1, 1, 3, 2) },	/* shared B, m = 0 */
		{ SPEC(-1, 1, 0, 3, 2), SPEC(-1, 1, 0, 2, 2) }, /* empty batch */
	};
	for (int p = 0; p < ARRAY_LEN(pairs); p++)
		check_layout("matmul (empty)", f_matmul, NULL, 2, pairs[p], CONTIG);
	/* the gradient of the non-empty B when m = 0 is zero */
	struct tensor *a = gc_input(2, SHAPE(0, 3), 1, -1, 1, false);
	struct tensor *b = gc_input(2, SHAPE(3, 2), 2, -1, 1, false);
	ck_assert_int_eq(ag_backward(ag_sum(ag_matmul(a, b), 0, NULL, false), NULL), TENSOR_OK);
	double *g = tu_values(b->grad);
	for (int i = 0; i < 6; i++)
		ck_assert(g[i] == 0);
	free(g);
}
END_TEST

START_TEST(test_matmul_errors)
{
	rng_reset(10);
	struct tensor *a = gc_input(2, SHAPE(3, 4), 1, -1, 1, false);
	struct tensor *b = gc_input(2, SHAPE(3, 4), 2, -1, 1, false);
	tu_assert_error(ag_matmul(a, b) == NULL, TENSOR_ERR_SHAPE, "matmul", "[3,4] x [3,4]");
	ck_assert(ag_matmul(NULL, b) == NULL);
	ck_assert_int_eq(ag_tape_size(), 0);
	/* no grad: nothing recorded, same values */
	ag_no_grad_begin();
	struct tensor *bt = ag_transpose(b, 0, 1);
	struct tensor *y = ag_matmul(a, bt);
	ag_no_grad_end();
	ck_assert(y && !y->requires_grad);
	ck_assert_int_eq(ag_tape_size(), 0);
	ag_no_grad_begin(); /* the reference, off the tape */
	struct tensor *want = tensor_matmul(a, tensor_transpose(b, 0, 1));
	ag_no_grad_end();
	double *vw = tu_values(want);
	tu_assert_close(y, vw, 9, 0, 0);
	free(vw);
}
END_TEST

/* ---- conv1d --------------------------------------------------------------- */

struct conv_ctx {
	int64_t stride, padding;
};

static struct tensor *f_conv1d(struct tensor *const *in, void *ctx)
{
	const struct conv_ctx *c = ctx;
	return ag_conv1d(in[0], in[1], in[2], c->stride, c->padding);
}

static struct tensor *f_conv1d_nobias(struct tensor *const *in, void *ctx)
{
	const struct conv_ctx *c = ctx;
	return ag_conv1d(in[0], in[1], NULL, c->stride, c->padding);
}

/* Naive conv1d of row-major values: out [B, Cout, Lout]. */
static void conv1d_ref(const double *x, const double *w, const double *bias, int64_t nb,
		       int64_t cin, int64_t len, int64_t cout, int64_t kw, int64_t stride,
		       int64_t pad, double *out)
{
	int64_t lout = (len + 2 * pad - kw) / stride + 1;
	for (int64_t b = 0; b < nb; b++)
		for (int64_t o = 0; o < cout; o++)
			for (int64_t t = 0; t < lout; t++) {
				double s = bias ? bias[o] : 0;
				for (int64_t c = 0; c < cin; c++)
					for (int64_t j = 0; j < kw; j++) {
						int64_t i = t * stride + j - pad;
						if (i >= 0 && i < len)
							s += x[(b * cin + c) * len + i] *
							     w[(o * cin + c) * kw + j];
					}
				out[(b * cout + o) * lout + t] = s;
			}
}

START_TEST(test_conv1d)
{
	rng_reset(11);
	struct {
		int64_t b, cin, len, cout, k, stride, pad;
	} cases[] = {
		{ 2, 3, 7, 2, 3, 1, 0 }, { 2, 3, 7, 2, 3, 2, 1 },
		{ 2, 2, 8, 3, 2, 2, 0 }, /* K == stride */
		{ 1, 3, 9, 2, 3, 3, 0 }, { 2, 2, 5, 2, 1, 1, 0 },
		{ 2, 2, 3, 2, 5, 1, 1 }, /* K = L + 2p */
		{ 1, 2, 6, 2, 2, 3, 2 }, { 3, 1, 5, 1, 3, 1, 2 },
		{ 2, 3, 4, 2, 4, 1, 0 },
	};
	for (int i = 0; i < ARRAY_LEN(cases); i++) {
		struct conv_ctx c = { cases[i].stride, cases[i].pad };
		struct spec sp[3] = { SPEC(-1, 1, cases[i].b, cases[i].cin, cases[i].len),
				      SPEC(-1, 1, cases[i].cout, cases[i].cin, cases[i].k),
				      SPEC(-1, 1, cases[i].cout) };
		char name[128];
		snprintf(name, sizeof name, "conv1d stride %lld padding %lld", (long long)c.stride,
			 (long long)c.padding);
		check_all(name, f_conv1d, &c, 3, sp);
		check_all(name, f_conv1d_nobias, &c, 2, sp);
		sp[0].nograd = true; /* data input: only w and bias */
		check_layout(name, f_conv1d, &c, 3, sp, STRIDED);
		sp[0].nograd = false, sp[1].nograd = sp[2].nograd = true; /* only x */
		check_layout(name, f_conv1d, &c, 3, sp, SLICED);
		sp[1].nograd = sp[2].nograd = false;
		/* forward values against the naive loop, with and without grad */
		struct tensor *x = make_leaf(STRIDED, 3, sp[0].shape, -1, 1);
		struct tensor *w = make_leaf(SLICED, 3, sp[1].shape, -1, 1);
		struct tensor *bias = make_leaf(CONTIG, 1, sp[2].shape, -1, 1);
		double *vx = tu_values(x), *vw = tu_values(w), *vb = tu_values(bias);
		int64_t lout = (cases[i].len + 2 * c.padding - cases[i].k) / c.stride + 1;
		int64_t nout = cases[i].b * cases[i].cout * lout;
		double *want = malloc(sizeof(double) * (size_t)nout);
		for (int nob = 0; nob < 2; nob++) {
			conv1d_ref(vx, vw, nob ? NULL : vb, cases[i].b, cases[i].cin, cases[i].len,
				   cases[i].cout, cases[i].k, c.stride, c.padding, want);
			for (int grad = 0; grad < 2; grad++) {
				if (!grad)
					ag_no_grad_begin();
				struct tensor *y =
				    ag_conv1d(x, w, nob ? NULL : bias, c.stride, c.padding);
				if (!grad)
					ag_no_grad_end();
				ck_assert_msg(y != NULL, "%s", tensor_last_error());
				tu_assert_shape(y, 3, SHAPE(cases[i].b, cases[i].cout, lout));
				tu_assert_close(y, want, nout, 1e-12, 1e-12);
				ck_assert(y->requires_grad == (grad == 1));
				ag_tape_reset();
			}
		}
		free(want);
		free(vx);
		free(vw);
		free(vb);
	}
}
END_TEST

START_TEST(test_conv1d_errors)
{
	rng_reset(12);
	struct tensor *x = gc_input(3, SHAPE(2, 3, 5), 1, -1, 1, false);
	struct tensor *w = gc_input(3, SHAPE(2, 3, 3), 2, -1, 1, false);
	struct tensor *w4 = gc_input(3, SHAPE(2, 4, 3), 3, -1, 1, false);
	struct tensor *wbig = gc_input(3, SHAPE(2, 3, 8), 4, -1, 1, false);
	struct tensor *b3 = gc_input(1, SHAPE(3), 5, -1, 1, false);
	struct tensor *x2 = gc_input(2, SHAPE(3, 5), 6, -1, 1, false);
	tu_assert_error(ag_conv1d(x, w4, NULL, 1, 0) == NULL, TENSOR_ERR_SHAPE, "conv1d",
			"[2,3,5]");
	tu_assert_error(ag_conv1d(x2, w, NULL, 1, 0) == NULL, TENSOR_ERR_SHAPE, "conv1d", "[3,5]");
	tu_assert_error(ag_conv1d(x, wbig, NULL, 1, 1) == NULL, TENSOR_ERR_SHAPE, "conv1d",
			"kernel 8");
	tu_assert_error(ag_conv1d(x, w, b3, 1, 0) == NULL, TENSOR_ERR_SHAPE, "conv1d", "bias [3]");
	tu_assert_error(ag_conv1d(x, w, NULL, 0, 0) == NULL, TENSOR_ERR_ARG, "conv1d", "stride 0");
	tu_assert_error(ag_conv1d(x, w, NULL, 1, -1) == NULL, TENSOR_ERR_ARG, "conv1d",
			"padding -1");
	ck_assert(ag_conv1d(NULL, w, NULL, 1, 0) == NULL);
	ck_assert_int_eq(ag_tape_size(), 0);
	struct tensor *xf = tensor_cast(ag_detach(x), TENSOR_F32);
	tu_assert_error(ag_conv1d(xf, w, NULL, 1, 0) == NULL, TENSOR_ERR_DTYPE, "conv1d", NULL);
	ck_assert_int_eq(ag_tape_size(), 0);
}
END_TEST

/* ---- reductions ------------------------------------------------------------ */

enum red_kind { R_SUM, R_MEAN, R_MAX, R_MIN, R_VAR0, R_VAR1, NRED };
static const char *const red_name[] = {
	"sum", "mean", "max", "min", "var (correction 0)", "var (correction 1)"
};

struct red_ctx {
	enum red_kind kind;
	int ndims;
	int dims[TENSOR_MAX_DIMS];
	bool keepdim;
};

static struct tensor *f_reduce(struct tensor *const *in, void *ctx)
{
	const struct red_ctx *c = ctx;
	switch (c->kind) {
	case R_SUM: return ag_sum(in[0], c->ndims, c->dims, c->keepdim);
	case R_MEAN: return ag_mean(in[0], c->ndims, c->dims, c->keepdim);
	case R_MAX: return ag_max(in[0], c->ndims, c->dims, c->keepdim);
	case R_MIN: return ag_min(in[0], c->ndims, c->dims, c->keepdim);
	case R_VAR0: return ag_var(in[0], c->ndims, c->dims, 0, c->keepdim);
	default: return ag_var(in[0], c->ndims, c->dims, 1, c->keepdim);
	}
}

/* Number of elements reduced into each output element. */
static int64_t red_count(const struct spec *s, const struct red_ctx *c)
{
	int64_t n = 1;
	if (c->ndims == 0)
		for (int d = 0; d < s->ndim; d++)
			n *= s->shape[d];
	for (int k = 0; k < c->ndims; k++)
		n *= s->shape[(c->dims[k] + s->ndim) % s->ndim];
	return n;
}

static void check_reduce(const struct spec *s, struct red_ctx *c, bool all_layouts)
{
	char name[160];
	int k = snprintf(name, sizeof name, "%s over dims {", red_name[c->kind]);
	for (int i = 0; i < c->ndims; i++)
		k += snprintf(name + k, sizeof name - (size_t)k, i ? ",%d" : "%d", c->dims[i]);
	snprintf(name + k, sizeof name - (size_t)k, "%s}%s", c->ndims ? "" : "all",
		 c->keepdim ? " keepdim" : "");
	if (c->kind == R_VAR1 && red_count(s, c) < 2)
		return; /* undefined */
	if (all_layouts)
		check_all(name, f_reduce, c, 1, s);
	else
		check_layout(name, f_reduce, c, 1, s, (enum layout)rng_int(0, NLAYOUTS - 1));
}

START_TEST(test_reductions)
{
	rng_reset(13);
	struct spec s = SPEC(-1, 1, 2, 3, 4);
	struct {
		int n, d[3];
	} dimsets[] = { { 1, { 0 } },	  { 1, { 1 } },	      { 1, { -1 } }, { 2, { 0, 2 } },
			{ 2, { -1, 1 } }, { 3, { 0, 1, 2 } }, { 0, { 0 } } };
	for (int kind = 0; kind < NRED; kind++)
		for (int i = 0; i < ARRAY_LEN(dimsets); i++)
			for (int keep = 0; keep < 2; keep++) {
				struct red_ctx c = {
					(enum red_kind)kind, dimsets[i].n, { 0 }, keep
				};
				memcpy(c.dims, dimsets[i].d, sizeof dimsets[i].d);
				check_reduce(&s, &c, true);
			}
}
END_TEST

START_TEST(test_reductions_random_shapes)
{
	rng_reset(14);
	for (int r = 0; r < 40; r++) {
		struct spec s = { .ndim = rng_int(1, 4), .lo = -1, .hi = 1 };
		rng_shape(s.ndim, s.shape, 36);
		struct red_ctx c = { (enum red_kind)(r % NRED), 0, { 0 }, rng_int(0, 1) };
		for (int d = 0; d < s.ndim; d++)
			if (rng_int(0, 1))
				c.dims[c.ndims++] = rng_int(0, 1) ? d : d - s.ndim;
		check_reduce(&s, &c, false);
	}
	/* a 1-element and a 0-d input */
	struct spec one = SPEC(-1, 1, 1), zero = SPEC0(-1, 1);
	for (int kind = 0; kind < R_VAR1; kind++) {
		struct red_ctx c = { (enum red_kind)kind, 0, { 0 }, false };
		check_reduce(&one, &c, true);
		check_layout(red_name[kind], f_reduce, &c, 1, &zero, CONTIG);
	}
}
END_TEST

/* Ties: no derivative exists there, but the gradient is split equally by contract. */
START_TEST(test_max_min_ties)
{
	rng_reset(15);
	struct tensor *x = tensor_from_data(TENSOR_F64, TENSOR_CPU, 2, SHAPE(2, 3),
					    (double[]){ 1, 3, 3, -2, -2, 0 });
	ag_requires_grad(x, true);
	struct tensor *y = ag_add(ag_max(x, 1, (int[]){ 1 }, false),
				  ag_squeeze(ag_min(x, 1, (int[]){ 1 }, true), 1));
	ck_assert_int_eq(ag_backward(ag_sum(y, 0, NULL, false), NULL), TENSOR_OK);
	tu_assert_close(x->grad, (double[]){ 1, 0.5, 0.5, 0.5, 0.5, 1 }, 6, 1e-15, 0);
	ag_zero_grad(x);
	ck_assert_int_eq(ag_backward(ag_max(x, 0, NULL, false), NULL), TENSOR_OK);
	tu_assert_close(x->grad, (double[]){ 0, 0.5, 0.5, 0, 0, 0 }, 6, 1e-15, 0);
}
END_TEST

/* ---- softmax ---------------------------------------------------------------- */

struct softmax_ctx {
	int dim;
	bool log;
};

static struct tensor *f_softmax(struct tensor *const *in, void *ctx)
{
	const struct softmax_ctx *c = ctx;
	return c->log ? ag_log_softmax(in[0], c->dim) : ag_softmax(in[0], c->dim);
}

START_TEST(test_softmax)
{
	rng_reset(16);
	struct spec s = SPEC(-2, 2, 2, 3, 4);
	for (int log = 0; log < 2; log++) {
		for (int dim = -1; dim < 3; dim++) {
			struct softmax_ctx c = { dim, log };
			check_all(log ? "log_softmax" : "softmax", f_softmax, &c, 1, &s);
		}
		for (int r = 0; r < 8; r++) {
			struct spec rs = { .ndim = rng_int(1, 4), .lo = -3, .hi = 3 };
			rng_shape(rs.ndim, rs.shape, 36);
			struct softmax_ctx c = { rng_int(-rs.ndim, rs.ndim - 1), log };
			check_all(log ? "log_softmax (random shape)" : "softmax (random shape)",
				  f_softmax, &c, 1, &rs);
		}
	}
}
END_TEST

/* ---- views ------------------------------------------------------------------ */

enum view_kind {
	V_VIEW,
	V_RESHAPE,
	V_PERMUTE,
	V_TRANSPOSE,
	V_NARROW,
	V_SLICE,
	V_SELECT,
	V_EXPAND,
	V_SQUEEZE,
	V_UNSQUEEZE,
	V_UNFOLD,
	V_CONTIGUOUS
};

struct view_case {
	const char *name;
	enum view_kind kind;
	struct spec in;
	int nd;	      /* view/reshape/expand: target ndim */
	int64_t p[6]; /* target shape, or dim/start/len/end/step/size parameters */
	int perm[4];
	bool contig_first; /* ag_contiguous before the view (view needs contiguous input) */
};

static struct tensor *apply_view(const struct view_case *c, struct tensor *x)
{
	const int64_t *p = c->p;
	switch (c->kind) {
	case V_VIEW: return ag_view(c->contig_first ? ag_contiguous(x) : x, c->nd, p);
	case V_RESHAPE: return ag_reshape(x, c->nd, p);
	case V_PERMUTE: return ag_permute(x, c->perm);
	case V_TRANSPOSE: return ag_transpose(x, (int)p[0], (int)p[1]);
	case V_NARROW: return ag_narrow(x, (int)p[0], p[1], p[2]);
	case V_SLICE: return ag_slice(x, (int)p[0], p[1], p[2], p[3]);
	case V_SELECT: return ag_select(x, (int)p[0], p[1]);
	case V_EXPAND: return ag_expand(x, c->nd, p);
	case V_SQUEEZE: return ag_squeeze(x, (int)p[0]);
	case V_UNSQUEEZE: return ag_unsqueeze(x, (int)p[0]);
	case V_UNFOLD: return ag_unfold(x, (int)p[0], p[1], p[2]);
	default: return ag_contiguous(x);
	}
}

static struct tensor *f_view(struct tensor *const *in, void *ctx)
{
	return apply_view(ctx, in[0]);
}

/* The view followed by an elementwise op and a product with a second view of the same
 * input, so non-contiguous gradients flow into later ops and accumulate. */
static struct tensor *f_view_chain(struct tensor *const *in, void *ctx)
{
	struct tensor *v = apply_view(ctx, in[0]);
	return ag_mul(ag_tanh(v), ag_sum(ag_mul(in[0], in[0]), 0, NULL, false));
}

static const struct view_case view_cases[] = {
	{ "view", V_VIEW, S(-1, 1, 2, 3, 4), 2, { 6, 4 }, { 0 }, false },
	{ "view -1", V_VIEW, S(-1, 1, 2, 3, 4), 3, { 4, -1, 2 }, { 0 }, true },
	{ "view flat", V_VIEW, S(-1, 1, 2, 3, 4), 1, { 24 }, { 0 }, true },
	{ "reshape", V_RESHAPE, S(-1, 1, 2, 3, 4), 2, { 4, 6 }, { 0 }, false },
	{ "reshape -1", V_RESHAPE, S(-1, 1, 2, 3, 4), 3, { 3, 1, -1 }, { 0 }, false },
	{ "reshape to 0-d", V_RESHAPE, S(-1, 1, 1, 1), 0, { 0 }, { 0 }, false },
	{ "permute", V_PERMUTE, S(-1, 1, 2, 3, 4), 0, { 0 }, { 2, 0, 1 }, false },
	{ "permute 4-d", V_PERMUTE, S(-1, 1, 2, 3, 1, 2), 0, { 0 }, { 1, 3, 0, 2 }, false },
	{ "transpose", V_TRANSPOSE, S(-1, 1, 2, 3, 4), 0, { 0, 2 }, { 0 }, false },
	{ "transpose -1 -2", V_TRANSPOSE, S(-1, 1, 2, 3, 4), 0, { -1, -2 }, { 0 }, false },
	{ "narrow", V_NARROW, S(-1, 1, 2, 3, 4), 0, { 1, 1, 2 }, { 0 }, false },
	{ "narrow last", V_NARROW, S(-1, 1, 2, 3, 4), 0, { -1, 0, 3 }, { 0 }, false },
	{ "slice step 2", V_SLICE, S(-1, 1, 2, 3, 5), 0, { 2, 1, 5, 2 }, { 0 }, false },
	{ "slice step 3 clamped", V_SLICE, S(-1, 1, 2, 7, 2), 0, { 1, 0, 100, 3 }, { 0 }, false },
	{ "slice negative start", V_SLICE, S(-1, 1, 4, 3), 0, { 0, -3, -1, 1 }, { 0 }, false },
	{ "select", V_SELECT, S(-1, 1, 2, 3, 4), 0, { 1, 2 }, { 0 }, false },
	{ "select negative", V_SELECT, S(-1, 1, 2, 3, 4), 0, { -1, -1 }, { 0 }, false },
	{ "select to 0-d", V_SELECT, S(-1, 1, 4), 0, { 0, 2 }, { 0 }, false },
	{ "expand", V_EXPAND, S(-1, 1, 3, 1), 3, { 2, 3, 4 }, { 0 }, false },
	{ "expand new dims", V_EXPAND, S(-1, 1, 4), 3, { 2, 3, 4 }, { 0 }, false },
	{ "expand [1,1]", V_EXPAND, S(-1, 1, 1, 1), 2, { 3, 2 }, { 0 }, false },
	{ "squeeze", V_SQUEEZE, S(-1, 1, 2, 1, 4), 0, { 1 }, { 0 }, false },
	{ "squeeze negative", V_SQUEEZE, S(-1, 1, 3, 4, 1), 0, { -1 }, { 0 }, false },
	{ "unsqueeze 0", V_UNSQUEEZE, S(-1, 1, 3, 4), 0, { 0 }, { 0 }, false },
	{ "unsqueeze last", V_UNSQUEEZE, S(-1, 1, 3, 4), 0, { 2 }, { 0 }, false },
	{ "unsqueeze -2", V_UNSQUEEZE, S(-1, 1, 3, 4), 0, { -2 }, { 0 }, false },
	{ "unfold overlapping", V_UNFOLD, S(-1, 1, 2, 7), 0, { 1, 3, 1 }, { 0 }, false },
	{ "unfold overlapping step 2", V_UNFOLD, S(-1, 1, 2, 8), 0, { -1, 3, 2 }, { 0 }, false },
	{ "unfold tiling", V_UNFOLD, S(-1, 1, 2, 6), 0, { 1, 2, 2 }, { 0 }, false },
	{ "unfold with gaps", V_UNFOLD, S(-1, 1, 2, 7), 0, { 1, 1, 3 }, { 0 }, false },
	{ "unfold dim 0", V_UNFOLD, S(-1, 1, 5, 3), 0, { 0, 2, 1 }, { 0 }, false },
	{ "unfold 3-d", V_UNFOLD, S(-1, 1, 2, 5, 2), 0, { 1, 4, 1 }, { 0 }, false },
	{ "contiguous", V_CONTIGUOUS, S(-1, 1, 2, 3, 4), 0, { 0 }, { 0 }, false },
};

START_TEST(test_views)
{
	rng_reset(17);
	for (int i = 0; i < ARRAY_LEN(view_cases); i++) {
		const struct view_case *c = &view_cases[i];
		if (c->kind == V_VIEW && !c->contig_first) { /* needs a contiguous input */
			check_layout(c->name, f_view, (void *)c, 1, &c->in, CONTIG);
			continue;
		}
		check_all(c->name, f_view, (void *)c, 1, &c->in);
		check_layout(c->name, f_view_chain, (void *)c, 1, &c->in,
			     (enum layout)(i % NLAYOUTS));
	}
}
END_TEST

START_TEST(test_views_random)
{
	rng_reset(18);
	for (int r = 0; r < 24; r++) {
		struct view_case c = { .name = NULL, .in = { .lo = -1, .hi = 1 } };
		c.in.ndim = rng_int(1, 4);
		rng_shape(c.in.ndim, c.in.shape, 48);
		int nd = c.in.ndim, d = rng_int(0, nd - 1);
		int64_t s = c.in.shape[d];
		switch (r % 8) {
		case 0:
			c.kind = V_PERMUTE, c.name = "permute (random)";
			for (int i = 0; i < nd; i++)
				c.perm[i] = i;
			for (int i = nd - 1; i > 0; i--) {
				int j = rng_int(0, i), t = c.perm[i];
				c.perm[i] = c.perm[j];
				c.perm[j] = t;
			}
			break;
		case 1:
			c.kind = V_NARROW, c.name = "narrow (random)";
			c.p[0] = d, c.p[1] = rng_int(0, (int)s - 1);
			c.p[2] = rng_int(1, (int)(s - c.p[1]));
			break;
		case 2:
			c.kind = V_SLICE, c.name = "slice (random)";
			c.p[0] = d, c.p[1] = rng_int(0, (int)s - 1);
			c.p[2] = rng_int((int)c.p[1] + 1, (int)s + 1); /* empty: test_slice_empty */
			c.p[3] = rng_int(1, 3);
			break;
		case 3:
			c.kind = V_SELECT, c.name = "select (random)";
			c.p[0] = d, c.p[1] = rng_int(0, (int)s - 1);
			break;
		case 4:
			c.kind = V_UNFOLD, c.name = "unfold (random)";
			c.p[0] = d, c.p[1] = rng_int(1, (int)s), c.p[2] = rng_int(1, 3);
			break;
		case 5:
			c.kind = V_RESHAPE, c.name = "reshape (random)";
			c.nd = 2, c.p[0] = c.in.shape[0], c.p[1] = -1;
			break;
		case 6:
			c.kind = V_TRANSPOSE, c.name = "transpose (random)";
			c.p[0] = d, c.p[1] = rng_int(-nd, nd - 1);
			break;
		default:
			c.kind = V_EXPAND, c.name = "expand (random)";
			c.nd = nd + 1, c.p[0] = 2;
			for (int i = 0; i < nd; i++) {
				c.p[i + 1] = c.in.shape[i];
				if (i == d) {
					c.in.shape[i] = 1;
					c.p[i + 1] = 3;
				}
			}
			break;
		}
		check_all(c.name, f_view, &c, 1, &c.in);
	}
}
END_TEST

/* Empty slices: the gradient is all zeros, whatever start, end and step. */
START_TEST(test_slice_empty)
{
	rng_reset(20);
	static const struct view_case cases[] = {
		{ "slice empty", V_SLICE, S(-1, 1, 4, 3), 0, { 0, 3, 1, 1 }, { 0 }, false },
		{ "slice empty at 0", V_SLICE, S(-1, 1, 4, 3), 0, { 1, 0, 0, 1 }, { 0 }, false },
		{ "slice empty step 2", V_SLICE, S(-1, 1, 4, 3), 0, { 1, 0, 0, 2 }, { 0 }, false },
		{ "slice empty step 3", V_SLICE, S(-1, 1, 4, 3), 0, { 0, 1, 1, 3 }, { 0 }, false },
	};
	for (int i = 0; i < ARRAY_LEN(cases); i++)
		check_all(cases[i].name, f_view, (void *)&cases[i], 1, &cases[i].in);
}
END_TEST

/* Several ops composed: views, broadcasting, matmul, softmax and reductions. */
static struct tensor *f_attention(struct tensor *const *in, void *ctx)
{
	(void)ctx; /* softmax(q k^T / 2) v with q = x wq, k = x wk, per head */
	struct tensor *x = in[0], *w = in[1];
	struct tensor *q = ag_matmul(x, ag_narrow(w, 1, 0, 4)); /* [2,3,4] */
	struct tensor *k = ag_matmul(x, ag_narrow(w, 1, 4, 4));
	int64_t hs[4] = { 2, 3, 2, 2 };
	int perm[4] = { 0, 2, 1, 3 };
	struct tensor *qh = ag_permute(ag_view(q, 4, hs), perm); /* [2,2,3,2] */
	struct tensor *kh = ag_permute(ag_view(k, 4, hs), perm);
	struct tensor *att =
	    ag_softmax(ag_mul_scalar(ag_matmul(qh, ag_transpose(kh, -1, -2)), 0.5), -1);
	struct tensor *o = ag_matmul(att, kh);
	return ag_sub(o, ag_mean(o, 1, (int[]){ -1 }, true));
}

START_TEST(test_composite)
{
	rng_reset(19);
	struct spec sp[2] = { SPEC(-1, 1, 2, 3, 5), SPEC(-1, 1, 5, 8) };
	check_all("attention-like composite", f_attention, NULL, 2, sp);
}
END_TEST

void ops_grad_math_tcases(Suite *s)
{
	TCase *tc = tu_tcase("grad math");
	tcase_add_test(tc, test_matmul);
	tcase_add_test(tc, test_matmul_random_shapes);
	tcase_add_test(tc, test_matmul_laid_out);
	tcase_add_test(tc, test_matmul_empty);
	tcase_add_test(tc, test_matmul_errors);
	tcase_add_test(tc, test_conv1d);
	tcase_add_test(tc, test_conv1d_errors);
	tcase_add_test(tc, test_reductions);
	tcase_add_test(tc, test_reductions_random_shapes);
	tcase_add_test(tc, test_max_min_ties);
	tcase_add_test(tc, test_softmax);
	tcase_add_test(tc, test_views);
	tcase_add_test(tc, test_views_random);
	tcase_add_test(tc, test_slice_empty);
	tcase_add_test(tc, test_composite);
	suite_add_tcase(s, tc);
}
