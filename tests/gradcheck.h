/* Finite-difference gradient checks for the autograd tests. */
#ifndef CFORMER_GRADCHECK_H
#define CFORMER_GRADCHECK_H

#include "autograd.h"

/* The function under test: builds its output from the inputs with ag_ ops. */
typedef struct tensor *(*gc_fn)(struct tensor *const *inputs, void *ctx);

/* Compare the analytic gradients of L = sum(f(inputs) * R), R a fixed random
 * tensor, with central differences (step h) for every input that requires
 * grad (f64 CPU leaves, any strides). Returns the largest error
 * |analytic - numeric| / (atol + rtol |numeric|) over all elements, so a
 * value <= 1 passes; a failure to evaluate returns INFINITY. If worst is
 * not NULL it receives a description of the worst element. */
double gc_error(gc_fn f, void *ctx, int n, struct tensor *const *inputs, double h, double atol,
		double rtol, char *worst, size_t worst_len);

/* ck_assert that gc_error(f, ...) <= 1 with h = 1e-6, atol = 1e-7, rtol = 1e-5;
 * name labels the failure message. */
void gc_assert(const char *name, gc_fn f, void *ctx, int n, struct tensor *const *inputs);

/* An f64 leaf of the given shape with uniform values in [lo, hi), made
 * non-contiguous if strided (values stored transposed), requiring grad.
 * Lives in the current scope. */
struct tensor *gc_input(int ndim, const int64_t *shape, uint64_t seed, double lo, double hi,
			bool strided);

#endif
