/* CPU index_select, index_add, gather and scatter_add (indices already range-checked). */
#include <stdlib.h>
#include <string.h>

#include "cpu_iter.h"
#include "cpu_kernels.h"
#include "mem.h"

/* One element copied by size: exact for every dtype. */
static inline void copy_elem(char *d, const char *s, size_t es)
{
	if (es == 4)
		memcpy(d, s, 4);
	else
		memcpy(d, s, 8);
}

/* *d += *s for one element; integers wrap instead of overflowing. */
static inline void add_elem(char *d, const char *s, enum tensor_dtype dt)
{
	switch (dt) {
	case TENSOR_F32: *(float *)d += *(const float *)s; break;
	case TENSOR_F64: *(double *)d += *(const double *)s; break;
	case TENSOR_I32: {
		int32_t a = *(int32_t *)d, b = *(const int32_t *)s;
		*(int32_t *)d = (int32_t)((uint32_t)a + (uint32_t)b);
		break;
	}
	default: {
		int64_t a = *(int64_t *)d, b = *(const int64_t *)s;
		*(int64_t *)d = (int64_t)((uint64_t)a + (uint64_t)b);
		break;
	}
	}
}

/* d[i sd] = s[i ss] for i < n (strides in elements). */
static void run_copy(char *d, const char *s, int64_t n, int64_t sd, int64_t ss, size_t es)
{
	if (sd == 1 && ss == 1) {
		memcpy(d, s, (size_t)n * es);
		return;
	}
	for (int64_t i = 0; i < n; i++)
		copy_elem(d + i * sd * (int64_t)es, s + i * ss * (int64_t)es, es);
}

/* d[i sd] += s[i ss] for i < n. */
static void run_add(char *d, const char *s, int64_t n, int64_t sd, int64_t ss, enum tensor_dtype dt)
{
	if (dt == TENSOR_F32) {
		float *o = (float *)d;
		const float *x = (const float *)s;
		if (sd == 1 && ss == 1) {
#pragma omp simd
			for (int64_t i = 0; i < n; i++)
				o[i] += x[i];
		} else {
			for (int64_t i = 0; i < n; i++)
				o[i * sd] += x[i * ss];
		}
		return;
	}
	size_t es = tensor_dtype_size(dt);
	for (int64_t i = 0; i < n; i++)
		add_elem(d + i * sd * (int64_t)es, s + i * ss * (int64_t)es, dt);
}

/* t's geometry with dim d removed, as a header on the stack (for cpu_loop). */
static struct tensor drop_dim(const struct tensor *t, int d)
{
	struct tensor v = *t;
	v.ndim = 0;
	for (int i = 0; i < t->ndim; i++) {
		if (i == d)
			continue;
		v.shape[v.ndim] = t->shape[i];
		v.strides[v.ndim++] = t->strides[i];
	}
	return v;
}

/* Tasks of a loop whose rows and elements are all independent: each row is
 * cut into chunks (multiples of 16 elements) so that there are at least as
 * many tasks as threads. */
static int64_t chunk_len(const struct cpu_loop *l)
{
	int64_t nt = cpu_num_threads();
	int64_t want = l->rows >= nt ? 1 : (nt + l->rows - 1) / (l->rows ? l->rows : 1);
	int64_t c = (l->n + want - 1) / want;
	c = (c + 15) & ~(int64_t)15;
	return c > 0 ? c : 1;
}

/* The loop shared by index_select and index_add: `big` has dim `dim`, `small`
 * has idx's dims in its place; operand 0 walks big without dim, operand 1
 * small without idx's dims. boff[j] / soff[j] (elements) locate index j.
 * `across`: big's dim is closer to the inner end of memory than the loop's
 * last dim (indexing the last dim), so indices are walked innermost. */
struct index_plan {
	struct cpu_loop l;
	int64_t nidx, s0, s1, es;
	int64_t *boff, *soff;
	bool across;
};

static int index_plan_init(struct index_plan *p, const char *op, const struct tensor *big, int dim,
			   const struct tensor *idx, const struct tensor *small)
{
	struct tensor bv = drop_dim(big, dim), sv = *small;
	sv.ndim = bv.ndim;
	for (int i = 0; i < bv.ndim; i++) {
		int k = i < dim ? i : i + idx->ndim;
		sv.shape[i] = bv.shape[i];
		sv.strides[i] = small->strides[k];
	}
	const struct tensor *ts[2] = { &bv, &sv };
	cpu_loop_init(&p->l, 2, ts);
	p->s0 = cpu_loop_stride(&p->l, 0);
	p->s1 = cpu_loop_stride(&p->l, 1);
	p->es = (int64_t)tensor_dtype_size(big->dtype);
	p->across = p->l.n > 1 && llabs(big->strides[dim]) < llabs(p->s0);
	p->nidx = tensor_numel(idx);
	p->boff = tensor_host_malloc(sizeof(int64_t) * (size_t)(2 * p->nidx + 1));
	if (!p->boff)
		return tensor_error(TENSOR_ERR_NOMEM, "%s: no memory for %lld offsets", op,
				    (long long)p->nidx);
	p->soff = p->boff + p->nidx;
	const char *ip = cpu_ptr(idx);
	size_t ies = tensor_dtype_size(idx->dtype);
	for (int64_t j = 0; j < p->nidx; j++) {
		int64_t r = j, io = 0, so = 0;
		for (int e = idx->ndim - 1; e >= 0; e--) {
			int64_t c = r % idx->shape[e];
			r /= idx->shape[e];
			io += c * idx->strides[e];
			so += c * small->strides[dim + e];
		}
		p->boff[j] = cpu_load_index(ip + io * (int64_t)ies, idx->dtype) * big->strides[dim];
		p->soff[j] = so;
	}
	return TENSOR_OK;
}

