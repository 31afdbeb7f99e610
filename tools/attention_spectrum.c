/* attention_spectrum: the Linformer paper's Figure 1 on a cformer checkpoint. Runs the
 * checkpoint's encoder over reviews that fill its n tokens, takes each layer's and head's
 * attention matrix P (n x n for standard attention, n x k where keys are projected), and
 * averages the normalised cumulative singular values of P over the reviews (LAPACK).
 *
 *   attention_spectrum --checkpoint runs/mlm/best.safetensors --data DIR/aclImdb
 *
 * Writes OUT/spectrum.csv (index, then the mean curve of every layer and head),
 * OUT/at_rank.csv (each layer's and head's value at --rank, the paper's heatmap) and
 * OUT/spectrum.gp (gnuplot draws both as spectrum.png and at_rank.png), and prints the
 * heatmap as a table. A curve that reaches 0.9 at index 128 of 512 says that 128 directions
 * carry 90% of P's singular value mass: the low rank the Linformer's projection relies on. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/data.h"
#include "common/flags.h"
#include "common/train.h"
#include "models.h"
#include "spectrum.h"
#include "text.h"

static const char PROG[] = "attention_spectrum";

static struct {
	const char *checkpoint, *data, *split, *vocab, *out;
	int64_t sequences, rank, threads, seed;
} opt = { .split = "test", .out = "attention_spectrum", .sequences = 100, .rank = 128, .seed = 1 };

static struct flag flags[] = {
	FLAG_DEF_STRING("checkpoint", &opt.checkpoint, "CKPT",
			"a linformer_mlm or classifier checkpoint (required)"),
	FLAG_DEF_STRING("data", &opt.data, "DIR",
			"aclImdb directory or archive (default: the bundled subset)"),
	FLAG_DEF_CHOICE("split", &opt.split, "train|test|unsup", "the reviews to read"),
	FLAG_DEF_STRING("vocab", &opt.vocab, "FILE",
			"WordPiece vocabulary (default: the bundled BERT uncased vocab.txt)"),
	FLAG_DEF_INT("sequences", &opt.sequences, 1, 1 << 30, "N",
		     "reviews averaged over, each at least n tokens long"),
	FLAG_DEF_INT("rank", &opt.rank, 1, 1 << 20, "K",
		     "the index of the heatmap (as the paper's 128)"),
	FLAG_DEF_INT("seed", &opt.seed, 0, 9007199254740992.0, "S", "seed of the reviews' order"),
	FLAG_DEF_INT("threads", &opt.threads, 0, 4096, "T", "CPU threads (0: the cores not busy)"),
	FLAG_DEF_STRING("out", &opt.out, "DIR", "output directory"),
};
enum { NFLAGS = sizeof flags / sizeof flags[0] };

static const char SYNOPSIS[] =
    "usage: attention_spectrum --checkpoint CKPT [--flag VALUE]...\n"
    "The normalised cumulative singular values of every layer's and head's attention matrix P\n"
    "(the Linformer paper's Figure 1), averaged over reviews that fill the model's n tokens.";

static void die(const char *what, const char *why)
{
	fprintf(stderr, "%s: %s: %s\n", PROG, what, why ? why : tensor_last_error());
	exit(1);
}

/* What the observer gathers: per layer and head the sum of the curves, and each layer's
 * number of keys (n, or k where they are projected). A layer's P may come in several calls,
 * blocks of query rows in order (projected layers at n > 1,024 run so without gradients):
 * its rows are gathered until all n are there. */
struct gather {
	int64_t layers, heads, n;
	int64_t call, rows; /* the layer being gathered, and its rows so far */
	int64_t *keys;      /* [layers] */
	double *sum;   /* [layers][heads][n], the first keys[l] entries used */
	double *a, *c; /* one head's P as doubles, and its curve */
	float *p;      /* the layer's P as the model computed it, [heads][n][keys] */
};

