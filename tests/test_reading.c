/* How a run read text, as its checkpoints keep it (examples/common/reading.c): what a
 * tokenizer reads is written and read back exactly; a file without it (an older one) says so;
 * a malformed entry, a contradicting --n and another vocabulary end the program (status 1)
 * with a message naming the file and both values; --keep-tail given reads as it says. */
#define _GNU_SOURCE /* mkdtemp */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/flags.h"
#include "common/reading.h"
#include "nn.h"
#include "testutil.h"

static char dir[64], path[128], err_path[128];

static void dir_setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/cformer-reading-XXXXXX");
	ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
	snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
	snprintf(err_path, sizeof err_path, "%s/stderr.txt", dir);
}

static void dir_teardown(void)
{
	unlink(path);
	unlink(err_path);
	rmdir(dir);
}

/* A checkpoint of one parameter with the metadata entry "text" (NULL: none). */
static void save_with(const char *text)
{
	struct nn_params ps;
	ck_assert_int_eq(nn_params_init(&ps, TENSOR_F32, TENSOR_CPU, 1), TENSOR_OK);
	ck_assert_ptr_nonnull(nn_param_new(&ps, "w", 1, (int64_t[]){ 2 }, false));
	struct nn_checkpoint_meta meta[] = { { "text", text } };
	ck_assert_int_eq(nn_checkpoint_save_meta(path, &ps, NULL, NULL, meta, text ? 1 : 0, 1),
			 TENSOR_OK);
	nn_params_free(&ps);
}

static struct text_tokenizer bytes_tok(int64_t keep_tail)
{
	struct text_tokenizer tok;
	ck_assert_int_eq(text_byte_init(&tok), TENSOR_OK);
	tok.keep_tail = keep_tail;
	return tok;
}

/* The flags of a program with --n and --keep-tail. */
static int64_t flag_n, flag_keep_tail;
static struct flag flags[] = {
	FLAG_DEF_INT("n", &flag_n, 2, 1 << 20, "N", "tokens"),
	FLAG_DEF_INT("keep-tail", &flag_keep_tail, 0, 1 << 20, "T", "tail"),
};

