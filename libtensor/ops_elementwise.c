/* Elementwise front-ends: unary and scalar ops, broadcasting binary ops, where, masked_fill. */
#include <math.h>
#include <string.h>

#include "backend.h"

static const char *const unary_name[TENSOR_NUNARY] = {
	[TENSOR_NEG] = "neg",
	[TENSOR_EXP] = "exp",
	[TENSOR_LOG] = "log",
	[TENSOR_SQRT] = "sqrt",
	[TENSOR_RSQRT] = "rsqrt",
	[TENSOR_TANH] = "tanh",
	[TENSOR_ERF] = "erf",
	[TENSOR_ABS] = "abs",
	[TENSOR_RELU] = "relu",
	[TENSOR_GELU] = "gelu",
	[TENSOR_GELU_TANH] = "gelu_tanh",
	[TENSOR_SILU] = "silu",
	[TENSOR_SIGMOID] = "sigmoid",
	[TENSOR_SQUARE] = "square",
	[TENSOR_RECIPROCAL] = "reciprocal",
	[TENSOR_ADD_SCALAR] = "add_scalar",
	[TENSOR_MUL_SCALAR] = "mul_scalar",
	[TENSOR_POW_SCALAR] = "pow_scalar",
	[TENSOR_GELU_GRAD] = "gelu_grad",
	[TENSOR_GELU_TANH_GRAD] = "gelu_tanh_grad",
	[TENSOR_SILU_GRAD] = "silu_grad",
};

static const char *const binary_name[TENSOR_NBINARY] = {
	[TENSOR_ADD] = "add",
	[TENSOR_SUB] = "sub",
	[TENSOR_MUL] = "mul",
	[TENSOR_DIV] = "div",
	[TENSOR_POW] = "pow",
	[TENSOR_MAXIMUM] = "maximum",
	[TENSOR_MINIMUM] = "minimum",
	[TENSOR_MUL_GELU_GRAD] = "mul_gelu_grad",
	[TENSOR_MUL_GELU_TANH_GRAD] = "mul_gelu_tanh_grad",
	[TENSOR_MUL_SILU_GRAD] = "mul_silu_grad",
	[TENSOR_EQ] = "eq",
	[TENSOR_NE] = "ne",
	[TENSOR_LT] = "lt",
	[TENSOR_LE] = "le",
	[TENSOR_GT] = "gt",
	[TENSOR_GE] = "ge",
};

static bool is_float(enum tensor_dtype dt)
{
	return dt == TENSOR_F32 || dt == TENSOR_F64;
}

static bool unary_takes_int(enum tensor_unary_op op)
{
	return op == TENSOR_NEG || op == TENSOR_ABS || op == TENSOR_RELU || op == TENSOR_SQUARE ||
	       op == TENSOR_ADD_SCALAR || op == TENSOR_MUL_SCALAR;
}

/* Whether v is a value of integer dtype dt (no rounding, no overflow). */
static bool int_holds(enum tensor_dtype dt, double v)
{
	if (v != trunc(v))
		return false; /* also NaN and inf */
	if (dt == TENSOR_I32)
		return v >= INT32_MIN && v <= INT32_MAX;
	return v >= -0x1p63 && v < 0x1p63;
}

/* Device and dtype agreement of two operands, naming both. */
static int check_same(const char *op, const char *what, const struct tensor *a,
		      const struct tensor *b)
{
	char ba[128], bb[128];
	tensor_shape_str(a, ba, sizeof ba);
	tensor_shape_str(b, bb, sizeof bb);
	if (a->storage->device != b->storage->device)
		return tensor_error(TENSOR_ERR_DEVICE,
				    "%s: %s on different devices: %s on %s and %s on %s", op, what,
				    ba, tensor_device_name(a->storage->device), bb,
				    tensor_device_name(b->storage->device));
	if (a->dtype != b->dtype)
		return tensor_error(TENSOR_ERR_DTYPE,
				    "%s: %s have different dtypes: %s %s and %s %s, expected one "
				    "dtype (no promotion)",
				    op, what, ba, tensor_dtype_name(a->dtype), bb,
				    tensor_dtype_name(b->dtype));
	return TENSOR_OK;
}

/* t broadcast to (nd, shape): t itself when it already has that shape. */
static struct tensor *expand_to(const struct tensor *t, int nd, const int64_t *shape)
{
	struct tensor tmp = { .ndim = nd };
	memcpy(tmp.shape, shape, sizeof(int64_t) * (size_t)nd);
	if (tensor_same_shape(t, &tmp))
		return (struct tensor *)t;
	return tensor_broadcast_to(t, nd, shape);
}

