/* Mixed precision (autograd/autocast.c, nn_params_autocast_begin,
 * tensor_set_matmul_precision): in a bf16 region f32 products round their
 * operands to bf16 and return f32, in forward and in backward. Checked against
 * double-precision products of the rounded values (forward and both
 * gradients) for ag_matmul and ag_matmul_laid_out; each node keeping its
 * forward's precision; the libtensor side bit for bit against products of
 * explicit casts on each kernel; linear layers and attention near f32;
 * parameters read from their packed bf16 copy (not rounded per use); one
 * training step of each preset in bf16 close to f32; inference; the regions'
 * rules and errors; out of memory. f64 products are never rounded. */
#include <math.h>
#include <string.h>

#include "backend.h" /* tensor_bf16_gemm_force */
#include "bf16.h"
#include "models_common.h"

static void ok(int rc)
{
	ck_assert_msg(rc == TENSOR_OK, "%s", tensor_last_error());
}

static struct tensor *randn(int ndim, const int64_t *shape, uint64_t seed)
{
	struct tensor *t = tensor_rand_normal(TENSOR_F32, TENSOR_CPU, ndim, shape, 0, 1, seed);
	ck_assert_msg(t != NULL, "%s", tensor_last_error());
	return t;
}

/* Element i of a contiguous f32 tensor, rounded to bf16 (as a double). */
static double r16(const struct tensor *t, int64_t i)
{
	return bf16_to_f64(bf16_from_f32(((const float *)tensor_data(t))[i]));
}

/* got (f32 [m,n] contiguous, at row stride ldg) against the double product of
 * the bf16 roundings of a [m,k] and b [k,n] (element (i,j) at ai*i + ak*p and
 * bk*p + bj*j): within 1e-5 of sum |a b| (f32 accumulation). */
static void check_product(const float *got, int64_t ldg, const struct tensor *a, int64_t ai,
			  int64_t ak, const struct tensor *b, int64_t bk, int64_t bj, int64_t m,
			  int64_t n, int64_t k, const char *what)
{
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double s = 0, mag = 0;
			for (int64_t p = 0; p < k; p++) {
				double x = r16(a, ai * i + ak * p) * r16(b, bk * p + bj * j);
				s += x, mag += fabs(x);
			}
			double g = got[i * ldg + j];
			ck_assert_msg(fabs(g - s) <= 1e-5 * mag + 1e-30,
				      "%s [%lld,%lld]: %.9g, expected %.9g", what, (long long)i,
				      (long long)j, g, s);
		}
}

/* The f32 product differs from the rounded one by more than the bound, so the
 * checks above can tell f32 from bf16 products. */
static void check_not_f32(const float *got, const struct tensor *a, const struct tensor *b,
			  int64_t k, int64_t n)
{
	double s = 0;
	for (int64_t p = 0; p < k; p++)
		s += ((const float *)tensor_data(a))[p] *
		     (double)((const float *)tensor_data(b))[p * n];
	ck_assert_msg(fabs(got[0] - s) > 1e-4, "product [0,0] %.9g is the f32 one", got[0]);
}

/* y = A·B in a bf16 region, then backward with dout R: y, dA = R B^T and
 * dB = A^T R all from bf16 roundings (R rounded too), results f32. */
