/* CPU GEMM: batches of strided matrix products through BLIS's typed API. */
#include <blis.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../bf16.h"
#include "../mem.h"
#include "cpu_iter.h"
#include "cpu_kernels.h"

/* Products of at most CPU_GEMM_SMALL multiply-adds (m n k) keep BLIS's threads busy
 * poorly: a batch of them runs one single-threaded BLIS call per OpenMP thread instead,
 * when there is a product for every thread (or the products are tiny). On 2 Zen 5 cores:
 * 64 x [128,64]·[64,128] 270 vs 155 GFLOP/s, 5 x 256^3 320 vs 285; even at 384^3, and
 * BLIS's own threads win from 512^3. */
#define CPU_GEMM_SMALL ((int64_t)256 * 256 * 256)
#define CPU_GEMM_TINY ((int64_t)128 * 128 * 128)
/* Products this small run on one thread even alone (no thread wake-up). */
#define CPU_GEMM_MINI ((int64_t)32 * 32 * 32)

/* Where BLIS's packed path beats the unpacked "sup" one it picks for these shapes (1 thread,
 * Zen 3, GFLOP/s packed against sup):
 * - an inner dim that dwarfs a wide enough C (k >= 4 max(m, n), m n >= 256^2: a weight's
 *   gradient, X^T dY over the batch's tokens): [256,8192]·[8192,768] with A transposed 65
 *   against 47 (2 threads: 78 against 58), [256,8192]·[8192,1024] 62 against 27; where C is
 *   narrower (128 x 64) sup is as fast or faster;
 * - a short inner dim and a wide C (k <= 128, n >= 512, m >= 64: attention's scores q k^T
 *   and dp = dout v^T over a head dim of 64, a narrow model's layers): [512,64]·[64,1024]
 *   75 against 43 (B either way round), [8192,128]·[128,1024] 79 against 56 with B
 *   column-major, 79 against 32 row-major, [64,64]·[64,4096] 64 against 42; at k = 256 the
 *   two are equal, and for m < 64, or n = 256 with B row-major, sup is as fast or faster;
 * - a short inner dim with A row-major and B column-major ("dots": q k^T over the
 *   Linformer's k = 128 keys) from n = 64 (m >= 64, m n >= 64 x 128): [512,64]·[64,128]
 *   75 against 45, [256,64]·[64,128] 74 against 47, [512,64]·[64,64] 69 against 47,
 *   [64,64]·[64,128] 57 against 45 ([64,64]·[64,64]: 44 against 43); with A column-major or
 *   B row-major sup is as fast or faster there (sup 80 against 74 for [512,64]·[64,128]). */
static bool gemm_prefers_packed(int64_t m, int64_t n, int64_t k, bool dots)
{
	return (k >= 4 * (m > n ? m : n) && m * n >= 256 * 256) ||
	       (k <= 128 && m >= 64 && (n >= 512 || (dots && n >= 64 && m * n >= 64 * 128)));
}

/* One operand: element 0, batch stride, row and column strides (elements). */
struct gemm_mat {
	char *p;
	int64_t sb, rs, cs;
};

/* Strides BLIS accepts for an r x c matrix: a size-1 dim's stride is free
 * (the front-end makes every matrix unit-stride in one dim, see backend.h). */
static bool gemm_mat_fix(struct gemm_mat *x, int64_t r, int64_t c)
{
	if (r == 1 && c == 1)
		x->rs = x->cs = 1;
	else if (r == 1)
		x->rs = x->cs == 1 ? c : 1;
	else if (c == 1)
		x->cs = x->rs == 1 ? r : 1;
	return (x->cs == 1 && x->rs >= c) || (x->rs == 1 && x->cs >= r);
}

/* A's rows and B's columns contiguous: each entry of C a dot product of two unit-stride
 * vectors (A row-major, B column-major, as q k^T). */
static bool gemm_dots(const struct gemm_mat *a, const struct gemm_mat *b)
{
	return a->cs == 1 && b->rs == 1;
}

/* BLIS's runtime for the product of a and b on nt threads (0: BLIS's global count), its sup
 * path off where the packed one is faster. */