/* Across mode on len positions from b (big) and s (small): small = big[idx]
 * or, with add, big[idx] += small, every index in turn at each position. */
static void index_across(const struct index_plan *p, char *b, char *s, int64_t len,
			 enum tensor_dtype dt, bool add)
{
	int64_t es = p->es, nidx = p->nidx;
	const int64_t *boff = p->boff, *soff = p->soff;
	for (int64_t i = 0; i < len; i++, b += p->s0 * es, s += p->s1 * es) {
		if (!add) {
			for (int64_t j = 0; j < nidx; j++)
				copy_elem(s + soff[j] * es, b + boff[j] * es, (size_t)es);
		} else if (dt == TENSOR_F32) {
			for (int64_t j = 0; j < nidx; j++)
				((float *)b)[boff[j]] += ((const float *)s)[soff[j]];
		} else {
			for (int64_t j = 0; j < nidx; j++)
				add_elem(b + boff[j] * es, s + soff[j] * es, dt);
		}
	}
}

/* Tasks over (index, row) copy whole rows; in across mode tasks over (row,
 * chunk) walk the indices per position. */
int cpu_index_select(struct tensor *out, const struct tensor *src, int dim,
		     const struct tensor *idx)
{
	struct index_plan p;
	int rc = index_plan_init(&p, "index_select", src, dim, idx, out);
	if (rc < 0)
		return rc;
	const struct cpu_loop *l = &p.l;
	int64_t rows = l->rows, es = p.es;
	int64_t chunk = p.across ? chunk_len(l) : l->n, nchunk = (l->n + chunk - 1) / chunk;
	int64_t ntask = p.across ? rows * nchunk : p.nidx * rows;
#pragma omp parallel for num_threads(cpu_num_threads()) if (p.nidx * rows * l->n > CPU_PAR_MIN)
	for (int64_t t = 0; t < ntask; t++) {
		char *ptr[2];
		if (p.across) {
			int64_t r = t / nchunk, i0 = t % nchunk * chunk;
			int64_t len = l->n - i0 < chunk ? l->n - i0 : chunk;
			cpu_loop_row(l, r, ptr);
			index_across(&p, ptr[0] + i0 * p.s0 * es, ptr[1] + i0 * p.s1 * es, len,
				     src->dtype, false);
		} else {
			int64_t j = t / rows, r = t % rows;
			cpu_loop_row(l, r, ptr);
			run_copy(ptr[1] + p.soff[j] * es, ptr[0] + p.boff[j] * es, l->n, p.s1, p.s0,
				 (size_t)es);
		}
	}
	free(p.boff);
	return TENSOR_OK;
}

/* Each task owns a (row, chunk) of dst positions off dim and adds every index
 * into it, so duplicate indices never race. */
int cpu_index_add(struct tensor *dst, int dim, const struct tensor *idx, const struct tensor *src)
{
	struct index_plan p;
	int rc = index_plan_init(&p, "index_add_", dst, dim, idx, src);
	if (rc < 0)
		return rc;
	const struct cpu_loop *l = &p.l;
	int64_t chunk = chunk_len(l), nchunk = (l->n + chunk - 1) / chunk;
	int64_t ntask = l->rows * nchunk, es = p.es;
	enum tensor_dtype dt = dst->dtype;
#pragma omp parallel for num_threads(cpu_num_threads()) if (p.nidx * l->rows * l->n > CPU_PAR_MIN)
	for (int64_t t = 0; t < ntask; t++) {
		int64_t r = t / nchunk, i0 = t % nchunk * chunk;
		int64_t len = l->n - i0 < chunk ? l->n - i0 : chunk;
		char *ptr[2];
		cpu_loop_row(l, r, ptr);
		char *d = ptr[0] + i0 * p.s0 * es, *s = ptr[1] + i0 * p.s1 * es;
		if (p.across) {
			index_across(&p, d, s, len, dt, true);
			continue;
		}
		for (int64_t j = 0; j < p.nidx; j++)
			run_add(d + p.boff[j] * es, s + p.soff[j] * es, len, p.s0, p.s1, dt);
	}
	free(p.boff);
	return TENSOR_OK;
}

