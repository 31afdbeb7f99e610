/* Out of memory at every allocation: a training step of each model, an MLM
 * step and no-grad inference (in a scope and with none open), each run once
 * per tensor allocation it makes with that allocation failing
 * (tensor_mem_inject_failure). A run must come back with an out-of-memory
 * error, leaving no tensor behind (live bytes as before; LeakSanitizer checks
 * the rest in CI) and the parameters, AdamW's moments and step unchanged (the
 * dropout stream may have moved), or succeed with exactly the result of a
 * clean run: never a crash, never a wrong result. The same for the library's
 * own buffers when saving and loading a checkpoint, loading a vocabulary and
 * tokenizing with it, and reading, splitting and batching a dataset: an error
 * changes neither the parameters, nor the file on disk, nor the output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models_common.h"
#include "text.h"
#include "text_data_common.h"

enum { B = 4, T = 16, VOCAB = 40 };

struct fixture {
	struct model_config c;
	struct nn_params ps;
	struct model_classifier cls;
	struct model_mlm mlm;
	struct nn_adamw opt;
	struct tensor *ids, *mask, *labels;
};

static void config(struct model_config *c, const char *preset)
{
	ck_assert_int_eq(model_config_preset(c, preset, VOCAB, T), TENSOR_OK);
	c->dim = 16;
	c->heads = 2;
	c->ff_hidden = 32;
	c->k_first = c->k_last = 4;
	c->dropout = c->attn_dropout = 0.1;
	c->num_classes = 2;
}

/* Heap inputs and a model: classifier (mlm false) or MLM. */
static void setup(struct fixture *f, const char *preset, bool mlm)
{
	memset(f, 0, sizeof *f);
	config(&f->c, preset);
	ck_assert_int_eq(nn_params_init(&f->ps, TENSOR_F32, TENSOR_CPU, 3), TENSOR_OK);
	if (mlm)
		ck_assert_int_eq(model_mlm_init(&f->mlm, &f->ps, &f->c), TENSOR_OK);
	else
		ck_assert_int_eq(model_classifier_init(&f->cls, &f->ps, &f->c), TENSOR_OK);
	ck_assert_int_eq(nn_params_pack(&f->ps), TENSOR_OK);
	ck_assert_int_eq(nn_adamw_init(&f->opt, &f->ps, 1e-3, 0.9, 0.999, 1e-8, 0.01), TENSOR_OK);
	const int64_t len[B] = { T, T - 3, 9, 5 };
	int64_t lab[B] = { 0, 1, 1, 0 }, tok[B * T];
	tensor_heap_begin();
	f->ids = rand_ids(B, T, VOCAB, 7);
	f->mask = prefix_mask(B, T, len);
	for (int i = 0; i < B * T; i++) /* MLM labels: every third token, else ignored */
		tok[i] = i % 3 == 0 ? 1 + i % (VOCAB - 1) : -100;
	f->labels = mlm ? tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ B * T }, tok)
			: tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ B }, lab);
	tensor_heap_end();
	ck_assert(f->ids && f->mask && f->labels);
}

static void teardown(struct fixture *f, bool mlm)
{
	nn_adamw_free(&f->opt);
	if (mlm)
		model_mlm_free(&f->mlm);
	else
		model_classifier_free(&f->cls);
	drop_params(&f->ps);
	tensor_free(f->ids);
	tensor_free(f->mask);
	tensor_free(f->labels);
}

/* What an op may change: the parameters, AdamW's moments and step, the
 * dropout stream. Heap copies. */
struct state {
	struct tensor *flat, *m, *v;
	int64_t step;
	uint64_t rng;
};

static struct state save_state(const struct fixture *f)
{
	tensor_heap_begin();
	struct state s = { tensor_clone(f->ps.flat), tensor_clone(f->opt.flat_m),
			   tensor_clone(f->opt.flat_v), f->opt.step, f->ps.rng_counter };
	tensor_heap_end();
	ck_assert(s.flat && s.m && s.v);
	return s;
}

static void restore_state(struct fixture *f, const struct state *s)
{
	ck_assert_int_eq(tensor_copy_(f->ps.flat, s->flat), TENSOR_OK);
	ck_assert_int_eq(tensor_copy_(f->opt.flat_m, s->m), TENSOR_OK);
	ck_assert_int_eq(tensor_copy_(f->opt.flat_v, s->v), TENSOR_OK);
	f->opt.step = s->step;
	f->ps.rng_counter = s->rng;
}

