/* models, configuration: presets, patterns and the k schedule; resolving
 * errors; the config JSON and the field table it comes from (parameter counts,
 * checkpoints and the memory estimate: test_models_size.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models_common.h"

/* ---- presets and patterns ------------------------------------------------------- */

START_TEST(test_preset_defaults)
{
	struct model_config c;
	ck_assert_int_eq(model_config_preset(&c, "transformer", 30522, 512), TENSOR_OK);
	ck_assert_int_eq(c.vocab_size, 30522);
	ck_assert_int_eq(c.max_len, 512);
	ck_assert_int_eq(c.dim, 256);
	ck_assert_int_eq(c.heads, 4);
	ck_assert_int_eq(c.layers, 4);
	ck_assert_int_eq(c.ff_hidden, 1024);
	ck_assert_int_eq(c.activation, NN_GELU);
	ck_assert(!c.swiglu && c.pre_norm && !c.rms_norm && c.final_norm);
	ck_assert_int_eq(c.positions, MODEL_POS_LEARNED);
	ck_assert(c.dropout == 0.1 && c.attn_dropout == 0.1);
	ck_assert_int_eq(c.pad_id, 0);
	ck_assert_int_eq(c.k_schedule, MODEL_K_CONSTANT);
	ck_assert_int_eq(c.k_first, 128);
	ck_assert_int_eq(c.k_last, 128);
	ck_assert_int_eq(c.sharing, NN_SHARE_HEADWISE);
	ck_assert(!c.conv_dense && !c.shared_kv_head);
	ck_assert_int_eq(c.num_classes, 2);
	ck_assert_int_eq(c.head_hidden, 256);
	ck_assert_int_eq(c.pooling, MODEL_POOL_MEAN);
	ck_assert(c.tie_embeddings);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(c.attention[i], NN_ATTN_STANDARD);
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(c.k[i], 0); /* standard layers have no k */
	/* k is clamped to a short max_len */
	ck_assert_int_eq(model_config_preset(&c, "linformer", 100, 64), TENSOR_OK);
	ck_assert_int_eq(c.k_first, 64);
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	ck_assert_int_eq(c.k[3], 64);
}
END_TEST

START_TEST(test_preset_patterns)
{
	struct model_config c;
	ck_assert_int_eq(model_config_preset(&c, "linformer", 100, 512), TENSOR_OK);
	ck_assert_int_eq(c.layers, 4);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(c.attention[i], NN_ATTN_LINEAR);
	/* uniform presets stay valid at any depth set afterwards */
	c.layers = 7;
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	ck_assert_int_eq(c.attention[6], NN_ATTN_LINEAR);
	ck_assert_int_eq(c.k[6], 128);

	ck_assert_int_eq(model_config_preset(&c, "conv-linformer", 100, 512), TENSOR_OK);
	const enum nn_attn_kind cl[4] = { NN_ATTN_LINEAR, NN_ATTN_LINEAR, NN_ATTN_CONV,
					     NN_ATTN_CONV };
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(c.attention[i], cl[i]);
	c.layers = 6; /* deeper than the preset's pattern: refused, naming the layer */
	tu_assert_error(model_config_resolve(&c) < 0, TENSOR_ERR_ARG, "model_config_resolve",
			"layer 4");
	/* name:depth; an odd depth gives the extra layer to the linear half */
	ck_assert_int_eq(model_config_preset(&c, "conv-linformer:5", 100, 512), TENSOR_OK);
	ck_assert_int_eq(c.layers, 5);
	const enum nn_attn_kind cl5[5] = { NN_ATTN_LINEAR, NN_ATTN_LINEAR,
					      NN_ATTN_LINEAR, NN_ATTN_CONV, NN_ATTN_CONV };
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(c.attention[i], cl5[i]);
	ck_assert_int_eq(model_config_preset(&c, "Transformer:12", 100, 512), TENSOR_OK);
	ck_assert_int_eq(c.layers, 12);

	ck_assert_int_eq(model_config_preset(&c, "SLCMXR", 100, 512), TENSOR_OK);
	ck_assert_int_eq(c.layers, 6);
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(c.attention[i], i);
	ck_assert_int_eq(model_config_preset(&c, "llcc", 100, 512), TENSOR_OK);
	ck_assert_int_eq(c.layers, 4);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(c.attention[i], cl[i]);
	char longest[MODEL_MAX_LAYERS + 1];
	memset(longest, 'M', MODEL_MAX_LAYERS);
	longest[MODEL_MAX_LAYERS] = 0;
	ck_assert_int_eq(model_config_preset(&c, longest, 100, 512), TENSOR_OK);
	ck_assert_int_eq(c.layers, MODEL_MAX_LAYERS);
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
}
END_TEST

