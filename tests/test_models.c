/* models (the configuration is in test_models_config.c): the summary; output
 * shapes of every preset and sharing mode;
 * gradient checks of tiny models; overfitting a batch; no-grad inference
 * (same logits, lower peak); pre/post-norm; padding invariance; checkpoints;
 * errors. The heads are in test_models_heads.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gradcheck.h"
#include "models_common.h"

/* ---- helpers ------------------------------------------------------------------ */

static double max_abs_diff(const struct tensor *a, const struct tensor *b)
{
	double *va = tu_values(a), *vb = tu_values(b), d = 0;
	for (int64_t i = 0; i < tensor_numel(a); i++)
		d = fmax(d, fabs(va[i] - vb[i]));
	free(va);
	free(vb);
	return d;
}

/* ---- shapes, names, summary ------------------------------------------------------------ */

START_TEST(test_output_shapes)
{
	const char *presets[] = {
		"transformer:2", "linformer:2", "conv-linformer:2", "MX", "RR", "CC"
	};
	const int64_t B = 3, len[3] = { 8, 5, 1 };
	for (int p = 0; p < 6; p++)
		for (int s = 0; s < 4; s++)
			for (int seq = 0; seq < 2; seq++) {
				struct model_config c = tiny(presets[p]);
				c.sharing = (enum nn_proj_sharing)s;
				if ((p == 2 || p == 3) && s == NN_SHARE_LAYERWISE)
					continue; /* mixed kinds: refused (test_resolve_errors) */
				struct nn_params ps;
				ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 3),
						 TENSOR_OK);
				struct model_classifier cls;
				struct model_mlm mlm;
				ck_assert_msg(model_classifier_init(&cls, &ps, &c) == TENSOR_OK,
					      "%s", tensor_last_error());
				struct nn_params ps2;
				ck_assert_int_eq(nn_params_init(&ps2, TENSOR_F32, TENSOR_CPU, 3),
						 TENSOR_OK);
				ck_assert_int_eq(model_mlm_init(&mlm, &ps2, &c), TENSOR_OK);
				model_encoder_set_sequential_heads(&cls.enc, seq);
				model_encoder_set_sequential_heads(&mlm.enc, seq);
				for (int64_t T = 4; T <= 8; T += 4) {
					struct tensor *ids = rand_ids(B, T, 11, T);
					struct tensor *mask = prefix_mask(B, T, len);
					for (int mk = 0; mk < 2; mk++) {
						const struct tensor *m = mk ? mask : NULL;
						tu_assert_shape(
						    model_encoder_forward(&cls.enc, ids, m), 3,
						    (int64_t[]){ B, T, 8 });
						tu_assert_shape(
						    model_classifier_forward(&cls, ids, m), 2,
						    (int64_t[]){ B, 3 });
						tu_assert_shape(model_mlm_forward(&mlm, ids, m), 3,
								(int64_t[]){ B, T, 11 });
					}
				}
				model_classifier_free(&cls);
				model_mlm_free(&mlm);
				drop_params(&ps);
				drop_params(&ps2);
			}
}
END_TEST

START_TEST(test_parameter_names)
{
	struct model_config c = tiny("LC");
	c.sharing = NN_SHARE_KV;
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	struct model_classifier cls;
	ck_assert_int_eq(model_classifier_init(&cls, &ps, &c), TENSOR_OK);
	const char *present[] = { "embed.weight",
				  "pos.weight",
				  "layers.0.norm1.weight",
				  "layers.0.norm1.bias",
				  "layers.0.attn.q_proj.weight",
				  "layers.0.attn.out_proj.bias",
				  "layers.0.attn.E.weight",
				  "layers.0.norm2.weight",
				  "layers.0.ff.fc1.weight",
				  "layers.0.ff.fc2.bias",
				  "layers.1.attn.E.weight",
				  "layers.1.attn.E.bias",
				  "norm.weight",
				  "norm.bias",
				  "head.fc1.weight",
				  "head.fc2.bias" };
	for (size_t i = 0; i < sizeof present / sizeof *present; i++)
		ck_assert_msg(nn_params_find(&ps, present[i]) != NULL, "missing %s", present[i]);
	ck_assert(nn_params_find(&ps, "layers.0.attn.F.weight") == NULL); /* kv: E = F */
	ck_assert(nn_params_find(&ps, "proj.weight") == NULL);
	ck_assert_str_eq(ps.items[0].name, "embed.weight"); /* registration order */
	ck_assert_str_eq(ps.items[ps.n - 1].name, "head.fc2.bias");
	model_classifier_free(&cls);
	drop_params(&ps);

	/* layerwise: one "proj.weight"; RMSNorm, sinusoidal, post-norm, SwiGLU,
	 * untied MLM */
	c = tiny("LL");
	c.sharing = NN_SHARE_LAYERWISE;
	c.rms_norm = true;
	c.positions = MODEL_POS_SINUSOIDAL;
	c.pre_norm = false;
	c.swiglu = true;
	c.tie_embeddings = false;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	struct model_mlm mlm;
	ck_assert_int_eq(model_mlm_init(&mlm, &ps, &c), TENSOR_OK);
	const char *present2[] = { "proj.weight",	    "layers.1.norm2.weight",
				   "layers.0.ff.w1.weight", "layers.0.ff.w3.weight",
				   "mlm.dense.weight",	    "mlm.norm.bias",
				   "mlm.decoder.weight",    "mlm.decoder.bias" };
	for (size_t i = 0; i < sizeof present2 / sizeof *present2; i++)
		ck_assert_msg(nn_params_find(&ps, present2[i]) != NULL, "missing %s", present2[i]);
	const char *absent[] = { "pos.weight", "layers.0.norm1.bias", "norm.weight",
				 "layers.0.attn.E.weight" };
	for (size_t i = 0; i < sizeof absent / sizeof *absent; i++)
		ck_assert_msg(nn_params_find(&ps, absent[i]) == NULL, "unexpected %s", absent[i]);
	ck_assert_int_eq(nn_params_find(&ps, "proj.weight")->value->ndim, 2);
	ck_assert(mlm.decoder_bias == nn_params_find(&ps, "mlm.decoder.bias")->value);
	model_mlm_free(&mlm);
	drop_params(&ps);
}
END_TEST

