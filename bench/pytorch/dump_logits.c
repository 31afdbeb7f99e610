/* Dump a small cformer model for bench/pytorch/check_equivalence.py and
 * check_doc.py: its parameters (a safetensors checkpoint whose metadata carries
 * the model config) and a JSON file with fixed token ids, their mask, the
 * logits and the encoder's hidden states. Built by `make check` (a check
 * program); by hand, from a build directory (after make):
 *
 *   cc -std=c11 -O2 -o dump_logits ../bench/pytorch/dump_logits.c \
 *      -I../libtensor -I../autograd -I../nn -I../models \
 *      .libs/libcformer.so -Wl,-rpath,$PWD/.libs -lm
 *   ./dump_logits PRESET SHARING N K T OUT.safetensors OUT.json [FIELD=VALUE...]
 *
 * PRESET is a cformer preset ("transformer:2", "conv-linformer:2", "LC", ...),
 * SHARING none|headwise|kv|layerwise, N = max_len, K the projection length,
 * T <= N the length of the ids. Sizes are tiny (dim 32, 2 heads, ff 64,
 * vocab 101); dropout is 0 and the model in eval mode. Each FIELD=VALUE sets a
 * scalar field of the model config by its JSON name and value (rms_norm=true,
 * positions=sinusoidal, pooling=attention, k_schedule=linear, ...); task=mlm
 * dumps a masked-language model (logits [B, T, vocab]) instead of the
 * classifier. Four rows: all real tokens, padding over the last quarter, a
 * single real token, and no real token. Every parameter gets extra noise so
 * that unit norms and zero biases are not left as they are (unless
 * DUMP_NO_NOISE is set: then the checkpoint holds cformer's init). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models.h"

#define B 4

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(void) /* [0, 1) */
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (double)(rng >> 11) / 9007199254740992.0;
}

static int perturb(struct nn_params *ps)
{
	for (int i = 0; i < ps->n; i++) {
		struct tensor *w = ps->items[i].value;
		int64_t len = tensor_numel(w);
		float *buf = malloc((size_t)len * sizeof *buf);
		if (!buf || tensor_to_host(w, buf, (size_t)len * sizeof *buf) < 0)
			return -1;
		for (int64_t j = 0; j < len; j++)
			buf[j] += (float)(0.2 * (uniform() - 0.5));
		struct tensor *src =
		    tensor_from_data(TENSOR_F32, TENSOR_CPU, w->ndim, w->shape, buf);
		int rc = src ? tensor_copy_(w, src) : -1;
		tensor_free(src);
		free(buf);
		if (rc < 0)
			return -1;
	}
	return 0;
}

