/* linformer_mlm: masked-language-model pretraining of a Transformer, Linformer, Conv-Linformer
 * or any per-layer pattern on plain text (default: the IMDB training reviews, i.e. domain
 * pretraining), with train and validation perplexity, CSV and TensorBoard logs, and checkpoints
 * whose encoder (every tensor but the MLM head's "mlm.*") starts the IMDB classifier:
 * examples/linformer_imdb --init-from DIR/best.safetensors (or study/imdb_study).
 * `linformer_mlm --help` lists every flag. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/classify.h"
#include "common/csvlog.h"
#include "common/data.h"
#include "common/flags.h"
#include "common/model_flags.h"
#include "common/progress.h"
#include "common/reading.h"
#include "common/tb.h"
#include "common/train.h"
#include "models.h"
#include "text.h"

#define IGNORE (-100) /* the label of positions that are not predicted */

static const char PROG[] = "linformer_mlm";
static const char *const CSV_COLS[] = { "step", "epoch",	"split",     "loss",   "perplexity",
					"lr",	"tokens_per_s", "elapsed_s", "peak_mb" };
enum { NCSV = sizeof CSV_COLS / sizeof CSV_COLS[0], CSV_ELAPSED = 7 /* elapsed_s */ };

/* ---- flags (the names and meanings of imdb_study's where they overlap) ----------------- */

struct options {
	struct model_flags enc;
	const char *schedule, *data, *corpus, *decode, *log_dir, *checkpoint_dir, *checkpoint,
	    *init_from, *device, *precision;
	int64_t batch, accum, epochs, steps, seed, split_seed, threads, max_docs, val_docs,
	    log_every, stop_after, save_every;
	double embed_std, mask_prob, lr, min_lr, warmup, weight_decay, clip, val_fraction;
	int mask_unit; /* enum text_mask_unit */
	bool no_chunk, eval_only, no_bucket, no_mem_check, skip_nonfinite, resume;
};

/* The tables read better aligned by hand. */
/* clang-format off */
static struct options opt = {
	.enc = { MODEL_FLAGS_DEFAULTS, .model = "linformer", .n = 128, .cfg.dim = 128,
		 .cfg.ff_hidden = 512, .cfg.layers = 2 },
	.schedule = "cosine", .decode = "masked", .device = "cpu", .precision = "f32", .batch = 16, .accum = 1, .epochs = 2, .seed = 1,
	.split_seed = 1, .log_every = 10, .embed_std = 0.02, .mask_prob = 0.15, .lr = 1e-3,
	.min_lr = 1e-5, .warmup = 0.1, .weight_decay = 0.01, .clip = 1.0, .val_fraction = 0.1,
};

