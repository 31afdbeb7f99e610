/* CPU elementwise kernels: unary, binary (broadcast operands arrive as stride-0 views), where. */
#include <math.h>
#include <string.h>

#include "cpu_iter.h"
#include "cpu_kernels.h"
#include "cpu_math.h"

#define EW_INLINE static inline __attribute__((always_inline))


/* ---- scalar math (../scalar_math.h) ------------------------------------- */

static double unary_d(enum tensor_unary_op op, double x, double alpha)
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
	case TENSOR_GELU_GRAD:
		return gelu_grad_d(x);
	case TENSOR_GELU_TANH_GRAD: return gelu_tanh_grad_d(x);
	case TENSOR_SILU_GRAD: return silu_grad_d(x);
	case TENSOR_SILU: return x * sigmoid_d(x);
	case TENSOR_SIGMOID: return sigmoid_d(x);
	case TENSOR_SQUARE: return x * x;
	case TENSOR_RECIPROCAL: return 1.0 / x;
	case TENSOR_ADD_SCALAR: return x + alpha;
	case TENSOR_MUL_SCALAR: return x * alpha;
	case TENSOR_POW_SCALAR: return alpha == 2.0 ? x * x : pow(x, alpha);
	default: return NAN;
	}
}

/* Integer ops wrap around (two's complement), through unsigned arithmetic. */
static int64_t unary_i(enum tensor_unary_op op, int64_t x, int64_t s)
{
	uint64_t u = (uint64_t)x;
	switch (op) {
	case TENSOR_NEG: return (int64_t)(0 - u);
	case TENSOR_ABS: return x < 0 ? (int64_t)(0 - u) : x;
	case TENSOR_RELU: return x < 0 ? 0 : x;
	case TENSOR_SQUARE: return (int64_t)(u * u);
	case TENSOR_ADD_SCALAR: return (int64_t)(u + (uint64_t)s);
	case TENSOR_MUL_SCALAR: return (int64_t)(u * (uint64_t)s);
	default: return 0; /* float-only ops never reach here */
	}
}

/* NaN-propagating maximum / minimum, as torch.maximum. */
static inline double max_d(double a, double b)
{
	return a > b || a != a ? a : b;
}
static inline double min_d(double a, double b)
{
	return a < b || a != a ? a : b;
}
static inline float max_f(float a, float b)
{
	return a > b || a != a ? a : b;
}
static inline float min_f(float a, float b)
{
	return a < b || a != a ? a : b;
}

static double binary_d(enum tensor_binary_op op, double a, double b)
{
	switch (op) {
	case TENSOR_ADD: return a + b;
	case TENSOR_SUB: return a - b;
	case TENSOR_MUL: return a * b;
	case TENSOR_DIV: return a / b;
	case TENSOR_POW: return pow(a, b);
	case TENSOR_MAXIMUM: return max_d(a, b);
	case TENSOR_MINIMUM: return min_d(a, b);
	case TENSOR_MUL_GELU_GRAD: return a * unary_d(TENSOR_GELU_GRAD, b, 0);
	case TENSOR_MUL_GELU_TANH_GRAD: return a * unary_d(TENSOR_GELU_TANH_GRAD, b, 0);
	case TENSOR_MUL_SILU_GRAD: return a * unary_d(TENSOR_SILU_GRAD, b, 0);
	case TENSOR_EQ: return a == b;
	case TENSOR_NE: return a != b;
	case TENSOR_LT: return a < b;
	case TENSOR_LE: return a <= b;
	case TENSOR_GT: return a > b;
	case TENSOR_GE: return a >= b;
	default: return NAN;
	}
}

static int64_t binary_i(enum tensor_binary_op op, int64_t a, int64_t b)
{
	switch (op) {
	case TENSOR_ADD: return (int64_t)((uint64_t)a + (uint64_t)b);
	case TENSOR_SUB: return (int64_t)((uint64_t)a - (uint64_t)b);
	case TENSOR_MUL: return (int64_t)((uint64_t)a * (uint64_t)b);
	case TENSOR_MAXIMUM: return a > b ? a : b;
	case TENSOR_MINIMUM: return a < b ? a : b;
	case TENSOR_EQ: return a == b;
	case TENSOR_NE: return a != b;
	case TENSOR_LT: return a < b;
	case TENSOR_LE: return a <= b;
	case TENSOR_GT: return a > b;
	case TENSOR_GE: return a >= b;
	default: return 0; /* div and pow are float-only */
	}
}

