/* test_ops: the reductions' own cases beside the op table's rows. Sum, mean,
 * max, min, var and argmax against naive loops over several dims at once, on
 * contiguous, strided, transposed, sliced and broadcast inputs; var's
 * correction edges, argmax ties and NaN, i64 exactness, empty and 0-d
 * tensors, the threaded paths, errors and heap results. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "test_ops.h"

enum rop { R_SUM, R_MEAN, R_MAX, R_MIN, R_VAR0, R_VAR1, R_ARGMAX };

static const enum tensor_dtype FLOATS[] = { TENSOR_F32, TENSOR_F64 };
static const enum tensor_dtype INTS[] = { TENSOR_I32, TENSOR_I64 };
static const int64_t S345[] = { 3, 4, 5 };

/* ---- reference and inputs ------------------------------------------------- */

/* Row-major position of idx in shape with the reduced dims taken as 0. */
static int64_t out_pos(int nd, const int64_t *shape, const bool *red, const int64_t *idx)
{
	int64_t p = 0;
	for (int d = 0; d < nd; d++)
		p = p * (red[d] ? 1 : shape[d]) + (red[d] ? 0 : idx[d]);
	return p;
}

/* Naive reduction of v (row-major, shape) over red[] into a malloc'd array in
 * keepdim order; *nout gets its length. Argmax needs one reduced dim. */
static double *ref_reduce(enum rop op, const double *v, int nd, const int64_t *shape,
			  const bool *red, int64_t *nout)
{
	int64_t n = 1, on = 1, idx[TENSOR_MAX_DIMS];
	int rdim = -1;
	for (int d = 0; d < nd; d++) {
		n *= shape[d];
		on *= red[d] ? 1 : shape[d];
		if (red[d])
			rdim = d;
	}
	double *acc = calloc((size_t)on + 1, sizeof(double));
	double *cnt = calloc((size_t)on + 1, sizeof(double));
	ck_assert(acc && cnt);
	for (int64_t i = 0; i < n; i++) {
		tu_unravel(i, nd, shape, idx);
		int64_t o = out_pos(nd, shape, red, idx);
		double x = v[i], a = acc[o];
		bool first = cnt[o] == 0;
		switch (op) {
		case R_MAX: /* NaN propagates */
			if (first || (!isnan(a) && (isnan(x) || x > a)))
				acc[o] = x;
			break;
		case R_MIN:
			if (first || (!isnan(a) && (isnan(x) || x < a)))
				acc[o] = x;
			break;
		case R_ARGMAX: /* below */ break;
		default: acc[o] = a + x;
		}
		cnt[o] += 1;
	}
	if (op == R_ARGMAX) { /* scan each output's run for the first max (or NaN) */
		int64_t stride = 1;
		for (int d = nd - 1; d > rdim; d--)
			stride *= shape[d];
		for (int64_t i = 0; i < n; i++) {
			tu_unravel(i, nd, shape, idx);
			if (idx[rdim] != 0)
				continue;
			int64_t o = out_pos(nd, shape, red, idx), best = 0;
			for (int64_t k = 1; k < shape[rdim]; k++) {
				double x = v[i + k * stride], b = v[i + best * stride];
				if (!isnan(b) && (isnan(x) || x > b))
					best = k;
			}
			acc[o] = (double)best;
		}
	}
	if (op == R_MEAN || op == R_VAR0 || op == R_VAR1)
		for (int64_t o = 0; o < on; o++)
			acc[o] /= cnt[o];
	if (op == R_VAR0 || op == R_VAR1) {
		double *sq = calloc((size_t)on + 1, sizeof(double));
		ck_assert(sq != NULL);
		for (int64_t i = 0; i < n; i++) {
			tu_unravel(i, nd, shape, idx);
			int64_t o = out_pos(nd, shape, red, idx);
			sq[o] += (v[i] - acc[o]) * (v[i] - acc[o]);
		}
		for (int64_t o = 0; o < on; o++)
			acc[o] = sq[o] / (cnt[o] - (op == R_VAR1 ? 1 : 0));
		free(sq);
	}
	free(cnt);
	*nout = on;
	return acc;
}

