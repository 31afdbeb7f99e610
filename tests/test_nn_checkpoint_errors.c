/* Checkpoint errors: every corrupt or mismatched file giving its error with
 * the destination untouched, save argument errors, and atomic saves. */
#define _GNU_SOURCE /* nftw, mkdtemp */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint_common.h"

/* ---- corrupt and mismatched files ---------------------------------------------- */

/* The destination for hand-written files: w [2,3] and b [2], f32. */
static void tiny(struct nn_params *ps)
{
	static const struct pspec spec[] = { { "w", 2, { 2, 3 } }, { "b", 1, { 2 } } };
	model_init(ps, TENSOR_F32, 5, spec, 2);
	ps->rng_counter = 77;
}

#define W "'w':{'dtype':'F32','shape':[2,3],'data_offsets':[0,24]}"
#define B "'b':{'dtype':'F32','shape':[2],'data_offsets':[24,32]}"

struct bad_case {
	const char *what, *header;
	size_t data_len;
	int status;
	const char *sub1, *sub2;
};

static const struct bad_case BAD[] = {
	{ "invalid JSON", "{'w':{'dtype':'F32',", 32, TENSOR_ERR_IO, "not valid JSON", NULL },
	{ "JSON not an object", "[1,2,3]", 32, TENSOR_ERR_IO, "not a JSON object", NULL },
	{ "leading space", " {" W "," B "}", 32, TENSOR_ERR_IO, "begin with '{'", NULL },
	{ "bytes after the JSON", "{" W "," B "}xy", 32, TENSOR_ERR_IO, "after the JSON", NULL },
	{ "unknown dtype", "{'w':{'dtype':'F16','shape':[2,3],'data_offsets':[0,12]}," B "}", 20,
	  TENSOR_ERR_IO, "unsupported dtype 'F16'", "'w'" },
	{ "dtype not a string", "{'w':{'dtype':32,'shape':[2,3],'data_offsets':[0,24]}," B "}", 32,
	  TENSOR_ERR_IO, "dtype is not a string", NULL },
	{ "tensor not an object", "{'w':[1,2]," B "}", 32, TENSOR_ERR_IO, "'w' is not an object",
	  NULL },
	{ "unknown key", "{'w':{'dtype':'F32','shape':[2,3],'data_offsets':[0,24],'x':1}," B "}",
	  32, TENSOR_ERR_IO, "unexpected key 'x'", NULL },
	{ "key twice",
	  "{'w':{'dtype':'F32','shape':[2,3],'shape':[2,3],'data_offsets':[0,24]}," B "}", 32,
	  TENSOR_ERR_IO, "'shape' twice", NULL },
	{ "missing key", "{'w':{'dtype':'F32','shape':[2,3]}," B "}", 32, TENSOR_ERR_IO,
	  "lacks 'data_offsets'", NULL },
	{ "shape not an array", "{'w':{'dtype':'F32','shape':6,'data_offsets':[0,24]}," B "}", 32,
	  TENSOR_ERR_IO, "shape is not an array", NULL },
	{ "negative dim", "{'w':{'dtype':'F32','shape':[-2,3],'data_offsets':[0,24]}," B "}", 32,
	  TENSOR_ERR_IO, "shape entry 0 is not a non-negative integer", NULL },
	{ "fractional dim", "{'w':{'dtype':'F32','shape':[2,1.5],'data_offsets':[0,24]}," B "}", 32,
	  TENSOR_ERR_IO, "shape entry 1", NULL },
	{ "dim not a number", "{'w':{'dtype':'F32','shape':[2,'3'],'data_offsets':[0,24]}," B "}",
	  32, TENSOR_ERR_IO, "shape entry 1", NULL },
	{ "too many dims",
	  "{'w':{'dtype':'F32','shape':[1,1,1,1,1,1,1,2,3],'data_offsets':[0,24]}," B "}", 32,
	  TENSOR_ERR_IO, "9 dims", NULL },
	{ "shape not matching data_offsets",
	  "{'w':{'dtype':'F32','shape':[2,2],'data_offsets':[0,24]}," B "}", 32, TENSOR_ERR_IO,
	  "needs 16 bytes", "hold 24" },
	{ "huge shape",
	  "{'w':{'dtype':'F32','shape':[4503599627370496,4503599627370496],'data_offsets':[0,24]}"
	  "," B "}",
	  32, TENSOR_ERR_IO, "needs more than", NULL },
	{ "data_offsets not a pair", "{'w':{'dtype':'F32','shape':[2,3],'data_offsets':[0]}," B "}",
	  32, TENSOR_ERR_IO, "data_offsets is not [begin, end]", NULL },
	{ "data_offsets negative",
	  "{'w':{'dtype':'F32','shape':[2,3],'data_offsets':[-8,16]}," B "}", 32, TENSOR_ERR_IO,
	  "data_offsets is not", NULL },
	{ "data_offsets reversed",
	  "{'w':{'dtype':'F32','shape':[2,3],'data_offsets':[24,0]}," B "}", 32, TENSOR_ERR_IO,
	  "end before they begin", NULL },
	{ "data_offsets out of range",
	  "{" W ",'b':{'dtype':'F32','shape':[2],'data_offsets':[1000,1008]}}", 32, TENSOR_ERR_IO,
	  "[1000,1008] lie beyond the 32 bytes", NULL },
	{ "data_offsets beyond 2^53",
	  "{" W ",'b':{'dtype':'F32','shape':[2],'data_offsets':[1e300,1e300]}}", 32, TENSOR_ERR_IO,
	  "data_offsets is not", NULL },
	{ "overlapping tensors", "{" W ",'b':{'dtype':'F32','shape':[2],'data_offsets':[16,24]}}",
	  32, TENSOR_ERR_IO, "overlap", "'b'" },
	{ "gap between tensors", "{" W ",'b':{'dtype':'F32','shape':[2],'data_offsets':[28,36]}}",
	  36, TENSOR_ERR_IO, "no tensor covers data bytes [24,28)", NULL },
	{ "truncated data", "{" W "," B "}", 28, TENSOR_ERR_IO, "beyond the 28 bytes",
	  "truncated" },
	{ "bytes after the last tensor", "{" W "," B "}", 40, TENSOR_ERR_IO,
	  "8 bytes of data follow the last tensor", NULL },
	{ "tensor twice", "{" W "," W "," B "}", 32, TENSOR_ERR_IO, "'w' appears twice", NULL },
	{ "escaped NUL in a name",
	  "{" W ",'b\\u0000x':{'dtype':'F32','shape':[2],'data_offsets':[24,32]}}", 32,
	  TENSOR_ERR_IO, "escaped NUL", NULL },
	{ "missing parameter", "{" W "}", 24, TENSOR_ERR_ARG, "missing tensor 'b'", "F32 [2]" },
	{ "wrong shape", "{'w':{'dtype':'F32','shape':[3,2],'data_offsets':[0,24]}," B "}", 32,
	  TENSOR_ERR_SHAPE, "'w' has shape [3,2] in the file", "expects [2,3]" },
	{ "wrong dtype",
	  "{'w':{'dtype':'F64','shape':[2,3],'data_offsets':[0,48]},"
	  "'b':{'dtype':'F32','shape':[2],'data_offsets':[48,56]}}",
	  56, TENSOR_ERR_DTYPE, "'w' is F64 [2,3] in the file", "expects F32 [2,3]" },
	{ "unexpected tensor",
	  "{" W "," B ",'x':{'dtype':'F32','shape':[1],'data_offsets':[32,36]}}", 36,
	  TENSOR_ERR_ARG, "unexpected tensor 'x'", NULL },
	{ "optimizer state of an unknown parameter",
	  "{" W "," B ",'optimizer.m.zz':{'dtype':'F32','shape':[1],'data_offsets':[32,36]}}", 36,
	  TENSOR_ERR_ARG, "'optimizer.m.zz'", NULL },
	{ "optimizer state of the wrong shape",
	  "{" W "," B ",'optimizer.v.b':{'dtype':'F32','shape':[1],'data_offsets':[32,36]}}", 36,
	  TENSOR_ERR_SHAPE, "'optimizer.v.b' has shape [1]", "expects [2]" },
	{ "metadata not string-valued", "{'__metadata__':{'step':42}," W "," B "}", 32,
	  TENSOR_ERR_IO, "'step' is not a string", NULL },
	{ "metadata not an object", "{'__metadata__':['a']," W "," B "}", 32, TENSOR_ERR_IO,
	  "__metadata__ is not a JSON object", NULL },
	{ "metadata key twice", "{'__metadata__':{'a':'1','a':'2'}," W "," B "}", 32, TENSOR_ERR_IO,
	  "key 'a' appears twice", NULL },
	{ "metadata twice", "{'__metadata__':{},'__metadata__':{}," W "," B "}", 32, TENSOR_ERR_IO,
	  "__metadata__ appears twice", NULL },
	{ "step not a number", "{'__metadata__':{'step':'4x2'}," W "," B "}", 32, TENSOR_ERR_IO,
	  "'step' is '4x2'", NULL },
	{ "step negative", "{'__metadata__':{'step':'-1'}," W "," B "}", 32, TENSOR_ERR_IO,
	  "'step' is '-1'", NULL },
	{ "rng_counter overflows",
	  "{'__metadata__':{'rng_counter':'18446744073709551616'}," W "," B "}", 32, TENSOR_ERR_IO,
	  "'rng_counter'", NULL },
};

