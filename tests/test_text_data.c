/* Tests of the text/ readers: aclImdb (with each review's movie) and plain
 * text, and the seeded splits, by example and by movie.
 * Fixtures: tests/data/imdb_*, lines_tiny; examples/data/aclImdb_subset (real
 * reviews). */
#define _XOPEN_SOURCE 700
#include "testutil.h"
#include "text.h"
#include "text_data_common.h"

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------------- */

/* A temporary directory tree (removed with tree_remove). */
static char *tree_new(void)
{
	char *d = strdup("test_text_data.XXXXXX");
	ck_assert(d && mkdtemp(d));
	return d;
}

static void put_file(const char *root, const char *rel, const char *data, size_t n)
{
	char p[1024];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	for (char *s = p + strlen(root) + 1; (s = strchr(s, '/')); s++) {
		*s = '\0';
		ck_assert(mkdir(p, 0755) == 0 || errno == EEXIST);
		*s = '/';
	}
	FILE *f = fopen(p, "wb");
	ck_assert_msg(f, "cannot create %s", p);
	ck_assert(fwrite(data, 1, n, f) == n);
	fclose(f);
}

static void put_text(const char *root, const char *rel, const char *text)
{
	put_file(root, rel, text, strlen(text));
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static void tree_remove(char *root)
{
	nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(root);
}

/* Copy the recorded error message into msg (1024 bytes) and clear it. */
static void take_error(char *msg)
{
	snprintf(msg, 1024, "%s", tensor_last_error());
	tensor_clear_error();
}

struct expect {
	const char *text;
	int label, rating;
};

static void assert_dataset(const struct text_dataset *ds, const struct expect *e, int n)
{
	ck_assert_int_eq(ds->n, n);
	for (int i = 0; i < n; i++) {
		ck_assert_msg(strcmp(ds->items[i].text, e[i].text) == 0, "item %d: '%s', want '%s'",
			      i, ds->items[i].text, e[i].text);
		ck_assert_int_eq(ds->items[i].label, e[i].label);
		ck_assert_int_eq(ds->items[i].rating, e[i].rating);
	}
}

/* ---- aclImdb reader --------------------------------------------------------- */

START_TEST(test_imdb_train)
{
	/* neg by numeric id (2, 7, 10), then pos (0, 3, 11, 25); line breaks
	 * "<br />", "<br/>", "<br>", "<BR />" become one space each. */
	static const struct expect e[] = {
		{ "Dull plot.  Bad acting.", 0, 3 },
		{ "Not great, not awful.", 0, 4 },
		{ "Worst film ever!", 0, 1 },
		{ "A masterpiece.", 1, 10 },
		{ "Lovely score and cast.", 1, 8 },
		{ "Good fun: caf\xc3\xa9 scenes, na\xc3\xafve charm.", 1, 7 },
		{ "Great <b>bold</b> film.   See it.", 1, 9 },
	};
	struct text_dataset ds;
	ck_assert_int_eq(text_imdb_load(data_path("imdb_tiny"), "train", &ds), TENSOR_OK);
	assert_dataset(&ds, e, 7);
	text_dataset_free(&ds);
	ck_assert_int_eq(ds.n, 0);
	ck_assert_ptr_null(ds.items);
	text_dataset_free(&ds); /* twice is harmless */
	text_dataset_free(NULL);
}
END_TEST

START_TEST(test_imdb_test_split)
{
	static const struct expect e[] = {
		{ "Too long.", 0, 2 },
		{ "Awful.  ", 0, 1 },
		{ "Superb.", 1, 9 },
		{ "Nice.", 1, 7 },
	};
	struct text_dataset ds;
	ck_assert_int_eq(text_imdb_load(data_path("imdb_tiny"), "test", &ds), TENSOR_OK);
	assert_dataset(&ds, e, 4);
	text_dataset_free(&ds);
}
END_TEST

/* Each review's movie from urls_neg.txt / urls_pos.txt (line id + 1; the
 * pos file has CRLF endings and no final newline): groups number the
 * distinct URLs in sorted order, across both labels; the test split has no
 * urls files, so no groups. */
START_TEST(test_imdb_groups)
{
	/* neg 2, 7, 10 -> tt..2, tt..7, tt..1; pos 0, 3, 11, 25 -> tt..1,
	 * tt..3, tt..2, tt..3 */
	static const int64_t want[] = { 2, 4, 1, 1, 3, 2, 3 };
	struct text_dataset ds;
	ck_assert_int_eq(text_imdb_load(data_path("imdb_tiny"), "train", &ds), TENSOR_OK);
	ck_assert_int_eq(ds.n, 7);
	for (int i = 0; i < 7; i++)
		ck_assert_msg(ds.items[i].group == want[i], "review %d: group %lld, want %lld", i,
			      (long long)ds.items[i].group, (long long)want[i]);
	text_dataset_free(&ds);
	ck_assert_int_eq(text_imdb_load(data_path("imdb_tiny"), "test", &ds), TENSOR_OK);
	for (int i = 0; i < ds.n; i++)
		ck_assert_int_eq(ds.items[i].group, 0);
	text_dataset_free(&ds);
}
END_TEST

/* A failing load records the status and message and leaves out untouched. */
static void assert_load_error(const char *dir, const char *split, int status, const char *s1,
			      const char *s2)
{
	struct text_dataset ds = { (struct text_example *)&ds, 12345 };
	int st = text_imdb_load(dir, split, &ds);
	ck_assert_int_eq(st, status);
	ck_assert(ds.items == (struct text_example *)&ds && ds.n == 12345);
	tu_assert_error(st != TENSOR_OK, status, s1, s2);
}

START_TEST(test_imdb_errors_fixtures)
{
	assert_load_error(data_path("imdb_bad_name"), "train", TENSOR_ERR_IO, "malformed file name",
			  "imdb_bad_name/train/neg/3-4.txt");
	assert_load_error(data_path("imdb_bad_rating"), "train", TENSOR_ERR_IO,
			  "imdb_bad_rating/train/pos/2_11.txt", "rating 11 in the pos folder");
	assert_load_error(data_path("imdb_bad_label"), "train", TENSOR_ERR_IO,
			  "imdb_bad_label/train/pos/3_4.txt", "expected 7-10");
	assert_load_error(data_path("imdb_bad_nopos"), "train", TENSOR_ERR_IO,
			  "cannot open directory", "imdb_bad_nopos/train/pos");
	/* missing split folder, missing top directory */
	assert_load_error(data_path("imdb_bad_nopos"), "test", TENSOR_ERR_IO,
			  "cannot open directory", "imdb_bad_nopos/test'");
	assert_load_error(data_path("no_such_dir"), "train", TENSOR_ERR_IO, "no_such_dir/train",
			  "No such file");
	/* split names other than train and test are refused */
	assert_load_error(data_path("imdb_tiny/train"), "neg", TENSOR_ERR_ARG, "split 'neg'",
			  "\"train\", \"test\" or \"unsup\"");
	/* no train/unsup folder */
	assert_load_error(data_path("imdb_bad_nopos"), "unsup", TENSOR_ERR_IO,
			  "cannot open directory", "imdb_bad_nopos/train/unsup");
	assert_load_error(NULL, "train", TENSOR_ERR_ARG, "text_imdb_load", "NULL");
	assert_load_error(data_path("imdb_tiny"), NULL, TENSOR_ERR_ARG, "text_imdb_load", "NULL");
	ck_assert_int_eq(text_imdb_load(data_path("imdb_tiny"), "train", NULL), TENSOR_ERR_ARG);
	tu_assert_error(true, TENSOR_ERR_ARG, "text_imdb_load", "NULL");
}
END_TEST

/* urls files that do not cover a review: too short, a blank line; a label
 * folder without one leaves its reviews without a group. */
START_TEST(test_imdb_urls_errors)
{
	char *root = tree_new(), p[1024];
	put_text(root, "train/neg/1_2.txt", "Bad.");
	put_text(root, "train/pos/0_8.txt", "Good.");
	put_text(root, "train/urls_neg.txt", "http://a\n");
	snprintf(p, sizeof(p), "%s/train/urls_neg.txt", root);
	assert_load_error(root, "train", TENSOR_ERR_IO, p, "has 1 lines, review id 1 needs line 2");
	put_text(root, "train/urls_neg.txt", "http://a\n\r\nhttp://c\n");
	assert_load_error(root, "train", TENSOR_ERR_IO, p, "line 2 (review id 1) is blank");
	put_text(root, "train/urls_neg.txt", "http://a\nhttp://b\n");
	struct text_dataset ds;
	ck_assert_int_eq(text_imdb_load(root, "train", &ds), TENSOR_OK);
	ck_assert_int_eq(ds.n, 2);
	ck_assert_int_eq(ds.items[0].group, 1); /* neg id 1: http://b, the only URL */
	ck_assert_int_eq(ds.items[1].group, 0); /* no urls_pos.txt */
	text_dataset_free(&ds);
	tree_remove(root);
}
END_TEST

/* train/unsup: the unlabelled reviews by numeric id (0, 5, 12), label -1, rating 0, each
 * review's movie from train/urls_unsup.txt (0 and 12 the same one). */
START_TEST(test_imdb_unsup)
{
	static const struct expect e[] = {
		{ "Another one.", -1, 0 },
		{ "An unlabelled note. Second line.", -1, 0 },
		{ "Third, about the same movie as 0.", -1, 0 },
	};
	struct text_dataset ds;
	ck_assert_int_eq(text_imdb_load(data_path("imdb_tiny"), "unsup", &ds), TENSOR_OK);
	assert_dataset(&ds, e, 3);
	ck_assert(ds.items[0].group == ds.items[2].group && ds.items[0].group > 0);
	ck_assert(ds.items[1].group != ds.items[0].group && ds.items[1].group > 0);
	text_dataset_free(&ds);
	/* a rated review in unsup */
	char *root = tree_new();
	put_text(root, "train/unsup/3_0.txt", "ok");
	put_text(root, "train/unsup/4_7.txt", "rated");
	assert_load_error(root, "unsup", TENSOR_ERR_IO, "rating 7 in the unsup folder",
			  "expected 0-0");
	tree_remove(root);
}
END_TEST

/* The archive of the same tree (tests/data/imdb_tiny.tar.gz) loads every split as the
 * directory does: texts, labels, ratings and movies. */
START_TEST(test_imdb_archive)
{
	static const char *const splits[3] = { "train", "test", "unsup" };
	for (int s = 0; s < 3; s++) {
		struct text_dataset a, d;
		ck_assert_int_eq(text_imdb_load(data_path("imdb_tiny.tar.gz"), splits[s], &a),
				 TENSOR_OK);
		ck_assert_int_eq(text_imdb_load(data_path("imdb_tiny"), splits[s], &d), TENSOR_OK);
		ck_assert_int_eq(a.n, d.n);
		ck_assert_int_gt(a.n, 0);
		for (int64_t i = 0; i < a.n; i++) {
			ck_assert_str_eq(a.items[i].text, d.items[i].text);
			ck_assert_int_eq(a.items[i].label, d.items[i].label);
			ck_assert_int_eq(a.items[i].rating, d.items[i].rating);
			ck_assert_int_eq(a.items[i].group, d.items[i].group);
		}
		text_dataset_free(&a);
		text_dataset_free(&d);
	}
	/* bad archives: cut short, not an archive, a malformed name, a missing split */
	assert_load_error(data_path("imdb_truncated.tar.gz"), "train", TENSOR_ERR_IO,
			  "imdb_truncated.tar.gz': truncated", NULL);
	assert_load_error(data_path("imdb_tiny/train/urls_pos.txt"), "train", TENSOR_ERR_IO,
			  "urls_pos.txt' is damaged or not an archive", NULL);
	assert_load_error(data_path("imdb_bad_archive.tar.gz"), "train", TENSOR_ERR_IO,
			  "malformed file name",
			  "imdb_bad_archive.tar.gz:imdb_x/train/pos/bad.txt");
	assert_load_error(data_path("imdb_bad_archive.tar.gz"), "test", TENSOR_ERR_IO,
			  "holds no review under TOP/test/neg/", NULL);
}
END_TEST

START_TEST(test_imdb_malformed_names)
{
	/* clang-format off */
	static const char *bad[] = {
		"abc.txt", "1_2.text", "1_2", "_2.txt", "1_.txt", "01_2.txt", "1_02.txt",
		"1_2.txt.bak", "-1_2.txt", "+1_2.txt", "1_2_3.txt", "1_100.txt", "1 _2.txt",
		"1_2.TXT", "1_-2.txt", "1x_2.txt", "1000000000000000000_2.txt", "1_2.txt~", "README",
	};
	/* clang-format on */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *root = tree_new();
		put_text(root, "train/neg/3_2.txt", "ok");
		put_text(root, "train/pos/3_8.txt", "ok");
		char rel[256];
		snprintf(rel, sizeof(rel), "train/%s/%s", i % 2 ? "pos" : "neg", bad[i]);
		put_text(root, rel, "bad");
		struct text_dataset ds = { NULL, -7 };
		int st = text_imdb_load(root, "train", &ds);
		char msg[1024];
		take_error(msg);
		tree_remove(root);
		ck_assert_msg(st == TENSOR_ERR_IO, "'%s' accepted (status %d)", bad[i], st);
		ck_assert_msg(strstr(msg, "malformed file name") && strstr(msg, bad[i]),
			      "'%s': message '%s'", bad[i], msg);
		ck_assert(ds.items == NULL && ds.n == -7);
	}
}
END_TEST