/* The curves of layer g->call's complete P, added to the sums. */
static int add_layer(struct gather *g)
{
	int64_t l = g->call, s = g->keys[l], per = g->n * s;
	for (int64_t h = 0; h < g->heads; h++) {
		for (int64_t i = 0; i < per; i++)
			g->a[i] = g->p[h * per + i];
		char err[256];
		if (spectrum_cumulative(g->a, g->n, s, g->c, err, sizeof err) < 0)
			return tensor_error(TENSOR_ERR_ARG, "%s: layer %lld head %lld: %s", PROG,
					    (long long)l + 1, (long long)h + 1, err);
		double *sum = g->sum + (l * g->heads + h) * g->n;
		for (int64_t i = 0; i < s; i++)
			sum[i] += g->c[i];
	}
	return TENSOR_OK;
}

static int observe(void *ctx, const struct tensor *p)
{
	struct gather *g = ctx;
	int64_t l = g->call;
	char shape[128];
	if (l >= g->layers || p->ndim != 4 || p->shape[0] != 1 || p->shape[1] != g->heads ||
	    p->shape[2] < 1 || p->shape[2] > g->n - g->rows || p->shape[3] > g->n ||
	    (g->rows > 0 && p->shape[3] != g->keys[l]))
		return tensor_error(
		    TENSOR_ERR_SHAPE,
		    "%s: attention call of layer %lld: expected %lld layers of "
		    "[1,%lld,%lld,S] probabilities (or blocks of their rows), got %s",
		    PROG, (long long)l + 1, (long long)g->layers, (long long)g->heads,
		    (long long)g->n, tensor_shape_str(p, shape, sizeof shape));
	int64_t s = p->shape[3], nr = p->shape[2];
	g->keys[l] = s;
	for (int64_t h = 0; h < g->heads; h++) { /* head h's rows go after those gathered */
		struct tensor *ph = tensor_narrow(p, 1, h, 1);
		if (!ph || tensor_to_host(ph, g->p + (h * g->n + g->rows) * s,
					  sizeof *g->p * (size_t)(nr * s)) < 0)
			return tensor_last_status();
	}
	if ((g->rows += nr) < g->n)
		return TENSOR_OK;
	g->rows = 0;
	int rc = add_layer(g);
	g->call++;
	return rc;
}

/* The encoder of an MLM or classifier checkpoint, for inference (train_copy_encoder
 * validates the whole file through the model it was saved from). */
static void load(const char *path, struct model_config *cfg, struct nn_params *ps,
		 struct model_encoder *enc)
{
	if (model_config_from_checkpoint(path, cfg) < 0 || model_config_resolve(cfg) < 0 ||
	    nn_params_init(ps, TENSOR_F32, TENSOR_CPU, cfg->seed) < 0 ||
	    model_encoder_init(enc, ps, cfg) < 0 || train_copy_encoder(path, enc, ps, NULL) < 0)
		die("loading the checkpoint", NULL);
	nn_params_train(ps, false);
}

/* A seeded permutation of 0..n-1 (splitmix64 draws, Fisher-Yates). */
static int64_t *permutation(int64_t n, uint64_t seed)
{
	int64_t *ix = malloc(sizeof *ix * (size_t)(n > 0 ? n : 1));
	if (!ix)
		die("the reviews' order", "out of memory");
	for (int64_t i = 0; i < n; i++)
		ix[i] = i;
	for (int64_t i = n - 1; i > 0; i--) {
		uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		int64_t j = (int64_t)((z ^ (z >> 31)) % (uint64_t)(i + 1)), t = ix[i];
		ix[i] = ix[j];
		ix[j] = t;
	}
	return ix;
}

/* Forward the first opt.sequences reviews (in a seeded order) that fill n tokens; returns
 * how many were used. */
