/* The CUDA backend: its table, the stream, device memory from a caching
 * pool, host transfers through pinned staging buffers, the fault record that
 * kernels report into, and the counters of allocations and synchronisations.
 * The kernels live in the .cu files, GEMM in cuda_gemm.c; the CPU backend is
 * the reference each of them is tested against (tests/test_cuda.c). */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

/* ---- device, stream, errors ------------------------------------------------ */

static bool present;
static cudaStream_t stream;
/* The pool, the staging buffers and the fault record. The backend is driven from one host
 * thread at a time (one stream); cuda_scratch relies on that. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_size_t n_mallocs, n_syncs;

static void probe(void)
{
	int n = 0;
	present = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
	cudaGetLastError();
}

bool tensor_cuda_present(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, probe);
	return present;
}

static void create_stream(void)
{
	if (cudaStreamCreate(&stream) != cudaSuccess) {
		cudaGetLastError();
		stream = NULL;
	}
}

cudaStream_t cuda_stream(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, create_stream);
	return stream;
}

int cuda_status(cudaError_t e, const char *op)
{
	if (e == cudaSuccess)
		return TENSOR_OK;
	cudaGetLastError(); /* reported here: the next launch must not report it again */
	if (e == cudaErrorMemoryAllocation)
		return tensor_error(TENSOR_ERR_NOMEM, "%s: out of device memory (%s)", op,
				    cudaGetErrorString(e));
	return tensor_error(TENSOR_ERR_CUDA, "%s: CUDA error: %s", op, cudaGetErrorString(e));
}

int cuda_launched(const char *op)
{
	return cuda_status(cudaGetLastError(), op);
}

unsigned cuda_blocks(int64_t n, int threads)
{
	static int sms; /* multiprocessors, read once (a benign race: same value) */
	if (!sms) {
		int dev = 0, v = 0;
		cudaGetDevice(&dev);
		sms = cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) ==
				  cudaSuccess &&
			      v > 0
			  ? v
			  : 132;
	}
	int64_t blocks = (n + threads - 1) / threads, cap = (int64_t)sms * 32;
	return (unsigned)(blocks < 1 ? 1 : blocks > cap ? cap : blocks);
}

struct cuda_geom cuda_geom_of(const struct tensor *t)
{
	struct cuda_geom g;
	memset(&g, 0, sizeof g);
	g.ndim = t->ndim;
	g.dtype = (int)t->dtype;
	for (int i = 0; i < t->ndim; i++) {
		g.shape[i] = t->shape[i];
		g.strides[i] = t->strides[i];
	}
	g.base = cuda_ptr(t);
	return g;
}

/* ---- faults found by kernels ---------------------------------------------- */

static struct cuda_fault *fault_host, *fault_dev;

struct cuda_fault *cuda_fault_device(void)
{
	pthread_mutex_lock(&lock);
	if (!fault_dev) {
		void *h = NULL, *d = NULL;
		if (cudaHostAlloc(&h, sizeof *fault_host, cudaHostAllocMapped) == cudaSuccess &&
		    cudaHostGetDevicePointer(&d, h, 0) == cudaSuccess) {
			memset(h, 0, sizeof *fault_host);
			fault_host = h;
			fault_dev = d;
		} else {
			cudaGetLastError();
			if (h)
				cudaFreeHost(h);
		}
	}
	struct cuda_fault *d = fault_dev;
	pthread_mutex_unlock(&lock);
	if (!d)
		tensor_error(TENSOR_ERR_CUDA, "cuda: cannot map the fault record into host memory");
	return d;
}

int cuda_fault_raise(void)
{
	volatile struct cuda_fault *f = fault_host;
	if (!f || f->code == CUDA_FAULT_NONE)
		return TENSOR_OK;
	int rc = tensor_error(TENSOR_ERR_ARG,
			      "%s: index %lld (at position %lld) out of range for dim %d of size "
			      "%lld (found on the device, reported at the next synchronisation)",
			      (const char *)(uintptr_t)f->op, f->value, f->pos, f->dim, f->size);
	f->code = CUDA_FAULT_NONE;
	return rc;
}

/* Wait for the stream, then raise what its kernels found. */
static int sync_stream(const char *op)
{
	atomic_fetch_add(&n_syncs, 1);
	int rc = cuda_status(cudaStreamSynchronize(cuda_stream()), op);
	int fault = cuda_fault_raise();
	return rc < 0 ? rc : fault;
}

/* ---- memory: a caching pool ------------------------------------------------ */

