/* --init-from's transfer (examples/common/train.c, train_copy_encoder): for every model kind
 * (Transformer, Linformer, Conv-Linformer, layerwise sharing) and position scheme (learned,
 * sinusoidal, none, convolutional), an MLM or classifier checkpoint with its optimizer state
 * hands a new classifier every encoder tensor, bit for bit; the classifier's head keeps its
 * own initialisation; the report names exactly the tensors left unused (the file's head, its
 * optimizer state). A file that lacks an encoder tensor of the model, has one of another
 * shape or dtype, or has one the model lacks is refused, naming the file and the tensor, and
 * the model is left as it was. */
#define _GNU_SOURCE /* mkdtemp, open_memstream */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models.h"
#include "testutil.h"
#include "common/train.h"

static char dir[64], path[128];

static void dir_setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/cformer-init-from-XXXXXX");
	ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
	snprintf(path, sizeof path, "%s/pretrained.safetensors", dir);
}

static void dir_teardown(void)
{
	unlink(path);
	rmdir(dir);
}

/* The position schemes: a table, sinusoids, none, a convolution (positions none + kernel). */
enum scheme { LEARNED, SINUSOIDAL, NONE, CONV, NSCHEMES };
static const char *const SCHEME[NSCHEMES] = { "learned", "sinusoidal", "none", "conv" };

/* The model kinds: presets, and the Linformer with one projection shared by its layers. */
static const char *const KIND[] = { "transformer:2", "linformer:2", "conv-linformer:2",
				    "linformer:2 layerwise" };
enum { NKINDS = sizeof KIND / sizeof KIND[0] };

/* A small config of kind k and position scheme s, kernel the convolution's (CONV). */
static struct model_config config(int k, enum scheme s, int64_t kernel)
{
	struct model_config c;
	char preset[32];
	snprintf(preset, sizeof preset, "%.*s", (int)strcspn(KIND[k], " "), KIND[k]);
	ck_assert_int_eq(model_config_preset(&c, preset, 40, 16), TENSOR_OK);
	c.dim = 16;
	c.heads = 2;
	c.ff_hidden = 32;
	c.k_first = c.k_last = 8;
	c.sharing = strstr(KIND[k], "layerwise") ? NN_SHARE_LAYERWISE : c.sharing;
	c.positions = s == CONV ? MODEL_POS_NONE : (enum model_positions)s;
	c.position_kernel = s == CONV ? kernel : 0;
	c.num_classes = 3;
	c.head_hidden = 16;
	c.seed = 5;
	ck_assert_msg(model_config_resolve(&c) == TENSOR_OK, "%s", tensor_last_error());
	return c;
}

/* The pretraining's model: an MLM model (untied decoder with untied) or a classifier (with
 * attention pooling), every parameter redrawn, saved with AdamW's state to path. */
static void save_pretrained(const struct model_config *cfg, bool mlm, bool untied)
{
	struct model_config c = *cfg;
	c.tie_embeddings = !untied;
	c.pooling = MODEL_POOL_ATTENTION;
	struct nn_params ps;
	struct model_mlm m;
	struct model_classifier cls;
	struct nn_adamw opt;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 3), TENSOR_OK);
	ck_assert_int_eq(mlm ? model_mlm_init(&m, &ps, &c) : model_classifier_init(&cls, &ps, &c),
			 TENSOR_OK);
	for (int i = 0; i < ps.n; i++) /* values no initialiser gives */
		ck_assert_int_eq(nn_init_normal(ps.items[i].value, 0.5, 1, 1000 + (uint64_t)i),
				 TENSOR_OK);
	ck_assert_int_eq(nn_adamw_init(&opt, &ps, 1e-3, 0.9, 0.999, 1e-8, 0.01), TENSOR_OK);
	char *json = model_config_to_json(&c);
	ck_assert_ptr_nonnull(json);
	ck_assert_int_eq(nn_checkpoint_save(path, &ps, &opt, json, 7), TENSOR_OK);
	free(json);
	nn_adamw_free(&opt);
	if (mlm)
		model_mlm_free(&m);
	else
		model_classifier_free(&cls);
	nn_params_free(&ps);
}

/* The fine-tuning's classifier of config c (two classes, mean pooling, its own seed). */
static void build_classifier(struct model_classifier *m, struct nn_params *ps,
			     const struct model_config *cfg, enum tensor_dtype dt)
{
	struct model_config c = *cfg;
	c.num_classes = 2;
	c.pooling = MODEL_POOL_MEAN;
	c.seed = 99;
	ck_assert_int_eq(nn_params_init(ps, dt, TENSOR_CPU, 99), TENSOR_OK);
	ck_assert_msg(model_classifier_init(m, ps, &c) == TENSOR_OK, "%s", tensor_last_error());
}