/* Run fn in a child with stderr to err_path: its exit status; *msg the text it wrote. */
static int in_child(void (*fn)(void), char *msg, size_t len)
{
	fflush(NULL);
	pid_t pid = fork();
	ck_assert(pid >= 0);
	if (pid == 0) {
		ck_assert_ptr_nonnull(freopen(err_path, "w", stderr));
		fn();
		fflush(stderr);
		_exit(0);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	FILE *f = fopen(err_path, "r");
	size_t n = f ? fread(msg, 1, len - 1, f) : 0;
	msg[n] = '\0';
	if (f)
		fclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(test_round_trip)
{
	struct text_tokenizer tok = bytes_tok(20);
	char *json = reading_json("prog", &tok, 64);
	save_with(json);
	struct reading r, want = reading_of("prog", &tok, 64);
	ck_assert(reading_load("prog", path, "checkpoint", &r));
	ck_assert_str_eq(r.tokenizer, "byte");
	ck_assert_int_eq(r.n, 64);
	ck_assert_int_eq(r.keep_tail, 20);
	ck_assert(!r.lowercase);
	ck_assert_uint_eq(r.vocab_hash, want.vocab_hash);
	uint64_t h;
	ck_assert_int_eq(text_tokenizer_hash(&tok, &h), TENSOR_OK);
	ck_assert_uint_eq(r.vocab_hash, h);
	char hex[20];
	snprintf(hex, sizeof hex, "\"%016llx\"", (unsigned long long)h);
	ck_assert_msg(strstr(json, hex), "%s lacks %s", json, hex);
	/* following it: the tokenizer reads with the file's keep_tail at its n */
	struct text_tokenizer other = bytes_tok(0);
	ck_assert_int_eq(reading_follow("prog", path, &other, 64, flags, 2), 64);
	ck_assert_int_eq(other.keep_tail, 20);
	/* --keep-tail given: read as it says */
	flags[1].set = true, flag_keep_tail = 5;
	ck_assert_int_eq(reading_follow("prog", path, &other, 64, flags, 2), 64);
	ck_assert_int_eq(other.keep_tail, 5);
	flags[1].set = false;
	/* --n given, the same as the file's: nothing to refuse */
	flags[0].set = true, flag_n = 64;
	ck_assert_int_eq(reading_follow("prog", path, &other, 64, flags, 2), 64);
	flags[0].set = false;
	free(json);
	text_tokenizer_free(&tok);
}
END_TEST

START_TEST(test_older_file)
{
	save_with(NULL);
	struct reading r;
	ck_assert(!reading_load("prog", path, "checkpoint", &r));
	struct text_tokenizer tok = bytes_tok(7);
	ck_assert_int_eq(reading_follow("prog", path, &tok, 32, flags, 2), 32);
	ck_assert_int_eq(tok.keep_tail, 7); /* today's default, as the caller set it */
}
END_TEST

static const char *bad_text;
static void load_bad(void)
{
	struct reading r;
	reading_load("prog", path, "checkpoint", &r);
}

START_TEST(test_malformed)
{
	static const char *const bad[] = {
		"not json",
		"{\"tokenizer\":\"sentencepiece\",\"n\":8,\"keep_tail\":0,\"lowercase\":true,"
		"\"vocab_fnv1a64\":\"0123456789abcdef\"}",
		"{\"tokenizer\":\"byte\",\"n\":1,\"keep_tail\":0,\"lowercase\":true,"
		"\"vocab_fnv1a64\":\"0123456789abcdef\"}",
		"{\"tokenizer\":\"byte\",\"n\":8,\"keep_tail\":-1,\"lowercase\":true,"
		"\"vocab_fnv1a64\":\"0123456789abcdef\"}",
		"{\"tokenizer\":\"byte\",\"n\":8.5,\"keep_tail\":0,\"lowercase\":true,"
		"\"vocab_fnv1a64\":\"0123456789abcdef\"}",
		"{\"tokenizer\":\"byte\",\"n\":8,\"keep_tail\":0,\"lowercase\":1,"
		"\"vocab_fnv1a64\":\"0123456789abcdef\"}",
		"{\"tokenizer\":\"byte\",\"n\":8,\"keep_tail\":0,\"lowercase\":true,"
		"\"vocab_fnv1a64\":\"0123456789ABCDEF\"}",
		"{\"tokenizer\":\"byte\",\"n\":8,\"keep_tail\":0,\"lowercase\":true,"
		"\"vocab_fnv1a64\":\"0123\"}",
		"{\"tokenizer\":\"byte\",\"n\":8,\"keep_tail\":0,\"lowercase\":true}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		bad_text = bad[i];
		save_with(bad_text);
		char msg[2048], want[256];
		ck_assert_int_eq(in_child(load_bad, msg, sizeof msg), 1);
		snprintf(want, sizeof want, "prog: --checkpoint: %s: its \"text\" metadata '",
			 path);
		ck_assert_msg(strstr(msg, want) && strstr(msg, "is not how a run read text"),
			      "%s: %s", bad_text, msg);
	}
	/* a file that cannot be read names the flag and the file */
	unlink(path);
	char msg[2048], want[256];
	ck_assert_int_eq(in_child(load_bad, msg, sizeof msg), 1);
	snprintf(want, sizeof want, "prog: --checkpoint: nn_checkpoint_meta: %s: cannot open",
		 path);
	ck_assert_msg(strstr(msg, want), "%s", msg);
}
END_TEST

static void follow_n(void)
{
	struct text_tokenizer tok = bytes_tok(0);
	flags[0].set = true, flag_n = 32;
	reading_follow("prog", path, &tok, 64, flags, 2);
}

static void follow_max_len(void)
{
	struct text_tokenizer tok = bytes_tok(0);
	reading_follow("prog", path, &tok, 128, flags, 2);
}

static void follow_wordpiece(void)
{
	struct text_tokenizer tok;
	const char *srcdir = getenv("srcdir");
	char vocab[4096];
	snprintf(vocab, sizeof vocab, "%s/tests/data/tokenizer/bert-base-uncased-vocab.txt",
		 srcdir ? srcdir : ".");
	ck_assert_int_eq(text_wordpiece_load(&tok, vocab), TENSOR_OK);
	reading_check_tokenizer("prog", path, &tok, flags, 2, "init-from");
}

static void follow_other_hash(void)
{
	struct text_tokenizer tok = bytes_tok(0);
	reading_check_tokenizer("prog", path, &tok, flags, 2, "init-from");
}

START_TEST(test_refused)
{
	struct text_tokenizer tok = bytes_tok(3);
	char *json = reading_json("prog", &tok, 64), msg[2048], want[512];
	save_with(json);
	ck_assert_int_eq(in_child(follow_n, msg, sizeof msg), 1);
	snprintf(want, sizeof want,
		 "prog: --n: 32 contradicts %s, whose run read 64 tokens per example", path);
	ck_assert_msg(strstr(msg, want), "%s", msg);
	ck_assert_int_eq(in_child(follow_max_len, msg, sizeof msg), 1);
	snprintf(want, sizeof want,
		 "prog: %s: its run read 64 tokens per example, but its model reads 128", path);
	ck_assert_msg(strstr(msg, want), "%s", msg);
	ck_assert_int_eq(in_child(follow_wordpiece, msg, sizeof msg), 1);
	snprintf(want, sizeof want,
		 "prog: %s was trained with the byte tokenizer, this run's is wordpiece", path);
	ck_assert_msg(strstr(msg, want), "%s", msg);
	/* the same tokenizer with another vocabulary hash: a file of a changed vocabulary */
	char *p = strstr(json, "\"vocab_fnv1a64\":\"") + strlen("\"vocab_fnv1a64\":\"");
	*p = *p == '0' ? '1' : '0';
	save_with(json);
	ck_assert_int_eq(in_child(follow_other_hash, msg, sizeof msg), 1);
	snprintf(want, sizeof want, "prog: %s was trained with another vocabulary (FNV-1a 64 ",
		 path);
	ck_assert_msg(strstr(msg, want) && strstr(msg, "), not this one ("), "%s", msg);
	/* a file without a reading: a notice naming the flag, and on */
	save_with(NULL);
	ck_assert_int_eq(in_child(follow_other_hash, msg, sizeof msg), 0);
	snprintf(want, sizeof want,
		 "prog: --init-from %s does not say how its run read text (saved before "
		 "checkpoints kept it): its vocabulary is unchecked\n",
		 path);
	ck_assert_str_eq(msg, want);
	free(json);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("reading");
	TCase *tc = tu_tcase("reading");
	tcase_add_checked_fixture(tc, dir_setup, dir_teardown);
	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_older_file);
	tcase_add_test(tc, test_malformed);
	tcase_add_test(tc, test_refused);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
