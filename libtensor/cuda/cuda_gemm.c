/* CUDA GEMM: batches of strided row-major products through cuBLAS.
 *
 * cuBLAS is column-major. A row-major r x c matrix with row stride ld is, to
 * cuBLAS, the c x r matrix of its transpose with leading dimension ld; a
 * matrix with unit row stride is already column-major. So C = A B is computed
 * as C^T = B^T A^T when C is row-major, and as is when C is column-major, each
 * operand transposed or not by its own layout: no f32 or f64 operand is ever copied.
 * f32 runs in full f32 unless tensor_cuda_set_tf32(true) allows TF32. bf16 products
 * (bf16 operands, or f32 ones under tensor_set_matmul_precision(bf16)) run on the tensor
 * cores with f32 accumulation, as the CPU's bf16 kernels do (gemm_bf16). */
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

/* One operand of the slot: element 0, dtype, batch, row and column strides (elements). */
struct mat {
	char *p;
	enum tensor_dtype dt;
	int64_t sb, rs, cs;
};

static struct mat mat_of(const struct tensor *t)
{
	return (struct mat){ (char *)cuda_ptr(t), t->dtype, t->strides[0], t->strides[1],
			     t->strides[2] };
}

/* Strides of an r x c matrix made valid for a size-1 dim (whose stride is
 * free), then its layout: row-major (unit column stride, ld = row stride)
 * or column-major. false if it has neither. */
