/* examples/common/model_flags: the flags generated from the config's field list
 * (models/model_config_fields.h) against that list, the hand-written ones, and the config
 * the flags give. Example support code exits on a bad flag: those tests are exit tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model_flags.h"
#include "testutil.h"

static struct model_flags mf = { MODEL_FLAGS_DEFAULTS, .model = "linformer", .n = 64,
				 .cfg.dim = 32,	       .cfg.ff_hidden = 64,  .cfg.layers = 2 };
static struct flag flags[] = {
	MODEL_FLAGS_ENCODER(mf, 2, "sequence length"),
	MODEL_FLAGS_CLASSIFIER(mf),
	MODEL_FLAGS_TOKENIZER(mf),
};
#define NFLAGS ((int)(sizeof flags / sizeof flags[0]))

static bool generated(const struct model_config_field *f)
{
	return f->group != MODEL_FIELD_NONE;
}

/* The field's value as the flag's text, "" for none. */
static const char *field_text(const struct model_config *c, const struct model_config_field *f,
			      char *buf, size_t len)
{
	const char *p = (const char *)c + f->offset;
	switch (f->kind) {
	case MODEL_FIELD_INT: snprintf(buf, len, "%lld", (long long)*(const int64_t *)p); break;
	case MODEL_FIELD_DOUBLE: snprintf(buf, len, "%.17g", *(const double *)p); break;
	case MODEL_FIELD_BOOL: snprintf(buf, len, "%s", *(const bool *)p ? "true" : "false"); break;
	default: {
		const char *name = model_field_enum_name(f->kind, *(const int *)p);
		snprintf(buf, len, "%s", name ? name : "");
	}
	}
	return buf;
}

/* Each field of a generated group has its flag, bound to that field of mf.cfg, with the
 * field's name, kind, range, choices and help, and (ENC, HEAD) the field's default. */
START_TEST(test_generated_flags_match_fields)
{
	int generated_count = 0;
	for (int i = 0; i < model_config_field_count(); i++) {
		const struct model_config_field *f = model_config_field(i);
		if (!generated(f))
			continue;
		generated_count++;
		struct flag *fl = flags_find(flags, NFLAGS, f->flag);
		ck_assert_msg(fl != NULL, "field %s: no flag --%s", f->name, f->flag);
		ck_assert_msg(fl->value == (char *)&mf.cfg + f->offset, "--%s is not bound to %s",
			      f->flag, f->name);
		ck_assert_str_eq(fl->help, f->help);
		enum flag_type want = f->kind == MODEL_FIELD_INT      ? FLAG_INT
				      : f->kind == MODEL_FIELD_DOUBLE ? FLAG_DOUBLE
				      : f->kind == MODEL_FIELD_BOOL   ? FLAG_BOOL
								      : FLAG_ENUM;
		ck_assert_msg(fl->type == want, "--%s has type %d, want %d", f->flag, fl->type,
			      want);
		if (want == FLAG_INT || want == FLAG_DOUBLE) {
			ck_assert_msg(fl->min == f->min && fl->max == f->max, "--%s range",
				      f->flag);
			ck_assert_str_eq(fl->metavar, f->metavar);
		}
		if (want == FLAG_DOUBLE)
			ck_assert_int_eq(fl->open, FLAG_MAX_OPEN); /* [min, max) */
		if (want == FLAG_ENUM)
			ck_assert_str_eq(fl->choices, f->metavar);
		if (f->group == MODEL_FIELD_ENC || f->group == MODEL_FIELD_HEAD) {
			struct model_config d;
			ck_assert_int_eq(model_config_preset(&d, "transformer", 100, 512),
					 TENSOR_OK);
			char a[64], b[64];
			ck_assert_msg(!strcmp(field_text(&mf.cfg, f, a, sizeof a),
					      field_text(&d, f, b, sizeof b)),
				      "--%s defaults to %s, the field to %s", f->flag, a, b);
		}
	}
	ck_assert_int_gt(generated_count, 10);
}
END_TEST

