/* Linformer attention: sequence projections against naive loops, the module
 * against a loop reference for every kind x sharing mode, the three
 * equivalences (identity E = F with k = n is standard attention, pooling with
 * kernel 1 is standard attention, a padded batch equals its sequences run
 * alone), shapes and parameter counts, gradient checks, batched vs
 * sequential heads, dropout, memory at long n, errors. */
#define _XOPEN_SOURCE 700 /* mkstemp */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gradcheck.h"
#include "nn.h"
#include "testutil.h"

static const enum nn_proj_kind kinds[NN_NPROJ] = { NN_PROJ_LINEAR, NN_PROJ_CONV, NN_PROJ_MEAN,
						   NN_PROJ_MAX, NN_PROJ_RANDOM };
static const enum nn_proj_sharing sharings[4] = { NN_SHARE_NONE, NN_SHARE_HEADWISE, NN_SHARE_KV,
						  NN_SHARE_LAYERWISE };

static bool windowed(enum nn_proj_kind k)
{
	return k == NN_PROJ_CONV || k == NN_PROJ_MEAN || k == NN_PROJ_MAX;
}

/* ---- naive references ------------------------------------------------------------ */

/* q [B,H,T,d], k [B,H,S,d], v [B,H,S,d]; mask [B,S] (nonzero = hidden) or
 * NULL -> out [B,H,T,d]. A row with no visible key is zero. */
static void ref_attention(const double *q, const double *k, const double *v, const double *mask,
			  double scale, int64_t B, int64_t H, int64_t T, int64_t S, int64_t d,
			  double *out)
{
	double *p = malloc(sizeof(double) * (size_t)(S ? S : 1));
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t t = 0; t < T; t++) {
				const double *qr = q + ((b * H + h) * T + t) * d;
				double mx = -INFINITY;
				for (int64_t s = 0; s < S; s++) {
					double acc = 0;
					for (int64_t c = 0; c < d; c++)
						acc += qr[c] * k[((b * H + h) * S + s) * d + c];
					p[s] =
					    mask && mask[b * S + s] != 0 ? -INFINITY : acc * scale;
					mx = fmax(mx, p[s]);
				}
				double sum = 0;
				for (int64_t s = 0; s < S; s++) {
					p[s] = mx == -INFINITY ? 0 : exp(p[s] - mx);
					sum += p[s];
				}
				double *o = out + ((b * H + h) * T + t) * d;
				for (int64_t c = 0; c < d; c++) {
					double acc = 0;
					for (int64_t s = 0; s < S; s++)
						acc += p[s] * v[((b * H + h) * S + s) * d + c];
					o[c] = sum > 0 ? acc / sum : 0;
				}
			}
	free(p);
}

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

/* x [B,hx,S,c] -> out [B,ho,k,c], ho = p->heads for a per-head projection
 * (x's single head broadcast when hx = 1), else hx. Positions S..n-1 are
 * zeros. */
