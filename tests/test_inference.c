/* No-grad inference in row blocks: the Linformer's two halves (keys and
 * values, then any rows of queries) against its forward; the encoder's
 * blocked layers against the grad-mode forward (several row blocks, blocks of
 * whole sequences, padding, post-norm, conv projections, a Transformer layer
 * before, the outermost scope); positions added in place; the peak per
 * sequence; the errors; the
 * blocks' probabilities as an attention observer sees them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "models_common.h"
#include "nn_internal.h"

/* ---- nn_linformer_keys_values / nn_linformer_attend ----------------------------- */

static void linformer(struct nn_linformer *m, struct nn_params *ps, enum nn_attn_kind kind)
{
	ck_assert_int_eq(nn_params_init(ps, TENSOR_F64, TENSOR_CPU, 3), TENSOR_OK);
	ck_assert_int_eq(nn_linformer_init(m, ps, "attn", 8, 2, 12, 4, kind, NN_SHARE_HEADWISE,
					   false, false, 0, NULL),
			 TENSOR_OK);
}

/* Attending row by row, sequence by sequence, gives the forward's rows. */
START_TEST(test_attend_rows_equal_forward)
{
	const enum nn_attn_kind kinds[2] = { NN_ATTN_LINEAR, NN_ATTN_CONV };
	for (int i = 0; i < 2; i++) {
		struct nn_params ps;
		struct nn_linformer m;
		linformer(&m, &ps, kinds[i]);
		struct tensor *x = tu_rand(TENSOR_F64, 3, (int64_t[]){ 3, 12, 8 }, 5);
		struct tensor *mask = tensor_ones(TENSOR_F64, TENSOR_CPU, 2, (int64_t[]){ 3, 12 });
		ck_assert_int_eq(tensor_fill_(tensor_narrow(mask, 1, 9, 3), 0), TENSOR_OK);
		struct tensor *want = ag_detach(nn_linformer_forward(&m, x, mask));
		struct nn_linformer_kv kv;
		ck_assert_int_eq(nn_linformer_keys_values(&m, x, mask, &kv), TENSOR_OK);
		ck_assert((kv.mask != NULL) == (kinds[i] == NN_ATTN_CONV));
		for (int64_t b = 0; b < 3; b++)
			for (int64_t r = 0; r < 12; r += 5) {
				int64_t nr = 12 - r < 5 ? 12 - r : 5;
				struct tensor *rows =
				    tensor_narrow(tensor_narrow(x, 0, b, 1), 1, r, nr);
				struct tensor *got = nn_linformer_attend(&m, rows, &kv, b);
				struct tensor *ref =
				    tensor_narrow(tensor_narrow(want, 0, b, 1), 1, r, nr);
				tu_assert_same(got, ref, 1e-12);
			}
		/* sequences 1..2 at once */
		tu_assert_same(nn_linformer_attend(&m, tensor_narrow(x, 0, 1, 2), &kv, 1),
			       tensor_narrow(want, 0, 1, 2), 1e-12);
		nn_linformer_free(&m);
		nn_params_free(&ps);
	}
}
END_TEST

START_TEST(test_attend_errors)
{
	struct nn_params ps;
	struct nn_linformer m;
	linformer(&m, &ps, NN_ATTN_LINEAR);
	struct tensor *x = tu_rand(TENSOR_F64, 3, (int64_t[]){ 2, 12, 8 }, 6);
	struct nn_linformer_kv kv;
	ck_assert_int_eq(nn_linformer_keys_values(&m, x, NULL, &kv), TENSOR_OK);
	ck_assert(nn_linformer_attend(&m, tensor_narrow(x, 0, 1, 1), &kv, 1) != NULL);
	tu_assert_error(!nn_linformer_attend(&m, x, &kv, 1), TENSOR_ERR_SHAPE,
			"nn_linformer_attend", "[2,12,8]");
	tu_assert_error(!nn_linformer_attend(&m, x, &kv, -1), TENSOR_ERR_SHAPE,
			"nn_linformer_attend", NULL);
	tu_assert_error(
	    !nn_linformer_attend(&m, tu_rand(TENSOR_F64, 2, (int64_t[]){ 12, 8 }, 7), &kv, 0),
	    TENSOR_ERR_SHAPE, "nn_linformer_attend", "[12,8]");
	tu_assert_error(!nn_linformer_attend(&m, x, &(struct nn_linformer_kv){ 0 }, 0),
			TENSOR_ERR_ARG, "nn_linformer_attend", "keys");
	ck_assert(!nn_linformer_attend(&m, NULL, &kv, 0));
	struct nn_linformer_kv none;
	tu_assert_error(nn_linformer_keys_values(&m, tensor_narrow(x, 2, 0, 4), NULL, &none) < 0,
			TENSOR_ERR_SHAPE, "nn_linformer_forward", "[2,12,4]");
	ck_assert(!none.k && !none.v && !none.mask);
	nn_linformer_free(&m);
	nn_params_free(&ps);
}
END_TEST

