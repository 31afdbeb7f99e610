/* imdb_study: the research harness behind docs/results.md and docs/log/research.md. It
 * trains and evaluates the IMDB sentiment classifier as examples/linformer_imdb does, with
 * every knob the studies turned (penalties, pooling, schedules, EMA, adversarial training,
 * splits, ...) as a flag; `imdb_study --help` lists them. Newcomers: read the showcase. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/classify.h"
#include "common/data.h"
#include "common/flags.h"
#include "common/model_flags.h"
#include "common/progress.h"
#include "common/reading.h"
#include "common/train.h"
#include "imdb_study.h"
#include "models.h"
#include "text.h"

static const char PROG[] = "imdb_study";
/* ---- model configuration ------------------------------------------------------------------ */

/* The tokenizer of the flags (model_flags_tokenizer) with --keep-tail. */
static void load_tokenizer(struct text_tokenizer *tok, int64_t vocab_size)
{
	model_flags_tokenizer(tok, &opt.enc, vocab_size, flags, NFLAGS, PROG);
	tok->keep_tail = opt.keep_tail;
}

/* The classifier configuration the flags describe, for the tokenizer's vocabulary. */
static void build_config(struct model_config *c, const struct text_tokenizer *tok)
{
	model_flags_config(c, &opt.enc, tok, flags, NFLAGS, PROG);
	c->num_classes = 2;
	c->seed = (uint64_t)opt.seed;
	if (model_config_resolve(c) < 0)
		flags_fail(PROG, NULL, "invalid model: %s", tensor_last_error());
}

/* --init-from: the encoder's shape comes from the checkpoint; a flag given explicitly that
 * disagrees with it is an error. The classifier's own settings stay. */
static void adopt_encoder(struct model_config *c, const struct model_config *p)
{
	/* the fields this run takes from its own flags; the tokenizer's vocabulary below */
	static const char *const kept[] = { "vocab_size",  "dropout", "attn_dropout", "num_classes",
					    "head_hidden", "pooling", "seed",	      NULL };
	const char *flag = model_flags_conflict(c, p, kept, flags, NFLAGS);
	if (flag)
		flags_fail(PROG, flag,
			   "conflicts with the encoder of --init-from %s (its shape comes from the "
			   "checkpoint): leave the flag out",
			   opt.init_from);
	if (c->vocab_size != p->vocab_size)
		flags_fail(PROG, "init-from",
			   "%s has a vocabulary of %lld ids, the tokenizer %lld: "
			   "pass the --tokenizer/--vocab used for pretraining",
			   opt.init_from, (long long)p->vocab_size, (long long)c->vocab_size);
	struct model_config m = *p;
	m.dropout = c->dropout;
	m.attn_dropout = c->attn_dropout;
	m.num_classes = c->num_classes;
	m.head_hidden = flags_given(flags, NFLAGS, "head-hidden") ? c->head_hidden : p->dim;
	m.pooling = c->pooling;
	m.seed = c->seed;
	*c = m;
	if (model_config_resolve(c) < 0)
		flags_fail(PROG, "init-from", "%s: %s", opt.init_from, tensor_last_error());
}

/* A model rebuilt from checkpoint path alone (its config and weights). */
static void load_model(const char *path, struct model_config *c, struct nn_params *ps,
		       struct model_classifier *m, int64_t *step)
{
	classify_load_model(PROG, path, opt.batch, !opt.no_mem_check, c, ps, m, step);
}

/* ---- data -------------------------------------------------------------------------------- */

/* Split "train" or "test" of --data. */
static void load_split(const char *split, struct text_dataset *out)
{
	char what[1200];
	snprintf(what, sizeof what, "reading the %s split of --data %s", split, opt.data);
	if (text_imdb_load(opt.data, split, out) < 0)
		train_die(PROG, what);
}

/* The training reviews (validation still in them) and the test reviews, each cut to
 * --max-train / --max-test: aclImdb's train and test splits, or with --pooled-test F the
 * two pooled and a seeded fraction F of them held out as the test set. train may be NULL. */
