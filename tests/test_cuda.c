/* CUDA backend parity with the CPU reference: every row of the op table
 * (op_table.h) runs on both devices on the same inputs, each input in turn
 * contiguous, transposed, reversed, sliced (inner stride 2, with an offset)
 * and broadcast (stride 0), and the results must agree within the row's
 * units in the last place. Then the device's own behaviour: faults raised at the next
 * synchronisation, out of memory, mixed devices, the allocator's cache.
 * Skipped (exit 77) when the backend is not compiled in or no GPU is present. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"
#include "op_table.h"
#include "testutil.h"

/* The device under test: CUDA, or the CPU itself with CFORMER_PARITY_DEVICE=cpu
 * (a self-check of the table on a machine without a GPU). */
static enum tensor_device dev = TENSOR_CUDA;

/* ---- comparing a device result with the CPU's ------------------------------ */

/* |cuda - cpu| <= ulps * eps(dtype) * (|cpu| + 1) elementwise, eps 2^-23 for f32, 2^-52
 * for f64, 2^-8 (half a unit in the last place) for bf16 (integers: exactly; NaN matches
 * NaN, inf the same inf). */
static void assert_near(const char *what, const struct tensor *gpu, const struct tensor *cpu,
			double ulps)
{
	ck_assert_msg(gpu != NULL && cpu != NULL, "%s: %s", what, tensor_last_error());
	struct tensor *back = tensor_to_device(gpu, TENSOR_CPU);
	ck_assert_msg(back != NULL, "%s: %s", what, tensor_last_error());
	ck_assert_msg(tensor_same_shape(back, cpu), "%s: shapes differ", what);
	ck_assert_msg(back->dtype == cpu->dtype, "%s: dtypes differ", what);
	double *a = tu_values(back), *b = tu_values(cpu);
	double eps = cpu->dtype == TENSOR_F32	 ? 0x1p-23
		     : cpu->dtype == TENSOR_F64	 ? 0x1p-52
		     : cpu->dtype == TENSOR_BF16 ? 0x1p-8
						 : 0;
	for (int64_t i = 0; i < tensor_numel(cpu); i++) {
		bool ok = (isnan(a[i]) && isnan(b[i])) || (isinf(b[i]) && a[i] == b[i]) ||
			  fabs(a[i] - b[i]) <= ulps * eps * (fabs(b[i]) + 1);
		if (!ok) {
			double x = a[i], y = b[i];
			free(a);
			free(b);
			ck_abort_msg("%s: element %lld: cuda %.17g, cpu %.17g (%.1f ulps allowed)",
				     what, (long long)i, x, y, ulps);
		}
	}
	free(a);
	free(b);
	tensor_free(back);
}

static struct tensor *to_cuda(const struct tensor *t)
{
	struct tensor *g = tensor_to_device(t, dev);
	ck_assert_msg(g != NULL, "%s", tensor_last_error());
	return g;
}

/* ---- every op of the table against the CPU ---------------------------------------- */

static const struct op_row *rows;
static int nrows;

