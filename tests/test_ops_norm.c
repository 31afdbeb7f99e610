/* test_ops: softmax, log-softmax, layer norm and RMS norm (and the norms'
 * backward) beside the op table's rows, against naive loops: extremes and
 * precision, shapes, in-place forms, the parallel backward, errors and heap
 * results. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "testutil.h"
#include "test_ops.h"

static const enum tensor_dtype FLOATS[] = { TENSOR_F32, TENSOR_F64 };
static const int64_t S345[] = { 3, 4, 5 };

static double tol_of(enum tensor_dtype dt)
{
	return dt == TENSOR_F64 ? 1e-12 : 1e-5;
}

static struct tensor *from_values(enum tensor_dtype dt, int nd, const int64_t *shape,
				  const double *v)
{
	struct tensor *t = tensor_cast(tensor_from_data(TENSOR_F64, TENSOR_CPU, nd, shape, v), dt);
	ck_assert_msg(t != NULL, "%s", tensor_last_error());
	return t;
}

enum layout { L_CONTIG, L_STRIDED, L_TRANSPOSED, L_SLICED, L_EXPAND, NLAYOUTS };

static struct tensor *rnd(enum tensor_dtype dt, int nd, const int64_t *shape, uint64_t seed,
			  double lo, double hi)
{
	struct tensor *t = tensor_rand_uniform(dt, TENSOR_CPU, nd, shape, seed, lo, hi);
	ck_assert_msg(t != NULL, "%s", tensor_last_error());
	return t;
}

/* A [3,4,5] input in the given layout, values in [-scale, scale). */
static struct tensor *input345(enum tensor_dtype dt, enum layout lay, uint64_t seed, double scale)
{
	struct tensor *t = NULL;
	switch (lay) {
	case L_CONTIG: t = rnd(dt, 3, S345, seed, -scale, scale); break;
	case L_STRIDED: t = tu_strided(rnd(dt, 3, S345, seed, -scale, scale)); break;
	case L_TRANSPOSED: {
		const int64_t s[] = { 3, 5, 4 };
		t = tensor_transpose(rnd(dt, 3, s, seed, -scale, scale), 1, 2);
		break;
	}
	case L_SLICED: {
		const int64_t s[] = { 6, 4, 11 };
		t = tensor_slice(tensor_slice(rnd(dt, 3, s, seed, -scale, scale), 0, 0, 6, 2), 2, 1,
				 11, 2);
		break;
	}
	default: {
		const int64_t s[] = { 3, 1, 5 };
		t = tensor_expand(rnd(dt, 3, s, seed, -scale, scale), 3, S345);
	}
	}
	tu_assert_shape(t, 3, S345);
	ck_assert(lay == L_CONTIG || !tensor_is_contiguous(t));
	return t;
}

/* ---- softmax ----------------------------------------------------------------- */

/* Naive (max-shifted) softmax of v (row-major, shape) along dim into y. */
static void ref_softmax(const double *v, int nd, const int64_t *shape, int dim, bool logsm,
			double *y)
{
	int64_t n = 1, stride = 1, idx[TENSOR_MAX_DIMS];
	for (int d = 0; d < nd; d++)
		n *= shape[d];
	for (int d = nd - 1; d > dim; d--)
		stride *= shape[d];
	for (int64_t i = 0; i < n; i++) {
		tu_unravel(i, nd, shape, idx);
		if (idx[dim] != 0)
			continue;
		double m = -INFINITY, s = 0;
		for (int64_t k = 0; k < shape[dim]; k++)
			m = fmax(m, v[i + k * stride]);
		for (int64_t k = 0; k < shape[dim]; k++)
			s += exp(v[i + k * stride] - m);
		for (int64_t k = 0; k < shape[dim]; k++) {
			double e = v[i + k * stride] - m;
			y[i + k * stride] = logsm ? e - log(s) : exp(e) / s;
		}
	}
}

static void check_softmax(const struct tensor *x, int dim, bool logsm, double tol)
{
	int nd = x->ndim, d = dim < 0 ? dim + nd : dim;
	struct tensor *got = logsm ? tensor_log_softmax(x, dim) : tensor_softmax(x, dim);
	tu_assert_shape(got, nd, x->shape);
	ck_assert(tensor_is_contiguous(got));
	ck_assert_int_eq(got->dtype, x->dtype);
	int64_t n = tensor_numel(x);
	double *v = tu_values(x), *want = malloc(sizeof(double) * (size_t)(n + 1));
	ck_assert(want != NULL);
	ref_softmax(v, nd, x->shape, d, logsm, want);
	tu_assert_close(got, want, n, tol, tol);
	free(want);
	free(v);
}

START_TEST(test_softmax_layouts)
{
	enum tensor_dtype dt = FLOATS[_i];
	const int dims[] = { 0, 1, 2, -1, -2, -3 };
	for (int lay = 0; lay < NLAYOUTS; lay++) {
		struct tensor *x = input345(dt, (enum layout)lay, 3 + (uint64_t)lay, 1);
		struct tensor *xs = input345(dt, (enum layout)lay, 3 + (uint64_t)lay, 8);
		for (int k = 0; k < 6; k++)
			for (int lg = 0; lg < 2; lg++) {
				check_softmax(x, dims[k], lg, tol_of(dt));
				check_softmax(xs, dims[k], lg, tol_of(dt));
			}
	}
}
END_TEST

