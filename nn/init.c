/* Parameter initialisers: seeded fills of float tensors (PyTorch's rules). */
#include <math.h>

#include "nn.h"

static int fans(const char *op, const struct tensor *t, double *fan_in, double *fan_out)
{
	if (tensor_check_float(op, t) < 0)
		return TENSOR_ERR_DTYPE;
	if (t->ndim < 2) {
		char b[128];
		return tensor_error(TENSOR_ERR_SHAPE, "%s: needs a weight of >= 2 dims, got %s", op,
				    tensor_shape_str(t, b, sizeof b));
	}
	double receptive = 1;
	for (int i = 2; i < t->ndim; i++)
		receptive *= (double)t->shape[i];
	*fan_in = (double)t->shape[1] * receptive;
	*fan_out = (double)t->shape[0] * receptive;
	if (*fan_in == 0 || *fan_out == 0)
		return tensor_error(TENSOR_ERR_SHAPE, "%s: empty weight", op);
	return TENSOR_OK;
}

int nn_init_normal(struct tensor *t, double mean, double std, uint64_t seed)
{
	return tensor_normal_(t, seed, mean, std);
}

int nn_init_uniform(struct tensor *t, double lo, double hi, uint64_t seed)
{
	return tensor_uniform_(t, seed, lo, hi);
}

int nn_init_zeros(struct tensor *t)
{
	return tensor_fill_(t, 0.0);
}

int nn_init_ones(struct tensor *t)
{
	return tensor_fill_(t, 1.0);
}

int nn_init_xavier_uniform(struct tensor *t, double gain, uint64_t seed)
{
	double fi, fo;
	int rc = fans("nn_init_xavier_uniform", t, &fi, &fo);
	double a = gain * sqrt(6.0 / (fi + fo));
	return rc < 0 ? rc : tensor_uniform_(t, seed, -a, a);
}

int nn_init_xavier_normal(struct tensor *t, double gain, uint64_t seed)
{
	double fi, fo;
	int rc = fans("nn_init_xavier_normal", t, &fi, &fo);
	return rc < 0 ? rc : tensor_normal_(t, seed, 0.0, gain * sqrt(2.0 / (fi + fo)));
}

int nn_init_kaiming_uniform(struct tensor *t, double a, bool fan_in_mode, uint64_t seed)
{
	double fi, fo;
	int rc = fans("nn_init_kaiming_uniform", t, &fi, &fo);
	double gain = sqrt(2.0 / (1.0 + a * a)), bound = gain * sqrt(3.0 / (fan_in_mode ? fi : fo));
	return rc < 0 ? rc : tensor_uniform_(t, seed, -bound, bound);
}

int nn_init_kaiming_normal(struct tensor *t, double a, bool fan_in_mode, uint64_t seed)
{
	double fi, fo;
	int rc = fans("nn_init_kaiming_normal", t, &fi, &fo);
	double gain = sqrt(2.0 / (1.0 + a * a));
	return rc < 0 ? rc : tensor_normal_(t, seed, 0.0, gain / sqrt(fan_in_mode ? fi : fo));
}
