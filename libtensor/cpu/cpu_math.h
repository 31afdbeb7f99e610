/* Float exp and erfc written with arithmetic and selects only, so the hot
 * elementwise loops (softmax, the logistic family, GELU and their
 * derivatives) vectorize instead of calling libm once per element.
 *
 * exp_f32: within about 1 ulp. erfc_f: the Chebyshev fit of Numerical Recipes (fractional error
 * below 1.2e-7 for every x), so it keeps its relative precision in the tail
 * that x Phi(x) needs for x << 0. */
#ifndef CFORMER_CPU_MATH_H
#define CFORMER_CPU_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define CPU_MATH static inline __attribute__((always_inline))

/* The loops that use these functions are compute-bound and, built for
 * baseline SSE2, scalarise the float-to-int steps of exp: on x86-64 with gcc
 * such a loop is also built for AVX2+FMA and AVX-512, and the widest the CPU
 * runs is picked at load time. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__gnu_linux__)
#define CPU_WIDE_CLONES \
	__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_WIDE_CLONES
#endif

CPU_MATH int32_t f32_bits(float f)
{
	int32_t i;
	memcpy(&i, &f, sizeof i);
	return i;
}

CPU_MATH float f32_from_bits(int32_t i)
{
	float f;
	memcpy(&f, &i, sizeof f);
	return f;
}

/* c ? a : b through an integer mask: gcc will not if-convert float selects
 * under the default -ftrapping-math, and then leaves the loop scalar. */
CPU_MATH float f32_select(bool c, float a, float b)
{
	int32_t m = -(int32_t)c;
	return f32_from_bits((f32_bits(a) & m) | (f32_bits(b) & ~m));
}

/* exp for f32 within about 1 ulp, branch-free so that `omp simd` loops
 * vectorise it (Cephes' polynomial on x - n ln2; 2^n applied as two
 * factors so that results near overflow and in the subnormal range are
 * right). exp(-inf) = 0, exp(inf) = inf, NaN stays NaN. */
CPU_MATH float exp_f32(float x)
{
	bool above = x > -104.0f; /* false for NaN */
	float xc = f32_select(above, x, -104.0f);
	xc = f32_select(xc < 89.0f, xc, 89.0f);
	float t = xc * 1.44269504088896341f;
	float half = f32_from_bits(f32_bits(0.5f) | (f32_bits(t) & INT32_MIN));
	int32_t n = (int32_t)(t + half); /* rounded half away from zero */
	float fn = (float)n;
	float r = xc - fn * 0.693359375f + fn * 2.12194440e-4f;
	float p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * r * r + r + 1.0f;
	int32_t n1 = n / 2;
	float y =
	    p * f32_from_bits((n1 + 127) * (1 << 23)) * f32_from_bits((n - n1 + 127) * (1 << 23));
	return f32_select(x != x, x, f32_select(above, y, 0.0f));
}

/* erfc(x) = t exp(-x^2 + poly(t)), t = 1 / (1 + |x| / 2), for x >= 0;
 * 2 - erfc(-x) below. */
CPU_MATH float erfc_f(float x)
{
	float z = fabsf(x);
	float t = 1.0f / (1.0f + 0.5f * z);
	float p = 0.17087277f;
	p = p * t - 0.82215223f;
	p = p * t + 1.48851587f;
	p = p * t - 1.13520398f;
	p = p * t + 0.27886807f;
	p = p * t - 0.18628806f;
	p = p * t + 0.09678418f;
	p = p * t + 0.37409196f;
	p = p * t + 1.00002368f;
	p = p * t - 1.26551223f;
	float e = t * exp_f32(p - z * z);
	return f32_select(x < 0, 2.0f - e, e);
}

/* The logistic 1 / (1 + e^-x): 0 for x << 0 (e^-x = inf), never NaN. */
CPU_MATH float sigmoid_f(float x)
{
	return 1.0f / (1.0f + exp_f32(-x));
}

#define CPU_SQRT_1_2 0.70710678118654752440f
#define CPU_INV_SQRT_2PI 0.39894228040143267794f
#define CPU_SQRT_2_OVER_PI 0.79788456080286535588f
#define CPU_GELU_TANH_C 0.044715f

/* x Phi(x) through erfc, which keeps its precision in the negative tail. */
CPU_MATH float gelu_f(float x)
{
	return 0.5f * x * erfc_f(-x * CPU_SQRT_1_2);
}

/* gelu'(x) = Phi(x) + x phi(x). */
CPU_MATH float gelu_grad_f(float x)
{
	return 0.5f * erfc_f(-x * CPU_SQRT_1_2) + x * CPU_INV_SQRT_2PI * exp_f32(-0.5f * x * x);
}

/* 0.5 x (1 + tanh(u)) written as x sigmoid(2u), which does not cancel for x << 0. */
CPU_MATH float gelu_tanh_f(float x)
{
	return x * sigmoid_f(2.0f * CPU_SQRT_2_OVER_PI * (x + CPU_GELU_TANH_C * x * x * x));
}

/* d/dx x s(2u) = s + 2 x s (1 - s) u', u' = c (1 + 3 k x^2). */
CPU_MATH float gelu_tanh_grad_f(float x)
{
	float s = sigmoid_f(2.0f * CPU_SQRT_2_OVER_PI * (x + CPU_GELU_TANH_C * x * x * x));
	float du = CPU_SQRT_2_OVER_PI * (1.0f + 3.0f * CPU_GELU_TANH_C * x * x);
	return s + 2.0f * x * s * (1.0f - s) * du;
}

/* silu'(x) = s (1 + x (1 - s)). */
CPU_MATH float silu_grad_f(float x)
{
	float s = sigmoid_f(x);
	return s * (1.0f + x * (1.0f - s));
}

#endif
