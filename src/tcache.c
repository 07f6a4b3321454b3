/* Thread caches: per thread and small class, lists of free blocks of the
 * thread's arena linked through their first word, so malloc and free take
 * no lock.  A miss refills half a list; a full list gives half back.  Two
 * LIFO lists per class (tbin_t): a malloc right after a free does not wait
 * for the free's stores (docs/design.md, "Two lists per class").  Other
 * arenas' blocks freed here go home in batches ("foreign blocks").  A
 * cached block carries tcache_key in its second word, so a second free is
 * caught before the block is handed out twice.  A cache goes back to the
 * arenas when its thread exits (a pthread key destructor). */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

_Thread_local tcache_t tc __attribute__((tls_model("initial-exec")));
START_UP uintptr_t tcache_key;

START_UP static pthread_key_t exit_key;
START_UP static bool exit_key_ready;
/* set at the end of initialisation: until then calls go to the arenas */
START_UP static atomic_bool enabled;
START_UP static mutex_t list_mtx = MUTEX_INITIALIZER;
START_UP static list_t live;           /* caches of running threads */
START_UP static unsigned nlive;
/* counts of exited threads and threads without a cache */
static uint64_t gone_nmalloc[NCLASSES], gone_nfree[NCLASSES];

/* A list's first size: about 8 KiB of blocks (4 to 64) for a small class,
 * 32 KiB (at least 2) for a large one.  0 with tcache:false and in debug
 * and secure mode: the fast paths find the lists empty and full. */
static uint32_t bin_max(unsigned sclass)
{
	if (!cfg->tcache || cfg->debug || cfg->secure)
		return 0;
	size_t bytes = sclass < NSMALL ? (size_t)8 << 10 : (size_t)32 << 10;
	size_t n = bytes / class_size[sclass], lo = sclass < NSMALL ? 4 : 2;
	return (uint32_t)(n < lo ? lo : n > 64 ? 64 : n);
}

/* bin_max's figures, set by every thread's set-up alike: the GC's samples
 * read them for every list, where bin_max divides. */
static uint8_t first_max[NCACHED];

static bool bin_grown(unsigned sclass)
{
	return tc.bins[sclass].max > __atomic_load_n(&first_max[sclass], __ATOMIC_RELAXED);
}

/* A list that both overflows and runs dry doubles at its refill (as
 * tcmalloc's), up to CACHE_GROW_MAX blocks; one that only overflows
 * belongs to a consumer and would only hold blocks longer.  A thread's
 * lists grow by its share (purge_cache_grow_share, at most
 * CACHE_GROW_STEADY); past it only a list a burst ran dry grows, from what
 * others left of CACHE_GROW_BYTES (purge_cache_may_grow). */
#define CACHE_GROW_BYTES ((size_t)8 << 20)
#define CACHE_GROW_STEADY ((size_t)4 << 20)
/* Shorter lists tell no burst from a random walk (full to empty: max^2 / 4
 * mallocs for a walk, max for a burst). */
#define BURST_MIN_BLOCKS 64u
#define CACHE_GROW_MAX 2048u
_Static_assert(CACHE_GROW_MAX <= UINT16_MAX, "gc_count and gc_low (16 bits) hold a list's length");

/* the sum of every live cache's tc.grown */
static atomic_size_t grown_all;

static void grown_add(tcache_t *t, long d)
{
	t->grown += (size_t)d;
	atomic_fetch_add_explicit(&grown_all, (size_t)d, memory_order_relaxed);
}

/* burst: dry within its length of mallocs after its last flush */
static void bin_grow(tbin_t *b, unsigned sclass, bool burst)
{
	uint32_t add = b->max;
	if (add == 0 || b->max + add > CACHE_GROW_MAX)
		return;
	size_t bytes = (size_t)add * class_size[sclass];
	bool ok = tc.grown + bytes <= purge_cache_grow_share(tcache_nlive(), CACHE_GROW_STEADY) ||
		  (burst && purge_cache_may_grow(tc.grown,
						 atomic_load_explicit(&grown_all, memory_order_relaxed),
						 bytes, CACHE_GROW_BYTES));
	if (!ok)
		return;
	grown_add(&tc, (long)bytes);
	b->max += add;
	b->room += (int32_t)add;
}

static void live_add(tcache_t *t)
{
	mutex_lock(&list_mtx);
	list_push_front(&live, &t->link);
	nlive++;
	mutex_unlock(&list_mtx);
}

static void merge_counts(tcache_t *t)
{
	for (unsigned c = 0; c < NCLASSES; c++) {
		__atomic_fetch_add(&gone_nmalloc[c], tcache_count(t, c, false), __ATOMIC_RELAXED);
		__atomic_fetch_add(&gone_nfree[c], tcache_count(t, c, true), __ATOMIC_RELAXED);
	}
}

static void live_remove(tcache_t *t)
{
	ARENA_ASSERT_LOCKED(&list_mtx);
	ARENA_ASSERT(nlive > 0);
	list_remove(&live, &t->link);
	nlive--;
	merge_counts(t);
}

