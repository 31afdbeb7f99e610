/* The x86 intrinsics of the bf16 GEMM kernels (cpu_gemm_bf16_kernels.h), written in C, so
 * that the AVX512-BF16 and AMX kernels run, packing and all, on any CPU: the emulated twins
 * of cpu_gemm_bf16_emu.c, which `make check` tests everywhere against an f64 reference,
 * and where the CPU has the instructions, against the kernels themselves (test_bf16).
 *
 * Only what those kernels use, with the ISA reference's semantics: a register is a union
 * of its lanes, each operation a loop over them. Masked loads and stores touch only the lanes they select.
 * vdpbf16ps and tdpbf16ps read bf16 denormals as zero, add each product of a pair to the
 * f32 sum in turn (vdpbf16ps the odd element first, tdpbf16ps the even one), rounded to
 * nearest even, and flush denormal sums to zero. AMX's eight tiles (palette 1: 16 rows of
 * 64 bytes) are thread-local arrays. Include this header instead of <immintrin.h>, never
 * beside it. */
#ifndef CFORMER_CPU_X86_EMU_H
#define CFORMER_CPU_X86_EMU_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../bf16.h"

/* A 512-bit register's lanes, and a 256-bit one's. */
union emu_zmm {
	float f[16];
	uint32_t d[16];
	uint16_t w[32];
	uint64_t q[8];
};

union emu_ymm {
	uint32_t d[8];
	uint16_t w[16];
	uint64_t q[4];
};

typedef union emu_zmm __m512, __m512i, __m512bh;
typedef union emu_ymm __m256i;
typedef uint16_t __mmask16;
typedef uint32_t __mmask32;

#define _MM_HINT_T0 3
#define _CMP_UNORD_Q 3
/* The kernels' view of 32-bit lanes as bf16 pairs: a cast on the CPU, nothing here. */
#define BF16_PAIRS(x) (x)

/* ---- set, load, store ------------------------------------------------------ */

static inline __m512 _mm512_setzero_ps(void)
{
	return (union emu_zmm){ 0 };
}

static inline __m512i _mm512_setzero_si512(void)
{
	return (union emu_zmm){ 0 };
}

static inline __m512i _mm512_set1_epi32(int x)
{
	union emu_zmm v;
	for (int i = 0; i < 16; i++)
		v.d[i] = (uint32_t)x;
	return v;
}

static inline __m512 _mm512_set1_ps(float x)
{
	union emu_zmm v;
	for (int i = 0; i < 16; i++)
		v.f[i] = x;
	return v;
}

static inline __m512 _mm512_loadu_ps(const void *p)
{
	union emu_zmm v;
	memcpy(&v, p, sizeof v);
	return v;
}

static inline __m512i _mm512_loadu_si512(const void *p)
{
	union emu_zmm v;
	memcpy(&v, p, sizeof v);
	return v;
}

static inline void _mm512_storeu_ps(void *p, __m512 x)
{
	memcpy(p, &x, sizeof x);
}

static inline void _mm512_storeu_si512(void *p, __m512i x)
{
	memcpy(p, &x, sizeof x);
}

static inline __m512 _mm512_maskz_loadu_ps(__mmask16 k, const void *p)
{
	union emu_zmm v = { 0 };
	for (int i = 0; i < 16; i++)
		if (k >> i & 1)
			memcpy(&v.f[i], (const char *)p + 4 * i, 4);
	return v;
}

static inline __m512i _mm512_maskz_loadu_epi16(__mmask32 k, const void *p)
{
	union emu_zmm v = { 0 };
	for (int i = 0; i < 32; i++)
		if (k >> i & 1)
			memcpy(&v.w[i], (const char *)p + 2 * i, 2);
	return v;
}

static inline __m256i _mm256_maskz_loadu_epi16(__mmask16 k, const void *p)
{
	union emu_ymm v = { 0 };
	for (int i = 0; i < 16; i++)
		if (k >> i & 1)
			memcpy(&v.w[i], (const char *)p + 2 * i, 2);
	return v;
}

static inline void _mm512_mask_storeu_epi32(void *p, __mmask16 k, __m512i x)
{
	for (int i = 0; i < 16; i++)
		if (k >> i & 1)
			memcpy((char *)p + 4 * i, &x.d[i], 4);
}

static inline void _mm512_mask_storeu_ps(void *p, __mmask16 k, __m512 x)
{
	_mm512_mask_storeu_epi32(p, k, x);
}

static inline void _mm256_mask_storeu_epi16(void *p, __mmask16 k, __m256i x)
{
	for (int i = 0; i < 16; i++)
		if (k >> i & 1)
			memcpy((char *)p + 2 * i, &x.w[i], 2);
}

