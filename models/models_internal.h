/* What the encoder's taped forward (encoder.c) and its no-grad forward
 * (encoder_infer.c) share: the embedding of the stream, the norms and the
 * residual of a layer's halves. Not installed. */
#ifndef CFORMER_MODELS_INTERNAL_H
#define CFORMER_MODELS_INTERNAL_H

#include "models.h"

/* The norm of c's kind (RMSNorm rms or LayerNorm ln) of x. */
struct tensor *model_norm_forward(const struct model_config *c, const struct nn_layer_norm *ln,
				  const struct nn_rms_norm *rms, struct tensor *x);
/* What a half's branch (attention, feed-forward) reads of the stream x: its
 * norm with pre-norm, x itself with post-norm. */
struct tensor *model_half_input(const struct model_config *c, const struct nn_layer_norm *ln,
				const struct nn_rms_norm *rms, struct tensor *x);
/* A half's output from the stream x and its branch's output: x + drop(branch)
 * with pre-norm, norm(x + drop(branch)) with post-norm. The sum is written
 * into the branch's buffer (ag_add_reuse): the branch is used up. */
struct tensor *model_half_output(const struct model_config *c, const struct nn_layer_norm *ln,
				 const struct nn_rms_norm *rms, const struct nn_dropout *drop,
				 struct tensor *x, struct tensor *branch);
/* A layer's attention half and feed-forward half, on the whole stream x
 * [B,T,dim]; real [B,T] (nonzero = a real token) or NULL. */
struct tensor *model_attention_half(const struct model_config *c, const struct model_layer *l,
				    struct tensor *x, const struct tensor *real);
struct tensor *model_ff_half(const struct model_config *c, const struct model_layer *l,
			     struct tensor *x);
/* The stream entering the layers, before the embedding dropout: the token
 * embedding of ids plus the positions; *real is mask as 0/1 of the
 * parameters' dtype (nonzero = a real token), or NULL without a mask. In the
 * caller's scope; NULL on error. */
struct tensor *model_encoder_embed(const struct model_encoder *m, const struct tensor *ids,
				   const struct tensor *mask, struct tensor **real);
/* model_encoder_forward without gradients (encoder_infer.c), for checked
 * arguments inside a scope. */
struct tensor *model_encoder_infer(const struct model_encoder *m, const struct tensor *ids,
				   const struct tensor *mask);

#endif
