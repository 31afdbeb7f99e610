/* nn losses and metrics: cross-entropy (ignore index, label smoothing)
 * against a reference computed here, its gradient, accuracy and binary
 * accuracy, and every error path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "nn_optim_common.h"

#define IGN (-100)

/* ---- cross-entropy ------------------------------------------------------------ */

/* mean over kept rows of (1 - eps) (lse - x[t]) + eps (lse - mean_c x[c]). */
static double ce_ref(const double *x, int64_t n, int64_t c, const int64_t *tgt, int64_t ignore,
		     double eps)
{
	double total = 0;
	int64_t count = 0;
	for (int64_t i = 0; i < n; i++) {
		if (tgt[i] == ignore)
			continue;
		const double *r = x + i * c;
		double mx = r[0], s = 0, mean = 0;
		for (int64_t j = 1; j < c; j++)
			mx = r[j] > mx ? r[j] : mx;
		for (int64_t j = 0; j < c; j++) {
			s += exp(r[j] - mx);
			mean += r[j] / (double)c;
		}
		double lse = mx + log(s);
		total += (1 - eps) * (lse - r[tgt[i]]) + eps * (lse - mean);
		count++;
	}
	return count ? total / (double)count : 0;
}

/* d loss / d x = (softmax - ((1 - eps) onehot + eps / C)) / count, 0 on ignored rows. */
static void ce_grad_ref(const double *x, int64_t n, int64_t c, const int64_t *tgt, int64_t ignore,
			double eps, double *g)
{
	int64_t count = 0;
	for (int64_t i = 0; i < n; i++)
		count += tgt[i] != ignore;
	for (int64_t i = 0; i < n; i++) {
		const double *r = x + i * c;
		double mx = r[0], s = 0;
		for (int64_t j = 1; j < c; j++)
			mx = r[j] > mx ? r[j] : mx;
		for (int64_t j = 0; j < c; j++)
			s += exp(r[j] - mx);
		for (int64_t j = 0; j < c; j++)
			g[i * c + j] = tgt[i] == ignore
					   ? 0
					   : (exp(r[j] - mx) / s - (1 - eps) * (j == tgt[i]) -
					      eps / (double)c) /
						 (double)count;
	}
}

START_TEST(test_ce_hand_values)
{
	/* logits [[0, 0], [ln 3, 0]] targets {0, 1}: (ln 2 + ln 4) / 2 = 1.5 ln 2 */
	double x[] = { 0, 0, log(3), 0 };
	struct tensor *lg = tensor_from_data(TENSOR_F64, TENSOR_CPU, 2, (int64_t[]){ 2, 2 }, x);
	struct tensor *t = ids_tensor(TENSOR_I64, 2, (int64_t[]){ 0, 1 });
	ck_assert_double_eq_tol(scalar(nn_cross_entropy(lg, t, -1, 0)), 1.5 * log(2), 1e-14);
	/* smoothing 0.2: row 2 gives 0.8 ln 4 + 0.2 (ln 4 - ln(3) / 2) */
	double want =
	    (0.8 * log(2) + 0.2 * log(2) + 0.8 * log(4) + 0.2 * (log(4) - log(3) / 2)) / 2;
	ck_assert_double_eq_tol(scalar(nn_cross_entropy(lg, t, -1, 0.2)), want, 1e-14);
	/* ignoring the second row (ignore index 1, a valid class) leaves ln 2 */
	ck_assert_double_eq_tol(scalar(nn_cross_entropy(lg, t, 1, 0)), log(2), 1e-14);
}
END_TEST

