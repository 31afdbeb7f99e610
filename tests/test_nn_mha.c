/* nn_mha: its parameters, empty input, the forward against naive loops, gradient checks, key padding,
 * causality, batched against sequential heads (values, peak memory, row blocks), dropout,
 * errors; on the CPU's fused attention and on the composed path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_ref.h"
#include "backend.h"
#include "gradcheck.h"
#include "nn.h"
#include "testutil.h"

/* y [N,out] = x [N,in] W^T + b. */
static void ref_linear(const double *x, const double *w, const double *b, int64_t n, int64_t in,
		       int64_t out, double *y)
{
	for (int64_t i = 0; i < n; i++)
		for (int64_t o = 0; o < out; o++) {
			double acc = b[o];
			for (int64_t c = 0; c < in; c++)
				acc += x[i * in + c] * w[o * in + c];
			y[i * out + o] = acc;
		}
}

/* Multi-head self-attention of x [B,T,dim] with m's parameters, by loops. */
static double *ref_mha(const struct nn_mha *m, const double *x, const double *mask, bool causal,
		       int64_t B, int64_t T)
{
	int64_t dim = m->dim, H = m->heads, d = dim / H, n = B * T;
	const struct nn_linear *lin[4] = { &m->q_proj, &m->k_proj, &m->v_proj, &m->out_proj };
	double *w[4], *bias[4], *p[3];
	for (int i = 0; i < 4; i++) {
		w[i] = tu_values(lin[i]->weight);
		bias[i] = tu_values(lin[i]->bias);
	}
	for (int i = 0; i < 3; i++) { /* projected, then rearranged to [B,H,T,d] */
		double *y = malloc(sizeof(double) * (size_t)(n * dim));
		ref_linear(x, w[i], bias[i], n, dim, dim, y);
		p[i] = malloc(sizeof(double) * (size_t)(n * dim));
		for (int64_t b = 0; b < B; b++)
			for (int64_t t = 0; t < T; t++)
				for (int64_t h = 0; h < H; h++)
					for (int64_t c = 0; c < d; c++)
						p[i][((b * H + h) * T + t) * d + c] =
						    y[(b * T + t) * dim + h * d + c];
		free(y);
	}
	double *o = malloc(sizeof(double) * (size_t)(n * dim));
	double *cat = malloc(sizeof(double) * (size_t)(n * dim));
	double *out = malloc(sizeof(double) * (size_t)(n * dim));
	tu_ref_attention(p[0], p[1], p[2], mask, causal, 1 / sqrt((double)d), B, H, T, T, d, d, o);
	for (int64_t b = 0; b < B; b++)
		for (int64_t t = 0; t < T; t++)
			for (int64_t h = 0; h < H; h++)
				for (int64_t c = 0; c < d; c++)
					cat[(b * T + t) * dim + h * d + c] =
					    o[((b * H + h) * T + t) * d + c];
	ref_linear(cat, w[3], bias[3], n, dim, dim, out);
	for (int i = 0; i < 4; i++) {
		free(w[i]);
		free(bias[i]);
	}
	for (int i = 0; i < 3; i++)
		free(p[i]);
	free(o);
	free(cat);
	return out;
}

/* ---- helpers ------------------------------------------------------------------ */

/* A multi-head attention module in its own parameter list. */
static void mha_make(struct nn_mha *m, struct nn_params *ps, enum tensor_dtype dt, int64_t dim,
		     int64_t heads, double p, uint64_t seed)
{
	ck_assert_int_eq(nn_params_init(ps, dt, TENSOR_CPU, seed), TENSOR_OK);
	ck_assert_int_eq(nn_mha_init(m, ps, "attn", dim, heads, p), TENSOR_OK);
}

/* Forget the tape (its nodes point at the parameters), then free. */
static void mha_drop(struct nn_mha *m, struct nn_params *ps)
{
	ag_tape_reset();
	nn_mha_free(m);
	nn_params_free(ps);
}

/* ---- nn_mha --------------------------------------------------------------------- */

