/* linformer_table: the Linformer paper's inference-efficiency table (Wang et al. 2020, Table 3)
 * on this machine. A full encoder forward pass without gradients, Transformer against
 * Linformer (one projection shared by every layer, keys and values), for sequence lengths n
 * and projected lengths k, at batch 1 and at the largest batch that fits a memory budget:
 * seconds per sequence, the allocator's peak bytes, and the Transformer/Linformer ratios.
 * Configurations that would not fit are reported, never run. `linformer_table --help` lists
 * the flags; docs/benchmarks.md explains the method. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "common/flags.h"
#include "common/model_flags.h"
#include "models.h"

static const char PROG[] = "linformer_table";
static enum tensor_device dev;
static const char CSV_HEADER[] =
	"impl,model,n,k,batch,seconds_per_seq,peak_bytes,status,gflop_per_seq,gflops,sgemm_gflops";

struct options {
	const char *n_list, *k_list, *models, *batches, *csv, *device, *precision, *attention;
	int64_t threads, reps, vocab, max_batch, seed, sgemm_size;
	double budget_gib, max_seconds, mem_fraction;
	bool batched_heads;
	struct model_config cfg; /* the model flags' fields (MODEL_FIELDS) */
};

/* The model flags this table takes, the examples' (models/model_config_fields.h); the
 * Linformer's projection (k, layerwise sharing) is the table's. */
static const char *const MODEL_FIELDS[] = { "dim",	  "heads",  "layers",	      "ff_hidden",
					    "activation", "swiglu", "shared_kv_head", NULL };

static struct options opt = {
	.n_list = "512,1024,2048,4096,8192,16384,32768,65536",
	.k_list = "128,256,512,1024,2048",
	.models = "transformer,linformer",
	.batches = "1,max",
	.device = "cpu",
	.precision = "f32",
	.attention = "fused",
	.threads = 0,
	.reps = 3,
	.vocab = 30522,
	.seed = 1,
	.sgemm_size = 1024,
	.budget_gib = 16,
	.max_seconds = 120,
	.mem_fraction = 0.8,
};

/* clang-format off */
#define INT(nm, var, lo, hi, mv, h) { nm, FLAG_INT, &opt.var, lo, hi, 0, NULL, mv, h, NULL, false }
#define DBL(nm, var, lo, hi, op, mv, h) \
	{ nm, FLAG_DOUBLE, &opt.var, lo, hi, op, NULL, mv, h, NULL, false }
#define STR(nm, var, mv, h) { nm, FLAG_STRING, &opt.var, 0, 0, 0, NULL, mv, h, NULL, false }
#define BOOL(nm, var, h) { nm, FLAG_BOOL, &opt.var, 0, 0, 0, NULL, NULL, h, NULL, false }
/* clang-format on */
/* this table's flags, then (added by add_model_flags) the model flags */
static struct flag flags[48] = {
	STR("n", n_list, "N1,N2,..", "sequence lengths"),
	STR("k", k_list, "K1,K2,..",
	    "Linformer projected lengths (a k >= n is left out, as in the paper)"),
	STR("models", models, "M1,M2", "transformer and/or linformer"),
	{ "device", FLAG_CHOICE, &opt.device, 0, 0, 0, "cpu|cuda", NULL, "where the encoder runs",
	  NULL, false },
	{ "precision", FLAG_CHOICE, &opt.precision, 0, 0, 0, "f32|bf16", NULL,
	  "bf16: products in bf16 with f32 accumulation (weights rounded once), the rest f32", NULL,
	  false },
	{ "attention", FLAG_CHOICE, &opt.attention, 0, 0, 0, "fused|composed", NULL,
	  "the attention core: the fused kernel where the device has one, or products and a "
	  "softmax (nn_attention_set_fused)",
	  NULL, false },
	STR("batches", batches, "1,max", "batch 1 and/or the largest batch that fits --budget-gib"),
	DBL("budget-gib", budget_gib, 0, 1 << 20, FLAG_MIN_OPEN, "GIB",
	    "memory budget for the peak of one forward pass (the paper's V100: 16)"),
	INT("max-batch", max_batch, 0, 1 << 24, "B", "cap on the budget's batch (0: none)"),
	DBL("max-seconds", max_seconds, 0, 1e9, FLAG_MIN_OPEN, "S",
	    "time guard: a forward pass longer than S skips the larger n of that model and k, "
	    "a batch estimated longer is not run, and repetitions stop after S"),
	DBL("mem-fraction", mem_fraction, 0, 1, FLAG_MIN_OPEN, "F",
	    "run only what is estimated to fit in F x the machine's available memory"),
	INT("vocab", vocab, 2, 1 << 24, "V", "vocabulary size (token embedding rows)"),
	BOOL("batched-heads", batched_heads,
	     "compute all heads at once (default: one head at a time, the lower peak)"),
	INT("reps", reps, 1, 1000, "R", "timed forward passes after one warm-up; the best counts"),
	INT("threads", threads, 0, 4096, "T",
	    "BLIS and OpenMP threads (0: the library's default, the CPUs no other process keeps "
	    "busy)"),
	INT("seed", seed, 0, 9007199254740992.0, "S", "seed of the weights and the input ids"),
	INT("sgemm-size", sgemm_size, 64, 8192, "S",
	    "size of the square sgemm whose rate the GFLOP/s are set against"),
	STR("csv", csv, "FILE", "also write the rows as CSV (impl,model,n,k,batch,...)"),
};
static int nflags;