static int64_t run(const struct model_encoder *enc, const struct text_tokenizer *tok,
		   const struct text_dataset *ds, struct gather *g)
{
	int64_t n = g->n, used = 0, len;
	int32_t *ids = malloc(sizeof *ids * (size_t)n), *mask = malloc(sizeof *mask * (size_t)n);
	int64_t *order = permutation(ds->n, (uint64_t)opt.seed);
	bool tty = isatty(fileno(stderr)) == 1;
	if (!ids || !mask)
		die("the reviews", "out of memory");
	nn_set_attention_observer(observe, g);
	ag_no_grad_begin();
	for (int64_t i = 0; i < ds->n && used < opt.sequences; i++) {
		const char *text = ds->items[order[i]].text;
		if (text_encode(tok, text, strlen(text), n, ids, mask, &len) < 0)
			die("tokenizing", NULL);
		if (len < n) /* only reviews that fill the model's n */
			continue;
		tensor_scope_begin();
		g->call = g->rows = 0;
		struct tensor *ti =
		    tensor_from_data(TENSOR_I32, TENSOR_CPU, 2, (int64_t[]){ 1, n }, ids);
		if (!ti || !model_encoder_forward(enc, ti, NULL))
			die("the forward", NULL);
		if (g->call != g->layers || g->rows != 0)
			die("the forward", "the encoder's attention calls did not make one P "
					   "of n rows a layer");
		tensor_scope_end();
		if (++used % 10 == 0 || used == opt.sequences) /* a line each where not a terminal */
			fprintf(stderr, "%s%lld of %lld reviews%s", tty ? "\r" : "", (long long)used,
				(long long)opt.sequences, tty ? "" : "\n");
	}
	ag_no_grad_end();
	nn_set_attention_observer(NULL, NULL);
	if (tty && used > 0)
		fprintf(stderr, "\n");
	free(order);
	free(ids);
	free(mask);
	return used;
}

static FILE *open_out(const char *name, char *path, size_t len)
{
	snprintf(path, len, "%s/%s", opt.out, name);
	FILE *f = fopen(path, "w");
	if (!f)
		die(path, strerror(errno));
	return f;
}

static void close_out(FILE *f, const char *path)
{
	if (ferror(f) | fclose(f))
		die(path, "write error");
}

/* spectrum.csv, at_rank.csv, spectrum.gp; the heatmap printed. */
static void write_results(const struct gather *g, int64_t used)
{
	char path[4096];
	int64_t L = g->layers, H = g->heads, kmax = 0;
	for (int64_t l = 0; l < L; l++)
		kmax = g->keys[l] > kmax ? g->keys[l] : kmax;
	FILE *f = open_out("spectrum.csv", path, sizeof path);
	fprintf(f, "index");
	for (int64_t l = 0; l < L; l++)
		for (int64_t h = 0; h < H; h++)
			fprintf(f, ",layer%lld_head%lld", (long long)l + 1, (long long)h + 1);
	fprintf(f, "\n");
	for (int64_t i = 0; i < kmax; i++) {
		fprintf(f, "%lld", (long long)i + 1);
		for (int64_t l = 0; l < L; l++)
			for (int64_t h = 0; h < H; h++) {
				if (i < g->keys[l])
					fprintf(f, ",%.6f",
						g->sum[(l * H + h) * g->n + i] / (double)used);
				else
					fprintf(f, ",");
			}
		fprintf(f, "\n");
	}
	close_out(f, path);

	f = open_out("at_rank.csv", path, sizeof path);
	fprintf(f, "layer,head,keys,value\n");
	printf("normalised cumulative singular value at index %lld, mean of %lld reviews:\n\n"
	       "| layer (keys) |",
	       (long long)opt.rank, (long long)used);
	for (int64_t h = 0; h < H; h++)
		printf(" head %lld |", (long long)h + 1);
	printf("\n|---|");
	for (int64_t h = 0; h < H; h++)
		printf("---:|");
	for (int64_t l = 0; l < L; l++) {
		int64_t at = (opt.rank < g->keys[l] ? opt.rank : g->keys[l]) - 1;
		printf("\n| %lld (%lld) |", (long long)l + 1, (long long)g->keys[l]);
		for (int64_t h = 0; h < H; h++) {
			double v = g->sum[(l * H + h) * g->n + at] / (double)used;
			printf(" %.4f |", v);
			fprintf(f, "%lld,%lld,%lld,%.6f\n", (long long)l + 1, (long long)h + 1,
				(long long)g->keys[l], v);
		}
	}
	printf("\n");
	close_out(f, path);

	char dir[4096];
	if (!realpath(opt.out, dir))
		die(opt.out, strerror(errno));
	f = open_out("spectrum.gp", path, sizeof path);
	fprintf(f,
		"# gnuplot %s: spectrum.png (each head's curve) and at_rank.png (the heatmap)\n"
		"set terminal pngcairo size 900,600\nset datafile separator ','\n"
		"cd '%s'\nset output 'spectrum.png'\nset key outside right\n"
		"set title 'Normalised cumulative singular values of P (mean of %lld reviews)'\n"
		"set xlabel 'singular value index'\nset ylabel 'normalised cumulative value'\n"
		"set yrange [0:1]\nset xrange [1:%lld]\n"
		"h = %lld  # heads: a colour per layer, its heads' curves alike\n"
		"plot for [c=2:%lld] 'spectrum.csv' using 1:c with lines lc (c - 2) / h + 1 "
		"title ((c - 2) %% h == 0 ? sprintf('layer %%d', (c - 2) / h + 1) : '')\n"
		"set output 'at_rank.png'\nunset key\nset yrange [*:*]\n"
		"set title 'Value at index %lld by layer and head'\n"
		"set xlabel 'head'\nset ylabel 'layer'\nset cbrange [0:1]\n"
		"set xrange [0.5:%lld.5]\nset yrange [0.5:%lld.5]\nset xtics 1\nset ytics 1\n"
		"plot 'at_rank.csv' skip 1 using 2:1:4 with image\n",
		path, dir, (long long)used, (long long)kmax, (long long)H, (long long)(L * H + 1),
		(long long)opt.rank, (long long)H, (long long)L);
	close_out(f, path);
	printf("\nplots: gnuplot %s\n", path);
}