static void assert_state(const char *what, const struct fixture *f, const struct state *s)
{
	tu_assert_same(f->ps.flat, s->flat, 0);
	tu_assert_same(f->opt.flat_m, s->m, 0);
	tu_assert_same(f->opt.flat_v, s->v, 0);
	ck_assert_msg(f->opt.step == s->step, "%s: the optimizer's step moved", what);
}

static void free_state(struct state *s)
{
	tensor_free(s->flat);
	tensor_free(s->m);
	tensor_free(s->v);
}

/* The armed failure (-1: none) and the allocations counted so far in this
 * run: the test's own copies of results pause the count. */
static int64_t armed = -1, counted;

static void arm(int64_t i)
{
	armed = i;
	counted = 0;
	tensor_mem_inject_failure(i);
}

/* Disarm; whether the failure fired. */
static bool disarm(void)
{
	counted += tensor_mem_inject_failure(-1);
	bool fired = armed >= 0 && counted > armed;
	armed = -1;
	return fired;
}

/* The ops: each runs in a scope of its own (inference optionally in none)
 * and returns a status; *out gets a heap tensor to compare with the clean
 * run (the updated parameters, or the logits), copied outside the count. */
static struct tensor *heap_clone(const struct tensor *t)
{
	int64_t at = armed;
	counted += tensor_mem_inject_failure(-1);
	tensor_heap_begin();
	struct tensor *c = t ? tensor_clone(t) : NULL;
	tensor_heap_end();
	ck_assert(!t || c);
	tensor_mem_inject_failure(at >= 0 && at >= counted ? at - counted : -1);
	return c;
}

static int step_end(struct fixture *f, struct tensor *loss, int rc, struct tensor **out)
{
	if (rc == TENSOR_OK)
		rc = ag_backward(loss, NULL);
	if (rc == TENSOR_OK)
		rc = nn_adamw_step(&f->opt);
	ag_tape_reset();
	tensor_scope_end();
	*out = rc == TENSOR_OK ? heap_clone(f->ps.flat) : NULL;
	return rc == TENSOR_OK && !*out ? tensor_last_status() : rc;
}

static int train_op(struct fixture *f, int arg, struct tensor **out)
{
	(void)arg;
	tensor_scope_begin();
	int rc = nn_params_zero_grad(&f->ps);
	struct tensor *loss =
	    nn_cross_entropy(model_classifier_forward(&f->cls, f->ids, f->mask), f->labels, -1, 0);
	return step_end(f, loss, rc, out);
}

static int mlm_op(struct fixture *f, int arg, struct tensor **out)
{
	(void)arg;
	tensor_scope_begin();
	int rc = nn_params_zero_grad(&f->ps);
	struct tensor *logits = model_mlm_forward(&f->mlm, f->ids, f->mask);
	struct tensor *loss = nn_cross_entropy(ag_reshape(logits, 2, (int64_t[]){ B * T, VOCAB }),
					       f->labels, -100, 0);
	return step_end(f, loss, rc, out);
}

/* No-grad inference in eval mode, in a scope (scoped) or with none open (the
 * suite has no fixture scope): a heap result. */
static int infer_op(struct fixture *f, int scoped, struct tensor **out)
{
	nn_params_train(&f->ps, false);
	ag_no_grad_begin();
	if (scoped)
		tensor_scope_begin();
	struct tensor *y = model_classifier_forward(&f->cls, f->ids, f->mask);
	*out = scoped && y ? heap_clone(y) : y;
	if (scoped)
		tensor_scope_end();
	ag_no_grad_end();
	nn_params_train(&f->ps, true);
	return *out ? TENSOR_OK : tensor_last_status();
}

/* Run op once cleanly, then with its i-th tensor allocation failing for i =
 * 0, 1, ... until a run makes no more than i allocations. Each run starts
 * from the same state. A run must either fail with out of memory, leaving
 * the live bytes and the state as they were, or succeed with the clean
 * run's result, to the bit (a failure in work it did not need). */
