/* nn losses, metrics, optimizers and schedules: cross-entropy (ignore index,
 * label smoothing) and its gradient, accuracy, AdamW and SGD against the
 * published update rules computed here, packed vs unpacked parameters,
 * gradient clipping, learning-rate schedules, and every error path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "nn.h"
#include "testutil.h"

#define IGN (-100)

static struct tensor *ids_tensor(enum tensor_dtype dt, int64_t n, const int64_t *v)
{
	struct tensor *t = tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, &n, v);
	ck_assert(t != NULL);
	return dt == TENSOR_I64 ? t : tensor_cast(t, dt);
}

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

static double scalar(const struct tensor *t)
{
	ck_assert_msg(t != NULL, "%s", tensor_last_error());
	ck_assert_int_eq(tensor_numel(t), 1);
	double *v = tu_values(t);
	double r = v[0];
	free(v);
	return r;
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
	tensor_free(lg->grad);
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
	tensor_free(lg->grad);
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

/* Outside scopes (here: heap mode) the loss and metrics free every
 * temporary: only the returned loss remains, and it is freed here. */
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
		ck_assert_msg(loss != NULL && !loss->in_arena, "%s", tensor_last_error());
		tensor_free(loss);
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

/* ---- optimizer helpers ----------------------------------------------------------- */

/* The deterministic gradient of element i at step s (values of mixed sign and size). */
static double grad_at(int64_t i, int s, int which)
{
	return sin(1.3 * (double)i + 0.7 * s + 0.4 * which) * (1 + 0.5 * (double)(i % 3));
}

static double value_at(int64_t i, int which)
{
	return cos(0.9 * (double)i + which) * 0.8;
}

static void set_values(struct tensor *t, int which, bool grad)
{
	int64_t n = tensor_numel(t);
	double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
	for (int64_t i = 0; i < n; i++)
		v[i] = grad ? grad_at(i, which / 16, which % 16) : value_at(i, which);
	struct tensor *src = tensor_from_data(TENSOR_F64, TENSOR_CPU, t->ndim, t->shape, v);
	free(v);
	if (grad && !t->grad) {
		tensor_heap_begin();
		t->grad = tensor_zeros(t->dtype, TENSOR_CPU, t->ndim, t->shape);
		tensor_heap_end();
	}
	ck_assert_int_eq(tensor_copy_(grad ? t->grad : t, src), TENSOR_OK);
}

/* Parameter k of a list gets values value_at(., k) and, at step s, gradients grad_at(., s, k). */
static void set_grads(struct nn_params *ps, int s, int skip)
{
	for (int k = 0; k < ps->n; k++)
		if (k != skip)
			set_values(ps->items[k].value, s * 16 + k, true);
}

/* w [2,3] (decay), b [3] (no decay), f [4] (no gradient ever, unless packed). */
static void small_model(struct nn_params *ps, enum tensor_dtype dt)
{
	ck_assert_int_eq(nn_params_init(ps, dt, TENSOR_CPU, 5), TENSOR_OK);
	set_values(nn_param_new(ps, "w", 2, (int64_t[]){ 2, 3 }, false), 0, false);
	set_values(nn_param_new(ps, "b", 1, (int64_t[]){ 3 }, true), 1, false);
	set_values(nn_param_new(ps, "f", 1, (int64_t[]){ 4 }, false), 2, false);
}

/* Reference AdamW for parameter `which` of numel n over `steps` steps, from
 * p (initial values; NULL: value_at). */
static void adamw_ref(int which, int64_t n, int steps, double lr, double b1, double b2, double eps,
		      double wd, bool decay, const double *p0, double *p, double *m, double *v)
{
	for (int64_t i = 0; i < n; i++) {
		p[i] = p0 ? p0[i] : value_at(i, which);
		m[i] = v[i] = 0;
	}
	for (int s = 1; s <= steps; s++)
		for (int64_t i = 0; i < n; i++) {
			double g = grad_at(i, s - 1, which);
			m[i] = b1 * m[i] + (1 - b1) * g;
			v[i] = b2 * v[i] + (1 - b2) * g * g;
			double mhat = m[i] / (1 - pow(b1, s)), vhat = v[i] / (1 - pow(b2, s));
			p[i] -= lr * mhat / (sqrt(vhat) + eps) + (decay ? lr * wd * p[i] : 0);
		}
}