static void ref_seq_proj(const struct nn_seq_proj *p, const double *x, int64_t B, int64_t hx,
			 int64_t S, int64_t c, double *out)
{
	int64_t n = p->n, k = p->k, kern = n / k, ho = p->per_head ? p->heads : hx;
	double *w = p->weight ? tu_values(p->weight) : NULL;
	double *bias = p->bias ? tu_values(p->bias) : NULL;
	for (int64_t b = 0; b < B; b++)
		for (int64_t h = 0; h < ho; h++) {
			const double *xs = x + (b * hx + (hx == 1 ? 0 : h)) * S * c; /* [S,c] */
			for (int64_t j = 0; j < k; j++)
				for (int64_t o = 0; o < c; o++) {
					double acc = 0;
					if (p->kind == NN_PROJ_LINEAR ||
					    p->kind == NN_PROJ_RANDOM) {
						const double *e =
						    w + (p->per_head ? h * k * n : 0) + j * n;
						for (int64_t s = 0; s < S; s++)
							acc += e[s] * xs[s * c + o];
					} else if (p->kind == NN_PROJ_CONV) {
						acc = bias[o];
						for (int64_t r = 0; r < kern; r++)
							for (int64_t ci = 0; ci < c; ci++) {
								int64_t pos = j * kern + r;
								if (pos < S)
									acc +=
									    w[(o * c + ci) * kern +
									      r] *
									    xs[pos * c + ci];
							}
					} else {
						acc = p->kind == NN_PROJ_MAX ? -INFINITY : 0;
						for (int64_t r = 0; r < kern; r++) {
							int64_t pos = j * kern + r;
							double v = pos < S ? xs[pos * c + o] : 0;
							acc = p->kind == NN_PROJ_MAX ? fmax(acc, v)
										     : acc + v;
						}
						if (p->kind == NN_PROJ_MEAN)
							acc /= (double)kern;
					}
					out[((b * ho + h) * k + j) * c + o] = acc;
				}
		}
	free(w);
	free(bias);
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

/* The whole module by loops: x [B,T,dim], mask [B,T] or NULL -> [B,T,dim]. */
static double *ref_linformer(const struct nn_linformer *m, const double *x, const double *mask,
			     int64_t B, int64_t T)
{
	int64_t dim = m->dim, H = m->heads, d = dim / H, K = m->k, n = m->n, kern = n / K;
	int64_t kvd = m->shared_kv_head ? d : dim;
	double *q = ref_linear(&m->q_proj, x, B * T);
	double *kl = ref_linear(&m->k_proj, x, B * T), *vl = ref_linear(&m->v_proj, x, B * T);
	for (int64_t i = 0; i < B * T; i++)
		if (mask && mask[i] != 0)
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
	if (windowed(m->e_used->kind)) {
		sm = malloc(sizeof(double) * (size_t)(B * K));
		for (int64_t b = 0; b < B; b++)
			for (int64_t j = 0; j < K; j++) {
				bool all = true;
				for (int64_t r = 0; r < kern; r++) {
					int64_t pos = j * kern + r;
					all = all && (pos >= T || (mask && mask[b * T + pos] != 0));
				}
				sm[b * K + j] = all;
			}
	}
	double *o = malloc(sizeof(double) * (size_t)(B * T * dim + 1));
	ref_attention(q4, kp, vp, sm, 1 / sqrt((double)d), B, H, T, K, d, o);
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

struct cfg {
	int64_t dim, heads, n, k;
	enum nn_proj_kind kind;
	enum nn_proj_sharing sharing;
	bool dense, skv;
	double p;
	uint64_t seed;
};

/* A module in its own parameter list, with the layerwise projection "proj". */
struct lf {
	struct nn_params ps;
	struct nn_seq_proj shared;
	struct nn_linformer m;
};

static void lf_make(struct lf *f, enum tensor_dtype dt, struct cfg c)
{
	ck_assert_int_eq(nn_params_init(&f->ps, dt, TENSOR_CPU, c.seed), TENSOR_OK);
	const struct nn_seq_proj *sh = NULL;
	if (c.sharing == NN_SHARE_LAYERWISE) {
		int64_t d = c.dim / c.heads, kvd = c.skv ? d : c.dim;
		bool dense = c.dense && c.kind == NN_PROJ_CONV;
		int rc = nn_seq_proj_init(&f->shared, &f->ps, "proj", c.kind, c.n, c.k, c.heads,
					  false, dense ? kvd : d, dense);
		ck_assert_msg(rc == TENSOR_OK, "%s", tensor_last_error());
		sh = &f->shared;
	}
	int rc = nn_linformer_init(&f->m, &f->ps, "attn", c.dim, c.heads, c.n, c.k, c.kind,
				   c.sharing, c.dense, c.skv, c.p, sh);
	ck_assert_msg(rc == TENSOR_OK, "%s", tensor_last_error());
}

static void lf_drop(struct lf *f)
{
	ag_tape_reset();
	nn_linformer_free(&f->m);
	nn_seq_proj_free(&f->shared);
	nn_params_free(&f->ps);
}

static struct tensor *mask_i32(int64_t B, int64_t S, const int *vals)
{
	struct tensor *m = tensor_from_data(TENSOR_I32, TENSOR_CPU, 2, (int64_t[]){ B, S }, vals);
	ck_assert(m != NULL);
	return m;
}

static void assert_same(const struct tensor *a, const struct tensor *b, double tol)
{
	ck_assert_msg(a != NULL && b != NULL, "%s", tensor_last_error());
	ck_assert(tensor_same_shape(a, b));
	double *vb = tu_values(b);
	tu_assert_close(a, vb, tensor_numel(b), tol, tol);
	free(vb);
}

static const char *cfg_str(const struct cfg *c, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s%s%s k %lld n %lld", nn_proj_kind_name(c->kind),
		 nn_proj_sharing_name(c->sharing), c->dense ? "/dense" : "",
		 c->skv ? "/shared_kv_head" : "", (long long)c->k, (long long)c->n);
	return buf;
}

/* Parameters of one projection, as documented. */
static int64_t proj_count(enum nn_proj_kind kind, bool per_head, int64_t heads, int64_t n,
			  int64_t k, int64_t c)
{
	switch (kind) {
	case NN_PROJ_LINEAR:
	case NN_PROJ_RANDOM: return (per_head ? heads : 1) * k * n;
	case NN_PROJ_CONV: return c * c * (n / k) + c;
	default: return 0;
	}
}

/* ---- names ----------------------------------------------------------------------- */

START_TEST(test_names)
{
	const char *kn[NN_NPROJ] = { "linear", "conv", "mean", "max", "random" };
	for (int i = 0; i < NN_NPROJ; i++) {
		ck_assert_str_eq(nn_proj_kind_name(kinds[i]), kn[i]);
		ck_assert_int_eq(nn_proj_kind_parse(kn[i]), kinds[i]);
	}
	const char *sn[4] = { "none", "headwise", "kv", "layerwise" };
	for (int i = 0; i < 4; i++) {
		ck_assert_str_eq(nn_proj_sharing_name(sharings[i]), sn[i]);
		ck_assert_int_eq(nn_proj_sharing_parse(sn[i]), sharings[i]);
	}
	ck_assert_int_eq(nn_proj_sharing_parse("key-value"), NN_SHARE_KV);
	ck_assert_int_eq(nn_proj_kind_parse("Linear"), -1);
	ck_assert_int_eq(nn_proj_kind_parse(""), -1);
	ck_assert_int_eq(nn_proj_kind_parse(NULL), -1);
	ck_assert_int_eq(nn_proj_sharing_parse("heads"), -1);
	ck_assert_int_eq(nn_proj_sharing_parse(NULL), -1);
	ck_assert_str_eq(nn_proj_kind_name(NN_NPROJ), "unknown");
	ck_assert_str_eq(nn_proj_kind_name((enum nn_proj_kind) - 1), "unknown");
	ck_assert_str_eq(nn_proj_sharing_name((enum nn_proj_sharing)4), "unknown");
}
END_TEST

/* ---- nn_seq_proj ----------------------------------------------------------------- */

START_TEST(test_seq_proj_params)
{
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 3), TENSOR_OK);
	struct nn_seq_proj p[7];
	ck_assert_int_eq(
	    nn_seq_proj_init(&p[0], &ps, "lin", NN_PROJ_LINEAR, 12, 3, 4, false, 0, false),
	    TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&p[1], &ps, "linh", NN_PROJ_LINEAR, 12, 3, 4, true, 0, false),
	    TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&p[2], &ps, "rnd", NN_PROJ_RANDOM, 12, 5, 4, true, 0, false),
	    TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&p[3], &ps, "conv", NN_PROJ_CONV, 12, 3, 4, false, 6, false),
	    TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&p[4], &ps, "dense", NN_PROJ_CONV, 12, 4, 4, false, 24, true),
	    TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&p[5], &ps, "mean", NN_PROJ_MEAN, 12, 6, 4, false, 0, true),
	    TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&p[6], &ps, "max", NN_PROJ_MAX, 12, 12, 4, false, 0, false),
	    TENSOR_OK);
	ck_assert_int_eq(ps.n, 7);
	const struct {
		const char *name;
		int nd;
		int64_t shape[3];
	} want[6] = {
		{ "lin.weight", 2, { 3, 12 } },	   { "linh.weight", 3, { 4, 3, 12 } },
		{ "rnd.weight", 3, { 4, 5, 12 } }, { "conv.weight", 3, { 6, 6, 4 } },
		{ "conv.bias", 1, { 6 } },	   { "dense.weight", 3, { 24, 24, 3 } },
	};
	for (int i = 0; i < 6; i++) {
		struct nn_param *q = nn_params_find(&ps, want[i].name);
		ck_assert_msg(q != NULL, "missing %s", want[i].name);
		tu_assert_shape(q->value, want[i].nd, want[i].shape);
	}
	ck_assert(nn_params_find(&ps, "dense.bias") != NULL);
	ck_assert(p[0].weight == nn_params_find(&ps, "lin.weight")->value);
	ck_assert(p[3].bias == nn_params_find(&ps, "conv.bias")->value);
	ck_assert(p[5].weight == NULL && p[5].bias == NULL && p[6].weight == NULL);
	ck_assert(!p[5].dense); /* dense means a dense conv only */
	ck_assert(p[4].dense && p[4].channels == 24 && p[4].k == 4 && p[4].n == 12);
	ck_assert(p[1].per_head && p[1].heads == 4 && p[1].kind == NN_PROJ_LINEAR);
	int64_t count = 3 * 12 + 4 * 3 * 12 + 4 * 5 * 12 + (6 * 6 * 4 + 6) + (24 * 24 * 3 + 24);
	ck_assert_int_eq(nn_params_count(&ps), count);
	/* trainable except the random projection; biases excluded from decay */
	ck_assert(p[0].weight->requires_grad && p[3].weight->requires_grad);
	ck_assert(!p[2].weight->requires_grad);
	ck_assert(nn_params_find(&ps, "conv.bias")->no_decay);
	ck_assert(!nn_params_find(&ps, "conv.weight")->no_decay);
	nn_seq_proj_free(&p[0]);
	ck_assert(p[0].weight == NULL && p[0].k == 0);
	nn_seq_proj_free(NULL);
	nn_params_free(&ps);
}
END_TEST

/* Sample mean and standard deviation of t. */
static void moments(const struct tensor *t, double *mean, double *sd)
{
	double *v = tu_values(t), s = 0, s2 = 0;
	int64_t n = tensor_numel(t);
	for (int64_t i = 0; i < n; i++)
		s += v[i];
	*mean = s / (double)n;
	for (int64_t i = 0; i < n; i++)
		s2 += (v[i] - *mean) * (v[i] - *mean);
	*sd = sqrt(s2 / (double)(n - 1));
	free(v);
}

