/* The traps that used to pass silently, each now reported: a tensor_ op given a tensor that
 * requires grad while the tape records (the gradient would be cut), a scoped tensor read
 * after its scope ended (the debug mode's poison), and a training loop that leaves a heap
 * tensor behind each step (the debug mode's report). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd.h"
#include "testutil.h"

static const int64_t S23[] = { 2, 3 };

/* The operands of the table's ops: x [2,3], w [2] and x3 [1,2,3] f32 requiring grad, and
 * plain tensors beside them. */
struct operands {
	struct tensor *x, *w, *x3, *plain, *idx, *mask;
};

typedef struct tensor *(*op_fn)(const struct operands *o);

static struct tensor *op_relu(const struct operands *o)
{
	return tensor_relu(o->x);
}
static struct tensor *op_add(const struct operands *o)
{
	return tensor_add(o->plain, o->x);
}
static struct tensor *op_square(const struct operands *o)
{
	return tensor_unary(TENSOR_SQUARE, o->x, 0);
}
static struct tensor *op_transpose(const struct operands *o)
{
	return tensor_transpose(o->x, 0, 1);
}
static struct tensor *op_view(const struct operands *o)
{
	return tensor_view(o->x, 1, (int64_t[]){ 6 });
}
static struct tensor *op_expand(const struct operands *o)
{
	return tensor_expand(o->x, 3, (int64_t[]){ 4, 2, 3 });
}
static struct tensor *op_alias(const struct operands *o)
{
	return tensor_alias(o->x);
}
static struct tensor *op_sum(const struct operands *o)
{
	return tensor_sum(o->x, 0, NULL, false);
}
static struct tensor *op_mean(const struct operands *o)
{
	return tensor_mean(o->x, 1, (int[]){ 1 }, false);
}
static struct tensor *op_softmax(const struct operands *o)
{
	return tensor_softmax(o->x, -1);
}
static struct tensor *op_matmul(const struct operands *o)
{
	return tensor_matmul(o->x, tensor_transpose(o->plain, 0, 1));
}
static struct tensor *op_matmul_add(const struct operands *o)
{
	return tensor_matmul_add(o->plain, tensor_transpose(o->plain, 0, 1), o->w);
}
static struct tensor *op_layer_norm(const struct operands *o)
{
	return tensor_layer_norm(o->x, NULL, NULL, 1e-5, NULL, NULL);
}
static struct tensor *op_index_select(const struct operands *o)
{
	return tensor_index_select(o->x, 0, o->idx);
}
static struct tensor *op_concat(const struct operands *o)
{
	return tensor_concat(2, (struct tensor *[]){ o->plain, o->x }, 0);
}
static struct tensor *op_cast(const struct operands *o)
{
	return tensor_cast(o->x, TENSOR_F64);
}
static struct tensor *op_contiguous(const struct operands *o)
{
	return tensor_contiguous(o->x);
}
static struct tensor *op_clone(const struct operands *o)
{
	return tensor_clone(o->x);
}
static struct tensor *op_dropout(const struct operands *o)
{
	return tensor_dropout(o->x, 0.5, 1);
}
static struct tensor *op_where(const struct operands *o)
{
	return tensor_where(o->mask, o->plain, o->x);
}
static struct tensor *op_masked_fill(const struct operands *o)
{
	return tensor_masked_fill(o->x, o->mask, 0);
}
static struct tensor *op_conv1d(const struct operands *o)
{
	struct tensor *w = tensor_view(o->plain, 3, (int64_t[]){ 3, 2, 1 });
	return tensor_conv1d(o->x3, w, NULL, 1, 0);
}
static struct tensor *op_scope_keep(const struct operands *o)
{
	return tensor_scope_keep(o->x);
}

