/* linformer_imdb: a sentiment classifier on the IMDB reviews with a Linformer, a Transformer
 * or a Conv-Linformer encoder, trained from scratch with the library's nn modules.
 *
 *   linformer_imdb                          the bundled 1,000 + 1,000 reviews, about a minute
 *   linformer_imdb --data DIR/aclImdb       the full dataset with the best recipe (88%)
 *   linformer_imdb --predict "A gem." --checkpoint runs/NAME/best.safetensors
 *
 * The recipe (below) sets everything but the flags; study/imdb_study has every knob the
 * results were found with. The steps: tokenize and batch the reviews (text.h), build the
 * model (models.h), then per batch forward, loss, backward, penalties, clipping and AdamW
 * (nn.h), validating and saving a checkpoint each epoch; Ctrl-C saves and prints how to
 * resume. Logs: metrics.csv and TensorBoard events in the log directory. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/classify.h"
#include "common/data.h"
#include "common/flags.h"
#include "common/progress.h"
#include "common/reading.h"
#include "common/train.h"
#include "models.h"
#include "text.h"

static const char PROG[] = "linformer_imdb";

static struct {
	const char *data, *model, *device, *precision, *log_dir, *checkpoint, *predict, *predict_file,
	    *output, *init_from;
	int64_t n, k, epochs, batch, seed, threads, stop_after, max_train, max_test;
	double lr;
	bool resume, eval_only;
} opt = { .model = "linformer", .device = "cpu", .precision = "f32", .batch = 32, .seed = 1,
	  .lr = 1e-3 };

static struct flag flags[] = {
	FLAG_DEF_STRING("data", &opt.data, "DIR",
			"aclImdb directory (default: the bundled subset)"),
	FLAG_DEF_CHOICE("model", &opt.model, "linformer|transformer|conv-linformer",
			"keys and values projected n -> k by learned matrices, full attention, or "
			"projected by a strided convolution in the second layer"),
	FLAG_DEF_INT("n", &opt.n, 0, 1 << 16, "N",
		     "tokens per review (0: 512 with --data, else 256)"),
	FLAG_DEF_INT("k", &opt.k, 0, 1 << 16, "K", "projected length (0: min(128, n/2))"),
	FLAG_DEF_INT("epochs", &opt.epochs, 0, 1 << 20, "E", "epochs (0: 3 with --data, else 6)"),
	FLAG_DEF_INT("batch", &opt.batch, 1, 1 << 16, "B", "reviews per batch"),
	FLAG_DEF_DOUBLE("lr", &opt.lr, 0, 10, FLAG_MIN_OPEN, "RATE",
			"peak learning rate (AdamW; warmup, then cosine decay)"),
	FLAG_DEF_INT("seed", &opt.seed, 0, 9007199254740992.0, "S",
		     "seed of the weights, dropout and batch order"),
	FLAG_DEF_INT("threads", &opt.threads, 0, 4096, "T", "CPU threads (0: the cores not busy)"),
	FLAG_DEF_CHOICE("device", &opt.device, "cpu|cuda", "where the model trains and runs"),
	FLAG_DEF_CHOICE("precision", &opt.precision, "f32|bf16|tf32",
			"bf16: train with bf16 products (f32 weights, checkpoints, evaluation); "
			"tf32: f32 products on the GPU's tensor cores"),
	FLAG_DEF_INT("max-train", &opt.max_train, 0, 1 << 30, "N",
		     "use N training reviews (0: all)"),
	FLAG_DEF_INT("max-test", &opt.max_test, 0, 1 << 30, "N", "use N test reviews (0: all)"),
	FLAG_DEF_STRING("log-dir", &opt.log_dir, "DIR",
			"logs and checkpoints (default: runs/<model>-n<N>-<time>)"),
	FLAG_DEF_STRING(
	    "init-from", &opt.init_from, "CKPT",
	    "fine-tune the encoder of a linformer_mlm checkpoint: its shape and every "
	    "encoder tensor, those of the file left unused named (the recipe's dropout, "
	    "no embedding penalty)"),
	FLAG_DEF_BOOL("resume", &opt.resume,
		      "continue the run of --log-dir from its last checkpoint"),
	FLAG_DEF_INT("stop-after", &opt.stop_after, 0, 1e15, "S", "save and exit after step S"),
	FLAG_DEF_BOOL("eval-only", &opt.eval_only,
		      "evaluate --checkpoint on the test split, reading reviews as its run did"),
	FLAG_DEF_STRING("checkpoint", &opt.checkpoint, "CKPT", "the model to evaluate or run"),
	FLAG_DEF_STRING("predict", &opt.predict, "TEXT", "print P(neg) P(pos) of TEXT"),
	FLAG_DEF_STRING("predict-file", &opt.predict_file, "FILE",
			"the same for each line of FILE"),
	FLAG_DEF_STRING(
	    "output", &opt.output, "FILE",
	    "also write each review's logits (JSON lines if FILE is *.jsonl, else CSV; not an "
	    "input of the run or a checkpoint)"),
};
enum { NFLAGS = sizeof flags / sizeof flags[0] };
/* the checkpoints a run writes beside last.safetensors */
static const char *const SAVES[] = { "best.safetensors", NULL };
/* what a resumed run may change */
static const char *const RESUME_FREE[] = { "threads",	   "device",	"log-dir",    "resume",
					   "stop-after",   "eval-only", "checkpoint", "predict",
					   "predict-file", "output",	NULL };

