/* CPU softmax / log-softmax and layer / RMS norm over the last dim.
 *
 * x may have any strides; out / y are contiguous. The norms' mean and rstd
 * are NULL or contiguous [rows] tensors of x's dtype. Statistics and softmax
 * sums accumulate in double. The norms' backward takes g of x's shape (any
 * strides) and writes a contiguous dx and [C] dw, db. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_iter.h"
#include "cpu_kernels.h"
#include "cpu_math.h"
#include "mem.h"

/* Rows: every index of the dims but the last. */
static int64_t row_count(const struct tensor *x)
{
	int64_t rows = 1;
	for (int d = 0; d < x->ndim - 1; d++)
		rows *= x->shape[d];
	return rows;
}

/* Offset (in elements) of the first element of row r of x. */
static int64_t row_offset(const struct tensor *x, int64_t r)
{
	int64_t off = 0;
	for (int d = x->ndim - 2; d >= 0; d--) {
		off += (r % x->shape[d]) * x->strides[d];
		r /= x->shape[d];
	}
	return off;
}

/* Sum of a contiguous f32 run in double (of (x - shift)^2 when square). */
CPU_MATH double sum_f32(const float *x, int64_t n, double shift, bool square)
{
	double s = 0;
	if (square) {
#pragma omp simd reduction(+ : s)
		for (int64_t i = 0; i < n; i++)
			s += (x[i] - shift) * (x[i] - shift);
	} else {
#pragma omp simd reduction(+ : s)
		for (int64_t i = 0; i < n; i++)
			s += x[i];
	}
	return s;
}

/* ---- softmax -------------------------------------------------------------- */

/* Exponentials are summed in float over blocks of SOFTMAX_BLOCK (so the loop
 * vectorises) and the block sums in double. Short blocks keep the float
 * rounding near 1e-8 relative even where the loop stays scalar (sanitizer
 * builds); 1024 reached 5e-7. */
#define SOFTMAX_BLOCK 64

/* Rows whose max is +-inf or that hold a NaN come out all NaN (as PyTorch:
 * a row of -inf has no distribution). */
CPU_WIDE_CLONES
static void softmax_row_f32(float *y, const float *x, int64_t n, bool logsm)
{
	float m = -INFINITY;
#pragma omp simd reduction(max : m)
	for (int64_t i = 0; i < n; i++)
		m = x[i] > m ? x[i] : m;
	double s = 0;
	for (int64_t i0 = 0; i0 < n; i0 += SOFTMAX_BLOCK) {
		int64_t i1 = n - i0 < SOFTMAX_BLOCK ? n : i0 + SOFTMAX_BLOCK;
		float sb = 0;
		if (logsm) {
#pragma omp simd reduction(+ : sb)
			for (int64_t i = i0; i < i1; i++)
				sb += exp_f32(x[i] - m);
		} else {
#pragma omp simd reduction(+ : sb)
			for (int64_t i = i0; i < i1; i++) {
				float e = exp_f32(x[i] - m);
				y[i] = e;
				sb += e;
			}
		}
		s += sb;
	}
	if (logsm) {
		double c = (double)m + log(s);
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			y[i] = (float)((double)x[i] - c);
	} else {
		float inv = (float)(1.0 / s);
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			y[i] *= inv;
	}
}

static void softmax_row_f64(double *y, const double *x, int64_t n, bool logsm)
{
	double m = -INFINITY, s = 0;
	for (int64_t i = 0; i < n; i++)
		m = x[i] > m ? x[i] : m;
	for (int64_t i = 0; i < n; i++) {
		double e = exp(x[i] - m);
		if (!logsm)
			y[i] = e;
		s += e;
	}
	double c = m + log(s), inv = 1.0 / s;
	for (int64_t i = 0; i < n; i++)
		y[i] = logsm ? x[i] - c : y[i] * inv;
}

