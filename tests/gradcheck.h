/* Gradient checks for the autograd tests, on the library's ag_gradcheck. */
#ifndef CFORMER_GRADCHECK_H
#define CFORMER_GRADCHECK_H

#include "autograd.h"

/* The function under test: builds its output from the inputs with ag_ ops. */
typedef ag_gradcheck_fn gc_fn;

/* ck_assert that ag_gradcheck(f, ...) ran and passed with its default bound (h = 1e-6,
 * atol = 1e-7, rtol = 1e-5); name labels the failure message. */
void gc_assert(const char *name, gc_fn f, void *ctx, int n, struct tensor *const *inputs);

/* An f64 leaf of the given shape with uniform values in [lo, hi), made
 * non-contiguous if strided (values stored transposed), requiring grad.
 * Lives in the current scope. */
struct tensor *gc_input(int ndim, const int64_t *shape, uint64_t seed, double lo, double hi,
			bool strided);

#endif
