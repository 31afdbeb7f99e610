/* Data parallelism (nn/dist.c) in whatever group this process is in: alone under
 * `make check`, and with 2 and 3 ranks under mpirun (tests/test_dist.sh). Each
 * rank's values depend on its rank, and every rank checks the group's result
 * against the formula. One process, no fork (MPI does not survive fork()). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"
#include "testutil.h"

static int rank, size;

/* A packed list of two parameters ([3,4] and [5]) of dtype dt on the CPU. */
static void packed(struct nn_params *ps, enum tensor_dtype dt)
{
	ck_assert_int_eq(nn_params_init(ps, dt, TENSOR_CPU, 3), TENSOR_OK);
	ck_assert(nn_param_new(ps, "w", 2, (int64_t[]){ 3, 4 }, false) != NULL);
	ck_assert(nn_param_new(ps, "b", 1, (int64_t[]){ 5 }, true) != NULL);
	ck_assert_int_eq(nn_params_pack(ps), TENSOR_OK);
}

/* t (1-d, f32 or f64) filled with f(r, i) for this rank r. */
static void fill(struct tensor *t, double (*f)(int r, int64_t i))
{
	int64_t n = tensor_numel(t);
	double *v = malloc(sizeof *v * (size_t)n);
	for (int64_t i = 0; i < n; i++)
		v[i] = f(rank, i);
	struct tensor *src = tensor_from_data(TENSOR_F64, TENSOR_CPU, 1, &n, v);
	ck_assert_int_eq(tensor_copy_(t, src), TENSOR_OK);
	free(v);
}

static double grad_of(int r, int64_t i)
{
	return (r + 1) * 0.5 - 0.3 * (double)i + (double)(r * i % 7);
}

static double param_of(int r, int64_t i)
{
	return 0.25 * (double)i + 100.0 * r;
}

/* Rank r's rows of the global batch in the tests: r + 1, so the shares differ. */
static int64_t rows_of(int r)
{
	return r + 1;
}

START_TEST(test_group)
{
	ck_assert_int_eq(nn_dist_size(), size);
	ck_assert(rank >= 0 && rank < size);
	/* the shares tile [0, rows) in rank order */
	for (int64_t rows = 0; rows <= 17; rows++) {
		int64_t lo, hi;
		nn_dist_share(rows, &lo, &hi);
		int64_t base = rows / size, extra = rows % size;
		ck_assert_int_eq(lo, rank * base + (rank < extra ? rank : extra));
		ck_assert_int_eq(hi - lo, base + (rank < extra));
		double v[2] = { (double)(hi - lo), (double)lo * (double)(hi - lo) };
		ck_assert_int_eq(nn_dist_sum(v, 2), TENSOR_OK);
		ck_assert(v[0] == (double)rows);
	}
	double v[2] = { rank, 1 };
	ck_assert_int_eq(nn_dist_sum(v, 2), TENSOR_OK);
	ck_assert(v[0] == size * (size - 1) / 2.0 && v[1] == size);
	ck_assert_int_eq(nn_dist_sum(NULL, 0), TENSOR_OK);
	ck_assert_int_eq(nn_dist_barrier(), TENSOR_OK);
}
END_TEST

/* The group's gradient is sum_r rows_r g_r / total, the same bits on every rank. */
START_TEST(test_average_grads)
{
	enum tensor_dtype dt = _i ? TENSOR_F64 : TENSOR_F32;
	struct nn_params ps;
	packed(&ps, dt);
	fill(ps.flat_grad, grad_of);
	int64_t total = 0;
	for (int r = 0; r < size; r++)
		total += rows_of(r);
	ck_assert_int_eq(nn_dist_average_grads(&ps, rows_of(rank), total), TENSOR_OK);
	int64_t n = tensor_numel(ps.flat_grad);
	double *want = malloc(sizeof *want * (size_t)n);
	for (int64_t i = 0; i < n; i++) {
		want[i] = 0;
		for (int r = 0; r < size; r++)
			want[i] += (double)rows_of(r) * grad_of(r, i) / (double)total;
	}
	tu_assert_close(ps.flat_grad, want, n, 1e-12, dt == TENSOR_F32 ? 1e-6 : 1e-14);
	free(want);
	uint64_t sum;
	ck_assert_int_eq(nn_dist_check_same(ps.flat_grad, "gradients", &sum), TENSOR_OK);
	/* the per-parameter gradients are views of it */
	ck_assert(ps.items[1].value->grad->storage == ps.flat_grad->storage);
	nn_params_free(&ps);
}
END_TEST

/* The ranks' random streams meet at the furthest counter (rank size - 1 drew most). */
START_TEST(test_sync_rng)
{
	struct nn_params ps;
	packed(&ps, TENSOR_F32);
	ps.rng_counter = 7 + 3 * (uint64_t)rank;
	ck_assert_int_eq(nn_dist_sync_rng(&ps), TENSOR_OK);
	ck_assert_uint_eq(ps.rng_counter, 7 + 3 * (uint64_t)(size - 1));
	tu_assert_error(nn_dist_sync_rng(NULL) < 0, TENSOR_ERR_ARG, "nn_dist_sync_rng", NULL);
	nn_params_free(&ps);
}
END_TEST

