/* Softmax, dropout, layer norm and RMS norm (and their backward) front-ends. */
#include <math.h>

#include "backend.h"

static int check_float_x(const char *op, const struct tensor *x)
{
	char bx[128];
	if (x->dtype != TENSOR_F32 && x->dtype != TENSOR_F64)
		return tensor_error(TENSOR_ERR_DTYPE, "%s: x %s is %s, expected f32 or f64", op,
				    tensor_shape_str(x, bx, sizeof bx),
				    tensor_dtype_name(x->dtype));
	return TENSOR_OK;
}

/* ---- softmax -------------------------------------------------------------- */

/* Softmax over the last dim of x (ndim >= 1) into a new tensor. */
static struct tensor *softmax_last(const struct tensor_backend *be, const struct tensor *x,
				   bool log)
{
	struct tensor *out = tensor_new(x->dtype, x->storage->device, x->ndim, x->shape);
	return out ? tensor_op_result(out, be->softmax(out, x, log)) : NULL;
}

static struct tensor *softmax_op(const char *op, const struct tensor *x, int dim, bool log)
{
	char bx[128];
	if (!x || tensor_check_operand(op, "", "x", x) < 0 || check_float_x(op, x) < 0)
		return NULL;
	int nd = x->ndim, lim = nd > 0 ? nd : 1;
	int d = dim < 0 ? dim + lim : dim;
	if (d < 0 || d >= lim) {
		tensor_error(TENSOR_ERR_SHAPE, "%s: dim %d out of range for x %s, expected %d..%d",
			     op, dim, tensor_shape_str(x, bx, sizeof bx), -lim, lim - 1);
		return NULL;
	}
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(x->storage->device, softmax, op);
	if (!be)
		return NULL;
	if (nd == 0) { /* a scalar is one row of one element */
		const int64_t one = 1;
		struct tensor *v = tensor_new_view(x, 1, &one, &one, x->offset);
		struct tensor *o = v ? softmax_last(be, v, log) : NULL;
		struct tensor *out = tensor_view(o, 0, NULL);
		tensor_free(o);
		tensor_free(v);
		return out;
	}
	if (d == nd - 1)
		return softmax_last(be, x, log);
	/* Bring dim last (a view), then write the result back in x's layout. */
	struct tensor *xt = tensor_transpose(x, d, nd - 1);
	struct tensor *ot = xt ? softmax_last(be, xt, log) : NULL;
	struct tensor *back = tensor_transpose(ot, d, nd - 1);
	struct tensor *out = back ? tensor_new(x->dtype, x->storage->device, nd, x->shape) : NULL;
	if (out && tensor_copy_(out, back) < 0) {
		tensor_free(out);
		out = NULL;
	}
	tensor_free(back);
	tensor_free(ot);
	tensor_free(xt);
	return out;
}

struct tensor *tensor_softmax(const struct tensor *x, int dim)
{
	return softmax_op("softmax", x, dim, false);
}

struct tensor *tensor_log_softmax(const struct tensor *x, int dim)
{
	return softmax_op("log_softmax", x, dim, true);
}

/* The composed softmax backward of devices without the kernel: y (g - sum(g y)). */
static struct tensor *softmax_backward_composed(const struct tensor *y, const struct tensor *g)
{
	int last = -1;
	struct tensor *gy = tensor_mul(g, y);
	struct tensor *s = tensor_sum(gy, 1, &last, true);
	struct tensor *d = tensor_sub(g, s);
	struct tensor *dx = tensor_mul(y, d);
	tensor_free(d);
	tensor_free(s);
	tensor_free(gy);
	return dx;
}

