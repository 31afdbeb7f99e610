/* Tests of tensor_matmul and tensor_conv1d against naive loops over the input values. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "testutil.h"

static const enum tensor_dtype float_types[2] = { TENSOR_F32, TENSOR_F64 };

/* ---- references ------------------------------------------------------------ */

/* C = A·B by NumPy's matmul rules, from the row-major values of a and b; the result's
 * shape goes to (*ondim, oshape). Shapes must be valid. */
static double *ref_matmul(const struct tensor *a, const struct tensor *b, int *ondim,
			  int64_t *oshape)
{
	double *va = tu_values(a), *vb = tu_values(b);
	int64_t ash[TENSOR_MAX_DIMS], bsh[TENSOR_MAX_DIMS], bat[TENSOR_MAX_DIMS];
	int an = a->ndim, bn = b->ndim;
	memcpy(ash, a->shape, sizeof ash);
	memcpy(bsh, b->shape, sizeof bsh);
	if (an == 1) {
		ash[0] = 1;
		ash[1] = a->shape[0];
		an = 2;
	}
	if (bn == 1) {
		bsh[1] = 1;
		bn = 2;
	}
	int nbat = (an > bn ? an : bn) - 2, na = an - 2, nb = bn - 2;
	int64_t m = ash[an - 2], k = ash[an - 1], n = bsh[bn - 1], nbatch = 1;
	for (int d = 0; d < nbat; d++) {
		int da = d - (nbat - na), db = d - (nbat - nb);
		int64_t sa = da >= 0 ? ash[da] : 1, sb = db >= 0 ? bsh[db] : 1;
		bat[d] = sa == 1 ? sb : sa;
		nbatch *= bat[d];
	}
	double *out = calloc((size_t)(nbatch * m * n) + 1, sizeof(double));
	ck_assert(out != NULL);
	int64_t idx[TENSOR_MAX_DIMS];
	for (int64_t ib = 0; ib < nbatch; ib++) {
		tu_unravel(ib, nbat, bat, idx);
		int64_t ia = 0, jb = 0;
		for (int d = 0; d < na; d++)
			ia = ia * ash[d] + (ash[d] == 1 ? 0 : idx[d + nbat - na]);
		for (int d = 0; d < nb; d++)
			jb = jb * bsh[d] + (bsh[d] == 1 ? 0 : idx[d + nbat - nb]);
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++) {
				double s = 0;
				for (int64_t p = 0; p < k; p++)
					s += va[(ia * m + i) * k + p] * vb[(jb * k + p) * n + j];
				out[(ib * m + i) * n + j] = s;
			}
	}
	*ondim = nbat;
	memcpy(oshape, bat, sizeof(int64_t) * (size_t)nbat);
	if (a->ndim > 1)
		oshape[(*ondim)++] = m;
	if (b->ndim > 1)
		oshape[(*ondim)++] = n;
	free(va);
	free(vb);
	return out;
}

static size_t live_bytes(void)
{
	return tensor_mem_stats(TENSOR_CPU).live_bytes;
}
static size_t arena_size(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

/* tensor_matmul(a, b) equals the reference; returns the result. */
static struct tensor *check_matmul(const struct tensor *a, const struct tensor *b)
{
	int ond;
	int64_t osh[TENSOR_MAX_DIMS];
	double *want = ref_matmul(a, b, &ond, osh);
	struct tensor *c = tensor_matmul(a, b);
	tu_assert_shape(c, ond, osh);
	ck_assert(tensor_is_contiguous(c));
	ck_assert_int_eq(c->dtype, a->dtype);
	int64_t k = a->shape[a->ndim - 1];
	double atol = (a->dtype == TENSOR_F64 ? 1e-13 : 1e-6) * (double)(k + 1);
	tu_assert_close(c, want, tensor_numel(c), atol, tu_tol(a->dtype));
	free(want);
	return c;
}

/* As check_matmul, and the only memory allocated is the result (no operand copied). */
static void check_matmul_nocopy(const struct tensor *a, const struct tensor *b)
{
	size_t before = live_bytes();
	struct tensor *c = check_matmul(a, b);
	ck_assert_uint_eq(live_bytes() - before, arena_size(tensor_nbytes(c)));
}

static struct tensor *rand2(enum tensor_dtype dt, int64_t r, int64_t c, uint64_t seed)
{
	return tu_rand(dt, 2, (int64_t[]){ r, c }, seed);
}

static struct tensor *rand3(enum tensor_dtype dt, int64_t b, int64_t r, int64_t c, uint64_t seed)
{
	return tu_rand(dt, 3, (int64_t[]){ b, r, c }, seed);
}

/* ---- matmul -------------------------------------------------------------------- */

START_TEST(test_square_rect)
{
	static const int64_t sizes[][3] = { { 1, 1, 1 },    { 2, 3, 4 },      { 7, 7, 7 },
					    { 64, 64, 64 }, { 5, 1, 9 },      { 1, 13, 1 },
					    { 33, 70, 17 }, { 130, 65, 257 }, { 17, 300, 3 } };
	for (int t = 0; t < 2; t++)
		for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
			int64_t m = sizes[i][0], k = sizes[i][1], n = sizes[i][2];
			struct tensor *a = rand2(float_types[t], m, k, 10 + i);
			struct tensor *b = rand2(float_types[t], k, n, 20 + i);
			check_matmul_nocopy(a, b);
		}
}
END_TEST

/* A reference value computed by hand: the test can fail on a wrong kernel even if the
 * reference loop had the same bug. */
START_TEST(test_known_values)
{
	double av[6] = { 1, 2, 3, 4, 5, 6 }, bv[6] = { 7, 8, 9, 10, 11, 12 };
	double want[4] = { 58, 64, 139, 154 };
	for (int t = 0; t < 2; t++) {
		struct tensor *a =
		    tensor_from_data(TENSOR_F64, TENSOR_CPU, 2, (int64_t[]){ 2, 3 }, av);
		struct tensor *b =
		    tensor_from_data(TENSOR_F64, TENSOR_CPU, 2, (int64_t[]){ 3, 2 }, bv);
		if (float_types[t] == TENSOR_F32) {
			a = tensor_cast(a, TENSOR_F32);
			b = tensor_cast(b, TENSOR_F32);
		}
		struct tensor *c = tensor_matmul(a, b);
		tu_assert_shape(c, 2, (int64_t[]){ 2, 2 });
		tu_assert_close(c, want, 4, 0, 0);
	}
}
END_TEST

START_TEST(test_transposed)
{
	for (int t = 0; t < 2; t++) {
		enum tensor_dtype dt = float_types[t];
		int64_t m = 37, k = 53, n = 29;
		struct tensor *a = rand2(dt, m, k, 1), *b = rand2(dt, k, n, 2);
		struct tensor *at = tensor_transpose(rand2(dt, k, m, 3), 0, 1); /* [m,k] */
		struct tensor *bt = tensor_transpose(rand2(dt, n, k, 4), 0, 1); /* [k,n] */
		check_matmul_nocopy(at, b);
		check_matmul_nocopy(a, bt);
		check_matmul_nocopy(at, bt);
		/* the same values via tu_strided (reversed layout = transposed for 2-d) */
		check_matmul_nocopy(tu_strided(a), tu_strided(b));
		/* A^T A from one buffer */
		check_matmul_nocopy(tensor_transpose(a, 0, 1), a);
	}
}
END_TEST

