/* Ops benchmark: matmul GFLOP/s against direct BLIS calls and the measured FMA peak, bf16
 * matmul against f32, and elementwise GB/s. Prints markdown tables. Usage: bench_ops
 * [--threads N] [--reps N] [--quick] [--bf16] [--bf16-blocks KC,MC,NC]; the last sets the
 * cache blocks of cformer's own bf16 kernels (tensor_bf16_gemm_blocks), for tuning. */
#include <blis.h>
#include <immintrin.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "tensor.h"

struct opts {
	int threads, reps;
	bool quick, bf16_only; /* --bf16: only the bf16 matmul table */
	long long blocks[3];   /* --bf16-blocks (0: the kernels' own) */
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static volatile float sink;

/* ---- FMA peak: many independent accumulators, so throughput, not latency, bounds it ---- */

#define PEAK_ITERS 4000000
/* Apply F to the accumulator names, spelled out so they stay in registers. */
/* clang-format off */
#define ACC12(F) F(a0, 0) F(a1, 1) F(a2, 2) F(a3, 3) F(a4, 4) F(a5, 5) F(a6, 6) F(a7, 7) \
		 F(a8, 8) F(a9, 9) F(a10, 10) F(a11, 11)
#define ACC16(F) ACC12(F) F(a12, 12) F(a13, 13) F(a14, 14) F(a15, 15)
/* clang-format on */

__attribute__((target("avx512f,fma"))) static double fma_flops_avx512(void)
{
	float seed = sink;
#define DECL(x, i) __m512 x = _mm512_set1_ps(seed + 0.01f * (float)(i));
	ACC16(DECL)
#undef DECL
	const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-6f);
	for (long i = 0; i < PEAK_ITERS; i++) {
#define STEP(x, i) x = _mm512_fmadd_ps(x, mul, add);
		ACC16(STEP)
#undef STEP
	}
	__m512 s = _mm512_setzero_ps();
#define SUM(x, i) s = _mm512_add_ps(s, x);
	ACC16(SUM)
#undef SUM
	sink = _mm512_reduce_add_ps(s);
	return (double)PEAK_ITERS * 16 * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double fma_flops_avx2(void)
{
	float seed = sink, out[8];
#define DECL(x, i) __m256 x = _mm256_set1_ps(seed + 0.01f * (float)(i));
	ACC12(DECL)
#undef DECL
	const __m256 mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-6f);
	for (long i = 0; i < PEAK_ITERS; i++) {
#define STEP(x, i) x = _mm256_fmadd_ps(x, mul, add);
		ACC12(STEP)
#undef STEP
	}
	__m256 s = _mm256_setzero_ps();
#define SUM(x, i) s = _mm256_add_ps(s, x);
	ACC12(SUM)
#undef SUM
	_mm256_storeu_ps(out, s);
	sink = out[0] + out[7];
	return (double)PEAK_ITERS * 12 * 8 * 2;
}

/* Single-core f32 FMA peak in GFLOP/s (best of reps); *isa names the instruction set. */
static double fma_peak(int reps, const char **isa)
{
	__builtin_cpu_init();
	bool avx512 = __builtin_cpu_supports("avx512f");
	*isa = avx512 ? "AVX-512" : "AVX2";
	double best = 0;
	for (int r = 0; r < reps + 1; r++) {
		double t0 = now();
		double flops = avx512 ? fma_flops_avx512() : fma_flops_avx2();
		double g = flops / (now() - t0) * 1e-9;
		if (r > 0 && g > best)
			best = g;
	}
	return best;
}

/* ---- matmul --------------------------------------------------------------------------- */

enum mm_kind { MM_SQUARE, MM_TRANS_A, MM_TRANS_B, MM_STRIDED, MM_BATCHED, MM_BATCHED_TB };

struct mm_case {
	enum mm_kind kind;
	const char *name;
	int64_t batch, m, k, n;
};

static struct tensor *rnd(int ndim, const int64_t *shape, uint64_t seed)
{
	struct tensor *t = tensor_rand_uniform(TENSOR_F32, TENSOR_CPU, ndim, shape, seed, -1, 1);
	if (!t) {
		fprintf(stderr, "bench_ops: %s\n", tensor_last_error());
		exit(1);
	}
	return t;
}

