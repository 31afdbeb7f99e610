/* Optimizers (AdamW, SGD with momentum), the gradients of L2 penalties
 * (towards zero or towards a snapshot), gradient clipping by global norm, and
 * a moving average of the parameters.
 *
 * Updates are written with tensor ops, so every backend runs them, and are
 * applied in place under no-grad. Parameters are updated in segments: one
 * parameter, or, when the list is packed, a run of consecutive parameters of
 * the flat buffer that share a weight-decay setting (the whole buffer when
 * they all do). On the CPU a segment is processed in chunks of CHUNK
 * elements, each in its own scope, so the temporaries of one chunk stay in
 * cache and the peak extra memory is a few chunks, not copies of the model.
 *
 * A parameter is skipped when it has no gradient or does not require grad
 * (frozen); of a lazy parameter only the runs of rows with a gradient are
 * updated, each run a segment of its own. State arrays (m, v, buf, the
 * average's shadow) hold one tensor per parameter and a NULL after the last,
 * so a parameter added after the optimizer was created is detected; buf also
 * keeps its flat buffer in the slot after that NULL.
 */
#define _POSIX_C_SOURCE 200809L
#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"
#include "mem.h"

#define CHUNK ((int64_t)1 << 16)

/* The status of the error that made an op return NULL. */
static int failed(void)
{
	int rc = tensor_last_status();
	return rc < 0 ? rc : TENSOR_ERR_NOMEM;
}

/* ---- state ----------------------------------------------------------------- */

static int state_count(struct tensor *const *arr)
{
	int k = 0;
	while (arr[k])
		k++;
	return k;
}

/* A heap view of flat[off, off + numel) shaped like t. */
static struct tensor *flat_view(struct tensor *flat, int64_t off, const struct tensor *t)
{
	tensor_heap_begin();
	struct tensor *slice = tensor_narrow(flat, 0, off, tensor_numel(t));
	struct tensor *v = tensor_view(slice, t->ndim, t->shape);
	tensor_free(slice);
	tensor_heap_end();
	return v;
}

static void state_free(struct tensor **arr, struct tensor *flat)
{
	for (int i = 0; arr && arr[i]; i++)
		tensor_free(arr[i]);
	free(arr);
	tensor_free(flat);
}

/* Move per-parameter state into one flat zero buffer laid out like ps->flat,
 * keeping its values: arr[i] become views of *flat. */
static int state_pack(const char *op, struct nn_params *ps, struct tensor **arr,
		      struct tensor **flat)
{
	int64_t total = tensor_numel(ps->flat);
	tensor_heap_begin();
	struct tensor *f = tensor_zeros(ps->flat->dtype, ps->device, 1, &total);
	tensor_heap_end();
	if (!f)
		return failed();
	struct tensor **views = tensor_host_calloc((size_t)ps->n + 1, sizeof *views);
	int rc = views ? TENSOR_OK
		       : tensor_error(TENSOR_ERR_NOMEM, "%s: cannot allocate state views", op);
	int64_t off = 0;
	for (int i = 0; rc == TENSOR_OK && i < ps->n; i++) {
		views[i] = flat_view(f, off, ps->items[i].value);
		rc = views[i] ? tensor_copy_(views[i], arr[i]) : failed();
		off += tensor_numel(ps->items[i].value);
	}
	if (rc < 0) {
		state_free(views, f);
		return rc;
	}
	for (int i = 0; i < ps->n; i++) {
		tensor_free(arr[i]);
		arr[i] = views[i];
	}
	free(views);
	*flat = f;
	return TENSOR_OK;
}

/* Zero state for every parameter of ps, in an array of ps->n + extra
 * entries: views of a new flat buffer (*flat) if ps is packed, else tensors
 * of each parameter's shape. */
