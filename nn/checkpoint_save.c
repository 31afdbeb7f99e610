/* Saving checkpoints: the safetensors header and data written to a temporary
 * file of a unique name, fsync'd, renamed over the target and the directory
 * fsync'd, so a reader sees the old file or the new one, never a mix. A
 * training run's whole state (parameters, AdamW's moments, the moving
 * average, the caller's run state) goes into one file: one rename commits it. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint_internal.h"
#include "mem.h"
#include "nn.h"

static void (*crash_hook)(const char *path, int point);

void nn_checkpoint_set_crash_hook(void (*hook)(const char *path, int point))
{
	crash_hook = hook;
}

/* Point `point` of saving path (the test hook may end the process here). */
static void reached(const char *path, int point)
{
	if (crash_hook)
		crash_hook(path, point);
}

struct item {
	char name[NN_NAME_MAX + 16];
	const struct tensor *t;
};

static cJSON *json_uints(const int64_t *v, int n)
{
	cJSON *a = cJSON_CreateArray();
	for (int i = 0; a && i < n; i++) {
		char s[24];
		snprintf(s, sizeof s, "%" PRId64, v[i]);
		cJSON *x = cJSON_CreateRaw(s); /* exact integers, never 1e+15 */
		if (!x || !cJSON_AddItemToArray(a, x)) {
			cJSON_Delete(x);
			cJSON_Delete(a);
			return NULL;
		}
	}
	return a;
}

static bool meta_add(cJSON *meta, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool meta_add(cJSON *meta, const char *key, const char *fmt, ...)
{
	char s[64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s, sizeof s, fmt, ap);
	va_end(ap);
	return cJSON_AddStringToObject(meta, key, s) != NULL;
}

/* What goes into __metadata__ besides the tensors. */
struct meta_in {
	const struct nn_params *ps;
	const struct nn_adamw *opt;
	const struct nn_ema *ema;
	const struct nn_checkpoint_meta *meta; /* the caller's entries ("config", "run", ...) */
	int n_meta;
	int64_t step;
};

/* The JSON header for items (data laid out in order), unpadded. */
static char *build_header(const struct meta_in *in, const struct item *it, int n)
{
	cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, CKPT_META);
	bool ok = meta && cJSON_AddStringToObject(meta, "format", "cformer") &&
		  meta_add(meta, "step", "%" PRId64, in->step) &&
		  meta_add(meta, "rng_counter", "%" PRIu64, in->ps->rng_counter) &&
		  meta_add(meta, "seed", "%" PRIu64, in->ps->seed);
	for (int i = 0; ok && i < in->n_meta; i++)
		ok = cJSON_AddStringToObject(meta, in->meta[i].key, in->meta[i].value) != NULL;
	const struct nn_adamw *opt = in->opt;
	if (ok && opt)
		ok = cJSON_AddStringToObject(meta, "optimizer", "adamw") &&
		     meta_add(meta, "optimizer_step", "%" PRId64, opt->step) &&
		     meta_add(meta, "optimizer_lr", "%.17g", opt->lr) &&
		     meta_add(meta, "optimizer_beta1", "%.17g", opt->beta1) &&
		     meta_add(meta, "optimizer_beta2", "%.17g", opt->beta2) &&
		     meta_add(meta, "optimizer_eps", "%.17g", opt->eps) &&
		     meta_add(meta, "optimizer_weight_decay", "%.17g", opt->weight_decay) &&
		     meta_add(meta, "optimizer_decay_all", "%s", opt->decay_all ? "true" : "false");
	if (ok && in->ema)
		ok = meta_add(meta, "ema_updates", "%" PRId64, in->ema->updates) &&
		     meta_add(meta, "ema_decay", "%.17g", in->ema->decay);
	int64_t off[2] = { 0, 0 };
	for (int i = 0; ok && i < n; i++) {
		off[0] = off[1];
		off[1] += (int64_t)tensor_nbytes(it[i].t);
		cJSON *e = cJSON_AddObjectToObject(root, it[i].name);
		cJSON *sh = json_uints(it[i].t->shape, it[i].t->ndim), *of = json_uints(off, 2);
		ok = e && sh && of &&
		     cJSON_AddStringToObject(e, "dtype", nn_ckpt_dtype_name[it[i].t->dtype]);
		ok = ok && cJSON_AddItemToObject(e, "shape", sh);
		if (!ok)
			cJSON_Delete(sh);
		ok = ok && cJSON_AddItemToObject(e, "data_offsets", of);
		if (!ok)
			cJSON_Delete(of);
	}
	char *s = ok ? cJSON_PrintUnformatted(root) : NULL;
	cJSON_Delete(root);
	return s;
}

