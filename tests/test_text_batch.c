/* Tests of text/ batching: the batcher (values, shuffling, bucketing, the
 * cache, trimming) and MLM masking. Fixtures: tests/data/imdb_tiny,
 * mlm_vocab_tiny.txt. */
#include "testutil.h"
#include "text.h"
#include "text_data_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------- */

static struct text_tokenizer byte_tok(void)
{
	struct text_tokenizer tok;
	ck_assert_int_eq(text_byte_init(&tok), TENSOR_OK);
	return tok;
}

/* The byte tokenizer's encoding computed here: [CLS]=2, byte b -> 5 + b,
 * [SEP]=3, [PAD]=0. Returns the real length. */
static int64_t byte_encode_ref(const char *s, int64_t L, int64_t *ids, int64_t *mask)
{
	int64_t k = 0, n = (int64_t)strlen(s);
	ids[k++] = 2;
	for (int64_t i = 0; i < n && k < L - 1; i++)
		ids[k++] = 5 + (unsigned char)s[i];
	ids[k++] = 3;
	for (int64_t i = 0; i < L; i++) {
		mask[i] = i < k;
		if (i >= k)
			ids[i] = 0;
	}
	return k;
}

static const int64_t *i64(const struct tensor *t)
{
	ck_assert(t != NULL);
	ck_assert_int_eq(t->dtype, TENSOR_I64);
	ck_assert(tensor_is_contiguous(t));
	return tensor_data(t);
}

/* ---- batcher ---------------------------------------------------------------- */

START_TEST(test_batcher_values)
{
	struct text_tokenizer tok = byte_tok();
	struct text_dataset ds;
	ck_assert_int_eq(text_imdb_load(data_path("imdb_tiny"), "train", &ds), TENSOR_OK);
	const int64_t L = 20;
	struct text_batcher b;
	ck_assert_int_eq(text_batcher_init(&b, &ds, &tok, L, 3, 1, false, false), TENSOR_OK);
	ck_assert_int_eq(text_batcher_num_batches(&b), 3);
	int64_t k = 0, ids[20], mask[20];
	for (int64_t i = 0; i < 3; i++) {
		struct text_batch bt;
		ck_assert_int_eq(text_batcher_get(&b, i, &bt), TENSOR_OK);
		int64_t bs = i < 2 ? 3 : 1, shape[2] = { bs, L };
		ck_assert_int_eq(bt.size, bs);
		tu_assert_shape(bt.ids, 2, shape);
		tu_assert_shape(bt.mask, 2, shape);
		tu_assert_shape(bt.labels, 1, shape);
		const int64_t *pi = i64(bt.ids), *pm = i64(bt.mask), *pl = i64(bt.labels);
		for (int64_t r = 0; r < bs; r++, k++) {
			int64_t len = byte_encode_ref(ds.items[k].text, L, ids, mask);
			ck_assert_int_eq(b.lengths[k], len);
			ck_assert_int_eq(pl[r], ds.items[k].label);
			for (int64_t c = 0; c < L; c++) {
				ck_assert_int_eq(pi[r * L + c], ids[c]);
				ck_assert_int_eq(pm[r * L + c], mask[c]);
			}
		}
	}
	/* "Dull plot.  Bad acting." (23 bytes) is truncated to 18 + [CLS] [SEP] */
	ck_assert_int_eq(b.lengths[0], 20);
	ck_assert_int_eq(b.lengths[2], 18); /* "Worst film ever!" + 2: padded */
	/* without shuffle the order is the same every epoch */
	text_batcher_next_epoch(&b);
	ck_assert_int_eq(b.epoch, 1);
	for (int64_t i = 0; i < b.n; i++)
		ck_assert_int_eq(b.order[i], i);
	text_batcher_free(&b);
	text_dataset_free(&ds);
	text_tokenizer_free(&tok);
}
END_TEST

/* n examples "doc" of varying lengths (1..200 bytes); label = index. */
static struct text_dataset varied(int64_t n)
{
	struct text_dataset ds = { calloc((size_t)n, sizeof(struct text_example)), n };
	ck_assert(ds.items);
	for (int64_t i = 0; i < n; i++) {
		int64_t len = 1 + (i * 7919 + 13) % 200;
		char *t = malloc((size_t)len + 1);
		ck_assert(t);
		for (int64_t j = 0; j < len; j++)
			t[j] = (char)('a' + (i + j) % 26);
		t[len] = '\0';
		ds.items[i] = (struct text_example){ .text = t, .label = (int32_t)i };
	}
	return ds;
}

/* The example indices (labels) of every batch of this epoch, checking
 * that each batch's rows are the cached encodings of those examples. */
static void epoch_order(const struct text_batcher *b, const struct text_dataset *ds, int64_t *order)
{
	int64_t k = 0, L = b->seq_len, *ids = malloc(sizeof(int64_t) * (size_t)L),
		*mask = malloc(sizeof(int64_t) * (size_t)L);
	int64_t nb = text_batcher_num_batches(b);
	for (int64_t i = 0; i < nb; i++) {
		struct text_batch bt;
		ck_assert_int_eq(text_batcher_get(b, i, &bt), TENSOR_OK);
		ck_assert_int_eq(bt.size, i < nb - 1 ? b->batch_size : b->n - i * b->batch_size);
		const int64_t *pi = i64(bt.ids), *pm = i64(bt.mask), *pl = i64(bt.labels);
		for (int64_t r = 0; r < bt.size; r++) {
			order[k++] = pl[r];
			if (ds) {
				byte_encode_ref(ds->items[pl[r]].text, L, ids, mask);
				ck_assert(memcmp(pi + r * L, ids, sizeof(int64_t) * (size_t)L) ==
					  0);
				ck_assert(memcmp(pm + r * L, mask, sizeof(int64_t) * (size_t)L) ==
					  0);
			}
		}
	}
	ck_assert_int_eq(k, b->n);
	free(ids);
	free(mask);
}

