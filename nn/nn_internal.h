/* What nn's modules share and models/ uses beyond nn.h: the scope check of
 * the forwards, the padding mask's checks, and memory-saving variants. Not
 * installed. */
#ifndef CFORMER_NN_INTERNAL_H
#define CFORMER_NN_INTERNAL_H

#include "nn.h"

/* TENSOR_OK if a scope is open (tensor_scope_depth() > 0) and new tensors go
 * to its arena (no tensor_heap_begin() in effect), else TENSOR_ERR_STATE with
 * a message naming fn. Every forward of nn and models calls this first: its
 * temporaries live in the caller's scope, and nothing frees them by hand. */
int nn_require_scope(const char *fn);

/* nn_position_forward written into x's buffer where ag_add_reuse can (without
 * gradients, x itself comes back, updated): for an x the caller owns and
 * does not read again, such as an embedding lookup's output. */
struct tensor *nn_position_forward_reuse(const struct nn_position *m, struct tensor *x);

/* mask (nonzero = a real token) must be [B, t] with B = x's first dim, on
 * x's device, or NULL; else an error naming op, the shapes and the rule. */
int nn_check_mask(const char *op, const struct tensor *mask, const struct tensor *x, int64_t t);
/* mask [B, T] as 0/1 of dtype dt (in the caller's scope): 1 where mask == 0 (padding) or, with
 * padding false, where mask != 0 (real tokens). */
struct tensor *nn_mask_compare(const struct tensor *mask, enum tensor_dtype dt, bool padding);

#endif
