/* CPU fused attention (tensor_attention): per (batch, head), a block of queries at
 * a time, their scores in a buffer of the thread's, so that the [T,S] scores
 * never exist whole. Products are BLIS calls on one thread each inside one
 * parallel region. The forward keeps each row's log-sum-exp; the backward
 * recomputes a block's probabilities from it and makes dq of the block and its
 * share of dk and dv (a thread owns a (batch, head), so dk and dv accumulate
 * without races). Masked keys are left out of the row; keys past a causal row's
 * own are not computed at all. Dropout multiplies each row of probabilities by its
 * mask after the row's sum is taken (forward), and dL/dp and p by the same mask
 * (backward), drawn again from the seed.
 *
 * Where the products are bf16 ones (tensor_matmul_in_bf16: f32 operands under a bf16
 * precision), each product takes its operands rounded to bf16 and accumulates in f32, as
 * the composed path's products do: q, k and v; the probabilities (dropped, unnormalised:
 * the row's sum is f32) in p v; dout, the probabilities and dL/ds in the backward's
 * products. The scores, exponentials, their sums, the log-sum-exp and dL/ds are computed
 * in f32. cformer's own bf16 kernels round as they pack (cpu_gemm_bf16_serial); for the
 * portable one the kernel rounds: a head's k and v once into the thread's scratch, a
 * block's q and dout rows into it, the probabilities and dL/ds in place, and BLIS's sgemm
 * multiplies the rounded values. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../bf16.h"
#include "../mem.h"
#include "cpu_iter.h"
#include "cpu_kernels.h"
#include "cpu_math.h"

/* Queries per block: as many as keep a block's scores within ATT_BLOCK_SCORES
 * elements (256 KiB in f32, within L2 here), and at least ATT_MIN_ROWS, which
 * keep BLIS's kernels busy: 64 at S >= 1024, 128 at S = 512, and at the
 * Linformer's S = k = 128 all 512 queries of a head at n = 512 (one product a
 * head, as the composed path makes, instead of eight smaller ones). */
#define ATT_BLOCK_SCORES 65536
#define ATT_MIN_ROWS 64
static int64_t block_scores = ATT_BLOCK_SCORES;

void tensor_cpu_attention_block(int64_t scores)
{
	block_scores = scores > 0 ? scores : ATT_BLOCK_SCORES;
}
/* Exponentials summed in float over blocks of this many (64 a lane where the loop is
 * vectorised), the blocks in double: the blocks' horizontal sums cost 30% of the row at 64. */
#define ATT_SUM_BLOCK 512

/* Rows r0.. of the matrix (b, h) of t [B,H,R,C]. */
static struct cpu_mat att_rows(const struct tensor *t, int64_t b, int64_t h, int64_t r0)
{
	int64_t off = b * t->strides[0] + h * t->strides[1] + r0 * t->strides[2];
	return (struct cpu_mat){ cpu_ptr(t) + off * (int64_t)tensor_dtype_size(t->dtype),
				 t->strides[2], t->strides[3] };
}

static struct cpu_mat att_trans(struct cpu_mat m)
{
	return (struct cpu_mat){ m.p, m.cs, m.rs };
}

/* ---- rows --------------------------------------------------------------------------- */

/* Row s of n scaled scores of which the first vis may be seen (hid[i] != 0 hides key i)
 * -> exp(s - max) (0 past vis and where hidden) and the inverse of their sum in *inv (the
 * row's output is scaled by it after the product, dv values instead of n); returns the
 * log-sum-exp, +inf when no key is visible (the row and *inv are then 0). */
CPU_WIDE_CLONES
static float exps_row_f32(float *s, int64_t n, int64_t vis, const float *hid, float *inv)
{
	if (hid) {
#pragma omp simd
		for (int64_t i = 0; i < vis; i++)
			s[i] = hid[i] != 0 ? -INFINITY : s[i];
	}
	float m = -INFINITY;
#pragma omp simd reduction(max : m)
	for (int64_t i = 0; i < vis; i++)
		m = s[i] > m ? s[i] : m;
	if (m == -INFINITY) {
		memset(s, 0, (size_t)n * sizeof *s);
		*inv = 0;
		return INFINITY;
	}
	double sum = 0;
	for (int64_t i0 = 0; i0 < vis; i0 += ATT_SUM_BLOCK) {
		int64_t i1 = vis - i0 < ATT_SUM_BLOCK ? vis : i0 + ATT_SUM_BLOCK;
		float sb = 0;
#pragma omp simd reduction(+ : sb)
		for (int64_t i = i0; i < i1; i++) {
			float e = exp_nonpos_f32(s[i] - m);
			s[i] = e;
			sb += e;
		}
		sum += sb;
	}
	*inv = (float)(1.0 / sum);
	memset(s + vis, 0, (size_t)(n - vis) * sizeof *s);
	return (float)((double)m + log(sum));
}

