/* TensorBoard event files (examples/common/tb.c): CRC-32C against published vectors, the
 * masked CRC, the TFRecord framing of a written file checked with a bitwise CRC written
 * here, scalar round trips, and each damaged file (flipped byte, truncation, missing
 * file_version record, missing file) refused with its message. */
#define _GNU_SOURCE /* mkdtemp */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "tb.h"

/* ---- helpers ------------------------------------------------------------------------------ */

/* CRC-32C bit by bit (reflected polynomial 0x82F63B78), independent of tb.c's table. */
static uint32_t ref_crc32c(const uint8_t *p, size_t n)
{
	uint32_t c = 0xFFFFFFFFu;
	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
	}
	return ~c;
}

static uint32_t ref_masked(const uint8_t *p, size_t n)
{
	uint32_t c = ref_crc32c(p, n);
	return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint64_t le(const uint8_t *p, int bytes)
{
	uint64_t v = 0;
	for (int i = 0; i < bytes; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static char dir[64], err[512];

static void dir_setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/cformer-tb-XXXXXX");
	ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
}

static void dir_teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "open %s: %s", path, strerror(errno));
	uint8_t *b = malloc(1 << 16);
	*n = fread(b, 1, 1 << 16, f);
	fclose(f);
	return b;
}

static void spill(const char *path, const uint8_t *b, size_t n)
{
	FILE *f = fopen(path, "wb");
	ck_assert(f != NULL);
	ck_assert_uint_eq(fwrite(b, 1, n, f), n);
	fclose(f);
}

/* A file with the file_version record and three scalars; its path into path. */
static void write_sample(char *path, size_t len)
{
	struct tb_writer w;
	ck_assert_msg(tb_open(&w, dir, err, sizeof err) == 0, "%s", err);
	ck_assert_int_eq(tb_scalar(&w, "train/loss", 0.693, 1), 0);
	ck_assert_int_eq(tb_scalar(&w, "train/loss", 0.25, 2), 0);
	ck_assert_int_eq(tb_scalar(&w, "val/acc", -3.5e-7, 1234567890123LL), 0);
	snprintf(path, len, "%s", w.path);
	tb_close(&w);
}

/* Offsets of the records of a framed file (at most max), as the format defines them. */
static int record_offsets(const uint8_t *b, size_t n, size_t *off, int max)
{
	int k = 0;
	for (size_t at = 0; at < n && k < max; k++) {
		off[k] = at;
		at += 12 + le(b + at, 8) + 4;
	}
	return k;
}

/* ---- tests -------------------------------------------------------------------------------- */

START_TEST(test_crc32c_vectors)
{
	uint8_t zeros[32] = { 0 }, ones[32], inc[32];
	memset(ones, 0xFF, sizeof ones);
	for (int i = 0; i < 32; i++)
		inc[i] = (uint8_t)i;
	ck_assert_uint_eq(tb_crc32c((const uint8_t *)"123456789", 9), 0xE3069283u);
	ck_assert_uint_eq(tb_crc32c(zeros, 32), 0x8A9136AAu); /* RFC 3720 B.4 */
	ck_assert_uint_eq(tb_crc32c(ones, 32), 0x62A8AB43u);
	ck_assert_uint_eq(tb_crc32c(inc, 32), 0x46DD794Eu);
	ck_assert_uint_eq(tb_crc32c(NULL, 0), 0u);
	ck_assert_uint_eq(tb_crc32c((const uint8_t *)"a", 1), ref_crc32c((const uint8_t *)"a", 1));
}
END_TEST

START_TEST(test_masked_crc)
{
	/* rotate right by 15, add 0xa282ead8 (TensorFlow's record masking) */
	ck_assert_uint_eq(tb_masked_crc((const uint8_t *)"123456789", 9), 0xC78AB0E5u);
	uint8_t b[100];
	for (int i = 0; i < 100; i++)
		b[i] = (uint8_t)(i * 37 + 11);
	for (size_t n = 0; n <= 100; n += 7)
		ck_assert_uint_eq(tb_masked_crc(b, n), ref_masked(b, n));
}
END_TEST

START_TEST(test_framing)
{
	char path[1100];
	write_sample(path, sizeof path);
	ck_assert_msg(strstr(path, "/events.out.tfevents.") != NULL, "file name %s", path);
	size_t n, off[8];
	uint8_t *b = slurp(path, &n);
	int k = record_offsets(b, n, off, 8);
	ck_assert_int_eq(k, 4);
	for (int i = 0; i < k; i++) {
		const uint8_t *r = b + off[i];
		uint64_t len = le(r, 8);
		ck_assert_uint_eq(le(r + 8, 4), ref_masked(r, 8));
		ck_assert_uint_eq(le(r + 12 + len, 4), ref_masked(r + 12, len));
	}
	ck_assert_uint_eq(off[3] + 12 + le(b + off[3], 8) + 4, n); /* nothing after the last */
	ck_assert_msg(memmem(b + off[0], off[1], "brain.Event:2", 13) != NULL,
		      "first record is not file_version");
	free(b);
}
END_TEST

