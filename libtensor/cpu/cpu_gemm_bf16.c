/* bf16 GEMM: the driver of the packed kernels (blocking and threads), their portable
 * pieces and the entry points.
 *
 * Blocking: a thread packs B for the whole k and nc columns, then A by mc rows and kc of
 * k; while a B panel (kc x NR) stays in L1/L2 the micro-kernel runs down the A block (mc
 * x kc, in L2). For k > kc the tiles accumulate in an f32 block buffer, so C (f32 or bf16)
 * is written once, rounded once. Threads take whole products of a batch, or split one
 * product's rows (or columns, when wider) into slices of their own. The kernel sets
 * themselves are in cpu_gemm_bf16_kernels.h. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "../mem.h"
#include "cpu_gemm_bf16.h"
#include "cpu_iter.h"
#include "cpu_kernels.h"

/* Calls of at most this many multiply-adds (batch m n k) run on one thread. */
#define BF16_GEMM_MINI ((int64_t)32 * 32 * 32)

/* ---- portable pieces ------------------------------------------------------- */

void bf16_pack_pairs_any(const struct bmat *x, int64_t rows, int64_t width, int lanes,
			 uint32_t *out, int64_t ld)
{
	for (int64_t j = 0; j < lanes; j++)
		for (int64_t p = 0; 2 * p < rows; p++)
			out[p * ld + j] = j < width ? bmat_pair(x, 2 * p, j, rows) : 0;
}

void bf16_tile_store_any(const float *t, int nr, const struct tile_out *o)
{
	for (int64_t i = 0; i < o->mr; i++)
		for (int64_t j = 0; j < o->nr; j++) {
			char *q = bmat_at(&o->c, i, j);
			float v = o->alpha * t[i * nr + j];
			if (o->beta != 0)
				v += o->beta * (float)cpu_load(q, o->c.dt);
			if (o->c.dt == TENSOR_F32)
				memcpy(q, &v, sizeof v);
			else
				*(uint16_t *)q = bf16_from_f32(v);
		}
}

/* ---- blocking -------------------------------------------------------------- */

/* One product C = alpha A B + beta C of m x k by k x n, and a thread's buffers. */
struct bf16_prod {
	struct bmat a, b, c;
	int64_t m, n, k;
	float alpha, beta;
};

struct bf16_ws {
	uint32_t *a; /* an A block: mc/MR panels of kc/2 x MR pairs */
	uint32_t *b; /* a B block: nc/NR panels of k/2 x NR pairs (k padded to whole steps) */
	float *acc;  /* the block's tiles (k > kc) or one tile */
};

