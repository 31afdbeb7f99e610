/* nn penalties and weight averages: the L2 penalty's gradient towards zero
 * and towards a snapshot (nn_anchor), the moving average of the parameters,
 * the adversarial perturbation, against their rules computed here, and their
 * error paths. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn_optim_common.h"

/* grad += lambda p for the parameters named prefix*, the others untouched; packed or not
 * (unpacked, p2 has no gradient and is skipped); the penalty's gradient by autograd agrees. */
START_TEST(test_params_l2_grad)
{
	for (int packed = 0; packed < 2; packed++) {
		struct nn_params ps;
		big_model(&ps, TENSOR_F64);
		if (packed)
			nn_params_pack(&ps);
		set_grads(&ps, 0, packed ? -1 : 2);
		ck_assert_int_eq(nn_params_l2_grad(&ps, "p5", 0.3), 1);
		ck_assert_int_eq(nn_params_l2_grad(&ps, "p", 0.0), 0);
		for (int k = 0; k < ps.n; k++) {
			if (!packed && k == 2)
				continue;
			int64_t n = tensor_numel(ps.items[k].value);
			double *p = tu_values(ps.items[k].value);
			double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
			for (int64_t i = 0; i < n; i++)
				want[i] = grad_at(i, 0, k) + (k == 5 ? 0.3 * p[i] : 0);
			tu_assert_close(ps.items[k].value->grad, want, n, 1e-15, 1e-14);
			free(p);
			free(want);
		}
		/* p3 is empty [0, 3]: no gradient to change */
		ck_assert_int_eq(nn_params_l2_grad(&ps, "", 1e-3), packed ? 6 : 5);
		ck_assert_int_eq(nn_params_l2_grad(&ps, NULL, 1e-3), packed ? 6 : 5);
		if (!packed)
			ck_assert_ptr_null(ps.items[2].value->grad);
		nn_params_free(&ps);
	}
	/* against autograd: d/dp (lambda/2 sum p^2) */
	struct nn_params ps;
	small_model(&ps, TENSOR_F64);
	struct tensor *w = ps.items[0].value;
	tensor_scope_begin();
	struct tensor *loss = ag_mul_scalar(ag_sum(ag_mul(w, w), 0, NULL, false), 0.35);
	ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
	tensor_scope_end();
	double *by_ag = tu_values(w->grad);
	ck_assert_int_eq(nn_params_zero_grad(&ps), TENSOR_OK);
	ck_assert_int_eq(nn_params_l2_grad(&ps, "w", 0.7), 1);
	tu_assert_close(w->grad, by_ag, 6, 1e-15, 1e-14);
	free(by_ag);
	/* errors change nothing */
	double *before = tu_values(w->grad);
	tu_assert_error(nn_params_l2_grad(&ps, "q", 0.1) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"nn_params_l2_grad", "no parameter name starts with 'q'");
	double bad[] = { -0.1, NAN, INFINITY };
	for (int i = 0; i < 3; i++)
		tu_assert_error(nn_params_l2_grad(&ps, "w", bad[i]) == TENSOR_ERR_ARG,
				TENSOR_ERR_ARG, "nn_params_l2_grad", "must be finite and >= 0");
	tu_assert_error(nn_params_l2_grad(NULL, "w", 0.1) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"nn_params_l2_grad", "NULL");
	tu_assert_close(w->grad, before, 6, 0, 0);
	free(before);
	nn_params_free(&ps);
}
END_TEST

/* L2-SP: grad += lambda (p - p0) for the parameters matching the globs, p0 their values at
 * init; packed or not; agrees with autograd; errors change nothing. */
