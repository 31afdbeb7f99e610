/* CPU copy (with dtype conversion), fill, arange and random fills. */
#include <math.h>
#include <string.h>

#include "../random.h"
#include "cpu_iter.h"
#include "cpu_kernels.h"
#include "cpu_math.h"

int cpu_copy(struct tensor *dst, const struct tensor *src)
{
	const struct tensor *ts[2] = { dst, src };
	struct cpu_loop l;
	cpu_loop_init(&l, 2, ts);
	enum tensor_dtype dd = dst->dtype, sd = src->dtype;
	int64_t items = cpu_loop_items(&l);
#pragma omp parallel for num_threads(cpu_num_threads()) if (l.rows * l.n > CPU_PAR_MIN)
	for (int64_t t = 0; t < items; t++) {
		char *p[2];
		int64_t bs[2], n = cpu_loop_item(&l, t, p, bs, NULL);
		if (dd == sd && bs[0] == (int64_t)l.esize[0] && bs[1] == bs[0]) {
			memcpy(p[0], p[1], (size_t)(n * bs[0]));
		} else if (dd == TENSOR_F32 && sd == TENSOR_F32) {
			float *o = (float *)p[0];
			const float *x = (const float *)p[1];
			int64_t s0 = bs[0] / 4, s1 = bs[1] / 4;
			for (int64_t i = 0; i < n; i++)
				o[i * s0] = x[i * s1];
		} else if (dd == TENSOR_BF16 && sd == TENSOR_F32) {
			uint16_t *o = (uint16_t *)p[0];
			const float *x = (const float *)p[1];
			int64_t s0 = bs[0] / 2, s1 = bs[1] / 4;
			if (s0 == 1 && s1 == 1) {
#pragma omp simd
				for (int64_t i = 0; i < n; i++)
					o[i] = bf16_from_f32(x[i]);
			} else {
				for (int64_t i = 0; i < n; i++)
					o[i * s0] = bf16_from_f32(x[i * s1]);
			}
		} else if (dd == TENSOR_F32 && sd == TENSOR_BF16) {
			float *o = (float *)p[0];
			const uint16_t *x = (const uint16_t *)p[1];
			int64_t s0 = bs[0] / 4, s1 = bs[1] / 2;
			for (int64_t i = 0; i < n; i++)
				o[i * s0] = bf16_to_f32(x[i * s1]);
		} else if (dd == TENSOR_BF16 && sd == TENSOR_BF16) {
			uint16_t *o = (uint16_t *)p[0];
			const uint16_t *x = (const uint16_t *)p[1];
			int64_t s0 = bs[0] / 2, s1 = bs[1] / 2;
			for (int64_t i = 0; i < n; i++)
				o[i * s0] = x[i * s1];
		} else {
			for (int64_t i = 0; i < n; i++)
				cpu_store(p[0] + i * bs[0], dd, cpu_load(p[1] + i * bs[1], sd));
		}
	}
	return TENSOR_OK;
}

/* Store value_of(row-major index) into every element of dst. */
#define FOR_EACH_INDEX(dst, value_of)                                                            \
	do {                                                                                     \
		const struct tensor *ts_[1] = { dst };                                           \
		struct cpu_loop l_;                                                              \
		cpu_loop_init(&l_, 1, ts_);                                                      \
		enum tensor_dtype dt_ = (dst)->dtype;                                            \
		int64_t items_ = cpu_loop_items(&l_);                                            \
		_Pragma("omp parallel for num_threads(cpu_num_threads()) if (items_ > 1)") for ( \
		    int64_t t_ = 0; t_ < items_; t_++)                                           \
		{                                                                                \
			char *p_;                                                                \
			int64_t bs_, first_, n_ = cpu_loop_item(&l_, t_, &p_, &bs_, &first_);    \
			for (int64_t j_ = 0; j_ < n_; j_++) {                                    \
				uint64_t idx = (uint64_t)(first_ + j_);                          \
				(void)idx;                                                       \
				cpu_store(p_ + j_ * bs_, dt_, (value_of));                       \
			}                                                                        \
		}                                                                                \
	} while (0)

int cpu_fill(struct tensor *dst, double value)
{
	const struct tensor *ts[1] = { dst };
	struct cpu_loop l;
	cpu_loop_init(&l, 1, ts);
	enum tensor_dtype dt = dst->dtype;
	int64_t items = cpu_loop_items(&l);
	float f = (float)value;
	/* zeros (every dtype's 0 is all-zero bytes) and f32 rows: no per-element dtype switch */
	bool zero = value == 0 && !signbit(value), f32 = dt == TENSOR_F32;
#pragma omp parallel for num_threads(cpu_num_threads()) if (l.rows * l.n > CPU_PAR_MIN)
	for (int64_t t = 0; t < items; t++) {
		char *p;
		int64_t bs, n = cpu_loop_item(&l, t, &p, &bs, NULL);
		if (bs == (int64_t)l.esize[0] && zero) {
			memset(p, 0, (size_t)(n * bs));
		} else if (bs == 4 && f32) {
			float *o = (float *)p;
#pragma omp simd
			for (int64_t i = 0; i < n; i++)
				o[i] = f;
		} else {
			for (int64_t i = 0; i < n; i++)
				cpu_store(p + i * bs, dt, value);
		}
	}
	return TENSOR_OK;
}

int cpu_arange(struct tensor *dst, double start, double step)
{
	FOR_EACH_INDEX(dst, start + (double)idx * step);
	return TENSOR_OK;
}

/* Float32 results are rounded; keep uniform draws below hi after rounding. */
static double uniform_value(enum tensor_dtype dt, uint64_t seed, uint64_t i, double lo, double hi)
{
	double v = lo + (hi - lo) * random_uniform(seed, i);
	if (dt == TENSOR_F32 && (float)v >= (float)hi && hi > lo)
		v = nextafterf((float)hi, (float)lo);
	return v;
}

int cpu_random(struct tensor *dst, enum tensor_random_kind kind, uint64_t seed, double a, double b)
{
	enum tensor_dtype dt = dst->dtype;
	if (kind == TENSOR_RAND_UNIFORM)
		FOR_EACH_INDEX(dst, uniform_value(dt, seed, idx, a, b));
	else
		FOR_EACH_INDEX(dst, a + b * random_normal(seed, idx));
	return TENSOR_OK;
}
