// CUDA elementwise kernels: the unary, binary and where slots. The same
// functions as the CPU's (cpu_elementwise.c), from the same scalar math
// (../scalar_math.h): f32 in float, f64 in double, integers wrapping through unsigned
// arithmetic, where moving elements bitwise (out may be b, or a for binary).
//
// The host merges dims as cpu_loop_init does (size-1 dims dropped, dims that
// step as one for every operand merged), then picks one of two kernels:
// - vec: the last merged dim is contiguous in out and contiguous or
//   broadcast (stride 0) in every input, rows of it start 4-aligned: four
//   elements a thread with 16-byte (32 for 8-byte types) loads and stores;
//   f32 gets one instance per op.
// - rows: otherwise, rows of 64 elements or more: a warp per row;
// - gen: any strides; each operand's offset from the row-major index.
#include <cuda_runtime.h>
#include <math.h>

#include "../scalar_math.h"
#include "cuda_internal.h"

#define EW_THREADS 256
#define EW_MAX_OPS 4 /* out and up to three inputs */

/* ---- geometry -------------------------------------------------------------- */

/* Merged shape shared by every operand; st[k] are operand k's strides
 * (k = 0 is out). */
struct ew_geo {
	int ndim; /* >= 1 */
	int64_t shape[CUDA_MAX_DIMS];
	int64_t st[EW_MAX_OPS][CUDA_MAX_DIMS];
};

/* The vec kernel's view of it: rows (all dims but the last) of n4 groups of
 * four, plus a tail of n % 4 elements when there is one row. */
struct ew_vinfo {
	int64_t rows, n4, tail;
	int bc[EW_MAX_OPS]; /* operand constant along a row (stride 0) */
	int small;	    /* every index fits 32 bits */
};

struct ew_ptrs {
	void *p[EW_MAX_OPS];
};

/* q = i / d, r = i % d, in 32-bit arithmetic when the caller knows that it
 * fits (a 64-bit division costs several times more). */
__device__ static __forceinline__ void ew_split(int64_t i, int64_t d, int small, int64_t &q,
						int64_t &r)
{
	if (small) {
		uint32_t a = (uint32_t)i, b = (uint32_t)d, c = a / b;
		q = c;
		r = a - c * b;
	} else {
		q = i / d;
		r = i - q * d;
	}
}

/* Offsets of row-major index i over dims 0..nd-1 of g for operands 0..K-1. */
template <int K>
__device__ static __forceinline__ void ew_offsets(const ew_geo &g, int nd, int64_t i, int small,
						  int64_t *off)
{
#pragma unroll
	for (int k = 0; k < K; k++)
		off[k] = 0;
	for (int d = nd - 1; d > 0; d--) {
		int64_t q, r;
		ew_split(i, g.shape[d], small, q, r);
#pragma unroll
		for (int k = 0; k < K; k++)
			off[k] += r * g.st[k][d];
		i = q;
	}
	if (nd > 0) {
#pragma unroll
		for (int k = 0; k < K; k++)
			off[k] += i * g.st[k][0];
	}
}

/* ---- scalar math: ../scalar_math.h, the CPU's own ------------------------- */

__device__ static __forceinline__ float unary_fl(int op, float x, float al)
{
	switch (op) {
	case TENSOR_NEG: return -x;
	case TENSOR_EXP: return exp_f32(x);
	case TENSOR_LOG: return logf(x);
	case TENSOR_SQRT: return sqrtf(x);
	case TENSOR_RSQRT: return 1.0f / sqrtf(x);
	case TENSOR_TANH: return tanhf(x);
	case TENSOR_ERF: return erff(x);
	case TENSOR_ABS: return fabsf(x);
	case TENSOR_RELU: return x < 0 ? 0.0f : x;
	case TENSOR_GELU: return gelu_f(x);
	case TENSOR_GELU_TANH: return gelu_tanh_f(x);
	case TENSOR_SILU: return x * sigmoid_f(x);
	case TENSOR_SIGMOID: return sigmoid_f(x);
	case TENSOR_SQUARE: return x * x;
	case TENSOR_RECIPROCAL: return 1.0f / x;
	case TENSOR_ADD_SCALAR: return x + al;
	case TENSOR_MUL_SCALAR: return x * al;
	case TENSOR_POW_SCALAR: return al == 2.0f ? x * x : powf(x, al);
	case TENSOR_GELU_GRAD: return gelu_grad_f(x);
	case TENSOR_GELU_TANH_GRAD: return gelu_tanh_grad_f(x);
	case TENSOR_SILU_GRAD: return silu_grad_f(x);
	default: return 0.0f;
	}
}

