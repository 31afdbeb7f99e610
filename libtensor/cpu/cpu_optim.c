/* CPU optimizer kernels: the fused AdamW update (one pass over p, m, v, g) and the fused SGD
 * update (one pass over p, the momentum buffer and g). */
#include <math.h>

#include "cpu_iter.h"
#include "cpu_kernels.h"

/* The coefficients of the update, as nn/optim.c's tensor-op form computes them. */
struct adamw_coef {
	double a0, a1, a2, a3, a4, a5, a6;
};

static struct adamw_coef adamw_coef(const double *h)
{
	return (struct adamw_coef){ .a0 = 1 - h[1],
				    .a1 = h[2],
				    .a2 = 1 - h[2],
				    .a3 = 1 / sqrt(h[6]),
				    .a4 = h[3],
				    .a5 = -h[0] / h[5],
				    .a6 = 1 - h[0] * h[4] };
}

/* The tensor-op form's operations in the same order, so the results agree bit for bit:
 * m += (g - m) a0; v = v a1 + g^2 a2; p = p a6 + m / (sqrt(v) a3 + a4) a5. */
static void adamw_f32(float *restrict p, float *restrict m, float *restrict v,
		      const float *restrict g, int64_t n, struct adamw_coef c)
{
	const float a0 = (float)c.a0, a1 = (float)c.a1, a2 = (float)c.a2, a3 = (float)c.a3,
		    a4 = (float)c.a4, a5 = (float)c.a5, a6 = (float)c.a6;
#pragma omp parallel for simd num_threads(cpu_num_threads()) if (n > CPU_PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		float mi = m[i] + (g[i] - m[i]) * a0, vi = v[i] * a1 + g[i] * g[i] * a2;
		m[i] = mi;
		v[i] = vi;
		p[i] = p[i] * a6 + mi / (sqrtf(vi) * a3 + a4) * a5;
	}
}

static void adamw_f64(double *restrict p, double *restrict m, double *restrict v,
		      const double *restrict g, int64_t n, struct adamw_coef c)
{
#pragma omp parallel for simd num_threads(cpu_num_threads()) if (n > CPU_PAR_MIN)
	for (int64_t i = 0; i < n; i++) {
		double mi = m[i] + (g[i] - m[i]) * c.a0, vi = v[i] * c.a1 + g[i] * g[i] * c.a2;
		m[i] = mi;
		v[i] = vi;
		p[i] = p[i] * c.a6 + mi / (sqrt(vi) * c.a3 + c.a4) * c.a5;
	}
}

int cpu_adamw(struct tensor *p, struct tensor *m, struct tensor *v, const struct tensor *g,
	      const double *h)
{
	int64_t n = tensor_numel(p);
	if (p->dtype == TENSOR_F32)
		adamw_f32((float *)cpu_ptr(p), (float *)cpu_ptr(m), (float *)cpu_ptr(v),
			  (const float *)cpu_ptr(g), n, adamw_coef(h));
	else
		adamw_f64((double *)cpu_ptr(p), (double *)cpu_ptr(m), (double *)cpu_ptr(v),
			  (const double *)cpu_ptr(g), n, adamw_coef(h));
	return TENSOR_OK;
}

/* The tensor-op form's operations in the same order: d = g + p wd (d = g when wd is 0);
 * with momentum b = b mu + d and d = b; p = p + d (-lr). b is NULL without momentum (tested
 * once, outside the loops); h = { lr, momentum, weight_decay }. */
#define SGD_LOOP \
	_Pragma("omp parallel for simd num_threads(cpu_num_threads()) if (n > CPU_PAR_MIN)")
#define DEFINE_SGD(T, NAME)                                                              \
	static void NAME(T *restrict p, T *restrict b, const T *restrict g, int64_t n,   \
			 const double *h)                                                \
	{                                                                                \
		const T nlr = (T)-h[0], mu = (T)h[1], wd = (T)h[2];                      \
		if (b) {                                                                 \
			SGD_LOOP for (int64_t i = 0; i < n; i++)                         \
			{                                                                \
				b[i] = b[i] * mu + (wd != 0 ? g[i] + p[i] * wd : g[i]);  \
				p[i] = p[i] + b[i] * nlr;                                \
			}                                                                \
		} else {                                                                 \
			SGD_LOOP for (int64_t i = 0; i < n; i++)                         \
			{                                                                \
				p[i] = p[i] + (wd != 0 ? g[i] + p[i] * wd : g[i]) * nlr; \
			}                                                                \
		}                                                                        \
	}
DEFINE_SGD(float, sgd_f32)
DEFINE_SGD(double, sgd_f64)

int cpu_sgd(struct tensor *p, struct tensor *buf, const struct tensor *g, const double *h)
{
	int64_t n = tensor_numel(p);
	if (p->dtype == TENSOR_F32)
		sgd_f32((float *)cpu_ptr(p), buf ? (float *)cpu_ptr(buf) : NULL,
			(const float *)cpu_ptr(g), n, h);
	else
		sgd_f64((double *)cpu_ptr(p), buf ? (double *)cpu_ptr(buf) : NULL,
			(const double *)cpu_ptr(g), n, h);
	return TENSOR_OK;
}
