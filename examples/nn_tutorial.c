/* The nn tutorial: a byte-level language identifier (en / fr / es / de) written against nn.h
 * as a new model is written: a struct of modules with init / forward / free, one tensor scope
 * per training step, AdamW with warmup + cosine, eval mode for accuracy, and a checkpoint that
 * rebuilds the model. Walk-through: docs/nn-guide.md. Usage: see usage() below. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cformer/nn.h>
#include <cformer/text.h> /* text_data_path: where `make install` put langid.tsv */

#define MAX_LEN 256	  /* bytes kept of each sentence */
#define BATCH 32	  /* sentences per training step */
#define MIN_ACCURACY 0.80 /* --check: held-out accuracy at least this (typically 0.85-0.96) */

static const char *const LABELS[] = { "en", "fr", "es", "de" };
enum { NCLASSES = 4 };

static void die(const char *what)
{
	fprintf(stderr, "nn_tutorial: %s: %s\n", what, tensor_last_error());
	exit(1);
}

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	if (!p)
		die("out of memory");
	return p;
}

/* ---- the model: bytes -> embedding -> masked mean -> linear -> gelu -> dropout -> linear ---- */

struct config {
	int64_t vocab, dim, hidden, classes;
	int act; /* enum nn_activation */
	double dropout;
};

struct langid {
	struct nn_embedding embed;
	struct nn_linear fc1, classifier;
	struct nn_dropout dropout;
	enum nn_activation act;
};

static int langid_init(struct langid *m, struct nn_params *ps, const struct config *c)
{
	m->act = (enum nn_activation)c->act;
	if (nn_embedding_init(&m->embed, ps, "embed", c->vocab, c->dim, 0) < 0 ||
	    nn_linear_init(&m->fc1, ps, "fc1", c->dim, c->hidden, true) < 0 ||
	    nn_dropout_init(&m->dropout, ps, c->dropout) < 0 ||
	    nn_linear_init(&m->classifier, ps, "classifier", c->hidden, c->classes, true) < 0)
		return tensor_last_status();
	return TENSOR_OK;
}

/* ids [B, T] (0 = padding), mask [B, T, 1] (1 = a real byte), len [B, 1] -> logits [B, C] */
static struct tensor *langid_forward(const struct langid *m, const struct tensor *ids,
				     struct tensor *mask, struct tensor *len)
{
	struct tensor *x = nn_embedding_forward(&m->embed, ids);	  /* [B, T, dim] */
	x = ag_div(ag_sum(ag_mul(x, mask), 1, (int[]){ 1 }, false), len); /* mean: [B, dim] */
	x = nn_activation_forward(m->act, nn_linear_forward(&m->fc1, x)); /* [B, hidden] */
	x = nn_dropout_forward(&m->dropout, x);				  /* off in eval mode */
	return nn_linear_forward(&m->classifier, x);			  /* [B, C] */
}

static void langid_free(struct langid *m)
{
	nn_embedding_free(&m->embed);
	nn_linear_free(&m->fc1);
	nn_linear_free(&m->classifier);
}

/* The config goes into the checkpoint as JSON, so the model can be rebuilt from the file. */
static void config_to_json(const struct config *c, char *buf, size_t n)
{
	snprintf(buf, n,
		 "{\"vocab\":%lld,\"dim\":%lld,\"hidden\":%lld,\"classes\":%lld,"
		 "\"activation\":\"%s\",\"dropout\":%g}",
		 (long long)c->vocab, (long long)c->dim, (long long)c->hidden,
		 (long long)c->classes, nn_activation_name(c->act), c->dropout);
}

static double json_num(const cJSON *j, const char *key, int *ok)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
	*ok = *ok && cJSON_IsNumber(v);
	return *ok ? v->valuedouble : 0;
}