/* Row r in every dtype and layout it names, on the device and on the CPU. */
START_TEST(test_parity)
{
	const struct op_row *r = &rows[_i];
	for (int dt = 0; dt < TENSOR_NDTYPES; dt++) {
		if (!(r->dtypes & (1u << dt)))
			continue;
		/* bf16 inputs: f32 results as the row's f32 ones; bf16 results below */
		double ulps = dt == TENSOR_F32 || dt == TENSOR_BF16 ? r->ulps32
			      : dt == TENSOR_F64		    ? r->ulps64
								    : 0;
		/* a row that states its accuracy against the exact result (an ill-conditioned
		 * one, such as a norm of rows far from zero) lets two devices, each within
		 * it, differ by twice that */
		double tol = dt == TENSOR_F32 ? r->tol32 : dt == TENSOR_F64 ? r->tol64 : 0;
		double eps = dt == TENSOR_F32 ? 0x1p-23 : 0x1p-52;
		if (2 * tol > ulps * eps)
			ulps = 2 * tol / eps;
		for (int j = 0; j < r->nin; j++) {
			for (unsigned l = OP_CONTIG; l <= OP_BROADCAST; l <<= 1) {
				if (!op_layout_fits(r, j, l) || (l == OP_CONTIG && j > 0))
					continue;
				tensor_scope_begin();
				struct tensor *cin[OP_MAX_IN], *gin[OP_MAX_IN];
				for (int i = 0; i < r->nin; i++) {
					unsigned li = i == j ? l : OP_CONTIG;
					uint64_t seed = 1000 + 17 * (uint64_t)i;
					cin[i] = op_input(r, i, (enum tensor_dtype)dt, li,
							  TENSOR_CPU, seed);
					gin[i] =
					    op_input(r, i, (enum tensor_dtype)dt, li, dev, seed);
				}
				struct tensor *want = r->fn(cin, r);
				ck_assert_msg(want != NULL, "%s %s (cpu): %s", r->name,
					      tensor_dtype_name((enum tensor_dtype)dt),
					      tensor_last_error());
				struct tensor *got = r->fn(gin, r);
				char what[200];
				snprintf(what, sizeof what, "%s %s, input %d %s", r->name,
					 tensor_dtype_name((enum tensor_dtype)dt), j,
					 op_layout_name(l));
				/* a bf16 result: each device rounds its f32 sum once, in
				 * orders that differ: one bf16 ulp (2 x 2^-8 relative) */
				assert_near(what, got, want, want->dtype == TENSOR_BF16 ? 2 : ulps);
				ck_assert_int_eq(tensor_last_status(), TENSOR_OK);
				tensor_scope_end();
			}
		}
	}
}
END_TEST

/* ---- the fused attention against the CPU's -------------------------------------- */

/* The device's tensor_attention and its backward against the CPU's kernel, on the same
 * inputs: f32 and f64; T and S off the kernel's tiles (64 rows, 32 keys), T != S; hidden
 * keys, causal rows, both; the probabilities' dropout; head dims from 16 to the CUDA
 * kernel's 128, d != dv; a batch entry whose keys are all hidden (its rows give 0, lse
 * +inf, no gradient). */
START_TEST(test_attention_parity)
{
	static const struct {
		int64_t b, h, t, s, d, dv;
		bool causal, hidden;
		double drop;
	} cases[] = {
		{ 2, 3, 70, 70, 16, 24, true, false, 0 },
		{ 2, 2, 130, 37, 64, 64, false, true, 0 },
		{ 2, 1, 33, 100, 100, 40, false, true, 0.2 },
		{ 1, 2, 65, 65, 128, 128, true, true, 0.1 },
	};
	const enum tensor_dtype dts[] = { TENSOR_F32, TENSOR_F64 };
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		for (int k = 0; k < 2; k++) {
			tensor_scope_begin();
			enum tensor_dtype dt = dts[k];
			int64_t b = cases[c].b, h = cases[c].h, t = cases[c].t, s = cases[c].s;
			struct tensor *cq = tu_rand(dt, 4, (int64_t[]){ b, h, t, cases[c].d }, 1);
			struct tensor *ck = tu_rand(dt, 4, (int64_t[]){ b, h, s, cases[c].d }, 2);
			struct tensor *cv = tu_rand(dt, 4, (int64_t[]){ b, h, s, cases[c].dv }, 3);
			struct tensor *cg = tu_rand(dt, 4, (int64_t[]){ b, h, t, cases[c].dv }, 4);
			struct tensor *ch = NULL;
			if (cases[c].hidden) { /* every 5th key hidden; batch entry 1 sees none */
				double flags[2 * 130];
				for (int64_t i = 0; i < b * s; i++)
					flags[i] = i % 5 == 0 || i >= s;
				ch = tensor_cast(tensor_from_data(TENSOR_F64, TENSOR_CPU, 2,
								  (int64_t[]){ b, s }, flags),
						 dt);
			}
			struct tensor_attention_args ca = { .q = cq,
							    .k = ck,
							    .v = cv,
							    .hidden = ch,
							    .causal = cases[c].causal,
							    .scale = 0.3,
							    .dropout = cases[c].drop,
							    .seed = 5,
							    .first = 11 };
			struct tensor_attention_args ga = ca;
			ga.q = to_cuda(cq);
			ga.k = to_cuda(ck);
			ga.v = to_cuda(cv);
			ga.hidden = ch ? to_cuda(ch) : NULL;
			struct tensor *cl, *gl, *cdq, *cdk, *cdv, *gdq, *gdk, *gdv;
			struct tensor *co = tensor_attention(&ca, &cl),
				      *go = tensor_attention(&ga, &gl);
			ck_assert_msg(co && go, "attention case %zu: %s", c, tensor_last_error());
			ck_assert_int_eq(tensor_attention_backward(&ca, cl, cg, &cdq, &cdk, &cdv),
					 TENSOR_OK);
			ck_assert_msg(tensor_attention_backward(&ga, gl, to_cuda(cg), &gdq, &gdk,
								&gdv) == TENSOR_OK,
				      "attention backward case %zu: %s", c, tensor_last_error());
			double ulps = dt == TENSOR_F32 ? 256 : 4096; /* sums over up to 130 keys */
			char what[64];
			const char *names[5] = { "out", "lse", "dq", "dk", "dv" };
			struct tensor *got[5] = { go, gl, gdq, gdk, gdv },
				      *want[5] = { co, cl, cdq, cdk, cdv };
			for (int i = 0; i < 5; i++) {
				snprintf(what, sizeof what, "attention case %zu %s %s", c,
					 tensor_dtype_name(dt), names[i]);
				assert_near(what, got[i], want[i], ulps);
			}
			tensor_scope_end();
		}
}
END_TEST

