/* test_ops: the elementwise ops' own cases beside the op table's rows. Unary
 * and scalar ops (and each named wrapper) against naive loop references at
 * f32 2e-6 / f64 1e-12 over nine broadcast shape pairs and mixed layouts,
 * special values (overflow, NaN, the logistic tails), integer dtypes exact
 * beyond 2^53 and wrapping in i32, in-place add_/mul_, empty tensors, NULL
 * chains, heap results and the error messages (where and masked_fill:
 * test_ops_where.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "elementwise_common.h"
#include "test_ops.h"

/* ---- unary ----------------------------------------------------------------- */

static double ref_unary(enum tensor_unary_op op, double x, double a)
{
	switch (op) {
	case TENSOR_NEG: return -x;
	case TENSOR_EXP: return exp(x);
	case TENSOR_LOG: return log(x);
	case TENSOR_SQRT: return sqrt(x);
	case TENSOR_RSQRT: return 1 / sqrt(x);
	case TENSOR_TANH: return tanh(x);
	case TENSOR_ERF: return erf(x);
	case TENSOR_ABS: return fabs(x);
	case TENSOR_RELU: return x > 0 ? x : 0;
	case TENSOR_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
	case TENSOR_GELU_TANH:
		return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
	case TENSOR_SILU: return x / (1 + exp(-x));
	case TENSOR_SIGMOID: return 1 / (1 + exp(-x));
	case TENSOR_SQUARE: return x * x;
	case TENSOR_RECIPROCAL: return 1 / x;
	case TENSOR_ADD_SCALAR: return x + a;
	case TENSOR_MUL_SCALAR: return x * a;
	case TENSOR_POW_SCALAR: return pow(x, a);
	case TENSOR_GELU_GRAD:
		return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-x * x / 2) / sqrt(2 * M_PI);
	case TENSOR_GELU_TANH_GRAD: {
		const double c = sqrt(2 / M_PI), k = 0.044715;
		double t = tanh(c * (x + k * x * x * x));
		return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * k * x * x);
	}
	case TENSOR_SILU_GRAD: {
		double s = 1 / (1 + exp(-x));
		return s + x * s * (1 - s);
	}
	default: ck_abort_msg("no reference for op %d", (int)op); return 0;
	}
}

typedef struct tensor *(*unary_fn)(const struct tensor *);

static const struct unary_case {
	enum tensor_unary_op op;
	const char *name;
	unary_fn fn;   /* the named wrapper, if any */
	bool positive; /* domain: (0.1, 2.1) instead of (-3, 3) */
} unary_cases[] = {
	{ TENSOR_NEG, "neg", tensor_neg, false },
	{ TENSOR_EXP, "exp", tensor_exp, false },
	{ TENSOR_LOG, "log", tensor_log, true },
	{ TENSOR_SQRT, "sqrt", tensor_sqrt, true },
	{ TENSOR_RSQRT, "rsqrt", tensor_rsqrt, true },
	{ TENSOR_TANH, "tanh", tensor_tanh, false },
	{ TENSOR_ERF, "erf", tensor_erf, false },
	{ TENSOR_ABS, "abs", tensor_abs, false },
	{ TENSOR_RELU, "relu", tensor_relu, false },
	{ TENSOR_GELU, "gelu", tensor_gelu, false },
	{ TENSOR_GELU_TANH, "gelu_tanh", tensor_gelu_tanh, false },
	{ TENSOR_SILU, "silu", tensor_silu, false },
	{ TENSOR_SIGMOID, "sigmoid", tensor_sigmoid, false },
	{ TENSOR_SQUARE, "square", NULL, false },
	{ TENSOR_RECIPROCAL, "reciprocal", NULL, true },
	{ TENSOR_GELU_GRAD, "gelu_grad", NULL, false },
	{ TENSOR_GELU_TANH_GRAD, "gelu_tanh_grad", NULL, false },
	{ TENSOR_SILU_GRAD, "silu_grad", NULL, false },
};

/* Check got = op(x) elementwise against the reference on x's values. */
static void check_unary(const char *ctx, const struct tensor *got, const struct tensor *x,
			enum tensor_unary_op op, double alpha)
{
	double *v = tu_values(x);
	for (int64_t i = 0; i < tensor_numel(x); i++)
		v[i] = ref_unary(op, v[i], alpha);
	assert_values(ctx, got, x->dtype, x->ndim, x->shape, v, tol_of(x->dtype));
	free(v);
}

/* Inputs of shape [3,4,5] in the op's domain. */
static struct tensor *unary_input(enum tensor_dtype dt, bool positive, uint64_t seed)
{
	const int64_t s[3] = { 3, 4, 5 };
	double *v = rand_values(60, seed);
	for (int i = 0; i < 60; i++)
		v[i] = positive ? 0.1 + 2 * fabs(v[i]) : 3 * v[i];
	struct tensor *t = make(dt, 3, s, v);
	free(v);
	return t;
}

/* got holds exactly want's values, contiguous, in x's shape and dtype. */
static void assert_same_as(const char *ctx, const struct tensor *got, const struct tensor *want,
			   const struct tensor *x)
{
	ck_assert_msg(want != NULL, "%s: NULL: %s", ctx, tensor_last_error());
	double *v = tu_values(want);
	assert_values(ctx, want, x->dtype, x->ndim, x->shape, v, 0);
	assert_values(ctx, got, x->dtype, x->ndim, x->shape, v, 0);
	free(v);
}

