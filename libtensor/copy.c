/* Copies between layouts and devices, element access and printing. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "bf16.h"
#include "mem.h"

int tensor_copy_(struct tensor *dst, const struct tensor *src)
{
	if (!dst || !src)
		return tensor_error(TENSOR_ERR_ARG, "copy_: input is NULL");
	if (dst->storage->device != src->storage->device)
		return tensor_error(TENSOR_ERR_DEVICE,
				    "copy_: dst on %s, src on %s (use "
				    "tensor_to_device)",
				    tensor_device_name(dst->storage->device),
				    tensor_device_name(src->storage->device));
	if (tensor_check_writable("copy_", dst) < 0)
		return TENSOR_ERR_STATE;
	const struct tensor *s = src;
	if (!tensor_same_shape(dst, src)) {
		bool ok = src->ndim <= dst->ndim;
		for (int i = 0; ok && i < src->ndim; i++) {
			int64_t n = src->shape[i], want = dst->shape[dst->ndim - src->ndim + i];
			ok = n == want || n == 1;
		}
		char bd[128], bs[128];
		if (!ok)
			return tensor_error(TENSOR_ERR_SHAPE, "copy_: cannot broadcast %s into %s",
					    tensor_shape_str(src, bs, sizeof bs),
					    tensor_shape_str(dst, bd, sizeof bd));
		s = tensor_broadcast_to(src, dst->ndim, dst->shape);
		if (!s)
			return tensor_last_status();
	}
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(dst->storage->device, copy, "copy_");
	int rc = be ? be->copy(dst, s) : tensor_last_status();
	if (s != src)
		tensor_free((struct tensor *)s);
	return rc;
}

static struct tensor *copy_as(const struct tensor *t, enum tensor_dtype dt)
{
	struct tensor *out = tensor_new(dt, t->storage->device, t->ndim, t->shape);
	if (out && tensor_copy_(out, t) < 0) {
		tensor_free(out);
		return NULL;
	}
	return out;
}

/* tensor_contiguous without the operand check: reads (to_host) take any tensor. */
static struct tensor *contiguous_of(const struct tensor *t)
{
	if (tensor_is_contiguous(t))
		return tensor_new_view(t, t->ndim, t->shape, t->strides, t->offset);
	return copy_as(t, t->dtype);
}

struct tensor *tensor_contiguous(const struct tensor *t)
{
	if (!t || tensor_check_operand("contiguous", "ag_contiguous", "t", t) < 0)
		return NULL;
	return contiguous_of(t);
}

struct tensor *tensor_clone(const struct tensor *t)
{
	if (!t || tensor_check_operand("clone", NULL, "t", t) < 0)
		return NULL;
	return copy_as(t, t->dtype);
}

struct tensor *tensor_cast(const struct tensor *x, enum tensor_dtype dt)
{
	if (!x)
		return NULL;
	if ((unsigned)dt >= TENSOR_NDTYPES) {
		tensor_error(TENSOR_ERR_DTYPE, "cast: invalid dtype %d", (int)dt);
		return NULL;
	}
	bool integer = dt == TENSOR_I32 || dt == TENSOR_I64; /* no gradient to lose */
	if (!integer && tensor_check_operand("cast", "", "x", x) < 0)
		return NULL;
	return copy_as(x, dt);
}

int tensor_rebase_(struct tensor *t, const struct tensor *base, int64_t offset)
{
	if (!t || !base)
		return tensor_error(TENSOR_ERR_ARG, "rebase_: input is NULL");
	char bt[128], bb[128];
	if (t->in_arena || base->storage->in_arena)
		return tensor_error(TENSOR_ERR_ARG, "rebase_: tensors must be heap tensors");
	if (t->dtype != base->dtype || t->storage->device != base->storage->device ||
	    !tensor_is_contiguous(base))
		return tensor_error(TENSOR_ERR_ARG,
				    "rebase_: %s %s cannot move into %s %s (need same dtype and "
				    "device, contiguous base)",
				    tensor_shape_str(t, bt, sizeof bt), tensor_dtype_name(t->dtype),
				    tensor_shape_str(base, bb, sizeof bb),
				    tensor_dtype_name(base->dtype));
	int64_t n = tensor_numel(t);
	if (offset < 0 || offset > tensor_numel(base) - n)
		return tensor_error(TENSOR_ERR_SHAPE,
				    "rebase_: %lld elements at offset %lld do not fit in %s",
				    (long long)n, (long long)offset,
				    tensor_shape_str(base, bb, sizeof bb));
	int64_t shape[TENSOR_MAX_DIMS];
	memcpy(shape, t->shape, sizeof shape);
	struct tensor *dst =
		tensor_new_view(base, t->ndim, shape, t->strides, base->offset + (size_t)offset);
	if (!dst)
		return tensor_last_status();
	int64_t s = 1; /* contiguous strides for the destination */
	for (int i = t->ndim - 1; i >= 0; i--) {
		dst->strides[i] = s;
		s *= shape[i];
	}
	int rc = tensor_copy_(dst, t);
	if (rc == TENSOR_OK) {
		tensor_storage_release(t->storage);
		t->storage = dst->storage;
		t->offset = dst->offset;
		memcpy(t->strides, dst->strides, sizeof t->strides);
		dst->storage->refcount++; /* t's reference; dst's goes with tensor_free */
	}
	tensor_free(dst);
	return rc;
}