static void drop_expanded(struct tensor *v, const struct tensor *t)
{
	if (v != t)
		tensor_free(v);
}

/* Broadcast shape of n tensors named names[] into out; returns ndim or -1 with
 * an error listing every shape. */
static int broadcast_n(const char *op, int n, const struct tensor *const *ts,
		       const char *const *names, int64_t *out)
{
	int nd = 0;
	for (int k = 0; k < n; k++)
		nd = ts[k]->ndim > nd ? ts[k]->ndim : nd;
	for (int i = 0; i < nd; i++) {
		int64_t size = 1;
		for (int k = 0; k < n; k++) {
			int j = ts[k]->ndim - nd + i;
			int64_t s = j >= 0 ? ts[k]->shape[j] : 1;
			if (s != 1 && size != 1 && s != size)
				goto bad;
			size = s != 1 ? s : size;
		}
		out[i] = size;
	}
	return nd;
bad:;
	char msg[512], b[128];
	size_t len = 0;
	for (int k = 0; k < n && len < sizeof msg; k++)
		len += (size_t)snprintf(msg + len, sizeof msg - len, "%s%s %s",
					k == 0 ? "" : (k == n - 1 ? " and " : ", "), names[k],
					tensor_shape_str(ts[k], b, sizeof b));
	tensor_error(TENSOR_ERR_SHAPE, "%s: shapes %s do not broadcast", op, msg);
	return -1;
}

/* ---- unary ----------------------------------------------------------------- */

struct tensor *tensor_unary(enum tensor_unary_op op, const struct tensor *x, double alpha)
{
	if (!x)
		return NULL;
	if ((unsigned)op >= TENSOR_NUNARY) {
		tensor_error(TENSOR_ERR_ARG, "unary: invalid op %d", (int)op);
		return NULL;
	}
	const char *name = unary_name[op];
	bool generic = op == TENSOR_SQUARE || op == TENSOR_RECIPROCAL; /* no ag_<name> */
	if (tensor_check_operand(name,
				 generic		 ? "ag_unary"
				 : op < TENSOR_GELU_GRAD ? ""
							 : NULL,
				 "x", x) < 0)
		return NULL;
	char bx[128];
	tensor_shape_str(x, bx, sizeof bx);
	if (tensor_check_not_bf16(name, x) < 0)
		return NULL;
	if (!is_float(x->dtype) && !unary_takes_int(op)) {
		tensor_error(TENSOR_ERR_DTYPE, "%s: expected f32 or f64, got %s %s", name,
			     tensor_dtype_name(x->dtype), bx);
		return NULL;
	}
	if (!is_float(x->dtype) && (op == TENSOR_ADD_SCALAR || op == TENSOR_MUL_SCALAR) &&
	    !int_holds(x->dtype, alpha)) {
		tensor_error(TENSOR_ERR_ARG,
			     "%s: scalar %g does not fit %s %s, expected an integer in the dtype's "
			     "range",
			     name, alpha, tensor_dtype_name(x->dtype), bx);
		return NULL;
	}
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(x->storage->device, unary, name);
	struct tensor *out =
	    be ? tensor_new(x->dtype, x->storage->device, x->ndim, x->shape) : NULL;
	if (!out)
		return NULL;
	return tensor_op_result(out, tensor_numel(out) ? be->unary(op, out, x, alpha) : TENSOR_OK);
}

struct tensor *tensor_add_scalar(const struct tensor *x, double s)
{
	return tensor_unary(TENSOR_ADD_SCALAR, x, s);
}

struct tensor *tensor_mul_scalar(const struct tensor *x, double s)
{
	return tensor_unary(TENSOR_MUL_SCALAR, x, s);
}

struct tensor *tensor_pow_scalar(const struct tensor *x, double p)
{
	return tensor_unary(TENSOR_POW_SCALAR, x, p);
}

struct tensor *tensor_neg(const struct tensor *x)
{
	return tensor_unary(TENSOR_NEG, x, 0);
}
struct tensor *tensor_exp(const struct tensor *x)
{
	return tensor_unary(TENSOR_EXP, x, 0);
}
struct tensor *tensor_log(const struct tensor *x)
{
	return tensor_unary(TENSOR_LOG, x, 0);
}
struct tensor *tensor_sqrt(const struct tensor *x)
{
	return tensor_unary(TENSOR_SQRT, x, 0);
}
struct tensor *tensor_rsqrt(const struct tensor *x)
{
	return tensor_unary(TENSOR_RSQRT, x, 0);
}
struct tensor *tensor_tanh(const struct tensor *x)
{
	return tensor_unary(TENSOR_TANH, x, 0);
}
struct tensor *tensor_erf(const struct tensor *x)
{
	return tensor_unary(TENSOR_ERF, x, 0);
}
struct tensor *tensor_abs(const struct tensor *x)
{
	return tensor_unary(TENSOR_ABS, x, 0);
}
struct tensor *tensor_relu(const struct tensor *x)
{
	return tensor_unary(TENSOR_RELU, x, 0);
}
struct tensor *tensor_gelu(const struct tensor *x)
{
	return tensor_unary(TENSOR_GELU, x, 0);
}
struct tensor *tensor_silu(const struct tensor *x)
{
	return tensor_unary(TENSOR_SILU, x, 0);
}

