/* Cached keys and values of multi-head self-attention, for a decoder that
 * generates a sequence a few tokens at a time (nn.h). */
#include <math.h>

#include "nn_internal.h"

int nn_kv_cache_init(struct nn_kv_cache *c, const struct nn_mha *m, int64_t batch, int64_t max_len)
{
	if (!c)
		return tensor_error(TENSOR_ERR_ARG, "nn_kv_cache_init: c is NULL");
	*c = (struct nn_kv_cache){ 0 };
	if (!m || m->dim < 1 || m->heads < 1 || !m->k_proj.weight)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_kv_cache_init: module is NULL or not initialised");
	if (batch < 1 || max_len < 1)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_kv_cache_init: batch %lld and max_len %lld must be >= 1",
				    (long long)batch, (long long)max_len);
	const struct tensor *w = m->k_proj.weight;
	int64_t shape[4] = { batch, m->heads, max_len, m->dim / m->heads };
	tensor_heap_begin(); /* the cache outlives the scopes of the steps that fill it */
	c->k = tensor_empty(w->dtype, w->storage->device, 4, shape);
	c->v = c->k ? tensor_empty(w->dtype, w->storage->device, 4, shape) : NULL;
	tensor_heap_end();
	if (!c->v) {
		int rc = tensor_last_status();
		nn_kv_cache_free(c);
		return rc;
	}
	c->max_len = max_len;
	return TENSOR_OK;
}

void nn_kv_cache_reset(struct nn_kv_cache *c)
{
	if (c)
		c->len = 0;
}

void nn_kv_cache_free(struct nn_kv_cache *c)
{
	if (!c)
		return;
	tensor_free(c->k);
	tensor_free(c->v);
	*c = (struct nn_kv_cache){ 0 };
}

/* The arguments of nn_mha_forward_cached, checked before anything is computed. */
static int check_cached(const struct nn_mha *m, const struct tensor *x, const struct nn_kv_cache *c)
{
	static const char fn[] = "nn_mha_forward_cached";
	if (!m || m->dim < 1 || m->heads < 1)
		return tensor_error(TENSOR_ERR_ARG, "%s: module is NULL or not initialised", fn);
	if (!c || !c->k || !c->v)
		return tensor_error(TENSOR_ERR_ARG, "%s: cache is NULL or not initialised", fn);
	if (ag_grad_enabled())
		return tensor_error(TENSOR_ERR_STATE,
				    "%s: inference only: call it between ag_no_grad_begin() and "
				    "ag_no_grad_end() (cached keys and values have no gradient)",
				    fn);
	char bx[128], bc[128];
	tensor_shape_str(x, bx, sizeof bx);
	tensor_shape_str(c->k, bc, sizeof bc);
	int64_t b = c->k->shape[0], d = m->dim / m->heads;
	if (c->k->shape[1] != m->heads || c->k->shape[3] != d)
		return tensor_error(
		    TENSOR_ERR_SHAPE,
		    "%s: cache %s is not of this module: expected [B,%lld,max_len,%lld]", fn, bc,
		    (long long)m->heads, (long long)d);
	if (x->ndim != 3 || x->shape[0] != b || x->shape[2] != m->dim)
		return tensor_error(TENSOR_ERR_SHAPE, "%s: x %s must be [%lld,T,%lld] (cache %s)",
				    fn, bx, (long long)b, (long long)m->dim, bc);
	if (c->len + x->shape[1] > c->max_len)
		return tensor_error(TENSOR_ERR_ARG,
				    "%s: %lld cached + %lld new tokens exceed the cache's max_len "
				    "%lld (nn_kv_cache_reset starts a new sequence)",
				    fn, (long long)c->len, (long long)x->shape[1],
				    (long long)c->max_len);
	return TENSOR_OK;
}

/* Attention of the new queries q [B,H,T,d] at positions len .. len+T-1 to the cached keys and
 * values k, v [B,H,len+T,d] (the new ones included): [B,T,H*d]. Query t sees keys 0 .. len+t.
 * Where that is every key (T = 1) or the causal mask (len = 0) it is one nn_attention call;
 * otherwise one call a row, each over the keys it sees. */
static struct tensor *attend_cached(struct tensor *q, struct tensor *k, struct tensor *v,
				    int64_t len, double scale)
{
	int64_t b = q->shape[0], h = q->shape[1], t = q->shape[2], d = v->shape[3];
	int64_t merged[3] = { b, t, h * d };
	if (t == 1 || len == 0) {
		struct tensor *o = nn_attention(q, k, v, NULL, t > 1, scale, NULL);
		return ag_reshape(ag_permute(o, (int[]){ 0, 2, 1, 3 }), 3, merged);
	}
	struct tensor *y = tensor_empty(q->dtype, q->storage->device, 4, (int64_t[]){ b, t, h, d });
	for (int64_t i = 0; i < t && y; i++) {
		struct tensor *o = nn_attention(
		    tensor_narrow(q, 2, i, 1), tensor_narrow(k, 2, 0, len + i + 1),
		    tensor_narrow(v, 2, 0, len + i + 1), NULL, false, scale, NULL); /* [B,H,1,d] */
		struct tensor *dst =
		    tensor_permute(tensor_narrow(y, 1, i, 1), (int[]){ 0, 2, 1, 3 });
		if (!o || !dst || tensor_copy_(dst, o) < 0)
			y = NULL;
	}
	return y ? tensor_view(y, 3, merged) : NULL;
}

struct tensor *nn_mha_forward_cached(const struct nn_mha *m, struct tensor *x,
				     struct nn_kv_cache *c)
{
	if (nn_require_scope("nn_mha_forward_cached") < 0 || !x)
		return NULL;
	if (check_cached(m, x, c) < 0)
		return NULL;
	int64_t h = m->heads, t = x->shape[1], len = c->len;
	struct tensor *q = nn_split_heads(nn_linear_forward(&m->q_proj, x), h);
	struct tensor *k = nn_split_heads(nn_linear_forward(&m->k_proj, x), h);
	struct tensor *v = nn_split_heads(nn_linear_forward(&m->v_proj, x), h);
	/* the new keys and values go into rows len .. len+T-1; len moves only on success, so
	 * a failed call leaves the cache as it was */
	struct tensor *kc = tensor_narrow(c->k, 2, 0, len + t);
	struct tensor *vc = tensor_narrow(c->v, 2, 0, len + t);
	if (!q || !k || !v || !kc || !vc || tensor_copy_(tensor_narrow(kc, 2, len, t), k) < 0 ||
	    tensor_copy_(tensor_narrow(vc, 2, len, t), v) < 0)
		return NULL;
	double scale = 1 / sqrt((double)(m->dim / h));
	struct tensor *out = nn_linear_forward(&m->out_proj, attend_cached(q, kc, vc, len, scale));
	if (out)
		c->len = len + t;
	return out;
}
