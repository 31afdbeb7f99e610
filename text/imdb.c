/* The aclImdb reader (train|test/neg|pos/<id>_<rating>.txt and train/unsup/<id>_0.txt,
 * each review's movie from urls_neg|pos|unsup.txt), from a directory or straight from the
 * original archive (libarchive), and text_dataset_free. */
#define _POSIX_C_SOURCE 200809L
#include "mem.h"
#include "text_internal.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A review file: its id and rating, its name (a path, or "ARCHIVE:entry"), and its
 * bytes when it came from an archive (NULL: read the path). */
struct imdb_file {
	int64_t id;
	int32_t rating;
	char *name, *bytes;
	size_t len;
};

/* A urls_<label>.txt read from an archive (present: the archive has it). */
struct imdb_blob {
	char *bytes;
	size_t len;
	bool present;
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
	for (size_t i = 0; i < n; i++) {
		free(f[i].name);
		free(f[i].bytes);
	}
	free(f);
}

/* Append review fname of folder dir (label 0 neg, 1 pos, -1 unsup) to (*f, *n, *cap),
 * its name and rating checked; bytes (its content from an archive, or NULL) is taken. */
static int add_file(struct imdb_file **f, size_t *n, size_t *cap, const char *dir,
		    const char *fname, int label, char *bytes, size_t len)
{
	struct imdb_file x = { .bytes = bytes, .len = len };
	int st = TENSOR_OK;
	int lo = label < 0 ? 0 : label ? 7 : 1, hi = label < 0 ? 0 : label ? 10 : 4;
	if (!parse_name(fname, &x.id, &x.rating))
		st = tensor_error(TENSOR_ERR_IO,
				  "text_imdb_load: malformed file name '%s/%s', expected "
				  "<id>_<rating>.txt with a rating of 1-10 (0 in unsup)",
				  dir, fname);
	else if (x.rating < lo || x.rating > hi)
		st = tensor_error(TENSOR_ERR_IO,
				  "text_imdb_load: '%s/%s': rating %d in the %s folder, expected %d-%d",
				  dir, fname, (int)x.rating, label < 0 ? "unsup" : label ? "pos" : "neg",
				  lo, hi);
	if (st == TENSOR_OK && *n == *cap) {
		size_t nc = *cap ? 2 * *cap : 256;
		struct imdb_file *g = tensor_host_realloc(*f, nc * sizeof(**f));
		if (!g)
			st = tensor_error(TENSOR_ERR_NOMEM, "text_imdb_load: out of memory");
		else
			*f = g, *cap = nc;
	}
	if (st == TENSOR_OK && !(x.name = path_join(dir, fname, NULL)))
		st = tensor_error(TENSOR_ERR_NOMEM, "text_imdb_load: out of memory");
	if (st != TENSOR_OK) {
		free(bytes);
		return st;
	}
	(*f)[(*n)++] = x;
	return TENSOR_OK;
}

/* Sort a folder's files by id; two of one id are an error naming both. */
static int sort_files(struct imdb_file *f, size_t n)
{
	if (n < 2)
		return TENSOR_OK;
	qsort(f, n, sizeof(*f), file_cmp);
	for (size_t i = 1; i < n; i++)
		if (f[i].id == f[i - 1].id)
			return tensor_error(TENSOR_ERR_IO,
					    "text_imdb_load: duplicate review id %lld: '%s' and '%s'",
					    (long long)f[i].id, f[i - 1].name, f[i].name);
	return TENSOR_OK;
}

/* The review files of one label folder, validated and sorted by id. */
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
	while (st == TENSOR_OK && (e = readdir(d)) != NULL) {
		if (e->d_name[0] != '.') /* ".", ".." and hidden files */
			st = add_file(&f, &n, &cap, path, e->d_name, label, NULL, 0);
		errno = 0;
	}
	if (st == TENSOR_OK && errno != 0)
		st = tensor_error(TENSOR_ERR_IO, "text_imdb_load: cannot read directory '%s': %s",
				  path, strerror(errno));
	closedir(d);
	if (st == TENSOR_OK)
		st = sort_files(f, n);
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

