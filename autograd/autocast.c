/* Mixed precision: regions that set the precision of f32 products to bf16
 * (tensor_set_matmul_precision), the nodes that keep it for their backward,
 * and the bf16 copies of parameters that spare rounding them at each use. */
#include "autograd.h"
#include "ag_internal.h"
#include "backend.h"
#include "mem.h"

#define AUTOCAST_MAX_DEPTH 16
#define AUTOCAST_MAX_COPIES 64

/* A storage whose operands are read from a bf16 copy, for the region at depth. */
struct autocast_copy {
	const struct tensor_storage *src;
	struct tensor *copy; /* an alias: keeps the copy's storage alive */
	int depth;
};

static _Thread_local enum tensor_dtype region_dt[AUTOCAST_MAX_DEPTH], outer_dt[AUTOCAST_MAX_DEPTH];
static _Thread_local int depth;
static _Thread_local struct autocast_copy copies[AUTOCAST_MAX_COPIES];
static _Thread_local int ncopies;

int ag_autocast_begin(enum tensor_dtype dt)
{
	if (dt != TENSOR_BF16 && dt != TENSOR_F32)
		return tensor_error(
		    TENSOR_ERR_DTYPE,
		    "ag_autocast_begin: expected bf16 (or f32: no rounding), got %s",
		    tensor_dtype_name(dt));
	if (depth == AUTOCAST_MAX_DEPTH)
		return tensor_error(TENSOR_ERR_STATE,
				    "ag_autocast_begin: regions nest at most %d deep",
				    AUTOCAST_MAX_DEPTH);
	outer_dt[depth] = tensor_matmul_precision();
	region_dt[depth++] = dt;
	return tensor_set_matmul_precision(dt);
}

void ag_autocast_end(void)
{
	if (depth == 0)
		return;
	while (ncopies > 0 && copies[ncopies - 1].depth == depth)
		tensor_free(copies[--ncopies].copy);
	tensor_set_matmul_precision(outer_dt[--depth]);
}

enum tensor_dtype ag_autocast_dtype(void)
{
	return depth > 0 ? region_dt[depth - 1] : TENSOR_F32;
}

int ag_autocast_storage(const struct tensor *src, const struct tensor *copy)
{
	if (!src || !copy)
		return tensor_error(TENSOR_ERR_ARG, "ag_autocast_storage: src or copy is NULL");
	if (depth == 0)
		return tensor_error(TENSOR_ERR_STATE,
				    "ag_autocast_storage: no region open (ag_autocast_begin)");
	if (src->dtype != TENSOR_F32 || copy->dtype != TENSOR_BF16 || !tensor_is_contiguous(src) ||
	    !tensor_is_contiguous(copy) || src->offset != 0 || copy->offset != 0 ||
	    tensor_numel(src) != tensor_numel(copy) ||
	    copy->storage->device != src->storage->device) {
		char bs[128], bc[128];
		tensor_error(TENSOR_ERR_ARG,
			     "ag_autocast_storage: expected a contiguous f32 src at offset 0 and a "
			     "contiguous bf16 copy of as many elements on its device, got %s %s "
			     "and %s %s",
			     tensor_dtype_name(src->dtype), tensor_shape_str(src, bs, sizeof bs),
			     tensor_dtype_name(copy->dtype), tensor_shape_str(copy, bc, sizeof bc));
		return TENSOR_ERR_ARG;
	}
	if (ncopies == AUTOCAST_MAX_COPIES)
		return tensor_error(TENSOR_ERR_STATE,
				    "ag_autocast_storage: at most %d copies in the open regions",
				    AUTOCAST_MAX_COPIES);
	tensor_heap_begin();
	struct tensor *alias = tensor_alias(copy);
	tensor_heap_end();
	if (!alias)
		return tensor_last_status();
	copies[ncopies++] = (struct autocast_copy){ src->storage, alias, depth };
	return TENSOR_OK;
}

struct tensor *ag_autocast_operand(const struct tensor *x)
{
	if (!x || x->dtype != TENSOR_F32 || ag_autocast_dtype() != TENSOR_BF16)
		return (struct tensor *)x;
	for (int i = ncopies - 1; i >= 0; i--) {
		if (copies[i].src != x->storage)
			continue;
		if (tensor_scope_depth() == 0 || tensor_heap_mode()) { /* the view would leak */
			tensor_error(TENSOR_ERR_STATE,
				     "bf16 region: a product reads a parameter's bf16 copy through "
				     "a view made in the open scope, and none is open "
				     "(tensor_scope_begin), or tensor_heap_begin() is in effect");
			return NULL;
		}
		return tensor_new_view(copies[i].copy, x->ndim, x->shape, x->strides, x->offset);
	}
	return (struct tensor *)x; /* rounded as the product packs it */
}

void ag_autocast_pair(struct tensor **a, struct tensor **b)
{
	if (*a && *b && (*a)->dtype == TENSOR_F32 && (*b)->dtype == TENSOR_F32) {
		*a = ag_autocast_operand(*a);
		*b = ag_autocast_operand(*b);
	}
}

enum tensor_dtype ag_product_dtype(const struct tensor *a)
{
	return a && a->dtype == TENSOR_BF16 ? TENSOR_F32 : a ? a->dtype : TENSOR_F32;
}

void ag_node_keep_precision(struct ag_node *n)
{
	if (n)
		n->i[AG_PRECISION_SLOT] = tensor_matmul_precision();
}

enum tensor_dtype ag_node_precision_begin(const struct ag_node *n)
{
	enum tensor_dtype prev = tensor_matmul_precision();
	tensor_set_matmul_precision((enum tensor_dtype)n->i[AG_PRECISION_SLOT]);
	return prev;
}