/* The products that take BLIS's packed path instead of its sup path (gemm_prefers_packed):
 * k dwarfing C (k >= 4 max(m, n), m n >= 256^2: a weight's gradient X^T dY), a short k
 * with a wide C (k <= 128, n >= 512, m >= 64: attention's scores q k^T) and a short k with
 * A row-major and B column-major (n >= 64, m n >= 64 x 128: q k^T over 128 keys), each at
 * the rule's edge, with A or B transposed (as in a gradient, as k^T) and not, and just past
 * the edge in each dim (BLIS's choice); alone and batched (one product a thread), f32 and
 * f64, at one and two threads. */
START_TEST(test_packed_rule)
{
	static const int64_t sizes[][3] = {
		{ 256, 1024, 256 }, { 256, 1023, 256 }, { 255, 1024, 256 }, { 64, 128, 512 },
		{ 64, 129, 512 },   { 63, 128, 512 },	{ 64, 128, 511 },   { 64, 128, 128 },
		{ 64, 128, 127 },   { 128, 64, 64 },	{ 128, 64, 63 },    { 64, 129, 128 }
	};
	int saved = tensor_get_num_threads();
	for (int t = 0; t < 2; t++)
		for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
			int64_t m = sizes[i][0], k = sizes[i][1], n = sizes[i][2];
			enum tensor_dtype dt = float_types[t];
			tensor_set_num_threads(1 + (int)((i + (size_t)t) % 2));
			struct tensor *b = rand2(dt, k, n, 40 + i);
			check_matmul_nocopy(tensor_transpose(rand2(dt, k, m, 30 + i), 0, 1), b);
			check_matmul_nocopy(rand2(dt, m, k, 50 + i),
					    tensor_transpose(rand2(dt, n, k, 60 + i), 0, 1));
			if (m * n * k <= 64 * 512 * 128) {
				check_matmul_nocopy(rand3(dt, 3, m, k, 70 + i),
						    rand3(dt, 3, k, n, 80 + i));
				check_matmul_nocopy(
				    rand3(dt, 3, m, k, 90 + i),
				    tensor_transpose(rand3(dt, 3, n, k, 100 + i), 1, 2));
			}
		}
	tensor_set_num_threads(saved);
}
END_TEST

START_TEST(test_sliced)
{
	for (int t = 0; t < 2; t++) {
		enum tensor_dtype dt = float_types[t];
		struct tensor *big = rand2(dt, 40, 50, 5), *big2 = rand2(dt, 60, 30, 6);
		/* rows and columns narrowed from bigger matrices: leading dims 50 and 30 */
		struct tensor *a = tensor_narrow(tensor_narrow(big, 0, 3, 20), 1, 7, 33);
		struct tensor *b = tensor_narrow(tensor_narrow(big2, 0, 10, 33), 1, 2, 25);
		check_matmul_nocopy(a, b);
		/* a transposed slice */
		struct tensor *bs =
		    tensor_transpose(tensor_narrow(big, 0, 5, 25), 0, 1); /* [50,25] */
		check_matmul_nocopy(tensor_narrow(big2, 1, 0, 25), tensor_transpose(bs, 0, 1));
		/* every other row: row stride 100, still unit column stride */
		struct tensor *ev = tensor_slice(big, 0, 0, 40, 2); /* [20,50] */
		check_matmul_nocopy(ev, tensor_narrow(big2, 0, 0, 50));
		/* every other column: no unit stride, copied first */
		struct tensor *ec = tensor_slice(big, 1, 1, 50, 2); /* [40,25] */
		check_matmul(ec, tensor_narrow(big2, 0, 0, 25));
		check_matmul(tensor_narrow(big2, 1, 0, 25), tensor_transpose(ec, 0, 1));
		/* a zero stride inside the matrix (broadcast column): copied first */
		struct tensor *col = rand2(dt, 12, 1, 7);
		check_matmul(tensor_expand(col, 2, (int64_t[]){ 12, 9 }), rand2(dt, 9, 4, 8));
		check_matmul(rand2(dt, 3, 12, 9), tensor_expand(col, 2, (int64_t[]){ 12, 9 }));
		/* overlapping rows (sliding windows): copied first */
		struct tensor *v = tu_rand(dt, 1, (int64_t[]){ 40 }, 10);
		struct tensor *win = tensor_unfold(v, 0, 8, 3); /* [11,8], row stride 3 */
		check_matmul(win, rand2(dt, 8, 5, 11));
		check_matmul(rand2(dt, 2, 11, 12), win);
	}
}
END_TEST

START_TEST(test_batched)
{
	for (int t = 0; t < 2; t++) {
		enum tensor_dtype dt = float_types[t];
		check_matmul_nocopy(rand3(dt, 4, 5, 6, 1), rand3(dt, 4, 6, 7, 2));
		check_matmul_nocopy(tu_rand(dt, 4, (int64_t[]){ 2, 3, 5, 6 }, 3),
				    tu_rand(dt, 4, (int64_t[]){ 2, 3, 6, 4 }, 4));
		/* batch from a permuted buffer [m,b,k] -> [b,m,k]: one stride per batch */
		struct tensor *p = tensor_transpose(rand3(dt, 9, 4, 11, 5), 0, 1);
		check_matmul_nocopy(p, rand3(dt, 4, 11, 6, 6));
		/* 4-d batch dims that do not collapse: [3,2] stored as [2,3] */
		struct tensor *q =
		    tensor_transpose(tu_rand(dt, 4, (int64_t[]){ 2, 3, 7, 5 }, 7), 0, 1);
		check_matmul_nocopy(q, tu_rand(dt, 4, (int64_t[]){ 3, 2, 5, 8 }, 8));
		check_matmul_nocopy(tu_rand(dt, 4, (int64_t[]){ 3, 2, 8, 5 }, 9),
				    tensor_transpose(q, 2, 3));
		/* transposed batched operands */
		check_matmul_nocopy(tensor_transpose(rand3(dt, 5, 12, 10, 10), 1, 2),
				    tensor_transpose(rand3(dt, 5, 9, 12, 11), 1, 2));
		/* reversed layout: no unit stride in the matrices, copied first */
		check_matmul(tu_strided(rand3(dt, 3, 8, 9, 12)),
			     tu_strided(rand3(dt, 3, 9, 4, 13)));
		/* many small products (the per-thread path) and a few larger ones */
		check_matmul_nocopy(rand3(dt, 16, 20, 30, 14), rand3(dt, 16, 30, 10, 15));
		check_matmul_nocopy(rand3(dt, 3, 200, 150, 16), rand3(dt, 3, 150, 210, 17));
	}
}
END_TEST

