/* cformer-tokenize: print the token ids (or token strings) of its
 * arguments, or of each line of standard input, for debugging. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"

static const char usage[] =
    "usage: cformer-tokenize (--vocab FILE | --byte) [--n N [--keep-tail T]] [--tokens] [--]\n"
    "                        [TEXT...]\n"
    "\n"
    "Prints the ids of each TEXT, or of each line of standard input when no TEXT is\n"
    "given, one line per input, space-separated.\n"
    "\n"
    "  --vocab FILE  BERT uncased WordPiece with this vocab.txt\n"
    "  --byte        byte-level tokenizer (ids 5 + byte; 0-4 are special)\n"
    "  --n N         model input of length N: [CLS] tokens [SEP] [PAD]...\n"
    "  --keep-tail T a text over N - 2 tokens keeps its last T tokens and the first\n"
    "                ones before them (default 0: the first N - 2)\n"
    "  --tokens      print token strings instead of ids\n"
    "  --help        this text\n";

struct opts {
	const char *vocab;
	int byte, tokens;
	long long n, keep_tail;
};

static int fail(const char *msg, const char *arg)
{
	fprintf(stderr, "cformer-tokenize: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
	return 1;
}

static int print_ids(const struct text_tokenizer *tok, const struct opts *o, const int32_t *ids,
		     size_t n)
{
	char buf[16];
	for (size_t i = 0; i < n; i++) {
		if (i)
			putchar(' ');
		if (!o->tokens) {
			printf("%d", (int)ids[i]);
			continue;
		}
		const char *s = text_token_string(tok, ids[i], buf, sizeof buf);
		if (!s)
			return fail(tensor_last_error(), NULL);
		fputs(s, stdout);
	}
	putchar('\n');
	return 0;
}

static int run(const struct text_tokenizer *tok, const struct opts *o, const char *text, size_t len)
{
	int32_t *ids = NULL;
	size_t n = 0;
	int st;
	if (o->n > 0) {
		ids = malloc(2 * (size_t)o->n * sizeof *ids);
		if (!ids)
			return fail("out of memory", NULL);
		n = (size_t)o->n;
		st = text_encode(tok, text, len, o->n, ids, ids + n, NULL);
	} else {
		st = text_tokenize(tok, text, len, &ids, &n);
	}
	int rc = st ? fail(tensor_last_error(), NULL) : print_ids(tok, o, ids, n);
	free(ids);
	return rc;
}

int main(int argc, char **argv)
{
	struct opts o = { 0 };
	int i = 1;
	for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--")) {
			i++;
			break;
		} else if (!strcmp(a, "--help")) {
			fputs(usage, stdout);
			return 0;
		} else if (!strcmp(a, "--byte")) {
			o.byte = 1;
		} else if (!strcmp(a, "--tokens")) {
			o.tokens = 1;
		} else if (!strcmp(a, "--vocab") || !strcmp(a, "--n") ||
			   !strcmp(a, "--keep-tail")) {
			if (i + 1 >= argc)
				return fail("missing value for", a);
			const char *v = argv[++i];
			if (a[2] == 'v') {
				o.vocab = v;
				continue;
			}
			bool n = a[2] == 'n';
			char *end;
			errno = 0;
			long long x = strtoll(v, &end, 10);
			if (errno || *end || end == v || x < (n ? 2 : 0) || x > (1LL << 30))
				return fail(
				    n ? "--n: expected an integer in [2, 2^30], got"
				      : "--keep-tail: expected an integer in [0, 2^30], got",
				    v);
			*(n ? &o.n : &o.keep_tail) = x;
		} else {
			fprintf(stderr, "%s", usage);
			return fail("unknown option", a);
		}
	}
	if (o.keep_tail && !o.n) {
		fprintf(stderr, "%s", usage);
		return fail("--keep-tail goes with --n", NULL);
	}
	if (!o.vocab == !o.byte) {
		fprintf(stderr, "%s", usage);
		return fail("give exactly one of --vocab FILE and --byte", NULL);
	}
	struct text_tokenizer tok;
	if ((o.byte ? text_byte_init(&tok) : text_wordpiece_load(&tok, o.vocab)) != TENSOR_OK)
		return fail(tensor_last_error(), NULL);
	tok.keep_tail = o.keep_tail;
	int rc = 0;
	if (i < argc) {
		for (; i < argc && !rc; i++)
			rc = run(&tok, &o, argv[i], strlen(argv[i]));
	} else {
		char *line = NULL;
		size_t cap = 0;
		ssize_t len;
		while (!rc && (len = getline(&line, &cap, stdin)) >= 0) {
			if (len > 0 && line[len - 1] == '\n')
				len--;
			rc = run(&tok, &o, line, (size_t)len);
		}
		free(line);
		if (!rc && ferror(stdin))
			rc = fail("error reading standard input", NULL);
	}
	text_tokenizer_free(&tok);
	if (!rc && fflush(stdout))
		rc = fail("error writing standard output", strerror(errno));
	return rc;
}
