#include "cpu_kernels.h"
int cpu_unary(enum tensor_unary_op op, struct tensor *out, const struct tensor *x, double alpha) { (void)op;(void)out;(void)x;(void)alpha; return tensor_error(TENSOR_ERR_UNSUPPORTED, "stub"); }
int cpu_binary(enum tensor_binary_op op, struct tensor *out, const struct tensor *a, const struct tensor *b) { (void)op;(void)out;(void)a;(void)b; return tensor_error(TENSOR_ERR_UNSUPPORTED, "stub"); }
int cpu_where(struct tensor *out, const struct tensor *cond, const struct tensor *a, const struct tensor *b) { (void)out;(void)cond;(void)a;(void)b; return tensor_error(TENSOR_ERR_UNSUPPORTED, "stub"); }
