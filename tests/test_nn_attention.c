/* nn_attention and nn_mha: forward against naive loops (masks, causal, rows
 * with every key masked), gradient checks, key padding, causality, batched vs
 * sequential heads (values and peak memory), dropout, errors; each on the CPU's
 * fused attention (tensor_attention) and on the composed path
 * (test_attention_fused checks the two against each other). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gradcheck.h"
#include "nn.h"
#include "testutil.h"

/* ---- naive references --------------------------------------------------------- */

/* q [B,H,T,d], k [B,H,S,d], v [B,H,S,dv] row-major; mask [B,S] (nonzero =
 * a real key, 0 = padding) or NULL -> out [B,H,T,dv]. A row with no visible key is zero. */
static void ref_attention(const double *q, const double *k, const double *v, const double *mask,
			  bool causal, double scale, int64_t B, int64_t H, int64_t T, int64_t S,
			  int64_t d, int64_t dv, double *out)
{
	double *p = malloc(sizeof(double) * (size_t)(S ? S : 1));
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t t = 0; t < T; t++) {
				const double *qr = q + ((b * H + h) * T + t) * d;
				double mx = -INFINITY;
				for (int64_t s = 0; s < S; s++) {
					bool hidden =
					    (mask && mask[b * S + s] == 0) || (causal && s > t);
					double acc = 0;
					for (int64_t c = 0; c < d; c++)
						acc += qr[c] * k[((b * H + h) * S + s) * d + c];
					p[s] = hidden ? -INFINITY : acc * scale;
					mx = fmax(mx, p[s]);
				}
				double sum = 0;
				for (int64_t s = 0; s < S; s++) {
					p[s] = mx == -INFINITY ? 0 : exp(p[s] - mx);
					sum += p[s];
				}
				double *o = out + ((b * H + h) * T + t) * dv;
				for (int64_t c = 0; c < dv; c++) {
					double acc = 0;
					for (int64_t s = 0; s < S; s++)
						acc += p[s] * v[((b * H + h) * S + s) * dv + c];
					o[c] = sum > 0 ? acc / sum : 0;
				}
			}
	free(p);
}

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
	ref_attention(p[0], p[1], p[2], mask, causal, 1 / sqrt((double)d), B, H, T, T, d, d, o);
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

static struct tensor *mask_i32(int64_t B, int64_t S, const int *vals)
{
	struct tensor *m = tensor_from_data(TENSOR_I32, TENSOR_CPU, 2, (int64_t[]){ B, S }, vals);
	ck_assert(m != NULL);
	return m;
}

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
			ref_attention(vq, vk, vv, vm, causal, scale, B, H, T, S, d, dv, want);
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
	struct tensor *m = mask_i32(2, 6, (const int[]){ 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0 });
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
	struct tensor *m = mask_i32(2, 5, (const int[]){ 0, 0, 1, 1, 1, 1, 1, 1, 0, 0 });
	check_attention(2, 2, 5, 5, 3, 3, m, true, 0.5);
}
END_TEST

START_TEST(test_attention_empty)
{
	/* no queries, or no keys (every row then sees nothing: zeros) */
	const int none[1] = { 0 };
	check_attention(2, 2, 0, 3, 4, 4, NULL, false, 0.5);
	check_attention(2, 2, 3, 0, 4, 5, NULL, false, 0.5);
	check_attention(2, 2, 3, 0, 4, 5, mask_i32(2, 0, none), false, 0.5);
	check_attention(2, 2, 0, 0, 4, 4, mask_i32(2, 0, none), true, 0.5);
	struct nn_params ps;
	struct nn_mha m;
	mha_make(&m, &ps, TENSOR_F32, 8, 2, 0.0, 1);
	for (int seq = 0; seq < 2; seq++) {
		m.sequential_heads = seq;
		struct tensor *x = tensor_zeros(TENSOR_F32, TENSOR_CPU, 3, (int64_t[]){ 2, 0, 8 });
		struct tensor *y = nn_mha_forward(&m, x, mask_i32(2, 0, none), true);
		ck_assert_msg(y != NULL, "%s", tensor_last_error());
		tu_assert_shape(y, 3, (int64_t[]){ 2, 0, 8 });
	}
	mha_drop(&m, &ps);
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
		struct tensor *m = mask_i32(1, 3, (const int[]){ 0, 0, 0 });
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
	struct tensor *m = mask_i32(1, 4, (const int[]){ 1, 0, 1, 0 });
	struct tensor *o = nn_attention(q, k, v, m, false, 1.0, NULL);
	double *vq = tu_values(q), *vk = tu_values(k), *vv = tu_values(v), want[6];
	ref_attention(vq, vk, vv, (const double[]){ 1, 0, 1, 0 }, false, 1.0, 1, 1, 3, 4, 2, 2,
		      want);
	tu_assert_close(o, want, 6, 1e-5, 1e-4);
	free(vq);
	free(vk);
	free(vv);
}
END_TEST

