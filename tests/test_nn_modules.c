/* nn modules: activations, linear, embedding, position embeddings, layer and
 * RMS norm, dropout and the plain / SwiGLU feed-forward. Each forward against
 * a plain-loop reference, gradient checks w.r.t. inputs and parameters,
 * registered names / shapes / no_decay flags, and every error path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "nn.h"
#include "testutil.h"

/* Forward tolerance: composite modules in f32 round a few times. */
static double tol(enum tensor_dtype dt)
{
	return dt == TENSOR_F64 ? 1e-12 : 1e-5;
}

static const enum tensor_dtype DTYPES[] = { TENSOR_F32, TENSOR_F64 };

/* ---- plain-loop references ----------------------------------------------------- */

static double ref_act(enum nn_activation a, double x)
{
	switch (a) {
	case NN_RELU: return x > 0 ? x : 0;
	case NN_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
	case NN_GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
	case NN_SILU: return x / (1 + exp(-x));
	default: ck_abort_msg("bad activation"); return 0;
	}
}

/* y[r, o] = sum_i x[r, i] w[o, i] + b[o] (b may be NULL). */
static void ref_linear(const double *x, int64_t rows, int64_t in, const double *w, const double *b,
		       int64_t out, double *y)
{
	for (int64_t r = 0; r < rows; r++)
		for (int64_t o = 0; o < out; o++) {
			double s = b ? b[o] : 0;
			for (int64_t i = 0; i < in; i++)
				s += x[r * in + i] * w[o * in + i];
			y[r * out + o] = s;
		}
}

/* Assert the parameter called name exists with the given shape and flag and
 * return its tensor. */
static struct tensor *expect_param(const struct nn_params *ps, const char *name, int ndim,
				   const int64_t *shape, bool no_decay)
{
	struct nn_param *p = nn_params_find(ps, name);
	ck_assert_msg(p != NULL, "parameter %s missing", name);
	tu_assert_shape(p->value, ndim, shape);
	ck_assert_msg(p->no_decay == no_decay, "%s: no_decay %d", name, (int)p->no_decay);
	ck_assert(p->value->requires_grad && !p->value->in_arena);
	return p->value;
}

/* Plant an error, check that fwd on NULL input returns NULL and keeps it. */
#define ASSERT_NULL_KEEPS_ERROR(expr)                                          \
	do {                                                                   \
		tensor_clear_error();                                          \
		tensor_error(TENSOR_ERR_IO, "earlier failure");                \
		ck_assert_ptr_null(expr);                                      \
		tu_assert_error(true, TENSOR_ERR_IO, "earlier failure", NULL); \
	} while (0)

/* Free the gradients of the test inputs after a gradient check. */
static void free_grads(int n, struct tensor *const *ts)
{
	for (int i = 0; i < n; i++) {
		tensor_free(ts[i]->grad);
		ts[i]->grad = NULL;
	}
}

/* Nodes recorded by forward passes that never ran backward point at the
 * parameters' storage: drop them before freeing the parameters. */
static void free_params(struct nn_params *ps)
{
	ag_tape_reset();
	nn_params_free(ps);
}

/* ---- activations ---------------------------------------------------------------- */

START_TEST(test_activation_parse_and_name)
{
	ck_assert_int_eq(nn_activation_parse("relu"), NN_RELU);
	ck_assert_int_eq(nn_activation_parse("gelu"), NN_GELU);
	ck_assert_int_eq(nn_activation_parse("gelu_tanh"), NN_GELU_TANH);
	ck_assert_int_eq(nn_activation_parse("silu"), NN_SILU);
	ck_assert_int_eq(nn_activation_parse("swish"), NN_SILU);
	ck_assert_int_eq(nn_activation_parse("tanh"), -1);
	ck_assert_int_eq(nn_activation_parse("RELU"), -1);
	ck_assert_int_eq(nn_activation_parse(""), -1);
	ck_assert_int_eq(nn_activation_parse(NULL), -1);
	for (int a = 0; a < NN_NACTIVATIONS; a++)
		ck_assert_int_eq(nn_activation_parse(nn_activation_name(a)), a);
	ck_assert_str_eq(nn_activation_name(NN_SILU), "silu");
	ck_assert_str_eq(nn_activation_name(NN_NACTIVATIONS), "unknown");
	ck_assert_str_eq(nn_activation_name((enum nn_activation) - 3), "unknown");
}
END_TEST

START_TEST(test_activation_forward)
{
	const int64_t s[] = { 3, 5 };
	for (int k = 0; k < 2; k++) {
		struct tensor *x = tu_rand(DTYPES[k], 2, s, 10 + k);
		x = tensor_mul_scalar(x, 3); /* [-3, 3): both sides of every kink */
		double *vx = tu_values(x), want[15];
		for (int a = 0; a < NN_NACTIVATIONS; a++) {
			for (int i = 0; i < 15; i++)
				want[i] = ref_act(a, vx[i]);
			struct tensor *y = nn_activation_forward(a, x);
			ck_assert_msg(y != NULL, "%s", tensor_last_error());
			tu_assert_shape(y, 2, s);
			tu_assert_close(y, want, 15, tol(DTYPES[k]), tol(DTYPES[k]));
			y = nn_activation_forward(a, tu_strided(x));
			tu_assert_close(y, want, 15, tol(DTYPES[k]), tol(DTYPES[k]));
		}
		free(vx);
	}
}
END_TEST

static struct tensor *f_act(struct tensor *const *in, void *ctx)
{
	return nn_activation_forward(*(enum nn_activation *)ctx, in[0]);
}

START_TEST(test_activation_grad)
{
	for (int a = 0; a < NN_NACTIVATIONS; a++) {
		struct tensor *x = gc_input(2, (int64_t[]){ 3, 4 }, 20 + a, -2, 2, a % 2);
		enum nn_activation act = a;
		gc_assert(nn_activation_name(act), f_act, &act, 1, &x);
		free_grads(1, &x);
	}
}
END_TEST

START_TEST(test_activation_errors)
{
	struct tensor *x = tu_rand(TENSOR_F32, 1, (int64_t[]){ 4 }, 1);
	tu_assert_error(!nn_activation_forward(NN_NACTIVATIONS, x), TENSOR_ERR_ARG,
			"nn_activation_forward", "unknown activation 4");
	tu_assert_error(!nn_activation_forward((enum nn_activation) - 1, x), TENSOR_ERR_ARG,
			"nn_activation_forward", "-1");
	ASSERT_NULL_KEEPS_ERROR(nn_activation_forward(NN_RELU, NULL));
	ASSERT_NULL_KEEPS_ERROR(nn_activation_forward(NN_NACTIVATIONS, NULL));
}
END_TEST

/* ---- linear ------------------------------------------------------------------------ */

START_TEST(test_linear_params)
{
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 3), TENSOR_OK);
	struct nn_linear m, nb;
	ck_assert_int_eq(nn_linear_init(&m, &ps, "enc.proj", 16, 8, true), TENSOR_OK);
	ck_assert_int_eq(nn_linear_init(&nb, &ps, "head", 16, 2, false), TENSOR_OK);
	ck_assert_int_eq(m.in, 16);
	ck_assert_int_eq(m.out, 8);
	ck_assert_ptr_eq(m.weight,
			 expect_param(&ps, "enc.proj.weight", 2, (int64_t[]){ 8, 16 }, false));
	ck_assert_ptr_eq(m.bias, expect_param(&ps, "enc.proj.bias", 1, (int64_t[]){ 8 }, true));
	ck_assert_ptr_eq(nb.weight,
			 expect_param(&ps, "head.weight", 2, (int64_t[]){ 2, 16 }, false));
	ck_assert_ptr_null(nb.bias);
	ck_assert_ptr_null(nn_params_find(&ps, "head.bias"));
	ck_assert_int_eq(ps.n, 3);
	ck_assert_int_eq(nn_params_count(&ps), 8 * 16 + 8 + 2 * 16);
	/* U(-1/sqrt(in), 1/sqrt(in)) for weight and bias, not constant */
	double *w = tu_values(m.weight), *b = tu_values(m.bias), lo = 1, hi = -1;
	for (int i = 0; i < 128; i++) {
		ck_assert(fabs(w[i]) <= 0.25);
		lo = fmin(lo, w[i]);
		hi = fmax(hi, w[i]);
	}
	ck_assert(lo < -0.2 && hi > 0.2);
	for (int i = 0; i < 8; i++)
		ck_assert(fabs(b[i]) <= 0.25);
	ck_assert(b[0] != b[1]);
	/* seeded by (ps seed, name): the same in a fresh list, different names differ */
	struct nn_params ps2;
	nn_params_init(&ps2, TENSOR_F32, TENSOR_CPU, 3);
	struct nn_linear m2, m3;
	ck_assert_int_eq(nn_linear_init(&m2, &ps2, "enc.proj", 16, 8, true), TENSOR_OK);
	ck_assert_int_eq(nn_linear_init(&m3, &ps2, "enc.other", 16, 8, true), TENSOR_OK);
	tu_assert_close(m2.weight, w, 128, 0, 0);
	tu_assert_close(m2.bias, b, 8, 0, 0);
	double *w3 = tu_values(m3.weight);
	ck_assert(memcmp(w, w3, sizeof(double) * 128) != 0);
	/* free forgets the pointers; the list still owns the tensors */
	nn_linear_free(&m);
	ck_assert_ptr_null(m.weight);
	ck_assert_int_eq(m.in, 0);
	ck_assert_int_eq(ps.n, 3);
	free(w);
	free(b);
	free(w3);
	free_params(&ps);
	free_params(&ps2);
}
END_TEST