static size_t align64(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

/* The pairs of k padded to whole steps. */
static int64_t padded_pairs(const struct bf16_impl *s, int64_t k)
{
	return ceil_div(k, s->kstep) * s->kstep / 2;
}

/* Buffer sizes for products of at most m x n x k. */
static void ws_layout(const struct bf16_impl *s, int64_t m, int64_t n, int64_t k, size_t sz[3])
{
	int64_t mcr = ceil_div(m < s->mc ? m : s->mc, s->mr) * s->mr;
	int64_t ncr = ceil_div(n < s->nc ? n : s->nc, s->nr) * s->nr;
	int64_t kp = padded_pairs(s, k), kcp = kp < s->kc / 2 ? kp : s->kc / 2;
	sz[0] = align64((size_t)(mcr * kcp) * 4);
	sz[1] = align64((size_t)(ncr * kp) * 4);
	sz[2] = align64((size_t)(k > s->kc ? mcr * ncr : s->mr * s->nr) * 4);
}

/* The A block [ic, ic + mc) x [pc, pc + kc) into out, panel by panel. */
static void pack_a_block(const struct bf16_impl *s, const struct bf16_prod *g, int64_t ic,
			 int64_t mc, int64_t pc, int64_t kc, uint32_t *out)
{
	int64_t kp = padded_pairs(s, kc);
	for (int64_t ir = 0; ir < mc; ir += s->mr) {
		struct bmat a = g->a;
		a.p = bmat_at(&g->a, ic + ir, pc);
		s->pack_a(&a, mc - ir < s->mr ? mc - ir : s->mr, kc,
			  out + (ir / s->mr) * kp * s->mr);
	}
}

/* B's columns [jc, jc + nc) for all of k into out, panel by panel, padding rows zeroed. */
static void pack_b_block(const struct bf16_impl *s, const struct bf16_prod *g, int64_t jc,
			 int64_t nc, uint32_t *out)
{
	int64_t kpt = padded_pairs(s, g->k), kp = ceil_div(g->k, 2);
	for (int64_t jr = 0; jr < nc; jr += s->nr) {
		struct bmat b = g->b;
		b.p = bmat_at(&g->b, 0, jc + jr);
		uint32_t *panel = out + (jr / s->nr) * kpt * s->nr;
		s->pack_b(&b, g->k, nc - jr < s->nr ? nc - jr : s->nr, panel);
		memset(panel + kp * s->nr, 0, (size_t)((kpt - kp) * s->nr) * 4);
	}
}

/* The products of the A block (mc x kc at ic, pc) and the packed B block (nc columns
 * at jc) into their tiles; at the last k-slice the tiles go to C. */
static void run_block(const struct bf16_impl *s, const struct bf16_prod *g, const struct bf16_ws *w,
		      int64_t ic, int64_t mc, int64_t jc, int64_t nc, int64_t pc, int64_t kc)
{
	int64_t kp = padded_pairs(s, kc), kpt = padded_pairs(s, g->k), mpan = ceil_div(mc, s->mr);
	bool blocked = g->k > s->kc, last = pc + kc == g->k;
	for (int64_t jr = 0; jr < nc; jr += s->nr) {
		const uint32_t *bp = w->b + (jr / s->nr) * kpt * s->nr + (pc / 2) * s->nr;
		for (int64_t ir = 0; ir < mc; ir += s->mr) {
			float *t = blocked
				       ? w->acc + ((jr / s->nr) * mpan + ir / s->mr) * s->mr * s->nr
				       : w->acc;
			struct tile_out o = { g->c, mc - ir < s->mr ? mc - ir : s->mr,
					      nc - jr < s->nr ? nc - jr : s->nr, g->alpha,
					      g->beta };
			o.c.p = bmat_at(&g->c, ic + ir, jc + jr);
			bool direct = last && o.c.cs == 1;
			s->kernel(kp, w->a + (ir / s->mr) * kp * s->mr, bp, t, pc > 0,
				  direct ? &o : NULL);
			if (last && !direct)
				bf16_tile_store_any(t, s->nr, &o);
		}
	}
}

/* One product on this thread. */
static void gemm_serial(const struct bf16_impl *s, const struct bf16_prod *g,
			const struct bf16_ws *w)
{
	for (int64_t jc = 0; jc < g->n; jc += s->nc) {
		int64_t nc = g->n - jc < s->nc ? g->n - jc : s->nc;
		pack_b_block(s, g, jc, nc, w->b);
		for (int64_t ic = 0; ic < g->m; ic += s->mc) {
			int64_t mc = g->m - ic < s->mc ? g->m - ic : s->mc;
			for (int64_t pc = 0; pc < g->k; pc += s->kc) {
				int64_t kc = g->k - pc < s->kc ? g->k - pc : s->kc;
				pack_a_block(s, g, ic, mc, pc, kc, w->a);
				run_block(s, g, w, ic, mc, jc, nc, pc, kc);
			}
		}
	}
}

/* ---- threads --------------------------------------------------------------- */

static struct bmat bmat_of(const struct tensor *t)
{
	return (struct bmat){ cpu_ptr(t), t->dtype, (int64_t)tensor_dtype_size(t->dtype),
			      t->strides[1], t->strides[2] };
}

/* Batch entry i of the product, limited to rows [r0, r1) and columns [c0, c1). */
static struct bf16_prod prod_part(const struct tensor *c, const struct tensor *a,
				  const struct tensor *b, int64_t i, int64_t r0, int64_t r1,
				  int64_t c0, int64_t c1, float alpha, float beta)
{
	struct bf16_prod g = { .a = bmat_of(a), .b = bmat_of(b), .c = bmat_of(c) };
	g.m = r1 - r0;
	g.n = c1 - c0;
	g.k = a->shape[2];
	g.alpha = alpha;
	g.beta = beta;
	g.a.p += i * a->strides[0] * g.a.es;
	g.b.p += i * b->strides[0] * g.b.es;
	g.c.p += i * c->strides[0] * g.c.es;
	g.a.p = bmat_at(&g.a, r0, 0);
	g.b.p = bmat_at(&g.b, 0, c0);
	g.c.p = bmat_at(&g.c, r0, c0);
	return g;
}

/* How the threads share the work: whole batch entries (by_batch), or slices of each
 * product, `slice` rows (split_m) or columns wide, one a thread. */
struct bf16_plan {
	int nt;
	bool by_batch, split_m;
	int64_t slice;
};

static struct bf16_plan plan_threads(const struct bf16_impl *s, const struct tensor *c, int64_t k)
{
	int64_t batch = c->shape[0], m = c->shape[1], n = c->shape[2];
	struct bf16_plan p = { cpu_num_threads(), false, m >= n, 0 };
	if (batch * m * n * k <= BF16_GEMM_MINI || p.nt < 1)
		p.nt = 1;
	/* whole products when each thread gets a fair share and C's entries are distinct */
	p.by_batch = p.nt > 1 && c->strides[0] != 0 && batch >= p.nt &&
		     (batch % p.nt == 0 || batch >= 4 * p.nt);
	/* split the longer dim: the other operand, packed by every thread, is the smaller */
	int64_t len = p.split_m ? m : n, unit = p.split_m ? s->mr : s->nr;
	p.slice = p.by_batch ? len : ceil_div(ceil_div(len, p.nt), unit) * unit;
	return p;
}

/* Thread t's share of the plan. */
static void run_thread(const struct bf16_impl *s, const struct bf16_plan *p, int t,
		       const struct bf16_ws *w, struct tensor *c, const struct tensor *a,
		       const struct tensor *b, float alpha, float beta)
{
	int64_t batch = c->shape[0], m = c->shape[1], n = c->shape[2];
	int64_t s0 = p->by_batch ? 0 : t * p->slice, len = p->split_m ? m : n;
	int64_t s1 = s0 + p->slice < len ? s0 + p->slice : len;
	if (s0 >= s1)
		return;
	if (s->begin)
		s->begin();
	for (int64_t i = p->by_batch ? t : 0; i < batch; i += p->by_batch ? p->nt : 1) {
		struct bf16_prod g = p->split_m ? prod_part(c, a, b, i, s0, s1, 0, n, alpha, beta)
						: prod_part(c, a, b, i, 0, m, s0, s1, alpha, beta);
		gemm_serial(s, &g, w);
	}
	if (s->end)
		s->end();
}

int bf16_gemm_run(const struct bf16_impl *s, struct tensor *c, const struct tensor *a,
		  const struct tensor *b, double alpha, double beta)
{
	int64_t m = c->shape[1], n = c->shape[2], k = a->shape[2];
	struct bf16_plan p = plan_threads(s, c, k);
	size_t sz[3];
	ws_layout(s, p.split_m ? p.slice : m, p.split_m ? n : p.slice, k, sz);
	size_t per = sz[0] + sz[1] + sz[2];
	char *mem = tensor_host_malloc(per * (size_t)p.nt + 64);
	if (!mem)
		return tensor_error(TENSOR_ERR_NOMEM,
				    "gemm: no memory for bf16 packing buffers of [%lld,%lld] x "
				    "[%lld,%lld] (%d threads)",
				    (long long)m, (long long)k, (long long)k, (long long)n, p.nt);
	char *base = (char *)align64((uintptr_t)mem);
#pragma omp parallel for num_threads(p.nt) schedule(static) if (p.nt > 1)
	for (int t = 0; t < p.nt; t++) {
		char *q = base + per * (size_t)t;
		struct bf16_ws w = { (uint32_t *)q, (uint32_t *)(q + sz[0]),
				     (float *)(q + sz[0] + sz[1]) };
		run_thread(s, &p, t, &w, c, a, b, (float)alpha, (float)beta);
	}
	free(mem);
	return TENSOR_OK;
}

/* ---- entry points ------------------------------------------------------------ */

bool cpu_gemm_bf16_ok(enum cpu_bf16_kernel k)
{
	static atomic_int known[2] = { -1, -1 };
	if (k == CPU_BF16_AVX512_EMULATED || k == CPU_BF16_AMX_EMULATED)
		return true;
	int v = atomic_load(&known[k]);
	if (v < 0) {
		v = k == CPU_BF16_AVX512 ? bf16_detect_avx512bf16() : bf16_detect_amx();
		atomic_store(&known[k], v);
	}
	return v;
}

/* tensor_bf16_gemm_blocks' kc, mc and nc (0: the kernel set's own) */
static int64_t block_override[3];

int tensor_bf16_gemm_blocks(int64_t kc, int64_t mc, int64_t nc)
{
	if (kc < 0 || mc < 0 || nc < 0)
		return tensor_error(TENSOR_ERR_ARG,
				    "bf16 gemm blocks: kc %lld, mc %lld, nc %lld: expected sizes "
				    ">= 0 (0: the kernel's own)",
				    (long long)kc, (long long)mc, (long long)nc);
	block_override[0] = kc, block_override[1] = mc, block_override[2] = nc;
	return TENSOR_OK;
}

/* An overriding block x rounded up to a multiple of unit; def when there is none. */
static int64_t block_of(int64_t x, int64_t unit, int64_t def)
{
	return x ? ceil_div(x, unit) * unit : def;
}

/* Kernel set k with the blocks tensor_bf16_gemm_blocks overrides. */
static struct bf16_impl impl_of(enum cpu_bf16_kernel k)
{
	static const struct bf16_impl *const sets[4] = { &bf16_avx512_impl, &bf16_amx_impl,
							 &bf16_avx512_emulated_impl,
							 &bf16_amx_emulated_impl };
	struct bf16_impl s = *sets[k];
	s.kc = block_of(block_override[0], s.kstep, s.kc);
	s.mc = block_of(block_override[1], s.mr, s.mc);
	s.nc = block_of(block_override[2], s.nr, s.nc);
	return s;
}

int cpu_gemm_bf16(enum cpu_bf16_kernel k, struct tensor *c, const struct tensor *a,
		  const struct tensor *b, double alpha, double beta)
{
	if (!cpu_gemm_bf16_ok(k))
		return tensor_error(TENSOR_ERR_UNSUPPORTED,
				    "gemm: the %s bf16 kernel does not run on this CPU",
				    k == CPU_BF16_AVX512 ? "AVX512-BF16" : "AMX");
	struct bf16_impl s = impl_of(k);
	if (c->dtype == TENSOR_F32 || c->strides[0] != 0 || c->shape[0] == 1)
		return bf16_gemm_run(&s, c, a, b, alpha, beta);
	/* a bf16 C that sums the batch's products: in f32, rounded once at the end */
	struct cpu_gemm_f32 fc;
	int rc = cpu_gemm_f32_of(&fc, c, beta != 0, false);
	if (rc == TENSOR_OK)
		rc = bf16_gemm_run(&s, &fc.t, a, b, alpha, beta);
	if (rc == TENSOR_OK)
		rc = cpu_copy(c, &fc.t);
	tensor_storage_release(fc.st);
	return rc;
}

/* ---- one product on the calling thread ---------------------------------------- */

size_t cpu_gemm_bf16_serial_ws(enum cpu_bf16_kernel k, int64_t m, int64_t n, int64_t kk)
{
	struct bf16_impl s = impl_of(k);
	size_t sz[3];
	ws_layout(&s, m, n, kk, sz);
	return sz[0] + sz[1] + sz[2];
}

static struct bmat bmat_f32(struct cpu_mat x)
{
	return (struct bmat){ x.p, TENSOR_F32, (int64_t)sizeof(float), x.rs, x.cs };
}

void cpu_gemm_bf16_serial(enum cpu_bf16_kernel k, int64_t m, int64_t n, int64_t kk, double alpha,
			  struct cpu_mat a, struct cpu_mat b, double beta, struct cpu_mat c,
			  void *ws)
{
	struct bf16_impl s = impl_of(k);
	size_t sz[3];
	ws_layout(&s, m, n, kk, sz);
	char *q = ws;
	struct bf16_ws w = { (uint32_t *)q, (uint32_t *)(q + sz[0]), (float *)(q + sz[0] + sz[1]) };
	struct bf16_prod g = { bmat_f32(a), bmat_f32(b), bmat_f32(c),  m,
			       n,	    kk,		 (float)alpha, (float)beta };
	if (s.begin)
		s.begin();
	gemm_serial(&s, &g, &w);
	if (s.end)
		s.end();
}