__device__ static __forceinline__ double unary_fl(int op, double x, double al)
{
	switch (op) {
	case TENSOR_NEG: return -x;
	case TENSOR_EXP: return exp(x);
	case TENSOR_LOG: return log(x);
	case TENSOR_SQRT: return sqrt(x);
	case TENSOR_RSQRT: return 1.0 / sqrt(x);
	case TENSOR_TANH: return tanh(x);
	case TENSOR_ERF: return erf(x);
	case TENSOR_ABS: return fabs(x);
	case TENSOR_RELU: return x < 0 ? 0.0 : x;
	case TENSOR_GELU: return gelu_d(x);
	case TENSOR_GELU_TANH: return gelu_tanh_d(x);
	case TENSOR_SILU: return x * sigmoid_d(x);
	case TENSOR_SIGMOID: return sigmoid_d(x);
	case TENSOR_SQUARE: return x * x;
	case TENSOR_RECIPROCAL: return 1.0 / x;
	case TENSOR_ADD_SCALAR: return x + al;
	case TENSOR_MUL_SCALAR: return x * al;
	case TENSOR_POW_SCALAR: return al == 2.0 ? x * x : pow(x, al);
	case TENSOR_GELU_GRAD: return gelu_grad_d(x);
	case TENSOR_GELU_TANH_GRAD: return gelu_tanh_grad_d(x);
	case TENSOR_SILU_GRAD: return silu_grad_d(x);
	default: return 0.0;
	}
}

/* Unsigned twin of an integer dtype, for wrap-around arithmetic (a float
 * type is its own). */
template <typename T> struct ew_uns {
	typedef T type;
	enum { is_int = 0 };
};
template <> struct ew_uns<int32_t> {
	typedef uint32_t type;
	enum { is_int = 1 };
};
template <> struct ew_uns<int64_t> {
	typedef uint64_t type;
	enum { is_int = 1 };
};

/* The CPU's unary_i: the low bits of its int64 result are these. */
template <typename T> __device__ static __forceinline__ T unary_i(int op, T x, T s)
{
	typedef typename ew_uns<T>::type U;
	U u = (U)x;
	switch (op) {
	case TENSOR_NEG: return (T)(U)(0 - u);
	case TENSOR_ABS: return x < 0 ? (T)(U)(0 - u) : x;
	case TENSOR_RELU: return x < 0 ? 0 : x;
	case TENSOR_SQUARE: return (T)(U)(u * u);
	case TENSOR_ADD_SCALAR: return (T)(U)(u + (U)s);
	case TENSOR_MUL_SCALAR: return (T)(U)(u * (U)s);
	default: return 0; /* float-only ops never reach here */
	}
}

template <typename T> __device__ static __forceinline__ T unary_op(int op, T x, T al)
{
	if constexpr (ew_uns<T>::is_int)
		return unary_i(op, x, al);
	else
		return unary_fl(op, x, al);
}

__device__ static __forceinline__ float ew_pow(float a, float b)
{
	return powf(a, b);
}

__device__ static __forceinline__ double ew_pow(double a, double b)
{
	return pow(a, b);
}

/* a times the derivative grad_op at b (floats only) */
template <typename T> __device__ static __forceinline__ T ew_mul_grad(int grad_op, T a, T b)
{
	if constexpr (ew_uns<T>::is_int)
		return 0;
	else
		return a * unary_fl(grad_op, b, (T)0);
}

/* binary_f32 / binary_d / binary_i of the CPU: integers wrap, maximum and
 * minimum propagate NaN, comparisons give 1 or 0; integer div, pow and the
 * derivatives never come (the front-end refuses them). */
