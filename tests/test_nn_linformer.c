/* Linformer attention: the module against a loop reference for every kind x
 * sharing mode, the three equivalences (identity E = F with k = n is standard
 * attention, pooling with kernel 1 is standard attention, a padded batch equals
 * its sequences run alone), gradient checks, batched vs sequential heads,
 * dropout, memory at long n, errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_ref.h"
#include "gradcheck.h"
#include "linformer_common.h"

static bool windowed(enum nn_attn_kind k)
{
	return k == NN_ATTN_CONV || k == NN_ATTN_MEAN || k == NN_ATTN_MAX;
}

/* ---- naive references ------------------------------------------------------------ */

/* y [N,out] = x [N,in] W^T + b. */
static double *ref_linear(const struct nn_linear *m, const double *x, int64_t n)
{
	double *w = tu_values(m->weight), *b = tu_values(m->bias);
	double *y = malloc(sizeof(double) * (size_t)(n * m->out + 1));
	for (int64_t i = 0; i < n; i++)
		for (int64_t o = 0; o < m->out; o++) {
			double acc = b[o];
			for (int64_t c = 0; c < m->in; c++)
				acc += x[i * m->in + c] * w[o * m->in + c];
			y[i * m->out + o] = acc;
		}
	free(w);
	free(b);
	return y;
}

/* Projected keys or values [B,H,k,d] from rows [B,T,kvdim] (padding zeroed). */
static double *ref_project(const struct nn_linformer *m, const struct nn_seq_proj *p,
			   const double *rows, int64_t B, int64_t T)
{
	int64_t H = m->heads, d = m->dim / H, hk = m->shared_kv_head ? 1 : H, K = m->k;
	double *out = malloc(sizeof(double) * (size_t)(B * H * K * d + 1));
	double *tmp = malloc(sizeof(double) * (size_t)(B * H * K * hk * d + 1));
	if (p->dense) { /* over all channels: [B,1,T,hk d] -> [B,1,k,hk d] */
		ref_seq_proj(p, rows, B, 1, T, hk * d, tmp);
		for (int64_t b = 0; b < B; b++)
			for (int64_t h = 0; h < H; h++)
				for (int64_t j = 0; j < K; j++)
					for (int64_t c = 0; c < d; c++)
						out[((b * H + h) * K + j) * d + c] =
						    tmp[(b * K + j) * hk * d +
							(hk == 1 ? 0 : h) * d + c];
	} else {
		double *x4 = malloc(sizeof(double) * (size_t)(B * hk * T * d + 1));
		for (int64_t b = 0; b < B; b++)
			for (int64_t h = 0; h < hk; h++)
				for (int64_t t = 0; t < T; t++)
					for (int64_t c = 0; c < d; c++)
						x4[((b * hk + h) * T + t) * d + c] =
						    rows[(b * T + t) * hk * d + h * d + c];
		ref_seq_proj(p, x4, B, hk, T, d, tmp);
		int64_t ho = p->per_head ? p->heads : hk;
		for (int64_t b = 0; b < B; b++)
			for (int64_t h = 0; h < H; h++)
				for (int64_t j = 0; j < K; j++)
					for (int64_t c = 0; c < d; c++)
						out[((b * H + h) * K + j) * d + c] =
						    tmp[((b * ho + (ho == 1 ? 0 : h)) * K + j) * d +
							c];
		free(x4);
	}
	free(tmp);
	return out;
}

/* The whole module by loops: x [B,T,dim], mask [B,T] (nonzero = a real token)
 * or NULL -> [B,T,dim]. */
static double *ref_linformer(const struct nn_linformer *m, const double *x, const double *mask,
			     int64_t B, int64_t T)
{
	int64_t dim = m->dim, H = m->heads, d = dim / H, K = m->k, n = m->n, kern = n / K;
	int64_t kvd = m->shared_kv_head ? d : dim;
	double *q = ref_linear(&m->q_proj, x, B * T);
	double *kl = ref_linear(&m->k_proj, x, B * T), *vl = ref_linear(&m->v_proj, x, B * T);
	for (int64_t i = 0; i < B * T; i++)
		if (mask && mask[i] == 0)
			for (int64_t c = 0; c < kvd; c++)
				kl[i * kvd + c] = vl[i * kvd + c] = 0;
	double *kp = ref_project(m, m->e_used, kl, B, T);
	double *vp = ref_project(m, m->f_used, vl, B, T);
	double *q4 = malloc(sizeof(double) * (size_t)(B * T * dim + 1));
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t t = 0; t < T; t++)
				for (int64_t c = 0; c < d; c++)
					q4[((b * H + h) * T + t) * d + c] =
					    q[(b * T + t) * dim + h * d + c];
	double *sm = NULL;
	if (windowed(m->e_used->kind) || m->mask_empty_slots) {
		sm = malloc(sizeof(double) * (size_t)(B * K));
		for (int64_t b = 0; b < B; b++)
			for (int64_t j = 0; j < K; j++) {
				bool all = true;
				for (int64_t r = 0; r < kern; r++) {
					int64_t pos = j * kern + r;
					all = all && (pos >= T || (mask && mask[b * T + pos] == 0));
				}
				/* a slot of hidden positions only is hidden */
				sm[b * K + j] = !all;
			}
	}
	double *o = malloc(sizeof(double) * (size_t)(B * T * dim + 1));
	tu_ref_attention(q4, kp, vp, sm, false, 1 / sqrt((double)d), B, H, T, K, d, d, o);
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t t = 0; t < T; t++)
				for (int64_t c = 0; c < d; c++)
					q[(b * T + t) * dim + h * d + c] =
					    o[((b * H + h) * T + t) * d + c];
	double *y = ref_linear(&m->out_proj, q, B * T);
	free(q);
	free(kl);
	free(vl);
	free(kp);
	free(vp);
	free(q4);
	free(sm);
	free(o);
	return y;
}