/* The [r,c] block of t at (16, 32). */
static struct tensor *narrow2(const struct tensor *t, int64_t r, int64_t c)
{
	struct tensor *rows = tensor_narrow(t, 0, 16, r), *v = tensor_narrow(rows, 1, 32, c);
	tensor_free(rows);
	return v;
}

/* Operands of a case as heap tensors: *a, *b (views) and their bases to free. */
static void mm_operands(const struct mm_case *c, struct tensor *base[2], struct tensor **a,
			struct tensor **b)
{
	int64_t m = c->m, k = c->k, n = c->n;
	switch (c->kind) {
	case MM_TRANS_A:
		base[0] = rnd(2, (int64_t[]){ k, m }, 1);
		base[1] = rnd(2, (int64_t[]){ k, n }, 2);
		*a = tensor_transpose(base[0], 0, 1);
		*b = tensor_contiguous(base[1]);
		break;
	case MM_TRANS_B:
		base[0] = rnd(2, (int64_t[]){ m, k }, 1);
		base[1] = rnd(2, (int64_t[]){ n, k }, 2);
		*a = tensor_contiguous(base[0]);
		*b = tensor_transpose(base[1], 0, 1);
		break;
	case MM_STRIDED: /* sliced out of bigger matrices: leading dims k + 96, n + 96 */
		base[0] = rnd(2, (int64_t[]){ m + 32, k + 96 }, 1);
		base[1] = rnd(2, (int64_t[]){ k + 32, n + 96 }, 2);
		*a = narrow2(base[0], m, k);
		*b = narrow2(base[1], k, n);
		break;
	case MM_BATCHED_TB: /* B of each product transposed, as k^T */
		base[0] = rnd(3, (int64_t[]){ c->batch, m, k }, 1);
		base[1] = rnd(3, (int64_t[]){ c->batch, n, k }, 2);
		*a = tensor_contiguous(base[0]);
		*b = tensor_transpose(base[1], 1, 2);
		break;
	case MM_BATCHED:
		base[0] = rnd(3, (int64_t[]){ c->batch, m, k }, 1);
		base[1] = rnd(3, (int64_t[]){ c->batch, k, n }, 2);
		*a = tensor_contiguous(base[0]);
		*b = tensor_contiguous(base[1]);
		break;
	default:
		base[0] = rnd(2, (int64_t[]){ m, k }, 1);
		base[1] = rnd(2, (int64_t[]){ k, n }, 2);
		*a = tensor_contiguous(base[0]);
		*b = tensor_contiguous(base[1]);
	}
}

/* The same product(s) by direct bli_sgemm calls on the tensors' buffers and strides. */
static void blis_direct(const struct tensor *a, const struct tensor *b, float *c)
{
	int nd = a->ndim;
	int64_t batch = nd == 3 ? a->shape[0] : 1, m = a->shape[nd - 2], k = a->shape[nd - 1];
	int64_t n = b->shape[nd - 1];
	float one = 1, zero = 0;
	const float *pa = tensor_data(a), *pb = tensor_data(b);
	for (int64_t i = 0; i < batch; i++)
		bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one,
			  (float *)pa + (nd == 3 ? i * a->strides[0] : 0), a->strides[nd - 2],
			  a->strides[nd - 1], (float *)pb + (nd == 3 ? i * b->strides[0] : 0),
			  b->strides[nd - 2], b->strides[nd - 1], &zero, c + i * m * n, n, 1);
}

struct mm_result {
	double cformer, blis; /* GFLOP/s, best of reps */
};

