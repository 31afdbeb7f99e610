/* test_ops: the indexing and joining ops beside the op table's rows:
 * index_select, index_add_, gather, scatter_add_, concat, stack and split
 * against naive loops, in every layout and index dtype, duplicates, empty and
 * broadcast cases, plus the errors. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "test_ops.h"

static const enum tensor_dtype DTS[] = { TENSOR_F32, TENSOR_F64, TENSOR_I32, TENSOR_I64 };
static const enum tensor_dtype IDTS[] = { TENSOR_I32, TENSOR_I64 };

/* ---- helpers ---------------------------------------------------------------- */

static uint64_t lcg(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 33;
}

/* A tensor of dtype dt holding the n doubles v (row-major). */
static struct tensor *mk(enum tensor_dtype dt, int nd, const int64_t *shape, const double *v)
{
	int64_t n = 1;
	for (int i = 0; i < nd; i++)
		n *= shape[i];
	char *buf = malloc((size_t)(n ? n : 1) * 8);
	ck_assert(buf != NULL);
	for (int64_t i = 0; i < n; i++) {
		switch (dt) {
		case TENSOR_F32: ((float *)buf)[i] = (float)v[i]; break;
		case TENSOR_F64: ((double *)buf)[i] = v[i]; break;
		case TENSOR_I32: ((int32_t *)buf)[i] = (int32_t)v[i]; break;
		default: ((int64_t *)buf)[i] = (int64_t)v[i]; break;
		}
	}
	struct tensor *t = tensor_from_data(dt, TENSOR_CPU, nd, shape, buf);
	free(buf);
	ck_assert_msg(t != NULL, "mk: %s", tensor_last_error());
	return t;
}

/* Random values: uniform [-1, 1) for floats, integers in [-100, 100] else. */
static struct tensor *rnd(enum tensor_dtype dt, int nd, const int64_t *shape, uint64_t seed)
{
	if (dt == TENSOR_F32 || dt == TENSOR_F64)
		return tu_rand(dt, nd, shape, seed);
	int64_t n = 1;
	for (int i = 0; i < nd; i++)
		n *= shape[i];
	double *v = calloc((size_t)(n ? n : 1), sizeof(double));
	for (int64_t i = 0; i < n; i++)
		v[i] = (double)(lcg(&seed) % 201) - 100;
	struct tensor *t = mk(dt, nd, shape, v);
	free(v);
	return t;
}

/* Indices in [0, hi) (duplicates likely). */
static struct tensor *rnd_idx(enum tensor_dtype dt, int nd, const int64_t *shape, int64_t hi,
			      uint64_t seed)
{
	int64_t n = 1;
	for (int i = 0; i < nd; i++)
		n *= shape[i];
	double *v = calloc((size_t)(n ? n : 1), sizeof(double));
	for (int64_t i = 0; i < n; i++)
		v[i] = (double)(lcg(&seed) % (uint64_t)hi);
	struct tensor *t = mk(dt, nd, shape, v);
	free(v);
	return t;
}

enum layout { CONTIG, STRIDED, TRANSPOSED, SLICED, NLAYOUTS };

/* t's values in another layout: dims reversed in memory, last two dims
 * transposed, or every other element of a wider buffer. */
static struct tensor *as_layout(struct tensor *t, enum layout lay)
{
	int nd = t->ndim;
	int64_t sh[TENSOR_MAX_DIMS];
	memcpy(sh, t->shape, sizeof sh);
	struct tensor *v = t;
	if (lay == STRIDED || (lay == TRANSPOSED && nd < 2)) {
		v = tu_strided(t);
	} else if (lay == TRANSPOSED) {
		sh[nd - 1] = t->shape[nd - 2];
		sh[nd - 2] = t->shape[nd - 1];
		v = tensor_transpose(tensor_empty(t->dtype, TENSOR_CPU, nd, sh), -1, -2);
		ck_assert_int_eq(tensor_copy_(v, t), TENSOR_OK);
	} else if (lay == SLICED && nd > 0) {
		sh[nd - 1] *= 2;
		v = tensor_slice(tensor_full(t->dtype, TENSOR_CPU, nd, sh, 77), -1, 1, sh[nd - 1],
				 2);
		ck_assert_int_eq(tensor_copy_(v, t), TENSOR_OK);
	}
	ck_assert(v != NULL);
	if (lay != CONTIG && tensor_numel(t) > 1)
		ck_assert(!tensor_is_contiguous(v));
	return v;
}

static int64_t ravel(int nd, const int64_t *shape, const int64_t *ix)
{
	int64_t r = 0;
	for (int i = 0; i < nd; i++)
		r = r * shape[i] + ix[i];
	return r;
}

static int64_t numel_of(int nd, const int64_t *shape)
{
	int64_t n = 1;
	for (int i = 0; i < nd; i++)
		n *= shape[i];
	return n;
}

static double tol_of(enum tensor_dtype dt)
{
	return dt == TENSOR_F32 ? 1e-5 : dt == TENSOR_F64 ? 1e-12 : 0;
}

/* Assert the last error has status and names op and up to two more strings. */
static void assert_err(bool failed, int status, const char *op, const char *s1, const char *s2)
{
	const char *msg = tensor_last_error();
	if (s2)
		ck_assert_msg(strstr(msg, s2), "message '%s' lacks '%s'", msg, s2);
	tu_assert_error(failed, status, op, s1);
}

/* ---- index_select ------------------------------------------------------------ */

