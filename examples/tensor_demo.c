/* A first look at libtensor: a tiny attention-like computation,
 * softmax(Q K^T / sqrt(d)) V, run in a scope, with the error convention and
 * the memory counters. Build: make; run: examples/tensor_demo */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tensor.h"

static void die(const char *what)
{
	fprintf(stderr, "tensor_demo: %s: %s\n", what, tensor_last_error());
	exit(1);
}

int main(void)
{
	printf("cformer tensor demo: BLIS kernels '%s', threads %d\n", tensor_blas_arch(),
	       tensor_get_num_threads());

	const int64_t T = 6, D = 4;
	tensor_scope_begin(); /* everything below is released at scope end */
	struct tensor *q =
	    tensor_rand_normal(TENSOR_F32, TENSOR_CPU, 2, (int64_t[]){ T, D }, 1, 0, 1);
	struct tensor *k =
	    tensor_rand_normal(TENSOR_F32, TENSOR_CPU, 2, (int64_t[]){ T, D }, 2, 0, 1);
	struct tensor *v =
	    tensor_rand_normal(TENSOR_F32, TENSOR_CPU, 2, (int64_t[]){ T, D }, 3, 0, 1);

	/* K^T is a view: BLIS reads it through its strides, no copy. */
	struct tensor *scores = tensor_matmul(q, tensor_transpose(k, 0, 1));
	struct tensor *p = tensor_softmax(tensor_mul_scalar(scores, 1.0 / sqrt((double)D)), -1);
	struct tensor *out = tensor_matmul(p, v);
	if (!out) /* one check at the end: the first error is kept */
		die("attention");
	tensor_print(p, "attention probabilities", stdout);
	tensor_print(out, "output", stdout);
	struct tensor *rows = tensor_sum(p, 1, (int[]){ -1 }, false);
	tensor_print(rows, "row sums", stdout);

	/* Errors are values, not aborts. */
	if (!tensor_matmul(q, v))
		printf("expected error: %s\n", tensor_last_error());
	tensor_clear_error();

	printf("peak bytes during the computation: %zu\n", tensor_mem_stats(TENSOR_CPU).peak_bytes);
	tensor_scope_end();
	printf("live bytes after the scope: %zu\n", tensor_mem_stats(TENSOR_CPU).live_bytes);
	tensor_mem_trim();
	return 0;
}
