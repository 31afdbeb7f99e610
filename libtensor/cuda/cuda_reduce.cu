// CUDA reductions along one dim (the reduce slot): sum, max, min and argmax,
// with the CPU's semantics (cpu_reduce.c): float sums accumulate in double,
// integer sums wrap as uint64; NaN counts as the maximum (and the minimum)
// and the first one wins; argmax gives the first index of the maximum; an
// empty dim sums to 0.
//
// The outputs' dims (x with the reduced dim dropped) are merged as
// cpu_loop_init does. A block of 256 threads is a tile of bx outputs times by
// lanes that split each output's run (bx * by = 256):
// - lanes fastest (the reduced dim has stride 1): the lanes of an output are
//   adjacent threads, reading its run coalesced, combined with shuffles
//   (and shared memory past a warp);
// - outputs fastest (adjacent outputs are adjacent in x, e.g. [N, C] summed
//   over N): a warp reads whole rows, lanes combined in shared memory.
// Outputs too few to fill the device split their runs into chunks
// (blockIdx.y) whose partial states go to scratch and are folded in chunk
// order by a second kernel. Every combination order is fixed, so sums are
// deterministic; max/min/argmax combine with the index as tie-break, so the
// order does not matter to them.
#include <cuda_runtime.h>

#include "cuda_internal.h"

#define RED_THREADS 256
#define RED_LG_THREADS 8
#define RED_MAX_SPLIT 1024

struct red_geo {
	int ndim; /* >= 1 */
	int64_t shape[CUDA_MAX_DIMS];
	int64_t ost[CUDA_MAX_DIMS], xst[CUDA_MAX_DIMS]; /* strides of out and x */
	int64_t m;					/* outputs */
	int64_t n, sx;					/* length and stride of the reduced dim */
	int64_t chunk; /* elements of the reduced dim per blockIdx.y */
	int lg_by;     /* log2 of the lanes per output */
	int small;     /* output indices fit 32 bits */
	int vec;       /* runs contiguous and 16-byte aligned, chunk too: vector loads */
};

/* Running state of one output: the sum, or the max/min and its index (-1
 * before the first element). Floats in double, integers in int64. */
template <typename T> struct red_acc {
	typedef double type;
};
template <> struct red_acc<int32_t> {
	typedef int64_t type;
};
template <> struct red_acc<int64_t> {
	typedef int64_t type;
};

template <typename V> struct red_st {
	V v;
	int64_t i;
};

__device__ static __forceinline__ bool red_nan(double v)
{
	return v != v;
}
__device__ static __forceinline__ bool red_nan(int64_t)
{
	return false;
}
__device__ static __forceinline__ double red_add(double a, double b)
{
	return a + b;
}
__device__ static __forceinline__ int64_t red_add(int64_t a, int64_t b)
{
	return (int64_t)((uint64_t)a + (uint64_t)b);
}

/* Fold element v of index k; indices arrive in increasing order, so the
 * first max (or NaN) stays. */
template <int OP, typename V>
__device__ static __forceinline__ void red_fold(red_st<V> &s, V v, int64_t k)
{
	if (OP == TENSOR_RED_SUM) {
		s.v = red_add(s.v, v);
		return;
	}
	bool take;
	if (OP == TENSOR_RED_MIN)
		take = s.i < 0 || v < s.v || (red_nan(v) && !red_nan(s.v));
	else
		take = s.i < 0 || v > s.v || (red_nan(v) && !red_nan(s.v));
	if (take) {
		s.v = v;
		s.i = k;
	}
}

/* Combine two states of disjoint index sets: the better value, NaN above
 * all, the lower index between equals. */
template <int OP, typename V>
__device__ static __forceinline__ red_st<V> red_merge(red_st<V> a, red_st<V> b)
{
	if (OP == TENSOR_RED_SUM) {
		a.v = red_add(a.v, b.v);
		return a;
	}
	bool take, an = red_nan(a.v), bn = red_nan(b.v);
	if (b.i < 0)
		take = false;
	else if (a.i < 0)
		take = true;
	else if (an || bn)
		take = bn && (!an || b.i < a.i);
	else if (OP == TENSOR_RED_MIN)
		take = b.v < a.v || (b.v == a.v && b.i < a.i);
	else
		take = b.v > a.v || (b.v == a.v && b.i < a.i);
	return take ? b : a;
}

