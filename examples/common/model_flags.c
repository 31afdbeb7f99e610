/* The model flags the example programs share: checks, model_config, tokenizer (see
 * model_flags.h). */
#define _POSIX_C_SOURCE 200809L
#include "model_flags.h"
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct model_flags_field model_flags_by_hand[] = {
	{ "vocab_size", NULL, "the tokenizer's (--tokenizer, --vocab)" },
	{ "max_len", "--n", "its lower bound and help are the program's" },
	{ "pre_norm", "--post-norm", "the flag is the negation" },
	{ "rms_norm", "--norm", "a choice layer|rms, not a bool" },
	{ "positions", "--positions", "its choice conv also sets position_kernel" },
	{ "position_kernel", "--positions --pos-kernel",
	  "--positions conv sets it, --pos-kernel 0 means 3 and needs --positions conv" },
	{ "final_norm", NULL, "always the preset's" },
	{ "pad_id", NULL, "the tokenizer's" },
	{ "attention", "--model --proj", "a preset name or pattern, then a kind for its L layers" },
	{ "k", "--k-list", "one k per layer, as text" },
	{ "num_classes", NULL, "the program's (the data's labels)" },
	{ "head_hidden", "--head-hidden", "0 means --dim" },
	{ "tie_embeddings", NULL, "always the preset's" },
	{ "seed", NULL, "the program's --seed, which seeds more than the weights" },
	{ NULL, NULL, NULL },
};

/* The flag type of a generated flag of kind k, and its open ends. */
static enum flag_type flag_type_of(enum model_field_kind k, int *open)
{
	*open = 0;
	switch (k) {
	case MODEL_FIELD_INT: return FLAG_INT;
	case MODEL_FIELD_DOUBLE: *open = FLAG_MAX_OPEN; return FLAG_DOUBLE;
	case MODEL_FIELD_BOOL: return FLAG_BOOL;
	default: return FLAG_ENUM; /* the enums written by name */
	}
}

int model_flags_select(struct flag *out, int max, struct model_config *cfg,
		       const char *const *fields, const char *section, const char *prog)
{
	int n = 0;
	for (; fields[n]; n++) {
		const struct model_config_field *f = model_config_field_find(fields[n]);
		if (!f || !f->flag || n == max) {
			fprintf(stderr, "%s: model_flags_select: '%s' %s\n", prog, fields[n],
				n == max ? "is one field too many" : "has no generated flag");
			exit(1);
		}
		int open;
		enum flag_type t = flag_type_of(f->kind, &open);
		bool ranged = t == FLAG_INT || t == FLAG_DOUBLE;
		out[n] = (struct flag){ .name = f->flag,
					.type = t,
					.value = (char *)cfg + f->offset,
					.min = ranged ? f->min : 0,
					.max = ranged ? f->max : 0,
					.open = open,
					.choices = t == FLAG_ENUM ? f->metavar : NULL,
					.metavar = t == FLAG_ENUM ? NULL : f->metavar,
					.help = f->help,
					.section = n == 0 ? section : NULL };
	}
	return n;
}

void model_flags_copy(struct model_config *dst, const struct model_config *src,
		      const char *const *fields)
{
	for (const char *const *n = fields; *n; n++) {
		const struct model_config_field *f = model_config_field_find(*n);
		if (f)
			memcpy((char *)dst + f->offset, (const char *)src + f->offset, f->size);
	}
}

/* Whether flag --name (without "--") was given. */
static bool given(struct flag *flags, int nflags, const char *name, size_t len)
{
	char buf[64];
	if (len >= sizeof buf)
		return false;
	memcpy(buf, name, len);
	buf[len] = '\0';
	return flags_given(flags, nflags, buf);
}

/* The first given flag of field f ("--a --b" of model_flags_by_hand, or its generated one),
 * or NULL. */
static const char *given_flag_of(const struct model_config_field *f, struct flag *flags, int nflags)
{
	if (f->flag)
		return flags_given(flags, nflags, f->flag) ? f->flag : NULL;
	for (const struct model_flags_field *h = model_flags_by_hand; h->field; h++) {
		if (strcmp(h->field, f->name) || !h->flags)
			continue;
		for (const char *p = h->flags; (p = strstr(p, "--"));) {
			p += 2;
			size_t len = strcspn(p, " ");
			if (given(flags, nflags, p, len)) {
				struct flag *fl = flags;
				while (strncmp(fl->name, p, len) || fl->name[len])
					fl++;
				return fl->name;
			}
			p += len;
		}
	}
	return NULL;
}

const char *model_flags_conflict(const struct model_config *c, const struct model_config *p,
				 const char *const *keep, struct flag *flags, int nflags)
{
	for (int i = 0; i < model_config_field_count(); i++) {
		const struct model_config_field *f = model_config_field(i);
		bool kept = false;
		for (const char *const *k = keep; k && *k && !kept; k++)
			kept = !strcmp(*k, f->name);
		if (kept ||
		    !memcmp((const char *)c + f->offset, (const char *)p + f->offset, f->size))
			continue;
		const char *flag = given_flag_of(f, flags, nflags);
		if (flag)
			return flag;
	}
	return NULL;
}