/* Peak bytes of one no-grad nn_attention(q, k, v) call (no mask, scale 0.5). */
static size_t attention_peak(struct tensor *q, struct tensor *k, struct tensor *v)
{
	ag_no_grad_begin();
	tensor_scope_begin();
	size_t base = tensor_mem_stats(TENSOR_CPU).live_bytes;
	tensor_mem_reset_peak(TENSOR_CPU);
	struct tensor *o = nn_attention(q, k, v, NULL, false, 0.5, NULL);
	size_t used = tensor_mem_stats(TENSOR_CPU).peak_bytes - base;
	ck_assert_msg(o != NULL, "%s", tensor_last_error());
	tensor_scope_end();
	ag_no_grad_end();
	return used;
}

START_TEST(test_attention_no_copy_of_k)
{
	/* Under no-grad, the whole call allocates q*scale, the scores (normalised
	 * into probabilities in place) and the output: k^T is a view, not a copy. */
	const int64_t B = 2, H = 2, T = 16, S = 32, d = 8;
	struct tensor *q = tu_rand(TENSOR_F32, 4, (int64_t[]){ B, H, T, d }, 1);
	struct tensor *k = tu_rand(TENSOR_F32, 4, (int64_t[]){ B, H, S, d }, 2);
	struct tensor *v = tu_rand(TENSOR_F32, 4, (int64_t[]){ B, H, S, d }, 3);
	size_t used = attention_peak(q, k, v);
	size_t want = sizeof(float) * (size_t)(B * H * (T * d + T * S + T * d));
	ck_assert_msg(used >= want && used < want + 4096, "used %zu, expected %zu", used, want);
}
END_TEST

/* ---- nn_attention gradients ---------------------------------------------------- */

struct att_ctx {
	const struct tensor *mask;
	bool causal;
	double scale;
};

static struct tensor *f_attention(struct tensor *const *in, void *ctx)
{
	const struct att_ctx *c = ctx;
	return nn_attention(in[0], in[1], in[2], c->mask, c->causal, c->scale, NULL);
}

START_TEST(test_attention_gradients)
{
	struct tensor *m = mask_i32(2, 4, (const int[]){ 1, 0, 1, 1, 0, 0, 0, 0 });
	struct tensor *mc = mask_i32(2, 4, (const int[]){ 0, 1, 1, 0, 1, 1, 1, 1 });
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
		struct att_ctx c = { cases[i].mask, cases[i].causal, 0.7 };
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
		tensor_free(q->grad);
		tensor_free(k->grad);
		tensor_free(v->grad);
	}
	/* past one block of queries (the fused kernel's 64 rows), causal with padding */
	int vals[70];
	for (int i = 0; i < 70; i++)
		vals[i] = i % 9 != 4;
	struct tensor *q = gc_input(4, (int64_t[]){ 1, 1, 70, 2 }, 4, -1.5, 1.5, false);
	struct tensor *k = gc_input(4, (int64_t[]){ 1, 1, 70, 2 }, 5, -1.5, 1.5, true);
	struct tensor *v = gc_input(4, (int64_t[]){ 1, 1, 70, 3 }, 6, -1, 1, false);
	struct att_ctx c = { mask_i32(1, 70, vals), true, 0.7 };
	tensor_cpu_attention_block(1); /* the fused kernel's blocks of 64 queries */
	gc_assert("two blocks, causal+key_mask", f_attention, &c, 3,
		  (struct tensor *[]){ q, k, v });
	tensor_cpu_attention_block(0);
}
END_TEST

