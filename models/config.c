/* Model configuration: presets and per-layer patterns, validation and the k
 * schedule, JSON (de)serialisation, the parameter-count formulas and the
 * one-line summary. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "models.h"
#include "mem.h"

#define MAX_EXACT 9007199254740992.0 /* 2^53: larger JSON numbers are not exact */

static const char attn_letters[NN_NATTN + 1] = "SLCMXR"; /* by enum nn_attn_kind */
#define NSCHED (MODEL_K_LIST + 1)
static const char *const schedule_names[NSCHED] = { "constant", "linear", "list" };
static const char *const pooling_names[MODEL_NPOOL] = { "mean", "cls", "max", "attention" };
static const char *const position_names[MODEL_NPOS] = { "learned", "sinusoidal", "none" };

static int parse_name(const char *name, const char *const *names, int n)
{
	for (int i = 0; name && i < n; i++)
		if (strcmp(name, names[i]) == 0)
			return i;
	return -1;
}

int model_pooling_parse(const char *name)
{
	return parse_name(name, pooling_names, MODEL_NPOOL);
}

int model_positions_parse(const char *name)
{
	return parse_name(name, position_names, MODEL_NPOS);
}

const char *model_positions_name(enum model_positions p)
{
	return (unsigned)p < MODEL_NPOS ? position_names[p] : "unknown";
}

/* ---- presets -------------------------------------------------------------------- */

/* Layers of the Conv-Linformer preset that use learned linear projections:
 * the first half, rounded up. */
static int64_t conv_linformer_linear_layers(int64_t layers)
{
	return (layers + 1) / 2;
}

int model_config_preset(struct model_config *c, const char *preset, int64_t vocab_size,
			int64_t max_len)
{
	if (!c || !preset)
		return tensor_error(TENSOR_ERR_ARG,
				    "model_config_preset: config or preset is NULL");
	if (vocab_size < 1 || max_len < 1)
		return tensor_error(TENSOR_ERR_ARG,
				    "model_config_preset: vocab_size %lld and max_len %lld must be "
				    ">= 1",
				    (long long)vocab_size, (long long)max_len);
	/* "<name>:<layers>" sets the depth of a named preset */
	char name[32];
	int64_t depth = 4;
	const char *colon = strchr(preset, ':');
	if (colon) {
		char *end;
		errno = 0;
		long long l = strtoll(colon + 1, &end, 10);
		size_t len = (size_t)(colon - preset);
		if (len >= sizeof name || end == colon + 1 || *end || errno || l < 1 ||
		    l > MODEL_MAX_LAYERS)
			return tensor_error(TENSOR_ERR_ARG,
					    "model_config_preset: '%s': expected <preset>:<layers> "
					    "with layers in [1, %d]",
					    preset, MODEL_MAX_LAYERS);
		memcpy(name, preset, len);
		name[len] = 0;
		depth = l;
		preset = name;
	}
	struct model_config d;
	memset(&d, 0, sizeof d);
	d.vocab_size = vocab_size;
	d.max_len = max_len;
	d.dim = 256;
	d.heads = 4;
	d.layers = depth;
	d.ff_hidden = 1024;
	d.activation = NN_GELU;
	d.pre_norm = true;
	d.positions = MODEL_POS_LEARNED;
	d.final_norm = true;
	d.dropout = 0.1;
	d.attn_dropout = 0.1;
	d.pad_id = 0;
	d.k_schedule = MODEL_K_CONSTANT;
	d.k_first = d.k_last = max_len < 128 ? max_len : 128;
	d.sharing = NN_SHARE_HEADWISE;
	d.num_classes = 2;
	d.head_hidden = 256;
	d.pooling = MODEL_POOL_MEAN;
	d.tie_embeddings = true;
	/* Uniform presets fill every entry so that any depth set later is valid;
	 * Conv-Linformer and patterns depend on the depth, so entries past it are
	 * left invalid and model_config_resolve refuses a deeper model. */
	if (strcasecmp(preset, "transformer") == 0 || strcasecmp(preset, "linformer") == 0) {
		enum nn_attn_kind a =
		    strcasecmp(preset, "transformer") == 0 ? NN_ATTN_STANDARD : NN_ATTN_LINEAR;
		for (int i = 0; i < MODEL_MAX_LAYERS; i++)
			d.attention[i] = a;
	} else if (strcasecmp(preset, "conv-linformer") == 0) {
		for (int i = 0; i < MODEL_MAX_LAYERS; i++)
			d.attention[i] = i >= d.layers ? NN_NATTN
					 : i < conv_linformer_linear_layers(d.layers)
					     ? NN_ATTN_LINEAR
					     : NN_ATTN_CONV;
	} else {
		size_t len = colon ? 0 : strlen(preset); /* a pattern takes no depth */
		if (len == 0 || len > MODEL_MAX_LAYERS)
			return tensor_error(
			    TENSOR_ERR_ARG,
			    "model_config_preset: unknown preset '%s': expected "
			    "transformer, linformer, conv-linformer or a pattern of "
			    "1..%d letters S/L/C/M/X/R (a :<layers> suffix follows a "
			    "named preset only)",
			    preset, MODEL_MAX_LAYERS);
		for (size_t i = 0; i < len; i++) {
			int ch = toupper((unsigned char)preset[i]);
			const char *p = ch ? strchr(attn_letters, ch) : NULL;
			if (!p)
				return tensor_error(
				    TENSOR_ERR_ARG,
				    "model_config_preset: unknown preset '%s': '%c' is not one of "
				    "the pattern letters S/L/C/M/X/R (standard, linear, conv, "
				    "mean, max, random)",
				    preset, preset[i]);
			d.attention[i] = (enum nn_attn_kind)(p - attn_letters);
		}
		for (int i = (int)len; i < MODEL_MAX_LAYERS; i++)
			d.attention[i] = NN_NATTN;
		d.layers = (int64_t)len;
	}
	*c = d;
	return TENSOR_OK;
}

