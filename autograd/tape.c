/* The tape: node storage, recording, backward, gradient accumulation and
 * no-grad regions. */
#include <pthread.h>
#include <stdlib.h>

#include "autograd.h"
#include "ag_internal.h"
#include "guard.h"
#include "mem.h"

#define CHUNK 256

/* Nodes live in fixed chunks so their addresses never move; chunks are kept
 * for reuse, so a steady-state training step does not allocate nodes. */
static _Thread_local struct ag_node **chunks;
static _Thread_local int nchunks, size;
static _Thread_local int no_grad;
/* The outermost scope depth at which ag_record or ag_save failed (-1:
 * none): a lost node would pass no gradient, a node missing a saved tensor
 * would compute a wrong one, so backward refuses until that scope ends or the
 * tape is reset. */
static _Thread_local int lost_depth = -1;

/* Leaves made in a scope whose gradient exists: the gradient (a heap tensor) is
 * freed when the leaf's scope ends, as tensor_free frees a heap leaf's. */
struct scoped_leaf {
	struct tensor *t;
	int depth; /* the scope whose end releases t (tensor_scope_of) */
};
static _Thread_local struct scoped_leaf *scoped;
static _Thread_local int nscoped, scoped_cap;

static void lose(int depth)
{
	if (lost_depth < 0 || depth < lost_depth)
		lost_depth = depth;
}

static struct ag_node *node_at(int k)
{
	return &chunks[k / CHUNK][k % CHUNK];
}

/* Release the gradient of an intermediate (a heap tensor, see ag_accumulate). */
static void drop_grad(struct tensor *t)
{
	struct tensor *g = t->grad;
	t->grad = NULL;
	tensor_free(g);
}

/* Drop the newest node: release its saved tensors and detach its output. */
static void pop(void)
{
	struct ag_node *n = node_at(--size);
	for (int i = 0; i < n->nsaved; i++) {
		n->saved[i]->storage->tape_refs--;
		tensor_free(n->saved[i]);
	}
	if (n->out && n->out->node == n) {
		drop_grad(n->out); /* left by a backward that stopped on an error */
		n->out->node = NULL;
		n->out->requires_grad = false;
	}
}

void ag_tape_reset(void)
{
	while (size > 0)
		pop();
	lost_depth = -1;
}

int ag_tape_size(void)
{
	return size;
}

/* The gradients of the leaves of scopes from depth on. */
static void free_scoped_grads(int depth)
{
	int kept = 0;
	for (int i = 0; i < nscoped; i++) {
		if (scoped[i].depth >= depth)
			drop_grad(scoped[i].t);
		else
			scoped[kept++] = scoped[i];
	}
	nscoped = kept;
}

/* Scope-end hook: nodes recorded in the ending scope go with its memory, and
 * so do the gradients of its leaves. */
static void on_scope_end(int depth)
{
	while (size > 0 && node_at(size - 1)->depth >= depth)
		pop();
	if (lost_depth >= depth)
		lost_depth = -1;
	free_scoped_grads(depth);
}

static void install_hook(void)
{
	tensor_scope_set_end_hook(on_scope_end);
}

static void ensure_hook(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, install_hook);
}

/* Register the new gradient of t, a leaf made in a scope, to be freed when
 * that scope ends. */
static int own_scoped_grad(struct tensor *t)
{
	int depth = tensor_scope_of(t);
	if (depth == 0) {
		char b[128];
		return tensor_error(TENSOR_ERR_STATE,
				    "backward: leaf %s belongs to a scope that has ended",
				    tensor_shape_str(t, b, sizeof b));
	}
	if (nscoped == scoped_cap) {
		int cap = scoped_cap ? 2 * scoped_cap : 16;
		struct scoped_leaf *grown =
		    tensor_host_realloc(scoped, sizeof *scoped * (size_t)cap);
		if (!grown)
			return tensor_error(TENSOR_ERR_NOMEM,
					    "backward: cannot record a scoped leaf's gradient");
		scoped = grown;
		scoped_cap = cap;
	}
	ensure_hook();
	scoped[nscoped++] = (struct scoped_leaf){ t, depth };
	return TENSOR_OK;
}