/* Deterministic values: uniform floats, small integers (with many ties). */
static struct tensor *base(enum tensor_dtype dt, int nd, const int64_t *shape, uint64_t seed)
{
	if (dt == TENSOR_F32 || dt == TENSOR_F64)
		return tu_rand(dt, nd, shape, seed);
	int64_t n = 1;
	for (int d = 0; d < nd; d++)
		n *= shape[d];
	int64_t *v = malloc(sizeof(int64_t) * (size_t)(n + 1));
	int32_t *v32 = malloc(sizeof(int32_t) * (size_t)(n + 1));
	ck_assert(v && v32);
	for (int64_t i = 0; i < n; i++) {
		v[i] = (int64_t)(((uint64_t)i * 2654435761u + seed * 97) % 41) - 20;
		v32[i] = (int32_t)v[i];
	}
	struct tensor *t =
	    tensor_from_data(dt, TENSOR_CPU, nd, shape, dt == TENSOR_I32 ? (void *)v32 : (void *)v);
	free(v);
	free(v32);
	ck_assert(t != NULL);
	return t;
}

enum layout { L_CONTIG, L_STRIDED, L_TRANSPOSED, L_SLICED, L_EXPAND, NLAYOUTS };

/* A [3,4,5] input in the given layout. */
static struct tensor *input345(enum tensor_dtype dt, enum layout lay, uint64_t seed)
{
	struct tensor *t = NULL;
	switch (lay) {
	case L_CONTIG: t = base(dt, 3, S345, seed); break;
	case L_STRIDED: t = tu_strided(base(dt, 3, S345, seed)); break;
	case L_TRANSPOSED: {
		const int64_t s[] = { 3, 5, 4 };
		t = tensor_transpose(base(dt, 3, s, seed), 1, 2);
		break;
	}
	case L_SLICED: {
		const int64_t s[] = { 6, 4, 11 };
		t = tensor_slice(tensor_slice(base(dt, 3, s, seed), 0, 0, 6, 2), 2, 1, 11, 2);
		break;
	}
	default: {
		const int64_t s[] = { 3, 1, 5 };
		t = tensor_expand(base(dt, 3, s, seed), 3, S345);
	}
	}
	tu_assert_shape(t, 3, S345);
	if (lay != L_CONTIG)
		ck_assert(!tensor_is_contiguous(t));
	return t;
}

static struct tensor *call(enum rop op, const struct tensor *x, int ndims, const int *dims,
			   bool keepdim)
{
	switch (op) {
	case R_SUM: return tensor_sum(x, ndims, dims, keepdim);
	case R_MEAN: return tensor_mean(x, ndims, dims, keepdim);
	case R_MAX: return tensor_max(x, ndims, dims, keepdim);
	case R_MIN: return tensor_min(x, ndims, dims, keepdim);
	case R_VAR0: return tensor_var(x, ndims, dims, 0, keepdim);
	case R_VAR1: return tensor_var(x, ndims, dims, 1, keepdim);
	default: return tensor_argmax(x, dims[0], keepdim);
	}
}

/* Run op on x over dims and compare shape and values with the reference
 * computed from xv, x's values (NULL: read them). */
static void check_op_v(enum rop op, const struct tensor *x, const double *xv, int ndims,
		       const int *dims, bool keepdim, double tol)
{
	int nd = x->ndim;
	bool red[TENSOR_MAX_DIMS] = { false };
	for (int k = 0; k < ndims; k++)
		red[dims[k] < 0 ? dims[k] + nd : dims[k]] = true;
	for (int d = 0; d < nd && ndims == 0; d++)
		red[d] = true;
	struct tensor *got = call(op, x, ndims, dims, keepdim);
	ck_assert_msg(got != NULL, "op %d failed: %s", op, tensor_last_error());
	int64_t want_shape[TENSOR_MAX_DIMS];
	int wnd = 0;
	for (int d = 0; d < nd; d++)
		if (keepdim || !red[d])
			want_shape[wnd++] = red[d] ? 1 : x->shape[d];
	tu_assert_shape(got, wnd, want_shape);
	ck_assert(tensor_is_contiguous(got));
	ck_assert_int_eq(got->dtype, op == R_ARGMAX ? TENSOR_I64 : x->dtype);
	double *v = xv ? NULL : tu_values(x);
	int64_t on;
	double *want = ref_reduce(op, xv ? xv : v, nd, x->shape, red, &on);
	tu_assert_close(got, want, on, tol, tol);
	free(want);
	free(v);
}

