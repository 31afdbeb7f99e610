/* The forwards of nn and models run in the caller's open scope. Called with
 * none open, or inside one between tensor_heap_begin() and tensor_heap_end(),
 * each refuses with TENSOR_ERR_STATE and a message naming it, and allocates
 * nothing: no allocation counted (tensor_mem_inject_failure), live bytes
 * unchanged, and LeakSanitizer finds nothing in the sanitizer build. Inside a
 * scope the same calls succeed, with and without gradients, and leave nothing
 * once the scope ends. The suite has no fixture scope. */
#include <string.h>

#include "models_common.h"

enum { B = 2, T = 8, DIM = 8, HEADS = 2, K = 4, VOCAB = 11, CLASSES = 3 };

struct mods {
	struct nn_params ps, cls_ps, mlm_ps;
	struct nn_linear lin;
	struct nn_embedding emb;
	struct nn_position pos;
	struct nn_conv_position conv;
	struct nn_layer_norm ln;
	struct nn_rms_norm rms;
	struct nn_dropout drop;
	struct nn_feed_forward ff;
	struct nn_mha mha;
	struct nn_seq_proj proj;
	struct nn_linformer lf;
	struct model_classifier cls;
	struct model_mlm mlm;
	/* x [B,T,DIM], x4 [B,HEADS,T,DIM/HEADS], ids and mask [B,T], logits
	 * [B,CLASSES], targets [B]: heap tensors */
	struct tensor *x, *x4, *ids, *mask, *logits, *targets;
	bool scoped; /* the calls run in a usable scope */
};

static void ok(int rc)
{
	ck_assert_msg(rc == TENSOR_OK, "%s", tensor_last_error());
}

static void setup(struct mods *m)
{
	tensor_clear_error();
	ck_assert_int_eq(tensor_scope_depth(), 0);
	*m = (struct mods){ 0 };
	ok(nn_params_init(&m->ps, TENSOR_F32, TENSOR_CPU, 5));
	struct nn_params *ps = &m->ps;
	ok(nn_linear_init(&m->lin, ps, "lin", DIM, DIM, true));
	ok(nn_embedding_init(&m->emb, ps, "emb", VOCAB, DIM, 0));
	ok(nn_position_init(&m->pos, ps, "pos", T, DIM, false));
	ok(nn_conv_position_init(&m->conv, ps, "conv", DIM, 3));
	ok(nn_layer_norm_init(&m->ln, ps, "ln", DIM, 1e-5));
	ok(nn_rms_norm_init(&m->rms, ps, "rms", DIM, 1e-5));
	ok(nn_dropout_init(&m->drop, ps, 0.1));
	ok(nn_feed_forward_init(&m->ff, ps, "ff", DIM, 2 * DIM, NN_GELU, false, 0.1));
	ok(nn_mha_init(&m->mha, ps, "mha", DIM, HEADS, 0));
	ok(nn_seq_proj_init(&m->proj, ps, "proj", NN_ATTN_LINEAR, T, K, HEADS, false, 0, false));
	ok(nn_linformer_init(&m->lf, ps, "lf", DIM, HEADS, T, K, NN_ATTN_CONV, NN_SHARE_HEADWISE,
			     false, false, 0, NULL));
	struct model_config c = tiny("LS");
	ok(nn_params_init(&m->cls_ps, TENSOR_F32, TENSOR_CPU, 6));
	ok(model_classifier_init(&m->cls, &m->cls_ps, &c));
	ok(nn_params_init(&m->mlm_ps, TENSOR_F32, TENSOR_CPU, 7));
	ok(model_mlm_init(&m->mlm, &m->mlm_ps, &c));
	m->x = tu_rand(TENSOR_F32, 3, (int64_t[]){ B, T, DIM }, 1);
	m->x4 = tu_rand(TENSOR_F32, 4, (int64_t[]){ B, HEADS, T, DIM / HEADS }, 2);
	m->ids = rand_ids(B, T, VOCAB, 3);
	m->mask = prefix_mask(B, T, (const int64_t[]){ T, 5 });
	m->logits = tu_rand(TENSOR_F32, 2, (int64_t[]){ B, CLASSES }, 4);
	m->targets =
	    tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ B }, (int64_t[]){ 2, 0 });
	ck_assert(m->x && m->x4 && m->ids && m->mask && m->logits && m->targets);
	ck_assert(!m->x->in_arena && !m->ids->in_arena);
}

static void teardown(struct mods *m)
{
	struct tensor *in[] = { m->x, m->x4, m->ids, m->mask, m->logits, m->targets };
	for (size_t i = 0; i < sizeof in / sizeof *in; i++)
		tensor_free(in[i]);
	model_classifier_free(&m->cls);
	model_mlm_free(&m->mlm);
	nn_linformer_free(&m->lf);
	nn_seq_proj_free(&m->proj);
	nn_mha_free(&m->mha);
	nn_feed_forward_free(&m->ff);
	nn_position_free(&m->pos);
	nn_params_free(&m->ps);
	nn_params_free(&m->cls_ps);
	nn_params_free(&m->mlm_ps);
	tensor_mem_trim();
}

/* Each forward, in the order of its name in NAMES. */
static const char *const NAMES[] = {
	"nn_activation_forward",    "nn_linear_forward",
	"nn_embedding_forward",	    "nn_position_forward",
	"nn_conv_position_forward", "nn_layer_norm_forward",
	"nn_rms_norm_forward",	    "nn_dropout_forward",
	"nn_feed_forward_forward",  "nn_attention",
	"nn_attention_by_head",	    "nn_split_heads",
	"nn_mha_forward",	    "nn_seq_proj_forward",
	"nn_linformer_forward",	    "nn_linformer_keys_values",
	"nn_linformer_attend",	    "nn_cross_entropy",
	"model_encoder_forward",    "model_classifier_forward",
	"model_mlm_forward",
};
#define NFORWARDS ((int)(sizeof NAMES / sizeof *NAMES))

