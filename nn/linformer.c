/* Linformer self-attention: keys and values projected along the sequence
 * axis (learned, random, convolutional or pooling projections) to k slots. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_internal.h"
#include "mem.h"

/* ---- names -------------------------------------------------------------------- */

static const char *const kind_names[NN_NATTN] = {
	[NN_ATTN_STANDARD] = "standard", [NN_ATTN_LINEAR] = "linear", [NN_ATTN_CONV] = "conv",
	[NN_ATTN_MEAN] = "mean",	 [NN_ATTN_MAX] = "max",	      [NN_ATTN_RANDOM] = "random",
};

#define NN_NSHARING 4
static const char *const sharing_names[NN_NSHARING] = {
	[NN_SHARE_NONE] = "none",
	[NN_SHARE_HEADWISE] = "headwise",
	[NN_SHARE_KV] = "kv",
	[NN_SHARE_LAYERWISE] = "layerwise",
};

int nn_attn_kind_parse(const char *name)
{
	for (int i = 0; name && i < NN_NATTN; i++)
		if (strcmp(name, kind_names[i]) == 0)
			return i;
	return -1;
}

/* A kind nn_seq_proj takes: any but standard. */
static bool projected(enum nn_attn_kind k)
{
	return k > NN_ATTN_STANDARD && k < NN_NATTN;
}

/* "unknown" outside the enum, so it is always printable. */
const char *nn_attn_kind_name(enum nn_attn_kind k)
{
	return (unsigned)k < NN_NATTN ? kind_names[k] : "unknown";
}

/* Also accepts "key-value" (the spelling) for "kv". */
int nn_proj_sharing_parse(const char *name)
{
	if (name && strcmp(name, "key-value") == 0)
		return NN_SHARE_KV;
	for (int i = 0; name && i < NN_NSHARING; i++)
		if (strcmp(name, sharing_names[i]) == 0)
			return i;
	return -1;
}

const char *nn_proj_sharing_name(enum nn_proj_sharing s)
{
	return (unsigned)s < NN_NSHARING ? sharing_names[s] : "unknown";
}

/* ---- one sequence projection ---------------------------------------------------- */

static bool windowed(enum nn_attn_kind kind)
{
	return kind == NN_ATTN_CONV || kind == NN_ATTN_MEAN || kind == NN_ATTN_MAX;
}

/*
 * Initialisation. LINEAR: N(0, 2 / (n + k)), the xavier-normal of a [k, n]
 * weight (what tatp22/linformer-pytorch does to its E, F), per head alike.
 * RANDOM: N(0, 1/k), i.e. std 1/sqrt(k) (the Johnson-Lindenstrauss scaling
 * of the paper, which keeps E x's expected squared norm; tatp22 uses std 1/k),
 * drawn once, registered so checkpoints keep it, and marked as not requiring
 * grad so optimizers skip it. CONV: PyTorch's Conv1d default,
 * U(+-1/sqrt(c * n/k)) for weight and bias.
 */
static int seq_proj_params(struct nn_seq_proj *p, struct nn_params *ps, const char *name)
{
	char full[NN_NAME_MAX];
	int64_t kern = p->n / p->k, c = p->channels;
	if (p->kind == NN_ATTN_LINEAR || p->kind == NN_ATTN_RANDOM) {
		int64_t shape[3] = { p->heads, p->k, p->n };
		int nd = p->per_head ? 3 : 2;
		struct tensor *w = nn_name(full, name, "weight")
				       ? nn_param_new(ps, full, nd, shape + 3 - nd, false)
				       : NULL;
		if (!w)
			return tensor_last_status();
		double std = p->kind == NN_ATTN_LINEAR ? sqrt(2.0 / (double)(p->n + p->k))
						       : 1 / sqrt((double)p->k);
		int rc = nn_init_normal(w, 0.0, std, nn_param_seed(ps, full));
		if (rc == TENSOR_OK && p->kind == NN_ATTN_RANDOM)
			rc = ag_requires_grad(w, false);
		p->weight = w;
		return rc;
	}
	if (p->kind != NN_ATTN_CONV)
		return TENSOR_OK;
	double bound = 1 / sqrt((double)(c * kern));
	struct tensor *w = nn_name(full, name, "weight")
			       ? nn_param_new(ps, full, 3, (int64_t[]){ c, c, kern }, false)
			       : NULL;
	int rc =
	    w ? nn_init_uniform(w, -bound, bound, nn_param_seed(ps, full)) : tensor_last_status();
	struct tensor *b = NULL;
	if (rc == TENSOR_OK) {
		b = nn_name(full, name, "bias") ? nn_param_new(ps, full, 1, &c, true) : NULL;
		rc = b ? nn_init_uniform(b, -bound, bound, nn_param_seed(ps, full))
		       : tensor_last_status();
	}
	p->weight = w;
	p->bias = b;
	return rc;
}