/* Checks of softmax_backward(y, g) (name: the op; y, g not NULL); the device's backend. */
static const struct tensor_backend *softmax_backward_check(const char *name, const struct tensor *y,
							   const struct tensor *g)
{
	char by[128], bg[128];
	if (check_float_x(name, y) < 0 || tensor_check_pair(name, y, g) < 0)
		return NULL;
	if (!tensor_same_shape(y, g)) {
		tensor_error(TENSOR_ERR_SHAPE, "%s: y %s and g %s differ in shape", name,
			     tensor_shape_str(y, by, sizeof by),
			     tensor_shape_str(g, bg, sizeof bg));
		return NULL;
	}
	return tensor_backend_get(y->storage->device);
}

struct tensor *tensor_softmax_backward(const struct tensor *y, const struct tensor *g)
{
	if (!y || !g || tensor_check_operand("softmax_backward", NULL, "y", y) < 0 ||
	    tensor_check_operand("softmax_backward", NULL, "g", g) < 0)
		return NULL;
	const struct tensor_backend *be = softmax_backward_check("softmax_backward", y, g);
	if (!be)
		return NULL;
	if (!be->softmax_backward)
		return softmax_backward_composed(y, g);
	struct tensor *yc = tensor_contiguous(y), *gc = tensor_contiguous(g);
	struct tensor *dx =
	    yc && gc ? tensor_new(y->dtype, y->storage->device, y->ndim, y->shape) : NULL;
	if (dx && tensor_numel(dx) > 0 && be->softmax_backward(dx, yc, gc) < 0) {
		tensor_free(dx);
		dx = NULL;
	}
	tensor_free(gc);
	tensor_free(yc);
	return dx;
}

int tensor_softmax_backward_(const struct tensor *y, struct tensor *g)
{
	char bg[128];
	if (!y || !g)
		return tensor_error(TENSOR_ERR_ARG, "tensor_softmax_backward_: y or g is NULL");
	const struct tensor_backend *be = softmax_backward_check("tensor_softmax_backward_", y, g);
	if (!be)
		return tensor_last_status();
	if (tensor_check_writable("tensor_softmax_backward_", g) < 0)
		return tensor_last_status();
	if (!tensor_is_contiguous(g))
		return tensor_error(TENSOR_ERR_SHAPE,
				    "tensor_softmax_backward_: g %s is not contiguous",
				    tensor_shape_str(g, bg, sizeof bg));
	if (tensor_numel(g) == 0)
		return TENSOR_OK;
	if (!be->softmax_backward) {
		struct tensor *dx = softmax_backward_composed(y, g);
		int rc = dx ? tensor_copy_(g, dx) : tensor_last_status();
		tensor_free(dx);
		return rc;
	}
	struct tensor *yc = tensor_contiguous(y);
	int rc = yc ? be->softmax_backward(g, yc, g) : tensor_last_status();
	tensor_free(yc);
	return rc;
}

int tensor_softmax_(struct tensor *x)
{
	char bx[128];
	if (!x)
		return tensor_error(TENSOR_ERR_ARG, "tensor_softmax_: x is NULL");
	if (check_float_x("tensor_softmax_", x) < 0 ||
	    tensor_check_writable("tensor_softmax_", x) < 0)
		return tensor_last_status();
	if (x->ndim == 0 || !tensor_is_contiguous(x))
		return tensor_error(TENSOR_ERR_SHAPE,
				    "tensor_softmax_: x %s must be contiguous with at least 1 dim",
				    tensor_shape_str(x, bx, sizeof bx));
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(x->storage->device, softmax, "tensor_softmax_");
	if (!be)
		return tensor_last_status();
	return be->softmax(x, x, false);
}

/* ---- dropout -------------------------------------------------------------- */

/* Checks of dropout (op: its name, x not NULL); the device's backend. */
static const struct tensor_backend *dropout_check(const char *op, const struct tensor *x, double p)
{
	if (check_float_x(op, x) < 0)
		return NULL;
	if (!(p >= 0 && p < 1)) {
		tensor_error(TENSOR_ERR_ARG, "%s: p %g, expected 0 <= p < 1", op, p);
		return NULL;
	}
	return TENSOR_BACKEND_FOR(x->storage->device, dropout, op);
}