/* nn_position_forward_reuse: the values of nn_position_forward; without
 * gradients in x's own buffer (x itself comes back), with them a new node;
 * the errors of the forward. */
START_TEST(test_position_reuse)
{
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 2), TENSOR_OK);
	struct nn_position pos;
	ck_assert_int_eq(nn_position_init(&pos, &ps, "pos", 6, 4, true), TENSOR_OK);
	const int64_t s[] = { 2, 5, 4 };
	struct tensor *x = tu_rand(TENSOR_F64, 3, s, 8);
	struct tensor *want = nn_position_forward(&pos, x);
	ag_no_grad_begin();
	struct tensor *y = nn_position_forward_reuse(&pos, tensor_clone(x));
	ag_no_grad_end();
	tu_assert_same(y, want, 0);
	struct tensor *x2 = tensor_clone(x);
	ag_no_grad_begin();
	ck_assert_ptr_eq(nn_position_forward_reuse(&pos, x2), x2);
	ag_no_grad_end();
	struct tensor *g = nn_position_forward_reuse(&pos, ag_mul_scalar(x, 1));
	ck_assert(g != NULL && g->requires_grad); /* the table is a parameter */
	tu_assert_same(g, want, 0);
	ag_tape_reset();
	struct tensor *too_long = tu_rand(TENSOR_F64, 3, (int64_t[]){ 1, 7, 4 }, 9);
	ag_no_grad_begin();
	tu_assert_error(!nn_position_forward_reuse(&pos, too_long), TENSOR_ERR_SHAPE,
			"nn_position_forward", "max_len 6");
	ag_no_grad_end();
	nn_position_free(&pos);
	nn_params_free(&ps);
}
END_TEST

/* ---- the encoder without gradients -------------------------------------------------- */

/* A small classifier config of pattern (or preset) at n, dim 16, k 16. */
static struct model_config small(const char *pattern, int64_t n)
{
	struct model_config c;
	ck_assert_int_eq(model_config_preset(&c, pattern, 50, n), TENSOR_OK);
	c.dim = 16;
	c.heads = 2;
	c.ff_hidden = 32;
	c.k_first = c.k_last = 16;
	c.head_hidden = 8;
	c.num_classes = 3;
	c.dropout = c.attn_dropout = 0.1; /* off in eval mode */
	c.seed = 4;
	return c;
}

/* The encoder's hidden states without gradients (blocked layers) and with
 * (the plain forward) agree. */
static void check_blocked(struct model_config c, int64_t B, int64_t T, bool padded)
{
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 2), TENSOR_OK);
	nn_params_train(&ps, false);
	struct model_encoder m;
	ck_assert_msg(model_encoder_init(&m, &ps, &c) == TENSOR_OK, "%s", tensor_last_error());
	int64_t len[8];
	for (int64_t b = 0; b < B; b++)
		len[b] = padded ? T - (b * 37) % (T / 2) : T;
	struct tensor *ids = rand_ids(B, T, 50, (uint64_t)T), *mask = prefix_mask(B, T, len);
	struct tensor *want = model_encoder_forward(&m, ids, padded ? mask : NULL);
	ag_tape_reset();
	ag_no_grad_begin();
	struct tensor *got = model_encoder_forward(&m, ids, padded ? mask : NULL);
	ag_no_grad_end();
	ck_assert_msg(got != NULL, "%s", tensor_last_error());
	tu_assert_same(got, want, 2e-5);
	model_encoder_free(&m);
	drop_params(&ps);
}