/* ---- nn_mha --------------------------------------------------------------------- */

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
	struct tensor *m = mask_i32(B, T, (const int[]){ 1, 1, 1, 0, 0, 1, 1, 1, 1, 1 });
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
	struct tensor *mask = mask_i32(B, T, (const int[]){ 1, 1, 0, 0, 1, 1 });
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
			tensor_free(x->grad);
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
			struct tensor *y = nn_mha_forward(&m, x, mask_i32(B, T, mv), causal);
			ck_assert(y != NULL);
			for (int64_t b = 0; b < B; b++) {
				struct tensor *xb = tensor_contiguous(
				    tensor_narrow(tensor_narrow(x, 0, b, 1), 1, 0, len[b]));
				struct tensor *yb = nn_mha_forward(&m, xb, NULL, causal);
				struct tensor *real =
				    tensor_narrow(tensor_narrow(y, 0, b, 1), 1, 0, len[b]);
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
		struct tensor *y = nn_mha_forward(&m, x, NULL, true);
		struct tensor *y2 = nn_mha_forward(&m, x2, NULL, true);
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
	struct tensor *mask =
	    mask_i32(B, T, (const int[]){ 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0 });
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
	ag_no_grad_begin();
	tensor_scope_begin();
	size_t base = tensor_mem_stats(TENSOR_CPU).live_bytes;
	tensor_mem_reset_peak(TENSOR_CPU);
	struct tensor *y = nn_mha_forward(m, x, NULL, true);
	ck_assert_msg(y != NULL, "%s", tensor_last_error());
	size_t peak = tensor_mem_stats(TENSOR_CPU).peak_bytes - base;
	*keep = tensor_scope_keep(y);
	tensor_scope_end();
	ag_no_grad_end();
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
		struct tensor *mask = mask_i32(B, T, real);
		free(real);
		struct tensor *x = tu_rand(TENSOR_F32, 3, (int64_t[]){ B, T, dim }, 44);
		ag_no_grad_begin();
		struct tensor *y = nn_mha_forward(&m, x, mask, false);
		m.sequential_heads = true;
		tensor_scope_begin();
		size_t base = tensor_mem_stats(TENSOR_CPU).live_bytes;
		tensor_mem_reset_peak(TENSOR_CPU);
		struct tensor *ys = nn_mha_forward(&m, x, mask, false);
		size_t peak = tensor_mem_stats(TENSOR_CPU).peak_bytes - base;
		ys = tensor_scope_keep(ys);
		tensor_scope_end();
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
	struct tensor *m = mask_i32(B, S, (const int[]){ 1, 1, 0, 1, 1, 1, 1, 1 });
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
	tu_assert_error(!nn_attention(q, k, eye, m, false, 0.7, NULL), TENSOR_ERR_ARG,
			"observer", "3 rows");
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
	struct tensor *m = mask_i32(B, S, (const int[]){ 1, 0, 1, 1, 0, 0, 0, 0 });
	struct tensor *o = nn_attention(q, k, v, m, false, 0.5, NULL);
	struct tensor *merged = tensor_reshape(tensor_permute(o, (int[]){ 0, 2, 1, 3 }), 3,
					       (int64_t[]){ B, T, H * dv });
	double *want = tu_values(merged);
	struct tensor *y = nn_attention_by_head(q, k, v, m, false, 0.5, NULL);
	tu_assert_shape(y, 3, (int64_t[]){ B, T, H * dv });
	tu_assert_close(y, want, B * T * H * dv, 1e-12, 1e-12);
	ag_no_grad_begin();
	tensor_scope_begin();
	size_t base = tensor_mem_stats(TENSOR_CPU).live_bytes;
	tensor_mem_reset_peak(TENSOR_CPU);
	struct tensor *yn = nn_attention_by_head(q, k, v, m, false, 0.5, NULL);
	size_t peak = tensor_mem_stats(TENSOR_CPU).peak_bytes - base;
	tu_assert_close(yn, want, B * T * H * dv, 1e-12, 1e-12);
	/* the result, and one head's q*scale, probabilities, output and masks */
	size_t result = sizeof(double) * (size_t)(B * T * H * dv);
	size_t head = sizeof(double) * (size_t)(B * (T * d + T * S + T * dv + 2 * S + T));
	ck_assert_msg(peak <= result + head + 4096, "peak %zu, result %zu, one head %zu", peak,
		      result, head);
	tensor_scope_end();
	ag_no_grad_end();
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
	struct tensor *m = mask_i32(2, 4, (const int[]){ 1, 1, 1, 1, 1, 1, 1, 1 });
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
	struct tensor *bad = mask_i32(2, 3, (const int[]){ 1, 1, 1, 1, 1, 1 });
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

static void unfuse(void)
{
	tensor_cpu_set_fused(false);
}

static void refuse(void)
{
	tensor_cpu_set_fused(true);
}

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
	tcase_add_test(tc, test_attention_errors);
	tcase_add_test(tc, test_attention_by_head);
	tcase_add_test(tc, test_attention_observer);
	tcase_add_test(tc, test_split_heads);
	suite_add_tcase(s, tc);
	/* the composed path (the one of devices without the fused kernel) on the CPU */
	tc = tu_tcase("attention (composed)");
	tcase_add_checked_fixture(tc, unfuse, refuse);
	tcase_add_test(tc, test_attention_plain);
	tcase_add_test(tc, test_attention_key_mask);
	tcase_add_test(tc, test_attention_causal);
	tcase_add_test(tc, test_attention_empty);
	tcase_add_test(tc, test_attention_all_masked_rows_zero);
	tcase_add_test(tc, test_attention_large_scores_f32);
	tcase_add_test(tc, test_attention_no_copy_of_k);
	tcase_add_test(tc, test_attention_gradients);
	tcase_add_test(tc, test_mha_forward_reference);
	tcase_add_test(tc, test_mha_gradients);
	tcase_add_test(tc, test_mha_key_padding);
	tcase_add_test(tc, test_mha_causal);
	tcase_add_test(tc, test_mha_sequential_equals_batched);
	tcase_add_test(tc, test_mha_sequential_lower_peak);
	tcase_add_test(tc, test_mha_sequential_blocks);
	suite_add_tcase(s, tc);
	tc = tu_tcase("mha");
	tcase_add_test(tc, test_mha_params);
	tcase_add_test(tc, test_mha_forward_reference);
	tcase_add_test(tc, test_mha_gradients);
	tcase_add_test(tc, test_mha_key_padding);
	tcase_add_test(tc, test_mha_causal);
	tcase_add_test(tc, test_mha_sequential_equals_batched);
	tcase_add_test(tc, test_mha_sequential_blocks);
	tcase_add_test(tc, test_mha_dropout);
	tcase_add_test(tc, test_mha_errors);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