START_TEST(test_matmul_bf16)
{
	enum { M = 5, K = 37, N = 6 };
	struct tensor *a = randn(2, (int64_t[]){ M, K }, 1), *b = randn(2, (int64_t[]){ K, N }, 2);
	struct tensor *r = randn(2, (int64_t[]){ M, N }, 3);
	ok(ag_requires_grad(a, true));
	ok(ag_requires_grad(b, true));
	tensor_scope_begin();
	ok(ag_autocast_begin(TENSOR_BF16));
	ck_assert_int_eq(ag_autocast_dtype(), TENSOR_BF16);
	struct tensor *y =
	    _i == 0 ? ag_matmul(a, b) : ag_matmul_laid_out(a, b, (const int[]){ 1, 0 });
	ag_autocast_end(); /* backward after the region: the node keeps its precision */
	ck_assert_int_eq(ag_autocast_dtype(), TENSOR_F32);
	ck_assert_msg(y && y->dtype == TENSOR_F32, "%s", tensor_last_error());
	struct tensor *yc = tensor_contiguous(ag_detach(y));
	check_product(tensor_data(yc), N, a, K, 1, b, N, 1, M, N, K, "y");
	check_not_f32(tensor_data(yc), a, b, K, N);
	ok(ag_backward(y, r));
	/* dA [M,K] = R [M,N] B^T; dB [K,N] = A^T R */
	check_product(tensor_data(a->grad), K, r, N, 1, b, 1, N, M, K, N, "dA");
	check_product(tensor_data(b->grad), N, a, 1, K, r, N, 1, K, N, M, "dB");
	tensor_scope_end();
	tensor_free(a), tensor_free(b), tensor_free(r);
}
END_TEST

/* A node keeps its forward's precision: one recorded outside a region computes f32
 * gradients even when backward runs inside a bf16 region. */
START_TEST(test_node_precision)
{
	enum { M = 3, K = 29, N = 4 };
	struct tensor *a = randn(2, (int64_t[]){ M, K }, 6), *b = randn(2, (int64_t[]){ K, N }, 7);
	struct tensor *r = randn(2, (int64_t[]){ M, N }, 8);
	ok(ag_requires_grad(a, true));
	tensor_scope_begin();
	struct tensor *y = ag_matmul(a, b);
	ok(ag_autocast_begin(TENSOR_BF16));
	ok(ag_backward(y, r));
	ag_autocast_end();
	struct tensor *want = tensor_matmul(r, tensor_transpose(b, 0, 1)); /* f32 */
	tu_assert_same(a->grad, want, 0);
	ck_assert_int_eq(tensor_matmul_precision(), TENSOR_F32);
	tensor_scope_end();
	tensor_free(a), tensor_free(b), tensor_free(r);
}
END_TEST

/* libtensor's side: f32 x f32 under tensor_set_matmul_precision(bf16), and an
 * f32 x bf16 pair, give exactly the product of the bf16 casts, in f32, on
 * each kernel this CPU has; precision f32 restores the f32 product. */
START_TEST(test_matmul_precision)
{
	static const char *const kernels[] = { "portable", "avx512bf16" };
	if (tensor_bf16_gemm_force(kernels[_i]) != TENSOR_OK) {
		printf("test_matmul_precision: skipped for %s: %s\n", kernels[_i],
		       tensor_last_error());
		tensor_clear_error();
		return;
	}
	tensor_scope_begin();
	struct tensor *a = randn(3, (int64_t[]){ 2, 7, 33 }, 9),
		      *b = randn(2, (int64_t[]){ 33, 5 }, 10);
	struct tensor *a16 = tensor_cast(a, TENSOR_BF16), *b16 = tensor_cast(b, TENSOR_BF16);
	struct tensor *want = tensor_matmul_to(a16, b16, TENSOR_F32), *f32 = tensor_matmul(a, b);
	ok(tensor_set_matmul_precision(TENSOR_BF16));
	struct tensor *low = tensor_matmul(a, b),
		      *lowt = tensor_matmul(b16, tensor_transpose(a, 1, 2));
	ok(tensor_set_matmul_precision(TENSOR_F32));
	struct tensor *mixed = tensor_matmul(a, b16), *mixed2 = tensor_matmul(a16, b);
	struct tensor *again = tensor_matmul(a, b);
	ck_assert(low && mixed && mixed2 && again && lowt == NULL); /* [33,5] x [2,33,7] */
	tensor_clear_error();
	ck_assert(low->dtype == TENSOR_F32 && mixed->dtype == TENSOR_F32 &&
		  mixed2->dtype == TENSOR_F32);
	tu_assert_same(low, want, 0);
	tu_assert_same(mixed, want, 0);
	tu_assert_same(mixed2, want, 0);
	tu_assert_same(again, f32, 0);
	double d = 0;
	for (int64_t i = 0; i < tensor_numel(f32); i++)
		d = fmax(d, fabs(((float *)tensor_data(f32))[i] - ((float *)tensor_data(want))[i]));
	ck_assert_msg(d > 0, "the f32 product equals the bf16 one");
	/* a bf16 result only for bf16 x bf16; f64 with bf16 refused */
	ck_assert(tensor_matmul_to(a, b16, TENSOR_BF16) == NULL);
	ck_assert_int_eq(tensor_last_status(), TENSOR_ERR_DTYPE);
	tensor_clear_error();
	struct tensor *d64 = tensor_cast(b, TENSOR_F64);
	ck_assert(tensor_matmul(a16, d64) == NULL);
	ck_assert_int_eq(tensor_last_status(), TENSOR_ERR_DTYPE);
	tensor_clear_error();
	ck_assert_int_eq(tensor_set_matmul_precision(TENSOR_F64), TENSOR_ERR_DTYPE);
	ck_assert_int_eq(tensor_matmul_precision(), TENSOR_F32);
	tensor_scope_end();
	ok(tensor_bf16_gemm_force(NULL));
}
END_TEST