/* Load path into a fresh tiny model (and optimizer), expect the failure and
 * check that nothing changed. */
static void expect_load_error(const char *what, const char *path, bool with_opt, int status,
			      const char *sub1, const char *sub2)
{
	struct nn_params ps;
	struct nn_adamw o;
	tiny(&ps);
	adamw_random(&o, &ps, 9, 4);
	struct blob p0 = state_of(&ps, NULL), s0 = state_of(&ps, &o);
	int64_t step = -5;
	tensor_clear_error();
	int rc = nn_checkpoint_load(path, &ps, with_opt ? &o : NULL, &step);
	const char *msg = tensor_last_error();
	ck_assert_msg(rc == status && tensor_last_status() == status,
		      "%s: rc %d, status %d, want %d: %s", what, rc, tensor_last_status(), status,
		      msg);
	ck_assert_msg(strstr(msg, "nn_checkpoint_load: ") && strstr(msg, path),
		      "%s: message lacks the op or file: %s", what, msg);
	ck_assert_msg(strstr(msg, sub1), "%s: message '%s' lacks '%s'", what, msg, sub1);
	ck_assert_msg(!sub2 || strstr(msg, sub2), "%s: message '%s' lacks '%s'", what, msg, sub2);
	tensor_clear_error();
	assert_same(what, p0, state_of(&ps, NULL));
	assert_same(what, s0, state_of(&ps, &o));
	ck_assert_msg(step == -5 && ps.rng_counter == 77 && ps.seed == 5 && o.step == 4,
		      "%s: step, rng or optimizer step changed", what);
	nn_adamw_free(&o);
	nn_params_free(&ps);
}

