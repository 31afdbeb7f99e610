/* The naive double-precision references of the op table (op_table.h): plain
 * loops over row-major values, written from each op's definition, sharing no
 * code with the kernels. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "op_table.h"
#include "random.h"

/* ---- helpers ---------------------------------------------------------------------- */

/* Row-major values of a contiguous CPU f64 tensor. */
static const double *vals(const struct tensor *t)
{
	ck_assert(t->dtype == TENSOR_F64 && tensor_is_contiguous(t));
	return tensor_data(t);
}

/* A new CPU f64 tensor of the shape, and its values to fill. */
static struct tensor *out_new(int nd, const int64_t *shape, double **v)
{
	struct tensor *t = tensor_zeros(TENSOR_F64, TENSOR_CPU, nd, shape);
	ck_assert(t != NULL);
	*v = tensor_data(t);
	return t;
}

/* Multi-index of row-major position i over shape. */
static void unravel(int64_t i, int nd, const int64_t *shape, int64_t *idx)
{
	for (int d = nd - 1; d >= 0; d--) {
		idx[d] = shape[d] ? i % shape[d] : 0;
		i = shape[d] ? i / shape[d] : 0;
	}
}

/* Row-major position in t of the multi-index idx of a broadcast shape of nd dims
 * (t's dims align to the right; size-1 dims broadcast). */
static int64_t bpos(const struct tensor *t, int nd, const int64_t *idx)
{
	int64_t p = 0;
	for (int d = 0; d < t->ndim; d++) {
		int64_t i = idx[nd - t->ndim + d];
		p = p * t->shape[d] + (t->shape[d] == 1 ? 0 : i);
	}
	return p;
}

/* The broadcast shape of n tensors into out; its ndim. */
static int bshape(int n, struct tensor *const *ts, int64_t *out)
{
	int nd = 0;
	for (int k = 0; k < n; k++)
		nd = ts[k]->ndim > nd ? ts[k]->ndim : nd;
	for (int d = 0; d < nd; d++) {
		out[d] = 1;
		for (int k = 0; k < n; k++) {
			int dk = d - (nd - ts[k]->ndim);
			if (dk >= 0 && ts[k]->shape[dk] != 1)
				out[d] = ts[k]->shape[dk];
		}
	}
	return nd;
}

/* Several reference results as one flat tensor (as op_flat). */
static struct tensor *flat(int n, struct tensor *const *ts)
{
	int64_t total = 0;
	for (int k = 0; k < n; k++)
		total += tensor_numel(ts[k]);
	double *v;
	struct tensor *t = out_new(1, &total, &v);
	for (int k = 0; k < n; k++) {
		memcpy(v, vals(ts[k]), sizeof *v * (size_t)tensor_numel(ts[k]));
		v += tensor_numel(ts[k]);
	}
	return t;
}

static double sigmoid(double x)
{
	return 1 / (1 + exp(-x));
}

/* ---- elementwise ------------------------------------------------------------------ */

static double unary(int op, double x, double a)
{
	const double k = sqrt(2 / M_PI), c = 0.044715;
	double u = k * (x + c * x * x * x), t = tanh(u);
	switch (op) {
	case TENSOR_NEG: return -x;
	case TENSOR_EXP: return exp(x);
	case TENSOR_LOG: return log(x);
	case TENSOR_SQRT: return sqrt(x);
	case TENSOR_RSQRT: return 1 / sqrt(x);
	case TENSOR_TANH: return tanh(x);
	case TENSOR_ERF: return erf(x);
	case TENSOR_ABS: return fabs(x);
	case TENSOR_RELU: return x > 0 ? x : 0;
	case TENSOR_GELU: return 0.5 * x * erfc(-x / sqrt(2));
	case TENSOR_GELU_TANH: return 0.5 * x * (1 + t);
	case TENSOR_SILU: return x * sigmoid(x);
	case TENSOR_SIGMOID: return sigmoid(x);
	case TENSOR_SQUARE: return x * x;
	case TENSOR_RECIPROCAL: return 1 / x;
	case TENSOR_ADD_SCALAR: return x + a;
	case TENSOR_MUL_SCALAR: return x * a;
	case TENSOR_POW_SCALAR: return pow(x, a);
	case TENSOR_GELU_GRAD: /* Phi(x) + x phi(x) */
		return 0.5 * erfc(-x / sqrt(2)) + x * exp(-x * x / 2) / sqrt(2 * M_PI);
	case TENSOR_GELU_TANH_GRAD:
		return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
	case TENSOR_SILU_GRAD: return sigmoid(x) * (1 + x * (1 - sigmoid(x)));
	default: return NAN;
	}
}

