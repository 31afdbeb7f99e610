/* The bundled data's places (data.h). */
#define _POSIX_C_SOURCE 200809L
#include "data.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The build passes these: the installed data directory, and the source tree relative to the
 * build tree's top ($(top_srcdir): "." for a build in the source tree). */
#ifndef CFORMER_PKGDATADIR
#define CFORMER_PKGDATADIR "/usr/local/share/cformer"
#endif
#ifndef CFORMER_TOP_SRCDIR
#define CFORMER_TOP_SRCDIR "."
#endif

/* name's place in the source tree, relative to its top. */
static const char *in_source(const char *name)
{
	return strcmp(name, "bert-base-uncased-vocab.txt") ? "examples/data"
							     : "tests/data/tokenizer";
}

/* The directory of this program, less a trailing "/.libs" (libtool's); false if unknown. */
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

const char *example_data_path(const char *name, char *buf, size_t len)
{
	const char *env = getenv("CFORMER_DATA_DIR");
	if (env && *env) {
		snprintf(buf, len, "%s/%s", env, name);
		if (access(buf, R_OK) == 0)
			return buf;
	}
	/* the program sits one level below the build tree's top (examples/, bench/) */
	char dir[4096];
	if (program_dir(dir, sizeof dir)) {
		const char *top = CFORMER_TOP_SRCDIR;
		if (top[0] == '/')
			snprintf(buf, len, "%s/%s/%s", top, in_source(name), name);
		else
			snprintf(buf, len, "%s/../%s/%s/%s", dir, top, in_source(name), name);
		if (access(buf, R_OK) == 0)
			return buf;
		/* an installed program moved with its tree: bin/../share/cformer */
		snprintf(buf, len, "%s/../share/cformer/%s", dir, name);
		if (access(buf, R_OK) == 0)
			return buf;
	}
	snprintf(buf, len, "%s/%s", CFORMER_PKGDATADIR, name);
	return buf;
}