START_TEST(test_handwritten_file_loads)
{
	/* the base the corrupt cases vary: valid, no metadata, any key order,
	 * padded with spaces, other optimizer state ignored */
	char path[256];
	in_dir(path, "ok.safetensors");
	const char *headers[] = {
		"{" W "," B "}",
		"{" B ",'__metadata__':{'format':'pt'}," W "}     ",
		"{" W "," B
		",'optimizer.sgd.buf':{'dtype':'I64','shape':[0],'data_offsets':[32,32]}}",
	};
	for (size_t k = 0; k < sizeof headers / sizeof headers[0]; k++) {
		write_st(path, headers[k], 32);
		struct nn_params ps;
		tiny(&ps);
		int64_t step = -1;
		ck_assert_msg(nn_checkpoint_load(path, &ps, NULL, &step) == TENSOR_OK, "%s",
			      tensor_last_error());
		ck_assert_int_eq(step, 0);	       /* no "step": 0 */
		ck_assert_uint_eq(ps.rng_counter, 77); /* no "rng_counter": unchanged */
		static const double want_w[] = { 1, 2, 3, 4, 5, 6 }, want_b[] = { 7, 8 };
		tu_assert_close(ps.items[0].value, want_w, 6, 0, 0);
		tu_assert_close(ps.items[1].value, want_b, 2, 0, 0);
		nn_params_free(&ps);
	}
}
END_TEST

START_TEST(test_corrupt_headers)
{
	char path[256];
	in_dir(path, "bad.safetensors");
	for (size_t k = 0; k < sizeof BAD / sizeof BAD[0]; k++) {
		write_st(path, BAD[k].header, BAD[k].data_len);
		expect_load_error(BAD[k].what, path, false, BAD[k].status, BAD[k].sub1,
				  BAD[k].sub2);
		expect_load_error(BAD[k].what, path, true, BAD[k].status, BAD[k].sub1, BAD[k].sub2);
	}
}
END_TEST