/* The other fields are in model_flags_by_hand, once, with flags that exist. */
START_TEST(test_other_fields_by_hand)
{
	int listed = 0;
	for (const struct model_flags_field *h = model_flags_by_hand; h->field; h++, listed++) {
		const struct model_config_field *f = model_config_field_find(h->field);
		ck_assert_msg(f != NULL, "model_flags_by_hand: %s is not a config field", h->field);
		ck_assert_msg(!generated(f), "%s has a generated flag and is listed by hand",
			      h->field);
		ck_assert(h->why && *h->why);
		for (const struct model_flags_field *g = h + 1; g->field; g++)
			ck_assert_msg(strcmp(g->field, h->field), "%s listed twice", h->field);
		/* "--a --b": each a flag of the table */
		char names[64];
		snprintf(names, sizeof names, "%s", h->flags ? h->flags : "");
		for (char *save, *t = strtok_r(names, " ", &save); t;
		     t = strtok_r(NULL, " ", &save))
			ck_assert_msg(!strncmp(t, "--", 2) && flags_find(flags, NFLAGS, t + 2),
				      "%s: no flag %s", h->field, t);
	}
	int others = 0;
	for (int i = 0; i < model_config_field_count(); i++)
		others += !generated(model_config_field(i));
	ck_assert_int_eq(listed, others);
}
END_TEST

/* model_flags_select makes, at run time, the entries the macros generate: for every
 * generated field the same flag but for the config it is bound to, a section on the first. */
START_TEST(test_select_matches_generated)
{
	static struct model_config cfg;
	const char *names[64];
	int n = 0;
	for (int i = 0; i < model_config_field_count(); i++)
		if (generated(model_config_field(i)))
			names[n++] = model_config_field(i)->name;
	names[n] = NULL;
	struct flag got[64];
	ck_assert_int_eq(model_flags_select(got, 64, &cfg, names, "model", "test"), n);
	for (int i = 0; i < n; i++) {
		const struct model_config_field *f = model_config_field_find(names[i]);
		const struct flag *want = flags_find(flags, NFLAGS, f->flag);
		ck_assert_str_eq(got[i].name, want->name);
		ck_assert_int_eq(got[i].type, want->type);
		ck_assert(got[i].min == want->min && got[i].max == want->max);
		ck_assert_int_eq(got[i].open, want->open);
		ck_assert(!got[i].choices == !want->choices &&
			  (!want->choices || !strcmp(got[i].choices, want->choices)));
		ck_assert(!got[i].metavar == !want->metavar &&
			  (!want->metavar || !strcmp(got[i].metavar, want->metavar)));
		ck_assert_str_eq(got[i].help, want->help);
		ck_assert_ptr_eq(got[i].value, (char *)&cfg + f->offset);
		ck_assert(i == 0 ? !strcmp(got[i].section, "model") : got[i].section == NULL);
	}
}
END_TEST

/* A field without a generated flag is the program's error: exit 1. */
START_TEST(test_select_refuses_other_fields)
{
	static struct model_config cfg;
	struct flag out[2];
	model_flags_select(out, 2, &cfg, (const char *const[]){ "dim", "pad_id", NULL }, NULL,
			   "test");
}
END_TEST

/* model_flags_conflict: the first given flag whose field differs from the other config's,
 * generated or hand-written, the kept fields left out. */
START_TEST(test_conflict)
{
	char *argv[] = { "test",	"--dim", "32",	      "--model", "linformer",
			 "--positions", "conv",	 "--dropout", "0.3" };
	flags_parse(flags, NFLAGS, 9, argv, "test", "usage", NULL);
	struct text_tokenizer tok;
	ck_assert_int_eq(text_byte_init(&tok), TENSOR_OK);
	struct model_config c, p;
	model_flags_config(&c, &mf, &tok, flags, NFLAGS, "test");
	c.num_classes = 2;
	ck_assert_int_eq(model_config_resolve(&c), TENSOR_OK);
	p = c;
	ck_assert_ptr_null(model_flags_conflict(&c, &p, NULL, flags, NFLAGS));
	p.heads = 2; /* no --heads given */
	ck_assert_ptr_null(model_flags_conflict(&c, &p, NULL, flags, NFLAGS));
	p.dropout = 0.1; /* --dropout given, but kept */
	const char *const kept[] = { "dropout", NULL };
	ck_assert_ptr_null(model_flags_conflict(&c, &p, kept, flags, NFLAGS));
	ck_assert_str_eq(model_flags_conflict(&c, &p, NULL, flags, NFLAGS), "dropout");
	p.attention[0] = NN_ATTN_CONV; /* --model sets the kinds */
	ck_assert_str_eq(model_flags_conflict(&c, &p, kept, flags, NFLAGS), "model");
	p = c;
	p.position_kernel = 5; /* --positions conv set it to 3 */
	ck_assert_str_eq(model_flags_conflict(&c, &p, NULL, flags, NFLAGS), "positions");
	p.dim = 64; /* dim comes first in the field list */
	ck_assert_str_eq(model_flags_conflict(&c, &p, NULL, flags, NFLAGS), "dim");
	text_tokenizer_free(&tok);
}
END_TEST

