// CUDA softmax / log-softmax and its backward, layer and RMS norm and their
// backward (the fused optimizers are in cuda_optim.cu). The CPU kernels
// (cpu/cpu_nn.c) are the reference: the same statistics in
// double, the same float formulas, the same NaN / inf behaviour.
//
// Layout:
//  - Row kernels (softmax, softmax backward, norm forward, the dx of norm
//    backward): a group of G threads per row: 8 or 16 lanes up to 128
//    elements, a warp up to 1024, a block of 128 to 1024 threads up to 16384;
//    each thread keeps N elements of the row in registers, so the row is read
//    once. Longer rows go through the same kernels in chunks of G * N, read
//    again in each pass (CACHED = false).
//  - Register j of thread t holds column ((j / CH) * G + t) * CH + j % CH:
//    runs of CH = 16 bytes, loaded as float4 / double2 where the rows are
//    contiguous and 16-byte aligned, else element by element with any stride.
//  - Rows of strided operands: the dims before the last, size-1 dims dropped
//    and mergeable dims merged on the host (one multiply for most views).
//  - Sums of rows are in double and reduced by shuffles (and shared memory
//    across the warps of a block) in a fixed order: every thread gets the
//    same bits and results do not depend on timing.
//  - Norm backward's dw and db: blocks of 32 runs of columns by a slice of
//    rows sum in double into partial [C] rows in cuda_scratch(), a second
//    kernel adds the partials in slice order (deterministic, no atomics).
//
// Rounding: where the CPU rounds each float operation apart, the kernels use
// __fadd_rn / __fmul_rn / __dmul_rn ... (nvcc would contract a * b + c into an
// FMA). The CPU's f32 row kernels are built with FMA-capable clones (gcc
// contracts a * b + c there), so the f32 norm formulas use the FMA where that
// clone has one.
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "cuda_internal.h"
#include "cuda_rn.cuh"


// ---- rows of a strided operand ----------------------------------------------------

// Row r of an operand starts at p + row_off(r) (elements); the row's own
// elements are sc apart.
struct rowgeom {
	const void *p;
	int64_t sc;
	int nd; // row dims after merging; 0: a single row
	int64_t shape[CUDA_MAX_DIMS], stride[CUDA_MAX_DIMS];
};

__device__ static inline int64_t row_off(const rowgeom &a, int64_t r)
{
	if (a.nd == 1)
		return r * a.stride[0];
	int64_t off = 0;
	for (int d = a.nd - 1; d >= 0; d--) {
		off += (r % a.shape[d]) * a.stride[d];
		r /= a.shape[d];
	}
	return off;
}

// The rows of t (all dims but the last), size-1 dims dropped and a dim merged
// into the one before it where that one's stride is stride * shape.
static rowgeom rowgeom_of(const struct tensor *t)
{
	rowgeom a;
	memset(&a, 0, sizeof a);
	a.p = cuda_ptr(t);
	a.sc = t->ndim ? t->strides[t->ndim - 1] : 1;
	for (int d = 0; d < t->ndim - 1; d++) {
		if (t->shape[d] == 1)
			continue;
		if (a.nd > 0 && a.stride[a.nd - 1] == t->strides[d] * t->shape[d]) {
			a.shape[a.nd - 1] *= t->shape[d];
			a.stride[a.nd - 1] = t->strides[d];
		} else {
			a.shape[a.nd] = t->shape[d];
			a.stride[a.nd] = t->strides[d];
			a.nd++;
		}
	}
	return a;
}


// Rows of n elements starting 16-byte aligned at p, each n apart (contiguous).
static bool vec_contig(const void *p, int64_t n, size_t es)
{
	return aligned16(p) && n % (int64_t)(16 / es) == 0;
}

// Every row of a unit-stride, 16-byte aligned run of whole vectors.
static bool vec_rows(const rowgeom &a, int64_t n, size_t es)
{
	bool ok = a.sc == 1 && vec_contig(a.p, n, es);
	for (int d = 0; ok && d < a.nd; d++)
		ok = (a.stride[d] * (int64_t)es) % 16 == 0;
	return ok;
}

// ---- the registers of a row ------------------------------------------------------

// Elements of a run (a 16-byte vector where N allows it).
template <typename T, int N> __host__ __device__ constexpr int chunk()
{
	return N >= (int)(16 / sizeof(T)) ? (int)(16 / sizeof(T)) : 1;
}


// A chunk of a row is columns [base, base + G N), of which rem (< 2^31) lie
// before the row's end; p points at the chunk's first element and offsets
// within it are ints.