START_TEST(test_broadcast)
{
	for (int t = 0; t < 2; t++) {
		enum tensor_dtype dt = float_types[t];
		check_matmul_nocopy(tu_rand(dt, 4, (int64_t[]){ 2, 1, 5, 6 }, 1),
				    rand3(dt, 3, 6, 7, 2));
		check_matmul_nocopy(rand2(dt, 5, 6, 3), rand3(dt, 4, 6, 7, 4));
		check_matmul_nocopy(tu_rand(dt, 4, (int64_t[]){ 2, 1, 5, 6 }, 5),
				    tu_rand(dt, 4, (int64_t[]){ 1, 3, 6, 4 }, 6));
		/* the Linear-layer case [b,m,k] x [k,n] (one folded product) */
		check_matmul_nocopy(rand3(dt, 6, 7, 8, 7), rand2(dt, 8, 9, 8));
		check_matmul_nocopy(rand3(dt, 6, 1, 8, 9), rand2(dt, 8, 9, 10));
		check_matmul_nocopy(rand3(dt, 4, 33, 40, 11),
				    tensor_transpose(rand2(dt, 20, 40, 12), 0, 1));
		/* ... with A column-major or with a gap between batches: not folded */
		check_matmul_nocopy(tensor_transpose(rand3(dt, 6, 8, 7, 13), 1, 2),
				    rand2(dt, 8, 9, 14));
		check_matmul_nocopy(tensor_narrow(rand3(dt, 6, 10, 8, 15), 1, 2, 7),
				    rand2(dt, 8, 9, 16));
		check_matmul_nocopy(tu_rand(dt, 4, (int64_t[]){ 2, 3, 4, 5 }, 17),
				    rand2(dt, 5, 6, 18));
		/* stride-0 batch dims made by tensor_expand */
		struct tensor *e = tensor_expand(rand3(dt, 1, 5, 6, 19), 3, (int64_t[]){ 4, 5, 6 });
		check_matmul_nocopy(e, rand3(dt, 4, 6, 3, 20));
		check_matmul_nocopy(rand3(dt, 4, 3, 5, 21), e);
		struct tensor *f = tensor_expand(rand2(dt, 6, 2, 22), 3, (int64_t[]){ 4, 6, 2 });
		check_matmul_nocopy(e, f);
		/* [1,H,k,S] x [B,H,S,d] with x a split-heads view of [B,S,H,d] (B and H do not
		 * step as one): the B products go to one call, the H loop after them */
		struct tensor *xs =
		    tensor_transpose(tu_rand(dt, 4, (int64_t[]){ 5, 6, 3, 2 }, 23), 1, 2);
		check_matmul_nocopy(tu_rand(dt, 4, (int64_t[]){ 1, 3, 4, 6 }, 24), xs);
	}
}
END_TEST

START_TEST(test_vectors)
{
	for (int t = 0; t < 2; t++) {
		enum tensor_dtype dt = float_types[t];
		struct tensor *x = tu_rand(dt, 1, (int64_t[]){ 9 }, 1);
		struct tensor *y = tu_rand(dt, 1, (int64_t[]){ 9 }, 2);
		struct tensor *dot = check_matmul(x, y);
		ck_assert_int_eq(dot->ndim, 0);
		check_matmul_nocopy(x, rand2(dt, 9, 4, 3));
		check_matmul_nocopy(rand2(dt, 5, 9, 4), y);
		check_matmul_nocopy(x, rand3(dt, 3, 9, 4, 5));
		check_matmul_nocopy(rand3(dt, 3, 5, 9, 6), y);
		check_matmul_nocopy(tu_rand(dt, 4, (int64_t[]){ 2, 3, 5, 9 }, 7), y);
		/* strided vectors */
		struct tensor *xs = tensor_slice(tu_rand(dt, 1, (int64_t[]){ 27 }, 8), 0, 0, 27, 3);
		check_matmul_nocopy(xs, y);
		check_matmul_nocopy(rand2(dt, 4, 9, 9), xs);
		check_matmul_nocopy(xs, tensor_transpose(rand2(dt, 6, 9, 10), 0, 1));
		/* a broadcast vector has a zero stride: copied first */
		struct tensor *one = tu_rand(dt, 1, (int64_t[]){ 1 }, 11);
		check_matmul(tensor_expand(one, 1, (int64_t[]){ 9 }), y);
		/* length-1 vectors */
		check_matmul_nocopy(one, rand2(dt, 1, 5, 12));
		check_matmul_nocopy(rand2(dt, 5, 1, 13), one);
	}
}
END_TEST

START_TEST(test_empty)
{
	for (int t = 0; t < 2; t++) {
		enum tensor_dtype dt = float_types[t];
		/* k == 0: sums of nothing are zero */
		struct tensor *c = check_matmul(rand2(dt, 3, 0, 1), rand2(dt, 0, 4, 2));
		tu_assert_shape(c, 2, (int64_t[]){ 3, 4 });
		check_matmul(rand3(dt, 2, 3, 0, 3), rand2(dt, 0, 5, 4));
		struct tensor *d = check_matmul(tu_rand(dt, 1, (int64_t[]){ 0 }, 5),
						tu_rand(dt, 1, (int64_t[]){ 0 }, 6));
		ck_assert_double_eq(tensor_get(d, NULL), 0.0);
		/* empty results */
		tu_assert_shape(check_matmul(rand2(dt, 0, 4, 7), rand2(dt, 4, 5, 8)), 2,
				(int64_t[]){ 0, 5 });
		tu_assert_shape(check_matmul(rand2(dt, 3, 4, 9), rand2(dt, 4, 0, 10)), 2,
				(int64_t[]){ 3, 0 });
		tu_assert_shape(check_matmul(rand3(dt, 0, 3, 4, 11), rand3(dt, 0, 4, 5, 12)), 3,
				(int64_t[]){ 0, 3, 5 });
		tu_assert_shape(check_matmul(rand3(dt, 0, 3, 4, 13), rand2(dt, 4, 5, 14)), 3,
				(int64_t[]){ 0, 3, 5 });
		tu_assert_shape(check_matmul(rand3(dt, 2, 0, 0, 15), rand3(dt, 2, 0, 3, 16)), 3,
				(int64_t[]){ 2, 0, 3 });
	}
}
END_TEST

START_TEST(test_threads)
{
	struct tensor *a = rand2(TENSOR_F32, 150, 300, 1), *b = rand2(TENSOR_F32, 300, 170, 2);
	struct tensor *ab = rand3(TENSOR_F32, 24, 16, 32, 3), *bb = rand3(TENSOR_F32, 24, 32, 8, 4);
	int saved = tensor_get_num_threads();
	for (int nt = 1; nt <= 3; nt++) {
		tensor_set_num_threads(nt);
		check_matmul_nocopy(a, b);
		check_matmul_nocopy(ab, bb);
	}
	tensor_set_num_threads(saved);
}
END_TEST