int nn_seq_proj_init(struct nn_seq_proj *p, struct nn_params *ps, const char *name,
		     enum nn_attn_kind kind, int64_t n, int64_t k, int64_t heads, bool per_head,
		     int64_t channels, bool dense)
{
	if (!p)
		return tensor_error(TENSOR_ERR_ARG, "nn_seq_proj_init: p is NULL");
	*p = (struct nn_seq_proj){ 0 };
	if (!ps || !name)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_seq_proj_init: ps and name must not be NULL");
	if (!projected(kind))
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_seq_proj_init: '%s': kind %d is not a projection (linear, "
				    "conv, mean, max or random)",
				    name, (int)kind);
	const char *kn = kind_names[kind];
	if (n < 1 || k < 1 || k > n)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_seq_proj_init: '%s': %s projection n %lld -> k %lld, "
				    "expected 1 <= k <= n",
				    name, kn, (long long)n, (long long)k);
	if (windowed(kind) && n % k != 0)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_seq_proj_init: '%s': n %lld is not divisible by k %lld: a "
				    "%s projection needs kernel = stride = n/k to be an integer",
				    name, (long long)n, (long long)k, kn);
	if (heads < 1)
		return tensor_error(TENSOR_ERR_ARG, "nn_seq_proj_init: '%s': heads %lld < 1", name,
				    (long long)heads);
	if (per_head && kind != NN_ATTN_LINEAR && kind != NN_ATTN_RANDOM)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_seq_proj_init: '%s': per-head projections are linear or "
				    "random only, not %s",
				    name, kn);
	if (kind == NN_ATTN_CONV && channels < 1)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_seq_proj_init: '%s': conv needs channels >= 1, got %lld",
				    name, (long long)channels);
	*p = (struct nn_seq_proj){ .kind = kind,
				   .n = n,
				   .k = k,
				   .heads = heads,
				   .channels = channels,
				   .per_head = per_head,
				   .dense = dense && kind == NN_ATTN_CONV };
	int rc = seq_proj_params(p, ps, name);
	if (rc < 0) /* parameters already registered stay owned by ps */
		*p = (struct nn_seq_proj){ 0 };
	return rc;
}

/* x [B,Hx,S,c] padded with zero rows to [B,Hx,n,c] (x itself when S == n). */
static struct tensor *pad_to(struct tensor *x, int64_t n)
{
	if (!x)
		return NULL;
	int64_t s = x->shape[2];
	if (s == n)
		return x;
	int64_t shape[4] = { x->shape[0], x->shape[1], n - s, x->shape[3] };
	struct tensor *z = tensor_zeros(x->dtype, x->storage->device, 4, shape);
	return ag_concat(2, (struct tensor *[]){ x, z }, 2);
}

/* x [B,T,c] padded with zero rows to [B,n,c] (x itself when T == n). */
static struct tensor *pad_rows(struct tensor *x, int64_t n)
{
	return x ? ag_squeeze(pad_to(ag_unsqueeze(x, 1), n), 1) : NULL;
}

/* Conv1d with kernel = stride = kern as one GEMM over windows (what
 * tensor_conv1d computes, without moving channels in front of the sequence):
 * y[.., j, o] = sum_{r,c} w[o, c, r] x[.., j kern + r, c] + bias[o]. x
 * [B,Hx,n,c] viewed as [B,Hx,k,kern c] (a copy only if x is not contiguous);
 * the weight [c_out, c_in, kern] rearranged to [kern c_in, c_out] (small). */
static struct tensor *conv_windows(const struct nn_seq_proj *p, struct tensor *x)
{
	if (!x)
		return NULL;
	int64_t kern = p->n / p->k, c = p->channels;
	int64_t flat[4] = { x->shape[0], x->shape[1], p->k, kern * c };
	struct tensor *xw = ag_reshape(x, 4, flat);
	struct tensor *w =
	    ag_reshape(ag_permute(p->weight, (int[]){ 2, 1, 0 }), 2, (int64_t[]){ kern * c, c });
	return ag_add(ag_matmul(xw, w), p->bias);
}

