/* An exponential moving average of the parameters (Polyak averaging). */
#include <stdlib.h>

#include "nn.h"
#include "optim_internal.h"

/* ---- exponential moving average -------------------------------------------------- */

/* shadow += a[0] (value - shadow) */
static int ema_chunk(struct tensor *const *t, struct update *u)
{
	return optim_store(t[0],
			   tensor_add(t[0], tensor_mul_scalar(tensor_sub(t[1], t[0]), u->a[0])));
}

/* shadow <-> value */
static int swap_chunk(struct tensor *const *t, struct update *u)
{
	(void)u;
	struct tensor *kept = tensor_clone(t[1]);
	int rc = kept ? tensor_copy_(t[1], t[0]) : optim_failed();
	return rc < 0 ? rc : tensor_copy_(t[0], kept);
}

/* Apply u to (shadow, value) of every parameter, in chunks. */
static int ema_for_pairs(const char *op, struct nn_ema *e, struct update *u)
{
	struct nn_params *ps = e->ps;
	if (optim_state_count(e->shadow) != ps->n)
		return tensor_error(TENSOR_ERR_STATE,
				    "%s: the average holds %d parameters, the list has %d", op,
				    optim_state_count(e->shadow), ps->n);
	int rc = TENSOR_OK;
	ag_no_grad_begin();
	for (int i = 0; i < ps->n && rc == TENSOR_OK; i++) {
		tensor_scope_begin();
		struct tensor *t[2] = { optim_flat1(op, e->shadow[i]),
					optim_flat1(op, ps->items[i].value) };
		rc = t[0] && t[1] ? tensor_check_writable(op, ps->items[i].value) : optim_failed();
		if (rc == TENSOR_OK && tensor_numel(t[0]) > 0)
			rc = optim_for_chunks(t, 2, u);
		tensor_scope_end();
	}
	ag_no_grad_end();
	return rc;
}

int nn_ema_init(struct nn_ema *e, struct nn_params *ps, double decay)
{
	static const char op[] = "nn_ema_init";
	if (!e || !ps)
		return tensor_error(TENSOR_ERR_ARG, "%s: %s is NULL", op, e ? "ps" : "e");
	*e = (struct nn_ema){ 0 };
	if (!(decay >= 0 && decay < 1))
		return tensor_error(TENSOR_ERR_ARG, "%s: decay %g must be in [0, 1)", op, decay);
	struct tensor *flat;
	struct tensor **shadow = optim_state_alloc(op, ps, 1, &flat);
	if (!shadow)
		return optim_failed();
	int rc = TENSOR_OK;
	for (int i = 0; i < ps->n && rc == TENSOR_OK; i++)
		rc = tensor_copy_(shadow[i], ps->items[i].value);
	if (rc < 0) {
		optim_state_free(shadow, flat);
		return rc;
	}
	*e = (struct nn_ema){ .ps = ps, .decay = decay, .shadow = shadow, .flat = flat };
	return TENSOR_OK;
}

int nn_ema_update(struct nn_ema *e)
{
	static const char op[] = "nn_ema_update";
	if (!e || !e->ps || !e->shadow)
		return tensor_error(TENSOR_ERR_ARG, "%s: average is NULL or not initialised", op);
	if (e->swapped)
		return tensor_error(TENSOR_ERR_STATE,
				    "%s: the average is swapped in; nn_ema_swap back first", op);
	double t = (double)e->updates, warm = (1 + t) / (10 + t);
	double d = e->decay < warm ? e->decay : warm;
	struct update u = { .chunk = ema_chunk, .a = { 1 - d } };
	int rc = ema_for_pairs(op, e, &u);
	if (rc == TENSOR_OK)
		e->updates++;
	return rc;
}

int nn_ema_swap(struct nn_ema *e)
{
	static const char op[] = "nn_ema_swap";
	if (!e || !e->ps || !e->shadow)
		return tensor_error(TENSOR_ERR_ARG, "%s: average is NULL or not initialised", op);
	struct update u = { .chunk = swap_chunk };
	int rc = ema_for_pairs(op, e, &u);
	if (rc == TENSOR_OK)
		e->swapped = !e->swapped;
	return rc;
}

void nn_ema_free(struct nn_ema *e)
{
	if (!e)
		return;
	optim_state_free(e->shadow, e->flat);
	*e = (struct nn_ema){ 0 };
}