/* Every generated flag given a value unlike its default reaches its field of the config. */
START_TEST(test_flags_reach_config)
{
	char *argv[2 * 64 + 1] = { "test" }, vals[64][32];
	int argc = 1, nv = 0;
	for (int i = 0; i < model_config_field_count(); i++) {
		const struct model_config_field *f = model_config_field(i);
		if (!generated(f))
			continue;
		char *v = vals[nv++], *name = vals[nv++];
		snprintf(name, 32, "--%s", f->flag);
		argv[argc++] = name;
		switch (f->kind) {
		case MODEL_FIELD_INT:
			snprintf(v, 32, "%s",
				 !strcmp(f->name, "layers")  ? "3"
				 : !strcmp(f->name, "heads") ? "2"
							     : "8");
			break;
		case MODEL_FIELD_DOUBLE: snprintf(v, 32, "0.25"); break;
		case MODEL_FIELD_BOOL: continue; /* present = true */
		default: {
			struct model_config d;
			ck_assert_int_eq(model_config_preset(&d, "transformer", 100, 512),
					 TENSOR_OK);
			int e = (*(const int *)((const char *)&d + f->offset) + 1) %
				model_field_enum_count(f->kind);
			snprintf(v, 32, "%s", model_field_enum_name(f->kind, e));
		}
		}
		argv[argc++] = v;
	}
	flags_parse(flags, NFLAGS, argc, argv, "test", "usage", NULL);
	model_flags_check(&mf, "test");
	struct text_tokenizer tok;
	ck_assert_int_eq(text_byte_init(&tok), TENSOR_OK);
	struct model_config c;
	model_flags_config(&c, &mf, &tok, flags, NFLAGS, "test");
	for (int i = 0; i < model_config_field_count(); i++) {
		const struct model_config_field *f = model_config_field(i);
		if (!generated(f))
			continue;
		char got[64], want[64];
		struct flag *fl = flags_find(flags, NFLAGS, f->flag);
		ck_assert_msg(fl->set, "--%s not parsed", f->flag);
		flags_value_str(fl, want, sizeof want);
		field_text(&c, f, got, sizeof got);
		if (f->kind == MODEL_FIELD_DOUBLE)
			ck_assert_msg(strtod(got, NULL) == strtod(want, NULL), "%s", f->name);
		else
			ck_assert_msg(!strcmp(got, want), "--%s %s gave %s %s", f->flag, want,
				      f->name, got);
	}
	ck_assert_int_eq(c.layers, 3); /* the linformer preset at --layers */
	ck_assert_int_eq(c.attention[2], NN_ATTN_LINEAR);
	ck_assert_int_eq(c.head_hidden, 8); /* --head-hidden 0: --dim */
	ck_assert_int_eq(c.pad_id, tok.pad_id);
	text_tokenizer_free(&tok);
}
END_TEST

/* The generated flags that take a value: the _i-th, or their count for i < 0. */
static int valued_flag(int i, const struct model_config_field **out)
{
	int seen = 0;
	for (int j = 0; j < model_config_field_count(); j++) {
		const struct model_config_field *g = model_config_field(j);
		if (generated(g) && g->kind != MODEL_FIELD_BOOL && seen++ == i)
			*out = g;
	}
	return seen;
}

