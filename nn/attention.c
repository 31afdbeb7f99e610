/* Scaled dot-product attention (the core every attention kind shares) and
 * multi-head self-attention, heads batched or computed one at a time. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn_internal.h"
#include "ag_internal.h"
#include "mem.h"

/* Score given to masked keys. Finite, so a row whose keys are all masked
 * softmaxes to a uniform row instead of NaN (that row's output is then set to
 * zero); far below any real score, so exp(MASKED - max) is exactly 0 in f32
 * and f64 wherever a row has a real key; and small enough in magnitude that
 * subtracting a row maximum cannot overflow f32. */
#define MASKED_SCORE (-1e30)

/* ---- nn_attention ------------------------------------------------------------ */

static int check_qkv(const struct tensor *q, const struct tensor *k, const struct tensor *v,
		     const struct tensor *mask, bool causal, double scale)
{
	char bq[128], bk[128], bv[128];
	tensor_shape_str(q, bq, sizeof bq);
	tensor_shape_str(k, bk, sizeof bk);
	tensor_shape_str(v, bv, sizeof bv);
	if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
		return tensor_error(TENSOR_ERR_SHAPE,
				    "nn_attention: q %s, k %s, v %s must be 4-d: q [B,H,T,d], "
				    "k and v [B,H,S,d]",
				    bq, bk, bv);
	if (tensor_check_float("nn_attention", q) < 0 ||
	    tensor_check_pair("nn_attention", q, k) < 0 ||
	    tensor_check_pair("nn_attention", q, v) < 0)
		return tensor_last_status();
	for (int d = 0; d < 2; d++)
		if (k->shape[d] != q->shape[d] || v->shape[d] != q->shape[d])
			return tensor_error(TENSOR_ERR_SHAPE,
					    "nn_attention: batch and head dims differ: q %s, k %s, "
					    "v %s, expected [B,H,T,d], [B,H,S,d], [B,H,S,d]",
					    bq, bk, bv);
	if (k->shape[3] != q->shape[3] || v->shape[2] != k->shape[2])
		return tensor_error(
		    TENSOR_ERR_SHAPE,
		    "nn_attention: q %s, k %s, v %s: expected q [B,H,T,d], k [B,H,S,d], "
		    "v [B,H,S,dv]",
		    bq, bk, bv);
	if (causal && q->shape[2] != k->shape[2])
		return tensor_error(
		    TENSOR_ERR_SHAPE,
		    "nn_attention: causal needs as many keys as queries: q %s, k %s", bq, bk);
	if (!isfinite(scale))
		return tensor_error(TENSOR_ERR_ARG, "nn_attention: scale %g is not finite", scale);
	if (nn_check_mask("nn_attention", mask, q, k->shape[2]) < 0)
		return tensor_last_status();
	return TENSOR_OK;
}

/* 1 where key s may not be seen from query t (s > t), else 0: [T, S] of dtype dt. */
static struct tensor *causal_mask(enum tensor_dtype dt, enum tensor_device dev, int64_t t,
				  int64_t s)
{
	struct tensor *rows = tensor_arange(dt, dev, 0, (double)t, 1);
	struct tensor *cols = tensor_arange(dt, dev, 0, (double)s, 1);
	return tensor_gt(cols, tensor_unsqueeze(rows, 1)); /* [S] > [T, 1]: [T, S] */
}

/* The masks of one attention call, never differentiated: `masked` (1 = key
 * hidden) broadcasting to the scores [B,H,T,S], and `dead` [B,1,T|1,1] (1 =
 * every key of that query row hidden), or NULL when no row can be dead. */
