/* Checkpoints as safetensors files: atomic save, load that validates the
 * whole file before changing anything, and the model config in __metadata__. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_internal.h"
#include "mem.h"
#include "nn.h"

/* Tensor bytes are written and read as they lie in memory, and safetensors
 * is little-endian: refuse to build where that would be wrong. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "nn/checkpoint.c supports little-endian hosts only (safetensors data is little-endian)"
#endif

#define MAX_EXACT 9007199254740992.0 /* 2^53: larger JSON numbers are not exact in cJSON */

const char *const nn_ckpt_dtype_name[TENSOR_NDTYPES] = {
	[TENSOR_F32] = "F32", [TENSOR_F64] = "F64", [TENSOR_I32] = "I32", [TENSOR_I64] = "I64",
	[TENSOR_BF16] = "BF16"
};

int nn_ckpt_fail(int status, const char *op, const char *file, const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return tensor_error(status, "%s: %s: %s", op, file ? file : "(null)", msg);
}

/* "[2,3]" of a shape into buf[128]. */
static const char *shape_str(int ndim, const int64_t *shape, char *buf)
{
	struct tensor t = { .ndim = ndim };
	memcpy(t.shape, shape, sizeof(int64_t) * (size_t)ndim);
	return tensor_shape_str(&t, buf, 128);
}

/* ---- header parsing and validation ---------------------------------------- */

struct entry {
	const char *name; /* owned by the cJSON tree */
	enum tensor_dtype dtype;
	int ndim;
	int64_t shape[TENSOR_MAX_DIMS];
	uint64_t begin, end; /* byte offsets in the data region */
	bool used;
};

struct header {
	cJSON *root;
	const cJSON *meta; /* __metadata__ or NULL */
	struct entry *e;   /* sorted by name */
	int n;
	const uint8_t *data; /* the data region (NULL when only the header was read) */
	uint64_t data_len;
};

static void header_free(struct header *h)
{
	cJSON_Delete(h->root);
	free(h->e);
	*h = (struct header){ 0 };
}

static uint64_t le64(const uint8_t *p)
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
	if (!isfinite(d) || d < 0 || d != floor(d) || d > MAX_EXACT)
		return false;
	*out = (uint64_t)d;
	return true;
}

static int cmp_entry_name(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Entries ordered by (begin, end), so zero-size tensors sort first. */
static int cmp_entry_offset(const void *a, const void *b)
{
	const struct entry *x = *(const struct entry *const *)a,
			   *y = *(const struct entry *const *)b;
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
		       struct entry *e)
{
	const char *nm = c->string;
	e->name = nm;
	if (!cJSON_IsObject(c))
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
			    "tensor '%.200s' is not an object with dtype, shape and data_offsets",
			    nm);
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
			return nn_ckpt_fail(TENSOR_ERR_IO, op, file, "tensor '%.200s' has '%s' twice", nm,
				    k->string);
		*slot = k;
	}
	if (!dt || !sh || !off)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file, "tensor '%.200s' lacks '%s'", nm,
			    !dt	  ? "dtype"
			    : !sh ? "shape"
				  : "data_offsets");
	if (!cJSON_IsString(dt))
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file, "tensor '%.200s': dtype is not a string", nm);
	int d = 0;
	while (d < TENSOR_NDTYPES && strcmp(dt->valuestring, nn_ckpt_dtype_name[d]) != 0)
		d++;
	if (d == TENSOR_NDTYPES)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
			    "tensor '%.200s': unsupported dtype '%.20s' (expected F32, F64, BF16, "
			    "I32 or I64)",
			    nm, dt->valuestring);
	e->dtype = (enum tensor_dtype)d;
	if (!cJSON_IsArray(sh))
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file, "tensor '%.200s': shape is not an array", nm);
	int nd = cJSON_GetArraySize(sh);
	if (nd > TENSOR_MAX_DIMS)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
			    "tensor '%.200s': shape has %d dims, at most %d supported", nm, nd,
			    TENSOR_MAX_DIMS);
	e->ndim = nd;
	bool zero = false, big = false; /* big: more bytes than the data region holds */
	uint64_t numel = 1, esize = tensor_dtype_size(e->dtype);
	int i = 0;
	for (const cJSON *x = sh->child; x; x = x->next, i++) {
		uint64_t v;
		if (!json_uint(x, &v))
			return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
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
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
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
			    nm, shape_str(e->ndim, e->shape, sb), nn_ckpt_dtype_name[e->dtype],
			    big ? "more than " : "", big ? data_len : nbytes, o[0], o[1],
			    o[1] - o[0]);
	return TENSOR_OK;
}