START_TEST(test_encoder_blocks_equal_plain)
{
	/* 2500 rows: blocks of 1024, 1024 and 452 rows of each sequence */
	check_blocked(small("linformer:2", 2500), 2, 2500, false);
	check_blocked(small("linformer:2", 2500), 2, 2500, true);
	/* 300 rows: blocks of 3 whole sequences, then 2 */
	check_blocked(small("conv-linformer:2", 320), 5, 300, true);
	struct model_config post = small("linformer:2", 1200);
	post.pre_norm = false;
	check_blocked(post, 2, 1200, true);
	/* a Transformer layer runs apart, the Linformer layer after it in place */
	check_blocked(small("SL", 1100), 2, 1100, true);
}
END_TEST

/* With no scope open the forwards refuse (TENSOR_ERR_STATE); in the outermost
 * scope the result lives in it and nothing stays once it ends (LeakSanitizer
 * checks); with dropout on (training mode) the layers run unblocked. */
START_TEST(test_encoder_blocks_outside_scopes)
{
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK); /* leave the fixture's scope */
	struct model_config c = small("linformer:2", 1100);
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 2), TENSOR_OK);
	struct model_classifier m;
	ck_assert_int_eq(model_classifier_init(&m, &ps, &c), TENSOR_OK);
	struct tensor *ids = rand_ids(2, 1100, 50, 3);
	size_t live = tensor_mem_stats(TENSOR_CPU).live_bytes;
	ag_no_grad_begin();
	for (int training = 0; training < 2; training++) {
		nn_params_train(&ps, training);
		tu_assert_error(!model_encoder_forward(&m.enc, ids, NULL), TENSOR_ERR_STATE,
				"model_encoder_forward", "outside a scope");
		tu_assert_error(!model_classifier_forward(&m, ids, NULL), TENSOR_ERR_STATE,
				"model_classifier_forward", "outside a scope");
		ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live);
		tensor_scope_begin();
		struct tensor *h = model_encoder_forward(&m.enc, ids, NULL);
		struct tensor *y = model_classifier_forward(&m, ids, NULL);
		ck_assert_msg(h && y && h->in_arena && y->in_arena, "%s", tensor_last_error());
		tu_assert_shape(h, 3, (int64_t[]){ 2, 1100, 16 });
		ck_assert_int_eq(tensor_scope_end(), TENSOR_OK);
		ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live);
	}
	ag_no_grad_end();
	tensor_free(ids);
	model_classifier_free(&m);
	nn_params_free(&ps);
	tensor_mem_trim();
	tensor_scope_begin(); /* for the fixture's teardown */
}
END_TEST

/* Per sequence, the blocked Linformer's peak grows by about the residual
 * stream and one normalised copy (2 x T x dim floats), not by a layer's
 * working set. */
START_TEST(test_encoder_blocks_peak_per_sequence)
{
	const int64_t T = 2048, dim = 16;
	struct model_config c = small("linformer:2", T);
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 2), TENSOR_OK);
	nn_params_train(&ps, false);
	struct model_classifier m;
	ck_assert_int_eq(model_classifier_init(&m, &ps, &c), TENSOR_OK);
	size_t peak[2];
	ag_no_grad_begin();
	for (int i = 0; i < 2; i++) {
		struct tensor *ids = rand_ids(2 + 4 * i, T, 50, 5);
		tensor_scope_begin();
		size_t base = tensor_mem_stats(TENSOR_CPU).live_bytes;
		tensor_mem_reset_peak(TENSOR_CPU);
		ck_assert(model_classifier_forward(&m, ids, NULL) != NULL);
		peak[i] = tensor_mem_stats(TENSOR_CPU).peak_bytes - base;
		tensor_scope_end();
		tensor_free(ids);
	}
	ag_no_grad_end();
	double per_seq = (double)(peak[1] - peak[0]) / 4, stream = (double)(T * dim * 4);
	printf("blocked linformer n %lld dim %lld: peak %zu (2 seqs), %zu (6 seqs): %.2f x "
	       "T x dim floats per sequence\n",
	       (long long)T, (long long)dim, peak[0], peak[1], per_seq / stream);
	ck_assert_msg(per_seq <= 2.5 * stream, "%.0f bytes per sequence, stream %.0f", per_seq,
		      stream);
	model_classifier_free(&m);
	drop_params(&ps);
}
END_TEST