static const char SYNOPSIS[] =
    "usage: linformer_table [--flag VALUE]...\n"
    "The Linformer paper's inference table on this machine: seconds per sequence and peak\n"
    "memory of a full encoder forward pass (no gradients), Transformer vs Linformer with\n"
    "layerwise sharing, for each n and k, at batch 1 and at the largest batch that fits\n"
    "--budget-gib, with the achieved matmul GFLOP/s against this machine's sgemm rate.\n"
    "Prints markdown tables (rows, then the Transformer/Linformer ratios).";
static const char EPILOG[] =
    "The largest batch: the peaks at batch 1 and 2 (then 4, 8, .. while the slope grows by\n"
    "over 5%) give peak(b) = base + b * per_seq, and\n"
    "b_max = floor((budget - base) / per_seq), run if it fits the budget, the machine's free\n"
    "memory and the time guard. A configuration whose batch-1 estimate (dominant terms: the\n"
    "n x n scores of a head for the Transformer) exceeds the budget is reported over_budget\n"
    "without running. GFLOP/s count the forward matmuls (2 m n k each; docs/benchmarks.md\n"
    "has the formula) of a sequence over its time. Quick check:\n"
    "  linformer_table --n 512,1024 --k 128 --budget-gib 1 --reps 1\n"
    "The paper's pretrained models are RoBERTa-base sized: --dim 768 --heads 12 --layers 12\n"
    "--ff 3072.\n";

static double sgemm; /* GFLOP/s of tensor_matmul, measured first */

enum status { ST_OK, ST_OVER_BUDGET, ST_SKIPPED_TIME, ST_NOT_RUN };
static const char *const STATUS_NAME[] = { "ok", "over_budget", "skipped_time", "not_run" };

enum model_kind { TRANSFORMER, LINFORMER };
static const char *const MODEL_NAME[] = { "transformer", "linformer" };

/* One line of the table: a model at (n, k) and batch 1 or the budget's batch. */
struct row {
	enum model_kind model;
	int64_t n, k, batch; /* k 0 for the Transformer; batch 0 when not determined */
	bool max;	     /* the budget's batch */
	double sec_per_seq, peak, per_seq; /* per_seq: extrapolated bytes per sequence (max) */
	double flops;			   /* forward matmul FLOPs of one sequence */
	enum status status;
	char note[128];
};

struct table {
	struct row *rows;
	int n, cap;
};

static struct row *add_row(struct table *t, enum model_kind m, int64_t n, int64_t k, bool max)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 64;
		t->rows = realloc(t->rows, sizeof *t->rows * (size_t)t->cap);
		if (!t->rows) {
			fprintf(stderr, "%s: out of memory\n", PROG);
			exit(1);
		}
	}
	struct row *r = &t->rows[t->n++];
	*r = (struct row){ .model = m, .n = n, .k = k, .max = max, .batch = max ? 0 : 1 };
	return r;
}

/* ---- model and estimates ------------------------------------------------------------------- */

