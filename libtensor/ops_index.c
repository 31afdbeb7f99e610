/* Indexing and joining: index_select/index_add_, gather/scatter_add_, concat, stack, split. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "mem.h"

/* Status for a NULL input: the recorded error if any, else a new one naming op. */
static int null_input(const char *op)
{
	int st = tensor_last_status();
	return st ? st : tensor_error(TENSOR_ERR_ARG, "%s: input is NULL", op);
}

static const char *shape_str(int ndim, const int64_t *shape, char *buf, size_t len)
{
	struct tensor tmp = { .ndim = ndim };
	memcpy(tmp.shape, shape, sizeof(int64_t) * (size_t)ndim);
	return tensor_shape_str(&tmp, buf, len);
}

/* idx is an i32/i64 tensor on t's device. */
static int check_index_tensor(const char *op, const struct tensor *t, const struct tensor *idx)
{
	if (tensor_check_not_bf16(op, t) < 0)
		return TENSOR_ERR_DTYPE;
	if (idx->dtype != TENSOR_I32 && idx->dtype != TENSOR_I64)
		return tensor_error(TENSOR_ERR_DTYPE, "%s: index dtype must be i32 or i64, got %s",
				    op, tensor_dtype_name(idx->dtype));
	if (idx->storage->device != t->storage->device)
		return tensor_error(TENSOR_ERR_DEVICE, "%s: index on %s, tensor on %s", op,
				    tensor_device_name(idx->storage->device),
				    tensor_device_name(t->storage->device));
	return TENSOR_OK;
}

/* A tensor written in place must not have two elements at one address. */
static int check_distinct(const char *op, const struct tensor *dst)
{
	for (int i = 0; i < dst->ndim; i++) {
		if (dst->shape[i] > 1 && dst->strides[i] == 0) {
			char b[128];
			return tensor_error(TENSOR_ERR_ARG,
					    "%s: dst %s is broadcast (stride 0) in dim %d, "
					    "expected distinct elements",
					    op, tensor_shape_str(dst, b, sizeof b), i);
		}
	}
	return TENSOR_OK;
}

/* First index of the n at host address p (strides in elements, any layout)
 * outside [0, size), or -1. */
static int64_t find_bad_index(const char *p, enum tensor_dtype dt, int ndim, const int64_t *shape,
			      const int64_t *strides, int64_t n, int64_t size, int64_t *value)
{
	size_t es = tensor_dtype_size(dt);
	if (ndim == 1 && strides[0] == 1) {
		for (int64_t i = 0; i < n; i++) {
			int64_t v =
			    dt == TENSOR_I32 ? ((const int32_t *)p)[i] : ((const int64_t *)p)[i];
			if (v < 0 || v >= size) {
				*value = v;
				return i;
			}
		}
		return -1;
	}
	for (int64_t i = 0; i < n; i++) {
		int64_t off = 0, r = i;
		for (int d = ndim - 1; d >= 0; d--) {
			off += (r % shape[d]) * strides[d];
			r /= shape[d];
		}
		const char *e = p + off * (int64_t)es;
		int64_t v = dt == TENSOR_I32 ? *(const int32_t *)e : *(const int64_t *)e;
		if (v < 0 || v >= size) {
			*value = v;
			return i;
		}
	}
	return -1;
}

/* Check every index is in [0, size): on the host for CPU tensors, on the
 * device where its backend can (the error then comes at the next
 * synchronisation), else through a contiguous copy to host memory. */