START_TEST(test_imdb_bad_content)
{
	struct {
		const char *rel, *sub1, *sub2;
	} cases[] = {
		{ "train/neg/4_0.txt", "rating 0 in the neg folder", "expected 1-4" },
		{ "train/neg/4_5.txt", "rating 5 in the neg folder", "4_5.txt" },
		{ "train/pos/4_6.txt", "rating 6 in the pos folder", "4_6.txt" },
		{ "train/pos/4_1.txt", "rating 1 in the pos folder", "expected 7-10" },
		{ "train/neg/9_1.txt", "duplicate review id 9", "9_4.txt" },
		{ "train/neg/5_1.txt", "NUL byte", "5_1.txt" },
		{ "train/pos/7_9.txt/x", "cannot read", "7_9.txt" }, /* a directory */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *root = tree_new();
		put_text(root, "train/neg/9_4.txt", "ok");
		put_text(root, "train/pos/3_8.txt", "ok");
		if (strstr(cases[i].rel, "5_1"))
			put_file(root, cases[i].rel, "a\0b", 3);
		else
			put_text(root, cases[i].rel, "x");
		struct text_dataset ds = { NULL, -7 };
		int st = text_imdb_load(root, "train", &ds);
		char msg[1024];
		take_error(msg);
		tree_remove(root);
		ck_assert_msg(st == TENSOR_ERR_IO, "case %zu: status %d", i, st);
		ck_assert_msg(strstr(msg, cases[i].sub1) && strstr(msg, cases[i].sub2),
			      "case %zu: message '%s'", i, msg);
		ck_assert(ds.items == NULL && ds.n == -7);
	}
	/* hidden files are skipped; an empty review is a valid (empty) text */
	char *root = tree_new();
	put_text(root, "train/neg/.DS_Store", "junk");
	put_text(root, "train/neg/1_2.txt", "");
	put_text(root, "train/pos/.hidden_1_8.txt", "junk");
	struct text_dataset ds;
	int st = text_imdb_load(root, "train", &ds);
	tree_remove(root);
	ck_assert_int_eq(st, TENSOR_OK);
	ck_assert_int_eq(ds.n, 1);
	ck_assert_str_eq(ds.items[0].text, "");
	text_dataset_free(&ds);
}
END_TEST

