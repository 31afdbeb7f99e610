/* What a model will cost before it is built: its config read from a checkpoint and checked
 * against the file's tensors (nothing allocated on the config's word alone), and the peak
 * memory of running it. */
#include <stdlib.h>
#include <string.h>

#include "models.h"

/* ---- a config checked against a checkpoint ------------------------------------------ */

/* The file's tensor name must have the shape [a, b]; else an error naming the fields. */
static int check_matrix(const char *path, const struct nn_checkpoint_info *info, const char *name,
			int64_t a, const char *fa, int64_t b, const char *fb)
{
	const struct nn_checkpoint_tensor *t = nn_checkpoint_info_find(info, name);
	if (!t)
		return tensor_error(TENSOR_ERR_ARG,
				    "%s: its config needs a tensor %s the file lacks", path, name);
	if (t->ndim == 2 && t->shape[0] == a && t->shape[1] == b)
		return TENSOR_OK;
	bool first = t->ndim != 2 || t->shape[0] != a;
	char got[128];
	struct tensor view = { .ndim = t->ndim };
	memcpy(view.shape, t->shape, sizeof view.shape);
	return tensor_error(TENSOR_ERR_ARG,
			    "%s: its config's %s %lld does not match its tensors (%s is %s)", path,
			    first ? fa : fb, (long long)(first ? a : b), name,
			    tensor_shape_str(&view, got, sizeof got));
}

/* The number of encoder layers the file's tensor names show ("layers.<i>."). */
static int64_t file_layers(const struct nn_checkpoint_info *info)
{
	int64_t n = 0;
	for (int i = 0; i < info->n; i++) {
		const char *s = info->tensors[i].name;
		if (strncmp(s, "layers.", 7))
			continue;
		char *end;
		long long l = strtoll(s + 7, &end, 10);
		if (end != s + 7 && *end == '.' && l >= n)
			n = l + 1;
	}
	return n;
}

int model_config_check_checkpoint(const struct model_config *cfg, const char *path,
				  const struct nn_checkpoint_info *info)
{
	if (!cfg || !info)
		return tensor_error(TENSOR_ERR_ARG, "model_config_check_checkpoint: %s is NULL",
				    cfg ? "info" : "config");
	struct model_config c = *cfg;
	if (model_config_resolve(&c) < 0)
		return tensor_last_status();
	int rc = check_matrix(path, info, "embed.weight", c.vocab_size, "vocab_size", c.dim, "dim");
	if (rc == TENSOR_OK && c.positions == MODEL_POS_LEARNED)
		rc = check_matrix(path, info, "pos.weight", c.max_len, "max_len", c.dim, "dim");
	int64_t layers = rc == TENSOR_OK ? file_layers(info) : 0;
	if (rc == TENSOR_OK && layers != c.layers)
		rc = tensor_error(
		    TENSOR_ERR_ARG,
		    "%s: its config's layers %lld does not match its tensors (layers.0 "
		    "to layers.%lld)",
		    path, (long long)c.layers, (long long)layers - 1);
	if (rc < 0)
		return rc;
	/* the whole count: a classifier, an MLM model, or both heads */
	int64_t want[4];
	for (int k = 0; k < 4; k++) {
		want[k] = model_param_count(&c, k & 1, k & 2);
		if (want[k] == info->numel)
			return TENSOR_OK;
	}
	return tensor_error(
	    TENSOR_ERR_ARG,
	    "%s: its config gives %lld parameters with a classifier head (%lld with "
	    "an MLM head), but the file holds %lld: a field of the config (dim "
	    "%lld, heads %lld, ff_hidden %lld, k %lld, ...) does not describe its "
	    "tensors",
	    path, (long long)want[1], (long long)want[2], (long long)info->numel, (long long)c.dim,
	    (long long)c.heads, (long long)c.ff_hidden, (long long)c.k_first);
}

int model_config_from_checkpoint(const char *path, struct model_config *c)
{
	char *json = nn_checkpoint_config(path);
	if (!json)
		return tensor_last_status();
	int rc = model_config_from_json(c, json);
	free(json);
	if (rc < 0) {
		char msg[512];
		snprintf(msg, sizeof msg, "%s", tensor_last_error());
		tensor_clear_error();
		return tensor_error(rc, "%s: its config is not a model config: %s", path, msg);
	}
	struct nn_checkpoint_info info;
	rc = nn_checkpoint_info(path, &info);
	if (rc == TENSOR_OK)
		rc = model_config_check_checkpoint(c, path, &info);
	nn_checkpoint_info_free(&info);
	return rc;
}

/* ---- the memory of a run ------------------------------------------------------------- */

double model_estimate_bytes(const struct model_config *cfg, int64_t batch, bool training, bool mlm)
{
	struct model_config c = *cfg;
	if (model_config_resolve(&c) < 0 || batch < 1)
		return -1;
	double params = (double)model_param_count(&c, !mlm, mlm);
	double n = (double)c.max_len, d = (double)c.dim, f = (double)c.ff_hidden;
	double h = (double)c.heads, b = (double)batch, es = 4; /* f32 */
	/* the sinusoidal table, when positions are not learned */
	double fixed = c.positions == MODEL_POS_SINUSOIDAL ? n * d : 0;
	if (mlm) /* the decoder's logits over the vocabulary, at most every position */
		fixed += b * n * (double)c.vocab_size * (training ? 2 : 1);
	if (training) {
		/* weights, gradients and AdamW's two moments; per layer what the tape saves:
		 * about 20 [n, dim] and 4 [n, ff] tensors and per head 3 score-sized ones
		 * ([n, n] or [n, k]) (calibrated on bench/train_throughput's peaks) */
		double act = 0;
		for (int64_t i = 0; i < c.layers; i++) {
			double s = c.attention[i] == NN_ATTN_STANDARD ? n : (double)c.k[i];
			act += n * (20 * d + 4 * f) + 3 * h * n * s;
		}
		return es * (4 * params + b * act + fixed);
	}
	/* inference runs one layer at a time: its working set, all heads' scores at once
	 * (an upper bound when a run computes heads one by one) */
	double scores = 0;
	for (int64_t i = 0; i < c.layers; i++) {
		double s = c.attention[i] == NN_ATTN_STANDARD ? n : (double)c.k[i];
		double one = h * n * s * 2;
		scores = one > scores ? one : scores;
	}
	return es * (params + b * (n * (18 * d + 3 * f) + scores) + fixed);
}