START_TEST(test_preset_errors)
{
	struct model_config c;
	tu_assert_error(model_config_preset(NULL, "transformer", 10, 10) < 0, TENSOR_ERR_ARG,
			"model_config_preset", NULL);
	tu_assert_error(model_config_preset(&c, NULL, 10, 10) < 0, TENSOR_ERR_ARG,
			"model_config_preset", NULL);
	tu_assert_error(model_config_preset(&c, "transformer", 0, 10) < 0, TENSOR_ERR_ARG,
			"model_config_preset", "vocab_size 0");
	tu_assert_error(model_config_preset(&c, "transformer", 10, 0) < 0, TENSOR_ERR_ARG,
			"model_config_preset", "max_len 0");
	tu_assert_error(model_config_preset(&c, "bert", 10, 10) < 0, TENSOR_ERR_ARG,
			"unknown preset 'bert'", NULL);
	tu_assert_error(model_config_preset(&c, "", 10, 10) < 0, TENSOR_ERR_ARG,
			"unknown preset ''", NULL);
	tu_assert_error(model_config_preset(&c, "LLZ", 10, 10) < 0, TENSOR_ERR_ARG,
			"unknown preset 'LLZ'", "'Z'");
	tu_assert_error(model_config_preset(&c, "LL C", 10, 10) < 0, TENSOR_ERR_ARG, "' '", NULL);
	char toolong[MODEL_MAX_LAYERS + 2];
	memset(toolong, 'L', MODEL_MAX_LAYERS + 1);
	toolong[MODEL_MAX_LAYERS + 1] = 0;
	tu_assert_error(model_config_preset(&c, toolong, 10, 10) < 0, TENSOR_ERR_ARG,
			"unknown preset", "1..64 letters");
	tu_assert_error(model_config_preset(&c, "linformer:0", 10, 10) < 0, TENSOR_ERR_ARG,
			"'linformer:0'", "layers in [1, 64]");
	tu_assert_error(model_config_preset(&c, "linformer:65", 10, 10) < 0, TENSOR_ERR_ARG,
			"'linformer:65'", NULL);
	tu_assert_error(model_config_preset(&c, "linformer:x", 10, 10) < 0, TENSOR_ERR_ARG,
			"'linformer:x'", NULL);
	tu_assert_error(model_config_preset(&c, "LLCC:4", 10, 10) < 0, TENSOR_ERR_ARG,
			"unknown preset 'LLCC'", "named preset only");
}
END_TEST

START_TEST(test_k_schedule)
{
	struct model_config c;
	ck_assert_int_eq(model_config_preset(&c, "linformer", 100, 512), TENSOR_OK);
	c.k_schedule = MODEL_K_LINEAR;
	c.k_first = 128;
	c.k_last = 32;
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	const int64_t lin[4] = { 128, 96, 64, 32 };
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(c.k[i], lin[i]);
	/* rounding half away from zero: 10 -> 3 over 4 layers = 10, 7.67, 5.33, 3;
	 * 4 -> 1 over 3 layers = 4, 2.5, 1 */
	c.k_first = 10;
	c.k_last = 3;
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	const int64_t r[4] = { 10, 8, 5, 3 };
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(c.k[i], r[i]);
	c.layers = 3;
	c.k_first = 4;
	c.k_last = 1;
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	ck_assert_int_eq(c.k[0], 4);
	ck_assert_int_eq(c.k[1], 3);
	ck_assert_int_eq(c.k[2], 1);
	ck_assert_int_eq(c.k[3], 0); /* past the depth: cleared */
	c.k_first = 2;		     /* increasing works too: 2, 4, 6 */
	c.k_last = 6;
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	ck_assert_int_eq(c.k[1], 4);
	c.layers = 1; /* one layer: k_first */
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	ck_assert_int_eq(c.k[0], 2);
	ck_assert_int_eq(c.attention[1], NN_NATTN); /* cleared past the depth */
	/* resolving fixed the depth: raising it now is refused, not silently standard */
	c.layers = 4;
	tu_assert_error(model_config_resolve(&c) < 0, TENSOR_ERR_ARG, "layer 1 has no valid", NULL);
	/* constant ignores k_last */
	ck_assert_int_eq(model_config_preset(&c, "linformer", 100, 512), TENSOR_OK);
	c.k_schedule = MODEL_K_CONSTANT;
	c.k_first = 64;
	c.k_last = 999;
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(c.k[i], 64);
	/* explicit list; standard layers get k 0 whatever the list says */
	ck_assert_int_eq(model_config_preset(&c, "SLLS", 100, 512), TENSOR_OK);
	c.k_schedule = MODEL_K_LIST;
	const int64_t list[4] = { 7, 256, 100, 9 };
	memcpy(c.k, list, sizeof list);
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	ck_assert_int_eq(c.k[0], 0);
	ck_assert_int_eq(c.k[1], 256);
	ck_assert_int_eq(c.k[2], 100);
	ck_assert_int_eq(c.k[3], 0);
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK); /* idempotent */
	ck_assert_int_eq(c.k[1], 256);
	/* layerwise with a decaying k is fine when one layer is projected */
	ck_assert_int_eq(model_config_preset(&c, "SSSL", 100, 512), TENSOR_OK);
	c.sharing = NN_SHARE_LAYERWISE;
	c.k_schedule = MODEL_K_LINEAR;
	c.k_first = 128;
	c.k_last = 32;
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	ck_assert_int_eq(c.k[3], 32);
	/* and with a constant k over several layers */
	ck_assert_int_eq(model_config_preset(&c, "CSC", 100, 512), TENSOR_OK);
	c.sharing = NN_SHARE_LAYERWISE;
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
}
END_TEST

/* A valid base to break one field at a time. */
static struct model_config base(void)
{
	struct model_config c;
	ck_assert_int_eq(model_config_preset(&c, "linformer", 100, 64), TENSOR_OK);
	c.k_first = c.k_last = 16;
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	return c;
}

#define RESOLVE_FAILS(stmt, s1, s2)                                                    \
	do {                                                                           \
		struct model_config c = base();                                        \
		stmt;                                                                  \
		tu_assert_error(model_config_resolve(&c) < 0, TENSOR_ERR_ARG, s1, s2); \
	} while (0)