static void softmax_row(char *y, const char *x, int64_t n, enum tensor_dtype dt, bool logsm)
{
	if (dt == TENSOR_F32)
		softmax_row_f32((float *)y, (const float *)x, n, logsm);
	else
		softmax_row_f64((double *)y, (const double *)x, n, logsm);
}

/* Bytes of strided rows gathered at once into a contiguous buffer. */
#define GATHER_BYTES (256 * 1024)
#define GATHER_ROWS 16

/* Copy rows r0..r0+nb of x (last-dim stride sx) into buf, rows of n. Rows
 * next to each other in memory (a transposed x) are read a line at a time. */
static void gather_rows(char *buf, const struct tensor *x, int64_t r0, int64_t nb, int64_t n,
			int64_t sx)
{
	int64_t es = (int64_t)tensor_dtype_size(x->dtype), off[GATHER_ROWS];
	const char *base = cpu_ptr(x);
	for (int64_t b = 0; b < nb; b++)
		off[b] = row_offset(x, r0 + b);
	if (es == 4) {
		const float *src = (const float *)base;
		float *dst = (float *)buf;
		for (int64_t k = 0; k < n; k++)
			for (int64_t b = 0; b < nb; b++)
				dst[b * n + k] = src[off[b] + k * sx];
	} else {
		const double *src = (const double *)base;
		double *dst = (double *)buf;
		for (int64_t k = 0; k < n; k++)
			for (int64_t b = 0; b < nb; b++)
				dst[b * n + k] = src[off[b] + k * sx];
	}
}

int cpu_softmax(struct tensor *out, const struct tensor *x, bool log)
{
	int64_t n = x->shape[x->ndim - 1], rows = row_count(x), sx = x->strides[x->ndim - 1];
	enum tensor_dtype dt = x->dtype;
	int64_t es = (int64_t)tensor_dtype_size(dt);
	bool par = rows * n > CPU_PAR_MIN;
	if (n == 0)
		return TENSOR_OK;
	if (sx == 1 || n == 1) {
#pragma omp parallel for num_threads(cpu_num_threads()) if (par)
		for (int64_t r = 0; r < rows; r++)
			softmax_row(cpu_ptr(out) + r * n * es, cpu_ptr(x) + row_offset(x, r) * es,
				    n, dt, log);
		return TENSOR_OK;
	}
	/* Strided rows: gather blocks of rows, then run the contiguous kernel. */
	int64_t nb = GATHER_BYTES / (n * es);
	nb = nb < 1 ? 1 : nb > GATHER_ROWS ? GATHER_ROWS : nb;
	int64_t blocks = (rows + nb - 1) / nb;
	bool failed = false;
#pragma omp parallel num_threads(cpu_num_threads()) if (par)
	{
		char *buf = tensor_host_malloc((size_t)(nb * n * es));
		if (!buf) {
#pragma omp atomic write
			failed = true;
		}
#pragma omp for
		for (int64_t k = 0; k < blocks; k++) {
			int64_t r0 = k * nb, cnt = rows - r0 < nb ? rows - r0 : nb;
			if (!buf)
				continue;
			gather_rows(buf, x, r0, cnt, n, sx);
			for (int64_t b = 0; b < cnt; b++)
				softmax_row(cpu_ptr(out) + (r0 + b) * n * es, buf + b * n * es, n,
					    dt, log);
		}
		free(buf);
	}
	if (failed)
		return tensor_error(TENSOR_ERR_NOMEM, "softmax: no memory for a %lld x %lld buffer",
				    (long long)nb, (long long)n);
	return TENSOR_OK;
}

/* dx = y (g - sum(g y)) over rows of n; the dot product summed as the
 * forward sums its exponentials (float blocks, double total). */
static void softmax_bw_row_f32(float *dx, const float *y, const float *g, int64_t n)
{
	double s = 0;
	for (int64_t i0 = 0; i0 < n; i0 += SOFTMAX_BLOCK) {
		int64_t i1 = n - i0 < SOFTMAX_BLOCK ? n : i0 + SOFTMAX_BLOCK;
		float sb = 0;
#pragma omp simd reduction(+ : sb)
		for (int64_t i = i0; i < i1; i++)
			sb += g[i] * y[i];
		s += sb;
	}
	float sf = (float)s;
#pragma omp simd
	for (int64_t i = 0; i < n; i++)
		dx[i] = y[i] * (g[i] - sf);
}