/* tensor_unary's values against the reference, each op in f32 and f64 with the
 * input contiguous, reversed, transposed, sliced and broadcast, within f32 2e-6
 * and f64 1e-12: the op table's "unary <op>" rows (test_ops.c: test_forward).
 * Here, on the same inputs in the same layouts: the result is contiguous, of
 * x's shape and dtype, and each named wrapper returns exactly what
 * tensor_unary does. */
START_TEST(test_unary_named)
{
	for (int c = 0; c < LEN(unary_cases); c++) {
		const struct unary_case *uc = &unary_cases[c];
		for (int k = 0; k < LEN(float_dts); k++) {
			struct tensor *xc = unary_input(float_dts[k], uc->positive, 10 + c);
			for (int lay = 0; lay < NLAYOUTS; lay++) {
				char ctx[128];
				snprintf(ctx, sizeof ctx, "%s %s %s", uc->name,
					 tensor_dtype_name(float_dts[k]), layout_name[lay]);
				struct tensor *x = in_layout(xc, lay);
				struct tensor *want = tensor_unary(uc->op, x, 0);
				assert_same_as(ctx, uc->fn ? uc->fn(x) : want, want, x);
			}
		}
	}
}
END_TEST

/* a += b and a *= b in a's own buffer, b broadcast; and the refusals. */
START_TEST(test_add_mul_inplace)
{
	const int64_t s23[] = { 2, 3 }, s3[] = { 3 }, s32[] = { 3, 2 };
	const double va[] = { 1, 2, 3, 4, 5, 6 }, vb[] = { 10, 20, 30 };
	static const struct {
		int (*op)(struct tensor *, const struct tensor *);
		const char *name;
		double want[6];
	} ops[] = { { tensor_add_, "tensor_add_", { 11, 22, 33, 14, 25, 36 } },
		    { tensor_mul_, "tensor_mul_", { 10, 40, 90, 40, 100, 180 } } };
	for (int k = 0; k < 4; k++) {
		enum tensor_dtype dt = k % 2 ? TENSOR_F64 : TENSOR_F32;
		const char *name = ops[k / 2].name;
		const double *want = ops[k / 2].want;
		int (*op)(struct tensor *, const struct tensor *) = ops[k / 2].op;
		struct tensor *a64 = tensor_from_data(TENSOR_F64, TENSOR_CPU, 2, s23, va);
		struct tensor *b64 = tensor_from_data(TENSOR_F64, TENSOR_CPU, 1, s3, vb);
		struct tensor *a = tensor_cast(a64, dt), *b = tensor_cast(b64, dt);
		ck_assert(a && b);
		tensor_free(a64);
		tensor_free(b64);
		void *buf = a->storage->data;
		ck_assert_int_eq(op(a, b), TENSOR_OK);
		ck_assert_ptr_eq(a->storage->data, buf);
		tu_assert_close(a, want, 6, 0, 0);
		tu_assert_error(op(b, a) < 0, TENSOR_ERR_SHAPE, name, "[3]");
		struct tensor *at = tensor_transpose(a, 0, 1),
			      *z = tensor_zeros(dt, TENSOR_CPU, 2, s32);
		tu_assert_error(op(at, z) < 0, TENSOR_ERR_SHAPE, name, "contiguous");
		tensor_free(at);
		tensor_free(z);
		tu_assert_error(op(a, tensor_zeros(TENSOR_I32, TENSOR_CPU, 1, s3)) < 0,
				TENSOR_ERR_DTYPE, name, NULL);
		tu_assert_error(op(NULL, b) < 0, TENSOR_ERR_ARG, name, "NULL");
		tu_assert_close(a, want, 6, 0, 0); /* refusals change nothing */
		tensor_free(a);
		tensor_free(b);
	}
}
END_TEST

START_TEST(test_scalar_ops)
{
	static const struct {
		enum tensor_unary_op op;
		double alpha;
		bool positive;
	} cases[] = {
		{ TENSOR_ADD_SCALAR, 2.5, false },    { TENSOR_ADD_SCALAR, -1e-3, false },
		{ TENSOR_MUL_SCALAR, -1.5, false },   { TENSOR_MUL_SCALAR, 0, false },
		{ TENSOR_POW_SCALAR, 2, false },      { TENSOR_POW_SCALAR, 3, false },
		{ TENSOR_POW_SCALAR, 0.5, true },     { TENSOR_POW_SCALAR, -1.5, true },
		{ TENSOR_POW_SCALAR, 1.0 / 3, true },
	};
	for (int c = 0; c < LEN(cases); c++) {
		for (int k = 0; k < LEN(float_dts); k++) {
			struct tensor *xc = unary_input(float_dts[k], cases[c].positive, 40 + c);
			for (int lay = 0; lay < NLAYOUTS; lay++) {
				char ctx[128];
				snprintf(ctx, sizeof ctx, "scalar op %d alpha %g %s %s",
					 cases[c].op, cases[c].alpha,
					 tensor_dtype_name(float_dts[k]), layout_name[lay]);
				struct tensor *x = in_layout(xc, lay);
				double a = cases[c].alpha;
				check_unary(ctx, tensor_unary(cases[c].op, x, a), x, cases[c].op,
					    a);
				struct tensor *named =
				    cases[c].op == TENSOR_ADD_SCALAR   ? tensor_add_scalar(x, a)
				    : cases[c].op == TENSOR_MUL_SCALAR ? tensor_mul_scalar(x, a)
								       : tensor_pow_scalar(x, a);
				check_unary(ctx, named, x, cases[c].op, a);
			}
		}
	}
}
END_TEST

