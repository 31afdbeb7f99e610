/* What the attention tests share: a naive attention by loops, an i32 key mask, the peak
 * memory of one no-grad nn_attention call, and the fixture that hides the CPU's fused
 * kernel (so a test runs on the composed path). */
#ifndef CFORMER_ATTENTION_REF_H
#define CFORMER_ATTENTION_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor.h"

/* q [B,H,T,d], k [B,H,S,d], v [B,H,S,dv] row-major; mask [B,S] (nonzero =
 * a real key, 0 = padding) or NULL -> out [B,H,T,dv]. A row with no visible key is zero. */
void tu_ref_attention(const double *q, const double *k, const double *v, const double *mask,
		      bool causal, double scale, int64_t B, int64_t H, int64_t T, int64_t S,
		      int64_t d, int64_t dv, double *out);

/* tu_ref_attention with the probabilities' dropout and the gradients: drop [B,H,T,S]
 * (each 0 or 1 / (1 - p), multiplying the probabilities after the softmax) or NULL, and
 * for L = sum(out * g), g [B,H,T,dv]: dq, dk, dv of q's, k's and v's shapes (row-major). */
struct tu_ref_att {
	const double *q, *k, *v, *mask, *drop;
	bool causal;
	double scale;
	int64_t B, H, T, S, d, dv;
};
void tu_ref_attention_grads(const struct tu_ref_att *a, const double *g, double *out, double *dq,
			    double *dk, double *dv);

/* A [B,S] i32 mask of vals (ck_assert that it was made). */
struct tensor *tu_mask_i32(int64_t B, int64_t S, const int *vals);

/* Peak bytes of one no-grad nn_attention(q, k, v) call (no mask, scale 0.5) above what
 * was live before it. */
size_t tu_attention_peak(struct tensor *q, struct tensor *k, struct tensor *v);

/* A checked fixture: tu_unfuse hides the CPU's fused attention, tu_refuse restores it. */
void tu_unfuse(void);
void tu_refuse(void);

#endif
