/* Tensor core: creation, views, copies, scopes and memory accounting, the
 * random generator, threads and errors. */
#include <cpuid.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_kernels.h"
#include "testutil.h"

static const int64_t S23[] = { 2, 3 }, S234[] = { 2, 3, 4 };

/* ---- creation ------------------------------------------------------------- */

START_TEST(test_create_fill)
{
	const enum tensor_dtype dts[] = { TENSOR_F32, TENSOR_F64, TENSOR_I32, TENSOR_I64 };
	for (int k = 0; k < 4; k++) {
		struct tensor *z = tensor_zeros(dts[k], TENSOR_CPU, 3, S234);
		struct tensor *o = tensor_ones(dts[k], TENSOR_CPU, 3, S234);
		struct tensor *f = tensor_full(dts[k], TENSOR_CPU, 3, S234, -7);
		tu_assert_shape(z, 3, S234);
		ck_assert(tensor_is_contiguous(z));
		ck_assert_int_eq(z->dtype, dts[k]);
		ck_assert_uint_eq(tensor_nbytes(z), 24 * tensor_dtype_size(dts[k]));
		double wz[24], wo[24], wf[24];
		for (int i = 0; i < 24; i++) {
			wz[i] = 0;
			wo[i] = 1;
			wf[i] = -7;
		}
		tu_assert_close(z, wz, 24, 0, 0);
		tu_assert_close(o, wo, 24, 0, 0);
		tu_assert_close(f, wf, 24, 0, 0);
	}
}
END_TEST

/* Fills through each path: zeros as bytes (every dtype, -0.0 keeps its sign), f32 rows,
 * other values per element; a strided view fills its own elements only; a large tensor
 * runs in parallel. */
START_TEST(test_fill_paths)
{
	const enum tensor_dtype dts[] = { TENSOR_F32, TENSOR_F64, TENSOR_I32, TENSOR_I64,
					  TENSOR_BF16 };
	for (int k = 0; k < 5; k++) {
		struct tensor *a = tensor_full(dts[k], TENSOR_CPU, 2, (int64_t[]){ 4, 6 }, 5);
		struct tensor *col =
		    tensor_narrow(tensor_transpose(a, 0, 1), 0, 1, 2); /* cols 1-2 */
		ck_assert_int_eq(tensor_fill_(col, 0), TENSOR_OK);
		double w[24];
		for (int i = 0; i < 24; i++)
			w[i] = i % 6 == 1 || i % 6 == 2 ? 0 : 5;
		tu_assert_close(a, w, 24, 0, 0);
		ck_assert_int_eq(tensor_fill_(col, -3), TENSOR_OK);
		for (int i = 0; i < 24; i++)
			w[i] = i % 6 == 1 || i % 6 == 2 ? -3 : 5;
		tu_assert_close(a, w, 24, 0, 0);
	}
	struct tensor *nz = tensor_full(TENSOR_F32, TENSOR_CPU, 1, (int64_t[]){ 3 }, -0.0);
	ck_assert(signbit(tensor_get(nz, (int64_t[]){ 2 })));
	const int64_t big = 100003;
	struct tensor *b = tensor_full(TENSOR_F32, TENSOR_CPU, 1, &big, 0.1);
	ck_assert_int_eq(tensor_fill_(tensor_narrow(b, 0, 7, big - 14), 0), TENSOR_OK);
	const float *pb = tensor_data(b);
	for (int64_t i = 0; i < big; i++)
		ck_assert_msg(pb[i] == (i < 7 || i >= big - 7 ? 0.1f : 0.0f), "element %lld: %g",
			      (long long)i, pb[i]);
}
END_TEST

START_TEST(test_arange_from_data)
{
	struct tensor *a = tensor_arange(TENSOR_F64, TENSOR_CPU, 1, 2, 0.25);
	const double wa[] = { 1, 1.25, 1.5, 1.75 };
	tu_assert_close(a, wa, 4, 0, 0);
	struct tensor *b = tensor_arange(TENSOR_I64, TENSOR_CPU, 5, 0, -2);
	const double wb[] = { 5, 3, 1 };
	tu_assert_close(b, wb, 3, 0, 0);
	struct tensor *e = tensor_arange(TENSOR_F32, TENSOR_CPU, 3, 3, 1);
	ck_assert_int_eq(tensor_numel(e), 0);

	const int32_t data[] = { 1, -2, 3, -4, 5, -6 };
	struct tensor *t = tensor_from_data(TENSOR_I32, TENSOR_CPU, 2, S23, data);
	const double wt[] = { 1, -2, 3, -4, 5, -6 };
	tu_assert_close(t, wt, 6, 0, 0);
	int32_t back[6];
	ck_assert_int_eq(tensor_to_host(t, back, sizeof back), TENSOR_OK);
	ck_assert_mem_eq(back, data, sizeof data);
	/* scalar (0-d) and empty tensors */
	const double one = 3.5;
	struct tensor *s = tensor_from_data(TENSOR_F64, TENSOR_CPU, 0, NULL, &one);
	ck_assert_int_eq(s->ndim, 0);
	ck_assert_int_eq(tensor_numel(s), 1);
	ck_assert(tensor_get(s, NULL) == 3.5);
	const int64_t s0[] = { 0, 5 };
	struct tensor *z = tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, s0);
	ck_assert_int_eq(tensor_numel(z), 0);
	ck_assert(tensor_is_contiguous(z));
}
END_TEST