/* out = src.shape[:d] + idx.shape + src.shape[d+1:] with out[o, j, i] = src[o, idx[j], i]. */
static void check_index_select(const struct tensor *src, int dim, const struct tensor *idx)
{
	struct tensor *out = tensor_index_select(src, dim, idx);
	ck_assert_msg(out != NULL, "index_select: %s", tensor_last_error());
	int d = dim < 0 ? dim + src->ndim : dim, ni = idx->ndim, nd = src->ndim - 1 + ni;
	int64_t osh[TENSOR_MAX_DIMS], oi[TENSOR_MAX_DIMS], si[TENSOR_MAX_DIMS];
	for (int i = 0; i < nd; i++) {
		if (i < d)
			osh[i] = src->shape[i];
		else if (i < d + ni)
			osh[i] = idx->shape[i - d];
		else
			osh[i] = src->shape[i - ni + 1];
	}
	tu_assert_shape(out, nd, osh);
	ck_assert(tensor_is_contiguous(out));
	int64_t n = numel_of(nd, osh);
	double *sv = tu_values(src), *iv = tu_values(idx), *want = malloc(sizeof(double) * (n + 1));
	for (int64_t k = 0; k < n; k++) {
		tu_unravel(k, nd, osh, oi);
		for (int i = 0; i < src->ndim; i++)
			si[i] = i < d ? oi[i] : i > d ? oi[i + ni - 1] : 0;
		si[d] = (int64_t)iv[ravel(ni, idx->shape, oi + d)];
		want[k] = sv[ravel(src->ndim, src->shape, si)];
	}
	tu_assert_close(out, want, n, 0, 0);
	free(sv);
	free(iv);
	free(want);
}

START_TEST(test_index_select_layouts)
{
	const int64_t ssh[] = { 5, 4, 6 }, i1[] = { 7 }, i2[] = { 2, 3 };
	const int dims[] = { 0, 1, 2, -1, -3 };
	/* every dtype x index dtype x dim x layout */
	for (int c = 0; c < 4 * 2 * 5 * NLAYOUTS; c++) {
		int a = c % 4, b = c / 4 % 2, k = c / 8 % 5, lay = c / 40;
		int d = dims[k] < 0 ? dims[k] + 3 : dims[k];
		struct tensor *src = as_layout(rnd(DTS[a], 3, ssh, 11 + a), lay);
		struct tensor *x1 = rnd_idx(IDTS[b], 1, i1, ssh[d], 3 + k);
		struct tensor *x2 = rnd_idx(IDTS[b], 2, i2, ssh[d], 5 + k);
		check_index_select(src, dims[k], x1);
		check_index_select(src, dims[k], x2);
		check_index_select(src, dims[k], tu_strided(x2));
	}
}
END_TEST

START_TEST(test_index_select_broadcast_empty)
{
	const int64_t s1[] = { 5, 1, 6 }, s3[] = { 5, 4, 6 }, i1[] = { 4 }, i0[] = { 0 },
		      z[] = { 3, 0 };
	struct tensor *src = tensor_expand(tu_rand(TENSOR_F32, 3, s1, 1), 3, s3);
	const double iv[] = { 3, 0, 3, 1 };
	struct tensor *idx = mk(TENSOR_I64, 1, i1, iv);
	check_index_select(src, 0, idx);
	check_index_select(src, 1, idx);
	check_index_select(src, 2, idx);
	/* empty index, empty src rows, a 0-d index (drops the dim) */
	struct tensor *out = tensor_index_select(src, 1, mk(TENSOR_I32, 1, i0, iv));
	const int64_t want0[] = { 5, 0, 6 };
	tu_assert_shape(out, 3, want0);
	struct tensor *e = tensor_zeros(TENSOR_F64, TENSOR_CPU, 2, z);
	out = tensor_index_select(e, 0, mk(TENSOR_I64, 1, (int64_t[]){ 2 }, (double[]){ 2, 0 }));
	const int64_t want1[] = { 2, 0 };
	tu_assert_shape(out, 2, want1);
	struct tensor *scalar = mk(TENSOR_I64, 0, NULL, iv);
	check_index_select(src, 0, scalar);
	check_index_select(src, -1, scalar);
	ck_assert_int_eq(tensor_index_select(src, 0, scalar)->ndim, 2);
}
END_TEST

/* Embedding lookup: weight [V, C], ids [B, T] -> [B, T, C], on several thread counts. */
START_TEST(test_index_select_embedding_large)
{
	const int64_t wsh[] = { 1000, 256 }, ish[] = { 16, 256 };
	struct tensor *w = tu_rand(TENSOR_F32, 2, wsh, 42);
	struct tensor *ids = rnd_idx(TENSOR_I64, 2, ish, 1000, 9);
	const int threads[] = { 1, 2, 3 };
	for (int k = 0; k < 3; k++) {
		tensor_set_num_threads(threads[k]);
		check_index_select(w, 0, ids);
	}
	check_index_select(tensor_transpose(w, 0, 1), 1, tensor_select(ids, 0, 3));
	/* along the last dim: indices walked innermost, positions split among threads */
	const int64_t s2[] = { 256, 1000 }, i2[] = { 500 };
	check_index_select(tu_rand(TENSOR_F32, 2, s2, 3), 1, rnd_idx(TENSOR_I32, 1, i2, 1000, 1));
	tensor_set_num_threads(0);
}
END_TEST

/* ---- index_add_ ------------------------------------------------------------- */

/* dst[o, idx[j], i] += src[o, j, i]; dst (any layout) is checked in place. */
static void check_index_add(struct tensor *dst, int dim, const struct tensor *idx,
			    const struct tensor *src)
{
	int d = dim < 0 ? dim + dst->ndim : dim, ni = idx->ndim;
	double *want = tu_values(dst), *sv = tu_values(src), *iv = tu_values(idx);
	int64_t si[TENSOR_MAX_DIMS], di[TENSOR_MAX_DIMS];
	for (int64_t k = 0; k < tensor_numel(src); k++) {
		tu_unravel(k, src->ndim, src->shape, si);
		for (int i = 0; i < dst->ndim; i++)
			di[i] = i < d ? si[i] : i > d ? si[i + ni - 1] : 0;
		di[d] = (int64_t)iv[ravel(ni, idx->shape, si + d)];
		want[ravel(dst->ndim, dst->shape, di)] += sv[k];
	}
	int rc = tensor_index_add_(dst, dim, idx, src);
	ck_assert_msg(rc == TENSOR_OK, "index_add_: %s", tensor_last_error());
	double t = tol_of(dst->dtype);
	tu_assert_close(dst, want, tensor_numel(dst), t, t);
	free(want);
	free(sv);
	free(iv);
}

