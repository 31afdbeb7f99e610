/* Tokenizer throughput, one thread: MB/s of text turned into ids by the
 * WordPiece (BERT uncased) and byte tokenizers, as a markdown table. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/data.h"
#include "text.h"

static const char usage[] =
    "usage: bench_tokenizer [--vocab FILE] [--dir DIR | --file FILE] [--repeat R]\n"
    "\n"
    "  --vocab FILE  vocab.txt (default: the BERT uncased copy in tests/data/tokenizer)\n"
    "  --dir DIR     every .txt file under DIR is a document; an aclImdb split folder\n"
    "                (DIR/pos, DIR/neg) reads only the reviews\n"
    "  --file FILE   every line of FILE is a document\n"
    "                (neither: 16 MB of synthetic review-like text with some Unicode)\n"
    "  --repeat R    timed passes, the best is reported (default 3)\n";

struct docs {
	char **text;
	size_t *len;
	size_t n, cap, bytes;
};

static void die(const char *what, const char *arg)
{
	fprintf(stderr, "bench_tokenizer: %s%s%s\n", what, arg ? ": " : "", arg ? arg : "");
	exit(1);
}

static void add_doc(struct docs *d, char *text, size_t len)
{
	if (d->n == d->cap) {
		d->cap = d->cap ? 2 * d->cap : 1024;
		d->text = realloc(d->text, d->cap * sizeof *d->text);
		d->len = realloc(d->len, d->cap * sizeof *d->len);
		if (!d->text || !d->len)
			die("out of memory", NULL);
	}
	d->text[d->n] = text;
	d->len[d->n++] = len;
	d->bytes += len;
}

static char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		die(strerror(errno), path);
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	while (buf) {
		n += fread(buf + n, 1, cap - n, f);
		if (n < cap)
			break;
		buf = realloc(buf, cap *= 2);
	}
	if (!buf || ferror(f))
		die("cannot read", path);
	fclose(f);
	*len = n;
	return buf;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_dir(const char *path)
{
	struct stat st;
	return !stat(path, &st) && S_ISDIR(st.st_mode);
}

/* Every .txt file under dir, in sorted order. */
static void read_dir(struct docs *d, const char *dir)
{
	DIR *dp = opendir(dir);
	if (!dp)
		die(strerror(errno), dir);
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(dp))) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap &&
		    !(names = realloc(names, (cap = cap ? 2 * cap : 256) * sizeof *names)))
			die("out of memory", NULL);
		size_t l = strlen(dir) + strlen(e->d_name) + 2;
		names[n] = malloc(l);
		snprintf(names[n++], l, "%s/%s", dir, e->d_name);
	}
	closedir(dp);
	qsort(names, n, sizeof *names, cmp_str);
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(names[i]), len;
		if (is_dir(names[i]))
			read_dir(d, names[i]);
		else if (l > 4 && !strcmp(names[i] + l - 4, ".txt")) {
			char *text = read_all(names[i], &len);
			add_doc(d, text, len);
		}
		free(names[i]);
	}
	free(names);
}

static void read_lines(struct docs *d, const char *path)
{
	size_t len;
	char *all = read_all(path, &len);
	for (char *p = all; p < all + len;) {
		char *nl = memchr(p, '\n', (size_t)(all + len - p));
		size_t l = nl ? (size_t)(nl - p) : (size_t)(all + len - p);
		char *t = malloc(l + 1);
		memcpy(t, p, l);
		if (l)
			add_doc(d, t, l);
		else
			free(t);
		p += l + 1;
	}
	free(all);
}

/* Review-like text: mostly common English words and punctuation, with
 * some capitals, numbers, HTML breaks, accents, curly quotes and CJK. */
