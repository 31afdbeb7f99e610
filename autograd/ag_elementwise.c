/* Elementwise ops with their backward, side by side. */
#include <math.h>

#include "autograd.h"
#include "ag_internal.h"

#define INV_SQRT_2PI 0.3989422804014327

/* ---- unary ---------------------------------------------------------------- */

/* d out / d x for out = op(x), written with tensor ops. */
static struct tensor *unary_derivative(const struct ag_node *n)
{
	const struct tensor *x = n->saved[0], *y = n->saved[1];
	double alpha = n->f[0];
	switch ((enum tensor_unary_op)n->i[0]) {
	case TENSOR_NEG: return tensor_full(x->dtype, x->storage->device, 0, NULL, -1);
	case TENSOR_EXP: return tensor_alias(y);
	case TENSOR_LOG: return tensor_unary(TENSOR_RECIPROCAL, x, 0);
	case TENSOR_SQRT: return tensor_mul_scalar(tensor_unary(TENSOR_RECIPROCAL, y, 0), 0.5);
	case TENSOR_RSQRT: return tensor_mul_scalar(tensor_pow_scalar(y, 3), -0.5);
	case TENSOR_TANH:
		return tensor_add_scalar(tensor_neg(tensor_unary(TENSOR_SQUARE, y, 0)), 1);
	case TENSOR_ERF:
		return tensor_mul_scalar(tensor_exp(tensor_neg(tensor_unary(TENSOR_SQUARE, x, 0))),
					 2 * INV_SQRT_2PI * sqrt(2.0));
	case TENSOR_ABS:
		return tensor_sub(
		    tensor_gt(x, tensor_zeros(x->dtype, x->storage->device, 0, NULL)),
		    tensor_lt(x, tensor_zeros(x->dtype, x->storage->device, 0, NULL)));
	case TENSOR_RELU: return tensor_gt(x, tensor_zeros(x->dtype, x->storage->device, 0, NULL));
	case TENSOR_SIGMOID: return tensor_mul(y, tensor_add_scalar(tensor_neg(y), 1));
	case TENSOR_SQUARE: return tensor_mul_scalar(x, 2);
	case TENSOR_RECIPROCAL: return tensor_neg(tensor_unary(TENSOR_SQUARE, y, 0));
	case TENSOR_ADD_SCALAR: return tensor_full(x->dtype, x->storage->device, 0, NULL, 1);
	case TENSOR_MUL_SCALAR: return tensor_full(x->dtype, x->storage->device, 0, NULL, alpha);
	case TENSOR_POW_SCALAR: return tensor_mul_scalar(tensor_pow_scalar(x, alpha - 1), alpha);
	default:
		tensor_error(TENSOR_ERR_UNSUPPORTED, "backward: unary op %d has no gradient",
			     (int)n->i[0]);
		return NULL;
	}
}

/* GELU and SiLU: x's gradient, dout op'(x) in one pass (mul_grad: the fused binary op),
 * made in dout's memory when the node can take it, else in one copy of dout. */
static int activation_backward(struct ag_node *n, const struct tensor *dout,
			       enum tensor_binary_op mul_grad)
{
	struct tensor *g = ag_dout_take(n);
	if (!g) {
		tensor_heap_begin();
		g = tensor_clone(dout);
		tensor_heap_end();
	}
	if (!g || tensor_binary_(mul_grad, g, n->saved[0]) < 0) {
		tensor_free(g);
		return tensor_last_status();
	}
	return ag_accumulate_take(n->inputs[0], g);
}

/* The derivative lives in the node's backward scope, or on the heap (then it
 * is freed here). */
static int unary_backward(struct ag_node *n, const struct tensor *dout)
{
	switch ((enum tensor_unary_op)n->i[0]) {
	case TENSOR_GELU: return activation_backward(n, dout, TENSOR_MUL_GELU_GRAD);
	case TENSOR_GELU_TANH: return activation_backward(n, dout, TENSOR_MUL_GELU_TANH_GRAD);
	case TENSOR_SILU: return activation_backward(n, dout, TENSOR_MUL_SILU_GRAD);
	default: break;
	}
	struct tensor *d = unary_derivative(n);
	tensor_heap_begin(); /* handed over as x's gradient, not copied */
	struct tensor *dx = tensor_mul(dout, d);
	tensor_heap_end();
	if (d && !d->in_arena)
		tensor_free(d);
	return ag_accumulate_take(n->inputs[0], dx);
}

