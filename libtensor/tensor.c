/* Tensor basics: dtypes, headers, creation and argument checks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

static const size_t dtype_sizes[TENSOR_NDTYPES] = { 4, 8, 4, 8, 2 };
static const char *const dtype_names[TENSOR_NDTYPES] = { "f32", "f64", "i32", "i64", "bf16" };

size_t tensor_dtype_size(enum tensor_dtype dt)
{
	return (unsigned)dt < TENSOR_NDTYPES ? dtype_sizes[dt] : 0;
}

const char *tensor_dtype_name(enum tensor_dtype dt)
{
	return (unsigned)dt < TENSOR_NDTYPES ? dtype_names[dt] : "invalid";
}

const char *tensor_device_name(enum tensor_device dev)
{
	switch (dev) {
	case TENSOR_CPU: return "cpu";
	case TENSOR_CUDA: return "cuda";
	default: return "invalid";
	}
}

int64_t tensor_numel(const struct tensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

size_t tensor_nbytes(const struct tensor *t)
{
	return (size_t)tensor_numel(t) * tensor_dtype_size(t->dtype);
}

bool tensor_is_contiguous(const struct tensor *t)
{
	int64_t expect = 1;
	for (int i = t->ndim - 1; i >= 0; i--) {
		if (t->shape[i] != 1 && t->strides[i] != expect)
			return false;
		expect *= t->shape[i];
	}
	return true;
}

void *tensor_data(const struct tensor *t)
{
	if (!t || tensor_check_live("data", "t", t) < 0 || t->storage->device != TENSOR_CPU)
		return NULL;
	return (char *)t->storage->data + t->offset * tensor_dtype_size(t->dtype);
}

int tensor_dim_wrap(const char *op, int dim, int ndim)
{
	int d = dim < 0 ? dim + ndim : dim;
	if (d < 0 || d >= ndim) {
		tensor_error(TENSOR_ERR_SHAPE, "%s: dim %d out of range for a %d-d tensor", op, dim,
			     ndim);
		return -1;
	}
	return d;
}

static const char *shape_str(int ndim, const int64_t *shape, char *buf, size_t len)
{
	size_t n = (size_t)snprintf(buf, len, "[");
	for (int i = 0; i < ndim && n < len; i++)
		n +=
		    (size_t)snprintf(buf + n, len - n, "%s%lld", i ? "," : "", (long long)shape[i]);
	if (n < len)
		snprintf(buf + n, len - n, "]");
	return buf;
}

const char *tensor_shape_str(const struct tensor *t, char *buf, size_t len)
{
	if (!t) {
		snprintf(buf, len, "(null)");
		return buf;
	}
	return shape_str(t->ndim, t->shape, buf, len);
}

bool tensor_same_shape(const struct tensor *a, const struct tensor *b)
{
	if (a->ndim != b->ndim)
		return false;
	for (int i = 0; i < a->ndim; i++)
		if (a->shape[i] != b->shape[i])
			return false;
	return true;
}

/* Validate a creation request; returns the byte size or -1 with an error. */
static int64_t check_shape(const char *op, enum tensor_dtype dt, int ndim, const int64_t *shape)
{
	if ((unsigned)dt >= TENSOR_NDTYPES)
		return tensor_error(TENSOR_ERR_DTYPE, "%s: invalid dtype %d", op, (int)dt), -1;
	if (ndim < 0 || ndim > TENSOR_MAX_DIMS)
		return tensor_error(TENSOR_ERR_SHAPE, "%s: ndim %d not in 0..%d", op, ndim,
				    TENSOR_MAX_DIMS),
		       -1;
	if (ndim > 0 && !shape)
		return tensor_error(TENSOR_ERR_ARG, "%s: shape is NULL", op), -1;
	char buf[160];
	int64_t bytes = (int64_t)tensor_dtype_size(dt);
	for (int i = 0; i < ndim; i++) {
		if (shape[i] < 0)
			return tensor_error(TENSOR_ERR_SHAPE, "%s: negative size in shape %s", op,
					    shape_str(ndim, shape, buf, sizeof buf)),
			       -1;
		if (shape[i] > 0 && bytes > INT64_MAX / 2 / shape[i])
			return tensor_error(TENSOR_ERR_NOMEM,
					    "%s: shape %s overflows the byte size", op,
					    shape_str(ndim, shape, buf, sizeof buf)),
			       -1;
		bytes *= shape[i];
	}
	return bytes;
}

struct tensor *tensor_new(enum tensor_dtype dt, enum tensor_device dev, int ndim,
			  const int64_t *shape)
{
	struct tensor *t = tensor_header_alloc();
	if (!t)
		return NULL;
	t->dtype = dt;
	t->ndim = ndim;
	int64_t stride = 1;
	for (int i = ndim - 1; i >= 0; i--) {
		t->shape[i] = shape[i];
		t->strides[i] = stride;
		stride *= shape[i];
	}
	t->storage = tensor_storage_alloc(dev, (size_t)stride * tensor_dtype_size(dt));
	if (!t->storage) {
		tensor_header_free(t);
		return NULL;
	}
	return t;
}