/* ---- helpers --------------------------------------------------------------------- */

static struct tensor *mask_i32(int64_t B, int64_t S, const int *vals)
{
	struct tensor *m = tensor_from_data(TENSOR_I32, TENSOR_CPU, 2, (int64_t[]){ B, S }, vals);
	ck_assert(m != NULL);
	return m;
}

/* ---- the module against the loop reference --------------------------------------- */

/* Every kind x sharing mode x shared_kv_head (x dense for conv), with and
 * without a key mask and with T < n, f32 and f64. */
START_TEST(test_linformer_reference)
{
	const int64_t B = 2, dim = 8, H = 2, n = 8, k = 4;
	const int mv[2 * 6] = { 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 0 };
	for (int di = 0; di < 2; di++)
		for (int ki = 0; ki < NKINDS; ki++)
			for (int si = 0; si < 4; si++)
				for (int v = 0; v < 4; v++) {
					enum tensor_dtype dt = di ? TENSOR_F64 : TENSOR_F32;
					struct cfg c = {
						dim,	      H,     n,	    k,	 kinds[ki],
						sharings[si], v & 2, v & 1, 0.0, 100 + (uint64_t)v
					};
					if (c.dense && c.kind != NN_ATTN_CONV)
						continue;
					char name[128];
					cfg_str(&c, name, sizeof name);
					struct lf f;
					lf_make(&f, dt, c);
					/* learned and random also with their empty
					 * slots masked */
					for (int es = 0; es < (windowed(c.kind) ? 1 : 2); es++)
						for (int mi = di ? 0 : 1; mi < 3; mi++) {
							f.m.mask_empty_slots = es;
							/* no mask T = n (f64 only); mask T = 6; no
						 * mask T = 5, x strided */
							int64_t T = mi == 0 ? n : mi == 1 ? 6 : 5;
							struct tensor *mask =
							    mi == 1 ? mask_i32(B, T, mv) : NULL;
							struct tensor *x =
							    tu_rand(dt, 3, (int64_t[]){ B, T, dim },
								    9 + mi);
							double *vx = tu_values(x);
							double *vm = mask ? tu_values(mask) : NULL;
							if (mi == 2)
								x = tu_strided(x);
							struct tensor *y =
							    nn_linformer_forward(&f.m, x, mask);
							ck_assert_msg(y != NULL, "%s: %s", name,
								      tensor_last_error());
							tu_assert_shape(y, 3,
									(int64_t[]){ B, T, dim });
							double *want =
							    ref_linformer(&f.m, vx, vm, B, T);
							double *got = tu_values(y);
							for (int64_t i = 0; i < B * T * dim; i++)
								ck_assert_msg(
								    fabs(got[i] - want[i]) <=
									tu_tol(dt) *
									    (1 + fabs(want[i])),
								    "%s mask %d empty slots %d "
								    "[%lld]: %g vs %g",
								    name, mi, es, (long long)i,
								    got[i], want[i]);
							free(got);
							free(want);
							free(vx);
							free(vm);
						}
					lf_drop(&f);
				}
}
END_TEST

/* ---- equivalences ---------------------------------------------------------------- */

/* Copy the q/k/v/out weights of a standard attention module into m. */
static void copy_qkvo(struct nn_linformer *m, const struct nn_mha *a)
{
	struct nn_linear *dst[4] = { &m->q_proj, &m->k_proj, &m->v_proj, &m->out_proj };
	const struct nn_linear *src[4] = { &a->q_proj, &a->k_proj, &a->v_proj, &a->out_proj };
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(tensor_copy_(dst[i]->weight, src[i]->weight), TENSOR_OK);
		ck_assert_int_eq(tensor_copy_(dst[i]->bias, src[i]->bias), TENSOR_OK);
	}
}

/* Set a [k,n] or [H,k,n] projection weight to the identity (k = n). */
static void set_identity(struct tensor *w)
{
	ag_no_grad_begin(); /* setting parameters: off the graph */
	ck_assert_int_eq(tensor_fill_(w, 0.0), TENSOR_OK);
	int64_t n = w->shape[w->ndim - 1], h = w->ndim == 3 ? w->shape[0] : 1;
	struct tensor *w3 = tensor_view(w, 3, (int64_t[]){ h, n, n });
	for (int64_t i = 0; i < h; i++)
		for (int64_t j = 0; j < n; j++)
			ck_assert_int_eq(
			    tensor_fill_(
				tensor_narrow(tensor_narrow(tensor_narrow(w3, 0, i, 1), 1, j, 1), 2,
					      j, 1),
				1.0),
			    TENSOR_OK);
	ag_no_grad_end();
}