/* ---- validation and the k schedule ---------------------------------------------- */

static bool is_projected(enum nn_attn_kind a)
{
	return a != NN_ATTN_STANDARD;
}

static bool needs_divisor(enum nn_attn_kind a)
{
	return a == NN_ATTN_CONV || a == NN_ATTN_MEAN || a == NN_ATTN_MAX;
}

#define RESOLVE_ERR(...) tensor_error(TENSOR_ERR_ARG, "model_config_resolve: " __VA_ARGS__)

static int check_sizes(const struct model_config *c)
{
	if (c->vocab_size < 1 || c->max_len < 1 || c->dim < 1 || c->heads < 1 || c->ff_hidden < 1 ||
	    c->num_classes < 1 || c->head_hidden < 1)
		return RESOLVE_ERR("vocab_size %lld, max_len %lld, dim %lld, heads %lld, "
				   "ff_hidden %lld, num_classes %lld, head_hidden %lld must all "
				   "be >= 1",
				   (long long)c->vocab_size, (long long)c->max_len,
				   (long long)c->dim, (long long)c->heads, (long long)c->ff_hidden,
				   (long long)c->num_classes, (long long)c->head_hidden);
	if (c->layers < 1 || c->layers > MODEL_MAX_LAYERS)
		return RESOLVE_ERR("layers %lld not in [1, %d]", (long long)c->layers,
				   MODEL_MAX_LAYERS);
	if (c->dim % c->heads != 0)
		return RESOLVE_ERR("heads %lld must divide dim %lld", (long long)c->heads,
				   (long long)c->dim);
	if (c->pad_id < -1 || c->pad_id >= c->vocab_size)
		return RESOLVE_ERR("pad_id %lld not in [0, vocab_size %lld) or -1",
				   (long long)c->pad_id, (long long)c->vocab_size);
	if (c->position_kernel < 0 || (c->position_kernel > 0 && c->position_kernel % 2 == 0))
		return RESOLVE_ERR("position_kernel %lld must be 0 (none) or odd",
				   (long long)c->position_kernel);
	if (!(c->dropout >= 0 && c->dropout < 1) || !(c->attn_dropout >= 0 && c->attn_dropout < 1))
		return RESOLVE_ERR("dropout %g and attn_dropout %g must be in [0, 1)", c->dropout,
				   c->attn_dropout);
	if ((unsigned)c->activation >= NN_NACTIVATIONS)
		return RESOLVE_ERR("unknown activation %d", (int)c->activation);
	if ((unsigned)c->k_schedule >= NSCHED)
		return RESOLVE_ERR("unknown k_schedule %d", (int)c->k_schedule);
	if ((unsigned)c->sharing > NN_SHARE_LAYERWISE)
		return RESOLVE_ERR("unknown sharing %d", (int)c->sharing);
	if ((unsigned)c->pooling >= MODEL_NPOOL)
		return RESOLVE_ERR("unknown pooling %d", (int)c->pooling);
	if ((unsigned)c->positions >= MODEL_NPOS)
		return RESOLVE_ERR("unknown positions %d", (int)c->positions);
	for (int64_t i = 0; i < c->layers; i++)
		if ((unsigned)c->attention[i] >= NN_NATTN)
			return RESOLVE_ERR(
			    "layer %lld has no valid attention kind (%d): a conv-linformer "
			    "preset, a pattern or a resolved config fixes its depth; for "
			    "another depth start from \"conv-linformer:6\" or a pattern "
			    "such as \"LLLCCC\"",
			    (long long)i, (int)c->attention[i]);
	return TENSOR_OK;
}

