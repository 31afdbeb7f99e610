/* The bf16 dtype: conversion rounding on edge values (both from f32 and from
 * f64), every bit pattern through f32 and back, copies in every layout,
 * fills, printing, matrix products against an f64 reference on every layout
 * the f32 product takes (on each bf16 kernel this CPU runs), and the errors of
 * ops that refuse bf16. The kernels' own tests: test_bf16_kernels.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "backend.h"
#include "testutil.h"

static float f32_of_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static uint32_t bits_of_f32(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

/* n values of dtype src (host memory) cast to bf16 through tensor_cast; the
 * bit patterns into out. */
static void cast_to_bf16(enum tensor_dtype src, const void *in, int64_t n, uint16_t *out)
{
	struct tensor *x = tensor_from_data(src, TENSOR_CPU, 1, &n, in);
	struct tensor *y = tensor_cast(x, TENSOR_BF16);
	ck_assert_msg(y != NULL, "%s", tensor_last_error());
	ck_assert_int_eq(y->dtype, TENSOR_BF16);
	ck_assert_int_eq(tensor_to_host(y, out, (size_t)n * 2), TENSOR_OK);
}

/* f32 bit pattern -> expected bf16 bit pattern */
static const uint32_t f32_cases[][2] = {
	{ 0x00000000, 0x0000 },				/* +0 */
	{ 0x80000000, 0x8000 },				/* -0 */
	{ 0x7f800000, 0x7f80 },				/* +inf */
	{ 0xff800000, 0xff80 },				/* -inf */
	{ 0x3f800000, 0x3f80 },				/* 1 */
	{ 0x3f808000, 0x3f80 },				/* 1 + 2^-8: tie, down to even */
	{ 0x3f818000, 0x3f82 },				/* 1 + 3 2^-8: tie, up to even */
	{ 0x3f808001, 0x3f81 },				/* just above the tie */
	{ 0x3f807fff, 0x3f80 },				/* just below the tie */
	{ 0xbf808000, 0xbf80 },				/* negative ties */
	{ 0xbf818000, 0xbf82 }, { 0x7f7f0000, 0x7f7f }, /* the largest finite bf16 */
	{ 0x7f7f7fff, 0x7f7f },				/* below its half ulp */
	{ 0x7f7f8000, 0x7f80 },				/* a tie whose even neighbour is inf */
	{ 0x7f7fffff, 0x7f80 },				/* FLT_MAX overflows to inf */
	{ 0xff7fffff, 0xff80 },				/* -FLT_MAX to -inf */
	{ 0x00000001, 0x0000 },				/* the smallest f32 denormal to +0 */
	{ 0x80000001, 0x8000 },				/* and to -0 */
	{ 0x00008000, 0x0000 }, /* half the smallest bf16 denormal: tie to 0 */
	{ 0x00008001, 0x0001 }, { 0x00010000, 0x0001 }, /* the smallest bf16 denormal, exact */
	{ 0x00018000, 0x0002 },				/* tie between denormals 1 and 2 */
	{ 0x00028000, 0x0002 },				/* tie between 2 and 3 */
	{ 0x007fffff, 0x0080 }, /* the largest f32 denormal to the smallest normal */
	{ 0x807fffff, 0x8080 }, { 0x7fc00000, 0x7fc0 }, /* quiet NaN */
	{ 0xffc00001, 0xffc0 },				/* negative NaN keeps its sign */
	{ 0x7f800001, 0x7fc0 }, /* signalling NaN, payload in the low bits: still NaN */
	{ 0x7fa00000, 0x7fe0 }, /* signalling NaN: quieted, payload kept */
	{ 0xff812345, 0xffc1 },
};

