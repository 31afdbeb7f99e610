/* CPU dropout in one pass: y = x * (random_word(seed, first + i) >= ceil(p 2^32)) / (1 - p),
 * with random.h's Philox words (the mask CUDA draws). Each Philox block gives four elements
 * their words, and blocks run side by side: in portable C that the compiler vectorizes
 * (well with AVX-512), and with AVX2 intrinsics, where the compiler's version spends most
 * of its time packing 32-bit halves. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../random.h"
#include "cpu_kernels.h"
#include "cpu_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CPU_DROPOUT_AVX2 1
#endif

/* LANES elements a call (LANES / 4 Philox blocks), from an element index that is a multiple
 * of 16 (random_word's group of four blocks). */
enum { LANES = 64, BLOCKS = LANES / 4, DROPOUT_CHUNK = 1 << 16 };

/* How many of n elements from e come before the first multiple of 16 (taken one at a time). */
static inline int64_t head_len(uint64_t e, int64_t n)
{
	int64_t h = (int64_t)((16 - e % 16) % 16);
	return h < n ? h : n;
}

/* w[l] = random_word(seed, e + l) for l < LANES, e a multiple of 16. */
static inline __attribute__((always_inline)) void dropout_words(uint64_t seed, uint64_t e,
								uint32_t *w)
{
	uint32_t c0[BLOCKS], c1[BLOCKS], c2[BLOCKS], c3[BLOCKS];
	for (int l = 0; l < BLOCKS; l++) {
		uint64_t ctr = (e >> 2) + (uint64_t)l;
		c0[l] = (uint32_t)ctr;
		c1[l] = (uint32_t)(ctr >> 32);
		c2[l] = c3[l] = 0;
	}
	uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
	for (int r = 0; r < PHILOX_ROUNDS; r++) {
#pragma omp simd
		for (int l = 0; l < BLOCKS; l++)
			philox_round(&c0[l], &c1[l], &c2[l], &c3[l], k0, k1);
		k0 += PHILOX_KEY_STEP0;
		k1 += PHILOX_KEY_STEP1;
	}
	/* block l gives word v to element 16 (l / 4) + 4 v + l % 4 */
	for (int l = 0; l < BLOCKS; l++) {
		uint32_t *o = w + l / 4 * 16 + l % 4;
		o[0] = c0[l];
		o[4] = c1[l];
		o[8] = c2[l];
		o[12] = c3[l];
	}
}

#ifdef CPU_DROPOUT_AVX2
#define AVX2_INLINE __attribute__((target("avx2"), always_inline)) static inline

/* The round keys of a seed, broadcast to every lane. */
struct keys_avx2 {
	__m256i k0[PHILOX_ROUNDS], k1[PHILOX_ROUNDS];
};

AVX2_INLINE void keys_avx2(struct keys_avx2 *k, uint64_t seed)
{
	uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
	for (int r = 0; r < PHILOX_ROUNDS; r++) {
		k->k0[r] = _mm256_set1_epi32((int)k0);
		k->k1[r] = _mm256_set1_epi32((int)k1);
		k0 += PHILOX_KEY_STEP0;
		k1 += PHILOX_KEY_STEP1;
	}
}

/* One Philox round on four blocks, each 32-bit word in the low half of a 64-bit lane:
 * the two 32 x 32 -> 64 products are one vpmuludq each. The high halves carry
 * leftovers (a product's high word), harmless: vpmuludq reads only the low halves, and
 * the words are packed from them at the end. */
#define PHILOX_ROUND_AVX2(c0, c1, c2, c3, k0, k1)                                           \
	do {                                                                                \
		__m256i p0 = _mm256_mul_epu32(c0, m0), p2 = _mm256_mul_epu32(c2, m2);       \
		c0 = _mm256_xor_si256(_mm256_srli_epi64(p2, 32), _mm256_xor_si256(c1, k0)); \
		c1 = p2;                                                                    \
		c2 = _mm256_xor_si256(_mm256_srli_epi64(p0, 32), _mm256_xor_si256(c3, k1)); \
		c3 = p0;                                                                    \
	} while (0)

/* The low words of lo's and hi's four lanes: eight elements in order. */
AVX2_INLINE __m256i pack_avx2(__m256i lo, __m256i hi)
{
	const __m256i order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
	return _mm256_permutevar8x32_epi32(_mm256_blend_epi32(lo, _mm256_slli_epi64(hi, 32), 0xAA),
					   order);
}

/* Words of elements e to e + 31 (e a multiple of 16), in order, eight to a register:
 * eight blocks in two sets of four (two chains of rounds side by side; more spill on
 * AVX2's 16 registers). Word v of the block in lane j of a set is element 4 v + j. */
