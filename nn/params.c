/* The parameter list: registration under hierarchical names, flat packing,
 * zero_grad, train/eval mode and the seeds of initialisers and dropout. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"
#include "mem.h"

/* 64-bit FNV-1a of a string, mixed with a seed (splitmix64 finaliser). */
static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t hash_name(uint64_t seed, const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return mix(h ^ mix(seed));
}

int nn_params_init(struct nn_params *ps, enum tensor_dtype dtype, enum tensor_device device,
		   uint64_t seed)
{
	if (!ps)
		return tensor_error(TENSOR_ERR_ARG, "nn_params_init: ps is NULL");
	if (dtype != TENSOR_F32 && dtype != TENSOR_F64)
		return tensor_error(TENSOR_ERR_DTYPE,
				    "nn_params_init: parameters must be f32 or "
				    "f64, got %s",
				    tensor_dtype_name(dtype));
	*ps =
	    (struct nn_params){ .dtype = dtype, .device = device, .seed = seed, .training = true };
	return TENSOR_OK;
}

void nn_params_free(struct nn_params *ps)
{
	if (!ps)
		return;
	ag_tape_reset();
	for (int i = 0; i < ps->n; i++)
		tensor_free(ps->items[i].value); /* and its gradient */
	free(ps->items);
	for (int i = 0; i < ps->nkept; i++)
		tensor_free(ps->kept[i]);
	free(ps->kept);
	tensor_free(ps->flat);
	tensor_free(ps->flat_grad);
	tensor_free(ps->flat_lowp);
	free(ps->flat_order);
	*ps = (struct nn_params){ 0 };
}

int nn_params_keep(struct nn_params *ps, struct tensor *t)
{
	if (!ps || !t)
		return tensor_error(TENSOR_ERR_ARG, "nn_params_keep: %s is NULL",
				    ps ? "the tensor" : "ps");
	if (t->in_arena)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_params_keep: the tensor was made in a scope, which frees "
				    "it (make it under tensor_heap_begin)");
	if (ps->nkept == ps->kept_cap) {
		int cap = ps->kept_cap ? 2 * ps->kept_cap : 4;
		struct tensor **grown = tensor_host_realloc(ps->kept, sizeof *grown * (size_t)cap);
		if (!grown)
			return tensor_error(TENSOR_ERR_NOMEM, "nn_params_keep: no memory");
		ps->kept = grown;
		ps->kept_cap = cap;
	}
	ps->kept[ps->nkept++] = t;
	return TENSOR_OK;
}

char *nn_name(char *buf, const char *prefix, const char *suffix)
{
	int n = prefix && *prefix ? snprintf(buf, NN_NAME_MAX, "%s.%s", prefix, suffix)
				  : snprintf(buf, NN_NAME_MAX, "%s", suffix);
	if (n < 0 || n >= NN_NAME_MAX) {
		tensor_error(TENSOR_ERR_ARG, "nn: parameter name '%s.%s' is longer than %d chars",
			     prefix ? prefix : "", suffix, NN_NAME_MAX - 1);
		return NULL;
	}
	return buf;
}

char *nn_namef(char *buf, const char *prefix, const char *fmt, ...)
{
	char suffix[NN_NAME_MAX];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(suffix, sizeof suffix, fmt, ap);
	va_end(ap);
	if (n < 0 || n >= NN_NAME_MAX) {
		tensor_error(TENSOR_ERR_ARG, "nn: name suffix longer than %d chars",
			     NN_NAME_MAX - 1);
		return NULL;
	}
	return nn_name(buf, prefix, suffix);
}

struct nn_param *nn_params_find(const struct nn_params *ps, const char *name)
{
	for (int i = 0; ps && name && i < ps->n; i++)
		if (strcmp(ps->items[i].name, name) == 0)
			return &ps->items[i];
	return NULL;
}

uint64_t nn_param_seed(const struct nn_params *ps, const char *name)
{
	return hash_name(ps ? ps->seed : 0, name ? name : "");
}

struct tensor *nn_param_new(struct nn_params *ps, const char *name, int ndim, const int64_t *shape,
			    bool no_decay)
{
	if (!ps || !name || !*name || strlen(name) >= NN_NAME_MAX) {
		tensor_error(TENSOR_ERR_ARG, "nn_param_new: need a name of 1..%d chars",
			     NN_NAME_MAX - 1);
		return NULL;
	}
	if (ps->flat) {
		tensor_error(TENSOR_ERR_STATE, "nn_param_new: '%s' added after nn_params_pack",
			     name);
		return NULL;
	}
	if (nn_params_find(ps, name)) {
		tensor_error(TENSOR_ERR_ARG, "nn_param_new: parameter '%s' already exists", name);
		return NULL;
	}
	if (ps->n == ps->cap) {
		int cap = ps->cap ? 2 * ps->cap : 16;
		struct nn_param *items =
		    tensor_host_realloc(ps->items, sizeof *items * (size_t)cap);
		if (!items) {
			tensor_error(TENSOR_ERR_NOMEM, "nn_param_new: cannot grow the list");
			return NULL;
		}
		ps->items = items;
		ps->cap = cap;
	}
	tensor_heap_begin(); /* parameters outlive every scope */
	struct tensor *t = tensor_zeros(ps->dtype, ps->device, ndim, shape);
	tensor_heap_end();
	if (!t)
		return NULL;
	ag_requires_grad(t, true);
	struct nn_param *p = &ps->items[ps->n++];
	snprintf(p->name, sizeof p->name, "%s", name);
	p->value = t;
	p->no_decay = no_decay;
	p->lazy_rows = false;
	return t;
}

