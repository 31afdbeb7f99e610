/* Autograd tape: recording, backward, accumulation, no-grad, memory, errors
 * and the gradient checker itself (a planted wrong backward is caught). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "ag_internal.h"
#include "testutil.h"

static const int64_t S34[] = { 3, 4 };

static struct tensor *f_mul_add(struct tensor *const *in, void *ctx)
{
	(void)ctx;
	return ag_add(ag_mul(in[0], in[1]), ag_exp(in[0]));
}

START_TEST(test_simple_backward)
{
	struct tensor *a = gc_input(2, S34, 1, -1, 1, false);
	struct tensor *b = gc_input(2, S34, 2, -1, 1, true);
	struct tensor *y = f_mul_add((struct tensor *[]){ a, b }, NULL);
	ck_assert(y->requires_grad && y->node != NULL);
	ck_assert_int_eq(ag_tape_size(), 3);
	struct tensor *loss = ag_sum(y, 0, NULL, false);
	ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
	ck_assert_int_eq(ag_tape_size(), 0);
	ck_assert(y->node == NULL && !y->requires_grad); /* detached after backward */
	/* d/da = b + exp(a), d/db = a */
	double *va = tu_values(a), *vb = tu_values(b), want_a[12];
	for (int i = 0; i < 12; i++)
		want_a[i] = vb[i] + exp(va[i]);
	tu_assert_close(a->grad, want_a, 12, 1e-12, 1e-12);
	tu_assert_close(b->grad, va, 12, 1e-12, 1e-12);
	ck_assert(!a->grad->in_arena); /* leaf gradients persist */
	free(va);
	free(vb);
	gc_assert("mul_add", f_mul_add, NULL, 2, (struct tensor *[]){ a, b });
}
END_TEST

START_TEST(test_accumulation_equals_summed_loss)
{
	struct tensor *a = gc_input(2, S34, 3, -1, 1, false);
	struct tensor *b = gc_input(2, S34, 4, -1, 1, false);
	for (int k = 0; k < 2; k++) { /* two backward calls: loss1 then loss2 */
		struct tensor *y = k == 0 ? ag_mul(a, b) : ag_unary(TENSOR_SQUARE, a, 0);
		ck_assert_int_eq(ag_backward(ag_sum(y, 0, NULL, false), NULL), TENSOR_OK);
	}
	double *g1a = tu_values(a->grad), *g1b = tu_values(b->grad);
	ck_assert_int_eq(ag_zero_grad(a), TENSOR_OK);
	ck_assert_int_eq(ag_zero_grad(b), TENSOR_OK);
	struct tensor *sum = ag_add(ag_sum(ag_mul(a, b), 0, NULL, false),
				    ag_sum(ag_unary(TENSOR_SQUARE, a, 0), 0, NULL, false));
	ck_assert_int_eq(ag_backward(sum, NULL), TENSOR_OK);
	tu_assert_close(a->grad, g1a, 12, 1e-12, 1e-12);
	tu_assert_close(b->grad, g1b, 12, 1e-12, 1e-12);
	free(g1a);
	free(g1b);
}
END_TEST

START_TEST(test_explicit_dout_and_leaf_output)
{
	struct tensor *a = gc_input(2, S34, 5, -1, 1, false);
	struct tensor *y = ag_mul_scalar(a, 3);
	struct tensor *d = tu_rand(TENSOR_F64, 2, S34, 6);
	ck_assert_int_eq(ag_backward(y, d), TENSOR_OK);
	double *vd = tu_values(d);
	for (int i = 0; i < 12; i++)
		vd[i] *= 3;
	tu_assert_close(a->grad, vd, 12, 1e-12, 0);
	free(vd);
	/* backward from a leaf accumulates dout directly */
	ck_assert_int_eq(ag_backward(a, d), TENSOR_OK);
	double *g = tu_values(a->grad), *v = tu_values(d);
	for (int i = 0; i < 12; i++)
		ck_assert(fabs(g[i] - 4 * v[i]) < 1e-12);
	free(g);
	free(v);
}
END_TEST

