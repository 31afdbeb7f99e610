/* nn modules: activations, linear, embedding, position embeddings and the
 * convolutional position encoding. Each forward against a plain-loop
 * reference, gradient checks w.r.t. inputs and parameters, registered names /
 * shapes / no_decay flags, and every error path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "nn_modules_common.h"

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
	/* round 0: no gradient yet; 1: a zeroed one, rows added into it; 2: gradients kept from
	 * round 1 and a padding row's gradient set by hand, both left as they were */
	double kept[15] = { 0 };
	for (int round = 0; round < 3; round++) {
		if (round == 1) { /* a non-zero padding row (say, loaded) is used but not trained */
			ag_no_grad_begin(); /* setting a parameter is no part of the graph */
			ck_assert_int_eq(tensor_fill_(tensor_select(m.weight, 0, 2), 5), TENSOR_OK);
			ag_no_grad_end();
			ck_assert_int_eq(nn_params_zero_grad(&ps), TENSOR_OK);
		}
		if (round == 2) {
			ck_assert_int_eq(tensor_fill_(tensor_select(m.weight->grad, 0, 2), 7),
					 TENSOR_OK);
			double *vg = tu_values(m.weight->grad);
			memcpy(kept, vg, sizeof kept);
			free(vg);
		}
		struct tensor *r = tu_rand(TENSOR_F64, 2, (int64_t[]){ 7, 3 }, 11);
		struct tensor *y = nn_embedding_forward(&m, ids);
		ck_assert(y != NULL && y->requires_grad);
		ck_assert(tensor_get(y, (int64_t[]){ 0, 1 }) == (round ? 5 : 0));
		struct tensor *loss = ag_sum(ag_mul(y, r), 0, NULL, false);
		ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
		double *vr = tu_values(r), want[15];
		memcpy(want, kept, sizeof want);
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
		nn_position_free(&m); /* forgets the table, which ps keeps */
		ck_assert_ptr_null(m.weight);
		ck_assert_int_eq(ps.nkept, 1);
		ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live1);
		nn_params_free(&ps); /* frees it */
		ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live1 - table_bytes);
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

/* y[b,t,o] = x[b,t,o] + sum_j sum_i w[o,i,j] x[b, t + j - K/2, i], zero outside. */
static void conv_position_ref(const double *x, const double *w, double *y, int B, int T, int D,
			      int K)
{
	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; t++)
			for (int o = 0; o < D; o++) {
				double s = x[(b * T + t) * D + o];
				for (int j = 0; j < K; j++) {
					int u = t + j - K / 2;
					if (u < 0 || u >= T)
						continue;
					const double *xu = x + (b * T + u) * D;
					for (int i = 0; i < D; i++)
						s += w[(o * D + i) * K + j] * xu[i];
				}
				y[(b * T + t) * D + o] = s;
			}
}

START_TEST(test_conv_position_forward)
{
	enum { B = 2, T = 5, D = 3, K = 3 };
	for (int k = 0; k < 2; k++) {
		enum tensor_dtype dt = DTYPES[k];
		struct nn_params ps;
		nn_params_init(&ps, dt, TENSOR_CPU, 19);
		struct nn_conv_position m;
		ck_assert_int_eq(nn_conv_position_init(&m, &ps, "pos_conv", D, K), TENSOR_OK);
		ck_assert_ptr_eq(m.weight, expect_param(&ps, "pos_conv.weight", 3,
							(int64_t[]){ D, D, K }, false));
		struct tensor *x = tu_rand(dt, 3, (int64_t[]){ B, T, D }, 20);
		double *vx = tu_values(x), want[B * T * D];
		/* zero weight: the identity (no tape, so the weight can be written next) */
		ag_no_grad_begin();
		tu_assert_close(nn_conv_position_forward(&m, x, NULL), vx, B * T * D, tol(dt), 0);
		ag_no_grad_end();
		ck_assert_int_eq(nn_init_normal(m.weight, 0, 0.5, 21), TENSOR_OK);
		double *w = tu_values(m.weight);
		conv_position_ref(vx, w, want, B, T, D, K);
		tu_assert_close(nn_conv_position_forward(&m, x, NULL), want, B * T * D, tol(dt),
				tol(dt));
		tu_assert_close(nn_conv_position_forward(&m, tu_strided(x), NULL), want, B * T * D,
				tol(dt), tol(dt));
		/* sequence 1's last two positions are padding: read as zeros, so its
		 * first three rows are those of the sequence cut there */
		double cut[B * T * D];
		struct tensor *mask =
		    tensor_from_data(TENSOR_I64, TENSOR_CPU, 2, (int64_t[]){ B, T },
				     (int64_t[]){ 1, 1, 1, 1, 1, 1, 1, 1, 0, 0 });
		memcpy(cut, vx, sizeof cut);
		for (int i = (T + 3) * D; i < B * T * D; i++)
			cut[i] = 0;
		conv_position_ref(cut, w, want, B, T, D, K);
		double *got = tu_values(nn_conv_position_forward(&m, x, mask));
		for (int i = 0; i < (T + 3) * D; i++)
			ck_assert_msg(fabs(got[i] - want[i]) <= tol(dt) * (1 + fabs(want[i])),
				      "row %d: %g, want %g", i / D, got[i], want[i]);
		free(got);
		conv_position_ref(vx, w, want, B, T, D, K);
		/* without gradients (an inner scope of its own): the same result, and
		 * the scopes as they were */
		ag_no_grad_begin();
		int depth = tensor_scope_depth();
		tu_assert_close(nn_conv_position_forward(&m, x, NULL), want, B * T * D, tol(dt),
				tol(dt));
		ck_assert_int_eq(tensor_scope_depth(), depth);
		ag_no_grad_end();
		free(w);
		free(vx);
		nn_conv_position_free(&m);
		ck_assert_ptr_null(m.weight);
		free_params(&ps);
	}
}
END_TEST