START_TEST(test_softmax_sums_to_one)
{
	enum tensor_dtype dt = FLOATS[_i];
	const int64_t s[] = { 7, 33 };
	struct tensor *x = tensor_rand_normal(dt, TENSOR_CPU, 2, s, 9, 0, 10);
	for (int dim = 0; dim < 2; dim++) {
		double *p = tu_values(tensor_softmax(x, dim));
		double *lp = tu_values(tensor_log_softmax(x, dim));
		int64_t rows = s[1 - dim], n = s[dim];
		for (int64_t r = 0; r < rows; r++) {
			double sp = 0, slp = 0;
			for (int64_t k = 0; k < n; k++) {
				int64_t i = dim == 1 ? r * n + k : k * rows + r;
				ck_assert(p[i] >= 0 && p[i] <= 1);
				ck_assert(fabs(exp(lp[i]) - p[i]) <= 1e-5);
				sp += p[i];
				slp += exp(lp[i]);
			}
			ck_assert_msg(fabs(sp - 1) < 1e-5, "row %lld sums to %.9g", (long long)r,
				      sp);
			ck_assert(fabs(slp - 1) < 1e-5);
		}
		free(p);
		free(lp);
	}
}
END_TEST

START_TEST(test_softmax_extremes)
{
	enum tensor_dtype dt = FLOATS[_i];
	const double ln2 = log(2.0);
	/* huge values stay finite; -inf entries get probability 0 */
	const double v[] = { 1000, 1000, -1000, 0, /**/ -1000, -1000, -1000, -INFINITY };
	const int64_t s24[] = { 2, 4 }, s42[] = { 4, 2 };
	struct tensor *x = from_values(dt, 2, s24, v);
	const double wp[] = { 0.5, 0.5, 0, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0 };
	const double wl[] = { -ln2,	 -ln2,	    -2000 - ln2, -1000 - ln2,
			      -log(3.0), -log(3.0), -log(3.0),	 -INFINITY };
	tu_assert_close(tensor_softmax(x, 1), wp, 8, 1e-6, 1e-6);
	tu_assert_close(tensor_log_softmax(x, -1), wl, 8, 1e-4, 1e-6);
	/* the same along dim 0 of the transpose (a strided column) */
	struct tensor *xt = tensor_transpose(x, 0, 1);
	tu_assert_shape(xt, 2, s42);
	const double wpt[] = { 0.5, 1.0 / 3, 0.5, 1.0 / 3, 0, 1.0 / 3, 0, 0 };
	tu_assert_close(tensor_softmax(xt, 0), wpt, 8, 1e-6, 1e-6);
	/* a row of -inf (or with a NaN) is NaN, as PyTorch gives */
	const double bad[] = { -INFINITY, -INFINITY, 1, NAN };
	const int64_t s22[] = { 2, 2 };
	struct tensor *b = from_values(dt, 2, s22, bad);
	const double wnan[] = { NAN, NAN, NAN, NAN };
	tu_assert_close(tensor_softmax(b, 1), wnan, 4, 0, 0);
	tu_assert_close(tensor_log_softmax(b, 1), wnan, 4, 0, 0);
}
END_TEST

/* f32 softmax uses its own vectorised exp: it must stay within a few ulp over
 * the whole range of shifted inputs, down to exp(-87) and below. */
START_TEST(test_softmax_precision)
{
	const int64_t s[] = { 3, 2001 };
	double *v = malloc(sizeof(double) * 3 * 2001), *want = malloc(sizeof(double) * 3 * 2001);
	ck_assert(v && want);
	for (int64_t i = 0; i < 2001; i++) {
		v[i] = -100.0 + 0.05 * (double)i;	    /* -100 .. 0 */
		v[2001 + i] = 3.0 - 0.0015 * (double)i;	    /* 3 .. 0 */
		v[4002 + i] = (double)((i * 37) % 101) / 7; /* repeated values */
	}
	struct tensor *x = from_values(TENSOR_F32, 2, s, v);
	double *xv = tu_values(x);
	for (int lg = 0; lg < 2; lg++) {
		ref_softmax(xv, 2, s, 1, lg, want);
		struct tensor *got = lg ? tensor_log_softmax(x, 1) : tensor_softmax(x, 1);
		if (lg)
			tu_assert_close(got, want, 3 * 2001, 2e-6, 1e-6);
		else
			tu_assert_close(got, want, 3 * 2001, 1e-40, 1e-6);
	}
	free(xv);
	free(want);
	free(v);
}
END_TEST

START_TEST(test_softmax_shapes)
{
	enum tensor_dtype dt = FLOATS[_i];
	/* a scalar is a row of one */
	const double v = 3, one = 1, zero = 0;
	struct tensor *s = from_values(dt, 0, NULL, &v);
	struct tensor *p = tensor_softmax(s, 0), *lp = tensor_log_softmax(s, -1);
	tu_assert_shape(p, 0, NULL);
	tu_assert_close(p, &one, 1, 0, 0);
	tu_assert_close(lp, &zero, 1, 0, 0);
	/* empty rows and no rows */
	const int64_t s05[] = { 0, 5 }, s30[] = { 3, 0 };
	tu_assert_shape(tensor_softmax(tensor_zeros(dt, TENSOR_CPU, 2, s05), 1), 2, s05);
	tu_assert_shape(tensor_softmax(tensor_zeros(dt, TENSOR_CPU, 2, s30), 1), 2, s30);
	tu_assert_shape(tensor_log_softmax(tensor_zeros(dt, TENSOR_CPU, 2, s30), 0), 2, s30);
	/* large: parallel rows, along the last dim and across rows */
	const int64_t big[] = { 64, 1024 };
	struct tensor *x = tu_rand(dt, 2, big, 4);
	check_softmax(x, 1, false, tol_of(dt));
	check_softmax(x, 0, true, tol_of(dt));
	check_softmax(tu_strided(x), 1, false, tol_of(dt));
}
END_TEST

