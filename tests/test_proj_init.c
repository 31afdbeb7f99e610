/* The window initialisation of learned Linformer projections
 * (nn_seq_proj_init_windows) and its use by the models: exact window means,
 * equality with the mean-pooling projection, uneven windows, the noise term,
 * per-head weights, errors that change nothing, and the encoder's default
 * against xavier_projections. */
#include <math.h>
#include <stdlib.h>

#include "models.h"
#include "nn.h"
#include "testutil.h"

/* A learned projection n -> k ([heads,] k, n) of f64 parameters in ps. */
static void linear_proj(struct nn_params *ps, struct nn_seq_proj *p, int64_t n, int64_t k,
			int64_t heads, bool per_head)
{
	ck_assert_int_eq(nn_params_init(ps, TENSOR_F64, TENSOR_CPU, 7), TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(p, ps, "E", NN_ATTN_LINEAR, n, k, heads, per_head, 0, false),
	    TENSOR_OK);
}

/* The window weight of position j in slot r: 1/|window| iff j k / n == r. */
static double window(int64_t r, int64_t j, int64_t n, int64_t k)
{
	int64_t size = 0;
	for (int64_t i = 0; i < n; i++)
		size += i * k / n == r;
	return j * k / n == r ? 1.0 / (double)size : 0.0;
}

START_TEST(test_exact_windows)
{
	/* n = 12 -> 4 (windows of 3) and n = 10 -> 4 (windows of 3, 2, 3, 2) */
	const int64_t ns[2] = { 12, 10 };
	for (int c = 0; c < 2; c++) {
		int64_t n = ns[c], k = 4;
		struct nn_params ps;
		struct nn_seq_proj p;
		linear_proj(&ps, &p, n, k, 1, false);
		ck_assert_int_eq(nn_seq_proj_init_windows(&p, 0.0), TENSOR_OK);
		double *w = tu_values(p.weight);
		for (int64_t r = 0; r < k; r++) {
			double sum = 0;
			for (int64_t j = 0; j < n; j++) {
				ck_assert_double_eq_tol(w[r * n + j], window(r, j, n, k), 1e-15);
				sum += w[r * n + j];
			}
			ck_assert_double_eq_tol(sum, 1.0, 1e-15);
		}
		/* every position feeds exactly one slot */
		for (int64_t j = 0; j < n; j++) {
			int slots = 0;
			for (int64_t r = 0; r < k; r++)
				slots += w[r * n + j] != 0;
			ck_assert_int_eq(slots, 1);
		}
		free(w);
		nn_seq_proj_free(&p);
		nn_params_free(&ps);
	}
}
END_TEST

START_TEST(test_equals_mean_pooling)
{
	struct nn_params ps;
	struct nn_seq_proj lin, mean;
	linear_proj(&ps, &lin, 12, 4, 1, false);
	ck_assert_int_eq(nn_seq_proj_init(&mean, &ps, "M", NN_ATTN_MEAN, 12, 4, 1, false, 0, false),
			 TENSOR_OK);
	ck_assert_int_eq(nn_seq_proj_init_windows(&lin, 0.0), TENSOR_OK);
	tensor_scope_begin();
	struct tensor *x = tu_rand(TENSOR_F64, 4, (int64_t[]){ 2, 3, 12, 5 }, 11);
	struct tensor *a = nn_seq_proj_forward(&lin, x), *b = nn_seq_proj_forward(&mean, x);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	tu_assert_shape(a, 4, (int64_t[]){ 2, 3, 4, 5 });
	double *want = tu_values(b);
	tu_assert_close(a, want, tensor_numel(b), 1e-14, 1e-12);
	free(want);
	tensor_scope_end();
	nn_seq_proj_free(&lin);
	nn_seq_proj_free(&mean);
	nn_params_free(&ps);
}
END_TEST

START_TEST(test_noise_and_heads)
{
	int64_t n = 8, k = 2, heads = 3;
	struct nn_params ps;
	struct nn_seq_proj p;
	linear_proj(&ps, &p, n, k, heads, true);
	tu_assert_shape(p.weight, 3, (int64_t[]){ heads, k, n });
	double *before = tu_values(p.weight);
	ck_assert_int_eq(nn_seq_proj_init_windows(&p, 0.5), TENSOR_OK);
	double *after = tu_values(p.weight);
	for (int64_t i = 0; i < heads * k * n; i++) {
		int64_t r = i / n % k, j = i % n;
		ck_assert_double_eq_tol(after[i], 0.5 * before[i] + window(r, j, n, k), 1e-15);
	}
	free(before);
	free(after);
	nn_seq_proj_free(&p);
	nn_params_free(&ps);
}
END_TEST

