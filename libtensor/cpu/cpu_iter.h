/* Strided iteration for CPU kernels. Internal to the CPU backend.
 *
 * A cpu_loop walks up to CPU_MAX_OPS tensors of one shape: dims that are
 * contiguous for every operand are merged, then the work is a set of "rows"
 * (all dims but the last) each handed to a typed inner loop with the last
 * dim's length and per-operand strides. Rows are independent, so kernels run
 * them under `#pragma omp parallel for`. */
#ifndef CFORMER_CPU_ITER_H
#define CFORMER_CPU_ITER_H

#include "../backend.h"
#include "../bf16.h"

#define CPU_MAX_OPS 4

struct cpu_loop {
	int ndim; /* >= 1 after merging */
	int nops;
	int64_t shape[TENSOR_MAX_DIMS];
	int64_t strides[CPU_MAX_OPS][TENSOR_MAX_DIMS];
	char *base[CPU_MAX_OPS]; /* address of element 0 of each operand */
	size_t esize[CPU_MAX_OPS];
	int64_t rows, n; /* rows = product of all dims but the last; n = last dim */
};

/* Set up a loop over ts[0]'s shape; every ts[i] must have that shape. */
void cpu_loop_init(struct cpu_loop *l, int nops, const struct tensor *const *ts);

/* Pointers of row r of each operand into p[]. */
static inline void cpu_loop_row(const struct cpu_loop *l, int64_t r, char **p)
{
	int64_t off[CPU_MAX_OPS] = { 0 };
	for (int d = l->ndim - 2; d >= 0; d--) {
		int64_t i = r % l->shape[d];
		r /= l->shape[d];
		for (int k = 0; k < l->nops; k++)
			off[k] += i * l->strides[k][d];
	}
	for (int k = 0; k < l->nops; k++)
		p[k] = l->base[k] + off[k] * (int64_t)l->esize[k];
}

/* Work items: every row, with long rows cut into pieces of CPU_PIECE
 * elements, so that contiguous data (one merged row) still spreads over the
 * threads. Loop `for (t = 0; t < cpu_loop_items(l); t++)` in parallel. */
#define CPU_PIECE 16384

static inline int64_t cpu_loop_pieces(const struct cpu_loop *l)
{
	return l->n > CPU_PIECE ? (l->n + CPU_PIECE - 1) / CPU_PIECE : 1;
}

static inline int64_t cpu_loop_items(const struct cpu_loop *l)
{
	return l->rows * cpu_loop_pieces(l);
}

/* Operand addresses of work item t in p[], byte strides in bs[], and in
 * *first the row-major index of its first element; returns its length. */
static inline int64_t cpu_loop_item(const struct cpu_loop *l, int64_t t, char **p, int64_t *bs,
				    int64_t *first)
{
	int64_t per = cpu_loop_pieces(l), row = t / per, start = (t % per) * CPU_PIECE;
	int64_t n = l->n - start;
	cpu_loop_row(l, row, p);
	for (int k = 0; k < l->nops; k++) {
		bs[k] = l->strides[k][l->ndim - 1] * (int64_t)l->esize[k];
		p[k] += start * bs[k];
	}
	if (first)
		*first = row * l->n + start;
	return n < CPU_PIECE ? n : CPU_PIECE;
}

/* Inner-dim stride of operand k. */
static inline int64_t cpu_loop_stride(const struct cpu_loop *l, int k)
{
	return l->strides[k][l->ndim - 1];
}

/* Element loads and stores through double, for the generic (any dtype)
 * paths; exact for f32, f64, bf16 and integers below 2^53 (a store to bf16
 * rounds once, to nearest even, see bf16.h). */
static inline double cpu_load(const char *p, enum tensor_dtype dt)
{
	switch (dt) {
	case TENSOR_F32: return *(const float *)p;
	case TENSOR_F64: return *(const double *)p;
	case TENSOR_I32: return *(const int32_t *)p;
	case TENSOR_BF16: return bf16_to_f64(*(const uint16_t *)p);
	default: return (double)*(const int64_t *)p;
	}
}

static inline void cpu_store(char *p, enum tensor_dtype dt, double v)
{
	switch (dt) {
	case TENSOR_F32: *(float *)p = (float)v; break;
	case TENSOR_F64: *(double *)p = v; break;
	case TENSOR_I32: *(int32_t *)p = (int32_t)v; break;
	case TENSOR_BF16: *(uint16_t *)p = bf16_from_f64(v); break;
	default: *(int64_t *)p = (int64_t)v; break;
	}
}

/* Index value i of an i32/i64 index tensor at address p. */
static inline int64_t cpu_load_index(const char *p, enum tensor_dtype dt)
{
	return dt == TENSOR_I32 ? *(const int32_t *)p : *(const int64_t *)p;
}

/* Address of element 0 of t. */
static inline char *cpu_ptr(const struct tensor *t)
{
	return (char *)t->storage->data + t->offset * tensor_dtype_size(t->dtype);
}

/* Whether a loop of `work` elements is worth parallelising. */
#define CPU_PAR_MIN 32768

#endif