struct tensor *ag_unary(enum tensor_unary_op op, struct tensor *x, double alpha)
{
	AG_OP_REGION;
	struct tensor *y = tensor_unary(op, x, alpha);
	struct ag_node *n = ag_record("unary", y, unary_backward, 1, &x);
	if (n) {
		n->i[0] = op;
		n->f[0] = alpha;
		ag_save(n, x);
		ag_save(n, y);
	}
	return y;
}

/* ---- binary --------------------------------------------------------------- */

static int binary_backward(struct ag_node *n, const struct tensor *g)
{
	struct tensor *a = n->saved[0], *b = n->saved[1], *y = n->saved[2];
	struct tensor *ga = NULL, *gb = NULL; /* only those of inputs that require grad */
	bool need_a = n->inputs[0]->requires_grad, need_b = n->inputs[1]->requires_grad;
	switch ((enum tensor_binary_op)n->i[0]) {
	case TENSOR_ADD:
	case TENSOR_SUB: {
		/* b's gradient first, then g itself becomes a's when it can be taken */
		int rc = ag_accumulate(n->inputs[1], n->i[0] == TENSOR_ADD ? g : tensor_neg(g));
		if (rc < 0)
			return rc;
		struct tensor *own = ag_dout_take(n);
		return own ? ag_accumulate_take(n->inputs[0], own) : ag_accumulate(n->inputs[0], g);
	}
	case TENSOR_MUL:
		ga = need_a ? tensor_mul(g, b) : NULL;
		gb = need_b ? tensor_mul(g, a) : NULL;
		break;
	case TENSOR_DIV: /* d/db a/b = -y/b */
		ga = need_a ? tensor_div(g, b) : NULL;
		gb = need_b ? tensor_neg(tensor_div(tensor_mul(g, y), b)) : NULL;
		break;
	case TENSOR_POW: /* b a^(b-1), y log a */
		ga = need_a ? tensor_mul(g, tensor_mul(b, tensor_pow(a, tensor_add_scalar(b, -1))))
			    : NULL;
		gb = need_b ? tensor_mul(g, tensor_mul(y, tensor_log(a))) : NULL;
		break;
	case TENSOR_MAXIMUM:
	case TENSOR_MINIMUM: { /* 1 where a wins, 1/2 on ties */
		bool max = n->i[0] == TENSOR_MAXIMUM;
		struct tensor *wa = tensor_add(max ? tensor_gt(a, b) : tensor_lt(a, b),
					       tensor_mul_scalar(tensor_eq(a, b), 0.5));
		ga = tensor_mul(g, wa);
		gb = need_b ? tensor_sub(g, ga) : NULL;
		break;
	}
	default:
		return tensor_error(TENSOR_ERR_UNSUPPORTED,
				    "backward: binary op %d has no gradient", (int)n->i[0]);
	}
	int rc = ag_accumulate(n->inputs[0], ga);
	return rc < 0 ? rc : ag_accumulate(n->inputs[1], gb);
}

struct tensor *ag_binary(enum tensor_binary_op op, struct tensor *a, struct tensor *b)
{
	AG_OP_REGION;
	struct tensor *y = tensor_binary(op, a, b);
	if (op >= TENSOR_EQ) /* comparisons are not differentiable */
		return y;
	struct tensor *in[2] = { a, b };
	struct ag_node *n = ag_record("binary", y, binary_backward, 2, in);
	if (n) {
		n->i[0] = op;
		/* the values each gradient needs: none for add and sub; y (saved[2])
		 * only for div and pow */
		if (op != TENSOR_ADD && op != TENSOR_SUB) {
			ag_save(n, a);
			ag_save(n, b);
		}
		if (op == TENSOR_DIV || op == TENSOR_POW)
			ag_save(n, y);
	}
	return y;
}

