/* nn parameters: registration, names, seeds, flat packing, zero_grad,
 * train mode, and the initialisers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"
#include "testutil.h"

START_TEST(test_register_and_find)
{
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 7), TENSOR_OK);
	char name[NN_NAME_MAX];
	struct tensor *w = nn_param_new(&ps, nn_namef(name, "layers.3", "attn.%s", "q_proj.weight"),
					2, (int64_t[]){ 4, 3 }, false);
	ck_assert_str_eq(name, "layers.3.attn.q_proj.weight");
	struct tensor *b = nn_param_new(&ps, nn_name(name, "", "bias"), 1, (int64_t[]){ 4 }, true);
	ck_assert(w && b);
	ck_assert(!w->in_arena && w->requires_grad); /* heap leaves, even inside a scope */
	ck_assert_int_eq(ps.n, 2);
	ck_assert_int_eq(nn_params_count(&ps), 16);
	ck_assert_ptr_eq(nn_params_find(&ps, "bias")->value, b);
	ck_assert(nn_params_find(&ps, "bias")->no_decay);
	ck_assert_ptr_null(nn_params_find(&ps, "nope"));
	/* per-parameter seeds: deterministic, distinct */
	ck_assert(nn_param_seed(&ps, "a") == nn_param_seed(&ps, "a"));
	ck_assert(nn_param_seed(&ps, "a") != nn_param_seed(&ps, "b"));
	struct nn_params other;
	nn_params_init(&other, TENSOR_F32, TENSOR_CPU, 8);
	ck_assert(nn_param_seed(&ps, "a") != nn_param_seed(&other, "a"));
	/* errors */
	tu_assert_error(!nn_param_new(&ps, "bias", 1, (int64_t[]){ 2 }, true), TENSOR_ERR_ARG,
			"nn_param_new", "already exists");
	tu_assert_error(!nn_param_new(&ps, "", 1, (int64_t[]){ 2 }, true), TENSOR_ERR_ARG,
			"nn_param_new", "name");
	char long_name[200];
	memset(long_name, 'x', sizeof long_name - 1);
	long_name[sizeof long_name - 1] = '\0';
	tu_assert_error(!nn_name(name, long_name, "weight"), TENSOR_ERR_ARG, "longer than", NULL);
	tu_assert_error(!nn_param_new(&ps, "neg", 1, (int64_t[]){ -2 }, false), TENSOR_ERR_SHAPE,
			"[-2]", NULL);
	tu_assert_error(nn_params_init(&other, TENSOR_I32, TENSOR_CPU, 1) < 0, TENSOR_ERR_DTYPE,
			"nn_params_init", "i32");
	nn_params_free(&ps);
	ck_assert_int_eq(ps.n, 0);
}
END_TEST

START_TEST(test_pack_keeps_values_and_links_grads)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 1);
	struct tensor *a = nn_param_new(&ps, "a", 2, (int64_t[]){ 2, 3 }, false);
	struct tensor *b = nn_param_new(&ps, "b", 1, (int64_t[]){ 5 }, true);
	nn_init_normal(a, 0, 1, 11);
	nn_init_uniform(b, -1, 1, 12);
	double *va = tu_values(a), *vb = tu_values(b);
	/* a gradient that exists before packing is kept */
	tensor_scope_begin();
	ck_assert_int_eq(ag_backward(ag_sum(a, 0, NULL, false), NULL), TENSOR_OK);
	tensor_scope_end();
	ck_assert_int_eq(nn_params_pack(&ps), TENSOR_OK);
	ck_assert_ptr_nonnull(ps.flat);
	ck_assert_int_eq(tensor_numel(ps.flat), 11);
	ck_assert_ptr_eq(a->storage, ps.flat->storage);
	ck_assert_ptr_eq(b->storage, ps.flat->storage);
	ck_assert_uint_eq(b->offset, ps.flat->offset + 6);
	tu_assert_close(a, va, 6, 0, 0);
	tu_assert_close(b, vb, 5, 0, 0);
	ck_assert_ptr_eq(a->grad->storage, ps.flat_grad->storage);
	double ones[6] = { 1, 1, 1, 1, 1, 1 };
	tu_assert_close(a->grad, ones, 6, 0, 0);
	/* backward accumulates into the flat gradient buffer */
	tensor_scope_begin();
	struct tensor *loss = ag_sum(ag_mul_scalar(b, 3), 0, NULL, false);
	ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
	tensor_scope_end();
	double *flat = tu_values(ps.flat_grad);
	for (int i = 0; i < 11; i++)
		ck_assert(flat[i] == (i < 6 ? 1 : 3));
	free(flat);
	ck_assert_int_eq(nn_params_zero_grad(&ps), TENSOR_OK);
	double zeros[11] = { 0 };
	tu_assert_close(ps.flat_grad, zeros, 11, 0, 0);
	/* packing twice is a no-op; adding after packing is refused */
	ck_assert_int_eq(nn_params_pack(&ps), TENSOR_OK);
	tu_assert_error(!nn_param_new(&ps, "late", 1, (int64_t[]){ 1 }, false), TENSOR_ERR_STATE,
			"late", "after nn_params_pack");
	free(va);
	free(vb);
	nn_params_free(&ps);
}
END_TEST

