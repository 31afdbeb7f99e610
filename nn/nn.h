/* cformer nn: parameters, modules, losses, optimizers, schedules and
 * checkpoints — what new models are written against.
 *
 * A module is a plain struct with init / forward / free. init creates its
 * parameters in an nn_params list under hierarchical PyTorch-style names
 * ("layers.3.attn.q_proj.weight"; weights [out, in]), which optimizers and
 * checkpoints use. The list owns the parameter tensors (heap, requiring grad);
 * module free functions only forget their pointers. Forward functions take
 * and return autograd tensors and follow libtensor's error convention: NULL
 * in, NULL out, first error kept, message naming the module and shapes.
 *
 * Forwards run inside an open scope (tensor_scope_begin/end): their result
 * and every temporary are made in the caller's scope and released when it
 * ends (tensor_scope_keep() carries a result out), so nothing is freed by
 * hand. A forward -- every *_forward, nn_attention, nn_attention_by_head,
 * nn_split_heads, nn_linformer_keys_values / _attend and nn_cross_entropy --
 * called outside a scope, or between tensor_heap_begin() and
 * tensor_heap_end(), returns NULL (keys_values: the status) with
 * TENSOR_ERR_STATE naming it, before allocating anything.
 *
 * Freeing a model: its nn_params owns all of its modules' memory (parameters,
 * gradients, fixed tables), so nn_params_free(&ps) frees a model made of nn
 * modules in one call; the modules' *_free functions only forget their
 * pointers and may be left out. A model struct holding its modules and its
 * nn_params is freed by nn_params_free(&model.ps); the models of models.h
 * have one call more for their own arrays (model_classifier_free, ...).
 */
#ifndef CFORMER_NN_H
#define CFORMER_NN_H

#include "autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- parameters (params.c) ------------------------------------------------ */

#define NN_NAME_MAX 128

struct nn_param {
	char name[NN_NAME_MAX];
	struct tensor *value; /* heap leaf requiring grad; value->grad after backward */
	bool no_decay;        /* excluded from weight decay (biases, norms, embeddings) */
	bool lazy_rows;       /* optimizers touch only rows with a gradient (nn_params_set_lazy) */
};

struct nn_params {
	struct nn_param *items;
	int n, cap;
	enum tensor_dtype dtype;   /* of new parameters */
	enum tensor_device device;
	uint64_t seed;             /* initialisation seed; each parameter derives its own */
	bool training;             /* train (dropout on) or eval mode */
	uint64_t rng_counter;      /* advances with each dropout draw; saved in checkpoints */
	int64_t batch_first;       /* first row of this rank's share of the batch (nn_dist_share):
				      dropout draws the whole batch's masks for it */
	struct tensor *flat, *flat_grad; /* after nn_params_pack: one buffer each */
	int *flat_order; /* after nn_params_pack: the items' indices in their order in flat */
	struct tensor *flat_lowp;        /* flat rounded to bf16 (nn_params_autocast_begin) */
	struct tensor **kept; /* modules' buffers that are no parameters (nn_params_keep) */
	int nkept, kept_cap;
};

/* An empty list creating parameters of dtype on device, seeded by seed, in
 * training mode. */
int nn_params_init(struct nn_params *ps, enum tensor_dtype dtype, enum tensor_device device,
		   uint64_t seed);
/* Free every parameter, its gradient, the flat buffers and the tensors kept
 * with nn_params_keep: all the memory of a model's modules (see "Freeing a
 * model" above). Resets this thread's autograd tape first (its nodes may
 * point at the parameters). */
void nn_params_free(struct nn_params *ps);
/* Hand ps a module's heap tensor that is no parameter (a fixed table, a cached
 * mask: saved in no checkpoint, touched by no optimizer), to be freed by
 * nn_params_free. Errors (t not kept; it stays the caller's): ps or t NULL, t
 * made in a scope (TENSOR_ERR_ARG), no memory (TENSOR_ERR_NOMEM). */
int nn_params_keep(struct nn_params *ps, struct tensor *t);
/* Create, register and return a zero parameter [shape] named name (unique,
 * < NN_NAME_MAX chars). Errors: duplicate or bad name, after packing
 * (TENSOR_ERR_STATE), allocation. */
struct tensor *nn_param_new(struct nn_params *ps, const char *name, int ndim,
			    const int64_t *shape, bool no_decay);
/* The seed a parameter's initialiser should use: a hash of ps->seed and name. */
uint64_t nn_param_seed(const struct nn_params *ps, const char *name);
/* The parameter called name, or NULL. */
struct nn_param *nn_params_find(const struct nn_params *ps, const char *name);
/* Total number of scalar parameters. */
int64_t nn_params_count(const struct nn_params *ps);
/* Move every parameter into one contiguous buffer (ps->flat) and give each a
 * gradient that is a view of one flat gradient buffer (ps->flat_grad), so
 * zeroing and optimizer steps are single passes. The buffer holds the
 * parameters with weight decay first, then those without, lazy ones
 * (nn_params_set_lazy) last, each group in list order (ps->flat_order), so
 * that an optimizer step is a few fused calls, not one a parameter. Values are
 * preserved; parameter pointers stay valid; the parameters' first storage
 * goes back to the device (tensor_mem_trim). Call once, after all parameters
 * exist. */
int nn_params_pack(struct nn_params *ps);
/* Mark every parameter whose name starts with prefix as lazy (or not): the
 * optimizers (and nn_params_l2_grad) then change only the rows (slices along
 * dim 0) whose gradient is not all zero, their state included, as
 * torch.optim.SparseAdam or TensorFlow's LazyAdam do. Meant for embedding
 * tables: under dense Adam, a row's moments keep moving it for about
 * 1 / (1 - beta1) steps after each batch it appears in, so a rare token's
 * row travels ten times further per appearance than under lazy Adam.
 * Returns how many parameters matched. Errors: ps NULL, no name starting
 * with prefix (TENSOR_ERR_ARG). */