static int check_index_range(const char *op, const struct tensor *idx, int dim, int64_t size)
{
	int64_t n = tensor_numel(idx), value = 0, bad;
	if (n == 0)
		return TENSOR_OK;
	if (idx->storage->device == TENSOR_CPU && tensor_is_contiguous(idx)) {
		int64_t flat = n;
		bad = find_bad_index(tensor_data(idx), idx->dtype, 1, &flat, &(int64_t){ 1 }, n,
				     size, &value);
	} else if (idx->storage->device == TENSOR_CPU) {
		bad = find_bad_index(tensor_data(idx), idx->dtype, idx->ndim, idx->shape,
				     idx->strides, n, size, &value);
	} else if (tensor_backend_get(idx->storage->device)->check_index) {
		/* on the device, reported by the next synchronisation */
		return tensor_backend_get(idx->storage->device)
		    ->check_index(op, idx, dim, size);
	} else {
		size_t nbytes = tensor_nbytes(idx);
		void *host = tensor_host_malloc(nbytes);
		if (!host)
			return tensor_error(TENSOR_ERR_NOMEM, "%s: no host buffer for %lld indices",
					    op, (long long)n);
		int rc = tensor_to_host(idx, host, nbytes);
		int64_t flat = n;
		bad = rc < 0 ? -1
			     : find_bad_index(host, idx->dtype, 1, &flat, &(int64_t){ 1 }, n, size,
					      &value);
		free(host);
		if (rc < 0)
			return rc;
	}
	if (bad < 0)
		return TENSOR_OK;
	return tensor_error(
	    TENSOR_ERR_ARG,
	    "%s: index %lld (at position %lld) out of range for dim %d of size %lld", op,
	    (long long)value, (long long)bad, dim, (long long)size);
}

int tensor_check_index(const char *op, const struct tensor *idx, int dim, int64_t size)
{
	if (!op || !idx)
		return null_input(op ? op : "check_index");
	if (idx->dtype != TENSOR_I32 && idx->dtype != TENSOR_I64)
		return tensor_error(TENSOR_ERR_DTYPE, "%s: index dtype must be i32 or i64, got %s",
				    op, tensor_dtype_name(idx->dtype));
	return check_index_range(op, idx, dim, size);
}

/* Shape of t with dim replaced by idx's dims; its ndim, or -1 with an error. */
static int indexed_shape(const char *op, const struct tensor *t, int dim, const struct tensor *idx,
			 int64_t *shape)
{
	int nd = t->ndim - 1 + idx->ndim;
	if (nd > TENSOR_MAX_DIMS) {
		char bt[128], bi[128];
		tensor_error(
		    TENSOR_ERR_SHAPE,
		    "%s: indexing %s along dim %d by %s gives %d dims, expected at most %d", op,
		    tensor_shape_str(t, bt, sizeof bt), dim, tensor_shape_str(idx, bi, sizeof bi),
		    nd, TENSOR_MAX_DIMS);
		return -1;
	}
	int k = 0;
	for (int i = 0; i < dim; i++)
		shape[k++] = t->shape[i];
	for (int i = 0; i < idx->ndim; i++)
		shape[k++] = idx->shape[i];
	for (int i = dim + 1; i < t->ndim; i++)
		shape[k++] = t->shape[i];
	return nd;
}

struct tensor *tensor_index_select(const struct tensor *src, int dim, const struct tensor *idx)
{
	static const char op[] = "index_select";
	if (!src || !idx) {
		null_input(op);
		return NULL;
	}
	if (tensor_check_operand(op, "", "src", src) < 0)
		return NULL;
	int d = tensor_dim_wrap(op, dim, src->ndim);
	int64_t shape[TENSOR_MAX_DIMS];
	int nd = d < 0 ? -1 : indexed_shape(op, src, d, idx, shape);
	if (nd < 0 || check_index_tensor(op, src, idx) < 0 ||
	    check_index_range(op, idx, d, src->shape[d]) < 0)
		return NULL;
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(src->storage->device, index_select, op);
	struct tensor *out = be ? tensor_new(src->dtype, src->storage->device, nd, shape) : NULL;
	if (!out)
		return NULL;
	return tensor_op_result(out, tensor_numel(out) ? be->index_select(out, src, d, idx)
						       : TENSOR_OK);
}