/* The flat buffer holds the parameters with weight decay first, then those
 * without, lazy ones last, each group in list order, values kept; an AdamW step
 * on it equals the step on the list unpacked (the segments follow the buffer). */
START_TEST(test_pack_groups_by_decay)
{
	static const char *const names[] = { "w1", "b1", "e", "w2", "n" };
	static const bool no_decay[] = { false, true, true, false, true };
	static const int64_t numel[] = { 6, 2, 6, 4, 1 };
	static const int want_order[] = { 0, 3, 1, 4, 2 };
	static const int64_t want_off[] = { 0, 10, 13, 6, 12 };
	struct nn_params ps[2];
	struct nn_adamw o[2];
	for (int j = 0; j < 2; j++) {
		nn_params_init(&ps[j], TENSOR_F64, TENSOR_CPU, 3);
		for (int i = 0; i < 5; i++)
			nn_init_normal(nn_param_new(&ps[j], names[i], 1, &numel[i], no_decay[i]), 0,
				       1, (uint64_t)i + 1);
		ck_assert_int_eq(nn_params_set_lazy(&ps[j], "e", true), 1); /* parameters marked */
	}
	double *before = tu_values(ps[1].items[2].value);
	ck_assert_int_eq(nn_params_pack(&ps[1]), TENSOR_OK);
	for (int k = 0; k < 5; k++) {
		ck_assert_int_eq(ps[1].flat_order[k], want_order[k]);
		ck_assert_uint_eq(ps[1].items[k].value->offset, ps[1].flat->offset + want_off[k]);
		ck_assert_uint_eq(ps[1].items[k].value->grad->offset,
				  ps[1].flat_grad->offset + want_off[k]);
	}
	tu_assert_close(ps[1].items[2].value, before, 6, 0, 0);
	free(before);
	for (int j = 0; j < 2; j++)
		ck_assert_int_eq(nn_adamw_init(&o[j], &ps[j], 0.1, 0.9, 0.99, 1e-8, 0.5),
				 TENSOR_OK);
	for (int step = 0; step < 2; step++)
		for (int j = 0; j < 2; j++) {
			tensor_scope_begin();
			struct tensor *loss = NULL;
			for (int i = 0; i < 5; i++) {
				struct tensor *v = ps[j].items[i].value;
				struct tensor *t = ag_sum(ag_mul(v, v), 0, NULL, false);
				loss = loss ? ag_add(loss, ag_mul_scalar(t, i + 1)) : t;
			}
			ck_assert_int_eq(nn_params_zero_grad(&ps[j]), TENSOR_OK);
			ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
			tensor_scope_end();
			ck_assert_int_eq(nn_adamw_step(&o[j]), TENSOR_OK);
		}
	for (int i = 0; i < 5; i++) {
		double *want = tu_values(ps[0].items[i].value);
		tu_assert_close(ps[1].items[i].value, want, numel[i], 0, 0);
		free(want);
	}
	for (int j = 0; j < 2; j++) {
		nn_adamw_free(&o[j]);
		nn_params_free(&ps[j]);
	}
}
END_TEST

START_TEST(test_pack_no_leak)
{
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK); /* leave the fixture scope */
	size_t live0 = tensor_mem_stats(TENSOR_CPU).live_bytes;
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1);
	nn_param_new(&ps, "w", 2, (int64_t[]){ 8, 8 }, false);
	nn_param_new(&ps, "b", 1, (int64_t[]){ 8 }, true);
	ck_assert_int_eq(nn_params_pack(&ps), TENSOR_OK);
	/* the flat value and gradient buffers only: old storage was released */
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live0 + 2 * 72 * sizeof(float));
	nn_params_free(&ps);
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live0);
	tensor_scope_begin();
}
END_TEST

/* A model written with nn modules is freed by nn_params_free alone, after a training
 * step (gradients, a sinusoidal table kept by ps); nn_params_keep's errors. */