START_TEST(test_matmul_errors)
{
	struct tensor *a = rand2(TENSOR_F32, 8, 64, 1), *b = rand2(TENSOR_F32, 32, 16, 2);
	tu_assert_error(tensor_matmul(a, b) == NULL, TENSOR_ERR_SHAPE,
			"matmul: inner dims differ: [8,64] x [32,16]", NULL);
	struct tensor *v3 = tu_rand(TENSOR_F32, 1, (int64_t[]){ 3 }, 3);
	struct tensor *v4 = tu_rand(TENSOR_F32, 1, (int64_t[]){ 4 }, 4);
	tu_assert_error(tensor_matmul(v3, v4) == NULL, TENSOR_ERR_SHAPE,
			"matmul: inner dims differ", "[3] x [4]");
	tu_assert_error(tensor_matmul(a, v4) == NULL, TENSOR_ERR_SHAPE, "inner dims differ",
			"[8,64] x [4]");
	struct tensor *p = tu_rand(TENSOR_F32, 3, (int64_t[]){ 2, 3, 4 }, 5);
	struct tensor *q = tu_rand(TENSOR_F32, 3, (int64_t[]){ 3, 4, 5 }, 6);
	tu_assert_error(tensor_matmul(p, q) == NULL, TENSOR_ERR_SHAPE, "matmul: batch dims",
			"[2,3,4] x [3,4,5]");
	struct tensor *d = rand2(TENSOR_F64, 64, 3, 7);
	tu_assert_error(tensor_matmul(a, d) == NULL, TENSOR_ERR_DTYPE, "matmul", "f32");
	struct tensor *i = tensor_zeros(TENSOR_I32, TENSOR_CPU, 2, (int64_t[]){ 2, 2 });
	tu_assert_error(tensor_matmul(i, i) == NULL, TENSOR_ERR_DTYPE, "matmul", "i32");
	struct tensor *s = tensor_zeros(TENSOR_F32, TENSOR_CPU, 0, NULL);
	tu_assert_error(tensor_matmul(s, a) == NULL, TENSOR_ERR_SHAPE, "matmul: 0-d",
			"[] x [8,64]");
	tu_assert_error(tensor_matmul(a, s) == NULL, TENSOR_ERR_SHAPE, "matmul: 0-d",
			"[8,64] x []");
	/* a NULL input keeps the first error */
	tensor_error(TENSOR_ERR_ARG, "earlier failure");
	ck_assert(tensor_matmul(NULL, b) == NULL);
	ck_assert(tensor_matmul(a, NULL) == NULL);
	tu_assert_error(true, TENSOR_ERR_ARG, "earlier failure", NULL);
}
END_TEST

/* matmul_add equals matmul then add, for a bias row, a full C, a batched
 * product with a per-row C and a transposed B; its errors name the shapes. */
START_TEST(test_matmul_add)
{
	for (int t = 0; t < 2; t++) {
		enum tensor_dtype dt = float_types[t];
		double tol = dt == TENSOR_F32 ? 1e-4 : 1e-12;
		struct tensor *a = rand2(dt, 33, 20, 1), *b = rand2(dt, 20, 17, 2);
		struct tensor *bt = tensor_transpose(rand2(dt, 17, 20, 3), 0, 1);
		struct tensor *a3 = rand3(dt, 3, 9, 20, 4);
		struct tensor *cs[] = { tu_rand(dt, 1, (int64_t[]){ 17 }, 5), rand2(dt, 33, 17, 6),
					rand2(dt, 33, 1, 7) };
		for (int i = 0; i < 3; i++)
			for (int j = 0; j < 2; j++) {
				struct tensor *bb = j ? bt : b;
				struct tensor *want = tensor_add(tensor_matmul(a, bb), cs[i]);
				double *w = tu_values(want);
				tu_assert_close(tensor_matmul_add(a, bb, cs[i]), w, 33 * 17, tol,
						tol);
				free(w);
			}
		struct tensor *c3 = rand3(dt, 3, 9, 1, 8);
		double *w3 = tu_values(tensor_add(tensor_matmul(a3, b), c3));
		tu_assert_close(tensor_matmul_add(a3, b, c3), w3, 3 * 9 * 17, tol, tol);
		free(w3);
	}
	struct tensor *a = rand2(TENSOR_F32, 8, 4, 9), *b = rand2(TENSOR_F32, 4, 6, 10);
	tu_assert_error(tensor_matmul_add(a, b, tu_rand(TENSOR_F32, 1, (int64_t[]){ 5 }, 11)) ==
			    NULL,
			TENSOR_ERR_SHAPE, "matmul_add: c [5] does not broadcast", "[8,6]");
	tu_assert_error(tensor_matmul_add(a, b, rand3(TENSOR_F32, 2, 8, 6, 13)) == NULL,
			TENSOR_ERR_SHAPE, "matmul_add", "[2,8,6]");
	tu_assert_error(tensor_matmul_add(a, b, tu_rand(TENSOR_F64, 1, (int64_t[]){ 6 }, 12)) ==
			    NULL,
			TENSOR_ERR_DTYPE, "matmul", "f64");
	tensor_error(TENSOR_ERR_ARG, "earlier failure");
	ck_assert(tensor_matmul_add(a, b, NULL) == NULL);
	tu_assert_error(true, TENSOR_ERR_ARG, "earlier failure", NULL);
}
END_TEST

/* tensor_matmul_sum_to against the reference products summed over the batch, with no
 * operand copied: a shared A (the Linformer's projection gradient, B transposed), both
 * batched, broadcast and split-heads batches, an empty batch (zeros), bf16 operands. */
static void check_matmul_sum(const struct tensor *a, const struct tensor *b)
{
	int ond;
	int64_t osh[TENSOR_MAX_DIMS];
	double *all = ref_matmul(a, b, &ond, osh);
	int64_t m = osh[ond - 2], n = osh[ond - 1], nb = 1;
	for (int d = 0; d < ond - 2; d++)
		nb *= osh[d];
	double *want = calloc((size_t)(m * n) + 1, sizeof(double));
	for (int64_t i = 0; i < nb * m * n; i++)
		want[i % (m * n)] += all[i];
	size_t before = live_bytes();
	struct tensor *c = tensor_matmul_sum_to(a, b, a->dtype);
	tu_assert_shape(c, 2, (int64_t[]){ m, n });
	ck_assert_uint_eq(live_bytes() - before, arena_size(tensor_nbytes(c)));
	double k = (double)a->shape[a->ndim - 1] * (double)nb;
	tu_assert_close(c, want, m * n, (a->dtype == TENSOR_F64 ? 1e-13 : 1e-6) * (k + 1),
			tu_tol(a->dtype));
	free(want);
	free(all);
}

