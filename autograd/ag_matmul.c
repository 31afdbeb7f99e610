/* matmul and conv1d with their backward. */
#include "autograd.h"
#include "ag_internal.h"

/* ---- matmul --------------------------------------------------------------- */

/* Number of matrices in t's batch dims (all dims but the last two). */
static int64_t batch_numel(const struct tensor *t)
{
	int64_t nb = 1;
	for (int d = 0; d < t->ndim - 2; d++)
		nb *= t->shape[d];
	return nb;
}

/* t [..., r, c] as a [rows, c] matrix, a view when the batch dims merge with r
 * (sizes spelled out: -1 cannot be inferred for empty tensors). */
static struct tensor *flat_rows(const struct tensor *t)
{
	if (!t)
		return NULL;
	int64_t sh[2] = { 1, t->shape[t->ndim - 1] };
	for (int d = 0; d < t->ndim - 1; d++)
		sh[0] *= t->shape[d];
	return tensor_reshape(t, 2, sh);
}

/* A·B, f32 for bf16 operands (mixed precision), else in their dtype. */
static struct tensor *mm(const struct tensor *a, const struct tensor *b)
{
	return a ? tensor_matmul_to(a, b, ag_product_dtype(a)) : NULL;
}

struct tensor *ag_heap_matmul(const struct tensor *a, const struct tensor *b)
{
	tensor_heap_begin();
	struct tensor *c = mm(a, b);
	tensor_heap_end();
	return c;
}

/* The order of op's dims in memory, outermost first (by stride, largest first), when it is
 * not row-major and a product can be laid out so: op of the product's shape (the batch
 * dims of dC), no broadcast dim, a matrix dim innermost. NULL otherwise. */
static const int *grad_order(const struct tensor *op, const struct tensor *g2, int *order)
{
	int nd = op->ndim;
	if (nd != g2->ndim)
		return NULL;
	for (int d = 0; d < nd; d++)
		if ((d < nd - 2 && op->shape[d] != g2->shape[d]) ||
		    (op->strides[d] == 0 && op->shape[d] > 1))
			return NULL;
	return tensor_dim_order(op, order) && order[nd - 1] >= nd - 2 ? order : NULL;
}

/* x · y on the heap, laid out as the operand `like` (a gradient in its operand's layout:
 * a permuted view such as split heads takes it back without a copy). */
static struct tensor *heap_grad_product(const struct tensor *x, const struct tensor *y,
					const struct tensor *like, const struct tensor *g2)
{
	int buf[TENSOR_MAX_DIMS];
	const int *order = grad_order(like, g2, buf);
	if (!order)
		return ag_heap_matmul(x, y);
	tensor_heap_begin();
	struct tensor *c = tensor_matmul_laid_out_to(x, y, order, ag_product_dtype(x));
	tensor_heap_end();
	return c;
}

/* dA = dC · B^T summed to A's shape. a2, b2, g2 are A, B, dC as matrix stacks
 * [..., m, k], [..., k, n], [..., m, n] (1-d operands unsqueezed). */
static struct tensor *matmul_grad_a(const struct tensor *a, const struct tensor *a2,
				    const struct tensor *b2, const struct tensor *g2)
{
	struct tensor *bt = tensor_transpose(b2, -1, -2); /* dA [..., m, k]; batch dims: summed */
	if (batch_numel(a2) == 1 && batch_numel(g2) > 1) {
		/* A is shared by the whole batch (the Linformer's projection): its gradient is the
		 * sum of the batch's products, each accumulated in place (a single GEMM would
		 * need dC and B^T copied into [m, batch*n] and [batch*n, k]). */
		tensor_heap_begin();
		struct tensor *da = tensor_matmul_sum_to(g2, bt, ag_product_dtype(g2));
		struct tensor *r = tensor_reshape(da, a->ndim, a->shape);
		tensor_free(da);
		tensor_heap_end();
		return r;
	}
	return a->ndim == 1 ? tensor_squeeze(mm(g2, bt), -2) : heap_grad_product(g2, bt, a2, g2);
}

/* dB = A^T · dC summed to B's shape. */
static struct tensor *matmul_grad_b(const struct tensor *b, const struct tensor *a2,
				    const struct tensor *b2, const struct tensor *g2)
{
	if (batch_numel(b2) == 1 && batch_numel(g2) > 1) {
		/* B is shared (the Linear case): one GEMM of [k, batch*m] x [batch*m, n].
		 * Then A's batch equals dC's. */
		struct tensor *at = tensor_transpose(flat_rows(a2), 0, 1);
		return tensor_reshape(mm(at, flat_rows(g2)), b->ndim, b->shape);
	}
	struct tensor *at = tensor_transpose(a2, -1, -2); /* dB [..., k, n] */
	return b->ndim == 1 ? tensor_squeeze(mm(at, g2), -1) : heap_grad_product(at, g2, b2, g2);
}

