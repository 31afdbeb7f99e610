/* tensor_matmul: broadcasting batched C = A·B over strided views, one gemm slot call per
 * run of batch dims that steps with one stride. */
#include <string.h>

#include "backend.h"

#define OP "matmul"

/* Whether BLAS can take the matrix (last two dims) of t by its strides: a unit stride in
 * one dim and rows / columns that do not overlap. A size-1 dim's stride does not matter. */
static bool matrix_ok(const struct tensor *t)
{
	int nd = t->ndim;
	int64_t r = t->shape[nd - 2], c = t->shape[nd - 1];
	int64_t rs = t->strides[nd - 2], cs = t->strides[nd - 1];
	if (r <= 1 || c <= 1)
		return (r <= 1 || rs > 0) && (c <= 1 || cs > 0);
	return (cs == 1 && rs >= c) || (rs == 1 && cs >= r);
}

/* Give the size-1 dims of an r x c matrix strides that every BLAS accepts. */
static void matrix_fix_strides(int64_t r, int64_t c, int64_t *rs, int64_t *cs)
{
	if (r == 1 && c == 1)
		*rs = *cs = 1;
	else if (r == 1)
		*rs = *cs == 1 ? c : 1;
	else if (c == 1)
		*cs = *rs == 1 ? r : 1;
}

/* Whether dims [s, e) of t step as one dim; its stride goes to *stride (0 when they
 * are all broadcast or of size 1). */
static bool batch_collapse(const struct tensor *t, int s, int e, int64_t *stride)
{
	int64_t expect = -1;
	*stride = 0;
	for (int d = e - 1; d >= s; d--) {
		if (t->shape[d] == 1)
			continue;
		if (expect < 0)
			*stride = t->strides[d];
		else if (t->strides[d] != expect)
			return false;
		expect = t->strides[d] * t->shape[d];
	}
	return true;
}

/* One gemm call's geometry: `nb` products of [m,k] x [k,n], each operand at element
 * offset off[] with batch stride sb[], row stride rs[] and column stride cs[]
 * (operands 0 = A, 1 = B, 2 = C). */
struct mm_call {
	int64_t nb, m, k, n;
	size_t off[3];
	int64_t sb[3], rs[3], cs[3];
};

/* A batch whose B is shared (batch stride 0) and whose A and C rows step evenly across
 * the batch is one product of [nb*m, k] x [k, n]: the Linear-layer case, which BLIS runs
 * far better as one call. */
static void call_fold(struct mm_call *g)
{
	if (g->nb <= 1 || g->sb[1] != 0)
		return;
	int64_t ra = g->m == 1 ? g->sb[0] : g->rs[0], rc = g->m == 1 ? g->sb[2] : g->rs[2];
	int64_t rows = g->nb * g->m;
	if (g->sb[0] != g->m * ra || g->sb[2] != g->m * rc || rc != g->n)
		return;
	struct tensor ta = { .ndim = 2, .shape = { rows, g->k }, .strides = { ra, g->cs[0] } };
	if (!matrix_ok(&ta))
		return;
	g->m = rows;
	g->nb = 1;
	g->rs[0] = ra;
	g->rs[2] = rc;
	g->sb[0] = g->sb[2] = 0;
}

/* The gemm slot call of v = {A, B, C} while a GEMM profile runs: timed between device
 * synchronizations and recorded (see tensor_gemm_profile_start). */
static int gemm_timed(const struct tensor_backend *be, struct tensor *const v[3], double beta)
{
	struct tensor_gemm_stat s = { .device = v[2]->storage->device,
				      .a_dtype = v[0]->dtype,
				      .b_dtype = v[1]->dtype,
				      .c_dtype = v[2]->dtype,
				      .batch = v[2]->shape[0],
				      .m = v[2]->shape[1],
				      .n = v[2]->shape[2],
				      .k = v[0]->shape[2],
				      .accumulate = beta != 0 };
	for (int i = 0; i < 3; i++)
		s.layout[i] = v[i]->strides[2] == 1 ? 'r' : 'c';
	int rc = be->synchronize();
	double t0 = gemm_profile_clock();
	if (rc == TENSOR_OK)
		rc = be->gemm(v[2], v[0], v[1], 1.0, beta);
	if (rc == TENSOR_OK)
		rc = be->synchronize();
	if (rc == TENSOR_OK)
		gemm_profile_record(&s, gemm_profile_clock() - t0);
	return rc;
}