/* Sets up this thread's cache once initialisation is complete; live only
 * with its exit hook in place. */
static void setup(void)
{
	if (!atomic_load_explicit(&enabled, memory_order_acquire) || tc.state != TC_NONE)
		return;
	tc.arena = arena_pick();
	tc.salt = arena_salt(tc.arena);
	tc.state = TC_DEAD; /* re-entrant calls: direct */
	/* may allocate (glibc's key table past 32 keys) */
	if (!exit_key_ready || pthread_setspecific(exit_key, &tc) != 0)
		return;
	for (unsigned c = 0; c < NCACHED; c++) {
		tc.bins[c].room = (int32_t)(tc.bins[c].max = bin_max(c));
		__atomic_store_n(&first_max[c], (uint8_t)tc.bins[c].max, __ATOMIC_RELAXED);
		tc.foreign[c].max = tc.bins[c].max < FOREIGN_MAX ? tc.bins[c].max : FOREIGN_MAX;
		/* heap profiles' foreign lists; freed lists' room: prof_cache.c */
		tc.foreign[NCACHED + c].max = prof_on ? tc.foreign[c].max : 0;
	}
	tc.grown = 0;
	live_add(&tc);
	tc.state = TC_ACTIVE;
}

arena_t *tcache_arena(void)
{
	if (unlikely(tc.state == TC_NONE))
		setup();
	return tc.arena ? tc.arena : &arenas[0];
}

static void count_gone(unsigned sclass, bool is_free)
{
	__atomic_fetch_add(is_free ? &gone_nfree[sclass] : &gone_nmalloc[sclass], 1,
			   __ATOMIC_RELAXED);
}

/* Frees of a cached class are nmalloc + held + nfree_adj (refills,
 * flushes, and calls bypassing the lists) + foreign frees.  Others read
 * them without stopping the owner: a figure may be a block behind. */
static void adj_add(tcache_t *t, unsigned sclass, int64_t d)
{
	__atomic_store_n(&t->nfree_adj[sclass], t->nfree_adj[sclass] + d, __ATOMIC_RELAXED);
}

/* Blocks in t's own lists of sclass (freed list included). */
static int64_t lists_held(const tcache_t *t, unsigned sclass)
{
	const tbin_t *b = &t->bins[sclass];
	int64_t held = 0;
	for (const tbin_t *l = b; l; l = l == b ? &t->freed[sclass] : NULL) {
		int32_t room = __atomic_load_n(&l->room, __ATOMIC_RELAXED);
		held += (int64_t)__atomic_load_n(&l->max, __ATOMIC_RELAXED) - (room > 0 ? room : 0);
	}
	return held;
}

/* A bin's nmalloc counts the blocks avail was given when it was filled
 * (malloc's fast path counts nothing): the mallocs are nmalloc less
 * avail's length.  The owner walks avail, on slow paths only; others'
 * figures lead by at most a list, nmalloc and the frees alike. */
static uint32_t list_len(const void *p)
{
	uint32_t n = 0;
	for (; p; p = link_next(p))
		n++;
	return n;
}

uint64_t tcache_nmalloc(unsigned sclass)
{
	return tc.bins[sclass].nmalloc - list_len(tc.bins[sclass].avail);
}

uint64_t tcache_count(const tcache_t *t, unsigned sclass, bool is_free)
{
	if (sclass >= NCACHED) {
		const uint64_t *n = is_free ? t->large_nfree : t->large_nmalloc;
		return __atomic_load_n(&n[sclass - NCACHED], __ATOMIC_RELAXED);
	}
	uint64_t nmalloc = t == &tc ? tcache_nmalloc(sclass)
				    : __atomic_load_n(&t->bins[sclass].nmalloc, __ATOMIC_RELAXED);
	if (!is_free)
		return nmalloc;
	int64_t held = lists_held(t, sclass);
	return nmalloc + (uint64_t)(held + __atomic_load_n(&t->nfree_adj[sclass], __ATOMIC_RELAXED)) +
	       __atomic_load_n(&t->foreign[sclass].nfree, __ATOMIC_RELAXED) +
	       __atomic_load_n(&t->foreign[NCACHED + sclass].nfree, __ATOMIC_RELAXED);
}

void tcache_count_alloc(unsigned sclass)
{
	if (unlikely(tc.state != TC_ACTIVE)) {
		count_gone(sclass, false);
	} else if (sclass < NCACHED) {
		counter_inc(&tc.bins[sclass].nmalloc);
		adj_add(&tc, sclass, -1);
	} else {
		counter_inc(&tc.large_nmalloc[sclass - NCACHED]);
	}
}

void tcache_count_free(unsigned sclass)
{
	if (unlikely(tc.state != TC_ACTIVE))
		count_gone(sclass, true);
	else if (sclass < NCACHED)
		adj_add(&tc, sclass, 1);
	else
		counter_inc(&tc.large_nfree[sclass - NCACHED]);
}

