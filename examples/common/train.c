/* Training-loop helpers for the examples (see train.h). */
#define _POSIX_C_SOURCE 200809L
#include "train.h"
#include "flags.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void train_die(const char *prog, const char *what)
{
	if (nn_dist_size() > 1) {
		fprintf(stderr, "%s (rank %d of %d): %s: %s\n", prog, nn_dist_rank(),
			nn_dist_size(), what, tensor_last_error());
		nn_dist_abort(1);
	}
	fprintf(stderr, "%s: %s: %s\n", prog, what, tensor_last_error());
	exit(1);
}

void train_dist_init(const char *prog, int *argc, char ***argv)
{
	if (nn_dist_init(argc, argv) < 0)
		train_die(prog, "joining the data-parallel group");
	if (nn_dist_rank() != 0 && !freopen("/dev/null", "w", stdout))
		train_die(prog, "silencing stdout");
}

/* The rows [lo, hi) of *t (if any) as a heap tensor in its place. */
static int narrow_rows(struct tensor **t, int64_t lo, int64_t hi)
{
	if (!*t)
		return TENSOR_OK;
	tensor_heap_begin();
	struct tensor *v = tensor_narrow(*t, 0, lo, hi - lo);
	tensor_heap_end();
	if (!v)
		return tensor_last_status();
	tensor_free(*t);
	*t = v;
	return TENSOR_OK;
}

/* For tests of a failing rank: CFORMER_FAIL_AT="RANK:N" makes rank RANK fail at its N-th
 * batch (train_die), "RANK:N:kill" kills it (SIGKILL, as the kernel's OOM killer would). */
static void fail_hook(void)
{
	static int64_t batches;
	const char *at = getenv("CFORMER_FAIL_AT");
	int rank = -1;
	long long n = 0;
	char how[8] = "";
	if (!at || sscanf(at, "%d:%lld:%7s", &rank, &n, how) < 2 || rank != nn_dist_rank() ||
	    ++batches != n)
		return;
	if (!strcmp(how, "kill"))
		raise(SIGKILL);
	fprintf(stderr, "rank %d of %d: CFORMER_FAIL_AT=%s: a planted failure\n", rank,
		nn_dist_size(), at);
	nn_dist_abort(1);
	exit(1);
}

int64_t train_batch_share(struct text_batch *b, struct nn_params *ps)
{
	int64_t rows = b->size, lo, hi;
	fail_hook();
	nn_dist_share(rows, &lo, &hi);
	ps->batch_first = lo;
	if (hi - lo == rows)
		return rows;
	if (narrow_rows(&b->ids, lo, hi) < 0 || narrow_rows(&b->mask, lo, hi) < 0 ||
	    narrow_rows(&b->labels, lo, hi) < 0)
		return tensor_last_status();
	b->size = hi - lo;
	return rows;
}

bool train_sync_writer(const char *prog)
{
	if (nn_dist_barrier() < 0)
		train_die(prog, "waiting for the other ranks");
	return nn_dist_rank() == 0;
}

void train_dist_report(const char *prog, struct nn_params *ps)
{
	uint64_t sum;
	if (nn_dist_size() == 1)
		return;
	if (nn_dist_check_same(ps->flat, "parameters", &sum) < 0)
		train_die(prog, "after training");
	printf("%d ranks: parameters identical (checksum %016llx)\n", nn_dist_size(),
	       (unsigned long long)sum);
}

int train_close_stdout(const char *prog, int rc)
{
	errno = 0;
	bool failed = fflush(stdout) != 0, earlier = !failed && ferror(stdout);
	int err = errno;
	if (fclose(stdout) != 0 && !failed && !earlier)
		failed = true, err = errno;
	if (!failed && !earlier)
		return rc;
	fprintf(stderr, "%s: writing the standard output: %s%s\n", prog,
		earlier ? "a write failed" : strerror(err),
		earlier ? " (the output is incomplete)" : "");
	return rc ? rc : 1;
}

