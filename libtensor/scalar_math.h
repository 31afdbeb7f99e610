/* The scalar math of the elementwise kernels, one definition for the CPU and the CUDA
 * backend (host and device functions under nvcc), so both devices compute the same
 * function the same way.
 *
 * f32: exp and erfc written with arithmetic and selects only, so the CPU's hot loops
 * (softmax, the logistic family, GELU and their derivatives) vectorize instead of calling
 * libm once per element. exp_f32: within about 1 ulp. erfc_f: t exp(-z^2) Q(t) with our own
 * polynomial fit Q (relative error below 2.5e-7; in the far tail the rounding of z^2
 * dominates, 4e-6 at z = 8.5), so it keeps the relative precision in the tail that
 * x Phi(x) needs for x << 0, down to FLT_MIN (erfc(z) for z > 9.3 and GELU below x = -13.2
 * are 0, not subnormal). f64: the same functions through libm, which keeps full
 * precision. */
#ifndef CFORMER_SCALAR_MATH_H
#define CFORMER_SCALAR_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SCALAR_FN static __forceinline__ __host__ __device__
#else
#define SCALAR_FN static inline __attribute__((always_inline))
#endif

#define SCALAR_SQRT_1_2 0.70710678118654752440
#define SCALAR_INV_SQRT_2PI 0.39894228040143267794
#define SCALAR_SQRT_2_OVER_PI 0.79788456080286535588
#define SCALAR_GELU_TANH_C 0.044715

/* ---- f32 ----------------------------------------------------------------- */

SCALAR_FN int32_t f32_bits(float f)
{
	int32_t i;
	memcpy(&i, &f, sizeof i);
	return i;
}

SCALAR_FN float f32_from_bits(int32_t i)
{
	float f;
	memcpy(&f, &i, sizeof f);
	return f;
}

/* c ? a : b through an integer mask: gcc will not if-convert float selects
 * under the default -ftrapping-math, and then leaves the loop scalar. */
SCALAR_FN float f32_select(bool c, float a, float b)
{
	int32_t m = -(int32_t)c;
	return f32_from_bits((f32_bits(a) & m) | (f32_bits(b) & ~m));
}

/* exp(x - fn ln 2) for the integer fn nearest x / ln 2: ln 2 in two parts (Cody and Waite)
 * and Cephes' polynomial on the reduced argument. */
SCALAR_FN float exp_reduced(float x, float fn)
{
	float r = x - fn * 0.693359375f + fn * 2.12194440e-4f;
	float p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	return p * r * r + r + 1.0f;
}

/* exp for f32 within about 1 ulp, branch-free so that `omp simd` loops
 * vectorise it (Cephes' polynomial on x - n ln2; 2^n applied as two
 * factors so that results near overflow and in the subnormal range are
 * right). exp(-inf) = 0, exp(inf) = inf, NaN stays NaN. */
SCALAR_FN float exp_f32(float x)
{
	bool above = x > -104.0f; /* false for NaN */
	float xc = f32_select(above, x, -104.0f);
	xc = f32_select(xc < 89.0f, xc, 89.0f);
	float t = xc * 1.44269504088896341f;
	float half = f32_from_bits(f32_bits(0.5f) | (f32_bits(t) & INT32_MIN));
	int32_t n = (int32_t)(t + half); /* rounded half away from zero */
	float fn = (float)n;
	float p = exp_reduced(xc, fn);
	int32_t n1 = n / 2;
	float y =
	    p * f32_from_bits((n1 + 127) * (1 << 23)) * f32_from_bits((n - n1 + 127) * (1 << 23));
	return f32_select(x != x, x, f32_select(above, y, 0.0f));
}

/* exp for x <= 0 where a result below FLT_MIN may be 0: the fused attention's softmax (its
 * probabilities only feed products) and the exp(-z^2) of erfc and GELU. Half the work of
 * exp_f32, by rounding with the 1.5 * 2^23 shift and a single scale factor. Within 1 ulp for
 * -87.3 <= x <= 88; a result below FLT_MIN (x < -87.3) is flushed to 0, so exp(-inf) = 0;
 * NaN stays NaN. tensor_softmax keeps exp_f32, right down to the subnormals. */
SCALAR_FN float exp_nonpos_f32(float x)
{
	const float lo = -87.33654f, shift = 12582912.0f; /* ln(FLT_MIN), 1.5 * 2^23 */
	float xc = f32_select(x < lo, lo, x);
	float ts = xc * 1.44269504088896341f + shift;
	float fn = ts - shift; /* xc / ln 2 rounded to an integer, in [-126, 127] */
	int32_t n = f32_bits(ts) - f32_bits(shift);
	float p = exp_reduced(xc, fn);
	uint32_t scale = ((uint32_t)n + 127u) << 23; /* unsigned: NaN's n wraps, defined */
	return f32_select(x < lo, 0.0f, p * f32_from_bits((int32_t)scale));
}

