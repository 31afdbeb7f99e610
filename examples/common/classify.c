/* Evaluation, logits files, prediction and the run state of the IMDB classifier programs
 * (see classify.h). */
#define _POSIX_C_SOURCE 200809L
#include "classify.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train.h"

static void *xmalloc(const char *prog, size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		flags_fail(prog, NULL, "out of memory");
	return p;
}

void logits_file_open(struct logits_file *o, const char *prog, const char *path, int64_t classes,
		      const struct outfile_input *inputs, int n)
{
	*o = (struct logits_file){ .file = { .path = path } };
	if (!path)
		return;
	outfile_check(prog, "output", path, inputs, n);
	size_t len = strlen(path);
	o->json = len > 6 && !strcmp(path + len - 6, ".jsonl");
	outfile_open(&o->file, prog, "output", path);
	if (!o->json) {
		outfile_printf(&o->file, "review,label");
		for (int64_t j = 0; j < classes; j++)
			outfile_printf(&o->file, ",logit_%lld", (long long)j);
		outfile_printf(&o->file, "\n");
	}
}

void logits_file_write(struct logits_file *o, const char *prog, const struct tensor *logits,
		       const int64_t *review, const int64_t *label)
{
	if (!o || !o->file.f)
		return;
	struct outfile *f = &o->file;
	int64_t B = logits->shape[0], C = logits->shape[1];
	float *v = xmalloc(prog, sizeof *v * (size_t)(B * C));
	struct tensor *t = tensor_cast(logits, TENSOR_F32);
	if (!t || tensor_to_host(t, v, sizeof *v * (size_t)(B * C)) < 0)
		train_die(prog, "--output");
	for (int64_t i = 0; i < B; i++) {
		long long rv = (long long)review[i], lb = label ? (long long)label[i] : -1;
		if (o->json)
			outfile_printf(f, "{\"review\": %lld, \"label\": %lld, \"logits\": [", rv,
				       lb);
		else
			outfile_printf(f, "%lld,%lld", rv, lb);
		for (int64_t j = 0; j < C; j++) /* float: %.9g gives them back exactly */
			outfile_printf(f, "%s%.9g",
				       j == 0 && o->json ? ""
				       : o->json	 ? ", "
							 : ",",
				       v[i * C + j]);
		outfile_printf(f, o->json ? "]}\n" : "\n");
	}
	free(v);
}

void logits_file_close(struct logits_file *o, const char *prog)
{
	if (!o->file.f)
		return;
	outfile_commit(&o->file, prog);
	fprintf(stderr, "%s: logits written to %s\n", prog, o->file.path);
}

void classify_load_model(const char *prog, const char *path, int64_t batch, bool mem_check,
			 struct model_config *c, struct nn_params *ps, struct model_classifier *m,
			 int64_t *step)
{
	char what[1200];
	snprintf(what, sizeof what, "loading %s", path);
	if (model_config_from_checkpoint(path, c) < 0)
		train_die(prog, what);
	if (mem_check) {
		char run[1200];
		snprintf(run, sizeof run, "%s at n %lld, batch %lld", path, (long long)c->max_len,
			 (long long)batch);
		train_check_memory(prog, model_estimate_bytes(c, batch, false, false), 0, run);
	}
	if (nn_params_init(ps, TENSOR_F32, train_device, c->seed) < 0 ||
	    model_classifier_init(m, ps, c) < 0 || nn_checkpoint_load(path, ps, NULL, step) < 0)
		train_die(prog, what);
}

void classify_sample(const char *prog, struct text_dataset *ds, int64_t max, uint64_t seed,
		     struct text_dataset *out)
{
	struct text_dataset rest;
	if (max <= 0 || max >= ds->n) {
		*out = *ds;
		return;
	}
	if (text_dataset_split(ds, (double)max / (double)ds->n, seed, &rest, out) < 0)
		train_die(prog, "sampling the reviews");
	text_dataset_free(ds);
	text_dataset_free(&rest);
}

