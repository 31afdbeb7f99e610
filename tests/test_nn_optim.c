/* nn optimizers: AdamW and SGD against the published update rules computed
 * here, packed vs unpacked parameters, gradient clipping, and every error path
 * (penalties, averages and adversarial weights: test_nn_penalty.c; schedules:
 * test_nn_schedule.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn_optim_common.h"

/* ---- optimizer helpers ----------------------------------------------------------- */

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
			/* the composed formula of nn/adamw.c at step 7 */
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

/* The fused SGD kernel gives the composed formula of nn/adamw.c to the bit: with and
 * without momentum and decay, f32 and f64, on two threads past the parallel threshold. */
START_TEST(test_sgd_kernel_equals_ops)
{
	tensor_set_num_threads(2);
	const double lr = 0.03;
	const int64_t n[1] = { 100003 };
	for (int d = 0; d < 2; d++)
		for (int c = 0; c < 4; c++) {
			enum tensor_dtype dt = d ? TENSOR_F64 : TENSOR_F32;
			double wd = c & 1 ? 0.05 : 0, mu = c & 2 ? 0.9 : 0;
			struct tensor *p = tensor_rand_normal(dt, TENSOR_CPU, 1, n, 1, 0, 1);
			struct tensor *g = tensor_rand_normal(dt, TENSOR_CPU, 1, n, 2, 0, 1);
			struct tensor *b =
			    mu > 0 ? tensor_rand_normal(dt, TENSOR_CPU, 1, n, 3, 0, 0.1) : NULL;
			struct tensor *dd = wd != 0 ? tensor_add(g, tensor_mul_scalar(p, wd)) : g;
			struct tensor *b2 = b ? tensor_add(tensor_mul_scalar(b, mu), dd) : NULL;
			struct tensor *p2 = tensor_add(p, tensor_mul_scalar(b2 ? b2 : dd, -lr));
			double *wp = tu_values(p2), *wb = b2 ? tu_values(b2) : NULL;
			ck_assert_int_eq(tensor_sgd_(p, b, g, lr, mu, wd), TENSOR_OK);
			tu_assert_close(p, wp, n[0], 0, 0);
			if (b)
				tu_assert_close(b, wb, n[0], 0, 0);
			free(wp);
			free(wb);
		}
}
END_TEST

/* Errors name the op and change nothing. */
START_TEST(test_sgd_kernel_errors)
{
	const int64_t s[2] = { 4, 6 };
	struct tensor *p = tensor_rand_normal(TENSOR_F32, TENSOR_CPU, 2, s, 1, 0, 1);
	struct tensor *b = tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, s);
	struct tensor *g = tensor_rand_normal(TENSOR_F32, TENSOR_CPU, 2, s, 2, 0, 1);
	double *before = tu_values(p);
	struct tensor *g64 = tensor_cast(g, TENSOR_F64);
	struct tensor *bt = tensor_transpose(
	    tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, (const int64_t[]){ 6, 4 }), 0, 1);
	struct tensor *short_b = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, (const int64_t[]){ 24 });
	tu_assert_error(tensor_sgd_(p, NULL, g64, 0.1, 0, 0) < 0, TENSOR_ERR_DTYPE, "sgd_", NULL);
	tu_assert_error(tensor_sgd_(p, short_b, g, 0.1, 0.9, 0) < 0, TENSOR_ERR_SHAPE,
			"sgd_: buf [24] differs from p [4,6]", NULL);
	tu_assert_error(tensor_sgd_(p, bt, g, 0.1, 0.9, 0) < 0, TENSOR_ERR_STATE,
			"sgd_: buf [4,6] is not contiguous", NULL);
	tu_assert_error(tensor_sgd_(p, b, g, -1, 0.9, 0) < 0, TENSOR_ERR_ARG, "sgd_", "lr -1");
	tu_assert_error(tensor_sgd_(p, b, g, 0.1, 0.9, NAN) < 0, TENSOR_ERR_ARG, "sgd_",
			"weight_decay nan");
	tu_assert_error(tensor_sgd_(NULL, b, g, 0.1, 0.9, 0) < 0, TENSOR_ERR_ARG, "sgd_: p is NULL",
			NULL);
	tu_assert_error(tensor_sgd_(p, b, NULL, 0.1, 0.9, 0) < 0, TENSOR_ERR_ARG, "sgd_: g is NULL",
			NULL);
	tu_assert_close(p, before, 24, 0, 0);
	double zero[24] = { 0 };
	tu_assert_close(b, zero, 24, 0, 0);
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
		init[k] = tensor_clone(ag_detach(ps[0].items[k].value));
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

