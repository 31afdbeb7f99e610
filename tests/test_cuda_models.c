/* The models on CUDA against the CPU: a training step of each preset (f64
 * within 1e-9; f32 within 2e-4 relative, the weights after three steps within
 * lr / 10; with bf16 products close to the CPU's and to f32), the masked cross-entropy, a steady training step that calls no cudaMalloc and waits for nothing, checkpoints
 * that move between devices, and every allocation of a device step failing
 * cleanly. Skipped (exit 77) without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models_common.h"

#define B 4
#define T 16
#define VOCAB 23
#define LR 3e-3 /* AdamW's learning rate */

/* The device under test: CUDA, or the CPU itself with CFORMER_PARITY_DEVICE=cpu
 * (a self-check of these tests on a machine without a GPU). */
static enum tensor_device dev = TENSOR_CUDA;

struct run {
	struct model_config c;
	struct nn_params ps;
	struct model_classifier m;
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
	c->dropout = c->attn_dropout = 0.1; /* the same masks on both devices */
	c->num_classes = 3;
	c->head_hidden = 8;
	c->position_kernel = strcmp(preset, "conv-linformer:2") ? 0 : 3;
}

/* A classifier on where, its batch moved there too (heap tensors). */
static void setup(struct run *r, const char *preset, enum tensor_dtype dt, enum tensor_device where)
{
	memset(r, 0, sizeof *r);
	config(&r->c, preset);
	ck_assert_int_eq(nn_params_init(&r->ps, dt, where, 11), TENSOR_OK);
	ck_assert_msg(model_classifier_init(&r->m, &r->ps, &r->c) == TENSOR_OK, "%s",
		      tensor_last_error());
	ck_assert_int_eq(nn_params_pack(&r->ps), TENSOR_OK);
	ck_assert_int_eq(nn_adamw_init(&r->opt, &r->ps, LR, 0.9, 0.999, 1e-8, 0.01), TENSOR_OK);
	const int64_t len[B] = { T, T - 3, 9, 5 };
	tensor_heap_begin();
	struct tensor *ids = rand_ids(B, T, VOCAB, 7), *mask = prefix_mask(B, T, len);
	struct tensor *lab = tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ B },
					      (int64_t[]){ 0, 2, 1, 2 });
	r->ids = tensor_to_device(ids, where);
	r->mask = tensor_to_device(mask, where);
	r->labels = tensor_to_device(lab, where);
	tensor_free(ids);
	tensor_free(mask);
	tensor_free(lab);
	tensor_heap_end();
	ck_assert(r->ids && r->mask && r->labels);
}

static void teardown(struct run *r)
{
	nn_adamw_free(&r->opt);
	model_classifier_free(&r->m);
	drop_params(&r->ps);
	tensor_free(r->ids);
	tensor_free(r->mask);
	tensor_free(r->labels);
}

/* Forward, loss and backward in the open scope; the loss (not read). */
static struct tensor *forward_backward(struct run *r)
{
	ck_assert_int_eq(nn_params_zero_grad(&r->ps), TENSOR_OK);
	struct tensor *logits = model_classifier_forward(&r->m, r->ids, r->mask);
	struct tensor *loss = nn_cross_entropy(logits, r->labels, -1, 0.1);
	ck_assert_msg(loss != NULL, "%s", tensor_last_error());
	ck_assert_msg(ag_backward(loss, NULL) == TENSOR_OK, "%s", tensor_last_error());
	return loss;
}

/* a (the device) within atol + rtol |b| of b (either device), naming what. */
static void assert_close(const char *what, const struct tensor *a, const struct tensor *b,
			 double atol, double rtol)
{
	tensor_scope_begin(); /* the host copy leaves nothing behind */
	ag_no_grad_begin();   /* a and b may be outputs of a taped forward */
	struct tensor *h = tensor_to_device(a, TENSOR_CPU), *hb = tensor_to_device(b, TENSOR_CPU);
	ag_no_grad_end();
	ck_assert_msg(h && hb, "%s: %s", what, tensor_last_error());
	double *x = tu_values(h), *y = tu_values(hb);
	for (int64_t i = 0; i < tensor_numel(b); i++)
		ck_assert_msg(fabs(x[i] - y[i]) <= atol + rtol * fabs(y[i]),
			      "%s: element %lld: cuda %.12g, cpu %.12g", what, (long long)i, x[i],
			      y[i]);
	free(x);
	free(y);
	tensor_scope_end();
}