/* Large |x|: the logistic family must not overflow into NaN, and gelu keeps
 * its relative precision in the negative tail. */
START_TEST(test_unary_extremes)
{
	const double xs[] = { -1000, -100, -40, -10, -1e-30, 0, 1e-30, 10, 40, 100, 1000 };
	const int64_t s[1] = { LEN(xs) };
	for (int k = 0; k < LEN(float_dts); k++) {
		enum tensor_dtype dt = float_dts[k];
		struct tensor *x = make(dt, 1, s, xs);
		struct tensor *sig = tensor_sigmoid(x), *silu = tensor_silu(x);
		struct tensor *gelu = tensor_gelu(x), *gt = tensor_gelu_tanh(x);
		double *vs = tu_values(sig), *vl = tu_values(silu), *vg = tu_values(gelu),
		       *vt = tu_values(gt);
		for (int i = 0; i < LEN(xs); i++) {
			ck_assert_msg(vs[i] >= 0 && vs[i] <= 1, "sigmoid(%g) = %g", xs[i], vs[i]);
			ck_assert_msg(isfinite(vl[i]) && isfinite(vg[i]) && isfinite(vt[i]),
				      "x = %g: silu %g gelu %g gelu_tanh %g", xs[i], vl[i], vg[i],
				      vt[i]);
			if (xs[i] >= 10) {
				ck_assert_double_eq_tol(vs[i], 1, 1e-4);
				ck_assert_double_eq_tol(vl[i], xs[i], 1e-3);
				ck_assert_double_eq_tol(vg[i], xs[i], 1e-3);
				ck_assert_double_eq_tol(vt[i], xs[i], 1e-3);
			} else if (xs[i] <= -10) {
				ck_assert_double_eq_tol(vs[i], 0, 1e-4);
				ck_assert_double_eq_tol(vl[i], 0, 1e-3);
				ck_assert_double_eq_tol(vg[i], 0, 1e-3);
				ck_assert_double_eq_tol(vt[i], 0, 1e-3);
			}
		}
		free(vs);
		free(vl);
		free(vg);
		free(vt);

		/* Phi(-5) = 2.8665157187919391e-07; a float 1 + erf(x) keeps about 10% of it */
		const double m5[1] = { -5 }, want = -5 * 2.8665157187919391e-07;
		const int64_t s1[1] = { 1 };
		double g = tensor_get(tensor_gelu(make(dt, 1, s1, m5)), (const int64_t[]){ 0 });
		ck_assert_msg(fabs(g - want) <= (dt == TENSOR_F32 ? 1e-5 : 1e-12) * fabs(want),
			      "gelu(-5) = %.10g, want %.10g", g, want);
		/* f32: relative precision down to x = -12 (Phi(-12) = 1.7764821120776e-33);
		 * below x = -13.2, where exp(-x^2 / 2) < FLT_MIN, gelu and gelu' are flushed
		 * to 0 (cpu_math.h), not left as subnormals */
		if (dt == TENSOR_F32) {
			const double m12[1] = { -12 }, want12 = -12 * 1.7764821120776e-33;
			g = tensor_get(tensor_gelu(make(dt, 1, s1, m12)), (const int64_t[]){ 0 });
			ck_assert_msg(fabs(g - want12) <= 1e-5 * fabs(want12),
				      "gelu(-12) = %.10g, want %.10g", g, want12);
			const double tail[3] = { -13.5, -20, -1000 };
			const int64_t s3[1] = { 3 };
			struct tensor *xt = make(dt, 1, s3, tail);
			struct tensor *ys[2] = { tensor_gelu(xt),
						 tensor_unary(TENSOR_GELU_GRAD, xt, 0) };
			for (int y = 0; y < 2; y++)
				for (int i = 0; i < 3; i++) {
					double v = tensor_get(ys[y], (const int64_t[]){ i });
					ck_assert_msg(v == 0, "gelu%s(%g) = %g, want 0",
						      y ? "'" : "", tail[i], v);
				}
		}
		/* exp overflows to +inf, relu keeps NaN */
		const double big[2] = { 1000, NAN }, wexp[2] = { INFINITY, NAN },
			     wrelu[2] = { 1000, NAN };
		const int64_t s2[1] = { 2 };
		assert_values("exp", tensor_exp(make(dt, 1, s2, big)), dt, 1, s2, wexp, 0);
		assert_values("relu", tensor_relu(make(dt, 1, s2, big)), dt, 1, s2, wrelu, 0);
	}
}
END_TEST