START_TEST(test_resolve_errors)
{
	tu_assert_error(model_config_resolve(NULL) < 0, TENSOR_ERR_ARG, "model_config_resolve",
			NULL);
	RESOLVE_FAILS(c.vocab_size = 0, "model_config_resolve", "vocab_size 0");
	RESOLVE_FAILS(c.max_len = -1, "max_len -1", NULL);
	RESOLVE_FAILS(c.dim = 0, "dim 0", NULL);
	RESOLVE_FAILS(c.heads = 0, "heads 0", NULL);
	RESOLVE_FAILS(c.ff_hidden = 0, "ff_hidden 0", NULL);
	RESOLVE_FAILS(c.num_classes = 0, "num_classes 0", NULL);
	RESOLVE_FAILS(c.head_hidden = 0, "head_hidden 0", NULL);
	RESOLVE_FAILS(c.layers = 0, "layers 0 not in [1, 64]", NULL);
	RESOLVE_FAILS(c.layers = 65, "layers 65", NULL);
	RESOLVE_FAILS(c.heads = 3, "heads 3 must divide dim 256", NULL);
	RESOLVE_FAILS(c.pad_id = 100, "pad_id 100", NULL);
	RESOLVE_FAILS(c.pad_id = -2, "pad_id -2", NULL);
	RESOLVE_FAILS(c.dropout = 1.0, "dropout 1", NULL);
	RESOLVE_FAILS(c.position_kernel = 4, "position_kernel 4 must be 0 (none) or odd", NULL);
	RESOLVE_FAILS(c.position_kernel = -1, "position_kernel -1", NULL);
	RESOLVE_FAILS(c.attn_dropout = -0.5, "attn_dropout -0.5", NULL);
	RESOLVE_FAILS(c.attn_dropout = NAN, "attn_dropout nan", NULL);
	RESOLVE_FAILS(c.activation = (enum nn_activation)99, "unknown activation 99", NULL);
	RESOLVE_FAILS(c.k_schedule = (enum model_k_schedule)7, "unknown k_schedule 7", NULL);
	RESOLVE_FAILS(c.sharing = (enum nn_proj_sharing)9, "unknown sharing 9", NULL);
	RESOLVE_FAILS(c.pooling = (enum model_pooling)5, "unknown pooling 5", NULL);
	RESOLVE_FAILS(c.attention[2] = NN_NATTN, "layer 2 has no valid attention kind", NULL);
	RESOLVE_FAILS(c.k_first = 65, "layer 0 (linear): k 65 not in [1, max_len 64]", NULL);
	RESOLVE_FAILS(c.k_first = 0, "k 0", NULL);
	RESOLVE_FAILS((c.k_schedule = MODEL_K_LIST, c.k[0] = c.k[1] = c.k[3] = 8, c.k[2] = -1),
		      "layer 2 (linear): k -1", NULL);
	RESOLVE_FAILS((c.k_schedule = MODEL_K_LINEAR, c.k_last = 100), "layer 2", "k 72");
	/* conv and pooling: n must be a multiple of k (kernel = stride = n/k) */
	RESOLVE_FAILS((c.attention[1] = NN_ATTN_CONV, c.k_first = 24),
		      "layer 1 (conv): max_len 64 is not divisible by k 24", NULL);
	RESOLVE_FAILS((c.attention[0] = NN_ATTN_MEAN, c.k_first = 48), "layer 0 (mean)",
		      "not divisible");
	RESOLVE_FAILS((c.attention[3] = NN_ATTN_MAX, c.k_first = 10), "layer 3 (max)",
		      "not divisible");
	/* ... and so do learned ones that mask their empty slots (windows of n/k) */
	RESOLVE_FAILS((c.mask_empty_slots = true, c.k_first = 24),
		      "layer 0 (linear): max_len 64 is not divisible by k 24",
		      "slots' windows of mask_empty_slots");
	/* learned and random projections take any k <= n */
	{
		struct model_config c = base();
		c.attention[1] = NN_ATTN_RANDOM;
		c.k_first = 24;
		ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	}
	/* layerwise sharing: one projection for every layer, so one k and one kind */
	RESOLVE_FAILS((c.sharing = NN_SHARE_LAYERWISE, c.k_schedule = MODEL_K_LINEAR,
		       c.k_first = 16, c.k_last = 4),
		      "layerwise sharing needs one k for every projected layer",
		      "layer 1 has k 12, layer 0 has k 16");
	RESOLVE_FAILS((c.sharing = NN_SHARE_LAYERWISE, c.k_schedule = MODEL_K_LIST, c.k[0] = 16,
		       c.k[1] = 16, c.k[2] = 16, c.k[3] = 8),
		      "needs one k", "layer 3 has k 8");
	RESOLVE_FAILS((c.sharing = NN_SHARE_LAYERWISE, c.attention[2] = NN_ATTN_CONV),
		      "layerwise sharing needs one projection kind",
		      "layer 2 is conv, layer 0 is linear");
	RESOLVE_FAILS((c.sharing = NN_SHARE_LAYERWISE, c.attention[0] = NN_ATTN_STANDARD,
		       c.attention[3] = NN_ATTN_MEAN),
		      "layer 3 is mean, layer 1 is linear", NULL);
	/* standard layers do not take part in either rule */
	{
		struct model_config c = base();
		c.sharing = NN_SHARE_LAYERWISE;
		c.attention[0] = NN_ATTN_STANDARD;
		ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	}
	/* a failed resolve leaves the config unchanged */
	struct model_config c = base(), before;
	c.k_schedule = MODEL_K_LIST;
	c.k[0] = 3;
	c.k[1] = 999;
	before = c;
	ck_assert(model_config_resolve(&c) < 0);
	tensor_clear_error();
	ck_assert(memcmp(&c, &before, sizeof c) == 0);
}
END_TEST

