/* test_ops: gradients of indexing, joining, norms, where/masked_fill, dropout and cast:
 * finite-difference checks on contiguous, strided, sliced, transposed and
 * broadcast inputs of random (seeded) shapes, plus forward values, no-grad
 * and error propagation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "testutil.h"
#include "test_ops.h"

/* ---- helpers ------------------------------------------------------------------ */

/* A tiny LCG for shapes, dims and indices (seeded per test). */
static uint64_t rng;
static void rng_seed(uint64_t s)
{
	rng = s * 0x9E3779B97F4A7C15ull + 1;
}
static int64_t rnd(int64_t lo, int64_t hi) /* uniform in [lo, hi] */
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return lo + (int64_t)((rng >> 33) % (uint64_t)(hi - lo + 1));
}

/* How a test input reaches the op. The leaf is what the checker perturbs. */
enum kind { K_CONTIG, K_STRIDED, K_SLICED, K_TRANSPOSED, K_BROADCAST, NKINDS };
static const char *const kind_names[] = { "contiguous", "strided", "sliced", "transposed",
					  "broadcast" };

struct arg {
	struct tensor *leaf;
	enum kind kind;
	int ndim;
	int64_t shape[TENSOR_MAX_DIMS]; /* the shape the op sees */
};

/* A leaf for an op input of the given shape: stored reversed (strided), a
 * step-2 slice of a larger tensor at an offset (sliced), transposed (dims 0
 * and last swapped; the op sees ag_transpose of it), or with dim 0 of size 1
 * (the op sees ag_expand of it; 1-d: a 0-d leaf). */
static struct arg make_arg(enum kind kind, int ndim, const int64_t *shape, uint64_t seed, double lo,
			   double hi)
{
	struct arg a = { .kind = kind, .ndim = ndim };
	memcpy(a.shape, shape, sizeof(int64_t) * (size_t)ndim);
	if (kind == K_TRANSPOSED && ndim < 2)
		a.kind = kind = K_STRIDED;
	int64_t ls[TENSOR_MAX_DIMS];
	memcpy(ls, shape, sizeof(int64_t) * (size_t)ndim);
	switch (kind) {
	case K_CONTIG:
	case K_STRIDED: a.leaf = gc_input(ndim, shape, seed, lo, hi, kind == K_STRIDED); break;
	case K_SLICED: { /* every other element of the last dim, from row 1 */
		int last = ndim - 1;
		if (ndim > 1)
			ls[0] += 1;
		ls[last] = 2 * shape[last] + 1;
		struct tensor *big =
		    tensor_rand_uniform(TENSOR_F64, TENSOR_CPU, ndim, ls, seed, lo, hi);
		struct tensor *v = tensor_slice(big, last, 1, ls[last], 2);
		if (ndim > 1)
			v = tensor_narrow(v, 0, 1, shape[0]);
		ck_assert_msg(v != NULL, "%s", tensor_last_error());
		ck_assert_int_eq(ag_requires_grad(v, true), TENSOR_OK);
		a.leaf = v;
		break;
	}
	case K_TRANSPOSED:
		ls[0] = shape[ndim - 1];
		ls[ndim - 1] = shape[0];
		a.leaf = gc_input(ndim, ls, seed, lo, hi, false);
		break;
	case K_BROADCAST:
		ls[0] = 1;
		a.leaf = gc_input(ndim == 1 ? 0 : ndim, ls, seed, lo, hi, false);
		break;
	default: ck_abort();
	}
	return a;
}

/* The tensor the op sees for input k. */
static struct tensor *use(const struct arg *a, struct tensor *leaf)
{
	switch (a->kind) {
	case K_TRANSPOSED: return ag_transpose(leaf, 0, a->ndim - 1);
	case K_BROADCAST: return ag_expand(leaf, a->ndim, a->shape);
	default: return leaf;
	}
}

static void free_grads(int n, struct tensor *const *in)
{
	for (int k = 0; k < n; k++) {
		tensor_free(in[k]->grad);
		in[k]->grad = NULL;
	}
}

static struct tensor *index_tensor(enum tensor_dtype dt, int ndim, const int64_t *shape,
				   const int64_t *v)
{
	int64_t n = 1;
	for (int d = 0; d < ndim; d++)
		n *= shape[d];
	int32_t v32[64];
	ck_assert(n <= 64);
	for (int64_t i = 0; i < n; i++)
		v32[i] = (int32_t)v[i];
	struct tensor *t = tensor_from_data(dt, TENSOR_CPU, ndim, shape,
					    dt == TENSOR_I32 ? (const void *)v32 : (const void *)v);
	ck_assert_msg(t != NULL, "%s", tensor_last_error());
	return t;
}

static void random_shape(int ndim, int64_t lo, int64_t hi, int64_t *shape)
{
	for (int d = 0; d < ndim; d++)
		shape[d] = rnd(lo, hi);
}

/* Everything a checked function needs besides its leaves. */
struct ctx {
	struct arg args[12];
	int n; /* tensor inputs (concat, stack) */
	int dim;
	const struct tensor *idx; /* index, cond or mask */
	int nsizes, skip;	  /* split: sizes, an output left unused (-1: none) */
	int64_t sizes[8];
	bool use_w, use_b;
	double eps, p;
	uint64_t seed;
};

static void label(char *buf, size_t len, const char *op, int trial, const struct ctx *c)
{
	snprintf(buf, len, "%s trial %d (%s, dim %d)", op, trial, kind_names[c->args[0].kind],
		 c->dim);
}

/* ---- index_select, gather ------------------------------------------------------ */

static struct tensor *f_index_select(struct tensor *const *in, void *vc)
{
	struct ctx *c = vc;
	return ag_index_select(use(&c->args[0], in[0]), c->dim, c->idx);
}

static struct tensor *f_gather(struct tensor *const *in, void *vc)
{
	struct ctx *c = vc;
	return ag_gather(use(&c->args[0], in[0]), c->dim, c->idx);
}