/* Whether p is arena a's, *chunk a chunk of a's: a chunk's blocks are its
 * arena's, so only a block of another chunk reads a header. */
static inline bool same_arena(const void *p, uintptr_t *chunk, const arena_t *a)
{
	uintptr_t c = (uintptr_t)p & ~(uintptr_t)CHUNK_MASK;
	if (c == *chunk)
		return true;
	if (chunk_hdr_of(p)->arena != a)
		return false;
	*chunk = c;
	return true;
}

/* Gives n blocks back (not linked), an array per run of one arena's
 * blocks; own: the caller's thread's arena. */
static void return_blocks(void **blocks, unsigned n, unsigned sclass, const arena_t *own)
{
	for (unsigned i = 0, j; i < n; i = j) {
		arena_t *a = chunk_hdr_of(blocks[i])->arena;
		uintptr_t chunk = (uintptr_t)blocks[i] & ~(uintptr_t)CHUNK_MASK;
		for (j = i + 1; j < n && same_arena(blocks[j], &chunk, a); j++)
			;
		remote_free_chain(a, sclass, blocks + i, j - i, false, a == own);
	}
}

/* ---- fresh blocks linked lazily
 * Linking a block writes its first line: in fresh memory, a page fault.  A
 * refill of blocks of a page or more keeps the run of never-used blocks at
 * its end unlinked (slabs hand out their fresh blocks in address order),
 * and a miss links one at a time, in a random order that needs no memory:
 * lazy_cur += lazy_step mod lazy_m, the step coprime to the run's length
 * and not 1 or -1, so consecutive mallocs are not neighbours.  One run per
 * thread: while one is kept, refills link all they take; flushes, the GC
 * and thread exit give a run back to its slabs, still untouched.  Its
 * blocks count as held by their list (its room).
 * Not below a page: blocks share pages there, and runs of 1 KiB blocks
 * cost bench/alloc_test -t 1 1.9% more instructions (callgrind). */
#define LAZY_MIN_SIZE PAGE_SIZE

/* The run's next block. */
static void *lazy_next(void)
{
	ARENA_ASSERT(tc.lazy_n > 0 && tc.lazy_cur < tc.lazy_m);
	void *p = tc.lazy_base + (size_t)tc.lazy_cur * class_size[tc.lazy_class];
	tc.lazy_cur = (uint16_t)((tc.lazy_cur + tc.lazy_step) % tc.lazy_m);
	tc.lazy_n--;
	return p;
}

bool tcache_lazy_fill(unsigned sclass)
{
	if (tc.lazy_n == 0 || tc.lazy_class != sclass)
		return false;
	tbin_t *b = &tc.bins[sclass];
	void **q = lazy_next();
	link_set(q, b->head);
	q[1] = (void *)zero_mark();
	b->head = q;
	return true;
}

/* The run's blocks back to their slabs, unwritten (under a's lock). */
static void lazy_drop_locked(arena_t *a)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	unsigned n = tc.lazy_n;
	while (tc.lazy_n > 0) {
		void *p = lazy_next();
		arena_chunk_t *c = chunk_hdr_of(p);
		ARENA_ASSERT(c->arena == a);
		slab_free_block(c, c->ref[page_index(c, p)].slab, p);
	}
	tc.bins[tc.lazy_class].room += (int32_t)n;
	adj_add(&tc, tc.lazy_class, n);
}

static void lazy_drop(unsigned sclass)
{
	if (tc.lazy_n == 0 || tc.lazy_class != sclass)
		return;
	arena_t *a = chunk_hdr_of(tc.lazy_base)->arena;
	arena_lock(a);
	lazy_drop_locked(a);
	arena_unlock(a);
}

static _Thread_local uint64_t shuffle_state;

/* The next of a per-thread xorshift seeded from the secret key. */
static uint64_t xorshift(uint64_t *state)
{
	uint64_t x = *state ? *state : (tcache_key ^ (uintptr_t)state) | 1;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *state = x;
}

static unsigned gcd(unsigned a, unsigned b)
{
	while (b) {
		unsigned t = a % b;
		a = b;
		b = t;
	}
	return a;
}

/* How many of the n blocks at the end of batch (zero: bit i, batch[i]
 * known zero) the refill keeps unlinked: a run of two or more fresh
 * neighbours, else 0. */
static unsigned lazy_run(void **batch, unsigned n, uint64_t zero, unsigned sclass)
{
	size_t size = class_size[sclass];
	if (size < LAZY_MIN_SIZE || prof_on || n < 2 || !(zero >> (n - 1) & 1))
		return 0;
	unsigned m = 1; /* batch[n - m .. n) */
	while (m < n && (zero >> (n - 1 - m) & 1) &&
	       (char *)batch[n - 1 - m] + size == (char *)batch[n - m])
		m++;
	return m > 1 ? m : 0;
}

/* Keeps batch[first .. first + m) (neighbours, in address order) as the
 * run: a random start and step. */
