// CUDA index_select, index_add, gather, scatter_add, and the asynchronous
// index range check (cuda_check_index). The CPU kernels (cpu/cpu_index.c)
// are the reference.
//
// Layout:
//  - Row paths (index_select with contiguous src, index_add with contiguous
//    dst and src, any dim): the operands are [outer, S or nidx, inner] and
//    every thread moves one unit of a row (4, 8 or 16 bytes), so consecutive
//    threads touch consecutive columns; index_add's units of f32 are float4
//    or float2 vector atomics where aligned. This is the embedding lookup
//    ([V, C] table by [B, T] ids) and its gradient (one thread per (id,
//    column) pair, so a repeated id costs atomics to one row, coalesced).
//  - Generic paths: one thread per element of the iteration space (out's
//    shape for index_select, src's for index_add, idx's for gather and
//    scatter_add), walking three operands with their own strides over it;
//    dims are coalesced on the host first (size-1 dims dropped, adjacent
//    dims merged where every operand allows), which keeps the row-major
//    position of each element.
//  - Element counts below 2^31 use 32-bit unsigned index math (division is
//    the cost of the generic walk), larger ones 64-bit.
//
// Range safety: the front-end's range check runs on the device
// (cuda_check_index) and is only raised at the next synchronisation, so the
// kernels that follow it may still see a bad index: they write 0 for it
// (copies) or skip it (additions), never touching memory out of bounds.
//
// index_add and scatter_add accumulate with atomics (RED): f32 / f64 with
// float atomicAdd (so the order of the additions into one element, and the
// rounding of float sums, varies from run to run, unlike the CPU's fixed
// order), i32 with int atomicAdd and i64 with unsigned long long atomicAdd,
// both wrapping on overflow as the CPU does, and exact.
#include <cuda_runtime.h>
#include <string.h>

#include "cuda_internal.h"

enum { THREADS = 256 };

// ---- geometry ------------------------------------------------------------------

// Up to three operands walked over one shape (strides in elements; an unused
// operand has strides 0).
struct ix_geom {
	int ndim;
	int64_t shape[CUDA_MAX_DIMS];
	int64_t st[3][CUDA_MAX_DIMS];
};

// Drop size-1 dims and merge dim d into the one before it where every operand
// has st[p] == st[d] * shape[d]. No dim of size 0 (empty walks never launch).
static void ix_coalesce(ix_geom *g)
{
	int nd = 0;
	for (int d = 0; d < g->ndim; d++) {
		if (g->shape[d] == 1)
			continue;
		bool merge = nd > 0;
		for (int k = 0; merge && k < 3; k++)
			merge = g->st[k][nd - 1] == g->st[k][d] * g->shape[d];
		if (merge) {
			g->shape[nd - 1] *= g->shape[d];
			for (int k = 0; k < 3; k++)
				g->st[k][nd - 1] = g->st[k][d];
		} else {
			g->shape[nd] = g->shape[d];
			for (int k = 0; k < 3; k++)
				g->st[k][nd] = g->st[k][d];
			nd++;
		}
	}
	g->ndim = nd;
}

// The geometry of an index tensor, its dims coalesced (ndim 1 when contiguous).
static cuda_geom index_geom(const struct tensor *idx)
{
	ix_geom g;
	memset(&g, 0, sizeof g);
	g.ndim = idx->ndim;
	for (int i = 0; i < idx->ndim; i++) {
		g.shape[i] = idx->shape[i];
		g.st[0][i] = idx->strides[i];
	}
	ix_coalesce(&g);
	cuda_geom c = cuda_geom_of(idx);
	c.ndim = g.ndim;
	for (int i = 0; i < g.ndim; i++) {
		c.shape[i] = g.shape[i];
		c.strides[i] = g.st[0][i];
	}
	return c;
}