/* Table entries bound to the fields of opt. */
#define INT(nm, var, ...) FLAG_DEF_INT(nm, &opt.var, __VA_ARGS__)
#define DBL(nm, var, ...) FLAG_DEF_DOUBLE(nm, &opt.var, __VA_ARGS__)
#define STR(nm, var, ...) FLAG_DEF_STRING(nm, &opt.var, __VA_ARGS__)
#define CHO(nm, var, ...) FLAG_DEF_CHOICE(nm, &opt.var, __VA_ARGS__)
#define BOOL(nm, var, ...) FLAG_DEF_BOOL(nm, &opt.var, __VA_ARGS__)
static struct flag flags[] = {
	MODEL_FLAGS_ENCODER(opt.enc, 4, "sequence length: tokens per example, [CLS] and [SEP] "
				       "included"),
	DBL("embed-std", embed_std, 0, 10, 0, "S", "token embedding (tied to the MLM decoder) "
						   "drawn N(0, S) as in BERT; 0: the library's N(0, 1)"),
	MODEL_FLAGS_TOKENIZER(opt.enc),
	STR("data", data, "DIR", "aclImdb directory: pretrain on its train reviews and train/unsup "
				 "where present (labels unused; default: the bundled subset)"),
	STR("corpus", corpus, "PATH", "plain text instead of --data: a file (a document a line) or "
				      "a directory of *.txt files (a document each)"),
	INT("max-docs", max_docs, 0, 1 << 30, "N", "use N documents, a seeded sample (0: all)"),
	BOOL("no-chunk", no_chunk, "truncate long documents to n tokens (default: cut them into "
				   "consecutive chunks of up to n)"),
	DBL("val-fraction", val_fraction, 0, 0.5, FLAG_MIN_OPEN, "F", "documents held out for "
								      "validation perplexity"),
	INT("split-seed", split_seed, 0, 9007199254740992.0, "S", "seed of the validation split"),
	INT("val-docs", val_docs, 0, 1 << 30, "N",
	    "validate on N of the held-out documents, a seeded sample (0: all); they stay "
	    "held out of a run grown with --init-from from a run of the same data and split"),
	DBL("mask-prob", mask_prob, 0, 1, FLAG_MIN_OPEN, "P", "tokens selected for prediction "
							      "(of those 80% [MASK], 10% random, 10% kept)"),
	FLAG_DEF_ENUM("mask-unit", &opt.mask_unit, "token|word|span",
		      "what --mask-prob selects: tokens (BERT), whole words (every WordPiece of a "
		      "word), or spans of whole words (SpanBERT: mean 3.8 words)"),
	CHO("decode", decode, "masked|full", "MLM head on the selected positions only (the same "
					     "loss, less work) or [B*n, vocab] logits"),
	INT("batch", batch, 1, 1 << 16, "B", "sequences per batch"),
	BOOL("no-bucket", no_bucket,
	     "batches of n tokens in random order (default: sequences of similar length batched "
	     "together, each batch as wide as its longest sequence)"),
	INT("accum", accum, 1, 4096, "A", "batches accumulated per optimizer step"),
	INT("epochs", epochs, 1, 1 << 20, "E", "training epochs"),
	INT("steps", steps, 0, (double)(1LL << 40), "S", "optimizer steps (0: from --epochs)"),
	DBL("lr", lr, 0, 10, FLAG_MIN_OPEN, "RATE", "peak learning rate (AdamW)"),
	DBL("min-lr", min_lr, 0, 10, 0, "RATE", "final learning rate"),
	CHO("schedule", schedule, "cosine|linear|constant", "decay after the warmup"),
	DBL("warmup", warmup, 0, 1, FLAG_MAX_OPEN, "RATIO", "warmup fraction of the steps"),
	DBL("weight-decay", weight_decay, 0, 10, 0, "WD", "AdamW weight decay (not on biases, "
							   "norms, embeddings)"),
	DBL("clip", clip, 0, INFINITY, 0, "NORM", "gradient clipping norm (0: none)"),
	INT("seed", seed, 0, 9007199254740992.0, "S", "seed of weights, dropout, order and masks"),
	INT("threads", threads, 0, 4096, "T", "threads (0: the cores no other process keeps busy)"),
	CHO("device", device, "cpu|cuda", "where the model trains"),
	CHO("precision", precision, "f32|bf16|tf32",
	    "bf16: train with bf16 products (f32 weights, checkpoints, evaluation); tf32: f32 "
	    "products on the GPU's tensor cores"),
	BOOL("skip-nonfinite", skip_nonfinite,
	     "skip a step whose loss or gradients are NaN or inf (default: stop the run)"),
	BOOL("no-mem-check", no_mem_check,
	     "run even when the estimated peak memory exceeds what the machine has available"),
	STR("init-from", init_from, "CKPT", "start from a linformer_mlm checkpoint of the same "
					    "width, layers and vocabulary trained at a shorter (or "
					    "the same) n, as BERT's 128 then 512, its layers of the "
					    "same kinds or standard: positions past its n and "
					    "projections of another shape or new start fresh"),
	STR("log-dir", log_dir, "DIR", "metrics.csv and TensorBoard events (default: "
				       "runs/mlm-<model>-n<N>-<time>)"),
	STR("checkpoint-dir", checkpoint_dir, "DIR", "last.safetensors (each epoch), "
						     "best.safetensors (default: the log dir)"),
	INT("log-every", log_every, 1, 1 << 30, "S", "steps between log lines and CSV rows"),
	BOOL("resume", resume, "continue the run of --log-dir (its last.safetensors: weights, "
			       "AdamW, random stream, step) with the run's flags"),
	INT("stop-after", stop_after, 0, 9007199254740992.0, "S",
	    "stop after step S, saving last.safetensors and printing the command that resumes"),
	INT("save-every", save_every, 0, 9007199254740992.0, "S",
	    "also save last.safetensors every S steps (0: at each epoch's end and when stopped), "
	    "so that a run killed outright resumes from its last save"),
	BOOL("eval-only", eval_only, "validation perplexity of --checkpoint, rebuilt from the file "
				     "alone and read at its n (the training run's data flags, --seed "
				     "and --batch give its held-out text and masks)"),
	STR("checkpoint", checkpoint, "CKPT", "the model of --eval-only"),
};
/* clang-format on */
enum { NFLAGS = sizeof flags / sizeof flags[0] };
/* The flags a resumed run may change (the rest must be the run's). */
static const char *const RESUME_FREE[] = { "threads",	  "device",	"no-mem-check",
					   "log-every",	  "log-dir",	"checkpoint-dir",
					   "resume",	  "stop-after", "eval-only",
					   "checkpoint", "save-every", NULL };
/* the checkpoints a run writes beside last.safetensors */
static const char *const SAVES[] = { "best.safetensors", NULL };

static const char SYNOPSIS[] =
    "usage: linformer_mlm [--flag VALUE]...\n"
    "Masked-language-model pretraining (BERT masking, dynamic per step) of an encoder on plain\n"
    "text, reporting train and validation perplexity. With no flags it pretrains a small\n"
    "Linformer on the 1000 training reviews of the bundled IMDB subset in about a minute.";
static const char EPILOG[] =
    "The full dataset (from ai.stanford.edu/~amaas/data/sentiment): --data DIR/aclImdb for its\n"
    "25000 training reviews and, where the directory has train/unsup (the original archive\n"
    "does), the 50000 unlabelled ones; --corpus DIR/aclImdb/train/unsup for those alone:\n"
    "  linformer_mlm --corpus DIR/aclImdb/train/unsup --n 512 --k 128 --dim 256 --layers 4 \\\n"
    "      --ff 1024 --epochs 3 --lr 5e-4\n"
    "At n 512 this small model stays near word-frequency perplexity where BERT's recipe does\n"
    "not: most steps at --n 128, then the rest at 512 with --init-from LOG_DIR/last.safetensors\n"
    "(the same model flags besides --n and --k; docs/log/research.md).\n"
    "Then fine-tune the classifier from the pretrained encoder (the model flags come from the\n"
    "checkpoint): examples/linformer_imdb --init-from LOG_DIR/best.safetensors (BERT's\n"
    "vocabulary), or study/imdb_study --init-from ... with the same --tokenizer/--vocab\n"
    "Perplexity is exp(mean cross-entropy) over the predicted tokens; validation uses the same\n"
    "masks every epoch. tokens/s counts batch x width per second, padding included (with\n"
    "--no-bucket the width is n).\n";

/* ---- model configuration ------------------------------------------------------------------ */

/* The encoder + MLM head configuration the flags describe. */
static void build_config(struct model_config *c, const struct text_tokenizer *tok)
{
	model_flags_config(c, &opt.enc, tok, flags, NFLAGS, PROG); /* head_hidden: dim */
	c->seed = (uint64_t)opt.seed;
	if (model_config_resolve(c) < 0)
		flags_fail(PROG, NULL, "invalid model: %s", tensor_last_error());
}

