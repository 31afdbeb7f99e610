/* Checkpoint internals shared by nn/checkpoint.c (loading),
 * nn/checkpoint_header.c (header parsing) and nn/checkpoint_save.c, and the loading from memory exposed (not
 * installed) for the fuzz target. */
#ifndef CFORMER_CHECKPOINT_INTERNAL_H
#define CFORMER_CHECKPOINT_INTERNAL_H

#include <stdbool.h>
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

/* 2^53: larger JSON numbers are not exact in cJSON. */
#define CKPT_MAX_EXACT 9007199254740992.0

/* "[2,3]" of a shape into buf[128]. */
const char *nn_ckpt_shape_str(int ndim, const int64_t *shape, char *buf);

/* ---- the header (checkpoint_header.c) ---- */

struct cJSON;

/* A tensor of the header. */
struct ckpt_entry {
	const char *name; /* owned by the cJSON tree */
	enum tensor_dtype dtype;
	int ndim;
	int64_t shape[TENSOR_MAX_DIMS];
	uint64_t begin, end; /* byte offsets in the data region */
	bool used;
};

/* A parsed header: its entries sorted by name; data and data_len the data region where
 * the whole file was read. */
struct ckpt_header {
	struct cJSON *root;
	const struct cJSON *meta; /* __metadata__ or NULL */
	struct ckpt_entry *e;	  /* sorted by name */
	int n;
	const uint8_t *data; /* the data region (NULL when only the header was read) */
	uint64_t data_len;
};

/* Parse and validate the header of a file of file_len bytes whose first avail bytes are at
 * buf (avail == file_len, or at least the whole header); errors name op and file, and
 * leave *h empty. */
int ckpt_header_parse(const char *op, const char *file, const uint8_t *buf, size_t avail,
		      uint64_t file_len, struct ckpt_header *h);
void ckpt_header_free(struct ckpt_header *h);
/* The entry called name, or NULL. */
struct ckpt_entry *ckpt_find(const struct ckpt_header *h, const char *name);
/* A metadata value as a decimal integer in [0, max]; *found false if absent. */
int ckpt_meta_uint(const char *op, const char *file, const struct ckpt_header *h, const char *key,
		   uint64_t max, uint64_t *out, bool *found);
/* The little-endian 64-bit integer at p (the header's length). */
uint64_t ckpt_le64(const uint8_t *p);

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
