/* Helpers shared by the model benchmarks (see bench_common.h). */
#define _POSIX_C_SOURCE 200809L
#include "bench_common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/flags.h"

double bench_clock(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void bench_die(const char *prog, const char *what)
{
	const char *err = tensor_last_error();
	fprintf(stderr, "%s: %s: %s\n", prog, what, err[0] ? err : "unknown error");
	exit(1);
}

int bench_parse_ints(const char *prog, const char *name, const char *text, int64_t *out, int max,
		     int64_t lo, int64_t hi)
{
	int count = 0;
	const char *p = text;
	for (;;) {
		char *end;
		errno = 0;
		long long v = strtoll(p, &end, 10);
		if (end == p || errno || v < lo || v > hi || (*end && *end != ','))
			flags_fail(prog, name,
				   "expected comma-separated integers in [%lld, %lld] such as "
				   "'%lld,%lld', got '%s'",
				   (long long)lo, (long long)hi, (long long)lo, (long long)lo * 2,
				   text);
		if (count == max)
			flags_fail(prog, name, "at most %d values, got '%s'", max, text);
		out[count++] = v;
		if (!*end)
			return count;
		p = end + 1;
	}
}

static bool is_choice(const char *choices, const char *w)
{
	size_t n = strlen(w);
	for (const char *p = choices; *p;) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);
		if (n && len == n && !strncmp(p, w, n))
			return true;
		p += len + (bar ? 1 : 0);
	}
	return false;
}

int bench_parse_words(const char *prog, const char *name, const char *text,
		      char (*out)[BENCH_WORD_MAX], int max, const char *choices)
{
	int count = 0;
	for (const char *p = text;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char word[BENCH_WORD_MAX] = "";
		if (len < sizeof word)
			memcpy(word, p, len);
		if (len >= sizeof word || !is_choice(choices, word))
			flags_fail(prog, name,
				   "expected a comma-separated list of %s, got '%.*s' in '%s'",
				   choices, (int)len, p, text);
		for (int i = 0; i < count; i++)
			if (!strcmp(out[i], word))
				flags_fail(prog, name, "'%s' is listed twice in '%s'", word, text);
		if (count == max)
			flags_fail(prog, name, "at most %d values, got '%s'", max, text);
		memcpy(out[count++], word, sizeof word);
		if (!comma)
			return count;
		p = comma + 1;
	}
}

const char *bench_wait_policy(void)
{
	const char *p = getenv("OMP_WAIT_POLICY");
	return p && *p ? p : "default";
}

double bench_load_average(void)
{
	double load = -1;
	FILE *f = fopen("/proc/loadavg", "r");
	if (f) {
		if (fscanf(f, "%lf", &load) != 1)
			load = -1;
		fclose(f);
	}
	return load;
}

double bench_mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	if (!f)
		return -1;
	char line[256];
	double kib = -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1)
			break;
	fclose(f);
	return kib < 0 ? -1 : kib * 1024;
}

/* A "Field:   123 kB" line of /proc/self/status, in bytes, or -1. */
static double status_bytes(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return -1;
	char line[256];
	size_t len = strlen(field);
	double kib = -1;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, field, len) == 0 && line[len] == ':' &&
		    sscanf(line + len + 1, "%lf kB", &kib) == 1)
			break;
	fclose(f);
	return kib < 0 ? -1 : kib * 1024;
}

double bench_rss_reset(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "w");
	if (!f)
		return -1;
	bool ok = fputs("5", f) >= 0;
	ok = fclose(f) == 0 && ok;
	return ok ? status_bytes("VmRSS") : -1;
}

double bench_rss_peak(void)
{
	return status_bytes("VmHWM");
}

double bench_sgemm_gflops(enum tensor_device dev, int64_t size, int reps)
{
	int64_t shape[2] = { size, size };
	struct tensor *a = tensor_rand_uniform(TENSOR_F32, dev, 2, shape, 11, -1, 1);
	struct tensor *b = tensor_rand_uniform(TENSOR_F32, dev, 2, shape, 12, -1, 1);
	double best = 1e30;
	int rc = a && b ? tensor_synchronize(dev) : tensor_last_status();
	for (int r = 0; r <= reps && rc == TENSOR_OK; r++) { /* r == 0 warms up */
		tensor_scope_begin();
		double t0 = bench_clock();
		struct tensor *c = tensor_matmul(a, b);
		rc = c ? tensor_synchronize(dev) : tensor_last_status();
		double t = bench_clock() - t0;
		tensor_scope_end();
		if (r > 0 && t < best)
			best = t;
	}
	tensor_free(a);
	tensor_free(b);
	if (rc < 0)
		return rc;
	return 2.0 * (double)size * (double)size * (double)size / best * 1e-9;
}

double bench_device_mem_available(enum tensor_device dev)
{
	size_t free_bytes, total;
	if (dev == TENSOR_CPU)
		return bench_mem_available();
	return tensor_device_memory(dev, &free_bytes, &total) == TENSOR_OK ? (double)free_bytes
									  : -1;
}

struct tensor *bench_to_device(struct tensor *t, enum tensor_device dev)
{
	if (!t || t->storage->device == dev)
		return t;
	struct tensor *d = tensor_to_device(t, dev);
	tensor_free(t);
	return d;
}