START_TEST(test_index_select_grad)
{
	rng_seed(1);
	for (int trial = 0; trial < 30; trial++) {
		struct ctx c = { 0 };
		int nd = (int)rnd(1, 3);
		int64_t shape[3];
		random_shape(nd, 1, 4, shape);
		c.args[0] = make_arg((enum kind)(trial % NKINDS), nd, shape, 100 + trial, -1, 1);
		int d = (int)rnd(0, nd - 1);
		c.dim = rnd(0, 1) ? d : d - nd;
		int ind = (int)rnd(1, 2);
		int64_t ishape[2], v[64], ni = 1;
		random_shape(ind, 1, 4, ishape);
		for (int k = 0; k < ind; k++)
			ni *= ishape[k];
		for (int64_t i = 0; i < ni; i++)
			v[i] = rnd(0, shape[d] - 1);
		if (ni >= 2)
			v[ni - 1] = v[0]; /* a duplicate: its gradients must add */
		c.idx = index_tensor(trial % 2 ? TENSOR_I32 : TENSOR_I64, ind, ishape, v);
		char name[96];
		label(name, sizeof name, "index_select", trial, &c);
		gc_assert(name, f_index_select, &c, 1, &c.args[0].leaf);
		free_grads(1, &c.args[0].leaf);
	}
}
END_TEST

/* Duplicate indices accumulate: d src[r] = sum of dout rows that picked r. */
START_TEST(test_index_select_duplicates)
{
	for (int t = 0; t < 2; t++) {
		enum tensor_dtype dt = t ? TENSOR_I32 : TENSOR_I64;
		struct tensor *x = gc_input(2, (int64_t[]){ 4, 3 }, 7, -1, 1, t == 1);
		struct tensor *idx =
		    index_tensor(dt, 1, (int64_t[]){ 5 }, (int64_t[]){ 0, 2, 0, 3, 0 });
		struct tensor *y = ag_index_select(x, 0, idx);
		ck_assert(y != NULL && y->requires_grad);
		struct tensor *d = tu_rand(TENSOR_F64, 2, (int64_t[]){ 5, 3 }, 8);
		ck_assert_int_eq(ag_backward(y, d), TENSOR_OK);
		double *vd = tu_values(d), want[12] = { 0 };
		const int rows[5] = { 0, 2, 0, 3, 0 };
		for (int j = 0; j < 5; j++)
			for (int k = 0; k < 3; k++)
				want[rows[j] * 3 + k] += vd[j * 3 + k];
		tu_assert_close(x->grad, want, 12, 1e-14, 0);
		/* again: added straight into the leaf's gradient; then through an
		 * intermediate (2 x), whose gradient is made apart and handed over */
		ck_assert_int_eq(ag_backward(ag_index_select(x, 0, idx), d), TENSOR_OK);
		ck_assert_int_eq(ag_backward(ag_index_select(ag_mul_scalar(x, 2), 0, idx), d),
				 TENSOR_OK);
		for (int i = 0; i < 12; i++)
			want[i] *= 4;
		tu_assert_close(x->grad, want, 12, 1e-14, 0);
		free(vd);
		free_grads(1, &x);
	}
}
END_TEST

START_TEST(test_gather_grad)
{
	rng_seed(2);
	for (int trial = 0; trial < 30; trial++) {
		struct ctx c = { 0 };
		int nd = (int)rnd(1, 3);
		int64_t shape[3], ishape[3], v[64], ni = 1;
		random_shape(nd, 1, 4, shape);
		c.args[0] = make_arg((enum kind)(trial % NKINDS), nd, shape, 200 + trial, -1, 1);
		int d = (int)rnd(0, nd - 1);
		c.dim = rnd(0, 1) ? d : d - nd;
		for (int k = 0; k < nd; k++) {
			ishape[k] = k == d ? rnd(1, 5) : rnd(1, shape[k]);
			ni *= ishape[k];
		}
		for (int64_t i = 0; i < ni; i++)
			v[i] = rnd(0, shape[d] - 1);
		c.idx = index_tensor(trial % 2 ? TENSOR_I64 : TENSOR_I32, nd, ishape, v);
		char name[96];
		label(name, sizeof name, "gather", trial, &c);
		gc_assert(name, f_gather, &c, 1, &c.args[0].leaf);
		free_grads(1, &c.args[0].leaf);
	}
}
END_TEST

/* ---- concat, stack, split -------------------------------------------------------- */

static struct tensor *f_join(struct tensor *const *in, void *vc, bool stack)
{
	struct ctx *c = vc;
	struct tensor *ts[12];
	for (int k = 0; k < c->n; k++)
		ts[k] = use(&c->args[k], in[k]);
	return stack ? ag_stack(c->n, ts, c->dim) : ag_concat(c->n, ts, c->dim);
}

static struct tensor *f_concat(struct tensor *const *in, void *vc)
{
	return f_join(in, vc, false);
}

static struct tensor *f_stack(struct tensor *const *in, void *vc)
{
	return f_join(in, vc, true);
}

/* n inputs along dim (sizes along dim random for concat), the ones with
 * grad_mask bit k clear not requiring grad; returns the leaves in c. */
static void make_join(struct ctx *c, int n, bool stack, unsigned grad_mask, int trial)
{
	int nd = (int)rnd(1, 3);
	int64_t shape[3];
	random_shape(nd, 1, 3, shape);
	int d = (int)rnd(0, stack ? nd : nd - 1);
	c->n = n;
	c->dim = rnd(0, 1) ? d : d - (stack ? nd + 1 : nd);
	for (int k = 0; k < n; k++) {
		if (!stack)
			shape[d] = rnd(1, 3);
		c->args[k] = make_arg((enum kind)((trial + k) % NKINDS), nd, shape,
				      (uint64_t)(300 + 17 * trial + k), -1, 1);
		if (!(grad_mask >> k & 1))
			ck_assert_int_eq(ag_requires_grad(c->args[k].leaf, false), TENSOR_OK);
	}
}