START_TEST(test_index_add_layouts)
{
	const int64_t dsh[] = { 5, 4, 6 };
	const int dims[] = { 0, 1, 2, -1, -2 };
	/* every dtype x index dtype x dim x dst layout x 1-d idx [9] / 2-d idx [2, 3] */
	for (int c = 0; c < 4 * 2 * 5 * NLAYOUTS * 2; c++) {
		int a = c % 4, b = c / 4 % 2, k = c / 8 % 5, lay = c / 40 % NLAYOUTS;
		int ni = 1 + c / (40 * NLAYOUTS), d = dims[k] < 0 ? dims[k] + 3 : dims[k];
		struct tensor *dst = as_layout(rnd(DTS[a], 3, dsh, 1 + a), lay);
		int64_t ish[2] = { ni == 1 ? 9 : 2, 3 }, ssh[4];
		struct tensor *idx = rnd_idx(IDTS[b], ni, ish, dsh[d], 7 + k);
		for (int i = 0, j = 0; i < 3; i++) {
			if (i != d) {
				ssh[j++] = dsh[i];
				continue;
			}
			for (int e = 0; e < ni; e++)
				ssh[j++] = ish[e];
		}
		/* the src layout varies with the dst one */
		struct tensor *src =
		    as_layout(rnd(DTS[a], 2 + ni, ssh, 3 + lay), (lay + 1) % NLAYOUTS);
		check_index_add(dst, dims[k], idx, src);
	}
}
END_TEST

START_TEST(test_index_add_duplicates_broadcast)
{
	/* explicit duplicates into zeros: row 1 gets three rows, row 0 one */
	const int64_t dsh[] = { 3, 2 }, ish[] = { 4 }, ssh[] = { 4, 2 };
	const double iv[] = { 1, 1, 0, 1 }, sv[] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	const double want[] = { 5, 6, 1 + 3 + 7, 2 + 4 + 8, 0, 0 };
	for (int a = 0; a < 4; a++) {
		struct tensor *dst = tensor_zeros(DTS[a], TENSOR_CPU, 2, dsh);
		ck_assert_int_eq(
		    tensor_index_add_(dst, 0, mk(TENSOR_I32, 1, ish, iv), mk(DTS[a], 2, ssh, sv)),
		    TENSOR_OK);
		tu_assert_close(dst, want, 6, 0, 0);
	}
	/* broadcast src (stride 0) and a strided dst whose gaps stay untouched */
	const int64_t s1[] = { 1, 6 }, s2[] = { 9, 6 }, wide[] = { 5, 12 }, dsh2[] = { 5, 6 };
	struct tensor *store = tensor_full(TENSOR_F64, TENSOR_CPU, 2, wide, 77);
	struct tensor *dst = tensor_slice(store, 1, 0, 12, 2);
	ck_assert_int_eq(tensor_copy_(dst, tu_rand(TENSOR_F64, 2, dsh2, 5)), TENSOR_OK);
	struct tensor *src = tensor_expand(tu_rand(TENSOR_F64, 2, s1, 6), 2, s2);
	check_index_add(dst, 0, rnd_idx(TENSOR_I64, 1, (int64_t[]){ 9 }, 5, 1), src);
	double *all = tu_values(store);
	for (int i = 0; i < 60; i += 2)
		ck_assert(all[i + 1] == 77);
	free(all);
	/* a 0-d index adds one slice; an empty index changes nothing */
	struct tensor *d3 = tu_rand(TENSOR_F32, 2, dsh2, 8);
	check_index_add(d3, 1, mk(TENSOR_I64, 0, NULL, iv), tu_rand(TENSOR_F32, 1, dsh2, 2));
	const int64_t e[] = { 5, 0 };
	check_index_add(d3, 1, mk(TENSOR_I64, 1, (int64_t[]){ 0 }, iv),
			tu_rand(TENSOR_F32, 2, e, 2));
}
END_TEST

/* Embedding backward: 4096 ids x 256 into [1000, 256], on several thread counts. */
START_TEST(test_index_add_embedding_large)
{
	const int64_t wsh[] = { 1000, 256 }, ish[] = { 4096 }, gsh[] = { 4096, 256 };
	struct tensor *ids = rnd_idx(TENSOR_I64, 1, ish, 1000, 4);
	struct tensor *g = tu_rand(TENSOR_F32, 2, gsh, 5);
	const int threads[] = { 1, 2, 3 };
	for (int k = 0; k < 3; k++) {
		tensor_set_num_threads(threads[k]);
		check_index_add(tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, wsh), 0, ids, g);
	}
	/* along the last dim of a transposed dst: positions off dim are strided */
	const int64_t dsh[] = { 300, 64 }, ish2[] = { 2000 }, ssh[] = { 64, 2000 };
	struct tensor *dst = tensor_transpose(tu_rand(TENSOR_F32, 2, dsh, 6), 0, 1);
	check_index_add(dst, 1, rnd_idx(TENSOR_I32, 1, ish2, 300, 7),
			tu_rand(TENSOR_F32, 2, ssh, 8));
	/* along the last dim of a contiguous dst: indices walked innermost */
	const int64_t dsh3[] = { 256, 300 }, ssh3[] = { 256, 2000 };
	for (int k = 0; k < 3; k++) {
		tensor_set_num_threads(threads[k]);
		check_index_add(tu_rand(TENSOR_F32, 2, dsh3, 9), -1,
				rnd_idx(TENSOR_I64, 1, ish2, 300, 7),
				tu_rand(TENSOR_F32, 2, ssh3, 8));
	}
	tensor_set_num_threads(0);
}
END_TEST

/* ---- gather / scatter_add_ ---------------------------------------------------- */

