// Device helpers the CUDA kernel files share: arithmetic rounded as written
// (nvcc would contract a * b + c into an FMA where the CPU reference rounds
// each operation apart), and 16-byte vector loads and stores.
#ifndef CFORMER_CUDA_RN_CUH
#define CFORMER_CUDA_RN_CUH

#include <stdint.h>

// clang-format off
__device__ static inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ static inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ static inline float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ static inline double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ static inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ static inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ static inline float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ static inline double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ static inline float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ static inline double sqrt_rn(double a) { return __dsqrt_rn(a); }
__device__ static inline float exp_t(float a) { return expf(a); }
__device__ static inline double exp_t(double a) { return exp(a); }
// max ignoring NaN (as the CPU's x > m ? x : m, which never takes a NaN)
__device__ static inline float max_t(float a, float b) { return fmaxf(a, b); }
__device__ static inline double max_t(double a, double b) { return fmax(a, b); }
// clang-format on

// Whether p is 16-byte aligned (a float4 / double2 may be loaded there).
static inline bool aligned16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

__device__ static inline void ld16(float *v, const float *p)
{
	float4 a = *(const float4 *)p;
	v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
}
__device__ static inline void ld16(double *v, const double *p)
{
	double2 a = *(const double2 *)p;
	v[0] = a.x, v[1] = a.y;
}
__device__ static inline void st16(float *p, const float *v)
{
	*(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ static inline void st16(double *p, const double *v)
{
	*(double2 *)p = make_double2(v[0], v[1]);
}

#endif
