/* nn_attention: forward against naive loops (masks, causal, rows with every key masked),
 * gradient checks, the heads one at a time, dropout in evaluation, the observer, errors;
 * each on the CPU's fused attention (tensor_attention) and on the composed path
 * (test_attention_fused checks the two against each other; test_nn_mha the module). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_ref.h"
#include "backend.h"
#include "gradcheck.h"
#include "nn.h"
#include "testutil.h"

/* ---- nn_attention forward ------------------------------------------------------ */

/* One configuration against the loops, for both dtypes and contiguous and
 * strided inputs. */
static void check_attention(int64_t B, int64_t H, int64_t T, int64_t S, int64_t d, int64_t dv,
			    const struct tensor *mask, bool causal, double scale)
{
	enum tensor_dtype dts[2] = { TENSOR_F32, TENSOR_F64 };
	for (int di = 0; di < 2; di++)
		for (int strided = 0; strided < 2; strided++) {
			enum tensor_dtype dt = dts[di];
			struct tensor *q = tu_rand(dt, 4, (int64_t[]){ B, H, T, d }, 11);
			struct tensor *k = tu_rand(dt, 4, (int64_t[]){ B, H, S, d }, 12);
			struct tensor *v = tu_rand(dt, 4, (int64_t[]){ B, H, S, dv }, 13);
			q = tensor_mul_scalar(q, 3); /* peaky softmax rows */
			double *vq = tu_values(q), *vk = tu_values(k), *vv = tu_values(v);
			double *vm = mask ? tu_values(mask) : NULL;
			if (strided) {
				q = tu_strided(q);
				k = tu_strided(k);
				v = tu_strided(v);
			}
			struct tensor *out = nn_attention(q, k, v, mask, causal, scale, NULL);
			ck_assert_msg(out != NULL, "%s", tensor_last_error());
			tu_assert_shape(out, 4, (int64_t[]){ B, H, T, dv });
			double *want = malloc(sizeof(double) * (size_t)(B * H * T * dv + 1));
			tu_ref_attention(vq, vk, vv, vm, causal, scale, B, H, T, S, d, dv, want);
			tu_assert_close(out, want, B * H * T * dv, tu_tol(dt), tu_tol(dt));
			double *got = tu_values(out);
			for (int64_t i = 0; i < B * H * T * dv; i++)
				ck_assert(isfinite(got[i]));
			free(got);
			free(want);
			free(vq);
			free(vk);
			free(vv);
			free(vm);
		}
}

START_TEST(test_attention_plain)
{
	check_attention(2, 3, 5, 7, 4, 4, NULL, false, 0.5);
	check_attention(1, 2, 6, 3, 5, 2, NULL, false, 1.0); /* dv != d, d > S */
	check_attention(2, 1, 1, 1, 3, 3, NULL, false, 0.7);
}
END_TEST

START_TEST(test_attention_key_mask)
{
	/* batch 0 partly padded, batch 1 fully padded (its rows give zeros) */
	struct tensor *m = tu_mask_i32(2, 6, (const int[]){ 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0 });
	check_attention(2, 3, 4, 6, 3, 3, m, false, 0.6);
	/* other mask dtypes and nonzero values: f32 with -1 and 2, i64 */
	struct tensor *mf = tensor_from_data(TENSOR_F32, TENSOR_CPU, 2, (int64_t[]){ 2, 3 },
					     (const float[]){ 0, 2, -1, 0.5f, 0, -3 });
	check_attention(2, 2, 3, 3, 2, 2, mf, false, 1.0);
	struct tensor *ml = tensor_from_data(TENSOR_I64, TENSOR_CPU, 2, (int64_t[]){ 1, 4 },
					     (const int64_t[]){ 7, 1, -2, 0 });
	check_attention(1, 2, 5, 4, 3, 3, ml, false, 0.5);
	/* a strided mask (transposed storage) */
	check_attention(2, 3, 4, 6, 3, 3, tu_strided(m), false, 0.6);
}
END_TEST

