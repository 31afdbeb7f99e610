/* The GEMM profile: wall time of every gemm slot call, summed by product shape, layout
 * and dtypes while a profile runs (tensor_gemm_profile_start). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "mem.h"

static pthread_mutex_t profile_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool profile_on;
static struct tensor_gemm_stat *profile_rows;
static int profile_count, profile_cap;
static int64_t profile_lost; /* calls not recorded: no memory for a new row */

bool gemm_profile_running(void)
{
	return atomic_load_explicit(&profile_on, memory_order_relaxed);
}

double gemm_profile_clock(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static bool same_product(const struct tensor_gemm_stat *x, const struct tensor_gemm_stat *y)
{
	return x->device == y->device && x->a_dtype == y->a_dtype && x->b_dtype == y->b_dtype &&
	       x->c_dtype == y->c_dtype && x->batch == y->batch && x->m == y->m && x->n == y->n &&
	       x->k == y->k && !strcmp(x->layout, y->layout) && x->accumulate == y->accumulate;
}

/* The table's row of call, a new one (zero calls) if it has none, or NULL when there is
 * no memory for it. Under profile_lock. */
static struct tensor_gemm_stat *row_of(const struct tensor_gemm_stat *call)
{
	for (int i = 0; i < profile_count; i++)
		if (same_product(&profile_rows[i], call))
			return &profile_rows[i];
	if (profile_count == profile_cap) {
		int cap = profile_cap ? 2 * profile_cap : 64;
		struct tensor_gemm_stat *r =
		    tensor_host_realloc(profile_rows, (size_t)cap * sizeof *r);
		if (!r)
			return NULL;
		profile_rows = r;
		profile_cap = cap;
	}
	struct tensor_gemm_stat *r = &profile_rows[profile_count++];
	*r = *call;
	r->calls = 0;
	r->seconds = r->gflop = 0;
	return r;
}

void gemm_profile_record(const struct tensor_gemm_stat *call, double seconds)
{
	pthread_mutex_lock(&profile_lock);
	struct tensor_gemm_stat *r = atomic_load(&profile_on) ? row_of(call) : NULL;
	if (r) {
		r->calls++;
		r->seconds += seconds;
		r->gflop += 2e-9 * (double)call->batch * (double)call->m * (double)call->n *
			    (double)call->k;
	} else if (atomic_load(&profile_on)) {
		profile_lost++; /* no memory for its row */
	}
	pthread_mutex_unlock(&profile_lock);
}

int tensor_gemm_profile_start(void)
{
	pthread_mutex_lock(&profile_lock);
	profile_count = 0;
	profile_lost = 0;
	atomic_store(&profile_on, true);
	pthread_mutex_unlock(&profile_lock);
	return TENSOR_OK;
}

int tensor_gemm_profile_stop(void)
{
	pthread_mutex_lock(&profile_lock);
	atomic_store(&profile_on, false);
	free(profile_rows);
	profile_rows = NULL;
	profile_count = profile_cap = 0;
	profile_lost = 0;
	pthread_mutex_unlock(&profile_lock);
	return TENSOR_OK;
}

static int by_time(const void *x, const void *y)
{
	double a = ((const struct tensor_gemm_stat *)x)->seconds,
	       b = ((const struct tensor_gemm_stat *)y)->seconds;
	return (a < b) - (a > b);
}

int tensor_gemm_profile_read(struct tensor_gemm_stat *rows, int max, int *count)
{
	if (!count || max < 0 || (max > 0 && !rows))
		return tensor_error(TENSOR_ERR_ARG,
				    "tensor_gemm_profile_read: expected count, max >= 0 and rows "
				    "for max > 0, got count %s, max %d, rows %s",
				    count ? "set" : "NULL", max, rows ? "set" : "NULL");
	pthread_mutex_lock(&profile_lock);
	if (profile_count > 1)
		qsort(profile_rows, (size_t)profile_count, sizeof *profile_rows, by_time);
	int n = profile_count < max ? profile_count : max;
	if (n > 0)
		memcpy(rows, profile_rows, (size_t)n * sizeof *rows);
	*count = profile_count;
	int64_t lost = profile_lost;
	pthread_mutex_unlock(&profile_lock);
	if (lost)
		return tensor_error(TENSOR_ERR_NOMEM,
				    "tensor_gemm_profile_read: %lld calls were not recorded (no "
				    "memory for their rows); the rows read are the others",
				    (long long)lost);
	return TENSOR_OK;
}
