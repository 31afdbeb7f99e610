/* Losses and metrics: cross-entropy from logits (ignore index, label
 * smoothing), multi-class and binary accuracy. */
#include <math.h>
#include <stdlib.h>

#include "nn_internal.h"
#include "ag_internal.h"
#include "mem.h"

/* The n values of a 1-d integer tensor (any device, any strides) as a
 * malloc'd int64 array, or NULL with an error. */
static int64_t *host_ids(const char *op, const struct tensor *t)
{
	int64_t n = tensor_numel(t);
	int64_t *v = tensor_host_malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
	if (!v) {
		tensor_error(TENSOR_ERR_NOMEM, "%s: cannot allocate %lld targets", op,
			     (long long)n);
		return NULL;
	}
	struct tensor *c =
	    t->dtype == TENSOR_I64 ? tensor_contiguous(t) : tensor_cast(t, TENSOR_I64);
	int rc = c ? tensor_to_host(c, v, sizeof *v * (size_t)n) : tensor_last_status();
	tensor_free(c);
	if (rc < 0) {
		free(v);
		return NULL;
	}
	return v;
}

/* logits [N, C] float and targets [N] i32/i64 on the same device. */
static int check_class_args(const char *op, const struct tensor *logits,
			    const struct tensor *targets)
{
	char bl[128], bt[128];
	if (!logits || !targets)
		return tensor_error(TENSOR_ERR_ARG, "%s: %s is NULL", op,
				    logits ? "targets" : "logits");
	int rc = tensor_check_float(op, logits);
	if (rc < 0)
		return rc;
	if (targets->dtype != TENSOR_I32 && targets->dtype != TENSOR_I64)
		return tensor_error(TENSOR_ERR_DTYPE, "%s: targets must be i32 or i64, got %s", op,
				    tensor_dtype_name(targets->dtype));
	if (logits->ndim != 2 || targets->ndim != 1 || targets->shape[0] != logits->shape[0])
		return tensor_error(TENSOR_ERR_SHAPE,
				    "%s: logits %s and targets %s, expected [N, C] and [N]", op,
				    tensor_shape_str(logits, bl, sizeof bl),
				    tensor_shape_str(targets, bt, sizeof bt));
	if (logits->storage->device != targets->storage->device)
		return tensor_error(TENSOR_ERR_DEVICE, "%s: logits on %s, targets on %s", op,
				    tensor_device_name(logits->storage->device),
				    tensor_device_name(targets->storage->device));
	return TENSOR_OK;
}

/* Compact the rows whose target is not ignored: rows[k] and tgt[k] for
 * k < *count (both arrays hold N entries; tgt may alias ids). */
static int select_rows(const char *op, const int64_t *ids, int64_t n, int64_t classes,
		       int64_t ignore_index, int64_t *rows, int64_t *tgt, int64_t *count)
{
	int64_t k = 0;
	for (int64_t i = 0; i < n; i++) {
		int64_t t = ids[i];
		if (t == ignore_index)
			continue;
		if (t < 0 || t >= classes)
			return tensor_error(TENSOR_ERR_ARG,
					    "%s: target %lld at row %lld is out of range [0, %lld)",
					    op, (long long)t, (long long)i, (long long)classes);
		rows[k] = i;
		tgt[k++] = t;
	}
	*count = k;
	return TENSOR_OK;
}

/* The loss of nn_cross_entropy without reading the targets on the host (a
 * device's step then waits for nothing): every row goes through the softmax,
 * ignored rows are masked out of the sums (a NaN in an ignored row's logits
 * does reach its gradient here), and a target out of range is reported by
 * the next synchronisation. */