// Walk of index_select / index_add over `small` (big's shape with dim replaced
// by idx's dims): operand big_op walks big without dim (stride 0 over idx's
// dims), the other small, operand 2 idx (stride 0 off idx's dims).
static ix_geom indexed_geom(const struct tensor *big, int dim, const struct tensor *idx,
			    const struct tensor *small, int big_op)
{
	ix_geom g;
	memset(&g, 0, sizeof g);
	g.ndim = small->ndim;
	int small_op = 1 - big_op;
	for (int i = 0; i < small->ndim; i++) {
		g.shape[i] = small->shape[i];
		g.st[small_op][i] = small->strides[i];
		if (i < dim)
			g.st[big_op][i] = big->strides[i];
		else if (i < dim + idx->ndim)
			g.st[2][i] = idx->strides[i - dim];
		else
			g.st[big_op][i] = big->strides[i - idx->ndim + 1];
	}
	ix_coalesce(&g);
	return g;
}

// Walk of gather / scatter_add over idx's shape: operands a (0), b (1) and
// idx (2); a `view` operand gets stride 0 along dim (its coordinate there
// comes from the index).
static ix_geom elem_geom(const struct tensor *idx, int dim, const struct tensor *a, bool a_view,
			 const struct tensor *b, bool b_view)
{
	ix_geom g;
	memset(&g, 0, sizeof g);
	g.ndim = idx->ndim;
	for (int i = 0; i < idx->ndim; i++) {
		g.shape[i] = idx->shape[i];
		g.st[0][i] = a_view && i == dim ? 0 : a->strides[i];
		g.st[1][i] = b_view && i == dim ? 0 : b->strides[i];
		g.st[2][i] = idx->strides[i];
	}
	ix_coalesce(&g);
	return g;
}

// ---- device helpers -------------------------------------------------------------

// Grid-stride loop with an index of type I; n < 2^31 for I = uint32_t, so
// i + stride (a grid of at most a few waves) cannot wrap.
#define IX_LOOP(I, i, n)                                                    \
	for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < (n); \
	     i += (I)gridDim.x * (I)blockDim.x)

// Offsets (elements) of the three operands at row-major position i of g.
template <typename I>
__device__ static inline void ix_offsets(const ix_geom &g, I i, int64_t off[3])
{
	off[0] = off[1] = off[2] = 0;
	for (int d = g.ndim - 1; d >= 0; d--) {
		I s = (I)g.shape[d], q = i / s;
		int64_t c = (int64_t)(i - q * s);
		off[0] += c * g.st[0][d];
		off[1] += c * g.st[1][d];
		off[2] += c * g.st[2][d];
		i = q;
	}
}

// Index j (row-major) of a coalesced index geometry.
__device__ static inline int64_t idx_at(const cuda_geom &ig, int64_t j)
{
	int64_t off = ig.ndim == 1 ? j * ig.strides[0] : cuda_offset(ig, j);
	return cuda_load_index(ig.base, ig.dtype, off);
}

// *p += v, atomically; integers wrap.
__device__ static inline void red(float *p, float v)
{
	atomicAdd(p, v);
}
__device__ static inline void red(double *p, double v)
{
	atomicAdd(p, v);
}
__device__ static inline void red(int32_t *p, int32_t v)
{
	atomicAdd((int *)p, (int)v);
}
__device__ static inline void red(int64_t *p, int64_t v)
{
	atomicAdd((unsigned long long *)p, (unsigned long long)v);
}
__device__ static inline void red(float2 *p, float2 v)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	atomicAdd(p, v);
#else
	atomicAdd(&p->x, v.x);
	atomicAdd(&p->y, v.y);
#endif
}
__device__ static inline void red(float4 *p, float4 v)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	atomicAdd(p, v);
#else
	atomicAdd(&p->x, v.x);
	atomicAdd(&p->y, v.y);
	atomicAdd(&p->z, v.z);
	atomicAdd(&p->w, v.w);
#endif
}

// ---- kernels --------------------------------------------------------------------

// Row copy: out [outer, nidx, w] (contiguous, in units U) = src [outer, S, w]
// at the rows idx[j]; a bad index gives a row of zeros.
template <typename U, typename I>
__global__ static void select_rows_kernel(U *__restrict__ out, const U *__restrict__ src,
					  cuda_geom ig, I total, I w, I nidx, int64_t S)
{
	IX_LOOP(I, u, total) {
		I row = u / w, c = u - row * w;
		I o = row / nidx, j = row - o * nidx;
		int64_t k = idx_at(ig, (int64_t)j);
		U v{};
		if (k >= 0 && k < S)
			v = src[((int64_t)o * S + k) * (int64_t)w + (int64_t)c];
		out[u] = v;
	}
}

