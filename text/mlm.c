/* BERT-style dynamic masking for masked-language-model batches.
 *
 * Selectable: real tokens (mask != 0) other than [PAD], [CLS], [SEP] and
 * [MASK]; [UNK] stands for real text and can be selected, as in BERT's
 * create_pretraining_data.py and Hugging Face's run_mlm.py (whose special
 * tokens mask marks only the added [CLS]/[SEP], padding excluded apart).
 * Random replacements are drawn uniformly from the ordinary vocabulary: every
 * id except the five specials and reserved "[...]" entries ([unusedN]), i.e.
 * ids 999..30521 of bert-base-uncased and 5..260 (the bytes) of the byte
 * tokenizer. Every draw at flat position p of the [B, n] batch is a pure
 * function of (seed, p) (Philox), so results do not depend on threads. */
#include "text.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "random.h"
#include "text_internal.h"

static uint64_t mix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* How an id joins the token before it into one word (whole-word and span masking). */
enum { JOIN_NEVER, JOIN_ALWAYS, JOIN_LIKE }; /* starts a word, "##" piece, non-space byte */

static bool is_special_id(const struct text_tokenizer *tok, int64_t id)
{
	return id == tok->pad_id || id == tok->unk_id || id == tok->cls_id || id == tok->sep_id ||
	       id == tok->mask_id;
}

/* The ids random replacements are drawn from (see the top of the file). */
static int32_t *replacement_ids(const struct text_tokenizer *tok, int32_t *count)
{
	int32_t *c = tensor_host_malloc(sizeof(*c) * (size_t)tok->vocab_size), n = 0;
	if (!c)
		return NULL;
	char buf[64];
	for (int32_t id = 0; id < tok->vocab_size; id++) {
		if (is_special_id(tok, id))
			continue;
		const char *s = text_token_string(tok, id, buf, sizeof(buf));
		size_t len = s ? strlen(s) : 0;
		if (!s || (len >= 3 && s[0] == '[' && s[len - 1] == ']'))
			continue;
		c[n++] = id;
	}
	*count = n;
	return c;
}

/* Each id's JOIN_* class: WordPiece's "##" pieces continue the word before them; a byte
 * other than ASCII whitespace continues a run of such bytes (a word of the byte tokenizer). */
static uint8_t *join_classes(const struct text_tokenizer *tok)
{
	uint8_t *c = tensor_host_malloc((size_t)tok->vocab_size);
	if (!c)
		return NULL;
	char buf[64];
	for (int32_t id = 0; id < tok->vocab_size; id++) {
		c[id] = JOIN_NEVER;
		if (tok->kind == TEXT_BYTE) {
			int b = id - 5;
			if (b >= 0 && b < 256 && !text_ascii_space(b))
				c[id] = JOIN_LIKE;
		} else if (!is_special_id(tok, id)) {
			const char *s = text_token_string(tok, id, buf, sizeof(buf));
			c[id] = s && s[0] == '#' && s[1] == '#' && s[2] ? JOIN_ALWAYS : JOIN_NEVER;
		}
	}
	return c;
}

/* SpanBERT's span lengths, in words: geometric (p 0.2) truncated to at most 10 and
 * renormalised (mean 3.8). */
enum { SPAN_MAX = 10 };
static const double SPAN_P = 0.2;

static double span_mean(void)
{
	double sum = 0, mass = 0, w = SPAN_P;
	for (int l = 1; l <= SPAN_MAX; l++, w *= 1 - SPAN_P) {
		sum += l * w;
		mass += w;
	}
	return sum / mass;
}

/* A span length from a uniform u in [0, 1): the truncated distribution's inverse. */
static int span_length(double u)
{
	double tail = pow(1 - SPAN_P, SPAN_MAX); /* mass past SPAN_MAX, cut off */
	int l = 1 + (int)floor(log(1 - u * (1 - tail)) / log(1 - SPAN_P));
	return l < 1 ? 1 : l > SPAN_MAX ? SPAN_MAX : l;
}

static int check_ids_tensor(const char *what, const struct tensor *t)
{
	char sh[128];
	if (!t)
		return tensor_error(TENSOR_ERR_ARG, "text_mlm_mask: batch %s is NULL", what);
	if (t->dtype != TENSOR_I64)
		return tensor_error(TENSOR_ERR_DTYPE, "text_mlm_mask: batch %s is %s, expected i64",
				    what, tensor_dtype_name(t->dtype));
	if (t->storage->device != TENSOR_CPU)
		return tensor_error(TENSOR_ERR_DEVICE,
				    "text_mlm_mask: batch %s is on %s, expected cpu", what,
				    tensor_device_name(t->storage->device));
	if (t->ndim != 2)
		return tensor_error(TENSOR_ERR_SHAPE,
				    "text_mlm_mask: batch %s has shape %s, expected [B, n]", what,
				    tensor_shape_str(t, sh, sizeof(sh)));
	return TENSOR_OK;
}

int text_mlm_mask(const struct text_tokenizer *tok, const struct text_batch *batch, double prob,
		  uint64_t seed, struct tensor **inputs, struct tensor **labels)
{
	return text_mlm_mask_unit(tok, batch, prob, TEXT_MASK_TOKEN, seed, inputs, labels);
}

