/* train_throughput: training speed of the IMDB classifier configuration (vocab 30522, dim 256,
 * 4 heads, 4 layers, ff 1024, batch 16) for the Transformer, the Linformer and the
 * Conv-Linformer at several sequence lengths: steady-state tokens/s of a full step (forward,
 * backward, AdamW), the allocator's peak, the model FLOPs per token, and the achieved GFLOP/s
 * as a fraction of this machine's measured sgemm rate (MFU). `train_throughput --help` lists
 * the flags; docs/benchmarks.md gives the FLOPs formula. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "common/flags.h"
#include "common/model_flags.h"
#include "models.h"

static const char PROG[] = "train_throughput";
static enum tensor_device dev;
static enum tensor_dtype precision; /* of the products: f32 or bf16 */
static const char CSV_HEADER[] = "impl,model,n,k,batch,tokens_per_s,step_seconds,peak_bytes,"
				 "flops_per_token,gflops,sgemm_gflops,mfu,rss_peak_bytes,forward_s,"
				 "backward_s,optimizer_s,ranks,allreduce_s";

struct options {
	const char *n_list, *models, *csv, *backward, *device, *precision, *attention;
	int64_t batch, warmup, reps, threads, vocab, sgemm_size, seed;
	int64_t gemm_profile;
	double max_seconds, lr, mem_fraction;
	struct model_config cfg; /* the model flags' fields (MODEL_FIELDS) */
};

/* The model flags this benchmark takes, the examples' (models/model_config_fields.h). */
static const char *const MODEL_FIELDS[] = { "dim",	  "heads",   "layers",	   "ff_hidden",
					    "activation", "swiglu",  "dropout",	   "attn_dropout",
					    "k_first",	  "sharing", "conv_dense", "shared_kv_head",
					    NULL };

static struct options opt = {
	.n_list = "128,512,2048",
	.models = "transformer,linformer,conv-linformer",
	.backward = "release",
	.device = "cpu",
	.precision = "f32",
	.attention = "fused",
	.batch = 16,
	.warmup = 2,
	.reps = 5,
	.threads = 0,
	.vocab = 30522,
	.sgemm_size = 1024,
	.seed = 1,
	.max_seconds = 120,
	.lr = 1e-4,
	.mem_fraction = 0.8,
};

/* clang-format off */
#define INT(nm, var, lo, hi, mv, h) { nm, FLAG_INT, &opt.var, lo, hi, 0, NULL, mv, h, NULL, false }
#define DBL(nm, var, lo, hi, op, mv, h) \
	{ nm, FLAG_DOUBLE, &opt.var, lo, hi, op, NULL, mv, h, NULL, false }
