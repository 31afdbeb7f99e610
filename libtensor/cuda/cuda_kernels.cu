// CUDA kernels of the CUDA backend: strided copy with dtype conversion, fill,
// arange, the counter-based random fills and dropout (same numbers as the CPU).
#include <cuda_runtime.h>

#include "../random.h"
#include "cuda_internal.h"

enum { F32 = TENSOR_F32, F64 = TENSOR_F64 };

__global__ static void copy_kernel(cuda_geom dst, cuda_geom src, int64_t n)
{
	CUDA_GRID_LOOP(i, n)
		cuda_store(dst.base, dst.dtype, cuda_offset(dst, i),
			   cuda_load(src.base, src.dtype, cuda_offset(src, i)));
}

__global__ static void fill_kernel(cuda_geom dst, int64_t n, double value, double step)
{
	CUDA_GRID_LOOP(i, n)
		cuda_store(dst.base, dst.dtype, cuda_offset(dst, i),
			   step == 0 ? value : __dadd_rn(value, __dmul_rn(step, (double)i)));
}

__global__ static void random_kernel(cuda_geom dst, int64_t n, int normal, uint64_t seed,
				     double a, double b)
{
	CUDA_GRID_LOOP(i, n) {
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
		cuda_store(dst.base, dst.dtype, cuda_offset(dst, i), v);
	}
}

/* out = x * keep * scale over contiguous x, keep = uniform(seed, i) >= p as
 * the CPU decides it; the product rounded in x's dtype. out may be x. */
__global__ static void dropout_kernel(void *out, const void *x, int64_t n, int f32, double p,
				      uint64_t seed, double scale)
{
	CUDA_GRID_LOOP(i, n) {
		double keep = random_uniform(seed, (uint64_t)i) >= p ? 1.0 : 0.0;
		if (f32)
			((float *)out)[i] = __fmul_rn(((const float *)x)[i], (float)(keep * scale));
		else
			((double *)out)[i] = __dmul_rn(((const double *)x)[i], keep * scale);
	}
}

extern "C" int cuda_launch_copy(cuda_geom dst, cuda_geom src, int64_t n)
{
	copy_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream()>>>(dst, src, n);
	return (int)cudaGetLastError();
}

extern "C" int cuda_launch_fill(cuda_geom dst, int64_t n, double value, double step)
{
	fill_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream()>>>(dst, n, value, step);
	return (int)cudaGetLastError();
}

extern "C" int cuda_launch_random(cuda_geom dst, int64_t n, int normal, uint64_t seed,
				  double a, double b)
{
	random_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream()>>>(dst, n, normal, seed, a, b);
	return (int)cudaGetLastError();
}

extern "C" int cuda_launch_dropout(void *out, const void *x, int64_t n, int f32, double p,
				   uint64_t seed)
{
	dropout_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream()>>>(out, x, n, f32, p, seed, 1.0 / (1.0 - p));
	return (int)cudaGetLastError();
}