int text_mlm_mask_unit(const struct text_tokenizer *tok, const struct text_batch *batch,
		       double prob, enum text_mask_unit unit, uint64_t seed, struct tensor **inputs,
		       struct tensor **labels)
{
	if (!tok || !batch || !inputs || !labels)
		return tensor_error(TENSOR_ERR_ARG, "text_mlm_mask: NULL argument");
	if (!(prob >= 0.0 && prob <= 1.0))
		return tensor_error(TENSOR_ERR_ARG, "text_mlm_mask: prob %g, expected [0, 1]",
				    prob);
	if (unit != TEXT_MASK_TOKEN && unit != TEXT_MASK_WORD && unit != TEXT_MASK_SPAN)
		return tensor_error(
		    TENSOR_ERR_ARG,
		    "text_mlm_mask: unit %d, expected TEXT_MASK_TOKEN, _WORD or _SPAN", (int)unit);
	if (tok->vocab_size <= 0)
		return tensor_error(TENSOR_ERR_ARG, "text_mlm_mask: tokenizer vocab_size %d",
				    (int)tok->vocab_size);
	int st = check_ids_tensor("ids", batch->ids);
	if (st == TENSOR_OK)
		st = check_ids_tensor("mask", batch->mask);
	if (st != TENSOR_OK)
		return st;
	if (!tensor_same_shape(batch->ids, batch->mask)) {
		char a[128], b[128];
		return tensor_error(
		    TENSOR_ERR_SHAPE,
		    "text_mlm_mask: ids %s and mask %s differ, expected equal shapes",
		    tensor_shape_str(batch->ids, a, sizeof(a)),
		    tensor_shape_str(batch->mask, b, sizeof(b)));
	}
	int64_t B = batch->ids->shape[0], n = batch->ids->shape[1], total = B * n;
	struct tensor *ids = tensor_contiguous(batch->ids);
	struct tensor *mask = tensor_contiguous(batch->mask);
	struct tensor *in = tensor_empty(TENSOR_I64, TENSOR_CPU, 2, batch->ids->shape);
	struct tensor *lab = tensor_empty(TENSOR_I64, TENSOR_CPU, 2, batch->ids->shape);
	int32_t ncand = 0, *cand = replacement_ids(tok, &ncand);
	const bool words = unit != TEXT_MASK_TOKEN;
	uint8_t *join = words ? join_classes(tok) : NULL;
	if (!ids || !mask || !in || !lab || !cand || (words && !join)) {
		st = !cand || (words && !join)
			 ? tensor_error(TENSOR_ERR_NOMEM, "text_mlm_mask: out of memory")
			 : tensor_last_status();
		goto fail;
	}
	if (ncand == 0) {
		st = tensor_error(TENSOR_ERR_ARG,
				  "text_mlm_mask: the tokenizer has no ordinary ids to draw random "
				  "replacements from (vocab_size %d)",
				  (int)tok->vocab_size);
		goto fail;
	}
	const int64_t *pi = tensor_data(ids), *pm = tensor_data(mask);
	int64_t *po = tensor_data(in), *pl = tensor_data(lab);
	for (int64_t p = 0; p < total; p++)
		if (pm[p] != 0 && (pi[p] < 0 || pi[p] >= tok->vocab_size)) {
			st = tensor_error(TENSOR_ERR_ARG,
					  "text_mlm_mask: ids[%lld, %lld] = %lld outside the "
					  "vocabulary [0, %d)",
					  (long long)(p / n), (long long)(p % n), (long long)pi[p],
					  (int)tok->vocab_size);
			goto fail;
		}

	const uint64_t key = mix64(seed ^ 0x4D4C4D5F4D41534Bull); /* "MLM_MASK" */
	const uint64_t span_key = mix64(key ^ 0x5350414Eull);	  /* "SPAN" */
	const uint32_t t_mask = 3435973837u;			  /* 0.8 * 2^32 */
	const uint32_t t_random = 3865470566u;			  /* 0.9 * 2^32 */
	/* A span starts at an uncovered word with probability q, so that spans of mean length
	 * E cover the fraction prob of the words: prob = qE / (1 + q(E - 1)). */
	const double mean = span_mean(), q = prob / (mean - prob * (mean - 1));
	bool chosen = false, prev_text = false; /* the current word's choice; p-1 is text */
	int left = 0;				/* words of the current span still to cover */
	for (int64_t p = 0; p < total; p++) {
		int64_t id = pi[p];
		po[p] = id;
		pl[p] = -100;
		if (p % n == 0)
			prev_text = false, left = 0;
		if (pm[p] == 0 || id == tok->pad_id || id == tok->cls_id || id == tok->sep_id ||
		    id == tok->mask_id) {
			prev_text = false, left = 0;
			continue;
		}
		struct philox4 r = philox4x32(key, (uint64_t)p);
		bool joins = words && prev_text &&
			     (join[id] == JOIN_ALWAYS ||
			      (join[id] == JOIN_LIKE && join[pi[p - 1]] == JOIN_LIKE));
		prev_text = true;
		if (!joins && unit != TEXT_MASK_SPAN) {
			chosen = philox_unit(r.v[0], r.v[1]) < prob;
		} else if (!joins && left > 0) { /* the next word of a span */
			left--;
			chosen = true;
		} else if (!joins) {
			chosen = philox_unit(r.v[0], r.v[1]) < q;
			if (chosen) {
				struct philox4 s = philox4x32(span_key, (uint64_t)p);
				left = span_length(philox_unit(s.v[0], s.v[1])) - 1;
			}
		}
		if (!chosen)
			continue;
		pl[p] = id;
		if (r.v[2] < t_mask)
			po[p] = tok->mask_id;
		else if (r.v[2] < t_random)
			po[p] = cand[((uint64_t)r.v[3] * (uint64_t)ncand) >> 32];
	}
	free(cand);
	free(join);
	tensor_free(ids);
	tensor_free(mask);
	*inputs = in;
	*labels = lab;
	return TENSOR_OK;
fail:
	free(cand);
	free(join);
	tensor_free(ids);
	tensor_free(mask);
	tensor_free(in);
	tensor_free(lab);
	return st ? st : TENSOR_ERR_NOMEM;
}
