/* Validation splits of a dataset from a seeded permutation: by example
 * (text_dataset_split) or by group, whole movies (text_dataset_split_groups).
 * Both keep the original order inside each part and copy the texts. And
 * text_dataset_concat, which pools two datasets (the IMDB train and test
 * splits, for the protocol of studies that split all 50,000 reviews). */
#define _POSIX_C_SOURCE 200809L
#include "text.h"

#include <stdlib.h>
#include <string.h>

#include "mem.h"
#include "random.h"

/* perm = a permutation of 0..n-1: Fisher-Yates where draw i is (seed, i). */
static void seeded_perm(int64_t *perm, int64_t n, uint64_t seed)
{
	for (int64_t i = 0; i < n; i++)
		perm[i] = i;
	for (int64_t i = n - 1; i > 0; i--) {
		int64_t j = (int64_t)(random_uniform(seed, (uint64_t)i) * (double)(i + 1));
		int64_t t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
}

/* Copy the examples whose flag equals want (n of them), in order. */
static int copy_flagged(const char *op, const struct text_dataset *ds, const unsigned char *flag,
			int want, int64_t n, struct text_dataset *out)
{
	out->items = n ? tensor_host_calloc((size_t)n, sizeof(*out->items)) : NULL;
	out->n = 0;
	if (n && !out->items)
		return tensor_error(TENSOR_ERR_NOMEM, "%s: out of memory", op);
	for (int64_t i = 0; i < ds->n; i++) {
		if (flag[i] != want)
			continue;
		struct text_example *ex = &out->items[out->n];
		*ex = ds->items[i];
		ex->text = tensor_host_strdup(ds->items[i].text ? ds->items[i].text : "");
		if (!ex->text)
			return tensor_error(TENSOR_ERR_NOMEM, "%s: out of memory", op);
		out->n++;
	}
	return TENSOR_OK;
}

/* train and val from flag (1: val, k of them); *train, *val written only on
 * success. */
static int split_flagged(const char *op, const struct text_dataset *ds, const unsigned char *flag,
			 int64_t k, struct text_dataset *train, struct text_dataset *val)
{
	struct text_dataset tr = { NULL, 0 }, va = { NULL, 0 };
	int st = copy_flagged(op, ds, flag, 0, ds->n - k, &tr);
	if (st == TENSOR_OK)
		st = copy_flagged(op, ds, flag, 1, k, &va);
	if (st != TENSOR_OK) {
		text_dataset_free(&tr);
		text_dataset_free(&va);
		return st;
	}
	*train = tr;
	*val = va;
	return TENSOR_OK;
}

static int check_args(const char *op, const struct text_dataset *ds, double fraction,
		      const struct text_dataset *train, const struct text_dataset *val)
{
	if (!ds || !train || !val)
		return tensor_error(TENSOR_ERR_ARG, "%s: NULL argument", op);
	if (!(fraction >= 0.0 && fraction < 1.0))
		return tensor_error(TENSOR_ERR_ARG, "%s: fraction %g, expected [0, 1)", op,
				    fraction);
	if (ds->n < 0 || (ds->n > 0 && !ds->items))
		return tensor_error(TENSOR_ERR_ARG, "%s: invalid dataset (n %lld)", op,
				    (long long)ds->n);
	return TENSOR_OK;
}

/* round(fraction * n), at most n */
static int64_t val_count(double fraction, int64_t n)
{
	int64_t k = (int64_t)(fraction * (double)n + 0.5);
	return k > n ? n : k;
}

int text_dataset_split(const struct text_dataset *ds, double fraction, uint64_t seed,
		       struct text_dataset *train, struct text_dataset *val)
{
	static const char op[] = "text_dataset_split";
	if (check_args(op, ds, fraction, train, val) < 0)
		return tensor_last_status();
	int64_t n = ds->n, k = val_count(fraction, n);
	int64_t *perm = tensor_host_malloc(sizeof(*perm) * (size_t)(n ? n : 1));
	unsigned char *flag = tensor_host_calloc((size_t)(n ? n : 1), 1);
	int st = TENSOR_OK;
	if (!perm || !flag) {
		st = tensor_error(TENSOR_ERR_NOMEM, "%s: out of memory", op);
	} else {
		seeded_perm(perm, n, seed);
		for (int64_t i = 0; i < k; i++)
			flag[perm[i]] = 1;
		st = split_flagged(op, ds, flag, k, train, val);
	}
	free(perm);
	free(flag);
	return st;
}

static int i64_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Index of group g in the sorted distinct groups u[0..m). */
static int64_t group_index(const int64_t *u, int64_t m, int64_t g)
{
	const int64_t *p = bsearch(&g, u, (size_t)m, sizeof(*u), i64_cmp);
	return p - u;
}

int text_dataset_split_groups(const struct text_dataset *ds, double fraction, uint64_t seed,
			      struct text_dataset *train, struct text_dataset *val)
{
	static const char op[] = "text_dataset_split_groups";
	if (check_args(op, ds, fraction, train, val) < 0)
		return tensor_last_status();
	int64_t n = ds->n, k = val_count(fraction, n);
	for (int64_t i = 0; i < n; i++)
		if (ds->items[i].group <= 0)
			return tensor_error(TENSOR_ERR_ARG,
					    "%s: example %lld has no group (group %lld, expected > "
					    "0; aclImdb: the split's urls_neg.txt and urls_pos.txt "
					    "give each review's movie)",
					    op, (long long)i, (long long)ds->items[i].group);
	size_t sz = (size_t)(n ? n : 1);
	int64_t *u = tensor_host_malloc(sizeof(*u) * sz),
		*perm = tensor_host_malloc(sizeof(*perm) * sz);
	int64_t *count = tensor_host_calloc(sz, sizeof(*count));
	unsigned char *chosen = tensor_host_calloc(sz, 1), *flag = tensor_host_calloc(sz, 1);
	int st = TENSOR_OK;
	if (!u || !perm || !count || !chosen || !flag) {
		st = tensor_error(TENSOR_ERR_NOMEM, "%s: out of memory", op);
		goto done;
	}
	/* the distinct groups, their sizes, then whole groups in the seeded
	 * order until val holds at least k examples */
	int64_t m = 0;
	for (int64_t i = 0; i < n; i++)
		u[i] = ds->items[i].group;
	qsort(u, (size_t)n, sizeof(*u), i64_cmp);
	for (int64_t i = 0; i < n; i++)
		if (i == 0 || u[i] != u[m - 1])
			u[m++] = u[i];
	for (int64_t i = 0; i < n; i++)
		count[group_index(u, m, ds->items[i].group)]++;
	seeded_perm(perm, m, seed);
	int64_t taken = 0;
	for (int64_t j = 0; j < m && taken < k; j++) {
		chosen[perm[j]] = 1;
		taken += count[perm[j]];
	}
	for (int64_t i = 0; i < n; i++)
		flag[i] = chosen[group_index(u, m, ds->items[i].group)];
	st = split_flagged(op, ds, flag, taken, train, val);
done:
	free(u);
	free(perm);
	free(count);
	free(chosen);
	free(flag);
	return st;
}

int text_dataset_concat(const struct text_dataset *a, const struct text_dataset *b,
			struct text_dataset *out)
{
	static const char op[] = "text_dataset_concat";
	if (!a || !b || !out)
		return tensor_error(TENSOR_ERR_ARG, "%s: NULL argument", op);
	const struct text_dataset *in[2] = { a, b };
	for (int p = 0; p < 2; p++)
		if (in[p]->n < 0 || (in[p]->n > 0 && !in[p]->items))
			return tensor_error(TENSOR_ERR_ARG, "%s: invalid dataset %c (n %lld)", op,
					    p ? 'b' : 'a', (long long)in[p]->n);
	int64_t shift = 0;
	for (int64_t i = 0; i < a->n; i++)
		shift = a->items[i].group > shift ? a->items[i].group : shift;
	struct text_dataset cat = { NULL, 0 };
	int64_t n = a->n + b->n;
	cat.items = n ? tensor_host_calloc((size_t)n, sizeof(*cat.items)) : NULL;
	if (n && !cat.items)
		return tensor_error(TENSOR_ERR_NOMEM, "%s: out of memory", op);
	for (int p = 0; p < 2; p++)
		for (int64_t i = 0; i < in[p]->n; i++) {
			struct text_example *ex = &cat.items[cat.n];
			*ex = in[p]->items[i];
			if (p == 1 && ex->group > 0)
				ex->group += shift;
			ex->text =
			    tensor_host_strdup(in[p]->items[i].text ? in[p]->items[i].text : "");
			if (!ex->text) {
				text_dataset_free(&cat);
				return tensor_error(TENSOR_ERR_NOMEM, "%s: out of memory", op);
			}
			cat.n++;
		}
	*out = cat;
	return TENSOR_OK;
}
