/* test_ops: where, masked_fill and dropout beside the op table's rows, against
 * naive loop references: every dtype of the condition and the values,
 * broadcasting, layouts, the dropout mask's statistics, and the errors. */
#include "autograd.h"
#include "elementwise_common.h"
#include "op_table.h"
#include "random.h"
#include "test_ops.h"

/* ---- where, masked_fill ---------------------------------------------------- */

/* Condition values with zeros, -0.0 (false) and negatives and NaN (true). */
static struct tensor *cond_input(enum tensor_dtype dt, int nd, const int64_t *shape, uint64_t seed)
{
	int64_t n = numel_of(nd, shape);
	double *v = rand_values(n ? n : 1, seed);
	bool is_float = dt == TENSOR_F32 || dt == TENSOR_F64;
	for (int64_t i = 0; i < n; i++) {
		double q = round(2 * v[i]); /* -2 .. 2, about a third zeros */
		if (is_float && i % 7 == 3)
			q = -0.0;
		if (is_float && i % 11 == 5)
			q = NAN;
		v[i] = q;
	}
	struct tensor *t = make(dt, nd, shape, v);
	free(v);
	return t;
}

static void check_where(const char *ctx, const struct tensor *got, const struct tensor *c,
			const struct tensor *a, const struct tensor *b, int nd,
			const int64_t *shape)
{
	double *vc = tu_values(c), *va = tu_values(a), *vb = tu_values(b);
	int64_t n = numel_of(nd, shape), idx[TENSOR_MAX_DIMS];
	double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
	for (int64_t i = 0; i < n; i++) {
		tu_unravel(i, nd, shape, idx);
		want[i] = vc[bcast_index(c, nd, idx)] != 0 ? va[bcast_index(a, nd, idx)]
							   : vb[bcast_index(b, nd, idx)];
	}
	assert_values(ctx, got, a->dtype, nd, shape, want, 0);
	free(vc);
	free(va);
	free(vb);
	free(want);
}

START_TEST(test_where)
{
	const int64_t sc[3] = { 2, 1, 4 }, sa[2] = { 3, 1 }, sb[1] = { 4 }, so[3] = { 2, 3, 4 };
	int seed = 0;
	for (int kc = 0; kc < LEN(all_dts); kc++) {
		for (int kv = 0; kv < LEN(all_dts); kv++) {
			struct tensor *cc = cond_input(all_dts[kc], 3, sc, seed++);
			struct tensor *ac =
			    binary_input(all_dts[kv], TENSOR_ADD, false, 2, sa, seed++);
			struct tensor *bc =
			    binary_input(all_dts[kv], TENSOR_ADD, true, 1, sb, seed++);
			for (int lay = 0; lay < NLAYOUTS; lay++) {
				struct tensor *c = in_layout(cc, lay), *a = in_layout(ac, lay);
				struct tensor *b = in_layout(bc, (lay + 1) % NLAYOUTS);
				char ctx[128];
				snprintf(ctx, sizeof ctx, "where cond %s values %s %s",
					 tensor_dtype_name(all_dts[kc]),
					 tensor_dtype_name(all_dts[kv]), layout_name[lay]);
				check_where(ctx, tensor_where(c, a, b), c, a, b, 3, so);
				/* same shapes, no broadcasting */
				struct tensor *cf =
				    in_layout(cond_input(all_dts[kc], 3, so, seed++), lay);
				struct tensor *af =
				    binary_input(all_dts[kv], TENSOR_ADD, 0, 3, so, 1);
				check_where(ctx, tensor_where(cf, af, a), cf, af, a, 3, so);
			}
		}
	}
	/* i64 values are moved exactly */
	const int64_t big[2] = { (1LL << 60) + 1, -(1LL << 62) - 1 }, s2[1] = { 2 };
	const int32_t cv[2] = { 0, 5 };
	struct tensor *x = tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, s2, big);
	struct tensor *c = tensor_from_data(TENSOR_I32, TENSOR_CPU, 1, s2, cv);
	int64_t got[2];
	int_values(tensor_where(c, x, tensor_neg(x)), got);
	ck_assert_int_eq(got[0], -big[0]);
	ck_assert_int_eq(got[1], big[1]);
}
END_TEST

