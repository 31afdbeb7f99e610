/* Checkpoint headers: the safetensors header of a file (or of its first bytes) parsed and
 * validated whole (JSON, UTF-8, names, dtypes, shapes, offsets covering the data region
 * exactly, __metadata__ strings) before a loader reads a tensor (checkpoint_internal.h). */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_internal.h"
#include "mem.h"

void ckpt_header_free(struct ckpt_header *h)
{
	cJSON_Delete(h->root);
	free(h->e);
	*h = (struct ckpt_header){ 0 };
}

uint64_t ckpt_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Byte offset of the first invalid UTF-8 sequence or NUL in s[0..n), or n. */
static size_t utf8_check(const uint8_t *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		uint8_t c = s[i];
		int len = c == 0		   ? 0
			  : c < 0x80		   ? 1
			  : c >= 0xc2 && c <= 0xdf ? 2
			  : (c & 0xf0) == 0xe0	   ? 3
			  : c >= 0xf0 && c <= 0xf4 ? 4
						   : 0;
		if (len == 0 || n - i < (size_t)len)
			return i;
		for (int k = 1; k < len; k++)
			if ((s[i + k] & 0xc0) != 0x80)
				return i;
		uint8_t c1 = len > 1 ? s[i + 1] : 0;
		if ((c == 0xe0 && c1 < 0xa0) ||
		    (c == 0xed && c1 > 0x9f) ||				  /* overlong, surrogate */
		    (c == 0xf0 && c1 < 0x90) || (c == 0xf4 && c1 > 0x8f)) /* overlong, > U+10FFFF */
			return i;
		i += (size_t)len;
	}
	return n;
}

/* Offset of an escaped NUL ("\u0000", which cJSON would cut a C string at)
 * in s[0..n), or n. Backslashes outside strings are invalid JSON anyway. */
static size_t escaped_nul(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (s[i] != '\\')
			continue;
		size_t k = i;
		while (k < n && s[k] == '\\')
			k++;
		if ((k - i) % 2 == 1 && n - k >= 5 && memcmp(s + k, "u0000", 5) == 0)
			return k - 1;
		i = k - 1;
	}
	return n;
}

static bool is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* An exact non-negative integer JSON number. */
static bool json_uint(const cJSON *x, uint64_t *out)
{
	if (!cJSON_IsNumber(x))
		return false;
	double d = x->valuedouble;
	if (!isfinite(d) || d < 0 || d != floor(d) || d > CKPT_MAX_EXACT)
		return false;
	*out = (uint64_t)d;
	return true;
}

