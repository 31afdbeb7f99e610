/* The CPU's fused attention (tensor_attention) against nn_attention's composed
 * path: output and gradients over one and several blocks, memory without grad,
 * the op's errors, and the kernel's exp; with bf16 products, on each bf16 kernel, against
 * the f64 reference and the composed path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_ref.h"
#include "backend.h"
#include "cpu/cpu_math.h"
#include "nn.h"
#include "testutil.h"

/* The scale of every call here. */
#define SCALE 0.3

/* out and the gradients of q, k, v (leaves) for L = sum(out * r), with the fused kernel
 * or without (tensor_cpu_set_fused), the forward's products in precision prec (the
 * backward runs in f32, its nodes in the forward's precision), the probabilities' dropout
 * drop or none (NULL; its seeds drawn afresh from the start of its parameters' stream):
 * res[0] = out, res[1..3] the gradients (heap tensors, taken from the leaves). */
static void attention_run(bool fused, enum tensor_dtype prec, struct tensor *const *in,
			  const struct tensor *mask, bool causal, const struct nn_dropout *drop,
			  struct tensor **res)
{
	tensor_cpu_set_fused(fused);
	if (drop)
		drop->ps->rng_counter = 0;
	ck_assert_int_eq(tensor_set_matmul_precision(prec), TENSOR_OK);
	struct tensor *out = nn_attention(in[0], in[1], in[2], mask, causal, SCALE, drop);
	ck_assert_int_eq(tensor_set_matmul_precision(TENSOR_F32), TENSOR_OK);
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

/* The shapes of the checks: T != S, d != dv, key padding (a batch entry with every key
 * hidden), causal, strided operands (copied by the front-end). */
static const struct att_case {
	int64_t t, s, d, dv;
	bool mask, causal, strided;
} cases[] = {
	{ 150, 130, 8, 5, true, false, false },	 { 150, 150, 8, 8, true, true, true },
	{ 70, 70, 3, 3, false, true, false },	 { 1, 150, 4, 4, false, false, true },
	{ 129, 20, 16, 4, false, false, false },
};
enum { NCASES = sizeof cases / sizeof cases[0], NB = 2, NH = 3 };

/* The key masks: batch entry 0 hides every 7th key from the 4th, entry 1 all. */
static int mask_value(int64_t b, int64_t s)
{
	return b == 0 && s % 7 != 3;
}

/* q, k, v of case c (leaves, dtype dt) into in, and its mask (or NULL). */
static struct tensor *case_inputs(const struct att_case *c, enum tensor_dtype dt,
				  struct tensor **in)
{
	int64_t shapes[3][4] = { { NB, NH, c->t, c->d },
				 { NB, NH, c->s, c->d },
				 { NB, NH, c->s, c->dv } };
	for (int j = 0; j < 3; j++) {
		in[j] = tu_rand(dt, 4, shapes[j], 20 + (uint64_t)j);
		if (c->strided)
			in[j] = tu_strided(in[j]);
		ck_assert_int_eq(ag_requires_grad(in[j], true), TENSOR_OK);
	}
	int col[NB * 150];
	for (int64_t b = 0; b < NB; b++)
		for (int64_t s = 0; s < c->s; s++)
			col[b * c->s + s] = mask_value(b, s);
	return c->mask ? tu_mask_i32(NB, c->s, col) : NULL;
}

static void free_grads(struct tensor **r)
{
	for (int j = 1; j < 4; j++)
		tensor_free(r[j]);
}

/* One block and several blocks of queries (the default block and one of 64 queries), the
 * cases above, with and without dropout of the probabilities: the fused kernel's output
 * and gradients equal the composed path's, f32 and f64. */
START_TEST(test_attention_fused_matches_composed)
{
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 5), TENSOR_OK);
	struct nn_dropout dr;
	ck_assert_int_eq(nn_dropout_init(&dr, &ps, 0.3), TENSOR_OK);
	ps.batch_first = 3; /* a rank's share of the batch: its masks start past row 0 */
	for (int di = 0; di < 8; di++)
		for (int i = 0; i < NCASES; i++) {
			const struct nn_dropout *drop = di >= 4 ? &dr : NULL;
			enum tensor_dtype dt = di % 2 ? TENSOR_F64 : TENSOR_F32;
			tensor_cpu_attention_block(di % 4 < 2 ? 1 : 0);
			struct tensor *in[3], *f[4], *c[4];
			struct tensor *mask = case_inputs(&cases[i], dt, in);
			attention_run(true, TENSOR_F32, in, mask, cases[i].causal, drop, f);
			attention_run(false, TENSOR_F32, in, mask, cases[i].causal, drop, c);
			for (int j = 0; j < 4; j++)
				tu_assert_same(f[j], c[j], di % 2 ? 1e-12 : 2e-5);
			free_grads(f);
			free_grads(c);
		}
	tensor_cpu_attention_block(0);
	nn_params_free(&ps);
}
END_TEST

