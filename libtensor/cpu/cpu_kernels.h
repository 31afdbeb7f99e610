/* The CPU backend's compute slots, one family a file. Internal. */
#ifndef CFORMER_CPU_KERNELS_H
#define CFORMER_CPU_KERNELS_H

#include "../backend.h"

/* cpu_backend.c: the thread count set by tensor_set_num_threads(), for
 * `#pragma omp parallel for num_threads(cpu_num_threads())`. */
int cpu_num_threads(void);
/* How many CPUs i with mine[i] (i < nmine; mine NULL: every CPU) were busy (at least half
 * of their time not idle) between two snapshots of /proc/stat's text; the default thread
 * count leaves them out of the CPUs this process may run on (a rank of mpirun bound to one
 * core counts only that one). */
int cpu_busy_cpus(const char *before, const char *after, const bool *mine, int nmine);

/* cpu_fill.c */
int cpu_copy(struct tensor *dst, const struct tensor *src);
int cpu_fill(struct tensor *dst, double value);
int cpu_arange(struct tensor *dst, double start, double step);
int cpu_random(struct tensor *dst, enum tensor_random_kind kind, uint64_t seed, double a, double b);
int cpu_dropout(struct tensor *out, const struct tensor *x, double p, uint64_t seed,
		uint64_t first);
/* Dropout at rate p under seed, ready to apply to spans of elements: the threshold, the
 * scale and the kernel (CFORMER_DROPOUT_KERNEL read once). */
struct cpu_dropout_plan {
	uint64_t seed;
	uint32_t thresh;
	double scale;
	bool avx2;
};
struct cpu_dropout_plan cpu_dropout_plan(double p, uint64_t seed);
/* y[i] = x[i] * keep(e + i) * scale for n contiguous f32 or f64 elements (y may be x): the
 * mask's elements e.. as tensor_dropout_at draws them, on one thread. */
void cpu_dropout_span(const struct cpu_dropout_plan *pl, enum tensor_dtype dt, void *y,
		      const void *x, int64_t n, uint64_t e);
/* cpu_elementwise.c */
int cpu_unary(enum tensor_unary_op op, struct tensor *out, const struct tensor *x, double alpha);
int cpu_binary(enum tensor_binary_op op, struct tensor *out, const struct tensor *a,
	       const struct tensor *b);
int cpu_where(struct tensor *out, const struct tensor *cond, const struct tensor *a,
	      const struct tensor *b);
/* cpu_reduce.c */
int cpu_reduce(enum tensor_reduce_op op, struct tensor *out, const struct tensor *x, int dim);
/* Pairwise sum of the n values at x (byte step apart) of dtype dt, each taken as v - shift,
 * squared when `square`: rounding error O(log n) ulps instead of O(n) (the f64 sums). */
double cpu_sum_pairwise(const char *x, int64_t n, int64_t step, enum tensor_dtype dt, double shift,
			bool square);
/* cpu_matmul.c */
int cpu_gemm(struct tensor *c, const struct tensor *a, const struct tensor *b, double alpha,
	     double beta);
/* One f32 or f64 matrix of a product: element [0,0] and its row and column strides
 * (elements; one of them 1, or the dim of the other 1). */
struct cpu_mat {
	char *p;
	int64_t rs, cs;
};
/* C [m,n] = alpha A [m,k] B [k,n] + beta C (beta 0: C is not read) on the calling thread
 * alone, for kernels that run products inside their own parallel regions. */
void cpu_gemm_one_thread(enum tensor_dtype dt, int64_t m, int64_t n, int64_t k, double alpha,
			 struct cpu_mat a, struct cpu_mat b, double beta, struct cpu_mat c);
/* cpu_attention.c */
int cpu_attention(struct tensor *out, struct tensor *lse, const struct tensor_attention_args *a);
int cpu_attention_backward(struct tensor *dq, struct tensor *dk, struct tensor *dv,
			   const struct tensor_attention_args *a, const struct tensor *lse,
			   const struct tensor *dout);
/* An f32 copy of a [batch, r, c] gemm operand of another dtype or to be rounded: g->t
 * shaped as x (a batch stride of 0 kept: one matrix), laid out with x's unit-stride dim
 * (so the conversion streams), in block-cache storage g->st (tensor_storage_release it);
 * filled from x when fill, an f32 x then rounded to bf16 values when round (an operand of
 * a bf16 product). TENSOR_ERR_NOMEM when the storage fails. */
