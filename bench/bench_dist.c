/* The gradient all-reduce of data-parallel training against the gradient's size: run under
 * mpirun -np N, it times nn_dist_average_grads on packed f32 gradients of 2^18 to 2^26
 * elements (the median of --reps after a warm-up) and prints, on rank 0, a markdown table
 * with the algorithm bandwidth (bytes / time) and the bus bandwidth of a ring all-reduce
 * (2 (N - 1) / N bytes / time, what each rank sends and receives).
 * Usage: mpirun -np 2 bench/bench_dist [--reps R] [--max-log2 L] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "nn.h"

static const char PROG[] = "bench_dist";

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Median seconds of reps all-reduces of n f32 gradients. */
static double time_allreduce(int64_t n, int reps)
{
	struct nn_params ps;
	if (nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1) < 0 ||
	    !nn_param_new(&ps, "g", 1, &n, false) || nn_params_pack(&ps) < 0)
		bench_die(PROG, "gradients");
	double *t = malloc(sizeof *t * (size_t)reps);
	for (int i = -2; i < reps; i++) { /* two warm-ups */
		if (nn_dist_barrier() < 0)
			bench_die(PROG, "barrier");
		double t0 = bench_clock();
		if (nn_dist_average_grads(&ps, 1, nn_dist_size()) < 0)
			bench_die(PROG, "all-reduce");
		if (i >= 0)
			t[i] = bench_clock() - t0;
	}
	qsort(t, (size_t)reps, sizeof *t, cmp_double);
	double med[1] = { t[reps / 2] };
	free(t);
	nn_params_free(&ps);
	if (nn_dist_sum(med, 1) < 0)
		bench_die(PROG, "sum");
	return med[0] / nn_dist_size(); /* the mean of the ranks' medians */
}

int main(int argc, char **argv)
{
	if (nn_dist_init(&argc, &argv) < 0)
		bench_die(PROG, "joining the ranks");
	int reps = 20, max_log2 = 26;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--reps"))
			reps = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--max-log2"))
			max_log2 = atoi(argv[i + 1]);
	}
	if (reps < 1 || max_log2 < 18 || max_log2 > 30) {
		fprintf(stderr, "usage: mpirun -np N %s [--reps R >= 1] [--max-log2 18..30]\n",
			PROG);
		return 2;
	}
	int n = nn_dist_size();
	if (nn_dist_rank() == 0) {
		printf("# Gradient all-reduce (nn_dist_average_grads), %d ranks\n\n", n);
		printf("f32 gradients on the host; the mean of the ranks' medians of %d runs after "
		       "two warm-ups; bus = 2 (N - 1) / N x bytes / time\n\n",
		       reps);
		printf("| elements | MiB | ms | algorithm GB/s | bus GB/s "
		       "|\n|---:|---:|---:|---:|---:|\n");
	}
	for (int l = 18; l <= max_log2; l += 2) {
		int64_t e = (int64_t)1 << l;
		double s = time_allreduce(e, reps), bytes = 4.0 * (double)e;
		if (nn_dist_rank() == 0)
			printf("| %lld | %.1f | %.3f | %.2f | %.2f |\n", (long long)e,
			       bytes / BENCH_MIB, s * 1e3, bytes / s * 1e-9,
			       2.0 * (n - 1) / n * bytes / s * 1e-9);
	}
	nn_dist_finalize();
	return 0;
}