int nn_params_set_lazy(struct nn_params *ps, const char *prefix, bool lazy);
/* Open a mixed-precision region (ag_autocast_begin) for a training step or a
 * forward: in bf16 (dt TENSOR_BF16) the matrix products read bf16 operands
 * and accumulate in f32, while the parameters, their gradients, the optimizer
 * and checkpoints stay f32. Packed parameters are rounded to bf16 here, once
 * (into ps->flat_lowp, made at the first call), so a weight is rounded once a
 * step however often it is used; unpacked ones are rounded at each use. Call
 * after the optimizer step of the previous step and close with
 * ag_autocast_end(). dt TENSOR_F32 opens a region without rounding.
 * Errors: ps NULL (TENSOR_ERR_ARG), bf16 with parameters on CUDA
 * (TENSOR_ERR_UNSUPPORTED), ag_autocast_begin's; on error no region is open. */
int nn_params_autocast_begin(struct nn_params *ps, enum tensor_dtype dt);
/* Zero every gradient (one memset when packed). */
int nn_params_zero_grad(struct nn_params *ps);
/* Train / eval mode (dropout is off in eval mode). */
void nn_params_train(struct nn_params *ps, bool training);
/* A fresh seed for one dropout mask: hash of ps->seed and ps->rng_counter++. */
uint64_t nn_params_next_seed(struct nn_params *ps);
/* name = prefix + "." + suffix (or suffix alone if prefix is empty) into
 * buf[NN_NAME_MAX]; returns buf, or NULL with an error if too long. */