static void gemm_rntm(rntm_t *r, int64_t m, int64_t n, int64_t k, const struct gemm_mat *a,
		      const struct gemm_mat *b, int nt)
{
	if (nt) {
		*r = (rntm_t)BLIS_RNTM_INITIALIZER;
		bli_rntm_set_num_threads(nt, r);
	} else {
		bli_rntm_init_from_global(r);
	}
	if (gemm_prefers_packed(m, n, k, gemm_dots(a, b)))
		bli_rntm_disable_l3_sup(r);
}

static struct gemm_mat gemm_mat_of(const struct tensor *t)
{
	return (struct gemm_mat){ cpu_ptr(t), t->strides[0], t->strides[1], t->strides[2] };
}

/* C_i = alpha A_i B_i + beta C_i for batch entry i; rntm NULL uses BLIS's
 * global thread count. */
static void gemm_one(enum tensor_dtype dt, int64_t i, int64_t m, int64_t n, int64_t k, double alpha,
		     double beta, const struct gemm_mat *a, const struct gemm_mat *b,
		     const struct gemm_mat *c, rntm_t *rntm)
{
	size_t es = tensor_dtype_size(dt);
	char *pa = a->p + i * a->sb * (int64_t)es, *pb = b->p + i * b->sb * (int64_t)es;
	char *pc = c->p + i * c->sb * (int64_t)es;
	if (dt == TENSOR_F32) {
		float fa = (float)alpha, fb = (float)beta;
		bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &fa, (float *)pa, a->rs,
			     a->cs, (float *)pb, b->rs, b->cs, &fb, (float *)pc, c->rs, c->cs, NULL,
			     rntm);
	} else {
		bli_dgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &alpha, (double *)pa,
			     a->rs, a->cs, (double *)pb, b->rs, b->cs, &beta, (double *)pc, c->rs,
			     c->cs, NULL, rntm);
	}
}

void cpu_gemm_one_thread(enum tensor_dtype dt, int64_t m, int64_t n, int64_t k, double alpha,
			 struct cpu_mat a, struct cpu_mat b, double beta, struct cpu_mat c)
{
	size_t es = tensor_dtype_size(dt);
	if (m == 0 || n == 0)
		return;
	if (k == 0) { /* C = beta C, zeros when beta == 0 */
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++) {
				char *p = c.p + (i * c.rs + j * c.cs) * (int64_t)es;
				cpu_store(p, dt, beta == 0 ? 0 : beta * cpu_load(p, dt));
			}
		return;
	}
	struct gemm_mat ma = { a.p, 0, a.rs, a.cs }, mb = { b.p, 0, b.rs, b.cs };
	struct gemm_mat mc = { c.p, 0, c.rs, c.cs };
	gemm_mat_fix(&ma, m, k);
	gemm_mat_fix(&mb, k, n);
	gemm_mat_fix(&mc, m, n);
	rntm_t one;
	gemm_rntm(&one, m, n, k, &ma, &mb, 1);
	gemm_one(dt, 0, m, n, k, alpha, beta, &ma, &mb, &mc, &one);
}

/* k == 0: C = beta C (zeros when beta == 0, as BLAS does, even over NaN). */
static void gemm_scale(struct tensor *c, double beta)
{
	enum tensor_dtype dt = c->dtype;
	size_t es = tensor_dtype_size(dt);
	char *base = cpu_ptr(c);
	for (int64_t i = 0; i < c->shape[0]; i++)
		for (int64_t r = 0; r < c->shape[1]; r++)
			for (int64_t j = 0; j < c->shape[2]; j++) {
				char *p = base + (i * c->strides[0] + r * c->strides[1] +
						  j * c->strides[2]) *
						     (int64_t)es;
				cpu_store(p, dt, beta == 0 ? 0 : beta * cpu_load(p, dt));
			}
}

static int gemm_blas(struct tensor *c, const struct tensor *a, const struct tensor *b, double alpha,
		     double beta);

/* ---- bf16 inputs: the kernel choice ---------------------------------------
 * AMX where the CPU has it, else AVX512-BF16 (cpu_gemm_bf16*.c), else the
 * portable kernel below; CFORMER_BF16_GEMM (a name of bf16_kernel_names or
 * "portable"), read at first use, or tensor_bf16_gemm_force() overrides. The
 * emulated twins of the AVX512-BF16 and AMX kernels run only when named. */

