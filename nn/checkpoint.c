/* Checkpoints as safetensors files: load, which validates the whole file
 * (its header: checkpoint_header.c) before changing anything, the model config
 * and other __metadata__, and the tensor list (saving: checkpoint_save.c). */
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

const char *nn_ckpt_shape_str(int ndim, const int64_t *shape, char *buf)
{
	struct tensor t = { .ndim = ndim };
	memcpy(t.shape, shape, sizeof(int64_t) * (size_t)ndim);
	return tensor_shape_str(&t, buf, 128);
}

/* ---- load ----------------------------------------------------------------- */

/* The optimizer settings a file records, where present (the moving average's decay with
 * ema, else AdamW's): finite, lr and weight decay >= 0, eps > 0, the betas and the decay in
 * [0, 1), as nn_adamw_init and nn_ema_init take them. */
static int check_settings(const char *op, const char *file, const struct ckpt_header *h, bool ema)
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
static int check_match(const char *op, const char *file, const struct ckpt_entry *e,
		       const struct tensor *dst)
{
	char fs[128], ms[128];
	if (!dtype_loads(e->dtype, dst->dtype))
		return nn_ckpt_fail(TENSOR_ERR_DTYPE, op, file,
			    "tensor '%s' is %s %s in the file, the model expects %s %s", e->name,
			    nn_ckpt_dtype_name[e->dtype], nn_ckpt_shape_str(e->ndim, e->shape, fs),
			    nn_ckpt_dtype_name[dst->dtype], tensor_shape_str(dst, ms, sizeof ms));
	if (e->ndim != dst->ndim ||
	    memcmp(e->shape, dst->shape, sizeof(int64_t) * (size_t)e->ndim) != 0)
		return nn_ckpt_fail(TENSOR_ERR_SHAPE, op, file,
			    "tensor '%s' has shape %s in the file, the model expects %s", e->name,
			    nn_ckpt_shape_str(e->ndim, e->shape, fs), tensor_shape_str(dst, ms, sizeof ms));
	return TENSOR_OK;
}

struct copy {
	const struct ckpt_entry *src;
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
			  struct ckpt_entry **slot, int k)
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
static int load_header(const char *op, const char *file, struct ckpt_header *h, struct nn_params *ps,
		       const struct load_out *o)
{
	int np = ps->n, rc = TENSOR_OK, found[3] = { 0, 0, 0 };
	struct copy *cp = tensor_host_calloc((size_t)(4 * np + 1), sizeof *cp);
	struct ckpt_entry **slot = tensor_host_calloc((size_t)(3 * np + 1), sizeof *slot);
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
		struct ckpt_entry *e = ckpt_find(h, p->name);
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
		struct ckpt_entry *e = &h->e[k];
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
		rc = ckpt_meta_uint(op, file, h, "step", INT64_MAX, &mstep, &has_step);
	if (rc == TENSOR_OK)
		rc = ckpt_meta_uint(op, file, h, "rng_counter", UINT64_MAX, &rng, &has_rng);
	if (rc == TENSOR_OK)
		rc = ckpt_meta_uint(op, file, h, "seed", UINT64_MAX, &seed, &has_seed);
	/* update counts: at most 2^53, exact as doubles (and far from overflowing) */
	if (rc == TENSOR_OK)
		rc = ckpt_meta_uint(op, file, h, "optimizer_step", (uint64_t)CKPT_MAX_EXACT, &ostep,
			       &has_ostep);
	if (rc == TENSOR_OK)
		rc = ckpt_meta_uint(op, file, h, "ema_updates", (uint64_t)CKPT_MAX_EXACT, &eup, &has_eup);
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
		const struct ckpt_entry *e = cp[k].src;
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
	struct ckpt_header h;
	int rc = ckpt_header_parse(op, name, buf, len, len, &h);
	if (rc < 0)
		return rc;
	struct load_out o = { opt, ema, run_json, step };
	rc = load_header(op, name, &h, ps, &o);
	ckpt_header_free(&h);
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
	struct ckpt_header h;
	int rc = ckpt_header_parse(op, name, buf, avail, file_len, &h);
	if (rc < 0)
		return rc;
	const cJSON *v = h.meta ? cJSON_GetObjectItemCaseSensitive(h.meta, key) : NULL;
	if (v && !(*value = tensor_host_strdup(v->valuestring)))
		rc = nn_ckpt_fail(TENSOR_ERR_NOMEM, op, name, "out of memory");
	ckpt_header_free(&h);
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
	uint64_t want = *n == 8 ? ckpt_le64(*buf) : 0;
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
	struct ckpt_header h;
	int rc = ckpt_header_parse(op, name, buf, avail, file_len, &h);
	if (rc < 0)
		return rc;
	struct nn_checkpoint_info info = { 0 };
	uint64_t step = 0;
	bool has_step;
	rc = ckpt_meta_uint(op, name, &h, "step", INT64_MAX, &step, &has_step);
	info.step = (int64_t)step;
	info.tensors = rc == TENSOR_OK ? tensor_host_calloc((size_t)h.n + 1, sizeof *info.tensors)
				       : NULL;
	if (rc == TENSOR_OK && !info.tensors)
		rc = nn_ckpt_fail(TENSOR_ERR_NOMEM, op, name, "out of memory");
	for (int k = 0; rc == TENSOR_OK && k < h.n; k++) {
		const struct ckpt_entry *e = &h.e[k];
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
	ckpt_header_free(&h);
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