/* The bytes of every parameter of ps, concatenated (malloc'd), *n their count. */
static char *snapshot(const struct nn_params *ps, size_t *n)
{
	size_t total = 0;
	for (int i = 0; i < ps->n; i++)
		total += tensor_nbytes(ps->items[i].value);
	char *b = malloc(total + 1);
	ck_assert_ptr_nonnull(b);
	*n = 0;
	for (int i = 0; i < ps->n; i++) {
		size_t nb = tensor_nbytes(ps->items[i].value);
		memcpy(b + *n, tensor_data(ps->items[i].value), nb);
		*n += nb;
	}
	return b;
}

static bool same_bytes(const struct tensor *a, const struct tensor *b)
{
	return tensor_nbytes(a) == tensor_nbytes(b) &&
	       !memcmp(tensor_data(a), tensor_data(b), tensor_nbytes(a));
}

/* The names of the report's "  unused: NAME ..." lines, each followed by a space. */
static void unused_names(const char *report, char *out, size_t len)
{
	out[0] = '\0';
	for (const char *l = strstr(report, "\n  unused: "); l; l = strstr(l + 1, "\n  unused: ")) {
		const char *name = l + strlen("\n  unused: ");
		size_t n = strcspn(name, " ");
		if (name[0] >= '0' && name[0] <= '9')
			continue; /* "N optimizer.* tensors", checked apart */
		snprintf(out + strlen(out), len - strlen(out), "%.*s ", (int)n, name);
	}
}

/* The pretraining of kind k, scheme s into a classifier: every encoder tensor arrives bit for
 * bit, the head stays as initialised, the report lists exactly the unused tensors. */