START_TEST(test_softmax_errors)
{
	const int64_t s34[] = { 3, 4 };
	struct tensor *x = tu_rand(TENSOR_F32, 2, s34, 1);
	tu_assert_error(!tensor_softmax(x, 2), TENSOR_ERR_SHAPE, "softmax: dim 2", "[3,4]");
	tu_assert_error(!tensor_log_softmax(x, -3), TENSOR_ERR_SHAPE, "log_softmax: dim -3",
			"[3,4]");
	struct tensor *xi = tensor_zeros(TENSOR_I64, TENSOR_CPU, 2, s34);
	tu_assert_error(!tensor_softmax(xi, 1), TENSOR_ERR_DTYPE, "softmax", "i64");
	tu_assert_error(!tensor_log_softmax(xi, 1), TENSOR_ERR_DTYPE, "log_softmax", "[3,4]");
	tensor_error(TENSOR_ERR_ARG, "first");
	ck_assert(!tensor_softmax(NULL, 0));
	ck_assert(!tensor_log_softmax(NULL, 0));
	ck_assert_str_eq(tensor_last_error(), "first");
	tensor_clear_error();
}
END_TEST

/* In place: the same values as tensor_softmax, in x's own buffer; and the
 * refusals (strided, 0-d, integer, saved by the tape). */
START_TEST(test_softmax_inplace)
{
	enum tensor_dtype dt = FLOATS[_i];
	const int64_t s[] = { 5, 3, 1500 }; /* rows longer than one summing block */
	struct tensor *x = tu_rand(dt, 3, s, 21);
	double *want = tu_values(tensor_softmax(x, -1));
	void *buf = x->storage->data;
	ck_assert_int_eq(tensor_softmax_(x), TENSOR_OK);
	ck_assert_ptr_eq(x->storage->data, buf);
	tu_assert_close(x, want, 5 * 3 * 1500, 0, 0);
	free(want);
	const int64_t s34[] = { 3, 4 };
	struct tensor *y = tu_rand(dt, 2, s34, 22);
	tu_assert_error(tensor_softmax_(tu_strided(y)) < 0, TENSOR_ERR_SHAPE, "tensor_softmax_",
			"contiguous");
	tu_assert_error(tensor_softmax_(tensor_zeros(dt, TENSOR_CPU, 0, NULL)) < 0,
			TENSOR_ERR_SHAPE, "tensor_softmax_", "at least 1 dim");
	tu_assert_error(tensor_softmax_(tensor_zeros(TENSOR_I32, TENSOR_CPU, 2, s34)) < 0,
			TENSOR_ERR_DTYPE, "tensor_softmax_", "i32");
	tu_assert_error(tensor_softmax_(NULL) < 0, TENSOR_ERR_ARG, "tensor_softmax_", "NULL");
	/* saved for backward: refused, and x is unchanged */
	struct tensor *w = tu_rand(dt, 2, s34, 23);
	ck_assert_int_eq(ag_requires_grad(w, true), TENSOR_OK);
	tensor_scope_begin();
	struct tensor *p = ag_softmax(w, 1); /* saves its output p */
	double *before = tu_values(p);
	tu_assert_error(tensor_softmax_(p) < 0, TENSOR_ERR_STATE, "tensor_softmax_", "autograd");
	tu_assert_close(p, before, 12, 0, 0);
	tensor_scope_end();
	free(before);
	tensor_free(w);
}
END_TEST

/* The one-pass gradient against y (g - sum(g y)) in double, rows longer than
 * one summing block, strided operands; and the errors. */
START_TEST(test_softmax_backward)
{
	enum tensor_dtype dt = FLOATS[_i];
	const int64_t s[] = { 3, 2, 1500 }, n = 3 * 2 * 1500;
	struct tensor *y = tensor_softmax(tu_rand(dt, 3, s, 31), -1);
	struct tensor *g = tu_rand(dt, 3, s, 32);
	double *vy = tu_values(y), *vg = tu_values(g), *want = malloc(sizeof(double) * n);
	ck_assert(want != NULL);
	for (int64_t r = 0; r < 6; r++) {
		double dot = 0;
		for (int64_t i = 0; i < 1500; i++)
			dot += vg[r * 1500 + i] * vy[r * 1500 + i];
		for (int64_t i = 0; i < 1500; i++)
			want[r * 1500 + i] = vy[r * 1500 + i] * (vg[r * 1500 + i] - dot);
	}
	double tol = dt == TENSOR_F32 ? 1e-6 : 1e-14;
	tu_assert_close(tensor_softmax_backward(y, g), want, n, tol, tol);
	tu_assert_close(tensor_softmax_backward(y, tu_strided(g)), want, n, tol, tol);
	void *buf = g->storage->data; /* in place: the same values in g's buffer */
	ck_assert_int_eq(tensor_softmax_backward_(tu_strided(y), g), TENSOR_OK);
	ck_assert_ptr_eq(g->storage->data, buf);
	tu_assert_close(g, want, n, tol, tol);
	free(want);
	free(vy);
	free(vg);
	const int64_t s34[] = { 3, 4 }, s43[] = { 4, 3 }, s30[] = { 3, 0 };
	tu_assert_shape(tensor_softmax_backward(tensor_zeros(dt, TENSOR_CPU, 2, s30),
						tensor_zeros(dt, TENSOR_CPU, 2, s30)),
			2, s30);
	struct tensor *a = tu_rand(dt, 2, s34, 33);
	tu_assert_error(!tensor_softmax_backward(a, tu_rand(dt, 2, s43, 34)), TENSOR_ERR_SHAPE,
			"softmax_backward", "[4,3]");
	enum tensor_dtype other = dt == TENSOR_F32 ? TENSOR_F64 : TENSOR_F32;
	tu_assert_error(!tensor_softmax_backward(a, tu_rand(other, 2, s34, 35)), TENSOR_ERR_DTYPE,
			"softmax_backward", NULL);
	tu_assert_error(!tensor_softmax_backward(tensor_zeros(TENSOR_I32, TENSOR_CPU, 2, s34), a),
			TENSOR_ERR_DTYPE, "softmax_backward", "i32");
	ck_assert(!tensor_softmax_backward(NULL, a));
	struct tensor *g34 = tu_rand(dt, 2, s34, 36), *gt = tensor_transpose(g34, 0, 1);
	tu_assert_error(tensor_softmax_backward_(a, gt) < 0, TENSOR_ERR_SHAPE,
			"tensor_softmax_backward_", "[3,4]");
	tu_assert_error(tensor_softmax_backward_(tu_rand(dt, 2, s43, 37), gt) < 0, TENSOR_ERR_SHAPE,
			"tensor_softmax_backward_", "contiguous");
	tu_assert_error(tensor_softmax_backward_(a, NULL) < 0, TENSOR_ERR_ARG,
			"tensor_softmax_backward_", "NULL");
	ck_assert_int_eq(tensor_softmax_backward_(tensor_zeros(dt, TENSOR_CPU, 2, s30),
						  tensor_zeros(dt, TENSOR_CPU, 2, s30)),
			 TENSOR_OK);
}
END_TEST

