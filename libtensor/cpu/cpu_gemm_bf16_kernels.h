/* The bf16 GEMM kernel sets AVX512-BF16 and AMX (the frame: cpu_gemm_bf16.h), written on
 * x86 intrinsics and compiled twice: on the CPU's own in cpu_gemm_bf16_x86.c
 * (bf16_avx512_impl, bf16_amx_impl), and on their C emulation (cpu_x86_emu.h) in
 * cpu_gemm_bf16_emu.c (bf16_avx512_emulated_impl, bf16_amx_emulated_impl), so that the
 * same packing, micro-kernels and C updates are tested on any CPU. The includer defines
 * BF16_TARGET and AMX_TARGET (function attributes), AVX512_IMPL and AMX_IMPL (the names
 * of the two kernel sets) and BF16_PAIRS(x) (32-bit lanes seen as bf16 pairs), and
 * provides the intrinsics.
 *
 * AVX512-BF16: vdpbf16ps, a dot product of bf16 pairs accumulated in f32, 64 flops an
 * instruction. A is packed into panels of MR rows (for each pair p: MR 32-bit pairs,
 * broadcast one at a time), B into panels of NR columns (for each pair p: NR columns x 2
 * bf16, two zmm); an odd k is padded with a zero and edge panels with zero rows or
 * columns. An MR x NR register tile (24 zmm) accumulates over the pairs. A pair step
 * reads 176 bytes for 24 vdpbf16ps, which L2 sustains: KC 256 to 1024 and MC 96 to 384
 * measured within 3% of each other on Zen 4.
 *
 * AMX: tdpbf16ps multiplies a 16 x 32 bf16 A tile by a 32 x 16 B tile (16 pairs of rows)
 * into a 16 x 16 f32 tile, 16,384 flops an instruction. The micro-kernel holds a 32 x 32
 * C block in four tiles and takes two A and two B tiles a step of 32 k
 * (AMX_TILE_KERNEL). B is packed as for AVX512-BF16 (NR = 32: a B tile is half a panel's
 * row, 128 bytes apart); A into 16 x 16-word tiles of rows of pairs; k is padded to
 * whole steps. The tile palette is fixed (palette 1: 8 tiles of 16 rows x 64 bytes),
 * never read from CPUID leaves a hypervisor may hide, and loaded by each thread; Linux
 * gives the tile state only to a process that asked (arch_prctl at detection).
 *
 * The packing reads f32 sources too (rounded to bf16, to nearest even), for a caller
 * that multiplies f32 activations by bf16 weights. Both instructions treat bf16 denormal
 * inputs as zero and flush denormal results. */
#ifndef CFORMER_CPU_GEMM_BF16_KERNELS_H
#define CFORMER_CPU_GEMM_BF16_KERNELS_H

#include <stdint.h>
#include <string.h>

#include "cpu_gemm_bf16.h"

enum {
	MR = 12,   /* tile rows: 12 x 2 accumulators + 2 B vectors + 1 broadcast of 32 zmm */
	NR = 32,   /* tile columns: two zmm of f32 */
	KC = 512,  /* k of an A block (even): a KC x NR B panel is 32 KiB */
	MC = 192,  /* rows of an A block: MC x KC bf16 is 192 KiB, in L2 */
	NC = 1024, /* columns of a packed B block */
};

/* ---- operands -------------------------------------------------------------- */

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
		bf16_pack_pairs_any(x, rows, width, lanes, out, ld);
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

/* ---- the AVX512-BF16 micro-kernel and the C update ------------------------- */

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
		__m512bh b0 = BF16_PAIRS(_mm512_loadu_si512(b));
		__m512bh b1 = BF16_PAIRS(_mm512_loadu_si512(b + 16));
