/* The bf16 dtype: conversion rounding on edge values (both from f32 and from
 * f64), every bit pattern through f32 and back, copies in every layout,
 * fills, printing, matrix products against an f64 reference on every layout
 * the f32 product takes, and the errors of ops that refuse bf16. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "backend.h"
#include "cpu/cpu_gemm_bf16.h"
#include "cpu/cpu_iter.h"
#include "cpu/cpu_kernels.h"
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

/* ---- the CPU kernels, each forced, through the gemm slot ---------------------- */

/* The gemm slot's kernels (testutil.h); kernels[kn] is one of them. */
enum { NKERNELS = TU_BF16_KERNELS };
static const char *const *const kernels = tu_bf16_kernels;

/* Whether kernel kn runs here (forced); where the CPU lacks it, checks that forcing it
 * fails with the reason. */
static bool kernel_runs(int kn)
{
	if (tu_bf16_kernel_force(kn))
		return true;
	ck_assert_msg(kn > 0 && kn < TU_BF16_FIRST_EMULATED, "%s: %s", kernels[kn],
		      tensor_last_error());
	tu_assert_error(true, TENSOR_ERR_UNSUPPORTED, kernels[kn],
			kn == 1 ? "AVX512-BF16" : "AMX-BF16");
	return false;
}

/* C = alpha A B + beta C on kernel kn, through the gemm slot. */
static int kernel_gemm(int kn, struct tensor *c, const struct tensor *a, const struct tensor *b,
		       double alpha, double beta)
{
	ck_assert_int_eq(tensor_bf16_gemm_force(kernels[kn]), TENSOR_OK);
	ck_assert_str_eq(tensor_bf16_gemm_kernel(), kn ? kernels[kn] : "f32-convert+blis-sgemm");
	return tensor_backend_get(TENSOR_CPU)->gemm(c, a, b, alpha, beta);
}

/* A [batch, r, c] operand of the slot, random values of dtype dt, in layout lay: bit 0
 * transposed (unit row stride), bit 1 sliced (leading stride past the matrix), bit 2
 * broadcast over the batch (stride 0). */
static struct tensor *slot_operand(enum tensor_dtype dt, int64_t batch, int64_t r, int64_t c,
				   int lay, uint64_t seed)
{
	bool tr = lay & 1, sl = lay & 2;
	int64_t rr = tr ? c : r, cc = tr ? r : c;
	struct tensor *x =
	    tu_rand(TENSOR_F32, 3, (int64_t[]){ lay & 4 ? 1 : batch, rr, cc + (sl ? 5 : 0) }, seed);
	x = tensor_cast(x, dt);
	if (sl)
		x = tensor_slice(x, 2, 2, 2 + cc, 1);
	if (tr)
		x = tensor_transpose(x, 1, 2);
	if (lay & 4)
		x = tensor_expand(x, 3, (int64_t[]){ batch, r, c });
	ck_assert(x != NULL);
	return x;
}

/* One call of the slot: C [batch, m, n] (layout lc: 0 row-major, 1 transposed, 2 sliced)
 * of dtype cdt, NaN when beta == 0 (it must not be read), = alpha A B + beta C; when sum,
 * C is one [m, n] seen with batch stride 0, and the products of the batch add into it in
 * turn (beta 1, as matmul_sum calls the slot). */
struct slot_call {
	int64_t batch, m, k, n;
	int la, lb, lc;
	enum tensor_dtype cdt;
	double alpha, beta;
	bool sum;
};

static struct tensor *slot_c(const struct slot_call *g)
{
	struct tensor *c =
	    slot_operand(g->cdt, g->sum ? 1 : g->batch, g->m, g->n, g->lc == 2 ? 2 : g->lc, 3);
	if (g->beta == 0)
		ck_assert_int_eq(tensor_fill_(c, NAN), TENSOR_OK);
	return g->sum ? tensor_expand(c, 3, (int64_t[]){ g->batch, g->m, g->n }) : c;
}

/* Kernel kn's result, as values. */
static double *slot_run(int kn, const struct slot_call *g, const struct tensor *a,
			const struct tensor *b)
{
	struct tensor *c = slot_c(g);
	ck_assert_int_eq(kernel_gemm(kn, c, a, b, g->alpha, g->beta), TENSOR_OK);
	return tu_values(c);
}