struct tensor *tensor_gelu_tanh(const struct tensor *x)
{
	return tensor_unary(TENSOR_GELU_TANH, x, 0);
}

struct tensor *tensor_sigmoid(const struct tensor *x)
{
	return tensor_unary(TENSOR_SIGMOID, x, 0);
}

/* ---- binary ---------------------------------------------------------------- */

/* Division, powers and the derivatives take floats only. */
static int check_binary_dtype(enum tensor_binary_op op, const struct tensor *a,
			      const struct tensor *b)
{
	if (is_float(a->dtype) || op == TENSOR_ADD || op == TENSOR_SUB || op == TENSOR_MUL ||
	    op == TENSOR_MAXIMUM || op == TENSOR_MINIMUM || op >= TENSOR_EQ)
		return TENSOR_OK;
	char ba[128], bb[128];
	return tensor_error(
	    TENSOR_ERR_DTYPE, "%s: expected f32 or f64 (no integer version), got %s %s and %s %s",
	    binary_name[op], tensor_shape_str(a, ba, sizeof ba), tensor_dtype_name(a->dtype),
	    tensor_shape_str(b, bb, sizeof bb), tensor_dtype_name(b->dtype));
}

struct tensor *tensor_binary(enum tensor_binary_op op, const struct tensor *a,
			     const struct tensor *b)
{
	if (!a || !b)
		return NULL;
	if ((unsigned)op >= TENSOR_NBINARY) {
		tensor_error(TENSOR_ERR_ARG, "binary: invalid op %d", (int)op);
		return NULL;
	}
	const char *name = binary_name[op];
	const char *use = op < TENSOR_MUL_GELU_GRAD ? "" : NULL; /* comparisons: no gradient */
	if (op < TENSOR_EQ && (tensor_check_operand(name, use, "a", a) < 0 ||
			       tensor_check_operand(name, use, "b", b) < 0))
		return NULL;
	if (check_same(name, "inputs", a, b) < 0 || tensor_check_not_bf16(name, a) < 0)
		return NULL;
	if (check_binary_dtype(op, a, b) < 0)
		return NULL;
	int64_t shape[TENSOR_MAX_DIMS];
	int nd = tensor_broadcast_shape(name, a, b, shape);
	if (nd < 0)
		return NULL;
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(a->storage->device, binary, name);
	struct tensor *out = be ? tensor_new(a->dtype, a->storage->device, nd, shape) : NULL;
	if (!out)
		return NULL;
	struct tensor *ea = expand_to(a, nd, shape), *eb = expand_to(b, nd, shape);
	int rc = ea && eb ? TENSOR_OK : tensor_last_status();
	if (rc == TENSOR_OK && tensor_numel(out) > 0)
		rc = be->binary(op, out, ea, eb);
	drop_expanded(ea, a);
	drop_expanded(eb, b);
	return tensor_op_result(out, rc);
}

/* a op= b in place (tensor_add_, tensor_mul_); name names the op in errors. */
static int binary_inplace(enum tensor_binary_op op, const char *name, struct tensor *a,
			  const struct tensor *b)
{
	char ba[128], bb[128];
	if (!a || !b)
		return tensor_error(TENSOR_ERR_ARG, "%s: a or b is NULL", name);
	if (check_same(name, "inputs", a, b) < 0 || tensor_check_writable(name, a) < 0 ||
	    check_binary_dtype(op, a, b) < 0)
		return tensor_last_status();
	int64_t shape[TENSOR_MAX_DIMS];
	int nd = tensor_broadcast_shape(name, a, b, shape);
	if (nd < 0)
		return tensor_last_status();
	bool same = nd == a->ndim;
	for (int d = 0; same && d < nd; d++)
		same = shape[d] == a->shape[d];
	if (!same || !tensor_is_contiguous(a))
		return tensor_error(
		    TENSOR_ERR_SHAPE, "%s: a %s must be contiguous and b %s broadcast to it", name,
		    tensor_shape_str(a, ba, sizeof ba), tensor_shape_str(b, bb, sizeof bb));
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(a->storage->device, binary, name);
	if (!be)
		return tensor_last_status();
	struct tensor *eb = expand_to(b, nd, shape);
	int rc = eb ? TENSOR_OK : tensor_last_status();
	if (rc == TENSOR_OK && tensor_numel(a) > 0)
		rc = be->binary(op, a, a, eb); /* elementwise: out may be a */
	drop_expanded(eb, b);
	return rc;
}

