/* Checkpoints: bit-exact safetensors round trips (f32, f64, packed, with
 * optimizer state and a resumed AdamW step), the file layout read back
 * independently with cJSON, BF16 files loading into f32/f64 parameters, and
 * the config. */
#define _GNU_SOURCE /* nftw, mkdtemp, strndup */
#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_common.h"

/* ---- round trips ----------------------------------------------------------------- */

static void round_trip(enum tensor_dtype dt, bool pack_src, bool pack_dst)
{
	char path[256];
	in_dir(path, "model.safetensors");
	struct nn_params a, b;
	model(&a, dt, 1);
	model(&b, dt, 2);
	if (pack_src)
		ck_assert_int_eq(nn_params_pack(&a), TENSOR_OK);
	if (pack_dst)
		ck_assert_int_eq(nn_params_pack(&b), TENSOR_OK);
	/* special finite values must survive bit for bit */
	struct tensor *w = a.items[0].value;
	if (dt == TENSOR_F32) {
		float *p = tensor_data(w);
		p[0] = -0.0f;
		p[1] = 1e-45f; /* subnormal */
		p[2] = -FLT_MAX;
	} else {
		double *p = tensor_data(w);
		p[0] = -0.0;
		p[1] = 5e-324;
		p[2] = DBL_MAX;
	}
	a.rng_counter = 12345;
	ck_assert_int_eq(nn_checkpoint_save(path, &a, NULL, "{\"dim\":5}", 42), TENSOR_OK);
	ck_assert_int_eq(files_in_dir(), 1); /* the temporary file was renamed away */
	int64_t step = -1;
	ck_assert_int_eq(nn_checkpoint_load(path, &b, NULL, &step), TENSOR_OK);
	ck_assert_int_eq(step, 42);
	ck_assert_uint_eq(b.rng_counter, 12345);
	ck_assert_uint_eq(b.seed, 1); /* the RNG state is (seed, counter) */
	assert_same("params", state_of(&a, NULL), state_of(&b, NULL));
	if (pack_dst) { /* values went into the flat buffer the views share, in its order */
		struct blob flat = { malloc(tensor_nbytes(b.flat)), tensor_nbytes(b.flat) };
		ck_assert_int_eq(tensor_to_host(b.flat, flat.p, flat.n), TENSOR_OK);
		size_t off = 0;
		for (int k = 0; k < b.n; k++) {
			const struct nn_param *p = &a.items[b.flat_order[k]];
			size_t nb = tensor_nbytes(p->value);
			uint8_t *want = malloc(nb + 1);
			ck_assert_int_eq(tensor_to_host(p->value, want, nb), TENSOR_OK);
			ck_assert_msg(memcmp(want, flat.p + off, nb) == 0, "flat: '%s' differs",
				      p->name);
			free(want);
			off += nb;
		}
		ck_assert_uint_eq(off, flat.n);
		free(flat.p);
	}
	ck_assert_int_eq(nn_checkpoint_load(path, &b, NULL, NULL), TENSOR_OK); /* step NULL */
	nn_params_free(&a);
	nn_params_free(&b);
}

START_TEST(test_round_trip)
{
	round_trip(TENSOR_F32, false, false);
	round_trip(TENSOR_F64, false, false);
	round_trip(TENSOR_F32, true, false);
	round_trip(TENSOR_F64, false, true);
	round_trip(TENSOR_F32, true, true);
}
END_TEST

START_TEST(test_round_trip_optimizer)
{
	for (int k = 0; k < 2; k++) {
		enum tensor_dtype dt = k ? TENSOR_F64 : TENSOR_F32;
		char path[256];
		in_dir(path, "opt.safetensors");
		struct nn_params a, b;
		struct nn_adamw oa, ob;
		model(&a, dt, 1);
		model(&b, dt, 2);
		if (k)
			ck_assert_int_eq(nn_params_pack(&b), TENSOR_OK); /* state in flat buffers */
		adamw_random(&oa, &a, 100, 7);
		adamw_random(&ob, &b, 200, 1);
		ck_assert_int_eq(nn_checkpoint_save(path, &a, &oa, NULL, 9), TENSOR_OK);
		int64_t step = 0;
		ck_assert_int_eq(nn_checkpoint_load(path, &b, &ob, &step), TENSOR_OK);
		ck_assert_int_eq(step, 9);
		ck_assert_int_eq(ob.step, 7);
		assert_same("params", state_of(&a, NULL), state_of(&b, NULL));
		assert_same("state", state_of(&a, &oa), state_of(&b, &ob));

		/* without opt the optimizer tensors are skipped */
		struct nn_params c;
		model(&c, dt, 3);
		ck_assert_int_eq(nn_checkpoint_load(path, &c, NULL, NULL), TENSOR_OK);
		assert_same("params", state_of(&a, NULL), state_of(&c, NULL));

		/* a file without optimizer state leaves the optimizer alone */
		in_dir(path, "plain.safetensors");
		ck_assert_int_eq(nn_checkpoint_save(path, &c, NULL, NULL, 3), TENSOR_OK);
		struct nn_adamw oc;
		adamw_random(&oc, &c, 300, 5);
		struct blob before = state_of(&c, &oc);
		ck_assert_int_eq(nn_checkpoint_load(path, &c, &oc, NULL), TENSOR_OK);
		assert_same("state", before, state_of(&c, &oc));
		ck_assert_int_eq(oc.step, 5);
		nn_adamw_free(&oa);
		nn_adamw_free(&ob);
		nn_adamw_free(&oc);
		nn_params_free(&a);
		nn_params_free(&b);
		nn_params_free(&c);
	}
}
END_TEST

