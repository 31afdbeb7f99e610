/* The gradients of L2 penalties: towards zero (nn_params_l2_grad) or towards a snapshot
 * of chosen parameters (nn_anchor, L2-SP). */
#define _POSIX_C_SOURCE 200809L
#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "nn.h"
#include "optim_internal.h"

/* ---- L2 penalty ------------------------------------------------------------------ */

/* t[0] gradient += a[0] * t[1] value */
static int l2_chunk(struct tensor *const *t, struct update *u)
{
	return optim_store(t[0], tensor_add(t[0], tensor_mul_scalar(t[1], u->a[0])));
}

/* u over p's gradient, value and (for anchor_chunk) its anchor, as 1-d
 * tensors; only the rows with a gradient of a lazy p. Returns 1 when the
 * gradient changed, 0 when p has none, or a negative status. */
static int penalise(const char *op, const struct nn_param *p, const struct tensor *anchor,
		    struct update *u)
{
	struct tensor *g = p->value->grad;
	if (!g || tensor_numel(g) == 0)
		return 0;
	int nt = anchor ? 3 : 2;
	tensor_scope_begin();
	struct tensor *t[3] = { optim_flat1(op, g), optim_flat1(op, p->value),
				anchor ? optim_flat1(op, anchor) : NULL };
	int rc = t[0] && t[1] && (t[2] || !anchor) ? tensor_check_writable(op, g) : optim_failed();
	if (rc == TENSOR_OK)
		rc = p->lazy_rows ? optim_for_live_rows(op, g, t, nt, u)
				  : optim_for_chunks(t, nt, u);
	tensor_scope_end();
	return rc < 0 ? rc : 1;
}

static int check_lambda(const char *op, double lambda)
{
	return lambda >= 0 && isfinite(lambda)
		   ? TENSOR_OK
		   : tensor_error(TENSOR_ERR_ARG, "%s: lambda %g must be finite and >= 0", op,
				  lambda);
}

int nn_params_l2_grad(struct nn_params *ps, const char *prefix, double lambda)
{
	static const char op[] = "nn_params_l2_grad";
	if (!ps)
		return tensor_error(TENSOR_ERR_ARG, "%s: ps is NULL", op);
	int rc = check_lambda(op, lambda);
	size_t len = prefix ? strlen(prefix) : 0;
	struct update u = { .chunk = l2_chunk, .a = { lambda } };
	int matched = 0, done = 0;
	ag_no_grad_begin();
	for (int i = 0; i < ps->n && rc >= 0; i++) {
		if (strncmp(ps->items[i].name, prefix ? prefix : "", len) != 0)
			continue;
		matched++;
		if (lambda > 0 && (rc = penalise(op, &ps->items[i], NULL, &u)) > 0)
			done++;
	}
	ag_no_grad_end();
	if (rc < 0)
		return rc;
	if (!matched)
		return tensor_error(TENSOR_ERR_ARG, "%s: no parameter name starts with '%s'", op,
				    prefix ? prefix : "");
	return done;
}

/* ---- L2 penalty towards a snapshot ----------------------------------------------- */

/* t[0] gradient += a[0] (t[1] value - t[2] anchor) */
static int anchor_chunk(struct tensor *const *t, struct update *u)
{
	return optim_store(t[0],
			   tensor_add(t[0], tensor_mul_scalar(tensor_sub(t[1], t[2]), u->a[0])));
}

/* Whether name matches one of the '|'-separated globs of pattern. */
static bool glob_any(const char *pattern, const char *name)
{
	char glob[NN_NAME_MAX];
	for (const char *p = pattern;; p++) {
		size_t len = strcspn(p, "|");
		if (len < sizeof glob) {
			memcpy(glob, p, len);
			glob[len] = '\0';
			if (fnmatch(glob, name, 0) == 0)
				return true;
		}
		p += len;
		if (!*p)
			return false;
	}
}

int nn_anchor_init(struct nn_anchor *a, struct nn_params *ps, const char *pattern)
{
	static const char op[] = "nn_anchor_init";
	if (!a || !ps || !pattern)
		return tensor_error(TENSOR_ERR_ARG, "%s: %s is NULL", op,
				    !a	  ? "a"
				    : !ps ? "ps"
					  : "pattern");
	size_t cap = (size_t)(ps->n ? ps->n : 1);
	*a = (struct nn_anchor){ .ps = ps,
				 .index = tensor_host_calloc(cap, sizeof *a->index),
				 .value = tensor_host_calloc(cap, sizeof *a->value) };
	int rc = a->index && a->value
		     ? TENSOR_OK
		     : tensor_error(TENSOR_ERR_NOMEM, "%s: %d parameters", op, ps->n);
	tensor_heap_begin(); /* the copies outlive any open scope */
	ag_no_grad_begin();
	for (int i = 0; i < ps->n && rc == TENSOR_OK; i++) {
		if (!glob_any(pattern, ps->items[i].name))
			continue;
		a->value[a->n] = tensor_clone(ps->items[i].value);
		rc = a->value[a->n] ? TENSOR_OK : optim_failed();
		if (rc == TENSOR_OK)
			a->index[a->n++] = i;
	}
	ag_no_grad_end();
	tensor_heap_end();
	if (rc == TENSOR_OK && a->n == 0)
		rc =
		    tensor_error(TENSOR_ERR_ARG, "%s: no parameter name matches '%s'", op, pattern);
	if (rc < 0)
		nn_anchor_free(a);
	return rc;
}

int nn_anchor_l2_grad(struct nn_anchor *a, double lambda)
{
	static const char op[] = "nn_anchor_l2_grad";
	if (!a || !a->ps)
		return tensor_error(TENSOR_ERR_ARG, "%s: anchor is NULL or not initialised", op);
	int rc = check_lambda(op, lambda);
	for (int j = 0; j < a->n && rc == TENSOR_OK; j++) {
		char b0[128], b1[128];
		if (a->index[j] >= a->ps->n)
			return tensor_error(TENSOR_ERR_STATE, "%s: parameter %d of %d is gone", op,
					    a->index[j], a->ps->n);
		const struct nn_param *p = &a->ps->items[a->index[j]];
		if (!tensor_same_shape(p->value, a->value[j]))
			return tensor_error(TENSOR_ERR_STATE,
					    "%s: parameter '%s' is %s, anchored as %s", op, p->name,
					    tensor_shape_str(p->value, b0, sizeof b0),
					    tensor_shape_str(a->value[j], b1, sizeof b1));
	}
	struct update u = { .chunk = anchor_chunk, .a = { lambda } };
	int done = 0;
	ag_no_grad_begin();
	for (int j = 0; j < a->n && rc >= 0 && lambda > 0; j++)
		if ((rc = penalise(op, &a->ps->items[a->index[j]], a->value[j], &u)) > 0)
			done++;
	ag_no_grad_end();
	return rc < 0 ? rc : done;
}

void nn_anchor_free(struct nn_anchor *a)
{
	if (!a)
		return;
	for (int j = 0; j < a->n; j++)
		tensor_free(a->value[j]);
	free(a->value);
	free(a->index);
	*a = (struct nn_anchor){ 0 };
}

/* PyTorch's clip_grad_norm_: scale by max_norm / (norm + 1e-6) when norm >
 * max_norm. A non-finite norm is returned with the gradients unchanged, so
 * the caller can skip the step. */
