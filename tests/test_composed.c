/* The composed fallbacks that devices without a fused kernel take (softmax backward, the
 * norms' backward, AdamW, SGD), run on the CPU with those slots switched off
 * (tensor_cpu_set_fused) and checked against the CPU kernels. */
#include <math.h>
#include <stdlib.h>

#include "autograd.h"
#include "backend.h"
#include "nn.h"
#include "testutil.h"

static const enum tensor_dtype FLOATS[] = { TENSOR_F32, TENSOR_F64 };

static double tol_of(enum tensor_dtype dt)
{
	return dt == TENSOR_F64 ? 1e-12 : 2e-5;
}

/* A [6, 37] tensor of dt with values in [lo, hi), transposed from [37, 6] when strided. */
static struct tensor *rnd(enum tensor_dtype dt, uint64_t seed, double lo, double hi, bool strided)
{
	int64_t s[2] = { 6, 37 }, t[2] = { 37, 6 };
	struct tensor *x = strided ? tensor_transpose(tensor_rand_uniform(dt, TENSOR_CPU, 2, t,
									 seed, lo, hi),
						      0, 1)
				   : tensor_rand_uniform(dt, TENSOR_CPU, 2, s, seed, lo, hi);
	ck_assert_msg(x != NULL, "%s", tensor_last_error());
	return x;
}

/* The slots are really gone while unfused, and back after. */
START_TEST(test_switch)
{
	ck_assert_ptr_nonnull(tensor_backend_get(TENSOR_CPU)->adamw);
	tensor_cpu_set_fused(false);
	const struct tensor_backend *be = tensor_backend_get(TENSOR_CPU);
	ck_assert(!be->softmax_backward && !be->norm_backward && !be->adamw && !be->sgd);
	ck_assert_ptr_nonnull(be->gemm);
	struct tensor *g = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, (int64_t[]){ 4 });
	tu_assert_error(tensor_adamw_(g, g, g, g, 0.1, 0.9, 0.99, 1e-8, 0, 1) ==
			    TENSOR_ERR_UNSUPPORTED,
			TENSOR_ERR_UNSUPPORTED, "adamw", NULL);
	tu_assert_error(tensor_sgd_(g, g, g, 0.1, 0.9, 0) == TENSOR_ERR_UNSUPPORTED,
			TENSOR_ERR_UNSUPPORTED, "sgd", NULL);
	tensor_cpu_set_fused(true);
	ck_assert_ptr_nonnull(tensor_backend_get(TENSOR_CPU)->norm_backward);
}
END_TEST

/* tensor_softmax_backward and its in-place form, composed against the kernel, contiguous and
 * strided operands. */
START_TEST(test_softmax_backward)
{
	for (int d = 0; d < 2; d++)
		for (int strided = 0; strided < 2; strided++) {
			enum tensor_dtype dt = FLOATS[d];
			struct tensor *y = tensor_softmax(rnd(dt, 1, -3, 3, strided), -1);
			struct tensor *g = rnd(dt, 2, -1, 1, strided);
			struct tensor *fused = tensor_softmax_backward(y, g);
			struct tensor *inplace = tensor_clone(g);
			ck_assert_int_eq(tensor_softmax_backward_(y, inplace), TENSOR_OK);
			double *want = tu_values(fused);
			tensor_cpu_set_fused(false);
			struct tensor *composed = tensor_softmax_backward(y, g);
			struct tensor *inplace2 = tensor_clone(g);
			ck_assert_int_eq(tensor_softmax_backward_(y, inplace2), TENSOR_OK);
			tensor_cpu_set_fused(true);
			tu_assert_close(composed, want, 6 * 37, tol_of(dt), tol_of(dt));
			tu_assert_close(inplace, want, 6 * 37, 0, 0);
			tu_assert_close(inplace2, want, 6 * 37, tol_of(dt), tol_of(dt));
			free(want);
		}
}
END_TEST

/* d(sum(norm(x) * R))/d{x, w, b} of layer and RMS norm, with and without weights, through
 * autograd's composed backward against the fused one. */
START_TEST(test_norm_backward)
{
	for (int d = 0; d < 2; d++)
		for (int rms = 0; rms < 2; rms++)
			for (int affine = 0; affine < 2; affine++) {
				enum tensor_dtype dt = FLOATS[d];
				double *want[3] = { NULL, NULL, NULL };
				for (int fused = 1; fused >= 0; fused--) {
					tensor_cpu_set_fused(fused);
					tensor_scope_begin();
					struct tensor *x = tensor_contiguous(rnd(dt, 3, -2, 2, false));
					struct tensor *r = rnd(dt, 4, -1, 1, true);
					struct tensor *w = affine ? tensor_rand_uniform(
								     dt, TENSOR_CPU, 1,
								     (int64_t[]){ 37 }, 5, 0.5, 1.5)
								  : NULL;
					struct tensor *b = affine && !rms ? tensor_rand_uniform(
									  dt, TENSOR_CPU, 1,
									  (int64_t[]){ 37 }, 6, -1, 1)
									: NULL;
					struct tensor *leaf[3] = { x, w, b };
					for (int k = 0; k < 3; k++)
						if (leaf[k])
							ag_requires_grad(leaf[k], true);
					struct tensor *y = rms ? ag_rms_norm(x, w, 1e-5)
							       : ag_layer_norm(x, w, b, 1e-5);
					struct tensor *loss = ag_sum(ag_mul(y, r), 0, NULL, false);
					ck_assert_msg(loss && ag_backward(loss, NULL) == TENSOR_OK, "%s",
						      tensor_last_error());
					for (int k = 0; k < 3; k++) {
						if (!leaf[k])
							continue;
						int64_t n = tensor_numel(leaf[k]);
						if (fused)
							want[k] = tu_values(leaf[k]->grad);
						else
							tu_assert_close(leaf[k]->grad, want[k], n,
									tol_of(dt), tol_of(dt));
						tensor_free(leaf[k]->grad);
						leaf[k]->grad = NULL;
					}
					tensor_scope_end();
				}
				for (int k = 0; k < 3; k++)
					free(want[k]);
			}
	tensor_cpu_set_fused(true);
}
END_TEST

