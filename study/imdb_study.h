/* imdb_study's command line, shared by its source files: the options with
 * their defaults (opt), the flag table bound to them, the flags a resumed run
 * may change, and the --help texts (imdb_study_flags.c). */
#ifndef CFORMER_STUDY_IMDB_STUDY_H
#define CFORMER_STUDY_IMDB_STUDY_H

#include <stdbool.h>
#include <stdint.h>

#include "common/flags.h"
#include "common/model_flags.h"

struct options {
	struct model_flags enc;
	const char *schedule, *data, *val_split, *log_dir, *checkpoint_dir;
	const char *init_from, *checkpoint, *predict, *predict_file, *device, *precision, *output;
	int64_t batch, accum, epochs, steps, seed, split_seed, threads, max_train, max_test;
	int64_t log_every, stop_after, keep_tail;
	double embed_std, lr, beta1, beta2, min_lr, warmup, weight_decay, clip, val_fraction;
	double token_mask, pooled_test, embed_l2, embed_l2_ramp, pos_l2, proj_l2, ema, adv_eps;
	double label_smoothing;
	bool decay_all, lazy_embed, embed_anchor, resume, eval_only, no_bucket, no_mem_check, skip_nonfinite;
};

extern struct options opt;
extern struct flag flags[];
extern const int NFLAGS;
/* Flags that a resumed run may change; NULL-terminated. */
extern const char *const RESUME_FREE[];
extern const char SYNOPSIS[], EPILOG[];

#endif