/* The kernels against the f64 product of the bf16 values: |err| <= (2k + 4) 2^-24 (|alpha|
 * sum |a||b| + |beta c|) (two f32 roundings a pair, then alpha and beta; a summed C one
 * more a batch entry), plus half a bf16 ulp (2^-8 relative) for a bf16 C, which is
 * rounded once; and against the portable one within twice that. */
/* The first of n elements where |got - want| > scale * bound, or -1: one assertion a
 * product rather than one an element (each passing Check assertion writes to a file). */
static int64_t first_outside(const double *got, const double *want, const double *bound,
			     double scale, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		if (!(fabs(got[i] - want[i]) <= scale * bound[i]))
			return i;
	return -1;
}

static void check_slot(const char *what, const struct slot_call *g)
{
	struct tensor *a = slot_operand(TENSOR_BF16, g->batch, g->m, g->k, g->la, 1);
	struct tensor *b = slot_operand(TENSOR_BF16, g->batch, g->k, g->n, g->lb, 2);
	double *va = tu_values(a), *vb = tu_values(b), *c0 = tu_values(slot_c(g));
	int64_t nc = g->sum ? 1 : g->batch, n = nc * g->m * g->n;
	double *want = malloc(sizeof(double) * (size_t)n),
	       *bound = malloc(sizeof(double) * (size_t)n);
	ck_assert(want && bound);
	for (int64_t o = 0; o < n; o++) /* C's values, once (a summed C reads as batch copies) */
		want[o] = g->beta == 0 ? 0 : g->beta * c0[o], bound[o] = fabs(want[o]);
	for (int64_t i = 0; i < g->batch; i++)
		for (int64_t r = 0; r < g->m; r++)
			for (int64_t c = 0; c < g->n; c++) {
				double s = 0, mag = 0;
				for (int64_t p = 0; p < g->k; p++) {
					double x = va[(i * g->m + r) * g->k + p] *
						   vb[(i * g->k + p) * g->n + c];
					s += x;
					mag += fabs(x);
				}
				int64_t o = ((g->sum ? 0 : i) * g->m + r) * g->n + c;
				want[o] += g->alpha * s;
				bound[o] += fabs(g->alpha) * mag;
			}
	/* (2k + 4) f32 roundings of at most 2^-24 each a product, one more a summed entry;
	 * half a bf16 ulp (2^-8 relative) for a bf16 C, rounded once */
	double terms = 2.0 * (double)g->k + 4 + (g->sum ? (double)g->batch : 0);
	for (int64_t o = 0; o < n; o++) {
		bound[o] *= terms * 0x1p-24;
		if (g->cdt == TENSOR_BF16)
			bound[o] += 0x1p-8 * fabs(want[o]) + 0x1p-133;
	}
	double *got[NKERNELS] = { NULL };
	for (int kn = 0; kn < NKERNELS; kn++) {
		if (!kernel_runs(kn))
			continue;
		got[kn] = slot_run(kn, g, a, b);
		int64_t i = first_outside(got[kn], want, bound, 1, n);
		ck_assert_msg(i < 0,
			      "%s, %s, [%lld: %lld,%lld,%lld] layouts %d %d %d, %s C, alpha "
			      "%g beta %g: element %lld: got %.9g, want %.9g (bound %.3g)",
			      kernels[kn], what, (long long)g->batch, (long long)g->m,
			      (long long)g->k, (long long)g->n, g->la, g->lb, g->lc,
			      tensor_dtype_name(g->cdt), g->alpha, g->beta, (long long)i,
			      got[kn][i], want[i], bound[i]);
	}
	for (int kn = 1; kn < NKERNELS; kn++) {
		int64_t i = got[kn] ? first_outside(got[kn], got[0], bound, 2, n) : -1;
		ck_assert_msg(i < 0, "%s: %s differs from portable at element %lld: %.9g and %.9g",
			      what, kernels[kn], (long long)i, got[kn][i], got[0][i]);
	}
	tensor_bf16_gemm_force(NULL);
	free(va);
	free(vb);
	free(c0);
	free(want);
	free(bound);
	for (int kn = 0; kn < NKERNELS; kn++)
		free(got[kn]);
}

