/* Out of memory at every allocation: a training step of each model, an MLM
 * step and no-grad inference in a scope (with none open it refuses before
 * allocating), each run once per tensor allocation it makes with that
 * allocation failing (tensor_mem_inject_failure). A run must come back with an out-of-memory
 * error, leaving no tensor behind (live bytes as before; LeakSanitizer checks
 * the rest in CI) and the parameters, AdamW's moments and step unchanged (the
 * dropout stream may have moved), or succeed with exactly the result of a
 * clean run: never a crash, never a wrong result. Building each model fails
 * the same way or builds the clean run's parameters; an SGD step alone fails
 * or updates as the clean run does. The same for the library's
 * own buffers when saving and loading a checkpoint, loading a vocabulary and
 * tokenizing with it, and reading, splitting and batching a dataset: an error
 * changes neither the parameters, nor the file on disk, nor the output. */
#include <glob.h>
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
	/* the Conv-Linformer carries a convolutional position encoding too */
	c->position_kernel = strcmp(preset, "conv-linformer:2") ? 0 : 3;
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

static void assert_state(const char *what, const struct fixture *f, const struct train_state *s)
{
	tu_assert_same(f->ps.flat, s->flat, 0);
	tu_assert_same(f->opt.flat_m, s->m, 0);
	tu_assert_same(f->opt.flat_v, s->v, 0);
	ck_assert_msg(f->opt.step == s->step, "%s: the optimizer's step moved", what);
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

/* The ops: each runs in a scope of its own and returns a status; *out gets a heap tensor to compare with the clean
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

/* No-grad inference in eval mode, in a scope: a heap result. */
static int infer_op(struct fixture *f, int arg, struct tensor **out)
{
	(void)arg;
	nn_params_train(&f->ps, false);
	ag_no_grad_begin();
	tensor_scope_begin();
	struct tensor *y = model_classifier_forward(&f->cls, f->ids, f->mask);
	*out = y ? heap_clone(y) : NULL;
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
	struct train_state s = train_state_save(&f->ps, &f->opt);
	struct tensor *want;
	ck_assert_msg(op(f, arg, &want) == TENSOR_OK, "%s: %s", what, tensor_last_error());
	size_t live = tensor_mem_stats(TENSOR_CPU).live_bytes;
	int64_t i, failed = 0;
	for (i = 0;; i++) {
		train_state_restore(&f->ps, &f->opt, &s);
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
	train_state_free(&s);
}

static const char *presets[] = { "linformer:2", "transformer:2", "conv-linformer:2" };

/* Parameters, a model (classifier or MLM), packing and AdamW, as setup()
 * builds them, stopping at the first error; free with teardown(). */
static int build(struct fixture *f, const char *preset, bool mlm)
{
	memset(f, 0, sizeof *f);
	config(&f->c, preset);
	int rc = nn_params_init(&f->ps, TENSOR_F32, TENSOR_CPU, 3);
	if (rc == TENSOR_OK)
		rc = mlm ? model_mlm_init(&f->mlm, &f->ps, &f->c)
			 : model_classifier_init(&f->cls, &f->ps, &f->c);
	if (rc == TENSOR_OK)
		rc = nn_params_pack(&f->ps);
	if (rc == TENSOR_OK)
		rc = nn_adamw_init(&f->opt, &f->ps, 1e-3, 0.9, 0.999, 1e-8, 0.01);
	return rc;
}

/* Building each model with its i-th allocation failing, i = 0, 1, ...: a
 * run fails with out of memory and leaves nothing live, or builds exactly
 * the clean run's parameters. */
START_TEST(test_model_init)
{
	for (int mlm = 0; mlm < 2; mlm++) {
		struct fixture f;
		ck_assert_int_eq(build(&f, presets[_i], mlm), TENSOR_OK);
		tensor_heap_begin();
		struct tensor *want = tensor_clone(f.ps.flat);
		tensor_heap_end();
		teardown(&f, mlm);
		size_t live = tensor_mem_stats(TENSOR_CPU).live_bytes;
		int64_t i, failed = 0;
		for (i = 0;; i++) {
			arm(i);
			int rc = build(&f, presets[_i], mlm);
			bool fired = disarm();
			if (rc == TENSOR_OK)
				tu_assert_same(f.ps.flat, want, 0);
			else
				ck_assert_msg(fired && tensor_last_status() == TENSOR_ERR_NOMEM,
					      "%s: allocation %lld: %s", presets[_i], (long long)i,
					      tensor_last_error());
			tensor_clear_error();
			teardown(&f, mlm);
			ck_assert_msg(tensor_mem_stats(TENSOR_CPU).live_bytes == live,
				      "%s: allocation %lld failed; %zu bytes live, %zu before",
				      presets[_i], (long long)i,
				      tensor_mem_stats(TENSOR_CPU).live_bytes, live);
			failed += rc != TENSOR_OK;
			if (!fired)
				break;
		}
		ck_assert_msg(failed > 10, "%s: %lld of %lld allocations failed it", presets[_i],
			      (long long)failed, (long long)i);
		printf("%s %s init: %lld allocations, each failing in turn: %lld errors\n",
		       presets[_i], mlm ? "MLM" : "classifier", (long long)i, (long long)failed);
		tensor_free(want);
	}
}
END_TEST

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

/* The same with lazy embedding tables: AdamW updates only their rows with a
 * gradient, runs of rows apart (the toy vocabulary leaves gaps). */
START_TEST(test_train_step_lazy)
{
	struct fixture f;
	setup(&f, "linformer:2", false);
	ck_assert_int_eq(nn_params_set_lazy(&f.ps, "embed.", true), 1);
	ck_assert_int_eq(nn_params_set_lazy(&f.ps, "pos.", true), 1);
	struct tensor *first;
	ck_assert_int_eq(train_op(&f, 0, &first), TENSOR_OK);
	tensor_free(first);
	every_allocation_fails("linformer:2 training step, lazy embeddings", &f, train_op, 0);
	teardown(&f, false);
}
END_TEST

static struct nn_sgd sgd_o; /* test_sgd_step's: no momentum, so no state but the parameters */

static int sgd_op(struct fixture *f, int arg, struct tensor **out)
{
	(void)arg;
	int rc = nn_sgd_step(&sgd_o);
	*out = rc == TENSOR_OK ? heap_clone(f->ps.flat) : NULL;
	return rc == TENSOR_OK && !*out ? tensor_last_status() : rc;
}

/* SGD's step alone on the gradients of one batch, with a lazy embedding table. */
START_TEST(test_sgd_step)
{
	struct fixture f;
	setup(&f, "linformer:2", false);
	ck_assert_int_eq(nn_params_set_lazy(&f.ps, "embed.", true), 1);
	ck_assert_int_eq(nn_sgd_init(&sgd_o, &f.ps, 0.1, 0, 0.01), TENSOR_OK);
	tensor_scope_begin();
	ck_assert_int_eq(nn_params_zero_grad(&f.ps), TENSOR_OK);
	struct tensor *loss =
	    nn_cross_entropy(model_classifier_forward(&f.cls, f.ids, f.mask), f.labels, -1, 0);
	ck_assert_int_eq(ag_backward(loss, NULL), TENSOR_OK);
	ag_tape_reset();
	tensor_scope_end();
	every_allocation_fails("linformer:2 SGD step, lazy embeddings", &f, sgd_op, 0);
	nn_sgd_free(&sgd_o);
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
	every_allocation_fails(what, &f, infer_op, 0);
	/* with no scope open (the suite has no fixture scope) the forward
	 * refuses before its first allocation */
	ag_no_grad_begin();
	tensor_mem_inject_failure(-1);
	tu_assert_error(!model_classifier_forward(&f.cls, f.ids, f.mask), TENSOR_ERR_STATE,
			"model_classifier_forward", "outside a scope");
	ck_assert_int_eq(tensor_mem_inject_failure(-1), 0);
	ag_no_grad_end();
	teardown(&f, false);
}
END_TEST

/* ---- the library's own buffers -------------------------------------------------------- */

/* Runs reset(c) (uncounted), then op(c) with its i-th allocation failing, for
 * i = 0, 1, ... until a run makes no more than i. A failed run must report out
 * of memory; check(c, rc) then verifies the outcome of each run (and frees
 * what a success made). Returns the number of failed runs. */
static int64_t fail_each(const char *what, void *c, void (*reset)(void *), int (*op)(void *),
			 void (*check)(void *, int))
{
	int64_t i, errors = 0;
	for (i = 0;; i++) {
		reset(c);
		arm(i);
		int rc = op(c);
		bool fired = disarm();
		if (rc != TENSOR_OK) {
			ck_assert_msg(fired && tensor_last_status() == TENSOR_ERR_NOMEM,
				      "%s, allocation %lld: %s", what, (long long)i,
				      tensor_last_error());
			tensor_clear_error();
			errors++;
		}
		check(c, rc);
		if (rc == TENSOR_OK && !fired)
			break;
	}
	ck_assert_msg(errors >= 1, "%s: none of %lld allocations failed it", what, (long long)i);
	printf("%s: %lld allocations, each failing in turn: %lld errors, the rest the clean "
	       "result\n",
	       what, (long long)i, (long long)errors);
	return errors;
}

/* nn_anchor_init: the copies of the Linformer projections, or nothing. */
struct anchor {
	struct fixture f;
	struct nn_anchor a;
};

static void anchor_reset(void *p)
{
	((struct anchor *)p)->a = (struct nn_anchor){ .n = -1 };
}

static int anchor_op(void *p)
{
	struct anchor *c = p;
	return nn_anchor_init(&c->a, &c->f.ps, "layers.*.attn.[EF].weight");
}

static void anchor_check(void *p, int rc)
{
	struct anchor *c = p;
	ck_assert_int_eq(c->a.n, rc == TENSOR_OK ? 4 : 0);
	ck_assert(rc == TENSOR_OK || (!c->a.index && !c->a.value));
	nn_anchor_free(&c->a);
}

START_TEST(test_anchor)
{
	struct anchor c;
	setup(&c.f, "linformer:2", false);
	ck_assert(fail_each("anchor", &c, anchor_reset, anchor_op, anchor_check) >= 4);
	teardown(&c.f, false);
}
END_TEST

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

/* Checkpoints: the saved file's bytes (want: step 2, old: step 1, before
 * training) and the states that go with them. */
struct ckpt {
	struct fixture f;
	struct nn_ema ema;
	char path[32], tmp[40]; /* tmp: the pattern of the temporary files */
	char *want, *old;
	long want_n, old_n;
	struct train_state saved, moved;
	int64_t step;
};

static void save_reset(void *p) /* the older file in place */
{
	struct ckpt *c = p;
	FILE *fp = fopen(c->path, "wb");
	ck_assert(fp && fwrite(c->old, 1, (size_t)c->old_n, fp) == (size_t)c->old_n);
	fclose(fp);
}

static int save_op(void *p)
{
	struct ckpt *c = p;
	return nn_checkpoint_save_run(c->path, &c->f.ps, &c->f.opt, &c->ema, "{}", "{\"s\":2}", 2);
}

static void save_check(void *p, int rc) /* the new file, or the old one, and no temporary */
{
	struct ckpt *c = p;
	glob_t g;
	ck_assert_int_eq(glob(c->tmp, 0, NULL, &g), GLOB_NOMATCH);
	if (rc == TENSOR_OK)
		assert_file(c->path, c->want, c->want_n);
	else
		assert_file(c->path, c->old, c->old_n);
}

static void load_reset(void *p)
{
	struct ckpt *c = p;
	train_state_restore(&c->f.ps, &c->f.opt, &c->moved);
	c->step = -1;
}

static int load_op(void *p)
{
	struct ckpt *c = p;
	char *run = NULL;
	int rc = nn_checkpoint_load_run(c->path, &c->f.ps, &c->f.opt, &c->ema, &run, &c->step);
	ck_assert(rc != TENSOR_OK || (run && !strcmp(run, "{\"s\":2}")));
	ck_assert(rc == TENSOR_OK || !run);
	free(run);
	return rc;
}

static void load_check(void *p, int rc) /* the saved state, or the one before */
{
	struct ckpt *c = p;
	ck_assert(rc != TENSOR_OK || c->step == 2);
	assert_state("checkpoint load", &c->f, rc == TENSOR_OK ? &c->saved : &c->moved);
}

/* nn_checkpoint_save over an older checkpoint, nn_checkpoint_load into a
 * moved state. */
START_TEST(test_checkpoint)
{
	struct ckpt c = { .path = "/tmp/cformer-oom-XXXXXX" };
	setup(&c.f, "linformer:2", false);
	ck_assert_int_eq(nn_ema_init(&c.ema, &c.f.ps, 0.5), TENSOR_OK);
	ck_assert(close(mkstemp(c.path)) == 0);
	snprintf(c.tmp, sizeof c.tmp, "%s.tmp*", c.path);
	struct tensor *out;
	ck_assert_int_eq(nn_checkpoint_save(c.path, &c.f.ps, &c.f.opt, "{}", 1), TENSOR_OK);
	c.old = slurp(c.path, &c.old_n);
	ck_assert_int_eq(train_op(&c.f, 0, &out), TENSOR_OK);
	tensor_free(out);
	ck_assert_int_eq(save_op(&c), TENSOR_OK);
	c.want = slurp(c.path, &c.want_n);
	c.saved = train_state_save(&c.f.ps, &c.f.opt);
	fail_each("checkpoint save", &c, save_reset, save_op, save_check);
	ck_assert_int_eq(train_op(&c.f, 0, &out), TENSOR_OK); /* a state that differs */
	tensor_free(out);
	c.moved = train_state_save(&c.f.ps, &c.f.opt);
	fail_each("checkpoint load", &c, load_reset, load_op, load_check);
	unlink(c.path);
	free(c.want);
	free(c.old);
	train_state_free(&c.saved);
	train_state_free(&c.moved);
	nn_ema_free(&c.ema);
	teardown(&c.f, false);
}
END_TEST

/* Text: a vocabulary, a tokenizer loaded from it and one being loaded, a text
 * and its clean ids, the aclImdb fixture and what is made from it. */
struct texts {
	char path[40];
	struct text_tokenizer clean, tok, untouched, bytes;
	const struct text_tokenizer *use; /* to tokenize with */
	const char *text;
	int32_t *want, *ids;
	size_t want_n, n;
	struct text_dataset imdb, ds, untouched_ds, tr, va;
	const struct text_dataset *ref; /* what ds must equal after a success */
	const char *lines;		/* text_lines_load's file or directory */
	struct text_batcher b;
	struct text_batch batch;
	struct tensor *masked, *targets, *want_masked; /* text_mlm_mask's */
};

static void text_reset(void *p)
{
	struct texts *t = p;
	memset(&t->tok, 0xab, sizeof t->tok);
	t->untouched = t->tok;
	memset(&t->ds, 0xab, sizeof t->ds);
	t->untouched_ds = t->ds;
	t->ids = NULL;
	t->n = 0;
	memset(&t->b, 0, sizeof t->b);
}

static int vocab_op(void *p)
{
	struct texts *t = p;
	return text_wordpiece_load(&t->tok, t->path);
}

static void vocab_check(void *p, int rc) /* a loaded vocabulary, or the struct untouched */
{
	struct texts *t = p;
	if (rc == TENSOR_OK) {
		ck_assert_int_eq(t->tok.vocab_size, t->clean.vocab_size);
		text_tokenizer_free(&t->tok);
	} else {
		ck_assert(memcmp(&t->tok, &t->untouched, sizeof t->tok) == 0);
	}
}

static int tokenize_op(void *p)
{
	struct texts *t = p;
	return text_tokenize(t->use, t->text, strlen(t->text), &t->ids, &t->n);
}

static void tokenize_check(void *p, int rc) /* the clean ids; the buffer is ours either way */
{
	struct texts *t = p;
	ck_assert(rc != TENSOR_OK ||
		  (t->n == t->want_n && memcmp(t->ids, t->want, t->n * sizeof *t->ids) == 0));
	free(t->ids);
}

static int imdb_op(void *p)
{
	struct texts *t = p;
	return text_imdb_load(data_path("imdb_tiny"), "train", &t->ds);
}

static int imdb_archive_op(void *p)
{
	struct texts *t = p;
	return text_imdb_load(data_path("imdb_tiny.tar.gz"), "train", &t->ds);
}

static int lines_op(void *p)
{
	struct texts *t = p;
	return text_lines_load(t->lines, &t->ds);
}

static int concat_op(void *p)
{
	struct texts *t = p;
	return text_dataset_concat(&t->imdb, &t->imdb, &t->ds);
}

static int chunk_op(void *p)
{
	struct texts *t = p;
	return text_dataset_chunk(&t->imdb, &t->bytes, 12, &t->ds);
}

static void dataset_check(void *p, int rc) /* the texts of *ref, or the output untouched */
{
	struct texts *t = p;
	if (rc != TENSOR_OK) {
		ck_assert(memcmp(&t->ds, &t->untouched_ds, sizeof t->ds) == 0);
		return;
	}
	ck_assert(t->ds.n == t->ref->n);
	for (int64_t i = 0; i < t->ds.n; i++)
		ck_assert(!strcmp(t->ds.items[i].text, t->ref->items[i].text));
	text_dataset_free(&t->ds);
}

static int split_op(void *p)
{
	struct texts *t = p;
	return text_dataset_split_groups(&t->imdb, 0.3, 5, &t->tr, &t->va);
}

static void split_check(void *p, int rc)
{
	struct texts *t = p;
	if (rc != TENSOR_OK)
		return;
	ck_assert(t->tr.n + t->va.n == t->imdb.n && t->va.n > 0);
	text_dataset_free(&t->tr);
	text_dataset_free(&t->va);
}

static int batch_op(void *p)
{
	struct texts *t = p;
	int rc = text_batcher_init(&t->b, &t->imdb, &t->bytes, 64, 3, 1, true, true);
	return rc == TENSOR_OK ? text_batcher_get(&t->b, 0, &t->batch) : rc;
}

static void batch_check(void *p, int rc)
{
	struct texts *t = p;
	if (rc == TENSOR_OK) {
		ck_assert(t->batch.size == 3 && t->batch.ids && t->batch.mask);
		tensor_free(t->batch.ids);
		tensor_free(t->batch.mask);
		tensor_free(t->batch.labels);
	}
	text_batcher_free(&t->b);
}

static int mask_op(void *p)
{
	struct texts *t = p;
	/* spans: every allocation of the token path and the words' table */
	return text_mlm_mask_unit(&t->clean, &t->batch, 0.5, TEXT_MASK_SPAN, 7, &t->masked,
				  &t->targets);
}

static void mask_check(void *p, int rc) /* the clean draw */
{
	struct texts *t = p;
	if (rc == TENSOR_OK) {
		int64_t n = tensor_numel(t->want_masked);
		double *want = tu_values(t->want_masked);
		tu_assert_close(t->masked, want, n, 0, 0);
		free(want);
		tensor_free(t->masked);
		tensor_free(t->targets);
	}
}

/* Loading a vocabulary and tokenizing with it (and with bytes); reading the
 * aclImdb fixture, concatenating it, cutting it into pieces, splitting it by movie, batching and
 * masking it; reading a corpus file and a directory of documents (a failure
 * may also leave the result unchanged: a review's buffer that cannot shrink
 * stays larger). */
START_TEST(test_text)
{
	struct texts t = { .path = "/tmp/cformer-oom-vocab-XXXXXX",
			   .text = "The films w7 w299 the unknownword W12 film" };
	FILE *fp = fdopen(mkstemp(t.path), "w");
	ck_assert(fp != NULL);
	fputs("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nfilm\n##s\n", fp);
	for (int w = 0; w < 300; w++) /* enough lines for the token array to grow */
		fprintf(fp, "w%d\n", w);
	fclose(fp);
	ck_assert_int_eq(text_wordpiece_load(&t.clean, t.path), TENSOR_OK);
	ck_assert_int_eq(t.clean.vocab_size, 308);
	ck_assert_int_eq(text_tokenize(&t.clean, t.text, strlen(t.text), &t.want, &t.want_n),
			 TENSOR_OK);
	ck_assert_int_eq(text_byte_init(&t.bytes), TENSOR_OK);
	ck_assert_int_eq(text_imdb_load(data_path("imdb_tiny"), "train", &t.imdb), TENSOR_OK);
	ck_assert(fail_each("vocabulary load", &t, text_reset, vocab_op, vocab_check) >= 5);
	t.use = &t.clean;
	fail_each("tokenize", &t, text_reset, tokenize_op, tokenize_check);
	t.use = &t.bytes;
	free(t.want);
	t.want = NULL;
	t.want_n = 0;
	ck_assert_int_eq(text_tokenize(t.use, t.text, strlen(t.text), &t.want, &t.want_n),
			 TENSOR_OK);
	fail_each("byte tokenize", &t, text_reset, tokenize_op, tokenize_check);
	t.ref = &t.imdb;
	ck_assert(fail_each("aclImdb load", &t, text_reset, imdb_op, dataset_check) >= 5);
	ck_assert(
	    fail_each("aclImdb archive load", &t, text_reset, imdb_archive_op, dataset_check) >= 5);
	struct text_dataset twice, lines;
	ck_assert_int_eq(text_dataset_concat(&t.imdb, &t.imdb, &twice), TENSOR_OK);
	t.ref = &twice;
	ck_assert(fail_each("concat", &t, text_reset, concat_op, dataset_check) >= 5);
	text_dataset_free(&twice);
	struct text_dataset pieces;
	ck_assert_int_eq(text_dataset_chunk(&t.imdb, &t.bytes, 12, &pieces), TENSOR_OK);
	ck_assert(pieces.n > t.imdb.n);
	t.ref = &pieces;
	ck_assert(fail_each("chunk", &t, text_reset, chunk_op, dataset_check) >= 3);
	text_dataset_free(&pieces);
	const char *corpora[2] = { "lines_tiny/corpus.txt", "lines_tiny/docs" };
	for (int k = 0; k < 2; k++) {
		t.lines = data_path(corpora[k]);
		ck_assert_int_eq(text_lines_load(t.lines, &lines), TENSOR_OK);
		t.ref = &lines;
		ck_assert(fail_each(corpora[k], &t, text_reset, lines_op, dataset_check) >= 2);
		text_dataset_free(&lines);
	}
	ck_assert(fail_each("split by movie", &t, text_reset, split_op, split_check) >= 2);
	ck_assert(fail_each("batcher", &t, text_reset, batch_op, batch_check) >= 5);
	ck_assert_int_eq(text_batcher_init(&t.b, &t.imdb, &t.clean, 64, 3, 1, false, false),
			 TENSOR_OK);
	ck_assert_int_eq(text_batcher_get(&t.b, 0, &t.batch), TENSOR_OK);
	text_batcher_free(&t.b); /* the batch is ours */
	ck_assert_int_eq(mask_op(&t), TENSOR_OK);
	t.want_masked = t.masked;
	tensor_free(t.targets);
	ck_assert(fail_each("MLM masking", &t, text_reset, mask_op, mask_check) >= 1);
	tensor_free(t.want_masked);
	batch_check(&t, TENSOR_OK);
	unlink(t.path);
	free(t.want);
	text_tokenizer_free(&t.clean);
	text_tokenizer_free(&t.bytes);
	text_dataset_free(&t.imdb);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("oom");
	TCase *tc = tcase_create("oom"); /* no fixture: no scope is open */
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_train_step, 0, 3);
	tcase_add_test(tc, test_train_step_lazy);
	tcase_add_test(tc, test_sgd_step);
	tcase_add_test(tc, test_mlm_step);
	tcase_add_loop_test(tc, test_model_init, 0, 3);
	tcase_add_loop_test(tc, test_inference, 0, 3);
	tcase_add_test(tc, test_checkpoint);
	tcase_add_test(tc, test_anchor);
	tcase_add_test(tc, test_text);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