/* Best GFLOP/s of tensor_matmul and of direct BLIS at `threads`, alternating the two. */
static struct mm_result mm_time(const struct mm_case *c, const struct tensor *a,
				const struct tensor *b, float *cbuf, int threads, int reps)
{
	tensor_set_num_threads(threads);
	double flops = 2.0 * (double)c->batch * (double)c->m * (double)c->k * (double)c->n;
	double best_t = 1e30, best_b = 1e30;
	for (int r = 0; r <= reps; r++) { /* r == 0 warms up */
		tensor_scope_begin();
		double t0 = now();
		struct tensor *out = tensor_matmul(a, b);
		double t1 = now();
		if (!out) {
			fprintf(stderr, "bench_ops: matmul: %s\n", tensor_last_error());
			exit(1);
		}
		tensor_scope_end();
		double t2 = now();
		blis_direct(a, b, cbuf);
		double t3 = now();
		if (r > 0) {
			best_t = t1 - t0 < best_t ? t1 - t0 : best_t;
			best_b = t3 - t2 < best_b ? t3 - t2 : best_b;
		}
	}
	return (struct mm_result){ flops / best_t * 1e-9, flops / best_b * 1e-9 };
}

static void bench_matmul(const struct opts *o, double peak1)
{
	const struct mm_case all[] = {
		{ MM_SQUARE, "square", 1, 256, 256, 256 },
		{ MM_SQUARE, "square", 1, 512, 512, 512 },
		{ MM_SQUARE, "square", 1, 1024, 1024, 1024 },
		{ MM_SQUARE, "square", 1, 2048, 2048, 2048 },
		{ MM_TRANS_A, "A transposed", 1, 1024, 1024, 1024 },
		{ MM_TRANS_B, "B transposed", 1, 1024, 1024, 1024 },
		{ MM_STRIDED, "A, B sliced (ld +96)", 1, 1024, 1024, 1024 },
		{ MM_BATCHED, "64 x [128,64]·[64,128]", 64, 128, 64, 128 },
		{ MM_BATCHED, "64 x [128,128]·[128,64]", 64, 128, 128, 64 },
		{ MM_BATCHED, "64 x [512,64]·[64,512] (scores)", 64, 512, 64, 512 },
		{ MM_TRANS_B, "B transposed (scores q kᵀ)", 1, 4096, 64, 4096 },
		{ MM_BATCHED_TB, "64 x [512,64]·[64,128], B transposed (Linformer q kᵀ)", 64, 512,
		  64, 128 },
		{ MM_BATCHED_TB, "64 x [128,64]·[64,128], B transposed", 64, 128, 64, 128 },
		{ MM_SQUARE, "narrow layer", 1, 8192, 128, 512 },
	};
	int nt = o->threads;
	printf("## matmul (f32, GFLOP/s, best of %d)\n\n", o->reps);
	printf("| case | m,k,n | cformer 1T | BLIS 1T | ratio 1T | cformer %dT | BLIS %dT "
	       "| ratio %dT | %% of %dT peak |\n",
	       nt, nt, nt, nt);
	printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
		const struct mm_case *c = &all[i];
		if (o->quick && c->m > 1024)
			continue;
		struct tensor *base[2], *a, *b;
		mm_operands(c, base, &a, &b);
		float *cbuf = malloc(sizeof(float) * (size_t)(c->batch * c->m * c->n));
		if (!cbuf || !a || !b) {
			fprintf(stderr, "bench_ops: out of memory\n");
			exit(1);
		}
		struct mm_result r1 = mm_time(c, a, b, cbuf, 1, o->reps);
		struct mm_result rn = mm_time(c, a, b, cbuf, nt, o->reps);
		printf(
		    "| %s | %lld,%lld,%lld | %.1f | %.1f | %.3f | %.1f | %.1f | %.3f | %.1f%% |\n",
		    c->name, (long long)c->m, (long long)c->k, (long long)c->n, r1.cformer, r1.blis,
		    r1.cformer / r1.blis, rn.cformer, rn.blis, rn.cformer / rn.blis,
		    100.0 * rn.cformer / (peak1 * nt));
		fflush(stdout);
		free(cbuf);
		tensor_free(a);
		tensor_free(b);
		tensor_free(base[0]);
		tensor_free(base[1]);
	}
	printf("\nratio = cformer / direct bli_sgemm on the same buffers and strides (batched: "
	       "a loop of bli_sgemm calls); peak = %d x the single-core FMA peak.\n\n",
	       nt);
}

