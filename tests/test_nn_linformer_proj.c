/* Linformer sequence projections and their configurations: nn_seq_proj
 * against naive loops, names, shapes and parameter counts of every kind x
 * sharing mode, dense vs per-head conv, one shared key/value head, layerwise
 * sharing, the fixed random projection under AdamW and in checkpoints. */
#define _XOPEN_SOURCE 700 /* mkstemp */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "linformer_common.h"

/* ---- helpers --------------------------------------------------------------------- */

/* Parameters of one projection, as documented. */
static int64_t proj_count(enum nn_attn_kind kind, bool per_head, int64_t heads, int64_t n,
			  int64_t k, int64_t c)
{
	switch (kind) {
	case NN_ATTN_LINEAR:
	case NN_ATTN_RANDOM: return (per_head ? heads : 1) * k * n;
	case NN_ATTN_CONV: return c * c * (n / k) + c;
	default: return 0;
	}
}

/* ---- names ----------------------------------------------------------------------- */

START_TEST(test_names)
{
	const char *kn[NKINDS] = { "linear", "conv", "mean", "max", "random" };
	for (int i = 0; i < NKINDS; i++) {
		ck_assert_str_eq(nn_attn_kind_name(kinds[i]), kn[i]);
		ck_assert_int_eq(nn_attn_kind_parse(kn[i]), kinds[i]);
	}
	const char *sn[4] = { "none", "headwise", "kv", "layerwise" };
	for (int i = 0; i < 4; i++) {
		ck_assert_str_eq(nn_proj_sharing_name(sharings[i]), sn[i]);
		ck_assert_int_eq(nn_proj_sharing_parse(sn[i]), sharings[i]);
	}
	ck_assert_int_eq(nn_proj_sharing_parse("key-value"), NN_SHARE_KV);
	ck_assert_int_eq(nn_attn_kind_parse("Linear"), -1);
	ck_assert_int_eq(nn_attn_kind_parse(""), -1);
	ck_assert_int_eq(nn_attn_kind_parse(NULL), -1);
	ck_assert_int_eq(nn_proj_sharing_parse("heads"), -1);
	ck_assert_int_eq(nn_proj_sharing_parse(NULL), -1);
	ck_assert_str_eq(nn_attn_kind_name(NN_ATTN_STANDARD), "standard");
	ck_assert_int_eq(nn_attn_kind_parse("standard"), NN_ATTN_STANDARD);
	ck_assert_str_eq(nn_attn_kind_name(NN_NATTN), "unknown");
	ck_assert_str_eq(nn_attn_kind_name((enum nn_attn_kind) - 1), "unknown");
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
	    nn_seq_proj_init(&p[0], &ps, "lin", NN_ATTN_LINEAR, 12, 3, 4, false, 0, false),
	    TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&p[1], &ps, "linh", NN_ATTN_LINEAR, 12, 3, 4, true, 0, false),
	    TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&p[2], &ps, "rnd", NN_ATTN_RANDOM, 12, 5, 4, true, 0, false),
	    TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&p[3], &ps, "conv", NN_ATTN_CONV, 12, 3, 4, false, 6, false),
	    TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&p[4], &ps, "dense", NN_ATTN_CONV, 12, 4, 4, false, 24, true),
	    TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&p[5], &ps, "mean", NN_ATTN_MEAN, 12, 6, 4, false, 0, true),
	    TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&p[6], &ps, "max", NN_ATTN_MAX, 12, 12, 4, false, 0, false),
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
	ck_assert(p[1].per_head && p[1].heads == 4 && p[1].kind == NN_ATTN_LINEAR);
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
	    nn_seq_proj_init(&lin, &ps, "l", NN_ATTN_LINEAR, 512, 64, 1, false, 0, false),
	    TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&rnd, &ps, "r", NN_ATTN_RANDOM, 512, 64, 1, false, 0, false),
	    TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&rndh, &ps, "rh", NN_ATTN_RANDOM, 256, 16, 4, true, 0, false),
	    TENSOR_OK);
	ck_assert_int_eq(
	    nn_seq_proj_init(&conv, &ps, "c", NN_ATTN_CONV, 64, 8, 1, false, 64, false), TENSOR_OK);
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
	    nn_seq_proj_init(&rnd2, &ps2, "r", NN_ATTN_RANDOM, 512, 64, 1, false, 0, false),
	    TENSOR_OK);
	tu_assert_same(rnd2.weight, rnd.weight, 0);
	nn_params_free(&ps2);
	nn_params_free(&ps);
}
END_TEST

