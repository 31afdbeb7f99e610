/* Where the example programs find their bundled data (the IMDB review subset,
 * the language-identification sentences, the BERT vocabulary) without a path
 * of the build tree compiled in: $CFORMER_DATA_DIR if set; else the source
 * tree of the build the program runs from, found from the program's own path
 * (/proc/self/exe) and the source tree's place relative to the build tree;
 * else share/cformer beside the program's bin/ (an installed tree, moved or
 * not); else the configured data directory ($(datadir)/cformer). */
#ifndef CFORMER_EXAMPLE_DATA_H
#define CFORMER_EXAMPLE_DATA_H

#include <stddef.h>

/* The path of the bundled file or directory `name` ("aclImdb_subset",
 * "langid.tsv", "bert-base-uncased-vocab.txt") into buf (len bytes); the
 * first place that holds it, else its installed path (for the error the
 * caller then reports). Returns buf. */
const char *example_data_path(const char *name, char *buf, size_t len);

#endif