static void load_data(struct text_dataset *train, struct text_dataset *test)
{
	struct text_dataset tr, te;
	if (train || opt.pooled_test > 0)
		load_split("train", &tr);
	load_split("test", &te);
	if (opt.pooled_test > 0) {
		struct text_dataset all;
		int st = text_dataset_concat(&tr, &te, &all);
		text_dataset_free(&tr);
		text_dataset_free(&te);
		if (st < 0 || text_dataset_split(&all, opt.pooled_test,
						 (uint64_t)opt.split_seed + 11, &tr, &te) < 0)
			train_die(PROG, "pooling the train and test splits");
		text_dataset_free(&all);
	}
	if (train)
		classify_sample(PROG, &tr, opt.max_train, (uint64_t)opt.split_seed + 7, train);
	else if (opt.pooled_test > 0)
		text_dataset_free(&tr);
	classify_sample(PROG, &te, opt.max_test, (uint64_t)opt.split_seed + 7, test);
}

/* ---- evaluation -------------------------------------------------------------------------- */

/* --output (if given) for `classes` logits a row; refused when it would replace what the run
 * reads. */
static void open_output(struct logits_file *out, int64_t classes)
{
	char vocab[4096];
	const struct outfile_input in[] = {
		{ "--checkpoint", opt.checkpoint },
		{ "--predict-file", opt.predict_file },
		{ "--data", opt.eval_only ? opt.data : NULL },
		{ "--vocab", opt.enc.vocab },
		{ "the bundled vocabulary",
		  example_data_path("bert-base-uncased-vocab.txt", vocab, sizeof vocab) },
		{ "--init-from", opt.init_from },
	};
	logits_file_open(out, PROG, opt.output, classes, in, sizeof in / sizeof in[0]);
}

static int run_eval_only(void)
{
	struct model_config c;
	struct nn_params ps;
	struct model_classifier m;
	struct text_tokenizer tok;
	struct text_dataset test;
	struct text_batcher b;
	int64_t step;
	load_model(opt.checkpoint, &c, &ps, &m, &step);
	load_tokenizer(&tok, c.vocab_size);
	int64_t n = reading_follow(PROG, opt.checkpoint, &tok, c.max_len, flags, NFLAGS);
	model_summary(&c, nn_params_count(&ps), stdout);
	load_data(NULL, &test);
	if (train_batcher_init(&b, &test, &tok, n, opt.batch, 0, false, !opt.no_bucket) < 0)
		train_die(PROG, "tokenizing the test split");
	printf("%s (step %lld) on %lld test reviews of %s\n", opt.checkpoint, (long long)step,
	       (long long)test.n, opt.data);
	struct logits_file out;
	open_output(&out, c.num_classes);
	struct eval_result r = classify_evaluate(PROG, &m, &ps, &b, &out);
	logits_file_close(&out, PROG);
	classify_print_test(&r);
	text_batcher_free(&b);
	text_dataset_free(&test);
	text_tokenizer_free(&tok);
	model_classifier_free(&m);
	nn_params_free(&ps);
	return 0;
}

/* --predict TEXT or --predict-file FILE: one line "P(neg) P(pos)" per review. */
static int run_predict(void)
{
	struct model_config c;
	struct nn_params ps;
	struct model_classifier m;
	struct text_tokenizer tok;
	int64_t step;
	load_model(opt.checkpoint, &c, &ps, &m, &step);
	load_tokenizer(&tok, c.vocab_size);
	reading_follow(PROG, opt.checkpoint, &tok, c.max_len, flags, NFLAGS);
	fprintf(stderr, "%s: %s (step %lld): one line per review: P(neg) P(pos)\n", PROG,
		opt.checkpoint, (long long)step);
	struct logits_file out;
	open_output(&out, c.num_classes);
	classify_predict(PROG, &m, &ps, &tok, opt.predict, opt.predict_file, opt.batch, &out);
	logits_file_close(&out, PROG);
	text_tokenizer_free(&tok);
	model_classifier_free(&m);
	nn_params_free(&ps);
	return 0;
}

/* ---- training ----------------------------------------------------------------------------- */