/* f64 operands and f64 gradients are never rounded: the gradient checks stay exact. */
START_TEST(test_f64_untouched)
{
	int64_t sh[2] = { 3, 3 };
	struct tensor *a = tensor_rand_normal(TENSOR_F64, TENSOR_CPU, 2, sh, 0, 1, 4);
	tensor_scope_begin();
	ok(ag_autocast_begin(TENSOR_BF16));
	struct tensor *y = ag_matmul(a, a), *ref = tensor_matmul(a, a);
	ag_autocast_end();
	ck_assert(y && ref && y->dtype == TENSOR_F64);
	for (int i = 0; i < 9; i++)
		ck_assert(((double *)tensor_data(y))[i] == ((double *)tensor_data(ref))[i]);
	tensor_scope_end();
	tensor_free(a);
}
END_TEST

/* A linear layer (with and without bias) and attention in bf16: outputs and
 * every parameter's gradient within bf16 precision of the f32 ones, and
 * different from them (the region took effect). */
struct step {
	double out[64], grad[4096];
	int nout, ngrad;
};

static void linear_attention_step(struct nn_params *ps, const struct nn_linear *l0,
				  const struct nn_linear *l1, enum tensor_dtype dt, struct step *s)
{
	ok(nn_params_zero_grad(ps));
	tensor_scope_begin();
	ok(nn_params_autocast_begin(ps, dt));
	struct tensor *x = randn(3, (int64_t[]){ 2, 4, 8 }, 11);
	/* q = l0(x) heads [2,2,4,4]; k = v = l1(q) */
	struct tensor *q = nn_linear_forward(l0, x);
	struct tensor *kv = nn_linear_forward(l1, q);
	int perm[4] = { 0, 2, 1, 3 };
	int64_t h4[4] = { 2, 4, 2, 4 };
	struct tensor *qh = ag_permute(ag_reshape(q, 4, h4), perm);
	struct tensor *kh = ag_permute(ag_reshape(kv, 4, h4), perm);
	struct tensor *o = nn_attention(qh, kh, kh, NULL, false, 0.5, NULL);
	struct tensor *loss = ag_sum(ag_mul(o, o), 0, NULL, false);
	ag_autocast_end();
	ck_assert_msg(loss != NULL, "%s", tensor_last_error());
	struct tensor *oc = tensor_contiguous(ag_detach(o));
	s->nout = (int)tensor_numel(oc);
	for (int i = 0; i < s->nout; i++)
		s->out[i] = ((float *)tensor_data(oc))[i];
	ok(ag_backward(loss, NULL));
	s->ngrad = (int)tensor_numel(ps->flat_grad);
	for (int i = 0; i < s->ngrad; i++)
		s->grad[i] = ((float *)tensor_data(ps->flat_grad))[i];
	tensor_scope_end();
}