/* Lazy rows: row r of "e" [6,4] has a gradient at step s iff lazy_live(r, s);
 * row 4 never does. */
static bool lazy_live(int64_t r, int s)
{
	return r != 4 && (r * 7 + s * 3) % 4 < 2;
}

static void set_lazy_grads(struct nn_params *ps, int s)
{
	set_grads(ps, s, -1);
	struct tensor *g = ps->items[0].value->grad;
	double *v = tu_values(g);
	for (int64_t i = 0; i < 24; i++)
		if (!lazy_live(i / 4, s))
			v[i] = 0;
	struct tensor *src = tensor_from_data(TENSOR_F64, TENSOR_CPU, 2, g->shape, v);
	ck_assert_int_eq(tensor_copy_(g, src), TENSOR_OK);
	tensor_free(src);
	free(v);
}

/* AdamW on a lazy parameter updates a row, and its moments, only at the steps
 * where the row has a gradient, with the bias corrections of the global step
 * (LazyAdam's rule); the other parameters, packed beside it or not, follow the
 * dense rule. nn_params_l2_grad leaves the rows without a gradient alone. */
START_TEST(test_adamw_lazy_rows)
{
	const double lr = 0.01, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1;
	for (int packed = 0; packed < 2; packed++) {
		struct nn_params ps;
		ck_assert_int_eq(nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 5), TENSOR_OK);
		set_values(nn_param_new(&ps, "e", 2, (int64_t[]){ 6, 4 }, false), 0, false);
		set_values(nn_param_new(&ps, "w", 2, (int64_t[]){ 2, 3 }, false), 1, false);
		ck_assert_int_eq(nn_params_set_lazy(&ps, "e", true), 1);
		if (packed)
			ck_assert_int_eq(nn_params_pack(&ps), TENSOR_OK);
		struct nn_adamw o;
		ck_assert_int_eq(nn_adamw_init(&o, &ps, lr, b1, b2, eps, wd), TENSOR_OK);
		for (int s = 0; s < 3; s++) {
			set_lazy_grads(&ps, s);
			ck_assert_int_eq(nn_adamw_step(&o), TENSOR_OK);
		}
		double p[24], m[24], v[24];
		for (int64_t i = 0; i < 24; i++) {
			p[i] = value_at(i, 0);
			m[i] = v[i] = 0;
			for (int s = 1; s <= 3; s++) {
				if (!lazy_live(i / 4, s - 1))
					continue;
				double g = grad_at(i, s - 1, 0);
				m[i] = b1 * m[i] + (1 - b1) * g;
				v[i] = b2 * v[i] + (1 - b2) * g * g;
				double mhat = m[i] / (1 - pow(b1, s)),
				       vhat = v[i] / (1 - pow(b2, s));
				p[i] -= lr * mhat / (sqrt(vhat) + eps) + lr * wd * p[i];
			}
		}
		tu_assert_close(ps.items[0].value, p, 24, 1e-14, 1e-12);
		tu_assert_close(o.m[0], m, 24, 1e-15, 1e-12);
		tu_assert_close(o.v[0], v, 24, 1e-15, 1e-12);
		ck_assert(m[16] == 0 && p[16] == value_at(16, 0)); /* row 4: untouched */
		adamw_ref(1, 6, 3, lr, b1, b2, eps, wd, true, NULL, p, m, v);
		tu_assert_close(ps.items[1].value, p, 6, 1e-14, 1e-12);
		/* the penalty reaches only the rows with a gradient */
		set_lazy_grads(&ps, 0);
		double *g0 = tu_values(ps.items[0].value->grad), *e = tu_values(ps.items[0].value);
		ck_assert_int_eq(nn_params_l2_grad(&ps, "e", 0.5), 1);
		for (int64_t i = 0; i < 24; i++)
			g0[i] += lazy_live(i / 4, 0) ? 0.5 * e[i] : 0;
		tu_assert_close(ps.items[0].value->grad, g0, 24, 1e-15, 1e-14);
		free(g0);
		free(e);
		/* a NaN row is not skipped: the step spreads it as a dense one would */
		set_lazy_grads(&ps, 1);
		ck_assert(!lazy_live(4, 1));
		double nan_row[4] = { NAN, 0, 0, 0 };
		struct tensor *src =
		    tensor_from_data(TENSOR_F64, TENSOR_CPU, 1, (int64_t[]){ 4 }, nan_row);
		struct tensor *row = tensor_narrow(ps.items[0].value->grad, 0, 4, 1);
		ck_assert_int_eq(tensor_copy_(row, src), TENSOR_OK);
		tensor_free(row);
		tensor_free(src);
		ck_assert_int_eq(nn_adamw_step(&o), TENSOR_OK);
		double *after = tu_values(ps.items[0].value);
		ck_assert(isnan(after[16]));
		free(after);
		/* errors */
		tu_assert_error(nn_params_set_lazy(&ps, "q", true) == TENSOR_ERR_ARG,
				TENSOR_ERR_ARG, "nn_params_set_lazy",
				"no parameter name starts with 'q'");
		tu_assert_error(nn_params_set_lazy(NULL, "e", true) == TENSOR_ERR_ARG,
				TENSOR_ERR_ARG, "nn_params_set_lazy", "NULL");
		struct nn_params none;
		ck_assert_int_eq(nn_params_init(&none, TENSOR_F64, TENSOR_CPU, 5), TENSOR_OK);
		tu_assert_error(nn_params_set_lazy(&none, NULL, true) == TENSOR_ERR_ARG,
				TENSOR_ERR_ARG, "nn_params_set_lazy", "starts with ''");
		tu_assert_error(nn_params_l2_grad(&none, NULL, 0.1) == TENSOR_ERR_ARG,
				TENSOR_ERR_ARG, "nn_params_l2_grad", "starts with ''");
		nn_params_free(&none);
		/* SGD shares the lazy segments: at its second step, the rows without a
		 * gradient keep their values and momentum (dense SGD would move row 0,
		 * live at step 0 only, by lr mu b); the others follow b = mu b + g */
		struct nn_sgd sgd;
		ck_assert_int_eq(nn_sgd_init(&sgd, &ps, 0.1, 0.9, 0), TENSOR_OK);
		set_lazy_grads(&ps, 0);
		ck_assert_int_eq(nn_sgd_step(&sgd), TENSOR_OK);
		ck_assert(lazy_live(0, 0) && !lazy_live(0, 1));
		set_lazy_grads(&ps, 1);
		double *before = tu_values(ps.items[0].value), *b0 = tu_values(sgd.buf[0]);
		ck_assert_int_eq(nn_sgd_step(&sgd), TENSOR_OK);
		double *got = tu_values(ps.items[0].value), *buf = tu_values(sgd.buf[0]);
		for (int64_t i = 0; i < 24; i++) {
			if (lazy_live(i / 4, 1)) {
				double b = 0.9 * b0[i] + grad_at(i, 1, 0);
				ck_assert(fabs(buf[i] - b) <= 1e-15);
				ck_assert(fabs(got[i] - (before[i] - 0.1 * b)) <= 1e-15);
			} else { /* bit for bit: row 4 holds the NaN of the step above */
				ck_assert(memcmp(&got[i], &before[i], sizeof got[i]) == 0);
				ck_assert(buf[i] == b0[i]);
			}
		}
		ck_assert(b0[1] != 0); /* row 0 had a momentum to move it by */
		free(before);
		free(b0);
		free(got);
		free(buf);
		nn_sgd_free(&sgd);
		ck_assert_int_eq(nn_params_set_lazy(&ps, "", false), 2);
		ck_assert(!ps.items[0].lazy_rows);
		nn_adamw_free(&o);
		nn_params_free(&ps);
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
		struct tensor *p0 = tensor_clone(ag_detach(ps[0].items[1].value));
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
		struct tensor *w0 = tensor_clone(ag_detach(w));
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

int main(void)
{
	Suite *s = suite_create("nn_optim");
	TCase *tc = tu_tcase("optim");
	tcase_add_test(tc, test_adamw_by_hand);
	tcase_add_test(tc, test_adamw_kernel_equals_ops);
	tcase_add_test(tc, test_adamw_kernel_errors);
	tcase_add_test(tc, test_adamw_skips_frozen);
	tcase_add_test(tc, test_adamw_packed_equals_unpacked);
	tcase_add_test(tc, test_adamw_lazy_rows);
	tcase_add_test(tc, test_sgd_by_hand);
	tcase_add_test(tc, test_sgd_kernel_equals_ops);
	tcase_add_test(tc, test_sgd_kernel_errors);
	tcase_add_test(tc, test_sgd_packed_equals_unpacked);
	tcase_add_test(tc, test_step_after_backward);
	tcase_add_test(tc, test_clip_grad_norm);
	tcase_add_test(tc, test_optimizer_errors);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