struct run {
	struct text_tokenizer tok;
	struct text_dataset train, val, test;
	struct text_batcher btrain, bval, btest;
	struct model_config cfg;
	char *cfg_json, *text_json; /* the config and how the run reads text, in checkpoints */
	struct nn_params ps;
	struct model_classifier model;
	struct nn_adamw adamw;
	struct nn_ema ema; /* --ema */
	struct nn_anchor anchor;       /* --proj-l2 */
	struct nn_anchor embed_anchor; /* --embed-anchor */
	struct nn_schedule sched;
	int64_t spe, total, epochs; /* steps per epoch, steps, epochs */
	double best_val, elapsed0;  /* best validation accuracy; elapsed before resuming */
	int64_t best_epoch, skipped; /* steps skipped for a non-finite loss or gradient */
	char log_dir[1024], ckpt_dir[1024];
	struct classify_log log;
	struct progress bar;
	double start;
};

/* The Linformer projections' weights, per layer or shared layerwise (--proj-l2). */
#define PROJ_WEIGHTS "layers.*.attn.[EF].weight|proj.weight"

static double elapsed(const struct run *r)
{
	return r->elapsed0 + train_clock() - r->start;
}

/* Penalty l at the step that follows `step` steps of `total`, ramped in over --embed-l2-ramp. */
static double l2_at(double l, int64_t step, int64_t total)
{
	double ramp = opt.embed_l2_ramp * (double)total;
	return ramp > 0 && step + 1 < ramp ? l * (double)(step + 1) / ramp : l;
}

static void path_in(char *buf, size_t len, const char *dir, const char *file)
{
	if (snprintf(buf, len, "%s/%s", dir, file) >= (int)len)
		flags_fail(PROG, NULL, "path too long: %s/%s", dir, file);
}

/* With --ema, the parameters hold the averages until the next call (no-op without it). */
static void swap_ema(struct run *r)
{
	if (opt.ema > 0 && nn_ema_swap(&r->ema) < 0)
		train_die(PROG, "--ema");
}

/* Save to path the moving averages (--ema), or the weights without --ema. */
static void save_averages(struct run *r, const char *path, const struct nn_adamw *o, int64_t step)
{
	swap_ema(r);
	train_save_checkpoint(PROG, path, &r->ps, o, r->cfg_json, r->text_json, step);
	swap_ema(r);
}

/* last.safetensors: the whole run state in one file (weights, AdamW, with --ema the moving
 * average, the run state), so a run killed at any moment resumes from a complete state; with
 * --ema then last-ema.safetensors, the averages as weights to evaluate (never read by
 * --resume). Or best.safetensors (with --ema the averages). */
static void save(struct run *r, const char *name, int64_t step)
{
	char path[1100];
	path_in(path, sizeof path, r->ckpt_dir, name);
	if (strcmp(name, "last.safetensors")) {
		save_averages(r, path, &r->adamw, step);
		return;
	}
	struct run_state st = {
		step, r->best_epoch, r->best_val, flags, NFLAGS, RESUME_FREE, NULL
	};
	run_state_save(PROG, path, &st, &r->ps, &r->adamw, opt.ema > 0 ? &r->ema : NULL,
		       r->cfg_json, r->text_json);
	if (opt.ema > 0) {
		path_in(path, sizeof path, r->ckpt_dir, "last-ema.safetensors");
		save_averages(r, path, NULL, step);
	}
}

/* With --ema: last-ema.safetensors saved again from the moving average of last.safetensors
 * (just loaded) if it does not hold the same step, as when the run was killed between the
 * two saves. */
static void repair_last_ema(struct run *r, int64_t step)
{
	char path[1100];
	struct nn_checkpoint_info info;
	if (opt.ema <= 0)
		return;
	path_in(path, sizeof path, r->ckpt_dir, "last-ema.safetensors");
	int64_t held = nn_checkpoint_info(path, &info) == TENSOR_OK ? info.step : -1;
	nn_checkpoint_info_free(&info);
	tensor_clear_error();
	if (held == step)
		return;
	save_averages(r, path, NULL, step);
	if (held < 0)
		printf("%s: saved again from last.safetensors (it was missing or unreadable)\n",
		       path);
	else
		printf("%s: saved again from last.safetensors (it held step %lld)\n", path,
		       (long long)held);
}

/* --resume: weights, optimizer, moving average, random stream and run state, all from
 * last.safetensors; the elapsed time from the log's last row. */