START_TEST(test_linear_forward)
{
	const int64_t in = 5, out = 3;
	for (int k = 0; k < 2; k++) {
		enum tensor_dtype dt = DTYPES[k];
		struct nn_params ps;
		nn_params_init(&ps, dt, TENSOR_CPU, 4);
		struct nn_linear m, nb;
		ck_assert_int_eq(nn_linear_init(&m, &ps, "fc", in, out, true), TENSOR_OK);
		ck_assert_int_eq(nn_linear_init(&nb, &ps, "nb", in, out, false), TENSOR_OK);
		double *w = tu_values(m.weight), *b = tu_values(m.bias), *wn = tu_values(nb.weight);
		struct tensor *x3 = tu_rand(dt, 3, (int64_t[]){ 2, 3, in }, 5);
		double *vx = tu_values(x3), want[6 * 3];
		/* 3-d contiguous, 3-d strided, 2-d, 2-d strided, 1-d */
		ref_linear(vx, 6, in, w, b, out, want);
		struct tensor *y = nn_linear_forward(&m, x3);
		ck_assert_msg(y != NULL, "%s", tensor_last_error());
		tu_assert_shape(y, 3, (int64_t[]){ 2, 3, out });
		tu_assert_close(y, want, 18, tol(dt), tol(dt));
		y = nn_linear_forward(&m, tu_strided(x3));
		ck_assert_msg(y != NULL, "%s", tensor_last_error());
		tu_assert_shape(y, 3, (int64_t[]){ 2, 3, out });
		tu_assert_close(y, want, 18, tol(dt), tol(dt));
		struct tensor *x2 = tensor_view(x3, 2, (int64_t[]){ 6, in });
		tu_assert_close(nn_linear_forward(&m, x2), want, 18, tol(dt), tol(dt));
		tu_assert_close(nn_linear_forward(&m, tu_strided(x2)), want, 18, tol(dt), tol(dt));
		struct tensor *x1 = tensor_select(x2, 0, 4);
		y = nn_linear_forward(&m, x1);
		tu_assert_shape(y, 1, (int64_t[]){ out });
		tu_assert_close(y, want + 4 * out, 3, tol(dt), tol(dt));
		/* no bias */
		ref_linear(vx, 6, in, wn, NULL, out, want);
		tu_assert_close(nn_linear_forward(&nb, x3), want, 18, tol(dt), tol(dt));
		free(w);
		free(b);
		free(wn);
		free(vx);
		free_params(&ps);
	}
}
END_TEST

static struct tensor *f_linear(struct tensor *const *in, void *ctx)
{
	return nn_linear_forward(ctx, in[0]);
}

START_TEST(test_linear_grad)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 6);
	struct nn_linear m, nb;
	nn_linear_init(&m, &ps, "fc", 4, 3, true);
	nn_linear_init(&nb, &ps, "nb", 4, 2, false);
	for (int strided = 0; strided < 2; strided++) {
		struct tensor *x = gc_input(3, (int64_t[]){ 2, 3, 4 }, 7, -1, 1, strided);
		gc_assert("linear", f_linear, &m, 3, (struct tensor *[]){ x, m.weight, m.bias });
		gc_assert("linear no bias", f_linear, &nb, 2, (struct tensor *[]){ x, nb.weight });
		free_grads(1, &x);
	}
	struct tensor *x1 = gc_input(1, (int64_t[]){ 4 }, 8, -1, 1, false);
	gc_assert("linear 1-d", f_linear, &m, 3, (struct tensor *[]){ x1, m.weight, m.bias });
	free_grads(1, &x1);
	free_params(&ps);
}
END_TEST

START_TEST(test_linear_errors)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1);
	struct nn_linear m;
	tu_assert_error(nn_linear_init(NULL, &ps, "fc", 8, 4, true) < 0, TENSOR_ERR_ARG,
			"nn_linear_init", "NULL");
	tu_assert_error(nn_linear_init(&m, NULL, "fc", 8, 4, true) < 0, TENSOR_ERR_ARG,
			"nn_linear_init", "NULL");
	tu_assert_error(nn_linear_init(&m, &ps, "fc", 0, 4, true) < 0, TENSOR_ERR_ARG,
			"nn_linear_init", "in 0");
	tu_assert_error(nn_linear_init(&m, &ps, "fc", 8, -1, true) < 0, TENSOR_ERR_ARG,
			"nn_linear_init: 'fc'", "out -1");
	ck_assert_int_eq(ps.n, 0);
	ck_assert_int_eq(nn_linear_init(&m, &ps, "fc", 8, 4, true), TENSOR_OK);
	struct nn_linear dup;
	tu_assert_error(nn_linear_init(&dup, &ps, "fc", 8, 4, true) < 0, TENSOR_ERR_ARG,
			"fc.weight", "already exists");
	ck_assert_ptr_null(dup.weight);
	char long_name[NN_NAME_MAX];
	memset(long_name, 'a', sizeof long_name - 3);
	long_name[sizeof long_name - 3] = '\0';
	tu_assert_error(nn_linear_init(&dup, &ps, long_name, 8, 4, true) < 0, TENSOR_ERR_ARG,
			"longer than", NULL);

	struct tensor *x = tu_rand(TENSOR_F32, 2, (int64_t[]){ 4, 7 }, 2);
	tu_assert_error(!nn_linear_forward(&m, x), TENSOR_ERR_SHAPE,
			"nn_linear_forward: x [4,7] last dim != in 8", NULL);
	struct tensor *s = tensor_full(TENSOR_F32, TENSOR_CPU, 0, NULL, 1);
	tu_assert_error(!nn_linear_forward(&m, s), TENSOR_ERR_SHAPE, "nn_linear_forward", "[]");
	struct tensor *x64 = tu_rand(TENSOR_F64, 2, (int64_t[]){ 4, 8 }, 2);
	tu_assert_error(!nn_linear_forward(&m, x64), TENSOR_ERR_DTYPE, "nn_linear_forward", "f64");
	struct tensor *ix = tensor_zeros(TENSOR_I32, TENSOR_CPU, 2, (int64_t[]){ 4, 8 });
	tu_assert_error(!nn_linear_forward(&m, ix), TENSOR_ERR_DTYPE, "nn_linear_forward", "i32");
	struct nn_linear empty = { 0 };
	struct tensor *x8 = tu_rand(TENSOR_F32, 2, (int64_t[]){ 4, 8 }, 2);
	tu_assert_error(!nn_linear_forward(&empty, x8), TENSOR_ERR_ARG, "nn_linear_forward",
			"not initialised");
	tu_assert_error(!nn_linear_forward(NULL, x8), TENSOR_ERR_ARG, "nn_linear_forward", NULL);
	ASSERT_NULL_KEEPS_ERROR(nn_linear_forward(&m, NULL));
	ASSERT_NULL_KEEPS_ERROR(nn_linear_forward(NULL, NULL));
	/* an error inside: NULL out of a chain */
	ASSERT_NULL_KEEPS_ERROR(nn_linear_forward(&m, nn_linear_forward(&m, x)));
	free_params(&ps);
}
END_TEST

/* ---- embedding ---------------------------------------------------------------------- */

