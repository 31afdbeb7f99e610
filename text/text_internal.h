/* Internals shared by the text files: the whole-file reader, the growable id
 * output and the byte tokenizer's entry points (dispatched from wordpiece.c). */
#ifndef CFORMER_TEXT_INTERNAL_H
#define CFORMER_TEXT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text.h"

/* ASCII whitespace (space, \t \n \v \f \r): where text_dataset_chunk cuts, where a
 * byte-level word ends for whole-word masking, what a blank line holds. */
static inline bool text_ascii_space(int c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

/* The whole file at path in a new NUL-terminated buffer (*size bytes before
 * the NUL; NULs inside are left for the caller to judge). Errors, named after
 * op and the path: TENSOR_ERR_IO (cannot open or read), TENSOR_ERR_NOMEM;
 * *data and *size are then untouched. */
int text_read_file(const char *op, const char *path, char **data, size_t *size);

/* Reading an archive (archive_source.c): the bytes libarchive reads from the file. */
struct archive;
struct text_archive_source;
/* Open the file at path in a (a libarchive reader, its formats and filters chosen): a gzip
 * file is inflated here with zlib, which checks each member's CRC-32 and length as it
 * ends; any other file goes to libarchive as it is. *src receives the source, to free
 * after archive_read_free(a). Errors, named after op and path: TENSOR_ERR_IO (cannot open,
 * not an archive), TENSOR_ERR_NOMEM; nothing to free then. */
int text_archive_open(struct archive *a, const char *op, const char *path,
		      struct text_archive_source **src);
/* After the last header (ARCHIVE_EOF): read the rest of the file, so that a gzip stream's
 * last checks run (then see text_archive_check). */
void text_archive_finish(struct text_archive_source *src);
/* TENSOR_OK, or the source's first failure as an error naming op and the file: truncated
 * or damaged gzip (TENSOR_ERR_IO), no memory (TENSOR_ERR_NOMEM). */
int text_archive_check(const struct text_archive_source *src, const char *op);
/* archive_error_string(a), or a reason where libarchive gives none (never NULL). */
const char *text_archive_error(struct archive *a);
void text_archive_source_free(struct text_archive_source *src);

/* Token ids being written: a caller's growable array (grow) or a fixed
 * window of cap ids; tokenizing stops once len reaches max. */
struct text_ids {
	int32_t *a;
	size_t len, cap, max;
	bool grow;
};

/* Append one id: 0, 1 when max is reached (stop), or TENSOR_ERR_NOMEM. */
int text_ids_push(struct text_ids *o, int32_t id);

/* Bytes b -> 5 + b (no specials); same return convention as text_ids_push. */
int text_byte_tokenize(const char *text, size_t len, struct text_ids *out);
/* "[PAD]".."[MASK]" for 0-4, "<0xHH>" in buf (len >= 7) for bytes. */
const char *text_byte_token_string(int32_t id, char *buf, size_t len);

#endif
