/* What the optimizers (adamw.c, sgd.c), the penalties (penalty.c), clipping
 * (clip.c) and the moving average (ema.c) share: state arrays and updates over
 * the parameters' segments (optim_internal.h).
 *
 * Updates are written with tensor ops, so every backend runs them, and are
 * applied in place under no-grad. Parameters are updated in segments: one
 * parameter, or, when the list is packed, a run of consecutive parameters of
 * the flat buffer that share a weight-decay setting (the whole buffer when
 * they all do). On the CPU a segment is processed in chunks of OPTIM_CHUNK
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
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "nn.h"
#include "optim_internal.h"

/* The status of the error that made an op return NULL. */
int optim_failed(void)
{
	int rc = tensor_last_status();
	return rc < 0 ? rc : TENSOR_ERR_NOMEM;
}

/* ---- state ----------------------------------------------------------------- */

int optim_state_count(struct tensor *const *arr)
{
	int k = 0;
	while (arr[k])
		k++;
	return k;
}

/* The index of the parameter at place k of the flat buffer (ps->flat_order), or
 * of the list where ps is not packed. */
static int nth(const struct nn_params *ps, int k)
{
	return ps->flat_order ? ps->flat_order[k] : k;
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

void optim_state_free(struct tensor **arr, struct tensor *flat)
{
	for (int i = 0; arr && arr[i]; i++)
		tensor_free(arr[i]);
	free(arr);
	tensor_free(flat);
}

/* optim_state_free for an array of n entries made in the flat buffer's order, so
 * any of them may still be NULL. */
static void state_free_partial(struct tensor **arr, int n, struct tensor *flat)
{
	for (int i = 0; arr && i < n; i++)
		tensor_free(arr[i]);
	free(arr);
	tensor_free(flat);
}

/* Move per-parameter state into one flat zero buffer laid out like ps->flat,
 * keeping its values: arr[i] become views of *flat. */
int optim_state_pack(const char *op, struct nn_params *ps, struct tensor **arr,
		     struct tensor **flat)
{
	int64_t total = tensor_numel(ps->flat);
	tensor_heap_begin();
	struct tensor *f = tensor_zeros(ps->flat->dtype, ps->device, 1, &total);
	tensor_heap_end();
	if (!f)
		return optim_failed();
	struct tensor **views = tensor_host_calloc((size_t)ps->n + 1, sizeof *views);
	int rc = views ? TENSOR_OK
		       : tensor_error(TENSOR_ERR_NOMEM, "%s: cannot allocate state views", op);
	int64_t off = 0;
	for (int k = 0; rc == TENSOR_OK && k < ps->n; k++) {
		int i = nth(ps, k);
		views[i] = flat_view(f, off, ps->items[i].value);
		rc = views[i] ? tensor_copy_(views[i], arr[i]) : optim_failed();
		off += tensor_numel(ps->items[i].value);
	}
	if (rc < 0) {
		state_free_partial(views, ps->n, f);
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
struct tensor **optim_state_alloc(const char *op, struct nn_params *ps, int extra,
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
		rc = *flat ? TENSOR_OK : optim_failed();
	}
	int64_t off = 0;
	for (int k = 0; rc == TENSOR_OK && k < ps->n; k++) {
		int i = nth(ps, k);
		const struct tensor *p = ps->items[i].value;
		arr[i] = *flat ? flat_view(*flat, off, p)
			       : tensor_zeros(p->dtype, p->storage->device, p->ndim, p->shape);
		rc = arr[i] ? TENSOR_OK : optim_failed();
		off += tensor_numel(p);
	}
	tensor_heap_end();
	if (rc < 0) {
		state_free_partial(arr, ps->n, *flat);
		*flat = NULL;
		return NULL;
	}
	return arr;
}

/* ---- segments and chunks ----------------------------------------------------- */

/* Apply u over 1-d tensors t[] of equal length: OPTIM_CHUNK elements at a time on
 * the CPU (single-threaded, this runs as fast as a fused C loop), the whole
 * length at once elsewhere (where each op is a kernel launch). */
int optim_for_chunks(struct tensor *const *t, int nt, struct update *u)
{
	int64_t n = t[0]->shape[0];
	int64_t chunk = t[0]->storage->device == TENSOR_CPU && !u->whole ? OPTIM_CHUNK : n;
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
struct tensor *optim_flat1(const char *op, const struct tensor *t)
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
		rc = d ? tensor_to_host(d, top, sizeof *top * (size_t)r) : optim_failed();
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
				 : optim_failed();
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
int optim_for_live_rows(const char *op, const struct tensor *g, struct tensor *const *t, int nt,
			struct update *u)
{
	int64_t runs;
	tensor_scope_begin();
	struct tensor **v = live_views(op, g, t, nt, &runs);
	int rc = runs < 0 ? optim_failed() : TENSOR_OK;
	for (int64_t i = 0; i < runs && rc == TENSOR_OK; i++)
		rc = optim_for_chunks(v + i * nt, nt, u);
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
 * active parameters next to each other in the flat buffer with the same decay
 * setting (packed), with state[k] the per-parameter state and flat_state[k]
 * its flat buffer. */
int optim_for_segments(const char *op, struct nn_params *ps, bool decay_all,
		       struct tensor **const *state, struct tensor *const *flat_state,
		       struct update *u)
{
	int64_t off = 0;
	for (int k = 0; k < ps->n; k++) {
		int i = nth(ps, k);
		if (active(&ps->items[i])) {
			int rc = ps->flat ? check_packed(op, ps, i, off) : TENSOR_OK;
			if (rc == TENSOR_OK)
				rc = check_param(op, &ps->items[i]);
			if (rc < 0)
				return rc; /* nothing has changed yet */
		}
		off += tensor_numel(ps->items[i].value);
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
	for (int k = 0; k < ps->n && rc == TENSOR_OK;) {
		int i = nth(ps, k);
		const struct nn_param *p = &ps->items[i], *q;
		int64_t start = off;
		bool decay = decay_all || !p->no_decay;
		if (!active(p)) {
			off += tensor_numel(p->value);
			k++;
			continue;
		}
		struct tensor **t = seg[nseg].t;
		if (ps->flat) { /* a lazy parameter, or the longest run of active,
				 * not lazy parameters sharing decay */
			do
				off += tensor_numel(ps->items[nth(ps, k++)].value);
			while (!p->lazy_rows && k < ps->n && (q = &ps->items[nth(ps, k)]) &&
			       active(q) && !q->lazy_rows && (decay_all || !q->no_decay) == decay);
			t[SEG_P] = tensor_narrow(ps->flat, 0, start, off - start);
			t[SEG_G] = tensor_narrow(ps->flat_grad, 0, start, off - start);
			for (int j = 0; j < u->nstate; j++)
				t[SEG_S1 + j] = tensor_narrow(flat_state[j], 0, start, off - start);
		} else {
			t[SEG_P] = optim_flat1(op, p->value);
			t[SEG_G] = optim_flat1(op, p->value->grad);
			for (int j = 0; j < u->nstate; j++)
				t[SEG_S1 + j] = optim_flat1(op, state[j][i]);
			off += tensor_numel(p->value);
			k++;
		}
		for (int j = 0; j < nt && rc == TENSOR_OK; j++)
			if (!t[j])
				rc = optim_failed();
		if (rc == TENSOR_OK && p->lazy_rows) {
			seg[nseg].runs = live_views(op, p->value->grad, t, nt, &seg[nseg].nruns);
			rc = seg[nseg].nruns < 0 ? optim_failed() : TENSOR_OK;
		}
		seg[nseg].p = p;
		seg[nseg].decay = decay;
		nseg += off > start;
	}
	for (int s = 0; s < nseg && rc == TENSOR_OK; s++) {
		u->decay = seg[s].decay;
		if (!seg[s].p->lazy_rows)
			rc = optim_for_chunks(seg[s].t, nt, u);
		for (int64_t r = 0; r < seg[s].nruns && rc == TENSOR_OK; r++)
			rc = optim_for_chunks(seg[s].runs + r * nt, nt, u);
	}
	tensor_scope_end();
	for (int s = 0; s < ps->n; s++) /* calloc'd: unused entries hold NULL */
		free(seg[s].runs);
	free(seg);
	return rc;
}

/* Copy the value computed into dst, or report the op error that made it NULL. */
int optim_store(struct tensor *dst, const struct tensor *value)
{
	return value ? tensor_copy_(dst, value) : optim_failed();
}