START_TEST(test_embedding_params_and_forward)
{
	for (int k = 0; k < 2; k++) {
		enum tensor_dtype dt = DTYPES[k];
		struct nn_params ps;
		nn_params_init(&ps, dt, TENSOR_CPU, 9);
		struct nn_embedding m;
		ck_assert_int_eq(nn_embedding_init(&m, &ps, "embeddings.tok", 10, 4, 0), TENSOR_OK);
		ck_assert_ptr_eq(m.weight, expect_param(&ps, "embeddings.tok.weight", 2,
							(int64_t[]){ 10, 4 }, true));
		ck_assert_int_eq(m.num, 10);
		ck_assert_int_eq(m.dim, 4);
		ck_assert_int_eq(m.padding_idx, 0);
		double *w = tu_values(m.weight), sq = 0;
		for (int j = 0; j < 4; j++)
			ck_assert(w[j] == 0); /* padding row */
		for (int i = 4; i < 40; i++) {
			ck_assert(w[i] != 0);
			sq += w[i] * w[i];
		}
		ck_assert(sq / 36 > 0.3 && sq / 36 < 3); /* N(0, 1) */
		const int64_t ids_v[6] = { 3, 0, 9, 3, 1, 0 };
		for (int it = 0; it < 2; it++) {
			struct tensor *ids;
			if (it == 0) {
				ids = tensor_from_data(TENSOR_I64, TENSOR_CPU, 2,
						       (int64_t[]){ 2, 3 }, ids_v);
			} else {
				int32_t v32[6];
				for (int i = 0; i < 6; i++)
					v32[i] = (int32_t)ids_v[i];
				ids = tensor_from_data(TENSOR_I32, TENSOR_CPU, 2,
						       (int64_t[]){ 2, 3 }, v32);
				ids = tu_strided(ids);
			}
			double want[24];
			for (int p = 0; p < 6; p++)
				for (int j = 0; j < 4; j++)
					want[p * 4 + j] = w[ids_v[p] * 4 + j];
			struct tensor *y = nn_embedding_forward(&m, ids);
			ck_assert_msg(y != NULL, "%s", tensor_last_error());
			tu_assert_shape(y, 3, (int64_t[]){ 2, 3, 4 });
			tu_assert_close(y, want, 24, 0, 0);
		}
		/* padding_idx -1: no zero row */
		struct nn_embedding np;
		ck_assert_int_eq(nn_embedding_init(&np, &ps, "np", 3, 2, -1), TENSOR_OK);
		double *wn = tu_values(np.weight);
		for (int i = 0; i < 6; i++)
			ck_assert(wn[i] != 0);
		nn_embedding_free(&m);
		ck_assert_ptr_null(m.weight);
		free(w);
		free(wn);
		free_params(&ps);
	}
}
END_TEST

START_TEST(test_embedding_padding_gets_no_grad)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 10);
	struct nn_embedding m;
	ck_assert_int_eq(nn_embedding_init(&m, &ps, "emb", 5, 3, 2), TENSOR_OK);
	const int64_t ids_v[7] = { 2, 1, 2, 4, 1, 2, 0 };
	struct tensor *ids = tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ 7 }, ids_v);
	for (int round = 0; round < 2; round++) {
		if (round == 1) { /* a non-zero padding row (say, loaded) is used but not trained */
			ck_assert_int_eq(tensor_fill_(tensor_select(m.weight, 0, 2), 5), TENSOR_OK);
			ck_assert_int_eq(nn_params_zero_grad(&ps), TENSOR_OK);
		}
		struct tensor *r = tu_rand(TENSOR_F64, 2, (int64_t[]){ 7, 3 }, 11);
		struct tensor *y = nn_embedding_forward(&m, ids);
		ck_assert(y != NULL && y->requires_grad);
		ck_assert(tensor_get(y, (int64_t[]){ 0, 1 }) == (round ? 5 : 0));
		struct tensor *loss = ag_sum(ag_mul(y, r), 0, NULL, false);
		ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
		double *vr = tu_values(r), want[15] = { 0 };
		for (int p = 0; p < 7; p++)
			for (int j = 0; j < 3; j++)
				if (ids_v[p] != 2)
					want[ids_v[p] * 3 + j] += vr[p * 3 + j];
		tu_assert_close(m.weight->grad, want, 15, 1e-12, 1e-12);
		free(vr);
	}
	free_params(&ps);
}
END_TEST

struct emb_ctx {
	struct nn_embedding *m;
	struct tensor *ids;
};

static struct tensor *f_embedding(struct tensor *const *in, void *ctx)
{
	(void)in;
	struct emb_ctx *c = ctx;
	return nn_embedding_forward(c->m, c->ids);
}

START_TEST(test_embedding_grad)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 12);
	struct nn_embedding m, mp;
	nn_embedding_init(&m, &ps, "emb", 6, 3, -1);
	nn_embedding_init(&mp, &ps, "pad", 6, 3, 5);
	/* duplicates accumulate; 4 is never used */
	const int32_t v[8] = { 0, 3, 3, 1, 5, 2, 0, 3 };
	struct tensor *ids = tensor_from_data(TENSOR_I32, TENSOR_CPU, 2, (int64_t[]){ 2, 4 }, v);
	struct emb_ctx c = { &m, ids };
	gc_assert("embedding", f_embedding, &c, 1, &m.weight);
	/* with padding_idx: the check holds for ids that avoid the padding row */
	const int32_t vp[4] = { 0, 3, 3, 1 };
	struct emb_ctx cp = { &mp,
			      tensor_from_data(TENSOR_I32, TENSOR_CPU, 1, (int64_t[]){ 4 }, vp) };
	gc_assert("embedding with padding", f_embedding, &cp, 1, &mp.weight);
	free_params(&ps);
}
END_TEST

START_TEST(test_embedding_errors)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1);
	struct nn_embedding m;
	tu_assert_error(nn_embedding_init(NULL, &ps, "e", 4, 2, -1) < 0, TENSOR_ERR_ARG,
			"nn_embedding_init", "NULL");
	tu_assert_error(nn_embedding_init(&m, NULL, "e", 4, 2, -1) < 0, TENSOR_ERR_ARG,
			"nn_embedding_init", "NULL");
	tu_assert_error(nn_embedding_init(&m, &ps, "e", 0, 2, -1) < 0, TENSOR_ERR_ARG,
			"nn_embedding_init: 'e'", "num 0");
	tu_assert_error(nn_embedding_init(&m, &ps, "e", 4, -2, -1) < 0, TENSOR_ERR_ARG,
			"nn_embedding_init", "dim -2");
	tu_assert_error(nn_embedding_init(&m, &ps, "e", 4, 2, 4) < 0, TENSOR_ERR_ARG,
			"nn_embedding_init", "padding_idx 4");
	tu_assert_error(nn_embedding_init(&m, &ps, "e", 4, 2, -2) < 0, TENSOR_ERR_ARG,
			"nn_embedding_init", "padding_idx -2");
	ck_assert_int_eq(ps.n, 0);
	ck_assert_int_eq(nn_embedding_init(&m, &ps, "e", 4, 2, -1), TENSOR_OK);
	tu_assert_error(nn_embedding_init(&m, &ps, "e", 4, 2, -1) < 0, TENSOR_ERR_ARG, "e.weight",
			"already exists");
	ck_assert_ptr_null(m.weight);
	ck_assert_int_eq(nn_embedding_init(&m, &ps, "e2", 4, 2, -1), TENSOR_OK);

	const int64_t big[3] = { 1, 12, 0 }, neg[2] = { -1, 0 };
	struct tensor *ids = tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ 3 }, big);
	tu_assert_error(!nn_embedding_forward(&m, ids), TENSOR_ERR_ARG, "nn_embedding_forward",
			"index 12");
	ids = tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ 2 }, neg);
	tu_assert_error(!nn_embedding_forward(&m, ids), TENSOR_ERR_ARG, "nn_embedding_forward",
			"index -1");
	/* an earlier error is kept, not restated */
	tensor_error(TENSOR_ERR_IO, "earlier failure");
	tu_assert_error(!nn_embedding_forward(&m, ids), TENSOR_ERR_IO, "earlier failure", NULL);
	struct tensor *f = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, (int64_t[]){ 2 });
	tu_assert_error(!nn_embedding_forward(&m, f), TENSOR_ERR_DTYPE, "nn_embedding_forward",
			"f32");
	struct nn_embedding empty = { 0 };
	struct tensor *ok = tensor_zeros(TENSOR_I32, TENSOR_CPU, 1, (int64_t[]){ 2 });
	tu_assert_error(!nn_embedding_forward(&empty, ok), TENSOR_ERR_ARG, "nn_embedding_forward",
			"not initialised");
	tu_assert_error(!nn_embedding_forward(NULL, ok), TENSOR_ERR_ARG, "nn_embedding_forward",
			NULL);
	ASSERT_NULL_KEEPS_ERROR(nn_embedding_forward(&m, NULL));
	free_params(&ps);
}
END_TEST

/* ---- position embeddings -------------------------------------------------------------- */

static double ref_pe(int64_t pos, int64_t j, int64_t dim)
{
	int64_t i2 = j - j % 2; /* 2i */
	double a = (double)pos / pow(10000.0, (double)i2 / (double)dim);
	return j % 2 ? cos(a) : sin(a);
}