/* No queries: an empty output, batched heads and sequential. */
START_TEST(test_mha_empty)
{
	const int none[1] = { 0 };
	struct nn_params ps;
	struct nn_mha m;
	mha_make(&m, &ps, TENSOR_F32, 8, 2, 0.0, 1);
	for (int seq = 0; seq < 2; seq++) {
		m.sequential_heads = seq;
		struct tensor *x = tensor_zeros(TENSOR_F32, TENSOR_CPU, 3, (int64_t[]){ 2, 0, 8 });
		struct tensor *y = nn_mha_forward(&m, x, tu_mask_i32(2, 0, none), true);
		ck_assert_msg(y != NULL, "%s", tensor_last_error());
		tu_assert_shape(y, 3, (int64_t[]){ 2, 0, 8 });
	}
	mha_drop(&m, &ps);
}
END_TEST

START_TEST(test_mha_params)
{
	struct nn_params ps;
	struct nn_mha m;
	mha_make(&m, &ps, TENSOR_F32, 12, 3, 0.1, 7);
	ck_assert_int_eq(ps.n, 8);
	ck_assert_int_eq(nn_params_count(&ps), 4 * (12 * 12 + 12));
	const char *proj[4] = { "q_proj", "k_proj", "v_proj", "out_proj" };
	for (int i = 0; i < 8; i++) {
		char name[NN_NAME_MAX];
		snprintf(name, sizeof name, "attn.%s.%s", proj[i / 2], i % 2 ? "bias" : "weight");
		struct nn_param *p = nn_params_find(&ps, name);
		ck_assert_msg(p != NULL, "missing %s", name);
		ck_assert_str_eq(ps.items[i].name, name); /* registration order */
		if (i % 2 == 0)
			tu_assert_shape(p->value, 2, (const int64_t[]){ 12, 12 });
		else
			tu_assert_shape(p->value, 1, (const int64_t[]){ 12 });
	}
	ck_assert(m.q_proj.weight == nn_params_find(&ps, "attn.q_proj.weight")->value);
	ck_assert(m.out_proj.bias == nn_params_find(&ps, "attn.out_proj.bias")->value);
	ck_assert(m.dim == 12 && m.heads == 3 && !m.sequential_heads);
	ck_assert(m.dropout.p == 0.1);
	nn_mha_free(&m);
	ck_assert(m.q_proj.weight == NULL && m.dim == 0);
	nn_params_free(&ps);
}
END_TEST

START_TEST(test_mha_forward_reference)
{
	const int64_t B = 2, T = 5, dim = 6, H = 3;
	struct tensor *m = tu_mask_i32(B, T, (const int[]){ 1, 1, 1, 0, 0, 1, 1, 1, 1, 1 });
	for (int di = 0; di < 2; di++)
		for (int seq = 0; seq < 2; seq++)
			for (int cfg = 0; cfg < 4; cfg++) {
				enum tensor_dtype dt = di ? TENSOR_F64 : TENSOR_F32;
				const struct tensor *mask = cfg & 1 ? m : NULL;
				bool causal = cfg & 2;
				struct nn_params ps;
				struct nn_mha a;
				mha_make(&a, &ps, dt, dim, H, 0.0, 3);
				a.sequential_heads = seq;
				struct tensor *x = tu_rand(dt, 3, (int64_t[]){ B, T, dim }, 9);
				double *vx = tu_values(x), *vm = mask ? tu_values(mask) : NULL;
				if (cfg == 3)
					x = tu_strided(x);
				struct tensor *y = nn_mha_forward(&a, x, mask, causal);
				ck_assert_msg(y != NULL, "%s", tensor_last_error());
				tu_assert_shape(y, 3, (int64_t[]){ B, T, dim });
				double *want = ref_mha(&a, vx, vm, causal, B, T);
				tu_assert_close(y, want, B * T * dim, tu_tol(dt), tu_tol(dt));
				free(want);
				free(vx);
				free(vm);
				mha_drop(&a, &ps);
			}
}
END_TEST

struct mha_ctx {
	const struct nn_mha *m;
	const struct tensor *mask;
	bool causal;
};

static struct tensor *f_mha(struct tensor *const *in, void *ctx)
{
	const struct mha_ctx *c = ctx;
	return nn_mha_forward(c->m, in[0], c->mask, c->causal);
}