START_TEST(test_adamw_by_hand)
{
	const double lr = 0.01, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1;
	for (int decay_all = 0; decay_all < 2; decay_all++) {
		struct nn_params ps;
		small_model(&ps, TENSOR_F64);
		struct nn_adamw o;
		ck_assert_int_eq(nn_adamw_init(&o, &ps, lr, b1, b2, eps, wd), TENSOR_OK);
		ck_assert(!o.decay_all && o.step == 0 && o.flat_m == NULL);
		o.decay_all = decay_all;
		for (int s = 0; s < 3; s++) {
			set_grads(&ps, s, 2); /* "f" never gets a gradient: skipped */
			ck_assert_int_eq(nn_adamw_step(&o), TENSOR_OK);
		}
		ck_assert_int_eq(o.step, 3);
		double p[6], m[6], v[6];
		adamw_ref(0, 6, 3, lr, b1, b2, eps, wd, true, NULL, p, m, v);
		tu_assert_close(ps.items[0].value, p, 6, 1e-14, 1e-12);
		tu_assert_close(o.m[0], m, 6, 1e-15, 1e-12);
		tu_assert_close(o.v[0], v, 6, 1e-15, 1e-12);
		adamw_ref(1, 3, 3, lr, b1, b2, eps, wd, decay_all, NULL, p, m, v);
		tu_assert_close(ps.items[1].value, p, 3, 1e-14, 1e-12);
		tu_assert_close(o.m[1], m, 3, 1e-15, 1e-12);
		double f[4] = { 0 };
		tu_assert_close(o.m[2], f, 4, 0, 0);
		for (int i = 0; i < 4; i++)
			f[i] = value_at(i, 2);
		tu_assert_close(ps.items[2].value, f, 4, 0, 0);
		/* the decay really is applied: without it w differs */
		adamw_ref(0, 6, 3, lr, b1, b2, eps, wd, false, NULL, p, m, v);
		double *got = tu_values(ps.items[0].value);
		ck_assert(fabs(got[0] - p[0]) > 1e-5);
		free(got);
		nn_adamw_free(&o);
		ck_assert_ptr_null(o.m);
		nn_params_free(&ps);
	}
}
END_TEST

/* The fused kernel equals the update written in tensor ops bit for bit, f32
 * and f64, on a length that runs in parallel, with and without decay. */
START_TEST(test_adamw_kernel_equals_ops)
{
	tensor_set_num_threads(2);
	const double lr = 3e-3, b1 = 0.9, b2 = 0.98, eps = 1e-6;
	const int64_t n[1] = { 100003 };
	for (int d = 0; d < 2; d++)
		for (int decay = 0; decay < 2; decay++) {
			enum tensor_dtype dt = d ? TENSOR_F64 : TENSOR_F32;
			double wd = decay ? 0.05 : 0;
			struct tensor *p = tensor_rand_normal(dt, TENSOR_CPU, 1, n, 1, 0, 1);
			struct tensor *g = tensor_rand_normal(dt, TENSOR_CPU, 1, n, 2, 0, 1);
			struct tensor *m = tensor_rand_normal(dt, TENSOR_CPU, 1, n, 3, 0, 0.1);
			struct tensor *v = tensor_rand_uniform(dt, TENSOR_CPU, 1, n, 4, 0, 0.1);
			/* the composed formula of nn/optim.c at step 7 */
			double bc1 = 1 - pow(b1, 7), bc2 = 1 - pow(b2, 7);
			struct tensor *m2 =
			    tensor_add(m, tensor_mul_scalar(tensor_sub(g, m), 1 - b1));
			struct tensor *v2 = tensor_add(
			    tensor_mul_scalar(v, b2),
			    tensor_mul_scalar(tensor_unary(TENSOR_SQUARE, g, 0), 1 - b2));
			struct tensor *den = tensor_add_scalar(
			    tensor_mul_scalar(tensor_sqrt(v2), 1 / sqrt(bc2)), eps);
			struct tensor *p2 =
			    tensor_add(tensor_mul_scalar(p, 1 - lr * wd),
				       tensor_mul_scalar(tensor_div(m2, den), -lr / bc1));
			double *wp = tu_values(p2), *wm = tu_values(m2), *wv = tu_values(v2);
			ck_assert_int_eq(tensor_adamw_(p, m, v, g, lr, b1, b2, eps, wd, 7),
					 TENSOR_OK);
			tu_assert_close(p, wp, n[0], 0, 0);
			tu_assert_close(m, wm, n[0], 0, 0);
			tu_assert_close(v, wv, n[0], 0, 0);
			free(wp);
			free(wm);
			free(wv);
		}
}
END_TEST

/* Errors name the op and change nothing. */
START_TEST(test_adamw_kernel_errors)
{
	const int64_t s[2] = { 4, 6 };
	struct tensor *p = tensor_rand_normal(TENSOR_F32, TENSOR_CPU, 2, s, 1, 0, 1);
	struct tensor *m = tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, s);
	struct tensor *v = tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, s);
	struct tensor *g = tensor_rand_normal(TENSOR_F32, TENSOR_CPU, 2, s, 2, 0, 1);
	double *before = tu_values(p);
	struct tensor *g64 = tensor_cast(g, TENSOR_F64);
	struct tensor *gt = tensor_transpose(
	    tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, (const int64_t[]){ 6, 4 }), 0, 1);
	struct tensor *short_g = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, (const int64_t[]){ 24 });
	tu_assert_error(tensor_adamw_(p, m, v, g64, 1e-3, 0.9, 0.999, 1e-8, 0, 1) < 0,
			TENSOR_ERR_DTYPE, "adamw_", NULL);
	tu_assert_error(tensor_adamw_(p, m, v, short_g, 1e-3, 0.9, 0.999, 1e-8, 0, 1) < 0,
			TENSOR_ERR_SHAPE, "adamw_: g [24] differs from p [4,6]", NULL);
	tu_assert_error(tensor_adamw_(p, m, v, gt, 1e-3, 0.9, 0.999, 1e-8, 0, 1) < 0,
			TENSOR_ERR_STATE, "adamw_: g [4,6] is not contiguous", NULL);
	tu_assert_error(tensor_adamw_(p, m, v, g, 1e-3, 0.9, 0.999, 1e-8, 0, 0) < 0, TENSOR_ERR_ARG,
			"adamw_", "step 0");
	tu_assert_error(tensor_adamw_(p, m, v, g, 1e-3, 1.0, 0.999, 1e-8, 0, 1) < 0, TENSOR_ERR_ARG,
			"adamw_", "betas (1, 0.999)");
	tu_assert_error(tensor_adamw_(p, NULL, v, g, 1e-3, 0.9, 0.999, 1e-8, 0, 1) < 0,
			TENSOR_ERR_ARG, "adamw_: m is NULL", NULL);
	tu_assert_close(p, before, 24, 0, 0);
	double zero[24] = { 0 };
	tu_assert_close(m, zero, 24, 0, 0);
	tu_assert_close(v, zero, 24, 0, 0);
	free(before);
}
END_TEST

