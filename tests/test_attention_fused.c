/* The CPU's fused attention (tensor_attention) against nn_attention's composed
 * path: output and gradients over one and several blocks, memory without grad,
 * the op's errors, and the kernel's exp. */
#include <math.h>
#include <string.h>

#include "attention_ref.h"
#include "backend.h"
#include "cpu/cpu_math.h"
#include "nn.h"
#include "testutil.h"

/* out and the gradients of q, k, v (leaves) for L = sum(out * r), with the fused kernel
 * or without (tensor_cpu_set_fused), the probabilities' dropout drop or none (NULL; its
 * seeds drawn afresh from the start of its parameters' stream): res[0] = out, res[1..3]
 * the gradients (heap tensors, taken from the leaves). */
static void attention_run(bool fused, struct tensor *const *in, const struct tensor *mask,
			  bool causal, const struct nn_dropout *drop, struct tensor **res)
{
	tensor_cpu_set_fused(fused);
	if (drop)
		drop->ps->rng_counter = 0;
	struct tensor *out = nn_attention(in[0], in[1], in[2], mask, causal, 0.3, drop);
	ck_assert_msg(out != NULL, "%s", tensor_last_error());
	ck_assert_int_eq(strcmp(out->node->op, "attention") == 0, fused);
	struct tensor *r = tensor_rand_uniform(out->dtype, TENSOR_CPU, 4, out->shape, 9, -1, 1);
	ck_assert_int_eq(ag_backward(ag_sum(ag_mul(out, r), 0, NULL, false), NULL), TENSOR_OK);
	res[0] = out;
	for (int i = 0; i < 3; i++) {
		res[i + 1] = in[i]->grad;
		in[i]->grad = NULL;
	}
	tensor_cpu_set_fused(true);
}

/* One block and several blocks of queries (the default block and one of 64 queries),
 * T != S, d != dv, key padding (a batch entry with every key hidden), causal, strided
 * operands (copied by the front-end), with and without dropout of the probabilities: the
 * fused kernel's output and gradients equal the composed path's, f32 and f64. */
START_TEST(test_attention_fused_matches_composed)
{
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 5), TENSOR_OK);
	struct nn_dropout dr;
	ck_assert_int_eq(nn_dropout_init(&dr, &ps, 0.3), TENSOR_OK);
	ps.batch_first = 3; /* a rank's share of the batch: its masks start past row 0 */
	int vals[2 * 150];
	for (int i = 0; i < 2 * 150; i++)
		vals[i] = i < 150 ? i % 7 != 3 : 0;
	const struct {
		int64_t t, s, d, dv;
		bool mask, causal, strided;
	} cases[] = {
		{ 150, 130, 8, 5, true, false, false },	 { 150, 150, 8, 8, true, true, true },
		{ 70, 70, 3, 3, false, true, false },	 { 1, 150, 4, 4, false, false, true },
		{ 129, 20, 16, 4, false, false, false },
	};
	for (int di = 0; di < 8; di++)
		for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
			const struct nn_dropout *drop = di >= 4 ? &dr : NULL;
			enum tensor_dtype dt = di % 2 ? TENSOR_F64 : TENSOR_F32;
			tensor_cpu_attention_block(di % 4 < 2 ? 1 : 0);
			int64_t T = cases[i].t, S = cases[i].s;
			int64_t shapes[3][4] = { { 2, 3, T, cases[i].d },
						 { 2, 3, S, cases[i].d },
						 { 2, 3, S, cases[i].dv } };
			struct tensor *in[3];
			for (int j = 0; j < 3; j++) {
				in[j] = tu_rand(dt, 4, shapes[j], 20 + (uint64_t)j);
				if (cases[i].strided)
					in[j] = tu_strided(in[j]);
				ck_assert_int_eq(ag_requires_grad(in[j], true), TENSOR_OK);
			}
			int col[2 * 150];
			for (int64_t b = 0; b < 2; b++)
				for (int64_t c = 0; c < S; c++)
					col[b * S + c] = vals[b * 150 + c];
			struct tensor *mask = cases[i].mask ? tu_mask_i32(2, S, col) : NULL;
			struct tensor *f[4], *c[4];
			attention_run(true, in, mask, cases[i].causal, drop, f);
			attention_run(false, in, mask, cases[i].causal, drop, c);
			for (int j = 0; j < 4; j++) {
				tu_assert_same(f[j], c[j], di % 2 ? 1e-12 : 2e-5);
				if (j > 0) {
					tensor_free(f[j]);
					tensor_free(c[j]);
				}
			}
		}
	tensor_cpu_attention_block(0);
	nn_params_free(&ps);
}
END_TEST

/* Under no-grad the fused kernel allocates the output, the rows' log-sum-exp and
 * one block of scores per thread: less than the scores' T x S. */
