#include "cpu_kernels.h"
int cpu_index_select(struct tensor *out, const struct tensor *src, int dim, const struct tensor *idx) { (void)out;(void)src;(void)dim;(void)idx; return tensor_error(TENSOR_ERR_UNSUPPORTED, "stub"); }
int cpu_index_add(struct tensor *dst, int dim, const struct tensor *idx, const struct tensor *src) { (void)dst;(void)src;(void)dim;(void)idx; return tensor_error(TENSOR_ERR_UNSUPPORTED, "stub"); }
int cpu_gather(struct tensor *out, const struct tensor *src, int dim, const struct tensor *idx) { (void)out;(void)src;(void)dim;(void)idx; return tensor_error(TENSOR_ERR_UNSUPPORTED, "stub"); }
int cpu_scatter_add(struct tensor *dst, int dim, const struct tensor *idx, const struct tensor *src) { (void)dst;(void)src;(void)dim;(void)idx; return tensor_error(TENSOR_ERR_UNSUPPORTED, "stub"); }
