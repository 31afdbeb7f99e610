/* The aclImdb reader on damaged and oversized archives (text/imdb.c, text/archive_source.c):
 * a gzip stream cut short anywhere, even in its 8-byte trailer, is "truncated", naming the
 * file; a changed byte that deflate cannot see (in a stored block, or the trailer's CRC-32)
 * fails the gzip check; concatenated members and zero padding read as one stream; and
 * text_imdb_load_max refuses a file that would pass its limit before reading it, from the
 * size in the tar header (a header claiming 2 GiB is refused at once). The fixtures are made
 * here from tests/data/imdb_tiny.tar.gz with zlib. */
#define _GNU_SOURCE /* memmem */
#include "testutil.h"
#include "text.h"
#include "text_data_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static char dir[] = "/tmp/test_text_archive.XXXXXX";

/* The bytes of the file at path (*n of them). */
static unsigned char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	unsigned char *p = malloc(1 << 20);
	*n = fread(p, 1, 1 << 20, f);
	ck_assert(*n > 0 && *n < (1 << 20));
	fclose(f);
	return p;
}

/* p[0..n) written to the file name in the test's directory; its path (static). */
static const char *spit(const char *name, const void *p, size_t n)
{
	static char path[8][256];
	static int k;
	char *at = path[k++ % 8];
	snprintf(at, 256, "%s/%s", dir, name);
	FILE *f = fopen(at, "wb");
	ck_assert(f != NULL);
	ck_assert_uint_eq(fwrite(p, 1, n, f), n);
	ck_assert_int_eq(fclose(f), 0);
	return at;
}

/* The tar inside imdb_tiny.tar.gz (*n bytes). */
static unsigned char *tiny_tar(size_t *n)
{
	size_t gn;
	unsigned char *gz = slurp(data_path("imdb_tiny.tar.gz"), &gn);
	unsigned char *tar = malloc(1 << 20);
	z_stream z = { .next_in = gz, .avail_in = (uInt)gn, .next_out = tar, .avail_out = 1 << 20 };
	ck_assert_int_eq(inflateInit2(&z, 16 + MAX_WBITS), Z_OK);
	ck_assert_int_eq(inflate(&z, Z_FINISH), Z_STREAM_END);
	*n = z.total_out;
	inflateEnd(&z);
	free(gz);
	return tar;
}

/* p[0..n) as one gzip member at level (0: stored blocks); *out bytes. */
static unsigned char *gzip_of(const unsigned char *p, size_t n, int level, size_t *out)
{
	z_stream z = { 0 };
	ck_assert_int_eq(deflateInit2(&z, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY),
			 Z_OK);
	size_t cap = deflateBound(&z, (uLong)n) + 64;
	unsigned char *gz = malloc(cap);
	z.next_in = (unsigned char *)p, z.avail_in = (uInt)n;
	z.next_out = gz, z.avail_out = (uInt)cap;
	ck_assert_int_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
	*out = z.total_out;
	deflateEnd(&z);
	return gz;
}

/* The reviews of path (within max bytes) are those of the bundled directory fixture. */
static void assert_loads(const char *path, size_t max)
{
	struct text_dataset a, d;
	ck_assert_msg(text_imdb_load_max(path, "train", max, &a) == TENSOR_OK, "%s: %s", path,
		      tensor_last_error());
	ck_assert_int_eq(text_imdb_load(data_path("imdb_tiny"), "train", &d), TENSOR_OK);
	ck_assert_int_eq(a.n, d.n);
	for (int64_t i = 0; i < a.n; i++)
		ck_assert_str_eq(a.items[i].text, d.items[i].text);
	text_dataset_free(&a);
	text_dataset_free(&d);
}

/* Loading path (within max bytes) fails with status, the message holding s1 and s2, and
 * leaves the output as it was. */
static void assert_fails(const char *path, size_t max, int status, const char *s1, const char *s2)
{
	struct text_dataset ds = { (struct text_example *)&ds, 12345 };
	int st = text_imdb_load_max(path, "train", max, &ds);
	ck_assert_int_eq(st, status);
	ck_assert(ds.items == (struct text_example *)&ds && ds.n == 12345);
	tu_assert_error(st != TENSOR_OK, status, s1, s2);
}

START_TEST(test_truncated)
{
	size_t n;
	unsigned char *gz = slurp(data_path("imdb_tiny.tar.gz"), &n);
	/* in the data, at the start of the trailer (CRC-32, length), inside it */
	const size_t cut[] = { n / 2, 8, 5, 1 };
	for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++)
		assert_fails(spit("cut.tar.gz", gz, n - cut[i]), TEXT_IMDB_MAX_BYTES, TENSOR_ERR_IO,
			     "cut.tar.gz': truncated", "the gzip stream ends before its end");
	assert_loads(spit("whole.tar.gz", gz, n), TEXT_IMDB_MAX_BYTES);
	free(gz);
}
END_TEST

