/* Output files of the example programs besides checkpoints and logs (--output FILE): refused
 * when they would replace an input of the run or a checkpoint, and written atomically, to a
 * temporary file beside the target (FILE.tmp.<pid>.<n>) that is flushed, fsync'd and renamed
 * over it, every write checked; so a run that fails (a full disk, an error, an exit) leaves
 * the old file or none, never a part. Example support code: errors print
 * "<prog>: --<flag>: ..." and exit 1 (flags_fail). */
#ifndef CFORMER_OUTFILE_H
#define CFORMER_OUTFILE_H

#include <stdio.h>

/* A file or directory the run reads: what names it in messages ("--checkpoint", "the
 * vocabulary") and its path (NULL: none). */
struct outfile_input {
	const char *what, *path;
};

/* Exit 1 naming --flag when path would replace one of the n inputs (the same file by device
 * and inode) or lie inside an input directory (by real path), or is a checkpoint (a name
 * ending in .safetensors, or an existing file that reads as one). */
void outfile_check(const char *prog, const char *flag, const char *path,
		   const struct outfile_input *in, int n);

struct outfile {
	FILE *f; /* NULL when closed */
	char *tmp;
	const char *path, *flag;
	int err; /* of the first write that failed, 0 if none */
};
/* Create the temporary file of path for writing (removed if the program exits before
 * outfile_commit); exit 1 naming --flag if it cannot be created. */
void outfile_open(struct outfile *o, const char *prog, const char *flag, const char *path);
/* fprintf to the file, keeping the error of the first write that fails for
 * outfile_commit. */
void outfile_printf(struct outfile *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Check every write made, flush and fsync the file and rename it over path; exit 1 naming
 * --flag and the error (the temporary file removed, path as it was). */
void outfile_commit(struct outfile *o, const char *prog);

#endif