int nn_seq_proj_init_windows(struct nn_seq_proj *p, double noise)
{
	if (!p || p->kind != NN_ATTN_LINEAR || !p->weight)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_seq_proj_init_windows: expected an initialised learned "
				    "(linear) projection");
	if (!(noise >= 0))
		return tensor_error(TENSOR_ERR_ARG, "nn_seq_proj_init_windows: noise %g < 0",
				    noise);
	struct tensor *w = p->weight;
	bool f64 = w->dtype == TENSOR_F64;
	int64_t k = p->k, n = p->n, len = tensor_numel(w);
	size_t size = tensor_dtype_size(w->dtype);
	void *buf = tensor_host_malloc((size_t)len * size);
	int64_t *count = tensor_host_calloc((size_t)k, sizeof *count);
	if (!buf || !count) {
		free(buf);
		free(count);
		return tensor_error(TENSOR_ERR_NOMEM, "nn_seq_proj_init_windows: %lld weights",
				    (long long)len);
	}
	for (int64_t j = 0; j < n; j++)
		count[j * k / n]++;
	int rc = tensor_to_host(w, buf, (size_t)len * size);
	for (int64_t i = 0; rc == TENSOR_OK && i < len; i++) {
		int64_t r = i / n % k, j = i % n;
		double mean = j * k / n == r ? 1.0 / (double)count[r] : 0.0;
		if (f64)
			((double *)buf)[i] = noise * ((double *)buf)[i] + mean;
		else
			((float *)buf)[i] = (float)(noise * ((float *)buf)[i] + mean);
	}
	struct tensor *src =
	    rc == TENSOR_OK ? tensor_from_data(w->dtype, w->storage->device, w->ndim, w->shape, buf)
			    : NULL;
	rc = src ? tensor_copy_(w, src) : tensor_last_status();
	tensor_free(src);
	free(count);
	free(buf);
	return rc;
}

struct tensor *nn_seq_proj_forward(const struct nn_seq_proj *p, struct tensor *x)
{
	if (nn_require_scope("nn_seq_proj_forward") < 0 || !x)
		return NULL;
	if (!p || p->k < 1 || !projected(p->kind)) {
		tensor_error(TENSOR_ERR_ARG, "nn_seq_proj_forward: projection is NULL or not "
					     "initialised");
		return NULL;
	}
	char bx[128];
	tensor_shape_str(x, bx, sizeof bx);
	const char *kn = kind_names[p->kind];
	if (tensor_check_float("nn_seq_proj_forward", x) < 0)
		return NULL;
	if (x->ndim != 4 || x->shape[2] > p->n) {
		tensor_error(TENSOR_ERR_SHAPE,
			     "nn_seq_proj_forward: x %s, expected [B,H,S,d] with S <= n = %lld "
			     "(%s projection to k %lld)",
			     bx, (long long)p->n, kn, (long long)p->k);
		return NULL;
	}
	if (p->per_head && x->shape[1] != p->heads && x->shape[1] != 1) {
		tensor_error(TENSOR_ERR_SHAPE,
			     "nn_seq_proj_forward: x %s has %lld heads, the per-head %s "
			     "projection %lld (or 1, broadcast)",
			     bx, (long long)x->shape[1], kn, (long long)p->heads);
		return NULL;
	}
	if (p->kind == NN_ATTN_CONV && x->shape[3] != p->channels) {
		tensor_error(TENSOR_ERR_SHAPE,
			     "nn_seq_proj_forward: x %s has %lld channels, the conv projection "
			     "expects [B,H,S,%lld]",
			     bx, (long long)x->shape[3], (long long)p->channels);
		return NULL;
	}
	if (p->weight && tensor_check_pair("nn_seq_proj_forward", x, p->weight) < 0)
		return NULL;
	int64_t s = x->shape[2], kern = p->n / p->k;
	switch (p->kind) {
	case NN_ATTN_LINEAR:
	case NN_ATTN_RANDOM: {
		/* E sliced to the first S positions: [k,S] x [B,H,S,d]; per head
		 * [1,H,k,S] x [B,H|1,S,d], batch dims broadcast. */
		struct tensor *e = ag_narrow(p->weight, p->weight->ndim - 1, 0, s);
		if (p->per_head)
			e = ag_unsqueeze(e, 0);
		return ag_matmul(e, x);
	}
	case NN_ATTN_CONV: return conv_windows(p, pad_to(x, p->n));
	/* pooling over windows [B,H,k,d,kern] (unfold: a view); the zero rows
	 * beyond S take part, as they do in the conv */
	case NN_ATTN_MEAN:
		return ag_mean(ag_unfold(pad_to(x, p->n), 2, kern, kern), 1, (int[]){ 4 }, false);
	case NN_ATTN_MAX:
		return ag_max(ag_unfold(pad_to(x, p->n), 2, kern, kern), 1, (int[]){ 4 }, false);
	default: break;
	}
	return NULL;
}

void nn_seq_proj_free(struct nn_seq_proj *p)
{
	if (p)
		*p = (struct nn_seq_proj){ 0 };
}

/* ---- Linformer self-attention ---------------------------------------------------- */