static void softmax_bw_row_f64(double *dx, const double *y, const double *g, int64_t n)
{
	double s = 0;
	for (int64_t i = 0; i < n; i++)
		s += g[i] * y[i];
	for (int64_t i = 0; i < n; i++)
		dx[i] = y[i] * (g[i] - s);
}

int cpu_softmax_backward(struct tensor *dx, const struct tensor *y, const struct tensor *g)
{
	int64_t n = y->ndim ? y->shape[y->ndim - 1] : 1, rows = n ? tensor_numel(y) / n : 0;
	bool f32 = y->dtype == TENSOR_F32;
#pragma omp parallel for num_threads(cpu_num_threads()) if (rows * n > CPU_PAR_MIN)
	for (int64_t r = 0; r < rows; r++) {
		if (f32)
			softmax_bw_row_f32((float *)cpu_ptr(dx) + r * n,
					   (const float *)cpu_ptr(y) + r * n,
					   (const float *)cpu_ptr(g) + r * n, n);
		else
			softmax_bw_row_f64((double *)cpu_ptr(dx) + r * n,
					   (const double *)cpu_ptr(y) + r * n,
					   (const double *)cpu_ptr(g) + r * n, n);
	}
	return TENSOR_OK;
}

/* ---- layer norm and RMS norm ---------------------------------------------- */

/* One norm: y = (x - mu) * rs * w + b with mu the row mean (0 for RMS norm)
 * and rs = 1 / sqrt(mean((x - mu)^2) + eps); w, b may be NULL. */
struct norm_job {
	bool rms;
	double eps;
	enum tensor_dtype dt;
	const struct tensor *w, *b;
};

/* The statistics in double, the row in float: x - mu as (x - mf) - ml with
 * mf + ml = mu (x - mf is exact near the mean), so rows with a large offset
 * and a small spread keep their precision. */
CPU_WIDE_CLONES
static void norm_row_f32(const struct norm_job *jb, float *y, const float *x, int64_t n, double *mu,
			 double *rs)
{
	const float *w = jb->w ? (const float *)cpu_ptr(jb->w) : NULL;
	const float *b = jb->b ? (const float *)cpu_ptr(jb->b) : NULL;
	double m = jb->rms ? 0 : sum_f32(x, n, 0, false) / (double)n;
	double r = 1.0 / sqrt(sum_f32(x, n, m, true) / (double)n + jb->eps);
	float mf = (float)m, ml = (float)(m - mf), rf = (float)r;
	if (w && b) {
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			y[i] = ((x[i] - mf) - ml) * rf * w[i] + b[i];
	} else if (w) {
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			y[i] = ((x[i] - mf) - ml) * rf * w[i];
	} else if (b) {
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			y[i] = ((x[i] - mf) - ml) * rf + b[i];
	} else {
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			y[i] = ((x[i] - mf) - ml) * rf;
	}
	*mu = m;
	*rs = r;
}

static void norm_row_any(const struct norm_job *jb, char *y, const char *x, int64_t sx, int64_t n,
			 double *mu, double *rs)
{
	enum tensor_dtype dt = jb->dt;
	int64_t es = (int64_t)tensor_dtype_size(dt), step = sx * es;
	const char *w = jb->w ? cpu_ptr(jb->w) : NULL, *b = jb->b ? cpu_ptr(jb->b) : NULL;
	int64_t ws = jb->w ? jb->w->strides[0] * es : 0, bs = jb->b ? jb->b->strides[0] * es : 0;
	double m = jb->rms ? 0 : cpu_sum_pairwise(x, n, step, dt, 0, false) / (double)n;
	double r = 1.0 / sqrt(cpu_sum_pairwise(x, n, step, dt, m, true) / (double)n + jb->eps);
	for (int64_t i = 0; i < n; i++) {
		double v = (cpu_load(x + i * step, dt) - m) * r;
		if (w)
			v *= cpu_load(w + i * ws, dt);
		if (b)
			v += cpu_load(b + i * bs, dt);
		cpu_store(y + i * es, dt, v);
	}
	*mu = m;
	*rs = r;
}

