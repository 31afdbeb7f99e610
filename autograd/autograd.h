/* cformer autograd: eager, tape-based reverse mode on top of libtensor.
 *
 * Every ag_* op computes its result with the tensor_* op of the same name
 * and, when grad mode is on and an input requires grad, appends a node
 * (backward function, inputs, saved tensors) to this thread's tape. The tape
 * is in execution order, so ag_backward() walks it backwards. Backward
 * formulas are written with tensor ops, so every backend gets them.
 *
 * Memory: nodes and intermediate gradients live in the current scope (a
 * training step is one scope); leaf gradients (t->grad of tensors marked with
 * ag_requires_grad) are persistent heap tensors that accumulate (+=) across
 * backward calls until ag_zero_grad(). A leaf's gradient belongs to the leaf:
 * tensor_free(t) of a heap leaf frees it too, and the gradient of a leaf made
 * in a scope is freed when that scope ends (nn_params_free frees parameters
 * and their gradients); never free t->grad on its own while t holds it.
 * Ending a scope drops the nodes it recorded. Errors follow libtensor: NULL
 * in, NULL out, first error kept.
 */
#ifndef CFORMER_AUTOGRAD_H
#define CFORMER_AUTOGRAD_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tape ----------------------------------------------------------------- */

/* Mark a leaf (a tensor with no node, f32/f64) as collecting gradients.
 * Errors: NULL, non-float dtype, t is an op result (TENSOR_ERR_ARG). */
int ag_requires_grad(struct tensor *t, bool on);
/* Backpropagate from out: dout is the gradient of out (same shape), or NULL
 * when out has one element (seed 1). Accumulates into every reachable leaf's
 * grad, then drops the recorded nodes (the tape is empty afterwards).
 * Errors: out does not require grad, dout shape mismatch, a saved tensor was
 * modified or a leaf's gradient was itself used by an op of the graph (use a
 * clone of it; TENSOR_ERR_STATE), and any op error during backward. */
int ag_backward(struct tensor *out, const struct tensor *dout);
/* As ag_backward, and hands the forward's memory back while it runs, as a
 * framework that frees saved tensors does: the data the current scope made
 * after its first recorded op's output is released as soon as no node still
 * to run can need it, and the gradients reuse it, so a training step's peak is
 * about the forward's, not forward plus backward. Afterwards, of that data
 * only out's and dout's may be read (headers, shapes and the scope stay
 * usable; read the loss before when it is not out); tensors made before, in
 * outer scopes or on the heap are untouched. Without a scope open it is
 * ag_backward. Same errors as ag_backward. Relies on every node referring
 * only to its inputs, output and ag_save'd tensors. */
int ag_backward_release(struct tensor *out, const struct tensor *dout);
/* Zero t->grad in place (no-op if it has none). */
int ag_zero_grad(struct tensor *t);
/* Forget all recorded nodes of this thread without running backward. */
void ag_tape_reset(void);
/* Number of nodes on this thread's tape. */
int ag_tape_size(void);

/* No-grad regions (nest): ops record nothing and results do not require
 * grad. Use for inference and optimizer updates. */
void ag_no_grad_begin(void);
void ag_no_grad_end(void);
bool ag_grad_enabled(void);

/* ---- mixed precision (autocast.c) ----------------------------------------- */

/* Between ag_autocast_begin(TENSOR_BF16) and ag_autocast_end(), this
 * thread's f32 products are bf16 ones (tensor_set_matmul_precision): their
 * operands are rounded to bf16 as the kernel packs them, they accumulate in
 * f32 and return f32, so activations and gradients stay f32 and no rounded
 * copy of them is made. The nodes of ag_matmul, ag_matmul_laid_out (and the
 * ops built on it, ag_conv1d), nn's linear layers and attention keep the
 * precision of their forward, so backward may run after the region ends.
 * Everything but products (elementwise ops, norms, softmax, losses,
 * optimizers) is untouched, and f64 products are never rounded (the gradient
 * checks stay exact). Regions nest (16 deep); the innermost dtype holds
 * (TENSOR_F32: f32 products), and ending one restores the precision before
 * it. On CUDA the operands are rounded to bf16 copies and the products run on
 * the tensor cores (cuBLAS, f32 accumulation).
 * Errors: dt not bf16 or f32 (TENSOR_ERR_DTYPE), more than 16 levels
 * (TENSOR_ERR_STATE). */
int ag_autocast_begin(enum tensor_dtype dt);
void ag_autocast_end(void); /* no-op outside a region */
/* The dtype products round to now: TENSOR_BF16 in a bf16 region, else f32. */
enum tensor_dtype ag_autocast_dtype(void);
/* For the current region: operands that view src's storage are read from copy
 * at the same offset and strides instead of being rounded at each use (the
 * parameters rounded once a step; nn_params_autocast_begin does this). The
 * view is made in the open scope: with none open (or under tensor_heap_begin)
 * such a product fails with TENSOR_ERR_STATE.
 * src: a contiguous f32 tensor at offset 0 spanning the views to be served
 * (the packed parameters); copy: a contiguous bf16 tensor of as many elements
 * on its device, filled by the caller and unchanged until the region ends (it
 * is kept alive that long). Errors: no region, or 64 copies already
 * registered in the open regions (TENSOR_ERR_STATE), src or copy not such a
 * tensor (TENSOR_ERR_ARG). */