START_TEST(test_summary)
{
	struct model_config c;
	ck_assert_int_eq(model_config_preset(&c, "linformer", 30522, 512), TENSOR_OK);
	c.k_schedule = MODEL_K_LINEAR;
	c.k_first = 128;
	c.k_last = 32;
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	model_summary(&c, 1234567, f);
	fclose(f);
	ck_assert_msg(strstr(buf, "linformer [LLLL]") && strstr(buf, "k 128,96,64,32") &&
			  strstr(buf, "sharing headwise") && strstr(buf, "1234567 parameters") &&
			  strstr(buf, "dim 256") && strstr(buf, "pre-norm LayerNorm, positions learned") &&
			  strstr(buf, "gelu") && !strstr(buf, "conv"),
		      "%s", buf);
	ck_assert(strchr(buf, '\n') == buf + len - 1); /* one line */
	free(buf);
	ck_assert_int_eq(model_config_preset(&c, "SL", 100, 64), TENSOR_OK);
	c.swiglu = true;
	c.rms_norm = true;
	c.pre_norm = false;
	c.positions = MODEL_POS_NONE;
	c.position_kernel = 3;
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	f = open_memstream(&buf, &len);
	model_summary(&c, -1, f);
	fclose(f);
	ck_assert_msg(strstr(buf, "pattern [SL]") && strstr(buf, "k -,64") &&
			  strstr(buf, "swiglu") && strstr(buf, "post-norm RMSNorm, positions none + conv 3") &&
			  !strstr(buf, "parameters"),
		      "%s", buf);
	free(buf);
	ck_assert_int_eq(model_config_preset(&c, "conv-linformer:6", 100, 64), TENSOR_OK);
	c.sharing = NN_SHARE_KV;
	c.conv_dense = true;
	c.shared_kv_head = true;
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	f = open_memstream(&buf, &len);
	model_summary(&c, 10, f);
	fclose(f);
	ck_assert_msg(strstr(buf, "conv-linformer [LLLCCC]") && strstr(buf, "sharing kv") &&
			  strstr(buf, "dense conv") && strstr(buf, "shared kv head"),
		      "%s", buf);
	free(buf);
	ck_assert_int_eq(model_config_preset(&c, "transformer", 100, 64), TENSOR_OK);
	f = open_memstream(&buf, &len);
	model_summary(&c, 10, f);
	fclose(f);
	ck_assert_msg(strstr(buf, "transformer [SSSS]") && !strstr(buf, "sharing"), "%s", buf);
	free(buf);
	char pat[MODEL_MAX_LAYERS + 1];
	ck_assert_str_eq(model_config_pattern(&c, pat), "SSSS");
	c.attention[1] = NN_NATTN; /* not a kind */
	ck_assert_str_eq(model_config_pattern(&c, pat), "S?SS");
	ck_assert_str_eq(model_config_pattern(NULL, pat), "");
	c.layers = 0;
	f = open_memstream(&buf, &len);
	model_summary(&c, 10, f);
	model_summary(NULL, 10, f); /* nothing */
	fclose(f);
	ck_assert_msg(strstr(buf, "invalid config"), "%s", buf);
	free(buf);
}
END_TEST

/* ---- gradients ------------------------------------------------------------------------ */

struct cls_ctx {
	const struct model_classifier *cls;
	const struct model_mlm *mlm;
	const struct tensor *ids, *mask;
};

static struct tensor *f_model(struct tensor *const *in, void *ctx)
{
	(void)in; /* the parameters, read by the model */
	const struct cls_ctx *c = ctx;
	return c->cls ? model_classifier_forward(c->cls, c->ids, c->mask)
		      : model_mlm_forward(c->mlm, c->ids, c->mask);
}

/* Gradient check of a classifier (or MLM) over every parameter, with a batch
 * of two sequences, one padded. */
/* seq: heads one at a time (a run option) */
static void grad_check(const char *name, const struct model_config *cfg, bool mlm, bool seq)
{
	struct model_config cc = *cfg, *c = &cc; /* smaller hidden sizes: fewer evaluations */
	cc.ff_hidden = cc.ff_hidden < 8 ? cc.ff_hidden : 8;
	cc.head_hidden = 4;
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 21), TENSOR_OK);
	struct model_classifier cls;
	struct model_mlm lm;
	int rc = mlm ? model_mlm_init(&lm, &ps, c) : model_classifier_init(&cls, &ps, c);
	ck_assert_msg(rc == TENSOR_OK, "%s: %s", name, tensor_last_error());
	model_encoder_set_sequential_heads(mlm ? &lm.enc : &cls.enc, seq);
	struct tensor **in = malloc(sizeof *in * (size_t)ps.n);
	for (int i = 0; i < ps.n; i++)
		in[i] = ps.items[i].value;
	/* the classifier sees padding ids (0) under the mask: the padding row gets
	 * no gradient and must not matter; the MLM predicts at every position, so
	 * it gets ordinary ids there */
	const int64_t v[12] = { 3, 1, 4, 1, 5, 9, 2, 6, 5, 0, 0, 0 },
		      vm[12] = { 3, 1, 4, 1, 5, 9, 2, 6, 5, 7, 8, 7 };
	struct tensor *ids = ids_tensor(2, 6, mlm ? vm : v);
	struct tensor *mask = prefix_mask(2, 6, (const int64_t[]){ 6, 3 });
	struct cls_ctx ctx = { mlm ? NULL : &cls, mlm ? &lm : NULL, ids, mask };
	gc_assert(name, f_model, &ctx, ps.n, in);
	int with_grad = 0;
	for (int i = 0; i < ps.n; i++)
		with_grad += ps.items[i].value->grad != NULL;
	int fixed = 0; /* random projections are not trained */
	for (int i = 0; i < ps.n; i++)
		fixed += !ps.items[i].value->requires_grad;
	ck_assert_msg(with_grad == ps.n - fixed, "%s: %d of %d parameters got a gradient", name,
		      with_grad, ps.n - fixed);
	free(in);
	if (mlm)
		model_mlm_free(&lm);
	else
		model_classifier_free(&cls);
	drop_params(&ps);
}

