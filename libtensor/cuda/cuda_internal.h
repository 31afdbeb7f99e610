/* CUDA backend internals shared by cuda_backend.c (host C) and
 * cuda_kernels.cu (device code). Internal to libtensor. */
#ifndef CFORMER_CUDA_INTERNAL_H
#define CFORMER_CUDA_INTERNAL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUDA_MAX_DIMS 8

/* Geometry of one strided operand, passed to kernels by value. */
struct cuda_geom {
	int ndim;
	int dtype; /* enum tensor_dtype */
	int64_t shape[CUDA_MAX_DIMS];
	int64_t strides[CUDA_MAX_DIMS];
	void *base; /* address of element 0 */
};

/* Kernel launchers (cuda_kernels.cu); return 0 or a cudaError_t value. */
int cuda_launch_copy(struct cuda_geom dst, struct cuda_geom src, int64_t n);
int cuda_launch_fill(struct cuda_geom dst, int64_t n, double value, double step);
int cuda_launch_random(struct cuda_geom dst, int64_t n, int normal, uint64_t seed, double a,
		       double b);
/* Contiguous out, x of n elements (f32 if f32, else f64); out may be x. */
int cuda_launch_dropout(void *out, const void *x, int64_t n, int f32, double p, uint64_t seed);

#ifdef __cplusplus
}
#endif

#endif
