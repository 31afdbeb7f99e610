/* libFuzzer target for the checkpoint loader: any bytes must give a load or
 * a clean error that leaves the destination untouched, never a crash, leak
 * or out-of-bounds access. The model is fixed: w [2,3] and b [2] (f32) with
 * AdamW state, as in tests/fuzz/corpus_checkpoint (make_corpus.py). The
 * config in the metadata is then parsed and checked against the file's
 * tensors (model_config_check_checkpoint), as the model loaders do;
 * model_tiny.safetensors seeds a real model's config to mutate. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_internal.h"
#include "models.h"

static struct nn_params ps;
static struct nn_adamw opt;
static struct tensor *state[6]; /* w, b, m[0], m[1], v[0], v[1] */
static uint8_t ref[6][24];	/* their fixed contents */

static void setup(void)
{
	static const int64_t sw[2] = { 2, 3 }, sb[1] = { 2 };
	if (nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1) < 0 ||
	    !nn_param_new(&ps, "w", 2, sw, false) || !nn_param_new(&ps, "b", 1, sb, true) ||
	    nn_adamw_init(&opt, &ps, 1e-3, 0.9, 0.999, 1e-8, 0.01) < 0)
		abort();
	struct tensor *t[6] = { ps.items[0].value, ps.items[1].value, opt.m[0],
				opt.m[1],	   opt.v[0],	      opt.v[1] };
	for (int i = 0; i < 6; i++) {
		state[i] = t[i];
		for (size_t k = 0; k < tensor_nbytes(t[i]); k++)
			ref[i][k] = (uint8_t)(37 * i + 11 * k + 1);
	}
}

/* Put the reference contents back (a successful load overwrites them). */
static void reset(void)
{
	for (int i = 0; i < 6; i++)
		memcpy(tensor_data(state[i]), ref[i], tensor_nbytes(state[i]));
	ps.rng_counter = 5;
	ps.seed = 1;
	opt.step = 3;
}

/* After a failed load nothing may have changed. */
static void check_untouched(int64_t step)
{
	for (int i = 0; i < 6; i++)
		if (memcmp(tensor_data(state[i]), ref[i], tensor_nbytes(state[i])) != 0)
			abort();
	if (ps.rng_counter != 5 || ps.seed != 1 || opt.step != 3 || step != -1)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	if (!ready) {
		setup();
		ready = true;
	}
	for (int with_opt = 0; with_opt < 2; with_opt++) {
		reset();
		int64_t step = -1;
		tensor_clear_error();
		int rc = nn_checkpoint_load_buffer(data, size, "fuzz", &ps, with_opt ? &opt : NULL,
						   NULL, NULL, &step);
		if (rc < 0 && (tensor_last_status() != rc || !strstr(tensor_last_error(), "fuzz")))
			abort(); /* an error without its message */
		if (rc < 0)
			check_untouched(step);
		else if (step < 0)
			abort();
	}
	tensor_clear_error();
	/* the config in the metadata, checked against the tensors as a model loader does
	 * before it allocates anything */
	char *json = nn_checkpoint_config_buffer(data, size, size, "fuzz");
	struct model_config c;
	struct nn_checkpoint_info info;
	if (json && model_config_from_json(&c, json) == TENSOR_OK &&
	    nn_checkpoint_info_buffer(data, size, size, "fuzz", &info) == TENSOR_OK) {
		if (model_config_check_checkpoint(&c, "fuzz", &info) == TENSOR_OK &&
		    model_param_count(&c, true, false) != info.numel &&
		    model_param_count(&c, false, true) != info.numel &&
		    model_param_count(&c, false, false) != info.numel &&
		    model_param_count(&c, true, true) != info.numel)
			abort(); /* accepted a config whose count is not the file's */
		nn_checkpoint_info_free(&info);
	}
	free(json);
	tensor_clear_error();
	return 0;
}
