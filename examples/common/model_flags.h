/* The model flags the example programs share: the encoder (--model to --shared-kv-head,
 * --dropout, --attn-dropout), the classifier head (--pooling, --head-hidden) and the
 * tokenizer (--tokenizer, --vocab); their defaults and flag-table entries, and the
 * model_config and tokenizer they give. Example support code: a bad setting prints
 * "<prog>: --flag: ..." and exits 1 (flags_fail).
 *
 * The flags of the config fields marked ENC, ENC_PROG or HEAD in models/model_config_fields.h
 * are generated from that list: name, metavar (an enum's choices), range, help and, for ENC
 * and HEAD, the default; each is bound to that field of struct model_flags' cfg. The others
 * are written here by hand because they are not one value of one field (model_flags_by_hand
 * says which field each sets and why). */
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
	/* the values of the generated flags, in the config fields they set */
	struct model_config cfg;
	/* the hand-written flags */
	const char *model, *proj, *k_list, *norm, *positions;
	const char *tokenizer, *vocab;
	int64_t n, pos_kernel, head_hidden;
	bool post_norm;
};

/* A config field set by hand-written flags (or by none), and why the flag is not generated. */
struct model_flags_field {
	const char *field; /* the config field */
	const char *flags; /* "--post-norm", or NULL: no flag sets it */
	const char *why;
};
/* Every field of group NONE in model_config_fields.h, NULL-terminated (tests check). */
extern const struct model_flags_field model_flags_by_hand[];

/* Generated: per field, by group (ENC, ENC_PROG, HEAD, NONE) and kind. */
/* clang-format off */
#define MODEL_FLAGS_DEF_INT(flag, ptr, lo, hi, mv, help) FLAG_DEF_INT(flag, ptr, lo, hi, mv, help),
#define MODEL_FLAGS_DEF_DOUBLE(flag, ptr, lo, hi, mv, help)                                        \
	FLAG_DEF_DOUBLE(flag, ptr, lo, hi, FLAG_MAX_OPEN, mv, help),
#define MODEL_FLAGS_DEF_BOOL(flag, ptr, lo, hi, mv, help) FLAG_DEF_BOOL(flag, ptr, help),
#define MODEL_FLAGS_DEF_ENUM(flag, ptr, lo, hi, mv, help) FLAG_DEF_ENUM(flag, ptr, mv, help),
#define MODEL_FLAGS_DEF_ACTIVATION MODEL_FLAGS_DEF_ENUM
#define MODEL_FLAGS_DEF_K_SCHEDULE MODEL_FLAGS_DEF_ENUM
#define MODEL_FLAGS_DEF_SHARING MODEL_FLAGS_DEF_ENUM
#define MODEL_FLAGS_DEF_POOLING MODEL_FLAGS_DEF_ENUM
#define MODEL_FLAGS_FLAG(m, name, kind, lo, hi, flag, mv, help)                                    \
	MODEL_FLAGS_DEF_##kind(flag, &(m).cfg.name, lo, hi, mv, help)
#define MODEL_FLAGS_ENC_ENC MODEL_FLAGS_FLAG
#define MODEL_FLAGS_ENC_ENC_PROG MODEL_FLAGS_FLAG
#define MODEL_FLAGS_ENC_HEAD(...)
#define MODEL_FLAGS_ENC_NONE(...)
#define MODEL_FLAGS_HEAD_ENC(...)
#define MODEL_FLAGS_HEAD_ENC_PROG(...)
#define MODEL_FLAGS_HEAD_HEAD MODEL_FLAGS_FLAG
#define MODEL_FLAGS_HEAD_NONE(...)
#define MODEL_FLAGS_X_ENC(m, type, name, dims, kind, group, lo, hi, def, flag, mv, help)           \
	MODEL_FLAGS_ENC_##group(m, name, kind, lo, hi, flag, mv, help)
#define MODEL_FLAGS_X_HEAD(m, type, name, dims, kind, group, lo, hi, def, flag, mv, help)          \
	MODEL_FLAGS_HEAD_##group(m, name, kind, lo, hi, flag, mv, help)
/* the table's default of an ENC or HEAD field, as a designated initializer */
#define MODEL_FLAGS_DEFAULT_ENC(name, def) .cfg.name = def,
#define MODEL_FLAGS_DEFAULT_HEAD(name, def) .cfg.name = def,
#define MODEL_FLAGS_DEFAULT_ENC_PROG(name, def)
#define MODEL_FLAGS_DEFAULT_NONE(name, def)
#define MODEL_FLAGS_X_DEFAULT(a, type, name, dims, kind, group, lo, hi, def, ...)                  \
	MODEL_FLAGS_DEFAULT_##group(name, def)
/* clang-format on */

/* The defaults of the flags for a struct model_flags initializer: the config's for the
 * generated flags but those of group ENC_PROG, which each program gives (.cfg.dim,
 * .cfg.ff_hidden, .cfg.layers; --k and --k-last default to 0: derived), and .n and .model. */
