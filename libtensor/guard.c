/* Guards against silent misuse (see guard.h): operands that require grad given to tensor_
 * ops while autograd records, stale scoped headers, and the debug mode's switch. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guard.h"

/* > 0: ops may read tensors that require grad (no-grad regions, ag_ ops, backward) */
static _Thread_local int tracked_allowed;
/* -1: not read yet from CFORMER_DEBUG; else 0 or 1 */
static atomic_int debug_mode = -1;

void tensor_tracked_allow_begin(void)
{
	tracked_allowed++;
}

void tensor_tracked_allow_end(void)
{
	if (tracked_allowed > 0)
		tracked_allowed--;
}

bool tensor_debug(void)
{
	int on = atomic_load_explicit(&debug_mode, memory_order_relaxed);
	if (on < 0) {
		const char *v = getenv("CFORMER_DEBUG");
		on = v && *v && strcmp(v, "0") != 0;
		atomic_store(&debug_mode, on);
	}
	return on;
}

void tensor_set_debug(bool on)
{
	atomic_store(&debug_mode, on);
}

int tensor_check_live(const char *name, const char *arg, const struct tensor *t)
{
	if (t && (t->ndim < 0 || t->ndim > TENSOR_MAX_DIMS)) /* no live header has such an ndim */
		return tensor_error(TENSOR_ERR_STATE,
				    "tensor_%s: %s is a tensor of a scope that has ended (the "
				    "debug mode poisoned its memory); carry what outlives a scope "
				    "out with tensor_scope_keep",
				    name, arg);
	return TENSOR_OK;
}

int tensor_check_operand(const char *name, const char *use, const char *arg, const struct tensor *t)
{
	if (!t)
		return TENSOR_OK;
	if (tensor_check_live(name, arg, t) < 0)
		return TENSOR_ERR_STATE;
	if (!t->requires_grad || tracked_allowed > 0)
		return TENSOR_OK;
	char b[128];
	tensor_shape_str(t, b, sizeof b);
	if (!use)
		return tensor_error(TENSOR_ERR_STATE,
				    "tensor_%s: %s %s requires a gradient and the tape is "
				    "recording, and tensor_%s has no gradient: call it on "
				    "ag_detach(%s), or wrap in ag_no_grad_begin/end",
				    name, arg, b, name, arg);
	char ag[64];
	snprintf(ag, sizeof ag, "ag_%s", name);
	return tensor_error(TENSOR_ERR_STATE,
			    "tensor_%s: %s %s requires a gradient and the tape is recording: "
			    "use %s, or wrap in ag_no_grad_begin/end",
			    name, arg, b, *use ? use : ag);
}
