/* Progress bar on a terminal, log lines otherwise (see progress.h). */
#define _POSIX_C_SOURCE 200809L
#include "progress.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nn.h"

#define BAR 24 /* characters of the bar itself */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void progress_init(struct progress *p, FILE *f, int64_t log_every)
{
	if (nn_dist_rank() != 0) /* rank 0 alone reports */
		f = NULL;
	*p = (struct progress){ .f = f, .tty = f && isatty(fileno(f)) == 1, .log_every = log_every };
}

const char *progress_duration(double s, char *buf, size_t len)
{
	if (!(s >= 0) || !isfinite(s)) {
		snprintf(buf, len, "--:--");
		return buf;
	}
	long t = (long)(s + 0.5);
	if (t >= 3600)
		snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
	else
		snprintf(buf, len, "%02ld:%02ld", t / 60, t % 60);
	return buf;
}

/* The fields shared by the bar and the log line. */
static void format_fields(const struct progress_stats *s, char *buf, size_t len)
{
	char el[32], eta[32], metric[48] = "";
	if (s->metric_name)
		snprintf(metric, sizeof metric, " %s %.3f", s->metric_name, s->metric);
	snprintf(buf, len, "epoch %lld/%lld loss %.4f%s %.0f tok/s %s<%s peak %.0f MB",
		 (long long)s->epoch, (long long)s->epochs, s->loss, metric, s->tokens_per_s,
		 progress_duration(s->elapsed_s, el, sizeof el),
		 progress_duration(s->eta_s, eta, sizeof eta), s->peak_mb);
}

static void clear_bar(struct progress *p)
{
	if (p->tty && p->width) {
		fprintf(p->f, "\r%*s\r", p->width, "");
		p->width = 0;
	}
}

void progress_update(struct progress *p, const struct progress_stats *s)
{
	char fields[256];
	if (!p->f)
		return;
	if (!p->tty) {
		if (p->log_every > 0 && (s->step % p->log_every == 0 || s->step == s->total)) {
			format_fields(s, fields, sizeof fields);
			fprintf(p->f, "step %lld/%lld %s\n", (long long)s->step,
				(long long)s->total, fields);
			fflush(p->f);
		}
		return;
	}
	double t = now();
	if (s->step != s->total && t - p->last_draw < 0.1)
		return;
	p->last_draw = t;
	char bar[BAR + 1];
	int fill = s->total > 0 ? (int)(BAR * s->step / s->total) : 0;
	for (int i = 0; i < BAR; i++)
		bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
	bar[BAR] = 0;
	format_fields(s, fields, sizeof fields);
	char line[400];
	int w = snprintf(line, sizeof line, "[%s] %lld/%lld %s", bar, (long long)s->step,
			 (long long)s->total, fields);
	fprintf(p->f, "\r%s", line);
	if (w < p->width)
		fprintf(p->f, "%*s", p->width - w, "");
	p->width = w;
	fflush(p->f);
}

void progress_printf(struct progress *p, const char *fmt, ...)
{
	clear_bar(p);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stdout, fmt, ap);
	va_end(ap);
	fflush(stdout);
}

void progress_end(struct progress *p)
{
	if (p->tty && p->width)
		fputc('\n', p->f);
	p->width = 0;
}