static bool layout(const struct mat *x, int64_t r, int64_t c, bool *row_major, int64_t *ld)
{
	int64_t rs = x->rs, cs = x->cs;
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

static bool fits_int(int64_t v)
{
	return v >= 0 && v <= INT_MAX;
}

/* cuBLAS's type of a dtype. */
static cudaDataType_t cublas_type(enum tensor_dtype dt)
{
	return dt == TENSOR_F64 ? CUDA_R_64F : dt == TENSOR_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* x, nb matrices of r x c, copied into the contiguous buffer at dst as dtype dt (an f32
 * rounded to bf16 to nearest even, as the CPU's kernels pack it); x becomes the copy. */
static int convert(struct mat *x, int64_t nb, int64_t r, int64_t c, enum tensor_dtype dt, void *dst)
{
	struct cuda_geom gd = { 3, dt, { nb, r, c }, { r * c, c, 1 }, dst };
	struct cuda_geom gs = { 3, x->dt, { nb, r, c }, { x->sb, x->rs, x->cs }, x->p };
	*x = (struct mat){ (char *)dst, dt, x->sb ? r * c : 0, c, 1 };
	return cuda_status((cudaError_t)cuda_launch_copy(gd, gs, nb * r * c), "gemm");
}

/* C = alpha A B + beta C through cuBLAS, operands as they lie. cuBLAS computes X (p x q)
 * = op(L) op(R): for a row-major C, X = C^T (n x m) = B^T A^T, each operand entering as
 * stored (a row-major matrix is its transpose to cuBLAS) or transposed; for a
 * column-major C, X = C = A B. With a shared C (batch stride 0) the products accumulate
 * one by one, as on the CPU. bf16 A and B (with an f32 or bf16 C) run on the tensor
 * cores with f32 accumulation. */
static int gemm_cublas(cublasHandle_t h, const struct mat *a, const struct mat *b,
		       const struct mat *c, int64_t batch, int64_t m, int64_t n, int64_t k,
		       double alpha, double beta)
{
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
	const struct mat *l = cr ? b : a, *r = cr ? a : b;
	cublasOperation_t opl = (cr ? br : ar) == cr ? CUBLAS_OP_N : CUBLAS_OP_T;
	cublasOperation_t opr = (cr ? ar : br) == cr ? CUBLAS_OP_N : CUBLAS_OP_T;
	int ldl = (int)(cr ? ldb : lda), ldr = (int)(cr ? lda : ldb);
	int p = (int)(cr ? n : m), q = (int)(cr ? m : n);
	int64_t calls = c->sb == 0 ? batch : 1, per = c->sb == 0 ? 1 : batch;
	size_t el = tensor_dtype_size(l->dt);
	float fa = (float)alpha, fb = (float)beta;
	cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
	for (int64_t i = 0; i < calls && st == CUBLAS_STATUS_SUCCESS; i++) {
		const char *pl = l->p + i * l->sb * (int64_t)el,
			   *pr = r->p + i * r->sb * (int64_t)el;
		if (l->dt == TENSOR_BF16)
			st = cublasGemmStridedBatchedEx(
			    h, opl, opr, p, q, (int)k, &fa, pl, CUDA_R_16BF, ldl, l->sb, pr,
			    CUDA_R_16BF, ldr, r->sb, &fb, c->p, cublas_type(c->dt), (int)ldc, c->sb,
			    (int)per, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
		else if (c->dt == TENSOR_F32)
			st = cublasSgemmStridedBatched(h, opl, opr, p, q, (int)k, &fa,
						       (const float *)pl, ldl, l->sb,
						       (const float *)pr, ldr, r->sb, &fb,
						       (float *)c->p, (int)ldc, c->sb, (int)per);
		else
			st = cublasDgemmStridedBatched(h, opl, opr, p, q, (int)k, &alpha,
						       (const double *)pl, ldl, l->sb,
						       (const double *)pr, ldr, r->sb, &beta,
						       (double *)c->p, (int)ldc, c->sb, (int)per);
	}
	if (st != CUBLAS_STATUS_SUCCESS)
		return tensor_error(TENSOR_ERR_CUDA,
				    "gemm: cuBLAS: %s for [%lld,%lld] x [%lld,%lld] (batch %lld)",
				    cublasGetStatusString(st), (long long)m, (long long)k,
				    (long long)k, (long long)n, (long long)batch);
	return cuda_launched("gemm");
}

/* Bytes of nb r x c matrices of dtype dt, rounded up to 256 (a scratch buffer's
 * alignment). */
static size_t scratch_bytes(int64_t nb, int64_t r, int64_t c, enum tensor_dtype dt)
{
	return ((size_t)(nb * r * c) * tensor_dtype_size(dt) + 255) & ~(size_t)255;
}

/* A bf16 product: f32 operands rounded to bf16 copies first; a bf16 C that sums the
 * batch's products (batch stride 0) accumulates in an f32 copy, rounded into C once. The
 * copies share one scratch buffer of the backend. */
static int gemm_bf16(cublasHandle_t h, struct mat a, struct mat b, struct mat c, int64_t batch,
		     int64_t m, int64_t n, int64_t k, double alpha, double beta)
{
	int64_t na = a.sb ? batch : 1, nb = b.sb ? batch : 1, nc = c.sb ? batch : 1;
	bool ca = a.dt != TENSOR_BF16, cb = b.dt != TENSOR_BF16;
	bool cc = c.dt == TENSOR_BF16 && c.sb == 0 && batch > 1;
	size_t sa = ca ? scratch_bytes(na, m, k, TENSOR_BF16) : 0,
	       sb = cb ? scratch_bytes(nb, k, n, TENSOR_BF16) : 0,
	       sc = cc ? scratch_bytes(nc, m, n, TENSOR_F32) : 0;
	char *buf = sa + sb + sc ? cuda_scratch(sa + sb + sc, "gemm") : NULL;
	if (sa + sb + sc && !buf)
		return tensor_last_status();
	int rc = ca ? convert(&a, na, m, k, TENSOR_BF16, buf) : TENSOR_OK;
	if (rc == TENSOR_OK && cb)
		rc = convert(&b, nb, k, n, TENSOR_BF16, buf + sa);
	struct mat out = c;
	if (rc == TENSOR_OK && cc) { /* C's values in f32 when beta reads them */
		if (beta != 0)
			rc = convert(&out, nc, m, n, TENSOR_F32, buf + sa + sb);
		else
			out = (struct mat){ buf + sa + sb, TENSOR_F32, 0, n, 1 };
	}
	if (rc == TENSOR_OK)
		rc = gemm_cublas(h, &a, &b, &out, batch, m, n, k, alpha, beta);
	if (rc == TENSOR_OK && cc) {
		struct cuda_geom gd = { 3, TENSOR_BF16, { nc, m, n }, { c.sb, c.rs, c.cs }, c.p };
		struct cuda_geom gs = { 3, TENSOR_F32, { nc, m, n }, { m * n, n, 1 }, out.p };
		rc = cuda_status((cudaError_t)cuda_launch_copy(gd, gs, nc * m * n), "gemm");
	}
	return rc;
}

int cuda_gemm(struct tensor *c, const struct tensor *a, const struct tensor *b, double alpha,
	      double beta)
{
	static const char op[] = "gemm";
	int64_t batch = c->shape[0], m = c->shape[1], n = c->shape[2], k = a->shape[2];
	bool bf16 =
	    tensor_matmul_in_bf16(a, b) && (c->dtype == TENSOR_F32 || c->dtype == TENSOR_BF16);
	if (!bf16 && ((c->dtype != TENSOR_F32 && c->dtype != TENSOR_F64) || a->dtype != c->dtype ||
		      b->dtype != c->dtype))
		return tensor_error(TENSOR_ERR_DTYPE,
				    "gemm: expected f32 or f64 (or bf16 and f32 inputs with an f32 "
				    "or bf16 result), got %s x %s -> %s",
				    tensor_dtype_name(a->dtype), tensor_dtype_name(b->dtype),
				    tensor_dtype_name(c->dtype));
	if (batch == 0 || m == 0 || n == 0)
		return TENSOR_OK;
	if (k == 0) { /* C = beta C, zeros for beta 0 (cuBLAS leaves k == 0 undefined) */
		if (beta == 1)
			return TENSOR_OK;
		if (beta == 0)
			return cuda_status(cuda_launch_fill(cuda_geom_of(c), batch * m * n, 0, 0),
					   op);
		return cuda_unary(TENSOR_MUL_SCALAR, c, c, beta);
	}
	cublasHandle_t h = get_handle();
	if (!h)
		return tensor_error(TENSOR_ERR_CUDA, "gemm: cuBLAS: %s",
				    cublasGetStatusString(handle_status));
	if (bf16)
		return gemm_bf16(h, mat_of(a), mat_of(b), mat_of(c), batch, m, n, k, alpha, beta);
	struct mat ma = mat_of(a), mb = mat_of(b), mc = mat_of(c);
	return gemm_cublas(h, &ma, &mb, &mc, batch, m, n, k, alpha, beta);
}