#define STR(nm, var, mv, h) { nm, FLAG_STRING, &opt.var, 0, 0, 0, NULL, mv, h, NULL, false }
#define CHO(nm, var, ch, h) { nm, FLAG_CHOICE, &opt.var, 0, 0, 0, ch, NULL, h, NULL, false }
/* clang-format on */
/* this benchmark's flags, then (added by add_model_flags) the model flags */
static struct flag flags[48] = {
	STR("n", n_list, "N1,N2,..", "sequence lengths"),
	STR("models", models, "M1,M2,..", "transformer, linformer and/or conv-linformer"),
	CHO("device", device, "cpu|cuda", "where the model trains"),
	CHO("precision", precision, "f32|bf16|tf32",
	    "bf16: mixed precision (products in bf16 with f32 accumulation, the rest f32); tf32: "
	    "f32 products on the GPU's tensor cores (--device cuda)"),
	CHO("attention", attention, "fused|composed",
	    "the attention core: the fused kernel where the device has one, or products and a "
	    "softmax (nn_attention_set_fused)"),
	CHO("backward", backward, "release|keep",
	    "ag_backward_release (activations freed during backward) or ag_backward"),
	INT("batch", batch, 1, 1 << 16, "B", "sequences per step"),
	INT("vocab", vocab, 2, 1 << 24, "V", "vocabulary size (token embedding rows)"),
	DBL("lr", lr, 0, 1, FLAG_MIN_OPEN, "RATE", "AdamW learning rate (constant)"),
	INT("warmup", warmup, 0, 1000, "W", "untimed steps first"),
	INT("reps", reps, 1, 100000, "R",
	    "timed steps (fewer past --max-seconds); their mean is the step time"),
	DBL("max-seconds", max_seconds, 0, 1e9, FLAG_MIN_OPEN, "S",
	    "time guard: a step longer than S skips the larger n of that model"),
	DBL("mem-fraction", mem_fraction, 0, 1, FLAG_MIN_OPEN, "F",
	    "run only what is estimated to fit in F x the machine's available memory"),
	INT("sgemm-size", sgemm_size, 64, 8192, "S", "size of the square sgemm for the MFU"),
	INT("threads", threads, 0, 4096, "T",
	    "BLIS and OpenMP threads (0: the library's default, the CPUs no other process keeps "
	    "busy)"),
	INT("seed", seed, 0, 9007199254740992.0, "S", "seed of weights, ids and labels"),
	INT("gemm-profile", gemm_profile, 0, 1000, "R",
	    "also list the R costliest product shapes of the timed steps (tensor_gemm_profile: "
	    "time, share, GFLOP/s; the device synchronized around each product)"),
	STR("csv", csv, "FILE",
	    "also write the rows as CSV (impl,model,n,k,batch,...; impl \"cformer\" or "
	    "\"cformer bf16\")"),
};
static int nflags;

static const char SYNOPSIS[] =
    "usage: train_throughput [--flag VALUE]...\n"
    "Training throughput of the IMDB classifier configuration: tokens/s of full steps\n"
    "(forward, cross-entropy, backward, AdamW) after warm-up, peak memory, model FLOPs per\n"
    "token and MFU against this machine's sgemm rate (measured first, same threads).";
static const char EPILOG[] =
    "FLOPs count the matmuls (2 m n k each) of the forward pass, attention scores and\n"
    "values included, embedding lookups 0; a training step is 3x the forward. Tokens are\n"
    "batch x n per step (no padding: random ids). Under mpirun -np N each rank trains on its\n"
    "share of the batch and the gradients are averaged (the all-reduce phase); rank 0\n"
    "prints, tokens/s count the whole batch. Quick check:\n"
    "  train_throughput --n 128 --reps 2 --warmup 1\n";

/* Whether the attention keeps its probabilities for backward: composed (--attention
 * composed, or a device without the fused kernel) rather than fused. */
static bool scores_kept(void)
{
	if (strcmp(opt.attention, "fused"))
		return true;
	struct tensor *q = tensor_zeros(TENSOR_F32, dev, 1, (int64_t[]){ 1 });
	bool fused = tensor_attention_supported(q);
	tensor_free(q);
	return !fused;
}

/* Rough bytes of one training step at batch b: parameters with gradients and AdamW moments
 * (4 copies), and per layer the saved activations: about 20 [n, dim] and 4 [n, ff] f32
 * tensors and, where the attention is composed, per head 3 score-sized ones ([n, n] or
 * [n, k]), live until backward (calibrated on measured peaks at n 128). */
static double estimate_bytes(const struct model_config *c, double params, int64_t b)
{
	double n = (double)c->max_len, d = (double)c->dim, f = (double)c->ff_hidden;
	double per_layer = 0, kept = scores_kept() ? 3 : 0;
	for (int64_t i = 0; i < c->layers; i++) {
		double s = c->attention[i] == NN_ATTN_STANDARD ? n : (double)c->k[i];
		per_layer += n * (20 * d + 4 * f) + kept * (double)c->heads * n * s;
	}
	return 4 * (4 * params + (double)b * per_layer);
}

/* ---- one configuration ------------------------------------------------------------------------ */

enum { FWD, BWD, COMM, OPT, NPHASES }; /* forward with the loss, backward, all-reduce, AdamW */