START_TEST(test_create_errors)
{
	const int64_t neg[] = { 2, -1 };
	tu_assert_error(!tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, neg), TENSOR_ERR_SHAPE,
			"tensor_empty", "[2,-1]");
	const int64_t huge[] = { INT64_C(1) << 40, INT64_C(1) << 40 };
	tu_assert_error(!tensor_empty(TENSOR_F32, TENSOR_CPU, 2, huge), TENSOR_ERR_NOMEM,
			"overflows", "[1099511627776,1099511627776]");
	const int64_t big[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	tu_assert_error(!tensor_empty(TENSOR_F32, TENSOR_CPU, 9, big), TENSOR_ERR_SHAPE, "ndim 9",
			NULL);
	tu_assert_error(!tensor_empty((enum tensor_dtype)9, TENSOR_CPU, 1, big), TENSOR_ERR_DTYPE,
			"invalid dtype", NULL);
	tu_assert_error(!tensor_empty(TENSOR_F32, (enum tensor_device)7, 1, big), TENSOR_ERR_DEVICE,
			"invalid device", NULL);
	tu_assert_error(!tensor_empty(TENSOR_F32, TENSOR_CPU, 2, NULL), TENSOR_ERR_ARG,
			"shape is NULL", NULL);
	tu_assert_error(!tensor_arange(TENSOR_F32, TENSOR_CPU, 0, 1, 0), TENSOR_ERR_ARG,
			"tensor_arange", "nonzero step");
	tu_assert_error(!tensor_from_data(TENSOR_F32, TENSOR_CPU, 2, S23, NULL), TENSOR_ERR_ARG,
			"tensor_from_data", NULL);
	tu_assert_error(!tensor_rand_uniform(TENSOR_I32, TENSOR_CPU, 2, S23, 1, 0, 1),
			TENSOR_ERR_DTYPE, "tensor_uniform_", "i32");
	tu_assert_error(!tensor_rand_uniform(TENSOR_F32, TENSOR_CPU, 2, S23, 1, 1, 0),
			TENSOR_ERR_ARG, "lo <= hi", NULL);
	tu_assert_error(!tensor_rand_normal(TENSOR_F32, TENSOR_CPU, 2, S23, 1, 0, -1),
			TENSOR_ERR_ARG, "std >= 0", NULL);
#ifndef CFORMER_HAVE_CUDA
	tu_assert_error(!tensor_zeros(TENSOR_F32, TENSOR_CUDA, 2, S23), TENSOR_ERR_DEVICE, "cuda",
			"not compiled in");
#endif
	/* the first error is kept until cleared */
	tensor_error(TENSOR_ERR_ARG, "first");
	tensor_error(TENSOR_ERR_SHAPE, "second");
	ck_assert_str_eq(tensor_last_error(), "first");
	ck_assert_int_eq(tensor_last_status(), TENSOR_ERR_ARG);
	tensor_clear_error();
	ck_assert_str_eq(tensor_last_error(), "");
	/* every status has its own name */
	const int codes[] = { TENSOR_OK,	 TENSOR_ERR_SHAPE, TENSOR_ERR_DTYPE,
			      TENSOR_ERR_DEVICE, TENSOR_ERR_NOMEM, TENSOR_ERR_UNSUPPORTED,
			      TENSOR_ERR_IO,	 TENSOR_ERR_ARG,   TENSOR_ERR_CUDA,
			      TENSOR_ERR_STATE,	 TENSOR_ERR_COMM };
	const int ncodes = (int)(sizeof codes / sizeof codes[0]);
	for (int i = 0; i < ncodes; i++) {
		ck_assert_str_ne(tensor_status_string(codes[i]), "unknown error");
		for (int j = 0; j < i; j++)
			ck_assert_str_ne(tensor_status_string(codes[i]),
					 tensor_status_string(codes[j]));
	}
	ck_assert_str_eq(tensor_status_string(TENSOR_ERR_NOMEM), "out of memory");
	ck_assert_str_eq(tensor_status_string(-1000), "unknown error");
}
END_TEST

/* ---- views ---------------------------------------------------------------- */

static struct tensor *iota234(void)
{
	return tensor_view(tensor_arange(TENSOR_F64, TENSOR_CPU, 0, 24, 1), 3, S234);
}

/* value of iota234 at (i, j, k) */
static double iv(int64_t i, int64_t j, int64_t k)
{
	return (double)(i * 12 + j * 4 + k);
}

START_TEST(test_view_reshape)
{
	struct tensor *t = iota234();
	const int64_t s[] = { 4, -1 };
	struct tensor *v = tensor_view(t, 2, s);
	const int64_t w[] = { 4, 6 };
	tu_assert_shape(v, 2, w);
	ck_assert_ptr_eq(v->storage, t->storage);
	ck_assert(tensor_get(v, (int64_t[]){ 3, 5 }) == 23);
	const int64_t bad[] = { 5, -1 };
	tu_assert_error(!tensor_view(t, 2, bad), TENSOR_ERR_SHAPE, "view", "[2,3,4]");
	const int64_t bad2[] = { 5, 5 };
	tu_assert_error(!tensor_view(t, 2, bad2), TENSOR_ERR_SHAPE, "24 elements", "[5,5]");
	struct tensor *tt = tensor_transpose(t, 0, 2);
	tu_assert_error(!tensor_view(tt, 2, s), TENSOR_ERR_SHAPE, "not contiguous", "[4,3,2]");
	/* reshape copies a non-contiguous input */
	struct tensor *r = tensor_reshape(tt, 2, s);
	ck_assert(r != NULL);
	ck_assert_ptr_ne(r->storage, t->storage);
	double *vals = tu_values(r);
	for (int64_t n = 0; n < 24; n++) { /* tt[a][b][c] = t[c][b][a] */
		int64_t a = n / 6, b = (n / 2) % 3, c = n % 2;
		ck_assert(vals[n] == iv(c, b, a));
	}
	free(vals);
	/* on the heap the copy is the result's alone: freeing it leaves nothing behind */
	size_t live = tensor_mem_stats(TENSOR_CPU).live_bytes;
	tensor_heap_begin();
	struct tensor *h = tensor_reshape(tt, 2, s);
	tensor_heap_end();
	ck_assert(h != NULL && !h->in_arena && h->storage->refcount == 1);
	ck_assert(tensor_get(h, (int64_t[]){ 3, 5 }) == iv(1, 2, 3));
	tensor_free(h);
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live);
}
END_TEST