static inline bool is_float(enum tensor_dtype dt)
{
	return dt == TENSOR_F32 || dt == TENSOR_F64;
}

/* Stores an int64 into an i32/i64 element (i32 keeps the low 32 bits). */
static inline void store_i(char *p, enum tensor_dtype dt, int64_t v)
{
	if (dt == TENSOR_I32)
		*(int32_t *)p = (int32_t)v;
	else
		*(int64_t *)p = v;
}

/* ---- unary ----------------------------------------------------------------- */

/* f32 in float arithmetic; o is contiguous, x has element stride sx. */
EW_INLINE void unary_f32(enum tensor_unary_op op, float *restrict o, const float *restrict x,
			 int64_t sx, int64_t n, float al)
{
	switch (op) {
	case TENSOR_NEG:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = -x[i * sx];
		break;
	case TENSOR_EXP:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = exp_f32(x[i * sx]);
		break;
	case TENSOR_LOG:
		for (int64_t i = 0; i < n; i++)
			o[i] = logf(x[i * sx]);
		break;
	case TENSOR_SQRT:
		for (int64_t i = 0; i < n; i++)
			o[i] = sqrtf(x[i * sx]);
		break;
	case TENSOR_RSQRT:
		for (int64_t i = 0; i < n; i++)
			o[i] = 1.0f / sqrtf(x[i * sx]);
		break;
	case TENSOR_TANH:
		for (int64_t i = 0; i < n; i++)
			o[i] = tanhf(x[i * sx]);
		break;
	case TENSOR_ERF:
		for (int64_t i = 0; i < n; i++)
			o[i] = erff(x[i * sx]);
		break;
	case TENSOR_ABS:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = fabsf(x[i * sx]);
		break;
	case TENSOR_RELU:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = x[i * sx] < 0 ? 0.0f : x[i * sx];
		break;
	case TENSOR_GELU:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = gelu_f(x[i * sx]);
		break;
	case TENSOR_GELU_TANH:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = gelu_tanh_f(x[i * sx]);
		break;
	case TENSOR_SILU:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = x[i * sx] * sigmoid_f(x[i * sx]);
		break;
	case TENSOR_SIGMOID:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = sigmoid_f(x[i * sx]);
		break;
	case TENSOR_GELU_GRAD:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = gelu_grad_f(x[i * sx]);
		break;
	case TENSOR_GELU_TANH_GRAD:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = gelu_tanh_grad_f(x[i * sx]);
		break;
	case TENSOR_SILU_GRAD:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = silu_grad_f(x[i * sx]);
		break;
	case TENSOR_SQUARE:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = x[i * sx] * x[i * sx];
		break;
	case TENSOR_RECIPROCAL:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = 1.0f / x[i * sx];
		break;
	case TENSOR_ADD_SCALAR:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = x[i * sx] + al;
		break;
	case TENSOR_MUL_SCALAR:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = x[i * sx] * al;
		break;
	case TENSOR_POW_SCALAR:
		if (al == 2.0f) {
#pragma omp simd
			for (int64_t i = 0; i < n; i++)
				o[i] = x[i * sx] * x[i * sx];
		} else {
			for (int64_t i = 0; i < n; i++)
				o[i] = powf(x[i * sx], al);
		}
		break;
	default: break;
	}
}

CPU_WIDE_CLONES
static void unary_f32_row(enum tensor_unary_op op, float *o, const float *x, int64_t sx, int64_t n,
			  float al)
{
	if (sx == 1)
		unary_f32(op, o, x, 1, n, al);
	else
		unary_f32(op, o, x, sx, n, al);
}

/* Any dtype and strides: floats through double, integers through int64. */
static void unary_any_row(enum tensor_unary_op op, enum tensor_dtype dt, char *const *p,
			  const int64_t *bs, int64_t n, double alpha)
{
	if (is_float(dt)) {
		for (int64_t i = 0; i < n; i++)
			cpu_store(p[0] + i * bs[0], dt,
				  unary_d(op, cpu_load(p[1] + i * bs[1], dt), alpha));
		return;
	}
	/* alpha was checked to be an integer the dtype holds */
	int64_t s = op == TENSOR_ADD_SCALAR || op == TENSOR_MUL_SCALAR ? (int64_t)alpha : 0;
	for (int64_t i = 0; i < n; i++)
		store_i(p[0] + i * bs[0], dt, unary_i(op, cpu_load_index(p[1] + i * bs[1], dt), s));
}

