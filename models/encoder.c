/* The configurable encoder: token embedding, positions, a stack of
 * {norm, attention, residual, norm, feed-forward, residual} layers whose
 * attention kind is chosen per layer, and the final norm. This file has the
 * module and the taped forward; without gradients, model_encoder_forward runs
 * the blocked forward of encoder_infer.c, which shares the halves' norm and
 * residual code below. */
#include <stdlib.h>
#include <string.h>

#include "models_internal.h"
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

struct tensor *model_norm_forward(const struct model_config *c, const struct nn_layer_norm *ln,
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
	m->param_first = ps->n;
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
	else
		m->param_count = ps->n - m->param_first;
	return rc;
}

bool model_encoder_has_param(const struct model_encoder *m, const struct nn_params *ps,
			     const char *name)
{
	if (!m || !ps || !name || !m->layers || m->param_first + m->param_count > ps->n ||
	    ps->items[m->param_first].value != m->embed.weight) /* its first: the embedding */
		return false;
	for (int i = m->param_first; i < m->param_first + m->param_count; i++)
		if (!strcmp(ps->items[i].name, name))
			return true;
	return false;
}

static struct tensor *attention_forward(const struct model_layer *l, struct tensor *x,
					const struct tensor *real)
{
	if (l->kind == NN_ATTN_STANDARD)
		return nn_mha_forward(&l->mha, x, real, false);
	return nn_linformer_forward(&l->lin, x, real);
}

struct tensor *model_half_input(const struct model_config *c, const struct nn_layer_norm *ln,
				const struct nn_rms_norm *rms, struct tensor *x)
{
	return c->pre_norm ? model_norm_forward(c, ln, rms, x) : x;
}

struct tensor *model_half_output(const struct model_config *c, const struct nn_layer_norm *ln,
				 const struct nn_rms_norm *rms, const struct nn_dropout *drop,
				 struct tensor *x, struct tensor *branch)
{
	struct tensor *sum = ag_add_reuse(nn_dropout_forward(drop, branch), x);
	return c->pre_norm ? sum : model_norm_forward(c, ln, rms, sum);
}

/* Pre-norm x + attn(norm1(x)), post-norm norm1(x + attn(x)). */
struct tensor *model_attention_half(const struct model_config *c, const struct model_layer *l,
				    struct tensor *x, const struct tensor *real)
{
	struct tensor *a = attention_forward(l, model_half_input(c, &l->ln1, &l->rms1, x), real);
	return model_half_output(c, &l->ln1, &l->rms1, &l->drop, x, a);
}

/* Pre-norm x + ff(norm2(x)), post-norm norm2(x + ff(x)). */
struct tensor *model_ff_half(const struct model_config *c, const struct model_layer *l,
			     struct tensor *x)
{
	struct tensor *f =
	    nn_feed_forward_forward(&l->ff, model_half_input(c, &l->ln2, &l->rms2, x));
	return model_half_output(c, &l->ln2, &l->rms2, &l->drop, x, f);
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

/* The token embedding plus the position embeddings, in the embedding's
 * buffer where it can be (nn_position_forward_reuse), then the convolutional
 * encoding if any (a new tensor, reading padding, real == 0, as zeros). */
struct tensor *model_encoder_embed(const struct model_encoder *m, const struct tensor *ids,
				   const struct tensor *mask, struct tensor **real)
{
	*real = mask ? nn_mask_compare(mask, m->embed.weight->dtype, false) : NULL;
	if (mask && !*real)
		return NULL;
	struct tensor *x = nn_embedding_forward(&m->embed, ids);
	if (m->cfg.positions != MODEL_POS_NONE)
		x = nn_position_forward_reuse(&m->pos, x);
	return m->cfg.position_kernel > 0 ? nn_conv_position_forward(&m->pos_conv, x, *real) : x;
}

struct tensor *model_encoder_forward(const struct model_encoder *m, const struct tensor *ids,
				     const struct tensor *mask)
{
	if (nn_require_scope("model_encoder_forward") < 0 || !ids || !check_inputs(m, ids, mask))
		return NULL;
	if (!ag_grad_enabled())
		return model_encoder_infer(m, ids, mask);
	const struct model_config *c = &m->cfg;
	struct tensor *real;
	struct tensor *x = nn_dropout_forward(&m->drop, model_encoder_embed(m, ids, mask, &real));
	for (int64_t i = 0; x && i < c->layers; i++)
		x = model_ff_half(c, &m->layers[i],
				  model_attention_half(c, &m->layers[i], x, real));
	if (c->pre_norm && c->final_norm)
		x = model_norm_forward(c, &m->final_ln, &m->final_rms, x);
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
