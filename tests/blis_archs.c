/* For tests/test_blis_archs.sh: the BLIS kernel sets this CPU can run, or the one in use.
 *
 *   tests/blis_archs            one line "ID NAME" for each kernel set of this BLIS whose
 *                               instructions the CPU has (ID as BLIS_ARCH_TYPE takes it)
 *   tests/blis_archs --current  the set cformer uses (tensor_blas_arch), after a product
 *
 * Sets for CPUs these machines never are (Xeon Phi, AMD's FMA4 families before Zen) are
 * listed only where the CPU has their instructions. */
#include <blis.h>
#include <stdio.h>
#include <string.h>

#include "tensor.h"
#include "tensor_ops.h"

/* Whether the CPU has the instructions of BLIS's kernel set `name` (false for a set not
 * of x86-64). */
static bool runs_here(const char *name)
{
	__builtin_cpu_init();
	bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
	if (!strcmp(name, "skx"))
		return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
		       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
	if (!strcmp(name, "knl"))
		return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512er");
	if (!strcmp(name, "haswell") || !strncmp(name, "zen", 3))
		return avx2;
	if (!strcmp(name, "sandybridge"))
		return __builtin_cpu_supports("avx");
	if (!strcmp(name, "penryn"))
		return __builtin_cpu_supports("ssse3");
	if (!strcmp(name, "excavator") || !strcmp(name, "steamroller") ||
	    !strcmp(name, "piledriver") || !strcmp(name, "bulldozer"))
		return __builtin_cpu_supports("fma4") && __builtin_cpu_supports("xop");
	return !strcmp(name, "generic");
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--current")) {
		struct tensor *x = tensor_ones(TENSOR_F32, TENSOR_CPU, 2, (int64_t[]){ 8, 8 });
		struct tensor *y = tensor_matmul(x, x);
		if (!y) {
			fprintf(stderr, "blis_archs: %s\n", tensor_last_error());
			return 1;
		}
		printf("%s\n", tensor_blas_arch());
		tensor_free(y);
		tensor_free(x);
		return 0;
	}
	if (argc != 1) {
		fprintf(stderr, "usage: blis_archs [--current]\n");
		return 2;
	}
	for (int id = 0; id < BLIS_NUM_ARCHS; id++) {
		const char *name = bli_arch_string((arch_t)id);
		if (name && runs_here(name))
			printf("%d %s\n", id, name);
	}
	return 0;
}