/* Freed allocations are kept per size for the next request of that size (the
 * arena asks for few distinct sizes: its blocks come in size classes, small
 * heap tensors are rounded up here to a power of two, 512 B to 64 KiB), so a
 * steady state calls neither cudaMalloc nor cudaFree (which waits for the
 * whole device). One list per small class, one for the larger sizes. */
#define POOL_MIN_LOG 9
#define POOL_LISTS 9 /* 512 B .. 64 KiB, then the rest */

struct pool_entry {
	struct pool_entry *next;
	void *ptr;
	size_t size;
};
static struct pool_entry *pool[POOL_LISTS];

/* The size an allocation of n bytes takes, and its list. */
static size_t pool_size(size_t n, int *list)
{
	size_t s = (size_t)1 << POOL_MIN_LOG;
	int l = 0;
	while (s < n && l < POOL_LISTS - 1) {
		s <<= 1;
		l++;
	}
	*list = l;
	return s >= n ? s : n;
}

static void cuda_trim(void);

static void *cuda_alloc(size_t n)
{
	int l;
	size_t size = pool_size(n, &l);
	pthread_mutex_lock(&lock);
	for (struct pool_entry **pp = &pool[l]; *pp; pp = &(*pp)->next) {
		if ((*pp)->size == size) {
			struct pool_entry *e = *pp;
			*pp = e->next;
			pthread_mutex_unlock(&lock);
			void *p = e->ptr;
			free(e);
			return p;
		}
	}
	pthread_mutex_unlock(&lock);
	void *p = NULL;
	atomic_fetch_add(&n_mallocs, 1);
	if (cudaMalloc(&p, size) != cudaSuccess) {
		cudaGetLastError(); /* not sticky: clear it */
		/* Give the cache back and try once more. */
		cuda_trim();
		atomic_fetch_add(&n_mallocs, 1);
		if (cudaMalloc(&p, size) != cudaSuccess) {
			cudaGetLastError();
			return NULL;
		}
	}
	return p;
}

static void cuda_free(void *p, size_t n)
{
	struct pool_entry *e = p ? malloc(sizeof *e) : NULL;
	if (!e) {
		if (p) {
			atomic_fetch_add(&n_mallocs, 1);
			cudaFree(p);
		}
		return;
	}
	int l;
	e->ptr = p;
	e->size = pool_size(n, &l);
	pthread_mutex_lock(&lock);
	e->next = pool[l];
	pool[l] = e;
	pthread_mutex_unlock(&lock);
}

static void cuda_trim(void)
{
	for (int l = 0; l < POOL_LISTS; l++) {
		pthread_mutex_lock(&lock);
		struct pool_entry *e = pool[l];
		pool[l] = NULL;
		pthread_mutex_unlock(&lock);
		while (e) {
			struct pool_entry *next = e->next;
			atomic_fetch_add(&n_mallocs, 1);
			cudaFree(e->ptr);
			free(e);
			e = next;
		}
	}
}

static void cuda_counters(size_t *allocs, size_t *syncs)
{
	*allocs = atomic_load(&n_mallocs);
	*syncs = atomic_load(&n_syncs);
}

static void *scratch;
static size_t scratch_size;

void *cuda_scratch(size_t nbytes, const char *op)
{
	if (nbytes <= scratch_size)
		return scratch;
	size_t want = nbytes < (1u << 20) ? 1u << 20 : nbytes + nbytes / 2;
	void *p = cuda_alloc(want);
	if (!p) {
		tensor_error(TENSOR_ERR_NOMEM, "%s: no %zu bytes of device scratch memory", op,
			     nbytes);
		return NULL;
	}
	if (scratch)
		cuda_free(scratch, scratch_size); /* the stream orders its last users */
	scratch = p;
	scratch_size = want;
	return p;
}

/* ---- transfers ------------------------------------------------------------- */

/* Host-to-device copies go through pinned staging buffers, so that they are
 * asynchronous: the source is copied into a free staging slot (one whose last
 * copy the device has read, by its event) and the host goes on. A copy of
 * more than STAGE_MAX bytes goes directly from pageable memory, which the
 * runtime may make wait for the stream (counted as a synchronisation). */
#define STAGE_SLOTS 4
#define STAGE_MAX (64u << 20)

struct stage {
	void *buf;
	size_t size;
	cudaEvent_t done;
	bool pending;
};
static struct stage stages[STAGE_SLOTS];
static int stage_next;

