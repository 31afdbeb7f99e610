/* nn_kv_cache and nn_mha_forward_cached: attention fed a few tokens at a time from cached keys
 * and values equals the causal forward of the whole window (f32 within 1e-5, f64 within
 * 1e-12), alone and in a small decoder whose greedy generation gives the full window's logits
 * at every step; reset; errors, which leave the cache unchanged. On the CPU's fused attention
 * and on the composed path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "attention_ref.h"
#include "nn.h"
#include "testutil.h"

enum { DIM = 16, HEADS = 4, VOCAB = 11, CTX = 12 };

static double tol(enum tensor_dtype dt)
{
	return dt == TENSOR_F64 ? 1e-12 : 1e-5;
}

/* ---- nn_mha alone -------------------------------------------------------------- */

/* x [B, T, dim] fed in chunks of the given sizes through a cache: each chunk's output equals
 * the rows of the full causal forward. */
static void check_chunks(enum tensor_dtype dt, const int64_t *sizes, int n)
{
	struct nn_params ps;
	struct nn_mha m;
	struct nn_kv_cache c;
	int64_t b = 2, t = 0;
	for (int i = 0; i < n; i++)
		t += sizes[i];
	ck_assert_int_eq(nn_params_init(&ps, dt, TENSOR_CPU, 7), TENSOR_OK);
	ck_assert_int_eq(nn_mha_init(&m, &ps, "attn", DIM, HEADS, 0.0), TENSOR_OK);
	ck_assert_int_eq(nn_kv_cache_init(&c, &m, b, t), TENSOR_OK);
	ck_assert_int_eq(c.len, 0);
	ck_assert_int_eq(c.max_len, t);
	ag_no_grad_begin();
	struct tensor *x = tu_rand(dt, 3, (int64_t[]){ b, t, DIM }, 3);
	struct tensor *full = nn_mha_forward(&m, x, NULL, true);
	ck_assert_ptr_nonnull(full);
	int64_t at = 0;
	for (int i = 0; i < n; i++) {
		struct tensor *y = nn_mha_forward_cached(&m, tensor_narrow(x, 1, at, sizes[i]), &c);
		tu_assert_same(y, tensor_narrow(full, 1, at, sizes[i]), tol(dt));
		at += sizes[i];
		ck_assert_int_eq(c.len, at);
	}
	ag_no_grad_end();
	nn_kv_cache_free(&c);
	nn_mha_free(&m);
	nn_params_free(&ps);
}

START_TEST(test_cached_equals_full)
{
	enum tensor_dtype dts[2] = { TENSOR_F32, TENSOR_F64 };
	for (int i = 0; i < 2; i++) {
		check_chunks(dts[i], (const int64_t[]){ 1, 1, 1, 1, 1, 1, 1 },
			     7);					  /* token by token */
		check_chunks(dts[i], (const int64_t[]){ 5, 1, 1, 1 }, 4); /* prompt, then tokens */
		check_chunks(dts[i], (const int64_t[]){ 3, 4, 0, 1, 2 },
			     5); /* several new at once */
	}
}
END_TEST

/* ---- a small decoder: greedy generation with the cache and by rerunning the window ---- */

struct block {
	struct nn_layer_norm ln1, ln2;
	struct nn_mha attn;
	struct nn_feed_forward ff;
};

struct decoder {
	struct nn_embedding tok, pos;
	struct block layers[2];
	struct nn_layer_norm ln_f;
	struct nn_linear head;
};

static void decoder_init(struct decoder *d, struct nn_params *ps)
{
	char name[NN_NAME_MAX];
	ck_assert_int_eq(nn_embedding_init(&d->tok, ps, "tok", VOCAB, DIM, -1), TENSOR_OK);
	ck_assert_int_eq(nn_embedding_init(&d->pos, ps, "pos", CTX, DIM, -1), TENSOR_OK);
	for (int i = 0; i < 2; i++) {
		struct block *b = &d->layers[i];
		nn_namef(name, "", "layers.%d.ln1", i);
		ck_assert_int_eq(nn_layer_norm_init(&b->ln1, ps, name, DIM, 1e-5), TENSOR_OK);
		nn_namef(name, "", "layers.%d.attn", i);
		ck_assert_int_eq(nn_mha_init(&b->attn, ps, name, DIM, HEADS, 0.1), TENSOR_OK);
		nn_namef(name, "", "layers.%d.ln2", i);
		ck_assert_int_eq(nn_layer_norm_init(&b->ln2, ps, name, DIM, 1e-5), TENSOR_OK);
		nn_namef(name, "", "layers.%d.ff", i);
		ck_assert_int_eq(
		    nn_feed_forward_init(&b->ff, ps, name, DIM, 4 * DIM, NN_GELU, false, 0.1),
		    TENSOR_OK);
	}
	ck_assert_int_eq(nn_layer_norm_init(&d->ln_f, ps, "ln_f", DIM, 1e-5), TENSOR_OK);
	ck_assert_int_eq(nn_linear_init(&d->head, ps, "head", DIM, VOCAB, true), TENSOR_OK);
}

