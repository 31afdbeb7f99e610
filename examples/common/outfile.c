/* Output files refused when they would replace an input, written atomically (see outfile.h). */
#define _XOPEN_SOURCE 700 /* realpath */
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flags.h"
#include "nn.h"

/* path as an absolute path without links or dots, also when its last component does not
 * exist yet (its directory's real path and its name); false if its directory does not
 * exist. */
static bool real_path(const char *path, char *out)
{
	if (realpath(path, out))
		return true;
	char a[PATH_MAX], b[PATH_MAX], dir[PATH_MAX];
	snprintf(a, sizeof a, "%s", path);
	snprintf(b, sizeof b, "%s", path);
	if (!realpath(dirname(a), dir))
		return false;
	const char *base = basename(b);
	return snprintf(out, PATH_MAX, "%s/%s", strcmp(dir, "/") ? dir : "", base) < PATH_MAX;
}

/* Whether the real path p lies inside the directory of real path dir. */
static bool inside(const char *p, const char *dir)
{
	size_t n = strlen(dir);
	return !strncmp(p, dir, n) && (p[n] == '/' || (n == 1 && dir[0] == '/'));
}

void outfile_check(const char *prog, const char *flag, const char *path,
		   const struct outfile_input *in, int n)
{
	size_t len = strlen(path);
	if (len >= 12 && !strcmp(path + len - 12, ".safetensors"))
		flags_fail(prog, flag,
			   "%s: a checkpoint's name (this writes text): name another file", path);
	struct stat out, st;
	bool exists = stat(path, &out) == 0;
	char real[PATH_MAX], dir[PATH_MAX];
	bool resolved = real_path(path, real);
	for (int i = 0; i < n; i++) {
		if (!in[i].path || stat(in[i].path, &st) != 0)
			continue;
		if (exists && out.st_dev == st.st_dev && out.st_ino == st.st_ino)
			flags_fail(prog, flag,
				   "%s is %s %s, an input of the run: name another file", path,
				   in[i].what, in[i].path);
		if (S_ISDIR(st.st_mode) && resolved && realpath(in[i].path, dir) &&
		    inside(real, dir))
			flags_fail(prog, flag,
				   "%s lies in %s %s, an input of the run: name a file elsewhere",
				   path, in[i].what, in[i].path);
	}
	struct nn_checkpoint_info info;
	if (exists && S_ISREG(out.st_mode) && nn_checkpoint_info(path, &info) == 0) {
		long long step = (long long)info.step;
		nn_checkpoint_info_free(&info);
		flags_fail(prog, flag, "%s is a checkpoint (step %lld): name another file", path,
			   step);
	}
	tensor_clear_error();
}

/* The temporary file of an output not yet committed, removed if the program exits first. */
static char *pending;

static void remove_pending(void)
{
	if (pending)
		unlink(pending);
}

void outfile_open(struct outfile *o, const char *prog, const char *flag, const char *path)
{
	static bool registered;
	static unsigned counter;
	*o = (struct outfile){ .path = path, .flag = flag };
	size_t len = strlen(path) + 48;
	if (!(o->tmp = malloc(len)))
		flags_fail(prog, flag, "out of memory");
	int fd = -1;
	for (int tries = 0; fd < 0 && tries < 100; tries++) {
		snprintf(o->tmp, len, "%s.tmp.%ld.%u", path, (long)getpid(), counter++);
		fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	if (fd < 0 || !(o->f = fdopen(fd, "w"))) {
		int err = errno;
		if (fd >= 0) {
			close(fd);
			unlink(o->tmp);
		}
		flags_fail(prog, flag, "cannot create %s: %s", o->tmp, strerror(err));
	}
	if (!registered)
		registered = atexit(remove_pending) == 0;
	pending = o->tmp;
}

void outfile_printf(struct outfile *o, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (vfprintf(o->f, fmt, ap) < 0 && !o->err)
		o->err = errno ? errno : EIO;
	va_end(ap);
}

void outfile_commit(struct outfile *o, const char *prog)
{
	if (!o->f)
		return;
	int err = o->err ? o->err : ferror(o->f) ? EIO : 0;
	bool failed = err != 0;
	if (!failed && (fflush(o->f) != 0 || fsync(fileno(o->f)) != 0))
		failed = true, err = errno;
	if (fclose(o->f) != 0 && !failed)
		failed = true, err = errno;
	o->f = NULL;
	if (!failed && rename(o->tmp, o->path) != 0)
		failed = true, err = errno;
	if (failed) {
		unlink(o->tmp);
		pending = NULL;
		flags_fail(prog, o->flag, "cannot write %s: %s (nothing written)", o->path,
			   strerror(err));
	}
	pending = NULL;
	free(o->tmp);
	o->tmp = NULL;
}