// CH elements at offset o of a chunk (stride sc), pad past rem; vec: one
// aligned vector load (then sc is 1 and rem a multiple of CH).
template <typename T, int CH>
__device__ static inline void ld_run(T *v, const T *p, int64_t sc, int rem, int o, bool vec, T pad)
{
	if constexpr (CH > 1) {
		if (vec) {
			if (o < rem) {
				ld16(v, p + o);
			} else {
#pragma unroll
				for (int e = 0; e < CH; e++)
					v[e] = pad;
			}
			return;
		}
	}
#pragma unroll
	for (int e = 0; e < CH; e++)
		v[e] = o + e < rem ? p[(int64_t)(o + e) * sc] : pad;
}

// The CH elements at offset o of a contiguous chunk that lie before rem.
template <typename T, int CH>
__device__ static inline void st_run(T *p, const T *v, int rem, int o, bool vec)
{
	if constexpr (CH > 1) {
		if (vec) {
			if (o < rem)
				st16(p + o, v);
			return;
		}
	}
#pragma unroll
	for (int e = 0; e < CH; e++)
		if (o + e < rem)
			p[o + e] = v[e];
}

// Offset of run k of thread t in a chunk; register j is at
// off_of(j / CH, t) + j % CH.
template <typename T, int G, int N> __device__ static inline int off_of(int k, int t)
{
	constexpr int CH = chunk<T, N>();
	return (k * G + t) * CH;
}

// Columns of the chunk at base that lie before n.
template <int GN> __device__ static inline int rem_of(int64_t n, int64_t base)
{
	return n - base < GN ? (int)(n - base) : GN;
}

// The thread's N registers of a chunk.
template <typename T, int G, int N>
__device__ static inline void ld_row(T *v, const T *p, int64_t sc, int rem, int t, bool vec, T pad)
{
	constexpr int CH = chunk<T, N>();
#pragma unroll
	for (int k = 0; k < N / CH; k++)
		ld_run<T, CH>(v + k * CH, p, sc, rem, off_of<T, G, N>(k, t), vec, pad);
}

template <typename T, int G, int N>
__device__ static inline void st_row(T *p, const T *v, int rem, int t, bool vec)
{
	constexpr int CH = chunk<T, N>();
#pragma unroll
	for (int k = 0; k < N / CH; k++)
		st_run<T, CH>(p, v + k * CH, rem, off_of<T, G, N>(k, t), vec);
}

// ---- reductions over the G threads of a row ----------------------------------------

// The sum (or the max, NaN skipped) of v over the G threads of a row.
// Butterfly shuffles give every lane the same bits (a + b = b + a); across
// the warps of a block, every thread combines the warps' values in warp
// order. sh: 32 doubles of shared memory, free again on return.
template <int G, bool MAX, typename V> __device__ static inline V group_red(V v, double *sh)
{
#pragma unroll
	for (int o = (G < 32 ? G : 32) / 2; o > 0; o >>= 1) {
		V u = __shfl_xor_sync(0xffffffffu, v, o);
		v = MAX ? max_t(v, u) : v + u;
	}
	if constexpr (G > 32) {
		if ((threadIdx.x & 31) == 0)
			sh[threadIdx.x >> 5] = (double)v;
		__syncthreads();
		v = (V)sh[0];
		for (int i = 1; i < G / 32; i++)
			v = MAX ? max_t(v, (V)sh[i]) : v + (V)sh[i];
		__syncthreads();
	}
	return v;
}

// The rows of a group: G threads per row (8, 16 or 32 lanes of a warp, or a
// whole block), 256 threads (or G) per block. The loop is uniform over the
// block, so shuffles and __syncthreads are safe inside it: a group past the
// last row works on the last row again and stores nothing (live false).
// Chunks: one when CACHED.
#define ROW_BLOCK(G) ((G) < 128 ? 256 : (G))
#define FOR_ROWS(row, live, rows)                                           \
	const int t = threadIdx.x % G;                                      \
	constexpr int RPB = ROW_BLOCK(G) / G;                               \
	for (int64_t r0_ = blockIdx.x * (int64_t)RPB; r0_ < (rows);         \
	     r0_ += (int64_t)gridDim.x * RPB)                               \
		if (const bool live = r0_ + threadIdx.x / G < (rows); true) \
			if (const int64_t row = live ? r0_ + threadIdx.x / G : (rows)-1; true)
#define FOR_CHUNKS(base, rem, n)                                         \
	for (int64_t base = 0; base < (CACHED ? 1 : (n)); base += G * N) \
		if (const int rem = rem_of<G * N>((n), base); rem > 0)