enum bf16_kernel { BF16_PORTABLE, BF16_AVX512, BF16_AMX, BF16_AVX512_EMU, BF16_AMX_EMU, BF16_NK };
static const char *const bf16_kernel_names[BF16_NK] = {
	"f32-convert+blis-sgemm", "avx512bf16", "amx", "avx512bf16-emulated", "amx-emulated",
};
static atomic_int bf16_kernel = -1; /* not chosen yet */

/* The own kernel of each choice but the portable one. */
static enum cpu_bf16_kernel bf16_cpu_kernel(int k)
{
	static const enum cpu_bf16_kernel own[BF16_NK] = {
		[BF16_AVX512] = CPU_BF16_AVX512,
		[BF16_AMX] = CPU_BF16_AMX,
		[BF16_AVX512_EMU] = CPU_BF16_AVX512_EMULATED,
		[BF16_AMX_EMU] = CPU_BF16_AMX_EMULATED,
	};
	return own[k];
}

/* The kernel named (portable or the name reported); -1 for an unknown name, -2 for a
 * kernel this CPU lacks. */
static int bf16_kernel_lookup(const char *name)
{
	if (!strcmp(name, "portable") || !strcmp(name, bf16_kernel_names[BF16_PORTABLE]))
		return BF16_PORTABLE;
	for (int k = BF16_AVX512; k < BF16_NK; k++)
		if (!strcmp(name, bf16_kernel_names[k]))
			return cpu_gemm_bf16_ok(bf16_cpu_kernel(k)) ? k : -2;
	return -1;
}

/* CFORMER_BF16_GEMM if it names a kernel this CPU runs, else the fastest one. */
static int bf16_kernel_default(void)
{
	const char *env = getenv("CFORMER_BF16_GEMM");
	int k = env ? bf16_kernel_lookup(env) : -1;
	if (k >= 0)
		return k;
	return cpu_gemm_bf16_ok(CPU_BF16_AMX)	   ? BF16_AMX
	       : cpu_gemm_bf16_ok(CPU_BF16_AVX512) ? BF16_AVX512
						   : BF16_PORTABLE;
}

static int bf16_kernel_get(void)
{
	int k = atomic_load(&bf16_kernel);
	if (k < 0) {
		k = bf16_kernel_default();
		atomic_store(&bf16_kernel, k);
	}
	return k;
}

bool cpu_bf16_kernel_own(enum cpu_bf16_kernel *k)
{
	int n = bf16_kernel_get();
	if (n != BF16_PORTABLE)
		*k = bf16_cpu_kernel(n);
	return n != BF16_PORTABLE;
}

const char *tensor_bf16_gemm_kernel(void)
{
	return bf16_kernel_names[bf16_kernel_get()];
}

int tensor_bf16_gemm_force(const char *name)
{
	int k = name ? bf16_kernel_lookup(name) : bf16_kernel_default();
	if (k == -1)
		return tensor_error(TENSOR_ERR_ARG,
				    "bf16 gemm: unknown kernel '%s' (portable, avx512bf16, amx, "
				    "avx512bf16-emulated, amx-emulated)",
				    name);
	if (k == -2) {
		const char *needs = strcmp(name, "amx") ? "AVX512-BF16 with AVX512F/BW/VL"
							: "AMX-BF16 tiles and AVX512-BF16";
		const char *runs =
		    cpu_gemm_bf16_ok(CPU_BF16_AVX512) ? "portable, avx512bf16" : "portable";
		return tensor_error(TENSOR_ERR_UNSUPPORTED,
				    "bf16 gemm: kernel %s needs %s and OS support of its state; "
				    "this CPU runs %s and the emulated twins",
				    name, needs, runs);
	}
	atomic_store(&bf16_kernel, k);
	return TENSOR_OK;
}

