#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd.h"
#include "backend.h" /* tensor_bf16_gemm_force */

static int start_depth;

void tu_setup(void)
{
	tensor_clear_error();
	start_depth = tensor_scope_depth();
	tensor_scope_begin();
}

void tu_teardown(void)
{
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK);
	ck_assert_int_eq(tensor_scope_depth(), start_depth);
}

TCase *tu_tcase(const char *name)
{
	TCase *tc = tcase_create(name);
	tcase_add_checked_fixture(tc, tu_setup, tu_teardown);
	tcase_set_timeout(tc, 120);
	return tc;
}

int tu_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

struct tensor *tu_rand(enum tensor_dtype dt, int ndim, const int64_t *shape, uint64_t seed)
{
	struct tensor *t = tensor_rand_uniform(dt, TENSOR_CPU, ndim, shape, seed, -1.0, 1.0);
	ck_assert_msg(t != NULL, "tu_rand: %s", tensor_last_error());
	return t;
}

struct tensor *tu_strided(const struct tensor *t)
{
	int nd = t->ndim, perm[TENSOR_MAX_DIMS];
	int64_t rev[TENSOR_MAX_DIMS];
	for (int i = 0; i < nd; i++) {
		rev[i] = t->shape[nd - 1 - i];
		perm[i] = nd - 1 - i;
	}
	struct tensor *store = tensor_empty(t->dtype, t->storage->device, nd, rev);
	ck_assert(store != NULL);
	struct tensor *view = tensor_permute(store, perm); /* t's shape, reversed strides */
	ck_assert(view != NULL);
	ck_assert_int_eq(tensor_copy_(view, t), TENSOR_OK);
	return view;
}

void tu_unravel(int64_t i, int ndim, const int64_t *shape, int64_t *idx)
{
	for (int d = ndim - 1; d >= 0; d--) {
		idx[d] = shape[d] ? i % shape[d] : 0;
		i = shape[d] ? i / shape[d] : 0;
	}
}

double *tu_values(const struct tensor *t)
{
	int64_t n = tensor_numel(t), idx[TENSOR_MAX_DIMS];
	double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
	ck_assert(v != NULL);
	for (int64_t i = 0; i < n; i++) {
		tu_unravel(i, t->ndim, t->shape, idx);
		v[i] = tensor_get(t, idx);
	}
	return v;
}

void tu_assert_shape(const struct tensor *got, int ndim, const int64_t *shape)
{
	ck_assert_msg(got != NULL, "result is NULL: %s", tensor_last_error());
	ck_assert_int_eq(got->ndim, ndim);
	for (int i = 0; i < ndim; i++)
		ck_assert_msg(got->shape[i] == shape[i], "dim %d: got %lld, want %lld", i,
			      (long long)got->shape[i], (long long)shape[i]);
}

void tu_assert_close(const struct tensor *got, const double *want, int64_t n, double atol,
		     double rtol)
{
	ck_assert_msg(got != NULL, "result is NULL: %s", tensor_last_error());
	ck_assert_int_eq(tensor_numel(got), n);
	double *v = tu_values(got);
	for (int64_t i = 0; i < n; i++) {
		double g = v[i], w = want[i];
		bool ok = (isnan(w) && isnan(g)) || (isinf(w) && g == w) ||
			  fabs(g - w) <= atol + rtol * fabs(w);
		if (!ok) {
			free(v);
			ck_abort_msg("element %lld: got %.10g, want %.10g", (long long)i, g, w);
		}
	}
	free(v);
}

void tu_assert_same(const struct tensor *a, const struct tensor *b, double tol)
{
	ck_assert_msg(a != NULL && b != NULL, "%s", tensor_last_error());
	ck_assert(tensor_same_shape(a, b));
	double *vb = tu_values(b);
	tu_assert_close(a, vb, tensor_numel(b), tol, tol);
	free(vb);
}

void tu_assert_error(bool failed, int status, const char *sub1, const char *sub2)
{
	const char *msg = tensor_last_error();
	ck_assert_msg(failed, "expected a failure, got success");
	ck_assert_msg(tensor_last_status() == status, "status %d (%s), want %d; message: %s",
		      tensor_last_status(), tensor_status_string(tensor_last_status()), status,
		      msg);
	if (sub1)
		ck_assert_msg(strstr(msg, sub1), "message '%s' lacks '%s'", msg, sub1);
	if (sub2)
		ck_assert_msg(strstr(msg, sub2), "message '%s' lacks '%s'", msg, sub2);
	tensor_clear_error();
}

double tu_tol(enum tensor_dtype dt)
{
	return dt == TENSOR_F64 ? 1e-12 : 2e-6;
}

size_t tu_peak_begin(void)
{
	ag_no_grad_begin();
	tensor_scope_begin();
	size_t base = tensor_mem_stats(TENSOR_CPU).live_bytes;
	tensor_mem_reset_peak(TENSOR_CPU);
	return base;
}

size_t tu_peak_bytes(size_t base)
{
	return tensor_mem_stats(TENSOR_CPU).peak_bytes - base;
}

void tu_peak_end(void)
{
	tensor_scope_end();
	ag_no_grad_end();
}

const char *const tu_bf16_kernels[TU_BF16_KERNELS] = { "portable", "avx512bf16", "amx",
						       "avx512bf16-emulated", "amx-emulated" };

bool tu_bf16_kernel_force(int i)
{
	if (tensor_bf16_gemm_force(tu_bf16_kernels[i]) == TENSOR_OK)
		return true;
	static bool said[TU_BF16_KERNELS];
	if (!said[i])
		printf("SKIP the %s bf16 kernel: %s\n", tu_bf16_kernels[i], tensor_last_error());
	said[i] = true;
	return false;
}
