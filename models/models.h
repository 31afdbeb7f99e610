/* cformer models: one configurable encoder covering the Transformer, the
 * Linformer and the Conv-Linformer, and the sequence-classification and
 * masked-language-model heads. Built on nn.h; parameter names follow the
 * usual PyTorch layout ("embed.weight", "layers.3.attn.q_proj.weight", ...).
 * The forwards, as nn's, run inside an open scope (tensor_scope_begin/end):
 * the result lives in the caller's scope; outside one (or in heap mode) they
 * return NULL with TENSOR_ERR_STATE naming the function, allocating nothing.
 */
#ifndef CFORMER_MODELS_H
#define CFORMER_MODELS_H

#include <stdio.h>

#include "nn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MODEL_MAX_LAYERS 64

#define MODEL_PROJ_INIT_NOISE 0.1

enum model_k_schedule { MODEL_K_CONSTANT, MODEL_K_LINEAR, MODEL_K_LIST };
/* MEAN, MAX: over the real tokens; CLS: the first token; ATTENTION: a softmax
 * over the real tokens of h q (q a learned vector, "head.pool.query", zero at
 * first, so the pooling starts as the mean) weighting their sum. */
enum model_pooling {
	MODEL_POOL_MEAN,
	MODEL_POOL_CLS,
	MODEL_POOL_MAX,
	MODEL_POOL_ATTENTION,
	MODEL_NPOOL
};
/* LEARNED: a table [n, dim] ("pos.weight"); SINUSOIDAL: the fixed sinusoids
 * of Vaswani et al.; NONE: the stream starts as the token embedding, so
 * standard attention sees a set (a Linformer projection still weighs
 * positions with its own weights, a convolutional encoding gives each token
 * its neighbours). */
enum model_positions {
	MODEL_POS_LEARNED,
	MODEL_POS_SINUSOIDAL,
	MODEL_POS_NONE,
	MODEL_NPOS
};

/* The model configuration. Its members, with their types, JSON keys, ranges,
 * flags and meanings, are listed once, in model_config_fields.h, and declared
 * here from that list (in JSON order): vocab_size, max_len, dim, heads, layers,
 * ff_hidden, activation, swiglu, pre_norm, rms_norm, positions (+
 * position_kernel), final_norm, dropout, attn_dropout, pad_id, attention[] and
 * the k schedule (k_schedule, k_first, k_last, k[]), the projections'
 * sharing and options, the heads' num_classes, head_hidden, pooling and
 * tie_embeddings, and the seed. Execution choices (sequential heads, row
 * blocks, threads) are run options, never fields. */
#include "model_config_fields.h"

#define MODEL_CONFIG_MEMBER(a, type, name, dims, ...) type name dims;
struct model_config {
	MODEL_CONFIG_FIELDS(MODEL_CONFIG_MEMBER, )
};
#undef MODEL_CONFIG_MEMBER

/* The JSON form of a field (the kind column of model_config_fields.h). */
enum model_field_kind {
	MODEL_FIELD_INT,    /* int64_t, within [min, max] */
	MODEL_FIELD_BOOL,   /* bool */
	MODEL_FIELD_DOUBLE, /* double, within [min, max) */
	MODEL_FIELD_SEED,   /* uint64_t: a number up to 2^53, a decimal string beyond */
	/* enums written by name (model_field_enum_name) */
	MODEL_FIELD_ACTIVATION,
	MODEL_FIELD_K_SCHEDULE,
	MODEL_FIELD_SHARING,
	MODEL_FIELD_POSITIONS,
	MODEL_FIELD_POOLING,
	/* arrays of one entry per layer */
	MODEL_FIELD_ATTENTION, /* enum nn_attn_kind by name */
	MODEL_FIELD_K,	       /* int64_t within [min, max] */
	MODEL_NFIELD_KINDS
};
/* Which flag macro of the example programs generates a field's flag. */
enum model_field_group {
	MODEL_FIELD_ENC,      /* MODEL_FLAGS_ENCODER, default: the field's */
	MODEL_FIELD_ENC_PROG, /* MODEL_FLAGS_ENCODER, default: the program's (0: derived) */
	MODEL_FIELD_HEAD,     /* MODEL_FLAGS_CLASSIFIER */
	MODEL_FIELD_NONE      /* no generated flag */
};