template <int OP, typename V>
__device__ static __forceinline__ red_st<V> red_shfl_xor(const red_st<V> &s, int o)
{
	red_st<V> b;
	b.v = __shfl_xor_sync(0xffffffffu, s.v, o);
	b.i = OP == TENSOR_RED_SUM ? 0 : __shfl_xor_sync(0xffffffffu, s.i, o);
	return b;
}

/* Offsets in out and x of output j. */
__device__ static __forceinline__ void red_offsets(const red_geo &g, int64_t j, int64_t &oo,
						   int64_t &xo)
{
	oo = 0;
	xo = 0;
	for (int d = g.ndim - 1; d > 0; d--) {
		int64_t q, r;
		if (g.small) {
			uint32_t a = (uint32_t)j, b = (uint32_t)g.shape[d], c = a / b;
			q = c;
			r = a - c * b;
		} else {
			q = j / g.shape[d];
			r = j - q * g.shape[d];
		}
		oo += r * g.ost[d];
		xo += r * g.xst[d];
		j = q;
	}
	oo += j * g.ost[0];
	xo += j * g.xst[0];
}

/* A state's value as out's dtype: floats rounded, i32 keeps the low bits. */
__device__ static __forceinline__ void red_put(float *o, double v)
{
	*o = (float)v;
}
__device__ static __forceinline__ void red_put(double *o, double v)
{
	*o = v;
}
__device__ static __forceinline__ void red_put(int32_t *o, int64_t v)
{
	*o = (int32_t)(uint32_t)(uint64_t)v;
}
__device__ static __forceinline__ void red_put(int64_t *o, int64_t v)
{
	*o = v;
}

template <typename T, int OP, typename V>
__device__ static __forceinline__ void red_store(void *out, int64_t off, const red_st<V> &s)
{
	if constexpr (OP == TENSOR_RED_ARGMAX)
		((int64_t *)out)[off] = s.i;
	else
		red_put((T *)out + off, s.v);
}

/* Fold elements k, k + by, ... below k1 of the run at x (stride sx) into s,
 * eight loads in flight. */
template <int OP, typename T, typename V>
__device__ static __forceinline__ void red_run(red_st<V> &s, const T *x, int64_t sx, int64_t k,
					       int64_t k1, int by)
{
	const int U = 8;
	const int64_t step = (int64_t)by * sx;
	const T *p = x + k * sx;
	for (; k + (U - 1) * by < k1; k += U * by, p += U * step) {
		T v[U];
		const T *q = p;
#pragma unroll
		for (int u = 0; u < U; u++, q += step)
			v[u] = *q;
#pragma unroll
		for (int u = 0; u < U; u++)
			red_fold<OP>(s, (V)v[u], k + u * by);
	}
	for (; k < k1; k += by, p += step)
		red_fold<OP>(s, (V)*p, k);
}

template <typename T> struct alignas(16) red_vec {
	T v[16 / sizeof(T)];
};

/* The same over a contiguous run in 16-byte vectors: lane ty takes vectors
 * ty, ty + by, ... of [k0, k1) (x + k0 aligned), then the elements past the
 * last whole vector; each lane still folds in index order. */
template <int OP, typename T, typename V>
__device__ static __forceinline__ void red_run_vec(red_st<V> &s, const T *x, int64_t k0, int64_t k1,
						   int ty, int by)
{
	const int W = 16 / sizeof(T), U = 4;
	const red_vec<T> *q = (const red_vec<T> *)(x + k0);
	const int64_t nv = (k1 - k0) / W;
	int64_t i = ty;
	for (; i + (U - 1) * by < nv; i += U * by) {
		red_vec<T> v[U];
#pragma unroll
		for (int u = 0; u < U; u++)
			v[u] = q[i + u * by];
#pragma unroll
		for (int u = 0; u < U; u++)
#pragma unroll
			for (int e = 0; e < W; e++)
				red_fold<OP>(s, (V)v[u].v[e], k0 + (i + u * by) * W + e);
	}
	for (; i < nv; i += by) {
		red_vec<T> v = q[i];
#pragma unroll
		for (int e = 0; e < W; e++)
			red_fold<OP>(s, (V)v.v[e], k0 + i * W + e);
	}
	for (int64_t k = k0 + nv * W + ty; k < k1; k += by)
		red_fold<OP>(s, (V)x[k], k);
}

