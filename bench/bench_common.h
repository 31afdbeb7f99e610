/* Helpers shared by the model benchmarks (bench/linformer_table, bench/train_throughput):
 * clock, fatal errors, comma-separated flag lists, machine facts (load, free memory, sgemm
 * rate), random inputs and CSV files. Benchmark support code: the die and fail helpers print
 * and exit 1. */
#ifndef CFORMER_BENCH_COMMON_H
#define CFORMER_BENCH_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "models.h"

#define BENCH_MAX_LIST 32
#define BENCH_WORD_MAX 32
#define BENCH_MIB (1024.0 * 1024.0)
#define BENCH_GIB (1024.0 * 1024.0 * 1024.0)

/* Seconds on a monotonic clock. */
double bench_clock(void);
/* Print "<prog>: <what>: <tensor_last_error()>" to stderr and exit 1. */
void bench_die(const char *prog, const char *what) __attribute__((noreturn));

/* Parse the comma-separated integers of flag --name ("512,1024") into out (at most max
 * entries, each in [lo, hi]); returns the count. A malformed list exits 1 with a message
 * naming the flag and the expected form. */
int bench_parse_ints(const char *prog, const char *name, const char *text, int64_t *out, int max,
		     int64_t lo, int64_t hi);
/* Parse the comma-separated words of flag --name into out (at most max), each one of the
 * '|'-separated choices; returns the count. Duplicates, unknown words and empty items exit 1
 * naming the flag. */
int bench_parse_words(const char *prog, const char *name, const char *text,
		      char (*out)[BENCH_WORD_MAX], int max, const char *choices);

/* OMP_WAIT_POLICY as set in the environment, or "default" (idle threads spin a while). */
const char *bench_wait_policy(void);
/* The 1-minute load average, or -1 if unknown. */
double bench_load_average(void);
/* MemAvailable of /proc/meminfo in bytes, or -1 if unknown. */
double bench_mem_available(void);
/* Resident-set accounting, as bench/pytorch measures it: bench_rss_reset() sets the kernel's
 * high-water mark (VmHWM) to the current RSS and returns that RSS in bytes;
 * bench_rss_peak() returns VmHWM in bytes. -1 where /proc does not tell or refuses. */
double bench_rss_reset(void);
double bench_rss_peak(void);
/* The f32 GEMM rate of tensor_matmul on [size, size] x [size, size] on dev (the CPU at the
 * current thread count), GFLOP/s, best of reps after one warm-up; negative status on error. */
double bench_sgemm_gflops(enum tensor_device dev, int64_t size, int reps);
/* Bytes free on dev (the CPU: bench_mem_available), -1 if unknown. */
double bench_device_mem_available(enum tensor_device dev);
/* The heap tensor t on dev: t itself if it is there, else a copy (t is freed); NULL on error. */
struct tensor *bench_to_device(struct tensor *t, enum tensor_device dev);
/* The device a --device flag names ("cpu" or "cuda"); exits 1 with the reason when it is
 * not available. */
int bench_device_parse(const char *prog, const char *name);
/* Forward-pass matmul FLOPs per token of the resolved config c at its max_len (2 m n k per
 * matmul, the order nn_linformer computes in; docs/benchmarks.md has the formula), the
 * classifier head included (spread over the tokens) when head is true. */
double bench_forward_flops_per_token(const struct model_config *c, bool head);

/* Heap i32 ids [batch, n] drawn uniformly from [1, vocab) (no padding id 0), seeded. NULL with
 * an error on failure. */
struct tensor *bench_random_ids(int64_t batch, int64_t n, int64_t vocab, uint64_t seed);
/* Heap i32 labels [batch] drawn uniformly from [0, classes), seeded. */
struct tensor *bench_random_labels(int64_t batch, int64_t classes, uint64_t seed);

/* Open path for writing and write the header line; exits 1 naming --csv on failure. NULL
 * path: returns NULL (no CSV). */
FILE *bench_csv_open(const char *prog, const char *path, const char *header);
/* Close a CSV opened by bench_csv_open (NULL is fine); exits 1 if a write failed. */
void bench_csv_close(const char *prog, FILE *f);

#endif
