/* cformer text: tokenizers, dataset readers and batching for the models.
 * Built on libtensor only. Functions return a status (TENSOR_OK or negative,
 * with tensor_last_error() naming the file, line or input and what was
 * expected) or NULL; bad files change nothing. */
#ifndef CFORMER_TEXT_H
#define CFORMER_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tokenizers (wordpiece.c, byte_tokenizer.c) ---------------------------- */

enum text_tokenizer_kind { TEXT_WORDPIECE, TEXT_BYTE };

struct text_vocab; /* token string <-> id (wordpiece.c) */

struct text_tokenizer {
	enum text_tokenizer_kind kind;
	int32_t vocab_size;
	int32_t pad_id, unk_id, cls_id, sep_id, mask_id;
	struct text_vocab *vocab; /* WordPiece only */
	/* text_encode's truncation: a text over n - 2 tokens keeps its last
	 * min(keep_tail, n - 2) tokens and as many first ones as fit before them
	 * (head + tail; 0, as loaded: the first n - 2). Set it after loading. */
	int64_t keep_tail;
};

/* BERT uncased WordPiece from a vocab.txt (one token per line, id = line
 * number - 1; needs [PAD] [UNK] [CLS] [SEP] [MASK]). Normalisation as the
 * reference BERT uncased tokenizer: drop control characters and U+FFFD,
 * whitespace to spaces, spaces around CJK ideographs, lowercase, NFD and
 * strip combining marks, split on punctuation (Unicode P* and the ASCII
 * symbol ranges), then greedy longest-match-first WordPiece with "##"
 * continuations; words over 100 chars and words with no match become
 * [UNK]. Invalid UTF-8 bytes are replaced by U+FFFD, which is then dropped
 * like the reference does. Errors: missing/unreadable file, empty vocab,
 * duplicate token (naming the line), missing special token. */
int text_wordpiece_load(struct text_tokenizer *tok, const char *vocab_path);
/* Notes on matching the reference: special-token strings in the input are
 * plain text ("[MASK]" -> "[", "mask", "]"); lowercasing is per character
 * (a final capital sigma gives σ, as the HF tokenizers); characters are kept
 * or dropped by utf8proc's Unicode version. text_tokenize and text_encode are
 * thread-safe on a loaded tokenizer. *tok is overwritten only on success. */
/* Byte-level tokenizer (Long Range Arena text setting): [PAD]=0, [UNK]=1,
 * [CLS]=2, [SEP]=3, [MASK]=4, byte b -> 5 + b; vocab_size 261. */
int text_byte_init(struct text_tokenizer *tok);
void text_tokenizer_free(struct text_tokenizer *tok);

/* Token ids of text (len bytes, any bytes), no specials, appended to *ids
 * (a growable array: *ids NULL or from an earlier call, *n its length; free
 * with free()). */
int text_tokenize(const struct text_tokenizer *tok, const char *text, size_t len, int32_t **ids,
		  size_t *n);
/* Model input of length n: [CLS] tokens [SEP], tokens truncated to n - 2
 * (the first ones, or head + tail with tok->keep_tail), then [PAD] up to n;
 * mask[i] = 1 for real tokens, 0 for padding. Writes n ids and n mask
 * values; *length (may be NULL) receives the real length. n >= 2,
 * tok->keep_tail >= 0. */
int text_encode(const struct text_tokenizer *tok, const char *text, size_t len, int64_t n,
		int32_t *ids, int32_t *mask, int64_t *length);
/* The string of token id, or NULL with an error if out of range: WordPiece
 * returns the vocabulary's string (owned by tok; buf unused); the byte
 * tokenizer writes "[PAD]"-style names or "<0xHH>" into buf (len >= 7). */
const char *text_token_string(const struct text_tokenizer *tok, int32_t id, char *buf, size_t len);
/* A fingerprint of tok's vocabulary into *hash: FNV-1a 64 of every id's token string
 * (text_token_string) followed by '\n', in id order. For a WordPiece vocabulary it is the
 * FNV-1a 64 of its vocab.txt's bytes when that file has '\n' line ends and a final newline,
 * and the same for the same tokens in a file with other line ends; the byte tokenizer
 * hashes its names ("[PAD]" .. "<0xff>"). Errors: tok or hash NULL, tok not loaded. */
int text_tokenizer_hash(const struct text_tokenizer *tok, uint64_t *hash);

/* ---- datasets (imdb.c, lines.c) -------------------------------------------- */

struct text_example {
	char *text;	/* UTF-8, owned */
	int32_t label;	/* class (IMDB: 0 neg, 1 pos); -1 if unlabelled */
	int32_t rating; /* IMDB star rating 1-10; 0 if none */
	int64_t group;	/* examples that belong together (IMDB: the movie), > 0; 0 if none */
};

struct text_dataset {
	struct text_example *items;
	int64_t n;
};