int tensor_to_host(const struct tensor *t, void *dst, size_t nbytes)
{
	if (!t || !dst)
		return tensor_error(TENSOR_ERR_ARG, "to_host: input is NULL");
	if (tensor_check_live("to_host", "t", t) < 0)
		return TENSOR_ERR_STATE;
	if (nbytes != tensor_nbytes(t))
		return tensor_error(TENSOR_ERR_ARG, "to_host: buffer has %zu bytes, tensor %zu",
				    nbytes, tensor_nbytes(t));
	struct tensor *c = contiguous_of(t);
	if (!c)
		return tensor_last_status();
	const struct tensor_backend *be = tensor_backend_get(c->storage->device);
	int rc = be->copy_to_host(
	    dst, (char *)c->storage->data + c->offset * tensor_dtype_size(c->dtype), nbytes);
	tensor_free(c);
	return rc;
}

struct tensor *tensor_to_device(const struct tensor *t, enum tensor_device dev)
{
	if (!t || tensor_check_operand("to_device", NULL, "t", t) < 0)
		return NULL;
	if (t->storage->device == dev)
		return tensor_clone(t);
	const struct tensor_backend *be = tensor_backend_get(dev);
	if (!be)
		return NULL;
	struct tensor *c = tensor_contiguous(t);
	struct tensor *out = c ? tensor_new(t->dtype, dev, t->ndim, t->shape) : NULL;
	if (out) {
		size_t n = tensor_nbytes(c);
		void *host = tensor_host_malloc(n ? n : 1);
		int rc = host ? tensor_to_host(c, host, n)
			      : tensor_error(TENSOR_ERR_NOMEM, "to_device: no host staging buffer");
		if (rc == TENSOR_OK)
			rc = be->copy_from_host(out->storage->data, host, n);
		free(host);
		if (rc < 0) {
			tensor_free(out);
			out = NULL;
		}
	}
	tensor_free(c);
	return out;
}

static double load(const void *p, enum tensor_dtype dt)
{
	switch (dt) {
	case TENSOR_F32: return *(const float *)p;
	case TENSOR_F64: return *(const double *)p;
	case TENSOR_I32: return *(const int32_t *)p;
	case TENSOR_BF16: {
		uint16_t h;
		memcpy(&h, p, sizeof h);
		return bf16_to_f64(h);
	}
	default: return (double)*(const int64_t *)p;
	}
}

double tensor_get(const struct tensor *t, const int64_t *index)
{
	if (!t || (t->ndim > 0 && !index)) {
		tensor_error(TENSOR_ERR_ARG, "get: input is NULL");
		return 0;
	}
	if (tensor_check_live("get", "t", t) < 0)
		return 0;
	int64_t off = (int64_t)t->offset;
	for (int i = 0; i < t->ndim; i++) {
		if (index[i] < 0 || index[i] >= t->shape[i]) {
			char b[128];
			tensor_error(TENSOR_ERR_SHAPE,
				     "get: index %lld out of range at dim %d of %s",
				     (long long)index[i], i, tensor_shape_str(t, b, sizeof b));
			return 0;
		}
		off += index[i] * t->strides[i];
	}
	size_t es = tensor_dtype_size(t->dtype);
	char buf[8];
	const struct tensor_backend *be = tensor_backend_get(t->storage->device);
	if (!be || be->copy_to_host(buf, (char *)t->storage->data + (size_t)off * es, es) < 0)
		return 0;
	return load(buf, t->dtype);
}

void tensor_print(const struct tensor *t, const char *name, FILE *f)
{
	char b[128];
	if (!t) {
		fprintf(f, "%s: (null)\n", name ? name : "tensor");
		return;
	}
	fprintf(f, "%s: %s %s %s%s\n", name ? name : "tensor", tensor_shape_str(t, b, sizeof b),
		tensor_dtype_name(t->dtype), tensor_device_name(t->storage->device),
		tensor_is_contiguous(t) ? "" : " (strided)");
	int64_t n = tensor_numel(t), show = n < 16 ? n : 16, idx[TENSOR_MAX_DIMS];
	fprintf(f, "  [");
	for (int64_t k = 0; k < show; k++) {
		int64_t r = k;
		for (int i = t->ndim - 1; i >= 0; i--) {
			idx[i] = r % t->shape[i];
			r /= t->shape[i];
		}
		fprintf(f, "%s%.6g", k ? ", " : "", tensor_get(t, idx));
	}
	fprintf(f, "%s]\n", show < n ? ", ..." : "");
}