static void check_join(bool stack, int n, unsigned grad_mask, int trial)
{
	struct ctx c = { 0 };
	make_join(&c, n, stack, grad_mask, trial);
	struct tensor *leaves[12];
	for (int k = 0; k < n; k++)
		leaves[k] = c.args[k].leaf;
	char name[96];
	snprintf(name, sizeof name, "%s of %d trial %d (mask %#x, dim %d)",
		 stack ? "stack" : "concat", n, trial, grad_mask, c.dim);
	gc_assert(name, stack ? f_stack : f_concat, &c, n, leaves);
	for (int k = 0; k < n; k++)
		ck_assert_msg((grad_mask >> k & 1) || leaves[k]->grad == NULL,
			      "%s: input %d got a gradient", name, k);
	free_grads(n, leaves);
}

START_TEST(test_concat_grad)
{
	rng_seed(3);
	for (int trial = 0; trial < 20; trial++)
		check_join(false, 3, trial % 3 == 0 ? 0x7 : trial % 3 == 1 ? 0x5 : 0x2, trial);
	/* more inputs than a node holds: the tail goes through proxy nodes */
	check_join(false, 6, 0x3f, 20);
	check_join(false, 9, 0x1ff, 21);
	check_join(false, 9, 0x100, 22); /* only the last one */
	check_join(false, 7, 0x3, 23);	 /* a tail without gradients */
	check_join(false, 11, 0x2a5, 24);
	check_join(false, 1, 0x1, 25);
}
END_TEST

START_TEST(test_stack_grad)
{
	rng_seed(4);
	for (int trial = 0; trial < 15; trial++)
		check_join(true, 2 + trial % 3, trial % 2 ? 0x7 : 0x5, trial);
	check_join(true, 6, 0x3f, 20);
	check_join(true, 8, 0xc1, 21);
}
END_TEST

/* Joins of more than AG_MAX_INPUTS record proxy nodes, only where needed. */
START_TEST(test_concat_many_tape)
{
	struct tensor *ts[9];
	for (int k = 0; k < 9; k++)
		ts[k] = gc_input(2, (int64_t[]){ 2, 1 + k % 2 }, 40 + k, -1, 1, false);
	struct tensor *y = ag_concat(9, ts, 1);
	ck_assert(y != NULL && y->requires_grad);
	ck_assert_int_eq(ag_tape_size(), 3); /* [0,1,2,P1], P1 = [3,4,5,P2], P2 = [6,7,8] */
	ag_tape_reset();
	for (int k = 3; k < 9; k++)
		ag_requires_grad(ts[k], false);
	y = ag_concat(9, ts, 1);
	ck_assert_int_eq(ag_tape_size(), 1); /* the tail needs no node */
	ag_tape_reset();
	/* the gradient of each part is its window of dout */
	for (int k = 0; k < 9; k++)
		ag_requires_grad(ts[k], true);
	y = ag_stack(9, ts, 0);
	ck_assert(y == NULL); /* shapes differ */
	tu_assert_error(true, TENSOR_ERR_SHAPE, "stack", "tensor 1");
	ck_assert_int_eq(ag_tape_size(), 0);
	y = ag_concat(9, ts, -1);
	struct tensor *d = tu_rand(TENSOR_F64, 2, y->shape, 9);
	ck_assert_int_eq(ag_backward(y, d), TENSOR_OK);
	double *vd = tu_values(d);
	int64_t col = 0, w = y->shape[1];
	for (int k = 0; k < 9; k++) {
		int64_t len = ts[k]->shape[1];
		double want[4];
		for (int r = 0; r < 2; r++)
			for (int j = 0; j < len; j++)
				want[r * len + j] = vd[r * w + col + j];
		tu_assert_close(ts[k]->grad, want, 2 * len, 0, 0);
		col += len;
	}
	free(vd);
	free_grads(9, ts);
}
END_TEST

/* The outputs of split transformed differently (one maybe unused) and joined. */
static struct tensor *f_split(struct tensor *const *in, void *vc)
{
	struct ctx *c = vc;
	struct tensor *outs[8], *ys[8];
	if (ag_split(use(&c->args[0], in[0]), c->dim, c->nsizes, c->sizes, outs) < 0)
		return NULL;
	int m = 0;
	for (int k = 0; k < c->nsizes; k++) {
		if (k == c->skip)
			continue;
		ys[m++] = k % 2 ? ag_unary(TENSOR_SQUARE, outs[k], 0)
				: ag_mul_scalar(outs[k], (double)(k + 1));
	}
	return ag_concat(m, ys, c->dim);
}

START_TEST(test_split_grad)
{
	rng_seed(5);
	for (int trial = 0; trial < 24; trial++) {
		struct ctx c = { 0 };
		int nd = (int)rnd(1, 3);
		int64_t shape[3];
		random_shape(nd, 1, 3, shape);
		int d = (int)rnd(0, nd - 1);
		c.dim = rnd(0, 1) ? d : d - nd;
		c.nsizes = (int)rnd(2, 5);
		shape[d] = 0;
		for (int k = 0; k < c.nsizes; k++)
			shape[d] += c.sizes[k] = rnd(k == 0 ? 1 : 0, 2);
		c.skip = trial % 3 == 0 ? (int)rnd(1, c.nsizes - 1) : -1;
		c.args[0] = make_arg((enum kind)(trial % NKINDS), nd, shape, 500 + trial, -1, 1);
		char name[96];
		label(name, sizeof name, "split", trial, &c);
		gc_assert(name, f_split, &c, 1, &c.args[0].leaf);
		free_grads(1, &c.args[0].leaf);
	}
}
END_TEST