// Whether register j of thread t lies before rem.
#define VALID(j) (off_of<T, G, N>((j) / CH, t) + (j) % CH < rem)

// ---- softmax -------------------------------------------------------------------------

struct softmax_args {
	void *out; // contiguous, may be x
	rowgeom x;
	int64_t rows, n;
	int vx, vo, logsm;
};

// m = max (NaN skipped), e = exp(x - m) in T, s = sum e in double; softmax
// e * (T)(1 / s), log-softmax (T)(x - (m + log s)) in double. A row whose max
// is +-inf or that holds a NaN gives NaN everywhere, as on the CPU.
template <typename T, int G, int N, bool CACHED>
__global__ void __launch_bounds__(ROW_BLOCK(G)) softmax_kernel(softmax_args a)
{
	__shared__ double sh[32];
	constexpr int CH = chunk<T, N>();
	const int64_t n = a.n, sc = a.x.sc;
	FOR_ROWS(row, live, a.rows)
	{
		const T *xr = (const T *)a.x.p + row_off(a.x, row);
		T *yr = (T *)a.out + row * n;
		T v[N], m = (T)-INFINITY;
		FOR_CHUNKS(base, rem, n)
		{
			ld_row<T, G, N>(v, xr + base * sc, sc, rem, t, a.vx, (T)-INFINITY);
#pragma unroll
			for (int j = 0; j < N; j++)
				m = max_t(m, v[j]);
		}
		m = group_red<G, true>(m, sh);
		double s = 0;
		FOR_CHUNKS(base, rem, n)
		{
			if (!CACHED)
				ld_row<T, G, N>(v, xr + base * sc, sc, rem, t, a.vx, (T)0);
#pragma unroll
			for (int j = 0; j < N; j++) {
				T e = exp_t(sub_rn(v[j], m));
				if (VALID(j))
					s += (double)e;
				if (!a.logsm)
					v[j] = e;
			}
		}
		s = group_red<G, false>(s, sh);
		const double c = (double)m + log(s);
		const T inv = (T)(1.0 / s);
		FOR_CHUNKS(base, rem, n)
		{
			if (!CACHED) {
				ld_row<T, G, N>(v, xr + base * sc, sc, rem, t, a.vx, (T)0);
				if (!a.logsm) {
#pragma unroll
					for (int j = 0; j < N; j++)
						v[j] = exp_t(sub_rn(v[j], m));
				}
			}
#pragma unroll
			for (int j = 0; j < N; j++)
				v[j] = a.logsm ? (T)((double)v[j] - c) : mul_rn(v[j], inv);
			if (live)
				st_row<T, G, N>(yr + base, v, rem, t, a.vo);
		}
	}
}

struct sbw_args {
	void *dx; // may be g
	const void *y, *g;
	int64_t rows, n;
	int vec;
};

// dx = y (g - s), s = sum(g y): the products rounded in T, summed in double,
// s rounded to T (as the CPU).
template <typename T, int G, int N, bool CACHED>
__global__ void __launch_bounds__(ROW_BLOCK(G)) softmax_bw_kernel(sbw_args a)
{
	__shared__ double sh[32];
	const int64_t n = a.n;
	FOR_ROWS(row, live, a.rows)
	{
		const T *yr = (const T *)a.y + row * n, *gr = (const T *)a.g + row * n;
		T *dr = (T *)a.dx + row * n;
		T vy[N], vg[N];
		auto load = [&](int64_t base, int rem) {
			ld_row<T, G, N>(vy, yr + base, 1, rem, t, a.vec, (T)0);
			ld_row<T, G, N>(vg, gr + base, 1, rem, t, a.vec, (T)0);
		};
		double s = 0;
		FOR_CHUNKS(base, rem, n)
		{
			load(base, rem);
#pragma unroll
			for (int j = 0; j < N; j++) // pads are 0
				s += (double)mul_rn(vg[j], vy[j]);
		}
		const T sf = (T)group_red<G, false>(s, sh);
		FOR_CHUNKS(base, rem, n)
		{
			if (!CACHED)
				load(base, rem);
#pragma unroll
			for (int j = 0; j < N; j++)
				vg[j] = mul_rn(vy[j], sub_rn(vg[j], sf));
			if (live)
				st_row<T, G, N>(dr + base, vg, rem, t, a.vec);
		}
	}
}

// ---- layer norm and RMS norm ------------------------------------------------------------