static void synthetic(struct docs *d, size_t bytes)
{
	static const char vocab[] =
	    "the movie was a of and to is in it this that film i with but for not acting "
	    "plot story characters great terrible really watching director performance "
	    "scenes unbelievable excellent boring recommend cinematography Hollywood The It "
	    "I've don't 10/10 1985 café naïve “great” it’s — … <br /><br /> Amélie Pokémon "
	    "東京 (spoilers) !!!";
	const char *words[128];
	size_t wl[128], nw = 0;
	for (const char *p = vocab; *p && nw < 128;) {
		const char *e = strchr(p, ' ');
		while (e && e[1] == '/' && e[2] == '>') /* keep "<br /><br />" whole */
			e = strchr(e + 1, ' ');
		wl[nw] = e ? (size_t)(e - p) : strlen(p);
		words[nw++] = p;
		p += wl[nw - 1] + (e != NULL);
	}
	uint64_t x = 12345;
	while (d->bytes < bytes) {
		size_t cap = 1600, n = 0;
		char *t = malloc(cap + 64);
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		size_t want = 200 + (x >> 33) % 1400;
		while (n < want) {
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
			size_t k = (x >> 33) % nw, l = wl[k];
			memcpy(t + n, words[k], l);
			n += l;
			t[n++] = (x >> 20) % 13 == 0 ? ',' : (x >> 20) % 17 == 0 ? '.' : ' ';
			if (t[n - 1] != ' ')
				t[n++] = ' ';
		}
		add_doc(d, t, n);
	}
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best time of repeat passes over all documents; *tokens per pass. */
static double run(const struct text_tokenizer *tok, const struct docs *d, int repeat,
		  size_t *tokens)
{
	int32_t *ids = NULL;
	double best = 1e30;
	for (int r = 0; r <= repeat; r++) { /* pass 0 warms up */
		size_t total = 0;
		double t0 = now();
		for (size_t i = 0; i < d->n; i++) {
			size_t n = 0;
			if (text_tokenize(tok, d->text[i], d->len[i], &ids, &n))
				die(tensor_last_error(), NULL);
			total += n;
		}
		double t = now() - t0;
		if (r > 0 && t < best)
			best = t;
		*tokens = total;
	}
	free(ids);
	return best;
}

int main(int argc, char **argv)
{
	const char *vocab = NULL, *dir = NULL, *file = NULL;
	int repeat = 3;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help")) {
			fputs(usage, stdout);
			return 0;
		}
		if (i + 1 >= argc) {
			fputs(usage, stderr);
			die("unknown option or missing value", a);
		}
		if (!strcmp(a, "--vocab"))
			vocab = argv[++i];
		else if (!strcmp(a, "--dir"))
			dir = argv[++i];
		else if (!strcmp(a, "--file"))
			file = argv[++i];
		else if (!strcmp(a, "--repeat") && (repeat = atoi(argv[++i])) > 0)
			continue;
		else {
			fputs(usage, stderr);
			die("bad option", a);
		}
	}
	char def[4096];
	if (!vocab) /* the bundled copy */
		vocab = example_data_path("bert-base-uncased-vocab.txt", def, sizeof def);

	struct docs d = { 0 };
	const char *source = "synthetic";
	if (dir) {
		char sub[4096];
		snprintf(sub, sizeof sub, "%s/pos", dir);
		int imdb = is_dir(sub);
		snprintf(sub, sizeof sub, "%s/neg", dir);
		imdb = imdb || is_dir(sub);
		if (imdb) { /* aclImdb split: the reviews, not urls_*.txt */
			for (int k = 0; k < 2; k++) {
				snprintf(sub, sizeof sub, "%s/%s", dir, k ? "pos" : "neg");
				if (is_dir(sub))
					read_dir(&d, sub);
			}
		} else {
			read_dir(&d, dir);
		}
		source = dir;
	} else if (file) {
		read_lines(&d, file);
		source = file;
	} else {
		synthetic(&d, 16u << 20);
	}
	if (!d.n)
		die("no documents", source);

	struct text_tokenizer wp, byte;
	if (text_wordpiece_load(&wp, vocab) || text_byte_init(&byte))
		die(tensor_last_error(), NULL);
	printf("corpus: %s: %zu documents, %.2f MB; best of %d passes, one thread\n\n", source, d.n,
	       (double)d.bytes / 1e6, repeat);
	printf("| tokenizer | tokens | tokens/doc | seconds | MB/s | M tokens/s |\n");
	printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
	const struct text_tokenizer *toks[2] = { &wp, &byte };
	const char *names[2] = { "WordPiece (BERT uncased)", "byte" };
	for (int k = 0; k < 2; k++) {
		size_t tokens;
		double t = run(toks[k], &d, repeat, &tokens);
		printf("| %s | %zu | %.1f | %.3f | %.1f | %.2f |\n", names[k], tokens,
		       (double)tokens / (double)d.n, t, (double)d.bytes / 1e6 / t,
		       (double)tokens / 1e6 / t);
	}
	text_tokenizer_free(&wp);
	text_tokenizer_free(&byte);
	for (size_t i = 0; i < d.n; i++)
		free(d.text[i]);
	free(d.text);
	free(d.len);
	return 0;
}