static void lazy_keep(void **batch, unsigned first, unsigned m, unsigned sclass)
{
	ARENA_ASSERT(tc.lazy_n == 0 && m >= 2 && m <= 64 && sclass < NSMALL); /* slab blocks */
	uint64_t x = xorshift(&shuffle_state);
	/* coprime to m, and neither 1 nor m - 1 where m allows (not 4 or 6) */
	unsigned step = 1;
	for (unsigned k = 0, s = 2 + (unsigned)((x >> 32) % m); k < m && step == 1; k++, s++)
		if (s % m > 1 && s % m < m - 1 && gcd(s % m, m) == 1)
			step = s % m;
	tc.lazy_base = batch[first];
	tc.lazy_class = sclass;
	tc.lazy_m = tc.lazy_n = (uint16_t)m;
	tc.lazy_step = (uint16_t)step;
	tc.lazy_cur = (uint16_t)((uint32_t)x % m);
}

static void gc_note_low(tcache_t *t, unsigned sclass, uint32_t count);
static void tcache_gc(void);

/* Gives back all but keep blocks from the front: only those are walked. */
void tcache_flush_bin(tcache_t *t, unsigned sclass, unsigned keep)
{
	tbin_t *b = &t->bins[sclass];
	if (t == &tc)
		lazy_drop(sclass);
	ARENA_ASSERT(sclass < NCACHED && b->room >= 0 && (uint32_t)b->room <= b->max);
	unsigned count = b->max - (unsigned)b->room;
	if (count <= keep)
		return;
	gc_note_low(t, sclass, keep);
	tcache_give_back(t, b, sclass, count - keep);
}

/* Gives back at most n blocks from the front of *list (one of l's): how
 * many went. */
static unsigned give_from(tcache_t *t, tbin_t *l, void **list, unsigned sclass, unsigned n)
{
	void *p = *list, *batch[64];
	unsigned gone = 0;
	while (p && gone < n) { /* next read before its block goes */
		unsigned k = 0;
		for (; p && k < 64 && gone + k < n; p = link_next(p))
			batch[k++] = p;
		*list = p;
		l->room += (int32_t)k;
		adj_add(t, sclass, k);
		gone += k;
		return_blocks(batch, k, sclass, t->arena);
	}
	return gone;
}

/* Gives back the first n blocks of t's list l (a bin or a freed list),
 * avail first: head's blocks are likelier in the CPU's caches. */
void tcache_give_back(tcache_t *t, tbin_t *l, unsigned sclass, unsigned n)
{
	unsigned k = give_from(t, l, &l->avail, sclass, n);
	if (l == &t->bins[sclass]) /* counted when avail was filled */
		counter_add(&l->nmalloc, -(uint64_t)k);
	n -= k;
	give_from(t, l, &l->head, sclass, n);
}

/* The refill of b (both lists empty), under the arena's lock: a transfer
 * batch (at most chain blocks), else want (<= 64) from slabs or pages.
 * The first is handed out, the rest go to head, so the next malloc after
 * a free gets the block just freed (tests/misuse_cases.h). */
/* A refill's blocks are handed out in a random order (a Fisher-Yates
 * shuffle, a per-thread xorshift seeded from the secret key), so that
 * consecutive mallocs are not neighbours: the block an overflow reaches is
 * not the one allocated next.  A block's zero mark (bit i of zero for
 * batch[i]) is set before the shuffle moves it; step i fixes slot i, so
 * its block is linked to b's head there (head: batch[1], batch[2], ...);
 * batch[0], returned, is unlinked. */
static void *shuffle_link(tbin_t *b, void **batch, unsigned n, uint64_t zero)
{
	uintptr_t mark = zero_mark();
	uint64_t all = n == 64 ? ~0ULL : (1ULL << n) - 1;
	if ((zero & all) == 0 || (zero & all) == all) { /* most refills: one word */
		uintptr_t w = zero & 1 ? mark : 0;
		for (unsigned i = 0; i < n; i++)
			((uintptr_t *)batch[i])[1] = w;
	} else {
		for (unsigned i = 0; i < n; i++, zero >>= 1) /* a cached block's key goes */
			((uintptr_t *)batch[i])[1] = mark & -(zero & 1);
	}
	uint64_t x = shuffle_state ? shuffle_state : (tcache_key ^ (uintptr_t)&shuffle_state) | 1;
	void *head = b->head;
	for (unsigned i = n - 1; i > 0; i--) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		unsigned j = (unsigned)(((x >> 32) * (i + 1)) >> 32);
		void *q = batch[j];
		batch[j] = batch[i];
		link_set(q, head);
		head = q;
	}
	shuffle_state = x;
	b->head = head;
	void **p = batch[0];
	p[1] = NULL;
	return p;
}

