/* imdb_study's flags: defaults, the table bound to opt, and the --help texts. */
#include <math.h>

#include "imdb_study.h"
#include "models.h"

struct options opt = {
	.enc = { MODEL_FLAGS_DEFAULTS, .model = "CC", .n = 256, .cfg.dim = 64, .cfg.ff_hidden = 256,
		 .cfg.layers = 2 },
	.device = "cpu",
	.precision = "f32",
	.schedule = "cosine",
	.data = NULL, /* the bundled subset (example_data_path) */
	.val_split = "random",
	.batch = 32,
	.accum = 1,
	.epochs = 6,
	.seed = 1,
	.split_seed = 1,
	.log_every = 10,
	.embed_std = 0.02,
	.lr = 1e-3,
	.beta1 = 0.9,
	.beta2 = 0.999,
	.warmup = 0.1,
	.weight_decay = 0.01,
	.clip = 1.0,
	.val_fraction = 0.1,
};

/* Table entries bound to the fields of opt. */
#define INT(nm, var, ...) FLAG_DEF_INT(nm, &opt.var, __VA_ARGS__)
#define DBL(nm, var, ...) FLAG_DEF_DOUBLE(nm, &opt.var, __VA_ARGS__)
#define STR(nm, var, ...) FLAG_DEF_STRING(nm, &opt.var, __VA_ARGS__)
#define CHO(nm, var, ...) FLAG_DEF_CHOICE(nm, &opt.var, __VA_ARGS__)
#define BOOL(nm, var, ...) FLAG_DEF_BOOL(nm, &opt.var, __VA_ARGS__)
struct flag flags[] = {
	MODEL_FLAGS_ENCODER(opt.enc, 2,
			    "sequence length: tokens per review, [CLS] and [SEP] included"),
	MODEL_FLAGS_CLASSIFIER(opt.enc),
	DBL("embed-std", embed_std, 0, 10, 0, "S",
	    "token embedding drawn N(0, S) as in BERT; 0: the library's N(0, 1)"),
	DBL("token-mask", token_mask, 0, 1, FLAG_MAX_OPEN, "P",
	    "training reviews' tokens corrupted with probability P as BERT's MLM input (80% "
	    "[MASK], 10% random, 10% kept; 0: none)"),
	MODEL_FLAGS_TOKENIZER(opt.enc),
	INT("keep-tail", keep_tail, 0, 1 << 30, "T",
	    "a review over n - 2 tokens keeps its last T tokens and the first ones before "
	    "them (0: the first n - 2; --eval-only and --predict read as the checkpoint's run "
	    "did, unless given)"),
	INT("batch", batch, 1, 1 << 16, "B", "reviews per batch"),
	BOOL("no-bucket", no_bucket,
	     "batches of n tokens in random order (default: reviews of similar length batched "
	     "together, each batch as wide as its longest review)"),
	INT("accum", accum, 1, 1 << 16, "A", "batches accumulated per optimizer step"),
	INT("epochs", epochs, 1, 1 << 20, "E", "training epochs"),
	INT("steps", steps, 0, (double)(1LL << 40), "S", "optimizer steps (0: from --epochs)"),
	DBL("lr", lr, 0, 10, FLAG_MIN_OPEN, "RATE", "peak learning rate (AdamW)"),
	DBL("min-lr", min_lr, 0, 10, 0, "RATE", "final learning rate"),
	DBL("beta1", beta1, 0, 1, FLAG_MAX_OPEN, "B", "AdamW first-moment decay"),
	DBL("beta2", beta2, 0, 1, FLAG_MAX_OPEN, "B", "AdamW second-moment decay"),
	CHO("schedule", schedule, "cosine|linear|constant", "decay after the warmup"),
	DBL("warmup", warmup, 0, 1, FLAG_MAX_OPEN, "RATIO", "warmup fraction of the steps"),
	DBL("weight-decay", weight_decay, 0, 10, 0, "WD",
	    "AdamW weight decay (not on biases, norms, embeddings)"),
	DBL("embed-l2", embed_l2, 0, 10, 0, "L",
	    "L2 penalty L/2 |E|^2 on the token embedding E, added to its gradient (coupled: "
	    "under Adam the rows of rare words shrink between their appearances; 0: none)"),
	BOOL("embed-anchor", embed_anchor,
	     "--embed-l2 pulls the token embedding towards its values from --init-from (L2-SP, "
	     "Li et al. 2018), not towards zero"),
	DBL("embed-l2-ramp", embed_l2_ramp, 0, 1, 0, "RATIO",
	    "fraction of the steps over which --embed-l2 and --pos-l2 grow linearly from 0 (so "
	    "that the embedding learns before the penalty can shrink it to zero)"),
	DBL("pos-l2", pos_l2, 0, 10, 0, "L",
	    "L2 penalty L/2 |P|^2 on the learned position embedding P, as --embed-l2 (0: none)"),
	DBL("proj-l2", proj_l2, 0, 1e6, 0, "L",
	    "L2 penalty L/2 |E - E0|^2 pulling the Linformer projections' weights E, F "
	    "towards their starting values E0 (window means for learned ones; nn_anchor; "
	    "0: none)"),
	DBL("label-smoothing", label_smoothing, 0, 1, FLAG_MAX_OPEN, "S",
	    "train on targets (1 - S) one-hot + S uniform; the logged training loss is the "
	    "smoothed one, validation and test losses are not (0: none)"),
	DBL("adv-eps", adv_eps, 0, 10, 0, "R",
	    "adversarial training (nn_fgm): each batch is trained again with the token "
	    "embedding moved along its gradient by R times its norm (e.g. 0.05; twice the "
	    "compute; 0: none)"),
	BOOL("decay-all", decay_all, "weight decay on every parameter, embeddings included"),
	BOOL("lazy-embed", lazy_embed,
	     "lazy AdamW on the token embedding: only the rows of the batch's tokens, and their "
	     "moments, change at a step (--embed-l2 then reaches those rows only)"),
	DBL("clip", clip, 0, INFINITY, 0, "NORM", "gradient clipping norm (0: none)"),
	DBL("ema", ema, 0, 1, FLAG_MAX_OPEN, "D",
	    "validate, test and keep as best.safetensors a moving average of the weights, "
	    "decay D per step (e.g. 0.999; nn_ema); last.safetensors carries it for --resume, "
	    "last-ema.safetensors holds it as weights to evaluate (0: none)"),
	INT("seed", seed, 0, 9007199254740992.0, "S", "seed of weights, dropout and batch order"),
	INT("threads", threads, 0, 4096, "T", "threads (0: the cores no other process keeps busy)"),
	CHO("device", device, "cpu|cuda", "where the model trains and runs"),
	CHO("precision", precision, "f32|bf16|tf32",
	    "bf16: train with bf16 products (f32 weights, checkpoints, evaluation); tf32: f32 "
	    "products on the GPU's tensor cores"),
	BOOL("skip-nonfinite", skip_nonfinite,
	     "skip a step whose loss or gradients are NaN or inf (default: stop the run, the last "
	     "checkpoint intact)"),
	BOOL("no-mem-check", no_mem_check,
	     "run even when the estimated peak memory exceeds what the machine has available"),
	STR("data", data, "DIR",
	    "aclImdb directory (train/ and test/ with neg/ and pos/; default: the bundled subset "
	    "of "
	    "1,000 + 1,000 reviews)"),
	DBL("val-fraction", val_fraction, 0, 0.5, FLAG_MIN_OPEN, "F",
	    "training reviews held out for validation"),
	INT("split-seed", split_seed, 0, 9007199254740992.0, "S", "seed of the validation split"),
	CHO("val-split", val_split, "random|movie",
	    "validation reviews drawn one by one, or whole movies (the movies of aclImdb's "
	    "urls_*.txt), so that none is also in training, as none of the test set's is"),
	DBL("pooled-test", pooled_test, 0, 0.9, 0, "F",
	    "pool the train and test reviews and hold out a seeded fraction F of all of them "
	    "as the test set (0: aclImdb's test split); the protocol of studies that split the "
	    "50,000 reviews at random, whose test reviews share movies with training"),
	INT("max-train", max_train, 0, 1 << 30, "N",
	    "use N training reviews, a seeded sample (0: all)"),
	INT("max-test", max_test, 0, 1 << 30, "N", "use N test reviews, a seeded sample (0: all)"),
	STR("log-dir", log_dir, "DIR",
	    "metrics.csv and TensorBoard events (default: runs/<model>-n<N>-<time>)"),
	STR("checkpoint-dir", checkpoint_dir, "DIR",
	    "last.safetensors (each epoch), best.safetensors (default: the log dir)"),
	INT("log-every", log_every, 1, 1 << 30, "S", "steps between log lines and CSV rows"),
	BOOL("resume", resume, "continue the run in --checkpoint-dir from last.safetensors"),
	INT("stop-after", stop_after, 0, (double)(1LL << 40), "S",
	    "stop after step S as on SIGINT: save and exit (to test --resume)"),
	STR("init-from", init_from, "CKPT",
	    "start from every encoder tensor of a linformer_mlm (or classifier) checkpoint, "
	    "naming those of the file left unused"),
	BOOL("eval-only", eval_only,
	     "evaluate --checkpoint on the test split, reading reviews as its run did"),
	STR("checkpoint", checkpoint, "CKPT", "the model of --eval-only and --predict"),
	STR("predict", predict, "TEXT", "print P(neg) P(pos) of TEXT with --checkpoint"),
	STR("predict-file", predict_file, "FILE", "print P(neg) P(pos) of each line of FILE"),
	STR("output", output, "FILE",
	    "with --predict, --predict-file or --eval-only: also write each review's logits at full "
	    "precision, as JSON lines if FILE ends in .jsonl, else CSV (not an input of the run or "
	    "a checkpoint)"),
};
const int NFLAGS = (int)(sizeof flags / sizeof flags[0]);

