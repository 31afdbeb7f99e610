/* The device registry: each device's table (backend.h), whether it is
 * present, and the calls that go to a device as a whole (synchronize, memory,
 * description, TF32). The CPU's table can hide its fused slots for tests of
 * the composed fallbacks. */
#include <stdio.h>
#include <string.h>

#include "backend.h"

/* tensor_cpu_set_fused(false): the CPU table less the slots with composed fallbacks. */
static struct tensor_backend cpu_unfused;
static bool cpu_fused = true;

void tensor_cpu_set_fused(bool fused)
{
	cpu_unfused = tensor_cpu_backend;
	cpu_unfused.softmax_backward = NULL;
	cpu_unfused.attention = NULL;
	cpu_unfused.attention_backward = NULL;
	cpu_unfused.norm_backward = NULL;
	cpu_unfused.adamw = NULL;
	cpu_unfused.sgd = NULL;
	cpu_fused = fused;
}

const struct tensor_backend *tensor_backend_get(enum tensor_device dev)
{
	if (dev == TENSOR_CPU) {
		cpu_init();
		return cpu_fused ? &tensor_cpu_backend : &cpu_unfused;
	}
#ifdef CFORMER_HAVE_CUDA
	if (dev == TENSOR_CUDA) {
		if (tensor_cuda_present())
			return &tensor_cuda_backend;
		tensor_error(TENSOR_ERR_CUDA, "cuda: no CUDA device is available");
		return NULL;
	}
#endif
	tensor_error(TENSOR_ERR_DEVICE, "tensor: device %s is not compiled in",
		     tensor_device_name(dev));
	return NULL;
}

const struct tensor_backend *tensor_backend_for(enum tensor_device dev, size_t slot, const char *op)
{
	const struct tensor_backend *be = tensor_backend_get(dev);
	void (*fn)(void) = NULL;
	if (be)
		memcpy(&fn, (const char *)be + slot, sizeof fn);
	if (be && !fn) {
		tensor_error(TENSOR_ERR_UNSUPPORTED, "%s: not supported on %s", op, be->name);
		return NULL;
	}
	return be;
}

struct tensor *tensor_op_result(struct tensor *out, int rc)
{
	if (rc == TENSOR_OK)
		return out;
	tensor_free(out);
	return NULL;
}

bool tensor_device_available(enum tensor_device dev)
{
	if (dev == TENSOR_CPU)
		return true;
#ifdef CFORMER_HAVE_CUDA
	if (dev == TENSOR_CUDA)
		return tensor_cuda_present();
#endif
	return false;
}

int tensor_device_memory(enum tensor_device dev, size_t *free_bytes, size_t *total_bytes)
{
	if (!free_bytes || !total_bytes)
		return tensor_error(TENSOR_ERR_ARG, "device_memory: output is NULL");
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(dev, mem_info, "device_memory");
	return be ? be->mem_info(free_bytes, total_bytes) : tensor_last_status();
}

const char *tensor_device_describe(enum tensor_device dev, char *buf, size_t len)
{
	const struct tensor_backend *be = tensor_backend_get(dev);
	if (!buf || !len)
		return buf;
	if (be && be->describe)
		be->describe(buf, len);
	else if (be)
		snprintf(buf, len, "%s (BLIS %s kernels, %d threads)", be->name, tensor_blas_arch(),
			 tensor_get_num_threads());
	else
		snprintf(buf, len, "%s: not available", tensor_device_name(dev));
	return buf;
}

int tensor_synchronize(enum tensor_device dev)
{
	const struct tensor_backend *be = tensor_backend_get(dev);
	return be ? be->synchronize() : tensor_last_status();
}

/* ---- sums across processes (NCCL) ---- */

bool tensor_cuda_collectives(void)
{
#ifdef CFORMER_HAVE_NCCL
	return tensor_cuda_present();
#else
	return false;
#endif
}

static int no_collectives(const char *op)
{
	return tensor_error(TENSOR_ERR_UNSUPPORTED,
			    "%s: no sums across processes on CUDA (built without NCCL, or no GPU)",
			    op);
}

int tensor_cuda_comm_id(void *id, size_t len)
{
	if (!id)
		return tensor_error(TENSOR_ERR_ARG, "tensor_cuda_comm_id: id is NULL");
#ifdef CFORMER_HAVE_NCCL
	if (tensor_cuda_present())
		return cuda_comm_id(id, len);
#endif
	(void)len;
	return no_collectives("tensor_cuda_comm_id");
}

int tensor_cuda_comm_init(const void *id, size_t len, int rank, int size)
{
	if (!id)
		return tensor_error(TENSOR_ERR_ARG, "tensor_cuda_comm_init: id is NULL");
#ifdef CFORMER_HAVE_NCCL
	if (tensor_cuda_present())
		return cuda_comm_init(id, len, rank, size);
#endif
	(void)len, (void)rank, (void)size;
	return no_collectives("tensor_cuda_comm_init");
}

int tensor_cuda_sum_across(struct tensor *t)
{
	if (!t)
		return tensor_error(TENSOR_ERR_ARG, "tensor_cuda_sum_across: t is NULL");
#ifdef CFORMER_HAVE_NCCL
	if (t->storage->device == TENSOR_CUDA)
		return cuda_sum_across(t);
#endif
	return no_collectives("tensor_cuda_sum_across");
}

void tensor_cuda_comm_free(void)
{
#ifdef CFORMER_HAVE_NCCL
	cuda_comm_free();
#endif
}

int tensor_cuda_set_tf32(bool on)
{
#ifdef CFORMER_HAVE_CUDA
	if (tensor_cuda_present())
		return cuda_set_tf32(on);
#endif
	(void)on;
	return tensor_error(TENSOR_ERR_UNSUPPORTED, "set_tf32: no CUDA device is available");
}