static int config_from_json(const char *json, struct config *c)
{
	cJSON *j = cJSON_Parse(json);
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "activation");
	int ok = cJSON_IsString(a) && (c->act = nn_activation_parse(a->valuestring)) >= 0;
	c->vocab = (int64_t)json_num(j, "vocab", &ok);
	c->dim = (int64_t)json_num(j, "dim", &ok);
	c->hidden = (int64_t)json_num(j, "hidden", &ok);
	c->classes = (int64_t)json_num(j, "classes", &ok);
	c->dropout = json_num(j, "dropout", &ok);
	cJSON_Delete(j);
	return ok ? 0 : -1;
}

/* ---- data: "label<TAB>sentence" lines ------------------------------------------------------ */

struct example {
	int label, len;
	unsigned char text[MAX_LEN];
};

static void bad_line(const char *path, int lineno, const char *what)
{
	fprintf(stderr, "nn_tutorial: %s:%d: %s; expected 'en|fr|es|de<TAB>sentence'\n", path,
		lineno, what);
	exit(1);
}

static struct example *load_data(const char *path, int *n)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr,
			"nn_tutorial: cannot open %s: %s (give --data PATH, or set CFORMER_DATA_DIR to "
			"the directory of langid.tsv)\n",
			path, strerror(errno));
		exit(1);
	}
	struct example *ex = NULL;
	char *line = NULL, *tab;
	size_t cap = 0;
	*n = 0;
	for (int lineno = 1; getline(&line, &cap, f) >= 0; lineno++) {
		line[strcspn(line, "\r\n")] = 0;
		if (!*line)
			continue; /* blank lines are allowed */
		if (!(tab = strchr(line, '\t')))
			bad_line(path, lineno, "no TAB after the label");
		*tab++ = 0;
		int label = -1;
		for (int c = 0; c < NCLASSES; c++)
			label = strcmp(line, LABELS[c]) ? label : c;
		if (label < 0 || !*tab)
			bad_line(path, lineno, label < 0 ? "unknown label" : "empty sentence");
		if (!(ex = realloc(ex, sizeof *ex * (size_t)(*n + 1))))
			die("out of memory");
		struct example *e = &ex[(*n)++];
		e->label = label;
		e->len = strlen(tab) < MAX_LEN ? (int)strlen(tab) : MAX_LEN;
		memcpy(e->text, tab, (size_t)e->len);
	}
	free(line);
	fclose(f);
	if (*n < 5) {
		fprintf(stderr, "nn_tutorial: %s: need at least 5 examples, got %d\n", path, *n);
		exit(1);
	}
	return ex;
}

/* A batch as tensors of the current scope; sentences padded with id 0 to the longest. */
struct batch {
	struct tensor *ids, *mask, *len, *labels;
};

static struct batch make_batch(const struct example *const *ex, int n)
{
	int64_t T = 1;
	for (int i = 0; i < n; i++)
		T = ex[i]->len > T ? ex[i]->len : T;
	int32_t *ids = xcalloc((size_t)(n * T), 4), *labels = xcalloc((size_t)n, 4);
	float *mask = xcalloc((size_t)(n * T), 4), *len = xcalloc((size_t)n, 4);
	for (int i = 0; i < n; i++) {
		for (int t = 0; t < ex[i]->len; t++)
			ids[i * T + t] = ex[i]->text[t], mask[i * T + t] = 1;
		len[i] = (float)ex[i]->len;
		labels[i] = ex[i]->label;
	}
	struct batch b = { tensor_from_data(TENSOR_I32, TENSOR_CPU, 2, (int64_t[]){ n, T }, ids),
			   tensor_from_data(TENSOR_F32, TENSOR_CPU, 3, (int64_t[]){ n, T, 1 },
					    mask),
			   tensor_from_data(TENSOR_F32, TENSOR_CPU, 2, (int64_t[]){ n, 1 }, len),
			   tensor_from_data(TENSOR_I32, TENSOR_CPU, 1, (int64_t[]){ n }, labels) };
	free(ids), free(labels), free(mask), free(len);
	return b;
}