static double exps_row_f64(double *s, int64_t n, int64_t vis, const double *hid, double *inv)
{
	double m = -INFINITY, sum = 0;
	for (int64_t i = 0; i < vis; i++) {
		s[i] = hid && hid[i] != 0 ? -INFINITY : s[i];
		m = s[i] > m ? s[i] : m;
	}
	if (m == -INFINITY) {
		memset(s, 0, (size_t)n * sizeof *s);
		*inv = 0;
		return INFINITY;
	}
	for (int64_t i = 0; i < vis; i++) {
		s[i] = exp(s[i] - m);
		sum += s[i];
	}
	*inv = 1.0 / sum;
	memset(s + vis, 0, (size_t)(n - vis) * sizeof *s);
	return m + log(sum);
}

/* Backward of a row: the scaled scores s -> probabilities p = exp(s - lse) (0 where
 * hidden or past vis), and g = dL/dp -> dL/ds = p (g - sum(p g)). */
CPU_WIDE_CLONES
static void grad_row_f32(float *s, float *g, int64_t n, int64_t vis, const float *hid, float lse)
{
	if (hid) {
#pragma omp simd
		for (int64_t i = 0; i < vis; i++)
			s[i] = hid[i] != 0 ? -INFINITY : s[i];
	}
	double dot = 0;
	for (int64_t i0 = 0; i0 < vis; i0 += ATT_SUM_BLOCK) {
		int64_t i1 = vis - i0 < ATT_SUM_BLOCK ? vis : i0 + ATT_SUM_BLOCK;
		float db = 0;
#pragma omp simd reduction(+ : db)
		for (int64_t i = i0; i < i1; i++) {
			s[i] = exp_nonpos_f32(s[i] - lse);
			db += s[i] * g[i];
		}
		dot += db;
	}
	float dt = (float)dot;
#pragma omp simd
	for (int64_t i = 0; i < vis; i++)
		g[i] = s[i] * (g[i] - dt);
	memset(s + vis, 0, (size_t)(n - vis) * sizeof *s);
	memset(g + vis, 0, (size_t)(n - vis) * sizeof *g);
}

static void grad_row_f64(double *s, double *g, int64_t n, int64_t vis, const double *hid,
			 double lse)
{
	double dot = 0;
	for (int64_t i = 0; i < vis; i++) {
		s[i] = hid && hid[i] != 0 ? 0 : exp(s[i] - lse);
		dot += s[i] * g[i];
	}
	for (int64_t i = 0; i < vis; i++)
		g[i] = s[i] * (g[i] - dot);
	memset(s + vis, 0, (size_t)(n - vis) * sizeof *s);
	memset(g + vis, 0, (size_t)(n - vis) * sizeof *g);
}

/* ---- blocks ------------------------------------------------------------------------- */

/* The shapes of one call and where a block of queries lies. */
struct att_job {
	const struct tensor_attention_args *a;
	enum tensor_dtype dt;
	size_t es;
	int64_t h, t, s, d, dv, rows, blocks;
	struct cpu_dropout_plan drop; /* the probabilities' dropout, where a->dropout > 0 */
	/* bf16 products: on own kernel `kernel` (else portable: `round`), with ws bytes of
	 * scratch a thread */
	bool bf16, own, round;
	enum cpu_bf16_kernel kernel;
	size_t ws;
};

