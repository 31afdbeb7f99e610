/* Helpers shared by the Check test programs. Test code may abort; the
 * library never does. */
#ifndef CFORMER_TESTUTIL_H
#define CFORMER_TESTUTIL_H

#include <check.h>

#include "tensor.h"

/* Checked fixture: clears the error state and opens a scope (so tests need
 * not free), and on teardown closes it and checks no scope leaked. */
void tu_setup(void);
void tu_teardown(void);
/* A TCase with the fixture above and a generous timeout. */
TCase *tu_tcase(const char *name);
/* Run a suite (CK_FORK as set by the environment); returns the exit code. */
int tu_run(Suite *s);

/* Uniform [-1, 1) values of the given shape (seeded, deterministic). */
struct tensor *tu_rand(enum tensor_dtype dt, int ndim, const int64_t *shape, uint64_t seed);
/* The same values as t, stored in a different layout (dims reversed in
 * memory), returned as a non-contiguous view with t's shape. */
struct tensor *tu_strided(const struct tensor *t);
/* Row-major values of t (any strides, any dtype) as a malloc'd double array. */
double *tu_values(const struct tensor *t);
/* Multi-index of row-major position i. */
void tu_unravel(int64_t i, int ndim, const int64_t *shape, int64_t *idx);

/* Assert that got has the shape (ndim, shape). */
void tu_assert_shape(const struct tensor *got, int ndim, const int64_t *shape);
/* Assert |got[i] - want[i]| <= atol + rtol |want[i]| for all n row-major
 * elements (NaN matches NaN, inf matches inf of the same sign). */
void tu_assert_close(const struct tensor *got, const double *want, int64_t n, double atol,
		     double rtol);
/* Assert that a and b (neither NULL: else the last error is shown) have one
 * shape and values within tol + tol |b| of each other. */
void tu_assert_same(const struct tensor *a, const struct tensor *b, double tol);
/* Assert a failure: `failed` true, the recorded status equals `status` and the
 * message contains each non-NULL substring. Clears the error. */
void tu_assert_error(bool failed, int status, const char *sub1, const char *sub2);
/* The bf16 GEMM kernels of the CPU's gemm slot, by their tensor_bf16_gemm_force names:
 * the portable one, the AVX512-BF16 and AMX kernels, and their emulated twins (the same
 * code on intrinsics written in C), which run on any CPU. */
enum { TU_BF16_KERNELS = 5, TU_BF16_FIRST_EMULATED = 3 };
extern const char *const tu_bf16_kernels[TU_BF16_KERNELS];
/* Force kernel i of tu_bf16_kernels; false where this CPU lacks it (then the error of
 * tensor_bf16_gemm_force is left set, and a line says so, once a process). */
bool tu_bf16_kernel_force(int i);
/* Tolerances for a dtype: tight for f64, float-level for f32. */
double tu_tol(enum tensor_dtype dt);
/* Peak CPU memory of the calls that follow: tu_peak_begin opens a no-grad scope,
 * resets the peak and returns the live bytes; tu_peak_bytes(base) is the peak
 * above them so far; tu_peak_end closes the scope (keep a result first). */
size_t tu_peak_begin(void);
size_t tu_peak_bytes(size_t base);
void tu_peak_end(void);

#endif