/* The recipe: what the flags leave to it. With --data, the best of docs/results.md for each
 * model (validation by movie, an L2 penalty on the embedding, a convolution for positions,
 * the learned projections held near their start); on the bundled subset, a smaller model. */
struct recipe {
	int64_t n, dim, ff, epochs, keep_tail; /* keep_tail: a long review keeps its end */
	double embed_l2, embed_l2_ramp, proj_l2;
	bool conv_positions, by_movie;
};
static const struct recipe FULL = { 512, 128, 512, 3, 382, 5e-2, 0.33, 0.1, true, true };
static const struct recipe BUNDLED = { 256, 64, 256, 6, 0, 5e-2, 0.33, 0.1, true, false };
/* The projections' weights that --proj-l2 pulls towards their start. */
#define PROJ_WEIGHTS "layers.*.attn.[EF].weight|proj.weight"

struct run {
	struct recipe rc;
	struct text_tokenizer tok;
	struct text_dataset train, val, test;
	struct text_batcher btrain, bval, btest;
	struct model_config cfg;
	char *cfg_json, *text_json; /* the config and how the run reads text, in checkpoints */
	struct nn_params ps;
	struct model_classifier model;
	struct nn_adamw adamw;
	struct nn_anchor anchor;
	struct nn_schedule sched;
	enum tensor_dtype precision;	 /* of the training step's products: f32 or bf16 */
	int64_t spe, total, step, saved; /* steps per epoch, in all, done, at the last save */
	bool stop;			 /* a rank was asked to stop (SIGINT, SIGTERM) */
	struct run_state state;		 /* what --resume reads back beside the weights */
	char log_dir[1024];
	struct classify_log log; /* metrics.csv and TensorBoard events */
	double start, elapsed0;	 /* elapsed0: the time before a resume */
};

static double elapsed(const struct run *r)
{
	return r->elapsed0 + train_clock() - r->start;
}

/* The tokenizer: BERT's WordPiece vocabulary (bundled), long reviews keeping keep_tail. */
static void load_tokenizer(struct text_tokenizer *tok, int64_t keep_tail)
{
	char vocab[4096];
	example_data_path("bert-base-uncased-vocab.txt", vocab, sizeof vocab);
	if (text_wordpiece_load(tok, vocab) < 0)
		train_die(PROG, "loading the vocabulary");
	tok->keep_tail = keep_tail;
}

/* The model: a two-layer preset, then the recipe's sizes (or, with --init-from, the
 * pretrained encoder's config); mean pooling, two classes. */