START_TEST(test_errors_change_nothing)
{
	struct nn_params ps;
	struct nn_seq_proj p, conv;
	linear_proj(&ps, &p, 8, 2, 1, false);
	ck_assert_int_eq(nn_seq_proj_init(&conv, &ps, "C", NN_ATTN_CONV, 8, 2, 1, false, 3, false),
			 TENSOR_OK);
	double *before = tu_values(p.weight);
	int rc = nn_seq_proj_init_windows(&p, -1.0);
	tu_assert_error(rc < 0, TENSOR_ERR_ARG, "nn_seq_proj_init_windows", "noise -1 < 0");
	rc = nn_seq_proj_init_windows(&conv, 0.1);
	tu_assert_error(rc < 0, TENSOR_ERR_ARG, "nn_seq_proj_init_windows", "learned (linear)");
	rc = nn_seq_proj_init_windows(NULL, 0.1);
	tu_assert_error(rc < 0, TENSOR_ERR_ARG, "nn_seq_proj_init_windows", "learned (linear)");
	double *after = tu_values(p.weight);
	for (int64_t i = 0; i < 16; i++)
		ck_assert_double_eq(after[i], before[i]);
	free(before);
	free(after);
	nn_seq_proj_free(&p);
	nn_seq_proj_free(&conv);
	nn_params_free(&ps);
}
END_TEST

/* The E weight of layer 0 of a Linformer encoder with the given sharing. */
static double *encoder_e(enum nn_proj_sharing sharing, bool xavier, int64_t *len)
{
	struct model_config c;
	ck_assert_int_eq(model_config_preset(&c, "linformer", 50, 16), TENSOR_OK);
	c.dim = 8;
	c.heads = 2;
	c.layers = 2;
	c.ff_hidden = 16;
	c.k_first = c.k_last = 4;
	c.sharing = sharing;
	c.xavier_projections = xavier;
	struct nn_params ps;
	struct model_encoder m;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, c.seed), TENSOR_OK);
	ck_assert_msg(model_encoder_init(&m, &ps, &c) == TENSOR_OK, "%s", tensor_last_error());
	const struct nn_seq_proj *e = m.layers[0].lin.e_used;
	*len = tensor_numel(e->weight);
	double *w = tu_values(e->weight);
	model_encoder_free(&m);
	nn_params_free(&ps);
	return w;
}

START_TEST(test_encoder_default)
{
	const enum nn_proj_sharing modes[3] = { NN_SHARE_HEADWISE, NN_SHARE_NONE,
						NN_SHARE_LAYERWISE };
	for (int s = 0; s < 3; s++) {
		int64_t len, len2;
		double *xavier = encoder_e(modes[s], true, &len);
		double *windows = encoder_e(modes[s], false, &len2);
		ck_assert_int_eq(len, len2);
		for (int64_t i = 0; i < len; i++) {
			int64_t r = i / 16 % 4, j = i % 16;
			ck_assert_double_eq_tol(
			    windows[i], MODEL_PROJ_INIT_NOISE * xavier[i] + window(r, j, 16, 4),
			    1e-15);
		}
		free(xavier);
		free(windows);
	}
	/* the choice survives the config JSON */
	struct model_config c, back;
	ck_assert_int_eq(model_config_preset(&c, "linformer", 50, 16), TENSOR_OK);
	c.xavier_projections = true;
	char *json = model_config_to_json(&c);
	ck_assert_ptr_nonnull(json);
	ck_assert_int_eq(model_config_from_json(&back, json), TENSOR_OK);
	ck_assert(back.xavier_projections);
	free(json);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("proj_init");
	TCase *tc = tu_tcase("windows");
	tcase_add_test(tc, test_exact_windows);
	tcase_add_test(tc, test_equals_mean_pooling);
	tcase_add_test(tc, test_noise_and_heads);
	tcase_add_test(tc, test_errors_change_nothing);
	tcase_add_test(tc, test_encoder_default);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