/* A staging slot of at least n bytes whose last copy has finished, or NULL. */
static struct stage *stage_get(size_t n)
{
	struct stage *s = &stages[stage_next];
	stage_next = (stage_next + 1) % STAGE_SLOTS;
	if (s->pending) {
		cudaError_t q = cudaEventQuery(s->done);
		if (q == cudaErrorNotReady) { /* not an error: clear it, then wait */
			cudaGetLastError();
			atomic_fetch_add(&n_syncs, 1);
			q = cudaEventSynchronize(s->done);
		}
		if (q != cudaSuccess) {
			cudaGetLastError();
			return NULL;
		}
		s->pending = false;
	}
	if (!s->done && cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming) != cudaSuccess) {
		cudaGetLastError();
		s->done = NULL;
		return NULL;
	}
	if (s->size < n) {
		size_t want = n < (1u << 20) ? 1u << 20 : n;
		void *b = NULL;
		if (cudaHostAlloc(&b, want, cudaHostAllocDefault) != cudaSuccess) {
			cudaGetLastError();
			return NULL;
		}
		if (s->buf)
			cudaFreeHost(s->buf);
		s->buf = b;
		s->size = want;
	}
	return s;
}

static int cuda_from_host(void *dst, const void *src, size_t n)
{
	static const char op[] = "copy to cuda";
	if (!n)
		return TENSOR_OK;
	pthread_mutex_lock(&lock);
	struct stage *s = n <= STAGE_MAX ? stage_get(n) : NULL;
	int rc;
	if (s) {
		memcpy(s->buf, src, n);
		rc = cuda_status(
		    cudaMemcpyAsync(dst, s->buf, n, cudaMemcpyHostToDevice, cuda_stream()), op);
		if (rc == TENSOR_OK && cudaEventRecord(s->done, cuda_stream()) == cudaSuccess)
			s->pending = true;
		else if (rc == TENSOR_OK) /* no event to wait on: wait for the copy itself */
			rc = cuda_status(cudaStreamSynchronize(cuda_stream()), op);
		pthread_mutex_unlock(&lock);
		return rc;
	}
	pthread_mutex_unlock(&lock);
	atomic_fetch_add(&n_syncs, 1); /* pageable: the runtime may wait for the stream */
	return cuda_status(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, cuda_stream()), op);
}

static int cuda_to_host(void *dst, const void *src, size_t n)
{
	static const char op[] = "copy to host";
	int rc =
	    n ? cuda_status(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, cuda_stream()), op)
	      : TENSOR_OK;
	int sync = sync_stream(op);
	return rc < 0 ? rc : sync;
}

static int cuda_memset_zero(void *p, size_t n)
{
	return cuda_status(cudaMemsetAsync(p, 0, n, cuda_stream()), "memset");
}

static int cuda_synchronize(void)
{
	return sync_stream("synchronize");
}

static int cuda_mem_info(size_t *free_bytes, size_t *total_bytes)
{
	return cuda_status(cudaMemGetInfo(free_bytes, total_bytes), "device_memory");
}

static void cuda_describe(char *buf, size_t len)
{
	int dev = 0, driver = 0, runtime = 0;
	struct cudaDeviceProp p;
	if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
		cudaGetLastError();
		snprintf(buf, len, "cuda: no device properties");
		return;
	}
	cudaDriverGetVersion(&driver);
	cudaRuntimeGetVersion(&runtime);
	snprintf(buf, len,
		 "%s (compute capability %d.%d, %d multiprocessors, %.1f GiB), CUDA driver %d.%d, "
		 "runtime %d.%d",
		 p.name, p.major, p.minor, p.multiProcessorCount,
		 (double)p.totalGlobalMem / (1024.0 * 1024 * 1024), driver / 1000,
		 driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
}

/* ---- fills, copies, random numbers, dropout --------------------------------- */

/* Drop the size-1 dims of the n operands (of one shape) and merge each dim
 * into the previous one where every operand steps through the two as one, so
 * that the kernels compute fewer offsets (a contiguous tensor becomes 1-d). */
static void geom_merge(struct cuda_geom *g, int n)
{
	int nd = 0, ndim = g[0].ndim;
	int64_t shape[CUDA_MAX_DIMS];
	for (int d = 0; d < ndim; d++) {
		int64_t s = g[0].shape[d];
		if (s == 1)
			continue;
		bool merge = nd > 0;
		for (int k = 0; k < n && merge; k++)
			merge = g[k].strides[nd - 1] == g[k].strides[d] * s;
		if (merge) {
			shape[nd - 1] *= s;
			for (int k = 0; k < n; k++)
				g[k].strides[nd - 1] = g[k].strides[d];
			continue;
		}
		shape[nd] = s;
		for (int k = 0; k < n; k++)
			g[k].strides[nd] = g[k].strides[d];
		nd++;
	}
	for (int k = 0; k < n; k++) {
		g[k].ndim = nd;
		for (int d = 0; d < nd; d++)
			g[k].shape[d] = shape[d];
	}
}