static int call_gemm(const struct tensor_backend *be, const struct tensor *const ops[3],
		     struct mm_call *g, double beta)
{
	call_fold(g);
	int64_t rows[3] = { g->m, g->k, g->m }, cols[3] = { g->k, g->n, g->n };
	struct tensor *v[3] = { NULL, NULL, NULL };
	int rc = TENSOR_OK;
	for (int i = 0; i < 3 && rc == TENSOR_OK; i++) {
		matrix_fix_strides(rows[i], cols[i], &g->rs[i], &g->cs[i]);
		int64_t sh[3] = { g->nb, rows[i], cols[i] },
			st[3] = { g->sb[i], g->rs[i], g->cs[i] };
		v[i] = tensor_new_view(ops[i], 3, sh, st, g->off[i]);
		if (!v[i])
			rc = tensor_last_status();
	}
	if (rc == TENSOR_OK)
		rc = gemm_profile_running() ? gemm_timed(be, v, beta)
					    : be->gemm(v[2], v[0], v[1], 1.0, beta);
	for (int i = 0; i < 3; i++)
		tensor_free(v[i]);
	return rc;
}

/* The run of batch dims [*s, *e) that goes into one gemm call: a run that steps with one
 * stride in each of A, B and C, holding the most products (a run over which C is shared,
 * stride 0, counts as one: its products are added one by one); the innermost on ties. So a
 * product of split-heads views [B,H,n,d], whose B and H do not step as one, runs B products
 * a call rather than H. sb receives each operand's stride over the run (0 for none). */
static void batch_run(const struct tensor *const ops[3], int nbat, int *s, int *e, int64_t sb[3])
{
	int64_t best = 0;
	*s = *e = nbat;
	sb[0] = sb[1] = sb[2] = 0;
	for (int hi = nbat; hi > 0; hi--) {
		for (int lo = hi - 1; lo >= 0; lo--) {
			int64_t st[3], count = 1;
			if (!(batch_collapse(ops[0], lo, hi, &st[0]) &&
			      batch_collapse(ops[1], lo, hi, &st[1]) &&
			      batch_collapse(ops[2], lo, hi, &st[2])))
				break; /* a longer run does not step as one either */
			for (int d = lo; d < hi && st[2] != 0; d++)
				count *= ops[2]->shape[d];
			if (count > best) {
				best = count;
				*s = lo;
				*e = hi;
				memcpy(sb, st, sizeof st);
			}
		}
	}
}

/* C = A·B for Ae [batch..., m, k], Be [batch..., k, n] (broadcast views), C [batch..., m, n]
 * of any strides (C = A·B + beta C): the batch dims of batch_run go to one gemm call, the
 * others are looped over. */
static int matmul_batched(const struct tensor_backend *be, const struct tensor *ae,
			  const struct tensor *bmat, const struct tensor *c, double beta)
{
	int nbat = c->ndim - 2, s, e;
	const struct tensor *ops[3] = { ae, bmat, c };
	struct mm_call g = { .m = c->shape[nbat],
			     .k = ae->shape[nbat + 1],
			     .n = c->shape[nbat + 1] };
	batch_run(ops, nbat, &s, &e, g.sb);
	int64_t outer = 1, idx[TENSOR_MAX_DIMS] = { 0 };
	g.nb = 1;
	for (int d = 0; d < nbat; d++)
		*(d < s || d >= e ? &outer : &g.nb) *= c->shape[d];
	for (int64_t o = 0; o < outer; o++) {
		struct mm_call call = g;
		int64_t r = o;
		for (int d = nbat - 1; d >= 0; d--) {
			if (d >= s && d < e)
				continue;
			idx[d] = r % c->shape[d];
			r /= c->shape[d];
		}
		for (int i = 0; i < 3; i++) {
			int64_t off = (int64_t)ops[i]->offset;
			for (int d = 0; d < nbat; d++)
				if (d < s || d >= e)
					off += idx[d] * ops[i]->strides[d];
			call.off[i] = (size_t)off;
			call.rs[i] = ops[i]->strides[nbat];
			call.cs[i] = ops[i]->strides[nbat + 1];
		}
		int rc = call_gemm(be, ops, &call, beta);
		if (rc < 0)
			return rc;
	}
	return TENSOR_OK;
}

/* t as a matrix stack: a 1-d row [k] becomes [1,k], a 1-d column [k] becomes [k,1]; made
 * contiguous when BLAS cannot take its strides. */