START_TEST(test_masked_fill)
{
	const int64_t sx[3] = { 2, 3, 4 };
	static const struct {
		int nd;
		int64_t shape[3];
		enum tensor_dtype dt;
		int layout;
	} masks[] = {
		{ 2, { 3, 1 }, TENSOR_I32, CONTIG },	 { 1, { 4 }, TENSOR_F32, CONTIG },
		{ 3, { 2, 3, 4 }, TENSOR_I64, STRIDED }, { 3, { 2, 1, 4 }, TENSOR_F64, SLICED },
		{ 1, { 1 }, TENSOR_I32, CONTIG },	 { 0, { 0 }, TENSOR_F32, CONTIG },
	};
	const double values[] = { -INFINITY, 7.5, 0 };
	for (int k = 0; k < LEN(all_dts); k++) {
		enum tensor_dtype dt = all_dts[k];
		bool is_int = dt == TENSOR_I32 || dt == TENSOR_I64;
		struct tensor *xc = binary_input(dt, TENSOR_ADD, false, 3, sx, 70 + k);
		for (int m = 0; m < LEN(masks); m++) {
			struct tensor *mask =
			    in_layout(cond_input(masks[m].dt, masks[m].nd, masks[m].shape, 80 + m),
				      masks[m].layout);
			for (int v = 0; v < LEN(values); v++) {
				double value = is_int ? -3 * v - 1 : values[v];
				struct tensor *x = in_layout(xc, (m + v) % NLAYOUTS);
				struct tensor *fill = tensor_full(dt, TENSOR_CPU, 0, NULL, value);
				char ctx[128];
				snprintf(ctx, sizeof ctx, "masked_fill %s mask %d value %g",
					 tensor_dtype_name(dt), m, value);
				check_where(ctx, tensor_masked_fill(x, mask, value), mask, fill, x,
					    3, sx);
				/* in place: the same values in x's own (contiguous) memory */
				struct tensor *y = tensor_clone(x);
				void *data = tensor_data(y);
				ck_assert_int_eq(tensor_masked_fill_(y, mask, value), TENSOR_OK);
				ck_assert_ptr_eq(tensor_data(y), data);
				check_where(ctx, y, mask, fill, x, 3, sx);
			}
		}
	}
	/* exact for i64 */
	const int64_t big[2] = { (1LL << 60) + 1, 4 }, s2[1] = { 2 }, s1[1] = { 1 };
	const int32_t one[1] = { 1 };
	int64_t got[2];
	int_values(tensor_masked_fill(tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, s2, big),
				      tensor_from_data(TENSOR_I32, TENSOR_CPU, 1, s1, one),
				      -(0x1p60)),
		   got);
	ck_assert_int_eq(got[0], -(1LL << 60));
	ck_assert_int_eq(got[1], -(1LL << 60));
}
END_TEST