struct result {
	double step_s, peak, longest, flops_per_token;
	double phase_s[NPHASES]; /* mean seconds of each phase of a timed step */
	double rss; /* resident-set growth from before the model to the peak, -1 if unknown */
	double params, reserved; /* reserved: the allocator's peak of blocks held */
	int64_t k;    /* of the projected layers, 0 for the Transformer */
	bool skipped; /* did not run; why says why */
	char why[128];
	/* --gemm-profile: nprof of the timed steps' prof_rows product shapes, the
	 * costliest first, over that many steps */
	struct tensor_gemm_stat *prof;
	int nprof, prof_rows;
	int64_t steps;
};

/* The running GEMM profile's rows into r (the costliest --gemm-profile of them), then
 * the profile stopped. */
static void profile_keep(struct result *r)
{
	int total = 0;
	r->prof = calloc((size_t)opt.gemm_profile, sizeof *r->prof);
	if (!r->prof || tensor_gemm_profile_read(r->prof, (int)opt.gemm_profile, &total) < 0)
		bench_die(PROG, "reading the GEMM profile");
	r->prof_rows = total;
	r->nprof = total < opt.gemm_profile ? total : (int)opt.gemm_profile;
	tensor_gemm_profile_stop();
}

/* The GEMM profile of a configuration: its costliest product shapes a step. */
static void print_profile(const char *model, int64_t n, const struct result *r)
{
	if (r->skipped || !r->prof)
		return;
	double gemm_s = 0, gflop = 0;
	for (int i = 0; i < r->nprof; i++)
		gemm_s += r->prof[i].seconds, gflop += r->prof[i].gflop;
	double steps = (double)r->steps;
	printf("\n%s, n %lld: the %d costliest of %d product shapes, %.3f s a step in them "
	       "(%.0f%% of the %.3f s step), %.1f GFLOP/s\n\n",
	       model, (long long)n, r->nprof, r->prof_rows, gemm_s / steps,
	       100 * gemm_s / steps / r->step_s, r->step_s, gflop / gemm_s);
	printf("| batch x [m,k]·[k,n] | A B C | C += | dtypes | calls a step | ms a step | share "
	       "of the step | GFLOP/s |\n|---|---|---|---|---:|---:|---:|---:|\n");
	for (int i = 0; i < r->nprof; i++) {
		const struct tensor_gemm_stat *p = &r->prof[i];
		printf(
		    "| %lld x [%lld,%lld]·[%lld,%lld] | %c %c %c | %s | %s %s %s | %.1f | %.2f | "
		    "%.1f%% | %.1f |\n",
		    (long long)p->batch, (long long)p->m, (long long)p->k, (long long)p->k,
		    (long long)p->n, p->layout[0], p->layout[1], p->layout[2],
		    p->accumulate ? "yes" : "no", tensor_dtype_name(p->a_dtype),
		    tensor_dtype_name(p->b_dtype), tensor_dtype_name(p->c_dtype),
		    (double)p->calls / steps, 1e3 * p->seconds / steps,
		    100 * p->seconds / steps / r->step_s, p->gflop / p->seconds);
	}
}

static void build_config(struct model_config *c, const char *model, int64_t n)
{
	char preset[BENCH_WORD_MAX + 16]; /* "conv-linformer:6": the pattern for that depth */
	snprintf(preset, sizeof preset, "%s:%lld", model, (long long)opt.cfg.layers);
	if (model_config_preset(c, preset, opt.vocab, n) < 0)
		bench_die(PROG, "model preset");
	model_flags_copy(c, &opt.cfg, MODEL_FIELDS);
	c->num_classes = 2;
	c->seed = (uint64_t)opt.seed;
	c->k_schedule = MODEL_K_CONSTANT;
	int64_t k = c->k_first ? c->k_first : n / 2 < 128 ? n / 2 : 128; /* --k 0: derived */
	c->k_first = k < n ? k : n;
	if (!strcmp(model, "transformer"))
		c->sharing = NN_SHARE_HEADWISE; /* unused; keeps resolve quiet */
	if (model_config_resolve(c) < 0)
		flags_fail(PROG, c->sharing == NN_SHARE_HEADWISE ? "models" : "sharing",
			   "%s at n %lld: %s", model, (long long)n, tensor_last_error());
}