/* out[p] = src[p with coordinate d = idx[p]]. */
static void check_gather(const struct tensor *src, int dim, const struct tensor *idx)
{
	struct tensor *out = tensor_gather(src, dim, idx);
	ck_assert_msg(out != NULL, "gather: %s", tensor_last_error());
	tu_assert_shape(out, idx->ndim, idx->shape);
	int d = dim < 0 ? dim + src->ndim : dim;
	int64_t n = tensor_numel(idx), p[TENSOR_MAX_DIMS];
	double *sv = tu_values(src), *iv = tu_values(idx), *want = malloc(sizeof(double) * (n + 1));
	for (int64_t k = 0; k < n; k++) {
		tu_unravel(k, idx->ndim, idx->shape, p);
		p[d] = (int64_t)iv[k];
		want[k] = sv[ravel(src->ndim, src->shape, p)];
	}
	tu_assert_close(out, want, n, 0, 0);
	free(sv);
	free(iv);
	free(want);
}

/* dst[p with coordinate d = idx[p]] += src[p] for p over idx's shape. */
static void check_scatter_add(struct tensor *dst, int dim, const struct tensor *idx,
			      const struct tensor *src)
{
	int d = dim < 0 ? dim + dst->ndim : dim;
	int64_t p[TENSOR_MAX_DIMS];
	double *want = tu_values(dst), *sv = tu_values(src), *iv = tu_values(idx);
	for (int64_t k = 0; k < tensor_numel(idx); k++) {
		tu_unravel(k, idx->ndim, idx->shape, p);
		double v = sv[ravel(src->ndim, src->shape, p)];
		p[d] = (int64_t)iv[k];
		want[ravel(dst->ndim, dst->shape, p)] += v;
	}
	int rc = tensor_scatter_add_(dst, dim, idx, src);
	ck_assert_msg(rc == TENSOR_OK, "scatter_add_: %s", tensor_last_error());
	double t = tol_of(dst->dtype);
	tu_assert_close(dst, want, tensor_numel(dst), t, t);
	free(want);
	free(sv);
	free(iv);
}

START_TEST(test_gather_scatter_layouts)
{
	const int64_t sh[] = { 5, 4, 6 };
	const int dims[] = { 0, 1, 2, -1 };
	/* every dtype x index dtype x dim x layout */
	for (int c = 0; c < 4 * 2 * 4 * NLAYOUTS; c++) {
		int a = c % 4, b = c / 4 % 2, k = c / 8 % 4, lay = c / 32;
		int d = dims[k] < 0 ? dims[k] + 3 : dims[k];
		/* idx smaller than src off dim and longer along it; the update is larger */
		int64_t ish[3] = { 4, 3, 5 }, ssh[3] = { 5, 4, 6 };
		ish[d] = 7;
		ssh[d] = 8;
		struct tensor *idx = rnd_idx(IDTS[b], 3, ish, sh[d], 9 + k);
		if (lay == STRIDED)
			idx = tu_strided(idx);
		check_gather(as_layout(rnd(DTS[a], 3, sh, 2 + a), lay), dims[k], idx);
		struct tensor *dst = as_layout(rnd(DTS[a], 3, sh, 4), lay);
		struct tensor *upd = as_layout(rnd(DTS[a], 3, ssh, 5 + lay), (lay + 1) % NLAYOUTS);
		check_scatter_add(dst, dims[k], idx, upd);
	}
}
END_TEST

START_TEST(test_gather_scatter_small_cases)
{
	/* torch.gather docs example: [[1,2],[3,4]] gathered by [[0,0],[1,0]] on dim 1 */
	const int64_t s22[] = { 2, 2 };
	const double tv[] = { 1, 2, 3, 4 }, iv[] = { 0, 0, 1, 0 }, wg[] = { 1, 1, 4, 3 };
	struct tensor *out =
	    tensor_gather(mk(TENSOR_F32, 2, s22, tv), 1, mk(TENSOR_I64, 2, s22, iv));
	tu_assert_close(out, wg, 4, 0, 0);
	/* scatter_add_ duplicates along dim 0 of a 1-d tensor */
	const int64_t s5[] = { 5 };
	const double iv1[] = { 2, 2, 2, 0, 4 }, sv1[] = { 1, 2, 3, 4, 5 }, ws[] = { 4, 0, 6, 0, 5 };
	for (int a = 0; a < 4; a++) {
		struct tensor *dst = tensor_zeros(DTS[a], TENSOR_CPU, 1, s5);
		ck_assert_int_eq(
		    tensor_scatter_add_(dst, 0, mk(TENSOR_I32, 1, s5, iv1), mk(DTS[a], 1, s5, sv1)),
		    TENSOR_OK);
		tu_assert_close(dst, ws, 5, 0, 0);
	}
	/* broadcast src for gather, broadcast update for scatter_add_, empty idx */
	const int64_t s1[] = { 1, 6 }, s46[] = { 4, 6 }, s42[] = { 4, 2 };
	struct tensor *bsrc = tensor_expand(tu_rand(TENSOR_F64, 2, s1, 3), 2, s46);
	struct tensor *idx = rnd_idx(TENSOR_I64, 2, s42, 6, 2);
	check_gather(bsrc, 1, idx);
	check_gather(bsrc, 0, rnd_idx(TENSOR_I64, 2, s42, 4, 2));
	check_scatter_add(tu_rand(TENSOR_F64, 2, s46, 1), 1, idx, bsrc);
	const int64_t s0[] = { 0, 3 };
	struct tensor *e = tensor_gather(bsrc, 0, rnd_idx(TENSOR_I32, 2, s0, 4, 1));
	tu_assert_shape(e, 2, s0);
	check_scatter_add(tu_rand(TENSOR_F64, 2, s46, 1), 0, rnd_idx(TENSOR_I32, 2, s0, 4, 1),
			  bsrc);
}
END_TEST