START_TEST(test_mha_gradients)
{
	const int64_t B = 2, T = 3, dim = 4;
	struct tensor *mask = tu_mask_i32(B, T, (const int[]){ 1, 1, 0, 0, 1, 1 });
	for (int seq = 0; seq < 2; seq++)
		for (int cfg = 0; cfg < 2; cfg++) {
			struct nn_params ps;
			struct nn_mha m;
			mha_make(&m, &ps, TENSOR_F64, dim, 2, 0.0, 5 + seq);
			m.sequential_heads = seq;
			struct tensor *x = gc_input(3, (int64_t[]){ B, T, dim }, 4, -1, 1, cfg);
			struct tensor *in[9] = { x };
			for (int i = 0; i < 8; i++)
				in[1 + i] = ps.items[i].value;
			struct mha_ctx c = { &m, cfg ? mask : NULL, cfg == 1 };
			gc_assert(seq ? "mha sequential" : "mha batched", f_mha, &c, 9, in);
			for (int i = 0; i < 8; i++) /* every parameter received a gradient */
				ck_assert(ps.items[i].value->grad != NULL);
			mha_drop(&m, &ps);
		}
}
END_TEST

START_TEST(test_mha_key_padding)
{
	/* A padded batch gives, at real positions, what each sequence gives alone. */
	const int64_t B = 3, T = 6, dim = 8;
	const int64_t len[3] = { 6, 4, 1 };
	for (int seq = 0; seq < 2; seq++)
		for (int causal = 0; causal < 2; causal++) {
			struct nn_params ps;
			struct nn_mha m;
			mha_make(&m, &ps, TENSOR_F64, dim, 2, 0.0, 11);
			m.sequential_heads = seq;
			struct tensor *x = tu_rand(TENSOR_F64, 3, (int64_t[]){ B, T, dim }, 12);
			int mv[3 * 6];
			for (int64_t b = 0; b < B; b++)
				for (int64_t t = 0; t < T; t++)
					mv[b * T + t] = t < len[b];
			struct tensor *y = nn_mha_forward(&m, x, tu_mask_i32(B, T, mv), causal);
			ck_assert(y != NULL);
			for (int64_t b = 0; b < B; b++) {
				struct tensor *xb = tensor_contiguous(
				    tensor_narrow(tensor_narrow(x, 0, b, 1), 1, 0, len[b]));
				struct tensor *yb = nn_mha_forward(&m, xb, NULL, causal);
				struct tensor *real = tensor_narrow(
				    tensor_narrow(ag_detach(y), 0, b, 1), 1, 0, len[b]);
				tu_assert_same(real, yb, 1e-12);
			}
			mha_drop(&m, &ps);
		}
}
END_TEST

START_TEST(test_mha_causal)
{
	/* Changing x at position p changes no output before p, and does change
	 * outputs at p and after. */
	const int64_t B = 2, T = 7, dim = 6, P = 4;
	for (int seq = 0; seq < 2; seq++) {
		struct nn_params ps;
		struct nn_mha m;
		mha_make(&m, &ps, TENSOR_F64, dim, 3, 0.0, 21);
		m.sequential_heads = seq;
		struct tensor *x = tu_rand(TENSOR_F64, 3, (int64_t[]){ B, T, dim }, 22);
		struct tensor *x2 = tensor_clone(x);
		struct tensor *tail = tensor_narrow(x2, 1, P, T - P);
		ck_assert_int_eq(
		    tensor_copy_(tail, tu_rand(TENSOR_F64, 3, (int64_t[]){ B, T - P, dim }, 23)),
		    TENSOR_OK);
		/* the outputs' values (views of them are made off the graph) */
		struct tensor *y = ag_detach(nn_mha_forward(&m, x, NULL, true));
		struct tensor *y2 = ag_detach(nn_mha_forward(&m, x2, NULL, true));
		tu_assert_same(tensor_narrow(y2, 1, 0, P), tensor_narrow(y, 1, 0, P), 1e-14);
		double *a = tu_values(tensor_narrow(y, 1, P, T - P)),
		       *b = tu_values(tensor_narrow(y2, 1, P, T - P));
		for (int64_t i = 0; i < B * (T - P) * dim; i++)
			ck_assert(fabs(a[i] - b[i]) > 1e-9);
		free(a);
		free(b);
		/* without the causal mask, the early outputs do depend on the tail */
		struct tensor *z = nn_mha_forward(&m, x, NULL, false);
		struct tensor *z2 = nn_mha_forward(&m, x2, NULL, false);
		double *c = tu_values(z), *e = tu_values(z2);
		ck_assert(fabs(c[0] - e[0]) > 1e-9);
		free(c);
		free(e);
		mha_drop(&m, &ps);
	}
}
END_TEST