/* The tensors must tile the data region exactly: no overlap, no gap, no tail. */
static int check_coverage(const char *op, const char *file, struct header *h)
{
	const struct entry **by = tensor_host_malloc(sizeof *by * (size_t)(h->n ? h->n : 1));
	if (!by)
		return nn_ckpt_fail(TENSOR_ERR_NOMEM, op, file, "out of memory");
	for (int i = 0; i < h->n; i++)
		by[i] = &h->e[i];
	qsort(by, (size_t)h->n, sizeof *by, cmp_entry_offset);
	uint64_t pos = 0;
	int rc = TENSOR_OK;
	for (int i = 0; rc == TENSOR_OK && i < h->n; i++) {
		const struct entry *e = by[i];
		if (e->begin < pos)
			rc = nn_ckpt_fail(TENSOR_ERR_IO, op, file,
				  "tensors '%.200s' [%" PRIu64 ",%" PRIu64
				  ") and '%.200s' [%" PRIu64 ",%" PRIu64 ") overlap",
				  by[i - 1]->name, by[i - 1]->begin, by[i - 1]->end, e->name,
				  e->begin, e->end);
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
		rc = nn_ckpt_fail(TENSOR_ERR_IO, op, file,
			  "%" PRIu64
			  " bytes of data follow the last tensor (the header declares %" PRIu64
			  " of %" PRIu64 ")",
			  h->data_len - pos, pos, h->data_len);
	return rc;
}

/* Parse and validate the header of a file of file_len bytes whose first
 * avail bytes are at buf (avail == file_len or at least the whole header). */
static int parse_header(const char *op, const char *file, const uint8_t *buf, size_t avail,
			uint64_t file_len, struct header *h)
{
	*h = (struct header){ 0 };
	if (file_len < 8)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
			    "%" PRIu64 " bytes are too short for the 8-byte header size (truncated "
			    "file?)",
			    file_len);
	uint64_t n = le64(buf);
	if (n > NN_CHECKPOINT_HEADER_MAX)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
			    "header size %" PRIu64 " exceeds the limit of %llu bytes", n,
			    NN_CHECKPOINT_HEADER_MAX);
	if (n > file_len - 8)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
			    "header size %" PRIu64 " exceeds the %" PRIu64 " bytes after the size "
			    "field (truncated file?)",
			    n, file_len - 8);
	if (avail < 8 + n)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file, "header not read in full");
	const char *text = (const char *)buf + 8;
	size_t bad = utf8_check(buf + 8, (size_t)n);
	if (bad < n)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file, "header byte %zu is %s, expected UTF-8 JSON",
			    bad, buf[8 + bad] ? "not valid UTF-8" : "a NUL");
	if ((bad = escaped_nul(text, (size_t)n)) < n)
		return nn_ckpt_fail(
		    TENSOR_ERR_IO, op, file,
		    "header has an escaped NUL (\\u0000) at byte %zu, which cformer does not "
		    "accept in names or metadata",
		    bad);
	char *s = tensor_host_malloc((size_t)n + 1);
	if (!s)
		return nn_ckpt_fail(TENSOR_ERR_NOMEM, op, file, "no memory for a %" PRIu64 "-byte header",
			    n);
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
		header_free(h);
		return nn_ckpt_fail(TENSOR_ERR_IO, op, file,
			    "header has non-whitespace bytes after the JSON object (at byte %zu)",
			    at);
	}
	if (!cJSON_IsObject(h->root) || text[0] != '{') {
		int rc = nn_ckpt_fail(TENSOR_ERR_IO, op, file, "%s",
			      cJSON_IsObject(h->root) ? "header must begin with '{'"
						      : "header is not a JSON object");
		header_free(h);
		return rc;
	}
	h->data_len = file_len - 8 - n;
	h->data = avail == file_len ? buf + 8 + n : NULL;
	int count = cJSON_GetArraySize(h->root), rc = TENSOR_OK;
	h->e = tensor_host_calloc((size_t)(count ? count : 1), sizeof *h->e);
	if (!h->e) {
		header_free(h);
		return nn_ckpt_fail(TENSOR_ERR_NOMEM, op, file, "out of memory");
	}
	for (const cJSON *c = h->root->child; rc == TENSOR_OK && c; c = c->next) {
		if (strcmp(c->string, CKPT_META) == 0) {
			if (h->meta)
				rc = nn_ckpt_fail(TENSOR_ERR_IO, op, file, "__metadata__ appears twice");
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
				rc = nn_ckpt_fail(TENSOR_ERR_IO, op, file, "tensor '%.200s' appears twice",
					  h->e[i].name);
	}
	if (rc == TENSOR_OK)
		rc = check_coverage(op, file, h);
	if (rc < 0)
		header_free(h);
	return rc;
}