struct eval_result classify_evaluate(const char *prog, const struct model_classifier *m,
				     struct nn_params *ps, const struct text_batcher *b,
				     struct logits_file *out)
{
	struct eval_result r = { 0 };
	double loss = 0;
	/* data-parallel: each rank takes every size-th batch (all of them with --output) */
	bool shard = !(out && out->file.f);
	int64_t first = shard ? nn_dist_rank() : 0, every = shard ? nn_dist_size() : 1;
	nn_params_train(ps, false);
	ag_no_grad_begin();
	for (int64_t i = first; i < text_batcher_num_batches(b); i += every) {
		struct text_batch batch;
		tensor_scope_begin();
		if (text_batcher_get(b, i, &batch) < 0 || train_batch_to_device(&batch) < 0)
			train_die(prog, "evaluation batch");
		struct tensor *logits = model_classifier_forward(m, batch.ids, batch.mask);
		struct tensor *l = nn_cross_entropy(logits, batch.labels, -1, 0.0);
		double acc = l ? nn_accuracy(logits, batch.labels, -1) : -1;
		if (!l || acc < 0)
			train_die(prog, "evaluation");
		if (out && out->file.f) {
			int64_t *lab = xmalloc(prog, sizeof *lab * (size_t)batch.size);
			struct tensor *hl = tensor_to_device(batch.labels, TENSOR_CPU);
			if (!hl || tensor_to_host(hl, lab, sizeof *lab * (size_t)batch.size) < 0)
				train_die(prog, "--output");
			logits_file_write(out, prog, logits, b->order + i * b->batch_size, lab);
			free(lab);
		}
		loss += tensor_get(l, NULL) * (double)batch.size;
		r.correct += llround(acc * (double)batch.size);
		r.n += batch.size;
		tensor_scope_end();
	}
	ag_no_grad_end();
	nn_params_train(ps, true);
	double sums[3] = { loss, (double)r.correct, (double)r.n };
	if (shard && nn_dist_sum(sums, 3) < 0)
		train_die(prog, "evaluation");
	loss = sums[0], r.correct = (int64_t)sums[1], r.n = (int64_t)sums[2];
	r.loss = r.n ? loss / (double)r.n : NAN;
	r.acc = r.n ? (double)r.correct / (double)r.n : NAN;
	return r;
}

void classify_print_test(const struct eval_result *r)
{
	printf("test: loss %.4f accuracy %.4f (%lld/%lld reviews)\n", r->loss, r->acc,
	       (long long)r->correct, (long long)r->n);
}

/* The reviews to predict: text alone, or each line of file, their line breaks replaced as
 * the aclImdb reader does (text_replace_line_breaks). */
static char **read_lines(const char *prog, const char *text, const char *file, int64_t *n)
{
	char **lines = NULL;
	*n = 0;
	if (text) {
		lines = xmalloc(prog, sizeof *lines);
		lines[(*n)++] = strcpy(xmalloc(prog, strlen(text) + 1), text);
		text_replace_line_breaks(lines[0]);
		return lines;
	}
	FILE *f = fopen(file, "r");
	if (!f)
		flags_fail(prog, "predict-file", "cannot open %s: %s", file, strerror(errno));
	char *line = NULL;
	size_t cap = 0;
	while (getline(&line, &cap, f) >= 0) {
		line[strcspn(line, "\r\n")] = 0;
		char **more = realloc(lines, sizeof *lines * (size_t)(*n + 1));
		if (!more)
			flags_fail(prog, "predict-file", "out of memory");
		lines = more;
		lines[(*n)++] = strcpy(xmalloc(prog, strlen(line) + 1), line);
		text_replace_line_breaks(lines[*n - 1]);
	}
	free(line);
	fclose(f);
	return lines;
}

void classify_predict(const char *prog, const struct model_classifier *m, struct nn_params *ps,
		      const struct text_tokenizer *tok, const char *text, const char *file,
		      int64_t batch, struct logits_file *out)
{
	int64_t nlines, n = m->enc.cfg.max_len, C = m->enc.cfg.num_classes;
	char **lines = read_lines(prog, text, file, &nlines);
	int32_t *ids = xmalloc(prog, sizeof *ids * (size_t)(batch * n));
	int32_t *mask = xmalloc(prog, sizeof *mask * (size_t)(batch * n));
	float *p = xmalloc(prog, sizeof *p * (size_t)(batch * C));
	int64_t *row = xmalloc(prog, sizeof *row * (size_t)batch);
	nn_params_train(ps, false);
	ag_no_grad_begin();
	for (int64_t s = 0; s < nlines; s += batch) {
		int64_t B = nlines - s < batch ? nlines - s : batch;
		for (int64_t i = 0; i < B; i++)
			if (text_encode(tok, lines[s + i], strlen(lines[s + i]), n, ids + i * n,
					mask + i * n, NULL) < 0)
				train_die(prog, "tokenizing");
		tensor_scope_begin();
		int64_t shape[2] = { B, n };
		struct tensor *ti = tensor_from_data(TENSOR_I32, train_device, 2, shape, ids);
		struct tensor *tm = tensor_from_data(TENSOR_I32, train_device, 2, shape, mask);
		struct tensor *logits = model_classifier_forward(m, ti, tm);
		struct tensor *probs = tensor_softmax(logits, 1);
		if (!probs || tensor_to_host(probs, p, sizeof *p * (size_t)(B * C)) < 0)
			train_die(prog, "prediction");
		for (int64_t i = 0; i < B; i++)
			row[i] = s + i;
		logits_file_write(out, prog, logits, row, NULL);
		for (int64_t i = 0; i < B; i++)
			for (int64_t j = 0; j < C; j++)
				printf("%.4f%c", p[i * C + j], j + 1 < C ? ' ' : '\n');
		tensor_scope_end();
	}
	ag_no_grad_end();
	for (int64_t i = 0; i < nlines; i++)
		free(lines[i]);
	free(lines), free(ids), free(mask), free(p), free(row);
}