double train_clock(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long crash_at, crash_seen;

/* Kill the process (SIGKILL, as `kill -9` would) at the crash_at-th save point. */
static void crash_point(const char *path, int point)
{
	(void)path, (void)point;
	if (++crash_seen == crash_at)
		kill(getpid(), SIGKILL);
}

void train_crash_hook_install(void)
{
	const char *env = getenv("CFORMER_CRASH_AT");
	crash_at = env ? strtol(env, NULL, 10) : 0;
	if (crash_at > 0)
		nn_checkpoint_set_crash_hook(crash_point);
}

enum tensor_device train_device = TENSOR_CPU;

/* MemAvailable of /proc/meminfo in bytes, -1 if unknown. */
static double host_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	double kib = -1;
	char line[256];
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib < 0 ? -1 : kib * 1024;
}

const char *train_mem_override = "pass --no-mem-check to run anyway";

void train_check_memory(const char *prog, double model_bytes, double data_bytes, const char *what)
{
	const double gib = 1024.0 * 1024 * 1024;
	double host = host_available(), dev = host;
	size_t free_bytes, total;
	if (train_device != TENSOR_CPU)
		dev = tensor_device_memory(train_device, &free_bytes, &total) == TENSOR_OK
			  ? (double)free_bytes
			  : -1;
	bool one = train_device == TENSOR_CPU;
	double need_dev = one ? model_bytes + data_bytes : model_bytes;
	double need_host = one ? 0 : data_bytes;
	if (model_bytes < 0)
		flags_fail(prog, NULL, "%s: the model's memory cannot be estimated: %s", what,
			   tensor_last_error());
	if ((dev < 0 || need_dev <= dev) && (host < 0 || need_host <= host))
		return;
	bool on_dev = dev >= 0 && need_dev > dev && train_device != TENSOR_CPU;
	flags_fail(prog, NULL,
		   "%s needs about %.2f GiB (the model %.2f GiB, the tokenized text %.2f GiB) but "
		   "%s has %.2f GiB available: lower --n or --batch, or %s",
		   what, (model_bytes + data_bytes) / gib, model_bytes / gib, data_bytes / gib,
		   on_dev ? "the GPU" : "the machine", (on_dev ? dev : host) / gib,
		   train_mem_override);
}

void train_set_device(const char *prog, const char *name)
{
	if (!strcmp(name, "cpu")) {
		train_device = TENSOR_CPU;
		return;
	}
	size_t free_bytes, total;
	if (tensor_device_memory(TENSOR_CUDA, &free_bytes, &total) < 0)
		flags_fail(prog, "device", "%s", tensor_last_error());
	train_device = TENSOR_CUDA;
}

enum tensor_dtype train_precision = TENSOR_F32;

void train_set_precision(const char *prog, const char *name)
{
	train_precision = strcmp(name, "bf16") ? TENSOR_F32 : TENSOR_BF16;
	if (strcmp(name, "tf32"))
		return;
	if (train_device != TENSOR_CUDA)
		flags_fail(prog, "precision", "tf32 is the GPU's tensor-core mode: use it with "
			   "--device cuda (on the CPU: f32 or bf16)");
	if (tensor_cuda_set_tf32(true) < 0)
		flags_fail(prog, "precision", "%s", tensor_last_error());
}

/* *t moved to train_device. */
static int move(struct tensor **t)
{
	if (!*t || (*t)->storage->device == train_device)
		return TENSOR_OK;
	struct tensor *d = tensor_to_device(*t, train_device);
	if (!d)
		return tensor_last_status();
	tensor_free(*t);
	*t = d;
	return TENSOR_OK;
}

int train_batch_to_device(struct text_batch *b)
{
	int rc = move(&b->ids);
	if (rc == TENSOR_OK)
		rc = move(&b->mask);
	if (rc == TENSOR_OK)
		rc = move(&b->labels);
	return rc;
}

double train_peak_mb(void)
{
	return (double)tensor_mem_stats(train_device).peak_bytes / (1024.0 * 1024.0);
}