/* A frozen parameter (requires_grad off) keeps its value even with a gradient. */
START_TEST(test_adamw_skips_frozen)
{
	struct nn_params ps;
	small_model(&ps, TENSOR_F64);
	ag_requires_grad(ps.items[0].value, false);
	struct nn_adamw o;
	ck_assert_int_eq(nn_adamw_init(&o, &ps, 0.1, 0.9, 0.999, 1e-8, 0.5), TENSOR_OK);
	set_grads(&ps, 0, -1);
	ck_assert_int_eq(nn_adamw_step(&o), TENSOR_OK);
	double w[6];
	for (int i = 0; i < 6; i++)
		w[i] = value_at(i, 0);
	tu_assert_close(ps.items[0].value, w, 6, 0, 0);
	double p[4], m[4], v[4];
	adamw_ref(2, 4, 1, 0.1, 0.9, 0.999, 1e-8, 0.5, true, NULL, p, m, v);
	tu_assert_close(ps.items[2].value, p, 4, 1e-14, 1e-12);
	nn_adamw_free(&o);
	nn_params_free(&ps);
}
END_TEST

/* A model with sizes that cross chunk boundaries and alternate decay. */
static void big_model(struct nn_params *ps, enum tensor_dtype dt)
{
	ck_assert_int_eq(nn_params_init(ps, dt, TENSOR_CPU, 9), TENSOR_OK);
	const int64_t shapes[][2] = { { 300, 250 }, { 250, 1 },	  { 7, 5 }, { 0, 3 },
				      { 9, 1 },	    { 40, 3000 }, { 3, 1 } };
	const bool nd[] = { false, true, false, false, true, false, false };
	char name[16];
	for (int k = 0; k < 7; k++) {
		snprintf(name, sizeof name, "p%d", k);
		struct tensor *t = nn_param_new(ps, name, 2, shapes[k], nd[k]);
		ck_assert(t != NULL);
		nn_init_normal(t, 0, 1, nn_param_seed(ps, name));
	}
}

static void assert_same_values(const struct nn_params *a, const struct nn_params *b)
{
	for (int k = 0; k < a->n; k++) {
		int64_t n = tensor_numel(a->items[k].value);
		double *va = tu_values(a->items[k].value), *vb = tu_values(b->items[k].value);
		ck_assert_msg(memcmp(va, vb, sizeof *va * (size_t)n) == 0, "parameter %d differs",
			      k);
		free(va);
		free(vb);
	}
}

START_TEST(test_adamw_packed_equals_unpacked)
{
	struct nn_params ps[3];
	struct nn_adamw o[3];
	for (int j = 0; j < 3; j++) {
		big_model(&ps[j], TENSOR_F32);
		if (j == 1)
			ck_assert_int_eq(nn_params_pack(&ps[j]), TENSOR_OK);
		ck_assert_int_eq(nn_adamw_init(&o[j], &ps[j], 1e-3, 0.9, 0.95, 1e-6, 0.05),
				 TENSOR_OK);
	}
	struct tensor *init[7];
	for (int k = 0; k < 7; k++)
		init[k] = tensor_clone(ps[0].items[k].value);
	ck_assert(o[0].flat_m == NULL && o[1].flat_m != NULL && o[2].flat_m == NULL);
	ck_assert(o[1].m[0]->storage == o[1].flat_m->storage); /* state views the flat buffer */
	ck_assert(o[1].v[5]->storage == o[1].flat_v->storage);
	for (int s = 0; s < 3; s++) {
		for (int j = 0; j < 3; j++) {
			set_grads(&ps[j], s, -1);
			ck_assert_int_eq(nn_adamw_step(&o[j]), TENSOR_OK);
			/* the third list is packed after one step: its state moves along */
			if (j == 2 && s == 0)
				ck_assert_int_eq(nn_params_pack(&ps[2]), TENSOR_OK);
		}
	}
	ck_assert(o[2].flat_m != NULL && o[2].m[0]->storage == o[2].flat_m->storage);
	assert_same_values(&ps[0], &ps[1]);
	assert_same_values(&ps[0], &ps[2]);
	for (int k = 0; k < 7; k++) {
		int64_t n = tensor_numel(o[0].v[k]);
		double *a = tu_values(o[0].v[k]), *b = tu_values(o[1].v[k]);
		ck_assert(memcmp(a, b, sizeof *a * (size_t)n) == 0);
		free(a);
		free(b);
	}
	/* and all follow the rule, in float precision (p0 is 75000 elements,
	 * past a chunk edge; p5 a long decayed run after a no-decay one) */
	for (int k = 0; k < 7; k += 5) {
		int64_t n = tensor_numel(init[k]);
		double *p0 = tu_values(init[k]), *rp = malloc(sizeof(double) * (size_t)n * 3);
		adamw_ref(k, n, 3, 1e-3, 0.9, 0.95, 1e-6, 0.05, true, p0, rp, rp + n, rp + 2 * n);
		tu_assert_close(ps[1].items[k].value, rp, n, 1e-6, 1e-5);
		free(p0);
		free(rp);
	}
	/* steady state: a step leaves nothing behind */
	size_t live = tensor_mem_stats(TENSOR_CPU).live_bytes;
	for (int j = 0; j < 3; j++)
		ck_assert_int_eq(nn_adamw_step(&o[j]), TENSOR_OK);
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live);
	for (int j = 0; j < 3; j++) {
		nn_adamw_free(&o[j]);
		nn_params_free(&ps[j]);
	}
}
END_TEST