START_TEST(test_split_views)
{
	struct tensor *x = gc_input(2, (int64_t[]){ 3, 5 }, 11, -1, 1, false);
	struct tensor *outs[3], *ref[3];
	const int64_t sizes[3] = { 2, 0, 3 };
	ck_assert_int_eq(ag_split(x, -1, 3, sizes, outs), TENSOR_OK);
	ck_assert_int_eq(tensor_split(ag_detach(x), -1, 3, sizes, ref), TENSOR_OK);
	for (int k = 0; k < 3; k++) {
		ck_assert(outs[k]->storage == x->storage); /* views, no copy */
		ck_assert(outs[k]->requires_grad && outs[k]->node != NULL);
		ck_assert(tensor_same_shape(outs[k], ref[k]));
		ck_assert_uint_eq(outs[k]->offset, ref[k]->offset);
		for (int dd = 0; dd < 2; dd++)
			ck_assert_int_eq(outs[k]->strides[dd], ref[k]->strides[dd]);
	}
	/* a split output composes with other view ops */
	struct tensor *loss = ag_sum(
	    ag_mul(ag_transpose(outs[2], 0, 1), ag_transpose(outs[2], 0, 1)), 0, NULL, false);
	ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
	double *vx = tu_values(x), want[15];
	for (int i = 0; i < 15; i++)
		want[i] = i % 5 >= 2 ? 2 * vx[i] : 0;
	tu_assert_close(x->grad, want, 15, 1e-14, 0);
	free(vx);
	free_grads(1, &x);
}
END_TEST

/* ---- layer norm, RMS norm ----------------------------------------------------------- */

static struct tensor *f_norm(struct tensor *const *in, void *vc, bool rms)
{
	struct ctx *c = vc;
	int k = 1;
	struct tensor *x = use(&c->args[0], in[0]);
	struct tensor *w = c->use_w ? use(&c->args[k], in[k]) : NULL;
	k += c->use_w;
	struct tensor *b = c->use_b ? use(&c->args[k], in[k]) : NULL;
	return rms ? ag_rms_norm(x, w, c->eps) : ag_layer_norm(x, w, b, c->eps);
}

static struct tensor *f_layer_norm(struct tensor *const *in, void *vc)
{
	return f_norm(in, vc, false);
}

static struct tensor *f_rms_norm(struct tensor *const *in, void *vc)
{
	return f_norm(in, vc, true);
}

static void check_norm(bool rms, int trial)
{
	struct ctx c = { 0 };
	enum kind kind = (enum kind)(trial % NKINDS);
	int nd = (int)rnd(kind == K_BROADCAST ? 2 : 1, 3);
	int64_t shape[3];
	random_shape(nd, 1, 3, shape);
	shape[nd - 1] = rnd(2, 6);
	c.eps = trial % 2 ? 1e-5 : 0.1;
	c.use_w = trial % 4 < 2;
	c.use_b = !rms && trial % 2 == 0;
	c.args[0] = make_arg(kind, nd, shape, 600 + trial, -2, 2);
	int n = 1;
	const int64_t *C = &shape[nd - 1];
	if (c.use_w)
		c.args[n++] =
		    make_arg(trial % 3 ? K_CONTIG : K_SLICED, 1, C, 700 + trial, 0.5, 1.5);
	if (c.use_b)
		c.args[n++] = make_arg(trial % 3 ? K_SLICED : K_CONTIG, 1, C, 800 + trial, -1, 1);
	if (trial % 5 == 4 && n > 1) /* only the parameters require grad */
		ck_assert_int_eq(ag_requires_grad(c.args[0].leaf, false), TENSOR_OK);
	struct tensor *leaves[3];
	for (int k = 0; k < n; k++)
		leaves[k] = c.args[k].leaf;
	char name[128];
	snprintf(name, sizeof name, "%s trial %d (x %s, w %d, b %d, eps %g)",
		 rms ? "rms_norm" : "layer_norm", trial, kind_names[kind], c.use_w, c.use_b, c.eps);
	gc_assert(name, rms ? f_rms_norm : f_layer_norm, &c, n, leaves);
	free_grads(n, leaves);
}

START_TEST(test_layer_norm_grad)
{
	rng_seed(6);
	for (int trial = 0; trial < 40; trial++)
		check_norm(false, trial);
}
END_TEST

START_TEST(test_rms_norm_grad)
{
	rng_seed(7);
	for (int trial = 0; trial < 40; trial++)
		check_norm(true, trial);
}
END_TEST

/* Parameter gradients against a direct formula: dw = sum_rows g * xhat, db = sum_rows g. */
START_TEST(test_layer_norm_param_grads)
{
	const int64_t s[] = { 3, 4 };
	struct tensor *x = tu_rand(TENSOR_F64, 2, s, 21);
	struct tensor *w = gc_input(1, &s[1], 22, 0.5, 1.5, false);
	struct tensor *b = gc_input(1, &s[1], 23, -1, 1, false);
	struct tensor *g = tu_rand(TENSOR_F64, 2, s, 24);
	struct tensor *y = ag_layer_norm(x, w, b, 1e-5);
	ck_assert_int_eq(ag_tape_size(), 1);
	ck_assert_int_eq(ag_backward(y, g), TENSOR_OK);
	double *vx = tu_values(x), *vg = tu_values(g), dw[4] = { 0 }, db[4] = { 0 };
	for (int r = 0; r < 3; r++) {
		double m = 0, v = 0;
		for (int j = 0; j < 4; j++)
			m += vx[r * 4 + j] / 4;
		for (int j = 0; j < 4; j++)
			v += (vx[r * 4 + j] - m) * (vx[r * 4 + j] - m) / 4;
		for (int j = 0; j < 4; j++) {
			dw[j] += vg[r * 4 + j] * (vx[r * 4 + j] - m) / sqrt(v + 1e-5);
			db[j] += vg[r * 4 + j];
		}
	}
	tu_assert_close(w->grad, dw, 4, 1e-12, 1e-10);
	tu_assert_close(b->grad, db, 4, 1e-12, 1e-10);
	ck_assert(x->grad == NULL);
	free(vx);
	free(vg);
	free_grads(1, &w);
	free_grads(1, &b);
}
END_TEST