START_TEST(test_mha_sequential_equals_batched)
{
	const int64_t B = 2, T = 9, dim = 16;
	struct tensor *mask = tu_mask_i32(
	    B, T, (const int[]){ 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0 });
	for (int di = 0; di < 2; di++)
		for (int cfg = 0; cfg < 3; cfg++) {
			enum tensor_dtype dt = di ? TENSOR_F64 : TENSOR_F32;
			struct nn_params ps;
			struct nn_mha m;
			mha_make(&m, &ps, dt, dim, 4, 0.0, 31);
			struct tensor *x = tu_rand(dt, 3, (int64_t[]){ B, T, dim }, 32);
			const struct tensor *km = cfg ? mask : NULL;
			bool causal = cfg == 2;
			struct tensor *y = nn_mha_forward(&m, x, km, causal);
			m.sequential_heads = true;
			struct tensor *ys = nn_mha_forward(&m, x, km, causal);
			ag_no_grad_begin(); /* the scoped no-grad path too */
			struct tensor *yn = nn_mha_forward(&m, x, km, causal);
			ag_no_grad_end();
			tu_assert_same(ys, y, di ? 1e-12 : 1e-6);
			tu_assert_same(yn, y, di ? 1e-12 : 1e-6);
			mha_drop(&m, &ps);
		}
}
END_TEST

/* Peak bytes of one no-grad forward, in a scope of its own. */
static size_t forward_peak(const struct nn_mha *m, struct tensor *x, struct tensor **keep)
{
	size_t base = tu_peak_begin();
	struct tensor *y = nn_mha_forward(m, x, NULL, true);
	ck_assert_msg(y != NULL, "%s", tensor_last_error());
	size_t peak = tu_peak_bytes(base);
	*keep = tensor_scope_keep(y);
	tu_peak_end();
	return peak;
}

START_TEST(test_mha_sequential_lower_peak)
{
	const int64_t B = 1, T = 256, dim = 64, H = 8;
	struct nn_params ps;
	struct nn_mha m;
	mha_make(&m, &ps, TENSOR_F32, dim, H, 0.0, 41);
	struct tensor *x = tu_rand(TENSOR_F32, 3, (int64_t[]){ B, T, dim }, 42);
	struct tensor *y, *ys;
	size_t batched = forward_peak(&m, x, &y);
	m.sequential_heads = true;
	size_t seq = forward_peak(&m, x, &ys);
	size_t scores = sizeof(float) * (size_t)(B * H * T * T);
	/* batched holds one [B,H,T,T] tensor (scaled, masked and normalised in
	 * place: not a second one); sequential at most a few [B,1,T,T] ones plus
	 * [B,T,dim] activations */
	ck_assert_msg(batched >= scores && batched < 2 * scores, "batched peak %zu, scores %zu",
		      batched, scores);
	ck_assert_msg(seq < batched / 3 && seq < scores, "sequential peak %zu vs batched %zu", seq,
		      batched);
	tu_assert_same(ys, y, 1e-6);
	mha_drop(&m, &ps);
}
END_TEST

/* Past NN_BY_HEAD_SCORES scores a head (B x T x S) without a causal mask,
 * the no-grad sequential path takes its queries in blocks of sequences and
 * rows: the same values, with a peak of one block's scores (at most
 * NN_BY_HEAD_SCORES floats) instead of one head's. Two sequences of 3,000
 * (blocks of one sequence) and one of 6,000 (blocks of 2,796 rows). */
