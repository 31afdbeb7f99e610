/* The aclImdb reader (train|test/neg|pos/<id>_<rating>.txt and train/unsup/<id>_0.txt,
 * each review's movie from urls_neg|pos|unsup.txt) and text_dataset_free. */
#define _POSIX_C_SOURCE 200809L
#include "mem.h"
#include "text_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct imdb_file {
	int64_t id;
	int32_t rating;
	char *name;
};

/* "a/b/c" from up to three parts (NULL parts skipped); NULL on no memory. */
static char *path_join(const char *a, const char *b, const char *c)
{
	size_t n = strlen(a) + (b ? strlen(b) + 1 : 0) + (c ? strlen(c) + 1 : 0) + 1;
	char *p = tensor_host_malloc(n);
	if (!p)
		return NULL;
	snprintf(p, n, "%s%s%s%s%s", a, b ? "/" : "", b ? b : "", c ? "/" : "", c ? c : "");
	return p;
}

/* Parse "<id>_<rating>.txt": decimal numbers without sign or leading zeros,
 * id < 10^18, rating below 100 (the caller checks its folder's range). */
static bool parse_name(const char *name, int64_t *id, int32_t *rating)
{
	const char *s = name;
	int64_t v = 0;
	int nd = 0;
	for (; *s >= '0' && *s <= '9'; s++, nd++) {
		if (nd == 18)
			return false;
		v = v * 10 + (*s - '0');
	}
	if (nd == 0 || (nd > 1 && name[0] == '0') || *s != '_')
		return false;
	const char *r = ++s;
	int32_t rv = 0;
	for (nd = 0; *s >= '0' && *s <= '9'; s++, nd++) {
		if (nd == 2)
			return false;
		rv = rv * 10 + (*s - '0');
	}
	if (nd == 0 || (nd > 1 && r[0] == '0') || strcmp(s, ".txt") != 0)
		return false;
	*id = v;
	*rating = rv;
	return true;
}

static int file_cmp(const void *a, const void *b)
{
	const struct imdb_file *x = a, *y = b;
	return (x->id > y->id) - (x->id < y->id);
}

static void files_free(struct imdb_file *f, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(f[i].name);
	free(f);
}

/* The review files of one label folder (label 0 neg, 1 pos, -1 unsup), validated and
 * sorted by id. */
static int list_label_dir(const char *path, int label, struct imdb_file **out, size_t *nout)
{
	DIR *d = opendir(path);
	if (!d)
		return tensor_error(TENSOR_ERR_IO, "text_imdb_load: cannot open directory '%s': %s",
				    path, strerror(errno));
	struct imdb_file *f = NULL;
	size_t n = 0, cap = 0;
	int st = TENSOR_OK;
	struct dirent *e;
	errno = 0;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue; /* ".", ".." and hidden files */
		struct imdb_file x;
		if (!parse_name(e->d_name, &x.id, &x.rating)) {
			st = tensor_error(TENSOR_ERR_IO,
					  "text_imdb_load: malformed file name '%s/%s', expected "
					  "<id>_<rating>.txt with a rating of 1-10 (0 in unsup)",
					  path, e->d_name);
			break;
		}
		int lo = label < 0 ? 0 : label ? 7 : 1, hi = label < 0 ? 0 : label ? 10 : 4;
		if (x.rating < lo || x.rating > hi) {
			st = tensor_error(TENSOR_ERR_IO,
					  "text_imdb_load: '%s/%s': rating %d in the %s folder, "
					  "expected %d-%d",
					  path, e->d_name, (int)x.rating,
					  label < 0 ? "unsup" : label ? "pos" : "neg", lo, hi);
			break;
		}
		if (n == cap) {
			size_t nc = cap ? 2 * cap : 256;
			struct imdb_file *g = tensor_host_realloc(f, nc * sizeof(*f));
			if (!g) {
				st =
				    tensor_error(TENSOR_ERR_NOMEM, "text_imdb_load: out of memory");
				break;
			}
			f = g;
			cap = nc;
		}
		x.name = path_join(path, e->d_name, NULL);
		if (!x.name) {
			st = tensor_error(TENSOR_ERR_NOMEM, "text_imdb_load: out of memory");
			break;
		}
		f[n++] = x;
		errno = 0;
	}
	if (st == TENSOR_OK && errno != 0)
		st = tensor_error(TENSOR_ERR_IO, "text_imdb_load: cannot read directory '%s': %s",
				  path, strerror(errno));
	closedir(d);
	if (st == TENSOR_OK && n > 1) {
		qsort(f, n, sizeof(*f), file_cmp);
		for (size_t i = 1; i < n; i++)
			if (f[i].id == f[i - 1].id) {
				st = tensor_error(
				    TENSOR_ERR_IO,
				    "text_imdb_load: duplicate review id %lld: '%s' and '%s'",
				    (long long)f[i].id, f[i - 1].name, f[i].name);
				break;
			}
	}
	if (st != TENSOR_OK) {
		files_free(f, n);
		return st;
	}
	*out = f;
	*nout = n;
	return TENSOR_OK;
}