static void build_config(struct model_config *c, const struct run *r)
{
	char preset[64];
	snprintf(preset, sizeof preset, "%s:2", opt.model);
	if (opt.init_from) {
		for (const char *const *f = (const char *const[]){ "model", "n", "k", NULL }; *f; f++)
			if (flags_given(flags, NFLAGS, *f))
				flags_fail(PROG, *f, "comes from --init-from: leave it out");
		if (model_config_from_checkpoint(opt.init_from, c) < 0)
			train_die(PROG, "--init-from");
		if (c->vocab_size != r->tok.vocab_size)
			flags_fail(PROG, "init-from", "%s has %lld token ids, BERT's vocabulary %d",
				   opt.init_from, (long long)c->vocab_size, r->tok.vocab_size);
		opt.n = c->max_len;
		c->head_hidden = c->dim;
		/* dropout is the recipe's (the preset's), whatever the pretraining used */
		struct model_config d;
		if (model_config_preset(&d, "transformer", c->vocab_size, c->max_len) < 0)
			train_die(PROG, "--init-from");
		c->dropout = d.dropout;
		c->attn_dropout = d.attn_dropout;
	} else {
		if (model_config_preset(c, preset, r->tok.vocab_size, opt.n) < 0)
			train_die(PROG, "--model");
		c->k_first = c->k_last = opt.k ? opt.k : opt.n / 2 < 128 ? opt.n / 2 : 128;
		c->dim = c->head_hidden = r->rc.dim;
		c->ff_hidden = r->rc.ff;
		c->positions = r->rc.conv_positions ? MODEL_POS_NONE : MODEL_POS_LEARNED;
		c->position_kernel = r->rc.conv_positions ? 3 : 0;
	}
	c->pad_id = r->tok.pad_id;
	c->num_classes = 2;
	c->seed = (uint64_t)opt.seed;
	if (model_config_resolve(c) < 0)
		flags_fail(PROG, NULL, "invalid model: %s", tensor_last_error());
}

/* aclImdb's split of --data, cut to a seeded sample of max reviews (0: all). */
static void load_split(const char *split, int64_t max, struct text_dataset *out)
{
	struct text_dataset all;
	if (text_imdb_load(opt.data, split, &all) < 0)
		train_die(PROG, "--data");
	classify_sample(PROG, &all, max, 8, out);
}

/* best.safetensors (weights and optimizer) or last.safetensors (all that --resume needs). */
static void save(struct run *r, const char *name)
{
	char path[1100];
	snprintf(path, sizeof path, "%s/%s", r->log_dir, name);
	r->state.step = r->step;
	bool last = !strcmp(name, "last.safetensors");
	if (!train_sync_writer(PROG)) /* rank 0 writes, once every rank got here */
		return;
	if (last)
		run_state_save(PROG, path, &r->state, &r->ps, &r->adamw, NULL, r->cfg_json,
			       r->text_json);
	else
		train_save_checkpoint(PROG, path, &r->ps, &r->adamw, r->cfg_json, r->text_json,
				      r->step);
	r->saved = last ? r->step : r->saved;
}