/* Write header and tensor data to f. */
static int write_all(const char *op, const char *path, const char *tmp, FILE *f, const char *json,
		     const struct item *it, int n)
{
	size_t len = strlen(json), pad = (8 - len % 8) % 8; /* 8 + header: 8-byte aligned */
	uint64_t hlen = len + pad;
	uint8_t size[8];
	for (int i = 0; i < 8; i++)
		size[i] = (uint8_t)(hlen >> (8 * i));
	bool ok = fwrite(size, 1, 8, f) == 8 && fwrite(json, 1, len, f) == len &&
		  fwrite("        ", 1, pad, f) == pad;
	if (ok && fflush(f) == 0)
		reached(path, NN_CKPT_HEADER_WRITTEN);
	void *scratch = NULL;
	size_t scratch_len = 0;
	int rc = TENSOR_OK;
	/* a file the loader would refuse is not written: the old one stays */
	char after[256];
	snprintf(after, sizeof after, "; not saved: %s",
		 access(path, F_OK) ? "no file written" : "the file keeps its previous contents");
	for (int i = 0; ok && rc == TENSOR_OK && i < n; i++) {
		const struct tensor *t = it[i].t;
		size_t nb = tensor_nbytes(t);
		const void *src = tensor_data(t);
		if (nb == 0)
			continue;
		if (t->storage->device != TENSOR_CPU || !tensor_is_contiguous(t)) {
			if (nb > scratch_len) {
				void *p = tensor_host_realloc(scratch, nb);
				if (!p) {
					rc = nn_ckpt_fail(TENSOR_ERR_NOMEM, op, path,
							  "no memory to stage '%s'", it[i].name);
					break;
				}
				scratch = p;
				scratch_len = nb;
			}
			if ((rc = tensor_to_host(t, scratch, nb)) < 0)
				break;
			src = scratch;
		}
		rc = nn_ckpt_check_values(op, path, it[i].name, t->ndim, t->shape, src, nb,
					  t->dtype, after);
		ok = rc == TENSOR_OK && fwrite(src, 1, nb, f) == nb;
	}
	free(scratch);
	if (rc == TENSOR_OK && (!ok || fflush(f) != 0 || fsync(fileno(f)) != 0))
		rc = nn_ckpt_fail(TENSOR_ERR_IO, op, path, "cannot write %s: %s", tmp,
				  strerror(errno));
	return rc;
}

/* Make the rename durable: fsync the directory (best effort; the file itself
 * is complete either way). */
static void sync_dir(const char *path)
{
	char *copy = tensor_host_strdup(path);
	if (!copy)
		return;
	int fd = open(dirname(copy), O_RDONLY);
	if (fd >= 0) {
		(void)fsync(fd);
		close(fd);
	}
	free(copy);
}

/* Whether key is one the library writes itself. */
static bool reserved_key(const char *key)
{
	static const char *const own[] = { "format", "step", "rng_counter", "seed", "optimizer" };
	for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
		if (!strcmp(key, own[i]))
			return true;
	return !strncmp(key, "optimizer_", 10) || !strncmp(key, "ema_", 4);
}

/* The caller's metadata entries: keys set, unique and not the library's; "config" and "run"
 * valid JSON. */