/* ---- bf16 products ---------------------------------------------------------------------- */

/* The f64 reference of case c for the leaves in, its dropout (drop's rate, the seed its
 * stream starts with, its batch_first; NULL: none) and L = sum(out * r), r as attention_run
 * draws it: want[0] = out, want[1..3] = dq, dk, dv (row-major, malloc'd). */
static void reference(const struct att_case *c, struct tensor *const *in,
		      const struct nn_dropout *drop, double **want)
{
	const int64_t T = c->t, S = c->s, dv = c->dv;
	double *v[3], mask[NB * 150], *keep = NULL;
	for (int j = 0; j < 3; j++)
		v[j] = tu_values(in[j]);
	for (int64_t b = 0; b < NB; b++)
		for (int64_t s = 0; s < S; s++)
			mask[b * S + s] = mask_value(b, s);
	if (drop) {
		drop->ps->rng_counter = 0;
		uint64_t seed = nn_params_next_seed(drop->ps);
		struct tensor *one =
		    tensor_full(TENSOR_F64, TENSOR_CPU, 4, (int64_t[]){ NB, NH, T, S }, 1.0);
		keep = tu_values(tensor_dropout_at(one, drop->p, seed,
						   (uint64_t)(drop->ps->batch_first * NH * T * S)));
	}
	int64_t os[4] = { NB, NH, T, dv };
	double *r = tu_values(tensor_rand_uniform(TENSOR_F32, TENSOR_CPU, 4, os, 9, -1, 1));
	const int64_t n[4] = { NB * NH * T * dv, NB * NH * T * c->d, NB * NH * S * c->d,
			       NB * NH * S * dv };
	for (int j = 0; j < 4; j++)
		want[j] = malloc(sizeof(double) * (size_t)n[j]);
	struct tu_ref_att a = { v[0], v[1],	 v[2],	c->mask ? mask : NULL,
				keep, c->causal, SCALE, NB,
				NH,   T,	 S,	c->d,
				dv };
	tu_ref_attention_grads(&a, r, want[0], want[1], want[2], want[3]);
	for (int j = 0; j < 3; j++)
		free(v[j]);
	free(keep);
	free(r);
}

/* max |got - want| / max |want| over got's elements (row-major). */
static double rel_err(const struct tensor *got, const double *want)
{
	double *g = tu_values(got), d = 0, m = 0;
	for (int64_t i = 0; i < tensor_numel(got); i++) {
		d = fmax(d, fabs(g[i] - want[i]));
		m = fmax(m, fabs(want[i]));
	}
	free(g);
	return m > 0 ? d / m : d;
}

/* Every element of batch entry 1 (whose keys are all hidden) exactly 0. */
static void assert_dead_zero(const struct tensor *x, const char *what)
{
	double *g = tu_values(x);
	int64_t n = tensor_numel(x);
	for (int64_t i = n / NB; i < n; i++)
		ck_assert_msg(g[i] == 0, "%s: element %lld of a dead batch entry is %g", what,
			      (long long)i, g[i]);
	free(g);
}

/* The fused bf16 gradients g (attention_run's) are those of a backward run with bf16
 * products set: the node keeps the forward's precision. */
