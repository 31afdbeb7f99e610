/* Documents cut into consecutive pieces of at most a token budget, for
 * language-model pretraining: a long document gives several training
 * sequences instead of one truncated one. Cuts fall on ASCII whitespace,
 * which never joins two tokens in either tokenizer, so counting the tokens of
 * each word apart gives the piece's exact count. */
#include "text.h"

#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "text_internal.h"

static const char OP[] = "text_dataset_chunk";

/* Append the bytes [s, e) to out as an example of doc's label, rating and group. */
static int push(struct text_dataset *out, int64_t *cap, const struct text_example *doc,
		const char *s, const char *e)
{
	if (out->n == *cap) {
		int64_t more = *cap ? 2 * *cap : 1024;
		struct text_example *items =
		    tensor_host_realloc(out->items, sizeof *items * (size_t)more);
		if (!items)
			return tensor_error(TENSOR_ERR_NOMEM, "%s: out of memory", OP);
		out->items = items;
		*cap = more;
	}
	size_t len = (size_t)(e - s);
	char *text = tensor_host_malloc(len + 1);
	if (!text)
		return tensor_error(TENSOR_ERR_NOMEM, "%s: out of memory", OP);
	memcpy(text, s, len);
	text[len] = 0;
	out->items[out->n++] = (struct text_example){
		.text = text, .label = doc->label, .rating = doc->rating, .group = doc->group
	};
	return TENSOR_OK;
}

/* The pieces of one document, appended to out; *ids is the tokenizer's scratch. */
static int chunk_doc(struct text_dataset *out, int64_t *cap, const struct text_example *doc,
		     const struct text_tokenizer *tok, int64_t budget, int32_t **ids)
{
	const char *start = NULL, *end = NULL; /* the piece so far */
	int64_t used = 0;		       /* its tokens */
	for (const char *p = doc->text ? doc->text : ""; *p;) {
		while (*p && text_ascii_space(*p))
			p++;
		const char *w = p;
		while (*p && !text_ascii_space(*p))
			p++;
		size_t n = 0;
		if (p == w)
			break;
		if (text_tokenize(tok, w, (size_t)(p - w), ids, &n) < 0)
			return tensor_last_status();
		if (!n) /* a word of no tokens (control characters) */
			continue;
		/* bytes also spend a token on each whitespace byte kept inside a piece */
		int64_t gap = tok->kind == TEXT_BYTE && start ? (int64_t)(w - end) : 0;
		int64_t cost = (int64_t)n + gap;
		if (start && used + cost > budget) {
			int rc = push(out, cap, doc, start, end);
			if (rc < 0)
				return rc;
			start = NULL, used = 0, cost = (int64_t)n;
		}
		start = start ? start : w;
		end = p, used += cost;
	}
	return start ? push(out, cap, doc, start, end) : TENSOR_OK;
}

int text_dataset_chunk(const struct text_dataset *in, const struct text_tokenizer *tok,
		       int64_t budget, struct text_dataset *out)
{
	if (!in || !tok || !out)
		return tensor_error(TENSOR_ERR_ARG, "%s: NULL argument", OP);
	if (in->n < 0 || (in->n > 0 && !in->items))
		return tensor_error(TENSOR_ERR_ARG, "%s: invalid dataset (n %lld)", OP,
				    (long long)in->n);
	if (budget < 1)
		return tensor_error(TENSOR_ERR_ARG, "%s: budget %lld tokens, expected >= 1", OP,
				    (long long)budget);
	struct text_dataset res = { NULL, 0 };
	int64_t cap = 0;
	int32_t *ids = NULL;
	int rc = TENSOR_OK;
	for (int64_t d = 0; d < in->n && rc == TENSOR_OK; d++)
		rc = chunk_doc(&res, &cap, &in->items[d], tok, budget, &ids);
	free(ids);
	if (rc < 0) {
		text_dataset_free(&res);
		return rc;
	}
	*out = res;
	return TENSOR_OK;
}