struct tensor *ref_unary(struct tensor *const *in, const struct op_row *r)
{
	double *o;
	struct tensor *t = out_new(in[0]->ndim, in[0]->shape, &o);
	const double *x = vals(in[0]);
	for (int64_t i = 0; i < tensor_numel(t); i++)
		o[i] = unary(r->op, x[i], r->alpha);
	return t;
}

static double binary(int op, double a, double b)
{
	switch (op) {
	case TENSOR_ADD: return a + b;
	case TENSOR_SUB: return a - b;
	case TENSOR_MUL: return a * b;
	case TENSOR_DIV: return a / b;
	case TENSOR_POW: return pow(a, b);
	case TENSOR_MAXIMUM: return isnan(a) || a > b ? a : b;
	case TENSOR_MINIMUM: return isnan(a) || a < b ? a : b;
	case TENSOR_MUL_GELU_GRAD: return a * unary(TENSOR_GELU_GRAD, b, 0);
	case TENSOR_MUL_GELU_TANH_GRAD: return a * unary(TENSOR_GELU_TANH_GRAD, b, 0);
	case TENSOR_MUL_SILU_GRAD: return a * unary(TENSOR_SILU_GRAD, b, 0);
	case TENSOR_EQ: return a == b;
	case TENSOR_NE: return a != b;
	case TENSOR_LT: return a < b;
	case TENSOR_LE: return a <= b;
	case TENSOR_GT: return a > b;
	default: return a >= b;
	}
}

struct tensor *ref_binary(struct tensor *const *in, const struct op_row *r)
{
	int64_t shape[TENSOR_MAX_DIMS], idx[TENSOR_MAX_DIMS];
	int nd = bshape(2, in, shape);
	double *o;
	struct tensor *t = out_new(nd, shape, &o);
	const double *a = vals(in[0]), *b = vals(in[1]);
	for (int64_t i = 0; i < tensor_numel(t); i++) {
		unravel(i, nd, shape, idx);
		o[i] = binary(r->op, a[bpos(in[0], nd, idx)], b[bpos(in[1], nd, idx)]);
	}
	return t;
}

/* The condition of op_where: in[2] truncated to an integer. */
struct tensor *ref_where(struct tensor *const *in, const struct op_row *r)
{
	(void)r;
	int64_t shape[TENSOR_MAX_DIMS], idx[TENSOR_MAX_DIMS];
	int nd = bshape(3, in, shape);
	double *o;
	struct tensor *t = out_new(nd, shape, &o);
	const double *a = vals(in[0]), *b = vals(in[1]), *c = vals(in[2]);
	for (int64_t i = 0; i < tensor_numel(t); i++) {
		unravel(i, nd, shape, idx);
		bool take = trunc(c[bpos(in[2], nd, idx)]) != 0;
		o[i] = take ? a[bpos(in[0], nd, idx)] : b[bpos(in[1], nd, idx)];
	}
	return t;
}

struct tensor *ref_masked_fill(struct tensor *const *in, const struct op_row *r)
{
	int64_t idx[TENSOR_MAX_DIMS];
	int nd = in[0]->ndim;
	double *o;
	struct tensor *t = out_new(nd, in[0]->shape, &o);
	const double *x = vals(in[0]), *m = vals(in[1]);
	for (int64_t i = 0; i < tensor_numel(t); i++) {
		unravel(i, nd, in[0]->shape, idx);
		o[i] = m[bpos(in[1], nd, idx)] != 0 ? r->alpha : x[i];
	}
	return t;
}

/* ---- reductions -------------------------------------------------------------------- */

