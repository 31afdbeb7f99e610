/* The op table (op_table.h) on the CPU: every row's op against its naive
 * double-precision reference in each dtype it takes and with each input in
 * turn in each layout; the finite-difference gradient of its differentiable
 * form in f64 (each input leaf in each layout, gradients summed back through
 * broadcasts); and for the fused kernels, the kernel against the composed
 * fallback (tensor_cpu_set_fused). Each op's other devices run in
 * tests/test_cuda.c, walking the same table. The same program runs each op
 * family's own cases, which are not table-shaped (test_ops.h:
 * tests/test_ops_<family>.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h" /* tensor_cpu_set_fused */
#include "gradcheck.h"
#include "op_table.h"
#include "test_ops.h"
#include "testutil.h"

static const struct op_row *rows;
static int nrows;

/* got within tol (|want| + 1) of want, elementwise (NaN matches NaN, inf the same inf). */
static void assert_close(const char *what, const struct tensor *got, const struct tensor *want,
			 double tol)
{
	ck_assert_msg(got != NULL && want != NULL, "%s: %s", what, tensor_last_error());
	ck_assert_msg(tensor_numel(got) == tensor_numel(want), "%s: %lld elements, want %lld", what,
		      (long long)tensor_numel(got), (long long)tensor_numel(want));
	double *a = tu_values(got), *b = tu_values(want);
	for (int64_t i = 0; i < tensor_numel(want); i++) {
		bool ok = (isnan(a[i]) && isnan(b[i])) || (isinf(b[i]) && a[i] == b[i]) ||
			  fabs(a[i] - b[i]) <= tol * (fabs(b[i]) + 1);
		if (!ok) {
			double x = a[i], y = b[i];
			free(a);
			free(b);
			ck_abort_msg("%s: element %lld: got %.17g, want %.17g (tolerance %g)", what,
				     (long long)i, x, y, tol);
		}
	}
	free(a);
	free(b);
}

/* The inputs of row r in dtype dt, input j in layout l, the others contiguous. */
static void inputs(const struct op_row *r, enum tensor_dtype dt, int j, unsigned l,
		   struct tensor **in)
{
	for (int i = 0; i < r->nin; i++)
		in[i] =
		    op_input(r, i, dt, i == j ? l : OP_CONTIG, TENSOR_CPU, 1000 + 17 * (uint64_t)i);
}

/* f64 contiguous copies of the inputs, for the reference. */
static void as_f64(const struct op_row *r, struct tensor *const *in, struct tensor **out)
{
	for (int i = 0; i < r->nin; i++)
		out[i] = tensor_contiguous(tensor_cast(in[i], TENSOR_F64));
}

/* Call f for every (dtype, input, layout) of r. */
static void each_case(const struct op_row *r, unsigned dtypes,
		      void (*f)(const struct op_row *, enum tensor_dtype, int, unsigned))
{
	for (int dt = 0; dt < TENSOR_NDTYPES; dt++) {
		if (!(dtypes & r->dtypes & (1u << dt)))
			continue;
		for (int j = 0; j < r->nin; j++)
			for (unsigned l = OP_CONTIG; l <= OP_BROADCAST; l <<= 1)
				if (op_layout_fits(r, j, l) && !(l == OP_CONTIG && j > 0))
					f(r, (enum tensor_dtype)dt, j, l);
	}
}

static void what_of(char *buf, size_t n, const char *check, const struct op_row *r,
		    enum tensor_dtype dt, int j, unsigned l)
{
	snprintf(buf, n, "%s: %s %s%s%s, input %d %s", check, r->name, tensor_dtype_name(dt),
		 dt == TENSOR_BF16 ? " on the gemm kernel " : "",
		 dt == TENSOR_BF16 ? tensor_bf16_gemm_kernel() : "", j, op_layout_name(l));
}

/* ---- forward against the reference -------------------------------------------------- */

static void forward_case(const struct op_row *r, enum tensor_dtype dt, int j, unsigned l)
{
	tensor_scope_begin();
	struct tensor *in[OP_MAX_IN], *in64[OP_MAX_IN];
	inputs(r, dt, j, l, in);
	as_f64(r, in, in64); /* before an in-place op writes in[0] */
	struct tensor *want = r->ref(in64, r);
	struct tensor *got = r->fn(in, r);
	char what[200];
	what_of(what, sizeof what, "forward", r, dt, j, l);
	bool ints = dt == TENSOR_I32 || dt == TENSOR_I64;
	/* bf16: the inputs are exact in the reference; a bf16 result is rounded once
	 * (2^-9 relative; copies and casts are exact) */
	double tol = ints		 ? 0
		     : dt == TENSOR_F32	 ? (r->tol32 ? r->tol32 : 2e-5)
		     : dt == TENSOR_BF16 ? 4e-3
					 : (r->tol64 ? r->tol64 : 1e-11);
	assert_close(what, got, want, tol);
	ck_assert_int_eq(tensor_last_status(), TENSOR_OK);
	tensor_scope_end();
}

START_TEST(test_forward)
{
	each_case(&rows[_i], OP_ALL, forward_case);
}
END_TEST

/* The bf16 rows on each bf16 GEMM kernel this CPU runs, forced in turn, the emulated
 * twins of the AVX512-BF16 and AMX kernels everywhere. */
