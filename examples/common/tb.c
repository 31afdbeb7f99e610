/* TensorBoard scalar event files (see tb.h). The protobuf messages are
 * encoded by hand: Event {1: double wall_time, 2: int64 step, 3: string
 * file_version, 5: Summary}, Summary {1: repeated Value}, Value {1: string
 * tag, 2: float simple_value}. */
#include "tb.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

uint32_t tb_crc32c(const uint8_t *p, size_t n)
{
	static uint32_t table[256];
	if (!table[1])
		for (uint32_t i = 0; i < 256; i++) {
			uint32_t c = i;
			for (int k = 0; k < 8; k++)
				c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
			table[i] = c;
		}
	uint32_t c = 0xFFFFFFFFu;
	for (size_t i = 0; i < n; i++)
		c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
	return c ^ 0xFFFFFFFFu;
}

uint32_t tb_masked_crc(const uint8_t *p, size_t n)
{
	uint32_t c = tb_crc32c(p, n);
	return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- protobuf encoding into a small buffer --------------------------------- */

struct buf {
	uint8_t b[512];
	size_t n;
};

static void put(struct buf *b, const void *p, size_t n)
{
	if (b->n + n <= sizeof b->b) {
		memcpy(b->b + b->n, p, n);
		b->n += n;
	}
}

static void put_varint(struct buf *b, uint64_t v)
{
	do {
		uint8_t byte = (uint8_t)(v & 0x7F);
		v >>= 7;
		if (v)
			byte |= 0x80;
		put(b, &byte, 1);
	} while (v);
}

static void put_le(struct buf *b, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++) {
		uint8_t byte = (uint8_t)(v >> (8 * i));
		put(b, &byte, 1);
	}
}

static void put_bytes_field(struct buf *b, int field, const void *p, size_t n)
{
	put_varint(b, (uint64_t)field << 3 | 2);
	put_varint(b, n);
	put(b, p, n);
}