START_TEST(test_from_f32_edges)
{
	int64_t n = sizeof f32_cases / sizeof f32_cases[0];
	float in[64];
	uint16_t out[64];
	for (int64_t i = 0; i < n; i++)
		in[i] = f32_of_bits(f32_cases[i][0]);
	cast_to_bf16(TENSOR_F32, in, n, out);
	for (int64_t i = 0; i < n; i++)
		ck_assert_msg(out[i] == f32_cases[i][1], "f32 0x%08x: got 0x%04x, want 0x%04x",
			      f32_cases[i][0], out[i], f32_cases[i][1]);
	/* the same through the f64 path (an f32 value is exact in f64) */
	double in64[64];
	for (int64_t i = 0; i < n; i++)
		in64[i] = in[i];
	cast_to_bf16(TENSOR_F64, in64, n, out);
	for (int64_t i = 0; i < n; i++) {
		uint16_t want = f32_cases[i][1];
		if ((want & 0x7f80) == 0x7f80 && (want & 0x7f)) /* NaN: any quiet NaN, same sign */
			ck_assert_msg((out[i] & 0xffc0) == (want & 0xffc0),
				      "f64 NaN 0x%08x: 0x%04x", f32_cases[i][0], out[i]);
		else
			ck_assert_msg(out[i] == want, "f64 of f32 0x%08x: got 0x%04x, want 0x%04x",
				      f32_cases[i][0], out[i], want);
	}
}
END_TEST

/* f64 values whose correct rounding differs from rounding through a plain
 * (float) cast first (double rounding), and the other edges. */
START_TEST(test_from_f64_edges)
{
	const struct {
		double v;
		uint16_t want;
	} cs[] = {
		{ 1 + 0x1p-8 + 0x1p-40, 0x3f81 },	   /* above the tie; via f32: tie, 0x3f80 */
		{ 1 + 0x1p-7 + 0x1p-8 - 0x1p-40, 0x3f81 }, /* below the tie; via f32: 0x3f82 */
		{ 1 + 0x1p-8, 0x3f80 },			   /* exact ties to even */
		{ 1 + 0x1p-7 + 0x1p-8, 0x3f82 },
		{ -(1 + 0x1p-8 + 0x1p-40), 0xbf81 },
		{ 0x1.fefffffffffffp127, 0x7f7f }, /* below the overflow tie; via f32: inf */
		{ 0x1.ffp127, 0x7f80 },		   /* the tie itself: inf */
		{ 1e300, 0x7f80 },
		{ -1e300, 0xff80 },
		{ INFINITY, 0x7f80 },
		{ -INFINITY, 0xff80 },
		{ 1e-300, 0x0000 },
		{ -1e-300, 0x8000 },
		{ 0x1p-134, 0x0000 },		   /* half the smallest denormal: tie to 0 */
		{ 0x1p-134 + 0x1p-170, 0x0001 },   /* above it; via f32: tie, 0 */
		{ 0x1.8p-133, 0x0002 },		   /* tie between denormals 1 and 2 */
		{ 0x1.8p-133 - 0x1p-175, 0x0001 }, /* below it; via f32: tie, 2 */
		{ 0x1p-126, 0x0080 },		   /* the smallest normal */
		{ 3.0, 0x4040 },
		{ 1.0 / 3.0, 0x3eab },
	};
	int64_t n = sizeof cs / sizeof cs[0];
	double in[32];
	uint16_t out[32];
	for (int64_t i = 0; i < n; i++)
		in[i] = cs[i].v;
	cast_to_bf16(TENSOR_F64, in, n, out);
	for (int64_t i = 0; i < n; i++)
		ck_assert_msg(out[i] == cs[i].want, "f64 %a: got 0x%04x, want 0x%04x", cs[i].v,
			      out[i], cs[i].want);
	double nans[2] = { NAN, -NAN };
	cast_to_bf16(TENSOR_F64, nans, 2, out);
	ck_assert_msg((out[0] & 0xffc0) == 0x7fc0 && (out[1] & 0xffc0) == 0xffc0,
		      "f64 NaNs: 0x%04x 0x%04x", out[0], out[1]);
}
END_TEST

/* Every bf16 bit pattern: to f32 exactly (the pattern shifted), to f64 exactly,
 * and back to the same pattern (a NaN back to a NaN of the same sign). */