static struct tensor *as_matrix(const struct tensor *t, bool column)
{
	struct tensor *v;
	if (t->ndim == 1) {
		int64_t sh[2] = { column ? t->shape[0] : 1, column ? 1 : t->shape[0] };
		int64_t st[2] = { column ? t->strides[0] : t->shape[0] * t->strides[0],
				  column ? 1 : t->strides[0] };
		v = tensor_new_view(t, 2, sh, st, t->offset);
	} else {
		v = tensor_alias(t);
	}
	if (v && !matrix_ok(v)) {
		struct tensor *c = tensor_contiguous(v);
		tensor_free(v);
		v = c;
	}
	return v;
}

/* Batch shape of A [..., m, k] x B [..., k, n] into out; returns its ndim or -1. */
static int batch_shape(const struct tensor *a, const struct tensor *b, const struct tensor *a0,
		       const struct tensor *b0, int64_t *out)
{
	int na = a->ndim - 2, nb = b->ndim - 2, n = na > nb ? na : nb;
	for (int i = 0; i < n; i++) {
		int ia = i - (n - na), ib = i - (n - nb);
		int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
		if (sa != sb && sa != 1 && sb != 1) {
			char ba[128], bb[128];
			tensor_error(TENSOR_ERR_SHAPE,
				     "matmul: batch dims do not broadcast: %s x %s, expected "
				     "equal batch sizes or 1",
				     tensor_shape_str(a0, ba, sizeof ba),
				     tensor_shape_str(b0, bb, sizeof bb));
			return -1;
		}
		out[i] = sa == 1 ? sb : sa;
	}
	return n;
}

/* ---- precision of f32 products -------------------------------------------- */

static _Thread_local enum tensor_dtype f32_precision = TENSOR_F32;

int tensor_set_matmul_precision(enum tensor_dtype dt)
{
	if (dt != TENSOR_F32 && dt != TENSOR_BF16)
		return tensor_error(TENSOR_ERR_DTYPE,
				    "tensor_set_matmul_precision: expected f32 or bf16, got %s",
				    tensor_dtype_name(dt));
	f32_precision = dt;
	return TENSOR_OK;
}

enum tensor_dtype tensor_matmul_precision(void)
{
	return f32_precision;
}

bool tensor_matmul_in_bf16(const struct tensor *a, const struct tensor *b)
{
	bool f32_or_bf16 = (a->dtype == TENSOR_F32 || a->dtype == TENSOR_BF16) &&
			   (b->dtype == TENSOR_F32 || b->dtype == TENSOR_BF16);
	return f32_or_bf16 &&
	       (a->dtype == TENSOR_BF16 || b->dtype == TENSOR_BF16 || f32_precision == TENSOR_BF16);
}

/* One f32 and one bf16 operand: a bf16 product with an f32 result. */
static bool mixed_pair(const struct tensor *a, const struct tensor *b)
{
	return (a->dtype == TENSOR_F32 && b->dtype == TENSOR_BF16) ||
	       (a->dtype == TENSOR_BF16 && b->dtype == TENSOR_F32);
}

/* The dtype a product of a and b returns by default: theirs, f32 for a mixed pair. */
static enum tensor_dtype product_dtype(const struct tensor *a, const struct tensor *b)
{
	return a && b && mixed_pair(a, b) ? TENSOR_F32 : a ? a->dtype : TENSOR_F32;
}

static bool out_dtype_ok(const struct tensor *a, const struct tensor *b, enum tensor_dtype out)
{
	if (mixed_pair(a, b))
		return out == TENSOR_F32;
	return out == a->dtype || (a->dtype == TENSOR_BF16 && out == TENSOR_F32);
}