int nn_params_set_lazy(struct nn_params *ps, const char *prefix, bool lazy)
{
	if (!ps)
		return tensor_error(TENSOR_ERR_ARG, "nn_params_set_lazy: ps is NULL");
	size_t len = prefix ? strlen(prefix) : 0;
	int matched = 0;
	for (int i = 0; i < ps->n; i++)
		if (strncmp(ps->items[i].name, prefix ? prefix : "", len) == 0) {
			ps->items[i].lazy_rows = lazy;
			matched++;
		}
	if (!matched)
		return tensor_error(TENSOR_ERR_ARG,
				    "nn_params_set_lazy: no parameter name starts with '%s'",
				    prefix ? prefix : "");
	return matched;
}

int64_t nn_params_count(const struct nn_params *ps)
{
	int64_t n = 0;
	for (int i = 0; ps && i < ps->n; i++)
		n += tensor_numel(ps->items[i].value);
	return n;
}

/* A parameter's group in the flat buffer: with weight decay, without, lazy. */
static int flat_group(const struct nn_param *p)
{
	return p->lazy_rows ? 2 : p->no_decay ? 1 : 0;
}

int nn_params_pack(struct nn_params *ps)
{
	if (!ps)
		return tensor_error(TENSOR_ERR_ARG, "nn_params_pack: ps is NULL");
	if (ps->flat)
		return TENSOR_OK;
	int *order = tensor_host_malloc(sizeof *order * (size_t)(ps->n ? ps->n : 1));
	if (!order)
		return tensor_error(TENSOR_ERR_NOMEM, "nn_params_pack: the order of %d parameters",
				    ps->n);
	int nord = 0;
	for (int g = 0; g < 3; g++)
		for (int i = 0; i < ps->n; i++)
			if (flat_group(&ps->items[i]) == g)
				order[nord++] = i;
	int64_t total = nn_params_count(ps);
	tensor_heap_begin(); /* the buffers and views outlive every scope */
	struct tensor *flat = tensor_empty(ps->dtype, ps->device, 1, &total);
	struct tensor *grad = tensor_zeros(ps->dtype, ps->device, 1, &total);
	int rc = flat && grad ? TENSOR_OK : tensor_last_status();
	int64_t off = 0;
	for (int k = 0; rc == TENSOR_OK && k < ps->n; k++) {
		struct tensor *t = ps->items[order[k]].value;
		rc = tensor_rebase_(t, flat, off);
		struct tensor *slice =
		    rc == TENSOR_OK ? tensor_narrow(grad, 0, off, tensor_numel(t)) : NULL;
		struct tensor *g = tensor_view(slice, t->ndim, t->shape);
		tensor_free(slice);
		if (g && t->grad)
			rc = tensor_copy_(g, t->grad);
		if (g) {
			tensor_free(t->grad);
			t->grad = g;
		} else if (rc == TENSOR_OK) {
			rc = tensor_last_status();
		}
		off += tensor_numel(t);
	}
	tensor_heap_end();
	if (rc < 0) { /* parameters already moved stay valid views of flat */
		tensor_free(flat);
		tensor_free(grad);
		free(order);
		return rc;
	}
	ps->flat = flat;
	ps->flat_grad = grad;
	ps->flat_order = order;
	tensor_mem_trim(); /* the blocks of the parameters' first storage */
	return TENSOR_OK;
}

int nn_params_autocast_begin(struct nn_params *ps, enum tensor_dtype dt)
{
	if (!ps)
		return tensor_error(TENSOR_ERR_ARG, "nn_params_autocast_begin: ps is NULL");
	int rc = ag_autocast_begin(dt);
	if (rc < 0 || dt != TENSOR_BF16 || !ps->flat || ps->flat->dtype != TENSOR_F32)
		return rc;
	if (!ps->flat_lowp) {
		int64_t n = tensor_numel(ps->flat);
		tensor_heap_begin(); /* kept for the next steps */
		ps->flat_lowp = tensor_empty(TENSOR_BF16, ps->device, 1, &n);
		tensor_heap_end();
	}
	rc = ps->flat_lowp ? tensor_copy_(ps->flat_lowp, ps->flat) : tensor_last_status();
	if (rc == TENSOR_OK)
		rc = ag_autocast_storage(ps->flat, ps->flat_lowp);
	if (rc < 0)
		ag_autocast_end();
	return rc;
}

int nn_params_zero_grad(struct nn_params *ps)
{
	if (!ps)
		return tensor_error(TENSOR_ERR_ARG, "nn_params_zero_grad: ps is NULL");
	if (ps->flat_grad)
		return tensor_fill_(ps->flat_grad, 0.0);
	for (int i = 0; i < ps->n; i++) {
		int rc = ag_zero_grad(ps->items[i].value);
		if (rc < 0)
			return rc;
	}
	return TENSOR_OK;
}

void nn_params_train(struct nn_params *ps, bool training)
{
	if (ps)
		ps->training = training;
}

uint64_t nn_params_next_seed(struct nn_params *ps)
{
	return mix(mix(ps->seed) ^ ps->rng_counter++);
}
