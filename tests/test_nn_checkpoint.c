/* Checkpoints: bit-exact safetensors round trips (f32, f64, packed, with
 * optimizer state and a resumed AdamW step), the file layout read back
 * independently with cJSON, the config, every corrupt or mismatched file
 * giving its error with the destination untouched, and atomic saves. */
#define _GNU_SOURCE /* nftw, mkdtemp, strndup */
#include <cjson/cJSON.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn.h"
#include "testutil.h"

/* ---- fixture: a fresh directory per test ----------------------------------- */

static char dir[64];

static void dir_setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/cformer-ckpt-XXXXXX");
	ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static void dir_teardown(void)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static TCase *tcase(const char *name)
{
	TCase *tc = tu_tcase(name);
	tcase_add_checked_fixture(tc, dir_setup, dir_teardown);
	return tc;
}

/* dir/name in buf[256]. */
static char *in_dir(char *buf, const char *name)
{
	snprintf(buf, 256, "%s/%s", dir, name);
	return buf;
}

static bool exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

struct blob {
	uint8_t *p;
	size_t n;
};

static struct blob file_blob(const char *path)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "open %s: %s", path, strerror(errno));
	fseek(f, 0, SEEK_END);
	struct blob b = { NULL, (size_t)ftell(f) };
	fseek(f, 0, SEEK_SET);
	b.p = malloc(b.n + 1);
	ck_assert(b.p && fread(b.p, 1, b.n, f) == b.n);
	fclose(f);
	return b;
}

/* Assert a and b hold the same bytes, then free them. */
static void assert_same(const char *what, struct blob a, struct blob b)
{
	ck_assert_msg(a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0), "%s: bytes differ",
		      what);
	free(a.p);
	free(b.p);
}

static void write_all(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	ck_assert(f && fwrite(data, 1, n, f) == n);
	fclose(f);
}

/* A safetensors file: header (single quotes become double quotes) and
 * data_len bytes of data (1, 2, 3, ... as f32, then zeros). */
static void write_st(const char *path, const char *header, size_t data_len)
{
	size_t hn = strlen(header);
	uint8_t *b = calloc(8 + hn + data_len + 4, 1);
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)((uint64_t)hn >> (8 * i));
	for (size_t i = 0; i < hn; i++)
		b[8 + i] = header[i] == '\'' ? '"' : (uint8_t)header[i];
	for (size_t i = 0; i + 4 <= data_len; i += 4) {
		float v = (float)(i / 4 + 1);
		memcpy(b + 8 + hn + i, &v, 4);
	}
	write_all(path, b, 8 + hn + data_len);
	free(b);
}

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* ---- models ------------------------------------------------------------------ */

struct pspec {
	const char *name;
	int ndim;
	int64_t shape[3];
};

/* Odd sizes, a scalar and an empty tensor, so alignment and edge cases show. */
static const struct pspec MODEL[] = {
	{ "layers.0.weight", 2, { 3, 5 } }, { "layers.0.bias", 1, { 3 } },
	{ "norm.weight", 1, { 5 } },	    { "scale", 0, { 0 } },
	{ "empty", 2, { 0, 4 } },	    { "emb.weight", 3, { 2, 3, 2 } },
};
#define NMODEL ((int)(sizeof MODEL / sizeof MODEL[0]))

/* ps with the parameters of spec, filled from N(0, 1) seeded by seed. */
static void model_init(struct nn_params *ps, enum tensor_dtype dt, uint64_t seed,
		       const struct pspec *spec, int n)
{
	ck_assert_int_eq(nn_params_init(ps, dt, TENSOR_CPU, seed), TENSOR_OK);
	for (int i = 0; i < n; i++) {
		struct tensor *t =
		    nn_param_new(ps, spec[i].name, spec[i].ndim, spec[i].shape, i == 1);
		ck_assert_msg(t != NULL, "%s", tensor_last_error());
		if (tensor_numel(t) > 0)
			ck_assert_int_eq(nn_init_normal(t, 0, 1, nn_param_seed(ps, spec[i].name)),
					 TENSOR_OK);
	}
}

static void model(struct nn_params *ps, enum tensor_dtype dt, uint64_t seed)
{
	model_init(ps, dt, seed, MODEL, NMODEL);
}