static int build_masks(const struct tensor *q, const struct tensor *mask, bool causal,
		       struct tensor **masked, struct tensor **dead)
{
	enum tensor_dtype dt = q->dtype;
	enum tensor_device dev = q->storage->device;
	int64_t b = q->shape[0], t = q->shape[2];
	*masked = *dead = NULL;
	struct tensor *km = NULL, *cm = NULL;
	if (mask) { /* [B,1,1,S]: 1 = padding */
		struct tensor *pad = nn_mask_compare(mask, dt, true);
		km = pad ? tensor_view(pad, 4, (int64_t[]){ b, 1, 1, pad->shape[1] }) : NULL;
		if (!km)
			return tensor_last_status();
	}
	if (causal && !(cm = causal_mask(dt, dev, t, t)))
		return tensor_last_status();
	struct tensor *both = km && cm ? tensor_maximum(km, cm) : km ? km : cm; /* [B,1,T,S] */
	if (!both)
		return tensor_last_status();
	/* With causal alone every row sees its own key: only key padding can kill a
	 * row. Without keys (S = 0) the output is already zero. */
	if (mask && mask->shape[1] > 0 && !(*dead = tensor_min(both, 1, (int[]){ 3 }, true)))
		return tensor_last_status();
	*masked = both;
	return TENSOR_OK;
}

/* prod (a heap matmul product) times scale, handed to t's gradient. */
static int take_scaled(struct tensor *t, struct tensor *prod, const struct tensor *scale)
{
	if (prod && scale && tensor_mul_(prod, scale) < 0) {
		tensor_free(prod);
		return tensor_last_status();
	}
	return ag_accumulate_take(t, prod);
}

/* dp -> ds = p (dp - sum(dp p)), in dp's memory when the node can take it;
 * then dq = ds k and dk = ds^T q, times the scale. Masked keys need no fill:
 * p is exactly 0 there, except in rows with no visible key, whose output
 * (zeroed) sends back dp = 0. */
static int probs_backward(struct ag_node *n, const struct tensor *g)
{
	struct tensor *q = n->saved[0], *k = n->saved[1], *p = n->saved[2];
	struct tensor *own = ag_dout_take(n), *ds = own;
	if (own ? tensor_softmax_backward_(p, own) < 0 : !(ds = tensor_softmax_backward(p, g))) {
		tensor_free(own);
		return tensor_last_status();
	}
	struct tensor *scale =
	    n->f[0] != 1 ? tensor_full(p->dtype, p->storage->device, 0, NULL, n->f[0]) : NULL;
	int rc = n->f[0] != 1 && !scale ? tensor_last_status() : TENSOR_OK;
	enum tensor_dtype prev = ag_node_precision_begin(n);
	if (rc == TENSOR_OK && n->inputs[0]->requires_grad)
		rc = take_scaled(n->inputs[0], ag_heap_matmul(ds, k), scale);
	if (rc == TENSOR_OK && n->inputs[1]->requires_grad)
		rc =
		    take_scaled(n->inputs[1], ag_heap_matmul(tensor_transpose(ds, 2, 3), q), scale);
	tensor_set_matmul_precision(prev);
	tensor_free(own);
	return rc;
}

/* p = softmax(q k^T * scale, masked keys at MASKED_SCORE) [B,H,T,S] as one
 * node: the scores are scaled, masked and normalised in their own buffer, so
 * the node makes one scores-sized tensor and backward keeps q, k (as the
 * product read them) and p. */
static struct tensor *attention_probs(struct tensor *q, struct tensor *k, double scale,
				      struct tensor *masked)
{
	AG_OP_REGION;
	struct tensor *rq = q, *rk = k;
	ag_autocast_pair(&rq, &rk);
	struct tensor *s = rk ? tensor_matmul_to(rq, tensor_transpose(rk, 2, 3), /* k^T: a view */
						 ag_product_dtype(rq))
			      : NULL;
	if (!s)
		return NULL;
	int rc = TENSOR_OK;
	if (scale != 1) {
		struct tensor *sc = tensor_full(s->dtype, s->storage->device, 0, NULL, scale);
		rc = sc ? tensor_mul_(s, sc) : tensor_last_status();
	}
	if (rc == TENSOR_OK && masked)
		rc = tensor_masked_fill_(s, masked, MASKED_SCORE);
	if (rc == TENSOR_OK)
		rc = tensor_softmax_(s);
	if (rc != TENSOR_OK)
		return NULL;
	struct ag_node *n =
	    ag_record("attention_probs", s, probs_backward, 2, (struct tensor *[]){ q, k });
	if (n) {
		n->f[0] = scale;
		ag_node_keep_precision(n);
		ag_save(n, rq);
		ag_save(n, rk);
		ag_save(n, s);
	}
	return s;
}