/* ---- where, masked_fill, dropout, cast ------------------------------------------------ */

static struct tensor *f_where(struct tensor *const *in, void *vc)
{
	struct ctx *c = vc;
	return ag_where(c->idx, use(&c->args[0], in[0]), use(&c->args[1], in[1]));
}

static struct tensor *f_masked_fill(struct tensor *const *in, void *vc)
{
	struct ctx *c = vc;
	return ag_masked_fill(use(&c->args[0], in[0]), c->idx, 0.75);
}

/* A 0/1 tensor of the given shape (dtype dt) from the LCG. */
static struct tensor *random_mask(enum tensor_dtype dt, int ndim, const int64_t *shape)
{
	struct tensor *m = tensor_zeros(dt, TENSOR_CPU, ndim, shape);
	ck_assert(m != NULL);
	int64_t n = tensor_numel(m), idx[TENSOR_MAX_DIMS];
	for (int64_t i = 0; i < n; i++) {
		tu_unravel(i, ndim, shape, idx);
		int64_t v = rnd(0, 1);
		if (dt == TENSOR_F64)
			((double *)tensor_data(m))[i] = (double)v;
		else
			((int32_t *)tensor_data(m))[i] = (int32_t)v;
	}
	return m;
}

START_TEST(test_where_grad)
{
	rng_seed(8);
	for (int trial = 0; trial < 24; trial++) {
		struct ctx c = { 0 };
		int nd = (int)rnd(1, 3);
		int64_t shape[3], cs[3], bs[3];
		random_shape(nd, 1, 4, shape);
		for (int k = 0; k < nd; k++) { /* cond and b broadcast in some dims */
			cs[k] = rnd(0, 2) ? shape[k] : 1;
			bs[k] = rnd(0, 2) ? shape[k] : 1;
		}
		c.idx = random_mask(trial % 2 ? TENSOR_I32 : TENSOR_F64, nd, cs);
		c.args[0] = make_arg((enum kind)(trial % NKINDS), nd, shape, 900 + trial, -1, 1);
		c.args[1] = make_arg((enum kind)((trial + 2) % NKINDS), nd, bs, 950 + trial, -1, 1);
		if (trial % 4 == 3)
			ck_assert_int_eq(ag_requires_grad(c.args[1].leaf, false), TENSOR_OK);
		struct tensor *leaves[2] = { c.args[0].leaf, c.args[1].leaf };
		char name[96];
		label(name, sizeof name, "where", trial, &c);
		gc_assert(name, f_where, &c, 2, leaves);
		free_grads(2, leaves);
	}
}
END_TEST

START_TEST(test_masked_fill_grad)
{
	rng_seed(9);
	for (int trial = 0; trial < 20; trial++) {
		struct ctx c = { 0 };
		int nd = (int)rnd(1, 3);
		int64_t shape[3], ms[3];
		random_shape(nd, 1, 4, shape);
		int mnd = (int)rnd(1, nd); /* the mask broadcasts: fewer dims, size-1 dims */
		for (int k = 0; k < mnd; k++)
			ms[k] = rnd(0, 2) ? shape[nd - mnd + k] : 1;
		c.idx = random_mask(trial % 2 ? TENSOR_F64 : TENSOR_I32, mnd, ms);
		c.args[0] = make_arg((enum kind)(trial % NKINDS), nd, shape, 1000 + trial, -1, 1);
		char name[96];
		label(name, sizeof name, "masked_fill", trial, &c);
		gc_assert(name, f_masked_fill, &c, 1, &c.args[0].leaf);
		free_grads(1, &c.args[0].leaf);
	}
}
END_TEST

static struct tensor *f_dropout(struct tensor *const *in, void *vc)
{
	struct ctx *c = vc;
	return ag_dropout(use(&c->args[0], in[0]), c->p, c->seed, true);
}

START_TEST(test_dropout_grad)
{
	rng_seed(10);
	for (int trial = 0; trial < 20; trial++) {
		struct ctx c = { .p = trial % 2 ? 0.25 : 0.6, .seed = 77 + (uint64_t)trial };
		int nd = (int)rnd(1, 3);
		int64_t shape[3];
		random_shape(nd, 1, 4, shape);
		c.args[0] = make_arg((enum kind)(trial % NKINDS), nd, shape, 1100 + trial, -1, 1);
		char name[96];
		label(name, sizeof name, "dropout", trial, &c);
		gc_assert(name, f_dropout, &c, 1, &c.args[0].leaf);
		free_grads(1, &c.args[0].leaf);
	}
}
END_TEST

/* Dropout values: 0 or x / (1 - p), the same mask for the same seed, and a
 * gradient of mask / (1 - p); identity when p == 0 or not training. */
START_TEST(test_dropout_values)
{
	const int64_t s[] = { 8, 16 };
	const double p = 0.3;
	struct tensor *x = gc_input(2, s, 31, 0.5, 1.5, false);
	struct tensor *y1 = ag_dropout(x, p, 5, true), *y2 = ag_dropout(x, p, 5, true);
	struct tensor *y3 = ag_dropout(x, p, 6, true);
	ck_assert(y1 && y2 && y3 && y1->requires_grad);
	double *vx = tu_values(x), *v1 = tu_values(y1), *v2 = tu_values(y2), *v3 = tu_values(y3);
	int dropped = 0, differ = 0;
	for (int i = 0; i < 128; i++) {
		ck_assert(v1[i] == 0 || fabs(v1[i] - vx[i] / (1 - p)) < 1e-12);
		ck_assert(v1[i] == v2[i]);
		dropped += v1[i] == 0;
		differ += (v1[i] == 0) != (v3[i] == 0);
	}
	ck_assert_msg(dropped > 20 && dropped < 60, "dropped %d of 128 at p = %g", dropped, p);
	ck_assert(differ > 0);
	ck_assert_int_eq(ag_backward(ag_sum(y1, 0, NULL, false), NULL), TENSOR_OK);
	double *g = tu_values(x->grad);
	for (int i = 0; i < 128; i++)
		ck_assert(fabs(g[i] - (v1[i] == 0 ? 0 : 1 / (1 - p))) < 1e-12);
	ck_assert(ag_dropout(x, 0, 5, true) == x);
	ck_assert(ag_dropout(x, p, 5, false) == x);
	tu_assert_error(ag_dropout(x, 1, 5, true) == NULL, TENSOR_ERR_ARG, "dropout", "p");
	ck_assert_int_eq(ag_tape_size(), 0);
	free(vx);
	free(v1);
	free(v2);
	free(v3);
	free(g);
	free_grads(1, &x);
}
END_TEST