/* A value outside the field's range or choices exits 1 (flags_fail). */
START_TEST(test_bad_value_exits)
{
	const struct model_config_field *f = NULL;
	valued_flag(_i, &f);
	ck_assert(f != NULL);
	char name[40], v[40];
	snprintf(name, sizeof name, "--%s", f->flag);
	if (f->kind == MODEL_FIELD_INT || f->kind == MODEL_FIELD_DOUBLE)
		snprintf(v, sizeof v, "%.17g", f->min - 1);
	else
		snprintf(v, sizeof v, "bogus");
	char *argv[] = { "test", name, v };
	flags_parse(flags, NFLAGS, 3, argv, "test", "usage", NULL);
}
END_TEST

/* A program that keeps its own entry of a generated flag is stopped at parsing. */
static double own_dropout;
static struct flag twice[] = {
	MODEL_FLAGS_ENCODER(mf, 2, "sequence length"),
	FLAG_DEF_DOUBLE("dropout", &own_dropout, 0, 1, FLAG_MAX_OPEN, "P", "the program's own"),
};

START_TEST(test_flag_defined_twice_exits)
{
	char *argv[] = { "test" };
	flags_parse(twice, (int)(sizeof twice / sizeof twice[0]), 1, argv, "test", "usage", NULL);
}
END_TEST

/* A resumed run's flags against those it saved (flags_compare_json): equal, a difference
 * named, the ignored ones, a flag the saved run predates (accepted at its default only). */
static int64_t cmp_steps = 100;
static double cmp_lr = 1e-3;
static bool cmp_fast;

START_TEST(test_compare_json)
{
	struct flag fl[] = {
		FLAG_DEF_INT("steps", &cmp_steps, 1, 1000, "S", "steps"),
		FLAG_DEF_DOUBLE("lr", &cmp_lr, 0, 1, FLAG_MIN_OPEN, "RATE", "rate"),
		FLAG_DEF_BOOL("fast", &cmp_fast, "a flag newer than the run"),
	};
	char *argv[] = { "test", "--steps", "200" };
	flags_parse(fl, 3, 3, argv, "test", "usage", NULL);
	char *json = flags_to_json(fl, 3, NULL), err[200] = "";
	ck_assert(json && strstr(json, "\"steps\"") && strstr(json, "\"200\""));
	ck_assert_int_eq(flags_compare_json(fl, 3, json, NULL, err, sizeof err), 0);
	const char *old = "{\"steps\":\"200\",\"lr\":\"0.001\"}"; /* saved before --fast */
	ck_assert_int_eq(flags_compare_json(fl, 3, old, NULL, err, sizeof err), 0);
	cmp_lr = 2e-3;
	ck_assert_int_eq(flags_compare_json(fl, 3, old, NULL, err, sizeof err), -1);
	ck_assert_str_eq(err, "--lr is '0.002' but the run being resumed used '0.001'");
	const char *const ignore[] = { "lr", NULL };
	ck_assert_int_eq(flags_compare_json(fl, 3, old, ignore, err, sizeof err), 0);
	cmp_lr = 1e-3, cmp_fast = fl[2].set = true; /* as if given: --fast */
	ck_assert_int_eq(flags_compare_json(fl, 3, old, NULL, err, sizeof err), -1);
	ck_assert_str_eq(err, "--fast: not recorded");
	ck_assert_int_eq(flags_compare_json(fl, 3, "[1]", NULL, err, sizeof err), -1);
	ck_assert_str_eq(err, "not a JSON object of flag values");
	free(json);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("model_flags");
	TCase *tc = tu_tcase("flags");
	tcase_add_test(tc, test_generated_flags_match_fields);
	tcase_add_test(tc, test_other_fields_by_hand);
	tcase_add_test(tc, test_flags_reach_config);
	tcase_add_test(tc, test_select_matches_generated);
	tcase_add_exit_test(tc, test_select_refuses_other_fields, 1);
	tcase_add_test(tc, test_conflict);
	tcase_add_test(tc, test_compare_json);
	tcase_add_exit_test(tc, test_flag_defined_twice_exits, 1);
	tcase_add_loop_exit_test(tc, test_bad_value_exits, 1, 0, valued_flag(-1, NULL));
	suite_add_tcase(s, tc);
	return tu_run(s);
}
