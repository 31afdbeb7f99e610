/* CPU copy (with dtype conversion), fill, arange and random fills. */
#include <math.h>
#include <string.h>

#include "../random.h"
#include "cpu_iter.h"
#include "cpu_kernels.h"

int cpu_copy(struct tensor *dst, const struct tensor *src)
{
	const struct tensor *ts[2] = {dst, src};
	struct cpu_loop l;
	cpu_loop_init(&l, 2, ts);
	int64_t s0 = cpu_loop_stride(&l, 0), s1 = cpu_loop_stride(&l, 1);
	enum tensor_dtype dd = dst->dtype, sd = src->dtype;
	size_t es = tensor_dtype_size(dd);
#pragma omp parallel for num_threads(cpu_num_threads()) if (l.rows * l.n > CPU_PAR_MIN)
	for (int64_t r = 0; r < l.rows; r++) {
		char *p[2];
		cpu_loop_row(&l, r, p);
		if (dd == sd && s0 == 1 && s1 == 1) {
			memcpy(p[0], p[1], (size_t)l.n * es);
		} else if (dd == TENSOR_F32 && sd == TENSOR_F32) {
			float *o = (float *)p[0];
			const float *x = (const float *)p[1];
			for (int64_t i = 0; i < l.n; i++)
				o[i * s0] = x[i * s1];
		} else {
			for (int64_t i = 0; i < l.n; i++)
				cpu_store(p[0] + i * s0 * (int64_t)es, dd,
					  cpu_load(p[1] + i * s1 * (int64_t)l.esize[1], sd));
		}
	}
	return TENSOR_OK;
}

/* Apply f(row-major index) to every element of dst. */
#define FOR_EACH_INDEX(dst, expr)                                                      \
	do {                                                                           \
		const struct tensor *ts_[1] = {dst};                                   \
		struct cpu_loop l_;                                                    \
		cpu_loop_init(&l_, 1, ts_);                                            \
		int64_t s_ = cpu_loop_stride(&l_, 0);                                  \
		enum tensor_dtype dt_ = (dst)->dtype;                                  \
		_Pragma("omp parallel for num_threads(cpu_num_threads()) if (l_.rows * l_.n > CPU_PAR_MIN)") \
		for (int64_t r_ = 0; r_ < l_.rows; r_++) {                             \
			char *p_;                                                      \
			cpu_loop_row(&l_, r_, &p_);                                    \
			for (int64_t j_ = 0; j_ < l_.n; j_++) {                        \
				uint64_t idx = (uint64_t)(r_ * l_.n + j_);             \
				(void)idx;                                             \
				cpu_store(p_ + j_ * s_ * (int64_t)l_.esize[0], dt_, (expr)); \
			}                                                              \
		}                                                                      \
	} while (0)

int cpu_fill(struct tensor *dst, double value)
{
	FOR_EACH_INDEX(dst, value);
	return TENSOR_OK;
}

int cpu_arange(struct tensor *dst, double start, double step)
{
	FOR_EACH_INDEX(dst, start + (double)idx * step);
	return TENSOR_OK;
}

/* Float32 results are rounded; keep uniform draws below hi after rounding. */
static double uniform_value(enum tensor_dtype dt, uint64_t seed, uint64_t i, double lo,
			    double hi)
{
	double v = lo + (hi - lo) * random_uniform(seed, i);
	if (dt == TENSOR_F32 && (float)v >= (float)hi && hi > lo)
		v = nextafterf((float)hi, (float)lo);
	return v;
}

int cpu_random(struct tensor *dst, enum tensor_random_kind kind, uint64_t seed, double a,
	       double b)
{
	enum tensor_dtype dt = dst->dtype;
	if (kind == TENSOR_RAND_UNIFORM)
		FOR_EACH_INDEX(dst, uniform_value(dt, seed, idx, a, b));
	else
		FOR_EACH_INDEX(dst, a + b * random_normal(seed, idx));
	return TENSOR_OK;
}