START_TEST(test_gather_scatter_large)
{
	const int64_t ssh[] = { 1024, 200 }, ish[] = { 1024, 64 };
	const int64_t dsh[] = { 100, 256 }, ish2[] = { 4096, 256 };
	const int threads[] = { 1, 2, 3 };
	struct tensor *src = tu_rand(TENSOR_F32, 2, ssh, 1);
	struct tensor *idx = rnd_idx(TENSOR_I64, 2, ish, 200, 2);
	struct tensor *idx2 = rnd_idx(TENSOR_I32, 2, ish2, 100, 3);
	struct tensor *upd = tu_rand(TENSOR_F32, 2, ish2, 4);
	struct tensor *upd2 = tu_rand(TENSOR_F32, 2, ish, 5);
	for (int k = 0; k < 3; k++) {
		tensor_set_num_threads(threads[k]);
		check_gather(src, 1, idx);
		/* many duplicates along dim 0, parallel over columns */
		check_scatter_add(tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, dsh), 0, idx2, upd);
		/* along the last dim (cross-entropy backward shape) */
		check_scatter_add(tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, ssh), 1, idx, upd2);
	}
	tensor_set_num_threads(0);
}
END_TEST

/* ---- concat / stack / split ----------------------------------------------------- */

/* out = ts joined along d, checked by locating each element's source tensor. */
static void check_concat(int n, struct tensor *const *ts, int dim, struct tensor *out)
{
	ck_assert_msg(out != NULL, "concat: %s", tensor_last_error());
	int nd = ts[0]->ndim, d = dim < 0 ? dim + nd : dim;
	int64_t sh[TENSOR_MAX_DIMS], p[TENSOR_MAX_DIMS];
	memcpy(sh, ts[0]->shape, sizeof sh);
	sh[d] = 0;
	double *vals[8];
	for (int i = 0; i < n; i++) {
		sh[d] += ts[i]->shape[d];
		vals[i] = tu_values(ts[i]);
	}
	tu_assert_shape(out, nd, sh);
	int64_t total = numel_of(nd, sh);
	double *want = malloc(sizeof(double) * (total + 1));
	for (int64_t k = 0; k < total; k++) {
		tu_unravel(k, nd, sh, p);
		int i = 0;
		while (p[d] >= ts[i]->shape[d]) {
			p[d] -= ts[i]->shape[d];
			i++;
		}
		want[k] = vals[i][ravel(nd, ts[i]->shape, p)];
	}
	tu_assert_close(out, want, total, 0, 0);
	free(want);
	for (int i = 0; i < n; i++)
		free(vals[i]);
}

START_TEST(test_concat_dims)
{
	const int dims[] = { 0, 1, 2, -1 };
	const enum tensor_dtype dts[] = { TENSOR_F32, TENSOR_F64, TENSOR_I64 };
	for (int a = 0; a < 3; a++)
		for (int k = 0; k < 4; k++) {
			int d = dims[k] < 0 ? dims[k] + 3 : dims[k];
			struct tensor *ts[3];
			for (int i = 0; i < 3; i++) {
				int64_t sh[3] = { 2, 3, 4 };
				sh[d] = i == 0 ? 2 : i == 1 ? 1 : 3;
				/* contiguous, reversed strides, transposed */
				ts[i] = as_layout(rnd(dts[a], 3, sh, 10 * a + i), i);
			}
			check_concat(3, ts, dims[k], tensor_concat(3, ts, dims[k]));
			/* sliced and broadcast inputs, and an empty one */
			int64_t one[3] = { 2, 3, 4 }, zero[3] = { 2, 3, 4 };
			one[d] = ts[2]->shape[d];
			one[(d + 1) % 3] = 1;
			zero[d] = 0;
			struct tensor *b[3] = {
				as_layout(ts[0], SLICED),
				tensor_expand(rnd(dts[a], 3, one, 5), 3, ts[2]->shape),
				tensor_zeros(dts[a], TENSOR_CPU, 3, zero),
			};
			check_concat(3, b, dims[k], tensor_concat(3, b, dims[k]));
		}
	/* a single tensor gives a contiguous copy */
	const int64_t s23[] = { 2, 3 };
	struct tensor *t = tensor_transpose(tu_rand(TENSOR_F32, 2, s23, 1), 0, 1);
	struct tensor *c = tensor_concat(1, &t, 1);
	check_concat(1, &t, 1, c);
	ck_assert(tensor_is_contiguous(c) && c->storage != t->storage);
}
END_TEST

START_TEST(test_stack)
{
	const int64_t sh[] = { 3, 4 };
	const int dims[] = { 0, 1, 2, -1, -3 };
	for (int a = 0; a < 3; a++)
		for (int k = 0; k < 5; k++) {
			enum tensor_dtype dt = a == 2 ? TENSOR_I64 : DTS[a];
			struct tensor *ts[3];
			double *v[3];
			for (int i = 0; i < 3; i++) {
				ts[i] = as_layout(rnd(dt, 2, sh, 7 * i + a), i);
				if (i == 2 && k % 2) /* a broadcast input */
					ts[i] = tensor_expand(rnd(dt, 1, sh + 1, 3), 2, sh);
				v[i] = tu_values(ts[i]);
			}
			struct tensor *out = tensor_stack(3, ts, dims[k]);
			int d = dims[k] < 0 ? dims[k] + 3 : dims[k];
			int64_t osh[3], p[3], q[2];
			for (int i = 0, j = 0; i < 3; i++)
				osh[i] = i == d ? 3 : sh[j++];
			tu_assert_shape(out, 3, osh);
			double want[36];
			for (int64_t e = 0; e < 36; e++) {
				tu_unravel(e, 3, osh, p);
				for (int i = 0, j = 0; i < 3; i++)
					if (i != d)
						q[j++] = p[i];
				want[e] = v[p[d]][ravel(2, sh, q)];
			}
			tu_assert_close(out, want, 36, 0, 0);
			for (int i = 0; i < 3; i++)
				free(v[i]);
		}
}
END_TEST