START_TEST(test_attention_causal)
{
	check_attention(2, 2, 5, 5, 3, 3, NULL, true, 0.5);
	/* with padding: batch 0 pads its first two keys, so rows 0 and 1 see
	 * nothing (zeros); batch 1 pads the tail */
	struct tensor *m = tu_mask_i32(2, 5, (const int[]){ 0, 0, 1, 1, 1, 1, 1, 1, 0, 0 });
	check_attention(2, 2, 5, 5, 3, 3, m, true, 0.5);
}
END_TEST

START_TEST(test_attention_empty)
{
	/* no queries, or no keys (every row then sees nothing: zeros) */
	const int none[1] = { 0 };
	check_attention(2, 2, 0, 3, 4, 4, NULL, false, 0.5);
	check_attention(2, 2, 3, 0, 4, 5, NULL, false, 0.5);
	check_attention(2, 2, 3, 0, 4, 5, tu_mask_i32(2, 0, none), false, 0.5);
	check_attention(2, 2, 0, 0, 4, 4, tu_mask_i32(2, 0, none), true, 0.5);
}
END_TEST

START_TEST(test_attention_all_masked_rows_zero)
{
	/* explicit: every key padded gives exact zeros, never NaN, in f32 and f64 */
	for (int di = 0; di < 2; di++) {
		enum tensor_dtype dt = di ? TENSOR_F64 : TENSOR_F32;
		struct tensor *q = tu_rand(dt, 4, (int64_t[]){ 1, 2, 3, 4 }, 1);
		struct tensor *k = tu_rand(dt, 4, (int64_t[]){ 1, 2, 3, 4 }, 2);
		struct tensor *v = tu_rand(dt, 4, (int64_t[]){ 1, 2, 3, 4 }, 3);
		struct tensor *m = tu_mask_i32(1, 3, (const int[]){ 0, 0, 0 });
		for (int causal = 0; causal < 2; causal++) {
			struct tensor *o = nn_attention(q, k, v, m, causal, 0.5, NULL);
			ck_assert(o != NULL);
			double *vo = tu_values(o);
			for (int i = 0; i < 24; i++)
				ck_assert(vo[i] == 0.0);
			free(vo);
		}
	}
}
END_TEST

START_TEST(test_attention_large_scores_f32)
{
	/* Scores near +-1e4 stay finite and exact-ish in f32 (max subtracted),
	 * and masked keys get exactly zero weight. */
	struct tensor *q =
	    tensor_mul_scalar(tu_rand(TENSOR_F32, 4, (int64_t[]){ 1, 1, 3, 2 }, 4), 100);
	struct tensor *k =
	    tensor_mul_scalar(tu_rand(TENSOR_F32, 4, (int64_t[]){ 1, 1, 4, 2 }, 5), 100);
	struct tensor *v = tu_rand(TENSOR_F32, 4, (int64_t[]){ 1, 1, 4, 2 }, 6);
	struct tensor *m = tu_mask_i32(1, 4, (const int[]){ 1, 0, 1, 0 });
	struct tensor *o = nn_attention(q, k, v, m, false, 1.0, NULL);
	double *vq = tu_values(q), *vk = tu_values(k), *vv = tu_values(v), want[6];
	tu_ref_attention(vq, vk, vv, (const double[]){ 1, 0, 1, 0 }, false, 1.0, 1, 1, 3, 4, 2, 2,
			 want);
	tu_assert_close(o, want, 6, 1e-5, 1e-4);
	free(vq);
	free(vk);
	free(vv);
}
END_TEST

START_TEST(test_attention_no_copy_of_k)
{
	/* Under no-grad, the whole call allocates q*scale, the scores (normalised
	 * into probabilities in place) and the output: k^T is a view, not a copy. */
	const int64_t B = 2, H = 2, T = 16, S = 32, d = 8;
	struct tensor *q = tu_rand(TENSOR_F32, 4, (int64_t[]){ B, H, T, d }, 1);
	struct tensor *k = tu_rand(TENSOR_F32, 4, (int64_t[]){ B, H, S, d }, 2);
	struct tensor *v = tu_rand(TENSOR_F32, 4, (int64_t[]){ B, H, S, d }, 3);
	size_t used = tu_attention_peak(q, k, v);
	size_t want = sizeof(float) * (size_t)(B * H * (T * d + T * S + T * d));
	ck_assert_msg(used >= want && used < want + 4096, "used %zu, expected %zu", used, want);
}
END_TEST

