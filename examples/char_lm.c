/* char_lm: a character-level language model, a small causal Transformer decoder over the bytes
 * of any text file, written against nn.h as a new model is written.
 *
 *   char_lm                               train on the bundled text (coast.txt), then sample
 *   char_lm --text FILE --steps 5000      any text file
 *   char_lm --resume                      continue the run saved in --checkpoint
 *   char_lm --generate --prompt "The "    sample from the checkpoint
 *
 * The model: byte and position embeddings, pre-norm blocks of causal multi-head attention and a
 * feed-forward layer, a final norm and a linear layer to 256 byte logits. Training: random
 * windows of the first 90% of the text, AdamW with warmup and cosine decay, the validation loss
 * of the last 10% and a checkpoint every --eval-every steps; Ctrl-C saves and says how to
 * resume. Sampling reads the prompt once, then feeds one byte a step through each layer's
 * cache of keys and values (nn_kv_cache), so a step costs one position, not the window. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cformer/nn.h>
#include <cformer/text.h> /* text_data_path: where `make install` put the bundled text */

#include "common/flags.h"

static const char PROG[] = "char_lm";

/* clang-format off */
static struct {
	const char *text, *checkpoint, *prompt;
	int64_t context, dim, heads, layers, steps, batch, eval_every, seed, threads, sample, top_k;
	double lr, temperature;
	bool resume, generate, no_cache;
} opt = { .checkpoint = "char_lm.safetensors", .prompt = "The ", .context = 64, .dim = 64,
	  .heads = 4, .layers = 2, .steps = 1000, .batch = 16, .lr = 3e-3, .eval_every = 100,
	  .seed = 1, .sample = 300, .temperature = 0.8, .top_k = 20 };
/* clang-format on */

static struct flag flags[] = {
	FLAG_DEF_STRING("text", &opt.text, "FILE",
			"the text to learn (default: the bundled coast.txt)"),
	FLAG_DEF_INT("context", &opt.context, 2, 4096, "N", "bytes the model sees at once"),
	FLAG_DEF_INT("dim", &opt.dim, 1, 4096, "D", "model width"),
	FLAG_DEF_INT("heads", &opt.heads, 1, 256, "H", "attention heads (they divide --dim)"),
	FLAG_DEF_INT("layers", &opt.layers, 1, 64, "L", "Transformer blocks"),
	FLAG_DEF_INT("steps", &opt.steps, 0, 1e9, "N",
		     "training steps in all (a resumed run's too)"),
	FLAG_DEF_INT("batch", &opt.batch, 1, 1 << 16, "B", "windows per step"),
	FLAG_DEF_DOUBLE("lr", &opt.lr, 0, 10, FLAG_MIN_OPEN, "RATE",
			"peak learning rate (AdamW; 5% warmup, then cosine decay to a tenth)"),
	FLAG_DEF_INT("eval-every", &opt.eval_every, 1, 1e9, "N",
		     "steps between validation losses and checkpoints"),
	FLAG_DEF_INT("seed", &opt.seed, 0, 9007199254740992.0, "S",
		     "seed of a new run's weights, batches and dropout, and of the sample"),
	FLAG_DEF_INT("threads", &opt.threads, 0, 4096, "T", "CPU threads (0: the default)"),
	FLAG_DEF_STRING("checkpoint", &opt.checkpoint, "FILE",
			"where training saves, and what --resume and --generate read"),
	FLAG_DEF_BOOL("resume", &opt.resume, "continue training from --checkpoint"),
	FLAG_DEF_BOOL("generate", &opt.generate, "only sample from --checkpoint"),
	FLAG_DEF_INT("sample", &opt.sample, 0, 1 << 24, "N", "bytes to sample after training"),
	FLAG_DEF_STRING("prompt", &opt.prompt, "TEXT", "the sample's start (empty: a newline)"),
	FLAG_DEF_DOUBLE("temperature", &opt.temperature, 0, 100, 0, "T",
			"divides the logits (0: always the likeliest byte)"),
	FLAG_DEF_INT("top-k", &opt.top_k, 0, 256, "K",
		     "sample among the K likeliest bytes (0: all)"),
	FLAG_DEF_BOOL("no-cache", &opt.no_cache,
		      "sample by rerunning the window for each byte (slower; the same bytes)"),
};
enum { NFLAGS = sizeof flags / sizeof flags[0] };

