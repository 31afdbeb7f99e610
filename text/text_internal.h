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