/* One training step on (ids, labels), this rank's rows of the batch: forward, loss, backward,
 * the gradients' all-reduce (data-parallel), AdamW, in a scope; adds the seconds of each phase
 * to phase_s. */
static void train_step(struct model_classifier *m, struct nn_params *ps, struct nn_adamw *adamw,
		       const struct tensor *ids, const struct tensor *labels, double *phase_s)
{
	double t0 = bench_clock();
	tensor_scope_begin();
	if (nn_params_zero_grad(ps) < 0 || nn_params_autocast_begin(ps, precision) < 0)
		bench_die(PROG, "step setup");
	struct tensor *logits = model_classifier_forward(m, ids, NULL);
	struct tensor *loss = nn_cross_entropy(logits, labels, -1, 0.0);
	ag_autocast_end();
	/* a device runs behind the host: the phases end when its queue is done */
	if (!loss || tensor_synchronize(dev) < 0)
		bench_die(PROG, "forward");
	double t1 = bench_clock();
	bool release = !strcmp(opt.backward, "release");
	if ((release ? ag_backward_release(loss, NULL) : ag_backward(loss, NULL)) < 0 ||
	    tensor_synchronize(dev) < 0)
		bench_die(PROG, "training step");
	double t2 = bench_clock();
	if (nn_dist_average_grads(ps, ids->shape[0], opt.batch) < 0)
		bench_die(PROG, "all-reduce");
	double t3 = bench_clock();
	if (nn_adamw_step(adamw) < 0)
		bench_die(PROG, "AdamW step");
	tensor_scope_end();
	if (tensor_synchronize(dev) < 0)
		bench_die(PROG, "AdamW step");
	double t4 = bench_clock();
	phase_s[FWD] += t1 - t0;
	phase_s[BWD] += t2 - t1;
	phase_s[COMM] += t3 - t2;
	phase_s[OPT] += t4 - t3;
}

/* This rank's rows of the batch t (a heap tensor, freed), as a heap tensor. */
static struct tensor *share(struct tensor *t)
{
	int64_t lo, hi;
	nn_dist_share(opt.batch, &lo, &hi);
	if (!t || hi - lo == opt.batch)
		return t;
	tensor_heap_begin();
	struct tensor *rows = tensor_narrow(t, 0, lo, hi - lo);
	tensor_heap_end();
	tensor_free(t);
	return rows;
}

/* Build the classifier, optimizer and inputs of (model, n) and time its training steps:
 * --warmup untimed, then --reps timed (fewer once they add up to --max-seconds). Not run,
 * with the reason, when the memory estimate exceeds the machine's share. Exits 1 on a library
 * error. */