START_TEST(test_round_trip)
{
	char path[1100];
	struct timeval tv;
	gettimeofday(&tv, NULL);
	double before = (double)tv.tv_sec;
	write_sample(path, sizeof path);
	struct tb_scalar_event ev[8];
	int n = tb_read_scalars(path, ev, 8, err, sizeof err);
	ck_assert_msg(n == 3, "read %d scalars: %s", n, n < 0 ? err : "");
	ck_assert_str_eq(ev[0].tag, "train/loss");
	ck_assert_float_eq(ev[0].value, 0.693f);
	ck_assert_int_eq(ev[0].step, 1);
	ck_assert_str_eq(ev[1].tag, "train/loss");
	ck_assert_float_eq(ev[1].value, 0.25f);
	ck_assert_int_eq(ev[1].step, 2);
	ck_assert_str_eq(ev[2].tag, "val/acc");
	ck_assert_float_eq(ev[2].value, -3.5e-7f);
	ck_assert_int_eq(ev[2].step, 1234567890123LL);
	for (int i = 0; i < 3; i++)
		ck_assert_msg(ev[i].wall_time >= before - 1 && ev[i].wall_time < before + 600,
			      "wall time %f", ev[i].wall_time);
	/* max bounds what is stored */
	ck_assert_int_eq(tb_read_scalars(path, ev, 2, err, sizeof err), 2);
	ck_assert_float_eq(ev[1].value, 0.25f);
}
END_TEST

START_TEST(test_many_records)
{
	struct tb_writer w;
	ck_assert_msg(tb_open(&w, dir, err, sizeof err) == 0, "%s", err);
	char path[1100];
	snprintf(path, sizeof path, "%s", w.path);
	for (int i = 0; i < 500; i++)
		ck_assert_int_eq(tb_scalar(&w, i % 2 ? "lr" : "a/rather/long/tag/name", i * 0.5, i),
				 0);
	tb_close(&w);
	static struct tb_scalar_event ev[600];
	ck_assert_int_eq(tb_read_scalars(path, ev, 600, err, sizeof err), 500);
	for (int i = 0; i < 500; i++) {
		ck_assert_int_eq(ev[i].step, i);
		ck_assert_float_eq(ev[i].value, (float)(i * 0.5));
	}
}
END_TEST

/* Flip one byte in each region of each record: every flip is caught. */
START_TEST(test_corrupt_byte)
{
	char path[1100], bad[1200];
	write_sample(path, sizeof path);
	snprintf(bad, sizeof bad, "%s/bad", dir);
	size_t n, off[8];
	uint8_t *b = slurp(path, &n);
	int k = record_offsets(b, n, off, 8);
	struct tb_scalar_event ev[8];
	for (int i = 0; i < k; i++) {
		uint64_t len = le(b + off[i], 8);
		size_t where[] = { off[i] + 1, off[i] + 9, off[i] + 12 + len / 2,
				   off[i] + 12 + len + 2 };
		const char *want[] = { "bad length header", "bad length header", "CRC mismatch",
				       "CRC mismatch" };
		for (int j = 0; j < 4; j++) {
			b[where[j]] ^= 0x10;
			spill(bad, b, n);
			b[where[j]] ^= 0x10;
			int got = tb_read_scalars(bad, ev, 8, err, sizeof err);
			ck_assert_msg(got == -1, "record %d byte %zu: read %d", i, where[j], got);
			ck_assert_msg(strstr(err, want[j]) && strstr(err, bad), "message: %s", err);
		}
	}
	spill(bad, b, n); /* the restored copy reads */
	ck_assert_int_eq(tb_read_scalars(bad, ev, 8, err, sizeof err), 3);
	free(b);
}
END_TEST

START_TEST(test_truncated)
{
	char path[1100], bad[1200];
	write_sample(path, sizeof path);
	snprintf(bad, sizeof bad, "%s/short", dir);
	size_t n, off[8];
	uint8_t *b = slurp(path, &n);
	record_offsets(b, n, off, 8);
	struct tb_scalar_event ev[8];
	size_t cuts[] = { n - 1, n - 4, off[3] + 12 + 3, off[3] + 5 };
	for (int j = 0; j < 4; j++) {
		spill(bad, b, cuts[j]);
		ck_assert_int_eq(tb_read_scalars(bad, ev, 8, err, sizeof err), -1);
		ck_assert_msg(strstr(err, "record 3"), "message: %s", err);
		ck_assert_msg(strstr(err, j < 3 ? "truncated" : "bad length header"), "message: %s",
			      err);
	}
	spill(bad, b, off[3]); /* cut at a record boundary: the records before it read */
	ck_assert_int_eq(tb_read_scalars(bad, ev, 8, err, sizeof err), 2);
	free(b);
}
END_TEST

START_TEST(test_first_record_file_version)
{
	char path[1100], bad[1200];
	write_sample(path, sizeof path);
	snprintf(bad, sizeof bad, "%s/noversion", dir);
	size_t n, off[8];
	uint8_t *b = slurp(path, &n);
	record_offsets(b, n, off, 8);
	spill(bad, b + off[1], n - off[1]); /* valid records, but a scalar first */
	struct tb_scalar_event ev[8];
	ck_assert_int_eq(tb_read_scalars(bad, ev, 8, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "record 0") && strstr(err, "file_version"), "message: %s", err);
	free(b);
}
END_TEST

START_TEST(test_missing_file)
{
	char path[1100];
	snprintf(path, sizeof path, "%s/none", dir);
	struct tb_scalar_event ev[1];
	ck_assert_int_eq(tb_read_scalars(path, ev, 1, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "cannot open") && strstr(err, path), "message: %s", err);
	struct tb_writer w;
	snprintf(path, sizeof path, "%s/no/such/dir", dir);
	ck_assert_int_eq(tb_open(&w, path, err, sizeof err), -1);
	ck_assert_msg(strstr(err, "cannot create") && strstr(err, path), "message: %s", err);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tb");
	TCase *tc = tcase_create("tb");
	tcase_add_checked_fixture(tc, dir_setup, dir_teardown);
	tcase_add_test(tc, test_crc32c_vectors);
	tcase_add_test(tc, test_masked_crc);
	tcase_add_test(tc, test_framing);
	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_many_records);
	tcase_add_test(tc, test_corrupt_byte);
	tcase_add_test(tc, test_truncated);
	tcase_add_test(tc, test_first_record_file_version);
	tcase_add_test(tc, test_missing_file);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
