/* SGD with momentum (PyTorch's form) over the parameters' segments: the fused kernel
 * where the device has it, else the update in tensor ops. */
#include <math.h>
#include <stdlib.h>

#include "nn.h"
#include "optim_internal.h"

/* ---- SGD ------------------------------------------------------------------------ */

static int check_sgd_hyper(const char *op, double lr, double momentum, double weight_decay)
{
	if (!(lr >= 0) || !isfinite(lr))
		return tensor_error(TENSOR_ERR_ARG, "%s: lr %g must be finite and >= 0", op, lr);
	if (!(momentum >= 0) || !isfinite(momentum))
		return tensor_error(TENSOR_ERR_ARG, "%s: momentum %g must be finite and >= 0", op,
				    momentum);
	if (!(weight_decay >= 0) || !isfinite(weight_decay))
		return tensor_error(TENSOR_ERR_ARG, "%s: weight_decay %g must be finite and >= 0",
				    op, weight_decay);
	return TENSOR_OK;
}

/* Momentum buffers, created when momentum is first nonzero. */
static int sgd_alloc(const char *op, struct nn_sgd *o)
{
	o->buf = optim_state_alloc(op, o->ps, 1, &o->flat_buf);
	return o->buf ? TENSOR_OK : optim_failed();
}

int nn_sgd_init(struct nn_sgd *o, struct nn_params *ps, double lr, double momentum,
		double weight_decay)
{
	static const char op[] = "nn_sgd_init";
	if (!o || !ps)
		return tensor_error(TENSOR_ERR_ARG, "%s: %s is NULL", op, o ? "ps" : "o");
	*o = (struct nn_sgd){ 0 };
	int rc = check_sgd_hyper(op, lr, momentum, weight_decay);
	if (rc < 0)
		return rc;
	*o = (struct nn_sgd){
		.ps = ps, .lr = lr, .momentum = momentum, .weight_decay = weight_decay
	};
	if (momentum > 0 && (rc = sgd_alloc(op, o)) < 0) {
		*o = (struct nn_sgd){ 0 };
		return rc;
	}
	return TENSOR_OK;
}

/* a: wd, mu, -lr; nstate 1 with momentum, else 0. */
static int sgd_chunk(struct tensor *const *t, struct update *u)
{
	struct tensor *p = t[SEG_P], *d = t[SEG_G];
	if (u->decay && u->a[0] != 0) /* d = g + wd p */
		d = tensor_add(d, tensor_mul_scalar(p, u->a[0]));
	if (u->nstate) { /* b = mu b + d; d = b */
		struct tensor *b = t[SEG_S1];
		int rc = optim_store(b, tensor_add(tensor_mul_scalar(b, u->a[1]), d));
		if (rc < 0)
			return rc;
		d = b;
	}
	return optim_store(p, tensor_add(p, tensor_mul_scalar(d, u->a[2])));
}

/* The fused kernel: a = { lr, momentum, weight_decay }. */
static int sgd_fused(struct tensor *const *t, struct update *u)
{
	return tensor_sgd_(t[SEG_P], u->nstate ? t[SEG_S1] : NULL, t[SEG_G], u->a[0], u->a[1],
			   u->decay ? u->a[2] : 0);
}

int nn_sgd_step(struct nn_sgd *o)
{
	static const char op[] = "nn_sgd_step";
	if (!o || !o->ps)
		return tensor_error(TENSOR_ERR_ARG, "%s: optimizer is NULL or not initialised", op);
	struct nn_params *ps = o->ps;
	int rc = check_sgd_hyper(op, o->lr, o->momentum, o->weight_decay);
	if (rc < 0)
		return rc;
	if (o->momentum > 0 && !o->buf && (rc = sgd_alloc(op, o)) < 0)
		return rc;
	if (o->buf && optim_state_count(o->buf) != ps->n)
		return tensor_error(
		    TENSOR_ERR_STATE,
		    "%s: the optimizer holds state for %d parameters, the list has %d", op,
		    optim_state_count(o->buf), ps->n);
	if (o->buf && ps->flat && !o->flat_buf &&
	    (rc = optim_state_pack(op, ps, o->buf, &o->flat_buf)) < 0)
		return rc;
	bool mom = o->buf && o->momentum > 0;
	/* the fused kernel where the device has one, else the update in tensor ops */
	struct update fused = { .chunk = sgd_fused,
				.nstate = mom ? 1 : 0,
				.whole = true,
				.a = { o->lr, o->momentum, o->weight_decay } };
	struct update u = { .chunk = sgd_chunk,
			    .nstate = mom ? 1 : 0,
			    .a = { o->weight_decay, o->momentum, -o->lr } };
	struct tensor **state[] = { o->buf }, *flat[] = { mom ? o->flat_buf : NULL };
	ag_no_grad_begin();
	rc = optim_for_segments(op, ps, o->weight_decay == 0, state, flat, &fused);
	if (rc == TENSOR_ERR_UNSUPPORTED) { /* refused on the first segment: nothing changed */
		tensor_clear_error();
		rc = optim_for_segments(op, ps, o->weight_decay == 0, state, flat, &u);
	}
	ag_no_grad_end();
	if (rc == TENSOR_OK)
		o->step++;
	return rc;
}

void nn_sgd_free(struct nn_sgd *o)
{
	if (!o)
		return;
	if (o->buf)
		optim_state_free(o->buf, o->flat_buf);
	*o = (struct nn_sgd){ 0 };
}