/* op_reduce's op over dim (every dim when < 0), keepdim when alpha != 0. */
struct tensor *ref_reduce(struct tensor *const *in, const struct op_row *r)
{
	const struct tensor *x = in[0];
	int nd = x->ndim, dim = r->dim;
	int64_t shape[TENSOR_MAX_DIMS], idx[TENSOR_MAX_DIMS], n = 1;
	for (int d = 0; d < nd; d++) {
		bool red = dim < 0 || d == dim;
		shape[d] = red ? 1 : x->shape[d];
		n *= red ? x->shape[d] : 1;
	}
	double *o;
	struct tensor *t = out_new(nd, shape, &o);
	int64_t m = tensor_numel(t);
	const double *v = vals(x);
	/* sums in extended precision: a reference for any summation order */
	long double *acc = calloc((size_t)m, sizeof *acc), *acc2 = calloc((size_t)m, sizeof *acc2);
	int64_t *arg = calloc((size_t)m, sizeof *arg), *seen = calloc((size_t)m, sizeof *seen);
	for (int64_t i = 0; i < tensor_numel(x); i++) { /* in row-major order: first wins */
		unravel(i, nd, x->shape, idx);
		int64_t j = 0;
		for (int d = 0; d < nd; d++)
			j = j * shape[d] + (shape[d] == 1 ? 0 : idx[d]);
		double e = v[i];
		int64_t at = dim < 0 ? i : idx[dim];
		if (r->op == 0 || r->op >= 4) {
			acc[j] += e;
			acc2[j] += (long double)e * e;
		} else if (!seen[j]++ || (r->op == 2 ? e < acc[j] : e > acc[j])) {
			acc[j] = e;
			arg[j] = at;
		}
	}
	for (int64_t j = 0; j < m; j++) {
		long double mean = acc[j] / n;
		o[j] = r->op == 3   ? (double)arg[j]
		       : r->op == 4 ? (double)mean
		       : r->op == 5 ? (double)((acc2[j] - n * mean * mean) / (n - 1))
				    : (double)acc[j];
	}
	free(acc), free(acc2), free(arg), free(seen);
	if (r->alpha != 0)
		return t;
	/* without keepdim the reduced dims go */
	int64_t kept[TENSOR_MAX_DIMS];
	int nk = 0;
	for (int d = 0; d < nd; d++)
		if (!(dim < 0 || d == dim))
			kept[nk++] = shape[d];
	return tensor_reshape(t, nk, kept);
}

/* ---- matmul -------------------------------------------------------------------------- */

/* a [.., m, k] (a 1-d a: [k]), b [.., k, n] (a 1-d b: [k]), batch dims broadcast; in[2]
 * (if any) added, broadcast. */
struct tensor *ref_matmul(struct tensor *const *in, const struct op_row *r)
{
	const struct tensor *a = in[0], *b = in[1];
	bool va = a->ndim == 1, vb = b->ndim == 1;
	int64_t m = va ? 1 : a->shape[a->ndim - 2], k = a->shape[a->ndim - 1];
	int64_t n = vb ? 1 : b->shape[b->ndim - 1];
	int ba = va ? 0 : a->ndim - 2, bb = vb ? 0 : b->ndim - 2, nb = ba > bb ? ba : bb;
	int64_t shape[TENSOR_MAX_DIMS + 2], idx[TENSOR_MAX_DIMS + 2], batch = 1;
	for (int d = 0; d < nb; d++) {
		int da = d - (nb - ba), db = d - (nb - bb);
		int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
		shape[d] = sa == 1 ? sb : sa;
		batch *= shape[d];
	}
	shape[nb] = m, shape[nb + 1] = n;
	double *o;
	struct tensor *t = out_new(nb + 2, shape, &o);
	const double *pa = vals(a), *pb = vals(b);
	for (int64_t bi = 0; bi < batch; bi++) {
		unravel(bi, nb, shape, idx);
		int64_t oa = 0, ob = 0;
		for (int d = 0; d < ba; d++)
			oa = oa * a->shape[d] + (a->shape[d] == 1 ? 0 : idx[d + nb - ba]);
		for (int d = 0; d < bb; d++)
			ob = ob * b->shape[d] + (b->shape[d] == 1 ? 0 : idx[d + nb - bb]);
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++) {
				double s = 0;
				for (int64_t l = 0; l < k; l++)
					s += pa[(oa * m + i) * k + l] * pb[(ob * k + l) * n + j];
				o[(bi * m + i) * n + j] = s;
			}
	}
	if (r->nin == 3) {
		const double *c = vals(in[2]);
		for (int64_t i = 0; i < tensor_numel(t); i++) {
			unravel(i, nb + 2, shape, idx);
			o[i] += c[bpos(in[2], nb + 2, idx)];
		}
	}
	int64_t final[TENSOR_MAX_DIMS + 2];
	int nf = 0;
	for (int d = 0; d < nb; d++)
		final[nf++] = shape[d];
	if (!va)
		final[nf++] = m;
	if (!vb)
		final[nf++] = n;
	return tensor_reshape(t, nf, final);
}