/* Sizes around the tiles (12 x 32; AMX's 32 x 32 of 16 x 16 tiles, k in steps of 32),
 * the k block (512) and the row and column blocks (192, 1024): 1x1x1, odd k, m or n =
 * 1, batches. */
static const int64_t slot_sizes[][4] = {
	{ 1, 1, 1, 1 },	     { 1, 1, 2, 1 },	  { 1, 3, 1, 5 },	{ 1, 12, 512, 32 },
	{ 1, 13, 513, 33 },  { 1, 1, 600, 70 },	  { 1, 70, 601, 1 },	{ 1, 37, 53, 29 },
	{ 4, 25, 37, 45 },   { 3, 29, 19, 45 },	  { 8, 9, 20, 17 },	{ 1, 200, 1031, 65 },
	{ 1, 30, 40, 1100 }, { 2, 11, 1100, 40 }, { 1, 20, 530, 1100 }, { 1, 32, 32, 32 },
	{ 1, 33, 31, 17 },   { 2, 65, 64, 96 },	  { 1, 16, 544, 48 },
};

static const double alpha_beta[5][2] = { { 1, 0 }, { 1, 1 }, { 0.5, 0 }, { 0.5, -2 }, { 0, 1 } };

/* Size i with layouts la and lb; C's dtype and layout, alpha and beta (of the first
 * four), batch broadcast and the thread count vary with a hash of the case. */
static void check_layouts(size_t i, int la, int lb)
{
	const int64_t *sz = slot_sizes[i];
	uint32_t h = (uint32_t)(i * 131 + (size_t)la * 17 + (size_t)lb * 5 + 7) * 2654435761u;
	int bcast = sz[0] > 1 ? (int)(h >> 17) % 3 : 0;
	struct slot_call g = { .batch = sz[0], .m = sz[1], .k = sz[2], .n = sz[3] };
	g.la = la | (bcast == 1 ? 4 : 0);
	g.lb = lb | (bcast == 2 ? 4 : 0);
	g.lc = (int)(h >> 9) % 3;
	g.cdt = (h >> 3) & 1 ? TENSOR_BF16 : TENSOR_F32;
	g.alpha = alpha_beta[(h >> 5) % 4][0];
	g.beta = alpha_beta[(h >> 5) % 4][1];
	tensor_set_num_threads(1 + (int)(h >> 13) % 3);
	check_slot("layouts", &g);
}

START_TEST(test_kernels_layouts)
{
	for (size_t i = 0; i < sizeof slot_sizes / sizeof slot_sizes[0]; i++)
		for (int la = 0; la < 4; la++)
			for (int lb = 0; lb < 4; lb++)
				check_layouts(i, la, lb);
	tensor_set_num_threads(0);
}
END_TEST

/* Every C dtype and layout with every alpha and beta (beta 0 over NaN), with k in one
 * block and in two; whole and partial tiles of each kernel (AMX's whole f32 blocks with
 * alpha 1 and beta 0 or 1 go to C directly). */
START_TEST(test_kernels_alpha_beta)
{
	for (int j = 0; j < 2 * 3 * 5 * 2; j++) {
		struct slot_call g = { .batch = 2, .m = 45, .k = j % 2 ? 700 : 45, .n = 70 };
		g.lb = 1;
		g.lc = j / 2 % 3;
		g.cdt = j / 6 % 2 ? TENSOR_BF16 : TENSOR_F32;
		g.alpha = alpha_beta[j / 12][0];
		g.beta = alpha_beta[j / 12][1];
		check_slot("alpha and beta", &g);
	}
}
END_TEST

/* A C of batch stride 0 (matmul_sum: the batch's products added into one [m, n]) of
 * either dtype and layout, k in one block and in two, on one thread and two: each entry's
 * f32 sum adds into C in f32, and a bf16 C is rounded once, at the end. */
/* Products whose f32 copies on the portable kernel pass its 2^20 elements an operand, so
 * that it runs them in pieces: slices of the inner dim (with beta on the first only), of
 * A's rows and of B's columns, groups of batch entries, and a summed C; on every kernel,
 * as check_slot checks them. */