/* Data, model, optimizer, schedule and logs of a training run (or the resumed one). */
static void setup(struct run *r)
{
	r->rc = flags_given(flags, NFLAGS, "data") ? FULL : BUNDLED;
	if (!opt.n)
		opt.n = r->rc.n;
	if (!opt.epochs)
		opt.epochs = r->rc.epochs;
	r->precision = train_precision;
	load_tokenizer(&r->tok, r->rc.keep_tail);
	build_config(&r->cfg, r);
	if (opt.init_from)
		reading_check_tokenizer(PROG, opt.init_from, &r->tok, flags, NFLAGS, "init-from");
	r->text_json = reading_json(PROG, &r->tok, opt.n);
	bool learned = false; /* projections to hold near their start (not the Transformer's) */
	for (int64_t i = 0; i < r->cfg.layers; i++)
		learned |= r->cfg.attention[i] == NN_ATTN_LINEAR;
	r->rc.proj_l2 = learned ? r->rc.proj_l2 : 0;
	/* a pretrained embedding keeps what it learnt: no penalty pulls it towards zero */
	r->rc.embed_l2 = opt.init_from ? 0 : r->rc.embed_l2;

	/* 10% of the training reviews validate: whole movies with the full dataset */
	struct text_dataset all;
	load_split("train", opt.max_train, &all);
	load_split("test", opt.max_test, &r->test);
	if ((r->rc.by_movie ? text_dataset_split_groups
			    : text_dataset_split)(&all, 0.1, 1, &r->train, &r->val) < 0 ||
	    r->train.n < 1 || r->val.n < 1)
		flags_fail(PROG, "data", "cannot hold out a validation split of %lld reviews: %s",
			   (long long)all.n, tensor_last_error());
	text_dataset_free(&all);
	char what[128];
	snprintf(what, sizeof what, "training at n %lld, batch %lld", (long long)opt.n,
		 (long long)opt.batch);
	train_check_memory(PROG, model_estimate_bytes(&r->cfg, opt.batch, true, false),
			   8.0 * (double)opt.n * (double)(r->train.n + r->val.n + r->test.n), what);
	/* batches of reviews of similar length, each as wide as its longest review */
	if (train_batcher_init(&r->btrain, &r->train, &r->tok, opt.n, opt.batch, (uint64_t)opt.seed,
			       true, true) < 0 ||
	    train_batcher_init(&r->bval, &r->val, &r->tok, opt.n, opt.batch, 0, false, true) < 0 ||
	    train_batcher_init(&r->btest, &r->test, &r->tok, opt.n, opt.batch, 0, false, true) < 0)
		train_die(PROG, "tokenizing the reviews");
	r->spe = text_batcher_num_batches(&r->btrain);
	r->total = opt.epochs * r->spe;

	/* the model, its embedding drawn N(0, 0.02) as BERT's, AdamW, warmup + cosine */
	if (nn_params_init(&r->ps, TENSOR_F32, train_device, (uint64_t)opt.seed) < 0 ||
	    model_classifier_init(&r->model, &r->ps, &r->cfg) < 0)
		train_die(PROG, "building the model");
	if ((opt.init_from ? train_copy_encoder(opt.init_from, &r->model.enc, &r->ps, stdout)
			   : train_init_embedding(&r->ps, &r->model.enc, 0.02)) < 0)
		train_die(PROG, opt.init_from ? "--init-from" : "building the model");
	if (opt.init_from)
		printf("no embedding penalty: the pretrained embedding keeps what it learnt\n");
	if ((r->rc.proj_l2 > 0 && nn_anchor_init(&r->anchor, &r->ps, PROJ_WEIGHTS) < 0) ||
	    nn_params_pack(&r->ps) < 0 ||
	    nn_adamw_init(&r->adamw, &r->ps, opt.lr, 0.9, 0.999, 1e-8, 0.01) < 0 ||
	    nn_schedule_init(&r->sched, NN_SCHEDULE_COSINE, opt.lr, 0, -1, 0.1, r->total) < 0 ||
	    !(r->cfg_json = model_config_to_json(&r->cfg)))
		train_die(PROG, "building the model");

	char err[1200], path[1100];
	if (opt.log_dir)
		snprintf(r->log_dir, sizeof r->log_dir, "%s", opt.log_dir);
	else if (opt.resume)
		flags_fail(PROG, "resume", "needs --log-dir DIR of the run");
	else
		train_default_log_dir(r->log_dir, sizeof r->log_dir, "", opt.model, opt.n);
	if (train_mkdirs(r->log_dir, err, sizeof err) < 0)
		flags_fail(PROG, "log-dir", "%s", err);
	r->state = (struct run_state){ 0, 0, -1, flags, NFLAGS, RESUME_FREE, SAVES };
	if (opt.resume) {
		snprintf(path, sizeof path, "%s/last.safetensors", r->log_dir);
		run_state_load(PROG, path, &r->state, &r->ps, &r->adamw, NULL);
		reading_check_tokenizer(PROG, path, &r->tok, flags, NFLAGS, "resume");
		r->step = r->saved = r->state.step;
		for (int64_t e = 0; e < r->step / r->spe; e++)
			text_batcher_next_epoch(&r->btrain); /* its order: from (seed, epoch) */
	}
	classify_log_open(&r->log, PROG, r->log_dir, opt.resume, r->step, &r->elapsed0);
	model_summary(&r->cfg, nn_params_count(&r->ps), stdout);
	printf("data %s: %lld train, %lld validation, %lld test reviews; %lld steps (%lld epochs); "
	       "logs and checkpoints in %s\n",
	       opt.data, (long long)r->train.n, (long long)r->val.n, (long long)r->test.n,
	       (long long)r->total, (long long)opt.epochs, r->log_dir);
	if (r->precision == TENSOR_BF16)
		printf("precision bf16: products in bf16 (kernel %s), the rest in f32\n",
		       train_device == TENSOR_CUDA ? "cuBLAS on tensor cores"
						   : tensor_bf16_gemm_kernel());
	if (r->step)
		printf("resumed at step %lld\n", (long long)r->step);
}