START_TEST(test_unary_int)
{
	static const enum tensor_unary_op ops[] = { TENSOR_NEG,	       TENSOR_ABS,
						    TENSOR_RELU,       TENSOR_SQUARE,
						    TENSOR_ADD_SCALAR, TENSOR_MUL_SCALAR };
	const int64_t s[2] = { 3, 4 };
	const double v[12] = { -7, -1, 0, 3, 100, -1000, 999, 2, -2, 5, 46340, -46340 };
	for (int k = 0; k < LEN(int_dts); k++) {
		struct tensor *xc = make(int_dts[k], 2, s, v);
		for (int lay = 0; lay < NLAYOUTS; lay++) {
			struct tensor *x = in_layout(xc, lay);
			for (int o = 0; o < LEN(ops); o++) {
				double alpha = ops[o] == TENSOR_ADD_SCALAR ? -17 : 3;
				char ctx[128];
				snprintf(ctx, sizeof ctx, "int op %d %s %s", ops[o],
					 tensor_dtype_name(int_dts[k]), layout_name[lay]);
				check_unary(ctx, tensor_unary(ops[o], x, alpha), x, ops[o], alpha);
			}
			check_unary("neg", tensor_neg(x), x, TENSOR_NEG, 0);
			check_unary("abs", tensor_abs(x), x, TENSOR_ABS, 0);
			check_unary("relu", tensor_relu(x), x, TENSOR_RELU, 0);
			check_unary("add_scalar", tensor_add_scalar(x, 4), x, TENSOR_ADD_SCALAR, 4);
			check_unary("mul_scalar", tensor_mul_scalar(x, -2), x, TENSOR_MUL_SCALAR,
				    -2);
		}
	}
	/* i64 is exact beyond 2^53 */
	const int64_t big[3] = { (1LL << 60) + 1, -(1LL << 60) - 3, INT64_MAX - 5 };
	const int64_t s3[1] = { 3 };
	struct tensor *x = tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, s3, big);
	int64_t got[3];
	int_values(tensor_add_scalar(x, 2), got);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(got[i], big[i] + 2);
	int_values(tensor_neg(x), got);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(got[i], -big[i]);
	int_values(tensor_mul_scalar(tensor_narrow(x, 0, 0, 2), 7), got);
	ck_assert_int_eq(got[0], 7 * big[0]);
	ck_assert_int_eq(got[1], 7 * big[1]);
	/* i32 wraps around (two's complement), as in PyTorch */
	const int32_t edge[2] = { INT32_MAX, INT32_MIN };
	const int64_t s2[1] = { 2 };
	struct tensor *e = tensor_from_data(TENSOR_I32, TENSOR_CPU, 1, s2, edge);
	int_values(tensor_add_scalar(e, 1), got);
	ck_assert_int_eq(got[0], INT32_MIN);
	ck_assert_int_eq(got[1], INT32_MIN + 1);
	int_values(tensor_neg(e), got);
	ck_assert_int_eq(got[1], INT32_MIN);
}
END_TEST

START_TEST(test_unary_errors)
{
	const int64_t s[2] = { 2, 3 };
	struct tensor *xi = tensor_zeros(TENSOR_I32, TENSOR_CPU, 2, s);
	struct tensor *xl = tensor_zeros(TENSOR_I64, TENSOR_CPU, 2, s);
	/* float-only ops refuse integers, naming the op, dtype and shape */
	for (int c = 0; c < LEN(unary_cases); c++) {
		enum tensor_unary_op op = unary_cases[c].op;
		if (op == TENSOR_NEG || op == TENSOR_ABS || op == TENSOR_RELU ||
		    op == TENSOR_SQUARE)
			continue;
		tu_assert_error(!tensor_unary(op, xi, 0), TENSOR_ERR_DTYPE, unary_cases[c].name,
				"i32 [2,3]");
		if (unary_cases[c].fn)
			tu_assert_error(!unary_cases[c].fn(xl), TENSOR_ERR_DTYPE,
					unary_cases[c].name, "i64 [2,3]");
	}
	tu_assert_error(!tensor_pow_scalar(xi, 2), TENSOR_ERR_DTYPE, "pow_scalar", "i32");
	/* integer scalars must be integers of the dtype */
	tu_assert_error(!tensor_add_scalar(xi, 2.5), TENSOR_ERR_ARG, "add_scalar", "2.5");
	tu_assert_error(!tensor_mul_scalar(xi, 3e9), TENSOR_ERR_ARG, "mul_scalar", "i32 [2,3]");
	tu_assert_error(!tensor_add_scalar(xl, NAN), TENSOR_ERR_ARG, "add_scalar", "i64");
	tu_assert_error(!tensor_mul_scalar(xl, 0x1p63), TENSOR_ERR_ARG, "mul_scalar", "i64");
	ck_assert(tensor_mul_scalar(xi, -2147483648.0) != NULL);
	/* an op outside the enum */
	struct tensor *xf = tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, s);
	tu_assert_error(!tensor_unary(TENSOR_NUNARY, xf, 0), TENSOR_ERR_ARG, "unary", "op");
	tu_assert_error(!tensor_unary((enum tensor_unary_op) - 1, xf, 0), TENSOR_ERR_ARG, "unary",
			NULL);
}
END_TEST

/* ---- binary ---------------------------------------------------------------- */

typedef struct tensor *(*binary_fn)(const struct tensor *, const struct tensor *);

static const struct binary_case {
	enum tensor_binary_op op;
	const char *name;
	binary_fn fn;
	bool ints; /* defined on i32/i64 */
} binary_cases[] = {
	{ TENSOR_ADD, "add", tensor_add, true },
	{ TENSOR_SUB, "sub", tensor_sub, true },
	{ TENSOR_MUL, "mul", tensor_mul, true },
	{ TENSOR_DIV, "div", tensor_div, false },
	{ TENSOR_POW, "pow", tensor_pow, false },
	{ TENSOR_MAXIMUM, "maximum", tensor_maximum, true },
	{ TENSOR_MINIMUM, "minimum", tensor_minimum, true },
	{ TENSOR_EQ, "eq", tensor_eq, true },
	{ TENSOR_NE, "ne", tensor_ne, true },
	{ TENSOR_LT, "lt", tensor_lt, true },
	{ TENSOR_LE, "le", tensor_le, true },
	{ TENSOR_GT, "gt", tensor_gt, true },
	{ TENSOR_GE, "ge", tensor_ge, true },
};