START_TEST(test_attention_names)
{
	const char *names[NN_NATTN] = { "standard", "linear", "conv", "mean", "max", "random" };
	for (int a = 0; a < NN_NATTN; a++) {
		ck_assert_str_eq(nn_attn_kind_name(a), names[a]);
		ck_assert_int_eq(nn_attn_kind_parse(names[a]), a);
	}
	ck_assert_str_eq(nn_attn_kind_name(NN_NATTN), "unknown");
	ck_assert_str_eq(nn_attn_kind_name((enum nn_attn_kind) - 1), "unknown");
	ck_assert_int_eq(nn_attn_kind_parse("Linear"), -1);
	ck_assert_int_eq(nn_attn_kind_parse(""), -1);
	ck_assert_int_eq(nn_attn_kind_parse(NULL), -1);
	ck_assert_int_eq(model_pooling_parse("mean"), MODEL_POOL_MEAN);
	ck_assert_int_eq(model_pooling_parse("cls"), MODEL_POOL_CLS);
	ck_assert_int_eq(model_pooling_parse("max"), MODEL_POOL_MAX);
	ck_assert_int_eq(model_pooling_parse("attention"), MODEL_POOL_ATTENTION);
	ck_assert_int_eq(model_pooling_parse("Mean"), -1);
	ck_assert_int_eq(model_pooling_parse(NULL), -1);
}
END_TEST

/* ---- JSON ------------------------------------------------------------------------ */

/* to_json -> from_json gives the same config; for a resolved one, also the
 * same (canonical) arrays past the depth, so equal models memcmp equal. */
static void roundtrip(const struct model_config *c, bool resolved)
{
	char *json = model_config_to_json(c);
	ck_assert_msg(json != NULL, "%s", tensor_last_error());
	struct model_config back;
	memset(&back, 0xab, sizeof back);
	ck_assert_msg(model_config_from_json(&back, json) == TENSOR_OK, "%s: %s", json,
		      tensor_last_error());
	assert_config_eq(&back, c);
	if (resolved) {
		ck_assert(memcmp(back.attention, c->attention, sizeof c->attention) == 0);
		ck_assert(memcmp(back.k, c->k, sizeof c->k) == 0);
	}
	/* and once more: the text is stable */
	char *again = model_config_to_json(&back);
	ck_assert_str_eq(again, json);
	free(again);
	free(json);
}

START_TEST(test_json_roundtrip)
{
	const char *presets[] = { "transformer", "linformer", "conv-linformer", "SLCMXR" };
	for (int p = 0; p < 4; p++)
		for (int s = 0; s < 4; s++) {
			struct model_config c;
			ck_assert_int_eq(model_config_preset(&c, presets[p], 1000, 512), TENSOR_OK);
			c.sharing = (enum nn_proj_sharing)s;
			roundtrip(&c, false);
			if (model_config_resolve(&c) == TENSOR_OK)
				roundtrip(&c, true);
			tensor_clear_error();
		}
	/* every field away from its default */
	struct model_config c;
	ck_assert_int_eq(model_config_preset(&c, "LLCCM", 30522, 4096), TENSOR_OK);
	c.dim = 96;
	c.heads = 6;
	c.ff_hidden = 333;
	c.activation = NN_GELU_TANH;
	c.swiglu = true;
	c.pre_norm = false;
	c.rms_norm = true;
	c.positions = MODEL_POS_NONE;
	c.position_kernel = 5;
	c.final_norm = false;
	c.dropout = 0.123456789012345678;
	c.attn_dropout = 1.0 / 3.0;
	c.pad_id = -1;
	c.k_schedule = MODEL_K_LIST;
	const int64_t k[5] = { 1000, 512, 256, 128, 64 };
	memcpy(c.k, k, sizeof k);
	c.k_first = 3;
	c.k_last = 17;
	c.sharing = NN_SHARE_KV;
	c.conv_dense = true;
	c.shared_kv_head = true;
	c.num_classes = 7;
	c.head_hidden = 5;
	c.pooling = MODEL_POOL_CLS;
	c.tie_embeddings = false;
	c.seed = 0xfedcba9876543210ull; /* beyond 2^53: written as a string */
	roundtrip(&c, false);
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	roundtrip(&c, true);
	c.seed = 9007199254740992ull; /* 2^53 exactly: a number */
	roundtrip(&c, true);
	char *json = model_config_to_json(&c);
	ck_assert(strstr(json, "\"seed\":9007199254740992") != NULL);
	ck_assert(strstr(json, "\"attention\":[\"linear\",\"linear\",\"conv\",\"conv\",\"mean\"]"));
	ck_assert(strstr(json, "\"sharing\":\"kv\"") && strstr(json, "\"pooling\":\"cls\""));
	ck_assert(strstr(json, "\"activation\":\"gelu_tanh\""));
	free(json);
	for (int a = 0; a < NN_NACTIVATIONS; a++) {
		c.activation = (enum nn_activation)a;
		roundtrip(&c, true);
	}
	c.pooling = MODEL_POOL_MAX;
	roundtrip(&c, true);
	json = model_config_to_json(&c);
	ck_assert(strstr(json, "\"pooling\":\"max\"") != NULL);
	free(json);
	c.pooling = MODEL_POOL_ATTENTION;
	roundtrip(&c, true);
	json = model_config_to_json(&c);
	ck_assert(strstr(json, "\"pooling\":\"attention\"") != NULL);
	free(json);
	/* the smallest config: vocab_size and max_len; the rest are the defaults */
	struct model_config d, want;
	ck_assert_int_eq(model_config_from_json(&d, "{\"max_len\": 64, \"vocab_size\": 50}"),
			 TENSOR_OK);
	ck_assert_int_eq(model_config_preset(&want, "transformer", 50, 64), TENSOR_OK);
	assert_config_eq(&d, &want);
	/* a hand-written one: layers before or after the arrays, any key order */
	ck_assert_int_eq(model_config_from_json(&d, "{\"attention\":[\"conv\",\"max\"],"
						    "\"vocab_size\":5,\"layers\":2,\"max_len\":8,"
						    "\"seed\":\"42\",\"sharing\":\"key-value\"}"),
			 TENSOR_OK);
	ck_assert_int_eq(d.layers, 2);
	ck_assert_int_eq(d.attention[0], NN_ATTN_CONV);
	ck_assert_int_eq(d.attention[1], NN_ATTN_MAX);
	ck_assert_int_eq(d.seed, 42);
	ck_assert_int_eq(d.sharing, NN_SHARE_KV);
	ck_assert_int_eq(d.k_first, 8);
	/* "sequential_heads", a run option since, in configs written before: a
	 * boolean accepted and ignored, never written */
	ck_assert_int_eq(model_config_from_json(&d, "{\"max_len\": 64, \"vocab_size\": 50, "
						    "\"sequential_heads\": true}"),
			 TENSOR_OK);
	assert_config_eq(&d, &want);
	json = model_config_to_json(&d);
	ck_assert(strstr(json, "sequential") == NULL);
	ck_assert(strstr(json, "\"positions\":\"learned\"") != NULL);
	free(json);
	/* the older position keys: learned_positions false = sinusoidal, and
	 * no_positions true wins over learned_positions */
	ck_assert_int_eq(model_config_from_json(&d, "{\"max_len\":8,\"vocab_size\":5,"
						    "\"learned_positions\":false,"
						    "\"no_positions\":false}"),
			 TENSOR_OK);
	ck_assert_int_eq(d.positions, MODEL_POS_SINUSOIDAL);
	ck_assert_int_eq(model_config_from_json(&d, "{\"max_len\":8,\"vocab_size\":5,"
						    "\"learned_positions\":true,"
						    "\"no_positions\":true}"),
			 TENSOR_OK);
	ck_assert_int_eq(d.positions, MODEL_POS_NONE);
	ck_assert_int_eq(model_config_from_json(&d, "{\"max_len\":8,\"vocab_size\":5,"
						    "\"positions\":\"sinusoidal\"}"),
			 TENSOR_OK);
	ck_assert_int_eq(d.positions, MODEL_POS_SINUSOIDAL);
	json = model_config_to_json(&d);
	ck_assert(strstr(json, "\"positions\":\"sinusoidal\"") != NULL);
	free(json);
}
END_TEST