static struct tensor *cross_entropy_masked(struct tensor *logits, const struct tensor *targets,
					   int64_t ignore_index, double label_smoothing)
{
	static const char op[] = "nn_cross_entropy";
	enum tensor_device dev = logits->storage->device;
	int64_t n_rows = logits->shape[0], classes = logits->shape[1];
	enum tensor_dtype dt = logits->dtype;
	tensor_scope_begin();
	struct tensor *t = tensor_view(tensor_cast(targets, TENSOR_I64), 2,
				       (int64_t[]){ n_rows, 1 });
	struct tensor *keep = tensor_ne(t, tensor_full(TENSOR_I64, dev, 0, NULL, ignore_index));
	struct tensor *zero_i = tensor_zeros(TENSOR_I64, dev, 0, NULL);
	struct tensor *safe = tensor_where(keep, t, zero_i);
	/* kept rows, at least 1 (0 rows kept: a loss of 0) */
	struct tensor *count = tensor_maximum(tensor_sum(tensor_cast(keep, dt), 0, NULL, false),
					      tensor_ones(dt, dev, 0, NULL));
	if (!safe || !count || tensor_check_index(op, safe, 1, classes) < 0) {
		tensor_scope_end();
		return NULL;
	}
	/* the masks and the count outlive the scope: the graph holds them */
	keep = tensor_scope_keep(keep);
	safe = tensor_scope_keep(safe);
	count = tensor_scope_keep(count);
	tensor_scope_end();
	struct tensor *zero = tensor_zeros(dt, dev, 0, NULL);
	struct tensor *lp = ag_log_softmax(logits, 1);
	struct tensor *picked = ag_where(keep, ag_gather(lp, 1, safe), zero);
	struct tensor *mean = ag_div(ag_sum(picked, 0, NULL, false), count);
	struct tensor *loss = ag_mul_scalar(mean, -(1 - label_smoothing));
	if (label_smoothing > 0) {
		struct tensor *rows = ag_where(keep, ag_sum(lp, 1, (int[]){ 1 }, true), zero);
		struct tensor *smean = ag_div(ag_sum(rows, 0, NULL, false), count);
		loss = ag_add(loss, ag_mul_scalar(smean, -label_smoothing / (double)classes));
	}
	return loss;
}

/* loss = (1 - eps) mean_i(-lp[i, t_i]) + eps mean_i mean_c(-lp[i, c]) over
 * the n kept rows, lp = log_softmax(logits). On the CPU, ignored rows are
 * dropped before the softmax, so they cost nothing and cannot leak NaN into
 * the gradient; on other devices the rows are masked instead
 * (cross_entropy_masked). */
struct tensor *nn_cross_entropy(struct tensor *logits, const struct tensor *targets,
				int64_t ignore_index, double label_smoothing)
{
	static const char op[] = "nn_cross_entropy";
	if (nn_require_scope(op) < 0 || check_class_args(op, logits, targets) < 0)
		return NULL;
	if (!(label_smoothing >= 0 && label_smoothing < 1)) {
		tensor_error(TENSOR_ERR_ARG, "%s: label_smoothing %g is not in [0, 1)", op,
			     label_smoothing);
		return NULL;
	}
	int64_t n_rows = logits->shape[0], classes = logits->shape[1], n = 0;
	enum tensor_device dev = logits->storage->device;
	if (dev != TENSOR_CPU)
		return cross_entropy_masked(logits, targets, ignore_index, label_smoothing);
	int64_t *ids = host_ids(op, targets);
	int64_t *rows =
	    ids ? tensor_host_malloc(sizeof *rows * (size_t)(n_rows > 0 ? n_rows : 1)) : NULL;
	if (ids && !rows)
		tensor_error(TENSOR_ERR_NOMEM, "%s: cannot allocate %lld row indices", op,
			     (long long)n_rows);
	if (!rows || select_rows(op, ids, n_rows, classes, ignore_index, rows, ids, &n) < 0) {
		free(ids);
		free(rows);
		return NULL;
	}
	if (n == 0) { /* every target ignored: 0, still connected to the graph */
		free(ids);
		free(rows);
		return ag_sum(ag_narrow(logits, 0, 0, 0), 0, NULL, false);
	}
	struct tensor *x =
	    n < n_rows ? ag_index_select(logits, 0, tensor_from_data(TENSOR_I64, dev, 1, &n, rows))
		       : logits;
	struct tensor *tgt_idx = tensor_from_data(TENSOR_I64, dev, 2, (int64_t[]){ n, 1 }, ids);
	free(ids);
	free(rows);
	struct tensor *lp = ag_log_softmax(x, 1);
	struct tensor *nll = ag_sum(ag_gather(lp, 1, tgt_idx), 0, NULL, false);
	struct tensor *loss = ag_mul_scalar(nll, -(1 - label_smoothing) / (double)n);
	if (label_smoothing > 0) {
		struct tensor *all = ag_sum(lp, 0, NULL, false);
		double w = -label_smoothing / ((double)n * (double)classes);
		loss = ag_add(loss, ag_mul_scalar(all, w));
	}
	return loss;
}