/* ---- layer norm and RMS norm --------------------------------------------------- */

/* Naive norm of v's rows of c elements (w, b NULL or [c]). */
static void ref_norm(const double *v, int64_t rows, int64_t c, const double *w, const double *b,
		     double eps, bool rms, double *y, double *mean, double *rstd)
{
	for (int64_t r = 0; r < rows; r++) {
		const double *x = v + r * c;
		double m = 0, q = 0;
		for (int64_t i = 0; i < c && !rms; i++)
			m += x[i] / (double)c;
		for (int64_t i = 0; i < c; i++)
			q += (x[i] - m) * (x[i] - m) / (double)c;
		double rs = 1 / sqrt(q + eps);
		for (int64_t i = 0; i < c; i++)
			y[r * c + i] = (x[i] - m) * rs * (w ? w[i] : 1) + (b ? b[i] : 0);
		mean[r] = m;
		rstd[r] = rs;
	}
}

/* Run layer_norm (or rms_norm) on x with optional w, b; compare y and stats. */
static void check_norm(const struct tensor *x, const struct tensor *w, const struct tensor *b,
		       double eps, bool rms, double tol)
{
	int nd = x->ndim;
	int64_t c = x->shape[nd - 1], rows = c ? tensor_numel(x) / c : 0;
	struct tensor *mean = NULL, *rstd = NULL;
	struct tensor *y =
	    rms ? tensor_rms_norm(x, w, eps, &rstd) : tensor_layer_norm(x, w, b, eps, &mean, &rstd);
	tu_assert_shape(y, nd, x->shape);
	ck_assert(tensor_is_contiguous(y));
	int64_t sshape[TENSOR_MAX_DIMS];
	memcpy(sshape, x->shape, sizeof(int64_t) * (size_t)nd);
	sshape[nd - 1] = 1;
	tu_assert_shape(rstd, nd, sshape);
	if (!rms)
		tu_assert_shape(mean, nd, sshape);
	double *v = tu_values(x), *wv = w ? tu_values(w) : NULL, *bv = b ? tu_values(b) : NULL;
	double *want = malloc(sizeof(double) * (size_t)(rows * c + 1));
	double *wm = malloc(sizeof(double) * (size_t)(rows + 1));
	double *wr = malloc(sizeof(double) * (size_t)(rows + 1));
	ck_assert(want && wm && wr);
	ref_norm(v, rows, c, wv, rms ? NULL : bv, eps, rms, want, wm, wr);
	tu_assert_close(y, want, rows * c, tol, tol);
	tu_assert_close(rstd, wr, rows, tol, tol);
	if (!rms)
		tu_assert_close(mean, wm, rows, tol, tol);
	free(want);
	free(wm);
	free(wr);
	free(v);
	free(wv);
	free(bv);
}

/* [2,3,8] inputs in each layout, with every combination of w and b. */
static void run_norm_matrix(enum tensor_dtype dt, bool rms)
{
	const int64_t s238[] = { 2, 3, 8 }, c = 8, c2 = 16;
	struct tensor *xs[4];
	xs[0] = tu_rand(dt, 3, s238, 1);
	xs[1] = tu_strided(xs[0]);
	const int64_t s283[] = { 2, 8, 3 }, s2316[] = { 2, 3, 16 };
	xs[2] = tensor_transpose(tu_rand(dt, 3, s283, 2), 1, 2);
	xs[3] = tensor_slice(tu_rand(dt, 3, s2316, 3), 2, 1, 16, 2);
	struct tensor *w = rnd(dt, 1, &c, 4, 0.5, 2.5);
	struct tensor *b = tu_rand(dt, 1, &c, 5);
	struct tensor *ws = tensor_slice(tu_rand(dt, 1, &c2, 6), 0, 0, 16, 2); /* strided w */
	const int64_t one = 1;
	struct tensor *wb = tensor_expand(tu_rand(dt, 1, &one, 7), 1, &c); /* broadcast w */
	for (int k = 0; k < 4; k++) {
		tu_assert_shape(xs[k], 3, s238);
		check_norm(xs[k], NULL, NULL, 1e-5, rms, tol_of(dt));
		check_norm(xs[k], w, NULL, 1e-5, rms, tol_of(dt));
		check_norm(xs[k], NULL, b, 1e-5, rms, tol_of(dt));
		check_norm(xs[k], w, b, 0.1, rms, tol_of(dt));
		check_norm(xs[k], ws, b, 1e-5, rms, tol_of(dt));
		check_norm(xs[k], wb, NULL, 0, rms, tol_of(dt));
	}
}

START_TEST(test_layer_norm)
{
	run_norm_matrix(FLOATS[_i], false);
}
END_TEST

START_TEST(test_rms_norm)
{
	run_norm_matrix(FLOATS[_i], true);
}
END_TEST

