/* The one definition of struct model_config: every field once, in the order of
 * the struct and of its JSON. From this list come
 *   - the struct's members (models.h),
 *   - the field table of model_config_field() (models/config.c), which drives
 *     the JSON writing and reading, the range checks of model_config_resolve
 *     and the checks of the table against the enums' names (tests),
 *   - the example programs' command-line flags of the fields marked ENC or
 *     HEAD, with their --help text (examples/common/model_flags.h).
 * Included by models.h after the enums it names; not on its own.
 *
 * X(a, type, name, dims, kind, group, min, max, def, flag, metavar, help)
 *   a        passed through from MODEL_CONFIG_FIELDS(X, a)
 *   type     the C type of the member; dims "" or [MODEL_MAX_LAYERS]
 *   kind     the JSON form, a MODEL_FIELD_<kind>: INT, BOOL, DOUBLE, SEED (a
 *            64-bit unsigned number, a string beyond 2^53), an enum written by
 *            name (ACTIVATION, K_SCHEDULE, SHARING, POSITIONS, POOLING), or a
 *            per-layer array (ATTENTION, K: one entry per layer)
 *   group    which flag macro generates its flag: ENC (MODEL_FLAGS_ENCODER),
 *            ENC_PROG (the same, but the flag's default is the program's, or 0
 *            for "derived"), HEAD (MODEL_FLAGS_CLASSIFIER) or NONE (no flag, or
 *            hand-written ones that are not one value of the field:
 *            model_flags_by_hand in examples/common/model_flags.c)
 *   min, max the valid range of an INT (inclusive) or a DOUBLE ([min, max));
 *            checked when JSON is read, by model_config_resolve and by the flag
 *   def      the default (model_config_preset; a JSON key left out): a number,
 *            an enum's constant, 0/1 for a bool; vocab_size and max_len are the
 *            preset's arguments, layers, attention, k_first and k_last depend
 *            on them (the 128 of k_first/k_last is at most max_len)
 *   flag     the flag's name (without "--"), NULL for group NONE
 *   metavar  the flag's metavar; for an enum its choices, the enum's names in
 *            order joined by '|' (a test checks them against the names)
 *   help     what the field means: the flag's --help line
 *
 * The JSON keys are the member names; never rename one (checkpoints and the
 * PyTorch loader, bench/pytorch, read them). A new field needs
 * a default in model_config_preset, and its place in model_param_count if it
 * changes the parameters. */
#ifndef CFORMER_MODEL_CONFIG_FIELDS_H
#define CFORMER_MODEL_CONFIG_FIELDS_H

/* the largest integer a JSON number (a double) holds exactly: 2^53 */
#define MODEL_CONFIG_INT_MAX 9007199254740992.0