START_TEST(test_split)
{
	const int64_t sh[] = { 4, 9, 5 };
	const int dims[] = { 0, 1, 2, -1 };
	const int64_t parts[4][3] = { { 1, 0, 3 }, { 2, 3, 4 }, { 2, 2, 1 }, { 1, 3, 1 } };
	for (int a = 0; a < 3; a++)
		for (int k = 0; k < 4; k++)
			for (int lay = 0; lay < NLAYOUTS; lay++) {
				enum tensor_dtype dt = a == 2 ? TENSOR_I64 : DTS[a];
				struct tensor *t = as_layout(rnd(dt, 3, sh, a + k), lay);
				int d = dims[k] < 0 ? dims[k] + 3 : dims[k];
				struct tensor *out[3];
				ck_assert_int_eq(tensor_split(t, dims[k], 3, parts[d], out),
						 TENSOR_OK);
				double *tv = tu_values(t);
				int64_t start = 0, p[3];
				for (int i = 0; i < 3; i++) {
					int64_t psh[3] = { 4, 9, 5 };
					psh[d] = parts[d][i];
					tu_assert_shape(out[i], 3, psh);
					ck_assert(out[i]->storage == t->storage); /* a view */
					int64_t n = numel_of(3, psh);
					double *want = malloc(sizeof(double) * (n + 1));
					for (int64_t e = 0; e < n; e++) {
						tu_unravel(e, 3, psh, p);
						p[d] += start;
						want[e] = tv[ravel(3, sh, p)];
					}
					tu_assert_close(out[i], want, n, 0, 0);
					free(want);
					start += parts[d][i];
				}
				/* round trip */
				struct tensor *back = tensor_concat(3, out, dims[k]);
				tu_assert_close(back, tv, 180, 0, 0);
				/* writes through a piece reach t */
				ck_assert_int_eq(tensor_fill_(out[2], 5), TENSOR_OK);
				int64_t last[3] = { 3, 8, 4 };
				ck_assert(tensor_get(t, last) == 5);
				free(tv);
			}
}
END_TEST

/* Outside any scope the results are heap tensors the caller frees. */
START_TEST(test_heap_results)
{
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK);
	const int64_t sh[] = { 6, 4 }, ish[] = { 3 };
	struct tensor *t = tensor_rand_uniform(TENSOR_F32, TENSOR_CPU, 2, sh, 1, -1, 1);
	struct tensor *idx =
	    tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, ish, (int64_t[]){ 5, 0, 5 });
	struct tensor *sel = tensor_index_select(t, 0, idx);
	ck_assert_int_eq(tensor_index_add_(t, 0, idx, sel), TENSOR_OK);
	struct tensor *parts[3];
	ck_assert_int_eq(tensor_split(t, 0, 3, (int64_t[]){ 1, 2, 3 }, parts), TENSOR_OK);
	struct tensor *ts[2] = { t, sel }, *ss[2] = { sel, sel };
	struct tensor *c = tensor_concat(2, ts, 0), *s = tensor_stack(2, ss, 0);
	ck_assert(c && s);
	/* a failing split leaves no outputs behind */
	struct tensor *bad[2] = { t, t };
	ck_assert_int_eq(tensor_split(t, 0, 2, (int64_t[]){ 1, 2 }, bad), TENSOR_ERR_SHAPE);
	ck_assert(!bad[0] && !bad[1]);
	tensor_clear_error();
	for (int i = 0; i < 3; i++)
		tensor_free(parts[i]);
	tensor_free(c);
	tensor_free(s);
	tensor_free(sel);
	tensor_free(idx);
	tensor_free(t);
	tensor_scope_begin();
}
END_TEST

/* ---- errors ------------------------------------------------------------------- */

