/* Strict command-line flag parsing, generated --help and a JSON dump of the
 * values (see flags.h). */
#define _POSIX_C_SOURCE 200809L
#include "flags.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *g_prog = "program";

void flags_fail(const char *prog, const char *name, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", prog);
	if (name)
		fprintf(stderr, "--%s: ", name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n(see %s --help)\n", prog);
	exit(1);
}

/* v as text: integers exactly (up to 2^53), others with 15 digits, "inf" */
static const char *bound_str(double v, char *buf, size_t len)
{
	if (isinf(v))
		snprintf(buf, len, "%sinf", v < 0 ? "-" : "");
	else if (v == floor(v) && fabs(v) <= 9007199254740992.0)
		snprintf(buf, len, "%.0f", v);
	else
		snprintf(buf, len, "%.15g", v);
	return buf;
}

/* "[1, 65536]", "(0, 1)", "[0, inf)" for the expected-form messages. */
static const char *range_str(const struct flag *f, char *buf, size_t len)
{
	char lo[32], hi[32];
	snprintf(buf, len, "%c%s, %s%c", f->open & FLAG_MIN_OPEN || isinf(f->min) ? '(' : '[',
		 bound_str(f->min, lo, sizeof lo), bound_str(f->max, hi, sizeof hi),
		 f->open & FLAG_MAX_OPEN || isinf(f->max) ? ')' : ']');
	return buf;
}

static bool in_range(const struct flag *f, double v)
{
	bool lo = f->open & FLAG_MIN_OPEN ? v > f->min : v >= f->min;
	bool hi = f->open & FLAG_MAX_OPEN ? v < f->max : v <= f->max;
	return lo && hi;
}

/* The index of v among choices ("a|b|c"), -1 for none. */
static int choice_index(const char *choices, const char *v)
{
	size_t n = strlen(v);
	int i = 0;
	for (const char *p = choices; *p; i++) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);
		if (n && len == n && !strncmp(p, v, n))
			return i;
		p += len + (bar ? 1 : 0);
	}
	return -1;
}

/* Choice i of choices into buf ("" for none). */
static const char *choice_at(const char *choices, int i, char *buf, size_t len)
{
	const char *p = choices;
	for (; i > 0 && p; i--) {
		p = strchr(p, '|');
		p = p ? p + 1 : NULL;
	}
	size_t n = p && i == 0 ? strcspn(p, "|") : 0;
	snprintf(buf, len, "%.*s", (int)n, n ? p : "");
	return buf;
}

static void set_value(struct flag *f, const char *v)
{
	char range[96];
	switch (f->type) {
	case FLAG_INT: {
		char *end;
		errno = 0;
		long long x = strtoll(v, &end, 10);
		if (end == v || *end || errno || !in_range(f, (double)x))
			flags_fail(g_prog, f->name, "expected an integer in %s, got '%s'",
				   range_str(f, range, sizeof range), v);
		*(int64_t *)f->value = x;
		break;
	}
	case FLAG_DOUBLE: {
		char *end;
		errno = 0;
		double x = strtod(v, &end);
		if (end == v || *end || errno || !isfinite(x) || !in_range(f, x))
			flags_fail(g_prog, f->name, "expected a number in %s, got '%s'",
				   range_str(f, range, sizeof range), v);
		*(double *)f->value = x;
		break;
	}
	case FLAG_ENUM:
		if (choice_index(f->choices, v) < 0)
			flags_fail(g_prog, f->name, "expected one of %s, got '%s'", f->choices, v);
		*(int *)f->value = choice_index(f->choices, v);
		break;
	case FLAG_CHOICE:
		if (choice_index(f->choices, v) < 0)
			flags_fail(g_prog, f->name, "expected one of %s, got '%s'", f->choices, v);
		*(const char **)f->value = v;
		break;
	case FLAG_STRING:
		if (!*v)
			flags_fail(g_prog, f->name, "expected %s, got an empty string",
				   f->metavar ? f->metavar : "a value");
		*(const char **)f->value = v;
		break;
	case FLAG_BOOL: *(bool *)f->value = true; break;
	}
	f->set = true;
}

struct flag *flags_find(struct flag *flags, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(flags[i].name, name))
			return &flags[i];
	return NULL;
}

bool flags_given(struct flag *flags, int n, const char *name)
{
	struct flag *f = flags_find(flags, n, name);
	return f && f->set;
}

void flags_parse(struct flag *flags, int n, int argc, char **argv, const char *prog,
		 const char *synopsis, const char *epilog)
{
	g_prog = prog;
	for (int i = 0; i < n; i++) /* a program's own entry beside a generated one */
		for (int j = i + 1; j < n; j++)
			if (!strcmp(flags[i].name, flags[j].name))
				flags_fail(prog, flags[i].name, "defined twice in the flag table");
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
			flags_usage(stdout, flags, n, synopsis, epilog);
			exit(0);
		}
		if (strncmp(arg, "--", 2) || !arg[2])
			flags_fail(prog, NULL,
				   "unexpected argument '%s': every setting is a --flag", arg);
		char name[64];
		const char *eq = strchr(arg + 2, '=');
		size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
		snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : 63), arg + 2);
		struct flag *f = len < sizeof name ? flags_find(flags, n, name) : NULL;
		if (!f)
			flags_fail(prog, NULL, "unknown flag '%s'", arg);
		if (f->set)
			flags_fail(prog, f->name, "given twice");
		if (f->type == FLAG_BOOL) {
			if (eq)
				flags_fail(prog, f->name, "takes no value, got '%s'", eq + 1);
			set_value(f, "");
			continue;
		}
		if (!eq && i + 1 >= argc)
			flags_fail(prog, f->name, "missing value: expected --%s %s", f->name,
				   f->choices	? f->choices
				   : f->metavar ? f->metavar
						: "VALUE");
		set_value(f, eq ? eq + 1 : argv[++i]);
	}
}