static void assert_backward_keeps(struct tensor *const *in, const struct tensor *mask, bool causal,
				  const struct nn_dropout *drop, struct tensor *const *g)
{
	if (drop)
		drop->ps->rng_counter = 0;
	ck_assert_int_eq(tensor_set_matmul_precision(TENSOR_BF16), TENSOR_OK);
	struct tensor *out = nn_attention(in[0], in[1], in[2], mask, causal, SCALE, drop);
	ck_assert_msg(out != NULL, "%s", tensor_last_error());
	struct tensor *r = tensor_rand_uniform(out->dtype, TENSOR_CPU, 4, out->shape, 9, -1, 1);
	ck_assert_int_eq(ag_backward(ag_sum(ag_mul(out, r), 0, NULL, false), NULL), TENSOR_OK);
	ck_assert_int_eq(tensor_set_matmul_precision(TENSOR_F32), TENSOR_OK);
	for (int i = 0; i < 3; i++) {
		tu_assert_same(in[i]->grad, g[i + 1], 0);
		tensor_free(in[i]->grad);
		in[i]->grad = NULL;
	}
}

/* The bound of the bf16 checks, relative to the largest reference value: 4 u, u = 2^-8
 * bf16's unit roundoff (each product rounds both operands, u each; the scores' error passes
 * through the softmax into the probabilities, whose rounding adds u again). Measured here:
 * 1.44 u fused, 1.48 u composed. */
#define BF16_BOUND (4.0 / 256)

/* The variants of the bf16 checks, each setting in both states over the four (the
 * emulated kernels are slow): blocks of 64 queries or the default block, the bf16 kernels'
 * small cache blocks (several k, row and column blocks) or their own, dropout of the
 * probabilities or none; the composed path runs beside the fused one where composed. */
static const struct bf16_variant {
	bool small_blocks, small_gemm, drop, composed;
} bf16_variants[] = {
	{ false, false, false, true },
	{ true, true, false, false },
	{ false, true, true, true },
	{ true, false, true, false },
};

/* bf16 products on kernel _i of tu_bf16_kernels (where this CPU runs it), the cases of the
 * f32 test in the variants above: the fused kernel runs (the node is "attention"), its
 * output and the gradients of q, k and v within BF16_BOUND of the f64 reference, as the
 * composed bf16 path's are, and of each other; they differ from the f32 kernel's (the
 * products were rounded), and a batch entry whose keys are all hidden gives exact zeros. */
START_TEST(test_attention_fused_bf16)
{
	if (!tu_bf16_kernel_force(_i)) {
		tensor_clear_error();
		return;
	}
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 5), TENSOR_OK);
	struct nn_dropout dr;
	ck_assert_int_eq(nn_dropout_init(&dr, &ps, 0.3), TENSOR_OK);
	ps.batch_first = 3;
	static const char *const what[4] = { "out", "dq", "dk", "dv" };
	for (int vi = 0; vi < 4; vi++)
		for (int i = 0; i < NCASES; i++) {
			const struct bf16_variant *var = &bf16_variants[vi];
			const struct att_case *c = &cases[i];
			const struct nn_dropout *drop = var->drop ? &dr : NULL;
			tensor_cpu_attention_block(var->small_blocks ? 1 : 0);
			ck_assert_int_eq(var->small_gemm ? tensor_bf16_gemm_blocks(32, 24, 64)
							 : tensor_bf16_gemm_blocks(0, 0, 0),
					 TENSOR_OK);
			struct tensor *in[3], *f[4], *cp[4] = { NULL }, *f32[4];
			struct tensor *mask = case_inputs(c, TENSOR_F32, in);
			double *want[4];
			reference(c, in, drop, want);
			attention_run(true, TENSOR_BF16, in, mask, c->causal, drop, f);
			if (var->composed)
				attention_run(false, TENSOR_BF16, in, mask, c->causal, drop, cp);
			attention_run(true, TENSOR_F32, in, mask, c->causal, drop, f32);
			if (i == 0) /* the backward's products are bf16 ones whatever is set then */
				assert_backward_keeps(in, mask, c->causal, drop, f);
			for (int j = 0; j < 4; j++) {
				double ef = rel_err(f[j], want[j]);
				double ec = cp[j] ? rel_err(cp[j], want[j]) : 0;
				double *fv = tu_values(f[j]);
				double e32 = rel_err(f32[j], fv);
				free(fv);
				ck_assert_msg(
				    ef <= BF16_BOUND && ec <= BF16_BOUND,
				    "%s, case %d, variant %d, %s: fused %.3g, composed %.3g "
				    "of the f64 reference, bound %.3g",
				    tu_bf16_kernels[_i], i, vi, what[j], ef, ec, BF16_BOUND);
				ck_assert_msg(e32 > 1e-4,
					      "%s, case %d, %s: the f32 kernel's result",
					      tu_bf16_kernels[_i], i, what[j]);
				if (cp[j])
					tu_assert_same(f[j], cp[j], BF16_BOUND);
				if (c->mask)
					assert_dead_zero(f[j], what[j]);
				free(want[j]);
			}
			free_grads(f);
			if (var->composed)
				free_grads(cp);
			free_grads(f32);
		}
	tensor_bf16_gemm_blocks(0, 0, 0);
	tensor_bf16_gemm_force(NULL);
	tensor_cpu_attention_block(0);
	nn_params_free(&ps);
}
END_TEST

