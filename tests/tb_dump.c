/* tb_dump FILE: print the scalars of a TensorBoard event file, one "tag step value" line
 * each, read with tb_read_scalars (both CRCs of every record checked); exit 1 with the
 * reader's message if the file is damaged. Used by tests/test_linformer_imdb.sh. */
#include <stdio.h>
#include <stdlib.h>

#include "tb.h"

enum { MAX_SCALARS = 100000 };

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: tb_dump EVENT_FILE\n");
		return 2;
	}
	struct tb_scalar_event *ev = malloc(sizeof *ev * MAX_SCALARS);
	char err[512];
	int n = ev ? tb_read_scalars(argv[1], ev, MAX_SCALARS, err, sizeof err) : -1;
	if (n < 0) {
		fprintf(stderr, "tb_dump: %s\n", ev ? err : "out of memory");
		free(ev);
		return 1;
	}
	for (int i = 0; i < n; i++)
		printf("%s %lld %.9g\n", ev[i].tag, (long long)ev[i].step, (double)ev[i].value);
	free(ev);
	return 0;
}
