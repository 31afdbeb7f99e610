/* bf16 GEMM on AVX512-BF16: C_i = alpha A_i B_i + beta C_i with vdpbf16ps (a dot
 * product of bf16 pairs accumulated in f32, 64 flops an instruction).
 *
 * A and B are packed into bf16 k-pairs: B into panels of NR columns (for each pair p:
 * NR columns x 2 bf16, two zmm), A into panels of MR rows (for each pair p: MR 32-bit
 * pairs, broadcast one at a time); an odd k is padded with a zero and edge panels with
 * zero rows or columns. An MR x NR register tile (24 zmm) accumulates over the pairs.
 * Blocking: a thread packs B for the whole k and NC columns, then A by MC rows and KC
 * of k; while a B panel (KC x NR) stays in L1/L2 the kernel runs down the A block (MC x
 * KC, in L2). A pair step reads 176 bytes for 24 vdpbf16ps, which L2 sustains: KC 256
 * to 1024 and MC 96 to 384 measured within 3% of each other on Zen 4. For k > KC the
 * tiles accumulate in an f32 block buffer, so C (f32 or bf16) is written once, rounded
 * once. Threads take whole products of a batch, or split one product's rows (or
 * columns, when wider) into slices of their own.
 *
 * The packing reads f32 sources too (rounded to bf16, to nearest even), for a caller
 * that multiplies f32 activations by bf16 weights; the gemm slot passes bf16 only.
 * vdpbf16ps treats bf16 denormal inputs as zero and flushes denormal results. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../bf16.h"
#include "../mem.h"
#include "cpu_iter.h"
#include "cpu_kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>

#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

enum {
	MR = 12,   /* tile rows: 12 x 2 accumulators + 2 B vectors + 1 broadcast of 32 zmm */
	NR = 32,   /* tile columns: two zmm of f32 */
	KC = 512,  /* k of an A block (even): a KC x NR B panel is 32 KiB */
	MC = 192,  /* rows of an A block: MC x KC bf16 is 192 KiB, in L2 */
	NC = 1024, /* columns of a packed B block */
};

/* Calls of at most this many multiply-adds (batch m n k) run on one thread. */
#define BF16_GEMM_MINI ((int64_t)32 * 32 * 32)

/* ---- CPU support ----------------------------------------------------------- */

/* AVX512F/BW/VL and AVX512_BF16 in CPUID, and the OS saving the opmask and zmm state
 * (XCR0 bits 1, 2, 5, 6, 7). */
static bool detect_avx512bf16(void)
{
	unsigned a, b, c, d;
	if (__get_cpuid_max(0, NULL) < 7 || !__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))
		return false; /* no OSXSAVE */
	unsigned xlo, xhi;
	__asm__("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
	if ((xlo & 0xe6u) != 0xe6u)
		return false;
	__cpuid_count(7, 0, a, b, c, d);
	unsigned f_bw_vl = (1u << 16) | (1u << 30) | (1u << 31);
	if ((b & f_bw_vl) != f_bw_vl)
		return false;
	__cpuid_count(7, 1, a, b, c, d);
	return (a & (1u << 5)) != 0;
}

bool cpu_gemm_bf16_avx512_ok(void)
{
	static atomic_int known = -1;
	int v = atomic_load(&known);
	if (v < 0) {
		v = detect_avx512bf16();
		atomic_store(&known, v);
	}
	return v;
}

/* ---- operands -------------------------------------------------------------- */

/* One matrix: element (r, c) at p + (r rs + c cs) * es bytes, of dtype dt (bf16 or
 * f32 for A and B; f32 or bf16 for C). */
struct bmat {
	char *p;
	enum tensor_dtype dt;
	int64_t es, rs, cs;
};

static inline char *bmat_at(const struct bmat *x, int64_t r, int64_t c)
{
	return x->p + (r * x->rs + c * x->cs) * x->es;
}