#define JSON_FAILS(text, s1, s2)                                                                 \
	do {                                                                                     \
		struct model_config out = base(), keep = out;                                    \
		tu_assert_error(model_config_from_json(&out, text) < 0, TENSOR_ERR_ARG, s1, s2); \
		ck_assert(memcmp(&out, &keep, sizeof out) == 0);                                 \
	} while (0)
#define VN "\"vocab_size\":10,\"max_len\":8"

START_TEST(test_json_errors)
{
	JSON_FAILS("{", "model_config_from_json", "invalid JSON");
	JSON_FAILS("{\"vocab_size\":10,} ", "invalid JSON", NULL);
	JSON_FAILS("{" VN "} trailing", "invalid JSON", NULL);
	JSON_FAILS("[1,2]", "expected a JSON object", NULL);
	JSON_FAILS("{" VN ",\"hidden\":4}", "unknown key \"hidden\"", NULL);
	JSON_FAILS("{" VN ",\"sequential_heads\":1}", "\"sequential_heads\" must be true or false",
		   NULL);
	JSON_FAILS("{" VN ",\"positions\":\"rotary\"}",
		   "\"positions\" must be one of the strings learned, sinusoidal, none", NULL);
	JSON_FAILS("{" VN ",\"positions\":\"none\",\"no_positions\":true}",
		   "\"positions\" and the older", NULL);
	JSON_FAILS("{" VN ",\"no_positions\":true,\"no_positions\":true}",
		   "duplicate key \"no_positions\"", NULL);
	JSON_FAILS("{" VN ",\"dim\":8,\"dim\":16}", "duplicate key \"dim\"", NULL);
	JSON_FAILS("{\"vocab_size\":10}", "\"vocab_size\" and \"max_len\" are required", NULL);
	JSON_FAILS("{\"max_len\":10}", "required", NULL);
	JSON_FAILS("{\"vocab_size\":0,\"max_len\":8}", "\"vocab_size\" 0", ">= 1");
	JSON_FAILS("{" VN ",\"dim\":\"8\"}", "\"dim\" must be an integer", NULL);
	JSON_FAILS("{" VN ",\"dim\":8.5}", "\"dim\" = 8.5", "integer");
	JSON_FAILS("{" VN ",\"dim\":1e300}", "\"dim\"", "2^53");
	JSON_FAILS("{" VN ",\"heads\":null}", "\"heads\" must be an integer", NULL);
	JSON_FAILS("{\"vocab_size\":\"10\",\"max_len\":8}", "\"vocab_size\" must be an integer",
		   NULL);
	JSON_FAILS("{" VN ",\"swiglu\":1}", "\"swiglu\" must be true or false", NULL);
	JSON_FAILS("{" VN ",\"dropout\":\"0.1\"}", "\"dropout\" must be a number", NULL);
	JSON_FAILS("{" VN ",\"dropout\":true}", "\"dropout\" must be a number", NULL);
	JSON_FAILS("{" VN ",\"activation\":\"tanh\"}", "\"activation\" must be one of",
		   "relu, gelu, gelu_tanh, silu");
	JSON_FAILS("{" VN ",\"activation\":3}", "\"activation\" must be one of", NULL);
	JSON_FAILS("{" VN ",\"k_schedule\":\"cosine\"}", "\"k_schedule\"",
		   "constant, linear, list");
	JSON_FAILS("{" VN ",\"sharing\":\"all\"}", "\"sharing\"", "none, headwise, kv, layerwise");
	JSON_FAILS("{" VN ",\"pooling\":\"sum\"}", "\"pooling\"", "mean, cls, max");
	JSON_FAILS("{" VN ",\"layers\":0}", "\"layers\" 0 not in [1, 64]", NULL);
	JSON_FAILS("{" VN ",\"layers\":65}", "\"layers\" 65", NULL);
	JSON_FAILS("{" VN ",\"layers\":\"2\"}", "\"layers\" must be an integer", NULL);
	JSON_FAILS("{" VN ",\"attention\":\"LLCC\"}", "\"attention\" must be an array", NULL);
	JSON_FAILS("{" VN ",\"attention\":[\"linear\"]}", "\"attention\" has 1 entries",
		   "layers = 4");
	JSON_FAILS("{" VN ",\"layers\":2,\"attention\":[\"linear\",\"lstm\"]}",
		   "\"attention\"[1] must be one of", NULL);
	JSON_FAILS("{" VN ",\"layers\":2,\"attention\":[\"linear\",2]}", "\"attention\"[1]", NULL);
	JSON_FAILS("{" VN ",\"layers\":2,\"k\":[4]}", "\"k\" has 1 entries", NULL);
	JSON_FAILS("{" VN ",\"layers\":2,\"k\":[4,2.5]}", "\"k[1]\" = 2.5", NULL);
	JSON_FAILS("{" VN ",\"layers\":2,\"k\":{}}", "\"k\" must be an array", NULL);
	JSON_FAILS("{" VN ",\"seed\":-1}", "\"seed\" must be an integer in [0, 2^53]", NULL);
	JSON_FAILS("{" VN ",\"seed\":1.5}", "\"seed\"", NULL);
	JSON_FAILS("{" VN ",\"seed\":\"12a\"}", "\"seed\" string \"12a\"", NULL);
	JSON_FAILS("{" VN ",\"seed\":\"-3\"}", "\"seed\" string", NULL);
	JSON_FAILS("{" VN ",\"seed\":\"99999999999999999999\"}", "\"seed\" string", NULL);
	JSON_FAILS("{" VN ",\"seed\":true}", "\"seed\"", NULL);
	struct model_config c = base();
	tu_assert_error(model_config_from_json(NULL, "{}") < 0, TENSOR_ERR_ARG,
			"model_config_from_json", NULL);
	tu_assert_error(model_config_from_json(&c, NULL) < 0, TENSOR_ERR_ARG,
			"model_config_from_json", NULL);
	/* to_json refuses what from_json could not read back */
	tu_assert_error(model_config_to_json(NULL) == NULL, TENSOR_ERR_ARG, "model_config_to_json",
			NULL);
	c.layers = 0;
	tu_assert_error(model_config_to_json(&c) == NULL, TENSOR_ERR_ARG, "model_config_to_json",
			"layers 0");
	c = base();
	c.attention[1] = NN_NATTN;
	tu_assert_error(model_config_to_json(&c) == NULL, TENSOR_ERR_ARG, "\"attention\"[1]", NULL);
	c = base();
	c.sharing = (enum nn_proj_sharing)8;
	tu_assert_error(model_config_to_json(&c) == NULL, TENSOR_ERR_ARG, "\"sharing\"", "value 8");
	c = base();
	c.dropout = INFINITY;
	tu_assert_error(model_config_to_json(&c) == NULL, TENSOR_ERR_ARG, "\"dropout\"",
			"not finite");
	c = base();
	c.vocab_size = (int64_t)1 << 60;
	tu_assert_error(model_config_to_json(&c) == NULL, TENSOR_ERR_ARG, "\"vocab_size\"", "2^53");
	c = base();
	c.k[2] = (int64_t)1 << 60;
	tu_assert_error(model_config_to_json(&c) == NULL, TENSOR_ERR_ARG, "\"k\"[2]", NULL);
}
END_TEST

