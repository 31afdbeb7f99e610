/* The encoder's forward without gradients: the embedding's output is the
 * residual stream, and layers of projected attention update it in place a
 * block of query rows at a time (keys and values first, from all positions),
 * so the peak is the stream, one normalised copy for the keys and values and
 * one block's working set instead of a handful of [B,T,dim] tensors. Other
 * layers run in a scope of their own whose only survivor is their output.
 * The norms and residuals are the taped path's (models_internal.h), so the
 * result is the taped forward's, bit for bit. */
#include "models_internal.h"
#include "nn_internal.h"
#include "ag_internal.h"

#define ROW_BLOCK 1024 /* query rows per block of layer_in_blocks */

static bool dropping(const struct nn_dropout *d)
{
	return d->ps && d->ps->training && d->p > 0;
}

/* The rows [b0, b0+nb) x [r0, r0+nr) of x [B,T,dim]: one sequence's run of
 * rows, or whole sequences, so the view is contiguous. */
static struct tensor *row_block(struct tensor *x, int64_t b0, int64_t nb, int64_t r0, int64_t nr)
{
	struct tensor *seqs = tensor_narrow(x, 0, b0, nb);
	return nr == x->shape[1] ? seqs : tensor_narrow(seqs, 1, r0, nr);
}

/* fn on each block of up to ROW_BLOCK rows of x [B,T,dim] (with the index of
 * its first sequence), each in a scope of its own; the first error stops. */
static int for_row_blocks(struct tensor *x, int (*fn)(struct tensor *xb, int64_t b0, void *ctx),
			  void *ctx)
{
	int64_t b = x->shape[0], t = x->shape[1];
	int64_t nr = t < ROW_BLOCK ? t : ROW_BLOCK, seqs = t < ROW_BLOCK ? ROW_BLOCK / t : 1;
	int rc = TENSOR_OK;
	for (int64_t b0 = 0; b0 < b && rc == TENSOR_OK; b0 += seqs) {
		int64_t nb = b - b0 < seqs ? b - b0 : seqs;
		for (int64_t r0 = 0; r0 < t && rc == TENSOR_OK; r0 += nr) {
			tensor_scope_begin();
			rc = fn(row_block(x, b0, nb, r0, t - r0 < nr ? t - r0 : nr), b0, ctx);
			tensor_scope_end();
		}
	}
	return rc;
}

struct block_ctx {
	const struct model_config *c;
	const struct model_layer *l;
	const struct nn_linformer_kv *kv;
};

/* A half's output (model_half_output) written over the block xb. */
static int half_into(const struct model_config *c, const struct nn_layer_norm *ln,
		     const struct nn_rms_norm *rms, const struct nn_dropout *drop,
		     struct tensor *xb, struct tensor *branch)
{
	struct tensor *y = branch ? model_half_output(c, ln, rms, drop, xb, branch) : NULL;
	return y ? tensor_copy_(xb, y) : tensor_last_status();
}

/* One block of query rows xb (of sequences b0..) through the layer, in place:
 * x + attn(norm1(x)) then x + ff(norm2(x)), or the post-norm order. The
 * attention half has a scope of its own, so its temporaries are gone before
 * the feed-forward's come. norm1 of the block's rows is computed again rather
 * than kept from the keys and values: keeping the whole normalised stream
 * through the blocks would cost T x dim floats per sequence for one norm pass
 * (about 1.5% of the forward). */
static int block_forward(struct tensor *xb, int64_t b0, void *ctx)
{
	const struct block_ctx *bc = ctx;
	const struct model_config *c = bc->c;
	const struct model_layer *l = bc->l;
	tensor_scope_begin();
	struct tensor *in = model_half_input(c, &l->ln1, &l->rms1, xb);
	int rc = half_into(c, &l->ln1, &l->rms1, &l->drop, xb,
			   nn_linformer_attend(&l->lin, in, bc->kv, b0));
	tensor_scope_end();
	if (rc < 0)
		return rc;
	in = model_half_input(c, &l->ln2, &l->rms2, xb);
	return half_into(c, &l->ln2, &l->rms2, &l->drop, xb, nn_feed_forward_forward(&l->ff, in));
}

/* A layer of projected attention in place in x (the caller's own): the keys
 * and values first, from all positions; then each block of query rows through
 * attention and the feed-forward. Query rows are independent once the keys
 * and values are projected to k: the result is the unblocked one. */