static void build_config(struct model_config *c, enum model_kind m, int64_t n, int64_t k)
{
	char preset[32];
	snprintf(preset, sizeof preset, "%s:%lld", MODEL_NAME[m], (long long)opt.cfg.layers);
	if (model_config_preset(c, preset, opt.vocab, n) < 0)
		bench_die(PROG, "model preset");
	model_flags_copy(c, &opt.cfg, MODEL_FIELDS);
	c->dropout = c->attn_dropout = 0;
	c->seed = (uint64_t)opt.seed;
	if (m == LINFORMER) {
		c->sharing = NN_SHARE_LAYERWISE;
		c->k_schedule = MODEL_K_CONSTANT;
		c->k_first = k;
	}
	if (model_config_resolve(c) < 0)
		flags_fail(PROG, m == LINFORMER ? "k" : "dim", "n %lld, k %lld: %s", (long long)n,
			   (long long)k, tensor_last_error());
}

/* Bytes of the dominant live tensors of one no-grad forward pass at batch b: the
 * parameters, and one layer's working set (each layer runs in a scope of its own): about
 * 18 [n, dim] and 3 [n, ff] f32 tensors (each linear layer makes two: the product and the
 * bias sum), plus, per head computed at once, the scores and the probabilities ([n, n], or
 * [n, k] and the projected keys and values); standard attention one head at a time holds
 * at most a block of NN_BY_HEAD_SCORES of them. */
static double estimate_bytes(const struct model_config *c, double params, int64_t b)
{
	double n = (double)c->max_len, d = (double)c->dim, f = (double)c->ff_hidden;
	double live_heads = opt.batched_heads ? (double)c->heads : 1;
	bool standard = c->attention[0] == NN_ATTN_STANDARD;
	double attn =
	    (double)b * (standard ? 2 * n * n * live_heads
				  : 2 * n * (double)c->k[0] * live_heads + 2 * (double)c->k[0] * d);
	if (standard && !opt.batched_heads)
		attn = fmin(attn, 2 * (double)NN_BY_HEAD_SCORES);
	return 4 * (params + (double)b * n * (18 * d + 3 * f) + attn);
}

/* Memory we may use: the given fraction of what the machine has available, plus what this
 * process already holds of the estimate (the parameters). */
static double machine_limit(void)
{
	tensor_mem_trim();
	double avail = bench_device_mem_available(dev);
	if (avail < 0)
		return INFINITY;
	return opt.mem_fraction * avail + (double)tensor_mem_stats(dev).live_bytes;
}

/* ---- measuring ------------------------------------------------------------------------------- */

struct measure {
	double best, longest; /* seconds of one forward pass */
	double peak, reserved;
};

/* Forward passes of enc on random ids [b, n] without gradients: a warm-up, then up to reps
 * timed ones while the total stays under max_seconds. The peak covers every pass, the
 * parameters included. Exits 1 on a library error. */
static struct measure run_forward(const struct model_encoder *enc, int64_t b, int reps)
{
	struct tensor *ids = bench_to_device(
	    bench_random_ids(b, enc->cfg.max_len, opt.vocab, (uint64_t)opt.seed), dev);
	if (!ids)
		bench_die(PROG, "input ids");
	struct measure m = { .best = INFINITY };
	ag_no_grad_begin();
	tensor_mem_reset_peak(dev);
	double start = bench_clock();
	for (int r = 0; r <= reps; r++) { /* r == 0 warms up */
		tensor_scope_begin();
		double t0 = bench_clock();
		struct tensor *h = model_encoder_forward(enc, ids, NULL);
		if (h && tensor_synchronize(dev) < 0)
			h = NULL;
		double t = bench_clock() - t0;
		if (!h)
			bench_die(PROG, "encoder forward");
		tensor_scope_end();
		m.longest = t > m.longest ? t : m.longest;
		if (r > 0 || reps == 0)
			m.best = t < m.best ? t : m.best;
		if (bench_clock() - start > opt.max_seconds && r > 0)
			break;
	}
	ag_no_grad_end();
	struct tensor_mem_stats s = tensor_mem_stats(dev);
	m.peak = (double)s.peak_bytes;
	m.reserved = (double)s.reserved_bytes;
	tensor_free(ids);
	return m;
}