START_TEST(test_no_grad_and_detach)
{
	struct tensor *a = gc_input(2, S34, 7, -1, 1, false);
	ag_no_grad_begin();
	ck_assert(!ag_grad_enabled());
	struct tensor *y = ag_exp(a);
	ag_no_grad_end();
	ck_assert(ag_grad_enabled());
	ck_assert(!y->requires_grad && y->node == NULL);
	ck_assert_int_eq(ag_tape_size(), 0);
	struct tensor *d = ag_detach(ag_exp(a));
	ck_assert(!d->requires_grad && d->node == NULL);
	ck_assert_int_eq(ag_tape_size(), 1); /* the exp itself was recorded */
	struct tensor *z = ag_mul(d, d);     /* nothing requires grad: not recorded */
	ck_assert(!z->requires_grad);
	ck_assert_int_eq(ag_tape_size(), 1);
	tu_assert_error(ag_backward(z, NULL) < 0, TENSOR_ERR_ARG, "ag_backward",
			"does not require");
	ag_tape_reset();
	ck_assert_int_eq(ag_tape_size(), 0);
}
END_TEST

START_TEST(test_scope_end_drops_nodes)
{
	struct tensor *a = gc_input(2, S34, 8, -1, 1, false);
	struct tensor *outer = ag_exp(a);
	tensor_scope_begin();
	ag_mul(outer, outer);
	ag_tanh(outer);
	ck_assert_int_eq(ag_tape_size(), 3);
	tensor_scope_end();
	ck_assert_int_eq(ag_tape_size(), 1);
	ck_assert_int_eq(ag_backward(ag_sum(outer, 0, NULL, false), NULL), TENSOR_OK);
	double *va = tu_values(a), w[12];
	for (int i = 0; i < 12; i++)
		w[i] = exp(va[i]);
	free(va);
	tu_assert_close(a->grad, w, 12, 1e-12, 1e-12);
}
END_TEST

START_TEST(test_errors)
{
	struct tensor *a = gc_input(2, S34, 9, -1, 1, false);
	struct tensor *y = ag_exp(a);
	tu_assert_error(ag_backward(y, NULL) < 0, TENSOR_ERR_SHAPE, "ag_backward", "not a scalar");
	struct tensor *bad = tu_rand(TENSOR_F64, 2, (int64_t[]){ 4, 3 }, 1);
	tu_assert_error(ag_backward(y, bad) < 0, TENSOR_ERR_SHAPE, "dout [4,3]", "[3,4]");
	tu_assert_error(ag_requires_grad(y, true) < 0, TENSOR_ERR_ARG, "not a leaf", "unary");
	struct tensor *ints = tensor_zeros(TENSOR_I32, TENSOR_CPU, 2, S34);
	tu_assert_error(ag_requires_grad(ints, true) < 0, TENSOR_ERR_DTYPE, "ag_requires_grad",
			"i32");
	/* a saved tensor may not be modified before backward */
	tu_assert_error(tensor_fill_(a, 0) < 0, TENSOR_ERR_STATE, "tensor_fill_", "autograd tape");
	ag_tape_reset();
	ck_assert_int_eq(tensor_fill_(a, 0), TENSOR_OK);
	/* a failed forward is reported once, at backward, with the first message */
	struct tensor *loss = ag_sum(ag_add(a, bad), 0, NULL, false);
	ck_assert(loss == NULL);
	tu_assert_error(ag_backward(loss, NULL) < 0, TENSOR_ERR_SHAPE, "add", "[3,4]");
	ag_tape_reset();
	tu_assert_error(ag_requires_grad(NULL, true) < 0, TENSOR_ERR_ARG, "ag_requires_grad",
			"NULL");
	tu_assert_error(ag_zero_grad(NULL) < 0, TENSOR_ERR_ARG, "ag_zero_grad", "NULL");
}
END_TEST

static int no_backward(struct ag_node *n, const struct tensor *g)
{
	(void)n;
	(void)g;
	return TENSOR_OK;
}

/* An op whose node could not be recorded would pass no gradient: backward
 * refuses until the tape is reset or the scope of the failure ends. */
START_TEST(test_lost_node_refused)
{
	struct tensor *a = gc_input(2, S34, 11, -1, 1, false);
	struct tensor *in[AG_MAX_INPUTS + 1];
	for (int i = 0; i <= AG_MAX_INPUTS; i++)
		in[i] = a;
	for (int pass = 0; pass < 2; pass++) {
		tensor_scope_begin();
		ag_op_begin(); /* a hand-written op: its tensor_ call reads a */
		struct tensor *y = tensor_exp(a);
		ag_op_end();
		ck_assert_ptr_null(ag_record("exp", y, no_backward, AG_MAX_INPUTS + 1, in));
		tu_assert_error(true, TENSOR_ERR_ARG, "exp", "inputs");
		/* a second loss in an inner scope: its end keeps the outer one */
		tensor_scope_begin();
		ck_assert_ptr_null(ag_record("exp", y, no_backward, AG_MAX_INPUTS + 1, in));
		tensor_clear_error();
		tensor_scope_end();
		struct tensor *loss = ag_sum(a, 0, NULL, false);
		tu_assert_error(ag_backward(loss, NULL) < 0, TENSOR_ERR_STATE, "ag_backward",
				"could not be recorded");
		ck_assert_ptr_null(a->grad);
		if (pass == 0)
			ag_tape_reset();
		tensor_scope_end(); /* pass 1: the scope's end clears it */
	}
	ck_assert_int_eq(ag_backward(ag_sum(a, 0, NULL, false), NULL), TENSOR_OK);
	double ones[12] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	tu_assert_close(a->grad, ones, 12, 0, 0);
}
END_TEST