static struct result run_config(const char *model, int64_t n)
{
	struct result r = { 0 };
	struct model_config cfg;
	build_config(&cfg, model, n);
	r.flops_per_token = bench_forward_flops_per_token(&cfg, true);
	for (int64_t i = 0; i < cfg.layers; i++)
		r.k = cfg.k[i] > r.k ? cfg.k[i] : r.k;
	double params = (double)model_param_count(&cfg, true, false);
	r.params = params;
	double est = estimate_bytes(&cfg, params, opt.batch);
	tensor_mem_trim();
	double avail = bench_device_mem_available(dev);
	if (avail >= 0 && est > opt.mem_fraction * avail) {
		snprintf(r.why, sizeof r.why,
			 "not run: estimated %.1f MiB, the machine has %.1f MiB to spare",
			 est / BENCH_MIB, opt.mem_fraction * avail / BENCH_MIB);
		r.skipped = true;
		return r;
	}
	double rss0 = dev == TENSOR_CPU ? bench_rss_reset() : -1;
	struct nn_params ps;
	struct model_classifier m;
	struct nn_adamw adamw;
	if (nn_params_init(&ps, TENSOR_F32, dev, cfg.seed) < 0 ||
	    model_classifier_init(&m, &ps, &cfg) < 0)
		bench_die(PROG, "building the model");
	if (nn_params_pack(&ps) < 0 ||
	    nn_adamw_init(&adamw, &ps, opt.lr, 0.9, 0.999, 1e-8, 0.01) < 0)
		bench_die(PROG, "optimizer");
	struct tensor *ids = bench_to_device(
	    share(bench_random_ids(opt.batch, n, opt.vocab, (uint64_t)opt.seed)), dev);
	struct tensor *labels =
	    bench_to_device(share(bench_random_labels(opt.batch, 2, (uint64_t)opt.seed + 1)), dev);
	if (!ids || !labels)
		bench_die(PROG, "inputs");
	for (int64_t i = 0; i < opt.warmup; i++) {
		double t0 = bench_clock();
		double unused[NPHASES] = { 0 }; /* warm-up phases are not reported */
		train_step(&m, &ps, &adamw, ids, labels, unused);
		double t = bench_clock() - t0;
		r.longest = t > r.longest ? t : r.longest;
	}
	tensor_mem_reset_peak(dev); /* parameters, gradients, moments stay counted */
	if (opt.gemm_profile)
		tensor_gemm_profile_start();
	double total = 0;
	int64_t done = 0;
	while (done < opt.reps && (done == 0 || total < opt.max_seconds)) {
		double t0 = bench_clock();
		train_step(&m, &ps, &adamw, ids, labels, r.phase_s);
		double t = bench_clock() - t0;
		total += t, done++;
		r.longest = t > r.longest ? t : r.longest;
	}
	r.steps = done;
	if (opt.gemm_profile)
		profile_keep(&r);
	r.step_s = total / (double)done;
	for (int p = 0; p < NPHASES; p++)
		r.phase_s[p] /= (double)done;
	struct tensor_mem_stats ms = tensor_mem_stats(dev);
	r.peak = (double)ms.peak_bytes;
	r.reserved = (double)ms.peak_reserved_bytes;
	double hwm = bench_rss_peak();
	r.rss = rss0 >= 0 && hwm >= 0 ? hwm - rss0 : -1;
	tensor_free(ids);
	tensor_free(labels);
	nn_adamw_free(&adamw);
	model_classifier_free(&m);
	nn_params_free(&ps);
	tensor_mem_trim();
	return r;
}

/* The row of a configuration left out because a shorter n of its model was too slow. */
static struct result skipped_time(const char *model, int64_t n)
{
	struct model_config cfg;
	build_config(&cfg, model, n);
	struct result r = { .flops_per_token = bench_forward_flops_per_token(&cfg, true) };
	for (int64_t i = 0; i < cfg.layers; i++)
		r.k = cfg.k[i] > r.k ? cfg.k[i] : r.k;
	snprintf(r.why, sizeof r.why, "skipped (time): a shorter n took over %g s a step",
		 opt.max_seconds);
	r.skipped = true;
	return r;
}

/* ---- output ------------------------------------------------------------------------------------ */