/* One tile of bx outputs per block (grid-stride), chunk blockIdx.y of each
 * output's run; KFAST: lanes are the fast thread index. With gridDim.y 1 the
 * results go to out, else the partial states to pv/pi [chunk][output]. */
template <typename T, int OP, bool KFAST>
__global__ void __launch_bounds__(RED_THREADS, 4)
    red_kernel(red_geo g, const T *__restrict__ x, void *out, typename red_acc<T>::type *pv,
	       int64_t *pi)
{
	typedef typename red_acc<T>::type V;
	__shared__ red_st<V> sm[RED_THREADS];
	const int lg = g.lg_by, by = 1 << lg, lgx = RED_LG_THREADS - lg, bx = 1 << lgx;
	const int t = threadIdx.x;
	const int ty = KFAST ? t & (by - 1) : t >> lgx;
	const int tx = KFAST ? t >> lg : t & (bx - 1);
	const int64_t k0 = (int64_t)blockIdx.y * g.chunk;
	const int64_t k1 = k0 + g.chunk < g.n ? k0 + g.chunk : g.n;
	const int64_t tiles = (g.m + bx - 1) >> lgx;
	for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
		int64_t j = (tile << lgx) + tx, oo = 0, xo;
		red_st<V> s;
		s.v = 0;
		s.i = -1;
		if (j < g.m) {
			red_offsets(g, j, oo, xo);
			if (KFAST && g.vec)
				red_run_vec<OP, T, V>(s, x + xo, k0, k1, ty, by);
			else
				red_run<OP, T, V>(s, x + xo, g.sx, k0 + ty, k1, by);
		}
		if (KFAST) {
			/* lanes ty of one output are adjacent: shuffles in the warp */
			for (int o = (by < 32 ? by : 32) >> 1; o > 0; o >>= 1)
				s = red_merge<OP>(s, red_shfl_xor<OP>(s, o));
			if (by > 32) { /* then its warps through shared memory */
				const int nw = by >> 5;
				if ((t & 31) == 0)
					sm[t >> 5] = s;
				__syncthreads();
				if (ty == 0)
					for (int w = 1; w < nw; w++)
						s = red_merge<OP>(s, sm[(t >> 5) + w]);
				__syncthreads();
			}
		} else if (by > 1) {
			/* tree over ty in shared memory: sm[ty][tx] */
			sm[t] = s;
			__syncthreads();
			for (int h = by >> 1; h > 0; h >>= 1) {
				if (ty < h)
					sm[t] = red_merge<OP>(sm[t], sm[t + (h << lgx)]);
				__syncthreads();
			}
			if (ty == 0)
				s = sm[t];
			__syncthreads();
		}
		if (ty == 0 && j < g.m) {
			if (gridDim.y == 1) {
				red_store<T, OP>(out, oo, s);
			} else {
				int64_t at = (int64_t)blockIdx.y * g.m + j;
				pv[at] = s.v;
				if (OP != TENSOR_RED_SUM)
					pi[at] = s.i;
			}
		}
	}
}

/* Fold the partial states of `splits` chunks, a warp per output: lanes take
 * chunks lane, lane + 32, ... in order, then combine by shuffles. */
template <typename T, int OP>
__global__ void __launch_bounds__(RED_THREADS)
    red_finish(red_geo g, void *out, const typename red_acc<T>::type *pv, const int64_t *pi,
	       int splits)
{
	typedef typename red_acc<T>::type V;
	const int lane = threadIdx.x & 31;
	const int64_t warps = (int64_t)gridDim.x * (RED_THREADS / 32);
	for (int64_t j = blockIdx.x * (int64_t)(RED_THREADS / 32) + (threadIdx.x >> 5); j < g.m;
	     j += warps) {
		red_st<V> s;
		s.v = 0;
		s.i = -1;
#pragma unroll 4
		for (int c = lane; c < splits; c += 32) {
			red_st<V> b;
			b.v = pv[(int64_t)c * g.m + j];
			b.i = OP == TENSOR_RED_SUM ? 0 : pi[(int64_t)c * g.m + j];
			s = red_merge<OP>(s, b);
		}
		for (int o = 16; o > 0; o >>= 1)
			s = red_merge<OP>(s, red_shfl_xor<OP>(s, o));
		if (lane == 0) {
			int64_t oo, xo;
			red_offsets(g, j, oo, xo);
			red_store<T, OP>(out, oo, s);
		}
	}
}