START_TEST(test_gradients_presets)
{
	const char *presets[] = { "transformer:2", "linformer:2", "conv-linformer:2" };
	struct model_config c = tiny(presets[_i]);
	grad_check(presets[_i], &c, false, false);
}
END_TEST

START_TEST(test_gradients_variants)
{
	/* post-norm, RMSNorm, SwiGLU, sinusoidal or no positions, CLS pooling, and the
	 * projections not covered by the presets: max / mean / random with none,
	 * kv and layerwise sharing, dense conv, a shared key/value head; an MLM
	 * with the tied decoder */
	struct model_config c = tiny("XM");
	switch (_i) {
	case 0:
		c.pre_norm = false;
		c.rms_norm = true;
		c.sharing = NN_SHARE_KV;
		c.pooling = MODEL_POOL_CLS;
		c.positions = MODEL_POS_NONE;
		c.position_kernel = 3;
		grad_check("max/mean post-norm rms kv cls conv-positions", &c, false, false);
		break;
	case 1:
		c = tiny("RC");
		c.swiglu = true;
		c.positions = MODEL_POS_SINUSOIDAL;
		c.conv_dense = true;
		c.shared_kv_head = true;
		c.sharing = NN_SHARE_NONE;
		grad_check("random/dense conv swiglu shared-kv none sequential", &c, false, true);
		break;
	default:
		c = tiny("LL");
		c.sharing = NN_SHARE_LAYERWISE;
		c.activation = NN_RELU;
		c.ff_hidden = 4;
		grad_check("mlm tied linformer layerwise", &c, true, false);
		break;
	}
}
END_TEST

/* ---- training ------------------------------------------------------------------------- */

START_TEST(test_overfit_batch)
{
	/* a tiny f32 Linformer classifier learns 16 random sequences with random
	 * labels (memorisation) to 100% training accuracy */
	const int64_t B = 16, T = 16;
	struct model_config c;
	ck_assert_int_eq(model_config_preset(&c, "linformer:2", 20, T), TENSOR_OK);
	c.dim = 16;
	c.heads = 2;
	c.ff_hidden = 32;
	c.k_first = c.k_last = 4;
	c.dropout = c.attn_dropout = 0;
	c.head_hidden = 16;
	c.num_classes = 2;
	struct nn_params ps;
	struct model_classifier m;
	make_classifier(&m, &ps, &c, TENSOR_F32, 5);
	ck_assert_int_eq(nn_params_pack(&ps), TENSOR_OK);
	struct nn_adamw opt;
	ck_assert_int_eq(nn_adamw_init(&opt, &ps, 3e-3, 0.9, 0.999, 1e-8, 0.01), TENSOR_OK);
	struct tensor *ids = rand_ids(B, T, 20, 77);
	int64_t lab[16], len[16];
	for (int i = 0; i < 16; i++) {
		lab[i] = (i * 7 + 3) % 5 < 2; /* 0/1, not a function of position */
		len[i] = T - (i % 4) * 3;     /* some rows padded */
	}
	struct tensor *labels = tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ B }, lab);
	struct tensor *mask = prefix_mask(B, T, len);
	double acc = 0;
	int step;
	for (step = 0; step < 300 && acc < 1.0; step++) {
		tensor_scope_begin();
		ck_assert_int_eq(nn_params_zero_grad(&ps), TENSOR_OK);
		struct tensor *logits = model_classifier_forward(&m, ids, mask);
		struct tensor *loss = nn_cross_entropy(logits, labels, -1, 0.0);
		ck_assert_msg(loss != NULL, "%s", tensor_last_error());
		acc = nn_accuracy(logits, labels, -1);
		ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
		ck_assert_int_eq(nn_adamw_step(&opt), TENSOR_OK);
		tensor_scope_end();
	}
	ck_assert_msg(acc == 1.0, "accuracy %g after %d steps", acc, step);
	printf("overfit: 100%% training accuracy on 16 examples after %d AdamW steps\n", step);
	/* the reached state holds in eval mode too */
	nn_params_train(&ps, false);
	ag_no_grad_begin();
	ck_assert(nn_accuracy(model_classifier_forward(&m, ids, mask), labels, -1) == 1.0);
	ag_no_grad_end();
	nn_adamw_free(&opt);
	model_classifier_free(&m);
	drop_params(&ps);
}
END_TEST