START_TEST(test_equiv_identity)
{
	/* k = n, E = F = identity: exactly standard attention (T = n, no mask) */
	const int64_t B = 2, dim = 12, H = 3, n = 7;
	const enum nn_attn_kind ks[2] = { NN_ATTN_LINEAR, NN_ATTN_RANDOM };
	const enum nn_proj_sharing ss[3] = { NN_SHARE_NONE, NN_SHARE_HEADWISE, NN_SHARE_KV };
	for (int di = 0; di < 2; di++)
		for (int ki = 0; ki < 2; ki++)
			for (int si = 0; si < 3; si++)
				for (int seq = 0; seq < 2; seq++) {
					enum tensor_dtype dt = di ? TENSOR_F64 : TENSOR_F32;
					struct nn_params ps;
					struct nn_mha a;
					ck_assert_int_eq(nn_params_init(&ps, dt, TENSOR_CPU, 1),
							 TENSOR_OK);
					ck_assert_int_eq(nn_mha_init(&a, &ps, "std", dim, H, 0),
							 TENSOR_OK);
					struct lf f;
					lf_make(&f, dt,
						(struct cfg){ dim, H, n, n, ks[ki], ss[si], false,
							      false, 0.0, 2 });
					copy_qkvo(&f.m, &a);
					set_identity(f.m.e.weight);
					if (f.m.f.weight)
						set_identity(f.m.f.weight);
					f.m.sequential_heads = seq;
					struct tensor *x =
					    tu_rand(dt, 3, (int64_t[]){ B, n, dim }, 3);
					struct tensor *want = nn_mha_forward(&a, x, NULL, false);
					struct tensor *got = nn_linformer_forward(&f.m, x, NULL);
					tu_assert_same(got, want, di ? 1e-12 : 2e-6);
					lf_drop(&f);
					ag_tape_reset();
					nn_params_free(&ps);
				}
}
END_TEST

/* Conv weight [c,c,1] = identity, bias 0. */
static void set_conv_identity(const struct nn_seq_proj *p)
{
	ag_no_grad_begin(); /* setting parameters: off the graph */
	ck_assert_int_eq(tensor_fill_(p->bias, 0.0), TENSOR_OK);
	int64_t c = p->channels;
	struct tensor *w = tensor_view(p->weight, 2, (int64_t[]){ c, c });
	ck_assert_int_eq(tensor_fill_(w, 0.0), TENSOR_OK);
	for (int64_t i = 0; i < c; i++)
		ck_assert_int_eq(
		    tensor_fill_(tensor_narrow(tensor_narrow(w, 0, i, 1), 1, i, 1), 1.0),
		    TENSOR_OK);
	ag_no_grad_end();
}

START_TEST(test_equiv_kernel1)
{
	/* Pooling with kernel 1 (k = n) is standard attention, padding and T < n
	 * included (its slots are the positions, masked as they are); so is a
	 * conv with an identity kernel, per head or dense. */
	const int64_t B = 3, dim = 8, H = 2, n = 6;
	const int mv[3 * 5] = { 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 1 };
	struct {
		enum nn_attn_kind kind;
		bool dense, skv;
	} cases[] = {
		{ NN_ATTN_MEAN, false, false }, { NN_ATTN_MAX, false, false },
		{ NN_ATTN_CONV, false, false }, { NN_ATTN_CONV, true, false },
		{ NN_ATTN_MEAN, false, true },
	};
	for (int di = 0; di < 2; di++)
		for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
			for (int mi = 0; mi < 3; mi++) {
				enum tensor_dtype dt = di ? TENSOR_F64 : TENSOR_F32;
				struct nn_params ps;
				struct nn_mha a;
				ck_assert_int_eq(nn_params_init(&ps, dt, TENSOR_CPU, 4), TENSOR_OK);
				ck_assert_int_eq(nn_mha_init(&a, &ps, "std", dim, H, 0), TENSOR_OK);
				struct lf f;
				lf_make(&f, dt,
					(struct cfg){ dim, H, n, n, cases[ci].kind,
						      NN_SHARE_HEADWISE, cases[ci].dense,
						      cases[ci].skv, 0.0, 5 });
				ag_no_grad_begin();  /* the weights, set off the graph */
				if (cases[ci].skv) { /* one k/v head: compare with its copy */
					ck_assert_int_eq(
					    tensor_copy_(f.m.q_proj.weight, a.q_proj.weight),
					    TENSOR_OK);
					ck_assert_int_eq(
					    tensor_copy_(f.m.q_proj.bias, a.q_proj.bias),
					    TENSOR_OK);
					ck_assert_int_eq(
					    tensor_copy_(f.m.out_proj.weight, a.out_proj.weight),
					    TENSOR_OK);
					ck_assert_int_eq(
					    tensor_copy_(f.m.out_proj.bias, a.out_proj.bias),
					    TENSOR_OK);
					for (int64_t h = 0; h < H; h++) {
						const struct nn_linear *src[2] = { &f.m.k_proj,
										   &f.m.v_proj };
						const struct nn_linear *dst[2] = { &a.k_proj,
										   &a.v_proj };
						for (int i = 0; i < 2; i++) {
							ck_assert_int_eq(
							    tensor_copy_(
								tensor_narrow(dst[i]->weight, 0,
									      h * 4, 4),
								src[i]->weight),
							    TENSOR_OK);
							ck_assert_int_eq(
							    tensor_copy_(tensor_narrow(dst[i]->bias,
										       0, h * 4, 4),
									 src[i]->bias),
							    TENSOR_OK);
						}
					}
				} else {
					copy_qkvo(&f.m, &a);
				}
				ag_no_grad_end();
				if (cases[ci].kind == NN_ATTN_CONV) {
					set_conv_identity(&f.m.e);
					set_conv_identity(&f.m.f);
				}
				int64_t T = mi == 2 ? n : 5;
				struct tensor *mask = mi == 1 ? mask_i32(B, T, mv) : NULL;
				struct tensor *x = tu_rand(dt, 3, (int64_t[]){ B, T, dim }, 6);
				struct tensor *want = nn_mha_forward(&a, x, mask, false);
				struct tensor *got = nn_linformer_forward(&f.m, x, mask);
				tu_assert_same(got, want, di ? 1e-12 : 2e-6);
				lf_drop(&f);
				ag_tape_reset();
				nn_params_free(&ps);
			}
}
END_TEST