// Row accumulate: dst [outer, S, w] (contiguous) at rows idx[j] += src
// [outer, nidx, w] (contiguous); a bad index is skipped.
template <typename U, typename I>
__global__ static void add_rows_kernel(U *dst, const U *__restrict__ src, cuda_geom ig, I total,
				       I w, I nidx, int64_t S)
{
	IX_LOOP(I, u, total) {
		I row = u / w, c = u - row * w;
		I o = row / nidx, j = row - o * nidx;
		int64_t k = idx_at(ig, (int64_t)j);
		if (k >= 0 && k < S)
			red(dst + ((int64_t)o * S + k) * (int64_t)w + (int64_t)c, src[u]);
	}
}

// Generic copy (index_select, gather): out[o0] = src[o1 + k sd], k = idx[o2];
// 0 for a bad k. T: an unsigned integer of the element's size (exact copy).
template <typename T, typename I>
__global__ static void copy_kernel(ix_geom g, T *out, const T *__restrict__ src, const void *idx,
				   int idt, I n, int64_t S, int64_t sd)
{
	IX_LOOP(I, i, n) {
		int64_t off[3];
		ix_offsets(g, i, off);
		int64_t k = cuda_load_index(idx, idt, off[2]);
		T v = 0;
		if (k >= 0 && k < S)
			v = src[off[1] + k * sd];
		out[off[0]] = v;
	}
}

// Generic accumulate (index_add, scatter_add): dst[o0 + k dd] += src[o1],
// k = idx[o2]; a bad k is skipped.
template <typename T, typename I>
__global__ static void accum_kernel(ix_geom g, T *dst, const T *__restrict__ src, const void *idx,
				    int idt, I n, int64_t S, int64_t dd)
{
	IX_LOOP(I, i, n) {
		int64_t off[3];
		ix_offsets(g, i, off);
		int64_t k = cuda_load_index(idx, idt, off[2]);
		if (k >= 0 && k < S)
			red(dst + off[0] + k * dd, src[off[1]]);
	}
}

// Records the first index outside [0, size) that claims the fault record.
template <typename I>
__global__ static void check_kernel(cuda_geom ig, I n, int64_t size, cuda_fault *f, uint64_t op,
				    int dim)
{
	IX_LOOP(I, i, n) {
		int64_t v = idx_at(ig, (int64_t)i);
		if (v >= 0 && v < size)
			continue;
		// the plain read spares the atomics (over the bus: the record is in
		// mapped host memory) once a fault is recorded
		if (*(volatile int *)&f->code != CUDA_FAULT_NONE ||
		    atomicCAS(&f->code, CUDA_FAULT_NONE, CUDA_FAULT_INDEX) != CUDA_FAULT_NONE)
			continue;
		f->op = op;
		f->dim = dim;
		f->value = (long long)v;
		f->pos = (long long)i;
		f->size = (long long)size;
	}
}

// ---- launches -------------------------------------------------------------------

static const int64_t SMALL = INT32_MAX; // n < SMALL: 32-bit index math

template <typename U>
static void select_rows(struct tensor *out, const struct tensor *src, cuda_geom ig, int64_t total,
			int64_t w, int64_t nidx, int64_t S)
{
	U *o = (U *)cuda_ptr(out);
	const U *s = (const U *)cuda_ptr(src);
	unsigned b = cuda_blocks(total, THREADS);
	if (total < SMALL)
		select_rows_kernel<U, uint32_t><<<b, THREADS, 0, cuda_stream()>>>(
		    o, s, ig, (uint32_t)total, (uint32_t)w, (uint32_t)nidx, S);
	else
		select_rows_kernel<U, uint64_t><<<b, THREADS, 0, cuda_stream()>>>(
		    o, s, ig, (uint64_t)total, (uint64_t)w, (uint64_t)nidx, S);
}

template <typename U>
static void add_rows(struct tensor *dst, const struct tensor *src, cuda_geom ig, int64_t total,
		     int64_t w, int64_t nidx, int64_t S)
{
	U *d = (U *)cuda_ptr(dst);
	const U *s = (const U *)cuda_ptr(src);
	unsigned b = cuda_blocks(total, THREADS);
	if (total < SMALL)
		add_rows_kernel<U, uint32_t><<<b, THREADS, 0, cuda_stream()>>>(
		    d, s, ig, (uint32_t)total, (uint32_t)w, (uint32_t)nidx, S);
	else
		add_rows_kernel<U, uint64_t><<<b, THREADS, 0, cuda_stream()>>>(
		    d, s, ig, (uint64_t)total, (uint64_t)w, (uint64_t)nidx, S);
}

