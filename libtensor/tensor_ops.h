/* cformer libtensor ops. Included by tensor.h.
 *
 * Conventions for every op below:
 * - Inputs must be on one device (else TENSOR_ERR_DEVICE) and, for binary
 *   ops, share a dtype (else TENSOR_ERR_DTYPE): there are no silent copies or
 *   promotions. Float ops take f32/f64; index arguments are i32/i64. bf16
 *   is taken only where stated (casts, copies, matmul); elsewhere it is
 *   TENSOR_ERR_DTYPE naming the op.
 * - Binary ops broadcast NumPy-style (trailing dims equal or 1).
 * - dim arguments accept negative values (-1 = last); out of range is
 *   TENSOR_ERR_SHAPE.
 * - A NULL input returns NULL and keeps the first recorded error; any failure
 *   returns NULL with a message naming the op, the shapes and what was
 *   expected (tensor_last_error()).
 * - Results are new contiguous tensors (scoped inside a scope, else heap).
 * - An op that returns a new tensor (or a view, tensor.h) refuses an operand
 *   that requires grad while autograd records (grad mode on, outside the
 *   ag_ ops; TENSOR_ERR_STATE naming the ag_ op to use): its result would be
 *   cut from the graph. Comparisons, argmax, casts to integers, index and
 *   mask operands, in-place ops and reads take any tensor (autograd.h,
 *   ag_op_begin).
 */
#ifndef CFORMER_TENSOR_OPS_H
#define CFORMER_TENSOR_OPS_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise ---------------------------------------------------------- */

enum tensor_unary_op {
	TENSOR_NEG,
	TENSOR_EXP,
	TENSOR_LOG,
	TENSOR_SQRT,
	TENSOR_RSQRT,
	TENSOR_TANH,
	TENSOR_ERF,
	TENSOR_ABS,
	TENSOR_RELU,
	TENSOR_GELU,
	TENSOR_GELU_TANH,
	TENSOR_SILU,
	TENSOR_SIGMOID,
	TENSOR_SQUARE,
	TENSOR_RECIPROCAL,
	TENSOR_ADD_SCALAR, /* x + alpha */
	TENSOR_MUL_SCALAR, /* x * alpha */
	TENSOR_POW_SCALAR, /* x ^ alpha */
	/* derivatives of the activations, one pass each (backward takes them fused with its
	 * product: TENSOR_MUL_GELU_GRAD and the like) */
	TENSOR_GELU_GRAD,      /* gelu'(x) = Phi(x) + x phi(x) */
	TENSOR_GELU_TANH_GRAD, /* gelu_tanh'(x) */
	TENSOR_SILU_GRAD,      /* silu'(x) = s (1 + x (1 - s)), s = sigmoid(x) */
	TENSOR_NUNARY
};

enum tensor_binary_op {
	TENSOR_ADD,
	TENSOR_SUB,
	TENSOR_MUL,
	TENSOR_DIV,
	TENSOR_POW,
	TENSOR_MAXIMUM,
	TENSOR_MINIMUM,
	/* a times an activation's derivative at b, one pass (the activations' backward) */
	TENSOR_MUL_GELU_GRAD,	   /* a gelu'(b) */
	TENSOR_MUL_GELU_TANH_GRAD, /* a gelu_tanh'(b) */
	TENSOR_MUL_SILU_GRAD,	   /* a silu'(b) */
	/* comparisons: 1 where true, 0 where false, in the inputs' dtype */
	TENSOR_EQ,
	TENSOR_NE,
	TENSOR_LT,
	TENSOR_LE,
	TENSOR_GT,
	TENSOR_GE,
	TENSOR_NBINARY
};

/* Generic forms. alpha is used by the *_SCALAR ops. Float dtypes, except
 * NEG, ABS, RELU, SQUARE and the scalar add/mul, which also take ints (alpha
 * must then be an integer in the dtype's range, else TENSOR_ERR_ARG).
 * Integer arithmetic wraps around on overflow; integer DIV and POW are
 * refused (TENSOR_ERR_DTYPE). f32 results are computed in float. */
struct tensor *tensor_unary(enum tensor_unary_op op, const struct tensor *x, double alpha);
/* Broadcasting binary op; a and b share dtype and device. */
struct tensor *tensor_binary(enum tensor_binary_op op, const struct tensor *a,
			     const struct tensor *b);