void ag_no_grad_begin(void)
{
	no_grad++;
	tensor_tracked_allow_begin(); /* nothing records: no result can be cut off */
}

void ag_no_grad_end(void)
{
	if (no_grad > 0) {
		no_grad--;
		tensor_tracked_allow_end();
	}
}

void ag_op_begin(void)
{
	tensor_tracked_allow_begin();
}

void ag_op_end(void)
{
	tensor_tracked_allow_end();
}

bool ag_grad_enabled(void)
{
	return no_grad == 0;
}

struct ag_node *ag_record(const char *op, struct tensor *out, ag_backward_fn backward, int ninputs,
			  struct tensor *const *inputs)
{
	if (!out || no_grad)
		return NULL;
	if (ninputs < 0 || ninputs > AG_MAX_INPUTS) {
		lose(tensor_scope_depth());
		tensor_error(TENSOR_ERR_ARG, "%s: autograd nodes take 0..%d inputs, got %d", op,
			     AG_MAX_INPUTS, ninputs);
		return NULL;
	}
	bool any = false;
	for (int i = 0; i < ninputs; i++)
		any = any || (inputs[i] && inputs[i]->requires_grad);
	if (!any)
		return NULL;
	ensure_hook();
	if (size == nchunks * CHUNK) {
		struct ag_node **grown =
		    tensor_host_realloc(chunks, sizeof *chunks * (size_t)(nchunks + 1));
		struct ag_node *chunk = tensor_host_malloc(sizeof *chunk * CHUNK);
		if (!grown || !chunk) {
			if (grown)
				chunks = grown;
			free(chunk);
			lose(tensor_scope_depth());
			tensor_error(TENSOR_ERR_NOMEM, "%s: cannot grow the autograd tape", op);
			return NULL;
		}
		chunks = grown;
		chunks[nchunks++] = chunk;
	}
	struct ag_node *n = node_at(size++);
	*n = (struct ag_node){ .op = op,
			       .backward = backward,
			       .out = out,
			       .ninputs = ninputs,
			       .depth = tensor_scope_depth(),
			       .mark = tensor_scope_mark() };
	n->end = size > 1 && node_at(size - 2)->end > n->mark ? node_at(size - 2)->end : n->mark;
	for (int i = 0; i < ninputs; i++)
		n->inputs[i] = inputs[i];
	out->requires_grad = true;
	out->node = n;
	out->grad = NULL;
	return n;
}

struct tensor *ag_save(struct ag_node *n, struct tensor *t)
{
	if (!n || !t)
		return t;
	if (n->nsaved == AG_MAX_SAVED) {
		lose(n->depth);
		tensor_error(TENSOR_ERR_ARG, "%s: a node saves at most %d tensors", n->op,
			     AG_MAX_SAVED);
		return NULL;
	}
	ag_op_begin();
	struct tensor *alias = tensor_alias(t); /* keeps heap storage alive */
	ag_op_end();
	if (!alias) {
		lose(n->depth);
		return NULL;
	}
	alias->storage->tape_refs++;
	n->saved[n->nsaved++] = alias;
	/* t was made before now: n and the nodes after it end at now or later */
	uint64_t now = tensor_scope_mark();
	for (int k = size - 1; k >= 0; k--) {
		struct ag_node *m = node_at(k);
		m->end = m->end > now ? m->end : now;
		if (m == n)
			break;
	}
	return t;
}

int ag_requires_grad(struct tensor *t, bool on)
{
	if (!t)
		return tensor_error(TENSOR_ERR_ARG, "ag_requires_grad: tensor is NULL");
	if (t->node)
		return tensor_error(TENSOR_ERR_ARG,
				    "ag_requires_grad: the tensor is the result of "
				    "'%s', not a leaf (use ag_detach)",
				    t->node->op);
	if (on && tensor_check_float("ag_requires_grad", t) < 0)
		return TENSOR_ERR_DTYPE;
	t->requires_grad = on;
	return TENSOR_OK;
}

int ag_zero_grad(struct tensor *t)
{
	if (!t)
		return tensor_error(TENSOR_ERR_ARG, "ag_zero_grad: tensor is NULL");
	return t->grad ? tensor_fill_(t->grad, 0.0) : TENSOR_OK;
}

