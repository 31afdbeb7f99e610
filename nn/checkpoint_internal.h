/* Checkpoint internals shared by nn/checkpoint.c (header parsing, loading)
 * and nn/checkpoint_save.c, and the loading from memory exposed (not
 * installed) for the fuzz target. */
#ifndef CFORMER_CHECKPOINT_INTERNAL_H
#define CFORMER_CHECKPOINT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "nn.h"

/* A header over 100 MB is refused (as the safetensors reference does). */
#define NN_CHECKPOINT_HEADER_MAX 100000000ull

#define CKPT_META "__metadata__"
/* Tensors of optimizer state: AdamW's moments, the moving average; other
 * "optimizer." tensors are skipped by loaders that do not want them. */
#define CKPT_OPT "optimizer."
#define CKPT_OPT_M "optimizer.m."
#define CKPT_OPT_V "optimizer.v."
#define CKPT_OPT_EMA "optimizer.ema."

/* safetensors' dtype names by enum tensor_dtype. */
extern const char *const nn_ckpt_dtype_name[TENSOR_NDTYPES];
/* Record "op: file: message" (first error wins, as everywhere); returns status. */
int nn_ckpt_fail(int status, const char *op, const char *file, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The values a checkpoint may hold, for the tensor `name` of the shape (nbytes of dtype dt
 * at data; integer dtypes pass): finite, and AdamW's second moment ("optimizer.v.*") not
 * negative. Else an error "op: file: tensor 'name' holds N ... of M, the first at [i,j]:
 * value" with after appended (may be NULL). */
int nn_ckpt_check_values(const char *op, const char *file, const char *name, int ndim,
			 const int64_t *shape, const void *data, uint64_t nbytes,
			 enum tensor_dtype dt, const char *after);

/* nn_checkpoint_load_run on the len bytes of a whole safetensors file at buf;
 * name stands for the file in error messages. */
int nn_checkpoint_load_buffer(const void *buf, size_t len, const char *name, struct nn_params *ps,
			      struct nn_adamw *opt, struct nn_ema *ema, char **run_json,
			      int64_t *step);
/* nn_checkpoint_config on the first avail bytes of a safetensors file of
 * file_len bytes (avail covers at least the header, or is the whole file). */
char *nn_checkpoint_config_buffer(const void *buf, size_t avail, size_t file_len, const char *name);
/* nn_checkpoint_info on the same. */
int nn_checkpoint_info_buffer(const void *buf, size_t avail, size_t file_len, const char *name,
			      struct nn_checkpoint_info *out);

#endif