/* A leaf's gradient used by an op of the graph cannot be accumulated into
 * during that graph's backward: a clear error, the gradient unchanged; a
 * clone of it can be used instead. */
START_TEST(test_grad_used_in_graph)
{
	struct tensor *a = gc_input(2, S34, 10, -1, 1, false);
	ck_assert_int_eq(ag_backward(ag_sum(ag_mul(a, a), 0, NULL, false), NULL), TENSOR_OK);
	double *g1 = tu_values(a->grad); /* 2a */
	struct tensor *loss = ag_sum(ag_mul(a, a->grad), 0, NULL, false);
	tu_assert_error(ag_backward(loss, NULL) < 0, TENSOR_ERR_STATE, "gradient of leaf [3,4]",
			"use a clone");
	ck_assert_int_eq(ag_tape_size(), 0);
	tu_assert_close(a->grad, g1, 12, 0, 0);
	loss = ag_sum(ag_mul(a, tensor_clone(a->grad)), 0, NULL, false);
	ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
	double want[12];
	for (int i = 0; i < 12; i++)
		want[i] = 2 * g1[i];
	tu_assert_close(a->grad, want, 12, 1e-12, 0);
	free(g1);
}
END_TEST

/* Backward frees each node's temporaries and its output's gradient once the
 * node has run: along a chain of 16 tanh, backward's extra memory is a few
 * gradients, not one per node (the old behaviour needed about 4 per node). */
START_TEST(test_backward_frees_as_it_goes)
{
	const int64_t s[] = { 256, 256 };
	const size_t one = 256 * 256 * sizeof(float);
	struct tensor *x = tensor_rand_normal(TENSOR_F32, TENSOR_CPU, 2, s, 3, 0, 1);
	ag_requires_grad(x, true);
	struct tensor *h = x;
	for (int i = 0; i < 16; i++)
		h = ag_tanh(h);
	struct tensor *loss = ag_sum(h, 0, NULL, false);
	size_t before = tensor_mem_stats(TENSOR_CPU).live_bytes;
	tensor_mem_reset_peak(TENSOR_CPU);
	ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
	size_t extra = tensor_mem_stats(TENSOR_CPU).peak_bytes - before;
	ck_assert_msg(extra < 8 * one, "backward needed %zu bytes over the forward", extra);
	/* afterwards only the leaf gradient remains of backward */
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, before + one);
	ck_assert(x->grad != NULL && h->grad == NULL);
	tensor_free(x->grad);
	x->grad = NULL;
}
END_TEST

/* A leaf's gradient belongs to the leaf: tensor_free of a heap leaf frees it, and the end
 * of a scoped leaf's scope frees it (LeakSanitizer checks the same under ASan). */
START_TEST(test_leaf_owns_grad)
{
	size_t live0 = tensor_mem_stats(TENSOR_CPU).live_bytes;
	tensor_heap_begin();
	struct tensor *w = tensor_rand_normal(TENSOR_F32, TENSOR_CPU, 2, S34, 1, 0, 1);
	tensor_heap_end();
	ck_assert_int_eq(ag_requires_grad(w, true), TENSOR_OK);
	tensor_scope_begin();
	struct tensor *x = tensor_rand_normal(TENSOR_F32, TENSOR_CPU, 2, S34, 2, 0, 1);
	ck_assert_int_eq(ag_requires_grad(x, true), TENSOR_OK);
	struct tensor *loss = ag_sum(ag_mul(w, x), 0, NULL, false);
	size_t live1 = tensor_mem_stats(TENSOR_CPU).live_bytes;
	ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
	ck_assert(w->grad && x->grad && !w->grad->in_arena && !x->grad->in_arena);
	tu_assert_same(w->grad, x, 0);
	tu_assert_same(x->grad, w, 0);
	/* the two gradients are all backward left */
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live1 + 2 * tensor_nbytes(x));
	tensor_scope_begin(); /* an inner scope's end leaves an outer leaf's gradient */
	tensor_scope_end();
	ck_assert_ptr_nonnull(x->grad);
	tensor_scope_end(); /* x's scope: x and its gradient */
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live0 + 2 * tensor_nbytes(w));
	tensor_free(w); /* w and its gradient */
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live0);
}
END_TEST