static void assert_permutation(const int64_t *o, int64_t n)
{
	char *seen = calloc((size_t)n, 1);
	for (int64_t i = 0; i < n; i++) {
		ck_assert(o[i] >= 0 && o[i] < n);
		ck_assert_msg(!seen[o[i]], "example %lld twice", (long long)o[i]);
		seen[o[i]] = 1;
	}
	free(seen);
}

START_TEST(test_batcher_shuffle)
{
	struct text_tokenizer tok = byte_tok();
	const int64_t n = 1003;
	struct text_dataset ds = varied(n);
	struct text_batcher b, b2, b3;
	ck_assert_int_eq(text_batcher_init(&b, &ds, &tok, 64, 10, 7, true, false), TENSOR_OK);
	ck_assert_int_eq(text_batcher_init(&b2, &ds, &tok, 64, 10, 7, true, false), TENSOR_OK);
	ck_assert_int_eq(text_batcher_init(&b3, &ds, &tok, 64, 10, 8, true, false), TENSOR_OK);
	ck_assert_int_eq(text_batcher_num_batches(&b), 101);
	int64_t *o[3], *o2 = malloc(sizeof(int64_t) * n), *o3 = malloc(sizeof(int64_t) * n);
	for (int e = 0; e < 3; e++) {
		o[e] = malloc(sizeof(int64_t) * n);
		epoch_order(&b, e == 0 ? &ds : NULL, o[e]);
		assert_permutation(o[e], n);
		epoch_order(&b2, NULL, o2);
		ck_assert(memcmp(o[e], o2, sizeof(int64_t) * n) == 0); /* same seed */
		epoch_order(&b3, NULL, o3);
		ck_assert(memcmp(o[e], o3, sizeof(int64_t) * n) != 0); /* other seed */
		text_batcher_next_epoch(&b);
		text_batcher_next_epoch(&b2);
		text_batcher_next_epoch(&b3);
	}
	ck_assert(memcmp(o[0], o[1], sizeof(int64_t) * n) != 0);
	ck_assert(memcmp(o[1], o[2], sizeof(int64_t) * n) != 0);
	/* a real shuffle: few fixed points */
	int fixed = 0;
	for (int64_t i = 0; i < n; i++)
		fixed += o[0][i] == i;
	ck_assert_int_lt(fixed, 10);
	for (int e = 0; e < 3; e++)
		free(o[e]);
	free(o2);
	free(o3);
	text_batcher_free(&b);
	text_batcher_free(&b2);
	text_batcher_free(&b3);
	text_dataset_free(&ds);
}
END_TEST

/* Mean over full batches of (max - min) example length. */
static double mean_range(const struct text_batcher *b, const int64_t *o)
{
	double sum = 0;
	int64_t nfull = b->n / b->batch_size;
	for (int64_t i = 0; i < nfull; i++) {
		int32_t lo = INT32_MAX, hi = 0;
		for (int64_t r = 0; r < b->batch_size; r++) {
			int32_t l = b->lengths[o[i * b->batch_size + r]];
			lo = l < lo ? l : lo;
			hi = l > hi ? l : hi;
		}
		sum += hi - lo;
	}
	return sum / (double)nfull;
}

START_TEST(test_batcher_bucket)
{
	struct text_tokenizer tok = byte_tok();
	const int64_t n = 1003, bs = 8;
	struct text_dataset ds = varied(n);
	struct text_batcher b, plain, fixed;
	ck_assert_int_eq(text_batcher_init(&b, &ds, &tok, 256, bs, 3, true, true), TENSOR_OK);
	ck_assert_int_eq(text_batcher_init(&plain, &ds, &tok, 256, bs, 3, true, false), TENSOR_OK);
	ck_assert_int_eq(text_batcher_init(&fixed, &ds, &tok, 256, bs, 3, false, true), TENSOR_OK);
	int64_t *o = malloc(sizeof(int64_t) * n), *prev = malloc(sizeof(int64_t) * n);
	for (int e = 0; e < 3; e++) {
		epoch_order(&b, e == 0 ? &ds : NULL, o);
		assert_permutation(o, n);
		double r = mean_range(&b, o);
		ck_assert_msg(r < 10, "epoch %d: bucketed batches span %g bytes", e, r);
		/* batch order is shuffled: not sorted by length */
		int64_t descents = 0;
		for (int64_t i = 1; i < n / bs; i++)
			descents += b.lengths[o[i * bs]] < b.lengths[o[(i - 1) * bs]];
		ck_assert_int_gt(descents, 20);
		if (e > 0)
			ck_assert(memcmp(o, prev, sizeof(int64_t) * n) != 0);
		memcpy(prev, o, sizeof(int64_t) * n);
		text_batcher_next_epoch(&b);
	}
	epoch_order(&plain, NULL, o);
	double r = mean_range(&plain, o);
	ck_assert_msg(r > 100, "unbucketed batches span only %g bytes", r);
	/* bucketing without shuffling: sorted windows of 50 batches, fixed */
	epoch_order(&fixed, NULL, prev);
	assert_permutation(prev, n);
	for (int64_t i = 1; i < n; i++)
		if (i % (50 * bs) != 0)
			ck_assert(fixed.lengths[prev[i]] >= fixed.lengths[prev[i - 1]]);
	text_batcher_next_epoch(&fixed);
	epoch_order(&fixed, NULL, o);
	ck_assert(memcmp(o, prev, sizeof(int64_t) * n) == 0);
	free(o);
	free(prev);
	text_batcher_free(&b);
	text_batcher_free(&plain);
	text_batcher_free(&fixed);
	text_dataset_free(&ds);
}
END_TEST