static const char *const presets[] = { "transformer:2", "linformer:2", "conv-linformer:2", "LCMX" };

/* Loss and every gradient of a first step, then the parameters after three
 * AdamW steps, on both devices. */
START_TEST(test_train_parity)
{
	const char *preset = presets[_i / 2];
	enum tensor_dtype dt = _i % 2 ? TENSOR_F32 : TENSOR_F64;
	double tol = dt == TENSOR_F64 ? 1e-9 : 2e-4;
	struct run cpu, gpu;
	setup(&cpu, preset, dt, TENSOR_CPU);
	setup(&gpu, preset, dt, dev);
	ck_assert_int_eq(cpu.ps.n, gpu.ps.n);
	for (int step = 0; step < 3; step++) {
		tensor_scope_begin();
		struct tensor *lc = forward_backward(&cpu), *lg = forward_backward(&gpu);
		char what[128];
		snprintf(what, sizeof what, "%s %s loss, step %d", preset, tensor_dtype_name(dt),
			 step);
		assert_close(what, lg, lc, tol, tol);
		if (step == 0) {
			snprintf(what, sizeof what, "%s %s gradients", preset,
				 tensor_dtype_name(dt));
			assert_close(what, gpu.ps.flat_grad, cpu.ps.flat_grad, tol, tol);
		}
		ck_assert_int_eq(nn_adamw_step(&cpu.opt), TENSOR_OK);
		ck_assert_int_eq(nn_adamw_step(&gpu.opt), TENSOR_OK);
		ag_tape_reset();
		tensor_scope_end();
	}
	/* AdamW moves each weight by lr m / (sqrt(v) + eps), whatever the gradient's scale: a
	 * gradient near zero, known to f32 only up to its summation order, moves its weight by a
	 * different fraction of lr on each device (up to 2.4% of lr seen on an H200). f32: a
	 * tenth of lr; f64 leaves no such noise. */
	assert_close("parameters", gpu.ps.flat, cpu.ps.flat, dt == TENSOR_F64 ? 1e-9 : LR / 10,
		     tol);
	ck_assert_int_eq(cpu.ps.rng_counter, gpu.ps.rng_counter);
	teardown(&cpu);
	teardown(&gpu);
}
END_TEST

/* ||a - b|| / ||b||, both tensors moved to the host. */
static double rel_diff(const struct tensor *a, const struct tensor *b)
{
	tensor_scope_begin();
	struct tensor *h = tensor_to_device(a, TENSOR_CPU), *hb = tensor_to_device(b, TENSOR_CPU);
	ck_assert_msg(h && hb, "%s", tensor_last_error());
	double *x = tu_values(h), *y = tu_values(hb), d = 0, n = 0;
	for (int64_t i = 0; i < tensor_numel(hb); i++) {
		d += (x[i] - y[i]) * (x[i] - y[i]);
		n += y[i] * y[i];
	}
	free(x);
	free(y);
	tensor_scope_end();
	return sqrt(d / (n > 0 ? n : 1));
}

/* A first step's loss and gradients with bf16 products (nn_params_autocast_begin) in *loss
 * and a heap copy of the flat gradient. */
static struct tensor *bf16_step(struct run *r, double *loss)
{
	tensor_scope_begin();
	ck_assert_msg(nn_params_autocast_begin(&r->ps, TENSOR_BF16) == TENSOR_OK, "%s",
		      tensor_last_error());
	*loss = tensor_get(forward_backward(r), NULL);
	ag_autocast_end();
	ag_tape_reset();
	tensor_scope_end();
	tensor_heap_begin();
	struct tensor *g = tensor_clone(r->ps.flat_grad);
	tensor_heap_end();
	ck_assert(g != NULL);
	return g;
}

/* Each preset's first step with bf16 products (operands rounded to bf16, f32
 * accumulation) on the device: its loss and gradients close to the CPU's bf16 step
 * (the two devices round the same operands; their sums run in other orders) and to the
 * device's own f32 step (bf16's rounding, 2^-9 relative an operand). */