/* tensor_dim_order gives back the order of the buffer a view was permuted from. */
START_TEST(test_dim_order)
{
	struct tensor *t = iota234();
	int order[3];
	ck_assert(!tensor_dim_order(t, order));
	ck_assert(order[0] == 0 && order[1] == 1 && order[2] == 2);
	struct tensor *p = tensor_permute(t, (const int[]){ 2, 0, 1 });
	ck_assert(tensor_dim_order(p, order)); /* p's dim 1 is t's outermost */
	ck_assert(order[0] == 1 && order[1] == 2 && order[2] == 0);
	struct tensor *tr = tensor_transpose(t, 1, 2);
	ck_assert(tensor_dim_order(tr, order));
	ck_assert(order[0] == 0 && order[1] == 2 && order[2] == 1);
	tensor_free(tr);
	tensor_free(p);
	tensor_free(t);
}
END_TEST

START_TEST(test_permute_transpose)
{
	struct tensor *t = iota234();
	const int perm[] = { 2, 0, 1 };
	struct tensor *p = tensor_permute(t, perm);
	const int64_t ws[] = { 4, 2, 3 };
	tu_assert_shape(p, 3, ws);
	ck_assert(!tensor_is_contiguous(p));
	ck_assert_ptr_eq(p->storage, t->storage);
	for (int64_t a = 0; a < 4; a++)
		for (int64_t b = 0; b < 2; b++)
			for (int64_t c = 0; c < 3; c++)
				ck_assert(tensor_get(p, (int64_t[]){ a, b, c }) == iv(b, c, a));
	struct tensor *tr = tensor_transpose(t, -1, 1);
	ck_assert(tensor_get(tr, (int64_t[]){ 1, 3, 2 }) == iv(1, 2, 3));
	const int dup[] = { 0, 0, 1 };
	tu_assert_error(!tensor_permute(t, dup), TENSOR_ERR_SHAPE, "permute", "permutation");
	tu_assert_error(!tensor_transpose(t, 0, 3), TENSOR_ERR_SHAPE, "transpose", "dim 3");
}
END_TEST

START_TEST(test_slice_narrow_select)
{
	struct tensor *t = iota234();
	struct tensor *s = tensor_slice(t, 2, 1, 4, 2); /* k = 1, 3 */
	const int64_t ws[] = { 2, 3, 2 };
	tu_assert_shape(s, 3, ws);
	ck_assert(tensor_get(s, (int64_t[]){ 1, 2, 1 }) == iv(1, 2, 3));
	struct tensor *neg = tensor_slice(t, 1, -2, 100, 1); /* j = 1, 2 */
	ck_assert_int_eq(neg->shape[1], 2);
	ck_assert(tensor_get(neg, (int64_t[]){ 0, 0, 0 }) == iv(0, 1, 0));
	struct tensor *n = tensor_narrow(t, 1, 1, 2);
	ck_assert(tensor_get(n, (int64_t[]){ 1, 1, 3 }) == iv(1, 2, 3));
	struct tensor *e = tensor_narrow(t, 1, 3, 0);
	ck_assert_int_eq(tensor_numel(e), 0);
	struct tensor *sel = tensor_select(t, 1, -1); /* j = 2 */
	const int64_t wsel[] = { 2, 4 };
	tu_assert_shape(sel, 2, wsel);
	ck_assert(tensor_get(sel, (int64_t[]){ 1, 3 }) == iv(1, 2, 3));
	tu_assert_error(!tensor_narrow(t, 1, 2, 2), TENSOR_ERR_SHAPE, "narrow", "[2,3,4]");
	tu_assert_error(!tensor_slice(t, 0, 0, 1, 0), TENSOR_ERR_ARG, "slice", "step");
	tu_assert_error(!tensor_select(t, 0, 2), TENSOR_ERR_SHAPE, "select", "index 2");
	tu_assert_error(!tensor_slice(t, -4, 0, 1, 1), TENSOR_ERR_SHAPE, "slice", "dim -4");
}
END_TEST

