/* Data parallelism over processes (nn.h, "data parallelism"): the ranks of an MPI
 * job, each training on its share of every global batch, average their packed
 * gradients. Built without MPI, or run without a launcher, a process is a group of
 * one and every call here is a no-op (or a local step). Collectives run on the host
 * (a device buffer is copied there and back), except CUDA gradients in a build with
 * NCCL, which are summed on the device. */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "nn.h"
#include "optim_internal.h"

#ifdef CFORMER_HAVE_MPI
#include <mpi.h>
#endif

static int dist_rank = 0, dist_size = 1;
static bool device_comm; /* the NCCL communicator of CUDA gradients exists */
#ifdef CFORMER_HAVE_MPI
static bool dist_joined; /* this process called MPI_Init */
#endif

int nn_dist_rank(void)
{
	return dist_rank;
}

int nn_dist_size(void)
{
	return dist_size;
}

void nn_dist_share(int64_t rows, int64_t *lo, int64_t *hi)
{
	int64_t base = rows / dist_size, extra = rows % dist_size, r = dist_rank;
	*lo = r * base + (r < extra ? r : extra);
	*hi = *lo + base + (r < extra ? 1 : 0);
}

/* Host copy of a float buffer t (the tensor itself when it is on the CPU): the
 * pointer to its elements, *copy the tensor to free (NULL when none). */
static void *host_elements(struct tensor *t, struct tensor **copy)
{
	*copy = NULL;
	if (t->storage->device == TENSOR_CPU)
		return tensor_data(t);
	tensor_heap_begin();
	*copy = tensor_to_device(t, TENSOR_CPU);
	tensor_heap_end();
	return *copy ? tensor_data(*copy) : NULL;
}

#ifdef CFORMER_HAVE_MPI
/* The host copy back into t (a device buffer), then freed. */
static int host_return(struct tensor *t, struct tensor *copy)
{
	if (!copy)
		return TENSOR_OK;
	int rc = tensor_copy_(t, copy);
	tensor_free(copy);
	return rc;
}

/* TENSOR_ERR_COMM naming op and MPI's message for code. */
static int mpi_fail(const char *op, const char *call, int code)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;
	if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS)
		snprintf(msg, sizeof msg, "error %d", code);
	return tensor_error(TENSOR_ERR_COMM, "%s: %s failed on rank %d of %d: %s", op, call,
			    dist_rank, dist_size, msg);
}