START_TEST(test_anchor_l2_grad)
{
	for (int packed = 0; packed < 2; packed++) {
		struct nn_params ps;
		big_model(&ps, TENSOR_F64);
		if (packed)
			nn_params_pack(&ps);
		struct nn_anchor a;
		ck_assert_int_eq(nn_anchor_init(&a, &ps, "p[15]|p6|q*"), TENSOR_OK);
		ck_assert_int_eq(a.n, 3);
		double *p0[7];
		for (int k = 0; k < ps.n; k++) {
			p0[k] = tu_values(ps.items[k].value);
			set_values(ps.items[k].value, k, false);
		}
		set_grads(&ps, 0, -1);
		ck_assert_int_eq(nn_anchor_l2_grad(&a, 0.0), 0);
		ck_assert_int_eq(nn_anchor_l2_grad(&a, 0.3), 3);
		for (int k = 0; k < ps.n; k++) {
			int64_t n = tensor_numel(ps.items[k].value);
			bool anchored = k == 1 || k == 5 || k == 6;
			double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
			for (int64_t i = 0; i < n; i++)
				want[i] = grad_at(i, 0, k) +
					  (anchored ? 0.3 * (value_at(i, k) - p0[k][i]) : 0);
			tu_assert_close(ps.items[k].value->grad, want, n, 1e-15, 1e-14);
			free(want);
			free(p0[k]);
		}
		nn_anchor_free(&a);
		nn_params_free(&ps);
	}
	/* against autograd: d/dw (lambda/2 sum (w - w0)^2) */
	struct nn_params ps;
	small_model(&ps, TENSOR_F64);
	struct tensor *w = ps.items[0].value;
	struct nn_anchor a;
	tensor_scope_begin();
	ck_assert_int_eq(nn_anchor_init(&a, &ps, "w"), TENSOR_OK); /* the copy outlives the scope */
	tensor_scope_end();
	tensor_scope_begin();
	struct tensor *w0 = tensor_clone(ag_detach(w));
	set_values(w, 7, false);
	struct tensor *d = ag_sub(w, w0);
	ck_assert_int_eq(ag_backward(ag_mul_scalar(ag_sum(ag_mul(d, d), 0, NULL, false), 0.35),
				     NULL),
			 TENSOR_OK);
	tensor_scope_end();
	double *by_ag = tu_values(w->grad);
	ck_assert_int_eq(nn_params_zero_grad(&ps), TENSOR_OK);
	ck_assert_int_eq(nn_anchor_l2_grad(&a, 0.7), 1);
	tu_assert_close(w->grad, by_ag, 6, 1e-15, 1e-14);
	free(by_ag);
	/* errors change nothing */
	double *before = tu_values(w->grad);
	struct nn_anchor b = { .n = 5 };
	tu_assert_error(nn_anchor_init(&b, &ps, "x*|[bw]?") == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"nn_anchor_init", "no parameter name matches 'x*|[bw]?'");
	ck_assert_int_eq(b.n, 0);
	tu_assert_error(nn_anchor_init(&b, NULL, "w") == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"nn_anchor_init", "ps is NULL");
	tu_assert_error(nn_anchor_init(&b, &ps, NULL) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"nn_anchor_init", "pattern is NULL");
	tu_assert_error(nn_anchor_l2_grad(NULL, 0.1) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"nn_anchor_l2_grad", "NULL");
	double bad[] = { -0.1, NAN, INFINITY };
	for (int i = 0; i < 3; i++)
		tu_assert_error(nn_anchor_l2_grad(&a, bad[i]) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
				"nn_anchor_l2_grad", "must be finite and >= 0");
	tu_assert_error(nn_anchor_l2_grad(&b, 0.1) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"nn_anchor_l2_grad", "not initialised");
	tu_assert_close(w->grad, before, 6, 0, 0);
	free(before);
	/* the list rebuilt with other shapes: the anchor no longer fits */
	nn_params_free(&ps);
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 5), TENSOR_OK);
	nn_param_new(&ps, "w", 1, (int64_t[]){ 6 }, false);
	tu_assert_error(nn_anchor_l2_grad(&a, 0.1) == TENSOR_ERR_STATE, TENSOR_ERR_STATE,
			"nn_anchor_l2_grad", "parameter 'w' is [6], anchored as [2,3]");
	nn_params_free(&ps);
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 5), TENSOR_OK);
	tu_assert_error(nn_anchor_l2_grad(&a, 0.1) == TENSOR_ERR_STATE, TENSOR_ERR_STATE,
			"nn_anchor_l2_grad", "parameter 0 of 0 is gone");
	nn_anchor_free(&a);
	nn_anchor_free(&a);
	nn_params_free(&ps);
}
END_TEST

/* ---- moving average and adversarial weights ------------------------------------------ */

/* The moving average against its rule computed here, packed and not; swapping
 * the averages in and out; and the errors. */