START_TEST(test_expand_squeeze_unfold)
{
	const double d[] = { 1, 2, 3 };
	const int64_t s31[] = { 3, 1 };
	struct tensor *c = tensor_from_data(TENSOR_F64, TENSOR_CPU, 2, s31, d);
	const int64_t to[] = { 2, 3, 4 };
	struct tensor *e = tensor_expand(c, 3, to);
	tu_assert_shape(e, 3, to);
	ck_assert_int_eq(e->strides[0], 0);
	ck_assert_int_eq(e->strides[2], 0);
	ck_assert(tensor_get(e, (int64_t[]){ 1, 2, 3 }) == 3);
	const int64_t bad[] = { 2, 4, 4 };
	tu_assert_error(!tensor_expand(c, 3, bad), TENSOR_ERR_SHAPE, "expand", "[3,1]");

	struct tensor *sq = tensor_squeeze(c, -1);
	ck_assert_int_eq(sq->ndim, 1);
	ck_assert(tensor_get(sq, (int64_t[]){ 2 }) == 3);
	tu_assert_error(!tensor_squeeze(c, 0), TENSOR_ERR_SHAPE, "squeeze", "expected 1");
	struct tensor *un = tensor_unsqueeze(sq, 0);
	const int64_t w13[] = { 1, 3 };
	tu_assert_shape(un, 2, w13);
	struct tensor *un2 = tensor_unsqueeze(sq, -1);
	tu_assert_shape(un2, 2, s31);
	ck_assert(tensor_is_contiguous(un) && tensor_is_contiguous(un2));

	/* unfold: windows of 3 every 2 over 0..6 -> [[0,1,2],[2,3,4],[4,5,6]] */
	struct tensor *r = tensor_arange(TENSOR_F64, TENSOR_CPU, 0, 7, 1);
	struct tensor *u = tensor_unfold(r, 0, 3, 2);
	const int64_t wu[] = { 3, 3 };
	tu_assert_shape(u, 2, wu);
	const double want[] = { 0, 1, 2, 2, 3, 4, 4, 5, 6 };
	tu_assert_close(u, want, 9, 0, 0);
	/* kernel == stride is a reshape */
	struct tensor *u2 = tensor_unfold(r, 0, 2, 2);
	ck_assert_int_eq(u2->shape[0], 3);
	ck_assert(tensor_get(u2, (int64_t[]){ 2, 1 }) == 5);
	tu_assert_error(!tensor_unfold(r, 0, 8, 1), TENSOR_ERR_SHAPE, "unfold", "[7]");
}
END_TEST

/* ---- copies --------------------------------------------------------------- */

START_TEST(test_contiguous_clone_copy)
{
	struct tensor *t = iota234();
	struct tensor *tt = tensor_transpose(t, 0, 1);
	struct tensor *c = tensor_contiguous(tt);
	ck_assert(tensor_is_contiguous(c));
	ck_assert_ptr_ne(c->storage, t->storage);
	for (int64_t j = 0; j < 3; j++)
		for (int64_t i = 0; i < 2; i++)
			for (int64_t k = 0; k < 4; k++)
				ck_assert(tensor_get(c, (int64_t[]){ j, i, k }) == iv(i, j, k));
	struct tensor *same = tensor_contiguous(t);
	ck_assert_ptr_eq(same->storage, t->storage);
	struct tensor *cl = tensor_clone(t);
	ck_assert_ptr_ne(cl->storage, t->storage);
	double *a = tu_values(t), *b = tu_values(cl);
	ck_assert_mem_eq(a, b, 24 * sizeof(double));
	free(a);
	free(b);
	/* copy_ into a strided destination, with broadcast and dtype conversion */
	struct tensor *dst = tensor_zeros(TENSOR_I32, TENSOR_CPU, 3, S234);
	struct tensor *dv = tensor_transpose(dst, 0, 2); /* [4,3,2] */
	const float row[] = { 1.9f, -2.9f };		 /* broadcast over [4,3,.] */
	const int64_t s2[] = { 2 };
	struct tensor *src = tensor_from_data(TENSOR_F32, TENSOR_CPU, 1, s2, row);
	ck_assert_int_eq(tensor_copy_(dv, src), TENSOR_OK);
	ck_assert(tensor_get(dst, (int64_t[]){ 0, 2, 3 }) == 1);
	ck_assert(tensor_get(dst, (int64_t[]){ 1, 0, 0 }) == -2);
	const int64_t s3[] = { 3 };
	struct tensor *bad = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, s3);
	tu_assert_error(tensor_copy_(dv, bad) < 0, TENSOR_ERR_SHAPE, "copy_", "[4,3,2]");
	/* casts truncate toward zero */
	struct tensor *f = tensor_from_data(TENSOR_F32, TENSOR_CPU, 1, s2, row);
	struct tensor *ci = tensor_cast(f, TENSOR_I64);
	const double wi[] = { 1, -2 };
	tu_assert_close(ci, wi, 2, 0, 0);
	ck_assert_int_eq(ci->dtype, TENSOR_I64);
	int32_t small[1];
	tu_assert_error(tensor_to_host(f, small, sizeof small) < 0, TENSOR_ERR_ARG, "to_host",
			"4 bytes");
	/* NULL arguments and indices out of range are errors, not crashes */
	tu_assert_error(tensor_copy_(NULL, src) < 0, TENSOR_ERR_ARG, "copy_", "NULL");
	tu_assert_error(tensor_copy_(dv, NULL) < 0, TENSOR_ERR_ARG, "copy_", "NULL");
	tu_assert_error(tensor_to_host(NULL, small, sizeof small) < 0, TENSOR_ERR_ARG, "to_host",
			"NULL");
	tu_assert_error(tensor_to_host(f, NULL, 8) < 0, TENSOR_ERR_ARG, "to_host", "NULL");
	tensor_clear_error();
	ck_assert(tensor_get(NULL, NULL) == 0);
	tu_assert_error(true, TENSOR_ERR_ARG, "get", "NULL");
	ck_assert(tensor_get(t, NULL) == 0);
	tu_assert_error(true, TENSOR_ERR_ARG, "get", "NULL");
	ck_assert(tensor_get(t, (int64_t[]){ 1, 3, 0 }) == 0);
	tu_assert_error(true, TENSOR_ERR_SHAPE, "index 3 out of range at dim 1", "[2,3,4]");
	ck_assert(tensor_get(t, (int64_t[]){ 0, 0, -1 }) == 0);
	tu_assert_error(true, TENSOR_ERR_SHAPE, "index -1", "dim 2");
	tu_assert_error(tensor_rebase_(NULL, t, 0) < 0, TENSOR_ERR_ARG, "rebase_", "NULL");
	tu_assert_error(tensor_rebase_(t, t, 0) < 0, TENSOR_ERR_ARG, "rebase_", "heap tensors");
}
END_TEST