/* ids [1, T] at positions pos0 .. pos0+T-1 -> logits [1, T, VOCAB]; with caches, attention
 * reads and extends them, else it is causal over ids alone. */
static struct tensor *decoder_forward(const struct decoder *d, const int32_t *ids, int64_t t,
				      int64_t pos0, struct nn_kv_cache *caches)
{
	int32_t pos[CTX];
	for (int64_t i = 0; i < t; i++)
		pos[i] = (int32_t)(pos0 + i);
	struct tensor *ti = tensor_from_data(TENSOR_I32, TENSOR_CPU, 2, (int64_t[]){ 1, t }, ids);
	struct tensor *pi = tensor_from_data(TENSOR_I32, TENSOR_CPU, 2, (int64_t[]){ 1, t }, pos);
	struct tensor *x =
	    ag_add(nn_embedding_forward(&d->tok, ti), nn_embedding_forward(&d->pos, pi));
	for (int i = 0; i < 2; i++) {
		const struct block *b = &d->layers[i];
		struct tensor *h = nn_layer_norm_forward(&b->ln1, x);
		x = ag_add(x, caches ? nn_mha_forward_cached(&b->attn, h, &caches[i])
				     : nn_mha_forward(&b->attn, h, NULL, true));
		x = ag_add(x, nn_feed_forward_forward(&b->ff, nn_layer_norm_forward(&b->ln2, x)));
	}
	return nn_linear_forward(&d->head, nn_layer_norm_forward(&d->ln_f, x));
}

/* The argmax of the last row of logits [1, T, VOCAB]. */
static int32_t last_argmax(const struct tensor *logits)
{
	int64_t t = logits->shape[1];
	struct tensor *a =
	    tensor_argmax(tensor_select(tensor_select(logits, 0, 0), 0, t - 1), 0, false);
	ck_assert_ptr_nonnull(a);
	return (int32_t)tensor_get(a, NULL);
}

START_TEST(test_decoder_generation)
{
	struct nn_params ps;
	struct decoder d;
	struct nn_kv_cache caches[2];
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 5), TENSOR_OK);
	decoder_init(&d, &ps);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(nn_kv_cache_init(&caches[i], &d.layers[i].attn, 1, CTX),
				 TENSOR_OK);
	nn_params_train(&ps, false); /* dropout off, as in generation */
	ag_no_grad_begin();
	/* greedy from a prompt of 3 tokens to the whole context: the cached step's logits equal
	 * the last row of the full window's at each step, so the same tokens are chosen */
	int32_t ids[CTX] = { 1, 7, 4 };
	int64_t n = 3, fed = 0;
	while (n < CTX) {
		struct tensor *full = decoder_forward(&d, ids, n, 0, NULL);
		struct tensor *step = decoder_forward(&d, ids + fed, n - fed, fed, caches);
		ck_assert_ptr_nonnull(full);
		tu_assert_same(step, tensor_narrow(full, 1, fed, n - fed), 1e-5);
		fed = n;
		ids[n++] = last_argmax(full);
		ck_assert_int_eq(last_argmax(step), ids[n - 1]);
	}
	ck_assert_int_eq(caches[0].len, CTX - 1);
	ck_assert_int_eq(caches[1].len, CTX - 1);
	/* reset: a new sequence in the same caches gives a fresh cache's result */
	for (int i = 0; i < 2; i++)
		nn_kv_cache_reset(&caches[i]);
	ck_assert_int_eq(caches[0].len, 0);
	struct tensor *again = decoder_forward(&d, ids, 5, 0, caches);
	tu_assert_same(again, decoder_forward(&d, ids, 5, 0, NULL), 1e-5);
	ag_no_grad_end();
	for (int i = 0; i < 2; i++)
		nn_kv_cache_free(&caches[i]);
	nn_params_free(&ps);
}
END_TEST

/* ---- errors ------------------------------------------------------------------------ */