START_TEST(test_ema)
{
	for (int packed = 0; packed < 2; packed++) {
		struct nn_params ps;
		small_model(&ps, TENSOR_F64);
		if (packed)
			ck_assert_int_eq(nn_params_pack(&ps), TENSOR_OK);
		struct nn_ema e;
		ck_assert_int_eq(nn_ema_init(&e, &ps, 0.2), TENSOR_OK);
		ck_assert(packed ? e.flat != NULL : e.flat == NULL);
		double s[6], w[6], b[3];
		for (int i = 0; i < 6; i++)
			s[i] = value_at(i, 0);
		/* decays min(0.2, (1 + t) / (10 + t)): 0.1, 0.18, then 0.2 */
		for (int t = 0; t < 3; t++) {
			set_values(ps.items[0].value, 10 + t, false);
			ck_assert_int_eq(nn_ema_update(&e), TENSOR_OK);
			double d = fmin(0.2, (1.0 + t) / (10.0 + t));
			for (int i = 0; i < 6; i++)
				s[i] = d * s[i] + (1 - d) * value_at(i, 10 + t);
		}
		ck_assert_int_eq(e.updates, 3);
		tu_assert_close(e.shadow[0], s, 6, 1e-15, 1e-13);
		for (int i = 0; i < 3; i++)
			b[i] = value_at(i, 1);
		tu_assert_close(e.shadow[1], b, 3, 0, 0); /* unchanged value: its own average */
		/* swap: the parameters hold the averages, and back */
		for (int i = 0; i < 6; i++)
			w[i] = value_at(i, 12);
		ck_assert_int_eq(nn_ema_swap(&e), TENSOR_OK);
		ck_assert(e.swapped);
		tu_assert_close(ps.items[0].value, s, 6, 1e-15, 1e-13);
		tu_assert_close(e.shadow[0], w, 6, 0, 0);
		tu_assert_error(nn_ema_update(&e) < 0, TENSOR_ERR_STATE, "nn_ema_update",
				"swapped");
		/* the refused update changed nothing */
		tu_assert_close(e.shadow[0], w, 6, 0, 0);
		ck_assert_int_eq(nn_ema_swap(&e), TENSOR_OK);
		ck_assert(!e.swapped);
		tu_assert_close(ps.items[0].value, w, 6, 0, 0);
		tu_assert_close(e.shadow[0], s, 6, 1e-15, 1e-13);
		if (!packed) { /* a parameter added after the average was made */
			ck_assert_ptr_nonnull(
			    nn_param_new(&ps, "late", 1, (int64_t[]){ 2 }, false));
			tu_assert_error(nn_ema_update(&e) < 0, TENSOR_ERR_STATE, "nn_ema_update",
					"holds 3 parameters, the list has 4");
		}
		nn_ema_free(&e);
		ck_assert_ptr_null(e.shadow);
		nn_params_free(&ps);
	}
	struct nn_params ps;
	small_model(&ps, TENSOR_F32);
	struct nn_ema e;
	const double bad[] = { 1, -0.1, NAN };
	for (int k = 0; k < 3; k++)
		tu_assert_error(nn_ema_init(&e, &ps, bad[k]) < 0, TENSOR_ERR_ARG, "nn_ema_init",
				"must be in [0, 1)");
	tu_assert_error(nn_ema_init(&e, NULL, 0.9) < 0, TENSOR_ERR_ARG, "nn_ema_init",
			"ps is NULL");
	tu_assert_error(nn_ema_update(NULL) < 0, TENSOR_ERR_ARG, "nn_ema_update",
			"not initialised");
	tu_assert_error(nn_ema_swap(&e) < 0, TENSOR_ERR_ARG, "nn_ema_swap", "not initialised");
	nn_ema_free(&e);
	nn_ema_free(NULL);
	nn_params_free(&ps);
}
END_TEST

/* The weights of a perturbed parameter: value_at(., which) + eps ||p|| g / ||g||
 * with g = grad_at(., 0, gwhich). */
static void fgm_want(int64_t n, int which, int gwhich, double eps, double *want)
{
	double pp = 0, gg = 0;
	for (int64_t i = 0; i < n; i++) {
		pp += value_at(i, which) * value_at(i, which);
		gg += grad_at(i, 0, gwhich) * grad_at(i, 0, gwhich);
	}
	for (int64_t i = 0; i < n; i++)
		want[i] = value_at(i, which) + eps * sqrt(pp / gg) * grad_at(i, 0, gwhich);
}

/* The perturbation against its rule, packed and not; parameters without a
 * gradient, with a zero one or outside the prefix left alone; the exact
 * restore; and the errors, after which the weights are as they were. */