/* The model's parameters; embed_std > 0 redraws the token embedding N(0, embed_std), its
 * padding row zero. The library draws embeddings N(0, 1), which tied to the decoder gives
 * logits of standard deviation ~sqrt(dim) and a first loss far above log(vocab). */
static void build_model(struct model_mlm *m, struct nn_params *ps, const struct model_config *c,
			double embed_std)
{
	if (nn_params_init(ps, TENSOR_F32, train_device, c->seed) < 0 ||
	    model_mlm_init(m, ps, c) < 0)
		train_die(PROG, "building the model");
	if (embed_std > 0 && train_init_embedding(ps, &m->enc, embed_std) < 0)
		train_die(PROG, "initialising the embedding");
}

/* ---- data: documents, a held-out split, chunks of at most n - 2 tokens ------------------- */

/* Keeps a seeded sample of n of the documents (all when n is 0 or not below their count). */
static void sample_docs(struct text_dataset *docs, int64_t n, uint64_t seed, const char *flag)
{
	if (n <= 0 || n >= docs->n)
		return;
	struct text_dataset keep, rest;
	if (text_dataset_split(docs, (double)n / (double)docs->n, seed, &rest, &keep) < 0)
		train_die(PROG, flag);
	text_dataset_free(docs);
	text_dataset_free(&rest);
	*docs = keep;
}

/* The documents of --corpus (IMDB-style "<br />" line breaks become a space, as in aclImdb) or of the train
 * split of --data (and its train/unsup where present), cut to a seeded sample of --max-docs. */
static void load_docs(struct text_dataset *docs, char *desc, size_t desc_len)
{
	char subset[4096];
	const char *data = opt.data ? opt.data
				    : example_data_path("aclImdb_subset", subset, sizeof subset);
	if (opt.corpus) {
		if (text_lines_load(opt.corpus, docs) < 0)
			flags_fail(PROG, "corpus", "%s", tensor_last_error());
		for (int64_t i = 0; i < docs->n; i++)
			text_replace_line_breaks(docs->items[i].text);
		snprintf(desc, desc_len, "%s", opt.corpus);
	} else {
		if (text_imdb_load(data, "train", docs) < 0)
			flags_fail(PROG, "data",
				   "%s: expected an aclImdb directory (train/neg, train/pos); see "
				   "--help for the full dataset",
				   tensor_last_error());
		/* and the unlabelled reviews where the directory (or archive) has them, as the
		 * original does */
		char unsup[4200];
		struct stat st;
		snprintf(unsup, sizeof unsup, "%s/train/unsup", data);
		bool archive = stat(data, &st) == 0 && S_ISREG(st.st_mode);
		bool more = archive || stat(unsup, &st) == 0;
		struct text_dataset u, all;
		if (more && text_imdb_load(data, "unsup", &u) < 0) {
			if (!archive) /* an archive may lack them */
				flags_fail(PROG, "data", "%s", tensor_last_error());
			tensor_clear_error();
			more = false;
		}
		if (more) {
			if (text_dataset_concat(docs, &u, &all) < 0)
				train_die(PROG, "--data");
			text_dataset_free(docs);
			text_dataset_free(&u);
			*docs = all;
		}
		snprintf(desc, desc_len, "%s/train%s (reviews; labels unused)", data,
			 more ? " and train/unsup" : "");
	}
	if (docs->n < 2)
		flags_fail(PROG, opt.corpus ? "corpus" : "data",
			   "%s has %lld document(s): at least 2 are needed (some are held out)",
			   desc, (long long)docs->n);
	sample_docs(docs, opt.max_docs, (uint64_t)opt.split_seed + 7, "--max-docs");
}

/* Training and held-out sequences; documents are split before chunking, so none is in both. */
static void load_data(const struct text_tokenizer *tok, int64_t n, struct text_dataset *train,
		      struct text_dataset *val)
{
	struct text_dataset docs, tr, va;
	char desc[4200];
	load_docs(&docs, desc, sizeof desc);
	if (text_dataset_split(&docs, opt.val_fraction, (uint64_t)opt.split_seed, &tr, &va) < 0 ||
	    tr.n < 1 || va.n < 1)
		flags_fail(PROG, "val-fraction", "%g of %lld documents leaves an empty split",
			   opt.val_fraction, (long long)docs.n);
	text_dataset_free(&docs);
	sample_docs(&va, opt.val_docs, (uint64_t)opt.split_seed + 11, "--val-docs");
	if (opt.no_chunk) {
		*train = tr, *val = va;
	} else {
		if (text_dataset_chunk(&tr, tok, n - 2, train) < 0 ||
		    text_dataset_chunk(&va, tok, n - 2, val) < 0)
			train_die(PROG, "cutting the documents");
		text_dataset_free(&tr);
		text_dataset_free(&va);
	}
	printf("data %s: %lld training and %lld held-out sequences of up to %lld tokens (%s)\n",
	       desc, (long long)train->n, (long long)val->n, (long long)n,
	       opt.no_chunk ? "documents truncated" : "documents cut into chunks");
	if (train->n < 1 || val->n < 1)
		flags_fail(PROG, opt.corpus ? "corpus" : "data", "no text to train on in %s", desc);
}

/* ---- the masked-LM loss -------------------------------------------------------------------- */

/* The predicted positions of labels (contiguous). */
static int64_t predicted(const struct tensor *labels)
{
	const int64_t *lab = tensor_data(labels);
	int64_t m = 0;
	for (int64_t i = 0; i < tensor_numel(labels); i++)
		m += lab[i] != IGNORE;
	return m;
}

/* The masked copy of batch b: inputs and labels (IGNORE where nothing is predicted) [B, n]
 * in the current scope; returns the number of predicted tokens. */
static int64_t mask_batch(const struct text_tokenizer *tok, const struct text_batch *b,
			  uint64_t seed, struct tensor **inputs, struct tensor **labels)
{
	if (text_mlm_mask_unit(tok, b, opt.mask_prob, opt.mask_unit, seed, inputs, labels) < 0)
		train_die(PROG, "masking a batch");
	return predicted(*labels);
}