static void check_op(enum rop op, const struct tensor *x, int ndims, const int *dims, bool keepdim,
		     double tol)
{
	check_op_v(op, x, NULL, ndims, dims, keepdim, tol);
}

static double tol_of(enum tensor_dtype dt)
{
	return dt == TENSOR_F64 ? 1e-12 : 1e-5;
}

/* Every dims list below, with and without keepdim, on every layout. */
static void run_matrix(enum rop op, enum tensor_dtype dt)
{
	static const struct {
		int n;
		int d[3];
	} lists[] = { { 0, { 0 } },	  { 1, { 0 } },	   { 1, { 1 } },      { 1, { 2 } },
		      { 1, { -1 } },	  { 1, { -3 } },   { 2, { 0, 1 } },   { 2, { 0, 2 } },
		      { 2, { 1, 2 } },	  { 2, { 2, 0 } }, { 2, { -1, -2 } }, { 3, { 0, 1, 2 } },
		      { 3, { 2, -3, 1 } } };
	for (int lay = 0; lay < NLAYOUTS; lay++) {
		struct tensor *x = input345(dt, (enum layout)lay, 11 + (uint64_t)lay);
		for (size_t k = 0; k < sizeof lists / sizeof lists[0]; k++)
			for (int keep = 0; keep < 2; keep++)
				check_op(op, x, lists[k].n, lists[k].d, keep, tol_of(dt));
	}
}

/* ---- values over dims and layouts ------------------------------------------ */

START_TEST(test_sum)
{
	run_matrix(R_SUM, FLOATS[_i]);
}
END_TEST

START_TEST(test_mean)
{
	run_matrix(R_MEAN, FLOATS[_i]);
}
END_TEST

START_TEST(test_max)
{
	run_matrix(R_MAX, FLOATS[_i]);
}
END_TEST

START_TEST(test_min)
{
	run_matrix(R_MIN, FLOATS[_i]);
}
END_TEST

START_TEST(test_var)
{
	run_matrix(R_VAR0, FLOATS[_i]);
	run_matrix(R_VAR1, FLOATS[_i]);
	/* textbook example: population var 4, sample var 32/7 */
	const double d[] = { 2, 4, 4, 4, 5, 5, 7, 9 };
	const int64_t n8 = 8;
	struct tensor *x = tensor_from_data(TENSOR_F64, TENSOR_CPU, 1, &n8, d);
	const double w0 = 4, w1 = 32.0 / 7;
	tu_assert_close(tensor_var(x, 0, NULL, 0, false), &w0, 1, 1e-14, 1e-14);
	tu_assert_close(tensor_var(x, 0, NULL, 1, false), &w1, 1, 1e-14, 1e-14);
}
END_TEST

START_TEST(test_var_correction_edges)
{
	/* N - correction <= 0 divides by zero: NaN when the squares sum to 0, else +inf */
	enum tensor_dtype dt = FLOATS[_i];
	const double one = 3, two[] = { 1, 2 };
	const int64_t n1 = 1, n2 = 2;
	struct tensor *a = tensor_from_data(TENSOR_F64, TENSOR_CPU, 1, &n1, &one);
	struct tensor *b = tensor_from_data(TENSOR_F64, TENSOR_CPU, 1, &n2, two);
	a = tensor_cast(a, dt);
	b = tensor_cast(b, dt);
	const double nan = NAN, inf = INFINITY, zero = 0, quarter = 0.25, neg = 0.5 / 3;
	tu_assert_close(tensor_var(a, 0, NULL, 1, false), &nan, 1, 0, 0);
	tu_assert_close(tensor_var(a, 0, NULL, 0, false), &zero, 1, 0, 0);
	tu_assert_close(tensor_var(b, 0, NULL, 2, false), &inf, 1, 0, 0);
	tu_assert_close(tensor_var(b, 0, NULL, 3, false), &inf, 1, 0, 0);
	tu_assert_close(tensor_var(b, 0, NULL, 0, false), &quarter, 1, 1e-7, 1e-7);
	tu_assert_close(tensor_var(b, 0, NULL, -1, false), &neg, 1, 1e-7, 1e-7);
}
END_TEST