START_TEST(test_kernels_pieces)
{
	static const int64_t sizes[][4] = {
		{ 1, 2100, 600, 8 }, { 1, 8, 600, 2100 }, { 5, 600, 600, 8 }, { 3, 1100, 1000, 4 }
	};
	for (int j = 0; j < 4; j++) {
		const int64_t *sz = sizes[j];
		struct slot_call g = { .batch = sz[0], .m = sz[1], .k = sz[2], .n = sz[3] };
		g.la = j % 2, g.lb = j / 2, g.lc = j % 3;
		g.cdt = TENSOR_F32;
		g.alpha = 0.5, g.beta = j == 1 ? 0 : -2;
		g.sum = j == 3;
		if (g.sum)
			g.beta = 1;
		check_slot("pieces", &g);
	}
}
END_TEST

/* A bf16 product of large f32 operands (as autocast makes them) takes no tensor memory
 * beyond its result on any kernel: the portable kernel's f32 copies are bounded scratch. */
START_TEST(test_kernels_memory)
{
	struct tensor *a = tu_rand(TENSOR_F32, 2, (int64_t[]){ 1100, 1000 }, 1);
	struct tensor *b = tu_rand(TENSOR_F32, 2, (int64_t[]){ 1000, 8 }, 2);
	ck_assert_int_eq(tensor_set_matmul_precision(TENSOR_BF16), TENSOR_OK);
	for (int kn = 0; kn < NKERNELS; kn++) {
		if (!kernel_runs(kn))
			continue;
		ck_assert_int_eq(tensor_bf16_gemm_force(kernels[kn]), TENSOR_OK);
		size_t base = tu_peak_begin();
		struct tensor *c = tensor_matmul(a, b);
		size_t used = tu_peak_bytes(base);
		ck_assert_msg(c != NULL, "%s", tensor_last_error());
		tu_peak_end();
		ck_assert_msg(used <= 1100 * 8 * sizeof(float) + 4096,
			      "%s: a [1100,1000] x [1000,8] product took %zu bytes", kernels[kn],
			      used);
	}
	tensor_set_matmul_precision(TENSOR_F32);
	tensor_bf16_gemm_force(NULL);
}
END_TEST

START_TEST(test_kernels_summed)
{
	static const int64_t sizes[][4] = { { 3, 45, 70, 50 },
					    { 5, 13, 33, 20 },
					    { 4, 64, 600, 40 } };
	for (int j = 0; j < 3 * 2 * 3; j++) {
		const int64_t *sz = sizes[j / 6];
		struct slot_call g = { .batch = sz[0], .m = sz[1], .k = sz[2], .n = sz[3] };
		g.la = j % 2, g.lb = j / 2 % 2, g.lc = j % 3;
		g.cdt = j / 3 % 2 ? TENSOR_BF16 : TENSOR_F32;
		g.alpha = j % 2 ? 0.5 : 1, g.beta = 1;
		g.sum = true;
		tensor_set_num_threads(1 + j % 2);
		check_slot("summed", &g);
	}
	tensor_set_num_threads(0);
}
END_TEST

/* Blocks set for tuning (tensor_bf16_gemm_blocks): small ones cut every size into several
 * k, row and column blocks (the smallest, 1, rounded up to one k step and one MR or NR),
 * each kernel's result within the bound; negative sizes refused; (0, 0, 0) the defaults. */
START_TEST(test_kernel_blocks)
{
	static const int64_t blocks[][3] = { { 64, 40, 70 }, { 1, 1, 1 }, { 100, 0, 0 } };
	static const int64_t sizes[][4] = { { 1, 70, 130, 100 }, { 2, 33, 65, 45 } };
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(tensor_bf16_gemm_blocks(blocks[i][0], blocks[i][1], blocks[i][2]),
				 TENSOR_OK);
		for (int j = 0; j < 2; j++) {
			struct slot_call g = { .batch = sizes[j][0],
					       .m = sizes[j][1],
					       .k = sizes[j][2],
					       .n = sizes[j][3],
					       .la = j,
					       .lb = i % 2,
					       .lc = i,
					       .cdt = j ? TENSOR_BF16 : TENSOR_F32,
					       .alpha = 1,
					       .beta = i == 1 ? 1 : 0 };
			tensor_set_num_threads(1 + j);
			check_slot("blocks", &g);
		}
	}
	tensor_set_num_threads(0);
	tu_assert_error(tensor_bf16_gemm_blocks(64, -1, 0) < 0, TENSOR_ERR_ARG, "bf16 gemm blocks",
			"mc -1");
	ck_assert_int_eq(tensor_bf16_gemm_blocks(0, 0, 0), TENSOR_OK);
}
END_TEST