/* This rank's rows of masked batch b (the masks drawn for the whole batch): b, its inputs
 * and labels narrowed alike (train_batch_share); returns their predicted positions. */
static int64_t share_masked(struct nn_params *ps, struct text_batch *b, struct tensor **inputs,
			    struct tensor **labels)
{
	int64_t lo, hi;
	nn_dist_share(b->size, &lo, &hi);
	if (train_batch_share(b, ps) < 0 || !(*inputs = tensor_narrow(*inputs, 0, lo, hi - lo)) ||
	    !(*labels = tensor_narrow(*labels, 0, lo, hi - lo)))
		train_die(PROG, "sharing a batch between the ranks");
	return predicted(*labels);
}

/* Mean cross-entropy over the M > 0 predicted positions of inputs [B, T]. "masked" runs the
 * head (dense, activation, LayerNorm, decoder) on those M positions only: it works position by
 * position, so the loss equals that of model_mlm_forward's [B*T, vocab] logits ("full") at
 * M/(B*T) of the decoder's cost. */
/* t (a host tensor of the open scope) on train_device. */
static struct tensor *on_device(const struct tensor *t)
{
	return train_device == TENSOR_CPU ? (struct tensor *)t : tensor_to_device(t, train_device);
}

static struct tensor *mlm_loss(const struct model_mlm *m, struct tensor *inputs,
			       const struct tensor *mask, struct tensor *labels, int64_t M)
{
	int64_t B = inputs->shape[0], T = inputs->shape[1], V = m->enc.cfg.vocab_size;
	inputs = on_device(inputs);
	mask = on_device(mask);
	if (!strcmp(opt.decode, "full")) {
		labels = on_device(labels);
		struct tensor *logits = model_mlm_forward(m, inputs, mask); /* [B, T, V] */
		return nn_cross_entropy(ag_reshape(logits, 2, (int64_t[]){ B * T, V }),
					tensor_reshape(labels, 1, (int64_t[]){ B * T }), IGNORE, 0);
	}
	const struct model_config *c = &m->enc.cfg;
	struct tensor *idx = tensor_empty(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ M });
	struct tensor *target = tensor_empty(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ M });
	if (!idx || !target)
		return NULL;
	const int64_t *lab = tensor_data(labels);
	int64_t *pi = tensor_data(idx), *pt = tensor_data(target);
	for (int64_t i = 0, j = 0; i < B * T && j < M; i++)
		if (lab[i] != IGNORE)
			pi[j] = i, pt[j++] = lab[i];
	idx = on_device(idx);
	target = on_device(target);
	struct tensor *h = model_encoder_forward(&m->enc, inputs, mask);	     /* [B, T, d] */
	h = ag_index_select(ag_reshape(h, 2, (int64_t[]){ B * T, c->dim }), 0, idx); /* [M, d] */
	/* the head as model_mlm_forward (models/heads.c) applies it */
	h = nn_activation_forward(c->swiglu ? NN_SILU : c->activation,
				  nn_linear_forward(&m->dense, h));
	h = nn_layer_norm_forward(&m->norm, h);
	return nn_cross_entropy(nn_linear_forward(&m->decoder, h), target, -1, 0); /* [M, V] */
}

static uint64_t mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* Masks of training batch i (counted over the whole run) and of validation batch i. */
static uint64_t train_mask_seed(int64_t i)
{
	return mix((uint64_t)opt.seed) + (uint64_t)i;
}

static uint64_t val_mask_seed(int64_t i)
{
	return mix((uint64_t)opt.seed ^ 0x76616C6964ull) + (uint64_t)i;
}

struct mlm_eval {
	double loss;
	int64_t tokens;
};

/* Mean loss over every predicted token of the held-out sequences, in eval mode without a
 * tape; the masks depend on (--seed, batch) only, so every epoch sees the same ones. Under
 * mpirun each rank takes every size-th batch and the sums are shared. */
static struct mlm_eval evaluate(const struct model_mlm *m, struct nn_params *ps,
				   const struct text_batcher *b, const struct text_tokenizer *tok)
{
	struct mlm_eval r = { 0 };
	double sum = 0;
	nn_params_train(ps, false);
	ag_no_grad_begin();
	for (int64_t i = nn_dist_rank(); i < text_batcher_num_batches(b); i += nn_dist_size()) {
		struct text_batch batch;
		struct tensor *in, *lab;
		tensor_scope_begin();
		if (text_batcher_get(b, i, &batch) < 0)
			train_die(PROG, "validation batch");
		int64_t M = mask_batch(tok, &batch, val_mask_seed(i), &in, &lab);
		struct tensor *l = M ? mlm_loss(m, in, batch.mask, lab, M) : NULL;
		if (M && !l)
			train_die(PROG, "validation");
		sum += M ? tensor_get(l, NULL) * (double)M : 0;
		r.tokens += M;
		tensor_scope_end();
	}
	ag_no_grad_end();
	nn_params_train(ps, true);
	double sums[2] = { sum, (double)r.tokens };
	if (nn_dist_sum(sums, 2) < 0)
		train_die(PROG, "validation");
	sum = sums[0], r.tokens = (int64_t)sums[1];
	r.loss = r.tokens ? sum / (double)r.tokens : NAN;
	return r;
}

/* Refuse held-out text whose masks select no token (its loss would be 0/0): the predicted
 * tokens of every validation batch, counted before any training or evaluation. */
