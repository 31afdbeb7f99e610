/* The CPU's bf16 GEMM kernels through the gemm slot, each forced in turn (the native
 * ones where the CPU has them, their emulated twins everywhere, the portable one):
 * every layout, alpha and beta, summed batches, operands converted a piece at a time,
 * memory and out of memory, the kernel choice, cache blocks, f32 sources, and the
 * packings against element-by-element references. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/cpu_gemm_bf16.h"
#include "cpu/cpu_iter.h"
#include "cpu/cpu_kernels.h"
#include "testutil.h"

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
	v[0] = seed & 1 ? 1.00390625f : 1.01171875f; /* 0x3f808000, 0x3f818000 */
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

int main(void)
{
	Suite *s = suite_create("bf16_kernels");
	TCase *tc = tu_tcase("kernels");
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
	return tu_run(s);
}
