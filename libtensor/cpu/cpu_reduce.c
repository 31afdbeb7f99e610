/* CPU reductions along one dim: sum, max, min and argmax (the reduce slot). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_iter.h"
#include "cpu_kernels.h"
#include "cpu_math.h"
#include "mem.h"

/* Outputs handled together by one task (a tile of one loop row of out):
 * few when each output folds a run of x, a wide stretch when x is added row
 * by row, so that x is read in long sequential runs. */
#define ROW_TILE 256
#define COL_TILE 4096
/* Most pieces one reduction run is split into when outputs are too few. */
#define MAX_SPLIT 64
/* f64 sums added row by row fold this many rows apart before adding them in, so that the
 * rounding error grows with SUM_CHUNK + n / SUM_CHUNK rather than n. */
#define SUM_CHUNK 64

/* Running states of a tile's outputs: f for float dtypes (sums in double),
 * i for integer ones (sums wrap as uint64), idx the index of the current
 * max/min (-1 before the first element); chunk, a chunk's f64 sums. */
struct accs {
	double *f, *chunk;
	int64_t *i, *idx;
};

struct red_job {
	enum tensor_reduce_op op;
	enum tensor_dtype dt;
	const struct cpu_loop *l; /* over out's shape: operand 0 out, 1 x at index 0 of dim */
	int64_t n, sx;		  /* length and stride of the reduced dim */
	bool by_column;		  /* x's rows are contiguous along out: add row by row */
	int64_t tile;		  /* outputs per tile */
};

/* States for k tiles of w outputs in one allocation (freed with free(a[0].f)). */
static bool accs_alloc(struct accs *a, int64_t k, int64_t w)
{
	char *mem = tensor_host_malloc((size_t)(k * w) * 32 + 1);
	a[0].f = NULL;
	if (!mem)
		return false;
	for (int64_t u = 0; u < k; u++) {
		a[u].f = (double *)(mem + (size_t)(u * w) * 32);
		a[u].chunk = a[u].f + w;
		a[u].i = (int64_t *)(a[u].chunk + w);
		a[u].idx = a[u].i + w;
	}
	return true;
}

static bool is_int(enum tensor_dtype dt)
{
	return dt == TENSOR_I32 || dt == TENSOR_I64;
}

static void accs_init(struct accs *a, int64_t w)
{
	for (int64_t j = 0; j < w; j++) {
		a->f[j] = 0;
		a->i[j] = 0;
		a->idx[j] = -1;
	}
}

/* Fold value v at index k into output j. NaN counts as the maximum (and the
 * minimum) and the first one wins, as the first max/min does. */
static inline void acc_float(enum tensor_reduce_op op, struct accs *a, int64_t j, double v,
			     int64_t k)
{
	double cur = a->f[j];
	bool take;
	if (op == TENSOR_RED_SUM) {
		a->f[j] = cur + v;
		return;
	}
	if (op == TENSOR_RED_MIN)
		take = a->idx[j] < 0 || v < cur || (isnan(v) && !isnan(cur));
	else
		take = a->idx[j] < 0 || v > cur || (isnan(v) && !isnan(cur));
	if (take) {
		a->f[j] = v;
		a->idx[j] = k;
	}
}

static inline void acc_int(enum tensor_reduce_op op, struct accs *a, int64_t j, int64_t v,
			   int64_t k)
{
	int64_t cur = a->i[j];
	bool take;
	if (op == TENSOR_RED_SUM) {
		a->i[j] = (int64_t)((uint64_t)cur + (uint64_t)v);
		return;
	}
	if (op == TENSOR_RED_MIN)
		take = a->idx[j] < 0 || v < cur;
	else
		take = a->idx[j] < 0 || v > cur;
	if (take) {
		a->i[j] = v;
		a->idx[j] = k;
	}
}

/* Fold the partial states p (a later piece of the reduced dim) into a. */
static void accs_merge(const struct red_job *jb, struct accs *a, const struct accs *p, int64_t w)
{
	for (int64_t j = 0; j < w; j++) {
		if (jb->op == TENSOR_RED_SUM) {
			a->f[j] += p->f[j];
			a->i[j] = (int64_t)((uint64_t)a->i[j] + (uint64_t)p->i[j]);
		} else if (p->idx[j] >= 0) {
			if (is_int(jb->dt))
				acc_int(jb->op, a, j, p->i[j], p->idx[j]);
			else
				acc_float(jb->op, a, j, p->f[j], p->idx[j]);
		}
	}
}

