/* The configurable encoder: token embedding, positions, a stack of
 * {norm, attention, residual, norm, feed-forward, residual} layers whose
 * attention kind is chosen per layer, and the final norm. In no-grad mode each
 * layer runs in its own scope and only its output survives it, so the peak
 * memory is one layer's working set plus two layer outputs. */
#include <stdlib.h>

#include "models.h"
#include "nn_internal.h"
#include "ag_internal.h"
#include "mem.h"

#define NORM_EPS 1e-5

/* LayerNorm or RMSNorm "<prefix>.<suffix>" into the layer's slot. */
static int norm_init(const struct model_config *c, struct nn_layer_norm *ln,
		     struct nn_rms_norm *rms, struct nn_params *ps, const char *prefix,
		     const char *suffix)
{
	char name[NN_NAME_MAX];
	if (!nn_name(name, prefix, suffix))
		return tensor_last_status();
	return c->rms_norm ? nn_rms_norm_init(rms, ps, name, c->dim, NORM_EPS)
			   : nn_layer_norm_init(ln, ps, name, c->dim, NORM_EPS);
}

static struct tensor *norm_forward(const struct model_config *c, const struct nn_layer_norm *ln,
				   const struct nn_rms_norm *rms, struct tensor *x)
{
	return c->rms_norm ? nn_rms_norm_forward(rms, x) : nn_layer_norm_forward(ln, x);
}

/* Learned projections start as window means (unless xavier_projections). */
static int window_init(const struct model_config *c, struct nn_seq_proj *e, struct nn_seq_proj *f)
{
	if (c->xavier_projections)
		return TENSOR_OK;
	int rc = TENSOR_OK;
	if (e->kind == NN_ATTN_LINEAR && e->weight)
		rc = nn_seq_proj_init_windows(e, MODEL_PROJ_INIT_NOISE);
	if (rc == TENSOR_OK && f && f->kind == NN_ATTN_LINEAR && f->weight)
		rc = nn_seq_proj_init_windows(f, MODEL_PROJ_INIT_NOISE);
	return rc;
}

static int layer_init(struct model_layer *l, struct nn_params *ps, const struct model_config *c,
		      int64_t i, const struct nn_seq_proj *shared)
{
	char prefix[NN_NAME_MAX], name[NN_NAME_MAX];
	if (!nn_namef(prefix, "", "layers.%lld", (long long)i) || !nn_name(name, prefix, "attn"))
		return tensor_last_status();
	l->kind = c->attention[i];
	int rc = norm_init(c, &l->ln1, &l->rms1, ps, prefix, "norm1");
	if (rc == TENSOR_OK && l->kind == NN_ATTN_STANDARD) {
		rc = nn_mha_init(&l->mha, ps, name, c->dim, c->heads, c->attn_dropout);
	} else if (rc == TENSOR_OK) {
		bool layerwise = c->sharing == NN_SHARE_LAYERWISE;
		rc = nn_linformer_init(&l->lin, ps, name, c->dim, c->heads, c->max_len, c->k[i],
				       l->kind, c->sharing, c->conv_dense, c->shared_kv_head,
				       c->attn_dropout, layerwise ? shared : NULL);
		l->lin.mask_empty_slots = c->mask_empty_slots;
		if (rc == TENSOR_OK && !layerwise)
			rc = window_init(c, &l->lin.e, &l->lin.f);
	}
	if (rc == TENSOR_OK)
		rc = norm_init(c, &l->ln2, &l->rms2, ps, prefix, "norm2");
	if (rc == TENSOR_OK)
		rc = nn_name(name, prefix, "ff")
			 ? nn_feed_forward_init(&l->ff, ps, name, c->dim, c->ff_hidden,
						c->swiglu ? NN_SILU : c->activation, c->swiglu,
						c->dropout)
			 : tensor_last_status();
	if (rc == TENSOR_OK)
		rc = nn_dropout_init(&l->drop, ps, c->dropout);
	return rc;
}

static void layer_free(struct model_layer *l)
{
	nn_mha_free(&l->mha);
	nn_linformer_free(&l->lin);
	nn_layer_norm_free(&l->ln1);
	nn_layer_norm_free(&l->ln2);
	nn_rms_norm_free(&l->rms1);
	nn_rms_norm_free(&l->rms2);
	nn_feed_forward_free(&l->ff);
	*l = (struct model_layer){ 0 };
}