START_TEST(test_norm_shapes)
{
	enum tensor_dtype dt = FLOATS[_i];
	/* a large offset with a small spread: the statistics keep their precision */
	const int64_t s[] = { 4, 64 };
	double *v = tu_values(tu_rand(TENSOR_F64, 2, s, 8));
	for (int i = 0; i < 256; i++)
		v[i] = 1000 + 1e-2 * v[i];
	struct tensor *x = from_values(dt, 2, s, v);
	free(v);
	check_norm(x, NULL, NULL, 0, false, dt == TENSOR_F64 ? 1e-9 : 1e-4);
	/* 1-d input, C == 1, and parallel rows */
	const int64_t c = 7, s31[] = { 3, 1 }, big[] = { 8, 8192 }, cb = 8192;
	check_norm(tu_rand(dt, 1, &c, 9), NULL, NULL, 1e-5, false, tol_of(dt));
	check_norm(tu_rand(dt, 1, &c, 9), NULL, NULL, 1e-5, true, tol_of(dt));
	check_norm(tu_rand(dt, 2, s31, 10), NULL, NULL, 1e-5, false, tol_of(dt));
	struct tensor *xb = tu_rand(dt, 2, big, 11), *wb = tu_rand(dt, 1, &cb, 12);
	check_norm(xb, wb, wb, 1e-5, false, tol_of(dt));
	check_norm(xb, wb, NULL, 1e-5, true, tol_of(dt));
	/* no rows, and empty rows (statistics NaN) */
	const int64_t s08[] = { 0, 8 }, s01[] = { 0, 1 }, s30[] = { 3, 0 };
	struct tensor *mean, *rstd;
	tu_assert_shape(
	    tensor_layer_norm(tensor_zeros(dt, TENSOR_CPU, 2, s08), NULL, NULL, 1e-5, &mean, &rstd),
	    2, s08);
	tu_assert_shape(mean, 2, s01);
	struct tensor *y =
	    tensor_layer_norm(tensor_zeros(dt, TENSOR_CPU, 2, s30), NULL, NULL, 1e-5, &mean, &rstd);
	tu_assert_shape(y, 2, s30);
	const double nans[] = { NAN, NAN, NAN };
	tu_assert_close(mean, nans, 3, 0, 0);
	tu_assert_close(rstd, nans, 3, 0, 0);
	/* statistics are optional */
	struct tensor *x2 = tu_rand(dt, 2, s, 13);
	mean = rstd = x2;
	ck_assert(tensor_layer_norm(x2, NULL, NULL, 1e-5, NULL, &rstd) != NULL);
	ck_assert(rstd != x2 && rstd != NULL);
	ck_assert(tensor_layer_norm(x2, NULL, NULL, 1e-5, &mean, NULL) != NULL);
	ck_assert(mean != x2 && mean != NULL);
	ck_assert(tensor_rms_norm(x2, NULL, 1e-5, NULL) != NULL);
}
END_TEST

START_TEST(test_norm_errors)
{
	const int64_t s238[] = { 2, 3, 8 }, c8 = 8, c9 = 9, s18[] = { 1, 8 };
	struct tensor *x = tu_rand(TENSOR_F32, 3, s238, 1);
	struct tensor *w9 = tu_rand(TENSOR_F32, 1, &c9, 2), *w18 = tu_rand(TENSOR_F32, 2, s18, 3);
	struct tensor *w64 = tu_rand(TENSOR_F64, 1, &c8, 4);
	struct tensor *wi = tensor_zeros(TENSOR_I32, TENSOR_CPU, 1, &c8);
	struct tensor *mean = x, *rstd = x;
	tu_assert_error(!tensor_layer_norm(x, w9, NULL, 1e-5, &mean, &rstd), TENSOR_ERR_SHAPE,
			"layer_norm: w [9]", "[2,3,8]");
	ck_assert(mean == NULL && rstd == NULL);
	tu_assert_error(!tensor_layer_norm(x, NULL, w18, 1e-5, NULL, NULL), TENSOR_ERR_SHAPE,
			"layer_norm: b [1,8]", "expected [8]");
	tu_assert_error(!tensor_layer_norm(x, NULL, w64, 1e-5, NULL, NULL), TENSOR_ERR_DTYPE,
			"layer_norm: b [8] is f64", "f32");
	tu_assert_error(!tensor_rms_norm(x, wi, 1e-5, NULL), TENSOR_ERR_DTYPE, "rms_norm: w",
			"i32");
	tu_assert_error(!tensor_rms_norm(x, w9, 1e-5, &rstd), TENSOR_ERR_SHAPE, "rms_norm: w [9]",
			"[2,3,8]");
	tu_assert_error(!tensor_layer_norm(x, NULL, NULL, -1, NULL, NULL), TENSOR_ERR_ARG,
			"layer_norm: eps", "[2,3,8]");
	tu_assert_error(!tensor_rms_norm(x, NULL, NAN, NULL), TENSOR_ERR_ARG, "rms_norm: eps",
			"[2,3,8]");
	struct tensor *xi = tensor_zeros(TENSOR_I64, TENSOR_CPU, 3, s238);
	tu_assert_error(!tensor_layer_norm(xi, NULL, NULL, 1e-5, NULL, NULL), TENSOR_ERR_DTYPE,
			"layer_norm", "i64");
	const double v = 1;
	struct tensor *s = tensor_from_data(TENSOR_F64, TENSOR_CPU, 0, NULL, &v);
	tu_assert_error(!tensor_rms_norm(s, NULL, 1e-5, NULL), TENSOR_ERR_SHAPE, "rms_norm", "0-d");
	tu_assert_error(!tensor_layer_norm(s, NULL, NULL, 1e-5, NULL, NULL), TENSOR_ERR_SHAPE,
			"layer_norm", "[]");
	tensor_error(TENSOR_ERR_ARG, "first");
	mean = rstd = x;
	ck_assert(!tensor_layer_norm(NULL, NULL, NULL, 1e-5, &mean, &rstd));
	ck_assert(mean == NULL && rstd == NULL);
	ck_assert(!tensor_rms_norm(NULL, NULL, 1e-5, &rstd));
	ck_assert_str_eq(tensor_last_error(), "first");
	tensor_clear_error();
}
END_TEST