static void die(const char *what)
{
	fprintf(stderr, "%s: %s: %s\n", PROG, what, tensor_last_error());
	exit(1);
}

/* splitmix64's finaliser: a well-mixed 64-bit number from any counter, for batches and sampling
 * that depend on (seed, step) alone, so that a resumed run draws what it would have drawn. */
static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15u;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
	return x ^ (x >> 31);
}

/* ---- the model ---------------------------------------------------------------------------- */

struct lm_config {
	int64_t context, dim, heads, layers;
	double dropout;
};

struct block {
	struct nn_layer_norm ln1, ln2;
	struct nn_mha attn;
	struct nn_feed_forward ff;
};

struct lm {
	struct lm_config cfg;
	struct nn_embedding tok, pos; /* bytes, and positions 0 .. context-1 */
	struct block *layers;
	struct nn_layer_norm ln_f;
	struct nn_linear head; /* dim -> 256 byte logits */
	struct nn_dropout drop;
};

static int block_init(struct block *b, struct nn_params *ps, int i, const struct lm_config *c)
{
	char name[NN_NAME_MAX], prefix[NN_NAME_MAX];
	nn_namef(prefix, "", "layers.%d", i);
	if (nn_layer_norm_init(&b->ln1, ps, nn_name(name, prefix, "ln1"), c->dim, 1e-5) < 0 ||
	    nn_mha_init(&b->attn, ps, nn_name(name, prefix, "attn"), c->dim, c->heads, c->dropout) <
		0 ||
	    nn_layer_norm_init(&b->ln2, ps, nn_name(name, prefix, "ln2"), c->dim, 1e-5) < 0 ||
	    nn_feed_forward_init(&b->ff, ps, nn_name(name, prefix, "ff"), c->dim, 4 * c->dim,
				 NN_GELU, false, c->dropout) < 0)
		return tensor_last_status();
	return TENSOR_OK;
}

static int lm_init(struct lm *m, struct nn_params *ps, const struct lm_config *c)
{
	*m = (struct lm){ .cfg = *c };
	if (!(m->layers = calloc((size_t)c->layers, sizeof *m->layers)))
		return tensor_error(TENSOR_ERR_NOMEM, "out of memory");
	if (nn_embedding_init(&m->tok, ps, "tok", 256, c->dim, -1) < 0 ||
	    nn_embedding_init(&m->pos, ps, "pos", c->context, c->dim, -1) < 0 ||
	    nn_dropout_init(&m->drop, ps, c->dropout) < 0)
		return tensor_last_status();
	for (int i = 0; i < c->layers; i++)
		if (block_init(&m->layers[i], ps, i, c) < 0)
			return tensor_last_status();
	if (nn_layer_norm_init(&m->ln_f, ps, "ln_f", c->dim, 1e-5) < 0 ||
	    nn_linear_init(&m->head, ps, "head", c->dim, 256, true) < 0)
		return tensor_last_status();
	return TENSOR_OK;
}

/* ids [B, T] at positions pos0 .. pos0+T-1 -> logits [B, T, 256]. Without caches, attention is
 * causal over ids alone (training, and sampling by rerunning the window); with them (one per
 * layer, no gradients), it reads the earlier positions' keys and values from them and adds
 * those of ids. */
static struct tensor *lm_forward(const struct lm *m, const struct tensor *ids, int64_t pos0,
				 struct nn_kv_cache *caches)
{
	int64_t t = ids->shape[1];
	struct tensor *pos =
	    tensor_arange(TENSOR_I32, TENSOR_CPU, (double)pos0, (double)(pos0 + t), 1);
	struct tensor *x = ag_add(nn_embedding_forward(&m->tok, ids),  /* [B, T, dim] */
				  nn_embedding_forward(&m->pos, pos)); /* + [T, dim] */
	x = nn_dropout_forward(&m->drop, x);
	for (int64_t i = 0; i < m->cfg.layers; i++) {
		const struct block *b = &m->layers[i];
		struct tensor *h = nn_layer_norm_forward(&b->ln1, x);
		h = caches ? nn_mha_forward_cached(&b->attn, h, &caches[i])
			   : nn_mha_forward(&b->attn, h, NULL, true);
		x = ag_add(x, nn_dropout_forward(&m->drop, h));
		h = nn_feed_forward_forward(&b->ff, nn_layer_norm_forward(&b->ln2, x));
		x = ag_add(x, nn_dropout_forward(&m->drop, h));
	}
	return nn_linear_forward(&m->head, nn_layer_norm_forward(&m->ln_f, x));
}