START_TEST(test_position_sinusoidal)
{
	const int64_t dims[2] = { 6, 5 }; /* even and odd dim */
	for (int k = 0; k < 2; k++) {
		enum tensor_dtype dt = DTYPES[k];
		int64_t dim = dims[k], L = 7;
		struct nn_params ps;
		nn_params_init(&ps, dt, TENSOR_CPU, 13);
		size_t live0 = tensor_mem_stats(TENSOR_CPU).live_bytes;
		struct nn_position m;
		ck_assert_int_eq(nn_position_init(&m, &ps, "pos", L, dim, false), TENSOR_OK);
		size_t table_bytes = (size_t)(L * dim) * tensor_dtype_size(dt);
		ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live0 + table_bytes);
		ck_assert_int_eq(ps.n, 0); /* no parameter */
		ck_assert(!m.learned && m.max_len == L && m.dim == dim);
		ck_assert(!m.weight->in_arena && !m.weight->requires_grad);
		ck_assert_int_eq(m.weight->dtype, dt);
		double want_tab[7 * 6];
		for (int64_t p = 0; p < L; p++)
			for (int64_t j = 0; j < dim; j++)
				want_tab[p * dim + j] = ref_pe(p, j, dim);
		tu_assert_shape(m.weight, 2, (int64_t[]){ L, dim });
		tu_assert_close(m.weight, want_tab, L * dim, tol(dt), 0);
		ck_assert(fabs(want_tab[1 * dim + 0] - sin(1.0)) < 1e-15); /* pos 1, 2i = 0 */
		/* forward adds the first T rows, for each batch */
		int64_t T = 4;
		struct tensor *x = tu_rand(dt, 3, (int64_t[]){ 2, T, dim }, 14);
		double *vx = tu_values(x), want[2 * 4 * 6];
		for (int64_t b = 0; b < 2; b++)
			for (int64_t t = 0; t < T; t++)
				for (int64_t j = 0; j < dim; j++) {
					int64_t i = (b * T + t) * dim + j;
					want[i] = vx[i] + want_tab[t * dim + j];
				}
		struct tensor *y = nn_position_forward(&m, x);
		ck_assert_msg(y != NULL, "%s", tensor_last_error());
		tu_assert_shape(y, 3, (int64_t[]){ 2, T, dim });
		tu_assert_close(y, want, 2 * T * dim, tol(dt), tol(dt));
		tu_assert_close(nn_position_forward(&m, tu_strided(x)), want, 2 * T * dim, tol(dt),
				tol(dt));
		/* T == max_len works */
		struct tensor *xl = tensor_zeros(dt, TENSOR_CPU, 3, (int64_t[]){ 1, L, dim });
		tu_assert_close(nn_position_forward(&m, xl), want_tab, L * dim, tol(dt), 0);
		free(vx);
		size_t live1 = tensor_mem_stats(TENSOR_CPU).live_bytes;
		nn_position_free(&m);
		ck_assert_ptr_null(m.weight);
		/* the table is freed */
		ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live1 - table_bytes);
		free_params(&ps);
	}
}
END_TEST

START_TEST(test_position_learned)
{
	for (int k = 0; k < 2; k++) {
		enum tensor_dtype dt = DTYPES[k];
		struct nn_params ps;
		nn_params_init(&ps, dt, TENSOR_CPU, 15);
		struct nn_position m;
		ck_assert_int_eq(nn_position_init(&m, &ps, "embeddings.pos", 64, 32, true),
				 TENSOR_OK);
		ck_assert(m.learned);
		ck_assert_ptr_eq(m.weight, expect_param(&ps, "embeddings.pos.weight", 2,
							(int64_t[]){ 64, 32 }, true));
		double *w = tu_values(m.weight), sq = 0;
		for (int i = 0; i < 64 * 32; i++)
			sq += w[i] * w[i];
		double sd = sqrt(sq / (64 * 32));
		ck_assert_msg(sd > 0.018 && sd < 0.022, "std %g", sd); /* N(0, 0.02) */
		struct tensor *x = tu_rand(dt, 3, (int64_t[]){ 3, 5, 32 }, 16);
		double *vx = tu_values(x), want[3 * 5 * 32];
		for (int b = 0; b < 3; b++)
			for (int i = 0; i < 5 * 32; i++)
				want[b * 160 + i] = vx[b * 160 + i] + w[i];
		tu_assert_close(nn_position_forward(&m, x), want, 480, tol(dt), tol(dt));
		/* [T, dim] input (no batch) also works */
		struct tensor *x2 = tensor_select(x, 0, 1);
		tu_assert_close(nn_position_forward(&m, x2), want + 160, 160, tol(dt), tol(dt));
		free(w);
		free(vx);
		nn_position_free(&m);
		ck_assert_int_eq(ps.n, 1); /* the list still owns the parameter */
		free_params(&ps);
	}
}
END_TEST

static struct tensor *f_position(struct tensor *const *in, void *ctx)
{
	return nn_position_forward(ctx, in[0]);
}

START_TEST(test_position_grad)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 17);
	struct nn_position sin_m, learned;
	nn_position_init(&sin_m, &ps, "sin", 6, 4, false);
	nn_position_init(&learned, &ps, "pos", 6, 4, true);
	struct tensor *x = gc_input(3, (int64_t[]){ 2, 3, 4 }, 18, -1, 1, true);
	gc_assert("position sinusoidal", f_position, &sin_m, 1, &x);
	gc_assert("position learned", f_position, &learned, 2,
		  (struct tensor *[]){ x, learned.weight });
	/* rows past T get no gradient */
	double *g = tu_values(learned.weight->grad);
	for (int i = 3 * 4; i < 6 * 4; i++)
		ck_assert(g[i] == 0);
	free(g);
	free_grads(1, &x);
	nn_position_free(&sin_m);
	free_params(&ps);
}
END_TEST

START_TEST(test_position_errors)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1);
	struct nn_position m;
	for (int learned = 0; learned < 2; learned++) {
		tu_assert_error(nn_position_init(NULL, &ps, "p", 4, 2, learned) < 0, TENSOR_ERR_ARG,
				"nn_position_init", "NULL");
		tu_assert_error(nn_position_init(&m, NULL, "p", 4, 2, learned) < 0, TENSOR_ERR_ARG,
				"nn_position_init", "NULL");
		tu_assert_error(nn_position_init(&m, &ps, "p", 0, 2, learned) < 0, TENSOR_ERR_ARG,
				"nn_position_init: 'p'", "max_len 0");
		tu_assert_error(nn_position_init(&m, &ps, "p", 4, -3, learned) < 0, TENSOR_ERR_ARG,
				"nn_position_init", "dim -3");
		ck_assert_ptr_null(m.weight);
	}
	ck_assert_int_eq(nn_position_init(&m, &ps, "p", 4, 2, true), TENSOR_OK);
	struct nn_position dup;
	tu_assert_error(nn_position_init(&dup, &ps, "p", 4, 2, true) < 0, TENSOR_ERR_ARG,
			"p.weight", "already exists");
	struct nn_position sm;
	ck_assert_int_eq(nn_position_init(&sm, &ps, "p", 4, 2, false), TENSOR_OK); /* no param */
	const struct nn_position *mods[2] = { &m, &sm };
	for (int k = 0; k < 2; k++) {
		const struct nn_position *pm = mods[k];
		struct tensor *x = tu_rand(TENSOR_F32, 3, (int64_t[]){ 2, 5, 2 }, 1);
		tu_assert_error(!nn_position_forward(pm, x), TENSOR_ERR_SHAPE,
				"nn_position_forward: x [2,5,2]", "T 5 > max_len 4");
		x = tu_rand(TENSOR_F32, 3, (int64_t[]){ 2, 3, 3 }, 1);
		tu_assert_error(!nn_position_forward(pm, x), TENSOR_ERR_SHAPE,
				"nn_position_forward: x [2,3,3]", "2]");
		x = tu_rand(TENSOR_F32, 1, (int64_t[]){ 2 }, 1);
		tu_assert_error(!nn_position_forward(pm, x), TENSOR_ERR_SHAPE,
				"nn_position_forward: x [2]", NULL);
		x = tu_rand(TENSOR_F64, 3, (int64_t[]){ 2, 3, 2 }, 1);
		tu_assert_error(!nn_position_forward(pm, x), TENSOR_ERR_DTYPE,
				"nn_position_forward", "f64");
		ASSERT_NULL_KEEPS_ERROR(nn_position_forward(pm, NULL));
	}
	struct nn_position empty = { 0 };
	struct tensor *x = tu_rand(TENSOR_F32, 3, (int64_t[]){ 2, 3, 2 }, 1);
	tu_assert_error(!nn_position_forward(&empty, x), TENSOR_ERR_ARG, "nn_position_forward",
			"not initialised");
	tu_assert_error(!nn_position_forward(NULL, x), TENSOR_ERR_ARG, "nn_position_forward", NULL);
	nn_position_free(&sm);
	nn_position_free(NULL);
	free_params(&ps);
}
END_TEST

/* ---- norms ------------------------------------------------------------------------------ */