/* ---- norm backward ------------------------------------------------------------- */

/* The backward formula in double, from the forward's statistics (mean NULL for
 * RMS norm): dx = rstd * (dxhat - xhat * mean(dxhat * xhat) - mean(dxhat)). */
static void ref_norm_backward(const double *g, const double *x, const double *mean,
			      const double *rstd, const double *w, int64_t rows, int64_t c,
			      double *dx, double *dw, double *db)
{
	for (int64_t i = 0; i < c; i++)
		dw[i] = db[i] = 0;
	for (int64_t r = 0; r < rows; r++) {
		const double *xr = x + r * c, *gr = g + r * c;
		double m = mean ? mean[r] : 0, rs = rstd[r], a = 0, b = 0;
		for (int64_t i = 0; i < c; i++) {
			double xh = (xr[i] - m) * rs, d = gr[i] * (w ? w[i] : 1);
			a += d * xh / (double)c;
			b += d / (double)c;
		}
		if (!mean)
			b = 0;
		for (int64_t i = 0; i < c; i++) {
			double xh = (xr[i] - m) * rs, d = gr[i] * (w ? w[i] : 1);
			dx[r * c + i] = rs * (d - xh * a - b);
			dw[i] += gr[i] * xh;
			db[i] += gr[i];
		}
	}
}

static double *alloc_values(int64_t n)
{
	double *v = malloc(sizeof(double) * (size_t)(n + 1));
	ck_assert(v != NULL);
	return v;
}

/* tensor_norm_backward of g at x (statistics from the forward) against the
 * reference, with every output and with each output alone. */
static void check_norm_backward(const struct tensor *x, const struct tensor *g,
				const struct tensor *w, bool rms, double tol)
{
	int nd = x->ndim;
	int64_t c = x->shape[nd - 1], rows = 1;
	for (int d = 0; d < nd - 1; d++)
		rows *= x->shape[d];
	struct tensor *mean = NULL, *rstd = NULL;
	ck_assert(rms ? tensor_rms_norm(x, w, 1e-5, &rstd) != NULL
		      : tensor_layer_norm(x, w, NULL, 1e-5, &mean, &rstd) != NULL);
	struct tensor *dx, *dw, *db;
	ck_assert_msg(tensor_norm_backward(g, x, mean, rstd, w, &dx, &dw, &db) == TENSOR_OK, "%s",
		      tensor_last_error());
	tu_assert_shape(dx, nd, x->shape);
	tu_assert_shape(dw, 1, &c);
	tu_assert_shape(db, 1, &c);
	ck_assert(tensor_is_contiguous(dx) && tensor_is_contiguous(dw) && tensor_is_contiguous(db));
	ck_assert(dx->dtype == x->dtype && dw->dtype == x->dtype && db->dtype == x->dtype);
	double *vx = tu_values(x), *vg = tu_values(g), *vr = tu_values(rstd);
	double *vm = mean ? tu_values(mean) : NULL, *vw = w ? tu_values(w) : NULL;
	double *wdx = alloc_values(rows * c), *wdw = alloc_values(c), *wdb = alloc_values(c);
	ref_norm_backward(vg, vx, vm, vr, vw, rows, c, wdx, wdw, wdb);
	tu_assert_close(dx, wdx, rows * c, tol, tol);
	tu_assert_close(dw, wdw, c, tol, tol);
	tu_assert_close(db, wdb, c, tol, tol);
	struct tensor *one[3] = { NULL, NULL, NULL };
	ck_assert_int_eq(tensor_norm_backward(g, x, mean, rstd, w, &one[0], NULL, NULL), TENSOR_OK);
	tu_assert_close(one[0], wdx, rows * c, tol, tol);
	ck_assert_int_eq(tensor_norm_backward(g, x, mean, rstd, w, NULL, &one[1], NULL), TENSOR_OK);
	tu_assert_close(one[1], wdw, c, tol, tol);
	ck_assert_int_eq(tensor_norm_backward(g, x, mean, rstd, w, NULL, NULL, &one[2]), TENSOR_OK);
	tu_assert_close(one[2], wdb, c, tol, tol);
	ck_assert_int_eq(tensor_norm_backward(g, x, mean, rstd, w, NULL, NULL, NULL), TENSOR_OK);
	free(vx);
	free(vg);
	free(vr);
	free(vm);
	free(vw);
	free(wdx);
	free(wdw);
	free(wdb);
}

/* [2,3,8] x and g in each layout (g also broadcast along rows and along C),
 * with w absent, contiguous, strided and broadcast. */
static void run_norm_backward_matrix(enum tensor_dtype dt, bool rms)
{
	const int64_t s238[] = { 2, 3, 8 }, s283[] = { 2, 8, 3 }, s2316[] = { 2, 3, 16 };
	const int64_t s218[] = { 2, 1, 8 }, s231[] = { 2, 3, 1 }, c = 8, c2 = 16, one = 1;
	struct tensor *xs[4], *gs[5], *ws[4];
	xs[0] = tu_rand(dt, 3, s238, 1);
	xs[1] = tu_strided(xs[0]);
	xs[2] = tensor_transpose(tu_rand(dt, 3, s283, 2), 1, 2);
	xs[3] = tensor_slice(tu_rand(dt, 3, s2316, 3), 2, 1, 16, 2);
	gs[0] = tu_rand(dt, 3, s238, 4);
	gs[1] = tu_strided(gs[0]);
	gs[2] = tensor_transpose(tu_rand(dt, 3, s283, 5), 1, 2);
	gs[3] = tensor_expand(tu_rand(dt, 3, s218, 6), 3, s238);
	gs[4] = tensor_expand(tu_rand(dt, 3, s231, 7), 3, s238); /* stride 0 along C */
	ws[0] = NULL;
	ws[1] = rnd(dt, 1, &c, 8, 0.5, 2.5);
	ws[2] = tensor_slice(tu_rand(dt, 1, &c2, 9), 0, 0, 16, 2);
	ws[3] = tensor_expand(tu_rand(dt, 1, &one, 10), 1, &c);
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 5; j++)
			for (int k = 0; k < 4; k++) {
				tu_assert_shape(xs[i], 3, s238);
				tu_assert_shape(gs[j], 3, s238);
				check_norm_backward(xs[i], gs[j], ws[k], rms, tol_of(dt));
			}
}

