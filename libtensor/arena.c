/* Memory: heap storage, scope arenas (chains of bump-allocated blocks reused
 * from scope to scope) and per-device live/peak accounting.
 *
 * Each open scope owns one chain of blocks per device for tensor data and one
 * host chain for headers. Ending a scope moves its blocks to a per-thread
 * cache, so a steady-state loop of identical scopes calls no allocator. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

#define ALIGN 64
#define HOST_BLOCK (256u << 10)
#define DEVICE_BLOCK (4u << 20)
#define MAX_SCOPES 64
#define HOST TENSOR_NDEVICES /* index of the header chain */

struct block {
	struct block *next;
	void *data;
	size_t size, used;
};

struct scope {
	struct block *chain[TENSOR_NDEVICES + 1]; /* newest first */
};

static _Thread_local struct scope scopes[MAX_SCOPES];
static _Thread_local int depth;
static _Thread_local struct block *cache[TENSOR_NDEVICES + 1];
static _Thread_local int heap_mode;
static void (*_Atomic end_hook)(int depth);

struct counters {
	atomic_size_t live, peak, reserved, allocs;
};
static struct counters stats[TENSOR_NDEVICES];

static void count_live(enum tensor_device dev, size_t add, size_t sub)
{
	struct counters *c = &stats[dev];
	size_t now = atomic_fetch_add(&c->live, add) + add;
	atomic_fetch_sub(&c->live, sub);
	size_t peak = atomic_load(&c->peak);
	while (now > peak && !atomic_compare_exchange_weak(&c->peak, &peak, now))
		;
}

