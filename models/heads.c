/* Heads on the encoder: sequence classification (masked mean or max pooling or
 * the first token, then two fully connected layers) and the masked-language-model
 * head (dense, activation, LayerNorm, decoder tied to the token embedding or
 * untied, with bias). */
#include <math.h>

#include "models.h"
#include "nn_internal.h"

#define NORM_EPS 1e-5

/* The activation of the heads: the feed-forward's, silu for SwiGLU models. */
static enum nn_activation head_activation(const struct model_config *c)
{
	return c->swiglu ? NN_SILU : c->activation;
}

/* ---- sequence classifier ------------------------------------------------------ */

int model_classifier_init(struct model_classifier *m, struct nn_params *ps,
			  const struct model_config *cfg)
{
	if (!m)
		return tensor_error(TENSOR_ERR_ARG, "model_classifier_init: classifier is NULL");
	*m = (struct model_classifier){ 0 };
	int rc = model_encoder_init(&m->enc, ps, cfg);
	const struct model_config *c = &m->enc.cfg;
	if (rc == TENSOR_OK)
		rc = nn_linear_init(&m->fc1, ps, "head.fc1", c->dim, c->head_hidden, true);
	if (rc == TENSOR_OK)
		rc = nn_linear_init(&m->fc2, ps, "head.fc2", c->head_hidden, c->num_classes, true);
	if (rc == TENSOR_OK)
		rc = nn_dropout_init(&m->drop, ps, c->dropout);
	if (rc == TENSOR_OK && c->pooling == MODEL_POOL_ATTENTION) {
		m->pool_query = nn_param_new(ps, "head.pool.query", 1, &c->dim, false);
		rc = m->pool_query ? TENSOR_OK : tensor_last_status();
	}
	if (rc < 0)
		model_classifier_free(m);
	return rc;
}

/* Mean of h [B,T,d] over the real tokens (mask != 0) of each row -> [B,d]; a
 * row without real tokens gives zeros. Without a mask, the mean over T. */
static struct tensor *masked_mean(struct tensor *h, const struct tensor *mask)
{
	if (!h)
		return NULL;
	if (!mask)
		return ag_mean(h, 1, (int[]){ 1 }, false);
	enum tensor_dtype dt = h->dtype;
	enum tensor_device dev = h->storage->device;
	struct tensor *c = tensor_cast(mask, dt);
	struct tensor *zero = tensor_zeros(dt, dev, 0, NULL);
	struct tensor *one = tensor_ones(dt, dev, 0, NULL);
	struct tensor *w = tensor_ne(c, zero);			   /* [B,T] */
	struct tensor *cnt = tensor_sum(w, 1, (int[]){ 1 }, true); /* [B,1] */
	struct tensor *den = tensor_maximum(cnt, one);		   /* >= 1 */
	struct tensor *w3 = tensor_unsqueeze(w, 1);		   /* [B,1,T] */
	/* the weighted sum as a product, with no [B,T,d] temporary */
	struct tensor *s = ag_squeeze(ag_matmul(w3, h), 1); /* [B,d] */
	return den ? ag_div(s, den) : NULL;
}

/* Maximum of h [B,T,d] over the real tokens of each row, per feature -> [B,d];
 * a row without real tokens gives zeros. Without a mask, the max over T. */
static struct tensor *masked_max(struct tensor *h, const struct tensor *mask)
{
	if (!h)
		return NULL;
	if (!mask)
		return ag_max(h, 1, (int[]){ 1 }, false);
	struct tensor *zero = tensor_zeros(mask->dtype, mask->storage->device, 0, NULL);
	struct tensor *pad = tensor_eq(mask, zero);		      /* [B,T] */
	struct tensor *none = tensor_min(pad, 1, (int[]){ 1 }, true); /* [B,1] */
	struct tensor *pad3 = tensor_unsqueeze(pad, 2);		      /* [B,T,1] */
	return ag_masked_fill(ag_max(ag_masked_fill(h, pad3, -INFINITY), 1, (int[]){ 1 }, false),
			      none, 0);
}

/* Sum of h [B,T,d] over the real tokens of each row weighted by softmax(h q)
 * -> [B,d]; a row without real tokens gives zeros. */