START_TEST(test_argmax_layouts)
{
	enum tensor_dtype dts[] = { TENSOR_F32, TENSOR_F64, TENSOR_I32, TENSOR_I64 };
	for (int k = 0; k < 4; k++)
		for (int lay = 0; lay < NLAYOUTS; lay++) {
			struct tensor *x = input345(dts[k], (enum layout)lay, 5 + (uint64_t)lay);
			for (int d = -3; d < 3; d++)
				for (int keep = 0; keep < 2; keep++)
					check_op(R_ARGMAX, x, 1, &d, keep, 0);
		}
}
END_TEST

START_TEST(test_ints)
{
	enum tensor_dtype dt = INTS[_i];
	const enum rop ops[] = { R_SUM, R_MAX, R_MIN };
	for (int k = 0; k < 3; k++)
		run_matrix(ops[k], dt);
}
END_TEST

/* Integers take no detour through double: values near 2^60 stay exact. */
START_TEST(test_i64_exact)
{
	const int64_t big = INT64_C(1) << 60, n = 5;
	const int64_t d[] = { big + 3, big + 7, big + 1, big + 7, big + 2 };
	struct tensor *x = tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, &n, d);
	struct tensor *mx = tensor_max(x, 0, NULL, false), *mn = tensor_min(x, 0, NULL, false);
	struct tensor *s = tensor_sum(x, 0, NULL, false), *am = tensor_argmax(x, 0, false);
	ck_assert(mx && mn && s && am);
	ck_assert_int_eq(*(int64_t *)tensor_data(mx), big + 7);
	ck_assert_int_eq(*(int64_t *)tensor_data(mn), big + 1);
	ck_assert_int_eq(*(int64_t *)tensor_data(s), (int64_t)((uint64_t)big * 5 + 20));
	ck_assert_int_eq(*(int64_t *)tensor_data(am), 1);
}
END_TEST

START_TEST(test_argmax_ties_nan)
{
	enum tensor_dtype dt = FLOATS[_i];
	/* first max wins; NaN counts as the max (first NaN) */
	const double r[] = { 1,		3,	   3,	     2, /**/ 1, NAN, 5, NAN, /**/ -INFINITY,
			     -INFINITY, -INFINITY, -INFINITY };
	const int64_t s34[] = { 3, 4 };
	struct tensor *x = tensor_cast(tensor_from_data(TENSOR_F64, TENSOR_CPU, 2, s34, r), dt);
	const double want[] = { 1, 1, 0 }, wmax[] = { 3, NAN, -INFINITY },
		     wmin[] = { 1, NAN, -INFINITY };
	const int last = -1;
	tu_assert_close(tensor_argmax(x, -1, false), want, 3, 0, 0);
	tu_assert_close(tensor_max(x, 1, &last, false), wmax, 3, 0, 0);
	tu_assert_close(tensor_min(x, 1, &last, false), wmin, 3, 0, 0);
	/* column direction: ties and NaN along dim 0 */
	const double c[] = { 5, 1, 2, NAN, 3, /**/ 5, 7, 2, 1, NAN, /**/ 6, 0, 2, NAN, NAN };
	const int64_t s35[] = { 3, 5 };
	struct tensor *y = tensor_cast(tensor_from_data(TENSOR_F64, TENSOR_CPU, 2, s35, c), dt);
	const double wc[] = { 2, 1, 0, 0, 1 }, wcmax[] = { 6, 7, 2, NAN, NAN },
		     wcmin[] = { 5, 0, 2, NAN, NAN };
	const int first = 0;
	tu_assert_close(tensor_argmax(y, 0, false), wc, 5, 0, 0);
	tu_assert_close(tensor_max(y, 1, &first, false), wcmax, 5, 0, 0);
	tu_assert_close(tensor_min(y, 1, &first, false), wcmin, 5, 0, 0);
	/* a long contiguous row (vectorised f32 path): NaN late, ties of the max */
	const int64_t n = 1000;
	double *v = malloc(sizeof(double) * (size_t)n);
	ck_assert(v != NULL);
	for (int64_t i = 0; i < n; i++)
		v[i] = (double)(i % 17);
	struct tensor *z = tensor_cast(tensor_from_data(TENSOR_F64, TENSOR_CPU, 1, &n, v), dt);
	const double w16 = 16, wi16 = 16, w0 = 0;
	tu_assert_close(tensor_max(z, 0, NULL, false), &w16, 1, 0, 0);
	tu_assert_close(tensor_min(z, 0, NULL, false), &w0, 1, 0, 0);
	tu_assert_close(tensor_argmax(z, 0, false), &wi16, 1, 0, 0);
	v[900] = NAN;
	v[950] = NAN;
	z = tensor_cast(tensor_from_data(TENSOR_F64, TENSOR_CPU, 1, &n, v), dt);
	const double wnan = NAN, wi900 = 900;
	tu_assert_close(tensor_max(z, 0, NULL, false), &wnan, 1, 0, 0);
	tu_assert_close(tensor_min(z, 0, NULL, false), &wnan, 1, 0, 0);
	tu_assert_close(tensor_argmax(z, 0, false), &wi900, 1, 0, 0);
	free(v);
}
END_TEST