/* Deterministic gradients for step k (heap, owned by the parameters). */
static void set_grads(struct nn_params *ps, uint64_t k)
{
	for (int i = 0; i < ps->n; i++) {
		struct tensor *p = ps->items[i].value;
		if (!p->grad) {
			tensor_heap_begin();
			p->grad = tensor_zeros(p->dtype, TENSOR_CPU, p->ndim, p->shape);
			tensor_heap_end();
		}
		if (tensor_numel(p) > 0)
			ck_assert_int_eq(tensor_uniform_(p->grad, 1000 * k + (uint64_t)i, -1, 1),
					 TENSOR_OK);
	}
}

/* Training, saving and resuming gives bit for bit the uninterrupted run. */
START_TEST(test_resume_adamw)
{
	static const struct pspec spec[] = { { "fc.weight", 2, { 4, 3 } },
					     { "fc.bias", 1, { 4 } } };
	char path[256];
	in_dir(path, "resume.safetensors");
	struct nn_params a, b;
	struct nn_adamw oa, ob;
	model_init(&a, TENSOR_F32, 1, spec, 2);
	model_init(&b, TENSOR_F32, 2, spec, 2);
	ck_assert_int_eq(nn_adamw_init(&oa, &a, 1e-2, 0.9, 0.999, 1e-8, 0.1), TENSOR_OK);
	ck_assert_int_eq(nn_adamw_init(&ob, &b, 1e-2, 0.9, 0.999, 1e-8, 0.1), TENSOR_OK);
	for (uint64_t k = 0; k < 3; k++) {
		set_grads(&a, k);
		ck_assert_int_eq(nn_adamw_step(&oa), TENSOR_OK);
	}
	ck_assert_int_eq(nn_checkpoint_save(path, &a, &oa, NULL, 3), TENSOR_OK);
	set_grads(&a, 3);
	ck_assert_int_eq(nn_adamw_step(&oa), TENSOR_OK); /* the uninterrupted 4th step */
	ck_assert_int_eq(nn_checkpoint_load(path, &b, &ob, NULL), TENSOR_OK);
	ck_assert_int_eq(ob.step, 3);
	set_grads(&b, 3);
	ck_assert_int_eq(nn_adamw_step(&ob), TENSOR_OK);
	ck_assert_int_eq(ob.step, oa.step);
	assert_same("params", state_of(&a, NULL), state_of(&b, NULL));
	assert_same("state", state_of(&a, &oa), state_of(&b, &ob));
	nn_adamw_free(&oa);
	nn_adamw_free(&ob);
	nn_params_free(&a);
	nn_params_free(&b);
}
END_TEST

/* Make parameter i of ps a non-contiguous view (same values, reversed
 * layout), as a device tensor would need staging: save goes through
 * tensor_to_host, load through a staged copy. */
static void make_strided(struct nn_params *ps, int i)
{
	struct tensor *t = ps->items[i].value;
	int nd = t->ndim, perm[TENSOR_MAX_DIMS];
	int64_t rev[TENSOR_MAX_DIMS];
	for (int d = 0; d < nd; d++) {
		rev[d] = t->shape[nd - 1 - d];
		perm[d] = nd - 1 - d;
	}
	tensor_heap_begin();
	struct tensor *store = tensor_empty(t->dtype, TENSOR_CPU, nd, rev);
	struct tensor *v = tensor_permute(store, perm); /* holds a reference on the storage */
	tensor_heap_end();
	ck_assert(v && tensor_copy_(v, t) == TENSOR_OK);
	ck_assert(nd < 2 || !tensor_is_contiguous(v));
	tensor_free(store);
	tensor_free(t);
	ps->items[i].value = v;
}