int bench_device_parse(const char *prog, const char *name)
{
	if (!strcmp(name, "cpu"))
		return TENSOR_CPU;
	size_t free_bytes, total;
	if (tensor_device_memory(TENSOR_CUDA, &free_bytes, &total) < 0)
		flags_fail(prog, "device", "%s", tensor_last_error());
	return TENSOR_CUDA;
}

double bench_forward_flops_per_token(const struct model_config *c, bool head)
{
	double n = (double)c->max_len, d = (double)c->dim, f = (double)c->ff_hidden;
	double h = (double)c->heads, dh = d / h;
	double kv = c->shared_kv_head ? dh : d; /* key/value projection width */
	double total = 0;
	for (int64_t i = 0; i < c->layers; i++) {
		double k = (double)c->k[i];
		total += 2 * d * d * 2 + 2 * d * kv * 2; /* q, out; k, v projections */
		total += c->swiglu ? 3 * 2 * d * f : 2 * 2 * d * f;
		switch (c->attention[i]) {
		case NN_ATTN_STANDARD: total += 2 * n * d * 2; break; /* q k^T, p v */
		case NN_ATTN_LINEAR:
		case NN_ATTN_RANDOM:
			if (c->sharing != NN_SHARE_NONE && k * d * (n + kv) < n * kv * (d + k)) {
				/* nn_linformer's sequence-first order: E x and F x ([k, n] x
				 * [n, d]; once when E is F), then the k and v weights on k
				 * rows, instead of the k and v projections of every token */
				bool one = c->sharing != NN_SHARE_HEADWISE;
				total -= 2 * d * kv * 2;
				total += (one ? 1 : 2) * 2 * k * d + 2 * (k / n) * d * kv * 2;
			} else {
				/* E K and F V over the sequence ([k, n] x [n, dh] per key/value
				 * head): per token 2 k kv each */
				total += 2 * 2 * k * kv;
			}
			total += 2 * 2 * k * d; /* q (EK)^T and p (FV) */
			break;
		case NN_ATTN_CONV: {
			/* kernel = stride = n/k: per window [1, (n/k) c] x [(n/k) c, c], c the
			 * channels (the head dim, or every key/value channel when dense);
			 * nothing when nn_linformer folds a per-head conv into the k and v
			 * weights (their product takes the k, v projections' place) */
			double ch = c->conv_dense ? kv : dh, groups = kv / ch;
			if (c->conv_dense || c->shared_kv_head)
				total += 2 * 2 * ch * ch * groups;
			total += 2 * 2 * k * d;
			break;
		}
		default: total += 2 * 2 * k * d; break; /* pooling: no matmul */
		}
	}
	if (head) { /* the classifier head, once per sequence */
		double hh = (double)c->head_hidden, classes = (double)c->num_classes;
		total += (2 * d * hh + 2 * hh * classes) / n;
	}
	return total;
}

/* A 64-bit mix of (seed, i) (splitmix64's finaliser), for reproducible inputs. */
static uint64_t mix(uint64_t seed, uint64_t i)
{
	uint64_t z = seed * 0x9e3779b97f4a7c15ULL + i + 0x632be59bd9b4e019ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Heap i32 tensor of shape (ndim, shape) with values lo + mix(seed, i) % span. */
static struct tensor *random_i32(int ndim, const int64_t *shape, int64_t lo, int64_t span,
				 uint64_t seed)
{
	int64_t n = 1;
	for (int d = 0; d < ndim; d++)
		n *= shape[d];
	int32_t *v = malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
	if (!v) {
		tensor_error(TENSOR_ERR_NOMEM, "bench: cannot allocate %lld ids", (long long)n);
		return NULL;
	}
	for (int64_t i = 0; i < n; i++)
		v[i] = (int32_t)(lo + (int64_t)(mix(seed, (uint64_t)i) % (uint64_t)span));
	struct tensor *t = tensor_from_data(TENSOR_I32, TENSOR_CPU, ndim, shape, v);
	free(v);
	return t;
}

struct tensor *bench_random_ids(int64_t batch, int64_t n, int64_t vocab, uint64_t seed)
{
	if (vocab < 2) {
		tensor_error(TENSOR_ERR_ARG, "bench_random_ids: vocab %lld < 2", (long long)vocab);
		return NULL;
	}
	return random_i32(2, (int64_t[]){ batch, n }, 1, vocab - 1, seed);
}

struct tensor *bench_random_labels(int64_t batch, int64_t classes, uint64_t seed)
{
	if (classes < 1) {
		tensor_error(TENSOR_ERR_ARG, "bench_random_labels: classes %lld < 1",
			     (long long)classes);
		return NULL;
	}
	return random_i32(1, (int64_t[]){ batch }, 0, classes, seed);
}

FILE *bench_csv_open(const char *prog, const char *path, const char *header)
{
	if (!path)
		return NULL;
	FILE *f = fopen(path, "w");
	if (!f)
		flags_fail(prog, "csv", "cannot write '%s': %s", path, strerror(errno));
	fprintf(f, "%s\n", header);
	return f;
}

void bench_csv_close(const char *prog, FILE *f)
{
	if (!f)
		return;
	bool bad = ferror(f) != 0;
	if (fclose(f) != 0 || bad) {
		fprintf(stderr, "%s: --csv: writing the CSV file failed\n", prog);
		exit(1);
	}
}