/* ---- SGD ----------------------------------------------------------------------------- */

/* Reference SGD (PyTorch): d = g + wd p (decayed parameters); b = mu b + d;
 * p -= lr b (p -= lr d without momentum). */
static void sgd_ref(int which, int64_t n, int steps, double lr, double mu, double wd, bool decay,
		    const double *p0, double *p, double *b)
{
	for (int64_t i = 0; i < n; i++) {
		p[i] = p0 ? p0[i] : value_at(i, which);
		b[i] = 0;
	}
	for (int s = 0; s < steps; s++)
		for (int64_t i = 0; i < n; i++) {
			double d = grad_at(i, s, which) + (decay ? wd * p[i] : 0);
			b[i] = mu > 0 ? mu * b[i] + d : d;
			p[i] -= lr * b[i];
		}
}

START_TEST(test_sgd_by_hand)
{
	const double lr = 0.05, wd = 0.01;
	for (int k = 0; k < 2; k++) {
		double mu = k ? 0 : 0.9;
		struct nn_params ps;
		small_model(&ps, TENSOR_F64);
		struct nn_sgd o;
		ck_assert_int_eq(nn_sgd_init(&o, &ps, lr, mu, wd), TENSOR_OK);
		ck_assert(mu > 0 ? o.buf != NULL : o.buf == NULL); /* no buffers without momentum */
		for (int s = 0; s < 3; s++) {
			set_grads(&ps, s, 2);
			ck_assert_int_eq(nn_sgd_step(&o), TENSOR_OK);
		}
		ck_assert_int_eq(o.step, 3);
		double p[6], b[6];
		sgd_ref(0, 6, 3, lr, mu, wd, true, NULL, p, b);
		tu_assert_close(ps.items[0].value, p, 6, 1e-14, 1e-12);
		if (mu > 0)
			tu_assert_close(o.buf[0], b, 6, 1e-14, 1e-12);
		sgd_ref(1, 3, 3, lr, mu, wd, false, NULL, p, b); /* "b" is no_decay */
		tu_assert_close(ps.items[1].value, p, 3, 1e-14, 1e-12);
		for (int i = 0; i < 4; i++)
			p[i] = value_at(i, 2);
		tu_assert_close(ps.items[2].value, p, 4, 0, 0); /* no gradient: unchanged */
		nn_sgd_free(&o);
		ck_assert_ptr_null(o.buf);
		nn_params_free(&ps);
	}
}
END_TEST

START_TEST(test_sgd_packed_equals_unpacked)
{
	for (int k = 0; k < 2; k++) {
		double mu = k ? 0 : 0.8;
		struct nn_params ps[2];
		struct nn_sgd o[2];
		for (int j = 0; j < 2; j++) {
			big_model(&ps[j], TENSOR_F32);
			if (j == 1)
				ck_assert_int_eq(nn_params_pack(&ps[j]), TENSOR_OK);
			ck_assert_int_eq(nn_sgd_init(&o[j], &ps[j], 0.1, mu, 0.02), TENSOR_OK);
		}
		struct tensor *p0 = tensor_clone(ps[0].items[1].value);
		for (int s = 0; s < 3; s++)
			for (int j = 0; j < 2; j++) {
				set_grads(&ps[j], s, -1);
				ck_assert_int_eq(nn_sgd_step(&o[j]), TENSOR_OK);
			}
		assert_same_values(&ps[0], &ps[1]);
		double *v0 = tu_values(p0), p[250], b[250];
		sgd_ref(1, 250, 3, 0.1, mu, 0.02, false, v0, p, b);
		tu_assert_close(ps[1].items[1].value, p, 250, 1e-6, 1e-5);
		free(v0);
		for (int j = 0; j < 2; j++) {
			nn_sgd_free(&o[j]);
			nn_params_free(&ps[j]);
		}
	}
}
END_TEST

/* A real training step: forward in a scope, backward, step; parameters are
 * writable again once backward has dropped the tape. */