/* Encodings are cached at init: the batcher serves every epoch with the
 * dataset freed and no tokenizer. */
START_TEST(test_batcher_cached)
{
	struct text_tokenizer tok = byte_tok();
	const int64_t n = 300;
	struct text_dataset ds = varied(n);
	struct text_batcher ref, b;
	ck_assert_int_eq(text_batcher_init(&ref, &ds, &tok, 32, 16, 11, true, true), TENSOR_OK);
	ck_assert_int_eq(text_batcher_init(&b, &ds, &tok, 32, 16, 11, true, true), TENSOR_OK);
	text_dataset_free(&ds);
	b.tok = NULL;
	for (int e = 0; e < 3; e++) {
		for (int64_t i = 0; i < text_batcher_num_batches(&b); i++) {
			struct text_batch x, y;
			ck_assert_int_eq(text_batcher_get(&ref, i, &x), TENSOR_OK);
			ck_assert_int_eq(text_batcher_get(&b, i, &y), TENSOR_OK);
			ck_assert_int_eq(x.size, y.size);
			size_t cells = (size_t)(x.size * 32) * sizeof(int64_t);
			ck_assert(memcmp(i64(x.ids), i64(y.ids), cells) == 0);
			ck_assert(memcmp(i64(x.mask), i64(y.mask), cells) == 0);
			ck_assert(memcmp(i64(x.labels), i64(y.labels),
					 (size_t)x.size * sizeof(int64_t)) == 0);
		}
		text_batcher_next_epoch(&ref);
		text_batcher_next_epoch(&b);
	}
	text_batcher_free(&ref);
	text_batcher_free(&b);
}
END_TEST

/* trim: each batch is as wide as its longest example and equals the first
 * columns of the untrimmed batch; the columns dropped are padding only. */
START_TEST(test_batcher_trim)
{
	struct text_tokenizer tok = byte_tok();
	const int64_t n = 203, L = 96;
	struct text_dataset ds = varied(n);
	struct text_batcher ref, b;
	ck_assert_int_eq(text_batcher_init(&ref, &ds, &tok, L, 8, 5, true, true), TENSOR_OK);
	ck_assert_int_eq(text_batcher_init(&b, &ds, &tok, L, 8, 5, true, true), TENSOR_OK);
	b.trim = true;
	int64_t narrower = 0;
	for (int64_t i = 0; i < text_batcher_num_batches(&b); i++) {
		struct text_batch x, y;
		ck_assert_int_eq(text_batcher_get(&ref, i, &x), TENSOR_OK);
		ck_assert_int_eq(text_batcher_get(&b, i, &y), TENSOR_OK);
		ck_assert_int_eq(y.size, x.size);
		ck_assert_int_eq(y.ids->shape[0], x.size);
		int64_t w = y.ids->shape[1], longest = 0;
		ck_assert_int_eq(y.mask->shape[1], w);
		const int64_t *xi = i64(x.ids), *xm = i64(x.mask), *yi = i64(y.ids),
			      *ym = i64(y.mask);
		for (int64_t r = 0; r < x.size; r++) {
			int64_t real = 0;
			for (int64_t c = 0; c < L; c++) {
				real += xm[r * L + c];
				if (c < w) {
					ck_assert_int_eq(yi[r * w + c], xi[r * L + c]);
					ck_assert_int_eq(ym[r * w + c], xm[r * L + c]);
				} else {
					ck_assert_int_eq(xm[r * L + c], 0);
				}
			}
			longest = real > longest ? real : longest;
		}
		ck_assert_int_eq(w, longest);
		narrower += w < L;
		ck_assert(memcmp(i64(x.labels), i64(y.labels), (size_t)x.size * sizeof(int64_t)) ==
			  0);
	}
	ck_assert_int_gt(narrower, 5);
	text_batcher_free(&ref);
	text_batcher_free(&b);
	text_dataset_free(&ds);
}
END_TEST

