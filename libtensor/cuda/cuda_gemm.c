/* CUDA GEMM: batches of strided row-major products through cuBLAS.
 *
 * cuBLAS is column-major. A row-major r x c matrix with row stride ld is, to
 * cuBLAS, the c x r matrix of its transpose with leading dimension ld; a
 * matrix with unit row stride is already column-major. So C = A B is computed
 * as C^T = B^T A^T when C is row-major, and as is when C is column-major, each
 * operand transposed or not by its own layout: no operand is ever copied.
 * f32 runs in full f32 unless tensor_cuda_set_tf32(true) allows TF32. */
#include <cublas_v2.h>
#include <limits.h>
#include <pthread.h>

#include "cuda_internal.h"

static cublasHandle_t handle;
static cublasStatus_t handle_status = CUBLAS_STATUS_NOT_INITIALIZED;

static void create_handle(void)
{
	handle_status = cublasCreate(&handle);
	if (handle_status == CUBLAS_STATUS_SUCCESS)
		handle_status = cublasSetStream(handle, cuda_stream());
	if (handle_status == CUBLAS_STATUS_SUCCESS)
		handle_status = cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH);
}

static cublasHandle_t get_handle(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, create_handle);
	return handle_status == CUBLAS_STATUS_SUCCESS ? handle : NULL;
}