START_TEST(test_random_projection_stays_fixed)
{
	/* AdamW steps train everything but the fixed random projections */
	struct model_config c = tiny("RR");
	c.sharing = NN_SHARE_NONE;
	struct nn_params ps;
	struct model_classifier m;
	make_classifier(&m, &ps, &c, TENSOR_F32, 6);
	double **before = malloc(sizeof *before * (size_t)ps.n);
	for (int i = 0; i < ps.n; i++)
		before[i] = tu_values(ps.items[i].value);
	struct nn_adamw opt;
	ck_assert_int_eq(nn_adamw_init(&opt, &ps, 1e-2, 0.9, 0.999, 1e-8, 0.1), TENSOR_OK);
	struct tensor *ids = rand_ids(4, 8, 11, 3);
	struct tensor *labels = tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ 4 },
						 (int64_t[]){ 0, 1, 2, 1 });
	for (int step = 0; step < 2; step++) {
		ck_assert_int_eq(nn_params_zero_grad(&ps), TENSOR_OK);
		struct tensor *loss =
		    nn_cross_entropy(model_classifier_forward(&m, ids, NULL), labels, -1, 0);
		ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
		ck_assert_int_eq(nn_adamw_step(&opt), TENSOR_OK);
	}
	int fixed = 0;
	for (int i = 0; i < ps.n; i++) {
		struct tensor *v = ps.items[i].value;
		bool random = strstr(ps.items[i].name, ".E.") || strstr(ps.items[i].name, ".F.");
		double *now = tu_values(v), diff = 0;
		for (int64_t j = 0; j < tensor_numel(v); j++)
			diff = fmax(diff, fabs(now[j] - before[i][j]));
		if (random) {
			ck_assert_int_eq(v->ndim, 3); /* none: per head [H, k, n] */
			ck_assert_msg(diff == 0, "%s changed", ps.items[i].name);
			fixed++;
		} else {
			ck_assert_msg(diff > 0, "%s did not change", ps.items[i].name);
		}
		free(now);
		free(before[i]);
	}
	ck_assert_int_eq(fixed, 4);
	free(before);
	nn_adamw_free(&opt);
	model_classifier_free(&m);
	drop_params(&ps);
}
END_TEST

/* ---- inference ---------------------------------------------------------------------- */

/* Peak bytes (above the start) of one classifier forward in a scope of its own,
 * with grad on or off; the logits are kept in the caller's scope. */
static size_t forward_peak(const struct model_classifier *m, const struct tensor *ids, bool grad,
			   struct tensor **keep)
{
	if (!grad)
		ag_no_grad_begin();
	tensor_scope_begin();
	size_t base = tensor_mem_stats(TENSOR_CPU).live_bytes;
	tensor_mem_reset_peak(TENSOR_CPU);
	struct tensor *y = model_classifier_forward(m, ids, NULL);
	ck_assert_msg(y != NULL, "%s", tensor_last_error());
	size_t peak = tensor_mem_stats(TENSOR_CPU).peak_bytes - base;
	*keep = tensor_scope_keep(ag_detach(y));
	ag_tape_reset();
	tensor_scope_end();
	if (!grad)
		ag_no_grad_end();
	return peak;
}

START_TEST(test_no_grad_same_logits_lower_peak)
{
	const char *presets[2] = { "transformer:8", "linformer:8" };
	for (int p = 0; p < 2; p++) {
		struct model_config c;
		ck_assert_int_eq(model_config_preset(&c, presets[p], 50, 128), TENSOR_OK);
		c.dim = 32;
		c.heads = 4;
		c.ff_hidden = 64;
		c.k_first = c.k_last = 16;
		c.head_hidden = 16;
		struct nn_params ps;
		ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 9), TENSOR_OK);
		nn_params_train(&ps, false);
		struct model_classifier m;
		ck_assert_int_eq(model_classifier_init(&m, &ps, &c), TENSOR_OK);
		struct tensor *ids = rand_ids(2, 128, 50, 4), *yg, *yn;
		size_t grad = forward_peak(&m, ids, true, &yg);
		size_t nograd = forward_peak(&m, ids, false, &yn);
		ck_assert_msg(nograd * 4 < grad, "%s: no-grad peak %zu, grad peak %zu", presets[p],
			      nograd, grad);
		tu_assert_same(yn, yg, 0);
		/* the no-grad peak is one layer's working set: a 2-layer model needs
		 * as much */
		c.layers = 2;
		struct nn_params ps2;
		ck_assert_int_eq(nn_params_init(&ps2, TENSOR_F32, TENSOR_CPU, 9), TENSOR_OK);
		nn_params_train(&ps2, false);
		struct model_classifier m2;
		ck_assert_int_eq(model_classifier_init(&m2, &ps2, &c), TENSOR_OK);
		size_t shallow = forward_peak(&m2, ids, false, &yn);
		ck_assert_msg(nograd <= shallow + shallow / 20, "%s: 8 layers %zu, 2 layers %zu",
			      presets[p], nograd, shallow);
		printf("%s n 128 dim 32: forward peak %zu bytes with grad, %zu without (2 "
		       "layers: %zu)\n",
		       presets[p], grad, nograd, shallow);
		model_classifier_free(&m);
		model_classifier_free(&m2);
		drop_params(&ps);
		drop_params(&ps2);
	}
}
END_TEST

/* With no scope open, the forwards refuse (TENSOR_ERR_STATE, naming the
 * function) and allocate nothing; in the outermost scope a no-grad forward
 * gives the taped one's logits, and nothing stays once the scope ends
 * (LeakSanitizer checks). Runs without the fixture's scope. */