/* ---- bf16 inputs: the portable kernel ---------------------------------------
 * A and B are converted to f32 copies (bf16 ones exactly, f32 ones rounded to
 * bf16 values, in one pass) and BLIS's sgemm runs on the copies: f32
 * accumulation, as fast as the f32 product less the pass over the operands. The
 * copies are host scratch, as BLIS's packing buffers and the own kernels' are,
 * of at most BF16_PIECE elements an operand: a larger product runs in pieces
 * (groups of batch entries, or slices of A's rows, B's columns and the inner
 * dim), so that a bf16 product takes no more tensor memory than an f32 one and
 * its scratch stays bounded. A bf16 C is computed in an f32 buffer (tensor
 * memory, as C itself) and rounded once, to nearest even. */

/* 4 MiB of f32 an operand; inner slices of BF16_PIECE_K (BLIS's packed kernels take
 * k a few hundred at a time anyway). */
#define BF16_PIECE ((int64_t)1 << 20)
#define BF16_PIECE_K 512

/* n elements of x at element stride xs (bf16, or f32 rounded to bf16 values
 * when round) as f32 at o. */
static void line_to_f32(float *o, const char *x, int64_t xs, enum tensor_dtype dt, int64_t n,
			bool round)
{
	const uint16_t *h = (const uint16_t *)x;
	const float *f = (const float *)x;
	if (xs != 1) {
		for (int64_t i = 0; i < n; i++)
			o[i] = dt == TENSOR_BF16 ? bf16_to_f32(h[i * xs])
			       : round		 ? bf16_to_f32(bf16_from_f32(f[i * xs]))
						 : f[i * xs];
	} else if (dt == TENSOR_BF16) {
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = bf16_to_f32(h[i]);
	} else if (round) {
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = bf16_to_f32(bf16_from_f32(f[i]));
	} else {
		memcpy(o, f, (size_t)n * sizeof(float));
	}
}

/* The elements of an f32 copy of the [batch, r, c] operand x (one matrix for a batch
 * stride of 0). */
static int64_t f32_copy_numel(const struct tensor *x)
{
	return (x->strides[0] == 0 ? 1 : x->shape[0]) * x->shape[1] * x->shape[2];
}

/* t = an f32 copy of x over storage st (st->data: f32_copy_numel(x) elements), laid out
 * with x's unit-stride dim (so the conversion streams), filled from x when fill (f32
 * values rounded to bf16 ones when round). */
static void f32_copy(struct tensor *t, struct tensor_storage *st, const struct tensor *x, bool fill,
		     bool round)
{
	int64_t nb = x->strides[0] == 0 ? 1 : x->shape[0], r = x->shape[1], c = x->shape[2];
	bool colmajor = r > 1 && c > 1 && x->strides[1] == 1;
	memset(t, 0, sizeof *t);
	t->storage = st;
	t->dtype = TENSOR_F32;
	t->ndim = 3;
	memcpy(t->shape, x->shape, sizeof t->shape);
	t->strides[0] = x->strides[0] == 0 ? 0 : r * c;
	t->strides[1] = colmajor ? 1 : c;
	t->strides[2] = colmajor ? r : 1;
	if (!fill)
		return;
	/* lines of len elements along the unit-stride dim (or a size-1 dim's) */
	int64_t lines = colmajor ? c : r, len = colmajor ? r : c;
	int64_t ls = colmajor ? x->strides[2] : x->strides[1];
	int64_t xs = colmajor ? x->strides[1] : x->strides[2];
	size_t es = tensor_dtype_size(x->dtype);
	const char *src = cpu_ptr(x);
	float *dst = st->data;
#pragma omp parallel for num_threads(cpu_num_threads()) if (nb * r * c > CPU_PAR_MIN)
	for (int64_t t = 0; t < nb * lines; t++) {
		int64_t i = t / lines, l = t % lines;
		line_to_f32(dst + t * len, src + (i * x->strides[0] + l * ls) * (int64_t)es, xs,
			    x->dtype, len, round);
	}
}

int cpu_gemm_f32_of(struct cpu_gemm_f32 *g, const struct tensor *x, bool fill, bool round)
{
	memset(g, 0, sizeof *g);
	tensor_heap_begin();
	g->st = tensor_storage_alloc(TENSOR_CPU, (size_t)f32_copy_numel(x) * sizeof(float));
	tensor_heap_end();
	if (!g->st)
		return tensor_error(TENSOR_ERR_NOMEM,
				    "gemm: no memory for an f32 copy of a %s [%lld,%lld,%lld]",
				    tensor_dtype_name(x->dtype), (long long)x->shape[0],
				    (long long)x->shape[1], (long long)x->shape[2]);
	f32_copy(&g->t, g->st, x, fill, round);
	return TENSOR_OK;
}