static size_t round_up(size_t n)
{
	return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

static void *raw_alloc(int chain, size_t nbytes)
{
	if (chain == HOST)
		return aligned_alloc(ALIGN, round_up(nbytes));
	const struct tensor_backend *be = tensor_backend_get((enum tensor_device)chain);
	if (!be)
		return NULL;
	atomic_fetch_add(&stats[chain].allocs, 1);
	return be->alloc(nbytes ? nbytes : 1);
}

static void raw_free(int chain, void *p)
{
	if (chain == HOST)
		free(p);
	else
		tensor_backend_get((enum tensor_device)chain)->free(p);
}

/* A block of at least n bytes, from the cache if one fits. */
static struct block *block_get(int chain, size_t n)
{
	for (struct block **pp = &cache[chain]; *pp; pp = &(*pp)->next) {
		if ((*pp)->size >= n) {
			struct block *b = *pp;
			*pp = b->next;
			b->used = 0;
			return b;
		}
	}
	size_t min = chain == HOST ? HOST_BLOCK : DEVICE_BLOCK;
	size_t size = n > min ? round_up(n) : min;
	struct block *b = malloc(sizeof *b);
	if (!b)
		return NULL;
	b->data = raw_alloc(chain, size);
	if (!b->data) {
		free(b);
		return NULL;
	}
	b->size = size;
	b->used = 0;
	if (chain != HOST)
		atomic_fetch_add(&stats[chain].reserved, size);
	return b;
}

static void *scope_alloc(struct scope *s, int chain, size_t n)
{
	size_t need = round_up(n ? n : 1);
	struct block *b = s->chain[chain];
	if (!b || b->size - b->used < need) {
		b = block_get(chain, need);
		if (!b)
			return NULL;
		b->next = s->chain[chain];
		s->chain[chain] = b;
	}
	void *p = (char *)b->data + b->used;
	b->used += need;
	if (chain != HOST)
		count_live((enum tensor_device)chain, need, 0);
	return p;
}

static void scope_release(struct scope *s)
{
	for (int c = 0; c <= HOST; c++) {
		struct block *b = s->chain[c];
		while (b) {
			struct block *next = b->next;
			if (c != HOST)
				count_live((enum tensor_device)c, 0, b->used);
			b->next = cache[c];
			cache[c] = b;
			b = next;
		}
		s->chain[c] = NULL;
	}
}

void tensor_scope_begin(void)
{
	/* Past MAX_SCOPES nesting, inner scopes share the deepest arena. */
	if (depth < MAX_SCOPES)
		memset(&scopes[depth], 0, sizeof scopes[depth]);
	depth++;
}

int tensor_scope_end(void)
{
	if (depth == 0)
		return tensor_error(TENSOR_ERR_STATE, "tensor_scope_end: no scope is open");
	void (*hook)(int) = atomic_load(&end_hook);
	if (hook)
		hook(depth);
	depth--;
	if (depth < MAX_SCOPES)
		scope_release(&scopes[depth]);
	return TENSOR_OK;
}

int tensor_scope_depth(void)
{
	return depth;
}

void tensor_scope_set_end_hook(void (*hook)(int depth))
{
	atomic_store(&end_hook, hook);
}

void tensor_heap_begin(void)
{
	heap_mode++;
}

void tensor_heap_end(void)
{
	if (heap_mode > 0)
		heap_mode--;
}

static struct scope *current(void)
{
	if (depth == 0 || heap_mode)
		return NULL;
	return &scopes[(depth <= MAX_SCOPES ? depth : MAX_SCOPES) - 1];
}

struct tensor *tensor_header_alloc(void)
{
	struct scope *s = current();
	struct tensor *t = s ? scope_alloc(s, HOST, sizeof *t) : malloc(sizeof *t);
	if (!t) {
		tensor_error(TENSOR_ERR_NOMEM, "tensor: out of host memory for a header");
		return NULL;
	}
	memset(t, 0, sizeof *t);
	t->in_arena = s != NULL;
	return t;
}

struct tensor_storage *tensor_storage_alloc(enum tensor_device dev, size_t nbytes)
{
	const struct tensor_backend *be = tensor_backend_get(dev);
	if (!be)
		return NULL;
	struct scope *s = current();
	struct tensor_storage *st;
	if (s) {
		st = scope_alloc(s, HOST, sizeof *st);
		if (st)
			st->data = scope_alloc(s, dev, nbytes);
	} else {
		st = malloc(sizeof *st);
		if (st) {
			st->data = raw_alloc(dev, nbytes);
			if (st->data)
				count_live(dev, nbytes, 0);
			else {
				free(st);
				st = NULL;
			}
		}
	}
	if (!st || !st->data) {
		tensor_error(TENSOR_ERR_NOMEM, "tensor: cannot allocate %zu bytes on %s", nbytes,
			     tensor_device_name(dev));
		return NULL;
	}
	st->nbytes = nbytes;
	st->device = dev;
	st->refcount = 1;
	st->in_arena = s != NULL;
	st->tape_refs = 0;
	return st;
}

void tensor_storage_release(struct tensor_storage *st)
{
	if (!st || st->in_arena || --st->refcount > 0)
		return;
	raw_free(st->device, st->data);
	count_live(st->device, 0, st->nbytes);
	free(st);
}

struct tensor *tensor_scope_keep(const struct tensor *t)
{
	if (!t)
		return NULL;
	if (depth == 0) {
		tensor_error(TENSOR_ERR_STATE, "tensor_scope_keep: no scope is open");
		return NULL;
	}
	/* Allocate the copy as if the innermost scope were already closed. */
	int saved = depth;
	depth--;
	struct tensor *copy = tensor_clone(t);
	depth = saved;
	return copy;
}

struct tensor_mem_stats tensor_mem_stats(enum tensor_device dev)
{
	struct tensor_mem_stats m = { 0 };
	if ((unsigned)dev < TENSOR_NDEVICES) {
		m.live_bytes = atomic_load(&stats[dev].live);
		m.peak_bytes = atomic_load(&stats[dev].peak);
		m.reserved_bytes = atomic_load(&stats[dev].reserved);
		m.n_device_allocs = atomic_load(&stats[dev].allocs);
	}
	return m;
}

void tensor_mem_reset_peak(enum tensor_device dev)
{
	if ((unsigned)dev < TENSOR_NDEVICES)
		atomic_store(&stats[dev].peak, atomic_load(&stats[dev].live));
}

void tensor_mem_trim(void)
{
	for (int c = 0; c <= HOST; c++) {
		while (cache[c]) {
			struct block *b = cache[c];
			cache[c] = b->next;
			if (c != HOST)
				atomic_fetch_sub(&stats[c].reserved, b->size);
			raw_free(c, b->data);
			free(b);
		}
	}
}