/* ---- shapes: empty, scalar, size-1 ------------------------------------------ */

START_TEST(test_empty)
{
	enum tensor_dtype dt = FLOATS[_i];
	const int64_t s03[] = { 0, 3 }, s3[] = { 3 }, s0[] = { 0 }, s13[] = { 1, 3 };
	struct tensor *x = tensor_zeros(dt, TENSOR_CPU, 2, s03);
	const int d0 = 0, d1 = 1;
	const double zeros[] = { 0, 0, 0 }, nans[] = { NAN, NAN, NAN };
	struct tensor *s = tensor_sum(x, 1, &d0, false);
	tu_assert_shape(s, 1, s3);
	tu_assert_close(s, zeros, 3, 0, 0);
	tu_assert_shape(tensor_sum(x, 1, &d0, true), 2, s13);
	tu_assert_close(tensor_mean(x, 1, &d0, false), nans, 3, 0, 0);
	tu_assert_close(tensor_var(x, 1, &d0, 0, false), nans, 3, 0, 0);
	tu_assert_shape(tensor_sum(x, 1, &d1, false), 1, s0);
	tu_assert_shape(tensor_max(x, 1, &d1, false), 1, s0); /* nothing reduced is empty */
	tu_assert_shape(tensor_argmax(x, 1, false), 1, s0);
	struct tensor *all = tensor_sum(x, 0, NULL, false);
	tu_assert_shape(all, 0, NULL);
	tu_assert_close(all, zeros, 1, 0, 0);
	tu_assert_close(tensor_mean(x, 0, NULL, false), nans, 1, 0, 0);
	struct tensor *xi = tensor_zeros(TENSOR_I64, TENSOR_CPU, 2, s03);
	tu_assert_close(tensor_sum(xi, 1, &d0, false), zeros, 3, 0, 0);
}
END_TEST

START_TEST(test_scalar)
{
	enum tensor_dtype dt = FLOATS[_i];
	const double v = -2.5, zero = 0, nan = NAN;
	struct tensor *x = tensor_cast(tensor_from_data(TENSOR_F64, TENSOR_CPU, 0, NULL, &v), dt);
	const int d0 = 0, dm1 = -1;
	struct tensor *r[] = { tensor_sum(x, 0, NULL, false), tensor_sum(x, 1, &d0, true),
			       tensor_mean(x, 1, &dm1, false), tensor_max(x, 0, NULL, false),
			       tensor_min(x, 1, &d0, false) };
	for (int k = 0; k < 5; k++) {
		tu_assert_shape(r[k], 0, NULL);
		tu_assert_close(r[k], &v, 1, 0, 0);
		ck_assert(r[k]->storage != x->storage); /* a new tensor, not a view */
	}
	tu_assert_close(tensor_var(x, 0, NULL, 0, false), &zero, 1, 0, 0);
	tu_assert_close(tensor_var(x, 0, NULL, 1, false), &nan, 1, 0, 0);
	struct tensor *am = tensor_argmax(x, 0, false);
	tu_assert_shape(am, 0, NULL);
	ck_assert_int_eq(am->dtype, TENSOR_I64);
	tu_assert_close(am, &zero, 1, 0, 0);
	/* size-1 dims only: a copy with the dims dropped */
	const int64_t s111[] = { 1, 1, 1 };
	struct tensor *y = tensor_full(dt, TENSOR_CPU, 3, s111, 4);
	const double four = 4;
	struct tensor *sy = tensor_sum(y, 2, (const int[]){ 0, 2 }, false);
	const int64_t s1[] = { 1 };
	tu_assert_shape(sy, 1, s1);
	tu_assert_close(sy, &four, 1, 0, 0);
	ck_assert(sy->storage != y->storage);
}
END_TEST