/* The fused kernel's node (tensor_attention): saves q, k, v, the rows' log-sum-exp
 * and the hidden keys, not the [B,H,T,S] probabilities; its backward recomputes
 * them a block of queries at a time, its products in the forward's precision. */
static int fused_backward(struct ag_node *n, const struct tensor *g)
{
	struct tensor_attention_args a = {
		.q = n->saved[0],
		.k = n->saved[1],
		.v = n->saved[2],
		.hidden = n->nsaved > 4 ? n->saved[4] : NULL,
		.causal = n->i[0] != 0,
		.scale = n->f[0],
		.dropout = n->f[1],
		.seed = (uint64_t)n->i[1],
		.first = (uint64_t)n->i[2],
	};
	struct tensor *d[3];
	enum tensor_dtype prev = ag_node_precision_begin(n);
	tensor_heap_begin();
	int rc = tensor_attention_backward(&a, n->saved[3], g, &d[0], &d[1], &d[2]);
	tensor_heap_end();
	tensor_set_matmul_precision(prev);
	for (int i = 0; i < 3; i++) {
		if (rc == TENSOR_OK && n->inputs[i]->requires_grad)
			rc = ag_accumulate_take(n->inputs[i], d[i]);
		else
			tensor_free(d[i]);
	}
	return rc;
}

/* nn_attention through tensor_attention, mask [B,S] (1 = a real key) or NULL; drop: the
 * probabilities' dropout when it drops (its mask as nn_dropout_forward would draw it on
 * the [B,H,T,S] probabilities), else NULL. */
static struct tensor *attention_fused(struct tensor *q, struct tensor *k, struct tensor *v,
				      const struct tensor *mask, bool causal, double scale,
				      const struct nn_dropout *drop)
{
	AG_OP_REGION;
	struct tensor *hidden = mask ? nn_mask_compare(mask, q->dtype, true) : NULL, *lse;
	if (mask && !hidden)
		return NULL;
	struct tensor_attention_args a = {
		.q = q, .k = k, .v = v, .hidden = hidden, .causal = causal, .scale = scale
	};
	if (drop) {
		a.dropout = drop->p;
		a.seed = nn_params_next_seed(drop->ps);
		a.first =
		    (uint64_t)(drop->ps->batch_first * q->shape[1] * q->shape[2] * k->shape[2]);
	}
	struct tensor *out = tensor_attention(&a, &lse);
	struct ag_node *n =
	    out ? ag_record("attention", out, fused_backward, 3, (struct tensor *[]){ q, k, v })
		: NULL;
	if (n) {
		n->i[0] = causal;
		n->f[0] = scale;
		n->f[1] = a.dropout;
		n->i[1] = (int64_t)a.seed;
		n->i[2] = (int64_t)a.first;
		ag_node_keep_precision(n);
		struct tensor *keep[5] = { q, k, v, lse, hidden };
		for (int i = 0; i < (hidden ? 5 : 4); i++)
			ag_save(n, keep[i]);
	} else {
		tensor_free(hidden);
		tensor_free(lse);
	}
	return out;
}

static nn_attention_observer observer;
static void *observer_ctx;
static bool fused = true;

void nn_attention_set_fused(bool on)
{
	fused = on;
}

void nn_set_attention_observer(nn_attention_observer fn, void *ctx)
{
	observer = fn;
	observer_ctx = ctx;
}

/*
 * softmax(q k^T * scale, masked keys at MASKED_SCORE) v, then rows with no
 * visible key set to zero (their gradient is zero too). k^T is a transposed
 * view, passed to BLAS by its strides. The scale goes on q, on k or on the
 * scores, whichever is smallest (k when the Linformer has projected it to
 * fewer rows than q has).
 */