START_TEST(test_no_grad_outside_scopes)
{
	tensor_clear_error();
	ck_assert_int_eq(tensor_scope_depth(), 0);
	struct model_config c = tiny("LC");
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 2), TENSOR_OK);
	struct model_classifier m;
	struct model_mlm lm;
	ck_assert_int_eq(model_classifier_init(&m, &ps, &c), TENSOR_OK);
	struct nn_params ps2;
	ck_assert_int_eq(nn_params_init(&ps2, TENSOR_F32, TENSOR_CPU, 2), TENSOR_OK);
	ck_assert_int_eq(model_mlm_init(&lm, &ps2, &c), TENSOR_OK);
	struct tensor *ids = rand_ids(2, 8, 11, 1);
	struct tensor *mask = prefix_mask(2, 8, (const int64_t[]){ 8, 5 });
	size_t live = tensor_mem_stats(TENSOR_CPU).live_bytes;
	ag_no_grad_begin();
	tensor_mem_inject_failure(-1);
	tu_assert_error(!model_classifier_forward(&m, ids, mask), TENSOR_ERR_STATE,
			"model_classifier_forward", "outside a scope");
	tu_assert_error(!model_encoder_forward(&m.enc, ids, mask), TENSOR_ERR_STATE,
			"model_encoder_forward", "outside a scope");
	tu_assert_error(!model_mlm_forward(&lm, ids, mask), TENSOR_ERR_STATE, "model_mlm_forward",
			"tensor_scope_begin()");
	ck_assert_int_eq(tensor_mem_inject_failure(-1), 0);
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live);
	tensor_scope_begin();
	struct tensor *y = model_classifier_forward(&m, ids, mask);
	struct tensor *h = model_encoder_forward(&m.enc, ids, mask);
	struct tensor *z = model_mlm_forward(&lm, ids, mask);
	ag_no_grad_end();
	ck_assert(y && h && z && y->in_arena && h->in_arena && z->in_arena);
	struct tensor *y2 = model_classifier_forward(&m, ids, mask);
	tu_assert_same(y, y2, 1e-6);
	ag_tape_reset();
	tensor_scope_end();
	tensor_mem_trim();
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live);
	tensor_free(ids);
	tensor_free(mask);
	model_classifier_free(&m);
	model_mlm_free(&lm);
	nn_params_free(&ps);
	nn_params_free(&ps2);
}
END_TEST

START_TEST(test_pre_post_norm)
{
	struct tensor *ids = rand_ids(2, 8, 11, 3);
	struct tensor *y[2];
	for (int post = 0; post < 2; post++) {
		struct model_config c = tiny("LS");
		c.pre_norm = !post;
		struct nn_params ps;
		ck_assert_int_eq(nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 4), TENSOR_OK);
		struct model_encoder e;
		ck_assert_int_eq(model_encoder_init(&e, &ps, &c), TENSOR_OK);
		y[post] = model_encoder_forward(&e, ids, NULL);
		ck_assert(y[post] != NULL);
		if (post) {
			/* post-norm ends in a LayerNorm (weight 1, bias 0 at init): every
			 * position has mean 0 and variance 1 */
			double *v = tu_values(y[post]);
			for (int r = 0; r < 16; r++) {
				double m = 0, s = 0;
				for (int j = 0; j < 8; j++)
					m += v[r * 8 + j] / 8;
				for (int j = 0; j < 8; j++)
					s += (v[r * 8 + j] - m) * (v[r * 8 + j] - m) / 8;
				ck_assert(fabs(m) < 1e-9 && fabs(s - 1) < 1e-4);
			}
			free(v);
		}
		model_encoder_free(&e);
		drop_params(&ps);
	}
	ck_assert(max_abs_diff(y[0], y[1]) > 1e-2);
}
END_TEST

START_TEST(test_no_positions)
{
	/* without positions standard attention is permutation-equivariant:
	 * reversing the tokens reverses the outputs; learned positions, a
	 * Linformer projection (its own weights per position) and a trained
	 * convolutional encoding (each token's neighbours) break that */
	const int64_t T = 8, d = 8;
	const int64_t v_ids[8] = { 3, 9, 1, 4, 4, 10, 2, 6 }, v_rev[8] = { 6, 2, 10, 4, 4, 1, 9, 3 };
	struct tensor *ids = ids_tensor(1, T, v_ids), *rev = ids_tensor(1, T, v_rev);
	for (int v = 0; v < 4; v++) {
		struct model_config c = tiny(v == 2 ? "LL" : "SS");
		c.positions = v != 1 ? MODEL_POS_NONE : MODEL_POS_LEARNED;
		c.position_kernel = v == 3 ? 3 : 0;
		struct nn_params ps;
		ck_assert_int_eq(nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 4), TENSOR_OK);
		struct model_encoder e;
		ck_assert_int_eq(model_encoder_init(&e, &ps, &c), TENSOR_OK);
		ck_assert((nn_params_find(&ps, "pos.weight") != NULL) == (c.positions == MODEL_POS_LEARNED));
		struct nn_param *conv = nn_params_find(&ps, "pos_conv.weight");
		ck_assert((conv != NULL) == (v == 3));
		if (conv) /* zero at first: the identity, still equivariant */
			ck_assert_int_eq(nn_init_normal(conv->value, 0, 0.3, 5), TENSOR_OK);
		struct tensor *y = model_encoder_forward(&e, ids, NULL),
			      *yr = model_encoder_forward(&e, rev, NULL);
		ck_assert_msg(y && yr, "%s", tensor_last_error());
		double *a = tu_values(y), *b = tu_values(yr), diff = 0;
		for (int64_t t = 0; t < T; t++)
			for (int64_t j = 0; j < d; j++)
				diff = fmax(diff, fabs(a[t * d + j] - b[(T - 1 - t) * d + j]));
		if (v == 0)
			ck_assert_msg(diff < 1e-12, "no positions: %g", diff);
		else
			ck_assert_msg(diff > 1e-3, "%s: %g",
				      v == 1 ? "positions" : v == 2 ? "linformer" : "conv", diff);
		free(a);
		free(b);
		model_encoder_free(&e);
		drop_params(&ps);
	}
}
END_TEST