START_TEST(test_layer_norm)
{
	const int64_t C = 6;
	for (int k = 0; k < 2; k++) {
		enum tensor_dtype dt = DTYPES[k];
		struct nn_params ps;
		nn_params_init(&ps, dt, TENSOR_CPU, 19);
		struct nn_layer_norm m;
		ck_assert_int_eq(nn_layer_norm_init(&m, &ps, "layers.0.ln1", C, 1e-5), TENSOR_OK);
		ck_assert(m.dim == C && m.eps == 1e-5);
		ck_assert_ptr_eq(
		    m.weight, expect_param(&ps, "layers.0.ln1.weight", 1, (int64_t[]){ C }, true));
		ck_assert_ptr_eq(m.bias,
				 expect_param(&ps, "layers.0.ln1.bias", 1, (int64_t[]){ C }, true));
		double ones[6] = { 1, 1, 1, 1, 1, 1 }, zeros[6] = { 0 };
		tu_assert_close(m.weight, ones, C, 0, 0);
		tu_assert_close(m.bias, zeros, C, 0, 0);
		/* non-trivial affine parameters for the reference */
		tensor_uniform_(m.weight, 1, 0.5, 1.5);
		tensor_uniform_(m.bias, 2, -1, 1);
		double *w = tu_values(m.weight), *b = tu_values(m.bias);
		struct tensor *x = tensor_add_scalar(tu_rand(dt, 3, (int64_t[]){ 2, 3, C }, 20), 3);
		double *vx = tu_values(x), want[36];
		for (int r = 0; r < 6; r++) {
			double mean = 0, var = 0;
			for (int j = 0; j < C; j++)
				mean += vx[r * C + j] / C;
			for (int j = 0; j < C; j++)
				var += (vx[r * C + j] - mean) * (vx[r * C + j] - mean) / C;
			for (int j = 0; j < C; j++)
				want[r * C + j] =
				    (vx[r * C + j] - mean) / sqrt(var + 1e-5) * w[j] + b[j];
		}
		struct tensor *y = nn_layer_norm_forward(&m, x);
		ck_assert_msg(y != NULL, "%s", tensor_last_error());
		tu_assert_shape(y, 3, (int64_t[]){ 2, 3, C });
		tu_assert_close(y, want, 36, 1e-5, 1e-5);
		tu_assert_close(nn_layer_norm_forward(&m, tu_strided(x)), want, 36, 1e-5, 1e-5);
		nn_layer_norm_free(&m);
		ck_assert_ptr_null(m.weight);
		free(w);
		free(b);
		free(vx);
		free_params(&ps);
	}
}
END_TEST

START_TEST(test_rms_norm)
{
	const int64_t C = 5;
	for (int k = 0; k < 2; k++) {
		enum tensor_dtype dt = DTYPES[k];
		struct nn_params ps;
		nn_params_init(&ps, dt, TENSOR_CPU, 21);
		struct nn_rms_norm m;
		ck_assert_int_eq(nn_rms_norm_init(&m, &ps, "norm", C, 1e-6), TENSOR_OK);
		ck_assert_ptr_eq(m.weight,
				 expect_param(&ps, "norm.weight", 1, (int64_t[]){ C }, true));
		ck_assert_int_eq(ps.n, 1);
		double ones[5] = { 1, 1, 1, 1, 1 };
		tu_assert_close(m.weight, ones, C, 0, 0);
		tensor_uniform_(m.weight, 3, 0.5, 1.5);
		double *w = tu_values(m.weight);
		struct tensor *x = tu_rand(dt, 2, (int64_t[]){ 4, C }, 22);
		double *vx = tu_values(x), want[20];
		for (int r = 0; r < 4; r++) {
			double ms = 0;
			for (int j = 0; j < C; j++)
				ms += vx[r * C + j] * vx[r * C + j] / C;
			for (int j = 0; j < C; j++)
				want[r * C + j] = vx[r * C + j] / sqrt(ms + 1e-6) * w[j];
		}
		tu_assert_close(nn_rms_norm_forward(&m, x), want, 20, 1e-5, 1e-5);
		tu_assert_close(nn_rms_norm_forward(&m, tu_strided(x)), want, 20, 1e-5, 1e-5);
		nn_rms_norm_free(&m);
		ck_assert_ptr_null(m.weight);
		free(w);
		free(vx);
		free_params(&ps);
	}
}
END_TEST

static struct tensor *f_layer_norm(struct tensor *const *in, void *ctx)
{
	return nn_layer_norm_forward(ctx, in[0]);
}

static struct tensor *f_rms_norm(struct tensor *const *in, void *ctx)
{
	return nn_rms_norm_forward(ctx, in[0]);
}

START_TEST(test_norm_grad)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 23);
	struct nn_layer_norm ln;
	struct nn_rms_norm rms;
	nn_layer_norm_init(&ln, &ps, "ln", 5, 1e-5);
	nn_rms_norm_init(&rms, &ps, "rms", 5, 1e-6);
	tensor_uniform_(ln.weight, 4, 0.5, 1.5);
	tensor_uniform_(ln.bias, 5, -1, 1);
	tensor_uniform_(rms.weight, 6, 0.5, 1.5);
	struct tensor *x = gc_input(3, (int64_t[]){ 2, 3, 5 }, 24, -2, 2, true);
	gc_assert("layer_norm", f_layer_norm, &ln, 3, (struct tensor *[]){ x, ln.weight, ln.bias });
	gc_assert("rms_norm", f_rms_norm, &rms, 2, (struct tensor *[]){ x, rms.weight });
	free_grads(1, &x);
	free_params(&ps);
}
END_TEST

START_TEST(test_norm_errors)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1);
	struct nn_layer_norm ln;
	struct nn_rms_norm rms;
	tu_assert_error(nn_layer_norm_init(NULL, &ps, "n", 4, 1e-5) < 0, TENSOR_ERR_ARG,
			"nn_layer_norm_init", "NULL");
	tu_assert_error(nn_layer_norm_init(&ln, NULL, "n", 4, 1e-5) < 0, TENSOR_ERR_ARG,
			"nn_layer_norm_init", "NULL");
	tu_assert_error(nn_layer_norm_init(&ln, &ps, "n", 0, 1e-5) < 0, TENSOR_ERR_ARG,
			"nn_layer_norm_init: 'n'", "dim 0");
	tu_assert_error(nn_layer_norm_init(&ln, &ps, "n", 4, -1e-5) < 0, TENSOR_ERR_ARG,
			"nn_layer_norm_init", "eps");
	tu_assert_error(nn_layer_norm_init(&ln, &ps, "n", 4, NAN) < 0, TENSOR_ERR_ARG,
			"nn_layer_norm_init", "eps");
	tu_assert_error(nn_rms_norm_init(NULL, &ps, "n", 4, 1e-5) < 0, TENSOR_ERR_ARG,
			"nn_rms_norm_init", "NULL");
	tu_assert_error(nn_rms_norm_init(&rms, NULL, "n", 4, 1e-5) < 0, TENSOR_ERR_ARG,
			"nn_rms_norm_init", "NULL");
	tu_assert_error(nn_rms_norm_init(&rms, &ps, "n", -1, 1e-5) < 0, TENSOR_ERR_ARG,
			"nn_rms_norm_init: 'n'", "dim -1");
	tu_assert_error(nn_rms_norm_init(&rms, &ps, "n", 4, INFINITY) < 0, TENSOR_ERR_ARG,
			"nn_rms_norm_init", "eps");
	ck_assert_int_eq(ps.n, 0);
	ck_assert_int_eq(nn_layer_norm_init(&ln, &ps, "n", 4, 0), TENSOR_OK); /* eps 0 allowed */
	tu_assert_error(nn_layer_norm_init(&ln, &ps, "n", 4, 1e-5) < 0, TENSOR_ERR_ARG, "n.weight",
			"already exists");
	ck_assert_ptr_null(ln.weight);
	tu_assert_error(nn_rms_norm_init(&rms, &ps, "n", 4, 1e-5) < 0, TENSOR_ERR_ARG, "n.weight",
			"already exists");
	ck_assert_int_eq(nn_layer_norm_init(&ln, &ps, "ln", 4, 1e-5), TENSOR_OK);
	ck_assert_int_eq(nn_rms_norm_init(&rms, &ps, "rms", 4, 1e-5), TENSOR_OK);

	struct tensor *x = tu_rand(TENSOR_F32, 2, (int64_t[]){ 3, 5 }, 1);
	tu_assert_error(!nn_layer_norm_forward(&ln, x), TENSOR_ERR_SHAPE,
			"nn_layer_norm_forward: x [3,5] last dim != dim 4", NULL);
	tu_assert_error(!nn_rms_norm_forward(&rms, x), TENSOR_ERR_SHAPE,
			"nn_rms_norm_forward: x [3,5] last dim != dim 4", NULL);
	struct tensor *x64 = tu_rand(TENSOR_F64, 2, (int64_t[]){ 3, 4 }, 1);
	tu_assert_error(!nn_layer_norm_forward(&ln, x64), TENSOR_ERR_DTYPE, "nn_layer_norm_forward",
			"f64");
	tu_assert_error(!nn_rms_norm_forward(&rms, x64), TENSOR_ERR_DTYPE, "nn_rms_norm_forward",
			"f64");
	struct tensor *s = tensor_full(TENSOR_F32, TENSOR_CPU, 0, NULL, 1);
	tu_assert_error(!nn_layer_norm_forward(&ln, s), TENSOR_ERR_SHAPE, "nn_layer_norm_forward",
			NULL);
	struct tensor *x4 = tu_rand(TENSOR_F32, 2, (int64_t[]){ 3, 4 }, 1);
	struct nn_layer_norm eln = { 0 };
	struct nn_rms_norm erms = { 0 };
	tu_assert_error(!nn_layer_norm_forward(&eln, x4), TENSOR_ERR_ARG, "nn_layer_norm_forward",
			"not initialised");
	tu_assert_error(!nn_rms_norm_forward(NULL, x4), TENSOR_ERR_ARG, "nn_rms_norm_forward",
			NULL);
	tu_assert_error(!nn_rms_norm_forward(&erms, x4), TENSOR_ERR_ARG, "nn_rms_norm_forward",
			"not initialised");
	ASSERT_NULL_KEEPS_ERROR(nn_layer_norm_forward(&ln, NULL));
	ASSERT_NULL_KEEPS_ERROR(nn_rms_norm_forward(&rms, NULL));
	free_params(&ps);
}
END_TEST

