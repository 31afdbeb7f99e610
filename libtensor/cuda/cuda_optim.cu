// The fused AdamW and SGD updates on CUDA: one grid-stride pass, 16-byte
// vectors where every operand is aligned. The CPU kernels (cpu/cpu_optim.c,
// built for baseline x86-64, no FMA) are the reference and are matched bit
// for bit: each operation is rounded apart (cuda_rn.cuh).
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_internal.h"
#include "cuda_rn.cuh"

// AdamW coefficients as cpu_optim.c derives them from h (in double, then T).
template <typename T> struct adamw_coef {
	T a0, a1, a2, a3, a4, a5, a6;
};

// m += (g - m) a0; v = v a1 + g^2 a2; p = p a6 + m / (sqrt(v) a3 + a4) a5,
// in T, each operation rounded apart as the CPU's (no FMA) loop.
template <typename T>
__device__ static inline void adamw_one(T &p, T &m, T &v, T g, const adamw_coef<T> &c)
{
	m = add_rn(m, mul_rn(sub_rn(g, m), c.a0));
	v = add_rn(mul_rn(v, c.a1), mul_rn(mul_rn(g, g), c.a2));
	p = add_rn(mul_rn(p, c.a6),
		   mul_rn(div_rn(m, add_rn(mul_rn(sqrt_rn(v), c.a3), c.a4)), c.a5));
}

template <typename T>
__global__ void adamw_kernel(T *p, T *m, T *v, const T *g, int64_t n, adamw_coef<T> c, int vec)
{
	constexpr int CH = 16 / sizeof(T);
	int64_t head = vec ? n / CH * CH : 0;
	CUDA_GRID_LOOP(i, head / CH)
	{
		T pv[CH], mv[CH], vv[CH], gv[CH];
		ld16(pv, p + i * CH), ld16(mv, m + i * CH), ld16(vv, v + i * CH);
		ld16(gv, g + i * CH);
#pragma unroll
		for (int e = 0; e < CH; e++)
			adamw_one(pv[e], mv[e], vv[e], gv[e], c);
		st16(p + i * CH, pv), st16(m + i * CH, mv), st16(v + i * CH, vv);
	}
	CUDA_GRID_LOOP(i, n - head)
	{
		int64_t k = head + i;
		T pk = p[k], mk = m[k], vk = v[k];
		adamw_one(pk, mk, vk, g[k], c);
		p[k] = pk, m[k] = mk, v[k] = vk;
	}
}

// d = g + p wd (g when wd is 0); with momentum b = b mu + d, d = b; p = p + d (-lr).
template <typename T, bool MOM>
__device__ static inline void sgd_one(T &p, T &b, T g, T nlr, T mu, T wd)
{
	T d = wd != (T)0 ? add_rn(g, mul_rn(p, wd)) : g;
	if (MOM) {
		b = add_rn(mul_rn(b, mu), d);
		d = b;
	}
	p = add_rn(p, mul_rn(d, nlr));
}

template <typename T, bool MOM>
__global__ void sgd_kernel(T *p, T *b, const T *g, int64_t n, T nlr, T mu, T wd, int vec)
{
	constexpr int CH = 16 / sizeof(T);
	int64_t head = vec ? n / CH * CH : 0;
	CUDA_GRID_LOOP(i, head / CH)
	{
		T pv[CH], bv[CH] = {}, gv[CH];
		ld16(pv, p + i * CH), ld16(gv, g + i * CH);
		if (MOM)
			ld16(bv, b + i * CH);
#pragma unroll
		for (int e = 0; e < CH; e++)
			sgd_one<T, MOM>(pv[e], bv[e], gv[e], nlr, mu, wd);
		st16(p + i * CH, pv);
		if (MOM)
			st16(b + i * CH, bv);
	}
	CUDA_GRID_LOOP(i, n - head)
	{
		int64_t k = head + i;
		T pk = p[k], bk = MOM ? b[k] : (T)0;
		sgd_one<T, MOM>(pk, bk, g[k], nlr, mu, wd);
		p[k] = pk;
		if (MOM)
			b[k] = bk;
	}
}

extern "C" int cuda_adamw(struct tensor *p, struct tensor *m, struct tensor *v,
			  const struct tensor *g, const double *h)
{
	int64_t n = tensor_numel(p);
	if (n == 0)
		return TENSOR_OK;
	// as cpu_optim.c's adamw_coef
	double c[7];
	c[0] = 1 - h[1], c[1] = h[2], c[2] = 1 - h[2], c[3] = 1 / sqrt(h[6]);
	c[4] = h[3], c[5] = -h[0] / h[5], c[6] = 1 - h[0] * h[4];
	void *pp = cuda_ptr(p), *pm = cuda_ptr(m), *pv = cuda_ptr(v), *pg = cuda_ptr(g);
	int vec = aligned16(pp) && aligned16(pm) && aligned16(pv) && aligned16(pg);
	int chunk = p->dtype == TENSOR_F32 ? 4 : 2;
	unsigned grid = cuda_blocks(vec ? n / chunk + 1 : n, 256);
	if (p->dtype == TENSOR_F32) {
		adamw_coef<float> k = { (float)c[0], (float)c[1], (float)c[2], (float)c[3],
					(float)c[4], (float)c[5], (float)c[6] };
		adamw_kernel<float><<<grid, 256, 0, cuda_stream()>>>(
		    (float *)pp, (float *)pm, (float *)pv, (const float *)pg, n, k, vec);
	} else {
		adamw_coef<double> k = { c[0], c[1], c[2], c[3], c[4], c[5], c[6] };
		adamw_kernel<double><<<grid, 256, 0, cuda_stream()>>>(
		    (double *)pp, (double *)pm, (double *)pv, (const double *)pg, n, k, vec);
	}
	return cuda_launched("adamw");
}

template <typename T>
static void sgd_launch(struct tensor *p, struct tensor *buf, const struct tensor *g, int64_t n,
		       const double *h)
{
	T *pp = (T *)cuda_ptr(p), *pb = buf ? (T *)cuda_ptr(buf) : NULL;
	const T *pg = (const T *)cuda_ptr(g);
	int vec = aligned16(pp) && aligned16(pg) && (!pb || aligned16(pb));
	unsigned grid = cuda_blocks(vec ? n / (16 / sizeof(T)) + 1 : n, 256);
	const T nlr = (T)-h[0], mu = (T)h[1], wd = (T)h[2];
	if (pb)
		sgd_kernel<T, true>
		    <<<grid, 256, 0, cuda_stream()>>>(pp, pb, pg, n, nlr, mu, wd, vec);
	else
		sgd_kernel<T, false>
		    <<<grid, 256, 0, cuda_stream()>>>(pp, pb, pg, n, nlr, mu, wd, vec);
}

extern "C" int cuda_sgd(struct tensor *p, struct tensor *buf, const struct tensor *g,
			const double *h)
{
	int64_t n = tensor_numel(p);
	if (n == 0)
		return TENSOR_OK;
	if (p->dtype == TENSOR_F32)
		sgd_launch<float>(p, buf, g, n, h);
	else
		sgd_launch<double>(p, buf, g, n, h);
	return cuda_launched("sgd");
}