/* One projection against the loops, S of n, f32/f64, contiguous/strided. */
static void check_seq_proj(enum nn_attn_kind kind, bool per_head, int64_t heads, int64_t hx,
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
			ck_assert_msg(y != NULL, "%s %s", nn_attn_kind_name(kind),
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
		check_seq_proj(NN_ATTN_LINEAR, false, 1, 3, 12, 4, S, 5, false);
		check_seq_proj(NN_ATTN_LINEAR, true, 3, 3, 12, 4, S, 5, false);
		check_seq_proj(NN_ATTN_LINEAR, true, 3, 1, 12, 4, S, 5, false); /* broadcast */
		check_seq_proj(NN_ATTN_RANDOM, false, 1, 2, 12, 5, S, 3, false);
		check_seq_proj(NN_ATTN_RANDOM, true, 2, 2, 12, 5, S, 3, false);
		check_seq_proj(NN_ATTN_CONV, false, 1, 3, 12, 4, S, 5, false);
		check_seq_proj(NN_ATTN_CONV, false, 1, 1, 12, 3, S, 8, true);
		check_seq_proj(NN_ATTN_CONV, false, 1, 2, 12, 12, S, 3, false); /* kernel 1 */
		check_seq_proj(NN_ATTN_CONV, false, 1, 2, 12, 1, S, 3, false);	/* one slot */
		check_seq_proj(NN_ATTN_MEAN, false, 1, 3, 12, 4, S, 5, false);
		check_seq_proj(NN_ATTN_MEAN, false, 1, 2, 12, 6, S, 4, false);
		check_seq_proj(NN_ATTN_MAX, false, 1, 3, 12, 4, S, 5, false);
		check_seq_proj(NN_ATTN_MAX, false, 1, 2, 12, 2, S, 4, false);
	}
	check_seq_proj(NN_ATTN_LINEAR, false, 1, 2, 6, 6, 0, 3, false); /* empty input */
	check_seq_proj(NN_ATTN_MEAN, false, 1, 2, 6, 3, 0, 3, false);
}
END_TEST

