/* Helpers shared by test_nn_loss.c and test_nn_optim.c: class ids as a
 * tensor of a given dtype, the value of a one-element tensor. */
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

#endif