START_TEST(test_step_after_backward)
{
	for (int packed = 0; packed < 2; packed++) {
		struct nn_params ps;
		ck_assert_int_eq(nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 3), TENSOR_OK);
		struct tensor *w = nn_param_new(&ps, "w", 2, (int64_t[]){ 4, 3 }, false);
		nn_init_normal(w, 0, 1, 77);
		if (packed)
			nn_params_pack(&ps);
		struct tensor *w0 = tensor_clone(w);
		struct nn_adamw o;
		ck_assert_int_eq(nn_adamw_init(&o, &ps, 0.01, 0.9, 0.999, 1e-8, 0), TENSOR_OK);
		struct tensor *x = tu_rand(TENSOR_F64, 2, (int64_t[]){ 5, 3 }, 4);
		struct tensor *t = ids_tensor(TENSOR_I64, 5, (int64_t[]){ 0, 3, 2, 1, 3 });
		set_grads(&ps, 0, -1); /* a gradient exists (zero), so w takes part */
		ck_assert_int_eq(nn_params_zero_grad(&ps), TENSOR_OK);
		tensor_scope_begin();
		struct tensor *loss =
		    nn_cross_entropy(ag_matmul(x, ag_transpose(w, 0, 1)), t, -1, 0);
		/* before backward the tape holds w: the step refuses and changes nothing */
		tu_assert_error(nn_adamw_step(&o) < 0, TENSOR_ERR_STATE, "nn_adamw_step", "saved");
		ck_assert_int_eq(o.step, 0);
		ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
		tensor_scope_end();
		ck_assert_int_eq(nn_adamw_step(&o), TENSOR_OK);
		/* first Adam step: p -= lr g / (|g| + eps) elementwise */
		double *g = tu_values(w->grad), *p = tu_values(w0), want[12];
		for (int i = 0; i < 12; i++)
			want[i] = p[i] - 0.01 * g[i] / (fabs(g[i]) + 1e-8);
		tu_assert_close(w, want, 12, 1e-12, 1e-10);
		free(g);
		free(p);
		nn_adamw_free(&o);
		nn_params_free(&ps);
	}
}
END_TEST

/* ---- gradient clipping ---------------------------------------------------------------- */

START_TEST(test_clip_grad_norm)
{
	for (int packed = 0; packed < 2; packed++) {
		struct nn_params ps;
		big_model(&ps, TENSOR_F64);
		if (packed)
			nn_params_pack(&ps);
		set_grads(&ps, 0, packed ? -1 : 2); /* unpacked: p2 has no gradient */
		double sq = 0;
		for (int k = 0; k < ps.n; k++) {
			if (!packed && k == 2)
				continue;
			int64_t n = tensor_numel(ps.items[k].value);
			for (int64_t i = 0; i < n; i++)
				sq += grad_at(i, 0, k) * grad_at(i, 0, k);
		}
		double norm = sqrt(sq);
		/* The library sums the ~120k squares in another order (per thread):
		 * the norms agree to about n eps = 1.3e-11, not to the last bit. */
		/* above the norm: nothing changes, the norm is returned */
		ck_assert_double_eq_tol(nn_clip_grad_norm(&ps, norm * 2), norm, norm * 1e-10);
		double *g1 = tu_values(ps.items[5].value->grad);
		for (int64_t i = 0; i < 120000; i += 997)
			ck_assert_double_eq(g1[i], grad_at(i, 0, 5));
		free(g1);
		/* below: every gradient scaled by max / (norm + 1e-6) */
		double scale = 1.5 / (norm + 1e-6);
		ck_assert_double_eq_tol(nn_clip_grad_norm(&ps, 1.5), norm, norm * 1e-10);
		for (int k = 0; k < ps.n; k++) {
			if (!packed && k == 2) {
				ck_assert_ptr_null(ps.items[k].value->grad);
				continue;
			}
			int64_t n = tensor_numel(ps.items[k].value);
			double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
			for (int64_t i = 0; i < n; i++)
				want[i] = grad_at(i, 0, k) * scale;
			tu_assert_close(ps.items[k].value->grad, want, n, 1e-15, 1e-10);
			free(want);
		}
		ck_assert_double_eq_tol(nn_clip_grad_norm(&ps, 1e9), 1.5 * norm / (norm + 1e-6),
					1e-9);
		/* a non-finite norm is returned and nothing is scaled */
		double *before = tu_values(ps.items[0].value->grad);
		struct tensor *g6 = ps.items[6].value->grad;
		tensor_fill_(g6, INFINITY);
		ck_assert(isinf(nn_clip_grad_norm(&ps, 1.0)));
		tu_assert_close(ps.items[0].value->grad, before, 75000, 0, 0);
		free(before);
		nn_params_free(&ps);
	}
	/* no gradients at all: norm 0 */
	struct nn_params ps;
	small_model(&ps, TENSOR_F32);
	ck_assert_double_eq(nn_clip_grad_norm(&ps, 1.0), 0);
	tu_assert_error(nn_clip_grad_norm(NULL, 1.0) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"nn_clip_grad_norm", "NULL");
	tu_assert_error(nn_clip_grad_norm(&ps, 0) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"nn_clip_grad_norm", "max_norm 0");
	tu_assert_error(nn_clip_grad_norm(&ps, -2) == TENSOR_ERR_ARG, TENSOR_ERR_ARG, "max_norm",
			NULL);
	tu_assert_error(nn_clip_grad_norm(&ps, NAN) == TENSOR_ERR_ARG, TENSOR_ERR_ARG, "max_norm",
			NULL);
	nn_params_free(&ps);
}
END_TEST

