/* test_ops: gradient checks (central differences in f64 against sum(out * R), R fixed random) of
 * the elementwise ops, where, masked_fill, cast and dropout, on contiguous, strided, sliced
 * and broadcast inputs and on shapes from a seeded generator. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcases.h"
#include "ag_internal.h"
#include "testutil.h"
#include "test_ops.h"

/* ---- unary ---------------------------------------------------------------- */

struct unary_case {
	const char *name;
	enum tensor_unary_op op;
	double alpha, lo, hi;
	struct tensor *(*fn)(struct tensor *);
	struct tensor *(*fns)(struct tensor *, double);
	bool generic; /* call ag_unary instead of the named function */
};

/* Ranges keep log/sqrt/rsqrt/reciprocal/pow inputs positive; relu and abs see values
 * in [-1, 1), none within the finite-difference step of 0 for these seeds. */
static const struct unary_case unary_cases[] = {
	{ "neg", TENSOR_NEG, 0, -1, 1, ag_neg, NULL, false },
	{ "exp", TENSOR_EXP, 0, -1, 1, ag_exp, NULL, false },
	{ "log", TENSOR_LOG, 0, 0.3, 2, ag_log, NULL, false },
	{ "sqrt", TENSOR_SQRT, 0, 0.3, 2, ag_sqrt, NULL, false },
	{ "rsqrt", TENSOR_RSQRT, 0, 0.3, 2, ag_rsqrt, NULL, false },
	{ "tanh", TENSOR_TANH, 0, -2, 2, ag_tanh, NULL, false },
	{ "erf", TENSOR_ERF, 0, -2, 2, ag_erf, NULL, false },
	{ "abs", TENSOR_ABS, 0, -1, 1, ag_abs, NULL, false },
	{ "relu", TENSOR_RELU, 0, -1, 1, ag_relu, NULL, false },
	{ "gelu", TENSOR_GELU, 0, -3, 3, ag_gelu, NULL, false },
	{ "gelu_tanh", TENSOR_GELU_TANH, 0, -3, 3, ag_gelu_tanh, NULL, false },
	{ "silu", TENSOR_SILU, 0, -3, 3, ag_silu, NULL, false },
	{ "sigmoid", TENSOR_SIGMOID, 0, -3, 3, ag_sigmoid, NULL, false },
	{ "square", TENSOR_SQUARE, 0, -1.5, 1.5, NULL, NULL, true },
	{ "reciprocal", TENSOR_RECIPROCAL, 0, 0.3, 2, NULL, NULL, true },
	{ "add_scalar 0.7", TENSOR_ADD_SCALAR, 0.7, -1, 1, NULL, ag_add_scalar, false },
	{ "mul_scalar -1.3", TENSOR_MUL_SCALAR, -1.3, -1, 1, NULL, ag_mul_scalar, false },
	{ "pow_scalar 2.5", TENSOR_POW_SCALAR, 2.5, 0.3, 2, NULL, ag_pow_scalar, false },
	{ "pow_scalar -1.5", TENSOR_POW_SCALAR, -1.5, 0.3, 2, NULL, ag_pow_scalar, false },
	{ "pow_scalar 0.5", TENSOR_POW_SCALAR, 0.5, 0.3, 2, NULL, ag_pow_scalar, false },
	{ "pow_scalar 3 (negative base)", TENSOR_POW_SCALAR, 3, -1.5, 1.5, NULL, ag_pow_scalar,
	  false },
	{ "pow_scalar 0", TENSOR_POW_SCALAR, 0, 0.3, 2, NULL, ag_pow_scalar, false },
};

static struct tensor *f_unary(struct tensor *const *in, void *ctx)
{
	const struct unary_case *c = ctx;
	if (c->generic)
		return ag_unary(c->op, in[0], c->alpha);
	return c->fn ? c->fn(in[0]) : c->fns(in[0], c->alpha);
}

START_TEST(test_unary)
{
	rng_reset(1);
	for (int i = 0; i < ARRAY_LEN(unary_cases); i++) {
		struct unary_case c = unary_cases[i];
		int64_t sh[TENSOR_MAX_DIMS];
		int nd = rng_int(1, 4);
		rng_shape(nd, sh, 24);
		struct spec sp[] = { SPEC(c.lo, c.hi, 2, 3, 4), spec_of(nd, sh, c.lo, c.hi),
				     SPEC0(c.lo, c.hi) };
		check_all(c.name, f_unary, &c, 1, &sp[0]);
		check_all(c.name, f_unary, &c, 1, &sp[1]);
		check_layout(c.name, f_unary, &c, 1, &sp[2], CONTIG);
		c.generic = true; /* the generic entry point, same op */
		check_layout("ag_unary", f_unary, &c, 1, &sp[0], CONTIG);
	}
}
END_TEST