static int check_meta(const char *op, const char *path, const struct nn_checkpoint_meta *meta,
		      int n)
{
	if (n < 0 || (n > 0 && !meta))
		return nn_ckpt_fail(TENSOR_ERR_ARG, op, path, "%s",
				    n < 0 ? "a negative number of metadata entries"
					  : "meta is NULL with entries to write");
	for (int i = 0; i < n; i++) {
		const char *key = meta[i].key, *v = meta[i].value;
		if (!key || !v)
			return nn_ckpt_fail(TENSOR_ERR_ARG, op, path,
					    "metadata entry %d: %s is NULL", i,
					    key ? "the value" : "the key");
		if (reserved_key(key))
			return nn_ckpt_fail(TENSOR_ERR_ARG, op, path,
					    "metadata key '%.100s' is the library's own", key);
		for (int j = 0; j < i; j++)
			if (!strcmp(meta[j].key, key))
				return nn_ckpt_fail(TENSOR_ERR_ARG, op, path,
						    "metadata key '%.100s' given twice", key);
		if (strcmp(key, "config") && strcmp(key, "run"))
			continue;
		const char *end = NULL;
		cJSON *c = cJSON_ParseWithOpts(v, &end, true);
		cJSON_Delete(c);
		if (!c)
			return nn_ckpt_fail(TENSOR_ERR_ARG, op, path,
					    "%s is not valid JSON (error near byte %td)",
					    strcmp(key, "run") ? "config_json" : "run_json",
					    end ? end - v : (ptrdiff_t)0);
	}
	return TENSOR_OK;
}

/* The arguments of a save: NULL or an error. */
static int check_args(const char *op, const char *path, const struct meta_in *in)
{
	const struct nn_params *ps = in->ps;
	const struct nn_adamw *opt = in->opt;
	const struct nn_ema *ema = in->ema;
	if (!path || !*path || !ps)
		return nn_ckpt_fail(TENSOR_ERR_ARG, op, path, "%s",
				    !ps ? "ps is NULL" : "no path given");
	if (in->step < 0)
		return nn_ckpt_fail(TENSOR_ERR_ARG, op, path, "step %" PRId64 " is negative",
				    in->step);
	if (opt && (opt->ps != ps || !opt->m || !opt->v || opt->step < 0))
		return nn_ckpt_fail(TENSOR_ERR_ARG, op, path, "the optimizer %s",
				    opt->ps != ps   ? "belongs to another nn_params"
				    : opt->step < 0 ? "has a negative step"
						    : "has no state allocated");
	if (ema && (ema->ps != ps || !ema->shadow || ema->swapped))
		return nn_ckpt_fail(TENSOR_ERR_ARG, op, path, "the moving average %s",
				    ema->ps != ps  ? "belongs to another nn_params"
				    : ema->swapped ? "is swapped in (nn_ema_swap back first)"
						   : "is not initialised");
	int rc = check_meta(op, path, in->meta, in->n_meta);
	if (rc < 0)
		return rc;
	for (int i = 0; i < ps->n; i++) {
		const char *name = ps->items[i].name;
		if (!strcmp(name, CKPT_META) || !strncmp(name, CKPT_OPT, strlen(CKPT_OPT)))
			return nn_ckpt_fail(TENSOR_ERR_ARG, op, path,
					    "parameter name '%s' is reserved in checkpoints", name);
		const char *lacks = opt && (!opt->m[i] || !opt->v[i]) ? "the optimizer"
				    : ema && !ema->shadow[i]	      ? "the moving average"
								      : NULL;
		if (lacks)
			return nn_ckpt_fail(TENSOR_ERR_ARG, op, path,
					    "%s has no state for '%s' (parameter added after it "
					    "was created?)",
					    lacks, name);
	}
	return TENSOR_OK;
}

/* The tensors to save, 8-byte dtypes first, then 4-byte, then 2-byte (bf16), so
 * that every tensor's data stays aligned to its size: per parameter its value,
 * AdamW's m and v, the moving average. *n receives the count; NULL with an
 * error. */
