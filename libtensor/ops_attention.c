/* Fused scaled dot-product attention (tensor_attention) and its backward: front-ends. */
#include <math.h>
#include <string.h>

#include "backend.h"

/* The operands' checks, naming op; the backend of their device (NULL: an error is set,
 * TENSOR_ERR_UNSUPPORTED where the device has no attention kernel). */
static const struct tensor_backend *attention_check(const char *op,
						    const struct tensor_attention_args *a)
{
	if (!a) {
		tensor_error(TENSOR_ERR_ARG, "%s: the arguments are NULL", op);
		return NULL;
	}
	const struct tensor *q = a->q, *k = a->k, *v = a->v, *hid = a->hidden;
	if (!q || !k || !v) { /* an earlier op failed: keep its error, else name this one */
		if (tensor_last_status() == TENSOR_OK)
			tensor_error(TENSOR_ERR_ARG, "%s: q, k or v is NULL", op);
		return NULL;
	}
	const char *use = strcmp(op, "attention") ? NULL : "nn_attention";
	if (tensor_check_operand(op, use, "q", q) < 0 ||
	    tensor_check_operand(op, use, "k", k) < 0 || tensor_check_operand(op, use, "v", v) < 0)
		return NULL;
	char bq[128], bk[128], bv[128], bh[128];
	tensor_shape_str(q, bq, sizeof bq);
	tensor_shape_str(k, bk, sizeof bk);
	tensor_shape_str(v, bv, sizeof bv);
	if (tensor_check_float(op, q) < 0 || tensor_check_pair(op, q, k) < 0 ||
	    tensor_check_pair(op, q, v) < 0 || (hid && tensor_check_pair(op, q, hid) < 0))
		return NULL;
	if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || k->shape[0] != q->shape[0] ||
	    v->shape[0] != q->shape[0] || k->shape[1] != q->shape[1] ||
	    v->shape[1] != q->shape[1] || k->shape[3] != q->shape[3] ||
	    v->shape[2] != k->shape[2]) {
		tensor_error(TENSOR_ERR_SHAPE,
			     "%s: q %s, k %s, v %s: expected q [B,H,T,d], k [B,H,S,d], "
			     "v [B,H,S,dv]",
			     op, bq, bk, bv);
		return NULL;
	}
	if (hid &&
	    (hid->ndim != 2 || hid->shape[0] != q->shape[0] || hid->shape[1] != k->shape[2])) {
		tensor_error(TENSOR_ERR_SHAPE, "%s: hidden %s, k %s: expected hidden [B,S]", op,
			     tensor_shape_str(hid, bh, sizeof bh), bk);
		return NULL;
	}
	if (a->causal && q->shape[2] != k->shape[2]) {
		tensor_error(TENSOR_ERR_SHAPE,
			     "%s: causal needs as many keys as queries: q %s, k %s", op, bq, bk);
		return NULL;
	}
	if (!isfinite(a->scale)) {
		tensor_error(TENSOR_ERR_ARG, "%s: scale %g is not finite", op, a->scale);
		return NULL;
	}
	if (!(a->dropout >= 0 && a->dropout < 1)) {
		tensor_error(TENSOR_ERR_ARG, "%s: dropout %g not in [0, 1)", op, a->dropout);
		return NULL;
	}
	return TENSOR_BACKEND_FOR(q->storage->device, attention, op);
}

/* x itself when its last dim has a unit stride and its rows do not overlap
 * (what the kernels read through BLIS), else a contiguous copy; hidden must be
 * contiguous. A new tensor either way (free it). */
static struct tensor *as_rows(const struct tensor *x, bool contiguous)
{
	int last = x->ndim - 1;
	bool ok = contiguous
		      ? tensor_is_contiguous(x)
		      : (x->strides[last] == 1 || x->shape[last] <= 1) &&
			    (x->shape[last - 1] <= 1 || x->strides[last - 1] >= x->shape[last]);
	return ok ? tensor_alias(x) : tensor_contiguous(x);
}

/* The operands as the kernels take them (each a new tensor, freed by args_free). */
static int args_rows(struct tensor_attention_args *r, const struct tensor_attention_args *a)
{
	*r = *a;
	r->q = as_rows(a->q, false);
	r->k = as_rows(a->k, false);
	r->v = as_rows(a->v, false);
	r->hidden = a->hidden ? as_rows(a->hidden, true) : NULL;
	return r->q && r->k && r->v && (r->hidden || !a->hidden) ? TENSOR_OK : tensor_last_status();
}

static void args_free(struct tensor_attention_args *r)
{
	tensor_free((struct tensor *)r->q);
	tensor_free((struct tensor *)r->k);
	tensor_free((struct tensor *)r->v);
	tensor_free((struct tensor *)r->hidden);
}