/* ---- the device's own behaviour ---------------------------------------------- */

START_TEST(test_random_parity)
{
	const int64_t s[] = { 37, 129 };
	const enum tensor_dtype dts[] = { TENSOR_F32, TENSOR_F64 };
	for (int k = 0; k < 2; k++) {
		assert_near("uniform", tensor_rand_uniform(dts[k], dev, 2, s, 11, -1, 2),
			    tensor_rand_uniform(dts[k], TENSOR_CPU, 2, s, 11, -1, 2), 0);
		/* Box-Muller calls log and cos, whose last bit can differ between
		 * CUDA's libm and glibc's (seen on an H100) */
		assert_near("normal", tensor_rand_normal(dts[k], dev, 2, s, 5, 0.5, 3),
			    tensor_rand_normal(dts[k], TENSOR_CPU, 2, s, 5, 0.5, 3), 4);
	}
	assert_near("full", tensor_full(TENSOR_I64, dev, 2, s, -3),
		    tensor_full(TENSOR_I64, TENSOR_CPU, 2, s, -3), 0);
	assert_near("arange", tensor_arange(TENSOR_F32, dev, 0, 10, 0.5),
		    tensor_arange(TENSOR_F32, TENSOR_CPU, 0, 10, 0.5), 0);
}
END_TEST

START_TEST(test_mixing_devices_is_an_error)
{
	const int64_t s[] = { 4 };
	struct tensor *c = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, s);
	struct tensor *g = tensor_zeros(TENSOR_F32, dev, 1, s);
	tu_assert_error(tensor_copy_(g, c) < 0, TENSOR_ERR_DEVICE, "copy_", "cuda");
	tu_assert_error(!tensor_add(c, g), TENSOR_ERR_DEVICE, "add", "different devices");
	tu_assert_error(!tensor_matmul(tensor_view(c, 2, (int64_t[]){ 2, 2 }),
				       tensor_view(g, 2, (int64_t[]){ 2, 2 })),
			TENSOR_ERR_DEVICE, "matmul", NULL);
	struct tensor *idx = tensor_zeros(TENSOR_I64, TENSOR_CPU, 1, s);
	tu_assert_error(!tensor_index_select(g, 0, idx), TENSOR_ERR_DEVICE, "index_select", "cuda");
	ck_assert_uint_ge(tensor_mem_stats(dev).live_bytes, 16);
}
END_TEST

/* An index out of range is found on the device without waiting for it, and
 * reported, with the op, the value and the bound, by the next copy to the
 * host; the kernel that used it touched nothing out of bounds, and the device
 * keeps working. */