template <typename T>
static void copy_generic(const ix_geom &g, void *out, const void *src, const struct tensor *idx,
			 int64_t n, int64_t S, int64_t sd)
{
	unsigned b = cuda_blocks(n, THREADS);
	const void *ip = cuda_ptr(idx);
	if (n < SMALL)
		copy_kernel<T, uint32_t><<<b, THREADS, 0, cuda_stream()>>>(
		    g, (T *)out, (const T *)src, ip, (int)idx->dtype, (uint32_t)n, S, sd);
	else
		copy_kernel<T, uint64_t><<<b, THREADS, 0, cuda_stream()>>>(
		    g, (T *)out, (const T *)src, ip, (int)idx->dtype, (uint64_t)n, S, sd);
}

// Element copies go by size: 4 bytes (f32, i32) or 8 (f64, i64).
static void copy_any(const ix_geom &g, struct tensor *out, const struct tensor *src,
		     const struct tensor *idx, int64_t n, int64_t S, int64_t sd)
{
	if (tensor_dtype_size(src->dtype) == 4)
		copy_generic<uint32_t>(g, cuda_ptr(out), cuda_ptr(src), idx, n, S, sd);
	else
		copy_generic<unsigned long long>(g, cuda_ptr(out), cuda_ptr(src), idx, n, S, sd);
}

template <typename T>
static void accum_generic(const ix_geom &g, void *dst, const void *src, const struct tensor *idx,
			  int64_t n, int64_t S, int64_t dd)
{
	unsigned b = cuda_blocks(n, THREADS);
	const void *ip = cuda_ptr(idx);
	if (n < SMALL)
		accum_kernel<T, uint32_t><<<b, THREADS, 0, cuda_stream()>>>(
		    g, (T *)dst, (const T *)src, ip, (int)idx->dtype, (uint32_t)n, S, dd);
	else
		accum_kernel<T, uint64_t><<<b, THREADS, 0, cuda_stream()>>>(
		    g, (T *)dst, (const T *)src, ip, (int)idx->dtype, (uint64_t)n, S, dd);
}

static void accum_any(const ix_geom &g, struct tensor *dst, const struct tensor *src,
		      const struct tensor *idx, int64_t n, int64_t S, int64_t dd)
{
	void *d = cuda_ptr(dst);
	const void *s = cuda_ptr(src);
	switch (dst->dtype) {
	case TENSOR_F32: accum_generic<float>(g, d, s, idx, n, S, dd); break;
	case TENSOR_F64: accum_generic<double>(g, d, s, idx, n, S, dd); break;
	case TENSOR_I32: accum_generic<int32_t>(g, d, s, idx, n, S, dd); break;
	default: accum_generic<int64_t>(g, d, s, idx, n, S, dd); break;
	}
}

// Elements after dim of t (a row of the row paths).
static int64_t inner_of(const struct tensor *t, int dim)
{
	int64_t inner = 1;
	for (int i = dim + 1; i < t->ndim; i++)
		inner *= t->shape[i];
	return inner;
}

// Both addresses aligned to `bytes`.
static bool aligned(const void *a, const void *b, uintptr_t bytes)
{
	return ((uintptr_t)a | (uintptr_t)b) % bytes == 0;
}

// ---- the slots ------------------------------------------------------------------