static inline void _mm_prefetch(const void *p, int hint)
{
	(void)p;
	(void)hint;
}

/* ---- integer and float arithmetic ----------------------------------------- */

static inline __m512i _mm512_add_epi32(__m512i a, __m512i b)
{
	for (int i = 0; i < 16; i++)
		a.d[i] += b.d[i];
	return a;
}

static inline __m512i _mm512_and_si512(__m512i a, __m512i b)
{
	for (int i = 0; i < 8; i++)
		a.q[i] &= b.q[i];
	return a;
}

static inline __m512i _mm512_or_si512(__m512i a, __m512i b)
{
	for (int i = 0; i < 8; i++)
		a.q[i] |= b.q[i];
	return a;
}

static inline __m512i _mm512_srli_epi32(__m512i a, unsigned n)
{
	for (int i = 0; i < 16; i++)
		a.d[i] = n > 31 ? 0 : a.d[i] >> n;
	return a;
}

static inline __m512i _mm512_slli_epi32(__m512i a, unsigned n)
{
	for (int i = 0; i < 16; i++)
		a.d[i] = n > 31 ? 0 : a.d[i] << n;
	return a;
}

static inline __m512 _mm512_add_ps(__m512 a, __m512 b)
{
	for (int i = 0; i < 16; i++)
		a.f[i] += b.f[i];
	return a;
}

static inline __m512 _mm512_mul_ps(__m512 a, __m512 b)
{
	for (int i = 0; i < 16; i++)
		a.f[i] *= b.f[i];
	return a;
}

static inline __m512 _mm512_fmadd_ps(__m512 a, __m512 b, __m512 c)
{
	for (int i = 0; i < 16; i++)
		a.f[i] = fmaf(a.f[i], b.f[i], c.f[i]);
	return a;
}

/* Only the predicate the kernels use: either lane unordered (NaN). */
static inline __mmask16 _mm512_cmp_ps_mask(__m512 a, __m512 b, int pred)
{
	(void)pred;
	__mmask16 k = 0;
	for (int i = 0; i < 16; i++)
		k |= (__mmask16)((isnan(a.f[i]) || isnan(b.f[i])) << i);
	return k;
}

static inline __m512i _mm512_mask_mov_epi32(__m512i src, __mmask16 k, __m512i a)
{
	for (int i = 0; i < 16; i++)
		if (k >> i & 1)
			src.d[i] = a.d[i];
	return src;
}

/* ---- casts and conversions -------------------------------------------------- */

static inline __m512i _mm512_castps_si512(__m512 x)
{
	return x;
}

static inline __m512 _mm512_castsi512_ps(__m512i x)
{
	return x;
}

/* The upper half is undefined in the ISA; zero here. */
static inline __m512i _mm512_castsi256_si512(__m256i x)
{
	union emu_zmm v = { 0 };
	memcpy(v.q, x.q, sizeof x.q);
	return v;
}

static inline __m512i _mm512_inserti64x4(__m512i a, __m256i b, int half)
{
	memcpy(&a.q[4 * (half & 1)], b.q, sizeof b.q);
	return a;
}

/* Each 32-bit lane truncated to its low 16 bits. */
static inline __m256i _mm512_cvtepi32_epi16(__m512i a)
{
	union emu_ymm r;
	for (int i = 0; i < 16; i++)
		r.w[i] = (uint16_t)a.d[i];
	return r;
}

static inline __m512i _mm512_cvtepu16_epi32(__m256i a)
{
	union emu_zmm r;
	for (int i = 0; i < 16; i++)
		r.d[i] = a.w[i];
	return r;
}

/* ---- permutes ---------------------------------------------------------------- */

/* Lane j: word idx[j] mod 64 of the 64 words of a then b. */
static inline __m512i _mm512_permutex2var_epi16(__m512i a, __m512i idx, __m512i b)
{
	union emu_zmm r;
	for (int j = 0; j < 32; j++) {
		unsigned i = idx.w[j] & 63;
		r.w[j] = i < 32 ? a.w[i] : b.w[i - 32];
	}
	return r;
}

/* Within each 128-bit lane: dwords (a0, b0, a1, b1), or (a2, b2, a3, b3) for hi. */
static inline __m512i emu_unpack_epi32(__m512i a, __m512i b, int hi)
{
	union emu_zmm r;
	for (int l = 0; l < 4; l++)
		for (int i = 0; i < 2; i++) {
			r.d[4 * l + 2 * i] = a.d[4 * l + 2 * hi + i];
			r.d[4 * l + 2 * i + 1] = b.d[4 * l + 2 * hi + i];
		}
	return r;
}