/* ---- softmax and norms ---------------------------------------------------------- */

/* Softmax (op 0) or log-softmax (op 1) of x along dim, in place in o (x's layout). */
struct tensor *ref_softmax(struct tensor *const *in, const struct op_row *r)
{
	const struct tensor *x = in[0];
	int nd = x->ndim, d = r->dim < 0 ? r->dim + nd : r->dim;
	int64_t len = x->shape[d], inner = 1;
	for (int k = d + 1; k < nd; k++)
		inner *= x->shape[k];
	double *o;
	struct tensor *t = out_new(nd, x->shape, &o);
	const double *v = vals(x);
	for (int64_t row = 0; row < tensor_numel(x) / (len ? len : 1); row++) {
		int64_t base = row / inner * len * inner + row % inner;
		double mx = -INFINITY, s = 0;
		for (int64_t i = 0; i < len; i++)
			mx = fmax(mx, v[base + i * inner]);
		for (int64_t i = 0; i < len; i++)
			s += exp(v[base + i * inner] - mx);
		for (int64_t i = 0; i < len; i++) {
			double e = v[base + i * inner] - mx;
			o[base + i * inner] = r->op ? e - log(s) : exp(e) / s;
		}
	}
	return t;
}

/* y = softmax(x) over the last dim, g: y (g - sum(g y)), twice (as op_softmax_backward). */
struct tensor *ref_softmax_backward(struct tensor *const *in, const struct op_row *r)
{
	(void)r;
	struct op_row sm = { .dim = -1 };
	struct tensor *y = ref_softmax(in, &sm);
	int64_t c = in[0]->shape[in[0]->ndim - 1];
	double *o;
	struct tensor *t = out_new(in[0]->ndim, in[0]->shape, &o);
	const double *pv = vals(y), *g = vals(in[1]);
	for (int64_t row = 0; row < tensor_numel(t) / c; row++) {
		double s = 0;
		for (int64_t i = 0; i < c; i++)
			s += g[row * c + i] * pv[row * c + i];
		for (int64_t i = 0; i < c; i++)
			o[row * c + i] = pv[row * c + i] * (g[row * c + i] - s);
	}
	return flat(2, (struct tensor *[]){ t, t });
}

/* Row statistics over the last dim of x: mean (0 for RMS) and rstd. */
static void stats(const double *x, int64_t c, bool rms, double *mean, double *rstd)
{
	double s = 0, q = 0;
	for (int64_t i = 0; i < c; i++)
		s += x[i];
	*mean = rms ? 0 : s / (double)c;
	for (int64_t i = 0; i < c; i++)
		q += (x[i] - *mean) * (x[i] - *mean);
	*rstd = 1 / sqrt(q / (double)c + 1e-5);
}

