/* The CPU's view of the scalar math (../scalar_math.h, shared with the CUDA backend), and
 * the function clones that let its loops use the widest vectors the CPU runs. */
#ifndef CFORMER_CPU_MATH_H
#define CFORMER_CPU_MATH_H

#include "../scalar_math.h"

#define CPU_MATH static inline __attribute__((always_inline))

/* The loops that use these functions are compute-bound and, built for
 * baseline SSE2, scalarise the float-to-int steps of exp: on x86-64 with gcc
 * such a loop is also built for AVX2+FMA and AVX-512, and the widest the CPU
 * runs is picked at load time. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__gnu_linux__)
#define CPU_WIDE_CLONES \
	__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_WIDE_CLONES
#endif

#endif