/* ---- binary --------------------------------------------------------------- */

struct binary_case {
	const char *name;
	enum tensor_binary_op op;
	struct tensor *(*fn)(struct tensor *, struct tensor *);
	double alo, ahi, blo, bhi;
	bool generic;
};

static const struct binary_case binary_cases[] = {
	{ "add", TENSOR_ADD, ag_add, -1, 1, -1, 1, false },
	{ "sub", TENSOR_SUB, ag_sub, -1, 1, -1, 1, false },
	{ "mul", TENSOR_MUL, ag_mul, -1, 1, -1, 1, false },
	{ "div", TENSOR_DIV, ag_div, -1, 1, 0.5, 1.5, false },
	{ "pow", TENSOR_POW, ag_pow, 0.5, 1.5, -1.5, 2, false },
	{ "maximum", TENSOR_MAXIMUM, ag_maximum, -1, 1, -1, 1, false },
	{ "minimum", TENSOR_MINIMUM, ag_minimum, -1, 1, -1, 1, false },
};

static struct tensor *f_binary(struct tensor *const *in, void *ctx)
{
	const struct binary_case *c = ctx;
	return c->generic ? ag_binary(c->op, in[0], in[1]) : c->fn(in[0], in[1]);
}

/* Both operands are the same tensor: the two gradients add up (ties of max/min too). */
static struct tensor *f_binary_self(struct tensor *const *in, void *ctx)
{
	const struct binary_case *c = ctx;
	return c->fn(in[0], in[0]);
}

/* A random pair: a of a random shape, b a suffix of it with some dims 1 (or swapped). */
static void rng_broadcast_pair(struct spec *a, struct spec *b)
{
	a->ndim = rng_int(1, 4);
	rng_shape(a->ndim, a->shape, 24);
	b->ndim = rng_int(1, a->ndim);
	for (int d = 0; d < b->ndim; d++) {
		int64_t s = a->shape[a->ndim - b->ndim + d];
		b->shape[d] = rng_int(0, 2) == 0 ? 1 : s;
	}
	if (rng_int(0, 1)) {
		struct spec t = *a;
		*a = *b;
		*b = t;
	}
}

START_TEST(test_binary)
{
	rng_reset(2);
	for (int i = 0; i < ARRAY_LEN(binary_cases); i++) {
		struct binary_case c = binary_cases[i];
		double al = c.alo, ah = c.ahi, bl = c.blo, bh = c.bhi;
		struct spec pairs[][2] = {
			{ SPEC(al, ah, 3, 4), SPEC(bl, bh, 3, 4) },
			{ SPEC(al, ah, 2, 3, 4), SPEC(bl, bh, 4) },
			{ SPEC(al, ah, 4), SPEC(bl, bh, 2, 3, 4) },
			{ SPEC(al, ah, 3, 1), SPEC(bl, bh, 1, 4) },
			{ SPEC(al, ah, 2, 1, 4), SPEC(bl, bh, 3, 1) },
			{ SPEC(al, ah, 2, 3, 1), SPEC(bl, bh, 2, 1, 4) },
			{ SPEC0(al, ah), SPEC(bl, bh, 3, 4) },
			{ SPEC(al, ah, 3, 4), SPEC0(bl, bh) },
			{ SPEC(al, ah, 1), SPEC(bl, bh, 1) },
			{ SPEC(al, ah, 1), SPEC(bl, bh, 1) },
		};
		struct spec *rnd = pairs[ARRAY_LEN(pairs) - 1];
		rng_broadcast_pair(&rnd[0], &rnd[1]);
		rnd[0].lo = al, rnd[0].hi = ah, rnd[1].lo = bl, rnd[1].hi = bh;
		for (int p = 0; p < ARRAY_LEN(pairs); p++)
			check_all(c.name, f_binary, &c, 2, pairs[p]);
		/* only one side requires grad */
		pairs[1][0].nograd = true;
		check_layout(c.name, f_binary, &c, 2, pairs[1], STRIDED);
		pairs[1][0].nograd = false;
		pairs[1][1].nograd = true;
		check_layout(c.name, f_binary, &c, 2, pairs[1], SLICED);
		c.generic = true;
		check_layout("ag_binary", f_binary, &c, 2, pairs[2], CONTIG);
		struct spec self = SPEC(0.5, 1.5, 3, 4);
		check_all(c.name, f_binary_self, &c, 1, &self);
	}
}
END_TEST