/* The aclImdb layout: dir/<split>/{neg,pos}/<id>_<rating>.txt, split "train"
 * or "test", or the unlabelled reviews dir/train/unsup/<id>_0.txt, split "unsup"
 * (label -1, rating 0, groups from train/urls_unsup.txt). dir may also be the
 * original archive, aclImdb_v1.tar.gz (any tar, compressed or not, with one top
 * folder holding that layout), read as it is, without unpacking and to its end: a
 * gzip stream's CRC-32 and length are checked (zlib), other compressions as libarchive
 * checks them. Its errors name "ARCHIVE:TOP/<path>"; an archive that cannot be read, is
 * truncated, fails a check or lacks a label folder is TENSOR_ERR_IO. Labels neg 0 / pos 1;
 * <id> and <rating> decimal without leading zeros, rating 1-4 in neg and 7-10 in pos; "<br />", "<br/>", "<br>" (any
 * case) become one space; other bytes are kept (no UTF-8 check); dot-files
 * are skipped; order: neg then pos, each by numeric id. Each review's group
 * is its movie: line id + 1 of <split>/urls_neg.txt or urls_pos.txt (the
 * dataset's movie URLs), numbered 1.. in URL order over the split; 0 where
 * that file is absent. Errors (IO) name the missing directory or the file:
 * malformed name, rating outside its folder's range, duplicate id, NUL byte,
 * unreadable, a urls file too short or with a blank line for a review; a
 * split other than train/test/unsup is TENSOR_ERR_ARG. *out is written only on
 * success. */
int text_imdb_load(const char *dir, const char *split, struct text_dataset *out);
/* The most bytes of review and URL text text_imdb_load keeps of a split: 1 GiB (aclImdb's
 * three splits hold about 130 MB). */
#define TEXT_IMDB_MAX_BYTES ((size_t)1 << 30)
/* text_imdb_load keeping at most max_bytes: a file that would pass them is refused
 * (TENSOR_ERR_IO naming it, the total and the limit) before it is read, from its size in
 * the directory or in the archive's header. */
int text_imdb_load_max(const char *dir, const char *split, size_t max_bytes,
		       struct text_dataset *out);
/* The HTML line breaks of the NUL-terminated s ("<br />", "<br/>", "<br>", any case, any
 * spaces before the slash) each replaced by one space, in place, as text_imdb_load does to
 * every review; returns the new length. The example programs read every text this way:
 * --corpus documents and the reviews of --predict and --predict-file too. */
size_t text_replace_line_breaks(char *s);
/* Plain text. A file: one document per non-blank line (a trailing \r is
 * dropped). A directory: one document per *.txt file in it (not recursive,
 * hidden and blank files skipped, sorted by name bytewise, whole content); a
 * directory without *.txt files is an error. Label -1, rating 0. */
int text_lines_load(const char *path, struct text_dataset *out);
void text_dataset_free(struct text_dataset *ds);
/* A seeded split: val receives round(fraction * n) examples chosen by a
 * permutation of seed, train the rest, both keeping the original order;
 * copies the texts. fraction in [0, 1). */
int text_dataset_split(const struct text_dataset *ds, double fraction, uint64_t seed,
		       struct text_dataset *train, struct text_dataset *val);
/* The same by whole groups (IMDB: movies), so that no group is in both
 * parts: groups are taken in the order of a permutation of seed until val
 * holds at least round(fraction * n) examples. Every example needs a group
 * > 0 (else TENSOR_ERR_ARG naming the first without one). */
int text_dataset_split_groups(const struct text_dataset *ds, double fraction, uint64_t seed,
			      struct text_dataset *train, struct text_dataset *val);
/* out = a's examples then b's (texts copied), b's groups shifted past a's
 * largest so that the two numberings stay apart (aclImdb numbers each split's
 * movies from 1); group 0 (none) stays 0. *out is written only on success;
 * errors: NULL or invalid datasets (TENSOR_ERR_ARG), memory. */
int text_dataset_concat(const struct text_dataset *a, const struct text_dataset *b,
			struct text_dataset *out);
/* Each document of in cut, in order, into consecutive pieces of at most budget
 * tokens of tok (no specials; budget n - 2 fills text_encode's n), so a long
 * document gives several sequences instead of one truncated one. Cuts fall on
 * ASCII whitespace: leading and trailing whitespace is dropped, the whitespace
 * between a piece's words kept (the byte tokenizer's count includes it); a
 * word of more than budget tokens is a piece alone (text_encode truncates
 * it); a document without tokens gives none. Pieces keep their document's
 * label, rating and group. *out is written only on success; errors: NULL
 * arguments, an invalid dataset, budget < 1 (TENSOR_ERR_ARG), memory, the
 * tokenizer's. */
int text_dataset_chunk(const struct text_dataset *in, const struct text_tokenizer *tok,
		       int64_t budget, struct text_dataset *out);

