/* CPU copy (with dtype conversion), fill, arange, random fills and dropout. */
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
	FOR_EACH_INDEX(dst, value);
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

/* ---- dropout -------------------------------------------------------------- */

enum { LANES = 16, DROPOUT_CHUNK = 1 << 16 };

/* bits[l] = random_uniform(seed, i0 + l) * 2^53 for l < LANES: random.h's
 * Philox run on LANES counters side by side, so that the rounds vectorize. */
static inline __attribute__((always_inline)) void uniform_bits(uint64_t seed, uint64_t i0,
							       uint64_t *bits)
{
	uint32_t c0[LANES], c1[LANES], c2[LANES], c3[LANES];
	for (int l = 0; l < LANES; l++) {
		c0[l] = (uint32_t)(i0 + (uint64_t)l);
		c1[l] = (uint32_t)((i0 + (uint64_t)l) >> 32);
		c2[l] = c3[l] = 0;
	}
	uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
	for (int r = 0; r < PHILOX_ROUNDS; r++) {
#pragma omp simd
		for (int l = 0; l < LANES; l++)
			philox_round(&c0[l], &c1[l], &c2[l], &c3[l], k0, k1);
		k0 += PHILOX_KEY_STEP0;
		k1 += PHILOX_KEY_STEP1;
	}
	for (int l = 0; l < LANES; l++)
		bits[l] = philox_bits53(c0[l], c1[l]);
}

/* y[i] = x[i] * (uniform(seed, first + i) >= p ? scale : 0) for i < n, with
 * keep <=> bits >= thresh = ceil(p 2^53). y may be x. */
#define DEFINE_DROPOUT(T)                                                                    \
	CPU_WIDE_CLONES static void dropout_##T(T *y, const T *x, int64_t n, uint64_t first, \
						uint64_t seed, uint64_t thresh, T scale)     \
	{                                                                                    \
		for (int64_t s = 0; s < n; s += LANES) {                                     \
			uint64_t bits[LANES];                                                \
			uniform_bits(seed, first + (uint64_t)s, bits);                       \
			T f[LANES]; /* branch-free: the keep bit as a number */              \
			for (int l = 0; l < LANES; l++)                                      \
				f[l] = (T)(bits[l] >= thresh) * scale;                       \
			int64_t m = n - s < LANES ? n - s : LANES;                           \
			for (int64_t l = 0; l < m; l++)                                      \
				y[s + l] = x[s + l] * f[l];                                  \
		}                                                                            \
	}
DEFINE_DROPOUT(float)
DEFINE_DROPOUT(double)

int cpu_dropout(struct tensor *out, const struct tensor *x, double p, uint64_t seed)
{
	int64_t n = tensor_numel(out), chunks = (n + DROPOUT_CHUNK - 1) / DROPOUT_CHUNK;
	uint64_t thresh = (uint64_t)ceil(p * 9007199254740992.0);
	double scale = 1.0 / (1.0 - p);
	bool f32 = out->dtype == TENSOR_F32;
	char *po = tensor_data(out);
	const char *px = tensor_data(x);
	size_t es = f32 ? sizeof(float) : sizeof(double);
#pragma omp parallel for num_threads(cpu_num_threads()) if (chunks > 1)
	for (int64_t c = 0; c < chunks; c++) {
		int64_t s = c * DROPOUT_CHUNK, m = n - s < DROPOUT_CHUNK ? n - s : DROPOUT_CHUNK;
		void *y = po + (size_t)s * es;
		const void *xs = px + (size_t)s * es;
		if (f32)
			dropout_float(y, xs, m, (uint64_t)s, seed, thresh, (float)scale);
		else
			dropout_double(y, xs, m, (uint64_t)s, seed, thresh, scale);
	}
	return TENSOR_OK;
}
