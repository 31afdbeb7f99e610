/* Shared harness of the gradient-check files of test_ops (gradcases.h). */
#include "gradcases.h"

#include <stdio.h>
#include <string.h>

#include "testutil.h"

const char *const layout_name[] = { "contiguous", "strided", "sliced", "broadcast" };

/* The context of run_fn: the op under test and the inputs to expand first. */
struct run {
	gc_fn op;
	void *ctx;
	int n;
	bool expand[MAXIN];
	const struct spec *sp;
};

static struct tensor *run_fn(struct tensor *const *in, void *vctx)
{
	const struct run *r = vctx;
	struct tensor *x[MAXIN];
	for (int i = 0; i < r->n; i++)
		x[i] = r->expand[i] ? ag_expand(in[i], r->sp[i].ndim, r->sp[i].shape) : in[i];
	return r->op(x, r->ctx);
}

static uint64_t next_seed = 1;

static const char *shape_str(int ndim, const int64_t *shape, char *buf, size_t len)
{
	size_t k = (size_t)snprintf(buf, len, "[");
	for (int d = 0; d < ndim && k < len; d++)
		k += (size_t)snprintf(buf + k, len - k, d ? ",%lld" : "%lld", (long long)shape[d]);
	if (k < len)
		snprintf(buf + k, len - k, "]");
	return buf;
}

struct tensor *make_leaf(enum layout l, int ndim, const int64_t *shape, double lo, double hi)
{
	uint64_t seed = next_seed++;
	if (l == STRIDED && ndim >= 2)
		return gc_input(ndim, shape, seed, lo, hi, true);
	if ((l == SLICED || l == STRIDED) && ndim >= 1) {
		/* every other element of the last dim, rows from 1 of the first dim */
		int64_t big[TENSOR_MAX_DIMS];
		memcpy(big, shape, sizeof(int64_t) * (size_t)ndim);
		big[ndim - 1] = 2 * shape[ndim - 1] + 1;
		if (ndim >= 2)
			big[0] = shape[0] + 1;
		struct tensor *base =
		    tensor_rand_uniform(TENSOR_F64, TENSOR_CPU, ndim, big, seed, lo, hi);
		struct tensor *v = tensor_slice(base, ndim - 1, 1, big[ndim - 1], 2);
		if (ndim >= 2)
			v = tensor_narrow(v, 0, 1, shape[0]);
		ck_assert_msg(v != NULL, "%s", tensor_last_error());
		ck_assert_int_eq(ag_requires_grad(v, true), TENSOR_OK);
		return v;
	}
	return gc_input(ndim, shape, seed, lo, hi, false);
}

void check_layout(const char *name, gc_fn f, void *ctx, int n, const struct spec *sp, enum layout l)
{
	struct run r = { .op = f, .ctx = ctx, .n = n, .sp = sp };
	struct tensor *in[MAXIN];
	char label[512], b[128];
	int k = snprintf(label, sizeof label, "%s on %s", name, layout_name[l]);
	for (int i = 0; i < n; i++) {
		int64_t leaf[TENSOR_MAX_DIMS];
		memcpy(leaf, sp[i].shape, sizeof leaf);
		if (l == BCAST && sp[i].ndim > 0) {
			r.expand[i] = true;
			for (int d = 0; d < sp[i].ndim; d += 2)
				leaf[d] = 1;
		}
		in[i] = make_leaf(l, sp[i].ndim, leaf, sp[i].lo, sp[i].hi);
		if (sp[i].nograd)
			ag_requires_grad(in[i], false);
		if (k < (int)sizeof label)
			k += snprintf(label + k, sizeof label - (size_t)k, "%s%s", i ? " x " : " ",
				      shape_str(sp[i].ndim, leaf, b, sizeof b));
	}
	gc_assert(label, run_fn, &r, n, in);
	for (int i = 0; i < n; i++) {
		tensor_free(in[i]->grad);
		in[i]->grad = NULL;
	}
}

void check_all(const char *name, gc_fn f, void *ctx, int n, const struct spec *sp)
{
	for (int l = 0; l < NLAYOUTS; l++)
		check_layout(name, f, ctx, n, sp, (enum layout)l);
}

/* ---- seeded random shapes --------------------------------------------------- */

static uint64_t rng_state;

void rng_reset(uint64_t seed)
{
	rng_state = seed;
	next_seed = seed * 1000 + 1;
}

uint64_t rng_next(void) /* splitmix64 */
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

int rng_int(int lo, int hi) /* in [lo, hi] */
{
	return lo + (int)(rng_next() % (uint64_t)(hi - lo + 1));
}

void rng_shape(int ndim, int64_t *shape, int64_t max_numel)
{
	int64_t numel = 1;
	for (int d = 0; d < ndim; d++) {
		shape[d] = rng_int(1, 4);
		numel *= shape[d];
	}
	for (int d = 0; numel > max_numel; d = (d + 1) % ndim)
		if (shape[d] > 1) {
			numel = numel / shape[d] * (shape[d] - 1);
			shape[d]--;
		}
}

struct spec spec_of(int ndim, const int64_t *shape, double lo, double hi)
{
	struct spec s = { .ndim = ndim, .lo = lo, .hi = hi };
	for (int d = 0; d < ndim; d++)
		s.shape[d] = shape[d];
	return s;
}