struct tensor *ag_add_reuse(struct tensor *a, struct tensor *b)
{
	AG_OP_REGION;
	if (!a || !b)
		return NULL;
	/* a leaf that requires grad (a parameter) or a tensor the tape saved keeps
	 * its values; tensor_add_ refuses other layouts and devices */
	bool leaf = a->requires_grad && !a->node;
	if (leaf || a->storage->tape_refs > 0 || !tensor_is_contiguous(a) || a->dtype != b->dtype ||
	    a->storage->device != b->storage->device || b->ndim > a->ndim)
		return ag_add(a, b);
	for (int d = 0; d < b->ndim; d++)
		if (b->shape[d] != 1 && b->shape[d] != a->shape[a->ndim - b->ndim + d])
			return ag_add(a, b);
	struct tensor *y = tensor_alias(a);
	if (!y || tensor_add_(y, b) < 0) {
		tensor_free(y);
		return NULL;
	}
	struct ag_node *n = ag_record("binary", y, binary_backward, 2, (struct tensor *[]){ a, b });
	if (n)
		n->i[0] = TENSOR_ADD;
	return y;
}

struct tensor *ag_add(struct tensor *a, struct tensor *b)
{
	return ag_binary(TENSOR_ADD, a, b);
}
struct tensor *ag_sub(struct tensor *a, struct tensor *b)
{
	return ag_binary(TENSOR_SUB, a, b);
}
struct tensor *ag_mul(struct tensor *a, struct tensor *b)
{
	return ag_binary(TENSOR_MUL, a, b);
}
struct tensor *ag_div(struct tensor *a, struct tensor *b)
{
	return ag_binary(TENSOR_DIV, a, b);
}
struct tensor *ag_pow(struct tensor *a, struct tensor *b)
{
	return ag_binary(TENSOR_POW, a, b);
}
struct tensor *ag_maximum(struct tensor *a, struct tensor *b)
{
	return ag_binary(TENSOR_MAXIMUM, a, b);
}
struct tensor *ag_minimum(struct tensor *a, struct tensor *b)
{
	return ag_binary(TENSOR_MINIMUM, a, b);
}

struct tensor *ag_add_scalar(struct tensor *x, double s)
{
	return ag_unary(TENSOR_ADD_SCALAR, x, s);
}
struct tensor *ag_mul_scalar(struct tensor *x, double s)
{
	return ag_unary(TENSOR_MUL_SCALAR, x, s);
}
struct tensor *ag_pow_scalar(struct tensor *x, double p)
{
	return ag_unary(TENSOR_POW_SCALAR, x, p);
}
struct tensor *ag_neg(struct tensor *x)
{
	return ag_unary(TENSOR_NEG, x, 0);
}
struct tensor *ag_exp(struct tensor *x)
{
	return ag_unary(TENSOR_EXP, x, 0);
}
struct tensor *ag_log(struct tensor *x)
{
	return ag_unary(TENSOR_LOG, x, 0);
}
struct tensor *ag_sqrt(struct tensor *x)
{
	return ag_unary(TENSOR_SQRT, x, 0);
}
struct tensor *ag_rsqrt(struct tensor *x)
{
	return ag_unary(TENSOR_RSQRT, x, 0);
}
struct tensor *ag_tanh(struct tensor *x)
{
	return ag_unary(TENSOR_TANH, x, 0);
}
struct tensor *ag_erf(struct tensor *x)
{
	return ag_unary(TENSOR_ERF, x, 0);
}
struct tensor *ag_abs(struct tensor *x)
{
	return ag_unary(TENSOR_ABS, x, 0);
}
struct tensor *ag_relu(struct tensor *x)
{
	return ag_unary(TENSOR_RELU, x, 0);
}
struct tensor *ag_gelu(struct tensor *x)
{
	return ag_unary(TENSOR_GELU, x, 0);
}
struct tensor *ag_gelu_tanh(struct tensor *x)
{
	return ag_unary(TENSOR_GELU_TANH, x, 0);
}
struct tensor *ag_silu(struct tensor *x)
{
	return ag_unary(TENSOR_SILU, x, 0);
}
struct tensor *ag_sigmoid(struct tensor *x)
{
	return ag_unary(TENSOR_SIGMOID, x, 0);
}

/* ---- where, masked_fill, cast, dropout ------------------------------------ */

static int where_backward(struct ag_node *n, const struct tensor *g)
{
	const struct tensor *cond = n->saved[0];
	struct tensor *zero = tensor_zeros(g->dtype, g->storage->device, 0, NULL);
	tensor_heap_begin(); /* heap results are handed over, arena ones copied */
	struct tensor *ga = tensor_where(cond, g, zero), *gb = tensor_where(cond, zero, g);
	tensor_heap_end();
	int rc = ag_accumulate_take(n->inputs[0], ga);
	if (rc < 0) {
		tensor_free(gb);
		return rc;
	}
	return ag_accumulate_take(n->inputs[1], gb);
}