/* y (, mean), rstd of op_norm's variant r->op. */
struct tensor *ref_norm(struct tensor *const *in, const struct op_row *r)
{
	const struct tensor *x = in[0];
	bool affine = r->op % 2 == 0, rms = r->op >= 2;
	int64_t c = x->shape[x->ndim - 1], rows = tensor_numel(x) / c;
	double *y, *mv, *rv;
	struct tensor *ty = out_new(x->ndim, x->shape, &y);
	int64_t sr[TENSOR_MAX_DIMS];
	memcpy(sr, x->shape, sizeof sr);
	sr[x->ndim - 1] = 1;
	struct tensor *tm = out_new(x->ndim, sr, &mv), *tr = out_new(x->ndim, sr, &rv);
	const double *v = vals(x), *w = affine ? vals(in[1]) : NULL;
	const double *b = affine && !rms ? vals(in[2]) : NULL;
	for (int64_t row = 0; row < rows; row++) {
		stats(v + row * c, c, rms, &mv[row], &rv[row]);
		for (int64_t i = 0; i < c; i++) {
			double h = (v[row * c + i] - mv[row]) * rv[row];
			y[row * c + i] = h * (w ? w[i] : 1) + (b ? b[i] : 0);
		}
	}
	return rms ? flat(2, (struct tensor *[]){ ty, tr })
		   : flat(3, (struct tensor *[]){ ty, tm, tr });
}

/* dx (, dw (, db)) of the norm of x for g, as op_norm_backward: with h = (x - mean) rstd
 * and e = g w, dx = rstd (e - h mean(e h) - mean(e)) (no mean(e) for RMS), dw = sum g h,
 * db = sum g. */
struct tensor *ref_norm_backward(struct tensor *const *in, const struct op_row *r)
{
	const struct tensor *x = in[0];
	bool affine = r->op % 2 == 0, rms = r->op >= 2;
	int64_t c = x->shape[x->ndim - 1], rows = tensor_numel(x) / c;
	double *dx, *dw, *db;
	struct tensor *tdx = out_new(x->ndim, x->shape, &dx);
	struct tensor *tdw = out_new(1, &c, &dw), *tdb = out_new(1, &c, &db);
	const double *v = vals(x), *g = vals(in[1]), *w = affine ? vals(in[2]) : NULL;
	for (int64_t row = 0; row < rows; row++) {
		double mean, rstd, se = 0, seh = 0;
		stats(v + row * c, c, rms, &mean, &rstd);
		for (int64_t i = 0; i < c; i++) {
			double h = (v[row * c + i] - mean) * rstd,
			       e = g[row * c + i] * (w ? w[i] : 1);
			se += e, seh += e * h;
			dw[i] += g[row * c + i] * h;
			db[i] += g[row * c + i];
		}
		for (int64_t i = 0; i < c; i++) {
			double h = (v[row * c + i] - mean) * rstd,
			       e = g[row * c + i] * (w ? w[i] : 1);
			dx[row * c + i] =
			    rstd * (e - h * seh / (double)c - (rms ? 0 : se / (double)c));
		}
	}
	if (!affine)
		return tdx;
	return rms ? flat(2, (struct tensor *[]){ tdx, tdw })
		   : flat(3, (struct tensor *[]){ tdx, tdw, tdb });
}

/* ---- indexing ------------------------------------------------------------------------- */

/* (outer, size, inner) of t around dim d. */
static void around(const struct tensor *t, int d, int64_t *outer, int64_t *inner)
{
	*outer = *inner = 1;
	for (int k = 0; k < d; k++)
		*outer *= t->shape[k];
	for (int k = d + 1; k < t->ndim; k++)
		*inner *= t->shape[k];
}

struct tensor *ref_index_select(struct tensor *const *in, const struct op_row *r)
{
	const struct tensor *src = in[0], *idx = in[1];
	int d = r->dim;
	int64_t outer, inner, shape[TENSOR_MAX_DIMS], ni = tensor_numel(idx);
	around(src, d, &outer, &inner);
	int nd = 0;
	for (int k = 0; k < d; k++)
		shape[nd++] = src->shape[k];
	for (int k = 0; k < idx->ndim; k++)
		shape[nd++] = idx->shape[k];
	for (int k = d + 1; k < src->ndim; k++)
		shape[nd++] = src->shape[k];
	double *o;
	struct tensor *t = out_new(nd, shape, &o);
	const double *s = vals(src), *ix = vals(idx);
	for (int64_t a = 0; a < outer; a++)
		for (int64_t j = 0; j < ni; j++)
			for (int64_t b = 0; b < inner; b++)
				o[(a * ni + j) * inner + b] =
				    s[(a * src->shape[d] + (int64_t)ix[j]) * inner + b];
	return t;
}