int main(int argc, char **argv)
{
	flags_parse(flags, NFLAGS, argc, argv, PROG, SYNOPSIS, NULL);
	if (!opt.checkpoint)
		flags_fail(PROG, "checkpoint", "a checkpoint is required");
	tensor_set_num_threads((int)opt.threads);
	char subset[4096], vocab[4096];
	if (!opt.data)
		opt.data = example_data_path("aclImdb_subset", subset, sizeof subset);
	if (!opt.vocab)
		opt.vocab = example_data_path("bert-base-uncased-vocab.txt", vocab, sizeof vocab);

	struct model_config cfg;
	struct nn_params ps;
	struct model_encoder enc;
	load(opt.checkpoint, &cfg, &ps, &enc);
	struct text_tokenizer tok;
	if (text_wordpiece_load(&tok, opt.vocab) < 0)
		die("the vocabulary", NULL);
	if (tok.vocab_size != cfg.vocab_size) {
		char why[256];
		snprintf(why, sizeof why, "%d tokens, the checkpoint's model has %lld",
			 (int)tok.vocab_size, (long long)cfg.vocab_size);
		die(opt.vocab, why);
	}
	struct text_dataset ds;
	if (text_imdb_load(opt.data, opt.split, &ds) < 0)
		die("the reviews", NULL);
	if (mkdir(opt.out, 0777) < 0 && errno != EEXIST)
		die(opt.out, strerror(errno));

	int64_t n = cfg.max_len, L = cfg.layers, H = cfg.heads;
	struct gather g = { .layers = L, .heads = H, .n = n };
	g.keys = calloc((size_t)L, sizeof *g.keys);
	g.sum = calloc((size_t)(L * H * n), sizeof *g.sum);
	g.a = malloc(sizeof *g.a * (size_t)(n * n));
	g.c = malloc(sizeof *g.c * (size_t)n);
	g.p = malloc(sizeof *g.p * (size_t)(H * n * n));
	if (!g.keys || !g.sum || !g.a || !g.c || !g.p)
		die("the spectra", "out of memory");
	char ckpt_model[MODEL_MAX_LAYERS + 1];
	fprintf(stderr, "%s: layers %s, n %lld, %lld heads; %lld reviews of %s %s\n", PROG,
		model_config_pattern(&cfg, ckpt_model), (long long)n, (long long)H, (long long)ds.n,
		opt.data, opt.split);
	int64_t used = run(&enc, &tok, &ds, &g);
	if (used == 0) {
		char why[256];
		snprintf(why, sizeof why, "no review of %lld tokens or more (the model's n)",
			 (long long)n);
		die(opt.split, why);
	}
	if (used < opt.sequences)
		fprintf(stderr, "%s: only %lld reviews fill %lld tokens\n", PROG, (long long)used,
			(long long)n);
	write_results(&g, used);
	free(g.keys);
	free(g.sum);
	free(g.a);
	free(g.c);
	free(g.p);
	text_dataset_free(&ds);
	text_tokenizer_free(&tok);
	model_encoder_free(&enc);
	nn_params_free(&ps);
	return 0;
}