START_TEST(test_to_device_cpu)
{
	struct tensor *t = tensor_transpose(iota234(), 0, 2);
	struct tensor *c = tensor_to_device(t, TENSOR_CPU);
	ck_assert_ptr_ne(c->storage, t->storage);
	double *a = tu_values(t), *b = tu_values(c);
	ck_assert_mem_eq(a, b, 24 * sizeof(double));
	free(a);
	free(b);
	if (!tensor_device_available(TENSOR_CUDA)) {
#ifdef CFORMER_HAVE_CUDA
		const int want = TENSOR_ERR_CUDA; /* compiled in, no device */
#else
		const int want = TENSOR_ERR_DEVICE;
#endif
		tu_assert_error(!tensor_to_device(t, TENSOR_CUDA), want, "cuda", NULL);
	}
}
END_TEST

START_TEST(test_print)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	tensor_print(tensor_transpose(iota234(), 0, 1), "x", f);
	tensor_print(NULL, "nothing", f);
	fclose(f);
	ck_assert_msg(strstr(buf, "x: [3,2,4] f64 cpu (strided)"), "%s", buf);
	ck_assert_msg(strstr(buf, "[0, 1, 2, 3, 12, 13"), "%s", buf);
	ck_assert_msg(strstr(buf, "nothing: (null)"), "%s", buf);
	free(buf);
}
END_TEST

/* ---- memory --------------------------------------------------------------- */

START_TEST(test_scope_release)
{
	size_t live0 = tensor_mem_stats(TENSOR_CPU).live_bytes;
	const int64_t s[] = { 1000 };
	tensor_scope_begin();
	struct tensor *a = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, s);
	ck_assert(a->in_arena && a->storage->in_arena);
	ck_assert_uint_ge(tensor_mem_stats(TENSOR_CPU).live_bytes, live0 + 4000);
	tensor_scope_begin();
	struct tensor *b = tensor_ones(TENSOR_F64, TENSOR_CPU, 1, s);
	struct tensor *kept = tensor_scope_keep(b);
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK);
	/* kept lives in the outer scope and has b's values */
	ck_assert(kept->in_arena);
	ck_assert(tensor_get(kept, (int64_t[]){ 999 }) == 1.0);
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK);
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live0);
	(void)a;
}
END_TEST

START_TEST(test_heap_and_keep_to_heap)
{
	/* leave the fixture's scope to test heap tensors */
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK);
	size_t live0 = tensor_mem_stats(TENSOR_CPU).live_bytes;
	const int64_t s[] = { 256 };
	struct tensor *h = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, s);
	ck_assert(!h->in_arena);
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live0 + 1024);
	struct tensor *v = tensor_narrow(h, 0, 10, 5); /* heap view keeps storage alive */
	ck_assert_int_eq(h->storage->refcount, 2);
	tensor_free(h);
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live0 + 1024);
	tensor_free(v);
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live0);

	tensor_scope_begin();
	struct tensor *k = tensor_scope_keep(tensor_full(TENSOR_F32, TENSOR_CPU, 1, s, 2));
	tensor_scope_end();
	ck_assert(!k->in_arena);
	ck_assert(tensor_get(k, (int64_t[]){ 255 }) == 2);
	tensor_free(k);
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live0);
	tu_assert_error(tensor_scope_end() < 0, TENSOR_ERR_STATE, "no scope", NULL);
	tu_assert_error(!tensor_scope_keep(v), TENSOR_ERR_STATE, "no scope", NULL);
	tensor_mem_trim();
	tensor_scope_begin(); /* for the fixture's teardown */
}
END_TEST

START_TEST(test_steady_state_no_malloc)
{
	const int64_t s[] = { 64, 1024 };
	size_t allocs = 0;
	for (int step = 0; step < 5; step++) {
		tensor_scope_begin();
		for (int i = 0; i < 20; i++)
			ck_assert(tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, s) != NULL);
		tensor_scope_end();
		size_t now = tensor_mem_stats(TENSOR_CPU).n_device_allocs;
		if (step >= 1) /* after the first step, blocks are reused */
			ck_assert_uint_eq(now, allocs);
		allocs = now;
	}
}
END_TEST

START_TEST(test_peak_bytes)
{
	tensor_mem_reset_peak(TENSOR_CPU);
	size_t live0 = tensor_mem_stats(TENSOR_CPU).live_bytes;
	const int64_t s[] = { 1 << 20 };
	tensor_scope_begin();
	ck_assert(tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, s) != NULL);
	tensor_scope_end();
	struct tensor_mem_stats m = tensor_mem_stats(TENSOR_CPU);
	ck_assert_uint_eq(m.live_bytes, live0);
	ck_assert_uint_ge(m.peak_bytes, live0 + (4u << 20));
	ck_assert_uint_ge(m.reserved_bytes, 4u << 20);
	tensor_mem_reset_peak(TENSOR_CPU);
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).peak_bytes, live0);
}
END_TEST

