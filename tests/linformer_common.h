/* Helpers shared by test_nn_linformer.c and test_nn_linformer_proj.c: the
 * projection kinds and sharing modes, the loop reference of one sequence
 * projection, a module in its own parameter list, comparisons, fixtures. */
#ifndef CFORMER_TESTS_LINFORMER_COMMON_H
#define CFORMER_TESTS_LINFORMER_COMMON_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "nn.h"
#include "testutil.h"

/* the projected kinds (every nn_attn_kind but standard) */
#define NKINDS (NN_NATTN - 1)
static const enum nn_attn_kind kinds[NKINDS] = { NN_ATTN_LINEAR, NN_ATTN_CONV, NN_ATTN_MEAN,
						 NN_ATTN_MAX, NN_ATTN_RANDOM };
static const enum nn_proj_sharing sharings[4] = { NN_SHARE_NONE, NN_SHARE_HEADWISE, NN_SHARE_KV,
						  NN_SHARE_LAYERWISE };

/* ---- naive references ------------------------------------------------------------ */

/* x [B,hx,S,c] -> out [B,ho,k,c], ho = p->heads for a per-head projection
 * (x's single head broadcast when hx = 1), else hx. Positions S..n-1 are
 * zeros. */
static inline void ref_seq_proj(const struct nn_seq_proj *p, const double *x, int64_t B, int64_t hx,
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
					if (p->kind == NN_ATTN_LINEAR ||
					    p->kind == NN_ATTN_RANDOM) {
						const double *e =
						    w + (p->per_head ? h * k * n : 0) + j * n;
						for (int64_t s = 0; s < S; s++)
							acc += e[s] * xs[s * c + o];
					} else if (p->kind == NN_ATTN_CONV) {
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
						acc = p->kind == NN_ATTN_MAX ? -INFINITY : 0;
						for (int64_t r = 0; r < kern; r++) {
							int64_t pos = j * kern + r;
							double v = pos < S ? xs[pos * c + o] : 0;
							acc = p->kind == NN_ATTN_MAX ? fmax(acc, v)
										     : acc + v;
						}
						if (p->kind == NN_ATTN_MEAN)
							acc /= (double)kern;
					}
					out[((b * ho + h) * k + j) * c + o] = acc;
				}
		}
	free(w);
	free(bias);
}

/* ---- helpers --------------------------------------------------------------------- */

struct cfg {
	int64_t dim, heads, n, k;
	enum nn_attn_kind kind;
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

static inline void lf_make(struct lf *f, enum tensor_dtype dt, struct cfg c)
{
	ck_assert_int_eq(nn_params_init(&f->ps, dt, TENSOR_CPU, c.seed), TENSOR_OK);
	const struct nn_seq_proj *sh = NULL;
	if (c.sharing == NN_SHARE_LAYERWISE) {
		int64_t d = c.dim / c.heads, kvd = c.skv ? d : c.dim;
		bool dense = c.dense && c.kind == NN_ATTN_CONV;
		int rc = nn_seq_proj_init(&f->shared, &f->ps, "proj", c.kind, c.n, c.k, c.heads,
					  false, dense ? kvd : d, dense);
		ck_assert_msg(rc == TENSOR_OK, "%s", tensor_last_error());
		sh = &f->shared;
	}
	int rc = nn_linformer_init(&f->m, &f->ps, "attn", c.dim, c.heads, c.n, c.k, c.kind,
				   c.sharing, c.dense, c.skv, c.p, sh);
	ck_assert_msg(rc == TENSOR_OK, "%s", tensor_last_error());
}

static inline void lf_drop(struct lf *f)
{
	ag_tape_reset();
	nn_linformer_free(&f->m);
	nn_seq_proj_free(&f->shared);
	nn_params_free(&f->ps);
}

static inline const char *cfg_str(const struct cfg *c, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s%s%s k %lld n %lld", nn_attn_kind_name(c->kind),
		 nn_proj_sharing_name(c->sharing), c->dense ? "/dense" : "",
		 c->skv ? "/shared_kv_head" : "", (long long)c->k, (long long)c->n);
	return buf;
}

/* The modules here are tiny: run them on one thread. Multi-threaded BLIS
 * on matrices this small only adds barrier waits, which on a loaded machine
 * cost milliseconds per GEMM (test_memory_long_n uses the default). */
static inline void one_thread(void)
{
	tensor_set_num_threads(1);
}

static inline void default_threads(void)
{
	tensor_set_num_threads(0);
}

#endif