/* max |x - y| / max |y| */
static double rel_diff(const double *x, const double *y, int n)
{
	double d = 0, m = 0;
	for (int i = 0; i < n; i++) {
		d = fmax(d, fabs(x[i] - y[i]));
		m = fmax(m, fabs(y[i]));
	}
	return d / m;
}

START_TEST(test_linear_attention_bf16)
{
	struct nn_params ps;
	struct nn_linear l0, l1;
	ok(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 3));
	ok(nn_linear_init(&l0, &ps, "l0", 8, 8, true));
	ok(nn_linear_init(&l1, &ps, "l1", 8, 8, false));
	ok(nn_params_pack(&ps));
	static struct step f, h;
	linear_attention_step(&ps, &l0, &l1, TENSOR_F32, &f);
	linear_attention_step(&ps, &l0, &l1, TENSOR_BF16, &h);
	double dout = rel_diff(h.out, f.out, f.nout), dgrad = rel_diff(h.grad, f.grad, f.ngrad);
	ck_assert_msg(dout > 1e-6 && dout < 2e-2, "outputs differ by %g", dout);
	ck_assert_msg(dgrad > 1e-6 && dgrad < 3e-2, "gradients differ by %g", dgrad);
	nn_params_free(&ps);
}
END_TEST

/* Packed parameters are read from ps->flat_lowp, rounded once by
 * nn_params_autocast_begin: a planted value in the copy shows in the product,
 * and the next region rounds the parameters afresh. */
START_TEST(test_params_copy_used)
{
	struct nn_params ps;
	struct nn_linear l;
	ok(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 3));
	ok(nn_linear_init(&l, &ps, "l", 2, 1, false));
	ok(nn_params_pack(&ps));
	float w[2] = { 1.0f + 1.0f / 512, 3.0f }; /* 1 + 2^-9 rounds to 1 in bf16 */
	memcpy(tensor_data(l.weight), w, sizeof w);
	tensor_scope_begin();
	ag_no_grad_begin(); /* a forward that saves the copy for backward pins it: below */
	struct tensor *x =
	    tensor_from_data(TENSOR_F32, TENSOR_CPU, 2, (int64_t[]){ 1, 2 }, (float[]){ 1, 0 });
	ok(nn_params_autocast_begin(&ps, TENSOR_BF16));
	ck_assert(ps.flat_lowp && ps.flat_lowp->dtype == TENSOR_BF16);
	ck_assert_double_eq(tensor_get(nn_linear_forward(&l, x), (int64_t[]){ 0, 0 }), 1.0);
	((uint16_t *)tensor_data(ps.flat_lowp))[0] = bf16_from_f32(5.0f); /* plant */
	ck_assert_double_eq(tensor_get(nn_linear_forward(&l, x), (int64_t[]){ 0, 0 }), 5.0);
	ag_autocast_end();
	ck_assert_double_eq(tensor_get(nn_linear_forward(&l, x), (int64_t[]){ 0, 0 }),
			    (double)w[0]);		/* outside: f32 */
	ok(nn_params_autocast_begin(&ps, TENSOR_BF16)); /* rounded afresh */
	ck_assert_double_eq(tensor_get(nn_linear_forward(&l, x), (int64_t[]){ 0, 0 }), 1.0);
	ag_autocast_end();
	ag_no_grad_end();
	/* a recorded forward saves the copy: rounding again before its backward is refused */
	ok(nn_params_autocast_begin(&ps, TENSOR_BF16));
	struct tensor *y = nn_linear_forward(&l, x);
	ag_autocast_end();
	ck_assert(y != NULL);
	ck_assert_int_eq(nn_params_autocast_begin(&ps, TENSOR_BF16), TENSOR_ERR_STATE);
	ck_assert_int_eq(ag_autocast_dtype(), TENSOR_F32);
	ok(ag_backward(ag_sum(y, 0, NULL, false), NULL));
	ok(nn_params_autocast_begin(&ps, TENSOR_BF16));
	ag_autocast_end();
	tensor_scope_end();
	nn_params_free(&ps);
}
END_TEST