static size_t round64(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

/* The scratch of a thread's bf16 products: for an own kernel, the packing buffers of the
 * largest of the forward's and the backward's products of a block (rows x cols x inner,
 * cols <= S); for the portable one, a head's rounded k and v and a block's q and dout
 * rows. */
static size_t att_ws(const struct att_job *j)
{
	const int64_t r = j->rows, s = j->s, d = j->d, dv = j->dv;
	if (!j->own)
		return round64((size_t)((s + r) * (d + dv)) * sizeof(float));
	const int64_t shapes[6][3] = { { r, s, d },  { r, dv, s }, { r, s, dv },
				       { s, dv, r }, { r, d, s },  { s, d, r } };
	size_t ws = 0;
	for (int i = 0; i < 6; i++) {
		size_t w = shapes[i][0] > 0 && shapes[i][1] > 0 && shapes[i][2] > 0
			       ? cpu_gemm_bf16_serial_ws(j->kernel, shapes[i][0], shapes[i][1],
							 shapes[i][2])
			       : 0;
		ws = w > ws ? w : ws;
	}
	return round64(ws);
}

static struct att_job att_job_of(const struct tensor_attention_args *a)
{
	const struct tensor *q = a->q;
	int64_t t = q->shape[2], s = a->k->shape[2];
	int64_t rows = block_scores / (s > 0 ? s : 1);
	rows = rows < ATT_MIN_ROWS ? ATT_MIN_ROWS : rows;
	rows = rows > t ? (t > 0 ? t : 1) : rows; /* no more than the queries */
	struct att_job j = { .a = a,
			     .dt = q->dtype,
			     .es = tensor_dtype_size(q->dtype),
			     .h = q->shape[1],
			     .t = t,
			     .s = s,
			     .d = q->shape[3],
			     .dv = a->v->shape[3],
			     .rows = rows,
			     .blocks = (t + rows - 1) / rows,
			     .drop = a->dropout > 0 ? cpu_dropout_plan(a->dropout, a->seed)
						    : (struct cpu_dropout_plan){ 0 },
			     .bf16 = tensor_matmul_in_bf16(q, a->k) }; /* this thread's rule */
	if (j.bf16) {
		j.own = cpu_bf16_kernel_own(&j.kernel);
		j.round = !j.own;
		j.ws = att_ws(&j);
	}
	return j;
}

/* A thread's scratch for bf16 products, and the head (b H + h, -1: none) whose rounded k
 * and v it holds (portable kernel). */
struct att_ws {
	char *p;
	int64_t head;
};

/* C = alpha A B + beta C on the calling thread: on an own bf16 kernel where the call's
 * products are bf16 ones (its operands rounded as packed), else in the dtype (f32 for the
 * portable kernel's rounded operands). */
static void att_gemm(const struct att_job *j, struct att_ws *w, int64_t m, int64_t n, int64_t k,
		     double alpha, struct cpu_mat a, struct cpu_mat b, double beta,
		     struct cpu_mat c)
{
	if (j->own && m > 0 && n > 0 && k > 0)
		cpu_gemm_bf16_serial(j->kernel, m, n, k, alpha, a, b, beta, c, w->p);
	else
		cpu_gemm_one_thread(j->dt, m, n, k, alpha, a, b, beta, c);
}

/* The [r, c] f32 matrix x (a unit column stride) rounded to bf16 values into o, as a
 * row-major matrix. */
static struct cpu_mat round_into(float *o, struct cpu_mat x, int64_t r, int64_t c)
{
	for (int64_t i = 0; i < r; i++) {
		const float *xr = (const float *)x.p + i * x.rs;
#pragma omp simd
		for (int64_t l = 0; l < c; l++)
			o[i * c + l] = bf16_to_f32(bf16_from_f32(xr[l]));
	}
	return (struct cpu_mat){ (char *)o, c, 1 };
}

/* n contiguous f32 values rounded to bf16 values in place, for the portable kernel. */
static void round_here(const struct att_job *j, char *p, int64_t n)
{
	float *f = (float *)p;
	if (!j->round)
		return;
#pragma omp simd
	for (int64_t i = 0; i < n; i++)
		f[i] = bf16_to_f32(bf16_from_f32(f[i]));
}

/* k and v of (b, h) as the products take them: for the portable kernel rounded, once a
 * head, into the thread's scratch. */
static void att_kv(const struct att_job *j, struct att_ws *w, int64_t b, int64_t h,
		   struct cpu_mat *k, struct cpu_mat *v)
{
	*k = att_rows(j->a->k, b, h, 0);
	*v = att_rows(j->a->v, b, h, 0);
	if (!j->round)
		return;
	float *kc = (float *)w->p, *vc = kc + j->s * j->d;
	if (w->head != b * j->h + h) {
		round_into(kc, *k, j->s, j->d);
		round_into(vc, *v, j->s, j->dv);
		w->head = b * j->h + h;
	}
	*k = (struct cpu_mat){ (char *)kc, j->d, 1 };
	*v = (struct cpu_mat){ (char *)vc, j->dv, 1 };
}

/* Rows r0.. of q (which 0) or dout (which 1) of (b, h), [r, c], as the products take them:
 * for the portable kernel rounded into the thread's scratch. */
static struct cpu_mat att_block_rows(const struct att_job *j, struct att_ws *w,
				     const struct tensor *x, int which, int64_t b, int64_t h,
				     int64_t r0, int64_t r, int64_t c)
{
	struct cpu_mat m = att_rows(x, b, h, r0);
	if (!j->round)
		return m;
	float *o = (float *)w->p + j->s * (j->d + j->dv) + (which ? j->rows * j->d : 0);
	return round_into(o, m, r, c);
}

/* Row t of (b, h)'s first cols probabilities, p (the row's own dtype), times the dropout
 * mask in place (element first + ((b H + h) T + t) S + s of the [B,H,T,S] mask). */
static void drop_row(const struct att_job *j, char *p, int64_t cols, int64_t b, int64_t h,
		     int64_t t)
{
	if (j->a->dropout > 0)
		cpu_dropout_span(&j->drop, j->dt, p, p, cols,
				 j->a->first + (uint64_t)(((b * j->h + h) * j->t + t) * j->s));
}

/* m = the mask factors of that row: 0 or 1 / (1 - p). */
static void mask_row(const struct att_job *j, char *m, int64_t cols, int64_t b, int64_t h,
		     int64_t t)
{
	for (int64_t i = 0; i < cols && j->dt == TENSOR_F32; i++)
		((float *)m)[i] = 1;
	for (int64_t i = 0; i < cols && j->dt == TENSOR_F64; i++)
		((double *)m)[i] = 1;
	drop_row(j, m, cols, b, h, t);
}

/* x[i] *= m[i] for i < n. */
static void mul_row(enum tensor_dtype dt, char *x, const char *m, int64_t n)
{
	if (dt == TENSOR_F32) {
		float *xf = (float *)x;
		const float *mf = (const float *)m;
		for (int64_t i = 0; i < n; i++)
			xf[i] *= mf[i];
	} else {
		double *xd = (double *)x;
		const double *md = (const double *)m;
		for (int64_t i = 0; i < n; i++)
			xd[i] *= md[i];
	}
}

/* Rows and columns of block blk: causal rows see no key past the block's last row. */
static void att_block(const struct att_job *j, int64_t blk, int64_t *t0, int64_t *rows,
		      int64_t *cols)
{
	*t0 = blk * j->rows;
	*rows = j->t - *t0 < j->rows ? j->t - *t0 : j->rows;
	*cols = j->a->causal ? *t0 + *rows : j->s;
}

/* The hidden flags of batch entry b's keys, or NULL. */
static const char *att_hidden(const struct att_job *j, int64_t b)
{
	return j->a->hidden ? cpu_ptr(j->a->hidden) + b * j->s * (int64_t)j->es : NULL;
}

/* Row r of the [rows, cols] matrix o times inv[r] (inv of o's dtype). */
static void scale_rows(struct cpu_mat o, int64_t rows, int64_t cols, enum tensor_dtype dt,
		       const char *inv)
{
	for (int64_t r = 0; r < rows; r++) {
		if (dt == TENSOR_F32) {
			float *p = (float *)o.p + r * o.rs, f = ((const float *)inv)[r];
			for (int64_t c = 0; c < cols; c++)
				p[c * o.cs] *= f;
		} else {
			double *p = (double *)o.p + r * o.rs, f = ((const double *)inv)[r];
			for (int64_t c = 0; c < cols; c++)
				p[c * o.cs] *= f;
		}
	}
}

/* out and lse of the queries of block blk of (b, h); buf holds a block's scores and then
 * its rows' inverse sums, w the products' scratch. */
static void forward_block(const struct att_job *j, struct tensor *out, struct tensor *lse,
			  int64_t b, int64_t h, int64_t blk, char *buf, struct att_ws *w)
{
	const struct tensor_attention_args *a = j->a;
	int64_t t0, rows, cols, es = (int64_t)j->es;
	att_block(j, blk, &t0, &rows, &cols);
	struct cpu_mat sc = { buf, cols, 1 }, km, vm;
	att_kv(j, w, b, h, &km, &vm);
	att_gemm(j, w, rows, cols, j->d, a->scale,
		 att_block_rows(j, w, a->q, 0, b, h, t0, rows, j->d), att_trans(km), 0, sc);
	const char *hid = att_hidden(j, b);
	char *l = cpu_ptr(lse) + ((b * j->h + h) * j->t + t0) * es;
	char *inv = buf + j->rows * j->s * es;
	for (int64_t r = 0; r < rows; r++) {
		int64_t vis = a->causal ? t0 + r + 1 : cols;
		char *row = buf + r * cols * es;
		if (j->dt == TENSOR_F32)
			((float *)l)[r] = exps_row_f32((float *)row, cols, vis, (const float *)hid,
						       (float *)inv + r);
		else
			((double *)l)[r] = exps_row_f64((double *)row, cols, vis,
							(const double *)hid, (double *)inv + r);
		drop_row(j, row, cols, b, h, t0 + r); /* the sum (inv) is the undropped row's */
	}
	struct cpu_mat o = att_rows(out, b, h, t0);
	round_here(j, buf, rows * cols);
	att_gemm(j, w, rows, j->dv, cols, 1, sc, vm, 0, o);
	scale_rows(o, rows, j->dv, j->dt, inv);
}

/* Gradients of (b, h): dq of every block, dk and dv summed over the blocks. pbuf and
 * gbuf hold a block's scores each, mbuf a row's dropout mask, w the products' scratch. */
static void backward_head(const struct att_job *j, struct tensor *dq, struct tensor *dk,
			  struct tensor *dv, const struct tensor *lse, const struct tensor *dout,
			  int64_t b, int64_t h, char *pbuf, char *gbuf, char *mbuf,
			  struct att_ws *w)
{
	const struct tensor_attention_args *a = j->a;
	struct cpu_mat dkm = att_rows(dk, b, h, 0), dvm = att_rows(dv, b, h, 0);
	for (int64_t r = 0; r < j->s; r++) { /* rows of (b, h), apart where heads interleave */
		memset(dkm.p + r * dkm.rs * (int64_t)j->es, 0, (size_t)j->d * j->es);
		memset(dvm.p + r * dvm.rs * (int64_t)j->es, 0, (size_t)j->dv * j->es);
	}
	const char *hid = att_hidden(j, b);
	const char *l = cpu_ptr(lse) + (b * j->h + h) * j->t * (int64_t)j->es;
	struct cpu_mat km, vm;
	att_kv(j, w, b, h, &km, &vm);
	for (int64_t blk = 0; blk < j->blocks; blk++) {
		int64_t t0, rows, cols;
		att_block(j, blk, &t0, &rows, &cols);
		struct cpu_mat qm = att_block_rows(j, w, a->q, 0, b, h, t0, rows, j->d);
		struct cpu_mat gm = att_block_rows(j, w, dout, 1, b, h, t0, rows, j->dv);
		struct cpu_mat pm = { pbuf, cols, 1 }, sm = { gbuf, cols, 1 };
		att_gemm(j, w, rows, cols, j->d, a->scale, qm, att_trans(km), 0, pm);
		att_gemm(j, w, rows, cols, j->dv, 1, gm, att_trans(vm), 0, sm);
		for (int64_t r = 0; r < rows; r++) {
			int64_t vis = a->causal ? t0 + r + 1 : cols;
			char *pr = pbuf + r * cols * (int64_t)j->es;
			char *gr = gbuf + r * cols * (int64_t)j->es;
			if (a->dropout > 0) { /* dL/dp through the mask, drawn once a row */
				mask_row(j, mbuf, cols, b, h, t0 + r);
				mul_row(j->dt, gr, mbuf, cols);
			}
			if (j->dt == TENSOR_F32)
				grad_row_f32((float *)pr, (float *)gr, cols, vis,
					     (const float *)hid, ((const float *)l)[t0 + r]);
			else
				grad_row_f64((double *)pr, (double *)gr, cols, vis,
					     (const double *)hid, ((const double *)l)[t0 + r]);
			if (a->dropout > 0) /* dv's product takes the kept p */
				mul_row(j->dt, pr, mbuf, cols);
		}
		round_here(j, pbuf, rows * cols);
		round_here(j, gbuf, rows * cols);
		att_gemm(j, w, cols, j->dv, rows, 1, att_trans(pm), gm, 1, dvm);
		att_gemm(j, w, rows, j->d, cols, a->scale, sm, km, 0, att_rows(dq, b, h, t0));
		att_gemm(j, w, cols, j->d, rows, a->scale, att_trans(sm), qm, 1, dkm);
	}
}

/* ---- the slots ---------------------------------------------------------------------- */

/* A call's scratch for each of nt threads (as many as there are units of work, at most the
 * thread count): nbuf blocks of scores, a block's rows of values and extra elements, per
 * bytes a thread, from the thread's block cache (tensor memory, reused across steps); and
 * the bf16 products' scratch, j->ws bytes a thread (64-byte aligned) on the heap, as the
 * GEMMs' packing buffers are. */
struct att_mem {
	int nt;
	size_t per;
	struct tensor_storage *st;
	char *heap, *ws;
};

static void att_mem_free(struct att_mem *m)
{
	tensor_storage_release(m->st);
	free(m->heap);
}

/* The scratch of a call of op; TENSOR_ERR_NOMEM naming op where it fails. */
static int att_mem_get(struct att_mem *m, const char *op, const struct att_job *j, int64_t units,
		       int nbuf, int64_t extra)
{
	*m = (struct att_mem){ .nt = cpu_num_threads() };
	if (units < m->nt)
		m->nt = units > 0 ? (int)units : 1;
	m->per = (size_t)(j->rows * ((j->s ? j->s : 1) * nbuf + 1) + extra) * j->es;
	tensor_heap_begin();
	m->st = tensor_storage_alloc(TENSOR_CPU, m->per * (size_t)m->nt);
	tensor_heap_end();
	if (m->st && j->ws && (m->heap = tensor_host_malloc(j->ws * (size_t)m->nt + 64)))
		m->ws = (char *)(((uintptr_t)m->heap + 63) & ~(uintptr_t)63);
	if (m->st && (m->ws || !j->ws))
		return TENSOR_OK;
	att_mem_free(m);
	return tensor_error(TENSOR_ERR_NOMEM,
			    "%s: no memory for %d thread(s) x %d block(s) of [%lld,%lld] scores%s",
			    op, m->nt, nbuf, (long long)j->rows, (long long)j->s,
			    j->ws ? " and their bf16 products' scratch" : "");
}

int cpu_attention(struct tensor *out, struct tensor *lse, const struct tensor_attention_args *a)
{
	struct att_job j = att_job_of(a);
	int64_t units = a->q->shape[0] * j.h * j.blocks;
	struct att_mem m;
	if (att_mem_get(&m, "attention", &j, units, 1, 0) < 0)
		return tensor_last_status();
#pragma omp parallel num_threads(m.nt)
	{
		int t = omp_get_thread_num();
		char *buf = (char *)m.st->data + m.per * (size_t)t;
		struct att_ws w = { m.ws ? m.ws + j.ws * (size_t)t : NULL, -1 };
#pragma omp for schedule(dynamic, 1)
		for (int64_t u = 0; u < units; u++) {
			int64_t bh = u / j.blocks;
			forward_block(&j, out, lse, bh / j.h, bh % j.h, u % j.blocks, buf, &w);
		}
	}
	att_mem_free(&m);
	return TENSOR_OK;
}

int cpu_attention_backward(struct tensor *dq, struct tensor *dk, struct tensor *dv,
			   const struct tensor_attention_args *a, const struct tensor *lse,
			   const struct tensor *dout)
{
	struct att_job j = att_job_of(a);
	int64_t units = a->q->shape[0] * j.h;
	struct att_mem m; /* two blocks and a mask row a thread */
	if (att_mem_get(&m, "attention_backward", &j, units, 2, j.s) < 0)
		return tensor_last_status();
#pragma omp parallel num_threads(m.nt)
	{
		int t = omp_get_thread_num();
		char *pbuf = (char *)m.st->data + m.per * (size_t)t;
		char *gbuf = pbuf + (size_t)(j.rows * j.s) * j.es;
		char *mbuf = gbuf + (size_t)(j.rows * j.s) * j.es;
		struct att_ws w = { m.ws ? m.ws + j.ws * (size_t)t : NULL, -1 };
#pragma omp for schedule(static)
		for (int64_t u = 0; u < units; u++)
			backward_head(&j, dq, dk, dv, lse, dout, u / j.h, u % j.h, pbuf, gbuf, mbuf,
				      &w);
	}
	att_mem_free(&m);
	return TENSOR_OK;
}
