/* Memory-saving variants the library's own ops and modules use: a gradient
 * handed over instead of copied, a sum written into a dying operand. Not
 * installed; the public API (autograd.h, ag_ops.h) has the plain forms. */
#ifndef CFORMER_AG_INTERNAL_H
#define CFORMER_AG_INTERNAL_H

#include "autograd.h"

/* The first statement of an ag_ op whose forward calls tensor_ ops on its inputs: the
 * region of ag_op_begin() up to the function's return (whichever), in which those ops may
 * read tensors that require grad. */
static inline void ag_op_cleanup(const int *unused)
{
	(void)unused;
	ag_op_end();
}
#define AG_OP_REGION                                                         \
	ag_op_begin();                                                       \
	__attribute__((cleanup(ag_op_cleanup))) const int ag_op_region_ = 0; \
	(void)ag_op_region_
/* The same with a no-grad region: the first statement of a function that reads tensors
 * that may require grad but is no part of the graph (metrics, initialisation). */
static inline void ag_no_grad_cleanup(const int *unused)
{
	(void)unused;
	ag_no_grad_end();
}
#define AG_NO_GRAD_REGION                                                              \
	ag_no_grad_begin();                                                            \
	__attribute__((cleanup(ag_no_grad_cleanup))) const int ag_no_grad_region_ = 0; \
	(void)ag_no_grad_region_

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

/* Mixed precision (autocast.c). x as a product's operand: in a bf16 region, a
 * view of its storage's registered bf16 copy when it has one (NULL with an
 * error when no scope is open for the view); otherwise x itself (an f32
 * operand is rounded as the product packs it). */
struct tensor *ag_autocast_operand(const struct tensor *x);
/* Both operands of a product through ag_autocast_operand when both are f32
 * (a pair of other dtypes is left for the product to accept or refuse). */
void ag_autocast_pair(struct tensor **a, struct tensor **b);
/* The dtype a product returns with a of a's dtype first: f32 for a bf16 a, else
 * a's (bf16 x bf16 would otherwise give bf16). */
enum tensor_dtype ag_product_dtype(const struct tensor *a);
/* A node whose backward runs products keeps the precision of its forward's
 * (tensor_matmul_precision) in n->i[AG_PRECISION_SLOT]; its backward sets it
 * with ag_node_precision_begin, which returns the precision to restore
 * (tensor_set_matmul_precision) when it is done. */
#define AG_PRECISION_SLOT 7
void ag_node_keep_precision(struct ag_node *n);
enum tensor_dtype ag_node_precision_begin(const struct ag_node *n);

#endif