struct norm_args {
	void *y, *mean, *rstd; // mean, rstd [rows] or NULL
	int64_t ms, rs;	       // their strides
	rowgeom x;
	const void *w, *b; // [C] or NULL
	int64_t ws, bs;
	int64_t rows, n;
	double eps;
	int rms, fast, vx, vo, vw, vb;
};

// One output element. fast (f32 with unit strides, the CPU's float path):
// ((x - mf) - ml) * rf * w + b in float with mf + ml = mean, the last
// multiply-add fused as the CPU's FMA clones do; else in double, each
// operation rounded apart, then rounded to T.
template <typename T>
__device__ static inline T norm_out(T x, T w, T b, bool hw, bool hb, bool fast, double m, double r,
				    float mf, float ml, float rf)
{
	if constexpr (sizeof(T) == 4) {
		if (fast) {
			float u = __fsub_rn(__fsub_rn(x, mf), ml);
			if (hw && hb)
				return __fmaf_rn(__fmul_rn(u, rf), w, b);
			if (hw)
				return __fmul_rn(__fmul_rn(u, rf), w);
			if (hb)
				return __fmaf_rn(u, rf, b);
			return __fmul_rn(u, rf);
		}
	}
	double v = __dmul_rn(__dsub_rn((double)x, m), r);
	if (hw)
		v = __dmul_rn(v, (double)w);
	if (hb)
		v = __dadd_rn(v, (double)b);
	return (T)v;
}

// mean = sum x / n (0 for RMS), rstd = 1 / sqrt(sum (x - mean)^2 / n + eps),
// both in double; y by norm_out.
template <typename T, int G, int N, bool CACHED>
__global__ void __launch_bounds__(ROW_BLOCK(G)) norm_kernel(norm_args a)
{
	__shared__ double sh[32];
	constexpr int CH = chunk<T, N>();
	const int64_t n = a.n, sc = a.x.sc;
	const T *w = (const T *)a.w, *b = (const T *)a.b;
	FOR_ROWS(row, live, a.rows)
	{
		const T *xr = (const T *)a.x.p + row_off(a.x, row);
		T *yr = (T *)a.y + row * n;
		T v[N];
		double m = 0, q = 0;
		if (!a.rms) {
			double s = 0;
			FOR_CHUNKS(base, rem, n)
			{
				ld_row<T, G, N>(v, xr + base * sc, sc, rem, t, a.vx, (T)0);
#pragma unroll
				for (int j = 0; j < N; j++) // pads are 0
					s += (double)v[j];
			}
			m = group_red<G, false>(s, sh) / (double)n;
		}
		FOR_CHUNKS(base, rem, n)
		{
			if (!CACHED || a.rms)
				ld_row<T, G, N>(v, xr + base * sc, sc, rem, t, a.vx, (T)0);
#pragma unroll
			for (int j = 0; j < N; j++) {
				double d = (double)v[j] - m;
				if (VALID(j))
					q += d * d;
			}
		}
		const double r = 1.0 / sqrt(group_red<G, false>(q, sh) / (double)n + a.eps);
		const float mf = (float)m, ml = (float)(m - (double)mf), rf = (float)r;
		FOR_CHUNKS(base, rem, n)
		{
			if (!CACHED)
				ld_row<T, G, N>(v, xr + base * sc, sc, rem, t, a.vx, (T)0);
#pragma unroll
			for (int k = 0; k < N / CH; k++) {
				const int o = off_of<T, G, N>(k, t);
				T wv[CH], bv[CH];
				if (w)
					ld_run<T, CH>(wv, w + base * a.ws, a.ws, rem, o, a.vw,
						      (T)1);
				if (b)
					ld_run<T, CH>(bv, b + base * a.bs, a.bs, rem, o, a.vb,
						      (T)0);
#pragma unroll
				for (int e = 0; e < CH; e++)
					v[k * CH + e] = norm_out<T>(
					    v[k * CH + e], w ? wv[e] : (T)1, b ? bv[e] : (T)0,
					    w != NULL, b != NULL, a.fast, m, r, mf, ml, rf);
			}
			if (live)
				st_row<T, G, N>(yr + base, v, rem, t, a.vo);
		}
		if (live && t == 0 && a.mean)
			((T *)a.mean)[row * a.ms] = (T)m;
		if (live && t == 0 && a.rstd)
			((T *)a.rstd)[row * a.rs] = (T)r;
	}
}

// ---- norm backward -----------------------------------------------------------------------

struct nbw_args {
	void *dx;		  // contiguous, or NULL
	rowgeom g, x, mean, rstd; // mean.p NULL for RMS norm; stats [..., 1]
	const void *w;		  // [C] or NULL
	int64_t ws, rows, n;
	int vx, vg, vw, vo;
};

