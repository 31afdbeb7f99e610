/* BERT uncased WordPiece: vocab.txt loading (the tokens in an stb_ds array;
 * a flat open-addressing index finds duplicates and serves lookups), the
 * reference BasicTokenizer's normalisation (utf8proc), greedy
 * longest-match-first WordPiece, and the tokenize/encode entry points that
 * dispatch on the tokenizer kind. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "mem.h"

/* stb_ds cannot report a failed allocation (it writes through the result):
 * its allocator jumps back to vocab_parse instead, where the only growing
 * array (text_vocab.tokens) is left as it was. */
static _Thread_local jmp_buf *stbds_nomem;
static void *stbds_realloc_or_jump(void *p, size_t n)
{
	void *q = tensor_host_realloc(p, n);
	if (!q)
		longjmp(*stbds_nomem, 1);
	return q;
}
#define STBDS_REALLOC(context, p, n) stbds_realloc_or_jump(p, n)
#define STBDS_FREE(context, p) free(p)
#define STBDS_NO_SHORT_NAMES
#define STB_DS_IMPLEMENTATION
#if defined(HAVE_STB_DS_H) && !defined(HAVE_STB_STB_DS_H)
#include <stb_ds.h>
#else
#include <stb/stb_ds.h>
#endif

#include "text_internal.h"

#define WORD_MAX_CHARS 100 /* longer words become [UNK], as in the reference */
#define WORD_BYTES (4 * WORD_MAX_CHARS)
#define NO_RUN ((size_t)-1)

/* A slot of the lookup index (open addressing, linear probing): the first
 * 7 bytes of the token and its length (capped at 255) packed in head, so
 * short tokens compare without leaving the slot. */
struct vocab_slot {
	uint64_t head; /* 0: empty slot */
	uint32_t hash;
	int32_t id;
};

struct text_vocab {
	char *data;		  /* the file, tokens NUL-terminated in place */
	char **tokens;		  /* stb_ds array: id -> token */
	struct vocab_slot *slots; /* token -> id, 2^k slots, at most half full */
	size_t mask;
	size_t max_len, max_cont; /* longest token, longest "##" continuation (bytes) */
};

/* ---- vocabulary ------------------------------------------------------------ */

static void vocab_free(struct text_vocab *v)
{
	if (!v)
		return;
	stbds_arrfree(v->tokens);
	free(v->slots);
	free(v->data);
	free(v);
}

static inline uint32_t hash_bytes(const char *s, size_t len)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)s[i]) * 16777619u;
	return h ^ (h >> 15);
}

static inline uint64_t head_bytes(const char *s, size_t len)
{
	uint64_t h = (uint64_t)(len < 255 ? len : 255) << 56;
	for (size_t i = 0; i < len && i < 7; i++)
		h |= (uint64_t)(uint8_t)s[i] << (8 * i);
	return h;
}

/* The id of the token s[0..len) (len > 0), or -1. Read-only: thread-safe. */
static int32_t vocab_find(const struct text_vocab *v, const char *s, size_t len)
{
	uint32_t h = hash_bytes(s, len);
	uint64_t head = head_bytes(s, len);
	for (size_t i = h & v->mask;; i = (i + 1) & v->mask) {
		const struct vocab_slot *e = &v->slots[i];
		if (!e->head)
			return -1;
		if (e->head == head && e->hash == h &&
		    (len <= 7 || (!memcmp(v->tokens[e->id] + 7, s + 7, len - 7) &&
				  v->tokens[e->id][len] == '\0')))
			return e->id;
	}
}

static int vocab_index(struct text_vocab *v, const char *path)
{
	size_t n = (size_t)stbds_arrlen(v->tokens), cap = 16;
	while (cap < 2 * n)
		cap *= 2;
	v->slots = tensor_host_calloc(cap, sizeof *v->slots);
	if (!v->slots)
		return tensor_error(TENSOR_ERR_NOMEM, "text_wordpiece_load: %s: out of memory",
				    path);
	v->mask = cap - 1;
	for (size_t id = 0; id < n; id++) {
		const char *t = v->tokens[id];
		size_t len = strlen(t);
		int32_t first = vocab_find(v, t, len);
		if (first >= 0)
			return tensor_error(TENSOR_ERR_IO,
					    "text_wordpiece_load: %s:%zu: duplicate "
					    "token \"%.40s\" (first at line %d)",
					    path, id + 1, t, first + 1);
		uint32_t h = hash_bytes(t, len);
		size_t i = h & v->mask;
		while (v->slots[i].head)
			i = (i + 1) & v->mask;
		v->slots[i] = (struct vocab_slot){ head_bytes(t, len), h, (int32_t)id };
	}
	return TENSOR_OK;
}

