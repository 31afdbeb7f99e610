/* The library's own heap buffers (not tensors: the tape, kernels' scratch,
 * file contents, tokenizer tables, checkpoint headers) come from these, so
 * that the failure injected by tensor_mem_inject_failure reaches them too:
 * each call counts as one allocation and the armed one returns NULL (realloc
 * then leaves p as it was). Otherwise malloc, calloc, realloc and strdup.
 * Internal to cformer. */
#ifndef CFORMER_MEM_H
#define CFORMER_MEM_H

#include <stdbool.h>
#include <stddef.h>

void *tensor_host_malloc(size_t n);
void *tensor_host_calloc(size_t count, size_t size);
void *tensor_host_realloc(void *p, size_t n);
char *tensor_host_strdup(const char *s);

/* Whether tensor_heap_begin() is in effect in this thread (tensors are then
 * made on the heap even inside a scope). */
bool tensor_heap_mode(void);

/* The depth (1 = outermost) of the open scope whose arena holds t's header, whose end
 * releases it; 0 for a heap header (or one of no open scope). A search of the open scopes'
 * header blocks: for rare calls (autograd registers scoped leaves with it). */
struct tensor;
int tensor_scope_of(const struct tensor *t);

#endif