/* k of layer i of L under the schedule: constant, or the linear decay from
 * k_first to k_last rounded half away from zero, or the given list. */
static int64_t scheduled_k(const struct model_config *c, int64_t i)
{
	switch (c->k_schedule) {
	case MODEL_K_CONSTANT: return c->k_first;
	case MODEL_K_LINEAR:
		if (c->layers == 1)
			return c->k_first;
		return (int64_t)llround((double)c->k_first +
					((double)c->k_last - (double)c->k_first) * (double)i /
					    (double)(c->layers - 1));
	default: return c->k[i];
	}
}

int model_config_resolve(struct model_config *c)
{
	if (!c)
		return tensor_error(TENSOR_ERR_ARG, "model_config_resolve: config is NULL");
	int rc = check_sizes(c);
	if (rc < 0)
		return rc;
	int64_t k[MODEL_MAX_LAYERS] = { 0 };
	int64_t first = -1; /* first projected layer */
	for (int64_t i = 0; i < c->layers; i++) {
		enum nn_attn_kind a = c->attention[i];
		if (!is_projected(a))
			continue;
		k[i] = scheduled_k(c, i);
		if (k[i] < 1 || k[i] > c->max_len)
			return RESOLVE_ERR("layer %lld (%s): k %lld not in [1, max_len %lld]",
					   (long long)i, nn_attn_kind_name(a), (long long)k[i],
					   (long long)c->max_len);
		if ((needs_divisor(a) || c->mask_empty_slots) && c->max_len % k[i] != 0)
			return RESOLVE_ERR("layer %lld (%s): max_len %lld is not divisible by k "
					   "%lld (kernel = stride = n/k, or the slots' windows "
					   "of mask_empty_slots, must be an integer)",
					   (long long)i, nn_attn_kind_name(a),
					   (long long)c->max_len, (long long)k[i]);
		if (first < 0) {
			first = i;
			continue;
		}
		if (c->sharing == NN_SHARE_LAYERWISE && a != c->attention[first])
			return RESOLVE_ERR("layerwise sharing needs one projection kind for every "
					   "projected layer: layer %lld is %s, layer %lld is %s",
					   (long long)i, nn_attn_kind_name(a), (long long)first,
					   nn_attn_kind_name(c->attention[first]));
		if (c->sharing == NN_SHARE_LAYERWISE && k[i] != k[first])
			return RESOLVE_ERR(
			    "layerwise sharing needs one k for every projected layer "
			    "(one projection serves them all): layer %lld has k %lld, "
			    "layer %lld has k %lld",
			    (long long)i, (long long)k[i], (long long)first, (long long)k[first]);
	}
	/* canonical: k 0 for standard layers and past the depth, attention past the
	 * depth cleared (so equal models compare equal, and a depth raised after
	 * resolving is refused instead of silently meaning something) */
	memcpy(c->k, k, sizeof k);
	for (int i = (int)c->layers; i < MODEL_MAX_LAYERS; i++)
		c->attention[i] = NN_NATTN;
	return TENSOR_OK;
}

/* ---- JSON ----------------------------------------------------------------------- */

/* Every field in struct order; JSON keys are the field names. */
enum field_type {
	F_INT,
	F_BOOL,
	F_DOUBLE,
	F_SEED,
	F_ACT,
	F_SCHED,
	F_SHARE,
	F_POS,
	F_POOL, /* enums by name: F_ACT .. F_POOL */
	F_ATTN,
	F_K
};
struct field {
	const char *key;
	enum field_type type;
	size_t off;
};
/* clang-format off */
#define FLD(name, type) { #name, type, offsetof(struct model_config, name) }
/* clang-format on */
static const struct field fields[] = {
	FLD(vocab_size, F_INT),
	FLD(max_len, F_INT),
	FLD(dim, F_INT),
	FLD(heads, F_INT),
	FLD(layers, F_INT),
	FLD(ff_hidden, F_INT),
	FLD(activation, F_ACT),
	FLD(swiglu, F_BOOL),
	FLD(pre_norm, F_BOOL),
	FLD(rms_norm, F_BOOL),
	FLD(positions, F_POS),
	FLD(position_kernel, F_INT),
	FLD(final_norm, F_BOOL),
	FLD(dropout, F_DOUBLE),
	FLD(attn_dropout, F_DOUBLE),
	FLD(pad_id, F_INT),
	FLD(attention, F_ATTN),
	FLD(k_schedule, F_SCHED),
	FLD(k_first, F_INT),
	FLD(k_last, F_INT),
	FLD(k, F_K),
	FLD(sharing, F_SHARE),
	FLD(conv_dense, F_BOOL),
	FLD(xavier_projections, F_BOOL),
	FLD(mask_empty_slots, F_BOOL),
	FLD(shared_kv_head, F_BOOL),
	FLD(num_classes, F_INT),
	FLD(head_hidden, F_INT),
	FLD(pooling, F_POOL),
	FLD(tie_embeddings, F_BOOL),
	FLD(seed, F_SEED),
};
#define NFIELDS ((int)(sizeof fields / sizeof fields[0]))