/* ---- nn_attention gradients ---------------------------------------------------- */

struct att_ctx {
	const struct tensor *mask;
	bool causal;
	double scale;
	struct nn_dropout *drop; /* or NULL; the same masks every call */
};

static struct tensor *f_attention(struct tensor *const *in, void *ctx)
{
	const struct att_ctx *c = ctx;
	if (c->drop)
		c->drop->ps->rng_counter = 0;
	return nn_attention(in[0], in[1], in[2], c->mask, c->causal, c->scale, c->drop);
}

START_TEST(test_attention_gradients)
{
	struct tensor *m = tu_mask_i32(2, 4, (const int[]){ 1, 0, 1, 1, 0, 0, 0, 0 });
	struct tensor *mc = tu_mask_i32(2, 4, (const int[]){ 0, 1, 1, 0, 1, 1, 1, 1 });
	const struct {
		const char *name;
		const struct tensor *mask;
		bool causal;
		int64_t t, d;
	} cases[] = {
		/* the scale goes on q (d <= S, T <= S), on k (S < T) or on the
		 * scores (d > T, S) */
		{ "plain", NULL, false, 3, 3 },
		{ "key_mask", m, false, 3, 3 },
		{ "causal", NULL, true, 4, 3 },
		{ "causal+key_mask", mc, true, 4, 3 },
		{ "scale on k, key_mask", m, false, 6, 3 },
		{ "scale on scores, key_mask", m, false, 3, 6 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int64_t T = cases[i].t, d = cases[i].d;
		struct tensor *q = gc_input(4, (int64_t[]){ 2, 2, T, d }, 1, -1.5, 1.5, false);
		struct tensor *k = gc_input(4, (int64_t[]){ 2, 2, 4, d }, 2, -1.5, 1.5, true);
		struct tensor *v = gc_input(4, (int64_t[]){ 2, 2, 4, 3 }, 3, -1, 1, false);
		struct att_ctx c = { cases[i].mask, cases[i].causal, 0.7, NULL };
		gc_assert(cases[i].name, f_attention, &c, 3, (struct tensor *[]){ q, k, v });
		if (cases[i].mask) { /* padded keys and values get exactly zero gradient */
			double *mv = tu_values(cases[i].mask), *gk = tu_values(k->grad),
			       *gv = tu_values(v->grad);
			for (int64_t j = 0; j < 2 * 2 * 4 * 3; j++) {
				int64_t b = j / 24, s = (j / 3) % 4;
				if (mv[b * 4 + s] == 0)
					ck_assert(gv[j] == 0);
			}
			for (int64_t j = 0; j < 2 * 2 * 4 * d; j++) {
				int64_t b = j / (8 * d), s = (j / d) % 4;
				if (mv[b * 4 + s] == 0)
					ck_assert(gk[j] == 0);
			}
			free(mv);
			free(gk);
			free(gv);
		}
	}
	/* past one block of queries (the fused kernel's 64 rows), causal with padding */
	int vals[70];
	for (int i = 0; i < 70; i++)
		vals[i] = i % 9 != 4;
	struct tensor *q = gc_input(4, (int64_t[]){ 1, 1, 70, 2 }, 4, -1.5, 1.5, false);
	struct tensor *k = gc_input(4, (int64_t[]){ 1, 1, 70, 2 }, 5, -1.5, 1.5, true);
	struct tensor *v = gc_input(4, (int64_t[]){ 1, 1, 70, 3 }, 6, -1, 1, false);
	struct att_ctx c = { tu_mask_i32(1, 70, vals), true, 0.7, NULL };
	tensor_cpu_attention_block(1); /* the fused kernel's blocks of 64 queries */
	gc_assert("two blocks, causal+key_mask", f_attention, &c, 3,
		  (struct tensor *[]){ q, k, v });
	tensor_cpu_attention_block(0);
}
END_TEST

/* Dropout of the probabilities (a fixed mask, the same seeds each call), fused kernel and
 * composed path, over one block and two: its gradients checked by finite differences. */
START_TEST(test_attention_dropout_gradients)
{
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 7), TENSOR_OK);
	struct nn_dropout dr;
	ck_assert_int_eq(nn_dropout_init(&dr, &ps, 0.4), TENSOR_OK);
	int vals[70];
	for (int i = 0; i < 70; i++)
		vals[i] = i % 9 != 4;
	struct tensor *m = tu_mask_i32(1, 70, vals);
	for (int fused = 0; fused < 2; fused++) {
		tensor_cpu_set_fused(fused);
		struct tensor *q = gc_input(4, (int64_t[]){ 1, 2, 5, 3 }, 1, -1.5, 1.5, false);
		struct tensor *k = gc_input(4, (int64_t[]){ 1, 2, 6, 3 }, 2, -1.5, 1.5, true);
		struct tensor *v = gc_input(4, (int64_t[]){ 1, 2, 6, 4 }, 3, -1, 1, false);
		struct att_ctx c = { NULL, false, 0.7, &dr };
		gc_assert(fused ? "dropout, fused" : "dropout, composed", f_attention, &c, 3,
			  (struct tensor *[]){ q, k, v });
		q = gc_input(4, (int64_t[]){ 1, 1, 70, 2 }, 4, -1.5, 1.5, false);
		k = gc_input(4, (int64_t[]){ 1, 1, 70, 2 }, 5, -1.5, 1.5, true);
		v = gc_input(4, (int64_t[]){ 1, 1, 70, 3 }, 6, -1, 1, false);
		c = (struct att_ctx){ m, true, 0.7, &dr };
		tensor_cpu_attention_block(1);
		gc_assert("dropout, two blocks, causal+key_mask", f_attention, &c, 3,
			  (struct tensor *[]){ q, k, v });
		tensor_cpu_attention_block(0);
	}
	tensor_cpu_set_fused(true);
	nn_params_free(&ps);
}
END_TEST