/* One row of model_config_fields.h. */
struct model_config_field {
	const char *name; /* member and JSON key */
	enum model_field_kind kind;
	enum model_field_group group;
	size_t offset, size; /* of the member in struct model_config */
	double min, max;     /* INT and K: [min, max]; DOUBLE: [min, max) */
	double def;	     /* the default (model_config_preset) */
	const char *flag;    /* the generated flag (without "--"), or NULL */
	const char *metavar; /* its metavar; an enum's choices "a|b|c" */
	const char *help;
};
/* The fields in struct (and JSON) order: i in [0, model_config_field_count()). */
int model_config_field_count(void);
const struct model_config_field *model_config_field(int i);
/* The field called name, or NULL. */
const struct model_config_field *model_config_field_find(const char *name);
/* The name of value v of an enum kind, NULL for v out of range or another kind;
 * model_field_enum_count: how many values it has (0 for a kind not an enum). */
const char *model_field_enum_name(enum model_field_kind kind, int v);
int model_field_enum_count(enum model_field_kind kind);

/* The defaults of model_config_fields.h (dim 256, 4 heads, 4 layers, ff 1024,
 * gelu, pre-norm LayerNorm, learned positions, dropout 0.1, k min(128, max_len),
 * headwise sharing, mean pooling) for a preset: "transformer" (all standard), "linformer" (all learned
 * projections), "conv-linformer" (first half learned, the rest conv, after
 * Malard), or a per-layer pattern of letters S/L/C/M/X/R (standard, linear,
 * conv, mean, max, random), e.g. "LLCC", which also sets layers; a preset may
 * carry its depth as "name:layers" (e.g. "conv-linformer:6"). */
int model_config_preset(struct model_config *c, const char *preset, int64_t vocab_size,
			int64_t max_len);
/* Validate and fill c->k[] from the k schedule (entries past c->layers are
 * cleared, so equal configs compare equal). Errors: a field outside its range
 * or an enum outside its values (model_config_fields.h), heads not
 * dividing dim, k > n, n % k for conv/pooling, layerwise sharing with a k that
 * differs between layers, or mixing layerwise sharing with more than one
 * projection kind (the message names the layer and the rule). */
int model_config_resolve(struct model_config *c);
/* JSON of every field (malloc'd; keys are the field names) and back: keys left
 * out take the transformer preset's defaults; an unknown or duplicate key, a
 * wrong type, a number outside its field's range or an unknown name is an error
 * naming the key; the keys of older configs are read (sequential_heads, now a
 * run option, is ignored). */
char *model_config_to_json(const struct model_config *c);
int model_config_from_json(struct model_config *c, const char *json);
/* "mean", "cls", "max" or "attention" -> its enum model_pooling; -1 for any other. */
int model_pooling_parse(const char *name);
/* "learned", "sinusoidal" or "none" <-> enum model_positions; -1 / "unknown" else. */
int model_positions_parse(const char *name);
const char *model_positions_name(enum model_positions p);

/* One encoder layer: norm, attention, residual, norm, feed-forward, residual. */
struct model_layer {
	enum nn_attn_kind kind;
	struct nn_mha mha;         /* NN_ATTN_STANDARD */
	struct nn_linformer lin;   /* the projected kinds */
	struct nn_layer_norm ln1, ln2;
	struct nn_rms_norm rms1, rms2;
	struct nn_feed_forward ff;
	struct nn_dropout drop;
};

struct model_encoder {
	struct model_config cfg;
	struct nn_embedding embed;
	struct nn_position pos;
	struct nn_conv_position pos_conv;
	struct nn_dropout drop;
	struct model_layer *layers;
	struct nn_seq_proj shared_proj; /* layerwise sharing */
	struct nn_layer_norm final_ln;
	struct nn_rms_norm final_rms;
	int param_first, param_count; /* its parameters: ps->items[param_first ..+ param_count) */
};

/* Parameters under "embed.", "pos.", "pos_conv.", "layers.<i>.{attn,norm1,norm2,ff}.",
 * "norm.", "proj." (layerwise); cfg must be resolved (model_config_resolve). */
int model_encoder_init(struct model_encoder *m, struct nn_params *ps,
		       const struct model_config *cfg);
/* ids [B, T] (i32/i64, T <= max_len), mask [B, T] (1 = real token, 0 =
 * padding) or NULL -> hidden states [B, T, dim], in the caller's scope. In
 * no-grad mode (models/encoder_infer.c) each layer runs in an inner scope
 * and only its output is kept, layers of projected attention a block of
 * query rows at a time, so the peak memory is one layer's (or block's)
 * working set; the result is the taped forward's. Errors: encoder not
 * initialised, ids not [B, T] i32/i64 with 1 <= T <= max_len, mask not of
 * ids' shape; outside a scope. */
struct tensor *model_encoder_forward(const struct model_encoder *m, const struct tensor *ids,
				     const struct tensor *mask);