/* A metrics.csv row and its TensorBoard scalars (lr, tokens/s < 0: none). */
static void log_row(struct run *r, const char *split, double loss, double acc, double lr,
		    double tps)
{
	classify_log_row(&r->log, r->step, (r->step - 1) / r->spe + 1, split, loss, acc, lr, tps,
			 elapsed(r));
}

static void run_free(struct run *r)
{
	classify_log_close(&r->log);
	free(r->cfg_json);
	free(r->text_json);
	nn_adamw_free(&r->adamw);
	nn_anchor_free(&r->anchor);
	model_classifier_free(&r->model);
	nn_params_free(&r->ps);
	text_batcher_free(&r->btrain), text_batcher_free(&r->bval), text_batcher_free(&r->btest);
	text_dataset_free(&r->train), text_dataset_free(&r->val), text_dataset_free(&r->test);
	text_tokenizer_free(&r->tok);
}

/* Sums over the steps since the last log row. */
struct window {
	double loss, correct, reviews, tokens, seconds;
};

/* One optimizer step on batch j of the epoch: forward, loss, backward, the penalties, then
 * clipping and AdamW; counted in w. */
static void train_step(struct run *r, int64_t j, struct window *w)
{
	tensor_scope_begin();
	struct text_batch b;
	int64_t rows = -1; /* of the batch; under mpirun b.size counts this rank's share */
	if (text_batcher_get(&r->btrain, j, &b) < 0 || (rows = train_batch_share(&b, &r->ps)) < 0 ||
	    train_batch_to_device(&b) < 0 || nn_params_zero_grad(&r->ps) < 0)
		train_die(PROG, "training batch");
	double l = 0, acc = 0;
	if (b.size > 0) {
		if (nn_params_autocast_begin(&r->ps, r->precision) < 0)
			train_die(PROG, "--precision");
		struct tensor *logits = model_classifier_forward(&r->model, b.ids, b.mask);
		struct tensor *loss = nn_cross_entropy(logits, b.labels, -1, 0.0);
		ag_autocast_end();
		acc = loss ? nn_accuracy(logits, b.labels, -1) : -1;
		l = loss ? tensor_get(loss, NULL) : NAN; /* before backward frees the forward */
		if (acc < 0 || ag_backward_release(loss, NULL) < 0)
			train_die(PROG, "training step");
	}
	/* the ranks' sums: the batch's loss, accuracy and tokens, and whether one must stop */
	double sum[5] = { l * (double)b.size, acc * (double)b.size, (double)b.size,
			  (double)(b.size * b.ids->shape[1]), train_stop_signal() != 0 };
	if (nn_dist_average_grads(&r->ps, b.size, rows) < 0 || nn_dist_sum(sum, 5) < 0 ||
	    nn_dist_sync_rng(&r->ps) < 0)
		train_die(PROG, "sharing the step between the ranks");
	l = sum[0] / sum[2], r->stop = sum[4] > 0;
	/* the embedding penalty grows from 0 over the first steps, so the embedding learns first */
	double ramp = r->rc.embed_l2_ramp * (double)r->total, s = (double)(r->step + 1);
	double embed_l2 = s < ramp ? r->rc.embed_l2 * s / ramp : r->rc.embed_l2;
	if ((embed_l2 > 0 && nn_params_l2_grad(&r->ps, "embed.", embed_l2) < 0) ||
	    (r->rc.proj_l2 > 0 && nn_anchor_l2_grad(&r->anchor, r->rc.proj_l2) < 0))
		train_die(PROG, "penalties");
	double norm =
	    isfinite(l) ? train_optimizer_step(&r->ps, &r->adamw, &r->sched, r->step, 1.0) : NAN;
	if (norm < 0)
		train_die(PROG, "optimizer step");
	if (isnan(norm))
		train_nonfinite(PROG, r->step + 1, isfinite(l), false, r->log_dir, r->saved, NULL);
	w->loss += sum[0], w->correct += sum[1], w->reviews += sum[2], w->tokens += sum[3];
	tensor_scope_end();
}