static struct tensor **state_alloc(const char *op, struct nn_params *ps, int extra,
				   struct tensor **flat)
{
	struct tensor **arr = tensor_host_calloc((size_t)ps->n + (size_t)extra, sizeof *arr);
	if (!arr) {
		tensor_error(TENSOR_ERR_NOMEM, "%s: cannot allocate optimizer state", op);
		return NULL;
	}
	*flat = NULL;
	int rc = TENSOR_OK;
	tensor_heap_begin();
	if (ps->flat) {
		int64_t total = tensor_numel(ps->flat);
		*flat = tensor_zeros(ps->flat->dtype, ps->device, 1, &total);
		rc = *flat ? TENSOR_OK : failed();
	}
	int64_t off = 0;
	for (int i = 0; rc == TENSOR_OK && i < ps->n; i++) {
		const struct tensor *p = ps->items[i].value;
		arr[i] = *flat ? flat_view(*flat, off, p)
			       : tensor_zeros(p->dtype, p->storage->device, p->ndim, p->shape);
		rc = arr[i] ? TENSOR_OK : failed();
		off += tensor_numel(p);
	}
	tensor_heap_end();
	if (rc < 0) {
		state_free(arr, *flat);
		*flat = NULL;
		return NULL;
	}
	return arr;
}

/* ---- segments and chunks ----------------------------------------------------- */

enum { SEG_P, SEG_G, SEG_S1, SEG_S2, SEG_MAX };

/* What a chunk update needs; t[] are 1-d chunks of parameter, gradient and
 * state (nstate of them). */
struct update {
	int (*chunk)(struct tensor *const *t, struct update *u);
	int nstate;
	bool decay, whole; /* whole: the segment in one call, not in chunks */
	double a[8];	   /* coefficients, per optimizer */
};

/* Apply u over 1-d tensors t[] of equal length: CHUNK elements at a time on
 * the CPU (single-threaded, this runs as fast as a fused C loop), the whole
 * length at once elsewhere (where each op is a kernel launch). */
static int for_chunks(struct tensor *const *t, int nt, struct update *u)
{
	int64_t n = t[0]->shape[0];
	int64_t chunk = t[0]->storage->device == TENSOR_CPU && !u->whole ? CHUNK : n;
	if (chunk >= n) { /* one call on t itself: no view to allocate */
		tensor_scope_begin();
		int rc = u->chunk(t, u);
		tensor_scope_end();
		return rc;
	}
	for (int64_t off = 0; off < n; off += chunk) {
		int64_t len = n - off < chunk ? n - off : chunk;
		tensor_scope_begin();
		struct tensor *c[SEG_MAX];
		for (int k = 0; k < nt; k++)
			c[k] = tensor_narrow(t[k], 0, off, len);
		int rc = u->chunk(c, u);
		tensor_scope_end();
		if (rc < 0)
			return rc;
	}
	return TENSOR_OK;
}

/* t, viewed as 1-d (it must be contiguous, as parameters, gradients and state are). */
static struct tensor *flat1(const char *op, const struct tensor *t)
{
	if (!tensor_is_contiguous(t)) {
		char b[128];
		tensor_error(TENSOR_ERR_STATE, "%s: tensor %s is not contiguous", op,
			     tensor_shape_str(t, b, sizeof b));
		return NULL;
	}
	int64_t n = tensor_numel(t);
	return tensor_view(t, 1, &n);
}

static bool active(const struct nn_param *p)
{
	return p->value->requires_grad && p->value->grad;
}

/* The largest |g| of each row (slice along dim 0) of the contiguous gradient
 * g, on the host as top[*rows] (the caller frees it), *width elements a row;
 * NULL on error. A row is live when its top is not 0 (NaN is live: it must
 * not vanish). */
static double *row_tops(const char *op, const struct tensor *g, int64_t *rows, int64_t *width)
{
	int64_t r = g->ndim ? g->shape[0] : 1, w = r ? tensor_numel(g) / r : 0;
	*rows = w ? r : 0;
	*width = w;
	double *top = tensor_host_malloc(sizeof *top * (size_t)(r ? r : 1));
	int rc = top ? TENSOR_OK
		     : tensor_error(TENSOR_ERR_NOMEM, "%s: %lld row maxima", op, (long long)r);
	if (rc == TENSOR_OK && *rows) {
		tensor_scope_begin();
		struct tensor *v = tensor_view(g, 2, (int64_t[]){ r, w });
		struct tensor *a =
		    tensor_max(tensor_unary(TENSOR_ABS, v, 0), 1, (int[]){ 1 }, false);
		struct tensor *d = a ? tensor_cast(a, TENSOR_F64) : NULL;
		rc = d ? tensor_to_host(d, top, sizeof *top * (size_t)r) : failed();
		tensor_scope_end();
	}
	if (rc < 0) {
		free(top);
		return NULL;
	}
	return top;
}