START_TEST(test_all_patterns_round_trip)
{
	int64_t n = 65536;
	uint16_t *h = malloc(2 * (size_t)n), *back = malloc(2 * (size_t)n);
	float *f = malloc(4 * (size_t)n);
	double *d = malloc(8 * (size_t)n);
	ck_assert(h && back && f && d);
	for (int64_t i = 0; i < n; i++)
		h[i] = (uint16_t)i;
	struct tensor *x = tensor_from_data(TENSOR_BF16, TENSOR_CPU, 1, &n, h);
	struct tensor *x32 = tensor_cast(x, TENSOR_F32), *x64 = tensor_cast(x, TENSOR_F64);
	ck_assert(x32 && x64);
	ck_assert_int_eq(tensor_to_host(x32, f, 4 * (size_t)n), TENSOR_OK);
	ck_assert_int_eq(tensor_to_host(x64, d, 8 * (size_t)n), TENSOR_OK);
	ck_assert_int_eq(tensor_to_host(tensor_cast(x32, TENSOR_BF16), back, 2 * (size_t)n),
			 TENSOR_OK);
	for (int64_t i = 0; i < n; i++) {
		bool nan = (i & 0x7f80) == 0x7f80 && (i & 0x7f);
		uint32_t want = (uint32_t)i << 16;
		if (nan) {
			ck_assert_msg(isnan(f[i]) && isnan(d[i]), "0x%04x: not NaN", (unsigned)i);
			ck_assert_msg(!signbit(f[i]) == !signbit(d[i]) &&
					  !signbit(f[i]) == !(i & 0x8000),
				      "0x%04x: NaN sign", (unsigned)i);
			ck_assert_msg((back[i] & 0x7f80) == 0x7f80 && (back[i] & 0x7f) &&
					  (back[i] & 0x8000) == (i & 0x8000),
				      "0x%04x: back 0x%04x", (unsigned)i, back[i]);
		} else {
			ck_assert_msg(bits_of_f32(f[i]) == want, "0x%04x: f32 0x%08x", (unsigned)i,
				      bits_of_f32(f[i]));
			ck_assert_msg(d[i] == (double)f[i] && !signbit(d[i]) == !signbit(f[i]),
				      "0x%04x: f64 %a", (unsigned)i, d[i]);
			ck_assert_msg(back[i] == (uint16_t)i, "0x%04x: back 0x%04x", (unsigned)i,
				      back[i]);
		}
	}
	free(h);
	free(back);
	free(f);
	free(d);
}
END_TEST

/* Copies between every layout and dtype keep the bf16 values (f32 values that
 * are bf16 values convert exactly both ways); casts to integers truncate. */
