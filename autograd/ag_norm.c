/* Layer norm and RMS norm over the last dim with their backward. */
#include "autograd.h"
#include "ag_internal.h"

/* Node: inputs x, w, b (w, b may be NULL; RMS norm has no b); i[0] = 1 for
 * RMS norm; saved x, [mean,] rstd and w (when given), in that order.
 *
 * With xhat = (x - mean) * rstd (x * rstd for RMS) and dxhat = g * w:
 *   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
 * (no mean(dxhat) term for RMS), means over the last dim; dw = sum of
 * g * xhat and db = sum of g over the leading dims. tensor_norm_backward
 * computes them in one pass where the device has the kernel; otherwise they
 * are composed of tensor ops (ag_accumulate sums broadcast dims). */
struct norm_args {
	bool rms;
	struct tensor *x_in, *w_in, *b_in;
	const struct tensor *x, *mean, *rstd, *w;
};

static int norm_backward_composed(const struct norm_args *a, const struct tensor *g)
{
	const struct tensor *x = a->x, *mean = a->mean, *rstd = a->rstd, *w = a->w;
	int last = -1, rc = TENSOR_OK;
	struct tensor *xhat = tensor_mul(a->rms ? x : tensor_sub(x, mean), rstd);
	if (a->x_in->requires_grad) {
		const struct tensor *dxhat = w ? tensor_mul(g, w) : g;
		struct tensor *proj = tensor_mean(tensor_mul(dxhat, xhat), 1, &last, true);
		struct tensor *inner = tensor_sub(dxhat, tensor_mul(xhat, proj));
		if (!a->rms)
			inner = tensor_sub(inner, tensor_mean(dxhat, 1, &last, true));
		rc = ag_accumulate(a->x_in, tensor_mul(inner, rstd));
	}
	if (rc == TENSOR_OK && a->w_in && a->w_in->requires_grad)
		rc = ag_accumulate(a->w_in, tensor_mul(g, xhat));
	if (rc == TENSOR_OK && a->b_in && a->b_in->requires_grad)
		rc = ag_accumulate(a->b_in, g);
	return rc;
}

static int norm_backward(struct ag_node *n, const struct tensor *g)
{
	bool rms = n->i[0] != 0;
	struct norm_args a = { .rms = rms,
			       .x_in = n->inputs[0],
			       .w_in = n->inputs[1],
			       .b_in = rms ? NULL : n->inputs[2],
			       .x = n->saved[0],
			       .mean = rms ? NULL : n->saved[1],
			       .rstd = n->saved[rms ? 1 : 2] };
	a.w = a.w_in ? n->saved[rms ? 2 : 3] : NULL;
	struct tensor *in[3] = { a.x_in, a.w_in, a.b_in }, *d[3] = { NULL, NULL, NULL };
	bool want[3];
	for (int k = 0; k < 3; k++)
		want[k] = in[k] && in[k]->requires_grad;
	int before = tensor_last_status();
	tensor_heap_begin(); /* handed over as the inputs' gradients, not copied */
	int rc = tensor_norm_backward(g, a.x, a.mean, a.rstd, a.w, want[0] ? &d[0] : NULL,
				      want[1] ? &d[1] : NULL, want[2] ? &d[2] : NULL);
	tensor_heap_end();
	if (rc == TENSOR_ERR_UNSUPPORTED) { /* no fused kernel on this device */
		if (before == TENSOR_OK)
			tensor_clear_error();
		return norm_backward_composed(&a, g);
	}
	for (int k = 0; k < 3; k++) {
		if (!d[k])
			continue;
		if (rc == TENSOR_OK)
			rc = ag_accumulate_take(in[k], d[k]);
		else
			tensor_free(d[k]);
	}
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
	AG_OP_REGION;
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
	AG_OP_REGION;
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