static void round_trip(int k, enum scheme s, bool mlm, bool untied)
{
	struct model_config cfg = config(k, s, 3);
	save_pretrained(&cfg, mlm, untied);
	/* the source's values, as the file holds them */
	struct model_config fc;
	ck_assert_int_eq(model_config_from_checkpoint(path, &fc), TENSOR_OK);
	struct nn_params src;
	struct model_mlm sm;
	struct model_classifier sc;
	ck_assert_int_eq(nn_params_init(&src, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	ck_assert_int_eq(mlm ? model_mlm_init(&sm, &src, &fc)
			     : model_classifier_init(&sc, &src, &fc),
			 TENSOR_OK);
	ck_assert_int_eq(nn_checkpoint_load(path, &src, NULL, NULL), TENSOR_OK);

	struct nn_params ps;
	struct model_classifier m;
	build_classifier(&m, &ps, &fc, TENSOR_F32);
	size_t nbefore;
	char *before = snapshot(&ps, &nbefore);
	char *report = NULL;
	size_t rlen = 0;
	FILE *f = open_memstream(&report, &rlen);
	int copied = train_copy_encoder(path, &m.enc, &ps, f);
	fclose(f);
	ck_assert_msg(copied > 0, "%s, %s: %s", KIND[k], SCHEME[s], tensor_last_error());

	int encoder = 0, conv = 0, off = 0;
	for (int i = 0; i < ps.n; i++) {
		const struct nn_param *p = &ps.items[i];
		size_t nb = tensor_nbytes(p->value);
		if (model_encoder_has_param(&m.enc, &ps, p->name)) {
			const struct nn_param *q = nn_params_find(&src, p->name);
			ck_assert_msg(q && same_bytes(p->value, q->value),
				      "%s, %s: %s is not the file's", KIND[k], SCHEME[s], p->name);
			encoder++;
			conv += !strcmp(p->name, "pos_conv.weight");
		} else {
			ck_assert_msg(!memcmp(before + off, tensor_data(p->value), nb),
				      "%s, %s: the head's %s changed", KIND[k], SCHEME[s], p->name);
		}
		off += (int)nb;
	}
	ck_assert_int_eq(copied, encoder);
	ck_assert_int_eq(conv, s == CONV);
	ck_assert((nn_params_find(&ps, "pos.weight") != NULL) == (s == LEARNED));

	/* the report: the count, then exactly the file's head and its optimizer state */
	char want[512], got[512], line[256];
	snprintf(line, sizeof line, "encoder: %d tensors from %s\n", copied, path);
	ck_assert_msg(!strncmp(report, line, strlen(line)), "report:\n%s", report);
	if (mlm)
		snprintf(want, sizeof want,
			 "mlm.dense.weight mlm.dense.bias mlm.norm.weight "
			 "mlm.norm.bias %smlm.decoder.bias ",
			 untied ? "mlm.decoder.weight " : "");
	else
		snprintf(want, sizeof want,
			 "head.fc1.weight head.fc1.bias head.fc2.weight "
			 "head.fc2.bias head.pool.query ");
	unused_names(report, got, sizeof got);
	ck_assert_msg(!strcmp(got, want), "%s, %s: unused '%s', want '%s'", KIND[k], SCHEME[s], got,
		      want);
	ck_assert(strstr(report, mlm ? "(the MLM head;" : "(the file's classifier head;"));
	snprintf(line, sizeof line, "  unused: %d optimizer.* tensors (", 2 * src.n);
	ck_assert_msg(strstr(report, line), "report:\n%s", report);
	free(report);
	free(before);
	model_classifier_free(&m);
	nn_params_free(&ps);
	if (mlm)
		model_mlm_free(&sm);
	else
		model_classifier_free(&sc);
	nn_params_free(&src);
}

START_TEST(test_round_trip_mlm)
{
	for (int k = 0; k < NKINDS; k++)
		for (int s = 0; s < NSCHEMES; s++)
			round_trip(k, (enum scheme)s, true, s == SINUSOIDAL);
}
END_TEST

START_TEST(test_round_trip_classifier)
{
	for (int k = 0; k < NKINDS; k++)
		for (int s = 0; s < NSCHEMES; s++)
			round_trip(k, (enum scheme)s, false, false);
}
END_TEST

/* train_copy_encoder of path into a classifier of config c (dtype dt) fails with status and
 * a message naming the file and holding what; the classifier is left as it was. */
static void refused(const struct model_config *c, enum tensor_dtype dt, int status,
		    const char *what)
{
	struct nn_params ps;
	struct model_classifier m;
	build_classifier(&m, &ps, c, dt);
	size_t n;
	char *before = snapshot(&ps, &n), *report = NULL;
	size_t rlen = 0;
	FILE *f = open_memstream(&report, &rlen);
	tu_assert_error(train_copy_encoder(path, &m.enc, &ps, f) < 0, status, path, what);
	fclose(f);
	ck_assert_msg(rlen == 0, "a refused copy reported:\n%s", report);
	size_t n2;
	char *after = snapshot(&ps, &n2);
	ck_assert(n == n2 && !memcmp(before, after, n));
	free(before);
	free(after);
	free(report);
	model_classifier_free(&m);
	nn_params_free(&ps);
}

START_TEST(test_refused)
{
	/* the model has a position convolution, the file none (the tensor --init-from dropped) */
	struct model_config none = config(2, NONE, 0), conv = config(2, CONV, 3);
	save_pretrained(&none, true, false);
	refused(&conv, TENSOR_F32, TENSOR_ERR_SHAPE,
		"lacks the encoder tensor pos_conv.weight ([16,16,3] f32) of the model");
	/* the file has one the model lacks */
	save_pretrained(&conv, true, false);
	refused(&none, TENSOR_F32, TENSOR_ERR_SHAPE,
		"has the encoder tensor pos_conv.weight, which the model lacks");
	/* another kernel: another shape */
	struct model_config conv5 = config(2, CONV, 5);
	refused(&conv5, TENSOR_F32, TENSOR_ERR_SHAPE,
		"the encoder tensor pos_conv.weight is [16,16,3] f32 there, [16,16,5] f32 in the "
		"model");
	/* a learned table where the file has sinusoids (no tensor), and the other way round */
	struct model_config learned = config(1, LEARNED, 0), sinus = config(1, SINUSOIDAL, 0);
	save_pretrained(&sinus, true, false);
	refused(&learned, TENSOR_F32, TENSOR_ERR_SHAPE, "lacks the encoder tensor pos.weight");
	save_pretrained(&learned, false, false);
	refused(&sinus, TENSOR_F32, TENSOR_ERR_SHAPE,
		"has the encoder tensor pos.weight, which the model lacks");
	/* a wider model: every tensor's shape differs, the first named */
	struct model_config wide = learned;
	wide.dim = 32;
	wide.head_hidden = 32;
	refused(&wide, TENSOR_F32, TENSOR_ERR_SHAPE,
		"the encoder tensor embed.weight is [40,16] f32 there, [40,32] f32 in the model");
	/* another dtype */
	refused(&learned, TENSOR_F64, TENSOR_ERR_DTYPE,
		"tensor 'embed.weight' is F32 [40,16] in the file, the model expects F64");
	/* not a checkpoint at all */
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	fputs("not a checkpoint", f);
	fclose(f);
	refused(&learned, TENSOR_F32, TENSOR_ERR_IO, NULL);
	unlink(path);
	refused(&learned, TENSOR_F32, TENSOR_ERR_IO, "cannot open");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("init_from");
	TCase *tc = tu_tcase("init_from");
	tcase_add_checked_fixture(tc, dir_setup, dir_teardown);
	tcase_add_test(tc, test_round_trip_mlm);
	tcase_add_test(tc, test_round_trip_classifier);
	tcase_add_test(tc, test_refused);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