/* Sum of a contiguous f32 run in double (`omp simd` lets gcc vectorise the
 * reduction without -ffast-math). */
static double sum_f32(const float *x, int64_t n)
{
	double s = 0;
#pragma omp simd reduction(+ : s)
	for (int64_t i = 0; i < n; i++)
		s += x[i];
	return s;
}

/* Max (or min) of a contiguous f32 run of n >= 1 elements and the index of
 * its first occurrence (when want_index). Returns false if the run holds a
 * NaN, which the caller then scans for. */
static bool extreme_f32(const float *x, int64_t n, bool is_min, bool want_index, float *m,
			int64_t *at)
{
	float best = x[0];
	int nan = 0;
	if (is_min) {
#pragma omp simd reduction(min : best) reduction(| : nan)
		for (int64_t i = 0; i < n; i++) {
			best = x[i] < best ? x[i] : best;
			nan |= x[i] != x[i];
		}
	} else {
#pragma omp simd reduction(max : best) reduction(| : nan)
		for (int64_t i = 0; i < n; i++) {
			best = x[i] > best ? x[i] : best;
			nan |= x[i] != x[i];
		}
	}
	if (nan)
		return false;
	*m = best;
	*at = 0;
	if (want_index)
		while (x[*at] != best)
			(*at)++;
	return true;
}

double cpu_sum_pairwise(const char *x, int64_t n, int64_t step, enum tensor_dtype dt, double shift,
			bool square)
{
	if (n > 32) {
		int64_t h = n / 2;
		return cpu_sum_pairwise(x, h, step, dt, shift, square) +
		       cpu_sum_pairwise(x + h * step, n - h, step, dt, shift, square);
	}
	double s = 0;
	for (int64_t i = 0; i < n; i++) {
		double v = cpu_load(x + i * step, dt) - shift;
		s += square ? v * v : v;
	}
	return s;
}

/* Fold n elements at p (stride s), indices k0.., into output j. */
static void fold_run(const struct red_job *jb, const char *p, int64_t n, int64_t s, int64_t k0,
		     struct accs *a, int64_t j)
{
	enum tensor_dtype dt = jb->dt;
	enum tensor_reduce_op op = jb->op;
	if (n <= 0)
		return;
	if (dt == TENSOR_F32 && s == 1) {
		const float *x = (const float *)p;
		float m;
		int64_t at;
		if (op == TENSOR_RED_SUM) {
			a->f[j] += sum_f32(x, n);
			return;
		}
		if (extreme_f32(x, n, op == TENSOR_RED_MIN, op == TENSOR_RED_ARGMAX, &m, &at)) {
			acc_float(op, a, j, m, k0 + at);
			return;
		}
	}
	int64_t step = s * (int64_t)tensor_dtype_size(dt);
	if (dt == TENSOR_F64 && op == TENSOR_RED_SUM)
		a->f[j] += cpu_sum_pairwise(p, n, step, dt, 0, false);
	else if (is_int(dt))
		for (int64_t i = 0; i < n; i++)
			acc_int(op, a, j, cpu_load_index(p + i * step, dt), k0 + i);
	else
		for (int64_t i = 0; i < n; i++)
			acc_float(op, a, j, cpu_load(p + i * step, dt), k0 + i);
}

/* m ? a : b for a mask m of 0 or -1: gcc does not if-convert float selects
 * under the default -ftrapping-math, which would leave the loop scalar. */
static inline double f64_select(int64_t m, double a, double b)
{
	int64_t ia, ib;
	memcpy(&ia, &a, sizeof ia);
	memcpy(&ib, &b, sizeof ib);
	ia = (ia & m) | (ib & ~m);
	memcpy(&a, &ia, sizeof a);
	return a;
}