/* Forward i on m's inputs: its result, or NULL on error (keys_values: its
 * keys, and its status in *rc). */
static struct tensor *call(struct mods *m, int i, int *rc)
{
	struct tensor *x = m->x, *x4 = m->x4;
	struct nn_linformer_kv kv = { .k = x4, .v = x4 };
	*rc = TENSOR_OK;
	switch (i) {
	case 0: return nn_activation_forward(NN_GELU, x);
	case 1: return nn_linear_forward(&m->lin, x);
	case 2: return nn_embedding_forward(&m->emb, m->ids);
	case 3: return nn_position_forward(&m->pos, x);
	case 4: return nn_conv_position_forward(&m->conv, x, m->mask);
	case 5: return nn_layer_norm_forward(&m->ln, x);
	case 6: return nn_rms_norm_forward(&m->rms, x);
	case 7: return nn_dropout_forward(&m->drop, x);
	case 8: return nn_feed_forward_forward(&m->ff, x);
	case 9: return nn_attention(x4, x4, x4, m->mask, false, 0.5, &m->drop);
	case 10: return nn_attention_by_head(x4, x4, x4, m->mask, true, 0.5, NULL);
	case 11: return nn_split_heads(x, HEADS);
	case 12: return nn_mha_forward(&m->mha, x, m->mask, false);
	case 13: return nn_seq_proj_forward(&m->proj, x4);
	case 14: return nn_linformer_forward(&m->lf, x, m->mask);
	case 15:
		*rc = nn_linformer_keys_values(&m->lf, x, m->mask, &kv);
		return *rc == TENSOR_OK ? kv.k : NULL;
	case 16:
		if (m->scoped)
			ok(nn_linformer_keys_values(&m->lf, x, m->mask, &kv));
		return nn_linformer_attend(&m->lf, x, &kv, 0);
	case 17: return nn_cross_entropy(m->logits, m->targets, -1, 0.1);
	case 18: return model_encoder_forward(&m->cls.enc, m->ids, m->mask);
	case 19: return model_classifier_forward(&m->cls, m->ids, m->mask);
	case 20: return model_mlm_forward(&m->mlm, m->ids, m->mask);
	default: ck_abort_msg("no forward %d", i); return NULL;
	}
}

/* Every forward refuses, naming itself and `why`, with no allocation. */
static void all_refuse(struct mods *m, const char *why)
{
	size_t live = tensor_mem_stats(TENSOR_CPU).live_bytes;
	for (int i = 0; i < NFORWARDS; i++) {
		tensor_mem_inject_failure(-1);
		int rc;
		struct tensor *y = call(m, i, &rc);
		ck_assert_msg(tensor_mem_inject_failure(-1) == 0, "%s allocated", NAMES[i]);
		if (i == 15)
			ck_assert_int_eq(rc, TENSOR_ERR_STATE);
		ck_assert_msg(strstr(tensor_last_error(), NAMES[i]) == tensor_last_error(),
			      "forward %d: %s", i, tensor_last_error());
		tu_assert_error(!y, TENSOR_ERR_STATE, why, NULL);
	}
	ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live);
}

START_TEST(test_outside_a_scope)
{
	struct mods m;
	setup(&m);
	for (int grad = 0; grad < 2; grad++) { /* the no-grad paths check first too */
		if (!grad)
			ag_no_grad_begin();
		all_refuse(&m, "called outside a scope: open one with tensor_scope_begin()");
		if (!grad)
			ag_no_grad_end();
	}
	ck_assert_int_eq(tensor_scope_depth(), 0);
	teardown(&m);
}
END_TEST

START_TEST(test_in_heap_mode)
{
	struct mods m;
	setup(&m);
	tensor_scope_begin();
	tensor_heap_begin();
	all_refuse(&m, "tensor_heap_begin()");
	tensor_heap_end();
	ck_assert_int_eq(tensor_scope_end(), TENSOR_OK);
	teardown(&m);
}
END_TEST

/* In a scope each forward works, with and without gradients, in training
 * mode (dropout drawn) and eval mode, and the scope's end releases all. */
START_TEST(test_in_a_scope)
{
	struct mods m;
	setup(&m);
	m.scoped = true;
	size_t live = tensor_mem_stats(TENSOR_CPU).live_bytes;
	for (int mode = 0; mode < 4; mode++) {
		bool grad = mode & 1, training = mode & 2;
		nn_params_train(&m.ps, training);
		nn_params_train(&m.cls_ps, training);
		nn_params_train(&m.mlm_ps, training);
		if (!grad)
			ag_no_grad_begin();
		tensor_scope_begin();
		for (int i = 0; i < NFORWARDS; i++) {
			int rc;
			ck_assert_msg(call(&m, i, &rc) != NULL, "%s (grad %d, training %d): %s",
				      NAMES[i], grad, training, tensor_last_error());
		}
		ag_tape_reset();
		ck_assert_int_eq(tensor_scope_end(), TENSOR_OK);
		if (!grad)
			ag_no_grad_end();
		ck_assert_uint_eq(tensor_mem_stats(TENSOR_CPU).live_bytes, live);
	}
	teardown(&m);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("nn_scope");
	TCase *tc = tcase_create("scope"); /* no fixture: no scope is open */
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_outside_a_scope);
	tcase_add_test(tc, test_in_heap_mode);
	tcase_add_test(tc, test_in_a_scope);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