/* Split data into lines ("\n", "\r\n" or "\r", as Python's text mode reads
 * them) in v->tokens (an stb_ds array); token id = line number - 1.
 * Duplicates are found by vocab_index. */
static int vocab_parse(struct text_vocab *v, const char *path, size_t size)
{
	jmp_buf nomem;
	stbds_nomem = &nomem;
	if (setjmp(nomem))
		return tensor_error(TENSOR_ERR_NOMEM, "text_wordpiece_load: %s: out of memory",
				    path);
	char *p = v->data, *end = v->data + size;
	int64_t line = 0;
	int st = TENSOR_OK;
	while (p < end) {
		line++;
		char *q = p;
		while (q < end && *q != '\n' && *q != '\r')
			q++;
		size_t len = (size_t)(q - p);
		char *next = q + (q < end && *q == '\r' && q + 1 < end && q[1] == '\n' ? 2 : 1);
		*q = '\0';
		if (memchr(p, '\0', len))
			st = tensor_error(TENSOR_ERR_IO,
					  "text_wordpiece_load: %s:%lld: NUL byte in token", path,
					  (long long)line);
		else if (len == 0)
			st = tensor_error(TENSOR_ERR_IO,
					  "text_wordpiece_load: %s:%lld: empty line, expected one "
					  "token per line",
					  path, (long long)line);
		else if (line > INT32_MAX)
			st = tensor_error(TENSOR_ERR_IO,
					  "text_wordpiece_load: %s: more than %d tokens", path,
					  INT32_MAX);
		if (st)
			break;
		stbds_arrput(v->tokens, p);
		if (len > v->max_len)
			v->max_len = len;
		if (len > 2 && p[0] == '#' && p[1] == '#' && len - 2 > v->max_cont)
			v->max_cont = len - 2;
		p = next;
	}
	if (st == TENSOR_OK && line == 0)
		st = tensor_error(TENSOR_ERR_IO, "text_wordpiece_load: %s: empty vocabulary", path);
	return st;
}

int text_wordpiece_load(struct text_tokenizer *tok, const char *vocab_path)
{
	if (!tok || !vocab_path)
		return tensor_error(TENSOR_ERR_ARG, "text_wordpiece_load: %s is NULL",
				    tok ? "vocab_path" : "tok");
	struct text_vocab *v = tensor_host_calloc(1, sizeof *v);
	if (!v)
		return tensor_error(TENSOR_ERR_NOMEM, "text_wordpiece_load: out of memory");
	size_t size = 0;
	int st = text_read_file("text_wordpiece_load", vocab_path, &v->data, &size);
	if (st == TENSOR_OK)
		st = vocab_parse(v, vocab_path, size);
	if (st == TENSOR_OK)
		st = vocab_index(v, vocab_path);
	static const char *const special[5] = { "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]" };
	int32_t ids[5];
	for (int i = 0; i < 5 && st == TENSOR_OK; i++) {
		ids[i] = vocab_find(v, special[i], strlen(special[i]));
		if (ids[i] < 0)
			st = tensor_error(TENSOR_ERR_IO,
					  "text_wordpiece_load: %s: missing special token %s",
					  vocab_path, special[i]);
	}
	if (st != TENSOR_OK) {
		vocab_free(v);
		return st;
	}
	*tok = (struct text_tokenizer){ .kind = TEXT_WORDPIECE,
					.vocab_size = (int32_t)stbds_arrlen(v->tokens),
					.pad_id = ids[0],
					.unk_id = ids[1],
					.cls_id = ids[2],
					.sep_id = ids[3],
					.mask_id = ids[4],
					.vocab = v };
	return TENSOR_OK;
}