int tensor_add_(struct tensor *a, const struct tensor *b)
{
	return binary_inplace(TENSOR_ADD, "tensor_add_", a, b);
}

int tensor_mul_(struct tensor *a, const struct tensor *b)
{
	return binary_inplace(TENSOR_MUL, "tensor_mul_", a, b);
}

int tensor_binary_(enum tensor_binary_op op, struct tensor *a, const struct tensor *b)
{
	if ((unsigned)op >= TENSOR_NBINARY)
		return tensor_error(TENSOR_ERR_ARG, "tensor_binary_: invalid op %d", (int)op);
	return binary_inplace(op, "tensor_binary_", a, b);
}

struct tensor *tensor_add(const struct tensor *a, const struct tensor *b)
{
	return tensor_binary(TENSOR_ADD, a, b);
}

struct tensor *tensor_sub(const struct tensor *a, const struct tensor *b)
{
	return tensor_binary(TENSOR_SUB, a, b);
}

struct tensor *tensor_mul(const struct tensor *a, const struct tensor *b)
{
	return tensor_binary(TENSOR_MUL, a, b);
}

struct tensor *tensor_div(const struct tensor *a, const struct tensor *b)
{
	return tensor_binary(TENSOR_DIV, a, b);
}

struct tensor *tensor_pow(const struct tensor *a, const struct tensor *b)
{
	return tensor_binary(TENSOR_POW, a, b);
}

struct tensor *tensor_maximum(const struct tensor *a, const struct tensor *b)
{
	return tensor_binary(TENSOR_MAXIMUM, a, b);
}

struct tensor *tensor_minimum(const struct tensor *a, const struct tensor *b)
{
	return tensor_binary(TENSOR_MINIMUM, a, b);
}

struct tensor *tensor_eq(const struct tensor *a, const struct tensor *b)
{
	return tensor_binary(TENSOR_EQ, a, b);
}

struct tensor *tensor_ne(const struct tensor *a, const struct tensor *b)
{
	return tensor_binary(TENSOR_NE, a, b);
}

struct tensor *tensor_lt(const struct tensor *a, const struct tensor *b)
{
	return tensor_binary(TENSOR_LT, a, b);
}

struct tensor *tensor_le(const struct tensor *a, const struct tensor *b)
{
	return tensor_binary(TENSOR_LE, a, b);
}

struct tensor *tensor_gt(const struct tensor *a, const struct tensor *b)
{
	return tensor_binary(TENSOR_GT, a, b);
}

struct tensor *tensor_ge(const struct tensor *a, const struct tensor *b)
{
	return tensor_binary(TENSOR_GE, a, b);
}

/* ---- where, masked_fill ---------------------------------------------------- */

/* out = cond ? a : b over (nd, shape), with the three inputs broadcast to it. */
static struct tensor *where_run(const struct tensor_backend *be, int nd, const int64_t *shape,
				const struct tensor *cond, const struct tensor *a,
				const struct tensor *b)
{
	struct tensor *out = tensor_new(a->dtype, a->storage->device, nd, shape);
	if (!out)
		return NULL;
	struct tensor *ec = expand_to(cond, nd, shape), *ea = expand_to(a, nd, shape),
		      *eb = expand_to(b, nd, shape);
	int rc = ec && ea && eb ? TENSOR_OK : tensor_last_status();
	if (rc == TENSOR_OK && tensor_numel(out) > 0)
		rc = be->where(out, ec, ea, eb);
	drop_expanded(ec, cond);
	drop_expanded(ea, a);
	drop_expanded(eb, b);
	return tensor_op_result(out, rc);
}