static int run_train(int argc, char **argv)
{
	struct run r = { .start = train_clock(), .saved = -1 };
	setup(&r);
	train_signals_install();
	struct progress bar;
	progress_init(&bar, stderr, 10);
	struct window w = { 0 };
	double train_s = 0; /* in training steps, since this process started */
	for (int64_t first = r.step; r.step < r.total;) {
		int64_t epoch = r.step / r.spe;
		if (r.btrain.epoch < epoch)
			text_batcher_next_epoch(&r.btrain);
		double t0 = train_clock(), lr = nn_schedule_lr(&r.sched, r.step);
		train_step(&r, r.step % r.spe, &w);
		r.step++;
		double dt = train_clock() - t0;
		w.seconds += dt, train_s += dt;
		struct progress_stats ps = {
			.step = r.step,
			.total = r.total,
			.epoch = epoch + 1,
			.epochs = opt.epochs,
			.loss = w.loss / w.reviews,
			.metric_name = "acc",
			.metric = w.correct / w.reviews,
			.tokens_per_s = w.tokens / w.seconds,
			.elapsed_s = elapsed(&r),
			.eta_s = train_s / (double)(r.step - first) * (double)(r.total - r.step),
			.peak_mb = train_peak_mb(),
		};
		progress_update(&bar, &ps);
		bool end = r.step % r.spe == 0 || r.step == r.total;
		if (r.step % 10 == 0 || end) {
			log_row(&r, "train", ps.loss, ps.metric, lr, ps.tokens_per_s);
			w = (struct window){ 0 };
		}
		if (end) { /* validate, keep the best model */
			struct eval_result v =
			    classify_evaluate(PROG, &r.model, &r.ps, &r.bval, NULL);
			bool best = v.acc > r.state.best_val;
			if (best)
				r.state.best_val = v.acc, r.state.best_epoch = epoch + 1;
			progress_printf(&bar,
					"epoch %lld/%lld: validation loss %.4f accuracy %.4f%s\n",
					(long long)epoch + 1, (long long)opt.epochs, v.loss, v.acc,
					best ? " (best)" : "");
			log_row(&r, "val", v.loss, v.acc, -1, -1);
			if (best)
				save(&r, "best.safetensors");
			save(&r, "last.safetensors");
		}
		if (r.step < r.total && (r.stop || (opt.stop_after && r.step >= opt.stop_after))) {
			if (!end)
				save(&r, "last.safetensors");
			progress_end(&bar);
			printf("%s at step %lld of %lld: saved %s/last.safetensors\n",
			       r.stop ? "interrupted" : "stopped (--stop-after)", (long long)r.step,
			       (long long)r.total, r.log_dir);
			print_resume_command(argc, argv, r.log_dir, NULL);
			run_free(&r);
			return r.stop ? train_stop_status() : 0;
		}
	}
	progress_end(&bar);
	train_dist_report(PROG, &r.ps);
	struct eval_result t = classify_evaluate(PROG, &r.model, &r.ps, &r.btest, NULL);
	classify_print_test(&t);
	log_row(&r, "test", t.loss, t.acc, -1, -1);
	char el[32];
	printf("best validation accuracy %.4f (epoch %lld); wall time %s; peak memory %.1f MB\n",
	       r.state.best_val, (long long)r.state.best_epoch,
	       progress_duration(elapsed(&r), el, sizeof el), train_peak_mb());
	run_free(&r);
	return 0;
}

