/* Checkpoint loading from memory: the core of nn_checkpoint_load and
 * nn_checkpoint_config, exposed (not installed) for the fuzz target. */
#ifndef CFORMER_CHECKPOINT_INTERNAL_H
#define CFORMER_CHECKPOINT_INTERNAL_H

#include <stddef.h>

#include "nn.h"

/* A header over 100 MB is refused (as the safetensors reference does). */
#define NN_CHECKPOINT_HEADER_MAX 100000000ull

/* nn_checkpoint_load on the len bytes of a whole safetensors file at buf;
 * name stands for the file in error messages. */
int nn_checkpoint_load_buffer(const void *buf, size_t len, const char *name, struct nn_params *ps,
			      struct nn_adamw *opt, int64_t *step);
/* nn_checkpoint_config on the first avail bytes of a safetensors file of
 * file_len bytes (avail covers at least the header, or is the whole file). */
char *nn_checkpoint_config_buffer(const void *buf, size_t avail, size_t file_len, const char *name);

#endif