char *nn_name(char *buf, const char *prefix, const char *suffix);
/* Same with a printf-style suffix, e.g. nn_namef(buf, "", "layers.%d", i). */
char *nn_namef(char *buf, const char *prefix, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- initialisers (init.c): fill a float tensor in place, seeded ------------ */
/* fan_in / fan_out of a weight [out, in, ...] are in * receptive and
 * out * receptive, as in PyTorch. */

int nn_init_normal(struct tensor *t, double mean, double std, uint64_t seed);
int nn_init_uniform(struct tensor *t, double lo, double hi, uint64_t seed);
int nn_init_zeros(struct tensor *t);
int nn_init_ones(struct tensor *t);
/* U(-a, a), a = gain sqrt(6 / (fan_in + fan_out)); normal std = gain sqrt(2 / (fan_in + fan_out)). */
int nn_init_xavier_uniform(struct tensor *t, double gain, uint64_t seed);
int nn_init_xavier_normal(struct tensor *t, double gain, uint64_t seed);
/* Kaiming (He) for leaky ReLU slope a: gain = sqrt(2 / (1 + a^2)), bound
 * gain sqrt(3 / fan), std gain / sqrt(fan), fan = fan_in if fan_in_mode else
 * fan_out. */
int nn_init_kaiming_uniform(struct tensor *t, double a, bool fan_in_mode, uint64_t seed);
int nn_init_kaiming_normal(struct tensor *t, double a, bool fan_in_mode, uint64_t seed);

/* ---- activations (activation.c) ------------------------------------------- */

enum nn_activation { NN_RELU, NN_GELU, NN_GELU_TANH, NN_SILU, NN_NACTIVATIONS };
/* "relu", "gelu", "gelu_tanh", "silu" (alias "swish") -> value, or -1. */
int nn_activation_parse(const char *name);
const char *nn_activation_name(enum nn_activation a);
/* x of any shape -> act(x). Errors: unknown a; outside a scope. */
struct tensor *nn_activation_forward(enum nn_activation a, struct tensor *x);

/* ---- modules (one .c each) -------------------------------------------------- */

/* Linear: y = x W^T + b. weight [out, in] (init U(+-1/sqrt(in)) as PyTorch),
 * bias [out] or absent. x [..., in] -> [..., out]. Forward errors: last dim
 * != in, dtype != the weight's; outside a scope. */
struct nn_linear {
	struct tensor *weight, *bias;
	int64_t in, out;
};
int nn_linear_init(struct nn_linear *m, struct nn_params *ps, const char *name, int64_t in,
		   int64_t out, bool bias);
struct tensor *nn_linear_forward(const struct nn_linear *m, struct tensor *x);
void nn_linear_free(struct nn_linear *m);

/* Embedding: weight [num, dim] ~ N(0, 1) (no decay); ids (i32/i64, any shape)
 * -> [..., dim]. padding_idx (or -1) gets a zero row and no gradient. Ids out
 * of range are an error naming the id; so is a forward outside a scope. */
struct nn_embedding {
	struct tensor *weight;
	int64_t num, dim, padding_idx;
};
int nn_embedding_init(struct nn_embedding *m, struct nn_params *ps, const char *name,
		      int64_t num, int64_t dim, int64_t padding_idx);
struct tensor *nn_embedding_forward(const struct nn_embedding *m, const struct tensor *ids);
void nn_embedding_free(struct nn_embedding *m);

/* Position embeddings for sequences of up to max_len: learned (weight
 * [max_len, dim], N(0, 0.02)) or sinusoidal (fixed, no parameter: sin on even
 * and cos on odd features, as Vaswani et al.). forward adds them to x
 * [B, T, dim] (T <= max_len, else an error; outside a scope: an error). */
struct nn_position {
	bool learned;
	struct tensor *weight; /* learned: the parameter; sinusoidal: a fixed table kept by
				  ps (nn_params_keep) */
	int64_t max_len, dim;
};
int nn_position_init(struct nn_position *m, struct nn_params *ps, const char *name,
		     int64_t max_len, int64_t dim, bool learned);
struct tensor *nn_position_forward(const struct nn_position *m, struct tensor *x);
void nn_position_free(struct nn_position *m);

/* A convolutional position encoding: x [B, T, dim] -> x + conv(x), one
 * convolution over the sequence with a full [dim, dim, kernel] weight (no
 * bias; odd kernel, zero padding of kernel / 2 at both ends, so T is kept),
 * the position encoding generator of Chu et al. 2021 with every channel
 * mixed. It gives each token its neighbours (word order, n-grams) and the
 * padding tells the ends apart, without a row per absolute position to
 * memorise with. The weight starts at zero (the identity; decayed), so a
 * model starts as one without positions. mask [B, T] (nonzero = a real
 * token, 0 = padding) or NULL: padding is read as zeros, as past the ends,
 * so a padded sequence gets its unpadded outputs. Errors: kernel even or
 * < 1, dim < 1, x not [B, T, dim] or of another dtype, mask not [B, T], a
 * forward outside a scope. */
struct nn_conv_position {
	struct tensor *weight; /* [dim, dim, kernel]: out channel, in channel, offset */
	int64_t dim, kernel;
};
int nn_conv_position_init(struct nn_conv_position *m, struct nn_params *ps, const char *name,
			  int64_t dim, int64_t kernel);
struct tensor *nn_conv_position_forward(const struct nn_conv_position *m, struct tensor *x,
					const struct tensor *mask);
void nn_conv_position_free(struct nn_conv_position *m);

/* LayerNorm over the last dim: weight [dim] = 1, bias [dim] = 0 (no decay).
 * x [..., dim] -> the same shape. Forward errors: last dim != dim, dtype !=
 * the weight's; outside a scope. */
struct nn_layer_norm {
	struct tensor *weight, *bias;
	int64_t dim;
	double eps;
};
int nn_layer_norm_init(struct nn_layer_norm *m, struct nn_params *ps, const char *name,
		       int64_t dim, double eps);
struct tensor *nn_layer_norm_forward(const struct nn_layer_norm *m, struct tensor *x);
void nn_layer_norm_free(struct nn_layer_norm *m);

/* RMSNorm over the last dim: weight [dim] = 1 (no decay). x [..., dim] -> the
 * same shape. Forward errors: as LayerNorm's. */
struct nn_rms_norm {
	struct tensor *weight;
	int64_t dim;
	double eps;
};
int nn_rms_norm_init(struct nn_rms_norm *m, struct nn_params *ps, const char *name,
		     int64_t dim, double eps);
struct tensor *nn_rms_norm_forward(const struct nn_rms_norm *m, struct tensor *x);
void nn_rms_norm_free(struct nn_rms_norm *m);

/* Dropout with probability p in [0, 1): active in training mode only (x
 * itself comes back in eval mode); each call draws a new mask from ps
 * (nn_params_next_seed). Forward errors: outside a scope (in either mode). */
struct nn_dropout {
	double p;
	struct nn_params *ps;
};
int nn_dropout_init(struct nn_dropout *m, struct nn_params *ps, double p);
struct tensor *nn_dropout_forward(const struct nn_dropout *m, struct tensor *x);

/* Feed-forward: plain  W2 act(W1 x)  (fc1 [hidden, dim], fc2 [dim, hidden]),
 * or gated SwiGLU  W2 (silu(W1 x) * (W3 x))  (w1, w3 [hidden, dim], w2
 * [dim, hidden]); dropout on the hidden activations. x [..., dim] -> the
 * same shape. Forward errors: last dim != dim; outside a scope. */
struct nn_feed_forward {
	bool gated;
	enum nn_activation act;
	struct nn_linear fc1, fc2, fc3; /* fc3 only when gated */
	struct nn_dropout dropout;
	int64_t dim, hidden;
};
int nn_feed_forward_init(struct nn_feed_forward *m, struct nn_params *ps, const char *name,
			 int64_t dim, int64_t hidden, enum nn_activation act, bool gated,
			 double dropout);
struct tensor *nn_feed_forward_forward(const struct nn_feed_forward *m, struct tensor *x);
void nn_feed_forward_free(struct nn_feed_forward *m);

/* Scaled dot-product attention, the core shared by every attention kind:
 * softmax(q k^T * scale + mask) v with q [B, H, T, d], k [B, H, S, d] and
 * v [B, H, S, dv].
 * mask [B, S] (nonzero = a real key, 0 = padding, never attended; any
 * numeric dtype) or NULL; causal masks s > t (needs S == T). Rows whose keys are all masked give zeros. dropout
 * applies to the probabilities (the same mask on either path: that of
 * nn_dropout_forward on the [B, H, T, S] probabilities). Returns [B, H, T, dv]. Errors: shapes,
 * dtypes, devices, a scale not finite; outside a scope. */
struct tensor *nn_attention(struct tensor *q, struct tensor *k, struct tensor *v,
			    const struct tensor *mask, bool causal, double scale,
			    const struct nn_dropout *dropout);
/* Where the device has the fused kernel (tensor_attention: the CPU, f32 and
 * f64), nn_attention runs it, attention dropout included, unless the
 * probabilities are needed (an observer) or the products run in bf16: no
 * [B,H,T,S] scores in memory, each block of queries' recomputed in backward
 * (slower than keeping them where S is long: the Transformer at n = 512
 * trains 0% to 13% slower at two threads, in 37% less memory). false makes
 * every call take the composed path (products and a softmax, the probabilities
 * kept for backward), as on devices without the kernel; for comparisons.
 * Process-wide; true by default. */
void nn_attention_set_fused(bool on);
/* An observer of attention probabilities, for analysis tools (the spectrum of
 * P, attention maps): while set, every nn_attention call hands fn its
 * probabilities p [B, H, T, S] (after masking and softmax, before
 * dropout; padded keys hold 0) before using them; p is only valid during the
 * call. Calls come in the order the model computes them: a model_encoder
 * forward of one sequence, heads batched (model_encoder_set_sequential_heads
 * off, the default), makes one call per layer, in layer order; computing
 * heads one at a time splits a layer's p over several calls, and so do the
 * projected layers without gradients at T > 1024 (blocks of up to 1024
 * query rows, in row order). A nonzero return from fn is the forward's
 * error (fn sets it with tensor_error). fn runs in a no-grad region (p
 * is no part of the graph). One observer per process; NULL
 * removes it. Not for use while several threads run forwards. */
typedef int (*nn_attention_observer)(void *ctx, const struct tensor *p);
void nn_set_attention_observer(nn_attention_observer fn, void *ctx);
/* x [B, T, H*d] -> [B, H, T, d] (ag ops; a view when x is contiguous).
 * Outside a scope: an error. */
struct tensor *nn_split_heads(struct tensor *x, int64_t heads);
/* nn_attention one head at a time, the heads' outputs joined along the
 * features: the same arguments, and [B, T, H*dv]. Without grad each head runs
 * in a scope of its own and is written into its columns of the result, so the
 * peak holds one head's scores and no per-head copies; without a causal mask
 * too, a head whose scores (B x T x S) pass NN_BY_HEAD_SCORES elements runs
 * in blocks of sequences and query rows within that bound (64 MiB of f32),
 * so exact attention over long sequences needs no T x S buffer. Attention
 * dropout draws one mask per head or block (in training with dropout the
 * result is not the all-heads one; both are valid dropout). Errors: as
 * nn_attention's. */
#define NN_BY_HEAD_SCORES ((int64_t)1 << 24)
struct tensor *nn_attention_by_head(struct tensor *q, struct tensor *k, struct tensor *v,
				    const struct tensor *mask, bool causal, double scale,
				    const struct nn_dropout *dropout);

/* Multi-head self-attention: q_proj, k_proj, v_proj, out_proj ([dim, dim]
 * each, with bias), heads | dim. x [B, T, dim] -> [B, T, dim]. Set
 * m->sequential_heads after init to compute heads one at a time: the same
 * result (up to rounding; dropout masks are drawn per head), and in no-grad
 * mode a lower peak memory, each head's temporaries being released. mask
 * [B, T] (nonzero = a real token) or NULL. Forward errors: x not [B, T, dim],
 * mask not [B, T]; outside a scope. */
struct nn_mha {
	struct nn_linear q_proj, k_proj, v_proj, out_proj;
	struct nn_dropout dropout;
	int64_t dim, heads;
	bool sequential_heads;
};
int nn_mha_init(struct nn_mha *m, struct nn_params *ps, const char *name, int64_t dim,
		int64_t heads, double attn_dropout);
struct tensor *nn_mha_forward(const struct nn_mha *m, struct tensor *x,
			      const struct tensor *mask, bool causal);
void nn_mha_free(struct nn_mha *m);

/* ---- Linformer attention (linformer.c) ----------------------------------- */
/* Keys and values of length n are projected along the sequence axis to k
 * positions: softmax(Q (E K)^T / sqrt(d)) (F V), attention n x k instead of
 * n x n (Wang et al. 2020). */

/* The attention kind of a layer, in nn and models alike: standard (nn_mha)
 * or keys and values projected from n to k positions (nn_linformer, whose
 * sequence projections take the projected kinds). */
enum nn_attn_kind {
	NN_ATTN_STANDARD, /* softmax attention, n x n */
	NN_ATTN_LINEAR,   /* learned E, F [k, n] */
	NN_ATTN_CONV,     /* conv1d along the sequence, kernel = stride = n / k */
	NN_ATTN_MEAN,     /* mean pooling, kernel = stride = n / k, no parameters */
	NN_ATTN_MAX,      /* max pooling, kernel = stride = n / k, no parameters */
	NN_ATTN_RANDOM,   /* fixed N(0, 1/k) E, F [k, n]: saved, never trained */
	NN_NATTN
};
enum nn_proj_sharing {
	NN_SHARE_NONE,     /* per layer and head, E != F */
	NN_SHARE_HEADWISE, /* per layer, shared by the heads, E != F */
	NN_SHARE_KV,       /* per layer, shared by heads, E = F */
	NN_SHARE_LAYERWISE /* one E = F for every layer and head */
};
/* "standard", "linear", "conv", "mean", "max", "random" / "none",
 * "headwise", "kv", "layerwise" -> value, or -1; names "unknown" outside. */
int nn_attn_kind_parse(const char *name);
const char *nn_attn_kind_name(enum nn_attn_kind k);
int nn_proj_sharing_parse(const char *name);
const char *nn_proj_sharing_name(enum nn_proj_sharing s);

/* One sequence projection (E or F): kind, n -> k, and its weight:
 * LINEAR/RANDOM [k, n] (NN_SHARE_NONE: [H, k, n]); CONV [c, c, n/k] with
 * c = head dim (shared by the heads) or model dim (conv_dense); pooling none. */
struct nn_seq_proj {
	enum nn_attn_kind kind;
	int64_t n, k, heads, channels;
	bool per_head, dense;
	struct tensor *weight, *bias; /* conv bias [c] */
};
/* Register "<name>.weight" (and conv "<name>.bias"). heads > 1 with per_head
 * gives one projection per head (LINEAR/RANDOM only). Errors: k < 1, k > n,
 * n % k != 0 for CONV/MEAN/MAX (the message says so). */
int nn_seq_proj_init(struct nn_seq_proj *p, struct nn_params *ps, const char *name,
		     enum nn_attn_kind kind, int64_t n, int64_t k, int64_t heads, bool per_head,
		     int64_t channels, bool dense);
/* Re-initialise a learned (LINEAR) projection as mean pooling over contiguous
 * windows (position j feeds slot j k / n with weight 1 / its window's size)
 * plus noise times its current weights: training starts from the pooling
 * projection instead of a random mix of all positions, which generalises far
 * better from little data (docs/results.md). Errors: not LINEAR, noise < 0. */
int nn_seq_proj_init_windows(struct nn_seq_proj *p, double noise);
/* x [B, H, S, d] (S <= n, padded rows already zero) -> [B, H, k, d].
 * For CONV with dense, x is [B, 1, S, H*d] (heads not yet split). Errors:
 * shapes, dtype, device; outside a scope. */
struct tensor *nn_seq_proj_forward(const struct nn_seq_proj *p, struct tensor *x);
void nn_seq_proj_free(struct nn_seq_proj *p);

/* Linformer self-attention: q/k/v/out projections as nn_mha (same names),
 * plus the sequence projections "<name>.E" and "<name>.F" (F absent when E is
 * shared for keys and values; both absent with NN_SHARE_LAYERWISE, where the
 * caller passes the shared one). An input of m <= n tokens with a key mask is
 * exact: padded keys and values are zeroed before projecting and a learned
 * projection is sliced to the first m positions; for CONV/MEAN/MAX,
 * projected slots that cover only padding are masked out of the softmax.
 * Longer than n is an error. shared_kv_head: one key/value head shared by
 * all query heads (k_proj, v_proj [dim/heads, dim]). sequential_heads (set
 * after init): one head at a time as nn_mha, but only where the scores of
 * all heads would exceed 2^20 elements (B x heads x T x k); a no-grad
 * encoder's blocks of rows stay below and run all heads at once. */
struct nn_linformer {
	struct nn_linear q_proj, k_proj, v_proj, out_proj;
	struct nn_seq_proj e, f;
	const struct nn_seq_proj *e_used, *f_used; /* own, or the layerwise one */
	struct nn_dropout dropout;
	int64_t dim, heads, n, k;
	enum nn_proj_sharing sharing;
	bool shared_kv_head, sequential_heads;
	/* set after init: a learned or random projection (n % k == 0) masks the
	 * slots of windows with no real token as conv and pooling ones do */
	bool mask_empty_slots;
};
/* shared: the layerwise projection (required with NN_SHARE_LAYERWISE, else
 * NULL; built with per_head false). An initialised struct points into itself
 * (e_used/f_used): do not copy or move it. With CONV/MEAN/MAX, sharing
 * "none" behaves as headwise. */
int nn_linformer_init(struct nn_linformer *m, struct nn_params *ps, const char *name,
		      int64_t dim, int64_t heads, int64_t n, int64_t k, enum nn_attn_kind kind,
		      enum nn_proj_sharing sharing, bool conv_dense, bool shared_kv_head,
		      double attn_dropout, const struct nn_seq_proj *shared);
/* x [B, T, dim], T <= n; mask [B, T] (nonzero = a real token) or NULL ->
 * [B, T, dim]. Errors: x not [B, T, dim], T > n, mask not [B, T]; outside a
 * scope. */
struct tensor *nn_linformer_forward(const struct nn_linformer *m, struct tensor *x,
				    const struct tensor *mask);
/* The forward in two halves, for callers that run query rows in blocks: the
 * keys and values [B, heads, k, d] (and, for CONV/MEAN/MAX with padding, the
 * slot mask [B, k], 1 = a slot over a real token) read every position of x;
 * then rows [B', R, dim], the queries of sequences b0 .. b0+B'-1 (any R),
 * attend to them through the output projection -> [B', R, dim]. nn_linformer_forward(x) is
 * attend(x, keys_values(x), 0). Errors: as nn_linformer_forward (each half
 * outside a scope too); rows not [B', R, dim] or past the keys' batch
 * (TENSOR_ERR_SHAPE). */
struct nn_linformer_kv {
	struct tensor *k, *v, *mask;
};
int nn_linformer_keys_values(const struct nn_linformer *m, struct tensor *x,
			     const struct tensor *mask, struct nn_linformer_kv *kv);
struct tensor *nn_linformer_attend(const struct nn_linformer *m, struct tensor *rows,
				   const struct nn_linformer_kv *kv, int64_t b0);
void nn_linformer_free(struct nn_linformer *m);

/* ---- cached keys and values for generation (kv_cache.c) ------------------- */
/* A causal decoder generating text one token at a time: the keys and values
 * of the tokens already read do not change, so each layer keeps them in a
 * cache, and a step computes the projections of the new tokens only and
 * attends from them to the cache (O(len) a token instead of rerunning the
 * window). Inference only. */
struct nn_kv_cache {
	struct tensor *k, *v; /* [B, H, max_len, d] heap tensors; rows [0, len) are filled */
	int64_t len, max_len;
};
/* An empty cache for the module m (its heads, head size, dtype and device)
 * and batch sequences of up to max_len tokens. Errors: m NULL or not
 * initialised, batch or max_len < 1 (TENSOR_ERR_ARG), allocation. */
int nn_kv_cache_init(struct nn_kv_cache *c, const struct nn_mha *m, int64_t batch,
		     int64_t max_len);
/* Forget the cached tokens (len = 0) to start new sequences; keeps the buffers. */
void nn_kv_cache_reset(struct nn_kv_cache *c);
/* Free the buffers (safe on a zeroed or freed cache, and on NULL). */
void nn_kv_cache_free(struct nn_kv_cache *c);
/* Causal self-attention of m for the next T tokens x [B, T, dim], at
 * positions c->len .. c->len+T-1 of the sequences whose earlier keys and
 * values c holds: their keys and values are appended to c (len += T) and the
 * result [B, T, dim] is the rows of nn_mha_forward(m, whole sequence, NULL,
 * true) for those positions in eval mode, up to rounding. Feed a prompt in one
 * call and then one token a call. Errors, which leave c as it was: gradients
 * enabled (call between ag_no_grad_begin and ag_no_grad_end:
 * TENSOR_ERR_STATE); c->len + T > c->max_len (TENSOR_ERR_ARG); x not [B, T,
 * dim] with the cache's B, a cache of another module's shape
 * (TENSOR_ERR_SHAPE); m or c NULL or not initialised; outside a scope. */
struct tensor *nn_mha_forward_cached(const struct nn_mha *m, struct tensor *x,
				     struct nn_kv_cache *c);

/* ---- losses and metrics (loss.c) ------------------------------------------ */

/* Mean cross-entropy of logits [N, C] against targets [N] (i32/i64) over the
 * targets != ignore_index (use -1 for none), with label smoothing in [0, 1).
 * Returns a scalar; 0 if every target is ignored. Targets out of [0, C) are
 * an error naming the value; so is a call outside a scope. */
struct tensor *nn_cross_entropy(struct tensor *logits, const struct tensor *targets,
				int64_t ignore_index, double label_smoothing);
/* Fraction of rows whose argmax equals the target (ignored rows skipped);
 * NaN when none counts; negative status cast to double on error. */
double nn_accuracy(const struct tensor *logits, const struct tensor *targets,
		   int64_t ignore_index);
/* Binary accuracy of logits [N] (positive class when > 0) against 0/1 targets. */
double nn_binary_accuracy(const struct tensor *logits, const struct tensor *targets);

/* ---- optimizers (adamw.c, sgd.c, ema.c, penalty.c, clip.c; optim.c) ----- */

/* AdamW (Loshchilov & Hutter): m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + lr wd p, the decay
 * skipped for no_decay parameters when decay_all is false. */
struct nn_adamw {
	struct nn_params *ps;
	double lr, beta1, beta2, eps, weight_decay;
	bool decay_all;
	int64_t step;
	struct tensor **m, **v; /* per parameter (views of flat buffers if packed),
				 * NULL-terminated after ps->n entries */
	struct tensor *flat_m, *flat_v;
};
int nn_adamw_init(struct nn_adamw *o, struct nn_params *ps, double lr, double beta1,
		  double beta2, double eps, double weight_decay);
/* One update from the current gradients, with o->lr. On an error nothing
 * has changed, lazy rows included (on a device without a fused AdamW
 * kernel, running out of memory mid-way can leave earlier segments
 * updated). */
int nn_adamw_step(struct nn_adamw *o);
void nn_adamw_free(struct nn_adamw *o);

/* SGD with momentum (PyTorch's form): b = mu b + g (+ wd p); p -= lr b. */
struct nn_sgd {
	struct nn_params *ps;
	double lr, momentum, weight_decay;
	int64_t step;
	struct tensor **buf;     /* momentum per parameter, NULL-terminated */
	struct tensor *flat_buf; /* their flat buffer when ps is packed */
};
int nn_sgd_init(struct nn_sgd *o, struct nn_params *ps, double lr, double momentum,
		double weight_decay);
/* One update from the current gradients, in one fused pass per segment where
 * the device has the kernel; on an error nothing has changed (as
 * nn_adamw_step, lazy rows included). */
int nn_sgd_step(struct nn_sgd *o);
void nn_sgd_free(struct nn_sgd *o);

/* Exponential moving average of the parameters (Polyak averaging), for
 * evaluating with smoothed weights: after each optimizer step,
 * nn_ema_update sets s = d s + (1 - d) p for every parameter p and its
 * average s, with d = min(decay, (1 + t) / (10 + t)) at the t-th update (so
 * early averages forget the initialisation fast), s starting as p. Evaluate
 * with the averages between two nn_ema_swap calls, which exchange p and s.
 * Errors: decay not in [0, 1) (TENSOR_ERR_ARG); a parameter added after
 * init, or an update while swapped (TENSOR_ERR_STATE). */
struct nn_ema {
	struct nn_params *ps;
	double decay;
	int64_t updates;
	bool swapped;           /* the parameters hold the averages */
	struct tensor **shadow; /* per parameter (views of flat if packed), NULL-terminated */
	struct tensor *flat;
};
int nn_ema_init(struct nn_ema *e, struct nn_params *ps, double decay);
int nn_ema_update(struct nn_ema *e);
int nn_ema_swap(struct nn_ema *e);
void nn_ema_free(struct nn_ema *e);

/* Add lambda * p to the gradient of every parameter whose name starts with
 * prefix ("" or NULL: all): the gradient of the penalty lambda/2 ||p||^2.
 * Coupled L2, as torch.optim.Adam's weight_decay: under Adam the penalty is
 * normalised with the data gradient, so a row of an embedding that few
 * batches touch (a rare token) shrinks fast between its appearances, where
 * AdamW's decoupled decay shrinks every row alike. Call after backward and
 * before clipping and the step. Returns how many gradients changed (those
 * without a gradient are skipped; 0 when lambda is 0). Errors: lambda < 0 or
 * not finite, no parameter name starting with prefix (TENSOR_ERR_ARG). On a
 * lazy parameter (nn_params_set_lazy) only the rows with a gradient change. */
int nn_params_l2_grad(struct nn_params *ps, const char *prefix, double lambda);

/* L2-SP (Li, Grandvalet and Davoine 2018): the penalty lambda/2 ||p - p0||^2
 * pulls parameters towards p0, their values when nn_anchor_init ran (say, a
 * Linformer projection's window-mean start, or pretrained weights), instead
 * of towards zero. nn_anchor_init copies every parameter whose name matches
 * the glob pattern (fnmatch(3); alternatives separated by '|', e.g.
 * "layers.*.attn.[EF].weight|proj.weight");
 * nn_anchor_l2_grad adds lambda (p - p0) to their gradients (coupled, as
 * nn_params_l2_grad: call after backward, before clipping and the step) and
 * returns how many changed. Errors: NULL arguments, no name matching
 * (TENSOR_ERR_ARG); lambda < 0 or not finite (TENSOR_ERR_ARG, nothing
 * changed); a parameter no longer of its anchored shape (TENSOR_ERR_STATE);
 * out of memory. nn_anchor_free releases the copies (safe on a zeroed one). */
struct nn_anchor {
	struct nn_params *ps;
	int n;
	int *index;            /* of each anchored parameter in ps->items */
	struct tensor **value; /* its copy p0 */
};
int nn_anchor_init(struct nn_anchor *a, struct nn_params *ps, const char *pattern);
int nn_anchor_l2_grad(struct nn_anchor *a, double lambda);
void nn_anchor_free(struct nn_anchor *a);

/* Adversarial training on the weights (the fast gradient method of Goodfellow
 * et al. 2015 on the embedding, as Miyato et al. 2017, but on the matrix, not
 * on each position). After backward, nn_fgm_perturb adds r = eps ||p|| g / ||g||
 * (Frobenius norms) to every parameter p whose name starts with prefix and
 * whose gradient g is nonzero, keeping p's value; a second forward and
 * backward of the same batch then adds the gradient at the perturbed weights
 * (training on L(p) + L(p + r)), and nn_fgm_restore puts the kept values back
 * exactly, before the optimizer step. eps is relative to ||p||, so it keeps its
 * meaning while a penalty shrinks the weight. Returns how many parameters
 * moved (0 when eps is 0; a restore is due all the same). Errors: eps < 0 or
 * not finite, no name starting with prefix, a non-finite gradient norm
 * (TENSOR_ERR_ARG, nothing changed); perturbing twice, restoring when nothing
 * is perturbed, parameters added in between (TENSOR_ERR_STATE). */
struct nn_fgm {
	struct nn_params *ps;
	struct tensor **saved; /* per parameter: its value before, or NULL; NULL when idle */
	int n;
};
int nn_fgm_perturb(struct nn_fgm *f, struct nn_params *ps, const char *prefix, double eps);
int nn_fgm_restore(struct nn_fgm *f);
/* Drop the kept values without restoring them (idempotent). */
void nn_fgm_free(struct nn_fgm *f);

/* Scale all gradients so their global L2 norm is at most max_norm; returns
 * the norm before clipping, or a negative status. */
double nn_clip_grad_norm(struct nn_params *ps, double max_norm);

/* ---- data parallelism over processes (dist.c): MPI ------------------------ */
/* Under a launcher (mpirun -np N prog ...) the N processes are ranks of one
 * group; each takes its share of every global batch (nn_dist_share), computes
 * the mean loss of its rows and backward, then nn_dist_average_grads makes
 * every rank's packed gradients the global batch's; the optimizer step that
 * follows keeps the ranks' parameters equal. Run without a launcher, or built
 * without MPI (./configure --without-mpi), a process is a group of one and the
 * calls cost nothing. Collectives run on the host (a device buffer is copied),
 * except CUDA gradients in a build with NCCL (tensor_cuda_sum_across). Errors:
 * TENSOR_ERR_COMM naming the MPI (or NCCL) call and the rank. */

/* Join the group a launcher started (MPI_Init, once; argc/argv as main's, may be
 * NULL), or stay a group of one. Returns a status. */
int nn_dist_init(int *argc, char ***argv);
/* Leave the group (MPI_Finalize); then a group of one again. */
void nn_dist_finalize(void);
/* This process's rank in [0, size), and the group's size (0 and 1 alone). */
int nn_dist_rank(void);
int nn_dist_size(void);
/* This rank's rows [*lo, *hi) of a global batch of rows: contiguous shares in
 * rank order, the first rows % size ranks one row more (a share may be empty). */
void nn_dist_share(int64_t rows, int64_t *lo, int64_t *hi);
/* Make ps's packed gradients (ps->flat_grad, nn_params_pack) the global batch's:
 * each rank holds the mean gradient of its rows of total_rows, and every rank
 * ends with sum_r rows_r g_r / total_rows, bit for bit the same on every rank
 * (each element summed once: reduce-scatter, then all-gather). Alone: scaled by
 * rows / total_rows. TENSOR_ERR_STATE unpacked, TENSOR_ERR_ARG for rows outside
 * [0, total_rows]. */
int nn_dist_average_grads(struct nn_params *ps, int64_t rows, int64_t total_rows);
/* After a forward (or a step's forwards) that the ranks with an empty share of the
 * batch skipped: every rank takes the furthest random stream (the largest
 * ps->rng_counter; the ranks that ran drew alike), so that the next dropout masks
 * are those one process would draw. Call it on every rank after each batch. */
int nn_dist_sync_rng(struct nn_params *ps);
/* Sum v[0..n) over the ranks in place (metrics, counts). */
int nn_dist_sum(double *v, int n);
/* Give every rank rank 0's packed parameters (ps->flat). */
int nn_dist_broadcast_params(struct nn_params *ps);
/* Whether contiguous t holds the same bytes on every rank: TENSOR_ERR_STATE naming
 * what and the checksums when not; *checksum (may be NULL) receives this rank's
 * (FNV-1a of the bytes). */
int nn_dist_check_same(struct tensor *t, const char *what, uint64_t *checksum);
/* Wait for every rank. */
int nn_dist_barrier(void);
/* End every rank's process with status (MPI_Abort), for a program's fatal-error
 * path after it has said why; returns at once when alone. */
void nn_dist_abort(int status);

/* ---- learning-rate schedules (schedule.c) --------------------------------- */

enum nn_schedule_kind { NN_SCHEDULE_CONSTANT, NN_SCHEDULE_COSINE, NN_SCHEDULE_LINEAR };

/* Linear warmup from 0 over warmup steps to base_lr, then constant, cosine
 * annealing or linear decay to min_lr at total steps (and min_lr after). */
struct nn_schedule {
	enum nn_schedule_kind kind;
	double base_lr, min_lr;
	int64_t warmup, total;
};
/* warmup_ratio in [0, 1) of total when warmup < 0. Errors: total < 1,
 * warmup > total, negative learning rates. */
int nn_schedule_init(struct nn_schedule *s, enum nn_schedule_kind kind, double base_lr,
		     double min_lr, int64_t warmup, double warmup_ratio, int64_t total);
/* The learning rate for step (0-based). */
double nn_schedule_lr(const struct nn_schedule *s, int64_t step);

/* ---- checkpoints (checkpoint.c, checkpoint_save.c): safetensors files ------- */

/* Save every parameter (F32/F64/I32/I64, little-endian, row-major) under its
 * name, plus, if opt is not NULL, AdamW state as "optimizer.m.<name>" and
 * "optimizer.v.<name>". __metadata__ holds "format": "cformer", "step",
 * "rng_counter", "seed", and "config" (config_json, if not NULL, must be
 * valid JSON). Atomic: written to a temporary file of a name unique to this
 * save (path.tmp.<pid>.<n>), fsync'd, renamed over path; readers see the old
 * file or the new one. A value the loader would refuse (NaN or inf anywhere,
 * a negative AdamW v) is an error naming the tensor and its first bad
 * element (TENSOR_ERR_ARG), and nothing is written: path keeps its previous
 * contents, so a diverged run never replaces its last good state. */
int nn_checkpoint_save(const char *path, const struct nn_params *ps,
		       const struct nn_adamw *opt, const char *config_json, int64_t step);
/* A training run's whole state in one file, so that a run killed at any
 * moment leaves a complete state to resume from: what nn_checkpoint_save
 * writes, plus the moving average if ema is not NULL ("optimizer.ema.<name>",
 * which loaders that do not ask for it skip as optimizer state; "ema_updates"
 * and "ema_decay" in the metadata; ema must not be swapped in) and the
 * caller's own JSON (run_json: step, best score, flags...) as the metadata
 * string "run". */
int nn_checkpoint_save_run(const char *path, const struct nn_params *ps,
			   const struct nn_adamw *opt, const struct nn_ema *ema,
			   const char *config_json, const char *run_json, int64_t step);
/* An entry of a checkpoint's __metadata__: a key and its string value. */
struct nn_checkpoint_meta {
	const char *key, *value;
};
/* nn_checkpoint_save_run with the caller's own metadata: the n entries of meta (meta may be
 * NULL when n is 0) go into __metadata__ beside the library's, so that a program can keep
 * what it needs to read the file back as it was written (the model config as "config", the
 * run state as "run", both valid JSON, or how the run read its text). Errors
 * (TENSOR_ERR_ARG, nothing written): a NULL key or value, a key given twice, a key the
 * library writes itself ("format", "step", "rng_counter", "seed", "optimizer" and
 * "optimizer_*", "ema_*"); the others of nn_checkpoint_save_run. */
int nn_checkpoint_save_meta(const char *path, const struct nn_params *ps,
			    const struct nn_adamw *opt, const struct nn_ema *ema,
			    const struct nn_checkpoint_meta *meta, int n, int64_t step);
/* Load into existing parameters (and opt if not NULL and present in the
 * file; partial optimizer state is an error): every parameter must be present
 * with its exact shape and dtype (or, for an f32/f64 one, as BF16: converted
 * exactly) and only finite values; other tensors are
 * refused except "optimizer.*". Loaded optimizer state is checked as well:
 * m, v and the moving average finite, v not negative (the error names the
 * tensor, the first bad element and its value), the update counts at most
 * 2^53, and the recorded settings (optimizer_lr, _beta1, _beta2, _eps,
 * _weight_decay, ema_decay), where present, in the ranges nn_adamw_init and
 * nn_ema_init take. Metadata is optional (files from other tools
 * load): step (0 if absent), seed and rng_counter restore ps's random stream.
 * The whole file is validated before anything changes, so a truncated,
 * corrupt, oversized or mismatched file, or one with NaN or inf values,
 * returns an error naming the file and the problem (the tensor, how many
 * values) and leaves ps and opt untouched. step receives the saved step
 * (may be NULL). */
int nn_checkpoint_load(const char *path, struct nn_params *ps, struct nn_adamw *opt,
		       int64_t *step);
/* nn_checkpoint_load of a file nn_checkpoint_save_run wrote: also the moving
 * average into ema if not NULL (then the file must hold it whole), and
 * *run_json receives a malloc'd copy of the "run" metadata (NULL if absent;
 * run_json may be NULL). All or nothing, as nn_checkpoint_load. */
int nn_checkpoint_load_run(const char *path, struct nn_params *ps, struct nn_adamw *opt,
			   struct nn_ema *ema, char **run_json, int64_t *step);
/* Remove the temporary files that saves of path left when their process was
 * killed: the names nn_checkpoint_save gives them (path.tmp.<pid>.<n>) whose
 * process no longer runs; every other file stays. Call it before a run writes
 * path again (e.g. on resuming). Returns how many were removed, or a negative
 * status (TENSOR_ERR_IO: the directory cannot be read, a file cannot be
 * removed). */
int nn_checkpoint_remove_temps(const char *path);
/* The "config" metadata string of a checkpoint (malloc'd; free it), so a
 * model can be rebuilt from the file alone. NULL with an error if absent. */
char *nn_checkpoint_config(const char *path);
/* The __metadata__ entry key of the checkpoint at path, read from its header alone: *value
 * receives a malloc'd copy (free it), or NULL when the file has no such entry, which is not
 * an error (files of older versions or other tools). Errors: path unreadable, a malformed
 * header, key or value NULL. */
int nn_checkpoint_meta(const char *path, const char *key, char **value);

/* What a checkpoint's header says, read without its data: the parameter
 * tensors ("optimizer.*" left out) sorted by name, their total element count
 * and the saved step; so that a model can be checked against the file before
 * anything is allocated. Free with nn_checkpoint_info_free. */
struct nn_checkpoint_tensor {
	char name[NN_NAME_MAX];
	enum tensor_dtype dtype;
	int ndim;
	int64_t shape[TENSOR_MAX_DIMS];
};
struct nn_checkpoint_info {
	int n;
	struct nn_checkpoint_tensor *tensors;
	int64_t numel, step;
	int optimizer_tensors; /* the "optimizer.*" tensors left out of tensors */
};
int nn_checkpoint_info(const char *path, struct nn_checkpoint_info *out);
/* The tensor of info named name, or NULL. */
const struct nn_checkpoint_tensor *nn_checkpoint_info_find(const struct nn_checkpoint_info *info,
							   const char *name);
void nn_checkpoint_info_free(struct nn_checkpoint_info *info);

/* For tests of crash safety: hook(path, point) is called at each point of a
 * save (NN_CKPT_BEGIN before the temporary file exists, NN_CKPT_HEADER_WRITTEN
 * with part of it written, NN_CKPT_FILE_WRITTEN complete and fsync'd but not
 * yet renamed, NN_CKPT_RENAMED in place), so a test can end the process
 * there; NULL removes it. */
enum { NN_CKPT_BEGIN, NN_CKPT_HEADER_WRITTEN, NN_CKPT_FILE_WRITTEN, NN_CKPT_RENAMED };
void nn_checkpoint_set_crash_hook(void (*hook)(const char *path, int point));

#ifdef __cplusplus
}
#endif

#endif