template <typename T> __device__ static __forceinline__ T binary_op(int op, T a, T b)
{
	typedef typename ew_uns<T>::type U;
	switch (op) {
	case TENSOR_ADD: return (T)((U)a + (U)b);
	case TENSOR_SUB: return (T)((U)a - (U)b);
	case TENSOR_MUL: return (T)((U)a * (U)b);
	case TENSOR_DIV:
		if constexpr (ew_uns<T>::is_int)
			return 0;
		else
			return a / b;
	case TENSOR_POW:
		if constexpr (ew_uns<T>::is_int)
			return 0;
		else
			return ew_pow(a, b);
	case TENSOR_MAXIMUM: return a > b || a != a ? a : b;
	case TENSOR_MINIMUM: return a < b || a != a ? a : b;
	case TENSOR_MUL_GELU_GRAD: return ew_mul_grad(TENSOR_GELU_GRAD, a, b);
	case TENSOR_MUL_GELU_TANH_GRAD: return ew_mul_grad(TENSOR_GELU_TANH_GRAD, a, b);
	case TENSOR_MUL_SILU_GRAD: return ew_mul_grad(TENSOR_SILU_GRAD, a, b);
	case TENSOR_EQ: return a == b ? (T)1 : (T)0;
	case TENSOR_NE: return a != b ? (T)1 : (T)0;
	case TENSOR_LT: return a < b ? (T)1 : (T)0;
	case TENSOR_LE: return a <= b ? (T)1 : (T)0;
	case TENSOR_GT: return a > b ? (T)1 : (T)0;
	case TENSOR_GE: return a >= b ? (T)1 : (T)0;
	default: return (T)0;
	}
}

/* ---- the element functions -------------------------------------------------- */

/* Each has the operand types O (out), A, B, C (inputs), NIN inputs and
 * apply<OP>(a, b, c): OP >= 0 is the op fixed at compile time, -1 reads it
 * from the functor. al: the scalar of the *_SCALAR ops. */
template <typename T> struct ew_unary {
	typedef T O, A, B, C;
	enum { NIN = 1 };
	int op;
	T al;
	template <int OP> __device__ __forceinline__ T apply(T x, T, T) const
	{
		return unary_op(OP >= 0 ? OP : op, x, al);
	}
};

template <typename T> struct ew_binary {
	typedef T O, A, B, C;
	enum { NIN = 2 };
	int op;
	template <int OP> __device__ __forceinline__ T apply(T a, T b, T) const
	{
		return binary_op(OP >= 0 ? OP : op, a, b);
	}
};

/* out = cond != 0 ? a : b; E is an unsigned type of the element's size, so
 * elements move as bits. */
template <typename CT, typename E> struct ew_where {
	typedef E O, B, C;
	typedef CT A;
	enum { NIN = 3 };
	int op; /* unused */
	template <int OP> __device__ __forceinline__ E apply(CT c, E a, E b) const
	{
		return c != (CT)0 ? a : b;
	}
};

/* ---- kernels ---------------------------------------------------------------- */

/* The inputs of one element, at offsets o1..o3 of operands 1..3. */
template <class Fn> struct ew_in {
	typename Fn::A a;
	typename Fn::B b;
	typename Fn::C c;
};

template <class Fn>
__device__ static __forceinline__ ew_in<Fn> ew_load(const ew_ptrs &p, int64_t o1, int64_t o2,
						    int64_t o3)
{
	ew_in<Fn> r = {};
	r.a = ((const typename Fn::A *)p.p[1])[o1];
	if constexpr (Fn::NIN > 1)
		r.b = ((const typename Fn::B *)p.p[2])[o2];
	if constexpr (Fn::NIN > 2)
		r.c = ((const typename Fn::C *)p.p[3])[o3];
	return r;
}

template <class Fn, int OP>
__device__ static __forceinline__ void ew_store(const Fn &fn, const ew_ptrs &p, int64_t o0,
						const ew_in<Fn> &x)
{
	((typename Fn::O *)p.p[0])[o0] = fn.template apply<OP>(x.a, x.b, x.c);
}

template <typename T> struct alignas(4 * sizeof(T)) ew_vec4 {
	T v[4];
};

/* Four elements of a row at column c: one vector load, or one element
 * repeated for an operand constant along the row. */
template <typename T>
__device__ static __forceinline__ ew_vec4<T> ew_load4(const void *base, int64_t off, int bc)
{
	const T *p = (const T *)base + off;
	ew_vec4<T> r;
	if (bc) {
		T x = *p;
		r.v[0] = r.v[1] = r.v[2] = r.v[3] = x;
	} else {
		r = *(const ew_vec4<T> *)p;
	}
	return r;
}

/* Groups of four along the last dim. Row offsets come from dims
 * 0..ndim-2; a constant operand's column stride is 0, so its offset is the
 * row's. */