static void lm_free(struct lm *m)
{
	for (int64_t i = 0; i < m->cfg.layers && m->layers; i++) {
		nn_layer_norm_free(&m->layers[i].ln1);
		nn_mha_free(&m->layers[i].attn);
		nn_layer_norm_free(&m->layers[i].ln2);
		nn_feed_forward_free(&m->layers[i].ff);
	}
	free(m->layers);
	nn_embedding_free(&m->tok);
	nn_embedding_free(&m->pos);
	nn_layer_norm_free(&m->ln_f);
	nn_linear_free(&m->head);
}

/* The config goes into the checkpoint as JSON, so that the model can be rebuilt from the file. */
static void config_to_json(const struct lm_config *c, char *buf, size_t n)
{
	snprintf(buf, n,
		 "{\"context\":%lld,\"dim\":%lld,\"heads\":%lld,\"layers\":%lld,\"dropout\":%g}",
		 (long long)c->context, (long long)c->dim, (long long)c->heads,
		 (long long)c->layers, c->dropout);
}

static int config_from_json(const char *json, struct lm_config *c)
{
	cJSON *j = cJSON_Parse(json);
	const char *keys[4] = { "context", "dim", "heads", "layers" };
	int64_t *vals[4] = { &c->context, &c->dim, &c->heads, &c->layers };
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "dropout");
	int ok = cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 1;
	c->dropout = ok ? v->valuedouble : 0;
	for (int i = 0; i < 4 && ok; i++) {
		v = cJSON_GetObjectItemCaseSensitive(j, keys[i]);
		ok = cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 4096;
		*vals[i] = ok ? (int64_t)v->valuedouble : 0;
	}
	cJSON_Delete(j);
	return ok ? 0 : -1;
}

/* ---- the text ------------------------------------------------------------------------------- */

struct text {
	unsigned char *bytes;
	int64_t n, n_train; /* training windows come from [0, n_train), validation from the rest */
};

static struct text read_text(const char *path, int64_t context)
{
	struct text t = { 0 };
	FILE *f = fopen(path, "rb");
	size_t cap = 0, got;
	if (!f) {
		fprintf(stderr, "%s: cannot open %s: %s\n", PROG, path, strerror(errno));
		exit(1);
	}
	do {
		if ((size_t)t.n == cap && !(t.bytes = realloc(t.bytes, cap = 2 * cap + 65536))) {
			fprintf(stderr, "%s: out of memory reading %s\n", PROG, path);
			exit(1);
		}
		got = fread(t.bytes + t.n, 1, cap - (size_t)t.n, f);
		t.n += (int64_t)got;
	} while (got > 0);
	if (ferror(f)) {
		fprintf(stderr, "%s: cannot read %s\n", PROG, path);
		exit(1);
	}
	fclose(f);
	if (t.n == 0) {
		fprintf(stderr, "%s: %s is empty: nothing to learn\n", PROG, path);
		exit(1);
	}
	t.n_train = t.n - t.n / 10;
	if (t.n / 10 < context + 1) { /* each part holds at least one window and its targets */
		fprintf(
		    stderr,
		    "%s: %s: %lld bytes are too few for --context %lld: the last 10%% validate, "
		    "and that needs %lld bytes (a text of at least %lld)\n",
		    PROG, path, (long long)t.n, (long long)context, (long long)context + 1,
		    (long long)(10 * (context + 1)));
		exit(1);
	}
	return t;
}

/* Windows of the text from the given offsets as a batch: ids [B, C] and their next bytes,
 * the targets [B * C]. */
static void make_batch(const unsigned char *bytes, const int64_t *offsets, int64_t b, int64_t c,
		       struct tensor **ids, struct tensor **targets)
{
	int32_t *x = malloc(sizeof *x * (size_t)(b * c)), *y = malloc(sizeof *y * (size_t)(b * c));
	if (!x || !y)
		die("out of memory");
	for (int64_t i = 0; i < b; i++)
		for (int64_t j = 0; j < c; j++) {
			x[i * c + j] = bytes[offsets[i] + j];
			y[i * c + j] = bytes[offsets[i] + j + 1];
		}
	*ids = tensor_from_data(TENSOR_I32, TENSOR_CPU, 2, (int64_t[]){ b, c }, x);
	*targets = tensor_from_data(TENSOR_I32, TENSOR_CPU, 1, (int64_t[]){ b * c }, y);
	free(x);
	free(y);
}