static int64_t resume(struct run *r)
{
	char path[1100];
	path_in(path, sizeof path, r->ckpt_dir, "last.safetensors");
	struct run_state st = {
		.flags = flags,
		.nflags = NFLAGS,
		.free_flags = RESUME_FREE,
		.saves = (const char *const[]){ "best.safetensors", "last-ema.safetensors", NULL },
	};
	run_state_load(PROG, path, &st, &r->ps, &r->adamw, opt.ema > 0 ? &r->ema : NULL);
	reading_check_tokenizer(PROG, path, &r->tok, flags, NFLAGS, "resume");
	r->best_val = st.best_val;
	r->best_epoch = st.best_epoch;
	repair_last_ema(r, st.step);
	return st.step;
}

/* Data, tokenizer, model, optimizer, schedule, log files; returns the first step to run. */
static int64_t setup(struct run *r)
{
	load_tokenizer(&r->tok, 0);
	build_config(&r->cfg, &r->tok);
	struct model_config pre;
	if (opt.init_from) {
		if (model_config_from_checkpoint(opt.init_from, &pre) < 0)
			train_die(PROG, "--init-from");
		adopt_encoder(&r->cfg, &pre);
		reading_check_tokenizer(PROG, opt.init_from, &r->tok, flags, NFLAGS, "init-from");
	}
	struct text_dataset all;
	load_data(&all, &r->test);
	int (*split)(const struct text_dataset *, double, uint64_t, struct text_dataset *,
		     struct text_dataset *) =
	    strcmp(opt.val_split, "movie") == 0 ? text_dataset_split_groups : text_dataset_split;
	if (split(&all, opt.val_fraction, (uint64_t)opt.split_seed, &r->train, &r->val) < 0)
		flags_fail(PROG, "val-split", "%s", tensor_last_error());
	if (r->train.n < 1 || r->val.n < 1)
		flags_fail(PROG, "val-fraction", "%g of %lld reviews leaves an empty split",
			   opt.val_fraction, (long long)all.n);
	text_dataset_free(&all);
	int64_t n = r->cfg.max_len;
	if (!opt.no_mem_check) { /* before tokenizing: the batchers hold ids and mask, 8 B a slot */
		char what[128];
		snprintf(what, sizeof what, "training at n %lld, batch %lld", (long long)n,
			 (long long)opt.batch);
		double text = 8.0 * (double)n * (double)(r->train.n + r->val.n + r->test.n);
		train_check_memory(PROG, model_estimate_bytes(&r->cfg, opt.batch, true, false), text,
				   what);
	}
	bool bucket = !opt.no_bucket;
	/* one batch of the training batcher per optimizer step, cut into --accum
	 * micro-batches: accumulating sees the examples one big batch would */
	if (train_batcher_init(&r->btrain, &r->train, &r->tok, n, opt.batch * opt.accum,
			       (uint64_t)opt.seed, true, bucket) < 0 ||
	    train_batcher_init(&r->bval, &r->val, &r->tok, n, opt.batch, 0, false, bucket) < 0 ||
	    train_batcher_init(&r->btest, &r->test, &r->tok, n, opt.batch, 0, false, bucket) < 0)
		train_die(PROG, "tokenizing the reviews");
	r->spe = text_batcher_num_batches(&r->btrain);
	r->total = opt.steps ? opt.steps : opt.epochs * r->spe;
	r->epochs = (r->total + r->spe - 1) / r->spe;

	if (nn_params_init(&r->ps, TENSOR_F32, train_device, (uint64_t)opt.seed) < 0 ||
	    model_classifier_init(&r->model, &r->ps, &r->cfg) < 0)
		train_die(PROG, "building the model");
	if (opt.embed_std > 0 && train_init_embedding(&r->ps, &r->model.enc, opt.embed_std) < 0)
		train_die(PROG, "initialising the embedding");
	if (opt.proj_l2 > 0 && nn_anchor_init(&r->anchor, &r->ps, PROJ_WEIGHTS) < 0)
		flags_fail(PROG, "proj-l2",
			   "%s: expected Linformer layers with learned or convolutional projections",
			   tensor_last_error());
	/* with --embed-anchor a resumed run reads the encoder again: the anchor's values */
	if (opt.init_from && (!opt.resume || opt.embed_anchor)) {
		if (train_copy_encoder(opt.init_from, &r->model.enc, &r->ps,
				       opt.resume ? NULL : stdout) < 0)
			train_die(PROG, "--init-from");
	}
	if (opt.embed_anchor && nn_anchor_init(&r->embed_anchor, &r->ps, "embed.weight") < 0)
		train_die(PROG, "--embed-anchor");
	enum nn_schedule_kind sk = !strcmp(opt.schedule, "cosine")   ? NN_SCHEDULE_COSINE
				   : !strcmp(opt.schedule, "linear") ? NN_SCHEDULE_LINEAR
								     : NN_SCHEDULE_CONSTANT;
	if (nn_params_pack(&r->ps) < 0 || nn_adamw_init(&r->adamw, &r->ps, opt.lr, opt.beta1,
							opt.beta2, 1e-8, opt.weight_decay) < 0)
		train_die(PROG, "optimizer");
	r->adamw.decay_all = opt.decay_all;
	if (opt.ema > 0 && nn_ema_init(&r->ema, &r->ps, opt.ema) < 0)
		train_die(PROG, "--ema");
	if (opt.lazy_embed && nn_params_set_lazy(&r->ps, "embed.", true) < 0)
		train_die(PROG, "--lazy-embed");
	if (nn_schedule_init(&r->sched, sk, opt.lr, opt.min_lr, -1, opt.warmup, r->total) < 0)
		flags_fail(PROG, "warmup", "%s", tensor_last_error());
	if (!(r->cfg_json = model_config_to_json(&r->cfg)))
		train_die(PROG, "model config");
	r->text_json = reading_json(PROG, &r->tok, n);

	/* directories and logs */
	char err[1200];
	if (!opt.log_dir && opt.checkpoint_dir && opt.resume)
		snprintf(r->log_dir, sizeof r->log_dir, "%s", opt.checkpoint_dir);
	else if (opt.log_dir)
		snprintf(r->log_dir, sizeof r->log_dir, "%s", opt.log_dir);
	else if (opt.resume)
		flags_fail(PROG, "resume",
			   "needs --checkpoint-dir DIR (or --log-dir DIR) of the run");
	else
		train_default_log_dir(r->log_dir, sizeof r->log_dir, "", opt.enc.model, n);
	snprintf(r->ckpt_dir, sizeof r->ckpt_dir, "%s",
		 opt.checkpoint_dir ? opt.checkpoint_dir : r->log_dir);
	if (train_mkdirs(r->log_dir, err, sizeof err) < 0)
		flags_fail(PROG, "log-dir", "%s", err);
	if (train_mkdirs(r->ckpt_dir, err, sizeof err) < 0)
		flags_fail(PROG, "checkpoint-dir", "%s", err);
	r->best_val = -1;
	int64_t step = opt.resume ? resume(r) : 0;
	/* the elapsed time goes on from the last row kept */
	classify_log_open(&r->log, PROG, r->log_dir, opt.resume, step, &r->elapsed0);

	model_summary(&r->cfg, nn_params_count(&r->ps), stdout);
	printf("data %s: %lld train, %lld validation, %lld test reviews; n %lld, batch %lld x "
	       "accum %lld, %lld steps (%lld epochs of %lld), threads %d (BLIS %s)\n",
	       opt.data, (long long)r->train.n, (long long)r->val.n, (long long)r->test.n,
	       (long long)n, (long long)opt.batch, (long long)opt.accum, (long long)r->total,
	       (long long)r->epochs, (long long)r->spe, tensor_get_num_threads(),
	       tensor_blas_arch());
	if (opt.pooled_test > 0)
		printf(
		    "(train and test splits pooled, %g of the reviews held out as the test set)\n",
		    opt.pooled_test);
	if (!flags_given(flags, NFLAGS, "data"))
		printf("(the bundled subset; for the full dataset see --help)\n");
	printf("logs in %s, checkpoints in %s%s\n", r->log_dir, r->ckpt_dir,
	       step ? " (resumed)" : "");
	if (step)
		printf("resumed at step %lld of %lld\n", (long long)step, (long long)r->total);
	return step;
}

