/* Normalised cumulative singular values with LAPACKE (spectrum.h). */
#include <lapacke.h>
#include <stdio.h>
#include <stdlib.h>

#include "spectrum.h"

int spectrum_cumulative(double *a, int64_t m, int64_t n, double *c, char *err, size_t errlen)
{
	int64_t r = m < n ? m : n;
	double *s = malloc(sizeof *s * (size_t)(r > 0 ? r : 1));
	if (!s) {
		snprintf(err, errlen, "cannot allocate %lld singular values", (long long)r);
		return -1;
	}
	/* row-major m x n is column-major n x m, the transpose: the same singular values,
	 * and no copy (LAPACKE's row-major path transposes) */
	lapack_int info = LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'N', (lapack_int)n, (lapack_int)m, a,
					 (lapack_int)(n > 0 ? n : 1), s, NULL, 1, NULL, 1);
	if (info != 0) {
		snprintf(err, errlen, "LAPACKE_dgesdd of a %lld x %lld matrix: info %d",
			 (long long)m, (long long)n, (int)info);
		free(s);
		return -1;
	}
	double total = 0, run = 0;
	for (int64_t i = 0; i < r; i++)
		total += s[i];
	for (int64_t i = 0; i < r; i++) {
		run += s[i];
		c[i] = total > 0 ? run / total : 0;
	}
	free(s);
	return 0;
}