void model_flags_check(const struct model_flags *m, const char *prog)
{
	if (m->k_list && m->cfg.k_schedule != MODEL_K_LIST)
		flags_fail(prog, "k-list", "needs --k-schedule list");
	if (m->cfg.k_last && m->cfg.k_schedule != MODEL_K_LINEAR)
		flags_fail(prog, "k-last", "needs --k-schedule linear");
	if (m->pos_kernel && strcmp(m->positions, "conv"))
		flags_fail(prog, "pos-kernel", "needs --positions conv");
	if (m->pos_kernel && m->pos_kernel % 2 == 0)
		flags_fail(prog, "pos-kernel", "%lld is even: expected an odd kernel",
			   (long long)m->pos_kernel);
}

static bool is_preset(const char *model)
{
	return !strcmp(model, "transformer") || !strcmp(model, "linformer") ||
	       !strcmp(model, "conv-linformer");
}

/* c->k[] from --k-list, one positive k per layer. */
static void parse_k_list(struct model_config *c, const struct model_flags *m, const char *prog)
{
	const char *p = m->k_list;
	if (!p)
		flags_fail(prog, "k-schedule", "list needs --k-list K1,K2,.. (one k per layer)");
	for (int64_t i = 0; i < c->layers; i++) {
		char *end;
		errno = 0;
		long long v = strtoll(p, &end, 10);
		if (end == p || errno || v < 1 || (*end != ',' && *end) ||
		    (!*end && i + 1 < c->layers))
			flags_fail(prog, "k-list",
				   "expected %lld positive integers separated by commas, got '%s'",
				   (long long)c->layers, m->k_list);
		c->k[i] = v;
		p = *end ? end + 1 : end;
	}
	if (*p)
		flags_fail(prog, "k-list", "more than the %lld layers' values: '%s'",
			   (long long)c->layers, m->k_list);
}

/* Every Linformer (L) layer of --model becomes a --proj layer. */
static void apply_proj(struct model_config *c, const struct model_flags *m, const char *prog)
{
	bool any = false;
	enum nn_attn_kind a = (enum nn_attn_kind)nn_attn_kind_parse(m->proj);
	for (int64_t i = 0; i < c->layers; i++)
		if (c->attention[i] == NN_ATTN_LINEAR)
			c->attention[i] = a, any = true;
	if (!any)
		flags_fail(prog, "proj", "applies to Linformer (L) layers; --model %s has none",
			   m->model);
}

/* The fields of the generated flags (every group but NONE) from m->cfg into c. */
static void copy_flag_fields(struct model_config *c, const struct model_flags *m)
{
	for (int i = 0; i < model_config_field_count(); i++) {
		const struct model_config_field *f = model_config_field(i);
		if (f->group != MODEL_FIELD_NONE)
			memcpy((char *)c + f->offset, (const char *)&m->cfg + f->offset, f->size);
	}
}

void model_flags_config(struct model_config *c, const struct model_flags *m,
			const struct text_tokenizer *tok, struct flag *flags, int nflags,
			const char *prog)
{
	char preset[80];
	bool named = is_preset(m->model);
	if (named)
		snprintf(preset, sizeof preset, "%s:%lld", m->model, (long long)m->cfg.layers);
	else
		snprintf(preset, sizeof preset, "%s", m->model);
	if (model_config_preset(c, preset, tok->vocab_size, m->n) < 0)
		flags_fail(prog, "model", "%s", tensor_last_error());
	if (!named && flags_given(flags, nflags, "layers") && m->cfg.layers != c->layers)
		flags_fail(prog, "layers", "%lld differs from the %lld layers of the pattern '%s'",
			   (long long)m->cfg.layers, (long long)c->layers, m->model);
	int64_t layers = c->layers; /* --layers went into the preset; a pattern has its own */
	copy_flag_fields(c, m);
	c->layers = layers;
	if (m->proj)
		apply_proj(c, m, prog);
	if (!c->k_first)
		c->k_first = m->n / 2 < 128 ? m->n / 2 : 128;
	if (!c->k_last)
		c->k_last = c->k_first;
	if (c->k_schedule == MODEL_K_LIST)
		parse_k_list(c, m, prog);
	c->rms_norm = !strcmp(m->norm, "rms");
	c->pre_norm = !m->post_norm;
	bool conv = !strcmp(m->positions, "conv"); /* none + a convolutional encoding */
	c->positions =
	    conv ? MODEL_POS_NONE : (enum model_positions)model_positions_parse(m->positions);
	c->position_kernel = conv ? (m->pos_kernel ? m->pos_kernel : MODEL_FLAGS_POS_KERNEL) : 0;
	c->head_hidden = m->head_hidden ? m->head_hidden : c->dim;
	c->pad_id = tok->pad_id;
}

void model_flags_tokenizer(struct text_tokenizer *tok, const struct model_flags *m,
			   int64_t vocab_size, struct flag *flags, int nflags, const char *prog)
{
	bool bytes = !strcmp(m->tokenizer, "byte");
	if (vocab_size && !flags_given(flags, nflags, "tokenizer"))
		bytes = vocab_size == 261;
	char vocab[4096];
	if (!bytes && !m->vocab)
		example_data_path("bert-base-uncased-vocab.txt", vocab, sizeof vocab);
	int rc = bytes ? text_byte_init(tok)
		       : text_wordpiece_load(tok, m->vocab ? m->vocab : vocab);
	if (rc < 0)
		flags_fail(prog, bytes ? "tokenizer" : "vocab", "%s", tensor_last_error());
	if (vocab_size && tok->vocab_size != vocab_size)
		flags_fail(prog, "tokenizer",
			   "the checkpoint's model has %lld token ids, this tokenizer %lld: pass "
			   "the --tokenizer/--vocab it was trained with",
			   (long long)vocab_size, (long long)tok->vocab_size);
}