struct tensor *nn_attention(struct tensor *q, struct tensor *k, struct tensor *v,
			    const struct tensor *mask, bool causal, double scale,
			    const struct nn_dropout *dropout)
{
	if (nn_require_scope("nn_attention") < 0 || !q || !k || !v)
		return NULL;
	if (check_qkv(q, k, v, mask, causal, scale) < 0)
		return NULL;
	/* the fused kernel (dropout included, products in the matmul precision), unless the
	 * probabilities are wanted (an observer) */
	bool drops = dropout && !(dropout->ps && (!dropout->ps->training || dropout->p == 0));
	if (fused && !observer && (!drops || dropout->ps) && tensor_attention_supported(q))
		return attention_fused(q, k, v, mask, causal, scale, drops ? dropout : NULL);
	struct tensor *masked = NULL, *dead = NULL;
	if ((mask || causal) && build_masks(q, mask, causal, &masked, &dead) < 0)
		return NULL;
	/* per batch and head: q is T x d, k is S x d, the scores T x S */
	int64_t t = q->shape[2], d = q->shape[3], sk = k->shape[2];
	enum {
		ON_Q,
		ON_K,
		ON_SCORES
	} on = t <= sk ? (d <= sk ? ON_Q : ON_SCORES) : (d <= t ? ON_K : ON_SCORES);
	if (scale != 1 && on == ON_Q)
		q = ag_mul_scalar(q, scale);
	if (scale != 1 && on == ON_K)
		k = ag_mul_scalar(k, scale);
	struct tensor *p = attention_probs(q, k, on == ON_SCORES ? scale : 1, masked);
	if (p && observer) {
		ag_no_grad_begin(); /* what it reads is no part of the graph */
		int rc = observer(observer_ctx, p);
		ag_no_grad_end();
		if (rc != TENSOR_OK) {
			if (tensor_last_status() == TENSOR_OK)
				tensor_error(TENSOR_ERR_ARG,
					     "nn_attention: the attention observer returned %d",
					     rc);
			return NULL;
		}
	}
	if (dropout)
		p = nn_dropout_forward(dropout, p);
	/* [B,H,T,dv] stored as [B,T,H,dv]: merging the heads is then a view */
	struct tensor *out = ag_matmul_laid_out(p, v, (const int[]){ 0, 2, 1, 3 });
	return dead ? ag_masked_fill(out, dead, 0.0) : out;
}

/* ---- multi-head self-attention ------------------------------------------------ */

int nn_mha_init(struct nn_mha *m, struct nn_params *ps, const char *name, int64_t dim,
		int64_t heads, double attn_dropout)
{
	if (!m)
		return tensor_error(TENSOR_ERR_ARG, "nn_mha_init: m is NULL");
	*m = (struct nn_mha){ 0 };
	if (!ps || !name)
		return tensor_error(TENSOR_ERR_ARG, "nn_mha_init: ps and name must not be NULL");
	if (dim < 1 || heads < 1 || dim % heads != 0)
		return tensor_error(
		    TENSOR_ERR_ARG,
		    "nn_mha_init: '%s': heads %lld must divide dim %lld (both >= 1)", name,
		    (long long)heads, (long long)dim);
	if (!(attn_dropout >= 0 && attn_dropout < 1))
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_mha_init: '%s': attn_dropout %g not in [0, 1)", name,
				    attn_dropout);
	if (strlen(name) + strlen(".out_proj.weight") >= NN_NAME_MAX)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_mha_init: name '%s' is too long (max %d chars "
				    "with '.out_proj.weight')",
				    name, NN_NAME_MAX - 1);
	static const char *const proj[4] = { "q_proj", "k_proj", "v_proj", "out_proj" };
	struct nn_linear *lin[4] = { &m->q_proj, &m->k_proj, &m->v_proj, &m->out_proj };
	char buf[NN_NAME_MAX];
	int rc = TENSOR_OK;
	for (int i = 0; i < 4 && rc == TENSOR_OK; i++)
		rc = nn_name(buf, name, proj[i]) ? nn_linear_init(lin[i], ps, buf, dim, dim, true)
						 : tensor_last_status();
	if (rc == TENSOR_OK)
		rc = nn_dropout_init(&m->dropout, ps, attn_dropout);
	if (rc < 0) {
		nn_mha_free(m);
		return rc;
	}
	m->dim = dim;
	m->heads = heads;
	return TENSOR_OK;
}