START_TEST(test_copies_layouts)
{
	int64_t sh[3] = { 3, 5, 7 }, n = 105;
	struct tensor *r32 = tu_rand(TENSOR_F32, 3, sh, 11);
	struct tensor *x = tensor_cast(r32, TENSOR_BF16); /* contiguous bf16 */
	struct tensor *xf = tensor_cast(x, TENSOR_F32);	  /* its exact values */
	double *want = tu_values(xf);
	struct tensor *views[4];
	views[0] = tu_strided(x); /* dims reversed in memory */
	/* a transposed view of x^T stored contiguously */
	views[1] = tensor_transpose(tensor_contiguous(tensor_transpose(x, 0, 2)), 0, 2);
	/* a sliced view: every other element of a bigger bf16 buffer */
	int64_t big[3] = { 3, 5, 14 };
	struct tensor *store = tensor_zeros(TENSOR_BF16, TENSOR_CPU, 3, big);
	views[2] = tensor_slice(store, 2, 1, 14, 2);
	ck_assert_int_eq(tensor_copy_(views[2], x), TENSOR_OK);
	/* f32 strided into bf16 strided: converts exactly */
	struct tensor *sb = tu_strided(x);
	ck_assert_int_eq(tensor_copy_(sb, tu_strided(xf)), TENSOR_OK);
	views[3] = sb;
	for (int v = 0; v < 4; v++) {
		ck_assert_msg(views[v] && views[v]->dtype == TENSOR_BF16, "view %d", v);
		struct tensor *c = tensor_contiguous(views[v]);
		struct tensor *cf = tensor_cast(views[v], TENSOR_F32);
		struct tensor *cd = tensor_cast(views[v], TENSOR_F64);
		ck_assert(c && cf && cd && tensor_is_contiguous(c));
		tu_assert_close(c, want, n, 0, 0);
		tu_assert_close(cf, want, n, 0, 0);
		tu_assert_close(cd, want, n, 0, 0);
		uint16_t a[105], b[105];
		ck_assert_int_eq(tensor_to_host(views[v], a, sizeof a), TENSOR_OK);
		ck_assert_int_eq(tensor_to_host(x, b, sizeof b), TENSOR_OK);
		ck_assert(memcmp(a, b, sizeof a) == 0);
	}
	/* clone, to_device, concat, stack, split keep bf16 */
	struct tensor *parts[2] = { tensor_clone(x), tensor_to_device(x, TENSOR_CPU) };
	struct tensor *cat = tensor_concat(2, parts, 1);
	ck_assert(cat && cat->dtype == TENSOR_BF16 && cat->shape[1] == 10);
	struct tensor *half[2];
	ck_assert_int_eq(tensor_split(cat, 1, 2, (int64_t[]){ 5, 5 }, half), TENSOR_OK);
	tu_assert_close(tensor_contiguous(half[1]), want, n, 0, 0);
	struct tensor *st = tensor_stack(2, parts, 0);
	ck_assert(st && st->dtype == TENSOR_BF16 && st->shape[0] == 2);
	/* bf16 -> i32 truncates toward zero; i64 -> bf16 rounds */
	int64_t three = 3;
	float fv[3] = { -2.75f, 0.5f, 3.5f };
	struct tensor *i = tensor_cast(
	    tensor_cast(tensor_from_data(TENSOR_F32, TENSOR_CPU, 1, &three, fv), TENSOR_BF16),
	    TENSOR_I32);
	tu_assert_close(i, (double[]){ -2, 0, 3 }, 3, 0, 0);
	int64_t iv[3] = { 257, 259, -65535 };
	struct tensor *ib =
	    tensor_cast(tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, &three, iv), TENSOR_BF16);
	tu_assert_close(ib, (double[]){ 256, 260, -65536 }, 3, 0, 0);
	free(want);
}
END_TEST

START_TEST(test_fill_print)
{
	int64_t sh[2] = { 2, 3 };
	struct tensor *t = tensor_full(TENSOR_BF16, TENSOR_CPU, 2, sh, 1.0 / 3.0);
	ck_assert(t && tensor_nbytes(t) == 12 && tensor_dtype_size(TENSOR_BF16) == 2);
	ck_assert_str_eq(tensor_dtype_name(TENSOR_BF16), "bf16");
	uint16_t h[6];
	ck_assert_int_eq(tensor_to_host(t, h, sizeof h), TENSOR_OK);
	for (int i = 0; i < 6; i++)
		ck_assert_uint_eq(h[i], 0x3eab); /* RNE of 1/3 */
	ck_assert_double_eq(tensor_get(t, (int64_t[]){ 1, 2 }), 0.333984375);
	struct tensor *z = tensor_zeros(TENSOR_BF16, TENSOR_CPU, 2, sh);
	struct tensor *o = tensor_ones(TENSOR_BF16, TENSOR_CPU, 2, sh);
	tu_assert_close(z, (double[]){ 0, 0, 0, 0, 0, 0 }, 6, 0, 0);
	tu_assert_close(o, (double[]){ 1, 1, 1, 1, 1, 1 }, 6, 0, 0);
	struct tensor *ar = tensor_arange(TENSOR_BF16, TENSOR_CPU, 255, 259, 1);
	tu_assert_close(ar, (double[]){ 255, 256, 256, 258 }, 4, 0, 0); /* 257 ties to 256 */
	ck_assert_int_eq(tensor_fill_(tensor_slice(o, 1, 0, 3, 2), -2.5), TENSOR_OK);
	tu_assert_close(o, (double[]){ -2.5, 1, -2.5, -2.5, 1, -2.5 }, 6, 0, 0);

	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	ck_assert(f != NULL);
	tensor_print(t, "third", f);
	tensor_print(tensor_transpose(o, 0, 1), "o", f);
	fclose(f);
	ck_assert_msg(strstr(buf, "third: [2,3] bf16 cpu") && strstr(buf, "0.333984") &&
			  strstr(buf, "o: [3,2] bf16 cpu (strided)") &&
			  strstr(buf, "-2.5, -2.5, 1"),
		      "printed:\n%s", buf);
	free(buf);
}
END_TEST