/* The layerwise projection "proj" of the (single) projected kind, if any. */
static int shared_init(struct model_encoder *m, struct nn_params *ps)
{
	const struct model_config *c = &m->cfg;
	if (c->sharing != NN_SHARE_LAYERWISE)
		return TENSOR_OK;
	for (int64_t i = 0; i < c->layers; i++) {
		enum nn_attn_kind a = c->attention[i];
		if (a == NN_ATTN_STANDARD)
			continue;
		/* conv channels: the head dim, or every key/value channel when dense
		 * (the head dim again with a single shared key/value head) */
		int64_t dh = c->dim / c->heads;
		bool dense = c->conv_dense && a == NN_ATTN_CONV;
		int64_t ch = dense && !c->shared_kv_head ? c->dim : dh;
		int rc = nn_seq_proj_init(&m->shared_proj, ps, "proj", a, c->max_len, c->k[i],
					  c->heads, false, a == NN_ATTN_CONV ? ch : 0, dense);
		return rc == TENSOR_OK ? window_init(c, &m->shared_proj, NULL) : rc;
	}
	return TENSOR_OK;
}

int model_encoder_init(struct model_encoder *m, struct nn_params *ps,
		       const struct model_config *cfg)
{
	if (!m)
		return tensor_error(TENSOR_ERR_ARG, "model_encoder_init: encoder is NULL");
	*m = (struct model_encoder){ 0 };
	if (!ps || !cfg)
		return tensor_error(TENSOR_ERR_ARG,
				    "model_encoder_init: params and config must not be NULL");
	struct model_config c = *cfg;
	int rc = model_config_resolve(&c);
	if (rc < 0)
		return rc;
	m->cfg = c;
	m->layers = tensor_host_calloc((size_t)c.layers, sizeof *m->layers);
	if (!m->layers)
		return tensor_error(TENSOR_ERR_NOMEM,
				    "model_encoder_init: cannot allocate %lld layers",
				    (long long)c.layers);
	rc = nn_embedding_init(&m->embed, ps, "embed", c.vocab_size, c.dim, c.pad_id);
	if (rc == TENSOR_OK && c.positions != MODEL_POS_NONE)
		rc = nn_position_init(&m->pos, ps, "pos", c.max_len, c.dim,
				      c.positions == MODEL_POS_LEARNED);
	if (rc == TENSOR_OK && c.position_kernel > 0)
		rc = nn_conv_position_init(&m->pos_conv, ps, "pos_conv", c.dim, c.position_kernel);
	if (rc == TENSOR_OK)
		rc = nn_dropout_init(&m->drop, ps, c.dropout);
	if (rc == TENSOR_OK)
		rc = shared_init(m, ps);
	for (int64_t i = 0; rc == TENSOR_OK && i < c.layers; i++)
		rc = layer_init(&m->layers[i], ps, &c, i, &m->shared_proj);
	if (rc == TENSOR_OK && c.pre_norm && c.final_norm)
		rc = norm_init(&c, &m->final_ln, &m->final_rms, ps, "", "norm");
	if (rc < 0) /* parameters already registered stay owned by ps */
		model_encoder_free(m);
	return rc;
}

static struct tensor *attention_forward(const struct model_layer *l, struct tensor *x,
					const struct tensor *real)
{
	if (l->kind == NN_ATTN_STANDARD)
		return nn_mha_forward(&l->mha, x, real, false);
	return nn_linformer_forward(&l->lin, x, real);
}

/* The attention half of a layer: pre-norm x + attn(norm1(x)), post-norm
 * norm1(x + attn(x)). Each sum is written into the branch's buffer (the
 * branch is not read again). */
static struct tensor *attention_half(const struct model_config *c, const struct model_layer *l,
				     struct tensor *x, const struct tensor *real)
{
	if (c->pre_norm) {
		struct tensor *a =
		    attention_forward(l, norm_forward(c, &l->ln1, &l->rms1, x), real);
		return ag_add_reuse(nn_dropout_forward(&l->drop, a), x);
	}
	struct tensor *a = attention_forward(l, x, real);
	return norm_forward(c, &l->ln1, &l->rms1, ag_add_reuse(nn_dropout_forward(&l->drop, a), x));
}

