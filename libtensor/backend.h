/* The device boundary: one table of functions per device. Internal to
 * libtensor. Front-ends (ops_*.c) validate arguments, allocate outputs and
 * broadcast inputs (stride-0 views), then call a slot; a NULL slot means the
 * device does not support the primitive (TENSOR_ERR_UNSUPPORTED).
 *
 * Compute slots receive tensors on the backend's device, already validated:
 * `out`/`dst` tensors are freshly allocated and contiguous unless stated, and
 * inputs have out's shape unless stated (they may have any strides, including
 * 0 for broadcast dims). Slots return TENSOR_OK or a negative status after
 * calling tensor_error().
 */
#ifndef CFORMER_BACKEND_H
#define CFORMER_BACKEND_H

#include <stddef.h>

#include "guard.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tensor_reduce_op { TENSOR_RED_SUM, TENSOR_RED_MAX, TENSOR_RED_MIN, TENSOR_RED_ARGMAX };
enum tensor_random_kind { TENSOR_RAND_UNIFORM, TENSOR_RAND_NORMAL };

struct tensor_backend {
	const char *name;
	/* memory */
	void *(*alloc)(size_t nbytes);		/* NULL on failure */
	void (*free)(void *ptr, size_t nbytes); /* nbytes as allocated */
	int (*memset_zero)(void *ptr, size_t nbytes);
	/* The host buffer may be reused as soon as copy_from_host returns (the
	 * device side may still be in flight); copy_to_host waits for the device
	 * and raises the faults its kernels found (synchronize too). */
	int (*copy_from_host)(void *dst, const void *src, size_t nbytes);
	int (*copy_to_host)(void *dst, const void *src, size_t nbytes);
	int (*synchronize)(void);
	/* Optional: return memory the device allocator caches (tensor_mem_trim),
	 * and its counters: calls that reached the device's own allocator and
	 * host waits for the device, so far. */
	void (*trim)(void);
	void (*counters)(size_t *allocs, size_t *syncs);
	/* Optional: free and total device memory, and a one-line description. */
	int (*mem_info)(size_t *free_bytes, size_t *total_bytes);
	void (*describe)(char *buf, size_t len);

	/* dst = src elementwise with dtype conversion; dst any strides. */
	int (*copy)(struct tensor *dst, const struct tensor *src);
	/* dst (any strides) = value / arange / random numbers. Random element i
	 * (row-major index) is philox(seed, i), see random.h. */
	int (*fill)(struct tensor *dst, double value);
	int (*arange)(struct tensor *dst, double start, double step);
	int (*random)(struct tensor *dst, enum tensor_random_kind kind, uint64_t seed, double a,
		      double b);
	/* out = x * keep / (1 - p), keep[i] = uniform(seed, first + i) >= p with
	 * the uniform of `random` (compared in double); f32/f64, out and x
	 * contiguous, out may be x, 0 <= p < 1. */
	int (*dropout)(struct tensor *out, const struct tensor *x, double p, uint64_t seed,
		       uint64_t first);

