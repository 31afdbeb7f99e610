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