void train_default_log_dir(char *buf, size_t len, const char *prefix, const char *model,
			   int64_t n)
{
	char stamp[32];
	time_t t = time(NULL);
	strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&t));
	snprintf(buf, len, "runs/%s%s-n%lld-%s", prefix, model, (long long)n, stamp);
}

int train_mkdirs(const char *path, char *err, size_t errlen)
{
	char buf[4096];
	if (nn_dist_rank() != 0)
		return 0;
	if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
		snprintf(err, errlen, "path too long: %s", path);
		return -1;
	}
	for (char *p = buf + 1;; p++) {
		char c = *p;
		if (c != '/' && c != 0)
			continue;
		*p = 0;
		struct stat st;
		if (mkdir(buf, 0777) < 0 && errno != EEXIST) {
			snprintf(err, errlen, "cannot create directory %s: %s", buf,
				 strerror(errno));
			return -1;
		}
		if (stat(buf, &st) < 0 || !S_ISDIR(st.st_mode)) {
			snprintf(err, errlen, "%s is not a directory", buf);
			return -1;
		}
		*p = c;
		if (!c)
			break;
	}
	/* writable: a file can be created there (found now, not after an epoch) */
	char probe[4200];
	snprintf(probe, sizeof probe, "%s/.cformer-write-test.%ld", buf, (long)getpid());
	int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (fd < 0) {
		snprintf(err, errlen, "cannot write in %s: %s", buf, strerror(errno));
		return -1;
	}
	close(fd);
	unlink(probe);
	return 0;
}

/* ---- signals ------------------------------------------------------------------------------ */

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	if (stop_signal) { /* the second one: stop now */
		signal(sig, SIG_DFL);
		raise(sig);
		return;
	}
	stop_signal = sig;
}

