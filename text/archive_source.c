/* The bytes libarchive reads for the aclImdb reader (text_internal.h): a gzip file is
 * inflated here with zlib, which checks each member's CRC-32 and length (libarchive's own
 * gzip filter checks neither), and any other file goes to libarchive as it is. */
#define _POSIX_C_SOURCE 200809L
#include "mem.h"
#include "text_internal.h"

#include <archive.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

enum { CHUNK = 1 << 16 };

struct text_archive_source {
	struct archive *a;
	const char *path;
	FILE *fp;
	bool gzip;	  /* inflating: the file starts with gzip's magic bytes */
	bool zlive;	  /* z was initialised (inflateEnd is due) */
	bool member_done; /* the last member ended (its checks passed) */
	bool done;	  /* the file has been read to its end */
	int status;	  /* the first error's status (TENSOR_OK: none) */
	char why[256];	  /* and its message, for archive_error_string */
	z_stream z;
	unsigned char in[CHUNK], out[CHUNK];
};

static voidpf z_alloc(voidpf opaque, uInt items, uInt size)
{
	(void)opaque;
	return tensor_host_calloc(items, size);
}

static void z_free(voidpf opaque, voidpf p)
{
	(void)opaque;
	free(p);
}

/* Record the first failure of s (status, message), tell libarchive; returns -1. */
__attribute__((format(printf, 3, 4))) static la_ssize_t failed(struct text_archive_source *s,
							       int status, const char *fmt, ...)
{
	if (s->status == TENSOR_OK) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(s->why, sizeof s->why, fmt, ap);
		va_end(ap);
		s->status = status;
	}
	archive_set_error(s->a, status == TENSOR_ERR_NOMEM ? ENOMEM : EIO, "%s", s->why);
	return -1;
}

/* Refill s->in from the file: the bytes read (0 at its end), or -1 on a read error. */
static la_ssize_t fill(struct text_archive_source *s)
{
	size_t n = fread(s->in, 1, sizeof s->in, s->fp);
	if (n == 0 && ferror(s->fp))
		return failed(s, TENSOR_ERR_IO, "cannot read it: %s", strerror(errno));
	s->z.next_in = s->in;
	s->z.avail_in = (uInt)n;
	return (la_ssize_t)n;
}

/* The next inflated bytes of a gzip file into s->out: their count, 0 at the end of the
 * last member, or -1 (truncated, damaged, a failed check, no memory). */
static la_ssize_t inflate_some(struct text_archive_source *s)
{
	s->z.next_out = s->out;
	s->z.avail_out = sizeof s->out;
	while (s->z.avail_out == sizeof s->out) {
		if (s->z.avail_in == 0) {
			la_ssize_t n = fill(s);
			if (n < 0)
				return n;
			if (n == 0) {
				if (s->member_done)
					return s->done = true, 0;
				return failed(s, TENSOR_ERR_IO,
					      "truncated: the gzip stream ends before its end");
			}
		}
		if (s->member_done) { /* zeros (padding), or another member (concatenated) */
			while (s->z.avail_in && !*s->z.next_in)
				s->z.next_in++, s->z.avail_in--;
			if (!s->z.avail_in)
				continue;
			if (inflateReset(&s->z) != Z_OK)
				return failed(s, TENSOR_ERR_IO, "gzip: cannot restart zlib");
			s->member_done = false;
		}
		int rc = inflate(&s->z, Z_NO_FLUSH);
		if (rc == Z_STREAM_END)
			s->member_done = true; /* zlib has checked its CRC-32 and length */
		else if (rc == Z_MEM_ERROR)
			return failed(s, TENSOR_ERR_NOMEM, "out of memory");
		else if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT)
			return failed(s, TENSOR_ERR_IO,
				      "damaged: its gzip stream is corrupt (zlib: %s)",
				      s->z.msg ? s->z.msg : "invalid data");
		else if (rc != Z_OK && rc != Z_BUF_ERROR)
			return failed(s, TENSOR_ERR_IO, "gzip: zlib error %d", rc);
		if (s->member_done && s->z.avail_out < sizeof s->out)
			break; /* hand out this member's last bytes before looking further */
	}
	return (la_ssize_t)(sizeof s->out - s->z.avail_out);
}

static la_ssize_t source_read(struct archive *a, void *data, const void **buf)
{
	(void)a;
	struct text_archive_source *s = data;
	if (s->status != TENSOR_OK)
		return -1;
	if (s->done)
		return 0;
	if (s->gzip) {
		*buf = s->out;
		return inflate_some(s);
	}
	*buf = s->in;
	la_ssize_t n = fill(s);
	s->done = n == 0;
	return n;
}

int text_archive_open(struct archive *a, const char *op, const char *path,
		      struct text_archive_source **src)
{
	struct text_archive_source *s = tensor_host_calloc(1, sizeof *s);
	if (!s)
		return tensor_error(TENSOR_ERR_NOMEM, "%s: out of memory", op);
	s->a = a, s->path = path;
	if (!(s->fp = fopen(path, "rb"))) {
		int st = tensor_error(TENSOR_ERR_IO, "%s: cannot open '%s': %s", op, path,
				      strerror(errno));
		free(s);
		return st;
	}
	unsigned char magic[2];
	size_t got = fread(magic, 1, 2, s->fp);
	s->gzip = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
	rewind(s->fp);
	s->z.zalloc = z_alloc, s->z.zfree = z_free;
	int st = TENSOR_OK;
	if (s->gzip && inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK) /* 16: gzip's wrapper */
		st = tensor_error(TENSOR_ERR_NOMEM, "%s: out of memory reading '%s'", op, path);
	s->zlive = s->gzip && st == TENSOR_OK;
	if (st == TENSOR_OK && archive_read_open(a, s, NULL, source_read, NULL) != ARCHIVE_OK &&
	    (st = text_archive_check(s, op)) == TENSOR_OK)
		st = tensor_error(TENSOR_ERR_IO, "%s: cannot read archive '%s': %s", op, path,
				  text_archive_error(a));
	if (st != TENSOR_OK) {
		text_archive_source_free(s);
		return st;
	}
	*src = s;
	return TENSOR_OK;
}

void text_archive_finish(struct text_archive_source *s)
{
	const void *buf;
	while (s->status == TENSOR_OK && !s->done)
		source_read(s->a, s, &buf);
}

const char *text_archive_error(struct archive *a)
{
	const char *why = archive_error_string(a);
	return why ? why : "damaged or truncated (libarchive gives no reason)";
}

int text_archive_check(const struct text_archive_source *s, const char *op)
{
	if (!s || s->status == TENSOR_OK)
		return TENSOR_OK;
	return tensor_error(s->status, "%s: '%s': %s", op, s->path, s->why);
}

void text_archive_source_free(struct text_archive_source *s)
{
	if (!s)
		return;
	if (s->zlive)
		inflateEnd(&s->z);
	if (s->fp)
		fclose(s->fp);
	free(s);
}
