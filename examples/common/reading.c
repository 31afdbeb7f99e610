/* How a run read its text, kept in its checkpoints (see reading.h). */
#define _POSIX_C_SOURCE 200809L
#include "reading.h"
#include "train.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct reading reading_of(const char *prog, const struct text_tokenizer *tok, int64_t n)
{
	struct reading r = { .n = n, .keep_tail = tok->keep_tail };
	bool bytes = tok->kind == TEXT_BYTE;
	snprintf(r.tokenizer, sizeof r.tokenizer, "%s", bytes ? "byte" : "wordpiece");
	r.lowercase = !bytes;
	if (text_tokenizer_hash(tok, &r.vocab_hash) < 0)
		train_die(prog, "the vocabulary's hash");
	return r;
}

char *reading_json(const char *prog, const struct text_tokenizer *tok, int64_t n)
{
	struct reading r = reading_of(prog, tok, n);
	char hash[24];
	snprintf(hash, sizeof hash, "%016" PRIx64, r.vocab_hash);
	cJSON *o = cJSON_CreateObject();
	char *s = NULL;
	if (o && cJSON_AddStringToObject(o, "tokenizer", r.tokenizer) &&
	    cJSON_AddNumberToObject(o, "n", (double)r.n) &&
	    cJSON_AddNumberToObject(o, "keep_tail", (double)r.keep_tail) &&
	    cJSON_AddBoolToObject(o, "lowercase", r.lowercase) &&
	    cJSON_AddStringToObject(o, "vocab_fnv1a64", hash))
		s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (!s) {
		tensor_error(TENSOR_ERR_NOMEM, "out of memory");
		train_die(prog, "how the run reads text");
	}
	return s;
}

/* The integer member key of o in [lo, 2^53], or -1. */
static int64_t json_int(const cJSON *o, const char *key, int64_t lo)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	double x = cJSON_IsNumber(v) ? v->valuedouble : -1;
	return x >= (double)lo && x <= 9007199254740992.0 && x == floor(x) ? (int64_t)x : -1;
}

/* r from the JSON text s; false when it is not a reading. */
static bool parse(const char *s, struct reading *r)
{
	cJSON *o = cJSON_Parse(s);
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "tokenizer");
	const cJSON *lc = cJSON_GetObjectItemCaseSensitive(o, "lowercase");
	const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "vocab_fnv1a64");
	const char *hs = cJSON_IsString(h) ? h->valuestring : "";
	bool ok = cJSON_IsString(t) &&
		  (!strcmp(t->valuestring, "wordpiece") || !strcmp(t->valuestring, "byte"));
	ok = ok && cJSON_IsBool(lc) && strlen(hs) == 16 && strspn(hs, "0123456789abcdef") == 16;
	*r = (struct reading){ .n = json_int(o, "n", 2),
			       .keep_tail = json_int(o, "keep_tail", 0),
			       .lowercase = cJSON_IsTrue(lc),
			       .vocab_hash = strtoull(hs, NULL, 16) };
	if (ok)
		snprintf(r->tokenizer, sizeof r->tokenizer, "%s", t->valuestring);
	cJSON_Delete(o);
	return ok && r->n >= 2 && r->keep_tail >= 0;
}

bool reading_load(const char *prog, const char *path, const char *what, struct reading *r)
{
	char *s = NULL, flag[64];
	snprintf(flag, sizeof flag, "--%s", what);
	if (nn_checkpoint_meta(path, "text", &s) < 0)
		train_die(prog, flag);
	if (!s)
		return false;
	bool ok = parse(s, r);
	if (!ok)
		flags_fail(
		    prog, what,
		    "%s: its \"text\" metadata '%.200s' is not how a run read text "
		    "(expected {\"tokenizer\": \"wordpiece\"|\"byte\", \"n\": N >= 2, "
		    "\"keep_tail\": T >= 0, \"lowercase\": true|false, \"vocab_fnv1a64\": 16 "
		    "hex digits})",
		    path, s);
	free(s);
	return true;
}