START_TEST(test_where_errors)
{
	const int64_t s25[2] = { 2, 5 }, s31[2] = { 3, 1 }, s4[1] = { 4 }, sx[3] = { 2, 3, 4 };
	struct tensor *c = tensor_zeros(TENSOR_I32, TENSOR_CPU, 2, s25);
	struct tensor *a = tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, s31);
	struct tensor *b = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, s4);
	tu_assert_error(!tensor_where(c, a, b), TENSOR_ERR_SHAPE,
			"where: ", "cond [2,5], a [3,1] and b [4]");
	struct tensor *d = tensor_zeros(TENSOR_F64, TENSOR_CPU, 1, s4);
	tu_assert_error(!tensor_where(b, a, d), TENSOR_ERR_DTYPE,
			"where: ", "[3,1] f32 and [4] f64");

	struct tensor *x = tensor_zeros(TENSOR_F32, TENSOR_CPU, 3, sx);
	const int64_t s5[1] = { 5 }, s2234[4] = { 2, 2, 3, 4 }, s34[2] = { 3, 4 };
	tu_assert_error(!tensor_masked_fill(x, tensor_zeros(TENSOR_I32, TENSOR_CPU, 1, s5), 0),
			TENSOR_ERR_SHAPE, "masked_fill",
			"mask [5] does not broadcast to x [2,3,4]");
	tu_assert_error(!tensor_masked_fill(x, tensor_zeros(TENSOR_I32, TENSOR_CPU, 4, s2234), 0),
			TENSOR_ERR_SHAPE, "masked_fill", "mask [2,2,3,4]");
	/* the output has x's shape: a mask wider than x is an error */
	tu_assert_error(!tensor_masked_fill(a, tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, s34), 0),
			TENSOR_ERR_SHAPE, "masked_fill",
			"mask [3,4] does not broadcast to x [3,1]");
	struct tensor *xi = tensor_zeros(TENSOR_I32, TENSOR_CPU, 3, sx);
	tu_assert_error(!tensor_masked_fill(xi, b, 0.5), TENSOR_ERR_ARG, "masked_fill", "i32");
	tu_assert_error(!tensor_masked_fill(xi, b, -INFINITY), TENSOR_ERR_ARG, "masked_fill",
			"[2,3,4]");
	/* in place: the same checks, x contiguous and not saved for backward */
	struct tensor *m4 = tensor_zeros(TENSOR_I32, TENSOR_CPU, 1, s4);
	tu_assert_error(tensor_masked_fill_(x, tensor_zeros(TENSOR_I32, TENSOR_CPU, 1, s5), 0) ==
			    TENSOR_ERR_SHAPE,
			TENSOR_ERR_SHAPE, "tensor_masked_fill_",
			"mask [5] does not broadcast to x [2,3,4]");
	tu_assert_error(tensor_masked_fill_(xi, m4, 0.5) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"tensor_masked_fill_", "value 0.5 does not fit x i32");
	tu_assert_error(tensor_masked_fill_(tensor_transpose(x, 0, 2),
					    tensor_zeros(TENSOR_I32, TENSOR_CPU, 0, NULL),
					    0) == TENSOR_ERR_SHAPE,
			TENSOR_ERR_SHAPE, "tensor_masked_fill_", "x [4,3,2] is not contiguous");
	tu_assert_error(tensor_masked_fill_(NULL, m4, 0) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"tensor_masked_fill_", "NULL");
	tu_assert_error(tensor_masked_fill_(x, NULL, 0) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"tensor_masked_fill_", "NULL");
	struct tensor *leaf = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, s4);
	ck_assert_int_eq(ag_requires_grad(leaf, true), TENSOR_OK);
	struct tensor *saved = ag_mul(leaf, leaf); /* saves leaf */
	ck_assert_ptr_nonnull(saved);
	tu_assert_error(tensor_masked_fill_(leaf, m4, 0) == TENSOR_ERR_STATE, TENSOR_ERR_STATE,
			"tensor_masked_fill_", "saved by the autograd tape");
	ag_tape_reset();
}
END_TEST

/* The OpenMP path (where on large tensors; the rest of it in
 * test_ops_elementwise.c: test_large). */
START_TEST(test_where_large)
{
	tensor_set_num_threads(3);
	const int64_t s2[2] = { 512, 256 }, sb[1] = { 256 };
	for (int k = 0; k < LEN(float_dts); k++) {
		enum tensor_dtype dt = float_dts[k];
		struct tensor *x = tu_rand(dt, 2, s2, 3), *bias = tu_rand(dt, 1, sb, 6);
		struct tensor *cond = cond_input(TENSOR_I32, 2, s2, 10);
		check_where("large where", tensor_where(cond, x, bias), cond, x, bias, 2, s2);
	}
	tensor_set_num_threads(0);
}
END_TEST

/* ---- dropout --------------------------------------------------------------- */