static int cmp_entry_name(const void *a, const void *b)
{
	return strcmp(((const struct ckpt_entry *)a)->name, ((const struct ckpt_entry *)b)->name);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Entries ordered by (begin, end), so zero-size tensors sort first. */
static int cmp_entry_offset(const void *a, const void *b)
{
	const struct ckpt_entry *x = *(const struct ckpt_entry *const *)a,
				*y = *(const struct ckpt_entry *const *)b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

/* __metadata__: an object of unique string keys with string values. */
static int parse_meta(const char *op, const char *file, const cJSON *m)
{
	if (!cJSON_IsObject(m))
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file, "__metadata__ is not a JSON object");
	int n = cJSON_GetArraySize(m);
	const char **keys = tensor_host_malloc(sizeof *keys * (size_t)(n ? n : 1));
	if (!keys)
		return nn_ckpt_fail(TENSOR_ERR_NOMEM, op, file, "out of memory");
	int k = 0, rc = TENSOR_OK;
	for (const cJSON *c = m->child; c; c = c->next) {
		keys[k++] = c->string;
		if (!cJSON_IsString(c)) {
			rc = nn_ckpt_fail(
			    TENSOR_ERR_IO, op, file,
			    "__metadata__ value of '%.200s' is not a string (metadata must map "
			    "strings to strings)",
			    c->string);
			break;
		}
	}
	qsort(keys, (size_t)k, sizeof *keys, cmp_str);
	for (int i = 1; rc == TENSOR_OK && i < k; i++)
		if (strcmp(keys[i - 1], keys[i]) == 0)
			rc = nn_ckpt_fail(TENSOR_ERR_IO, op, file,
					  "__metadata__ key '%.200s' appears twice", keys[i]);
	free(keys);
	return rc;
}

/* One tensor: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}. */
static int parse_entry(const char *op, const char *file, const cJSON *c, uint64_t data_len,
		       struct ckpt_entry *e)
{
	const char *nm = c->string;
	e->name = nm;
	if (!cJSON_IsObject(c))
		return nn_ckpt_fail(
		    TENSOR_ERR_IO, op, file,
		    "tensor '%.200s' is not an object with dtype, shape and data_offsets", nm);
	const cJSON *dt = NULL, *sh = NULL, *off = NULL;
	for (const cJSON *k = c->child; k; k = k->next) {
		const cJSON **slot = strcmp(k->string, "dtype") == 0	      ? &dt
				     : strcmp(k->string, "shape") == 0	      ? &sh
				     : strcmp(k->string, "data_offsets") == 0 ? &off
									      : NULL;
		if (!slot)
			return nn_ckpt_fail(
			    TENSOR_ERR_IO, op, file,
			    "tensor '%.200s' has an unexpected key '%.100s' (expected dtype, "
			    "shape, data_offsets)",
			    nm, k->string);
		if (*slot)
			return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
					    "tensor '%.200s' has '%s' twice", nm, k->string);
		*slot = k;
	}
	if (!dt || !sh || !off)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file, "tensor '%.200s' lacks '%s'", nm,
				    !dt	  ? "dtype"
				    : !sh ? "shape"
					  : "data_offsets");
	if (!cJSON_IsString(dt))
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
				    "tensor '%.200s': dtype is not a string", nm);
	int d = 0;
	while (d < TENSOR_NDTYPES && strcmp(dt->valuestring, nn_ckpt_dtype_name[d]) != 0)
		d++;
	if (d == TENSOR_NDTYPES)
		return nn_ckpt_fail(
		    TENSOR_ERR_IO, op, file,
		    "tensor '%.200s': unsupported dtype '%.20s' (expected F32, F64, BF16, "
		    "I32 or I64)",
		    nm, dt->valuestring);
	e->dtype = (enum tensor_dtype)d;
	if (!cJSON_IsArray(sh))
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
				    "tensor '%.200s': shape is not an array", nm);
	int nd = cJSON_GetArraySize(sh);
	if (nd > TENSOR_MAX_DIMS)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
				    "tensor '%.200s': shape has %d dims, at most %d supported", nm,
				    nd, TENSOR_MAX_DIMS);
	e->ndim = nd;
	bool zero = false, big = false; /* big: more bytes than the data region holds */
	uint64_t numel = 1, esize = tensor_dtype_size(e->dtype);
	int i = 0;
	for (const cJSON *x = sh->child; x; x = x->next, i++) {
		uint64_t v;
		if (!json_uint(x, &v))
			return nn_ckpt_fail(
			    TENSOR_ERR_IO, op, file,
			    "tensor '%.200s': shape entry %d is not a non-negative integer "
			    "(< 2^53)",
			    nm, i);
		e->shape[i] = (int64_t)v;
		if (v == 0)
			zero = true;
		else if (!big && numel > data_len / esize / v)
			big = true;
		else if (!big)
			numel *= v;
	}
	uint64_t nbytes = zero ? 0 : numel * esize;
	big = big && !zero;
	uint64_t o[2];
	if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_uint(off->child, &o[0]) ||
	    !json_uint(off->child->next, &o[1]))
		return nn_ckpt_fail(
		    TENSOR_ERR_IO, op, file,
		    "tensor '%.200s': data_offsets is not [begin, end] of two non-negative "
		    "integers",
		    nm);
	e->begin = o[0];
	e->end = o[1];
	if (o[1] < o[0])
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
				    "tensor '%.200s': data_offsets [%" PRIu64 ",%" PRIu64
				    "] end before they "
				    "begin",
				    nm, o[0], o[1]);
	if (o[1] > data_len)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
				    "tensor '%.200s': data_offsets [%" PRIu64 ",%" PRIu64
				    "] lie beyond the "
				    "%" PRIu64 " bytes of data (truncated file?)",
				    nm, o[0], o[1], data_len);
	char sb[128];
	if (big || o[1] - o[0] != nbytes)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
				    "tensor '%.200s': shape %s of %s needs %s%" PRIu64 " bytes but "
				    "data_offsets [%" PRIu64 ",%" PRIu64 "] hold %" PRIu64,
				    nm, nn_ckpt_shape_str(e->ndim, e->shape, sb),
				    nn_ckpt_dtype_name[e->dtype], big ? "more than " : "",
				    big ? data_len : nbytes, o[0], o[1], o[1] - o[0]);
	return TENSOR_OK;
}