START_TEST(test_attention_dropout_eval)
{
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 1), TENSOR_OK);
	struct nn_dropout dr;
	ck_assert_int_eq(nn_dropout_init(&dr, &ps, 0.4), TENSOR_OK);
	struct tensor *q = tu_rand(TENSOR_F64, 4, (int64_t[]){ 1, 2, 4, 3 }, 1);
	struct tensor *k = tu_rand(TENSOR_F64, 4, (int64_t[]){ 1, 2, 4, 3 }, 2);
	struct tensor *v = tu_rand(TENSOR_F64, 4, (int64_t[]){ 1, 2, 4, 3 }, 3);
	struct tensor *ref = nn_attention(q, k, v, NULL, true, 0.5, NULL);
	struct tensor *tr = nn_attention(q, k, v, NULL, true, 0.5, &dr);
	double *a = tu_values(tr), *b = tu_values(ref);
	bool differs = false;
	for (int i = 0; i < 24; i++)
		differs |= fabs(a[i] - b[i]) > 1e-9;
	ck_assert(differs);
	free(a);
	free(b);
	nn_params_train(&ps, false);
	tu_assert_same(nn_attention(q, k, v, NULL, true, 0.5, &dr), ref, 0);
	nn_params_free(&ps);
}
END_TEST

/* ---- the observer ---------------------------------------------------------------- */

struct seen {
	int calls, fail;
	struct tensor *p; /* a copy of the last probabilities */
};

static int observe(void *ctx, const struct tensor *p)
{
	struct seen *s = ctx;
	s->calls++;
	if (s->fail == 1)
		return tensor_error(TENSOR_ERR_ARG, "observer: refused p of %lld rows",
				    (long long)p->shape[2]);
	if (s->fail == 2) /* fails without saying why */
		return -1;
	tensor_free(s->p);
	s->p = tensor_clone(p);
	return s->p ? TENSOR_OK : tensor_last_status();
}

