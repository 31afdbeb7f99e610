/* Training progress for the example programs: a one-line progress bar
 * redrawn in place on a terminal, plain periodic log lines otherwise. */
#ifndef CFORMER_PROGRESS_H
#define CFORMER_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* What one update shows. metric_name may be NULL (no metric column). */
struct progress_stats {
	int64_t step, total;   /* optimizer steps done, of total */
	int64_t epoch, epochs; /* 1-based current epoch, of epochs */
	double loss;
	const char *metric_name; /* "acc", "ppl" */
	double metric;
	double tokens_per_s, elapsed_s, eta_s, peak_mb;
};

struct progress {
	FILE *f;
	bool tty;	   /* redraw a bar in place */
	int64_t log_every; /* steps between log lines when not a terminal */
	int width;	   /* characters of the last bar drawn (0: none on screen) */
	double last_draw;  /* seconds, to limit redraws to 10 a second */
};

/* tty: isatty(fileno(f)) unless forced by the caller. Silent on the ranks other
 * than 0 of a data-parallel run (nn_dist_rank). */
void progress_init(struct progress *p, FILE *f, int64_t log_every);
/* Draw the bar (terminal), or print a log line when step % log_every == 0
 * or step == total (not a terminal). */
void progress_update(struct progress *p, const struct progress_stats *s);
/* Print a message to stdout, clearing the bar first on a terminal (the bar
 * and the log lines go to f, usually stderr). */
void progress_printf(struct progress *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Leave the bar's line (terminal). */
void progress_end(struct progress *p);
/* "1:02:03" or "02:03" for seconds s (negative or unknown: "--:--"). */
const char *progress_duration(double s, char *buf, size_t len);

#endif