static int matmul_backward(struct ag_node *n, const struct tensor *g)
{
	if (n->nsaved < 2)
		return tensor_last_status() ? tensor_last_status() : TENSOR_ERR_NOMEM;
	struct tensor *a = n->saved[0], *b = n->saved[1];
	struct tensor *a2 = a->ndim == 1 ? tensor_unsqueeze(a, 0) : a; /* [1, k] */
	struct tensor *b2 = b->ndim == 1 ? tensor_unsqueeze(b, 1) : b; /* [k, 1] */
	struct tensor *g2 = (struct tensor *)g;
	if (b->ndim == 1)
		g2 = tensor_unsqueeze(g2, g2->ndim); /* n = 1 */
	if (g2 && a->ndim == 1)
		g2 = tensor_unsqueeze(g2, g2->ndim - 1); /* m = 1 */
	if (!a2 || !b2 || !g2)
		return tensor_last_status();
	/* heap products are handed over as gradients (arena ones are copied) */
	enum tensor_dtype prev = ag_node_precision_begin(n);
	int rc = TENSOR_OK;
	if (n->inputs[0]->requires_grad)
		rc = ag_accumulate_take(n->inputs[0], matmul_grad_a(a, a2, b2, g2));
	if (rc == TENSOR_OK && n->inputs[1]->requires_grad)
		rc = ag_accumulate_take(n->inputs[1], matmul_grad_b(b, a2, b2, g2));
	tensor_set_matmul_precision(prev);
	return rc;
}

/* Record y = A·B; ra, rb are the operands the product read (A and B, or the
 * bf16 copies of parameters in a mixed-precision region), saved for backward
 * with the products' precision. */
static struct tensor *matmul_record(struct tensor *y, struct tensor *a, struct tensor *b,
				    struct tensor *ra, struct tensor *rb)
{
	struct tensor *in[2] = { a, b };
	struct ag_node *n = ag_record("matmul", y, matmul_backward, 2, in);
	if (n) {
		ag_node_keep_precision(n);
		ag_save(n, ra);
		ag_save(n, rb);
	}
	return y;
}

struct tensor *ag_matmul(struct tensor *a, struct tensor *b)
{
	AG_OP_REGION;
	struct tensor *ra = a, *rb = b;
	ag_autocast_pair(&ra, &rb);
	return matmul_record(mm(ra, rb), a, b, ra, rb);
}

struct tensor *ag_matmul_laid_out(struct tensor *a, struct tensor *b, const int *order)
{
	AG_OP_REGION;
	struct tensor *ra = a, *rb = b;
	ag_autocast_pair(&ra, &rb);
	return matmul_record(ra ? tensor_matmul_laid_out_to(ra, rb, order, ag_product_dtype(ra))
				: NULL,
			     a, b, ra, rb);
}

/* ---- conv1d --------------------------------------------------------------- */

/* Without grad this is tensor_conv1d. With grad it is the same computation (pad,
 * unfold, one batched GEMM, bias) written with ag ops, so backward comes from theirs:
 * dW is one GEMM over all windows, dx is scattered back through unfold and the pad. */
struct tensor *ag_conv1d(struct tensor *x, struct tensor *w, struct tensor *bias, int64_t stride,
			 int64_t padding)
{
	AG_OP_REGION;
	if (!x || !w)
		return NULL;
	bool grad = x->requires_grad || w->requires_grad || (bias && bias->requires_grad);
	if (!grad || !ag_grad_enabled())
		return tensor_conv1d(x, w, bias, stride, padding);
	if (tensor_check_conv1d(x, w, bias, stride, padding) < 0)
		return NULL;
	int64_t nb = x->shape[0], cin = x->shape[1], cout = w->shape[0], kw = w->shape[2];
	int64_t lout = (x->shape[2] + 2 * padding - kw) / stride + 1;
	struct tensor *xp = x;
	if (padding > 0) {
		int64_t psh[3] = { nb, cin, padding };
		struct tensor *zero = tensor_zeros(x->dtype, x->storage->device, 3, psh);
		xp = zero ? ag_concat(3, (struct tensor *[]){ zero, x, zero }, 2) : NULL;
	}
	int perm[4] = { 0, 2, 1, 3 };
	int64_t csh[3] = { nb, lout, cin * kw }, wsh[2] = { cout, cin * kw };
	/* cols [B, L_out, C_in*K]: window t of batch b, channel-major (the one copy) */
	struct tensor *cols = ag_reshape(ag_permute(ag_unfold(xp, 2, kw, stride), perm), 3, csh);
	/* [C_out, C_in*K] x [B, C_in*K, L_out] = [B, C_out, L_out] */
	struct tensor *y = ag_matmul(ag_reshape(w, 2, wsh), ag_transpose(cols, 1, 2));
	return bias ? ag_add(y, ag_unsqueeze(bias, 1)) : y;
}
