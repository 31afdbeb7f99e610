/* The padding mask of nn and models: mask [B, T] of any numeric dtype,
 * nonzero = a real token, 0 = padding (NULL: every token real). */
#include "nn_internal.h"

int nn_check_mask(const char *op, const struct tensor *mask, const struct tensor *x, int64_t t)
{
	if (!mask)
		return TENSOR_OK;
	char bm[128], bx[128];
	tensor_shape_str(mask, bm, sizeof bm);
	tensor_shape_str(x, bx, sizeof bx);
	if (mask->ndim != 2 || mask->shape[0] != x->shape[0] || mask->shape[1] != t)
		return tensor_error(TENSOR_ERR_SHAPE,
				    "%s: mask %s must be [B,T] = [%lld,%lld] (input %s; nonzero = "
				    "a real token)",
				    op, bm, (long long)x->shape[0], (long long)t, bx);
	if (mask->storage->device != x->storage->device)
		return tensor_error(TENSOR_ERR_DEVICE, "%s: mask on %s, input on %s", op,
				    tensor_device_name(mask->storage->device),
				    tensor_device_name(x->storage->device));
	return TENSOR_OK;
}

struct tensor *nn_mask_compare(const struct tensor *mask, enum tensor_dtype dt, bool padding)
{
	struct tensor *c = tensor_cast(mask, dt);
	struct tensor *zero = c ? tensor_zeros(dt, c->storage->device, 0, NULL) : NULL;
	return zero ? (padding ? tensor_eq(c, zero) : tensor_ne(c, zero)) : NULL;
}