START_TEST(test_matmul_sum)
{
	for (int t = 0; t < 2; t++) {
		enum tensor_dtype dt = float_types[t];
		/* dE = sum_b dC_b X_b^T for E [k, n] shared by X [B, n, d] */
		check_matmul_sum(rand3(dt, 6, 5, 7, 1),
				 tensor_transpose(rand3(dt, 6, 9, 7, 2), 1, 2));
		check_matmul_sum(rand2(dt, 5, 7, 3), rand3(dt, 4, 7, 6, 4));
		check_matmul_sum(tu_rand(dt, 4, (int64_t[]){ 2, 1, 5, 6 }, 5),
				 rand3(dt, 3, 6, 4, 6));
		struct tensor *xs =
		    tensor_transpose(tu_rand(dt, 4, (int64_t[]){ 5, 6, 3, 2 }, 7), 1, 2);
		check_matmul_sum(tu_rand(dt, 4, (int64_t[]){ 1, 3, 4, 6 }, 8), xs);
		check_matmul_sum(rand2(dt, 3, 4, 9), rand2(dt, 4, 5, 10)); /* no batch */
		struct tensor *z =
		    tensor_matmul_sum_to(rand3(dt, 0, 3, 4, 11), rand3(dt, 0, 4, 5, 12), dt);
		double zeros[15] = { 0 };
		tu_assert_close(z, zeros, 15, 0, 0);
	}
	/* bf16 operands, f32 result: the sum of the f32 products of the same bf16 values */
	struct tensor *a = rand3(TENSOR_F32, 4, 6, 8, 13), *b = rand3(TENSOR_F32, 4, 8, 5, 14);
	struct tensor *a16 = tensor_cast(a, TENSOR_BF16), *b16 = tensor_cast(b, TENSOR_BF16);
	struct tensor *want =
	    tensor_sum(tensor_matmul(tensor_cast(a16, TENSOR_F32), tensor_cast(b16, TENSOR_F32)), 1,
		       (const int[]){ 0 }, false);
	double *w = tu_values(want);
	tu_assert_close(tensor_matmul_sum_to(a16, b16, TENSOR_F32), w, 30, 1e-5, 1e-5);
	free(w);
	tu_assert_error(tensor_matmul_sum_to(rand2(TENSOR_F32, 3, 4, 15),
					     tu_rand(TENSOR_F32, 1, (int64_t[]){ 4 }, 16),
					     TENSOR_F32) == NULL,
			TENSOR_ERR_SHAPE, "matmul_sum: [3,4] x [4]", "at least 2 dims");
	tu_assert_error(tensor_matmul_sum_to(a, rand3(TENSOR_F32, 3, 8, 5, 17), TENSOR_F32) == NULL,
			TENSOR_ERR_SHAPE, "batch dims do not broadcast", NULL);
	tu_assert_error(tensor_matmul_sum_to(a, b, TENSOR_F64) == NULL, TENSOR_ERR_DTYPE,
			"cannot give a f64 result", NULL);
}
END_TEST

/* The heads' layout: [B,H,T,d] stored as [B,T,H,d]; the values of
 * tensor_matmul, with broadcast and transposed operands; and the errors. */
START_TEST(test_matmul_laid_out)
{
	const int order[4] = { 0, 2, 1, 3 };
	for (int t = 0; t < 2; t++) {
		enum tensor_dtype dt = float_types[t];
		double tol = dt == TENSOR_F32 ? 1e-5 : 1e-12;
		struct tensor *p = tu_rand(dt, 4, (int64_t[]){ 2, 3, 5, 4 }, 1);
		struct tensor *vs[3] = {
			tu_rand(dt, 4, (int64_t[]){ 2, 3, 4, 6 }, 2),
			tu_rand(dt, 4, (int64_t[]){ 1, 3, 4, 6 }, 3), /* broadcast batch */
			tensor_transpose(tu_rand(dt, 4, (int64_t[]){ 2, 3, 6, 4 }, 4), 2, 3),
		};
		for (int i = 0; i < 3; i++) {
			double *want = tu_values(tensor_matmul(p, vs[i]));
			struct tensor *y = tensor_matmul_laid_out(p, vs[i], order);
			tu_assert_shape(y, 4, (int64_t[]){ 2, 3, 5, 6 });
			/* [B,T,H,d] in memory: strides of H and T swapped */
			const int64_t st[4] = { 5 * 3 * 6, 6, 3 * 6, 1 };
			for (int d = 0; d < 4; d++)
				ck_assert_int_eq(y->strides[d], st[d]);
			tu_assert_close(y, want, 2 * 3 * 5 * 6, tol, tol);
			free(want);
		}
		/* the identity order is tensor_matmul */
		struct tensor *a = rand3(dt, 2, 7, 3, 5), *b = rand3(dt, 2, 3, 4, 6);
		double *w = tu_values(tensor_matmul(a, b));
		struct tensor *y = tensor_matmul_laid_out(a, b, (const int[]){ 0, 1, 2 });
		ck_assert(tensor_is_contiguous(y));
		tu_assert_close(y, w, 2 * 7 * 4, tol, tol);
		free(w);
	}
	struct tensor *a = rand3(TENSOR_F32, 2, 7, 3, 7), *b = rand3(TENSOR_F32, 2, 3, 4, 8);
	tu_assert_error(!tensor_matmul_laid_out(a, b, (const int[]){ 0, 0, 2 }), TENSOR_ERR_ARG,
			"matmul_laid_out", "permutation");
	tu_assert_error(!tensor_matmul_laid_out(a, b, (const int[]){ 0, 1, 3 }), TENSOR_ERR_ARG,
			"matmul_laid_out", "3 dims");
	tu_assert_error(!tensor_matmul_laid_out(a, b, NULL), TENSOR_ERR_ARG, "matmul_laid_out",
			"order");
	struct tensor *v = tu_rand(TENSOR_F32, 1, (int64_t[]){ 3 }, 9);
	tu_assert_error(!tensor_matmul_laid_out(a, v, (const int[]){ 0, 1 }), TENSOR_ERR_ARG,
			"matmul_laid_out", "[3]");
	tu_assert_error(!tensor_matmul_laid_out(a, a, (const int[]){ 0, 1, 2 }), TENSOR_ERR_SHAPE,
			"matmul", NULL);
	ck_assert(tensor_matmul_laid_out(NULL, b, (const int[]){ 0, 1, 2 }) == NULL);
}
END_TEST

/* Outside a scope the result is a heap tensor and nothing else stays allocated. */
START_TEST(test_matmul_heap)
{
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK);
	int64_t ash[3] = { 2, 5, 4 }, bsh[2] = { 4, 3 };
	struct tensor *a = tensor_rand_uniform(TENSOR_F32, TENSOR_CPU, 3, ash, 1, -1, 1);
	struct tensor *b = tensor_rand_uniform(TENSOR_F32, TENSOR_CPU, 2, bsh, 2, -1, 1);
	struct tensor *as = tensor_slice(a, 2, 0, 4, 2); /* [2,5,2], copied by matmul */
	struct tensor *bn = tensor_narrow(b, 0, 0, 2);
	struct tensor *bt = tensor_transpose(b, 0, 1);
	size_t before = live_bytes();
	struct tensor *c = tensor_matmul(a, b), *e = tensor_matmul(as, bn);
	ck_assert_msg(c && e, "%s", tensor_last_error());
	ck_assert(tensor_matmul(a, bt) == NULL);
	tensor_clear_error();
	ck_assert_uint_eq(live_bytes() - before, tensor_nbytes(c) + tensor_nbytes(e));
	tensor_free(c);
	tensor_free(e);
	ck_assert_uint_eq(live_bytes(), before);
	tensor_free(bt);
	tensor_free(bn);
	tensor_free(as);
	tensor_free(b);
	tensor_free(a);
	tensor_scope_begin();
}
END_TEST