/* What an attention observer sees of one sequence: each call's rows of P,
 * appended per layer as [calls' rows][heads][keys] floats. */
struct seen {
	int64_t calls, rows;
	float *p; /* room for 2 layers of [1, 2, T, 16] */
	size_t used;
};

static int record(void *ctx, const struct tensor *p)
{
	struct seen *s = ctx;
	size_t n = (size_t)tensor_numel(p);
	s->calls++;
	s->rows += p->shape[2];
	struct tensor *rows_first = tensor_contiguous(tensor_transpose(p, 1, 2));
	int rc = rows_first ? tensor_to_host(rows_first, s->p + s->used, n * sizeof *s->p)
			    : tensor_last_status();
	s->used += n;
	return rc;
}

/* A projected layer run in blocks of query rows without gradients hands the
 * observer its P in order, a block a call: the blocks' rows joined are the
 * taped forward's P (one call a layer), as tools/attention_spectrum assumes. */
START_TEST(test_encoder_blocks_observed)
{
	const int64_t T = 2500, per_layer = 2 * T * 16;
	struct model_config c = small("linformer:2", T);
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 2), TENSOR_OK);
	nn_params_train(&ps, false);
	struct model_encoder m;
	ck_assert_int_eq(model_encoder_init(&m, &ps, &c), TENSOR_OK);
	struct tensor *ids = rand_ids(1, T, 50, 6);
	struct seen taped = { .p = malloc(sizeof(float) * 2 * per_layer) },
		    blocked = { .p = malloc(sizeof(float) * 2 * per_layer) };
	ck_assert(taped.p && blocked.p);
	nn_set_attention_observer(record, &taped);
	ck_assert(model_encoder_forward(&m, ids, NULL) != NULL);
	ag_tape_reset();
	nn_set_attention_observer(record, &blocked);
	ag_no_grad_begin();
	ck_assert(model_encoder_forward(&m, ids, NULL) != NULL);
	ag_no_grad_end();
	nn_set_attention_observer(NULL, NULL);
	ck_assert_int_eq(taped.calls, 2);
	ck_assert_int_eq(blocked.calls, 6); /* 1024, 1024 and 452 rows a layer */
	ck_assert_int_eq(taped.rows, 2 * T);
	ck_assert_int_eq(blocked.rows, 2 * T);
	ck_assert_uint_eq(blocked.used, (size_t)(2 * per_layer));
	double worst = 0;
	for (int64_t i = 0; i < 2 * per_layer; i++) {
		double d = fabs((double)taped.p[i] - blocked.p[i]);
		worst = d > worst ? d : worst;
	}
	ck_assert_msg(worst < 1e-6, "blocked P differs from the taped P by %g", worst);
	free(taped.p);
	free(blocked.p);
	tensor_free(ids);
	model_encoder_free(&m);
	drop_params(&ps);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("inference");
	TCase *tc = tu_tcase("linformer halves");
	tcase_add_test(tc, test_attend_rows_equal_forward);
	tcase_add_test(tc, test_attend_errors);
	tcase_add_test(tc, test_position_reuse);
	suite_add_tcase(s, tc);
	tc = tu_tcase("encoder blocks");
	tcase_add_test(tc, test_encoder_blocks_equal_plain);
	tcase_add_test(tc, test_encoder_blocks_outside_scopes);
	tcase_add_test(tc, test_encoder_blocks_peak_per_sequence);
	tcase_add_test(tc, test_encoder_blocks_observed);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
