/* Dropout: a fresh seeded mask per call in training mode, identity in eval. */
#include "nn_internal.h"

int nn_dropout_init(struct nn_dropout *m, struct nn_params *ps, double p)
{
	if (!m || !ps)
		return tensor_error(TENSOR_ERR_ARG, "nn_dropout_init: module or params is NULL");
	*m = (struct nn_dropout){ 0 };
	if (!(p >= 0 && p < 1))
		return tensor_error(TENSOR_ERR_ARG, "nn_dropout_init: p must be in [0, 1), got %g",
				    p);
	*m = (struct nn_dropout){ .p = p, .ps = ps };
	return TENSOR_OK;
}

/* The generator advances only when a mask is drawn (training and p > 0), so
 * eval passes do not change the random stream a checkpoint records. */
struct tensor *nn_dropout_forward(const struct nn_dropout *m, struct tensor *x)
{
	if (nn_require_scope("nn_dropout_forward") < 0 || !x)
		return NULL;
	if (!m || !m->ps) {
		tensor_error(TENSOR_ERR_ARG,
			     "nn_dropout_forward: module is NULL or not initialised");
		return NULL;
	}
	if (!m->ps->training || m->p == 0)
		return x;
	/* x's rows are rows batch_first.. of the batch (dim 0), so the draws start there */
	int64_t row = x->ndim && x->shape[0] ? tensor_numel(x) / x->shape[0] : 0;
	return ag_dropout_at(x, m->p, nn_params_next_seed(m->ps),
			     (uint64_t)(m->ps->batch_first * row), true);
}