/* The feed-forward half: x + ff(norm2(x)), or norm2(x + ff(x)). */
static struct tensor *ff_half(const struct model_config *c, const struct model_layer *l,
			      struct tensor *x)
{
	if (c->pre_norm) {
		struct tensor *f =
		    nn_feed_forward_forward(&l->ff, norm_forward(c, &l->ln2, &l->rms2, x));
		return ag_add_reuse(nn_dropout_forward(&l->drop, f), x);
	}
	struct tensor *f = nn_feed_forward_forward(&l->ff, x);
	return norm_forward(c, &l->ln2, &l->rms2, ag_add_reuse(nn_dropout_forward(&l->drop, f), x));
}

/* Without gradients the attention half runs in a scope of its own that keeps
 * only its output, so the layer's peak holds one half's intermediates. */
static struct tensor *layer_forward(const struct model_config *c, const struct model_layer *l,
				    struct tensor *x, const struct tensor *real)
{
	if (ag_grad_enabled())
		return ff_half(c, l, attention_half(c, l, x, real));
	tensor_scope_begin();
	struct tensor *h = attention_half(c, l, x, real);
	h = h ? tensor_scope_keep(h) : NULL;
	tensor_scope_end();
	return ff_half(c, l, h);
}

static bool check_inputs(const struct model_encoder *m, const struct tensor *ids,
			 const struct tensor *mask)
{
	char bi[128], bm[128];
	if (!m || !m->layers || !m->embed.weight) {
		tensor_error(TENSOR_ERR_ARG, "model_encoder_forward: encoder is NULL or not "
					     "initialised");
		return false;
	}
	tensor_shape_str(ids, bi, sizeof bi);
	if (ids->dtype != TENSOR_I32 && ids->dtype != TENSOR_I64) {
		tensor_error(TENSOR_ERR_DTYPE,
			     "model_encoder_forward: ids %s must be i32 or i64, "
			     "got %s",
			     bi, tensor_dtype_name(ids->dtype));
		return false;
	}
	if (ids->ndim != 2 || ids->shape[1] < 1) {
		tensor_error(TENSOR_ERR_SHAPE,
			     "model_encoder_forward: ids %s must be [B, T] with "
			     "T >= 1",
			     bi);
		return false;
	}
	if (ids->shape[1] > m->cfg.max_len) {
		tensor_error(TENSOR_ERR_SHAPE,
			     "model_encoder_forward: ids %s: T %lld is longer than max_len %lld",
			     bi, (long long)ids->shape[1], (long long)m->cfg.max_len);
		return false;
	}
	if (mask && (mask->ndim != 2 || mask->shape[0] != ids->shape[0] ||
		     mask->shape[1] != ids->shape[1])) {
		tensor_error(TENSOR_ERR_SHAPE,
			     "model_encoder_forward: mask %s must have the shape of ids %s",
			     tensor_shape_str(mask, bm, sizeof bm), bi);
		return false;
	}
	return true;
}

#define ROW_BLOCK 1024 /* query rows per block of layer_in_blocks */

static bool dropping(const struct nn_dropout *d)
{
	return d->ps && d->ps->training && d->p > 0;
}

/* The rows [b0, b0+nb) x [r0, r0+nr) of x [B,T,dim]: one sequence's run of
 * rows, or whole sequences, so the view is contiguous. */
static struct tensor *row_block(struct tensor *x, int64_t b0, int64_t nb, int64_t r0, int64_t nr)
{
	struct tensor *seqs = tensor_narrow(x, 0, b0, nb);
	return nr == x->shape[1] ? seqs : tensor_narrow(seqs, 1, r0, nr);
}

/* fn on each block of up to ROW_BLOCK rows of x [B,T,dim] (with the index of
 * its first sequence), each in a scope of its own; the first error stops. */
static int for_row_blocks(struct tensor *x, int (*fn)(struct tensor *xb, int64_t b0, void *ctx),
			  void *ctx)
{
	int64_t b = x->shape[0], t = x->shape[1];
	int64_t nr = t < ROW_BLOCK ? t : ROW_BLOCK, seqs = t < ROW_BLOCK ? ROW_BLOCK / t : 1;
	int rc = TENSOR_OK;
	for (int64_t b0 = 0; b0 < b && rc == TENSOR_OK; b0 += seqs) {
		int64_t nb = b - b0 < seqs ? b - b0 : seqs;
		for (int64_t r0 = 0; r0 < t && rc == TENSOR_OK; r0 += nr) {
			tensor_scope_begin();
			rc = fn(row_block(x, b0, nb, r0, t - r0 < nr ? t - r0 : nr), b0, ctx);
			tensor_scope_end();
		}
	}
	return rc;
}

struct block_ctx {
	const struct model_config *c;
	const struct model_layer *l;
	const struct nn_linformer_kv *kv;
};

