/* Tokenizer tests: WordPiece against the reference's ids in
 * tests/data/tokenizer (accents, CJK, punctuation, whitespace, controls,
 * invalid UTF-8, a code point sweep, real reviews), encode, the byte
 * tokenizer, token strings, vocabulary errors and bad arguments. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "text.h"

/* ---- helpers ----------------------------------------------------------------- */

static const char *data_path(const char *file)
{
	static _Thread_local char buf[4096];
	const char *srcdir = getenv("srcdir");
	if (srcdir) {
		snprintf(buf, sizeof buf, "%s/tests/data/tokenizer/%s", srcdir, file);
	} else { /* run by hand: next to this source file */
		const char *slash = strrchr(__FILE__, '/');
		int dir = slash ? (int)(slash - __FILE__) : 1;
		snprintf(buf, sizeof buf, "%.*s/data/tokenizer/%s", dir, slash ? __FILE__ : ".",
			 file);
	}
	return buf;
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f, "cannot open %s", path);
	size_t cap = 1 << 20, n = 0;
	char *buf = malloc(cap);
	for (;;) {
		n += fread(buf + n, 1, cap - n - 1, f);
		if (n < cap - 1)
			break;
		buf = realloc(buf, cap *= 2);
	}
	fclose(f);
	buf[n] = '\0';
	*len = n;
	return buf;
}

static void load_bert(struct text_tokenizer *tok)
{
	int st = text_wordpiece_load(tok, data_path("bert-base-uncased-vocab.txt"));
	ck_assert_msg(st == TENSOR_OK, "load: %s", tensor_last_error());
}

static size_t put_utf8(char *o, unsigned c)
{
	if (c < 0x80) {
		o[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = (char)(0xC0 | c >> 6);
		o[1] = (char)(0x80 | (c & 0x3F));
		return 2;
	}
	if (c < 0x10000) {
		o[0] = (char)(0xE0 | c >> 12);
		o[1] = (char)(0x80 | (c >> 6 & 0x3F));
		o[2] = (char)(0x80 | (c & 0x3F));
		return 3;
	}
	o[0] = (char)(0xF0 | c >> 18);
	o[1] = (char)(0x80 | (c >> 12 & 0x3F));
	o[2] = (char)(0x80 | (c >> 6 & 0x3F));
	o[3] = (char)(0x80 | (c & 0x3F));
	return 4;
}

static unsigned hex4(const char *s)
{
	char h[5] = { s[0], s[1], s[2], s[3], 0 };
	return (unsigned)strtoul(h, NULL, 16);
}

/* Decode a JSON string literal s[0..n) (quotes included) into out (n
 * bytes suffice); returns the decoded length. */
static size_t json_string(const char *s, size_t n, char *out)
{
	ck_assert(n >= 2 && s[0] == '"' && s[n - 1] == '"');
	size_t o = 0;
	for (size_t i = 1; i < n - 1; i++) {
		if (s[i] != '\\') {
			out[o++] = s[i];
			continue;
		}
		char e = s[++i];
		switch (e) {
		case 'n': out[o++] = '\n'; break;
		case 't': out[o++] = '\t'; break;
		case 'r': out[o++] = '\r'; break;
		case 'b': out[o++] = '\b'; break;
		case 'f': out[o++] = '\f'; break;
		case 'u': {
			unsigned c = hex4(s + i + 1);
			i += 4;
			if (c >= 0xD800 && c < 0xDC00) {
				ck_assert(s[i + 1] == '\\' && s[i + 2] == 'u');
				c = 0x10000 + ((c - 0xD800) << 10) + (hex4(s + i + 3) - 0xDC00);
				i += 6;
			}
			o += put_utf8(out + o, c);
			break;
		}
		default: out[o++] = e; break; /* \" \\ \/ */
		}
	}
	return o;
}

static size_t hex_bytes(const char *s, size_t n, char *out)
{
	ck_assert(n % 2 == 0);
	for (size_t i = 0; i < n; i += 2) {
		char h[3] = { s[i], s[i + 1], 0 };
		out[i / 2] = (char)strtoul(h, NULL, 16);
	}
	return n / 2;
}

static size_t parse_ids(const char *s, size_t n, int32_t *ids)
{
	size_t k = 0;
	const char *end = s + n;
	while (s < end) {
		char *e;
		ids[k++] = (int32_t)strtol(s, &e, 10);
		ck_assert(e > s);
		s = e;
		while (s < end && *s == ' ')
			s++;
	}
	return k;
}

static void ids_str(const int32_t *ids, size_t n, char *buf, size_t cap)
{
	size_t o = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < n && o + 16 < cap; i++)
		o += (size_t)snprintf(buf + o, cap - o, "%s%d", i ? " " : "", (int)ids[i]);
}

/* One fixture case: fields split in place. */
struct fcase {
	const char *name;
	char *text;
	size_t len;
	int32_t *ids;
	size_t n;
	const char *tokens; /* NULL when the file has no tokens column */
};

