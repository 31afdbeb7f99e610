/* Helpers shared by test_models.c and test_models_config.c. */
#ifndef CFORMER_TESTS_MODELS_COMMON_H
#define CFORMER_TESTS_MODELS_COMMON_H

#include "models.h"
#include "testutil.h"

/* The tiny model of the gradient checks: vocab 11, n 8, dim 8, 2 heads, k 4,
 * no dropout; preset is a named preset with a depth or a pattern. */
static struct model_config tiny(const char *preset)
{
	struct model_config c;
	ck_assert_msg(model_config_preset(&c, preset, 11, 8) == TENSOR_OK, "%s: %s", preset,
		      tensor_last_error());
	c.dim = 8;
	c.heads = 2;
	c.ff_hidden = 16;
	c.k_first = c.k_last = 4;
	c.dropout = c.attn_dropout = 0;
	c.num_classes = 3;
	c.head_hidden = 8;
	c.seed = 7;
	return c;
}

/* Field-by-field equality of two configs (the used part of the arrays). */
static void assert_config_eq(const struct model_config *a, const struct model_config *b)
{
#define EQ(f) ck_assert_msg(a->f == b->f, "field " #f " differs")
	EQ(vocab_size);
	EQ(max_len);
	EQ(dim);
	EQ(heads);
	EQ(layers);
	EQ(ff_hidden);
	EQ(activation);
	EQ(swiglu);
	EQ(pre_norm);
	EQ(rms_norm);
	EQ(learned_positions);
	EQ(final_norm);
	EQ(dropout);
	EQ(attn_dropout);
	EQ(pad_id);
	EQ(k_schedule);
	EQ(k_first);
	EQ(k_last);
	EQ(sharing);
	EQ(conv_dense);
	EQ(shared_kv_head);
	EQ(sequential_heads);
	EQ(num_classes);
	EQ(head_hidden);
	EQ(pooling);
	EQ(tie_embeddings);
	EQ(seed);
#undef EQ
	for (int64_t i = 0; i < a->layers; i++) {
		ck_assert_msg(a->attention[i] == b->attention[i], "attention[%lld] differs",
			      (long long)i);
		ck_assert_msg(a->k[i] == b->k[i], "k[%lld] differs", (long long)i);
	}
}

#endif