/* Views of t[] (1-d, laid out as the parameter whose gradient is g) over the
 * runs of consecutive rows where g is not all zero, in the open scope: nt
 * views a run, *runs runs, in a host array the caller frees (NULL on error,
 * or with no run). */
static struct tensor **live_views(const char *op, const struct tensor *g, struct tensor *const *t,
				  int nt, int64_t *runs)
{
	int64_t rows, w, n = 0;
	*runs = -1;
	double *top = row_tops(op, g, &rows, &w);
	if (!top)
		return NULL;
	for (int64_t r = 0; r < rows; r++) /* a run starts at each live row after a dead one */
		n += top[r] != 0 && (r == 0 || top[r - 1] == 0);
	struct tensor **v = n ? tensor_host_calloc((size_t)(n * nt), sizeof *v) : NULL;
	int rc = v || !n ? TENSOR_OK
			 : tensor_error(TENSOR_ERR_NOMEM, "%s: views of %lld runs of rows", op,
					(long long)n);
	int64_t i = 0;
	for (int64_t r0 = 0; r0 < rows && rc == TENSOR_OK;) {
		int64_t r1 = r0;
		while (r1 < rows && top[r1] != 0)
			r1++;
		for (int k = 0; r1 > r0 && k < nt && rc == TENSOR_OK; k++)
			rc = (v[i * nt + k] = tensor_narrow(t[k], 0, r0 * w, (r1 - r0) * w))
				 ? TENSOR_OK
				 : failed();
		i += r1 > r0;
		r0 = r1 + 1;
	}
	free(top);
	if (rc < 0) {
		free(v);
		return NULL;
	}
	*runs = n;
	return v;
}

/* Apply u to t[] over the runs of live_views. */
static int for_live_rows(const char *op, const struct tensor *g, struct tensor *const *t, int nt,
			 struct update *u)
{
	int64_t runs;
	tensor_scope_begin();
	struct tensor **v = live_views(op, g, t, nt, &runs);
	int rc = runs < 0 ? failed() : TENSOR_OK;
	for (int64_t i = 0; i < runs && rc == TENSOR_OK; i++)
		rc = for_chunks(v + i * nt, nt, u);
	free(v);
	tensor_scope_end();
	return rc;
}

/* A parameter's gradient must match it and the parameter must be writable. */
static int check_param(const char *op, const struct nn_param *p)
{
	const struct tensor *v = p->value, *g = v->grad;
	char bv[128], bg[128];
	if (!tensor_same_shape(v, g) || v->dtype != g->dtype)
		return tensor_error(TENSOR_ERR_STATE, "%s: '%s' is %s %s but its gradient %s %s",
				    op, p->name, tensor_shape_str(v, bv, sizeof bv),
				    tensor_dtype_name(v->dtype), tensor_shape_str(g, bg, sizeof bg),
				    tensor_dtype_name(g->dtype));
	return tensor_check_writable(op, v);
}

/* In a packed list, parameter i and its gradient must still be the views
 * nn_params_pack made at element off of the flat buffers. */
static int check_packed(const char *op, const struct nn_params *ps, int i, int64_t off)
{
	const struct tensor *v = ps->items[i].value;
	if (v->storage != ps->flat->storage || v->offset != ps->flat->offset + (size_t)off ||
	    !v->grad || v->grad->storage != ps->flat_grad->storage ||
	    v->grad->offset != ps->flat_grad->offset + (size_t)off || !tensor_is_contiguous(v))
		return tensor_error(TENSOR_ERR_STATE,
				    "%s: '%s' is no longer a view of the packed buffers", op,
				    ps->items[i].name);
	return TENSOR_OK;
}

/* Run u over every segment: each active parameter (unpacked), or each run of
 * consecutive active parameters with the same decay setting (packed), with
 * state[k] the per-parameter state and flat_state[k] its flat buffer. */
