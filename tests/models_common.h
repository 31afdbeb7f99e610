/* Helpers shared by test_models.c, test_models_heads.c, test_models_config.c and
 * test_inference.c. */
#ifndef CFORMER_TESTS_MODELS_COMMON_H
#define CFORMER_TESTS_MODELS_COMMON_H

#include <stdlib.h>
#include <string.h>

#include "models.h"
#include "testutil.h"

/* The tiny model of the gradient checks: vocab 11, n 8, dim 8, 2 heads, k 4,
 * no dropout; preset is a named preset with a depth or a pattern. */
static inline struct model_config tiny(const char *preset)
{
	struct model_config c;
	ck_assert_msg(model_config_preset(&c, preset, 11, 8) == TENSOR_OK, "%s: %s", preset,
		      tensor_last_error());
	c.dim = 8;
	c.heads = 2;
	c.ff_hidden = 16;
	c.k_first = c.k_last = 4;
	c.dropout = c.attn_dropout = 0;
	c.num_classes = 3;
	c.head_hidden = 8;
	c.seed = 7;
	return c;
}

/* Field-by-field equality of two configs, every field of the config's table (the used part
 * of the arrays). */
static inline void assert_config_eq(const struct model_config *a, const struct model_config *b)
{
	ck_assert_msg(a->layers == b->layers && a->layers >= 0 && a->layers <= MODEL_MAX_LAYERS,
		      "field layers differs or is out of range");
	for (int i = 0; i < model_config_field_count(); i++) {
		const struct model_config_field *f = model_config_field(i);
		const char *pa = (const char *)a + f->offset, *pb = (const char *)b + f->offset;
		size_t used = f->size;
		if (f->kind == MODEL_FIELD_ATTENTION || f->kind == MODEL_FIELD_K)
			used = f->size / MODEL_MAX_LAYERS * (size_t)a->layers;
		if (f->kind == MODEL_FIELD_DOUBLE)
			ck_assert_msg(*(const double *)pa == *(const double *)pb,
				      "field %s differs", f->name);
		else
			ck_assert_msg(memcmp(pa, pb, used) == 0, "field %s differs", f->name);
	}
}

static inline struct tensor *ids_tensor(int64_t B, int64_t T, const int64_t *v)
{
	struct tensor *t = tensor_from_data(TENSOR_I64, TENSOR_CPU, 2, (int64_t[]){ B, T }, v);
	ck_assert(t != NULL);
	return t;
}

/* Random ids in [1, vocab) (0 is the padding id), seeded. */
static inline struct tensor *rand_ids(int64_t B, int64_t T, int64_t vocab, uint64_t seed)
{
	int64_t *v = malloc(sizeof *v * (size_t)(B * T));
	uint64_t s = seed * 2654435761u + 12345;
	for (int64_t i = 0; i < B * T; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		v[i] = 1 + (int64_t)((s >> 33) % (uint64_t)(vocab - 1));
	}
	struct tensor *t = ids_tensor(B, T, v);
	free(v);
	return t;
}

/* Mask [B,T] (i64) with len[b] real tokens at the start of row b. */
static inline struct tensor *prefix_mask(int64_t B, int64_t T, const int64_t *len)
{
	int64_t *v = calloc((size_t)(B * T), sizeof *v);
	for (int64_t b = 0; b < B; b++)
		for (int64_t t = 0; t < len[b] && t < T; t++)
			v[b * T + t] = 1;
	struct tensor *m = ids_tensor(B, T, v);
	free(v);
	return m;
}

/* A classifier of config c on the CPU, its parameters of dtype dt drawn with seed. */
static inline void make_classifier(struct model_classifier *m, struct nn_params *ps,
				   const struct model_config *c, enum tensor_dtype dt,
				   uint64_t seed)
{
	ck_assert_int_eq(nn_params_init(ps, dt, TENSOR_CPU, seed), TENSOR_OK);
	ck_assert_int_eq(model_classifier_init(m, ps, c), TENSOR_OK);
}

/* What a training step changes: the parameters, AdamW's moments and step,
 * the dropout stream. Heap copies (parameters packed, optimizer flat). */
struct train_state {
	struct tensor *flat, *m, *v;
	int64_t step;
	uint64_t rng;
};

static inline struct train_state train_state_save(const struct nn_params *ps,
						  const struct nn_adamw *opt)
{
	tensor_heap_begin();
	struct train_state s = { tensor_clone(ps->flat), tensor_clone(opt->flat_m),
				 tensor_clone(opt->flat_v), opt->step, ps->rng_counter };
	tensor_heap_end();
	ck_assert(s.flat && s.m && s.v);
	return s;
}

static inline void train_state_restore(struct nn_params *ps, struct nn_adamw *opt,
				       const struct train_state *s)
{
	ck_assert_int_eq(tensor_copy_(ps->flat, s->flat), TENSOR_OK);
	ck_assert_int_eq(tensor_copy_(opt->flat_m, s->m), TENSOR_OK);
	ck_assert_int_eq(tensor_copy_(opt->flat_v, s->v), TENSOR_OK);
	opt->step = s->step;
	ps->rng_counter = s->rng;
}

static inline void train_state_free(struct train_state *s)
{
	tensor_free(s->flat);
	tensor_free(s->m);
	tensor_free(s->v);
}

static inline void drop_params(struct nn_params *ps)
{
	ag_tape_reset();
	nn_params_free(ps);
}

#endif