/* ag_accumulate_take: a heap gradient handed over becomes an intermediate's
 * gradient as it is; a second one is added and freed, a broadcast one summed
 * first; a leaf's is added; live bytes come back to where they were. */
START_TEST(test_accumulate_take)
{
	struct tensor *x = gc_input(2, S34, 7, -1, 1, true);
	size_t live = tensor_mem_stats(TENSOR_CPU).live_bytes;
	tensor_scope_begin();
	struct tensor *y = ag_mul_scalar(x, 2); /* an intermediate */
	tensor_heap_begin();
	struct tensor *g1 = tensor_full(TENSOR_F64, TENSOR_CPU, 2, S34, 1.5);
	struct tensor *g2 = tensor_full(TENSOR_F64, TENSOR_CPU, 2, S34, 0.25);
	struct tensor *big =
	    tensor_full(TENSOR_F64, TENSOR_CPU, 3, (const int64_t[]){ 2, 3, 4 }, 1);
	tensor_heap_end();
	ck_assert_int_eq(ag_accumulate_take(y, g1), TENSOR_OK);
	ck_assert_ptr_eq(y->grad, g1); /* no copy */
	ck_assert_int_eq(ag_accumulate_take(y, g2), TENSOR_OK);
	ck_assert_ptr_ne(y->grad, g1);
	double want[12];
	for (int i = 0; i < 12; i++)
		want[i] = 1.75;
	tu_assert_close(y->grad, want, 12, 0, 0);
	ck_assert_int_eq(ag_accumulate_take(y, big), TENSOR_OK); /* summed over its extra dim */
	for (int i = 0; i < 12; i++)
		want[i] = 3.75;
	tu_assert_close(y->grad, want, 12, 0, 0);
	/* an arena gradient is only added; a leaf's gradient is its own tensor */
	ck_assert_int_eq(ag_accumulate_take(x, tensor_full(TENSOR_F64, TENSOR_CPU, 2, S34, 3)),
			 TENSOR_OK);
	for (int i = 0; i < 12; i++)
		want[i] = 3;
	tu_assert_close(x->grad, want, 12, 0, 0);
	ck_assert(!x->grad->in_arena);
	/* NULL gradient: the recorded error, nothing changes */
	ck_assert_int_lt(ag_accumulate_take(y, NULL), 0);
	tensor_clear_error();
	tensor_free(x->grad);
	x->grad = NULL;
	ag_tape_reset(); /* drops y's node and its gradient */
	tensor_scope_end();
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live);
}
END_TEST

/* ag_accumulate: an intermediate's first gradient shares a heap g's memory (no copy), which
 * outlives g's header; an arena g is copied; a second gradient is added into new memory. */
START_TEST(test_accumulate_shares)
{
	struct tensor *x = gc_input(2, S34, 7, -1, 1, true);
	size_t live = tensor_mem_stats(TENSOR_CPU).live_bytes;
	tensor_scope_begin();
	struct tensor *y = ag_mul_scalar(x, 2), *z = ag_mul_scalar(x, 3);
	tensor_heap_begin();
	struct tensor *g = tensor_full(TENSOR_F64, TENSOR_CPU, 2, S34, 1.5);
	tensor_heap_end();
	ck_assert_int_eq(ag_accumulate(y, g), TENSOR_OK);
	ck_assert_ptr_eq(y->grad->storage, g->storage);
	tensor_free(g);
	double want[12];
	for (int i = 0; i < 12; i++)
		want[i] = 1.5;
	tu_assert_close(y->grad, want, 12, 0, 0);
	struct tensor *ga = tensor_full(TENSOR_F64, TENSOR_CPU, 2, S34, 0.5); /* the arena's */
	ck_assert_int_eq(ag_accumulate(z, ga), TENSOR_OK);
	ck_assert_ptr_ne(z->grad->storage, ga->storage);
	struct tensor *shared = y->grad;
	ck_assert_int_eq(ag_accumulate(y, ga), TENSOR_OK);
	ck_assert_ptr_ne(y->grad, shared);
	for (int i = 0; i < 12; i++)
		want[i] = 2;
	tu_assert_close(y->grad, want, 12, 0, 0);
	ag_tape_reset();
	tensor_scope_end();
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live);
}
END_TEST

