// CUDA kernels of the CUDA backend: strided copy with dtype conversion, fill,
// arange, the counter-based random fills and dropout (same numbers as the CPU).
#include <cuda_runtime.h>

#include "../random.h"
#include "cuda_internal.h"

enum { F32, F64, I32, I64 }; // enum tensor_dtype

__device__ static double load(const char *p, int dt)
{
	switch (dt) {
	case F32: return *(const float *)p;
	case F64: return *(const double *)p;
	case I32: return *(const int *)p;
	default: return (double)*(const long long *)p;
	}
}

__device__ static void store(char *p, int dt, double v)
{
	switch (dt) {
	case F32: *(float *)p = (float)v; break;
	case F64: *(double *)p = v; break;
	case I32: *(int *)p = (int)v; break;
	default: *(long long *)p = (long long)v; break;
	}
}

__device__ static int esize(int dt) { return dt == F32 || dt == I32 ? 4 : 8; }

// Address of row-major element i of g.
__device__ static char *at(const cuda_geom &g, int64_t i)
{
	int64_t off = 0;
	for (int d = g.ndim - 1; d >= 0; d--) {
		off += (i % g.shape[d]) * g.strides[d];
		i /= g.shape[d];
	}
	return (char *)g.base + off * esize(g.dtype);
}

__global__ static void copy_kernel(cuda_geom dst, cuda_geom src, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		store(at(dst, i), dst.dtype, load(at(src, i), src.dtype));
}

__global__ static void fill_kernel(cuda_geom dst, int64_t n, double value, double step)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		store(at(dst, i), dst.dtype, __dadd_rn(value, __dmul_rn(step, (double)i)));
}

__global__ static void random_kernel(cuda_geom dst, int64_t n, int normal, uint64_t seed,
				     double a, double b)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x) {
		double v;
		/* _rn: a product and a sum rounded apart, as the CPU computes them
		 * (nvcc would fuse them into one FMA, and the bits would differ) */
		if (normal) {
			v = __dadd_rn(a, __dmul_rn(b, random_normal(seed, (uint64_t)i)));
		} else {
			v = __dadd_rn(
			    a, __dmul_rn(__dsub_rn(b, a), random_uniform(seed, (uint64_t)i)));
			if (dst.dtype == F32 && (float)v >= (float)b && b > a)
				v = nextafterf((float)b, (float)a);
		}
		store(at(dst, i), dst.dtype, v);
	}
}

/* out = x * keep * scale over contiguous x, keep = uniform(seed, i) >= p as
 * the CPU decides it; the product rounded in x's dtype. out may be x. */
__global__ static void dropout_kernel(void *out, const void *x, int64_t n, int f32, double p,
				      uint64_t seed, double scale)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x) {
		double keep = random_uniform(seed, (uint64_t)i) >= p ? 1.0 : 0.0;
		if (f32)
			((float *)out)[i] = __fmul_rn(((const float *)x)[i], (float)(keep * scale));
		else
			((double *)out)[i] = __dmul_rn(((const double *)x)[i], keep * scale);
	}
}

static dim3 grid_for(int64_t n)
{
	int64_t blocks = (n + 255) / 256;
	return dim3((unsigned)(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535));
}

extern "C" int cuda_launch_copy(cuda_geom dst, cuda_geom src, int64_t n)
{
	copy_kernel<<<grid_for(n), 256>>>(dst, src, n);
	return (int)cudaGetLastError();
}

extern "C" int cuda_launch_fill(cuda_geom dst, int64_t n, double value, double step)
{
	fill_kernel<<<grid_for(n), 256>>>(dst, n, value, step);
	return (int)cudaGetLastError();
}

extern "C" int cuda_launch_random(cuda_geom dst, int64_t n, int normal, uint64_t seed,
				  double a, double b)
{
	random_kernel<<<grid_for(n), 256>>>(dst, n, normal, seed, a, b);
	return (int)cudaGetLastError();
}

extern "C" int cuda_launch_dropout(void *out, const void *x, int64_t n, int f32, double p,
				   uint64_t seed)
{
	dropout_kernel<<<grid_for(n), 256>>>(out, x, n, f32, p, seed, 1.0 / (1.0 - p));
	return (int)cudaGetLastError();
}