AVX2_INLINE void words32_avx2(const struct keys_avx2 *k, uint64_t e, __m256i w[4])
{
	const __m256i m0 = _mm256_set1_epi64x(0xD2511F53ll), m2 = _mm256_set1_epi64x(0xCD9E8D57ll);
	__m256i a0 =
	    _mm256_add_epi64(_mm256_set1_epi64x((int64_t)(e >> 2)), _mm256_setr_epi64x(0, 1, 2, 3));
	__m256i b0 = _mm256_add_epi64(a0, _mm256_set1_epi64x(4));
	__m256i a1 = _mm256_srli_epi64(a0, 32), b1 = _mm256_srli_epi64(b0, 32);
	__m256i a2 = _mm256_setzero_si256(), a3 = a2, b2 = a2, b3 = a2;
#pragma GCC unroll 10
	for (int r = 0; r < PHILOX_ROUNDS; r++) {
		PHILOX_ROUND_AVX2(a0, a1, a2, a3, k->k0[r], k->k1[r]);
		PHILOX_ROUND_AVX2(b0, b1, b2, b3, k->k0[r], k->k1[r]);
	}
	w[0] = pack_avx2(a0, a1);
	w[1] = pack_avx2(a2, a3);
	w[2] = pack_avx2(b0, b1);
	w[3] = pack_avx2(b2, b3);
}

/* All ones where word >= thresh (unsigned). */
AVX2_INLINE __m256i keep_avx2(__m256i w, __m256i thresh)
{
	return _mm256_cmpeq_epi32(_mm256_max_epu32(w, thresh), w);
}

/* The dropout of 32 elements from e, float and double: y may be x. */
AVX2_INLINE void drop32_float_avx2(float *y, const float *x, const __m256i *w, __m256i thresh,
				   __m256 scale)
{
	for (int j = 0; j < 4; j++) {
		__m256 f = _mm256_and_ps(_mm256_castsi256_ps(keep_avx2(w[j], thresh)), scale);
		_mm256_storeu_ps(y + 8 * j, _mm256_mul_ps(_mm256_loadu_ps(x + 8 * j), f));
	}
}

AVX2_INLINE void drop32_double_avx2(double *y, const double *x, const __m256i *w, __m256i thresh,
				    __m256d scale)
{
	for (int j = 0; j < 8; j++) {
		__m256i keep = keep_avx2(w[j / 2], thresh);
		__m128i half =
		    j % 2 ? _mm256_extracti128_si256(keep, 1) : _mm256_castsi256_si128(keep);
		__m256d f = _mm256_and_pd(_mm256_castsi256_pd(_mm256_cvtepi32_epi64(half)), scale);
		_mm256_storeu_pd(y + 4 * j, _mm256_mul_pd(_mm256_loadu_pd(x + 4 * j), f));
	}
}

/* y[i] = x[i] * (random_word(seed, e + i) >= thresh ? scale : 0) for i < n; y may be x.
 * Elements before the first multiple of 16 one at a time, then 32 at a time, the last
 * fewer than 32 from one more set of words. */
#define DEFINE_DROPOUT_AVX2(T, NAME, SET1)                                                        \
	__attribute__((target("avx2"))) static void dropout_##NAME(                               \
	    T *y, const T *x, int64_t n, uint64_t e, uint64_t seed, uint32_t thresh, T scale)     \
	{                                                                                         \
		int64_t s = head_len(e, n);                                                       \
		for (int64_t i = 0; i < s; i++)                                                   \
			y[i] = x[i] * (random_word(seed, e + (uint64_t)i) >= thresh ? scale : 0); \
		struct keys_avx2 k;                                                               \
		keys_avx2(&k, seed);                                                              \
		const __m256i vt = _mm256_set1_epi32((int)thresh);                                \
		__m256i w[4];                                                                     \
		for (; s + 32 <= n; s += 32) {                                                    \
			words32_avx2(&k, e + (uint64_t)s, w);                                     \
			drop32_##NAME(y + s, x + s, w, vt, SET1(scale));                          \
		}                                                                                 \
		if (s < n) {                                                                      \
			uint32_t u[32];                                                           \
			words32_avx2(&k, e + (uint64_t)s, w);                                     \
			memcpy(u, w, sizeof u);                                                   \
			for (int64_t i = s; i < n; i++)                                           \
				y[i] = x[i] * (u[i - s] >= thresh ? scale : 0);                   \
		}                                                                                 \
	}