static void check_val_tokens(const struct text_batcher *b, const struct text_tokenizer *tok,
			     int64_t sequences)
{
	int64_t tokens = 0;
	for (int64_t i = 0; i < text_batcher_num_batches(b) && !tokens; i++) {
		struct text_batch batch;
		struct tensor *in, *lab;
		tensor_scope_begin();
		if (text_batcher_get(b, i, &batch) < 0)
			train_die(PROG, "validation batch");
		tokens += mask_batch(tok, &batch, val_mask_seed(i), &in, &lab);
		tensor_scope_end();
	}
	if (!tokens)
		flags_fail(PROG, "val-fraction",
			   "the %lld held-out sequence(s) get no masked token to predict "
			   "(--mask-prob %g, --seed %lld): hold out more text (--val-fraction, "
			   "--val-docs) or draw another split (--split-seed)",
			   (long long)sequences, opt.mask_prob, (long long)opt.seed);
}

/* ---- --eval-only ------------------------------------------------------------------------- */

static int run_eval_only(void)
{
	struct model_config c;
	struct nn_params ps;
	struct model_mlm m;
	struct text_tokenizer tok;
	struct text_dataset train, val;
	struct text_batcher b;
	int64_t step;
	char what[1200];
	snprintf(what, sizeof what, "loading %s", opt.checkpoint);
	if (model_config_from_checkpoint(opt.checkpoint, &c) < 0)
		train_die(PROG, what);
	if (!opt.no_mem_check)
		train_check_memory(PROG, model_estimate_bytes(&c, opt.batch, false, true), 0,
				   opt.checkpoint);
	build_model(&m, &ps, &c, 0);
	if (nn_checkpoint_load(opt.checkpoint, &ps, NULL, &step) < 0)
		train_die(PROG, what);
	model_flags_tokenizer(&tok, &opt.enc, c.vocab_size, flags, NFLAGS, PROG);
	int64_t n = reading_follow(PROG, opt.checkpoint, &tok, c.max_len, flags, NFLAGS);
	model_summary(&c, nn_params_count(&ps), stdout);
	load_data(&tok, n, &train, &val);
	if (train_batcher_init(&b, &val, &tok, n, opt.batch, 0, false, !opt.no_bucket) < 0)
		train_die(PROG, "tokenizing the held-out text");
	check_val_tokens(&b, &tok, val.n);
	struct mlm_eval r = evaluate(&m, &ps, &b, &tok);
	printf("%s (step %lld): validation loss %.4f perplexity %.3f (%lld predicted tokens)\n",
	       opt.checkpoint, (long long)step, r.loss, exp(r.loss), (long long)r.tokens);
	text_batcher_free(&b);
	text_dataset_free(&train);
	text_dataset_free(&val);
	text_tokenizer_free(&tok);
	model_mlm_free(&m);
	nn_params_free(&ps);
	tensor_mem_trim();
	return isfinite(r.loss) ? 0 : 1;
}

/* ---- training ------------------------------------------------------------------------------ */

struct run {
	struct text_tokenizer tok;
	struct model_config cfg;
	struct text_dataset train, val;
	struct text_batcher btrain, bval;
	struct nn_params ps;
	struct model_mlm model;
	struct nn_adamw adamw;
	struct nn_schedule sched;
	struct csvlog csv;
	struct tb_writer tb;
	struct progress bar;
	char *cfg_json, *text_json; /* the config and how the run reads text, in checkpoints */
	char log_dir[1024], ckpt_dir[1024];
	int64_t nb, spe, total, epochs, best_epoch; /* batches and steps an epoch */
	int64_t saved, skipped; /* the step last saved (-1: none); non-finite steps skipped */
	int64_t step;		/* done (a resumed run starts at its saved step) */
	bool stop;		/* a rank was asked to stop (SIGINT, SIGTERM) */
	double start, best_val;
};

static double elapsed(const struct run *r)
{
	return train_clock() - r->start;
}

/* best.safetensors (the weights) or last.safetensors (all that --resume needs). */
static void save(struct run *r, const char *name, int64_t step)
{
	char path[1100];
	snprintf(path, sizeof path, "%s/%s", r->ckpt_dir, name);
	bool last = !strcmp(name, "last.safetensors");
	if (last)
		r->saved = step;
	if (!train_sync_writer(PROG)) /* rank 0 writes, once every rank got here */
		return;
	struct run_state st = {
		step, r->best_epoch, r->best_val, flags, NFLAGS, RESUME_FREE, NULL
	};
	if (last)
		run_state_save(PROG, path, &st, &r->ps, &r->adamw, NULL, r->cfg_json, r->text_json);
	else
		train_save_checkpoint(PROG, path, &r->ps, NULL, r->cfg_json, r->text_json, step);
}

static void log_scalar(struct run *r, const char *tag, double v, int64_t step)
{
	if (nn_dist_rank() != 0) /* rank 0 alone logs */
		return;
	if (tb_scalar(&r->tb, tag, v, step) < 0)
		flags_fail(PROG, "log-dir", "cannot write %s: %s", r->tb.path, strerror(errno));
}

static void csv_row(struct run *r, int64_t step, int64_t epoch, const char *split, double loss,
		    double lr, double tps)
{
	char lrs[32] = "", tpss[32] = "";
	if (nn_dist_rank() != 0)
		return;
	if (lr >= 0)
		snprintf(lrs, sizeof lrs, "%.6g", lr);
	if (tps >= 0)
		snprintf(tpss, sizeof tpss, "%.1f", tps);
	if (csvlog_row(&r->csv, "%lld,%lld,%s,%.6f,%.4f,%s,%s,%.3f,%.1f", (long long)step,
		       (long long)epoch, split, loss, exp(loss), lrs, tpss, elapsed(r),
		       train_peak_mb()) < 0)
		flags_fail(PROG, "log-dir", "cannot write metrics.csv: %s", strerror(errno));
	log_scalar(r, !strcmp(split, "val") ? "val/loss" : "train/loss", loss, step);
	log_scalar(r, !strcmp(split, "val") ? "val/ppl" : "train/ppl", exp(loss), step);
	if (lr >= 0)
		log_scalar(r, "lr", lr, step);
}