START_TEST(test_corrupt_files)
{
	char path[256];
	in_dir(path, "bad.safetensors");
	expect_load_error("missing file", path, false, TENSOR_ERR_IO, "cannot open",
			  "No such file");
	write_all(path, "", 0);
	expect_load_error("empty file", path, false, TENSOR_ERR_IO, "0 bytes are too short", NULL);
	write_all(path, "\x10\0\0\0\0", 5);
	expect_load_error("truncated header size", path, false, TENSOR_ERR_IO,
			  "5 bytes are too short", NULL);
	write_all(path, "\xe8\x03\0\0\0\0\0\0{}", 10);
	expect_load_error("header size beyond the file", path, false, TENSOR_ERR_IO,
			  "header size 1000 exceeds the 2 bytes", "truncated");
	write_all(path, "\x01\xe1\xf5\x05\0\0\0\0{}", 10); /* 100,000,001 */
	expect_load_error("header size over the limit", path, false, TENSOR_ERR_IO,
			  "exceeds the limit of 100000000", NULL);
	write_all(path, "\xff\xff\xff\xff\xff\xff\xff\xff{}", 10);
	expect_load_error("header size 2^64-1", path, false, TENSOR_ERR_IO, "exceeds the limit",
			  NULL);
	write_all(path, "\x01\0\0\0\0\0\0\0{", 9);
	expect_load_error("one-byte header", path, false, TENSOR_ERR_IO, "not valid JSON", NULL);
	write_all(path, "\x08\0\0\0\0\0\0\0{'w\xff':1}", 16);
	expect_load_error("invalid UTF-8", path, false, TENSOR_ERR_IO, "byte 3 is not valid UTF-8",
			  NULL);
	write_all(path, "\x08\0\0\0\0\0\0\0{\"\0\":1} ", 16);
	expect_load_error("NUL in the header", path, false, TENSOR_ERR_IO, "byte 2 is a NUL", NULL);
	write_all(path, "\x08\0\0\0\0\0\0\0{\"\xed\xa0\x80\":1}", 16); /* a UTF-16 surrogate */
	expect_load_error("surrogate in UTF-8", path, false, TENSOR_ERR_IO, "not valid UTF-8",
			  NULL);
	expect_load_error("a directory", dir, false, TENSOR_ERR_IO, "not a regular file", NULL);
	/* nesting deeper than cJSON's limit (1000) is refused, not a stack overflow */
	enum { DEPTH = 5000 };
	char *deep = malloc(2 * DEPTH + 32);
	int k = sprintf(deep, "{'__metadata__':");
	for (int i = 0; i < DEPTH; i++)
		deep[k++] = '[';
	for (int i = 0; i < DEPTH; i++)
		deep[k++] = ']';
	strcpy(deep + k, "}");
	write_st(path, deep, 0);
	free(deep);
	expect_load_error("deep nesting", path, false, TENSOR_ERR_IO, "not valid JSON", NULL);
}
END_TEST

START_TEST(test_optimizer_mismatch)
{
	char path[256];
	in_dir(path, "opt.safetensors");
	/* m without v: fine to skip without an optimizer, an error with one */
	const char *h = "{'__metadata__':{'optimizer_step':'3'}," W "," B
			",'optimizer.m.w':{'dtype':'F32','shape':[2,3],'data_offsets':[32,56]},"
			"'optimizer.m.b':{'dtype':'F32','shape':[2],'data_offsets':[56,64]},"
			"'optimizer.v.b':{'dtype':'F32','shape':[2],'data_offsets':[64,72]}}";
	write_st(path, h, 72);
	struct nn_params ps;
	tiny(&ps);
	ck_assert_int_eq(nn_checkpoint_load(path, &ps, NULL, NULL), TENSOR_OK);
	nn_params_free(&ps);
	expect_load_error("incomplete optimizer state", path, true, TENSOR_ERR_ARG,
			  "incomplete optimizer state", "'optimizer.v.w'");
	/* state without its step */
	h = "{" W "," B ",'optimizer.m.w':{'dtype':'F32','shape':[2,3],'data_offsets':[32,56]},"
	    "'optimizer.v.w':{'dtype':'F32','shape':[2,3],'data_offsets':[56,80]},"
	    "'optimizer.m.b':{'dtype':'F32','shape':[2],'data_offsets':[80,88]},"
	    "'optimizer.v.b':{'dtype':'F32','shape':[2],'data_offsets':[88,96]}}";
	write_st(path, h, 96);
	expect_load_error("optimizer state without a step", path, true, TENSOR_ERR_IO,
			  "no \"optimizer_step\"", NULL);
	/* an optimizer of another parameter list */
	struct nn_params other;
	struct nn_adamw o;
	tiny(&ps);
	tiny(&other);
	ck_assert_int_eq(nn_adamw_init(&o, &other, 1e-3, 0.9, 0.999, 1e-8, 0), TENSOR_OK);
	tu_assert_error(nn_checkpoint_load(path, &ps, &o, NULL) < 0, TENSOR_ERR_ARG, path,
			"belongs to another nn_params");
	tu_assert_error(nn_checkpoint_save(path, &ps, &o, NULL, 0) < 0, TENSOR_ERR_ARG, path,
			"belongs to another nn_params");
	nn_adamw_free(&o);
	/* a parameter added after the optimizer was created */
	ck_assert_int_eq(nn_adamw_init(&o, &ps, 1e-3, 0.9, 0.999, 1e-8, 0), TENSOR_OK);
	const int64_t one = 1;
	ck_assert(nn_param_new(&ps, "late", 1, &one, false));
	tu_assert_error(nn_checkpoint_save(path, &ps, &o, NULL, 0) < 0, TENSOR_ERR_ARG, path,
			"no state for 'late'");
	nn_adamw_free(&o);
	/* the same on load: a checkpoint with 'late' and its state, into an
	 * optimizer made before 'late' existed */
	ck_assert_int_eq(nn_adamw_init(&o, &ps, 1e-3, 0.9, 0.999, 1e-8, 0), TENSOR_OK);
	ck_assert_int_eq(nn_checkpoint_save(path, &ps, &o, NULL, 0), TENSOR_OK);
	nn_adamw_free(&o);
	nn_params_free(&ps);
	tiny(&ps);
	ck_assert_int_eq(nn_adamw_init(&o, &ps, 1e-3, 0.9, 0.999, 1e-8, 0), TENSOR_OK);
	ck_assert(nn_param_new(&ps, "late", 1, &one, false));
	tu_assert_error(nn_checkpoint_load(path, &ps, &o, NULL) < 0, TENSOR_ERR_STATE, path,
			"no state for 'late'");
	nn_adamw_free(&o);
	nn_params_free(&ps);
	nn_params_free(&other);
}
END_TEST