/* ---- the field table (models/model_config_fields.h) ------------------------------------ */

#define NUM_FIELDS 31 /* the members of struct model_config */

static bool is_enum_kind(enum model_field_kind k)
{
	return k >= MODEL_FIELD_ACTIVATION && k <= MODEL_FIELD_POOLING;
}

static bool is_array_kind(enum model_field_kind k)
{
	return k == MODEL_FIELD_ATTENTION || k == MODEL_FIELD_K;
}

/* The table covers the struct: one row per member, in order, each where the member is; the
 * enums' choices are their names; a generated flag has a name, none otherwise; the
 * defaults are the preset's. */
START_TEST(test_field_table)
{
	int n = model_config_field_count();
	ck_assert_int_eq(n, NUM_FIELDS);
	ck_assert(model_config_field(-1) == NULL && model_config_field(n) == NULL);
	ck_assert(model_config_field_find("hidden") == NULL && !model_config_field_find(NULL));
	size_t end = 0;
	for (int i = 0; i < n; i++) {
		const struct model_config_field *f = model_config_field(i);
		ck_assert_ptr_eq(model_config_field_find(f->name), f);
		ck_assert_msg(f->offset >= end, "%s overlaps the field before it", f->name);
		end = f->offset + f->size;
		ck_assert_msg(end <= sizeof(struct model_config), "%s", f->name);
		ck_assert_msg(f->help && *f->help, "%s has no help", f->name);
		ck_assert_msg((f->group == MODEL_FIELD_NONE) == (f->flag == NULL),
			      "%s: a flag exactly when its group generates one", f->name);
		if (f->kind == MODEL_FIELD_INT || f->kind == MODEL_FIELD_K ||
		    f->kind == MODEL_FIELD_DOUBLE)
			ck_assert_msg(f->min < f->max && f->max <= MODEL_CONFIG_INT_MAX, "%s",
				      f->name);
		if (is_array_kind(f->kind))
			ck_assert_uint_eq(f->size % MODEL_MAX_LAYERS, 0);
		/* an enum's choices, when given, are its names in order */
		int count = model_field_enum_count(f->kind);
		ck_assert_int_eq(count > 0, is_enum_kind(f->kind) || f->kind == MODEL_FIELD_ATTENTION);
		ck_assert(model_field_enum_name(f->kind, -1) == NULL);
		ck_assert(model_field_enum_name(f->kind, count) == NULL);
		if (is_enum_kind(f->kind)) {
			char names[128] = "";
			for (int v = 0; v < count; v++)
				snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
					 v ? "|" : "", model_field_enum_name(f->kind, v));
			ck_assert_msg(f->metavar && !strcmp(f->metavar, names),
				      "%s: choices %s, names %s", f->name, f->metavar, names);
		}
	}
	/* the last member ends the struct, up to its padding */
	ck_assert_uint_le(sizeof(struct model_config) - end, 7);
	/* every scalar field of a preset (at n >= 128) has the table's default */
	struct model_config c;
	ck_assert_int_eq(model_config_preset(&c, "transformer", 1000, 512), TENSOR_OK);
	for (int i = 0; i < n; i++) {
		const struct model_config_field *f = model_config_field(i);
		const char *p = (const char *)&c + f->offset;
		double v;
		switch (f->kind) {
		case MODEL_FIELD_INT: v = (double)*(const int64_t *)p; break;
		case MODEL_FIELD_BOOL: v = *(const bool *)p; break;
		case MODEL_FIELD_DOUBLE: v = *(const double *)p; break;
		case MODEL_FIELD_SEED: v = (double)*(const uint64_t *)p; break;
		case MODEL_FIELD_ATTENTION:
		case MODEL_FIELD_K: continue;
		default: v = *(const int *)p;
		}
		if (strcmp(f->name, "vocab_size") && strcmp(f->name, "max_len"))
			ck_assert_msg(v == f->def, "%s: preset %g, table %g", f->name, v, f->def);
	}
}
END_TEST