/* Data, tokenizer, model, optimizer, schedule and logs. */
static void setup(struct run *r)
{
	model_flags_tokenizer(&r->tok, &opt.enc, 0, flags, NFLAGS, PROG);
	build_config(&r->cfg, &r->tok);
	load_data(&r->tok, opt.enc.n, &r->train, &r->val);
	if (!opt.no_mem_check) { /* before tokenizing: the batchers hold ids and mask, 8 B a slot */
		char what[128];
		snprintf(what, sizeof what, "training at n %lld, batch %lld", (long long)opt.enc.n,
			 (long long)opt.batch);
		double text = 8.0 * (double)opt.enc.n * (double)(r->train.n + r->val.n);
		train_check_memory(PROG, model_estimate_bytes(&r->cfg, opt.batch, true, true), text,
				   what);
	}
	bool bucket = !opt.no_bucket;
	if (train_batcher_init(&r->btrain, &r->train, &r->tok, opt.enc.n, opt.batch,
			       (uint64_t)opt.seed, true, bucket) < 0 ||
	    train_batcher_init(&r->bval, &r->val, &r->tok, opt.enc.n, opt.batch, 0, false, bucket) <
		0)
		train_die(PROG, "tokenizing the text");
	check_val_tokens(&r->bval, &r->tok, r->val.n);
	r->nb = text_batcher_num_batches(&r->btrain);
	r->spe = (r->nb + opt.accum - 1) / opt.accum;
	r->total = opt.steps ? opt.steps : opt.epochs * r->spe;
	r->epochs = (r->total + r->spe - 1) / r->spe;
	build_model(&r->model, &r->ps, &r->cfg, opt.embed_std);
	if (opt.init_from) {
		reading_check_tokenizer(PROG, opt.init_from, &r->tok, flags, NFLAGS, "init-from");
		int kept = 0, copied = train_grow_pretrained(opt.init_from, &r->cfg, &r->ps, &kept);
		if (copied < 0)
			train_die(PROG, "--init-from");
		printf("init: %d tensors from %s, %d projections start fresh\n",
		       copied, opt.init_from, kept);
	}
	enum nn_schedule_kind sk = !strcmp(opt.schedule, "cosine")   ? NN_SCHEDULE_COSINE
				   : !strcmp(opt.schedule, "linear") ? NN_SCHEDULE_LINEAR
								     : NN_SCHEDULE_CONSTANT;
	if (nn_params_pack(&r->ps) < 0 ||
	    nn_adamw_init(&r->adamw, &r->ps, opt.lr, 0.9, 0.999, 1e-8, opt.weight_decay) < 0)
		train_die(PROG, "optimizer");
	if (nn_schedule_init(&r->sched, sk, opt.lr, opt.min_lr, -1, opt.warmup, r->total) < 0)
		flags_fail(PROG, "min-lr", "%s", tensor_last_error());
	if (!(r->cfg_json = model_config_to_json(&r->cfg)))
		train_die(PROG, "model config");
	r->text_json = reading_json(PROG, &r->tok, opt.enc.n);

	char err[1200], path[1100];
	if (opt.log_dir) {
		snprintf(r->log_dir, sizeof r->log_dir, "%s", opt.log_dir);
	} else if (opt.resume) {
		flags_fail(PROG, "resume", "needs --log-dir DIR of the run");
	} else {
		train_default_log_dir(r->log_dir, sizeof r->log_dir, "mlm-", opt.enc.model,
				      opt.enc.n);
	}
	snprintf(r->ckpt_dir, sizeof r->ckpt_dir, "%s",
		 opt.checkpoint_dir ? opt.checkpoint_dir : r->log_dir);
	if (train_mkdirs(r->log_dir, err, sizeof err) < 0)
		flags_fail(PROG, "log-dir", "%s", err);
	if (train_mkdirs(r->ckpt_dir, err, sizeof err) < 0)
		flags_fail(PROG, "checkpoint-dir", "%s", err);
	r->best_val = INFINITY;
	r->saved = -1;
	double elapsed0 = 0;
	if (opt.resume) { /* the weights, AdamW, random stream and step of last.safetensors */
		struct run_state st = { .best_val = INFINITY, .flags = flags, .nflags = NFLAGS,
					.free_flags = RESUME_FREE, .saves = SAVES };
		snprintf(path, sizeof path, "%s/last.safetensors", r->ckpt_dir);
		run_state_load(PROG, path, &st, &r->ps, &r->adamw, NULL);
		reading_check_tokenizer(PROG, path, &r->tok, flags, NFLAGS, "resume");
		r->step = r->saved = st.step;
		r->best_val = st.best_val, r->best_epoch = st.best_epoch;
		for (int64_t e = 0; e < r->step / r->spe; e++)
			text_batcher_next_epoch(&r->btrain); /* its order: from (seed, epoch) */
	}
	snprintf(path, sizeof path, "%s/metrics.csv", r->log_dir);
	if (nn_dist_rank() == 0 &&
	    ((opt.resume && csvlog_drop_after(path, (long long)r->step, CSV_ELAPSED, &elapsed0, err,
					      sizeof err) < 0) ||
	     csvlog_open(&r->csv, path, CSV_COLS, NCSV, opt.resume, err, sizeof err) < 0 ||
	     tb_open(&r->tb, r->log_dir, err, sizeof err) < 0))
		flags_fail(PROG, "log-dir", "%s", err);
	r->start -= elapsed0; /* the time before the resume counts */

	model_summary(&r->cfg, nn_params_count(&r->ps), stdout);
	static const char *const unit[] = { "tokens", "whole words", "word spans" };
	printf("tokenizer %s (%d ids), masking %g (%s), decode %s; batch %lld x accum %lld, %lld "
	       "steps (%lld epoch%s of %lld), threads %d (BLIS %s)\n",
	       opt.enc.tokenizer, r->tok.vocab_size, opt.mask_prob, unit[opt.mask_unit], opt.decode,
	       (long long)opt.batch, (long long)opt.accum, (long long)r->total,
	       (long long)r->epochs, r->epochs == 1 ? "" : "s", (long long)r->spe,
	       tensor_get_num_threads(), tensor_blas_arch());
	if (!opt.data && !opt.corpus)
		printf("(the bundled subset; for the full dataset see --help)\n");
	printf("logs in %s, checkpoints in %s\n", r->log_dir, r->ckpt_dir);
	if (r->step)
		printf("resumed at step %lld\n", (long long)r->step);
}

