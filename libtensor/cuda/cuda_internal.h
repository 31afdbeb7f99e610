/* CUDA backend internals shared by the host C files (cuda_backend.c,
 * cuda_gemm.c) and the kernel files (*.cu). Internal to libtensor.
 *
 * Every slot runs on the backend's one stream (cuda_stream()) and returns
 * without waiting for the device: a kernel launch error is reported at once
 * (cuda_launched), a fault found by a kernel (an index out of range) at the
 * next synchronisation (cuda_fault_raise). */
#ifndef CFORMER_CUDA_INTERNAL_H
#define CFORMER_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "../backend.h"
#include "../bf16.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CUDA_MAX_DIMS TENSOR_MAX_DIMS

/* ---- host side (cuda_backend.c) ------------------------------------------ */

/* The backend's stream, created at first use (NULL, the legacy stream, if
 * that failed: work stays ordered either way). */
cudaStream_t cuda_stream(void);
/* TENSOR_OK for cudaSuccess, else a TENSOR_ERR_CUDA error
 * "op: CUDA error: <cudaGetErrorString>". */
int cuda_status(cudaError_t e, const char *op);
/* The status of the last kernel launch (cudaGetLastError), for op. */
int cuda_launched(const char *op);
/* Blocks of `threads` threads to cover n items with a grid-stride loop
 * (at least 1, at most a few waves of the device). */
unsigned cuda_blocks(int64_t n, int threads);

/* A device buffer of at least nbytes for a slot's scratch space, valid until
 * the next call (the stream orders its users); it grows by reallocation, so
 * the steady state allocates nothing. NULL with an error naming op if the
 * device has no memory for it. */
void *cuda_scratch(size_t nbytes, const char *op);

/* A fault a kernel found, kept in mapped host memory: the first one wins
 * (code moves from 0 with atomicCAS), and the host raises it as an error at
 * the next synchronisation. `op` is the address of a static string of the
 * host (the op's name), carried through the kernel as an integer. */
enum cuda_fault_code { CUDA_FAULT_NONE, CUDA_FAULT_INDEX };
struct cuda_fault {
	int code;
	int dim;
	uint64_t op;
	long long value, pos, size;
};
/* Device address of the fault record (NULL, with an error, if it could not be
 * allocated). */
struct cuda_fault *cuda_fault_device(void);
/* After the stream is synchronised: TENSOR_OK if no kernel recorded a fault,
 * else the fault as a TENSOR_ERR_ARG error (then cleared). */
int cuda_fault_raise(void);

/* ---- geometry of a strided operand, passed to kernels by value ------------ */

struct cuda_geom {
	int ndim;  /* 0 for a scalar */
	int dtype; /* enum tensor_dtype */
	int64_t shape[CUDA_MAX_DIMS];
	int64_t strides[CUDA_MAX_DIMS]; /* elements */
	void *base;			/* address of element 0 */
};

/* The geometry of t as it is (shape, strides and element 0). */
struct cuda_geom cuda_geom_of(const struct tensor *t);
/* Address of element 0 of t on the device. */
static inline void *cuda_ptr(const struct tensor *t)
{
	return (char *)t->storage->data + t->offset * tensor_dtype_size(t->dtype);
}

/* ---- the slots, one family a file ------------------------------------------ */

/* cuda_kernels.cu: copy, fill, random, dropout */
int cuda_launch_copy(struct cuda_geom dst, struct cuda_geom src, int64_t n);
/* rows x cols elements of esize bytes, each row contiguous on both sides; dst and src
 * hold the outer dims (a row's offset), the row dim left out. */
int cuda_launch_copy_rows(struct cuda_geom dst, struct cuda_geom src, int64_t rows, int64_t cols,
			  size_t esize);
int cuda_launch_fill(struct cuda_geom dst, int64_t n, double value, double step);
int cuda_launch_random(struct cuda_geom dst, int64_t n, int normal, uint64_t seed, double a,
		       double b);
int cuda_launch_dropout(void *out, const void *x, int64_t n, int f32, double p, uint64_t seed,
			uint64_t first);
/* cuda_elementwise.cu */
int cuda_unary(enum tensor_unary_op op, struct tensor *out, const struct tensor *x, double alpha);
int cuda_binary(enum tensor_binary_op op, struct tensor *out, const struct tensor *a,
		const struct tensor *b);
int cuda_where(struct tensor *out, const struct tensor *cond, const struct tensor *a,
	       const struct tensor *b);
