/* models, what a configuration implies: parameter counts against hand formulas, the
 * config read back from checkpoints (and from one written before the field list), and the
 * memory estimate. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models_common.h"

static const char *const sharing_label[4] = { "none", "headwise", "kv", "layerwise" };

/* ---- parameter counts ---------------------------------------------------------------- */

/* Counts of initialised models (nn_params_count) against model_param_count. */
static void check_count(const struct model_config *c, const char *what)
{
	for (int head = 0; head < 2; head++) {
		struct nn_params ps;
		ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
		struct model_classifier cls;
		struct model_mlm mlm;
		int rc = head ? model_mlm_init(&mlm, &ps, c) : model_classifier_init(&cls, &ps, c);
		ck_assert_msg(rc == TENSOR_OK, "%s: %s", what, tensor_last_error());
		int64_t want = model_param_count(c, !head, head);
		ck_assert_msg(nn_params_count(&ps) == want, "%s %s: %lld parameters, formula %lld",
			      what, head ? "mlm" : "classifier", (long long)nn_params_count(&ps),
			      (long long)want);
		if (head)
			model_mlm_free(&mlm);
		else
			model_classifier_free(&cls);
		nn_params_free(&ps);
	}
}

START_TEST(test_param_count_hand)
{
	/* V 11, n 8, d 8, h 2, L 2, ff 16, LayerNorm, learned positions, k 4,
	 * classifier 8 -> 8 -> 3:
	 * embed 11*8 = 88, positions 8*8 = 64;
	 * per layer: norms 2*16 = 32, attention 4*(64+8) = 288, ff 2*8*16+16+8 = 280;
	 * final norm 16; classifier 8*8+8 + 8*3+3 = 99;
	 * MLM: dense 72, norm 16, tied bias 11 (untied + 88 weight). */
	struct model_config c = tiny("transformer:2");
	int64_t enc = 88 + 64 + 2 * (32 + 288 + 280) + 16;
	ck_assert_int_eq(model_param_count(&c, false, false), enc);
	ck_assert_int_eq(model_param_count(&c, true, false), enc + 99);
	ck_assert_int_eq(model_param_count(&c, false, true), enc + 99);
	ck_assert_int_eq(model_param_count(&c, true, true), enc + 198);
	c.tie_embeddings = false;
	ck_assert_int_eq(model_param_count(&c, false, true), enc + 99 + 88);
	check_count(&c, "transformer untied");
	/* Linformer, headwise: + E, F [4, 8] per layer */
	c = tiny("linformer:2");
	ck_assert_int_eq(model_param_count(&c, false, false), enc + 2 * 64);
	c.sharing = NN_SHARE_NONE; /* per head: [2, 4, 8] each */
	ck_assert_int_eq(model_param_count(&c, false, false), enc + 2 * 128);
	c.sharing = NN_SHARE_KV; /* E = F */
	ck_assert_int_eq(model_param_count(&c, false, false), enc + 2 * 32);
	c.sharing = NN_SHARE_LAYERWISE; /* one for the model */
	ck_assert_int_eq(model_param_count(&c, false, false), enc + 32);
	c.shared_kv_head = true; /* k, v: 8 -> 4 (+4 bias) instead of 72 each */
	ck_assert_int_eq(model_param_count(&c, false, false), enc + 32 - 2 * 2 * (72 - 36));
	check_count(&c, "linformer layerwise shared kv head");
	/* Conv-Linformer "LC": layer 1 conv kernel 2 over the head dim 4: E, F
	 * each 4*4*2 + 4 = 36; dense: 8*8*2 + 8 = 136 each */
	c = tiny("conv-linformer:2");
	ck_assert_int_eq(model_param_count(&c, false, false), enc + 64 + 72);
	c.conv_dense = true;
	ck_assert_int_eq(model_param_count(&c, false, false), enc + 64 + 272);
	check_count(&c, "conv-linformer dense");
	/* pooling has no parameters; SwiGLU 3*8*16 per layer; RMSNorm d per norm;
	 * sinusoidal positions none */
	c = tiny("MX");
	ck_assert_int_eq(model_param_count(&c, false, false), enc);
	c.swiglu = true;
	c.rms_norm = true;
	c.positions = MODEL_POS_SINUSOIDAL;
	ck_assert_int_eq(model_param_count(&c, false, false), 88 + 2 * (16 + 288 + 384) + 8);
	c.positions = MODEL_POS_NONE;
	ck_assert_int_eq(model_param_count(&c, false, false), 88 + 2 * (16 + 288 + 384) + 8);
	check_count(&c, "no positions");
	c.position_kernel = 3; /* a [8, 8, 3] convolution */
	ck_assert_int_eq(model_param_count(&c, false, false), 88 + 192 + 2 * (16 + 288 + 384) + 8);
	check_count(&c, "conv positions");
	c.position_kernel = 0;
	c.pre_norm = false; /* post-norm: no final norm */
	ck_assert_int_eq(model_param_count(&c, false, false), 88 + 2 * (16 + 288 + 384));
	check_count(&c, "pooling swiglu rms post-norm");
	/* attention pooling: its query, d */
	int64_t with_head = model_param_count(&c, true, false),
		mlm = model_param_count(&c, false, true);
	c.pooling = MODEL_POOL_ATTENTION;
	ck_assert_int_eq(model_param_count(&c, true, false), with_head + 8);
	ck_assert_int_eq(model_param_count(&c, false, true), mlm); /* the MLM head does not pool */
	check_count(&c, "attention pooling");
	/* errors: the config is resolved first */
	tu_assert_error(model_param_count(NULL, true, true) < 0, TENSOR_ERR_ARG,
			"model_param_count", NULL);
	c.heads = 3;
	tu_assert_error(model_param_count(&c, true, true) < 0, TENSOR_ERR_ARG,
			"model_config_resolve", "heads 3");
	c = tiny("LL");
	c.vocab_size = (int64_t)1 << 40;
	c.dim = (int64_t)1 << 20;
	tu_assert_error(model_param_count(&c, false, false) < 0, TENSOR_ERR_ARG,
			"model_param_count", "beyond 2^53");
}
END_TEST