static void print_result(const char *model, int64_t n, const struct result *r, double sgemm,
			 FILE *csv)
{
	char k[24] = "-";
	if (r->k)
		snprintf(k, sizeof k, "%lld", (long long)r->k);
	if (r->skipped) {
		printf("| %s | %lld | %s | %lld | - | - | - | - | - | %.2f | - | - (%s) |\n", model,
		       (long long)n, k, (long long)opt.batch, r->flops_per_token * 3 * 1e-6,
		       r->why);
		return;
	}
	double tokens = (double)(opt.batch * n) / r->step_s;
	sgemm *= nn_dist_size(); /* the ranks' compute together */
	double train_fpt = 3 * r->flops_per_token, gflops = train_fpt * tokens * 1e-9;
	char rss[32] = "-";
	if (r->rss >= 0)
		snprintf(rss, sizeof rss, "%.1f", r->rss / BENCH_MIB);
	char phases[96], comm[32] = "";
	if (nn_dist_size() > 1)
		snprintf(comm, sizeof comm, " / %.3f", r->phase_s[COMM]);
	snprintf(phases, sizeof phases, "%.2f / %.2f%s / %.2f", r->phase_s[FWD], r->phase_s[BWD],
		 comm, r->phase_s[OPT]);
	printf("| %s | %lld | %s | %lld | %.0f | %.4f | %s | %.1f | %s | %.2f | %.1f | %.1f%% |\n",
	       model, (long long)n, k, (long long)opt.batch, tokens, r->step_s, phases,
	       r->peak / BENCH_MIB, rss, train_fpt * 1e-6, gflops, 100 * gflops / sgemm);
	fprintf(stderr,
		"note: %s n %lld k %s: %.0f parameters; %.1f MiB of blocks reserved at the peak\n",
		model, (long long)n, k, r->params, r->reserved / BENCH_MIB);
	if (csv)
		fprintf(
		    csv,
		    "cformer%s,%s,%lld,%s,%lld,%.6g,%.6g,%.0f,%.6g,%.6g,%.6g,%.6g,%.0f,%.6g,%.6g,"
		    "%.6g,%d,%.6g\n",
		    precision == TENSOR_BF16 ? " bf16" : "", model, (long long)n, r->k ? k : "",
		    (long long)opt.batch, tokens, r->step_s, r->peak, train_fpt, gflops, sgemm,
		    gflops / sgemm, r->rss, r->phase_s[FWD], r->phase_s[BWD], r->phase_s[OPT],
		    nn_dist_size(), r->phase_s[COMM]);
}

/* The model flags (the examples', from models/model_config_fields.h) after this
 * benchmark's own: the config's defaults at the IMDB classifier's sizes, no dropout (the
 * examples' recipe trains with 0.1), k 128 (at most n). */