const char *const RESUME_FREE[] = { "threads",	  "device",	"no-mem-check",	"log-every",	"log-dir",	"checkpoint-dir",
				    "resume",	  "stop-after", "init-from",	"eval-only",
				    "checkpoint", "predict",	"predict-file", "output", NULL };

const char SYNOPSIS[] =
    "usage: imdb_study [--flag VALUE]...\n"
    "Trains a sentiment classifier on the IMDB reviews (aclImdb layout), evaluates it on the\n"
    "test split, and saves checkpoints, a CSV and TensorBoard logs. With no flags it trains a\n"
    "small Linformer on the bundled 1000 + 1000 review subset in under a minute: two layers\n"
    "whose keys and values are projected n -> k by strided convolutions (--model CC, i.e.\n"
    "--model linformer --proj conv), 77% test accuracy there; the paper's learned\n"
    "projections (--model linformer) reach 74% on the subset and do best on the full dataset.";
const char EPILOG[] =
    "The full dataset (25000 + 25000 reviews, from ai.stanford.edu/~amaas/data/sentiment):\n"
    "  imdb_study --data DIR/aclImdb --model linformer --n 512 --k 128 --dim 128 \\\n"
    "      --layers 2 --ff 512 --epochs 3 --lr 1e-3 --keep-tail 382 --val-split movie \\\n"
    "      --embed-l2 5e-2 --embed-l2-ramp 0.33   (87% test accuracy; 10 to 40 min on 2 cores)\n"
    "  (the Linformer's best: add --positions conv --proj-l2 0.1, 88.1% over four seeds;\n"
    "  the Transformer with --positions conv alone: 89.1%)\n"
    "Compare --model transformer / linformer / conv-linformer at the same --n; tokens/s counts\n"
    "batch x width per second, padding included (with --no-bucket the width is n).\n"
    "Interrupt with Ctrl-C (or SIGTERM): the step finishes, last.safetensors is saved and the\n"
    "command to resume is printed; a resumed run ends exactly as an uninterrupted one (with\n"
    "the same --threads). Logs: tensorboard --logdir DIR. Then: --eval-only --checkpoint CKPT,\n"
    "or --predict TEXT --checkpoint CKPT, which read text as the checkpoint's run did (its\n"
    "tokenizer, n and keep-tail, kept in the file; another vocabulary is refused).\n";