/* The tensors must tile the data region exactly: no overlap, no gap, no tail. */
static int check_coverage(const char *op, const char *file, struct ckpt_header *h)
{
	const struct ckpt_entry **by = tensor_host_malloc(sizeof *by * (size_t)(h->n ? h->n : 1));
	if (!by)
		return nn_ckpt_fail(TENSOR_ERR_NOMEM, op, file, "out of memory");
	for (int i = 0; i < h->n; i++)
		by[i] = &h->e[i];
	qsort(by, (size_t)h->n, sizeof *by, cmp_entry_offset);
	uint64_t pos = 0;
	int rc = TENSOR_OK;
	for (int i = 0; rc == TENSOR_OK && i < h->n; i++) {
		const struct ckpt_entry *e = by[i];
		if (e->begin < pos)
			rc = nn_ckpt_fail(TENSOR_ERR_IO, op, file,
					  "tensors '%.200s' [%" PRIu64 ",%" PRIu64
					  ") and '%.200s' [%" PRIu64 ",%" PRIu64 ") overlap",
					  by[i - 1]->name, by[i - 1]->begin, by[i - 1]->end,
					  e->name, e->begin, e->end);
		else if (e->begin > pos)
			rc = nn_ckpt_fail(TENSOR_ERR_IO, op, file,
					  "no tensor covers data bytes [%" PRIu64 ",%" PRIu64
					  ") (gap before "
					  "'%.200s')",
					  pos, e->begin, e->name);
		pos = e->end;
	}
	free(by);
	if (rc == TENSOR_OK && pos != h->data_len)
		rc = nn_ckpt_fail(
		    TENSOR_ERR_IO, op, file,
		    "%" PRIu64 " bytes of data follow the last tensor (the header declares %" PRIu64
		    " of %" PRIu64 ")",
		    h->data_len - pos, pos, h->data_len);
	return rc;
}

/* Parse and validate the header of a file of file_len bytes whose first
 * avail bytes are at buf (avail == file_len or at least the whole header). */