/* The backend slot itself: c = alpha a·b + beta c, shared operands, k == 0, bad strides. */
START_TEST(test_gemm_slot)
{
	const struct tensor_backend *be = tensor_backend_get(TENSOR_CPU);
	for (int t = 0; t < 2; t++) {
		enum tensor_dtype dt = float_types[t];
		for (int64_t nb = 1; nb <= 16; nb *= 4) { /* 16 takes the per-thread path */
			struct tensor *a0 = rand3(dt, 1, 6, 5, 1), *b = rand3(dt, nb, 5, 7, 2);
			struct tensor *a = tensor_expand(a0, 3, (int64_t[]){ nb, 6, 5 });
			struct tensor *c = rand3(dt, nb, 6, 7, 3);
			int ond;
			int64_t osh[TENSOR_MAX_DIMS];
			double *ab = ref_matmul(a, b, &ond, osh), *vc = tu_values(c);
			for (int64_t i = 0; i < tensor_numel(c); i++)
				ab[i] = 0.5 * ab[i] + 2.0 * vc[i];
			ck_assert_int_eq(be->gemm(c, a, b, 0.5, 2.0), TENSOR_OK);
			tu_assert_close(c, ab, tensor_numel(c), 1e-5, tu_tol(dt));
			free(ab);
			free(vc);
		}
		/* k == 0: c = beta c, and zeros for beta == 0 even over NaN */
		struct tensor *c = rand3(dt, 2, 3, 4, 4);
		double *vc = tu_values(c);
		for (int i = 0; i < 24; i++)
			vc[i] *= 3;
		struct tensor *a = rand3(dt, 2, 3, 0, 5), *b = rand3(dt, 2, 0, 4, 6);
		ck_assert_int_eq(be->gemm(c, a, b, 1.0, 3.0), TENSOR_OK);
		tu_assert_close(c, vc, 24, 0, tu_tol(dt));
		ck_assert_int_eq(tensor_fill_(c, NAN), TENSOR_OK);
		memset(vc, 0, 24 * sizeof(double));
		ck_assert_int_eq(be->gemm(c, a, b, 1.0, 0.0), TENSOR_OK);
		tu_assert_close(c, vc, 24, 0, 0);
		free(vc);
		/* a matrix without a unit stride is refused, not handed to BLIS */
		struct tensor *g = tensor_slice(rand3(dt, 2, 3, 8, 7), 2, 0, 8, 2); /* [2,3,4] */
		struct tensor *c2 = rand3(dt, 2, 3, 5, 8);
		tu_assert_error(be->gemm(c2, g, rand3(dt, 2, 4, 5, 9), 1.0, 0.0) < 0,
				TENSOR_ERR_ARG, "gemm", "[3,4] x [4,5]");
	}
	struct tensor *i = tensor_zeros(TENSOR_I32, TENSOR_CPU, 3, (int64_t[]){ 1, 2, 2 });
	tu_assert_error(be->gemm(i, i, i, 1.0, 0.0) < 0, TENSOR_ERR_DTYPE, "gemm", "i32");
}
END_TEST

/* ---- conv1d --------------------------------------------------------------------- */

/* PyTorch conv1d (cross-correlation, zero padding) from the values. */
static double *ref_conv1d(const struct tensor *x, const struct tensor *w, const struct tensor *bias,
			  int64_t stride, int64_t pad, int64_t *lout)
{
	double *vx = tu_values(x), *vw = tu_values(w), *vb = bias ? tu_values(bias) : NULL;
	int64_t nb = x->shape[0], cin = x->shape[1], len = x->shape[2];
	int64_t cout = w->shape[0], kw = w->shape[2];
	*lout = (len + 2 * pad - kw) / stride + 1;
	double *out = calloc((size_t)(nb * cout * *lout) + 1, sizeof(double));
	ck_assert(out != NULL);
	for (int64_t b = 0; b < nb; b++)
		for (int64_t o = 0; o < cout; o++)
			for (int64_t t = 0; t < *lout; t++) {
				double s = vb ? vb[o] : 0;
				for (int64_t c = 0; c < cin; c++)
					for (int64_t j = 0; j < kw; j++) {
						int64_t pos = t * stride + j - pad;
						if (pos >= 0 && pos < len)
							s += vw[(o * cin + c) * kw + j] *
							     vx[(b * cin + c) * len + pos];
					}
				out[(b * cout + o) * *lout + t] = s;
			}
	free(vx);
	free(vw);
	free(vb);
	return out;
}

static struct tensor *check_conv1d(const struct tensor *x, const struct tensor *w,
				   const struct tensor *bias, int64_t stride, int64_t pad)
{
	int64_t lout;
	double *want = ref_conv1d(x, w, bias, stride, pad, &lout);
	struct tensor *y = tensor_conv1d(x, w, bias, stride, pad);
	tu_assert_shape(y, 3, (int64_t[]){ x->shape[0], w->shape[0], lout });
	ck_assert(tensor_is_contiguous(y));
	double atol =
	    (x->dtype == TENSOR_F64 ? 1e-13 : 1e-6) * (double)(x->shape[1] * w->shape[2] + 1);
	tu_assert_close(y, want, tensor_numel(y), atol, tu_tol(x->dtype));
	free(want);
	return y;
}

/* (K, stride, padding) with input length L */
static const int64_t conv_cases[][4] = {
	{ 3, 1, 0, 10 }, { 3, 1, 1, 10 }, { 5, 2, 2, 11 }, { 4, 4, 0, 16 }, { 4, 4, 0, 18 },
	{ 1, 1, 0, 7 },	 { 3, 2, 1, 9 },  { 7, 1, 0, 7 },  { 6, 1, 1, 4 },  { 2, 3, 0, 12 },
};

static void conv_values(bool with_bias)
{
	for (int t = 0; t < 2; t++)
		for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) {
			enum tensor_dtype dt = float_types[t];
			int64_t kw = conv_cases[i][0], st = conv_cases[i][1],
				pad = conv_cases[i][2];
			int64_t len = conv_cases[i][3];
			struct tensor *x = rand3(dt, 2, 3, len, 100 + i);
			struct tensor *w = rand3(dt, 5, 3, kw, 200 + i);
			struct tensor *b =
			    with_bias ? tu_rand(dt, 1, (int64_t[]){ 5 }, 300 + i) : NULL;
			check_conv1d(x, w, b, st, pad);
			check_conv1d(tu_strided(x), tu_strided(w), b ? tu_strided(b) : NULL, st,
				     pad);
		}
}

/* The GEMM profile's row of a product, or NULL. */
static const struct tensor_gemm_stat *profile_row(const struct tensor_gemm_stat *rows, int n,
						  enum tensor_dtype dt, int64_t batch, int64_t m,
						  int64_t nn, int64_t k, const char *layout,
						  bool accumulate)
{
	for (int i = 0; i < n; i++)
		if (rows[i].device == TENSOR_CPU && rows[i].a_dtype == dt &&
		    rows[i].b_dtype == dt && rows[i].c_dtype == dt && rows[i].batch == batch &&
		    rows[i].m == m && rows[i].n == nn && rows[i].k == k &&
		    !strcmp(rows[i].layout, layout) && rows[i].accumulate == accumulate)
			return &rows[i];
	return NULL;
}

/* One row per distinct gemm call with its calls, time and FLOPs: batched, folded (a
 * shared B: one [B*m,k] product), transposed (A column-major), accumulating, f64; most
 * time first; nothing recorded outside a profile; start clears, stop frees; read's
 * truncation, argument errors, and rows it could not store (out of memory). */