int ag_autocast_storage(const struct tensor *src, const struct tensor *copy);

/* A view of t that shares its data but is cut from the graph. */
struct tensor *ag_detach(const struct tensor *t);

/* Between these calls (they nest, per thread) tensor_ ops may read tensors that require
 * grad while the tape records: the forward of an op written with ag_record, which computes
 * its result with tensor_ ops and records it (every ag_ op does this inside). Elsewhere a
 * tensor_ op that returns a new tensor (or view) given a tensor that requires grad, with
 * grad mode on, fails with TENSOR_ERR_STATE naming the ag_ op to use: its result would be
 * cut from the graph and backward would leave the gradient silently 0. Comparisons,
 * argmax, casts to integers, index and mask operands, in-place ops and reads (tensor_get,
 * tensor_to_host, tensor_data) are not checked. */
void ag_op_begin(void);
void ag_op_end(void);

/* ---- gradient check (gradcheck.c) ----------------------------------------- */

/* The function checked: its output, built from the inputs with ag_ ops (or ops written with
 * ag_record), in the caller's scope. */
typedef struct tensor *(*ag_gradcheck_fn)(struct tensor *const *inputs, void *ctx);
/* The bound of a check (set before; 0 takes the default) and what it found. */
struct ag_gradcheck {
	double h;	   /* the central differences' step (default 1e-6) */
	double atol, rtol; /* an element passes when |analytic - numeric| <= atol + rtol |numeric|
			      (defaults 1e-7 and 1e-5) */
	/* the largest |analytic - numeric| / (atol + rtol |numeric|) over every element of
	 * every input that requires grad: <= 1 passes (INFINITY for a NaN) */
	double max_error;
	int input;		  /* the worst element: its input (-1: none) */
	int64_t element;	  /* and its row-major index */
	double analytic, numeric; /* its two gradients */
};
/* Check the gradients of f: ag_backward of L = sum(f(inputs) * R), R a fixed random tensor
 * of f's output shape (normal, seed 12345), against central differences of L computed in
 * f64 without the tape, (L(x + h) - L(x - h)) / 2h, for every element of every input that
 * requires grad. Those inputs are f64 CPU leaves (any strides; the others, index tensors
 * say, are left as they are and may be of any kind); each element is moved by
 * +-h in place and restored, and afterwards the inputs' gradients hold the analytic ones.
 * Opens its own scopes. Returns TENSOR_OK when the check ran, c holding its bound and
 * result (passed: c->max_error <= 1); errors: f or c NULL, no inputs (TENSOR_ERR_ARG), an
 * input that requires grad not an f64 CPU leaf (TENSOR_ERR_DTYPE, _ARG), f's or backward's
 * errors (f returning NULL: its error). */
int ag_gradcheck(ag_gradcheck_fn f, void *ctx, int n, struct tensor *const *inputs,
		 struct ag_gradcheck *c);

/* ---- writing ops (for ag_<family>.c and for user-defined ops) -------------- */

#define AG_MAX_INPUTS 4
#define AG_MAX_SAVED 5

struct ag_node;
/* Given the node and dout (the gradient of node->out), accumulate the
 * gradients of the inputs with ag_accumulate(). Return a status. */
typedef int (*ag_backward_fn)(struct ag_node *n, const struct tensor *dout);

struct ag_node {
	const char *op;
	ag_backward_fn backward;
	struct tensor *out;
	int ninputs, nsaved;
	struct tensor *inputs[AG_MAX_INPUTS];
	struct tensor *saved[AG_MAX_SAVED];
	double f[4];   /* small float parameters (scale, eps, ...) */
	int64_t i[8];  /* small int parameters (dims, sizes, ...) */
	int depth;     /* scope depth at recording */
	uint64_t mark; /* tensor_scope_mark() at recording */
	uint64_t end;  /* the latest mark at this node's and earlier nodes' ag_save */
};

/* Record out = op(inputs...) if grad mode is on and an input requires grad:
 * out becomes a non-leaf that requires grad, and the new node is returned for
 * the caller to fill (saved tensors, parameters). Returns NULL when nothing is
 * recorded (also when out is NULL); more than AG_MAX_INPUTS inputs is an
 * error (TENSOR_ERR_ARG). */
struct ag_node *ag_record(const char *op, struct tensor *out, ag_backward_fn backward, int ninputs,
			  struct tensor *const *inputs);
/* Save t for backward (in n->saved[n->nsaved++]): in-place ops on its
 * storage are refused until the node is dropped. Returns t, or NULL with an
 * error past AG_MAX_SAVED or out of memory; then ag_backward refuses the tape
 * (until the node's scope ends or the tape is reset) before changing any
 * gradient, and the forward's result stays valid, so callers need not check. */
struct tensor *ag_save(struct ag_node *n, struct tensor *t);
/* Add g into t's gradient if t requires grad. g may have t's shape or a
 * shape that broadcasts to it (then it is summed over the broadcast dims).
 * An intermediate's first gradient may share g's memory (a heap g's): do not
 * write into g after the call. */
int ag_accumulate(struct tensor *t, const struct tensor *g);
/* g summed down to shape (ndim, shape) over broadcast dims. */
struct tensor *ag_sum_to(const struct tensor *g, int ndim, const int64_t *shape);

#ifdef __cplusplus
}
#endif

#include "ag_ops.h"

#endif
