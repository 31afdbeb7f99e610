/* The machinery the optimizers, penalties, clipping and the moving average
 * share (nn/optim.c): per-parameter state arrays, and updates applied over
 * the parameters' segments in chunks. Internal to nn/. */
#ifndef CFORMER_OPTIM_INTERNAL_H
#define CFORMER_OPTIM_INTERNAL_H

#include "nn.h"

/* Elements of a chunk of an update on the CPU. */
#define OPTIM_CHUNK ((int64_t)1 << 16)

/* The tensors of a segment: parameter, gradient, up to two states. */
enum { SEG_P, SEG_G, SEG_S1, SEG_S2, SEG_MAX };

/* What a chunk update needs; t[] are 1-d chunks of parameter, gradient and
 * state (nstate of them). */
struct update {
	int (*chunk)(struct tensor *const *t, struct update *u);
	int nstate;
	bool decay, whole; /* whole: the segment in one call, not in chunks */
	double a[8];	   /* coefficients, per optimizer */
};

/* The status of the error that made an op return NULL. */
int optim_failed(void);
/* State arrays: one tensor per parameter and a NULL after the last (a
 * parameter added later is detected); the flat buffer, if packed, kept in the
 * slot after that NULL. */
int optim_state_count(struct tensor *const *arr);
void optim_state_free(struct tensor **arr, struct tensor *flat);
/* Zeroed state for every parameter of ps (in a flat buffer like ps's when
 * packed; *flat receives it); extra: slots to leave after the NULL. NULL with
 * an error naming op. */
struct tensor **optim_state_alloc(const char *op, struct nn_params *ps, int extra,
				  struct tensor **flat);
int optim_state_pack(const char *op, struct nn_params *ps, struct tensor **arr,
		     struct tensor **flat);
/* Apply u over 1-d tensors t[] of equal length (OPTIM_CHUNK elements at a time
 * on the CPU, the whole length elsewhere). */
int optim_for_chunks(struct tensor *const *t, int nt, struct update *u);
/* t as a 1-d view (t contiguous), NULL with an error naming op. */
struct tensor *optim_flat1(const char *op, const struct tensor *t);
/* u over the runs of rows of t[] (1-d views laid out as g) where the
 * gradient g is not all zero. */
int optim_for_live_rows(const char *op, const struct tensor *g, struct tensor *const *t, int nt,
			struct update *u);
/* Run u over every segment of ps: each active parameter, or each run of
 * consecutive active parameters with the same decay setting (packed), with
 * state[k] the per-parameter state and flat_state[k] its flat buffer. On an
 * error before the first update nothing has changed. */
int optim_for_segments(const char *op, struct nn_params *ps, bool decay_all,
		       struct tensor **const *state, struct tensor *const *flat_state,
		       struct update *u);
/* Copy value into dst, or report the op error that made it NULL. */
int optim_store(struct tensor *dst, const struct tensor *value);

#endif
