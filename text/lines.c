/* Plain-text corpora: one document per non-empty line of a file, or one
 * document per *.txt file of a directory. */
#define _POSIX_C_SOURCE 200809L
#include "mem.h"
#include "text_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!text_ascii_space(s[i]))
			return false;
	return true;
}

/* Append a copy of s[0..n) as an unlabelled example. */
static int push(struct text_dataset *ds, size_t *cap, const char *s, size_t n)
{
	if ((size_t)ds->n == *cap) {
		size_t nc = *cap ? 2 * *cap : 64;
		struct text_example *g = tensor_host_realloc(ds->items, nc * sizeof(*g));
		if (!g)
			return tensor_error(TENSOR_ERR_NOMEM, "text_lines_load: out of memory");
		ds->items = g;
		*cap = nc;
	}
	char *t = tensor_host_malloc(n + 1);
	if (!t)
		return tensor_error(TENSOR_ERR_NOMEM, "text_lines_load: out of memory");
	memcpy(t, s, n);
	t[n] = '\0';
	ds->items[ds->n++] = (struct text_example){ .text = t, .label = -1 };
	return TENSOR_OK;
}

/* One example per non-blank line ("\n" or "\r\n" ends a line). */
static int load_file_lines(const char *path, struct text_dataset *ds, size_t *cap)
{
	char *buf;
	size_t n;
	int st = text_read_file("text_lines_load", path, &buf, &n);
	if (st != TENSOR_OK)
		return st;
	size_t line = 1;
	for (size_t s = 0; s < n && st == TENSOR_OK; line++) {
		char *nl = memchr(buf + s, '\n', n - s);
		size_t e = nl ? (size_t)(nl - buf) : n, len = e - s;
		char *z = memchr(buf + s, 0, len);
		if (z)
			st = tensor_error(TENSOR_ERR_IO,
					  "text_lines_load: '%s' line %zu: NUL byte at column %zu, "
					  "expected text",
					  path, line, (size_t)(z - (buf + s)) + 1);
		else if (!blank(buf + s, len))
			st = push(ds, cap, buf + s, len && buf[e - 1] == '\r' ? len - 1 : len);
		s = e + 1;
	}
	free(buf);
	return st;
}

/* One example per non-blank file. */
static int load_file_whole(const char *path, struct text_dataset *ds, size_t *cap)
{
	char *buf;
	size_t n;
	int st = text_read_file("text_lines_load", path, &buf, &n);
	if (st != TENSOR_OK)
		return st;
	char *z = memchr(buf, 0, n);
	if (z)
		st = tensor_error(TENSOR_ERR_IO,
				  "text_lines_load: '%s': NUL byte at offset %zu, expected text",
				  path, (size_t)(z - buf));
	else if (!blank(buf, n))
		st = push(ds, cap, buf, n);
	free(buf);
	return st;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_txt(const char *name)
{
	size_t n = strlen(name);
	return name[0] != '.' && n > 4 && strcmp(name + n - 4, ".txt") == 0;
}

static int load_dir(const char *path, struct text_dataset *ds, size_t *cap)
{
	DIR *d = opendir(path);
	if (!d)
		return tensor_error(TENSOR_ERR_IO,
				    "text_lines_load: cannot open directory '%s': %s", path,
				    strerror(errno));
	char **names = NULL;
	size_t n = 0, ncap = 0;
	int st = TENSOR_OK;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (!is_txt(e->d_name))
			continue;
		if (n == ncap) {
			size_t nc = ncap ? 2 * ncap : 64;
			char **g = tensor_host_realloc(names, nc * sizeof(*g));
			if (!g) {
				st = tensor_error(TENSOR_ERR_NOMEM,
						  "text_lines_load: out of memory");
				break;
			}
			names = g;
			ncap = nc;
		}
		size_t len = strlen(path) + strlen(e->d_name) + 2;
		names[n] = tensor_host_malloc(len);
		if (!names[n]) {
			st = tensor_error(TENSOR_ERR_NOMEM, "text_lines_load: out of memory");
			break;
		}
		snprintf(names[n++], len, "%s/%s", path, e->d_name);
	}
	closedir(d);
	if (st == TENSOR_OK && n == 0)
		st = tensor_error(TENSOR_ERR_IO,
				  "text_lines_load: no *.txt files in directory '%s'", path);
	if (st == TENSOR_OK)
		qsort(names, n, sizeof(*names), name_cmp);
	for (size_t i = 0; i < n && st == TENSOR_OK; i++)
		st = load_file_whole(names[i], ds, cap);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return st;
}

int text_lines_load(const char *path, struct text_dataset *out)
{
	if (!path || !out)
		return tensor_error(TENSOR_ERR_ARG,
				    "text_lines_load: NULL argument (path %p, out %p)",
				    (const void *)path, (void *)out);
	struct stat sb;
	if (stat(path, &sb) != 0)
		return tensor_error(TENSOR_ERR_IO, "text_lines_load: cannot open '%s': %s", path,
				    strerror(errno));
	struct text_dataset ds = { NULL, 0 };
	size_t cap = 0;
	int st = S_ISDIR(sb.st_mode) ? load_dir(path, &ds, &cap) : load_file_lines(path, &ds, &cap);
	if (st != TENSOR_OK) {
		text_dataset_free(&ds);
		return st;
	}
	*out = ds;
	return TENSOR_OK;
}