int cuda_set_tf32(bool on)
{
	cublasHandle_t h = get_handle();
	if (!h)
		return tensor_error(TENSOR_ERR_CUDA, "set_tf32: cuBLAS: %s",
				    cublasGetStatusString(handle_status));
	cublasStatus_t st =
	    cublasSetMathMode(h, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
	if (st != CUBLAS_STATUS_SUCCESS)
		return tensor_error(TENSOR_ERR_CUDA, "set_tf32: cuBLAS: %s",
				    cublasGetStatusString(st));
	return TENSOR_OK;
}

/* One operand as cuBLAS sees it: transposed or not, leading dimension, batch
 * stride (elements) and element 0. */
struct operand {
	cublasOperation_t op;
	int64_t ld, sb;
	const char *p;
};

/* Strides of an r x c matrix made valid for a size-1 dim (whose stride is
 * free), then its layout: row-major (unit column stride, ld = row stride)
 * or column-major. false if it has neither. */
static bool layout(const struct tensor *t, int64_t r, int64_t c, bool *row_major, int64_t *ld)
{
	int64_t rs = t->strides[1], cs = t->strides[2];
	if (r == 1 && c == 1)
		rs = cs = 1;
	else if (r == 1)
		rs = cs == 1 ? c : 1;
	else if (c == 1)
		cs = rs == 1 ? r : 1;
	if (cs == 1 && rs >= c) {
		*row_major = true;
		*ld = rs > 1 ? rs : 1;
		return true;
	}
	if (rs == 1 && cs >= r) {
		*row_major = false;
		*ld = cs > 1 ? cs : 1;
		return true;
	}
	return false;
}

/* C row-major: operands enter as stored (a row-major X is X^T to cuBLAS, as
 * wanted for C^T = B^T A^T) or transposed. C column-major: the reverse. */
static struct operand operand_of(const struct tensor *t, bool row_major, int64_t ld, bool c_row)
{
	struct operand o = { row_major == c_row ? CUBLAS_OP_N : CUBLAS_OP_T, ld, t->strides[0],
			     (const char *)cuda_ptr(t) };
	return o;
}

static bool fits_int(int64_t v)
{
	return v >= 0 && v <= INT_MAX;
}

int cuda_gemm(struct tensor *c, const struct tensor *a, const struct tensor *b, double alpha,
	      double beta)
{
	static const char op[] = "gemm";
	int64_t batch = c->shape[0], m = c->shape[1], n = c->shape[2], k = a->shape[2];
	if ((c->dtype != TENSOR_F32 && c->dtype != TENSOR_F64) || a->dtype != c->dtype ||
	    b->dtype != c->dtype)
		return tensor_error(TENSOR_ERR_DTYPE,
				    "matmul: expected f32 or f64 on cuda (bf16 not supported yet), "
				    "got %s x %s -> %s",
				    tensor_dtype_name(a->dtype), tensor_dtype_name(b->dtype),
				    tensor_dtype_name(c->dtype));
	if (batch == 0 || m == 0 || n == 0)
		return TENSOR_OK;
	if (k == 0) { /* C = beta C, zeros for beta 0 (cuBLAS leaves k == 0 undefined) */
		if (beta == 1)
			return TENSOR_OK;
		if (beta == 0)
			return cuda_status(cuda_launch_fill(cuda_geom_of(c), batch * m * n, 0, 0), op);
		return cuda_unary(TENSOR_MUL_SCALAR, c, c, beta);
	}
	bool ar, br, cr;
	int64_t lda, ldb, ldc;
	if (!layout(a, m, k, &ar, &lda) || !layout(b, k, n, &br, &ldb) ||
	    !layout(c, m, n, &cr, &ldc))
		return tensor_error(
		    TENSOR_ERR_ARG,
		    "gemm: a matrix of [%lld,%lld] x [%lld,%lld] has no unit stride", (long long)m,
		    (long long)k, (long long)k, (long long)n);
	if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(lda) || !fits_int(ldb) ||
	    !fits_int(ldc) || !fits_int(batch))
		return tensor_error(TENSOR_ERR_SHAPE,
				    "gemm: [%lld,%lld] x [%lld,%lld] (batch %lld) exceeds cuBLAS's "
				    "32-bit sizes",
				    (long long)m, (long long)k, (long long)k, (long long)n,
				    (long long)batch);
	cublasHandle_t h = get_handle();
	if (!h)
		return tensor_error(TENSOR_ERR_CUDA, "gemm: cuBLAS: %s",
				    cublasGetStatusString(handle_status));
	struct operand oa = operand_of(a, ar, lda, cr), ob = operand_of(b, br, ldb, cr);
	/* cuBLAS computes X (p x q) = op(L) op(R): for a row-major C, X = C^T
	 * (n x m) = B^T A^T, else X = C (m x n) = A B. */
	struct operand l = cr ? ob : oa, r = cr ? oa : ob;
	int p = (int)(cr ? n : m), q = (int)(cr ? m : n);
	/* With a shared C (batch stride 0) the products accumulate one by one,
	 * as on the CPU. */
	int64_t calls = c->strides[0] == 0 ? batch : 1, per = c->strides[0] == 0 ? 1 : batch;
	size_t es = tensor_dtype_size(c->dtype);
	cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
	for (int64_t i = 0; i < calls && st == CUBLAS_STATUS_SUCCESS; i++) {
		const char *pl = l.p + i * l.sb * (int64_t)es, *pr = r.p + i * r.sb * (int64_t)es;
		char *pc = cuda_ptr(c);
		if (c->dtype == TENSOR_F32) {
			float fa = (float)alpha, fb = (float)beta;
			st = cublasSgemmStridedBatched(
			    h, l.op, r.op, p, q, (int)k, &fa, (const float *)pl, (int)l.ld, l.sb,
			    (const float *)pr, (int)r.ld, r.sb, &fb, (float *)pc, (int)ldc,
			    c->strides[0], (int)per);
		} else {
			st = cublasDgemmStridedBatched(
			    h, l.op, r.op, p, q, (int)k, &alpha, (const double *)pl, (int)l.ld,
			    l.sb, (const double *)pr, (int)r.ld, r.sb, &beta, (double *)pc,
			    (int)ldc, c->strides[0], (int)per);
		}
	}
	if (st != CUBLAS_STATUS_SUCCESS)
		return tensor_error(TENSOR_ERR_CUDA,
				    "gemm: cuBLAS: %s for [%lld,%lld] x [%lld,%lld] (batch %lld)",
				    cublasGetStatusString(st), (long long)m, (long long)k,
				    (long long)k, (long long)n, (long long)batch);
	return cuda_launched(op);
}