/* ---- matrix products ------------------------------------------------------ */

/* bf16 values of shape sh: uniform [-1, 1) rounded to bf16. */
static struct tensor *rand_bf16(int nd, const int64_t *sh, uint64_t seed)
{
	struct tensor *t = tensor_cast(tu_rand(TENSOR_F32, nd, sh, seed), TENSOR_BF16);
	ck_assert(t != NULL);
	return t;
}

/* The product of a [..., m, k] and b [..., k, n] (both at least 2-d, batch dims
 * broadcast) in f64 into want, and sum |a||b| per element into mag; returns the
 * element count. */
static int64_t ref_product(const struct tensor *a, const struct tensor *b, double **want,
			   double **mag)
{
	int nd = a->ndim > b->ndim ? a->ndim : b->ndim, nbat = nd - 2;
	int64_t sh[TENSOR_MAX_DIMS], m = a->shape[a->ndim - 2], k = a->shape[a->ndim - 1];
	int64_t n = b->shape[b->ndim - 1], nb = 1;
	for (int d = 0; d < nbat; d++) {
		int da = d - (nd - a->ndim), db = d - (nd - b->ndim);
		int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
		sh[d] = sa == 1 ? sb : sa;
		nb *= sh[d];
	}
	sh[nbat] = m;
	sh[nbat + 1] = k;
	double *va = tu_values(tensor_expand(a, nd, sh));
	sh[nbat] = k;
	sh[nbat + 1] = n;
	double *vb = tu_values(tensor_expand(b, nd, sh));
	*want = calloc((size_t)(nb * m * n) + 1, sizeof(double));
	*mag = calloc((size_t)(nb * m * n) + 1, sizeof(double));
	ck_assert(va && vb && *want && *mag);
	for (int64_t i = 0; i < nb; i++)
		for (int64_t r = 0; r < m; r++)
			for (int64_t c = 0; c < n; c++) {
				double s = 0, g = 0;
				for (int64_t p = 0; p < k; p++) {
					double x = va[(i * m + r) * k + p],
					       y = vb[(i * k + p) * n + c];
					s += x * y;
					g += fabs(x * y);
				}
				(*want)[(i * m + r) * n + c] = s;
				(*mag)[(i * m + r) * n + c] = g;
			}
	free(va);
	free(vb);
	return nb * m * n;
}

/* One bf16 ulp at |x| (normal range). */
static double bf16_ulp(double x)
{
	return x == 0 ? 0x1p-133 : ldexp(1.0, ilogb(x) - 7);
}

/* a x b (bf16) with an f32 result within 2^-20 sum |a||b| of the f64 product of
 * the bf16 values (f32 accumulation; the worst case is k 2^-24, measured far
 * below), and with a bf16 result within one bf16 ulp of the f32 one. */
static void check_bf16_product(const char *what, const struct tensor *a, const struct tensor *b)
{
	double *want, *mag;
	int64_t n = ref_product(a, b, &want, &mag);
	struct tensor *c32 = tensor_matmul_to(a, b, TENSOR_F32);
	struct tensor *c16 = tensor_matmul(a, b);
	ck_assert_msg(c32 && c16, "%s: %s", what, tensor_last_error());
	ck_assert_msg(c32->dtype == TENSOR_F32 && c16->dtype == TENSOR_BF16, "%s: dtypes", what);
	ck_assert_int_eq(tensor_numel(c32), n);
	double *g32 = tu_values(c32), *g16 = tu_values(c16);
	for (int64_t i = 0; i < n; i++) {
		double bound = 0x1p-20 * mag[i];
		ck_assert_msg(fabs(g32[i] - want[i]) <= bound,
			      "%s: f32 element %lld: got %.9g, want %.9g (bound %.3g)", what,
			      (long long)i, g32[i], want[i], bound);
		ck_assert_msg(fabs(g16[i] - g32[i]) <= bf16_ulp(g32[i]),
			      "%s: bf16 element %lld: got %.9g, f32 %.9g", what, (long long)i,
			      g16[i], g32[i]);
	}
	free(want);
	free(mag);
	free(g32);
	free(g16);
}