#pragma GCC unroll 12
		for (int i = 0; i < MR; i++) {
			__m512bh ai = BF16_PAIRS(_mm512_set1_epi32((int)a[i]));
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

const struct bf16_impl AVX512_IMPL = {
	MR, NR, 2, KC, MC, NC, pack_b_panel, pack_a_panel, kernel_12x32, NULL, NULL,
};

/* ---- AMX --------------------------------------------------------------------- */

/* The A panel of rows [0, mr) (mr <= AMX_MR) and k [0, kc) in AMX tiles (the order in
 * cpu_gemm_bf16.h): a row-major A copied 64 bytes a row, else each 16 x 16 block of
 * pairs packed as for AVX512-BF16 (pairs by rows) and transposed. */
BF16_TARGET static void pack_a_amx(const struct bmat *a, int64_t mr, int64_t kc, uint32_t *out)
{
	for (int64_t s = 0; s < ceil_div(kc, AMX_KSTEP); s++) {
		int64_t k0 = s * AMX_KSTEP, ks = kc - k0 < AMX_KSTEP ? kc - k0 : AMX_KSTEP;
		for (int h = 0; h < 2; h++) {
			uint32_t *tile = out + (s * 2 + h) * 256;
			int64_t rows = mr - 16 * h < 0 ? 0 : mr - 16 * h < 16 ? mr - 16 * h : 16;
			__m512i r[16];
			if (a->cs == 1) {
#pragma GCC unroll 16
				for (int i = 0; i < 16; i++)
					r[i] = i < rows ? load_bf16x32(bmat_at(a, 16 * h + i, k0),
								       a->dt, mask_first(ks))
							: _mm512_setzero_si512();
			} else {
				uint32_t pairs[16 * 16] = { 0 };
				struct bmat t = bmat_t(a); /* ks x rows: pairs down its rows */
				t.p = bmat_at(a, 16 * h, k0);
				if (rows > 0)
					pack_pairs(&t, ks, rows, 16, pairs, 16);
#pragma GCC unroll 16
				for (int p = 0; p < 16; p++)
					r[p] = _mm512_loadu_si512(pairs + 16 * p);
				transpose16(r);
			}
#pragma GCC unroll 16
			for (int i = 0; i < 16; i++)
				_mm512_storeu_si512(tile + 16 * i, r[i]);
		}
	}
}

/* Palette 1, all eight tiles 16 rows x 64 bytes. Static: gcc 12 drops the stores that
 * fill a config on the stack before ldtilecfg reads it. */
static const struct {
	uint8_t palette, start_row, reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
} __attribute__((aligned(64))) amx_config = {
	1, 0, { 0 }, { 64, 64, 64, 64, 64, 64, 64, 64 }, { 16, 16, 16, 16, 16, 16, 16, 16 },
};

AMX_TARGET static void amx_begin(void)
{
	_tile_loadconfig(&amx_config);
}

AMX_TARGET static void amx_end(void)
{
	_tile_release();
}

/* Where the AMX micro-kernel's 32 x 32 f32 block comes from and goes (row strides in
 * bytes): loaded from `from` when load, else zeroed; stored to `to`. By default both are
 * the tile buffer t (stride 128), loaded when the k-slice adds to it; a full block of an
 * f32 C with alpha 1 and beta 0 (or beta 1 in one k-slice) goes to C itself (and starts
 * from it for beta 1), sparing the pass over t; to_c says so. */
struct amx_block {
	const char *from;
	char *to;
	int64_t from_stride, to_stride;
	bool load, to_c;
};

static inline struct amx_block amx_block_of(float *t, bool add, const struct tile_out *o)
{
	struct amx_block k = { (const char *)t, (char *)t, 128, 128, add, false };
	k.to_c = o && o->mr == AMX_MR && o->nr == AMX_NR && o->c.dt == TENSOR_F32 &&
		 o->alpha == 1 && (o->beta == 0 || (o->beta == 1 && !add));
	if (k.to_c) {
		k.to = o->c.p;
		k.to_stride = o->c.rs * 4;
		if (o->beta == 1) {
			k.from = k.to;
			k.from_stride = k.to_stride;
			k.load = true;
		}
	}
	return k;
}

/* The AMX micro-kernel: C tiles 0-3 (rows 0-15 and 16-31 by columns 0-15 and 16-31 of
 * the block, struct amx_block), A tiles 4-5 and B tiles 6-7 (columns 0-15 and 16-31 of
 * the B panel, 128 bytes a pair), a step of 16 pairs at a time; then C's rows from t
 * when o is set and the block did not go to C itself. */
AMX_TARGET static void kernel_amx(int64_t kp, const uint32_t *a, const uint32_t *b, float *t,
				  bool add, const struct tile_out *o)
{
	struct amx_block k = amx_block_of(t, add, o);
	const char *pa = (const char *)a, *pb = (const char *)b;
	__asm__ volatile("" ::: "memory"); /* the tile loads read what was written before */
	if (k.load) {
		_tile_loadd(0, k.from, k.from_stride);
		_tile_loadd(1, k.from + 64, k.from_stride);
		_tile_loadd(2, k.from + 16 * k.from_stride, k.from_stride);
		_tile_loadd(3, k.from + 16 * k.from_stride + 64, k.from_stride);
	} else {
		_tile_zero(0);
		_tile_zero(1);
		_tile_zero(2);
		_tile_zero(3);
	}
	for (int64_t s = 0; s < kp / 16; s++) {
		_tile_loadd(4, pa + s * 2048, 64);
		_tile_loadd(5, pa + s * 2048 + 1024, 64);
		_tile_loadd(6, pb + s * 2048, 128);
		_tile_loadd(7, pb + s * 2048 + 64, 128);
		_tile_dpbf16ps(0, 4, 6);
		_tile_dpbf16ps(1, 4, 7);
		_tile_dpbf16ps(2, 5, 6);
		_tile_dpbf16ps(3, 5, 7);
	}
	_tile_stored(0, k.to, k.to_stride);
	_tile_stored(1, k.to + 64, k.to_stride);
	_tile_stored(2, k.to + 16 * k.to_stride, k.to_stride);
	_tile_stored(3, k.to + 16 * k.to_stride + 64, k.to_stride);
	for (int64_t i = 0; o && !k.to_c && i < o->mr; i++) {
		c_store_half(o, i, 0, _mm512_loadu_ps(t + i * AMX_NR));
		c_store_half(o, i, 1, _mm512_loadu_ps(t + i * AMX_NR + 16));
	}
}

const struct bf16_impl AMX_IMPL = {
	AMX_MR,	      AMX_NR,	  AMX_KSTEP,  512,	 192,	  1024,
	pack_b_panel, pack_a_amx, kernel_amx, amx_begin, amx_end,
};

#endif