struct tensor *tensor_add(const struct tensor *a, const struct tensor *b);
/* In place: a += b (tensor_mul_: a *= b), b broadcast to a. a: contiguous
 * (else TENSOR_ERR_SHAPE, as when b does not broadcast to a's shape), not
 * saved by the autograd tape (TENSOR_ERR_STATE); same dtype and device. */
int tensor_add_(struct tensor *a, const struct tensor *b);
int tensor_mul_(struct tensor *a, const struct tensor *b);
/* a = a op b in place, as tensor_add_ for any binary op; the comparisons' results are 1 or 0
 * in a's dtype. */
int tensor_binary_(enum tensor_binary_op op, struct tensor *a, const struct tensor *b);
struct tensor *tensor_sub(const struct tensor *a, const struct tensor *b);
struct tensor *tensor_mul(const struct tensor *a, const struct tensor *b);
struct tensor *tensor_div(const struct tensor *a, const struct tensor *b);
struct tensor *tensor_pow(const struct tensor *a, const struct tensor *b);
struct tensor *tensor_maximum(const struct tensor *a, const struct tensor *b);
struct tensor *tensor_minimum(const struct tensor *a, const struct tensor *b);
struct tensor *tensor_eq(const struct tensor *a, const struct tensor *b);
struct tensor *tensor_ne(const struct tensor *a, const struct tensor *b);
struct tensor *tensor_lt(const struct tensor *a, const struct tensor *b);
struct tensor *tensor_le(const struct tensor *a, const struct tensor *b);
struct tensor *tensor_gt(const struct tensor *a, const struct tensor *b);
struct tensor *tensor_ge(const struct tensor *a, const struct tensor *b);

struct tensor *tensor_add_scalar(const struct tensor *x, double s);
struct tensor *tensor_mul_scalar(const struct tensor *x, double s);
struct tensor *tensor_pow_scalar(const struct tensor *x, double p);
struct tensor *tensor_neg(const struct tensor *x);
struct tensor *tensor_exp(const struct tensor *x);
struct tensor *tensor_log(const struct tensor *x);
struct tensor *tensor_sqrt(const struct tensor *x);
struct tensor *tensor_rsqrt(const struct tensor *x);
struct tensor *tensor_tanh(const struct tensor *x);
struct tensor *tensor_erf(const struct tensor *x);
struct tensor *tensor_abs(const struct tensor *x);
struct tensor *tensor_relu(const struct tensor *x);
/* gelu(x) = x * Phi(x) exactly (erf form); tensor_gelu_tanh uses the tanh
 * approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
struct tensor *tensor_gelu(const struct tensor *x);
struct tensor *tensor_gelu_tanh(const struct tensor *x);
struct tensor *tensor_silu(const struct tensor *x);
struct tensor *tensor_sigmoid(const struct tensor *x);

/* out = cond != 0 ? a : b, all three broadcast together; a and b share dtype. */
struct tensor *tensor_where(const struct tensor *cond, const struct tensor *a,
			    const struct tensor *b);
/* x with value where mask != 0 (mask, of any dtype, broadcasts to x's shape;
 * for integer x, value must fit the dtype). */
struct tensor *tensor_masked_fill(const struct tensor *x, const struct tensor *mask, double value);
/* The same in place: x contiguous (else TENSOR_ERR_SHAPE) and not saved by
 * the autograd tape (TENSOR_ERR_STATE). */
int tensor_masked_fill_(struct tensor *x, const struct tensor *mask, double value);
/* Convert to dtype (float to int truncates toward zero). */
struct tensor *tensor_cast(const struct tensor *x, enum tensor_dtype dt);

/* ---- matmul --------------------------------------------------------------- */

/* The precision of this thread's f32 x f32 products (tensor_matmul and every
 * op built on it): TENSOR_F32 (the default: f32 products), or TENSOR_BF16:
 * their operands are rounded to bf16 as the kernel packs them and the
 * products accumulate in f32 and return f32, as torch's
 * set_float32_matmul_precision("medium") allows. f64 products are never
 * rounded. Autograd's mixed-precision regions (ag_autocast_begin) set it.
 * Errors: another dtype (TENSOR_ERR_DTYPE). */
