/* Adversarial training on the weights: the fast gradient method (Goodfellow et
 * al. 2015) as Miyato et al. (2017) used it on text, perturbing the embedding,
 * here its matrix rather than each position. See nn.h (struct nn_fgm). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"
#include "mem.h"

static int failed(void)
{
	int rc = tensor_last_status();
	return rc < 0 ? rc : TENSOR_ERR_NOMEM;
}

/* The sum of squares of t, or NAN with the error recorded. */
static double sumsq(const struct tensor *t)
{
	tensor_scope_begin();
	struct tensor *s = tensor_sum(tensor_mul(t, t), 0, NULL, false);
	double v = s ? tensor_get(s, NULL) : NAN;
	tensor_scope_end();
	return v;
}

/* p += eps ||p|| g / ||g||, keeping p's old value in *saved; nothing when g is 0. */
static int perturb_one(const char *op, struct tensor *p, double eps, struct tensor **saved)
{
	const struct tensor *g = p->grad;
	double gg = g ? sumsq(g) : 0, pp = g ? sumsq(p) : 0;
	if (isnan(gg) || isnan(pp))
		return failed();
	if (!isfinite(gg))
		return tensor_error(TENSOR_ERR_ARG, "%s: the gradient's norm is not finite", op);
	if (gg == 0)
		return 0;
	int rc = tensor_check_writable(op, p);
	if (rc < 0)
		return rc;
	tensor_heap_begin();
	*saved = tensor_clone(p);
	tensor_heap_end();
	if (!*saved)
		return failed();
	tensor_scope_begin();
	struct tensor *r = tensor_mul_scalar(g, eps * sqrt(pp / gg));
	rc = r ? tensor_add_(p, r) : failed();
	tensor_scope_end();
	return rc < 0 ? rc : 1;
}

int nn_fgm_perturb(struct nn_fgm *f, struct nn_params *ps, const char *prefix, double eps)
{
	static const char op[] = "nn_fgm_perturb";
	if (!f || !ps)
		return tensor_error(TENSOR_ERR_ARG, "%s: %s is NULL", op, f ? "ps" : "f");
	if (f->saved)
		return tensor_error(TENSOR_ERR_STATE,
				    "%s: the weights are perturbed already; nn_fgm_restore first",
				    op);
	if (!(eps >= 0) || !isfinite(eps))
		return tensor_error(TENSOR_ERR_ARG, "%s: eps %g must be finite and >= 0", op, eps);
	size_t len = prefix ? strlen(prefix) : 0;
	int matched = 0;
	for (int i = 0; i < ps->n; i++)
		matched += strncmp(ps->items[i].name, prefix ? prefix : "", len) == 0;
	if (!matched)
		return tensor_error(TENSOR_ERR_ARG, "%s: no parameter name starts with '%s'", op,
				    prefix ? prefix : "");
	struct tensor **saved = tensor_host_calloc((size_t)ps->n, sizeof *saved);
	if (!saved)
		return tensor_error(TENSOR_ERR_NOMEM, "%s: cannot allocate %d slots", op, ps->n);
	*f = (struct nn_fgm){ .ps = ps, .n = ps->n, .saved = saved };
	int rc = TENSOR_OK, done = 0;
	ag_no_grad_begin();
	for (int i = 0; i < ps->n && rc >= 0; i++)
		if (eps > 0 && strncmp(ps->items[i].name, prefix ? prefix : "", len) == 0) {
			rc = perturb_one(op, ps->items[i].value, eps, &f->saved[i]);
			done += rc > 0;
		}
	ag_no_grad_end();
	if (rc < 0) {
		nn_fgm_restore(f); /* what was perturbed goes back */
		return rc;
	}
	return done;
}

int nn_fgm_restore(struct nn_fgm *f)
{
	static const char op[] = "nn_fgm_restore";
	if (!f || !f->saved)
		return tensor_error(TENSOR_ERR_STATE, "%s: nothing is perturbed", op);
	if (f->n != f->ps->n)
		return tensor_error(TENSOR_ERR_STATE,
				    "%s: perturbed with %d parameters, the list has %d", op, f->n,
				    f->ps->n);
	int rc = TENSOR_OK;
	ag_no_grad_begin();
	for (int i = 0; i < f->n; i++)
		if (f->saved[i] && rc == TENSOR_OK)
			rc = tensor_copy_(f->ps->items[i].value, f->saved[i]);
	ag_no_grad_end();
	nn_fgm_free(f);
	return rc;
}

void nn_fgm_free(struct nn_fgm *f)
{
	if (!f)
		return;
	for (int i = 0; f->saved && i < f->n; i++)
		tensor_free(f->saved[i]);
	free(f->saved);
	*f = (struct nn_fgm){ 0 };
}