void train_signals_install(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

int train_stop_signal(void)
{
	return stop_signal;
}

int train_stop_status(void)
{
	return stop_signal ? 128 + stop_signal : 1;
}

/* ---- optimizer step --------------------------------------------------------------------- */

int train_batcher_init(struct text_batcher *b, const struct text_dataset *ds,
		       const struct text_tokenizer *tok, int64_t n, int64_t batch, uint64_t seed,
		       bool train, bool bucket)
{
	int st = text_batcher_init(b, ds, tok, n, batch, seed, train, bucket);
	if (st == TENSOR_OK)
		b->trim = bucket;
	return st;
}

/* CFORMER_NAN_GRAD_AT=S: the first parameter's gradient NaN at the 1-based step S. */
static int poison_gradients(struct nn_params *ps, int64_t step)
{
	const char *env = getenv("CFORMER_NAN_GRAD_AT");
	if (!env || strtoll(env, NULL, 10) != step || ps->n == 0 || !ps->items[0].value->grad)
		return TENSOR_OK;
	return tensor_fill_(ps->items[0].value->grad, NAN);
}

double train_optimizer_step(struct nn_params *ps, struct nn_adamw *opt,
			    const struct nn_schedule *sched, int64_t step, double clip)
{
	int rc = poison_gradients(ps, step + 1);
	if (rc < 0)
		return rc;
	opt->lr = nn_schedule_lr(sched, step);
	double norm = nn_clip_grad_norm(ps, clip > 0 ? clip : INFINITY);
	if (norm < 0 || !isfinite(norm))
		return norm < 0 ? norm : NAN; /* no update from NaN or inf gradients */
	rc = nn_adamw_step(opt);
	return rc < 0 ? rc : norm;
}

void train_nonfinite(const char *prog, int64_t step, bool loss_finite, bool skip,
		     const char *dir, int64_t saved, int64_t *skipped)
{
	const char *what = loss_finite ? "gradients are" : "loss is";
	if (skip) {
		if (!*skipped)
			fprintf(stderr, "%s: step %lld: the %s not finite: skipped (--skip-nonfinite)\n",
				prog, (long long)step, what);
		++*skipped;
		return;
	}
	fprintf(stderr, "\n%s: step %lld: the %s not finite (NaN or inf); stopped without saving: ",
		prog, (long long)step, what);
	if (saved >= 0)
		fprintf(stderr, "%s/last.safetensors holds step %lld, the last good state\n", dir,
			(long long)saved);
	else
		fprintf(stderr, "no checkpoint was saved yet\n");
	fprintf(stderr, "(a lower --lr or a --clip norm may help; --skip-nonfinite skips such "
			"steps instead)\n");
	exit(1);
}

int train_init_embedding(struct nn_params *ps, const struct model_encoder *enc, double std)
{
	struct tensor *w = enc->embed.weight; /* [vocab, dim] */
	int rc = nn_init_normal(w, 0, std, nn_param_seed(ps, "embed.weight"));
	int64_t pad = enc->embed.padding_idx;
	if (rc == TENSOR_OK && pad >= 0) {
		ag_no_grad_begin(); /* a view of a parameter, off the graph */
		struct tensor *row = tensor_narrow(w, 0, pad, 1);
		ag_no_grad_end();
		rc = row ? nn_init_zeros(row) : tensor_last_status();
		tensor_free(row);
	}
	return rc;
}

/* ---- checkpoints ------------------------------------------------------------------------ */

static bool same_shape(const struct tensor *a, const struct tensor *b)
{
	if (a->ndim != b->ndim || a->dtype != b->dtype)
		return false;
	for (int d = 0; d < a->ndim; d++)
		if (a->shape[d] != b->shape[d])
			return false;
	return true;
}

void train_save_checkpoint(const char *prog, const char *path, const struct nn_params *ps,
			   const struct nn_adamw *o, const char *cfg_json, const char *text_json,
			   int64_t step)
{
	struct nn_checkpoint_meta meta[2];
	int n = 0;
	if (cfg_json)
		meta[n++] = (struct nn_checkpoint_meta){ "config", cfg_json };
	if (text_json)
		meta[n++] = (struct nn_checkpoint_meta){ "text", text_json };
	if (nn_checkpoint_save_meta(path, ps, o, NULL, meta, n, step) < 0)
		train_die(prog, "saving a checkpoint");
}

/* A checkpoint rebuilt as the model it holds: an MLM model, or a classifier. */
struct pretrained {
	struct nn_params ps;
	struct model_mlm mlm;
	struct model_classifier cls;
	bool is_mlm;
};

static void pretrained_free(struct pretrained *p)
{
	model_mlm_free(&p->mlm);
	model_classifier_free(&p->cls);
	nn_params_free(&p->ps);
}

/* Load path into a fresh MLM model (or, failing that, a classifier) built from its config
 * cfg, with parameters of like's dtype and device. */
static int load_pretrained(const char *path, const struct model_config *cfg,
			   const struct nn_params *like, struct pretrained *p)
{
	char first[1024] = "";
	for (int kind = 0; kind < 2; kind++) {
		*p = (struct pretrained){ .is_mlm = kind == 0 };
		int rc = nn_params_init(&p->ps, like->dtype, like->device, cfg->seed);
		if (rc == TENSOR_OK)
			rc = kind == 0 ? model_mlm_init(&p->mlm, &p->ps, cfg)
				       : model_classifier_init(&p->cls, &p->ps, cfg);
		if (rc == TENSOR_OK)
			rc = nn_checkpoint_load(path, &p->ps, NULL, NULL);
		if (rc == TENSOR_OK) {
			tensor_clear_error();
			return TENSOR_OK;
		}
		pretrained_free(p);
		if (kind == 0)
			snprintf(first, sizeof first, "%s", tensor_last_error());
	}
	return tensor_error(TENSOR_ERR_IO,
			    "%s: not an MLM or classifier checkpoint of its own config (as an MLM "
			    "model: %s)",
			    path, first);
}

/* Whether a checkpoint's layer kinds (pattern a) can seed a model's (b): the same kinds, or,
 * with grow, standard layers under projected ones (whose projections then start fresh). */
static bool kinds_fit(const char *a, const char *b, bool grow)
{
	if (strlen(a) != strlen(b))
		return false;
	for (size_t i = 0; a[i]; i++)
		if (a[i] != b[i] && !(grow && a[i] == 'S'))
			return false;
	return true;
}

/* The model of checkpoint path (load_pretrained, parameters like dst's), its layer kinds
 * checked against like's (kinds_fit) when like is not NULL. */
static int open_pretrained(const char *path, const struct model_config *like,
			   const struct nn_params *dst, bool grow, struct pretrained *p)
{
	struct model_config cfg;
	int rc = model_config_from_checkpoint(path, &cfg);
	if (rc == TENSOR_OK)
		rc = model_config_resolve(&cfg);
	char a[MODEL_MAX_LAYERS + 1], b[MODEL_MAX_LAYERS + 1];
	if (rc == TENSOR_OK && like &&
	    !kinds_fit(model_config_pattern(&cfg, a), model_config_pattern(like, b), grow))
		rc = tensor_error(TENSOR_ERR_SHAPE,
				  "%s: its layers are %s, the model's %s (the same kinds are "
				  "needed, or standard layers where the model projects)",
				  path, a, b);
	return rc == TENSOR_OK ? load_pretrained(path, &cfg, dst, p) : rc;
}

/* "[2, 3] f32" of t into buf. */
static const char *shape_dtype(const struct tensor *t, char *buf, size_t len)
{
	char s[96];
	snprintf(buf, len, "%s %s", tensor_shape_str(t, s, sizeof s), tensor_dtype_name(t->dtype));
	return buf;
}

/* Every encoder tensor of the model (enc in dst) has its match in the file's encoder (senc in
 * src), and the file's encoder has nothing more: the number of tensors, or an error naming
 * the first that does not match. */
static int match_encoders(const char *path, const struct model_encoder *enc,
			  const struct nn_params *dst, const struct model_encoder *senc,
			  const struct nn_params *src)
{
	char a[128], b[128];
	int n = 0;
	for (int i = 0; i < dst->n; i++) {
		const struct nn_param *d = &dst->items[i];
		if (!model_encoder_has_param(enc, dst, d->name))
			continue;
		const struct nn_param *s = nn_params_find(src, d->name);
		if (!s || !model_encoder_has_param(senc, src, d->name))
			return tensor_error(TENSOR_ERR_SHAPE,
					    "%s lacks the encoder tensor %s (%s) of the model",
					    path, d->name, shape_dtype(d->value, a, sizeof a));
		if (!same_shape(s->value, d->value))
			return tensor_error(
			    TENSOR_ERR_SHAPE,
			    "%s: the encoder tensor %s is %s there, %s in the model", path, d->name,
			    shape_dtype(s->value, a, sizeof a), shape_dtype(d->value, b, sizeof b));
		n++;
	}
	for (int i = 0; i < src->n; i++) {
		const char *name = src->items[i].name;
		if (model_encoder_has_param(senc, src, name) &&
		    !model_encoder_has_param(enc, dst, name))
			return tensor_error(TENSOR_ERR_SHAPE,
					    "%s has the encoder tensor %s, which the model lacks",
					    path, name);
	}
	return n;
}

/* train_copy_encoder's report: the tensors copied, then each one of the file left unused. */
static void report_copy(FILE *f, const char *path, int copied, const struct pretrained *p,
			const struct model_encoder *senc)
{
	if (!f)
		return;
	char a[128];
	fprintf(f, "encoder: %d tensors from %s\n", copied, path);
	for (int i = 0; i < p->ps.n; i++) {
		const struct nn_param *s = &p->ps.items[i];
		if (!model_encoder_has_param(senc, &p->ps, s->name))
			fprintf(f, "  unused: %s %s (%s)\n", s->name,
				shape_dtype(s->value, a, sizeof a),
				p->is_mlm ? "the MLM head; the classifier's head starts fresh"
					  : "the file's classifier head; this one starts fresh");
	}
	struct nn_checkpoint_info info;
	if (nn_checkpoint_info(path, &info) == TENSOR_OK && info.optimizer_tensors)
		fprintf(f,
			"  unused: %d optimizer.* tensors (the pretraining's optimizer state; "
			"fine-tuning starts its own)\n",
			info.optimizer_tensors);
	nn_checkpoint_info_free(&info);
}

int train_copy_encoder(const char *path, const struct model_encoder *enc, struct nn_params *dst,
		       FILE *report)
{
	struct pretrained p;
	int rc = open_pretrained(path, NULL, dst, false, &p);
	if (rc < 0)
		return rc;
	const struct model_encoder *senc = p.is_mlm ? &p.mlm.enc : &p.cls.enc;
	int n = match_encoders(path, enc, dst, senc, &p.ps);
	rc = n < 0 ? n : TENSOR_OK;
	for (int i = 0; rc == TENSOR_OK && i < dst->n; i++) {
		struct nn_param *d = &dst->items[i];
		if (model_encoder_has_param(enc, dst, d->name))
			rc = tensor_copy_(d->value, nn_params_find(&p.ps, d->name)->value);
	}
	if (rc == TENSOR_OK)
		report_copy(report, path, n, &p, senc);
	pretrained_free(&p);
	return rc < 0 ? rc : n;
}

/* A sequence projection (Linformer E/F, or the layerwise "proj"): its shape follows n. */
static bool is_seq_proj(const char *name)
{
	return !strncmp(name, "proj.", 5) || strstr(name, ".attn.E.") || strstr(name, ".attn.F.");
}

/* The tensor of dst named like s is given s's values. Whole when the shapes agree; a
 * pos.weight of fewer rows fills the first rows, and a sequence projection of another shape
 * keeps its initialisation (*kept counts it). Anything else is an error naming both shapes. */
static int grow_one(const char *path, struct nn_param *d, const struct nn_param *s, int *kept)
{
	struct tensor *dv = d ? d->value : NULL, *sv = s->value;
	if (dv && same_shape(dv, sv))
		return tensor_copy_(dv, sv);
	if (dv && !strcmp(s->name, "pos.weight") && dv->ndim == 2 && sv->shape[1] == dv->shape[1] &&
	    sv->shape[0] < dv->shape[0]) {
		ag_no_grad_begin(); /* a view of a parameter, off the graph */
		struct tensor *rows = tensor_narrow(dv, 0, 0, sv->shape[0]);
		ag_no_grad_end();
		int rc = rows ? tensor_copy_(rows, sv) : tensor_last_status();
		tensor_free(rows);
		return rc;
	}
	if (dv && is_seq_proj(s->name)) {
		++*kept;
		return TENSOR_OK;
	}
	char a[128] = "absent", b[128];
	if (dv)
		tensor_shape_str(dv, a, sizeof a);
	return tensor_error(TENSOR_ERR_SHAPE, "%s: tensor %s %s does not fit the model (%s there)",
			    path, s->name, tensor_shape_str(sv, b, sizeof b), a);
}

int train_grow_pretrained(const char *path, const struct model_config *like, struct nn_params *dst,
			  int *kept)
{
	struct pretrained p;
	int rc = open_pretrained(path, like, dst, true, &p);
	if (rc < 0)
		return rc;
	const struct nn_params *src = &p.ps;
	int copied = 0, wanted = 0, skipped = 0, fresh = 0;
	for (int i = 0; i < dst->n; i++) {
		const char *name = dst->items[i].name;
		/* a projection where the checkpoint's layer had none */
		bool absent = is_seq_proj(name) && !nn_params_find(src, name);
		fresh += absent;
		wanted += !absent;
	}
	for (int i = 0; rc == TENSOR_OK && i < src->n; i++) {
		const struct nn_param *s = &src->items[i];
		rc = grow_one(path, nn_params_find(dst, s->name), s, &skipped);
		copied++;
	}
	if (rc == TENSOR_OK && copied != wanted)
		rc = tensor_error(TENSOR_ERR_SHAPE,
				  "%s: has %d tensors, the model has %d (different layouts)", path,
				  copied, wanted);
	pretrained_free(&p);
	if (kept)
		*kept = skipped + fresh;
	return rc < 0 ? rc : copied - skipped;
}