/* clang-format off */
#define MODEL_FLAGS_DEFAULTS                                                                       \
	MODEL_CONFIG_FIELDS(MODEL_FLAGS_X_DEFAULT, )                                               \
	.norm = "layer", .positions = "learned", .tokenizer = "wordpiece", .vocab = NULL
/* clang-format on */

/* The flag-table entries of --model to --shared-kv-head, --dropout and --attn-dropout, bound
 * to the fields of m (a struct model_flags of static storage); --n is at least n_min, with
 * help n_help. */
/* clang-format off */
#define MODEL_FLAGS_ENCODER(m, n_min, n_help)                                                      \
	FLAG_DEF_STRING("model", &(m).model, "NAME",                                               \
			"transformer | linformer | conv-linformer, or a per-layer pattern of "     \
			"S/L/C/M/X/R (standard, linear, conv, mean, max, random)"),                \
	FLAG_DEF_CHOICE("proj", &(m).proj, "linear|conv|mean|max|random",                          \
			"projection kind of the Linformer layers"),                                \
	FLAG_DEF_INT("n", &(m).n, n_min, 1 << 20, "N", n_help),                                    \
	MODEL_CONFIG_FIELDS(MODEL_FLAGS_X_ENC, m)                                                  \
	FLAG_DEF_STRING("k-list", &(m).k_list, "K1,K2,..",                                         \
			"k of each layer for --k-schedule list"),                                  \
	FLAG_DEF_CHOICE("norm", &(m).norm, "layer|rms", "LayerNorm or RMSNorm"),                   \
	FLAG_DEF_BOOL("post-norm", &(m).post_norm,                                                 \
		      "post-norm residual blocks (default: pre-norm)"),                            \
	FLAG_DEF_CHOICE("positions", &(m).positions, "learned|sinusoidal|none|conv",               \
			"position embeddings (none: the attention sees a set of tokens; conv: "    \
			"no table, a convolution gives each token its neighbours)"),               \
	FLAG_DEF_INT("pos-kernel", &(m).pos_kernel, 0, 1023, "K",                                  \
		     "odd kernel of --positions conv (0: 3)")
/* The entries of the classifier head: --pooling, --head-hidden. */
#define MODEL_FLAGS_CLASSIFIER(m)                                                                  \
	MODEL_CONFIG_FIELDS(MODEL_FLAGS_X_HEAD, m)                                                 \
	FLAG_DEF_INT("head-hidden", &(m).head_hidden, 0, 1 << 20, "H",                             \
		     "classifier hidden width (0: --dim)")
/* The entries of --tokenizer and --vocab. */
#define MODEL_FLAGS_TOKENIZER(m)                                                                   \
	FLAG_DEF_CHOICE("tokenizer", &(m).tokenizer, "wordpiece|byte",                             \
			"WordPiece with --vocab, or bytes"),                                       \
	FLAG_DEF_STRING("vocab", &(m).vocab, "FILE",                                               \
			"WordPiece vocabulary (default: the bundled BERT uncased vocab.txt)")
/* clang-format on */

/* The flag-table entries of the config fields named in fields (NULL-terminated; each with a
 * generated flag: group ENC, ENC_PROG or HEAD), bound to those fields of *cfg, as
 * MODEL_FLAGS_ENCODER and MODEL_FLAGS_CLASSIFIER generate them (name, type, range, metavar,
 * help; the default is what *cfg holds), written to out[0..); the first opens the --help
 * section `section` (or none: NULL). For programs that take some of the model flags beside
 * their own (the benchmarks). Returns the count; exits 1 on a field without a generated
 * flag or more than max fields. */
int model_flags_select(struct flag *out, int max, struct model_config *cfg,
		       const char *const *fields, const char *section, const char *prog);

/* The fields named in fields (NULL-terminated) from src into dst: what the flags of
 * model_flags_select set. */
void model_flags_copy(struct model_config *dst, const struct model_config *src,
		      const char *const *fields);

/* For a model whose config p comes from elsewhere (a checkpoint): the first flag of the
 * program's table that was given and sets a field of c (the config the flags describe) to
 * a value unlike p's, leaving out the fields named in keep (NULL-terminated: those the
 * program takes from its flags whatever p holds); NULL when none. The flags of a field:
 * its generated one, or those model_flags_by_hand lists. */
const char *model_flags_conflict(const struct model_config *c, const struct model_config *p,
				 const char *const *keep, struct flag *flags, int nflags);

/* After flags_parse: --k-list needs --k-schedule list and --k-last needs --k-schedule linear;
 * exits 1 naming the flag otherwise. */
void model_flags_check(const struct model_flags *m, const char *prog);

/* The model m describes, for tokenizer tok: model_config_preset of --model (a preset at
 * --layers, or a pattern), the generated flags' fields, --proj for its Linformer layers, k
 * per layer, norms, positions, head_hidden, pad_id from tok. flags is the program's table
 * (whether --layers was given). num_classes and the seed stay the preset's: set them, then
 * model_config_resolve. Exits 1
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