/* Parse a fixture file: kind 'j' (JSON text column) or 'h' (hex). */
static struct fcase *load_cases(const char *file, char kind, size_t *count, char **keep)
{
	size_t len;
	char *buf = slurp(data_path(file), &len);
	size_t cap = 16, n = 0;
	struct fcase *c = malloc(cap * sizeof *c);
	for (char *line = buf; line < buf + len;) {
		char *nl = memchr(line, '\n', (size_t)(buf + len - line));
		ck_assert_msg(nl, "%s: last line lacks a newline", file);
		*nl = '\0';
		char *f[4] = { line, NULL, NULL, NULL };
		int nf = 1;
		for (char *p = line; *p && nf < 4; p++)
			if (*p == '\t') {
				*p = '\0';
				f[nf++] = p + 1;
			}
		ck_assert_msg(nf >= 3, "%s: bad line '%s'", file, line);
		if (n == cap)
			c = realloc(c, (cap *= 2) * sizeof *c);
		size_t tl = strlen(f[1]), il = strlen(f[2]);
		c[n].name = f[0];
		c[n].text = malloc(tl + 1);
		c[n].len =
		    kind == 'j' ? json_string(f[1], tl, c[n].text) : hex_bytes(f[1], tl, c[n].text);
		c[n].ids = malloc((il / 2 + 1) * sizeof(int32_t));
		c[n].n = parse_ids(f[2], il, c[n].ids);
		c[n].tokens = nf == 4 ? f[3] : NULL;
		n++;
		line = nl + 1;
	}
	*count = n;
	*keep = buf;
	return c;
}

static void free_cases(struct fcase *c, size_t n, char *keep)
{
	for (size_t i = 0; i < n; i++) {
		free(c[i].text);
		free(c[i].ids);
	}
	free(c);
	free(keep);
}

static void check_case(const struct text_tokenizer *tok, const struct fcase *c)
{
	int32_t *ids = NULL;
	size_t n = 0;
	int st = text_tokenize(tok, c->text, c->len, &ids, &n);
	ck_assert_msg(st == TENSOR_OK, "case %s: %s", c->name, tensor_last_error());
	if (n != c->n || (n && memcmp(ids, c->ids, n * sizeof *ids))) {
		char got[2048], want[2048];
		ids_str(ids, n, got, sizeof got);
		ids_str(c->ids, c->n, want, sizeof want);
		ck_abort_msg("case %s: got %zu ids [%s], want %zu [%s]", c->name, n, got, c->n,
			     want);
	}
	if (c->tokens) { /* the token strings column */
		const char *p = c->tokens;
		for (size_t i = 0; i < n; i++) {
			const char *s = text_token_string(tok, ids[i], NULL, 0);
			ck_assert_msg(s, "case %s: %s", c->name, tensor_last_error());
			size_t sl = strlen(s);
			ck_assert_msg(!strncmp(p, s, sl) && (p[sl] == ' ' || p[sl] == '\0'),
				      "case %s: token %zu is '%s', fixture has '%.20s'", c->name, i,
				      s, p);
			p += sl + (p[sl] == ' ');
		}
		ck_assert_msg(*p == '\0', "case %s: fixture has more tokens: '%s'", c->name, p);
	}
	free(ids);
}

static void run_fixture(const char *file, char kind, size_t min_cases)
{
	struct text_tokenizer tok;
	load_bert(&tok);
	size_t n;
	char *keep;
	struct fcase *c = load_cases(file, kind, &n, &keep);
	ck_assert_msg(n >= min_cases, "%s: %zu cases, expected >= %zu", file, n, min_cases);
	for (size_t i = 0; i < n; i++)
		check_case(&tok, &c[i]);
	free_cases(c, n, keep);
	text_tokenizer_free(&tok);
}

/* A vocab file with these contents in a fresh temporary file. */
static char *temp_file(const char *data, size_t len)
{
	char *path = strdup("/tmp/cformer-test-vocab-XXXXXX");
	int fd = mkstemp(path);
	ck_assert(fd >= 0);
	ck_assert(write(fd, data, len) == (ssize_t)len);
	close(fd);
	return path;
}

#define SPECIALS "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n"

static void load_small(struct text_tokenizer *tok, const char *vocab)
{
	char *path = temp_file(vocab, strlen(vocab));
	int st = text_wordpiece_load(tok, path);
	unlink(path);
	free(path);
	ck_assert_msg(st == TENSOR_OK, "load: %s", tensor_last_error());
}