static int matmul_check(const struct tensor *a, const struct tensor *b, enum tensor_dtype out_dt)
{
	bool mixed_ok = a && b && mixed_pair(a, b) && a->storage->device == b->storage->device;
	int rc = mixed_ok ? TENSOR_OK : tensor_check_pair(OP, a, b);
	if (rc < 0)
		return rc;
	char ba[128], bb[128];
	tensor_shape_str(a, ba, sizeof ba);
	tensor_shape_str(b, bb, sizeof bb);
	if (a->dtype != TENSOR_F32 && a->dtype != TENSOR_F64 && a->dtype != TENSOR_BF16)
		return tensor_error(TENSOR_ERR_DTYPE,
				    "matmul: %s %s x %s %s, expected f32, f64 or bf16 inputs", ba,
				    tensor_dtype_name(a->dtype), bb, tensor_dtype_name(b->dtype));
	if (!out_dtype_ok(a, b, out_dt))
		return tensor_error(TENSOR_ERR_DTYPE,
				    "matmul: %s %s x %s %s cannot give a %s result, expected %s%s",
				    ba, tensor_dtype_name(a->dtype), bb,
				    tensor_dtype_name(b->dtype), tensor_dtype_name(out_dt),
				    tensor_dtype_name(product_dtype(a, b)),
				    a->dtype == TENSOR_BF16 && !mixed_pair(a, b) ? " or f32" : "");
	if (a->ndim == 0 || b->ndim == 0)
		return tensor_error(TENSOR_ERR_SHAPE,
				    "matmul: 0-d operand: %s x %s, expected at least 1-d", ba, bb);
	int64_t k = a->shape[a->ndim - 1], kb = b->shape[b->ndim == 1 ? 0 : b->ndim - 2];
	if (k != kb)
		return tensor_error(TENSOR_ERR_SHAPE,
				    "matmul: inner dims differ: %s x %s, expected A [..., m, k] x "
				    "B [..., k, n] (k = %lld vs %lld)",
				    ba, bb, (long long)k, (long long)kb);
	return TENSOR_OK;
}

/* Whether t broadcasts to (ndim, shape): trailing dims equal or 1. */
static bool broadcasts_to(const struct tensor *t, int ndim, const int64_t *shape)
{
	if (t->ndim > ndim)
		return false;
	for (int i = 0; i < t->ndim; i++) {
		int64_t n = t->shape[i], want = shape[ndim - t->ndim + i];
		if (n != want && n != 1)
			return false;
	}
	return true;
}

/* order: a permutation of the result's dims, each once (TENSOR_ERR_ARG). */
static int check_order(const int *order, int nd)
{
	int seen = 0;
	for (int d = 0; order && d < nd; d++) {
		if (order[d] < 0 || order[d] >= nd || (seen & (1 << order[d])))
			return tensor_error(TENSOR_ERR_ARG,
					    "matmul_laid_out: order is not a permutation of the "
					    "product's %d dims",
					    nd);
		seen |= 1 << order[d];
	}
	return TENSOR_OK;
}

/* A·B as dtype out_dt, plus add (broadcast to the result, of dtype out_dt) when not NULL:
 * the result starts as add and the GEMM accumulates into it. order: the result's memory
 * layout (see tensor_new_laid_out). sum: the products summed over the batch into one [m, n]
 * (a zeroed result seen with batch strides 0, which the gemm slot accumulates into). */
static struct tensor *matmul_impl(const struct tensor *a, const struct tensor *b,
				  const struct tensor *add, const int *order,
				  enum tensor_dtype out_dt, bool sum)
{
	if (!a || !b)
		return NULL;
	/* the differentiable form of each public entry */
	const char *name = sum	   ? "matmul_sum_to"
			   : add   ? "matmul_add"
			   : order ? "matmul_laid_out"
				   : "matmul";
	const char *use = sum ? NULL : add ? "nn_linear_forward or ag_add(ag_matmul(a, b), c)" : "";
	if (tensor_check_operand(name, use, "a", a) < 0 ||
	    tensor_check_operand(name, use, "b", b) < 0 ||
	    tensor_check_operand(name, use, "c", add) < 0)
		return NULL;
	if (matmul_check(a, b, out_dt) < 0)
		return NULL;
	if (sum && (a->ndim < 2 || b->ndim < 2)) {
		char ba[128], bb[128];
		tensor_error(
		    TENSOR_ERR_SHAPE, "matmul_sum: %s x %s, expected operands of at least 2 dims",
		    tensor_shape_str(a, ba, sizeof ba), tensor_shape_str(b, bb, sizeof bb));
		return NULL;
	}
	if (add && add->storage->device != a->storage->device)
		return tensor_check_pair(OP, a, add), NULL; /* the device error */
	if (add && add->dtype != out_dt) {
		char bc[128];
		tensor_error(TENSOR_ERR_DTYPE,
			     "matmul_add: c %s is %s, expected %s (the product's)",
			     tensor_shape_str(add, bc, sizeof bc), tensor_dtype_name(add->dtype),
			     tensor_dtype_name(out_dt));
		return NULL;
	}
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(a->storage->device, gemm, OP);
	if (!be)
		return NULL;