START_TEST(test_seq_proj_init_values)
{
	/* linear: N(0, 2/(n+k)) (xavier normal of [k,n]); random: N(0, 1/k);
	 * conv: U(+-1/sqrt(c n/k)). 16384+ samples: sd within 3%. */
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 5), TENSOR_OK);
	struct nn_seq_proj lin, rnd, rndh, conv;
	ck_assert_int_eq(
	    nn_seq_proj_init(&lin, &ps, "l", NN_PROJ_LINEAR, 512, 64, 1, false, 0, false),
	    TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&rnd, &ps, "r", NN_PROJ_RANDOM, 512, 64, 1, false, 0, false),
	    TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&rndh, &ps, "rh", NN_PROJ_RANDOM, 256, 16, 4, true, 0, false),
	    TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&conv, &ps, "c", NN_PROJ_CONV, 64, 8, 1, false, 64, false), TENSOR_OK);
	double mean, sd;
	moments(lin.weight, &mean, &sd);
	ck_assert(fabs(mean) < 0.01 && fabs(sd / sqrt(2.0 / 576) - 1) < 0.03);
	moments(rnd.weight, &mean, &sd);
	ck_assert_msg(fabs(mean) < 0.01 && fabs(sd / sqrt(1.0 / 64) - 1) < 0.03, "sd %g", sd);
	moments(rndh.weight, &mean, &sd);
	ck_assert(fabs(mean) < 0.01 && fabs(sd / sqrt(1.0 / 16) - 1) < 0.03);
	double *w = tu_values(conv.weight), bound = 1 / sqrt(64.0 * 8), mx = 0;
	for (int64_t i = 0; i < tensor_numel(conv.weight); i++)
		mx = fmax(mx, fabs(w[i]));
	ck_assert(mx <= bound && mx > 0.98 * bound);
	free(w);
	/* seeded: the same list seed and name give the same values */
	struct nn_params ps2;
	ck_assert_int_eq(nn_params_init(&ps2, TENSOR_F64, TENSOR_CPU, 5), TENSOR_OK);
	struct nn_seq_proj rnd2;
	ck_assert_int_eq(
	    nn_seq_proj_init(&rnd2, &ps2, "r", NN_PROJ_RANDOM, 512, 64, 1, false, 0, false),
	    TENSOR_OK);
	assert_same(rnd2.weight, rnd.weight, 0);
	nn_params_free(&ps2);
	nn_params_free(&ps);
}
END_TEST

/* One projection against the loops, S of n, f32/f64, contiguous/strided. */
static void check_seq_proj(enum nn_proj_kind kind, bool per_head, int64_t heads, int64_t hx,
			   int64_t n, int64_t k, int64_t S, int64_t c, bool dense)
{
	for (int di = 0; di < 2; di++)
		for (int strided = 0; strided < 2; strided++) {
			enum tensor_dtype dt = di ? TENSOR_F64 : TENSOR_F32;
			struct nn_params ps;
			ck_assert_int_eq(nn_params_init(&ps, dt, TENSOR_CPU, 7), TENSOR_OK);
			struct nn_seq_proj p;
			int rc =
			    nn_seq_proj_init(&p, &ps, "E", kind, n, k, heads, per_head, c, dense);
			ck_assert_msg(rc == TENSOR_OK, "%s", tensor_last_error());
			const int64_t B = 2, ho = per_head ? heads : hx;
			struct tensor *x = tu_rand(dt, 4, (int64_t[]){ B, hx, S, c }, 8);
			double *vx = tu_values(x);
			if (strided)
				x = tu_strided(x);
			struct tensor *y = nn_seq_proj_forward(&p, x);
			ck_assert_msg(y != NULL, "%s %s", nn_proj_kind_name(kind),
				      tensor_last_error());
			tu_assert_shape(y, 4, (int64_t[]){ B, ho, k, c });
			double *want = malloc(sizeof(double) * (size_t)(B * ho * k * c));
			ref_seq_proj(&p, vx, B, hx, S, c, want);
			tu_assert_close(y, want, B * ho * k * c, tu_tol(dt), tu_tol(dt));
			free(want);
			free(vx);
			nn_params_free(&ps);
		}
}

START_TEST(test_seq_proj_forward)
{
	for (int full = 0; full < 2; full++) {
		int64_t S = full ? 12 : 7; /* the first S of n = 12 positions */
		check_seq_proj(NN_PROJ_LINEAR, false, 1, 3, 12, 4, S, 5, false);
		check_seq_proj(NN_PROJ_LINEAR, true, 3, 3, 12, 4, S, 5, false);
		check_seq_proj(NN_PROJ_LINEAR, true, 3, 1, 12, 4, S, 5, false); /* broadcast */
		check_seq_proj(NN_PROJ_RANDOM, false, 1, 2, 12, 5, S, 3, false);
		check_seq_proj(NN_PROJ_RANDOM, true, 2, 2, 12, 5, S, 3, false);
		check_seq_proj(NN_PROJ_CONV, false, 1, 3, 12, 4, S, 5, false);
		check_seq_proj(NN_PROJ_CONV, false, 1, 1, 12, 3, S, 8, true);
		check_seq_proj(NN_PROJ_CONV, false, 1, 2, 12, 12, S, 3, false); /* kernel 1 */
		check_seq_proj(NN_PROJ_CONV, false, 1, 2, 12, 1, S, 3, false);	/* one slot */
		check_seq_proj(NN_PROJ_MEAN, false, 1, 3, 12, 4, S, 5, false);
		check_seq_proj(NN_PROJ_MEAN, false, 1, 2, 12, 6, S, 4, false);
		check_seq_proj(NN_PROJ_MAX, false, 1, 3, 12, 4, S, 5, false);
		check_seq_proj(NN_PROJ_MAX, false, 1, 2, 12, 2, S, 4, false);
	}
	check_seq_proj(NN_PROJ_LINEAR, false, 1, 2, 6, 6, 0, 3, false); /* empty input */
	check_seq_proj(NN_PROJ_MEAN, false, 1, 2, 6, 3, 0, 3, false);
}
END_TEST