/* The bytes of ps's parameters, or with o, of o's m and v, concatenated. */
static struct blob state_of(const struct nn_params *ps, const struct nn_adamw *o)
{
	struct blob b = { NULL, 0 };
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < ps->n; i++) {
			for (int j = 0; j < (o ? 2 : 1); j++) {
				const struct tensor *t = !o  ? ps->items[i].value
							 : j ? o->v[i]
							     : o->m[i];
				size_t nb = tensor_nbytes(t);
				if (pass == 1 && nb)
					ck_assert_int_eq(tensor_to_host(t, b.p + b.n, nb),
							 TENSOR_OK);
				b.n += nb;
			}
		}
		if (pass == 0) {
			b.p = malloc(b.n + 1);
			ck_assert(b.p != NULL);
			b.n = 0;
		}
	}
	return b;
}

/* AdamW state for ps with random m and v (v >= 0), as after some steps. */
static void adamw_random(struct nn_adamw *o, struct nn_params *ps, uint64_t seed, int64_t step)
{
	ck_assert_int_eq(nn_adamw_init(o, ps, 1e-3, 0.9, 0.999, 1e-8, 0.01), TENSOR_OK);
	for (int i = 0; i < ps->n; i++) {
		if (tensor_numel(o->m[i]) == 0)
			continue;
		ck_assert_int_eq(tensor_uniform_(o->m[i], seed + 2 * (uint64_t)i, -1, 1),
				 TENSOR_OK);
		ck_assert_int_eq(tensor_uniform_(o->v[i], seed + 2 * (uint64_t)i + 1, 0, 1),
				 TENSOR_OK);
	}
	o->step = step;
}

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
	/* special values must survive bit for bit */
	struct tensor *w = a.items[0].value;
	if (dt == TENSOR_F32) {
		float *p = tensor_data(w);
		p[0] = -0.0f;
		p[1] = 1e-45f; /* subnormal */
		p[2] = INFINITY;
		uint32_t nan = 0x7fc01234u; /* NaN with a payload */
		memcpy(&p[3], &nan, 4);
	} else {
		double *p = tensor_data(w);
		p[0] = -0.0;
		p[1] = 5e-324;
		p[2] = -INFINITY;
		uint64_t nan = 0x7ff8000000abcdefull;
		memcpy(&p[3], &nan, 8);
	}
	a.rng_counter = 12345;
	ck_assert_int_eq(nn_checkpoint_save(path, &a, NULL, "{\"dim\":5}", 42), TENSOR_OK);
	in_dir(path, "model.safetensors.tmp");
	ck_assert(!exists(path)); /* renamed away */
	in_dir(path, "model.safetensors");
	int64_t step = -1;
	ck_assert_int_eq(nn_checkpoint_load(path, &b, NULL, &step), TENSOR_OK);
	ck_assert_int_eq(step, 42);
	ck_assert_uint_eq(b.rng_counter, 12345);
	ck_assert_uint_eq(b.seed, 1); /* the RNG state is (seed, counter) */
	assert_same("params", state_of(&a, NULL), state_of(&b, NULL));
	if (pack_dst) { /* values went into the flat buffer the views share */
		struct blob flat = { malloc(tensor_nbytes(b.flat)), tensor_nbytes(b.flat) };
		ck_assert_int_eq(tensor_to_host(b.flat, flat.p, flat.n), TENSOR_OK);
		assert_same("flat", state_of(&a, NULL), flat);
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

/* ---- corrupt and mismatched files ---------------------------------------------- */

/* The destination for hand-written files: w [2,3] and b [2], f32. */
static void tiny(struct nn_params *ps)
{
	static const struct pspec spec[] = { { "w", 2, { 2, 3 } }, { "b", 1, { 2 } } };
	model_init(ps, TENSOR_F32, 5, spec, 2);
	ps->rng_counter = 77;
}

#define W "'w':{'dtype':'F32','shape':[2,3],'data_offsets':[0,24]}"
#define B "'b':{'dtype':'F32','shape':[2],'data_offsets':[24,32]}"

struct bad_case {
	const char *what, *header;
	size_t data_len;
	int status;
	const char *sub1, *sub2;
};

static const struct bad_case BAD[] = {
	{ "invalid JSON", "{'w':{'dtype':'F32',", 32, TENSOR_ERR_IO, "not valid JSON", NULL },
	{ "JSON not an object", "[1,2,3]", 32, TENSOR_ERR_IO, "not a JSON object", NULL },
	{ "leading space", " {" W "," B "}", 32, TENSOR_ERR_IO, "begin with '{'", NULL },
	{ "bytes after the JSON", "{" W "," B "}xy", 32, TENSOR_ERR_IO, "after the JSON", NULL },
	{ "unknown dtype", "{'w':{'dtype':'F16','shape':[2,3],'data_offsets':[0,12]}," B "}", 20,
	  TENSOR_ERR_IO, "unsupported dtype 'F16'", "'w'" },
	{ "dtype not a string", "{'w':{'dtype':32,'shape':[2,3],'data_offsets':[0,24]}," B "}", 32,
	  TENSOR_ERR_IO, "dtype is not a string", NULL },
	{ "tensor not an object", "{'w':[1,2]," B "}", 32, TENSOR_ERR_IO, "'w' is not an object",
	  NULL },
	{ "unknown key", "{'w':{'dtype':'F32','shape':[2,3],'data_offsets':[0,24],'x':1}," B "}",
	  32, TENSOR_ERR_IO, "unexpected key 'x'", NULL },
	{ "key twice",
	  "{'w':{'dtype':'F32','shape':[2,3],'shape':[2,3],'data_offsets':[0,24]}," B "}", 32,
	  TENSOR_ERR_IO, "'shape' twice", NULL },
	{ "missing key", "{'w':{'dtype':'F32','shape':[2,3]}," B "}", 32, TENSOR_ERR_IO,
	  "lacks 'data_offsets'", NULL },
	{ "shape not an array", "{'w':{'dtype':'F32','shape':6,'data_offsets':[0,24]}," B "}", 32,
	  TENSOR_ERR_IO, "shape is not an array", NULL },
	{ "negative dim", "{'w':{'dtype':'F32','shape':[-2,3],'data_offsets':[0,24]}," B "}", 32,
	  TENSOR_ERR_IO, "shape entry 0 is not a non-negative integer", NULL },
	{ "fractional dim", "{'w':{'dtype':'F32','shape':[2,1.5],'data_offsets':[0,24]}," B "}", 32,
	  TENSOR_ERR_IO, "shape entry 1", NULL },
	{ "dim not a number", "{'w':{'dtype':'F32','shape':[2,'3'],'data_offsets':[0,24]}," B "}",
	  32, TENSOR_ERR_IO, "shape entry 1", NULL },
	{ "too many dims",
	  "{'w':{'dtype':'F32','shape':[1,1,1,1,1,1,1,2,3],'data_offsets':[0,24]}," B "}", 32,
	  TENSOR_ERR_IO, "9 dims", NULL },
	{ "shape not matching data_offsets",
	  "{'w':{'dtype':'F32','shape':[2,2],'data_offsets':[0,24]}," B "}", 32, TENSOR_ERR_IO,
	  "needs 16 bytes", "hold 24" },
	{ "huge shape",
	  "{'w':{'dtype':'F32','shape':[4503599627370496,4503599627370496],'data_offsets':[0,24]}"
	  "," B "}",
	  32, TENSOR_ERR_IO, "needs more than", NULL },
	{ "data_offsets not a pair", "{'w':{'dtype':'F32','shape':[2,3],'data_offsets':[0]}," B "}",
	  32, TENSOR_ERR_IO, "data_offsets is not [begin, end]", NULL },
	{ "data_offsets negative",
	  "{'w':{'dtype':'F32','shape':[2,3],'data_offsets':[-8,16]}," B "}", 32, TENSOR_ERR_IO,
	  "data_offsets is not", NULL },
	{ "data_offsets reversed",
	  "{'w':{'dtype':'F32','shape':[2,3],'data_offsets':[24,0]}," B "}", 32, TENSOR_ERR_IO,
	  "end before they begin", NULL },
	{ "data_offsets out of range",
	  "{" W ",'b':{'dtype':'F32','shape':[2],'data_offsets':[1000,1008]}}", 32, TENSOR_ERR_IO,
	  "[1000,1008] lie beyond the 32 bytes", NULL },
	{ "data_offsets beyond 2^53",
	  "{" W ",'b':{'dtype':'F32','shape':[2],'data_offsets':[1e300,1e300]}}", 32, TENSOR_ERR_IO,
	  "data_offsets is not", NULL },
	{ "overlapping tensors", "{" W ",'b':{'dtype':'F32','shape':[2],'data_offsets':[16,24]}}",
	  32, TENSOR_ERR_IO, "overlap", "'b'" },
	{ "gap between tensors", "{" W ",'b':{'dtype':'F32','shape':[2],'data_offsets':[28,36]}}",
	  36, TENSOR_ERR_IO, "no tensor covers data bytes [24,28)", NULL },
	{ "truncated data", "{" W "," B "}", 28, TENSOR_ERR_IO, "beyond the 28 bytes",
	  "truncated" },
	{ "bytes after the last tensor", "{" W "," B "}", 40, TENSOR_ERR_IO,
	  "8 bytes of data follow the last tensor", NULL },
	{ "tensor twice", "{" W "," W "," B "}", 32, TENSOR_ERR_IO, "'w' appears twice", NULL },
	{ "escaped NUL in a name",
	  "{" W ",'b\\u0000x':{'dtype':'F32','shape':[2],'data_offsets':[24,32]}}", 32,
	  TENSOR_ERR_IO, "escaped NUL", NULL },
	{ "missing parameter", "{" W "}", 24, TENSOR_ERR_ARG, "missing tensor 'b'", "F32 [2]" },
	{ "wrong shape", "{'w':{'dtype':'F32','shape':[3,2],'data_offsets':[0,24]}," B "}", 32,
	  TENSOR_ERR_SHAPE, "'w' has shape [3,2] in the file", "expects [2,3]" },
	{ "wrong dtype",
	  "{'w':{'dtype':'F64','shape':[2,3],'data_offsets':[0,48]},"
	  "'b':{'dtype':'F32','shape':[2],'data_offsets':[48,56]}}",
	  56, TENSOR_ERR_DTYPE, "'w' is F64 [2,3] in the file", "expects F32 [2,3]" },
	{ "unexpected tensor",
	  "{" W "," B ",'x':{'dtype':'F32','shape':[1],'data_offsets':[32,36]}}", 36,
	  TENSOR_ERR_ARG, "unexpected tensor 'x'", NULL },
	{ "optimizer state of an unknown parameter",
	  "{" W "," B ",'optimizer.m.zz':{'dtype':'F32','shape':[1],'data_offsets':[32,36]}}", 36,
	  TENSOR_ERR_ARG, "'optimizer.m.zz'", NULL },
	{ "optimizer state of the wrong shape",
	  "{" W "," B ",'optimizer.v.b':{'dtype':'F32','shape':[1],'data_offsets':[32,36]}}", 36,
	  TENSOR_ERR_SHAPE, "'optimizer.v.b' has shape [1]", "expects [2]" },
	{ "metadata not string-valued", "{'__metadata__':{'step':42}," W "," B "}", 32,
	  TENSOR_ERR_IO, "'step' is not a string", NULL },
	{ "metadata not an object", "{'__metadata__':['a']," W "," B "}", 32, TENSOR_ERR_IO,
	  "__metadata__ is not a JSON object", NULL },
	{ "metadata key twice", "{'__metadata__':{'a':'1','a':'2'}," W "," B "}", 32, TENSOR_ERR_IO,
	  "key 'a' appears twice", NULL },
	{ "metadata twice", "{'__metadata__':{},'__metadata__':{}," W "," B "}", 32, TENSOR_ERR_IO,
	  "__metadata__ appears twice", NULL },
	{ "step not a number", "{'__metadata__':{'step':'4x2'}," W "," B "}", 32, TENSOR_ERR_IO,
	  "'step' is '4x2'", NULL },
	{ "step negative", "{'__metadata__':{'step':'-1'}," W "," B "}", 32, TENSOR_ERR_IO,
	  "'step' is '-1'", NULL },
	{ "rng_counter overflows",
	  "{'__metadata__':{'rng_counter':'18446744073709551616'}," W "," B "}", 32, TENSOR_ERR_IO,
	  "'rng_counter'", NULL },
};

/* Load path into a fresh tiny model (and optimizer), expect the failure and
 * check that nothing changed. */
static void expect_load_error(const char *what, const char *path, bool with_opt, int status,
			      const char *sub1, const char *sub2)
{
	struct nn_params ps;
	struct nn_adamw o;
	tiny(&ps);
	adamw_random(&o, &ps, 9, 4);
	struct blob p0 = state_of(&ps, NULL), s0 = state_of(&ps, &o);
	int64_t step = -5;
	tensor_clear_error();
	int rc = nn_checkpoint_load(path, &ps, with_opt ? &o : NULL, &step);
	const char *msg = tensor_last_error();
	ck_assert_msg(rc == status && tensor_last_status() == status,
		      "%s: rc %d, status %d, want %d: %s", what, rc, tensor_last_status(), status,
		      msg);
	ck_assert_msg(strstr(msg, "nn_checkpoint_load: ") && strstr(msg, path),
		      "%s: message lacks the op or file: %s", what, msg);
	ck_assert_msg(strstr(msg, sub1), "%s: message '%s' lacks '%s'", what, msg, sub1);
	ck_assert_msg(!sub2 || strstr(msg, sub2), "%s: message '%s' lacks '%s'", what, msg, sub2);
	tensor_clear_error();
	assert_same(what, p0, state_of(&ps, NULL));
	assert_same(what, s0, state_of(&ps, &o));
	ck_assert_msg(step == -5 && ps.rng_counter == 77 && ps.seed == 5 && o.step == 4,
		      "%s: step, rng or optimizer step changed", what);
	nn_adamw_free(&o);
	nn_params_free(&ps);
}

START_TEST(test_handwritten_file_loads)
{
	/* the base the corrupt cases vary: valid, no metadata, any key order,
	 * padded with spaces, other optimizer state ignored */
	char path[256];
	in_dir(path, "ok.safetensors");
	const char *headers[] = {
		"{" W "," B "}",
		"{" B ",'__metadata__':{'format':'pt'}," W "}     ",
		"{" W "," B
		",'optimizer.sgd.buf':{'dtype':'I64','shape':[0],'data_offsets':[32,32]}}",
	};
	for (size_t k = 0; k < sizeof headers / sizeof headers[0]; k++) {
		write_st(path, headers[k], 32);
		struct nn_params ps;
		tiny(&ps);
		int64_t step = -1;
		ck_assert_msg(nn_checkpoint_load(path, &ps, NULL, &step) == TENSOR_OK, "%s",
			      tensor_last_error());
		ck_assert_int_eq(step, 0);	       /* no "step": 0 */
		ck_assert_uint_eq(ps.rng_counter, 77); /* no "rng_counter": unchanged */
		static const double want_w[] = { 1, 2, 3, 4, 5, 6 }, want_b[] = { 7, 8 };
		tu_assert_close(ps.items[0].value, want_w, 6, 0, 0);
		tu_assert_close(ps.items[1].value, want_b, 2, 0, 0);
		nn_params_free(&ps);
	}
}
END_TEST

START_TEST(test_corrupt_headers)
{
	char path[256];
	in_dir(path, "bad.safetensors");
	for (size_t k = 0; k < sizeof BAD / sizeof BAD[0]; k++) {
		write_st(path, BAD[k].header, BAD[k].data_len);
		expect_load_error(BAD[k].what, path, false, BAD[k].status, BAD[k].sub1,
				  BAD[k].sub2);
		expect_load_error(BAD[k].what, path, true, BAD[k].status, BAD[k].sub1, BAD[k].sub2);
	}
}
END_TEST

START_TEST(test_corrupt_files)
{
	char path[256];
	in_dir(path, "bad.safetensors");
	expect_load_error("missing file", path, false, TENSOR_ERR_IO, "cannot open",
			  "No such file");
	write_all(path, "", 0);
	expect_load_error("empty file", path, false, TENSOR_ERR_IO, "0 bytes are too short", NULL);
	write_all(path, "\x10\0\0\0\0", 5);
	expect_load_error("truncated header size", path, false, TENSOR_ERR_IO,
			  "5 bytes are too short", NULL);
	write_all(path, "\xe8\x03\0\0\0\0\0\0{}", 10);
	expect_load_error("header size beyond the file", path, false, TENSOR_ERR_IO,
			  "header size 1000 exceeds the 2 bytes", "truncated");
	write_all(path, "\x01\xe1\xf5\x05\0\0\0\0{}", 10); /* 100,000,001 */
	expect_load_error("header size over the limit", path, false, TENSOR_ERR_IO,
			  "exceeds the limit of 100000000", NULL);
	write_all(path, "\xff\xff\xff\xff\xff\xff\xff\xff{}", 10);
	expect_load_error("header size 2^64-1", path, false, TENSOR_ERR_IO, "exceeds the limit",
			  NULL);
	write_all(path, "\x01\0\0\0\0\0\0\0{", 9);
	expect_load_error("one-byte header", path, false, TENSOR_ERR_IO, "not valid JSON", NULL);
	write_all(path, "\x08\0\0\0\0\0\0\0{'w\xff':1}", 16);
	expect_load_error("invalid UTF-8", path, false, TENSOR_ERR_IO, "byte 3 is not valid UTF-8",
			  NULL);
	write_all(path, "\x08\0\0\0\0\0\0\0{\"\0\":1} ", 16);
	expect_load_error("NUL in the header", path, false, TENSOR_ERR_IO, "byte 2 is a NUL", NULL);
	write_all(path, "\x08\0\0\0\0\0\0\0{\"\xed\xa0\x80\":1}", 16); /* a UTF-16 surrogate */
	expect_load_error("surrogate in UTF-8", path, false, TENSOR_ERR_IO, "not valid UTF-8",
			  NULL);
	expect_load_error("a directory", dir, false, TENSOR_ERR_IO, "not a regular file", NULL);
	/* nesting deeper than cJSON's limit (1000) is refused, not a stack overflow */
	enum { DEPTH = 5000 };
	char *deep = malloc(2 * DEPTH + 32);
	int k = sprintf(deep, "{'__metadata__':");
	for (int i = 0; i < DEPTH; i++)
		deep[k++] = '[';
	for (int i = 0; i < DEPTH; i++)
		deep[k++] = ']';
	strcpy(deep + k, "}");
	write_st(path, deep, 0);
	free(deep);
	expect_load_error("deep nesting", path, false, TENSOR_ERR_IO, "not valid JSON", NULL);
}
END_TEST

START_TEST(test_optimizer_mismatch)
{
	char path[256];
	in_dir(path, "opt.safetensors");
	/* m without v: fine to skip without an optimizer, an error with one */
	const char *h = "{'__metadata__':{'optimizer_step':'3'}," W "," B
			",'optimizer.m.w':{'dtype':'F32','shape':[2,3],'data_offsets':[32,56]},"
			"'optimizer.m.b':{'dtype':'F32','shape':[2],'data_offsets':[56,64]},"
			"'optimizer.v.b':{'dtype':'F32','shape':[2],'data_offsets':[64,72]}}";
	write_st(path, h, 72);
	struct nn_params ps;
	tiny(&ps);
	ck_assert_int_eq(nn_checkpoint_load(path, &ps, NULL, NULL), TENSOR_OK);
	nn_params_free(&ps);
	expect_load_error("incomplete optimizer state", path, true, TENSOR_ERR_ARG,
			  "incomplete optimizer state", "'optimizer.v.w'");
	/* state without its step */
	h = "{" W "," B ",'optimizer.m.w':{'dtype':'F32','shape':[2,3],'data_offsets':[32,56]},"
	    "'optimizer.v.w':{'dtype':'F32','shape':[2,3],'data_offsets':[56,80]},"
	    "'optimizer.m.b':{'dtype':'F32','shape':[2],'data_offsets':[80,88]},"
	    "'optimizer.v.b':{'dtype':'F32','shape':[2],'data_offsets':[88,96]}}";
	write_st(path, h, 96);
	expect_load_error("optimizer state without a step", path, true, TENSOR_ERR_IO,
			  "no \"optimizer_step\"", NULL);
	/* an optimizer of another parameter list */
	struct nn_params other;
	struct nn_adamw o;
	tiny(&ps);
	tiny(&other);
	ck_assert_int_eq(nn_adamw_init(&o, &other, 1e-3, 0.9, 0.999, 1e-8, 0), TENSOR_OK);
	tu_assert_error(nn_checkpoint_load(path, &ps, &o, NULL) < 0, TENSOR_ERR_ARG, path,
			"belongs to another nn_params");
	tu_assert_error(nn_checkpoint_save(path, &ps, &o, NULL, 0) < 0, TENSOR_ERR_ARG, path,
			"belongs to another nn_params");
	nn_adamw_free(&o);
	/* a parameter added after the optimizer was created */
	ck_assert_int_eq(nn_adamw_init(&o, &ps, 1e-3, 0.9, 0.999, 1e-8, 0), TENSOR_OK);
	const int64_t one = 1;
	ck_assert(nn_param_new(&ps, "late", 1, &one, false));
	tu_assert_error(nn_checkpoint_save(path, &ps, &o, NULL, 0) < 0, TENSOR_ERR_ARG, path,
			"no state for 'late'");
	nn_adamw_free(&o);
	nn_params_free(&ps);
	nn_params_free(&other);
}
END_TEST

/* A parameter saved by the autograd tape for a pending backward must not be
 * overwritten: the load is refused before anything changes. */
START_TEST(test_load_refuses_tape_saved_parameter)
{
	char path[256];
	in_dir(path, "m.safetensors");
	struct nn_params a, b;
	model(&a, TENSOR_F32, 1);
	model(&b, TENSOR_F32, 2);
	ck_assert_int_eq(nn_checkpoint_save(path, &a, NULL, NULL, 0), TENSOR_OK);
	struct tensor *w = b.items[5].value; /* emb.weight, the last one copied */
	struct tensor *y = ag_mul(w, w);     /* saves w for backward */
	ck_assert(y != NULL);
	struct blob before = state_of(&b, NULL);
	tu_assert_error(nn_checkpoint_load(path, &b, NULL, NULL) < 0, TENSOR_ERR_STATE, path,
			"'emb.weight'");
	assert_same("params", before, state_of(&b, NULL));
	ag_tape_reset();
	ck_assert_int_eq(nn_checkpoint_load(path, &b, NULL, NULL), TENSOR_OK);
	assert_same("params", state_of(&a, NULL), state_of(&b, NULL));
	nn_params_free(&a);
	nn_params_free(&b);
}
END_TEST

/* ---- saving: arguments and atomicity ----------------------------------------------- */

START_TEST(test_save_errors)
{
	char path[256];
	in_dir(path, "s.safetensors");
	struct nn_params a;
	model(&a, TENSOR_F32, 1);
	tu_assert_error(nn_checkpoint_save(NULL, &a, NULL, NULL, 0) < 0, TENSOR_ERR_ARG,
			"nn_checkpoint_save", "no path");
	tu_assert_error(nn_checkpoint_save("", &a, NULL, NULL, 0) < 0, TENSOR_ERR_ARG,
			"nn_checkpoint_save", "no path");
	tu_assert_error(nn_checkpoint_save(path, NULL, NULL, NULL, 0) < 0, TENSOR_ERR_ARG, path,
			"ps is NULL");
	tu_assert_error(nn_checkpoint_save(path, &a, NULL, NULL, -1) < 0, TENSOR_ERR_ARG, path,
			"step -1 is negative");
	tu_assert_error(nn_checkpoint_load(path, NULL, NULL, NULL) < 0, TENSOR_ERR_ARG, path,
			"ps is NULL");
	tu_assert_error(nn_checkpoint_load(NULL, &a, NULL, NULL) < 0, TENSOR_ERR_ARG, "(null)",
			"path is NULL");
	ck_assert(!exists(path));
	const int64_t one = 1;
	struct nn_params r;
	for (int k = 0; k < 2; k++) { /* names a loader could not tell apart */
		const char *name = k ? "optimizer.m.x" : "__metadata__";
		ck_assert_int_eq(nn_params_init(&r, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
		ck_assert(nn_param_new(&r, name, 1, &one, false));
		tu_assert_error(nn_checkpoint_save(path, &r, NULL, NULL, 0) < 0, TENSOR_ERR_ARG,
				name, "is reserved");
		nn_params_free(&r);
	}
	ck_assert(!exists(path));
	/* an empty list is a valid (metadata-only) checkpoint */
	ck_assert_int_eq(nn_params_init(&r, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	ck_assert_int_eq(nn_checkpoint_save(path, &r, NULL, "[]", 4), TENSOR_OK);
	int64_t step = 0;
	ck_assert_int_eq(nn_checkpoint_load(path, &r, NULL, &step), TENSOR_OK);
	ck_assert_int_eq(step, 4);
	tu_assert_error(nn_checkpoint_load(path, &a, NULL, NULL) < 0, TENSOR_ERR_ARG, path,
			"missing tensor 'layers.0.weight'");
	nn_params_free(&r);
	nn_params_free(&a);
}
END_TEST

START_TEST(test_save_to_missing_directory)
{
	char path[256];
	in_dir(path, "no/such/dir/m.safetensors");
	struct nn_params a;
	model(&a, TENSOR_F32, 1);
	tu_assert_error(nn_checkpoint_save(path, &a, NULL, NULL, 0) < 0, TENSOR_ERR_IO, path,
			"cannot create");
	char sub[256];
	ck_assert(!exists(in_dir(sub, "no")));
	nn_params_free(&a);
}
END_TEST

/* Every way a save can fail leaves the previous checkpoint byte for byte. */
START_TEST(test_failed_save_keeps_old_checkpoint)
{
	char path[256], tmp[256];
	in_dir(path, "m.safetensors");
	in_dir(tmp, "m.safetensors.tmp");
	struct nn_params a, big;
	model(&a, TENSOR_F32, 1);
	model(&big, TENSOR_F64, 2);
	ck_assert_int_eq(nn_checkpoint_save(path, &a, NULL, "{\"v\":1}", 1), TENSOR_OK);
	struct blob old = file_blob(path);

	/* invalid config: refused before writing */
	tu_assert_error(nn_checkpoint_save(path, &big, NULL, "{", 2) < 0, TENSOR_ERR_ARG, path,
			"config_json");
	/* the temporary file cannot be created */
	ck_assert_int_eq(mkdir(tmp, 0700), 0);
	tu_assert_error(nn_checkpoint_save(path, &big, NULL, NULL, 2) < 0, TENSOR_ERR_IO, path,
			"cannot create");
	ck_assert_int_eq(rmdir(tmp), 0);
	/* the disk fills up mid-write (a file size limit stands in for it) */
	struct rlimit lim, small;
	ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &lim), 0);
	small = lim;
	small.rlim_cur = 8 + le64(old.p) + 8; /* past big's header, inside its data */
	void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
	int rc = nn_checkpoint_save(path, &big, NULL, NULL, 2);
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
	signal(SIGXFSZ, old_handler);
	tu_assert_error(rc < 0, TENSOR_ERR_IO, path, "cannot write");
	ck_assert(!exists(tmp));
	struct blob now = file_blob(path);
	ck_assert(now.n == old.n && memcmp(now.p, old.p, old.n) == 0);
	free(now.p);
	/* the file cannot be renamed over: path is a directory */
	char dpath[256];
	in_dir(dpath, "adir");
	ck_assert_int_eq(mkdir(dpath, 0700), 0);
	char inner[300];
	snprintf(inner, sizeof inner, "%s/keep", dpath);
	write_all(inner, "x", 1);
	tu_assert_error(nn_checkpoint_save(dpath, &big, NULL, NULL, 2) < 0, TENSOR_ERR_IO, dpath,
			"cannot rename");
	snprintf(inner, sizeof inner, "%s.tmp", dpath);
	ck_assert(!exists(inner));
	/* through all that the old checkpoint still loads */
	assert_same("old checkpoint", old, file_blob(path));
	struct nn_params b;
	model(&b, TENSOR_F32, 3);
	ck_assert_int_eq(nn_checkpoint_load(path, &b, NULL, NULL), TENSOR_OK);
	assert_same("params", state_of(&a, NULL), state_of(&b, NULL));
	nn_params_free(&a);
	nn_params_free(&b);
	nn_params_free(&big);
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
	suite_add_tcase(s, tc);
	tc = tcase("corrupt");
	tcase_add_test(tc, test_handwritten_file_loads);
	tcase_add_test(tc, test_corrupt_headers);
	tcase_add_test(tc, test_corrupt_files);
	tcase_add_test(tc, test_optimizer_mismatch);
	tcase_add_test(tc, test_load_refuses_tape_saved_parameter);
	suite_add_tcase(s, tc);
	tc = tcase("save");
	tcase_add_test(tc, test_save_errors);
	tcase_add_test(tc, test_save_to_missing_directory);
	tcase_add_test(tc, test_failed_save_keeps_old_checkpoint);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