/* x * keep / (1 - p) with keep = ref_dropout_keep(seed, i, p). */
static double *dropout_ref(const struct tensor *x, double p, uint64_t seed)
{
	double *vx = tu_values(x);
	double scale = x->dtype == TENSOR_F32 ? (double)(float)(1 / (1 - p)) : 1 / (1 - p);
	for (int64_t i = 0; i < tensor_numel(x); i++) {
		double y = vx[i] * (ref_dropout_keep(seed, (uint64_t)i, p) ? scale : 0);
		vx[i] = x->dtype == TENSOR_F32 ? (double)(float)y : y;
	}
	return vx;
}

/* Exactly the reference in every layout, dtype and p, across chunk and
 * thread boundaries (65,536 elements a chunk); in place the same. Run with the
 * CPU's own kernel (_i = 0), the portable loop (_i = 1) and the AVX2
 * intrinsics (_i = 2; the portable loop again on a CPU without AVX2). */
START_TEST(test_dropout)
{
	static const char *kernel[] = { NULL, "portable", "avx2" };
	if (kernel[_i])
		setenv("CFORMER_DROPOUT_KERNEL", kernel[_i], 1);
	const int64_t shapes[][2] = { { 3, 7 }, { 37, 29 }, { 257, 513 } };
	/* 2^-33: only words of 0 dropped; 1 - 2^-40: a threshold of 2^32, none kept */
	const double ps[] = { 0, 0.1, 0.5, 0.9, 0x1p-33, 1 - 0x1p-40 };
	tensor_set_num_threads(3);
	for (int k = 0; k < LEN(float_dts); k++)
		for (int si = 0; si < LEN(shapes); si++)
			for (int pi = 0; pi < LEN(ps); pi++) {
				enum tensor_dtype dt = float_dts[k];
				struct tensor *x = tu_rand(dt, 2, shapes[si], 40 + si);
				uint64_t seed = 0x123456789abcull + (uint64_t)pi;
				double *want = dropout_ref(x, ps[pi], seed);
				char ctx[96];
				for (int lay = 0; lay < NLAYOUTS; lay++) {
					snprintf(ctx, sizeof ctx, "dropout %s %s [%lld,%lld] p %g",
						 tensor_dtype_name(dt), layout_name[lay],
						 (long long)shapes[si][0], (long long)shapes[si][1],
						 ps[pi]);
					assert_values(
					    ctx, tensor_dropout(in_layout(x, lay), ps[pi], seed),
					    dt, 2, shapes[si], want, 0);
				}
				struct tensor *y = tensor_clone(x);
				ck_assert_int_eq(tensor_dropout_(y, ps[pi], seed), TENSOR_OK);
				assert_values("dropout in place", y, dt, 2, shapes[si], want, 0);
				/* rows [lo, rows) drawn from lo * cols: the same rows of the mask */
				int64_t rows = shapes[si][0], cols = shapes[si][1], lo = rows / 3;
				const int64_t part[2] = { rows - lo, cols };
				struct tensor *sx =
				    tensor_contiguous(tensor_narrow(x, 0, lo, rows - lo));
				uint64_t first = (uint64_t)(lo * cols);
				assert_values("dropout of a shard",
					      tensor_dropout_at(sx, ps[pi], seed, first), dt, 2,
					      part, want + lo * cols, 0);
				ck_assert_int_eq(tensor_dropout_at_(sx, ps[pi], seed, first),
						 TENSOR_OK);
				assert_values("dropout of a shard in place", sx, dt, 2, part,
					      want + lo * cols, 0);
				int64_t n = tensor_numel(x), dropped = 0;
				for (int64_t i = 0; i < n; i++)
					dropped += want[i] == 0;
				double rate = (double)dropped / (double)n;
				if (n > 1000)
					ck_assert_msg(fabs(rate - ps[pi]) < 0.05,
						      "dropped %g at p %g", rate, ps[pi]);
				free(want);
			}
	tensor_set_num_threads(0);
	unsetenv("CFORMER_DROPOUT_KERNEL");
}
END_TEST

/* Philox-4x32-10 under which dropout draws: Random123's published known answer for
 * counter 0 and key 0 (so that the reference above rests on the standard generator). */
