/* The bf16 GEMM kernels' shared frame (cpu_gemm_bf16.c, cpu_gemm_bf16_x86.c).
 *
 * A product C = alpha A B + beta C of bf16 inputs runs as packed blocks: B packed into
 * panels of NR columns, A into panels of MR rows, both as bf16 k-pairs (two bf16 of
 * consecutive k in one 32-bit word), and a micro-kernel multiplying an A panel by a B
 * panel into an MR x NR f32 tile. A kernel set (struct bf16_impl) supplies the packing,
 * the micro-kernel and its sizes; the driver (cpu_gemm_bf16.c) the blocking and threads. */
#ifndef CFORMER_CPU_GEMM_BF16_H
#define CFORMER_CPU_GEMM_BF16_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "../bf16.h"
#include "../tensor.h"

/* One matrix: element (r, c) at p + (r rs + c cs) * es bytes, of dtype dt (bf16 or
 * f32 for A and B; f32 or bf16 for C). */
struct bmat {
	char *p;
	enum tensor_dtype dt;
	int64_t es, rs, cs;
};

static inline char *bmat_at(const struct bmat *x, int64_t r, int64_t c)
{
	return x->p + (r * x->rs + c * x->cs) * x->es;
}

/* Element (r, c) as bf16 bits (an f32 one rounded to nearest even); zero outside rows
 * [0, rows). */
static inline uint16_t bmat_bf16(const struct bmat *x, int64_t r, int64_t c, int64_t rows)
{
	if (r >= rows)
		return 0;
	const char *q = bmat_at(x, r, c);
	if (x->dt == TENSOR_BF16) {
		uint16_t h;
		memcpy(&h, q, sizeof h);
		return h;
	}
	float f;
	memcpy(&f, q, sizeof f);
	return bf16_from_f32(f);
}

/* The bf16 pair (x[r][c], x[r+1][c]) of a matrix walked down its rows, low half first;
 * rows at or past `rows` read as zero. */
static inline uint32_t bmat_pair(const struct bmat *x, int64_t r, int64_t c, int64_t rows)
{
	return bmat_bf16(x, r, c, rows) | (uint32_t)bmat_bf16(x, r + 1, c, rows) << 16;
}

/* The transposed view of x (rows and columns swapped). */
static inline struct bmat bmat_t(const struct bmat *x)
{
	return (struct bmat){ x->p, x->dt, x->es, x->cs, x->rs };
}

static inline int64_t ceil_div(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

/* Where a finished tile goes: C's mr x nr corner at c = alpha tile + beta C, C read
 * only when beta != 0. */
struct tile_out {
	struct bmat c;
	int64_t mr, nr;
	float alpha, beta;
};

/* A kernel set. Packed k runs in steps of kstep (even; an edge step zero-padded):
 * - pack_b(b, k, nr, out): columns [0, nr) of b (k x nr, nr <= NR) as NR-word rows,
 *   row p holding the pairs (b[2p][j], b[2p+1][j]); ceil(k/2) rows (the driver zeroes
 *   the padding rows);
 * - pack_a(a, mr, kc, out): rows [0, mr) (mr <= MR) and k [0, kc) of a, padded to whole
 *   steps, in the kernel's own order;
 * - kernel(kp, a, b, t, add, o): the product of kp pairs (whole steps) of a packed A
 *   panel and a packed B panel (rows of NR words), plus the f32 tile t (MR x NR, row
 *   stride NR) when add; the result to C by o (o->c.cs == 1 or not), or into t when o
 *   is NULL;
 * - begin/end, when set: called by each thread around its share (AMX's tile state). */
struct bf16_impl {
	int mr, nr, kstep;
	int64_t kc, mc, nc; /* the k, row and column blocks: kc a multiple of kstep */
	void (*pack_b)(const struct bmat *b, int64_t k, int64_t nr, uint32_t *out);
	void (*pack_a)(const struct bmat *a, int64_t mr, int64_t kc, uint32_t *out);
	void (*kernel)(int64_t kp, const uint32_t *a, const uint32_t *b, float *t, bool add,
		       const struct tile_out *o);
	void (*begin)(void);
	void (*end)(void);
};

/* C = alpha A B + beta C on kernel set s, for the gemm slot's operands (a, b bf16 or
 * f32, c f32 or bf16, k, m, n > 0); TENSOR_ERR_NOMEM if the packing buffers fail. */
int bf16_gemm_run(const struct bf16_impl *s, struct tensor *c, const struct tensor *a,
		  const struct tensor *b, double alpha, double beta);

/* Portable pieces (cpu_gemm_bf16.c): out[p * ld + j] = (x[2p][j], x[2p+1][j]) for j <
 * lanes and 2p < rows, zeros past `width`; and the C update from an f32 tile (row
 * stride nr) for C of any strides. */
void bf16_pack_pairs_any(const struct bmat *x, int64_t rows, int64_t width, int lanes,
			 uint32_t *out, int64_t ld);
void bf16_tile_store_any(const float *t, int nr, const struct tile_out *o);

/* AMX's tile geometry as the kernels use it (palette 1): 16 rows of 64 bytes; an A
 * tile 16 rows x 16 pairs, a B tile 16 pairs x 16 columns, a C tile 16 x 16 f32. The
 * AMX kernel's A panel: for each step of 32 k, the tiles of rows 0-15 and 16-31, each
 * 16 x 16 words contiguous. */
enum { AMX_MR = 32, AMX_NR = 32, AMX_KSTEP = 32 };

/* The AVX512-BF16 and AMX kernel sets (cpu_gemm_bf16_kernels.h): on the CPU's
 * instructions (cpu_gemm_bf16_x86.c), for a CPU that has them; and on their emulation in
 * C (cpu_gemm_bf16_emu.c: the same packing, blocking and micro-kernels, the same results
 * but for the order of additions within a vdpbf16ps), on any CPU. */
extern const struct bf16_impl bf16_avx512_impl, bf16_amx_impl;
extern const struct bf16_impl bf16_avx512_emulated_impl, bf16_amx_emulated_impl;
bool bf16_detect_avx512bf16(void);
bool bf16_detect_amx(void);

#endif