int tensor_set_matmul_precision(enum tensor_dtype dt);
enum tensor_dtype tensor_matmul_precision(void);
/* C = A·B. A [..., m, k], B [..., k, n] -> [..., m, n] with the batch dims
 * broadcast; a 1-d A is a row [k], a 1-d B a column [k] (that dim is dropped
 * from the result). A and B share a dtype, f32, f64 or bf16, and the result
 * has it too (tensor_matmul_to picks f32 for bf16 inputs); or one is f32 and
 * the other bf16, and the product is a bf16 one with an f32 result. A bf16
 * product rounds f32 operands to bf16 (nearest even), accumulates in f32 and
 * rounds a bf16 result once (on the CPU by AVX512-BF16 where the CPU has it,
 * else through f32 copies and BLIS's sgemm: tensor_bf16_gemm_kernel() names
 * it; CUDA refuses bf16 products with TENSOR_ERR_UNSUPPORTED). f32 x f32
 * products are bf16 ones too while tensor_set_matmul_precision(TENSOR_BF16)
 * is in effect. Operands reach the kernels by their strides, so transposed
 * or sliced views are not copied (a view whose matrix has no unit stride is
 * copied first). Errors: inner dims differ, batch dims not broadcastable
 * (TENSOR_ERR_SHAPE), dtypes differ (but for f32 and bf16) or not
 * f32/f64/bf16 (TENSOR_ERR_DTYPE). */
struct tensor *tensor_matmul(const struct tensor *a, const struct tensor *b);
/* tensor_matmul with the result in dtype dt: A's dtype, or f32 for bf16
 * inputs (bf16 x bf16 -> f32: f32 accumulation, no rounding of the result).
 * Another dt is TENSOR_ERR_DTYPE. */
struct tensor *tensor_matmul_to(const struct tensor *a, const struct tensor *b,
				enum tensor_dtype dt);
/* The products summed over the batch: A [..., m, k] x B [..., k, n], both at
 * least 2-d, batch dims broadcast as in tensor_matmul, give one [m, n] in dtype
 * dt (as tensor_matmul_to). Each product accumulates into it in turn, with no
 * copy of A or B: the gradient of an operand shared by the batch (sum_i dC_i
 * B_i^T). Errors as tensor_matmul_to; a 1-d operand (TENSOR_ERR_SHAPE). */
struct tensor *tensor_matmul_sum_to(const struct tensor *a, const struct tensor *b,
				    enum tensor_dtype dt);
/* A·B + C in one pass over the result (C is copied in, the GEMM accumulates
 * onto it): the linear layer's x W^T + b. C broadcasts to the product's shape
 * and shares its device; its dtype is A's, or for bf16 A and B either bf16 or
 * f32 (the result's dtype is C's); errors as tensor_matmul, and C's shape
 * not broadcasting to the product (TENSOR_ERR_SHAPE). */
struct tensor *tensor_matmul_add(const struct tensor *a, const struct tensor *b,
				 const struct tensor *c);
/* A·B (both at least 2-d) whose memory is laid out in the dim order `order`,
 * a permutation of the result's dims, outermost first; the result is a view
 * with the usual shape. {0,2,1,3} stores the heads' outputs [B,H,T,d] as
 * [B,T,H,d], so merging the heads is a view, not a copy. Errors as
 * tensor_matmul; order not a permutation (TENSOR_ERR_ARG). */
struct tensor *tensor_matmul_laid_out(const struct tensor *a, const struct tensor *b,
				      const int *order);
/* The same with the result in dtype dt, as tensor_matmul_to. */
struct tensor *tensor_matmul_laid_out_to(const struct tensor *a, const struct tensor *b,
					 const int *order, enum tensor_dtype dt);

/* The GEMM profile: wall time spent in the products, summed by shape, to find where a
 * step's matmul time goes and at what rate. While a profile runs, every gemm call of
 * tensor_matmul and the ops built on it (linear layers, autograd's gradients, the
 * composed attention) is timed, with the device synchronized before and after (on a GPU
 * that slows the run: read the shares and rates, not the overall speed); the fused
 * attention kernel's inner products are not gemm calls and are not counted. One row per
 * distinct call: device, dtypes, one call's batch of [m,k]·[k,n] products, the
 * operands' layouts and whether C accumulates. */
struct tensor_gemm_stat {
	enum tensor_device device;
	enum tensor_dtype a_dtype, b_dtype, c_dtype;
	int64_t batch, m, n, k;
	/* A, B, C: 'r' row-major (unit column stride), 'c' column-major */
	char layout[4];
	bool accumulate; /* C = A·B + C (a linear layer's bias, a summed gradient) */
	int64_t calls;
	double seconds; /* wall time of the calls */
	double gflop;	/* 2 batch m n k calls / 1e9 */
};
/* Start a profile (from an empty table; a running one restarts). Thread-safe. */
int tensor_gemm_profile_start(void);
/* Up to max rows of the running profile, the most time first, into rows; *count
 * receives the number of rows there are (which may exceed max). Errors: count NULL,
 * max < 0, or rows NULL with max > 0 (TENSOR_ERR_ARG); calls left out for want of
 * memory for their rows (TENSOR_ERR_NOMEM; the rows read are the others). */