START_TEST(test_fgm)
{
	double w0[6], b0[3], f0[4], want[6];
	for (int i = 0; i < 6; i++)
		w0[i] = value_at(i, 0);
	for (int i = 0; i < 3; i++)
		b0[i] = value_at(i, 1);
	for (int i = 0; i < 4; i++)
		f0[i] = value_at(i, 2);
	for (int packed = 0; packed < 2; packed++) {
		struct nn_params ps;
		small_model(&ps, TENSOR_F64);
		if (packed) /* f then has a zero gradient, else none */
			ck_assert_int_eq(nn_params_pack(&ps), TENSOR_OK);
		struct tensor *w = ps.items[0].value, *b = ps.items[1].value,
			      *f = ps.items[2].value;
		set_values(w, 7, true);
		set_values(b, 8, true);
		struct nn_fgm adv = { 0 };
		ck_assert_int_eq(nn_fgm_perturb(&adv, &ps, "", 0.1), 2);
		fgm_want(6, 0, 7, 0.1, want);
		tu_assert_close(w, want, 6, 1e-15, 1e-14);
		fgm_want(3, 1, 8, 0.1, want);
		tu_assert_close(b, want, 3, 1e-15, 1e-14);
		tu_assert_close(f, f0, 4, 0, 0);
		tu_assert_error(nn_fgm_perturb(&adv, &ps, "", 0.1) < 0, TENSOR_ERR_STATE,
				"nn_fgm_perturb", "perturbed already");
		ck_assert_int_eq(nn_fgm_restore(&adv), TENSOR_OK);
		tu_assert_close(w, w0, 6, 0, 0);
		tu_assert_close(b, b0, 3, 0, 0);
		ck_assert_ptr_null(adv.saved);
		tu_assert_error(nn_fgm_restore(&adv) < 0, TENSOR_ERR_STATE, "nn_fgm_restore",
				"nothing is perturbed");
		/* the prefix, and eps 0 */
		ck_assert_int_eq(nn_fgm_perturb(&adv, &ps, "w", 0.25), 1);
		fgm_want(6, 0, 7, 0.25, want);
		tu_assert_close(w, want, 6, 1e-15, 1e-14);
		tu_assert_close(b, b0, 3, 0, 0);
		ck_assert_int_eq(nn_fgm_restore(&adv), TENSOR_OK);
		ck_assert_int_eq(nn_fgm_perturb(&adv, &ps, NULL, 0), 0);
		ck_assert_int_eq(nn_fgm_restore(&adv), TENSOR_OK);
		tu_assert_close(w, w0, 6, 0, 0);
		/* a non-finite gradient after a perturbed parameter: w goes back */
		ck_assert_int_eq(tensor_fill_(b->grad, INFINITY), TENSOR_OK);
		tu_assert_error(nn_fgm_perturb(&adv, &ps, "", 0.1) < 0, TENSOR_ERR_ARG,
				"nn_fgm_perturb", "not finite");
		tu_assert_close(w, w0, 6, 0, 0);
		tu_assert_close(b, b0, 3, 0, 0);
		ck_assert_ptr_null(adv.saved);
		if (!packed) { /* a parameter added in between */
			ck_assert_int_eq(nn_fgm_perturb(&adv, &ps, "w", 0.1), 1);
			ck_assert_ptr_nonnull(
			    nn_param_new(&ps, "late", 1, (int64_t[]){ 2 }, false));
			tu_assert_error(nn_fgm_restore(&adv) < 0, TENSOR_ERR_STATE,
					"nn_fgm_restore",
					"perturbed with 3 parameters, the list has 4");
			nn_fgm_free(&adv);
			ck_assert_ptr_null(adv.saved);
		}
		nn_params_free(&ps);
	}
	struct nn_params ps;
	small_model(&ps, TENSOR_F32);
	struct nn_fgm adv = { 0 };
	const double bad[] = { -0.1, NAN, INFINITY };
	for (int k = 0; k < 3; k++)
		tu_assert_error(nn_fgm_perturb(&adv, &ps, "", bad[k]) < 0, TENSOR_ERR_ARG,
				"nn_fgm_perturb", "must be finite and >= 0");
	tu_assert_error(nn_fgm_perturb(&adv, &ps, "embed.", 0.1) < 0, TENSOR_ERR_ARG,
			"nn_fgm_perturb", "no parameter name starts with 'embed.'");
	tu_assert_error(nn_fgm_perturb(&adv, NULL, "", 0.1) < 0, TENSOR_ERR_ARG, "nn_fgm_perturb",
			"ps is NULL");
	tu_assert_error(nn_fgm_restore(NULL) < 0, TENSOR_ERR_STATE, "nn_fgm_restore",
			"nothing is perturbed");
	nn_fgm_free(NULL);
	nn_params_free(&ps);
}
END_TEST
int main(void)
{
	Suite *s = suite_create("nn_penalty");
	TCase *tc = tu_tcase("penalty");
	tcase_add_test(tc, test_params_l2_grad);
	tcase_add_test(tc, test_anchor_l2_grad);
	tcase_add_test(tc, test_ema);
	tcase_add_test(tc, test_fgm);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