/* out[p] = src[p with coordinate dim = idx[p]]: src is walked through a view of
 * idx's shape with stride 0 along dim, and idx[p] supplies that offset. */
int cpu_gather(struct tensor *out, const struct tensor *src, int dim, const struct tensor *idx)
{
	struct tensor sv = *src;
	sv.ndim = idx->ndim;
	memcpy(sv.shape, idx->shape, sizeof sv.shape);
	sv.strides[dim] = 0;
	const struct tensor *ts[3] = { out, idx, &sv };
	struct cpu_loop l;
	cpu_loop_init(&l, 3, ts);
	int64_t s0 = cpu_loop_stride(&l, 0), s1 = cpu_loop_stride(&l, 1);
	int64_t s2 = cpu_loop_stride(&l, 2), sd = src->strides[dim];
	int64_t es = (int64_t)tensor_dtype_size(out->dtype), ies = (int64_t)l.esize[1];
	enum tensor_dtype idt = idx->dtype;
#pragma omp parallel for num_threads(cpu_num_threads()) if (l.rows * l.n > CPU_PAR_MIN)
	for (int64_t r = 0; r < l.rows; r++) {
		char *p[3];
		cpu_loop_row(&l, r, p);
		for (int64_t i = 0; i < l.n; i++) {
			int64_t k = cpu_load_index(p[1] + i * s1 * ies, idt);
			copy_elem(p[0] + i * s0 * es, p[2] + (i * s2 + k * sd) * es, (size_t)es);
		}
	}
	return TENSOR_OK;
}

/* Strides (elements) of one scatter_add: operands dst (0), idx (1), src (2)
 * along the loop's last dim, and d* along dim. */
struct scatter_step {
	int64_t s0, s1, s2, dd, id, sd, es, ies;
	enum tensor_dtype dt, idt;
};

/* dst[i, idx[i, j]] += src[i, j] at loop position i and position j along dim. */
static inline void scatter_one(const struct scatter_step *c, char *const *p, int64_t i, int64_t j)
{
	int64_t k = cpu_load_index(p[1] + (i * c->s1 + j * c->id) * c->ies, c->idt);
	add_elem(p[0] + (i * c->s0 + k * c->dd) * c->es, p[2] + (i * c->s2 + j * c->sd) * c->es,
		 c->dt);
}

/* dst[p with coordinate dim = idx[p]] += src[p]. Positions that differ only in
 * dim may hit one element, so each task owns a (row, chunk) of positions off
 * dim and walks dim itself: outermost, or innermost when dim is closer to the
 * inner end of memory than the loop's last dim. */
int cpu_scatter_add(struct tensor *dst, int dim, const struct tensor *idx, const struct tensor *src)
{
	struct tensor iv = drop_dim(idx, dim), sv = drop_dim(src, dim), dv = drop_dim(dst, dim);
	memcpy(sv.shape, iv.shape, sizeof sv.shape);
	memcpy(dv.shape, iv.shape, sizeof dv.shape);
	const struct tensor *ts[3] = { &dv, &iv, &sv };
	struct cpu_loop l;
	cpu_loop_init(&l, 3, ts);
	struct scatter_step c = {
		.s0 = cpu_loop_stride(&l, 0),
		.s1 = cpu_loop_stride(&l, 1),
		.s2 = cpu_loop_stride(&l, 2),
		.dd = dst->strides[dim],
		.id = idx->strides[dim],
		.sd = src->strides[dim],
		.es = (int64_t)tensor_dtype_size(dst->dtype),
		.ies = (int64_t)tensor_dtype_size(idx->dtype),
		.dt = dst->dtype,
		.idt = idx->dtype,
	};
	int64_t m = idx->shape[dim], chunk = chunk_len(&l), nchunk = (l.n + chunk - 1) / chunk;
	int64_t ntask = l.rows * nchunk;
	bool across = l.n > 1 && llabs(c.dd) < llabs(c.s0);
#pragma omp parallel for num_threads(cpu_num_threads()) if (l.rows * l.n * m > CPU_PAR_MIN)
	for (int64_t t = 0; t < ntask; t++) {
		int64_t r = t / nchunk, i0 = t % nchunk * chunk;
		int64_t i1 = l.n - i0 < chunk ? l.n : i0 + chunk;
		char *p[3];
		cpu_loop_row(&l, r, p);
		if (across) {
			for (int64_t i = i0; i < i1; i++)
				for (int64_t j = 0; j < m; j++)
					scatter_one(&c, p, i, j);
		} else {
			for (int64_t j = 0; j < m; j++)
				for (int64_t i = i0; i < i1; i++)
					scatter_one(&c, p, i, j);
		}
	}
	return TENSOR_OK;
}