/* ---- dropout ------------------------------------------------------------------------------- */

START_TEST(test_dropout_statistics)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 25);
	struct nn_dropout d;
	ck_assert_int_eq(nn_dropout_init(&d, &ps, 0.3), TENSOR_OK);
	ck_assert(d.p == 0.3 && d.ps == &ps);
	const int64_t s[2] = { 100, 100 };
	struct tensor *x = tensor_add_scalar(tu_rand(TENSOR_F32, 2, s, 26), 2); /* in [1, 3) */
	double *vx = tu_values(x);
	/* training: ~30% zeros, the rest scaled by 1/0.7 */
	ck_assert_uint_eq(ps.rng_counter, 0);
	struct tensor *y1 = nn_dropout_forward(&d, x);
	ck_assert_uint_eq(ps.rng_counter, 1);
	struct tensor *y2 = nn_dropout_forward(&d, x);
	ck_assert_uint_eq(ps.rng_counter, 2);
	ck_assert(y1 && y2);
	double *v1 = tu_values(y1), *v2 = tu_values(y2);
	int zeros = 0, differ = 0;
	for (int i = 0; i < 10000; i++) {
		if (v1[i] == 0) {
			zeros++;
		} else {
			ck_assert_msg(fabs(v1[i] - vx[i] / 0.7) <= 1e-6 * fabs(v1[i]), "%g vs %g",
				      v1[i], vx[i] / 0.7);
		}
		differ += (v1[i] == 0) != (v2[i] == 0);
	}
	ck_assert_msg(zeros > 2800 && zeros < 3200, "zeros %d", zeros);
	/* independent masks disagree on about 2 p (1 - p) = 42% of elements */
	ck_assert_msg(differ > 3800 && differ < 4600, "differ %d", differ);
	/* same seed and counter reproduce the mask: rewind, or a fresh list */
	ps.rng_counter = 0;
	tu_assert_close(nn_dropout_forward(&d, x), v1, 10000, 0, 0);
	struct nn_params ps2;
	nn_params_init(&ps2, TENSOR_F32, TENSOR_CPU, 25);
	struct nn_dropout d2;
	nn_dropout_init(&d2, &ps2, 0.3);
	tu_assert_close(nn_dropout_forward(&d2, x), v1, 10000, 0, 0);
	tu_assert_close(nn_dropout_forward(&d2, x), v2, 10000, 0, 0);
	/* another seed draws another mask */
	struct nn_params ps3;
	nn_params_init(&ps3, TENSOR_F32, TENSOR_CPU, 26);
	nn_dropout_init(&d2, &ps3, 0.3);
	double *v3 = tu_values(nn_dropout_forward(&d2, x));
	ck_assert(memcmp(v1, v3, sizeof(double) * 10000) != 0);
	/* eval: identity, and the generator does not advance */
	nn_params_train(&ps, false);
	uint64_t c = ps.rng_counter;
	struct tensor *ye = nn_dropout_forward(&d, x);
	tu_assert_close(ye, vx, 10000, 0, 0);
	ck_assert_uint_eq(ps.rng_counter, c);
	/* p = 0 in training: identity */
	nn_params_train(&ps, true);
	struct nn_dropout d0;
	ck_assert_int_eq(nn_dropout_init(&d0, &ps, 0), TENSOR_OK);
	tu_assert_close(nn_dropout_forward(&d0, x), vx, 10000, 0, 0);
	ck_assert_uint_eq(ps.rng_counter, c);
	free(vx);
	free(v1);
	free(v2);
	free(v3);
	free_params(&ps);
}
END_TEST

struct drop_ctx {
	struct nn_dropout *d;
	uint64_t counter;
};

/* Rewinds the generator so each evaluation draws the same mask. */
static struct tensor *f_dropout(struct tensor *const *in, void *ctx)
{
	struct drop_ctx *c = ctx;
	c->d->ps->rng_counter = c->counter;
	return nn_dropout_forward(c->d, in[0]);
}

START_TEST(test_dropout_grad)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 27);
	struct nn_dropout d;
	nn_dropout_init(&d, &ps, 0.5);
	struct tensor *x = gc_input(2, (int64_t[]){ 4, 5 }, 28, -1, 1, true);
	struct drop_ctx c = { &d, 3 };
	gc_assert("dropout", f_dropout, &c, 1, &x);
	/* the gradient is the mask scaled by 2: zero exactly where y is zero */
	struct tensor *y = f_dropout(&x, &c);
	double *vy = tu_values(y), *g = tu_values(x->grad), *vx = tu_values(x);
	ck_assert_int_eq(ag_zero_grad(x), TENSOR_OK);
	ck_assert_int_eq(ag_backward(ag_sum(y, 0, NULL, false), NULL), TENSOR_OK);
	free(g);
	g = tu_values(x->grad);
	int dropped = 0;
	for (int i = 0; i < 20; i++) {
		ck_assert(g[i] == (vy[i] == 0 ? 0 : 2));
		ck_assert(fabs(vy[i] - g[i] * vx[i]) <= 1e-15);
		dropped += vy[i] == 0;
	}
	ck_assert(dropped > 0 && dropped < 20);
	free(vy);
	free(g);
	free(vx);
	free_grads(1, &x);
	free_params(&ps);
}
END_TEST

START_TEST(test_dropout_errors)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1);
	struct nn_dropout d;
	tu_assert_error(nn_dropout_init(&d, &ps, 1.0) < 0, TENSOR_ERR_ARG, "nn_dropout_init",
			"[0, 1), got 1");
	tu_assert_error(nn_dropout_init(&d, &ps, -0.1) < 0, TENSOR_ERR_ARG, "nn_dropout_init",
			"got -0.1");
	tu_assert_error(nn_dropout_init(&d, &ps, NAN) < 0, TENSOR_ERR_ARG, "nn_dropout_init",
			"nan");
	ck_assert_ptr_null(d.ps);
	tu_assert_error(nn_dropout_init(&d, NULL, 0.1) < 0, TENSOR_ERR_ARG, "nn_dropout_init",
			"NULL");
	tu_assert_error(nn_dropout_init(NULL, &ps, 0.1) < 0, TENSOR_ERR_ARG, "nn_dropout_init",
			"NULL");
	struct tensor *x = tu_rand(TENSOR_F32, 1, (int64_t[]){ 4 }, 1);
	struct nn_dropout empty = { 0 };
	tu_assert_error(!nn_dropout_forward(&empty, x), TENSOR_ERR_ARG, "nn_dropout_forward",
			"not initialised");
	tu_assert_error(!nn_dropout_forward(NULL, x), TENSOR_ERR_ARG, "nn_dropout_forward", NULL);
	ck_assert_int_eq(nn_dropout_init(&d, &ps, 0.1), TENSOR_OK);
	ASSERT_NULL_KEEPS_ERROR(nn_dropout_forward(&d, NULL));
	ck_assert_uint_eq(ps.rng_counter, 0); /* NULL input draws nothing */
	free_params(&ps);
}
END_TEST

/* ---- feed-forward -------------------------------------------------------------------------- */