static struct tensor *attention_pool(struct tensor *h, struct tensor *q, const struct tensor *mask)
{
	if (!h)
		return NULL;
	struct tensor *s = ag_squeeze(ag_matmul(h, ag_unsqueeze(q, 1)), 2); /* [B,T] */
	struct tensor *real = NULL;
	if (mask) {
		struct tensor *zero = tensor_zeros(mask->dtype, mask->storage->device, 0, NULL);
		real = tensor_cast(tensor_ne(mask, zero), h->dtype);
		/* finite, so that a row of padding is not NaN; exp underflows to 0 */
		s = ag_masked_fill(s, tensor_eq(mask, zero), -1e30);
	}
	struct tensor *p = ag_softmax(s, 1);
	if (mask)
		p = ag_mul(p, real); /* zeros the row of padding only */
	return ag_squeeze(ag_matmul(ag_unsqueeze(p, 1), h), 1);
}

struct tensor *model_classifier_forward(const struct model_classifier *m, const struct tensor *ids,
					const struct tensor *mask)
{
	if (nn_require_scope("model_classifier_forward") < 0 || !ids)
		return NULL;
	if (!m || !m->fc2.weight) {
		tensor_error(TENSOR_ERR_ARG,
			     "model_classifier_forward: classifier is NULL or not initialised");
		return NULL;
	}
	const struct model_config *c = &m->enc.cfg;
	struct tensor *h = model_encoder_forward(&m->enc, ids, mask);
	struct tensor *pooled = c->pooling == MODEL_POOL_CLS   ? ag_select(h, 1, 0)
				: c->pooling == MODEL_POOL_MAX ? masked_max(h, mask)
				: c->pooling == MODEL_POOL_ATTENTION
				    ? attention_pool(h, m->pool_query, mask)
				    : masked_mean(h, mask);
	struct tensor *z =
	    nn_activation_forward(head_activation(c), nn_linear_forward(&m->fc1, pooled));
	return nn_linear_forward(&m->fc2, nn_dropout_forward(&m->drop, z));
}

void model_classifier_free(struct model_classifier *m)
{
	if (!m)
		return;
	model_encoder_free(&m->enc);
	*m = (struct model_classifier){ 0 };
}

/* ---- masked-language-model head ------------------------------------------------- */

int model_mlm_init(struct model_mlm *m, struct nn_params *ps, const struct model_config *cfg)
{
	if (!m)
		return tensor_error(TENSOR_ERR_ARG, "model_mlm_init: model is NULL");
	*m = (struct model_mlm){ 0 };
	int rc = model_encoder_init(&m->enc, ps, cfg);
	const struct model_config *c = &m->enc.cfg;
	if (rc == TENSOR_OK)
		rc = nn_linear_init(&m->dense, ps, "mlm.dense", c->dim, c->dim, true);
	if (rc == TENSOR_OK)
		rc = nn_layer_norm_init(&m->norm, ps, "mlm.norm", c->dim, NORM_EPS);
	if (rc == TENSOR_OK && c->tie_embeddings) {
		/* logits = h E^T + b: a linear layer whose weight is the embedding */
		int64_t v = c->vocab_size;
		m->decoder_bias = nn_param_new(ps, "mlm.decoder.bias", 1, &v, true);
		if (m->decoder_bias)
			m->decoder = (struct nn_linear){ .weight = m->enc.embed.weight,
							 .bias = m->decoder_bias,
							 .in = c->dim,
							 .out = v };
		else
			rc = tensor_last_status();
	} else if (rc == TENSOR_OK) {
		rc = nn_linear_init(&m->decoder, ps, "mlm.decoder", c->dim, c->vocab_size, true);
		m->decoder_bias = m->decoder.bias;
	}
	if (rc < 0)
		model_mlm_free(m);
	return rc;
}

struct tensor *model_mlm_forward(const struct model_mlm *m, const struct tensor *ids,
				 const struct tensor *mask)
{
	if (nn_require_scope("model_mlm_forward") < 0 || !ids)
		return NULL;
	if (!m || !m->decoder.weight) {
		tensor_error(TENSOR_ERR_ARG, "model_mlm_forward: model is NULL or not initialised");
		return NULL;
	}
	struct tensor *h = model_encoder_forward(&m->enc, ids, mask);
	h = nn_activation_forward(head_activation(&m->enc.cfg), nn_linear_forward(&m->dense, h));
	h = nn_layer_norm_forward(&m->norm, h);
	return nn_linear_forward(&m->decoder, h);
}

void model_mlm_free(struct model_mlm *m)
{
	if (!m)
		return;
	model_encoder_free(&m->enc);
	nn_linear_free(&m->dense);
	nn_linear_free(&m->decoder);
	nn_layer_norm_free(&m->norm);
	*m = (struct model_mlm){ 0 };
}