struct tensor *ref_index_add(struct tensor *const *in, const struct op_row *r)
{
	const struct tensor *dst = in[0], *idx = in[1];
	int d = r->dim;
	int64_t outer, inner, ni = tensor_numel(idx);
	around(dst, d, &outer, &inner);
	double *o;
	struct tensor *t = out_new(dst->ndim, dst->shape, &o);
	memcpy(o, vals(dst), sizeof *o * (size_t)tensor_numel(t));
	const double *s = vals(in[2]), *ix = vals(idx);
	for (int64_t a = 0; a < outer; a++)
		for (int64_t j = 0; j < ni; j++)
			for (int64_t b = 0; b < inner; b++)
				o[(a * dst->shape[d] + (int64_t)ix[j]) * inner + b] +=
				    s[(a * ni + j) * inner + b];
	return t;
}

/* The position in t (row-major) of idx's element at multi-index ii with dim d
 * replaced by v. */
static int64_t at_dim(const struct tensor *t, const int64_t *ii, int d, int64_t v)
{
	int64_t p = 0;
	for (int k = 0; k < t->ndim; k++)
		p = p * t->shape[k] + (k == d ? v : ii[k]);
	return p;
}

struct tensor *ref_gather(struct tensor *const *in, const struct op_row *r)
{
	const struct tensor *src = in[0], *idx = in[1];
	int64_t ii[TENSOR_MAX_DIMS];
	double *o;
	struct tensor *t = out_new(idx->ndim, idx->shape, &o);
	const double *s = vals(src), *ix = vals(idx);
	for (int64_t i = 0; i < tensor_numel(t); i++) {
		unravel(i, idx->ndim, idx->shape, ii);
		o[i] = s[at_dim(src, ii, r->dim, (int64_t)ix[i])];
	}
	return t;
}

struct tensor *ref_scatter_add(struct tensor *const *in, const struct op_row *r)
{
	const struct tensor *dst = in[0], *idx = in[1];
	int64_t ii[TENSOR_MAX_DIMS];
	double *o;
	struct tensor *t = out_new(dst->ndim, dst->shape, &o);
	memcpy(o, vals(dst), sizeof *o * (size_t)tensor_numel(t));
	const double *s = vals(in[2]), *ix = vals(idx);
	for (int64_t i = 0; i < tensor_numel(idx); i++) {
		unravel(i, idx->ndim, idx->shape, ii);
		int64_t src_at = 0;
		for (int k = 0; k < in[2]->ndim; k++)
			src_at = src_at * in[2]->shape[k] + ii[k];
		o[at_dim(dst, ii, r->dim, (int64_t)ix[i])] += s[src_at];
	}
	return t;
}

/* ---- optimizers ---------------------------------------------------------------------- */

/* Three AdamW steps as op_adamw takes them (PyTorch's AdamW). */
struct tensor *ref_adamw(struct tensor *const *in, const struct op_row *r)
{
	(void)r;
	int64_t n = tensor_numel(in[0]);
	double *p, *m, *v;
	struct tensor *tp = out_new(1, &n, &p), *tm = out_new(1, &n, &m), *tv = out_new(1, &n, &v);
	memcpy(p, vals(in[0]), sizeof *p * (size_t)n);
	memcpy(m, vals(in[1]), sizeof *m * (size_t)n);
	memcpy(v, vals(in[2]), sizeof *v * (size_t)n);
	const double *g = vals(in[3]), lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
	for (int t = 1; t <= 3; t++) {
		double c1 = 1 - pow(b1, t), c2 = 1 - pow(b2, t);
		for (int64_t i = 0; i < n; i++) {
			m[i] = b1 * m[i] + (1 - b1) * g[i];
			v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
			p[i] = p[i] * (1 - lr * wd) - lr * (m[i] / c1) / (sqrt(v[i] / c2) + eps);
		}
	}
	return flat(3, (struct tensor *[]){ tp, tm, tv });
}