START_TEST(test_ce_against_reference)
{
	const int64_t n = 6, c = 5;
	int64_t tgt[] = { 1, IGN, 4, 0, IGN, 3 };
	enum tensor_dtype dts[] = { TENSOR_F64, TENSOR_F32 };
	for (int d = 0; d < 2; d++) {
		struct tensor *lg = tu_rand(dts[d], 2, (int64_t[]){ n, c }, 10 + d);
		tensor_copy_(lg, tensor_mul_scalar(lg, 3));
		double *x = tu_values(lg);
		for (int k = 0; k < 4; k++) {
			double eps = k & 1 ? 0.1 : 0;
			enum tensor_dtype it = k & 2 ? TENSOR_I32 : TENSOR_I64;
			struct tensor *in = k & 2 ? tu_strided(lg) : lg;
			struct tensor *t = ids_tensor(it, n, tgt);
			struct tensor *loss = nn_cross_entropy(in, t, IGN, eps);
			ck_assert_msg(loss && loss->dtype == dts[d], "%s", tensor_last_error());
			double want = ce_ref(x, n, c, tgt, IGN, eps);
			ck_assert_double_eq_tol(scalar(loss), want, tu_tol(dts[d]) * 4);
			/* no ignore index: every row counts */
			int64_t all[] = { 1, 2, 4, 0, 0, 3 };
			struct tensor *t2 = ids_tensor(it, n, all);
			ck_assert_double_eq_tol(scalar(nn_cross_entropy(in, t2, -1, eps)),
						ce_ref(x, n, c, all, -1, eps), tu_tol(dts[d]) * 4);
		}
		free(x);
	}
}
END_TEST

START_TEST(test_ce_all_ignored_is_zero)
{
	struct tensor *lg = gc_input(2, (int64_t[]){ 3, 4 }, 1, -1, 1, false);
	struct tensor *t = ids_tensor(TENSOR_I64, 3, (int64_t[]){ IGN, IGN, IGN });
	struct tensor *loss = nn_cross_entropy(lg, t, IGN, 0.1);
	ck_assert_double_eq(scalar(loss), 0);
	ck_assert(loss->requires_grad); /* still a graph output: backward works */
	ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
	double *g = tu_values(lg->grad);
	for (int i = 0; i < 12; i++)
		ck_assert_double_eq(g[i], 0);
	free(g);
	/* no rows at all */
	struct tensor *empty = tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, (int64_t[]){ 0, 4 });
	struct tensor *none = ids_tensor(TENSOR_I32, 0, (int64_t[]){ 0 });
	ck_assert_double_eq(scalar(nn_cross_entropy(empty, none, -1, 0)), 0);
}
END_TEST

struct ce_ctx {
	const struct tensor *targets;
	int64_t ignore;
	double eps;
};

static struct tensor *f_ce(struct tensor *const *in, void *ctx)
{
	const struct ce_ctx *c = ctx;
	return nn_cross_entropy(in[0], c->targets, c->ignore, c->eps);
}

START_TEST(test_ce_gradient)
{
	const int64_t n = 5, c = 4;
	int64_t tgt[] = { 3, IGN, 0, 2, 1 };
	for (int k = 0; k < 4; k++) {
		struct tensor *lg = gc_input(2, (int64_t[]){ n, c }, 20 + k, -2, 2, k & 1);
		struct ce_ctx ctx = { ids_tensor(TENSOR_I64, n, tgt), k & 2 ? IGN : -1,
				      k & 2 ? 0.15 : 0 };
		if (!(k & 2)) /* no ignore index: make every target valid */
			ctx.targets = ids_tensor(TENSOR_I64, n, (int64_t[]){ 3, 1, 0, 2, 1 });
		gc_assert("cross_entropy", f_ce, &ctx, 1, &lg);
		tensor_free(lg->grad);
		lg->grad = NULL;
	}
	/* the analytic gradient, f32, with an ignored row holding inf and NaN:
	 * ignored rows never reach the softmax, so the loss and every gradient
	 * stay finite and the ignored row's gradient is exactly 0 */
	struct tensor *lg = tu_rand(TENSOR_F32, 2, (int64_t[]){ n, c }, 30);
	double *x = tu_values(lg);
	x[4] = INFINITY;
	x[5] = NAN;
	struct tensor *bad = tensor_from_data(TENSOR_F64, TENSOR_CPU, 2, (int64_t[]){ n, c }, x);
	tensor_copy_(lg, bad);
	ag_requires_grad(lg, true);
	struct tensor *t = ids_tensor(TENSOR_I32, n, tgt);
	struct tensor *loss = nn_cross_entropy(lg, t, IGN, 0.1);
	ck_assert(isfinite(scalar(loss)));
	ck_assert_double_eq_tol(scalar(loss), ce_ref(x, n, c, tgt, IGN, 0.1), 1e-5);
	ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
	double want[20];
	ce_grad_ref(x, n, c, tgt, IGN, 0.1, want);
	tu_assert_close(lg->grad, want, n * c, 1e-6, 1e-5);
	free(x);
}
END_TEST