START_TEST(test_param_count_all_modes)
{
	/* every pattern x sharing x option combination (layerwise with mixed kinds
	 * is refused by resolve and skipped) */
	const char *patterns[] = { "SS", "LL", "LC", "CC", "MX", "RR", "SLCMXR" };
	int models = 0;
	for (int p = 0; p < 7; p++)
		for (int s = 0; s < 4; s++)
			for (int opt = 0; opt < 128; opt++) {
				struct model_config c = tiny(patterns[p]);
				c.sharing = (enum nn_proj_sharing)s;
				c.shared_kv_head = opt & 1;
				c.conv_dense = opt & 2;
				c.swiglu = opt & 4;
				c.rms_norm = opt & 8;
				c.tie_embeddings = opt & 16;
				c.positions = opt & 32 ? MODEL_POS_LEARNED : MODEL_POS_SINUSOIDAL;
				c.pre_norm = opt & 64;
				c.final_norm = (opt & 3) != 1;
				if (model_config_resolve(&c) < 0) {
					ck_assert(s == NN_SHARE_LAYERWISE && p >= 2 && p != 3 &&
						  p != 5);
					tensor_clear_error();
					continue;
				}
				char what[96];
				snprintf(what, sizeof what, "%s %s opt %d", patterns[p],
					 sharing_label[s], opt);
				check_count(&c, what);
				models++;
			}
	ck_assert_int_eq(models, 7 * 4 * 128 - 3 * 128);
}
END_TEST

/* Save ps under a config JSON claiming c; the path. */
static void save_claiming(const char *path, const struct nn_params *ps,
			  const struct model_config *c)
{
	char *json = model_config_to_json(c);
	ck_assert(json != NULL);
	ck_assert_int_eq(nn_checkpoint_save(path, ps, NULL, json, 1), TENSOR_OK);
	free(json);
}