START_TEST(test_non_contiguous_parameters)
{
	char path[256];
	in_dir(path, "strided.safetensors");
	struct nn_params a, b, c;
	model(&a, TENSOR_F32, 1);
	model(&b, TENSOR_F32, 2);
	model(&c, TENSOR_F32, 3);
	make_strided(&a, 0);
	make_strided(&a, 5);
	make_strided(&c, 0);
	ck_assert_int_eq(nn_checkpoint_save(path, &a, NULL, NULL, 0), TENSOR_OK);
	ck_assert_int_eq(nn_checkpoint_load(path, &b, NULL, NULL), TENSOR_OK); /* contiguous */
	ck_assert_int_eq(nn_checkpoint_load(path, &c, NULL, NULL), TENSOR_OK); /* strided */
	for (int i = 0; i < a.n; i++) {
		double *want = tu_values(a.items[i].value);
		int64_t n = tensor_numel(a.items[i].value);
		tu_assert_close(b.items[i].value, want, n, 0, 0);
		tu_assert_close(c.items[i].value, want, n, 0, 0);
		free(want);
	}
	nn_params_free(&a);
	nn_params_free(&b);
	nn_params_free(&c);
}
END_TEST

/* ---- the file itself, read without the loader ------------------------------------ */

/* The header of a safetensors file parsed with cJSON (not the loader), after
 * checking the layout: '{' first, fewer than 8 spaces of padding, data 8-byte
 * aligned. f receives the file, *n the header size. */
static cJSON *read_header(const char *path, struct blob *f, uint64_t *n)
{
	*f = file_blob(path);
	ck_assert_uint_ge(f->n, 9);
	*n = le64(f->p);
	ck_assert_uint_eq((8 + *n) % 8, 0);
	ck_assert_uint_le(8 + *n, f->n);
	ck_assert_int_eq(f->p[8], '{');
	char *json = strndup((const char *)f->p + 8, *n);
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithOpts(json, &end, false);
	ck_assert_msg(root != NULL, "header is not JSON: %s", json);
	for (const char *p = end; *p; p++)
		ck_assert_int_eq(*p, ' ');
	ck_assert_uint_le(*n - (size_t)(end - json), 7);
	free(json);
	return root;
}

START_TEST(test_file_layout)
{
	char path[256];
	in_dir(path, "layout.safetensors");
	struct nn_params a;
	struct nn_adamw oa;
	model(&a, TENSOR_F32, 1);
	adamw_random(&oa, &a, 5, 11);
	a.rng_counter = 99;
	const char *config = "{\"name\": \"tiny \\\"model\\\"\", \"layers\": [1, 2]}";
	ck_assert_int_eq(nn_checkpoint_save(path, &a, &oa, config, 42), TENSOR_OK);
	struct blob f;
	uint64_t n;
	cJSON *root = read_header(path, &f, &n);
	const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
	ck_assert(cJSON_IsObject(meta));
	for (const cJSON *c = meta->child; c; c = c->next)
		ck_assert_msg(cJSON_IsString(c), "metadata %s is not a string", c->string);
	static const char *const kv[][2] = {
		{ "format", "cformer" }, { "step", "42" },	     { "rng_counter", "99" },
		{ "seed", "1" },	 { "optimizer_step", "11" }, { "optimizer", "adamw" },
	};
	for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, kv[i][0]);
		ck_assert_msg(cJSON_IsString(v), "no %s", kv[i][0]);
		ck_assert_str_eq(v->valuestring, kv[i][1]);
	}
	ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(meta, "config")->valuestring, config);

	/* every parameter and its m and v, at its offsets, little-endian bytes */
	ck_assert_int_eq(cJSON_GetArraySize(root), 1 + 3 * a.n);
	uint64_t covered = 0;
	for (int i = 0; i < a.n; i++) {
		const struct tensor *ts[3] = { a.items[i].value, oa.m[i], oa.v[i] };
		static const char *const pre[3] = { "", "optimizer.m.", "optimizer.v." };
		for (int j = 0; j < 3; j++) {
			char name[256];
			snprintf(name, sizeof name, "%s%s", pre[j], a.items[i].name);
			const struct tensor *t = ts[j];
			const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, name);
			ck_assert_msg(cJSON_IsObject(e), "no tensor %s", name);
			ck_assert_int_eq(cJSON_GetArraySize(e), 3);
			ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(e, "dtype")->valuestring,
					 "F32");
			const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
			ck_assert_int_eq(cJSON_GetArraySize(sh), t->ndim);
			for (int d = 0; d < t->ndim; d++)
				ck_assert_int_eq(cJSON_GetArrayItem(sh, d)->valuedouble,
						 t->shape[d]);
			const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
			ck_assert_int_eq(cJSON_GetArraySize(off), 2);
			uint64_t b0 = (uint64_t)cJSON_GetArrayItem(off, 0)->valuedouble;
			uint64_t b1 = (uint64_t)cJSON_GetArrayItem(off, 1)->valuedouble;
			ck_assert_uint_eq(b1 - b0, tensor_nbytes(t));
			ck_assert_uint_le(8 + n + b1, f.n);
			covered += b1 - b0;
			/* the tensor's bytes as they lie in (little-endian) memory */
			ck_assert(b1 == b0 ||
				  memcmp(f.p + 8 + n + b0, tensor_data(t), b1 - b0) == 0);
		}
	}
	ck_assert_uint_eq(8 + n + covered, f.n); /* nothing else in the file */
	cJSON_Delete(root);
	free(f.p);
	nn_adamw_free(&oa);
	nn_params_free(&a);
}
END_TEST