/* ---- normalisation (the reference BasicTokenizer) --------------------------- */

/* ASCII: 0 dropped control, 1 whitespace, 2 punctuation (33-47, 58-64,
 * 91-96, 123-126), else the lowercased letter or digit. */
enum { A_DROP, A_SPACE, A_PUNCT };
static const char ascii_map[129] = "\0\0\0\0\0\0\0\0\0\1\1\0\0\1\0\0"
				   "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"
				   "\1\2\2\2\2\2\2\2\2\2\2\2\2\2\2\2"
				   "0123456789\2\2\2\2\2\2"
				   "\2abcdefghijklmno"
				   "pqrstuvwxyz\2\2\2\2\2"
				   "\2abcdefghijklmno"
				   "pqrstuvwxyz\2\2\2\2\0";

/* Strict UTF-8 (Unicode Table 3-7): the code point, or -1 after consuming
 * one byte of an ill-formed sequence (the reference sees U+FFFD there and
 * drops it, so how many replacement characters there would be is moot). */
static inline int32_t utf8_next(const uint8_t *s, size_t len, size_t *pi)
{
	size_t i = *pi;
	uint32_t b = s[i], lo = 0x80, hi = 0xBF;
	int32_t c;
	size_t n;
	*pi = i + 1;
	if (b < 0x80)
		return (int32_t)b;
	if (b >= 0xC2 && b <= 0xDF) {
		n = 1;
		c = b & 0x1F;
	} else if (b >= 0xE0 && b <= 0xEF) {
		n = 2;
		c = b & 0x0F;
		lo = b == 0xE0 ? 0xA0 : 0x80; /* overlong */
		hi = b == 0xED ? 0x9F : 0xBF; /* surrogates */
	} else if (b >= 0xF0 && b <= 0xF4) {
		n = 3;
		c = b & 0x07;
		lo = b == 0xF0 ? 0x90 : 0x80; /* overlong */
		hi = b == 0xF4 ? 0x8F : 0xBF; /* > U+10FFFF */
	} else {
		return -1;
	}
	if (len - i - 1 < n)
		return -1;
	for (size_t k = 1; k <= n; k++) {
		uint32_t t = s[i + k];
		if (t < lo || t > hi)
			return -1;
		lo = 0x80;
		hi = 0xBF;
		c = (c << 6) | (int32_t)(t & 0x3F);
	}
	*pi = i + 1 + n;
	return c;
}

/* Dropped by the reference's _clean_text: U+FFFD and categories C* (NUL and
 * the other controls, format, surrogate, private use, unassigned). */
static inline bool is_dropped(int32_t c, int cat)
{
	return c == 0xFFFD || cat == UTF8PROC_CATEGORY_CN || cat >= UTF8PROC_CATEGORY_CC;
}

/* Whitespace: Zs (cleaned to ' ') and U+2028/U+2029, which Python's
 * str.split() also splits on (the other str.isspace() characters are Cc). */
static inline bool is_space(int cat)
{
	return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL ||
	       cat == UTF8PROC_CATEGORY_ZP;
}