static const struct {
	const char *op, *use; /* the op the error names, and what it says to use */
	op_fn fn;
} ops[] = {
	{ "tensor_relu", "use ag_relu", op_relu },
	{ "tensor_add", "use ag_add", op_add },
	{ "tensor_square", "use ag_unary", op_square },
	{ "tensor_transpose", "use ag_transpose", op_transpose },
	{ "tensor_view", "use ag_view", op_view },
	{ "tensor_expand", "use ag_expand", op_expand },
	{ "tensor_alias", "ag_detach(t)", op_alias },
	{ "tensor_sum", "use ag_sum", op_sum },
	{ "tensor_mean", "use ag_mean", op_mean },
	{ "tensor_softmax", "use ag_softmax", op_softmax },
	{ "tensor_matmul", "use ag_matmul", op_matmul },
	{ "tensor_matmul_add", "use nn_linear_forward", op_matmul_add },
	{ "tensor_layer_norm", "use ag_layer_norm", op_layer_norm },
	{ "tensor_index_select", "use ag_index_select", op_index_select },
	{ "tensor_concat", "use ag_concat", op_concat },
	{ "tensor_cast", "use ag_cast", op_cast },
	{ "tensor_contiguous", "use ag_contiguous", op_contiguous },
	{ "tensor_clone", "ag_detach(t)", op_clone },
	{ "tensor_dropout", "use ag_dropout", op_dropout },
	{ "tensor_where", "use ag_where", op_where },
	{ "tensor_masked_fill", "use ag_masked_fill", op_masked_fill },
	{ "tensor_conv1d", "use ag_conv1d", op_conv1d },
	{ "tensor_scope_keep", "ag_detach(t)", op_scope_keep },
};
enum { NOPS = sizeof ops / sizeof ops[0] };

static struct operands operands(void)
{
	struct operands o = {
		.x = tu_rand(TENSOR_F32, 2, S23, 1),
		.w = tu_rand(TENSOR_F32, 1, (int64_t[]){ 2 }, 2),
		.x3 = tu_rand(TENSOR_F32, 3, (int64_t[]){ 1, 2, 3 }, 7),
		.plain = tu_rand(TENSOR_F32, 2, S23, 3),
		.idx = tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ 2 },
					(int64_t[]){ 1, 0 }),
		.mask = tensor_from_data(TENSOR_F32, TENSOR_CPU, 1, (int64_t[]){ 3 },
					 (float[]){ 1, 0, 1 }),
	};
	ck_assert_int_eq(ag_requires_grad(o.x, true), TENSOR_OK);
	ck_assert_int_eq(ag_requires_grad(o.w, true), TENSOR_OK);
	ck_assert_int_eq(ag_requires_grad(o.x3, true), TENSOR_OK);
	return o;
}

/* Every op of the table refuses x while the tape records, naming itself, the operand and
 * the op to use, and records nothing. */
START_TEST(test_tracked_operand_refused)
{
	struct operands o = operands();
	for (int i = 0; i < NOPS; i++) {
		tensor_clear_error();
		ck_assert_msg(ops[i].fn(&o) == NULL, "%s took a tensor that requires grad",
			      ops[i].op);
		const char *msg = tensor_last_error();
		ck_assert_msg(tensor_last_status() == TENSOR_ERR_STATE, "%s: %s", ops[i].op, msg);
		ck_assert_msg(strncmp(msg, ops[i].op, strlen(ops[i].op)) == 0 &&
				  msg[strlen(ops[i].op)] == ':',
			      "%s: %s", ops[i].op, msg);
		ck_assert_msg(strstr(msg, "requires a gradient and the tape is recording") &&
				  strstr(msg, ops[i].use) && strstr(msg, "ag_no_grad_begin/end"),
			      "%s: %s", ops[i].op, msg);
	}
	ck_assert_int_eq(ag_tape_size(), 0);
	tensor_clear_error();
}
END_TEST

/* The same ops take x where nothing can be cut: in a no-grad region, on ag_detach(x),
 * inside ag_op_begin/end (a hand-written op's forward), and on a leaf that does not require
 * grad. */
START_TEST(test_tracked_operand_allowed)
{
	struct operands o = operands();
	for (int mode = 0; mode < 4; mode++) {
		struct operands d = o;
		if (mode == 0)
			ag_no_grad_begin();
		if (mode == 1) {
			d.x = ag_detach(o.x);
			d.w = ag_detach(o.w);
			d.x3 = ag_detach(o.x3);
		}
		if (mode == 2)
			ag_op_begin();
		if (mode == 3) {
			ck_assert_int_eq(ag_requires_grad(o.x, false), TENSOR_OK);
			ck_assert_int_eq(ag_requires_grad(o.w, false), TENSOR_OK);
			ck_assert_int_eq(ag_requires_grad(o.x3, false), TENSOR_OK);
		}
		tensor_scope_begin(); /* scope_keep's copy goes to the fixture's scope */
		for (int i = 0; i < NOPS; i++)
			ck_assert_msg(ops[i].fn(&d) != NULL, "mode %d: %s: %s", mode, ops[i].op,
				      tensor_last_error());
		tensor_scope_end();
		if (mode == 0)
			ag_no_grad_end();
		if (mode == 2)
			ag_op_end();
	}
	ck_assert_int_eq(tensor_last_status(), TENSOR_OK);
}
END_TEST

