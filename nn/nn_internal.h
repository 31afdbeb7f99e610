/* Memory-saving variants of nn modules used by models/. Not installed. */
#ifndef CFORMER_NN_INTERNAL_H
#define CFORMER_NN_INTERNAL_H

#include "nn.h"

/* nn_position_forward written into x's buffer where ag_add_reuse can (without
 * gradients, x itself comes back, updated): for an x the caller owns and
 * does not read again, such as an embedding lookup's output. */
struct tensor *nn_position_forward_reuse(const struct nn_position *m, struct tensor *x);

#endif
