// CUDA kernels of the CUDA backend: strided copy with dtype conversion (and a row copy
// for one dtype), fill,
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

/* A copy of one dtype whose rows are contiguous on both sides: rows of `cols` elements
 * (T: the element's bits), dst and src holding the outer dims only, so that a row's two
 * offsets are found once and the row moves in coalesced accesses. */
template <typename T>
__global__ static void copy_rows_kernel(cuda_geom dst, cuda_geom src, int64_t rows, int64_t cols)
{
	for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
		T *d = (T *)dst.base + cuda_offset(dst, r);
		const T *s = (const T *)src.base + cuda_offset(src, r);
		for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
			d[j] = s[j];
	}
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

/* out = x * keep * scale over contiguous x, keep = random_word(seed, first + i) >= thresh
 * as the CPU decides it; the product rounded in x's dtype. out may be x. */
__global__ static void dropout_kernel(void *out, const void *x, int64_t n, int f32,
				      uint64_t thresh, uint64_t seed, uint64_t first, double scale)
{
	CUDA_GRID_LOOP(i, n) {
		double keep = random_word(seed, first + (uint64_t)i) >= thresh ? 1.0 : 0.0;
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

extern "C" int cuda_launch_copy_rows(cuda_geom dst, cuda_geom src, int64_t rows, int64_t cols,
				     size_t esize)
{
	int threads = cols >= 256 ? 256 : (int)((cols + 31) / 32 * 32);
	unsigned blocks = cuda_blocks(rows * threads, threads);
	cudaStream_t st = cuda_stream();
	if (esize == 8)
		copy_rows_kernel<uint64_t><<<blocks, threads, 0, st>>>(dst, src, rows, cols);
	else if (esize == 4)
		copy_rows_kernel<uint32_t><<<blocks, threads, 0, st>>>(dst, src, rows, cols);
	else
		copy_rows_kernel<uint16_t><<<blocks, threads, 0, st>>>(dst, src, rows, cols);
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
				   uint64_t seed, uint64_t first)
{
	dropout_kernel<<<cuda_blocks(n, 256), 256, 0, cuda_stream()>>>(
	    out, x, n, f32, random_dropout_threshold(p), seed, first, 1.0 / (1.0 - p));
	return (int)cudaGetLastError();
}