static double ref_binary(enum tensor_binary_op op, double a, double b)
{
	switch (op) {
	case TENSOR_ADD: return a + b;
	case TENSOR_SUB: return a - b;
	case TENSOR_MUL: return a * b;
	case TENSOR_DIV: return a / b;
	case TENSOR_POW: return pow(a, b);
	case TENSOR_MAXIMUM: return isnan(a) || isnan(b) ? NAN : (a > b ? a : b);
	case TENSOR_MINIMUM: return isnan(a) || isnan(b) ? NAN : (a < b ? a : b);
	case TENSOR_EQ: return a == b;
	case TENSOR_NE: return a != b;
	case TENSOR_LT: return a < b;
	case TENSOR_LE: return a <= b;
	case TENSOR_GT: return a > b;
	case TENSOR_GE: return a >= b;
	default: ck_abort_msg("no reference for op %d", (int)op); return 0;
	}
}

/* Check got = a op b, broadcast to (nd, shape), against the naive loop. */
static void check_binary(const char *ctx, const struct tensor *got, enum tensor_binary_op op,
			 const struct tensor *a, const struct tensor *b, int nd,
			 const int64_t *shape)
{
	double *va = tu_values(a), *vb = tu_values(b);
	int64_t n = numel_of(nd, shape), idx[TENSOR_MAX_DIMS];
	double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
	for (int64_t i = 0; i < n; i++) {
		tu_unravel(i, nd, shape, idx);
		want[i] = ref_binary(op, va[bcast_index(a, nd, idx)], vb[bcast_index(b, nd, idx)]);
	}
	assert_values(ctx, got, a->dtype, nd, shape, want, tol_of(a->dtype));
	free(va);
	free(vb);
	free(want);
}

static const struct shape_pair {
	int na, nb, nout;
	int64_t a[4], b[4], out[4];
} shape_pairs[] = {
	{ 3, 1, 3, { 2, 3, 4 }, { 4 }, { 2, 3, 4 } },
	{ 3, 2, 3, { 2, 3, 4 }, { 3, 1 }, { 2, 3, 4 } },
	{ 3, 3, 3, { 2, 3, 4 }, { 2, 1, 4 }, { 2, 3, 4 } },
	{ 3, 1, 3, { 2, 3, 4 }, { 1 }, { 2, 3, 4 } },
	{ 1, 3, 3, { 4 }, { 2, 3, 4 }, { 2, 3, 4 } },
	{ 2, 2, 2, { 3, 1 }, { 1, 4 }, { 3, 4 } },
	{ 3, 3, 3, { 2, 3, 4 }, { 2, 3, 4 }, { 2, 3, 4 } },
	{ 0, 2, 2, { 0 }, { 2, 3 }, { 2, 3 } },
	{ 4, 3, 4, { 2, 1, 3, 5 }, { 4, 1, 1 }, { 2, 4, 3, 5 } },
};

/* Every op, dtype, shape pair and a few layout combinations of a and b. */
static void run_binary_cases(const enum tensor_dtype *dts, int ndts)
{
	static const int lays[][2] = { { CONTIG, CONTIG },
				       { STRIDED, CONTIG },
				       { CONTIG, TRANSPOSED },
				       { SLICED, STRIDED },
				       { TRANSPOSED, SLICED } };
	for (int c = 0; c < LEN(binary_cases); c++) {
		const struct binary_case *bc = &binary_cases[c];
		for (int k = 0; k < ndts; k++) {
			if (!bc->ints && (dts[k] == TENSOR_I32 || dts[k] == TENSOR_I64))
				continue;
			for (int p = 0; p < LEN(shape_pairs); p++) {
				const struct shape_pair *sp = &shape_pairs[p];
				struct tensor *ac =
				    binary_input(dts[k], bc->op, false, sp->na, sp->a, 100 * c + p);
				struct tensor *bcn = binary_input(dts[k], bc->op, true, sp->nb,
								  sp->b, 100 * c + p + 50);
				for (int l = 0; l < LEN(lays); l++) {
					struct tensor *a = in_layout(ac, lays[l][0]);
					struct tensor *b = in_layout(bcn, lays[l][1]);
					char ctx[160];
					snprintf(ctx, sizeof ctx, "%s %s pair %d layouts %s/%s",
						 bc->name, tensor_dtype_name(dts[k]), p,
						 layout_name[lays[l][0]], layout_name[lays[l][1]]);
					check_binary(ctx, tensor_binary(bc->op, a, b), bc->op, a, b,
						     sp->nout, sp->out);
					check_binary(ctx, bc->fn(a, b), bc->op, a, b, sp->nout,
						     sp->out);
				}
			}
		}
	}
}

START_TEST(test_binary_float)
{
	run_binary_cases(float_dts, LEN(float_dts));
}
END_TEST