struct tensor *tensor_dropout(const struct tensor *x, double p, uint64_t seed)
{
	return tensor_dropout_at(x, p, seed, 0);
}

int tensor_dropout_(struct tensor *x, double p, uint64_t seed)
{
	return tensor_dropout_at_(x, p, seed, 0);
}

struct tensor *tensor_dropout_at(const struct tensor *x, double p, uint64_t seed, uint64_t first)
{
	if (!x) {
		tensor_error(TENSOR_ERR_ARG, "tensor_dropout: x is NULL");
		return NULL;
	}
	if (tensor_check_operand("dropout", "", "x", x) < 0)
		return NULL;
	const struct tensor_backend *be = dropout_check("tensor_dropout", x, p);
	struct tensor *xc = be ? tensor_contiguous(x) : NULL;
	struct tensor *out =
	    xc ? tensor_new(x->dtype, x->storage->device, x->ndim, x->shape) : NULL;
	if (out)
		out = tensor_op_result(out, tensor_numel(out) ? be->dropout(out, xc, p, seed, first)
							  : TENSOR_OK);
	tensor_free(xc);
	return out;
}

int tensor_dropout_at_(struct tensor *x, double p, uint64_t seed, uint64_t first)
{
	char bx[128];
	if (!x)
		return tensor_error(TENSOR_ERR_ARG, "tensor_dropout_: x is NULL");
	const struct tensor_backend *be = dropout_check("tensor_dropout_", x, p);
	if (!be || tensor_check_writable("tensor_dropout_", x) < 0)
		return tensor_last_status();
	if (!tensor_is_contiguous(x))
		return tensor_error(TENSOR_ERR_SHAPE, "tensor_dropout_: x %s is not contiguous",
				    tensor_shape_str(x, bx, sizeof bx));
	return tensor_numel(x) > 0 ? be->dropout(x, x, p, seed, first) : TENSOR_OK;
}

/* ---- layer norm and RMS norm ---------------------------------------------- */

static int check_norm_x(const char *op, const struct tensor *x, double eps)
{
	char bx[128];
	if (check_float_x(op, x) < 0)
		return TENSOR_ERR_DTYPE;
	if (x->ndim == 0)
		return tensor_error(TENSOR_ERR_SHAPE, "%s: x %s is 0-d, expected at least 1 dim",
				    op, tensor_shape_str(x, bx, sizeof bx));
	if (!(eps >= 0) || !isfinite(eps))
		return tensor_error(TENSOR_ERR_ARG, "%s: eps %g for x %s, expected finite eps >= 0",
				    op, eps, tensor_shape_str(x, bx, sizeof bx));
	return TENSOR_OK;
}

/* w or b (optional) must be [C] of x's dtype and device. */
static int check_param(const char *op, const char *name, const struct tensor *p,
		       const struct tensor *x)
{
	char bp[128], bx[128];
	int64_t c = x->shape[x->ndim - 1];
	if (!p)
		return TENSOR_OK;
	if (p->storage->device != x->storage->device)
		return tensor_error(TENSOR_ERR_DEVICE, "%s: %s on %s, x %s on %s", op, name,
				    tensor_device_name(p->storage->device),
				    tensor_shape_str(x, bx, sizeof bx),
				    tensor_device_name(x->storage->device));
	if (p->dtype != x->dtype)
		return tensor_error(TENSOR_ERR_DTYPE, "%s: %s %s is %s, x %s is %s", op, name,
				    tensor_shape_str(p, bp, sizeof bp), tensor_dtype_name(p->dtype),
				    tensor_shape_str(x, bx, sizeof bx),
				    tensor_dtype_name(x->dtype));
	if (p->ndim != 1 || p->shape[0] != c)
		return tensor_error(TENSOR_ERR_SHAPE,
				    "%s: %s %s does not fit x %s, expected [%lld]", op, name,
				    tensor_shape_str(p, bp, sizeof bp),
				    tensor_shape_str(x, bx, sizeof bx), (long long)c);
	return TENSOR_OK;
}