static int layer_in_blocks(const struct model_config *c, const struct model_layer *l,
			   struct tensor *x, const struct tensor *real)
{
	struct nn_linformer_kv kv;
	tensor_scope_begin(); /* the layer's: the keys and values */
	tensor_scope_begin(); /* what only the keys and values need */
	int rc =
	    nn_linformer_keys_values(&l->lin, model_half_input(c, &l->ln1, &l->rms1, x), real, &kv);
	if (rc == TENSOR_OK) {
		kv.k = tensor_scope_keep(kv.k);
		kv.v = tensor_scope_keep(kv.v);
		struct tensor *mask = kv.mask;
		kv.mask = mask ? tensor_scope_keep(mask) : NULL;
		rc = kv.k && kv.v && (kv.mask || !mask) ? TENSOR_OK : tensor_last_status();
	}
	tensor_scope_end();
	if (rc == TENSOR_OK)
		rc = for_row_blocks(x, block_forward, &(struct block_ctx){ c, l, &kv });
	tensor_scope_end();
	return rc;
}

/* The final norm, in place, a block at a time. */
static int final_norm_block(struct tensor *xb, int64_t b0, void *ctx)
{
	const struct model_encoder *m = ctx;
	(void)b0;
	struct tensor *y = model_norm_forward(&m->cfg, &m->final_ln, &m->final_rms, xb);
	return y ? tensor_copy_(xb, y) : tensor_last_status();
}

static bool blockable(const struct model_layer *l)
{
	return l->kind != NN_ATTN_STANDARD && !dropping(&l->drop) && !dropping(&l->lin.dropout) &&
	       !dropping(&l->ff.dropout);
}

/* One layer in a scope of its own whose only survivor is the output, copied
 * to the heap (so the previous layer's output can be freed at once); the
 * attention half in an inner scope that keeps only its output, so the
 * layer's peak holds one half's intermediates. */
static struct tensor *layer_scoped(const struct model_config *c, const struct model_layer *l,
				   struct tensor *x, const struct tensor *real)
{
	tensor_scope_begin();
	tensor_scope_begin();
	struct tensor *h = model_attention_half(c, l, x, real);
	h = h ? tensor_scope_keep(h) : NULL;
	tensor_scope_end();
	struct tensor *y = model_ff_half(c, l, h);
	tensor_heap_begin();
	struct tensor *out = y ? tensor_clone(y) : NULL;
	tensor_heap_end();
	tensor_scope_end();
	return out;
}

/* The embedding's output, made in the caller's scope, is the residual stream;
 * layers of projected attention update it in place (layer_in_blocks), as
 * does the final norm; other layers hand over a heap copy (layer_scoped).
 * Every temporary dies in this function's scope; the stream comes back as it
 * is, or kept when a layer ran apart. */
struct tensor *model_encoder_infer(const struct model_encoder *m, const struct tensor *ids,
				   const struct tensor *mask)
{
	const struct model_config *c = &m->cfg;
	struct tensor *real;
	struct tensor *own = model_encoder_embed(m, ids, mask, &real);
	tensor_scope_begin();
	struct tensor *x = nn_dropout_forward(&m->drop, own);
	/* The heap output of the last layer run apart: freed by hand as soon as
	 * the next layer has read it, so that at most two layer outputs are
	 * live (this function's scope would hold every one until its end). */
	struct tensor *carry = NULL;
	for (int64_t i = 0; x && i < c->layers; i++) {
		const struct model_layer *l = &m->layers[i];
		if ((x == own || x == carry) && blockable(l)) {
			if (layer_in_blocks(c, l, x, real) < 0)
				x = NULL;
			continue;
		}
		x = layer_scoped(c, l, x, real);
		tensor_free(carry);
		carry = x;
	}
	if (x && c->pre_norm && c->final_norm) {
		if (x == own || x == carry)
			x = for_row_blocks(x, final_norm_block, (void *)m) < 0 ? NULL : x;
		else
			x = model_norm_forward(c, &m->final_ln, &m->final_rms, x);
	}
	struct tensor *y = x == own ? own : x ? tensor_scope_keep(x) : NULL;
	tensor_scope_end();
	tensor_free(carry);
	return y;
}