struct tensor *tensor_new_laid_out(enum tensor_dtype dt, enum tensor_device dev, int ndim,
				   const int64_t *sh, const int *order)
{
	if (!order)
		return tensor_new(dt, dev, ndim, sh);
	int64_t osh[TENSOR_MAX_DIMS];
	int inv[TENSOR_MAX_DIMS];
	for (int d = 0; d < ndim; d++) {
		osh[d] = sh[order[d]];
		inv[order[d]] = d;
	}
	struct tensor *buf = tensor_new(dt, dev, ndim, osh);
	struct tensor *out = buf ? tensor_permute(buf, inv) : NULL;
	tensor_free(buf); /* in a scope a no-op */
	return out;
}

struct tensor *tensor_new_view(const struct tensor *t, int ndim, const int64_t *shape,
			       const int64_t *strides, size_t offset)
{
	struct tensor *v = tensor_header_alloc();
	if (!v)
		return NULL;
	v->storage = t->storage;
	v->dtype = t->dtype;
	v->ndim = ndim;
	v->offset = offset;
	memcpy(v->shape, shape, sizeof(int64_t) * (size_t)ndim);
	memcpy(v->strides, strides, sizeof(int64_t) * (size_t)ndim);
	/* A heap view keeps heap storage alive; arena storage and arena views
	 * live until their scope ends. */
	if (!v->in_arena && !t->storage->in_arena)
		t->storage->refcount++;
	return v;
}

void tensor_free(struct tensor *t)
{
	if (!t || t->in_arena)
		return;
	tensor_free(t->grad); /* a leaf's gradient belongs to it */
	tensor_storage_release(t->storage);
	tensor_header_free(t);
}

struct tensor *tensor_empty(enum tensor_dtype dt, enum tensor_device dev, int ndim,
			    const int64_t *shape)
{
	if (check_shape("tensor_empty", dt, ndim, shape) < 0)
		return NULL;
	if ((unsigned)dev >= TENSOR_NDEVICES) {
		tensor_error(TENSOR_ERR_DEVICE, "tensor_empty: invalid device %d", (int)dev);
		return NULL;
	}
	return tensor_new(dt, dev, ndim, shape);
}

struct tensor *tensor_full(enum tensor_dtype dt, enum tensor_device dev, int ndim,
			   const int64_t *shape, double value)
{
	struct tensor *t = tensor_empty(dt, dev, ndim, shape);
	if (t && tensor_fill_(t, value) < 0) {
		tensor_free(t);
		return NULL;
	}
	return t;
}

struct tensor *tensor_zeros(enum tensor_dtype dt, enum tensor_device dev, int ndim,
			    const int64_t *shape)
{
	return tensor_full(dt, dev, ndim, shape, 0.0);
}

struct tensor *tensor_ones(enum tensor_dtype dt, enum tensor_device dev, int ndim,
			   const int64_t *shape)
{
	return tensor_full(dt, dev, ndim, shape, 1.0);
}

struct tensor *tensor_arange(enum tensor_dtype dt, enum tensor_device dev, double start, double end,
			     double step)
{
	if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step)) {
		tensor_error(
		    TENSOR_ERR_ARG,
		    "tensor_arange: need finite start, end and a nonzero step, got %g, %g, %g",
		    start, end, step);
		return NULL;
	}
	double count = ceil((end - start) / step);
	int64_t n = count > 0 ? (int64_t)count : 0;
	struct tensor *t = tensor_empty(dt, dev, 1, &n);
	if (!t)
		return NULL;
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(dev, arange, "tensor_arange");
	return tensor_op_result(t, be ? be->arange(t, start, step) : tensor_last_status());
}

struct tensor *tensor_from_data(enum tensor_dtype dt, enum tensor_device dev, int ndim,
				const int64_t *shape, const void *data)
{
	if (!data) {
		tensor_error(TENSOR_ERR_ARG, "tensor_from_data: data is NULL");
		return NULL;
	}
	struct tensor *t = tensor_empty(dt, dev, ndim, shape);
	if (!t)
		return NULL;
	const struct tensor_backend *be = tensor_backend_get(dev);
	return tensor_op_result(t, be->copy_from_host(t->storage->data, data, tensor_nbytes(t)));
}

static int fill_random(const char *op, struct tensor *t, enum tensor_random_kind kind,
		       uint64_t seed, double a, double b)
{
	if (!t)
		return tensor_last_status() ? tensor_last_status() : TENSOR_ERR_ARG;
	if (tensor_check_float(op, t) < 0)
		return TENSOR_ERR_DTYPE;
	if (tensor_check_writable(op, t) < 0)
		return TENSOR_ERR_STATE;
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(t->storage->device, random, op);
	return be ? be->random(t, kind, seed, a, b) : tensor_last_status();
}

int tensor_uniform_(struct tensor *t, uint64_t seed, double lo, double hi)
{
	if (!(lo <= hi) || !isfinite(lo) || !isfinite(hi))
		return tensor_error(TENSOR_ERR_ARG, "tensor_uniform_: need lo <= hi, got %g, %g",
				    lo, hi);
	return fill_random("tensor_uniform_", t, TENSOR_RAND_UNIFORM, seed, lo, hi);
}