DEFINE_DROPOUT_AVX2(float, float_avx2, _mm256_set1_ps)
DEFINE_DROPOUT_AVX2(double, double_avx2, _mm256_set1_pd)
#endif

/* y[i] = x[i] * (random_word(seed, e + i) >= thresh ? scale : 0) for i < n; y may be x.
 * Elements before the first multiple of 16 one at a time, then LANES at a time. */
#define DEFINE_DROPOUT(T, NAME, ATTR, WORDS)                                                      \
	ATTR static void NAME(T *y, const T *x, int64_t n, uint64_t e, uint64_t seed,             \
			      uint32_t thresh, T scale)                                           \
	{                                                                                         \
		int64_t h = head_len(e, n);                                                       \
		for (int64_t i = 0; i < h; i++)                                                   \
			y[i] = x[i] * (random_word(seed, e + (uint64_t)i) >= thresh ? scale : 0); \
		for (int64_t s = h; s < n; s += LANES) {                                          \
			uint32_t w[LANES];                                                        \
			WORDS(seed, e + (uint64_t)s, w);                                          \
			T f[LANES]; /* branch-free: the keep bit as a number */                   \
			for (int l = 0; l < LANES; l++)                                           \
				f[l] = w[l] >= thresh ? scale : (T)0;                             \
			if (n - s >= LANES) /* a fixed count: vectorized */                       \
				for (int l = 0; l < LANES; l++)                                   \
					y[s + l] = x[s + l] * f[l];                               \
			else                                                                      \
				for (int64_t l = 0; l < n - s; l++)                               \
					y[s + l] = x[s + l] * f[l];                               \
		}                                                                                 \
	}
DEFINE_DROPOUT(float, dropout_float, CPU_WIDE_CLONES, dropout_words)
DEFINE_DROPOUT(double, dropout_double, CPU_WIDE_CLONES, dropout_words)

struct cpu_dropout_plan cpu_dropout_plan(double p, uint64_t seed)
{
	/* a threshold of 2^32 keeps none: every word kept, times 0 */
	uint64_t t = random_dropout_threshold(p);
	struct cpu_dropout_plan pl = { .seed = seed,
				       .thresh = t > UINT32_MAX ? 0 : (uint32_t)t,
				       .scale = t > UINT32_MAX ? 0 : 1.0 / (1.0 - p) };
	/* AVX-512 runs the portable loop's widest clone; AVX2 the intrinsics.
	 * CFORMER_DROPOUT_KERNEL=portable or avx2 (where the CPU has AVX2)
	 * forces one, so that the tests run both on any x86 CPU. */
#ifdef CPU_DROPOUT_AVX2
	const char *force = getenv("CFORMER_DROPOUT_KERNEL");
	pl.avx2 = __builtin_cpu_supports("avx2") &&
		  (force ? strcmp(force, "avx2") == 0 : !__builtin_cpu_supports("avx512f"));
#endif
	return pl;
}

void cpu_dropout_span(const struct cpu_dropout_plan *pl, enum tensor_dtype dt, void *y,
		      const void *x, int64_t n, uint64_t e)
{
	bool f32 = dt == TENSOR_F32;
#ifdef CPU_DROPOUT_AVX2
	if (pl->avx2) {
		if (f32)
			dropout_float_avx2(y, x, n, e, pl->seed, pl->thresh, (float)pl->scale);
		else
			dropout_double_avx2(y, x, n, e, pl->seed, pl->thresh, pl->scale);
		return;
	}
#endif
	if (f32)
		dropout_float(y, x, n, e, pl->seed, pl->thresh, (float)pl->scale);
	else
		dropout_double(y, x, n, e, pl->seed, pl->thresh, pl->scale);
}

int cpu_dropout(struct tensor *out, const struct tensor *x, double p, uint64_t seed, uint64_t first)
{
	int64_t n = tensor_numel(out), chunks = (n + DROPOUT_CHUNK - 1) / DROPOUT_CHUNK;
	struct cpu_dropout_plan pl = cpu_dropout_plan(p, seed);
	size_t es = tensor_dtype_size(out->dtype);
	char *po = tensor_data(out);
	const char *px = tensor_data(x);
#pragma omp parallel for num_threads(cpu_num_threads()) if (chunks > 1)
	for (int64_t c = 0; c < chunks; c++) {
		int64_t s = c * DROPOUT_CHUNK, m = n - s < DROPOUT_CHUNK ? n - s : DROPOUT_CHUNK;
		cpu_dropout_span(&pl, out->dtype, po + (size_t)s * es, px + (size_t)s * es, m,
				 first + (uint64_t)s);
	}
	return TENSOR_OK;
}
