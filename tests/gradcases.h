/* Shared harness of the gradient-check files of test_ops (test_ops_grad_*.c):
 * input layouts (contiguous, strided, sliced, broadcast), input specs and
 * seeded random shapes. */
#ifndef CFORMER_GRADCASES_H
#define CFORMER_GRADCASES_H

#include "gradcheck.h"

#define MAXIN 4
#define ARRAY_LEN(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* How a leaf input is laid out in memory. BCAST: a leaf with size-1 dims that the
 * function under test expands (ag_expand) to the full shape, so gradients are summed
 * back through the broadcast. */
enum layout { CONTIG, STRIDED, SLICED, BCAST, NLAYOUTS };
extern const char *const layout_name[NLAYOUTS];

/* One input: its full shape, value range, and whether it requires grad. */
struct spec {
	int ndim;
	int64_t shape[TENSOR_MAX_DIMS];
	double lo, hi;
	bool nograd;
};

/* A leaf of the given shape and layout with values in [lo, hi), requiring grad. */
struct tensor *make_leaf(enum layout l, int ndim, const int64_t *shape, double lo, double hi);
/* Gradient-check f on n inputs laid out as l, or in every layout. */
void check_layout(const char *name, gc_fn f, void *ctx, int n, const struct spec *sp,
		  enum layout l);
void check_all(const char *name, gc_fn f, void *ctx, int n, const struct spec *sp);

/* Every test restarts the generators, so its shapes and values do not depend on which
 * tests ran before it in the same process (CK_FORK=no). */
void rng_reset(uint64_t seed);
uint64_t rng_next(void);
int rng_int(int lo, int hi); /* in [lo, hi] */
/* A random shape of ndim dims in [1, 4] with at most max_numel elements. */
void rng_shape(int ndim, int64_t *shape, int64_t max_numel);
struct spec spec_of(int ndim, const int64_t *shape, double lo, double hi);

#define SHAPE(...) ((const int64_t[]){ __VA_ARGS__ })
/* A spec initializer: S(lo, hi, dims...); SPEC is the same as an expression. */
#define S(l, h, ...)                                                                        \
	{                                                                                   \
		.ndim = ARRAY_LEN(SHAPE(__VA_ARGS__)), .shape = { __VA_ARGS__ }, .lo = (l), \
		.hi = (h)                                                                   \
	}
#define SPEC(l, h, ...) ((struct spec)S(l, h, __VA_ARGS__))
#define SPEC0(l, h) ((struct spec){ .ndim = 0, .lo = (l), .hi = (h) })

#endif