/* ---- the bundled data (data_path.c) ----------------------------------------- */

/* The path of a file or directory that `make install` puts in the data directory
 * ($(datadir)/cformer, `pkg-config --variable=pkgdatadir cformer`): the IMDB review
 * subset "aclImdb_subset", the tutorial's "langid.tsv", char_lm's "coast.txt" and
 * "bert-base-uncased-vocab.txt". Writes into buf (len bytes) the first of these where the
 * file is: $CFORMER_DATA_DIR/name; data/name beside the running program (a program of a
 * build tree, such as examples/nn_tutorial with examples/data); ../share/cformer/name
 * from the program's directory (an installed tree moved elsewhere); else the installed
 * path. Returns buf; whether the file exists is the caller's to find out (its open then
 * names the path). NULL with TENSOR_ERR_ARG if name or buf is NULL or the path does not
 * fit. */
const char *text_data_path(const char *name, char *buf, size_t len);

/* ---- batching (batch.c) ---------------------------------------------------- */

/* A batch of B sequences of length w: ids [B, w] i64, mask [B, w] i64 (1 =
 * real token), labels [B] i64; tensors in the current scope. w is the
 * batcher's seq_len, or with trim the batch's longest example. */
struct text_batch {
	struct tensor *ids, *mask, *labels;
	int64_t size;
};

/* Tokenises every example once (cached; tok is used only during init), then
 * serves batches in an order reshuffled each epoch from (seed, epoch) when
 * shuffle is set; with bucket, batches hold examples of similar length
 * (sorted within windows of 50 batches, then the full batches shuffled). The
 * last batch may be smaller and stays last. Labels are the examples' labels
 * (-1 unlabelled). text_batcher_get's tensors are heap tensors outside any
 * scope. Set trim after init to serve each batch only as wide as its longest
 * example (with bucket this drops most of the padding; a model that masks
 * padding computes the same outputs on the narrower batch). */
struct text_batcher {
	const struct text_tokenizer *tok;
	int64_t n, seq_len, batch_size, epoch;
	uint64_t seed;
	bool shuffle, bucket, trim;
	int32_t *ids, *mask; /* [n, seq_len] cached encodings */
	int32_t *labels, *lengths;
	int64_t *order; /* this epoch's example order */
};
int text_batcher_init(struct text_batcher *b, const struct text_dataset *ds,
		      const struct text_tokenizer *tok, int64_t seq_len, int64_t batch_size,
		      uint64_t seed, bool shuffle, bool bucket);
int64_t text_batcher_num_batches(const struct text_batcher *b);
/* Batch i (0-based) of the current epoch. */
int text_batcher_get(const struct text_batcher *b, int64_t i, struct text_batch *out);
/* Advance to the next epoch (new order). */
void text_batcher_next_epoch(struct text_batcher *b);
void text_batcher_free(struct text_batcher *b);

/* MLM dynamic masking (BERT): each selectable token — a real token other
 * than [PAD], [CLS], [SEP], [MASK] ([UNK] can be selected, as in BERT's
 * create_pretraining_data.py and HF run_mlm.py) — is selected with
 * probability prob; of those 80% become [MASK], 10% a random token (uniform
 * over ids other than the five specials and reserved "[...]" entries such as
 * [unusedN]), 10% unchanged. inputs receives the masked ids, labels the
 * original id at selected positions and -100 elsewhere (both [B, n] i64,
 * current scope). Draws depend only on (seed, position): pass a different
 * seed each step (e.g. seed + step) for dynamic masking. */
int text_mlm_mask(const struct text_tokenizer *tok, const struct text_batch *batch, double prob,
		  uint64_t seed, struct tensor **inputs, struct tensor **labels);

/* What text_mlm_mask_unit selects with probability prob: single tokens (text_mlm_mask);
 * whole words, every piece of a selected word (a word: a token and the WordPiece "##"
 * pieces after it, or a run of non-whitespace bytes of the byte tokenizer); or spans of
 * whole words as SpanBERT, lengths in words geometric (p 0.2) truncated to 10 (mean 3.8),
 * started so that the fraction prob of the words is covered. Spans and words end at a
 * row's end and at any token that cannot be selected. Each selected token then becomes
 * [MASK], random or itself (80/10/10) as in text_mlm_mask. */
enum text_mask_unit { TEXT_MASK_TOKEN, TEXT_MASK_WORD, TEXT_MASK_SPAN };
/* text_mlm_mask by unit; TEXT_MASK_TOKEN is text_mlm_mask, draw for draw. Errors: those of
 * text_mlm_mask, and a unit outside the enum (TENSOR_ERR_ARG). */
int text_mlm_mask_unit(const struct text_tokenizer *tok, const struct text_batch *batch,
		       double prob, enum text_mask_unit unit, uint64_t seed, struct tensor **inputs,
		       struct tensor **labels);

#ifdef __cplusplus
}
#endif

#endif