/* "conv n 8 -> k 4 (4 channels, dense)" into buf[128]. */
static const char *proj_str(char *buf, enum nn_attn_kind kind, int64_t n, int64_t k,
			    int64_t channels, bool dense, bool per_head)
{
	int len = snprintf(buf, 128, "%s n %lld -> k %lld", nn_attn_kind_name(kind), (long long)n,
			   (long long)k);
	if (kind == NN_ATTN_CONV)
		snprintf(buf + len, 128 - (size_t)len, " (%lld channels%s)", (long long)channels,
			 dense ? ", dense" : "");
	else if (per_head)
		snprintf(buf + len, 128 - (size_t)len, " (per head)");
	return buf;
}

/* The projection this layer needs must match the layerwise one it is given. */
static int check_shared(const char *name, const struct nn_seq_proj *sh, enum nn_attn_kind kind,
			int64_t n, int64_t k, int64_t heads, int64_t channels, bool dense)
{
	bool ok = sh->kind == kind && sh->n == n && sh->k == k &&
		  (!sh->per_head || sh->heads == heads) &&
		  (kind != NN_ATTN_CONV || (sh->channels == channels && sh->dense == dense));
	if (ok)
		return TENSOR_OK;
	char have[128], want[128];
	return tensor_error(
	    TENSOR_ERR_ARG,
	    "nn_linformer_init: '%s': the layerwise projection is %s, this layer "
	    "needs %s",
	    name, proj_str(have, sh->kind, sh->n, sh->k, sh->channels, sh->dense, sh->per_head),
	    proj_str(want, kind, n, k, channels, dense, false));
}

static int check_config(const char *name, int64_t dim, int64_t heads, int64_t n, int64_t k,
			enum nn_attn_kind kind, enum nn_proj_sharing sharing, double attn_dropout,
			const struct nn_seq_proj *shared)
{
	if (dim < 1 || heads < 1 || dim % heads != 0)
		return tensor_error(
		    TENSOR_ERR_ARG,
		    "nn_linformer_init: '%s': heads %lld must divide dim %lld (both >= 1)", name,
		    (long long)heads, (long long)dim);
	if (!projected(kind) || (unsigned)sharing >= NN_NSHARING)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_linformer_init: '%s': unknown projection kind %d or "
				    "sharing %d",
				    name, (int)kind, (int)sharing);
	if (n < 1 || k < 1 || k > n)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_linformer_init: '%s': n %lld -> k %lld, expected "
				    "1 <= k <= n",
				    name, (long long)n, (long long)k);
	if (windowed(kind) && n % k != 0)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_linformer_init: '%s': n %lld is not divisible by k %lld: "
				    "a %s projection needs kernel = stride = n/k to be an integer",
				    name, (long long)n, (long long)k, kind_names[kind]);
	if (!(attn_dropout >= 0 && attn_dropout < 1))
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_linformer_init: '%s': attn_dropout %g not in [0, 1)", name,
				    attn_dropout);
	if (sharing == NN_SHARE_LAYERWISE && !shared)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_linformer_init: '%s': layerwise sharing needs the shared "
				    "projection, got NULL",
				    name);
	if (sharing != NN_SHARE_LAYERWISE && shared)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_linformer_init: '%s': a shared projection was passed with "
				    "%s sharing (only layerwise takes one)",
				    name, sharing_names[sharing]);
	if (strlen(name) + strlen(".out_proj.weight") >= NN_NAME_MAX)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_linformer_init: name '%s' is too long (max %d chars "
				    "with '.out_proj.weight')",
				    name, NN_NAME_MAX - 1);
	return TENSOR_OK;
}

/*
 * Sharing: none gives per-head E and F [H, k, n] for linear/random (with
 * shared_kv_head, each query head then sees its own projection of the one
 * key/value head); a conv or pooling projection has no per-head form (the
 * conv's channels are already shared by the heads), so for those none behaves
 * like headwise. A layerwise projection must be what this layer would build:
 * same kind, n and k, and for conv channels = head dim, or the key/value
 * width (dim, or dim/heads with shared_kv_head) when dense.
 */