START_TEST(test_mha_sequential_blocks)
{
	const int64_t dim = 8, H = 2;
	const int64_t shapes[2][2] = { { 2, 3000 }, { 1, 6000 } };
	for (int si = 0; si < 2; si++) {
		int64_t B = shapes[si][0], T = shapes[si][1];
		struct nn_params ps;
		struct nn_mha m;
		mha_make(&m, &ps, TENSOR_F32, dim, H, 0.0, 43);
		int *real = malloc(sizeof *real * (size_t)(B * T));
		/* padding: the last keys of the last sequence */
		for (int64_t j = 0; j < B * T; j++)
			real[j] = j < B * T - 100;
		struct tensor *mask = tu_mask_i32(B, T, real);
		free(real);
		struct tensor *x = tu_rand(TENSOR_F32, 3, (int64_t[]){ B, T, dim }, 44);
		ag_no_grad_begin();
		struct tensor *y = nn_mha_forward(&m, x, mask, false);
		m.sequential_heads = true;
		size_t base = tu_peak_begin();
		struct tensor *ys = nn_mha_forward(&m, x, mask, false);
		size_t peak = tu_peak_bytes(base);
		ys = tensor_scope_keep(ys);
		tu_peak_end();
		ag_no_grad_end();
		size_t head = sizeof(float) * (size_t)(B * T * T);
		size_t block = sizeof(float) * (size_t)NN_BY_HEAD_SCORES + ((size_t)1 << 20);
		ck_assert_msg(block < head && peak < block,
			      "B %lld, T %lld: peak %zu, one block %zu, one head's scores %zu",
			      (long long)B, (long long)T, peak, block, head);
		tu_assert_same(ys, y, 1e-6);
		mha_drop(&m, &ps);
	}
}
END_TEST

START_TEST(test_mha_dropout)
{
	const int64_t B = 2, T = 6, dim = 8;
	struct nn_params ps, ps0;
	struct nn_mha m, m0;
	mha_make(&m, &ps, TENSOR_F64, dim, 2, 0.5, 51);
	mha_make(&m0, &ps0, TENSOR_F64, dim, 2, 0.0, 51); /* same parameters, no dropout */
	struct tensor *x = tu_rand(TENSOR_F64, 3, (int64_t[]){ B, T, dim }, 52);
	struct tensor *y0 = nn_mha_forward(&m0, x, NULL, false);
	/* training: dropout on the probabilities changes the output */
	struct tensor *yt = nn_mha_forward(&m, x, NULL, false);
	double *a = tu_values(yt), *b = tu_values(y0);
	double diff = 0;
	for (int64_t i = 0; i < B * T * dim; i++)
		diff = fmax(diff, fabs(a[i] - b[i]));
	ck_assert(diff > 1e-3);
	free(a);
	free(b);
	/* eval: off, identical to the module without dropout, batched and sequential */
	nn_params_train(&ps, false);
	for (int seq = 0; seq < 2; seq++) {
		m.sequential_heads = seq;
		tu_assert_same(nn_mha_forward(&m, x, NULL, false), y0, 1e-14);
	}
	mha_drop(&m, &ps);
	mha_drop(&m0, &ps0);
}
END_TEST

