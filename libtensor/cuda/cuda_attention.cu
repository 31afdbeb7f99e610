// CUDA fused attention, the slots of tensor_attention: softmax(scale q k^T, masked keys
// left out) v without the [T,S] scores in memory, f32 or f64, the function the CPU's kernel
// computes (cpu_attention.c). A thread owns a query row and walks the keys a tile at a
// time (shared memory) with an online softmax: a running maximum and sum, the output
// rescaled when the maximum grows. Keys hidden by the mask, or past a causal row's own,
// are left out; dropout multiplies each probability by the CPU's counter-based mask
// (element first + ((b H + h) T + t) S + s) after the row's sum is taken; a row with no
// visible key gives 0 and lse +inf. The backward recomputes the probabilities from lse in
// two kernels that add into no element twice: one a query row (first D_t = sum_s p m
// (dout_t . v_s), then dq_t), one a key row (dk_s and dv_s).
//
// One thread a row on the FMA units: the simple, correct version (no tensor cores yet).
// Head dims up to ATT_DMAX; the register arrays are sized by a template bound (64 or 128)
// and indexed by unrolled constants only.
#include <cuda_runtime.h>
#include <math.h>

#include "../random.h"
#include "cuda_internal.h"

enum { ROWS = 64, TILE = 32, ATT_DMAX = CUDA_ATTENTION_DMAX };

// One call's operands: element 0 of each, the strides of its (batch, head, row) dims (the
// last dim has a unit stride); scratch `dsum` [B,H,T] for the backward's D_t.
struct att_geo {
	const char *q, *k, *v, *hid, *lse_in, *dout;
	char *out, *lse, *gq, *gk, *gv, *dsum; /* gq, gk, gv: dq, dk, dv */
	int64_t B, H, T, S, d, dv;
	int64_t qs[3], ks[3], vs[3], os[3], gs[3], dqs[3], dks[3], dvs[3];
	int causal, drop;
	double scale, keep_scale;
	uint64_t thresh, seed, first;
};

__device__ static __forceinline__ float att_exp(float x)
{
	return expf(x);
}

__device__ static __forceinline__ double att_exp(double x)
{
	return exp(x);
}

__device__ static __forceinline__ float att_log(float x)
{
	return logf(x);
}

__device__ static __forceinline__ double att_log(double x)
{
	return log(x);
}

// Row r of (b, h) of an operand with strides st.
template <typename T>
__device__ static __forceinline__ T *att_row(const char *base, const int64_t *st, int64_t b,
					     int64_t h, int64_t r)
{
	return (T *)base + b * st[0] + h * st[1] + r * st[2];
}

// The dropout factor of probability (b, h, t, s): 0, or 1 / (1 - p) where kept.
__device__ static __forceinline__ double att_keep(const att_geo &g, int64_t b, int64_t h, int64_t t,
						  int64_t s)
{
	if (!g.drop)
		return 1.0;
	uint64_t i = g.first + (uint64_t)(((b * g.H + h) * g.T + t) * g.S + s);
	return random_word(g.seed, i) >= g.thresh ? g.keep_scale : 0.0;
}

// Rows [r0, r0 + n) (n <= TILE) of (b, h) of an operand, cols wide, into dst (row stride
// cols), by the whole block.
template <typename T>
__device__ static void att_load(T *dst, const char *base, const int64_t *st, int64_t b, int64_t h,
				int64_t r0, int64_t n, int64_t cols)
{
	for (int64_t e = threadIdx.x; e < n * cols; e += blockDim.x) {
		int64_t j = e / cols, i = e % cols;
		dst[j * cols + i] = att_row<T>(base, st, b, h, r0 + j)[i];
	}
}