START_TEST(test_comparisons_not_recorded)
{
	rng_reset(3);
	struct tensor *a = gc_input(2, SHAPE(3, 4), 1, -1, 1, false);
	struct tensor *b = gc_input(1, SHAPE(4), 2, -1, 1, false);
	for (int op = TENSOR_EQ; op < TENSOR_NBINARY; op++) {
		struct tensor *y = ag_binary((enum tensor_binary_op)op, a, b);
		ck_assert(y != NULL && !y->requires_grad && y->node == NULL);
	}
	ck_assert_int_eq(ag_tape_size(), 0);
}
END_TEST

/* ---- where, masked_fill, cast, dropout ------------------------------------- */

struct select_ctx {
	struct tensor *cond;
	double value;
};

/* ag_add_reuse of a fresh product (its buffer reused) and x, b broadcast. */
static struct tensor *f_add_reuse(struct tensor *const *in, void *ctx)
{
	(void)ctx;
	return ag_add_reuse(ag_mul(in[0], in[1]), in[2]);
}

START_TEST(test_add_reuse)
{
	const int64_t s23[] = { 2, 3 }, s3[] = { 3 };
	struct tensor *x = gc_input(2, s23, 1, -1, 1, false), *w = gc_input(2, s23, 2, -1, 1, true);
	struct tensor *b = gc_input(1, s3, 3, -1, 1, false);
	gc_assert("add_reuse", f_add_reuse, NULL, 3, (struct tensor *[]){ x, w, b });
	tensor_scope_begin();
	/* a fresh intermediate: the sum lands in its buffer, equal to ag_add */
	struct tensor *a = ag_mul(x, w), *want = ag_add(ag_mul(x, w), b);
	double *vw = tu_values(want);
	struct tensor *y = ag_add_reuse(a, b);
	ck_assert_ptr_eq(y->storage, a->storage);
	tu_assert_close(y, vw, 6, 0, 0);
	ck_assert(y->requires_grad && y->node != NULL);
	/* a parameter, a tensor saved by the tape, a grown shape: new buffers */
	struct tensor *yl = ag_add_reuse(x, b);
	ck_assert_ptr_ne(yl->storage, x->storage);
	struct tensor *e = ag_exp(x); /* saves its output */
	ck_assert_ptr_ne(ag_add_reuse(e, b)->storage, e->storage);
	struct tensor *a2 = ag_mul(x, w), *bb = ag_add_reuse(ag_mul(b, b), a2);
	tu_assert_shape(bb, 2, s23);
	ck_assert_ptr_ne(bb->storage, a2->storage);
	ck_assert(ag_add_reuse(NULL, b) == NULL);
	tensor_scope_end();
	free(vw);
}
END_TEST

static struct tensor *f_where(struct tensor *const *in, void *ctx)
{
	return ag_where(((struct select_ctx *)ctx)->cond, in[0], in[1]);
}

static struct tensor *f_masked_fill(struct tensor *const *in, void *ctx)
{
	const struct select_ctx *c = ctx;
	return ag_masked_fill(in[0], c->cond, c->value);
}

/* A 0/1 f64 pattern of the given shape, true at positions i % 3 != 1. */
static struct tensor *pattern(int ndim, const int64_t *shape)
{
	struct tensor *t;
	int64_t n = 1;
	for (int d = 0; d < ndim; d++)
		n *= shape[d];
	double v[64];
	ck_assert(n <= 64);
	for (int64_t i = 0; i < n; i++)
		v[i] = i % 3 != 1;
	t = tensor_from_data(TENSOR_F64, TENSOR_CPU, ndim, shape, v);
	ck_assert(t != NULL);
	return t;
}

START_TEST(test_where_masked_fill)
{
	rng_reset(4);
	struct {
		int nc;
		int64_t cs[3];
		struct spec a, b;
	} cases[] = {
		{ 2, { 3, 4 }, SPEC(-1, 1, 3, 4), SPEC(-1, 1, 3, 4) },
		{ 2, { 3, 4 }, SPEC(-1, 1, 3, 4), SPEC(-1, 1, 4) },
		{ 2, { 3, 1 }, SPEC(-1, 1, 1, 4), SPEC(-1, 1, 3, 4) },
		{ 1, { 4 }, SPEC(-1, 1, 2, 3, 4), SPEC0(-1, 1) },
		{ 3, { 2, 3, 4 }, SPEC(-1, 1, 3, 4), SPEC(-1, 1, 2, 1, 4) },
	};
	for (int i = 0; i < ARRAY_LEN(cases); i++) {
		struct select_ctx c = { pattern(cases[i].nc, cases[i].cs), 2.5 };
		struct spec sp[2] = { cases[i].a, cases[i].b };
		check_all("where", f_where, &c, 2, sp);
		/* masked_fill: mask broadcasts to x's shape */
		if (i != 4)
			check_all("masked_fill", f_masked_fill, &c, 1, &sp[i == 2 ? 1 : 0]);
	}
}
END_TEST