static struct entry *find_entry(const struct header *h, const char *name)
{
	struct entry key = { .name = name };
	return bsearch(&key, h->e, (size_t)h->n, sizeof key, cmp_entry_name);
}

/* A metadata value as a decimal integer in [0, max]; *found false if absent. */
static int meta_uint(const char *op, const char *file, const struct header *h, const char *key,
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

/* ---- load ----------------------------------------------------------------- */

/* The optimizer settings a file records, where present (the moving average's decay with
 * ema, else AdamW's): finite, lr and weight decay >= 0, eps > 0, the betas and the decay in
 * [0, 1), as nn_adamw_init and nn_ema_init take them. */
static int check_settings(const char *op, const char *file, const struct header *h, bool ema)
{
	static const struct {
		const char *key, *range;
		double lo, hi;
		bool lo_open, ema;
	} lim[] = {
		{ "optimizer_lr", ">= 0", 0, INFINITY, false, false },
		{ "optimizer_beta1", "in [0, 1)", 0, 1, false, false },
		{ "optimizer_beta2", "in [0, 1)", 0, 1, false, false },
		{ "optimizer_eps", "> 0", 0, INFINITY, true, false },
		{ "optimizer_weight_decay", ">= 0", 0, INFINITY, false, false },
		{ "ema_decay", "in [0, 1)", 0, 1, false, true },
	};
	for (size_t i = 0; h->meta && i < sizeof lim / sizeof lim[0]; i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(h->meta, lim[i].key);
		if (lim[i].ema != ema || !v)
			continue;
		char *end;
		double x = strtod(v->valuestring, &end);
		bool above = x > lim[i].lo || (!lim[i].lo_open && x == lim[i].lo);
		if (end == v->valuestring || *end || !above || !(x < lim[i].hi))
			return nn_ckpt_fail(
			    TENSOR_ERR_IO, op, file,
			    "__metadata__ '%s' is '%.40s', expected a finite number %s", lim[i].key,
			    v->valuestring, lim[i].range);
	}
	return TENSOR_OK;
}

/* Whether a file entry of dtype src loads into a tensor of dtype dst: the
 * same dtype, or BF16 into F32 / F64 (converted exactly). */
static bool dtype_loads(enum tensor_dtype src, enum tensor_dtype dst)
{
	return src == dst || (src == TENSOR_BF16 && (dst == TENSOR_F32 || dst == TENSOR_F64));
}

/* Compare a file entry with its destination tensor. */
static int check_match(const char *op, const char *file, const struct entry *e,
		       const struct tensor *dst)
{
	char fs[128], ms[128];
	if (!dtype_loads(e->dtype, dst->dtype))
		return nn_ckpt_fail(TENSOR_ERR_DTYPE, op, file,
			    "tensor '%s' is %s %s in the file, the model expects %s %s", e->name,
			    nn_ckpt_dtype_name[e->dtype], shape_str(e->ndim, e->shape, fs),
			    nn_ckpt_dtype_name[dst->dtype], tensor_shape_str(dst, ms, sizeof ms));
	if (e->ndim != dst->ndim ||
	    memcmp(e->shape, dst->shape, sizeof(int64_t) * (size_t)e->ndim) != 0)
		return nn_ckpt_fail(TENSOR_ERR_SHAPE, op, file,
			    "tensor '%s' has shape %s in the file, the model expects %s", e->name,
			    shape_str(e->ndim, e->shape, fs), tensor_shape_str(dst, ms, sizeof ms));
	return TENSOR_OK;
}

struct copy {
	const struct entry *src;
	struct tensor *dst;
	struct tensor *staged; /* device copy of the bytes, when dst is not host memory */
};

/* Element i of f32/f64/bf16 data at p as a double. */
static double value_at(const uint8_t *p, uint64_t i, enum tensor_dtype dt)
{
	if (dt == TENSOR_F64) {
		double v;
		memcpy(&v, p + 8 * i, 8);
		return v;
	}
	float v;
	if (dt == TENSOR_F32) {
		memcpy(&v, p + 4 * i, 4);
	} else { /* bf16: the top half of an f32 */
		uint16_t h;
		memcpy(&h, p + 2 * i, 2);
		uint32_t u = (uint32_t)h << 16;
		memcpy(&v, &u, 4);
	}
	return v;
}

/* "[1,2]": the index of flat element i of a tensor of the shape, into buf[160]. */
static const char *index_str(uint64_t i, int ndim, const int64_t *shape, char *buf)
{
	int64_t idx[TENSOR_MAX_DIMS];
	for (int d = ndim - 1; d >= 0; d--) {
		idx[d] = shape[d] ? (int64_t)(i % (uint64_t)shape[d]) : 0;
		i = shape[d] ? i / (uint64_t)shape[d] : 0;
	}
	int at = snprintf(buf, 160, "[");
	for (int d = 0; d < ndim; d++)
		at += snprintf(buf + at, (size_t)(160 - at), "%s%" PRId64, d ? "," : "", idx[d]);
	snprintf(buf + at, (size_t)(160 - at), "]");
	return buf;
}

int nn_ckpt_check_values(const char *op, const char *file, const char *name, int ndim,
			 const int64_t *shape, const void *data, uint64_t nbytes,
			 enum tensor_dtype dt, const char *after)
{
	if (dt != TENSOR_F32 && dt != TENSOR_F64 && dt != TENSOR_BF16)
		return TENSOR_OK;
	/* AdamW's second moment is a running mean of squared gradients */
	bool moment2 = !strncmp(name, CKPT_OPT_V, strlen(CKPT_OPT_V));
	uint64_t n = nbytes / tensor_dtype_size(dt), first[2] = { 0, 0 };
	int64_t bad[2] = { 0, 0 }; /* non-finite, negative */
	for (uint64_t i = 0; i < n; i++) {
		double v = value_at(data, i, dt);
		int k = !isfinite(v) ? 0 : moment2 && v < 0 ? 1 : -1;
		if (k >= 0 && !bad[k]++)
			first[k] = i;
	}
	int k = bad[0] ? 0 : 1;
	if (!bad[k])
		return TENSOR_OK;
	char at[160];
	return nn_ckpt_fail(
	    TENSOR_ERR_ARG, op, file,
	    "tensor '%s' holds %lld %s of %llu, the first at %s: %.9g%s%s", name, (long long)bad[k],
	    k ? "negative values" : "non-finite values (NaN or inf)", (unsigned long long)n,
	    index_str(first[k], ndim, shape, at), value_at(data, first[k], dt),
	    k ? " (AdamW's second moment is a mean of squares, never negative)" : "",
	    after ? after : "");
}

/* What a load may fill besides the parameters. */
struct load_out {
	struct nn_adamw *opt;
	struct nn_ema *ema;
	char **run_json;
	int64_t *step;
};

/* The kinds of state tensors, by name prefix: per parameter, slot 3 i + kind. */
static const char *const state_prefix[3] = { CKPT_OPT_M, CKPT_OPT_V, CKPT_OPT_EMA };

static int state_kind(const char *name)
{
	for (int k = 0; k < 3; k++)
		if (!strncmp(name, state_prefix[k], strlen(state_prefix[k])))
			return k;
	return -1;
}

/* The destination of state tensor kind k of parameter i, if the caller wants it. */
static struct tensor *state_dst(const struct load_out *o, int k, int i)
{
	if (k < 2)
		return o->opt ? (k ? o->opt->v[i] : o->opt->m[i]) : NULL;
	return o->ema ? o->ema->shadow[i] : NULL;
}

/* Every parameter of ps has its state tensor of kind k in slot[]. */
static int check_complete(const char *op, const char *file, const struct nn_params *ps,
			  struct entry **slot, int k)
{
	for (int i = 0; i < ps->n; i++)
		if (!slot[3 * i + k])
			return nn_ckpt_fail(TENSOR_ERR_ARG, op, file, "incomplete %s: missing '%s%s'",
					    k < 2 ? "optimizer state" : "moving average",
					    state_prefix[k], ps->items[i].name);
	return TENSOR_OK;
}

/* Match the validated header against ps (and the state o asks for), check
 * the values are finite, then copy: on any error nothing has changed. */
static int load_header(const char *op, const char *file, struct header *h, struct nn_params *ps,
		       const struct load_out *o)
{
	int np = ps->n, rc = TENSOR_OK, found[3] = { 0, 0, 0 };
	struct copy *cp = tensor_host_calloc((size_t)(4 * np + 1), sizeof *cp);
	struct entry **slot = tensor_host_calloc((size_t)(3 * np + 1), sizeof *slot);
	if (!cp || !slot) {
		free(cp);
		free(slot);
		return nn_ckpt_fail(TENSOR_ERR_NOMEM, op, file, "out of memory");
	}
	/* State arrays end at a NULL (optim.c), so count before indexing. */
	int nc = 0, nopt = 0, nema = 0;
	while (o->opt && o->opt->m && o->opt->v && nopt < np && o->opt->m[nopt] && o->opt->v[nopt])
		nopt++;
	while (o->ema && o->ema->shadow && nema < np && o->ema->shadow[nema])
		nema++;
	if (o->ema && o->ema->swapped)
		rc = nn_ckpt_fail(TENSOR_ERR_STATE, op, file,
				  "the moving average is swapped in (nn_ema_swap back first)");
	for (int i = 0; rc == TENSOR_OK && i < np; i++) {
		struct nn_param *p = &ps->items[i];
		struct entry *e = find_entry(h, p->name);
		char ms[128];
		if (!e)
			rc = nn_ckpt_fail(TENSOR_ERR_ARG, op, file,
					  "missing tensor '%s' (%s %s in the model)", p->name,
					  nn_ckpt_dtype_name[p->value->dtype],
					  tensor_shape_str(p->value, ms, sizeof ms));
		else if ((rc = check_match(op, file, e, p->value)) == TENSOR_OK)
			cp[nc++] = (struct copy){ .src = e, .dst = p->value };
		if (e)
			e->used = true;
	}
	for (int k = 0; rc == TENSOR_OK && k < h->n; k++) {
		struct entry *e = &h->e[k];
		int kind = e->used ? -1 : state_kind(e->name);
		if (e->used || (kind < 0 && !strncmp(e->name, CKPT_OPT, strlen(CKPT_OPT))))
			continue; /* other optimizer state is allowed and ignored */
		if (kind < 0) {
			rc = nn_ckpt_fail(TENSOR_ERR_ARG, op, file,
					  "unexpected tensor '%.200s' (not a parameter of the model)",
					  e->name);
			continue;
		}
		struct nn_param *p = nn_params_find(ps, e->name + strlen(state_prefix[kind]));
		if (!p) {
			rc = nn_ckpt_fail(TENSOR_ERR_ARG, op, file,
					  "unexpected tensor '%.200s' (state of a parameter the model "
					  "does not have)",
					  e->name);
			continue;
		}
		int i = (int)(p - ps->items);
		bool wanted = kind < 2 ? i < nopt : i < nema;
		rc = check_match(op, file, e, wanted ? state_dst(o, kind, i) : p->value);
		slot[3 * i + kind] = e;
		found[kind]++;
	}
	uint64_t ostep = 0, mstep = 0, rng = 0, seed = 0, eup = 0;
	bool has_ostep = false, has_step = false, has_rng = false, has_seed = false, has_eup = false;
	if (rc == TENSOR_OK)
		rc = meta_uint(op, file, h, "step", INT64_MAX, &mstep, &has_step);
	if (rc == TENSOR_OK)
		rc = meta_uint(op, file, h, "rng_counter", UINT64_MAX, &rng, &has_rng);
	if (rc == TENSOR_OK)
		rc = meta_uint(op, file, h, "seed", UINT64_MAX, &seed, &has_seed);
	/* update counts: at most 2^53, exact as doubles (and far from overflowing) */
	if (rc == TENSOR_OK)
		rc = meta_uint(op, file, h, "optimizer_step", (uint64_t)MAX_EXACT, &ostep,
			       &has_ostep);
	if (rc == TENSOR_OK)
		rc = meta_uint(op, file, h, "ema_updates", (uint64_t)MAX_EXACT, &eup, &has_eup);
	bool load_opt = rc == TENSOR_OK && o->opt && found[0] + found[1] > 0;
	bool load_ema = rc == TENSOR_OK && o->ema != NULL;
	const char *lacks = load_opt && nopt < np ? "the optimizer" : load_ema && nema < np
									  ? "the moving average"
									  : NULL;
	if (lacks)
		rc = nn_ckpt_fail(TENSOR_ERR_STATE, op, file,
				  "%s has no state for '%s' (parameter added after it was created?)",
				  lacks, ps->items[load_opt && nopt < np ? nopt : nema].name);
	if (load_ema && rc == TENSOR_OK && found[2] == 0)
		rc = nn_ckpt_fail(TENSOR_ERR_ARG, op, file,
				  "the file holds no moving average (\"" CKPT_OPT_EMA "*\")");
	for (int k = 0; k < 3 && rc == TENSOR_OK; k++) {
		if (!(k < 2 ? load_opt : load_ema))
			continue;
		rc = check_complete(op, file, ps, slot, k);
		for (int i = 0; rc == TENSOR_OK && i < np; i++)
			cp[nc++] = (struct copy){ .src = slot[3 * i + k], .dst = state_dst(o, k, i) };
	}
	if (load_opt && rc == TENSOR_OK && !has_ostep)
		rc = nn_ckpt_fail(
		    TENSOR_ERR_IO, op, file,
		    "the file has optimizer state but no \"optimizer_step\" in __metadata__");
	if (load_ema && rc == TENSOR_OK && !has_eup)
		rc = nn_ckpt_fail(
		    TENSOR_ERR_IO, op, file,
		    "the file has a moving average but no \"ema_updates\" in __metadata__");
	if (load_opt && rc == TENSOR_OK)
		rc = check_settings(op, file, h, false);
	if (load_ema && rc == TENSOR_OK)
		rc = check_settings(op, file, h, true);
	char *run = NULL;
	const cJSON *rj = h->meta ? cJSON_GetObjectItemCaseSensitive(h->meta, "run") : NULL;
	if (rc == TENSOR_OK && o->run_json && rj && !(run = tensor_host_strdup(rj->valuestring)))
		rc = nn_ckpt_fail(TENSOR_ERR_NOMEM, op, file, "out of memory");
	/* Nothing has changed yet: the values must be finite (AdamW's v not
	 * negative), and every destination must take its bytes. */
	for (int k = 0; rc == TENSOR_OK && k < nc; k++) {
		const struct entry *e = cp[k].src;
		rc = nn_ckpt_check_values(op, file, e->name, e->ndim, e->shape, h->data + e->begin,
					  e->end - e->begin, e->dtype, NULL);
	}
	for (int k = 0; rc == TENSOR_OK && k < nc; k++) {
		struct tensor *d = cp[k].dst;
		char what[NN_NAME_MAX + 512];
		snprintf(what, sizeof what, "%s: %s: tensor '%s'", op, file, cp[k].src->name);
		rc = tensor_check_writable(what, d);
		if (rc == TENSOR_OK && cp[k].src->dtype != d->dtype) {
			/* BF16 into F32/F64: converted exactly on the host */
			tensor_heap_begin();
			struct tensor *raw =
			    tensor_from_data(cp[k].src->dtype, TENSOR_CPU, d->ndim, d->shape,
					     h->data + cp[k].src->begin);
			struct tensor *conv = raw ? tensor_cast(raw, d->dtype) : NULL;
			cp[k].staged = conv && d->storage->device != TENSOR_CPU
					   ? tensor_to_device(conv, d->storage->device)
					   : conv;
			if (cp[k].staged != conv)
				tensor_free(conv);
			tensor_free(raw);
			tensor_heap_end();
			if (!cp[k].staged)
				rc = tensor_last_status();
		} else if (rc == TENSOR_OK &&
			   (d->storage->device != TENSOR_CPU || !tensor_is_contiguous(d))) {
			tensor_heap_begin();
			cp[k].staged = tensor_from_data(d->dtype, d->storage->device, d->ndim,
							d->shape, h->data + cp[k].src->begin);
			tensor_heap_end();
			if (!cp[k].staged)
				rc = tensor_last_status();
		}
	}
	for (int k = 0; rc == TENSOR_OK && k < nc; k++) { /* commit: host copies cannot fail */
		if (cp[k].staged)
			rc = tensor_copy_(cp[k].dst, cp[k].staged);
		else if (cp[k].src->end > cp[k].src->begin)
			memcpy(tensor_data(cp[k].dst), h->data + cp[k].src->begin,
			       (size_t)(cp[k].src->end - cp[k].src->begin));
	}
	if (rc == TENSOR_OK) {
		if (has_rng)
			ps->rng_counter = rng;
		if (has_seed)
			ps->seed = seed;
		if (load_opt)
			o->opt->step = (int64_t)ostep;
		if (load_ema)
			o->ema->updates = (int64_t)eup;
		if (o->step)
			*o->step = has_step ? (int64_t)mstep : 0;
		if (o->run_json)
			*o->run_json = run;
	} else {
		free(run);
	}
	for (int k = 0; k < nc; k++)
		tensor_free(cp[k].staged);
	free(cp);
	free(slot);
	return rc;
}

int nn_checkpoint_load_buffer(const void *buf, size_t len, const char *name, struct nn_params *ps,
			      struct nn_adamw *opt, struct nn_ema *ema, char **run_json,
			      int64_t *step)
{
	const char *op = "nn_checkpoint_load";
	if (!buf || !ps)
		return nn_ckpt_fail(TENSOR_ERR_ARG, op, name, "%s is NULL", !buf ? "buffer" : "ps");
	if ((opt && opt->ps != ps) || (ema && ema->ps != ps))
		return nn_ckpt_fail(TENSOR_ERR_ARG, op, name, "the %s belongs to another nn_params",
				    opt && opt->ps != ps ? "optimizer" : "moving average");
	struct header h;
	int rc = parse_header(op, name, buf, len, len, &h);
	if (rc < 0)
		return rc;
	struct load_out o = { opt, ema, run_json, step };
	rc = load_header(op, name, &h, ps, &o);
	header_free(&h);
	return rc;
}

/* Read up to max bytes of path (all if max is 0) into a malloc'd buffer. */
static int read_file(const char *op, const char *path, size_t max, uint8_t **out, size_t *got,
		     uint64_t *file_len)
{
	*out = NULL;
	if (!path)
		return nn_ckpt_fail(TENSOR_ERR_ARG, op, path, "path is NULL");
	FILE *f = fopen(path, "rb");
	if (!f)
		return nn_ckpt_fail(TENSOR_ERR_IO, op, path, "cannot open: %s", strerror(errno));
	struct stat st;
	int rc = TENSOR_OK;
	if (fstat(fileno(f), &st) != 0)
		rc = nn_ckpt_fail(TENSOR_ERR_IO, op, path, "cannot stat: %s", strerror(errno));
	else if (!S_ISREG(st.st_mode))
		rc = nn_ckpt_fail(TENSOR_ERR_IO, op, path, "not a regular file");
	else if ((uint64_t)st.st_size > SIZE_MAX - 1)
		rc = nn_ckpt_fail(TENSOR_ERR_NOMEM, op, path, "file too large for memory");
	if (rc < 0) {
		fclose(f);
		return rc;
	}
	size_t n = (size_t)st.st_size;
	if (max && n > max)
		n = max;
	uint8_t *b = tensor_host_malloc(n ? n : 1);
	if (!b) {
		fclose(f);
		return nn_ckpt_fail(TENSOR_ERR_NOMEM, op, path, "no memory for %zu bytes", n);
	}
	size_t r = fread(b, 1, n, f);
	if (r != n)
		rc = nn_ckpt_fail(TENSOR_ERR_IO, op, path, "read %zu of %zu bytes: %s", r, n,
			  ferror(f) ? strerror(errno) : "file shrank");
	fclose(f);
	if (rc < 0) {
		free(b);
		return rc;
	}
	*out = b;
	*got = n;
	*file_len = (uint64_t)st.st_size;
	return TENSOR_OK;
}

int nn_checkpoint_load_run(const char *path, struct nn_params *ps, struct nn_adamw *opt,
			   struct nn_ema *ema, char **run_json, int64_t *step)
{
	const char *op = "nn_checkpoint_load";
	if (!ps)
		return nn_ckpt_fail(TENSOR_ERR_ARG, op, path, "ps is NULL");
	uint8_t *buf;
	size_t n;
	uint64_t len;
	int rc = read_file(op, path, 0, &buf, &n, &len);
	if (rc < 0)
		return rc;
	rc = nn_checkpoint_load_buffer(buf, n, path, ps, opt, ema, run_json, step);
	free(buf);
	return rc;
}

int nn_checkpoint_load(const char *path, struct nn_params *ps, struct nn_adamw *opt, int64_t *step)
{
	return nn_checkpoint_load_run(path, ps, opt, NULL, NULL, step);
}

/* ---- config --------------------------------------------------------------- */

/* The __metadata__ string key of the header in buf: *value a malloc'd copy, NULL if absent. */
static int meta_string(const char *op, const void *buf, size_t avail, size_t file_len,
		       const char *name, const char *key, char **value)
{
	*value = NULL;
	if (!buf || !key)
		return nn_ckpt_fail(TENSOR_ERR_ARG, op, name, "%s is NULL", buf ? "key" : "buffer");
	struct header h;
	int rc = parse_header(op, name, buf, avail, file_len, &h);
	if (rc < 0)
		return rc;
	const cJSON *v = h.meta ? cJSON_GetObjectItemCaseSensitive(h.meta, key) : NULL;
	if (v && !(*value = tensor_host_strdup(v->valuestring)))
		rc = nn_ckpt_fail(TENSOR_ERR_NOMEM, op, name, "out of memory");
	header_free(&h);
	return rc;
}

char *nn_checkpoint_config_buffer(const void *buf, size_t avail, size_t file_len, const char *name)
{
	const char *op = "nn_checkpoint_config";
	char *out;
	if (meta_string(op, buf, avail, file_len, name, "config", &out) < 0)
		return NULL;
	cJSON *check = out ? cJSON_ParseWithOpts(out, NULL, true) : NULL;
	if (!out)
		nn_ckpt_fail(TENSOR_ERR_ARG, op, name, "no \"config\" in __metadata__");
	else if (!check)
		nn_ckpt_fail(TENSOR_ERR_IO, op, name, "the \"config\" metadata is not valid JSON");
	cJSON_Delete(check);
	if (!check) {
		free(out);
		return NULL;
	}
	return out;
}

/* The first bytes of path, through its header (not the data), as
 * nn_checkpoint_config_buffer and nn_checkpoint_info_buffer take them. */
static int read_header(const char *op, const char *path, uint8_t **buf, size_t *n, uint64_t *len)
{
	if (read_file(op, path, 8, buf, n, len) < 0)
		return tensor_last_status();
	uint64_t want = *n == 8 ? le64(*buf) : 0;
	if (*n == 8 && want <= NN_CHECKPOINT_HEADER_MAX && want <= *len - 8) {
		free(*buf);
		if (read_file(op, path, (size_t)(8 + want), buf, n, len) < 0)
			return tensor_last_status();
	}
	return TENSOR_OK;
}

char *nn_checkpoint_config(const char *path)
{
	uint8_t *buf;
	size_t n;
	uint64_t len;
	if (read_header("nn_checkpoint_config", path, &buf, &n, &len) < 0)
		return NULL;
	char *out = nn_checkpoint_config_buffer(buf, n, (size_t)len, path);
	free(buf);
	return out;
}

int nn_checkpoint_meta(const char *path, const char *key, char **value)
{
	const char *op = "nn_checkpoint_meta";
	uint8_t *buf;
	size_t n;
	uint64_t len;
	if (!value)
		return nn_ckpt_fail(TENSOR_ERR_ARG, op, path, "value is NULL");
	*value = NULL;
	int rc = read_header(op, path, &buf, &n, &len);
	if (rc < 0)
		return rc;
	rc = meta_string(op, buf, n, (size_t)len, path, key, value);
	free(buf);
	return rc;
}

/* ---- info --------------------------------------------------------------------- */

int nn_checkpoint_info_buffer(const void *buf, size_t avail, size_t file_len, const char *name,
			      struct nn_checkpoint_info *out)
{
	const char *op = "nn_checkpoint_info";
	if (!buf || !out)
		return nn_ckpt_fail(TENSOR_ERR_ARG, op, name, "%s is NULL", buf ? "out" : "buffer");
	*out = (struct nn_checkpoint_info){ 0 };
	struct header h;
	int rc = parse_header(op, name, buf, avail, file_len, &h);
	if (rc < 0)
		return rc;
	struct nn_checkpoint_info info = { 0 };
	uint64_t step = 0;
	bool has_step;
	rc = meta_uint(op, name, &h, "step", INT64_MAX, &step, &has_step);
	info.step = (int64_t)step;
	info.tensors = rc == TENSOR_OK ? tensor_host_calloc((size_t)h.n + 1, sizeof *info.tensors)
				       : NULL;
	if (rc == TENSOR_OK && !info.tensors)
		rc = nn_ckpt_fail(TENSOR_ERR_NOMEM, op, name, "out of memory");
	for (int k = 0; rc == TENSOR_OK && k < h.n; k++) {
		const struct entry *e = &h.e[k];
		if (!strncmp(e->name, CKPT_OPT, strlen(CKPT_OPT))) {
			info.optimizer_tensors++;
			continue;
		}
		struct nn_checkpoint_tensor *t = &info.tensors[info.n];
		if (strlen(e->name) >= sizeof t->name) {
			rc = nn_ckpt_fail(TENSOR_ERR_ARG, op, name,
					  "tensor name '%.60s...' is longer than %d characters",
					  e->name, NN_NAME_MAX - 1);
			break;
		}
		strcpy(t->name, e->name);
		t->dtype = e->dtype;
		t->ndim = e->ndim;
		int64_t numel = 1;
		for (int d = 0; d < e->ndim; d++)
			numel *= t->shape[d] = e->shape[d];
		info.numel += numel; /* bounded by the file's size: no overflow */
		info.n++;
	}
	header_free(&h);
	if (rc < 0) {
		free(info.tensors);
		return rc;
	}
	*out = info;
	return TENSOR_OK;
}

int nn_checkpoint_info(const char *path, struct nn_checkpoint_info *out)
{
	uint8_t *buf;
	size_t n;
	uint64_t len;
	if (out)
		*out = (struct nn_checkpoint_info){ 0 };
	int rc = read_header("nn_checkpoint_info", path, &buf, &n, &len);
	if (rc < 0)
		return rc;
	rc = nn_checkpoint_info_buffer(buf, n, (size_t)len, path, out);
	free(buf);
	return rc;
}

const struct nn_checkpoint_tensor *nn_checkpoint_info_find(const struct nn_checkpoint_info *info,
							   const char *name)
{
	for (int i = 0; info && name && i < info->n; i++)
		if (!strcmp(info->tensors[i].name, name))
			return &info->tensors[i];
	return NULL;
}

void nn_checkpoint_info_free(struct nn_checkpoint_info *info)
{
	if (info) {
		free(info->tensors);
		*info = (struct nn_checkpoint_info){ 0 };
	}
}