START_TEST(test_binary_int)
{
	run_binary_cases(int_dts, LEN(int_dts));
	/* i64 exact beyond 2^53; i32 wraps */
	const int64_t big[2] = { (1LL << 60) + 1, (1LL << 58) - 1 }, one[1] = { 3 };
	const int64_t s2[1] = { 2 }, s1[1] = { 1 };
	struct tensor *a = tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, s2, big);
	struct tensor *b = tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, s1, one);
	int64_t got[2];
	int_values(tensor_add(a, b), got);
	ck_assert_int_eq(got[0], big[0] + 3);
	ck_assert_int_eq(got[1], big[1] + 3);
	int_values(tensor_sub(b, a), got);
	ck_assert_int_eq(got[0], 3 - big[0]);
	int_values(tensor_mul(a, b), got);
	ck_assert_int_eq(got[1], 3 * big[1]);
	int_values(tensor_eq(a, tensor_add_scalar(a, 1)), got);
	ck_assert_int_eq(got[0], 0);
	int_values(tensor_lt(a, tensor_add_scalar(a, 1)), got);
	ck_assert_int_eq(got[1], 1);
	const int32_t mx[1] = { INT32_MAX }, two[1] = { 2 };
	int_values(tensor_add(tensor_from_data(TENSOR_I32, TENSOR_CPU, 1, s1, mx),
			      tensor_from_data(TENSOR_I32, TENSOR_CPU, 1, s1, two)),
		   got);
	ck_assert_int_eq(got[0], INT32_MIN + 1);
}
END_TEST

/* Operands whose row is broadcast for both (stride 0 twice), expanded views
 * passed in by the caller, and NaN propagation of maximum/minimum. */
START_TEST(test_binary_special_layouts)
{
	const int64_t s21[2] = { 2, 1 }, s23[2] = { 2, 3 }, s5[1] = { 5 };
	for (int k = 0; k < LEN(float_dts); k++) {
		enum tensor_dtype dt = float_dts[k];
		const double va[2] = { 1.5, -2 }, vb[2] = { 0.25, 4 };
		struct tensor *a = tensor_expand(make(dt, 2, s21, va), 2, s23);
		struct tensor *b = tensor_expand(make(dt, 2, s21, vb), 2, s23);
		for (int c = 0; c < LEN(binary_cases); c++)
			check_binary(binary_cases[c].name, binary_cases[c].fn(a, b),
				     binary_cases[c].op, a, b, 2, s23);
		const double one[1] = { 3 };
		struct tensor *e = tensor_expand(make(dt, 1, (const int64_t[]){ 1 }, one), 1, s5);
		struct tensor *x = in_layout(unary_input(dt, false, 7), TRANSPOSED);
		struct tensor *row = tensor_select(tensor_select(x, 0, 1), 0, 2); /* stride 4 */
		check_binary("expanded+strided", tensor_add(e, row), TENSOR_ADD, e, row, 1, s5);
		check_binary("strided*expanded", tensor_mul(row, e), TENSOR_MUL, row, e, 1, s5);

		const double vn[3] = { NAN, 1, -1 }, vm[3] = { 0, NAN, -2 };
		const int64_t s3[1] = { 3 };
		struct tensor *n1 = make(dt, 1, s3, vn), *n2 = make(dt, 1, s3, vm);
		const double wmax[3] = { NAN, NAN, -1 }, wmin[3] = { NAN, NAN, -2 };
		assert_values("maximum NaN", tensor_maximum(n1, n2), dt, 1, s3, wmax, 0);
		assert_values("minimum NaN", tensor_minimum(n1, n2), dt, 1, s3, wmin, 0);
	}
}
END_TEST

START_TEST(test_binary_errors)
{
	const int64_t s23[2] = { 2, 3 }, s4[1] = { 4 }, s3[1] = { 3 };
	struct tensor *a = tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, s23);
	struct tensor *b = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, s4);
	for (int c = 0; c < LEN(binary_cases); c++) {
		char name[32];
		snprintf(name, sizeof name, "%s: ", binary_cases[c].name);
		tu_assert_error(!binary_cases[c].fn(a, b), TENSOR_ERR_SHAPE, name, "[2,3] and [4]");
		tu_assert_error(!tensor_binary(binary_cases[c].op, b, a), TENSOR_ERR_SHAPE, name,
				"[4] and [2,3]");
	}
	/* an empty dim broadcasts only with 1 */
	const int64_t s03[2] = { 0, 3 };
	tu_assert_error(!tensor_add(tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, s03), a),
			TENSOR_ERR_SHAPE, "add", "[0,3] and [2,3]");
	/* no dtype promotion */
	struct tensor *d = tensor_zeros(TENSOR_F64, TENSOR_CPU, 1, s3);
	tu_assert_error(!tensor_sub(a, d), TENSOR_ERR_DTYPE, "sub: ", "[2,3] f32 and [3] f64");
	struct tensor *i = tensor_zeros(TENSOR_I32, TENSOR_CPU, 1, s3);
	tu_assert_error(!tensor_eq(i, a), TENSOR_ERR_DTYPE, "eq: ", "[3] i32 and [2,3] f32");
	/* integer division and powers are refused */
	tu_assert_error(!tensor_div(i, i), TENSOR_ERR_DTYPE, "div: ", "i32");
	struct tensor *l = tensor_zeros(TENSOR_I64, TENSOR_CPU, 2, s23);
	tu_assert_error(!tensor_pow(l, l), TENSOR_ERR_DTYPE, "pow: ", "[2,3] i64");
	tu_assert_error(!tensor_binary(TENSOR_MUL_SILU_GRAD, i, i), TENSOR_ERR_DTYPE,
			"mul_silu_grad: ", "[3] i32");
	tu_assert_error(!tensor_binary(TENSOR_NBINARY, a, a), TENSOR_ERR_ARG, "binary", "op");
	/* tensor_binary_: any op in place (a comparison gives 1 or 0 in a's dtype), the same
	 * refusals */
	const double xv[3] = { -1, 0, 2 }, yv[3] = { 1, 0, 1 }, lt[3] = { 1, 0, 0 };
	struct tensor *x = make(TENSOR_F32, 1, s3, xv), *y = make(TENSOR_F32, 1, s3, yv);
	ck_assert_int_eq(tensor_binary_(TENSOR_LT, x, y), TENSOR_OK);
	assert_values("binary_ lt", x, TENSOR_F32, 1, s3, lt, 0);
	tu_assert_error(tensor_binary_(TENSOR_NBINARY, x, y) < 0, TENSOR_ERR_ARG, "tensor_binary_",
			"op");
	tu_assert_error(tensor_binary_(TENSOR_DIV, i, i) < 0, TENSOR_ERR_DTYPE, "div: ", "i32");
	tu_assert_error(tensor_binary_(TENSOR_MUL, x, d) < 0, TENSOR_ERR_DTYPE, "tensor_binary_",
			"f64");
	/* device mismatch needs a second device: see test_cuda */
}
END_TEST

