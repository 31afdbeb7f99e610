/* Views: new geometry over the same storage, never a copy. */
#include <string.h>

#include "backend.h"

struct tensor *tensor_alias(const struct tensor *t)
{
	if (!t || tensor_check_operand("alias", NULL, "t", t) < 0)
		return NULL;
	return tensor_new_view(t, t->ndim, t->shape, t->strides, t->offset);
}

struct tensor *tensor_view(const struct tensor *t, int ndim, const int64_t *shape)
{
	if (!t || tensor_check_operand("view", "", "t", t) < 0)
		return NULL;
	char bt[128];
	if (ndim < 0 || ndim > TENSOR_MAX_DIMS || (ndim > 0 && !shape)) {
		tensor_error(TENSOR_ERR_SHAPE, "view: ndim %d not in 0..%d", ndim, TENSOR_MAX_DIMS);
		return NULL;
	}
	if (!tensor_is_contiguous(t)) {
		tensor_error(TENSOR_ERR_SHAPE,
			     "view: tensor %s is not contiguous (use tensor_reshape to copy)",
			     tensor_shape_str(t, bt, sizeof bt));
		return NULL;
	}
	int64_t numel = tensor_numel(t), known = 1, sh[TENSOR_MAX_DIMS];
	int infer = -1;
	for (int i = 0; i < ndim; i++) {
		sh[i] = shape[i];
		if (shape[i] == -1 && infer < 0)
			infer = i;
		else if (shape[i] < 0) {
			tensor_error(TENSOR_ERR_SHAPE, "view: invalid size %lld at dim %d",
				     (long long)shape[i], i);
			return NULL;
		} else
			known *= shape[i];
	}
	if (infer >= 0) {
		if (known == 0 || numel % known) {
			tensor_error(TENSOR_ERR_SHAPE,
				     "view: cannot infer dim %d of %s (%lld elements)", infer,
				     tensor_shape_str(t, bt, sizeof bt), (long long)numel);
			return NULL;
		}
		sh[infer] = numel / known;
		known = numel;
	}
	if (known != numel) {
		struct tensor tmp = { .ndim = ndim };
		memcpy(tmp.shape, sh, sizeof(int64_t) * (size_t)ndim);
		char bn[128];
		tensor_error(TENSOR_ERR_SHAPE, "view: %s has %lld elements, %s has %lld",
			     tensor_shape_str(t, bt, sizeof bt), (long long)numel,
			     tensor_shape_str(&tmp, bn, sizeof bn), (long long)known);
		return NULL;
	}
	int64_t st[TENSOR_MAX_DIMS], s = 1;
	for (int i = ndim - 1; i >= 0; i--) {
		st[i] = s;
		s *= sh[i];
	}
	return tensor_new_view(t, ndim, sh, st, t->offset);
}

struct tensor *tensor_reshape(const struct tensor *t, int ndim, const int64_t *shape)
{
	if (!t || tensor_check_operand("reshape", "", "t", t) < 0)
		return NULL;
	if (tensor_is_contiguous(t))
		return tensor_view(t, ndim, shape);
	struct tensor *c = tensor_contiguous(t);
	struct tensor *v = c ? tensor_view(c, ndim, shape) : NULL;
	tensor_free(c); /* on the heap the copy lives on in v alone; in a scope a no-op */
	return v;
}

bool tensor_dim_order(const struct tensor *t, int *order)
{
	bool moved = false;
	for (int i = 0; i < t->ndim; i++) {
		order[i] = i;
		for (int j = i; j > 0 && t->strides[order[j]] > t->strides[order[j - 1]]; j--) {
			int d = order[j];
			order[j] = order[j - 1];
			order[j - 1] = d;
			moved = true;
		}
	}
	return moved;
}

