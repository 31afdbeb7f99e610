/* AdamW (decoupled weight decay) over the parameters' segments: the fused kernel where
 * the device has it, else the update in tensor ops, chunk by chunk. */
#include <math.h>

#include "nn.h"
#include "optim_internal.h"

/* ---- AdamW --------------------------------------------------------------------- */

static int check_adamw_hyper(const char *op, double lr, double beta1, double beta2, double eps,
			     double weight_decay)
{
	if (!(lr >= 0) || !isfinite(lr))
		return tensor_error(TENSOR_ERR_ARG, "%s: lr %g must be finite and >= 0", op, lr);
	if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
		return tensor_error(TENSOR_ERR_ARG, "%s: betas (%g, %g) must be in [0, 1)", op,
				    beta1, beta2);
	if (!(eps > 0) || !isfinite(eps))
		return tensor_error(TENSOR_ERR_ARG, "%s: eps %g must be finite and > 0", op, eps);
	if (!(weight_decay >= 0) || !isfinite(weight_decay))
		return tensor_error(TENSOR_ERR_ARG, "%s: weight_decay %g must be finite and >= 0",
				    op, weight_decay);
	return TENSOR_OK;
}

int nn_adamw_init(struct nn_adamw *o, struct nn_params *ps, double lr, double beta1, double beta2,
		  double eps, double weight_decay)
{
	static const char op[] = "nn_adamw_init";
	if (!o || !ps)
		return tensor_error(TENSOR_ERR_ARG, "%s: %s is NULL", op, o ? "ps" : "o");
	*o = (struct nn_adamw){ 0 };
	int rc = check_adamw_hyper(op, lr, beta1, beta2, eps, weight_decay);
	if (rc < 0)
		return rc;
	struct tensor *fm, *fv;
	struct tensor **m = optim_state_alloc(op, ps, 1, &fm);
	struct tensor **v = m ? optim_state_alloc(op, ps, 1, &fv) : NULL;
	if (!v) {
		if (m)
			optim_state_free(m, fm);
		return optim_failed();
	}
	*o = (struct nn_adamw){ .ps = ps,
				.lr = lr,
				.beta1 = beta1,
				.beta2 = beta2,
				.eps = eps,
				.weight_decay = weight_decay,
				.m = m,
				.v = v,
				.flat_m = fm,
				.flat_v = fv };
	return TENSOR_OK;
}

/* a: 1 - b1, b2, 1 - b2, 1 / sqrt(bc2), eps, -lr / bc1, 1 - lr wd. */
static int adamw_chunk(struct tensor *const *t, struct update *u)
{
	struct tensor *p = t[SEG_P], *g = t[SEG_G], *m = t[SEG_S1], *v = t[SEG_S2];
	/* m += (1 - b1) (g - m);  v = b2 v + (1 - b2) g^2 */
	int rc = optim_store(m, tensor_add(m, tensor_mul_scalar(tensor_sub(g, m), u->a[0])));
	if (rc == TENSOR_OK)
		rc = optim_store(
		    v, tensor_add(tensor_mul_scalar(v, u->a[1]),
				  tensor_mul_scalar(tensor_unary(TENSOR_SQUARE, g, 0), u->a[2])));
	if (rc < 0)
		return rc;
	/* p = p (1 - lr wd) - lr / bc1 m / (sqrt(v) / sqrt(bc2) + eps) */
	struct tensor *denom =
	    tensor_add_scalar(tensor_mul_scalar(tensor_sqrt(v), u->a[3]), u->a[4]);
	struct tensor *step = tensor_mul_scalar(tensor_div(m, denom), u->a[5]);
	struct tensor *kept = u->decay && u->a[6] != 1 ? tensor_mul_scalar(p, u->a[6]) : p;
	return optim_store(p, tensor_add(kept, step));
}

/* The fused kernel: a = { lr, beta1, beta2, eps, weight_decay, step }. */
static int adamw_fused(struct tensor *const *t, struct update *u)
{
	return tensor_adamw_(t[SEG_P], t[SEG_S1], t[SEG_S2], t[SEG_G], u->a[0], u->a[1], u->a[2],
			     u->a[3], u->decay ? u->a[4] : 0, (int64_t)u->a[5]);
}

int nn_adamw_step(struct nn_adamw *o)
{
	static const char op[] = "nn_adamw_step";
	if (!o || !o->ps || !o->m || !o->v)
		return tensor_error(TENSOR_ERR_ARG, "%s: optimizer is NULL or not initialised", op);
	struct nn_params *ps = o->ps;
	int rc = check_adamw_hyper(op, o->lr, o->beta1, o->beta2, o->eps, o->weight_decay);
	if (rc < 0)
		return rc;
	if (optim_state_count(o->m) != ps->n)
		return tensor_error(
		    TENSOR_ERR_STATE,
		    "%s: the optimizer holds state for %d parameters, the list has %d", op,
		    optim_state_count(o->m), ps->n);
	if (ps->flat && !o->flat_m) { /* packed after the optimizer was created */
		if ((rc = optim_state_pack(op, ps, o->m, &o->flat_m)) < 0 ||
		    (rc = optim_state_pack(op, ps, o->v, &o->flat_v)) < 0)
			return rc;
	}
	double t = (double)(o->step + 1);
	double bc1 = 1 - pow(o->beta1, t), bc2 = 1 - pow(o->beta2, t);
	/* the fused kernel where the device has one, else the update in tensor ops */
	struct update fused = { .chunk = adamw_fused,
				.nstate = 2,
				.whole = true,
				.a = { o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, t } };
	struct update u = { .chunk = adamw_chunk,
			    .nstate = 2,
			    .a = { 1 - o->beta1, o->beta2, 1 - o->beta2, 1 / sqrt(bc2), o->eps,
				   -o->lr / bc1, 1 - o->lr * o->weight_decay } };
	struct tensor **state[] = { o->m, o->v }, *flat[] = { o->flat_m, o->flat_v };
	bool decay_all = o->decay_all || o->weight_decay == 0;
	ag_no_grad_begin();
	rc = optim_for_segments(op, ps, decay_all, state, flat, &fused);
	if (rc == TENSOR_ERR_UNSUPPORTED) { /* refused on the first segment: nothing changed */
		tensor_clear_error();
		rc = optim_for_segments(op, ps, decay_all, state, flat, &u);
	}
	ag_no_grad_end();
	if (rc == TENSOR_OK)
		o->step++;
	return rc;
}

void nn_adamw_free(struct nn_adamw *o)
{
	if (!o)
		return;
	optim_state_free(o->m, o->flat_m);
	optim_state_free(o->v, o->flat_v);
	*o = (struct nn_adamw){ 0 };
}