START_TEST(test_index_fault_at_sync)
{
	struct tensor *src = to_cuda(tu_rand(TENSOR_F32, 2, (int64_t[]){ 5, 3 }, 1));
	struct tensor *idx = to_cuda(tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ 4 },
						      (int64_t[]){ 1, 4, 7, 0 }));
	size_t syncs = tensor_mem_stats(dev).n_syncs;
	struct tensor *out = tensor_index_select(src, 0, idx);
	ck_assert_msg(out != NULL, "%s", tensor_last_error());
	ck_assert_uint_eq(tensor_mem_stats(dev).n_syncs, syncs);
	float host[12];
	tu_assert_error(tensor_to_host(out, host, sizeof host) < 0, TENSOR_ERR_ARG,
			"index_select: index 7 (at position 2) out of range for dim 0 of size 5",
			"synchronisation");
	/* cleared: the next copy succeeds and the good rows are right */
	ck_assert_int_eq(tensor_to_host(out, host, sizeof host), TENSOR_OK);
	float want[15];
	ck_assert_int_eq(tensor_to_host(src, want, sizeof want), TENSOR_OK);
	ck_assert(host[0] == want[3] && host[3] == want[12] && host[9] == want[0]);
	/* gather and the cross-entropy's targets go the same way */
	struct tensor *g = tensor_gather(
	    src, 1, to_cuda(tensor_full(TENSOR_I64, TENSOR_CPU, 2, (int64_t[]){ 5, 1 }, 3)));
	ck_assert(g != NULL);
	tu_assert_error(tensor_synchronize(dev) < 0, TENSOR_ERR_ARG, "gather", "size 3");
	struct tensor *t = to_cuda(tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ 5 },
						    (int64_t[]){ 0, 1, 2, -1, 3 }));
	struct tensor *loss = nn_cross_entropy(src, t, -1, 0);
	ck_assert(loss != NULL);
	tu_assert_error(tensor_synchronize(dev) < 0, TENSOR_ERR_ARG,
			"nn_cross_entropy: index 3 (at position 4)", "size 3");
	ck_assert_int_eq(tensor_synchronize(dev), TENSOR_OK);
}
END_TEST

START_TEST(test_out_of_memory)
{
	size_t live = tensor_mem_stats(dev).live_bytes;
	/* 8 TiB: more than any GPU holds */
	tu_assert_error(!tensor_empty(TENSOR_F32, dev, 2, (int64_t[]){ 1 << 20, 1 << 21 }),
			TENSOR_ERR_NOMEM, "cuda", NULL);
	tensor_scope_begin();
	tu_assert_error(!tensor_zeros(TENSOR_F64, dev, 1, (int64_t[]){ 1ll << 40 }),
			TENSOR_ERR_NOMEM, "cuda", NULL);
	tensor_scope_end();
	ck_assert_uint_eq(tensor_mem_stats(dev).live_bytes, live);
	/* the device still works */
	assert_near("after oom", tensor_full(TENSOR_F32, dev, 1, (int64_t[]){ 3 }, 2),
		    tensor_full(TENSOR_F32, TENSOR_CPU, 1, (int64_t[]){ 3 }, 2), 0);
}
END_TEST

/* Scopes of the same tensors again call neither cudaMalloc nor cudaFree, and
 * tensor_mem_trim gives the cache back. */
START_TEST(test_pool_steady_state)
{
	size_t before = 0;
	for (int it = 0; it < 3; it++) {
		if (it == 2)
			before = tensor_mem_stats(dev).n_device_allocs;
		tensor_scope_begin();
		struct tensor *a =
		    tensor_rand_uniform(TENSOR_F32, dev, 2, (int64_t[]){ 300, 700 }, 1, -1, 1);
		struct tensor *b = tensor_matmul(a, tensor_transpose(a, 0, 1));
		struct tensor *c = tensor_softmax(b, -1);
		ck_assert(c != NULL);
		tensor_scope_end();
		/* small heap tensors come from the pool too */
		tensor_heap_begin();
		struct tensor *h = tensor_zeros(TENSOR_F32, dev, 1, (int64_t[]){ 100 });
		tensor_heap_end();
		ck_assert(h != NULL);
		tensor_free(h);
	}
	ck_assert_uint_eq(tensor_mem_stats(dev).n_device_allocs, before);
	tensor_mem_trim();
	ck_assert_uint_gt(tensor_mem_stats(dev).n_device_allocs, before);
}
END_TEST

/* NCCL with one process: a sum over a communicator of one is the tensor itself, in f32
 * and f64; the errors name the op. Nothing to do in a build without NCCL. */