/* f32 max/min/argmax of row k (contiguous, w outputs) into the states. */
static void fold_row_extreme_f32(enum tensor_reduce_op op, const float *x, int64_t w, int64_t k,
				 struct accs *a)
{
	double *f = a->f;
	int64_t *idx = a->idx;
	if (idx[0] < 0) { /* every state of a tile sees the same rows */
		for (int64_t j = 0; j < w; j++) {
			f[j] = x[j];
			idx[j] = k;
		}
		return;
	}
	if (op == TENSOR_RED_MIN) {
#pragma omp simd
		for (int64_t j = 0; j < w; j++) {
			double v = x[j], c = f[j];
			int64_t take = -(int64_t)((v < c) | ((v != v) & (c == c)));
			f[j] = f64_select(take, v, c);
			idx[j] = (k & take) | (idx[j] & ~take);
		}
	} else {
#pragma omp simd
		for (int64_t j = 0; j < w; j++) {
			double v = x[j], c = f[j];
			int64_t take = -(int64_t)((v > c) | ((v != v) & (c == c)));
			f[j] = f64_select(take, v, c);
			idx[j] = (k & take) | (idx[j] & ~take);
		}
	}
}

/* Fold the contiguous row p[0..w) (element k of the reduced dim) into
 * outputs 0..w. Built for AVX2 and AVX-512 too: f32 rows widen to double
 * four or eight at a time. */
CPU_WIDE_CLONES
static void fold_row(const struct red_job *jb, const char *p, int64_t w, int64_t k, struct accs *a)
{
	enum tensor_dtype dt = jb->dt;
	size_t es = tensor_dtype_size(dt);
	if (dt == TENSOR_F32 && jb->op == TENSOR_RED_SUM) {
		const float *x = (const float *)p;
		double *f = a->f;
#pragma omp simd
		for (int64_t j = 0; j < w; j++)
			f[j] += x[j];
	} else if (dt == TENSOR_F32) {
		fold_row_extreme_f32(jb->op, (const float *)p, w, k, a);
	} else if (is_int(dt)) {
		for (int64_t j = 0; j < w; j++)
			acc_int(jb->op, a, j, cpu_load_index(p + j * es, dt), k);
	} else {
		for (int64_t j = 0; j < w; j++)
			acc_float(jb->op, a, j, cpu_load(p + j * es, dt), k);
	}
}

/* Fold elements [lo, hi) of the reduced dim into the tile (loop row r,
 * outputs j0..j0+w). */
static void tile_fold(const struct red_job *jb, int64_t r, int64_t j0, int64_t w, int64_t lo,
		      int64_t hi, struct accs *a)
{
	char *p[2];
	cpu_loop_row(jb->l, r, p);
	int64_t es = (int64_t)tensor_dtype_size(jb->dt), s1 = cpu_loop_stride(jb->l, 1);
	const char *base = p[1] + j0 * s1 * es;
	if (jb->by_column && jb->dt == TENSOR_F64 && jb->op == TENSOR_RED_SUM) {
		for (int64_t c = lo; c < hi; c += SUM_CHUNK) {
			int64_t e = hi - c < SUM_CHUNK ? hi : c + SUM_CHUNK;
			memset(a->chunk, 0, (size_t)w * sizeof(double));
			for (int64_t i = c; i < e; i++) {
				const double *x = (const double *)(base + i * jb->sx * es);
				for (int64_t j = 0; j < w; j++)
					a->chunk[j] += x[j];
			}
			for (int64_t j = 0; j < w; j++)
				a->f[j] += a->chunk[j];
		}
	} else if (jb->by_column) {
		for (int64_t i = lo; i < hi; i++)
			fold_row(jb, base + i * jb->sx * es, w, i, a);
	} else {
		for (int64_t j = 0; j < w; j++)
			fold_run(jb, base + (j * s1 + lo * jb->sx) * es, hi - lo, jb->sx, lo, a, j);
	}
}

static void tile_store(const struct red_job *jb, int64_t r, int64_t j0, int64_t w,
		       const struct accs *a, const struct tensor *out)
{
	char *p[2];
	cpu_loop_row(jb->l, r, p);
	int64_t es = (int64_t)jb->l->esize[0], s0 = cpu_loop_stride(jb->l, 0);
	for (int64_t j = 0; j < w; j++) {
		char *o = p[0] + (j0 + j) * s0 * es;
		if (jb->op == TENSOR_RED_ARGMAX)
			*(int64_t *)o = a->idx[j];
		else if (out->dtype == TENSOR_I64)
			*(int64_t *)o = a->i[j];
		else if (out->dtype == TENSOR_I32)
			*(int32_t *)o = (int32_t)a->i[j];
		else
			cpu_store(o, out->dtype, a->f[j]);
	}
}

