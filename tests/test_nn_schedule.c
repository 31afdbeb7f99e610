/* nn learning-rate schedules: constant, linear and cosine after a linear
 * warmup, against their formulas, and every error path. */
#include <math.h>

#include "nn.h"
#include "testutil.h"

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
	Suite *s = suite_create("nn_schedule");
	TCase *tc = tu_tcase("schedule");
	tcase_add_test(tc, test_schedules);
	tcase_add_test(tc, test_schedule_errors);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
