/* The scope every forward of nn and models runs in: its temporaries are
 * made in the caller's open scope and released when that scope ends, so
 * module code frees none of them by hand. */
#include "nn_internal.h"
#include "mem.h"

int nn_require_scope(const char *fn)
{
	if (tensor_scope_depth() == 0)
		return tensor_error(
		    TENSOR_ERR_STATE,
		    "%s: called outside a scope: open one with tensor_scope_begin() "
		    "(forwards allocate their temporaries in it; keep a result past "
		    "tensor_scope_end() with tensor_scope_keep())",
		    fn);
	if (tensor_heap_mode())
		return tensor_error(TENSOR_ERR_STATE,
				    "%s: called between tensor_heap_begin() and tensor_heap_end(): "
				    "its temporaries would be heap tensors nothing frees (call it "
				    "in the scope, after tensor_heap_end())",
				    fn);
	return TENSOR_OK;
}
