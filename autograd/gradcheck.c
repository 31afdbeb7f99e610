/* The gradient checker: ag_backward's gradients of sum(f(inputs) * R) against f64 central
 * differences (autograd.h, ag_gradcheck). */
#include <math.h>

#include "autograd.h"

/* The seed of R, the fixed random weights of the checked loss. */
#define GRADCHECK_SEED 12345

/* The status of f (NULL result: an error) for its result out. */
static int f_status(const struct tensor *out)
{
	if (out)
		return TENSOR_OK;
	int rc = tensor_last_status();
	return rc < 0 ? rc : tensor_error(TENSOR_ERR_ARG, "ag_gradcheck: f returned NULL");
}

/* *l = sum(f(inputs) * R) in f64, without the tape. */
static int loss_value(ag_gradcheck_fn f, void *ctx, struct tensor *const *inputs, double *l)
{
	tensor_scope_begin();
	ag_no_grad_begin();
	struct tensor *out = f(inputs, ctx);
	int rc = f_status(out);
	if (rc == TENSOR_OK) {
		struct tensor *r = tensor_rand_normal(TENSOR_F64, TENSOR_CPU, out->ndim, out->shape,
						      GRADCHECK_SEED, 0, 1);
		struct tensor *s =
		    tensor_sum(tensor_mul(tensor_cast(out, TENSOR_F64), r), 0, NULL, false);
		rc = f_status(s);
		*l = s ? tensor_get(s, NULL) : NAN;
	}
	ag_no_grad_end();
	tensor_scope_end();
	return rc;
}

/* The analytic gradients: ag_backward of the same L into the inputs' (zeroed) gradients. */
static int analytic(ag_gradcheck_fn f, void *ctx, int n, struct tensor *const *inputs)
{
	for (int k = 0; k < n; k++)
		if (inputs[k]->requires_grad && ag_zero_grad(inputs[k]) < 0)
			return tensor_last_status();
	tensor_scope_begin();
	struct tensor *out = f(inputs, ctx);
	int rc = f_status(out);
	if (rc == TENSOR_OK) {
		struct tensor *r = tensor_rand_normal(out->dtype, out->storage->device, out->ndim,
						      out->shape, GRADCHECK_SEED, 0, 1);
		struct tensor *loss = ag_sum(ag_mul(out, r), 0, NULL, false);
		rc = loss ? ag_backward(loss, NULL) : f_status(loss);
	}
	ag_tape_reset(); /* what a failure left */
	tensor_scope_end();
	return rc;
}

/* Element i (row-major) of the f64 CPU tensor x, any strides. */
static double *element(struct tensor *x, int64_t i)
{
	int64_t off = 0;
	for (int d = x->ndim - 1; d >= 0; d--) {
		off += i % x->shape[d] * x->strides[d];
		i /= x->shape[d];
	}
	return (double *)tensor_data(x) + off;
}

/* The inputs that require grad: f64 CPU leaves (the others are f's to use). */
static int check_inputs(int n, struct tensor *const *inputs)
{
	if (n < 1 || !inputs)
		return tensor_error(TENSOR_ERR_ARG, "ag_gradcheck: no inputs (n = %d)", n);
	for (int k = 0; k < n; k++) {
		const struct tensor *x = inputs[k];
		char b[128];
		if (!x)
			return tensor_error(TENSOR_ERR_ARG, "ag_gradcheck: input %d is NULL", k);
		if (!x->requires_grad)
			continue;
		if (x->dtype != TENSOR_F64 || x->storage->device != TENSOR_CPU)
			return tensor_error(
			    TENSOR_ERR_DTYPE,
			    "ag_gradcheck: input %d %s is %s on %s, expected f64 on "
			    "the CPU",
			    k, tensor_shape_str(x, b, sizeof b), tensor_dtype_name(x->dtype),
			    tensor_device_name(x->storage->device));
		if (x->node)
			return tensor_error(TENSOR_ERR_ARG,
					    "ag_gradcheck: input %d %s is the result of '%s', not "
					    "a leaf",
					    k, tensor_shape_str(x, b, sizeof b), x->node->op);
	}
	return TENSOR_OK;
}

/* The numeric gradient of element i of input k against its analytic value a. */
static int compare(ag_gradcheck_fn f, void *ctx, struct tensor *const *inputs, int k, int64_t i,
		   double a, struct ag_gradcheck *c)
{
	double *p = element(inputs[k], i), saved = *p, lp = NAN, lm = NAN;
	*p = saved + c->h;
	int rc = loss_value(f, ctx, inputs, &lp);
	*p = saved - c->h;
	if (rc == TENSOR_OK)
		rc = loss_value(f, ctx, inputs, &lm);
	*p = saved;
	if (rc < 0)
		return rc;
	double num = (lp - lm) / (2 * c->h);
	double err = fabs(a - num) / (c->atol + c->rtol * fabs(num));
	if (!(err <= c->max_error)) { /* NaN too */
		c->max_error = isnan(err) ? INFINITY : err;
		c->input = k;
		c->element = i;
		c->analytic = a;
		c->numeric = num;
	}
	return TENSOR_OK;
}

int ag_gradcheck(ag_gradcheck_fn f, void *ctx, int n, struct tensor *const *inputs,
		 struct ag_gradcheck *c)
{
	if (!f || !c)
		return tensor_error(TENSOR_ERR_ARG, "ag_gradcheck: f or the result is NULL");
	c->h = c->h > 0 ? c->h : 1e-6;
	c->atol = c->atol > 0 ? c->atol : 1e-7;
	c->rtol = c->rtol > 0 ? c->rtol : 1e-5;
	c->max_error = INFINITY;
	c->input = -1;
	c->element = -1;
	c->analytic = c->numeric = NAN;
	int rc = check_inputs(n, inputs);
	if (rc == TENSOR_OK)
		rc = analytic(f, ctx, n, inputs);
	if (rc < 0)
		return rc;
	c->max_error = 0;
	for (int k = 0; k < n && rc == TENSOR_OK; k++) {
		struct tensor *x = inputs[k];
		if (!x->requires_grad)
			continue;
		tensor_scope_begin();
		struct tensor *g = x->grad ? tensor_contiguous(x->grad) : NULL; /* f64, x's shape */
		const double *gv = g ? tensor_data(g) : NULL;
		for (int64_t i = 0; i < tensor_numel(x) && rc == TENSOR_OK; i++)
			rc = compare(f, ctx, inputs, k, i, gv ? gv[i] : 0, c);
		tensor_scope_end();
	}
	return rc;
}
