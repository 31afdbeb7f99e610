/* Helpers shared by test_nn_modules.c and test_nn_block.c: tolerances,
 * plain-loop references of activations and linear maps, parameter checks,
 * error-keeping and cleanup helpers. */
#ifndef CFORMER_TESTS_NN_MODULES_COMMON_H
#define CFORMER_TESTS_NN_MODULES_COMMON_H

#include <math.h>
#include <stdlib.h>

#include "nn.h"
#include "testutil.h"

/* Forward tolerance: composite modules in f32 round a few times. */
static inline double tol(enum tensor_dtype dt)
{
	return dt == TENSOR_F64 ? 1e-12 : 1e-5;
}

static const enum tensor_dtype DTYPES[] = { TENSOR_F32, TENSOR_F64 };

/* ---- plain-loop references ----------------------------------------------------- */

static inline double ref_act(enum nn_activation a, double x)
{
	switch (a) {
	case NN_RELU: return x > 0 ? x : 0;
	case NN_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
	case NN_GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
	case NN_SILU: return x / (1 + exp(-x));
	default: ck_abort_msg("bad activation"); return 0;
	}
}

/* y[r, o] = sum_i x[r, i] w[o, i] + b[o] (b may be NULL). */
static inline void ref_linear(const double *x, int64_t rows, int64_t in, const double *w,
			      const double *b, int64_t out, double *y)
{
	for (int64_t r = 0; r < rows; r++)
		for (int64_t o = 0; o < out; o++) {
			double s = b ? b[o] : 0;
			for (int64_t i = 0; i < in; i++)
				s += x[r * in + i] * w[o * in + i];
			y[r * out + o] = s;
		}
}

/* Assert the parameter called name exists with the given shape and flag and
 * return its tensor. */
static inline struct tensor *expect_param(const struct nn_params *ps, const char *name, int ndim,
					  const int64_t *shape, bool no_decay)
{
	struct nn_param *p = nn_params_find(ps, name);
	ck_assert_msg(p != NULL, "parameter %s missing", name);
	tu_assert_shape(p->value, ndim, shape);
	ck_assert_msg(p->no_decay == no_decay, "%s: no_decay %d", name, (int)p->no_decay);
	ck_assert(p->value->requires_grad && !p->value->in_arena);
	return p->value;
}

/* Plant an error, check that fwd on NULL input returns NULL and keeps it. */
#define ASSERT_NULL_KEEPS_ERROR(expr)                                          \
	do {                                                                   \
		tensor_clear_error();                                          \
		tensor_error(TENSOR_ERR_IO, "earlier failure");                \
		ck_assert_ptr_null(expr);                                      \
		tu_assert_error(true, TENSOR_ERR_IO, "earlier failure", NULL); \
	} while (0)

/* Free the gradients of the test inputs after a gradient check. */
static inline void free_grads(int n, struct tensor *const *ts)
{
	for (int i = 0; i < n; i++) {
		tensor_free(ts[i]->grad);
		ts[i]->grad = NULL;
	}
}

/* Nodes recorded by forward passes that never ran backward point at the
 * parameters' storage: drop them before freeing the parameters. */
static inline void free_params(struct nn_params *ps)
{
	ag_tape_reset();
	nn_params_free(ps);
}

#endif