struct tensor *nn_split_heads(struct tensor *x, int64_t heads)
{
	if (nn_require_scope("nn_split_heads") < 0 || !x)
		return NULL;
	int64_t b = x->shape[0], t = x->shape[1], dim = x->shape[2];
	struct tensor *v = ag_reshape(x, 4, (int64_t[]){ b, t, heads, dim / heads });
	return ag_permute(v, (int[]){ 0, 2, 1, 3 });
}

/* One head's output [B,1,T,d] as [B,T,d] (a view). */
static struct tensor *head_rows(struct tensor *o)
{
	return o ? ag_squeeze(ag_permute(o, (int[]){ 0, 2, 1, 3 }), 2) : NULL;
}

/* With grad, the tape needs every head's intermediates anyway: the heads are
 * joined by a concat. */
static struct tensor *by_head_recorded(struct tensor *q, struct tensor *k, struct tensor *v,
				       const struct tensor *mask, bool causal, double scale,
				       const struct nn_dropout *dropout)
{
	int64_t h = q->shape[1];
	struct tensor **outs = tensor_host_calloc((size_t)h, sizeof *outs);
	if (!outs) {
		tensor_error(TENSOR_ERR_NOMEM,
			     "nn_attention_by_head: cannot allocate %lld head "
			     "outputs",
			     (long long)h);
		return NULL;
	}
	bool ok = true;
	for (int64_t i = 0; i < h && ok; i++) {
		outs[i] =
		    head_rows(nn_attention(ag_narrow(q, 1, i, 1), ag_narrow(k, 1, i, 1),
					   ag_narrow(v, 1, i, 1), mask, causal, scale, dropout));
		ok = outs[i] != NULL;
	}
	struct tensor *y = ok ? ag_concat((int)h, outs, 2) : NULL;
	free(outs);
	return y;
}

static int64_t clamp(int64_t x, int64_t lo, int64_t hi)
{
	return x < lo ? lo : x > hi ? hi : x;
}

/* Head i of the sequences [b0, b0 + nb) and their query rows [r0, r0 + nr). */
struct head_block {
	int64_t i, b0, nb, r0, nr;
};

/* One head_block through nn_attention, in a scope of its own, written into
 * its place in y [B, T, H dv]. */
static int by_head_block(struct tensor *y, struct tensor *q, struct tensor *k, struct tensor *v,
			 const struct tensor *mask, bool causal, double scale,
			 const struct nn_dropout *dropout, struct head_block at)
{
	int64_t i = at.i, b0 = at.b0, nb = at.nb, r0 = at.r0, nr = at.nr, dv = v->shape[3];
	tensor_scope_begin();
	struct tensor *qb = tensor_narrow(tensor_narrow(q, 0, b0, nb), 1, i, 1);
	struct tensor *kb = tensor_narrow(tensor_narrow(k, 0, b0, nb), 1, i, 1);
	struct tensor *vb = tensor_narrow(tensor_narrow(v, 0, b0, nb), 1, i, 1);
	struct tensor *mb = mask ? tensor_narrow(mask, 0, b0, nb) : NULL;
	struct tensor *o = NULL;
	if (qb && kb && vb && (mb || !mask))
		o = head_rows(
		    nn_attention(tensor_narrow(qb, 2, r0, nr), kb, vb, mb, causal, scale, dropout));
	struct tensor *dst =
	    tensor_narrow(tensor_narrow(tensor_narrow(y, 0, b0, nb), 1, r0, nr), 2, i * dv, dv);
	int rc = o && dst ? tensor_copy_(dst, o) : tensor_last_status();
	tensor_scope_end();
	return rc;
}

