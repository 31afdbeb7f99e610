/* Layer norm and RMS norm over the last dim with their backward. */
#include "autograd.h"

/* Node: inputs x, w, b (w, b may be NULL; RMS norm has no b); i[0] = 1 for
 * RMS norm; saved x, [mean,] rstd and w (when given), in that order.
 *
 * With xhat = (x - mean) * rstd (x * rstd for RMS) and dxhat = g * w:
 *   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
 * (no mean(dxhat) term for RMS), means over the last dim; dw = sum of
 * g * xhat and db = sum of g over the leading dims (ag_accumulate sums
 * broadcast dims). */
static int norm_backward(struct ag_node *n, const struct tensor *g)
{
	bool rms = n->i[0] != 0;
	struct tensor *x_in = n->inputs[0], *w_in = n->inputs[1];
	struct tensor *b_in = rms ? NULL : n->inputs[2];
	const struct tensor *x = n->saved[0], *mean = rms ? NULL : n->saved[1];
	const struct tensor *rstd = n->saved[rms ? 1 : 2];
	const struct tensor *w = w_in ? n->saved[rms ? 2 : 3] : NULL;
	int last = -1, rc = TENSOR_OK;
	struct tensor *xhat = tensor_mul(rms ? x : tensor_sub(x, mean), rstd);
	if (x_in->requires_grad) {
		const struct tensor *dxhat = w ? tensor_mul(g, w) : g;
		struct tensor *proj = tensor_mean(tensor_mul(dxhat, xhat), 1, &last, true);
		struct tensor *inner = tensor_sub(dxhat, tensor_mul(xhat, proj));
		if (!rms)
			inner = tensor_sub(inner, tensor_mean(dxhat, 1, &last, true));
		rc = ag_accumulate(x_in, tensor_mul(inner, rstd));
	}
	if (rc == TENSOR_OK && w_in && w_in->requires_grad)
		rc = ag_accumulate(w_in, tensor_mul(g, xhat));
	if (rc == TENSOR_OK && b_in && b_in->requires_grad)
		rc = ag_accumulate(b_in, g);
	return rc;
}

/* Whether the forward must return the statistics for a node. */
static bool norm_needs_grad(const struct tensor *x, const struct tensor *w, const struct tensor *b)
{
	return ag_grad_enabled() &&
	       ((x && x->requires_grad) || (w && w->requires_grad) || (b && b->requires_grad));
}

struct tensor *ag_layer_norm(struct tensor *x, struct tensor *w, struct tensor *b, double eps)
{
	struct tensor *mean = NULL, *rstd = NULL;
	bool grad = norm_needs_grad(x, w, b);
	struct tensor *y =
	    tensor_layer_norm(x, w, b, eps, grad ? &mean : NULL, grad ? &rstd : NULL);
	struct tensor *in[3] = { x, w, b };
	struct ag_node *n = grad ? ag_record("layer_norm", y, norm_backward, 3, in) : NULL;
	if (n) {
		n->i[0] = 0;
		ag_save(n, x);
		ag_save(n, mean);
		ag_save(n, rstd);
		ag_save(n, w); /* no-op when NULL */
	}
	tensor_free(mean); /* the node holds its own views */
	tensor_free(rstd);
	return y;
}

struct tensor *ag_rms_norm(struct tensor *x, struct tensor *w, double eps)
{
	struct tensor *rstd = NULL;
	bool grad = norm_needs_grad(x, w, NULL);
	struct tensor *y = tensor_rms_norm(x, w, eps, grad ? &rstd : NULL);
	struct tensor *in[2] = { x, w };
	struct ag_node *n = grad ? ag_record("rms_norm", y, norm_backward, 2, in) : NULL;
	if (n) {
		n->i[0] = 1;
		ag_save(n, x);
		ag_save(n, rstd);
		ag_save(n, w);
	}
	tensor_free(rstd);
	return y;
}