static struct item *items_of(const char *op, const char *path, const struct meta_in *in, int *n)
{
	const struct nn_params *ps = in->ps;
	static const char *const pre[4] = { "", CKPT_OPT_M, CKPT_OPT_V, CKPT_OPT_EMA };
	struct item *it = tensor_host_calloc((size_t)(4 * ps->n + 1), sizeof *it);
	if (!it) {
		nn_ckpt_fail(TENSOR_ERR_NOMEM, op, path, "out of memory");
		return NULL;
	}
	*n = 0;
	static const size_t pass_size[3] = { 8, 4, 2 };
	for (int pass = 0; pass < 3; pass++) {
		for (int i = 0; i < ps->n; i++) {
			const struct tensor *ts[4] = { ps->items[i].value,
						       in->opt ? in->opt->m[i] : NULL,
						       in->opt ? in->opt->v[i] : NULL,
						       in->ema ? in->ema->shadow[i] : NULL };
			for (int j = 0; j < 4; j++) {
				if (!ts[j] || tensor_dtype_size(ts[j]->dtype) != pass_size[pass])
					continue;
				snprintf(it[*n].name, sizeof it[*n].name, "%s%s", pre[j],
					 ps->items[i].name);
				it[(*n)++].t = ts[j];
			}
		}
	}
	return it;
}

/* A save's temporary file: path TEMP_INFIX <pid>.<n>. */
#define TEMP_INFIX ".tmp."

/* Create path.tmp.<pid>.<n>, a name no other process or save of this one
 * uses (O_EXCL), with the mode a plain file gets; its name in tmp. */
static FILE *create_temp(const char *path, char *tmp, size_t len)
{
	static _Atomic unsigned counter;
	for (int tries = 0; tries < 100; tries++) {
		snprintf(tmp, len, "%s" TEMP_INFIX "%ld.%u", path, (long)getpid(), counter++);
		int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
		if (fd >= 0) {
			FILE *f = fdopen(fd, "wb");
			if (!f) {
				close(fd);
				unlink(tmp);
			}
			return f;
		}
		if (errno != EEXIST)
			return NULL;
	}
	return NULL;
}

/* Write the file through a temporary of a unique name beside it. */
static int write_file(const char *op, const char *path, const char *json, const struct item *it,
		      int n)
{
	size_t len = strlen(path) + 48;
	char *tmp = tensor_host_malloc(len);
	if (!tmp)
		return nn_ckpt_fail(TENSOR_ERR_NOMEM, op, path, "out of memory");
	FILE *f = create_temp(path, tmp, len);
	if (!f) {
		int rc = nn_ckpt_fail(TENSOR_ERR_IO, op, path, "cannot create %s: %s", tmp,
				      strerror(errno));
		free(tmp);
		return rc;
	}
	int rc = write_all(op, path, tmp, f, json, it, n);
	if (fclose(f) != 0 && rc == TENSOR_OK)
		rc = nn_ckpt_fail(TENSOR_ERR_IO, op, path, "cannot close %s: %s", tmp,
				  strerror(errno));
	if (rc == TENSOR_OK)
		reached(path, NN_CKPT_FILE_WRITTEN);
	if (rc == TENSOR_OK && rename(tmp, path) != 0)
		rc = nn_ckpt_fail(TENSOR_ERR_IO, op, path, "cannot rename %s to it: %s", tmp,
				  strerror(errno));
	if (rc < 0) {
		unlink(tmp);
	} else {
		reached(path, NN_CKPT_RENAMED);
		sync_dir(path);
	}
	free(tmp);
	return rc;
}