START_TEST(test_forward_bf16)
{
	if (!(rows[_i].dtypes & OP_BF16))
		return;
	for (int kn = 0; kn < TU_BF16_KERNELS; kn++) {
		if (tu_bf16_kernel_force(kn))
			each_case(&rows[_i], OP_BF16, forward_case);
		tensor_clear_error(); /* a kernel this CPU lacks */
	}
	tensor_bf16_gemm_force(NULL);
}
END_TEST

/* ---- bf16 refused ---------------------------------------------------------------------- */

/* A row that does not list bf16, given bf16 data inputs (index inputs stay i64), fails
 * with TENSOR_ERR_DTYPE and a message naming bf16, instead of computing. */
START_TEST(test_refuses_bf16)
{
	const struct op_row *r = &rows[_i];
	if (r->dtypes & OP_BF16)
		return;
	tensor_scope_begin();
	struct tensor *in[OP_MAX_IN];
	inputs(r, TENSOR_BF16, 0, OP_CONTIG, in);
	tensor_clear_error();
	struct tensor *got = r->fn(in, r);
	ck_assert_msg(got == NULL, "%s: bf16 inputs accepted", r->name);
	ck_assert_msg(
	    tensor_last_status() == TENSOR_ERR_DTYPE && strstr(tensor_last_error(), "bf16"),
	    "%s: status %d, message '%s'", r->name, tensor_last_status(), tensor_last_error());
	tensor_clear_error();
	tensor_scope_end();
}
END_TEST

/* ---- gradients ------------------------------------------------------------------------ */

/* gc_fn: the row's differentiable form on the leaves seen through their layouts. */
struct grad_ctx {
	const struct op_row *r;
	int j;
	unsigned l;
};

static struct tensor *grad_fn(struct tensor *const *leaves, void *p)
{
	const struct grad_ctx *c = p;
	struct tensor *in[OP_MAX_IN];
	for (int i = 0; i < c->r->nin; i++)
		in[i] = op_grad_view(leaves[i], c->r, i, i == c->j ? c->l : OP_CONTIG);
	return c->r->grad(in, c->r);
}

static void grad_case(const struct op_row *r, enum tensor_dtype dt, int j, unsigned l)
{
	(void)dt;
	tensor_scope_begin();
	struct tensor *leaves[OP_MAX_IN];
	for (int i = 0; i < r->nin; i++)
		leaves[i] = op_grad_input(r, i, i == j ? l : OP_CONTIG, 1000 + 17 * (uint64_t)i);
	struct grad_ctx c = { r, j, l };
	char what[200];
	what_of(what, sizeof what, "gradient", r, TENSOR_F64, j, l);
	gc_assert(what, grad_fn, &c, r->nin, leaves);
	for (int i = 0; i < r->nin; i++) { /* the leaves' gradients are heap tensors */
		tensor_free(leaves[i]->grad);
		leaves[i]->grad = NULL;
	}
	ag_tape_reset();
	tensor_scope_end();
}

START_TEST(test_gradient)
{
	if (rows[_i].grad)
		each_case(&rows[_i], OP_F64, grad_case);
}
END_TEST

/* ---- fused kernels against the composed forms ------------------------------------------ */

static void composed_case(const struct op_row *r, enum tensor_dtype dt, int j, unsigned l)
{
	tensor_scope_begin();
	struct tensor *in[OP_MAX_IN];
	inputs(r, dt, j, l, in);
	struct tensor *fused = tensor_clone(r->fn(in, r));
	inputs(r, dt, j, l, in); /* fresh: the op may write in[0] */
	tensor_cpu_set_fused(false);
	struct tensor *composed = r->fn(in, r);
	tensor_cpu_set_fused(true);
	char what[200];
	what_of(what, sizeof what, "fused against composed", r, dt, j, l);
	assert_close(what, fused, composed, dt == TENSOR_F32 ? 1e-5 : 1e-12);
	tensor_scope_end();
}

START_TEST(test_composed)
{
	if (rows[_i].fused)
		each_case(&rows[_i], OP_FLOATS, composed_case);
}
END_TEST

int main(void)
{
	rows = op_rows(&nrows);
	Suite *s = suite_create("ops");
	TCase *tc = tu_tcase("forward");
	tcase_add_loop_test(tc, test_forward, 0, nrows);
	suite_add_tcase(s, tc);
	tc = tu_tcase("forward bf16");
	tcase_add_loop_test(tc, test_forward_bf16, 0, nrows);
	suite_add_tcase(s, tc);
	tc = tu_tcase("bf16 refused");
	tcase_add_loop_test(tc, test_refuses_bf16, 0, nrows);
	suite_add_tcase(s, tc);
	tc = tu_tcase("gradient");
	tcase_add_loop_test(tc, test_gradient, 0, nrows);
	suite_add_tcase(s, tc);
	tc = tu_tcase("composed");
	tcase_add_loop_test(tc, test_composed, 0, nrows);
	suite_add_tcase(s, tc);
	ops_elementwise_tcases(s);
	ops_where_tcases(s);
	ops_reduce_tcases(s);
	ops_norm_tcases(s);
	ops_index_tcases(s);
	ops_grad_elementwise_tcases(s);
	ops_grad_math_tcases(s);
	ops_grad_index_tcases(s);
	return tu_run(s);
}
