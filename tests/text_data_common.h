/* Helpers shared by test_text_data.c and test_text_batch.c: paths of the
 * fixtures under the source tree. */
#ifndef CFORMER_TESTS_TEXT_DATA_COMMON_H
#define CFORMER_TESTS_TEXT_DATA_COMMON_H

#include <stdio.h>
#include <stdlib.h>

/* srcdir-relative path (automake's test harness exports srcdir). */
static inline const char *src_path(const char *rel)
{
	static char buf[8][1024];
	static int k;
	const char *s = getenv("srcdir");
	char *p = buf[k++ % 8];
	snprintf(p, 1024, "%s/%s", s && *s ? s : ".", rel);
	return p;
}

static inline const char *data_path(const char *rel)
{
	char tmp[512];
	snprintf(tmp, sizeof(tmp), "tests/data/%s", rel);
	return src_path(tmp);
}

#endif