START_TEST(test_padding_invariance)
{
	/* a padded example gives the logits of the same example alone, unpadded,
	 * for every attention kind (mean pooling and the key mask hide padding),
	 * and with a convolutional position encoding (which reads padding as
	 * zeros) */
	const char *patterns[] = { "SS", "LL", "CC", "MM", "XX", "RR", "LC" };
	const int64_t T = 8, len[3] = { 8, 5, 2 };
	for (int p = 0; p < 7; p++)
		for (int s = 0; s < 3; s++) {
			struct model_config c = tiny(patterns[p]);
			c.sharing = s == 1 ? NN_SHARE_NONE : NN_SHARE_HEADWISE;
			c.position_kernel = s == 2 ? 3 : 0;
			struct nn_params ps;
			struct model_classifier m;
			make_classifier(&m, &ps, &c, TENSOR_F64, 8);
			struct nn_param *conv = nn_params_find(&ps, "pos_conv.weight");
			if (conv)
				ck_assert_int_eq(nn_init_normal(conv->value, 0, 0.3, 9), TENSOR_OK);
			struct tensor *ids = rand_ids(3, T, 11, 5 + p);
			struct tensor *mask = prefix_mask(3, T, len);
			struct tensor *y = model_classifier_forward(&m, ids, mask);
			ck_assert(y != NULL);
			double *vy = tu_values(y);
			for (int b = 0; b < 3; b++) {
				struct tensor *one =
				    tensor_narrow(tensor_narrow(ids, 0, b, 1), 1, 0, len[b]);
				struct tensor *alone = model_classifier_forward(&m, one, NULL);
				ck_assert_msg(alone != NULL, "%s", tensor_last_error());
				tu_assert_close(alone, vy + b * 3, 3, 1e-12, 1e-10);
			}
			/* the padding ids do not matter either */
			struct tensor *ids2 = tensor_contiguous(ids);
			for (int b = 1; b < 3; b++)
				for (int64_t t = len[b]; t < T; t++)
					tensor_fill_(
					    tensor_narrow(tensor_select(ids2, 0, b), 0, t, 1),
					    (double)(1 + t % 9));
			tu_assert_same(model_classifier_forward(&m, ids2, mask), y, 1e-12);
			free(vy);
			model_classifier_free(&m);
			drop_params(&ps);
		}
}
END_TEST

START_TEST(test_dropout_modes)
{
	/* training with dropout differs between calls; eval is deterministic and
	 * equals the same model without dropout */
	struct model_config c = tiny("LC");
	c.dropout = 0.3;
	c.attn_dropout = 0.2;
	struct nn_params ps, ps0;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 15), TENSOR_OK);
	ck_assert_int_eq(nn_params_init(&ps0, TENSOR_F64, TENSOR_CPU, 15), TENSOR_OK);
	struct model_classifier m, m0;
	ck_assert_int_eq(model_classifier_init(&m, &ps, &c), TENSOR_OK);
	c.dropout = c.attn_dropout = 0;
	ck_assert_int_eq(model_classifier_init(&m0, &ps0, &c), TENSOR_OK);
	struct tensor *ids = rand_ids(2, 8, 11, 16);
	struct tensor *a = model_classifier_forward(&m, ids, NULL);
	struct tensor *b = model_classifier_forward(&m, ids, NULL);
	ck_assert(max_abs_diff(a, b) > 1e-6);
	nn_params_train(&ps, false);
	struct tensor *e = model_classifier_forward(&m, ids, NULL);
	tu_assert_same(model_classifier_forward(&m, ids, NULL), e, 0);
	tu_assert_same(e, model_classifier_forward(&m0, ids, NULL), 0);
	model_classifier_free(&m);
	model_classifier_free(&m0);
	drop_params(&ps);
	drop_params(&ps0);
}
END_TEST

/* ---- checkpoints ------------------------------------------------------------------------ */