int tensor_gemm_profile_read(struct tensor_gemm_stat *rows, int max, int *count);
/* Stop the profile and free its table (then read gives no rows). */
int tensor_gemm_profile_stop(void);

/* ---- reductions ----------------------------------------------------------- */

/* Reduce over the ndims dims listed (ndims == 0: all dims; a repeated dim is
 * an error). keepdim keeps them with size 1. Reducing an empty dim: sum 0,
 * mean NaN, max/min/argmax error. NaN propagates through max/min. sum, max,
 * min and argmax also take i32/i64 (sum keeps the dtype and wraps). */
struct tensor *tensor_sum(const struct tensor *x, int ndims, const int *dims, bool keepdim);
struct tensor *tensor_mean(const struct tensor *x, int ndims, const int *dims, bool keepdim);
struct tensor *tensor_max(const struct tensor *x, int ndims, const int *dims, bool keepdim);
struct tensor *tensor_min(const struct tensor *x, int ndims, const int *dims, bool keepdim);
/* Variance with the given correction (0 = population, 1 = unbiased), divided
 * by max(N - correction, 0) as PyTorch (inf or NaN when that is 0). */
struct tensor *tensor_var(const struct tensor *x, int ndims, const int *dims, int correction,
			  bool keepdim);
/* Index (i64) of the first maximum along dim. */
struct tensor *tensor_argmax(const struct tensor *x, int dim, bool keepdim);

/* ---- softmax and norms ---------------------------------------------------- */

/* softmax / log_softmax along dim, computed stably (max subtracted), sums in
 * double. A row that is all -inf, or holds NaN or +inf, gives NaN. */
struct tensor *tensor_softmax(const struct tensor *x, int dim);
struct tensor *tensor_log_softmax(const struct tensor *x, int dim);
/* In place: x = softmax(x) along the last dim. x: f32/f64, contiguous, at
 * least 1-d (TENSOR_ERR_SHAPE), not saved by the autograd tape
 * (TENSOR_ERR_STATE). */
int tensor_softmax_(struct tensor *x);
/* The gradient of softmax along the last dim: y (g - sum(g y)) for y =
 * softmax(x) and g = dL/dy, of one shape (TENSOR_ERR_SHAPE), dtype and
 * device; one pass per row where the device has the kernel. */
struct tensor *tensor_softmax_backward(const struct tensor *y, const struct tensor *g);
/* The same in place: g = y (g - sum(g y)). g: contiguous (TENSOR_ERR_SHAPE),
 * not saved by the autograd tape (TENSOR_ERR_STATE). */
int tensor_softmax_backward_(const struct tensor *y, struct tensor *g);

/* ---- fused attention ------------------------------------------------------ */

/* The operands of tensor_attention: q [B,H,T,d], k [B,H,S,d], v [B,H,S,dv] of
 * one dtype (f32 or f64) and device; hidden NULL or [B,S] of that dtype
 * (nonzero: key s of batch entry b is hidden from every query); causal hides
 * key s from query t < s (then T == S); scale multiplies the scores. */
struct tensor_attention_args {
	const struct tensor *q, *k, *v, *hidden;
	bool causal;
	double scale;
	/* dropout of the probabilities, 0 <= dropout < 1 (0: none): element (b, h, t, s) of the
	 * [B,H,T,S] probabilities kept as tensor_dropout_at(P, dropout, seed, first) keeps it,
	 * the kept ones scaled by 1 / (1 - dropout); the backward applies the same mask */
	double dropout;
	uint64_t seed, first;
};
/* softmax(scale q k^T, hidden keys left out) v in one op, without the [T,S]
 * scores in memory: a block of queries at a time, the scores in a buffer per
 * thread. On the CPU the products are bf16 ones where tensor_matmul would make
 * them so (f32 operands under tensor_set_matmul_precision(TENSOR_BF16)): q, k, v
 * and the probabilities, and in the backward dout and dL/dscores too, rounded to
 * bf16 on the kernel tensor_bf16_gemm_kernel() names, with f32 accumulation; the
 * softmax, its running max and sum and the log-sum-exp stay f32. CUDA's kernel
 * (head dims up to 128) computes in the operands' dtype whatever the precision.
 * The backward takes the precision in effect when it is called (autograd sets
 * the forward's). Returns out [B,H,T,dv] (stored as [B,T,H,dv], so that merging
 * the heads is a view) and *lse [B,H,T], each row's log-sum-exp of its visible
 * scaled scores, +inf for a row with no visible key (its out row is 0): what
 * tensor_attention_backward needs. NULL with an error for bad operands
 * (TENSOR_ERR_SHAPE, _DTYPE, _DEVICE, _ARG, naming "attention" and the shapes),
 * and TENSOR_ERR_UNSUPPORTED where the device has no such kernel (the CPU has
 * one; nn_attention then composes the op from products and a softmax). */