int nn_linformer_init(struct nn_linformer *m, struct nn_params *ps, const char *name, int64_t dim,
		      int64_t heads, int64_t n, int64_t k, enum nn_attn_kind kind,
		      enum nn_proj_sharing sharing, bool conv_dense, bool shared_kv_head,
		      double attn_dropout, const struct nn_seq_proj *shared)
{
	if (!m)
		return tensor_error(TENSOR_ERR_ARG, "nn_linformer_init: m is NULL");
	*m = (struct nn_linformer){ 0 };
	if (!ps || !name)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_linformer_init: ps and name must not be NULL");
	int rc = check_config(name, dim, heads, n, k, kind, sharing, attn_dropout, shared);
	if (rc < 0)
		return rc;
	int64_t dh = dim / heads, kvdim = shared_kv_head ? dh : dim;
	bool dense = conv_dense && kind == NN_ATTN_CONV;
	int64_t channels = kind != NN_ATTN_CONV ? 0 : dense ? kvdim : dh;
	if (sharing == NN_SHARE_LAYERWISE) {
		rc = check_shared(name, shared, kind, n, k, heads, channels, dense);
		if (rc < 0)
			return rc;
	}
	static const char *const lname[4] = { "q_proj", "k_proj", "v_proj", "out_proj" };
	struct nn_linear *lin[4] = { &m->q_proj, &m->k_proj, &m->v_proj, &m->out_proj };
	int64_t out[4] = { dim, kvdim, kvdim, dim };
	char buf[NN_NAME_MAX];
	for (int i = 0; i < 4 && rc == TENSOR_OK; i++)
		rc = nn_name(buf, name, lname[i])
			 ? nn_linear_init(lin[i], ps, buf, dim, out[i], true)
			 : tensor_last_status();
	bool per_head =
	    sharing == NN_SHARE_NONE && (kind == NN_ATTN_LINEAR || kind == NN_ATTN_RANDOM);
	if (rc == TENSOR_OK && sharing != NN_SHARE_LAYERWISE)
		rc = nn_name(buf, name, "E") ? nn_seq_proj_init(&m->e, ps, buf, kind, n, k, heads,
								per_head, channels, dense)
					     : tensor_last_status();
	if (rc == TENSOR_OK && (sharing == NN_SHARE_NONE || sharing == NN_SHARE_HEADWISE))
		rc = nn_name(buf, name, "F") ? nn_seq_proj_init(&m->f, ps, buf, kind, n, k, heads,
								per_head, channels, dense)
					     : tensor_last_status();
	if (rc == TENSOR_OK)
		rc = nn_dropout_init(&m->dropout, ps, attn_dropout);
	if (rc < 0) {
		nn_linformer_free(m);
		return rc;
	}
	m->e_used = sharing == NN_SHARE_LAYERWISE ? shared : &m->e;
	m->f_used = sharing == NN_SHARE_LAYERWISE ? shared : sharing == NN_SHARE_KV ? &m->e : &m->f;
	m->dim = dim;
	m->heads = heads;
	m->n = n;
	m->k = k;
	m->sharing = sharing;
	m->shared_kv_head = shared_kv_head;
	return TENSOR_OK;
}

/* [B,h,T,d] -> [B,T,h*d]. */
static struct tensor *merge_heads(struct tensor *o)
{
	if (!o)
		return NULL;
	int64_t b = o->shape[0], h = o->shape[1], t = o->shape[2], d = o->shape[3];
	return ag_reshape(ag_permute(o, (int[]){ 0, 2, 1, 3 }), 3, (int64_t[]){ b, t, h * d });
}

/* x [B,T,c] with the padded rows (pad != 0) set to 0. */
static struct tensor *zero_padded_rows(struct tensor *x, const struct tensor *pad)
{
	struct tensor *m = tensor_unsqueeze(pad, 2); /* [B,T,1] */
	return m ? ag_masked_fill(x, m, 0.0) : NULL;
}

/* Key or value rows x [B,H,T,c] with the padded ones (pad != 0) set to 0. */
static struct tensor *zero_padded(struct tensor *x, const struct tensor *pad)
{
	if (!x || !pad)
		return x;
	struct tensor *m = tensor_unsqueeze(tensor_unsqueeze(pad, 1), 3); /* [B,1,T,1] */
	return m ? ag_masked_fill(x, m, 0.0) : NULL;
}

/* The mask [B,k] of the projected slots of a conv/pooling projection: slot j
 * covers positions [j kern, (j+1) kern) and is real (1) iff one of them is a
 * real token (pad == 0 and before T: the input was zero-padded up to n). NULL
 * with *none set when every slot is real (no padding and T == n). */
static struct tensor *slot_mask(const struct nn_linformer *m, const struct tensor *x,
				const struct tensor *pad, bool *none)
{
	enum tensor_dtype dt = x->dtype;
	enum tensor_device dev = x->storage->device;
	int64_t b = x->shape[0], t = x->shape[1], n = m->n, k = m->k;
	*none = !pad && t == n;
	if (*none)
		return NULL;
	struct tensor *real =
	    pad ? nn_mask_compare(pad, dt, true) : tensor_ones(dt, dev, 2, (int64_t[]){ b, t });
	if (real && t < n) {
		struct tensor *zeros = tensor_zeros(dt, dev, 2, (int64_t[]){ b, n - t });
		real = tensor_concat(2, (struct tensor *[]){ real, zeros }, 1);
	}
	struct tensor *w = real ? tensor_view(real, 3, (int64_t[]){ b, k, n / k }) : NULL;
	return w ? tensor_max(w, 1, (int[]){ 2 }, false) : NULL;
}