/* The kernel choice: the default, the environment variable, and errors. */
START_TEST(test_kernel_choice)
{
	bool avx = tensor_bf16_gemm_force("avx512bf16") == TENSOR_OK;
	bool amx = tensor_bf16_gemm_force("amx") == TENSOR_OK;
	const char *best = amx ? "amx" : avx ? "avx512bf16" : "f32-convert+blis-sgemm";
	tensor_clear_error();
	ck_assert_int_eq(tensor_bf16_gemm_force(NULL), TENSOR_OK);
	ck_assert_str_eq(tensor_bf16_gemm_kernel(), best);
	tu_assert_error(tensor_bf16_gemm_force("amx2") < 0, TENSOR_ERR_ARG, "unknown kernel 'amx2'",
			"portable, avx512bf16, amx, avx512bf16-emulated, amx-emulated");
	ck_assert_str_eq(tensor_bf16_gemm_kernel(), best);
	setenv("CFORMER_BF16_GEMM", "portable", 1);
	ck_assert_int_eq(tensor_bf16_gemm_force(NULL), TENSOR_OK);
	ck_assert_str_eq(tensor_bf16_gemm_kernel(), "f32-convert+blis-sgemm");
	setenv("CFORMER_BF16_GEMM", "avx512bf16", 1); /* ignored where the CPU lacks it */
	ck_assert_int_eq(tensor_bf16_gemm_force(NULL), TENSOR_OK);
	ck_assert_str_eq(tensor_bf16_gemm_kernel(), avx ? "avx512bf16" : best);
	setenv("CFORMER_BF16_GEMM", "amx", 1);
	ck_assert_int_eq(tensor_bf16_gemm_force(NULL), TENSOR_OK);
	ck_assert_str_eq(tensor_bf16_gemm_kernel(), best);
	setenv("CFORMER_BF16_GEMM", "bogus", 1);
	ck_assert_int_eq(tensor_bf16_gemm_force(NULL), TENSOR_OK);
	ck_assert_str_eq(tensor_bf16_gemm_kernel(), best);
	ck_assert_int_eq(tensor_last_status(), TENSOR_OK); /* an ignored value leaves no error */
	unsetenv("CFORMER_BF16_GEMM");
	ck_assert_int_eq(tensor_bf16_gemm_force(NULL), TENSOR_OK);
	setenv("CFORMER_BF16_GEMM", "amx-emulated", 1); /* a twin: only when named */
	ck_assert_int_eq(tensor_bf16_gemm_force(NULL), TENSOR_OK);
	ck_assert_str_eq(tensor_bf16_gemm_kernel(), "amx-emulated");
	unsetenv("CFORMER_BF16_GEMM");
	ck_assert_int_eq(tensor_bf16_gemm_force(NULL), TENSOR_OK);
	ck_assert_str_eq(tensor_bf16_gemm_kernel(), best);
	for (int kn = 1; kn < NKERNELS; kn++)
		kernel_runs(kn); /* where the CPU lacks it: the visible skip and the error */
	tensor_bf16_gemm_force(NULL);
}
END_TEST

/* Each allocation of a product failing in turn gives TENSOR_ERR_NOMEM (the packing
 * buffers and f32 copies included), never a crash; the product works after. */
START_TEST(test_kernels_nomem)
{
	struct tensor *a = slot_operand(TENSOR_BF16, 2, 40, 600, 0, 61);
	struct tensor *b = slot_operand(TENSOR_BF16, 2, 600, 50, 1, 62);
	for (int kn = 0; kn < NKERNELS; kn++) {
		if (!kernel_runs(kn))
			continue;
		bool fired = true;
		for (int64_t i = 0; fired; i++) {
			tensor_scope_begin();
			struct tensor *c =
			    tensor_zeros(TENSOR_F32, TENSOR_CPU, 3, (int64_t[]){ 2, 40, 50 });
			ck_assert(c != NULL);
			tensor_mem_inject_failure(i);
			int rc = kernel_gemm(kn, c, a, b, 1, 0);
			fired = tensor_mem_inject_failure(-1) > i;
			if (fired)
				tu_assert_error(rc < 0, TENSOR_ERR_NOMEM, NULL, NULL);
			else
				ck_assert_msg(rc == TENSOR_OK, "%s", tensor_last_error());
			tensor_scope_end();
		}
	}
	tensor_bf16_gemm_force(NULL);
}
END_TEST