/* The gemm tests run once per bf16 kernel (a loop test's _i), where this CPU has it. */
static bool on_kernel(int kn)
{
	bool runs = tu_bf16_kernel_force(kn);
	tensor_clear_error();
	return runs;
}

START_TEST(test_gemm_layouts)
{
	if (!on_kernel(_i))
		return;
	int64_t mk[2] = { 37, 53 }, kn[2] = { 53, 29 }, km[2] = { 53, 37 }, nk[2] = { 29, 53 };
	struct tensor *a = rand_bf16(2, mk, 1), *b = rand_bf16(2, kn, 2);
	struct tensor *at = tensor_transpose(rand_bf16(2, km, 3), 0, 1);
	struct tensor *bt = tensor_transpose(rand_bf16(2, nk, 4), 0, 1);
	check_bf16_product("NN", a, b);
	check_bf16_product("TN", at, b);
	check_bf16_product("NT", a, bt);
	check_bf16_product("TT", at, bt);
}
END_TEST

START_TEST(test_gemm_batched_broadcast)
{
	if (!on_kernel(_i))
		return;
	int64_t a3[3] = { 3, 17, 23 }, b3[3] = { 3, 23, 19 }, a4[4] = { 2, 1, 9, 11 },
		b4[3] = { 3, 11, 7 }, lin[3] = { 4, 6, 10 }, w[2] = { 10, 5 };
	check_bf16_product("batched", rand_bf16(3, a3, 5), rand_bf16(3, b3, 6));
	check_bf16_product("batched, A transposed",
			   tensor_transpose(rand_bf16(3, (int64_t[]){ 3, 23, 17 }, 7), 1, 2),
			   rand_bf16(3, b3, 8));
	check_bf16_product("broadcast batch", rand_bf16(4, a4, 9), rand_bf16(3, b4, 10));
	check_bf16_product("shared B (linear)", rand_bf16(3, lin, 11), rand_bf16(2, w, 12));
	check_bf16_product("shared B transposed", rand_bf16(3, lin, 13),
			   tensor_transpose(rand_bf16(2, (int64_t[]){ 5, 10 }, 14), 0, 1));
	/* expanded A (batch stride 0) */
	struct tensor *one = rand_bf16(3, (int64_t[]){ 1, 6, 10 }, 15);
	check_bf16_product("expanded A", tensor_expand(one, 3, (int64_t[]){ 4, 6, 10 }),
			   rand_bf16(3, (int64_t[]){ 4, 10, 3 }, 16));
}
END_TEST

START_TEST(test_gemm_strided)
{
	if (!on_kernel(_i))
		return;
	/* row-sliced and column-sliced views (unit stride kept), a view with no unit
	 * stride (copied by the front-end), a matrix of a permuted 4-d tensor */
	struct tensor *big = rand_bf16(2, (int64_t[]){ 64, 80 }, 21);
	struct tensor *rows = tensor_slice(tensor_slice(big, 0, 0, 64, 2), 1, 5, 45, 1); /* 32x40 */
	struct tensor *cols = tensor_slice(big, 1, 3, 80, 2); /* 64 x 39, no unit stride */
	struct tensor *b = rand_bf16(2, (int64_t[]){ 40, 24 }, 22);
	check_bf16_product("row-sliced A", rows, b);
	check_bf16_product("no unit stride A", tensor_transpose(cols, 0, 1),
			   rand_bf16(2, (int64_t[]){ 64, 8 }, 23));
	struct tensor *q = rand_bf16(4, (int64_t[]){ 2, 7, 3, 8 }, 24); /* [B, T, H, d] */
	struct tensor *k = rand_bf16(4, (int64_t[]){ 2, 7, 3, 8 }, 25);
	struct tensor *qh = tensor_permute(q, (int[]){ 0, 2, 1, 3 }); /* [B, H, T, d] */
	struct tensor *kh = tensor_permute(k, (int[]){ 0, 2, 3, 1 }); /* [B, H, d, T] */
	check_bf16_product("attention scores", qh, kh);
	/* big enough for BLIS's threads */
	check_bf16_product("large", rand_bf16(2, (int64_t[]){ 192, 256 }, 26),
			   tensor_transpose(rand_bf16(2, (int64_t[]){ 160, 256 }, 27), 0, 1));
}
END_TEST