START_TEST(test_train_bf16)
{
	const char *preset = presets[_i];
	struct run cpu, gpu, f32;
	setup(&cpu, preset, TENSOR_F32, TENSOR_CPU);
	setup(&gpu, preset, TENSOR_F32, dev);
	setup(&f32, preset, TENSOR_F32, dev);
	double lc, lg;
	struct tensor *gc = bf16_step(&cpu, &lc), *gg = bf16_step(&gpu, &lg);
	tensor_scope_begin();
	double lf = tensor_get(forward_backward(&f32), NULL);
	ag_tape_reset();
	double dev_cpu = rel_diff(gg, gc), dev_f32 = rel_diff(gg, f32.ps.flat_grad);
	tensor_scope_end();
	printf("%s bf16 step: loss %.6f (cpu bf16 %.6f, f32 %.6f); gradients %.2e from the "
	       "cpu's bf16, %.2e from f32\n",
	       preset, lg, lc, lf, dev_cpu, dev_f32);
	ck_assert_msg(fabs(lg - lc) <= 1e-3 * fabs(lc), "%s: loss %.8g, cpu bf16 %.8g", preset, lg,
		      lc);
	ck_assert_msg(fabs(lg - lf) <= 1e-2 * fabs(lf), "%s: loss %.8g, f32 %.8g", preset, lg, lf);
	ck_assert_msg(dev_cpu <= 1e-2, "%s: bf16 gradients %.3g from the cpu's", preset, dev_cpu);
	ck_assert_msg(dev_f32 <= 5e-2, "%s: bf16 gradients %.3g from f32", preset, dev_f32);
	ck_assert_msg(dev == TENSOR_CPU || dev_f32 > 0, "%s: bf16 gradients equal f32's", preset);
	tensor_free(gc);
	tensor_free(gg);
	teardown(&cpu);
	teardown(&gpu);
	teardown(&f32);
}
END_TEST

/* The masked cross-entropy of other devices against the CPU's row-dropping
 * one: ignored rows, label smoothing, all rows ignored. */
START_TEST(test_masked_cross_entropy)
{
	struct tensor *x = tu_rand(TENSOR_F64, 2, (int64_t[]){ 6, 5 }, 3);
	struct tensor *gx = tensor_to_device(x, dev);
	const int64_t sets[2][6] = { { 0, -100, 4, 2, -100, 1 },
				     { -100, -100, -100, -100, -100, -100 } };
	for (int s = 0; s < 2; s++) {
		struct tensor *t =
		    tensor_from_data(TENSOR_I64, TENSOR_CPU, 1, (int64_t[]){ 6 }, sets[s]);
		for (int smooth = 0; smooth < 2; smooth++) {
			struct tensor *a = tensor_clone(x), *b = tensor_clone(gx);
			a->requires_grad = b->requires_grad = true;
			struct tensor *la = nn_cross_entropy(a, t, -100, 0.2 * smooth);
			ck_assert_msg(la && ag_backward(la, NULL) == TENSOR_OK, "%s",
				      tensor_last_error());
			ag_tape_reset();
			struct tensor *lb =
			    nn_cross_entropy(b, tensor_to_device(t, dev), -100, 0.2 * smooth);
			ck_assert_msg(lb && ag_backward(lb, NULL) == TENSOR_OK, "%s",
				      tensor_last_error());
			ag_tape_reset();
			assert_close("loss", lb, la, 1e-12, 1e-12);
			assert_close("gradient", b->grad, a->grad, 1e-12, 1e-12);
		}
	}
}
END_TEST

/* Once warm, a training step (forward, loss, backward, AdamW) calls neither
 * cudaMalloc nor cudaFree and never waits for the device; reading the loss
 * is the one synchronisation. */