/* Length of an HTML line break ("<br />", "<br/>", "<br>", any case, spaces
 * before the slash) starting at s, 0 if none. */
static size_t br_len(const char *s, const char *end)
{
	if (end - s < 4 || s[0] != '<' || (s[1] | 32) != 'b' || (s[2] | 32) != 'r')
		return 0;
	const char *p = s + 3;
	while (p < end && *p == ' ')
		p++;
	if (p < end && *p == '/')
		p++;
	if (p < end && *p == '>')
		return (size_t)(p + 1 - s);
	return 0;
}

/* The bytes of a review with line breaks replaced by spaces, NUL-terminated. */
static int read_review(const char *path, char **out)
{
	char *buf;
	size_t n;
	int st = text_read_file("text_imdb_load", path, &buf, &n);
	if (st != TENSOR_OK)
		return st;
	const char *z = memchr(buf, 0, n);
	if (z) {
		size_t at = (size_t)(z - buf);
		free(buf);
		return tensor_error(TENSOR_ERR_IO,
				    "text_imdb_load: '%s' contains a NUL byte at offset %zu, "
				    "expected text",
				    path, at);
	}
	size_t w = 0;
	for (size_t r = 0; r < n;) {
		size_t k = buf[r] == '<' ? br_len(buf + r, buf + n) : 0;
		if (k) {
			buf[w++] = ' ';
			r += k;
		} else {
			buf[w++] = buf[r++];
		}
	}
	buf[w] = '\0';
	char *fit = tensor_host_realloc(buf, w + 1);
	*out = fit ? fit : buf;
	return TENSOR_OK;
}

struct url_key {
	char *url;
	int64_t item; /* index into the dataset */
};

static int url_cmp(const void *a, const void *b)
{
	return strcmp(((const struct url_key *)a)->url, ((const struct url_key *)b)->url);
}

/* Appends to keys the URL of each review of files[0..n) (sorted ids), the
 * first at dataset index item0: line id + 1 of path. No such file: nothing. */
static int read_urls(const char *path, const struct imdb_file *files, size_t n, int64_t item0,
		     struct url_key *keys, size_t *nkeys)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return errno == ENOENT
			   ? TENSOR_OK
			   : tensor_error(TENSOR_ERR_IO, "text_imdb_load: cannot open '%s': %s",
					  path, strerror(errno));
	char *line = NULL;
	size_t cap = 0, f = 0;
	int64_t lineno = 0;
	int st = TENSOR_OK;
	ssize_t len;
	while (f < n && (len = getline(&line, &cap, fp)) >= 0) {
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		if (files[f].id != lineno++)
			continue;
		if (len == 0) {
			st = tensor_error(
			    TENSOR_ERR_IO,
			    "text_imdb_load: '%s' line %lld (review id %lld) is blank, "
			    "expected the review's movie URL",
			    path, (long long)lineno, (long long)files[f].id);
			break;
		}
		char *url = tensor_host_strdup(line);
		if (!url) {
			st = tensor_error(TENSOR_ERR_NOMEM, "text_imdb_load: out of memory");
			break;
		}
		keys[(*nkeys)++] = (struct url_key){ url, item0 + (int64_t)f++ };
	}
	if (st == TENSOR_OK && ferror(fp))
		st = tensor_error(TENSOR_ERR_IO, "text_imdb_load: cannot read '%s': %s", path,
				  strerror(errno));
	else if (st == TENSOR_OK && f < n)
		st = tensor_error(TENSOR_ERR_IO,
				  "text_imdb_load: '%s' has %lld lines, review id %lld needs line "
				  "%lld",
				  path, (long long)lineno, (long long)files[f].id,
				  (long long)files[f].id + 1);
	free(line);
	fclose(fp);
	return st;
}

/* Each review's movie: ds->items[i].group = 1 + the rank of its URL among
 * the split's distinct URLs (urls_<label>.txt of each of the nl label folders); 0 where
 * a label folder has no urls file. */