START_TEST(test_layer_norm_backward)
{
	run_norm_backward_matrix(FLOATS[_i], false);
}
END_TEST

START_TEST(test_rms_norm_backward)
{
	run_norm_backward_matrix(FLOATS[_i], true);
}
END_TEST

/* Rows enough to run in parallel (two threads), contiguous and transposed;
 * the per-thread partial sums of dw, db add up the same way every run. */
START_TEST(test_norm_backward_parallel)
{
	enum tensor_dtype dt = FLOATS[_i];
	const int64_t s[] = { 4096, 64 }, st[] = { 64, 4096 }, c = 64;
	int saved = tensor_get_num_threads();
	tensor_set_num_threads(2);
	struct tensor *x = tu_rand(dt, 2, s, 31), *g = tu_rand(dt, 2, s, 32);
	struct tensor *xt = tensor_transpose(tu_rand(dt, 2, st, 33), 0, 1);
	struct tensor *gt = tensor_transpose(tu_rand(dt, 2, st, 34), 0, 1);
	struct tensor *w = rnd(dt, 1, &c, 35, 0.5, 1.5);
	for (int rms = 0; rms < 2; rms++) {
		check_norm_backward(x, g, w, rms, tol_of(dt));
		check_norm_backward(x, g, NULL, rms, tol_of(dt));
		check_norm_backward(xt, gt, w, rms, tol_of(dt));
		check_norm_backward(x, gt, NULL, rms, tol_of(dt));
	}
	struct tensor *mean, *rstd, *dw[2], *db[2];
	ck_assert(tensor_layer_norm(x, w, NULL, 1e-5, &mean, &rstd) != NULL);
	for (int k = 0; k < 2; k++)
		ck_assert_int_eq(tensor_norm_backward(g, x, mean, rstd, w, NULL, &dw[k], &db[k]),
				 TENSOR_OK);
	ck_assert(memcmp(tensor_data(dw[0]), tensor_data(dw[1]), tensor_nbytes(dw[0])) == 0);
	ck_assert(memcmp(tensor_data(db[0]), tensor_data(db[1]), tensor_nbytes(db[0])) == 0);
	tensor_set_num_threads(saved);
}
END_TEST

START_TEST(test_norm_backward_shapes)
{
	enum tensor_dtype dt = FLOATS[_i];
	/* 1-d x, C == 1, a single row of many columns */
	const int64_t c = 7, s51[] = { 5, 1 }, s18k[] = { 1, 8192 }, s01[] = { 0, 1 };
	for (int rms = 0; rms < 2; rms++) {
		check_norm_backward(tu_rand(dt, 1, &c, 41), tu_rand(dt, 1, &c, 42), NULL, rms,
				    tol_of(dt));
		check_norm_backward(tu_rand(dt, 2, s51, 43), tu_strided(tu_rand(dt, 2, s51, 44)),
				    NULL, rms, tol_of(dt));
		check_norm_backward(tu_rand(dt, 2, s18k, 45), tu_rand(dt, 2, s18k, 46), NULL, rms,
				    tol_of(dt));
	}
	/* no rows: dw and db are zero; empty rows: empty outputs */
	const int64_t s08[] = { 0, 8 }, s30[] = { 3, 0 }, s31[] = { 3, 1 }, c8 = 8, c0 = 0;
	struct tensor *x = tensor_zeros(dt, TENSOR_CPU, 2, s08);
	struct tensor *mean = tensor_zeros(dt, TENSOR_CPU, 2, s01);
	struct tensor *w = tu_rand(dt, 1, &c8, 47), *dx, *dw, *db;
	ck_assert_int_eq(tensor_norm_backward(x, x, mean, mean, w, &dx, &dw, &db), TENSOR_OK);
	const double zeros[8] = { 0 };
	tu_assert_shape(dx, 2, s08);
	tu_assert_close(dw, zeros, 8, 0, 0);
	tu_assert_close(db, zeros, 8, 0, 0);
	x = tensor_zeros(dt, TENSOR_CPU, 2, s30);
	mean = tensor_zeros(dt, TENSOR_CPU, 2, s31);
	ck_assert_int_eq(tensor_norm_backward(x, x, NULL, mean, NULL, &dx, &dw, &db), TENSOR_OK);
	tu_assert_shape(dx, 2, s30);
	tu_assert_shape(dw, 1, &c0);
	tu_assert_shape(db, 1, &c0);
}
END_TEST