/* Three SGD steps as op_sgd takes them: d = g + wd p; b = mu b + d (d = b); p -= lr d. */
struct tensor *ref_sgd(struct tensor *const *in, const struct op_row *r)
{
	int64_t n = tensor_numel(in[0]);
	double *p, *b;
	struct tensor *tp = out_new(1, &n, &p), *tb = out_new(1, &n, &b);
	memcpy(p, vals(in[0]), sizeof *p * (size_t)n);
	const double *g = vals(in[1]);
	for (int t = 1; t <= 3; t++)
		for (int64_t i = 0; i < n; i++) {
			double d = g[i] + 1e-3 * p[i];
			if (r->op)
				d = b[i] = 0.9 * b[i] + d;
			p[i] -= 0.1 * d;
		}
	return r->op ? flat(2, (struct tensor *[]){ tp, tb }) : tp;
}

/* ---- the rest ------------------------------------------------------------------------ */

/* x [B, Ci, L], w [Co, Ci, K], bias [Co] or none; stride r->op, padding r->alpha. */
struct tensor *ref_conv1d(struct tensor *const *in, const struct op_row *r)
{
	const struct tensor *x = in[0], *w = in[1];
	int64_t B = x->shape[0], ci = x->shape[1], L = x->shape[2], co = w->shape[0],
		K = w->shape[2], st = r->op, pad = (int64_t)r->alpha;
	int64_t lo = (L + 2 * pad - K) / st + 1, shape[3] = { B, co, lo };
	double *o;
	struct tensor *t = out_new(3, shape, &o);
	const double *px = vals(x), *pw = vals(w), *pb = r->nin > 2 ? vals(in[2]) : NULL;
	for (int64_t b = 0; b < B; b++)
		for (int64_t c = 0; c < co; c++)
			for (int64_t j = 0; j < lo; j++) {
				double s = pb ? pb[c] : 0;
				for (int64_t i = 0; i < ci; i++)
					for (int64_t k = 0; k < K; k++) {
						int64_t l = j * st + k - pad;
						if (l >= 0 && l < L)
							s += px[(b * ci + i) * L + l] *
							     pw[(c * ci + i) * K + k];
					}
				o[(b * co + c) * lo + j] = s;
			}
	return t;
}

/* contiguous and cast to f64: the values; cast to i32: truncated toward zero. */
struct tensor *ref_copy(struct tensor *const *in, const struct op_row *r)
{
	double *o;
	struct tensor *t = out_new(in[0]->ndim, in[0]->shape, &o);
	const double *x = vals(in[0]);
	for (int64_t i = 0; i < tensor_numel(t); i++)
		o[i] = r->op == 2 ? trunc(x[i]) : x[i];
	return t;
}

struct tensor *ref_concat(struct tensor *const *in, const struct op_row *r)
{
	int d = r->dim;
	int64_t shape[TENSOR_MAX_DIMS], outer, inner;
	memcpy(shape, in[0]->shape, sizeof shape);
	shape[d] += in[1]->shape[d];
	around(in[0], d, &outer, &inner);
	double *o;
	struct tensor *t = out_new(in[0]->ndim, shape, &o);
	for (int64_t a = 0; a < outer; a++)
		for (int k = 0; k < 2; k++) {
			int64_t n = in[k]->shape[d] * inner;
			memcpy(o, vals(in[k]) + a * n, sizeof *o * (size_t)n);
			o += n;
		}
	return t;
}

bool ref_dropout_keep(uint64_t seed, uint64_t i, double p)
{
	struct philox4 r = philox4x32(seed, i / 16 * 4 + i % 4);
	return (double)r.v[i / 4 % 4] >= ceil(p * 4294967296.0);
}

/* x keep / (1 - p) with keep = ref_dropout_keep(99, i, 0.3), twice (as op_dropout). */
struct tensor *ref_dropout(struct tensor *const *in, const struct op_row *r)
{
	(void)r;
	double *o;
	struct tensor *t = out_new(in[0]->ndim, in[0]->shape, &o);
	const double *x = vals(in[0]);
	for (int64_t i = 0; i < tensor_numel(t); i++)
		o[i] = ref_dropout_keep(99, (uint64_t)i, 0.3) ? x[i] / 0.7 : 0;
	return flat(2, (struct tensor *[]){ t, t });
}