// Keys and values [s0, s0 + n) of (b, h) into kt and vt, their hidden flags into ht (0 where
// the call has no mask), by the whole block, between two barriers.
template <typename T>
__device__ static void att_load_keys(T *kt, T *vt, T *ht, const att_geo &g, const T *hid, int64_t b,
				     int64_t h, int64_t s0, int64_t n)
{
	__syncthreads(); // the last tile is read
	att_load<T>(kt, g.k, g.ks, b, h, s0, n, g.d);
	att_load<T>(vt, g.v, g.vs, b, h, s0, n, g.dv);
	for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
		ht[j] = hid ? hid[s0 + j] : (T)0;
	__syncthreads();
}

// The block's (batch, head) and its first row, from the 1-d grid: blocks of ROWS rows,
// rows / ROWS of them a (batch, head).
__device__ static __forceinline__ void att_block(const att_geo &g, int64_t rows, int64_t *b,
						 int64_t *h, int64_t *r0)
{
	int64_t nblk = (rows + ROWS - 1) / ROWS, bh = blockIdx.x / nblk;
	*b = bh / g.H;
	*h = bh % g.H;
	*r0 = (blockIdx.x % nblk) * ROWS;
}

// ---- forward -------------------------------------------------------------------------

template <typename T, int DV> __global__ static void att_forward(att_geo g)
{
	extern __shared__ unsigned char att_smem[];
	T *qo = (T *)att_smem;	       // ROWS x (d + 1): the block's query rows
	T *kt = qo + ROWS * (g.d + 1); // TILE x d
	T *vt = kt + TILE * g.d;       // TILE x dv
	T *ht = vt + TILE * g.dv;      // TILE hidden flags
	int64_t b, h, t0;
	att_block(g, g.T, &b, &h, &t0);
	int64_t t = t0 + threadIdx.x, d = g.d;
	bool active = t < g.T;
	T *qr = qo + threadIdx.x * (d + 1);
	for (int64_t i = 0; i < d; i++)
		qr[i] = active ? att_row<T>(g.q, g.qs, b, h, t)[i] : (T)0;
	T o[DV];
#pragma unroll
	for (int i = 0; i < DV; i++)
		o[i] = 0;
	T m = -INFINITY, l = 0;
	const T *hid = g.hid ? (const T *)g.hid + b * g.S : NULL;
	int64_t s_end = g.causal ? min(g.S, t0 + (int64_t)ROWS) : g.S;
	for (int64_t s0 = 0; s0 < s_end; s0 += TILE) {
		int64_t n = min((int64_t)TILE, s_end - s0);
		att_load_keys<T>(kt, vt, ht, g, hid, b, h, s0, n);
		for (int64_t j = 0; active && j < n; j++) {
			int64_t s = s0 + j;
			if ((g.causal && s > t) || ht[j] != 0)
				continue;
			T dot = 0;
			for (int64_t i = 0; i < d; i++)
				dot += qr[i] * kt[j * d + i];
			T sc = (T)g.scale * dot;
			if (sc > m) { // the maximum grows: rescale what is summed
				T f = att_exp(m - sc);
				l *= f;
#pragma unroll
				for (int i = 0; i < DV; i++)
					o[i] *= f;
				m = sc;
			}
			T p = att_exp(sc - m);
			l += p;
			T pd = p * (T)att_keep(g, b, h, t, s);
#pragma unroll
			for (int i = 0; i < DV; i++)
				if (i < g.dv)
					o[i] += pd * vt[j * g.dv + i];
		}
	}
	if (!active)
		return;
	T *out = att_row<T>(g.out, g.os, b, h, t);
	T inv = l > 0 ? (T)1 / l : (T)0;
#pragma unroll
	for (int i = 0; i < DV; i++)
		if (i < g.dv)
			out[i] = o[i] * inv;
	((T *)g.lse)[(b * g.H + h) * g.T + t] = l > 0 ? m + att_log(l) : (T)INFINITY;
}

// ---- backward: a query row ---------------------------------------------------------------