static void *refill(tbin_t *b, unsigned sclass, unsigned want, unsigned chain, unsigned *got)
{
	ARENA_ASSERT(sclass < NCACHED && want > 0 && want <= 64 && !b->avail && !b->head);
	arena_t *a = tcache_arena();
	arena_lock(a);
	remote_drain(a);
	uint64_t chunks_taken = a->chunks_taken;
	void **p = b->max ? remote_take_batch(a, sclass, chain, got) : NULL;
	if (p) {
		arena_unlock(a);
		b->head = link_next(p);
		p[1] = NULL; /* not a key */
	} else {
		void *batch[64];
		uint64_t zero = 0;
		*got = sclass < NSMALL ? slab_alloc_batch(a, sclass, batch, want, &zero)
				       : large_alloc_batch(a, sclass, batch, want);
		if (a->chunks_taken != chunks_taken)
			tc.gc_fresh = true;
		unsigned keep = tc.lazy_n ? 0 : lazy_run(batch, *got, zero, sclass);
		arena_unlock(a);
		if (*got == 0) {
			errno_enomem();
			return NULL;
		}
		unsigned n = *got - keep;
		if (n > 0)
			p = shuffle_link(b, batch, n, zero);
		if (keep) {
			lazy_keep(batch, n, keep, sclass);
			if (n == 0) /* fresh: no key */
				p = lazy_next();
		}
	}
	b->room -= (int32_t)(*got - 1);
	adj_add(&tc, sclass, -(int64_t)(*got - 1));
	tcache_count_alloc(sclass);
	return p;
}

/* refill for prof_cache.c, the rest in avail. */
void *tcache_refill(unsigned sclass, unsigned want, unsigned chain, unsigned *got)
{
	tbin_t *b = &tc.bins[sclass];
	void *p = refill(b, sclass, want, chain, got);
	if (p)
		tcache_take_freed(b, tcache_head_len(b, sclass));
	return p;
}

uint32_t tcache_first_max(unsigned sclass)
{
	return bin_max(sclass);
}

/* A list flushed since its last refill grows now. */
void tcache_grow(unsigned sclass)
{
	if (tc.flushed[sclass]) {
		tbin_t *b = &tc.bins[sclass];
		tc.flushed[sclass] = 0;
		bin_grow(b, sclass, b->max >= BURST_MIN_BLOCKS &&
					    (uint32_t)tcache_nmalloc(sclass) - tc.flush_nmalloc[sclass] <= b->max);
	}
}

void tcache_note_flush(unsigned sclass)
{
	tc.flushed[sclass] = 1;
	tc.flush_nmalloc[sclass] = (uint32_t)tcache_nmalloc(sclass);
}

/* A miss: a refill, then one block (initialised already). */
void *tcache_alloc_slow(unsigned sclass)
{
	if (unlikely(tc.state == TC_NONE))
		setup();
	tbin_t *b = &tc.bins[sclass];
	if (b->avail) /* set-up ran a re-entrant free */
		return tcache_pop(b);
	if (b->head || tcache_lazy_fill(sclass)) { /* avail dry, head not moved over */
		ARENA_ASSERT(list_len(b->head) == tcache_head_len(b, sclass));
		return tcache_pop_freed(b, sclass);
	}
	gc_note_low(&tc, sclass, 0);
	tcache_gc();
	tcache_grow(sclass);
	unsigned want = b->max ? b->max / 2u : 1u, got;
	return refill(b, sclass, want > 64 ? 64 : want, (unsigned)b->room + 1, &got);
}

/* ---- giving back what the thread does not use (purge.c's policy)
 * Only the owner touches its cache.  At its slow paths, at most once per
 * decay period, it gives back what a list held unused all period
 * (purge_cache_unused) and shrinks grown lists by as much.  A thread that
 * stopped allocating keeps its cache until it exits or calls malloc_trim.
 * The low-water mark is a bound from the slow paths and nmalloc. */

/* sclass's list held count blocks at a refill or flush. */
static void gc_note_low(tcache_t *t, unsigned sclass, uint32_t count)
{
	if (t->gc_count[sclass] > count)
		t->gc_count[sclass] = (uint16_t)count;
	if (t->gc_low[sclass] > count)
		t->gc_low[sclass] = (uint16_t)count;
}

static void gc_mark_bin(unsigned c)
{
	tc.gc_low[c] = tc.gc_count[c] = (uint16_t)(tc.bins[c].max - (uint32_t)tc.bins[c].room);
	tc.gc_nmalloc[c] = tcache_nmalloc(c);
}

static void gc_mark(uint64_t now)
{
	tc.gc_ms = now;
	for (unsigned c = 0; c < NCACHED; c++)
		gc_mark_bin(c);
}

/* bytes given back, all threads */
static atomic_ulong gc_bytes;

uint64_t tcache_gc_bytes(void)
{
	return atomic_load_explicit(&gc_bytes, memory_order_relaxed);
}