START_TEST(test_step_no_malloc_no_sync)
{
	struct run r;
	setup(&r, presets[_i], TENSOR_F32, dev);
	struct tensor_mem_stats before = { 0 };
	for (int step = 0; step < 4; step++) {
		if (step == 3)
			before = tensor_mem_stats(dev);
		tensor_scope_begin();
		forward_backward(&r);
		ck_assert_int_eq(nn_adamw_step(&r.opt), TENSOR_OK);
		ag_tape_reset();
		tensor_scope_end();
	}
	struct tensor_mem_stats after = tensor_mem_stats(dev);
	ck_assert_msg(after.n_device_allocs == before.n_device_allocs,
		      "%s: %zu device allocations in a warm step", presets[_i],
		      after.n_device_allocs - before.n_device_allocs);
	ck_assert_msg(after.n_syncs == before.n_syncs, "%s: %zu synchronisations in a step",
		      presets[_i], after.n_syncs - before.n_syncs);
	tensor_scope_begin();
	double loss = tensor_get(forward_backward(&r), NULL);
	ck_assert(isfinite(loss));
	ck_assert_uint_eq(tensor_mem_stats(dev).n_syncs, after.n_syncs + 1);
	ag_tape_reset();
	tensor_scope_end();
	teardown(&r);
}
END_TEST

/* Trained on the GPU, saved, loaded on the CPU: the same logits; the run then
 * resumes on the CPU (optimizer state included) as it goes on on the GPU. */
START_TEST(test_checkpoint_across_devices)
{
	char path[] = "/tmp/cformer_cuda_ckptXXXXXX";
	int fd = mkstemp(path);
	ck_assert(fd >= 0);
	close(fd);
	struct run gpu, cpu;
	setup(&gpu, "linformer:2", TENSOR_F32, dev);
	setup(&cpu, "linformer:2", TENSOR_F32, TENSOR_CPU);
	for (int step = 0; step < 2; step++) {
		tensor_scope_begin();
		forward_backward(&gpu);
		ck_assert_int_eq(nn_adamw_step(&gpu.opt), TENSOR_OK);
		ag_tape_reset();
		tensor_scope_end();
	}
	ck_assert_msg(nn_checkpoint_save(path, &gpu.ps, &gpu.opt, NULL, 2) == TENSOR_OK, "%s",
		      tensor_last_error());
	int64_t step = 0;
	ck_assert_msg(nn_checkpoint_load(path, &cpu.ps, &cpu.opt, &step) == TENSOR_OK, "%s",
		      tensor_last_error());
	ck_assert_int_eq(step, 2);
	cpu.opt.step = gpu.opt.step;
	nn_params_train(&gpu.ps, false);
	nn_params_train(&cpu.ps, false);
	ag_no_grad_begin();
	tensor_scope_begin();
	assert_close("logits", model_classifier_forward(&gpu.m, gpu.ids, gpu.mask),
		     model_classifier_forward(&cpu.m, cpu.ids, cpu.mask), 1e-5, 1e-4);
	tensor_scope_end();
	ag_no_grad_end();
	nn_params_train(&gpu.ps, true);
	nn_params_train(&cpu.ps, true);
	tensor_scope_begin();
	forward_backward(&gpu);
	forward_backward(&cpu);
	ck_assert_int_eq(nn_adamw_step(&gpu.opt), TENSOR_OK);
	ck_assert_int_eq(nn_adamw_step(&cpu.opt), TENSOR_OK);
	ag_tape_reset();
	tensor_scope_end();
	assert_close("resumed parameters", gpu.ps.flat, cpu.ps.flat, 3e-5, 2e-4);
	/* and back: the CPU's state loads on the GPU */
	ck_assert_int_eq(nn_checkpoint_save(path, &cpu.ps, &cpu.opt, NULL, 3), TENSOR_OK);
	ck_assert_int_eq(nn_checkpoint_load(path, &gpu.ps, &gpu.opt, &step), TENSOR_OK);
	assert_close("reloaded parameters", gpu.ps.flat, cpu.ps.flat, 0, 0);
	assert_close("reloaded moments", gpu.opt.flat_v, cpu.opt.flat_v, 0, 0);
	unlink(path);
	teardown(&gpu);
	teardown(&cpu);
}
END_TEST

/* One training step in its own scope, the i-th allocation failing (i < 0:
 * none); whether the failure fired. */