/* The mean loss of logits [B, C, 256] against targets [B * C]. */
static struct tensor *loss_of(struct tensor *logits, const struct tensor *targets)
{
	return nn_cross_entropy(ag_reshape(logits, 2, (int64_t[]){ -1, 256 }), targets, -1, 0.0);
}

/* The validation loss: the mean over up to 64 windows spread over the last 10% of the text, in
 * eval mode (no dropout) and without a tape. */
static double validate(const struct lm *m, struct nn_params *ps, const struct text *t)
{
	int64_t c = m->cfg.context, nval = t->n - t->n_train, offsets[64];
	int64_t nwin = (nval - 1) / c < 64 ? (nval - 1) / c : 64;
	for (int64_t w = 0; w < nwin; w++)
		offsets[w] = t->n_train + (nwin > 1 ? w * (nval - 1 - c) / (nwin - 1) : 0);
	nn_params_train(ps, false);
	ag_no_grad_begin();
	tensor_scope_begin();
	struct tensor *ids, *targets;
	make_batch(t->bytes, offsets, nwin, c, &ids, &targets);
	struct tensor *loss = loss_of(lm_forward(m, ids, 0, NULL), targets);
	if (!loss)
		die("validation");
	double v = tensor_get(loss, NULL);
	tensor_scope_end();
	ag_no_grad_end();
	nn_params_train(ps, true);
	return v;
}

/* ---- training ----------------------------------------------------------------------------- */

static volatile sig_atomic_t stop_signal; /* SIGINT or SIGTERM asked the run to stop */

static void on_signal(int sig)
{
	stop_signal = sig;
}

static void save(const char *path, struct nn_params *ps, struct nn_adamw *adamw,
		 const struct lm_config *c, int64_t step)
{
	char json[256];
	config_to_json(c, json, sizeof json);
	if (nn_checkpoint_save(path, ps, adamw, json, step) < 0)
		die("saving the checkpoint");
}

/* Steps *at .. opt.steps-1: one scope each (a batch of random windows, forward, backward,
 * clipping, AdamW at the schedule's rate); every --eval-every steps the validation loss and a
 * checkpoint. *at: the first step, then the step reached. Returns the signal that stopped
 * the run (after saving), or 0. */
static int train(const struct lm *m, struct nn_params *ps, struct nn_adamw *adamw,
		 const struct text *t, int64_t *at)
{
	int64_t step = *at;
	struct nn_schedule sched;
	int64_t b = opt.batch, c = m->cfg.context, *offsets = malloc(sizeof *offsets * (size_t)b);
	if (!offsets || nn_schedule_init(&sched, NN_SCHEDULE_COSINE, opt.lr, opt.lr / 10, -1, 0.05,
					 opt.steps > 0 ? opt.steps : 1) < 0)
		die("the schedule");
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	double sum = 0;
	int64_t count = 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (step == 0)
		printf("step %6d  validation loss %.4f\n", 0, validate(m, ps, t));
	while (step < opt.steps && !stop_signal) {
		/* the windows of this step, from (seed, step, i) alone */
		for (int64_t i = 0; i < b; i++)
			offsets[i] =
			    (int64_t)(mix(mix(ps->seed ^ mix((uint64_t)step)) + (uint64_t)i) %
				      (uint64_t)(t->n_train - c));
		tensor_scope_begin(); /* everything the step creates is released at its end */
		struct tensor *ids, *targets;
		make_batch(t->bytes, offsets, b, c, &ids, &targets);
		struct tensor *loss = loss_of(lm_forward(m, ids, 0, NULL), targets);
		if (nn_params_zero_grad(ps) < 0 || ag_backward_release(loss, NULL) < 0)
			die("training step"); /* the first error anywhere in the forward pass */
		double norm = nn_clip_grad_norm(ps, 1.0);
		adamw->lr = nn_schedule_lr(&sched, step);
		if (norm < 0 || nn_adamw_step(adamw) < 0)
			die("optimizer step");
		sum += tensor_get(loss, NULL);
		count++;
		tensor_scope_end();
		if (++step % opt.eval_every == 0 || step == opt.steps) {
			clock_gettime(CLOCK_MONOTONIC, &t1);
			double s = (double)(t1.tv_sec - t0.tv_sec) +
				   1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
			printf("step %6lld  validation loss %.4f  train loss %.4f  lr %.2e  %.0f "
			       "tokens/s\n",
			       (long long)step, validate(m, ps, t), sum / (double)count, adamw->lr,
			       (double)(count * b * c) / s);
			fflush(stdout);
			save(opt.checkpoint, ps, adamw, &m->cfg, step);
			sum = 0, count = 0;
			t0 = t1;
		}
	}
	if (stop_signal && step % opt.eval_every != 0) /* else just saved */
		save(opt.checkpoint, ps, adamw, &m->cfg, step);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	free(offsets);
	*at = step;
	return stop_signal;
}