/* A parameter saved by the autograd tape for a pending backward must not be
 * overwritten: the load is refused before anything changes. */
/* A file of w, b and AdamW's state (values 1, 2, 3, ...) with metadata meta ("'k':'v',"
 * entries) and the optimizer step. */
static void write_adamw_file(const char *path, const char *meta, const char *step)
{
	char h[1024];
	snprintf(h, sizeof h,
		 "{'__metadata__':{%s'optimizer_step':'%s'}," W "," B
		 ",'optimizer.m.w':{'dtype':'F32','shape':[2,3],'data_offsets':[32,56]},"
		 "'optimizer.v.w':{'dtype':'F32','shape':[2,3],'data_offsets':[56,80]},"
		 "'optimizer.m.b':{'dtype':'F32','shape':[2],'data_offsets':[80,88]},"
		 "'optimizer.v.b':{'dtype':'F32','shape':[2],'data_offsets':[88,96]}}",
		 meta, step);
	write_st(path, h, 96);
}

/* Loaded optimizer state is checked: a negative second moment or a non-finite moment is
 * refused naming the tensor, the first bad element and its value (a weights-only load
 * skips the state); so are update counts over 2^53 and recorded settings out of range. */
START_TEST(test_optimizer_state_values)
{
	char path[256];
	in_dir(path, "opt.safetensors");
	write_adamw_file(path, "'optimizer_beta2':'0.999','optimizer_eps':'1e-08',", "3");
	struct nn_params ps;
	struct nn_adamw o;
	tiny(&ps);
	ck_assert_int_eq(nn_adamw_init(&o, &ps, 1e-3, 0.9, 0.999, 1e-8, 0), TENSOR_OK);
	ck_assert_msg(nn_checkpoint_load(path, &ps, &o, NULL) == TENSOR_OK, "%s",
		      tensor_last_error());
	ck_assert_int_eq(o.step, 3);
	/* -0 is not negative */
	float v = -0.0f;
	poke_data(path, 56 + 4 * 5, &v, 4);
	ck_assert_msg(nn_checkpoint_load(path, &ps, &o, NULL) == TENSOR_OK, "%s",
		      tensor_last_error());
	nn_adamw_free(&o);
	nn_params_free(&ps);
	v = -0.25f; /* v.w [1,2] */
	poke_data(path, 56 + 4 * 5, &v, 4);
	expect_load_error(
	    "negative v", path, true, TENSOR_ERR_ARG,
	    "tensor 'optimizer.v.w' holds 1 negative values of 6, the first at [1,2]: "
	    "-0.25",
	    "never negative");
	tiny(&ps);
	ck_assert_msg(nn_checkpoint_load(path, &ps, NULL, NULL) == TENSOR_OK, "%s",
		      tensor_last_error());
	nn_params_free(&ps);
	write_adamw_file(path, "", "3");
	v = NAN; /* m.b [1] */
	poke_data(path, 80 + 4, &v, 4);
	expect_load_error("NaN in m", path, true, TENSOR_ERR_ARG,
			  "tensor 'optimizer.m.b' holds 1 non-finite values (NaN or inf) of 2, the "
			  "first at [1]: nan",
			  NULL);
	static const struct {
		const char *meta, *sub;
	} bad[] = {
		{ "'optimizer_beta2':'1',", "'optimizer_beta2' is '1', expected a finite number in "
					    "[0, 1)" },
		{ "'optimizer_beta1':'-0.1',", "'optimizer_beta1' is '-0.1'" },
		{ "'optimizer_eps':'0',", "'optimizer_eps' is '0', expected a finite number > 0" },
		{ "'optimizer_lr':'nan',", "'optimizer_lr' is 'nan'" },
		{ "'optimizer_weight_decay':'0.1x',", "'optimizer_weight_decay' is '0.1x'" },
	};
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		write_adamw_file(path, bad[k].meta, "3");
		expect_load_error(bad[k].meta, path, true, TENSOR_ERR_IO, bad[k].sub, NULL);
	}
	/* the update count: 2^53 loads, one more does not */
	write_adamw_file(path, "", "9007199254740992");
	tiny(&ps);
	ck_assert_int_eq(nn_adamw_init(&o, &ps, 1e-3, 0.9, 0.999, 1e-8, 0), TENSOR_OK);
	ck_assert_msg(nn_checkpoint_load(path, &ps, &o, NULL) == TENSOR_OK, "%s",
		      tensor_last_error());
	nn_adamw_free(&o);
	nn_params_free(&ps);
	write_adamw_file(path, "", "9007199254740993");
	expect_load_error("a step over 2^53", path, true, TENSOR_ERR_IO, "'optimizer_step'",
			  "[0, 9007199254740992]");
}
END_TEST