START_TEST(test_seq_proj_errors)
{
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	struct nn_seq_proj p;
	tu_assert_error(nn_seq_proj_init(NULL, &ps, "E", NN_PROJ_LINEAR, 8, 4, 1, false, 0, false) <
			    0,
			TENSOR_ERR_ARG, "nn_seq_proj_init", NULL);
	tu_assert_error(nn_seq_proj_init(&p, NULL, "E", NN_PROJ_LINEAR, 8, 4, 1, false, 0, false) <
			    0,
			TENSOR_ERR_ARG, "nn_seq_proj_init", NULL);
	tu_assert_error(nn_seq_proj_init(&p, &ps, NULL, NN_PROJ_LINEAR, 8, 4, 1, false, 0, false) <
			    0,
			TENSOR_ERR_ARG, "nn_seq_proj_init", NULL);
	tu_assert_error(nn_seq_proj_init(&p, &ps, "E", NN_NPROJ, 8, 4, 1, false, 0, false) < 0,
			TENSOR_ERR_ARG, "nn_seq_proj_init", "unknown kind");
	tu_assert_error(nn_seq_proj_init(&p, &ps, "E", NN_PROJ_LINEAR, 8, 9, 1, false, 0, false) <
			    0,
			TENSOR_ERR_ARG, "n 8 -> k 9", "1 <= k <= n");
	tu_assert_error(nn_seq_proj_init(&p, &ps, "E", NN_PROJ_RANDOM, 8, 0, 1, false, 0, false) <
			    0,
			TENSOR_ERR_ARG, "n 8 -> k 0", "1 <= k <= n");
	tu_assert_error(nn_seq_proj_init(&p, &ps, "E", NN_PROJ_LINEAR, 0, 0, 1, false, 0, false) <
			    0,
			TENSOR_ERR_ARG, "nn_seq_proj_init", "n 0");
	const enum nn_proj_kind win[3] = { NN_PROJ_CONV, NN_PROJ_MEAN, NN_PROJ_MAX };
	for (int i = 0; i < 3; i++)
		tu_assert_error(
		    nn_seq_proj_init(&p, &ps, "E", win[i], 10, 4, 1, false, 4, false) < 0,
		    TENSOR_ERR_ARG, "n 10 is not divisible by k 4", nn_proj_kind_name(win[i]));
	tu_assert_error(nn_seq_proj_init(&p, &ps, "E", NN_PROJ_LINEAR, 8, 4, 0, false, 0, false) <
			    0,
			TENSOR_ERR_ARG, "nn_seq_proj_init", "heads 0");
	tu_assert_error(nn_seq_proj_init(&p, &ps, "E", NN_PROJ_CONV, 8, 4, 2, true, 4, false) < 0,
			TENSOR_ERR_ARG, "per-head", "conv");
	tu_assert_error(nn_seq_proj_init(&p, &ps, "E", NN_PROJ_MEAN, 8, 4, 2, true, 4, false) < 0,
			TENSOR_ERR_ARG, "per-head", "mean");
	tu_assert_error(nn_seq_proj_init(&p, &ps, "E", NN_PROJ_CONV, 8, 4, 1, false, 0, false) < 0,
			TENSOR_ERR_ARG, "nn_seq_proj_init", "channels");
	char longname[NN_NAME_MAX];
	memset(longname, 'x', sizeof longname - 3);
	longname[sizeof longname - 3] = 0;
	tu_assert_error(
	    nn_seq_proj_init(&p, &ps, longname, NN_PROJ_LINEAR, 8, 4, 1, false, 0, false) < 0,
	    TENSOR_ERR_ARG, "longer than", NULL);
	ck_assert(p.weight == NULL && p.k == 0);
	ck_assert_int_eq(ps.n, 0);
	ck_assert_int_eq(nn_seq_proj_init(&p, &ps, "E", NN_PROJ_LINEAR, 8, 4, 1, false, 0, false),
			 TENSOR_OK);
	struct nn_seq_proj dup;
	tu_assert_error(nn_seq_proj_init(&dup, &ps, "E", NN_PROJ_LINEAR, 8, 4, 1, false, 0, false) <
			    0,
			TENSOR_ERR_ARG, "E.weight", "already exists");
	ck_assert(dup.weight == NULL);

	/* forward */
	struct nn_seq_proj ph, conv;
	ck_assert_int_eq(nn_seq_proj_init(&ph, &ps, "Eh", NN_PROJ_LINEAR, 8, 4, 3, true, 0, false),
			 TENSOR_OK);
	ck_assert_int_eq(nn_seq_proj_init(&conv, &ps, "C", NN_PROJ_CONV, 8, 4, 1, false, 5, false),
			 TENSOR_OK);
	struct tensor *x3 = tu_rand(TENSOR_F32, 3, (int64_t[]){ 2, 8, 5 }, 1);
	tu_assert_error(!nn_seq_proj_forward(&p, x3), TENSOR_ERR_SHAPE, "nn_seq_proj_forward",
			"x [2,8,5]");
	struct tensor *xl = tu_rand(TENSOR_F32, 4, (int64_t[]){ 2, 3, 9, 5 }, 2);
	tu_assert_error(!nn_seq_proj_forward(&p, xl), TENSOR_ERR_SHAPE, "x [2,3,9,5]",
			"S <= n = 8");
	struct tensor *x2h = tu_rand(TENSOR_F32, 4, (int64_t[]){ 2, 2, 8, 5 }, 3);
	tu_assert_error(!nn_seq_proj_forward(&ph, x2h), TENSOR_ERR_SHAPE, "x [2,2,8,5] has 2 heads",
			"per-head linear projection 3");
	struct tensor *x4c = tu_rand(TENSOR_F32, 4, (int64_t[]){ 2, 3, 8, 4 }, 4);
	tu_assert_error(!nn_seq_proj_forward(&conv, x4c), TENSOR_ERR_SHAPE, "4 channels",
			"[B,H,S,5]");
	struct tensor *x64 = tu_rand(TENSOR_F64, 4, (int64_t[]){ 2, 3, 8, 5 }, 5);
	tu_assert_error(!nn_seq_proj_forward(&p, x64), TENSOR_ERR_DTYPE, "nn_seq_proj_forward",
			NULL);
	struct tensor *xi = tensor_zeros(TENSOR_I32, TENSOR_CPU, 4, (int64_t[]){ 2, 3, 8, 5 });
	tu_assert_error(!nn_seq_proj_forward(&p, xi), TENSOR_ERR_DTYPE, "nn_seq_proj_forward",
			NULL);
	struct nn_seq_proj zero = { 0 };
	struct tensor *x = tu_rand(TENSOR_F32, 4, (int64_t[]){ 2, 3, 8, 5 }, 6);
	tu_assert_error(!nn_seq_proj_forward(&zero, x), TENSOR_ERR_ARG, "nn_seq_proj_forward",
			"not initialised");
	tu_assert_error(!nn_seq_proj_forward(NULL, x), TENSOR_ERR_ARG, "nn_seq_proj_forward", NULL);
	tensor_error(TENSOR_ERR_IO, "earlier failure");
	ck_assert(nn_seq_proj_forward(&p, NULL) == NULL);
	tu_assert_error(true, TENSOR_ERR_IO, "earlier failure", NULL);
	ck_assert(nn_seq_proj_forward(&p, x) != NULL);
	nn_params_free(&ps);
}
END_TEST

/* ---- the module against the loop reference --------------------------------------- */

/* Every kind x sharing mode x shared_kv_head (x dense for conv), with and
 * without a key mask and with T < n, f32 and f64. */