struct tensor *ag_detach(const struct tensor *t)
{
	ag_op_begin();
	struct tensor *v = tensor_alias(t);
	ag_op_end();
	if (v) {
		v->requires_grad = false;
		v->node = NULL;
		v->grad = NULL;
	}
	return v;
}

struct tensor *ag_sum_to(const struct tensor *g, int ndim, const int64_t *shape)
{
	if (!g)
		return NULL;
	int lead = g->ndim - ndim, dims[TENSOR_MAX_DIMS], nd = 0;
	if (lead < 0) {
		char b[128];
		tensor_error(TENSOR_ERR_SHAPE, "ag_sum_to: gradient %s has fewer dims than %d",
			     tensor_shape_str(g, b, sizeof b), ndim);
		return NULL;
	}
	for (int i = 0; i < g->ndim; i++)
		if (i < lead || (shape[i - lead] == 1 && g->shape[i] != 1))
			dims[nd++] = i;
	if (nd == 0)
		return tensor_alias(g);
	return tensor_reshape(tensor_sum(g, nd, dims, true), ndim, shape);
}

int ag_accumulate(struct tensor *t, const struct tensor *g)
{
	if (!t || !t->requires_grad)
		return TENSOR_OK;
	if (!g)
		return tensor_last_status() ? tensor_last_status() : TENSOR_ERR_ARG;
	struct tensor *gs =
	    tensor_same_shape(t, g) ? (struct tensor *)g : ag_sum_to(g, t->ndim, t->shape);
	if (!gs)
		return tensor_last_status();
	if (gs->dtype != t->dtype)
		return tensor_error(TENSOR_ERR_DTYPE, "backward: gradient is %s, tensor is %s",
				    tensor_dtype_name(gs->dtype), tensor_dtype_name(t->dtype));
	if (t->node) { /* intermediate: a heap gradient, freed once its node ran */
		/* the first one shares gs's memory where that is not an arena's: gradients are
		 * never written in place except by a node that owns them alone (ag_dout_take) */
		tensor_heap_begin();
		struct tensor *sum = t->grad		     ? tensor_add(t->grad, gs)
				     : gs->storage->in_arena ? tensor_clone(gs)
							     : tensor_alias(gs);
		tensor_heap_end();
		if (!sum)
			return tensor_last_status();
		drop_grad(t);
		t->grad = sum;
		return TENSOR_OK;
	}
	if (!t->grad) { /* leaf: a persistent gradient, freed with the leaf */
		tensor_heap_begin();
		t->grad = tensor_zeros(t->dtype, t->storage->device, t->ndim, t->shape);
		tensor_heap_end();
		if (!t->grad)
			return tensor_last_status();
		int rc = t->in_arena ? own_scoped_grad(t) : TENSOR_OK;
		if (rc < 0) {
			drop_grad(t);
			return rc;
		}
	}
	if (t->grad->storage->tape_refs > 0) { /* an op of this graph read the gradient */
		char b[128];
		return tensor_error(
		    TENSOR_ERR_STATE,
		    "backward: the gradient of leaf %s is saved by the autograd tape "
		    "(an op of this graph used it), so it cannot be accumulated "
		    "into; use a clone of the gradient in the graph instead",
		    tensor_shape_str(t, b, sizeof b));
	}
	if (tensor_is_contiguous(t->grad))
		return tensor_add_(t->grad, gs);
	struct tensor *sum = tensor_add(t->grad, gs); /* a view the caller set */
	return sum ? tensor_copy_(t->grad, sum) : tensor_last_status();
}

int ag_accumulate_take(struct tensor *t, struct tensor *g)
{
	bool owned = g && !g->in_arena;
	if (owned && t && t->requires_grad && t->node && !t->grad && tensor_same_shape(t, g) &&
	    g->dtype == t->dtype) {
		t->grad = g;
		return TENSOR_OK;
	}
	int rc = ag_accumulate(t, g);
	if (owned)
		tensor_free(g);
	return rc;
}