// dx = (d - xh a - b) rs: f32 as the CPU's FMA clone (d - xh a fused), f64
// each operation rounded apart.
__device__ static inline float nbw_dx(float xh, float d, double a, double b, float rs)
{
	return __fmul_rn(__fsub_rn(__fmaf_rn(-xh, (float)a, d), (float)b), rs);
}
__device__ static inline double nbw_dx(double xh, double d, double a, double b, double rs)
{
	return __dmul_rn(__dsub_rn(__dsub_rn(d, __dmul_rn(xh, a)), b), rs);
}

// Turns the registers of a chunk of x and g into xh = (x - mu) rs and
// d = g w, rounded in T as the CPU.
template <typename T, int G, int N>
__device__ static inline void nbw_terms(T *vx, T *vg, const T *w, int64_t ws, int rem, int t,
					bool vw, T mu, T rs)
{
	constexpr int CH = chunk<T, N>();
#pragma unroll
	for (int k = 0; k < N / CH; k++) {
		T wv[CH];
		if (w)
			ld_run<T, CH>(wv, w, ws, rem, off_of<T, G, N>(k, t), vw, (T)1);
#pragma unroll
		for (int e = 0; e < CH; e++) {
			vx[k * CH + e] = mul_rn(sub_rn(vx[k * CH + e], mu), rs);
			if (w)
				vg[k * CH + e] = mul_rn(vg[k * CH + e], wv[e]);
		}
	}
}

// dx of a row: a = mean(d xh), b = mean(d) (0 for RMS norm), the products
// rounded in T and the sums in double.
template <typename T, int G, int N, bool CACHED>
__global__ void __launch_bounds__(ROW_BLOCK(G)) norm_bw_kernel(nbw_args a)
{
	__shared__ double sh[32];
	constexpr int CH = chunk<T, N>();
	const int64_t n = a.n, sx = a.x.sc, sg = a.g.sc;
	const T *w = (const T *)a.w;
	FOR_ROWS(row, live, a.rows)
	{
		const T *xr = (const T *)a.x.p + row_off(a.x, row);
		const T *gr = (const T *)a.g.p + row_off(a.g, row);
		const T mu = a.mean.p ? ((const T *)a.mean.p)[row_off(a.mean, row)] : (T)0;
		const T rs = ((const T *)a.rstd.p)[row_off(a.rstd, row)];
		T *dr = (T *)a.dx + row * n;
		T vx[N], vg[N];
		auto load = [&](int64_t base, int rem) {
			ld_row<T, G, N>(vx, xr + base * sx, sx, rem, t, a.vx, (T)0);
			ld_row<T, G, N>(vg, gr + base * sg, sg, rem, t, a.vg, (T)0);
			nbw_terms<T, G, N>(vx, vg, w ? w + base * a.ws : w, a.ws, rem, t, a.vw, mu,
					   rs);
		};
		double sa = 0, sb = 0;
		FOR_CHUNKS(base, rem, n)
		{
			load(base, rem);
#pragma unroll
			for (int j = 0; j < N; j++) {
				if (VALID(j)) {
					sa += (double)mul_rn(vg[j], vx[j]);
					sb += (double)vg[j];
				}
			}
		}
		const double ma = group_red<G, false>(sa, sh) / (double)n;
		const double mb = a.mean.p ? group_red<G, false>(sb, sh) / (double)n : 0.0;
		FOR_CHUNKS(base, rem, n)
		{
			if (!CACHED)
				load(base, rem);
#pragma unroll
			for (int j = 0; j < N; j++)
				vx[j] = nbw_dx(vx[j], vg[j], ma, mb, rs);
			if (live)
				st_row<T, G, N>(dr + base, vx, rem, t, a.vo);
		}
	}
}

// dw = sum g xh and db = sum g over rows: block (32, 8) sums the columns of
// its 32 runs of CH (16 bytes) over rows [blockIdx.y * rps, + rps) in
// double, the 8 row lanes added in order; one slice writes dw, db directly,
// several write partial rows (part[s], dw's then db's) for nbw_param_final,
// whose blocks are (32, 32).
enum { PX = 32, PY = 8, FY = 32 };