/* A half's residual in place: xb += branch (pre-norm), or xb = norm(branch +
 * xb) (post-norm; branch is used up). */
static int residual_into(const struct model_config *c, const struct nn_layer_norm *ln,
			 const struct nn_rms_norm *rms, struct tensor *branch, struct tensor *xb)
{
	if (!branch)
		return tensor_last_status();
	if (c->pre_norm)
		return tensor_add_(xb, branch);
	struct tensor *y =
	    tensor_add_(branch, xb) == TENSOR_OK ? norm_forward(c, ln, rms, branch) : NULL;
	return y ? tensor_copy_(xb, y) : tensor_last_status();
}

/* One block of query rows xb (of sequences b0..) through the layer, in place:
 * x + attn(norm1(x)) then x + ff(norm2(x)), or the post-norm order. The
 * attention half has a scope of its own, so its temporaries are gone before
 * the feed-forward's come. norm1 of the block's rows is computed again rather
 * than kept from the keys and values: keeping the whole normalised stream
 * through the blocks would cost T x dim floats per sequence for one norm pass
 * (about 1.5% of the forward). */
static int block_forward(struct tensor *xb, int64_t b0, void *ctx)
{
	const struct block_ctx *bc = ctx;
	const struct model_config *c = bc->c;
	const struct model_layer *l = bc->l;
	tensor_scope_begin();
	struct tensor *in = c->pre_norm ? norm_forward(c, &l->ln1, &l->rms1, xb) : xb;
	int rc =
	    residual_into(c, &l->ln1, &l->rms1, nn_linformer_attend(&l->lin, in, bc->kv, b0), xb);
	tensor_scope_end();
	if (rc < 0)
		return rc;
	in = c->pre_norm ? norm_forward(c, &l->ln2, &l->rms2, xb) : xb;
	return residual_into(c, &l->ln2, &l->rms2, nn_feed_forward_forward(&l->ff, in), xb);
}

/* Without gradients or dropout, a layer of projected attention in place in x
 * (the caller's own): the keys and values first, from all positions; then
 * each block of query rows through attention and the feed-forward. The peak
 * is x, one normalised copy for the keys and values, and one block's working
 * set, instead of a handful of [B,T,dim] tensors. Query rows are independent
 * once the keys and values are projected to k: the result is the unblocked
 * one. */
static int layer_in_blocks(const struct model_config *c, const struct model_layer *l,
			   struct tensor *x, const struct tensor *real)
{
	struct nn_linformer_kv kv;
	tensor_scope_begin(); /* the layer's: the keys and values */
	tensor_scope_begin(); /* what only the keys and values need */
	int rc = nn_linformer_keys_values(
	    &l->lin, c->pre_norm ? norm_forward(c, &l->ln1, &l->rms1, x) : x, real, &kv);
	if (rc == TENSOR_OK) {
		kv.k = tensor_scope_keep(kv.k);
		kv.v = tensor_scope_keep(kv.v);
		struct tensor *mask = kv.mask;
		kv.mask = mask ? tensor_scope_keep(mask) : NULL;
		rc = kv.k && kv.v && (kv.mask || !mask) ? TENSOR_OK : tensor_last_status();
	}
	tensor_scope_end();
	if (rc == TENSOR_OK)
		rc = for_row_blocks(x, block_forward, &(struct block_ctx){ c, l, &kv });
	tensor_scope_end();
	return rc;
}

/* The final norm of the no-grad path, in place, a block at a time. */
static int final_norm_block(struct tensor *xb, int64_t b0, void *ctx)
{
	const struct model_encoder *m = ctx;
	(void)b0;
	struct tensor *y = norm_forward(&m->cfg, &m->final_ln, &m->final_rms, xb);
	return y ? tensor_copy_(xb, y) : tensor_last_status();
}

static bool blockable(const struct model_layer *l)
{
	return l->kind != NN_ATTN_STANDARD && !dropping(&l->drop) && !dropping(&l->lin.dropout) &&
	       !dropping(&l->ff.dropout);
}

/* One layer in a scope of its own whose only survivor is the output, copied
 * to the heap (so the previous layer's output can be freed at once). */
static struct tensor *layer_scoped(const struct model_config *c, const struct model_layer *l,
				   struct tensor *x, const struct tensor *real)
{
	tensor_scope_begin();
	struct tensor *y = layer_forward(c, l, x, real);
	tensor_heap_begin();
	struct tensor *out = y ? tensor_clone(y) : NULL;
	tensor_heap_end();
	tensor_scope_end();
	return out;
}