static int norm_rows(const struct norm_job *jb, struct tensor *y, struct tensor *mean,
		     struct tensor *rstd, const struct tensor *x)
{
	int64_t n = x->shape[x->ndim - 1], rows = row_count(x), sx = x->strides[x->ndim - 1];
	int64_t es = (int64_t)tensor_dtype_size(jb->dt);
	bool fast = jb->dt == TENSOR_F32 && (sx == 1 || n <= 1) &&
		    (!jb->w || jb->w->strides[0] == 1 || n <= 1) &&
		    (!jb->b || jb->b->strides[0] == 1 || n <= 1);
#pragma omp parallel for num_threads(cpu_num_threads()) if (rows * n > CPU_PAR_MIN)
	for (int64_t r = 0; r < rows; r++) {
		const char *xr = cpu_ptr(x) + row_offset(x, r) * es;
		char *yr = cpu_ptr(y) + r * n * es;
		double mu, rs;
		if (fast)
			norm_row_f32(jb, (float *)yr, (const float *)xr, n, &mu, &rs);
		else
			norm_row_any(jb, yr, xr, sx, n, &mu, &rs);
		if (mean)
			cpu_store(cpu_ptr(mean) + r * mean->strides[0] * es, jb->dt, mu);
		if (rstd)
			cpu_store(cpu_ptr(rstd) + r * rstd->strides[0] * es, jb->dt, rs);
	}
	return TENSOR_OK;
}

int cpu_layer_norm(struct tensor *y, struct tensor *mean, struct tensor *rstd,
		   const struct tensor *x, const struct tensor *w, const struct tensor *b,
		   double eps)
{
	struct norm_job jb = { .rms = false, .eps = eps, .dt = x->dtype, .w = w, .b = b };
	return norm_rows(&jb, y, mean, rstd, x);
}

int cpu_rms_norm(struct tensor *y, struct tensor *rstd, const struct tensor *x,
		 const struct tensor *w, double eps)
{
	struct norm_job jb = { .rms = true, .eps = eps, .dt = x->dtype, .w = w, .b = NULL };
	return norm_rows(&jb, y, NULL, rstd, x);
}

/* ---- norm backward -------------------------------------------------------- */

/* Per row, with xhat = (x - mu) * rs (mu = 0 for RMS norm) and dxhat = g * w:
 *   dx = rs * (dxhat - xhat * mean(dxhat * xhat) - mean(dxhat))
 * (no mean(dxhat) term for RMS norm), the means in double. dw and db add the
 * row's g * xhat and g into the thread's partial sums (double), which are
 * added up in thread order at the end, so results do not depend on timing. */
struct nbw_job {
	bool rms, xc, gc, sc; /* contiguous x, g and statistics */
	enum tensor_dtype dt;
	int64_t n;
	const struct tensor *g, *x, *mean, *rstd, *w;
	const float *wf; /* f32: w as a unit-stride run (ones without w) */
	struct tensor *dx;
};

/* Offset of row r of t, whose rows are n apart when t is contiguous. */
static inline int64_t row_at(const struct tensor *t, bool contig, int64_t r, int64_t n)
{
	return contig ? r * n : row_offset(t, r);
}

