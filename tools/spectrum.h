/* The normalised cumulative singular values of a matrix (the Linformer paper's
 * Figure 1): c_i = (s_1 + ... + s_i) / (s_1 + ... + s_r) for the singular
 * values s_1 >= ... >= s_r of an m x n matrix, r = min(m, n), computed with
 * LAPACK (LAPACKE_dgesdd, values only). */
#ifndef CFORMER_SPECTRUM_H
#define CFORMER_SPECTRUM_H

#include <stdint.h>

/* a: m x n row-major (overwritten); c: r = min(m, n) values. A zero matrix
 * gives c = 0. Returns 0, or -1 with a message in err (LAPACK's info, memory). */
int spectrum_cumulative(double *a, int64_t m, int64_t n, double *c, char *err, size_t errlen);

#endif