/* Started by a launcher (mpirun, srun): Open MPI's, PMIx's or PMI's variables. */
static bool launched(void)
{
	return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

static MPI_Datatype mpi_type(enum tensor_dtype dt)
{
	return dt == TENSOR_F64 ? MPI_DOUBLE : MPI_FLOAT;
}
#endif

int nn_dist_init(int *argc, char ***argv)
{
#ifdef CFORMER_HAVE_MPI
	int ready = 0, provided;
	MPI_Initialized(&ready);
	if (!ready) {
		if (!launched())
			return TENSOR_OK;
		int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
		if (rc != MPI_SUCCESS)
			return tensor_error(TENSOR_ERR_COMM, "nn_dist_init: MPI_Init failed (%d)",
					    rc);
		dist_joined = true;
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_rank(MPI_COMM_WORLD, &dist_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &dist_size);
#else
	(void)argc, (void)argv;
#endif
	return TENSOR_OK;
}

void nn_dist_finalize(void)
{
	tensor_cuda_comm_free();
	device_comm = false;
#ifdef CFORMER_HAVE_MPI
	if (dist_joined)
		MPI_Finalize();
	dist_joined = false;
#endif
	dist_rank = 0, dist_size = 1;
}

void nn_dist_abort(int status)
{
#ifdef CFORMER_HAVE_MPI
	if (dist_size > 1)
		MPI_Abort(MPI_COMM_WORLD, status);
#else
	(void)status;
#endif
}

int nn_dist_barrier(void)
{
#ifdef CFORMER_HAVE_MPI
	if (dist_size > 1) {
		int rc = MPI_Barrier(MPI_COMM_WORLD);
		if (rc != MPI_SUCCESS)
			return mpi_fail("nn_dist_barrier", "MPI_Barrier", rc);
	}
#endif
	return TENSOR_OK;
}

int nn_dist_sum(double *v, int n)
{
	if (n < 0 || (n > 0 && !v))
		return tensor_error(TENSOR_ERR_ARG, "nn_dist_sum: %d values at %p", n, (void *)v);
#ifdef CFORMER_HAVE_MPI
	if (dist_size > 1 && n > 0) {
		int rc = MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
		if (rc != MPI_SUCCESS)
			return mpi_fail("nn_dist_sum", "MPI_Allreduce", rc);
	}
#endif
	return TENSOR_OK;
}

int nn_dist_sync_rng(struct nn_params *ps)
{
	if (!ps)
		return tensor_error(TENSOR_ERR_ARG, "nn_dist_sync_rng: no parameters");
#ifdef CFORMER_HAVE_MPI
	if (dist_size > 1) {
		int rc = MPI_Allreduce(MPI_IN_PLACE, &ps->rng_counter, 1, MPI_UINT64_T, MPI_MAX,
				       MPI_COMM_WORLD);
		if (rc != MPI_SUCCESS)
			return mpi_fail("nn_dist_sync_rng", "MPI_Allreduce", rc);
	}
#endif
	return TENSOR_OK;
}

/* The packed buffer t of ps (flat or flat_grad) checked for op: packed, float. */
static int check_packed(const char *op, const struct nn_params *ps, const struct tensor *t)
{
	if (!ps || !t)
		return tensor_error(TENSOR_ERR_STATE,
				    "%s: the parameters are not packed "
				    "(call nn_params_pack first)",
				    op);
	if (t->dtype != TENSOR_F32 && t->dtype != TENSOR_F64)
		return tensor_error(TENSOR_ERR_DTYPE,
				    "%s: packed %s parameters, expected f32 or f64", op,
				    tensor_dtype_name(t->dtype));
	if (tensor_numel(t) / dist_size >= INT_MAX)
		return tensor_error(TENSOR_ERR_UNSUPPORTED,
				    "%s: %lld elements over %d ranks pass MPI's int counts", op,
				    (long long)tensor_numel(t), dist_size);
	return TENSOR_OK;
}

#ifdef CFORMER_HAVE_MPI
/* x[0..n) *= w on the host, in one pass. */
static void scale_host(void *x, int64_t n, enum tensor_dtype dt, double w)
{
	if (w == 1.0)
		return;
	if (dt == TENSOR_F64) {
		double *d = x;
		for (int64_t i = 0; i < n; i++)
			d[i] *= w;
	} else {
		float *f = x, wf = (float)w;
		for (int64_t i = 0; i < n; i++)
			f[i] *= wf;
	}
}

/* Sum the n elements at x over the ranks, in place, every rank ending with the same
 * bits: each rank reduces one contiguous segment (reduce-scatter), then the segments
 * are gathered (all-gather), so each element is summed once, by one rank. */
static int sum_same_bits(void *x, int64_t n, enum tensor_dtype dt)
{
	int *counts = tensor_host_malloc(2 * sizeof(int) * (size_t)dist_size);
	if (!counts)
		return tensor_error(TENSOR_ERR_NOMEM, "nn_dist_average_grads: %d counts",
				    dist_size);
	int *displs = counts + dist_size;
	for (int r = 0, at = 0; r < dist_size; r++) {
		counts[r] = (int)(n / dist_size + (r < n % dist_size));
		displs[r] = at;
		at += counts[r];
	}
	MPI_Datatype type = mpi_type(dt);
	size_t es = tensor_dtype_size(dt);
	int rc = MPI_Reduce_scatter(MPI_IN_PLACE, x, counts, type, MPI_SUM, MPI_COMM_WORLD);
	if (rc == MPI_SUCCESS) { /* this rank's sums came back at the start of x */
		memmove((char *)x + (size_t)displs[dist_rank] * es, x,
			(size_t)counts[dist_rank] * es);
		rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, counts, displs, type,
				    MPI_COMM_WORLD);
		if (rc != MPI_SUCCESS)
			rc = mpi_fail("nn_dist_average_grads", "MPI_Allgatherv", rc);
	} else {
		rc = mpi_fail("nn_dist_average_grads", "MPI_Reduce_scatter", rc);
	}
	free(counts);
	return rc;
}
#endif

static int scale_chunk(struct tensor *const *t, struct update *u)
{
	return optim_store(t[0], tensor_mul_scalar(t[0], u->a[0]));
}

#ifdef CFORMER_HAVE_MPI
/* t summed over the ranks on the device (NCCL), the communicator made at the first call:
 * rank 0 draws its id and broadcasts it with its status, so a failure ends every rank's
 * call with an error rather than a wait. */
static int device_sum(struct tensor *t)
{
	static const char op[] = "nn_dist_average_grads";
	if (!device_comm) {
		unsigned char msg[1 + 128] = { 0 };
		if (dist_rank == 0)
			msg[0] = tensor_cuda_comm_id(msg + 1, sizeof msg - 1) == TENSOR_OK;
		int rc = MPI_Bcast(msg, (int)sizeof msg, MPI_BYTE, 0, MPI_COMM_WORLD);
		if (rc != MPI_SUCCESS)
			return mpi_fail(op, "MPI_Bcast", rc);
		if (!msg[0])
			return dist_rank == 0
				   ? tensor_last_status()
				   : tensor_error(TENSOR_ERR_COMM,
						  "%s: rank 0 could not make an NCCL id", op);
		if ((rc = tensor_cuda_comm_init(msg + 1, sizeof msg - 1, dist_rank, dist_size)) < 0)
			return rc;
		device_comm = true;
	}
	return tensor_cuda_sum_across(t);
}
#endif

int nn_dist_average_grads(struct nn_params *ps, int64_t rows, int64_t total_rows)
{
	static const char op[] = "nn_dist_average_grads";
	int rc = check_packed(op, ps, ps ? ps->flat_grad : NULL);
	if (rc < 0)
		return rc;
	if (rows < 0 || total_rows <= 0 || rows > total_rows)
		return tensor_error(TENSOR_ERR_ARG, "%s: %lld of %lld rows", op, (long long)rows,
				    (long long)total_rows);
	/* each rank's mean gradient, weighted by its share of the global batch */
	double w = (double)rows / (double)total_rows;
	int64_t n = tensor_numel(ps->flat_grad);
	bool on_device = ps->flat_grad->storage->device != TENSOR_CPU && tensor_cuda_collectives();
	if (dist_size == 1 || on_device) {
		struct update u = { .chunk = scale_chunk, .a = { w } };
		if (w != 1.0 && n > 0) {
			ag_no_grad_begin();
			rc = optim_for_chunks(&ps->flat_grad, 1, &u);
			ag_no_grad_end();
		}
		if (rc < 0 || dist_size == 1)
			return rc;
	}
#ifdef CFORMER_HAVE_MPI
	if (on_device)
		return device_sum(ps->flat_grad);
	struct tensor *copy;
	void *x = host_elements(ps->flat_grad, &copy);
	if (!x)
		return tensor_last_status();
	scale_host(x, n, ps->flat_grad->dtype, w);
	rc = sum_same_bits(x, n, ps->flat_grad->dtype);
	int back = host_return(ps->flat_grad, copy);
	return rc < 0 ? rc : back;
#else
	return TENSOR_OK;
#endif
}

int nn_dist_broadcast_params(struct nn_params *ps)
{
	static const char op[] = "nn_dist_broadcast_params";
	int rc = check_packed(op, ps, ps ? ps->flat : NULL);
	if (rc < 0 || dist_size == 1)
		return rc;
#ifdef CFORMER_HAVE_MPI
	struct tensor *copy;
	void *x = host_elements(ps->flat, &copy);
	if (!x)
		return tensor_last_status();
	rc =
	    MPI_Bcast(x, (int)tensor_numel(ps->flat), mpi_type(ps->flat->dtype), 0, MPI_COMM_WORLD);
	rc = rc == MPI_SUCCESS ? TENSOR_OK : mpi_fail(op, "MPI_Bcast", rc);
	int back = host_return(ps->flat, copy);
	return rc < 0 ? rc : back;
#else
	return TENSOR_OK;
#endif
}

/* FNV-1a, 64 bits, of n bytes. */
static uint64_t fnv1a(const unsigned char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

int nn_dist_check_same(struct tensor *t, const char *what, uint64_t *checksum)
{
	static const char op[] = "nn_dist_check_same";
	if (!t || !what || !tensor_is_contiguous(t))
		return tensor_error(TENSOR_ERR_ARG, "%s: expected a contiguous tensor and a name",
				    op);
	struct tensor *copy;
	const unsigned char *x = host_elements(t, &copy);
	if (!x)
		return tensor_last_status();
	uint64_t h = fnv1a(x, tensor_nbytes(t));
	tensor_free(copy);
	if (checksum)
		*checksum = h;
#ifdef CFORMER_HAVE_MPI
	if (dist_size > 1) {
		uint64_t lo = h, hi = h;
		int rc = MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
		if (rc == MPI_SUCCESS)
			rc = MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX,
					   MPI_COMM_WORLD);
		if (rc != MPI_SUCCESS)
			return mpi_fail(op, "MPI_Allreduce", rc);
		if (lo != hi)
			return tensor_error(TENSOR_ERR_STATE,
					    "%s: %s differ between the %d ranks (checksums %016llx "
					    "to %016llx; rank %d has %016llx)",
					    op, what, dist_size, (unsigned long long)lo,
					    (unsigned long long)hi, dist_rank,
					    (unsigned long long)h);
	}
#endif
	return TENSOR_OK;
}