/* Element (r, c) as bf16 bits; zero outside rows [0, rows). */
static inline uint16_t bmat_bf16(const struct bmat *x, int64_t r, int64_t c, int64_t rows)
{
	if (r >= rows)
		return 0;
	const char *q = bmat_at(x, r, c);
	if (x->dt == TENSOR_BF16) {
		uint16_t h;
		memcpy(&h, q, sizeof h);
		return h;
	}
	float f;
	memcpy(&f, q, sizeof f);
	return bf16_from_f32(f);
}

/* The bf16 pair (x[r][c], x[r+1][c]) of a matrix walked down its rows, low half first;
 * rows at or past `rows` read as zero. */
static inline uint32_t bmat_pair(const struct bmat *x, int64_t r, int64_t c, int64_t rows)
{
	return bmat_bf16(x, r, c, rows) | (uint32_t)bmat_bf16(x, r + 1, c, rows) << 16;
}

/* The transposed view of x (rows and columns swapped). */
static inline struct bmat bmat_t(const struct bmat *x)
{
	return (struct bmat){ x->p, x->dt, x->es, x->cs, x->rs };
}

/* f32 lanes rounded to bf16 (nearest even; NaN kept, quieted: bf16.h's rule), in the
 * low halves of 32-bit lanes. */
BF16_TARGET static inline __m512i round_bf16x16(__m512 x)
{
	__m512i u = _mm512_castps_si512(x);
	__m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
	__m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
	__m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
	return _mm512_mask_mov_epi32(_mm512_srli_epi32(r, 16),
				     _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), nan);
}

/* Up to 32 consecutive elements (mask) at q as bf16 (f32 rounded), zero elsewhere. */
BF16_TARGET static inline __m512i load_bf16x32(const char *q, enum tensor_dtype dt, __mmask32 mask)
{
	if (dt == TENSOR_BF16)
		return _mm512_maskz_loadu_epi16(mask, q);
	__m512i lo = round_bf16x16(_mm512_maskz_loadu_ps((__mmask16)mask, q));
	__m512i hi = round_bf16x16(_mm512_maskz_loadu_ps((__mmask16)(mask >> 16), q + 64));
	return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(lo)),
				  _mm512_cvtepi32_epi16(hi), 1);
}

static inline __mmask32 mask_first(int64_t n)
{
	return n >= 32 ? 0xffffffffu : (__mmask32)((1u << n) - 1);
}

/* ---- packing --------------------------------------------------------------- */

/* Interleave the bf16 of rows r0 and r1 (32 lanes each) as pairs: lanes 0-15 of each
 * into *lo, 16-31 into *hi (the two zmm of an NR panel's pair). */
BF16_TARGET static inline void interleave_pairs(__m512i r0, __m512i r1, __m512i *lo, __m512i *hi)
{
	static const uint16_t idx[64] = {
		0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
		8,  40, 9,  41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47,
		16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
		24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63,
	};
	*lo = _mm512_permutex2var_epi16(r0, _mm512_loadu_si512(idx), r1);
	*hi = _mm512_permutex2var_epi16(r0, _mm512_loadu_si512(idx + 32), r1);
}

/* Pairs of `width` (<= 32) consecutive elements along x's unit-stride columns: for each
 * pair p of rows [0, rows), the 32-bit pairs (x[2p][j], x[2p+1][j]) of j < width into
 * out[p * ld + j], zeros for j in [width, lanes). x->cs == 1. */
BF16_TARGET static void pack_pairs_rows(const struct bmat *x, int64_t rows, int64_t width,
					int lanes, uint32_t *out, int64_t ld)
{
	__mmask32 m = mask_first(width);
	__mmask16 st = (__mmask16)((1u << (lanes > 16 ? lanes - 16 : lanes)) - 1);
	for (int64_t p = 0; 2 * p < rows; p++) {
		__m512i r0 = load_bf16x32(bmat_at(x, 2 * p, 0), x->dt, m);
		__m512i r1 = 2 * p + 1 < rows ? load_bf16x32(bmat_at(x, 2 * p + 1, 0), x->dt, m)
					      : _mm512_setzero_si512();
		__m512i lo, hi;
		interleave_pairs(r0, r1, &lo, &hi);
		if (lanes > 16) {
			_mm512_storeu_si512(out + p * ld, lo);
			_mm512_mask_storeu_epi32(out + p * ld + 16, st, hi);
		} else {
			_mm512_mask_storeu_epi32(out + p * ld, st, lo);
		}
	}
}