/* A [2, r, c] f32 operand with values that are not bf16 (a tie at element 0, a NaN
 * at the last when nan), stored transposed when tr. */
static struct tensor *f32_operand(int64_t r, int64_t c, bool tr, bool nan, uint64_t seed)
{
	int64_t n = 2 * r * c;
	float *v = malloc(sizeof(float) * (size_t)n);
	ck_assert(v != NULL);
	for (int64_t i = 0; i < n; i++)
		v[i] = (float)sin((double)(i * 7 + (int64_t)seed)) * 1.2345f;
	v[0] = f32_of_bits(seed & 1 ? 0x3f808000 : 0x3f818000);
	if (nan)
		v[n - 1] = NAN;
	struct tensor *x = tensor_from_data(TENSOR_F32, TENSOR_CPU, 3,
					    (int64_t[]){ 2, tr ? c : r, tr ? r : c }, v);
	free(v);
	return tr ? tensor_transpose(x, 1, 2) : x;
}

/* The own kernels' packing reads f32 too, rounding to nearest even: the same bits as
 * the product of the bf16 casts (ties and NaN included). */
START_TEST(test_kernel_f32_sources)
{
	static const enum cpu_bf16_kernel own[NKERNELS - 1] = { CPU_BF16_AVX512, CPU_BF16_AMX,
								CPU_BF16_AVX512_EMULATED,
								CPU_BF16_AMX_EMULATED };
	for (int kn = 1; kn < NKERNELS; kn++) {
		if (!kernel_runs(kn))
			continue;
		for (int la = 0; la < 4; la++) {
			struct tensor *a = f32_operand(21, 39, la & 1, true, 51);
			struct tensor *b = f32_operand(39, 35, la & 2, false, 52);
			int64_t sh[3] = { 2, 21, 35 };
			struct tensor *c = tensor_empty(TENSOR_F32, TENSOR_CPU, 3, sh);
			struct tensor *ref = tensor_empty(TENSOR_F32, TENSOR_CPU, 3, sh);
			ck_assert_int_eq(cpu_gemm_bf16(own[kn - 1], c, a, b, 1, 0), TENSOR_OK);
			ck_assert_int_eq(cpu_gemm_bf16(own[kn - 1], ref,
						       tensor_cast(a, TENSOR_BF16),
						       tensor_cast(b, TENSOR_BF16), 1, 0),
					 TENSOR_OK);
			float x[2 * 21 * 35], y[2 * 21 * 35];
			ck_assert_int_eq(tensor_to_host(c, x, sizeof x), TENSOR_OK);
			ck_assert_int_eq(tensor_to_host(ref, y, sizeof y), TENSOR_OK);
			ck_assert_msg(memcmp(x, y, sizeof x) == 0,
				      "%s, layout %d: f32 sources differ", kernels[kn], la);
			ck_assert(isnan(x[2 * 21 * 35 - 1]) && !isnan(x[0]));
		}
	}
	tensor_bf16_gemm_force(NULL);
}
END_TEST

/* Reference packings, element by element (cpu_gemm_bf16.h): B panels of NR = 32 columns
 * and AVX512-BF16 A panels of MR = 12 rows, pairs by rows; AMX A panels, for each step of
 * 32 k, the 16 x 16-word tiles of rows 0-15 and 16-31. */
static void ref_pack_b(const struct bmat *b, int64_t k, int64_t nr, uint32_t *out)
{
	bf16_pack_pairs_any(b, k, nr, 32, out, 32);
}

static void ref_pack_a_avx512(const struct bmat *a, int64_t mr, int64_t kc, uint32_t *out)
{
	struct bmat t = bmat_t(a);
	bf16_pack_pairs_any(&t, kc, mr, 12, out, 12);
}