/* Seconds of one product a·b with the result in dtype dt, in a scope. */
static double mm_once(const struct tensor *a, const struct tensor *b, enum tensor_dtype dt)
{
	tensor_scope_begin();
	double t0 = now();
	struct tensor *out = tensor_matmul_to(a, b, dt);
	double t1 = now();
	if (!out) {
		fprintf(stderr, "bench_ops: matmul: %s\n", tensor_last_error());
		exit(1);
	}
	tensor_scope_end();
	return t1 - t0;
}

/* One product of the bf16 table: batch x [m,k]·[k,n], A stored [k,m] and transposed when
 * at (the weight gradient's x^T·dy). */
struct bf16_shape {
	int64_t batch, m, k, n;
	bool at;
	const char *what;
};

/* A random [batch,] r x c operand in f32 and bf16 (x[0], x[1]), stored as c x r and
 * transposed when t. */
static void bf16_operand(int64_t batch, int64_t r, int64_t c, bool t, uint64_t seed,
			 struct tensor *x[2])
{
	int64_t sh[3] = { batch, t ? c : r, t ? r : c };
	int nd = batch > 1 ? 3 : 2;
	x[0] = rnd(nd, sh + 3 - nd, seed);
	x[1] = tensor_cast(x[0], TENSOR_BF16);
	if (!x[1]) {
		fprintf(stderr, "bench_ops: %s\n", tensor_last_error());
		exit(1);
	}
	for (int i = 0; t && i < 2; i++) {
		struct tensor *v = tensor_transpose(x[i], nd - 2, nd - 1);
		tensor_free(x[i]);
		x[i] = v;
	}
}

/* Seconds of one product on the bf16 kernel named (NULL: f32 inputs and result). */
static double bf16_once(const char *kernel, const struct tensor *a, const struct tensor *b,
			enum tensor_dtype dt)
{
	if (kernel && tensor_bf16_gemm_force(kernel) != TENSOR_OK) {
		fprintf(stderr, "bench_ops: %s\n", tensor_last_error());
		exit(1);
	}
	return mm_once(a, b, dt);
}

/* Products with bf16 inputs on each CPU kernel (forced) against f32 (BLIS sgemm),
 * interleaved: squares, and the products of a Linformer training step (d 256, ff 1024,
 * 16 x 512 tokens). */