extern "C" int cuda_index_select(struct tensor *out, const struct tensor *src, int dim,
				 const struct tensor *idx)
{
	int64_t n = tensor_numel(out);
	if (n == 0)
		return TENSOR_OK;
	if (!tensor_is_contiguous(src) || !tensor_is_contiguous(out)) {
		ix_geom g = indexed_geom(src, dim, idx, out, 1);
		copy_any(g, out, src, idx, n, src->shape[dim], src->strides[dim]);
		return cuda_launched("index_select");
	}
	// rows of inner elements, copied in the widest unit both sides allow
	int64_t es = (int64_t)tensor_dtype_size(src->dtype), bytes = inner_of(src, dim) * es;
	int64_t S = src->shape[dim], nidx = tensor_numel(idx);
	const void *o = cuda_ptr(out), *s = cuda_ptr(src);
	int64_t unit = bytes % 16 == 0 && aligned(o, s, 16) ? 16
		       : bytes % 8 == 0 && aligned(o, s, 8) ? 8
							    : 4;
	int64_t w = bytes / unit, total = n * es / unit;
	cuda_geom ig = index_geom(idx);
	if (unit == 16)
		select_rows<uint4>(out, src, ig, total, w, nidx, S);
	else if (unit == 8)
		select_rows<uint2>(out, src, ig, total, w, nidx, S);
	else
		select_rows<uint32_t>(out, src, ig, total, w, nidx, S);
	return cuda_launched("index_select");
}

extern "C" int cuda_index_add(struct tensor *dst, int dim, const struct tensor *idx,
			      const struct tensor *src)
{
	int64_t n = tensor_numel(src);
	if (n == 0)
		return TENSOR_OK;
	if (!tensor_is_contiguous(dst) || !tensor_is_contiguous(src)) {
		ix_geom g = indexed_geom(dst, dim, idx, src, 0);
		accum_any(g, dst, src, idx, n, dst->shape[dim], dst->strides[dim]);
		return cuda_launched("index_add_");
	}
	// rows: one thread per (index, column), f32 columns in fours or twos
	int64_t inner = inner_of(dst, dim), S = dst->shape[dim], nidx = tensor_numel(idx);
	cuda_geom ig = index_geom(idx);
	const void *d = cuda_ptr(dst), *s = cuda_ptr(src);
	switch (dst->dtype) {
	case TENSOR_F32:
		if (inner % 4 == 0 && aligned(d, s, 16))
			add_rows<float4>(dst, src, ig, n / 4, inner / 4, nidx, S);
		else if (inner % 2 == 0 && aligned(d, s, 8))
			add_rows<float2>(dst, src, ig, n / 2, inner / 2, nidx, S);
		else
			add_rows<float>(dst, src, ig, n, inner, nidx, S);
		break;
	case TENSOR_F64: add_rows<double>(dst, src, ig, n, inner, nidx, S); break;
	case TENSOR_I32: add_rows<int32_t>(dst, src, ig, n, inner, nidx, S); break;
	default: add_rows<int64_t>(dst, src, ig, n, inner, nidx, S); break;
	}
	return cuda_launched("index_add_");
}

extern "C" int cuda_gather(struct tensor *out, const struct tensor *src, int dim,
			   const struct tensor *idx)
{
	int64_t n = tensor_numel(idx);
	if (n == 0)
		return TENSOR_OK;
	ix_geom g = elem_geom(idx, dim, out, false, src, true);
	copy_any(g, out, src, idx, n, src->shape[dim], src->strides[dim]);
	return cuda_launched("gather");
}

extern "C" int cuda_scatter_add(struct tensor *dst, int dim, const struct tensor *idx,
				const struct tensor *src)
{
	int64_t n = tensor_numel(idx);
	if (n == 0)
		return TENSOR_OK;
	ix_geom g = elem_geom(idx, dim, dst, true, src, false);
	accum_any(g, dst, src, idx, n, dst->shape[dim], dst->strides[dim]);
	return cuda_launched("scatter_add_");
}

extern "C" int cuda_check_index(const char *op, const struct tensor *idx, int dim, int64_t size)
{
	int64_t n = tensor_numel(idx);
	if (n == 0)
		return TENSOR_OK;
	cuda_fault *f = cuda_fault_device();
	if (!f)
		return tensor_last_status();
	cuda_geom ig = index_geom(idx);
	uint64_t opv = (uint64_t)(uintptr_t)op;
	unsigned b = cuda_blocks(n, THREADS);
	if (n < SMALL)
		check_kernel<uint32_t>
		    <<<b, THREADS, 0, cuda_stream()>>>(ig, (uint32_t)n, size, f, opv, dim);
	else
		check_kernel<uint64_t>
		    <<<b, THREADS, 0, cuda_stream()>>>(ig, (uint64_t)n, size, f, opv, dim);
	return cuda_launched(op);
}