/* One f32 row with unit-stride runs; dx, dw, db NULL when not wanted. */
CPU_WIDE_CLONES
static void nbw_row_f32(const float *g, const float *x, const float *w, float *dx, double *dw,
			double *db, int64_t n, float mu, float rs, bool rms)
{
	if (dx) {
		double sa = 0, sb = 0;
#pragma omp simd reduction(+ : sa, sb)
		for (int64_t i = 0; i < n; i++) {
			float xh = (x[i] - mu) * rs, d = g[i] * w[i];
			sa += d * xh;
			sb += d;
		}
		float a = (float)(sa / (double)n), b = rms ? 0.0f : (float)(sb / (double)n);
#pragma omp simd
		for (int64_t i = 0; i < n; i++) {
			float xh = (x[i] - mu) * rs, d = g[i] * w[i];
			dx[i] = (d - xh * a - b) * rs;
		}
	}
	if (dw) {
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			dw[i] += g[i] * ((x[i] - mu) * rs);
	}
	if (db) {
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			db[i] += g[i];
	}
}

/* One row of any float dtype and strides (in elements), in double. */
static void nbw_row_any(const struct nbw_job *jb, const char *g, int64_t sg, const char *x,
			int64_t sx, char *dx, double *dw, double *db, double mu, double rs)
{
	enum tensor_dtype dt = jb->dt;
	int64_t n = jb->n, es = (int64_t)tensor_dtype_size(dt);
	const char *w = jb->w ? cpu_ptr(jb->w) : NULL;
	int64_t ws = w ? jb->w->strides[0] * es : 0;
	sg *= es;
	sx *= es;
	if (dx) {
		double sa = 0, sb = 0;
		for (int64_t i = 0; i < n; i++) {
			double xh = (cpu_load(x + i * sx, dt) - mu) * rs;
			double d = cpu_load(g + i * sg, dt) * (w ? cpu_load(w + i * ws, dt) : 1);
			sa += d * xh;
			sb += d;
		}
		double a = sa / (double)n, b = jb->rms ? 0 : sb / (double)n;
		for (int64_t i = 0; i < n; i++) {
			double xh = (cpu_load(x + i * sx, dt) - mu) * rs;
			double d = cpu_load(g + i * sg, dt) * (w ? cpu_load(w + i * ws, dt) : 1);
			cpu_store(dx + i * es, dt, (d - xh * a - b) * rs);
		}
	}
	for (int64_t i = 0; (dw || db) && i < n; i++) {
		double gi = cpu_load(g + i * sg, dt);
		if (dw)
			dw[i] += gi * ((cpu_load(x + i * sx, dt) - mu) * rs);
		if (db)
			db[i] += gi;
	}
}

/* Row r; buf (f32 only, 2n floats) gathers strided x and g rows. */
static void nbw_row(const struct nbw_job *jb, int64_t r, float *buf, double *dw, double *db)
{
	enum tensor_dtype dt = jb->dt;
	int64_t n = jb->n, es = (int64_t)tensor_dtype_size(dt);
	int64_t sx = jb->x->strides[jb->x->ndim - 1], sg = jb->g->strides[jb->g->ndim - 1];
	const char *xr = cpu_ptr(jb->x) + row_at(jb->x, jb->xc, r, n) * es;
	const char *gr = cpu_ptr(jb->g) + row_at(jb->g, jb->gc, r, n) * es;
	char *dxr = jb->dx ? cpu_ptr(jb->dx) + r * n * es : NULL;
	double mu =
	    jb->mean ? cpu_load(cpu_ptr(jb->mean) + row_at(jb->mean, jb->sc, r, 1) * es, dt) : 0;
	double rs = cpu_load(cpu_ptr(jb->rstd) + row_at(jb->rstd, jb->sc, r, 1) * es, dt);
	if (dt != TENSOR_F32) {
		nbw_row_any(jb, gr, sg, xr, sx, dxr, dw, db, mu, rs);
		return;
	}
	const float *xf = (const float *)xr, *gf = (const float *)gr;
	if (buf && sx != 1) {
		for (int64_t i = 0; i < n; i++)
			buf[i] = xf[i * sx];
		xf = buf;
	}
	if (buf && sg != 1) {
		for (int64_t i = 0; i < n; i++)
			buf[n + i] = gf[i * sg];
		gf = buf + n;
	}
	nbw_row_f32(gf, xf, jb->wf, (float *)dxr, dw, db, n, (float)mu, (float)rs, jb->rms);
}