START_TEST(test_linformer_reference)
{
	const int64_t B = 2, dim = 8, H = 2, n = 8, k = 4;
	const int mv[2 * 6] = { 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1 };
	for (int di = 0; di < 2; di++)
		for (int ki = 0; ki < NN_NPROJ; ki++)
			for (int si = 0; si < 4; si++)
				for (int v = 0; v < 4; v++) {
					enum tensor_dtype dt = di ? TENSOR_F64 : TENSOR_F32;
					struct cfg c = {
						dim,	      H,     n,	    k,	 kinds[ki],
						sharings[si], v & 2, v & 1, 0.0, 100 + (uint64_t)v
					};
					if (c.dense && c.kind != NN_PROJ_CONV)
						continue;
					char name[128];
					cfg_str(&c, name, sizeof name);
					struct lf f;
					lf_make(&f, dt, c);
					for (int mi = di ? 0 : 1; mi < 3; mi++) {
						/* no mask T = n (f64 only); mask T = 6; no
						 * mask T = 5, x strided */
						int64_t T = mi == 0 ? n : mi == 1 ? 6 : 5;
						struct tensor *mask =
						    mi == 1 ? mask_i32(B, T, mv) : NULL;
						struct tensor *x = tu_rand(
						    dt, 3, (int64_t[]){ B, T, dim }, 9 + mi);
						double *vx = tu_values(x);
						double *vm = mask ? tu_values(mask) : NULL;
						if (mi == 2)
							x = tu_strided(x);
						struct tensor *y =
						    nn_linformer_forward(&f.m, x, mask);
						ck_assert_msg(y != NULL, "%s: %s", name,
							      tensor_last_error());
						tu_assert_shape(y, 3, (int64_t[]){ B, T, dim });
						double *want = ref_linformer(&f.m, vx, vm, B, T);
						double *got = tu_values(y);
						for (int64_t i = 0; i < B * T * dim; i++)
							ck_assert_msg(
							    fabs(got[i] - want[i]) <=
								tu_tol(dt) * (1 + fabs(want[i])),
							    "%s mask %d [%lld]: %g vs %g", name, mi,
							    (long long)i, got[i], want[i]);
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
}

START_TEST(test_equiv_identity)
{
	/* k = n, E = F = identity: exactly standard attention (T = n, no mask) */
	const int64_t B = 2, dim = 12, H = 3, n = 7;
	const enum nn_proj_kind ks[2] = { NN_PROJ_LINEAR, NN_PROJ_RANDOM };
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
					assert_same(got, want, di ? 1e-12 : 2e-6);
					lf_drop(&f);
					ag_tape_reset();
					nn_params_free(&ps);
				}
}
END_TEST

/* Conv weight [c,c,1] = identity, bias 0. */
static void set_conv_identity(const struct nn_seq_proj *p)
{
	ck_assert_int_eq(tensor_fill_(p->bias, 0.0), TENSOR_OK);
	int64_t c = p->channels;
	struct tensor *w = tensor_view(p->weight, 2, (int64_t[]){ c, c });
	ck_assert_int_eq(tensor_fill_(w, 0.0), TENSOR_OK);
	for (int64_t i = 0; i < c; i++)
		ck_assert_int_eq(
		    tensor_fill_(tensor_narrow(tensor_narrow(w, 0, i, 1), 1, i, 1), 1.0),
		    TENSOR_OK);
}

START_TEST(test_equiv_kernel1)
{
	/* Pooling with kernel 1 (k = n) is standard attention, padding and T < n
	 * included (its slots are the positions, masked as they are); so is a
	 * conv with an identity kernel, per head or dense. */
	const int64_t B = 3, dim = 8, H = 2, n = 6;
	const int mv[3 * 5] = { 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 0 };
	struct {
		enum nn_proj_kind kind;
		bool dense, skv;
	} cases[] = {
		{ NN_PROJ_MEAN, false, false }, { NN_PROJ_MAX, false, false },
		{ NN_PROJ_CONV, false, false }, { NN_PROJ_CONV, true, false },
		{ NN_PROJ_MEAN, false, true },
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
				if (cases[ci].kind == NN_PROJ_CONV) {
					set_conv_identity(&f.m.e);
					set_conv_identity(&f.m.f);
				}
				int64_t T = mi == 2 ? n : 5;
				struct tensor *mask = mi == 1 ? mask_i32(B, T, mv) : NULL;
				struct tensor *x = tu_rand(dt, 3, (int64_t[]){ B, T, dim }, 6);
				struct tensor *want = nn_mha_forward(&a, x, mask, false);
				struct tensor *got = nn_linformer_forward(&f.m, x, mask);
				assert_same(got, want, di ? 1e-12 : 2e-6);
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
	for (int ki = 0; ki < NN_NPROJ; ki++)
		for (int si = 0; si < 4; si++)
			for (int v = 0; v < 4; v++) {
				struct cfg c = { dim,	       H,     n,     4,	  kinds[ki],
						 sharings[si], v & 2, v & 1, 0.0, 7 };
				if (c.dense && c.kind != NN_PROJ_CONV)
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
							    t >= lens[li][b] ? 1 + (int)t : 0;
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
						    tensor_narrow(y, 0, b, 1), 1, 0, len);
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
	int mv[2 * 6] = { 0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1 };
	for (int ki = 0; ki < NN_NPROJ; ki++) {
		struct lf f;
		lf_make(&f, TENSOR_F64,
			(struct cfg){ dim, 2, 8, 4, kinds[ki], NN_SHARE_HEADWISE, false, false, 0.0,
				      9 });
		struct tensor *x = tu_rand(TENSOR_F64, 3, (int64_t[]){ B, T, dim }, 10);
		struct tensor *x2 = tensor_clone(x);
		for (int64_t b = 0; b < B; b++)
			for (int64_t t = 0; t < T; t++)
				if (mv[b * T + t])
					ck_assert_int_eq(
					    tensor_fill_(
						tensor_narrow(tensor_narrow(x2, 0, b, 1), 1, t, 1),
						t % 2 ? NAN : 1e6 * (double)(t + 1)),
					    TENSOR_OK);
		struct tensor *m = mask_i32(B, T, mv);
		struct tensor *y = nn_linformer_forward(&f.m, x, m);
		struct tensor *y2 = nn_linformer_forward(&f.m, x2, m);
		assert_same(tensor_narrow(tensor_narrow(y2, 0, 0, 1), 1, 0, 4),
			    tensor_narrow(tensor_narrow(y, 0, 0, 1), 1, 0, 4), 1e-12);
		assert_same(tensor_narrow(tensor_narrow(y2, 0, 1, 1), 1, 0, 2),
			    tensor_narrow(tensor_narrow(y, 0, 1, 1), 1, 0, 2), 1e-12);
		lf_drop(&f);
	}
}
END_TEST

/* ---- shapes and parameter counts -------------------------------------------------- */

START_TEST(test_shapes_and_counts)
{
	const int64_t B = 2, T = 10, dim = 12, H = 3, n = 12, k = 4, d = dim / H;
	for (int ki = 0; ki < NN_NPROJ; ki++)
		for (int si = 0; si < 4; si++)
			for (int v = 0; v < 4; v++) {
				struct cfg c = { dim,	       H,     n,     k,	  kinds[ki],
						 sharings[si], v & 2, v & 1, 0.1, 11 };
				if (c.dense && c.kind != NN_PROJ_CONV)
					continue;
				char name[128];
				cfg_str(&c, name, sizeof name);
				struct lf f;
				lf_make(&f, TENSOR_F32, c);
				int64_t kvd = c.skv ? d : dim, ch = c.dense ? kvd : d;
				bool per_head =
				    c.sharing == NN_SHARE_NONE &&
				    (c.kind == NN_PROJ_LINEAR || c.kind == NN_PROJ_RANDOM);
				int64_t one = proj_count(c.kind, per_head, H, n, k, ch);
				int nproj = c.sharing == NN_SHARE_LAYERWISE ? 1
					    : c.sharing == NN_SHARE_KV	    ? 1
									    : 2;
				int64_t want =
				    2 * (dim * dim + dim) + 2 * (kvd * dim + kvd) + nproj * one;
				ck_assert_msg(nn_params_count(&f.ps) == want,
					      "%s: %lld params, want %lld", name,
					      (long long)nn_params_count(&f.ps), (long long)want);
				tu_assert_shape(f.m.k_proj.weight, 2, (int64_t[]){ kvd, dim });
				tu_assert_shape(f.m.v_proj.bias, 1, (int64_t[]){ kvd });
				tu_assert_shape(f.m.q_proj.weight, 2, (int64_t[]){ dim, dim });
				bool has_w = c.kind != NN_PROJ_MEAN && c.kind != NN_PROJ_MAX;
				bool own = c.sharing != NN_SHARE_LAYERWISE;
				bool has_f = own && c.sharing != NN_SHARE_KV;
				ck_assert_msg((nn_params_find(&f.ps, "attn.E.weight") != NULL) ==
						  (has_w && own),
					      "%s", name);
				ck_assert((nn_params_find(&f.ps, "attn.F.weight") != NULL) ==
					  (has_w && has_f));
				ck_assert((nn_params_find(&f.ps, "attn.E.bias") != NULL) ==
					  (c.kind == NN_PROJ_CONV && own));
				ck_assert((nn_params_find(&f.ps, "proj.weight") != NULL) ==
					  (has_w && !own));
				/* which projection is used for keys and values */
				ck_assert(f.m.e_used == (own ? &f.m.e : &f.shared));
				ck_assert(f.m.f_used == (!own	 ? &f.shared
							 : has_f ? &f.m.f
								 : &f.m.e));
				if (has_w && own) {
					struct tensor *w = f.m.e.weight;
					if (c.kind == NN_PROJ_CONV)
						tu_assert_shape(w, 3, (int64_t[]){ ch, ch, n / k });
					else if (per_head)
						tu_assert_shape(w, 3, (int64_t[]){ H, k, n });
					else
						tu_assert_shape(w, 2, (int64_t[]){ k, n });
					ck_assert(w->requires_grad == (c.kind != NN_PROJ_RANDOM));
				}
				ck_assert(f.m.n == n && f.m.k == k && f.m.heads == H &&
					  f.m.dim == dim && f.m.sharing == c.sharing &&
					  f.m.shared_kv_head == c.skv && !f.m.sequential_heads);
				ck_assert(f.m.dropout.p == 0.1);
				struct tensor *x =
				    tu_rand(TENSOR_F32, 3, (int64_t[]){ B, T, dim }, 12);
				struct tensor *y = nn_linformer_forward(&f.m, x, NULL);
				ck_assert_msg(y != NULL, "%s: %s", name, tensor_last_error());
				tu_assert_shape(y, 3, (int64_t[]){ B, T, dim });
				lf_drop(&f);
			}
}
END_TEST

START_TEST(test_conv_dense_vs_per_head)
{
	/* per head: one [d,d,n/k] conv shared by the heads; dense: one [dim,dim,n/k]
	 * conv over all channels before the head split */
	const int64_t dim = 16, H = 4, n = 16, k = 4, d = 4;
	struct lf ph, de;
	lf_make(&ph, TENSOR_F32,
		(struct cfg){ dim, H, n, k, NN_PROJ_CONV, NN_SHARE_HEADWISE, false, false, 0, 1 });
	lf_make(&de, TENSOR_F32,
		(struct cfg){ dim, H, n, k, NN_PROJ_CONV, NN_SHARE_HEADWISE, true, false, 0, 1 });
	tu_assert_shape(ph.m.e.weight, 3, (int64_t[]){ d, d, n / k });
	tu_assert_shape(ph.m.f.bias, 1, (int64_t[]){ d });
	tu_assert_shape(de.m.e.weight, 3, (int64_t[]){ dim, dim, n / k });
	tu_assert_shape(de.m.f.bias, 1, (int64_t[]){ dim });
	ck_assert(!ph.m.e.dense && de.m.e.dense && de.m.e.channels == dim);
	int64_t base = 4 * (dim * dim + dim);
	ck_assert_int_eq(nn_params_count(&ph.ps), base + 2 * (d * d * (n / k) + d));
	ck_assert_int_eq(nn_params_count(&de.ps), base + 2 * (dim * dim * (n / k) + dim));
	/* the two really differ: dense mixes heads, so changing one head's keys
	 * moves the other heads' projected keys */
	struct tensor *kin = tu_rand(TENSOR_F32, 4, (int64_t[]){ 1, 1, n, dim }, 2);
	struct tensor *k2 = tensor_clone(kin);
	ck_assert_int_eq(tensor_fill_(tensor_narrow(k2, 3, 0, d), 0.0), TENSOR_OK);
	struct tensor *a = nn_seq_proj_forward(&de.m.e, kin), *b = nn_seq_proj_forward(&de.m.e, k2);
	double *va = tu_values(tensor_narrow(a, 3, d, dim - d)),
	       *vb = tu_values(tensor_narrow(b, 3, d, dim - d));
	bool moved = false;
	for (int64_t i = 0; i < k * (dim - d); i++)
		moved |= fabs(va[i] - vb[i]) > 1e-4;
	ck_assert(moved);
	free(va);
	free(vb);
	lf_drop(&ph);
	lf_drop(&de);
}
END_TEST

START_TEST(test_shared_kv_head)
{
	/* one key/value head: every query head sees the same projected keys, so
	 * swapping two query heads' weights swaps their outputs before out_proj */
	const int64_t B = 2, T = 8, dim = 8, H = 2, d = 4;
	for (int ki = 0; ki < NN_NPROJ; ki++) {
		struct lf f;
		lf_make(&f, TENSOR_F64,
			(struct cfg){ dim, H, 8, 4, kinds[ki], NN_SHARE_NONE, false, true, 0, 13 });
		tu_assert_shape(f.m.k_proj.weight, 2, (int64_t[]){ d, dim });
		tu_assert_shape(f.m.v_proj.weight, 2, (int64_t[]){ d, dim });
		struct tensor *x = tu_rand(TENSOR_F64, 3, (int64_t[]){ B, T, dim }, 14);
		/* out_proj = identity exposes the merged heads */
		struct tensor *ow = f.m.out_proj.weight;
		ck_assert_int_eq(tensor_fill_(ow, 0), TENSOR_OK);
		ck_assert_int_eq(tensor_fill_(f.m.out_proj.bias, 0), TENSOR_OK);
		for (int64_t i = 0; i < dim; i++)
			ck_assert_int_eq(
			    tensor_fill_(tensor_narrow(tensor_narrow(ow, 0, i, 1), 1, i, 1), 1),
			    TENSOR_OK);
		if (kinds[ki] == NN_PROJ_LINEAR || kinds[ki] == NN_PROJ_RANDOM) {
			/* per-head E, F (sharing none): make both heads' projections
			 * equal so the heads are interchangeable */
			for (int p = 0; p < 2; p++) {
				struct tensor *w = p ? f.m.f.weight : f.m.e.weight;
				ck_assert_int_eq(tensor_copy_(tensor_narrow(w, 0, 1, 1),
							      tensor_narrow(w, 0, 0, 1)),
						 TENSOR_OK);
			}
		}
		struct tensor *y = nn_linformer_forward(&f.m, x, NULL);
		ag_tape_reset(); /* the weights may change now */
		struct tensor *qw = tensor_clone(f.m.q_proj.weight),
			      *qb = tensor_clone(f.m.q_proj.bias);
		ck_assert_int_eq(tensor_copy_(tensor_narrow(f.m.q_proj.weight, 0, 0, d),
					      tensor_narrow(qw, 0, d, d)),
				 TENSOR_OK);
		ck_assert_int_eq(tensor_copy_(tensor_narrow(f.m.q_proj.weight, 0, d, d),
					      tensor_narrow(qw, 0, 0, d)),
				 TENSOR_OK);
		ck_assert_int_eq(tensor_copy_(tensor_narrow(f.m.q_proj.bias, 0, 0, d),
					      tensor_narrow(qb, 0, d, d)),
				 TENSOR_OK);
		ck_assert_int_eq(tensor_copy_(tensor_narrow(f.m.q_proj.bias, 0, d, d),
					      tensor_narrow(qb, 0, 0, d)),
				 TENSOR_OK);
		struct tensor *y2 = nn_linformer_forward(&f.m, x, NULL);
		assert_same(tensor_narrow(y2, 2, 0, d), tensor_narrow(y, 2, d, d), 1e-12);
		assert_same(tensor_narrow(y2, 2, d, d), tensor_narrow(y, 2, 0, d), 1e-12);
		lf_drop(&f);
	}
}
END_TEST

START_TEST(test_layerwise)
{
	/* Two layers on one projection: it is their E and F, it is registered
	 * once (by the caller), and its gradient sums both layers' uses. */
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F64, TENSOR_CPU, 15), TENSOR_OK);
	struct nn_seq_proj sh;
	ck_assert_int_eq(
	    nn_seq_proj_init(&sh, &ps, "proj", NN_PROJ_LINEAR, 6, 3, 2, false, 0, false),
	    TENSOR_OK);
	struct nn_linformer l0, l1;
	ck_assert_int_eq(nn_linformer_init(&l0, &ps, "layers.0.attn", 4, 2, 6, 3, NN_PROJ_LINEAR,
					   NN_SHARE_LAYERWISE, false, false, 0, &sh),
			 TENSOR_OK);
	ck_assert_int_eq(nn_linformer_init(&l1, &ps, "layers.1.attn", 4, 2, 6, 3, NN_PROJ_LINEAR,
					   NN_SHARE_LAYERWISE, false, false, 0, &sh),
			 TENSOR_OK);
	ck_assert(l0.e_used == &sh && l0.f_used == &sh && l1.e_used == &sh);
	ck_assert(l0.e.weight == NULL && l0.f.weight == NULL);
	ck_assert_int_eq(ps.n, 1 + 2 * 8);
	struct tensor *x = tu_rand(TENSOR_F64, 3, (int64_t[]){ 2, 5, 4 }, 16);
	struct tensor *y = nn_linformer_forward(&l1, nn_linformer_forward(&l0, x, NULL), NULL);
	ck_assert_int_eq(ag_backward(ag_sum(y, 0, NULL, false), NULL), TENSOR_OK);
	double *g = tu_values(sh.weight->grad);
	/* columns 5 of E see no input (T = 5 of n = 6): zero gradient there;
	 * the others are used */
	double used = 0;
	for (int64_t j = 0; j < 3; j++) {
		ck_assert(g[j * 6 + 5] == 0);
		for (int64_t s = 0; s < 5; s++)
			used += fabs(g[j * 6 + s]);
	}
	ck_assert(used > 0);
	free(g);
	ag_tape_reset();
	nn_linformer_free(&l0);
	nn_linformer_free(&l1);
	nn_params_free(&ps);
}
END_TEST