template <class Fn, int OP>
__global__ void __launch_bounds__(EW_THREADS) ew_vec_kernel(Fn fn, ew_ptrs p, ew_geo g, ew_vinfo v)
{
	typedef typename Fn::O O;
	typedef typename Fn::A A;
	typedef typename Fn::B B;
	typedef typename Fn::C C;
	const int K = Fn::NIN + 1;
	const int last = g.ndim - 1;
	int64_t groups = v.rows * v.n4;
	CUDA_GRID_LOOP(t, groups)
	{
		int64_t r = 0, c = t, off[K];
		if (v.rows > 1)
			ew_split(t, v.n4, v.small, r, c);
		ew_offsets<K>(g, last, r, v.small, off);
		c *= 4;
		ew_vec4<A> va = ew_load4<A>(p.p[1], off[1] + (v.bc[1] ? 0 : c), v.bc[1]);
		ew_vec4<B> vb = {};
		ew_vec4<C> vc = {};
		if constexpr (Fn::NIN > 1)
			vb = ew_load4<B>(p.p[2], off[2] + (v.bc[2] ? 0 : c), v.bc[2]);
		if constexpr (Fn::NIN > 2)
			vc = ew_load4<C>(p.p[3], off[3] + (v.bc[3] ? 0 : c), v.bc[3]);
		ew_vec4<O> vo;
#pragma unroll
		for (int e = 0; e < 4; e++)
			vo.v[e] = fn.template apply<OP>(va.v[e], vb.v[e], vc.v[e]);
		*(ew_vec4<O> *)((O *)p.p[0] + off[0] + c) = vo;
	}
	/* the tail of a single row (ndim 1, all strides 0 or 1) */
	int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	if (t < v.tail) {
		int64_t i = v.n4 * 4 + t;
		ew_store<Fn, OP>(fn, p, i,
				 ew_load<Fn>(p, v.bc[1] ? 0 : i, v.bc[2] ? 0 : i, v.bc[3] ? 0 : i));
	}
}

/* A warp per row of the last dim, for rows the vec kernel cannot take (odd
 * lengths, misaligned or strided operands) long enough to keep the lanes
 * busy: offsets without a division per element, four elements a lane in
 * flight. */
template <class Fn, int OP>
__global__ void __launch_bounds__(EW_THREADS)
    ew_rows_kernel(Fn fn, ew_ptrs p, ew_geo g, int64_t rows, int small)
{
	const int K = Fn::NIN + 1, last = g.ndim - 1, lane = threadIdx.x & 31;
	const int64_t cols = g.shape[last];
	int64_t cs[EW_MAX_OPS];
#pragma unroll
	for (int k = 0; k < EW_MAX_OPS; k++)
		cs[k] = g.st[k][last];
	const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
	for (int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; r < rows;
	     r += nwarps) {
		int64_t o[EW_MAX_OPS] = { 0, 0, 0, 0 };
		ew_offsets<K>(g, last, r, small, o);
		int64_t c = lane;
		for (; c + 96 < cols; c += 128) {
			ew_in<Fn> x[4];
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int64_t ce = c + 32 * e;
				x[e] = ew_load<Fn>(p, o[1] + ce * cs[1], o[2] + ce * cs[2],
						   o[3] + ce * cs[3]);
			}
#pragma unroll
			for (int e = 0; e < 4; e++)
				ew_store<Fn, OP>(fn, p, o[0] + (c + 32 * e) * cs[0], x[e]);
		}
		for (; c < cols; c += 32)
			ew_store<Fn, OP>(
			    fn, p, o[0] + c * cs[0],
			    ew_load<Fn>(p, o[1] + c * cs[1], o[2] + c * cs[2], o[3] + c * cs[3]));
	}
}

/* Any strides: each operand's offset from the row-major index (op read at
 * run time; this path is for the rare layouts). */
template <class Fn>
__global__ void __launch_bounds__(EW_THREADS)
    ew_gen_kernel(Fn fn, ew_ptrs p, ew_geo g, int64_t n, int small)
{
	CUDA_GRID_LOOP(i, n)
	{
		int64_t o[EW_MAX_OPS] = { 0, 0, 0, 0 };
		ew_offsets<Fn::NIN + 1>(g, g.ndim, i, small, o);
		ew_store<Fn, -1>(fn, p, o[0], ew_load<Fn>(p, o[1], o[2], o[3]));
	}
}

/* ---- host side -------------------------------------------------------------- */