/* ---- optimizer errors ------------------------------------------------------------------ */

START_TEST(test_optimizer_errors)
{
	struct nn_params ps;
	small_model(&ps, TENSOR_F32);
	struct nn_adamw o;
	struct nn_sgd sg;
	tu_assert_error(nn_adamw_init(NULL, &ps, 1e-3, 0.9, 0.999, 1e-8, 0) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "nn_adamw_init", "NULL");
	tu_assert_error(nn_adamw_init(&o, NULL, 1e-3, 0.9, 0.999, 1e-8, 0) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "nn_adamw_init", "ps is NULL");
	tu_assert_error(nn_adamw_init(&o, &ps, -1e-3, 0.9, 0.999, 1e-8, 0) < 0, TENSOR_ERR_ARG,
			"nn_adamw_init", "lr -0.001");
	tu_assert_error(nn_adamw_init(&o, &ps, NAN, 0.9, 0.999, 1e-8, 0) < 0, TENSOR_ERR_ARG,
			"nn_adamw_init", "lr");
	tu_assert_error(nn_adamw_init(&o, &ps, 1e-3, 1.0, 0.999, 1e-8, 0) < 0, TENSOR_ERR_ARG,
			"nn_adamw_init", "betas (1, 0.999)");
	tu_assert_error(nn_adamw_init(&o, &ps, 1e-3, 0.9, -0.1, 1e-8, 0) < 0, TENSOR_ERR_ARG,
			"betas", NULL);
	tu_assert_error(nn_adamw_init(&o, &ps, 1e-3, 0.9, 0.999, 0, 0) < 0, TENSOR_ERR_ARG,
			"nn_adamw_init", "eps 0");
	tu_assert_error(nn_adamw_init(&o, &ps, 1e-3, 0.9, 0.999, -1e-8, 0) < 0, TENSOR_ERR_ARG,
			"eps", NULL);
	tu_assert_error(nn_adamw_init(&o, &ps, 1e-3, 0.9, 0.999, 1e-8, -0.1) < 0, TENSOR_ERR_ARG,
			"nn_adamw_init", "weight_decay");
	ck_assert_ptr_null(o.m); /* a failed init leaves a freeable, empty optimizer */
	nn_adamw_free(&o);
	tu_assert_error(nn_adamw_step(NULL) < 0, TENSOR_ERR_ARG, "nn_adamw_step", NULL);
	tu_assert_error(nn_adamw_step(&o) < 0, TENSOR_ERR_ARG, "nn_adamw_step", "not initialised");

	ck_assert_int_eq(nn_adamw_init(&o, &ps, 1e-3, 0.9, 0.999, 1e-8, 0.1), TENSOR_OK);
	set_grads(&ps, 0, -1);
	double *w0 = tu_values(ps.items[0].value);
	o.lr = -1; /* a schedule gone wrong */
	tu_assert_error(nn_adamw_step(&o) < 0, TENSOR_ERR_ARG, "nn_adamw_step", "lr -1");
	o.lr = 1e-3;
	/* a gradient of the wrong shape: refused before anything changes */
	struct tensor *g = ps.items[1].value->grad;
	tensor_heap_begin();
	ps.items[1].value->grad = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, (int64_t[]){ 5 });
	tensor_heap_end();
	tu_assert_error(nn_adamw_step(&o) < 0, TENSOR_ERR_STATE, "nn_adamw_step", "'b'");
	tu_assert_close(ps.items[0].value, w0, 6, 0, 0);
	ck_assert_int_eq(o.step, 0);
	tensor_free(ps.items[1].value->grad);
	ps.items[1].value->grad = g;
	/* a parameter added after the optimizer */
	nn_param_new(&ps, "late", 1, (int64_t[]){ 2 }, false);
	tu_assert_error(nn_adamw_step(&o) < 0, TENSOR_ERR_STATE, "nn_adamw_step",
			"state for 3 parameters, the list has 4");
	ck_assert_int_eq(nn_sgd_init(&sg, &ps, 0.1, 0.5, 0), TENSOR_OK);
	nn_adamw_free(&o);
	nn_param_new(&ps, "later", 1, (int64_t[]){ 2 }, false);
	tu_assert_error(nn_sgd_step(&sg) < 0, TENSOR_ERR_STATE, "nn_sgd_step", "the list has 5");
	nn_sgd_free(&sg);

	/* packed parameters whose gradient was replaced */
	ck_assert_int_eq(nn_params_pack(&ps), TENSOR_OK);
	ck_assert_int_eq(nn_adamw_init(&o, &ps, 1e-3, 0.9, 0.999, 1e-8, 0.1), TENSOR_OK);
	g = ps.items[0].value->grad;
	tensor_heap_begin();
	ps.items[0].value->grad = tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, (int64_t[]){ 2, 3 });
	tensor_heap_end();
	tu_assert_error(nn_adamw_step(&o) < 0, TENSOR_ERR_STATE, "'w'", "packed");
	tensor_free(ps.items[0].value->grad);
	ps.items[0].value->grad = g;
	ck_assert_int_eq(nn_adamw_step(&o), TENSOR_OK);
	nn_adamw_free(&o);

	/* SGD */
	tu_assert_error(nn_sgd_init(NULL, &ps, 0.1, 0, 0) < 0, TENSOR_ERR_ARG, "nn_sgd_init",
			"NULL");
	tu_assert_error(nn_sgd_init(&sg, NULL, 0.1, 0, 0) < 0, TENSOR_ERR_ARG, "nn_sgd_init",
			"ps is NULL");
	tu_assert_error(nn_sgd_init(&sg, &ps, -0.1, 0, 0) < 0, TENSOR_ERR_ARG, "nn_sgd_init",
			"lr -0.1");
	tu_assert_error(nn_sgd_init(&sg, &ps, INFINITY, 0, 0) < 0, TENSOR_ERR_ARG, "nn_sgd_init",
			"lr inf");
	tu_assert_error(nn_sgd_init(&sg, &ps, 0.1, -0.9, 0) < 0, TENSOR_ERR_ARG, "nn_sgd_init",
			"momentum -0.9");
	tu_assert_error(nn_sgd_init(&sg, &ps, 0.1, 0.9, NAN) < 0, TENSOR_ERR_ARG, "nn_sgd_init",
			"weight_decay");
	tu_assert_error(nn_sgd_step(NULL) < 0, TENSOR_ERR_ARG, "nn_sgd_step", NULL);
	ck_assert_int_eq(nn_sgd_init(&sg, &ps, 0.1, 0, 0), TENSOR_OK);
	sg.momentum = -1;
	tu_assert_error(nn_sgd_step(&sg) < 0, TENSOR_ERR_ARG, "nn_sgd_step", "momentum -1");
	sg.momentum = 0.5; /* momentum turned on later: buffers appear */
	ck_assert_int_eq(nn_sgd_step(&sg), TENSOR_OK);
	ck_assert(sg.buf != NULL && sg.buf[0]->storage != ps.items[0].value->storage);
	nn_sgd_free(&sg);
	free(w0);
	nn_params_free(&ps);
}
END_TEST