/* Keys or values x [B,T,kvdim] (the k_proj/v_proj output) projected to
 * [B,hk,k,d]: padded rows zeroed, then the sequence projection, per head or,
 * for a dense conv, over all channels before the head split. */
static struct tensor *project(const struct nn_linformer *m, const struct nn_seq_proj *p,
			      struct tensor *x, const struct tensor *pad)
{
	if (!x)
		return NULL;
	int64_t hk = m->shared_kv_head ? 1 : m->heads;
	if (p->dense) {
		struct tensor *y = nn_seq_proj_forward(p, zero_padded(ag_unsqueeze(x, 1), pad));
		return nn_split_heads(y ? ag_squeeze(y, 1) : NULL, hk);
	}
	return nn_seq_proj_forward(p, zero_padded(nn_split_heads(x, hk), pad));
}

/* Whether keys and values are cheaper projected along the sequence first:
 * E x [B,k,dim], then the k_proj / v_proj weights, instead of x W^T [B,T,kv]
 * then E. Only for a learned or random E shared by the heads (per head, E x
 * would be per head too), and only where it saves FLOPs: k dim (T + kv) <
 * T kv (dim + k), i.e. almost always unless keys and values have one head. */
static bool sequence_first(const struct nn_linformer *m, int64_t t)
{
	const struct nn_seq_proj *e = m->e_used;
	if ((e->kind != NN_ATTN_LINEAR && e->kind != NN_ATTN_RANDOM) || e->per_head)
		return false;
	double k = (double)m->k, d = (double)m->dim, kv = (double)m->k_proj.out, n = (double)t;
	return k * d * (n + kv) < n * kv * (d + k);
}

/* The linear layer lin after the sequence projection: (E x) W^T + (E r) b^T,
 * with ex = E x [B,k,dim] and er = E r, r the column of ones of the rows that
 * are not padding ([B,k,1], or [k,1] with no padding). Equal to E applied to
 * x W^T + b with its padded rows zeroed. */
static struct tensor *linear_after(const struct nn_linear *lin, struct tensor *ex,
				   struct tensor *er)
{
	struct nn_linear weight_only = *lin;
	weight_only.bias = NULL;
	struct tensor *y = nn_linear_forward(&weight_only, ex);
	return lin->bias ? ag_add(y, ag_mul(er, lin->bias)) : y;
}

/* E r for linear_after: the row sums of E [k,T], or E keep with keep [B,T,1]. */
static struct tensor *rows_kept(struct tensor *e, struct tensor *keep)
{
	return keep ? ag_matmul(e, keep) : ag_sum(e, 1, (int[]){ 1 }, true);
}

/* Whether the conv projection p is folded into the key/value weights: a conv
 * per head (kernel = stride = n/k, weights shared by the heads) after the
 * k/v linear layer is one linear map of each window of x, so neither the
 * [B,T,kv] keys or values nor their windows need to exist. */
static bool conv_folded(const struct nn_linformer *m, const struct nn_seq_proj *p)
{
	return p->kind == NN_ATTN_CONV && !p->dense && !m->shared_kv_head;
}

/* Keys or values [B,h,k,d] of lin then the conv p, folded (see conv_folded):
 * y[b,j] = xw[b,j] M + kw[b,j] bb + bias, where xw [B,k,kern dim] are the
 * windows of x (padded rows zeroed, zero rows past T), kw [B,k,kern] marks
 * their real rows, M[(r,i),(h,o)] = sum_c W[h d + c, i] w[o,c,r] and
 * bb[r,(h,o)] = sum_c b[h d + c] w[o,c,r] (W, b: lin's; w: the conv's). */