/* What has no gradient to lose takes a tensor that requires grad while the tape records:
 * comparisons, argmax, casts to integers, masks and conditions, in-place ops, reads. */
START_TEST(test_no_gradient_ops_unchecked)
{
	struct operands o = operands();
	ck_assert_ptr_nonnull(tensor_gt(o.x, o.plain));
	ck_assert_ptr_nonnull(tensor_eq(o.plain, o.x));
	ck_assert_ptr_nonnull(tensor_argmax(o.x, 1, false));
	ck_assert_ptr_nonnull(tensor_cast(o.x, TENSOR_I64));
	ck_assert_ptr_nonnull(tensor_where(o.x, o.plain, o.plain));
	ck_assert_ptr_nonnull(tensor_masked_fill(o.plain, o.x, 1));
	float host[6];
	ck_assert_int_eq(tensor_to_host(o.x, host, sizeof host), TENSOR_OK);
	ck_assert(tensor_get(o.x, (int64_t[]){ 1, 2 }) == host[5]);
	ck_assert_ptr_nonnull(tensor_data(o.x));
	ck_assert_int_eq(tensor_add_(o.plain, o.x), TENSOR_OK);
	ck_assert_int_eq(tensor_fill_(o.x, 2), TENSOR_OK);
	ck_assert_int_eq(tensor_last_status(), TENSOR_OK);
}
END_TEST

/* The trap of issue 64: tensor_relu inside a two-layer forward used to cut the first
 * layer off: backward returned OK, the second layer trained and the first layer's gradient
 * stayed 0. Now the forward fails at the relu and backward returns its error, changing no
 * gradient; with ag_relu both layers' gradients arrive. */
static double grad_norm(const struct tensor *w)
{
	double *g = tu_values(w->grad), norm = 0;
	for (int64_t i = 0; i < tensor_numel(w); i++)
		norm += g[i] * g[i];
	free(g);
	return norm;
}

START_TEST(test_gradient_cut_reported)
{
	struct tensor *x = tu_rand(TENSOR_F32, 2, S23, 4);
	struct tensor *w1 = tu_rand(TENSOR_F32, 2, (int64_t[]){ 4, 3 }, 5);
	struct tensor *w2 = tu_rand(TENSOR_F32, 2, (int64_t[]){ 1, 4 }, 6);
	ck_assert_int_eq(ag_requires_grad(w1, true), TENSOR_OK);
	ck_assert_int_eq(ag_requires_grad(w2, true), TENSOR_OK);
	for (int fixed = 0; fixed < 2; fixed++) {
		tensor_clear_error();
		struct tensor *h = ag_matmul(x, ag_transpose(w1, 0, 1)); /* [2,4] */
		struct tensor *a = fixed ? ag_relu(h) : tensor_relu(h);
		struct tensor *out = ag_matmul(a, ag_transpose(w2, 0, 1)); /* [2,1] */
		int rc = ag_backward(ag_sum(ag_mul(out, out), 0, NULL, false), NULL);
		if (!fixed) {
			tu_assert_error(rc < 0, TENSOR_ERR_STATE, "tensor_relu: x [2,4]",
					"use ag_relu");
			ck_assert(w1->grad == NULL && w2->grad == NULL);
			ag_tape_reset();
		} else {
			ck_assert_int_eq(rc, TENSOR_OK);
			ck_assert(grad_norm(w1) > 0 && grad_norm(w2) > 0);
		}
	}
}
END_TEST

/* A hand-written op, as autograd.h describes: its forward's tensor_ calls between
 * ag_op_begin and ag_op_end, then ag_record. y = 3 x. */
static int triple_backward(struct ag_node *n, const struct tensor *g)
{
	return ag_accumulate(n->inputs[0], tensor_mul_scalar(g, 3));
}

START_TEST(test_custom_op)
{
	struct tensor *x = tu_rand(TENSOR_F64, 2, S23, 6);
	ck_assert_int_eq(ag_requires_grad(x, true), TENSOR_OK);
	ag_op_begin();
	struct tensor *y = tensor_mul_scalar(x, 3);
	ag_op_end();
	ck_assert_ptr_nonnull(ag_record("triple", y, triple_backward, 1, &x));
	ck_assert_int_eq(ag_backward(ag_sum(y, 0, NULL, false), NULL), TENSOR_OK);
	double want[6] = { 3, 3, 3, 3, 3, 3 };
	tu_assert_close(x->grad, want, 6, 0, 0);
	/* the regions nest with no-grad ones and end where they began */
	ag_op_begin();
	ag_no_grad_begin();
	ag_no_grad_end();
	ag_op_end();
	ck_assert_ptr_null(tensor_exp(x));
	tu_assert_error(true, TENSOR_ERR_STATE, "tensor_exp", "use ag_exp");
}
END_TEST