	struct tensor *am = as_matrix(a, false), *bm = as_matrix(b, true);
	struct tensor *ae = NULL, *bme = NULL, *c = NULL, *out = NULL;
	int64_t bshape[TENSOR_MAX_DIMS], sh[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
	int nbat = am && bm ? batch_shape(am, bm, a, b, bshape) : -1;
	if (nbat < 0)
		goto done;
	int64_t m = am->shape[am->ndim - 2], k = am->shape[am->ndim - 1];
	int64_t n = bm->shape[bm->ndim - 1];

	/* result shape: batch, then m unless A is 1-d, then n unless B is 1-d */
	int ond = nbat;
	memcpy(sh, bshape, sizeof(int64_t) * (size_t)nbat);
	if (a->ndim > 1)
		sh[ond++] = m;
	if (b->ndim > 1)
		sh[ond++] = n;
	if (check_order(order, ond) < 0)
		goto done;
	out = sum ? tensor_zeros(out_dt, a->storage->device, 2, sh + nbat)
		  : tensor_new_laid_out(out_dt, a->storage->device, ond, sh, order);
	if (!out)
		goto done;
	if (add && !broadcasts_to(add, ond, sh)) {
		char bc[128], bo[128];
		tensor_error(
		    TENSOR_ERR_SHAPE, "matmul_add: c %s does not broadcast to the product %s",
		    tensor_shape_str(add, bc, sizeof bc), tensor_shape_str(out, bo, sizeof bo));
		tensor_free(out);
		out = NULL;
		goto done;
	}
	if (add && tensor_copy_(out, add) < 0) {
		tensor_free(out);
		out = NULL;
		goto done;
	}

	sh[nbat] = m;
	sh[nbat + 1] = k;
	ae = tensor_broadcast_to(am, nbat + 2, sh);
	sh[nbat] = k;
	sh[nbat + 1] = n;
	bme = tensor_broadcast_to(bm, nbat + 2, sh);
	sh[nbat] = m;
	int64_t stride = 1;
	for (int d = nbat + 1; d >= 0; d--) {
		st[d] = stride;
		stride *= sh[d];
	}
	if (order) /* both operands at least 2-d: out has the shape sh */
		memcpy(st, out->strides, sizeof(int64_t) * (size_t)(nbat + 2));
	for (int d = 0; d < nbat && sum; d++)
		st[d] = 0;
	c = tensor_new_view(out, nbat + 2, sh, st, out->offset);
	if (!ae || !bme || !c ||
	    (tensor_numel(c) > 0 && matmul_batched(be, ae, bme, c, add || sum ? 1.0 : 0.0) < 0)) {
		tensor_free(out);
		out = NULL;
	}
done:
	tensor_free(c);
	tensor_free(bme);
	tensor_free(ae);
	tensor_free(bm);
	tensor_free(am);
	return out;
}

struct tensor *tensor_matmul(const struct tensor *a, const struct tensor *b)
{
	return a ? matmul_impl(a, b, NULL, NULL, product_dtype(a, b), false) : NULL;
}

struct tensor *tensor_matmul_to(const struct tensor *a, const struct tensor *b,
				enum tensor_dtype dt)
{
	return a ? matmul_impl(a, b, NULL, NULL, dt, false) : NULL;
}

struct tensor *tensor_matmul_sum_to(const struct tensor *a, const struct tensor *b,
				    enum tensor_dtype dt)
{
	return a ? matmul_impl(a, b, NULL, NULL, dt, true) : NULL;
}

struct tensor *tensor_matmul_add(const struct tensor *a, const struct tensor *b,
				 const struct tensor *c)
{
	if (!a || !c)
		return NULL;
	bool both_bf16 = b && a->dtype == TENSOR_BF16 && b->dtype == TENSOR_BF16;
	return matmul_impl(a, b, c, NULL, both_bf16 ? c->dtype : product_dtype(a, b), false);
}

struct tensor *tensor_matmul_laid_out(const struct tensor *a, const struct tensor *b,
				      const int *order)
{
	return a ? tensor_matmul_laid_out_to(a, b, order, product_dtype(a, b)) : NULL;
}

struct tensor *tensor_matmul_laid_out_to(const struct tensor *a, const struct tensor *b,
					 const int *order, enum tensor_dtype dt)
{
	if (!a || !b)
		return NULL;
	if (!order || a->ndim < 2 || b->ndim < 2) {
		char ba[128], bb[128];
		tensor_error(TENSOR_ERR_ARG,
			     "matmul_laid_out: a %s and b %s must be at least 2-d, and order "
			     "not NULL",
			     tensor_shape_str(a, ba, sizeof ba),
			     tensor_shape_str(b, bb, sizeof bb));
		return NULL;
	}
	return matmul_impl(a, b, NULL, order, dt, false);
}
