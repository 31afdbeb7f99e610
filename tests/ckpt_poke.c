/* ckpt_poke FILE TENSOR INDEX VALUE: overwrite element INDEX (row-major, from 0) of the F32
 * tensor TENSOR of the safetensors file FILE with VALUE, in place, as a damaged disk or a
 * faulty tool would; print the value it replaced. Exit 1 naming what is wrong (no such
 * tensor, not F32, INDEX out of range, an unreadable file). Used by tests/test_run_guards.sh. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, const char *file)
{
	fprintf(stderr, "ckpt_poke: %s: %s\n", file, what);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: ckpt_poke FILE TENSOR INDEX VALUE\n");
		return 2;
	}
	const char *file = argv[1], *name = argv[2];
	long long index = strtoll(argv[3], NULL, 10);
	float value = strtof(argv[4], NULL), old;
	FILE *f = fopen(file, "r+b");
	uint8_t size[8];
	if (!f || fread(size, 1, 8, f) != 8)
		return fail("cannot read the header size", file);
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | size[i];
	char *header = n < 100000000 ? calloc(n + 1, 1) : NULL;
	if (!header || fread(header, 1, n, f) != n)
		return fail("cannot read the header", file);
	cJSON *root = cJSON_Parse(header);
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, name);
	const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
	const cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
	if (!t || !cJSON_IsString(dt) || strcmp(dt->valuestring, "F32") ||
	    cJSON_GetArraySize(off) != 2)
		return fail("no F32 tensor of that name", file);
	long long begin = (long long)cJSON_GetArrayItem(off, 0)->valuedouble;
	long long end = (long long)cJSON_GetArrayItem(off, 1)->valuedouble;
	if (index < 0 || 4 * index >= end - begin)
		return fail("the index is out of range", file);
	long at = (long)(8 + n + (uint64_t)begin + 4 * (uint64_t)index);
	if (fseek(f, at, SEEK_SET) || fread(&old, 4, 1, f) != 1 || fseek(f, at, SEEK_SET) ||
	    fwrite(&value, 4, 1, f) != 1 || fclose(f))
		return fail("cannot write", file);
	printf("%s[%lld]: %.9g -> %.9g\n", name, index, (double)old, (double)value);
	cJSON_Delete(root);
	free(header);
	return 0;
}