struct tiny_model {
	struct nn_params ps;
	struct nn_embedding embed;
	struct nn_position pos;
	struct nn_layer_norm norm;
	struct nn_linear out;
};

START_TEST(test_model_freed_in_one_call)
{
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK); /* leave the fixture scope */
	size_t live0 = tensor_mem_stats(TENSOR_CPU).live_bytes;
	int64_t heap0 = tensor_heap_tensors();
	struct tiny_model m;
	ck_assert_int_eq(nn_params_init(&m.ps, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	ck_assert_int_eq(nn_embedding_init(&m.embed, &m.ps, "embed", 10, 8, -1), TENSOR_OK);
	ck_assert_int_eq(nn_position_init(&m.pos, &m.ps, "pos", 6, 8, false), TENSOR_OK);
	ck_assert_int_eq(nn_layer_norm_init(&m.norm, &m.ps, "norm", 8, 1e-5), TENSOR_OK);
	ck_assert_int_eq(nn_linear_init(&m.out, &m.ps, "out", 8, 3, true), TENSOR_OK);
	ck_assert_int_eq(m.ps.nkept, 1); /* the sinusoidal table */
	tensor_scope_begin();		 /* a training step */
	struct tensor *ids = tensor_from_data(TENSOR_I64, TENSOR_CPU, 2, (int64_t[]){ 1, 4 },
					      (int64_t[]){ 1, 2, 3, 4 });
	struct tensor *h = nn_position_forward(&m.pos, nn_embedding_forward(&m.embed, ids));
	struct tensor *y = nn_linear_forward(&m.out, nn_layer_norm_forward(&m.norm, h));
	ck_assert_int_eq(ag_backward(ag_sum(y, 0, NULL, false), NULL), TENSOR_OK);
	ck_assert_ptr_nonnull(m.out.weight->grad);
	tensor_scope_end();
	ck_assert(tensor_heap_tensors() > heap0);
	nn_params_free(&m.ps);
	ck_assert_int_eq(tensor_heap_tensors(), heap0);
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live0);
	tensor_scope_begin();
	/* errors: the tensor stays the caller's */
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	struct tensor *scoped = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, (int64_t[]){ 2 });
	tu_assert_error(nn_params_keep(&ps, scoped) < 0, TENSOR_ERR_ARG, "nn_params_keep",
			"made in a scope");
	tu_assert_error(nn_params_keep(&ps, NULL) < 0, TENSOR_ERR_ARG, "nn_params_keep", "NULL");
	tu_assert_error(nn_params_keep(NULL, scoped) < 0, TENSOR_ERR_ARG, "nn_params_keep",
			"ps is NULL");
	tensor_heap_begin();
	struct tensor *table = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, (int64_t[]){ 2 });
	tensor_heap_end();
	ck_assert_int_eq(nn_params_keep(&ps, table), TENSOR_OK);
	nn_params_free(&ps);
	ck_assert_int_eq(tensor_heap_tensors(), heap0);
}
END_TEST

START_TEST(test_train_mode_and_seeds)
{
	struct nn_params ps;
	nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 5);
	ck_assert(ps.training);
	nn_params_train(&ps, false);
	ck_assert(!ps.training);
	uint64_t s1 = nn_params_next_seed(&ps), s2 = nn_params_next_seed(&ps);
	ck_assert(s1 != s2);
	ck_assert_int_eq(ps.rng_counter, 2);
	ps.rng_counter = 0; /* restoring the counter reproduces the draws */
	ck_assert(nn_params_next_seed(&ps) == s1);
	nn_params_free(&ps);
}
END_TEST

START_TEST(test_rebase_errors)
{
	const int64_t s4[] = { 4 }, s2[] = { 2 };
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK);
	struct tensor *base = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, s4);
	struct tensor *t = tensor_ones(TENSOR_F32, TENSOR_CPU, 1, s2);
	struct tensor *d = tensor_ones(TENSOR_F64, TENSOR_CPU, 1, s2);
	tu_assert_error(tensor_rebase_(t, base, 3) < 0, TENSOR_ERR_SHAPE, "rebase_", "offset 3");
	tu_assert_error(tensor_rebase_(d, base, 0) < 0, TENSOR_ERR_ARG, "rebase_", "f64");
	ck_assert_int_eq(tensor_rebase_(t, base, 1), TENSOR_OK);
	ck_assert(tensor_get(base, (int64_t[]){ 1 }) == 1 &&
		  tensor_get(base, (int64_t[]){ 3 }) == 0);
	tensor_free(base); /* t keeps the storage alive */
	ck_assert(tensor_get(t, (int64_t[]){ 1 }) == 1);
	tensor_free(t);
	tensor_free(d);
	tensor_scope_begin();
}
END_TEST