/* The bundled subset of real reviews: 500 + 500 per split, aclImdb rules. */
START_TEST(test_imdb_bundled_subset)
{
	const char *splits[2] = { "train", "test" };
	for (int s = 0; s < 2; s++) {
		struct text_dataset ds;
		ck_assert_int_eq(
		    text_imdb_load(src_path("examples/data/aclImdb_subset"), splits[s], &ds),
		    TENSOR_OK);
		ck_assert_int_eq(ds.n, 1000);
		for (int64_t i = 0; i < ds.n; i++) {
			const struct text_example *ex = &ds.items[i];
			ck_assert_int_eq(ex->label, i < 500 ? 0 : 1);
			if (ex->label)
				ck_assert(ex->rating >= 7 && ex->rating <= 10);
			else
				ck_assert(ex->rating >= 1 && ex->rating <= 4);
			ck_assert(strlen(ex->text) > 10);
			for (const char *p = ex->text; (p = strchr(p, '<')); p++)
				ck_assert_msg(strncasecmp(p, "<br", 3) != 0,
					      "line break left in %lld", (long long)i);
		}
		text_dataset_free(&ds);
	}
}
END_TEST

/* ---- seeded split ----------------------------------------------------------- */

static struct text_dataset numbered(int64_t n)
{
	struct text_dataset ds = { calloc((size_t)n, sizeof(struct text_example)), n };
	ck_assert(ds.items);
	for (int64_t i = 0; i < n; i++) {
		char buf[32];
		snprintf(buf, sizeof(buf), "doc %lld", (long long)i);
		ds.items[i] = (struct text_example){ .text = strdup(buf),
						     .label = (int32_t)(i % 2),
						     .rating = (int32_t)(i % 10 + 1) };
	}
	return ds;
}