/* The same for any strides: out[p * ld + j] = (x[2p][j], x[2p+1][j]) for j < lanes,
 * zeros past `width`. */
static void pack_pairs_any(const struct bmat *x, int64_t rows, int64_t width, int lanes,
			   uint32_t *out, int64_t ld)
{
	for (int64_t j = 0; j < lanes; j++)
		for (int64_t p = 0; 2 * p < rows; p++)
			out[p * ld + j] = j < width ? bmat_pair(x, 2 * p, j, rows) : 0;
}

/* Transpose 16 x 16 32-bit words in place: r[i] lane j becomes r[j] lane i. Unrolled
 * so that the arrays live in registers. */
BF16_TARGET static inline __attribute__((always_inline)) void transpose16(__m512i r[16])
{
	__m512i t[16], u[16];
#pragma GCC unroll 16
	for (int i = 0; i < 16; i += 2) {
		t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
		t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
	}
#pragma GCC unroll 16
	for (int i = 0; i < 16; i += 4) /* u[i + c] lane L: column 4L + c of rows i..i+3 */
#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			u[i + 2 * h] = _mm512_unpacklo_epi64(t[i + h], t[i + h + 2]);
			u[i + 2 * h + 1] = _mm512_unpackhi_epi64(t[i + h], t[i + h + 2]);
		}
#pragma GCC unroll 4
	for (int c = 0; c < 4; c++) {
		__m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88);
		__m512i v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xdd);
		__m512i w0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88);
		__m512i w1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xdd);
		r[c] = _mm512_shuffle_i32x4(v0, w0, 0x88);
		r[8 + c] = _mm512_shuffle_i32x4(v0, w0, 0xdd);
		r[4 + c] = _mm512_shuffle_i32x4(v1, w1, 0x88);
		r[12 + c] = _mm512_shuffle_i32x4(v1, w1, 0xdd);
	}
}

/* The same when a pair's two elements are adjacent (x->rs == 1): 16 pairs of a column
 * loaded as 16 words (f32 ones rounded as loaded), 16 x 16 blocks of words transposed; a
 * last odd row is read alone. */
BF16_TARGET static void pack_pairs_words(const struct bmat *x, int64_t rows, int64_t width,
					 int lanes, uint32_t *out, int64_t ld)
{
	int64_t np = rows / 2;
	for (int64_t j0 = 0; j0 < lanes; j0 += 16) {
		__mmask16 st = (__mmask16)((1u << (lanes - j0 < 16 ? lanes - j0 : 16)) - 1);
		for (int64_t p0 = 0; p0 < np; p0 += 16) {
			__mmask32 m = mask_first(2 * (np - p0)); /* 2 lanes a pair */
			__m512i r[16];
#pragma GCC unroll 16
			for (int j = 0; j < 16; j++)
				r[j] = j0 + j < width
					   ? load_bf16x32(bmat_at(x, 2 * p0, j0 + j), x->dt, m)
					   : _mm512_setzero_si512();
			transpose16(r);
#pragma GCC unroll 16
			for (int p = 0; p < 16; p++)
				if (p0 + p < np)
					_mm512_mask_storeu_epi32(out + (p0 + p) * ld + j0, st,
								 r[p]);
		}
	}
	for (int64_t j = 0; rows % 2 && j < lanes; j++)
		out[np * ld + j] = j < width ? bmat_pair(x, rows - 1, j, rows) : 0;
}

/* Pairs for `lanes` lanes from the (up to lanes) columns of x: the fast path of unit
 * column strides, of pairs that are words, else any strides. */
BF16_TARGET static void pack_pairs(const struct bmat *x, int64_t rows, int64_t width, int lanes,
				   uint32_t *out, int64_t ld)
{
	if (x->cs == 1 || width == 1)
		pack_pairs_rows(&(struct bmat){ x->p, x->dt, x->es, x->rs, 1 }, rows, width, lanes,
				out, ld);
	else if (x->rs == 1)
		pack_pairs_words(x, rows, width, lanes, out, ld);
	else
		pack_pairs_any(x, rows, width, lanes, out, ld);
}