START_TEST(test_seq_proj_errors)
{
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	struct nn_seq_proj p;
	tu_assert_error(nn_seq_proj_init(NULL, &ps, "E", NN_ATTN_LINEAR, 8, 4, 1, false, 0, false) <
			    0,
			TENSOR_ERR_ARG, "nn_seq_proj_init", NULL);
	tu_assert_error(nn_seq_proj_init(&p, NULL, "E", NN_ATTN_LINEAR, 8, 4, 1, false, 0, false) <
			    0,
			TENSOR_ERR_ARG, "nn_seq_proj_init", NULL);
	tu_assert_error(nn_seq_proj_init(&p, &ps, NULL, NN_ATTN_LINEAR, 8, 4, 1, false, 0, false) <
			    0,
			TENSOR_ERR_ARG, "nn_seq_proj_init", NULL);
	tu_assert_error(nn_seq_proj_init(&p, &ps, "E", NN_NATTN, 8, 4, 1, false, 0, false) < 0,
			TENSOR_ERR_ARG, "nn_seq_proj_init", "is not a projection");
	tu_assert_error(nn_seq_proj_init(&p, &ps, "E", NN_ATTN_STANDARD, 8, 4, 1, false, 0, false) <
			    0,
			TENSOR_ERR_ARG, "nn_seq_proj_init: 'E': kind 0 is not a projection", NULL);
	tu_assert_error(nn_seq_proj_init(&p, &ps, "E", NN_ATTN_LINEAR, 8, 9, 1, false, 0, false) <
			    0,
			TENSOR_ERR_ARG, "n 8 -> k 9", "1 <= k <= n");
	tu_assert_error(nn_seq_proj_init(&p, &ps, "E", NN_ATTN_RANDOM, 8, 0, 1, false, 0, false) <
			    0,
			TENSOR_ERR_ARG, "n 8 -> k 0", "1 <= k <= n");
	tu_assert_error(nn_seq_proj_init(&p, &ps, "E", NN_ATTN_LINEAR, 0, 0, 1, false, 0, false) <
			    0,
			TENSOR_ERR_ARG, "nn_seq_proj_init", "n 0");
	const enum nn_attn_kind win[3] = { NN_ATTN_CONV, NN_ATTN_MEAN, NN_ATTN_MAX };
	for (int i = 0; i < 3; i++)
		tu_assert_error(
		    nn_seq_proj_init(&p, &ps, "E", win[i], 10, 4, 1, false, 4, false) < 0,
		    TENSOR_ERR_ARG, "n 10 is not divisible by k 4", nn_attn_kind_name(win[i]));
	tu_assert_error(nn_seq_proj_init(&p, &ps, "E", NN_ATTN_LINEAR, 8, 4, 0, false, 0, false) <
			    0,
			TENSOR_ERR_ARG, "nn_seq_proj_init", "heads 0");
	tu_assert_error(nn_seq_proj_init(&p, &ps, "E", NN_ATTN_CONV, 8, 4, 2, true, 4, false) < 0,
			TENSOR_ERR_ARG, "per-head", "conv");
	tu_assert_error(nn_seq_proj_init(&p, &ps, "E", NN_ATTN_MEAN, 8, 4, 2, true, 4, false) < 0,
			TENSOR_ERR_ARG, "per-head", "mean");
	tu_assert_error(nn_seq_proj_init(&p, &ps, "E", NN_ATTN_CONV, 8, 4, 1, false, 0, false) < 0,
			TENSOR_ERR_ARG, "nn_seq_proj_init", "channels");
	char longname[NN_NAME_MAX];
	memset(longname, 'x', sizeof longname - 3);
	longname[sizeof longname - 3] = 0;
	tu_assert_error(
	    nn_seq_proj_init(&p, &ps, longname, NN_ATTN_LINEAR, 8, 4, 1, false, 0, false) < 0,
	    TENSOR_ERR_ARG, "longer than", NULL);
	ck_assert(p.weight == NULL && p.k == 0);
	ck_assert_int_eq(ps.n, 0);
	ck_assert_int_eq(nn_seq_proj_init(&p, &ps, "E", NN_ATTN_LINEAR, 8, 4, 1, false, 0, false),
			 TENSOR_OK);
	struct nn_seq_proj dup;
	tu_assert_error(nn_seq_proj_init(&dup, &ps, "E", NN_ATTN_LINEAR, 8, 4, 1, false, 0, false) <
			    0,
			TENSOR_ERR_ARG, "E.weight", "already exists");
	ck_assert(dup.weight == NULL);

	/* forward */
	struct nn_seq_proj ph, conv;
	ck_assert_int_eq(nn_seq_proj_init(&ph, &ps, "Eh", NN_ATTN_LINEAR, 8, 4, 3, true, 0, false),
			 TENSOR_OK);
	ck_assert_int_eq(nn_seq_proj_init(&conv, &ps, "C", NN_ATTN_CONV, 8, 4, 1, false, 5, false),
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

/* ---- shapes and parameter counts -------------------------------------------------- */

START_TEST(test_shapes_and_counts)
{
	const int64_t B = 2, T = 10, dim = 12, H = 3, n = 12, k = 4, d = dim / H;
	for (int ki = 0; ki < NKINDS; ki++)
		for (int si = 0; si < 4; si++)
			for (int v = 0; v < 4; v++) {
				struct cfg c = { dim,	       H,     n,     k,	  kinds[ki],
						 sharings[si], v & 2, v & 1, 0.1, 11 };
				if (c.dense && c.kind != NN_ATTN_CONV)
					continue;
				char name[128];
				cfg_str(&c, name, sizeof name);
				struct lf f;
				lf_make(&f, TENSOR_F32, c);
				int64_t kvd = c.skv ? d : dim, ch = c.dense ? kvd : d;
				bool per_head =
				    c.sharing == NN_SHARE_NONE &&
				    (c.kind == NN_ATTN_LINEAR || c.kind == NN_ATTN_RANDOM);
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
				bool has_w = c.kind != NN_ATTN_MEAN && c.kind != NN_ATTN_MAX;
				bool own = c.sharing != NN_SHARE_LAYERWISE;
				bool has_f = own && c.sharing != NN_SHARE_KV;
				ck_assert_msg((nn_params_find(&f.ps, "attn.E.weight") != NULL) ==
						  (has_w && own),
					      "%s", name);
				ck_assert((nn_params_find(&f.ps, "attn.F.weight") != NULL) ==
					  (has_w && has_f));
				ck_assert((nn_params_find(&f.ps, "attn.E.bias") != NULL) ==
					  (c.kind == NN_ATTN_CONV && own));
				ck_assert((nn_params_find(&f.ps, "proj.weight") != NULL) ==
					  (has_w && !own));
				/* which projection is used for keys and values */
				ck_assert(f.m.e_used == (own ? &f.m.e : &f.shared));
				ck_assert(f.m.f_used == (!own	 ? &f.shared
							 : has_f ? &f.m.f
								 : &f.m.e));
				if (has_w && own) {
					struct tensor *w = f.m.e.weight;
					if (c.kind == NN_ATTN_CONV)
						tu_assert_shape(w, 3, (int64_t[]){ ch, ch, n / k });
					else if (per_head)
						tu_assert_shape(w, 3, (int64_t[]){ H, k, n });
					else
						tu_assert_shape(w, 2, (int64_t[]){ k, n });
					ck_assert(w->requires_grad == (c.kind != NN_ATTN_RANDOM));
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
		(struct cfg){ dim, H, n, k, NN_ATTN_CONV, NN_SHARE_HEADWISE, false, false, 0, 1 });
	lf_make(&de, TENSOR_F32,
		(struct cfg){ dim, H, n, k, NN_ATTN_CONV, NN_SHARE_HEADWISE, true, false, 0, 1 });
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
	struct tensor *a = ag_detach(nn_seq_proj_forward(&de.m.e, kin)),
		      *b = ag_detach(nn_seq_proj_forward(&de.m.e, k2));
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
	for (int ki = 0; ki < NKINDS; ki++) {
		struct lf f;
		lf_make(&f, TENSOR_F64,
			(struct cfg){ dim, H, 8, 4, kinds[ki], NN_SHARE_NONE, false, true, 0, 13 });
		tu_assert_shape(f.m.k_proj.weight, 2, (int64_t[]){ d, dim });
		tu_assert_shape(f.m.v_proj.weight, 2, (int64_t[]){ d, dim });
		struct tensor *x = tu_rand(TENSOR_F64, 3, (int64_t[]){ B, T, dim }, 14);
		/* out_proj = identity exposes the merged heads (weights set off the graph) */
		ag_no_grad_begin();
		struct tensor *ow = f.m.out_proj.weight;
		ck_assert_int_eq(tensor_fill_(ow, 0), TENSOR_OK);
		ck_assert_int_eq(tensor_fill_(f.m.out_proj.bias, 0), TENSOR_OK);
		for (int64_t i = 0; i < dim; i++)
			ck_assert_int_eq(
			    tensor_fill_(tensor_narrow(tensor_narrow(ow, 0, i, 1), 1, i, 1), 1),
			    TENSOR_OK);
		if (kinds[ki] == NN_ATTN_LINEAR || kinds[ki] == NN_ATTN_RANDOM) {
			/* per-head E, F (sharing none): make both heads' projections
			 * equal so the heads are interchangeable */
			for (int p = 0; p < 2; p++) {
				struct tensor *w = p ? f.m.f.weight : f.m.e.weight;
				ck_assert_int_eq(tensor_copy_(tensor_narrow(w, 0, 1, 1),
							      tensor_narrow(w, 0, 0, 1)),
						 TENSOR_OK);
			}
		}
		ag_no_grad_end();
		struct tensor *y = ag_detach(nn_linformer_forward(&f.m, x, NULL));
		ag_tape_reset(); /* the weights may change now */
		ag_no_grad_begin();
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
		ag_no_grad_end();
		struct tensor *y2 = ag_detach(nn_linformer_forward(&f.m, x, NULL));
		tu_assert_same(tensor_narrow(y2, 2, 0, d), tensor_narrow(y, 2, d, d), 1e-12);
		tu_assert_same(tensor_narrow(y2, 2, d, d), tensor_narrow(y, 2, 0, d), 1e-12);
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
	    nn_seq_proj_init(&sh, &ps, "proj", NN_ATTN_LINEAR, 6, 3, 2, false, 0, false),
	    TENSOR_OK);
	struct nn_linformer l0, l1;
	ck_assert_int_eq(nn_linformer_init(&l0, &ps, "layers.0.attn", 4, 2, 6, 3, NN_ATTN_LINEAR,
					   NN_SHARE_LAYERWISE, false, false, 0, &sh),
			 TENSOR_OK);
	ck_assert_int_eq(nn_linformer_init(&l1, &ps, "layers.1.attn", 4, 2, 6, 3, NN_ATTN_LINEAR,
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
		(struct cfg){ 8, 2, 8, 4, NN_ATTN_RANDOM, NN_SHARE_NONE, false, false, 0, 26 });
	ck_assert_int_eq(nn_params_pack(&f.ps), TENSOR_OK);
	struct tensor *e0 = tensor_clone(ag_detach(f.m.e.weight)),
		      *f0 = tensor_clone(ag_detach(f.m.f.weight));
	struct tensor *q0 = tensor_clone(ag_detach(f.m.q_proj.weight));
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
	tu_assert_same(f.m.e.weight, e0, 0);
	tu_assert_same(f.m.f.weight, f0, 0);
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
		(struct cfg){ 8, 2, 8, 4, NN_ATTN_RANDOM, NN_SHARE_HEADWISE, false, false, 0, 28 });
	lf_make(&b, TENSOR_F32,
		(struct cfg){ 8, 2, 8, 4, NN_ATTN_RANDOM, NN_SHARE_HEADWISE, false, false, 0, 29 });
	double *va = tu_values(a.m.e.weight), *vb = tu_values(b.m.e.weight);
	ck_assert(va[0] != vb[0]); /* another seed, other values */
	free(va);
	free(vb);
	int rc = nn_checkpoint_save(path, &a.ps, NULL, NULL, 0);
	ck_assert_msg(rc == TENSOR_OK, "%s", tensor_last_error());
	rc = nn_checkpoint_load(path, &b.ps, NULL, NULL);
	ck_assert_msg(rc == TENSOR_OK, "%s", tensor_last_error());
	tu_assert_same(b.m.e.weight, a.m.e.weight, 0);
	tu_assert_same(b.m.f.weight, a.m.f.weight, 0);
	ck_assert(!b.m.e.weight->requires_grad); /* still fixed */
	struct tensor *x = tu_rand(TENSOR_F32, 3, (int64_t[]){ 2, 6, 8 }, 30);
	tu_assert_same(nn_linformer_forward(&b.m, x, NULL), nn_linformer_forward(&a.m, x, NULL), 0);
	unlink(path);
	lf_drop(&a);
	lf_drop(&b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("nn_linformer_proj");
	TCase *tc = tu_tcase("seq_proj");
	tcase_add_checked_fixture(tc, one_thread, default_threads);
	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_seq_proj_params);
	tcase_add_test(tc, test_seq_proj_init_values);
	tcase_add_test(tc, test_seq_proj_forward);
	tcase_add_test(tc, test_seq_proj_errors);
	suite_add_tcase(s, tc);
	tc = tu_tcase("configs");
	tcase_add_checked_fixture(tc, one_thread, default_threads);
	tcase_add_test(tc, test_shapes_and_counts);
	tcase_add_test(tc, test_conv_dense_vs_per_head);
	tcase_add_test(tc, test_shared_kv_head);
	tcase_add_test(tc, test_layerwise);
	tcase_add_test(tc, test_random_fixed_under_adamw);
	tcase_add_test(tc, test_random_in_checkpoint);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