	int (*unary)(enum tensor_unary_op op, struct tensor *out, const struct tensor *x,
		     double alpha);
	int (*binary)(enum tensor_binary_op op, struct tensor *out, const struct tensor *a,
		      const struct tensor *b);
	int (*where)(struct tensor *out, const struct tensor *cond, const struct tensor *a,
		     const struct tensor *b);
	/* out has x's shape with size 1 at dim (argmax: out is i64). */
	int (*reduce)(enum tensor_reduce_op op, struct tensor *out, const struct tensor *x,
		      int dim);
	/* c [batch, m, n] = alpha a [batch, m, k] · b [batch, k, n] + beta c.
	 * Batch strides may be 0; every matrix has a unit stride in one dim,
	 * rows and columns that do not overlap, and valid strides on size-1
	 * dims (the front-end copies or rewrites operands to ensure this).
	 * a, b and c share a dtype, or a and b are bf16 and c is f32 or bf16
	 * (f32 accumulation); a slot without bf16 refuses it (TENSOR_ERR_DTYPE). */
	int (*gemm)(struct tensor *c, const struct tensor *a, const struct tensor *b, double alpha,
		    double beta);
	/* Along the last dim; x any strides. */
	int (*softmax)(struct tensor *out, const struct tensor *x, bool log); /* out may be x */
	/* Softmax backward along the last dim: dx = y (g - sum(g y)); dx, y and g
	 * contiguous, of one shape; dx may be g. */
	int (*softmax_backward)(struct tensor *dx, const struct tensor *y, const struct tensor *g);
	/* Optional: scaled dot-product attention without the scores in memory
	 * (tensor_attention; callers compose it where a device lacks it). The
	 * operands as tensor_attention_args says, each with a unit stride in its
	 * last dim and rows that do not overlap, hidden contiguous; out [B,H,T,dv]
	 * with a unit stride in its last dim; lse [B,H,T] contiguous. The backward
	 * writes dq, dk, dv (each with a unit stride in its last dim, rows that do not
	 * overlap, laid out as q, k, v are) from lse and dout ([B,H,T,dv], a unit
	 * stride in its last dim). Products in bf16 where tensor_matmul_in_bf16(q, k),
	 * read on the calling thread, as the gemm slot's. */
	int (*attention)(struct tensor *out, struct tensor *lse,
			 const struct tensor_attention_args *a);
	/* The largest head dims (d and dv) the attention kernel takes; 0: any. */
	int64_t attention_dmax;
	int (*attention_backward)(struct tensor *dq, struct tensor *dk, struct tensor *dv,
				  const struct tensor_attention_args *a, const struct tensor *lse,
				  const struct tensor *dout);
	/* Over the last dim C; w, b [C] or NULL; mean, rstd [rows] or NULL. */
	int (*layer_norm)(struct tensor *y, struct tensor *mean, struct tensor *rstd,
			  const struct tensor *x, const struct tensor *w, const struct tensor *b,
			  double eps);
	int (*rms_norm)(struct tensor *y, struct tensor *rstd, const struct tensor *x,
			const struct tensor *w, double eps);
	/* Backward of both norms over the last dim C: g has x's shape (any strides);
	 * mean (NULL for RMS norm) and rstd are [..., 1] as the forward returns;
	 * w [C] or NULL. dx (x's shape), dw and db ([C]) are contiguous, each NULL
	 * when not wanted: with xhat = (x - mean) * rstd and dxhat = g * w,
	 * dx = rstd * (dxhat - xhat * mean(dxhat * xhat) - mean(dxhat)) (no
	 * mean(dxhat) for RMS), dw = sum of g * xhat and db = sum of g over rows. */
	int (*norm_backward)(struct tensor *dx, struct tensor *dw, struct tensor *db,
			     const struct tensor *g, const struct tensor *x,
			     const struct tensor *mean, const struct tensor *rstd,
			     const struct tensor *w);
	/* Shapes as tensor_index_select / tensor_index_add_ / tensor_gather /
	 * tensor_scatter_add_ describe; indices already range-checked. dst of the
	 * in-place slots may have any strides. */
	int (*index_select)(struct tensor *out, const struct tensor *src, int dim,
			    const struct tensor *idx);
	int (*index_add)(struct tensor *dst, int dim, const struct tensor *idx,
			 const struct tensor *src);
	int (*gather)(struct tensor *out, const struct tensor *src, int dim,
		      const struct tensor *idx);
	int (*scatter_add)(struct tensor *dst, int dim, const struct tensor *idx,
			   const struct tensor *src);
	/* Optional: check that every index of idx (any strides) is in [0, size)
	 * without waiting for the device; a bad one is reported (op, value,
	 * position, dim, size) by the next synchronisation (op: a string of
	 * static storage). Without it the front-end checks on the host. */
	int (*check_index)(const char *op, const struct tensor *idx, int dim, int64_t size);
	/* One AdamW step in place over contiguous p, m, v, g of one length and float
	 * dtype; h = { lr, beta1, beta2, eps, weight_decay, 1 - beta1^t, 1 - beta2^t }. */
	int (*adamw)(struct tensor *p, struct tensor *m, struct tensor *v, const struct tensor *g,
		     const double *h);
	/* One SGD step in place over contiguous p, g and the momentum buffer buf (NULL
	 * without momentum) of one length and float dtype; h = { lr, momentum,
	 * weight_decay }. */
	int (*sgd)(struct tensor *p, struct tensor *buf, const struct tensor *g, const double *h);
};

/* The table of a device, or NULL (with an error set) if not compiled in. */
const struct tensor_backend *tensor_backend_get(enum tensor_device dev);

extern const struct tensor_backend tensor_cpu_backend;
/* For tests: with fused false, tensor_backend_get(TENSOR_CPU) offers the CPU
 * table without the slots whose callers compose the op from others where a
 * device lacks them (softmax_backward, attention, norm_backward, adamw, sgd), so those
 * composed paths run on the CPU and can be checked against the kernels; true
 * (the default) restores the whole table. Not thread-safe. */
void tensor_cpu_set_fused(bool fused);
/* For tests and benchmarks: run products with bf16 inputs on the CPU kernel named
 * ("portable" or "f32-convert+blis-sgemm", "avx512bf16", "amx", or the emulated twin of
 * either, "avx512bf16-emulated" or "amx-emulated": the same kernel code on its x86
 * intrinsics written in C, slow, on any CPU); NULL restores the default
 * (CFORMER_BF16_GEMM if it names a kernel this CPU runs, else the fastest).
 * TENSOR_ERR_UNSUPPORTED if the CPU lacks the kernel, TENSOR_ERR_ARG for an unknown
 * name; tensor_bf16_gemm_kernel() reports the choice. Not thread-safe. */
