/* Helpers shared by test_ops_elementwise.c and test_ops_where.c: tensors of given
 * values and layouts, references over broadcast indices, tolerances. */
#ifndef CFORMER_TESTS_ELEMENTWISE_COMMON_H
#define CFORMER_TESTS_ELEMENTWISE_COMMON_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define LEN(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const enum tensor_dtype float_dts[] = { TENSOR_F32, TENSOR_F64 };
static const enum tensor_dtype int_dts[] = { TENSOR_I32, TENSOR_I64 };
static const enum tensor_dtype all_dts[] = { TENSOR_F32, TENSOR_F64, TENSOR_I32, TENSOR_I64 };

/* ---- helpers --------------------------------------------------------------- */

static inline int64_t numel_of(int nd, const int64_t *shape)
{
	int64_t n = 1;
	for (int i = 0; i < nd; i++)
		n *= shape[i];
	return n;
}

/* A contiguous tensor of dtype dt holding v[] (row-major), rounded to dt. */
static inline struct tensor *make(enum tensor_dtype dt, int nd, const int64_t *shape,
				  const double *v)
{
	int64_t n = numel_of(nd, shape);
	size_t es = tensor_dtype_size(dt);
	char *buf = malloc((size_t)n * es + 8);
	ck_assert(buf != NULL);
	for (int64_t i = 0; i < n; i++) {
		char *p = buf + (size_t)i * es;
		switch (dt) {
		case TENSOR_F32: *(float *)p = (float)v[i]; break;
		case TENSOR_F64: *(double *)p = v[i]; break;
		case TENSOR_I32: *(int32_t *)p = (int32_t)v[i]; break;
		default: *(int64_t *)p = (int64_t)v[i]; break;
		}
	}
	struct tensor *t = tensor_from_data(dt, TENSOR_CPU, nd, shape, buf);
	free(buf);
	ck_assert_msg(t != NULL, "%s", tensor_last_error());
	return t;
}

/* Values v[i] = f(u) for u uniform in [-1, 1), seeded. */
static inline double *rand_values(int64_t n, uint64_t seed)
{
	const int64_t s[1] = { n };
	double *v = tu_values(tu_rand(TENSOR_F64, 1, s, seed));
	return v;
}

enum layout { CONTIG, STRIDED, TRANSPOSED, SLICED, NLAYOUTS };
static const char *const layout_name[] = { "contiguous", "strided", "transposed", "sliced" };

/* c's values in layout lay: a view with reversed strides, a transposed view of
 * the last two dims, or every other element of a wider buffer (inner stride 2,
 * offset 1). Falls back to another layout where the dims do not allow it. */
static inline struct tensor *in_layout(const struct tensor *c, enum layout lay)
{
	int nd = c->ndim;
	int64_t s[TENSOR_MAX_DIMS];
	struct tensor *view;
	if (lay == TRANSPOSED && nd < 2)
		lay = SLICED;
	if (lay == SLICED && nd < 1)
		lay = CONTIG;
	memcpy(s, c->shape, sizeof(int64_t) * (size_t)nd);
	switch (lay) {
	case CONTIG: return (struct tensor *)c;
	case STRIDED: return tu_strided(c);
	case TRANSPOSED:
		s[nd - 2] = c->shape[nd - 1];
		s[nd - 1] = c->shape[nd - 2];
		view = tensor_transpose(tensor_zeros(c->dtype, TENSOR_CPU, nd, s), nd - 2, nd - 1);
		break;
	default:
		s[nd - 1] = 2 * c->shape[nd - 1] + 1;
		view = tensor_slice(tensor_zeros(c->dtype, TENSOR_CPU, nd, s), nd - 1, 1, s[nd - 1],
				    2);
		break;
	}
	ck_assert_msg(view != NULL, "%s", tensor_last_error());
	ck_assert_int_eq(tensor_copy_(view, c), TENSOR_OK);
	return view;
}

/* Assert got (contiguous, shape (nd, shape), dtype dt) holds want[] within
 * tol (1 + |want|) (NaN matches NaN, inf matches inf of the same sign), and
 * name the case ctx when it does not. */
static inline void assert_values(const char *ctx, const struct tensor *got, enum tensor_dtype dt,
				 int nd, const int64_t *shape, const double *want, double tol)
{
	ck_assert_msg(got != NULL, "%s: NULL: %s", ctx, tensor_last_error());
	tu_assert_shape(got, nd, shape);
	ck_assert_msg(got->dtype == dt, "%s: dtype %s", ctx, tensor_dtype_name(got->dtype));
	ck_assert_msg(tensor_is_contiguous(got), "%s: result not contiguous", ctx);
	int64_t n = numel_of(nd, shape);
	double *v = tu_values(got);
	for (int64_t i = 0; i < n; i++) {
		double g = v[i], w = want[i];
		bool ok = (isnan(w) && isnan(g)) || (isinf(w) && g == w) ||
			  fabs(g - w) <= tol + tol * fabs(w);
		if (!ok) {
			free(v);
			ck_abort_msg("%s: element %lld: got %.10g, want %.10g", ctx, (long long)i,
				     g, w);
		}
	}
	free(v);
}

static inline double tol_of(enum tensor_dtype dt)
{
	return dt == TENSOR_F32 ? tu_tol(dt) : 1e-12;
}

/* Row-major position in t (of rank <= nd, broadcast to nd dims) of the
 * broadcast multi-index idx. */
static inline int64_t bcast_index(const struct tensor *t, int nd, const int64_t *idx)
{
	int64_t r = 0;
	for (int d = 0; d < t->ndim; d++) {
		int64_t i = idx[nd - t->ndim + d];
		r = r * t->shape[d] + (t->shape[d] == 1 ? 0 : i);
	}
	return r;
}

/* Exact int64 contents of an integer tensor (tu_values goes through double). */
static inline void int_values(const struct tensor *t, int64_t *out)
{
	struct tensor *c = tensor_cast(t, TENSOR_I64);
	ck_assert(c != NULL);
	ck_assert_int_eq(tensor_to_host(c, out, sizeof(int64_t) * (size_t)tensor_numel(c)),
			 TENSOR_OK);
}

/* Operand values for op: multiples of 1/4 in [-1, 1] (so comparisons see
 * ties), shifted away from 0 for a divisor and positive for a power base. */
static inline struct tensor *binary_input(enum tensor_dtype dt, enum tensor_binary_op op, bool rhs,
					  int nd, const int64_t *shape, uint64_t seed)
{
	int64_t n = numel_of(nd, shape);
	double *v = rand_values(n ? n : 1, seed);
	bool is_int = dt == TENSOR_I32 || dt == TENSOR_I64;
	for (int64_t i = 0; i < n; i++) {
		double q = round(4 * v[i]) / 4;
		if (is_int)
			q = round(6 * v[i]);
		else if (op == TENSOR_DIV && rhs)
			q = q < 0 ? q - 0.25 : q + 0.25;
		else if (op == TENSOR_POW && !rhs)
			q = fabs(q) + 0.25;
		v[i] = op == TENSOR_POW && rhs ? 2 * q : q;
	}
	struct tensor *t = make(dt, nd, shape, v);
	free(v);
	return t;
}

#endif
