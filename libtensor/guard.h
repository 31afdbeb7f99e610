/* Guards against silent misuse, internal to cformer (guard.c): the check every op
 * front-end makes of its tensor operands, the switch autograd turns it off with, and the
 * debug mode (tensor_set_debug). */
#ifndef CFORMER_GUARD_H
#define CFORMER_GUARD_H

#include <stdbool.h>

#include "tensor.h"

/* TENSOR_OK if the op tensor_<name> may read its operand arg, t: t is NULL (the op's own
 * NULL check keeps the first error), or t does not require grad, or autograd allows it (in
 * a no-grad region, inside an ag_ op or backward). Otherwise TENSOR_ERR_STATE, "tensor_<name>:
 * <arg> requires a gradient and the tape is recording: use <use>, or wrap in
 * ag_no_grad_begin/end" (use "": ag_<name>; NULL: the op has no gradient, and the message
 * says to detach). A stale header (tensor_check_live) is TENSOR_ERR_STATE too. */
int tensor_check_operand(const char *name, const char *use, const char *arg,
			 const struct tensor *t);
/* TENSOR_OK unless t is a header of a scope that has ended, as the debug mode's poison
 * leaves it (TENSOR_ERR_STATE naming tensor_<name> and arg): the check of reads, which take
 * tensors that require grad. NULL t: TENSOR_OK. */
int tensor_check_live(const char *name, const char *arg, const struct tensor *t);
/* Regions (they nest, per thread) in which ops may read tensors that require grad:
 * autograd's no-grad regions and ag_op_begin/end. */
void tensor_tracked_allow_begin(void);
void tensor_tracked_allow_end(void);

/* The debug mode's poison: the bytes of released scope memory (on the host: every header,
 * and the data of CPU tensors; 0xff data reads as NaN in floats, -1 in integers). */
#define TENSOR_POISON_HEADER 0xdb
#define TENSOR_POISON_DATA 0xff

#endif