struct tensor *ag_where(const struct tensor *cond, struct tensor *a, struct tensor *b)
{
	AG_OP_REGION;
	struct tensor *y = tensor_where(cond, a, b);
	struct tensor *in[2] = { a, b };
	struct ag_node *n = ag_record("where", y, where_backward, 2, in);
	if (n)
		ag_save(n, (struct tensor *)cond);
	return y;
}

static int masked_fill_backward(struct ag_node *n, const struct tensor *g)
{
	tensor_heap_begin();
	struct tensor *d = tensor_masked_fill(g, n->saved[0], 0.0);
	tensor_heap_end();
	return ag_accumulate_take(n->inputs[0], d);
}

struct tensor *ag_masked_fill(struct tensor *x, const struct tensor *mask, double value)
{
	AG_OP_REGION;
	struct tensor *y = tensor_masked_fill(x, mask, value);
	struct ag_node *n = ag_record("masked_fill", y, masked_fill_backward, 1, &x);
	if (n)
		ag_save(n, (struct tensor *)mask);
	return y;
}

static int cast_backward(struct ag_node *n, const struct tensor *g)
{
	tensor_heap_begin();
	struct tensor *d = tensor_cast(g, n->inputs[0]->dtype);
	tensor_heap_end();
	return ag_accumulate_take(n->inputs[0], d);
}

struct tensor *ag_cast(struct tensor *x, enum tensor_dtype dt)
{
	AG_OP_REGION;
	if (x && dt == TENSOR_BF16 && x->requires_grad && ag_grad_enabled()) {
		char b[128];
		tensor_error(TENSOR_ERR_DTYPE,
			     "ag_cast: %s %s requires grad and a bf16 tensor cannot carry a "
			     "gradient (cast a detached copy, or under no-grad)",
			     tensor_shape_str(x, b, sizeof b), tensor_dtype_name(x->dtype));
		return NULL;
	}
	struct tensor *y = tensor_cast(x, dt);
	if (dt == TENSOR_F32 || dt == TENSOR_F64)
		ag_record("cast", y, cast_backward, 1, &x);
	return y;
}

/* Node: f[0] = p, i[0] = seed, i[1] = first; nothing saved: the mask is a pure
 * function of (shape, p, seed, first), so backward applies the same one to dout
 * (in place when it can take it). */
static int dropout_backward(struct ag_node *n, const struct tensor *g)
{
	double p = n->f[0];
	uint64_t seed = (uint64_t)n->i[0], first = (uint64_t)n->i[1];
	struct tensor *own = ag_dout_take(n);
	if (own) {
		if (tensor_dropout_at_(own, p, seed, first) < 0) {
			tensor_free(own);
			return tensor_last_status();
		}
		return ag_accumulate_take(n->inputs[0], own);
	}
	tensor_heap_begin();
	struct tensor *d = tensor_dropout_at(g, p, seed, first);
	tensor_heap_end();
	return ag_accumulate_take(n->inputs[0], d);
}

/* tensor_dropout on the tape. A training step keeps one tensor per dropout
 * (its output): the mask is drawn again in backward. */
struct tensor *ag_dropout(struct tensor *x, double p, uint64_t seed, bool training)
{
	return ag_dropout_at(x, p, seed, 0, training);
}

struct tensor *ag_dropout_at(struct tensor *x, double p, uint64_t seed, uint64_t first,
			     bool training)
{
	AG_OP_REGION;
	if (!x)
		return NULL;
	if (!(p >= 0 && p < 1)) {
		tensor_error(TENSOR_ERR_ARG, "dropout: p must be in [0, 1), got %g", p);
		return NULL;
	}
	if (!training || p == 0)
		return x;
	struct tensor *y = tensor_dropout_at(x, p, seed, first);
	struct ag_node *n = ag_record("dropout", y, dropout_backward, 1, &x);
	if (n) {
		n->f[0] = p;
		n->i[0] = (int64_t)seed;
		n->i[1] = (int64_t)first;
	}
	return y;
}