START_TEST(test_gemm_vectors_add_empty)
{
	if (!on_kernel(_i))
		return;
	struct tensor *v = rand_bf16(1, (int64_t[]){ 9 }, 31);
	struct tensor *m = rand_bf16(2, (int64_t[]){ 9, 4 }, 32);
	struct tensor *vm = tensor_matmul_to(v, m, TENSOR_F32);
	ck_assert(vm && vm->ndim == 1 && vm->shape[0] == 4);
	double *want, *mag;
	ref_product(tensor_unsqueeze(v, 0), m, &want, &mag);
	tu_assert_close(vm, want, 4, 1e-6, 0);
	free(want);
	free(mag);
	struct tensor *mv = tensor_matmul(tensor_transpose(m, 0, 1), v);
	ck_assert(mv && mv->dtype == TENSOR_BF16 && mv->ndim == 1 && mv->shape[0] == 4);
	/* matmul_add: the result takes C's dtype (f32 or bf16) */
	struct tensor *a = rand_bf16(2, (int64_t[]){ 5, 9 }, 33);
	struct tensor *bias32 = tu_rand(TENSOR_F32, 1, (int64_t[]){ 4 }, 34);
	struct tensor *y = tensor_matmul_add(a, m, bias32);
	ck_assert_msg(y && y->dtype == TENSOR_F32, "%s", tensor_last_error());
	struct tensor *ref = tensor_add(tensor_matmul_to(a, m, TENSOR_F32), bias32);
	tu_assert_same(y, ref, 1e-6);
	struct tensor *y16 = tensor_matmul_add(a, m, tensor_cast(bias32, TENSOR_BF16));
	ck_assert(y16 && y16->dtype == TENSOR_BF16);
	/* k = 0 gives zeros, m = 0 an empty result */
	struct tensor *z =
	    tensor_matmul(tensor_zeros(TENSOR_BF16, TENSOR_CPU, 2, (int64_t[]){ 3, 0 }),
			  tensor_zeros(TENSOR_BF16, TENSOR_CPU, 2, (int64_t[]){ 0, 2 }));
	tu_assert_close(z, (double[]){ 0, 0, 0, 0, 0, 0 }, 6, 0, 0);
	struct tensor *e0 = tensor_zeros(TENSOR_BF16, TENSOR_CPU, 2, (int64_t[]){ 0, 3 });
	struct tensor *e1 = tensor_zeros(TENSOR_BF16, TENSOR_CPU, 2, (int64_t[]){ 3, 2 });
	struct tensor *e = tensor_matmul_to(e0, e1, TENSOR_F32);
	ck_assert(e && tensor_numel(e) == 0);
}
END_TEST

/* ---- errors ---------------------------------------------------------------- */