/* Running sums between log points. */
struct window {
	int64_t steps, padded, predicted;
	double loss, time;
};

/* Forward and backward of one batch's M > 0 predicted positions, its loss weighted by
 * M / total (the step's predicted tokens); returns the loss times M, and counts a
 * non-finite loss in *nonfinite. */
static double backward_batch(struct run *r, struct tensor *inputs, struct tensor *mask,
			     struct tensor *labels, int64_t M, double total, double *nonfinite)
{
	tensor_scope_begin();
	struct tensor *loss = mlm_loss(&r->model, inputs, mask, labels, M);
	struct tensor *scaled = ag_mul_scalar(loss, (double)M / total);
	if (!scaled)
		train_die(PROG, "training step");
	/* read before backward releases the forward's memory */
	double l = tensor_get(loss, NULL);
	*nonfinite += !isfinite(l);
	if (ag_backward_release(scaled, NULL) < 0)
		train_die(PROG, "training step");
	tensor_scope_end();
	return l * (double)M;
}

/* One optimizer step over batches [first, last) of the epoch: every batch's masks first, so
 * that each batch's loss is weighted by its share of the step's predicted tokens (over every
 * rank's share of the batches under mpirun). */
static void train_step(struct run *r, int64_t step, int64_t first, int64_t last, struct window *w)
{
	struct tensor *in[last - first], *lab[last - first];
	struct text_batch batch[last - first];
	int64_t M[last - first], base = step / r->spe * r->nb;
	double sum[5] = { 0 }; /* the ranks' predicted tokens, loss sum, tokens, non-finite, stop */
	tensor_scope_begin();
	if (nn_params_zero_grad(&r->ps) < 0 ||
	    nn_params_autocast_begin(&r->ps, train_precision) < 0)
		train_die(PROG, "step setup");
	for (int64_t mb = first; mb < last; mb++) {
		if (text_batcher_get(&r->btrain, mb, &batch[mb - first]) < 0)
			train_die(PROG, "training batch");
		mask_batch(&r->tok, &batch[mb - first], train_mask_seed(base + mb), &in[mb - first],
			   &lab[mb - first]);
		M[mb - first] = share_masked(&r->ps, &batch[mb - first], &in[mb - first],
					     &lab[mb - first]);
		sum[0] += (double)M[mb - first];
		sum[2] += (double)(batch[mb - first].size * batch[mb - first].ids->shape[1]);
	}
	double total = sum[0];
	if (nn_dist_sum(&total, 1) < 0)
		train_die(PROG, "sharing the step between the ranks");
	for (int64_t i = 0; i < last - first && total; i++) {
		if (M[i])
			sum[1] +=
			    backward_batch(r, in[i], batch[i].mask, lab[i], M[i], total, &sum[3]);
		/* a rank that predicts nothing of this batch drew no dropout masks */
		if (nn_dist_sync_rng(&r->ps) < 0)
			train_die(PROG, "sharing the step between the ranks");
	}
	ag_autocast_end();
	/* each rank's loss is its share of the step's mean: the ranks' gradients add up */
	sum[4] = train_stop_signal() != 0;
	if (nn_dist_average_grads(&r->ps, 1, 1) < 0 || nn_dist_sum(sum, 5) < 0)
		train_die(PROG, "sharing the step between the ranks");
	bool finite = sum[3] == 0;
	w->predicted += (int64_t)sum[0], w->loss += sum[1], w->padded += (int64_t)sum[2];
	r->stop = sum[4] > 0;
	double norm =
	    finite ? train_optimizer_step(&r->ps, &r->adamw, &r->sched, step, opt.clip) : NAN;
	if (norm < 0)
		train_die(PROG, "optimizer step");
	if (isnan(norm)) {
		progress_end(&r->bar);
		train_nonfinite(PROG, step + 1, finite, opt.skip_nonfinite, r->ckpt_dir, r->saved,
				&r->skipped);
	}
	tensor_scope_end();
}

static void free_run(struct run *r)
{
	csvlog_close(&r->csv);
	tb_close(&r->tb);
	free(r->cfg_json);
	free(r->text_json);
	nn_adamw_free(&r->adamw);
	model_mlm_free(&r->model);
	nn_params_free(&r->ps);
	text_batcher_free(&r->btrain);
	text_batcher_free(&r->bval);
	text_dataset_free(&r->train);
	text_dataset_free(&r->val);
	text_tokenizer_free(&r->tok);
	tensor_mem_trim();
}