/* tensor_scope_release_since hands back the blocks made after the mark (not
 * those also holding older data, nor a kept tensor's), and the next heap
 * tensor of that size reuses one without the allocator; trim returns it. */
START_TEST(test_scope_release_since)
{
	const int64_t big[] = { 3 << 20 }, small[] = { 16 }; /* 12 MiB: a block each */
	const size_t bytes = (size_t)12 << 20;
	struct tensor *before = tensor_full(TENSOR_F32, TENSOR_CPU, 1, small, 1);
	uint64_t mark = tensor_scope_mark();
	struct tensor *b1 = tensor_full(TENSOR_F32, TENSOR_CPU, 1, big, 2);
	struct tensor *b2 = tensor_full(TENSOR_F32, TENSOR_CPU, 1, big, 3);
	struct tensor *after = tensor_full(TENSOR_F32, TENSOR_CPU, 1, small, 4);
	ck_assert(before && b1 && b2 && after && tensor_scope_mark() > mark);
	size_t live = tensor_mem_stats(TENSOR_CPU).live_bytes;
	tensor_scope_release_since(0, mark, NULL, 0); /* depths not open: nothing */
	tensor_scope_release_since(2, mark, NULL, 0);
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live);
	tensor_scope_release_since(1, mark, (const struct tensor *[]){ NULL, b2 }, 2);
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live - bytes);
	ck_assert(tensor_get(b2, (int64_t[]){ (3 << 20) - 1 }) == 3);
	ck_assert(tensor_get(before, (int64_t[]){ 15 }) == 1);
	ck_assert(tensor_get(after, (int64_t[]){ 15 }) == 4); /* in before's block */
	size_t allocs = tensor_mem_stats(TENSOR_CPU).n_device_allocs;
	tensor_heap_begin();
	struct tensor *h = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, big);
	tensor_heap_end();
	ck_assert(h && tensor_get(h, (int64_t[]){ 0 }) == 0);
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).n_device_allocs, allocs);
	size_t reserved = tensor_mem_stats(TENSOR_CPU).reserved_bytes;
	tensor_free(h);
	tensor_mem_trim();
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).reserved_bytes, reserved - bytes);
}
END_TEST

/* Blocks come in size classes, a quarter of a power of two apart: a heap
 * tensor a little larger than a freed one of the same class takes its block
 * again; one past the class needs a new block. */
START_TEST(test_size_classes)
{
	tensor_mem_trim();
	size_t allocs = tensor_mem_stats(TENSOR_CPU).n_device_allocs;
	/* 10.0 and 10.4 MB round up to 5 x 2 MiB; 10.8 MB to 6 x 2 MiB */
	const int64_t n[] = { 2500000, 2600000, 2700000 };
	size_t grow[3] = { 1, 0, 1 };
	for (int i = 0; i < 3; i++) {
		tensor_heap_begin();
		struct tensor *t = tensor_full(TENSOR_F32, TENSOR_CPU, 1, &n[i], 1);
		tensor_heap_end();
		ck_assert(t && tensor_get(t, (int64_t[]){ n[i] - 1 }) == 1);
		size_t now = tensor_mem_stats(TENSOR_CPU).n_device_allocs;
		ck_assert_msg(now == allocs + grow[i], "tensor %d: %zu allocations, expected %zu",
			      i, now - allocs, grow[i]);
		allocs = now;
		tensor_free(t);
	}
	tensor_mem_trim();
}
END_TEST

/* The free list stays bounded: heap tensors of ever larger sizes, each freed
 * before the next, leave at most twice the most ever in use cached (the last
 * block, at most 1.25x its tensor), not the sum of them all (about 5x the
 * largest tensor). */
START_TEST(test_free_list_bounded)
{
	tensor_mem_trim();
	size_t before = tensor_mem_stats(TENSOR_CPU).reserved_bytes, sum = 0, largest = 0;
	int64_t n = 1 << 18; /* 1 MiB of f32, then 1.25x each time: 28 MiB at the end */
	for (int i = 0; i < 16; i++, n = n * 5 / 4) {
		tensor_heap_begin();
		struct tensor *t = tensor_empty(TENSOR_F32, TENSOR_CPU, 1, &n);
		tensor_heap_end();
		ck_assert(t);
		largest = tensor_nbytes(t);
		sum += largest;
		tensor_free(t);
	}
	size_t cached = tensor_mem_stats(TENSOR_CPU).reserved_bytes - before;
	ck_assert_msg(cached <= 5 * largest / 2,
		      "%zu bytes cached after tensors of %zu in all, the largest %zu", cached, sum,
		      largest);
	ck_assert(sum > 4 * largest);
	tensor_mem_trim();
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).reserved_bytes, before);
}
END_TEST

static int hook_depths[4], hook_calls;
static void record_depth(int depth)
{
	hook_depths[hook_calls++ & 3] = depth;
}