/* Running sums between log points. */
struct window {
	int64_t steps, examples, padded, real;
	double loss, correct, time, grad_norm;
};

/* Forward and backward of the group in micro-batches of --batch, adding the
 * gradient of the group's mean loss; counted in w unless w is NULL. Whether
 * every loss was finite. */
static bool accumulate(struct run *r, const struct text_batch *group, struct window *w)
{
	bool finite = true;
	if (nn_params_autocast_begin(&r->ps, train_precision) < 0)
		train_die(PROG, "--precision");
	for (int64_t s0 = 0; s0 < group->size; s0 += opt.batch) {
		int64_t size = group->size - s0 < opt.batch ? group->size - s0 : opt.batch;
		tensor_scope_begin();
		struct tensor *ids = tensor_narrow(group->ids, 0, s0, size);
		struct tensor *mask = tensor_narrow(group->mask, 0, s0, size);
		struct tensor *labels = tensor_narrow(group->labels, 0, s0, size);
		struct tensor *logits = model_classifier_forward(&r->model, ids, mask);
		struct tensor *loss = nn_cross_entropy(logits, labels, -1, opt.label_smoothing);
		double acc = loss ? nn_accuracy(logits, labels, -1) : -1;
		struct tensor *scaled = ag_mul_scalar(loss, (double)size / (double)group->size);
		if (!scaled || acc < 0)
			train_die(PROG, "training step");
		/* read before backward releases the forward's memory */
		double l = tensor_get(loss, NULL);
		finite = finite && isfinite(l);
		if (ag_backward_release(scaled, NULL) < 0)
			train_die(PROG, "training step");
		if (w) {
			w->loss += l * (double)size;
			w->correct += acc * (double)size;
			w->examples += size;
			w->padded += size * ids->shape[1];
		}
		tensor_scope_end();
	}
	ag_autocast_end();
	return finite;
}