/* cuda_reduce.cu */
int cuda_reduce(enum tensor_reduce_op op, struct tensor *out, const struct tensor *x, int dim);
/* cuda_gemm.c (cuBLAS) */
int cuda_gemm(struct tensor *c, const struct tensor *a, const struct tensor *b, double alpha,
	      double beta);
/* cuda_nn.cu: softmax, norms, optimizers */
int cuda_softmax(struct tensor *out, const struct tensor *x, bool log);
int cuda_softmax_backward(struct tensor *dx, const struct tensor *y, const struct tensor *g);
int cuda_layer_norm(struct tensor *y, struct tensor *mean, struct tensor *rstd,
		    const struct tensor *x, const struct tensor *w, const struct tensor *b,
		    double eps);
int cuda_rms_norm(struct tensor *y, struct tensor *rstd, const struct tensor *x,
		  const struct tensor *w, double eps);
int cuda_norm_backward(struct tensor *dx, struct tensor *dw, struct tensor *db,
		       const struct tensor *g, const struct tensor *x, const struct tensor *mean,
		       const struct tensor *rstd, const struct tensor *w);
int cuda_adamw(struct tensor *p, struct tensor *m, struct tensor *v, const struct tensor *g,
	       const double *h);
int cuda_sgd(struct tensor *p, struct tensor *buf, const struct tensor *g, const double *h);
/* cuda_attention.cu: tensor_attention's slots (f32, f64; head dims up to
 * CUDA_ATTENTION_DMAX, else TENSOR_ERR_UNSUPPORTED) */
#define CUDA_ATTENTION_DMAX 128
int cuda_attention(struct tensor *out, struct tensor *lse, const struct tensor_attention_args *a);
int cuda_attention_backward(struct tensor *dq, struct tensor *dk, struct tensor *dv,
			    const struct tensor_attention_args *a, const struct tensor *lse,
			    const struct tensor *dout);
/* cuda_index.cu */
int cuda_index_select(struct tensor *out, const struct tensor *src, int dim,
		      const struct tensor *idx);
int cuda_index_add(struct tensor *dst, int dim, const struct tensor *idx, const struct tensor *src);
int cuda_gather(struct tensor *out, const struct tensor *src, int dim, const struct tensor *idx);
int cuda_scatter_add(struct tensor *dst, int dim, const struct tensor *idx,
		     const struct tensor *src);
int cuda_check_index(const char *op, const struct tensor *idx, int dim, int64_t size);

#ifdef __cplusplus
}
#endif

/* ---- device helpers for the .cu files -------------------------------------- */
#ifdef __CUDACC__

/* Offset in elements of row-major element i of g. */
__device__ static inline int64_t cuda_offset(const cuda_geom &g, int64_t i)
{
	int64_t off = 0;
	for (int d = g.ndim - 1; d >= 0; d--) {
		int64_t s = g.shape[d];
		off += (i % s) * g.strides[d];
		i /= s;
	}
	return off;
}

/* Element i of an operand of any dtype, through double (exact for f32, f64, bf16
 * and integers below 2^53), and the store back (to bf16 correctly rounded, as the
 * CPU converts: bf16.h). */
__device__ static inline double cuda_load(const void *base, int dtype, int64_t off)
{
	switch (dtype) {
	case TENSOR_F32: return ((const float *)base)[off];
	case TENSOR_F64: return ((const double *)base)[off];
	case TENSOR_BF16: return bf16_to_f64(((const uint16_t *)base)[off]);
	case TENSOR_I32: return ((const int32_t *)base)[off];
	default: return (double)((const int64_t *)base)[off];
	}
}

__device__ static inline void cuda_store(void *base, int dtype, int64_t off, double v)
{
	switch (dtype) {
	case TENSOR_F32: ((float *)base)[off] = (float)v; break;
	case TENSOR_F64: ((double *)base)[off] = v; break;
	case TENSOR_BF16: ((uint16_t *)base)[off] = bf16_from_f64(v); break;
	case TENSOR_I32: ((int32_t *)base)[off] = (int32_t)v; break;
	default: ((int64_t *)base)[off] = (int64_t)v; break;
	}
}

/* An i32/i64 index value. */
__device__ static inline int64_t cuda_load_index(const void *base, int dtype, int64_t off)
{
	return dtype == TENSOR_I32 ? ((const int32_t *)base)[off] : ((const int64_t *)base)[off];
}

#define CUDA_GRID_LOOP(i, n)                                                      \
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); \
	     i += (int64_t)gridDim.x * blockDim.x)

#endif /* __CUDACC__ */

#endif
