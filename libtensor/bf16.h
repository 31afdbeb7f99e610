/* bfloat16 scalars: the top half of an IEEE f32 (sign, 8-bit exponent, 7-bit
 * mantissa) held as a uint16_t. Internal to cformer (the CPU kernels, the
 * checkpoint reader and the tests); tensor_cast is the public conversion.
 *
 * Rules:
 * - bf16 -> f32 and bf16 -> f64 are exact (a 16-bit shift).
 * - f32 -> bf16 rounds to nearest, ties to even, on the bit pattern: finite
 *   values at or above 0x1.ffp127 (the largest bf16 plus half an ulp) become
 *   +-Inf, f32 denormals round to bf16 denormals or to +-0 (the two formats
 *   share the exponent range, so no flush), +-0 and +-Inf are exact.
 * - NaN stays NaN: the sign and the top 6 payload bits are kept and the quiet
 *   bit is set (a signalling NaN whose payload lies in the low 16 bits would
 *   otherwise truncate to Inf).
 * - f64 -> bf16 is correctly rounded (one rounding, to nearest even): the
 *   double is first rounded to f32 with round-to-odd (truncate, then set the
 *   last bit when inexact), which keeps 16 more bits than bf16 needs, so the
 *   second rounding cannot land on a false tie. A plain (float) cast first
 *   would round twice (1 + 2^-8 + 2^-40 would go to 1 instead of 1 + 2^-7).
 *
 * The same functions serve the CUDA kernels (host and device functions under nvcc), so
 * both devices convert bit for bit alike.
 */
#ifndef CFORMER_BF16_H
#define CFORMER_BF16_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define BF16_FN static inline __host__ __device__
#else
#define BF16_FN static inline
#endif

BF16_FN uint32_t bf16_f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

/* Round the f32 bit pattern u to bf16 (NaN handled by the caller). */
BF16_FN uint16_t bf16_round_bits(uint32_t u)
{
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

BF16_FN uint16_t bf16_from_f32(float f)
{
	uint32_t u = bf16_f32_bits(f);
	uint16_t nan = (uint16_t)((u >> 16) | 0x0040u), r = bf16_round_bits(u);
	return (u & 0x7fffffffu) > 0x7f800000u ? nan : r; /* a select: loops vectorise */
}

BF16_FN float bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

BF16_FN double bf16_to_f64(uint16_t h)
{
	return (double)bf16_to_f32(h);
}

BF16_FN uint16_t bf16_from_f64(double d)
{
	if (isnan(d)) {
		uint64_t v;
		memcpy(&v, &d, sizeof v);
		return (uint16_t)(((v >> 48) & 0x8000u) | 0x7fc0u | ((v >> 45) & 0x3fu));
	}
	float f = (float)d; /* round to nearest; +-Inf on overflow */
	uint32_t u = bf16_f32_bits(f);
	if ((double)f != d) { /* inexact: truncate toward zero, then make it odd */
		if (fabs((double)f) > fabs(d))
			u -= 1; /* one f32 step toward zero (magnitude > 0 here) */
		u |= 1u;
	}
	return bf16_round_bits(u);
}

#endif