/* x [B, T, dim] plus the position embeddings, in x's buffer where it can be
 * (nn_position_forward_reuse), then the convolutional encoding if any (a new
 * tensor, reading padding, real == 0, as zeros); x itself without
 * positions. */
static struct tensor *add_positions(const struct model_encoder *m, struct tensor *x,
				    const struct tensor *real)
{
	x = m->cfg.positions == MODEL_POS_NONE ? x : nn_position_forward_reuse(&m->pos, x);
	return m->cfg.position_kernel > 0 ? nn_conv_position_forward(&m->pos_conv, x, real) : x;
}

/* Without gradients: the embedding's output, made in the caller's scope, is
 * the residual stream; layers of projected attention update
 * it in place (layer_in_blocks), as does the final norm; other layers run in
 * a scope of their own and hand over a heap copy (layer_scoped). Every
 * temporary dies in this function's scope; the stream comes back as it is,
 * or kept when a layer ran apart. */
static struct tensor *forward_no_grad(const struct model_encoder *m, const struct tensor *ids,
				      const struct tensor *mask)
{
	const struct model_config *c = &m->cfg;
	/* real and own: in the caller's scope */
	struct tensor *real = mask ? nn_mask_compare(mask, m->embed.weight->dtype, false) : NULL;
	struct tensor *own =
	    add_positions(m, mask && !real ? NULL : nn_embedding_forward(&m->embed, ids), real);
	tensor_scope_begin();
	struct tensor *x = nn_dropout_forward(&m->drop, own);
	/* The heap output of the last layer run apart: freed by hand as soon as
	 * the next layer has read it, so that at most two layer outputs are
	 * live (this function's scope would hold every one until its end). */
	struct tensor *carry = NULL;
	for (int64_t i = 0; x && i < c->layers; i++) {
		const struct model_layer *l = &m->layers[i];
		if ((x == own || x == carry) && blockable(l)) {
			if (layer_in_blocks(c, l, x, real) < 0)
				x = NULL;
			continue;
		}
		x = layer_scoped(c, l, x, real);
		tensor_free(carry);
		carry = x;
	}
	if (x && c->pre_norm && c->final_norm) {
		if (x == own || x == carry)
			x = for_row_blocks(x, final_norm_block, (void *)m) < 0 ? NULL : x;
		else
			x = norm_forward(c, &m->final_ln, &m->final_rms, x);
	}
	struct tensor *y = x == own ? own : x ? tensor_scope_keep(x) : NULL;
	tensor_scope_end();
	tensor_free(carry);
	return y;
}

struct tensor *model_encoder_forward(const struct model_encoder *m, const struct tensor *ids,
				     const struct tensor *mask)
{
	if (nn_require_scope("model_encoder_forward") < 0 || !ids || !check_inputs(m, ids, mask))
		return NULL;
	if (!ag_grad_enabled())
		return forward_no_grad(m, ids, mask);
	const struct model_config *c = &m->cfg;
	struct tensor *real = mask ? nn_mask_compare(mask, m->embed.weight->dtype, false) : NULL;
	struct tensor *x = mask && !real ? NULL : nn_embedding_forward(&m->embed, ids);
	x = nn_dropout_forward(&m->drop, add_positions(m, x, real));
	for (int64_t i = 0; x && i < c->layers; i++)
		x = layer_forward(c, &m->layers[i], x, real);
	if (c->pre_norm && c->final_norm)
		x = norm_forward(c, &m->final_ln, &m->final_rms, x);
	return x;
}

void model_encoder_set_sequential_heads(struct model_encoder *m, bool on)
{
	for (int64_t i = 0; m && m->layers && i < m->cfg.layers; i++) {
		m->layers[i].mha.sequential_heads = on;
		m->layers[i].lin.sequential_heads = on;
	}
}

void model_encoder_free(struct model_encoder *m)
{
	if (!m)
		return;
	for (int64_t i = 0; m->layers && i < m->cfg.layers; i++)
		layer_free(&m->layers[i]);
	free(m->layers);
	nn_embedding_free(&m->embed);
	nn_position_free(&m->pos);
	nn_conv_position_free(&m->pos_conv);
	nn_seq_proj_free(&m->shared_proj);
	nn_layer_norm_free(&m->final_ln);
	nn_rms_norm_free(&m->final_rms);
	*m = (struct model_encoder){ 0 };
}