static struct tensor *f_cast(struct tensor *const *in, void *vc)
{
	struct ctx *c = vc;
	return ag_cast(use(&c->args[0], in[0]), TENSOR_F64);
}

START_TEST(test_cast_grad)
{
	rng_seed(11);
	for (int trial = 0; trial < NKINDS; trial++) {
		struct ctx c = { 0 };
		int64_t shape[2];
		random_shape(2, 1, 4, shape);
		c.args[0] = make_arg((enum kind)trial, 2, shape, 1200 + trial, -1, 1);
		char name[96];
		label(name, sizeof name, "cast", trial, &c);
		gc_assert(name, f_cast, &c, 1, &c.args[0].leaf);
		free_grads(1, &c.args[0].leaf);
	}
	/* f64 -> f32 -> f64: values round through f32, the gradient through it too */
	const int64_t s[] = { 3, 5 };
	struct tensor *x = gc_input(2, s, 41, -1, 1, true);
	struct tensor *y = ag_cast(ag_cast(x, TENSOR_F32), TENSOR_F64);
	ck_assert(y != NULL && y->dtype == TENSOR_F64 && y->requires_grad);
	ck_assert_int_eq(ag_tape_size(), 2);
	struct tensor *d = tu_rand(TENSOR_F64, 2, s, 42);
	ck_assert_int_eq(ag_backward(y, d), TENSOR_OK);
	double *vx = tu_values(x), *vy = tu_values(y), *vd = tu_values(d), *g = tu_values(x->grad);
	for (int i = 0; i < 15; i++) {
		ck_assert(vy[i] == (double)(float)vx[i]);
		ck_assert(g[i] == (double)(float)vd[i]);
	}
	free(vx);
	free(vy);
	free(vd);
	free(g);
	free_grads(1, &x);
	/* to an integer dtype: no node */
	struct tensor *i = ag_cast(x, TENSOR_I32);
	ck_assert(i != NULL && !i->requires_grad && i->node == NULL);
	ck_assert_int_eq(ag_tape_size(), 0);
}
END_TEST

/* ---- f32 ------------------------------------------------------------------------------ */

/* f on f32 copies of the f64 leaves gives the f64 values and gradients up to
 * f32 rounding (the backward formulas keep the input's dtype throughout). */
static void check_f32(const char *name, gc_fn f, struct ctx *c, int n)
{
	struct tensor *in64[12], *in32[12];
	for (int k = 0; k < n; k++) {
		in64[k] = c->args[k].leaf;
		ck_assert(c->args[k].kind == K_CONTIG);
		in32[k] = tensor_cast(ag_detach(in64[k]), TENSOR_F32);
		ck_assert_int_eq(ag_requires_grad(in32[k], in64[k]->requires_grad), TENSOR_OK);
	}
	struct tensor *y64 = f(in64, c); /* backward empties the tape: one at a time */
	ck_assert_msg(y64 != NULL, "%s: %s", name, tensor_last_error());
	struct tensor *d64 = tu_rand(TENSOR_F64, y64->ndim, y64->shape, 99);
	ck_assert_int_eq(ag_backward(y64, d64), TENSOR_OK);
	struct tensor *y32 = f(in32, c);
	ck_assert_msg(y32 && y32->dtype == TENSOR_F32, "%s: %s", name, tensor_last_error());
	ck_assert_int_eq(ag_backward(y32, tensor_cast(d64, TENSOR_F32)), TENSOR_OK);
	double *v64 = tu_values(y64);
	tu_assert_close(y32, v64, tensor_numel(y64), 1e-5, 1e-5);
	free(v64);
	for (int k = 0; k < n; k++) {
		if (!in64[k]->requires_grad)
			continue;
		ck_assert_msg(in32[k]->grad && in32[k]->grad->dtype == TENSOR_F32, "%s: input %d",
			      name, k);
		double *g64 = tu_values(in64[k]->grad);
		tu_assert_close(in32[k]->grad, g64, tensor_numel(in64[k]), 1e-4, 1e-4);
		free(g64);
	}
	free_grads(n, in64);
	free_grads(n, in32);
}

START_TEST(test_f32_matches_f64)
{
	const int64_t s[] = { 4, 6 }, C = 6;
	struct ctx c = { .eps = 1e-5, .use_w = true, .use_b = true };
	c.args[0] = make_arg(K_CONTIG, 2, s, 71, -2, 2);
	c.args[1] = make_arg(K_CONTIG, 1, &C, 72, 0.5, 1.5);
	c.args[2] = make_arg(K_CONTIG, 1, &C, 73, -1, 1);
	check_f32("layer_norm", f_layer_norm, &c, 3);
	c.use_b = false;
	check_f32("rms_norm", f_rms_norm, &c, 2);
	c.dim = 1;
	c.idx = index_tensor(TENSOR_I32, 1, (int64_t[]){ 4 }, (int64_t[]){ 5, 0, 5, 2 });
	check_f32("index_select", f_index_select, &c, 1);
	c.dim = 0;
	c.idx = index_tensor(TENSOR_I64, 2, (int64_t[]){ 2, 3 }, (int64_t[]){ 3, 3, 0, 1, 2, 3 });
	check_f32("gather", f_gather, &c, 1);
	c.n = 3;
	c.args[1] = make_arg(K_CONTIG, 2, s, 74, -1, 1);
	c.args[2] = make_arg(K_CONTIG, 2, s, 75, -1, 1);
	ag_requires_grad(c.args[1].leaf, false);
	check_f32("concat", f_concat, &c, 3);
	c.dim = -1;
	check_f32("stack", f_stack, &c, 3);
}
END_TEST

