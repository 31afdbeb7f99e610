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

/* ---- the fields (model_config_fields.h) ------------------------------------------ */

/* Each field's kind agrees with its C type, and the enums are stored as int. */
#define TYPE_OF_INT int64_t
#define TYPE_OF_BOOL bool
#define TYPE_OF_DOUBLE double
#define TYPE_OF_SEED uint64_t
#define TYPE_OF_ACTIVATION enum nn_activation
#define TYPE_OF_K_SCHEDULE enum model_k_schedule
#define TYPE_OF_SHARING enum nn_proj_sharing
#define TYPE_OF_POSITIONS enum model_positions
#define TYPE_OF_POOLING enum model_pooling
#define TYPE_OF_ATTENTION enum nn_attn_kind * /* arrays decay */
#define TYPE_OF_K int64_t *
#define CHECK_KIND(a, type, name, dims, kind, ...)                                       \
	_Static_assert(                                                                  \
	    _Generic(((struct model_config *)0)->name, TYPE_OF_##kind : 1, default : 0), \
	    #name ": its kind " #kind " does not match its type " #type);
MODEL_CONFIG_FIELDS(CHECK_KIND, )
_Static_assert(sizeof(enum nn_activation) == sizeof(int) &&
		   sizeof(enum model_k_schedule) == sizeof(int) &&
		   sizeof(enum nn_proj_sharing) == sizeof(int) &&
		   sizeof(enum model_positions) == sizeof(int) &&
		   sizeof(enum model_pooling) == sizeof(int),
	       "enum fields are read and written as int");

#define FIELD_ROW(a, type, name, dims, kind, group, lo, hi, def, flag, metavar, help) \
	{ #name,                                                                      \
	  MODEL_FIELD_##kind,                                                         \
	  MODEL_FIELD_##group,                                                        \
	  offsetof(struct model_config, name),                                        \
	  sizeof(((struct model_config *)0)->name),                                   \
	  lo,                                                                         \
	  hi,                                                                         \
	  def,                                                                        \
	  flag,                                                                       \
	  metavar,                                                                    \
	  help },
static const struct model_config_field fields[] = { MODEL_CONFIG_FIELDS(FIELD_ROW, ) };
#define NFIELDS ((int)(sizeof fields / sizeof fields[0]))

int model_config_field_count(void)
{
	return NFIELDS;
}

const struct model_config_field *model_config_field(int i)
{
	return i >= 0 && i < NFIELDS ? &fields[i] : NULL;
}

const struct model_config_field *model_config_field_find(const char *name)
{
	for (int i = 0; name && i < NFIELDS; i++)
		if (strcmp(fields[i].name, name) == 0)
			return &fields[i];
	return NULL;
}

static const char *at(const struct model_config *c, const struct model_config_field *f)
{
	return (const char *)c + f->offset;
}

static bool is_enum(enum model_field_kind kind)
{
	return kind >= MODEL_FIELD_ACTIVATION && kind <= MODEL_FIELD_POOLING;
}

int model_field_enum_count(enum model_field_kind kind)
{
	switch (kind) {
	case MODEL_FIELD_ACTIVATION: return NN_NACTIVATIONS;
	case MODEL_FIELD_K_SCHEDULE: return NSCHED;
	case MODEL_FIELD_SHARING: return NN_SHARE_LAYERWISE + 1;
	case MODEL_FIELD_POSITIONS: return MODEL_NPOS;
	case MODEL_FIELD_POOLING: return MODEL_NPOOL;
	case MODEL_FIELD_ATTENTION: return NN_NATTN;
	default: return 0;
	}
}

const char *model_field_enum_name(enum model_field_kind kind, int v)
{
	if (v < 0 || v >= model_field_enum_count(kind))
		return NULL;
	switch (kind) {
	case MODEL_FIELD_ACTIVATION: return nn_activation_name((enum nn_activation)v);
	case MODEL_FIELD_K_SCHEDULE: return schedule_names[v];
	case MODEL_FIELD_SHARING: return nn_proj_sharing_name((enum nn_proj_sharing)v);
	case MODEL_FIELD_POSITIONS: return position_names[v];
	case MODEL_FIELD_POOLING: return pooling_names[v];
	default: return nn_attn_kind_name((enum nn_attn_kind)v);
	}
}

/* The value of an enum kind called name (or one of its other spellings), -1 for none. */
static int enum_parse(enum model_field_kind kind, const char *name)
{
	switch (kind) {
	case MODEL_FIELD_ACTIVATION: return nn_activation_parse(name);
	case MODEL_FIELD_K_SCHEDULE: return parse_name(name, schedule_names, NSCHED);
	case MODEL_FIELD_SHARING: return nn_proj_sharing_parse(name);
	case MODEL_FIELD_POSITIONS: return model_positions_parse(name);
	case MODEL_FIELD_POOLING: return model_pooling_parse(name);
	case MODEL_FIELD_ATTENTION: return nn_attn_kind_parse(name);
	default: return -1;
	}
}

/* v within the range of f: [min, max] (INT, K) or [min, max) (DOUBLE); NaN is not. */
static bool in_range(const struct model_config_field *f, double v)
{
	return v >= f->min && (f->kind == MODEL_FIELD_DOUBLE ? v < f->max : v <= f->max);
}

/* "must be >= 1", "not in [1, 64]" or "not in [0, 1)", for messages. */
static const char *range_text(const struct model_config_field *f, char *buf, size_t len)
{
	if (f->kind == MODEL_FIELD_DOUBLE)
		snprintf(buf, len, "not in [%g, %g)", f->min, f->max);
	else if (f->max >= MAX_EXACT)
		snprintf(buf, len, "must be >= %.0f", f->min);
	else
		snprintf(buf, len, "not in [%.0f, %.0f]", f->min, f->max);
	return buf;
}

/* ---- presets -------------------------------------------------------------------- */

/* Layers of the Conv-Linformer preset that use learned linear projections:
 * the first half, rounded up. */
static int64_t conv_linformer_linear_layers(int64_t layers)
{
	return (layers + 1) / 2;
}

/* The default of f (of the table; arrays stay zero). */
static void set_default(struct model_config *c, const struct model_config_field *f)
{
	char *p = (char *)c + f->offset;
	switch (f->kind) {
	case MODEL_FIELD_INT: *(int64_t *)p = (int64_t)f->def; break;
	case MODEL_FIELD_BOOL: *(bool *)p = f->def != 0; break;
	case MODEL_FIELD_DOUBLE: *(double *)p = f->def; break;
	case MODEL_FIELD_SEED: *(uint64_t *)p = (uint64_t)f->def; break;
	case MODEL_FIELD_ATTENTION:
	case MODEL_FIELD_K: break;
	default: *(int *)p = (int)f->def; break;
	}
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
	for (int i = 0; i < NFIELDS; i++)
		set_default(&d, &fields[i]);
	d.vocab_size = vocab_size;
	d.max_len = max_len;
	d.layers = depth;
	d.k_first = d.k_last = max_len < d.k_first ? max_len : d.k_first;
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

/* Each number within its field's range and each enum one of its values (the
 * table), then the rules across fields. */
static int check_fields(const struct model_config *c)
{
	char range[64];
	for (int i = 0; i < NFIELDS; i++) {
		const struct model_config_field *f = &fields[i];
		const char *p = at(c, f);
		if (f->kind == MODEL_FIELD_INT && !in_range(f, (double)*(const int64_t *)p))
			return RESOLVE_ERR("%s %lld %s", f->name, (long long)*(const int64_t *)p,
					   range_text(f, range, sizeof range));
		if (f->kind == MODEL_FIELD_DOUBLE && !in_range(f, *(const double *)p))
			return RESOLVE_ERR("%s %g %s", f->name, *(const double *)p,
					   range_text(f, range, sizeof range));
		if (is_enum(f->kind) && !model_field_enum_name(f->kind, *(const int *)p))
			return RESOLVE_ERR("unknown %s %d", f->name, *(const int *)p);
	}
	if (c->dim % c->heads != 0)
		return RESOLVE_ERR("heads %lld must divide dim %lld", (long long)c->heads,
				   (long long)c->dim);
	if (c->pad_id >= c->vocab_size)
		return RESOLVE_ERR("pad_id %lld not in [0, vocab_size %lld) or -1",
				   (long long)c->pad_id, (long long)c->vocab_size);
	if (c->position_kernel > 0 && c->position_kernel % 2 == 0)
		return RESOLVE_ERR("position_kernel %lld must be 0 (none) or odd",
				   (long long)c->position_kernel);
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
	int rc = check_fields(c);
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

#define JSON_ERR(...) tensor_error(TENSOR_ERR_ARG, "model_config_from_json: " __VA_ARGS__)

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
	char *dot = point != '.' ? strchr(buf, point) : NULL;
	if (dot)
		*dot = '.';
	return cJSON_CreateRaw(buf);
}

/* An array of the first `layers` entries, made by item. */
static cJSON *array_json(const struct model_config *c,
			 cJSON *(*item)(const struct model_config *, int64_t))
{
	cJSON *a = cJSON_CreateArray();
	for (int64_t i = 0; a && i < c->layers; i++)
		if (!cJSON_AddItemToArray(a, item(c, i))) {
			cJSON_Delete(a);
			return NULL;
		}
	return a;
}

static cJSON *attention_json(const struct model_config *c, int64_t i)
{
	return cJSON_CreateString(nn_attn_kind_name(c->attention[i]));
}

static cJSON *k_json(const struct model_config *c, int64_t i)
{
	return int_json(c->k[i]);
}

static cJSON *field_to_json(const struct model_config *c, const struct model_config_field *f)
{
	const char *p = at(c, f);
	switch (f->kind) {
	case MODEL_FIELD_INT: return int_json(*(const int64_t *)p);
	case MODEL_FIELD_BOOL: return cJSON_CreateBool(*(const bool *)p);
	case MODEL_FIELD_DOUBLE: return double_json(*(const double *)p);
	case MODEL_FIELD_SEED: {
		uint64_t s = *(const uint64_t *)p;
		if (s <= (uint64_t)MAX_EXACT)
			return int_json((long long)s);
		char buf[32];
		snprintf(buf, sizeof buf, "%llu", (unsigned long long)s);
		return cJSON_CreateString(buf);
	}
	case MODEL_FIELD_ATTENTION: return array_json(c, attention_json);
	case MODEL_FIELD_K: return array_json(c, k_json);
	default: return cJSON_CreateString(model_field_enum_name(f->kind, *(const int *)p));
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
		const struct model_config_field *f = &fields[i];
		const char *p = at(c, f);
		if (f->kind == MODEL_FIELD_INT && fabs((double)*(const int64_t *)p) > MAX_EXACT)
			return tensor_error(TENSOR_ERR_ARG,
					    "model_config_to_json: \"%s\" = %lld is beyond 2^53",
					    f->name, (long long)*(const int64_t *)p);
		if (f->kind == MODEL_FIELD_DOUBLE && !isfinite(*(const double *)p))
			return tensor_error(TENSOR_ERR_ARG,
					    "model_config_to_json: \"%s\" = %g is not finite",
					    f->name, *(const double *)p);
		if (is_enum(f->kind) && !model_field_enum_name(f->kind, *(const int *)p))
			return tensor_error(TENSOR_ERR_ARG,
					    "model_config_to_json: \"%s\" has no name for value %d",
					    f->name, *(const int *)p);
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
		ok = v && cJSON_AddItemToObject(o, fields[i].name, v);
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

/* An integral JSON number within +-2^53 and the range of f (key names it). */
static int json_int(const cJSON *v, const struct model_config_field *f, const char *key,
		    int64_t *out)
{
	if (!cJSON_IsNumber(v))
		return JSON_ERR("\"%s\" must be an integer", key);
	double d = v->valuedouble;
	if (d != floor(d) || fabs(d) > MAX_EXACT)
		return JSON_ERR("\"%s\" = %.17g must be an integer within +-2^53", key, d);
	char range[64];
	if (!in_range(f, d))
		return JSON_ERR("\"%s\" %lld %s", key, (long long)d,
				range_text(f, range, sizeof range));
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

/* "a, b, c": the names of an enum kind. */
static const char *enum_names(enum model_field_kind kind, char *buf, size_t len)
{
	int n = model_field_enum_count(kind);
	buf[0] = '\0';
	for (int i = 0; i < n; i++) {
		strncat(buf, model_field_enum_name(kind, i), len - strlen(buf) - 1);
		if (i + 1 < n)
			strncat(buf, ", ", len - strlen(buf) - 1);
	}
	return buf;
}

static int field_from_json(struct model_config *c, const struct model_config_field *f,
			   const cJSON *v)
{
	char *p = (char *)c + f->offset, names[96];
	int rc = TENSOR_OK, e;
	switch (f->kind) {
	case MODEL_FIELD_INT: return json_int(v, f, f->name, (int64_t *)p);
	case MODEL_FIELD_BOOL:
		if (!cJSON_IsBool(v))
			return JSON_ERR("\"%s\" must be true or false", f->name);
		*(bool *)p = cJSON_IsTrue(v);
		return TENSOR_OK;
	case MODEL_FIELD_DOUBLE:
		if (!cJSON_IsNumber(v))
			return JSON_ERR("\"%s\" must be a number", f->name);
		if (!in_range(f, v->valuedouble))
			return JSON_ERR("\"%s\" %g %s", f->name, v->valuedouble,
					range_text(f, names, sizeof names));
		*(double *)p = v->valuedouble;
		return TENSOR_OK;
	case MODEL_FIELD_SEED: return json_seed(v, (uint64_t *)p);
	case MODEL_FIELD_ATTENTION: {
		rc = json_array(v, f->name, c->layers);
		int i = 0;
		for (const cJSON *a = v ? v->child : NULL; rc == TENSOR_OK && a; a = a->next, i++) {
			e = cJSON_IsString(a) ? enum_parse(f->kind, a->valuestring) : -1;
			if (e < 0)
				return JSON_ERR("\"%s\"[%d] must be one of %s", f->name, i,
						enum_names(f->kind, names, sizeof names));
			((enum nn_attn_kind *)p)[i] = (enum nn_attn_kind)e;
		}
		return rc;
	}
	case MODEL_FIELD_K: {
		rc = json_array(v, f->name, c->layers);
		int i = 0;
		for (const cJSON *a = v ? v->child : NULL; rc == TENSOR_OK && a; a = a->next, i++) {
			char key[32];
			snprintf(key, sizeof key, "%s[%d]", f->name, i);
			rc = json_int(a, f, key, &((int64_t *)p)[i]);
		}
		return rc;
	}
	default: break;
	}
	/* enums by name */
	e = cJSON_IsString(v) ? enum_parse(f->kind, v->valuestring) : -1;
	if (e < 0)
		return JSON_ERR("\"%s\" must be one of the strings %s", f->name,
				enum_names(f->kind, names, sizeof names));
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

static int field_index(const char *name)
{
	const struct model_config_field *f = model_config_field_find(name);
	return f ? (int)(f - fields) : -1;
}

/* Keys first (unknown, duplicate, missing required), then values in struct
 * order ("layers" before the per-layer arrays). */
static int from_object(struct model_config *c, const cJSON *o)
{
	const cJSON *seen[NFIELDS] = { 0 }, *legacy[NLEGACY] = { 0 };
	for (const cJSON *v = o->child; v; v = v->next) {
		int i = v->string ? field_index(v->string) : -1;
		int l = i >= 0 || !v->string ? -1 : parse_name(v->string, legacy_keys, NLEGACY);
		if (l >= 0) {
			if (legacy[l])
				return JSON_ERR("duplicate key \"%s\"", legacy_keys[l]);
			if (!cJSON_IsBool(v))
				return JSON_ERR("\"%s\" must be true or false", legacy_keys[l]);
			legacy[l] = v;
			continue;
		}
		if (i < 0)
			return JSON_ERR("unknown key \"%s\"", v->string ? v->string : "");
		if (seen[i])
			return JSON_ERR("duplicate key \"%s\"", fields[i].name);
		seen[i] = v;
	}
	int iv = field_index("vocab_size"), in = field_index("max_len"), il = field_index("layers");
	if (!seen[iv] || !seen[in])
		return JSON_ERR("\"vocab_size\" and \"max_len\" are required");
	int64_t v = 0, n = 0;
	int rc = json_int(seen[iv], &fields[iv], "vocab_size", &v);
	if (rc == TENSOR_OK)
		rc = json_int(seen[in], &fields[in], "max_len", &n);
	if (rc == TENSOR_OK)
		rc = model_config_preset(c, "transformer", v, n);
	if (rc == TENSOR_OK && seen[il])
		rc = field_from_json(c, &fields[il], seen[il]);
	for (int i = 0; rc == TENSOR_OK && i < NFIELDS; i++)
		if (seen[i])
			rc = field_from_json(c, &fields[i], seen[i]);
	if (rc == TENSOR_OK)
		rc = legacy_positions(c, legacy, seen[field_index("positions")] != NULL);
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
		size_t byte = end && end >= json ? (size_t)(end - json) : 0;
		return JSON_ERR("invalid JSON near byte %zu", byte);
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
