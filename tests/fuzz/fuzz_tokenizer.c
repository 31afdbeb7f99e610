/* libFuzzer target for the tokenizers: any bytes must tokenize and encode
 * without a crash, leak or out-of-bounds access, and the results must keep
 * their invariants (ids in range, at most one id per input byte, encode =
 * [CLS] + prefix + [SEP] + padding, a space splits the token sequence,
 * ASCII case does not matter, bytes map to 5 + byte). The vocabulary is a
 * small one built in, or the file named by $CFORMER_FUZZ_VOCAB (e.g. the
 * BERT one in tests/data/tokenizer). Seeds: tests/fuzz/corpus_tokenizer. */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text.h"

static const char builtin_vocab[] =
    "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n"
    "the\na\nmovie\nfilm\nwas\ngood\nbad\nit\nun\n##aff\n##able\n##s\n##ed\n##ing\n"
    "##a\n##b\n##e\n##i\n##o\nb\nc\ne\ni\no\nx\n1\n2\n##1\n##2\n10\n"
    ".\n,\n!\n?\n'\n\"\n-\n/\n<\n>\n(\n)\n#\n##\n###\n"
    "cafe\nnaive\nß\n##ß\nœ\n中\n文\n日\nσ\n##σ\n##ς\nα\n##α\nᄒ\n##ᅡ\n##ᆫ\n¿\n—\n…\n😀\n";

static struct text_tokenizer wp, byte;

static void setup(void)
{
	const char *path = getenv("CFORMER_FUZZ_VOCAB");
	char tmp[] = "/tmp/cformer-fuzz-vocab-XXXXXX";
	if (!path) {
		int fd = mkstemp(tmp);
		if (fd < 0 || write(fd, builtin_vocab, sizeof builtin_vocab - 1) !=
				  (ssize_t)(sizeof builtin_vocab - 1))
			abort();
		close(fd);
		path = tmp;
	}
	int st = text_wordpiece_load(&wp, path);
	if (path == tmp)
		unlink(tmp);
	if (st != TENSOR_OK || text_byte_init(&byte) != TENSOR_OK) {
		fprintf(stderr, "fuzz_tokenizer: %s\n", tensor_last_error());
		abort();
	}
}

static void check(bool ok)
{
	if (!ok)
		abort();
}

static int32_t *tokenize(const struct text_tokenizer *tok, const char *s, size_t len, size_t *n)
{
	int32_t *ids = NULL;
	*n = 0;
	check(text_tokenize(tok, s, len, &ids, n) == TENSOR_OK);
	for (size_t i = 0; i < *n; i++)
		check(ids[i] >= 0 && ids[i] < tok->vocab_size);
	return ids;
}

static void check_encode(const struct text_tokenizer *tok, const char *s, size_t len,
			 const int32_t *full, size_t nfull, int64_t n)
{
	int32_t *ids = malloc(2 * (size_t)n * sizeof *ids), *mask = ids + n;
	int64_t length = -1;
	check(ids && text_encode(tok, s, len, n, ids, mask, &length) == TENSOR_OK);
	size_t k = nfull < (size_t)n - 2 ? nfull : (size_t)n - 2;
	check(length == (int64_t)k + 2 && ids[0] == tok->cls_id && ids[k + 1] == tok->sep_id);
	check(k == 0 || !memcmp(ids + 1, full, k * sizeof *ids));
	for (int64_t i = 0; i < n; i++)
		check(mask[i] == (i < length) && (i < length || ids[i] == tok->pad_id));
	free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	if (!ready) {
		setup();
		ready = true;
	}
	const char *s = (const char *)data;

	size_t n;
	int32_t *ids = tokenize(&wp, s, size, &n);
	check(n <= size);
	check_encode(&wp, s, size, ids, n, 2 + (size ? data[0] % 40 : 0));

	/* A space between two halves splits the token sequence there. */
	size_t cut = size ? data[size - 1] % (size + 1) : 0, na, nb;
	char *joined = malloc(size + 1);
	memcpy(joined, s, cut);
	joined[cut] = ' ';
	memcpy(joined + cut + 1, s + cut, size - cut);
	int32_t *a = tokenize(&wp, s, cut, &na), *b = tokenize(&wp, s + cut, size - cut, &nb);
	size_t nj;
	int32_t *j = tokenize(&wp, joined, size + 1, &nj);
	check(nj == na + nb && (!na || !memcmp(j, a, na * sizeof *j)) &&
	      (!nb || !memcmp(j + na, b, nb * sizeof *j)));
	free(a);
	free(b);
	free(j);

	/* Swapping the case of ASCII letters changes nothing. */
	for (size_t i = 0; i < size; i++) {
		char c = s[i];
		joined[i] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ? (char)(c ^ 0x20) : c;
	}
	size_t ns;
	int32_t *sw = tokenize(&wp, joined, size, &ns);
	check(ns == n && (!n || !memcmp(sw, ids, n * sizeof *sw)));
	free(sw);
	free(joined);
	free(ids);

	/* Bytes: one id each, 5 + byte. */
	ids = tokenize(&byte, s, size, &n);
	check(n == size);
	for (size_t i = 0; i < size; i++)
		check(ids[i] == 5 + data[i]);
	check_encode(&byte, s, size, ids, n, 2 + (size ? data[0] % 40 : 0));
	free(ids);
	return 0;
}