int tensor_normal_(struct tensor *t, uint64_t seed, double mean, double std)
{
	if (!(std >= 0) || !isfinite(mean) || !isfinite(std))
		return tensor_error(TENSOR_ERR_ARG,
				    "tensor_normal_: need finite mean and std >= 0, got %g, %g",
				    mean, std);
	return fill_random("tensor_normal_", t, TENSOR_RAND_NORMAL, seed, mean, std);
}

static struct tensor *rand_new(enum tensor_dtype dt, enum tensor_device dev, int ndim,
			       const int64_t *shape,
			       int rc_of(struct tensor *, uint64_t, double, double), uint64_t seed,
			       double a, double b)
{
	struct tensor *t = tensor_empty(dt, dev, ndim, shape);
	if (t && rc_of(t, seed, a, b) < 0) {
		tensor_free(t);
		return NULL;
	}
	return t;
}

struct tensor *tensor_rand_uniform(enum tensor_dtype dt, enum tensor_device dev, int ndim,
				   const int64_t *shape, uint64_t seed, double lo, double hi)
{
	return rand_new(dt, dev, ndim, shape, tensor_uniform_, seed, lo, hi);
}

struct tensor *tensor_rand_normal(enum tensor_dtype dt, enum tensor_device dev, int ndim,
				  const int64_t *shape, uint64_t seed, double mean, double std)
{
	return rand_new(dt, dev, ndim, shape, tensor_normal_, seed, mean, std);
}

int tensor_check_writable(const char *op, const struct tensor *t)
{
	if (t && t->storage->tape_refs > 0)
		return tensor_error(
		    TENSOR_ERR_STATE,
		    "%s: the tensor is saved by the autograd tape for backward; "
		    "in-place modification refused (clone it, or run backward first)",
		    op);
	return TENSOR_OK;
}

int tensor_fill_(struct tensor *t, double value)
{
	if (!t)
		return tensor_error(TENSOR_ERR_ARG, "tensor_fill_: tensor is NULL");
	if (tensor_check_writable("tensor_fill_", t) < 0)
		return TENSOR_ERR_STATE;
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(t->storage->device, fill, "tensor_fill_");
	return be ? be->fill(t, value) : tensor_last_status();
}

/* ---- argument checks shared by the op front-ends -------------------------- */

int tensor_check_pair(const char *op, const struct tensor *a, const struct tensor *b)
{
	if (!a || !b)
		return tensor_error(TENSOR_ERR_ARG, "%s: input is NULL", op);
	char ba[128], bb[128];
	if (a->storage->device != b->storage->device)
		return tensor_error(
		    TENSOR_ERR_DEVICE, "%s: inputs on different devices: %s on %s and %s on %s", op,
		    tensor_shape_str(a, ba, sizeof ba), tensor_device_name(a->storage->device),
		    tensor_shape_str(b, bb, sizeof bb), tensor_device_name(b->storage->device));
	if (a->dtype != b->dtype)
		return tensor_error(TENSOR_ERR_DTYPE, "%s: dtypes differ: %s %s and %s %s", op,
				    tensor_shape_str(a, ba, sizeof ba), tensor_dtype_name(a->dtype),
				    tensor_shape_str(b, bb, sizeof bb),
				    tensor_dtype_name(b->dtype));
	return TENSOR_OK;
}

int tensor_check_float(const char *op, const struct tensor *t)
{
	if (!t)
		return tensor_error(TENSOR_ERR_ARG, "%s: input is NULL", op);
	char b[128];
	if (t->dtype != TENSOR_F32 && t->dtype != TENSOR_F64)
		return tensor_error(TENSOR_ERR_DTYPE, "%s: expected f32 or f64, got %s %s", op,
				    tensor_shape_str(t, b, sizeof b), tensor_dtype_name(t->dtype));
	return TENSOR_OK;
}

int tensor_check_not_bf16(const char *op, const struct tensor *t)
{
	if (!t)
		return tensor_error(TENSOR_ERR_ARG, "%s: input is NULL", op);
	char b[128];
	if (t->dtype == TENSOR_BF16)
		return tensor_error(TENSOR_ERR_DTYPE,
				    "%s: bf16 not supported (%s bf16): bf16 is a storage and "
				    "matmul dtype, cast to f32 first",
				    op, tensor_shape_str(t, b, sizeof b));
	return TENSOR_OK;
}

int tensor_broadcast_shape(const char *op, const struct tensor *a, const struct tensor *b,
			   int64_t *out)
{
	int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
	for (int i = 0; i < nd; i++) {
		int ia = a->ndim - nd + i, ib = b->ndim - nd + i;
		int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
		if (sa != sb && sa != 1 && sb != 1) {
			char ba[128], bb[128];
			tensor_error(TENSOR_ERR_SHAPE, "%s: shapes %s and %s do not broadcast", op,
				     tensor_shape_str(a, ba, sizeof ba),
				     tensor_shape_str(b, bb, sizeof bb));
			return -1;
		}
		out[i] = sa == 1 ? sb : sa;
	}
	return nd;
}
