/* Byte-level tokenizer (the Long Range Arena text setting): five special
 * tokens, then one id per byte. text_tokenize and friends dispatch here
 * from wordpiece.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "text_internal.h"

#define BYTE_SPECIALS 5

int text_byte_init(struct text_tokenizer *tok)
{
	if (!tok)
		return tensor_error(TENSOR_ERR_ARG, "text_byte_init: tok is NULL");
	*tok = (struct text_tokenizer){ .kind = TEXT_BYTE,
					.vocab_size = BYTE_SPECIALS + 256,
					.pad_id = 0,
					.unk_id = 1,
					.cls_id = 2,
					.sep_id = 3,
					.mask_id = 4 };
	return TENSOR_OK;
}

int text_byte_tokenize(const char *text, size_t len, struct text_ids *out)
{
	size_t room = out->max - out->len;
	if (len > room)
		len = room;
	if (out->grow && out->cap - out->len < len) {
		size_t cap = out->len + len;
		int32_t *a = cap < SIZE_MAX / sizeof *a
				 ? tensor_host_realloc(out->a, cap * sizeof *a)
				 : NULL;
		if (!a)
			return tensor_error(TENSOR_ERR_NOMEM,
					    "text_tokenize: out of memory for %zu token ids", cap);
		out->a = a;
		out->cap = cap;
	}
	if (out->cap - out->len < len)
		len = out->cap - out->len;
	const unsigned char *s = (const unsigned char *)text;
	int32_t *dst = out->a + out->len;
	for (size_t i = 0; i < len; i++)
		dst[i] = BYTE_SPECIALS + s[i];
	out->len += len;
	return TENSOR_OK;
}

const char *text_byte_token_string(int32_t id, char *buf, size_t len)
{
	static const char *const special[BYTE_SPECIALS] = { "[PAD]", "[UNK]", "[CLS]", "[SEP]",
							    "[MASK]" };
	if (id < BYTE_SPECIALS)
		return special[id];
	if (!buf || len < 7) {
		tensor_error(
		    TENSOR_ERR_ARG,
		    "text_token_string: byte token %d needs a buffer of >= 7 bytes, got %zu",
		    (int)id, buf ? len : 0);
		return NULL;
	}
	snprintf(buf, len, "<0x%02X>", (unsigned)(id - BYTE_SPECIALS));
	return buf;
}