static const char *const CSV_COLS[] = { "step", "epoch",	"split",     "loss",   "accuracy",
					"lr",	"tokens_per_s", "elapsed_s", "peak_mb" };
enum { NCSV = sizeof CSV_COLS / sizeof CSV_COLS[0], CSV_ELAPSED = 7 };

void classify_log_open(struct classify_log *l, const char *prog, const char *dir, bool resume,
		       int64_t step, double *elapsed)
{
	char path[4200], err[1200];
	snprintf(path, sizeof path, "%s/metrics.csv", dir);
	l->prog = prog;
	if (nn_dist_rank() != 0) /* rank 0 alone logs */
		return;
	if ((resume &&
	     csvlog_drop_after(path, (long long)step, CSV_ELAPSED, elapsed, err, sizeof err) < 0) ||
	    csvlog_open(&l->csv, path, CSV_COLS, NCSV, resume, err, sizeof err) < 0 ||
	    tb_open(&l->tb, dir, err, sizeof err) < 0)
		flags_fail(prog, "log-dir", "%s", err);
}

void classify_log_scalar(struct classify_log *l, const char *tag, double v, int64_t step)
{
	if (nn_dist_rank() != 0)
		return;
	if (tb_scalar(&l->tb, tag, v, step) < 0)
		flags_fail(l->prog, "log-dir", "cannot write %s: %s", l->tb.path, strerror(errno));
}

void classify_log_row(struct classify_log *l, int64_t step, int64_t epoch, const char *split,
		      double loss, double acc, double lr, double tps, double elapsed)
{
	char lrs[32] = "", tpss[32] = "", tag[64];
	if (nn_dist_rank() != 0)
		return;
	if (lr >= 0)
		snprintf(lrs, sizeof lrs, "%.6g", lr);
	if (tps >= 0)
		snprintf(tpss, sizeof tpss, "%.1f", tps);
	if (csvlog_row(&l->csv, "%lld,%lld,%s,%.6f,%.6f,%s,%s,%.3f,%.1f", (long long)step,
		       (long long)epoch, split, loss, acc, lrs, tpss, elapsed, train_peak_mb()) < 0)
		flags_fail(l->prog, "log-dir", "cannot write metrics.csv: %s", strerror(errno));
	snprintf(tag, sizeof tag, "%s/loss", split);
	classify_log_scalar(l, tag, loss, step);
	snprintf(tag, sizeof tag, "%s/acc", split);
	classify_log_scalar(l, tag, acc, step);
	if (lr >= 0)
		classify_log_scalar(l, "lr", lr, step);
}

void classify_log_close(struct classify_log *l)
{
	csvlog_close(&l->csv);
	tb_close(&l->tb);
}

void run_state_save(const char *prog, const char *path, const struct run_state *s,
		    const struct nn_params *ps, const struct nn_adamw *o, const struct nn_ema *ema,
		    const char *cfg_json, const char *text_json)
{
	/* the flags as the same bytes after a resume */
	char *fl = flags_to_json(s->flags, s->nflags, s->free_flags), *text = NULL;
	cJSON *obj = cJSON_CreateObject(), *f = fl ? cJSON_Parse(fl) : NULL;
	if (obj && f && cJSON_AddNumberToObject(obj, "step", (double)s->step) &&
	    cJSON_AddNumberToObject(obj, "best_val_acc", s->best_val) &&
	    cJSON_AddNumberToObject(obj, "best_epoch", (double)s->best_epoch) &&
	    cJSON_AddItemToObject(obj, "flags", f))
		text = cJSON_PrintUnformatted(obj);
	else
		cJSON_Delete(f);
	cJSON_Delete(obj);
	free(fl);
	if (!text)
		tensor_error(TENSOR_ERR_NOMEM, "out of memory for the run state");
	struct nn_checkpoint_meta meta[3] = { { "run", text } };
	int n = 1;
	if (cfg_json)
		meta[n++] = (struct nn_checkpoint_meta){ "config", cfg_json };
	if (text_json)
		meta[n++] = (struct nn_checkpoint_meta){ "text", text_json };
	if (!text || nn_checkpoint_save_meta(path, ps, o, ema, meta, n, s->step) < 0)
		train_die(prog, "saving a checkpoint");
	cJSON_free(text);
}