static void every_allocation_fails(const char *what, struct fixture *f,
				   int (*op)(struct fixture *, int, struct tensor **), int arg)
{
	struct state s = save_state(f);
	struct tensor *want;
	ck_assert_msg(op(f, arg, &want) == TENSOR_OK, "%s: %s", what, tensor_last_error());
	size_t live = tensor_mem_stats(TENSOR_CPU).live_bytes;
	int64_t i, failed = 0;
	for (i = 0;; i++) {
		restore_state(f, &s);
		struct tensor *got = NULL;
		arm(i);
		int rc = op(f, arg, &got);
		bool fired = disarm();
		if (rc == TENSOR_OK) {
			tensor_clear_error();
			tu_assert_same(got, want, 0);
			tensor_free(got);
			if (!fired)
				break;
			continue;
		}
		ck_assert_msg(fired, "%s: %s", what, tensor_last_error());
		ck_assert_msg(tensor_last_status() == TENSOR_ERR_NOMEM,
			      "%s: allocation %lld failed; status %d: %s", what, (long long)i,
			      tensor_last_status(), tensor_last_error());
		tensor_clear_error();
		ck_assert_msg(tensor_mem_stats(TENSOR_CPU).live_bytes == live,
			      "%s: allocation %lld failed; %zu bytes live, %zu before", what,
			      (long long)i, tensor_mem_stats(TENSOR_CPU).live_bytes, live);
		assert_state(what, f, &s);
		failed++;
	}
	ck_assert_msg(failed > 10, "%s: %lld of %lld allocations failed it", what,
		      (long long)failed, (long long)i);
	printf("%s: %lld allocations, each failing in turn: %lld errors, the rest the "
	       "clean result\n",
	       what, (long long)i, (long long)failed);
	tensor_free(want);
	free_state(&s);
}

static const char *presets[] = { "linformer:2", "transformer:2", "conv-linformer:2" };

START_TEST(test_train_step)
{
	struct fixture f;
	setup(&f, presets[_i], false);
	struct tensor *first;
	ck_assert_int_eq(train_op(&f, 0, &first), TENSOR_OK); /* AdamW's state exists */
	tensor_free(first);
	char what[64];
	snprintf(what, sizeof what, "%s training step", presets[_i]);
	every_allocation_fails(what, &f, train_op, 0);
	teardown(&f, false);
}
END_TEST

START_TEST(test_mlm_step)
{
	struct fixture f;
	setup(&f, "linformer:2", true);
	every_allocation_fails("linformer MLM step", &f, mlm_op, 0);
	teardown(&f, true);
}
END_TEST

START_TEST(test_inference)
{
	struct fixture f;
	setup(&f, presets[_i], false);
	char what[64];
	snprintf(what, sizeof what, "%s no-grad forward in a scope", presets[_i]);
	every_allocation_fails(what, &f, infer_op, 1);
	snprintf(what, sizeof what, "%s no-grad forward, no scope", presets[_i]);
	every_allocation_fails(what, &f, infer_op, 0);
	teardown(&f, false);
}
END_TEST

/* ---- the library's own buffers -------------------------------------------------------- */

/* The whole file; NULL if there is none. */
static char *slurp(const char *path, long *n)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return NULL;
	ck_assert(fseek(fp, 0, SEEK_END) == 0);
	*n = ftell(fp);
	rewind(fp);
	char *b = malloc((size_t)*n + 1);
	ck_assert(b && fread(b, 1, (size_t)*n, fp) == (size_t)*n);
	fclose(fp);
	return b;
}

static void assert_file(const char *path, const char *want, long n)
{
	long got_n = 0;
	char *got = slurp(path, &got_n);
	ck_assert_msg(got && got_n == n && memcmp(got, want, (size_t)n) == 0,
		      "%s changed (%ld bytes, %ld before)", path, got_n, n);
	free(got);
}

/* nn_checkpoint_save over an older checkpoint and nn_checkpoint_load into a
 * moved state, with each allocation failing in turn: a failed save leaves the
 * old file as it was (and no temporary), a failed load leaves the state. */