START_TEST(test_gemm_profile)
{
	struct tensor_gemm_stat rows[8], none = { .calls = -1 };
	int n = -1;
	ck_assert_int_eq(tensor_gemm_profile_read(rows, 8, &n), TENSOR_OK);
	ck_assert_int_eq(n, 0);
	ck_assert(tensor_matmul(rand3(TENSOR_F32, 4, 5, 6, 1), rand3(TENSOR_F32, 4, 6, 7, 2)));
	ck_assert_int_eq(tensor_gemm_profile_read(rows, 8, &n), TENSOR_OK);
	ck_assert_int_eq(n, 0); /* not running */

	ck_assert_int_eq(tensor_gemm_profile_start(), TENSOR_OK);
	struct tensor *a = rand3(TENSOR_F32, 4, 5, 6, 1), *b = rand3(TENSOR_F32, 4, 6, 7, 2);
	ck_assert(tensor_matmul(a, b) && tensor_matmul(a, b));
	ck_assert(tensor_matmul(rand3(TENSOR_F32, 3, 8, 6, 3), rand2(TENSOR_F32, 6, 5, 4)));
	ck_assert(tensor_matmul(tensor_transpose(rand2(TENSOR_F32, 6, 9, 5), 0, 1),
				rand2(TENSOR_F32, 6, 4, 6)));
	ck_assert(tensor_matmul_add(rand2(TENSOR_F32, 9, 6, 7), rand2(TENSOR_F32, 6, 4, 8),
				    rand2(TENSOR_F32, 9, 4, 9)));
	ck_assert(tensor_matmul(rand2(TENSOR_F64, 3, 2, 10), rand2(TENSOR_F64, 2, 5, 11)));
	ck_assert_int_eq(tensor_gemm_profile_read(rows, 8, &n), TENSOR_OK);
	ck_assert_int_eq(n, 5);
	const struct tensor_gemm_stat *r[5] = {
		profile_row(rows, n, TENSOR_F32, 4, 5, 7, 6, "rrr", false),
		profile_row(rows, n, TENSOR_F32, 1, 24, 5, 6, "rrr", false),
		profile_row(rows, n, TENSOR_F32, 1, 9, 4, 6, "crr", false),
		profile_row(rows, n, TENSOR_F32, 1, 9, 4, 6, "rrr", true),
		profile_row(rows, n, TENSOR_F64, 1, 3, 5, 2, "rrr", false),
	};
	for (int i = 0; i < 5; i++) {
		ck_assert_msg(r[i] != NULL, "profile row %d missing", i);
		ck_assert_int_eq(r[i]->calls, i == 0 ? 2 : 1);
		ck_assert(r[i]->seconds > 0);
		double f = 2e-9 * (double)(r[i]->batch * r[i]->m * r[i]->n * r[i]->k * r[i]->calls);
		ck_assert_double_eq_tol(r[i]->gflop, f, 1e-15);
	}
	for (int i = 1; i < n; i++)
		ck_assert(rows[i - 1].seconds >= rows[i].seconds);
	/* truncated: the count is still all rows, and only max of them are written */
	struct tensor_gemm_stat two[2] = { none, none };
	ck_assert_int_eq(tensor_gemm_profile_read(two, 1, &n), TENSOR_OK);
	ck_assert_int_eq(n, 5);
	ck_assert_double_eq(two[0].seconds, rows[0].seconds);
	ck_assert_int_eq(two[1].calls, -1);
	ck_assert_int_eq(tensor_gemm_profile_read(NULL, 0, &n), TENSOR_OK);
	ck_assert_int_eq(n, 5);
	tu_assert_error(tensor_gemm_profile_read(rows, 8, NULL) < 0, TENSOR_ERR_ARG,
			"tensor_gemm_profile_read", "count NULL");
	tu_assert_error(tensor_gemm_profile_read(rows, -1, &n) < 0, TENSOR_ERR_ARG,
			"tensor_gemm_profile_read", "max -1");
	tu_assert_error(tensor_gemm_profile_read(NULL, 2, &n) < 0, TENSOR_ERR_ARG,
			"tensor_gemm_profile_read", "rows NULL");

	/* start again: an empty table; a call whose new row finds no memory is counted
	 * as left out, the calls of rows that exist still are */
	ck_assert_int_eq(tensor_gemm_profile_start(), TENSOR_OK);
	ck_assert_int_eq(tensor_gemm_profile_read(rows, 8, &n), TENSOR_OK);
	ck_assert_int_eq(n, 0);
	struct tensor *c = rand2(TENSOR_F32, 7, 3, 12), *d = rand2(TENSOR_F32, 3, 2, 13);
	bool table_failed = false;
	for (int64_t k = 0; k < 64 && !table_failed; k++) { /* each allocation of a matmul */
		ck_assert_int_eq(tensor_gemm_profile_stop(), TENSOR_OK); /* frees the table */
		ck_assert_int_eq(tensor_gemm_profile_start(), TENSOR_OK);
		tensor_mem_inject_failure(k);
		struct tensor *y = tensor_matmul(c, d);
		bool fired = tensor_mem_inject_failure(-1) > k;
		if (!y) { /* the result or a view: an error, no row */
			tu_assert_error(fired, TENSOR_ERR_NOMEM, NULL, NULL);
			continue;
		}
		int rc = tensor_gemm_profile_read(rows, 8, &n);
		if (rc == TENSOR_OK) {
			ck_assert(!fired);
			break; /* past the last allocation */
		}
		tu_assert_error(rc < 0, TENSOR_ERR_NOMEM, "1 calls were not recorded", NULL);
		ck_assert_int_eq(n, 0);
		ck_assert(tensor_matmul(c, d)); /* now the row is made */
		ck_assert_int_eq(tensor_gemm_profile_read(rows, 8, &n), TENSOR_ERR_NOMEM);
		tensor_clear_error();
		ck_assert_int_eq(n, 1);
		ck_assert_int_eq(rows[0].calls, 1);
		table_failed = true;
	}
	ck_assert_msg(table_failed, "no allocation of the profile's table failed");

	ck_assert_int_eq(tensor_gemm_profile_stop(), TENSOR_OK);
	ck_assert(tensor_matmul(a, b));
	ck_assert_int_eq(tensor_gemm_profile_read(rows, 8, &n), TENSOR_OK);
	ck_assert_int_eq(n, 0);
}
END_TEST

START_TEST(test_conv1d)
{
	conv_values(false);
}
END_TEST

START_TEST(test_conv1d_bias)
{
	conv_values(true);
	/* a strided bias */
	struct tensor *b = tensor_slice(tu_rand(TENSOR_F32, 1, (int64_t[]){ 8 }, 1), 0, 0, 8, 2);
	check_conv1d(rand3(TENSOR_F32, 2, 3, 9, 2), rand3(TENSOR_F32, 4, 3, 3, 3), b, 2, 1);
}
END_TEST

/* kernel == stride without padding (Conv-Linformer's projection): only the window matrix
 * and the result are allocated. */
START_TEST(test_conv1d_patches)
{
	for (int t = 0; t < 2; t++) {
		enum tensor_dtype dt = float_types[t];
		int64_t nb = 3, cin = 6, len = 64, cout = 4, kw = 8;
		struct tensor *x = rand3(dt, nb, cin, len, 1), *w = rand3(dt, cout, cin, kw, 2);
		size_t es = tensor_dtype_size(dt), before = live_bytes();
		struct tensor *y = check_conv1d(x, w, NULL, kw, 0);
		size_t cols = (size_t)(nb * cin * len) * es;
		ck_assert_uint_eq(live_bytes() - before,
				  arena_size(cols) + arena_size(tensor_nbytes(y)));
		/* a larger one in the shape of a projection of length 512 to 64 */
		check_conv1d(rand3(dt, 2, 16, 512, 3), rand3(dt, 16, 16, 8, 4), NULL, 8, 0);
	}
}
END_TEST

