/* Memory-saving variants the library's own ops and modules use: a gradient
 * handed over instead of copied, a sum written into a dying operand. Not
 * installed; the public API (autograd.h, ag_ops.h) has the plain forms. */
#ifndef CFORMER_AG_INTERNAL_H
#define CFORMER_AG_INTERNAL_H

#include "autograd.h"

/* a + b (b broadcast to a) written into a's buffer, as ag_add otherwise: for a
 * branch whose value is used once, like a residual's, so that the sum takes
 * no memory of its own. a must not be read afterwards. Falls back to ag_add
 * (a new buffer) when a is a parameter, is saved for backward, is not
 * contiguous or would have to grow to b's shape. */
struct tensor *ag_add_reuse(struct tensor *a, struct tensor *b);
/* As ag_accumulate, for a heap tensor g that the caller hands over (made
 * with tensor_heap_begin): it becomes t's gradient as it is when t is an
 * intermediate with no gradient yet and g has its shape and dtype (no copy),
 * else it is added and freed. An arena g is only added. */
int ag_accumulate_take(struct tensor *t, struct tensor *g);
/* n's output gradient (the dout of its backward) handed over to the backward
 * when nothing else holds it (a contiguous heap tensor with one reference),
 * so that an input's gradient can be made in its memory; NULL otherwise, and
 * dout stays the node's. Give a taken tensor to ag_accumulate_take (or free
 * it). */
struct tensor *ag_dout_take(struct ag_node *n);
/* tensor_matmul(a, b) as a heap tensor, for a backward to hand to
 * ag_accumulate_take (the product is not copied into the gradient). */
struct tensor *ag_heap_matmul(const struct tensor *a, const struct tensor *b);

/* Mixed precision (autocast.c). x as a product's operand: x itself outside a
 * bf16 region or when x is not f32; else a view of its storage's registered
 * bf16 copy, or x rounded to bf16 (in the current scope). */
struct tensor *ag_autocast_operand(const struct tensor *x);
/* Both operands of a product through ag_autocast_operand when both are f32
 * (a pair of other dtypes is left for the product to accept or refuse). */
void ag_autocast_pair(struct tensor **a, struct tensor **b);
/* A backward's incoming gradient g in the precision of the saved operand it
 * multiplies: rounded to bf16 when saved is bf16 and g f32, else g. */
struct tensor *ag_autocast_like(const struct tensor *g, const struct tensor *saved);
/* The dtype a product of a's dtype returns: f32 for bf16 operands, else a's. */
enum tensor_dtype ag_product_dtype(const struct tensor *a);

#endif
