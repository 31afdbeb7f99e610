/* nn modules of the encoder block: layer and RMS norm, dropout and the plain /
 * SwiGLU feed-forward, and a small model of all modules that trains. Each
 * forward against a plain-loop reference, gradient checks w.r.t. inputs and
 * parameters, registered names / shapes / no_decay flags, and every error
 * path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "nn_modules_common.h"
#include "op_table.h"

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
			for (int i = 0; i < rows * hidden; i++)
				h[i] = ref_dropout_keep(seed, (uint64_t)i, 0.25) ? h[i] / 0.75 : 0;
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
	Suite *s = suite_create("nn_block");
	TCase *tc = tu_tcase("norm");
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