START_TEST(test_random_fixed_under_adamw)
{
	/* The fixed random projection is a parameter (checkpoints keep it) that
	 * optimizers skip: after packing and AdamW steps with weight decay it is
	 * unchanged while the trained weights move. */
	struct lf f;
	lf_make(&f, TENSOR_F32,
		(struct cfg){ 8, 2, 8, 4, NN_PROJ_RANDOM, NN_SHARE_NONE, false, false, 0, 26 });
	ck_assert_int_eq(nn_params_pack(&f.ps), TENSOR_OK);
	struct tensor *e0 = tensor_clone(f.m.e.weight), *f0 = tensor_clone(f.m.f.weight);
	struct tensor *q0 = tensor_clone(f.m.q_proj.weight);
	struct nn_adamw opt;
	ck_assert_int_eq(nn_adamw_init(&opt, &f.ps, 0.1, 0.9, 0.999, 1e-8, 0.1), TENSOR_OK);
	opt.decay_all = true;
	struct tensor *x = tu_rand(TENSOR_F32, 3, (int64_t[]){ 2, 8, 8 }, 27);
	for (int step = 0; step < 2; step++) {
		ck_assert_int_eq(nn_params_zero_grad(&f.ps), TENSOR_OK);
		struct tensor *y = nn_linformer_forward(&f.m, x, NULL);
		ck_assert_int_eq(ag_backward(ag_sum(ag_mul(y, y), 0, NULL, false), NULL),
				 TENSOR_OK);
		ck_assert_int_eq(nn_adamw_step(&opt), TENSOR_OK);
	}
	assert_same(f.m.e.weight, e0, 0);
	assert_same(f.m.f.weight, f0, 0);
	double *a = tu_values(f.m.q_proj.weight), *b = tu_values(q0), diff = 0;
	for (int64_t i = 0; i < 64; i++)
		diff = fmax(diff, fabs(a[i] - b[i]));
	ck_assert(diff > 1e-3);
	free(a);
	free(b);
	nn_adamw_free(&opt);
	lf_drop(&f);
}
END_TEST