int tensor_index_add_(struct tensor *dst, int dim, const struct tensor *idx,
		      const struct tensor *src)
{
	static const char op[] = "index_add_";
	if (!dst || !idx || !src)
		return null_input(op);
	int rc = tensor_check_pair(op, dst, src);
	if (rc < 0)
		return rc;
	int d = tensor_dim_wrap(op, dim, dst->ndim);
	if (d < 0)
		return TENSOR_ERR_SHAPE;
	int64_t shape[TENSOR_MAX_DIMS];
	int nd = indexed_shape(op, dst, d, idx, shape);
	if (nd < 0)
		return TENSOR_ERR_SHAPE;
	bool same = nd == src->ndim;
	for (int i = 0; same && i < nd; i++)
		same = shape[i] == src->shape[i];
	if (!same) {
		char bs[128], bd[128], bi[128], be_[128];
		return tensor_error(
		    TENSOR_ERR_SHAPE,
		    "%s: src %s does not match dst %s indexed along dim %d by %s, expected %s", op,
		    tensor_shape_str(src, bs, sizeof bs), tensor_shape_str(dst, bd, sizeof bd), d,
		    tensor_shape_str(idx, bi, sizeof bi), shape_str(nd, shape, be_, sizeof be_));
	}
	if ((rc = check_index_tensor(op, dst, idx)) < 0 || (rc = check_distinct(op, dst)) < 0 ||
	    (rc = tensor_check_writable(op, dst)) < 0 ||
	    (rc = check_index_range(op, idx, d, dst->shape[d])) < 0)
		return rc;
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(dst->storage->device, index_add, op);
	if (!be)
		return tensor_last_status();
	return tensor_numel(src) > 0 ? be->index_add(dst, d, idx, src) : TENSOR_OK;
}

/* gather/scatter_add shapes: idx has t's ndim and, off dim, sizes <= t's
 * (for every dim when `all`). */
static int check_gather_shape(const char *op, const char *tname, const struct tensor *t, int d,
			      const struct tensor *idx, bool all)
{
	char bt[128], bi[128];
	if (idx->ndim != t->ndim)
		return tensor_error(TENSOR_ERR_SHAPE,
				    "%s: index %s and %s %s differ in ndim, expected equal", op,
				    tensor_shape_str(idx, bi, sizeof bi), tname,
				    tensor_shape_str(t, bt, sizeof bt));
	for (int i = 0; i < t->ndim; i++) {
		if ((i != d || all) && idx->shape[i] > t->shape[i])
			return tensor_error(TENSOR_ERR_SHAPE,
					    "%s: index %s is larger than %s %s in dim %d, expected "
					    "<= %lld",
					    op, tensor_shape_str(idx, bi, sizeof bi), tname,
					    tensor_shape_str(t, bt, sizeof bt), i,
					    (long long)t->shape[i]);
	}
	return TENSOR_OK;
}

struct tensor *tensor_gather(const struct tensor *src, int dim, const struct tensor *idx)
{
	static const char op[] = "gather";
	if (!src || !idx) {
		null_input(op);
		return NULL;
	}
	if (tensor_check_operand(op, "", "src", src) < 0)
		return NULL;
	int d = tensor_dim_wrap(op, dim, src->ndim);
	if (d < 0 || check_index_tensor(op, src, idx) < 0 ||
	    check_gather_shape(op, "src", src, d, idx, false) < 0 ||
	    check_index_range(op, idx, d, src->shape[d]) < 0)
		return NULL;
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(src->storage->device, gather, op);
	struct tensor *out =
	    be ? tensor_new(src->dtype, src->storage->device, idx->ndim, idx->shape) : NULL;
	if (!out)
		return NULL;
	return tensor_op_result(out, tensor_numel(out) ? be->gather(out, src, d, idx) : TENSOR_OK);
}