START_TEST(test_checkpoint)
{
	struct fixture f;
	setup(&f, "linformer:2", false);
	struct tensor *out;
	char old[] = "/tmp/cformer-oom-old-XXXXXX", path[] = "/tmp/cformer-oom-XXXXXX", tmp[64];
	ck_assert(close(mkstemp(old)) == 0 && close(mkstemp(path)) == 0);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	ck_assert_int_eq(nn_checkpoint_save(old, &f.ps, &f.opt, "{}", 1), TENSOR_OK);
	ck_assert_int_eq(train_op(&f, 0, &out), TENSOR_OK);
	tensor_free(out);
	ck_assert_int_eq(nn_checkpoint_save(path, &f.ps, &f.opt, "{}", 2), TENSOR_OK);
	long want_n, old_n;
	char *want = slurp(path, &want_n), *before = slurp(old, &old_n);
	unlink(old);
	struct state saved = save_state(&f);
	int64_t i, failed = 0;
	for (i = 0;; i++) { /* save over the older file */
		FILE *fp = fopen(path, "wb");
		ck_assert(fp && fwrite(before, 1, (size_t)old_n, fp) == (size_t)old_n);
		fclose(fp);
		arm(i);
		int rc = nn_checkpoint_save(path, &f.ps, &f.opt, "{}", 2);
		bool fired = disarm();
		ck_assert(access(tmp, F_OK) != 0);
		if (rc == TENSOR_OK) {
			assert_file(path, want, want_n);
			if (!fired)
				break;
			continue;
		}
		ck_assert_msg(fired && tensor_last_status() == TENSOR_ERR_NOMEM, "save %lld: %s",
			      (long long)i, tensor_last_error());
		tensor_clear_error();
		assert_file(path, before, old_n);
		failed++;
	}
	ck_assert_msg(failed >= 2, "save: %lld of %lld allocations failed it", (long long)failed,
		      (long long)i);
	printf("checkpoint save: %lld allocations, each failing in turn: %lld errors\n",
	       (long long)i, (long long)failed);
	ck_assert_int_eq(train_op(&f, 0, &out), TENSOR_OK); /* a state that differs */
	tensor_free(out);
	struct state moved = save_state(&f);
	for (i = 0, failed = 0;; i++) { /* load the saved state back */
		restore_state(&f, &moved);
		int64_t step = -1;
		arm(i);
		int rc = nn_checkpoint_load(path, &f.ps, &f.opt, &step);
		bool fired = disarm();
		if (rc == TENSOR_OK) {
			ck_assert(step == 2);
			assert_state("load", &f, &saved);
			if (!fired)
				break;
			continue;
		}
		ck_assert_msg(fired && tensor_last_status() == TENSOR_ERR_NOMEM, "load %lld: %s",
			      (long long)i, tensor_last_error());
		tensor_clear_error();
		assert_state("failed load", &f, &moved);
		failed++;
	}
	ck_assert_msg(failed >= 3, "load: %lld of %lld allocations failed it", (long long)failed,
		      (long long)i);
	printf("checkpoint load: %lld allocations, each failing in turn: %lld errors\n",
	       (long long)i, (long long)failed);
	unlink(path);
	free(want);
	free(before);
	free_state(&saved);
	free_state(&moved);
	teardown(&f, false);
}
END_TEST

/* text_wordpiece_load, then text_tokenize, with each allocation failing in
 * turn: a failed load leaves the tokenizer struct as it was; a failed
 * tokenize returns its buffer to free; a success gives the clean ids. */
START_TEST(test_vocabulary)
{
	char path[] = "/tmp/cformer-oom-vocab-XXXXXX";
	FILE *fp = fdopen(mkstemp(path), "w");
	ck_assert(fp != NULL);
	fputs("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nfilm\n##s\n", fp);
	for (int w = 0; w < 300; w++) /* enough lines for the token array to grow */
		fprintf(fp, "w%d\n", w);
	fclose(fp);
	struct text_tokenizer clean, tok;
	ck_assert_int_eq(text_wordpiece_load(&clean, path), TENSOR_OK);
	const char *text = "The films w7 w299 the unknownword W12 film";
	int32_t *want = NULL;
	size_t want_n = 0;
	ck_assert_int_eq(text_tokenize(&clean, text, strlen(text), &want, &want_n), TENSOR_OK);
	int64_t i, failed = 0;
	for (i = 0;; i++) {
		memset(&tok, 0xab, sizeof tok);
		struct text_tokenizer untouched = tok;
		arm(i);
		int rc = text_wordpiece_load(&tok, path);
		bool fired = disarm();
		if (rc == TENSOR_OK) {
			ck_assert_int_eq(tok.vocab_size, 308);
			text_tokenizer_free(&tok);
			if (!fired)
				break;
			continue;
		}
		ck_assert_msg(fired && tensor_last_status() == TENSOR_ERR_NOMEM, "load %lld: %s",
			      (long long)i, tensor_last_error());
		tensor_clear_error();
		ck_assert(memcmp(&tok, &untouched, sizeof tok) == 0);
		failed++;
	}
	ck_assert_msg(failed >= 3, "%lld of %lld allocations failed the load", (long long)failed,
		      (long long)i);
	int64_t loads = i, load_failed = failed;
	for (i = 0, failed = 0;; i++) {
		int32_t *ids = NULL;
		size_t n = 0;
		arm(i);
		int rc = text_tokenize(&clean, text, strlen(text), &ids, &n);
		bool fired = disarm();
		if (rc == TENSOR_OK) {
			ck_assert(n == want_n && memcmp(ids, want, n * sizeof *ids) == 0);
			free(ids);
			if (!fired)
				break;
			continue;
		}
		ck_assert_msg(fired && tensor_last_status() == TENSOR_ERR_NOMEM, "tokenize: %s",
			      tensor_last_error());
		tensor_clear_error();
		free(ids);
		failed++;
	}
	ck_assert(failed >= 1);
	printf("vocabulary load: %lld allocations (%lld errors); tokenize: %lld (%lld errors)\n",
	       (long long)loads, (long long)load_failed, (long long)i, (long long)failed);
	free(want);
	text_tokenizer_free(&clean);
	unlink(path);
}
END_TEST

