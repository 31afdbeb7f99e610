#include "gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

/* L = sum(f(inputs) * R) in f64, or NAN on failure. */
static double loss_value(gc_fn f, void *ctx, struct tensor *const *inputs, uint64_t rseed)
{
	tensor_scope_begin();
	ag_no_grad_begin();
	double l = NAN;
	struct tensor *out = f(inputs, ctx);
	if (out) {
		struct tensor *r =
		    tensor_rand_normal(TENSOR_F64, TENSOR_CPU, out->ndim, out->shape, rseed, 0, 1);
		struct tensor *s =
		    tensor_sum(tensor_mul(tensor_cast(out, TENSOR_F64), r), 0, NULL, false);
		if (s)
			l = tensor_get(s, NULL);
	}
	ag_no_grad_end();
	tensor_scope_end();
	return l;
}

static double *element(struct tensor *t, int64_t i)
{
	int64_t idx[TENSOR_MAX_DIMS], off = 0;
	tu_unravel(i, t->ndim, t->shape, idx);
	for (int d = 0; d < t->ndim; d++)
		off += idx[d] * t->strides[d];
	return (double *)tensor_data(t) + off;
}

double gc_error(gc_fn f, void *ctx, int n, struct tensor *const *inputs, double h, double atol,
		double rtol, char *worst, size_t worst_len)
{
	const uint64_t rseed = 12345;
	for (int k = 0; k < n; k++)
		if (inputs[k]->requires_grad && inputs[k]->grad)
			ag_zero_grad(inputs[k]);
	/* analytic */
	tensor_scope_begin();
	struct tensor *out = f(inputs, ctx);
	int rc = -1;
	if (out) {
		struct tensor *r =
		    tensor_rand_normal(out->dtype, TENSOR_CPU, out->ndim, out->shape, rseed, 0, 1);
		struct tensor *loss = ag_sum(ag_mul(out, r), 0, NULL, false);
		rc = loss ? ag_backward(loss, NULL) : -1;
	}
	tensor_scope_end();
	if (rc != TENSOR_OK) {
		if (worst)
			snprintf(worst, worst_len, "forward/backward failed: %s",
				 tensor_last_error());
		return INFINITY;
	}
	double max_err = 0;
	for (int k = 0; k < n; k++) {
		struct tensor *x = inputs[k];
		if (!x->requires_grad)
			continue;
		double *g = x->grad ? tu_values(x->grad) : NULL;
		for (int64_t i = 0; i < tensor_numel(x); i++) {
			double *p = element(x, i), saved = *p;
			*p = saved + h;
			double lp = loss_value(f, ctx, inputs, rseed);
			*p = saved - h;
			double lm = loss_value(f, ctx, inputs, rseed);
			*p = saved;
			double num = (lp - lm) / (2 * h), ana = g ? g[i] : 0;
			double err = fabs(ana - num) / (atol + rtol * fabs(num));
			if (!(err <= max_err)) { /* also catches NaN */
				max_err = isnan(err) ? INFINITY : err;
				if (worst)
					snprintf(
					    worst, worst_len,
					    "input %d element %lld: analytic %.9g, numeric %.9g", k,
					    (long long)i, ana, num);
			}
		}
		free(g);
	}
	return max_err;
}

void gc_assert(const char *name, gc_fn f, void *ctx, int n, struct tensor *const *inputs)
{
	char worst[256] = "";
	double e = gc_error(f, ctx, n, inputs, 1e-6, 1e-7, 1e-5, worst, sizeof worst);
	ck_assert_msg(e <= 1.0, "%s: gradient check failed (error ratio %g): %s", name, e, worst);
}

struct tensor *gc_input(int ndim, const int64_t *shape, uint64_t seed, double lo, double hi,
			bool strided)
{
	struct tensor *t = tensor_rand_uniform(TENSOR_F64, TENSOR_CPU, ndim, shape, seed, lo, hi);
	ck_assert_msg(t != NULL, "%s", tensor_last_error());
	if (strided && ndim >= 2)
		t = tu_strided(t);
	ck_assert_int_eq(ag_requires_grad(t, true), TENSOR_OK);
	return t;
}
