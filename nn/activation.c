/* Activations by name: relu, gelu (erf), gelu_tanh, silu (swish). */
#include <string.h>

#include "nn_internal.h"

static const char *const names[NN_NACTIVATIONS] = {
	[NN_RELU] = "relu",
	[NN_GELU] = "gelu",
	[NN_GELU_TANH] = "gelu_tanh",
	[NN_SILU] = "silu",
};

int nn_activation_parse(const char *name)
{
	if (!name)
		return -1;
	if (strcmp(name, "swish") == 0)
		return NN_SILU;
	for (int a = 0; a < NN_NACTIVATIONS; a++)
		if (strcmp(name, names[a]) == 0)
			return a;
	return -1;
}

/* "unknown" for a value outside the enum, so it is always printable. */
const char *nn_activation_name(enum nn_activation a)
{
	return (unsigned)a < NN_NACTIVATIONS ? names[a] : "unknown";
}

struct tensor *nn_activation_forward(enum nn_activation a, struct tensor *x)
{
	if (nn_require_scope("nn_activation_forward") < 0 || !x)
		return NULL;
	switch (a) {
	case NN_RELU: return ag_relu(x);
	case NN_GELU: return ag_gelu(x);
	case NN_GELU_TANH: return ag_gelu_tanh(x);
	case NN_SILU: return ag_silu(x);
	default:
		tensor_error(TENSOR_ERR_ARG, "nn_activation_forward: unknown activation %d",
			     (int)a);
		return NULL;
	}
}