static struct tensor *project_conv_folded(const struct nn_linformer *m, const struct nn_seq_proj *p,
					  const struct nn_linear *lin, struct tensor *x,
					  const struct tensor *pad)
{
	int64_t b = x->shape[0], t = x->shape[1], dim = m->dim, h = m->heads, d = lin->out / h;
	int64_t n = p->n, k = p->k, kern = n / k;
	/* W^T per head [1,h,dim,d] and w per window offset [kern,1,d,d]: views */
	struct tensor *wh = ag_reshape(lin->weight, 3, (int64_t[]){ h, d, dim });
	struct tensor *wt = ag_unsqueeze(ag_permute(wh, (int[]){ 0, 2, 1 }), 0);
	struct tensor *wr = ag_unsqueeze(ag_permute(p->weight, (int[]){ 2, 1, 0 }), 1);
	struct tensor *mw = ag_reshape(ag_permute(ag_matmul(wt, wr), (int[]){ 0, 2, 1, 3 }), 2,
				       (int64_t[]){ kern * dim, h * d });
	struct tensor *xz = pad_rows(pad ? zero_padded_rows(x, pad) : x, n);
	struct tensor *y =
	    xz ? ag_matmul(ag_reshape(xz, 3, (int64_t[]){ b, k, kern * dim }), mw) : NULL;
	if (y && lin->bias) { /* with no padding at all, every kw is 1 */
		struct tensor *bh = ag_reshape(lin->bias, 4, (int64_t[]){ 1, h, 1, d });
		struct tensor *bb = ag_reshape(ag_matmul(bh, wr), 2, (int64_t[]){ kern, h * d });
		struct tensor *real =
		    pad	    ? nn_mask_compare(pad, x->dtype, true)
		    : t < n ? tensor_ones(x->dtype, x->storage->device, 2, (int64_t[]){ b, t })
			    : NULL;
		struct tensor *kw = real ? pad_rows(tensor_unsqueeze(real, 2), n) : NULL;
		struct tensor *kv = kw ? tensor_view(kw, 3, (int64_t[]){ b, k, kern }) : NULL;
		if (kv || !(pad || t < n)) /* else an error made real, kw or kv */
			y = ag_add(y, kv ? ag_matmul(kv, bb) : ag_sum(bb, 1, (int[]){ 0 }, false));
		else
			y = NULL;
	}
	struct tensor *y4 = y ? ag_reshape(y, 4, (int64_t[]){ b, k, h, d }) : NULL;
	return ag_permute(ag_add(y4, p->bias), (int[]){ 0, 2, 1, 3 });
}

/* Keys and values [B,hk,k,d] in the sequence-first order (see sequence_first):
 * padded rows of x zeroed, E x and F x (once when E is F), then the weights. */
static int project_sequence_first(const struct nn_linformer *m, struct tensor *x,
				  const struct tensor *pad, struct tensor **k, struct tensor **v)
{
	int64_t t = x->shape[1], hk = m->shared_kv_head ? 1 : m->heads;
	struct tensor *keep = NULL, *xz = x;
	*k = *v = NULL;
	if (pad) { /* keep [B,T,1]: 1 for a real row, 0 for padding */
		struct tensor *real = nn_mask_compare(pad, x->dtype, true);
		keep = real ? tensor_unsqueeze(real, 2) : NULL;
		if (!keep)
			return tensor_last_status();
		xz = zero_padded_rows(x, pad); /* a fill, not a product: NaN rows too */
	}
	struct tensor *e = ag_narrow(m->e_used->weight, 1, 0, t);
	struct tensor *ex = ag_matmul(e, xz), *er = rows_kept(e, keep);
	struct tensor *fx = ex, *fr = er;
	if (m->f_used != m->e_used) {
		struct tensor *f = ag_narrow(m->f_used->weight, 1, 0, t);
		fx = ag_matmul(f, xz);
		fr = rows_kept(f, keep);
	}
	*k = nn_split_heads(linear_after(&m->k_proj, ex, er), hk);
	*v = nn_split_heads(linear_after(&m->v_proj, fx, fr), hk);
	return *k && *v ? TENSOR_OK : tensor_last_status();
}

static int check_input(const struct nn_linformer *m, const struct tensor *x,
		       const struct tensor *mask)
{
	if (!m || m->dim < 1 || !m->e_used || !m->f_used)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_linformer_forward: module is NULL or not initialised");
	char bx[128];
	tensor_shape_str(x, bx, sizeof bx);
	if (x->ndim != 3 || x->shape[2] != m->dim)
		return tensor_error(TENSOR_ERR_SHAPE,
				    "nn_linformer_forward: x %s must be [B,T,%lld]", bx,
				    (long long)m->dim);
	if (x->shape[1] > m->n)
		return tensor_error(TENSOR_ERR_SHAPE,
				    "nn_linformer_forward: x %s: sequence length T %lld is longer "
				    "than n %lld, the longest input the projections cover",
				    bx, (long long)x->shape[1], (long long)m->n);
	return nn_check_mask("nn_linformer_forward", mask, x, x->shape[1]);
}

/* nn_linformer_keys_values with pad [B,T] (1 = padding, x's dtype) or NULL. */
static int keys_values(const struct nn_linformer *m, struct tensor *x, const struct tensor *pad,
		       struct nn_linformer_kv *kv)
{
	int64_t b = x->shape[0], h = m->heads, d = m->dim / h;
	struct tensor *k, *v;
	if (sequence_first(m, x->shape[1])) {
		if (project_sequence_first(m, x, pad, &k, &v) < 0)
			return tensor_last_status();
	} else if (conv_folded(m, m->e_used)) {
		k = project_conv_folded(m, m->e_used, &m->k_proj, x, pad);
		v = project_conv_folded(m, m->f_used, &m->v_proj, x, pad);
	} else {
		k = project(m, m->e_used, nn_linear_forward(&m->k_proj, x), pad);
		v = project(m, m->f_used, nn_linear_forward(&m->v_proj, x), pad);
	}
	if (!k || !v)
		return tensor_last_status();
	int64_t kv_shape[4] = { b, h, m->k, d };
	if (k->shape[1] != h) /* one shared key/value head */
		k = ag_expand(k, 4, kv_shape);
	if (v->shape[1] != h)
		v = ag_expand(v, 4, kv_shape);
	bool none = true;
	if (windowed(m->e_used->kind) || (m->mask_empty_slots && m->n % m->k == 0)) {
		kv->mask = slot_mask(m, x, pad, &none);
		if (!kv->mask && !none)
			return tensor_last_status();
	}
	kv->k = k;
	kv->v = v;
	return k && v ? TENSOR_OK : tensor_last_status();
}

