/* Differentiable ops. Included by autograd.h.
 *
 * Each ag_X takes and returns what tensor_X takes and returns (see
 * tensor_ops.h and tensor.h for shapes, dtypes and errors) and records a node
 * when grad mode is on and an input requires grad. Index and mask arguments
 * are never differentiated. Gradients of broadcast inputs are summed back to
 * the input's shape.
 */
#ifndef CFORMER_AG_OPS_H
#define CFORMER_AG_OPS_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise (ag_elementwise.c) --------------------------------------- */
struct tensor *ag_unary(enum tensor_unary_op op, struct tensor *x, double alpha);
struct tensor *ag_binary(enum tensor_binary_op op, struct tensor *a, struct tensor *b);
struct tensor *ag_add(struct tensor *a, struct tensor *b);
struct tensor *ag_sub(struct tensor *a, struct tensor *b);
struct tensor *ag_mul(struct tensor *a, struct tensor *b);
struct tensor *ag_div(struct tensor *a, struct tensor *b);
/* a^b; the gradient for b uses log(a), so b requires a > 0 where it matters. */
struct tensor *ag_pow(struct tensor *a, struct tensor *b);
/* Ties split the gradient equally between a and b. */
struct tensor *ag_maximum(struct tensor *a, struct tensor *b);
struct tensor *ag_minimum(struct tensor *a, struct tensor *b);
struct tensor *ag_add_scalar(struct tensor *x, double s);
struct tensor *ag_mul_scalar(struct tensor *x, double s);
struct tensor *ag_pow_scalar(struct tensor *x, double p);
struct tensor *ag_neg(struct tensor *x);
struct tensor *ag_exp(struct tensor *x);
struct tensor *ag_log(struct tensor *x);
struct tensor *ag_sqrt(struct tensor *x);
struct tensor *ag_rsqrt(struct tensor *x);
struct tensor *ag_tanh(struct tensor *x);
struct tensor *ag_erf(struct tensor *x);
struct tensor *ag_abs(struct tensor *x);  /* gradient 0 at 0 */
struct tensor *ag_relu(struct tensor *x); /* gradient 0 at 0 */
struct tensor *ag_gelu(struct tensor *x);
struct tensor *ag_gelu_tanh(struct tensor *x);
struct tensor *ag_silu(struct tensor *x);
struct tensor *ag_sigmoid(struct tensor *x);
struct tensor *ag_where(const struct tensor *cond, struct tensor *a, struct tensor *b);
struct tensor *ag_masked_fill(struct tensor *x, const struct tensor *mask, double value);
/* Float to float casts pass gradients back (cast to the input's dtype). A cast
 * to bf16 of a tensor that requires grad is refused (TENSOR_ERR_DTYPE): bf16
 * cannot carry a gradient, and dropping it silently would stop backward. */
struct tensor *ag_cast(struct tensor *x, enum tensor_dtype dt);
/* x * mask / (1 - p) with mask[i] = uniform(seed, i) >= p; identity when p == 0
 * or not training. p in [0, 1). */
struct tensor *ag_dropout(struct tensor *x, double p, uint64_t seed, bool training);
/* The same with the draws at first + i (tensor_dropout_at). */
struct tensor *ag_dropout_at(struct tensor *x, double p, uint64_t seed, uint64_t first,
			     bool training);

/* ---- matmul and conv1d (ag_matmul.c) -------------------------------------- */
struct tensor *ag_matmul(struct tensor *a, struct tensor *b);
/* ag_matmul with the result laid out in memory in the dim order `order` (see
 * tensor_matmul_laid_out). */
struct tensor *ag_matmul_laid_out(struct tensor *a, struct tensor *b, const int *order);
struct tensor *ag_conv1d(struct tensor *x, struct tensor *w, struct tensor *bias, int64_t stride,
			 int64_t padding);

/* ---- reductions, softmax, norms (ag_reduce.c, ag_norm.c) ------------------ */
struct tensor *ag_sum(struct tensor *x, int ndims, const int *dims, bool keepdim);
struct tensor *ag_mean(struct tensor *x, int ndims, const int *dims, bool keepdim);
/* Gradient split equally among tied maxima (minima). */
struct tensor *ag_max(struct tensor *x, int ndims, const int *dims, bool keepdim);
struct tensor *ag_min(struct tensor *x, int ndims, const int *dims, bool keepdim);
struct tensor *ag_var(struct tensor *x, int ndims, const int *dims, int correction, bool keepdim);
struct tensor *ag_softmax(struct tensor *x, int dim);
struct tensor *ag_log_softmax(struct tensor *x, int dim);
struct tensor *ag_layer_norm(struct tensor *x, struct tensor *w, struct tensor *b, double eps);
struct tensor *ag_rms_norm(struct tensor *x, struct tensor *w, double eps);

/* ---- views (ag_view.c): gradients flow through without copies -------------- */
struct tensor *ag_view(struct tensor *t, int ndim, const int64_t *shape);
struct tensor *ag_reshape(struct tensor *t, int ndim, const int64_t *shape);
struct tensor *ag_permute(struct tensor *t, const int *perm);
struct tensor *ag_transpose(struct tensor *t, int d0, int d1);
struct tensor *ag_narrow(struct tensor *t, int dim, int64_t start, int64_t len);
struct tensor *ag_slice(struct tensor *t, int dim, int64_t start, int64_t end, int64_t step);
struct tensor *ag_select(struct tensor *t, int dim, int64_t index);
struct tensor *ag_expand(struct tensor *t, int ndim, const int64_t *shape);
struct tensor *ag_squeeze(struct tensor *t, int dim);
struct tensor *ag_unsqueeze(struct tensor *t, int dim);
struct tensor *ag_unfold(struct tensor *t, int dim, int64_t size, int64_t step);
struct tensor *ag_contiguous(struct tensor *t);

/* ---- indexing and joining (ag_index.c) ------------------------------------ */
struct tensor *ag_index_select(struct tensor *src, int dim, const struct tensor *idx);
struct tensor *ag_gather(struct tensor *src, int dim, const struct tensor *idx);
struct tensor *ag_concat(int n, struct tensor *const *ts, int dim);
struct tensor *ag_stack(int n, struct tensor *const *ts, int dim);
int ag_split(struct tensor *t, int dim, int n, const int64_t *sizes, struct tensor **out);

#ifdef __cplusplus
}
#endif

#endif
