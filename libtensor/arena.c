/* Memory: heap storage, scope arenas (chains of bump-allocated blocks reused
 * from scope to scope) and per-device live/peak accounting.
 *
 * Each open scope owns one chain of blocks per device for tensor data and one
 * host chain for headers. Ending a scope moves its blocks to a per-thread
 * cache, so a steady-state loop of identical scopes calls no allocator. Heap
 * storage of RECYCLE_MIN bytes or more takes a block of its own from a
 * per-thread heap cache and gives it back when released, so tensors created
 * and freed every step (the intermediate gradients of backward) reuse memory
 * too.
 *
 * Accounting: live bytes are the bytes of tensors in use (arena allocations
 * rounded to ALIGN, heap storage at its size); reserved bytes are the device
 * blocks held, in use or cached (what the process really holds, tails of
 * partly filled blocks included); both have a peak. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

#define ALIGN 64
#define HOST_BLOCK (256u << 10)
#define DEVICE_BLOCK (4u << 20)
#define RECYCLE_MIN (64u << 10)
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
/* Free blocks: of scopes (one list per chain), of big heap storage (per
 * device). Kept apart so that each settles at its own steady-state set. */
static _Thread_local struct block *cache[TENSOR_NDEVICES + 1], *heap_cache[TENSOR_NDEVICES];
/* Bytes of heap blocks of this thread in use and cached, and the most ever in
 * use: the cache never holds more than that, so it stays bounded when shapes
 * change from step to step. */
static _Thread_local size_t heap_used[TENSOR_NDEVICES], heap_cached[TENSOR_NDEVICES],
    heap_used_peak[TENSOR_NDEVICES];
static _Thread_local int heap_mode;
static void (*_Atomic end_hook)(int depth);

/* Heap storage, with the cached block its data came from (NULL: raw_alloc). */
struct heap_storage {
	struct tensor_storage st;
	struct block *block;
};