/* Tokenize s and compare with want[0..n). */
static void expect_ids(const struct text_tokenizer *tok, const char *s, const int32_t *want,
		       size_t n)
{
	int32_t *ids = NULL;
	size_t got = 0;
	ck_assert_msg(text_tokenize(tok, s, strlen(s), &ids, &got) == TENSOR_OK, "%s",
		      tensor_last_error());
	ck_assert_msg(got == n, "'%.40s': %zu ids, want %zu", s, got, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(ids[i] == want[i], "'%.40s': id %zu is %d, want %d", s, i,
			      (int)ids[i], (int)want[i]);
	free(ids);
}

/* ---- fixtures ------------------------------------------------------------------ */

START_TEST(test_fixture_cases)
{
	run_fixture("cases.tsv", 'j', 300);
}
END_TEST

START_TEST(test_fixture_invalid_utf8)
{
	run_fixture("bytes.tsv", 'h', 39);
}
END_TEST

START_TEST(test_fixture_unicode_sweep)
{
	run_fixture("unicode.tsv", 'j', 100);
}
END_TEST

/* ---- WordPiece on small vocabularies ------------------------------------------ */

START_TEST(test_wordpiece_greedy)
{
	struct text_tokenizer tok;
	load_small(&tok, SPECIALS "un\n##aff\n##able\n##a\n##ff\nab\n##c\na\n##b\nxyz\n");
	ck_assert_int_eq(tok.vocab_size, 15);
	/* longest match first: ##aff, not ##a ##ff */
	expect_ids(&tok, "unaffable", (int32_t[]){ 5, 6, 7 }, 3);
	expect_ids(&tok, "abc", (int32_t[]){ 10, 11 }, 2);
	/* a word whose rest does not match is one [UNK], whatever matched before */
	expect_ids(&tok, "abcd", (int32_t[]){ 1 }, 1);
	expect_ids(&tok, "UN AB, b", (int32_t[]){ 5, 10, 1, 1 }, 4);
	/* ## only continues a word */
	expect_ids(&tok, "##a", (int32_t[]){ 1, 1, 12 }, 3);
	/* 100 characters are a word, 101 are [UNK] */
	char w[102];
	memset(w, 'a', 101);
	w[100] = '\0';
	int32_t want[100];
	want[0] = 12;
	for (int i = 1; i < 100; i++)
		want[i] = 8;
	expect_ids(&tok, w, want, 100);
	w[100] = 'a';
	w[101] = '\0';
	expect_ids(&tok, w, (int32_t[]){ 1 }, 1);
	text_tokenizer_free(&tok);

	/* no continuations at all */
	load_small(&tok, SPECIALS "ab\nc\n");
	expect_ids(&tok, "ab c abc", (int32_t[]){ 5, 6, 1 }, 3);
	text_tokenizer_free(&tok);
}
END_TEST

/* NFD puts combining marks in canonical order (by class, stably, not across
 * a class-0 mark) before Mn marks are dropped: observable for the few
 * spacing marks with a nonzero class (U+1D165 216, U+1D16D 226, U+1B44 9). */
START_TEST(test_canonical_order)
{
	struct text_tokenizer tok;
	load_small(&tok,
		   SPECIALS "x\n##\xf0\x9d\x85\xa5\n##\xf0\x9d\x85\xad\n##y\n##\xe1\xad\x84\n");
	/* x U+1D16D U+1D165 y -> x ##U+1D165 ##U+1D16D ##y */
	expect_ids(&tok, "x\xf0\x9d\x85\xad\xf0\x9d\x85\xa5y", (int32_t[]){ 5, 6, 7, 8 }, 4);
	/* a dropped acute (230) in between does not block the reordering */
	expect_ids(&tok, "x\xf0\x9d\x85\xad\xcc\x81\xf0\x9d\x85\xa5y", (int32_t[]){ 5, 6, 7, 8 },
		   4);
	/* a dropped combining grapheme joiner (class 0) does */
	expect_ids(&tok, "x\xf0\x9d\x85\xad\xcd\x8f\xf0\x9d\x85\xa5y", (int32_t[]){ 5, 7, 6, 8 },
		   4);
	/* x U+1B44 U+0334 U+1D165 U+0301 y -> x ##U+1B44 ##U+1D165 ##y */
	expect_ids(&tok, "x\xe1\xad\x84\xcc\xb4\xf0\x9d\x85\xa5\xcc\x81y",
		   (int32_t[]){ 5, 9, 6, 8 }, 4);
	text_tokenizer_free(&tok);
}
END_TEST

START_TEST(test_vocab_formats)
{
	/* "\n", "\r\n", lone "\r", no final newline: ids are line numbers - 1 */
	static const char *const files[] = {
		"the\n[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n##s\n",
		"the\r\n[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\n##s\r\n",
		"the\r[PAD]\r[UNK]\r[CLS]\r[SEP]\r[MASK]\r##s",
		"the\n[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n##s",
	};
	for (size_t f = 0; f < 4; f++) {
		struct text_tokenizer tok;
		load_small(&tok, files[f]);
		ck_assert_int_eq(tok.kind, TEXT_WORDPIECE);
		ck_assert_int_eq(tok.vocab_size, 7);
		ck_assert_int_eq(tok.pad_id, 1);
		ck_assert_int_eq(tok.unk_id, 2);
		ck_assert_int_eq(tok.cls_id, 3);
		ck_assert_int_eq(tok.sep_id, 4);
		ck_assert_int_eq(tok.mask_id, 5);
		expect_ids(&tok, "The thes", (int32_t[]){ 0, 0, 6 }, 3);
		ck_assert_str_eq(text_token_string(&tok, 6, NULL, 0), "##s");
		text_tokenizer_free(&tok);
	}
}
END_TEST

START_TEST(test_bert_basics)
{
	struct text_tokenizer tok;
	load_bert(&tok);
	ck_assert_int_eq(tok.vocab_size, 30522);
	ck_assert_int_eq(tok.pad_id, 0);
	ck_assert_int_eq(tok.unk_id, 100);
	ck_assert_int_eq(tok.cls_id, 101);
	ck_assert_int_eq(tok.sep_id, 102);
	ck_assert_int_eq(tok.mask_id, 103);
	expect_ids(&tok, "Hello, world!", (int32_t[]){ 7592, 1010, 2088, 999 }, 4);
	expect_ids(&tok, "unaffable", (int32_t[]){ 14477, 20961, 3468 }, 3);
	/* special-token strings in the text are text */
	expect_ids(&tok, "[MASK]", (int32_t[]){ 1031, 7308, 1033 }, 3);
	ck_assert_str_eq(text_token_string(&tok, 0, NULL, 0), "[PAD]");
	ck_assert_str_eq(text_token_string(&tok, 100, NULL, 0), "[UNK]");
	ck_assert_str_eq(text_token_string(&tok, 103, NULL, 0), "[MASK]");
	ck_assert_str_eq(text_token_string(&tok, 1996, NULL, 0), "the");
	ck_assert_str_eq(text_token_string(&tok, 30521, NULL, 0), "##\xef\xbd\x9e");
	ck_assert_ptr_null(text_token_string(&tok, 30522, NULL, 0));
	tu_assert_error(true, TENSOR_ERR_ARG, "text_token_string", "30522 out of range [0, 30522)");
	ck_assert_ptr_null(text_token_string(&tok, -1, NULL, 0));
	tu_assert_error(true, TENSOR_ERR_ARG, "text_token_string", "-1 out of range");
	text_tokenizer_free(&tok);
}
END_TEST

START_TEST(test_tokenize_appends)
{
	struct text_tokenizer tok;
	load_bert(&tok);
	int32_t *ids = NULL;
	size_t n = 0;
	ck_assert_int_eq(text_tokenize(&tok, "hello", 5, &ids, &n), TENSOR_OK);
	ck_assert_int_eq(text_tokenize(&tok, NULL, 0, &ids, &n), TENSOR_OK);
	ck_assert_int_eq(text_tokenize(&tok, " \t", 2, &ids, &n), TENSOR_OK);
	ck_assert_int_eq(text_tokenize(&tok, "world", 5, &ids, &n), TENSOR_OK);
	ck_assert_uint_eq(n, 2);
	ck_assert_int_eq(ids[0], 7592);
	ck_assert_int_eq(ids[1], 2088);
	/* growth over many calls and within one */
	for (int i = 0; i < 300; i++)
		ck_assert_int_eq(text_tokenize(&tok, "the cat", 7, &ids, &n), TENSOR_OK);
	size_t big = 20000;
	char *s = malloc(4 * big);
	for (size_t i = 0; i < big; i++)
		memcpy(s + 4 * i, "the ", 4);
	ck_assert_int_eq(text_tokenize(&tok, s, 4 * big, &ids, &n), TENSOR_OK);
	ck_assert_uint_eq(n, 2 + 600 + big);
	for (size_t i = 2; i < 602; i += 2)
		ck_assert(ids[i] == 1996 && ids[i + 1] == 4937);
	for (size_t i = 602; i < n; i++)
		ck_assert_int_eq(ids[i], 1996);
	free(s);
	free(ids);
	text_tokenizer_free(&tok);
}
END_TEST

START_TEST(test_long_inputs)
{
	struct text_tokenizer tok;
	load_bert(&tok);
	size_t len = 1 << 20;
	char *s = malloc(len);
	int32_t *ids = NULL;
	size_t n = 0;
	memset(s, 'a', len); /* one word of a million characters */
	ck_assert_int_eq(text_tokenize(&tok, s, len, &ids, &n), TENSOR_OK);
	ck_assert_uint_eq(n, 1);
	ck_assert_int_eq(ids[0], 100);
	for (size_t i = 0; i < len; i += 2)
		memcpy(s + i, "a.", 2);
	n = 0;
	ck_assert_int_eq(text_tokenize(&tok, s, len, &ids, &n), TENSOR_OK);
	ck_assert_uint_eq(n, len);
	ck_assert(ids[0] == 1037 && ids[1] == 1012 && ids[len - 2] == 1037 && ids[len - 1] == 1012);
	/* arbitrary bytes: never more ids than bytes, all in range */
	uint64_t x = 42;
	for (size_t i = 0; i < len; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		s[i] = (char)(x >> 56);
	}
	n = 0;
	ck_assert_int_eq(text_tokenize(&tok, s, len, &ids, &n), TENSOR_OK);
	ck_assert(n > 0 && n <= len);
	for (size_t i = 0; i < n; i++)
		ck_assert(ids[i] >= 0 && ids[i] < tok.vocab_size);
	free(ids);
	free(s);
	text_tokenizer_free(&tok);
}
END_TEST

/* ---- encode ---------------------------------------------------------------------- */

START_TEST(test_encode)
{
	struct text_tokenizer tok;
	load_bert(&tok);
	int32_t ids[16], mask[16];
	int64_t length = -1;
	ck_assert_int_eq(text_encode(&tok, "Hello world", 11, 8, ids, mask, &length), TENSOR_OK);
	const int32_t want[8] = { 101, 7592, 2088, 102, 0, 0, 0, 0 };
	for (int i = 0; i < 8; i++) {
		ck_assert_int_eq(ids[i], want[i]);
		ck_assert_int_eq(mask[i], i < 4);
	}
	ck_assert_int_eq(length, 4);
	/* exact fit */
	ck_assert_int_eq(text_encode(&tok, "Hello world", 11, 4, ids, mask, &length), TENSOR_OK);
	ck_assert(ids[0] == 101 && ids[1] == 7592 && ids[2] == 2088 && ids[3] == 102);
	ck_assert(mask[0] && mask[1] && mask[2] && mask[3] && length == 4);
	/* truncation, also inside a word: una ##ffa ##ble */
	ck_assert_int_eq(text_encode(&tok, "unaffable", 9, 4, ids, mask, NULL), TENSOR_OK);
	ck_assert(ids[0] == 101 && ids[1] == 14477 && ids[2] == 20961 && ids[3] == 102);
	/* n = 2 and empty text */
	ck_assert_int_eq(text_encode(&tok, "unaffable", 9, 2, ids, mask, &length), TENSOR_OK);
	ck_assert(ids[0] == 101 && ids[1] == 102 && mask[0] == 1 && mask[1] == 1 && length == 2);
	ck_assert_int_eq(text_encode(&tok, NULL, 0, 5, ids, mask, &length), TENSOR_OK);
	ck_assert(ids[0] == 101 && ids[1] == 102 && ids[2] == 0 && ids[4] == 0 && length == 2);
	ck_assert(mask[1] == 1 && mask[2] == 0 && mask[4] == 0);
	text_tokenizer_free(&tok);
}
END_TEST

/* Encoding at every n equals [CLS] + tokens of text_tokenize + [SEP] + pads: the first
 * room = n - 2 of them, or with keep_tail the first room - tail and the last tail
 * (tail = min(keep_tail, room)); all of them if they fit. */
START_TEST(test_encode_matches_tokenize)
{
	struct text_tokenizer tok;
	load_bert(&tok);
	const char *text = "I've seen many horror movies. Ångström's naïve café: 中文字符!! "
			   "antidisestablishmentarianism <br /><br /> 10/10 \xff\xfe ok";
	int32_t *full = NULL;
	size_t nf = 0;
	ck_assert_int_eq(text_tokenize(&tok, text, strlen(text), &full, &nf), TENSOR_OK);
	ck_assert(nf > 30 && nf < 78);
	const int64_t tails[] = { 0, 1, 7, 1000 };
	int32_t ids[80], mask[80];
	for (int t = 0; t < 4; t++) {
		tok.keep_tail = tails[t];
		for (int64_t n = 2; n < 80; n++) {
			int64_t length;
			ck_assert_int_eq(
			    text_encode(&tok, text, strlen(text), n, ids, mask, &length),
			    TENSOR_OK);
			size_t room = (size_t)n - 2, k = room < nf ? room : nf;
			size_t tail = nf <= room		? 0
				      : (size_t)tails[t] < room ? (size_t)tails[t]
								: room;
			ck_assert_int_eq(length, (int64_t)k + 2);
			ck_assert(ids[0] == 101 && ids[k + 1] == 102);
			for (size_t i = 0; i < k - tail; i++)
				ck_assert_int_eq(ids[1 + i], full[i]);
			for (size_t i = 0; i < tail; i++)
				ck_assert_int_eq(ids[1 + k - tail + i], full[nf - tail + i]);
			for (int64_t i = 0; i < n; i++) {
				ck_assert_int_eq(mask[i], i < length);
				if (i >= length)
					ck_assert_int_eq(ids[i], 0);
			}
		}
	}
	/* n = 7: the first two tokens, then the last three */
	tok.keep_tail = 3;
	ck_assert_int_eq(text_encode(&tok, text, strlen(text), 7, ids, mask, NULL), TENSOR_OK);
	ck_assert(ids[1] == full[0] && ids[2] == full[1] && ids[3] == full[nf - 3] &&
		  ids[5] == full[nf - 1] && ids[6] == 102);
	free(full);
	text_tokenizer_free(&tok);
}
END_TEST

/* Truncation never turns a word that is [UNK] into its matching prefix. */
START_TEST(test_encode_truncates_after_unk)
{
	struct text_tokenizer tok;
	load_small(&tok, SPECIALS "ab\n##c\n");
	int32_t ids[3], mask[3];
	ck_assert_int_eq(text_encode(&tok, "abcd", 4, 3, ids, mask, NULL), TENSOR_OK);
	ck_assert(ids[0] == 2 && ids[1] == 1 && ids[2] == 3);
	ck_assert_int_eq(text_encode(&tok, "abc abcd", 8, 3, ids, mask, NULL), TENSOR_OK);
	ck_assert(ids[0] == 2 && ids[1] == 5 && ids[2] == 3);
	text_tokenizer_free(&tok);
}
END_TEST

START_TEST(test_encode_errors)
{
	struct text_tokenizer tok;
	load_bert(&tok);
	int32_t ids[4] = { -7, -7, -7, -7 }, mask[4] = { -7, -7, -7, -7 };
	int64_t length = -7;
	tu_assert_error(text_encode(&tok, "a", 1, 1, ids, mask, &length) != TENSOR_OK,
			TENSOR_ERR_ARG, "text_encode", "n = 1, expected >= 2");
	tu_assert_error(text_encode(&tok, "a", 1, -3, ids, mask, &length) != TENSOR_OK,
			TENSOR_ERR_ARG, "text_encode", "n = -3");
	tu_assert_error(text_encode(&tok, "a", 1, 4, NULL, mask, &length) != TENSOR_OK,
			TENSOR_ERR_ARG, "text_encode", "ids is NULL");
	tu_assert_error(text_encode(&tok, "a", 1, 4, ids, NULL, &length) != TENSOR_OK,
			TENSOR_ERR_ARG, "text_encode", "mask is NULL");
	tu_assert_error(text_encode(&tok, NULL, 3, 4, ids, mask, &length) != TENSOR_OK,
			TENSOR_ERR_ARG, "text_encode", "text is NULL");
	tu_assert_error(text_encode(NULL, "a", 1, 4, ids, mask, &length) != TENSOR_OK,
			TENSOR_ERR_ARG, "text_encode", "tok is NULL");
	tok.keep_tail = -1;
	tu_assert_error(text_encode(&tok, "a", 1, 4, ids, mask, &length) != TENSOR_OK,
			TENSOR_ERR_ARG, "text_encode", "keep_tail = -1, expected >= 0");
	for (int i = 0; i < 4; i++)
		ck_assert(ids[i] == -7 && mask[i] == -7);
	ck_assert_int_eq(length, -7);
	text_tokenizer_free(&tok);
	tu_assert_error(text_encode(&tok, "a", 1, 4, ids, mask, &length) != TENSOR_OK,
			TENSOR_ERR_ARG, "text_encode", "no vocabulary");
}
END_TEST

/* ---- byte tokenizer --------------------------------------------------------------- */

START_TEST(test_byte_tokenizer)
{
	struct text_tokenizer tok;
	memset(&tok, 0x5A, sizeof tok);
	ck_assert_int_eq(text_byte_init(&tok), TENSOR_OK);
	ck_assert_int_eq(tok.kind, TEXT_BYTE);
	ck_assert_int_eq(tok.vocab_size, 261);
	ck_assert(tok.pad_id == 0 && tok.unk_id == 1 && tok.cls_id == 2 && tok.sep_id == 3 &&
		  tok.mask_id == 4);
	ck_assert_ptr_null(tok.vocab);
	/* every byte, UTF-8 or not, is 5 + byte: no normalisation */
	char all[256];
	int32_t want[256];
	for (int i = 0; i < 256; i++) {
		all[i] = (char)i;
		want[i] = 5 + i;
	}
	int32_t *ids = NULL;
	size_t n = 0;
	ck_assert_int_eq(text_tokenize(&tok, all, 256, &ids, &n), TENSOR_OK);
	ck_assert_int_eq(text_tokenize(&tok, "Ab", 2, &ids, &n), TENSOR_OK);
	ck_assert_uint_eq(n, 258);
	ck_assert(!memcmp(ids, want, sizeof want));
	ck_assert(ids[256] == 70 && ids[257] == 103);
	free(ids);
	int32_t e[6], m[6];
	int64_t length;
	ck_assert_int_eq(text_encode(&tok, "A\x00\xff\xc3", 4, 6, e, m, &length), TENSOR_OK);
	const int32_t we[6] = { 2, 70, 5, 260, 200, 3 };
	ck_assert(!memcmp(e, we, sizeof we) && length == 6);
	ck_assert_int_eq(text_encode(&tok, "Hi", 2, 6, e, m, &length), TENSOR_OK);
	const int32_t wp[6] = { 2, 77, 110, 3, 0, 0 }, wm[6] = { 1, 1, 1, 1, 0, 0 };
	ck_assert(!memcmp(e, wp, sizeof wp) && !memcmp(m, wm, sizeof wm) && length == 4);
	ck_assert_int_eq(text_encode(&tok, "Hello", 5, 4, e, m, &length), TENSOR_OK);
	ck_assert(e[0] == 2 && e[1] == 77 && e[2] == 106 && e[3] == 3 && length == 4);
	text_tokenizer_free(&tok);
	ck_assert_int_eq(tok.kind, 0);
	ck_assert_int_eq(tok.vocab_size, 0);
	tu_assert_error(text_byte_init(NULL) != TENSOR_OK, TENSOR_ERR_ARG, "text_byte_init",
			"NULL");
}
END_TEST

START_TEST(test_byte_token_strings)
{
	struct text_tokenizer tok;
	text_byte_init(&tok);
	char buf[8];
	ck_assert_str_eq(text_token_string(&tok, 0, NULL, 0), "[PAD]");
	ck_assert_str_eq(text_token_string(&tok, 1, NULL, 0), "[UNK]");
	ck_assert_str_eq(text_token_string(&tok, 2, NULL, 0), "[CLS]");
	ck_assert_str_eq(text_token_string(&tok, 3, NULL, 0), "[SEP]");
	ck_assert_str_eq(text_token_string(&tok, 4, NULL, 0), "[MASK]");
	ck_assert_str_eq(text_token_string(&tok, 5, buf, sizeof buf), "<0x00>");
	ck_assert_str_eq(text_token_string(&tok, 70, buf, sizeof buf), "<0x41>");
	ck_assert_str_eq(text_token_string(&tok, 260, buf, 7), "<0xFF>");
	ck_assert_ptr_null(text_token_string(&tok, 70, buf, 6));
	tu_assert_error(true, TENSOR_ERR_ARG, "text_token_string", ">= 7 bytes");
	ck_assert_ptr_null(text_token_string(&tok, 70, NULL, 0));
	tu_assert_error(true, TENSOR_ERR_ARG, "text_token_string", ">= 7 bytes");
	ck_assert_ptr_null(text_token_string(&tok, 261, buf, sizeof buf));
	tu_assert_error(true, TENSOR_ERR_ARG, "text_token_string", "261 out of range [0, 261)");
	ck_assert_ptr_null(text_token_string(NULL, 5, buf, sizeof buf));
	tu_assert_error(true, TENSOR_ERR_ARG, "text_token_string", "tok is NULL");
}
END_TEST

/* ---- the vocabulary's fingerprint ------------------------------------------------------ */

/* FNV-1a 64 of len bytes at p. */
static uint64_t fnv1a(const char *p, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)p[i]) * 0x100000001b3ull;
	return h;
}