int tensor_scatter_add_(struct tensor *dst, int dim, const struct tensor *idx,
			const struct tensor *src)
{
	static const char op[] = "scatter_add_";
	if (!dst || !idx || !src)
		return null_input(op);
	int rc = tensor_check_pair(op, dst, src);
	if (rc < 0)
		return rc;
	int d = tensor_dim_wrap(op, dim, dst->ndim);
	if (d < 0)
		return TENSOR_ERR_SHAPE;
	if ((rc = check_index_tensor(op, dst, idx)) < 0 ||
	    (rc = check_gather_shape(op, "src", src, d, idx, true)) < 0 ||
	    (rc = check_gather_shape(op, "dst", dst, d, idx, false)) < 0 ||
	    (rc = check_distinct(op, dst)) < 0 || (rc = tensor_check_writable(op, dst)) < 0 ||
	    (rc = check_index_range(op, idx, d, dst->shape[d])) < 0)
		return rc;
	const struct tensor_backend *be = TENSOR_BACKEND_FOR(dst->storage->device, scatter_add, op);
	if (!be)
		return tensor_last_status();
	return tensor_numel(idx) > 0 ? be->scatter_add(dst, d, idx, src) : TENSOR_OK;
}

/* ---- joining ---------------------------------------------------------------- */

/* ts[0..n-1] are non-NULL, n >= 1, on ts[0]'s device with its dtype. */
static int check_list(const char *op, int n, struct tensor *const *ts)
{
	if (n < 1 || !ts)
		return tensor_error(TENSOR_ERR_ARG, "%s: need at least 1 tensor, got n = %d%s", op,
				    n, n >= 1 ? " with a NULL array" : "");
	for (int i = 0; i < n; i++)
		if (!ts[i])
			return null_input(op);
	for (int i = 0; i < n; i++)
		if (tensor_check_operand(op, "", "an input", ts[i]) < 0)
			return TENSOR_ERR_STATE;
	const struct tensor *a = ts[0];
	for (int i = 1; i < n; i++) {
		const struct tensor *b = ts[i];
		if (b->storage->device != a->storage->device)
			return tensor_error(
			    TENSOR_ERR_DEVICE,
			    "%s: tensor %d on %s, tensor 0 on %s, expected one device", op, i,
			    tensor_device_name(b->storage->device),
			    tensor_device_name(a->storage->device));
		if (b->dtype != a->dtype)
			return tensor_error(
			    TENSOR_ERR_DTYPE,
			    "%s: tensor %d is %s, tensor 0 is %s, expected one dtype", op, i,
			    tensor_dtype_name(b->dtype), tensor_dtype_name(a->dtype));
	}
	return TENSOR_OK;
}

/* ts[i] have ts[0]'s ndim and sizes, except in dim `skip` (-1: none). */
static int check_shapes(const char *op, int n, struct tensor *const *ts, int skip)
{
	const struct tensor *a = ts[0];
	for (int i = 1; i < n; i++) {
		const struct tensor *b = ts[i];
		bool ok = b->ndim == a->ndim;
		for (int k = 0; ok && k < a->ndim; k++)
			ok = k == skip || b->shape[k] == a->shape[k];
		if (ok)
			continue;
		char ba[128], bb[128];
		tensor_shape_str(a, ba, sizeof ba);
		tensor_shape_str(b, bb, sizeof bb);
		if (skip < 0)
			return tensor_error(TENSOR_ERR_SHAPE,
					    "%s: tensor %d has shape %s, tensor 0 has %s, expected "
					    "equal shapes",
					    op, i, bb, ba);
		return tensor_error(TENSOR_ERR_SHAPE,
				    "%s: tensor %d has shape %s, tensor 0 has %s, expected equal "
				    "sizes except in dim %d",
				    op, i, bb, ba, skip);
	}
	return TENSOR_OK;
}