// D_t = sum_s p m (dout_t . v_s), then dq_t = scale sum_s p (m dout_t . v_s - D_t) k_s.
template <typename T, int DQ> __global__ static void att_backward_q(att_geo g)
{
	extern __shared__ unsigned char att_smem[];
	T *qo = (T *)att_smem;		// ROWS x (d + 1)
	T *go = qo + ROWS * (g.d + 1);	// ROWS x (dv + 1): dout rows
	T *kt = go + ROWS * (g.dv + 1); // TILE x d
	T *vt = kt + TILE * g.d;	// TILE x dv
	T *ht = vt + TILE * g.dv;	// TILE
	int64_t b, h, t0;
	att_block(g, g.T, &b, &h, &t0);
	int64_t t = t0 + threadIdx.x, d = g.d, dv = g.dv;
	bool active = t < g.T;
	T *qr = qo + threadIdx.x * (d + 1), *gr = go + threadIdx.x * (dv + 1);
	for (int64_t i = 0; i < d; i++)
		qr[i] = active ? att_row<T>(g.q, g.qs, b, h, t)[i] : (T)0;
	for (int64_t i = 0; i < dv; i++)
		gr[i] = active ? att_row<T>(g.dout, g.gs, b, h, t)[i] : (T)0;
	T lse = active ? ((const T *)g.lse_in)[(b * g.H + h) * g.T + t] : (T)INFINITY, dsum = 0;
	T dq[DQ];
#pragma unroll
	for (int i = 0; i < DQ; i++)
		dq[i] = 0;
	const T *hid = g.hid ? (const T *)g.hid + b * g.S : NULL;
	int64_t s_end = g.causal ? min(g.S, t0 + (int64_t)ROWS) : g.S;
	for (int pass = 0; pass < 2; pass++) {
		for (int64_t s0 = 0; s0 < s_end; s0 += TILE) {
			int64_t n = min((int64_t)TILE, s_end - s0);
			att_load_keys<T>(kt, vt, ht, g, hid, b, h, s0, n);
			for (int64_t j = 0; active && j < n; j++) {
				int64_t s = s0 + j;
				if ((g.causal && s > t) || ht[j] != 0)
					continue;
				T dot = 0, dp = 0;
				for (int64_t i = 0; i < d; i++)
					dot += qr[i] * kt[j * d + i];
				for (int64_t i = 0; i < dv; i++)
					dp += gr[i] * vt[j * dv + i];
				T p = att_exp((T)g.scale * dot - lse),
				  mk = (T)att_keep(g, b, h, t, s);
				if (pass == 0) {
					dsum += p * mk * dp;
					continue;
				}
				T ds = p * (mk * dp - dsum);
#pragma unroll
				for (int i = 0; i < DQ; i++)
					if (i < d)
						dq[i] += ds * kt[j * d + i];
			}
		}
	}
	if (!active)
		return;
	T *out = att_row<T>(g.gq, g.dqs, b, h, t);
#pragma unroll
	for (int i = 0; i < DQ; i++)
		if (i < d)
			out[i] = (T)g.scale * dq[i];
	((T *)g.dsum)[(b * g.H + h) * g.T + t] = dsum;
}

// ---- backward: a key row -------------------------------------------------------------------