double nn_accuracy(const struct tensor *logits, const struct tensor *targets, int64_t ignore_index)
{
	static const char op[] = "nn_accuracy";
	AG_NO_GRAD_REGION; /* logits may come from a taped forward */
	int rc = check_class_args(op, logits, targets);
	if (rc < 0)
		return rc;
	int64_t n_rows = logits->shape[0], classes = logits->shape[1];
	if (n_rows > 0 && classes == 0)
		return tensor_error(TENSOR_ERR_SHAPE, "%s: logits have no classes", op);
	int64_t *ids = host_ids(op, targets);
	struct tensor *am = ids ? tensor_argmax(logits, 1, false) : NULL;
	int64_t *pred = am ? host_ids(op, am) : NULL;
	tensor_free(am);
	int64_t hits = 0, count = 0;
	rc = pred ? TENSOR_OK : tensor_last_status();
	for (int64_t i = 0; rc == TENSOR_OK && i < n_rows; i++) {
		if (ids[i] == ignore_index)
			continue;
		if (ids[i] < 0 || ids[i] >= classes)
			rc = tensor_error(TENSOR_ERR_ARG,
					  "%s: target %lld at row %lld is out of range [0, %lld)",
					  op, (long long)ids[i], (long long)i, (long long)classes);
		hits += pred[i] == ids[i];
		count++;
	}
	free(ids);
	free(pred);
	if (rc < 0)
		return rc;
	return count ? (double)hits / (double)count : NAN;
}

double nn_binary_accuracy(const struct tensor *logits, const struct tensor *targets)
{
	static const char op[] = "nn_binary_accuracy";
	AG_NO_GRAD_REGION;
	char bl[128], bt[128];
	if (!logits || !targets)
		return tensor_error(TENSOR_ERR_ARG, "%s: %s is NULL", op,
				    logits ? "targets" : "logits");
	int rc = tensor_check_float(op, logits);
	if (rc < 0)
		return rc;
	if (logits->ndim != 1 || !tensor_same_shape(logits, targets))
		return tensor_error(TENSOR_ERR_SHAPE,
				    "%s: logits %s and targets %s, expected [N] and [N]", op,
				    tensor_shape_str(logits, bl, sizeof bl),
				    tensor_shape_str(targets, bt, sizeof bt));
	if (logits->storage->device != targets->storage->device)
		return tensor_error(TENSOR_ERR_DEVICE, "%s: logits on %s, targets on %s", op,
				    tensor_device_name(logits->storage->device),
				    tensor_device_name(targets->storage->device));
	int64_t n = logits->shape[0];
	double *v = tensor_host_malloc(sizeof *v * (size_t)(2 * n + 1));
	if (!v)
		return tensor_error(TENSOR_ERR_NOMEM, "%s: cannot allocate %lld values", op,
				    (long long)n);
	/* Both as f64 on the host: exact for every f32 logit and integer target. */
	struct tensor *lc = tensor_cast(logits, TENSOR_F64);
	struct tensor *tc = lc ? tensor_cast(targets, TENSOR_F64) : NULL;
	rc = tc ? tensor_to_host(lc, v, sizeof *v * (size_t)n) : tensor_last_status();
	if (rc == TENSOR_OK)
		rc = tensor_to_host(tc, v + n, sizeof *v * (size_t)n);
	tensor_free(lc);
	tensor_free(tc);
	int64_t hits = 0;
	for (int64_t i = 0; rc == TENSOR_OK && i < n; i++) {
		double t = v[n + i];
		if (t != 0 && t != 1)
			rc = tensor_error(TENSOR_ERR_ARG, "%s: target %g at row %lld is not 0 or 1",
					  op, t, (long long)i);
		hits += (v[i] > 0) == (t == 1);
	}
	free(v);
	if (rc < 0)
		return rc;
	return n ? (double)hits / (double)n : NAN;
}
