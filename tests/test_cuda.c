/* CUDA backend parity with the CPU reference. Skipped (exit 77) when the
 * backend is not compiled in or no GPU is present. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

/* Assert a CUDA tensor equals a CPU tensor to within ulps units in the last
 * place of its dtype, on the scale of |value| + 1 (0: exactly). */
static void assert_near(const struct tensor *gpu, const struct tensor *cpu, double ulps)
{
	struct tensor *back = tensor_to_device(gpu, TENSOR_CPU);
	ck_assert_msg(back != NULL, "%s", tensor_last_error());
	double *a = tu_values(back), *b = tu_values(cpu);
	double eps = cpu->dtype == TENSOR_F32 ? 0x1p-23 : cpu->dtype == TENSOR_F64 ? 0x1p-52 : 0;
	ck_assert_int_eq(tensor_numel(back), tensor_numel(cpu));
	for (int64_t i = 0; i < tensor_numel(cpu); i++)
		ck_assert_msg(fabs(a[i] - b[i]) <= ulps * eps * (fabs(b[i]) + 1),
			      "element %lld: cuda %.17g, cpu %.17g", (long long)i, a[i], b[i]);
	free(a);
	free(b);
}

static void assert_same(const struct tensor *gpu, const struct tensor *cpu)
{
	assert_near(gpu, cpu, 0);
}

START_TEST(test_random_parity)
{
	const int64_t s[] = { 37, 129 };
	const enum tensor_dtype dts[] = { TENSOR_F32, TENSOR_F64 };
	for (int k = 0; k < 2; k++) {
		assert_same(tensor_rand_uniform(dts[k], TENSOR_CUDA, 2, s, 11, -1, 2),
			    tensor_rand_uniform(dts[k], TENSOR_CPU, 2, s, 11, -1, 2));
		/* Box-Muller calls log and cos, whose last bit can differ between
		 * CUDA's libm and glibc's (seen on an H100) */
		assert_near(tensor_rand_normal(dts[k], TENSOR_CUDA, 2, s, 5, 0.5, 3),
			    tensor_rand_normal(dts[k], TENSOR_CPU, 2, s, 5, 0.5, 3), 4);
	}
}
END_TEST

/* The same mask and values as the CPU, out of place and in place. */
START_TEST(test_dropout_parity)
{
	const int64_t s[] = { 67, 1031 };
	const enum tensor_dtype dts[] = { TENSOR_F32, TENSOR_F64 };
	for (int k = 0; k < 2; k++) {
		struct tensor *cpu = tu_rand(dts[k], 2, s, 3);
		struct tensor *gpu = tensor_to_device(cpu, TENSOR_CUDA);
		ck_assert_msg(gpu != NULL, "%s", tensor_last_error());
		struct tensor *want = tensor_dropout(cpu, 0.3, 99);
		assert_same(tensor_dropout(gpu, 0.3, 99), want);
		ck_assert_int_eq(tensor_dropout_(gpu, 0.3, 99), TENSOR_OK);
		assert_same(gpu, want);
	}
}
END_TEST

START_TEST(test_copy_fill_parity)
{
	const int64_t s[] = { 5, 6, 7 };
	struct tensor *cpu = tu_rand(TENSOR_F64, 3, s, 1);
	struct tensor *gpu = tensor_to_device(cpu, TENSOR_CUDA);
	ck_assert_msg(gpu != NULL, "%s", tensor_last_error());
	ck_assert_int_eq(gpu->storage->device, TENSOR_CUDA);
	assert_same(gpu, cpu);
	/* strided copy with dtype conversion on the device */
	const int perm[] = { 2, 0, 1 };
	assert_same(tensor_cast(tensor_permute(gpu, perm), TENSOR_F32),
		    tensor_cast(tensor_permute(cpu, perm), TENSOR_F32));
	assert_same(tensor_full(TENSOR_I64, TENSOR_CUDA, 3, s, -3),
		    tensor_full(TENSOR_I64, TENSOR_CPU, 3, s, -3));
	assert_same(tensor_arange(TENSOR_F32, TENSOR_CUDA, 0, 10, 0.5),
		    tensor_arange(TENSOR_F32, TENSOR_CPU, 0, 10, 0.5));
}
END_TEST

START_TEST(test_mixing_devices_is_an_error)
{
	const int64_t s[] = { 4 };
	struct tensor *c = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, s);
	struct tensor *g = tensor_zeros(TENSOR_F32, TENSOR_CUDA, 1, s);
	tu_assert_error(tensor_copy_(g, c) < 0, TENSOR_ERR_DEVICE, "copy_", "cuda");
	tu_assert_error(!tensor_add(c, g), TENSOR_ERR_DEVICE, "add", "different devices");
	size_t live = tensor_mem_stats(TENSOR_CUDA).live_bytes;
	ck_assert_uint_ge(live, 16);
}
END_TEST

int main(void)
{
	if (!tensor_device_available(TENSOR_CUDA)) {
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
	tcase_add_test(tc, test_random_parity);
	tcase_add_test(tc, test_copy_fill_parity);
	tcase_add_test(tc, test_dropout_parity);
	tcase_add_test(tc, test_mixing_devices_is_an_error);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