static const char *enum_name(const struct field *f, int v)
{
	switch (f->type) {
	case F_ACT: return (unsigned)v < NN_NACTIVATIONS ? nn_activation_name(v) : NULL;
	case F_SCHED: return (unsigned)v < NSCHED ? schedule_names[v] : NULL;
	case F_SHARE: return (unsigned)v <= NN_SHARE_LAYERWISE ? nn_proj_sharing_name(v) : NULL;
	case F_POS: return (unsigned)v < MODEL_NPOS ? position_names[v] : NULL;
	case F_POOL: return (unsigned)v < MODEL_NPOOL ? pooling_names[v] : NULL;
	default: return NULL;
	}
}

/* Numbers are written as raw text: cJSON prints doubles with 15 significant
 * digits whenever those read back within a relative DBL_EPSILON, which loses
 * the last bits (2^53 comes back as 2^53 - 2). Integers are printed exactly
 * and doubles with the fewest digits that read back to the same value. */
static cJSON *int_json(long long v)
{
	char buf[32];
	snprintf(buf, sizeof buf, "%lld", v);
	return cJSON_CreateRaw(buf);
}

static cJSON *double_json(double v)
{
	char buf[40];
	for (int digits = 15; digits <= 17; digits++) {
		snprintf(buf, sizeof buf, "%.*g", digits, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	char point = localeconv()->decimal_point[0]; /* JSON wants '.' in any locale */
	char *at = point != '.' ? strchr(buf, point) : NULL;
	if (at)
		*at = '.';
	return cJSON_CreateRaw(buf);
}

static cJSON *field_to_json(const struct model_config *c, const struct field *f)
{
	const char *p = (const char *)c + f->off;
	switch (f->type) {
	case F_INT: return int_json(*(const int64_t *)p);
	case F_BOOL: return cJSON_CreateBool(*(const bool *)p);
	case F_DOUBLE: return double_json(*(const double *)p);
	case F_SEED: {
		uint64_t s = c->seed;
		if (s <= (uint64_t)MAX_EXACT)
			return int_json((long long)s);
		char buf[32];
		snprintf(buf, sizeof buf, "%llu", (unsigned long long)s);
		return cJSON_CreateString(buf);
	}
	case F_ATTN: {
		cJSON *a = cJSON_CreateArray();
		for (int64_t i = 0; a && i < c->layers; i++)
			if (!cJSON_AddItemToArray(
				a, cJSON_CreateString(nn_attn_kind_name(c->attention[i])))) {
				cJSON_Delete(a);
				return NULL;
			}
		return a;
	}
	case F_K: {
		cJSON *a = cJSON_CreateArray();
		for (int64_t i = 0; a && i < c->layers; i++)
			if (!cJSON_AddItemToArray(a, int_json(c->k[i]))) {
				cJSON_Delete(a);
				return NULL;
			}
		return a;
	}
	default: return cJSON_CreateString(enum_name(f, *(const int *)p));
	}
}

/* The fields to_json cannot write: enums outside their range, a depth
 * outside [1, MODEL_MAX_LAYERS], values JSON numbers cannot hold exactly. */
static int check_writable(const struct model_config *c)
{
	if (c->layers < 1 || c->layers > MODEL_MAX_LAYERS)
		return tensor_error(TENSOR_ERR_ARG,
				    "model_config_to_json: layers %lld not in [1, %d]",
				    (long long)c->layers, MODEL_MAX_LAYERS);
	for (int i = 0; i < NFIELDS; i++) {
		const struct field *f = &fields[i];
		const char *p = (const char *)c + f->off;
		if (f->type == F_INT && fabs((double)*(const int64_t *)p) > MAX_EXACT)
			return tensor_error(TENSOR_ERR_ARG,
					    "model_config_to_json: \"%s\" = %lld is beyond 2^53",
					    f->key, (long long)*(const int64_t *)p);
		if (f->type == F_DOUBLE && !isfinite(*(const double *)p))
			return tensor_error(TENSOR_ERR_ARG,
					    "model_config_to_json: \"%s\" = %g is not finite",
					    f->key, *(const double *)p);
		if (f->type >= F_ACT && f->type <= F_POOL && !enum_name(f, *(const int *)p))
			return tensor_error(TENSOR_ERR_ARG,
					    "model_config_to_json: \"%s\" has no name for value %d",
					    f->key, *(const int *)p);
	}
	for (int64_t i = 0; i < c->layers; i++) {
		if ((unsigned)c->attention[i] >= NN_NATTN)
			return tensor_error(TENSOR_ERR_ARG,
					    "model_config_to_json: \"attention\"[%lld] has no name "
					    "for value %d",
					    (long long)i, (int)c->attention[i]);
		if (fabs((double)c->k[i]) > MAX_EXACT)
			return tensor_error(TENSOR_ERR_ARG,
					    "model_config_to_json: \"k\"[%lld] is beyond 2^53",
					    (long long)i);
	}
	return TENSOR_OK;
}

char *model_config_to_json(const struct model_config *c)
{
	if (!c) {
		tensor_error(TENSOR_ERR_ARG, "model_config_to_json: config is NULL");
		return NULL;
	}
	if (check_writable(c) < 0)
		return NULL;
	cJSON *o = cJSON_CreateObject();
	bool ok = o != NULL;
	for (int i = 0; ok && i < NFIELDS; i++) {
		cJSON *v = field_to_json(c, &fields[i]);
		ok = v && cJSON_AddItemToObject(o, fields[i].key, v);
		if (!ok)
			cJSON_Delete(v);
	}
	char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
	cJSON_Delete(o);
	char *out = s ? tensor_host_strdup(s) : NULL; /* malloc'd, whatever cJSON's hooks are */
	cJSON_free(s);
	if (!out)
		tensor_error(TENSOR_ERR_NOMEM, "model_config_to_json: out of memory");
	return out;
}

#define JSON_ERR(...) tensor_error(TENSOR_ERR_ARG, "model_config_from_json: " __VA_ARGS__)

/* An integral JSON number within +-2^53. */
static int json_int(const cJSON *v, const char *key, int64_t *out)
{
	if (!cJSON_IsNumber(v))
		return JSON_ERR("\"%s\" must be an integer", key);
	double d = v->valuedouble;
	if (d != floor(d) || fabs(d) > MAX_EXACT)
		return JSON_ERR("\"%s\" = %.17g must be an integer within +-2^53", key, d);
	*out = (int64_t)d;
	return TENSOR_OK;
}

static int json_seed(const cJSON *v, uint64_t *out)
{
	if (cJSON_IsString(v)) {
		const char *s = v->valuestring;
		char *end;
		errno = 0;
		unsigned long long u = *s >= '0' && *s <= '9' ? strtoull(s, &end, 10) : 0;
		if (!(*s >= '0' && *s <= '9') || *end || errno)
			return JSON_ERR("\"seed\" string \"%s\" must be a decimal 64-bit unsigned "
					"integer",
					s);
		*out = u;
		return TENSOR_OK;
	}
	double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
	if (d < 0 || d != floor(d) || d > MAX_EXACT)
		return JSON_ERR("\"seed\" must be an integer in [0, 2^53] or a decimal string");
	*out = (uint64_t)d;
	return TENSOR_OK;
}

/* An array of exactly layers entries. */
static int json_array(const cJSON *v, const char *key, int64_t layers)
{
	if (!cJSON_IsArray(v))
		return JSON_ERR("\"%s\" must be an array", key);
	int n = cJSON_GetArraySize(v);
	if (n != layers)
		return JSON_ERR("\"%s\" has %d entries, expected one per layer (layers = %lld)",
				key, n, (long long)layers);
	return TENSOR_OK;
}

static int field_from_json(struct model_config *c, const struct field *f, const cJSON *v)
{
	char *p = (char *)c + f->off;
	int rc = TENSOR_OK, e;
	switch (f->type) {
	case F_INT: return json_int(v, f->key, (int64_t *)p);
	case F_BOOL:
		if (!cJSON_IsBool(v))
			return JSON_ERR("\"%s\" must be true or false", f->key);
		*(bool *)p = cJSON_IsTrue(v);
		return TENSOR_OK;
	case F_DOUBLE:
		if (!cJSON_IsNumber(v))
			return JSON_ERR("\"%s\" must be a number", f->key);
		*(double *)p = v->valuedouble;
		return TENSOR_OK;
	case F_SEED: return json_seed(v, &c->seed);
	case F_ATTN: {
		rc = json_array(v, f->key, c->layers);
		int i = 0;
		for (const cJSON *a = v ? v->child : NULL; rc == TENSOR_OK && a; a = a->next, i++) {
			e = cJSON_IsString(a) ? nn_attn_kind_parse(a->valuestring) : -1;
			if (e < 0)
				return JSON_ERR(
				    "\"attention\"[%d] must be one of standard, linear, "
				    "conv, mean, max, random",
				    i);
			c->attention[i] = (enum nn_attn_kind)e;
		}
		return rc;
	}
	case F_K: {
		rc = json_array(v, f->key, c->layers);
		int i = 0;
		for (const cJSON *a = v ? v->child : NULL; rc == TENSOR_OK && a; a = a->next, i++) {
			char key[32];
			snprintf(key, sizeof key, "k[%d]", i);
			rc = json_int(a, key, &c->k[i]);
		}
		return rc;
	}
	default: break;
	}
	/* enums by name */
	const char *s = cJSON_IsString(v) ? v->valuestring : NULL;
	switch (f->type) {
	case F_ACT: e = s ? nn_activation_parse(s) : -1; break;
	case F_SCHED: e = parse_name(s, schedule_names, NSCHED); break;
	case F_SHARE: e = s ? nn_proj_sharing_parse(s) : -1; break;
	case F_POS: e = model_positions_parse(s); break;
	default: e = model_pooling_parse(s); break;
	}
	if (e < 0) {
		char names[96] = "";
		int n = f->type == F_ACT     ? NN_NACTIVATIONS
			: f->type == F_SCHED ? NSCHED
			: f->type == F_SHARE ? NN_SHARE_LAYERWISE + 1
			: f->type == F_POS   ? MODEL_NPOS
					     : MODEL_NPOOL;
		for (int i = 0; i < n; i++) {
			strncat(names, enum_name(f, i), sizeof names - strlen(names) - 1);
			if (i + 1 < n)
				strncat(names, ", ", sizeof names - strlen(names) - 1);
		}
		return JSON_ERR("\"%s\" must be one of the strings %s", f->key, names);
	}
	*(int *)p = e;
	return TENSOR_OK;
}

/* Boolean keys of configs written before the current fields: sequential_heads
 * (now a run option: ignored), learned_positions and no_positions (now
 * "positions"). */
enum { LEGACY_SEQUENTIAL, LEGACY_LEARNED, LEGACY_NONE, NLEGACY };
static const char *const legacy_keys[NLEGACY] = { "sequential_heads", "learned_positions",
						  "no_positions" };

/* "positions" from the legacy keys: no_positions wins, as it did. */
static int legacy_positions(struct model_config *c, const cJSON *const *legacy, bool has_new)
{
	if (!legacy[LEGACY_LEARNED] && !legacy[LEGACY_NONE])
		return TENSOR_OK;
	if (has_new)
		return JSON_ERR(
		    "\"positions\" and the older \"learned_positions\"/\"no_positions\" "
		    "together");
	if (legacy[LEGACY_NONE] && cJSON_IsTrue(legacy[LEGACY_NONE]))
		c->positions = MODEL_POS_NONE;
	else if (legacy[LEGACY_LEARNED])
		c->positions =
		    cJSON_IsTrue(legacy[LEGACY_LEARNED]) ? MODEL_POS_LEARNED : MODEL_POS_SINUSOIDAL;
	return TENSOR_OK;
}

static const struct field *find_field(const char *key)
{
	for (int i = 0; i < NFIELDS; i++)
		if (strcmp(fields[i].key, key) == 0)
			return &fields[i];
	return NULL;
}

/* Keys first (unknown, duplicate, missing required), then values in struct
 * order ("layers" before the per-layer arrays). */
static int from_object(struct model_config *c, const cJSON *o)
{
	const cJSON *seen[sizeof fields / sizeof fields[0]] = { 0 }, *legacy[NLEGACY] = { 0 };
	for (const cJSON *v = o->child; v; v = v->next) {
		const struct field *f = v->string ? find_field(v->string) : NULL;
		int l = f || !v->string ? -1 : parse_name(v->string, legacy_keys, NLEGACY);
		if (l >= 0) {
			if (legacy[l])
				return JSON_ERR("duplicate key \"%s\"", legacy_keys[l]);
			if (!cJSON_IsBool(v))
				return JSON_ERR("\"%s\" must be true or false", legacy_keys[l]);
			legacy[l] = v;
			continue;
		}
		if (!f)
			return JSON_ERR("unknown key \"%s\"", v->string ? v->string : "");
		if (seen[f - fields])
			return JSON_ERR("duplicate key \"%s\"", f->key);
		seen[f - fields] = v;
	}
	const cJSON *vocab = seen[find_field("vocab_size") - fields],
		    *len = seen[find_field("max_len") - fields];
	if (!vocab || !len)
		return JSON_ERR("\"vocab_size\" and \"max_len\" are required");
	int64_t v = 0, n = 0;
	int rc = json_int(vocab, "vocab_size", &v);
	if (rc == TENSOR_OK)
		rc = json_int(len, "max_len", &n);
	if (rc == TENSOR_OK && (v < 1 || n < 1))
		rc = JSON_ERR("\"vocab_size\" %lld and \"max_len\" %lld must be >= 1", (long long)v,
			      (long long)n);
	if (rc == TENSOR_OK)
		rc = model_config_preset(c, "transformer", v, n);
	const cJSON *lay = seen[find_field("layers") - fields];
	if (rc == TENSOR_OK && lay)
		rc = json_int(lay, "layers", &c->layers);
	if (rc == TENSOR_OK && (c->layers < 1 || c->layers > MODEL_MAX_LAYERS))
		rc = JSON_ERR("\"layers\" %lld not in [1, %d]", (long long)c->layers,
			      MODEL_MAX_LAYERS);
	for (int i = 0; rc == TENSOR_OK && i < NFIELDS; i++)
		if (seen[i])
			rc = field_from_json(c, &fields[i], seen[i]);
	if (rc == TENSOR_OK)
		rc = legacy_positions(c, legacy, seen[find_field("positions") - fields] != NULL);
	for (int i = (int)c->layers; rc == TENSOR_OK && i < MODEL_MAX_LAYERS; i++)
		c->attention[i] = NN_NATTN; /* as model_config_resolve leaves them */
	return rc;
}

int model_config_from_json(struct model_config *c, const char *json)
{
	if (!c || !json)
		return tensor_error(TENSOR_ERR_ARG,
				    "model_config_from_json: config or json is NULL");
	const char *end = NULL;
	cJSON *o = cJSON_ParseWithOpts(json, &end, true);
	if (!o) {
		size_t at = end && end >= json ? (size_t)(end - json) : 0;
		return JSON_ERR("invalid JSON near byte %zu", at);
	}
	struct model_config tmp;
	int rc = cJSON_IsObject(o) ? from_object(&tmp, o) : JSON_ERR("expected a JSON object");
	cJSON_Delete(o);
	if (rc == TENSOR_OK)
		*c = tmp;
	return rc;
}

/* ---- parameter count ------------------------------------------------------------ */

/* The count is computed in doubles, exact for integers up to 2^53; a larger
 * total (or any term beyond it, the terms being non-negative) is an error
 * instead of a signed overflow. */

/* Parameters of one norm of dim d. */
static double norm_params(const struct model_config *c, double d)
{
	return c->rms_norm ? d : 2 * d;
}

/* The sequence projections (E and F) of one layer of kind a with k; with
 * layerwise sharing they are counted once for the model instead. */
static double projection_params(const struct model_config *c, enum nn_attn_kind a, int64_t k,
				bool layerwise_once)
{
	double n = (double)c->max_len, d = (double)c->dim, h = (double)c->heads, dh = d / h;
	double one; /* one projection (E or F) shared by the heads */
	switch (a) {
	case NN_ATTN_LINEAR:
	case NN_ATTN_RANDOM: one = (double)k * n; break;
	case NN_ATTN_CONV: {
		/* dense: every key/value channel, which is one head's with a shared head */
		double ch = c->conv_dense && !c->shared_kv_head ? d : dh;
		one = ch * ch * (double)(c->max_len / k) + ch;
		break;
	}
	default: return 0; /* standard, mean and max pooling have none */
	}
	switch (c->sharing) {
	case NN_SHARE_NONE:
		/* learned and random: one per head; conv channels are shared by the heads */
		return a == NN_ATTN_CONV ? 2 * one : 2 * h * one;
	case NN_SHARE_HEADWISE: return 2 * one;
	case NN_SHARE_KV: return one;
	default: return layerwise_once ? one : 0;
	}
}

int64_t model_param_count(const struct model_config *cfg, bool with_classifier, bool with_mlm)
{
	if (!cfg)
		return tensor_error(TENSOR_ERR_ARG, "model_param_count: config is NULL");
	struct model_config c = *cfg;
	int rc = model_config_resolve(&c);
	if (rc < 0)
		return rc;
	double V = (double)c.vocab_size, n = (double)c.max_len, d = (double)c.dim,
	       f = (double)c.ff_hidden, dh = (double)(c.dim / c.heads);
	double hh = (double)c.head_hidden, C = (double)c.num_classes;
	double total = V * d + (c.positions == MODEL_POS_LEARNED ? n * d : 0) +
		       d * d * (double)c.position_kernel;
	bool shared_done = false;
	for (int64_t i = 0; i < c.layers; i++) {
		enum nn_attn_kind a = c.attention[i];
		total += 2 * norm_params(&c, d);
		if (a == NN_ATTN_STANDARD || !c.shared_kv_head)
			total += 4 * (d * d + d);
		else /* q, out full; k, v a single head */
			total += 2 * (d * d + d) + 2 * (d * dh + dh);
		total += projection_params(&c, a, c.k[i], !shared_done);
		if (is_projected(a))
			shared_done = true;
		total += c.swiglu ? 3 * d * f : 2 * d * f + f + d;
	}
	if (c.pre_norm && c.final_norm)
		total += norm_params(&c, d);
	if (with_classifier)
		total += d * hh + hh + hh * C + C + (c.pooling == MODEL_POOL_ATTENTION ? d : 0);
	if (with_mlm)
		total += d * d + d + 2 * d + (c.tie_embeddings ? V : V * d + V);
	if (!(total <= MAX_EXACT))
		return tensor_error(
		    TENSOR_ERR_ARG,
		    "model_param_count: %.3g parameters is beyond 2^53 (vocab %lld, "
		    "dim %lld, ff_hidden %lld)",
		    total, (long long)c.vocab_size, (long long)c.dim, (long long)c.ff_hidden);
	return (int64_t)total;
}

/* ---- summary -------------------------------------------------------------------- */

static const char *preset_of(const struct model_config *c)
{
	bool all_s = true, all_l = true, conv_lin = true;
	int64_t half = conv_linformer_linear_layers(c->layers);
	for (int64_t i = 0; i < c->layers; i++) {
		all_s &= c->attention[i] == NN_ATTN_STANDARD;
		all_l &= c->attention[i] == NN_ATTN_LINEAR;
		conv_lin &= c->attention[i] == (i < half ? NN_ATTN_LINEAR : NN_ATTN_CONV);
	}
	return all_s ? "transformer" : all_l ? "linformer" : conv_lin ? "conv-linformer" : NULL;
}

const char *model_config_pattern(const struct model_config *c, char out[MODEL_MAX_LAYERS + 1])
{
	int64_t i = 0;
	for (; c && i < c->layers && i < MODEL_MAX_LAYERS; i++) {
		unsigned a = (unsigned)c->attention[i];
		out[i] = a < NN_NATTN ? attn_letters[a] : '?';
	}
	out[i] = '\0';
	return out;
}

void model_summary(const struct model_config *c, int64_t params, FILE *f)
{
	if (!c || !f)
		return;
	if (c->layers < 1 || c->layers > MODEL_MAX_LAYERS) {
		fprintf(f, "model: invalid config (layers %lld)\n", (long long)c->layers);
		return;
	}
	char pattern[MODEL_MAX_LAYERS + 1];
	model_config_pattern(c, pattern);
	bool projected = false;
	for (int64_t i = 0; i < c->layers; i++) {
		unsigned a = (unsigned)c->attention[i];
		projected |= a < NN_NATTN && is_projected(a);
	}
	const char *preset = preset_of(c);
	fprintf(f,
		"%s [%s]: vocab %lld, n %lld, dim %lld, heads %lld, layers %lld, ff %lld %s, "
		"%s-norm %s, positions %s",
		preset ? preset : "pattern", pattern, (long long)c->vocab_size,
		(long long)c->max_len, (long long)c->dim, (long long)c->heads, (long long)c->layers,
		(long long)c->ff_hidden, c->swiglu ? "swiglu" : nn_activation_name(c->activation),
		c->pre_norm ? "pre" : "post", c->rms_norm ? "RMSNorm" : "LayerNorm",
		model_positions_name(c->positions));
	if (c->position_kernel > 0)
		fprintf(f, " + conv %lld", (long long)c->position_kernel);
	if (projected) {
		fprintf(f, ", k");
		for (int64_t i = 0; i < c->layers; i++)
			if (c->attention[i] == NN_ATTN_STANDARD)
				fprintf(f, "%s-", i ? "," : " ");
			else /* the schedule's k: resolving is not needed to print it */
				fprintf(f, "%s%lld", i ? "," : " ", (long long)scheduled_k(c, i));
		fprintf(f, ", sharing %s%s%s",
			(unsigned)c->sharing <= NN_SHARE_LAYERWISE
			    ? nn_proj_sharing_name(c->sharing)
			    : "unknown",
			c->conv_dense ? ", dense conv" : "",
			c->shared_kv_head ? ", shared kv head" : "");
	}
	if (params >= 0)
		fprintf(f, ", %lld parameters (%.2fM)\n", (long long)params, (double)params / 1e6);
	else
		fprintf(f, "\n");
}
