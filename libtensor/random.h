/* Counter-based random numbers (Philox-4x32-10, Salmon et al. 2011): the
 * value of element i is a pure function of (seed, i), so every backend and
 * every thread count draws the same numbers. Header-only so that CPU and CUDA
 * kernels share one definition. Internal to libtensor. */
#ifndef CFORMER_RANDOM_H
#define CFORMER_RANDOM_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define RANDOM_FN static inline __host__ __device__
#else
#define RANDOM_FN static inline
#endif

struct philox4 {
	uint32_t v[4];
};

RANDOM_FN uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi)
{
	uint64_t p = (uint64_t)a * b;
	*hi = (uint32_t)(p >> 32);
	return (uint32_t)p;
}

#define PHILOX_ROUNDS 10
#define PHILOX_KEY_STEP0 0x9E3779B9u
#define PHILOX_KEY_STEP1 0xBB67AE85u

/* One round on the counter words c[0..3] under key (k0, k1). */
RANDOM_FN void philox_round(uint32_t *c0, uint32_t *c1, uint32_t *c2, uint32_t *c3, uint32_t k0,
			    uint32_t k1)
{
	uint32_t hi0, hi1;
	uint32_t lo0 = philox_mulhilo(0xD2511F53u, *c0, &hi0);
	uint32_t lo1 = philox_mulhilo(0xCD9E8D57u, *c2, &hi1);
	*c0 = hi1 ^ *c1 ^ k0;
	*c1 = lo1;
	*c2 = hi0 ^ *c3 ^ k1;
	*c3 = lo0;
}

/* Four 32-bit words for counter (index, 0) under key seed. */
RANDOM_FN struct philox4 philox4x32(uint64_t seed, uint64_t index)
{
	uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32), c2 = 0, c3 = 0;
	uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
	for (int r = 0; r < PHILOX_ROUNDS; r++) {
		philox_round(&c0, &c1, &c2, &c3, k0, k1);
		k0 += PHILOX_KEY_STEP0;
		k1 += PHILOX_KEY_STEP1;
	}
	struct philox4 out = { { c0, c1, c2, c3 } };
	return out;
}

/* The 53 random bits of a uniform draw from two words. */
RANDOM_FN uint64_t philox_bits53(uint32_t hi, uint32_t lo)
{
	return (((uint64_t)hi << 21) ^ (lo >> 11)) & ((1ull << 53) - 1);
}

/* Uniform double in [0, 1) with 53 random bits from two words. */
RANDOM_FN double philox_unit(uint32_t hi, uint32_t lo)
{
	return (double)philox_bits53(hi, lo) * (1.0 / 9007199254740992.0);
}

/* Element i of a uniform [0,1) stream. */
RANDOM_FN double random_uniform(uint64_t seed, uint64_t i)
{
	struct philox4 r = philox4x32(seed, i);
	return philox_unit(r.v[0], r.v[1]);
}

/* Element i of a stream of 32-bit words, all four words of each Philox block used: in
 * every 16 elements, counters 4b to 4b + 3 (b = i / 16) give word w to elements 4w to
 * 4w + 3 (element i: word (i / 4) % 4 of counter 4b + i % 4), the order in which SIMD
 * code holds them. Dropout's draws: four elements a block where a uniform double takes
 * one. */
RANDOM_FN uint32_t random_word(uint64_t seed, uint64_t i)
{
	struct philox4 r = philox4x32(seed, (i >> 4 << 2) | (i & 3));
	return r.v[(i >> 2) & 3];
}

/* Dropout keeps element i where random_word(seed, i) >= ceil(p 2^32), this value (2^32,
 * keeping none, for p above 1 - 2^-32): a keep probability within 2^-32 of 1 - p. */
RANDOM_FN uint64_t random_dropout_threshold(double p)
{
	return (uint64_t)ceil(p * 4294967296.0);
}

/* Element i of a standard normal stream (Box-Muller on the four words). */
RANDOM_FN double random_normal(uint64_t seed, uint64_t i)
{
	struct philox4 r = philox4x32(seed, i);
	double u1 = 1.0 - philox_unit(r.v[0], r.v[1]); /* (0, 1] */
	double u2 = philox_unit(r.v[2], r.v[3]);
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