/* One training step (forward, backward) of each preset in bf16 against f32:
 * the loss within 2% and the gradient within 5% (of its largest entry),
 * unpacked parameters (rounded per use) giving the same as packed ones. */
static double preset_step(const char *preset, enum tensor_dtype dt, bool pack, float *grad,
			  int64_t *ngrad)
{
	struct model_config c = tiny(preset);
	struct nn_params ps;
	struct model_classifier m;
	ok(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 9));
	ok(model_classifier_init(&m, &ps, &c));
	if (pack)
		ok(nn_params_pack(&ps));
	struct tensor *ids = rand_ids(3, 8, 11, 2);
	struct tensor *mask = prefix_mask(3, 8, (int64_t[]){ 8, 5, 7 });
	struct tensor *labels =
	    tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ 3 }, (int64_t[]){ 0, 2, 1 });
	tensor_scope_begin();
	ok(nn_params_autocast_begin(&ps, dt));
	struct tensor *loss =
	    nn_cross_entropy(model_classifier_forward(&m, ids, mask), labels, -1, 0.0);
	ag_autocast_end();
	ck_assert_msg(loss != NULL, "%s: %s", preset, tensor_last_error());
	double l = tensor_get(loss, NULL);
	ok(ag_backward(loss, NULL));
	int64_t off = 0;
	for (int i = 0; i < ps.n; i++) {
		struct tensor *g = ps.items[i].value->grad;
		int64_t n = g ? tensor_numel(g) : 0;
		for (int64_t j = 0; j < n; j++)
			grad[off + j] = ((float *)tensor_data(g))[j];
		off += tensor_numel(ps.items[i].value);
	}
	*ngrad = off;
	tensor_scope_end();
	tensor_free(ids), tensor_free(mask), tensor_free(labels);
	model_classifier_free(&m);
	nn_params_free(&ps);
	return l;
}

static const char *const presets[] = { "transformer", "linformer", "conv-linformer" };

START_TEST(test_preset_step_bf16)
{
	static float g32[1 << 16], g16[1 << 16], gun[1 << 16];
	int64_t n32, n16, nun;
	double l32 = preset_step(presets[_i], TENSOR_F32, true, g32, &n32);
	double l16 = preset_step(presets[_i], TENSOR_BF16, true, g16, &n16);
	double lun = preset_step(presets[_i], TENSOR_BF16, false, gun, &nun);
	ck_assert(n32 == n16 && n16 == nun && n32 < (1 << 16));
	ck_assert_msg(fabs(l16 - l32) <= 0.02 * fabs(l32) && l16 != l32, "%s: loss %.6f vs %.6f",
		      presets[_i], l16, l32);
	ck_assert_msg(lun == l16, "%s: unpacked %.9g vs packed %.9g", presets[_i], lun, l16);
	double d = 0, m = 0;
	for (int64_t i = 0; i < n32; i++) {
		d = fmax(d, fabs((double)g16[i] - g32[i]));
		m = fmax(m, fabs((double)g32[i]));
		ck_assert_msg(gun[i] == g16[i], "%s: unpacked gradient %lld differs", presets[_i],
			      (long long)i);
	}
	ck_assert_msg(d <= 0.05 * m, "%s: gradients differ by %g of %g", presets[_i], d, m);
}
END_TEST

/* Inference (no grad) in a bf16 region: the convolutional projection and
 * position run through the rounded products too, close to f32. */