static int run_train(int argc, char **argv)
{
	struct run r = { 0 };
	r.start = train_clock();
	int64_t step = setup(&r);
	int64_t steps_run = 0;
	double train_time = 0;
	int64_t padded_all = 0, real_all = 0, saved = opt.resume ? step : -1;
	int status = 0; /* 0, or train_stop_status() when a signal stopped the run */
	for (int64_t e = 0; e < step / r.spe; e++)
		text_batcher_next_epoch(&r.btrain); /* the order is a function of (seed, epoch) */
	train_signals_install();
	progress_init(&r.bar, stderr, opt.log_every);
	struct window w = { 0 };
	while (step < r.total) {
		int64_t epoch = step / r.spe, j = step % r.spe;
		if (r.btrain.epoch < epoch)
			text_batcher_next_epoch(&r.btrain);
		double t0 = train_clock(), lr = nn_schedule_lr(&r.sched, step);
		tensor_scope_begin();
		struct text_batch group;
		if (text_batcher_get(&r.btrain, j, &group) < 0)
			train_die(PROG, "training batch");
		struct tensor *unused;
		if (opt.token_mask > 0 &&
		    text_mlm_mask(&r.tok, &group, opt.token_mask,
				  (uint64_t)opt.seed * 1000003u + (uint64_t)step, &group.ids,
				  &unused) < 0)
			train_die(PROG, "masking tokens");
		if (train_batch_to_device(&group) < 0)
			train_die(PROG, "training batch");
		if (nn_params_zero_grad(&r.ps) < 0)
			train_die(PROG, "zero_grad");
		bool finite = accumulate(&r, &group, &w);
		if (opt.adv_eps > 0) {
			struct nn_fgm adv = { 0 };
			if (nn_fgm_perturb(&adv, &r.ps, "embed.", opt.adv_eps) < 0)
				train_die(PROG, "--adv-eps");
			finite = accumulate(&r, &group, NULL) && finite;
			if (nn_fgm_restore(&adv) < 0)
				train_die(PROG, "--adv-eps");
		}
		for (int64_t i = 0; i < group.size; i++)
			w.real += r.btrain.lengths[r.btrain.order[j * r.btrain.batch_size + i]];
		double el2 = l2_at(opt.embed_l2, step, r.total);
		if (opt.embed_l2 > 0 && (opt.embed_anchor ? nn_anchor_l2_grad(&r.embed_anchor, el2)
							  : nn_params_l2_grad(&r.ps, "embed.", el2)) < 0)
			train_die(PROG, "--embed-l2");
		if (opt.pos_l2 > 0 &&
		    nn_params_l2_grad(&r.ps, "pos.", l2_at(opt.pos_l2, step, r.total)) < 0)
			train_die(PROG, "--pos-l2");
		if (opt.proj_l2 > 0 && nn_anchor_l2_grad(&r.anchor, opt.proj_l2) < 0)
			train_die(PROG, "--proj-l2");
		double norm =
		    finite ? train_optimizer_step(&r.ps, &r.adamw, &r.sched, step, opt.clip) : NAN;
		if (norm < 0)
			train_die(PROG, "optimizer step");
		if (isnan(norm)) {
			progress_end(&r.bar);
			train_nonfinite(PROG, step + 1, finite, opt.skip_nonfinite, r.ckpt_dir, saved,
					&r.skipped);
		} else {
			if (opt.ema > 0 && nn_ema_update(&r.ema) < 0)
				train_die(PROG, "--ema");
			w.grad_norm += norm;
		}
		tensor_scope_end();
		step++, steps_run++, w.steps++;
		double dt = train_clock() - t0;
		w.time += dt, train_time += dt;
		double tps = (double)w.padded / w.time;
		struct progress_stats ps = {
			.step = step,
			.total = r.total,
			.epoch = epoch + 1,
			.epochs = r.epochs,
			.loss = w.loss / (double)w.examples,
			.metric_name = "acc",
			.metric = w.correct / (double)w.examples,
			.tokens_per_s = tps,
			.elapsed_s = elapsed(&r),
			.peak_mb = train_peak_mb(),
			.eta_s = train_time / (double)steps_run * (double)(r.total - step),
		};
		progress_update(&r.bar, &ps);
		bool stop = step < r.total &&
			    (train_stop_signal() || (opt.stop_after && step >= opt.stop_after));
		/* a row at each epoch end too: a run resumed from an epoch checkpoint
		 * then logs the same windows as an uninterrupted one */
		if (step % opt.log_every == 0 || step % r.spe == 0 || step == r.total || stop) {
			classify_log_row(&r.log, step, epoch + 1, "train", ps.loss, ps.metric, lr, tps,
					 elapsed(&r));
			classify_log_scalar(&r.log, "train/grad_norm", w.grad_norm / (double)w.steps,
					    step);
			padded_all += w.padded, real_all += w.real;
			w = (struct window){ 0 };
		}
		if (step % r.spe == 0 || step == r.total) { /* the end of an epoch */
			swap_ema(&r);
			struct eval_result v = classify_evaluate(PROG, &r.model, &r.ps, &r.bval, NULL);
			swap_ema(&r);
			bool best = v.acc > r.best_val;
			if (best)
				r.best_val = v.acc, r.best_epoch = epoch + 1;
			char el[32];
			progress_printf(
			    &r.bar,
			    "epoch %lld/%lld (step %lld): validation loss %.4f accuracy "
			    "%.4f%s, %s elapsed, peak %.0f MB\n",
			    (long long)epoch + 1, (long long)r.epochs, (long long)step, v.loss,
			    v.acc, best ? " (best)" : "",
			    progress_duration(elapsed(&r), el, sizeof el), train_peak_mb());
			classify_log_row(&r.log, step, epoch + 1, "val", v.loss, v.acc, -1, -1,
					 elapsed(&r));
			if (best)
				save(&r, "best.safetensors", step);
			save(&r, "last.safetensors", step);
			saved = step;
		}
		int sig = train_stop_signal();
		if (stop || (step < r.total && sig)) {
			if (saved != step)
				save(&r, "last.safetensors", step);
			progress_end(&r.bar);
			printf("%s at step %lld of %lld (epoch %lld): saved %s/last.safetensors\n",
			       sig ? "interrupted" : "stopped (--stop-after)", (long long)step,
			       (long long)r.total, (long long)(step / r.spe + 1), r.ckpt_dir);
			print_resume_command(argc, argv, r.log_dir, r.ckpt_dir);
			status = sig ? train_stop_status() : 0;
			goto out;
		}
	}
	progress_end(&r.bar);
	padded_all += w.padded, real_all += w.real;
	swap_ema(&r);
	struct eval_result t = classify_evaluate(PROG, &r.model, &r.ps, &r.btest, NULL);
	classify_print_test(&t);
	classify_log_row(&r.log, step, r.epochs, "test", t.loss, t.acc, -1, -1, elapsed(&r));
	char el[32];
	printf("best validation accuracy %.4f (epoch %lld); wall time %s; %.0f tokens/s (batch x "
	       "width per second; %.0f real tokens/s); peak memory %.1f MB\n",
	       r.best_val, (long long)r.best_epoch, progress_duration(elapsed(&r), el, sizeof el),
	       train_time > 0 ? (double)padded_all / train_time : 0.0,
	       train_time > 0 ? (double)real_all / train_time : 0.0, train_peak_mb());
	if (r.skipped)
		printf("%lld of %lld steps skipped: their loss or gradients were not finite "
		       "(--skip-nonfinite)\n",
		       (long long)r.skipped, (long long)steps_run);
out:
	classify_log_close(&r.log);
	free(r.cfg_json);
	free(r.text_json);
	nn_adamw_free(&r.adamw);
	nn_ema_free(&r.ema);
	nn_anchor_free(&r.anchor);
	nn_anchor_free(&r.embed_anchor);
	model_classifier_free(&r.model);
	nn_params_free(&r.ps);
	text_batcher_free(&r.btrain);
	text_batcher_free(&r.bval);
	text_batcher_free(&r.btest);
	text_dataset_free(&r.train);
	text_dataset_free(&r.val);
	text_dataset_free(&r.test);
	text_tokenizer_free(&r.tok);
	tensor_mem_trim();
	return status;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach a log file or pipe as they happen */
	static const char *const sections[][2] = {
		{ "model", "Model" },	  { "tokenizer", "Tokenizer" },
		{ "batch", "Training" },  { "data", "Data, logs and checkpoints" },
		{ "init-from", "Modes" },
	};
	for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
		flags_find(flags, NFLAGS, sections[i][0])->section = sections[i][1];
	flags_parse(flags, NFLAGS, argc, argv, PROG, SYNOPSIS, EPILOG);
	static char subset[4096];
	if (!opt.data)
		opt.data = example_data_path("aclImdb_subset", subset, sizeof subset);
	bool predicting = opt.predict || opt.predict_file;
	if (opt.output && !predicting && !opt.eval_only)
		flags_fail(PROG, "output", "goes with --predict, --predict-file or --eval-only");
	if (opt.predict && opt.predict_file)
		flags_fail(PROG, "predict", "give --predict or --predict-file, not both");
	if ((predicting || opt.eval_only) && !opt.checkpoint)
		flags_fail(PROG, predicting ? "predict" : "eval-only",
			   "needs --checkpoint CKPT (e.g. DIR/best.safetensors of a training run)");
	if (opt.checkpoint && !predicting && !opt.eval_only)
		flags_fail(PROG, "checkpoint",
			   "is for --eval-only and --predict; to continue "
			   "training use --resume, to fine-tune --init-from");
	if (opt.resume && (predicting || opt.eval_only))
		flags_fail(PROG, "resume", "trains; it cannot go with --eval-only or --predict");
	if (opt.embed_l2_ramp > 0 && opt.embed_l2 == 0 && opt.pos_l2 == 0)
		flags_fail(PROG, "embed-l2-ramp",
			   "needs --embed-l2 or --pos-l2 L > 0 (the penalty it ramps)");
	if (opt.embed_anchor && (!opt.init_from || opt.embed_l2 == 0))
		flags_fail(PROG, "embed-anchor", "needs --init-from CKPT and --embed-l2 L > 0");
	if (opt.pos_l2 > 0 && strcmp(opt.enc.positions, "learned"))
		flags_fail(PROG, "pos-l2", "needs --positions learned (sinusoids are not trained)");
	model_flags_check(&opt.enc, PROG);
	if (opt.threads)
		tensor_set_num_threads((int)opt.threads);
	train_set_device(PROG, opt.device);
	train_set_precision(PROG, opt.precision);
	train_crash_hook_install();
	int rc = predicting	 ? run_predict()
		 : opt.eval_only ? run_eval_only()
				 : run_train(argc, argv);
	return train_close_stdout(PROG, rc);
}