/* cpu_loop_init's merge over ts[0]'s shape; returns the element count. */
static int64_t ew_merge(ew_geo *g, int nops, const struct tensor *const *ts)
{
	const struct tensor *t0 = ts[0];
	int nd = 0;
	for (int d = 0; d < t0->ndim; d++) {
		if (t0->shape[d] == 1)
			continue;
		if (nd > 0) {
			bool merge = true;
			for (int k = 0; k < nops; k++)
				merge =
				    merge && g->st[k][nd - 1] == ts[k]->strides[d] * t0->shape[d];
			if (merge) {
				g->shape[nd - 1] *= t0->shape[d];
				for (int k = 0; k < nops; k++)
					g->st[k][nd - 1] = ts[k]->strides[d];
				continue;
			}
		}
		g->shape[nd] = t0->shape[d];
		for (int k = 0; k < nops; k++)
			g->st[k][nd] = ts[k]->strides[d];
		nd++;
	}
	if (nd == 0) {
		g->shape[0] = tensor_numel(t0); /* 1, or 0 for an empty tensor */
		for (int k = 0; k < nops; k++)
			g->st[k][0] = 1;
		nd = 1;
	}
	for (int k = nops; k < EW_MAX_OPS; k++) /* unused operands: defined values */
		for (int d = 0; d < nd; d++)
			g->st[k][d] = 0;
	g->ndim = nd;
	int64_t n = 1;
	for (int d = 0; d < nd; d++)
		n *= g->shape[d];
	return n;
}

/* Whether the vec kernel can run g: the last dim contiguous in out and
 * contiguous or constant in every input; with several rows, rows of a
 * multiple of 4 elements whose starts keep 4-element alignment; every
 * non-constant operand aligned to 4 elements. */
static bool ew_vec_plan(const ew_geo *g, int nops, const struct tensor *const *ts, const ew_ptrs *p,
			int64_t n, ew_vinfo *v)
{
	int last = g->ndim - 1;
	int64_t cols = g->shape[last];
	v->rows = n / cols;
	if (v->rows > 1 && cols % 4)
		return false;
	for (int k = 0; k < EW_MAX_OPS; k++)
		v->bc[k] = 0;
	for (int k = 0; k < nops; k++) {
		int64_t cs = g->st[k][last];
		size_t es = tensor_dtype_size(ts[k]->dtype);
		if (cs != 1 && (cs != 0 || k == 0))
			return false;
		v->bc[k] = cs == 0;
		if (cs == 0)
			continue;
		if ((uintptr_t)p->p[k] % (4 * es))
			return false;
		for (int d = 0; d < last; d++)
			if (g->st[k][d] % 4)
				return false;
	}
	v->n4 = cols / 4;
	v->tail = v->rows == 1 ? cols % 4 : 0;
	v->small = n <= (int64_t)UINT32_MAX;
	return true;
}

enum { EW_VEC, EW_ROWS };

template <class Fn, int OP>
static void ew_launch(int mode, const Fn &fn, const ew_ptrs &p, const ew_geo &g, const ew_vinfo &v)
{
	cudaStream_t st = cuda_stream();
	if (mode == EW_VEC) {
		int64_t items = v.rows * v.n4 > v.tail ? v.rows * v.n4 : v.tail;
		ew_vec_kernel<Fn, OP>
		    <<<cuda_blocks(items, EW_THREADS), EW_THREADS, 0, st>>>(fn, p, g, v);
	} else {
		ew_rows_kernel<Fn, OP><<<cuda_blocks(v.rows * 32, EW_THREADS), EW_THREADS, 0, st>>>(
		    fn, p, g, v.rows, v.small);
	}
}

/* The kernel instance of op: ops below NOPS have their own, the others (and
 * every op when NOPS is 0) read it at run time. */
template <class Fn, int OP, int NOPS>
static void ew_launch_op(int op, int mode, const Fn &fn, const ew_ptrs &p, const ew_geo &g,
			 const ew_vinfo &v)
{
	if constexpr (OP < NOPS) {
		if (op == OP)
			ew_launch<Fn, OP>(mode, fn, p, g, v);
		else
			ew_launch_op<Fn, OP + 1, NOPS>(op, mode, fn, p, g, v);
	} else {
		ew_launch<Fn, -1>(mode, fn, p, g, v);
	}
}

