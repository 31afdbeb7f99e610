/* Whole files into memory, for the tokenizer's vocabulary and the corpora. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mem.h"
#include "text_internal.h"

int text_read_file(const char *op, const char *path, char **data, size_t *size)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return tensor_error(TENSOR_ERR_IO, "%s: cannot open '%s': %s", op, path,
				    strerror(errno));
	struct stat sb;
	size_t cap = fstat(fileno(fp), &sb) == 0 && sb.st_size > 0 ? (size_t)sb.st_size + 2 : 4096;
	size_t n = 0;
	char *buf = tensor_host_malloc(cap);
	int st = buf ? TENSOR_OK : TENSOR_ERR_NOMEM;
	while (st == TENSOR_OK) {
		n += fread(buf + n, 1, cap - 1 - n, fp);
		if (n < cap - 1) /* end of file or an error: fread stops only there */
			break;
		char *g = tensor_host_realloc(buf, 2 * cap);
		if (!g) {
			st = TENSOR_ERR_NOMEM;
			break;
		}
		buf = g;
		cap *= 2;
	}
	int err = errno;
	if (st == TENSOR_OK && ferror(fp))
		st = tensor_error(TENSOR_ERR_IO, "%s: cannot read '%s': %s", op, path,
				  strerror(err));
	else if (st == TENSOR_ERR_NOMEM)
		st = tensor_error(TENSOR_ERR_NOMEM, "%s: out of memory reading '%s'", op, path);
	fclose(fp);
	if (st != TENSOR_OK) {
		free(buf);
		return st;
	}
	buf[n] = '\0';
	*data = buf;
	*size = n;
	return TENSOR_OK;
}