/* The view of the [batch, r, c] x at batch entries [i, i + ni), rows [r0, r0 + nr) and
 * columns [c0, c0 + nc). */
static struct tensor sub3(const struct tensor *x, int64_t i, int64_t ni, int64_t r0, int64_t nr,
			  int64_t c0, int64_t nc)
{
	struct tensor v = *x;
	v.offset += (size_t)(i * x->strides[0] + r0 * x->strides[1] + c0 * x->strides[2]);
	v.shape[0] = ni;
	v.shape[1] = nr;
	v.shape[2] = nc;
	return v;
}

/* The pieces of a product: groups of nb batch entries, slices of mb rows, nc columns
 * and kb of the inner dim, each operand's copy within BF16_PIECE elements. */
struct bf16_pieces {
	int64_t nb, mb, nc, kb;
};

static struct bf16_pieces bf16_pieces_of(int64_t batch, int64_t m, int64_t n, int64_t k)
{
	int64_t most = m * k > k * n ? m * k : k * n;
	if (most <= BF16_PIECE) { /* whole products, as many a piece as fit */
		int64_t nb = BF16_PIECE / (most > 0 ? most : 1);
		return (struct bf16_pieces){ nb < batch ? nb : batch, m, n, k };
	}
	int64_t kb = k < BF16_PIECE_K ? k : BF16_PIECE_K, w = BF16_PIECE / kb;
	return (struct bf16_pieces){ 1, m < w ? m : w, n < w ? n : w, kb };
}

/* f32 C: A and B converted a piece at a time into scratch, then BLIS. */
static int gemm_bf16_portable(struct tensor *c, const struct tensor *a, const struct tensor *b,
			      double alpha, double beta)
{
	int64_t batch = c->shape[0], m = c->shape[1], n = c->shape[2], k = a->shape[2];
	struct bf16_pieces p = bf16_pieces_of(batch, m, n, k);
	size_t na = (size_t)(p.nb * p.mb * p.kb), nbb = (size_t)(p.nb * p.kb * p.nc);
	float *w = tensor_host_malloc((na + nbb) * sizeof(float));
	if (!w)
		return tensor_error(TENSOR_ERR_NOMEM,
				    "gemm: no memory for f32 copies of bf16 operands (%zu bytes)",
				    (na + nbb) * sizeof(float));
	struct tensor_storage sa = { .data = w, .device = TENSOR_CPU };
	struct tensor_storage sb = { .data = w + na, .device = TENSOR_CPU };
	int rc = TENSOR_OK;
	for (int64_t i = 0; i < batch && rc == TENSOR_OK; i += p.nb) {
		int64_t ni = batch - i < p.nb ? batch - i : p.nb;
		for (int64_t pc = 0; pc < k && rc == TENSOR_OK; pc += p.kb) {
			int64_t kk = k - pc < p.kb ? k - pc : p.kb;
			for (int64_t jc = 0; jc < n && rc == TENSOR_OK; jc += p.nc) {
				int64_t nn = n - jc < p.nc ? n - jc : p.nc;
				struct tensor fb, bv = sub3(b, i, ni, pc, kk, jc, nn);
				f32_copy(&fb, &sb, &bv, true, true);
				for (int64_t ic = 0; ic < m && rc == TENSOR_OK; ic += p.mb) {
					int64_t mm = m - ic < p.mb ? m - ic : p.mb;
					struct tensor fa, av = sub3(a, i, ni, ic, mm, pc, kk);
					struct tensor cv = sub3(c, i, ni, ic, mm, jc, nn);
					f32_copy(&fa, &sa, &av, true, true);
					rc = gemm_blas(&cv, &fa, &fb, alpha, pc == 0 ? beta : 1);
				}
			}
		}
	}
	free(w);
	return rc;
}

