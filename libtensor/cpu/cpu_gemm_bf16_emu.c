/* The emulated twins of the AVX512-BF16 and AMX bf16 GEMM kernel sets: the code of
 * cpu_gemm_bf16_kernels.h on its x86 intrinsics written in C (cpu_x86_emu.h), so that
 * the kernels' packing, blocking, micro-kernels and C updates run, and are tested, on any
 * CPU (tensor_bf16_gemm_force("avx512bf16-emulated"), "amx-emulated"). Slow: for tests. */
#include "cpu_x86_emu.h"

_Thread_local struct emu_tile emu_tmm[8];

#define BF16_TARGET
#define AMX_TARGET
#define AVX512_IMPL bf16_avx512_emulated_impl
#define AMX_IMPL bf16_amx_emulated_impl
#include "cpu_gemm_bf16_kernels.h"