// dv_s = sum_t p m dout_t, dk_s = scale sum_t p (m dout_t . v_s - D_t) q_t.
template <typename T, int DK> __global__ static void att_backward_kv(att_geo g)
{
	extern __shared__ unsigned char att_smem[];
	T *ko = (T *)att_smem;		// ROWS x (d + 1): the block's key rows
	T *vo = ko + ROWS * (g.d + 1);	// ROWS x (dv + 1)
	T *qt = vo + ROWS * (g.dv + 1); // TILE x d
	T *gt = qt + TILE * g.d;	// TILE x dv
	T *lt = gt + TILE * g.dv;	// TILE lse
	T *dt = lt + TILE;		// TILE D_t
	int64_t b, h, s0;
	att_block(g, g.S, &b, &h, &s0);
	int64_t s = s0 + threadIdx.x, d = g.d, dv = g.dv;
	const T *hid = g.hid ? (const T *)g.hid + b * g.S : NULL;
	bool active = s < g.S && !(hid && hid[s] != 0);
	T *kr = ko + threadIdx.x * (d + 1), *vr = vo + threadIdx.x * (dv + 1);
	for (int64_t i = 0; i < d; i++)
		kr[i] = active ? att_row<T>(g.k, g.ks, b, h, s)[i] : (T)0;
	for (int64_t i = 0; i < dv; i++)
		vr[i] = active ? att_row<T>(g.v, g.vs, b, h, s)[i] : (T)0;
	T dk[DK], dvv[DK];
#pragma unroll
	for (int i = 0; i < DK; i++)
		dk[i] = dvv[i] = 0;
	const T *lse = (const T *)g.lse_in + (b * g.H + h) * g.T;
	const T *ds_all = (const T *)g.dsum + (b * g.H + h) * g.T;
	for (int64_t t0 = g.causal ? s0 : 0; t0 < g.T; t0 += TILE) {
		int64_t n = min((int64_t)TILE, g.T - t0);
		__syncthreads();
		att_load<T>(qt, g.q, g.qs, b, h, t0, n, d);
		att_load<T>(gt, g.dout, g.gs, b, h, t0, n, dv);
		for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
			lt[j] = lse[t0 + j];
			dt[j] = ds_all[t0 + j];
		}
		__syncthreads();
		for (int64_t j = 0; active && j < n; j++) {
			int64_t t = t0 + j;
			if (g.causal && s > t)
				continue;
			T dot = 0, dp = 0;
			for (int64_t i = 0; i < d; i++)
				dot += qt[j * d + i] * kr[i];
			for (int64_t i = 0; i < dv; i++)
				dp += gt[j * dv + i] * vr[i];
			T p = att_exp((T)g.scale * dot - lt[j]), mk = (T)att_keep(g, b, h, t, s);
			T pm = p * mk, ds = p * (mk * dp - dt[j]);
#pragma unroll
			for (int i = 0; i < DK; i++) {
				if (i < dv)
					dvv[i] += pm * gt[j * dv + i];
				if (i < d)
					dk[i] += ds * qt[j * d + i];
			}
		}
	}
	if (s >= g.S)
		return;
	T *ok = att_row<T>(g.gk, g.dks, b, h, s), *ov = att_row<T>(g.gv, g.dvs, b, h, s);
#pragma unroll
	for (int i = 0; i < DK; i++) {
		if (i < d)
			ok[i] = (T)g.scale * dk[i];
		if (i < dv)
			ov[i] = dvv[i];
	}
}

// ---- host side ---------------------------------------------------------------------------

static void strides3(int64_t *dst, const struct tensor *t)
{
	dst[0] = t->strides[0];
	dst[1] = t->strides[1];
	dst[2] = t->strides[2];
}

static att_geo geo_of(const struct tensor_attention_args *a)
{
	att_geo g = {};
	g.q = (const char *)cuda_ptr(a->q);
	g.k = (const char *)cuda_ptr(a->k);
	g.v = (const char *)cuda_ptr(a->v);
	g.hid = a->hidden ? (const char *)cuda_ptr(a->hidden) : NULL;
	g.B = a->q->shape[0];
	g.H = a->q->shape[1];
	g.T = a->q->shape[2];
	g.S = a->k->shape[2];
	g.d = a->q->shape[3];
	g.dv = a->v->shape[3];
	strides3(g.qs, a->q);
	strides3(g.ks, a->k);
	strides3(g.vs, a->v);
	g.causal = a->causal;
	g.scale = a->scale;
	g.drop = a->dropout > 0;
	g.keep_scale = 1.0 / (1.0 - a->dropout);
	g.thresh = random_dropout_threshold(a->dropout);
	g.seed = a->seed;
	g.first = a->first;
	return g;
}

// The dims a kernel's register arrays hold: 64 or 128, or 0 past ATT_DMAX.
static int att_bound(int64_t n)
{
	return n <= 64 ? 64 : n <= ATT_DMAX ? 128 : 0;
}