static int cuda_copy(struct tensor *dst, const struct tensor *src)
{
	int64_t n = tensor_numel(dst);
	if (!n)
		return TENSOR_OK;
	if (dst->dtype == src->dtype && tensor_is_contiguous(dst) && tensor_is_contiguous(src))
		return cuda_status(cudaMemcpyAsync(cuda_ptr(dst), cuda_ptr(src), tensor_nbytes(dst),
						   cudaMemcpyDeviceToDevice, cuda_stream()),
				   "copy");
	struct cuda_geom g[2] = { cuda_geom_of(dst), cuda_geom_of(src) };
	geom_merge(g, 2);
	int nd = g[0].ndim;
	/* one dtype, rows contiguous on both sides (a broadcast bias, a slice): by rows */
	if (dst->dtype == src->dtype && nd > 0 && g[0].strides[nd - 1] == 1 &&
	    g[1].strides[nd - 1] == 1 && g[0].shape[nd - 1] >= 32) {
		int64_t cols = g[0].shape[nd - 1];
		g[0].ndim = g[1].ndim = nd - 1;
		return cuda_status(cuda_launch_copy_rows(g[0], g[1], n / cols, cols,
							 tensor_dtype_size(dst->dtype)),
				   "copy");
	}
	return cuda_status(cuda_launch_copy(g[0], g[1], n), "copy");
}

static int cuda_fill(struct tensor *dst, double value)
{
	int64_t n = tensor_numel(dst);
	if (!n)
		return TENSOR_OK;
	struct cuda_geom g = cuda_geom_of(dst);
	geom_merge(&g, 1);
	return cuda_status(cuda_launch_fill(g, n, value, 0.0), "fill");
}

static int cuda_arange(struct tensor *dst, double start, double step)
{
	int64_t n = tensor_numel(dst);
	return n ? cuda_status(cuda_launch_fill(cuda_geom_of(dst), n, start, step), "arange")
		 : TENSOR_OK;
}

static int cuda_random(struct tensor *dst, enum tensor_random_kind kind, uint64_t seed, double a,
		       double b)
{
	int64_t n = tensor_numel(dst);
	if (!n)
		return TENSOR_OK;
	return cuda_status(
	    cuda_launch_random(cuda_geom_of(dst), n, kind == TENSOR_RAND_NORMAL, seed, a, b),
	    "random");
}

static int cuda_dropout(struct tensor *out, const struct tensor *x, double p, uint64_t seed,
			uint64_t first)
{
	int64_t n = tensor_numel(out);
	if (!n)
		return TENSOR_OK;
	return cuda_status(cuda_launch_dropout(cuda_ptr(out), cuda_ptr(x), n,
					       out->dtype == TENSOR_F32, p, seed, first),
			   "dropout");
}

const struct tensor_backend tensor_cuda_backend = {
	.name = "cuda",
	.alloc = cuda_alloc,
	.free = cuda_free,
	.memset_zero = cuda_memset_zero,
	.copy_from_host = cuda_from_host,
	.copy_to_host = cuda_to_host,
	.synchronize = cuda_synchronize,
	.trim = cuda_trim,
	.counters = cuda_counters,
	.mem_info = cuda_mem_info,
	.describe = cuda_describe,
	.copy = cuda_copy,
	.fill = cuda_fill,
	.arange = cuda_arange,
	.random = cuda_random,
	.dropout = cuda_dropout,
	.unary = cuda_unary,
	.binary = cuda_binary,
	.where = cuda_where,
	.reduce = cuda_reduce,
	.gemm = cuda_gemm,
	.softmax = cuda_softmax,
	.softmax_backward = cuda_softmax_backward,
	.attention = cuda_attention,
	.attention_backward = cuda_attention_backward,
	.attention_dmax = CUDA_ATTENTION_DMAX,
	.layer_norm = cuda_layer_norm,
	.rms_norm = cuda_rms_norm,
	.norm_backward = cuda_norm_backward,
	.index_select = cuda_index_select,
	.index_add = cuda_index_add,
	.gather = cuda_gather,
	.scatter_add = cuda_scatter_add,
	.check_index = cuda_check_index,
	.adamw = cuda_adamw,
	.sgd = cuda_sgd,
};