int nn_checkpoint_save_meta(const char *path, const struct nn_params *ps,
			    const struct nn_adamw *opt, const struct nn_ema *ema,
			    const struct nn_checkpoint_meta *meta, int n_meta, int64_t step)
{
	const char *op = "nn_checkpoint_save";
	struct meta_in in = { ps, opt, ema, meta, n_meta, step };
	int rc = check_args(op, path, &in), n = 0;
	struct item *it = rc == TENSOR_OK ? items_of(op, path, &in, &n) : NULL;
	if (rc == TENSOR_OK && !it)
		rc = tensor_last_status();
	char *json = rc == TENSOR_OK ? build_header(&in, it, n) : NULL;
	if (rc == TENSOR_OK && !json)
		rc = nn_ckpt_fail(TENSOR_ERR_NOMEM, op, path, "cannot build the JSON header");
	if (rc == TENSOR_OK) {
		reached(path, NN_CKPT_BEGIN);
		rc = write_file(op, path, json, it, n);
	}
	cJSON_free(json);
	free(it);
	return rc;
}

int nn_checkpoint_save_run(const char *path, const struct nn_params *ps, const struct nn_adamw *opt,
			   const struct nn_ema *ema, const char *config_json, const char *run_json,
			   int64_t step)
{
	struct nn_checkpoint_meta meta[2];
	int n = 0;
	if (config_json)
		meta[n++] = (struct nn_checkpoint_meta){ "config", config_json };
	if (run_json)
		meta[n++] = (struct nn_checkpoint_meta){ "run", run_json };
	return nn_checkpoint_save_meta(path, ps, opt, ema, meta, n, step);
}

int nn_checkpoint_save(const char *path, const struct nn_params *ps, const struct nn_adamw *opt,
		       const char *config_json, int64_t step)
{
	return nn_checkpoint_save_run(path, ps, opt, NULL, config_json, NULL, step);
}

/* The pid of a temporary file's name "<base>.tmp.<pid>.<n>" of a save of base, else 0. */
static long temp_pid(const char *name, const char *base)
{
	size_t nb = strlen(base), ni = strlen(TEMP_INFIX);
	if (strncmp(name, base, nb) || strncmp(name + nb, TEMP_INFIX, ni))
		return 0;
	const char *p = name + nb + ni;
	char *end;
	errno = 0;
	long pid = strtol(p, &end, 10);
	if (end == p || *end != '.' || errno || pid <= 0 || !isdigit((unsigned char)end[1]))
		return 0;
	for (p = end + 1; isdigit((unsigned char)*p); p++)
		;
	return *p ? 0 : pid;
}

int nn_checkpoint_remove_temps(const char *path)
{
	const char *op = "nn_checkpoint_remove_temps";
	if (!path || !*path)
		return nn_ckpt_fail(TENSOR_ERR_ARG, op, path, "no path given");
	char *d = tensor_host_strdup(path), *b = tensor_host_strdup(path);
	const char *dir = d ? dirname(d) : NULL, *base = b ? basename(b) : NULL;
	DIR *dp = dir && base ? opendir(dir) : NULL;
	int rc = d && b ? TENSOR_OK : nn_ckpt_fail(TENSOR_ERR_NOMEM, op, path, "out of memory");
	if (rc == TENSOR_OK && !dp && errno != ENOENT)
		rc = nn_ckpt_fail(TENSOR_ERR_IO, op, path, "cannot read the directory %s: %s", dir,
				  strerror(errno));
	int removed = 0;
	for (struct dirent *e; rc == TENSOR_OK && dp && (e = readdir(dp));) {
		long pid = temp_pid(e->d_name, base);
		/* a process that still runs may be writing it */
		if (!pid || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		char *full = tensor_host_malloc(strlen(dir) + strlen(e->d_name) + 2);
		if (!full) {
			rc = nn_ckpt_fail(TENSOR_ERR_NOMEM, op, path, "out of memory");
			break;
		}
		sprintf(full, "%s/%s", dir, e->d_name);
		if (unlink(full) == 0)
			removed++;
		else if (errno != ENOENT)
			rc = nn_ckpt_fail(TENSOR_ERR_IO, op, path, "cannot remove %s: %s", full,
					  strerror(errno));
		free(full);
	}
	if (dp)
		closedir(dp);
	free(d);
	free(b);
	return rc < 0 ? rc : removed;
}