size_t text_replace_line_breaks(char *s)
{
	size_t n = strlen(s), w = 0;
	for (size_t r = 0; r < n;) {
		size_t k = s[r] == '<' ? br_len(s + r, s + n) : 0;
		if (k) {
			s[w++] = ' ';
			r += k;
		} else {
			s[w++] = s[r++];
		}
	}
	s[w] = '\0';
	return w;
}

/* The bytes of a review with line breaks replaced by spaces, NUL-terminated: an archive's
 * (taken from f) or the file's. */
static int read_review(struct imdb_file *f, char **out)
{
	char *buf = f->bytes, *path = f->name;
	size_t n = f->len;
	f->bytes = NULL;
	int st = buf ? TENSOR_OK : text_read_file("text_imdb_load", path, &buf, &n);
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
	buf[n] = '\0';
	size_t w = text_replace_line_breaks(buf);
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
 * first at dataset index item0: line id + 1 of path, or of blob when the file came
 * from an archive (blob not NULL). No such file: nothing. */
static int read_urls(const char *path, const struct imdb_blob *blob, const struct imdb_file *files,
		     size_t n, int64_t item0, struct url_key *keys, size_t *nkeys)
{
	if (blob && !blob->present)
		return TENSOR_OK;
	FILE *fp = blob ? fmemopen(blob->bytes, blob->len, "rb") : fopen(path, "rb");
	if (!fp)
		return errno == ENOENT && !blob
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
 * the split's distinct URLs (urls_<label>.txt of each of the nl label folders, from the
 * directory split_dir or, with urls, the archive's); 0 where a label folder has none. */
static int read_groups(const char *split_dir, const struct imdb_blob *urls,
		       const char *const *labels, int nl, struct imdb_file *const *files,
		       const size_t *nfiles, struct text_dataset *ds)
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
		st = p ? read_urls(p, urls ? &urls[l] : NULL, files[l], nfiles[l], (int64_t)item0,
				   keys, &nkeys)
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

/* The review files of each label folder of directory split_dir, sorted by id. */
static int dir_gather(const char *split_dir, const char *const *labels, int nl, bool unsup,
		      struct imdb_file **files, size_t *nfiles)
{
	DIR *d = opendir(split_dir);
	if (!d)
		return tensor_error(TENSOR_ERR_IO, "text_imdb_load: cannot open directory '%s': %s",
				    split_dir, strerror(errno));
	closedir(d);
	int st = TENSOR_OK;
	for (int l = 0; l < nl && st == TENSOR_OK; l++) {
		char *p = path_join(split_dir, labels[l], NULL);
		st = p ? list_label_dir(p, unsup ? -1 : l, &files[l], &nfiles[l])
		       : tensor_error(TENSOR_ERR_NOMEM, "text_imdb_load: out of memory");
		free(p);
	}
	return st;
}

/* Bytes kept from the files: used, of at most max. */
struct budget {
	size_t used, max;
};

/* TENSOR_ERR_IO: the file named what, of n bytes (at least), would pass b's limit. */
static int budget_refuse(const struct budget *b, uint64_t n, const char *what)
{
	return tensor_error(TENSOR_ERR_IO,
			    "text_imdb_load: '%s' (%llu bytes) would bring the text read to %llu "
			    "bytes, over the limit of %zu (text_imdb_load_max)",
			    what, (unsigned long long)n, (unsigned long long)(b->used + n), b->max);
}

/* The bytes of the archive's current entry e, NUL-terminated, kept within budget b: refused
 * before any is read when the header's size passes it; where names the entry, and a failure
 * of the file src (truncated, damaged) the file. */
static int entry_bytes(struct archive *a, const struct text_archive_source *src,
		       struct archive_entry *e, const char *where, struct budget *b, char **out,
		       size_t *len)
{
	size_t left = b->max - b->used;
	int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : -1;
	if (size >= 0 && (uint64_t)size > left)
		return budget_refuse(b, (uint64_t)size, where);
	size_t n = 0, cap = size >= 0 ? (size_t)size + 1 : 4096;
	char *buf = tensor_host_malloc(cap);
	int st = buf ? TENSOR_OK : tensor_error(TENSOR_ERR_NOMEM, "text_imdb_load: out of memory");
	while (st == TENSOR_OK) {
		char more;
		bool full = n == cap - 1; /* then only the end may follow, or a byte to grow for */
		la_ssize_t r = archive_read_data(a, full ? &more : buf + n, full ? 1 : cap - 1 - n);
		if (r <= 0) {
			if (r < 0 && (st = text_archive_check(src, "text_imdb_load")) == TENSOR_OK)
				st = tensor_error(TENSOR_ERR_IO, "text_imdb_load: '%s': %s", where,
						  text_archive_error(a));
			break;
		}
		if (!full) {
			n += (size_t)r;
			continue;
		}
		char *g = n + 1 > left ? NULL : tensor_host_realloc(buf, 2 * cap);
		if (!g)
			st = n + 1 > left
				 ? budget_refuse(b, n + 1, where)
				 : tensor_error(TENSOR_ERR_NOMEM, "text_imdb_load: out of memory");
		else
			buf = g, buf[n++] = more, cap *= 2;
	}
	if (st == TENSOR_OK && n > left)
		st = budget_refuse(b, n, where);
	if (st != TENSOR_OK) {
		free(buf);
		return st;
	}
	b->used += n;
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return TENSOR_OK;
}

/* The same from the archive at path (aclImdb_v1.tar.gz, or any tar libarchive reads), whose
 * entries TOP/<sub>/<label>/<file> and TOP/<sub>/urls_<label>.txt are read into memory
 * within budget b (TOP any one folder); *where receives "path:TOP/<sub>" for messages. The
 * archive is read to its end, so that a gzip stream's checks run. */
static int archive_gather(const char *path, const char *sub, const char *const *labels, int nl,
			  bool unsup, struct budget *b, struct imdb_file **files, size_t *nfiles,
			  struct imdb_blob *urls, char **where)
{
	struct archive *a = archive_read_new();
	if (!a)
		return tensor_error(TENSOR_ERR_NOMEM, "text_imdb_load: out of memory");
	archive_read_support_filter_all(a);
	archive_read_support_format_all(a);
	struct text_archive_source *src = NULL;
	int st = text_archive_open(a, "text_imdb_load", path, &src), r = ARCHIVE_OK;
	size_t cap[2] = { 0, 0 }, ls = strlen(sub);
	struct archive_entry *e;
	while (st == TENSOR_OK && (r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		const char *p = archive_entry_pathname(e), *q;
		if (!p || archive_entry_filetype(e) != AE_IFREG)
			continue;
		p += !strncmp(p, "./", 2) ? 2 : 0;
		const char *slash = strchr(p, '/');
		if (!slash || strncmp(slash + 1, sub, ls) || slash[1 + ls] != '/')
			continue; /* not TOP/<sub>/... */
		q = slash + 2 + ls;
		if (!*where) {
			size_t n = strlen(path) + (size_t)(q - p) + 2;
			if (!(*where = tensor_host_malloc(n)))
				st = tensor_error(TENSOR_ERR_NOMEM, "text_imdb_load: out of memory");
			else
				snprintf(*where, n, "%s:%.*s", path, (int)(q - p - 1), p);
		}
		for (int l = 0; l < nl && st == TENSOR_OK; l++) {
			size_t ll = strlen(labels[l]);
			char urls_name[32], dir[4200], entry[4200];
			snprintf(urls_name, sizeof urls_name, "urls_%s.txt", labels[l]);
			snprintf(dir, sizeof dir, "%s/%s", *where, labels[l]);
			snprintf(entry, sizeof entry, "%s/%s", *where, q);
			char *bytes;
			size_t len;
			if (!strncmp(q, labels[l], ll) && q[ll] == '/' && !strchr(q + ll + 1, '/') &&
			    q[ll + 1] != '.') {
				st = entry_bytes(a, src, e, entry, b, &bytes, &len);
				if (st == TENSOR_OK)
					st = add_file(&files[l], &nfiles[l], &cap[l], dir, q + ll + 1,
						      unsup ? -1 : l, bytes, len);
			} else if (!strcmp(q, urls_name)) {
				free(urls[l].bytes);
				urls[l].bytes = NULL;
				st = entry_bytes(a, src, e, entry, b, &urls[l].bytes, &urls[l].len);
				urls[l].present = st == TENSOR_OK;
			}
		}
	}
	if (st == TENSOR_OK && r == ARCHIVE_EOF)
		text_archive_finish(src); /* the rest of the file, for the gzip checks */
	int bad = text_archive_check(src, "text_imdb_load"); /* truncated, damaged */
	if (bad < 0)
		st = bad;
	else if (st == TENSOR_OK && r != ARCHIVE_EOF)
		st = tensor_error(TENSOR_ERR_IO,
				  "text_imdb_load: '%s' is damaged or not an archive (expected a "
				  "directory or aclImdb_v1.tar.gz): %s",
				  path, text_archive_error(a));
	archive_read_free(a);
	text_archive_source_free(src);
	for (int l = 0; l < nl && st == TENSOR_OK; l++) {
		if (!nfiles[l])
			st = tensor_error(TENSOR_ERR_IO,
					  "text_imdb_load: '%s' holds no review under TOP/%s/%s/ "
					  "(expected aclImdb's layout)",
					  path, sub, labels[l]);
		else
			st = sort_files(files[l], nfiles[l]);
	}
	return st;
}

/* A review file of a directory, its size checked against b before it is read. */
static int read_review_file(struct imdb_file *f, struct budget *b, char **out)
{
	struct stat fs;
	if (!f->bytes && stat(f->name, &fs) == 0 && S_ISREG(fs.st_mode)) {
		if ((uint64_t)fs.st_size > b->max - b->used)
			return budget_refuse(b, (uint64_t)fs.st_size, f->name);
		b->used += (size_t)fs.st_size;
	}
	return read_review(f, out);
}

int text_imdb_load(const char *dir, const char *split, struct text_dataset *out)
{
	return text_imdb_load_max(dir, split, TEXT_IMDB_MAX_BYTES, out);
}

int text_imdb_load_max(const char *dir, const char *split, size_t max_bytes,
		       struct text_dataset *out)
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
	/* the label folders: neg (label 0) and pos (1), or unsup (-1) */
	static const char *const pair[2] = { "neg", "pos" }, *const one[1] = { "unsup" };
	const char *const *labels = unsup ? one : pair;
	const char *sub = unsup ? "train" : split;
	int nl = unsup ? 1 : 2;
	struct imdb_file *files[2] = { NULL, NULL };
	size_t nfiles[2] = { 0, 0 };
	struct imdb_blob urls[2] = { { 0 }, { 0 } };
	struct budget b = { 0, max_bytes };
	struct stat sb;
	bool archive = stat(dir, &sb) == 0 && S_ISREG(sb.st_mode);
	char *split_dir = archive ? NULL : path_join(dir, sub, NULL);
	int st = archive || split_dir ? TENSOR_OK
				      : tensor_error(TENSOR_ERR_NOMEM, "text_imdb_load: out of memory");
	if (st == TENSOR_OK)
		st = archive ? archive_gather(dir, sub, labels, nl, unsup, &b, files, nfiles, urls,
					      &split_dir)
			     : dir_gather(split_dir, labels, nl, unsup, files, nfiles);

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
			st = read_review_file(&files[l][i], &b, &ex->text);
			if (st == TENSOR_OK) {
				ex->label = unsup ? -1 : l;
				ex->rating = files[l][i].rating;
				ds.n++;
			}
		}
	if (st == TENSOR_OK && ds.n)
		st = read_groups(split_dir, archive ? urls : NULL, labels, nl, files, nfiles, &ds);
	free(split_dir);
	for (int l = 0; l < nl; l++) {
		files_free(files[l], nfiles[l]);
		free(urls[l].bytes);
	}
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
