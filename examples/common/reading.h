/* How a run read its text, which its checkpoints remember beside the model config (the "text"
 * entry of their metadata) so that --eval-only and --predict read a review as training did:
 * the tokenizer, n (tokens per example, [CLS] and [SEP] included), keep-tail (a longer text
 * keeps its last tokens), whether the text was lowercased, and the vocabulary's fingerprint.
 * Example support code: a file that disagrees with this run, or a flag that contradicts the
 * file, prints "<prog>: --flag: ..." naming both values and exits 1. */
#ifndef CFORMER_READING_H
#define CFORMER_READING_H

#include <stdbool.h>
#include <stdint.h>

#include "flags.h"
#include "text.h"

struct reading {
	char tokenizer[16];  /* "wordpiece" or "byte" */
	int64_t n;	     /* tokens per example */
	int64_t keep_tail;   /* text_tokenizer's keep_tail */
	bool lowercase;	     /* WordPiece (BERT uncased) lowercases; bytes are read as they are */
	uint64_t vocab_hash; /* text_tokenizer_hash */
};

/* How tok (its keep_tail) reads text at n tokens per example. Exits 1 on error. */
struct reading reading_of(const char *prog, const struct text_tokenizer *tok, int64_t n);
/* The same as the JSON a checkpoint keeps (malloc'd): {"tokenizer": "wordpiece", "n": 512,
 * "keep_tail": 382, "lowercase": true, "vocab_fnv1a64": "<16 hex digits>"}. Exits 1 on
 * error. */
char *reading_json(const char *prog, const struct text_tokenizer *tok, int64_t n);
/* The reading checkpoint path (given by the flag what, e.g. "checkpoint") remembers into *r: true,
 * or false when the file has none (it predates them). Exits 1 naming the flag and the file
 * when it cannot be read or its entry is malformed. */
bool reading_load(const char *prog, const char *path, const char *what, struct reading *r);

/* --eval-only and --predict of checkpoint path, whose model reads max_len tokens: tok is set
 * to read as the file's run did (its keep_tail), after checking that tok is its tokenizer
 * (kind, lowercasing, vocabulary by its hash; else exit 1 naming both, and --tokenizer or
 * --vocab where flags has them). A flag of the table that contradicts the file exits 1 naming
 * both values: --n; --keep-tail, where the program has it, instead reads as the flag says
 * (an experiment on how a model reads) and says so on stderr. A file without a reading (older
 * versions) is read with tok's keep_tail and max_len tokens, with a one-line notice on
 * stderr. Returns n. */
int64_t reading_follow(const char *prog, const char *path, struct text_tokenizer *tok,
		       int64_t max_len, struct flag *flags, int nflags);
/* --init-from and --resume (what: the flag that gave checkpoint path) with tokenizer tok:
 * the same checks of the tokenizer; a file without a reading gets a one-line notice. */
void reading_check_tokenizer(const char *prog, const char *path, const struct text_tokenizer *tok,
			     struct flag *flags, int nflags, const char *what);

#endif