/* ---- host side -------------------------------------------------------------- */

static int red_lg2_ceil(int64_t v)
{
	int lg = 0;
	while (((int64_t)1 << lg) < v)
		lg++;
	return lg;
}

/* The outputs' geometry: out and x at index 0 of dim, merged. */
static void red_merge_dims(red_geo *g, const struct tensor *out, const struct tensor *x, int dim)
{
	int nd = 0;
	for (int d = 0; d < x->ndim; d++) {
		int64_t size = d == dim ? 1 : x->shape[d];
		if (size == 1)
			continue;
		if (nd > 0 && g->ost[nd - 1] == out->strides[d] * size &&
		    g->xst[nd - 1] == x->strides[d] * size) {
			g->shape[nd - 1] *= size;
			g->ost[nd - 1] = out->strides[d];
			g->xst[nd - 1] = x->strides[d];
			continue;
		}
		g->shape[nd] = size;
		g->ost[nd] = out->strides[d];
		g->xst[nd] = x->strides[d];
		nd++;
	}
	if (nd == 0) {
		g->shape[0] = 1;
		g->ost[0] = 1;
		g->xst[0] = 1;
		nd = 1;
	}
	g->ndim = nd;
}

template <typename T, int OP>
static int red_launch(red_geo *g, bool kfast, int64_t splits, void *out, const void *x)
{
	typedef typename red_acc<T>::type V;
	int64_t bx = RED_THREADS >> g->lg_by, tiles = (g->m + bx - 1) / bx;
	int64_t cap = cuda_blocks((int64_t)1 << 40, RED_THREADS);
	dim3 grid((unsigned)(tiles < cap ? tiles : cap), (unsigned)splits);
	V *pv = NULL;
	int64_t *pi = NULL;
	if (splits > 1) {
		size_t states = (size_t)(splits * g->m);
		size_t bytes = states * sizeof(V) + (OP == TENSOR_RED_SUM ? 0 : states * 8);
		char *buf = (char *)cuda_scratch(bytes, "reduce");
		if (!buf)
			return tensor_last_status();
		pv = (V *)buf;
		pi = OP == TENSOR_RED_SUM ? NULL : (int64_t *)(buf + states * sizeof(V));
	}
	cudaStream_t st = cuda_stream();
	if (kfast)
		red_kernel<T, OP, true>
		    <<<grid, RED_THREADS, 0, st>>>(*g, (const T *)x, out, pv, pi);
	else
		red_kernel<T, OP, false>
		    <<<grid, RED_THREADS, 0, st>>>(*g, (const T *)x, out, pv, pi);
	if (splits > 1) {
		int rc = cuda_launched("reduce");
		if (rc < 0)
			return rc;
		red_finish<T, OP><<<cuda_blocks(g->m * 32, RED_THREADS), RED_THREADS, 0, st>>>(
		    *g, out, pv, pi, (int)splits);
	}
	return cuda_launched("reduce");
}

template <typename T>
static int red_dispatch(enum tensor_reduce_op op, red_geo *g, bool kfast, int64_t splits, void *out,
			const void *x)
{
	switch (op) {
	case TENSOR_RED_SUM: return red_launch<T, TENSOR_RED_SUM>(g, kfast, splits, out, x);
	case TENSOR_RED_MAX: return red_launch<T, TENSOR_RED_MAX>(g, kfast, splits, out, x);
	case TENSOR_RED_MIN: return red_launch<T, TENSOR_RED_MIN>(g, kfast, splits, out, x);
	default: return red_launch<T, TENSOR_RED_ARGMAX>(g, kfast, splits, out, x);
	}
}

