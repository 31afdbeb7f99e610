/* Metrics as CSV for the example programs: a header of column names, then one
 * row per call, flushed at once (so a killed run keeps its rows). */
#ifndef CFORMER_CSVLOG_H
#define CFORMER_CSVLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct csvlog {
	FILE *f;
	int ncols;
};

/* Open path with the columns cols[0..ncols). append keeps an existing file
 * whose header is the same (else an error) and adds rows to it; otherwise
 * the file is created anew. Returns 0, or -1 with a message in err. */
int csvlog_open(struct csvlog *c, const char *path, const char *const *cols, int ncols, bool append,
		char *err, size_t errlen);
/* Keep the header and the rows of path whose first field (the step) is at
 * most step, dropping the rows a killed run wrote after its last checkpoint
 * (a resume logs those steps again); *last (if not NULL) receives field col
 * of the last row kept, where it is a number. The file is replaced
 * atomically; a missing file is not an error. Returns 0, or -1 with a message
 * in err. */
int csvlog_drop_after(const char *path, long long step, int col, double *last, char *err,
		      size_t errlen);
/* One row from a printf format (fields separated by commas; an empty field
 * for a missing value). Returns 0, or -1 if the row has the wrong number of
 * fields or cannot be written. */
int csvlog_row(struct csvlog *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void csvlog_close(struct csvlog *c);

#endif