int nn_linformer_keys_values(const struct nn_linformer *m, struct tensor *x,
			     const struct tensor *mask, struct nn_linformer_kv *kv)
{
	*kv = (struct nn_linformer_kv){ 0 };
	int rc = nn_require_scope("nn_linformer_keys_values");
	if (rc < 0)
		return rc;
	if (!x)
		return tensor_last_status() ? tensor_last_status() : TENSOR_ERR_ARG;
	if (check_input(m, x, mask) < 0)
		return tensor_last_status();
	struct tensor *pad = mask ? nn_mask_compare(mask, x->dtype, true) : NULL; /* 1 = padding */
	if (mask && !pad)
		return tensor_last_status();
	return keys_values(m, x, pad, kv);
}

/* With sequential_heads, rows whose scores for all heads together take at
 * most this many elements (a block of the no-grad encoder: 1,024 rows x 4
 * heads x k 128 is 512Ki) still go through attention at once: one head at a
 * time would save at most this much and cost a pass per head. */
#define ALL_HEADS_MAX ((int64_t)1 << 20)

struct tensor *nn_linformer_attend(const struct nn_linformer *m, struct tensor *rows,
				   const struct nn_linformer_kv *kv, int64_t b0)
{
	if (nn_require_scope("nn_linformer_attend") < 0 || !rows)
		return NULL;
	char br[128], bk[128];
	if (!m || m->dim < 1 || !kv || !kv->k || !kv->v) {
		tensor_error(TENSOR_ERR_ARG, "nn_linformer_attend: module or keys/values missing");
		return NULL;
	}
	int64_t nb = rows->ndim == 3 ? rows->shape[0] : 0, h = m->heads;
	if (rows->ndim != 3 || rows->shape[2] != m->dim || b0 < 0 || nb < 1 ||
	    b0 + nb > kv->k->shape[0]) {
		tensor_error(TENSOR_ERR_SHAPE,
			     "nn_linformer_attend: rows %s must be [B',R,%lld] of sequences "
			     "%lld.. of keys %s",
			     tensor_shape_str(rows, br, sizeof br), (long long)m->dim,
			     (long long)b0, tensor_shape_str(kv->k, bk, sizeof bk));
		return NULL;
	}
	struct tensor *k = kv->k, *v = kv->v, *mask = kv->mask;
	if (nb != k->shape[0]) { /* the rows' sequences of the keys and values */
		k = ag_narrow(k, 0, b0, nb);
		v = ag_narrow(v, 0, b0, nb);
		mask = mask ? tensor_narrow(mask, 0, b0, nb) : NULL;
	}
	struct tensor *q = nn_split_heads(nn_linear_forward(&m->q_proj, rows), h);
	double scale = 1 / sqrt((double)(m->dim / h));
	struct tensor *y;
	if (m->sequential_heads && nb * h * rows->shape[1] * m->k > ALL_HEADS_MAX)
		y = nn_attention_by_head(q, k, v, mask, false, scale, &m->dropout);
	else
		y = merge_heads(nn_attention(q, k, v, mask, false, scale, &m->dropout));
	return nn_linear_forward(&m->out_proj, y);
}

struct tensor *nn_linformer_forward(const struct nn_linformer *m, struct tensor *x,
				    const struct tensor *mask)
{
	struct nn_linformer_kv kv;
	if (nn_require_scope("nn_linformer_forward") < 0 ||
	    nn_linformer_keys_values(m, x, mask, &kv) < 0)
		return NULL;
	return nn_linformer_attend(m, x, &kv, 0);
}

void nn_linformer_free(struct nn_linformer *m)
{
	if (!m)
		return;
	nn_linear_free(&m->q_proj);
	nn_linear_free(&m->k_proj);
	nn_linear_free(&m->v_proj);
	nn_linear_free(&m->out_proj);
	nn_seq_proj_free(&m->e);
	nn_seq_proj_free(&m->f);
	*m = (struct nn_linformer){ 0 };
}
