/* cformer libtensor: strided tensor views over refcounted device storage.
 *
 * A tensor is a view: storage (bytes on one device) + dtype + shape + strides
 * (in elements) + offset. Views never copy. Every op front-end validates its
 * inputs, sets a thread-local error message on failure (tensor_last_error())
 * and returns NULL or a negative status; an op given a NULL input returns NULL
 * and keeps the first error, so a whole computation can be checked once.
 *
 * Memory: inside a scope (tensor_scope_begin/end) every tensor an op returns is
 * bump-allocated from the scope's arena and released together when the scope
 * ends; tensor_free() on it is a no-op. Outside any scope, results are
 * persistent heap tensors owned by the caller (tensor_free()).
 */
#ifndef CFORMER_TENSOR_H
#define CFORMER_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TENSOR_MAX_DIMS 8

/* ---- status --------------------------------------------------------------- */

enum tensor_status {
	TENSOR_OK = 0,
	TENSOR_ERR_SHAPE = -1,	     /* incompatible or invalid shapes, dims */
	TENSOR_ERR_DTYPE = -2,	     /* unsupported or mismatched dtype */
	TENSOR_ERR_DEVICE = -3,	     /* operands on different devices */
	TENSOR_ERR_NOMEM = -4,	     /* allocation failed or size overflow */
	TENSOR_ERR_UNSUPPORTED = -5, /* backend lacks the primitive */
	TENSOR_ERR_IO = -6,	     /* file or stream error */
	TENSOR_ERR_ARG = -7,	     /* bad argument (NULL, range) */
	TENSOR_ERR_CUDA = -8,	     /* CUDA runtime or cuBLAS failure */
	TENSOR_ERR_STATE = -9,	     /* misuse: scope mismatch, in-place on saved */
	TENSOR_ERR_COMM = -10,	     /* communication between processes (MPI) failed */
};

/* The message of the first error since the last tensor_clear_error() in this
 * thread ("matmul: inner dims differ: [8,64] x [32,16]"), or "" if none. */
const char *tensor_last_error(void);
/* The status of that first error, TENSOR_OK if none. */
int tensor_last_status(void);
/* Forget the recorded error of this thread. */
void tensor_clear_error(void);
/* Record an error (printf-style message) unless one is already recorded;
 * returns status so callers can `return tensor_error(...)`. For op authors. */