struct tensor *ag_dout_take(struct ag_node *n)
{
	struct tensor *g = n && n->out ? n->out->grad : NULL;
	if (!g || g->in_arena || g->storage->in_arena || g->storage->refcount != 1 ||
	    !tensor_is_contiguous(g))
		return NULL;
	n->out->grad = NULL;
	return g;
}

/* Argument errors leave the tape as it is, so the caller can retry. */
static int check_backward_args(const struct tensor *out, const struct tensor *dout)
{
	char bo[128], bd[128];
	if (!out->requires_grad)
		return tensor_error(TENSOR_ERR_ARG,
				    "ag_backward: the output %s does not require grad",
				    tensor_shape_str(out, bo, sizeof bo));
	if (dout && (!tensor_same_shape(out, dout) || dout->dtype != out->dtype))
		return tensor_error(
		    TENSOR_ERR_SHAPE, "ag_backward: dout %s %s does not match the output %s %s",
		    tensor_shape_str(dout, bd, sizeof bd), tensor_dtype_name(dout->dtype),
		    tensor_shape_str(out, bo, sizeof bo), tensor_dtype_name(out->dtype));
	if (!dout && tensor_numel(out) != 1)
		return tensor_error(TENSOR_ERR_SHAPE,
				    "ag_backward: output %s is not a scalar; pass dout",
				    tensor_shape_str(out, bo, sizeof bo));
	return TENSOR_OK;
}

/* Backward over the tape. release_depth > 0: once node k (recorded at that
 * scope depth) has run, the data made in that scope since node k-1's end goes
 * back (tensor_scope_release_since), out's and dout's excepted. Every tensor
 * a node refers to (inputs, output, saved) was made before its end, so none
 * that a node still to run needs goes; the first node of the scope releases
 * from its recording on, keeping what was made before it. */
static int run_backward(struct tensor *out, const struct tensor *dout, int release_depth)
{
	tensor_heap_begin(); /* not a block of the scope for one number */
	struct tensor *seed =
	    dout ? (struct tensor *)dout
		 : tensor_ones(out->dtype, out->storage->device, out->ndim, out->shape);
	tensor_heap_end();
	const struct tensor *keep[2] = { out, dout };
	int rc = ag_accumulate(out, seed);
	if (seed != dout)
		tensor_free(seed);
	for (int k = size - 1; k >= 0 && rc == TENSOR_OK; k--) {
		struct ag_node *n = node_at(k);
		if (n->out->node == n && n->out->grad) {
			/* the node's temporaries die with this scope, its output's
			 * gradient right after: the live gradients are those of the
			 * tensors whose nodes are still to run */
			tensor_scope_begin();
			rc = n->backward(n, n->out->grad);
			tensor_scope_end();
			drop_grad(n->out);
		}
		if (release_depth > 0 && n->depth == release_depth) {
			bool first = k == 0 || node_at(k - 1)->depth != release_depth;
			tensor_scope_release_since(release_depth,
						   first ? n->mark : node_at(k - 1)->end, keep, 2);
		}
	}
	return rc;
}

static int backward(struct tensor *out, const struct tensor *dout, bool release)
{
	if (!out)
		return tensor_last_status() ? tensor_last_status() : TENSOR_ERR_ARG;
	if (lost_depth >= 0)
		return tensor_error(
		    TENSOR_ERR_STATE,
		    "ag_backward: an op could not be recorded on the tape or save a "
		    "tensor for backward (see the first error); run the forward again");
	int rc = check_backward_args(out, dout);
	if (rc < 0)
		return rc;
	/* Each node's temporaries go in a scope of their own (run_backward);
	 * gradients are heap tensors: an intermediate's is freed as soon as its
	 * node has run, a leaf's persists (ag_accumulate). Backward records
	 * nothing. */
	int release_depth = release ? tensor_scope_depth() : 0;
	tensor_scope_begin();
	ag_no_grad_begin();
	rc = run_backward(out, dout, release_depth);
	ag_no_grad_end();
	ag_tape_reset();
	tensor_scope_end();
	return rc;
}

int ag_backward(struct tensor *out, const struct tensor *dout)
{
	return backward(out, dout, false);
}

int ag_backward_release(struct tensor *out, const struct tensor *dout)
{
	return backward(out, dout, true);
}