START_TEST(test_errors_index)
{
	const int64_t sh[] = { 5, 3 }, i2[] = { 2 }, s23[] = { 2, 3 }, s43[] = { 4, 3 };
	struct tensor *src = tu_rand(TENSOR_F32, 2, sh, 1);
	const double bad[] = { 0, 5 }, neg[] = { -1, 2 }, ok[] = { 4, 1 };
	for (int b = 0; b < 2; b++) {
		struct tensor *ib = mk(IDTS[b], 1, i2, bad), *in = mk(IDTS[b], 1, i2, neg);
		assert_err(!tensor_index_select(src, 0, ib), TENSOR_ERR_ARG, "index_select",
			   "index 5", "size 5");
		assert_err(!tensor_index_select(src, 0, in), TENSOR_ERR_ARG, "index_select",
			   "index -1", "size 5");
		struct tensor *dst = tu_rand(TENSOR_F32, 2, sh, 2);
		double *before = tu_values(dst);
		assert_err(tensor_index_add_(dst, 0, ib, tu_rand(TENSOR_F32, 2, s23, 3)) < 0,
			   TENSOR_ERR_ARG, "index_add_", "index 5", "size 5");
		assert_err(tensor_index_add_(dst, 0, in, tu_rand(TENSOR_F32, 2, s23, 3)) < 0,
			   TENSOR_ERR_ARG, "index_add_", "index -1", "size 5");
		tu_assert_close(dst, before, 15, 0, 0); /* untouched */
		free(before);
	}
	struct tensor *iok = mk(TENSOR_I64, 1, i2, ok);
	/* index dtype, src/dst dtype, dims */
	assert_err(!tensor_index_select(src, 0, mk(TENSOR_F32, 1, i2, ok)), TENSOR_ERR_DTYPE,
		   "index_select", "f32", NULL);
	assert_err(tensor_index_add_(src, 0, mk(TENSOR_F64, 1, i2, ok),
				     tu_rand(TENSOR_F32, 2, s23, 1)) < 0,
		   TENSOR_ERR_DTYPE, "index_add_", "f64", NULL);
	assert_err(tensor_index_add_(src, 0, iok, tu_rand(TENSOR_F64, 2, s23, 1)) < 0,
		   TENSOR_ERR_DTYPE, "index_add_", "f64", NULL);
	assert_err(!tensor_index_select(src, 2, iok), TENSOR_ERR_SHAPE, "index_select", "dim 2",
		   NULL);
	assert_err(!tensor_index_select(src, -3, iok), TENSOR_ERR_SHAPE, "index_select", "dim -3",
		   NULL);
	assert_err(tensor_index_add_(src, 2, iok, src) < 0, TENSOR_ERR_SHAPE, "index_add_", "dim 2",
		   NULL);
	/* src shape of index_add_ */
	assert_err(tensor_index_add_(src, 0, iok, tu_rand(TENSOR_F32, 2, s43, 1)) < 0,
		   TENSOR_ERR_SHAPE, "index_add_", "[4,3]", "[2,3]");
	/* more than 8 result dims */
	const int64_t s5[] = { 2, 1, 1, 1, 1 }, s4[] = { 1, 1, 1, 1, 1 };
	assert_err(!tensor_index_select(tu_rand(TENSOR_F32, 5, s5, 1), 0,
					tensor_zeros(TENSOR_I64, TENSOR_CPU, 5, s4)),
		   TENSOR_ERR_SHAPE, "index_select", "9 dims", NULL);
	/* a broadcast dst cannot be written in place */
	struct tensor *bdst = tensor_expand(tu_rand(TENSOR_F32, 2, (int64_t[]){ 1, 3 }, 1), 2, sh);
	assert_err(tensor_index_add_(bdst, 0, iok, tu_rand(TENSOR_F32, 2, s23, 1)) < 0,
		   TENSOR_ERR_ARG, "index_add_", "stride 0", NULL);
	/* storage saved by the autograd tape is not modified in place */
	struct tensor *saved = tu_rand(TENSOR_F32, 2, sh, 4);
	saved->storage->tape_refs = 1;
	assert_err(tensor_index_add_(saved, 0, iok, tu_rand(TENSOR_F32, 2, s23, 1)) < 0,
		   TENSOR_ERR_STATE, "index_add_", "in-place", NULL);
	assert_err(tensor_scatter_add_(saved, 0, tensor_zeros(TENSOR_I64, TENSOR_CPU, 2, s23),
				       tu_rand(TENSOR_F32, 2, s23, 1)) < 0,
		   TENSOR_ERR_STATE, "scatter_add_", "in-place", NULL);
	saved->storage->tape_refs = 0;
	/* NULL inputs keep the first error */
	tensor_error(TENSOR_ERR_IO, "first failure");
	ck_assert(!tensor_index_select(NULL, 0, iok));
	ck_assert(tensor_index_add_(src, 0, NULL, src) == TENSOR_ERR_IO);
	assert_err(!tensor_gather(src, 0, NULL), TENSOR_ERR_IO, "first failure", NULL, NULL);
	assert_err(!tensor_index_select(src, 0, NULL), TENSOR_ERR_ARG, "index_select", "NULL",
		   NULL);
	assert_err(tensor_scatter_add_(NULL, 0, iok, src) < 0, TENSOR_ERR_ARG, "scatter_add_",
		   "NULL", NULL);
}
END_TEST

START_TEST(test_errors_gather_scatter)
{
	const int64_t sh[] = { 4, 5 }, i22[] = { 2, 2 }, i52[] = { 5, 2 }, i3[] = { 2, 2, 1 };
	struct tensor *src = tu_rand(TENSOR_F64, 2, sh, 1);
	const double bad[] = { 0, 1, 5, 2 }, neg[] = { 0, -3, 1, 1 }, ok[] = { 0, 1, 2, 3 };
	for (int b = 0; b < 2; b++) {
		struct tensor *ib = mk(IDTS[b], 2, i22, bad), *in = mk(IDTS[b], 2, i22, neg);
		assert_err(!tensor_gather(src, 1, ib), TENSOR_ERR_ARG, "gather", "index 5",
			   "size 5");
		assert_err(!tensor_gather(src, 1, in), TENSOR_ERR_ARG, "gather", "index -3",
			   "size 5");
		struct tensor *dst = tu_rand(TENSOR_F64, 2, sh, 2);
		assert_err(tensor_scatter_add_(dst, 0, ib, src) < 0, TENSOR_ERR_ARG, "scatter_add_",
			   "index 5", "size 4");
		assert_err(tensor_scatter_add_(dst, 1, in, src) < 0, TENSOR_ERR_ARG, "scatter_add_",
			   "index -3", "size 5");
	}
	struct tensor *iok = mk(TENSOR_I64, 2, i22, ok);
	assert_err(!tensor_gather(src, 1, mk(TENSOR_F64, 2, i22, ok)), TENSOR_ERR_DTYPE, "gather",
		   "f64", NULL);
	assert_err(!tensor_gather(src, 1, mk(TENSOR_I64, 3, i3, ok)), TENSOR_ERR_SHAPE, "gather",
		   "[2,2,1]", "[4,5]");
	/* idx larger than src off dim (dim 1: idx has 5 rows, src 4) */
	assert_err(!tensor_gather(src, 1, tensor_zeros(TENSOR_I64, TENSOR_CPU, 2, i52)),
		   TENSOR_ERR_SHAPE, "gather", "[5,2]", "dim 0");
	assert_err(!tensor_gather(src, 2, iok), TENSOR_ERR_SHAPE, "gather", "dim 2", NULL);
	struct tensor *dst = tu_rand(TENSOR_F64, 2, sh, 2);
	assert_err(tensor_scatter_add_(dst, 0, iok, tu_rand(TENSOR_F32, 2, sh, 1)) < 0,
		   TENSOR_ERR_DTYPE, "scatter_add_", "f32", NULL);
	assert_err(tensor_scatter_add_(dst, 0, mk(TENSOR_F32, 2, i22, ok), src) < 0,
		   TENSOR_ERR_DTYPE, "scatter_add_", "f32", NULL);
	/* src smaller than idx (any dim), dst smaller than idx off dim */
	assert_err(
	    tensor_scatter_add_(dst, 0, iok, tu_rand(TENSOR_F64, 2, (int64_t[]){ 1, 5 }, 1)) < 0,
	    TENSOR_ERR_SHAPE, "scatter_add_", "[1,5]", "src");
	struct tensor *i61 = tensor_zeros(TENSOR_I64, TENSOR_CPU, 2, (int64_t[]){ 6, 1 });
	assert_err(
	    tensor_scatter_add_(dst, 1, i61, tu_rand(TENSOR_F64, 2, (int64_t[]){ 6, 1 }, 1)) < 0,
	    TENSOR_ERR_SHAPE, "scatter_add_", "[6,1]", "dst");
	assert_err(tensor_scatter_add_(dst, -3, iok, src) < 0, TENSOR_ERR_SHAPE, "scatter_add_",
		   "dim -3", NULL);
}
END_TEST