/* ---- sampling ----------------------------------------------------------------------------- */

/* The next byte from the logits of the last position: the likeliest one at temperature 0, else
 * drawn (with u in [0, 1)) from the softmax of logits / temperature over the top_k likeliest. */
static int pick(const float *logits, double u)
{
	int order[256];
	for (int i = 0; i < 256; i++) { /* insertion sort, likeliest first */
		int j = i;
		for (; j > 0 && logits[order[j - 1]] < logits[i]; j--)
			order[j] = order[j - 1];
		order[j] = i;
	}
	int k = opt.top_k > 0 ? (int)opt.top_k : 256;
	if (opt.temperature == 0)
		return order[0];
	double p[256], total = 0;
	for (int i = 0; i < k; i++)
		total += p[i] = exp((logits[order[i]] - logits[order[0]]) / opt.temperature);
	for (int i = 0; i < k; i++)
		if ((u -= p[i] / total) < 0)
			return order[i];
	return order[k - 1];
}

/* Print the prompt and n bytes sampled after it. The model sees the last bytes, up to its
 * context: when the window is full it moves on by half the context, and the cached path
 * then reads the kept half again in one call; otherwise each step feeds one byte through the
 * caches, where --no-cache reruns the whole window. */
static void generate(const struct lm *m, struct nn_params *ps, int64_t n)
{
	const char *prompt = *opt.prompt ? opt.prompt : "\n";
	int64_t c = m->cfg.context, len = (int64_t)strlen(prompt), w = 0, fed = 0, cache_w = -1;
	int32_t *ids = malloc(sizeof *ids * (size_t)(len + n));
	struct nn_kv_cache *caches = calloc((size_t)m->cfg.layers, sizeof *caches);
	if (!ids || !caches)
		die("out of memory");
	for (int64_t i = 0; i < m->cfg.layers && !opt.no_cache; i++)
		if (nn_kv_cache_init(&caches[i], &m->layers[i].attn, 1, c) < 0)
			die("the key and value caches");
	for (int64_t i = 0; i < len; i++)
		ids[i] = (unsigned char)prompt[i];
	printf("--- sample (seed %lld, temperature %g, top-k %lld) ---\n%s", (long long)opt.seed,
	       opt.temperature, (long long)opt.top_k, prompt);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	nn_params_train(ps, false);
	ag_no_grad_begin();
	for (int64_t step = 0; step < n; step++) {
		while (len - w > c)
			w += c / 2;
		tensor_scope_begin();
		struct tensor *logits;
		if (opt.no_cache) { /* the whole window, every step */
			logits = lm_forward(m,
					    tensor_from_data(TENSOR_I32, TENSOR_CPU, 2,
							     (int64_t[]){ 1, len - w }, ids + w),
					    0, NULL);
		} else {
			if (w != cache_w) { /* a new window: read it from its start */
				for (int64_t i = 0; i < m->cfg.layers; i++)
					nn_kv_cache_reset(&caches[i]);
				cache_w = fed = w;
			}
			logits =
			    lm_forward(m,
				       tensor_from_data(TENSOR_I32, TENSOR_CPU, 2,
							(int64_t[]){ 1, len - fed }, ids + fed),
				       fed - w, caches);
			fed = len;
		}
		float last[256];
		if (!logits || tensor_to_host(tensor_select(tensor_select(logits, 0, 0), 0,
							    logits->shape[1] - 1),
					      last, sizeof last) < 0)
			die("sampling");
		tensor_scope_end();
		uint64_t r = mix(mix((uint64_t)opt.seed) ^ (uint64_t)step);
		ids[len++] = pick(last, (double)(r >> 11) * 0x1p-53);
		putchar(ids[len - 1]);
	}
	ag_no_grad_end();
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
	printf("\n--- %lld bytes in %.2f s, %s ---\n", (long long)n, s,
	       opt.no_cache ? "each rerunning the window" : "keys and values cached");
	for (int64_t i = 0; i < m->cfg.layers; i++)
		nn_kv_cache_free(&caches[i]);
	free(caches);
	free(ids);
}