START_TEST(test_feed_forward_plain)
{
	const int64_t dim = 4, hidden = 6, rows = 6;
	for (int k = 0; k < 2; k++) {
		enum tensor_dtype dt = DTYPES[k];
		for (int a = 0; a < NN_NACTIVATIONS; a++) {
			struct nn_params ps;
			nn_params_init(&ps, dt, TENSOR_CPU, 29 + a);
			struct nn_feed_forward m;
			ck_assert_int_eq(nn_feed_forward_init(&m, &ps, "layers.1.ffn", dim, hidden,
							      a, false, 0.25),
					 TENSOR_OK);
			ck_assert(!m.gated && m.act == (enum nn_activation)a && m.dim == dim &&
				  m.hidden == hidden);
			ck_assert(m.dropout.p == 0.25 && m.dropout.ps == &ps);
			ck_assert_ptr_null(m.fc3.weight);
			int64_t s_w1[2] = { hidden, dim }, s_w2[2] = { dim, hidden };
			ck_assert_ptr_eq(m.fc1.weight, expect_param(&ps, "layers.1.ffn.fc1.weight",
								    2, s_w1, false));
			ck_assert_ptr_eq(m.fc1.bias, expect_param(&ps, "layers.1.ffn.fc1.bias", 1,
								  &hidden, true));
			ck_assert_ptr_eq(m.fc2.weight, expect_param(&ps, "layers.1.ffn.fc2.weight",
								    2, s_w2, false));
			ck_assert_ptr_eq(m.fc2.bias,
					 expect_param(&ps, "layers.1.ffn.fc2.bias", 1, &dim, true));
			ck_assert_int_eq(ps.n, 4);
			ck_assert_int_eq(nn_params_count(&ps), 2 * dim * hidden + dim + hidden);
			double *w1 = tu_values(m.fc1.weight), *b1 = tu_values(m.fc1.bias),
			       *w2 = tu_values(m.fc2.weight), *b2 = tu_values(m.fc2.bias);
			struct tensor *x =
			    tensor_mul_scalar(tu_rand(dt, 3, (int64_t[]){ 2, 3, dim }, 30 + a), 2);
			double *vx = tu_values(x), h[6 * 6], want[6 * 4];
			ref_linear(vx, rows, dim, w1, b1, hidden, h);
			for (int i = 0; i < rows * hidden; i++)
				h[i] = ref_act(a, h[i]);
			ref_linear(h, rows, hidden, w2, b2, dim, want);
			/* eval mode: dropout off */
			nn_params_train(&ps, false);
			struct tensor *y = nn_feed_forward_forward(&m, x);
			ck_assert_msg(y != NULL, "%s", tensor_last_error());
			tu_assert_shape(y, 3, (int64_t[]){ 2, 3, dim });
			tu_assert_close(y, want, rows * dim, tol(dt), tol(dt));
			tu_assert_close(nn_feed_forward_forward(&m, tu_strided(x)), want,
					rows * dim, tol(dt), tol(dt));
			/* training: the mask the module draws, applied to the hidden layer */
			nn_params_train(&ps, true);
			struct nn_params peek = ps;
			uint64_t seed = nn_params_next_seed(&peek);
			double *u = tu_values(tensor_rand_uniform(
			    dt, TENSOR_CPU, 3, (int64_t[]){ 2, 3, hidden }, seed, 0, 1));
			for (int i = 0; i < rows * hidden; i++)
				h[i] = u[i] >= 0.25 ? h[i] / 0.75 : 0;
			ref_linear(h, rows, hidden, w2, b2, dim, want);
			tu_assert_close(nn_feed_forward_forward(&m, x), want, rows * dim, tol(dt),
					tol(dt));
			ck_assert_uint_eq(ps.rng_counter, 1);
			nn_feed_forward_free(&m);
			ck_assert_ptr_null(m.fc1.weight);
			free(w1);
			free(b1);
			free(w2);
			free(b2);
			free(vx);
			free(u);
			free_params(&ps);
		}
	}
}
END_TEST

START_TEST(test_feed_forward_gated)
{
	const int64_t dim = 4, hidden = 5, rows = 6;
	for (int k = 0; k < 2; k++) {
		enum tensor_dtype dt = DTYPES[k];
		struct nn_params ps;
		nn_params_init(&ps, dt, TENSOR_CPU, 33);
		struct nn_feed_forward m;
		ck_assert_int_eq(
		    nn_feed_forward_init(&m, &ps, "mlp", dim, hidden, NN_SILU, true, 0), TENSOR_OK);
		ck_assert(m.gated);
		int64_t s_in[2] = { hidden, dim }, s_out[2] = { dim, hidden };
		ck_assert_ptr_eq(m.fc1.weight, expect_param(&ps, "mlp.w1.weight", 2, s_in, false));
		ck_assert_ptr_eq(m.fc3.weight, expect_param(&ps, "mlp.w3.weight", 2, s_in, false));
		ck_assert_ptr_eq(m.fc2.weight, expect_param(&ps, "mlp.w2.weight", 2, s_out, false));
		ck_assert(!m.fc1.bias && !m.fc2.bias && !m.fc3.bias);
		ck_assert_int_eq(ps.n, 3);
		ck_assert_int_eq(nn_params_count(&ps), 3 * dim * hidden);
		double *w1 = tu_values(m.fc1.weight), *w2 = tu_values(m.fc2.weight),
		       *w3 = tu_values(m.fc3.weight);
		struct tensor *x =
		    tensor_mul_scalar(tu_rand(dt, 3, (int64_t[]){ 3, 2, dim }, 34), 2);
		double *vx = tu_values(x), g[6 * 5], v[6 * 5], want[6 * 4];
		ref_linear(vx, rows, dim, w1, NULL, hidden, g);
		ref_linear(vx, rows, dim, w3, NULL, hidden, v);
		for (int i = 0; i < rows * hidden; i++)
			g[i] = ref_act(NN_SILU, g[i]) * v[i];
		ref_linear(g, rows, hidden, w2, NULL, dim, want);
		struct tensor *y = nn_feed_forward_forward(&m, x); /* training, p = 0 */
		ck_assert_msg(y != NULL, "%s", tensor_last_error());
		tu_assert_shape(y, 3, (int64_t[]){ 3, 2, dim });
		tu_assert_close(y, want, rows * dim, tol(dt), tol(dt));
		tu_assert_close(nn_feed_forward_forward(&m, tu_strided(x)), want, rows * dim,
				tol(dt), tol(dt));
		ck_assert_uint_eq(ps.rng_counter, 0);
		free(w1);
		free(w2);
		free(w3);
		free(vx);
		free_params(&ps);
	}
}
END_TEST

static struct tensor *f_ffn(struct tensor *const *in, void *ctx)
{
	return nn_feed_forward_forward(ctx, in[0]);
}

START_TEST(test_feed_forward_grad)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 35);
	struct nn_feed_forward plain[NN_NACTIVATIONS], gated;
	struct tensor *x = gc_input(3, (int64_t[]){ 2, 2, 3 }, 36, -2, 2, true);
	char name[NN_NAME_MAX];
	for (int a = 0; a < NN_NACTIVATIONS; a++) {
		ck_assert_int_eq(nn_feed_forward_init(&plain[a], &ps,
						      nn_namef(name, "", "ffn%d", a), 3, 4, a,
						      false, 0.5),
				 TENSOR_OK);
		struct nn_feed_forward *m = &plain[a];
		nn_params_train(&ps, false); /* dropout off: a deterministic function */
		gc_assert(nn_activation_name(a), f_ffn, m, 5,
			  (struct tensor *[]){ x, m->fc1.weight, m->fc1.bias, m->fc2.weight,
					       m->fc2.bias });
	}
	nn_params_train(&ps, true);
	ck_assert_int_eq(nn_feed_forward_init(&gated, &ps, "swiglu", 3, 4, NN_SILU, true, 0),
			 TENSOR_OK);
	gc_assert("swiglu", f_ffn, &gated, 4,
		  (struct tensor *[]){ x, gated.fc1.weight, gated.fc2.weight, gated.fc3.weight });
	free_grads(1, &x);
	free_params(&ps);
}
END_TEST

/* Without gradients a long input runs in row blocks (each in its own scope):
 * the same values as the one-pass forward, with a lower peak. */
START_TEST(test_feed_forward_blocked)
{
	const int64_t dim = 8, hidden = 32, shape[3] = { 3, 1000, dim }; /* 3000 rows */
	for (int gated = 0; gated < 2; gated++) {
		struct nn_params ps;
		nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 41);
		struct nn_feed_forward m;
		ck_assert_int_eq(nn_feed_forward_init(&m, &ps, "ffn", dim, hidden,
						      gated ? NN_SILU : NN_GELU, gated, 0.5),
				 TENSOR_OK);
		nn_params_train(&ps, false);
		struct tensor *x = tu_rand(TENSOR_F32, 3, shape, 42);
		tensor_scope_begin();
		size_t live = tensor_mem_stats(TENSOR_CPU).live_bytes;
		tensor_mem_reset_peak(TENSOR_CPU);
		struct tensor *whole = nn_feed_forward_forward(&m, x); /* grad on: one pass */
		size_t peak_whole = tensor_mem_stats(TENSOR_CPU).peak_bytes - live;
		double *want = tu_values(whole);
		tensor_scope_end();
		tensor_scope_begin();
		ag_no_grad_begin();
		tensor_mem_reset_peak(TENSOR_CPU);
		struct tensor *y = nn_feed_forward_forward(&m, x);
		size_t peak_blocked = tensor_mem_stats(TENSOR_CPU).peak_bytes - live;
		ck_assert_msg(y != NULL, "%s", tensor_last_error());
		tu_assert_shape(y, 3, shape);
		tu_assert_close(y, want, 3000 * dim, 1e-6, 1e-6);
		ck_assert_msg(2 * peak_blocked < peak_whole, "peak %zu blocked, %zu whole",
			      peak_blocked, peak_whole);
		/* a strided input takes the one-pass path: the same values */
		tu_assert_close(nn_feed_forward_forward(&m, tu_strided(x)), want, 3000 * dim, 1e-6,
				1e-6);
		/* dropout in training mode: one pass, one mask over all rows */
		nn_params_train(&ps, true);
		uint64_t drawn = ps.rng_counter;
		ck_assert_ptr_nonnull(nn_feed_forward_forward(&m, x));
		ck_assert_uint_eq(ps.rng_counter, drawn + 1);
		ag_no_grad_end();
		tensor_scope_end();
		free(want);
		tensor_free(x);
		free_params(&ps);
	}
}
END_TEST