struct tensor *tensor_where(const struct tensor *cond, const struct tensor *a,
			    const struct tensor *b)
{
	if (!cond || !a || !b)
		return NULL;
	if (tensor_check_operand("where", "", "a", a) < 0 ||
	    tensor_check_operand("where", "", "b", b) < 0)
		return NULL;
	if (check_same("where", "a and b", a, b) < 0 || tensor_check_not_bf16("where", a) < 0 ||
	    tensor_check_not_bf16("where", cond) < 0)
		return NULL;
	if (cond->storage->device != a->storage->device) {
		char bc[128], ba[128];
		tensor_error(TENSOR_ERR_DEVICE,
			     "where: cond and a on different devices: %s on %s and %s on %s",
			     tensor_shape_str(cond, bc, sizeof bc),
			     tensor_device_name(cond->storage->device),
			     tensor_shape_str(a, ba, sizeof ba),
			     tensor_device_name(a->storage->device));
		return NULL;
	}
	const struct tensor *ts[3] = { cond, a, b };
	const char *const names[3] = { "cond", "a", "b" };
	int64_t shape[TENSOR_MAX_DIMS];
	int nd = broadcast_n("where", 3, ts, names, shape);
	if (nd < 0)
		return NULL;
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(a->storage->device, where, "where");
	return be ? where_run(be, nd, shape, cond, a, b) : NULL;
}

/* Checks of masked_fill (name: the op): x and mask not NULL, one device, mask
 * broadcasting to x, value fitting an integer x; the device's backend. */
static const struct tensor_backend *masked_fill_check(const char *name, const struct tensor *x,
						      const struct tensor *mask, double value)
{
	char bx[128], bm[128];
	if (!x || !mask) {
		tensor_error(TENSOR_ERR_ARG, "%s: x or mask is NULL", name);
		return NULL;
	}
	tensor_shape_str(x, bx, sizeof bx);
	tensor_shape_str(mask, bm, sizeof bm);
	if (tensor_check_not_bf16(name, x) < 0 || tensor_check_not_bf16(name, mask) < 0)
		return NULL;
	if (x->storage->device != mask->storage->device) {
		tensor_error(TENSOR_ERR_DEVICE,
			     "%s: x and mask on different devices: %s on %s and %s on %s", name, bx,
			     tensor_device_name(x->storage->device), bm,
			     tensor_device_name(mask->storage->device));
		return NULL;
	}
	bool fits = mask->ndim <= x->ndim;
	for (int i = 0; fits && i < mask->ndim; i++) {
		int64_t m = mask->shape[i], want = x->shape[x->ndim - mask->ndim + i];
		fits = m == want || m == 1;
	}
	if (!fits) {
		tensor_error(TENSOR_ERR_SHAPE,
			     "%s: mask %s does not broadcast to x %s, expected mask dims "
			     "equal to x's trailing dims or 1",
			     name, bm, bx);
		return NULL;
	}
	if (!is_float(x->dtype) && !int_holds(x->dtype, value)) {
		tensor_error(TENSOR_ERR_ARG,
			     "%s: value %g does not fit x %s %s, expected an integer in the "
			     "dtype's range",
			     name, value, tensor_dtype_name(x->dtype), bx);
		return NULL;
	}
	return TENSOR_BACKEND_FOR(x->storage->device, where, name);
}

struct tensor *tensor_masked_fill(const struct tensor *x, const struct tensor *mask, double value)
{
	if (!x || !mask || tensor_check_operand("masked_fill", "", "x", x) < 0)
		return NULL;
	const struct tensor_backend *be = masked_fill_check("masked_fill", x, mask, value);
	struct tensor *fill = be ? tensor_full(x->dtype, x->storage->device, 0, NULL, value) : NULL;
	if (!fill)
		return NULL;
	struct tensor *out = where_run(be, x->ndim, x->shape, mask, fill, x);
	tensor_free(fill);
	return out;
}

int tensor_masked_fill_(struct tensor *x, const struct tensor *mask, double value)
{
	static const char name[] = "tensor_masked_fill_";
	char bx[128];
	const struct tensor_backend *be = masked_fill_check(name, x, mask, value);
	if (!be || tensor_check_writable(name, x) < 0)
		return tensor_last_status();
	if (!tensor_is_contiguous(x))
		return tensor_error(TENSOR_ERR_SHAPE, "%s: x %s is not contiguous", name,
				    tensor_shape_str(x, bx, sizeof bx));
	struct tensor *fill = tensor_full(x->dtype, x->storage->device, 0, NULL, value);
	struct tensor *em = fill ? expand_to(mask, x->ndim, x->shape) : NULL;
	struct tensor *ef = em ? expand_to(fill, x->ndim, x->shape) : NULL;
	int rc = ef ? TENSOR_OK : tensor_last_status();
	if (rc == TENSOR_OK && tensor_numel(x) > 0)
		rc = be->where(x, em, ef, x); /* elementwise: out may be b */
	drop_expanded(ef, fill);
	drop_expanded(em, mask);
	tensor_free(fill);
	return rc;
}