/* A [..., 1] statistics tensor for x (when wanted) and its [rows] view for the slot. */
static int stat_new(const struct tensor *x, bool want, struct tensor **stat, struct tensor **flat)
{
	*stat = *flat = NULL;
	if (!want)
		return TENSOR_OK;
	int64_t sh[TENSOR_MAX_DIMS], rows = 1, one = 1;
	for (int d = 0; d < x->ndim; d++)
		sh[d] = x->shape[d];
	sh[x->ndim - 1] = 1;
	for (int d = 0; d < x->ndim - 1; d++)
		rows *= x->shape[d];
	*stat = tensor_new(x->dtype, x->storage->device, x->ndim, sh);
	*flat = *stat ? tensor_new_view(*stat, 1, &rows, &one, (*stat)->offset) : NULL;
	return *flat ? TENSOR_OK : TENSOR_ERR_NOMEM;
}

/* Both norms; RMS norm passes b and mean as NULL. */
static struct tensor *norm_op(const char *op, bool rms, const struct tensor *x,
			      const struct tensor *w, const struct tensor *b, double eps,
			      struct tensor **mean, struct tensor **rstd)
{
	if (mean)
		*mean = NULL;
	if (rstd)
		*rstd = NULL;
	if (!x || tensor_check_operand(op, "", "x", x) < 0 ||
	    tensor_check_operand(op, "", "w", w) < 0 || tensor_check_operand(op, "", "b", b) < 0)
		return NULL;
	if (check_norm_x(op, x, eps) < 0 || check_param(op, "w", w, x) < 0 ||
	    check_param(op, "b", b, x) < 0)
		return NULL;
	enum tensor_device dev = x->storage->device;
	const struct tensor_backend *be = rms ? TENSOR_BACKEND_FOR(dev, rms_norm, op)
					      : TENSOR_BACKEND_FOR(dev, layer_norm, op);
	if (!be)
		return NULL;
	struct tensor *m = NULL, *mf = NULL, *r = NULL, *rf = NULL;
	struct tensor *y = tensor_new(x->dtype, x->storage->device, x->ndim, x->shape);
	int rc = y ? TENSOR_OK : TENSOR_ERR_NOMEM;
	if (rc == TENSOR_OK)
		rc = stat_new(x, mean != NULL, &m, &mf);
	if (rc == TENSOR_OK)
		rc = stat_new(x, rstd != NULL, &r, &rf);
	if (rc == TENSOR_OK)
		rc = rms ? be->rms_norm(y, rf, x, w, eps) : be->layer_norm(y, mf, rf, x, w, b, eps);
	tensor_free(mf);
	tensor_free(rf);
	if (rc < 0) {
		tensor_free(y);
		tensor_free(m);
		tensor_free(r);
		return NULL;
	}
	if (mean)
		*mean = m;
	if (rstd)
		*rstd = r;
	return y;
}

struct tensor *tensor_layer_norm(const struct tensor *x, const struct tensor *w,
				 const struct tensor *b, double eps, struct tensor **mean,
				 struct tensor **rstd)
{
	return norm_op("layer_norm", false, x, w, b, eps, mean, rstd);
}

struct tensor *tensor_rms_norm(const struct tensor *x, const struct tensor *w, double eps,
			       struct tensor **rstd)
{
	return norm_op("rms_norm", true, x, w, NULL, eps, NULL, rstd);
}

/* ---- norm backward -------------------------------------------------------- */