static void set_status(struct row *r, enum status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_status(struct row *r, enum status s, const char *fmt, ...)
{
	va_list ap;
	r->status = s;
	va_start(ap, fmt);
	vsnprintf(r->note, sizeof r->note, fmt, ap);
	va_end(ap);
}

/* The budget's batch from the batch-1 measurement: peaks at batch 1, 2 (and 4, 8, ..
 * while the slope grows) extrapolated linearly, then run if it fits the budget, the
 * machine and the time guard. Returns the longest forward pass it ran, in seconds. */
static double run_max(const struct model_encoder *enc, const struct measure *m1, struct row *r)
{
	double budget = opt.budget_gib * BENCH_GIB;
	if (m1->peak > budget) {
		set_status(r, ST_OVER_BUDGET, "batch 1 peaks at %.1f MiB", m1->peak / BENCH_MIB);
		return 0;
	}
	struct measure m2 = run_forward(enc, 2, 0);
	double per_seq = m2.peak - m1->peak, limit = machine_limit();
	if (per_seq <= 0) {
		set_status(r, ST_NOT_RUN, "peak did not grow from batch 1 to 2");
		return m2.longest;
	}
	/* Doubling the batch while the slope still grows by over 5%: at small batches a
	 * working set that does not grow with the batch (a block of rows) can set the peak
	 * before the per-sequence part does. Only while twice the extrapolation fits the
	 * machine and a pass stays under a quarter of the time guard. */
	int64_t bm = 2;
	for (int64_t bn = 4; bn <= 64; bn *= 2) {
		double at = m2.peak + (double)(bn - bm) * per_seq;
		if (2 * at > limit || m2.best / (double)bm * (double)bn > opt.max_seconds / 4)
			break;
		struct measure mn = run_forward(enc, bn, 0);
		double slope = (mn.peak - m2.peak) / (double)(bn - bm);
		m2 = mn;
		bm = bn;
		bool settled = slope <= per_seq * 1.05;
		per_seq = slope > per_seq ? slope : per_seq;
		if (settled)
			break;
	}
	double base = m2.peak - (double)bm * per_seq;
	r->per_seq = per_seq;
	int64_t b = (int64_t)floor((budget - base) / per_seq);
	bool capped = opt.max_batch > 0 && b > opt.max_batch;
	if (capped)
		b = opt.max_batch;
	r->batch = b;
	double need = base + (double)b * per_seq;
	double est_s = m2.best / (double)bm * (double)b;
	if (need > limit) {
		set_status(r, ST_NOT_RUN, "needs %.1f MiB, the machine has %.1f MiB to spare",
			   need / BENCH_MIB, limit / BENCH_MIB);
		return m2.longest;
	}
	if (est_s > opt.max_seconds) {
		set_status(r, ST_SKIPPED_TIME, "estimated %.3g s per forward pass", est_s);
		return m2.longest;
	}
	struct measure mb = run_forward(enc, b, (int)opt.reps);
	r->sec_per_seq = mb.best / (double)b;
	r->peak = mb.peak;
	set_status(r, ST_OK, "%sbase %.1f MiB + %.1f MiB/seq; %.1f MiB reserved",
		   capped ? "capped by --max-batch; " : "", base / BENCH_MIB, per_seq / BENCH_MIB,
		   mb.reserved / BENCH_MIB);
	return mb.longest > m2.longest ? mb.longest : m2.longest;
}

/* Fill the rows (batch 1 at r1, the budget's batch at rmax; either may be NULL) of one
 * configuration; longest[0] and [1] receive the longest forward pass at batch 1 and at the
 * budget's batch, in seconds (0 if none ran). */
static void run_config(enum model_kind model, int64_t n, int64_t k, struct row *r1,
		       struct row *rmax, double longest[2])
{
	longest[0] = longest[1] = 0;
	struct model_config cfg;
	build_config(&cfg, model, n, k);
	double params = (double)model_param_count(&cfg, false, false);
	double flops = bench_forward_flops_per_token(&cfg, false) * (double)n;
	double est = estimate_bytes(&cfg, params, 1), budget = opt.budget_gib * BENCH_GIB;
	double limit = machine_limit();
	struct row *rows[2] = { r1, rmax };
	for (int i = 0; i < 2; i++) {
		if (rows[i])
			rows[i]->flops = flops;
		if (rows[i] && est > budget)
			set_status(rows[i], ST_OVER_BUDGET, "batch 1 estimated at %.1f MiB",
				   est / BENCH_MIB);
		else if (rows[i] && est > limit)
			set_status(rows[i], ST_NOT_RUN,
				   "batch 1 estimated at %.1f MiB, the machine has %.1f MiB to "
				   "spare",
				   est / BENCH_MIB, limit / BENCH_MIB);
	}
	if (est > budget || est > limit)
		return;

	struct nn_params ps;
	struct model_encoder enc;
	if (nn_params_init(&ps, TENSOR_F32, dev, cfg.seed) < 0 ||
	    model_encoder_init(&enc, &ps, &cfg) < 0)
		bench_die(PROG, "building the model");
	model_encoder_set_sequential_heads(&enc, !opt.batched_heads);
	nn_params_train(&ps, false);
	/* unpacked: the weights are rounded as the products pack them, no copy (packing would
	 * also make a gradient buffer, which inference does not need) */
	bool bf16 = !strcmp(opt.precision, "bf16");
	if (bf16 && nn_params_autocast_begin(&ps, TENSOR_BF16) < 0)
		bench_die(PROG, "--precision bf16");
	struct measure m1 = run_forward(&enc, 1, r1 ? (int)opt.reps : 0);
	if (r1) {
		r1->sec_per_seq = m1.best;
		r1->peak = m1.peak;
		set_status(r1, ST_OK, "estimated %.1f MiB; %.1f MiB reserved", est / BENCH_MIB,
			   m1.reserved / BENCH_MIB);
	}
	longest[0] = m1.longest;
	if (rmax && m1.longest > opt.max_seconds)
		set_status(rmax, ST_SKIPPED_TIME, "batch 1 took %.3g s", m1.longest);
	else if (rmax)
		longest[1] = run_max(&enc, &m1, rmax);
	if (bf16)
		ag_autocast_end();
	model_encoder_free(&enc);
	nn_params_free(&ps);
	tensor_mem_trim();
}

/* ---- output ---------------------------------------------------------------------------------- */

/* The markdown line of r and, if csv is not NULL, its CSV line. */
static void print_row(const struct row *r, FILE *csv)
{
	char k[24] = "", b[24] = "", sec[32] = "", peak[32] = "", ms[32] = "-", mib[32] = "-";
	char rate[32] = "", gf[48] = "-";
	if (r->k)
		snprintf(k, sizeof k, "%lld", (long long)r->k);
	if (r->batch)
		snprintf(b, sizeof b, "%lld", (long long)r->batch);
	if (r->status == ST_OK) {
		snprintf(sec, sizeof sec, "%.6g", r->sec_per_seq);
		snprintf(peak, sizeof peak, "%.0f", r->peak);
		snprintf(ms, sizeof ms, "%.2f", r->sec_per_seq * 1e3);
		snprintf(mib, sizeof mib, "%.1f", r->peak / BENCH_MIB);
		double g = r->flops / r->sec_per_seq * 1e-9;
		snprintf(rate, sizeof rate, "%.4g", g);
		snprintf(gf, sizeof gf, "%.1f (%.0f%%)", g, 100 * g / sgemm);
	}
	printf("| %s | %lld | %s | %s%s | %s | %s | %s | %s | %s |\n", MODEL_NAME[r->model],
	       (long long)r->n, r->k ? k : "-", r->max ? "max " : "", r->batch ? b : "", ms, gf,
	       mib, STATUS_NAME[r->status], r->note);
	fflush(stdout);
	if (csv)
		fprintf(csv, "cformer%s,%s,%lld,%s,%s,%s,%s,%s,%.6g,%s,%.4g\n",
			strcmp(opt.precision, "bf16") ? "" : " bf16", MODEL_NAME[r->model],
			(long long)r->n, k, b, sec, peak, STATUS_NAME[r->status], r->flops * 1e-9,
			rate, sgemm);
}

static const struct row *find_row(const struct table *t, enum model_kind m, int64_t n, int64_t k,
				  bool max)
{
	for (int i = 0; i < t->n; i++) {
		const struct row *r = &t->rows[i];
		if (r->model == m && r->n == n && r->k == k && r->max == max)
			return r;
	}
	return NULL;
}

/* Transformer / Linformer at (n, k): time per sequence and memory per sequence (the peak
 * divided by the batch), into buf; "-" when either is missing. */
static const char *ratio_cell(const struct table *t, int64_t n, int64_t k, bool max, char *buf,
			      size_t len)
{
	const struct row *tr = find_row(t, TRANSFORMER, n, 0, max);
	const struct row *li = find_row(t, LINFORMER, n, k, max);
	if (!tr || !li || tr->status != ST_OK || li->status != ST_OK) {
		snprintf(buf, len, "-");
		return buf;
	}
	double time = tr->sec_per_seq / li->sec_per_seq;
	double mem = (tr->peak / (double)tr->batch) / (li->peak / (double)li->batch);
	snprintf(buf, len, "%.1fx / %.1fx", time, mem);
	return buf;
}

static void print_ratios(const struct table *t, const int64_t *ns, int nn, const int64_t *ks,
			 int nk, bool max)
{
	printf("\n### Transformer / Linformer at batch %s: time / memory per sequence\n\n",
	       max ? "max (the budget's)" : "1");
	printf("| n |");
	for (int j = 0; j < nk; j++)
		printf(" k = %lld |", (long long)ks[j]);
	printf("\n|---:|");
	for (int j = 0; j < nk; j++)
		printf("---:|");
	printf("\n");
	for (int i = 0; i < nn; i++) {
		printf("| %lld |", (long long)ns[i]);
		for (int j = 0; j < nk; j++) {
			char cell[64];
			printf(" %s |", ks[j] < ns[i]
					    ? ratio_cell(t, ns[i], ks[j], max, cell, sizeof cell)
					    : "");
		}
		printf("\n");
	}
}

/* One n of a series (a model and k): its rows, run unless an earlier n was too slow:
 * slow[0] at batch 1 (then nothing runs), slow[1] at the budget's batch (then batch 1 only).
 * Updates slow. */
static void run_n(struct table *t, enum model_kind m, int64_t n, int64_t k, bool want1,
		  bool want_max, bool slow[2], FILE *csv)
{
	int first = t->n;
	if (want1)
		add_row(t, m, n, k, false);
	if (want_max)
		add_row(t, m, n, k, true);
	struct row *r1 = want1 ? &t->rows[first] : NULL;
	struct row *rmax = want_max ? &t->rows[t->n - 1] : NULL;
	for (int i = first; i < t->n; i++)
		if (slow[0] || (slow[1] && t->rows[i].max))
			set_status(&t->rows[i], ST_SKIPPED_TIME,
				   "a shorter n took over %g s a forward pass", opt.max_seconds);
	if (!slow[0]) {
		double longest[2];
		run_config(m, n, k, r1, slow[1] ? NULL : rmax, longest);
		slow[0] = longest[0] > opt.max_seconds;
		slow[1] = slow[1] || longest[1] > opt.max_seconds;
	}
	for (int i = first; i < t->n; i++)
		print_row(&t->rows[i], csv);
}

static void print_header(void)
{
	double avail = bench_device_mem_available(dev);
	char about[256];
	printf("# Linformer inference table (cformer, %s)\n\n", tensor_device_name(dev));
	printf("- device: %s\n", tensor_device_describe(dev, about, sizeof about));
	printf("- encoder forward pass without gradients, %s, attention %s: dim %lld, %lld heads "
	       "(%s), %lld layers, ff %lld%s, vocab %lld, dropout 0; Linformer: learned E = F "
	       "shared by every layer (layerwise)\n",
	       strcmp(opt.precision, "bf16") ? "f32" : "bf16 products (f32 accumulation)",
	       opt.attention, (long long)opt.cfg.dim, (long long)opt.cfg.heads,
	       opt.batched_heads ? "batched" : "one at a time", (long long)opt.cfg.layers,
	       (long long)opt.cfg.ff_hidden, opt.cfg.swiglu ? " (SwiGLU)" : "",
	       (long long)opt.vocab);
	printf("- threads %lld (OpenMP wait policy %s), BLIS kernels %s; load average at start "
	       "%.2f; available memory %.1f GiB; sgemm %lld^3 (tensor_matmul): %.1f GFLOP/s\n",
	       (long long)(opt.threads ? opt.threads : tensor_get_num_threads()), bench_wait_policy(), tensor_blas_arch(),
	       bench_load_average(), avail / BENCH_GIB, (long long)opt.sgemm_size, sgemm);
	printf("- memory budget %.1f GiB; time guard %.0f s; best of %lld timed passes after a "
	       "warm-up; peak = allocator peak, parameters included\n\n",
	       opt.budget_gib, opt.max_seconds, (long long)opt.reps);
	printf("| model | n | k | batch | ms per sequence | GFLOP/s (of sgemm) | peak MiB | status "
	       "| note |\n");
	printf("|---|---:|---:|---:|---:|---:|---:|---|---|\n");
	fflush(stdout);
}

/* The model flags (the examples', from models/model_config_fields.h) after the table's own,
 * with the config's defaults (dim 256, 4 heads, 4 layers, ff 1024). */
static void add_model_flags(void)
{
	if (model_config_preset(&opt.cfg, "transformer", opt.vocab, 512) < 0)
		bench_die(PROG, "model defaults");
	int own = 0, max = (int)(sizeof flags / sizeof flags[0]);
	while (flags[own].name)
		own++;
	nflags = own + model_flags_select(flags + own, max - own, &opt.cfg, MODEL_FIELDS,
					  "model (the examples' flags)", PROG);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	add_model_flags();
	flags_parse(flags, nflags, argc, argv, PROG, SYNOPSIS, EPILOG);
	int64_t ns[BENCH_MAX_LIST], ks[BENCH_MAX_LIST];
	char models[2][BENCH_WORD_MAX], batches[2][BENCH_WORD_MAX];
	int nn = bench_parse_ints(PROG, "n", opt.n_list, ns, BENCH_MAX_LIST, 2, 1 << 24);
	int nk = bench_parse_ints(PROG, "k", opt.k_list, ks, BENCH_MAX_LIST, 1, 1 << 24);
	int nm = bench_parse_words(PROG, "models", opt.models, models, 2, "transformer|linformer");
	int nb = bench_parse_words(PROG, "batches", opt.batches, batches, 2, "1|max");
	if (opt.cfg.dim % opt.cfg.heads != 0)
		flags_fail(PROG, "heads", "%lld heads do not divide --dim %lld",
			   (long long)opt.cfg.heads, (long long)opt.cfg.dim);
	bool want1 = false, want_max = false;
	for (int i = 0; i < nb; i++)
		*(strcmp(batches[i], "1") ? &want_max : &want1) = true;
	FILE *csv = bench_csv_open(PROG, opt.csv, CSV_HEADER);
	dev = (enum tensor_device)bench_device_parse(PROG, opt.device);
	nn_attention_set_fused(!strcmp(opt.attention, "fused"));
	tensor_set_num_threads((int)opt.threads);
	sgemm = bench_sgemm_gflops(dev, opt.sgemm_size, 5);
	if (sgemm < 0)
		bench_die(PROG, "sgemm");
	print_header();

	struct table t = { 0 };
	for (int mi = 0; mi < nm; mi++) {
		enum model_kind m = strcmp(models[mi], "linformer") ? TRANSFORMER : LINFORMER;
		for (int ki = 0; ki < (m == LINFORMER ? nk : 1); ki++) {
			int64_t k = m == LINFORMER ? ks[ki] : 0;
			bool slow[2] = { false, false };
			for (int ni = 0; ni < nn; ni++)
				if (m == TRANSFORMER || k < ns[ni])
					run_n(&t, m, ns[ni], k, want1, want_max, slow, csv);
		}
	}
	bench_csv_close(PROG, csv);
	bool both = nm == 2;
	if (both && want1)
		print_ratios(&t, ns, nn, ks, nk, false);
	if (both && want_max)
		print_ratios(&t, ns, nn, ks, nk, true);
	if (both)
		printf("\nmemory per sequence = peak / batch (parameters included, so at batch 1 "
		       "they weigh in at short n); '-': a side did not run.\n");
	free(t.rows);
	tensor_mem_trim();
	return 0;
}