/* --eval-only or --predict / --predict-file with --checkpoint. */
static int run_checkpoint(void)
{
	struct model_config c;
	struct nn_params ps;
	struct model_classifier m;
	struct text_tokenizer tok;
	struct logits_file out;
	int64_t step;
	classify_load_model(PROG, opt.checkpoint, opt.batch, true, &c, &ps, &m, &step);
	load_tokenizer(&tok, 0);
	int64_t n = reading_follow(PROG, opt.checkpoint, &tok, c.max_len, flags, NFLAGS);
	fprintf(stderr, "%s: %s (step %lld)\n", PROG, opt.checkpoint, (long long)step);
	char vocab[4096]; /* what the run reads, which --output must not replace */
	const struct outfile_input in[] = {
		{ "--checkpoint", opt.checkpoint },
		{ "--predict-file", opt.predict_file },
		{ "--data", opt.eval_only ? opt.data : NULL },
		{ "the vocabulary",
		  example_data_path("bert-base-uncased-vocab.txt", vocab, sizeof vocab) },
	};
	logits_file_open(&out, PROG, opt.output, c.num_classes, in, sizeof in / sizeof in[0]);
	if (opt.eval_only) {
		struct text_dataset test;
		struct text_batcher b;
		load_split("test", opt.max_test, &test);
		if (train_batcher_init(&b, &test, &tok, n, opt.batch, 0, false, true) < 0)
			train_die(PROG, "tokenizing the test split");
		struct eval_result r = classify_evaluate(PROG, &m, &ps, &b, &out);
		classify_print_test(&r);
		text_batcher_free(&b);
		text_dataset_free(&test);
	} else {
		classify_predict(PROG, &m, &ps, &tok, opt.predict, opt.predict_file, opt.batch,
				 &out);
	}
	logits_file_close(&out, PROG);
	text_tokenizer_free(&tok);
	model_classifier_free(&m);
	nn_params_free(&ps);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach a log file as they happen */
	train_dist_init(PROG, &argc, &argv); /* a rank of mpirun -np N, or alone */
	/* the showcase keeps its flags few: the research program has the override */
	train_mem_override = "run it with study/imdb_study --no-mem-check (the recipe's flags: "
			     "docs/examples.md)";
	flags_parse(
	    flags, NFLAGS, argc, argv, PROG,
	    "usage: linformer_imdb [--flag VALUE]...\n"
	    "Trains a sentiment classifier on the IMDB reviews, tests it, and saves "
	    "checkpoints and logs.\nWith no flags: the bundled subset in about a minute. "
	    "With --data DIR/aclImdb: the\nfull dataset with the best recipe of "
	    "docs/results.md (the Linformer: 88% in about 20 min on 2 cores).",
	    "Then: --eval-only --checkpoint DIR/best.safetensors, or --predict TEXT "
	    "--checkpoint ...\n(a checkpoint remembers how its run read reviews: n, keep-tail, "
	    "the vocabulary's hash).\nCtrl-C saves the run and prints the command that resumes "
	    "it. Research flags: study/imdb_study.\n");
	bool predicting = opt.predict || opt.predict_file;
	if (opt.predict && opt.predict_file)
		flags_fail(PROG, "predict", "give --predict or --predict-file, not both");
	if ((predicting || opt.eval_only) && !opt.checkpoint)
		flags_fail(PROG, opt.eval_only ? "eval-only" : "predict",
			   "needs --checkpoint CKPT (e.g. DIR/best.safetensors of a training run)");
	if (opt.checkpoint && !predicting && !opt.eval_only)
		flags_fail(PROG, "checkpoint",
			   "goes with --eval-only, --predict or --predict-file");
	if (opt.output && !opt.checkpoint)
		flags_fail(PROG, "output", "goes with --eval-only, --predict or --predict-file");
	if (opt.resume && opt.checkpoint)
		flags_fail(PROG, "resume", "trains; it cannot go with --checkpoint");
	if (opt.threads)
		tensor_set_num_threads((int)opt.threads);
	train_set_device(PROG, opt.device);
	train_set_precision(PROG, opt.precision);
	train_crash_hook_install();
	char subset[4096];
	if (!opt.data)
		opt.data = example_data_path("aclImdb_subset", subset, sizeof subset);
	int rc = opt.checkpoint ? run_checkpoint() : run_train(argc, argv);
	nn_dist_finalize();
	return train_close_stdout(PROG, rc);
}
