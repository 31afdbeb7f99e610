/* What the attention tests share (attention_ref.h). */
#include "attention_ref.h"

#include <math.h>
#include <stdlib.h>

#include "autograd.h"
#include "backend.h"
#include "nn.h"
#include "testutil.h"

void tu_ref_attention(const double *q, const double *k, const double *v, const double *mask,
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

/* The probabilities of row t of (b, h) into p [S] (0 where hidden; all 0 in a row with no
 * visible key). */
static void ref_probs(const struct tu_ref_att *a, int64_t b, int64_t h, int64_t t, double *p)
{
	const int64_t S = a->S, d = a->d, bh = b * a->H + h;
	const double *qr = a->q + (bh * a->T + t) * d;
	double mx = -INFINITY, sum = 0;
	for (int64_t s = 0; s < S; s++) {
		double acc = 0;
		for (int64_t c = 0; c < d; c++)
			acc += qr[c] * a->k[(bh * S + s) * d + c];
		bool hidden = (a->mask && a->mask[b * S + s] == 0) || (a->causal && s > t);
		p[s] = hidden ? -INFINITY : acc * a->scale;
		mx = fmax(mx, p[s]);
	}
	for (int64_t s = 0; s < S; s++) {
		p[s] = mx == -INFINITY ? 0 : exp(p[s] - mx);
		sum += p[s];
	}
	for (int64_t s = 0; s < S && sum > 0; s++)
		p[s] /= sum;
}

void tu_ref_attention_grads(const struct tu_ref_att *a, const double *g, double *out, double *dq,
			    double *dk, double *dv)
{
	const int64_t H = a->H, T = a->T, S = a->S, d = a->d, nv = a->dv;
	double *p = malloc(sizeof(double) * (size_t)(2 * S + 1));
	double *dp = p + S;
	for (int64_t i = 0; i < a->B * H * S * d; i++)
		dk[i] = 0;
	for (int64_t i = 0; i < a->B * H * S * nv; i++)
		dv[i] = 0;
	for (int64_t b = 0; b < a->B; b++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t t = 0; t < T; t++) {
				const int64_t bh = b * H + h, row = bh * T + t;
				const double *gr = g + row * nv, *qr = a->q + row * d;
				const double *f = a->drop ? a->drop + row * S : NULL;
				ref_probs(a, b, h, t, p);
				double dot = 0; /* sum over s of p dL/dp */
				for (int64_t s = 0; s < S; s++) {
					double gv = 0;
					for (int64_t c = 0; c < nv; c++)
						gv += gr[c] * a->v[(bh * S + s) * nv + c];
					dp[s] = f ? f[s] * gv : gv;
					dot += p[s] * dp[s];
				}
				for (int64_t c = 0; c < nv; c++) {
					double acc = 0;
					for (int64_t s = 0; s < S; s++)
						acc += p[s] * (f ? f[s] : 1) *
						       a->v[(bh * S + s) * nv + c];
					out[row * nv + c] = acc;
				}
				for (int64_t c = 0; c < d; c++)
					dq[row * d + c] = 0;
				for (int64_t s = 0; s < S; s++) {
					double pk = p[s] * (f ? f[s] : 1),
					       ds = p[s] * (dp[s] - dot);
					for (int64_t c = 0; c < nv; c++)
						dv[(bh * S + s) * nv + c] += pk * gr[c];
					for (int64_t c = 0; c < d; c++) {
						dq[row * d + c] +=
						    a->scale * ds * a->k[(bh * S + s) * d + c];
						dk[(bh * S + s) * d + c] += a->scale * ds * qr[c];
					}
				}
			}
	free(p);
}

struct tensor *tu_mask_i32(int64_t B, int64_t S, const int *vals)
{
	struct tensor *m = tensor_from_data(TENSOR_I32, TENSOR_CPU, 2, (int64_t[]){ B, S }, vals);
	ck_assert(m != NULL);
	return m;
}

size_t tu_attention_peak(struct tensor *q, struct tensor *k, struct tensor *v)
{
	size_t base = tu_peak_begin();
	struct tensor *o = nn_attention(q, k, v, NULL, false, 0.5, NULL);
	size_t used = tu_peak_bytes(base);
	ck_assert_msg(o != NULL, "%s", tensor_last_error());
	tu_peak_end();
	return used;
}

void tu_unfuse(void)
{
	tensor_cpu_set_fused(false);
}

void tu_refuse(void)
{
	tensor_cpu_set_fused(true);
}