static int run_train(int argc, char **argv)
{
	struct run r = { 0 };
	r.start = train_clock();
	setup(&r);
	int64_t step = r.step, first_step = r.step, padded_all = 0;
	double train_time = 0, first_loss = NAN, last_loss = NAN;
	struct mlm_eval v = { NAN, 0 };
	train_signals_install();
	train_crash_hook_install();
	progress_init(&r.bar, stderr, opt.log_every);
	struct window w = { 0 };
	if (step >= r.total) { /* resumed after its last step */
		printf("the run in %s ended at step %lld: nothing to resume\n", r.log_dir,
		       (long long)step);
		free_run(&r);
		return 0;
	}
	while (step < r.total) {
		int64_t epoch = step / r.spe, j = step % r.spe;
		if (r.btrain.epoch < epoch)
			text_batcher_next_epoch(&r.btrain);
		int64_t first = j * opt.accum,
			last = first + opt.accum < r.nb ? first + opt.accum : r.nb;
		double t0 = train_clock(), lr = nn_schedule_lr(&r.sched, step);
		train_step(&r, step, first, last, &w);
		step++, w.steps++;
		double dt = train_clock() - t0;
		w.time += dt, train_time += dt;
		double loss = w.predicted ? w.loss / (double)w.predicted : NAN;
		struct progress_stats ps = {
			.step = step,
			.total = r.total,
			.epoch = epoch + 1,
			.epochs = r.epochs,
			.loss = loss,
			.metric_name = "ppl",
			.metric = exp(loss),
			.tokens_per_s = (double)w.padded / w.time,
			.elapsed_s = elapsed(&r),
			.eta_s = train_time / (double)(step - first_step) * (double)(r.total - step),
			.peak_mb = train_peak_mb(),
		};
		progress_update(&r.bar, &ps);
		if (step % opt.log_every == 0 || step == r.total) {
			csv_row(&r, step, epoch + 1, "train", loss, lr, ps.tokens_per_s);
			first_loss = isnan(first_loss) ? loss : first_loss;
			last_loss = loss;
			padded_all += w.padded;
			w = (struct window){ 0 };
		}
		bool end = step % r.spe == 0 || step == r.total;
		if (end) { /* the end of an epoch */
			v = evaluate(&r.model, &r.ps, &r.bval, &r.tok);
			bool best = v.loss < r.best_val;
			if (best)
				r.best_val = v.loss, r.best_epoch = epoch + 1;
			char el[32];
			progress_printf(
			    &r.bar,
			    "epoch %lld/%lld (step %lld): validation loss %.4f perplexity "
			    "%.3f%s (%lld tokens), %s elapsed, peak %.0f MB\n",
			    (long long)epoch + 1, (long long)r.epochs, (long long)step, v.loss,
			    exp(v.loss), best ? " (best)" : "", (long long)v.tokens,
			    progress_duration(elapsed(&r), el, sizeof el), train_peak_mb());
			csv_row(&r, step, epoch + 1, "val", v.loss, -1, -1);
			if (best)
				save(&r, "best.safetensors", step);
			save(&r, "last.safetensors", step);
		} else if (opt.save_every && step % opt.save_every == 0) {
			save(&r, "last.safetensors", step);
		}
		if (step < r.total && (r.stop || (opt.stop_after && step >= opt.stop_after))) {
			if (r.saved != step)
				save(&r, "last.safetensors", step);
			progress_end(&r.bar);
			printf("%s at step %lld of %lld: saved %s/last.safetensors\n",
			       r.stop ? "interrupted" : "stopped (--stop-after)", (long long)step,
			       (long long)r.total, r.ckpt_dir);
			print_resume_command(argc, argv, r.log_dir, r.ckpt_dir);
			free_run(&r);
			return r.stop ? train_stop_status() : 0;
		}
	}
	progress_end(&r.bar);
	train_dist_report(PROG, &r.ps);
	char el[32];
	printf("train loss %.4f -> %.4f (perplexity %.1f -> %.1f); validation perplexity %.3f, "
	       "best %.3f (epoch %lld)\nwall time %s; %.0f tokens/s (batch x width per "
	       "second); peak memory %.1f MB\n",
	       first_loss, last_loss, exp(first_loss), exp(last_loss), exp(v.loss), exp(r.best_val),
	       (long long)r.best_epoch, progress_duration(elapsed(&r), el, sizeof el),
	       train_time > 0 ? (double)padded_all / train_time : 0.0, train_peak_mb());
	if (r.skipped)
		printf("%lld steps skipped: their loss or gradients were not finite "
		       "(--skip-nonfinite)\n",
		       (long long)r.skipped);
	if (r.best_epoch > 0) /* a best checkpoint was written */
		printf("fine-tune the classifier: %s --init-from %s/best.safetensors%s\n",
		       strcmp(opt.enc.tokenizer, "byte") && !opt.enc.vocab ? "examples/linformer_imdb"
									   : "study/imdb_study",
		       r.ckpt_dir, !strcmp(opt.enc.tokenizer, "byte") ? " --tokenizer byte" : "");
	free_run(&r);
	return isfinite(v.loss) ? 0 : 1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach a log file or pipe as they happen */
	train_dist_init(PROG, &argc, &argv); /* a rank of mpirun -np N, or alone */
	static const char *const sections[][2] = {
		{ "model", "Model" },	  { "tokenizer", "Tokenizer" },
		{ "data", "Data" },	  { "mask-prob", "Masked language model" },
		{ "batch", "Training" },  { "log-dir", "Logs and checkpoints" },
		{ "eval-only", "Modes" },
	};
	for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
		flags_find(flags, NFLAGS, sections[i][0])->section = sections[i][1];
	flags_parse(flags, NFLAGS, argc, argv, PROG, SYNOPSIS, EPILOG);
	if (opt.corpus && opt.data)
		flags_fail(PROG, "corpus", "and --data are two sources of text: give one");
	if (opt.eval_only && !opt.checkpoint)
		flags_fail(PROG, "eval-only", "needs --checkpoint CKPT (a best.safetensors)");
	if (opt.init_from && opt.eval_only)
		flags_fail(PROG, "init-from",
			   "starts a training run; --eval-only reads --checkpoint");
	if (opt.checkpoint && !opt.eval_only)
		flags_fail(PROG, "checkpoint",
			   "is the model of --eval-only; training writes to --checkpoint-dir");
	model_flags_check(&opt.enc, PROG);
	if (opt.threads)
		tensor_set_num_threads((int)opt.threads);
	train_set_device(PROG, opt.device);
	train_set_precision(PROG, opt.precision);
	int rc = opt.eval_only ? run_eval_only() : run_train(argc, argv);
	nn_dist_finalize();
	return train_close_stdout(PROG, rc);
}