struct cpu_gemm_f32 {
	struct tensor_storage *st;
	struct tensor t;
};
int cpu_gemm_f32_of(struct cpu_gemm_f32 *g, const struct tensor *x, bool fill, bool round);
/* cpu_gemm_bf16.c: own bf16 GEMM kernels for the gemm slot: a, b bf16 or f32 (f32
 * rounded to bf16 as packed), c f32 or bf16, k, m, n > 0; f32 accumulation, a bf16 C
 * rounded once (one of batch stride 0, which sums the batch's products, through an f32
 * copy). AVX512-BF16 (with AVX512F/BW/VL and the OS saving the zmm state); AMX
 * (bf16 tiles, with AVX512-BF16 for the packing; the first check asks Linux for the
 * tile state); and the emulated twins of both, the same code on x86 intrinsics written
 * in C, which run anywhere (slowly), for tests. cpu_gemm_bf16 fails with
 * TENSOR_ERR_UNSUPPORTED where the CPU lacks the kernel, TENSOR_ERR_NOMEM without
 * packing buffers. */
enum cpu_bf16_kernel {
	CPU_BF16_AVX512,
	CPU_BF16_AMX,
	CPU_BF16_AVX512_EMULATED,
	CPU_BF16_AMX_EMULATED,
};
bool cpu_gemm_bf16_ok(enum cpu_bf16_kernel k);
int cpu_gemm_bf16(enum cpu_bf16_kernel k, struct tensor *c, const struct tensor *a,
		  const struct tensor *b, double alpha, double beta);
/* One product C [m,n] = alpha A [m,k] B [k,n] + beta C on kernel k (one this CPU runs) and
 * the calling thread, with f32 A and B (rounded to bf16 as packed) and f32 C, m, n, k > 0;
 * ws: cpu_gemm_bf16_serial_ws(k, m, n, k) bytes (or those of a larger product), 64-byte
 * aligned. */
size_t cpu_gemm_bf16_serial_ws(enum cpu_bf16_kernel k, int64_t m, int64_t n, int64_t kk);
void cpu_gemm_bf16_serial(enum cpu_bf16_kernel k, int64_t m, int64_t n, int64_t kk, double alpha,
			  struct cpu_mat a, struct cpu_mat b, double beta, struct cpu_mat c,
			  void *ws);
/* cpu_matmul.c: whether the bf16 kernel in use (tensor_bf16_gemm_kernel) is one of
 * cformer's own, *k receiving which; false for the portable one. */
bool cpu_bf16_kernel_own(enum cpu_bf16_kernel *k);
/* cpu_nn.c */
int cpu_softmax(struct tensor *out, const struct tensor *x, bool log);
int cpu_softmax_backward(struct tensor *dx, const struct tensor *y, const struct tensor *g);
int cpu_adamw(struct tensor *p, struct tensor *m, struct tensor *v, const struct tensor *g,
	      const double *h);
int cpu_sgd(struct tensor *p, struct tensor *buf, const struct tensor *g, const double *h);
int cpu_layer_norm(struct tensor *y, struct tensor *mean, struct tensor *rstd,
		   const struct tensor *x, const struct tensor *w, const struct tensor *b,
		   double eps);
int cpu_rms_norm(struct tensor *y, struct tensor *rstd, const struct tensor *x,
		 const struct tensor *w, double eps);
int cpu_norm_backward(struct tensor *dx, struct tensor *dw, struct tensor *db,
		      const struct tensor *g, const struct tensor *x, const struct tensor *mean,
		      const struct tensor *rstd, const struct tensor *w);
/* cpu_index.c */
int cpu_index_select(struct tensor *out, const struct tensor *src, int dim,
		     const struct tensor *idx);
int cpu_index_add(struct tensor *dst, int dim, const struct tensor *idx, const struct tensor *src);
int cpu_gather(struct tensor *out, const struct tensor *src, int dim, const struct tensor *idx);
int cpu_scatter_add(struct tensor *dst, int dim, const struct tensor *idx,
		    const struct tensor *src);

#endif