int cpu_unary(enum tensor_unary_op op, struct tensor *out, const struct tensor *x, double alpha)
{
	const struct tensor *ts[2] = { out, x };
	struct cpu_loop l;
	cpu_loop_init(&l, 2, ts);
	enum tensor_dtype dt = x->dtype;
	bool f32 = dt == TENSOR_F32 && out->dtype == TENSOR_F32 && cpu_loop_stride(&l, 0) == 1;
	int64_t items = cpu_loop_items(&l);
#pragma omp parallel for num_threads(cpu_num_threads()) if (l.rows * l.n > CPU_PAR_MIN)
	for (int64_t t = 0; t < items; t++) {
		char *p[2];
		int64_t bs[2], n = cpu_loop_item(&l, t, p, bs, NULL);
		if (f32)
			unary_f32_row(op, (float *)p[0], (const float *)p[1],
				      cpu_loop_stride(&l, 1), n, (float)alpha);
		else
			unary_any_row(op, dt, p, bs, n, alpha);
	}
	return TENSOR_OK;
}

/* ---- binary ---------------------------------------------------------------- */

/* f32 in float arithmetic; o is contiguous, a and b have element strides sa, sb
 * (0 for an operand broadcast along the row). */
EW_INLINE void binary_f32(enum tensor_binary_op op, float *restrict o, const float *restrict a,
			  int64_t sa, const float *restrict b, int64_t sb, int64_t n)
{
	switch (op) {
	case TENSOR_ADD:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = a[i * sa] + b[i * sb];
		break;
	case TENSOR_SUB:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = a[i * sa] - b[i * sb];
		break;
	case TENSOR_MUL:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = a[i * sa] * b[i * sb];
		break;
	case TENSOR_DIV:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = a[i * sa] / b[i * sb];
		break;
	case TENSOR_POW:
		for (int64_t i = 0; i < n; i++)
			o[i] = powf(a[i * sa], b[i * sb]);
		break;
	case TENSOR_MAXIMUM:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = max_f(a[i * sa], b[i * sb]);
		break;
	case TENSOR_MINIMUM:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = min_f(a[i * sa], b[i * sb]);
		break;
	case TENSOR_MUL_GELU_GRAD:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = a[i * sa] * gelu_grad_f(b[i * sb]);
		break;
	case TENSOR_MUL_GELU_TANH_GRAD:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = a[i * sa] * gelu_tanh_grad_f(b[i * sb]);
		break;
	case TENSOR_MUL_SILU_GRAD:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = a[i * sa] * silu_grad_f(b[i * sb]);
		break;
	case TENSOR_EQ:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = a[i * sa] == b[i * sb] ? 1.0f : 0.0f;
		break;
	case TENSOR_NE:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = a[i * sa] != b[i * sb] ? 1.0f : 0.0f;
		break;
	case TENSOR_LT:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = a[i * sa] < b[i * sb] ? 1.0f : 0.0f;
		break;
	case TENSOR_LE:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = a[i * sa] <= b[i * sb] ? 1.0f : 0.0f;
		break;
	case TENSOR_GT:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = a[i * sa] > b[i * sb] ? 1.0f : 0.0f;
		break;
	case TENSOR_GE:
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			o[i] = a[i * sa] >= b[i * sb] ? 1.0f : 0.0f;
		break;
	default: break;
	}
}

/* The common layouts get their own instance so the loops vectorize: both
 * contiguous, and one operand a broadcast scalar or bias; wide vectors where the CPU has
 * them (the derivatives' polynomials). */
CPU_WIDE_CLONES static void binary_f32_row(enum tensor_binary_op op, float *o, const float *a,
					   int64_t sa, const float *b, int64_t sb, int64_t n)
{
	if (sa == 1 && sb == 1)
		binary_f32(op, o, a, 1, b, 1, n);
	else if (sa == 1 && sb == 0)
		binary_f32(op, o, a, 1, b, 0, n);
	else if (sa == 0 && sb == 1)
		binary_f32(op, o, a, 0, b, 1, n);
	else
		binary_f32(op, o, a, sa, b, sb, n);
}