/* ---- main ----------------------------------------------------------------------------------- */

/* The model of --resume and --generate comes from the checkpoint: a model flag given beside
 * them must agree with it. */
static void check_model_flags(const struct lm_config *c)
{
	const char *names[4] = { "context", "dim", "heads", "layers" };
	const int64_t file[4] = { c->context, c->dim, c->heads, c->layers };
	const int64_t given[4] = { opt.context, opt.dim, opt.heads, opt.layers };
	for (int i = 0; i < 4; i++)
		if (flags_given(flags, NFLAGS, names[i]) && given[i] != file[i])
			flags_fail(PROG, names[i], "%lld differs from the checkpoint's %lld (%s)",
				   (long long)given[i], (long long)file[i], opt.checkpoint);
}

int main(int argc, char **argv)
{
	flags_parse(flags, NFLAGS, argc, argv, PROG, "usage: char_lm [flags]",
		    "Trains a byte-level causal Transformer on a text file, saving --checkpoint, "
		    "then samples from it.");
	if (opt.resume && opt.generate)
		flags_fail(PROG, "generate", "is not for use with --resume");
	if (opt.threads)
		tensor_set_num_threads((int)opt.threads);
	struct lm_config cfg = { opt.context, opt.dim, opt.heads, opt.layers, 0.1 };
	bool from_file = opt.resume || opt.generate;
	char *json = NULL;
	if (from_file) { /* the model is the checkpoint's */
		if (!(json = nn_checkpoint_config(opt.checkpoint)))
			die("reading the checkpoint");
		if (config_from_json(json, &cfg) < 0) {
			fprintf(stderr, "%s: %s: the config %s is not char_lm's\n", PROG,
				opt.checkpoint, json);
			return 1;
		}
		check_model_flags(&cfg);
	}
	struct nn_params ps;
	struct lm model;
	struct nn_adamw adamw;
	int64_t step = 0;
	if (nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, (uint64_t)opt.seed) < 0 ||
	    lm_init(&model, &ps, &cfg) < 0 || nn_params_pack(&ps) < 0 ||
	    nn_adamw_init(&adamw, &ps, opt.lr, 0.9, 0.95, 1e-8, 0.1) < 0)
		die("building the model");
	if (from_file) {
		if (opt.resume && nn_checkpoint_remove_temps(opt.checkpoint) < 0)
			die("removing the temporary files of killed saves");
		if (nn_checkpoint_load(opt.checkpoint, &ps, opt.resume ? &adamw : NULL, &step) < 0)
			die("loading the checkpoint");
		printf("%s %s at step %lld\n", opt.resume ? "resuming from" : "loaded",
		       opt.checkpoint, (long long)step);
	}
	printf(
	    "model: %lld parameters, context %lld, dim %lld, %lld heads, %lld layers; %d threads\n",
	    (long long)nn_params_count(&ps), (long long)cfg.context, (long long)cfg.dim,
	    (long long)cfg.heads, (long long)cfg.layers, tensor_get_num_threads());
	int sig = 0;
	if (!opt.generate) {
		char bundled[4096];
		const char *path =
		    opt.text ? opt.text : text_data_path("coast.txt", bundled, sizeof bundled);
		if (!path)
			die("the bundled text's path");
		struct text t = read_text(path, cfg.context);
		printf("text: %s, %lld bytes (%lld to train, %lld to validate)\n", path,
		       (long long)t.n, (long long)t.n_train, (long long)(t.n - t.n_train));
		if ((sig = train(&model, &ps, &adamw, &t, &step)))
			printf(
			    "stopped at step %lld: saved %s; to resume, run the same command with "
			    "--resume\n",
			    (long long)step, opt.checkpoint);
		free(t.bytes);
	}
	if (!sig && opt.sample > 0)
		generate(&model, &ps, opt.sample);
	free(json);
	nn_adamw_free(&adamw);
	lm_free(&model);
	nn_params_free(&ps);
	return sig ? 128 + sig : 0;
}