/* The observer sees the probabilities: with v the identity the output is p
 * itself; padded keys hold 0; the call's error is the observer's; none after
 * removal. */
START_TEST(test_attention_observer)
{
	const int64_t B = 2, H = 2, T = 3, S = 4, d = 3;
	struct tensor *q = tu_rand(TENSOR_F64, 4, (int64_t[]){ B, H, T, d }, 61);
	struct tensor *k = tu_rand(TENSOR_F64, 4, (int64_t[]){ B, H, S, d }, 62);
	struct tensor *eye = tensor_zeros(TENSOR_F64, TENSOR_CPU, 4, (int64_t[]){ B, H, S, S });
	for (int64_t i = 0; i < B * H * S; i++)
		((double *)tensor_data(eye))[i * S + i % S] = 1;
	struct tensor *m = tu_mask_i32(B, S, (const int[]){ 1, 1, 0, 1, 1, 1, 1, 1 });
	struct seen seen = { 0 };
	nn_set_attention_observer(observe, &seen);
	struct tensor *out = nn_attention(q, k, eye, m, false, 0.7, NULL);
	ck_assert_msg(out != NULL, "%s", tensor_last_error());
	ck_assert_int_eq(seen.calls, 1);
	tu_assert_shape(seen.p, 4, (int64_t[]){ B, H, T, S });
	tu_assert_same(seen.p, out, 0);
	double *p = tu_values(seen.p);
	for (int64_t r = 0; r < B * H * T; r++) {
		double sum = 0;
		for (int64_t c = 0; c < S; c++)
			sum += p[r * S + c];
		ck_assert_double_eq_tol(sum, 1, 1e-12);
		if (r < H * T) /* sequence 0: key 2 is padding */
			ck_assert_double_eq(p[r * S + 2], 0);
	}
	free(p);
	seen.fail = 1;
	tu_assert_error(!nn_attention(q, k, eye, m, false, 0.7, NULL), TENSOR_ERR_ARG, "observer",
			"3 rows");
	seen.fail = 2;
	tu_assert_error(!nn_attention(q, k, eye, m, false, 0.7, NULL), TENSOR_ERR_ARG,
			"nn_attention", "observer returned -1");
	ck_assert_int_eq(seen.calls, 3);
	nn_set_attention_observer(NULL, NULL);
	ck_assert(nn_attention(q, k, eye, m, false, 0.7, NULL) != NULL);
	ck_assert_int_eq(seen.calls, 3);
	tensor_free(seen.p);
}
END_TEST

/* ---- errors --------------------------------------------------------------------- */

/* The heads one at a time, joined: equal to the batched call merged, with
 * dv != d and a key mask, with and without grad; without grad the peak is the
 * result plus one head's working set; the errors of nn_attention. */