START_TEST(test_batcher_errors)
{
	struct text_tokenizer tok = byte_tok();
	struct text_dataset ds = varied(10), empty = { NULL, 0 };
	struct text_batcher b;
	memset(&b, 0x5a, sizeof(b));
	tu_assert_error(text_batcher_init(&b, &ds, &tok, 1, 4, 0, false, false) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_batcher_init", "seq_len 1, expected >= 2");
	tu_assert_error(text_batcher_init(&b, &ds, &tok, 8, 0, 0, false, false) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_batcher_init", "batch_size 0, expected >= 1");
	tu_assert_error(text_batcher_init(&b, &empty, &tok, 8, 2, 0, false, false) ==
			    TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_batcher_init", "empty dataset");
	tu_assert_error(text_batcher_init(&b, NULL, &tok, 8, 2, 0, false, false) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_batcher_init", "NULL");
	tu_assert_error(text_batcher_init(&b, &ds, NULL, 8, 2, 0, false, false) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_batcher_init", "NULL");
	tu_assert_error(text_batcher_init(&b, &ds, &tok, INT64_MAX / 2, 2, 0, false, false) ==
			    TENSOR_ERR_NOMEM,
			TENSOR_ERR_NOMEM, "text_batcher_init", "too large");
	tu_assert_error(text_batcher_init(&b, &ds, &tok, (int64_t)INT32_MAX + 1, 2, 0, false,
					  false) == TENSOR_ERR_NOMEM,
			TENSOR_ERR_NOMEM, "text_batcher_init", "seq_len 2147483648 is too large");
	char *t = ds.items[3].text;
	ds.items[3].text = NULL;
	tu_assert_error(text_batcher_init(&b, &ds, &tok, 8, 2, 0, false, false) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_batcher_init", "example 3 has no text");
	ds.items[3].text = t;
	/* a tokenizer error names the example and keeps the tokenizer's message */
	struct text_tokenizer broken = tok;
	broken.kind = (enum text_tokenizer_kind)99;
	tu_assert_error(text_batcher_init(&b, &ds, &broken, 8, 2, 0, false, false) ==
			    TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_batcher_init: example 0: text_encode",
			"unknown tokenizer kind 99");
	ck_assert(b.ids == (void *)0x5a5a5a5a5a5a5a5aull); /* untouched */

	ck_assert_int_eq(text_batcher_init(&b, &ds, &tok, 8, 4, 0, true, false), TENSOR_OK);
	ck_assert_int_eq(text_batcher_num_batches(&b), 3);
	struct text_batch bt = { NULL, NULL, NULL, -1 };
	tu_assert_error(text_batcher_get(&b, 3, &bt) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"text_batcher_get", "batch 3 out of range, expected 0..2");
	tu_assert_error(text_batcher_get(&b, -1, &bt) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"text_batcher_get", "batch -1 out of range");
	tu_assert_error(text_batcher_get(&b, 0, NULL) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"text_batcher_get", "NULL");
	tu_assert_error(text_batcher_get(NULL, 0, &bt) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"text_batcher_get", "NULL");
	ck_assert(bt.ids == NULL && bt.size == -1);
	text_batcher_free(&b);
	tu_assert_error(text_batcher_get(&b, 0, &bt) == TENSOR_ERR_STATE, TENSOR_ERR_STATE,
			"text_batcher_get", "not initialised");
	ck_assert_int_eq(text_batcher_num_batches(&b), 0);
	text_batcher_next_epoch(&b); /* harmless on a freed batcher */
	text_batcher_free(&b);
	text_batcher_free(NULL);
	text_batcher_next_epoch(NULL);
	ck_assert_int_eq(text_batcher_num_batches(NULL), 0);
	text_dataset_free(&ds);
}
END_TEST

/* Outside a scope the batch tensors are heap tensors owned by the caller. */
START_TEST(test_batcher_heap)
{
	struct text_tokenizer tok = byte_tok();
	struct text_dataset ds = varied(5);
	struct text_batcher b;
	ck_assert_int_eq(text_batcher_init(&b, &ds, &tok, 8, 2, 0, false, false), TENSOR_OK);
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK);
	struct text_batch bt;
	ck_assert_int_eq(text_batcher_get(&b, 2, &bt), TENSOR_OK);
	ck_assert(!bt.ids->in_arena && !bt.mask->in_arena && !bt.labels->in_arena);
	ck_assert_int_eq(bt.size, 1);
	ck_assert_int_eq(i64(bt.labels)[0], 4);
	tensor_free(bt.ids);
	tensor_free(bt.mask);
	tensor_free(bt.labels);
	tensor_scope_begin();
	text_batcher_free(&b);
	text_dataset_free(&ds);
}
END_TEST

/* ---- MLM masking ------------------------------------------------------------ */

/* A [B, n] batch of byte-tokenizer ids: [CLS] tokens [SEP] then padding;
 * every 40th token is [UNK], every 97th a literal [MASK]; in odd rows the
 * padding region holds id 9 (mask 0) instead of [PAD]. */
static struct text_batch mlm_batch(int64_t B, int64_t n, int64_t *selectable)
{
	int64_t *ids = malloc(sizeof(int64_t) * (size_t)(B * n));
	int64_t *mask = malloc(sizeof(int64_t) * (size_t)(B * n));
	uint64_t x = 12345;
	*selectable = 0;
	for (int64_t r = 0; r < B; r++) {
		int64_t len = n / 2 + (r * 37) % (n / 2);
		for (int64_t c = 0; c < n; c++) {
			int64_t p = r * n + c, id;
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			if (c == 0)
				id = 2;
			else if (c == len - 1)
				id = 3;
			else if (c >= len)
				id = r % 2 ? 9 : 0;
			else if (p % 40 == 0)
				id = 1;
			else if (p % 97 == 0)
				id = 4;
			else
				id = 5 + (int64_t)((x >> 33) % 256);
			ids[p] = id;
			mask[p] = c < len;
			*selectable += c < len && id != 0 && id != 2 && id != 3 && id != 4;
		}
	}
	int64_t shape[2] = { B, n }, one = B;
	struct text_batch bt;
	bt.ids = tensor_from_data(TENSOR_I64, TENSOR_CPU, 2, shape, ids);
	bt.mask = tensor_from_data(TENSOR_I64, TENSOR_CPU, 2, shape, mask);
	bt.labels = tensor_zeros(TENSOR_I64, TENSOR_CPU, 1, &one);
	bt.size = B;
	ck_assert(bt.ids && bt.mask && bt.labels);
	free(ids);
	free(mask);
	return bt;
}

START_TEST(test_mlm_statistics)
{
	struct text_tokenizer tok = byte_tok();
	int64_t B = 500, n = 600, selectable;
	struct text_batch bt = mlm_batch(B, n, &selectable);
	ck_assert_int_gt(selectable, 200000);
	struct tensor *in, *lab;
	ck_assert_int_eq(text_mlm_mask(&tok, &bt, 0.15, 2024, &in, &lab), TENSOR_OK);
	int64_t shape[2] = { B, n };
	tu_assert_shape(in, 2, shape);
	tu_assert_shape(lab, 2, shape);
	const int64_t *ids = i64(bt.ids), *mask = i64(bt.mask), *pi = i64(in), *pl = i64(lab);
	int64_t sel = 0, nmask = 0, nrand = 0, nsame = 0, unk_sel = 0, lo = 1000, hi = -1;
	for (int64_t p = 0; p < B * n; p++) {
		int64_t id = ids[p];
		bool can = mask[p] && id != 0 && id != 2 && id != 3 && id != 4;
		if (pl[p] == -100) {
			ck_assert_int_eq(pi[p], id); /* not selected: unchanged */
			continue;
		}
		ck_assert_msg(can, "position %lld (id %lld, mask %lld) selected", (long long)p,
			      (long long)id, (long long)mask[p]);
		ck_assert_int_eq(pl[p], id);
		sel++;
		unk_sel += id == 1;
		if (pi[p] == 4) {
			nmask++;
		} else if (pi[p] == id) {
			nsame++;
		} else {
			nrand++;
			ck_assert(pi[p] >= 5 && pi[p] <= 260);
			lo = pi[p] < lo ? pi[p] : lo;
			hi = pi[p] > hi ? pi[p] : hi;
		}
	}
	double fs = (double)sel / (double)selectable;
	double fm = (double)nmask / (double)sel, fr = (double)nrand / (double)sel,
	       fu = (double)nsame / (double)sel;
	ck_assert_msg(fabs(fs - 0.15) < 0.005, "selected %g", fs);
	ck_assert_msg(fabs(fm - 0.8) < 0.01, "[MASK] %g", fm);
	ck_assert_msg(fabs(fr - 0.1) < 0.01, "random %g", fr);
	ck_assert_msg(fabs(fu - 0.1) < 0.01, "unchanged %g", fu);
	ck_assert_int_gt(unk_sel, 0);	/* [UNK] is ordinary text */
	ck_assert(lo < 15 && hi > 250); /* replacements span the bytes */
	text_tokenizer_free(&tok);
}
END_TEST

START_TEST(test_mlm_determinism)
{
	struct text_tokenizer tok = byte_tok();
	int64_t selectable;
	struct text_batch bt = mlm_batch(20, 64, &selectable);
	struct tensor *a, *la, *b, *lb, *c, *lc;
	ck_assert_int_eq(text_mlm_mask(&tok, &bt, 0.15, 5, &a, &la), TENSOR_OK);
	ck_assert_int_eq(text_mlm_mask(&tok, &bt, 0.15, 5, &b, &lb), TENSOR_OK);
	ck_assert_int_eq(text_mlm_mask(&tok, &bt, 0.15, 6, &c, &lc), TENSOR_OK);
	size_t sz = 20 * 64 * sizeof(int64_t);
	ck_assert(memcmp(i64(a), i64(b), sz) == 0 && memcmp(i64(la), i64(lb), sz) == 0);
	ck_assert(memcmp(i64(la), i64(lc), sz) != 0);
	/* a strided copy of the batch gives the same result */
	struct text_batch st = bt;
	st.ids = tu_strided(bt.ids);
	st.mask = tu_strided(bt.mask);
	ck_assert(!tensor_is_contiguous(st.ids));
	ck_assert_int_eq(text_mlm_mask(&tok, &st, 0.15, 5, &c, &lc), TENSOR_OK);
	ck_assert(memcmp(i64(a), i64(c), sz) == 0 && memcmp(i64(la), i64(lc), sz) == 0);
	/* prob 0 selects nothing, prob 1 every selectable token */
	ck_assert_int_eq(text_mlm_mask(&tok, &bt, 0.0, 5, &c, &lc), TENSOR_OK);
	for (int64_t p = 0; p < 20 * 64; p++)
		ck_assert(i64(lc)[p] == -100 && i64(c)[p] == i64(bt.ids)[p]);
	ck_assert_int_eq(text_mlm_mask(&tok, &bt, 1.0, 5, &c, &lc), TENSOR_OK);
	int64_t sel = 0;
	for (int64_t p = 0; p < 20 * 64; p++)
		sel += i64(lc)[p] != -100;
	ck_assert_int_eq(sel, selectable);
	text_tokenizer_free(&tok);
}
END_TEST

/* WordPiece: replacements avoid specials and reserved [unusedN] entries; the
 * specials are found by id, not by position in the vocabulary. */
START_TEST(test_mlm_wordpiece)
{
	struct text_tokenizer tok;
	ck_assert_int_eq(text_wordpiece_load(&tok, data_path("mlm_vocab_tiny.txt")), TENSOR_OK);
	ck_assert_int_eq(tok.vocab_size, 18);
	ck_assert_int_eq(tok.unk_id, 3);
	ck_assert_int_eq(tok.mask_id, 6);
	const int64_t B = 200, n = 50;
	int64_t *ids = malloc(sizeof(int64_t) * B * n), *mask = malloc(sizeof(int64_t) * B * n);
	for (int64_t p = 0; p < B * n; p++) {
		int64_t c = p % n;
		ids[p] = c == 0 ? 4 : c == n - 1 ? 5 : c % 7 == 0 ? 3 : 8 + p % 10;
		mask[p] = 1;
	}
	int64_t shape[2] = { B, n };
	struct text_batch bt = { tensor_from_data(TENSOR_I64, TENSOR_CPU, 2, shape, ids),
				 tensor_from_data(TENSOR_I64, TENSOR_CPU, 2, shape, mask), NULL,
				 B };
	free(ids);
	free(mask);
	struct tensor *in, *lab;
	ck_assert_int_eq(text_mlm_mask(&tok, &bt, 0.5, 9, &in, &lab), TENSOR_OK);
	const int64_t *pi = i64(in), *pl = i64(lab), *po = i64(bt.ids);
	int64_t nrand = 0, seen[18] = { 0 };
	for (int64_t p = 0; p < B * n; p++) {
		if (pl[p] == -100) {
			ck_assert_int_eq(pi[p], po[p]);
			continue;
		}
		ck_assert(po[p] != 4 && po[p] != 5);
		if (pi[p] != 6 && pi[p] != po[p]) {
			ck_assert_msg(pi[p] >= 8 && pi[p] < 18, "replacement %lld",
				      (long long)pi[p]);
			nrand++;
		}
		seen[pi[p]]++;
	}
	ck_assert_int_gt(nrand, 300);
	for (int i = 8; i < 18; i++)
		ck_assert_int_gt(seen[i], 0);
	text_tokenizer_free(&tok);
}
END_TEST

START_TEST(test_mlm_errors)
{
	struct text_tokenizer tok = byte_tok();
	int64_t selectable;
	struct text_batch bt = mlm_batch(4, 16, &selectable);
	struct tensor *in = NULL, *lab = NULL;
	double bad[] = { -0.1, 1.5, NAN };
	for (int i = 0; i < 3; i++)
		tu_assert_error(text_mlm_mask(&tok, &bt, bad[i], 1, &in, &lab) == TENSOR_ERR_ARG,
				TENSOR_ERR_ARG, "text_mlm_mask: prob", "expected [0, 1]");
	tu_assert_error(text_mlm_mask(NULL, &bt, 0.15, 1, &in, &lab) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_mlm_mask", "NULL");
	tu_assert_error(text_mlm_mask(&tok, &bt, 0.15, 1, NULL, &lab) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_mlm_mask", "NULL");
	struct text_batch x = bt;
	x.mask = NULL;
	tu_assert_error(text_mlm_mask(&tok, &x, 0.15, 1, &in, &lab) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_mlm_mask", "batch mask is NULL");
	int64_t s2[2] = { 4, 16 }, s3[2] = { 4, 15 }, s1[1] = { 64 };
	x = bt;
	x.ids = tensor_zeros(TENSOR_I32, TENSOR_CPU, 2, s2);
	tu_assert_error(text_mlm_mask(&tok, &x, 0.15, 1, &in, &lab) == TENSOR_ERR_DTYPE,
			TENSOR_ERR_DTYPE, "text_mlm_mask: batch ids is i32", "expected i64");
	struct tensor_storage on_gpu = *bt.ids->storage; /* a header claiming CUDA */
	on_gpu.device = TENSOR_CUDA;
	struct tensor fake = *bt.ids;
	fake.storage = &on_gpu;
	x.ids = &fake;
	tu_assert_error(text_mlm_mask(&tok, &x, 0.15, 1, &in, &lab) == TENSOR_ERR_DEVICE,
			TENSOR_ERR_DEVICE, "text_mlm_mask: batch ids is on cuda", "expected cpu");
	x.ids = tensor_zeros(TENSOR_I64, TENSOR_CPU, 1, s1);
	tu_assert_error(text_mlm_mask(&tok, &x, 0.15, 1, &in, &lab) == TENSOR_ERR_SHAPE,
			TENSOR_ERR_SHAPE, "batch ids has shape [64]", "expected [B, n]");
	x.ids = tensor_zeros(TENSOR_I64, TENSOR_CPU, 2, s3);
	tu_assert_error(text_mlm_mask(&tok, &x, 0.15, 1, &in, &lab) == TENSOR_ERR_SHAPE,
			TENSOR_ERR_SHAPE, "ids [4,15] and mask [4,16] differ", NULL);
	x.ids = tensor_clone(bt.ids);
	((int64_t *)tensor_data(x.ids))[1 * 16 + 3] = 261;
	tu_assert_error(text_mlm_mask(&tok, &x, 0.15, 1, &in, &lab) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "ids[1, 3] = 261", "outside the vocabulary [0, 261)");
	((int64_t *)tensor_data(x.ids))[1 * 16 + 3] = -1;
	tu_assert_error(text_mlm_mask(&tok, &x, 0.15, 1, &in, &lab) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "ids[1, 3] = -1", NULL);
	/* out-of-range ids under mask 0 are padding and ignored */
	((int64_t *)tensor_data(x.ids))[1 * 16 + 3] = 0;
	((int64_t *)tensor_data(x.ids))[0 * 16 + 15] = 999;
	ck_assert_int_eq(i64(bt.mask)[15], 0);
	ck_assert_int_eq(text_mlm_mask(&tok, &x, 0.15, 1, &in, &lab), TENSOR_OK);
	ck_assert(in && lab);
	struct tensor *in2 = NULL, *lab2 = NULL;
	struct text_tokenizer t2 = tok;
	t2.vocab_size = 0;
	tu_assert_error(text_mlm_mask(&t2, &bt, 0.15, 1, &in2, &lab2) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_mlm_mask", "vocab_size 0");
	t2.vocab_size = 5; /* only specials: nothing to draw replacements from */
	x.ids = tensor_zeros(TENSOR_I64, TENSOR_CPU, 2, s2);
	tu_assert_error(text_mlm_mask(&t2, &x, 0.15, 1, &in2, &lab2) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_mlm_mask", "no ordinary ids");
	ck_assert(in2 == NULL && lab2 == NULL);
	text_tokenizer_free(&tok);
}
END_TEST

/* ---- whole-word and span masking ---------------------------------------------------------- */

/* Rows of the tiny WordPiece vocabulary: [CLS], words of ordinary ids with "##s" (14) pieces
 * after some (with_pieces), [SEP], padding; whether each position starts a word. */
static struct text_batch word_batch(int64_t B, int64_t n, bool with_pieces, bool *starts)
{
	int64_t *ids = malloc(sizeof(int64_t) * B * n), *mask = malloc(sizeof(int64_t) * B * n);
	uint64_t x = 88172645463325252ull;
	for (int64_t b = 0; b < B; b++) {
		int64_t len = n / 2 + b % (n / 2);
		for (int64_t c = 0; c < n; c++) {
			int64_t p = b * n + c, id;
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			bool piece = with_pieces && c > 1 && x % 10 < 4;
			id = c == 0	    ? 4
			     : c == len - 1 ? 5
			     : c >= len	    ? 0
			     : piece	    ? 14
					    : 8 + (int64_t)((x >> 20) % 6);
			ids[p] = id;
			mask[p] = c < len;
			starts[p] = c > 0 && c < len - 1 && !piece;
		}
	}
	int64_t shape[2] = { B, n };
	struct text_batch bt = { tensor_from_data(TENSOR_I64, TENSOR_CPU, 2, shape, ids),
				 tensor_from_data(TENSOR_I64, TENSOR_CPU, 2, shape, mask), NULL,
				 B };
	ck_assert(bt.ids && bt.mask);
	free(ids);
	free(mask);
	return bt;
}

/* Checks that every word of lab is selected whole or not at all; returns the number of
 * words and of selected ones, and the number and total length (in words) of the maximal
 * runs of selected words. */
static void count_words(const struct text_batch *bt, const struct tensor *lab, const bool *starts,
			int64_t *words, int64_t *chosen, int64_t *runs, int64_t *run_words)
{
	const int64_t *pl = i64(lab), *ids = i64(bt->ids), B = bt->ids->shape[0],
		      n = bt->ids->shape[1];
	*words = *chosen = *runs = *run_words = 0;
	for (int64_t b = 0; b < B; b++) {
		bool in_run = false, word_chosen = false;
		for (int64_t c = 0; c < n; c++) {
			int64_t p = b * n + c;
			bool sel = pl[p] != -100;
			if (starts[p]) {
				word_chosen = sel;
				*words += 1;
				*chosen += sel;
				*runs += sel && !in_run;
				*run_words += sel;
				in_run = sel;
			} else if (ids[p] == 14) {
				ck_assert_msg(sel == word_chosen,
					      "row %lld position %lld: a piece selected apart from "
					      "its word",
					      (long long)b, (long long)c);
			} else { /* [CLS], [SEP] or padding: never selected, ends a run */
				ck_assert(!sel);
				in_run = word_chosen = false;
			}
		}
	}
}

START_TEST(test_mlm_whole_words)
{
	struct text_tokenizer tok;
	ck_assert_int_eq(text_wordpiece_load(&tok, data_path("mlm_vocab_tiny.txt")), TENSOR_OK);
	const int64_t B = 800, n = 64;
	bool *starts = malloc(sizeof(bool) * B * n);
	struct text_batch bt = word_batch(B, n, true, starts);
	struct tensor *in, *lab;
	ck_assert_int_eq(text_mlm_mask_unit(&tok, &bt, 0.15, TEXT_MASK_WORD, 3, &in, &lab),
			 TENSOR_OK);
	int64_t words, chosen, runs, run_words, pieces = 0, masked = 0, selected = 0;
	count_words(&bt, lab, starts, &words, &chosen, &runs, &run_words);
	ck_assert_int_gt(words, 20000);
	double f = (double)chosen / (double)words;
	ck_assert_msg(fabs(f - 0.15) < 0.01, "words selected %g", f);
	for (int64_t p = 0; p < B * n; p++) {
		selected += i64(lab)[p] != -100;
		masked += i64(in)[p] == 6;
		pieces += i64(lab)[p] == 14;
	}
	ck_assert_int_gt(pieces, 1000); /* pieces are selected, with their words */
	ck_assert_msg(fabs((double)masked / (double)selected - 0.8) < 0.02, "[MASK] %g",
		      (double)masked / (double)selected);
	/* without pieces every word is one token: the token mask, draw for draw */
	struct text_batch plain = word_batch(B, n, false, starts);
	struct tensor *a, *la, *b, *lb;
	ck_assert_int_eq(text_mlm_mask_unit(&tok, &plain, 0.15, TEXT_MASK_WORD, 3, &a, &la),
			 TENSOR_OK);
	ck_assert_int_eq(text_mlm_mask(&tok, &plain, 0.15, 3, &b, &lb), TENSOR_OK);
	size_t sz = sizeof(int64_t) * B * n;
	ck_assert(!memcmp(i64(a), i64(b), sz) && !memcmp(i64(la), i64(lb), sz));
	free(starts);
	text_tokenizer_free(&tok);
}
END_TEST

START_TEST(test_mlm_spans)
{
	struct text_tokenizer tok;
	ck_assert_int_eq(text_wordpiece_load(&tok, data_path("mlm_vocab_tiny.txt")), TENSOR_OK);
	const int64_t B = 800, n = 128;
	bool *starts = malloc(sizeof(bool) * B * n);
	struct text_batch bt = word_batch(B, n, true, starts);
	struct tensor *in, *lab;
	ck_assert_int_eq(text_mlm_mask_unit(&tok, &bt, 0.15, TEXT_MASK_SPAN, 3, &in, &lab),
			 TENSOR_OK);
	int64_t words, chosen, runs, run_words;
	count_words(&bt, lab, starts, &words, &chosen, &runs, &run_words);
	double f = (double)chosen / (double)words, mean = (double)run_words / (double)runs;
	ck_assert_msg(fabs(f - 0.15) < 0.015, "words covered %g", f);
	/* spans of mean 3.8 words, a few run into the next or are cut at [SEP] */
	ck_assert_msg(mean > 3.4 && mean < 4.4, "mean run %g words", mean);
	/* prob 1 covers every word, prob 0 none, whatever the unit */
	for (int u = TEXT_MASK_WORD; u <= TEXT_MASK_SPAN; u++) {
		ck_assert_int_eq(text_mlm_mask_unit(&tok, &bt, 1.0, u, 4, &in, &lab), TENSOR_OK);
		count_words(&bt, lab, starts, &words, &chosen, &runs, &run_words);
		ck_assert_int_eq(chosen, words);
		ck_assert_int_eq(text_mlm_mask_unit(&tok, &bt, 0.0, u, 4, &in, &lab), TENSOR_OK);
		count_words(&bt, lab, starts, &words, &chosen, &runs, &run_words);
		ck_assert_int_eq(chosen, 0);
	}
	tu_assert_error(text_mlm_mask_unit(&tok, &bt, 0.15, (enum text_mask_unit)7, 4, &in, &lab) ==
			    TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_mlm_mask: unit 7", "expected TEXT_MASK_TOKEN");
	free(starts);
	text_tokenizer_free(&tok);
}
END_TEST

/* The byte tokenizer's words are runs of non-whitespace bytes. */
START_TEST(test_mlm_byte_words)
{
	struct text_tokenizer tok = byte_tok();
	const char *text = "ab cd\tefg  h";
	const int64_t B = 2000, n = 14;
	int64_t *ids = malloc(sizeof(int64_t) * B * n), *mask = malloc(sizeof(int64_t) * B * n);
	for (int64_t p = 0; p < B * n; p++) {
		int64_t c = p % n;
		ids[p] = c == 0 ? 2 : c == n - 1 ? 3 : 5 + (unsigned char)text[c - 1];
		mask[p] = 1;
	}
	int64_t shape[2] = { B, n };
	struct text_batch bt = { tensor_from_data(TENSOR_I64, TENSOR_CPU, 2, shape, ids),
				 tensor_from_data(TENSOR_I64, TENSOR_CPU, 2, shape, mask), NULL,
				 B };
	struct tensor *in, *lab;
	ck_assert_int_eq(text_mlm_mask_unit(&tok, &bt, 0.3, TEXT_MASK_WORD, 9, &in, &lab),
			 TENSOR_OK);
	const int64_t *pl = i64(lab);
	const int64_t word[] = { 1, 2, 4, 5, 7, 8, 9, 12 }, first[] = { 1, 1, 4, 4, 7, 7, 7, 12 };
	int64_t spaces = 0, words = 0;
	for (int64_t b = 0; b < B; b++) {
		for (int i = 0; i < 8; i++) /* each letter selected with its word's first */
			ck_assert((pl[b * n + word[i]] == -100) == (pl[b * n + first[i]] == -100));
		spaces += (pl[b * n + 3] != -100) + (pl[b * n + 6] != -100);
		words += pl[b * n + 1] != -100;
	}
	ck_assert_msg(fabs((double)spaces / (2.0 * B) - 0.3) < 0.03, "spaces %lld",
		      (long long)spaces);
	ck_assert_msg(fabs((double)words / B - 0.3) < 0.04, "first words %lld", (long long)words);
	free(ids);
	free(mask);
	text_tokenizer_free(&tok);
}
END_TEST

/* End to end: the batcher's output masked for MLM. */
START_TEST(test_mlm_from_batcher)
{
	struct text_tokenizer tok = byte_tok();
	struct text_dataset ds;
	ck_assert_int_eq(text_imdb_load(data_path("imdb_tiny"), "train", &ds), TENSOR_OK);
	struct text_batcher b;
	ck_assert_int_eq(text_batcher_init(&b, &ds, &tok, 48, 7, 1, true, false), TENSOR_OK);
	struct text_batch bt;
	ck_assert_int_eq(text_batcher_get(&b, 0, &bt), TENSOR_OK);
	struct tensor *in, *lab;
	ck_assert_int_eq(text_mlm_mask(&tok, &bt, 1.0, 3, &in, &lab), TENSOR_OK);
	const int64_t *pi = i64(bt.ids), *pm = i64(bt.mask), *pl = i64(lab);
	for (int64_t p = 0; p < 7 * 48; p++) {
		bool special = pi[p] == 0 || pi[p] == 2 || pi[p] == 3;
		ck_assert_int_eq(pl[p], pm[p] && !special ? pi[p] : -100);
	}
	text_batcher_free(&b);
	text_dataset_free(&ds);
	text_tokenizer_free(&tok);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("text_batch");
	TCase *tc = tu_tcase("batcher");
	tcase_add_test(tc, test_batcher_values);
	tcase_add_test(tc, test_batcher_shuffle);
	tcase_add_test(tc, test_batcher_bucket);
	tcase_add_test(tc, test_batcher_cached);
	tcase_add_test(tc, test_batcher_trim);
	tcase_add_test(tc, test_batcher_errors);
	tcase_add_test(tc, test_batcher_heap);
	suite_add_tcase(s, tc);
	tc = tu_tcase("mlm");
	tcase_add_test(tc, test_mlm_statistics);
	tcase_add_test(tc, test_mlm_determinism);
	tcase_add_test(tc, test_mlm_wordpiece);
	tcase_add_test(tc, test_mlm_errors);
	tcase_add_test(tc, test_mlm_whole_words);
	tcase_add_test(tc, test_mlm_spans);
	tcase_add_test(tc, test_mlm_byte_words);
	tcase_add_test(tc, test_mlm_from_batcher);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