/* One list's look: back what it held unused all period. */
static void gc_bin(unsigned sclass)
{
	tbin_t *b = &tc.bins[sclass];
	uint32_t count = b->max - (uint32_t)b->room;
	uint32_t unused = purge_cache_unused(tc.gc_count[sclass], tc.gc_low[sclass],
					     tcache_nmalloc(sclass) - tc.gc_nmalloc[sclass], count);
	ARENA_ASSERT(unused <= count);
	if (unused == 0)
		return;
	tcache_flush_bin(&tc, sclass, count - unused);
	uint32_t first = bin_max(sclass);
	if (b->max > first) {
		uint32_t cut = b->max - first < unused ? b->max - first : unused;
		b->max -= cut;
		b->room -= (int32_t)cut;
		grown_add(&tc, -(long)((size_t)cut * class_size[sclass]));
	}
	atomic_fetch_add_explicit(&gc_bytes, (uint64_t)unused * class_size[sclass],
				  memory_order_relaxed);
}

/* Slow paths per sample of the lists (~1,000 instructions) and clock read. */
#define GC_EVERY 32u /* callgrind, bench/xthread -p 1 -c 1: 67.3 M vs 70.4 M at every path */

/* List c back to its first size (its blocks past it given back). */
void tcache_back_to_first(unsigned c)
{
	tbin_t *b = &tc.bins[c];
	uint32_t first = bin_max(c);
	/* grown, and holding no more than its first size */
	ARENA_ASSERT(b->max >= first && b->room >= (int32_t)(b->max - first));
	grown_add(&tc, -(long)((size_t)(b->max - first) * class_size[c]));
	b->room -= (int32_t)(b->max - first);
	b->max = first;
}

/* A look at grown list c after a new chunk: gc_bin, or when idle (no
 * malloc since the sample before) all it holds past its first size, and
 * it shrinks to it.  gc_bin alone frees nothing of a list that ran dry,
 * as every grown list did (tests/progs/cache_gc). */
static void gc_grown(unsigned c, bool idle)
{
	tbin_t *b = &tc.bins[c];
	uint32_t count = b->max - (uint32_t)b->room, first = bin_max(c);
	if (!idle) {
		gc_bin(c);
		return;
	}
	if (count > first)
		tcache_flush_bin(&tc, c, first);
	tcache_back_to_first(c);
	if (count > first)
		atomic_fetch_add_explicit(&gc_bytes, (uint64_t)(count - first) * class_size[c],
					  memory_order_relaxed);
}

/* At a slow path: a look at every list once per decay period, and at the
 * grown lists (gc_grown) when a refill took a new chunk: the footprint
 * grows while idle lists hold blocks.  A new chunk, not zero pages:
 * looks at such refills would feed themselves. */
static void tcache_gc(void)
{
	if (tc.state != TC_ACTIVE ||
	    ((++tc.gc_events & (GC_EVERY - 1)) != 0 && !tc.gc_fresh))
		return;
	bool idle[NCACHED]; /* no malloc since the last sample */
	for (unsigned c = 0; c < NCACHED; c++) { /* samples of the lengths */
		uint32_t count = tc.bins[c].max - (uint32_t)tc.bins[c].room;
		if (tc.gc_low[c] > count)
			tc.gc_low[c] = (uint16_t)count;
		/* grown lists' only (gc_grown): a list grows at a refill, a
		 * malloc, so an older sample gives it the same answer */
		idle[c] = false;
		if (bin_grown(c)) {
			uint64_t n = tcache_nmalloc(c);
			idle[c] = n == tc.gc_seen[c];
			tc.gc_seen[c] = n;
		}
	}
	uint64_t now = os_now_ms();
	bool fresh = tc.gc_fresh && cfg->tcache_gc;
	tc.gc_fresh = false;
	if (!purge_cache_gc_due(tc.gc_ms, now)) {
		if (fresh) /* the grown lists, each its own period */
			for (unsigned c = 0; c < NCACHED; c++)
				if (bin_grown(c))
					gc_grown(c, idle[c]), gc_mark_bin(c);
		return;
	}
	if (tc.gc_ms) /* the first look starts a period */
		for (unsigned c = 0; c < NCACHED; c++)
			gc_bin(c);
	gc_mark(now);
	/* and the arena's empty slabs (slab.c) */
	arena_lock(tc.arena);
	slab_sweep(tc.arena, now);
	arena_unlock(tc.arena);
}

static bool holds(const void *head, const void *p)
{
	for (const void *q = head; q; q = link_next(q))
		if (q == p)
			return true;
	return false;
}

/* A keyed block is free if in this thread's lists of its class or in its
 * slab.  (One in another thread's cache is caught when both copies reach
 * the slab.) */
static bool already_free(unsigned sclass, void *p)
{
	if (holds(tc.bins[sclass].head, p) || holds(tc.bins[sclass].avail, p) ||
	    holds(tc.foreign[sclass].head, p) ||
	    holds(tc.freed[sclass].head, p) || holds(tc.foreign[NCACHED + sclass].head, p))
		return true;
	arena_chunk_t *c = chunk_hdr_of(p);
	size_t idx = page_index(c, p);
	arena_lock(c->arena);
	/* it may wait on the arena's stacks */
	remote_drain_all(c->arena);
	page_info_t pi = c->page[idx];
	slab_t *s = pi.kind == PG_SLAB ? c->ref[idx].slab : NULL;
	bool is_free = s ? slab_block_free(s, p) : pi.kind == PG_FREE;
	arena_unlock(c->arena);
	return is_free;
}