START_TEST(test_load_refuses_tape_saved_parameter)
{
	char path[256];
	in_dir(path, "m.safetensors");
	struct nn_params a, b;
	model(&a, TENSOR_F32, 1);
	model(&b, TENSOR_F32, 2);
	ck_assert_int_eq(nn_checkpoint_save(path, &a, NULL, NULL, 0), TENSOR_OK);
	struct tensor *w = b.items[5].value; /* emb.weight, the last one copied */
	struct tensor *y = ag_mul(w, w);     /* saves w for backward */
	ck_assert(y != NULL);
	struct blob before = state_of(&b, NULL);
	tu_assert_error(nn_checkpoint_load(path, &b, NULL, NULL) < 0, TENSOR_ERR_STATE, path,
			"'emb.weight'");
	assert_same("params", before, state_of(&b, NULL));
	ag_tape_reset();
	ck_assert_int_eq(nn_checkpoint_load(path, &b, NULL, NULL), TENSOR_OK);
	assert_same("params", state_of(&a, NULL), state_of(&b, NULL));
	nn_params_free(&a);
	nn_params_free(&b);
}
END_TEST

/* ---- saving: arguments and atomicity ----------------------------------------------- */

START_TEST(test_save_errors)
{
	char path[256];
	in_dir(path, "s.safetensors");
	struct nn_params a;
	model(&a, TENSOR_F32, 1);
	tu_assert_error(nn_checkpoint_save(NULL, &a, NULL, NULL, 0) < 0, TENSOR_ERR_ARG,
			"nn_checkpoint_save", "no path");
	tu_assert_error(nn_checkpoint_save("", &a, NULL, NULL, 0) < 0, TENSOR_ERR_ARG,
			"nn_checkpoint_save", "no path");
	tu_assert_error(nn_checkpoint_save(path, NULL, NULL, NULL, 0) < 0, TENSOR_ERR_ARG, path,
			"ps is NULL");
	tu_assert_error(nn_checkpoint_save(path, &a, NULL, NULL, -1) < 0, TENSOR_ERR_ARG, path,
			"step -1 is negative");
	tu_assert_error(nn_checkpoint_load(path, NULL, NULL, NULL) < 0, TENSOR_ERR_ARG, path,
			"ps is NULL");
	tu_assert_error(nn_checkpoint_load(NULL, &a, NULL, NULL) < 0, TENSOR_ERR_ARG, "(null)",
			"path is NULL");
	ck_assert(!exists(path));
	const int64_t one = 1;
	struct nn_params r;
	for (int k = 0; k < 2; k++) { /* names a loader could not tell apart */
		const char *name = k ? "optimizer.m.x" : "__metadata__";
		ck_assert_int_eq(nn_params_init(&r, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
		ck_assert(nn_param_new(&r, name, 1, &one, false));
		tu_assert_error(nn_checkpoint_save(path, &r, NULL, NULL, 0) < 0, TENSOR_ERR_ARG,
				name, "is reserved");
		nn_params_free(&r);
	}
	ck_assert(!exists(path));
	/* an empty list is a valid (metadata-only) checkpoint */
	ck_assert_int_eq(nn_params_init(&r, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	ck_assert_int_eq(nn_checkpoint_save(path, &r, NULL, "[]", 4), TENSOR_OK);
	int64_t step = 0;
	ck_assert_int_eq(nn_checkpoint_load(path, &r, NULL, &step), TENSOR_OK);
	ck_assert_int_eq(step, 4);
	tu_assert_error(nn_checkpoint_load(path, &a, NULL, NULL) < 0, TENSOR_ERR_ARG, path,
			"missing tensor 'layers.0.weight'");
	nn_params_free(&r);
	nn_params_free(&a);
}
END_TEST

START_TEST(test_save_to_missing_directory)
{
	char path[256];
	in_dir(path, "no/such/dir/m.safetensors");
	struct nn_params a;
	model(&a, TENSOR_F32, 1);
	tu_assert_error(nn_checkpoint_save(path, &a, NULL, NULL, 0) < 0, TENSOR_ERR_IO, path,
			"cannot create");
	char sub[256];
	ck_assert(!exists(in_dir(sub, "no")));
	nn_params_free(&a);
}
END_TEST

/* Every way a save can fail leaves the previous checkpoint byte for byte. */
START_TEST(test_failed_save_keeps_old_checkpoint)
{
	char path[256];
	in_dir(path, "m.safetensors");
	struct nn_params a, big;
	model(&a, TENSOR_F32, 1);
	model(&big, TENSOR_F64, 2);
	ck_assert_int_eq(nn_checkpoint_save(path, &a, NULL, "{\"v\":1}", 1), TENSOR_OK);
	struct blob old = file_blob(path);

	/* invalid config: refused before writing */
	tu_assert_error(nn_checkpoint_save(path, &big, NULL, "{", 2) < 0, TENSOR_ERR_ARG, path,
			"config_json");
	/* the temporary file cannot be created: its directory does not exist */
	char nodir[256];
	in_dir(nodir, "missing/m.safetensors");
	tu_assert_error(nn_checkpoint_save(nodir, &big, NULL, NULL, 2) < 0, TENSOR_ERR_IO, nodir,
			"cannot create");
	/* the disk fills up mid-write (a file size limit stands in for it) */
	struct rlimit lim, small;
	ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &lim), 0);
	small = lim;
	small.rlim_cur = 8 + le64(old.p) + 8; /* past big's header, inside its data */
	void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
	int rc = nn_checkpoint_save(path, &big, NULL, NULL, 2);
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
	signal(SIGXFSZ, old_handler);
	tu_assert_error(rc < 0, TENSOR_ERR_IO, path, "cannot write");
	ck_assert_int_eq(files_in_dir(), 1); /* no temporary file left */
	struct blob now = file_blob(path);
	ck_assert(now.n == old.n && memcmp(now.p, old.p, old.n) == 0);
	free(now.p);
	/* the file cannot be renamed over: path is a directory */
	char dpath[256];
	in_dir(dpath, "adir");
	ck_assert_int_eq(mkdir(dpath, 0700), 0);
	char inner[300];
	snprintf(inner, sizeof inner, "%s/keep", dpath);
	write_all(inner, "x", 1);
	tu_assert_error(nn_checkpoint_save(dpath, &big, NULL, NULL, 2) < 0, TENSOR_ERR_IO, dpath,
			"cannot rename");
	ck_assert_int_eq(files_in_dir(), 2); /* m.safetensors and adir, no temporary file */
	/* through all that the old checkpoint still loads */
	assert_same("old checkpoint", old, file_blob(path));
	struct nn_params b;
	model(&b, TENSOR_F32, 3);
	ck_assert_int_eq(nn_checkpoint_load(path, &b, NULL, NULL), TENSOR_OK);
	assert_same("params", state_of(&a, NULL), state_of(&b, NULL));
	nn_params_free(&a);
	nn_params_free(&b);
	nn_params_free(&big);
}
END_TEST

/* A state the loader would refuse is not saved: NaN or inf in a parameter, a moment or the
 * moving average, or a negative second moment, is an error naming the tensor and its first
 * bad element; the previous file stays byte for byte and no temporary file is left. */
START_TEST(test_save_refuses_bad_values)
{
	char path[256], fresh[256];
	in_dir(path, "m.safetensors");
	in_dir(fresh, "fresh.safetensors");
	struct nn_params a;
	struct nn_adamw o;
	struct nn_ema e;
	model(&a, TENSOR_F32, 1);
	adamw_random(&o, &a, 3, 5);
	ck_assert_int_eq(nn_ema_init(&e, &a, 0.9), TENSOR_OK);
	ck_assert_int_eq(nn_checkpoint_save_run(path, &a, &o, &e, NULL, NULL, 5), TENSOR_OK);
	struct blob old = file_blob(path);
	const struct {
		struct tensor *t;
		float value;
		const char *sub;
	} bad[] = {
		{ a.items[0].value, NAN,
		  "tensor 'layers.0.weight' holds 1 non-finite values (NaN or "
		  "inf) of 15, the first at [1,2]: nan" },
		{ o.m[5], INFINITY, "tensor 'optimizer.m.emb.weight' holds 1 non-finite" },
		{ o.v[0], -1.0f,
		  "tensor 'optimizer.v.layers.0.weight' holds 1 negative values of "
		  "15, the first at [1,2]: -1" },
		{ e.shadow[2], -INFINITY, "tensor 'optimizer.ema.norm.weight' holds 1 non-finite" },
	};
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		float *p = tensor_data(bad[k].t);
		float keep = p[7 % tensor_numel(bad[k].t)];
		p[7 % tensor_numel(bad[k].t)] = bad[k].value;
		tu_assert_error(nn_checkpoint_save_run(path, &a, &o, &e, NULL, NULL, 6) < 0,
				TENSOR_ERR_ARG, bad[k].sub,
				"not saved: the file keeps its previous contents");
		tu_assert_error(nn_checkpoint_save_run(fresh, &a, &o, &e, NULL, NULL, 6) < 0,
				TENSOR_ERR_ARG, bad[k].sub, "not saved: no file written");
		ck_assert_int_eq(files_in_dir(), 1); /* no temporary file, no fresh file */
		struct blob now = file_blob(path);
		ck_assert_msg(now.n == old.n && memcmp(now.p, old.p, old.n) == 0,
			      "%s: the old file changed", bad[k].sub);
		free(now.p);
		p[7 % tensor_numel(bad[k].t)] = keep;
	}
	/* a negative value elsewhere than in v is fine */
	((float *)tensor_data(o.m[0]))[0] = -3;
	ck_assert_msg(nn_checkpoint_save_run(path, &a, &o, &e, NULL, NULL, 6) == TENSOR_OK, "%s",
		      tensor_last_error());
	free(old.p);
	nn_ema_free(&e);
	nn_adamw_free(&o);
	nn_params_free(&a);
}
END_TEST

/* nn_checkpoint_remove_temps removes what killed saves of a path left (path.tmp.<pid>.<n>
 * of a process that no longer runs) and nothing else: not the temporary files of a running
 * process, of this one or of another path, not names that only look alike. */
START_TEST(test_remove_temps)
{
	pid_t child = fork();
	ck_assert(child >= 0);
	if (child == 0)
		_exit(0);
	ck_assert_int_eq(waitpid(child, NULL, 0), child); /* child: a pid that no longer runs */
	char path[256], name[300];
	in_dir(path, "m.safetensors");
	const char *fmt_gone[] = { "%s.tmp.%ld.0", "%s.tmp.%ld.17" };
	const char *fmt_kept[] = { "%s.tmp.%ld.0.bak", "%s.tmp.%ld.", "%s.tmp.%ldx.1",
				   "%s.tmp.%ld" };
	for (int k = 0; k < 2; k++) {
		snprintf(name, sizeof name, fmt_gone[k], path, (long)child);
		write_all(name, "x", 1);
	}
	for (int k = 0; k < 4; k++) {
		snprintf(name, sizeof name, fmt_kept[k], path, (long)child);
		write_all(name, "x", 1);
	}
	snprintf(name, sizeof name, "%s.tmp.%ld.2", path, (long)getpid()); /* this process */
	write_all(name, "x", 1);
	snprintf(name, sizeof name, "%s.tmp.%ld.2", path, (long)getppid()); /* a running one */
	write_all(name, "x", 1);
	snprintf(name, sizeof name, "%s/best.safetensors.tmp.%ld.0", dir, (long)child);
	write_all(name, "x", 1);
	write_all(path, "x", 1);
	ck_assert_int_eq(files_in_dir(), 10);
	ck_assert_int_eq(nn_checkpoint_remove_temps(path), 2);
	ck_assert_int_eq(files_in_dir(), 8);
	for (int k = 0; k < 2; k++) {
		snprintf(name, sizeof name, fmt_gone[k], path, (long)child);
		ck_assert_msg(!exists(name), "%s left", name);
	}
	ck_assert_int_eq(nn_checkpoint_remove_temps(path), 0);
	char none[256];
	ck_assert_int_eq(nn_checkpoint_remove_temps(in_dir(none, "no/such.safetensors")), 0);
	tu_assert_error(nn_checkpoint_remove_temps(NULL) < 0, TENSOR_ERR_ARG,
			"nn_checkpoint_remove_temps", "no path");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("nn_checkpoint_errors");
	TCase *tc = tcase("corrupt");
	tcase_add_test(tc, test_handwritten_file_loads);
	tcase_add_test(tc, test_corrupt_headers);
	tcase_add_test(tc, test_corrupt_files);
	tcase_add_test(tc, test_optimizer_mismatch);
	tcase_add_test(tc, test_optimizer_state_values);
	tcase_add_test(tc, test_load_refuses_tape_saved_parameter);
	suite_add_tcase(s, tc);
	tc = tcase("save");
	tcase_add_test(tc, test_save_errors);
	tcase_add_test(tc, test_save_to_missing_directory);
	tcase_add_test(tc, test_failed_save_keeps_old_checkpoint);
	tcase_add_test(tc, test_save_refuses_bad_values);
	tcase_add_test(tc, test_remove_temps);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
