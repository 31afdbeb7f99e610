/* Training-loop helpers shared by the example programs: fatal errors, clock,
 * the device, peak memory and the memory check before a run, writable
 * directories, SIGINT/SIGTERM as a stop request, the optimizer step
 * (schedule, clipping, AdamW, non-finite steps), the test hooks (crash
 * points, poisoned gradients), and moving a pretrained encoder into a new
 * model. Example support code: train_die prints and exits. */
#ifndef CFORMER_TRAIN_H
#define CFORMER_TRAIN_H

#include <stddef.h>

#include "models.h"
#include "text.h"

/* Print "<prog>: <what>: <tensor_last_error()>" to stderr and exit 1; in a
 * data-parallel run "<prog> (rank R of N): ...", then every rank ends
 * (nn_dist_abort). */
void train_die(const char *prog, const char *what) __attribute__((noreturn));

/* Data parallelism (nn.h, nn_dist_*): under mpirun -np N each process is a rank.
 * Join the group (exit 1 naming the failure); on ranks other than 0 stdout goes
 * to /dev/null, so rank 0 alone prints (errors still reach stderr). */
void train_dist_init(const char *prog, int *argc, char ***argv);
/* Narrow batch b to this rank's share of its rows (nn_dist_share; b->size then
 * counts them, maybe 0) and set ps->batch_first, so that dropout draws the masks
 * of the whole batch; returns the whole batch's rows, or a negative status. Test
 * hook: CFORMER_FAIL_AT="RANK:N" makes rank RANK fail at its N-th batch,
 * "RANK:N:kill" kills it. */
int64_t train_batch_share(struct text_batch *b, struct nn_params *ps);
/* Before a rank-0 write (checkpoints): wait for every rank, so that a rank that
 * failed ends the job first; then whether this rank writes (rank 0). */
bool train_sync_writer(const char *prog);
/* After training with N > 1 ranks: check that every rank holds the same parameters
 * (else exit 1 naming the checksums) and print "N ranks: parameters identical
 * (checksum X)". Nothing alone. */
void train_dist_report(const char *prog, struct nn_params *ps);
/* Seconds on a monotonic clock. */
double train_clock(void);
/* A program's exit status rc, checked against the fate of what it printed: stdout flushed
 * and closed, and where a write failed (a full disk, say) an error line on stderr and 1
 * in place of a 0. Call it last in main. */
int train_close_stdout(const char *prog, int rc);
/* The device the example runs on (TENSOR_CPU unless train_set_device chose
 * another). */
extern enum tensor_device train_device;
/* Set train_device from a --device value ("cpu" or "cuda"); exits 2 naming the
 * flag when that device is not available. */
void train_set_device(const char *prog, const char *name);
/* The precision of the training step's products (nn_params_autocast_begin): TENSOR_F32
 * unless train_set_precision chose bf16. */
extern enum tensor_dtype train_precision;
/* Set train_precision from a --precision value, after train_set_device: "f32", "bf16"
 * (bf16 products, f32 accumulation, on either device) or "tf32" (f32 products on the
 * GPU's tensor cores with TF32 inputs: --device cuda only; else exits 2 naming the
 * flag). */
void train_set_precision(const char *prog, const char *name);
/* Exit (status 1, naming the estimate and what is available) when a run
 * cannot fit: model_bytes (model_estimate_bytes) on train_device, data_bytes
 * (the tokenized text) in host memory (both on the CPU alone); what names
 * the run ("training at n 512, batch 32"). Available memory: MemAvailable on
 * the CPU, the device's free memory. */
void train_check_memory(const char *prog, double model_bytes, double data_bytes, const char *what);
/* How a refused run may go on anyway: the end of train_check_memory's message ("pass
 * --no-mem-check to run anyway", for the programs that have the flag). */
extern const char *train_mem_override;
/* Move a batch's tensors to train_device (the host ones are freed); a status. */
int train_batch_to_device(struct text_batch *b);
/* tensor_mem_stats(train_device).peak_bytes in MiB. */
double train_peak_mb(void);
/* The default log directory of a run: "runs/<prefix><model>-n<N>-<YYYYmmdd-HHMMSS>". */
void train_default_log_dir(char *buf, size_t len, const char *prefix, const char *model,
			   int64_t n);
/* mkdir -p, then check that a file can be created there (rank 0 alone: the other ranks of
 * a data-parallel run write nothing). Returns 0, or -1 with a message in err. */
int train_mkdirs(const char *path, char *err, size_t errlen);

/* For tests of crash safety: with CFORMER_CRASH_AT=N in the environment, the
 * process kills itself (SIGKILL) at the N-th point of its checkpoint saves
 * (nn_checkpoint_set_crash_hook: four points a save, counted from 1). */