/* B panel of columns [0, nr) of b (k x nr, nr <= NR): for each pair p of k, NR 32-bit
 * pairs, into out (ceil(k/2) * NR words). */
BF16_TARGET static void pack_b_panel(const struct bmat *b, int64_t k, int64_t nr, uint32_t *out)
{
	pack_pairs(b, k, nr, NR, out, NR);
}

/* A panel of rows [0, mr) and k-slice [0, kc) of a (mr <= MR): for each pair p, MR
 * 32-bit pairs (a[i][2p], a[i][2p+1]), into out (ceil(kc/2) * MR words). */
BF16_TARGET static void pack_a_panel(const struct bmat *a, int64_t mr, int64_t kc, uint32_t *out)
{
	struct bmat t = bmat_t(a); /* kc x mr: pairs run down its rows */
	pack_pairs(&t, kc, mr, MR, out, MR);
}

/* ---- the micro-kernel and the C update ------------------------------------- */

/* Where a finished tile goes: C's mr x nr corner at c (c->cs == 1) = alpha tile + beta C,
 * C read only when beta != 0. */
struct tile_out {
	struct bmat c;
	int64_t mr, nr;
	float alpha, beta;
};

/* A row of up to 16 elements of C (mask) as f32, and back (bf16 rounded once). */
BF16_TARGET static inline __m512 c_load16(const char *q, enum tensor_dtype dt, __mmask16 m)
{
	if (dt == TENSOR_F32)
		return _mm512_maskz_loadu_ps(m, q);
	__m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, q));
	return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
}

BF16_TARGET static inline void c_store16(char *q, enum tensor_dtype dt, __mmask16 m, __m512 v)
{
	if (dt == TENSOR_F32)
		_mm512_mask_storeu_ps(q, m, v);
	else
		_mm256_mask_storeu_epi16(q, m, _mm512_cvtepi32_epi16(round_bf16x16(v)));
}

/* Columns [16h, 16h + 16) of row i of a tile to C. */
BF16_TARGET static inline void c_store_half(const struct tile_out *o, int64_t i, int h, __m512 v)
{
	if (16 * h >= o->nr)
		return;
	__mmask16 m = (__mmask16)(mask_first(o->nr) >> (16 * h));
	char *q = bmat_at(&o->c, i, 16 * h);
	__m512 x = o->alpha == 1 ? v : _mm512_mul_ps(_mm512_set1_ps(o->alpha), v);
	if (o->beta != 0)
		x = _mm512_fmadd_ps(_mm512_set1_ps(o->beta), c_load16(q, o->c.dt, m), x);
	c_store16(q, o->c.dt, m, x);
}

/* The product of kp pairs of an A panel (kp x MR words) and a B panel (kp x NR words),
 * plus the f32 tile t when add; to C by o, or into t when o is NULL. */
BF16_TARGET static void kernel_12x32(int64_t kp, const uint32_t *a, const uint32_t *b, float *t,
				     bool add, const struct tile_out *o)
{
	__m512 c[MR][2];
#pragma GCC unroll 12
	for (int i = 0; i < MR; i++) {
		c[i][0] = c[i][1] = _mm512_setzero_ps();
		if (o && i < o->mr) { /* C's lines arrive while the tile is computed */
			_mm_prefetch(bmat_at(&o->c, i, 0), _MM_HINT_T0);
			_mm_prefetch(bmat_at(&o->c, i, NR - 1), _MM_HINT_T0);
		}
	}
	for (int64_t p = 0; p < kp; p++, a += MR, b += NR) {
		__m512bh b0 = (__m512bh)_mm512_loadu_si512(b);
		__m512bh b1 = (__m512bh)_mm512_loadu_si512(b + 16);
#pragma GCC unroll 12
		for (int i = 0; i < MR; i++) {
			__m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[i]);
			c[i][0] = _mm512_dpbf16_ps(c[i][0], ai, b0);
			c[i][1] = _mm512_dpbf16_ps(c[i][1], ai, b1);
		}
	}
