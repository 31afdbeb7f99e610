/* Memory: heap storage, scope arenas (chains of bump-allocated blocks reused
 * from scope to scope) and per-device live/peak accounting.
 *
 * Each open scope owns one chain of blocks per device for tensor data and one
 * host chain for headers. Heap storage of RECYCLE_MIN bytes or more takes a
 * block of its own. Blocks no longer in use go to a per-thread free list per
 * chain, shared by arenas and heap storage: a steady-state loop of identical
 * steps calls no allocator, and the blocks an arena hands back during backward
 * (tensor_scope_release_since) carry the gradients. Blocks come in size
 * classes, and the free list never holds more than twice the most ever in
 * use, so it stays bounded when shapes change.
 *
 * Accounting: live bytes are the bytes of tensors in use (arena allocations
 * rounded to ALIGN, heap storage at its size); reserved bytes are the device
 * blocks held, in use or cached (what the process really holds, tails of
 * partly filled blocks included); both have a peak. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "mem.h"

#define ALIGN 64
#define HOST_BLOCK (256u << 10)
#define DEVICE_BLOCK (4u << 20)
#define RECYCLE_MIN (64u << 10)
#define MAX_SCOPES 64
#define HOST TENSOR_NDEVICES /* index of the header chain */
#define NCHAINS (TENSOR_NDEVICES + 1)

struct block {
	struct block *next;
	void *data;
	size_t size, used;
	uint64_t first; /* sequence number of its first scope allocation */
};

struct scope {
	struct block *chain[NCHAINS]; /* newest first */
};

static _Thread_local struct scope scopes[MAX_SCOPES];
static _Thread_local int depth;
/* Free blocks per chain (most recent first); bytes of blocks of this thread
 * in use (in arenas or heap storage) and cached, and the most ever in use. */
static _Thread_local struct block *cache[NCHAINS];
static _Thread_local size_t in_use[NCHAINS], cached[NCHAINS], in_use_peak[NCHAINS];
/* Device allocations made in scopes so far (tensor_scope_mark). */
static _Thread_local uint64_t alloc_seq;
static _Thread_local int heap_mode;
/* tensor_mem_inject_failure: tensor allocations since the last call, and the
 * one to fail (-1: none). */
static _Thread_local int64_t allocs_seen, fail_at = -1;
static void (*_Atomic end_hook)(int depth);
/* Heap tensor headers alive, all threads (tensor_heap_tensors). */
static atomic_llong heap_headers;
/* The debug mode (tensor_set_debug): blocks released by scope ends, poisoned, wait in
 * quarantine: those since the last outermost end (fresh), and those of the step before
 * (aged), which go back to the cache at the next outermost end. And the watch for steps
 * that leave heap tensors behind: the count at the last outermost begin, how many
 * outermost begins in a row saw it grow, whether this thread has said so. */
static _Thread_local struct block *fresh[NCHAINS], *aged[NCHAINS];
static _Thread_local long long last_heap_count = -1;
static _Thread_local int growth_streak;
static _Thread_local bool growth_reported;
#define GROWTH_STEPS 4

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

/* p of nbytes, as raw_alloc was asked for. */
static void raw_free(int chain, void *p, size_t nbytes)
{
	if (chain == HOST)
		free(p);
	else
		tensor_backend_get((enum tensor_device)chain)->free(p, nbytes ? nbytes : 1);
}

static size_t clamp_sub(size_t a, size_t b)
{
	return b < a ? a - b : 0; /* blocks freed by another thread: a bound, never negative */
}

/* The smallest cached block of n to max bytes, unlinked, or NULL. */
static struct block *cache_take(int chain, size_t n, size_t max)
{
	struct block **best = NULL;
	for (struct block **pp = &cache[chain]; *pp; pp = &(*pp)->next)
		if ((*pp)->size >= n && (*pp)->size <= max &&
		    (!best || (*pp)->size < (*best)->size))
			best = pp;
	if (!best)
		return NULL;
	struct block *b = *best;
	*best = b->next;
	cached[chain] = clamp_sub(cached[chain], b->size);
	return b;
}

/* The size of a block for n bytes: from RECYCLE_MIN on, n rounded up to a
 * quarter of its power of two (at most 25% more), so that tensors whose
 * shapes change from step to step (batches as wide as their longest example)
 * ask for a few sizes that the free list serves again, instead of fresh pages
 * from the system each step. */
static size_t size_class(size_t n)
{
	if (n < RECYCLE_MIN)
		return n;
	size_t quarter = ((size_t)1 << (63 - __builtin_clzll((unsigned long long)n))) / 4;
	return (n + quarter - 1) / quarter * quarter;
}

/* A block of at least n bytes for a chain: the best-fitting cached one of at
 * most twice the size asked, else a new one of the size class; at least `min`
 * bytes when the cache or the allocator has them, else n. */
