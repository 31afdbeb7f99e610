/* The AVX512-BF16 and AMX bf16 GEMM kernel sets (cpu_gemm_bf16_kernels.h) on the CPU's
 * own instructions, and the checks that the CPU and the OS run them. */
#define _GNU_SOURCE /* syscall */
#include <stdint.h>
#include <string.h>

#include "cpu_gemm_bf16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))
#define AVX512_IMPL bf16_avx512_impl
#define AMX_IMPL bf16_amx_impl
#define BF16_PAIRS(x) ((__m512bh)(x))
#include "cpu_gemm_bf16_kernels.h"

/* ---- CPU support ----------------------------------------------------------- */

/* XCR0, where the OS has enabled XSAVE (CPUID.1:ECX.OSXSAVE); else 0. */
static uint64_t xcr0(void)
{
	unsigned a, b, c, d;
	if (__get_cpuid_max(0, NULL) < 7 || !__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))
		return 0;
	unsigned lo, hi;
	__asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return (uint64_t)hi << 32 | lo;
}

/* AVX512F/BW/VL and AVX512_BF16 in CPUID, and the OS saving the opmask and zmm state
 * (XCR0 bits 1, 2, 5, 6, 7). */
bool bf16_detect_avx512bf16(void)
{
	if ((xcr0() & 0xe6u) != 0xe6u)
		return false;
	unsigned a, b, c, d;
	__cpuid_count(7, 0, a, b, c, d);
	unsigned f_bw_vl = (1u << 16) | (1u << 30) | (1u << 31);
	if ((b & f_bw_vl) != f_bw_vl)
		return false;
	__cpuid_count(7, 1, a, b, c, d);
	return (a & (1u << 5)) != 0;
}

/* AMX-TILE and AMX-BF16 (CPUID.7.0:EDX bits 24 and 22), the OS managing the tile state
 * (XCR0 bits 17, 18) and granting it to this process (ARCH_REQ_XCOMP_PERM for
 * XFEATURE_XTILEDATA, 18; without it the first tile instruction raises SIGILL), with
 * AVX512-BF16 for the packing. */
bool bf16_detect_amx(void)
{
	if (!bf16_detect_avx512bf16() || (xcr0() & 0x60000u) != 0x60000u)
		return false;
	unsigned a, b, c, d;
	__cpuid_count(7, 0, a, b, c, d);
	if ((d & (1u << 24 | 1u << 22)) != (1u << 24 | 1u << 22))
		return false;
	return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18) == 0;
}

#else /* not x86-64 with GCC or Clang: these kernels are never chosen */

bool bf16_detect_avx512bf16(void)
{
	return false;
}

bool bf16_detect_amx(void)
{
	return false;
}

const struct bf16_impl bf16_avx512_impl, bf16_amx_impl;

#endif