/* The flag name of the table, if the program has it (for the messages), else NULL. */
static const char *flag_of(struct flag *flags, int nflags, const char *name)
{
	return flags_find(flags, nflags, name) ? name : NULL;
}

/* tok reads text as the run of saved (path) did: the same tokenizer, lowercasing and
 * vocabulary; else exit 1 naming both. */
static void check_tokenizer(const char *prog, const char *path, const struct reading *saved,
			    const struct text_tokenizer *tok, struct flag *flags, int nflags)
{
	struct reading now = reading_of(prog, tok, saved->n);
	if (strcmp(saved->tokenizer, now.tokenizer))
		flags_fail(prog, flag_of(flags, nflags, "tokenizer"),
			   "%s was trained with the %s tokenizer, this run's is %s", path,
			   saved->tokenizer, now.tokenizer);
	if (saved->lowercase != now.lowercase)
		flags_fail(prog, flag_of(flags, nflags, "tokenizer"),
			   "%s's run read text %s, this tokenizer %s", path,
			   saved->lowercase ? "lowercased" : "as written",
			   now.lowercase ? "lowercases it" : "reads it as written");
	if (saved->vocab_hash != now.vocab_hash)
		flags_fail(prog, flag_of(flags, nflags, "vocab"),
			   "%s was trained with another vocabulary (FNV-1a 64 %016" PRIx64
			   "), not this one (%016" PRIx64 "): read it with its run's vocabulary",
			   path, saved->vocab_hash, now.vocab_hash);
}

int64_t reading_follow(const char *prog, const char *path, struct text_tokenizer *tok,
		       int64_t max_len, struct flag *flags, int nflags)
{
	struct reading saved;
	if (!reading_load(prog, path, "checkpoint", &saved)) {
		fprintf(stderr,
			"%s: %s does not say how its run read text (saved before checkpoints kept "
			"it): reading at n %lld, keep-tail %lld, the vocabulary unchecked\n",
			prog, path, (long long)max_len, (long long)tok->keep_tail);
		return max_len;
	}
	if (saved.n != max_len)
		flags_fail(
		    prog, NULL,
		    "%s: its run read %lld tokens per example, but its model reads %lld: the "
		    "file is inconsistent",
		    path, (long long)saved.n, (long long)max_len);
	check_tokenizer(prog, path, &saved, tok, flags, nflags);
	struct flag *n = flags_find(flags, nflags, "n"),
		    *kt = flags_find(flags, nflags, "keep-tail");
	if (n && n->set && n->type == FLAG_INT && *(int64_t *)n->value != saved.n)
		flags_fail(prog, "n",
			   "%lld contradicts %s, whose run read %lld tokens per example: leave "
			   "--n out",
			   (long long)*(int64_t *)n->value, path, (long long)saved.n);
	tok->keep_tail = saved.keep_tail;
	if (kt && kt->set && kt->type == FLAG_INT && *(int64_t *)kt->value != saved.keep_tail) {
		tok->keep_tail = *(int64_t *)kt->value;
		fprintf(stderr,
			"%s: --keep-tail %lld: reading as the flag says, not as the run of %s did "
			"(keep-tail %lld)\n",
			prog, (long long)tok->keep_tail, path, (long long)saved.keep_tail);
	}
	return saved.n;
}

void reading_check_tokenizer(const char *prog, const char *path, const struct text_tokenizer *tok,
			     struct flag *flags, int nflags, const char *what)
{
	struct reading saved;
	if (reading_load(prog, path, what, &saved))
		check_tokenizer(prog, path, &saved, tok, flags, nflags);
	else
		fprintf(stderr,
			"%s: --%s %s does not say how its run read text (saved before checkpoints "
			"kept it): its vocabulary is unchecked\n",
			prog, what, path);
}