static int read_groups(const char *split_dir, const char *const *labels, int nl,
		       struct imdb_file *const *files, const size_t *nfiles,
		       struct text_dataset *ds)
{
	struct url_key *keys = tensor_host_calloc((size_t)ds->n + 1, sizeof(*keys));
	if (!keys)
		return tensor_error(TENSOR_ERR_NOMEM, "text_imdb_load: out of memory");
	size_t nkeys = 0, item0 = 0;
	int st = TENSOR_OK;
	for (int l = 0; l < nl && st == TENSOR_OK; l++) {
		char name[16];
		snprintf(name, sizeof name, "urls_%s.txt", labels[l]);
		char *p = path_join(split_dir, name, NULL);
		st = p ? read_urls(p, files[l], nfiles[l], (int64_t)item0, keys, &nkeys)
		       : tensor_error(TENSOR_ERR_NOMEM, "text_imdb_load: out of memory");
		item0 += nfiles[l];
		free(p);
	}
	if (st == TENSOR_OK) {
		qsort(keys, nkeys, sizeof(*keys), url_cmp);
		int64_t group = 0;
		for (size_t i = 0; i < nkeys; i++) {
			group += i == 0 || strcmp(keys[i].url, keys[i - 1].url) != 0;
			ds->items[keys[i].item].group = group;
		}
	}
	for (size_t i = 0; i < nkeys; i++)
		free(keys[i].url);
	free(keys);
	return st;
}

int text_imdb_load(const char *dir, const char *split, struct text_dataset *out)
{
	if (!dir || !split || !out)
		return tensor_error(TENSOR_ERR_ARG,
				    "text_imdb_load: NULL argument (dir %p, split %p, out %p)",
				    (const void *)dir, (const void *)split, (void *)out);
	bool unsup = !strcmp(split, "unsup");
	if (!unsup && strcmp(split, "train") != 0 && strcmp(split, "test") != 0)
		return tensor_error(TENSOR_ERR_ARG,
				    "text_imdb_load: split '%s', expected \"train\", \"test\" or "
				    "\"unsup\"",
				    split);
	char *split_dir = path_join(dir, unsup ? "train" : split, NULL);
	if (!split_dir)
		return tensor_error(TENSOR_ERR_NOMEM, "text_imdb_load: out of memory");
	DIR *d = opendir(split_dir);
	if (!d) {
		int st =
		    tensor_error(TENSOR_ERR_IO, "text_imdb_load: cannot open directory '%s': %s",
				 split_dir, strerror(errno));
		free(split_dir);
		return st;
	}
	closedir(d);

	/* the label folders: neg (label 0) and pos (1), or unsup (-1) */
	static const char *const pair[2] = { "neg", "pos" }, *const one[1] = { "unsup" };
	const char *const *labels = unsup ? one : pair;
	int nl = unsup ? 1 : 2;
	struct imdb_file *files[2] = { NULL, NULL };
	size_t nfiles[2] = { 0, 0 };
	int st = TENSOR_OK;
	for (int l = 0; l < nl && st == TENSOR_OK; l++) {
		char *p = path_join(split_dir, labels[l], NULL);
		st = p ? list_label_dir(p, unsup ? -1 : l, &files[l], &nfiles[l])
		       : tensor_error(TENSOR_ERR_NOMEM, "text_imdb_load: out of memory");
		free(p);
	}

	struct text_dataset ds = { NULL, 0 };
	size_t total = nfiles[0] + nfiles[1];
	if (st == TENSOR_OK && total) {
		ds.items = tensor_host_calloc(total, sizeof(*ds.items));
		if (!ds.items)
			st = tensor_error(TENSOR_ERR_NOMEM, "text_imdb_load: out of memory");
	}
	for (int l = 0; l < nl && st == TENSOR_OK; l++)
		for (size_t i = 0; i < nfiles[l] && st == TENSOR_OK; i++) {
			struct text_example *ex = &ds.items[ds.n];
			st = read_review(files[l][i].name, &ex->text);
			if (st == TENSOR_OK) {
				ex->label = unsup ? -1 : l;
				ex->rating = files[l][i].rating;
				ds.n++;
			}
		}
	if (st == TENSOR_OK && ds.n)
		st = read_groups(split_dir, labels, nl, files, nfiles, &ds);
	free(split_dir);
	for (int l = 0; l < nl; l++)
		files_free(files[l], nfiles[l]);
	if (st != TENSOR_OK) {
		text_dataset_free(&ds);
		return st;
	}
	*out = ds;
	return TENSOR_OK;
}

void text_dataset_free(struct text_dataset *ds)
{
	if (!ds)
		return;
	for (int64_t i = 0; i < ds->n; i++)
		free(ds->items[i].text);
	free(ds->items);
	ds->items = NULL;
	ds->n = 0;
}