/* ,"name_shape": [...], "name": [...] of an f32 tensor. */
static int write_floats(FILE *f, const char *name, const struct tensor *t)
{
	int64_t len = tensor_numel(t);
	float *buf = malloc((size_t)len * sizeof *buf);
	if (!buf || tensor_to_host(t, buf, (size_t)len * sizeof *buf) < 0) {
		free(buf);
		return -1;
	}
	fprintf(f, ",\n\"%s_shape\": [", name);
	for (int d = 0; d < t->ndim; d++)
		fprintf(f, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
	fprintf(f, "],\n\"%s\": [", name);
	for (int64_t j = 0; j < len; j++)
		fprintf(f, "%s%.9g", j ? ", " : "", (double)buf[j]);
	fprintf(f, "]");
	free(buf);
	return 0;
}

/* FIELD=VALUE into c: a scalar field of model_config_fields.h by its JSON name; 0 or -1. */
static int set_field(struct model_config *c, const char *arg)
{
	const char *eq = strchr(arg, '=');
	char name[64];
	if (!eq || (size_t)(eq - arg) >= sizeof name)
		return -1;
	memcpy(name, arg, (size_t)(eq - arg));
	name[eq - arg] = 0;
	const char *v = eq + 1;
	const struct model_config_field *f = model_config_field_find(name);
	if (!f)
		return -1;
	char *p = (char *)c + f->offset;
	switch (f->kind) {
	case MODEL_FIELD_INT: *(int64_t *)p = atoll(v); return 0;
	case MODEL_FIELD_BOOL: *(bool *)p = !strcmp(v, "true") || !strcmp(v, "1"); return 0;
	case MODEL_FIELD_DOUBLE: *(double *)p = atof(v); return 0;
	default:
		for (int e = 0; e < model_field_enum_count(f->kind); e++)
			if (!strcmp(v, model_field_enum_name(f->kind, e))) {
				*(int *)p = e;
				return 0;
			}
		return -1;
	}
}

static int fail(const char *what)
{
	fprintf(stderr, "dump_logits: %s: %s\n", what, tensor_last_error());
	return 1;
}

int main(int argc, char **argv)
{
	if (argc < 8) {
		fprintf(stderr,
			"usage: %s PRESET SHARING N K T OUT.safetensors OUT.json "
			"[FIELD=VALUE...] [task=mlm]\n",
			argv[0]);
		return 2;
	}
	int64_t n = atoll(argv[3]), k = atoll(argv[4]), t = atoll(argv[5]);
	struct model_config c;
	if (model_config_preset(&c, argv[1], 101, n) < 0)
		return fail("preset");
	int sh = nn_proj_sharing_parse(argv[2]);
	if (sh < 0 || t < 4 || t > n) {
		fprintf(stderr, "dump_logits: bad sharing '%s' or T %lld\n", argv[2], (long long)t);
		return 2;
	}
	c.sharing = (enum nn_proj_sharing)sh;
	c.dim = 32, c.heads = 2, c.ff_hidden = 64, c.head_hidden = 16, c.num_classes = 3;
	c.dropout = c.attn_dropout = 0;
	c.k_first = c.k_last = k;
	c.seed = 1234;
	bool mlm = false;
	for (int i = 8; i < argc; i++) {
		if (!strcmp(argv[i], "task=mlm")) {
			mlm = true;
		} else if (set_field(&c, argv[i]) < 0) {
			fprintf(stderr, "dump_logits: '%s': expected FIELD=VALUE of the config\n",
				argv[i]);
			return 2;
		}
	}
	if (model_config_resolve(&c) < 0)
		return fail("config");

	struct nn_params ps;
	struct model_classifier m = { 0 };
	struct model_mlm lm = { 0 };
	if (nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, c.seed) < 0 ||
	    (mlm ? model_mlm_init(&lm, &ps, &c) : model_classifier_init(&m, &ps, &c)) < 0)
		return fail("init");
	const struct model_encoder *enc = mlm ? &lm.enc : &m.enc;
	ps.training = false;
	if (!getenv("DUMP_NO_NOISE") && perturb(&ps) < 0)
		return fail("perturb");
	char *json = model_config_to_json(&enc->cfg);
	if (!json || nn_checkpoint_save(argv[6], &ps, NULL, json, 0) < 0)
		return fail("save");

	/* row 0 all real; row 1 padded after 3/4 of T; row 2 one real token; row 3 none */
	int32_t *ids = malloc(sizeof *ids * B * (size_t)t);
	int32_t *mask = malloc(sizeof *mask * B * (size_t)t);
	if (!ids || !mask)
		return fail("ids");
	for (int64_t b = 0; b < B; b++)
		for (int64_t j = 0; j < t; j++) {
			int64_t real = b == 0 ? t : b == 1 ? 3 * t / 4 : b == 2 ? 1 : 0;
			mask[b * t + j] = j < real;
			ids[b * t + j] = j < real ? 1 + (int32_t)(uniform() * 100) : 0;
		}
	int64_t shape[2] = { B, t };
	tensor_scope_begin(); /* the forwards' temporaries, results and inputs */
	struct tensor *ti = tensor_from_data(TENSOR_I32, TENSOR_CPU, 2, shape, ids);
	struct tensor *tm = tensor_from_data(TENSOR_I32, TENSOR_CPU, 2, shape, mask);
	ag_no_grad_begin();
	struct tensor *logits =
	    mlm ? model_mlm_forward(&lm, ti, tm) : model_classifier_forward(&m, ti, tm);
	struct tensor *hidden = model_encoder_forward(enc, ti, tm);
	ag_no_grad_end();
	if (!logits || !hidden)
		return fail("forward");

	FILE *f = fopen(argv[7], "w");
	if (!f)
		return perror(argv[7]), 1;
	fprintf(f, "{\"config\": %s,\n\"ids\": [", json);
	for (int64_t j = 0; j < B * t; j++)
		fprintf(f, "%s%d", j ? ", " : "", ids[j]);
	fprintf(f, "],\n\"mask\": [");
	for (int64_t j = 0; j < B * t; j++)
		fprintf(f, "%s%d", j ? ", " : "", mask[j]);
	fprintf(f, "],\n\"shape\": [%d, %lld]", B, (long long)t);
	int rc = write_floats(f, "logits", logits) < 0 || write_floats(f, "hidden", hidden) < 0;
	fprintf(f, "}\n");
	if (fclose(f) != 0 || rc)
		return fail(argv[7]);

	tensor_scope_end();
	free(ids);
	free(mask);
	free(json);
	model_classifier_free(&m);
	model_mlm_free(&lm);
	nn_params_free(&ps);
	return 0;
}