START_TEST(test_equiv_padded_batch)
{
	/* A padded batch gives at its real positions what each sequence gives
	 * alone: every kind and sharing mode, learned projections sliced to the
	 * sequence, conv/pool slots of padding masked. */
	const int64_t B = 3, dim = 8, H = 2, n = 8;
	const int64_t lens[2][3] = { { 6, 3, 1 }, { 8, 5, 2 } };
	for (int ki = 0; ki < NKINDS; ki++)
		for (int si = 0; si < 4; si++)
			for (int v = 0; v < 4; v++) {
				struct cfg c = { dim,	       H,     n,     4,	  kinds[ki],
						 sharings[si], v & 2, v & 1, 0.0, 7 };
				if (c.dense && c.kind != NN_ATTN_CONV)
					continue;
				char name[128];
				cfg_str(&c, name, sizeof name);
				struct lf f;
				lf_make(&f, TENSOR_F64, c);
				f.m.sequential_heads = v == 1;
				for (int li = 0; li < 2; li++) {
					int64_t T = lens[li][0];
					struct tensor *x =
					    tu_rand(TENSOR_F64, 3, (int64_t[]){ B, T, dim }, 8);
					int mv[3 * 8];
					for (int64_t b = 0; b < B; b++)
						for (int64_t t = 0; t < T; t++)
							mv[b * T + t] =
							    t < lens[li][b] ? 1 + (int)t : 0;
					struct tensor *y =
					    nn_linformer_forward(&f.m, x, mask_i32(B, T, mv));
					ck_assert_msg(y != NULL, "%s: %s", name,
						      tensor_last_error());
					for (int64_t b = 0; b < B; b++) {
						int64_t len = lens[li][b];
						struct tensor *xb = tensor_contiguous(tensor_narrow(
						    tensor_narrow(x, 0, b, 1), 1, 0, len));
						struct tensor *yb =
						    nn_linformer_forward(&f.m, xb, NULL);
						struct tensor *real = tensor_narrow(
						    tensor_narrow(ag_detach(y), 0, b, 1), 1, 0,
						    len);
						ck_assert_msg(yb != NULL, "%s", name);
						double *w = tu_values(yb);
						double *g = tu_values(real);
						for (int64_t i = 0; i < len * dim; i++)
							ck_assert_msg(
							    fabs(g[i] - w[i]) <= 1e-12,
							    "%s: seq %lld [%lld] %g vs %g", name,
							    (long long)b, (long long)i, g[i], w[i]);
						free(w);
						free(g);
					}
				}
				lf_drop(&f);
			}
}
END_TEST

START_TEST(test_padding_values_ignored)
{
	/* Whatever the padded rows hold (here huge values and NaN), the real
	 * outputs do not change: padded keys and values are zeroed (filled, not
	 * multiplied) before projecting. */
	const int64_t B = 2, T = 6, dim = 8;
	int mv[2 * 6] = { 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0 };
	for (int ki = 0; ki < NKINDS; ki++) {
		struct lf f;
		lf_make(&f, TENSOR_F64,
			(struct cfg){ dim, 2, 8, 4, kinds[ki], NN_SHARE_HEADWISE, false, false, 0.0,
				      9 });
		struct tensor *x = tu_rand(TENSOR_F64, 3, (int64_t[]){ B, T, dim }, 10);
		struct tensor *x2 = tensor_clone(x);
		for (int64_t b = 0; b < B; b++)
			for (int64_t t = 0; t < T; t++)
				if (!mv[b * T + t])
					ck_assert_int_eq(
					    tensor_fill_(
						tensor_narrow(tensor_narrow(x2, 0, b, 1), 1, t, 1),
						t % 2 ? NAN : 1e6 * (double)(t + 1)),
					    TENSOR_OK);
		struct tensor *m = mask_i32(B, T, mv);
		struct tensor *y = ag_detach(nn_linformer_forward(&f.m, x, m));
		struct tensor *y2 = ag_detach(nn_linformer_forward(&f.m, x2, m));
		tu_assert_same(tensor_narrow(tensor_narrow(y2, 0, 0, 1), 1, 0, 4),
			       tensor_narrow(tensor_narrow(y, 0, 0, 1), 1, 0, 4), 1e-12);
		tu_assert_same(tensor_narrow(tensor_narrow(y2, 0, 1, 1), 1, 0, 2),
			       tensor_narrow(tensor_narrow(y, 0, 1, 1), 1, 0, 2), 1e-12);
		lf_drop(&f);
	}
}
END_TEST

/* ---- gradients -------------------------------------------------------------------- */

struct lin_ctx {
	const struct nn_linformer *m;
	const struct tensor *mask;
};

static struct tensor *f_linformer(struct tensor *const *in, void *ctx)
{
	const struct lin_ctx *c = ctx;
	return nn_linformer_forward(c->m, in[0], c->mask);
}