struct tensor *tensor_attention(const struct tensor_attention_args *a, struct tensor **lse)
{
	if (!lse) {
		tensor_error(TENSOR_ERR_ARG, "attention: lse is NULL");
		return NULL;
	}
	*lse = NULL;
	const struct tensor_backend *be = attention_check("attention", a);
	if (!be)
		return NULL;
	const struct tensor *q = a->q, *v = a->v;
	enum tensor_device dev = q->storage->device;
	int64_t b = q->shape[0], h = q->shape[1], t = q->shape[2], dv = v->shape[3];
	struct tensor_attention_args r;
	struct tensor *store = NULL, *out = NULL, *l = NULL;
	int rc = args_rows(&r, a);
	if (rc == TENSOR_OK) {
		store = tensor_new(q->dtype, dev, 4, (int64_t[]){ b, t, h, dv });
		out = store ? tensor_permute(store, (const int[]){ 0, 2, 1, 3 }) : NULL;
		l = tensor_new(q->dtype, dev, 3, (int64_t[]){ b, h, t });
		rc = out && l ? TENSOR_OK : tensor_last_status();
	}
	if (rc == TENSOR_OK && tensor_numel(out) + tensor_numel(l) > 0)
		rc = be->attention(out, l, &r);
	args_free(&r);
	tensor_free(store);
	if (rc != TENSOR_OK) {
		tensor_free(out);
		tensor_free(l);
		return NULL;
	}
	*lse = l;
	return out;
}

/* A new tensor of x's shape (4-d, the last dim innermost) whose memory orders its dims as
 * x's strides do: the gradient of a permuted view (heads split from [B,T,H,d]) comes out in
 * its base's layout, and the views back to the base need no copy. */
static struct tensor *new_like(const struct tensor *x)
{
	int order[4];
	bool moved = tensor_dim_order(x, order) && order[3] == 3; /* only dims 0..2 move */
	return tensor_new_laid_out(x->dtype, x->storage->device, 4, x->shape, moved ? order : NULL);
}

int tensor_attention_backward(const struct tensor_attention_args *a, const struct tensor *lse,
			      const struct tensor *dout, struct tensor **dq, struct tensor **dk,
			      struct tensor **dv)
{
	const char *op = "attention_backward";
	if (!dq || !dk || !dv)
		return tensor_error(TENSOR_ERR_ARG, "%s: dq, dk or dv is NULL", op);
	*dq = *dk = *dv = NULL;
	const struct tensor_backend *be = attention_check(op, a);
	if (!be || TENSOR_SLOT(be, attention_backward, op) < 0)
		return tensor_last_status();
	if (!lse || !dout)
		return tensor_error(TENSOR_ERR_ARG, "%s: lse or dout is NULL", op);
	const struct tensor *q = a->q, *k = a->k, *v = a->v;
	if (tensor_check_pair(op, q, lse) < 0 || tensor_check_pair(op, q, dout) < 0)
		return tensor_last_status();
	int64_t b = q->shape[0], h = q->shape[1], t = q->shape[2];
	if (dout->ndim != 4 || dout->shape[0] != b || dout->shape[1] != h || dout->shape[2] != t ||
	    dout->shape[3] != v->shape[3] || lse->ndim != 3 || lse->shape[0] != b ||
	    lse->shape[1] != h || lse->shape[2] != t) {
		char bg[128], bl[128];
		return tensor_error(TENSOR_ERR_SHAPE,
				    "%s: dout %s, lse %s: expected dout [B,H,T,dv] and lse [B,H,T] "
				    "of the forward's",
				    op, tensor_shape_str(dout, bg, sizeof bg),
				    tensor_shape_str(lse, bl, sizeof bl));
	}
	struct tensor_attention_args r;
	int rc = args_rows(&r, a);
	struct tensor *g = as_rows(dout, false), *l = as_rows(lse, true);
	struct tensor *gq = new_like(q), *gk = new_like(k), *gv = new_like(v);
	if (rc == TENSOR_OK && !(g && l && gq && gk && gv))
		rc = tensor_last_status();
	if (rc == TENSOR_OK && tensor_numel(gq) + tensor_numel(gk) + tensor_numel(gv) > 0)
		rc = be->attention_backward(gq, gk, gv, &r, l, g);
	args_free(&r);
	tensor_free(g);
	tensor_free(l);
	if (rc != TENSOR_OK) {
		tensor_free(gq);
		tensor_free(gk);
		tensor_free(gv);
		return rc;
	}
	*dq = gq;
	*dk = gk;
	*dv = gv;
	return TENSOR_OK;
}

bool tensor_attention_supported(const struct tensor *q)
{
	if (!q || (q->dtype != TENSOR_F32 && q->dtype != TENSOR_F64) || q->ndim != 4)
		return false;
	const struct tensor_backend *be = tensor_backend_get(q->storage->device);
	return be && be->attention && be->attention_backward &&
	       (!be->attention_dmax || q->shape[3] <= be->attention_dmax);
}
