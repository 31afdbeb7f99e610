/* Batching: cached encodings, per-epoch shuffling and length bucketing. */
#include "text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "random.h"

#define BUCKET_WINDOW 50 /* batches sorted together when bucketing */

/* splitmix64 finaliser: the key of the random stream for (seed, epoch, use). */
static uint64_t mix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static uint64_t stream_key(uint64_t seed, int64_t epoch, uint64_t use)
{
	return mix64(mix64(mix64(seed) ^ (uint64_t)epoch) ^ use);
}

/* Fisher-Yates shuffle of a[0..n) with draw i = (key, i). */
static void shuffle_i64(int64_t *a, int64_t n, uint64_t key)
{
	for (int64_t i = n - 1; i > 0; i--) {
		int64_t j = (int64_t)(random_uniform(key, (uint64_t)i) * (double)(i + 1));
		int64_t t = a[i];
		a[i] = a[j];
		a[j] = t;
	}
}

struct bucket_item {
	int64_t pos, idx;
	int32_t len;
};

static int bucket_cmp(const void *a, const void *b)
{
	const struct bucket_item *x = a, *y = b;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Bucketed order from the permutation in b->order: sort windows of
 * BUCKET_WINDOW batches by length (ties keep the permutation's order), then
 * shuffle the order of the full batches; a smaller last batch stays last. */
static int bucket_order(struct text_batcher *b)
{
	int64_t n = b->n, bs = b->batch_size, nfull = n / bs, nb = (n + bs - 1) / bs;
	struct bucket_item *it = tensor_host_malloc(sizeof(*it) * (size_t)n);
	int64_t *bperm = tensor_host_malloc(sizeof(*bperm) * (size_t)nb);
	if (!it || !bperm) {
		free(it);
		free(bperm);
		return tensor_error(TENSOR_ERR_NOMEM, "text_batcher: out of memory (%lld examples)",
				    (long long)n);
	}
	for (int64_t k = 0; k < n; k++)
		it[k] = (struct bucket_item){ k, b->order[k], b->lengths[b->order[k]] };
	int64_t w = BUCKET_WINDOW * bs;
	for (int64_t s = 0; s < n; s += w)
		qsort(it + s, (size_t)(n - s < w ? n - s : w), sizeof(*it), bucket_cmp);
	for (int64_t k = 0; k < nb; k++)
		bperm[k] = k;
	if (b->shuffle)
		shuffle_i64(bperm, nfull, stream_key(b->seed, b->epoch, 2));
	int64_t o = 0;
	for (int64_t k = 0; k < nb; k++) {
		int64_t s = bperm[k] * bs, e = s + bs < n ? s + bs : n;
		for (int64_t j = s; j < e; j++)
			b->order[o++] = it[j].idx;
	}
	free(it);
	free(bperm);
	return TENSOR_OK;
}

/* This epoch's example order into b->order. */
static int compute_order(struct text_batcher *b)
{
	for (int64_t i = 0; i < b->n; i++)
		b->order[i] = i;
	if (b->shuffle)
		shuffle_i64(b->order, b->n, stream_key(b->seed, b->epoch, 1));
	return b->bucket ? bucket_order(b) : TENSOR_OK;
}

int text_batcher_init(struct text_batcher *b, const struct text_dataset *ds,
		      const struct text_tokenizer *tok, int64_t seq_len, int64_t batch_size,
		      uint64_t seed, bool shuffle, bool bucket)
{
	if (!b || !ds || !tok)
		return tensor_error(TENSOR_ERR_ARG,
				    "text_batcher_init: NULL argument (b %p, ds %p, tok %p)",
				    (void *)b, (const void *)ds, (const void *)tok);
	if (ds->n <= 0 || !ds->items)
		return tensor_error(TENSOR_ERR_ARG,
				    "text_batcher_init: empty dataset (n %lld), expected at least "
				    "one example",
				    (long long)ds->n);
	if (seq_len < 2)
		return tensor_error(TENSOR_ERR_ARG,
				    "text_batcher_init: seq_len %lld, expected >= 2",
				    (long long)seq_len);
	if (batch_size < 1)
		return tensor_error(TENSOR_ERR_ARG,
				    "text_batcher_init: batch_size %lld, expected >= 1",
				    (long long)batch_size);
	int64_t n = ds->n;
	if (seq_len > INT32_MAX || seq_len > (int64_t)(SIZE_MAX / 2 / sizeof(int32_t)) / n)
		return tensor_error(TENSOR_ERR_NOMEM,
				    "text_batcher_init: %lld examples x seq_len %lld is too large",
				    (long long)n, (long long)seq_len);
	for (int64_t i = 0; i < n; i++)
		if (!ds->items[i].text)
			return tensor_error(TENSOR_ERR_ARG,
					    "text_batcher_init: example %lld has no text",
					    (long long)i);

	bool had_error = tensor_last_status() != TENSOR_OK;
	struct text_batcher nb = { 0 };
	nb.tok = tok;
	nb.n = n;
	nb.seq_len = seq_len;
	nb.batch_size = batch_size;
	nb.seed = seed;
	nb.shuffle = shuffle;
	nb.bucket = bucket;
	size_t cells = (size_t)n * (size_t)seq_len;
	nb.ids = tensor_host_malloc(cells * sizeof(int32_t));
	nb.mask = tensor_host_malloc(cells * sizeof(int32_t));
	nb.labels = tensor_host_malloc((size_t)n * sizeof(int32_t));
	nb.lengths = tensor_host_malloc((size_t)n * sizeof(int32_t));
	nb.order = tensor_host_malloc((size_t)n * sizeof(int64_t));
	if (!nb.ids || !nb.mask || !nb.labels || !nb.lengths || !nb.order) {
		text_batcher_free(&nb);
		return tensor_error(TENSOR_ERR_NOMEM,
				    "text_batcher_init: out of memory (%lld x %lld ids)",
				    (long long)n, (long long)seq_len);
	}

	/* Tokenise in parallel (the tokenizer is read-only); length -1 marks a
	 * failure, and the first failing example is re-encoded on this thread
	 * so that its error is recorded here (errors are per thread). */
#pragma omp parallel for schedule(dynamic, 16) num_threads(tensor_get_num_threads()) if (n > 64)
	for (int64_t i = 0; i < n; i++) {
		const char *t = ds->items[i].text;
		int64_t len = -1;
		size_t off = (size_t)i * (size_t)seq_len;
		if (text_encode(tok, t, strlen(t), seq_len, nb.ids + off, nb.mask + off, &len) !=
		    TENSOR_OK)
			len = -1;
		nb.lengths[i] = (int32_t)len;
		nb.labels[i] = ds->items[i].label;
	}
	int64_t bad = 0;
	while (bad < n && nb.lengths[bad] >= 0)
		bad++;
	if (bad < n) {
		const char *t = ds->items[bad].text;
		size_t off = (size_t)bad * (size_t)seq_len;
		int64_t len;
		int st = text_encode(tok, t, strlen(t), seq_len, nb.ids + off, nb.mask + off, &len);
		if (st == TENSOR_OK) { /* failed on another thread only */
			st = tensor_error(TENSOR_ERR_STATE,
					  "text_batcher_init: example %lld failed to encode on a "
					  "worker thread",
					  (long long)bad);
		} else if (!had_error) { /* prefix the tokenizer's message */
			char msg[512];
			snprintf(msg, sizeof(msg), "%s", tensor_last_error());
			tensor_clear_error();
			tensor_error(st, "text_batcher_init: example %lld: %s", (long long)bad,
				     msg);
		}
		text_batcher_free(&nb);
		return st;
	}
	int st = compute_order(&nb);
	if (st != TENSOR_OK) {
		text_batcher_free(&nb);
		return st;
	}
	*b = nb;
	return TENSOR_OK;
}

int64_t text_batcher_num_batches(const struct text_batcher *b)
{
	if (!b || b->batch_size < 1)
		return 0;
	return (b->n + b->batch_size - 1) / b->batch_size;
}

int text_batcher_get(const struct text_batcher *b, int64_t i, struct text_batch *out)
{
	if (!b || !out)
		return tensor_error(TENSOR_ERR_ARG,
				    "text_batcher_get: NULL argument (b %p, out %p)",
				    (const void *)b, (void *)out);
	if (!b->order || !b->ids)
		return tensor_error(TENSOR_ERR_STATE,
				    "text_batcher_get: batcher not initialised (or freed)");
	int64_t nb = text_batcher_num_batches(b);
	if (i < 0 || i >= nb)
		return tensor_error(TENSOR_ERR_ARG,
				    "text_batcher_get: batch %lld out of range, expected 0..%lld",
				    (long long)i, (long long)nb - 1);
	int64_t s = i * b->batch_size, e = s + b->batch_size < b->n ? s + b->batch_size : b->n;
	int64_t bs = e - s, stride = b->seq_len, L = b->trim ? 1 : stride;
	for (int64_t r = 0; b->trim && r < bs; r++)
		L = b->lengths[b->order[s + r]] > L ? b->lengths[b->order[s + r]] : L;
	int64_t shape[2] = { bs, L };
	struct tensor *ids = tensor_empty(TENSOR_I64, TENSOR_CPU, 2, shape);
	struct tensor *mask = tensor_empty(TENSOR_I64, TENSOR_CPU, 2, shape);
	struct tensor *labels = tensor_empty(TENSOR_I64, TENSOR_CPU, 1, shape);
	if (!ids || !mask || !labels) {
		tensor_free(ids);
		tensor_free(mask);
		tensor_free(labels);
		return tensor_last_status() ? tensor_last_status() : TENSOR_ERR_NOMEM;
	}
	int64_t *pi = tensor_data(ids), *pm = tensor_data(mask), *pl = tensor_data(labels);
	for (int64_t r = 0; r < bs; r++) {
		int64_t ex = b->order[s + r];
		const int32_t *si = b->ids + (size_t)ex * (size_t)stride;
		const int32_t *sm = b->mask + (size_t)ex * (size_t)stride;
		for (int64_t c = 0; c < L; c++) {
			pi[r * L + c] = si[c];
			pm[r * L + c] = sm[c];
		}
		pl[r] = b->labels[ex];
	}
	out->ids = ids;
	out->mask = mask;
	out->labels = labels;
	out->size = bs;
	return TENSOR_OK;
}

void text_batcher_next_epoch(struct text_batcher *b)
{
	if (!b || !b->order)
		return;
	b->epoch++;
	if (compute_order(b) != TENSOR_OK) {
		/* out of memory while bucketing: the error is recorded; serve the
		 * plain (shuffled) order, which is still a permutation */
		for (int64_t i = 0; i < b->n; i++)
			b->order[i] = i;
		if (b->shuffle)
			shuffle_i64(b->order, b->n, stream_key(b->seed, b->epoch, 1));
	}
}

void text_batcher_free(struct text_batcher *b)
{
	if (!b)
		return;
	free(b->ids);
	free(b->mask);
	free(b->labels);
	free(b->lengths);
	free(b->order);
	memset(b, 0, sizeof(*b));
}