struct tensor *tensor_permute(const struct tensor *t, const int *perm)
{
	if (!t || tensor_check_operand("permute", "", "t", t) < 0)
		return NULL;
	if (!perm && t->ndim > 0) {
		tensor_error(TENSOR_ERR_ARG, "permute: perm is NULL");
		return NULL;
	}
	int64_t sh[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
	bool seen[TENSOR_MAX_DIMS] = { false };
	for (int i = 0; i < t->ndim; i++) {
		int p = perm[i];
		if (p < 0 || p >= t->ndim || seen[p]) {
			tensor_error(TENSOR_ERR_SHAPE,
				     "permute: entry %d (= %d) is not a permutation of 0..%d", i, p,
				     t->ndim - 1);
			return NULL;
		}
		seen[p] = true;
		sh[i] = t->shape[p];
		st[i] = t->strides[p];
	}
	return tensor_new_view(t, t->ndim, sh, st, t->offset);
}

struct tensor *tensor_transpose(const struct tensor *t, int d0, int d1)
{
	if (!t || tensor_check_operand("transpose", "", "t", t) < 0)
		return NULL;
	int a = tensor_dim_wrap("transpose", d0, t->ndim);
	int b = a < 0 ? -1 : tensor_dim_wrap("transpose", d1, t->ndim);
	if (b < 0)
		return NULL;
	int perm[TENSOR_MAX_DIMS];
	for (int i = 0; i < t->ndim; i++)
		perm[i] = i;
	perm[a] = b;
	perm[b] = a;
	return tensor_permute(t, perm);
}

struct tensor *tensor_slice(const struct tensor *t, int dim, int64_t start, int64_t end,
			    int64_t step)
{
	if (!t || tensor_check_operand("slice", "", "t", t) < 0)
		return NULL;
	int d = tensor_dim_wrap("slice", dim, t->ndim);
	if (d < 0)
		return NULL;
	if (step < 1) {
		tensor_error(TENSOR_ERR_ARG, "slice: step must be >= 1, got %lld", (long long)step);
		return NULL;
	}
	int64_t n = t->shape[d];
	if (start < 0)
		start += n;
	if (end < 0)
		end += n;
	start = start < 0 ? 0 : start > n ? n : start;
	end = end < start ? start : end > n ? n : end;
	int64_t sh[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
	memcpy(sh, t->shape, sizeof sh);
	memcpy(st, t->strides, sizeof st);
	sh[d] = (end - start + step - 1) / step;
	st[d] = t->strides[d] * step;
	return tensor_new_view(t, t->ndim, sh, st, t->offset + (size_t)(start * t->strides[d]));
}

struct tensor *tensor_narrow(const struct tensor *t, int dim, int64_t start, int64_t len)
{
	if (!t || tensor_check_operand("narrow", "", "t", t) < 0)
		return NULL;
	int d = tensor_dim_wrap("narrow", dim, t->ndim);
	if (d < 0)
		return NULL;
	if (start < 0 || len < 0 || start > t->shape[d] || len > t->shape[d] - start) {
		char b[128];
		tensor_error(TENSOR_ERR_SHAPE, "narrow: [%lld, %lld) out of range of dim %d of %s",
			     (long long)start, (long long)(start + len), d,
			     tensor_shape_str(t, b, sizeof b));
		return NULL;
	}
	return tensor_slice(t, d, start, start + len, 1);
}

struct tensor *tensor_select(const struct tensor *t, int dim, int64_t index)
{
	if (!t || tensor_check_operand("select", "", "t", t) < 0)
		return NULL;
	int d = tensor_dim_wrap("select", dim, t->ndim);
	if (d < 0)
		return NULL;
	if (index < 0)
		index += t->shape[d];
	if (index < 0 || index >= t->shape[d]) {
		char b[128];
		tensor_error(TENSOR_ERR_SHAPE, "select: index %lld out of range of dim %d of %s",
			     (long long)index, d, tensor_shape_str(t, b, sizeof b));
		return NULL;
	}
	int64_t sh[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
	int k = 0;
	for (int i = 0; i < t->ndim; i++) {
		if (i == d)
			continue;
		sh[k] = t->shape[i];
		st[k++] = t->strides[i];
	}
	return tensor_new_view(t, k, sh, st, t->offset + (size_t)(index * t->strides[d]));
}

struct tensor *tensor_expand(const struct tensor *t, int ndim, const int64_t *shape)
{
	if (!t || tensor_check_operand("expand", "", "t", t) < 0)
		return NULL;
	return tensor_broadcast_to(t, ndim, shape);
}

struct tensor *tensor_broadcast_to(const struct tensor *t, int ndim, const int64_t *shape)
{
	if (!t)
		return NULL;
	char bt[128];
	if (ndim < t->ndim || ndim > TENSOR_MAX_DIMS || !shape) {
		tensor_error(TENSOR_ERR_SHAPE, "expand: cannot expand %s to %d dims",
			     tensor_shape_str(t, bt, sizeof bt), ndim);
		return NULL;
	}
	int64_t sh[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
	int lead = ndim - t->ndim;
	for (int i = 0; i < ndim; i++) {
		int j = i - lead;
		int64_t want = shape[i];
		if (j < 0) {
			if (want < 0)
				goto bad;
			sh[i] = want;
			st[i] = 0;
		} else if (want == -1 || want == t->shape[j]) {
			sh[i] = t->shape[j];
			st[i] = t->strides[j];
		} else if (t->shape[j] == 1 && want >= 0) {
			sh[i] = want;
			st[i] = 0;
		} else {
			goto bad;
		}
	}
	return tensor_new_view(t, ndim, sh, st, t->offset);
bad:;
	struct tensor tmp = { .ndim = ndim };
	memcpy(tmp.shape, shape, sizeof(int64_t) * (size_t)ndim);
	char bs[128];
	tensor_error(TENSOR_ERR_SHAPE, "expand: cannot expand %s to %s (sizes must be 1 or equal)",
		     tensor_shape_str(t, bt, sizeof bt), tensor_shape_str(&tmp, bs, sizeof bs));
	return NULL;
}

struct tensor *tensor_squeeze(const struct tensor *t, int dim)
{
	if (!t || tensor_check_operand("squeeze", "", "t", t) < 0)
		return NULL;
	int d = tensor_dim_wrap("squeeze", dim, t->ndim);
	if (d < 0)
		return NULL;
	if (t->shape[d] != 1) {
		char b[128];
		tensor_error(TENSOR_ERR_SHAPE, "squeeze: dim %d of %s has size %lld, expected 1", d,
			     tensor_shape_str(t, b, sizeof b), (long long)t->shape[d]);
		return NULL;
	}
	return tensor_select(t, d, 0);
}

struct tensor *tensor_unsqueeze(const struct tensor *t, int dim)
{
	if (!t || tensor_check_operand("unsqueeze", "", "t", t) < 0)
		return NULL;
	if (t->ndim == TENSOR_MAX_DIMS) {
		tensor_error(TENSOR_ERR_SHAPE, "unsqueeze: already %d dims", TENSOR_MAX_DIMS);
		return NULL;
	}
	int d = tensor_dim_wrap("unsqueeze", dim, t->ndim + 1);
	if (d < 0)
		return NULL;
	int64_t sh[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
	for (int i = 0, j = 0; i <= t->ndim; i++) {
		if (i == d) {
			sh[i] = 1;
			st[i] = d < t->ndim ? t->shape[d] * t->strides[d] : 1;
		} else {
			sh[i] = t->shape[j];
			st[i] = t->strides[j++];
		}
	}
	return tensor_new_view(t, t->ndim + 1, sh, st, t->offset);
}

struct tensor *tensor_unfold(const struct tensor *t, int dim, int64_t size, int64_t step)
{
	if (!t || tensor_check_operand("unfold", "", "t", t) < 0)
		return NULL;
	int d = tensor_dim_wrap("unfold", dim, t->ndim);
	if (d < 0)
		return NULL;
	char b[128];
	if (t->ndim == TENSOR_MAX_DIMS || size < 1 || step < 1 || size > t->shape[d]) {
		tensor_error(TENSOR_ERR_SHAPE,
			     "unfold: windows of %lld every %lld do not fit dim %d of %s",
			     (long long)size, (long long)step, d, tensor_shape_str(t, b, sizeof b));
		return NULL;
	}
	int64_t sh[TENSOR_MAX_DIMS], st[TENSOR_MAX_DIMS];
	memcpy(sh, t->shape, sizeof sh);
	memcpy(st, t->strides, sizeof st);
	sh[d] = (t->shape[d] - size) / step + 1;
	st[d] = t->strides[d] * step;
	sh[t->ndim] = size;
	st[t->ndim] = t->strides[d];
	return tensor_new_view(t, t->ndim + 1, sh, st, t->offset);
}