START_TEST(test_ce_errors)
{
	struct tensor *lg = tu_rand(TENSOR_F32, 2, (int64_t[]){ 3, 4 }, 1);
	struct tensor *t = ids_tensor(TENSOR_I64, 3, (int64_t[]){ 0, 1, 2 });
	tu_assert_error(!nn_cross_entropy(NULL, t, -1, 0), TENSOR_ERR_ARG, "nn_cross_entropy",
			"logits is NULL");
	tu_assert_error(!nn_cross_entropy(lg, NULL, -1, 0), TENSOR_ERR_ARG, "nn_cross_entropy",
			"targets is NULL");
	/* NULL from a failed op upstream: its error is kept */
	struct tensor *failed = tensor_matmul(lg, lg);
	tu_assert_error(!nn_cross_entropy(failed, t, -1, 0), TENSOR_ERR_SHAPE, "matmul", NULL);
	tu_assert_error(!nn_cross_entropy(lg, tensor_cast(t, TENSOR_F32), -1, 0), TENSOR_ERR_DTYPE,
			"nn_cross_entropy", "f32");
	tu_assert_error(!nn_cross_entropy(tensor_cast(lg, TENSOR_I32), t, -1, 0), TENSOR_ERR_DTYPE,
			"nn_cross_entropy", NULL);
	tu_assert_error(!nn_cross_entropy(tensor_view(lg, 1, (int64_t[]){ 12 }), t, -1, 0),
			TENSOR_ERR_SHAPE, "nn_cross_entropy", "[12]");
	tu_assert_error(
	    !nn_cross_entropy(lg, ids_tensor(TENSOR_I64, 2, (int64_t[]){ 0, 1 }), -1, 0),
	    TENSOR_ERR_SHAPE, "[3,4]", "[2]");
	tu_assert_error(!nn_cross_entropy(lg, tensor_view(t, 2, (int64_t[]){ 3, 1 }), -1, 0),
			TENSOR_ERR_SHAPE, "nn_cross_entropy", "[3,1]");
	tu_assert_error(
	    !nn_cross_entropy(lg, ids_tensor(TENSOR_I32, 3, (int64_t[]){ 0, 4, 1 }), -1, 0),
	    TENSOR_ERR_ARG, "target 4 at row 1", "[0, 4)");
	tu_assert_error(
	    !nn_cross_entropy(lg, ids_tensor(TENSOR_I64, 3, (int64_t[]){ 0, 1, -3 }), IGN, 0),
	    TENSOR_ERR_ARG, "nn_cross_entropy", "target -3");
	tu_assert_error(!nn_cross_entropy(lg, t, -1, 1.0), TENSOR_ERR_ARG, "nn_cross_entropy",
			"label_smoothing 1");
	tu_assert_error(!nn_cross_entropy(lg, t, -1, -0.1), TENSOR_ERR_ARG, "label_smoothing",
			NULL);
	tu_assert_error(!nn_cross_entropy(lg, t, -1, NAN), TENSOR_ERR_ARG, "label_smoothing", NULL);
}
END_TEST

/* Outside scopes (here: heap mode) the metrics free every temporary, and the
 * loss, a forward, refuses to run (see test_nn_scope): no byte remains. */