START_TEST(test_broadcast_params)
{
	struct nn_params ps;
	packed(&ps, TENSOR_F32);
	fill(ps.flat, param_of);
	int rc = nn_dist_check_same(ps.flat, "parameters", NULL);
	if (size > 1)
		tu_assert_error(rc < 0, TENSOR_ERR_STATE, "parameters differ between the",
				"ranks (checksums");
	else
		ck_assert_int_eq(rc, TENSOR_OK);
	ck_assert_int_eq(nn_dist_broadcast_params(&ps), TENSOR_OK);
	int64_t n = tensor_numel(ps.flat);
	double *want = malloc(sizeof *want * (size_t)n);
	for (int64_t i = 0; i < n; i++)
		want[i] = param_of(0, i);
	tu_assert_close(ps.flat, want, n, 0, 0);
	free(want);
	uint64_t a, b;
	ck_assert_int_eq(nn_dist_check_same(ps.flat, "parameters", &a), TENSOR_OK);
	ck_assert_int_eq(nn_dist_check_same(ps.items[0].value, "w", &b), TENSOR_OK);
	ck_assert(a != b);
	nn_params_free(&ps);
}
END_TEST

START_TEST(test_errors)
{
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 3), TENSOR_OK);
	ck_assert(nn_param_new(&ps, "w", 1, (int64_t[]){ 4 }, false) != NULL);
	tu_assert_error(nn_dist_average_grads(&ps, 1, 1) < 0, TENSOR_ERR_STATE,
			"nn_dist_average_grads", "nn_params_pack");
	tu_assert_error(nn_dist_broadcast_params(&ps) < 0, TENSOR_ERR_STATE,
			"nn_dist_broadcast_params", "nn_params_pack");
	tu_assert_error(nn_dist_average_grads(NULL, 1, 1) < 0, TENSOR_ERR_STATE, "not packed",
			NULL);
	ck_assert_int_eq(nn_params_pack(&ps), TENSOR_OK);
	tu_assert_error(nn_dist_average_grads(&ps, 3, 2) < 0, TENSOR_ERR_ARG, "3 of 2 rows", NULL);
	tu_assert_error(nn_dist_average_grads(&ps, -1, 2) < 0, TENSOR_ERR_ARG, "-1 of 2", NULL);
	tu_assert_error(nn_dist_average_grads(&ps, 0, 0) < 0, TENSOR_ERR_ARG, "0 of 0", NULL);
	tu_assert_error(nn_dist_sum(NULL, 2) < 0, TENSOR_ERR_ARG, "nn_dist_sum", NULL);
	tu_assert_error(nn_dist_check_same(NULL, "x", NULL) < 0, TENSOR_ERR_ARG,
			"nn_dist_check_same", NULL);
	struct tensor *t =
	    tensor_transpose(tensor_zeros(TENSOR_F32, TENSOR_CPU, 2, (int64_t[]){ 2, 3 }), 0, 1);
	tu_assert_error(nn_dist_check_same(t, "x", NULL) < 0, TENSOR_ERR_ARG, "contiguous", NULL);
	/* sums across processes on CUDA: a CPU tensor never, the rest without NCCL and a GPU */
	unsigned char id[128];
	tu_assert_error(tensor_cuda_sum_across(ps.flat_grad) < 0, TENSOR_ERR_UNSUPPORTED,
			"tensor_cuda_sum_across", "NCCL");
	tu_assert_error(tensor_cuda_comm_id(NULL, 1) < 0, TENSOR_ERR_ARG, "id is NULL", NULL);
	if (!tensor_cuda_collectives()) {
		tu_assert_error(tensor_cuda_comm_id(id, sizeof id) < 0, TENSOR_ERR_UNSUPPORTED,
				"tensor_cuda_comm_id", "without NCCL");
		tu_assert_error(tensor_cuda_comm_init(id, sizeof id, 0, 1) < 0,
				TENSOR_ERR_UNSUPPORTED, "tensor_cuda_comm_init", "without NCCL");
	}
	/* a failed call changed nothing: every rank still agrees */
	ck_assert_int_eq(nn_dist_check_same(ps.flat_grad, "gradients", NULL), TENSOR_OK);
	nn_params_free(&ps);
}
END_TEST

int main(int argc, char **argv)
{
	if (nn_dist_init(&argc, &argv) < 0) {
		fprintf(stderr, "test_nn_dist: %s\n", tensor_last_error());
		return 1;
	}
	rank = nn_dist_rank(), size = nn_dist_size();
	printf("test_nn_dist: rank %d of %d\n", rank, size);
	setenv("CK_FORK", "no", 1); /* MPI does not survive fork() */
	Suite *s = suite_create("nn_dist");
	TCase *tc = tu_tcase("dist");
	tcase_add_test(tc, test_group);
	tcase_add_loop_test(tc, test_average_grads, 0, 2);
	tcase_add_test(tc, test_sync_rng);
	tcase_add_test(tc, test_broadcast_params);
	tcase_add_test(tc, test_errors);
	suite_add_tcase(s, tc);
	int rc = tu_run(s);
	nn_dist_finalize();
	return rc;
}
