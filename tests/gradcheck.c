#include "gradcheck.h"

#include "testutil.h"

void gc_assert(const char *name, gc_fn f, void *ctx, int n, struct tensor *const *inputs)
{
	struct ag_gradcheck c = { 0 };
	int rc = ag_gradcheck(f, ctx, n, inputs, &c);
	ck_assert_msg(rc == TENSOR_OK, "%s: gradient check did not run: %s", name,
		      tensor_last_error());
	ck_assert_msg(c.max_error <= 1.0,
		      "%s: gradient check failed (error ratio %g): input %d element %lld: "
		      "analytic %.9g, numeric %.9g",
		      name, c.max_error, c.input, (long long)c.element, c.analytic, c.numeric);
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
