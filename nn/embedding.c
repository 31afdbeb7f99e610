/* Embedding lookup with an optional padding row.
 *
 * The padding row is zeroed at init and its gradient is masked: backward adds
 * dout's rows into the weight's gradient where the ids use them (index_add),
 * the padding row's kept as it was, so the row never receives gradient (as
 * PyTorch's padding_idx) even when the row itself is not zero. */
#include <stdio.h>

#include "nn_internal.h"
#include "ag_internal.h"

int nn_embedding_init(struct nn_embedding *m, struct nn_params *ps, const char *name, int64_t num,
		      int64_t dim, int64_t padding_idx)
{
	if (!m || !ps)
		return tensor_error(TENSOR_ERR_ARG, "nn_embedding_init: module or params is NULL");
	*m = (struct nn_embedding){ 0 };
	if (num < 1 || dim < 1)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_embedding_init: '%s': num %lld and dim %lld must be >= 1",
				    name ? name : "", (long long)num, (long long)dim);
	if (padding_idx < -1 || padding_idx >= num)
		return tensor_error(
		    TENSOR_ERR_ARG,
		    "nn_embedding_init: '%s': padding_idx %lld not in [0, %lld) or -1",
		    name ? name : "", (long long)padding_idx, (long long)num);
	char full[NN_NAME_MAX];
	struct tensor *w = nn_name(full, name, "weight")
			       ? nn_param_new(ps, full, 2, (int64_t[]){ num, dim }, true)
			       : NULL;
	int rc = w ? nn_init_normal(w, 0, 1, nn_param_seed(ps, full)) : tensor_last_status();
	if (rc == TENSOR_OK && padding_idx >= 0) {
		ag_no_grad_begin(); /* initialisation is not part of the graph */
		struct tensor *row = tensor_select(w, 0, padding_idx);
		ag_no_grad_end();
		rc = row ? tensor_fill_(row, 0.0) : tensor_last_status();
		tensor_free(row);
	}
	if (rc < 0)
		return rc;
	*m = (struct nn_embedding){
		.weight = w, .num = num, .dim = dim, .padding_idx = padding_idx
	};
	return TENSOR_OK;
}

/* dout's rows added into a parameter's gradient where they are used, the padding row (pad, or
 * -1) kept as it was: no dense [num, dim] temporary, nor a pass over it. */
static int add_rows_into_grad(struct tensor *grad, const struct tensor *ids, const struct tensor *g,
			      int64_t pad)
{
	struct tensor *row = pad >= 0 ? tensor_select(grad, 0, pad) : NULL;
	struct tensor *keep = row ? tensor_clone(row) : NULL;
	if (pad >= 0 && !keep)
		return tensor_last_status();
	int rc = tensor_index_add_(grad, 0, ids, g);
	return rc == TENSOR_OK && keep ? tensor_copy_(row, keep) : rc;
}

/* dweight = index_add(zeros, ids, dout) with the padding row (i[0]) zeroed; added straight
 * into the gradient of a parameter that has one. */
static int embedding_backward(struct ag_node *n, const struct tensor *g)
{
	struct tensor *w = n->inputs[0];
	if (w->requires_grad && !w->node && w->grad && tensor_is_contiguous(w->grad) &&
	    w->grad->storage->tape_refs == 0)
		return add_rows_into_grad(w->grad, n->saved[0], g, n->i[0]);
	struct tensor *dw = tensor_zeros(w->dtype, w->storage->device, w->ndim, w->shape);
	if (!dw)
		return tensor_last_status();
	int rc = tensor_index_add_(dw, 0, n->saved[0], g);
	if (rc == TENSOR_OK && n->i[0] >= 0)
		rc = tensor_fill_(tensor_select(dw, 0, n->i[0]), 0.0);
	return rc < 0 ? rc : ag_accumulate(w, dw);
}

struct tensor *nn_embedding_forward(const struct nn_embedding *m, const struct tensor *ids)
{
	if (nn_require_scope("nn_embedding_forward") < 0 || !ids)
		return NULL;
	if (!m || !m->weight) {
		tensor_error(TENSOR_ERR_ARG,
			     "nn_embedding_forward: module is NULL or not initialised");
		return NULL;
	}
	char bw[128], bi[128];
	if (ids->dtype != TENSOR_I32 && ids->dtype != TENSOR_I64) {
		tensor_error(TENSOR_ERR_DTYPE,
			     "nn_embedding_forward: ids %s must be i32 or i64, got %s",
			     tensor_shape_str(ids, bi, sizeof bi), tensor_dtype_name(ids->dtype));
		return NULL;
	}
	int before = tensor_last_status();
	ag_op_begin(); /* recorded below as one node */
	struct tensor *y = tensor_index_select(m->weight, 0, ids);
	ag_op_end();
	if (!y) {
		if (before == TENSOR_OK) { /* our error: restate it naming the module */
			char msg[512];
			int status = tensor_last_status();
			snprintf(msg, sizeof msg, "%s", tensor_last_error());
			tensor_clear_error();
			tensor_error(status, "nn_embedding_forward: weight %s, ids %s: %s",
				     tensor_shape_str(m->weight, bw, sizeof bw),
				     tensor_shape_str(ids, bi, sizeof bi), msg);
		}
		return NULL;
	}
	struct tensor *w = m->weight;
	struct ag_node *n = ag_record("embedding", y, embedding_backward, 1, &w);
	if (n) {
		n->i[0] = m->padding_idx;
		if (!ag_save(n, (struct tensor *)ids)) /* aliased: ids is not modified */
			return NULL;
	}
	return y;
}

void nn_embedding_free(struct nn_embedding *m)
{
	if (m)
		*m = (struct nn_embedding){ 0 };
}