static int64_t tile_width(const struct red_job *jb, int64_t t, int64_t ntj, int64_t *j0)
{
	*j0 = (t % ntj) * jb->tile;
	return jb->l->n - *j0 < jb->tile ? jb->l->n - *j0 : jb->tile;
}

/* Each thread folds whole tiles with its own scratch states. */
static int reduce_tiles(const struct red_job *jb, const struct tensor *out, int64_t tiles,
			int64_t ntj, bool par)
{
	bool failed = false;
#pragma omp parallel num_threads(cpu_num_threads()) if (par)
	{
		struct accs a;
		bool ok = accs_alloc(&a, 1, jb->tile);
		if (!ok) {
#pragma omp atomic write
			failed = true;
		}
#pragma omp for
		for (int64_t t = 0; t < tiles; t++) {
			int64_t j0, w = tile_width(jb, t, ntj, &j0);
			if (!ok)
				continue;
			accs_init(&a, w);
			tile_fold(jb, t / ntj, j0, w, 0, jb->n, &a);
			tile_store(jb, t / ntj, j0, w, &a, out);
		}
		free(a.f);
	}
	return failed ? tensor_error(TENSOR_ERR_NOMEM, "reduce: no memory for partial results")
		      : TENSOR_OK;
}

/* Few tiles, long reductions: split the reduced dim into pieces folded in
 * parallel, then fold the pieces in order (so the first max still wins). */
static int reduce_split(const struct red_job *jb, const struct tensor *out, int64_t tiles,
			int64_t ntj, int64_t nsplit)
{
	int64_t n = jb->n, units = tiles * nsplit;
	struct accs *part = tensor_host_malloc(sizeof(struct accs) * (size_t)units);
	if (!part || !accs_alloc(part, units, jb->tile)) {
		free(part);
		return tensor_error(TENSOR_ERR_NOMEM, "reduce: no memory for partial results");
	}
#pragma omp parallel for num_threads(cpu_num_threads())
	for (int64_t u = 0; u < units; u++) {
		int64_t t = u / nsplit, k = u % nsplit, j0;
		int64_t w = tile_width(jb, t, ntj, &j0);
		accs_init(&part[u], w);
		tile_fold(jb, t / ntj, j0, w, n * k / nsplit, n * (k + 1) / nsplit, &part[u]);
	}
	for (int64_t t = 0; t < tiles; t++) {
		int64_t j0, w = tile_width(jb, t, ntj, &j0);
		for (int64_t k = 1; k < nsplit; k++)
			accs_merge(jb, &part[t * nsplit], &part[t * nsplit + k], w);
		tile_store(jb, t / ntj, j0, w, &part[t * nsplit], out);
	}
	free(part[0].f);
	free(part);
	return TENSOR_OK;
}

int cpu_reduce(enum tensor_reduce_op op, struct tensor *out, const struct tensor *x, int dim)
{
	int64_t n = x->shape[dim];
	if (n == 0 && op != TENSOR_RED_SUM && tensor_numel(out) > 0)
		return tensor_error(TENSOR_ERR_SHAPE, "reduce: dim %d to reduce is empty", dim);
	/* x at index 0 of dim has out's shape: loop over both together. */
	struct tensor x0 = *x;
	x0.shape[dim] = 1;
	const struct tensor *ts[2] = { out, &x0 };
	struct cpu_loop l;
	cpu_loop_init(&l, 2, ts);
	struct red_job jb = { .op = op, .dt = x->dtype, .l = &l, .n = n, .sx = x->strides[dim] };
	jb.by_column = l.n > 1 && jb.sx != 1 && cpu_loop_stride(&l, 1) == 1;
	jb.tile = jb.by_column ? COL_TILE : ROW_TILE;

	int64_t ntj = (l.n + jb.tile - 1) / jb.tile, tiles = l.rows * ntj;
	int64_t work = l.rows * l.n * (n > 0 ? n : 1);
	int nt = cpu_num_threads();
	if (tiles == 0)
		return TENSOR_OK;
	if (tiles < nt && work > CPU_PAR_MIN && n > 1) {
		int64_t nsplit = (nt + tiles - 1) / tiles;
		nsplit = nsplit > MAX_SPLIT ? MAX_SPLIT : nsplit > n ? n : nsplit;
		return reduce_split(&jb, out, tiles, ntj, nsplit);
	}
	return reduce_tiles(&jb, out, tiles, ntj, work > CPU_PAR_MIN);
}