START_TEST(test_gradients)
{
	const int64_t B = 2, dim = 4, H = 2, n = 4, k = 2;
	struct tensor *mask = mask_i32(B, 3, (const int[]){ 1, 1, 0, 1, 0, 0 });
	/* every kind, masked with T < n and unmasked with T = n (x strided); the
	 * shared learned projections without a shared key/value head take the
	 * sequence-first order (E x, then the k/v weights), E = F included */
	const struct {
		enum nn_attn_kind kind;
		enum nn_proj_sharing sharing;
		bool dense, skv, seq, masked, empty_slots;
	} cases[] = {
		{ NN_ATTN_LINEAR, NN_SHARE_HEADWISE, false, false, false, false, false },
		{ NN_ATTN_LINEAR, NN_SHARE_NONE, false, true, true, true, false },
		{ NN_ATTN_RANDOM, NN_SHARE_NONE, false, false, false, true, false },
		{ NN_ATTN_RANDOM, NN_SHARE_KV, false, true, false, false, false },
		{ NN_ATTN_CONV, NN_SHARE_HEADWISE, false, false, false, true, false },
		{ NN_ATTN_CONV, NN_SHARE_HEADWISE, false, true, false, false, false },
		{ NN_ATTN_CONV, NN_SHARE_KV, true, false, true, true, false },
		{ NN_ATTN_MEAN, NN_SHARE_HEADWISE, false, false, false, true, false },
		{ NN_ATTN_MEAN, NN_SHARE_NONE, false, true, true, false, false },
		{ NN_ATTN_MAX, NN_SHARE_HEADWISE, false, true, false, true, false },
		{ NN_ATTN_MAX, NN_SHARE_KV, false, false, false, false, false },
		{ NN_ATTN_LINEAR, NN_SHARE_LAYERWISE, false, false, false, true, false },
		{ NN_ATTN_CONV, NN_SHARE_LAYERWISE, true, false, false, false, false },
		{ NN_ATTN_LINEAR, NN_SHARE_KV, false, false, true, true, false },
		{ NN_ATTN_LINEAR, NN_SHARE_HEADWISE, false, false, false, true, true },
		{ NN_ATTN_RANDOM, NN_SHARE_NONE, false, false, true, true, true },
	};
	for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
		bool mi = cases[ci].masked;
		struct cfg c = { dim,	H,     n,   k,	    cases[ci].kind, cases[ci].sharing,
				 false, false, 0.0, 17 + ci };
		c.dense = cases[ci].dense;
		c.skv = cases[ci].skv;
		char name[160];
		cfg_str(&c, name, sizeof name);
		strcat(name, mi ? " masked T=3" : " T=n");
		struct lf f;
		lf_make(&f, TENSOR_F64, c);
		f.m.sequential_heads = cases[ci].seq;
		f.m.mask_empty_slots = cases[ci].empty_slots;
		if (f.m.mask_empty_slots)
			strcat(name, " empty slots masked");
		int64_t T = mi ? 3 : n;
		struct tensor *x = gc_input(3, (int64_t[]){ B, T, dim }, 18, -1.5, 1.5, mi == 0);
		struct tensor *in[24] = { x };
		int nin = 1;
		for (int i = 0; i < f.ps.n; i++)
			if (f.ps.items[i].value->requires_grad)
				in[nin++] = f.ps.items[i].value;
		struct lin_ctx lc = { &f.m, mi ? mask : NULL };
		gc_assert(name, f_linformer, &lc, nin, in);
		for (int i = 0; i < f.ps.n; i++) {
			struct tensor *v = f.ps.items[i].value;
			/* trainable parameters got a gradient; the fixed random
			 * projection none */
			ck_assert_msg((v->grad != NULL) == v->requires_grad, "%s: %s", name,
				      f.ps.items[i].name);
			const char *pn = f.ps.items[i].name;
			bool is_proj =
			    strstr(pn, ".E.") || strstr(pn, ".F.") || strncmp(pn, "proj.", 5) == 0;
			ck_assert(v->requires_grad == !(c.kind == NN_ATTN_RANDOM && is_proj));
		}
		lf_drop(&f);
	}
}
END_TEST

/* ---- batched vs sequential heads, dropout, memory ----------------------------------- */

START_TEST(test_sequential_equals_batched)
{
	const int64_t B = 2, T = 7, dim = 12, H = 3;
	struct tensor *mask =
	    mask_i32(B, T, (const int[]){ 1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0 });
	for (int di = 0; di < 2; di++)
		for (int ki = 0; ki < NKINDS; ki++)
			for (int v = 0; v < 2; v++) {
				enum tensor_dtype dt = di ? TENSOR_F64 : TENSOR_F32;
				struct lf f;
				lf_make(&f, dt,
					(struct cfg){ dim, H, 8, 4, kinds[ki],
						      v ? NN_SHARE_NONE : NN_SHARE_KV, false, v, 0,
						      19 });
				struct tensor *x = tu_rand(dt, 3, (int64_t[]){ B, T, dim }, 20);
				for (int mi = 0; mi < 2; mi++) {
					const struct tensor *km = mi ? mask : NULL;
					f.m.sequential_heads = false;
					struct tensor *y = nn_linformer_forward(&f.m, x, km);
					f.m.sequential_heads = true;
					struct tensor *ys = nn_linformer_forward(&f.m, x, km);
					ag_no_grad_begin(); /* the inner-scope path */
					struct tensor *yn = nn_linformer_forward(&f.m, x, km);
					ag_no_grad_end();
					tu_assert_same(ys, y, di ? 1e-12 : 1e-6);
					tu_assert_same(yn, y, di ? 1e-12 : 1e-6);
				}
				lf_drop(&f);
			}
}
END_TEST