static void add_model_flags(void)
{
	if (model_config_preset(&opt.cfg, "transformer", opt.vocab, 512) < 0)
		bench_die(PROG, "model defaults");
	opt.cfg.dropout = opt.cfg.attn_dropout = 0;
	opt.cfg.k_first = 128;
	int own = 0, max = (int)(sizeof flags / sizeof flags[0]);
	while (flags[own].name)
		own++;
	nflags = own + model_flags_select(flags + own, max - own, &opt.cfg, MODEL_FIELDS,
					  "model (the examples' flags; --k at most n, 0: min(128, "
					  "n/2); --sharing: the Linformer layers')",
					  PROG);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (nn_dist_init(&argc, &argv) < 0)
		bench_die(PROG, "joining the ranks");
	if (nn_dist_rank() != 0 && !freopen("/dev/null", "w", stdout)) /* rank 0 prints */
		bench_die(PROG, "silencing stdout");
	add_model_flags();
	flags_parse(flags, nflags, argc, argv, PROG, SYNOPSIS, EPILOG);
	if (opt.batch < nn_dist_size())
		flags_fail(PROG, "batch", "%lld rows cannot be shared by %d ranks",
			   (long long)opt.batch, nn_dist_size());
	int64_t ns[BENCH_MAX_LIST];
	char models[3][BENCH_WORD_MAX];
	int nn = bench_parse_ints(PROG, "n", opt.n_list, ns, BENCH_MAX_LIST, 2, 1 << 24);
	int nm = bench_parse_words(PROG, "models", opt.models, models, 3,
				   "transformer|linformer|conv-linformer");
	if (opt.cfg.dim % opt.cfg.heads != 0)
		flags_fail(PROG, "heads", "%lld heads do not divide --dim %lld",
			   (long long)opt.cfg.heads, (long long)opt.cfg.dim);
	FILE *csv = nn_dist_rank() == 0 ? bench_csv_open(PROG, opt.csv, CSV_HEADER) : NULL;
	dev = (enum tensor_device)bench_device_parse(PROG, opt.device);
	precision = strcmp(opt.precision, "bf16") ? TENSOR_F32 : TENSOR_BF16;
	if (!strcmp(opt.precision, "tf32") && (dev != TENSOR_CUDA || tensor_cuda_set_tf32(true) < 0))
		flags_fail(PROG, "precision", "tf32 runs on --device cuda only%s%s",
			   dev == TENSOR_CUDA ? ": " : "", dev == TENSOR_CUDA ? tensor_last_error() : "");
	nn_attention_set_fused(!strcmp(opt.attention, "fused"));
	tensor_set_num_threads((int)opt.threads);
	double sgemm = bench_sgemm_gflops(dev, opt.sgemm_size, 5);
	if (sgemm < 0)
		bench_die(PROG, "sgemm");
	char about[256];

	printf("# Training throughput (cformer, %s)\n\n", tensor_device_name(dev));
	printf("- device: %s\n", tensor_device_describe(dev, about, sizeof about));
	printf(
	    "- classifier: vocab %lld, dim %lld, %lld heads, %lld layers, ff %lld%s, batch %lld, "
	    "dropout %g, attention dropout %g, AdamW; Linformer k %lld (min(k, n)), sharing "
	    "%s\n",
	    (long long)opt.vocab, (long long)opt.cfg.dim, (long long)opt.cfg.heads,
	    (long long)opt.cfg.layers, (long long)opt.cfg.ff_hidden,
	    opt.cfg.swiglu ? " (SwiGLU)" : "", (long long)opt.batch, opt.cfg.dropout,
	    opt.cfg.attn_dropout, (long long)opt.cfg.k_first,
	    nn_proj_sharing_name(opt.cfg.sharing));
	printf("- attention %s; precision %s%s%s\n", opt.attention, opt.precision,
	       precision == TENSOR_BF16 ? ": products in bf16 (f32 accumulation), kernel " : "",
	       precision == TENSOR_BF16 ? (dev == TENSOR_CUDA ? "cuBLAS" : tensor_bf16_gemm_kernel())
					: "");
	printf("- %d rank%s (mpirun), threads %lld each (OpenMP wait policy %s), BLIS kernels %s, "
	       "load average at start %.2f; sgemm %lld^3 (tensor_matmul, one rank): %.1f GFLOP/s\n",
	       nn_dist_size(), nn_dist_size() > 1 ? "s" : "",
	       (long long)(opt.threads ? opt.threads : tensor_get_num_threads()),
	       bench_wait_policy(), tensor_blas_arch(), bench_load_average(),
	       (long long)opt.sgemm_size, sgemm);
	printf(
	    "- %lld warm-up steps, then the mean of %lld timed steps; peak = allocator peak of "
	    "the timed steps, parameters, gradients and AdamW moments included; RSS = growth of "
	    "the "
	    "resident-set high-water mark from before the model was built (as bench/pytorch)\n\n",
	    (long long)opt.warmup, (long long)opt.reps);
	printf("| model | n | k | batch | tokens/s | step s | fwd / bwd%s / AdamW s | peak MiB "
	       "| RSS MiB | MFLOP/token (train) | GFLOP/s | MFU |\n",
	       nn_dist_size() > 1 ? " / all-reduce" : "");
	printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");

	struct result rs[3][BENCH_MAX_LIST];
	for (int mi = 0; mi < nm; mi++) {
		bool slow = false;
		for (int ni = 0; ni < nn; ni++) {
			struct result *r = &rs[mi][ni];
			*r = slow ? skipped_time(models[mi], ns[ni])
				  : run_config(models[mi], ns[ni]);
			slow = slow || r->longest > opt.max_seconds;
			print_result(models[mi], ns[ni], r, sgemm, csv);
		}
	}
	bench_csv_close(PROG, csv);
	printf("\nMFU = achieved GFLOP/s (3 x forward matmul FLOPs per token x tokens/s) / the "
	       "sgemm rate above (times the ranks).\n");
	for (int mi = 0; mi < nm; mi++)
		for (int ni = 0; ni < nn; ni++) {
			print_profile(models[mi], ns[ni], &rs[mi][ni]);
			free(rs[mi][ni].prof);
		}
	tensor_mem_trim();
	nn_dist_finalize();
	return 0;
}
