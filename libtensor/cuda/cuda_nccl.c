/* Sums of CUDA tensors across processes with NCCL, on the backend's stream (tensor.h,
 * "collectives"): one communicator per process, made from an id that one process draws
 * and the others receive by their own means (nn/dist.c sends it over MPI). */
#include <nccl.h>
#include <string.h>

#include "cuda_internal.h"

static ncclComm_t comm;
static bool comm_ready;

static int nccl_fail(const char *op, ncclResult_t r)
{
	return tensor_error(TENSOR_ERR_COMM, "%s: NCCL: %s", op, ncclGetErrorString(r));
}

int cuda_comm_id(void *id, size_t len)
{
	ncclUniqueId u;
	if (len < sizeof u)
		return tensor_error(TENSOR_ERR_ARG,
				    "tensor_cuda_comm_id: %zu bytes, NCCL's id takes %zu", len,
				    sizeof u);
	ncclResult_t r = ncclGetUniqueId(&u);
	if (r != ncclSuccess)
		return nccl_fail("tensor_cuda_comm_id", r);
	memcpy(id, &u, sizeof u);
	return TENSOR_OK;
}

int cuda_comm_init(const void *id, size_t len, int rank, int size)
{
	static const char op[] = "tensor_cuda_comm_init";
	ncclUniqueId u;
	if (len < sizeof u || size < 1 || rank < 0 || rank >= size)
		return tensor_error(TENSOR_ERR_ARG,
				    "%s: rank %d of %d, an id of %zu bytes (%zu wanted)", op, rank,
				    size, len, sizeof u);
	cuda_comm_free();
	memcpy(&u, id, sizeof u);
	ncclResult_t r = ncclCommInitRank(&comm, size, u, rank);
	if (r != ncclSuccess)
		return nccl_fail(op, r);
	comm_ready = true;
	return TENSOR_OK;
}

int cuda_sum_across(struct tensor *t)
{
	static const char op[] = "tensor_cuda_sum_across";
	if (!comm_ready)
		return tensor_error(TENSOR_ERR_STATE, "%s: no communicator (tensor_cuda_comm_init)",
				    op);
	if (!tensor_is_contiguous(t) || (t->dtype != TENSOR_F32 && t->dtype != TENSOR_F64))
		return tensor_error(TENSOR_ERR_ARG, "%s: expected a contiguous f32 or f64 tensor",
				    op);
	void *p = cuda_ptr(t);
	ncclResult_t r = ncclAllReduce(p, p, (size_t)tensor_numel(t),
				       t->dtype == TENSOR_F32 ? ncclFloat32 : ncclFloat64, ncclSum,
				       comm, cuda_stream());
	return r == ncclSuccess ? TENSOR_OK : nccl_fail(op, r);
}

void cuda_comm_free(void)
{
	if (comm_ready)
		ncclCommDestroy(comm);
	comm_ready = false;
}