START_TEST(test_checkpoint_rebuild)
{
	/* save with the config, rebuild from the file alone: config -> init ->
	 * load, identical logits; the fixed random projections come from the
	 * file (a different seed would draw others) */
	char path[] = "/tmp/test_models_ckpt_XXXXXX";
	int fd = mkstemp(path);
	ck_assert(fd >= 0);
	close(fd);
	const char *patterns[] = { "LRCM", "RR" };
	for (int p = 0; p < 2; p++) {
		struct model_config c;
		ck_assert_int_eq(model_config_preset(&c, patterns[p], 40, 16), TENSOR_OK);
		c.dim = 16;
		c.heads = 4;
		c.ff_hidden = 24;
		c.k_first = c.k_last = 4;
		c.sharing = p ? NN_SHARE_LAYERWISE : NN_SHARE_NONE;
		c.pooling = MODEL_POOL_CLS;
		c.num_classes = 5;
		c.seed = 1234;
		struct nn_params ps;
		ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, c.seed), TENSOR_OK);
		nn_params_train(&ps, false);
		struct model_classifier m;
		ck_assert_int_eq(model_classifier_init(&m, &ps, &c), TENSOR_OK);
		struct tensor *ids = rand_ids(3, 12, 40, 17);
		struct tensor *mask = prefix_mask(3, 12, (const int64_t[]){ 12, 7, 3 });
		struct tensor *y = model_classifier_forward(&m, ids, mask);
		char *json = model_config_to_json(&m.enc.cfg);
		ck_assert(json != NULL);
		ck_assert_msg(nn_checkpoint_save(path, &ps, NULL, json, 5) == TENSOR_OK, "%s",
			      tensor_last_error());
		free(json);

		char *cj = nn_checkpoint_config(path);
		ck_assert_msg(cj != NULL, "%s", tensor_last_error());
		struct model_config c2;
		ck_assert_int_eq(model_config_from_json(&c2, cj), TENSOR_OK);
		free(cj);
		assert_config_eq(&c2, &m.enc.cfg);
		ck_assert(memcmp(c2.attention, m.enc.cfg.attention, sizeof c2.attention) == 0);
		ck_assert(memcmp(c2.k, m.enc.cfg.k, sizeof c2.k) == 0);
		struct nn_params ps2;
		ck_assert_int_eq(nn_params_init(&ps2, TENSOR_F32, TENSOR_CPU, c2.seed + 1),
				 TENSOR_OK);
		nn_params_train(&ps2, false);
		struct model_classifier m2;
		ck_assert_int_eq(model_classifier_init(&m2, &ps2, &c2), TENSOR_OK);
		/* before loading, the random projections differ */
		const char *rname = p ? "proj.weight" : "layers.1.attn.E.weight";
		struct nn_param *r1 = nn_params_find(&ps, rname), *r2 = nn_params_find(&ps2, rname);
		ck_assert(r1 && r2 && !r1->value->requires_grad);
		ck_assert(max_abs_diff(r1->value, r2->value) > 1e-3);
		int64_t step = 0;
		ck_assert_msg(nn_checkpoint_load(path, &ps2, NULL, &step) == TENSOR_OK, "%s",
			      tensor_last_error());
		ck_assert_int_eq(step, 5);
		ck_assert(max_abs_diff(r1->value, r2->value) == 0);
		tu_assert_same(model_classifier_forward(&m2, ids, mask), y, 0);
		model_classifier_free(&m);
		model_classifier_free(&m2);
		drop_params(&ps);
		drop_params(&ps2);
	}
	unlink(path);
}
END_TEST

/* ---- errors ---------------------------------------------------------------------------- */