/* Loss, accuracy and predicted classes of a whole set, in eval mode, without a tape. */
static void evaluate(const struct langid *m, struct nn_params *ps, const struct example *const *ex,
		     int n, double *loss, double *acc, int64_t *pred)
{
	nn_params_train(ps, false); /* dropout off */
	ag_no_grad_begin();	    /* record nothing for backward */
	tensor_scope_begin();
	struct batch b = make_batch(ex, n);
	struct tensor *logits = langid_forward(m, b.ids, b.mask, b.len);
	struct tensor *l = nn_cross_entropy(logits, b.labels, -1, 0.0);
	*acc = nn_accuracy(logits, b.labels, -1);
	if (!l || *acc < 0 || tensor_to_host(tensor_argmax(logits, 1, false), pred, 8 * n) < 0)
		die("evaluate");
	*loss = tensor_get(l, NULL);
	tensor_scope_end();
	ag_no_grad_end();
	nn_params_train(ps, true);
}

/* Rebuild the model from the checkpoint alone; count the predictions equal to want's. */
static int reload_agree(const char *path, const struct example *const *ex, int n,
			const int64_t *want)
{
	struct config c;
	struct nn_params ps;
	struct langid m;
	int64_t step, *got = xcalloc((size_t)n, sizeof *got);
	double loss, acc;
	char *json = nn_checkpoint_config(path);
	if (!json || config_from_json(json, &c) < 0)
		die("reading the checkpoint's config");
	if (nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 99) < 0 || langid_init(&m, &ps, &c) < 0 ||
	    nn_checkpoint_load(path, &ps, NULL, &step) < 0) /* replaces every initial weight */
		die("loading the checkpoint");
	evaluate(&m, &ps, ex, n, &loss, &acc, got);
	printf("reloaded %s (step %lld, config %s):\n  held-out loss %.4f, accuracy %.3f\n", path,
	       (long long)step, json, loss, acc);
	int agree = 0;
	for (int i = 0; i < n; i++)
		agree += got[i] == want[i];
	free(json), free(got);
	langid_free(&m);
	nn_params_free(&ps);
	return agree;
}

/* ---- main: flags, data, the training loop, evaluation, checkpoint ---------------------------- */

static void usage(const char *flag, const char *why)
{
	fprintf(stderr,
		"nn_tutorial: %s: %s\nusage: nn_tutorial [--steps N] [--seed S] "
		"[--threads T] [--data PATH] [--save PATH] [--check]\n",
		flag, why);
	exit(1);
}

static long number(const char *flag, const char *s, long min)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (end == s || *end || errno || v < min)
		usage(flag, min ? "needs a positive integer" : "needs an integer >= 0");
	return v;
}