START_TEST(test_attention_by_head)
{
	const int64_t B = 2, H = 3, T = 5, S = 4, d = 3, dv = 2;
	struct tensor *q = tu_rand(TENSOR_F64, 4, (int64_t[]){ B, H, T, d }, 51);
	struct tensor *k = tu_rand(TENSOR_F64, 4, (int64_t[]){ B, H, S, d }, 52);
	struct tensor *v = tu_rand(TENSOR_F64, 4, (int64_t[]){ B, H, S, dv }, 53);
	struct tensor *m = tu_mask_i32(B, S, (const int[]){ 1, 0, 1, 1, 0, 0, 0, 0 });
	struct tensor *o = nn_attention(q, k, v, m, false, 0.5, NULL);
	struct tensor *merged = tensor_reshape(tensor_permute(o, (int[]){ 0, 2, 1, 3 }), 3,
					       (int64_t[]){ B, T, H * dv });
	double *want = tu_values(merged);
	struct tensor *y = nn_attention_by_head(q, k, v, m, false, 0.5, NULL);
	tu_assert_shape(y, 3, (int64_t[]){ B, T, H * dv });
	tu_assert_close(y, want, B * T * H * dv, 1e-12, 1e-12);
	size_t base = tu_peak_begin();
	struct tensor *yn = nn_attention_by_head(q, k, v, m, false, 0.5, NULL);
	size_t peak = tu_peak_bytes(base);
	tu_assert_close(yn, want, B * T * H * dv, 1e-12, 1e-12);
	/* the result, and one head's q*scale, probabilities, output and masks */
	size_t result = sizeof(double) * (size_t)(B * T * H * dv);
	size_t head = sizeof(double) * (size_t)(B * (T * d + T * S + T * dv + 2 * S + T));
	ck_assert_msg(peak <= result + head + 4096, "peak %zu, result %zu, one head %zu", peak,
		      result, head);
	tu_peak_end();
	free(want);
	tu_assert_error(!nn_attention_by_head(q, v, v, NULL, false, 0.5, NULL), TENSOR_ERR_SHAPE,
			"nn_attention", "[2,3,4,2]");
	ck_assert(!nn_attention_by_head(NULL, k, v, NULL, false, 0.5, NULL));
}
END_TEST

/* [B, T, H*d] -> [B, H, T, d]: element (b, h, t, j) is x[b, t, h*d + j], a view. */
START_TEST(test_split_heads)
{
	const int64_t B = 2, T = 3, H = 2, d = 4;
	struct tensor *x = tu_rand(TENSOR_F64, 3, (int64_t[]){ B, T, H * d }, 61);
	struct tensor *y = nn_split_heads(x, H);
	tu_assert_shape(y, 4, (int64_t[]){ B, H, T, d });
	ck_assert(y->storage == x->storage);
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t t = 0; t < T; t++)
				for (int64_t j = 0; j < d; j++)
					ck_assert(tensor_get(y, (int64_t[]){ b, h, t, j }) ==
						  tensor_get(x, (int64_t[]){ b, t, h * d + j }));
	ck_assert(!nn_split_heads(NULL, H));
	tu_assert_error(!nn_split_heads(x, 3), TENSOR_ERR_SHAPE, "[2,3,8] has 48 elements",
			"[2,3,3,2]");
}
END_TEST