/* ---- schedules ----------------------------------------------------------------------- */

START_TEST(test_schedules)
{
	const double base = 1e-3, lo = 1e-5;
	const int64_t W = 10, T = 100;
	const int64_t steps[] = { 0, 9, 10, 55, 99, 100, 150 };
	struct nn_schedule s;
	/* constant: warmup, then base forever */
	ck_assert_int_eq(nn_schedule_init(&s, NN_SCHEDULE_CONSTANT, base, lo, W, 0, T), TENSOR_OK);
	const double want_c[] = { 0, base * 0.9, base, base, base, base, base };
	for (int k = 0; k < 7; k++)
		ck_assert_double_eq_tol(nn_schedule_lr(&s, steps[k]), want_c[k], 1e-18);
	/* cosine: half way (step 55) is the midpoint; min at total and after */
	ck_assert_int_eq(nn_schedule_init(&s, NN_SCHEDULE_COSINE, base, lo, W, 0, T), TENSOR_OK);
	const double want_cos[] = { 0,
				    base * 9 / 10,
				    base,
				    (base + lo) / 2,
				    lo + (base - lo) * 0.5 * (1 + cos(M_PI * 89 / 90)),
				    lo,
				    lo };
	for (int k = 0; k < 7; k++)
		ck_assert_double_eq_tol(nn_schedule_lr(&s, steps[k]), want_cos[k], 1e-18);
	/* step 40: q = 1/3, cos(pi / 3) = 1/2, so 3/4 of the way from min to base */
	ck_assert_double_eq_tol(nn_schedule_lr(&s, 40), lo + (base - lo) * 0.75, 1e-18);
	/* linear: straight down to min */
	ck_assert_int_eq(nn_schedule_init(&s, NN_SCHEDULE_LINEAR, base, lo, W, 0, T), TENSOR_OK);
	const double want_lin[] = { 0,	base * 0.9, base, (base + lo) / 2, lo + (base - lo) / 90,
				    lo, lo };
	for (int k = 0; k < 7; k++)
		ck_assert_double_eq_tol(nn_schedule_lr(&s, steps[k]), want_lin[k], 1e-18);
	ck_assert_double_eq(nn_schedule_lr(&s, -5), 0); /* negative steps count as 0 */
	/* warmup as a ratio of total: ceil(r T) */
	ck_assert_int_eq(nn_schedule_init(&s, NN_SCHEDULE_COSINE, base, 0, -1, 0.1, 1000),
			 TENSOR_OK);
	ck_assert_int_eq(s.warmup, 100);
	ck_assert_double_eq_tol(nn_schedule_lr(&s, 50), base / 2, 1e-18);
	ck_assert_double_eq_tol(nn_schedule_lr(&s, 100), base, 1e-18);
	ck_assert_int_eq(nn_schedule_init(&s, NN_SCHEDULE_COSINE, base, 0, -1, 0.07, 100),
			 TENSOR_OK);
	ck_assert_int_eq(s.warmup, 7); /* 0.07 * 100 is 7.000000000000001 in doubles */
	ck_assert_int_eq(nn_schedule_init(&s, NN_SCHEDULE_LINEAR, base, 0, -1, 0.05, 30),
			 TENSOR_OK);
	ck_assert_int_eq(s.warmup, 2); /* 1.5 rounds up */
	ck_assert_double_eq_tol(nn_schedule_lr(&s, 1), base / 2, 1e-18);
	ck_assert_double_eq_tol(nn_schedule_lr(&s, 16), base / 2, 1e-18); /* (30-16)/28 */
	/* no warmup: base at step 0 */
	ck_assert_int_eq(nn_schedule_init(&s, NN_SCHEDULE_COSINE, base, lo, 0, 0, 4), TENSOR_OK);
	ck_assert_double_eq(nn_schedule_lr(&s, 0), base);
	ck_assert_double_eq_tol(nn_schedule_lr(&s, 2), (base + lo) / 2, 1e-18);
	/* warmup == total: ramp, then min (cosine) or base (constant) */
	ck_assert_int_eq(nn_schedule_init(&s, NN_SCHEDULE_COSINE, base, lo, 5, 0, 5), TENSOR_OK);
	ck_assert_double_eq_tol(nn_schedule_lr(&s, 4), base * 0.8, 1e-18);
	ck_assert_double_eq(nn_schedule_lr(&s, 5), lo);
	ck_assert_int_eq(nn_schedule_init(&s, NN_SCHEDULE_CONSTANT, base, lo, 5, 0, 5), TENSOR_OK);
	ck_assert_double_eq(nn_schedule_lr(&s, 7), base);
}
END_TEST