/* bf16 A and B, f32 or bf16 C, nothing empty. */
static int gemm_bf16(struct tensor *c, const struct tensor *a, const struct tensor *b, double alpha,
		     double beta)
{
	if (a->shape[2] == 0) {
		gemm_scale(c, beta);
		return TENSOR_OK;
	}
	int k = bf16_kernel_get();
	if (k != BF16_PORTABLE)
		return cpu_gemm_bf16(bf16_cpu_kernel(k), c, a, b, alpha, beta);
	if (c->dtype == TENSOR_F32)
		return gemm_bf16_portable(c, a, b, alpha, beta);
	/* a bf16 C: computed in f32, rounded once */
	struct cpu_gemm_f32 fc;
	int rc = cpu_gemm_f32_of(&fc, c, beta != 0, false);
	if (rc == TENSOR_OK)
		rc = gemm_bf16_portable(&fc.t, a, b, alpha, beta);
	if (rc == TENSOR_OK)
		rc = cpu_copy(c, &fc.t);
	tensor_storage_release(fc.st);
	return rc;
}

int cpu_gemm(struct tensor *c, const struct tensor *a, const struct tensor *b, double alpha,
	     double beta)
{
	int64_t batch = c->shape[0], m = c->shape[1], n = c->shape[2];
	if (tensor_matmul_in_bf16(a, b) && (c->dtype == TENSOR_F32 || c->dtype == TENSOR_BF16))
		return batch == 0 || m == 0 || n == 0 ? TENSOR_OK : gemm_bf16(c, a, b, alpha, beta);
	return gemm_blas(c, a, b, alpha, beta);
}

/* f32 or f64 operands, through BLIS. */
static int gemm_blas(struct tensor *c, const struct tensor *a, const struct tensor *b, double alpha,
		     double beta)
{
	int64_t batch = c->shape[0], m = c->shape[1], n = c->shape[2], k = a->shape[2];
	if ((c->dtype != TENSOR_F32 && c->dtype != TENSOR_F64) || a->dtype != c->dtype ||
	    b->dtype != c->dtype)
		return tensor_error(TENSOR_ERR_DTYPE,
				    "gemm: expected f32 or f64 (or bf16 and f32 inputs with an f32 "
				    "or bf16 result), got %s x %s -> %s",
				    tensor_dtype_name(a->dtype), tensor_dtype_name(b->dtype),
				    tensor_dtype_name(c->dtype));
	if (batch == 0 || m == 0 || n == 0)
		return TENSOR_OK;
	if (k == 0) {
		gemm_scale(c, beta);
		return TENSOR_OK;
	}
	struct gemm_mat ma = gemm_mat_of(a), mb = gemm_mat_of(b), mc = gemm_mat_of(c);
	if (!gemm_mat_fix(&ma, m, k) || !gemm_mat_fix(&mb, k, n) || !gemm_mat_fix(&mc, m, n))
		return tensor_error(
		    TENSOR_ERR_ARG,
		    "gemm: a matrix of [%lld,%lld] x [%lld,%lld] has no unit stride", (long long)m,
		    (long long)k, (long long)k, (long long)n);
	int nt = cpu_num_threads();
	int64_t work = m * n * k;
	bool per_thread = nt > 1 && batch > 1 && mc.sb != 0 &&
			  (work <= CPU_GEMM_TINY || (work <= CPU_GEMM_SMALL && batch >= nt));
	if (per_thread) {
#pragma omp parallel num_threads(nt)
		{
			rntm_t rntm;
			gemm_rntm(&rntm, m, n, k, &ma, &mb, 1);
#pragma omp for schedule(static)
			for (int64_t i = 0; i < batch; i++)
				gemm_one(c->dtype, i, m, n, k, alpha, beta, &ma, &mb, &mc, &rntm);
		}
	} else {
		/* A lone tiny product costs less than waking BLIS's threads. */
		rntm_t rntm;
		gemm_rntm(&rntm, m, n, k, &ma, &mb, work <= CPU_GEMM_MINI ? 1 : 0);
		for (int64_t i = 0; i < batch; i++)
			gemm_one(c->dtype, i, m, n, k, alpha, beta, &ma, &mb, &mc, &rntm);
	}
	return TENSOR_OK;
}