static int64_t doc_index(const struct text_example *ex)
{
	return atoll(ex->text + 4);
}

/* val's document indices (sorted, as val keeps the original order). */
static void check_split(const struct text_dataset *ds, double f, uint64_t seed, int64_t want_val,
			int64_t *val_idx)
{
	struct text_dataset tr, va;
	ck_assert_int_eq(text_dataset_split(ds, f, seed, &tr, &va), TENSOR_OK);
	ck_assert_int_eq(va.n, want_val);
	ck_assert_int_eq(tr.n, ds->n - want_val);
	char *seen = calloc((size_t)ds->n, 1);
	struct text_dataset *parts[2] = { &tr, &va };
	for (int p = 0; p < 2; p++) {
		int64_t prev = -1;
		for (int64_t i = 0; i < parts[p]->n; i++) {
			const struct text_example *ex = &parts[p]->items[i];
			int64_t k = doc_index(ex);
			ck_assert(k > prev); /* original order kept */
			prev = k;
			ck_assert(!seen[k]);
			seen[k] = 1;
			ck_assert_int_eq(ex->label, ds->items[k].label);
			ck_assert_int_eq(ex->rating, ds->items[k].rating);
			ck_assert(ex->text != ds->items[k].text); /* copied */
			if (p == 1 && val_idx)
				val_idx[i] = k;
		}
	}
	for (int64_t k = 0; k < ds->n; k++)
		ck_assert(seen[k]);
	free(seen);
	text_dataset_free(&tr);
	text_dataset_free(&va);
}

START_TEST(test_split)
{
	struct text_dataset ds = numbered(1000);
	int64_t a[100], b[100], c[100];
	check_split(&ds, 0.1, 42, 100, a);
	check_split(&ds, 0.1, 42, 100, b);
	check_split(&ds, 0.1, 43, 100, c);
	ck_assert(memcmp(a, b, sizeof(a)) == 0);
	ck_assert(memcmp(a, c, sizeof(a)) != 0);
	/* chosen across the whole set, not a block */
	int low = 0;
	for (int i = 0; i < 100; i++)
		low += a[i] < 500;
	ck_assert_msg(low > 30 && low < 70, "%d of 100 from the first half", low);
	check_split(&ds, 0.0, 1, 0, NULL);
	check_split(&ds, 0.999, 1, 999, NULL);
	check_split(&ds, 0.0004, 1, 0, NULL);
	check_split(&ds, 0.0005, 1, 1, NULL); /* round half up */
	text_dataset_free(&ds);
	ds = numbered(7);
	check_split(&ds, 0.25, 5, 2, NULL); /* round(1.75) */
	text_dataset_free(&ds);
	struct text_dataset empty = { NULL, 0 };
	check_split(&empty, 0.5, 5, 0, NULL);
}
END_TEST