static int for_segments(const char *op, struct nn_params *ps, bool decay_all,
			struct tensor **const *state, struct tensor *const *flat_state,
			struct update *u)
{
	int64_t off = 0;
	for (int i = 0; i < ps->n; off += tensor_numel(ps->items[i].value), i++) {
		int rc = !active(&ps->items[i]) ? TENSOR_OK
			 : ps->flat		? check_packed(op, ps, i, off)
						: TENSOR_OK;
		if (rc == TENSOR_OK && active(&ps->items[i]))
			rc = check_param(op, &ps->items[i]);
		if (rc < 0)
			return rc; /* nothing has changed yet */
	}
	/* Every segment's views first, those of a lazy parameter's runs of live
	 * rows too, so that running out of memory for them changes nothing; the
	 * fused update then allocates nothing more (the update in tensor ops
	 * still does). */
	struct segment {
		struct tensor *t[SEG_MAX];
		struct tensor **runs; /* lazy: nruns x nt views */
		int64_t nruns;
		const struct nn_param *p;
		bool decay;
	} *seg = tensor_host_calloc((size_t)(ps->n ? ps->n : 1), sizeof *seg);
	if (!seg)
		return tensor_error(TENSOR_ERR_NOMEM, "%s: no memory for %d segments", op, ps->n);
	int nt = 2 + u->nstate, nseg = 0, rc = TENSOR_OK;
	tensor_scope_begin();
	off = 0;
	for (int i = 0; i < ps->n && rc == TENSOR_OK;) {
		const struct nn_param *p = &ps->items[i];
		int64_t start = off;
		bool decay = decay_all || !p->no_decay;
		if (!active(p)) {
			off += tensor_numel(p->value);
			i++;
			continue;
		}
		struct tensor **t = seg[nseg].t;
		if (ps->flat) { /* a lazy parameter, or the longest run of active,
				 * not lazy parameters sharing decay */
			do
				off += tensor_numel(ps->items[i++].value);
			while (!p->lazy_rows && i < ps->n && active(&ps->items[i]) &&
			       !ps->items[i].lazy_rows &&
			       (decay_all || !ps->items[i].no_decay) == decay);
			t[SEG_P] = tensor_narrow(ps->flat, 0, start, off - start);
			t[SEG_G] = tensor_narrow(ps->flat_grad, 0, start, off - start);
			for (int k = 0; k < u->nstate; k++)
				t[SEG_S1 + k] = tensor_narrow(flat_state[k], 0, start, off - start);
		} else {
			t[SEG_P] = flat1(op, p->value);
			t[SEG_G] = flat1(op, p->value->grad);
			for (int k = 0; k < u->nstate; k++)
				t[SEG_S1 + k] = flat1(op, state[k][i]);
			off += tensor_numel(p->value);
			i++;
		}
		for (int k = 0; k < nt && rc == TENSOR_OK; k++)
			if (!t[k])
				rc = failed();
		if (rc == TENSOR_OK && p->lazy_rows) {
			seg[nseg].runs = live_views(op, p->value->grad, t, nt, &seg[nseg].nruns);
			rc = seg[nseg].nruns < 0 ? failed() : TENSOR_OK;
		}
		seg[nseg].p = p;
		seg[nseg].decay = decay;
		nseg += off > start;
	}
	for (int s = 0; s < nseg && rc == TENSOR_OK; s++) {
		u->decay = seg[s].decay;
		if (!seg[s].p->lazy_rows)
			rc = for_chunks(seg[s].t, nt, u);
		for (int64_t r = 0; r < seg[s].nruns && rc == TENSOR_OK; r++)
			rc = for_chunks(seg[s].runs + r * nt, nt, u);
	}
	tensor_scope_end();
	for (int s = 0; s < ps->n; s++) /* calloc'd: unused entries hold NULL */
		free(seg[s].runs);
	free(seg);
	return rc;
}