/* The JSON text of a config is what the build before the field list wrote, key for key (the
 * PyTorch loader, bench/pytorch, reads these keys): the field list changed no name, order or
 * number format. */
START_TEST(test_json_text_unchanged)
{
	struct model_config c = tiny("conv-linformer:2");
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	char *json = model_config_to_json(&c);
	ck_assert_str_eq(
	    json, "{\"vocab_size\":11,\"max_len\":8,\"dim\":8,\"heads\":2,\"layers\":2,"
		  "\"ff_hidden\":16,\"activation\":\"gelu\",\"swiglu\":false,\"pre_norm\":true,"
		  "\"rms_norm\":false,\"positions\":\"learned\",\"position_kernel\":0,"
		  "\"final_norm\":true,\"dropout\":0,\"attn_dropout\":0,\"pad_id\":0,"
		  "\"attention\":[\"linear\",\"conv\"],\"k_schedule\":\"constant\",\"k_first\":4,"
		  "\"k_last\":4,\"k\":[4,4],\"sharing\":\"headwise\",\"conv_dense\":false,"
		  "\"xavier_projections\":false,\"mask_empty_slots\":false,"
		  "\"shared_kv_head\":false,\"num_classes\":3,\"head_hidden\":8,"
		  "\"pooling\":\"mean\",\"tie_embeddings\":true,\"seed\":7}");
	free(json);
	/* no field is an execution choice: those are run options, never saved */
	ck_assert(model_config_field_find("sequential_heads") == NULL);
}
END_TEST

/* A value of field f unlike c's and within its range (an array: its first entry). */
static void set_other(struct model_config *c, const struct model_config_field *f)
{
	char *p = (char *)c + f->offset;
	switch (f->kind) {
	case MODEL_FIELD_INT: {
		int64_t *v = (int64_t *)p;
		*v = *v + 1 <= f->max ? *v + 1 : *v - 1;
		break;
	}
	case MODEL_FIELD_BOOL: *(bool *)p = !*(bool *)p; break;
	case MODEL_FIELD_DOUBLE: *(double *)p = f->min + (f->max - f->min) / 3; break;
	case MODEL_FIELD_SEED: *(uint64_t *)p = 0xfedcba9876543210ull; break;
	case MODEL_FIELD_ATTENTION: c->attention[0] = NN_ATTN_RANDOM; break;
	case MODEL_FIELD_K: c->k[0] = 7; break;
	default: *(int *)p = (*(int *)p + 1) % model_field_enum_count(f->kind);
	}
}