const char *flags_value_str(const struct flag *f, char *buf, size_t len)
{
	switch (f->type) {
	case FLAG_INT: snprintf(buf, len, "%lld", (long long)*(const int64_t *)f->value); break;
	case FLAG_DOUBLE: /* the shortest text that reads back the same */
		for (int digits = 15; digits <= 17; digits++) {
			snprintf(buf, len, "%.*g", digits, *(const double *)f->value);
			if (strtod(buf, NULL) == *(const double *)f->value)
				break;
		}
		break;
	case FLAG_BOOL: snprintf(buf, len, "%s", *(const bool *)f->value ? "true" : "false"); break;
	case FLAG_ENUM: choice_at(f->choices, *(const int *)f->value, buf, len); break;
	default: {
		const char *s = *(const char *const *)f->value;
		snprintf(buf, len, "%s", s ? s : "");
	}
	}
	return buf;
}

/* text word-wrapped to 100 columns, continuation lines indented by indent. */
static void wrap(FILE *out, const char *text, int col, int indent)
{
	const char *p = text;
	while (*p) {
		size_t word = strcspn(p, " ");
		if (col > indent && col + 1 + (int)word > 100) {
			fprintf(out, "\n%*s", indent, "");
			col = indent;
		} else if (col > indent) {
			fputc(' ', out);
			col++;
		}
		fprintf(out, "%.*s", (int)word, p);
		col += (int)word;
		p += word;
		p += strspn(p, " ");
	}
	fputc('\n', out);
}

void flags_usage(FILE *out, const struct flag *flags, int n, const char *synopsis,
		 const char *epilog)
{
	fprintf(out, "%s\n", synopsis);
	for (int i = 0; i < n; i++) {
		const struct flag *f = &flags[i];
		char left[96], val[256], text[1024];
		if (f->section)
			fprintf(out, "\n%s:\n", f->section);
		const char *mv = f->choices ? f->choices : f->metavar;
		snprintf(left, sizeof left, "--%s%s%s", f->name, f->type == FLAG_BOOL ? "" : " ",
			 f->type == FLAG_BOOL ? ""
			 : mv		      ? mv
					      : "VALUE");
		flags_value_str(f, val, sizeof val);
		if (f->type != FLAG_BOOL && *val)
			snprintf(text, sizeof text, "%s (default: %s)", f->help, val);
		else
			snprintf(text, sizeof text, "%s", f->help);
		if (strlen(left) > 24)
			fprintf(out, "  %s\n%28s", left, "");
		else
			fprintf(out, "  %-24s  ", left);
		wrap(out, text, 28, 28);
	}
	if (epilog)
		fprintf(out, "\n%s", epilog);
}

/* Whether name is in the NULL-terminated list (NULL: empty). */
static bool listed(const char *const *list, const char *name)
{
	for (; list && *list; list++)
		if (!strcmp(*list, name))
			return true;
	return false;
}

char *flags_to_json(const struct flag *flags, int n, const char *const *ignore)
{
	cJSON *o = cJSON_CreateObject();
	char buf[1024];
	for (int i = 0; o && i < n; i++)
		if (!listed(ignore, flags[i].name) &&
		    !cJSON_AddStringToObject(o, flags[i].name,
					     flags_value_str(&flags[i], buf, sizeof buf))) {
			cJSON_Delete(o);
			o = NULL;
		}
	char *s = o ? cJSON_Print(o) : NULL;
	cJSON_Delete(o);
	char *out = s ? strdup(s) : NULL;
	cJSON_free(s);
	return out;
}

int flags_compare_json(const struct flag *flags, int n, const char *json, const char *const *ignore,
		       char *err, size_t errlen)
{
	cJSON *o = cJSON_Parse(json);
	if (!cJSON_IsObject(o)) {
		snprintf(err, errlen, "not a JSON object of flag values");
		cJSON_Delete(o);
		return -1;
	}
	int rc = 0;
	char buf[1024];
	for (int i = 0; !rc && i < n; i++) {
		if (listed(ignore, flags[i].name))
			continue;
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, flags[i].name);
		const char *now = flags_value_str(&flags[i], buf, sizeof buf);
		if (!v && !flags[i].set)
			continue; /* a flag newer than the run, at its default */
		if (!cJSON_IsString(v)) {
			snprintf(err, errlen, "--%s: not recorded", flags[i].name);
			rc = -1;
		} else if (strcmp(v->valuestring, now)) {
			snprintf(err, errlen, "--%s is '%s' but the run being resumed used '%s'",
				 flags[i].name, now, v->valuestring);
			rc = -1;
		}
	}
	cJSON_Delete(o);
	return rc;
}
