/* Dump a few AdamW steps of a small cformer classifier for bench/pytorch/check_doc.py,
 * which continues the training in PyTorch as docs/pytorch.md says and compares. Built
 * by `make check` (a check program); by hand as dump_logits.c. From a build directory:
 *
 *   ./dump_adamw STEPS DECAY_ALL OUT_DIR
 *
 * trains a tiny classifier ("LC": a learned and a conv projection; dim 16, 2 heads,
 * n 16, k 4, convolutional positions of kernel 3, attention pooling, 3 classes, no
 * dropout, f32, parameters packed as the examples pack them) for STEPS steps on random
 * batches, as the example programs train: the learning rate of the warmup + cosine
 * schedule at each step, gradients clipped to a global norm of 1, then AdamW with betas
 * (0.9, 0.98), eps 1e-6 and weight decay 0.1 (on every parameter if DECAY_ALL is 1).
 * Then it writes, in OUT_DIR:
 *   before.safetensors  the weights and AdamW's state after STEPS steps (as
 *                       nn_checkpoint_save writes every checkpoint)
 *   grads.safetensors   the gradients of the next step, after clipping
 *   after.safetensors   the weights and AdamW's state after that step
 *   batch.json          the next step's batch (ids, mask, labels), its loss and the
 *                       schedule (kind, base and min lr, warmup ratio, total steps)
 * Exit status 0, or 1 with a message. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "models.h"

#define B 4
#define N 16
#define TOTAL 10
#define WARMUP 0.3
#define BASE_LR 1e-2
#define MIN_LR 1e-4
#define CLIP 1.0

static uint64_t rng = 0x2545f4914f6cdd1dull;
static int64_t below(int64_t m) /* [0, m) */
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (int64_t)((rng >> 11) % (uint64_t)m);
}

/* Batch i: row b has N - 3 b real tokens (the rest padding), labels in [0, 3). */
struct batch {
	int32_t ids[B * N], mask[B * N];
	int64_t labels[B];
};

static void make_batch(struct batch *bt)
{
	for (int64_t b = 0; b < B; b++) {
		for (int64_t j = 0; j < N; j++) {
			bool real = j < N - 3 * b;
			bt->mask[b * N + j] = real;
			bt->ids[b * N + j] = real ? 1 + (int32_t)below(100) : 0;
		}
		bt->labels[b] = below(3);
	}
}

static int fail(const char *what)
{
	fprintf(stderr, "dump_adamw: %s: %s\n", what, tensor_last_error());
	return 1;
}

/* Forward, loss and backward of bt, then the clipping; *loss receives the loss. */
static int gradients(const struct model_classifier *m, struct nn_params *ps, const struct batch *bt,
		     double *loss)
{
	int64_t shape[2] = { B, N };
	struct tensor *ti = tensor_from_data(TENSOR_I32, TENSOR_CPU, 2, shape, bt->ids);
	struct tensor *tm = tensor_from_data(TENSOR_I32, TENSOR_CPU, 2, shape, bt->mask);
	struct tensor *tl = tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, shape, bt->labels);
	if (nn_params_zero_grad(ps) < 0 || !ti || !tm || !tl)
		return -1;
	struct tensor *l = nn_cross_entropy(model_classifier_forward(m, ti, tm), tl, -1, 0.0);
	if (!l)
		return -1;
	*loss = tensor_get(l, NULL);
	if (ag_backward(l, NULL) < 0)
		return -1;
	return nn_clip_grad_norm(ps, CLIP) < 0 ? -1 : 0;
}

/* The gradients of ps saved under the parameters' names (zeros where none). */
static int save_grads(const char *path, const struct nn_params *ps)
{
	struct nn_params g;
	int rc = nn_params_init(&g, TENSOR_F32, TENSOR_CPU, 0);
	for (int i = 0; rc == 0 && i < ps->n; i++) {
		const struct tensor *v = ps->items[i].value;
		struct tensor *t = nn_param_new(&g, ps->items[i].name, v->ndim, v->shape, false);
		rc = !t ? -1 : v->grad ? tensor_copy_(t, v->grad) : 0;
	}
	if (rc == 0)
		rc = nn_checkpoint_save(path, &g, NULL, NULL, 0);
	nn_params_free(&g);
	return rc;
}