START_TEST(test_attention_errors)
{
	struct tensor *q = tu_rand(TENSOR_F32, 4, (int64_t[]){ 2, 3, 4, 5 }, 1);
	struct tensor *k = tu_rand(TENSOR_F32, 4, (int64_t[]){ 2, 3, 6, 5 }, 2);
	struct tensor *v = tu_rand(TENSOR_F32, 4, (int64_t[]){ 2, 3, 6, 5 }, 3);
	struct tensor *q3 = tu_rand(TENSOR_F32, 3, (int64_t[]){ 2, 4, 5 }, 4);
	tu_assert_error(!nn_attention(q3, k, v, NULL, false, 1, NULL), TENSOR_ERR_SHAPE,
			"nn_attention", "q [2,4,5]");
	struct tensor *kd = tu_rand(TENSOR_F32, 4, (int64_t[]){ 2, 3, 6, 4 }, 5);
	tu_assert_error(!nn_attention(q, kd, v, NULL, false, 1, NULL), TENSOR_ERR_SHAPE,
			"nn_attention", "k [2,3,6,4]");
	struct tensor *vs = tu_rand(TENSOR_F32, 4, (int64_t[]){ 2, 3, 7, 5 }, 6);
	tu_assert_error(!nn_attention(q, k, vs, NULL, false, 1, NULL), TENSOR_ERR_SHAPE,
			"nn_attention", "v [2,3,7,5]");
	struct tensor *kb = tu_rand(TENSOR_F32, 4, (int64_t[]){ 1, 3, 6, 5 }, 7);
	tu_assert_error(!nn_attention(q, kb, v, NULL, false, 1, NULL), TENSOR_ERR_SHAPE,
			"nn_attention", "batch and head");
	struct tensor *kh = tu_rand(TENSOR_F32, 4, (int64_t[]){ 2, 1, 6, 5 }, 7);
	tu_assert_error(!nn_attention(q, kh, v, NULL, false, 1, NULL), TENSOR_ERR_SHAPE,
			"nn_attention", "k [2,1,6,5]");
	tu_assert_error(!nn_attention(q, k, v, NULL, true, 1, NULL), TENSOR_ERR_SHAPE,
			"nn_attention", "causal");
	struct tensor *m = tu_mask_i32(2, 4, (const int[]){ 1, 1, 1, 1, 1, 1, 1, 1 });
	tu_assert_error(!nn_attention(q, k, v, m, false, 1, NULL), TENSOR_ERR_SHAPE, "nn_attention",
			"mask [2,4]");
	struct tensor *m3 = tensor_zeros(TENSOR_I32, TENSOR_CPU, 3, (int64_t[]){ 2, 1, 6 });
	tu_assert_error(!nn_attention(q, k, v, m3, false, 1, NULL), TENSOR_ERR_SHAPE,
			"nn_attention", "mask [2,1,6]");
	struct tensor *k64 = tu_rand(TENSOR_F64, 4, (int64_t[]){ 2, 3, 6, 5 }, 8);
	tu_assert_error(!nn_attention(q, k64, v, NULL, false, 1, NULL), TENSOR_ERR_DTYPE,
			"nn_attention", NULL);
	struct tensor *qi = tensor_zeros(TENSOR_I32, TENSOR_CPU, 4, (int64_t[]){ 2, 3, 4, 5 });
	struct tensor *ki = tensor_zeros(TENSOR_I32, TENSOR_CPU, 4, (int64_t[]){ 2, 3, 6, 5 });
	tu_assert_error(!nn_attention(qi, ki, ki, NULL, false, 1, NULL), TENSOR_ERR_DTYPE,
			"nn_attention", NULL);
	tu_assert_error(!nn_attention(q, k, v, NULL, false, NAN, NULL), TENSOR_ERR_ARG,
			"nn_attention", "scale");
	/* NULL in: NULL out, the first error kept */
	tensor_error(TENSOR_ERR_IO, "earlier failure");
	ck_assert(nn_attention(NULL, k, v, NULL, false, 1, NULL) == NULL);
	ck_assert(nn_attention(q, NULL, v, NULL, false, 1, NULL) == NULL);
	ck_assert(nn_attention(q, k, NULL, NULL, false, 1, NULL) == NULL);
	tu_assert_error(true, TENSOR_ERR_IO, "earlier failure", NULL);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("nn_attention");
	TCase *tc = tu_tcase("attention");
	tcase_add_test(tc, test_attention_plain);
	tcase_add_test(tc, test_attention_key_mask);
	tcase_add_test(tc, test_attention_causal);
	tcase_add_test(tc, test_attention_empty);
	tcase_add_test(tc, test_attention_all_masked_rows_zero);
	tcase_add_test(tc, test_attention_large_scores_f32);
	tcase_add_test(tc, test_attention_gradients);
	tcase_add_test(tc, test_attention_dropout_eval);
	tcase_add_test(tc, test_attention_dropout_gradients);
	tcase_add_test(tc, test_attention_errors);
	tcase_add_test(tc, test_attention_by_head);
	tcase_add_test(tc, test_attention_observer);
	tcase_add_test(tc, test_split_heads);
	suite_add_tcase(s, tc);
	/* the composed path (the one of devices without the fused kernel) on the CPU */
	tc = tu_tcase("attention (composed)");
	tcase_add_checked_fixture(tc, tu_unfuse, tu_refuse);
	tcase_add_test(tc, test_attention_plain);
	tcase_add_test(tc, test_attention_key_mask);
	tcase_add_test(tc, test_attention_causal);
	tcase_add_test(tc, test_attention_empty);
	tcase_add_test(tc, test_attention_all_masked_rows_zero);
	tcase_add_test(tc, test_attention_large_scores_f32);
	tcase_add_test(tc, test_attention_no_copy_of_k);
	tcase_add_test(tc, test_attention_gradients);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