START_TEST(test_split_errors)
{
	struct text_dataset ds = numbered(10), tr = { NULL, 77 }, va = { NULL, 77 };
	double bad[] = { -0.1, 1.0, 1.5, NAN };
	for (int i = 0; i < 4; i++) {
		int st = text_dataset_split(&ds, bad[i], 1, &tr, &va);
		tu_assert_error(st == TENSOR_ERR_ARG, TENSOR_ERR_ARG, "text_dataset_split",
				"expected [0, 1)");
	}
	ck_assert(tr.n == 77 && va.n == 77);
	tu_assert_error(text_dataset_split(NULL, 0.1, 1, &tr, &va) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_dataset_split", "NULL");
	tu_assert_error(text_dataset_split(&ds, 0.1, 1, NULL, &va) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_dataset_split", "NULL");
	struct text_dataset broken = { NULL, 3 };
	tu_assert_error(text_dataset_split(&broken, 0.1, 1, &tr, &va) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_dataset_split", "invalid dataset");
	text_dataset_free(&ds);
}
END_TEST

/* numbered(n) in 37 movies of 1 to 10 reviews (group = 1 + i mod 37 for the
 * first 185, the rest in group 1). */
static struct text_dataset in_movies(int64_t n)
{
	struct text_dataset ds = numbered(n);
	for (int64_t i = 0; i < n; i++)
		ds.items[i].group = i < 185 ? 1 + i % 37 : 1;
	return ds;
}

/* A split by movie: no movie on both sides, val has at least round(f n)
 * reviews and less than that plus its largest movie, both keep the original
 * order and together hold every review once. Returns val's size. */
static int64_t check_group_split(const struct text_dataset *ds, double f, uint64_t seed,
				 char *val_groups)
{
	struct text_dataset tr, va;
	ck_assert_int_eq(text_dataset_split_groups(ds, f, seed, &tr, &va), TENSOR_OK);
	int64_t k = (int64_t)(f * (double)ds->n + 0.5), biggest = 0, size[64] = { 0 };
	for (int64_t i = 0; i < ds->n; i++)
		size[ds->items[i].group]++;
	for (int g = 0; g < 64; g++)
		biggest = size[g] > biggest ? size[g] : biggest;
	ck_assert_int_ge(va.n, k);
	ck_assert_int_lt(va.n, k + (k ? biggest : 1));
	ck_assert_int_eq(tr.n + va.n, ds->n);
	char side[64] = { 0 }; /* 1 train, 2 val */
	char *seen = calloc((size_t)ds->n + 1, 1);
	struct text_dataset *parts[2] = { &tr, &va };
	for (int p = 0; p < 2; p++) {
		int64_t prev = -1;
		for (int64_t i = 0; i < parts[p]->n; i++) {
			const struct text_example *ex = &parts[p]->items[i];
			int64_t d = doc_index(ex);
			ck_assert(d > prev && !seen[d]);
			prev = d;
			seen[d] = 1;
			ck_assert_int_eq(ex->group, ds->items[d].group);
			ck_assert_msg(side[ex->group] == 0 || side[ex->group] == p + 1,
				      "movie %lld on both sides", (long long)ex->group);
			side[ex->group] = (char)(p + 1);
		}
	}
	if (val_groups)
		for (int g = 0; g < 64; g++)
			val_groups[g] = side[g] == 2;
	free(seen);
	int64_t n = va.n;
	text_dataset_free(&tr);
	text_dataset_free(&va);
	return n;
}

START_TEST(test_split_groups)
{
	struct text_dataset ds = in_movies(200);
	char a[64], b[64], c[64];
	check_group_split(&ds, 0.1, 42, a);
	check_group_split(&ds, 0.1, 42, b);
	check_group_split(&ds, 0.1, 43, c);
	ck_assert(memcmp(a, b, sizeof(a)) == 0); /* the seed decides */
	ck_assert(memcmp(a, c, sizeof(a)) != 0);
	ck_assert_int_eq(check_group_split(&ds, 0.0, 1, NULL), 0);
	check_group_split(&ds, 0.3, 7, NULL);
	ck_assert_int_eq(check_group_split(&ds, 0.999, 7, NULL), 200); /* every movie */
	text_dataset_free(&ds);
	struct text_dataset empty = { NULL, 0 };
	ck_assert_int_eq(check_group_split(&empty, 0.5, 5, NULL), 0);
}
END_TEST

START_TEST(test_split_groups_errors)
{
	struct text_dataset ds = in_movies(10), tr = { NULL, 77 }, va = { NULL, 77 };
	ds.items[3].group = 0;
	tu_assert_error(text_dataset_split_groups(&ds, 0.1, 1, &tr, &va) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_dataset_split_groups",
			"example 3 has no group (group 0, expected > 0");
	ds.items[3].group = -2;
	tu_assert_error(text_dataset_split_groups(&ds, 0.1, 1, &tr, &va) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_dataset_split_groups", "group -2");
	ds.items[3].group = 4;
	tu_assert_error(text_dataset_split_groups(&ds, 1.0, 1, &tr, &va) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_dataset_split_groups", "expected [0, 1)");
	tu_assert_error(text_dataset_split_groups(&ds, 0.1, 1, NULL, &va) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_dataset_split_groups", "NULL");
	ck_assert(tr.n == 77 && va.n == 77);
	text_dataset_free(&ds);
}
END_TEST

/* a's examples then b's, texts copied, b's movies shifted past a's largest,
 * group 0 kept; an empty side; errors leave out untouched. */
START_TEST(test_concat)
{
	struct text_dataset a = in_movies(40), b = in_movies(7), out;
	b.items[2].group = 0;
	ck_assert_int_eq(text_dataset_concat(&a, &b, &out), TENSOR_OK);
	ck_assert_int_eq(out.n, 47);
	for (int64_t i = 0; i < 47; i++) {
		const struct text_example *src = i < 40 ? &a.items[i] : &b.items[i - 40];
		ck_assert_str_eq(out.items[i].text, src->text);
		ck_assert(out.items[i].text != src->text);
		ck_assert_int_eq(out.items[i].label, src->label);
		ck_assert_int_eq(out.items[i].rating, src->rating);
		/* a's largest movie is 37 */
		int64_t want = i < 40 || src->group == 0 ? src->group : src->group + 37;
		ck_assert_int_eq(out.items[i].group, want);
	}
	text_dataset_free(&out);
	struct text_dataset empty = { NULL, 0 };
	ck_assert_int_eq(text_dataset_concat(&empty, &b, &out), TENSOR_OK);
	ck_assert_int_eq(out.n, 7);
	ck_assert_int_eq(out.items[0].group, b.items[0].group);
	text_dataset_free(&out);
	ck_assert_int_eq(text_dataset_concat(&empty, &empty, &out), TENSOR_OK);
	ck_assert_int_eq(out.n, 0);

	struct text_dataset broken = { NULL, 3 }, keep = { NULL, 77 };
	tu_assert_error(text_dataset_concat(&a, &broken, &keep) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"text_dataset_concat", "invalid dataset b (n 3)");
	tu_assert_error(text_dataset_concat(&broken, &a, &keep) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"text_dataset_concat", "invalid dataset a");
	tu_assert_error(text_dataset_concat(&a, NULL, &keep) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"text_dataset_concat", "NULL");
	tu_assert_error(text_dataset_concat(&a, &b, NULL) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"text_dataset_concat", "NULL");
	ck_assert(keep.n == 77 && !keep.items);
	text_dataset_free(&a);
	text_dataset_free(&b);
}
END_TEST

/* Pieces of at most budget tokens, cut at whitespace, in order: with bytes
 * the whitespace kept inside a piece counts; a word over budget is a piece
 * alone; blank documents give none; label, rating and group are kept. */
START_TEST(test_chunk)
{
	struct text_tokenizer bytes, wp;
	ck_assert_int_eq(text_byte_init(&bytes), TENSOR_OK);
	ck_assert_int_eq(text_wordpiece_load(&wp, data_path("mlm_vocab_tiny.txt")), TENSOR_OK);
	struct text_example docs[] = {
		{ .text = "  ab cd  ef gh\n", .label = 1, .rating = 8, .group = 3 },
		{ .text = " \t\n", .label = 0, .rating = 2, .group = 4 },
		{ .text = "abcdefg x", .label = 0, .rating = 1, .group = 5 },
	};
	struct text_dataset in = { docs, 3 }, out;
	/* "ab cd" is 5 byte tokens; "ef" after two spaces would make 9 */
	static const char *const want_bytes[] = { "ab cd", "ef gh", "abcdefg", "x" };
	static const int64_t doc_of[] = { 0, 0, 2, 2 };
	ck_assert_int_eq(text_dataset_chunk(&in, &bytes, 5, &out), TENSOR_OK);
	ck_assert_int_eq(out.n, 4);
	for (int64_t i = 0; i < out.n; i++) {
		const struct text_example *src = &docs[doc_of[i]];
		ck_assert_str_eq(out.items[i].text, want_bytes[i]);
		ck_assert_int_eq(out.items[i].label, src->label);
		ck_assert_int_eq(out.items[i].rating, src->rating);
		ck_assert_int_eq(out.items[i].group, src->group);
	}
	text_dataset_free(&out);
	ck_assert_int_eq(text_dataset_chunk(&in, &bytes, 100, &out), TENSOR_OK);
	ck_assert_int_eq(out.n, 2); /* whole documents, outer whitespace dropped */
	ck_assert_str_eq(out.items[0].text, "ab cd  ef gh");
	ck_assert_str_eq(out.items[1].text, "abcdefg x");
	text_dataset_free(&out);

	/* WordPiece: "films" is 2 tokens, whitespace free; every piece fits the budget */
	struct text_example review = { .text = "the films , a good movie ! bad film .",
				       .label = -1 };
	struct text_dataset one = { &review, 1 };
	static const char *const want_wp[] = { "the films ,", "a good movie !", "bad film ." };
	ck_assert_int_eq(text_dataset_chunk(&one, &wp, 4, &out), TENSOR_OK);
	ck_assert_int_eq(out.n, 3);
	for (int64_t i = 0; i < out.n; i++) {
		ck_assert_str_eq(out.items[i].text, want_wp[i]);
		int32_t *ids = NULL;
		size_t n = 0;
		ck_assert_int_eq(
		    text_tokenize(&wp, out.items[i].text, strlen(out.items[i].text), &ids, &n),
		    TENSOR_OK);
		ck_assert(n >= 1 && n <= 4);
		free(ids);
	}
	text_dataset_free(&out);
	struct text_dataset empty = { NULL, 0 };
	ck_assert_int_eq(text_dataset_chunk(&empty, &wp, 4, &out), TENSOR_OK);
	ck_assert_int_eq(out.n, 0);

	struct text_dataset broken = { NULL, 2 }, keep = { NULL, 77 };
	tu_assert_error(text_dataset_chunk(&broken, &wp, 4, &keep) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_dataset_chunk", "invalid dataset (n 2)");
	tu_assert_error(text_dataset_chunk(&one, &wp, 0, &keep) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"text_dataset_chunk", "budget 0 tokens, expected >= 1");
	tu_assert_error(text_dataset_chunk(&one, NULL, 4, &keep) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"text_dataset_chunk", "NULL");
	tu_assert_error(text_dataset_chunk(&one, &wp, 4, NULL) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"text_dataset_chunk", "NULL");
	ck_assert(keep.n == 77 && !keep.items);
	text_tokenizer_free(&bytes);
	text_tokenizer_free(&wp);
}
END_TEST

/* ---- plain-text reader ------------------------------------------------------ */

/* Line breaks as the aclImdb reader replaces them: each tag one space, in place. */
START_TEST(test_replace_line_breaks)
{
	static const char *const cases[][2] = {
		{ "a<br />b<BR>c<br  />d<br/>e<bR / >f", "a b c d e<bR / >f" },
		{ "<br /><br />", "  " },
		{ "x<br", "x<br" },
		{ "<b>bold</b> <brr>", "<b>bold</b> <brr>" },
		{ "", "" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char buf[64];
		strcpy(buf, cases[i][0]);
		size_t n = text_replace_line_breaks(buf);
		ck_assert_str_eq(buf, cases[i][1]);
		ck_assert_uint_eq(n, strlen(cases[i][1]));
	}
}
END_TEST

START_TEST(test_lines_file)
{
	static const struct expect e[] = {
		{ "first document", -1, 0 },
		{ "second, with CRLF", -1, 0 },
		{ "third line: caf\xc3\xa9", -1, 0 },
		{ "last without newline", -1, 0 },
	};
	struct text_dataset ds;
	ck_assert_int_eq(text_lines_load(data_path("lines_tiny/corpus.txt"), &ds), TENSOR_OK);
	assert_dataset(&ds, e, 4);
	text_dataset_free(&ds);
}
END_TEST

START_TEST(test_lines_dir)
{
	/* *.txt files sorted by name; blank files, hidden files and other
	 * extensions are skipped; a file is one document, newlines kept */
	static const struct expect e[] = {
		{ "Doc ten.", -1, 0 },
		{ "Doc a.", -1, 0 },
		{ "Doc b.\nTwo lines.\n", -1, 0 },
	};
	struct text_dataset ds;
	ck_assert_int_eq(text_lines_load(data_path("lines_tiny/docs"), &ds), TENSOR_OK);
	assert_dataset(&ds, e, 3);
	text_dataset_free(&ds);
}
END_TEST

START_TEST(test_lines_errors)
{
	struct text_dataset ds = { NULL, 5 };
	tu_assert_error(text_lines_load(data_path("lines_tiny/nope.txt"), &ds) == TENSOR_ERR_IO,
			TENSOR_ERR_IO, "text_lines_load: cannot open", "lines_tiny/nope.txt");
	tu_assert_error(text_lines_load(NULL, &ds) == TENSOR_ERR_ARG, TENSOR_ERR_ARG,
			"text_lines_load", "NULL");
	tu_assert_error(text_lines_load(data_path("lines_tiny/corpus.txt"), NULL) == TENSOR_ERR_ARG,
			TENSOR_ERR_ARG, "text_lines_load", "NULL");
	/* a directory without *.txt files */
	char *root = tree_new();
	put_text(root, "notes.md", "x");
	int st = text_lines_load(root, &ds);
	char msg[1024];
	take_error(msg);
	ck_assert_int_eq(st, TENSOR_ERR_IO);
	ck_assert_msg(strstr(msg, "no *.txt files") && strstr(msg, root), "%s", msg);
	/* NUL bytes, in a line file and in a directory's file */
	put_file(root, "nul.txt", "ok\nab\0c\n", 8);
	char p[1024];
	snprintf(p, sizeof(p), "%s/nul.txt", root);
	st = text_lines_load(p, &ds);
	take_error(msg);
	ck_assert_int_eq(st, TENSOR_ERR_IO);
	ck_assert_msg(strstr(msg, "line 2: NUL byte at column 3") && strstr(msg, "nul.txt"), "%s",
		      msg);
	st = text_lines_load(root, &ds);
	take_error(msg);
	ck_assert_int_eq(st, TENSOR_ERR_IO);
	ck_assert_msg(strstr(msg, "NUL byte at offset 5") && strstr(msg, "nul.txt"), "%s", msg);
	/* a directory named like a text file cannot be read */
	remove(p);
	snprintf(p, sizeof(p), "%s/sub.txt", root);
	ck_assert_int_eq(mkdir(p, 0755), 0);
	st = text_lines_load(root, &ds);
	take_error(msg);
	ck_assert_int_eq(st, TENSOR_ERR_IO);
	ck_assert_msg(strstr(msg, "cannot read") && strstr(msg, "sub.txt"), "%s", msg);
	/* an empty file is an empty corpus */
	put_text(root, "empty.txt", "");
	snprintf(p, sizeof(p), "%s/empty.txt", root);
	struct text_dataset e;
	st = text_lines_load(p, &e);
	tree_remove(root);
	ck_assert_int_eq(st, TENSOR_OK);
	ck_assert_int_eq(e.n, 0);
	text_dataset_free(&e);
	ck_assert(ds.items == NULL && ds.n == 5); /* untouched by the failures */
}
END_TEST

/* ---- the bundled data's place ----------------------------------------------- */

START_TEST(test_data_path)
{
	char buf[512], want[512];
	char *root = tree_new();
	put_text(root, "langid.tsv", "en\tHello.\n");
	snprintf(want, sizeof want, "%s/langid.tsv", CFORMER_PKGDATADIR);
	/* without CFORMER_DATA_DIR: the installed place */
	ck_assert_int_eq(unsetenv("CFORMER_DATA_DIR"), 0);
	ck_assert_str_eq(text_data_path("langid.tsv", buf, sizeof buf), want);
	/* with it: its file when there, else the installed place */
	ck_assert_int_eq(setenv("CFORMER_DATA_DIR", root, 1), 0);
	char here[512];
	snprintf(here, sizeof here, "%s/langid.tsv", root);
	ck_assert_str_eq(text_data_path("langid.tsv", buf, sizeof buf), here);
	snprintf(want, sizeof want, "%s/coast.txt", CFORMER_PKGDATADIR);
	ck_assert_str_eq(text_data_path("coast.txt", buf, sizeof buf), want);
	ck_assert_int_eq(setenv("CFORMER_DATA_DIR", "", 1), 0);
	ck_assert_str_eq(text_data_path("coast.txt", buf, sizeof buf), want);
	/* errors */
	tu_assert_error(!text_data_path("langid.tsv", buf, 4), TENSOR_ERR_ARG, "text_data_path",
			"does not fit in 4 bytes");
	tu_assert_error(!text_data_path(NULL, buf, sizeof buf), TENSOR_ERR_ARG, "text_data_path",
			"must not be NULL");
	tu_assert_error(!text_data_path("x", NULL, 8), TENSOR_ERR_ARG, "text_data_path", NULL);
	ck_assert_int_eq(unsetenv("CFORMER_DATA_DIR"), 0);
	tree_remove(root);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("text_data");
	TCase *tc = tu_tcase("imdb");
	tcase_add_test(tc, test_imdb_train);
	tcase_add_test(tc, test_imdb_unsup);
	tcase_add_test(tc, test_imdb_archive);
	tcase_add_test(tc, test_imdb_test_split);
	tcase_add_test(tc, test_imdb_groups);
	tcase_add_test(tc, test_imdb_urls_errors);
	tcase_add_test(tc, test_imdb_errors_fixtures);
	tcase_add_test(tc, test_imdb_malformed_names);
	tcase_add_test(tc, test_imdb_bad_content);
	tcase_add_test(tc, test_imdb_bundled_subset);
	suite_add_tcase(s, tc);
	tc = tu_tcase("split");
	tcase_add_test(tc, test_split);
	tcase_add_test(tc, test_split_errors);
	tcase_add_test(tc, test_split_groups);
	tcase_add_test(tc, test_split_groups_errors);
	tcase_add_test(tc, test_concat);
	tcase_add_test(tc, test_chunk);
	suite_add_tcase(s, tc);
	tc = tu_tcase("lines");
	tcase_add_test(tc, test_replace_line_breaks);
	tcase_add_test(tc, test_lines_file);
	tcase_add_test(tc, test_lines_dir);
	tcase_add_test(tc, test_lines_errors);
	tcase_add_test(tc, test_data_path);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