static inline __m512i _mm512_unpacklo_epi32(__m512i a, __m512i b)
{
	return emu_unpack_epi32(a, b, 0);
}

static inline __m512i _mm512_unpackhi_epi32(__m512i a, __m512i b)
{
	return emu_unpack_epi32(a, b, 1);
}

/* Within each 128-bit lane: qwords (a0, b0), or (a1, b1) for hi. */
static inline __m512i emu_unpack_epi64(__m512i a, __m512i b, int hi)
{
	union emu_zmm r;
	for (int l = 0; l < 4; l++) {
		r.q[2 * l] = a.q[2 * l + hi];
		r.q[2 * l + 1] = b.q[2 * l + hi];
	}
	return r;
}

static inline __m512i _mm512_unpacklo_epi64(__m512i a, __m512i b)
{
	return emu_unpack_epi64(a, b, 0);
}

static inline __m512i _mm512_unpackhi_epi64(__m512i a, __m512i b)
{
	return emu_unpack_epi64(a, b, 1);
}

/* 128-bit lanes: a[imm bits 0-1], a[bits 2-3], b[bits 4-5], b[bits 6-7]. */
static inline __m512i _mm512_shuffle_i32x4(__m512i a, __m512i b, int imm)
{
	union emu_zmm r;
	for (int l = 0; l < 4; l++) {
		const union emu_zmm *s = l < 2 ? &a : &b;
		int from = (imm >> (2 * l)) & 3;
		memcpy(&r.q[2 * l], &s->q[2 * from], 16);
	}
	return r;
}

/* ---- bf16 dot products --------------------------------------------------------- */

/* A bf16 as f32, a denormal as zero of its sign. */
static inline float emu_bf16_daz(uint16_t h)
{
	return (h & 0x7f80) == 0 ? (h & 0x8000 ? -0.0f : 0.0f) : bf16_to_f32(h);
}

/* acc + x y, rounded once; a denormal sum flushed to zero of its sign. */
static inline float emu_fma_ftz(float x, float y, float acc)
{
	float r = fmaf(x, y, acc);
	return fpclassify(r) == FP_SUBNORMAL ? copysignf(0, r) : r;
}

static inline __m512 _mm512_dpbf16_ps(__m512 src, __m512bh a, __m512bh b)
{
	for (int i = 0; i < 16; i++) {
		src.f[i] = emu_fma_ftz(emu_bf16_daz(a.w[2 * i + 1]), emu_bf16_daz(b.w[2 * i + 1]),
				       src.f[i]);
		src.f[i] =
		    emu_fma_ftz(emu_bf16_daz(a.w[2 * i]), emu_bf16_daz(b.w[2 * i]), src.f[i]);
	}
	return src;
}

/* ---- AMX tiles (palette 1) ------------------------------------------------------ */

struct emu_tile {
	unsigned char row[16][64];
};

extern _Thread_local struct emu_tile emu_tmm[8];

static inline void _tile_loadconfig(const void *config)
{
	(void)config; /* the kernels configure palette 1, all tiles 16 x 64 bytes */
}

static inline void _tile_release(void)
{
	memset(emu_tmm, 0, sizeof emu_tmm);
}

static inline void _tile_zero(int t)
{
	memset(&emu_tmm[t], 0, sizeof emu_tmm[t]);
}

static inline void _tile_loadd(int t, const void *p, int64_t stride)
{
	for (int r = 0; r < 16; r++)
		memcpy(emu_tmm[t].row[r], (const char *)p + r * stride, 64);
}

static inline void _tile_stored(int t, void *p, int64_t stride)
{
	for (int r = 0; r < 16; r++)
		memcpy((char *)p + r * stride, emu_tmm[t].row[r], 64);
}

/* C (16 x 16 f32) += A (16 rows x 16 pairs) B (16 pairs x 16 columns of pairs). */
static inline void _tile_dpbf16ps(int c, int a, int b)
{
	struct emu_tile *tc = &emu_tmm[c];
	const struct emu_tile *ta = &emu_tmm[a], *tb = &emu_tmm[b];
	for (int m = 0; m < 16; m++)
		for (int n = 0; n < 16; n++) {
			float acc;
			memcpy(&acc, tc->row[m] + 4 * n, sizeof acc);
			for (int p = 0; p < 16; p++)
				for (int h = 0; h < 2; h++) {
					uint16_t x, y;
					memcpy(&x, ta->row[m] + 4 * p + 2 * h, 2);
					memcpy(&y, tb->row[p] + 4 * n + 2 * h, 2);
					acc = emu_fma_ftz(emu_bf16_daz(x), emu_bf16_daz(y), acc);
				}
			memcpy(tc->row[m] + 4 * n, &acc, sizeof acc);
		}
}

#endif