START_TEST(test_random_in_checkpoint)
{
	/* The random projection is saved and restored like any weight. */
	char path[] = "/tmp/test_nn_linformer_XXXXXX";
	int fd = mkstemp(path);
	ck_assert(fd >= 0);
	close(fd);
	struct lf a, b;
	lf_make(&a, TENSOR_F32,
		(struct cfg){ 8, 2, 8, 4, NN_PROJ_RANDOM, NN_SHARE_HEADWISE, false, false, 0, 28 });
	lf_make(&b, TENSOR_F32,
		(struct cfg){ 8, 2, 8, 4, NN_PROJ_RANDOM, NN_SHARE_HEADWISE, false, false, 0, 29 });
	double *va = tu_values(a.m.e.weight), *vb = tu_values(b.m.e.weight);
	ck_assert(va[0] != vb[0]); /* another seed, other values */
	free(va);
	free(vb);
	int rc = nn_checkpoint_save(path, &a.ps, NULL, NULL, 0);
	ck_assert_msg(rc == TENSOR_OK, "%s", tensor_last_error());
	rc = nn_checkpoint_load(path, &b.ps, NULL, NULL);
	ck_assert_msg(rc == TENSOR_OK, "%s", tensor_last_error());
	assert_same(b.m.e.weight, a.m.e.weight, 0);
	assert_same(b.m.f.weight, a.m.f.weight, 0);
	ck_assert(!b.m.e.weight->requires_grad); /* still fixed */
	struct tensor *x = tu_rand(TENSOR_F32, 3, (int64_t[]){ 2, 6, 8 }, 30);
	assert_same(nn_linformer_forward(&b.m, x, NULL), nn_linformer_forward(&a.m, x, NULL), 0);
	unlink(path);
	lf_drop(&a);
	lf_drop(&b);
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
	struct tensor *mask = mask_i32(B, 3, (const int[]){ 0, 0, 1, 0, 1, 1 });
	/* every kind, masked with T < n and unmasked with T = n (x strided); the
	 * shared learned projections without a shared key/value head take the
	 * sequence-first order (E x, then the k/v weights), E = F included */
	const struct {
		enum nn_proj_kind kind;
		enum nn_proj_sharing sharing;
		bool dense, skv, seq, masked;
	} cases[] = {
		{ NN_PROJ_LINEAR, NN_SHARE_HEADWISE, false, false, false, false },
		{ NN_PROJ_LINEAR, NN_SHARE_NONE, false, true, true, true },
		{ NN_PROJ_RANDOM, NN_SHARE_NONE, false, false, false, true },
		{ NN_PROJ_RANDOM, NN_SHARE_KV, false, true, false, false },
		{ NN_PROJ_CONV, NN_SHARE_HEADWISE, false, false, false, true },
		{ NN_PROJ_CONV, NN_SHARE_HEADWISE, false, true, false, false },
		{ NN_PROJ_CONV, NN_SHARE_KV, true, false, true, true },
		{ NN_PROJ_MEAN, NN_SHARE_HEADWISE, false, false, false, true },
		{ NN_PROJ_MEAN, NN_SHARE_NONE, false, true, true, false },
		{ NN_PROJ_MAX, NN_SHARE_HEADWISE, false, true, false, true },
		{ NN_PROJ_MAX, NN_SHARE_KV, false, false, false, false },
		{ NN_PROJ_LINEAR, NN_SHARE_LAYERWISE, false, false, false, true },
		{ NN_PROJ_CONV, NN_SHARE_LAYERWISE, true, false, false, false },
		{ NN_PROJ_LINEAR, NN_SHARE_KV, false, false, true, true },
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
			ck_assert(v->requires_grad == !(c.kind == NN_PROJ_RANDOM && is_proj));
		}
		tensor_free(x->grad);
		lf_drop(&f);
	}
}
END_TEST

/* ---- batched vs sequential heads, dropout, memory ----------------------------------- */

