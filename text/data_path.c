/* Where the bundled data is (text.h): $CFORMER_DATA_DIR, beside the running program, else
 * the installed data directory, which the build passes as CFORMER_PKGDATADIR. */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text.h"

#ifndef CFORMER_PKGDATADIR
#define CFORMER_PKGDATADIR "/usr/local/share/cformer"
#endif

/* dir/name into buf; false (with an error) if it does not fit. */
static int join(char *buf, size_t len, const char *dir, const char *name)
{
	int n = snprintf(buf, len, "%s/%s", dir, name);
	if (n < 0 || (size_t)n >= len)
		return tensor_error(TENSOR_ERR_ARG,
				    "text_data_path: '%s/%s' does not fit in %zu bytes", dir, name,
				    len);
	return TENSOR_OK;
}

/* The directory of the running program, less libtool's trailing "/.libs"; false if unknown. */
static bool program_dir(char *buf, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);
	if (n <= 0 || (size_t)n >= len - 1)
		return false;
	buf[n] = 0;
	char *slash = strrchr(buf, '/');
	if (!slash)
		return false;
	*slash = 0;
	size_t l = strlen(buf);
	if (l >= 6 && !strcmp(buf + l - 6, "/.libs"))
		buf[l - 6] = 0;
	return true;
}

const char *text_data_path(const char *name, char *buf, size_t len)
{
	if (!name || !buf || len == 0) {
		tensor_error(TENSOR_ERR_ARG, "text_data_path: name and buf must not be NULL");
		return NULL;
	}
	const char *env = getenv("CFORMER_DATA_DIR");
	if (env && *env) {
		if (join(buf, len, env, name) < 0)
			return NULL;
		if (access(buf, R_OK) == 0)
			return buf;
	}
	char dir[4096], sub[4200];
	if (program_dir(dir, sizeof dir)) {
		static const char *const beside[] = { "data", "../share/cformer" };
		for (int i = 0; i < 2; i++) {
			snprintf(sub, sizeof sub, "%s/%s", dir, beside[i]);
			if (join(buf, len, sub, name) < 0)
				return NULL;
			if (access(buf, R_OK) == 0)
				return buf;
		}
	}
	return join(buf, len, CFORMER_PKGDATADIR, name) < 0 ? NULL : buf;
}
