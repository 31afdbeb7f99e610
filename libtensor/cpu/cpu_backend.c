/* The CPU backend: its table, host memory, threads and BLIS kernel choice. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <blis.h>
#include <cpuid.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu_iter.h"
#include "cpu_kernels.h"

static atomic_int num_threads;

/* The per-CPU lines of /proc/stat ("cpuN user nice system idle iowait irq softirq steal"):
 * into busy[N] and total[N] (jiffies), for N < max. Returns the highest N + 1 seen. */
static int parse_stat(const char *stat, unsigned long long *busy, unsigned long long *total,
		      int max)
{
	int seen = 0;
	for (const char *l = stat; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		unsigned long long v[8] = { 0 };
		int cpu;
		if (strncmp(l, "cpu", 3) || !(l[3] >= '0' && l[3] <= '9') ||
		    sscanf(l + 3, "%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &v[0], &v[1],
			   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) < 5 ||
		    cpu < 0 || cpu >= max)
			continue;
		total[cpu] = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
		busy[cpu] = total[cpu] - v[3] - v[4]; /* all but idle and iowait */
		seen = cpu + 1 > seen ? cpu + 1 : seen;
	}
	return seen;
}

int cpu_busy_cpus(const char *before, const char *after, const bool *mine, int nmine)
{
	enum { MAX = 4096 };
	unsigned long long *v = calloc(4 * MAX, sizeof *v); /* busy, total: before, after */
	if (!v)
		return 0;
	int n = parse_stat(before, v, v + MAX, MAX), m = parse_stat(after, v + 2 * MAX, v + 3 * MAX, MAX);
	int busy = 0;
	for (int i = 0; i < (n < m ? n : m); i++) {
		unsigned long long db = v[2 * MAX + i] - v[i], dt = v[3 * MAX + i] - v[MAX + i];
		busy += v[3 * MAX + i] > v[MAX + i] && 2 * db >= dt && (!mine || (i < nmine && mine[i]));
	}
	free(v);
	return busy;
}

/* /proc/stat into buf (NUL-terminated); false if it cannot be read. */
static bool read_stat(char *buf, size_t len)
{
	FILE *f = fopen("/proc/stat", "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, len - 1, f);
	fclose(f);
	buf[n] = 0;
	return n > 0;
}

/* CFORMER_NUM_THREADS if set to a positive number; else the CPUs this process may run on
 * less those of them that other processes keep busy (at least half of a 50 ms look at
 * /proc/stat),
 * at least 1: threads that must wait for each other lose many times over on a core that
 * something else holds (docs/log/benchmarks.md, "A busy machine"). */
static int default_threads(void)
{
	const char *env = getenv("CFORMER_NUM_THREADS");
	long n = env ? strtol(env, NULL, 10) : 0;
	if (n > 0)
		return (int)n;
	cpu_set_t set;
	bool masked = sched_getaffinity(0, sizeof set, &set) == 0, mine[CPU_SETSIZE];
	n = masked ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
	for (int i = 0; i < CPU_SETSIZE; i++)
		mine[i] = masked && CPU_ISSET(i, &set);
	enum { LEN = 1 << 16 }; /* the per-CPU lines come first; the rest may be cut */
	char *before = malloc(LEN), *after = malloc(LEN);
	if (before && after && read_stat(before, LEN)) {
		nanosleep(&(struct timespec){ .tv_nsec = 50 * 1000 * 1000 }, NULL);
		if (read_stat(after, LEN))
			n -= cpu_busy_cpus(before, after, masked ? mine : NULL, CPU_SETSIZE);
	}
	free(before);
	free(after);
	return n > 0 ? (int)n : 1;
}

/* AMD family 19h: Zen 3 and Zen 4. */
static bool amd_family_19h(void)
{
	unsigned a, b, c, d;
	if (!__builtin_cpu_is("amd") || !__get_cpuid(1, &a, &b, &c, &d))
		return false;
	unsigned family = (a >> 8) & 0xf;
	if (family == 0xf)
		family += (a >> 20) & 0xff;
	return family == 0x19;
}

/* Debian's BLIS 0.9 does not recognise every AVX-512 CPU (it falls back to
 * slower kernels, even `generic`), so pick `skx` when the CPU has the
 * AVX-512 subsets those kernels use, except on AMD family 19h: BLIS picks
 * `zen3` there, and on Zen 4, whose AVX-512 runs on 256-bit units, training
 * runs about 6% faster with those kernels than with `skx`. BLIS reads
 * BLIS_ARCH_TYPE once, at its initialisation, as the number of an arch_t
 * value; a value the user set is left alone. */
static void select_blis_arch(void)
{
	if (getenv("BLIS_ARCH_TYPE"))
		return;
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
	    !amd_family_19h()) {
		char id[16];
		snprintf(id, sizeof id, "%d", (int)BLIS_ARCH_SKX);
		setenv("BLIS_ARCH_TYPE", id, 0);
	}
}