struct tensor *nn_attention_by_head(struct tensor *q, struct tensor *k, struct tensor *v,
				    const struct tensor *mask, bool causal, double scale,
				    const struct nn_dropout *dropout)
{
	if (nn_require_scope("nn_attention_by_head") < 0 || !q || !k || !v)
		return NULL;
	if (check_qkv(q, k, v, mask, causal, scale) < 0)
		return NULL;
	if (ag_grad_enabled())
		return by_head_recorded(q, k, v, mask, causal, scale, dropout);
	/* without grad: each head, or block of it, in a scope of its own, written
	 * into its columns */
	int64_t b = q->shape[0], h = q->shape[1], t = q->shape[2], s = k->shape[2];
	int64_t dv = v->shape[3], nb = b, nr = t;
	if (!causal && b * t * s > NN_BY_HEAD_SCORES) {
		nr = clamp(NN_BY_HEAD_SCORES / s, 1, t);
		nb = clamp(NN_BY_HEAD_SCORES / (nr * s), 1, b);
	}
	struct tensor *y =
	    tensor_empty(q->dtype, q->storage->device, 3, (int64_t[]){ b, t, h * dv });
	int rc = y ? TENSOR_OK : tensor_last_status();
	for (int64_t i = 0; i < h && rc == TENSOR_OK; i++)
		for (int64_t b0 = 0; b0 < b && rc == TENSOR_OK; b0 += nb)
			for (int64_t r0 = 0; r0 < t && rc == TENSOR_OK; r0 += nr)
				rc = by_head_block(y, q, k, v, mask, causal, scale, dropout,
						   (struct head_block){ i, b0, clamp(b - b0, 0, nb),
									r0, clamp(t - r0, 0, nr) });
	return rc == TENSOR_OK ? y : NULL;
}

struct tensor *nn_mha_forward(const struct nn_mha *m, struct tensor *x, const struct tensor *mask,
			      bool causal)
{
	if (nn_require_scope("nn_mha_forward") < 0 || !x)
		return NULL;
	if (!m || m->dim < 1 || m->heads < 1) {
		tensor_error(TENSOR_ERR_ARG, "nn_mha_forward: module is NULL or not initialised");
		return NULL;
	}
	char bx[128];
	tensor_shape_str(x, bx, sizeof bx);
	if (x->ndim != 3 || x->shape[2] != m->dim) {
		tensor_error(TENSOR_ERR_SHAPE, "nn_mha_forward: x %s must be [B,T,%lld]", bx,
			     (long long)m->dim);
		return NULL;
	}
	if (nn_check_mask("nn_mha_forward", mask, x, x->shape[1]) < 0)
		return NULL;
	int64_t b = x->shape[0], t = x->shape[1], h = m->heads;
	double scale = 1 / sqrt((double)(m->dim / h));
	struct tensor *q = nn_split_heads(nn_linear_forward(&m->q_proj, x), h);
	struct tensor *k = nn_split_heads(nn_linear_forward(&m->k_proj, x), h);
	struct tensor *v = nn_split_heads(nn_linear_forward(&m->v_proj, x), h);
	if (!q || !k || !v)
		return NULL;
	struct tensor *y;
	if (m->sequential_heads) {
		y = nn_attention_by_head(q, k, v, mask, causal, scale, &m->dropout);
	} else {
		struct tensor *o = nn_attention(q, k, v, mask, causal, scale, &m->dropout);
		y = ag_reshape(ag_permute(o, (int[]){ 0, 2, 1, 3 }), 3,
			       (int64_t[]){ b, t, m->dim });
	}
	return nn_linear_forward(&m->out_proj, y);
}

void nn_mha_free(struct nn_mha *m)
{
	if (!m)
		return;
	nn_linear_free(&m->q_proj);
	nn_linear_free(&m->k_proj);
	nn_linear_free(&m->v_proj);
	nn_linear_free(&m->out_proj);
	*m = (struct nn_mha){ 0 };
}