/* A probe y = x whose backward notes the storage of the gradient it receives (in
 * probe_seen[n->i[0]]) and passes the gradient on. */
static const void *probe_seen[4];

static int probe_backward(struct ag_node *n, const struct tensor *g)
{
	probe_seen[n->i[0]] = g->storage;
	return ag_accumulate(n->inputs[0], g);
}

static struct tensor *probe(struct tensor *x, int slot)
{
	ag_op_begin();
	struct tensor *y = tensor_alias(x);
	ag_op_end();
	struct ag_node *n = ag_record("probe", y, probe_backward, 1, &x);
	ck_assert(n != NULL);
	n->i[0] = slot;
	return y;
}

/* A product's gradient comes out in its operand's layout: split heads (a reshape and a
 * permute of a [B,T,H*d] intermediate) take dq, and dk through k's transpose, back to the
 * intermediate in the product's memory, no copy; the values are those of contiguous
 * operands. */
START_TEST(test_matmul_grad_layout)
{
	const int64_t B = 2, T = 5, S = 3, H = 3, d = 4;
	const int perm[4] = { 0, 2, 1, 3 };
	struct tensor *x = tu_rand(TENSOR_F64, 3, (int64_t[]){ B, T, H * d }, 1);
	struct tensor *y = tu_rand(TENSOR_F64, 3, (int64_t[]){ B, S, H * d }, 2);
	ag_requires_grad(x, true);
	ag_requires_grad(y, true);
	struct tensor *grads[2][2];
	for (int copy = 0; copy < 2; copy++) {
		struct tensor *hx = probe(ag_mul_scalar(x, 2), 0),
			      *hy = probe(ag_mul_scalar(y, 3), 2);
		struct tensor *q = ag_permute(ag_reshape(hx, 4, (int64_t[]){ B, T, H, d }), perm);
		struct tensor *k = ag_permute(ag_reshape(hy, 4, (int64_t[]){ B, S, H, d }), perm);
		q = probe(copy ? ag_contiguous(q) : q, 1);
		k = probe(copy ? ag_contiguous(k) : k, 3);
		struct tensor *sc = ag_matmul(q, ag_transpose(k, 2, 3));
		struct tensor *loss = ag_sum(ag_unary(TENSOR_SQUARE, sc, 0), 0, NULL, false);
		ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
		if (!copy) {
			ck_assert_ptr_eq(probe_seen[0], probe_seen[1]);
			ck_assert_ptr_eq(probe_seen[2], probe_seen[3]);
		}
		grads[copy][0] = x->grad;
		grads[copy][1] = y->grad;
		x->grad = y->grad = NULL;
	}
	for (int i = 0; i < 2; i++) {
		tu_assert_same(grads[0][i], grads[1][i], 1e-12);
		tensor_free(grads[0][i]);
		tensor_free(grads[1][i]);
	}
	tensor_free(x);
	tensor_free(y);
}
END_TEST

START_TEST(test_memory_flat_across_steps)
{
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK); /* leave the fixture scope */
	const int64_t s[] = { 32, 64 };
	struct tensor *w = tensor_rand_normal(TENSOR_F32, TENSOR_CPU, 2, s, 1, 0, 0.1);
	ag_requires_grad(w, true);
	size_t live0 = tensor_mem_stats(TENSOR_CPU).live_bytes - 32 * 64 * sizeof(float), live[4];
	for (int step = 0; step < 4; step++) {
		tensor_scope_begin();
		struct tensor *x = tensor_rand_normal(TENSOR_F32, TENSOR_CPU, 2,
						      (int64_t[]){ 8, 32 }, (uint64_t)step, 0, 1);
		struct tensor *h =
		    ag_tanh(ag_mul(ag_sum(x, 1, (int[]){ 0 }, true), ag_transpose(w, 0, 1)));
		ck_assert_int_eq(
		    ag_backward(ag_mean(ag_unary(TENSOR_SQUARE, h, 0), 0, NULL, false), NULL),
		    TENSOR_OK);
		tensor_scope_end();
		live[step] = tensor_mem_stats(TENSOR_CPU).live_bytes;
	}
	/* after each step: parameters + gradients only */
	ck_assert_uint_eq(live[0], live0 + 2 * 32 * 64 * sizeof(float));
	ck_assert_uint_eq(live[1], live[0]);
	ck_assert_uint_eq(live[3], live[0]);
	tensor_free(w);
	tensor_mem_trim();
	tensor_scope_begin();
}
END_TEST