static struct tensor *f_cast_roundtrip(struct tensor *const *in, void *ctx)
{
	(void)ctx;
	return ag_mul(ag_cast(ag_cast(in[0], TENSOR_F32), TENSOR_F64), in[0]);
}

static struct tensor *f_cast_same(struct tensor *const *in, void *ctx)
{
	(void)ctx;
	return ag_exp(ag_cast(in[0], TENSOR_F64));
}

START_TEST(test_cast)
{
	rng_reset(5);
	struct spec sp = SPEC(-1, 1, 3, 4);
	check_all("cast f64", f_cast_same, NULL, 1, &sp);
	/* through f32: finite differences need a larger step and float tolerances */
	for (int l = 0; l < NLAYOUTS; l++) {
		struct tensor *x = make_leaf((enum layout)l, 2, sp.shape, -1, 1);
		struct ag_gradcheck c = { .h = 1e-2, .atol = 1e-3, .rtol = 1e-3 };
		ck_assert_int_eq(ag_gradcheck(f_cast_roundtrip, NULL, 1, &x, &c), TENSOR_OK);
		ck_assert_msg(c.max_error <= 1, "cast f32 on %s: %g: element %lld: %g vs %g",
			      layout_name[l], c.max_error, (long long)c.element, c.analytic,
			      c.numeric);
		/* the gradient of sum(x * x) is 2x up to f32 rounding of one factor */
		ag_zero_grad(x);
		struct tensor *y = f_cast_roundtrip(&x, NULL);
		ck_assert_int_eq(ag_backward(ag_sum(y, 0, NULL, false), NULL), TENSOR_OK);
		double *g = tu_values(x->grad), *v = tu_values(x);
		for (int j = 0; j < 12; j++)
			ck_assert_msg(fabs(g[j] - 2 * v[j]) < 1e-6, "%g vs %g", g[j], 2 * v[j]);
		ck_assert_int_eq(x->grad->dtype, TENSOR_F64);
		free(g);
		free(v);
		tensor_free(x->grad);
		x->grad = NULL;
	}
}
END_TEST

struct dropout_ctx {
	double p;
	bool training;
};

static struct tensor *f_dropout(struct tensor *const *in, void *ctx)
{
	const struct dropout_ctx *c = ctx;
	return ag_dropout(in[0], c->p, 77, c->training);
}

START_TEST(test_dropout)
{
	rng_reset(6);
	struct dropout_ctx cases[] = { { 0.3, true }, { 0.5, true }, { 0, true }, { 0.3, false } };
	struct spec sp = SPEC(-1, 1, 4, 6);
	for (int i = 0; i < ARRAY_LEN(cases); i++)
		check_all("dropout", f_dropout, &cases[i], 1, &sp);
	/* the gradient is the scaled mask of the forward */
	struct tensor *x = gc_input(2, sp.shape, 5, 0.5, 1.5, false);
	struct tensor *y = ag_dropout(x, 0.5, 77, true);
	ck_assert_int_eq(ag_backward(ag_sum(y, 0, NULL, false), NULL), TENSOR_OK);
	double *vy = tu_values(y), *g = tu_values(x->grad);
	int kept = 0;
	for (int i = 0; i < 24; i++) {
		ck_assert(g[i] == (vy[i] != 0 ? 2.0 : 0.0));
		kept += vy[i] != 0;
	}
	ck_assert(kept > 0 && kept < 24);
	free(vy);
	free(g);
}
END_TEST

void ops_grad_elementwise_tcases(Suite *s)
{
	TCase *tc = tu_tcase("grad elementwise");
	tcase_add_test(tc, test_unary);
	tcase_add_test(tc, test_binary);
	tcase_add_test(tc, test_add_reuse);
	tcase_add_test(tc, test_comparisons_not_recorded);
	tcase_add_test(tc, test_where_masked_fill);
	tcase_add_test(tc, test_cast);
	tcase_add_test(tc, test_dropout);
	suite_add_tcase(s, tc);
}