static int failing_step(struct run *r, int64_t i, bool *fired)
{
	tensor_scope_begin();
	tensor_mem_inject_failure(i);
	int rc = nn_params_zero_grad(&r->ps);
	struct tensor *loss =
	    rc < 0 ? NULL
		   : nn_cross_entropy(model_classifier_forward(&r->m, r->ids, r->mask), r->labels,
				      -1, 0);
	rc = loss ? ag_backward(loss, NULL) : tensor_last_status();
	if (rc == TENSOR_OK)
		rc = nn_adamw_step(&r->opt);
	*fired = i >= 0 && tensor_mem_inject_failure(-1) > i;
	ag_tape_reset();
	tensor_scope_end();
	return rc;
}

/* Each allocation of a device training step, failing in turn, gives an
 * out-of-memory error and leaves the state and the live bytes as they were,
 * or the step absorbs it and ends as the clean step. */
START_TEST(test_step_out_of_memory)
{
	struct run r;
	bool fired;
	setup(&r, "linformer:2", TENSOR_F32, dev);
	ck_assert_int_eq(failing_step(&r, -1, &fired), TENSOR_OK); /* AdamW's state exists */
	struct train_state s = train_state_save(&r.ps, &r.opt);
	ck_assert_int_eq(failing_step(&r, -1, &fired), TENSOR_OK);
	struct train_state want = train_state_save(&r.ps, &r.opt);
	size_t live = tensor_mem_stats(dev).live_bytes;
	int64_t i, failures = 0;
	for (i = 0;; i++) {
		train_state_restore(&r.ps, &r.opt, &s);
		int rc = failing_step(&r, i, &fired);
		if (rc == TENSOR_OK) {
			tensor_clear_error();
			/* on a GPU the embedding's gradient adds with atomics in no fixed
			 * order: the last bits of a clean step may differ */
			double tol = dev == TENSOR_CPU ? 0 : 1e-6;
			assert_close("parameters after the step", r.ps.flat, want.flat, tol, tol);
			if (!fired)
				break;
			continue;
		}
		ck_assert_msg(fired && tensor_last_status() == TENSOR_ERR_NOMEM,
			      "allocation %lld: status %d: %s", (long long)i, tensor_last_status(),
			      tensor_last_error());
		tensor_clear_error();
		ck_assert_uint_eq(tensor_mem_stats(dev).live_bytes, live);
		assert_close("parameters after a failed step", r.ps.flat, s.flat, 0, 0);
		assert_close("moments after a failed step", r.opt.flat_v, s.v, 0, 0);
		ck_assert_int_eq(r.opt.step, s.step);
		failures++;
	}
	ck_assert_msg(failures > 50, "%lld of %lld allocations failed the step",
		      (long long)failures, (long long)i);
	printf("%s training step: %lld allocations, each failing in turn: %lld errors\n",
	       tensor_device_name(dev), (long long)i, (long long)failures);
	train_state_free(&s);
	train_state_free(&want);
	teardown(&r);
}
END_TEST

int main(void)
{
	const char *self = getenv("CFORMER_PARITY_DEVICE");
	if (self && !strcmp(self, "cpu")) {
		dev = TENSOR_CPU;
		printf("test_cuda_models: the CPU against itself (CFORMER_PARITY_DEVICE=cpu)\n");
	} else if (!tensor_device_available(TENSOR_CUDA)) {
		printf("test_cuda_models: SKIP: %s\n",
#ifdef CFORMER_HAVE_CUDA
		       "no CUDA device is present"
#else
		       "the CUDA backend is not compiled in (./configure --with-cuda)"
#endif
		);
		return 77;
	}
	setenv("CK_FORK", "no", 1); /* CUDA does not survive fork() */
	Suite *s = suite_create("cuda_models");
	TCase *tc = tu_tcase("models");
	int np = (int)(sizeof presets / sizeof presets[0]);
	tcase_add_loop_test(tc, test_train_parity, 0, 2 * np);
	tcase_add_loop_test(tc, test_train_bf16, 0, np);
	tcase_add_test(tc, test_masked_cross_entropy);
	if (dev == TENSOR_CUDA)
		tcase_add_loop_test(tc, test_step_no_malloc_no_sync, 0, np);
	tcase_add_test(tc, test_checkpoint_across_devices);
	tcase_add_test(tc, test_step_out_of_memory);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