/* ag_backward_release: ag_backward's gradients bit for bit; after it the
 * forward's chain of 4 MiB tensors is gone before the scope ends, while out
 * and what was made before the first op stay readable. */
START_TEST(test_backward_release)
{
	const int64_t s[] = { 512, 2048 };
	const size_t one = 512 * 2048 * sizeof(float);
	struct tensor *x = tensor_rand_normal(TENSOR_F32, TENSOR_CPU, 2, s, 5, 0, 1);
	ag_requires_grad(x, true);
	double *grads[2];
	size_t after[2], start = 0;
	for (int mode = 0; mode < 2; mode++) {
		tensor_scope_begin();
		start = tensor_mem_stats(TENSOR_CPU).live_bytes;
		struct tensor *before = tensor_full(TENSOR_F32, TENSOR_CPU, 1, (int64_t[]){ 4 }, 7);
		struct tensor *h = x;
		for (int i = 0; i < 8; i++)
			h = i % 2 ? ag_gelu(h) : ag_tanh(h);
		struct tensor *loss = ag_sum(h, 0, NULL, false);
		double value = tensor_get(loss, NULL);
		ck_assert_int_eq(mode ? ag_backward_release(loss, NULL) : ag_backward(loss, NULL),
				 TENSOR_OK);
		after[mode] = tensor_mem_stats(TENSOR_CPU).live_bytes;
		ck_assert(tensor_get(loss, NULL) == value);
		ck_assert(tensor_get(before, (int64_t[]){ 3 }) == 7);
		grads[mode] = tu_values(x->grad);
		tensor_free(x->grad);
		x->grad = NULL;
		tensor_scope_end();
	}
	ck_assert(memcmp(grads[0], grads[1], sizeof(double) * 512 * 2048) == 0);
	ck_assert_uint_ge(after[0], start + 9 * one); /* the chain and x's gradient */
	/* x's gradient, and the first op's output (made before that op's node) */
	ck_assert_uint_lt(after[1], start + 3 * one);
	free(grads[0]);
	free(grads[1]);
	tensor_free(x);
}
END_TEST

/* Nodes of an outer scope run too, and the outer scope's tensors stay; with
 * no scope open it is ag_backward; argument errors leave the tape. */
START_TEST(test_backward_release_scopes)
{
	struct tensor *x = gc_input(2, S34, 9, -1, 1, false);
	struct tensor *y = ag_mul_scalar(x, 3); /* in the fixture's scope */
	double *vy = tu_values(y), *vx = tu_values(x), want[12];
	tensor_scope_begin();
	struct tensor *loss = ag_sum(ag_tanh(y), 0, NULL, false);
	ck_assert_int_eq(ag_backward_release(loss, NULL), TENSOR_OK);
	tensor_scope_end();
	for (int i = 0; i < 12; i++)
		want[i] = 3 * (1 - tanh(vy[i]) * tanh(vy[i]));
	tu_assert_close(x->grad, want, 12, 1e-14, 0);
	for (int i = 0; i < 12; i++)
		ck_assert(tensor_get(y, (int64_t[]){ i / 4, i % 4 }) == 3 * vx[i]);
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK); /* no scope: heap tensors */
	x = tensor_from_data(TENSOR_F64, TENSOR_CPU, 2, S34, vx);
	ag_requires_grad(x, true);
	struct tensor *z = ag_sum(ag_mul(x, x), 0, NULL, false);
	ck_assert_int_eq(ag_backward_release(z, NULL), TENSOR_OK);
	for (int i = 0; i < 12; i++)
		want[i] = 2 * vx[i];
	tu_assert_close(x->grad, want, 12, 0, 0);
	tensor_free(z);
	struct tensor *c = tensor_zeros(TENSOR_F64, TENSOR_CPU, 0, NULL);
	struct tensor *w = ag_mul(x, x);
	tu_assert_error(ag_backward_release(c, NULL) < 0, TENSOR_ERR_ARG, "does not require grad",
			NULL);
	ck_assert_int_eq(ag_tape_size(), 1);
	ag_tape_reset();
	tensor_free(w);
	tensor_free(c);
	tensor_free(x);
	free(vx);
	free(vy);
	tensor_scope_begin();
}
END_TEST

/* A custom identity op whose backward takes its dout (ag_dout_take) and hands
 * it on while keeping a second reference: the gelu before it then cannot take
 * that gradient in turn and must not change it. */
static struct tensor *held;
static int hold_backward(struct ag_node *n, const struct tensor *g)
{
	struct tensor *own = ag_dout_take(n);
	ck_assert(own != NULL && own == g && n->out->grad == NULL);
	tensor_heap_begin();
	held = tensor_alias(own);
	tensor_heap_end();
	return ag_accumulate_take(n->inputs[0], own);
}