static struct block *block_get(int chain, size_t n, size_t min)
{
	size_t want = n > min ? size_class(round_up(n)) : min;
	struct block *b = cache_take(chain, want, 2 * want);
	if (!b && n < min)
		b = cache_take(chain, n, want); /* a smaller cached block still fits */
	if (!b) {
		b = malloc(sizeof *b);
		if (!b)
			return NULL;
		b->data = raw_alloc(chain, want);
		if (!b->data) {
			free(b);
			return NULL;
		}
		b->size = want;
		if (chain != HOST)
			count_reserved((enum tensor_device)chain, want, 0);
	}
	b->used = 0;
	in_use[chain] += b->size;
	if (in_use[chain] > in_use_peak[chain])
		in_use_peak[chain] = in_use[chain];
	return b;
}

static void block_free(int chain, struct block *b)
{
	if (chain != HOST)
		count_reserved((enum tensor_device)chain, 0, b->size);
	raw_free(chain, b->data, b->size);
	free(b);
}

/* Give a block back to its chain's cache, then return the least recently
 * cached blocks to the device while the cache holds more than twice the peak in
 * use (with the peak itself as the bound, steps of varying shapes kept
 * freeing blocks they needed again a step later). */
static void block_put(int chain, struct block *b)
{
	in_use[chain] = clamp_sub(in_use[chain], b->size);
	b->next = cache[chain];
	cache[chain] = b;
	cached[chain] += b->size;
	while (cached[chain] > 2 * in_use_peak[chain] && cache[chain]->next) {
		struct block **pp = &cache[chain];
		while ((*pp)->next)
			pp = &(*pp)->next;
		struct block *old = *pp;
		*pp = NULL;
		cached[chain] = clamp_sub(cached[chain], old->size);
		block_free(chain, old);
	}
}

