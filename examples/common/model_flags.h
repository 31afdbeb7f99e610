/* The model flags that linformer_imdb and linformer_mlm share: the encoder (--model to
 * --shared-kv-head, --dropout, --attn-dropout) and its tokenizer (--tokenizer, --vocab);
 * their defaults and flag-table entries, and the model_config and tokenizer they give.
 * Example support code: a bad setting prints "<prog>: --flag: ..." and exits 1
 * (flags_fail). */
#ifndef CFORMER_MODEL_FLAGS_H
#define CFORMER_MODEL_FLAGS_H

#include <stdbool.h>
#include <stdint.h>

#include "flags.h"
#include "models.h"
#include "text.h"

/* the kernel of --positions conv (nn_conv_position) without --pos-kernel */
#define MODEL_FLAGS_POS_KERNEL 3

struct model_flags {
	const char *model, *proj, *sharing, *k_schedule, *k_list, *activation, *norm, *positions;
	const char *tokenizer, *vocab;
	int64_t n, k, k_last, dim, heads, layers, ff, pos_kernel;
	double dropout, attn_dropout;
	bool swiglu, post_norm, conv_dense, shared_kv_head, xavier_projections, mask_empty_slots;
};

/* The defaults both programs use, for a struct model_flags initializer; each adds its own
 * .model, .n, .dim and .ff. */
#define MODEL_FLAGS_DEFAULTS                                                                    \
	.sharing = "headwise", .k_schedule = "constant", .activation = "gelu", .norm = "layer", \
	.positions = "learned", .tokenizer = "wordpiece", .vocab = NULL, .heads = 4,   \
	.layers = 2, .dropout = 0.1, .attn_dropout = 0.1

/* The flag-table entries of --model to --shared-kv-head, bound to the fields of m (a struct
 * model_flags of static storage); --n is at least n_min, with help n_help. --dropout and
 * --attn-dropout are the program's own entries (the help of --dropout differs). */
/* clang-format off */
#define MODEL_FLAGS_ENCODER(m, n_min, n_help)                                                      \
	FLAG_DEF_STRING("model", &(m).model, "NAME",                                               \
			"transformer | linformer | conv-linformer, or a per-layer pattern of "     \
			"S/L/C/M/X/R (standard, linear, conv, mean, max, random)"),                \
	FLAG_DEF_CHOICE("proj", &(m).proj, "linear|conv|mean|max|random",                          \
			"projection kind of the Linformer layers"),                                \
	FLAG_DEF_CHOICE("sharing", &(m).sharing, "none|headwise|kv|layerwise",                     \
			"projection sharing"),                                                     \
	FLAG_DEF_INT("n", &(m).n, n_min, 1 << 20, "N", n_help),                                    \
	FLAG_DEF_INT("k", &(m).k, 0, 1 << 20, "K",                                                 \
		     "projected length of the Linformer layers (0: min(128, n/2))"),               \
	FLAG_DEF_CHOICE("k-schedule", &(m).k_schedule, "constant|linear|list",                     \
			"k per layer: k everywhere, linear from k to --k-last, or --k-list"),      \
	FLAG_DEF_INT("k-last", &(m).k_last, 0, 1 << 20, "K",                                       \
		     "k of the last layer for --k-schedule linear"),                               \
	FLAG_DEF_STRING("k-list", &(m).k_list, "K1,K2,..",                                         \
			"k of each layer for --k-schedule list"),                                  \
	FLAG_DEF_INT("dim", &(m).dim, 1, 1 << 16, "D", "model width"),                             \
	FLAG_DEF_INT("heads", &(m).heads, 1, 1024, "H", "attention heads (must divide --dim)"),    \
	FLAG_DEF_INT("layers", &(m).layers, 1, MODEL_MAX_LAYERS, "L",                              \
		     "encoder layers (a pattern sets its own)"),                                   \
	FLAG_DEF_INT("ff", &(m).ff, 1, 1 << 20, "F", "feed-forward hidden width"),                 \
	FLAG_DEF_CHOICE("activation", &(m).activation, "relu|gelu|gelu_tanh|silu",                 \
			"feed-forward activation"),                                                \
	FLAG_DEF_BOOL("swiglu", &(m).swiglu,                                                       \
		      "gated SwiGLU feed-forward instead of --activation"),                        \
	FLAG_DEF_CHOICE("norm", &(m).norm, "layer|rms", "LayerNorm or RMSNorm"),                   \
	FLAG_DEF_BOOL("post-norm", &(m).post_norm,                                                 \
		      "post-norm residual blocks (default: pre-norm)"),                            \
	FLAG_DEF_CHOICE("positions", &(m).positions, "learned|sinusoidal|none|conv",               \
			"position embeddings (none: the attention sees a set of tokens; conv: "    \
			"no table, a convolution gives each token its neighbours)"),               \
	FLAG_DEF_INT("pos-kernel", &(m).pos_kernel, 0, 1023, "K",                                  \
		     "odd kernel of --positions conv (0: 3)"),                                     \
	FLAG_DEF_BOOL("conv-dense", &(m).conv_dense,                                               \
		      "conv projections mix every channel (not per head)"),                        \
	FLAG_DEF_BOOL("xavier-proj", &(m).xavier_projections,                                      \
		      "learned projections start as xavier noise, not window means"),              \
	FLAG_DEF_BOOL("mask-empty-slots", &(m).mask_empty_slots,                                   \
		      "learned projections mask the slots of windows with no real token, as "      \
		      "conv ones do"),                                                             \
	FLAG_DEF_BOOL("shared-kv-head", &(m).shared_kv_head,                                       \
		      "one key/value head shared by all query heads")
/* The entries of --tokenizer and --vocab. */
#define MODEL_FLAGS_TOKENIZER(m)                                                                   \
	FLAG_DEF_CHOICE("tokenizer", &(m).tokenizer, "wordpiece|byte",                             \
			"WordPiece with --vocab, or bytes"),                                       \
	FLAG_DEF_STRING("vocab", &(m).vocab, "FILE",                                               \
			"WordPiece vocabulary (default: the bundled BERT uncased vocab.txt)")
/* clang-format on */

/* After flags_parse: --k-list needs --k-schedule list and --k-last needs --k-schedule linear;
 * exits 1 naming the flag otherwise. */
void model_flags_check(const struct model_flags *m, const char *prog);

/* The encoder m describes, for tokenizer tok: model_config_preset of --model (a preset at
 * --layers, or a pattern), --proj for its Linformer layers, k per layer, sizes, options and
 * dropout, pad_id from tok. flags is the program's table (whether --layers was given). The
 * head's fields and the seed stay the preset's: set them, then model_config_resolve. Exits 1
 * on an unknown --model, --layers unlike the pattern's, --proj with no Linformer layer to
 * apply to, --k-schedule list without a valid --k-list of one k per layer. */
void model_flags_config(struct model_config *c, const struct model_flags *m,
			const struct text_tokenizer *tok, struct flag *flags, int nflags,
			const char *prog);

/* The tokenizer of --tokenizer and --vocab; for a checkpoint's model of vocab_size ids
 * (0: none) with no --tokenizer given, bytes when it has the byte vocabulary's 261 ids.
 * flags is the program's table. Exits 1 when the vocabulary cannot be read, or when
 * vocab_size is not 0 and differs from the tokenizer's. */
void model_flags_tokenizer(struct text_tokenizer *tok, const struct model_flags *m,
			   int64_t vocab_size, struct flag *flags, int nflags, const char *prog);

#endif