struct tensor *tensor_attention(const struct tensor_attention_args *a, struct tensor **lse);
/* The gradients of tensor_attention for dout = dL/dout ([B,H,T,dv]), with lse
 * as the forward returned it: *dq, *dk, *dv of q's, k's and v's shapes, their
 * memory ordered as q's, k's and v's (the gradient of heads split from
 * [B,T,H,d] is a view of a [B,T,H,d] tensor); each block's probabilities are
 * recomputed from q, k and lse.
 * Returns a status (errors as tensor_attention's). */
int tensor_attention_backward(const struct tensor_attention_args *a, const struct tensor *lse,
			      const struct tensor *dout, struct tensor **dq, struct tensor **dk,
			      struct tensor **dv);
/* Whether tensor_attention runs for q: f32 or f64 on a device with the kernel, within its
 * head dims (CUDA's: up to 128). */
bool tensor_attention_supported(const struct tensor *q);

/* Dropout in one pass: x * keep / (1 - p) at row-major index i, keep[i] = (word(seed, i)
 * >= ceil(p 2^32)), word(seed, i) a 32-bit Philox word (docs/architecture.md, "Random
 * numbers"). A pure function of (x, p, seed): the same mask for every tensor of x's
 * shape, on every device and thread count. x: f32 or f64 (TENSOR_ERR_DTYPE); 0 <= p < 1
 * (TENSOR_ERR_ARG). */
struct tensor *tensor_dropout(const struct tensor *x, double p, uint64_t seed);
/* The same in place. x: contiguous (TENSOR_ERR_SHAPE), not saved by the
 * autograd tape (TENSOR_ERR_STATE). */
int tensor_dropout_(struct tensor *x, double p, uint64_t seed);
/* The same with element i's draw at first + i: rows [lo, hi) of a contiguous batch,
 * with first = lo * (elements a row), get the whole batch's mask (data parallelism). */
struct tensor *tensor_dropout_at(const struct tensor *x, double p, uint64_t seed, uint64_t first);
int tensor_dropout_at_(struct tensor *x, double p, uint64_t seed, uint64_t first);

/* Layer norm over the last dim C: y = (x - mean) * rstd * w + b, with
 * rstd = 1/sqrt(var + eps) (population variance). w, b: [C] or NULL. If mean /
 * rstd are not NULL they receive [..., 1] tensors (what backward needs). */
struct tensor *tensor_layer_norm(const struct tensor *x, const struct tensor *w,
				 const struct tensor *b, double eps, struct tensor **mean,
				 struct tensor **rstd);
/* RMS norm over the last dim: y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps). */
struct tensor *tensor_rms_norm(const struct tensor *x, const struct tensor *w, double eps,
			       struct tensor **rstd);
/* Backward of layer norm (mean given) or RMS norm (mean NULL) in one pass over
 * the rows: g is dL/dy (x's shape, any strides), mean / rstd the forward's
 * [..., 1] statistics, w [C] or NULL. With xhat = (x - mean) * rstd and
 * dxhat = g * w: *dx = rstd * (dxhat - xhat * mean(dxhat * xhat) - mean(dxhat))
 * (no mean(dxhat) for RMS norm), *dw = sum of g * xhat and *db = sum of g over
 * the leading dims ([C] each). dx, dw, db may be NULL when not wanted; they
 * receive new contiguous tensors, or NULL on error: a NULL input
 * (TENSOR_ERR_ARG), mismatched shapes, dtypes or devices (TENSOR_ERR_SHAPE /
 * DTYPE / DEVICE), no kernel on the device (TENSOR_ERR_UNSUPPORTED). */
int tensor_norm_backward(const struct tensor *g, const struct tensor *x, const struct tensor *mean,
			 const struct tensor *rstd, const struct tensor *w, struct tensor **dx,
			 struct tensor **dw, struct tensor **db);

