/* Helpers shared by test_nn_checkpoint.c and test_nn_checkpoint_errors.c: a
 * fresh directory per test, whole files as blobs, hand-written safetensors
 * files, small models and their AdamW state. The including file defines
 * _GNU_SOURCE (nftw, mkdtemp) before any include. */
#ifndef CFORMER_TESTS_CHECKPOINT_COMMON_H
#define CFORMER_TESTS_CHECKPOINT_COMMON_H

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nn.h"
#include "testutil.h"

/* ---- fixture: a fresh directory per test ----------------------------------- */

static char dir[64];

static inline void dir_setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/cformer-ckpt-XXXXXX");
	ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
}

static inline int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static inline void dir_teardown(void)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static inline TCase *tcase(const char *name)
{
	TCase *tc = tu_tcase(name);
	tcase_add_checked_fixture(tc, dir_setup, dir_teardown);
	return tc;
}

/* dir/name in buf[256]. */
static inline char *in_dir(char *buf, const char *name)
{
	snprintf(buf, 256, "%s/%s", dir, name);
	return buf;
}

/* Entries of the test directory (temporary files left behind show up). */
static inline int files_in_dir(void)
{
	DIR *d = opendir(dir);
	ck_assert(d != NULL);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return n;
}

static inline bool exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

struct blob {
	uint8_t *p;
	size_t n;
};

static inline struct blob file_blob(const char *path)
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
static inline void assert_same(const char *what, struct blob a, struct blob b)
{
	ck_assert_msg(a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0), "%s: bytes differ",
		      what);
	free(a.p);
	free(b.p);
}

static inline void write_all(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	ck_assert(f && fwrite(data, 1, n, f) == n);
	fclose(f);
}

/* A safetensors file: header (single quotes become double quotes) and
 * data_len bytes of data (1, 2, 3, ... as f32, then zeros). */
static inline void write_st(const char *path, const char *header, size_t data_len)
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

static inline uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Overwrite n bytes at offset `at` of the data region of safetensors file path (after its
 * 8-byte size and header), as a corrupted disk or a bad tool would. */
static inline void poke_data(const char *path, size_t at, const void *bytes, size_t n)
{
	struct blob b = file_blob(path);
	size_t start = 8 + (size_t)le64(b.p) + at;
	ck_assert_msg(start + n <= b.n, "poke_data: %zu bytes at %zu of %zu", n, start, b.n);
	memcpy(b.p + start, bytes, n);
	write_all(path, b.p, b.n);
	free(b.p);
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
static inline void model_init(struct nn_params *ps, enum tensor_dtype dt, uint64_t seed,
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

static inline void model(struct nn_params *ps, enum tensor_dtype dt, uint64_t seed)
{
	model_init(ps, dt, seed, MODEL, NMODEL);
}

/* The bytes of ps's parameters, or with o, of o's m and v, concatenated. */
static inline struct blob state_of(const struct nn_params *ps, const struct nn_adamw *o)
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
static inline void adamw_random(struct nn_adamw *o, struct nn_params *ps, uint64_t seed,
				int64_t step)
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

#endif