/* A statistic (mean or rstd) must be x's shape with the last dim 1. */
static int check_stat(const char *op, const char *name, const struct tensor *s,
		      const struct tensor *x)
{
	char bs[128], bx[128];
	int rc = tensor_check_pair(op, x, s);
	if (rc < 0)
		return rc;
	bool ok = s->ndim == x->ndim && s->shape[s->ndim - 1] == 1;
	for (int d = 0; ok && d < x->ndim - 1; d++)
		ok = s->shape[d] == x->shape[d];
	if (!ok)
		return tensor_error(
		    TENSOR_ERR_SHAPE,
		    "%s: %s %s does not fit x %s, expected x's shape with last dim 1", op, name,
		    tensor_shape_str(s, bs, sizeof bs), tensor_shape_str(x, bx, sizeof bx));
	return TENSOR_OK;
}

static int check_norm_backward(const char *op, const struct tensor *g, const struct tensor *x,
			       const struct tensor *mean, const struct tensor *rstd,
			       const struct tensor *w)
{
	char bg[128], bx[128];
	if (!g)
		return tensor_error(TENSOR_ERR_ARG, "%s: g is NULL", op);
	if (!x || !rstd)
		return tensor_error(TENSOR_ERR_ARG, "%s: %s is NULL", op, x ? "rstd" : "x");
	int rc = check_norm_x(op, x, 0);
	if (rc == TENSOR_OK)
		rc = tensor_check_pair(op, x, g);
	if (rc == TENSOR_OK && !tensor_same_shape(g, x))
		rc = tensor_error(TENSOR_ERR_SHAPE, "%s: g %s differs from x %s", op,
				  tensor_shape_str(g, bg, sizeof bg),
				  tensor_shape_str(x, bx, sizeof bx));
	if (rc == TENSOR_OK)
		rc = check_stat(op, "rstd", rstd, x);
	if (rc == TENSOR_OK && mean)
		rc = check_stat(op, "mean", mean, x);
	if (rc == TENSOR_OK)
		rc = check_param(op, "w", w, x);
	return rc;
}

int tensor_norm_backward(const struct tensor *g, const struct tensor *x, const struct tensor *mean,
			 const struct tensor *rstd, const struct tensor *w, struct tensor **dx,
			 struct tensor **dw, struct tensor **db)
{
	static const char op[] = "norm_backward";
	struct tensor **outs[3] = { dx, dw, db };
	for (int k = 0; k < 3; k++)
		if (outs[k])
			*outs[k] = NULL;
	int rc = check_norm_backward(op, g, x, mean, rstd, w);
	for (int k = 0; k < 3 && rc == TENSOR_OK; k++)
		rc = tensor_check_operand(op, NULL, (const char *[]){ "g", "x", "w" }[k],
					  (const struct tensor *[]){ g, x, w }[k]);
	if (rc < 0)
		return rc;
	const struct tensor_backend *be = tensor_backend_get(x->storage->device);
	rc = be ? TENSOR_SLOT(be, norm_backward, op) : tensor_last_status();
	if (rc < 0) /* the status itself, not an earlier error's: autograd falls back on it */
		return rc;
	if (!dx && !dw && !db)
		return TENSOR_OK;
	enum tensor_device dev = x->storage->device;
	int64_t c = x->shape[x->ndim - 1];
	struct tensor *t[3] = { dx ? tensor_new(x->dtype, dev, x->ndim, x->shape) : NULL,
				dw ? tensor_new(x->dtype, dev, 1, &c) : NULL,
				db ? tensor_new(x->dtype, dev, 1, &c) : NULL };
	rc = TENSOR_OK;
	for (int k = 0; k < 3; k++)
		if (outs[k] && !t[k])
			rc = TENSOR_ERR_NOMEM;
	if (rc == TENSOR_OK)
		rc = be->norm_backward(t[0], t[1], t[2], g, x, mean, rstd, w);
	for (int k = 0; k < 3; k++) {
		if (rc < 0)
			tensor_free(t[k]);
		else if (outs[k])
			*outs[k] = t[k];
	}
	return rc;
}