START_TEST(test_errors_join)
{
	const int64_t a[] = { 2, 3, 4 }, b[] = { 2, 5, 5 }, c[] = { 2, 5, 4 }, e[] = { 3, 4 };
	struct tensor *ta = tu_rand(TENSOR_F32, 3, a, 1);
	struct tensor *ts[3] = { ta, tu_rand(TENSOR_F32, 3, c, 2), tu_rand(TENSOR_F32, 3, b, 3) };
	assert_err(!tensor_concat(3, ts, 1), TENSOR_ERR_SHAPE, "concat", "[2,5,5]", "[2,3,4]");
	ck_assert(!tensor_concat(3, ts, 1));
	assert_err(true, TENSOR_ERR_SHAPE, "concat", "dim 1", NULL);
	assert_err(!tensor_concat(2, ts, 0), TENSOR_ERR_SHAPE, "concat", "[2,5,4]", "dim 0");
	assert_err(!tensor_concat(0, ts, 0), TENSOR_ERR_ARG, "concat", "0", NULL);
	assert_err(!tensor_concat(2, NULL, 0), TENSOR_ERR_ARG, "concat", "NULL", NULL);
	assert_err(!tensor_concat(2, ts, 3), TENSOR_ERR_SHAPE, "concat", "dim 3", NULL);
	struct tensor *t2[2] = { ta, tu_rand(TENSOR_F32, 2, e, 1) };
	assert_err(!tensor_concat(2, t2, 0), TENSOR_ERR_SHAPE, "concat", "[3,4]", "[2,3,4]");
	t2[1] = tu_rand(TENSOR_F64, 3, a, 1);
	assert_err(!tensor_concat(2, t2, 0), TENSOR_ERR_DTYPE, "concat", "f64", "f32");
	t2[1] = NULL;
	assert_err(!tensor_concat(2, t2, 0), TENSOR_ERR_ARG, "concat", "NULL", NULL);
	/* stack */
	t2[1] = ts[1];
	assert_err(!tensor_stack(2, t2, 0), TENSOR_ERR_SHAPE, "stack", "[2,5,4]", "[2,3,4]");
	assert_err(!tensor_stack(0, t2, 0), TENSOR_ERR_ARG, "stack", NULL, NULL);
	t2[1] = ta;
	assert_err(!tensor_stack(2, t2, 4), TENSOR_ERR_SHAPE, "stack", "dim 4", NULL);
	assert_err(!tensor_stack(2, t2, -5), TENSOR_ERR_SHAPE, "stack", "dim -5", NULL);
	/* split */
	struct tensor *out[3] = { ta, ta, ta };
	assert_err(tensor_split(ta, 2, 3, (int64_t[]){ 1, 1, 1 }, out) < 0, TENSOR_ERR_SHAPE,
		   "split", "sum to 3", "size 4");
	ck_assert(!out[0] && !out[1] && !out[2]);
	assert_err(tensor_split(ta, 2, 2, (int64_t[]){ 5, -1 }, out) < 0, TENSOR_ERR_SHAPE, "split",
		   "-1", NULL);
	assert_err(tensor_split(ta, 3, 2, (int64_t[]){ 2, 2 }, out) < 0, TENSOR_ERR_SHAPE, "split",
		   "dim 3", NULL);
	assert_err(tensor_split(ta, 0, 0, (int64_t[]){ 2 }, out) < 0, TENSOR_ERR_ARG, "split",
		   "n = 0", NULL);
	assert_err(tensor_split(NULL, 0, 1, (int64_t[]){ 2 }, out) < 0, TENSOR_ERR_ARG, "split",
		   "NULL", NULL);
}
END_TEST

void ops_index_tcases(Suite *s)
{
	TCase *tc = tu_tcase("index_select");
	tcase_add_test(tc, test_index_select_layouts);
	tcase_add_test(tc, test_index_select_broadcast_empty);
	tcase_add_test(tc, test_index_select_embedding_large);
	suite_add_tcase(s, tc);
	tc = tu_tcase("index_add");
	tcase_add_test(tc, test_index_add_layouts);
	tcase_add_test(tc, test_index_add_duplicates_broadcast);
	tcase_add_test(tc, test_index_add_embedding_large);
	suite_add_tcase(s, tc);
	tc = tu_tcase("gather_scatter");
	tcase_add_test(tc, test_gather_scatter_layouts);
	tcase_add_test(tc, test_gather_scatter_small_cases);
	tcase_add_test(tc, test_gather_scatter_large);
	suite_add_tcase(s, tc);
	tc = tu_tcase("join");
	tcase_add_test(tc, test_concat_dims);
	tcase_add_test(tc, test_stack);
	tcase_add_test(tc, test_split);
	tcase_add_test(tc, test_heap_results);
	suite_add_tcase(s, tc);
	tc = tu_tcase("index errors");
	tcase_add_test(tc, test_errors_index);
	tcase_add_test(tc, test_errors_gather_scatter);
	tcase_add_test(tc, test_errors_join);
	suite_add_tcase(s, tc);
}
