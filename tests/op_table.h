/* The op table: one row per op (or variant) of libtensor, in one place. A row
 * declares the op's arity, input shapes and domains, the dtypes it takes, the
 * input layouts to try, the tolerances, and up to three functions: the op
 * itself (tensor_*, on any device), a naive double-precision reference, and
 * its differentiable form (ag_*); `fused` marks an op whose kernel has a
 * composed fallback. tests/test_ops.c walks the table on the CPU (forward
 * against the reference in every layout and dtype, finite-difference
 * gradients in f64, the fused kernel against the composed form) and
 * tests/test_cuda.c on every other compiled device against the CPU. Adding an
 * op: a row, a reference, a kernel per backend. */
#ifndef CFORMER_OP_TABLE_H
#define CFORMER_OP_TABLE_H

#include "autograd.h"
#include "tensor.h"

#define OP_MAX_IN 4

enum {
	OP_F32 = 1 << TENSOR_F32,
	OP_F64 = 1 << TENSOR_F64,
	OP_I32 = 1 << TENSOR_I32,
	OP_I64 = 1 << TENSOR_I64,
	OP_FLOATS = OP_F32 | OP_F64,
	OP_INTS = OP_I32 | OP_I64,
	OP_ALL = OP_FLOATS | OP_INTS,
	/* bf16 (storage and matmul): the rows that take it; every other row must
	 * refuse it (test_ops' test_refuses_bf16) */
	OP_BF16 = 1 << TENSOR_BF16,
	OP_GEMM = OP_FLOATS | OP_BF16, /* matmul's dtypes */
	OP_STORE = OP_ALL | OP_BF16,   /* copies' and casts' */
};

/* Input layouts: each input in turn is a view of this kind over fresh storage. */
enum {
	OP_CONTIG = 1,
	OP_TRANSPOSED = 2, /* the last two dims swapped */
	OP_REVERSED = 4,   /* every dim reversed in memory */
	OP_SLICED = 8,	   /* inner stride 2, with an offset */
	OP_BROADCAST = 16, /* dim 0 of size 1, expanded (stride 0) */
	OP_VIEWS = OP_TRANSPOSED | OP_REVERSED | OP_SLICED,
	OP_LAYOUTS = OP_VIEWS | OP_BROADCAST,
};

struct op_row;
/* The op on inputs in[] (all on one device; for `grad`, f64 tensors that
 * require grad); it may write in[0] in place and return it. */
typedef struct tensor *(*op_fn)(struct tensor *const *in, const struct op_row *r);

struct op_row {
	const char *name;
	op_fn fn, ref, grad;
	int nin;
	int ndim[OP_MAX_IN];
	int64_t shape[OP_MAX_IN][4];
	double lo[OP_MAX_IN], hi[OP_MAX_IN]; /* uniform inputs (lo == hi: [-1, 1), ints +-20) */
	int64_t index[OP_MAX_IN];	     /* > 0: an i64 index input in [0, index) */
	bool quantize;			     /* inputs rounded toward 0 (ties for comparisons) */
	bool fused;	       /* libtensor composes the op where the device lacks the kernel (the
		       norms' backward, AdamW and SGD compose above libtensor:
		       tests/test_composed.c) */
	unsigned dtypes;       /* data dtypes */
	unsigned layouts;      /* layouts tried, one input at a time */
	unsigned inplace;      /* inputs written in place: never broadcast */
	unsigned fixed;	       /* inputs kept contiguous */
	unsigned nograd;       /* inputs with no gradient (masks, conditions) */
	double ulps32, ulps64; /* another device against the CPU: ulps of (|cpu| + 1) */
	double tol32, tol64;   /* against the reference: |got - ref| <= tol (|ref| + 1);
				  0: 2e-5 and 1e-11; set, another device may differ
				  from the CPU by 2 tol where that passes the ulps */
	int op;		       /* the generic rows' op code */
	double alpha;
	int dim;
};

/* Every row: the table's and the generated ones (each unary and binary op,
 * each reduction over each dim); *n receives the count. */
const struct op_row *op_rows(int *n);

/* Whether layout l applies to input j of r. */
bool op_layout_fits(const struct op_row *r, int j, unsigned l);
const char *op_layout_name(unsigned l);
/* Input j of r in dtype dt and layout l on dev: a view over fresh storage
 * whose values come from seed alone (the same on every device). For the
 * gradient check, op_grad_input gives the f64 leaf (requiring grad unless the
 * row says otherwise) and op_grad_view the view of it the op sees. */
struct tensor *op_input(const struct op_row *r, int j, enum tensor_dtype dt, unsigned l,
			enum tensor_device dev, uint64_t seed);
struct tensor *op_grad_input(const struct op_row *r, int j, unsigned l, uint64_t seed);
struct tensor *op_grad_view(struct tensor *leaf, const struct op_row *r, int j, unsigned l);
/* Several results as one flat tensor of the first one's dtype. */
struct tensor *op_flat(int n, struct tensor *const *ts);

/* op_ref.c: the naive double-precision references, by op family. Each
 * takes the inputs as contiguous CPU f64 tensors and returns a CPU f64
 * tensor of the op's result (flattened as the op's fn flattens it). */
struct tensor *ref_unary(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_binary(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_where(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_masked_fill(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_reduce(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_matmul(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_softmax(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_softmax_backward(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_norm(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_norm_backward(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_index_select(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_index_add(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_gather(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_scatter_add(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_adamw(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_sgd(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_conv1d(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_copy(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_concat(struct tensor *const *in, const struct op_row *r);
struct tensor *ref_dropout(struct tensor *const *in, const struct op_row *r);
/* Dropout's keep decision for element i, written from its specification (docs/architecture.md):
 * word (i / 4) % 4 of Philox-4x32-10 at counter 4 (i / 16) + i % 4, at least ceil(p 2^32). */
bool ref_dropout_keep(uint64_t seed, uint64_t i, double p);

#endif