/* Every field, changed alone, is written under its name and read back unchanged. */
START_TEST(test_json_every_field)
{
	for (int i = 0; i < model_config_field_count(); i++) {
		const struct model_config_field *f = model_config_field(i);
		struct model_config c, back;
		ck_assert_int_eq(model_config_preset(&c, "linformer", 1000, 512), TENSOR_OK);
		struct model_config before = c;
		set_other(&c, f);
		ck_assert_msg(memcmp(&c, &before, sizeof c) != 0, "%s did not change", f->name);
		char *json = model_config_to_json(&c);
		ck_assert_msg(json != NULL, "%s: %s", f->name, tensor_last_error());
		char key[64];
		snprintf(key, sizeof key, "\"%s\":", f->name);
		ck_assert_msg(strstr(json, key) != NULL, "%s missing in %s", key, json);
		ck_assert_msg(model_config_from_json(&back, json) == TENSOR_OK, "%s: %s", f->name,
			      tensor_last_error());
		assert_config_eq(&back, &c);
		free(json);
	}
}
END_TEST

/* A bad value of each field, in JSON or in a config to resolve, is refused naming the field. */
START_TEST(test_field_errors)
{
	for (int i = 0; i < model_config_field_count(); i++) {
		const struct model_config_field *f = model_config_field(i);
		char bad[4][64]; /* JSON values */
		int nbad = 0;
		switch (f->kind) {
		case MODEL_FIELD_INT:
			snprintf(bad[nbad++], 64, "%.0f", f->min - 1);
			if (f->max < MODEL_CONFIG_INT_MAX)
				snprintf(bad[nbad++], 64, "%.0f", f->max + 1);
			snprintf(bad[nbad++], 64, "2.5");
			snprintf(bad[nbad++], 64, "\"3\"");
			break;
		case MODEL_FIELD_DOUBLE:
			snprintf(bad[nbad++], 64, "%g", f->min - 0.5);
			snprintf(bad[nbad++], 64, "%g", f->max);
			snprintf(bad[nbad++], 64, "true");
			break;
		case MODEL_FIELD_BOOL:
			snprintf(bad[nbad++], 64, "1");
			snprintf(bad[nbad++], 64, "\"true\"");
			break;
		case MODEL_FIELD_SEED:
			snprintf(bad[nbad++], 64, "-1");
			snprintf(bad[nbad++], 64, "\"x\"");
			break;
		case MODEL_FIELD_ATTENTION:
			snprintf(bad[nbad++], 64, "[\"linear\",\"lstm\"]");
			snprintf(bad[nbad++], 64, "[\"linear\"]");
			break;
		case MODEL_FIELD_K:
			snprintf(bad[nbad++], 64, "[4,-1]");
			snprintf(bad[nbad++], 64, "[4]");
			break;
		default:
			snprintf(bad[nbad++], 64, "\"bogus\"");
			snprintf(bad[nbad++], 64, "0");
		}
		for (int b = 0; b < nbad; b++) {
			char json[512];
			snprintf(json, sizeof json, "{%s%s\"layers\":2,\"%s\":%s}",
				 strcmp(f->name, "vocab_size") ? "\"vocab_size\":10," : "",
				 strcmp(f->name, "max_len") ? "\"max_len\":8," : "", f->name,
				 bad[b]);
			if (!strcmp(f->name, "layers"))
				snprintf(json, sizeof json, "{\"vocab_size\":10,\"max_len\":8,"
							    "\"layers\":%s}",
					 bad[b]);
			char want[64];
			snprintf(want, sizeof want, "\"%s", f->name);
			struct model_config out = base(), keep = out;
			tu_assert_error(model_config_from_json(&out, json) < 0, TENSOR_ERR_ARG, want,
					NULL);
			ck_assert(memcmp(&out, &keep, sizeof out) == 0);
		}
		/* model_config_resolve checks the same ranges and enums */
		struct model_config c = base();
		char *p = (char *)&c + f->offset;
		char want[64];
		snprintf(want, sizeof want, "%s", f->name);
		switch (f->kind) {
		case MODEL_FIELD_INT: *(int64_t *)p = (int64_t)f->min - 1; break;
		case MODEL_FIELD_DOUBLE: *(double *)p = f->max; break;
		case MODEL_FIELD_BOOL:
		case MODEL_FIELD_SEED:
		case MODEL_FIELD_ATTENTION:
		case MODEL_FIELD_K: continue; /* every value, or checked per layer */
		default:
			*(int *)p = model_field_enum_count(f->kind);
			snprintf(want, sizeof want, "unknown %s", f->name);
		}
		tu_assert_error(model_config_resolve(&c) < 0, TENSOR_ERR_ARG, "model_config_resolve",
				want);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("models_config");
	TCase *tc = tu_tcase("config");
	tcase_add_test(tc, test_preset_defaults);
	tcase_add_test(tc, test_preset_patterns);
	tcase_add_test(tc, test_preset_errors);
	tcase_add_test(tc, test_k_schedule);
	tcase_add_test(tc, test_resolve_errors);
	tcase_add_test(tc, test_attention_names);
	tcase_add_test(tc, test_json_roundtrip);
	tcase_add_test(tc, test_json_errors);
	tcase_add_test(tc, test_field_table);
	tcase_add_test(tc, test_json_text_unchanged);
	tcase_add_test(tc, test_json_every_field);
	tcase_add_test(tc, test_field_errors);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