START_TEST(test_loss_frees_temporaries)
{
	struct tensor *lg = tu_rand(TENSOR_F32, 2, (int64_t[]){ 6, 5 }, 7);
	struct tensor *t = ids_tensor(TENSOR_I32, 6, (int64_t[]){ 1, IGN, 4, 0, IGN, 3 });
	struct tensor *all = ids_tensor(TENSOR_I64, 6, (int64_t[]){ 1, 2, 4, 0, 0, 3 });
	struct tensor *bl = tu_rand(TENSOR_F32, 1, (int64_t[]){ 6 }, 8);
	struct tensor *bt = ids_tensor(TENSOR_I64, 6, (int64_t[]){ 1, 0, 0, 1, 1, 0 });
	tensor_heap_begin();
	size_t before = tensor_mem_stats(TENSOR_CPU).live_bytes;
	for (int k = 0; k < 4; k++) {
		struct tensor *loss = k & 1 ? nn_cross_entropy(lg, t, IGN, k & 2 ? 0.1 : 0)
					    : nn_cross_entropy(lg, all, -1, k & 2 ? 0.1 : 0);
		tu_assert_error(!loss, TENSOR_ERR_STATE, "nn_cross_entropy", "tensor_heap_begin()");
	}
	ck_assert(nn_accuracy(lg, t, IGN) >= 0);
	ck_assert(nn_binary_accuracy(bl, bt) >= 0);
	size_t after = tensor_mem_stats(TENSOR_CPU).live_bytes;
	tensor_heap_end();
	ck_assert_uint_eq(before, after);
}
END_TEST

/* ---- accuracy ----------------------------------------------------------------- */

START_TEST(test_accuracy)
{
	double x[] = { 0.1, 0.9, 0.0, /* argmax 1 */
		       2.0, -1., 1.0, /* 0 */
		       0.0, 0.0, 3.0, /* 2 */
		       5.0, 5.0, 1.0, /* tie: first, 0 */
		       0.3, 0.2, 0.1 /* 0 */ };
	struct tensor *lg = tensor_from_data(TENSOR_F64, TENSOR_CPU, 2, (int64_t[]){ 5, 3 }, x);
	struct tensor *t = ids_tensor(TENSOR_I32, 5, (int64_t[]){ 1, 2, 2, 0, IGN });
	ck_assert_double_eq_tol(nn_accuracy(lg, t, IGN), 3.0 / 4, 1e-15);
	ck_assert_double_eq_tol(nn_accuracy(tu_strided(tensor_cast(lg, TENSOR_F32)), t, IGN),
				3.0 / 4, 1e-15);
	/* without an ignore index the IGN target is out of range */
	tu_assert_error(nn_accuracy(lg, t, -1) == TENSOR_ERR_ARG, TENSOR_ERR_ARG, "nn_accuracy",
			"target -100 at row 4");
	t = ids_tensor(TENSOR_I64, 5, (int64_t[]){ 1, 0, 2, 0, 0 });
	ck_assert_double_eq(nn_accuracy(lg, t, -1), 1.0);
	ck_assert_double_eq_tol(nn_accuracy(lg, t, 0), 2.0 / 2,
				1e-15); /* rows of class 0 skipped */
	t = ids_tensor(TENSOR_I64, 5, (int64_t[]){ IGN, IGN, IGN, IGN, IGN });
	ck_assert(isnan(nn_accuracy(lg, t, IGN)));
	/* errors: the status comes back as a negative double */
	tu_assert_error(nn_accuracy(NULL, t, IGN) == TENSOR_ERR_ARG, TENSOR_ERR_ARG, "nn_accuracy",
			"NULL");
	tu_assert_error(nn_accuracy(lg, NULL, IGN) == TENSOR_ERR_ARG, TENSOR_ERR_ARG, "nn_accuracy",
			"NULL");
	tu_assert_error(nn_accuracy(lg, ids_tensor(TENSOR_I64, 4, (int64_t[]){ 0, 0, 0, 0 }), -1) ==
			    TENSOR_ERR_SHAPE,
			TENSOR_ERR_SHAPE, "[5,3]", "[4]");
	tu_assert_error(nn_accuracy(lg, tensor_cast(t, TENSOR_F64), -1) == TENSOR_ERR_DTYPE,
			TENSOR_ERR_DTYPE, "nn_accuracy", "f64");
	tu_assert_error(nn_accuracy(lg, ids_tensor(TENSOR_I64, 5, (int64_t[]){ 0, 0, 3, 0, 0 }),
				    -1) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "target 3 at row 2", "[0, 3)");
}
END_TEST