START_TEST(test_attention_fused_memory)
{
	const int64_t B = 1, H = 2, T = 1024, S = 1024, d = 8;
	struct tensor *q = tu_rand(TENSOR_F32, 4, (int64_t[]){ B, H, T, d }, 1);
	struct tensor *k = tu_rand(TENSOR_F32, 4, (int64_t[]){ B, H, S, d }, 2);
	struct tensor *v = tu_rand(TENSOR_F32, 4, (int64_t[]){ B, H, S, d }, 3);
	for (int threads = 1; threads <= 2; threads++) {
		tensor_set_num_threads(threads);
		size_t used = tu_attention_peak(q, k, v);
		size_t out = sizeof(float) * (size_t)(B * H * T * (d + 1));
		size_t block = sizeof(float) * (size_t)(64 * S);
		ck_assert_msg(used >= out + block && used <= out + (size_t)threads * block + 4096,
			      "%d thread(s): used %zu, output and lse %zu, a block %zu", threads,
			      used, out, block);
		ck_assert(used < sizeof(float) * (size_t)(B * H * T * S) / 4);
	}
}
END_TEST

/* The gradients come out laid out as their operands are: q and v heads split from
 * [B,T,H,d] give dq and dv of the same strides (views of [B,T,H,d] memory, so that merging
 * the heads back needs no copy), a contiguous k a contiguous dk; their values those of
 * contiguous operands. */
START_TEST(test_attention_grads_layout)
{
	const int64_t B = 2, T = 7, S = 5, H = 3, d = 4, dv = 6;
	const int perm[4] = { 0, 2, 1, 3 };
	struct tensor *q =
	    tensor_permute(tu_rand(TENSOR_F64, 4, (int64_t[]){ B, T, H, d }, 1), perm);
	struct tensor *k = tu_rand(TENSOR_F64, 4, (int64_t[]){ B, H, S, d }, 2);
	struct tensor *v =
	    tensor_permute(tu_rand(TENSOR_F64, 4, (int64_t[]){ B, S, H, dv }, 3), perm);
	struct tensor *g = tu_rand(TENSOR_F64, 4, (int64_t[]){ B, H, T, dv }, 4);
	struct tensor *lse, *d1[3], *d2[3];
	struct tensor_attention_args a = { .q = q, .k = k, .v = v, .scale = 0.5 };
	ck_assert(tensor_attention(&a, &lse) != NULL);
	ck_assert_int_eq(tensor_attention_backward(&a, lse, g, &d1[0], &d1[1], &d1[2]), TENSOR_OK);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(d1[0]->strides[i], q->strides[i]);
		ck_assert_int_eq(d1[2]->strides[i], v->strides[i]);
	}
	ck_assert(tensor_is_contiguous(d1[1]));
	struct tensor_attention_args c = {
		.q = tensor_contiguous(q), .k = k, .v = tensor_contiguous(v), .scale = 0.5
	};
	ck_assert_int_eq(tensor_attention_backward(&c, lse, g, &d2[0], &d2[1], &d2[2]), TENSOR_OK);
	for (int i = 0; i < 3; i++) {
		tu_assert_same(d1[i], d2[i], 1e-12);
		tensor_free(d1[i]);
		tensor_free(d2[i]);
	}
}
END_TEST