/* block_freed's test: a live block has no key (one load); with
 * tcache:false the slab is asked. */
bool tcache_block_freed(void *p, unsigned sclass)
{
	if (cfg->tcache && ((uintptr_t *)p)[1] != tcache_key)
		return false;
	return already_free(sclass, p);
}

/* Every free of a cached class checks: p free already (reported)?  The
 * key is authoritative: every path that hands a block out clears its
 * second word (tcache_pop, refill, alloc_big), so a keyed block is free,
 * in this thread's lists, its slab, or another thread's cache or a
 * transfer batch on its way home, where no walk of this thread's could
 * find it. */
bool tcache_free_double(void *p, unsigned sclass)
{
	(void)sclass;
	if (((uintptr_t *)p)[1] == tcache_key) {
		out_misuse("double free", p);
		return true;
	}
	return false;
}

/* A freed block straight home, keyed: a second push onto the remote stack
 * would make a loop. */
static void free_home(void *p, unsigned sclass)
{
	((void **)p)[1] = (void *)tcache_key;
	return_blocks(&p, 1, sclass, tc.arena);
	tcache_count_free(sclass);
}

/* Another arena's block, checked: onto the foreign list, or home. */
static void foreign_put(void *p, unsigned sclass)
{
	fbin_t *f = &tc.foreign[sclass];
	if (f->max)
		foreign_push(&tc, f, p);
	else
		free_home(p, sclass);
}

/* Half of full list b goes back, and the cache looks at its lists
 * (tcache_gc); the look may shrink this very list to its first size,
 * which the blocks kept fill (gc_grown): half goes back again. */
static void make_room(tbin_t *b, unsigned sclass)
{
	tcache_flush_bin(&tc, sclass, b->max / 2u);
	tcache_note_flush(sclass);
	tcache_gc();
	if (b->room == 0)
		tcache_flush_bin(&tc, sclass, b->max / 2u);
}

/* free's slow path: a full list (half goes back), no live cache, or a key. */
static __attribute__((noinline)) void free_slow(void *p, unsigned sclass)
{
	tbin_t *b = &tc.bins[sclass];
	if (b->room < 0) /* the fast path took a place there was not */
		b->room = 0;
	if (tcache_free_double(p, sclass))
		return;
	if (tc.state == TC_NONE)
		setup();
	/* salt 0 (no cache yet) passes arena 0's blocks */
	if (chunk_hdr_of(p)->arena != tcache_arena()) {
		foreign_put(p, sclass);
		return;
	}
	if (b->max == 0) {
		free_home(p, sclass);
		return;
	}
	if (b->room == 0)
		make_room(b, sclass);
	ARENA_ASSERT(b->room > 0);
	b->room--;
	tcache_push(b, p);
}

void tcache_free_slow(void *p, unsigned sclass)
{
	free_slow(p, sclass);
}

/* For prof_cache.c: true when p goes elsewhere than this thread's lists. */
bool tcache_free_elsewhere(void *p, unsigned sclass)
{
	if (tc.state == TC_NONE)
		setup();
	if (chunk_hdr_of(p)->arena != tcache_arena()) {
		foreign_put(p, sclass);
		return true;
	}
	if (tc.state != TC_ACTIVE || tc.bins[sclass].max == 0) {
		free_home(p, sclass);
		return true;
	}
	return false;
}

/* ---- foreign blocks
 * Another arena's block freed here is not handed out here again (false
 * sharing with its owner: bench/cache_scratch).  It waits in a chain of at
 * most FOREIGN_MAX of its class, which goes home in one push (a transfer
 * batch for the owner's next refill). */
/* Gives t's foreign list index (NCACHED + class: heap profiles') back, a
 * run of one arena's blocks at a time, linked as they are: one walk reads
 * the links and fills the array the runs go home in (remote_free_chain). */
void tcache_foreign_flush(tcache_t *t, unsigned index)
{
	fbin_t *f = &t->foreign[index];
	unsigned sclass = index % NCACHED, n = 0;
	void *p = f->head, *blocks[FOREIGN_MAX];
	ARENA_ASSERT(index < 2 * NCACHED && f->n <= FOREIGN_MAX);
	f->head = NULL;
	f->n = 0;
	while (p && n < FOREIGN_MAX) {
		arena_t *a = chunk_hdr_of(p)->arena;
		uintptr_t chunk = (uintptr_t)p & ~(uintptr_t)CHUNK_MASK;
		unsigned first = n;
		do
			blocks[n++] = p;
		while ((p = link_next(p)) && n < FOREIGN_MAX && same_arena(p, &chunk, a));
		link_set(blocks[n - 1], NULL); /* its link read, or one misuse:warn cut */
		remote_free_chain(a, sclass, blocks + first, n - first, true, a == t->arena);
	}
	if (unlikely(p != NULL)) /* longer than f->n counted: a link led elsewhere */
		out_misuse("free list corrupted (a forged link or a write after free)", blocks[n - 1]);
}