static int nbw_nomem(const struct tensor *x, int nt, int64_t n)
{
	char bx[128];
	return tensor_error(TENSOR_ERR_NOMEM,
			    "norm_backward: no memory for %d per-thread buffers of %lld elements "
			    "(x %s)",
			    nt, (long long)n, tensor_shape_str(x, bx, sizeof bx));
}

int cpu_norm_backward(struct tensor *dx, struct tensor *dw, struct tensor *db,
		      const struct tensor *g, const struct tensor *x, const struct tensor *mean,
		      const struct tensor *rstd, const struct tensor *w)
{
	enum tensor_dtype dt = x->dtype;
	int64_t n = x->shape[x->ndim - 1], rows = row_count(x), es = (int64_t)tensor_dtype_size(dt);
	int64_t sx = x->strides[x->ndim - 1], sg = g->strides[g->ndim - 1];
	bool par = rows * n > CPU_PAR_MIN, f32 = dt == TENSOR_F32;
	bool gather = f32 && n > 1 && (sx != 1 || sg != 1);
	bool wcopy = f32 && !(w && (w->strides[0] == 1 || n == 1));
	int nt = par ? cpu_num_threads() : 1, nparts = (dw != NULL) + (db != NULL);
	int64_t ld = (n + 7) & ~(int64_t)7; /* one run of partial sums, whole cache lines */
	if (n == 0)
		return TENSOR_OK;
	double *part =
	    nparts ? tensor_host_calloc((size_t)(nt * nparts * ld), sizeof(double)) : NULL;
	float *wbuf = wcopy ? tensor_host_malloc(sizeof(float) * (size_t)n) : NULL;
	if ((nparts && !part) || (wcopy && !wbuf)) {
		free(part);
		free(wbuf);
		return nbw_nomem(x, nt, n);
	}
	for (int64_t i = 0; wbuf && i < n; i++)
		wbuf[i] = w ? (float)cpu_load(cpu_ptr(w) + i * w->strides[0] * es, dt) : 1.0f;
	const float *wf = wbuf;
	if (f32 && !wcopy)
		wf = (const float *)cpu_ptr(w); /* unit stride */
	struct nbw_job jb = { .rms = !mean,
			      .xc = tensor_is_contiguous(x),
			      .gc = tensor_is_contiguous(g),
			      .sc = tensor_is_contiguous(rstd) &&
				    (!mean || tensor_is_contiguous(mean)),
			      .dt = dt,
			      .n = n,
			      .g = g,
			      .x = x,
			      .mean = mean,
			      .rstd = rstd,
			      .w = w,
			      .wf = wf,
			      .dx = dx };
	bool failed = false;
#pragma omp parallel num_threads(nt) if (par)
	{
		int t = omp_get_thread_num();
		double *pdw = dw && part ? part + (int64_t)t * nparts * ld : NULL;
		double *pdb = db && part ? part + ((int64_t)t * nparts + (dw != NULL)) * ld : NULL;
		float *buf = gather ? tensor_host_malloc(sizeof(float) * 2 * (size_t)n) : NULL;
		if (gather && !buf) {
#pragma omp atomic write
			failed = true;
		}
#pragma omp for schedule(static)
		for (int64_t r = 0; r < rows; r++)
			if (buf || !gather)
				nbw_row(&jb, r, buf, pdw, pdb);
		free(buf);
	}
	for (int64_t i = 0; !failed && part && i < n; i++) {
		for (int k = 0; k < nparts; k++) {
			double s = 0;
			for (int t = 0; t < nt; t++)
				s += part[((int64_t)t * nparts + k) * ld + i];
			cpu_store(cpu_ptr(k == 0 && dw ? dw : db) + i * es, dt, s);
		}
	}
	free(part);
	free(wbuf);
	return failed ? nbw_nomem(x, nt, n) : TENSOR_OK;
}