/* A packed list of three f32 parameters past a chunk edge, the middle one undecayed. */
static void three_params(struct nn_params *ps)
{
	const int64_t shapes[3][2] = { { 300, 250 }, { 250, 1 }, { 40, 3 } };
	ck_assert_int_eq(nn_params_init(ps, TENSOR_F32, TENSOR_CPU, 3), TENSOR_OK);
	for (int k = 0; k < 3; k++) {
		char name[8] = { 'p', (char)('0' + k), 0 };
		struct tensor *t = nn_param_new(ps, name, 2, shapes[k], k == 1);
		ck_assert_int_eq(nn_init_normal(t, 0, 1, nn_param_seed(ps, name)), TENSOR_OK);
	}
	ck_assert_int_eq(nn_params_pack(ps), TENSOR_OK);
}

/* The gradients of step s. */
static void step_grads(struct nn_params *ps, int s)
{
	for (int k = 0; k < 3; k++) {
		struct tensor *g = ps->items[k].value->grad;
		struct tensor *src = tensor_rand_normal(TENSOR_F32, TENSOR_CPU, g->ndim, g->shape,
							(uint64_t)(10 * s + k), 0, 1);
		ck_assert_int_eq(tensor_copy_(g, src), TENSOR_OK);
	}
}

/* Parameters and one state tensor per parameter of the fused run (0) and the composed one
 * (1) agree: tol[0], tol[1] the parameters' tolerances, tol[2], tol[3] the state's (as
 * tu_assert_close takes them). */
static void assert_runs_agree(struct nn_params ps[2], struct tensor **const state[2],
			      const double tol[4])
{
	for (int k = 0; k < 3; k++) {
		int64_t n = tensor_numel(ps[0].items[k].value);
		double *want = tu_values(ps[0].items[k].value);
		tu_assert_close(ps[1].items[k].value, want, n, tol[0], tol[1]);
		free(want);
		want = tu_values(state[0][k]);
		tu_assert_close(state[1][k], want, n, tol[2], tol[3]);
		free(want);
	}
}

/* nn_adamw_step in tensor ops (nn/adamw.c's composed update) against the kernel: three steps
 * of a packed list with decayed and undecayed parameters past a chunk edge. */
START_TEST(test_adamw)
{
	struct nn_params ps[2];
	struct nn_adamw o[2];
	for (int j = 0; j < 2; j++) {
		tensor_cpu_set_fused(j == 0);
		three_params(&ps[j]);
		ck_assert_int_eq(nn_adamw_init(&o[j], &ps[j], 1e-2, 0.9, 0.95, 1e-6, 0.1),
				 TENSOR_OK);
		for (int s = 0; s < 3; s++) {
			step_grads(&ps[j], s);
			ck_assert_int_eq(nn_adamw_step(&o[j]), TENSOR_OK);
		}
	}
	tensor_cpu_set_fused(true);
	assert_runs_agree(ps, (struct tensor **const[2]){ o[0].v, o[1].v },
			  (const double[4]){ 1e-6, 1e-5, 1e-9, 1e-5 });
	for (int j = 0; j < 2; j++) {
		nn_adamw_free(&o[j]);
		nn_params_free(&ps[j]);
	}
}
END_TEST

/* nn_sgd_step the same way, with momentum: the kernel follows the composed form's
 * operations, so the two agree to the bit. */
START_TEST(test_sgd)
{
	struct nn_params ps[2];
	struct nn_sgd o[2];
	for (int j = 0; j < 2; j++) {
		tensor_cpu_set_fused(j == 0);
		three_params(&ps[j]);
		ck_assert_int_eq(nn_sgd_init(&o[j], &ps[j], 1e-2, 0.9, 0.1), TENSOR_OK);
		for (int s = 0; s < 3; s++) {
			step_grads(&ps[j], s);
			ck_assert_int_eq(nn_sgd_step(&o[j]), TENSOR_OK);
		}
	}
	tensor_cpu_set_fused(true);
	assert_runs_agree(ps, (struct tensor **const[2]){ o[0].buf, o[1].buf },
			  (const double[4]){ 0, 0, 0, 0 });
	for (int j = 0; j < 2; j++) {
		nn_sgd_free(&o[j]);
		nn_params_free(&ps[j]);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("composed");
	TCase *tc = tu_tcase("composed");
	tcase_add_test(tc, test_switch);
	tcase_add_test(tc, test_softmax_backward);
	tcase_add_test(tc, test_norm_backward);
	tcase_add_test(tc, test_adamw);
	tcase_add_test(tc, test_sgd);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
