/* CSV metric logs (see csvlog.h). */
#define _POSIX_C_SOURCE 200809L
#include "csvlog.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int header(const char *const *cols, int ncols, char *buf, size_t len)
{
	size_t used = 0;
	for (int i = 0; i < ncols; i++) {
		int w = snprintf(buf + used, len - used, "%s%s", i ? "," : "", cols[i]);
		if (w < 0 || (size_t)w >= len - used)
			return -1;
		used += (size_t)w;
	}
	return 0;
}

int csvlog_open(struct csvlog *c, const char *path, const char *const *cols, int ncols, bool append,
		char *err, size_t errlen)
{
	char want[1024], got[1024] = "";
	*c = (struct csvlog){ .ncols = ncols };
	if (header(cols, ncols, want, sizeof want) < 0) {
		snprintf(err, errlen, "%s: header too long", path);
		return -1;
	}
	FILE *old = append ? fopen(path, "r") : NULL;
	bool have_header = false;
	if (old) {
		if (fgets(got, sizeof got, old)) {
			got[strcspn(got, "\r\n")] = 0;
			have_header = true;
		}
		fclose(old);
		if (have_header && strcmp(got, want)) {
			snprintf(err, errlen, "%s: its columns '%s' differ from '%s'", path, got,
				 want);
			return -1;
		}
	}
	c->f = fopen(path, append ? "a" : "w");
	if (!c->f) {
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	if (!have_header && (fprintf(c->f, "%s\n", want) < 0 || fflush(c->f))) {
		snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
		csvlog_close(c);
		return -1;
	}
	return 0;
}

/* Field col (0-based) of a CSV line as a number, if it has one. */
static bool field(const char *line, int col, double *v)
{
	for (int i = 0; i < col && line; i++) {
		line = strchr(line, ',');
		line = line ? line + 1 : NULL;
	}
	char *end;
	double x = line ? strtod(line, &end) : 0;
	if (!line || end == line)
		return false;
	*v = x;
	return true;
}

int csvlog_drop_after(const char *path, long long step, int col, double *last, char *err,
		      size_t errlen)
{
	FILE *in = fopen(path, "r");
	if (!in && errno == ENOENT)
		return 0;
	if (!in) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
		return -1;
	}
	char tmp[4096], line[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	FILE *out = fopen(tmp, "w");
	int rc = out ? 0 : -1;
	for (long long row = 0; rc == 0 && fgets(line, sizeof line, in); row++) {
		char *end;
		long long s = strtoll(line, &end, 10);
		bool keep = row == 0 || end == line || s <= step;
		if (keep && fputs(line, out) < 0)
			rc = -1;
		if (keep && row > 0 && last)
			field(line, col, last);
	}
	if (rc == 0 && ferror(in))
		rc = -1;
	fclose(in);
	if (out && fclose(out) != 0)
		rc = -1;
	if (rc == 0 && rename(tmp, path) != 0)
		rc = -1;
	if (rc < 0) {
		snprintf(err, errlen, "cannot rewrite %s: %s", path, strerror(errno));
		remove(tmp);
	}
	return rc;
}

int csvlog_row(struct csvlog *c, const char *fmt, ...)
{
	char row[2048];
	va_list ap;
	va_start(ap, fmt);
	int w = vsnprintf(row, sizeof row, fmt, ap);
	va_end(ap);
	if (!c->f || w < 0 || (size_t)w >= sizeof row)
		return -1;
	int fields = 1;
	for (const char *p = row; *p; p++)
		fields += *p == ',';
	if (fields != c->ncols)
		return -1;
	return fprintf(c->f, "%s\n", row) < 0 || fflush(c->f) ? -1 : 0;
}

void csvlog_close(struct csvlog *c)
{
	if (c->f)
		fclose(c->f);
	c->f = NULL;
}
