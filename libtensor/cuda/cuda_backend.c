/* The CUDA backend table: device memory through the CUDA runtime and the
 * kernels of cuda_kernels.cu. Slots left NULL report "unsupported"; the CPU
 * backend is the reference each CUDA kernel is tested against. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <string.h>

#include "../backend.h"
#include "cuda_internal.h"

static bool present;

static void probe(void)
{
	int n = 0;
	present = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

bool tensor_cuda_present(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, probe);
	return present;
}

static int check(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return TENSOR_OK;
	return tensor_error(TENSOR_ERR_CUDA, "cuda: %s: %s", what, cudaGetErrorString(e));
}

static void *cuda_alloc(size_t n)
{
	void *p = NULL;
	return cudaMalloc(&p, n) == cudaSuccess ? p : NULL;
}

static void cuda_free(void *p)
{
	cudaFree(p);
}

static int cuda_memset_zero(void *p, size_t n)
{
	return check(cudaMemset(p, 0, n), "memset");
}

static int cuda_from_host(void *dst, const void *src, size_t n)
{
	return check(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "copy to device");
}

static int cuda_to_host(void *dst, const void *src, size_t n)
{
	return check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), "copy to host");
}

static int cuda_sync(void)
{
	return check(cudaDeviceSynchronize(), "synchronize");
}

static struct cuda_geom geom(const struct tensor *t)
{
	struct cuda_geom g;
	memset(&g, 0, sizeof g);
	g.ndim = t->ndim;
	g.dtype = (int)t->dtype;
	for (int i = 0; i < t->ndim; i++) {
		g.shape[i] = t->shape[i];
		g.strides[i] = t->strides[i];
	}
	g.base = (char *)t->storage->data + t->offset * tensor_dtype_size(t->dtype);
	return g;
}

static int cuda_copy(struct tensor *dst, const struct tensor *src)
{
	int64_t n = tensor_numel(dst);
	return n ? check(cuda_launch_copy(geom(dst), geom(src), n), "copy kernel") : TENSOR_OK;
}

static int cuda_fill(struct tensor *dst, double value)
{
	int64_t n = tensor_numel(dst);
	return n ? check(cuda_launch_fill(geom(dst), n, value, 0.0), "fill kernel") : TENSOR_OK;
}

static int cuda_arange(struct tensor *dst, double start, double step)
{
	int64_t n = tensor_numel(dst);
	return n ? check(cuda_launch_fill(geom(dst), n, start, step), "arange kernel") : TENSOR_OK;
}

static int cuda_random(struct tensor *dst, enum tensor_random_kind kind, uint64_t seed, double a,
		       double b)
{
	int64_t n = tensor_numel(dst);
	if (!n)
		return TENSOR_OK;
	return check(cuda_launch_random(geom(dst), n, kind == TENSOR_RAND_NORMAL, seed, a, b),
		     "random kernel");
}

static int cuda_dropout(struct tensor *out, const struct tensor *x, double p, uint64_t seed)
{
	size_t es = tensor_dtype_size(x->dtype);
	return check(cuda_launch_dropout((char *)out->storage->data + out->offset * es,
					 (const char *)x->storage->data + x->offset * es,
					 tensor_numel(out), out->dtype == TENSOR_F32, p, seed),
		     "dropout kernel");
}

const struct tensor_backend tensor_cuda_backend = {
	.name = "cuda",
	.alloc = cuda_alloc,
	.free = cuda_free,
	.memset_zero = cuda_memset_zero,
	.copy_from_host = cuda_from_host,
	.copy_to_host = cuda_to_host,
	.synchronize = cuda_sync,
	.copy = cuda_copy,
	.fill = cuda_fill,
	.arange = cuda_arange,
	.random = cuda_random,
	.dropout = cuda_dropout,
};