/* Copy the value computed into dst, or report the op error that made it NULL. */
static int store(struct tensor *dst, const struct tensor *value)
{
	return value ? tensor_copy_(dst, value) : failed();
}

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
	struct tensor **m = state_alloc(op, ps, 1, &fm);
	struct tensor **v = m ? state_alloc(op, ps, 1, &fv) : NULL;
	if (!v) {
		if (m)
			state_free(m, fm);
		return failed();
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
	int rc = store(m, tensor_add(m, tensor_mul_scalar(tensor_sub(g, m), u->a[0])));
	if (rc == TENSOR_OK)
		rc = store(
		    v, tensor_add(tensor_mul_scalar(v, u->a[1]),
				  tensor_mul_scalar(tensor_unary(TENSOR_SQUARE, g, 0), u->a[2])));
	if (rc < 0)
		return rc;
	/* p = p (1 - lr wd) - lr / bc1 m / (sqrt(v) / sqrt(bc2) + eps) */
	struct tensor *denom =
	    tensor_add_scalar(tensor_mul_scalar(tensor_sqrt(v), u->a[3]), u->a[4]);
	struct tensor *step = tensor_mul_scalar(tensor_div(m, denom), u->a[5]);
	struct tensor *kept = u->decay && u->a[6] != 1 ? tensor_mul_scalar(p, u->a[6]) : p;
	return store(p, tensor_add(kept, step));
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
	if (state_count(o->m) != ps->n)
		return tensor_error(
		    TENSOR_ERR_STATE,
		    "%s: the optimizer holds state for %d parameters, the list has %d", op,
		    state_count(o->m), ps->n);
	if (ps->flat && !o->flat_m) { /* packed after the optimizer was created */
		if ((rc = state_pack(op, ps, o->m, &o->flat_m)) < 0 ||
		    (rc = state_pack(op, ps, o->v, &o->flat_v)) < 0)
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
	rc = for_segments(op, ps, decay_all, state, flat, &fused);
	if (rc == TENSOR_ERR_UNSUPPORTED) { /* refused on the first segment: nothing changed */
		tensor_clear_error();
		rc = for_segments(op, ps, decay_all, state, flat, &u);
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
	state_free(o->m, o->flat_m);
	state_free(o->v, o->flat_v);
	*o = (struct nn_adamw){ 0 };
}

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
	o->buf = state_alloc(op, o->ps, 1, &o->flat_buf);
	return o->buf ? TENSOR_OK : failed();
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
		int rc = store(b, tensor_add(tensor_mul_scalar(b, u->a[1]), d));
		if (rc < 0)
			return rc;
		d = b;
	}
	return store(p, tensor_add(p, tensor_mul_scalar(d, u->a[2])));
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
	if (o->buf && state_count(o->buf) != ps->n)
		return tensor_error(
		    TENSOR_ERR_STATE,
		    "%s: the optimizer holds state for %d parameters, the list has %d", op,
		    state_count(o->buf), ps->n);
	if (o->buf && ps->flat && !o->flat_buf &&
	    (rc = state_pack(op, ps, o->buf, &o->flat_buf)) < 0)
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
	rc = for_segments(op, ps, o->weight_decay == 0, state, flat, &fused);
	if (rc == TENSOR_ERR_UNSUPPORTED) { /* refused on the first segment: nothing changed */
		tensor_clear_error();
		rc = for_segments(op, ps, o->weight_decay == 0, state, flat, &u);
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
		state_free(o->buf, o->flat_buf);
	*o = (struct nn_sgd){ 0 };
}

/* ---- gradient clipping ------------------------------------------------------------ */

/* a[0]: running sum of squares (in double); a[1]: scale. */
static int sumsq_chunk(struct tensor *const *t, struct update *u)
{
	struct tensor *s = tensor_sum(tensor_unary(TENSOR_SQUARE, t[0], 0), 0, NULL, false);
	if (!s)
		return failed();
	u->a[0] += tensor_get(s, NULL);
	return TENSOR_OK;
}

static int scale_chunk(struct tensor *const *t, struct update *u)
{
	return store(t[0], tensor_mul_scalar(t[0], u->a[1]));
}

/* The gradients to clip: the flat buffer, or each parameter's gradient. */
static int for_grads(const char *op, struct nn_params *ps, struct update *u)
{
	if (ps->flat_grad) {
		int rc = tensor_check_writable(op, ps->flat_grad);
		return rc < 0 || tensor_numel(ps->flat_grad) == 0
			   ? rc
			   : for_chunks(&ps->flat_grad, 1, u);
	}
	for (int i = 0; i < ps->n; i++) {
		struct tensor *g = ps->items[i].value->grad;
		if (!g || tensor_numel(g) == 0)
			continue;
		tensor_scope_begin();
		struct tensor *f = flat1(op, g);
		int rc = f ? tensor_check_writable(op, g) : failed();
		if (rc == TENSOR_OK)
			rc = for_chunks(&f, 1, u);
		tensor_scope_end();
		if (rc < 0)
			return rc;
	}
	return TENSOR_OK;
}

/* ---- L2 penalty ------------------------------------------------------------------ */

/* t[0] gradient += a[0] * t[1] value */
static int l2_chunk(struct tensor *const *t, struct update *u)
{
	return store(t[0], tensor_add(t[0], tensor_mul_scalar(t[1], u->a[0])));
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
	struct tensor *t[3] = { flat1(op, g), flat1(op, p->value), anchor ? flat1(op, anchor) : NULL };
	int rc = t[0] && t[1] && (t[2] || !anchor) ? tensor_check_writable(op, g) : failed();
	if (rc == TENSOR_OK)
		rc = p->lazy_rows ? for_live_rows(op, g, t, nt, u) : for_chunks(t, nt, u);
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
	return store(t[0], tensor_add(t[0], tensor_mul_scalar(tensor_sub(t[1], t[2]), u->a[0])));
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
				    !a ? "a" : !ps ? "ps" : "pattern");
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
		rc = a->value[a->n] ? TENSOR_OK : failed();
		if (rc == TENSOR_OK)
			a->index[a->n++] = i;
	}
	ag_no_grad_end();
	tensor_heap_end();
	if (rc == TENSOR_OK && a->n == 0)
		rc = tensor_error(TENSOR_ERR_ARG, "%s: no parameter name matches '%s'", op,
				  pattern);
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
			return tensor_error(TENSOR_ERR_STATE, "%s: parameter '%s' is %s, anchored as %s",
					    op, p->name, tensor_shape_str(p->value, b0, sizeof b0),
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
double nn_clip_grad_norm(struct nn_params *ps, double max_norm)
{
	static const char op[] = "nn_clip_grad_norm";
	if (!ps)
		return tensor_error(TENSOR_ERR_ARG, "%s: ps is NULL", op);
	if (!(max_norm > 0))
		return tensor_error(TENSOR_ERR_ARG, "%s: max_norm %g must be > 0", op, max_norm);
	struct update u = { .chunk = sumsq_chunk };
	ag_no_grad_begin();
	int rc = for_grads(op, ps, &u);
	double norm = sqrt(u.a[0]);
	if (rc == TENSOR_OK && isfinite(norm) && norm > max_norm) {
		u.chunk = scale_chunk;
		u.a[1] = max_norm / (norm + 1e-6);
		rc = for_grads(op, ps, &u);
	}
	ag_no_grad_end();
	return rc < 0 ? rc : norm;
}

/* ---- exponential moving average -------------------------------------------------- */

/* shadow += a[0] (value - shadow) */
static int ema_chunk(struct tensor *const *t, struct update *u)
{
	return store(t[0], tensor_add(t[0], tensor_mul_scalar(tensor_sub(t[1], t[0]), u->a[0])));
}

/* shadow <-> value */
static int swap_chunk(struct tensor *const *t, struct update *u)
{
	(void)u;
	struct tensor *kept = tensor_clone(t[1]);
	int rc = kept ? tensor_copy_(t[1], t[0]) : failed();
	return rc < 0 ? rc : tensor_copy_(t[0], kept);
}

/* Apply u to (shadow, value) of every parameter, in chunks. */
static int ema_for_pairs(const char *op, struct nn_ema *e, struct update *u)
{
	struct nn_params *ps = e->ps;
	if (state_count(e->shadow) != ps->n)
		return tensor_error(TENSOR_ERR_STATE,
				    "%s: the average holds %d parameters, the list has %d", op,
				    state_count(e->shadow), ps->n);
	int rc = TENSOR_OK;
	ag_no_grad_begin();
	for (int i = 0; i < ps->n && rc == TENSOR_OK; i++) {
		tensor_scope_begin();
		struct tensor *t[2] = { flat1(op, e->shadow[i]), flat1(op, ps->items[i].value) };
		rc = t[0] && t[1] ? tensor_check_writable(op, ps->items[i].value) : failed();
		if (rc == TENSOR_OK && tensor_numel(t[0]) > 0)
			rc = for_chunks(t, 2, u);
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
	struct tensor **shadow = state_alloc(op, ps, 1, &flat);
	if (!shadow)
		return failed();
	int rc = TENSOR_OK;
	for (int i = 0; i < ps->n && rc == TENSOR_OK; i++)
		rc = tensor_copy_(shadow[i], ps->items[i].value);
	if (rc < 0) {
		state_free(shadow, flat);
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
	state_free(e->shadow, e->flat);
	*e = (struct nn_ema){ 0 };
}