/* ---- values, no-grad, errors ----------------------------------------------------------- */

static void assert_same_values(const struct tensor *a, const struct tensor *b)
{
	ck_assert(a != NULL && b != NULL);
	ck_assert(tensor_same_shape(a, b) && a->dtype == b->dtype);
	int64_t n = tensor_numel(a);
	double *va = tu_values(a), *vb = tu_values(b);
	for (int64_t i = 0; i < n; i++)
		ck_assert_msg(va[i] == vb[i], "element %lld: %g vs %g", (long long)i, va[i], vb[i]);
	free(va);
	free(vb);
}

/* The forward of each op (with inputs requiring grad) equals the tensor_ op;
 * with grad off (or no input requiring grad) nothing is recorded. */
static void forward_ops(bool expect_nodes)
{
	const int64_t s[] = { 3, 4 };
	struct tensor *x = gc_input(2, s, 51, -1, 1, true);
	struct tensor *x2 = gc_input(2, s, 52, -1, 1, false);
	struct tensor *w = gc_input(1, &s[1], 53, 0.5, 1.5, false);
	struct tensor *b = gc_input(1, &s[1], 54, -1, 1, false);
	if (!expect_nodes && ag_grad_enabled()) /* no input requires grad */
		for (struct tensor **t = (struct tensor *[]){ x, x2, w, b, NULL }; *t; t++)
			ag_requires_grad(*t, false);
	/* the references: tensor_ ops on the values, off the graph */
	struct tensor *xd = ag_detach(x), *x2d = ag_detach(x2), *wd = ag_detach(w),
		      *bd = ag_detach(b);
	struct tensor *idx = index_tensor(TENSOR_I64, 1, (int64_t[]){ 3 }, (int64_t[]){ 2, 0, 2 });
	struct tensor *gidx =
	    index_tensor(TENSOR_I32, 2, (int64_t[]){ 2, 4 }, (int64_t[]){ 0, 1, 2, 3, 3, 2, 1, 0 });
	struct tensor *cond = random_mask(TENSOR_F64, 1, &s[1]);
	struct tensor *ys[16], *refs[16];
	int k = 0, nodes = 0;
	ys[k] = ag_index_select(x, 1, idx);
	refs[k++] = tensor_index_select(xd, 1, idx);
	ys[k] = ag_gather(x, 1, gidx);
	refs[k++] = tensor_gather(xd, 1, gidx);
	ys[k] = ag_concat(2, (struct tensor *[]){ x, x2 }, 0);
	refs[k++] = tensor_concat(2, (struct tensor *[]){ xd, x2d }, 0);
	ys[k] = ag_stack(2, (struct tensor *[]){ x, x2 }, 1);
	refs[k++] = tensor_stack(2, (struct tensor *[]){ xd, x2d }, 1);
	ys[k] = ag_layer_norm(x, w, b, 1e-5);
	refs[k++] = tensor_layer_norm(xd, wd, bd, 1e-5, NULL, NULL);
	ys[k] = ag_layer_norm(x, NULL, NULL, 1e-3);
	refs[k++] = tensor_layer_norm(xd, NULL, NULL, 1e-3, NULL, NULL);
	ys[k] = ag_rms_norm(x, w, 1e-5);
	refs[k++] = tensor_rms_norm(xd, wd, 1e-5, NULL);
	ys[k] = ag_rms_norm(x, NULL, 1e-5);
	refs[k++] = tensor_rms_norm(xd, NULL, 1e-5, NULL);
	ys[k] = ag_where(cond, x, x2);
	refs[k++] = tensor_where(cond, xd, x2d);
	ys[k] = ag_masked_fill(x, cond, -2);
	refs[k++] = tensor_masked_fill(xd, cond, -2);
	ys[k] = ag_cast(x, TENSOR_F32);
	refs[k++] = tensor_cast(xd, TENSOR_F32);
	nodes = ag_tape_size();
	struct tensor *outs[2], *routs[2];
	ck_assert_int_eq(ag_split(x, 0, 2, (int64_t[]){ 1, 2 }, outs), TENSOR_OK);
	ck_assert_int_eq(tensor_split(xd, 0, 2, (int64_t[]){ 1, 2 }, routs), TENSOR_OK);
	ys[k] = outs[0];
	refs[k++] = routs[0];
	ys[k] = outs[1];
	refs[k++] = routs[1];
	for (int j = 0; j < k; j++) {
		assert_same_values(ys[j], refs[j]);
		ck_assert_msg(
		    ys[j]->requires_grad == expect_nodes && (ys[j]->node != NULL) == expect_nodes,
		    "op %d: requires_grad %d, expected %d", j, ys[j]->requires_grad, expect_nodes);
	}
	ck_assert_int_eq(nodes, expect_nodes ? 11 : 0);
	ck_assert_int_eq(ag_tape_size(), expect_nodes ? 13 : 0);
	ag_tape_reset();
}

START_TEST(test_forward_values)
{
	forward_ops(true);
}
END_TEST

START_TEST(test_no_grad_records_nothing)
{
	ag_no_grad_begin();
	forward_ops(false);
	ag_no_grad_end();
	forward_ops(false); /* grad on, but no input requires grad */
}
END_TEST

/* A NULL input gives NULL and keeps the first error; bad arguments give an
 * error naming the op and record nothing. */