static uint64_t hash_of(const struct text_tokenizer *tok)
{
	uint64_t h = 0;
	ck_assert_msg(text_tokenizer_hash(tok, &h) == TENSOR_OK, "%s", tensor_last_error());
	return h;
}

START_TEST(test_tokenizer_hash)
{
	/* BERT's vocab.txt ('\n' line ends, a final newline): the hash of the file's bytes */
	struct text_tokenizer bert, tok, bytes;
	size_t len;
	char *file = slurp(data_path("bert-base-uncased-vocab.txt"), &len);
	load_bert(&bert);
	ck_assert_uint_eq(hash_of(&bert), fnv1a(file, len));
	free(file);
	/* the same tokens with other line ends hash alike; one token changed or moved does not */
	static const char *const same[] = {
		"the\n[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n##s\n",
		"the\r\n[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\n##s\r\n",
		"the\n[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n##s",
	};
	uint64_t want = fnv1a(same[0], strlen(same[0]));
	for (size_t f = 0; f < 3; f++) {
		load_small(&tok, same[f]);
		ck_assert_uint_eq(hash_of(&tok), want);
		text_tokenizer_free(&tok);
	}
	static const char *const other[] = {
		"the\n[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n##t\n",
		"[PAD]\nthe\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n##s\n",
		"the\n[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n##s\nx\n",
	};
	for (size_t f = 0; f < 3; f++) {
		load_small(&tok, other[f]);
		ck_assert_uint_ne(hash_of(&tok), want);
		text_tokenizer_free(&tok);
	}
	/* the byte tokenizer: its names, one a line */
	char names[261 * 8], *o = names;
	o += sprintf(o, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n");
	for (int b = 0; b < 256; b++)
		o += sprintf(o, "<0x%02X>\n", b);
	ck_assert_int_eq(text_byte_init(&bytes), TENSOR_OK);
	ck_assert_uint_eq(hash_of(&bytes), fnv1a(names, (size_t)(o - names)));
	/* errors */
	uint64_t h = 7;
	tu_assert_error(text_tokenizer_hash(NULL, &h) < 0, TENSOR_ERR_ARG, "text_tokenizer_hash",
			"tok is NULL");
	tu_assert_error(text_tokenizer_hash(&bert, NULL) < 0, TENSOR_ERR_ARG, "text_tokenizer_hash",
			"hash is NULL");
	text_tokenizer_free(&bert);
	tu_assert_error(text_tokenizer_hash(&bert, &h) < 0, TENSOR_ERR_ARG, "text_tokenizer_hash",
			NULL);
	ck_assert_uint_eq(h, 7);
}
END_TEST

/* ---- vocabulary errors -------------------------------------------------------------- */

/* Loading data must fail with an I/O error naming what is in sub1, sub2
 * and leave the tokenizer as it was. */
static void expect_load_error(const char *data, size_t len, const char *sub1, const char *sub2)
{
	char *path = temp_file(data, len);
	struct text_tokenizer tok, before;
	memset(&tok, 0x5A, sizeof tok);
	memcpy(&before, &tok, sizeof tok);
	int st = text_wordpiece_load(&tok, path);
	ck_assert_msg(strstr(tensor_last_error(), path), "message '%s' lacks the path",
		      tensor_last_error());
	tu_assert_error(st != TENSOR_OK, TENSOR_ERR_IO, sub1, sub2);
	ck_assert_msg(!memcmp(&tok, &before, sizeof tok), "tokenizer changed by a failed load");
	unlink(path);
	free(path);
}

START_TEST(test_vocab_errors)
{
	expect_load_error("", 0, "text_wordpiece_load", "empty vocabulary");
	expect_load_error(SPECIALS "foo\nbar\nfoo\n", strlen(SPECIALS "foo\nbar\nfoo\n"),
			  ":8: duplicate token \"foo\"", "(first at line 6)");
	expect_load_error(SPECIALS "[PAD]\n", strlen(SPECIALS "[PAD]\n"),
			  ":6: duplicate token \"[PAD]\"", "(first at line 1)");
	expect_load_error("[PAD]\n\n[UNK]\n", 13, ":2: empty line", "one token per line");
	expect_load_error("\n", 1, ":1: empty line", NULL);
	expect_load_error(SPECIALS "a\0b\n", strlen(SPECIALS) + 4, ":6: NUL byte", NULL);
	static const char *const special[5] = { "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]" };
	for (int k = 0; k < 5; k++) {
		char data[128] = "", want[64];
		for (int i = 0; i < 5; i++)
			if (i != k) {
				strcat(data, special[i]);
				strcat(data, "\n");
			}
		strcat(data, "[mask]\nword\n");
		snprintf(want, sizeof want, "missing special token %s", special[k]);
		expect_load_error(data, strlen(data), "text_wordpiece_load", want);
	}
}
END_TEST

START_TEST(test_vocab_file_errors)
{
	struct text_tokenizer tok, before;
	memset(&tok, 0x5A, sizeof tok);
	memcpy(&before, &tok, sizeof tok);
	tu_assert_error(text_wordpiece_load(&tok, "/nonexistent/cformer/vocab.txt") != TENSOR_OK,
			TENSOR_ERR_IO, "text_wordpiece_load: cannot open '/nonexistent/cformer/vocab.txt'",
			"No such file");
	tu_assert_error(text_wordpiece_load(&tok, "/tmp") != TENSOR_OK, TENSOR_ERR_IO,
			"text_wordpiece_load: cannot read '/tmp'", "Is a directory");
	tu_assert_error(text_wordpiece_load(&tok, NULL) != TENSOR_OK, TENSOR_ERR_ARG,
			"text_wordpiece_load", "vocab_path is NULL");
	ck_assert(!memcmp(&tok, &before, sizeof tok));
	tu_assert_error(text_wordpiece_load(NULL, "x") != TENSOR_OK, TENSOR_ERR_ARG,
			"text_wordpiece_load", "tok is NULL");
}
END_TEST

/* ---- bad arguments, unloaded and freed tokenizers ----------------------------------- */

START_TEST(test_bad_args)
{
	struct text_tokenizer tok;
	load_bert(&tok);
	int32_t *ids = NULL;
	size_t n = 0;
	tu_assert_error(text_tokenize(NULL, "a", 1, &ids, &n) != TENSOR_OK, TENSOR_ERR_ARG,
			"text_tokenize", "tok is NULL");
	tu_assert_error(text_tokenize(&tok, "a", 1, NULL, &n) != TENSOR_OK, TENSOR_ERR_ARG,
			"text_tokenize", "ids is NULL");
	tu_assert_error(text_tokenize(&tok, "a", 1, &ids, NULL) != TENSOR_OK, TENSOR_ERR_ARG,
			"text_tokenize", "n is NULL");
	tu_assert_error(text_tokenize(&tok, NULL, 1, &ids, &n) != TENSOR_OK, TENSOR_ERR_ARG,
			"text_tokenize", "text is NULL, len 1");
	n = 3;
	tu_assert_error(text_tokenize(&tok, "a", 1, &ids, &n) != TENSOR_OK, TENSOR_ERR_ARG,
			"text_tokenize", "*ids is NULL but *n is 3");
	ck_assert(n == 3 && ids == NULL);
	n = 0;
	ck_assert_int_eq(text_tokenize(&tok, NULL, 0, &ids, &n), TENSOR_OK);
	ck_assert_uint_eq(n, 0);

	struct text_tokenizer odd = tok;
	odd.kind = (enum text_tokenizer_kind)7;
	tu_assert_error(text_tokenize(&odd, "a", 1, &ids, &n) != TENSOR_OK, TENSOR_ERR_ARG,
			"text_tokenize", "unknown tokenizer kind 7");

	text_tokenizer_free(&tok);
	struct text_tokenizer zero;
	memset(&zero, 0, sizeof zero);
	ck_assert(!memcmp(&tok, &zero, sizeof tok));
	text_tokenizer_free(&tok); /* twice is harmless */
	text_tokenizer_free(NULL);
	tu_assert_error(text_tokenize(&tok, "a", 1, &ids, &n) != TENSOR_OK, TENSOR_ERR_ARG,
			"text_tokenize", "no vocabulary");
	ck_assert_ptr_null(text_token_string(&tok, 0, NULL, 0));
	tu_assert_error(true, TENSOR_ERR_ARG, "text_token_string", "no vocabulary");
	ck_assert(n == 0 && ids == NULL);
}
END_TEST

/* ---- concurrent use of one tokenizer --------------------------------------------- */

struct job {
	const struct text_tokenizer *tok;
	const struct fcase *c;
	size_t n;
	int bad;
};

static void *tokenize_all(void *arg)
{
	struct job *j = arg;
	for (int rep = 0; rep < 3; rep++)
		for (size_t i = 0; i < j->n; i++) {
			int32_t *ids = NULL;
			size_t n = 0;
			if (text_tokenize(j->tok, j->c[i].text, j->c[i].len, &ids, &n) ||
			    n != j->c[i].n || (n && memcmp(ids, j->c[i].ids, n * sizeof *ids)))
				j->bad++;
			free(ids);
		}
	return NULL;
}

START_TEST(test_threads)
{
	struct text_tokenizer tok;
	load_bert(&tok);
	size_t n;
	char *keep;
	struct fcase *c = load_cases("cases.tsv", 'j', &n, &keep);
	pthread_t th[4];
	struct job jobs[4];
	for (int t = 0; t < 4; t++) {
		jobs[t] = (struct job){ &tok, c, n, 0 };
		ck_assert_int_eq(pthread_create(&th[t], NULL, tokenize_all, &jobs[t]), 0);
	}
	for (int t = 0; t < 4; t++) {
		pthread_join(th[t], NULL);
		ck_assert_int_eq(jobs[t].bad, 0);
	}
	free_cases(c, n, keep);
	text_tokenizer_free(&tok);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("text_tokenizer");
	TCase *tc = tu_tcase("fixtures");
	tcase_add_test(tc, test_fixture_cases);
	tcase_add_test(tc, test_fixture_invalid_utf8);
	tcase_add_test(tc, test_fixture_unicode_sweep);
	suite_add_tcase(s, tc);
	tc = tu_tcase("wordpiece");
	tcase_add_test(tc, test_wordpiece_greedy);
	tcase_add_test(tc, test_canonical_order);
	tcase_add_test(tc, test_vocab_formats);
	tcase_add_test(tc, test_bert_basics);
	tcase_add_test(tc, test_tokenize_appends);
	tcase_add_test(tc, test_long_inputs);
	tcase_add_test(tc, test_threads);
	suite_add_tcase(s, tc);
	tc = tu_tcase("encode");
	tcase_add_test(tc, test_encode);
	tcase_add_test(tc, test_encode_matches_tokenize);
	tcase_add_test(tc, test_encode_truncates_after_unk);
	tcase_add_test(tc, test_encode_errors);
	suite_add_tcase(s, tc);
	tc = tu_tcase("byte");
	tcase_add_test(tc, test_byte_tokenizer);
	tcase_add_test(tc, test_byte_token_strings);
	tcase_add_test(tc, test_tokenizer_hash);
	suite_add_tcase(s, tc);
	tc = tu_tcase("errors");
	tcase_add_test(tc, test_vocab_errors);
	tcase_add_test(tc, test_vocab_file_errors);
	tcase_add_test(tc, test_bad_args);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