START_TEST(test_binary_accuracy)
{
	double x[] = { 1.5, -0.2, 0.0, 3.0, -4.0, 0.1 }; /* predicted 1 0 0 1 0 1 */
	struct tensor *lg = tensor_from_data(TENSOR_F64, TENSOR_CPU, 1, (int64_t[]){ 6 }, x);
	int64_t tv[] = { 1, 0, 1, 1, 1, 1 };
	struct tensor *t = ids_tensor(TENSOR_I64, 6, tv);
	ck_assert_double_eq_tol(nn_binary_accuracy(lg, t), 4.0 / 6, 1e-15);
	ck_assert_double_eq_tol(
	    nn_binary_accuracy(tensor_cast(lg, TENSOR_F32), tensor_cast(t, TENSOR_F32)), 4.0 / 6,
	    1e-15);
	struct tensor *strided =
	    tensor_slice(tu_rand(TENSOR_F32, 1, (int64_t[]){ 12 }, 3), 0, 0, 12, 2);
	double *sv = tu_values(strided);
	int64_t want_hits = 0;
	for (int i = 0; i < 6; i++)
		want_hits += (sv[i] > 0) == (tv[i] == 1);
	free(sv);
	ck_assert_double_eq_tol(nn_binary_accuracy(strided, ids_tensor(TENSOR_I32, 6, tv)),
				(double)want_hits / 6, 1e-15);
	struct tensor *e = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, (int64_t[]){ 0 });
	ck_assert(isnan(nn_binary_accuracy(e, ids_tensor(TENSOR_I64, 0, tv))));
	/* errors */
	tu_assert_error(
	    nn_binary_accuracy(lg, ids_tensor(TENSOR_I64, 6, (int64_t[]){ 1, 0, 2, 1, 1, 1 })) ==
		TENSOR_ERR_ARG,
	    TENSOR_ERR_ARG, "nn_binary_accuracy", "target 2 at row 2");
	tu_assert_error(nn_binary_accuracy(lg, ids_tensor(TENSOR_I64, 5, tv)) == TENSOR_ERR_SHAPE,
			TENSOR_ERR_SHAPE, "[6]", "[5]");
	tu_assert_error(nn_binary_accuracy(tensor_view(lg, 2, (int64_t[]){ 2, 3 }),
					   tensor_view(t, 2, (int64_t[]){ 2, 3 })) ==
			    TENSOR_ERR_SHAPE,
			TENSOR_ERR_SHAPE, "nn_binary_accuracy", "[2,3]");
	tu_assert_error(nn_binary_accuracy(t, t) == TENSOR_ERR_DTYPE, TENSOR_ERR_DTYPE,
			"nn_binary_accuracy", NULL);
	tu_assert_error(nn_binary_accuracy(NULL, t) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"nn_binary_accuracy", "NULL");
	tu_assert_error(nn_binary_accuracy(lg, NULL) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"nn_binary_accuracy", "NULL");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("nn_loss");
	TCase *tc = tu_tcase("loss");
	tcase_add_test(tc, test_ce_hand_values);
	tcase_add_test(tc, test_ce_against_reference);
	tcase_add_test(tc, test_ce_all_ignored_is_zero);
	tcase_add_test(tc, test_ce_gradient);
	tcase_add_test(tc, test_ce_errors);
	tcase_add_test(tc, test_loss_frees_temporaries);
	tcase_add_test(tc, test_accuracy);
	tcase_add_test(tc, test_binary_accuracy);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