START_TEST(test_philox_known_answer)
{
	static const uint32_t want[4] = { 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 };
	struct philox4 r = philox4x32(0, 0);
	for (int i = 0; i < 4; i++)
		ck_assert_msg(r.v[i] == want[i], "word %d: %08x, want %08x", i, r.v[i], want[i]);
}
END_TEST

START_TEST(test_dropout_errors)
{
	const int64_t s23[2] = { 2, 3 };
	struct tensor *x = tu_rand(TENSOR_F32, 2, s23, 1);
	tu_assert_error(!tensor_dropout(NULL, 0.5, 1), TENSOR_ERR_ARG, "tensor_dropout", "NULL");
	tu_assert_error(!tensor_dropout(x, 1, 1), TENSOR_ERR_ARG, "tensor_dropout",
			"p 1, expected 0 <= p < 1");
	tu_assert_error(!tensor_dropout(x, -0.1, 1), TENSOR_ERR_ARG, "tensor_dropout", "p -0.1");
	tu_assert_error(!tensor_dropout(x, NAN, 1), TENSOR_ERR_ARG, "tensor_dropout", "p nan");
	tu_assert_error(!tensor_dropout(tensor_zeros(TENSOR_I64, TENSOR_CPU, 2, s23), 0.5, 1),
			TENSOR_ERR_DTYPE, "tensor_dropout", "x [2,3] is i64, expected f32 or f64");
	tu_assert_error(tensor_dropout_(NULL, 0.5, 1), TENSOR_ERR_ARG, "tensor_dropout_", "NULL");
	tu_assert_error(tensor_dropout_(tensor_transpose(x, 0, 1), 0.5, 1), TENSOR_ERR_SHAPE,
			"tensor_dropout_", "x [3,2] is not contiguous");
	tu_assert_error(tensor_dropout_(x, 1.5, 1), TENSOR_ERR_ARG, "tensor_dropout_", "p 1.5");
	/* a tensor the tape saves is not overwritten */
	struct tensor *w = tu_rand(TENSOR_F32, 2, s23, 2);
	w->requires_grad = true;
	struct tensor *e = ag_exp(w); /* saves its output */
	double before = tensor_get(e, (int64_t[]){ 0, 0 });
	tu_assert_error(tensor_dropout_(e, 0.5, 1), TENSOR_ERR_STATE, "tensor_dropout_", "saved");
	ck_assert(tensor_get(e, (int64_t[]){ 0, 0 }) == before);
	ag_tape_reset();
}
END_TEST

/* ag_dropout_at's backward applies its forward's mask: on a shard of rows, the
 * whole tensor's mask rows. */
START_TEST(test_dropout_at_grad)
{
	const int64_t shape[2] = { 6, 5 }, part[2] = { 4, 5 };
	struct tensor *x = tu_rand(TENSOR_F64, 2, shape, 3);
	double *want = dropout_ref(tensor_full(TENSOR_F64, TENSOR_CPU, 2, shape, 1), 0.4, 99);
	struct tensor *leaf = tensor_contiguous(tensor_narrow(x, 0, 2, 4));
	ck_assert_int_eq(ag_requires_grad(leaf, true), TENSOR_OK);
	struct tensor *y = ag_dropout_at(leaf, 0.4, 99, 2 * 5, true);
	ck_assert_int_eq(ag_backward(ag_sum(y, 0, NULL, false), NULL), TENSOR_OK);
	assert_values("d dropout_at", leaf->grad, TENSOR_F64, 2, part, want + 2 * 5, 0);
	ag_tape_reset();
	tensor_free(leaf->grad);
	leaf->grad = NULL;
	free(want);
}
END_TEST

void ops_where_tcases(Suite *s)
{
	TCase *tc = tu_tcase("where");
	tcase_add_test(tc, test_where);
	tcase_add_test(tc, test_masked_fill);
	tcase_add_test(tc, test_where_errors);
	tcase_add_test(tc, test_where_large);
	tcase_add_loop_test(tc, test_dropout, 0, 3);
	tcase_add_test(tc, test_philox_known_answer);
	tcase_add_test(tc, test_dropout_errors);
	tcase_add_test(tc, test_dropout_at_grad);
	suite_add_tcase(s, tc);
}