START_TEST(test_norm_backward_errors)
{
	const int64_t s238[] = { 2, 3, 8 }, s239[] = { 2, 3, 9 }, s231[] = { 2, 3, 1 };
	const int64_t s23[] = { 2, 3 }, s211[] = { 2, 1, 1 }, c9 = 9;
	struct tensor *x = tu_rand(TENSOR_F32, 3, s238, 1), *g = tu_rand(TENSOR_F32, 3, s238, 2);
	struct tensor *mean = NULL, *rstd = NULL;
	ck_assert(tensor_layer_norm(x, NULL, NULL, 1e-5, &mean, &rstd) != NULL);
	struct tensor *dx = x, *dw = x, *db = x;
	tu_assert_error(tensor_norm_backward(NULL, x, mean, rstd, NULL, &dx, &dw, &db) ==
			    TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "norm_backward: g is NULL", NULL);
	ck_assert(dx == NULL && dw == NULL && db == NULL);
	tu_assert_error(tensor_norm_backward(g, x, mean, NULL, NULL, &dx, NULL, NULL) < 0,
			TENSOR_ERR_ARG, "norm_backward: rstd is NULL", NULL);
	tu_assert_error(tensor_norm_backward(tu_rand(TENSOR_F32, 3, s239, 3), x, mean, rstd, NULL,
					     &dx, NULL, NULL) == TENSOR_ERR_SHAPE,
			TENSOR_ERR_SHAPE, "norm_backward: g [2,3,9]", "x [2,3,8]");
	ck_assert(dx == NULL);
	tu_assert_error(tensor_norm_backward(tu_rand(TENSOR_F64, 3, s238, 4), x, mean, rstd, NULL,
					     &dx, NULL, NULL) == TENSOR_ERR_DTYPE,
			TENSOR_ERR_DTYPE, "norm_backward", "f64");
	tu_assert_error(tensor_norm_backward(g, x, mean, tu_rand(TENSOR_F32, 2, s23, 5), NULL, &dx,
					     NULL, NULL) == TENSOR_ERR_SHAPE,
			TENSOR_ERR_SHAPE, "norm_backward: rstd [2,3]", "x [2,3,8]");
	tu_assert_error(tensor_norm_backward(g, x, tu_rand(TENSOR_F32, 3, s211, 6), rstd, NULL, &dx,
					     NULL, NULL) == TENSOR_ERR_SHAPE,
			TENSOR_ERR_SHAPE, "norm_backward: mean [2,1,1]", "last dim 1");
	tu_assert_error(tensor_norm_backward(g, x, mean, tu_rand(TENSOR_F64, 3, s231, 7), NULL,
					     NULL, &dw, NULL) == TENSOR_ERR_DTYPE,
			TENSOR_ERR_DTYPE, "norm_backward", "f64");
	tu_assert_error(tensor_norm_backward(g, x, mean, rstd, tu_rand(TENSOR_F32, 1, &c9, 8), NULL,
					     &dw, NULL) == TENSOR_ERR_SHAPE,
			TENSOR_ERR_SHAPE, "norm_backward: w [9]", "expected [8]");
	ck_assert(dw == NULL);
	struct tensor *xi = tensor_zeros(TENSOR_I64, TENSOR_CPU, 3, s238);
	tu_assert_error(tensor_norm_backward(xi, xi, NULL, xi, NULL, &dx, NULL, NULL) ==
			    TENSOR_ERR_DTYPE,
			TENSOR_ERR_DTYPE, "norm_backward", "i64");
	const double v = 1;
	struct tensor *s = tensor_from_data(TENSOR_F64, TENSOR_CPU, 0, NULL, &v);
	tu_assert_error(tensor_norm_backward(s, s, NULL, s, NULL, &dx, NULL, NULL) ==
			    TENSOR_ERR_SHAPE,
			TENSOR_ERR_SHAPE, "norm_backward", "0-d");
	/* a NULL input keeps the first error */
	tensor_error(TENSOR_ERR_ARG, "first");
	ck_assert(tensor_norm_backward(g, NULL, mean, rstd, NULL, &dx, NULL, NULL) < 0);
	ck_assert(dx == NULL);
	ck_assert_str_eq(tensor_last_error(), "first");
	tensor_clear_error();
}
END_TEST

/* Outside any scope the caller owns y, mean and rstd; nothing else leaks. */
START_TEST(test_heap_no_leak)
{
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK);
	struct tensor *x = tu_rand(TENSOR_F32, 3, S345, 3);
	struct tensor *mean, *rstd, *rstd2;
	struct tensor *y = tensor_layer_norm(x, NULL, NULL, 1e-5, &mean, &rstd);
	struct tensor *z = tensor_rms_norm(x, NULL, 1e-5, &rstd2);
	struct tensor *p = tensor_softmax(x, 0), *q = tensor_log_softmax(x, -1);
	ck_assert(y && mean && rstd && z && rstd2 && p && q);
	struct tensor *all[] = { y, mean, rstd, z, rstd2, p, q, x };
	for (int k = 0; k < 8; k++)
		tensor_free(all[k]);
	tensor_scope_begin();
}
END_TEST

void ops_norm_tcases(Suite *s)
{
	TCase *tc = tu_tcase("softmax");
	tcase_add_loop_test(tc, test_softmax_layouts, 0, 2);
	tcase_add_loop_test(tc, test_softmax_sums_to_one, 0, 2);
	tcase_add_loop_test(tc, test_softmax_extremes, 0, 2);
	tcase_add_test(tc, test_softmax_precision);
	tcase_add_loop_test(tc, test_softmax_shapes, 0, 2);
	tcase_add_test(tc, test_softmax_errors);
	tcase_add_loop_test(tc, test_softmax_inplace, 0, 2);
	tcase_add_loop_test(tc, test_softmax_backward, 0, 2);
	suite_add_tcase(s, tc);
	tc = tu_tcase("norms");
	tcase_add_loop_test(tc, test_layer_norm, 0, 2);
	tcase_add_loop_test(tc, test_rms_norm, 0, 2);
	tcase_add_loop_test(tc, test_norm_shapes, 0, 2);
	tcase_add_test(tc, test_norm_errors);
	tcase_add_loop_test(tc, test_layer_norm_backward, 0, 2);
	tcase_add_loop_test(tc, test_rms_norm_backward, 0, 2);
	tcase_add_loop_test(tc, test_norm_backward_parallel, 0, 2);
	tcase_add_loop_test(tc, test_norm_backward_shapes, 0, 2);
	tcase_add_test(tc, test_norm_backward_errors);
	tcase_add_test(tc, test_heap_no_leak);
	suite_add_tcase(s, tc);
}