/* ---- large inputs: the parallel and split paths ------------------------------ */

static void check_large(const struct tensor *x, double tol)
{
	const int nd = x->ndim;
	const enum rop ops[] = { R_SUM, R_MEAN, R_MAX, R_MIN, R_VAR1 };
	double *v = tu_values(x);
	for (int k = 0; k < 5; k++) {
		check_op_v(ops[k], x, v, 0, NULL, false, tol);
		for (int d = 0; d < nd; d++)
			check_op_v(ops[k], x, v, 1, &d, false, tol);
	}
	for (int d = 0; d < nd; d++)
		check_op_v(R_ARGMAX, x, v, 1, &d, false, 0);
	free(v);
}

START_TEST(test_large)
{
	enum tensor_dtype dt = FLOATS[_i];
	const int threads[] = { 1, 2, 3 };
	const int64_t n1 = INT64_C(1) << 16, s2[] = { 4, INT64_C(1) << 16 },
		      s3[] = { INT64_C(1) << 16, 3 }, s4[] = { 256, 384 };
	for (int t = 0; t < 3; t++) {
		tensor_set_num_threads(threads[t]);
		check_large(tu_rand(dt, 1, &n1, 1), 1e-5);
		check_large(tu_rand(dt, 2, s2, 2), 1e-5);
		check_large(tu_rand(dt, 2, s3, 3), 1e-5);
		check_large(tu_strided(tu_rand(dt, 2, s4, 4)), 1e-5);
		check_large(tu_rand(dt, 2, s4, 5), 1e-5);
	}
	tensor_set_num_threads(0);
	/* a planted first max far into a long row, found by every split */
	double *v = malloc(sizeof(double) * (size_t)n1);
	ck_assert(v != NULL);
	for (int64_t i = 0; i < n1; i++)
		v[i] = (double)((i * 7919) % 1000) / 1000.0;
	v[40000] = v[50000] = v[60000] = 2;
	struct tensor *x = tensor_cast(tensor_from_data(TENSOR_F64, TENSOR_CPU, 1, &n1, v), dt);
	const double w = 40000;
	for (int t = 1; t <= 4; t++) {
		tensor_set_num_threads(t);
		tu_assert_close(tensor_argmax(x, 0, false), &w, 1, 0, 0);
	}
	tensor_set_num_threads(0);
	free(v);
}
END_TEST

/* ---- errors ------------------------------------------------------------------ */