START_TEST(test_conv1d_empty)
{
	for (int t = 0; t < 2; t++) {
		enum tensor_dtype dt = float_types[t];
		check_conv1d(rand3(dt, 0, 3, 10, 1), rand3(dt, 4, 3, 3, 2), NULL, 1, 1);
		struct tensor *y =
		    check_conv1d(rand3(dt, 2, 0, 10, 3), rand3(dt, 4, 0, 3, 4), NULL, 2, 0);
		tu_assert_shape(y, 3, (int64_t[]){ 2, 4, 4 });
		check_conv1d(rand3(dt, 2, 3, 10, 5), rand3(dt, 0, 3, 3, 6), NULL, 1, 0);
	}
}
END_TEST

START_TEST(test_conv1d_errors)
{
	struct tensor *x = rand3(TENSOR_F32, 2, 3, 10, 1);
	struct tensor *w = rand3(TENSOR_F32, 4, 5, 3, 2);
	tu_assert_error(tensor_conv1d(x, w, NULL, 1, 0) == NULL, TENSOR_ERR_SHAPE, "conv1d",
			"[2,3,10]");
	tu_assert_error(tensor_conv1d(x, w, NULL, 1, 0) == NULL, TENSOR_ERR_SHAPE, "channels",
			"[4,5,3]");
	struct tensor *w3 = rand3(TENSOR_F32, 4, 3, 3, 3);
	struct tensor *wbig = rand3(TENSOR_F32, 4, 3, 13, 4);
	tu_assert_error(tensor_conv1d(x, wbig, NULL, 1, 1) == NULL, TENSOR_ERR_SHAPE,
			"conv1d: kernel 13", "[2,3,10]");
	ck_assert(tensor_conv1d(x, wbig, NULL, 1, 2) != NULL); /* 13 <= 10 + 4 */
	tu_assert_error(tensor_conv1d(x, w3, NULL, 0, 0) == NULL, TENSOR_ERR_ARG,
			"conv1d: stride 0", "[2,3,10]");
	tu_assert_error(tensor_conv1d(x, w3, NULL, 1, -1) == NULL, TENSOR_ERR_ARG,
			"conv1d: stride 1, padding -1", NULL);
	struct tensor *x2 = rand2(TENSOR_F32, 3, 10, 5);
	tu_assert_error(tensor_conv1d(x2, w3, NULL, 1, 0) == NULL, TENSOR_ERR_SHAPE,
			"conv1d: input [3,10]", "[4,3,3]");
	tu_assert_error(tensor_conv1d(x, rand2(TENSOR_F32, 4, 3, 6), NULL, 1, 0) == NULL,
			TENSOR_ERR_SHAPE, "conv1d", "weight [4,3]");
	struct tensor *kw0 = tensor_zeros(TENSOR_F32, TENSOR_CPU, 3, (int64_t[]){ 4, 3, 0 });
	tu_assert_error(tensor_conv1d(x, kw0, NULL, 1, 0) == NULL, TENSOR_ERR_SHAPE,
			"conv1d: kernel 0", NULL);
	struct tensor *b5 = tu_rand(TENSOR_F32, 1, (int64_t[]){ 5 }, 6);
	tu_assert_error(tensor_conv1d(x, w3, b5, 1, 0) == NULL, TENSOR_ERR_SHAPE,
			"conv1d: bias [5]", "[4]");
	struct tensor *bd = tu_rand(TENSOR_F64, 1, (int64_t[]){ 4 }, 7);
	tu_assert_error(tensor_conv1d(x, w3, bd, 1, 0) == NULL, TENSOR_ERR_DTYPE, "conv1d", "f64");
	struct tensor *wd = rand3(TENSOR_F64, 4, 3, 3, 8);
	tu_assert_error(tensor_conv1d(x, wd, NULL, 1, 0) == NULL, TENSOR_ERR_DTYPE, "conv1d",
			"f64");
	struct tensor *xi = tensor_zeros(TENSOR_I64, TENSOR_CPU, 3, (int64_t[]){ 2, 3, 10 });
	struct tensor *wi = tensor_zeros(TENSOR_I64, TENSOR_CPU, 3, (int64_t[]){ 4, 3, 3 });
	tu_assert_error(tensor_conv1d(xi, wi, NULL, 1, 0) == NULL, TENSOR_ERR_DTYPE, "conv1d",
			"i64");
	tensor_error(TENSOR_ERR_ARG, "earlier failure");
	ck_assert(tensor_conv1d(NULL, w3, NULL, 1, 0) == NULL);
	ck_assert(tensor_conv1d(x, NULL, NULL, 1, 0) == NULL);
	tu_assert_error(true, TENSOR_ERR_ARG, "earlier failure", NULL);
}
END_TEST

/* Outside a scope: with padding, intermediates are freed and only the result stays. */
START_TEST(test_conv1d_heap)
{
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK);
	int64_t xs[3] = { 2, 3, 10 }, ws[3] = { 4, 3, 3 };
	struct tensor *x = tensor_rand_uniform(TENSOR_F64, TENSOR_CPU, 3, xs, 1, -1, 1);
	struct tensor *w = tensor_rand_uniform(TENSOR_F64, TENSOR_CPU, 3, ws, 2, -1, 1);
	size_t before = live_bytes();
	struct tensor *y = tensor_conv1d(x, w, NULL, 2, 1);
	ck_assert_msg(y != NULL, "%s", tensor_last_error());
	ck_assert_uint_eq(live_bytes() - before, tensor_nbytes(y));
	tensor_free(y);
	tensor_free(x);
	tensor_free(w);
	tensor_scope_begin();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("matmul");
	struct {
		const char *name;
		const TTest *test;
	} cases[] = {
		{ "square_rect", test_square_rect },
		{ "known_values", test_known_values },
		{ "transposed", test_transposed },
		{ "packed_rule", test_packed_rule },
		{ "sliced", test_sliced },
		{ "batched", test_batched },
		{ "broadcast", test_broadcast },
		{ "vectors", test_vectors },
		{ "empty", test_empty },
		{ "threads", test_threads },
		{ "matmul_errors", test_matmul_errors },
		{ "matmul_add", test_matmul_add },
		{ "matmul_sum", test_matmul_sum },
		{ "matmul_heap", test_matmul_heap },
		{ "matmul_laid_out", test_matmul_laid_out },
		{ "gemm_slot", test_gemm_slot },
		{ "gemm_profile", test_gemm_profile },
		{ "conv1d", test_conv1d },
		{ "conv1d_bias", test_conv1d_bias },
		{ "conv1d_patches", test_conv1d_patches },
		{ "conv1d_empty", test_conv1d_empty },
		{ "conv1d_errors", test_conv1d_errors },
		{ "conv1d_heap", test_conv1d_heap },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		TCase *tc = tu_tcase(cases[i].name);
		tcase_add_test(tc, cases[i].test);
		suite_add_tcase(s, tc);
	}
	return tu_run(s);
}