static void *scope_alloc(struct scope *s, int chain, size_t n)
{
	size_t need = round_up(n ? n : 1);
	struct block *b = s->chain[chain];
	if (!b || b->size - b->used < need) {
		struct block *head = b;
		b = block_get(chain, need, chain == HOST ? HOST_BLOCK : DEVICE_BLOCK);
		if (!b)
			return NULL;
		b->first = alloc_seq;
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
	if (chain != HOST) {
		alloc_seq++;
		count_live((enum tensor_device)chain, need, 0);
	}
	return p;
}

/* The debug mode's poison over a block's used bytes: headers on the host chain, data on
 * the CPU's (another device's data is left as it is). */
static void poison(int chain, struct block *b)
{
	if (chain == HOST)
		memset(b->data, TENSOR_POISON_HEADER, b->used);
	else if (chain == TENSOR_CPU)
		memset(b->data, TENSOR_POISON_DATA, b->used);
}

/* Unlink the blocks of a chain from `first` on that hold none of keep's data
 * and hand them back. */
static void chain_release(struct block **pp, int chain, uint64_t first,
			  const struct tensor *const *keep, int nkeep)
{
	while (*pp) {
		struct block *b = *pp;
		bool kept = b->first < first;
		for (int i = 0; i < nkeep && !kept; i++) {
			const char *d = keep[i] && keep[i]->storage ? keep[i]->storage->data : NULL;
			kept = d >= (char *)b->data && d < (char *)b->data + b->size;
		}
		if (kept) {
			pp = &b->next;
			continue;
		}
		*pp = b->next;
		if (chain != HOST)
			count_live((enum tensor_device)chain, 0, b->used);
		if (tensor_debug())
			poison(chain, b);
		block_put(chain, b);
	}
}

/* Hand a quarantine list's blocks to the cache. */
static void unquarantine(struct block **list, int chain)
{
	while (*list) {
		struct block *b = *list;
		*list = b->next;
		block_put(chain, b);
	}
}

/* The end of scope s: its blocks go back to the cache, or in the debug mode are poisoned
 * and kept out of use until the next outermost scope end (outermost: this one is). */
static void scope_release(struct scope *s, bool outermost)
{
	if (!tensor_debug()) {
		for (int c = 0; c < NCHAINS; c++)
			chain_release(&s->chain[c], c, 0, NULL, 0);
		return;
	}
	for (int c = 0; c < NCHAINS; c++) {
		while (s->chain[c]) {
			struct block *b = s->chain[c];
			s->chain[c] = b->next;
			if (c != HOST)
				count_live((enum tensor_device)c, 0, b->used);
			poison(c, b);
			b->next = fresh[c];
			fresh[c] = b;
		}
		if (outermost) {
			unquarantine(&aged[c], c);
			aged[c] = fresh[c];
			fresh[c] = NULL;
		}
	}
}

/* The debug mode's watch at an outermost tensor_scope_begin: a report when the heap
 * tensors alive have grown at GROWTH_STEPS of them in a row (once a thread). */
static void watch_heap_growth(void)
{
	long long now = atomic_load(&heap_headers);
	growth_streak = last_heap_count >= 0 && now > last_heap_count ? growth_streak + 1 : 0;
	if (growth_streak == GROWTH_STEPS && !growth_reported) {
		growth_reported = true;
		fprintf(stderr,
			"cformer debug: %d outermost scopes in a row began with more heap tensors "
			"alive than the one before (%lld now): a tensor made outside the step's "
			"scope (a batch, say) is not freed; make it inside the scope or "
			"tensor_free it\n",
			GROWTH_STEPS, now);
	}
	last_heap_count = now;
}

void tensor_scope_begin(void)
{
	if (depth == 0 && tensor_debug())
		watch_heap_growth();
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
		scope_release(&scopes[depth], depth == 0);
	return TENSOR_OK;
}

int tensor_scope_depth(void)
{
	return depth;
}

int tensor_scope_of(const struct tensor *t)
{
	if (!t || !t->in_arena)
		return 0;
	int open = depth < MAX_SCOPES ? depth : MAX_SCOPES;
	for (int i = open - 1; i >= 0; i--)
		for (struct block *b = scopes[i].chain[HOST]; b; b = b->next)
			if ((const char *)t >= (char *)b->data &&
			    (const char *)t < (char *)b->data + b->size)
				return i + 1;
	return 0;
}

void tensor_scope_set_end_hook(void (*hook)(int depth))
{
	atomic_store(&end_hook, hook);
}

uint64_t tensor_scope_mark(void)
{
	return alloc_seq;
}

void tensor_scope_release_since(int scope_depth, uint64_t mark, const struct tensor *const *keep,
				int nkeep)
{
	/* Past MAX_SCOPES the deepest arena is shared with inner scopes: kept. */
	if (scope_depth < 1 || scope_depth > depth || scope_depth >= MAX_SCOPES)
		return;
	struct scope *s = &scopes[scope_depth - 1];
	for (int c = 0; c < TENSOR_NDEVICES; c++)
		chain_release(&s->chain[c], c, mark, keep, nkeep);
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

bool tensor_heap_mode(void)
{
	return heap_mode > 0;
}

static struct scope *current(void)
{
	if (depth == 0 || heap_mode)
		return NULL;
	return &scopes[(depth <= MAX_SCOPES ? depth : MAX_SCOPES) - 1];
}

int64_t tensor_mem_inject_failure(int64_t n)
{
	int64_t seen = allocs_seen;
	allocs_seen = 0;
	fail_at = n < 0 ? -1 : n;
	return seen;
}

static bool injected_failure(void)
{
	return allocs_seen++ == fail_at;
}

void *tensor_host_malloc(size_t n)
{
	return injected_failure() ? NULL : malloc(n);
}

void *tensor_host_calloc(size_t count, size_t size)
{
	return injected_failure() ? NULL : calloc(count, size);
}

void *tensor_host_realloc(void *p, size_t n)
{
	return injected_failure() ? NULL : realloc(p, n);
}

char *tensor_host_strdup(const char *s)
{
	return injected_failure() ? NULL : strdup(s);
}

struct tensor *tensor_header_alloc(void)
{
	struct scope *s = current();
	struct tensor *t = NULL;
	if (!injected_failure())
		t = s ? scope_alloc(s, HOST, sizeof *t) : malloc(sizeof *t);
	if (!t) {
		tensor_error(TENSOR_ERR_NOMEM, "tensor: out of host memory for a header");
		return NULL;
	}
	memset(t, 0, sizeof *t);
	t->in_arena = s != NULL;
	if (!s)
		atomic_fetch_add(&heap_headers, 1);
	return t;
}

void tensor_header_free(struct tensor *t)
{
	if (t && !t->in_arena) {
		atomic_fetch_sub(&heap_headers, 1);
		free(t);
	}
}

int64_t tensor_heap_tensors(void)
{
	return atomic_load(&heap_headers);
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
		h->block = block_get(dev, nbytes, 0);
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
	if (injected_failure()) {
		st = NULL;
	} else if (s) {
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
		block_put(st->device, h->block);
	else
		raw_free(st->device, st->data, st->nbytes);
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
	if (tensor_check_operand("scope_keep", NULL, "t", t) < 0)
		return NULL;
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
		/* a device with its own caching allocator counts what reaches
		 * the device */
		const struct tensor_backend *be =
		    tensor_device_available(dev) ? tensor_backend_get(dev) : NULL;
		if (be && be->counters)
			be->counters(&m.n_device_allocs, &m.n_syncs);
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

void tensor_mem_trim(void)
{
	for (int c = 0; c < NCHAINS; c++) {
		unquarantine(&fresh[c], c);
		unquarantine(&aged[c], c);
		while (cache[c]) {
			struct block *b = cache[c];
			cache[c] = b->next;
			block_free(c, b);
		}
		cached[c] = 0;
		in_use_peak[c] = in_use[c];
	}
	for (int d = 0; d < TENSOR_NDEVICES; d++) {
		/* a device this process never allocated on is left alone (not even
		 * initialised) */
		const struct tensor_backend *be =
		    atomic_load(&stats[d].allocs) ? tensor_backend_get((enum tensor_device)d) : NULL;
		if (be && be->trim)
			be->trim();
	}
}