/* ---- indexing, joining ---------------------------------------------------- */

/* out = src indexed along dim by idx (i32/i64, any shape): out's shape is
 * src.shape[:dim] + idx.shape + src.shape[dim+1:] (embedding lookup with
 * dim 0). Index out of range is TENSOR_ERR_ARG naming the index. */
struct tensor *tensor_index_select(const struct tensor *src, int dim, const struct tensor *idx);
/* Backward of index_select: dst[.., idx[j], ..] += src[.., j, ..] in place,
 * duplicates accumulate. src's shape is dst.shape[:dim] + idx.shape +
 * dst.shape[dim+1:]. */
int tensor_index_add_(struct tensor *dst, int dim, const struct tensor *idx,
		      const struct tensor *src);
/* out[i][j][k] = src[i][idx[i][j][k]][k] (dim = 1), as torch.gather: idx has
 * src's ndim and, off dim, sizes <= src's. */
struct tensor *tensor_gather(const struct tensor *src, int dim, const struct tensor *idx);
/* Backward of gather: dst[i][idx[i][j][k]][k] += src[i][j][k] (dim = 1). */
int tensor_scatter_add_(struct tensor *dst, int dim, const struct tensor *idx,
			const struct tensor *src);

/* TENSOR_OK if every value of idx (i32/i64, any shape and strides) is in
 * [0, size), else TENSOR_ERR_ARG naming op, the value, its position and
 * "dim" (the dim it indexes, for the message). On a device that checks
 * asynchronously (CUDA) the call returns at once and a bad index is reported
 * by the next synchronisation (a copy to the host). op: a static string. */
int tensor_check_index(const char *op, const struct tensor *idx, int dim, int64_t size);

/* Join n tensors along an existing dim (other dims equal). */
struct tensor *tensor_concat(int n, struct tensor *const *ts, int dim);
/* Join n equal-shaped tensors along a new dim. */
struct tensor *tensor_stack(int n, struct tensor *const *ts, int dim);
/* Split along dim into n views of the given sizes (summing to the dim's
 * size), written to out[0..n-1]. Returns a status. */
int tensor_split(const struct tensor *t, int dim, int n, const int64_t *sizes, struct tensor **out);

/* ---- convolution ---------------------------------------------------------- */

/* 1-d convolution over the last axis as in PyTorch (cross-correlation):
 * x [B, C_in, L], w [C_out, C_in, K], bias [C_out] or NULL, stride >= 1,
 * zero padding >= 0 each side -> [B, C_out, (L + 2 pad - K) / stride + 1].
 * kernel == stride with no padding is a reshape and one GEMM. Errors: channel
 * or kernel shape mismatch, K > L + 2 pad (TENSOR_ERR_SHAPE); stride < 1 or
 * padding < 0 (TENSOR_ERR_ARG). */
struct tensor *tensor_conv1d(const struct tensor *x, const struct tensor *w,
			     const struct tensor *bias, int64_t stride, int64_t padding);

/* ---- optimizer ------------------------------------------------------------ */

/* One AdamW update in place and in one pass (nn_adamw_step's kernel), for step
 * t >= 1 (bias corrections bc1 = 1 - beta1^t, bc2 = 1 - beta2^t):
 *   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
 *   p = p (1 - lr wd) - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps).
 * p, m, v, g: one shape, f32 or f64, one device, contiguous. Errors change
 * nothing: a NULL or mismatched tensor (TENSOR_ERR_ARG/SHAPE/DTYPE/DEVICE), a
 * non-contiguous one or p, m, v saved by the tape (TENSOR_ERR_STATE), a
 * hyperparameter out of range (TENSOR_ERR_ARG), no kernel on the device
 * (TENSOR_ERR_UNSUPPORTED). */
int tensor_adamw_(struct tensor *p, struct tensor *m, struct tensor *v, const struct tensor *g,
		  double lr, double beta1, double beta2, double eps, double weight_decay,
		  int64_t step);
/* One SGD update in place and in one pass (nn_sgd_step's kernel), PyTorch's
 * momentum form without dampening: d = g + wd p; with a momentum buffer buf,
 * buf = momentum buf + d and d = buf; p -= lr d. p, buf (or NULL: no
 * momentum), g: one shape, f32 or f64, one device, contiguous. Errors change
 * nothing, as tensor_adamw_'s. */
int tensor_sgd_(struct tensor *p, struct tensor *buf, const struct tensor *g, double lr,
		double momentum, double weight_decay);

#ifdef __cplusplus
}
#endif

#endif
