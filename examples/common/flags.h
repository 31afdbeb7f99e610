/* Command-line flags for the example programs: a table of typed flags with
 * defaults, ranges and help; strict parsing (a bad value, an unknown flag or
 * a missing value exits 1 with a message naming the flag and the expected
 * form); --help generated from the table; and a JSON dump of the values, so a
 * resumed run can check it was given the same settings. Example support code:
 * it prints and exits on user error. */
#ifndef CFORMER_FLAGS_H
#define CFORMER_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum flag_type {
	FLAG_INT,    /* int64_t *, within [min, max] */
	FLAG_DOUBLE, /* double *, within min..max (open ends with FLAG_*_OPEN) */
	FLAG_STRING, /* const char ** (points into argv) */
	FLAG_CHOICE, /* const char **, one of the '|'-separated choices */
	FLAG_BOOL,   /* bool *, takes no value: present = true */
	FLAG_ENUM,   /* int * (an enum): the index of one of the '|'-separated choices */
};

enum { FLAG_MIN_OPEN = 1, FLAG_MAX_OPEN = 2 };

struct flag {
	const char *name; /* "lr" for --lr */
	enum flag_type type;
	void *value;	     /* holds the default until parsed */
	double min, max;     /* numeric range (inclusive unless opened) */
	int open;	     /* FLAG_MIN_OPEN | FLAG_MAX_OPEN */
	const char *choices; /* FLAG_CHOICE, FLAG_ENUM: "a|b|c" */
	const char *metavar; /* "N", "RATE", "DIR" */
	const char *help;    /* one line, "(default: ...)" is added */
	const char *section; /* starts a new --help section when not NULL */
	bool set;	     /* given on the command line */
};

/* Table entries (struct flag initializers) of a value at ptr, which holds the default:
 * an integer in [lo, hi], a number from lo to hi (open: FLAG_*_OPEN), a string, one of
 * choices ("a|b|c"), a bool, an enum whose values 0, 1, .. are named by choices. */
/* clang-format off */
#define FLAG_DEF_INT(name, ptr, lo, hi, metavar, help) \
	{ name, FLAG_INT, ptr, lo, hi, 0, NULL, metavar, help, NULL, false }
#define FLAG_DEF_DOUBLE(name, ptr, lo, hi, open, metavar, help) \
	{ name, FLAG_DOUBLE, ptr, lo, hi, open, NULL, metavar, help, NULL, false }
#define FLAG_DEF_STRING(name, ptr, metavar, help) \
	{ name, FLAG_STRING, ptr, 0, 0, 0, NULL, metavar, help, NULL, false }
#define FLAG_DEF_CHOICE(name, ptr, choices, help) \
	{ name, FLAG_CHOICE, ptr, 0, 0, 0, choices, NULL, help, NULL, false }
#define FLAG_DEF_BOOL(name, ptr, help) \
	{ name, FLAG_BOOL, ptr, 0, 0, 0, NULL, NULL, help, NULL, false }
#define FLAG_DEF_ENUM(name, ptr, choices, help) \
	{ name, FLAG_ENUM, ptr, 0, 0, 0, choices, NULL, help, NULL, false }
/* clang-format on */

/* Parse argv[1..argc) as "--name VALUE", "--name=VALUE" or "--name" (bool).
 * A name defined twice in the table exits 1 (a program's own entry beside a generated one).
 * "-h"/"--help" prints flags_usage(synopsis, epilog) to stdout and exits 0;
 * any error prints "<prog>: --name: expected ..., got '...'" and a hint to
 * stderr and exits 1. */
void flags_parse(struct flag *flags, int n, int argc, char **argv, const char *prog,
		 const char *synopsis, const char *epilog);
/* The help text: synopsis, then each flag with its metavar, help and default. */
void flags_usage(FILE *f, const struct flag *flags, int n, const char *synopsis,
		 const char *epilog);
/* The flag called name (without "--"), or NULL. */
struct flag *flags_find(struct flag *flags, int n, const char *name);
/* Whether --name was given. */
bool flags_given(struct flag *flags, int n, const char *name);
/* The current value as text ("" for an unset string or an enum value without a choice,
 * "true"/"false"). */
const char *flags_value_str(const struct flag *f, char *buf, size_t len);
/* Exit 1 with "<prog>: --name: <message>" (for checks across flags). */
void flags_fail(const char *prog, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

/* The values as a JSON object {"name": "value", ...} (malloc'd), leaving out
 * the names in ignore (NULL-terminated, or NULL). */
char *flags_to_json(const struct flag *flags, int n, const char *const *ignore);
/* Compare the values with a flags_to_json object, skipping the names in
 * ignore (NULL-terminated) and flags the object lacks that were not given (a
 * flag added since, at its default). Returns 0 if equal, else -1 with a message
 * naming the first flag that differs (or the JSON problem) in err. */
int flags_compare_json(const struct flag *flags, int n, const char *json, const char *const *ignore,
		       char *err, size_t errlen);

#endif