START_TEST(test_inference_bf16)
{
	struct model_config c = tiny("conv-linformer");
	struct nn_params ps;
	struct model_classifier m;
	ok(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 9));
	ok(model_classifier_init(&m, &ps, &c));
	ok(nn_params_pack(&ps));
	nn_params_train(&ps, false);
	struct tensor *ids = rand_ids(2, 8, 11, 3);
	tensor_scope_begin();
	ag_no_grad_begin();
	struct tensor *f = model_classifier_forward(&m, ids, NULL);
	ok(nn_params_autocast_begin(&ps, TENSOR_BF16));
	struct tensor *h = model_classifier_forward(&m, ids, NULL);
	ag_autocast_end();
	ag_no_grad_end();
	ck_assert(f && h && h->dtype == TENSOR_F32);
	double d = 0, mx = 0;
	for (int i = 0; i < 6; i++) {
		d = fmax(d, fabs(((float *)tensor_data(h))[i] - ((float *)tensor_data(f))[i]));
		mx = fmax(mx, fabs(((float *)tensor_data(f))[i]));
	}
	ck_assert_msg(d > 0 && d <= 0.05 * mx, "logits differ by %g of %g", d, mx);
	tensor_scope_end();
	tensor_free(ids);
	model_classifier_free(&m);
	nn_params_free(&ps);
}
END_TEST

START_TEST(test_errors)
{
	ck_assert_int_eq(ag_autocast_begin(TENSOR_F64), TENSOR_ERR_DTYPE);
	ck_assert_msg(strstr(tensor_last_error(), "ag_autocast_begin"), "%s", tensor_last_error());
	ck_assert_int_eq(ag_autocast_dtype(), TENSOR_F32);
	ag_autocast_end(); /* outside a region: nothing */
	struct tensor *f = tensor_zeros(TENSOR_F32, TENSOR_CPU, 1, (int64_t[]){ 4 });
	struct tensor *c = tensor_zeros(TENSOR_BF16, TENSOR_CPU, 1, (int64_t[]){ 4 });
	struct tensor *c3 = tensor_zeros(TENSOR_BF16, TENSOR_CPU, 1, (int64_t[]){ 3 });
	tensor_clear_error();
	ck_assert_int_eq(ag_autocast_storage(f, c), TENSOR_ERR_STATE);
	ck_assert_msg(strstr(tensor_last_error(), "no region"), "%s", tensor_last_error());
	/* nesting: the innermost dtype holds; 16 levels at most */
	int depth = 0;
	while (ag_autocast_begin(depth % 2 ? TENSOR_F32 : TENSOR_BF16) == TENSOR_OK)
		depth++;
	ck_assert_int_eq(depth, 16);
	ck_assert_int_eq(tensor_last_status(), TENSOR_ERR_STATE);
	ck_assert_int_eq(ag_autocast_dtype(), TENSOR_F32);
	ag_autocast_end();
	ck_assert_int_eq(ag_autocast_dtype(), TENSOR_BF16);
	tensor_clear_error();
	ck_assert_int_eq(ag_autocast_storage(f, c3), TENSOR_ERR_ARG);
	ck_assert_msg(strstr(tensor_last_error(), "[3]"), "%s", tensor_last_error());
	ck_assert_int_eq(ag_autocast_storage(c, c), TENSOR_ERR_ARG);
	ck_assert_int_eq(ag_autocast_storage(NULL, c), TENSOR_ERR_ARG);
	tensor_clear_error();
	ok(ag_autocast_storage(f, c));
	int nreg = 1;
	while (ag_autocast_storage(f, c) == TENSOR_OK)
		nreg++;
	ck_assert_int_eq(nreg, 64); /* at most 64 copies in the open regions */
	ck_assert_int_eq(tensor_last_status(), TENSOR_ERR_STATE);
	ck_assert_msg(strstr(tensor_last_error(), "at most 64"), "%s", tensor_last_error());
	tensor_clear_error();
	for (int i = 0; i < 15; i++)
		ag_autocast_end();
	ck_assert_int_eq(ag_autocast_dtype(), TENSOR_F32);
	/* reading a registered copy makes a view in the open scope: none open is an error */
	struct tensor *m = tensor_ones(TENSOR_F32, TENSOR_CPU, 2, (int64_t[]){ 2, 2 });
	struct tensor *m16 = tensor_ones(TENSOR_BF16, TENSOR_CPU, 2, (int64_t[]){ 2, 2 });
	ok(ag_autocast_begin(TENSOR_BF16));
	ok(ag_autocast_storage(m, m16));
	tensor_clear_error();
	ck_assert(ag_matmul(m, m) == NULL);
	ck_assert_int_eq(tensor_last_status(), TENSOR_ERR_STATE);
	ck_assert_msg(strstr(tensor_last_error(), "scope"), "%s", tensor_last_error());
	tensor_scope_begin();
	tensor_heap_begin();
	tensor_clear_error();
	ck_assert(ag_matmul(m, m) == NULL);
	tensor_heap_end();
	ck_assert(ag_matmul(m, m) != NULL);
	tensor_scope_end();
	ag_autocast_end();
	ck_assert_int_eq(tensor_matmul_precision(), TENSOR_F32); /* restored */
	tensor_free(m), tensor_free(m16);
	ck_assert_int_eq(nn_params_autocast_begin(NULL, TENSOR_BF16), TENSOR_ERR_ARG);
	struct nn_params ps;
	ok(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1));
	ck_assert_int_eq(nn_params_autocast_begin(&ps, TENSOR_I32), TENSOR_ERR_DTYPE);
	ck_assert_int_eq(ag_autocast_dtype(), TENSOR_F32); /* no region left open */
	nn_params_free(&ps);
	tensor_free(f), tensor_free(c), tensor_free(c3);
}
END_TEST