int tensor_bf16_gemm_force(const char *name);
/* For tuning (bench_ops --bf16-blocks): the cache blocks of cformer's own bf16 kernels
 * (avx512bf16, amx): kc of k, mc rows of A, nc columns of B (cpu_gemm_bf16.c), each
 * rounded up to the kernel's k step, MR or NR; 0 keeps the kernel's own, so (0, 0, 0)
 * restores the defaults. TENSOR_ERR_ARG for a negative size. Not thread-safe. */
int tensor_bf16_gemm_blocks(int64_t kc, int64_t mc, int64_t nc);
/* For tests: the CPU's fused attention takes blocks of queries whose scores fit in
 * `scores` elements (at least 64 queries); 1 gives blocks of 64 at any S, so that small
 * shapes run in several blocks; 0 restores the default (65,536). Not thread-safe. */
void tensor_cpu_attention_block(int64_t scores);
/* Whether the product of a and b is a bf16 one (f32 operands rounded to bf16, f32
 * accumulation): a bf16 operand beside a bf16 or f32 one, or two f32 ones under
 * tensor_set_matmul_precision(TENSOR_BF16). The front-end and the backends' one rule. */
bool tensor_matmul_in_bf16(const struct tensor *a, const struct tensor *b);
/* gemm_profile.c: whether a GEMM profile runs (one relaxed atomic load), a monotonic
 * clock in seconds, and one timed gemm call added to the profile's table. */
bool gemm_profile_running(void);
double gemm_profile_clock(void);
void gemm_profile_record(const struct tensor_gemm_stat *call, double seconds);
/* One-time CPU backend setup (BLIS kernel set, default threads); idempotent. */
void cpu_init(void);
#ifdef CFORMER_HAVE_CUDA
extern const struct tensor_backend tensor_cuda_backend;
bool tensor_cuda_present(void);
int cuda_set_tf32(bool on);
#endif
#ifdef CFORMER_HAVE_NCCL
/* cuda/cuda_nccl.c: tensor.h's tensor_cuda_comm_id, _comm_init, _sum_across, _comm_free */
int cuda_comm_id(void *id, size_t len);
int cuda_comm_init(const void *id, size_t len, int rank, int size);
int cuda_sum_across(struct tensor *t);
void cuda_comm_free(void);
#endif

/* ---- helpers for front-ends (tensor.c, arena.c) ---------------------------- */

/* Allocate an uninitialised contiguous tensor like tensor_empty, without the
 * argument checks (shape already validated). */
struct tensor *tensor_new(enum tensor_dtype dt, enum tensor_device dev, int ndim,
			  const int64_t *shape);
/* tensor_new of shape sh [ndim] with its memory laid out in the dim order `order`
 * (outermost first; NULL: row-major), returned as a view of shape sh (on the heap it
 * holds the memory alone). */
struct tensor *tensor_new_laid_out(enum tensor_dtype dt, enum tensor_device dev, int ndim,
				   const int64_t *sh, const int *order);
/* A view header sharing t's storage with the given geometry. */
struct tensor *tensor_new_view(const struct tensor *t, int ndim, const int64_t *shape,
			       const int64_t *strides, size_t offset);
/* tensor_expand without the operand check (tensor_check_operand), for front-ends that
 * broadcast operands they have checked or that need no check (in-place ops, comparisons). */
struct tensor *tensor_broadcast_to(const struct tensor *t, int ndim, const int64_t *shape);
/* Broadcast shapes of a and b into out (returns ndim) or -1 with an error
 * naming op. */
int tensor_broadcast_shape(const char *op, const struct tensor *a, const struct tensor *b,
			   int64_t *out);
/* The ceremony of an op front-end, once: the table of dev if it has the slot,
 * else NULL with the error (the device is not available, or "op: not
 * supported on <device>"); and the end of an op that made out: out if rc is
 * TENSOR_OK, else NULL after freeing out. */
#define TENSOR_BACKEND_FOR(dev, slot, op) \
	tensor_backend_for((dev), offsetof(struct tensor_backend, slot), (op))
const struct tensor_backend *tensor_backend_for(enum tensor_device dev, size_t slot,
						const char *op);
struct tensor *tensor_op_result(struct tensor *out, int rc);
/* TENSOR_OK if the slot exists, else an "unsupported" error naming opname. */
#define TENSOR_SLOT(be, slot, opname)                                                         \
	((be)->slot ? TENSOR_OK                                                               \
		    : tensor_error(TENSOR_ERR_UNSUPPORTED, "%s: not supported on %s", opname, \
				   (be)->name))

/* Arena / heap allocation of device memory for a storage (arena.c). */
struct tensor_storage *tensor_storage_alloc(enum tensor_device dev, size_t nbytes);
void tensor_storage_release(struct tensor_storage *s);
/* Allocate a tensor header (arena or heap), and free a heap one (an arena one: nothing). */
struct tensor *tensor_header_alloc(void);
void tensor_header_free(struct tensor *t);

#ifdef __cplusplus
}
#endif

#endif