/* Merge, pick the kernel, launch; ts[0] is out. */
template <class Fn, int NOPS>
static int ew_run(const char *name, const Fn &fn, const struct tensor *const *ts)
{
	const int nops = Fn::NIN + 1;
	ew_geo g = {};
	int64_t n = ew_merge(&g, nops, ts);
	if (n == 0)
		return TENSOR_OK;
	ew_ptrs p;
	for (int k = 0; k < EW_MAX_OPS; k++)
		p.p[k] = k < nops ? cuda_ptr(ts[k]) : NULL;
	ew_vinfo v = {};
	int64_t cols = g.shape[g.ndim - 1];
	if (ew_vec_plan(&g, nops, ts, &p, n, &v)) {
		ew_launch_op<Fn, 0, NOPS>(fn.op, EW_VEC, fn, p, g, v);
	} else if (g.ndim > 1 && cols >= 64) {
		v.rows = n / cols;
		v.small = n <= (int64_t)UINT32_MAX;
		ew_launch_op<Fn, 0, NOPS>(fn.op, EW_ROWS, fn, p, g, v);
	} else {
		ew_gen_kernel<Fn><<<cuda_blocks(n, EW_THREADS), EW_THREADS, 0, cuda_stream()>>>(
		    fn, p, g, n, n <= (int64_t)UINT32_MAX);
	}
	return cuda_launched(name);
}

/* The f32 ops get a kernel instance each, the others read the op at run
 * time (they are rare in a training step). */
template <typename T, int NOPS>
static int ew_unary_run(enum tensor_unary_op op, const struct tensor *const *ts, T al)
{
	ew_unary<T> fn = { (int)op, al };
	return ew_run<ew_unary<T>, NOPS>("unary", fn, ts);
}

extern "C" int cuda_unary(enum tensor_unary_op op, struct tensor *out, const struct tensor *x,
			  double alpha)
{
	const struct tensor *ts[2] = { out, x };
	/* the scalar of an integer op is an integer of the dtype (checked) */
	bool scalar = op == TENSOR_ADD_SCALAR || op == TENSOR_MUL_SCALAR;
	switch (x->dtype) {
	case TENSOR_F32: return ew_unary_run<float, TENSOR_NUNARY>(op, ts, (float)alpha);
	case TENSOR_F64: return ew_unary_run<double, 0>(op, ts, alpha);
	case TENSOR_I32: return ew_unary_run<int32_t, 0>(op, ts, scalar ? (int32_t)alpha : 0);
	default: return ew_unary_run<int64_t, 0>(op, ts, scalar ? (int64_t)alpha : 0);
	}
}

template <typename T, int NOPS>
static int ew_binary_run(enum tensor_binary_op op, const struct tensor *const *ts)
{
	ew_binary<T> fn = { (int)op };
	return ew_run<ew_binary<T>, NOPS>("binary", fn, ts);
}

extern "C" int cuda_binary(enum tensor_binary_op op, struct tensor *out, const struct tensor *a,
			   const struct tensor *b)
{
	const struct tensor *ts[3] = { out, a, b };
	switch (a->dtype) {
	case TENSOR_F32: return ew_binary_run<float, TENSOR_NBINARY>(op, ts);
	case TENSOR_F64: return ew_binary_run<double, 0>(op, ts);
	case TENSOR_I32: return ew_binary_run<int32_t, 0>(op, ts);
	default: return ew_binary_run<int64_t, 0>(op, ts);
	}
}

/* where with elements of E (4 or 8 bytes) for each cond dtype. */
template <typename E> static int ew_where_run(enum tensor_dtype cdt, const struct tensor *const *ts)
{
	switch (cdt) {
	case TENSOR_F32: return ew_run<ew_where<float, E>, 0>("where", ew_where<float, E>{ 0 }, ts);
	case TENSOR_F64:
		return ew_run<ew_where<double, E>, 0>("where", ew_where<double, E>{ 0 }, ts);
	case TENSOR_I32:
		return ew_run<ew_where<int32_t, E>, 0>("where", ew_where<int32_t, E>{ 0 }, ts);
	default: return ew_run<ew_where<int64_t, E>, 0>("where", ew_where<int64_t, E>{ 0 }, ts);
	}
}

extern "C" int cuda_where(struct tensor *out, const struct tensor *cond, const struct tensor *a,
			  const struct tensor *b)
{
	const struct tensor *ts[4] = { out, cond, a, b };
	if (tensor_dtype_size(out->dtype) == 4)
		return ew_where_run<uint32_t>(cond->dtype, ts);
	return ew_where_run<uint64_t>(cond->dtype, ts);
}