static void init_once(void)
{
	select_blis_arch();
	bli_init();
	int n = default_threads();
	atomic_store(&num_threads, n);
	bli_thread_set_num_threads(n);
}

void cpu_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, init_once);
}

void tensor_set_num_threads(int n)
{
	cpu_init();
	if (n <= 0)
		n = default_threads();
	atomic_store(&num_threads, n);
	bli_thread_set_num_threads(n);
	omp_set_num_threads(n);
}

int cpu_num_threads(void)
{
	return atomic_load(&num_threads);
}

int tensor_get_num_threads(void)
{
	cpu_init();
	return atomic_load(&num_threads);
}

const char *tensor_blas_arch(void)
{
	cpu_init();
	return bli_arch_string(bli_arch_query_id());
}

void cpu_loop_init(struct cpu_loop *l, int nops, const struct tensor *const *ts)
{
	const struct tensor *t0 = ts[0];
	l->nops = nops;
	for (int k = 0; k < nops; k++) {
		l->base[k] = cpu_ptr(ts[k]);
		l->esize[k] = tensor_dtype_size(ts[k]->dtype);
	}
	/* Drop size-1 dims, then merge dim d into d+1 when every operand steps
	 * through them as one. */
	int nd = 0;
	for (int d = 0; d < t0->ndim; d++) {
		if (t0->shape[d] == 1)
			continue;
		if (nd > 0) {
			bool merge = true;
			for (int k = 0; k < nops; k++)
				merge = merge &&
					l->strides[k][nd - 1] == ts[k]->strides[d] * t0->shape[d];
			if (merge) {
				l->shape[nd - 1] *= t0->shape[d];
				for (int k = 0; k < nops; k++)
					l->strides[k][nd - 1] = ts[k]->strides[d];
				continue;
			}
		}
		l->shape[nd] = t0->shape[d];
		for (int k = 0; k < nops; k++)
			l->strides[k][nd] = ts[k]->strides[d];
		nd++;
	}
	if (nd == 0) {
		l->shape[0] = tensor_numel(t0); /* 1, or 0 for an empty tensor */
		for (int k = 0; k < nops; k++)
			l->strides[k][0] = 1;
		nd = 1;
	}
	l->ndim = nd;
	l->n = l->shape[nd - 1];
	l->rows = 1;
	for (int d = 0; d < nd - 1; d++)
		l->rows *= l->shape[d];
	if (l->n == 0)
		l->rows = 0;
}

/* ---- memory --------------------------------------------------------------- */

static void *cpu_alloc(size_t nbytes)
{
	return aligned_alloc(64, (nbytes + 63) & ~(size_t)63);
}

static void cpu_free(void *p, size_t n)
{
	(void)n;
	free(p);
}

static int cpu_memset_zero(void *p, size_t n)
{
	memset(p, 0, n);
	return TENSOR_OK;
}

static int cpu_memcpy(void *dst, const void *src, size_t n)
{
	if (n)
		memcpy(dst, src, n);
	return TENSOR_OK;
}

static int cpu_synchronize(void)
{
	return TENSOR_OK;
}

const struct tensor_backend tensor_cpu_backend = {
	.name = "cpu",
	.alloc = cpu_alloc,
	.free = cpu_free,
	.memset_zero = cpu_memset_zero,
	.copy_from_host = cpu_memcpy,
	.copy_to_host = cpu_memcpy,
	.synchronize = cpu_synchronize,
	.copy = cpu_copy,
	.fill = cpu_fill,
	.arange = cpu_arange,
	.random = cpu_random,
	.dropout = cpu_dropout,
	.unary = cpu_unary,
	.binary = cpu_binary,
	.where = cpu_where,
	.reduce = cpu_reduce,
	.gemm = cpu_gemm,
	.softmax = cpu_softmax,
	.softmax_backward = cpu_softmax_backward,
	.attention = cpu_attention,
	.attention_backward = cpu_attention_backward,
	.layer_norm = cpu_layer_norm,
	.rms_norm = cpu_rms_norm,
	.norm_backward = cpu_norm_backward,
	.index_select = cpu_index_select,
	.index_add = cpu_index_add,
	.gather = cpu_gather,
	.scatter_add = cpu_scatter_add,
	.adamw = cpu_adamw,
	.sgd = cpu_sgd,
};