/* ---- empty tensors, NULL inputs, heap results -------------------------------- */

START_TEST(test_empty)
{
	const int64_t s03[2] = { 0, 3 }, s3[1] = { 3 }, s1[1] = { 1 }, s20[2] = { 2, 0 },
		      s21[2] = { 2, 1 }, s0[1] = { 0 };
	for (int k = 0; k < LEN(all_dts); k++) {
		enum tensor_dtype dt = all_dts[k];
		struct tensor *e = tensor_zeros(dt, TENSOR_CPU, 2, s03);
		struct tensor *r = tensor_ones(dt, TENSOR_CPU, 1, s3);
		assert_values("[0,3]+[3]", tensor_add(e, r), dt, 2, s03, NULL, 0);
		assert_values("[3]*[0,3]", tensor_mul(r, e), dt, 2, s03, NULL, 0);
		assert_values("[0,3]-[1]", tensor_sub(e, tensor_ones(dt, TENSOR_CPU, 1, s1)), dt, 2,
			      s03, NULL, 0);
		struct tensor *e2 = tensor_zeros(dt, TENSOR_CPU, 2, s20);
		assert_values("[2,0]>[2,1]", tensor_gt(e2, tensor_ones(dt, TENSOR_CPU, 2, s21)), dt,
			      2, s20, NULL, 0);
		assert_values("neg", tensor_neg(tensor_zeros(dt, TENSOR_CPU, 1, s0)), dt, 1, s0,
			      NULL, 0);
		assert_values("where", tensor_where(e, r, r), dt, 2, s03, NULL, 0);
		assert_values("masked_fill", tensor_masked_fill(e, r, 1), dt, 2, s03, NULL, 0);
		if (dt == TENSOR_F32 || dt == TENSOR_F64) {
			assert_values("exp", tensor_exp(e), dt, 2, s03, NULL, 0);
			assert_values("div", tensor_div(e, r), dt, 2, s03, NULL, 0);
			assert_values("gelu", tensor_gelu(tensor_transpose(e, 0, 1)), dt, 2,
				      (const int64_t[]){ 3, 0 }, NULL, 0);
		}
	}
}
END_TEST

START_TEST(test_null_inputs)
{
	const int64_t s23[2] = { 2, 3 }, s4[1] = { 4 };
	struct tensor *x = tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, s23);
	/* the first error of a chain is the one reported */
	struct tensor *bad = tensor_add(x, tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, s4));
	ck_assert(bad == NULL);
	char first[256];
	snprintf(first, sizeof first, "%s", tensor_last_error());
	ck_assert(strstr(first, "add") != NULL);
	ck_assert(!tensor_exp(bad));
	ck_assert(!tensor_unary(TENSOR_ADD_SCALAR, bad, 1));
	ck_assert(!tensor_add_scalar(bad, 1));
	ck_assert(!tensor_relu(bad));
	ck_assert(!tensor_mul(bad, x));
	ck_assert(!tensor_mul(x, bad));
	ck_assert(!tensor_binary(TENSOR_DIV, bad, bad));
	ck_assert(!tensor_ge(x, bad));
	ck_assert(!tensor_where(bad, x, x));
	ck_assert(!tensor_where(x, bad, x));
	ck_assert(!tensor_where(x, x, bad));
	ck_assert(!tensor_masked_fill(bad, x, 0));
	ck_assert(!tensor_masked_fill(x, bad, 0));
	/* even invalid arguments next to a NULL do not overwrite it */
	ck_assert(!tensor_binary(TENSOR_NBINARY, bad, x));
	ck_assert_int_eq(tensor_last_status(), TENSOR_ERR_SHAPE);
	ck_assert_str_eq(tensor_last_error(), first);
}
END_TEST

/* Outside a scope results are heap tensors; freeing them returns every byte,
 * including on the error paths. */