static void ref_pack_a_amx(const struct bmat *a, int64_t mr, int64_t kc, uint32_t *out)
{
	struct bmat t = bmat_t(a); /* kc x mr: pairs run down its rows */
	for (int64_t s = 0; s < ceil_div(kc, AMX_KSTEP); s++)
		for (int64_t r = 0; r < AMX_MR; r++)
			for (int64_t q = 0; q < 16; q++)
				out[(s * 2 + r / 16) * 256 + (r % 16) * 16 + q] =
				    r < mr ? bmat_pair(&t, s * AMX_KSTEP + 2 * q, r, kc) : 0;
}

/* Each own kernel set that runs here (the emulated twins everywhere) packs A and B panels
 * of every layout, bf16 and f32, at sizes around the tiles and k steps, to the words of
 * the reference packings. */
START_TEST(test_packing)
{
	static const struct bf16_impl *const sets[4] = { &bf16_avx512_impl, &bf16_amx_impl,
							 &bf16_avx512_emulated_impl,
							 &bf16_amx_emulated_impl };
	static const int64_t sizes[][2] = { { 1, 1 },	{ 32, 32 }, { 17, 33 },
					    { 32, 64 }, { 5, 100 }, { 31, 7 } };
	for (int kn = 1; kn < NKERNELS; kn++) {
		if (!kernel_runs(kn))
			continue;
		const struct bf16_impl *set = sets[kn - 1];
		bool amx = set->mr == AMX_MR;
		for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
			for (int lay = 0; lay < 4; lay++)
				for (int f = 0; f < 2; f++) {
					int64_t r = sizes[i][0], k = sizes[i][1];
					struct tensor *x = slot_operand(
					    f ? TENSOR_F32 : TENSOR_BF16, 1, r, k, lay, 71 + i);
					struct bmat a = { cpu_ptr(x), x->dtype,
							  (int64_t)tensor_dtype_size(x->dtype),
							  x->strides[1], x->strides[2] };
					/* as A: min(r, MR) x k; as B: r rows (its k), min(k, 32)
					 * columns */
					int64_t mr = r < set->mr ? r : set->mr,
						nr = k < 32 ? k : 32;
					size_t na = amx ? (size_t)ceil_div(k, AMX_KSTEP) * 2 * 256
							: (size_t)ceil_div(k, 2) * 12,
					       nb = (size_t)ceil_div(r, 2) * 32;
					uint32_t u[2 * 4 * 256], v[2 * 4 * 256];
					ck_assert(na <= 2 * 4 * 256 && nb <= 2 * 4 * 256);
					memset(u, 0xab, sizeof u);
					memset(v, 0xcd, sizeof v);
					set->pack_a(&a, mr, k, u);
					(amx ? ref_pack_a_amx : ref_pack_a_avx512)(&a, mr, k, v);
					ck_assert_msg(!memcmp(u, v, na * 4),
						      "%s: A %lldx%lld layout %d %s", kernels[kn],
						      (long long)mr, (long long)k, lay,
						      f ? "f32" : "bf16");
					set->pack_b(&a, r, nr, u);
					ref_pack_b(&a, r, nr, v);
					ck_assert_msg(!memcmp(u, v, nb * 4),
						      "%s: B %lldx%lld layout %d %s", kernels[kn],
						      (long long)r, (long long)nr, lay,
						      f ? "f32" : "bf16");
				}
	}
	tensor_bf16_gemm_force(NULL);
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
	tc = tu_tcase("kernels");
	tcase_add_test(tc, test_kernels_layouts);
	tcase_add_test(tc, test_kernels_alpha_beta);
	tcase_add_test(tc, test_kernels_summed);
	tcase_add_test(tc, test_kernels_pieces);
	tcase_add_test(tc, test_kernels_memory);
	tcase_add_test(tc, test_kernels_nomem);
	tcase_add_test(tc, test_kernel_choice);
	tcase_add_test(tc, test_kernel_blocks);
	tcase_add_test(tc, test_kernel_f32_sources);
	tcase_add_test(tc, test_packing);
	suite_add_tcase(s, tc);
	tc = tu_tcase("errors");
	tcase_add_test(tc, test_errors);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