/* Q(t) = erfc(z) exp(z^2) / t for z >= 0, t = 1 / (1 + z / 2) in (0, 1]: smooth,
 * from 1 at t = 1 to 1 / (2 sqrt(pi)) at t = 0. The degree-10 polynomial is a least-squares
 * fit for relative error on Chebyshev nodes (scripts/erfc_fit.py): 1.1e-8 in exact
 * arithmetic, 2.4e-7 evaluated in float. Estrin's scheme keeps the dependency chain short,
 * which is what bounds these loops. */
SCALAR_FN float erfc_q(float t)
{
	float t2 = t * t, t4 = t2 * t2, t8 = t4 * t4;
	float a = (2.820947948e-01f + 2.820938501e-01f * t) +
		  (2.468806940e-01f + 1.753750786e-01f * t) * t2;
	float b = (9.301484630e-02f - 5.729812255e-02f * t) +
		  (1.272705107e-01f - 4.472818381e-01f * t) * t2;
	float c = (4.864837790e-01f - 2.310245783e-01f * t) + 4.239097725e-02f * t2;
	return a + b * t4 + c * t8;
}

/* erfc(z) = t e Q(t) for z >= 0, given e = exp(-z^2) (erfc(-z) is 2 minus it). The exp does
 * not wait for the division and the polynomial, and gelu' reuses it for phi. */
SCALAR_FN float erfc_abs_f(float z, float e)
{
	float t = 1.0f / (1.0f + 0.5f * z);
	return t * e * erfc_q(t);
}

SCALAR_FN float erfc_f(float x)
{
	float z = fabsf(x), e = erfc_abs_f(z, exp_nonpos_f32(-z * z));
	return f32_select(x < 0, 2.0f - e, e);
}

/* The logistic 1 / (1 + e^-x): 0 for x << 0 (e^-x = inf), never NaN. */
SCALAR_FN float sigmoid_f(float x)
{
	return 1.0f / (1.0f + exp_f32(-x));
}


/* x Phi(x) through erfc, which keeps its precision in the negative tail. */
SCALAR_FN float gelu_f(float x)
{
	return 0.5f * x * erfc_f(-x * (float)SCALAR_SQRT_1_2);
}

/* gelu'(x) = Phi(x) + x phi(x), with one exp: phi(x) = exp(-z^2) / sqrt(2 pi), z = |x| / sqrt(2),
 * and Phi(x) = erfc(-x / sqrt(2)) / 2. */
SCALAR_FN float gelu_grad_f(float x)
{
	float z = fabsf(x) * (float)SCALAR_SQRT_1_2, e = exp_nonpos_f32(-z * z), c = erfc_abs_f(z, e);
	return 0.5f * f32_select(x > 0, 2.0f - c, c) + x * (float)SCALAR_INV_SQRT_2PI * e;
}

/* 0.5 x (1 + tanh(u)) written as x sigmoid(2u), which does not cancel for x << 0. */
SCALAR_FN float gelu_tanh_f(float x)
{
	return x * sigmoid_f(2.0f * (float)SCALAR_SQRT_2_OVER_PI * (x + (float)SCALAR_GELU_TANH_C * x * x * x));
}

/* d/dx x s(2u) = s + 2 x s (1 - s) u', u' = c (1 + 3 k x^2). */
SCALAR_FN float gelu_tanh_grad_f(float x)
{
	float s = sigmoid_f(2.0f * (float)SCALAR_SQRT_2_OVER_PI * (x + (float)SCALAR_GELU_TANH_C * x * x * x));
	float du = (float)SCALAR_SQRT_2_OVER_PI * (1.0f + 3.0f * (float)SCALAR_GELU_TANH_C * x * x);
	return s + 2.0f * x * s * (1.0f - s) * du;
}

/* silu'(x) = s (1 + x (1 - s)). */
SCALAR_FN float silu_grad_f(float x)
{
	float s = sigmoid_f(x);
	return s * (1.0f + x * (1.0f - s));
}

/* ---- f64 ----------------------------------------------------------------- */

SCALAR_FN double sigmoid_d(double x)
{
	return 1.0 / (1.0 + exp(-x));
}

SCALAR_FN double gelu_d(double x)
{
	return 0.5 * x * erfc(-x * SCALAR_SQRT_1_2);
}

SCALAR_FN double gelu_grad_d(double x)
{
	return 0.5 * erfc(-x * SCALAR_SQRT_1_2) + x * SCALAR_INV_SQRT_2PI * exp(-0.5 * x * x);
}

SCALAR_FN double gelu_tanh_u(double x)
{
	return SCALAR_SQRT_2_OVER_PI * (x + SCALAR_GELU_TANH_C * x * x * x);
}

SCALAR_FN double gelu_tanh_d(double x)
{
	return x * sigmoid_d(2.0 * gelu_tanh_u(x));
}

SCALAR_FN double gelu_tanh_grad_d(double x)
{
	double s = sigmoid_d(2.0 * gelu_tanh_u(x));
	return s + 2.0 * x * s * (1.0 - s) * SCALAR_SQRT_2_OVER_PI *
			   (1.0 + 3.0 * SCALAR_GELU_TANH_C * x * x);
}

SCALAR_FN double silu_grad_d(double x)
{
	double s = sigmoid_d(x);
	return s * (1.0 + x * (1.0 - s));
}

#endif