START_TEST(test_dropout)
{
	const int64_t B = 2, T = 8, dim = 8;
	for (int ki = 0; ki < NKINDS; ki++) {
		struct lf f, f0;
		lf_make(&f, TENSOR_F64,
			(struct cfg){ dim, 2, 8, 4, kinds[ki], NN_SHARE_HEADWISE, false, false, 0.5,
				      21 });
		lf_make(&f0, TENSOR_F64,
			(struct cfg){ dim, 2, 8, 4, kinds[ki], NN_SHARE_HEADWISE, false, false, 0.0,
				      21 });
		struct tensor *x = tu_rand(TENSOR_F64, 3, (int64_t[]){ B, T, dim }, 22);
		struct tensor *y0 = nn_linformer_forward(&f0.m, x, NULL);
		uint64_t before = f.ps.rng_counter;
		struct tensor *yt = nn_linformer_forward(&f.m, x, NULL);
		ck_assert(f.ps.rng_counter > before);
		double *a = tu_values(yt), *b = tu_values(y0), diff = 0;
		for (int64_t i = 0; i < B * T * dim; i++)
			diff = fmax(diff, fabs(a[i] - b[i]));
		ck_assert(diff > 1e-3);
		free(a);
		free(b);
		nn_params_train(&f.ps, false);
		before = f.ps.rng_counter;
		for (int seq = 0; seq < 2; seq++) {
			f.m.sequential_heads = seq;
			tu_assert_same(nn_linformer_forward(&f.m, x, NULL), y0, 1e-14);
		}
		ck_assert(f.ps.rng_counter == before);
		lf_drop(&f);
		lf_drop(&f0);
	}
}
END_TEST

/* Peak bytes of one no-grad forward of f (mha if lf is NULL). */
static size_t peak_of(const struct nn_linformer *lf, const struct nn_mha *mha, struct tensor *x)
{
	size_t base = tu_peak_begin();
	struct tensor *y =
	    lf ? nn_linformer_forward(lf, x, NULL) : nn_mha_forward(mha, x, NULL, false);
	ck_assert_msg(y != NULL, "%s", tensor_last_error());
	size_t peak = tu_peak_bytes(base);
	tu_peak_end();
	return peak;
}

START_TEST(test_memory_long_n)
{
	/* At n = 1024 the n x n scores dominate standard attention composed of
	 * products and a softmax (as on a device without the fused kernel);
	 * Linformer's are n x k: its peak must stay well below one [B,H,n,n]
	 * tensor. The fused kernel keeps standard attention below it too. */
	const int64_t B = 1, n = 1024, dim = 32, H = 4, k = 32;
	tensor_set_num_threads(0);
	struct nn_params ps;
	struct nn_mha a;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 23), TENSOR_OK);
	ck_assert_int_eq(nn_mha_init(&a, &ps, "std", dim, H, 0), TENSOR_OK);
	struct tensor *x = tu_rand(TENSOR_F32, 3, (int64_t[]){ B, n, dim }, 24);
	size_t scores = sizeof(float) * (size_t)(B * H * n * n);
	nn_attention_set_fused(false);
	size_t std_peak = peak_of(NULL, &a, x);
	nn_attention_set_fused(true);
	ck_assert_msg(std_peak >= scores, "standard peak %zu", std_peak);
	std_peak = peak_of(NULL, &a, x);
	ck_assert_msg(std_peak < scores / 4, "standard peak, fused: %zu", std_peak);
	for (int ki = 0; ki < NKINDS; ki++) {
		struct lf f;
		lf_make(&f, TENSOR_F32,
			(struct cfg){ dim, H, n, k, kinds[ki], NN_SHARE_HEADWISE, false, false, 0,
				      25 });
		size_t lpeak = peak_of(&f.m, NULL, x);
		ck_assert_msg(lpeak < scores / 4, "%s: peak %zu vs one n x n score tensor %zu",
			      nn_attn_kind_name(kinds[ki]), lpeak, scores);
		lf_drop(&f);
	}
	ag_tape_reset();
	nn_params_free(&ps);
}
END_TEST

/* With sequential_heads, heads go one at a time only where the scores of all
 * heads exceed 2^20 elements (nn_linformer_attend): below, the same peak as
 * all at once; above, the same values with a lower peak (the composed
 * attention's, which keeps the scores; the fused kernel never holds them). */
START_TEST(test_sequential_heads_bound)
{
	const int64_t dim = 8, H = 2, k = 128;
	nn_attention_set_fused(false);
	for (int above = 0; above < 2; above++) {
		const int64_t n = above ? 8192 : 1024; /* H x n x k: 2Mi or 256Ki */
		struct lf f;
		lf_make(&f, TENSOR_F32,
			(struct cfg){ dim, H, n, k, NN_ATTN_LINEAR, NN_SHARE_HEADWISE, false, false,
				      0, 26 });
		struct tensor *x = tu_rand(TENSOR_F32, 3, (int64_t[]){ 1, n, dim }, 27);
		size_t peak[2];
		struct tensor *y[2];
		for (int seq = 0; seq < 2; seq++) {
			f.m.sequential_heads = seq;
			peak[seq] = peak_of(&f.m, NULL, x);
			ag_no_grad_begin();
			y[seq] = nn_linformer_forward(&f.m, x, NULL);
			ag_no_grad_end();
		}
		tu_assert_same(y[1], y[0], 1e-6);
		size_t one_head = sizeof(float) * (size_t)(n * k);
		if (above)
			ck_assert_msg(peak[1] + one_head <= peak[0], "n %lld: peak %zu vs %zu",
				      (long long)n, peak[1], peak[0]);
		else
			ck_assert_msg(peak[1] == peak[0], "n %lld: peak %zu vs %zu", (long long)n,
				      peak[1], peak[0]);
		lf_drop(&f);
	}
	nn_attention_set_fused(true);
}
END_TEST