/* clang-format off */
#define MODEL_CONFIG_FIELDS(X, a)                                                                  \
	X(a, int64_t, vocab_size, , INT, NONE, 1, MODEL_CONFIG_INT_MAX, 0, NULL, NULL,             \
	  "token ids: the tokenizer's vocabulary")                                                 \
	X(a, int64_t, max_len, , INT, NONE, 1, MODEL_CONFIG_INT_MAX, 0, NULL, NULL,                \
	  "n: the longest input, in tokens")                                                       \
	X(a, int64_t, dim, , INT, ENC_PROG, 1, MODEL_CONFIG_INT_MAX, 256, "dim", "D",              \
	  "model width")                                                                           \
	X(a, int64_t, heads, , INT, ENC, 1, MODEL_CONFIG_INT_MAX, 4, "heads", "H",                 \
	  "attention heads (must divide --dim)")                                                   \
	X(a, int64_t, layers, , INT, ENC_PROG, 1, MODEL_MAX_LAYERS, 4, "layers", "L",              \
	  "encoder layers (a pattern sets its own)")                                               \
	X(a, int64_t, ff_hidden, , INT, ENC_PROG, 1, MODEL_CONFIG_INT_MAX, 1024, "ff", "F",        \
	  "feed-forward hidden width")                                                             \
	X(a, enum nn_activation, activation, , ACTIVATION, ENC, 0, 0, NN_GELU, "activation",       \
	  "relu|gelu|gelu_tanh|silu", "feed-forward activation")                                   \
	X(a, bool, swiglu, , BOOL, ENC, 0, 0, 0, "swiglu", NULL,                                   \
	  "gated SwiGLU feed-forward instead of --activation")                                     \
	X(a, bool, pre_norm, , BOOL, NONE, 0, 0, 1, NULL, NULL,                                    \
	  "pre-norm residual blocks (false: post-norm)")                                           \
	X(a, bool, rms_norm, , BOOL, NONE, 0, 0, 0, NULL, NULL, "RMSNorm instead of LayerNorm")    \
	/* LEARNED: a table [n, dim] ("pos.weight"); SINUSOIDAL; NONE: none */                     \
	X(a, enum model_positions, positions, , POSITIONS, NONE, 0, 0, MODEL_POS_LEARNED, NULL,    \
	  "learned|sinusoidal|none", "position embeddings")                                        \
	/* > 0: a convolutional position encoding of this (odd) kernel after the                   \
	 * table, if any (nn_conv_position, "pos_conv.weight"); 0: none */                         \
	X(a, int64_t, position_kernel, , INT, NONE, 0, MODEL_CONFIG_INT_MAX, 0, NULL, NULL,        \
	  "odd kernel of a convolutional position encoding (0: none)")                             \
	X(a, bool, final_norm, , BOOL, NONE, 0, 0, 1, NULL, NULL,                                  \
	  "a norm after the last pre-norm layer")                                                  \
	X(a, double, dropout, , DOUBLE, ENC, 0, 1, 0.1, "dropout", "P",                            \
	  "dropout of embeddings, residuals and feed-forward (and the classifier head)")           \
	X(a, double, attn_dropout, , DOUBLE, ENC, 0, 1, 0.1, "attn-dropout", "P",                  \
	  "dropout of attention probabilities")                                                    \
	/* -1: none; else also < vocab_size (model_config_resolve) */                              \
	X(a, int64_t, pad_id, , INT, NONE, -1, MODEL_CONFIG_INT_MAX, 0, NULL, NULL,                \
	  "the padding token's id (-1: none)")                                                     \
	/* attention per layer */                                                                  \
	X(a, enum nn_attn_kind, attention, [MODEL_MAX_LAYERS], ATTENTION, NONE, 0, 0, 0, NULL,     \
	  NULL,                                                                                    \
	  "attention kind of each layer")                                                          \
	X(a, enum model_k_schedule, k_schedule, , K_SCHEDULE, ENC, 0, 0, MODEL_K_CONSTANT,         \
	  "k-schedule", "constant|linear|list",                                                    \
	  "k per layer: k everywhere, linear from k to --k-last, or --k-list")                     \
	/* constant: k_first; linear: first -> last; 0 in a flag: its default */                   \
	X(a, int64_t, k_first, , INT, ENC_PROG, 0, MODEL_CONFIG_INT_MAX, 128, "k", "K",            \
	  "projected length of the Linformer layers (0: min(128, n/2))")                           \
	X(a, int64_t, k_last, , INT, ENC_PROG, 0, MODEL_CONFIG_INT_MAX, 128, "k-last", "K",        \
	  "k of the last layer for --k-schedule linear")                                           \
	/* resolved per layer (model_config_resolve) */                                            \
	X(a, int64_t, k, [MODEL_MAX_LAYERS], K, NONE, 0, MODEL_CONFIG_INT_MAX, 0, NULL, NULL,      \
	  "k of each layer")                                                                       \
	X(a, enum nn_proj_sharing, sharing, , SHARING, ENC, 0, 0, NN_SHARE_HEADWISE, "sharing",    \
	  "none|headwise|kv|layerwise", "projection sharing")                                      \
	X(a, bool, conv_dense, , BOOL, ENC, 0, 0, 0, "conv-dense", NULL,                           \
	  "conv projections mix every channel (not per head)")                                     \
	/* learned projections start as window means plus MODEL_PROJ_INIT_NOISE x                  \
	 * xavier noise (nn_seq_proj_init_windows); true: xavier noise alone */                    \
	X(a, bool, xavier_projections, , BOOL, ENC, 0, 0, 0, "xavier-proj", NULL,                  \
	  "learned projections start as xavier noise, not window means")                           \
	/* learned and random projections too mask, in the softmax, the projected                  \
	 * slots whose window (of the window-mean initialisation: n/k positions)                   \
	 * holds only padding or positions past T, as conv and pooling                             \
	 * projections always do; needs n % k == 0 */                                              \
	X(a, bool, mask_empty_slots, , BOOL, ENC, 0, 0, 0, "mask-empty-slots", NULL,               \
	  "learned projections mask the slots of windows with no real token, as conv ones do")     \
	X(a, bool, shared_kv_head, , BOOL, ENC, 0, 0, 0, "shared-kv-head", NULL,                   \
	  "one key/value head shared by all query heads")                                          \
	/* heads: the classifier is dim -> head_hidden -> num_classes */                           \
	X(a, int64_t, num_classes, , INT, NONE, 1, MODEL_CONFIG_INT_MAX, 2, NULL, NULL,            \
	  "classes of the classifier head")                                                        \
	X(a, int64_t, head_hidden, , INT, NONE, 1, MODEL_CONFIG_INT_MAX, 256, NULL, NULL,          \
	  "classifier hidden width")                                                               \
	X(a, enum model_pooling, pooling, , POOLING, HEAD, 0, 0, MODEL_POOL_MEAN, "pooling",       \
	  "mean|cls|max|attention",                                                                \
	  "classifier pooling: masked mean, the [CLS] token, masked max per feature, or a "        \
	  "softmax of h q over the tokens (q learned, zero at first: the mean)")                   \
	X(a, bool, tie_embeddings, , BOOL, NONE, 0, 0, 1, NULL, NULL,                              \
	  "MLM decoder tied to the token embedding")                                               \
	X(a, uint64_t, seed, , SEED, NONE, 0, 0, 0, NULL, NULL, "seed of the initial weights")
/* clang-format on */

#endif