START_TEST(test_feed_forward_errors)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1);
	struct nn_feed_forward m;
	tu_assert_error(nn_feed_forward_init(NULL, &ps, "f", 4, 8, NN_GELU, false, 0) < 0,
			TENSOR_ERR_ARG, "nn_feed_forward_init", "NULL");
	tu_assert_error(nn_feed_forward_init(&m, NULL, "f", 4, 8, NN_GELU, false, 0) < 0,
			TENSOR_ERR_ARG, "nn_feed_forward_init", "NULL");
	tu_assert_error(nn_feed_forward_init(&m, &ps, "f", 0, 8, NN_GELU, false, 0) < 0,
			TENSOR_ERR_ARG, "nn_feed_forward_init: 'f'", "dim 0");
	tu_assert_error(nn_feed_forward_init(&m, &ps, "f", 4, -8, NN_GELU, false, 0) < 0,
			TENSOR_ERR_ARG, "nn_feed_forward_init", "hidden -8");
	tu_assert_error(nn_feed_forward_init(&m, &ps, "f", 4, 8, NN_NACTIVATIONS, false, 0) < 0,
			TENSOR_ERR_ARG, "nn_feed_forward_init", "unknown activation 4");
	tu_assert_error(nn_feed_forward_init(&m, &ps, "f", 4, 8, NN_RELU, true, 0) < 0,
			TENSOR_ERR_ARG, "nn_feed_forward_init", "silu, got relu");
	tu_assert_error(nn_feed_forward_init(&m, &ps, "f", 4, 8, NN_GELU, false, 1) < 0,
			TENSOR_ERR_ARG, "nn_dropout_init", "[0, 1)");
	tu_assert_error(nn_feed_forward_init(&m, &ps, "f", 4, 8, NN_GELU, false, -0.5) < 0,
			TENSOR_ERR_ARG, "nn_dropout_init", NULL);
	ck_assert_ptr_null(m.fc1.weight);
	ck_assert_int_eq(ps.n, 0);
	ck_assert_int_eq(nn_feed_forward_init(&m, &ps, "f", 4, 8, NN_GELU, false, 0.1), TENSOR_OK);
	struct nn_feed_forward dup;
	tu_assert_error(nn_feed_forward_init(&dup, &ps, "f", 4, 8, NN_GELU, false, 0.1) < 0,
			TENSOR_ERR_ARG, "f.fc1.weight", "already exists");
	ck_assert_ptr_null(dup.fc1.weight);

	struct tensor *x = tu_rand(TENSOR_F32, 2, (int64_t[]){ 3, 5 }, 1);
	tu_assert_error(!nn_feed_forward_forward(&m, x), TENSOR_ERR_SHAPE,
			"nn_feed_forward_forward: x [3,5] last dim != dim 4", NULL);
	struct tensor *x64 = tu_rand(TENSOR_F64, 2, (int64_t[]){ 3, 4 }, 1);
	tu_assert_error(!nn_feed_forward_forward(&m, x64), TENSOR_ERR_DTYPE, "nn_linear_forward",
			"f64");
	struct nn_feed_forward empty = { 0 };
	struct tensor *x4 = tu_rand(TENSOR_F32, 2, (int64_t[]){ 3, 4 }, 1);
	tu_assert_error(!nn_feed_forward_forward(&empty, x4), TENSOR_ERR_ARG,
			"nn_feed_forward_forward", "not initialised");
	tu_assert_error(!nn_feed_forward_forward(NULL, x4), TENSOR_ERR_ARG,
			"nn_feed_forward_forward", NULL);
	ASSERT_NULL_KEEPS_ERROR(nn_feed_forward_forward(&m, NULL));
	ck_assert_uint_eq(ps.rng_counter, 0);
	free_params(&ps);
}
END_TEST

/* A whole small model: embedding + position + norm + ffn trains down (the
 * modules compose and their gradients point downhill). */
START_TEST(test_modules_compose_and_train)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 37);
	struct nn_embedding emb;
	struct nn_position pos;
	struct nn_layer_norm ln;
	struct nn_feed_forward ffn;
	struct nn_linear head;
	ck_assert_int_eq(nn_embedding_init(&emb, &ps, "emb", 7, 8, 0), TENSOR_OK);
	ck_assert_int_eq(nn_position_init(&pos, &ps, "pos", 5, 8, false), TENSOR_OK);
	ck_assert_int_eq(nn_layer_norm_init(&ln, &ps, "ln", 8, 1e-5), TENSOR_OK);
	ck_assert_int_eq(nn_feed_forward_init(&ffn, &ps, "ffn", 8, 16, NN_SILU, true, 0.1),
			 TENSOR_OK);
	ck_assert_int_eq(nn_linear_init(&head, &ps, "head", 8, 1, true), TENSOR_OK);
	ck_assert_int_eq(nn_params_pack(&ps), TENSOR_OK);
	const int32_t ids_v[8] = { 1, 2, 3, 0, 4, 5, 6, 0 };
	const double target[2] = { 1, -1 };
	struct tensor *ids =
	    tensor_from_data(TENSOR_I32, TENSOR_CPU, 2, (int64_t[]){ 2, 4 }, ids_v);
	struct tensor *tgt = tensor_from_data(TENSOR_F32, TENSOR_CPU, 1, (int64_t[]){ 2 },
					      (float[]){ (float)target[0], (float)target[1] });
	double first = 0, last = 0;
	for (int step = 0; step < 60; step++) {
		tensor_scope_begin();
		struct tensor *h = nn_position_forward(&pos, nn_embedding_forward(&emb, ids));
		h = ag_add(h, nn_feed_forward_forward(&ffn, nn_layer_norm_forward(&ln, h)));
		struct tensor *out = nn_linear_forward(&head, ag_mean(h, 1, (int[]){ 1 }, false));
		struct tensor *d = ag_sub(ag_view(out, 1, (int64_t[]){ 2 }), tgt);
		struct tensor *loss = ag_mean(ag_mul(d, d), 0, NULL, false);
		ck_assert_msg(loss != NULL, "%s", tensor_last_error());
		double l = tensor_get(loss, NULL);
		if (step == 0)
			first = l;
		last = l;
		ck_assert_int_eq(nn_params_zero_grad(&ps), TENSOR_OK);
		ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
		float *p = tensor_data(ps.flat), *g = tensor_data(ps.flat_grad);
		for (int64_t i = 0; i < tensor_numel(ps.flat); i++)
			p[i] -= 0.05f * g[i];
		tensor_scope_end();
	}
	ck_assert_msg(last < 0.1 * first, "loss %g -> %g", first, last);
	ck_assert(ps.rng_counter == 60); /* one dropout mask a step */
	/* the padding row never moved */
	for (int j = 0; j < 8; j++)
		ck_assert(tensor_get(emb.weight, (int64_t[]){ 0, j }) == 0);
	nn_position_free(&pos);
	free_params(&ps);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("nn_modules");
	TCase *tc = tu_tcase("activation");
	tcase_add_test(tc, test_activation_parse_and_name);
	tcase_add_test(tc, test_activation_forward);
	tcase_add_test(tc, test_activation_grad);
	tcase_add_test(tc, test_activation_errors);
	suite_add_tcase(s, tc);
	tc = tu_tcase("linear");
	tcase_add_test(tc, test_linear_params);
	tcase_add_test(tc, test_linear_forward);
	tcase_add_test(tc, test_linear_grad);
	tcase_add_test(tc, test_linear_errors);
	suite_add_tcase(s, tc);
	tc = tu_tcase("embedding");
	tcase_add_test(tc, test_embedding_params_and_forward);
	tcase_add_test(tc, test_embedding_padding_gets_no_grad);
	tcase_add_test(tc, test_embedding_grad);
	tcase_add_test(tc, test_embedding_errors);
	suite_add_tcase(s, tc);
	tc = tu_tcase("position");
	tcase_add_test(tc, test_position_sinusoidal);
	tcase_add_test(tc, test_position_learned);
	tcase_add_test(tc, test_position_grad);
	tcase_add_test(tc, test_position_errors);
	suite_add_tcase(s, tc);
	tc = tu_tcase("norm");
	tcase_add_test(tc, test_layer_norm);
	tcase_add_test(tc, test_rms_norm);
	tcase_add_test(tc, test_norm_grad);
	tcase_add_test(tc, test_norm_errors);
	suite_add_tcase(s, tc);
	tc = tu_tcase("dropout");
	tcase_add_test(tc, test_dropout_statistics);
	tcase_add_test(tc, test_dropout_grad);
	tcase_add_test(tc, test_dropout_errors);
	suite_add_tcase(s, tc);
	tc = tu_tcase("feed_forward");
	tcase_add_test(tc, test_feed_forward_plain);
	tcase_add_test(tc, test_feed_forward_gated);
	tcase_add_test(tc, test_feed_forward_grad);
	tcase_add_test(tc, test_feed_forward_blocked);
	tcase_add_test(tc, test_feed_forward_errors);
	tcase_add_test(tc, test_modules_compose_and_train);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