/* ---- errors ------------------------------------------------------------------------ */

START_TEST(test_init_errors)
{
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	struct nn_linformer m;
	const enum nn_attn_kind L = NN_ATTN_LINEAR;
	const enum nn_proj_sharing HW = NN_SHARE_HEADWISE;
	tu_assert_error(nn_linformer_init(NULL, &ps, "a", 8, 2, 8, 4, L, HW, 0, 0, 0, NULL) < 0,
			TENSOR_ERR_ARG, "nn_linformer_init", NULL);
	tu_assert_error(nn_linformer_init(&m, NULL, "a", 8, 2, 8, 4, L, HW, 0, 0, 0, NULL) < 0,
			TENSOR_ERR_ARG, "nn_linformer_init", NULL);
	tu_assert_error(nn_linformer_init(&m, &ps, NULL, 8, 2, 8, 4, L, HW, 0, 0, 0, NULL) < 0,
			TENSOR_ERR_ARG, "nn_linformer_init", NULL);
	tu_assert_error(nn_linformer_init(&m, &ps, "a", 10, 3, 8, 4, L, HW, 0, 0, 0, NULL) < 0,
			TENSOR_ERR_ARG, "nn_linformer_init", "heads 3 must divide dim 10");
	tu_assert_error(nn_linformer_init(&m, &ps, "a", 8, 0, 8, 4, L, HW, 0, 0, 0, NULL) < 0,
			TENSOR_ERR_ARG, "nn_linformer_init", "heads 0");
	tu_assert_error(nn_linformer_init(&m, &ps, "a", 8, 2, 8, 9, L, HW, 0, 0, 0, NULL) < 0,
			TENSOR_ERR_ARG, "n 8 -> k 9", "1 <= k <= n");
	tu_assert_error(nn_linformer_init(&m, &ps, "a", 8, 2, 8, 0, L, HW, 0, 0, 0, NULL) < 0,
			TENSOR_ERR_ARG, "n 8 -> k 0", "1 <= k <= n");
	const enum nn_attn_kind win[3] = { NN_ATTN_CONV, NN_ATTN_MEAN, NN_ATTN_MAX };
	for (int i = 0; i < 3; i++)
		tu_assert_error(
		    nn_linformer_init(&m, &ps, "a", 8, 2, 12, 5, win[i], HW, 0, 0, 0, NULL) < 0,
		    TENSOR_ERR_ARG, "n 12 is not divisible by k 5", nn_attn_kind_name(win[i]));
	/* a learned or random projection takes any k <= n */
	for (int bad = 0; bad < 2; bad++) /* standard, or past the enum */
		tu_assert_error(nn_linformer_init(&m, &ps, "a", 8, 2, 8, 4,
						  bad ? NN_NATTN : NN_ATTN_STANDARD, HW, 0, 0, 0,
						  NULL) < 0,
				TENSOR_ERR_ARG, "nn_linformer_init", "unknown");
	tu_assert_error(nn_linformer_init(&m, &ps, "a", 8, 2, 8, 4, L, (enum nn_proj_sharing)4, 0,
					  0, 0, NULL) < 0,
			TENSOR_ERR_ARG, "nn_linformer_init", "sharing");
	tu_assert_error(nn_linformer_init(&m, &ps, "a", 8, 2, 8, 4, L, HW, 0, 0, 1.0, NULL) < 0,
			TENSOR_ERR_ARG, "nn_linformer_init", "attn_dropout 1");
	tu_assert_error(
	    nn_linformer_init(&m, &ps, "a", 8, 2, 8, 4, L, NN_SHARE_LAYERWISE, 0, 0, 0, NULL) < 0,
	    TENSOR_ERR_ARG, "layerwise sharing needs the shared projection", "NULL");
	char longname[NN_NAME_MAX];
	memset(longname, 'x', sizeof longname - 10);
	longname[sizeof longname - 10] = 0;
	tu_assert_error(nn_linformer_init(&m, &ps, longname, 8, 2, 8, 4, L, HW, 0, 0, 0, NULL) < 0,
			TENSOR_ERR_ARG, "nn_linformer_init", "too long");
	ck_assert_int_eq(ps.n, 0); /* argument errors register nothing */
	ck_assert(m.dim == 0 && m.e_used == NULL);

	struct nn_seq_proj sh, shc;
	ck_assert_int_eq(nn_seq_proj_init(&sh, &ps, "proj", L, 8, 4, 2, false, 0, false),
			 TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&shc, &ps, "projc", NN_ATTN_CONV, 8, 4, 1, false, 4, false),
	    TENSOR_OK);
	tu_assert_error(nn_linformer_init(&m, &ps, "a", 8, 2, 8, 4, L, HW, 0, 0, 0, &sh) < 0,
			TENSOR_ERR_ARG, "shared projection was passed with headwise",
			"only layerwise");
	tu_assert_error(
	    nn_linformer_init(&m, &ps, "a", 8, 2, 8, 2, L, NN_SHARE_LAYERWISE, 0, 0, 0, &sh) < 0,
	    TENSOR_ERR_ARG, "layerwise projection is linear n 8 -> k 4", "needs linear n 8 -> k 2");
	tu_assert_error(nn_linformer_init(&m, &ps, "a", 8, 2, 8, 4, NN_ATTN_RANDOM,
					  NN_SHARE_LAYERWISE, 0, 0, 0, &sh) < 0,
			TENSOR_ERR_ARG, "layerwise projection is linear", "needs random");
	/* conv channels: head dim 4 matches, dense (8) does not */
	tu_assert_error(nn_linformer_init(&m, &ps, "a", 8, 2, 8, 4, NN_ATTN_CONV,
					  NN_SHARE_LAYERWISE, true, 0, 0, &shc) < 0,
			TENSOR_ERR_ARG, "(4 channels)", "(8 channels, dense)");
	ck_assert_int_eq(ps.n, 3);
	ck_assert_int_eq(nn_linformer_init(&m, &ps, "a", 8, 2, 8, 4, NN_ATTN_CONV,
					   NN_SHARE_LAYERWISE, false, 0, 0, &shc),
			 TENSOR_OK);
	struct nn_linformer dup;
	tu_assert_error(nn_linformer_init(&dup, &ps, "a", 8, 2, 8, 4, L, HW, 0, 0, 0, NULL) < 0,
			TENSOR_ERR_ARG, "a.q_proj.weight", "already exists");
	ck_assert(dup.q_proj.weight == NULL && dup.e_used == NULL);
	nn_linformer_free(&m);
	ck_assert(m.q_proj.weight == NULL && m.e_used == NULL && m.dim == 0);
	nn_linformer_free(NULL);
	nn_params_free(&ps);
}
END_TEST