/* Out of memory at each allocation of a bf16 step: an error, never a crash,
 * and no region left open by nn_params_autocast_begin's failure. */
START_TEST(test_oom)
{
	struct nn_params ps;
	struct nn_linear l;
	ok(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 3));
	ok(nn_linear_init(&l, &ps, "l", 8, 8, true));
	ok(nn_params_pack(&ps));
	struct tensor *x = randn(2, (int64_t[]){ 4, 8 }, 5);
	for (int fail = 0;; fail++) {
		tensor_mem_inject_failure(fail);
		tensor_scope_begin();
		int rc = nn_params_autocast_begin(&ps, TENSOR_BF16);
		struct tensor *y = rc == TENSOR_OK ? nn_linear_forward(&l, x) : NULL;
		struct tensor *loss = y ? ag_sum(y, 0, NULL, false) : NULL;
		if (rc == TENSOR_OK)
			ag_autocast_end();
		ck_assert_int_eq(ag_autocast_dtype(), TENSOR_F32);
		rc = loss ? ag_backward(loss, NULL) : tensor_last_status();
		ag_tape_reset();
		tensor_scope_end();
		tensor_mem_inject_failure(-1);
		if (rc == TENSOR_OK)
			break;
		ck_assert_msg(tensor_last_status() == TENSOR_ERR_NOMEM, "allocation %d: %s", fail,
			      tensor_last_error()); /* the first error */
		ck_assert_int_lt(fail, 64);
		tensor_clear_error();
	}
	tensor_free(x);
	nn_params_free(&ps);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("autocast");
	TCase *tc = tcase_create("autocast");
	tcase_add_loop_test(tc, test_matmul_bf16, 0, 2);
	tcase_add_test(tc, test_node_precision);
	tcase_add_loop_test(tc, test_matmul_precision, 0, 2);
	tcase_add_test(tc, test_f64_untouched);
	tcase_add_test(tc, test_linear_attention_bf16);
	tcase_add_test(tc, test_params_copy_used);
	tcase_add_loop_test(tc, test_preset_step_bf16, 0, 3);
	tcase_add_test(tc, test_inference_bf16);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_oom);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