START_TEST(test_dout_take)
{
	struct tensor *x = gc_input(2, S34, 11, -2, 2, false);
	struct tensor *c = gc_input(2, S34, 12, -1, 1, false);
	double *vc = tu_values(c), *got[2];
	for (int hold = 0; hold < 2; hold++) {
		struct tensor *y = ag_gelu(x);
		if (hold) {
			ag_op_begin();
			struct tensor *alias = tensor_alias(y);
			ag_op_end();
			ck_assert(ag_record("hold", alias, hold_backward, 1, &y) != NULL);
			y = alias;
		}
		ck_assert_int_eq(ag_backward(ag_sum(ag_mul(y, c), 0, NULL, false), NULL),
				 TENSOR_OK);
		got[hold] = tu_values(x->grad);
		tensor_free(x->grad);
		x->grad = NULL;
	}
	ck_assert(memcmp(got[0], got[1], sizeof(double) * 12) == 0);
	tu_assert_close(held, vc, 12, 0, 0); /* the shared gradient is as it was */
	tensor_free(held);
	free(got[0]);
	free(got[1]);
	free(vc);
}
END_TEST

/* A planted bug: y = x^2 with a backward of 3x instead of 2x. */
static int wrong_square_backward(struct ag_node *n, const struct tensor *g)
{
	return ag_accumulate(n->inputs[0], tensor_mul(g, tensor_mul_scalar(n->saved[0], 3)));
}

static struct tensor *f_wrong_square(struct tensor *const *in, void *ctx)
{
	(void)ctx;
	ag_op_begin();
	struct tensor *y = tensor_unary(TENSOR_SQUARE, in[0], 0);
	ag_op_end();
	struct ag_node *n = ag_record("wrong_square", y, wrong_square_backward, 1, in);
	ag_save(n, in[0]);
	return y;
}

static struct tensor *f_softmax_sum(struct tensor *const *in, void *ctx)
{
	(void)ctx; /* a plain sum of a softmax has zero gradient: R catches bugs there */
	return ag_softmax(in[0], -1);
}

START_TEST(test_checker_catches_wrong_backward)
{
	struct tensor *x = gc_input(2, S34, 10, 0.5, 1.5, false);
	struct ag_gradcheck c = { 0 };
	ck_assert_int_eq(ag_gradcheck(f_wrong_square, NULL, 1, &x, &c), TENSOR_OK);
	ck_assert_msg(c.max_error > 100, "the planted wrong backward passed the check (%g)",
		      c.max_error);
	/* the bound it used, and the worst element: analytic 3 x r against numeric 2 x r */
	ck_assert(c.h == 1e-6 && c.atol == 1e-7 && c.rtol == 1e-5);
	ck_assert(c.input == 0 && c.element >= 0 && c.element < 12);
	ck_assert_msg(fabs(c.analytic - 1.5 * c.numeric) < 1e-6 * fabs(c.analytic), "%g vs %g",
		      c.analytic, c.numeric);
	/* the right backward passes, on the same inputs */
	struct ag_gradcheck ok = { 0 };
	ck_assert_int_eq(ag_gradcheck(f_softmax_sum, NULL, 1, &x, &ok), TENSOR_OK);
	ck_assert_msg(ok.max_error <= 1, "%g", ok.max_error);
}
END_TEST

/* ag_gradcheck's errors: what it cannot check, and f's failure. */
static struct tensor *f_fails(struct tensor *const *in, void *ctx)
{
	(void)ctx;
	return ag_matmul(in[0], in[0]); /* [3,4] x [3,4] */
}

START_TEST(test_checker_errors)
{
	struct tensor *x = gc_input(2, S34, 12, -1, 1, false);
	struct ag_gradcheck c = { 0 };
	tu_assert_error(ag_gradcheck(f_fails, NULL, 1, &x, &c) == TENSOR_ERR_SHAPE,
			TENSOR_ERR_SHAPE, "matmul", "[3,4] x [3,4]");
	ck_assert(isinf(c.max_error));
	tu_assert_error(ag_gradcheck(f_softmax_sum, NULL, 0, &x, &c) < 0, TENSOR_ERR_ARG,
			"ag_gradcheck", "no inputs");
	tu_assert_error(ag_gradcheck(NULL, NULL, 1, &x, &c) < 0, TENSOR_ERR_ARG, "ag_gradcheck",
			NULL);
	struct tensor *f32 = tu_rand(TENSOR_F32, 2, S34, 13);
	ck_assert_int_eq(ag_requires_grad(f32, true), TENSOR_OK);
	tu_assert_error(ag_gradcheck(f_softmax_sum, NULL, 1, &f32, &c) < 0, TENSOR_ERR_DTYPE,
			"input 0 [3,4] is f32", "f64");
	struct tensor *y = ag_exp(x);
	tu_assert_error(ag_gradcheck(f_softmax_sum, NULL, 1, &y, &c) < 0, TENSOR_ERR_ARG,
			"not a leaf", NULL);
	ag_tape_reset();
}
END_TEST