extern "C" int cuda_reduce(enum tensor_reduce_op op, struct tensor *out, const struct tensor *x,
			   int dim)
{
	int64_t n = x->shape[dim];
	int64_t m = tensor_numel(out);
	if (m == 0)
		return TENSOR_OK;
	if (n == 0 && op != TENSOR_RED_SUM)
		return tensor_error(TENSOR_ERR_SHAPE, "reduce: dim %d to reduce is empty", dim);
	red_geo g = {};
	red_merge_dims(&g, out, x, dim);
	g.m = m;
	g.n = n;
	g.sx = x->strides[dim];
	g.small = m <= (int64_t)UINT32_MAX;

	/* Lanes along the reduced dim when it is contiguous (or steps less than
	 * adjacent outputs do), else outputs along the threads. A contiguous run
	 * is read in 16-byte vectors of vw elements when every run starts
	 * aligned; nl counts a lane's items (vectors or elements). */
	int64_t xin = g.xst[g.ndim - 1], w = g.shape[g.ndim - 1];
	int64_t ax = xin < 0 ? -xin : xin, as = g.sx < 0 ? -g.sx : g.sx;
	bool kfast = n > 1 && (g.sx == 1 || (xin != 1 && as < ax));
	int64_t vw = 16 / (int64_t)tensor_dtype_size(x->dtype);
	g.vec = kfast && g.sx == 1 && n >= 2 * vw && (uintptr_t)cuda_ptr(x) % 16 == 0;
	for (int d = 0; d < g.ndim; d++)
		if (g.shape[d] > 1 && g.xst[d] % vw)
			g.vec = 0;
	int64_t nl = g.vec ? (n + vw - 1) / vw : n;
	int64_t cap = cuda_blocks((int64_t)1 << 40, RED_THREADS);
	int64_t target = cap * RED_THREADS; /* threads that fill the device */
	int lg;
	if (kfast) {
		/* up to a warp an output, more while the device is not full and
		 * each lane keeps at least 8 items */
		lg = red_lg2_ceil(nl) < 5 ? red_lg2_ceil(nl) : 5;
		while (lg < RED_LG_THREADS && (m << lg) < target && nl >= ((int64_t)16 << lg))
			lg++;
	} else {
		/* enough outputs along a warp to read whole 128-byte lines */
		int lgw = red_lg2_ceil(w) < 5 ? red_lg2_ceil(w) : 5;
		lg = red_lg2_ceil(n);
		lg = lg < RED_LG_THREADS - lgw ? lg : RED_LG_THREADS - lgw;
		/* fewer lanes with longer runs while there are outputs enough */
		while (lg > 0 && (m << (lg - 1)) >= target && (n >> lg) < 16)
			lg--;
	}
	g.lg_by = lg;

	/* Split each run when the tiles leave the device idle and the lanes
	 * have long runs: at least 16 items a lane in each chunk (a chunk
	 * keeps vectors whole). */
	int64_t bx = RED_THREADS >> lg, tiles = (m + bx - 1) / bx, splits = 1;
	int64_t per = (nl + ((int64_t)1 << lg) - 1) >> lg;
	if (tiles < cap / 4 && per >= 32) {
		splits = cap / 4 / tiles; /* about one wave of blocks */
		splits = splits < per / 16 ? splits : per / 16;
		splits = splits < RED_MAX_SPLIT ? splits : RED_MAX_SPLIT;
		splits = splits > 1 ? splits : 1;
	}
	g.chunk = n > 0 ? (nl + splits - 1) / splits * (g.vec ? vw : 1) : 0;
	if (g.chunk > 0)
		splits = (n + g.chunk - 1) / g.chunk;

	void *o = cuda_ptr(out);
	const void *xp = cuda_ptr(x);
	switch (x->dtype) {
	case TENSOR_F32: return red_dispatch<float>(op, &g, kfast, splits, o, xp);
	case TENSOR_F64: return red_dispatch<double>(op, &g, kfast, splits, o, xp);
	case TENSOR_I32: return red_dispatch<int32_t>(op, &g, kfast, splits, o, xp);
	default: return red_dispatch<int64_t>(op, &g, kfast, splits, o, xp);
	}
}