START_TEST(test_errors)
{
	struct tensor *x = tu_rand(TENSOR_F32, 3, S345, 1);
	const int d3 = 3, dm4 = -4, rep[] = { 1, -2 };
	tu_assert_error(!tensor_sum(x, 1, &d3, false), TENSOR_ERR_SHAPE, "sum: dim 3", "[3,4,5]");
	tu_assert_error(!tensor_max(x, 1, &dm4, false), TENSOR_ERR_SHAPE, "max: dim -4", "[3,4,5]");
	tu_assert_error(!tensor_min(x, 2, rep, true), TENSOR_ERR_SHAPE, "min: dim -2 repeated",
			"[3,4,5]");
	tu_assert_error(!tensor_mean(x, 2, rep, false), TENSOR_ERR_SHAPE, "mean", "repeated");
	tu_assert_error(!tensor_var(x, 1, &d3, 1, false), TENSOR_ERR_SHAPE, "var: dim 3",
			"[3,4,5]");
	tu_assert_error(!tensor_argmax(x, 3, false), TENSOR_ERR_SHAPE, "argmax: dim 3", "[3,4,5]");
	tu_assert_error(!tensor_argmax(x, -4, false), TENSOR_ERR_SHAPE, "argmax", "[3,4,5]");
	tu_assert_error(!tensor_sum(x, -1, &d3, false), TENSOR_ERR_ARG, "sum", "[3,4,5]");
	tu_assert_error(!tensor_sum(x, 1, NULL, false), TENSOR_ERR_ARG, "sum", "[3,4,5]");
	const double v = 1;
	struct tensor *s = tensor_from_data(TENSOR_F64, TENSOR_CPU, 0, NULL, &v);
	const int d1 = 1;
	tu_assert_error(!tensor_sum(s, 1, &d1, false), TENSOR_ERR_SHAPE, "sum: dim 1", "[]");

	/* mean and var are float-only */
	struct tensor *xi = tensor_zeros(TENSOR_I32, TENSOR_CPU, 3, S345);
	struct tensor *xl = tensor_zeros(TENSOR_I64, TENSOR_CPU, 3, S345);
	tu_assert_error(!tensor_mean(xi, 0, NULL, false), TENSOR_ERR_DTYPE, "mean", "i32");
	tu_assert_error(!tensor_var(xl, 0, NULL, 1, false), TENSOR_ERR_DTYPE, "var", "i64");

	/* max, min and argmax of an empty dim */
	const int64_t s03[] = { 0, 3 };
	struct tensor *e = tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, s03);
	const int d0 = 0;
	tu_assert_error(!tensor_max(e, 1, &d0, false), TENSOR_ERR_SHAPE, "max", "[0,3]");
	tu_assert_error(!tensor_min(e, 0, NULL, false), TENSOR_ERR_SHAPE, "min", "[0,3]");
	tu_assert_error(!tensor_argmax(e, 0, true), TENSOR_ERR_SHAPE, "argmax", "[0,3]");

	/* a NULL input returns NULL and keeps the first error */
	tensor_error(TENSOR_ERR_ARG, "first");
	ck_assert(!tensor_sum(NULL, 0, NULL, false));
	ck_assert(!tensor_mean(NULL, 0, NULL, false));
	ck_assert(!tensor_max(NULL, 0, NULL, false));
	ck_assert(!tensor_min(NULL, 0, NULL, false));
	ck_assert(!tensor_var(NULL, 0, NULL, 1, false));
	ck_assert(!tensor_argmax(NULL, 0, false));
	ck_assert_str_eq(tensor_last_error(), "first");
	tensor_clear_error();
}
END_TEST

/* Outside any scope, results and their intermediates are heap tensors: the
 * caller frees the result and nothing else leaks (LeakSanitizer). */
START_TEST(test_heap_no_leak)
{
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK);
	struct tensor *x = tu_rand(TENSOR_F64, 3, S345, 3);
	struct tensor *xt = tensor_transpose(x, 0, 2);
	const int d[] = { 0, 1 };
	struct tensor *r[] = { tensor_sum(xt, 2, d, false), tensor_mean(x, 2, d, true),
			       tensor_max(xt, 0, NULL, false), tensor_var(x, 2, d, 1, false),
			       tensor_argmax(xt, 1, false) };
	for (int k = 0; k < 5; k++) {
		ck_assert_msg(r[k] != NULL, "%d: %s", k, tensor_last_error());
		tensor_free(r[k]);
	}
	tensor_free(xt);
	tensor_free(x);
	tensor_scope_begin();
}
END_TEST

void ops_reduce_tcases(Suite *s)
{
	TCase *tc = tu_tcase("reduce values");
	tcase_add_loop_test(tc, test_sum, 0, 2);
	tcase_add_loop_test(tc, test_mean, 0, 2);
	tcase_add_loop_test(tc, test_max, 0, 2);
	tcase_add_loop_test(tc, test_min, 0, 2);
	tcase_add_loop_test(tc, test_var, 0, 2);
	tcase_add_loop_test(tc, test_var_correction_edges, 0, 2);
	tcase_add_test(tc, test_argmax_layouts);
	tcase_add_loop_test(tc, test_ints, 0, 2);
	tcase_add_test(tc, test_i64_exact);
	tcase_add_loop_test(tc, test_argmax_ties_nan, 0, 2);
	suite_add_tcase(s, tc);
	tc = tu_tcase("reduce shapes");
	tcase_add_loop_test(tc, test_empty, 0, 2);
	tcase_add_loop_test(tc, test_scalar, 0, 2);
	tcase_add_loop_test(tc, test_large, 0, 2);
	suite_add_tcase(s, tc);
	tc = tu_tcase("reduce errors");
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_heap_no_leak);
	suite_add_tcase(s, tc);
}