static void bench_matmul_bf16(const struct opts *o)
{
	static const struct bf16_shape shapes[] = {
		{ 1, 512, 512, 512, false, "512^3" },
		{ 1, 1024, 1024, 1024, false, "1024^3" },
		{ 1, 2048, 2048, 2048, false, "2048^3" },
		{ 1, 8192, 256, 768, false, "[8192,256]x[256,768] (qkv)" },
		{ 1, 8192, 256, 1024, false, "[8192,256]x[256,1024] (ff up)" },
		{ 1, 8192, 1024, 256, false, "[8192,1024]x[1024,256] (ff down)" },
		{ 1, 256, 8192, 1024, true, "[256,8192]x[8192,1024], A^T (weight grad)" },
		{ 64, 512, 64, 128, false, "64 x [512,64]x[64,128] (attention)" },
	};
	bool avx = tensor_bf16_gemm_force("avx512bf16") == TENSOR_OK;
	bool amx = tensor_bf16_gemm_force("amx") == TENSOR_OK;
	int nt = o->threads;
	tensor_set_num_threads(nt);
	printf("## matmul with bf16 inputs (%dT, GFLOP/s, best of %d, interleaved)\n\n", nt,
	       o->reps);
	const long long *bk = o->blocks;
	if (bk[0] || bk[1] || bk[2])
		printf(
		    "Own kernels' blocks (--bf16-blocks; 0: the kernel's, others rounded up to its "
		    "k step, MR and NR): kc %lld, mc %lld, nc %lld.\n\n",
		    bk[0], bk[1], bk[2]);
	printf("| product | f32 (BLIS sgemm) | bf16 -> f32, portable | bf16 -> f32, avx512bf16 "
	       "| bf16 -> bf16, avx512bf16 | avx512bf16 / f32 | bf16 -> f32, amx | amx / f32 |\n");
	printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
		const struct bf16_shape *sh = &shapes[i];
		if (o->quick && sh->m * sh->n * sh->k > ((int64_t)1 << 31))
			continue;
		struct tensor *x[2], *y[2];
		bf16_operand(sh->batch, sh->m, sh->k, sh->at, 1, x);
		bf16_operand(sh->batch, sh->k, sh->n, false, 2, y);
		struct tensor *a = x[0], *a16 = x[1], *b = y[0], *b16 = y[1];
		double best[5] = { 1e30, 1e30, 1e30, 1e30, 1e30 };
		for (int r = 0; r <= o->reps; r++) { /* r == 0 warms up */
			double t[5] = { mm_once(a, b, TENSOR_F32),
					bf16_once("portable", a16, b16, TENSOR_F32),
					avx ? bf16_once("avx512bf16", a16, b16, TENSOR_F32) : 1e30,
					avx ? bf16_once("avx512bf16", a16, b16, TENSOR_BF16) : 1e30,
					amx ? bf16_once("amx", a16, b16, TENSOR_F32) : 1e30 };
			for (int j = 0; r > 0 && j < 5; j++)
				best[j] = t[j] < best[j] ? t[j] : best[j];
		}
		double gf = 2e-9 * (double)(sh->batch * sh->m * sh->n * sh->k);
		printf("| %s | %.1f | %.1f |", sh->what, gf / best[0], gf / best[1]);
		if (avx)
			printf(" %.1f | %.1f | %.2f |", gf / best[2], gf / best[3],
			       best[0] / best[2]);
		else
			printf(" - | - | - |");
		if (amx)
			printf(" %.1f | %.2f |\n", gf / best[4], best[0] / best[4]);
		else
			printf(" - | - |\n");
		fflush(stdout);
		tensor_free(a);
		tensor_free(b);
		tensor_free(a16);
		tensor_free(b16);
	}
	tensor_bf16_gemm_force(NULL);
	printf("\nportable: bf16 converted exactly to f32, then BLIS's sgemm; avx512bf16: own "
	       "packing and vdpbf16ps kernel (f32 accumulation)%s; amx: own packing and AMX "
	       "tiles (tdpbf16ps, f32 accumulation)%s.\n\n",
	       avx ? "" : ", not run: this CPU lacks AVX512-BF16",
	       amx ? "" : ", not run: this CPU lacks AMX-BF16");
}

/* ---- elementwise ------------------------------------------------------------------------ */

/* Dropout as it was before the one-pass op: uniform draws, a compare, a scale, a product. */
static struct tensor *dropout_composed(const struct tensor *x, double p, uint64_t seed)
{
	struct tensor *u = tensor_rand_uniform(x->dtype, TENSOR_CPU, x->ndim, x->shape, seed, 0, 1);
	struct tensor *pt = tensor_full(x->dtype, TENSOR_CPU, 0, NULL, p);
	struct tensor *keep = tensor_ge(u, pt);
	struct tensor *mask = tensor_mul_scalar(keep, 1 / (1 - p));
	return tensor_mul(x, mask);
}