/* tensor_attention's own errors, and UNSUPPORTED where the device has no kernel. */
START_TEST(test_attention_fused_errors)
{
	struct tensor *q = tu_rand(TENSOR_F32, 4, (int64_t[]){ 1, 2, 3, 4 }, 1);
	struct tensor *k = tu_rand(TENSOR_F32, 4, (int64_t[]){ 1, 2, 5, 4 }, 2);
	struct tensor *v = tu_rand(TENSOR_F32, 4, (int64_t[]){ 1, 2, 5, 6 }, 3);
	struct tensor *k64 = tu_rand(TENSOR_F64, 4, (int64_t[]){ 1, 2, 5, 4 }, 2);
	struct tensor *hid = tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, (int64_t[]){ 1, 4 });
	struct tensor *lse, *dq, *dk, *dv;
	struct tensor_attention_args a = { .q = q, .k = k, .v = v, .scale = 0.5 };
	tu_assert_error(!tensor_attention(&a, NULL), TENSOR_ERR_ARG, "attention", "lse");
	tu_assert_error(!tensor_attention(NULL, &lse), TENSOR_ERR_ARG, "attention", NULL);
	struct tensor_attention_args none = { .q = q, .v = v, .scale = 0.5 };
	tu_assert_error(!tensor_attention(&none, &lse), TENSOR_ERR_ARG, "attention",
			"q, k or v is NULL");
	tu_assert_error(tensor_attention_backward(&none, q, q, &dq, &dk, &dv) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "attention_backward", "NULL");
	tensor_error(TENSOR_ERR_IO, "earlier failure"); /* kept: the NULL input is its result */
	ck_assert(!tensor_attention(&none, &lse));
	tu_assert_error(true, TENSOR_ERR_IO, "earlier failure", NULL);
	struct tensor_attention_args bad = a;
	bad.k = k64;
	tu_assert_error(!tensor_attention(&bad, &lse), TENSOR_ERR_DTYPE, "attention", NULL);
	bad = a;
	bad.v = k;
	bad.k = v;
	tu_assert_error(!tensor_attention(&bad, &lse), TENSOR_ERR_SHAPE, "attention",
			"expected q [B,H,T,d], k [B,H,S,d]");
	bad = a;
	bad.hidden = hid;
	tu_assert_error(!tensor_attention(&bad, &lse), TENSOR_ERR_SHAPE, "hidden [1,4]",
			"expected hidden [B,S]");
	bad = a;
	bad.causal = true;
	tu_assert_error(!tensor_attention(&bad, &lse), TENSOR_ERR_SHAPE, "causal", "[1,2,3,4]");
	bad = a;
	bad.scale = NAN;
	tu_assert_error(!tensor_attention(&bad, &lse), TENSOR_ERR_ARG, "scale", NULL);
	const double drops[3] = { 1, -0.25, NAN };
	for (int i = 0; i < 3; i++) {
		bad = a;
		bad.dropout = drops[i];
		tu_assert_error(!tensor_attention(&bad, &lse), TENSOR_ERR_ARG, "attention: dropout",
				"not in [0, 1)");
	}
	struct tensor *out = tensor_attention(&a, &lse);
	ck_assert_msg(out != NULL, "%s", tensor_last_error());
	tu_assert_shape(lse, 3, (int64_t[]){ 1, 2, 3 });
	tu_assert_error(tensor_attention_backward(&a, lse, q, &dq, &dk, &dv) == TENSOR_ERR_SHAPE,
			TENSOR_ERR_SHAPE, "attention_backward", "dout [1,2,3,4]");
	tu_assert_error(tensor_attention_backward(&a, out, out, &dq, &dk, &dv) == TENSOR_ERR_SHAPE,
			TENSOR_ERR_SHAPE, "attention_backward", "lse [1,2,3,6]");
	tu_assert_error(tensor_attention_backward(&a, lse, out, NULL, &dk, &dv) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "attention_backward", NULL);
	ck_assert_int_eq(tensor_attention_backward(&a, lse, out, &dq, &dk, &dv), TENSOR_OK);
	tu_assert_shape(dv, 4, v->shape);
	tensor_free(dq);
	tensor_free(dk);
	tensor_free(dv);
	struct tensor *i32 = tensor_zeros(TENSOR_I32, TENSOR_CPU, 4, (int64_t[]){ 1, 2, 3, 4 });
	ck_assert(!tensor_attention_supported(i32) && tensor_attention_supported(q));
	tensor_cpu_set_fused(false);
	ck_assert(!tensor_attention_supported(q));
	tu_assert_error(!tensor_attention(&a, &lse), TENSOR_ERR_UNSUPPORTED, "attention",
			"not supported on cpu");
	tensor_cpu_set_fused(true);
}
END_TEST

/* The kernel's exp (exp_nonpos_f32) against double exp: within 1 ulp on every 257th float
 * of [-87.3, 88], 0 below FLT_MIN and at -inf, NaN kept; one lane's result equal to the
 * scalar's in a vectorised loop. */
START_TEST(test_attention_exp)
{
	double worst = 0;
	int64_t n = 0;
	for (int32_t sign = 0; sign < 2; sign++) {
		float lim = sign ? -87.33f : 88.0f;
		for (int32_t b = 0; b <= f32_bits(fabsf(lim)); b += 257, n++) {
			float x = f32_from_bits(b | (sign ? INT32_MIN : 0));
			double want = exp((double)x);
			float w = (float)want, ulp = nextafterf(w, INFINITY) - w;
			double err = fabs((double)exp_nonpos_f32(x) - want) / ulp;
			worst = err > worst ? err : worst;
		}
	}
	ck_assert_int_gt(n, 8000000);
	ck_assert_msg(worst <= 1.0, "exp_nonpos_f32: %.3f ulp", worst);
	ck_assert(exp_nonpos_f32(-INFINITY) == 0 && exp_nonpos_f32(-87.4f) == 0);
	ck_assert(exp_nonpos_f32(-200.0f) == 0 && exp_nonpos_f32(0.0f) == 1);
	ck_assert(isnan(exp_nonpos_f32(NAN)));
	float x[64], y[64];
	for (int i = 0; i < 64; i++)
		x[i] = -0.37f * (float)(i * i);
#pragma omp simd
	for (int i = 0; i < 64; i++)
		y[i] = exp_nonpos_f32(x[i]);
	for (int i = 0; i < 64; i++)
		ck_assert_float_eq(y[i], exp_nonpos_f32(x[i]));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("attention_fused");
	TCase *tc = tu_tcase("fused");
	tcase_add_test(tc, test_attention_fused_matches_composed);
	tcase_add_test(tc, test_attention_fused_memory);
	tcase_add_test(tc, test_attention_fused_errors);
	tcase_add_test(tc, test_attention_grads_layout);
	tcase_add_test(tc, test_attention_exp);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