// Adds the LANES row lanes' sums of each column, in lane order, into lane
// 0's aw and ab; true for lane 0.
template <int CH, int LANES> __device__ static inline bool lanes_sum(double *aw, double *ab)
{
	__shared__ double sw[LANES][PX * CH], sb[LANES][PX * CH];
	const int tx = threadIdx.x * CH, ty = threadIdx.y;
#pragma unroll
	for (int e = 0; e < CH; e++)
		sw[ty][tx + e] = aw[e], sb[ty][tx + e] = ab[e];
	__syncthreads();
	if (ty != 0)
		return false;
	for (int k = 1; k < LANES; k++)
#pragma unroll
		for (int e = 0; e < CH; e++)
			aw[e] += sw[k][tx + e], ab[e] += sb[k][tx + e];
	return true;
}

template <typename T>
__global__ void __launch_bounds__(PX *PY)
    nbw_param_kernel(nbw_args a, T *dw, T *db, double *part, int64_t rps)
{
	constexpr int CH = 16 / sizeof(T);
	const int64_t c = (blockIdx.x * (int64_t)PX + threadIdx.x) * CH, n = a.n;
	const int64_t r0 = blockIdx.y * rps, r1 = r0 + rps < a.rows ? r0 + rps : a.rows;
	const int rem = n - c < CH ? (int)(n - c) : CH; // <= 0 past the end
	const bool vec = a.vx && a.vg;
	double aw[CH] = {}, ab[CH] = {};
#pragma unroll 4
	for (int64_t r = r0 + threadIdx.y; rem > 0 && r < r1; r += PY) {
		T x[CH], g[CH];
		ld_run<T, CH>(x, (const T *)a.x.p + row_off(a.x, r) + c * a.x.sc, a.x.sc, rem, 0,
			      vec, (T)0);
		ld_run<T, CH>(g, (const T *)a.g.p + row_off(a.g, r) + c * a.g.sc, a.g.sc, rem, 0,
			      vec, (T)0);
		T mu = a.mean.p ? ((const T *)a.mean.p)[row_off(a.mean, r)] : (T)0;
		T rs = ((const T *)a.rstd.p)[row_off(a.rstd, r)];
#pragma unroll
		for (int e = 0; e < CH; e++) {
			aw[e] += (double)mul_rn(g[e], mul_rn(sub_rn(x[e], mu), rs));
			ab[e] += (double)g[e];
		}
	}
	if (!lanes_sum<CH, PY>(aw, ab))
		return;
#pragma unroll
	for (int e = 0; e < CH; e++) {
		if (e >= rem)
			break;
		if (part) {
			part[blockIdx.y * n + c + e] = aw[e];
			part[(gridDim.y + blockIdx.y) * (int64_t)n + c + e] = ab[e];
		} else {
			if (dw)
				dw[c + e] = (T)aw[e];
			if (db)
				db[c + e] = (T)ab[e];
		}
	}
}

// Adds the slices' partial rows: lane y sums slices y, y + 32, ... of its
// column, then the lanes are added in order.
template <typename T>
__global__ void __launch_bounds__(PX *FY)
    nbw_param_final(const double *part, int64_t slices, int64_t n, T *dw, T *db)
{
	const int64_t c = blockIdx.x * (int64_t)PX + threadIdx.x;
	double aw = 0, ab = 0;
#pragma unroll 4
	for (int64_t s = threadIdx.y; c < n && s < slices; s += FY) {
		aw += part[s * n + c];
		ab += part[(slices + s) * n + c];
	}
	if (!lanes_sum<1, FY>(&aw, &ab) || c >= n)
		return;
	if (dw)
		dw[c] = (T)aw;
	if (db)
		db[c] = (T)ab;
}


// ---- host: launching the row kernels ----------------------------------------------------------

// A kernel family's configurations (G, N, CACHED) by row length: 8 or 16
// lanes per row up to 128 elements, a warp up to 1024, a block of 128 to
// 1024 threads up to 16384 (16 elements a thread), chunks of 1024 x 8 beyond.
#define ROW_CONFIGS(K, T)                                                                 \
	{                                                                                 \
		K<T, 8, 4, true>, K<T, 8, 8, true>, K<T, 16, 8, true>, K<T, 32, 8, true>, \
		    K<T, 32, 16, true>, K<T, 32, 32, true>, K<T, 128, 16, true>,          \
		    K<T, 256, 16, true>, K<T, 512, 16, true>, K<T, 1024, 16, true>,       \
		    K<T, 1024, 8, false>                                                  \
	}
static const int64_t row_max[] = { 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384 };
static const int row_group[] = { 8, 8, 16, 32, 32, 32, 128, 256, 512, 1024, 1024 };

template <typename A>
static int launch_rows(void (*const *k)(A), int64_t rows, int64_t n, const A &a, const char *op)
{
	int i = 0;
	while (i < 10 && n > row_max[i])
		i++;
	int g = row_group[i], block = ROW_BLOCK(g);
	k[i]<<<cuda_blocks(rows * g, block), block, 0, cuda_stream()>>>(a);
	return cuda_launched(op);
}