void train_crash_hook_install(void);

/* SIGINT and SIGTERM set a flag that train_stop_signal() returns (the signal
 * number, 0 if none), so the loop can finish its step, save and exit; a second
 * signal kills the program at once. */
void train_signals_install(void);
int train_stop_signal(void);
/* The exit status of a run stopped by a signal before its end: 128 + the signal
 * number, as a shell reports a process the signal killed (130 for Ctrl-C, 143
 * for SIGTERM), so scripts tell an interrupted run from a finished one; 1 in an
 * MPI rank that stopped because another rank was signalled. */
int train_stop_status(void);

/* text_batcher_init of ds, with bucket: batches of similar length, each only
 * as wide as its longest example (trim); train: reshuffled each epoch from
 * seed (else the fixed order). Returns a status. */
int train_batcher_init(struct text_batcher *b, const struct text_dataset *ds,
		       const struct text_tokenizer *tok, int64_t n, int64_t batch, uint64_t seed,
		       bool train, bool bucket);

/* One optimizer update from the accumulated gradients: opt->lr from the
 * schedule at step (0-based), gradients clipped to a global norm of clip (clip
 * <= 0: no clipping), then AdamW. Returns the gradient norm before clipping,
 * NaN (and no update) where the gradients are not finite, or a negative
 * status. For tests of the NaN path: with CFORMER_NAN_GRAD_AT=S in the
 * environment the first parameter's gradient becomes NaN at the 1-based step S. */
double train_optimizer_step(struct nn_params *ps, struct nn_adamw *opt,
			    const struct nn_schedule *sched, int64_t step, double clip);
/* A step whose loss (loss_finite false) or gradients (train_optimizer_step's
 * NaN) were not finite: with skip, count it and go on (the caller made no
 * update); else exit 1 naming the step and the last good state (saved: the
 * step of the checkpoint in dir, -1 if none), which is left as it was. */
void train_nonfinite(const char *prog, int64_t step, bool loss_finite, bool skip,
		     const char *dir, int64_t saved, int64_t *skipped);

/* Redraw the token embedding of enc N(0, std) from its parameter seed, the padding row zero
 * (the library draws N(0, 1), as PyTorch; BERT-style models use 0.02). Returns a status. */
int train_init_embedding(struct nn_params *ps, const struct model_encoder *enc, double std);

/* Save the weights (and o's state, if not NULL) to path, the metadata "config" (cfg_json) and
 * "text" (text_json: how the run read text, reading_json; NULL: none) beside them. Exits
 * naming the file on error. */
void train_save_checkpoint(const char *prog, const char *path, const struct nn_params *ps,
			   const struct nn_adamw *o, const char *cfg_json, const char *text_json,
			   int64_t step);

/* Copy the encoder of checkpoint path -- an MLM or a classifier checkpoint -- into the
 * encoder enc of dst (a model built from the file's own encoder config): every parameter
 * model_encoder_has_param names (the embedding, the positions and their convolution, the
 * layers, the final norm, a layerwise projection), whole, bit for bit. The file is loaded into
 * a temporary model rebuilt from its config, so it is fully validated first. To report (NULL:
 * nothing) goes "encoder: N tensors from PATH", then a line "  unused: NAME SHAPE DTYPE (why)"
 * for each tensor of the file left out -- the MLM head, or a classifier's head -- and one for
 * its optimizer state ("optimizer.*", counted). Returns N, or a negative status with a message
 * naming the file and the tensor, dst unchanged, when the file lacks an encoder tensor of the
 * model, has it with another shape or dtype, or has an encoder tensor the model lacks. */
int train_copy_encoder(const char *path, const struct model_encoder *enc, struct nn_params *dst,
		       FILE *report);
/* Every tensor of the MLM checkpoint path into the parameters of the same names in dst, an
 * MLM model built from config like: the same layer kinds, or standard layers where like
 * projects (else an error naming both), width and vocabulary, to be trained on at a longer
 * (or the same) n, as in BERT's recipe of most steps at n = 128, the rest at 512. The first
 * rows of pos.weight take the checkpoint's rows, the rest keep their initialisation;
 * sequence projections (attn.E, attn.F, proj.*), whose shapes follow n, keep theirs where
 * the shapes differ or the checkpoint's layer had none, and *kept (optional) counts them. Any
 * other tensor missing or of another shape is an error naming it. Returns the number of
 * tensors copied, whole or in part, or a negative status. */
int train_grow_pretrained(const char *path, const struct model_config *like, struct nn_params *dst,
			  int *kept);

#endif
