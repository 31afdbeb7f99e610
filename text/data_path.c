/* Where the bundled data is (text.h): $CFORMER_DATA_DIR, else the installed data directory,
 * which the build passes as CFORMER_PKGDATADIR. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
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
	return join(buf, len, CFORMER_PKGDATADIR, name) < 0 ? NULL : buf;
}
