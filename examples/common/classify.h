/* What the IMDB classifier programs (examples/linformer_imdb, study/imdb_study) share beyond
 * the training loop: evaluation over a batcher, each review's logits to a file, prediction of
 * lines of text, and the run state that --resume reads back. Example support code: a user
 * error prints "<prog>: --flag: ..." and exits 1 (flags_fail), a library error exits 1 naming
 * what failed (train_die). */
#ifndef CFORMER_CLASSIFY_H
#define CFORMER_CLASSIFY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "csvlog.h"
#include "flags.h"
#include "models.h"
#include "outfile.h"
#include "tb.h"
#include "text.h"

/* --output FILE: each review's logits at full precision, as JSON lines
 * ({"review": i, "label": l, "logits": [..]}) if the name ends in .jsonl, else CSV
 * (review,label,logit_0,..); label -1 where there is none (predictions). Written
 * atomically (outfile.h): the file appears, whole, at logits_file_close. */
struct logits_file {
	struct outfile file; /* file.f NULL: nothing is written */
	bool json;
};

/* Open path (NULL: a logits_file that writes nothing) for rows of `classes` logits; refused
 * (exit 1 naming --output) when it would replace one of the n inputs of the run or a
 * checkpoint (outfile_check). */
void logits_file_open(struct logits_file *o, const char *prog, const char *path, int64_t classes,
		      const struct outfile_input *inputs, int n);
/* The B x C logits of a batch: row i is review review[i] with label label[i] (label NULL: -1). */
void logits_file_write(struct logits_file *o, const char *prog, const struct tensor *logits,
		       const int64_t *review, const int64_t *label);
/* Commit the file (exit 1 naming --output on any write error; nothing written then). */
void logits_file_close(struct logits_file *o, const char *prog);

/* The classifier of checkpoint path, rebuilt from the file alone (its config, then its weights)
 * on train_device; mem_check: first refuse (exit 1) a model that cannot run at batch in the
 * memory available. *step: the step it was saved at. Exits naming the file on any error. */
void classify_load_model(const char *prog, const char *path, int64_t batch, bool mem_check,
			 struct model_config *c, struct nn_params *ps, struct model_classifier *m,
			 int64_t *step);
/* ds cut to a seeded sample of max reviews if 0 < max < ds->n, else ds itself (ds is consumed). */
void classify_sample(const char *prog, struct text_dataset *ds, int64_t max, uint64_t seed,
		     struct text_dataset *out);

struct eval_result {
	double loss, acc;
	int64_t correct, n;
};

/* Mean cross-entropy and accuracy of m over every batch of b, in eval mode without a tape;
 * out (or NULL) receives each review's logits with its index in the dataset and its label.
 * In a data-parallel run without out, each rank evaluates every size-th batch and the
 * sums are shared. */
struct eval_result classify_evaluate(const char *prog, const struct model_classifier *m,
				     struct nn_params *ps, const struct text_batcher *b,
				     struct logits_file *out);
/* "test: loss L accuracy A (correct/n reviews)". */
void classify_print_test(const struct eval_result *r);

/* --predict TEXT (text) or --predict-file FILE (file; one review a line): print "P(neg) P(pos)"
 * (4 decimals) a line per review, batch reviews at a time through m, its logits to out. */
void classify_predict(const char *prog, const struct model_classifier *m, struct nn_params *ps,
		      const struct text_tokenizer *tok, const char *text, const char *file,
		      int64_t batch, struct logits_file *out);

/* A training run's logs in a directory: metrics.csv (step, epoch, split, loss, accuracy, lr,
 * tokens_per_s, elapsed_s, peak_mb) and TensorBoard events, written by rank 0 alone of a
 * data-parallel run (the calls do nothing on the others). */
struct classify_log {
	struct csvlog csv;
	struct tb_writer tb;
	const char *prog;
};
/* Open the logs in dir. resume: keep metrics.csv's rows up to step (a killed run may have
 * written later ones) and set *elapsed to the time of the last row kept. Exits naming
 * --log-dir when they cannot be written. */
void classify_log_open(struct classify_log *l, const char *prog, const char *dir, bool resume,
		       int64_t step, double *elapsed);
/* A metrics.csv row of split ("train", "val", "test") and its TensorBoard scalars split/loss,
 * split/acc and lr; lr and tps < 0: none. */
void classify_log_row(struct classify_log *l, int64_t step, int64_t epoch, const char *split,
		      double loss, double acc, double lr, double tps, double elapsed);
/* One more TensorBoard scalar. */
void classify_log_scalar(struct classify_log *l, const char *tag, double v, int64_t step);
void classify_log_close(struct classify_log *l);

/* The run state saved in last.safetensors beside the weights, the optimizer (and a moving
 * average): the step, the best validation accuracy and its epoch, and the program's flags
 * (those in free_flags, NULL-terminated, may change on resume). saves: the names of the
 * other checkpoints the run writes beside it (NULL-terminated, or NULL). */
struct run_state {
	int64_t step, best_epoch;
	double best_val;
	const struct flag *flags;
	int nflags;
	const char *const *free_flags;
	const char *const *saves;
};
/* Save the run to path (nn_checkpoint_save_run: one file, renamed into place), with the
 * metadata "config" (cfg_json) and "text" (text_json: how the run read text,
 * reading_json; NULL: none). Exits naming the file on error. */
void run_state_save(const char *prog, const char *path, const struct run_state *s,
		    const struct nn_params *ps, const struct nn_adamw *o, const struct nn_ema *ema,
		    const char *cfg_json, const char *text_json);
/* --resume from path: first remove the temporary files that killed saves of path and of
 * s->saves left (nn_checkpoint_remove_temps; rank 0), saying how many; then weights,
 * optimizer, ema (if not NULL), random stream and s->step,
 * s->best_val (kept as the caller set it where the run saved none: stopped before its first
 * validation), s->best_epoch. Exits naming --resume when path is missing or holds no run
 * state, or when a flag outside s->free_flags differs from this run's. */
void run_state_load(const char *prog, const char *path, struct run_state *s, struct nn_params *ps,
		    struct nn_adamw *o, struct nn_ema *ema);
/* Print "to resume: PROG ARGS --log-dir LOG --checkpoint-dir CKPT --resume", argv without
 * --stop-after, --log-dir, --checkpoint-dir and --resume. */
void print_resume_command(int argc, char **argv, const char *log_dir, const char *ckpt_dir);

#endif