int tensor_error(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Human-readable name of a status code. */
const char *tensor_status_string(int status);

/* ---- dtypes and devices --------------------------------------------------- */

/* bf16 (bfloat16: the top half of an f32, 2 bytes) is a storage and GEMM input
 * dtype: tensors of it can be made, filled, copied, cast (f32/f64 -> bf16
 * rounds to nearest even, bf16 -> f32/f64 is exact), moved between devices,
 * viewed, joined (concat, stack, split), printed and multiplied
 * (tensor_matmul, tensor_matmul_to: f32 accumulation); every other op refuses
 * it with TENSOR_ERR_DTYPE naming the op (cast to f32 first). */
enum tensor_dtype { TENSOR_F32, TENSOR_F64, TENSOR_I32, TENSOR_I64, TENSOR_BF16, TENSOR_NDTYPES };
enum tensor_device { TENSOR_CPU, TENSOR_CUDA, TENSOR_NDEVICES };

size_t tensor_dtype_size(enum tensor_dtype dt);
const char *tensor_dtype_name(enum tensor_dtype dt);
const char *tensor_device_name(enum tensor_device dev);
/* true if the device's backend was compiled in and a device is present. */
bool tensor_device_available(enum tensor_device dev);
/* Free and total bytes of a device's memory as its driver reports them;
 * TENSOR_ERR_UNSUPPORTED for the CPU (whose memory /proc/meminfo describes). */
int tensor_device_memory(enum tensor_device dev, size_t *free_bytes, size_t *total_bytes);
/* One line about the device into buf (CUDA: name, compute capability, memory,
 * driver and runtime versions; the CPU: its BLIS kernel set); returns buf. */
const char *tensor_device_describe(enum tensor_device dev, char *buf, size_t len);
/* Wait until the device has finished the work queued so far. Device kernels
 * run asynchronously: an index out of range they found (TENSOR_ERR_ARG,
 * naming the op) is reported here or by the next copy to the host. */
int tensor_synchronize(enum tensor_device dev);
/* Let f32 matrix products on CUDA use TF32 tensor cores (inputs rounded to a
 * 10-bit mantissa, f32 accumulation: about 1e-3 relative error, several times
 * the f32 rate). Off by default, so that CUDA matches the CPU to f32
 * rounding. TENSOR_ERR_UNSUPPORTED without a CUDA device. */
int tensor_cuda_set_tf32(bool on);

struct tensor;
/* Sums of CUDA tensors across processes, on the device (NCCL; data parallelism,
 * nn_dist_*). Without NCCL compiled in or a GPU: false, and TENSOR_ERR_UNSUPPORTED. */
bool tensor_cuda_collectives(void);
/* A new communicator's id (NCCL's, 128 bytes) into id[0..len); one process draws it and
 * hands it to the others (nn/dist.c broadcasts it over MPI). */
int tensor_cuda_comm_id(void *id, size_t len);
/* Join the communicator of id as rank of size, in place of this process's earlier one
 * (TENSOR_ERR_COMM naming NCCL's error). */
int tensor_cuda_comm_init(const void *id, size_t len, int rank, int size);
/* t (CUDA, contiguous, f32 or f64) becomes its sum over the communicator's processes, in
 * place, queued on the device's stream. */
int tensor_cuda_sum_across(struct tensor *t);
/* Leave the communicator (nothing without one). */
void tensor_cuda_comm_free(void);

/* ---- the tensor ----------------------------------------------------------- */

struct tensor_storage {
	void *data; /* device pointer */
	size_t nbytes;
	enum tensor_device device;
	int refcount; /* heap storage only; arena storage ignores it */
	bool in_arena;
	int tape_refs; /* autograd nodes that saved a view of it */
};

struct ag_node;

struct tensor {
	struct tensor_storage *storage;
	size_t offset; /* in elements */
	int64_t shape[TENSOR_MAX_DIMS];
	int64_t strides[TENSOR_MAX_DIMS]; /* in elements; 0 = broadcast */
	int ndim;
	enum tensor_dtype dtype;
	bool in_arena; /* header lives in a scope arena */
	/* autograd (autograd/ owns these; libtensor only carries them) */
	bool requires_grad;
	struct tensor *grad;
	struct ag_node *node;
};

int64_t tensor_numel(const struct tensor *t);
size_t tensor_nbytes(const struct tensor *t);	   /* numel * dtype size */
bool tensor_is_contiguous(const struct tensor *t); /* row-major, no gaps */
/* Host address of element 0 (CPU tensors; NULL for other devices). */
void *tensor_data(const struct tensor *t);
/* Canonical dim: -1 is the last; returns -1 and sets an error naming op if
 * out of range. */
int tensor_dim_wrap(const char *op, int dim, int ndim);
/* Format a shape as "[2,3,4]" into buf (at least 128 bytes); returns buf. */
const char *tensor_shape_str(const struct tensor *t, char *buf, size_t len);
/* true if a and b have identical ndim and shape. */
bool tensor_same_shape(const struct tensor *a, const struct tensor *b);
/* Argument checks for op authors; each sets an error naming op and returns
 * its status. Non-NULL, same device, same dtype: */
int tensor_check_pair(const char *op, const struct tensor *a, const struct tensor *b);
/* Non-NULL and f32 or f64: */
int tensor_check_float(const char *op, const struct tensor *t);
/* Non-NULL and not bf16 (for ops that compute only in f32/f64 and integers): */
int tensor_check_not_bf16(const char *op, const struct tensor *t);
/* The arguments of tensor_conv1d (x [B, C_in, L], w [C_out, C_in, K], bias
 * [C_out] or NULL, stride >= 1, padding >= 0, K <= L + 2 padding): */
int tensor_check_conv1d(const struct tensor *x, const struct tensor *w, const struct tensor *bias,
			int64_t stride, int64_t padding);

/* ---- creation (NULL + error on failure) ----------------------------------- */
/* shape has ndim entries, each >= 0 (0 gives an empty tensor); ndim <= 8.   */

struct tensor *tensor_empty(enum tensor_dtype dt, enum tensor_device dev, int ndim,
			    const int64_t *shape);
struct tensor *tensor_zeros(enum tensor_dtype dt, enum tensor_device dev, int ndim,
			    const int64_t *shape);
struct tensor *tensor_ones(enum tensor_dtype dt, enum tensor_device dev, int ndim,
			   const int64_t *shape);
struct tensor *tensor_full(enum tensor_dtype dt, enum tensor_device dev, int ndim,
			   const int64_t *shape, double value);
/* 1-d [start, start+step, ...) with ceil((end-start)/step) elements; step != 0. */
struct tensor *tensor_arange(enum tensor_dtype dt, enum tensor_device dev, double start, double end,
			     double step);
/* Copy numel elements of dtype dt from host memory `data`. */
struct tensor *tensor_from_data(enum tensor_dtype dt, enum tensor_device dev, int ndim,
				const int64_t *shape, const void *data);
/* Uniform in [lo, hi) and normal(mean, std) from a counter-based generator:
 * element i of the result is a pure function of (seed, i), so the same seed
 * and shape give the same numbers on every backend and thread count. Float
 * dtypes only. */
struct tensor *tensor_rand_uniform(enum tensor_dtype dt, enum tensor_device dev, int ndim,
				   const int64_t *shape, uint64_t seed, double lo, double hi);
struct tensor *tensor_rand_normal(enum tensor_dtype dt, enum tensor_device dev, int ndim,
				  const int64_t *shape, uint64_t seed, double mean, double std);
/* Fill t (any strides) in place; float dtypes for the random fills. */
int tensor_fill_(struct tensor *t, double value);
int tensor_uniform_(struct tensor *t, uint64_t seed, double lo, double hi);
int tensor_normal_(struct tensor *t, uint64_t seed, double mean, double std);

/* TENSOR_OK if t may be modified in place, else TENSOR_ERR_STATE naming op:
 * the autograd tape saved t's storage for a backward that has not run yet.
 * Every in-place op (tensor_*_) checks this. */
int tensor_check_writable(const char *op, const struct tensor *t);

/* Release a heap tensor (drops its storage reference) and its gradient t->grad
 * if it has one: a leaf's gradient belongs to the leaf, and this is the one way
 * to free it (never free t->grad on its own; a scoped leaf's gradient goes when
 * the leaf's scope ends). No-op on NULL and on scope-allocated tensors. */
void tensor_free(struct tensor *t);

/* ---- views (share storage, never copy) ------------------------------------ */

/* A new header with t's geometry over the same storage. */
struct tensor *tensor_alias(const struct tensor *t);
/* Reshape/view: t must be contiguous, numel must match; one entry may be -1. */
struct tensor *tensor_view(const struct tensor *t, int ndim, const int64_t *shape);
/* Like view, but copies (tensor_contiguous) when t is not contiguous. */
struct tensor *tensor_reshape(const struct tensor *t, int ndim, const int64_t *shape);
/* perm is a permutation of 0..ndim-1. */
struct tensor *tensor_permute(const struct tensor *t, const int *perm);
/* t's dims in the order its memory nests them, outermost first (by stride, largest first;
 * equal strides keep their order) into order[t->ndim]; returns whether that differs from
 * 0..ndim-1. A permuted view of a contiguous buffer gives back the buffer's order. */
bool tensor_dim_order(const struct tensor *t, int *order);
struct tensor *tensor_transpose(const struct tensor *t, int d0, int d1);
/* Elements [start, start+len) along dim. */
struct tensor *tensor_narrow(const struct tensor *t, int dim, int64_t start, int64_t len);
/* Python-like slice [start:end:step] along dim (negative start/end count from
 * the end, clamped; step >= 1). */
struct tensor *tensor_slice(const struct tensor *t, int dim, int64_t start, int64_t end,
			    int64_t step);
/* Remove index `index` of dim (drops the dim). */
struct tensor *tensor_select(const struct tensor *t, int dim, int64_t index);
/* Broadcast to shape (stride 0 on expanded dims; sizes must be 1 or equal;
 * new leading dims allowed). */
struct tensor *tensor_expand(const struct tensor *t, int ndim, const int64_t *shape);
struct tensor *tensor_squeeze(const struct tensor *t, int dim);	  /* dim of size 1 */
struct tensor *tensor_unsqueeze(const struct tensor *t, int dim); /* 0..ndim */
/* Sliding windows of `size` every `step` along dim, appended as a new last
 * dim of length size (overlapping when step < size). */
struct tensor *tensor_unfold(const struct tensor *t, int dim, int64_t size, int64_t step);

/* ---- copies --------------------------------------------------------------- */

/* t's values, contiguous: a new view of t's storage if t already is, else a
 * copy. Always a new tensor (free it outside scopes). */
struct tensor *tensor_contiguous(const struct tensor *t);
struct tensor *tensor_clone(const struct tensor *t);
struct tensor *tensor_to_device(const struct tensor *t, enum tensor_device dev);
/* Copy src into dst (same shape; src may broadcast; dtypes converted). */
int tensor_copy_(struct tensor *dst, const struct tensor *src);
/* Move heap tensor t into storage of base: t becomes a contiguous view of
 * base's storage starting at element offset (of base's storage, after
 * base->offset), keeping its shape, dtype and values; its old storage is
 * released. For packing parameters into one flat buffer. Errors: dtype or
 * device mismatch, range outside base, t not a heap tensor. */
int tensor_rebase_(struct tensor *t, const struct tensor *base, int64_t offset);
/* Copy the (contiguous) contents to host memory of nbytes. */
int tensor_to_host(const struct tensor *t, void *dst, size_t nbytes);
/* Element at a multi-index, as double (debugging and tests; any device). */
double tensor_get(const struct tensor *t, const int64_t *index);
/* Print shape, dtype, device and (up to a few) values, for debugging. */
void tensor_print(const struct tensor *t, const char *name, FILE *f);

/* ---- memory: scopes, arenas, accounting ----------------------------------- */

/* Open a scope: tensors created until the matching end live in its arena.
 * Scopes nest (per thread). A view made inside a scope does not hold a
 * reference on a heap tensor's storage: keep the base alive until the scope
 * ends. */
void tensor_scope_begin(void);
/* Release every tensor of the innermost scope. Returns TENSOR_ERR_STATE if no
 * scope is open. */
int tensor_scope_end(void);
/* Copy t (a tensor of the innermost scope) into the enclosing scope (or onto
 * the heap if the innermost scope is the outermost) and return the copy, which
 * survives tensor_scope_end(). Call before ending the scope. */
struct tensor *tensor_scope_keep(const struct tensor *t);
/* Depth of open scopes in this thread (0 = none). */
int tensor_scope_depth(void);
/* Between these calls, tensors are created on the heap even inside a scope
 * (for state that outlives the step, e.g. gradients of parameters). Nest. */
void tensor_heap_begin(void);
void tensor_heap_end(void);
/* Register a function called with the depth of each scope about to end,
 * before its memory is released (autograd drops the nodes recorded in it).
 * One hook per process; NULL removes it. */
void tensor_scope_set_end_hook(void (*hook)(int depth));

/* The count of device allocations made in scopes so far, for
 * tensor_scope_release_since(). */
uint64_t tensor_scope_mark(void);
/* Release early the data of the tensors made in the scope at depth
 * scope_depth (1 = outermost) since mark, except the blocks that also hold
 * data made before it or keep[0..nkeep)'s data (keep may hold NULLs). The
 * headers stay; reading a released tensor's data is an error the library
 * cannot detect, so this is for owners of the whole scope, such as
 * ag_backward_release(). No-op for a depth not open or past the nesting
 * limit (64). */
void tensor_scope_release_since(int scope_depth, uint64_t mark, const struct tensor *const *keep,
				int nkeep);
struct tensor_mem_stats {
	size_t live_bytes;	    /* heap storage + arena bytes in use */
	size_t peak_bytes;	    /* max of live_bytes since the last reset */
	size_t reserved_bytes;	    /* arena and recycled blocks held (in use or cached) */
	size_t peak_reserved_bytes; /* max of reserved_bytes since the last reset */
	size_t n_device_allocs;	    /* calls that reached the device's allocator so far
				       (on CUDA: cudaMalloc and cudaFree) */
	size_t n_syncs;		    /* host waits for the device so far (0 on the CPU) */
};
/* Counters of a device (tensor data only, not headers). Small heap tensors
 * come from the device allocator and count as live only; heap tensors of 64
 * KiB or more and all arena memory come from blocks that also count as
 * reserved, so reserved_bytes + small heap tensors is what the device really
 * holds. */
struct tensor_mem_stats tensor_mem_stats(enum tensor_device dev);
/* Set peak_bytes to the current live_bytes and peak_reserved_bytes to the
 * current reserved_bytes. */
void tensor_mem_reset_peak(enum tensor_device dev);
/* Return the blocks this thread keeps for reuse (of ended scopes and freed
 * heap tensors), and what a device's caching allocator holds, to the device;
 * blocks in use stay. */
void tensor_mem_trim(void);
/* The heap tensors alive now, in all threads: those made outside any scope (or under
 * tensor_heap_begin) and not yet freed with tensor_free. A count that grows from one
 * training step to the next is a leak (the debug mode reports it, tensor_set_debug). */
int64_t tensor_heap_tensors(void);
/* For tests of the error paths: make the n-th allocation of this thread (a
 * tensor's header or data, or one of the library's own heap buffers; n = 0:
 * the next one) fail once as out of memory, or disarm with n < 0. Returns the
 * number of allocations this thread made since the previous call, so a caller
 * can tell whether the failure fired (more than n). */
int64_t tensor_mem_inject_failure(int64_t n);

/* ---- debug mode ----------------------------------------------------------- */

/* The debug mode, for developing a model (CFORMER_DEBUG=1 in the environment, read at
 * first use, or tensor_set_debug): memory released by a scope's end (or by
 * tensor_scope_release_since) is poisoned, so that a tensor read after its scope ended
 * shows it: its header fails every op and read with TENSOR_ERR_STATE ("... is a tensor of
 * a scope that has ended"), and its CPU data reads as NaN (-1 in integers); the blocks of
 * an ended scope are not reused until the next outermost scope ends. It also reports, on
 * stderr, a step that leaves heap tensors behind: when the count of live heap tensors
 * (tensor_mem_stats) has grown at each of 4 outermost tensor_scope_begin() calls in a row,
 * the usual sign of a batch made before the step's scope and never freed. It costs a
 * memset of every released block. */
void tensor_set_debug(bool on);
bool tensor_debug(void);

/* ---- threads and CPU backend info ----------------------------------------- */

/* Threads for BLIS and OpenMP kernels; n <= 0 restores the default: the
 * environment variable CFORMER_NUM_THREADS if set, else the CPUs this process
 * may run on less those other processes keep busy (half or more of a 50 ms
 * look at /proc/stat), at least 1. The default is taken when the library
 * starts and at each call with n <= 0; it does not follow later load. */
void tensor_set_num_threads(int n);
int tensor_get_num_threads(void);
/* The BLIS kernel set in use ("skx", "haswell", ...). The library selects the
 * fastest set the CPU supports at first use unless BLIS_ARCH_TYPE is set. */
const char *tensor_blas_arch(void);
/* The CPU kernel of matrix products with bf16 inputs: "amx" (own kernel on AMX
 * tiles, f32 accumulation) where the CPU has AMX-BF16, else "avx512bf16" (own
 * kernel on vdpbf16ps) where it has AVX512-BF16, else "f32-convert+blis-sgemm"
 * (the inputs converted exactly to f32, then BLIS's sgemm with the kernel set
 * of tensor_blas_arch()). Chosen at first use; the environment variable
 * CFORMER_BF16_GEMM=portable|avx512bf16|amx overrides (a kernel the CPU lacks
 * is ignored), as do avx512bf16-emulated and amx-emulated, the two kernels'
 * code on their intrinsics written in C, which run on any CPU (slowly: for
 * tests). */
const char *tensor_bf16_gemm_kernel(void);

#ifdef __cplusplus
}
#endif

#include "tensor_ops.h"

#endif