static void binary_any_row(enum tensor_binary_op op, enum tensor_dtype dt, char *const *p,
			   const int64_t *bs, int64_t n)
{
	if (is_float(dt)) {
		for (int64_t i = 0; i < n; i++)
			cpu_store(p[0] + i * bs[0], dt,
				  binary_d(op, cpu_load(p[1] + i * bs[1], dt),
					   cpu_load(p[2] + i * bs[2], dt)));
		return;
	}
	for (int64_t i = 0; i < n; i++)
		store_i(p[0] + i * bs[0], dt,
			binary_i(op, cpu_load_index(p[1] + i * bs[1], dt),
				 cpu_load_index(p[2] + i * bs[2], dt)));
}

int cpu_binary(enum tensor_binary_op op, struct tensor *out, const struct tensor *a,
	       const struct tensor *b)
{
	const struct tensor *ts[3] = { out, a, b };
	struct cpu_loop l;
	cpu_loop_init(&l, 3, ts);
	enum tensor_dtype dt = a->dtype;
	bool f32 = dt == TENSOR_F32 && out->dtype == TENSOR_F32 && cpu_loop_stride(&l, 0) == 1;
	int64_t items = cpu_loop_items(&l);
#pragma omp parallel for num_threads(cpu_num_threads()) if (l.rows * l.n > CPU_PAR_MIN)
	for (int64_t t = 0; t < items; t++) {
		char *p[3];
		int64_t bs[3], n = cpu_loop_item(&l, t, p, bs, NULL);
		if (f32)
			binary_f32_row(op, (float *)p[0], (const float *)p[1],
				       cpu_loop_stride(&l, 1), (const float *)p[2],
				       cpu_loop_stride(&l, 2), n);
		else
			binary_any_row(op, dt, p, bs, n);
	}
	return TENSOR_OK;
}

/* ---- where ----------------------------------------------------------------- */

EW_INLINE bool nonzero(const char *p, enum tensor_dtype dt)
{
	switch (dt) {
	case TENSOR_F32: return *(const float *)p != 0;
	case TENSOR_F64: return *(const double *)p != 0;
	case TENSOR_I32: return *(const int32_t *)p != 0;
	default: return *(const int64_t *)p != 0;
	}
}

/* Elements are moved as bytes (es is 4 or 8), so every dtype is exact; out
 * may be b (tensor_masked_fill_), hence memmove. */
EW_INLINE void where_row(char *const *p, const int64_t *bs, int64_t n, size_t es,
			 enum tensor_dtype cdt)
{
	for (int64_t i = 0; i < n; i++) {
		const char *src =
		    nonzero(p[1] + i * bs[1], cdt) ? p[2] + i * bs[2] : p[3] + i * bs[3];
		memmove(p[0] + i * bs[0], src, es);
	}
}

/* One instance per element size and cond dtype, so the test and the move are
 * resolved outside the loop. */
static void where_row_of(char *const *p, const int64_t *bs, int64_t n, size_t es,
			 enum tensor_dtype cdt)
{
	switch (cdt) {
	case TENSOR_F32:
		es == 4 ? where_row(p, bs, n, 4, TENSOR_F32) : where_row(p, bs, n, 8, TENSOR_F32);
		break;
	case TENSOR_F64:
		es == 4 ? where_row(p, bs, n, 4, TENSOR_F64) : where_row(p, bs, n, 8, TENSOR_F64);
		break;
	case TENSOR_I32:
		es == 4 ? where_row(p, bs, n, 4, TENSOR_I32) : where_row(p, bs, n, 8, TENSOR_I32);
		break;
	default:
		es == 4 ? where_row(p, bs, n, 4, TENSOR_I64) : where_row(p, bs, n, 8, TENSOR_I64);
		break;
	}
}

int cpu_where(struct tensor *out, const struct tensor *cond, const struct tensor *a,
	      const struct tensor *b)
{
	const struct tensor *ts[4] = { out, cond, a, b };
	struct cpu_loop l;
	cpu_loop_init(&l, 4, ts);
	size_t es = tensor_dtype_size(out->dtype);
	enum tensor_dtype cdt = cond->dtype;
	int64_t items = cpu_loop_items(&l);
#pragma omp parallel for num_threads(cpu_num_threads()) if (l.rows * l.n > CPU_PAR_MIN)
	for (int64_t t = 0; t < items; t++) {
		char *p[4];
		int64_t bs[4], n = cpu_loop_item(&l, t, p, bs, NULL);
		where_row_of(p, bs, n, es, cdt);
	}
	return TENSOR_OK;
}