START_TEST(test_sum_across_one)
{
	if (!tensor_cuda_collectives()) {
		printf("test_cuda: built without NCCL: no sums across processes to test\n");
		return;
	}
	unsigned char id[128];
	struct tensor *x = to_cuda(tu_rand(TENSOR_F32, 1, (int64_t[]){ 1000 }, 5));
	tu_assert_error(tensor_cuda_sum_across(x) < 0, TENSOR_ERR_STATE, "no communicator", NULL);
	ck_assert_int_eq(tensor_cuda_comm_id(id, sizeof id), TENSOR_OK);
	tu_assert_error(tensor_cuda_comm_init(id, 4, 0, 1) < 0, TENSOR_ERR_ARG, "an id of 4 bytes",
			NULL);
	ck_assert_int_eq(tensor_cuda_comm_init(id, sizeof id, 0, 1), TENSOR_OK);
	for (int k = 0; k < 2; k++) {
		enum tensor_dtype dt = k ? TENSOR_F64 : TENSOR_F32;
		struct tensor *want = tu_rand(dt, 1, (int64_t[]){ 1000 }, 6);
		struct tensor *t = to_cuda(want);
		ck_assert_int_eq(tensor_cuda_sum_across(t), TENSOR_OK);
		assert_near("sum across one process", t, want, 0);
	}
	tu_assert_error(tensor_cuda_sum_across(tensor_transpose(
			    to_cuda(tu_rand(TENSOR_F32, 2, (int64_t[]){ 3, 4 }, 7)), 0, 1)) < 0,
			TENSOR_ERR_ARG, "contiguous", NULL);
	tensor_cuda_comm_free();
}
END_TEST

START_TEST(test_tf32_opt_in)
{
	struct tensor *a = tu_rand(TENSOR_F32, 2, (int64_t[]){ 64, 256 }, 3);
	struct tensor *b = tu_rand(TENSOR_F32, 2, (int64_t[]){ 256, 64 }, 4);
	struct tensor *want = tensor_matmul(a, b);
	ck_assert_int_eq(tensor_cuda_set_tf32(true), TENSOR_OK);
	struct tensor *fast = tensor_matmul(to_cuda(a), to_cuda(b));
	ck_assert_int_eq(tensor_cuda_set_tf32(false), TENSOR_OK);
	struct tensor *exact = tensor_matmul(to_cuda(a), to_cuda(b));
	assert_near("f32", exact, want, 512);
	/* TF32 rounds the inputs to 10 bits: close, but not f32-exact */
	tu_assert_same(tensor_to_device(fast, TENSOR_CPU), want, 2e-2);
}
END_TEST

int main(void)
{
	const char *self = getenv("CFORMER_PARITY_DEVICE");
	if (self && !strcmp(self, "cpu")) {
		dev = TENSOR_CPU;
		printf("test_cuda: the CPU against itself (CFORMER_PARITY_DEVICE=cpu)\n");
	} else if (!tensor_device_available(TENSOR_CUDA)) {
		printf("test_cuda: SKIP: %s\n",
#ifdef CFORMER_HAVE_CUDA
		       "no CUDA device is present"
#else
		       "the CUDA backend is not compiled in (./configure --with-cuda)"
#endif
		);
		return 77;
	}
	/* CUDA does not survive fork() once initialised, and the check above
	 * initialised it: this suite runs in one process */
	setenv("CK_FORK", "no", 1);
	Suite *s = suite_create("cuda");
	TCase *tc = tu_tcase("parity");
	rows = op_rows(&nrows);
	tcase_add_loop_test(tc, test_parity, 0, nrows);
	tcase_add_test(tc, test_random_parity);
	tcase_add_test(tc, test_attention_parity);
	suite_add_tcase(s, tc);
	if (dev == TENSOR_CUDA) {
		TCase *own = tu_tcase("device");
		tcase_add_test(own, test_mixing_devices_is_an_error);
		tcase_add_test(own, test_index_fault_at_sync);
		tcase_add_test(own, test_out_of_memory);
		tcase_add_test(own, test_pool_steady_state);
		tcase_add_test(own, test_tf32_opt_in);
		tcase_add_test(own, test_sum_across_one);
		suite_add_tcase(s, own);
	}
	return tu_run(s);
}