/* A config read from a checkpoint is checked against the file's tensor headers before
 * anything is allocated: one that misstates dim, vocab_size, max_len, layers or ff_hidden is
 * refused naming the field (or the count), with no tensor allocated. */
START_TEST(test_config_from_checkpoint)
{
	char dir[] = "/tmp/cformer_cfgXXXXXX", path[64];
	ck_assert(mkdtemp(dir) != NULL);
	snprintf(path, sizeof path, "%s/m.safetensors", dir);
	struct model_config c = tiny("linformer:2"), got;
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	struct nn_params ps;
	struct model_classifier m;
	make_classifier(&m, &ps, &c, TENSOR_F32, 3);
	save_claiming(path, &ps, &c);
	ck_assert_msg(model_config_from_checkpoint(path, &got) == TENSOR_OK, "%s",
		      tensor_last_error());
	assert_config_eq(&got, &c);

	struct {
		const char *field, *says;
		int64_t value;
	} lies[] = { { "dim", "its config's dim 16384 does not match its tensors (embed.weight is "
			      "[11,8])",
		       16384 },
		     { "vocab_size", "its config's vocab_size 4096 does not match", 4096 },
		     { "max_len", "its config's max_len 1048576 does not match", 1048576 },
		     { "layers", "its config's layers 3 does not match its tensors (layers.0 to "
				 "layers.1)",
		       3 },
		     { "ff_hidden", "does not describe its tensors", 1 << 20 } };
	for (size_t k = 0; k < sizeof lies / sizeof lies[0]; k++) {
		struct model_config bad = c;
		if (!strcmp(lies[k].field, "dim"))
			bad.dim = lies[k].value;
		else if (!strcmp(lies[k].field, "vocab_size"))
			bad.vocab_size = lies[k].value;
		else if (!strcmp(lies[k].field, "max_len"))
			bad.max_len = lies[k].value;
		else if (!strcmp(lies[k].field, "layers"))
			bad.layers = 3, bad.attention[2] = NN_ATTN_LINEAR;
		else
			bad.ff_hidden = lies[k].value;
		save_claiming(path, &ps, &bad);
		size_t live = tensor_mem_stats(TENSOR_CPU).live_bytes;
		tu_assert_error(model_config_from_checkpoint(path, &got) < 0, TENSOR_ERR_ARG, path,
				lies[k].says);
		ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live);
	}
	model_classifier_free(&m);
	drop_params(&ps);

	/* an MLM model's checkpoint is a model of its config too */
	struct model_mlm mlm;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 4), TENSOR_OK);
	ck_assert_int_eq(model_mlm_init(&mlm, &ps, &c), TENSOR_OK);
	save_claiming(path, &ps, &c);
	ck_assert_msg(model_config_from_checkpoint(path, &got) == TENSOR_OK, "%s",
		      tensor_last_error());
	model_mlm_free(&mlm);
	drop_params(&ps);
	/* no config, no file */
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 4), TENSOR_OK);
	ck_assert_int_eq(nn_checkpoint_save(path, &ps, NULL, NULL, 1), TENSOR_OK);
	tu_assert_error(model_config_from_checkpoint(path, &got) < 0, TENSOR_ERR_ARG, path,
			"no \"config\"");
	drop_params(&ps);
	unlink(path);
	tu_assert_error(model_config_from_checkpoint(path, &got) < 0, TENSOR_ERR_IO, path,
			"cannot open");
	rmdir(dir);
}
END_TEST

/* The memory estimate grows with what costs memory and is refused for a bad config. */
/* tests/data/checkpoints/conv_linformer_v0.safetensors: a conv-linformer
 * classifier (2 layers, dim 8, n 8, k 4) saved with AdamW state before
 * sequential_heads left the config and before nn's masks changed polarity.
 * It still loads, and gives the logits that build printed for these ids. */