#pragma GCC unroll 12
	for (int i = 0; i < MR; i++) {
		if (add) {
			c[i][0] = _mm512_add_ps(c[i][0], _mm512_loadu_ps(t + i * NR));
			c[i][1] = _mm512_add_ps(c[i][1], _mm512_loadu_ps(t + i * NR + 16));
		}
		if (o && i < o->mr) {
			c_store_half(o, i, 0, c[i][0]);
			c_store_half(o, i, 1, c[i][1]);
		} else if (!o) {
			_mm512_storeu_ps(t + i * NR, c[i][0]);
			_mm512_storeu_ps(t + i * NR + 16, c[i][1]);
		}
	}
}

/* The same update from the f32 tile t for C of any strides. */
static void tile_store_any(const float *t, const struct tile_out *o)
{
	for (int64_t i = 0; i < o->mr; i++)
		for (int64_t j = 0; j < o->nr; j++) {
			char *q = bmat_at(&o->c, i, j);
			float v = o->alpha * t[i * NR + j];
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
	uint32_t *a; /* an A block: MC/MR panels of KC/2 x MR pairs */
	uint32_t *b; /* a B block: NC/NR panels of ceil(k/2) x NR pairs */
	float *acc;  /* the block's tiles (k > KC) or one tile */
};

static int64_t ceil_div(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

static size_t align64(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

/* Buffer sizes for products of at most m x n x k. */
static void ws_layout(int64_t m, int64_t n, int64_t k, size_t sz[3])
{
	int64_t mcr = ceil_div(m < MC ? m : MC, MR) * MR, ncr = ceil_div(n < NC ? n : NC, NR) * NR;
	int64_t kp = ceil_div(k, 2), kcp = kp < KC / 2 ? kp : KC / 2;
	sz[0] = align64((size_t)(mcr * kcp) * 4);
	sz[1] = align64((size_t)(ncr * kp) * 4);
	sz[2] = align64((size_t)(k > KC ? mcr * ncr : MR * NR) * 4);
}

/* The A block [ic, ic + mc) x [pc, pc + kc) into w->a, panel by panel. */
BF16_TARGET static void pack_a_block(const struct bf16_prod *g, int64_t ic, int64_t mc, int64_t pc,
				     int64_t kc, uint32_t *out)
{
	int64_t kp = ceil_div(kc, 2);
	for (int64_t ir = 0; ir < mc; ir += MR) {
		struct bmat a = g->a;
		a.p = bmat_at(&g->a, ic + ir, pc);
		pack_a_panel(&a, mc - ir < MR ? mc - ir : MR, kc, out + (ir / MR) * kp * MR);
	}
}

/* The products of the A block (mc x kc at ic, pc) and the packed B block (nc columns
 * at jc) into their tiles; at the last k-slice the tiles go to C. */
BF16_TARGET static void run_block(const struct bf16_prod *g, const struct bf16_ws *w, int64_t ic,
				  int64_t mc, int64_t jc, int64_t nc, int64_t pc, int64_t kc)
{
	int64_t kp = ceil_div(kc, 2), kpt = ceil_div(g->k, 2), mpan = ceil_div(mc, MR);
	bool blocked = g->k > KC, last = pc + kc == g->k;
	for (int64_t jr = 0; jr < nc; jr += NR) {
		const uint32_t *bp = w->b + (jr / NR) * kpt * NR + (pc / 2) * NR;
		for (int64_t ir = 0; ir < mc; ir += MR) {
			float *t =
			    blocked ? w->acc + ((jr / NR) * mpan + ir / MR) * MR * NR : w->acc;
			struct tile_out o = { g->c, mc - ir < MR ? mc - ir : MR,
					      nc - jr < NR ? nc - jr : NR, g->alpha, g->beta };
			o.c.p = bmat_at(&g->c, ic + ir, jc + jr);
			bool direct = last && o.c.cs == 1;
			kernel_12x32(kp, w->a + (ir / MR) * kp * MR, bp, t, pc > 0,
				     direct ? &o : NULL);
			if (last && !direct)
				tile_store_any(t, &o);
		}
	}
}

/* One product on this thread: B packed NC columns at a time for all of k, A by MC x KC
 * blocks. */
BF16_TARGET static void gemm_serial(const struct bf16_prod *g, const struct bf16_ws *w)
{
	int64_t kpt = ceil_div(g->k, 2);
	for (int64_t jc = 0; jc < g->n; jc += NC) {
		int64_t nc = g->n - jc < NC ? g->n - jc : NC;
		for (int64_t jr = 0; jr < nc; jr += NR) {
			struct bmat b = g->b;
			b.p = bmat_at(&g->b, 0, jc + jr);
			pack_b_panel(&b, g->k, nc - jr < NR ? nc - jr : NR,
				     w->b + (jr / NR) * kpt * NR);
		}
		for (int64_t ic = 0; ic < g->m; ic += MC) {
			int64_t mc = g->m - ic < MC ? g->m - ic : MC;
			for (int64_t pc = 0; pc < g->k; pc += KC) {
				int64_t kc = g->k - pc < KC ? g->k - pc : KC;
				pack_a_block(g, ic, mc, pc, kc, w->a);
				run_block(g, w, ic, mc, jc, nc, pc, kc);
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

static struct bf16_plan plan_threads(const struct tensor *c, int64_t k)
{
	int64_t batch = c->shape[0], m = c->shape[1], n = c->shape[2];
	struct bf16_plan p = { cpu_num_threads(), false, m >= n, 0 };
	if (batch * m * n * k <= BF16_GEMM_MINI || p.nt < 1)
		p.nt = 1;
	/* whole products when each thread gets a fair share and C's entries are distinct */
	p.by_batch = p.nt > 1 && c->strides[0] != 0 && batch >= p.nt &&
		     (batch % p.nt == 0 || batch >= 4 * p.nt);
	/* split the longer dim: the other operand, packed by every thread, is the smaller */
	int64_t len = p.split_m ? m : n, unit = p.split_m ? MR : NR;
	p.slice = p.by_batch ? len : ceil_div(ceil_div(len, p.nt), unit) * unit;
	return p;
}

/* Thread t's share of the plan. */
static void run_thread(const struct bf16_plan *p, int t, const struct bf16_ws *w, struct tensor *c,
		       const struct tensor *a, const struct tensor *b, float alpha, float beta)
{
	int64_t batch = c->shape[0], m = c->shape[1], n = c->shape[2];
	int64_t s0 = p->by_batch ? 0 : t * p->slice, len = p->split_m ? m : n;
	int64_t s1 = s0 + p->slice < len ? s0 + p->slice : len;
	if (s0 >= s1)
		return;
	for (int64_t i = p->by_batch ? t : 0; i < batch; i += p->by_batch ? p->nt : 1) {
		struct bf16_prod g = p->split_m ? prod_part(c, a, b, i, s0, s1, 0, n, alpha, beta)
						: prod_part(c, a, b, i, 0, m, s0, s1, alpha, beta);
		gemm_serial(&g, w);
	}
}

int cpu_gemm_bf16_avx512(struct tensor *c, const struct tensor *a, const struct tensor *b,
			 double alpha, double beta)
{
	int64_t m = c->shape[1], n = c->shape[2], k = a->shape[2];
	struct bf16_plan p = plan_threads(c, k);
	size_t sz[3];
	ws_layout(p.split_m ? p.slice : m, p.split_m ? n : p.slice, k, sz);
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
		run_thread(&p, t, &w, c, a, b, (float)alpha, (float)beta);
	}
	free(mem);
	return TENSOR_OK;
}

#else /* not x86-64 with GCC or Clang: the kernel is never chosen */

bool cpu_gemm_bf16_avx512_ok(void)
{
	return false;
}

int cpu_gemm_bf16_avx512(struct tensor *c, const struct tensor *a, const struct tensor *b,
			 double alpha, double beta)
{
	(void)c, (void)a, (void)b, (void)alpha, (void)beta;
	return tensor_error(TENSOR_ERR_UNSUPPORTED, "gemm: no AVX512-BF16 kernel in this build");
}

#endif