START_TEST(test_forward_errors)
{
	struct lf f;
	lf_make(&f, TENSOR_F32,
		(struct cfg){ 8, 2, 8, 4, NN_ATTN_CONV, NN_SHARE_HEADWISE, false, false, 0, 1 });
	struct tensor *xl = tu_rand(TENSOR_F32, 3, (int64_t[]){ 2, 9, 8 }, 1);
	tu_assert_error(!nn_linformer_forward(&f.m, xl, NULL), TENSOR_ERR_SHAPE,
			"sequence length T 9 is longer than n 8", "nn_linformer_forward");
	struct tensor *x2 = tu_rand(TENSOR_F32, 2, (int64_t[]){ 4, 8 }, 2);
	tu_assert_error(!nn_linformer_forward(&f.m, x2, NULL), TENSOR_ERR_SHAPE,
			"nn_linformer_forward", "x [4,8] must be [B,T,8]");
	struct tensor *x7 = tu_rand(TENSOR_F32, 3, (int64_t[]){ 2, 4, 7 }, 3);
	tu_assert_error(!nn_linformer_forward(&f.m, x7, NULL), TENSOR_ERR_SHAPE,
			"nn_linformer_forward", "x [2,4,7]");
	struct tensor *x = tu_rand(TENSOR_F32, 3, (int64_t[]){ 2, 4, 8 }, 4);
	struct tensor *bad = mask_i32(2, 3, (const int[]){ 1, 1, 1, 1, 1, 1 });
	tu_assert_error(!nn_linformer_forward(&f.m, x, bad), TENSOR_ERR_SHAPE,
			"nn_linformer_forward", "mask [2,3] must be [B,T] = [2,4]");
	struct tensor *x64 = tu_rand(TENSOR_F64, 3, (int64_t[]){ 2, 4, 8 }, 5);
	tu_assert_error(!nn_linformer_forward(&f.m, x64, NULL), TENSOR_ERR_DTYPE, NULL, NULL);
	struct nn_linformer zero = { 0 };
	tu_assert_error(!nn_linformer_forward(&zero, x, NULL), TENSOR_ERR_ARG,
			"nn_linformer_forward", "not initialised");
	tu_assert_error(!nn_linformer_forward(NULL, x, NULL), TENSOR_ERR_ARG,
			"nn_linformer_forward", NULL);
	tensor_error(TENSOR_ERR_IO, "earlier failure");
	ck_assert(nn_linformer_forward(&f.m, NULL, NULL) == NULL);
	tu_assert_error(true, TENSOR_ERR_IO, "earlier failure", NULL);
	/* still works, also on an empty sequence */
	for (int seq = 0; seq < 2; seq++) {
		f.m.sequential_heads = seq;
		ck_assert(nn_linformer_forward(&f.m, x, NULL) != NULL);
		struct tensor *e = tensor_zeros(TENSOR_F32, TENSOR_CPU, 3, (int64_t[]){ 2, 0, 8 });
		struct tensor *ye = nn_linformer_forward(&f.m, e, NULL);
		ck_assert_msg(ye != NULL, "%s", tensor_last_error());
		tu_assert_shape(ye, 3, (int64_t[]){ 2, 0, 8 });
	}
	lf_drop(&f);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("nn_linformer");
	TCase *tc = tu_tcase("linformer");
	tcase_add_checked_fixture(tc, one_thread, default_threads);
	tcase_add_test(tc, test_linformer_reference);
	tcase_add_test(tc, test_equiv_identity);
	tcase_add_test(tc, test_equiv_kernel1);
	tcase_add_test(tc, test_equiv_padded_batch);
	tcase_add_test(tc, test_padding_values_ignored);
	tcase_add_test(tc, test_gradients);
	tcase_add_test(tc, test_sequential_equals_batched);
	tcase_add_test(tc, test_dropout);
	tcase_add_test(tc, test_memory_long_n);
	tcase_add_test(tc, test_sequential_heads_bound);
	tcase_add_test(tc, test_init_errors);
	tcase_add_test(tc, test_forward_errors);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