/* a [3] f32, b [5] f64, c [1] f32: a list may hold several dtypes. */
static void mixed(struct nn_params *ps, uint64_t seed)
{
	static const struct pspec spec[] = { { "a", 1, { 3 } },
					     { "b", 1, { 5 } },
					     { "c", 1, { 1 } } };
	ck_assert_int_eq(nn_params_init(ps, TENSOR_F32, TENSOR_CPU, seed), TENSOR_OK);
	for (int i = 0; i < 3; i++) {
		ps->dtype = i == 1 ? TENSOR_F64 : TENSOR_F32;
		struct tensor *t = nn_param_new(ps, spec[i].name, 1, spec[i].shape, false);
		ck_assert(t && nn_init_normal(t, 0, 1, seed + (uint64_t)i) == TENSOR_OK);
	}
}

/* 8-byte tensors come first, so every tensor's data stays aligned. */
START_TEST(test_alignment_mixed_dtypes)
{
	char path[256];
	in_dir(path, "mixed.safetensors");
	struct nn_params a, b;
	mixed(&a, 1);
	mixed(&b, 2);
	ck_assert_int_eq(nn_checkpoint_save(path, &a, NULL, NULL, 0), TENSOR_OK);
	struct blob f;
	uint64_t n;
	cJSON *root = read_header(path, &f, &n);
	const cJSON *off = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(root, "b"), "data_offsets");
	ck_assert_int_eq(cJSON_GetArrayItem(off, 0)->valuedouble, 0);
	cJSON_Delete(root);
	free(f.p);
	ck_assert_int_eq(nn_checkpoint_load(path, &b, NULL, NULL), TENSOR_OK);
	assert_same("params", state_of(&a, NULL), state_of(&b, NULL));
	nn_params_free(&a);
	nn_params_free(&b);
}
END_TEST

/* ---- config ------------------------------------------------------------------ */

START_TEST(test_config)
{
	char path[256];
	in_dir(path, "cfg.safetensors");
	struct nn_params a;
	model(&a, TENSOR_F32, 1);
	const char *cfg = "{\"model\": \"linformer\", \"k\": [64, 32], \"note\": \"caf\xc3\xa9 "
			  "\\u00e9 \\\"q\\\"\", \"nested\": {\"a\": null, \"b\": true}}";
	ck_assert_int_eq(nn_checkpoint_save(path, &a, NULL, cfg, 1), TENSOR_OK);
	char *got = nn_checkpoint_config(path);
	ck_assert_msg(got != NULL, "%s", tensor_last_error());
	ck_assert_str_eq(got, cfg);
	free(got);

	/* no config saved */
	ck_assert_int_eq(nn_checkpoint_save(path, &a, NULL, NULL, 1), TENSOR_OK);
	tu_assert_error(nn_checkpoint_config(path) == NULL, TENSOR_ERR_ARG, path, "no \"config\"");
	/* missing file, corrupt file, truncated file */
	char bad[256];
	tu_assert_error(nn_checkpoint_config(in_dir(bad, "nope")) == NULL, TENSOR_ERR_IO, bad,
			"cannot open");
	write_all(in_dir(bad, "bad"), "\x05\0\0\0\0\0\0\0{xxxx", 13);
	tu_assert_error(nn_checkpoint_config(bad) == NULL, TENSOR_ERR_IO, bad, "not valid JSON");
	ck_assert_int_eq(nn_checkpoint_save(path, &a, NULL, cfg, 1), TENSOR_OK);
	struct blob f = file_blob(path);
	write_all(bad, f.p, f.n - 4); /* header intact, data cut */
	tu_assert_error(nn_checkpoint_config(bad) == NULL, TENSOR_ERR_IO, bad, "truncated");
	free(f.p);
	/* a config that is not JSON, in a file written by someone else */
	write_st(bad, "{'__metadata__':{'config':'{oops'}}", 0);
	tu_assert_error(nn_checkpoint_config(bad) == NULL, TENSOR_ERR_IO, bad, "not valid JSON");
	/* save refuses invalid config JSON */
	tu_assert_error(nn_checkpoint_save(path, &a, NULL, "{\"a\": 1,}", 1) < 0, TENSOR_ERR_ARG,
			path, "config_json is not valid JSON");
	tu_assert_error(nn_checkpoint_save(path, &a, NULL, "{} trailing", 1) < 0, TENSOR_ERR_ARG,
			path, "config_json");
	nn_params_free(&a);
}
END_TEST