/* Composite smoke test: a 2-16-1 tanh MLP fits y = sin(2 x0) x1 on 64 fixed
 * points with 400 steps of plain gradient descent. */
static void sgd_step(struct tensor *p, double lr)
{
	ag_no_grad_begin();
	struct tensor *upd = tensor_sub(p, tensor_mul_scalar(p->grad, lr));
	ck_assert_int_eq(tensor_copy_(p, upd), TENSOR_OK);
	ck_assert_int_eq(ag_zero_grad(p), TENSOR_OK);
	ag_no_grad_end();
}

START_TEST(test_mlp_trains)
{
	const int64_t n = 64;
	struct tensor *x =
	    tensor_rand_uniform(TENSOR_F32, TENSOR_CPU, 2, (int64_t[]){ n, 2 }, 1, -1, 1);
	double *vx = tu_values(x), ty[64];
	for (int i = 0; i < n; i++)
		ty[i] = sin(2 * vx[2 * i]) * vx[2 * i + 1];
	free(vx);
	float fy[64];
	for (int i = 0; i < n; i++)
		fy[i] = (float)ty[i];
	struct tensor *y = tensor_from_data(TENSOR_F32, TENSOR_CPU, 2, (int64_t[]){ n, 1 }, fy);
	struct tensor *p[4] = {
		tensor_rand_normal(TENSOR_F32, TENSOR_CPU, 2, (int64_t[]){ 16, 2 }, 2, 0, 0.7),
		tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, (int64_t[]){ 16 }),
		tensor_rand_normal(TENSOR_F32, TENSOR_CPU, 2, (int64_t[]){ 1, 16 }, 3, 0, 0.25),
		tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, (int64_t[]){ 1 }),
	};
	for (int k = 0; k < 4; k++)
		ck_assert_int_eq(ag_requires_grad(p[k], true), TENSOR_OK);
	double first = 0, last = 0;
	for (int step = 0; step < 400; step++) {
		tensor_scope_begin();
		struct tensor *h = ag_tanh(ag_add(ag_matmul(x, ag_transpose(p[0], 0, 1)), p[1]));
		struct tensor *out = ag_add(ag_matmul(h, ag_transpose(p[2], 0, 1)), p[3]);
		struct tensor *loss =
		    ag_mean(ag_unary(TENSOR_SQUARE, ag_sub(out, y), 0), 0, NULL, false);
		ck_assert_msg(loss != NULL, "%s", tensor_last_error());
		double l = tensor_get(loss, NULL);
		if (step == 0)
			first = l;
		last = l;
		ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
		for (int k = 0; k < 4; k++)
			sgd_step(p[k], 0.2);
		tensor_scope_end();
	}
	ck_assert_msg(last < 0.01 && last < first / 10, "loss %g -> %g", first, last);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("autograd");
	TCase *tc = tu_tcase("tape");
	tcase_add_test(tc, test_simple_backward);
	tcase_add_test(tc, test_accumulation_equals_summed_loss);
	tcase_add_test(tc, test_explicit_dout_and_leaf_output);
	tcase_add_test(tc, test_no_grad_and_detach);
	tcase_add_test(tc, test_scope_end_drops_nodes);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_grad_used_in_graph);
	tcase_add_test(tc, test_lost_node_refused);
	tcase_add_test(tc, test_backward_frees_as_it_goes);
	tcase_add_test(tc, test_leaf_owns_grad);
	tcase_add_test(tc, test_accumulate_take);
	tcase_add_test(tc, test_accumulate_shares);
	tcase_add_test(tc, test_matmul_grad_layout);
	tcase_add_test(tc, test_memory_flat_across_steps);
	tcase_add_test(tc, test_backward_release);
	tcase_add_test(tc, test_backward_release_scopes);
	tcase_add_test(tc, test_dout_take);
	tcase_add_test(tc, test_checker_catches_wrong_backward);
	tcase_add_test(tc, test_checker_errors);
	tcase_add_test(tc, test_mlp_trains);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