/* Reading the tiny aclImdb fixture, splitting it by movie and batching it,
 * with each allocation failing in turn: each step fails with out of memory
 * and leaves its output as it was, or gives the clean result. */
START_TEST(test_dataset)
{
	struct text_tokenizer tok;
	ck_assert_int_eq(text_byte_init(&tok), TENSOR_OK);
	struct text_dataset clean, ds, tr, va;
	ck_assert_int_eq(text_imdb_load(data_path("imdb_tiny"), "train", &clean), TENSOR_OK);
	int64_t counts[3] = { 0 }, errors[3] = { 0 };
	for (int what = 0; what < 3; what++)
		for (int64_t i = 0;; i++) {
			memset(&ds, 0xab, sizeof ds);
			struct text_dataset untouched = ds;
			struct text_batcher b = { 0 };
			struct text_batch batch = { 0 };
			arm(i);
			int rc;
			if (what == 0)
				rc = text_imdb_load(data_path("imdb_tiny"), "train", &ds);
			else if (what == 1)
				rc = text_dataset_split_groups(&clean, 0.3, 5, &tr, &va);
			else if ((rc = text_batcher_init(&b, &clean, &tok, 64, 3, 1, true, true)) ==
				 0)
				rc = text_batcher_get(&b, 0, &batch);
			bool fired = disarm();
			if (rc == TENSOR_OK) {
				if (what == 0) {
					ck_assert(ds.n == clean.n &&
						  !strcmp(ds.items[ds.n - 1].text,
							  clean.items[clean.n - 1].text));
					text_dataset_free(&ds);
				} else if (what == 1) {
					ck_assert(tr.n + va.n == clean.n && va.n > 0);
					text_dataset_free(&tr);
					text_dataset_free(&va);
				} else {
					ck_assert(batch.size == 3 && batch.ids && batch.mask);
					tensor_free(batch.ids);
					tensor_free(batch.mask);
					tensor_free(batch.labels);
					text_batcher_free(&b);
				}
				if (!fired) {
					counts[what] = i;
					break;
				}
				continue;
			}
			ck_assert_msg(fired && tensor_last_status() == TENSOR_ERR_NOMEM,
				      "step %d, allocation %lld: %s", what, (long long)i,
				      tensor_last_error());
			tensor_clear_error();
			if (what == 0)
				ck_assert(memcmp(&ds, &untouched, sizeof ds) == 0);
			text_batcher_free(&b);
			errors[what]++;
		}
	for (int what = 0; what < 3; what++)
		ck_assert_msg(errors[what] >= 2, "step %d: %lld of %lld allocations failed it",
			      what, (long long)errors[what], (long long)counts[what]);
	printf("aclImdb fixture: load %lld allocations (%lld errors), split %lld (%lld), "
	       "batcher %lld (%lld)\n",
	       (long long)counts[0], (long long)errors[0], (long long)counts[1],
	       (long long)errors[1], (long long)counts[2], (long long)errors[2]);
	text_dataset_free(&clean);
	text_tokenizer_free(&tok);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("oom");
	TCase *tc = tcase_create("oom"); /* no fixture: no scope is open */
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_train_step, 0, 3);
	tcase_add_test(tc, test_mlm_step);
	tcase_add_loop_test(tc, test_inference, 0, 3);
	tcase_add_test(tc, test_checkpoint);
	tcase_add_test(tc, test_vocabulary);
	tcase_add_test(tc, test_dataset);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