/* The caller's metadata entries: written beside the library's, read back one by one (an
 * absent one is NULL, not an error), and the file loads as any other; bad entries are refused
 * before anything is written. */
START_TEST(test_meta)
{
	char path[256];
	in_dir(path, "meta.safetensors");
	struct nn_params a, b;
	model(&a, TENSOR_F32, 1);
	model(&b, TENSOR_F32, 2);
	const struct nn_checkpoint_meta meta[] = { { "config", "{\"dim\": 8}" },
						   { "text", "{\"n\": 64, \"keep_tail\": 20}" },
						   { "note", "not JSON: \"quoted\" \xc3\xa9" } };
	ck_assert_int_eq(nn_checkpoint_save_meta(path, &a, NULL, NULL, meta, 3, 5), TENSOR_OK);
	for (int i = 0; i < 3; i++) {
		char *v = NULL;
		ck_assert_int_eq(nn_checkpoint_meta(path, meta[i].key, &v), TENSOR_OK);
		ck_assert_str_eq(v, meta[i].value);
		free(v);
	}
	char *v = (char *)"x";
	ck_assert_int_eq(nn_checkpoint_meta(path, "absent", &v), TENSOR_OK);
	ck_assert_ptr_null(v);
	ck_assert_int_eq(nn_checkpoint_meta(path, "step", &v), TENSOR_OK); /* the library's too */
	ck_assert_str_eq(v, "5");
	free(v);
	char *cfg = nn_checkpoint_config(path);
	ck_assert_str_eq(cfg, meta[0].value);
	free(cfg);
	int64_t step = 0;
	ck_assert_int_eq(nn_checkpoint_load(path, &b, NULL, &step), TENSOR_OK);
	ck_assert_int_eq(step, 5);
	assert_same("parameters", state_of(&a, NULL), state_of(&b, NULL));
	/* refused, and the file stays as it was */
	struct blob before = file_blob(path);
	const struct {
		struct nn_checkpoint_meta m[2];
		int n;
		const char *msg;
	} bad[] = {
		{ { { "step", "7" } }, 1, "metadata key 'step' is the library's own" },
		{ { { "optimizer_lr", "1" } }, 1, "'optimizer_lr' is the library's own" },
		{ { { "ema_decay", "1" } }, 1, "'ema_decay' is the library's own" },
		{ { { "format", "x" } }, 1, "'format' is the library's own" },
		{ { { "text", "a" }, { "text", "b" } }, 2, "metadata key 'text' given twice" },
		{ { { "text", NULL } }, 1, "metadata entry 0: the value is NULL" },
		{ { { NULL, "x" } }, 1, "metadata entry 0: the key is NULL" },
		{ { { "run", "{oops" } }, 1, "run_json is not valid JSON" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		tu_assert_error(
		    nn_checkpoint_save_meta(path, &a, NULL, NULL, bad[i].m, bad[i].n, 6) < 0,
		    TENSOR_ERR_ARG, path, bad[i].msg);
	tu_assert_error(nn_checkpoint_save_meta(path, &a, NULL, NULL, NULL, 1, 6) < 0,
			TENSOR_ERR_ARG, path, "meta is NULL");
	assert_same("the file after refused saves", before, file_blob(path));
	ck_assert_int_eq(files_in_dir(), 1);
	/* errors of the reader name the file */
	tu_assert_error(nn_checkpoint_meta(path, "text", NULL) < 0, TENSOR_ERR_ARG, path,
			"value is NULL");
	char missing[256];
	tu_assert_error(nn_checkpoint_meta(in_dir(missing, "nope"), "text", &v) < 0, TENSOR_ERR_IO,
			missing, "cannot open");
	ck_assert_ptr_null(v);
	nn_params_free(&a);
	nn_params_free(&b);
}
END_TEST

/* ---- a run's whole state in one file --------------------------------------------- */

/* The bytes of every moving average of e. */
static struct blob ema_of(const struct nn_ema *e)
{
	struct blob b = { malloc(tensor_nbytes(e->flat) + 1), tensor_nbytes(e->flat) };
	ck_assert(b.p && tensor_to_host(e->flat, b.p, b.n) == TENSOR_OK);
	return b;
}

START_TEST(test_run_state)
{
	char path[256];
	in_dir(path, "last.safetensors");
	struct nn_params a, b;
	struct nn_adamw oa, ob;
	struct nn_ema ea, eb;
	model(&a, TENSOR_F32, 1);
	model(&b, TENSOR_F32, 2);
	ck_assert_int_eq(nn_params_pack(&a), TENSOR_OK);
	ck_assert_int_eq(nn_params_pack(&b), TENSOR_OK);
	adamw_random(&oa, &a, 100, 7);
	adamw_random(&ob, &b, 200, 1);
	ck_assert_int_eq(nn_ema_init(&ea, &a, 0.9), TENSOR_OK);
	ck_assert_int_eq(nn_ema_init(&eb, &b, 0.9), TENSOR_OK);
	ck_assert_int_eq(tensor_uniform_(ea.flat, 5, -1, 1), TENSOR_OK); /* not the weights */
	ea.updates = 7;
	const char *run = "{\"step\":9,\"best\":0.5,\"flags\":{\"lr\":\"1e-3\"}}";
	ck_assert_int_eq(nn_checkpoint_save_run(path, &a, &oa, &ea, "{\"dim\":5}", run, 9),
			 TENSOR_OK);
	char *got = NULL;
	int64_t step = 0;
	ck_assert_msg(nn_checkpoint_load_run(path, &b, &ob, &eb, &got, &step) == TENSOR_OK, "%s",
		      tensor_last_error());
	ck_assert_int_eq(step, 9);
	ck_assert_str_eq(got, run);
	free(got);
	ck_assert_int_eq(eb.updates, 7);
	assert_same("params", state_of(&a, NULL), state_of(&b, NULL));
	assert_same("adamw", state_of(&a, &oa), state_of(&b, &ob));
	assert_same("averages", ema_of(&ea), ema_of(&eb));

	/* a plain load takes the weights and skips the averages */
	struct nn_params c;
	model(&c, TENSOR_F32, 3);
	ck_assert_int_eq(nn_checkpoint_load(path, &c, NULL, NULL), TENSOR_OK);
	assert_same("params", state_of(&a, NULL), state_of(&c, NULL));
	/* asking for averages a file does not hold is an error that changes nothing */
	in_dir(path, "plain.safetensors");
	ck_assert_int_eq(nn_checkpoint_save(path, &a, &oa, NULL, 3), TENSOR_OK);
	struct blob before = state_of(&b, &ob);
	tu_assert_error(nn_checkpoint_load_run(path, &b, &ob, &eb, NULL, NULL) < 0, TENSOR_ERR_ARG,
			path, "no moving average");
	assert_same("unchanged", before, state_of(&b, &ob));
	/* no "run" metadata: NULL */
	got = (char *)1;
	ck_assert_int_eq(nn_checkpoint_load_run(path, &b, NULL, NULL, &got, NULL), TENSOR_OK);
	ck_assert_ptr_null(got);
	/* errors of the arguments */
	ck_assert_int_eq(nn_ema_swap(&ea), TENSOR_OK);
	tu_assert_error(nn_checkpoint_save_run(path, &a, NULL, &ea, NULL, NULL, 1) < 0,
			TENSOR_ERR_ARG, "moving average", "swapped");
	ck_assert_int_eq(nn_ema_swap(&ea), TENSOR_OK);
	tu_assert_error(nn_checkpoint_save_run(path, &a, NULL, &eb, NULL, NULL, 1) < 0,
			TENSOR_ERR_ARG, "moving average", "another nn_params");
	tu_assert_error(nn_checkpoint_save_run(path, &a, NULL, NULL, NULL, "{run", 1) < 0,
			TENSOR_ERR_ARG, "run_json", "not valid JSON");
	nn_ema_free(&ea);
	nn_ema_free(&eb);
	nn_adamw_free(&oa);
	nn_adamw_free(&ob);
	nn_params_free(&a);
	nn_params_free(&b);
	nn_params_free(&c);
}
END_TEST

/* NaN or inf values in a file are refused on loading, naming the tensor, the
 * count and the first bad element, and nothing changes. */
START_TEST(test_non_finite_refused)
{
	char path[256];
	in_dir(path, "nan.safetensors");
	for (int dt = TENSOR_F32; dt <= TENSOR_F64; dt++) {
		struct nn_params a, b;
		model(&a, (enum tensor_dtype)dt, 1);
		model(&b, (enum tensor_dtype)dt, 2);
		ck_assert_int_eq(nn_checkpoint_save(path, &a, NULL, NULL, 1), TENSOR_OK);
		/* the first tensor of the data is a.items[0], w [3, 5]: elements 0, 4, 8 */
		const struct tensor *w = a.items[0].value;
		size_t es = tensor_dtype_size(w->dtype);
		double bad[3] = { NAN, INFINITY, -INFINITY };
		for (int k = 0; k < 3; k++) {
			float f = (float)bad[k];
			poke_data(path, 4 * (size_t)k * es, es == 4 ? (void *)&f : (void *)&bad[k],
				  es);
		}
		struct blob before = state_of(&b, NULL);
		char count[96];
		snprintf(count, sizeof count,
			 "holds 3 non-finite values (NaN or inf) of %lld, the first at [0,0]: nan",
			 (long long)tensor_numel(w));
		tu_assert_error(nn_checkpoint_load(path, &b, NULL, NULL) < 0, TENSOR_ERR_ARG,
				a.items[0].name, count);
		assert_same("unchanged", before, state_of(&b, NULL));
		nn_params_free(&a);
		nn_params_free(&b);
	}
}
END_TEST

/* A safetensors file of BF16 tensors (w [2,3], b [3]) holding the patterns h;
 * single quotes in the header become double quotes. */
static void write_bf16_file(const char *path, const uint16_t *h)
{
	static const char header[] = "{'w':{'dtype':'BF16','shape':[2,3],'data_offsets':[0,12]},"
				     "'b':{'dtype':'BF16','shape':[3],'data_offsets':[12,18]}}";
	size_t hn = strlen(header);
	uint8_t b[256];
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)((uint64_t)hn >> (8 * i));
	for (size_t i = 0; i < hn; i++)
		b[8 + i] = header[i] == '\'' ? '"' : (uint8_t)header[i];
	for (int i = 0; i < 9; i++) { /* little-endian */
		b[8 + hn + 2 * i] = (uint8_t)(h[i] & 0xff);
		b[8 + hn + 2 * i + 1] = (uint8_t)(h[i] >> 8);
	}
	write_all(path, b, 8 + hn + 18);
}

/* A BF16 file (as other tools write bf16 weights) loads into f32 and f64
 * parameters with every value converted exactly (bf16 is the top half of an
 * f32); saved again (as F32) it reloads bit for bit; info reports BF16; a
 * non-finite BF16 value is refused as in F32 files. */
START_TEST(test_bf16_file)
{
	char path[256], again[256];
	in_dir(path, "bf16.safetensors");
	in_dir(again, "again.safetensors");
	/* 1, -(1 + 2^-7), the smallest denormal, the largest finite, -0, RNE(1/3),
	 * -123.5, the smallest normal, -largest */
	uint16_t h[9] = { 0x3f80, 0xbf81, 0x0001, 0x7f7f, 0x8000, 0x3eab, 0xc2f7, 0x0080, 0xff7f };
	write_bf16_file(path, h);
	for (int dt = TENSOR_F32; dt <= TENSOR_F64; dt++) {
		struct nn_params p, q;
		const struct pspec spec[2] = { { "w", 2, { 2, 3 } }, { "b", 1, { 3 } } };
		model_init(&p, (enum tensor_dtype)dt, 1, spec, 2);
		model_init(&q, (enum tensor_dtype)dt, 2, spec, 2);
		ck_assert_msg(nn_checkpoint_load(path, &p, NULL, NULL) == TENSOR_OK, "%s",
			      tensor_last_error());
		for (int i = 0; i < 9; i++) {
			const struct tensor *t = p.items[i < 6 ? 0 : 1].value;
			int j = i < 6 ? i : i - 6;
			uint32_t u = (uint32_t)h[i] << 16;
			float want;
			memcpy(&want, &u, 4);
			if (dt == TENSOR_F32) {
				uint32_t got;
				memcpy(&got, (const float *)tensor_data(t) + j, 4);
				ck_assert_msg(got == u, "f32 %d: 0x%08x, want 0x%08x", i, got, u);
			} else {
				double got = ((const double *)tensor_data(t))[j];
				bool same = got == (double)want && !signbit(got) == !signbit(want);
				ck_assert_msg(same, "f64 %d: %a, want %a", i, got, (double)want);
			}
		}
		ck_assert_int_eq(nn_checkpoint_save(again, &p, NULL, NULL, 3), TENSOR_OK);
		ck_assert_int_eq(nn_checkpoint_load(again, &q, NULL, NULL), TENSOR_OK);
		assert_same("saved again", state_of(&p, NULL), state_of(&q, NULL));
		nn_params_free(&p);
		nn_params_free(&q);
	}
	struct nn_checkpoint_info info;
	ck_assert_int_eq(nn_checkpoint_info(path, &info), TENSOR_OK);
	ck_assert_int_eq(info.n, 2);
	ck_assert_int_eq(nn_checkpoint_info_find(&info, "w")->dtype, TENSOR_BF16);
	ck_assert_int_eq(info.numel, 9);
	nn_checkpoint_info_free(&info);
	h[3] = 0x7f80; /* inf */
	h[7] = 0xffc1; /* NaN */
	write_bf16_file(path, h);
	struct nn_params p;
	const struct pspec spec[2] = { { "w", 2, { 2, 3 } }, { "b", 1, { 3 } } };
	model_init(&p, TENSOR_F32, 1, spec, 2);
	struct blob before = state_of(&p, NULL);
	tu_assert_error(nn_checkpoint_load(path, &p, NULL, NULL) < 0, TENSOR_ERR_ARG, "'w'",
			"holds 1 non-finite values (NaN or inf) of 6");
	assert_same("unchanged", before, state_of(&p, NULL));
	nn_params_free(&p);
}
END_TEST

/* The header alone tells the parameters, their count and the step. */
START_TEST(test_info)
{
	char path[256];
	in_dir(path, "info.safetensors");
	struct nn_params a;
	struct nn_adamw oa;
	model(&a, TENSOR_F64, 1);
	adamw_random(&oa, &a, 1, 2);
	ck_assert_int_eq(nn_checkpoint_save(path, &a, &oa, NULL, 12), TENSOR_OK);
	struct nn_checkpoint_info info;
	ck_assert_int_eq(nn_checkpoint_info(path, &info), TENSOR_OK);
	ck_assert_int_eq(info.n, a.n); /* the optimizer's tensors left out, and counted */
	ck_assert_int_eq(info.optimizer_tensors, 2 * a.n);
	ck_assert_int_eq(info.numel, nn_params_count(&a));
	ck_assert_int_eq(info.step, 12);
	for (int i = 0; i < a.n; i++) {
		const struct nn_checkpoint_tensor *t = nn_checkpoint_info_find(&info, a.items[i].name);
		ck_assert_ptr_nonnull(t);
		ck_assert_int_eq(t->dtype, TENSOR_F64);
		ck_assert_int_eq(t->ndim, a.items[i].value->ndim);
		for (int d = 0; d < t->ndim; d++)
			ck_assert_int_eq(t->shape[d], a.items[i].value->shape[d]);
	}
	ck_assert_ptr_null(nn_checkpoint_info_find(&info, "nope"));
	nn_checkpoint_info_free(&info);
	ck_assert_int_eq(info.n, 0);
	/* a truncated header and a missing file are errors naming the file */
	struct blob b = file_blob(path);
	write_all(path, b.p, 20);
	free(b.p);
	tu_assert_error(nn_checkpoint_info(path, &info) < 0, TENSOR_ERR_IO, path, NULL);
	ck_assert_int_eq(info.n, 0);
	in_dir(path, "missing.safetensors");
	tu_assert_error(nn_checkpoint_info(path, &info) < 0, TENSOR_ERR_IO, path, "cannot open");
	nn_adamw_free(&oa);
	nn_params_free(&a);
}
END_TEST

static int points[8], npoints;
static char seen_tmp[8];

static void record_point(const char *path, int point)
{
	(void)path;
	if (npoints < 8) {
		seen_tmp[npoints] = (char)files_in_dir();
		points[npoints++] = point;
	}
}

/* A save passes its crash points in order; the temporary file exists only
 * between them, beside the old file. */
START_TEST(test_crash_points)
{
	char path[256];
	in_dir(path, "m.safetensors");
	struct nn_params a;
	model(&a, TENSOR_F32, 1);
	ck_assert_int_eq(nn_checkpoint_save(path, &a, NULL, NULL, 1), TENSOR_OK);
	nn_checkpoint_set_crash_hook(record_point);
	ck_assert_int_eq(nn_checkpoint_save(path, &a, NULL, NULL, 2), TENSOR_OK);
	nn_checkpoint_set_crash_hook(NULL);
	const int want[4] = { NN_CKPT_BEGIN, NN_CKPT_HEADER_WRITTEN, NN_CKPT_FILE_WRITTEN,
			      NN_CKPT_RENAMED };
	const char files[4] = { 1, 2, 2, 1 };
	ck_assert_int_eq(npoints, 4);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(points[i], want[i]);
		ck_assert_int_eq(seen_tmp[i], files[i]);
	}
	nn_params_free(&a);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("nn_checkpoint");
	TCase *tc = tcase("round_trip");
	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_round_trip_optimizer);
	tcase_add_test(tc, test_resume_adamw);
	tcase_add_test(tc, test_non_contiguous_parameters);
	suite_add_tcase(s, tc);
	tc = tcase("format");
	tcase_add_test(tc, test_file_layout);
	tcase_add_test(tc, test_alignment_mixed_dtypes);
	tcase_add_test(tc, test_config);
	tcase_add_test(tc, test_meta);
	tcase_add_test(tc, test_bf16_file);
	suite_add_tcase(s, tc);
	tc = tcase("run_state");
	tcase_add_test(tc, test_run_state);
	tcase_add_test(tc, test_non_finite_refused);
	tcase_add_test(tc, test_info);
	tcase_add_test(tc, test_crash_points);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