struct tensor *tensor_concat(int n, struct tensor *const *ts, int dim)
{
	static const char op[] = "concat";
	if (check_list(op, n, ts) < 0)
		return NULL;
	int d = tensor_dim_wrap(op, dim, ts[0]->ndim);
	if (d < 0 || check_shapes(op, n, ts, d) < 0)
		return NULL;
	int64_t shape[TENSOR_MAX_DIMS];
	memcpy(shape, ts[0]->shape, sizeof shape);
	shape[d] = 0;
	for (int i = 0; i < n; i++)
		shape[d] += ts[i]->shape[d];
	struct tensor *out = tensor_new(ts[0]->dtype, ts[0]->storage->device, ts[0]->ndim, shape);
	if (!out)
		return NULL;
	int64_t start = 0;
	for (int i = 0; i < n; i++) {
		int64_t len = ts[i]->shape[d];
		if (tensor_numel(ts[i]) > 0) {
			struct tensor *part = tensor_narrow(out, d, start, len);
			int rc = part ? tensor_copy_(part, ts[i]) : tensor_last_status();
			tensor_free(part);
			if (rc < 0) {
				tensor_free(out);
				return NULL;
			}
		}
		start += len;
	}
	return out;
}

struct tensor *tensor_stack(int n, struct tensor *const *ts, int dim)
{
	static const char op[] = "stack";
	if (check_list(op, n, ts) < 0 || check_shapes(op, n, ts, -1) < 0)
		return NULL;
	if (ts[0]->ndim == TENSOR_MAX_DIMS) {
		tensor_error(TENSOR_ERR_SHAPE,
			     "stack: tensors already have %d dims, expected fewer",
			     TENSOR_MAX_DIMS);
		return NULL;
	}
	int d = tensor_dim_wrap(op, dim, ts[0]->ndim + 1);
	if (d < 0)
		return NULL;
	struct tensor **us = tensor_host_calloc((size_t)n, sizeof *us);
	if (!us) {
		tensor_error(TENSOR_ERR_NOMEM, "stack: no memory for %d views", n);
		return NULL;
	}
	struct tensor *out = NULL;
	int i = 0;
	for (; i < n; i++)
		if (!(us[i] = tensor_unsqueeze(ts[i], d)))
			break;
	if (i == n)
		out = tensor_concat(n, us, d);
	while (i-- > 0)
		tensor_free(us[i]);
	free(us);
	return out;
}

int tensor_split(const struct tensor *t, int dim, int n, const int64_t *sizes, struct tensor **out)
{
	static const char op[] = "split";
	if (out && n > 0)
		memset(out, 0, sizeof *out * (size_t)n);
	if (!t)
		return null_input(op);
	if (tensor_check_operand(op, "", "t", t) < 0)
		return TENSOR_ERR_STATE;
	if (n < 1 || !sizes || !out)
		return tensor_error(TENSOR_ERR_ARG,
				    "split: need n >= 1 sizes and outputs, got n = %d%s", n,
				    n >= 1 ? " with a NULL array" : "");
	int d = tensor_dim_wrap(op, dim, t->ndim);
	if (d < 0)
		return TENSOR_ERR_SHAPE;
	char b[128];
	int64_t sum = 0;
	for (int i = 0; i < n; i++) {
		if (sizes[i] < 0)
			return tensor_error(TENSOR_ERR_SHAPE,
					    "split: size %d is %lld, expected >= 0", i,
					    (long long)sizes[i]);
		sum = sizes[i] > INT64_MAX - sum ? INT64_MAX : sum + sizes[i];
	}
	if (sum != t->shape[d])
		return tensor_error(
		    TENSOR_ERR_SHAPE,
		    "split: sizes sum to %lld, dim %d of %s has size %lld, expected equal",
		    (long long)sum, d, tensor_shape_str(t, b, sizeof b), (long long)t->shape[d]);
	int64_t start = 0;
	for (int i = 0; i < n; i++) {
		out[i] = tensor_narrow(t, d, start, sizes[i]);
		if (!out[i]) {
			while (i-- > 0) {
				tensor_free(out[i]);
				out[i] = NULL;
			}
			return tensor_last_status();
		}
		start += sizes[i];
	}
	return TENSOR_OK;
}