static int write_json(const char *path, const struct batch *bt, double loss)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fprintf(f, "{\"shape\": [%d, %d], \"ids\": [", B, N);
	for (int j = 0; j < B * N; j++)
		fprintf(f, "%s%d", j ? ", " : "", bt->ids[j]);
	fprintf(f, "],\n\"mask\": [");
	for (int j = 0; j < B * N; j++)
		fprintf(f, "%s%d", j ? ", " : "", bt->mask[j]);
	fprintf(f, "],\n\"labels\": [");
	for (int j = 0; j < B; j++)
		fprintf(f, "%s%lld", j ? ", " : "", (long long)bt->labels[j]);
	fprintf(f, "],\n\"loss\": %.9g, \"clip\": %g,\n", loss, CLIP);
	fprintf(f,
		"\"schedule\": {\"kind\": \"cosine\", \"base_lr\": %.17g, \"min_lr\": %.17g, "
		"\"warmup_ratio\": %.17g, \"total\": %d}}\n",
		BASE_LR, MIN_LR, WARMUP, TOTAL);
	return fclose(f) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	if (argc != 4 || atoll(argv[1]) < 0 || atoll(argv[1]) >= TOTAL) {
		fprintf(stderr, "usage: %s STEPS (0..%d) DECAY_ALL (0|1) OUT_DIR\n", argv[0],
			TOTAL - 1);
		return 2;
	}
	int64_t steps = atoll(argv[1]);
	struct model_config c;
	if (model_config_preset(&c, "LC", 101, N) < 0)
		return fail("preset");
	c.dim = 16, c.heads = 2, c.ff_hidden = 32, c.head_hidden = 8, c.num_classes = 3;
	c.k_first = c.k_last = 4;
	c.dropout = c.attn_dropout = 0;
	c.position_kernel = 3;
	c.pooling = MODEL_POOL_ATTENTION;
	c.seed = 7;
	struct nn_params ps;
	struct model_classifier m;
	struct nn_adamw o;
	struct nn_schedule s;
	char *json = NULL;
	if (model_config_resolve(&c) < 0 ||
	    nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, c.seed) < 0 ||
	    model_classifier_init(&m, &ps, &c) < 0 || nn_params_pack(&ps) < 0 ||
	    nn_adamw_init(&o, &ps, BASE_LR, 0.9, 0.98, 1e-6, 0.1) < 0 ||
	    nn_schedule_init(&s, NN_SCHEDULE_COSINE, BASE_LR, MIN_LR, -1, WARMUP, TOTAL) < 0 ||
	    !(json = model_config_to_json(&m.enc.cfg)))
		return fail("init");
	o.decay_all = atoll(argv[2]) != 0;
	char path[4096];
	struct batch bt;
	double loss = 0;
	for (int64_t i = 0; i <= steps; i++) {
		if (i == steps) { /* the state PyTorch continues from */
			snprintf(path, sizeof path, "%s/before.safetensors", argv[3]);
			if (nn_checkpoint_save(path, &ps, &o, json, steps) < 0)
				return fail(path);
		}
		make_batch(&bt);
		tensor_scope_begin();
		if (gradients(&m, &ps, &bt, &loss) < 0)
			return fail("training step");
		o.lr = nn_schedule_lr(&s, i);
		if (i == steps) { /* the step PyTorch repeats */
			snprintf(path, sizeof path, "%s/grads.safetensors", argv[3]);
			if (save_grads(path, &ps) < 0)
				return fail(path);
		}
		if (nn_adamw_step(&o) < 0)
			return fail("optimizer step");
		tensor_scope_end();
	}
	snprintf(path, sizeof path, "%s/after.safetensors", argv[3]);
	if (nn_checkpoint_save(path, &ps, &o, json, steps + 1) < 0)
		return fail(path);
	snprintf(path, sizeof path, "%s/batch.json", argv[3]);
	if (write_json(path, &bt, loss) < 0)
		return fail(path);
	free(json);
	nn_adamw_free(&o);
	model_classifier_free(&m);
	nn_params_free(&ps);
	return 0;
}
