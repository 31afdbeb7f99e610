/* tools/spectrum.c: normalised cumulative singular values of matrices whose singular
 * values are known (diagonal, rank one, rectangular with orthogonal rows, a rotation
 * of a diagonal), the zero matrix, and LAPACK's refusal of a NaN. */
#include <check.h>
#include <math.h>
#include <string.h>

#include "../tools/spectrum.h"
#include "testutil.h"

static void assert_curve(const double *c, const double *want, int n)
{
	for (int i = 0; i < n; i++)
		ck_assert_msg(fabs(c[i] - want[i]) < 1e-12, "c[%d] = %.15g, want %.15g", i, c[i],
			      want[i]);
}

START_TEST(test_known_spectra)
{
	char err[256];
	double c[4];
	/* diag(1, 3, 2): s = 3, 2, 1 of sum 6 */
	double d[9] = { 1, 0, 0, 0, 3, 0, 0, 0, 2 };
	ck_assert_int_eq(spectrum_cumulative(d, 3, 3, c, err, sizeof err), 0);
	assert_curve(c, (const double[]){ 0.5, 5.0 / 6, 1 }, 3);
	/* rank one, 4 x 3 (uniform attention rows): all the mass in s_1 */
	double r[12];
	for (int i = 0; i < 12; i++)
		r[i] = 1.0 / 3;
	ck_assert_int_eq(spectrum_cumulative(r, 4, 3, c, err, sizeof err), 0);
	assert_curve(c, (const double[]){ 1, 1, 1 }, 3);
	/* 2 x 4, rows 4 e1 and e3: s = 4, 1 */
	double w[8] = { 4, 0, 0, 0, 0, 0, 1, 0 };
	ck_assert_int_eq(spectrum_cumulative(w, 2, 4, c, err, sizeof err), 0);
	assert_curve(c, (const double[]){ 0.8, 1 }, 2);
	/* a rotation times diag(2, 1): s = 2, 1 whatever the angle */
	double a = 0.3, q[4] = { 2 * cos(a), -sin(a), 2 * sin(a), cos(a) };
	ck_assert_int_eq(spectrum_cumulative(q, 2, 2, c, err, sizeof err), 0);
	assert_curve(c, (const double[]){ 2.0 / 3, 1 }, 2);
}
END_TEST

START_TEST(test_zero_and_nan)
{
	char err[256] = "";
	double c[2] = { 9, 9 }, z[4] = { 0 };
	ck_assert_int_eq(spectrum_cumulative(z, 2, 2, c, err, sizeof err), 0);
	assert_curve(c, (const double[]){ 0, 0 }, 2);
	double bad[4] = { 1, NAN, 0, 1 };
	ck_assert_int_eq(spectrum_cumulative(bad, 2, 2, c, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "LAPACKE_dgesdd of a 2 x 2 matrix: info"), "%s", err);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("spectrum");
	TCase *tc = tu_tcase("spectrum");
	tcase_add_test(tc, test_known_spectra);
	tcase_add_test(tc, test_zero_and_nan);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