START_TEST(test_init_errors)
{
	struct model_config c = tiny("LL");
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	struct model_encoder e;
	struct model_classifier cls;
	struct model_mlm mlm;
	tu_assert_error(model_encoder_init(NULL, &ps, &c) < 0, TENSOR_ERR_ARG, "model_encoder_init",
			NULL);
	tu_assert_error(model_encoder_init(&e, NULL, &c) < 0, TENSOR_ERR_ARG, "model_encoder_init",
			NULL);
	tu_assert_error(model_encoder_init(&e, &ps, NULL) < 0, TENSOR_ERR_ARG, "model_encoder_init",
			NULL);
	tu_assert_error(model_classifier_init(NULL, &ps, &c) < 0, TENSOR_ERR_ARG,
			"model_classifier_init", NULL);
	tu_assert_error(model_mlm_init(NULL, &ps, &c) < 0, TENSOR_ERR_ARG, "model_mlm_init", NULL);
	/* the config is resolved: its errors come back, nothing is registered */
	c.heads = 3;
	tu_assert_error(model_classifier_init(&cls, &ps, &c) < 0, TENSOR_ERR_ARG,
			"model_config_resolve", "heads 3");
	c = tiny("LL");
	c.sharing = NN_SHARE_LAYERWISE;
	c.k_schedule = MODEL_K_LINEAR;
	c.k_last = 2;
	tu_assert_error(model_mlm_init(&mlm, &ps, &c) < 0, TENSOR_ERR_ARG, "layerwise", "one k");
	ck_assert_int_eq(ps.n, 0);
	ck_assert(cls.enc.layers == NULL && mlm.enc.layers == NULL);
	/* a second model in the same list: names collide; the first still works */
	c = tiny("LL");
	ck_assert_int_eq(model_classifier_init(&cls, &ps, &c), TENSOR_OK);
	int n = ps.n;
	struct model_classifier dup;
	tu_assert_error(model_classifier_init(&dup, &ps, &c) < 0, TENSOR_ERR_ARG, "embed.weight",
			"already exists");
	ck_assert(dup.enc.layers == NULL && dup.fc1.weight == NULL);
	ck_assert_int_eq(ps.n, n);
	struct tensor *ids = rand_ids(2, 8, 11, 1);
	ck_assert(model_classifier_forward(&cls, ids, NULL) != NULL);
	model_classifier_free(&cls);
	/* a failure after the encoder: the MLM head's names collide */
	struct nn_params ps2;
	ck_assert_int_eq(nn_params_init(&ps2, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	ck_assert(nn_param_new(&ps2, "mlm.norm.weight", 1, (int64_t[]){ 8 }, true) != NULL);
	tu_assert_error(model_mlm_init(&mlm, &ps2, &c) < 0, TENSOR_ERR_ARG, "mlm.norm.weight",
			"already exists");
	ck_assert(mlm.enc.layers == NULL);
	ck_assert(nn_param_new(&ps2, "x", 1, (int64_t[]){ 1 }, true) != NULL);
	struct nn_params ps3;
	ck_assert_int_eq(nn_params_init(&ps3, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	ck_assert(nn_param_new(&ps3, "head.fc2.weight", 1, (int64_t[]){ 8 }, true) != NULL);
	c = tiny("transformer:1");
	c.positions = MODEL_POS_SINUSOIDAL; /* the sinusoid table is freed on failure */
	tu_assert_error(model_classifier_init(&cls, &ps3, &c) < 0, TENSOR_ERR_ARG,
			"head.fc2.weight", "already exists");
	model_encoder_free(NULL);
	model_classifier_free(NULL);
	model_mlm_free(NULL);
	drop_params(&ps);
	drop_params(&ps2);
	drop_params(&ps3);
}
END_TEST

START_TEST(test_forward_errors)
{
	struct model_config c = tiny("LS");
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	struct model_classifier m;
	struct model_mlm lm;
	ck_assert_int_eq(model_classifier_init(&m, &ps, &c), TENSOR_OK);
	struct nn_params ps2;
	ck_assert_int_eq(nn_params_init(&ps2, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	ck_assert_int_eq(model_mlm_init(&lm, &ps2, &c), TENSOR_OK);
	const struct model_encoder *e = &m.enc;
	struct tensor *ids = rand_ids(2, 4, 11, 1);
	struct tensor *fids = tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, (int64_t[]){ 2, 4 });
	tu_assert_error(!model_encoder_forward(e, fids, NULL), TENSOR_ERR_DTYPE,
			"model_encoder_forward", "ids [2,4] must be i32 or i64, got f32");
	struct tensor *ids1 = tensor_zeros(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ 4 });
	tu_assert_error(!model_encoder_forward(e, ids1, NULL), TENSOR_ERR_SHAPE,
			"model_encoder_forward", "ids [4] must be [B, T]");
	struct tensor *ids0 = tensor_zeros(TENSOR_I64, TENSOR_CPU, 2, (int64_t[]){ 2, 0 });
	tu_assert_error(!model_encoder_forward(e, ids0, NULL), TENSOR_ERR_SHAPE, "ids [2,0]",
			"T >= 1");
	struct tensor *ids9 = rand_ids(2, 9, 11, 2);
	tu_assert_error(!model_classifier_forward(&m, ids9, NULL), TENSOR_ERR_SHAPE,
			"model_encoder_forward", "T 9 is longer than max_len 8");
	struct tensor *bad = tensor_ones(TENSOR_I64, TENSOR_CPU, 2, (int64_t[]){ 2, 3 });
	tu_assert_error(!model_mlm_forward(&lm, ids, bad), TENSOR_ERR_SHAPE,
			"model_encoder_forward", "mask [2,3] must have the shape of ids [2,4]");
	struct tensor *oob = ids_tensor(1, 2, (const int64_t[]){ 3, 11 });
	tu_assert_error(!model_encoder_forward(e, oob, NULL), TENSOR_ERR_ARG, "nn_embedding",
			"index 11");
	tu_assert_error(!model_encoder_forward(NULL, ids, NULL), TENSOR_ERR_ARG,
			"model_encoder_forward", "not initialised");
	struct model_encoder ze = { 0 };
	tu_assert_error(!model_encoder_forward(&ze, ids, NULL), TENSOR_ERR_ARG,
			"model_encoder_forward", NULL);
	struct model_classifier zc = { 0 };
	tu_assert_error(!model_classifier_forward(&zc, ids, NULL), TENSOR_ERR_ARG,
			"model_classifier_forward", "not initialised");
	tu_assert_error(!model_classifier_forward(NULL, ids, NULL), TENSOR_ERR_ARG,
			"model_classifier_forward", NULL);
	struct model_mlm zm = { 0 };
	tu_assert_error(!model_mlm_forward(&zm, ids, NULL), TENSOR_ERR_ARG, "model_mlm_forward",
			"not initialised");
	/* NULL in: NULL out, the first error kept */
	tensor_error(TENSOR_ERR_IO, "earlier failure");
	ck_assert(model_encoder_forward(e, NULL, NULL) == NULL);
	ck_assert(model_classifier_forward(&m, NULL, NULL) == NULL);
	ck_assert(model_mlm_forward(&lm, NULL, NULL) == NULL);
	tu_assert_error(true, TENSOR_ERR_IO, "earlier failure", NULL);
	/* errors inside a no-grad forward close its scopes */
	int depth = tensor_scope_depth();
	ag_no_grad_begin();
	tu_assert_error(!model_classifier_forward(&m, oob, NULL), TENSOR_ERR_ARG, NULL, NULL);
	ag_no_grad_end();
	ck_assert_int_eq(tensor_scope_depth(), depth);
	/* masks of any numeric dtype; still works after all that */
	struct tensor *fm = tensor_ones(TENSOR_F32, TENSOR_CPU, 2, (int64_t[]){ 2, 4 });
	tu_assert_same(model_classifier_forward(&m, ids, fm),
		       model_classifier_forward(&m, ids, NULL), 1e-6);
	model_classifier_free(&m);
	model_mlm_free(&lm);
	drop_params(&ps);
	drop_params(&ps2);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("models");
	TCase *tc = tu_tcase("models");
	tcase_add_test(tc, test_summary);
	tcase_add_test(tc, test_output_shapes);
	tcase_add_test(tc, test_parameter_names);
	tcase_add_test(tc, test_pre_post_norm);
	tcase_add_test(tc, test_padding_invariance);
	tcase_add_test(tc, test_no_positions);
	tcase_add_test(tc, test_dropout_modes);
	tcase_add_test(tc, test_init_errors);
	tcase_add_test(tc, test_forward_errors);
	suite_add_tcase(s, tc);
	tc = tu_tcase("gradients");
	tcase_add_loop_test(tc, test_gradients_presets, 0, 3);
	tcase_add_loop_test(tc, test_gradients_variants, 0, 3);
	suite_add_tcase(s, tc);
	tc = tu_tcase("training");
	tcase_add_test(tc, test_overfit_batch);
	tcase_add_test(tc, test_random_projection_stays_fixed);
	tcase_add_test(tc, test_checkpoint_rebuild);
	suite_add_tcase(s, tc);
	tc = tu_tcase("inference");
	tcase_add_test(tc, test_no_grad_same_logits_lower_peak);
	suite_add_tcase(s, tc);
	tc = tcase_create("no scope"); /* no fixture: runs at scope depth 0 */
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_no_grad_outside_scopes);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