START_TEST(test_schedule_errors)
{
	struct nn_schedule s;
	tu_assert_error(nn_schedule_init(NULL, NN_SCHEDULE_COSINE, 1, 0, 1, 0, 10) < 0,
			TENSOR_ERR_ARG, "nn_schedule_init", "NULL");
	tu_assert_error(nn_schedule_init(&s, (enum nn_schedule_kind)7, 1, 0, 1, 0, 10) < 0,
			TENSOR_ERR_ARG, "nn_schedule_init", "kind 7");
	tu_assert_error(nn_schedule_init(&s, NN_SCHEDULE_COSINE, 1, 0, 1, 0, 0) < 0, TENSOR_ERR_ARG,
			"nn_schedule_init", "total 0");
	tu_assert_error(nn_schedule_init(&s, NN_SCHEDULE_COSINE, 1, 0, 11, 0, 10) < 0,
			TENSOR_ERR_ARG, "nn_schedule_init", "warmup 11 is longer than total 10");
	tu_assert_error(nn_schedule_init(&s, NN_SCHEDULE_LINEAR, -1, 0, 1, 0, 10) < 0,
			TENSOR_ERR_ARG, "nn_schedule_init", "base -1");
	tu_assert_error(nn_schedule_init(&s, NN_SCHEDULE_LINEAR, 1, -0.5, 1, 0, 10) < 0,
			TENSOR_ERR_ARG, "nn_schedule_init", "min -0.5");
	tu_assert_error(nn_schedule_init(&s, NN_SCHEDULE_LINEAR, NAN, 0, 1, 0, 10) < 0,
			TENSOR_ERR_ARG, "learning rates", NULL);
	tu_assert_error(nn_schedule_init(&s, NN_SCHEDULE_LINEAR, 1, 2, 1, 0, 10) < 0,
			TENSOR_ERR_ARG, "nn_schedule_init", "min_lr 2 is above base_lr 1");
	tu_assert_error(nn_schedule_init(&s, NN_SCHEDULE_COSINE, 1, 0, -1, 1.0, 10) < 0,
			TENSOR_ERR_ARG, "nn_schedule_init", "warmup_ratio 1");
	tu_assert_error(nn_schedule_init(&s, NN_SCHEDULE_COSINE, 1, 0, -1, -0.1, 10) < 0,
			TENSOR_ERR_ARG, "warmup_ratio -0.1", NULL);
	tu_assert_error(nn_schedule_init(&s, NN_SCHEDULE_COSINE, 1, 0, -1, NAN, 10) < 0,
			TENSOR_ERR_ARG, "warmup_ratio", NULL);
	tu_assert_error(isnan(nn_schedule_lr(NULL, 3)), TENSOR_ERR_ARG, "nn_schedule_lr", "NULL");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("nn_optim");
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
	tc = tu_tcase("optim");
	tcase_add_test(tc, test_adamw_by_hand);
	tcase_add_test(tc, test_adamw_kernel_equals_ops);
	tcase_add_test(tc, test_adamw_kernel_errors);
	tcase_add_test(tc, test_adamw_skips_frozen);
	tcase_add_test(tc, test_adamw_packed_equals_unpacked);
	tcase_add_test(tc, test_sgd_by_hand);
	tcase_add_test(tc, test_sgd_packed_equals_unpacked);
	tcase_add_test(tc, test_step_after_backward);
	tcase_add_test(tc, test_clip_grad_norm);
	tcase_add_test(tc, test_optimizer_errors);
	suite_add_tcase(s, tc);
	tc = tu_tcase("schedule");
	tcase_add_test(tc, test_schedules);
	tcase_add_test(tc, test_schedule_errors);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