START_TEST(test_old_checkpoint_loads)
{
	char path[4096];
	const char *srcdir = getenv("srcdir");
	snprintf(path, sizeof path, "%s/tests/data/checkpoints/conv_linformer_v0.safetensors",
		 srcdir ? srcdir : ".");
	struct model_config c;
	ck_assert_msg(model_config_from_checkpoint(path, &c) == TENSOR_OK, "%s",
		      tensor_last_error());
	struct nn_params ps;
	struct model_classifier m;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, c.seed), TENSOR_OK);
	ck_assert_int_eq(model_classifier_init(&m, &ps, &c), TENSOR_OK);
	struct nn_adamw opt;
	ck_assert_int_eq(nn_adamw_init(&opt, &ps, 1e-3, 0.9, 0.999, 1e-8, 0.01), TENSOR_OK);
	int64_t step = -1;
	ck_assert_msg(nn_checkpoint_load(path, &ps, &opt, &step) == TENSOR_OK, "%s",
		      tensor_last_error());
	ck_assert_int_eq(step, 1);
	ck_assert_int_eq(opt.step, 1);
	nn_params_train(&ps, false);
	tensor_scope_begin();
	struct tensor *ids = tensor_from_data(
	    TENSOR_I32, TENSOR_CPU, 2, (int64_t[]){ 2, 8 },
	    (const int32_t[]){ 5, 17, 200, 3, 99, 42, 7, 260, 8, 150, 33, 61, 2, 0, 0, 0 });
	struct tensor *mask =
	    tensor_from_data(TENSOR_I32, TENSOR_CPU, 2, (int64_t[]){ 2, 8 },
			     (const int32_t[]){ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0 });
	ag_no_grad_begin();
	struct tensor *logits = model_classifier_forward(&m, ids, mask);
	ag_no_grad_end();
	const double want[4] = { 0.284173012, 0.0236701071, 0.26928404, -0.00105121732 };
	tu_assert_close(logits, want, 4, 1e-6, 1e-6);
	tensor_scope_end();
	nn_adamw_free(&opt);
	model_classifier_free(&m);
	drop_params(&ps);
}
END_TEST

START_TEST(test_estimate_bytes)
{
	struct model_config c;
	ck_assert_int_eq(model_config_preset(&c, "linformer", 30522, 512), TENSOR_OK);
	double train = model_estimate_bytes(&c, 32, true, false);
	double infer = model_estimate_bytes(&c, 32, false, false);
	ck_assert(train > infer && infer > 0);
	ck_assert(model_estimate_bytes(&c, 64, true, false) > train);
	ck_assert(model_estimate_bytes(&c, 32, true, true) > train); /* the decoder's logits */
	/* the parameters alone, at least: 4 copies of f32 when training */
	ck_assert(train >= 16.0 * (double)model_param_count(&c, true, false));
	struct model_config t;
	ck_assert_int_eq(model_config_preset(&t, "transformer", 30522, 4096), TENSOR_OK);
	struct model_config l = t;
	ck_assert_int_eq(model_config_preset(&l, "linformer", 30522, 4096), TENSOR_OK);
	/* quadratic scores against k slots */
	ck_assert(model_estimate_bytes(&t, 8, true, false) > 4 * model_estimate_bytes(&l, 8, true, false));
	ck_assert(model_estimate_bytes(&c, 0, true, false) < 0);
	c.heads = 3; /* does not divide dim */
	ck_assert(model_estimate_bytes(&c, 1, true, false) < 0);
	tensor_clear_error();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("models_size");
	TCase *tc = tu_tcase("counts");
	tcase_add_test(tc, test_param_count_hand);
	tcase_add_test(tc, test_param_count_all_modes);
	tcase_add_test(tc, test_config_from_checkpoint);
	tcase_add_test(tc, test_estimate_bytes);
	tcase_add_test(tc, test_old_checkpoint_loads);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