START_TEST(test_sequential_equals_batched)
{
	const int64_t B = 2, T = 7, dim = 12, H = 3;
	struct tensor *mask =
	    mask_i32(B, T, (const int[]){ 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1, 1 });
	for (int di = 0; di < 2; di++)
		for (int ki = 0; ki < NN_NPROJ; ki++)
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
					assert_same(ys, y, di ? 1e-12 : 1e-6);
					assert_same(yn, y, di ? 1e-12 : 1e-6);
				}
				lf_drop(&f);
			}
}
END_TEST

START_TEST(test_dropout)
{
	const int64_t B = 2, T = 8, dim = 8;
	for (int ki = 0; ki < NN_NPROJ; ki++) {
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
			assert_same(nn_linformer_forward(&f.m, x, NULL), y0, 1e-14);
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
	ag_no_grad_begin();
	tensor_scope_begin();
	size_t base = tensor_mem_stats(TENSOR_CPU).live_bytes;
	tensor_mem_reset_peak(TENSOR_CPU);
	struct tensor *y =
	    lf ? nn_linformer_forward(lf, x, NULL) : nn_mha_forward(mha, x, NULL, false);
	ck_assert_msg(y != NULL, "%s", tensor_last_error());
	size_t peak = tensor_mem_stats(TENSOR_CPU).peak_bytes - base;
	tensor_scope_end();
	ag_no_grad_end();
	return peak;
}

START_TEST(test_memory_long_n)
{
	/* At n = 1024 the n x n scores dominate standard attention; Linformer's
	 * are n x k: its peak must stay well below one [B,H,n,n] tensor. */
	const int64_t B = 1, n = 1024, dim = 32, H = 4, k = 32;
	tensor_set_num_threads(0);
	struct nn_params ps;
	struct nn_mha a;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 23), TENSOR_OK);
	ck_assert_int_eq(nn_mha_init(&a, &ps, "std", dim, H, 0), TENSOR_OK);
	struct tensor *x = tu_rand(TENSOR_F32, 3, (int64_t[]){ B, n, dim }, 24);
	size_t scores = sizeof(float) * (size_t)(B * H * n * n);
	size_t std_peak = peak_of(NULL, &a, x);
	ck_assert_msg(std_peak >= scores, "standard peak %zu", std_peak);
	for (int ki = 0; ki < NN_NPROJ; ki++) {
		struct lf f;
		lf_make(&f, TENSOR_F32,
			(struct cfg){ dim, H, n, k, kinds[ki], NN_SHARE_HEADWISE, false, false, 0,
				      25 });
		size_t lpeak = peak_of(&f.m, NULL, x);
		ck_assert_msg(lpeak < scores / 4, "%s: peak %zu vs one n x n score tensor %zu",
			      nn_proj_kind_name(kinds[ki]), lpeak, scores);
		lf_drop(&f);
	}
	ag_tape_reset();
	nn_params_free(&ps);
}
END_TEST

/* ---- errors ------------------------------------------------------------------------ */

START_TEST(test_init_errors)
{
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	struct nn_linformer m;
	const enum nn_proj_kind L = NN_PROJ_LINEAR;
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
	const enum nn_proj_kind win[3] = { NN_PROJ_CONV, NN_PROJ_MEAN, NN_PROJ_MAX };
	for (int i = 0; i < 3; i++)
		tu_assert_error(
		    nn_linformer_init(&m, &ps, "a", 8, 2, 12, 5, win[i], HW, 0, 0, 0, NULL) < 0,
		    TENSOR_ERR_ARG, "n 12 is not divisible by k 5", nn_proj_kind_name(win[i]));
	/* a learned or random projection takes any k <= n */
	tu_assert_error(nn_linformer_init(&m, &ps, "a", 8, 2, 8, 4, NN_NPROJ, HW, 0, 0, 0, NULL) <
			    0,
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
	    nn_seq_proj_init(&shc, &ps, "projc", NN_PROJ_CONV, 8, 4, 1, false, 4, false),
	    TENSOR_OK);
	tu_assert_error(nn_linformer_init(&m, &ps, "a", 8, 2, 8, 4, L, HW, 0, 0, 0, &sh) < 0,
			TENSOR_ERR_ARG, "shared projection was passed with headwise",
			"only layerwise");
	tu_assert_error(
	    nn_linformer_init(&m, &ps, "a", 8, 2, 8, 2, L, NN_SHARE_LAYERWISE, 0, 0, 0, &sh) < 0,
	    TENSOR_ERR_ARG, "layerwise projection is linear n 8 -> k 4", "needs linear n 8 -> k 2");
	tu_assert_error(nn_linformer_init(&m, &ps, "a", 8, 2, 8, 4, NN_PROJ_RANDOM,
					  NN_SHARE_LAYERWISE, 0, 0, 0, &sh) < 0,
			TENSOR_ERR_ARG, "layerwise projection is linear", "needs random");
	/* conv channels: head dim 4 matches, dense (8) does not */
	tu_assert_error(nn_linformer_init(&m, &ps, "a", 8, 2, 8, 4, NN_PROJ_CONV,
					  NN_SHARE_LAYERWISE, true, 0, 0, &shc) < 0,
			TENSOR_ERR_ARG, "(4 channels)", "(8 channels, dense)");
	ck_assert_int_eq(ps.n, 3);
	ck_assert_int_eq(nn_linformer_init(&m, &ps, "a", 8, 2, 8, 4, NN_PROJ_CONV,
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
		(struct cfg){ 8, 2, 8, 4, NN_PROJ_CONV, NN_SHARE_HEADWISE, false, false, 0, 1 });
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
	struct tensor *bad = mask_i32(2, 3, (const int[]){ 0, 0, 0, 0, 0, 0 });
	tu_assert_error(!nn_linformer_forward(&f.m, x, bad), TENSOR_ERR_SHAPE,
			"nn_linformer_forward", "key_mask [2,3] must be [B,T] = [2,4]");
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

/* The modules here are tiny: run them on one thread. Multi-threaded BLIS
 * on matrices this small only adds barrier waits, which on a loaded machine
 * cost milliseconds per GEMM (test_memory_long_n uses the default). */
static void one_thread(void)
{
	tensor_set_num_threads(1);
}

static void default_threads(void)
{
	tensor_set_num_threads(0);
}

int main(void)
{
	Suite *s = suite_create("nn_linformer");
	TCase *tc = tu_tcase("seq_proj");
	tcase_add_checked_fixture(tc, one_thread, default_threads);
	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_seq_proj_params);
	tcase_add_test(tc, test_seq_proj_init_values);
	tcase_add_test(tc, test_seq_proj_forward);
	tcase_add_test(tc, test_seq_proj_errors);
	suite_add_tcase(s, tc);
	tc = tu_tcase("linformer");
	tcase_add_checked_fixture(tc, one_thread, default_threads);
	tcase_add_test(tc, test_linformer_reference);
	tcase_add_test(tc, test_equiv_identity);
	tcase_add_test(tc, test_equiv_kernel1);
	tcase_add_test(tc, test_equiv_padded_batch);
	tcase_add_test(tc, test_padding_values_ignored);
	tcase_add_test(tc, test_shapes_and_counts);
	tcase_add_test(tc, test_conv_dense_vs_per_head);
	tcase_add_test(tc, test_shared_kv_head);
	tcase_add_test(tc, test_layerwise);
	tcase_add_test(tc, test_random_fixed_under_adamw);
	tcase_add_test(tc, test_random_in_checkpoint);
	tcase_add_test(tc, test_gradients);
	tcase_add_test(tc, test_sequential_equals_batched);
	tcase_add_test(tc, test_dropout);
	tcase_add_test(tc, test_memory_long_n);
	tcase_add_test(tc, test_init_errors);
	tcase_add_test(tc, test_forward_errors);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