static double now(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

/* Event header fields: wall_time and step. */
static void put_event_head(struct buf *e, int64_t step)
{
	double t = now();
	uint64_t bits;
	memcpy(&bits, &t, 8);
	put_varint(e, 1 << 3 | 1);
	put_le(e, bits, 8);
	put_varint(e, 2 << 3 | 0);
	put_varint(e, (uint64_t)step);
}

static int write_record(struct tb_writer *w, const struct buf *data)
{
	uint8_t len[8];
	for (int i = 0; i < 8; i++)
		len[i] = (uint8_t)((uint64_t)data->n >> (8 * i));
	uint32_t c1 = tb_masked_crc(len, 8), c2 = tb_masked_crc(data->b, data->n);
	uint8_t crc1[4], crc2[4];
	for (int i = 0; i < 4; i++) {
		crc1[i] = (uint8_t)(c1 >> (8 * i));
		crc2[i] = (uint8_t)(c2 >> (8 * i));
	}
	if (fwrite(len, 1, 8, w->f) != 8 || fwrite(crc1, 1, 4, w->f) != 4 ||
	    fwrite(data->b, 1, data->n, w->f) != data->n || fwrite(crc2, 1, 4, w->f) != 4 ||
	    fflush(w->f) != 0)
		return -1;
	return 0;
}

int tb_open(struct tb_writer *w, const char *dir, char *err, size_t errlen)
{
	char host[256] = "localhost";
	gethostname(host, sizeof host - 1);
	/* O_EXCL and a counter: a second writer in the same second (a quick resume)
	 * gets a file of its own instead of truncating the first one's. */
	int fd = -1;
	for (int i = 0; fd < 0 && i < 1000; i++) {
		snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%ld.%d", dir,
			 (long long)now(), host, (long)getpid(), i);
		fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL, 0644);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	w->f = fd < 0 ? NULL : fdopen(fd, "wb");
	if (!w->f) {
		snprintf(err, errlen, "cannot create %s: %s", w->path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	struct buf e = {.n = 0};
	put_event_head(&e, 0);
	put_bytes_field(&e, 3, "brain.Event:2", 13);
	if (write_record(w, &e) < 0) {
		snprintf(err, errlen, "cannot write %s: %s", w->path, strerror(errno));
		tb_close(w);
		return -1;
	}
	return 0;
}

int tb_scalar(struct tb_writer *w, const char *tag, double value, int64_t step)
{
	if (!w->f)
		return -1;
	struct buf v = {.n = 0}, s = {.n = 0}, e = {.n = 0};
	size_t tl = strlen(tag);
	put_bytes_field(&v, 1, tag, tl < 100 ? tl : 100);
	float f = (float)value;
	uint32_t bits;
	memcpy(&bits, &f, 4);
	put_varint(&v, 2 << 3 | 5);
	put_le(&v, bits, 4);
	put_bytes_field(&s, 1, v.b, v.n);
	put_event_head(&e, step);
	put_bytes_field(&e, 5, s.b, s.n);
	return write_record(w, &e);
}

void tb_close(struct tb_writer *w)
{
	if (w->f)
		fclose(w->f);
	w->f = NULL;
}

/* ---- reading ---------------------------------------------------------------- */

struct reader {
	const uint8_t *p, *end;
	int ok;
};

static uint64_t get_varint(struct reader *r)
{
	uint64_t v = 0;
	for (int shift = 0; shift < 64; shift += 7) {
		if (r->p >= r->end) {
			r->ok = 0;
			return 0;
		}
		uint8_t b = *r->p++;
		v |= (uint64_t)(b & 0x7F) << shift;
		if (!(b & 0x80))
			return v;
	}
	r->ok = 0;
	return 0;
}

static uint64_t get_le(struct reader *r, int bytes)
{
	uint64_t v = 0;
	if (r->end - r->p < bytes) {
		r->ok = 0;
		return 0;
	}
	for (int i = 0; i < bytes; i++)
		v |= (uint64_t)r->p[i] << (8 * i);
	r->p += bytes;
	return v;
}

/* Skip or read one field; sets *sub to a length-delimited payload. */
static int get_field(struct reader *r, int *field, uint64_t *value, struct reader *sub)
{
	uint64_t key = get_varint(r);
	*field = (int)(key >> 3);
	switch (key & 7) {
	case 0: *value = get_varint(r); break;
	case 1: *value = get_le(r, 8); break;
	case 5: *value = get_le(r, 4); break;
	case 2: {
		uint64_t n = get_varint(r);
		if (!r->ok || n > (uint64_t)(r->end - r->p)) {
			r->ok = 0;
			break;
		}
		*sub = (struct reader){r->p, r->p + n, 1};
		r->p += n;
		break;
	}
	default: r->ok = 0;
	}
	return r->ok;
}

static int decode_event(const uint8_t *p, size_t n, int first, struct tb_scalar_event *out,
			int max, int *count)
{
	struct reader r = {p, p + n, 1}, sub;
	int field, have_version = 0;
	uint64_t v;
	double wall = 0;
	int64_t step = 0;
	int start = *count;
	while (r.p < r.end && get_field(&r, &field, &v, &sub)) {
		if (field == 1)
			memcpy(&wall, &v, 8);
		else if (field == 2)
			step = (int64_t)v;
		else if (field == 3)
			have_version = sub.end - sub.p == 13 && !memcmp(sub.p, "brain.Event:2", 13);
		else if (field == 5) {
			struct reader vr;
			while (sub.p < sub.end && get_field(&sub, &field, &v, &vr)) {
				if (field != 1)
					continue;
				struct tb_scalar_event ev = {.tag = ""};
				struct reader tr;
				int has_value = 0;
				while (vr.p < vr.end && get_field(&vr, &field, &v, &tr)) {
					if (field == 1) {
						size_t tl = (size_t)(tr.end - tr.p);
						tl = tl < sizeof ev.tag - 1 ? tl : sizeof ev.tag - 1;
						memcpy(ev.tag, tr.p, tl);
						ev.tag[tl] = '\0';
					} else if (field == 2) {
						uint32_t bits = (uint32_t)v;
						memcpy(&ev.value, &bits, 4);
						has_value = 1;
					}
				}
				if (!vr.ok)
					return -1;
				if (has_value && *count < max)
					out[(*count)++] = ev;
			}
			if (!sub.ok)
				return -1;
		}
	}
	if (!r.ok || (first && !have_version))
		return -1;
	for (int i = start; i < *count; i++) {
		out[i].step = step;
		out[i].wall_time = wall;
	}
	return 0;
}

int tb_read_scalars(const char *path, struct tb_scalar_event *out, int max, char *err,
		    size_t errlen)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	int count = 0, rc = 0;
	uint8_t *data = NULL;
	for (long rec = 0;; rec++) {
		uint8_t head[12], crc[4];
		size_t got = fread(head, 1, 12, f);
		if (got == 0 && feof(f))
			break;
		uint64_t len = 0;
		for (int i = 0; i < 8; i++)
			len |= (uint64_t)head[i] << (8 * i);
		uint32_t c1 = (uint32_t)head[8] | (uint32_t)head[9] << 8 | (uint32_t)head[10] << 16 |
			      (uint32_t)head[11] << 24;
		if (got != 12 || tb_masked_crc(head, 8) != c1 || len > (1u << 24)) {
			snprintf(err, errlen, "%s: record %ld: bad length header", path, rec);
			rc = -1;
			break;
		}
		free(data);
		data = malloc(len ? len : 1);
		if (!data || fread(data, 1, len, f) != len || fread(crc, 1, 4, f) != 4) {
			snprintf(err, errlen, "%s: record %ld: truncated", path, rec);
			rc = -1;
			break;
		}
		uint32_t c2 = (uint32_t)crc[0] | (uint32_t)crc[1] << 8 | (uint32_t)crc[2] << 16 |
			      (uint32_t)crc[3] << 24;
		if (tb_masked_crc(data, len) != c2) {
			snprintf(err, errlen, "%s: record %ld: data CRC mismatch", path, rec);
			rc = -1;
			break;
		}
		if (decode_event(data, len, rec == 0, out, max, &count) < 0) {
			snprintf(err, errlen, "%s: record %ld: malformed event%s", path, rec,
				 rec == 0 ? " (expected file_version first)" : "");
			rc = -1;
			break;
		}
	}
	free(data);
	fclose(f);
	return rc < 0 ? -1 : count;
}