START_TEST(test_errors)
{
	struct nn_params ps;
	struct nn_mha m, other;
	struct nn_kv_cache c, c2;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	ck_assert_int_eq(nn_mha_init(&m, &ps, "a", 8, 2, 0.0), TENSOR_OK);
	ck_assert_int_eq(nn_mha_init(&other, &ps, "b", 8, 4, 0.0), TENSOR_OK);
	/* init */
	tu_assert_error(nn_kv_cache_init(&c, &m, 0, 4) < 0, TENSOR_ERR_ARG, "nn_kv_cache_init",
			"batch 0 and max_len 4 must be >= 1");
	ck_assert_ptr_null(c.k);
	tu_assert_error(nn_kv_cache_init(&c, &m, 1, 0) < 0, TENSOR_ERR_ARG, "max_len 0", NULL);
	struct nn_mha zero = { 0 };
	tu_assert_error(nn_kv_cache_init(&c, &zero, 1, 4) < 0, TENSOR_ERR_ARG, "not initialised",
			NULL);
	tu_assert_error(nn_kv_cache_init(&c, NULL, 1, 4) < 0, TENSOR_ERR_ARG, "not initialised",
			NULL);
	tu_assert_error(nn_kv_cache_init(NULL, &m, 1, 4) < 0, TENSOR_ERR_ARG, "c is NULL", NULL);
	ck_assert_int_eq(nn_kv_cache_init(&c, &m, 1, 4), TENSOR_OK);
	ck_assert_int_eq(nn_kv_cache_init(&c2, &other, 1, 4), TENSOR_OK);

	struct tensor *x = tu_rand(TENSOR_F32, 3, (int64_t[]){ 1, 3, 8 }, 2);
	/* with gradients on (the default): refused, the cache untouched */
	tu_assert_error(!nn_mha_forward_cached(&m, x, &c), TENSOR_ERR_STATE,
			"nn_mha_forward_cached: inference only", "ag_no_grad_begin");
	ck_assert_int_eq(c.len, 0);
	ag_no_grad_begin();
	ck_assert_ptr_nonnull(nn_mha_forward_cached(&m, x, &c));
	ck_assert_int_eq(c.len, 3);
	/* past max_len: refused, and the cache still continues the sequence correctly */
	tu_assert_error(!nn_mha_forward_cached(&m, x, &c), TENSOR_ERR_ARG,
			"3 cached + 3 new tokens exceed the cache's max_len 4",
			"nn_kv_cache_reset");
	ck_assert_int_eq(c.len, 3);
	struct tensor *x4 = tu_rand(TENSOR_F32, 3, (int64_t[]){ 1, 4, 8 }, 3);
	ck_assert_int_eq(tensor_copy_(tensor_narrow(x4, 1, 0, 3), x), TENSOR_OK);
	struct tensor *last = nn_mha_forward_cached(&m, tensor_narrow(x4, 1, 3, 1), &c);
	tu_assert_same(last, tensor_narrow(nn_mha_forward(&m, x4, NULL, true), 1, 3, 1), 1e-5);
	nn_kv_cache_reset(&c);
	/* shapes */
	struct tensor *x7 = tu_rand(TENSOR_F32, 3, (int64_t[]){ 1, 2, 7 }, 4);
	tu_assert_error(!nn_mha_forward_cached(&m, x7, &c), TENSOR_ERR_SHAPE,
			"nn_mha_forward_cached: x [1,2,7] must be [1,T,8]", NULL);
	struct tensor *xb = tu_rand(TENSOR_F32, 3, (int64_t[]){ 2, 2, 8 }, 5);
	tu_assert_error(!nn_mha_forward_cached(&m, xb, &c), TENSOR_ERR_SHAPE, "x [2,2,8]",
			"cache [1,2,4,4]");
	struct tensor *x2 = tu_rand(TENSOR_F32, 2, (int64_t[]){ 2, 8 }, 6);
	tu_assert_error(!nn_mha_forward_cached(&m, x2, &c), TENSOR_ERR_SHAPE, "x [2,8]", NULL);
	tu_assert_error(!nn_mha_forward_cached(&m, x, &c2), TENSOR_ERR_SHAPE,
			"cache [1,4,4,2] is not of this module", "[B,2,max_len,4]");
	/* NULLs and an earlier error */
	tu_assert_error(!nn_mha_forward_cached(NULL, x, &c), TENSOR_ERR_ARG, "module", NULL);
	tu_assert_error(!nn_mha_forward_cached(&m, x, NULL), TENSOR_ERR_ARG, "cache is NULL", NULL);
	struct nn_kv_cache freed = { 0 };
	tu_assert_error(!nn_mha_forward_cached(&m, x, &freed), TENSOR_ERR_ARG, "not initialised",
			NULL);
	tensor_error(TENSOR_ERR_IO, "earlier failure");
	ck_assert_ptr_null(nn_mha_forward_cached(&m, NULL, &c));
	tu_assert_error(true, TENSOR_ERR_IO, "earlier failure", NULL);
	ck_assert_int_eq(c.len, 0);
	ag_no_grad_end();
	/* outside a scope (the fixture opened one): refused before anything */
	tensor_scope_end();
	ag_no_grad_begin();
	tu_assert_error(!nn_mha_forward_cached(&m, x, &c), TENSOR_ERR_STATE, "outside a scope",
			NULL);
	ag_no_grad_end();
	tensor_scope_begin();
	ck_assert_int_eq(c.len, 0);
	nn_kv_cache_free(&c);
	nn_kv_cache_free(&c);
	ck_assert_ptr_null(c.k);
	nn_kv_cache_free(&c2);
	nn_kv_cache_free(NULL);
	nn_kv_cache_reset(NULL);
	nn_mha_free(&m);
	nn_mha_free(&other);
	nn_params_free(&ps);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("nn_kv_cache");
	TCase *tc = tu_tcase("kv_cache");
	tcase_add_test(tc, test_cached_equals_full);
	tcase_add_test(tc, test_decoder_generation);
	tcase_add_test(tc, test_errors);
	suite_add_tcase(s, tc);
	/* the composed path (the one of devices without the fused kernel) on the CPU */
	tc = tu_tcase("kv_cache (composed)");
	tcase_add_checked_fixture(tc, tu_unfuse, tu_refuse);
	tcase_add_test(tc, test_cached_equals_full);
	tcase_add_test(tc, test_decoder_generation);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
