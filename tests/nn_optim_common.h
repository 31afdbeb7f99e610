/* Helpers shared by test_nn_loss.c, test_nn_optim.c and test_nn_penalty.c:
 * class ids as a tensor of a given dtype, the value of a one-element tensor,
 * deterministic parameter values and gradients, two small parameter lists. */
#ifndef CFORMER_TESTS_NN_OPTIM_COMMON_H
#define CFORMER_TESTS_NN_OPTIM_COMMON_H

#include <stdlib.h>

#include "nn.h"
#include "testutil.h"

static inline struct tensor *ids_tensor(enum tensor_dtype dt, int64_t n, const int64_t *v)
{
	struct tensor *t = tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, &n, v);
	ck_assert(t != NULL);
	return dt == TENSOR_I64 ? t : tensor_cast(t, dt);
}

static inline double scalar(const struct tensor *t)
{
	ck_assert_msg(t != NULL, "%s", tensor_last_error());
	ck_assert_int_eq(tensor_numel(t), 1);
	double *v = tu_values(t);
	double r = v[0];
	free(v);
	return r;
}

/* ---- parameters, values and gradients made up for the optimizer tests ---------- */

/* The deterministic gradient of element i at step s (values of mixed sign and size). */
static inline double grad_at(int64_t i, int s, int which)
{
	return sin(1.3 * (double)i + 0.7 * s + 0.4 * which) * (1 + 0.5 * (double)(i % 3));
}

static inline double value_at(int64_t i, int which)
{
	return cos(0.9 * (double)i + which) * 0.8;
}

static inline void set_values(struct tensor *t, int which, bool grad)
{
	int64_t n = tensor_numel(t);
	double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
	for (int64_t i = 0; i < n; i++)
		v[i] = grad ? grad_at(i, which / 16, which % 16) : value_at(i, which);
	struct tensor *src = tensor_from_data(TENSOR_F64, TENSOR_CPU, t->ndim, t->shape, v);
	free(v);
	if (grad && !t->grad) {
		tensor_heap_begin();
		t->grad = tensor_zeros(t->dtype, TENSOR_CPU, t->ndim, t->shape);
		tensor_heap_end();
	}
	ck_assert_int_eq(tensor_copy_(grad ? t->grad : t, src), TENSOR_OK);
}

/* Parameter k of a list gets values value_at(., k) and, at step s, gradients grad_at(., s, k). */
static inline void set_grads(struct nn_params *ps, int s, int skip)
{
	for (int k = 0; k < ps->n; k++)
		if (k != skip)
			set_values(ps->items[k].value, s * 16 + k, true);
}

/* w [2,3] (decay), b [3] (no decay), f [4] (no gradient ever, unless packed). */
static inline void small_model(struct nn_params *ps, enum tensor_dtype dt)
{
	ck_assert_int_eq(nn_params_init(ps, dt, TENSOR_CPU, 5), TENSOR_OK);
	set_values(nn_param_new(ps, "w", 2, (int64_t[]){ 2, 3 }, false), 0, false);
	set_values(nn_param_new(ps, "b", 1, (int64_t[]){ 3 }, true), 1, false);
	set_values(nn_param_new(ps, "f", 1, (int64_t[]){ 4 }, false), 2, false);
}

/* A model with sizes that cross chunk boundaries and alternate decay. */
static inline void big_model(struct nn_params *ps, enum tensor_dtype dt)
{
	ck_assert_int_eq(nn_params_init(ps, dt, TENSOR_CPU, 9), TENSOR_OK);
	const int64_t shapes[][2] = { { 300, 250 }, { 250, 1 },	  { 7, 5 }, { 0, 3 },
				      { 9, 1 },	    { 40, 3000 }, { 3, 1 } };
	const bool nd[] = { false, true, false, false, true, false, false };
	char name[16];
	for (int k = 0; k < 7; k++) {
		snprintf(name, sizeof name, "p%d", k);
		struct tensor *t = nn_param_new(ps, name, 2, shapes[k], nd[k]);
		ck_assert(t != NULL);
		nn_init_normal(t, 0, 1, nn_param_seed(ps, name));
	}
}

#endif