START_TEST(test_errors)
{
	int64_t sh[2] = { 4, 4 };
	struct tensor *x = rand_bf16(2, sh, 41), *f = tu_rand(TENSOR_F32, 2, sh, 42);
	tu_assert_error(tensor_add(x, x) == NULL, TENSOR_ERR_DTYPE, "add", "bf16");
	tu_assert_error(tensor_exp(x) == NULL, TENSOR_ERR_DTYPE, "exp", "bf16");
	tu_assert_error(tensor_neg(x) == NULL, TENSOR_ERR_DTYPE, "neg", "bf16");
	tu_assert_error(tensor_sum(x, 0, NULL, false) == NULL, TENSOR_ERR_DTYPE, "sum", "bf16");
	tu_assert_error(tensor_softmax(x, -1) == NULL, TENSOR_ERR_DTYPE, "softmax", "bf16");
	tu_assert_error(tensor_uniform_(x, 1, 0, 1) < 0, TENSOR_ERR_DTYPE, "tensor_uniform_",
			"bf16");
	tu_assert_error(ag_requires_grad(x, true) < 0, TENSOR_ERR_DTYPE, "ag_requires_grad",
			"bf16");
	struct tensor *leaf = tensor_clone(f);
	ck_assert_int_eq(ag_requires_grad(leaf, true), TENSOR_OK);
	tu_assert_error(ag_cast(leaf, TENSOR_BF16) == NULL, TENSOR_ERR_DTYPE, "ag_cast", "bf16");
	ag_no_grad_begin();
	struct tensor *cast = ag_cast(leaf, TENSOR_BF16); /* no gradient wanted: fine */
	ag_no_grad_end();
	ck_assert(cast && cast->dtype == TENSOR_BF16 && !cast->requires_grad);
	/* mixed dtypes (but for bf16 with f32, test_autocast) and results a product cannot give */
	tu_assert_error(tensor_matmul(x, tensor_cast(f, TENSOR_F64)) == NULL, TENSOR_ERR_DTYPE,
			"matmul", "bf16");
	tu_assert_error(tensor_matmul_to(x, f, TENSOR_BF16) == NULL, TENSOR_ERR_DTYPE, "matmul",
			"bf16 result");
	tu_assert_error(tensor_matmul_to(f, f, TENSOR_BF16) == NULL, TENSOR_ERR_DTYPE, "matmul",
			"bf16 result");
	tu_assert_error(tensor_matmul_to(x, x, TENSOR_F64) == NULL, TENSOR_ERR_DTYPE, "matmul",
			"f64 result");
	tu_assert_error(tensor_matmul_add(x, x, tensor_cast(f, TENSOR_F64)) == NULL,
			TENSOR_ERR_DTYPE, "matmul", "f64 result");
	tu_assert_error(tensor_matmul_add(f, f, x) == NULL, TENSOR_ERR_DTYPE, "matmul_add", "bf16");
	int64_t i2[2] = { 2, 2 };
	struct tensor *ints = tensor_zeros(TENSOR_I32, TENSOR_CPU, 2, i2);
	tu_assert_error(tensor_matmul(ints, ints) == NULL, TENSOR_ERR_DTYPE, "matmul", "i32");
	/* CUDA keeps bf16 as storage only: bf16 products are refused there */
	if (tensor_device_available(TENSOR_CUDA)) {
		struct tensor *xc = tensor_to_device(x, TENSOR_CUDA);
		ck_assert(xc != NULL);
		tu_assert_error(tensor_matmul(xc, xc) == NULL, TENSOR_ERR_UNSUPPORTED, "matmul",
				"cuda");
		uint16_t a[16], b[16];
		ck_assert_int_eq(tensor_to_host(xc, a, sizeof a), TENSOR_OK);
		ck_assert_int_eq(tensor_to_host(x, b, sizeof b), TENSOR_OK);
		ck_assert(memcmp(a, b, sizeof a) == 0);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("bf16");
	TCase *tc = tu_tcase("conversion");
	tcase_add_test(tc, test_from_f32_edges);
	tcase_add_test(tc, test_from_f64_edges);
	tcase_add_test(tc, test_all_patterns_round_trip);
	suite_add_tcase(s, tc);
	tc = tu_tcase("storage");
	tcase_add_test(tc, test_copies_layouts);
	tcase_add_test(tc, test_fill_print);
	suite_add_tcase(s, tc);
	tc = tu_tcase("gemm");
	tcase_add_loop_test(tc, test_gemm_layouts, 0, TU_BF16_KERNELS);
	tcase_add_loop_test(tc, test_gemm_batched_broadcast, 0, TU_BF16_KERNELS);
	tcase_add_loop_test(tc, test_gemm_strided, 0, TU_BF16_KERNELS);
	tcase_add_loop_test(tc, test_gemm_vectors_add_empty, 0, TU_BF16_KERNELS);
	suite_add_tcase(s, tc);
	tc = tu_tcase("errors");
	tcase_add_test(tc, test_errors);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