/* Under no-grad the fused kernel allocates the output, the rows' log-sum-exp and
 * one block of scores per thread: less than the scores' T x S; with bf16 products, on each
 * bf16 kernel, exactly as much tensor memory (their scratch is the heap's). */
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
		ck_assert_int_eq(tensor_set_matmul_precision(TENSOR_BF16), TENSOR_OK);
		for (int kn = 0; kn < TU_BF16_KERNELS; kn++) {
			if (tu_bf16_kernel_force(kn))
				ck_assert_uint_eq(tu_attention_peak(q, k, v), used);
			tensor_clear_error();
		}
		ck_assert_int_eq(tensor_set_matmul_precision(TENSOR_F32), TENSOR_OK);
		tensor_bf16_gemm_force(NULL);
	}
}
END_TEST

/* Out of memory at each allocation of a bf16 forward and backward (on each bf16 kernel):
 * TENSOR_ERR_NOMEM, until no allocation is left to fail and the step succeeds. */
START_TEST(test_attention_bf16_nomem)
{
	const struct att_case *c = &cases[0];
	for (int kn = 0; kn < TU_BF16_KERNELS; kn++) {
		if (!tu_bf16_kernel_force(kn)) {
			tensor_clear_error();
			continue;
		}
		struct tensor *in[3];
		struct tensor *mask = case_inputs(c, TENSOR_F32, in);
		for (int64_t fail = 0;; fail++) {
			tensor_scope_begin();
			tensor_mem_inject_failure(fail);
			ck_assert_int_eq(tensor_set_matmul_precision(TENSOR_BF16), TENSOR_OK);
			struct tensor *out =
			    nn_attention(in[0], in[1], in[2], mask, false, SCALE, NULL);
			ck_assert_int_eq(tensor_set_matmul_precision(TENSOR_F32), TENSOR_OK);
			struct tensor *loss = ag_sum(ag_mul(out, out), 0, NULL, false);
			int rc = loss ? ag_backward(loss, NULL) : tensor_last_status();
			bool fired = tensor_mem_inject_failure(-1) > fail;
			ag_tape_reset();
			tensor_scope_end();
			for (int j = 0; j < 3; j++) {
				tensor_free(in[j]->grad);
				in[j]->grad = NULL;
			}
			if (!fired) {
				ck_assert_msg(rc == TENSOR_OK, "%s", tensor_last_error());
				break;
			}
			tu_assert_error(rc < 0, TENSOR_ERR_NOMEM, NULL, NULL);
		}
	}
	tensor_bf16_gemm_force(NULL);
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
	tc = tu_tcase("bf16");
	tcase_add_loop_test(tc, test_attention_fused_bf16, 0, TU_BF16_KERNELS);
	tcase_add_test(tc, test_attention_bf16_nomem);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