/* Remove the temporary files of killed saves of path and of the names in saves beside it. */
static void remove_temps(const char *prog, const char *path, const char *const *saves)
{
	if (nn_dist_rank() != 0)
		return;
	const char *slash = strrchr(path, '/');
	int removed = nn_checkpoint_remove_temps(path);
	for (const char *const *name = saves; removed >= 0 && name && *name; name++) {
		char other[4200];
		snprintf(other, sizeof other, "%.*s%s", slash ? (int)(slash - path) + 1 : 0, path,
			 *name);
		int rc = nn_checkpoint_remove_temps(other);
		removed = rc < 0 ? rc : removed + rc;
	}
	if (removed < 0)
		train_die(prog, "--resume");
	if (removed)
		printf("removed %d temporary file%s of interrupted saves\n", removed,
		       removed == 1 ? "" : "s");
}

void run_state_load(const char *prog, const char *path, struct run_state *s, struct nn_params *ps,
		    struct nn_adamw *o, struct nn_ema *ema)
{
	char err[1200], *text = NULL;
	int64_t step;
	remove_temps(prog, path, s->saves);
	if (access(path, F_OK) != 0)
		flags_fail(
		    prog, "resume",
		    "%s: no saved state (the run stopped before its first checkpoint: start it "
		    "again without --resume)",
		    path);
	if (nn_checkpoint_load_run(path, ps, o, ema, &text, &step) < 0)
		train_die(prog, "resuming");
	cJSON *obj = text ? cJSON_Parse(text) : NULL;
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(obj, "step");
	const cJSON *bv = cJSON_GetObjectItemCaseSensitive(obj, "best_val_acc");
	const cJSON *be = cJSON_GetObjectItemCaseSensitive(obj, "best_epoch");
	char *fl = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(obj, "flags"));
	/* a run stopped before its first validation has no best value yet (an infinite
	 * perplexity, saved as null): s->best_val keeps the caller's */
	bool none_yet = cJSON_IsNull(bv) && cJSON_IsNumber(be) && be->valuedouble == 0;
	if (!cJSON_IsNumber(st) || !(cJSON_IsNumber(bv) || none_yet) || !cJSON_IsNumber(be) ||
	    !fl || st->valuedouble != (double)step ||
	    !(be->valuedouble >= 0 && be->valuedouble <= 1e12))
		flags_fail(prog, "resume",
			   "%s holds no training state of %s (saved by a run at an epoch's end or "
			   "when stopped)",
			   path, prog);
	if (flags_compare_json(s->flags, s->nflags, fl, s->free_flags, err, sizeof err) < 0)
		flags_fail(prog, "resume", "%s: %s (resume with the same settings)", path, err);
	s->step = step;
	if (!none_yet)
		s->best_val = bv->valuedouble;
	s->best_epoch = (int64_t)be->valuedouble;
	cJSON_free(fl);
	cJSON_Delete(obj);
	free(text);
}

/* " arg", single-quoted for the shell unless plain. */
static void print_arg(const char *a)
{
	if (!a[strspn(a,
		      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,:/=+")]) {
		printf(" %s", a);
		return;
	}
	printf(" '");
	for (; *a; a++)
		if (*a == '\'')
			fputs("'\\''", stdout); /* ' -> '\'' */
		else
			putchar(*a);
	printf("'");
}

static bool is_flag(const char *arg, const char *name)
{
	size_t n = strlen(name);
	return !strncmp(arg, name, n) && (arg[n] == 0 || arg[n] == '=');
}

void print_resume_command(int argc, char **argv, const char *log_dir, const char *ckpt_dir)
{
	/* a libtool build runs DIR/.libs/[lt-]PROG: name DIR/PROG */
	const char *libs = strstr(argv[0], "/.libs/");
	if (libs) {
		const char *base = libs + 7;
		base += strncmp(base, "lt-", 3) ? 0 : 3;
		printf("to resume: %.*s/%s", (int)(libs - argv[0]), argv[0], base);
	} else {
		printf("to resume: %s", argv[0]);
	}
	for (int i = 1; i < argc; i++) {
		bool valued = is_flag(argv[i], "--stop-after") || is_flag(argv[i], "--log-dir") ||
			      is_flag(argv[i], "--checkpoint-dir");
		if (valued && !strchr(argv[i], '='))
			i++;
		if (valued || !strcmp(argv[i], "--resume"))
			continue;
		print_arg(argv[i]);
	}
	printf(" --log-dir");
	print_arg(log_dir);
	if (ckpt_dir) {
		printf(" --checkpoint-dir");
		print_arg(ckpt_dir);
	}
	printf(" --resume\n");
}