START_TEST(test_heap_mode_hook_writable)
{
	const int64_t s[] = { 8 };
	tensor_heap_begin();
	struct tensor *h = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, s);
	tensor_heap_end();
	ck_assert(!h->in_arena && !h->storage->in_arena);
	struct tensor *a = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, s);
	ck_assert(a->in_arena);
	tensor_free(h);

	int d0 = tensor_scope_depth();
	tensor_scope_set_end_hook(record_depth);
	tensor_scope_begin();
	tensor_scope_begin();
	tensor_scope_end();
	tensor_scope_end();
	tensor_scope_set_end_hook(NULL);
	ck_assert_int_eq(hook_calls, 2);
	ck_assert_int_eq(hook_depths[0], d0 + 2);
	ck_assert_int_eq(hook_depths[1], d0 + 1);

	a->storage->tape_refs = 1; /* as if autograd saved it */
	tu_assert_error(tensor_fill_(a, 1) < 0, TENSOR_ERR_STATE, "tensor_fill_", "autograd tape");
	tu_assert_error(tensor_copy_(a, a) < 0, TENSOR_ERR_STATE, "copy_", "in-place");
	tu_assert_error(tensor_uniform_(a, 1, 0, 1) < 0, TENSOR_ERR_STATE, "tensor_uniform_", NULL);
	a->storage->tape_refs = 0;
	ck_assert_int_eq(tensor_fill_(a, 1), TENSOR_OK);
}
END_TEST

/* ---- random --------------------------------------------------------------- */

START_TEST(test_random_reproducible)
{
	const int64_t s[] = { 1 << 15 };
	struct tensor *a = tensor_rand_uniform(TENSOR_F64, TENSOR_CPU, 1, s, 42, -2, 3);
	tensor_set_num_threads(1);
	struct tensor *b = tensor_rand_uniform(TENSOR_F64, TENSOR_CPU, 1, s, 42, -2, 3);
	tensor_set_num_threads(0);
	struct tensor *c = tensor_rand_uniform(TENSOR_F64, TENSOR_CPU, 1, s, 43, -2, 3);
	double *va = tu_values(a), *vb = tu_values(b), *vc = tu_values(c);
	int same_c = 0;
	double sum = 0, sq = 0;
	for (int64_t i = 0; i < s[0]; i++) {
		ck_assert(va[i] == vb[i]);
		ck_assert(va[i] >= -2 && va[i] < 3);
		same_c += va[i] == vc[i];
		sum += va[i];
		sq += (va[i] - 0.5) * (va[i] - 0.5);
	}
	ck_assert_int_lt(same_c, 3);
	/* mean 0.5 and variance 25/12 within a few standard errors */
	ck_assert(fabs(sum / s[0] - 0.5) < 0.05);
	ck_assert(fabs(sq / s[0] - 25.0 / 12) < 0.1);
	/* element i depends only on (seed, i): a strided fill of the same shape
	 * draws the same numbers in row-major order */
	const int64_t s2[] = { 64, 512 };
	struct tensor *d = tensor_rand_normal(TENSOR_F64, TENSOR_CPU, 2, s2, 7, 0, 1);
	struct tensor *store = tensor_empty(TENSOR_F64, TENSOR_CPU, 2, (int64_t[]){ 512, 64 });
	struct tensor *view = tensor_transpose(store, 0, 1);
	ck_assert_int_eq(tensor_normal_(view, 7, 0, 1), TENSOR_OK);
	double *vd = tu_values(d), *vv = tu_values(view);
	ck_assert_mem_eq(vd, vv, sizeof(double) * 64 * 512);
	free(va);
	free(vb);
	free(vc);
	free(vd);
	free(vv);
}
END_TEST

START_TEST(test_random_normal_stats)
{
	const int64_t s[] = { 1 << 16 };
	struct tensor *t = tensor_rand_normal(TENSOR_F32, TENSOR_CPU, 1, s, 3, 1.5, 2.0);
	double *v = tu_values(t);
	double sum = 0, sq = 0;
	int within1 = 0;
	for (int64_t i = 0; i < s[0]; i++)
		sum += v[i];
	double mean = sum / s[0];
	for (int64_t i = 0; i < s[0]; i++) {
		sq += (v[i] - mean) * (v[i] - mean);
		within1 += fabs(v[i] - 1.5) < 2.0;
	}
	free(v);
	ck_assert(fabs(mean - 1.5) < 0.03);
	ck_assert(fabs(sqrt(sq / s[0]) - 2.0) < 0.03);
	ck_assert(fabs((double)within1 / s[0] - 0.6827) < 0.01);
	/* f32 uniform never reaches hi */
	struct tensor *u = tensor_rand_uniform(TENSOR_F32, TENSOR_CPU, 1, s, 9, 0, 1e-7);
	double *vu = tu_values(u);
	for (int64_t i = 0; i < s[0]; i++)
		ck_assert((float)vu[i] < 1e-7f);
	free(vu);
}
END_TEST

/* The default thread count leaves out the CPUs other processes keep busy: counted from two
 * /proc/stat snapshots (per-CPU jiffies: user nice system idle iowait irq softirq steal). */