START_TEST(test_mha_errors)
{
	struct nn_params ps;
	struct nn_mha m;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	tu_assert_error(nn_mha_init(&m, &ps, "a", 10, 3, 0) < 0, TENSOR_ERR_ARG, "nn_mha_init",
			"heads 3 must divide dim 10");
	tu_assert_error(nn_mha_init(&m, &ps, "a", 8, 0, 0) < 0, TENSOR_ERR_ARG, "nn_mha_init",
			"heads 0");
	tu_assert_error(nn_mha_init(&m, &ps, "a", 0, 1, 0) < 0, TENSOR_ERR_ARG, "nn_mha_init",
			"dim 0");
	tu_assert_error(nn_mha_init(&m, &ps, "a", 8, 2, 1.0) < 0, TENSOR_ERR_ARG, "nn_mha_init",
			"attn_dropout 1");
	tu_assert_error(nn_mha_init(&m, &ps, "a", 8, 2, -0.1) < 0, TENSOR_ERR_ARG, "nn_mha_init",
			"attn_dropout");
	tu_assert_error(nn_mha_init(&m, NULL, "a", 8, 2, 0) < 0, TENSOR_ERR_ARG, "nn_mha_init",
			NULL);
	tu_assert_error(nn_mha_init(NULL, &ps, "a", 8, 2, 0) < 0, TENSOR_ERR_ARG, "nn_mha_init",
			NULL);
	char longname[NN_NAME_MAX];
	memset(longname, 'x', sizeof longname - 10);
	longname[sizeof longname - 10] = 0;
	tu_assert_error(nn_mha_init(&m, &ps, longname, 8, 2, 0) < 0, TENSOR_ERR_ARG, "nn_mha_init",
			"too long");
	ck_assert_int_eq(ps.n, 0); /* argument errors register nothing */
	ck_assert_int_eq(nn_mha_init(&m, &ps, "a", 8, 2, 0), TENSOR_OK);
	struct nn_mha dup;
	tu_assert_error(nn_mha_init(&dup, &ps, "a", 8, 2, 0) < 0, TENSOR_ERR_ARG, "a.q_proj.weight",
			"already exists");
	ck_assert(dup.q_proj.weight == NULL && dup.dim == 0);

	struct tensor *x2 = tu_rand(TENSOR_F32, 2, (int64_t[]){ 4, 8 }, 1);
	tu_assert_error(!nn_mha_forward(&m, x2, NULL, false), TENSOR_ERR_SHAPE, "nn_mha_forward",
			"x [4,8] must be [B,T,8]");
	struct tensor *x7 = tu_rand(TENSOR_F32, 3, (int64_t[]){ 2, 4, 7 }, 2);
	tu_assert_error(!nn_mha_forward(&m, x7, NULL, false), TENSOR_ERR_SHAPE, "nn_mha_forward",
			"x [2,4,7]");
	struct tensor *x = tu_rand(TENSOR_F32, 3, (int64_t[]){ 2, 4, 8 }, 3);
	struct tensor *bad = tu_mask_i32(2, 3, (const int[]){ 1, 1, 1, 1, 1, 1 });
	tu_assert_error(!nn_mha_forward(&m, x, bad, false), TENSOR_ERR_SHAPE, "nn_mha_forward",
			"mask [2,3] must be [B,T] = [2,4]");
	struct tensor *x64 = tu_rand(TENSOR_F64, 3, (int64_t[]){ 2, 4, 8 }, 4);
	tu_assert_error(!nn_mha_forward(&m, x64, NULL, false), TENSOR_ERR_DTYPE, NULL, NULL);
	struct nn_mha zero = { 0 };
	tu_assert_error(!nn_mha_forward(&zero, x, NULL, false), TENSOR_ERR_ARG, "nn_mha_forward",
			"not initialised");
	tu_assert_error(!nn_mha_forward(NULL, x, NULL, false), TENSOR_ERR_ARG, "nn_mha_forward",
			NULL);
	tensor_error(TENSOR_ERR_IO, "earlier failure");
	ck_assert(nn_mha_forward(&m, NULL, NULL, false) == NULL);
	tu_assert_error(true, TENSOR_ERR_IO, "earlier failure", NULL);
	for (int seq = 0; seq < 2; seq++) { /* still works after all that */
		m.sequential_heads = seq;
		ck_assert(nn_mha_forward(&m, x, NULL, true) != NULL);
	}
	ag_tape_reset();
	nn_mha_free(&m);
	nn_mha_free(NULL);
	nn_params_free(&ps);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("nn_mha");
	TCase *tc = tu_tcase("mha");
	tcase_add_test(tc, test_mha_params);
	tcase_add_test(tc, test_mha_empty);
	tcase_add_test(tc, test_mha_forward_reference);
	tcase_add_test(tc, test_mha_gradients);
	tcase_add_test(tc, test_mha_key_padding);
	tcase_add_test(tc, test_mha_causal);
	tcase_add_test(tc, test_mha_sequential_equals_batched);
	tcase_add_test(tc, test_mha_sequential_blocks);
	tcase_add_test(tc, test_mha_dropout);
	tcase_add_test(tc, test_mha_errors);
	suite_add_tcase(s, tc);
	/* the composed path (the one of devices without the fused kernel) on the CPU */
	tc = tu_tcase("mha (composed)");
	tcase_add_checked_fixture(tc, tu_unfuse, tu_refuse);
	tcase_add_test(tc, test_mha_empty);
	tcase_add_test(tc, test_mha_forward_reference);
	tcase_add_test(tc, test_mha_gradients);
	tcase_add_test(tc, test_mha_key_padding);
	tcase_add_test(tc, test_mha_causal);
	tcase_add_test(tc, test_mha_sequential_equals_batched);
	tcase_add_test(tc, test_mha_sequential_lower_peak);
	tcase_add_test(tc, test_mha_sequential_blocks);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