START_TEST(test_errors)
{
	const int64_t s[] = { 3, 4 };
	struct tensor *x = gc_input(2, s, 61, -1, 1, false);
	struct tensor *idx = index_tensor(TENSOR_I64, 1, (int64_t[]){ 2 }, (int64_t[]){ 0, 7 });
	ck_assert(ag_index_select(x, 0, idx) == NULL);
	char first[256];
	snprintf(first, sizeof first, "%s", tensor_last_error());
	ck_assert_msg(strstr(first, "index_select") && strstr(first, "7"), "%s", first);
	int st = tensor_last_status();
	ck_assert_int_eq(st, TENSOR_ERR_ARG);
	struct tensor *w = gc_input(1, &s[1], 62, -1, 1, false), *outs[2];
	ck_assert(ag_index_select(NULL, 0, idx) == NULL);
	ck_assert(ag_index_select(x, 0, NULL) == NULL);
	ck_assert(ag_gather(NULL, 0, idx) == NULL);
	ck_assert(ag_gather(x, 0, NULL) == NULL);
	ck_assert(ag_concat(2, (struct tensor *[]){ x, NULL }, 0) == NULL);
	ck_assert(ag_concat(6, (struct tensor *[]){ x, x, x, x, x, NULL }, 0) == NULL);
	ck_assert(ag_stack(2, (struct tensor *[]){ NULL, x }, 0) == NULL);
	ck_assert_int_eq(ag_split(NULL, 0, 2, (int64_t[]){ 1, 2 }, outs), st);
	ck_assert(outs[0] == NULL && outs[1] == NULL);
	ck_assert(ag_layer_norm(NULL, w, w, 1e-5) == NULL);
	ck_assert(ag_rms_norm(NULL, w, 1e-5) == NULL);
	ck_assert(ag_where(NULL, x, x) == NULL);
	ck_assert(ag_where(x, NULL, x) == NULL);
	ck_assert(ag_masked_fill(NULL, x, 0) == NULL);
	ck_assert(ag_dropout(NULL, 0.5, 1, true) == NULL);
	ck_assert(ag_cast(NULL, TENSOR_F32) == NULL);
	ck_assert_str_eq(tensor_last_error(), first);
	ck_assert_int_eq(tensor_last_status(), st);
	ck_assert_int_eq(ag_tape_size(), 0);
	tensor_clear_error();

	/* bad arguments: the op's own error, nothing recorded */
	struct tensor *y = gc_input(2, (int64_t[]){ 3, 5 }, 63, -1, 1, false);
	tu_assert_error(ag_concat(2, (struct tensor *[]){ x, y }, 0) == NULL, TENSOR_ERR_SHAPE,
			"concat", "[3,5]");
	tu_assert_error(ag_stack(2, (struct tensor *[]){ x, y }, 0) == NULL, TENSOR_ERR_SHAPE,
			"stack", "[3,5]");
	tu_assert_error(ag_concat(2, (struct tensor *[]){ x, x }, 2) == NULL, TENSOR_ERR_SHAPE,
			"concat", NULL);
	tu_assert_error(ag_split(x, 1, 2, (int64_t[]){ 1, 2 }, outs) < 0, TENSOR_ERR_SHAPE, "split",
			"[3,4]");
	tu_assert_error(ag_gather(x, 0, x) == NULL, TENSOR_ERR_DTYPE, "gather", "f64");
	tu_assert_error(ag_layer_norm(x, y, NULL, 1e-5) == NULL, TENSOR_ERR_SHAPE, "layer_norm",
			"[3,5]");
	tu_assert_error(ag_rms_norm(x, NULL, -1) == NULL, TENSOR_ERR_ARG, "rms_norm", "eps");
	ck_assert_int_eq(ag_tape_size(), 0);

	/* a saved index may not change before backward */
	struct tensor *ok = index_tensor(TENSOR_I32, 1, (int64_t[]){ 2 }, (int64_t[]){ 2, 1 });
	ck_assert(ag_index_select(x, 0, ok) != NULL);
	tu_assert_error(tensor_fill_(ok, 0) < 0, TENSOR_ERR_STATE, "tensor_fill_", NULL);
	ag_tape_reset();
	ck_assert_int_eq(tensor_fill_(ok, 0), TENSOR_OK);
}
END_TEST

void ops_grad_index_tcases(Suite *s)
{
	TCase *tc = tu_tcase("grad index");
	tcase_add_test(tc, test_index_select_grad);
	tcase_add_test(tc, test_index_select_duplicates);
	tcase_add_test(tc, test_gather_grad);
	suite_add_tcase(s, tc);
	tc = tu_tcase("grad join");
	tcase_add_test(tc, test_concat_grad);
	tcase_add_test(tc, test_stack_grad);
	tcase_add_test(tc, test_concat_many_tape);
	tcase_add_test(tc, test_split_grad);
	tcase_add_test(tc, test_split_views);
	suite_add_tcase(s, tc);
	tc = tu_tcase("grad norm");
	tcase_add_test(tc, test_layer_norm_grad);
	tcase_add_test(tc, test_rms_norm_grad);
	tcase_add_test(tc, test_layer_norm_param_grads);
	tcase_add_test(tc, test_f32_matches_f64);
	suite_add_tcase(s, tc);
	tc = tu_tcase("grad where, dropout, cast");
	tcase_add_test(tc, test_where_grad);
	tcase_add_test(tc, test_masked_fill_grad);
	tcase_add_test(tc, test_dropout_grad);
	tcase_add_test(tc, test_dropout_values);
	tcase_add_test(tc, test_cast_grad);
	suite_add_tcase(s, tc);
	tc = tu_tcase("grad api");
	tcase_add_test(tc, test_forward_values);
	tcase_add_test(tc, test_no_grad_records_nothing);
	tcase_add_test(tc, test_errors);
	suite_add_tcase(s, tc);
}