static struct tensor *f_conv_position(struct tensor *const *in, void *ctx)
{
	return nn_conv_position_forward(ctx, in[0], NULL);
}

START_TEST(test_conv_position_grad)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 22);
	for (int64_t K = 1; K <= 5; K += 2) {
		char name[16];
		snprintf(name, sizeof name, "conv%lld", (long long)K);
		struct nn_conv_position m;
		ck_assert_int_eq(nn_conv_position_init(&m, &ps, name, 3, K), TENSOR_OK);
		nn_init_normal(m.weight, 0, 0.5, 23 + (uint64_t)K);
		struct tensor *x = gc_input(3, (int64_t[]){ 2, 4, 3 }, 24, -1, 1, true);
		gc_assert(name, f_conv_position, &m, 2, (struct tensor *[]){ x, m.weight });
		free_grads(1, &x);
	}
	free_params(&ps);
}
END_TEST

START_TEST(test_conv_position_errors)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1);
	struct nn_conv_position m;
	tu_assert_error(nn_conv_position_init(NULL, &ps, "c", 2, 3) < 0, TENSOR_ERR_ARG,
			"nn_conv_position_init", "NULL");
	tu_assert_error(nn_conv_position_init(&m, NULL, "c", 2, 3) < 0, TENSOR_ERR_ARG,
			"nn_conv_position_init", "NULL");
	tu_assert_error(nn_conv_position_init(&m, &ps, "c", 2, 4) < 0, TENSOR_ERR_ARG,
			"nn_conv_position_init: 'c'", "kernel 4 odd");
	tu_assert_error(nn_conv_position_init(&m, &ps, "c", 2, -1) < 0, TENSOR_ERR_ARG,
			"nn_conv_position_init", "kernel -1");
	tu_assert_error(nn_conv_position_init(&m, &ps, "c", 0, 3) < 0, TENSOR_ERR_ARG,
			"nn_conv_position_init", "dim 0");
	ck_assert_ptr_null(m.weight);
	ck_assert_int_eq(ps.n, 0);
	ck_assert_int_eq(nn_conv_position_init(&m, &ps, "c", 2, 3), TENSOR_OK);
	struct nn_conv_position dup;
	tu_assert_error(nn_conv_position_init(&dup, &ps, "c", 2, 3) < 0, TENSOR_ERR_ARG, "c.weight",
			"already exists");
	struct tensor *x = tu_rand(TENSOR_F32, 3, (int64_t[]){ 2, 3, 3 }, 1);
	tu_assert_error(!nn_conv_position_forward(&m, x, NULL), TENSOR_ERR_SHAPE,
			"nn_conv_position_forward: x [2,3,3] f32", "expected [B, T, 2] f32");
	x = tu_rand(TENSOR_F32, 2, (int64_t[]){ 3, 2 }, 1);
	tu_assert_error(!nn_conv_position_forward(&m, x, NULL), TENSOR_ERR_SHAPE,
			"nn_conv_position_forward: x [3,2]", "[B, T, 2]");
	x = tu_rand(TENSOR_F64, 3, (int64_t[]){ 2, 3, 2 }, 1);
	tu_assert_error(!nn_conv_position_forward(&m, x, NULL), TENSOR_ERR_DTYPE,
			"nn_conv_position_forward: x [2,3,2] f64", "f32");
	struct tensor *mask = tensor_ones(TENSOR_I64, TENSOR_CPU, 2, (int64_t[]){ 2, 2 });
	tu_assert_error(
	    !nn_conv_position_forward(&m, tu_rand(TENSOR_F32, 3, (int64_t[]){ 2, 3, 2 }, 1), mask),
	    TENSOR_ERR_SHAPE, "nn_conv_position_forward: mask [2,2]",
	    "must be [B,T] = [2,3] (input [2,3,2]");
	ASSERT_NULL_KEEPS_ERROR(nn_conv_position_forward(&m, NULL, NULL));
	struct nn_conv_position empty = { 0 };
	tu_assert_error(!nn_conv_position_forward(&empty, x, NULL), TENSOR_ERR_ARG,
			"nn_conv_position_forward", "not initialised");
	tu_assert_error(!nn_conv_position_forward(NULL, x, NULL), TENSOR_ERR_ARG,
			"nn_conv_position_forward", NULL);
	nn_conv_position_free(&m);
	nn_conv_position_free(NULL);
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
	tcase_add_test(tc, test_conv_position_forward);
	tcase_add_test(tc, test_conv_position_grad);
	tcase_add_test(tc, test_conv_position_errors);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