/* mean and standard deviation of t's values */
static void moments(const struct tensor *t, double *mean, double *sd)
{
	double *v = tu_values(t), s = 0, q = 0;
	int64_t n = tensor_numel(t);
	for (int64_t i = 0; i < n; i++)
		s += v[i];
	*mean = s / (double)n;
	for (int64_t i = 0; i < n; i++)
		q += (v[i] - *mean) * (v[i] - *mean);
	*sd = sqrt(q / (double)n);
	free(v);
}

static double max_abs(const struct tensor *t)
{
	double *v = tu_values(t), m = 0;
	for (int64_t i = 0; i < tensor_numel(t); i++)
		m = fmax(m, fabs(v[i]));
	free(v);
	return m;
}

START_TEST(test_initialisers)
{
	const int64_t shape[] = { 200, 100, 3 }; /* fan_in 300, fan_out 600 */
	struct tensor *t = tensor_zeros(TENSOR_F64, TENSOR_CPU, 3, shape);
	double mean, sd, a;
	ck_assert_int_eq(nn_init_xavier_uniform(t, 1.0, 1), TENSOR_OK);
	a = sqrt(6.0 / 900);
	moments(t, &mean, &sd);
	ck_assert(max_abs(t) <= a && max_abs(t) > 0.99 * a);
	ck_assert(fabs(sd - a / sqrt(3)) < 0.01 * a);
	ck_assert_int_eq(nn_init_xavier_normal(t, 2.0, 2), TENSOR_OK);
	moments(t, &mean, &sd);
	ck_assert(fabs(sd - 2 * sqrt(2.0 / 900)) < 0.01 * sd && fabs(mean) < 0.01 * sd);
	ck_assert_int_eq(nn_init_kaiming_normal(t, 0, true, 3), TENSOR_OK);
	moments(t, &mean, &sd);
	ck_assert(fabs(sd - sqrt(2.0 / 300)) < 0.01 * sd);
	ck_assert_int_eq(nn_init_kaiming_uniform(t, sqrt(5.0), false, 4), TENSOR_OK);
	a = sqrt(2.0 / 6) * sqrt(3.0 / 600); /* gain sqrt(2/(1+5)), fan_out */
	ck_assert(max_abs(t) <= a && max_abs(t) > 0.99 * a);
	ck_assert_int_eq(nn_init_normal(t, 3, 0.5, 5), TENSOR_OK);
	moments(t, &mean, &sd);
	ck_assert(fabs(mean - 3) < 0.01 && fabs(sd - 0.5) < 0.01);
	ck_assert_int_eq(nn_init_ones(t), TENSOR_OK);
	moments(t, &mean, &sd);
	ck_assert(mean == 1 && sd == 0);
	ck_assert_int_eq(nn_init_zeros(t), TENSOR_OK);
	ck_assert(max_abs(t) == 0);
	/* same seed, same values */
	struct tensor *u = tensor_zeros(TENSOR_F64, TENSOR_CPU, 3, shape);
	nn_init_uniform(t, -1, 1, 9);
	nn_init_uniform(u, -1, 1, 9);
	double *vt = tu_values(t), *vu = tu_values(u);
	ck_assert_mem_eq(vt, vu, sizeof(double) * 60000);
	free(vt);
	free(vu);
	/* errors */
	struct tensor *v1 = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, (int64_t[]){ 5 });
	tu_assert_error(nn_init_xavier_uniform(v1, 1, 1) < 0, TENSOR_ERR_SHAPE,
			"nn_init_xavier_uniform", "[5]");
	struct tensor *ints = tensor_zeros(TENSOR_I32, TENSOR_CPU, 2, (int64_t[]){ 2, 2 });
	tu_assert_error(nn_init_kaiming_normal(ints, 0, true, 1) < 0, TENSOR_ERR_DTYPE,
			"nn_init_kaiming_normal", "i32");
	tu_assert_error(nn_init_normal(v1, 0, -1, 1) < 0, TENSOR_ERR_ARG, "std >= 0", NULL);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("nn_params");
	TCase *tc = tu_tcase("params");
	tcase_add_test(tc, test_register_and_find);
	tcase_add_test(tc, test_pack_keeps_values_and_links_grads);
	tcase_add_test(tc, test_pack_groups_by_decay);
	tcase_add_test(tc, test_pack_no_leak);
	tcase_add_test(tc, test_model_freed_in_one_call);
	tcase_add_test(tc, test_train_mode_and_seeds);
	tcase_add_test(tc, test_rebase_errors);
	tcase_add_test(tc, test_initialisers);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