// Rows and their length over the last dim (a 0-d tensor is one row of one).
static void rows_of(const struct tensor *t, int64_t *rows, int64_t *n)
{
	*n = t->ndim ? t->shape[t->ndim - 1] : 1;
	*rows = *n ? tensor_numel(t) / *n : 0;
}

// ---- the slots ---------------------------------------------------------------------------------

extern "C" int cuda_softmax(struct tensor *out, const struct tensor *x, bool log)
{
	const char *op = log ? "log_softmax" : "softmax";
	int64_t rows, n;
	rows_of(x, &rows, &n);
	if (rows == 0 || n == 0)
		return TENSOR_OK;
	size_t es = tensor_dtype_size(x->dtype);
	softmax_args a;
	memset(&a, 0, sizeof a);
	a.out = cuda_ptr(out);
	a.x = rowgeom_of(x);
	a.rows = rows, a.n = n;
	a.vx = vec_rows(a.x, n, es);
	a.vo = vec_contig(a.out, n, es);
	a.logsm = log;
	static void (*const kf[])(softmax_args) = ROW_CONFIGS(softmax_kernel, float);
	static void (*const kd[])(softmax_args) = ROW_CONFIGS(softmax_kernel, double);
	return launch_rows(x->dtype == TENSOR_F32 ? kf : kd, rows, n, a, op);
}

extern "C" int cuda_softmax_backward(struct tensor *dx, const struct tensor *y,
				     const struct tensor *g)
{
	int64_t rows, n;
	rows_of(y, &rows, &n);
	if (rows == 0 || n == 0)
		return TENSOR_OK;
	size_t es = tensor_dtype_size(y->dtype);
	sbw_args a;
	memset(&a, 0, sizeof a);
	a.dx = cuda_ptr(dx), a.y = cuda_ptr(y), a.g = cuda_ptr(g);
	a.rows = rows, a.n = n;
	a.vec = vec_contig(a.dx, n, es) && vec_contig(a.y, n, es) && vec_contig(a.g, n, es);
	static void (*const kf[])(sbw_args) = ROW_CONFIGS(softmax_bw_kernel, float);
	static void (*const kd[])(sbw_args) = ROW_CONFIGS(softmax_bw_kernel, double);
	return launch_rows(y->dtype == TENSOR_F32 ? kf : kd, rows, n, a, "softmax_backward");
}

// Both norms (RMS: mean and b NULL).
static int norm_launch(const char *op, bool rms, struct tensor *y, struct tensor *mean,
		       struct tensor *rstd, const struct tensor *x, const struct tensor *w,
		       const struct tensor *b, double eps)
{
	int64_t rows, n;
	rows_of(x, &rows, &n);
	if (rows == 0 || n == 0)
		return TENSOR_OK;
	size_t es = tensor_dtype_size(x->dtype);
	norm_args a;
	memset(&a, 0, sizeof a);
	a.y = cuda_ptr(y);
	a.mean = mean ? cuda_ptr(mean) : NULL;
	a.rstd = rstd ? cuda_ptr(rstd) : NULL;
	a.ms = mean ? mean->strides[0] : 0;
	a.rs = rstd ? rstd->strides[0] : 0;
	a.x = rowgeom_of(x);
	a.w = w ? cuda_ptr(w) : NULL;
	a.b = b ? cuda_ptr(b) : NULL;
	a.ws = w ? w->strides[0] : 0;
	a.bs = b ? b->strides[0] : 0;
	a.rows = rows, a.n = n, a.eps = eps, a.rms = rms;
	// the CPU's float path: f32 with unit-stride x, w and b
	a.fast = x->dtype == TENSOR_F32 && (a.x.sc == 1 || n <= 1) && (!w || a.ws == 1 || n <= 1) &&
		 (!b || a.bs == 1 || n <= 1);
	a.vx = vec_rows(a.x, n, es);
	a.vo = vec_contig(a.y, n, es);
	a.vw = w && a.ws == 1 && vec_contig(a.w, n, es);
	a.vb = b && a.bs == 1 && vec_contig(a.b, n, es);
	static void (*const kf[])(norm_args) = ROW_CONFIGS(norm_kernel, float);
	static void (*const kd[])(norm_args) = ROW_CONFIGS(norm_kernel, double);
	return launch_rows(x->dtype == TENSOR_F32 ? kf : kd, rows, n, a, op);
}