void tcache_free_foreign(void *p, unsigned sclass)
{
	if (tcache_free_double(p, sclass))
		return;
	if (tc.state == TC_NONE)
		setup();
	foreign_put(p, sclass);
}

/* Told how many live caches are left (background.c). */
static void (*exit_hook)(unsigned nlive_left);

void tcache_set_exit_hook(void (*hook)(unsigned nlive_left))
{
	__atomic_store_n(&exit_hook, hook, __ATOMIC_RELEASE);
}

static void thread_exit(void *arg)
{
	tcache_t *t = arg;
	if (t->state != TC_ACTIVE)
		return;
	for (unsigned c = 0; c < NCACHED; c++) {
		t->foreign[c].max = t->foreign[NCACHED + c].max = 0;
		tcache_foreign_flush(t, c);
		tcache_foreign_flush(t, NCACHED + c);
		tcache_flush_bin(t, c, 0);
		ARENA_ASSERT(!t->bins[c].avail && !t->bins[c].head);
		t->bins[c].max = t->bins[c].room = 0;
		tcache_give_back(t, &t->freed[c], c, UINT32_MAX);
		t->freed[c].max = (uint32_t)(t->freed[c].room = 0);
	}
	grown_add(t, -(long)t->grown); /* room for the others */
	mutex_lock(&list_mtx);
	live_remove(t);
	t->state = TC_DEAD;
	unsigned left = nlive;
	mutex_unlock(&list_mtx);
	atomic_fetch_sub_explicit(&t->arena->nthreads, 1, memory_order_relaxed);
	if (prof_on) /* heap profiles: its last walk */
		prof_stack_thread_exit();
	void (*hook)(unsigned) = __atomic_load_n(&exit_hook, __ATOMIC_ACQUIRE);
	if (hook)
		hook(left);
}

/* The exit hook and the double-free key, a secret of libarena's own
 * (freed blocks show it). */
void tcache_init_key(void)
{
	tcache_key = (uintptr_t)os_random() | 1;
	exit_key_ready = pthread_key_create(&exit_key, thread_exit) == 0;
}

void tcache_enable(void)
{
	atomic_store_explicit(&enabled, true, memory_order_release);
}

void tcache_lock_list(void) { mutex_lock(&list_mtx); }
void tcache_unlock_list(void) { mutex_unlock(&list_mtx); }

/* In the child of fork only the forking thread survives: the other caches
 * are dropped (their blocks stay unusable; bounded by the cache size), and
 * so are their threads' places in their arenas, or the child's new threads
 * would be bound by the parent's count (a thread whose arena only the dead
 * threads had used took the forking thread's).  Counted afresh, not
 * subtracted: a thread between arena_pick and live_add at the fork had a
 * place and no cache on the list. */
void tcache_after_fork_child(void)
{
	ARENA_ASSERT_LOCKED(&list_mtx);
	for (tcache_t *t = list_first(&live, tcache_t, link), *next; t; t = next) {
		next = list_next(t, tcache_t, link);
		if (t != &tc)
			live_remove(t);
	}

	atomic_store_explicit(&grown_all, tc.state == TC_ACTIVE ? tc.grown : 0, memory_order_relaxed);
	arena_threads_after_fork(tc.state == TC_ACTIVE ? tc.arena : NULL);
}

/* Blocks of class c in t's lists, foreign ones included. */
static uint64_t tcache_held(const tcache_t *t, unsigned c)
{
	if (c >= NCACHED)
		return 0;
	return (uint64_t)lists_held(t, c) + __atomic_load_n(&t->foreign[c].n, __ATOMIC_RELAXED) +
	       __atomic_load_n(&t->foreign[NCACHED + c].n, __ATOMIC_RELAXED);
}

void tcache_sum(uint64_t *nmalloc, uint64_t *nfree, uint64_t *cached, unsigned *nthreads)
{
	mutex_lock(&list_mtx);
	for (unsigned c = 0; c < NCLASSES; c++) {
		nmalloc[c] = __atomic_load_n(&gone_nmalloc[c], __ATOMIC_RELAXED);
		nfree[c] = __atomic_load_n(&gone_nfree[c], __ATOMIC_RELAXED);
		cached[c] = 0;
		list_for_each(t, &live, tcache_t, link) {
			nmalloc[c] += tcache_count(t, c, false);
			nfree[c] += tcache_count(t, c, true);
			cached[c] += tcache_held(t, c);
		}
	}
	*nthreads = nlive;
	mutex_unlock(&list_mtx);
}

/* read without the lock */
unsigned tcache_nlive(void)
{
	return __atomic_load_n(&nlive, __ATOMIC_RELAXED);
}