/* The debug mode: a scoped tensor read after its scope ended is an error (its header is
 * poisoned) and its data reads NaN, also while the next scope runs: the ended scope's
 * blocks are not reused before the next outermost scope ends. */
START_TEST(test_debug_stale_tensor)
{
	tensor_set_debug(true);
	ck_assert(tensor_debug());
	tensor_scope_begin();
	struct tensor *t = tensor_full(TENSOR_F32, TENSOR_CPU, 2, S23, 1.5);
	float *data = tensor_data(t);
	ck_assert(data && data[0] == 1.5f);
	tensor_scope_end();
	ck_assert(isnan(data[0]) && isnan(data[5]));
	for (int step = 0; step < 2; step++) {
		tensor_scope_begin();
		for (int k = 0; k < 8; k++) /* the next step's tensors land elsewhere */
			ck_assert_ptr_nonnull(tensor_full(TENSOR_F32, TENSOR_CPU, 2, S23, 7));
		tu_assert_error(tensor_get(t, (int64_t[]){ 0, 0 }) == 0, TENSOR_ERR_STATE,
				"tensor_get: t is a tensor of a scope that has ended", NULL);
		tu_assert_error(tensor_relu(t) == NULL, TENSOR_ERR_STATE, "tensor_relu: x",
				"scope that has ended");
		tu_assert_error(tensor_data(t) == NULL, TENSOR_ERR_STATE, "tensor_data", NULL);
		float host[6];
		tu_assert_error(tensor_to_host(t, host, sizeof host) < 0, TENSOR_ERR_STATE,
				"tensor_to_host", NULL);
		ck_assert(isnan(data[0]));
		tensor_scope_end();
	}
	tensor_set_debug(false);
	tensor_mem_trim();
}
END_TEST

/* Run steps of a training loop's shape (a batch made on the heap, then the step's scope);
 * leak: the batch is never freed. Returns what the library wrote on stderr. */
static char *run_steps(int steps, bool leak, int64_t *grown)
{
	char path[] = "/tmp/cformer-traps-XXXXXX";
	int fd = mkstemp(path);
	ck_assert(fd >= 0);
	fflush(stderr);
	int saved = dup(2);
	ck_assert(saved >= 0 && dup2(fd, 2) == 2);
	struct tensor *kept[16];
	int64_t before = tensor_heap_tensors();
	for (int s = 0; s < steps; s++) {
		kept[s] = tensor_zeros(TENSOR_I64, TENSOR_CPU, 2, (int64_t[]){ 4, 8 });
		tensor_scope_begin();
		ck_assert_ptr_nonnull(tensor_add_scalar(kept[s], 1));
		tensor_scope_end();
		if (!leak)
			tensor_free(kept[s]);
	}
	*grown = tensor_heap_tensors() - before;
	for (int s = 0; leak && s < steps; s++)
		tensor_free(kept[s]);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	char *text = calloc(1, 4096);
	ck_assert(text && pread(fd, text, 4095, 0) >= 0);
	close(fd);
	unlink(path);
	return text;
}

/* The debug mode reports a loop whose steps each leave a heap tensor alive (a batch made
 * before tensor_scope_begin and never freed), and says nothing of one that frees it;
 * tensor_heap_tensors counts them either way. */
START_TEST(test_debug_heap_growth)
{
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK); /* the loop's scopes are outermost */
	tensor_set_debug(true);
	int64_t grown;
	char *quiet = run_steps(8, false, &grown);
	ck_assert_int_eq(grown, 0);
	ck_assert_msg(quiet[0] == '\0', "%s", quiet);
	char *report = run_steps(8, true, &grown);
	ck_assert_int_eq(grown, 8);
	ck_assert_msg(strstr(report, "cformer debug:") &&
			  strstr(report, "made outside the step's scope") &&
			  strstr(report, "not freed"),
		      "%s", report);
	free(quiet);
	free(report);
	tensor_set_debug(false);
	tensor_scope_begin();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("traps");
	TCase *tc = tu_tcase("traps");
	tcase_add_test(tc, test_tracked_operand_refused);
	tcase_add_test(tc, test_tracked_operand_allowed);
	tcase_add_test(tc, test_no_gradient_ops_unchecked);
	tcase_add_test(tc, test_gradient_cut_reported);
	tcase_add_test(tc, test_custom_op);
	tcase_add_test(tc, test_debug_stale_tensor);
	tcase_add_test(tc, test_debug_heap_growth);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