static int att_unsupported(const char *op, const att_geo &g)
{
	return tensor_error(TENSOR_ERR_UNSUPPORTED,
			    "%s: head dims d %lld, dv %lld: the CUDA kernel takes at most %d", op,
			    (long long)g.d, (long long)g.dv, (int)ATT_DMAX);
}

// Launch kernel f over ceil(rows / ROWS) blocks a (batch, head) with smem bytes of dynamic
// shared memory (raised past 48 KiB where the kernel needs it).
template <typename F>
static int att_launch(const char *op, F f, const att_geo &g, int64_t rows, size_t smem)
{
	int64_t blocks = g.B * g.H * ((rows + ROWS - 1) / ROWS);
	if (blocks == 0)
		return TENSOR_OK;
	if (blocks > 0x7fffffff)
		return tensor_error(TENSOR_ERR_SHAPE, "%s: %lld blocks exceed the grid", op,
				    (long long)blocks);
	cudaError_t e =
	    cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
	if (e != cudaSuccess)
		return cuda_status(e, op);
	f<<<(unsigned)blocks, ROWS, smem, cuda_stream()>>>(g);
	return cuda_launched(op);
}

template <typename T> static int forward_as(const att_geo &g)
{
	size_t smem = sizeof(T) * (size_t)(ROWS * (g.d + 1) + TILE * (g.d + g.dv + 1));
	return att_bound(g.dv) == 64 ? att_launch("attention", att_forward<T, 64>, g, g.T, smem)
				     : att_launch("attention", att_forward<T, 128>, g, g.T, smem);
}

template <typename T> static int backward_as(const att_geo &g)
{
	const char *op = "attention_backward";
	size_t sq = sizeof(T) * (size_t)(ROWS * (g.d + g.dv + 2) + TILE * (g.d + g.dv + 1));
	size_t skv = sizeof(T) * (size_t)(ROWS * (g.d + g.dv + 2) + TILE * (g.d + g.dv + 2));
	int rc = att_bound(g.d) == 64 ? att_launch(op, att_backward_q<T, 64>, g, g.T, sq)
				      : att_launch(op, att_backward_q<T, 128>, g, g.T, sq);
	if (rc != TENSOR_OK)
		return rc;
	int dk = att_bound(g.d > g.dv ? g.d : g.dv);
	return dk == 64 ? att_launch(op, att_backward_kv<T, 64>, g, g.S, skv)
			: att_launch(op, att_backward_kv<T, 128>, g, g.S, skv);
}

extern "C" int cuda_attention(struct tensor *out, struct tensor *lse,
			      const struct tensor_attention_args *a)
{
	att_geo g = geo_of(a);
	if (!att_bound(g.d) || !att_bound(g.dv))
		return att_unsupported("attention", g);
	g.out = (char *)cuda_ptr(out);
	g.lse = (char *)cuda_ptr(lse);
	strides3(g.os, out);
	return a->q->dtype == TENSOR_F32 ? forward_as<float>(g) : forward_as<double>(g);
}

extern "C" int cuda_attention_backward(struct tensor *dq, struct tensor *dk, struct tensor *dv,
				       const struct tensor_attention_args *a,
				       const struct tensor *lse, const struct tensor *dout)
{
	att_geo g = geo_of(a);
	if (!att_bound(g.d) || !att_bound(g.dv))
		return att_unsupported("attention_backward", g);
	size_t es = tensor_dtype_size(a->q->dtype);
	g.dsum = (char *)cuda_scratch((size_t)(g.B * g.H * g.T) * es + 1, "attention_backward");
	if (!g.dsum)
		return tensor_last_status();
	g.lse_in = (const char *)cuda_ptr(lse);
	g.dout = (const char *)cuda_ptr(dout);
	g.gq = (char *)cuda_ptr(dq);
	g.gk = (char *)cuda_ptr(dk);
	g.gv = (char *)cuda_ptr(dv);
	strides3(g.gs, dout);
	strides3(g.dqs, dq);
	strides3(g.dks, dk);
	strides3(g.dvs, dv);
	return a->q->dtype == TENSOR_F32 ? backward_as<float>(g) : backward_as<double>(g);
}