extern "C" int cuda_layer_norm(struct tensor *y, struct tensor *mean, struct tensor *rstd,
			       const struct tensor *x, const struct tensor *w,
			       const struct tensor *b, double eps)
{
	return norm_launch("layer_norm", false, y, mean, rstd, x, w, b, eps);
}

extern "C" int cuda_rms_norm(struct tensor *y, struct tensor *rstd, const struct tensor *x,
			     const struct tensor *w, double eps)
{
	return norm_launch("rms_norm", true, y, NULL, rstd, x, w, NULL, eps);
}

// dw, db: blocks of 32 column runs by slices of at least 256 rows (about a wave of
// the device in all), partial sums in the scratch buffer when there are
// several slices.
template <typename T>
static int norm_params(const nbw_args &a, struct tensor *dw, struct tensor *db)
{
	static const char op[] = "norm_backward";
	int64_t tiles = (a.n + PX * (16 / sizeof(T)) - 1) / (PX * (16 / sizeof(T)));
	int64_t want = cuda_blocks(INT64_MAX / 2, PX * PY) / 4 / tiles; // about a wave
	int64_t most = (a.rows + 255) / 256, slices;
	want = want < most ? want : most;
	want = want < 1 ? 1 : want > 65535 ? 65535 : want;
	int64_t rps = (a.rows + want - 1) / want;
	slices = (a.rows + rps - 1) / rps;
	T *pw = dw ? (T *)cuda_ptr(dw) : NULL, *pb = db ? (T *)cuda_ptr(db) : NULL;
	double *part = NULL;
	if (slices > 1) {
		part = (double *)cuda_scratch(sizeof(double) * 2 * (size_t)(slices * a.n), op);
		if (!part)
			return TENSOR_ERR_NOMEM;
	}
	dim3 block(PX, PY), grid((unsigned)tiles, (unsigned)slices);
	nbw_param_kernel<T><<<grid, block, 0, cuda_stream()>>>(a, pw, pb, part, rps);
	int rc = cuda_launched(op);
	if (rc < 0 || !part)
		return rc;
	unsigned ftiles = (unsigned)((a.n + PX - 1) / PX);
	nbw_param_final<T><<<ftiles, dim3(PX, FY), 0, cuda_stream()>>>(part, slices, a.n, pw, pb);
	return cuda_launched(op);
}

extern "C" int cuda_norm_backward(struct tensor *dx, struct tensor *dw, struct tensor *db,
				  const struct tensor *g, const struct tensor *x,
				  const struct tensor *mean, const struct tensor *rstd,
				  const struct tensor *w)
{
	static const char op[] = "norm_backward";
	int64_t rows, n;
	rows_of(x, &rows, &n);
	size_t es = tensor_dtype_size(x->dtype);
	if (n == 0)
		return TENSOR_OK;
	if (rows == 0) { // sums over no rows: zeros, as the CPU
		int rc = TENSOR_OK;
		if (dw)
			rc = cuda_status(
			    cudaMemsetAsync(cuda_ptr(dw), 0, (size_t)n * es, cuda_stream()), op);
		if (db && rc == TENSOR_OK)
			rc = cuda_status(
			    cudaMemsetAsync(cuda_ptr(db), 0, (size_t)n * es, cuda_stream()), op);
		return rc;
	}
	nbw_args a;
	memset(&a, 0, sizeof a);
	a.dx = dx ? cuda_ptr(dx) : NULL;
	a.g = rowgeom_of(g);
	a.x = rowgeom_of(x);
	if (mean)
		a.mean = rowgeom_of(mean);
	a.rstd = rowgeom_of(rstd);
	a.w = w ? cuda_ptr(w) : NULL;
	a.ws = w ? w->strides[0] : 0;
	a.rows = rows, a.n = n;
	a.vx = vec_rows(a.x, n, es);
	a.vg = vec_rows(a.g, n, es);
	a.vw = w && a.ws == 1 && vec_contig(a.w, n, es);
	a.vo = dx && vec_contig(a.dx, n, es);
	bool f32 = x->dtype == TENSOR_F32;
	static void (*const kf[])(nbw_args) = ROW_CONFIGS(norm_bw_kernel, float);
	static void (*const kd[])(nbw_args) = ROW_CONFIGS(norm_bw_kernel, double);
	int rc = TENSOR_OK;
	if (dx)
		rc = launch_rows(f32 ? kf : kd, rows, n, a, op);
	if (rc == TENSOR_OK && (dw || db))
		rc = f32 ? norm_params<float>(a, dw, db) : norm_params<double>(a, dw, db);
	return rc;
}