int main(int argc, char **argv)
{
	long steps = 300, seed = 1, threads = 0;
	char bundled[4096];
	const char *data = text_data_path("langid.tsv", bundled, sizeof bundled), *save = NULL;
	int check = 0;
	for (int i = 1; i < argc; i++) {
		const char *flag = argv[i], *val = i + 1 < argc ? argv[i + 1] : "";
		if (!strcmp(flag, "--check")) {
			check = 1;
			continue;
		}
		if (!strcmp(flag, "--steps"))
			steps = number(flag, val, 1);
		else if (!strcmp(flag, "--seed"))
			seed = number(flag, val, 0);
		else if (!strcmp(flag, "--threads"))
			threads = number(flag, val, 1);
		else if (!strcmp(flag, "--data") && *val)
			data = val;
		else if (!strcmp(flag, "--save") && *val)
			save = val;
		else
			usage(flag, *val ? "unknown flag" : "unknown flag or missing value");
		i++;
	}
	if (!data)
		die("the bundled data's path");
	if (threads)
		tensor_set_num_threads((int)threads);

	int n, ntrain = 0, ntest = 0;
	struct example *all = load_data(data, &n);
	const struct example **train = xcalloc((size_t)n, sizeof *train);
	const struct example **test = xcalloc((size_t)n, sizeof *test);
	for (int i = 0; i < n; i++) { /* deterministic split: every 5th sentence is held out */
		if (i % 5 == 4)
			test[ntest++] = &all[i];
		else
			train[ntrain++] = &all[i];
	}

	/* The model's parameters live in ps, packed into one flat buffer once all exist. */
	struct config cfg = { 256, 32, 64, NCLASSES, NN_GELU, 0.1 }; /* see struct config */
	struct nn_params ps;
	struct langid model;
	struct nn_adamw opt;
	struct nn_schedule sched;
	if (nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, (uint64_t)seed) < 0 ||
	    langid_init(&model, &ps, &cfg) < 0 || nn_params_pack(&ps) < 0 ||
	    nn_adamw_init(&opt, &ps, 1e-2, 0.9, 0.999, 1e-8, 0.01) < 0 ||
	    nn_schedule_init(&sched, NN_SCHEDULE_COSINE, 1e-2, 1e-3, -1, 0.1, steps) < 0)
		die("building the model");
	printf("%d sentences (%d train, %d held out) from %s\n%lld parameters, threads %d\n", n,
	       ntrain, ntest, data, (long long)nn_params_count(&ps), tensor_get_num_threads());

	double loss0, acc0, loss, train_acc, test_loss, test_acc;
	int64_t *pred = xcalloc((size_t)n, sizeof *pred);
	evaluate(&model, &ps, train, ntrain, &loss0, &acc0, pred);
	printf("before training: train loss %.4f, accuracy %.3f\n", loss0, acc0);
	const struct example *pick[BATCH];
	srand((unsigned)seed);
	for (long step = 0; step < steps; step++) {
		for (int i = 0; i < BATCH; i++) /* a random batch */
			pick[i] = train[rand() % ntrain];
		tensor_scope_begin(); /* everything the step creates is released at its end */
		struct batch b = make_batch(pick, BATCH);
		struct tensor *logits = langid_forward(&model, b.ids, b.mask, b.len);
		struct tensor *l = nn_cross_entropy(logits, b.labels, -1, 0.0);
		/* backward hands the forward's memory back as it goes; l stays readable */
		if (nn_params_zero_grad(&ps) < 0 || ag_backward_release(l, NULL) < 0)
			die("training step"); /* the first error anywhere in the forward pass */
		double norm = nn_clip_grad_norm(&ps, 1.0);
		opt.lr = nn_schedule_lr(&sched, step);
		if (norm < 0 || nn_adamw_step(&opt) < 0)
			die("optimizer step");
		if (step % (steps >= 10 ? steps / 10 : 1) == 0 || step == steps - 1)
			printf("step %4ld  loss %.4f  lr %.2e  grad norm %.3f\n", step,
			       tensor_get(l, NULL), opt.lr, norm);
		tensor_scope_end();
	}

	evaluate(&model, &ps, train, ntrain, &loss, &train_acc, pred);
	evaluate(&model, &ps, test, ntest, &test_loss, &test_acc, pred);
	printf("after %ld steps: train loss %.4f, accuracy %.3f; held-out loss %.4f, accuracy "
	       "%.3f\npeak memory %.2f MiB\n",
	       steps, loss, train_acc, test_loss, test_acc,
	       (double)tensor_mem_stats(TENSOR_CPU).peak_bytes / (1 << 20));

	int ok = !check || (test_acc >= MIN_ACCURACY && loss < loss0);
	if (!ok)
		fprintf(stderr,
			"nn_tutorial: check failed: held-out accuracy %.3f (need >= %.2f), "
			"train loss %.4f -> %.4f\n",
			test_acc, MIN_ACCURACY, loss0, loss);
	if (save) {
		char json[256];
		config_to_json(&cfg, json, sizeof json);
		if (nn_checkpoint_save(save, &ps, &opt, json, steps) < 0)
			die("saving the checkpoint");
		int agree = reload_agree(save, test, ntest, pred);
		printf("%d/%d held-out predictions agree with the trained model\n", agree, ntest);
		ok = ok && agree == ntest;
	}
	free(pred), free(train), free(test), free(all);
	nn_adamw_free(&opt);
	langid_free(&model);
	nn_params_free(&ps);
	tensor_mem_trim();
	return ok ? 0 : 1;
}