/* A run option, not part of the config (never saved): every layer computes
 * attention one head at a time (nn_mha / nn_linformer sequential_heads), the
 * same result with a lower peak memory without grad. Off after init. */
void model_encoder_set_sequential_heads(struct model_encoder *m, bool on);
/* Free the layer array (the parameters are ps's: nn_params_free frees them and every
 * table the modules keep, so a model is freed by this call and nn_params_free). */
void model_encoder_free(struct model_encoder *m);
/* Whether the parameter called name is one of those model_encoder_init registered for m in
 * ps, the list m was built in (the embedding, the positions and their convolution, the
 * layers, the final norm, a layerwise projection) rather than a head's: the list of what a
 * pretrained encoder hands on to a new model. false for m or ps NULL, m not initialised or
 * not built in ps. */
bool model_encoder_has_param(const struct model_encoder *m, const struct nn_params *ps,
			     const char *name);

/* Sequence classifier: encoder, pooling (masked mean, masked max per feature,
 * the first token, or attention with "head.pool.query"), "head.fc1" dim ->
 * head_hidden, activation, dropout, "head.fc2" -> classes. */
struct model_classifier {
	struct model_encoder enc;
	struct nn_linear fc1, fc2;
	struct nn_dropout drop;
	struct tensor *pool_query; /* [dim], attention pooling only */
};
int model_classifier_init(struct model_classifier *m, struct nn_params *ps,
			  const struct model_config *cfg);
/* ids, mask as model_encoder_forward -> logits [B, num_classes]. Errors: as
 * model_encoder_forward's; classifier not initialised. */
struct tensor *model_classifier_forward(const struct model_classifier *m,
					const struct tensor *ids, const struct tensor *mask);
void model_classifier_free(struct model_classifier *m); /* as model_encoder_free */

/* Masked-language-model head: "mlm.dense" dim -> dim, activation, "mlm.norm",
 * decoder to the vocabulary (tied to "embed.weight" by default, else
 * "mlm.decoder.weight") plus "mlm.decoder.bias". */
struct model_mlm {
	struct model_encoder enc;
	struct nn_linear dense, decoder;
	struct nn_layer_norm norm;
	struct tensor *decoder_bias;
};
int model_mlm_init(struct model_mlm *m, struct nn_params *ps, const struct model_config *cfg);
/* ids, mask as model_encoder_forward -> logits [B, T, vocab_size]. Errors:
 * as model_encoder_forward's; model not initialised. */
struct tensor *model_mlm_forward(const struct model_mlm *m, const struct tensor *ids,
				 const struct tensor *mask);
void model_mlm_free(struct model_mlm *m); /* as model_encoder_free */

/* The parameter count predicted by the formulas of docs/models.md (encoder,
 * plus the classifier head if with_classifier, plus the MLM head if with_mlm),
 * to compare with nn_params_count. */
int64_t model_param_count(const struct model_config *c, bool with_classifier, bool with_mlm);
/* The layer kinds of c as pattern letters (S/L/C/M/X/R, '?' for an unknown kind), one per
 * layer up to MODEL_MAX_LAYERS, NUL-terminated in out; returns out ("" for c NULL). */
const char *model_config_pattern(const struct model_config *c, char out[MODEL_MAX_LAYERS + 1]);
/* The model config saved in the checkpoint at path, checked against the file's
 * tensor headers (nn_checkpoint_info) before anything is allocated:
 * embed.weight must be [vocab_size, dim], a learned pos.weight [max_len, dim],
 * the layers those the names show, and the parameter count that of the config
 * with a classifier or an MLM head. Errors name the file and the field. */
int model_config_from_checkpoint(const char *path, struct model_config *c);
/* The same check of a config against a checkpoint's info (path for messages). */
int model_config_check_checkpoint(const struct model_config *c, const char *path,
				  const struct nn_checkpoint_info *info);
/* An estimate of the peak bytes of running c on batches of `batch` sequences of
 * max_len tokens, f32: training (parameters, gradients, AdamW's moments and the
 * activations the tape saves, calibrated on bench/train_throughput's peaks) or
 * no-grad inference (parameters and one layer's working set); mlm adds the
 * decoder's logits. -1 for an invalid config or batch < 1. */
double model_estimate_bytes(const struct model_config *c, int64_t batch, bool training, bool mlm);
/* One line: preset/pattern, sizes, k per layer, sharing, parameter count. */
void model_summary(const struct model_config *c, int64_t params, FILE *f);

#ifdef __cplusplus
}
#endif

#endif