START_TEST(test_busy_cpus)
{
	const char *before = "cpu  400 0 100 1000 0 0 0 0 0 0\n"
			     "cpu0 100 0 0 500 0 0 0 0 0 0\n"
			     "cpu1 100 0 0 500 0 0 0 0 0 0\n"
			     "cpu2 100 0 0 500 0 0 0 0 0 0\n"
			     "cpu3 100 0 0 500 0 0 0 0 0 0\n"
			     "intr 12345 1 2 3\n";
	/* cpu0 all busy, cpu1 half (counts), cpu2 busy less than half, cpu3 waiting on I/O
	 * (idle), and the "cpu" total line is not a CPU */
	const char *after = "cpu  999 0 999 9999 0 0 0 0 0 0\n"
			    "cpu0 200 0 0 500 0 0 0 0 0 0\n"
			    "cpu1 125 0 25 550 0 0 0 0 0 0\n"
			    "cpu2 140 0 0 560 0 0 0 1 0 0\n"
			    "cpu3 100 0 0 520 80 0 0 0 0 0\n";
	ck_assert_int_eq(cpu_busy_cpus(before, after, NULL, 0), 2);
	ck_assert_int_eq(cpu_busy_cpus(before, before, NULL, 0), 0); /* no time passed */
	/* only this process's CPUs count (bound to cpu1 and cpu2: cpu1 busy; a CPU past the
	 * list is not one of them) */
	const bool mine[3] = { false, true, true };
	ck_assert_int_eq(cpu_busy_cpus(before, after, mine, 3), 1);
	ck_assert_int_eq(cpu_busy_cpus(before, after, mine, 1), 0);
	ck_assert_int_eq(cpu_busy_cpus("", after, NULL, 0), 0);
	ck_assert_int_eq(cpu_busy_cpus("cpuX 1 2 3 4\ngarbage\n", "cpu0 1\n", NULL, 0), 0);
	/* steal counts as busy: the hypervisor gave the time to someone else */
	ck_assert_int_eq(
	    cpu_busy_cpus("cpu0 0 0 0 100 0 0 0 0\n", "cpu0 0 0 0 150 0 0 0 60\n", NULL, 0), 1);
}
END_TEST

START_TEST(test_threads_and_blas)
{
	tensor_set_num_threads(1);
	ck_assert_int_eq(tensor_get_num_threads(), 1);
	tensor_set_num_threads(0);
	ck_assert_int_ge(tensor_get_num_threads(), 1);
	const char *arch = tensor_blas_arch();
	ck_assert(arch && arch[0]);
	/* The library's choice: BLIS's own on AMD family 19h (Zen 3, Zen 4),
	 * else skx wherever the AVX-512 subsets of those kernels are present. */
	__builtin_cpu_init();
	unsigned a, b, c, d, family = 0;
	if (__get_cpuid(1, &a, &b, &c, &d)) {
		family = (a >> 8) & 0xf;
		if (family == 0xf)
			family += (a >> 20) & 0xff;
	}
	bool zen34 = __builtin_cpu_is("amd") && family == 0x19;
	bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
		      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
	if (!getenv("BLIS_ARCH_TYPE") && zen34)
		ck_assert_str_eq(arch, "zen3");
	else if (!getenv("BLIS_ARCH_TYPE") && avx512)
		ck_assert_str_eq(arch, "skx");
}
END_TEST

START_TEST(test_dim_wrap_and_names)
{
	ck_assert_int_eq(tensor_dim_wrap("op", -1, 3), 2);
	ck_assert_int_eq(tensor_dim_wrap("op", 0, 3), 0);
	tu_assert_error(tensor_dim_wrap("myop", 3, 3) < 0, TENSOR_ERR_SHAPE, "myop", "dim 3");
	ck_assert_str_eq(tensor_dtype_name(TENSOR_I64), "i64");
	ck_assert_str_eq(tensor_device_name(TENSOR_CUDA), "cuda");
	ck_assert_uint_eq(tensor_dtype_size(TENSOR_F64), 8);
	ck_assert(tensor_device_available(TENSOR_CPU));
	/* NULL inputs propagate without overwriting the first error */
	tensor_error(TENSOR_ERR_ARG, "original");
	ck_assert(!tensor_transpose(NULL, 0, 1));
	ck_assert(!tensor_view(NULL, 0, NULL));
	ck_assert(!tensor_contiguous(NULL));
	ck_assert_str_eq(tensor_last_error(), "original");
	tensor_clear_error();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tensor");
	TCase *tc = tu_tcase("create");
	tcase_add_test(tc, test_create_fill);
	tcase_add_test(tc, test_fill_paths);
	tcase_add_test(tc, test_arange_from_data);
	tcase_add_test(tc, test_create_errors);
	tcase_add_test(tc, test_dim_wrap_and_names);
	suite_add_tcase(s, tc);
	tc = tu_tcase("views");
	tcase_add_test(tc, test_view_reshape);
	tcase_add_test(tc, test_permute_transpose);
	tcase_add_test(tc, test_dim_order);
	tcase_add_test(tc, test_slice_narrow_select);
	tcase_add_test(tc, test_expand_squeeze_unfold);
	suite_add_tcase(s, tc);
	tc = tu_tcase("copies");
	tcase_add_test(tc, test_contiguous_clone_copy);
	tcase_add_test(tc, test_to_device_cpu);
	tcase_add_test(tc, test_print);
	suite_add_tcase(s, tc);
	tc = tu_tcase("memory");
	tcase_add_test(tc, test_scope_release);
	tcase_add_test(tc, test_heap_and_keep_to_heap);
	tcase_add_test(tc, test_steady_state_no_malloc);
	tcase_add_test(tc, test_peak_bytes);
	tcase_add_test(tc, test_scope_release_since);
	tcase_add_test(tc, test_size_classes);
	tcase_add_test(tc, test_free_list_bounded);
	tcase_add_test(tc, test_heap_mode_hook_writable);
	suite_add_tcase(s, tc);
	tc = tu_tcase("random");
	tcase_add_test(tc, test_random_reproducible);
	tcase_add_test(tc, test_random_normal_stats);
	tcase_add_test(tc, test_busy_cpus);
	tcase_add_test(tc, test_threads_and_blas);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