struct counters {
	atomic_size_t live, peak, reserved, peak_reserved, allocs;
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

static void count_reserved(enum tensor_device dev, size_t add, size_t sub)
{
	struct counters *c = &stats[dev];
	size_t now = atomic_fetch_add(&c->reserved, add) + add;
	atomic_fetch_sub(&c->reserved, sub);
	size_t peak = atomic_load(&c->peak_reserved);
	while (now > peak && !atomic_compare_exchange_weak(&c->peak_reserved, &peak, now))
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

/* The smallest cached block of n to max bytes, unlinked, or NULL. */
static struct block *cache_take(struct block **list, size_t n, size_t max)
{
	struct block **best = NULL;
	for (struct block **pp = list; *pp; pp = &(*pp)->next)
		if ((*pp)->size >= n && (*pp)->size <= max &&
		    (!best || (*pp)->size < (*best)->size))
			best = pp;
	if (!best)
		return NULL;
	struct block *b = *best;
	*best = b->next;
	b->used = 0;
	return b;
}

/* A block of at least n bytes: the best-fitting cached one of at most max
 * bytes, else a new one of n bytes, at least `min`. */
static struct block *block_get(struct block **list, int chain, size_t n, size_t min, size_t max)
{
	struct block *b = cache_take(list, n > min ? n : min, max);
	if (!b && n < min)
		b = cache_take(list, n, max); /* a smaller cached block still fits */
	if (b)
		return b;
	size_t size = n > min ? round_up(n) : min;
	b = malloc(sizeof *b);
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
		count_reserved((enum tensor_device)chain, size, 0);
	return b;
}

static void block_put(struct block **list, struct block *b)
{
	b->next = *list;
	*list = b;
}

static void *scope_alloc(struct scope *s, int chain, size_t n)
{
	size_t need = round_up(n ? n : 1);
	struct block *b = s->chain[chain];
	if (!b || b->size - b->used < need) {
		struct block *head = b;
		b = block_get(&cache[chain], chain, need, chain == HOST ? HOST_BLOCK : DEVICE_BLOCK,
			      SIZE_MAX);
		if (!b)
			return NULL;
		/* Keep bump-allocating in the head when it has more room left than
		 * the new block will (a big tensor in a block of its own). */
		if (head && head->size - head->used > b->size - need) {
			b->next = head->next;
			head->next = b;
		} else {
			b->next = head;
			s->chain[chain] = b;
		}
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
			block_put(&cache[c], b);
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

/* A heap block of at least n bytes, cached or new. */
static struct block *heap_block_get(enum tensor_device dev, size_t n)
{
	struct block *b = cache_take(&heap_cache[dev], n, 2 * round_up(n));
	if (b)
		heap_cached[dev] -= b->size;
	else
		b = block_get(&heap_cache[dev], dev, n, 0, 0); /* max 0: a new block */
	if (b) {
		heap_used[dev] += b->size;
		if (heap_used[dev] > heap_used_peak[dev])
			heap_used_peak[dev] = heap_used[dev];
	}
	return b;
}

/* The last block of a list, unlinked. */
static struct block *list_pop_last(struct block **list)
{
	while ((*list)->next)
		list = &(*list)->next;
	struct block *b = *list;
	*list = NULL;
	return b;
}

static void heap_block_put(enum tensor_device dev, struct block *b)
{
	/* a block freed by another thread than the one that took it: the
	 * counters of this thread are only a bound, never negative */
	heap_used[dev] -= b->size < heap_used[dev] ? b->size : heap_used[dev];
	block_put(&heap_cache[dev], b);
	heap_cached[dev] += b->size;
	while (heap_cached[dev] > heap_used_peak[dev] && heap_cache[dev]) {
		struct block *old = list_pop_last(&heap_cache[dev]); /* the least recent */
		heap_cached[dev] -= old->size < heap_cached[dev] ? old->size : heap_cached[dev];
		count_reserved(dev, 0, old->size);
		raw_free(dev, old->data);
		free(old);
	}
}

/* Heap storage: big data in a cached block of at most twice its size (or a
 * new block that will be cached when released), small data from the device
 * allocator. */
static struct tensor_storage *heap_storage_alloc(enum tensor_device dev, size_t nbytes)
{
	struct heap_storage *h = malloc(sizeof *h);
	if (!h)
		return NULL;
	h->block = NULL;
	if (nbytes >= RECYCLE_MIN) {
		h->block = heap_block_get(dev, nbytes);
		h->st.data = h->block ? h->block->data : NULL;
	} else {
		h->st.data = raw_alloc(dev, nbytes);
	}
	if (!h->st.data) {
		free(h);
		return NULL;
	}
	count_live(dev, nbytes, 0);
	return &h->st;
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
		st = heap_storage_alloc(dev, nbytes);
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
	struct heap_storage *h = (struct heap_storage *)st;
	if (h->block)
		heap_block_put(st->device, h->block);
	else
		raw_free(st->device, st->data);
	count_live(st->device, 0, st->nbytes);
	free(h);
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
		m.peak_reserved_bytes = atomic_load(&stats[dev].peak_reserved);
		m.n_device_allocs = atomic_load(&stats[dev].allocs);
	}
	return m;
}

void tensor_mem_reset_peak(enum tensor_device dev)
{
	if ((unsigned)dev < TENSOR_NDEVICES) {
		atomic_store(&stats[dev].peak, atomic_load(&stats[dev].live));
		atomic_store(&stats[dev].peak_reserved, atomic_load(&stats[dev].reserved));
	}
}

static void trim(struct block **list, int chain)
{
	while (*list) {
		struct block *b = *list;
		*list = b->next;
		if (chain != HOST)
			count_reserved((enum tensor_device)chain, 0, b->size);
		raw_free(chain, b->data);
		free(b);
	}
}

void tensor_mem_trim(void)
{
	for (int c = 0; c <= HOST; c++)
		trim(&cache[c], c);
	for (int d = 0; d < TENSOR_NDEVICES; d++) {
		trim(&heap_cache[d], d);
		heap_cached[d] = 0;
	}
}
