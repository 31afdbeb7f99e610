/* tensor_conv1d: 1-d convolution as unfold + one batched GEMM (no backend slot of its own). */
#include "backend.h"

#define OP "conv1d"

int tensor_check_conv1d(const struct tensor *x, const struct tensor *w, const struct tensor *bias,
			int64_t stride, int64_t padding)
{
	int rc = tensor_check_pair(OP, x, w);
	if (rc == TENSOR_OK && bias)
		rc = tensor_check_pair(OP, x, bias);
	if (rc == TENSOR_OK)
		rc = tensor_check_float(OP, x);
	if (rc < 0)
		return rc;
	char bx[128], bw[128], bb[128];
	tensor_shape_str(x, bx, sizeof bx);
	tensor_shape_str(w, bw, sizeof bw);
	if (x->ndim != 3 || w->ndim != 3)
		return tensor_error(TENSOR_ERR_SHAPE,
				    "conv1d: input %s, weight %s, expected x [B, C_in, L] and w "
				    "[C_out, C_in, K]",
				    bx, bw);
	if (x->shape[1] != w->shape[1])
		return tensor_error(TENSOR_ERR_SHAPE,
				    "conv1d: input %s has %lld channels, weight %s expects %lld",
				    bx, (long long)x->shape[1], bw, (long long)w->shape[1]);
	if (bias && (bias->ndim != 1 || bias->shape[0] != w->shape[0]))
		return tensor_error(
		    TENSOR_ERR_SHAPE, "conv1d: bias %s for weight %s, expected [%lld]",
		    tensor_shape_str(bias, bb, sizeof bb), bw, (long long)w->shape[0]);
	if (stride < 1 || padding < 0)
		return tensor_error(TENSOR_ERR_ARG,
				    "conv1d: stride %lld, padding %lld for input %s, expected "
				    "stride >= 1 and padding >= 0",
				    (long long)stride, (long long)padding, bx);
	int64_t kw = w->shape[2], len = x->shape[2];
	if (kw < 1 || padding > (INT64_MAX - len) / 2 || kw > len + 2 * padding)
		return tensor_error(TENSOR_ERR_SHAPE,
				    "conv1d: kernel %lld of weight %s does not fit input %s with "
				    "padding %lld, expected 1 <= K <= L + 2 padding",
				    (long long)kw, bw, bx, (long long)padding);
	return TENSOR_OK;
}

/* x zero-padded by `padding` on both ends of the last dim (x itself if padding is 0). */
static struct tensor *pad_last(const struct tensor *x, int64_t padding)
{
	if (padding == 0)
		return tensor_alias(x);
	int64_t sh[3] = { x->shape[0], x->shape[1], x->shape[2] + 2 * padding };
	struct tensor *xp = tensor_zeros(x->dtype, x->storage->device, 3, sh);
	struct tensor *mid = tensor_narrow(xp, 2, padding, x->shape[2]);
	int rc = mid ? tensor_copy_(mid, x) : TENSOR_ERR_NOMEM;
	tensor_free(mid);
	return tensor_op_result(xp, rc);
}

struct tensor *tensor_conv1d(const struct tensor *x, const struct tensor *w,
			     const struct tensor *bias, int64_t stride, int64_t padding)
{
	if (!x || !w)
		return NULL;
	if (tensor_check_operand("conv1d", "", "x", x) < 0 ||
	    tensor_check_operand("conv1d", "", "w", w) < 0 ||
	    tensor_check_operand("conv1d", "", "bias", bias) < 0)
		return NULL;
	if (tensor_check_conv1d(x, w, bias, stride, padding) < 0)
		return NULL;
	int64_t nb = x->shape[0], cin = x->shape[1], cout = w->shape[0], kw = w->shape[2];
	int64_t lout = (x->shape[2] + 2 * padding - kw) / stride + 1;
	int perm[4] = { 0, 2, 1, 3 };

	/* cols [B, L_out, C_in*K]: window t of batch b, channel-major, the one copy; for
	 * kernel == stride without padding it is a permuted reshape of x. */
	struct tensor *xp = pad_last(x, padding);
	struct tensor *win = tensor_unfold(xp, 2, kw, stride); /* [B, C_in, L_out, K] */
	struct tensor *winp = tensor_permute(win, perm);       /* [B, L_out, C_in, K] */
	struct tensor *cols = tensor_contiguous(winp);
	int64_t csh[3] = { nb, lout, cin * kw }, wsh[2] = { cout, cin * kw };
	struct tensor *colv = tensor_view(cols, 3, csh);
	struct tensor *colt = tensor_transpose(colv, 1, 2); /* [B, C_in*K, L_out] */
	struct tensor *wc = tensor_contiguous(w);
	struct tensor *wm = tensor_view(wc, 2, wsh);
	/* [C_out, C_in*K] x [B, C_in*K, L_out] = [B, C_out, L_out], contiguous as is */
	struct tensor *y = tensor_matmul(wm, colt);
	struct tensor *out = y;
	if (y && bias) {
		struct tensor *bv = tensor_unsqueeze(bias, 1); /* [C_out, 1] */
		out = tensor_add(y, bv);
		tensor_free(bv);
		tensor_free(y);
	}
	tensor_free(wm);
	tensor_free(wc);
	tensor_free(colt);
	tensor_free(colv);
	tensor_free(cols);
	tensor_free(winp);
	tensor_free(win);
	tensor_free(xp);
	return out;
}