START_TEST(test_heap_results)
{
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK); /* the fixture's scope */
	size_t live = tensor_mem_stats(TENSOR_CPU).live_bytes;
	const int64_t s[3] = { 2, 3, 4 }, s4[1] = { 4 }, s5[1] = { 5 }, s31[2] = { 3, 1 };
	struct tensor *x = tensor_rand_uniform(TENSOR_F32, TENSOR_CPU, 3, s, 1, -1, 1);
	struct tensor *bias = tensor_ones(TENSOR_F32, TENSOR_CPU, 1, s4);
	struct tensor *wrong = tensor_ones(TENSOR_F32, TENSOR_CPU, 1, s5);
	struct tensor *mask = tensor_ones(TENSOR_I32, TENSOR_CPU, 2, s31);
	struct tensor *y = tensor_add(x, bias), *z = tensor_sigmoid(y);
	struct tensor *w = tensor_where(mask, z, bias), *m = tensor_masked_fill(x, mask, -1);
	ck_assert(y && z && w && m);
	ck_assert(!y->in_arena);
	double *vx = tu_values(x), *vm = tu_values(m), *vw = tu_values(w);
	for (int i = 0; i < 24; i++) {
		ck_assert_double_eq(vm[i], -1);
		ck_assert_double_eq_tol(vw[i], 1 / (1 + exp(-((float)vx[i] + 1))), 1e-6);
	}
	free(vx);
	free(vm);
	free(vw);
	ck_assert(!tensor_add(x, wrong));
	ck_assert(!tensor_where(mask, x, wrong));
	ck_assert(!tensor_masked_fill(x, wrong, 0));
	tensor_clear_error();
	struct tensor *all[] = { x, bias, wrong, mask, y, z, w, m };
	for (int i = 0; i < LEN(all); i++)
		tensor_free(all[i]);
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live);
	tensor_scope_begin(); /* for the fixture's teardown */
}
END_TEST

/* ---- large tensors: the OpenMP and piece-splitting paths ---------------------- */

START_TEST(test_large)
{
	tensor_set_num_threads(3);
	const int64_t s2[2] = { 512, 256 }, s3[3] = { 64, 8, 256 }, sb[1] = { 256 },
		      sr[3] = { 64, 8, 1 }, s1[1] = { (1 << 17) + 5 }, sc[1] = { 1 };
	for (int k = 0; k < LEN(float_dts); k++) {
		enum tensor_dtype dt = float_dts[k];
		struct tensor *x = tu_rand(dt, 2, s2, 3);
		check_unary("large exp", tensor_exp(x), x, TENSOR_EXP, 0);
		check_unary("large gelu", tensor_gelu(x), x, TENSOR_GELU, 0);
		struct tensor *xt = tensor_transpose(x, 0, 1);
		check_unary("large tanh transposed", tensor_tanh(xt), xt, TENSOR_TANH, 0);
		struct tensor *y = tu_rand(dt, 2, (const int64_t[]){ 256, 512 }, 4);
		check_binary("large transposed + contiguous", tensor_add(xt, y), TENSOR_ADD, xt, y,
			     2, y->shape);

		struct tensor *h = tu_rand(dt, 3, s3, 5), *bias = tu_rand(dt, 1, sb, 6);
		struct tensor *rowscale = tu_rand(dt, 3, sr, 7);
		check_binary("bias add", tensor_add(h, bias), TENSOR_ADD, h, bias, 3, s3);
		check_binary("row scale", tensor_mul(h, rowscale), TENSOR_MUL, h, rowscale, 3, s3);
		check_binary("max vs bias", tensor_maximum(bias, h), TENSOR_MAXIMUM, bias, h, 3,
			     s3);

		struct tensor *v = tu_rand(dt, 1, s1, 8), *c = tu_rand(dt, 1, sc, 9);
		check_unary("long row add_scalar", tensor_add_scalar(v, 0.5), v, TENSOR_ADD_SCALAR,
			    0.5);
		check_binary("long row - scalar", tensor_sub(v, c), TENSOR_SUB, v, c, 1, s1);
		check_binary("long row lt", tensor_lt(v, c), TENSOR_LT, v, c, 1, s1);
	}
	struct tensor *xi = tensor_arange(TENSOR_I64, TENSOR_CPU, -70000, 70000, 1);
	check_unary("large i64 abs", tensor_abs(xi), xi, TENSOR_ABS, 0);
	tensor_set_num_threads(0);
}
END_TEST

void ops_elementwise_tcases(Suite *s)
{
	TCase *tc = tu_tcase("unary");
	tcase_add_test(tc, test_unary_named);
	tcase_add_test(tc, test_scalar_ops);
	tcase_add_test(tc, test_add_mul_inplace);
	tcase_add_test(tc, test_unary_extremes);
	tcase_add_test(tc, test_unary_int);
	tcase_add_test(tc, test_unary_errors);
	suite_add_tcase(s, tc);
	tc = tu_tcase("binary");
	tcase_add_test(tc, test_binary_float);
	tcase_add_test(tc, test_binary_int);
	tcase_add_test(tc, test_binary_special_layouts);
	tcase_add_test(tc, test_binary_errors);
	suite_add_tcase(s, tc);
	tc = tu_tcase("elementwise edge cases");
	tcase_add_test(tc, test_empty);
	tcase_add_test(tc, test_null_inputs);
	tcase_add_test(tc, test_heap_results);
	tcase_add_test(tc, test_large);
	suite_add_tcase(s, tc);
}