int ckpt_header_parse(const char *op, const char *file, const uint8_t *buf, size_t avail,
		      uint64_t file_len, struct ckpt_header *h)
{
	*h = (struct ckpt_header){ 0 };
	if (file_len < 8)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
				    "%" PRIu64
				    " bytes are too short for the 8-byte header size (truncated "
				    "file?)",
				    file_len);
	uint64_t n = ckpt_le64(buf);
	if (n > NN_CHECKPOINT_HEADER_MAX)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
				    "header size %" PRIu64 " exceeds the limit of %llu bytes", n,
				    NN_CHECKPOINT_HEADER_MAX);
	if (n > file_len - 8)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
				    "header size %" PRIu64 " exceeds the %" PRIu64
				    " bytes after the size "
				    "field (truncated file?)",
				    n, file_len - 8);
	if (avail < 8 + n)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file, "header not read in full");
	const char *text = (const char *)buf + 8;
	size_t bad = utf8_check(buf + 8, (size_t)n);
	if (bad < n)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
				    "header byte %zu is %s, expected UTF-8 JSON", bad,
				    buf[8 + bad] ? "not valid UTF-8" : "a NUL");
	if ((bad = escaped_nul(text, (size_t)n)) < n)
		return nn_ckpt_fail(
		    TENSOR_ERR_IO, op, file,
		    "header has an escaped NUL (\\u0000) at byte %zu, which cformer does not "
		    "accept in names or metadata",
		    bad);
	char *s = tensor_host_malloc((size_t)n + 1);
	if (!s)
		return nn_ckpt_fail(TENSOR_ERR_NOMEM, op, file,
				    "no memory for a %" PRIu64 "-byte header", n);
	memcpy(s, text, (size_t)n);
	s[n] = '\0';
	const char *end = NULL;
	h->root = cJSON_ParseWithOpts(s, &end, false);
	size_t at = end ? (size_t)(end - s) : 0;
	if (h->root)
		while (at < n && is_ws(s[at]))
			at++;
	free(s);
	if (!h->root)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
				    "header is not valid JSON (error near byte %zu)", at);
	if (at < n) {
		ckpt_header_free(h);
		return nn_ckpt_fail(
		    TENSOR_ERR_IO, op, file,
		    "header has non-whitespace bytes after the JSON object (at byte %zu)", at);
	}
	if (!cJSON_IsObject(h->root) || text[0] != '{') {
		int rc = nn_ckpt_fail(TENSOR_ERR_IO, op, file, "%s",
				      cJSON_IsObject(h->root) ? "header must begin with '{'"
							      : "header is not a JSON object");
		ckpt_header_free(h);
		return rc;
	}
	h->data_len = file_len - 8 - n;
	h->data = avail == file_len ? buf + 8 + n : NULL;
	int count = cJSON_GetArraySize(h->root), rc = TENSOR_OK;
	h->e = tensor_host_calloc((size_t)(count ? count : 1), sizeof *h->e);
	if (!h->e) {
		ckpt_header_free(h);
		return nn_ckpt_fail(TENSOR_ERR_NOMEM, op, file, "out of memory");
	}
	for (const cJSON *c = h->root->child; rc == TENSOR_OK && c; c = c->next) {
		if (strcmp(c->string, CKPT_META) == 0) {
			if (h->meta)
				rc = nn_ckpt_fail(TENSOR_ERR_IO, op, file,
						  "__metadata__ appears twice");
			else if ((rc = parse_meta(op, file, c)) == TENSOR_OK)
				h->meta = c;
		} else {
			rc = parse_entry(op, file, c, h->data_len, &h->e[h->n++]);
		}
	}
	if (rc == TENSOR_OK) {
		qsort(h->e, (size_t)h->n, sizeof *h->e, cmp_entry_name);
		for (int i = 1; rc == TENSOR_OK && i < h->n; i++)
			if (strcmp(h->e[i - 1].name, h->e[i].name) == 0)
				rc = nn_ckpt_fail(TENSOR_ERR_IO, op, file,
						  "tensor '%.200s' appears twice", h->e[i].name);
	}
	if (rc == TENSOR_OK)
		rc = check_coverage(op, file, h);
	if (rc < 0)
		ckpt_header_free(h);
	return rc;
}

struct ckpt_entry *ckpt_find(const struct ckpt_header *h, const char *name)
{
	struct ckpt_entry key = { .name = name };
	return bsearch(&key, h->e, (size_t)h->n, sizeof key, cmp_entry_name);
}

/* A metadata value as a decimal integer in [0, max]; *found false if absent. */
int ckpt_meta_uint(const char *op, const char *file, const struct ckpt_header *h, const char *key,
		   uint64_t max, uint64_t *out, bool *found)
{
	const cJSON *v = h->meta ? cJSON_GetObjectItemCaseSensitive(h->meta, key) : NULL;
	*found = v != NULL;
	if (!v)
		return TENSOR_OK;
	const char *s = v->valuestring;
	uint64_t x = 0;
	bool ok = *s != '\0';
	for (; ok && *s; s++) {
		unsigned dgt = (unsigned)(*s - '0');
		ok = dgt <= 9 && x <= (max - dgt) / 10;
		x = x * 10 + dgt;
	}
	if (!ok)
		return nn_ckpt_fail(
		    TENSOR_ERR_IO, op, file,
		    "__metadata__ '%s' is '%.40s', expected a decimal integer in [0, %" PRIu64 "]",
		    key, v->valuestring, max);
	*out = x;
	return TENSOR_OK;
}