START_TEST(test_checksum)
{
	size_t n, tn, sn;
	unsigned char *gz = slurp(data_path("imdb_tiny.tar.gz"), &n);
	gz[n - 8] ^= 1; /* the trailer's CRC-32 */
	assert_fails(spit("crc.tar.gz", gz, n), TEXT_IMDB_MAX_BYTES, TENSOR_ERR_IO,
		     "crc.tar.gz': damaged", "incorrect data check");
	gz[n - 8] ^= 1;
	gz[n - 4] ^= 1; /* its length */
	assert_fails(spit("len.tar.gz", gz, n), TEXT_IMDB_MAX_BYTES, TENSOR_ERR_IO,
		     "len.tar.gz': damaged", "incorrect length check");
	/* stored blocks: a byte of a review changed, which deflate cannot notice */
	unsigned char *tar = tiny_tar(&tn), *st = gzip_of(tar, tn, 0, &sn);
	assert_loads(spit("stored.tar.gz", st, sn), TEXT_IMDB_MAX_BYTES);
	unsigned char *at = memmem(st, sn, "masterpiece", 11);
	ck_assert(at != NULL);
	*at ^= 0x20; /* "Masterpiece" */
	assert_fails(spit("flipped.tar.gz", st, sn), TEXT_IMDB_MAX_BYTES, TENSOR_ERR_IO,
		     "flipped.tar.gz': damaged", "incorrect data check");
	free(gz), free(tar), free(st);
}
END_TEST

/* Two members (gzip files may be concatenated) and zero padding read as the one stream. */
START_TEST(test_members)
{
	size_t tn, an, bn;
	unsigned char *tar = tiny_tar(&tn);
	unsigned char *a = gzip_of(tar, tn / 3, 6, &an),
		      *b = gzip_of(tar + tn / 3, tn - tn / 3, 6, &bn);
	unsigned char *two = calloc(an + bn + 512, 1);
	memcpy(two, a, an);
	memcpy(two + an, b, bn);
	assert_loads(spit("two.tar.gz", two, an + bn), TEXT_IMDB_MAX_BYTES);
	assert_loads(spit("padded.tar.gz", two, an + bn + 512), TEXT_IMDB_MAX_BYTES);
	assert_fails(spit("half.tar.gz", two, an + bn / 2), TEXT_IMDB_MAX_BYTES, TENSOR_ERR_IO,
		     "half.tar.gz': truncated", NULL);
	free(tar), free(a), free(b), free(two);
}
END_TEST

/* The first header of a review file in tar (512-byte blocks). */
static unsigned char *first_review_header(unsigned char *tar, size_t n)
{
	for (size_t at = 0; at + 512 <= n;) {
		unsigned char *h = tar + at;
		if (!h[0])
			break;
		size_t size = strtoul((char *)h + 124, NULL, 8);
		if (strstr((char *)h, "/train/neg/") && strstr((char *)h, ".txt"))
			return h;
		at += 512 + (size + 511) / 512 * 512;
	}
	ck_abort_msg("no review in the tar");
	return NULL;
}

START_TEST(test_limit)
{
	/* the archive and the directory: a file that would pass max is refused */
	assert_fails(data_path("imdb_tiny.tar.gz"), 40, TENSOR_ERR_IO,
		     "would bring the text read to",
		     "bytes, over the limit of 40 (text_imdb_load_max)");
	assert_fails(data_path("imdb_tiny"), 40, TENSOR_ERR_IO, "imdb_tiny/train/",
		     "bytes, over the limit of 40 (text_imdb_load_max)");
	assert_loads(data_path("imdb_tiny.tar.gz"), 4096);
	/* a header claiming 2 GiB: refused at once, from the header, before any byte is read */
	size_t tn, gn;
	unsigned char *tar = tiny_tar(&tn), *h = first_review_header(tar, tn);
	snprintf((char *)h + 124, 12, "%011o", 1u << 31);
	memset(h + 148, ' ', 8);
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	unsigned char *gz = gzip_of(tar, tn, 6, &gn);
	assert_fails(spit("huge.tar.gz", gz, gn), TEXT_IMDB_MAX_BYTES, TENSOR_ERR_IO,
		     "(2147483648 bytes) would bring the text read to 2147483648 bytes",
		     "over the limit of 1073741824");
	free(tar), free(gz);
}
END_TEST

int main(void)
{
	if (!mkdtemp(dir)) {
		perror("test_text_archive: mkdtemp");
		return 99;
	}
	Suite *s = suite_create("text_archive");
	TCase *tc = tu_tcase("archive");
	tcase_add_test(tc, test_truncated);
	tcase_add_test(tc, test_checksum);
	tcase_add_test(tc, test_members);
	tcase_add_test(tc, test_limit);
	suite_add_tcase(s, tc);
	int rc = tu_run(s);
	static const char *const names[] = { "cut",	"whole", "crc",	   "len",  "stored",
					     "flipped", "two",	 "padded", "half", "huge" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		char p[256];
		snprintf(p, sizeof p, "%s/%s.tar.gz", dir, names[i]);
		unlink(p);
	}
	rmdir(dir);
	return rc;
}