static void bench_elementwise(const struct opts *o)
{
	int64_t n = o->quick ? (4 << 20) : (16 << 20);
	tensor_set_num_threads(o->threads);
	struct tensor *a = rnd(1, &n, 3), *b = rnd(1, &n, 4);
	/* softmax over rows of 128: the Linformer's score rows at k = 128 */
	struct tensor *rows = tensor_view(a, 2, (int64_t[]){ n / 128, 128 });
	const char *names[] = { "add",
				"mul",
				"exp",
				"gelu",
				"gelu backward, one pass (b gelu'(a))",
				"gelu backward composed (b * gelu'(a))",
				"softmax (rows of 128)",
				"dropout p 0.1 (one pass)",
				"dropout p 0.1 composed (rand, ge, scale, mul)" };
	int nin[] = { 2, 2, 1, 1, 2, 2, 1, 1, 1 };
	printf("## elementwise (f32, %lld elements, %d threads, best of %d)\n\n", (long long)n,
	       o->threads, o->reps);
	printf("| op | ms | GB/s |\n|---|---:|---:|\n");
	for (int op = 0; op < (int)(sizeof nin / sizeof nin[0]); op++) {
		double best = 1e30;
		const char *err = NULL;
		for (int r = 0; r <= o->reps && !err; r++) {
			tensor_scope_begin();
			double t0 = now();
			struct tensor *y = op == 0   ? tensor_add(a, b)
					   : op == 1 ? tensor_mul(a, b)
					   : op == 2 ? tensor_exp(a)
					   : op == 3 ? tensor_gelu(a)
					   : op == 4 ? tensor_binary(TENSOR_MUL_GELU_GRAD, b, a)
					   : op == 5
					       ? tensor_mul(b, tensor_unary(TENSOR_GELU_GRAD, a, 0))
					   : op == 6 ? tensor_softmax(rows, 1)
					   : op == 7 ? tensor_dropout(a, 0.1, (uint64_t)r)
						     : dropout_composed(a, 0.1, (uint64_t)r);
			double t = now() - t0;
			if (!y)
				err = tensor_last_error();
			tensor_scope_end();
			if (r > 0 && t < best)
				best = t;
		}
		if (err) {
			printf("| %s | n/a | n/a (%s) |\n", names[op], err);
			tensor_clear_error();
			continue;
		}
		double bytes = (double)(nin[op] + 1) * (double)n * sizeof(float);
		printf("| %s | %.2f | %.1f |\n", names[op], best * 1e3, bytes / best * 1e-9);
		fflush(stdout);
	}
	printf("\nGB/s counts each input read once and the output written once.\n");
	tensor_free(rows);
	tensor_free(a);
	tensor_free(b);
}

static void usage(void)
{
	fprintf(stderr, "usage: bench_ops [--threads N] [--reps N] [--quick] [--bf16] "
			"[--bf16-blocks KC,MC,NC]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct opts o = { .threads = 0, .reps = 10, .quick = false };
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			o.threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			o.reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--quick"))
			o.quick = true;
		else if (!strcmp(argv[i], "--bf16"))
			o.bf16_only = true;
		else if (!strcmp(argv[i], "--bf16-blocks") && i + 1 < argc) {
			long long *b = o.blocks;
			char end;
			if (sscanf(argv[++i], "%lld,%lld,%lld%c", &b[0], &b[1], &b[2], &end) != 3) {
				fprintf(stderr, "bench_ops: --bf16-blocks %s: expected KC,MC,NC\n",
					argv[i]);
				return 2;
			}
			if (tensor_bf16_gemm_blocks(b[0], b[1], b[2]) < 0) {
				fprintf(stderr, "bench_ops: %s\n", tensor_last_error());
				return 2;
			}
		} else
			usage();
	}
	if (o.quick && o.reps > 2)
		o.reps = 2;
	if (o.reps < 1)
		o.reps = 1;
	if (o.threads <= 0)
		o.threads = tensor_get_num_threads();

	if (o.bf16_only) {
		printf("- BLIS %s, kernel set: %s\n\n", bli_info_get_version_str(),
		       tensor_blas_arch());
		bench_matmul_bf16(&o);
		return 0;
	}
	const char *isa;
	double peak1 = fma_peak(10, &isa);
	printf("# cformer ops benchmark\n\n");
	printf("- BLIS %s, kernel set: %s\n", bli_info_get_version_str(), tensor_blas_arch());
	double load[1] = { -1 };
	FILE *f = fopen("/proc/loadavg", "r");
	if (f) {
		if (fscanf(f, "%lf", &load[0]) != 1)
			load[0] = -1;
		fclose(f);
	}
	printf("- threads: %d (online CPUs: %d); load average at start: %.2f (timings on a busy "
	       "machine are noisy)\n",
	       o.threads, tensor_get_num_threads(), load[0]);
	printf("- single-core f32 FMA peak (%s microkernel): %.1f GFLOP/s; %d-thread peak %.1f "
	       "GFLOP/s\n\n",
	       isa, peak1, o.threads, peak1 * o.threads);
	bench_matmul(&o, peak1);
	bench_matmul_bf16(&o);
	bench_elementwise(&o);
	return 0;
}