static inline bool is_punct(int32_t c, int cat)
{
	if (c < 0x80)
		return ascii_map[c] == A_PUNCT;
	return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

/* The reference's _is_chinese_char: CJK Unified Ideographs and extensions
 * A-E, compatibility ideographs and their supplement. */
static inline bool is_cjk(int32_t c)
{
	return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
	       (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2CEAF) ||
	       (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Streaming state: the word being built (lowercased, NFD, marks stripped)
 * and where its pieces go. buf keeps two bytes in front of the word for the
 * "##" of continuation lookups. */
struct norm {
	const struct text_vocab *vocab;
	struct text_ids *out;
	int32_t unk;
	size_t wlen, wchars; /* bytes stored (first WORD_MAX_CHARS chars), chars seen */
	size_t run;	     /* start of the trailing run of combining marks, or NO_RUN */
	char buf[2 + WORD_BYTES + 1];
};

/* Greedy longest-match-first WordPiece of the current word. */
static int wordpiece_word(struct norm *st)
{
	const struct text_vocab *v = st->vocab;
	if (st->wchars > WORD_MAX_CHARS)
		return text_ids_push(st->out, st->unk);
	char *w = st->buf + 2;
	size_t wlen = st->wlen, start = 0, nsub = 0;
	int32_t sub[WORD_MAX_CHARS];
	while (start < wlen) {
		size_t lim = start == 0 ? v->max_len : v->max_cont;
		size_t end = wlen - start > lim ? start + lim : wlen;
		while (end > start && end < wlen && (w[end] & 0xC0) == 0x80)
			end--;
		char *key = start == 0 ? w : w + start - 2;
		if (start > 0)
			key[0] = key[1] = '#'; /* over bytes already consumed */
		int32_t id = -1;
		while (end > start) {
			id = vocab_find(v, key, (size_t)(w + end - key));
			if (id >= 0)
				break;
			do
				end--;
			while (end > start && (w[end] & 0xC0) == 0x80);
		}
		if (id < 0)
			return text_ids_push(st->out, st->unk);
		sub[nsub++] = id;
		start = end;
	}
	for (size_t i = 0; i < nsub; i++) {
		int r = text_ids_push(st->out, sub[i]);
		if (r)
			return r;
	}
	return 0;
}

static int flush(struct norm *st)
{
	int r = st->wchars ? wordpiece_word(st) : 0;
	st->wlen = st->wchars = 0;
	st->run = NO_RUN;
	return r;
}

/* Append code point c of combining class ccc, keeping a run of marks in
 * canonical order (NFD's stable sort by class). */
static void word_cp(struct norm *st, int32_t c, int ccc)
{
	if (st->wchars++ >= WORD_MAX_CHARS)
		return;
	char *w = st->buf + 2;
	uint8_t enc[4];
	size_t n = (size_t)utf8proc_encode_char(c, enc), at = st->wlen;
	if (ccc > 0 && st->run != NO_RUN) {
		for (size_t p = st->run; p < st->wlen;) {
			size_t q = p;
			int32_t m = utf8_next((const uint8_t *)w, st->wlen, &q);
			if (m >= 0 && utf8proc_get_property(m)->combining_class > ccc) {
				at = p;
				break;
			}
			p = q;
		}
	}
	memmove(w + at + n, w + at, st->wlen - at);
	memcpy(w + at, enc, n);
	st->wlen += n;
}

/* A punctuation character is a word of its own. */
static int punct_word(struct norm *st, int32_t c)
{
	int r = flush(st);
	if (r)
		return r;
	word_cp(st, c, 0);
	return flush(st);
}

/* NFD of an already lowercased character, dropping Mn marks and splitting
 * off punctuation. */
static int put_decomposed(struct norm *st, int32_t lc)
{
	utf8proc_int32_t d[8];
	int bound = 0;
	utf8proc_ssize_t nd = utf8proc_decompose_char(lc, d, 8, UTF8PROC_DECOMPOSE, &bound);
	if (nd < 1 || nd > 8) { /* cannot happen: canonical decompositions are short */
		d[0] = lc;
		nd = 1;
	}
	for (utf8proc_ssize_t k = 0; k < nd; k++) {
		const utf8proc_property_t *p = utf8proc_get_property(d[k]);
		int ccc = p->combining_class;
		if (p->category == UTF8PROC_CATEGORY_MN) {
			if (ccc == 0)
				st->run = NO_RUN;
			else if (st->run == NO_RUN)
				st->run = st->wlen;
			continue;
		}
		if (is_punct(d[k], p->category)) {
			int r = punct_word(st, d[k]);
			if (r)
				return r;
			continue;
		}
		if (ccc == 0) {
			word_cp(st, d[k], 0);
			st->run = NO_RUN;
		} else {
			if (st->run == NO_RUN)
				st->run = st->wlen;
			word_cp(st, d[k], ccc);
		}
	}
	return 0;
}

/* One non-ASCII code point. Lowercasing is per character, as the reference
 * BertTokenizer's pre-pass does (so no Final_Sigma rule: capital sigma
 * always becomes U+03C3). */
static int put_cp(struct norm *st, int32_t c)
{
	int cat = utf8proc_category(c);
	if (is_dropped(c, cat))
		return 0;
	if (is_space(cat))
		return flush(st);
	if (is_cjk(c)) { /* a whitespace token of its own */
		int r = flush(st);
		if (!r)
			r = put_decomposed(st, c);
		return r ? r : flush(st);
	}
	return put_decomposed(st, utf8proc_tolower(c));
}

static int wordpiece_tokenize(const struct text_tokenizer *tok, const char *text, size_t len,
			      struct text_ids *out)
{
	struct norm st = { .vocab = tok->vocab, .out = out, .unk = tok->unk_id, .run = NO_RUN };
	const uint8_t *s = (const uint8_t *)text;
	size_t i = 0;
	int r = 0;
	while (i < len && !r) {
		uint8_t b = s[i];
		if (b >= 0x80) {
			int32_t c = utf8_next(s, len, &i);
			if (c >= 0)
				r = put_cp(&st, c);
			continue;
		}
		char a = ascii_map[b];
		if (a > A_PUNCT) { /* a run of ASCII letters and digits */
			size_t j = i;
			while (j < len && s[j] < 0x80 && ascii_map[s[j]] > A_PUNCT) {
				if (st.wchars + j - i < WORD_MAX_CHARS)
					st.buf[2 + st.wlen++] = ascii_map[s[j]];
				j++;
			}
			st.wchars += j - i;
			st.run = NO_RUN;
			i = j;
			continue;
		}
		i++;
		if (a == A_SPACE)
			r = flush(&st);
		else if (a == A_PUNCT)
			r = punct_word(&st, b);
	}
	if (!r)
		r = flush(&st);
	return r < 0 ? r : 0;
}

/* ---- entry points (both kinds) ---------------------------------------------- */

int text_ids_push(struct text_ids *o, int32_t id)
{
	if (o->len == o->cap) {
		if (!o->grow)
			return 1;
		size_t cap = o->cap < 64 ? 64 : o->cap * 2;
		int32_t *a =
		    cap < SIZE_MAX / sizeof *a ? tensor_host_realloc(o->a, cap * sizeof *a) : NULL;
		if (!a)
			return tensor_error(TENSOR_ERR_NOMEM,
					    "text_tokenize: out of memory for %zu token ids", cap);
		o->a = a;
		o->cap = cap;
	}
	o->a[o->len++] = id;
	return o->len >= o->max;
}

static int check_tok(const char *op, const struct text_tokenizer *tok)
{
	if (!tok)
		return tensor_error(TENSOR_ERR_ARG, "%s: tok is NULL", op);
	if (tok->kind == TEXT_BYTE)
		return TENSOR_OK;
	if (tok->kind != TEXT_WORDPIECE)
		return tensor_error(TENSOR_ERR_ARG, "%s: unknown tokenizer kind %d", op,
				    (int)tok->kind);
	if (!tok->vocab)
		return tensor_error(
		    TENSOR_ERR_ARG,
		    "%s: WordPiece tokenizer has no vocabulary (not loaded, or freed)", op);
	return TENSOR_OK;
}

static int run_tokenizer(const struct text_tokenizer *tok, const char *text, size_t len,
			 struct text_ids *out)
{
	if (out->len >= out->max)
		return TENSOR_OK;
	if (tok->kind == TEXT_BYTE)
		return text_byte_tokenize(text, len, out);
	return wordpiece_tokenize(tok, text, len, out);
}

int text_tokenize(const struct text_tokenizer *tok, const char *text, size_t len, int32_t **ids,
		  size_t *n)
{
	int st = check_tok("text_tokenize", tok);
	if (st)
		return st;
	if (!ids || !n)
		return tensor_error(TENSOR_ERR_ARG, "text_tokenize: %s is NULL", ids ? "n" : "ids");
	if (!text && len)
		return tensor_error(TENSOR_ERR_ARG, "text_tokenize: text is NULL, len %zu", len);
	if (!*ids && *n)
		return tensor_error(TENSOR_ERR_ARG,
				    "text_tokenize: *ids is NULL but *n is %zu, expected 0", *n);
	struct text_ids o = { .a = *ids, .len = *n, .cap = *n, .max = SIZE_MAX, .grow = true };
	st = run_tokenizer(tok, text, len, &o);
	*ids = o.a; /* may have moved even on failure */
	if (st == TENSOR_OK)
		*n = o.len;
	return st;
}

/* All of text's tokens, then the first room - tail and the last tail of them
 * (tail = min(keep_tail, room)) into ids[0 .. *kept). */
static int encode_head_tail(const struct text_tokenizer *tok, const char *text, size_t len,
			    size_t room, int32_t *ids, size_t *kept)
{
	int32_t *all = NULL;
	size_t total = 0;
	int st = text_tokenize(tok, text, len, &all, &total);
	if (st) {
		free(all);
		return st;
	}
	size_t tail = (uint64_t)tok->keep_tail < room ? (size_t)tok->keep_tail : room;
	size_t head = total > room ? room - tail : total;
	memcpy(ids, all, head * sizeof *ids);
	if (total > room)
		memcpy(ids + head, all + total - tail, tail * sizeof *ids);
	*kept = total > room ? room : total;
	free(all);
	return TENSOR_OK;
}

int text_encode(const struct text_tokenizer *tok, const char *text, size_t len, int64_t n,
		int32_t *ids, int32_t *mask, int64_t *length)
{
	int st = check_tok("text_encode", tok);
	if (st)
		return st;
	if (!ids || !mask)
		return tensor_error(TENSOR_ERR_ARG, "text_encode: %s is NULL",
				    ids ? "mask" : "ids");
	if (!text && len)
		return tensor_error(TENSOR_ERR_ARG, "text_encode: text is NULL, len %zu", len);
	if (n < 2 || (uint64_t)n > SIZE_MAX / sizeof *ids)
		return tensor_error(
		    TENSOR_ERR_ARG,
		    "text_encode: n = %lld, expected >= 2 (room for [CLS] and [SEP])",
		    (long long)n);
	if (tok->keep_tail < 0)
		return tensor_error(TENSOR_ERR_ARG, "text_encode: keep_tail = %lld, expected >= 0",
				    (long long)tok->keep_tail);
	size_t room = (size_t)n - 2, kept;
	if (tok->keep_tail == 0) { /* stop tokenising once the head is full */
		struct text_ids o = { .a = ids + 1, .cap = room, .max = room };
		st = run_tokenizer(tok, text, len, &o);
		kept = o.len;
	} else {
		st = encode_head_tail(tok, text, len, room, ids + 1, &kept);
	}
	if (st)
		return st;
	size_t real = kept + 2;
	ids[0] = tok->cls_id;
	ids[real - 1] = tok->sep_id;
	for (size_t i = 0; i < (size_t)n; i++) {
		if (i >= real)
			ids[i] = tok->pad_id;
		mask[i] = i < real;
	}
	if (length)
		*length = (int64_t)real;
	return TENSOR_OK;
}

const char *text_token_string(const struct text_tokenizer *tok, int32_t id, char *buf, size_t len)
{
	if (check_tok("text_token_string", tok))
		return NULL;
	if (id < 0 || id >= tok->vocab_size) {
		tensor_error(TENSOR_ERR_ARG, "text_token_string: id %d out of range [0, %d)",
			     (int)id, (int)tok->vocab_size);
		return NULL;
	}
	if (tok->kind == TEXT_BYTE)
		return text_byte_token_string(id, buf, len);
	return tok->vocab->tokens[id];
}

int text_tokenizer_hash(const struct text_tokenizer *tok, uint64_t *hash)
{
	if (!hash)
		return tensor_error(TENSOR_ERR_ARG, "text_tokenizer_hash: hash is NULL");
	int st = check_tok("text_tokenizer_hash", tok);
	if (st)
		return st;
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64: offset basis, then prime per byte */
	char buf[16];
	for (int32_t id = 0; id < tok->vocab_size; id++) {
		const char *s = text_token_string(tok, id, buf, sizeof buf);
		if (!s)
			return tensor_last_status();
		for (; *s; s++)
			h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
		h = (h ^ (uint8_t)'\n') * 0x100000001b3ull;
	}
	*hash = h;
	return TENSOR_OK;
}

void text_tokenizer_free(struct text_tokenizer *tok)
{
	if (!tok)
		return;
	if (tok->kind == TEXT_WORDPIECE)
		vocab_free(tok->vocab);
	memset(tok, 0, sizeof *tok);
}
