/* Thread caches: per thread and per small size class, a short list of free
 * blocks of the thread's arena linked through their first word, so malloc
 * and free of small blocks take no lock.  A miss refills half a list from
 * the thread's arena; a full list gives half back.
 *
 * Two lists: a class's blocks are in two LIFO lists, counted together
 * (tbin_t): free pushes onto head, malloc pops avail, and when avail is
 * empty the whole of head becomes avail (two stores, no walk).  With
 * one list, a malloc that follows a free of its class pops the block that
 * free has just pushed: it reads the list head and the block's link that
 * the free is still storing, and the free's pointer often comes last in
 * the program's own chain of work (bench/glibc_thread: a slot chosen by a
 * division, loaded, then freed).  Each malloc waited for the free before
 * it; with two lists it does not (mimalloc's page-local free list: its
 * pops and pushes never meet).  glibc_thread 1t 51.6 -> 64.9 M ops/s,
 * mimalloc 59.3 (pinned to one CPU, medians of 5 interleaved rounds;
 * docs/design.md, "Two lists per class"); the fast paths' instructions are
 * unchanged (16 and ~27).  Blocks of other
 * arenas freed here wait on a list of their own and go home in batches
 * ("foreign blocks" below).  Bounded: at most max blocks per class (at
 * first about 8 KiB; lists that need more grow), and 64 foreign ones.
 *
 * A block in a cache carries tcache_key in its second word, so freeing it
 * again is noticed (then confirmed by a walk of that list) before it could
 * be handed out twice.  A thread's cache goes back to the arenas when the
 * thread exits (a pthread key destructor). */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

_Thread_local tcache_t tc __attribute__((tls_model("initial-exec")));
START_UP uintptr_t tcache_key;

START_UP static pthread_key_t exit_key;
START_UP static bool exit_key_ready;
/* Set by tcache_enable() at the end of initialisation: until then no
 * thread sets up a cache (calls go straight to the arenas). */
START_UP static atomic_bool enabled;
START_UP static mutex_t list_mtx = MUTEX_INITIALIZER;
START_UP static list_t live;           /* caches of running threads   */
START_UP static unsigned nlive;
/* Counts of caches gone (exited threads) and of threads without a cache. */
static uint64_t gone_nmalloc[NCLASSES], gone_nfree[NCLASSES];

/* A list's first size: small classes about 8 KiB of blocks (4 to 64),
 * large ones (16-64 KiB) 32 KiB (2); lists that need more grow (bin_grow).
 * Was 32 KiB and 128 KiB: bench/glibc_thread -t 1 (1,024 slots of 4 B to 32
 * KiB, sizes falling as 1/size^2) kept ~270 KiB in its lists, peak RSS
 * 2.80 -> 2.71 MiB (glibc 2.44; /usr/bin/time, 5 runs each), with the same
 * callgrind count for bench/alloc_free -n 1000000 (191.8 M) and the same
 * hit and burst loops (80.0, 83.0).  None with tcache:false, and none in
 * debug mode, where every block must pass through debug.c's checks: the
 * fast paths do not test the mode, they find the cache empty and full
 * instead. */
static uint32_t bin_max(unsigned sclass)
{
	if (!cfg->tcache || cfg->debug)
		return 0;
	size_t bytes = sclass < NSMALL ? (size_t)8 << 10 : (size_t)32 << 10;
	size_t n = bytes / class_size[sclass], lo = sclass < NSMALL ? 4 : 2;
	return (uint32_t)(n < lo ? lo : n > 64 ? 64 : n);
}

/* A list that both overflows and runs dry grows, as tcmalloc's do: a
 * program that allocates K blocks and frees them again, K just above the
 * list's size, sent most of them through the slabs each time (a loop of
 * 100 blocks of 64 B: 153 instructions per malloc and free under
 * callgrind, against 48 on a hit; tcmalloc 80, mimalloc 57).  A refill of
 * a list that was flushed since its last refill doubles it, while this
 * thread's budget lasts (CACHE_GROW_BYTES in all, so a thread caches at
 * most that much more), up to CACHE_GROW_MAX blocks.  Only such a list:
 * one that only overflows belongs to a thread that frees more than it
 * allocates of the class (a consumer of another thread's blocks), and a
 * longer list would only hold its blocks longer (growing on overflow,
 * bench/xthread's consumer kept 1 MiB more of the producer's memory: peak
 * RSS 1.68x glibc's); one that only runs dry gains nothing from room it
 * never fills.  (glibc_simple's 1,600 blocks of 16 B to 1 KiB, from
 * bench/run: 1,024-block lists and a 1 MiB budget missed on every round.)
 * A thread's lists grow by less where many threads have a cache: its
 * share of what all may grow by (purge_cache_grow_share, at most
 * CACHE_GROW_STEADY).  Past it only a list that a burst of mallocs ran dry
 * (within its length of mallocs after its last flush, a list of at least
 * BURST_MIN_BLOCKS) may grow, from what the other threads left of the
 * shared 8 MiB, up to CACHE_GROW_BYTES (purge_cache_may_grow):
 * glibc_simple's rounds of 1,600 blocks of 4 KiB (6.4 MiB) then hold in
 * one list, alone or beside a waiting main thread (tests/progs/
 * cache_alone).  Not every list: a random walk also runs dry after a flush,
 * later, and gains little from the room (bench/alloc_free -t 1, 4,096
 * slots of mixed sizes: peak RSS 6.2 -> 7.0 MiB with 8 MiB for every list
 * in one thread, callgrind -0.1%; -t 2, with the pool for every list:
 * 10.1 -> 10.5 MiB). */
#define CACHE_GROW_BYTES ((size_t)8 << 20)
#define CACHE_GROW_STEADY ((size_t)4 << 20)
/* A list shorter than this tells no burst from a random walk: a walk
 * between full and empty takes about max^2 / 4 mallocs, a burst max. */
#define BURST_MIN_BLOCKS 64u
#define CACHE_GROW_MAX 2048u
_Static_assert(CACHE_GROW_MAX <= UINT16_MAX, "gc_count and gc_low (16 bits) hold a list's length");

/* What every live cache's lists grew by (the sum of their tc.grown). */
static atomic_size_t grown_all;

/* This thread's lists grew (d > 0) or shrank by d bytes. */
static void grown_add(tcache_t *t, long d)
{
	t->grown += (size_t)d;
	atomic_fetch_add_explicit(&grown_all, (size_t)d, memory_order_relaxed);
}

/* burst: the list ran dry within its length of mallocs after its last
 * flush (tcache_grow). */
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

/* Sets up this thread's cache once initialisation is complete (until then,
 * calls go straight to the arenas).  A cache is live only with its exit hook
 * in place: the list must never keep the cache of a thread that is gone. */
static void setup(void)
{
	if (!atomic_load_explicit(&enabled, memory_order_acquire) || tc.state != TC_NONE)
		return;
	tc.arena = arena_pick();
	tc.salt = arena_salt(tc.arena);
	tc.state = TC_DEAD; /* re-entrant calls from pthread_setspecific: direct */
	/* May allocate (glibc's second-level key table for keys past 32). */
	if (!exit_key_ready || pthread_setspecific(exit_key, &tc) != 0)
		return;
	for (unsigned c = 0; c < NCACHED; c++) {
		tc.bins[c].room = (int32_t)(tc.bins[c].max = bin_max(c));
		tc.foreign[c].max = tc.bins[c].max < FOREIGN_MAX ? tc.bins[c].max : FOREIGN_MAX;
		/* free's foreign path with heap profiles (foreign_at); the
		 * freed lists get their room from prof_cache.c */
		tc.foreign[NCACHED + c].max = prof_on ? tc.foreign[c].max : 0;
	}
	tc.grown = 0;
	live_add(&tc);
	tc.state = TC_ACTIVE;
}

arena_t *thread_arena(void)
{
	if (unlikely(tc.state == TC_NONE))
		setup();
	return tc.arena ? tc.arena : &arenas[0];
}

/* Counts for threads whose cache is not live (exiting, or before set-up). */
static void count_gone(unsigned sclass, bool is_free)
{
	__atomic_fetch_add(is_free ? &gone_nfree[sclass] : &gone_nmalloc[sclass], 1,
			   __ATOMIC_RELAXED);
}

/* A cached class's frees are not counted one by one (tbin_t): they are
 * nmalloc + the blocks in the list + nfree_adj, where nfree_adj takes
 * every other way a block enters or leaves the list (a refill, a flush)
 * and every malloc or free that does not pass through it, + the foreign
 * blocks freed (counted where they go).  Read by other
 * threads too (statistics), without the owner stopping: a figure may be a
 * block behind while the owner is between two of its stores. */
static void adj_add(tcache_t *t, unsigned sclass, int64_t d)
{
	__atomic_store_n(&t->nfree_adj[sclass], t->nfree_adj[sclass] + d, __ATOMIC_RELAXED);
}

/* Blocks in t's own lists of cached class sclass (both lists, and the
 * freed list of heap profiles). */
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

uint64_t tcache_count(const tcache_t *t, unsigned sclass, bool is_free)
{
	if (sclass >= NCACHED) {
		const uint64_t *n = is_free ? t->large_nfree : t->large_nmalloc;
		return __atomic_load_n(&n[sclass - NCACHED], __ATOMIC_RELAXED);
	}
	uint64_t nmalloc = __atomic_load_n(&t->bins[sclass].nmalloc, __ATOMIC_RELAXED);
	if (!is_free)
		return nmalloc;
	int64_t held = lists_held(t, sclass);
	return nmalloc + (uint64_t)(held + __atomic_load_n(&t->nfree_adj[sclass], __ATOMIC_RELAXED)) +
	       __atomic_load_n(&t->foreign[sclass].nfree, __ATOMIC_RELAXED) +
	       __atomic_load_n(&t->foreign[NCACHED + sclass].nfree, __ATOMIC_RELAXED);
}

void count_alloc(unsigned sclass)
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

void count_free(unsigned sclass)
{
	if (unlikely(tc.state != TC_ACTIVE))
		count_gone(sclass, true);
	else if (sclass < NCACHED)
		adj_add(&tc, sclass, 1);
	else
		counter_inc(&tc.large_nfree[sclass - NCACHED]);
}

/* Gives n blocks of class sclass back to their arenas, one chain per run of
 * blocks of the same arena: to this thread's own arena under its lock (if
 * free), to any other with one atomic push (arena_free_chain). */
static void return_blocks(void **blocks, unsigned n, unsigned sclass)
{
	arena_t *own = tc.arena;
	for (unsigned i = 0, j; i < n; i = j) {
		arena_t *a = chunk_hdr_of(blocks[i])->arena;
		for (j = i + 1; j < n && chunk_hdr_of(blocks[j])->arena == a; j++)
			*(void **)blocks[j - 1] = blocks[j];
		*(void **)blocks[j - 1] = NULL;
		arena_free_chain(a, sclass, blocks[i], blocks[j - 1], j - i,
				 (size_t)(j - i) * class_size[sclass], a == own);
	}
}

static void gc_note_low(tcache_t *t, unsigned sclass, uint32_t count);
static void tcache_gc(void);

/* Gives back all but keep blocks of t's list for sclass, from the head:
 * the list's first blocks, so that only the blocks that go are walked.
 * (Keeping the first keep and giving back the rest walked the kept ones
 * too, one cache miss each: with lists grown to 1024 blocks, a flush in
 * bench/xmalloc -p 2 -c 2 walked 512 blocks another core had written, and
 * tcache_flush_bin took 34% of the run's time, perf cpu-clock samples.) */
void tcache_flush_bin(tcache_t *t, unsigned sclass, unsigned keep)
{
	tbin_t *b = &t->bins[sclass];
	ARENA_ASSERT(sclass < NCACHED && b->room >= 0 && (uint32_t)b->room <= b->max);
	unsigned count = b->max - (unsigned)b->room;
	if (count <= keep)
		return;
	gc_note_low(t, sclass, keep);
	tcache_give_back(t, b, sclass, count - keep);
}

/* Gives back at most n blocks from the front of *list, one of l's lists
 * of sclass (l's room grows by as many): how many went. */
static unsigned give_from(tcache_t *t, tbin_t *l, void **list, unsigned sclass, unsigned n)
{
	void *p = *list, *batch[64];
	unsigned gone = 0;
	while (p && gone < n) { /* each next pointer is read before its block goes back */
		unsigned k = 0;
		for (; p && k < 64 && gone + k < n; p = link_next(p))
			batch[k++] = p;
		*list = p;
		l->room += (int32_t)k;
		adj_add(t, sclass, k);
		gone += k;
		return_blocks(batch, k, sclass);
	}
	return gone;
}

/* Gives back the first n blocks of t's list l of sclass (a bin, or with
 * heap profiles a freed list): counted as a flush.  A bin's avail goes
 * first: the blocks in head were freed since it was filled, and the
 * program is likelier to have them in its caches. */
void tcache_give_back(tcache_t *t, tbin_t *l, unsigned sclass, unsigned n)
{
	n -= give_from(t, l, &l->avail, sclass, n);
	give_from(t, l, &l->head, sclass, n);
}

/* The refill of this thread's lists b of sclass (both empty), under its
 * arena's lock: a chain another thread's cache flushed (a transfer batch,
 * at most chain blocks), else want (at most 64) blocks from slabs or
 * pages.  The first is handed out; the rest go where frees go (head), and
 * become avail at the next malloc: so a program's next malloc of the class
 * after a free gets the block it just freed, as the misuse tests' writes
 * after free need (tests/misuse_cases.h).  *got: how many were taken. */
static void *refill(tbin_t *b, unsigned sclass, unsigned want, unsigned chain, unsigned *got)
{
	ARENA_ASSERT(sclass < NCACHED && want > 0 && want <= 64 && !b->avail && !b->head);
	arena_t *a = thread_arena();
	arena_lock(a);
	arena_drain_remote(a);
	uint64_t chunks_taken = a->chunks_taken;
	void **p = b->max ? arena_take_batch(a, sclass, chain, got) : NULL;
	if (p) {
		arena_unlock(a);
		b->head = p[0];
		p[1] = NULL; /* the link between chains: not a key (see below) */
	} else {
		void *batch[64];
		uint64_t zero = 0;
		*got = sclass < NSMALL ? slab_alloc_batch(a, sclass, batch, want, &zero)
				       : large_alloc_batch(a, sclass, batch, want);
		if (a->chunks_taken != chunks_taken)
			tc.gc_fresh = true;
		arena_unlock(a);
		if (*got == 0) {
			errno_enomem();
			return NULL;
		}
		for (unsigned i = *got - 1; i > 0; i--) {
			void **q = batch[i];
			q[0] = b->head;
			q[1] = zero >> i & 1 ? (void *)zero_mark() : NULL;
			b->head = q;
		}
		/* A block that went back to its slab from a cache still carries
		 * the key: handed out with it, its next free would look like a
		 * double one and walk the whole list (up to 1024 blocks) and take
		 * the arena lock to be sure.  Blocks 1.. had the word set above;
		 * the one handed out, here.  (Found with callgrind: 17% of a loop
		 * of 1,600 16-byte blocks.) */
		p = batch[0];
		p[1] = NULL;
	}
	b->room -= (int32_t)(*got - 1);
	adj_add(&tc, sclass, -(int64_t)(*got - 1));
	count_alloc(sclass);
	return p;
}

/* refill of this thread's list of sclass (heap profiles: prof_cache.c),
 * the rest of the blocks in avail. */
void *tcache_refill(unsigned sclass, unsigned want, unsigned chain, unsigned *got)
{
	tbin_t *b = &tc.bins[sclass];
	void *p = refill(b, sclass, want, chain, got);
	tcache_take_freed(b);
	return p;
}

/* A list's first size (bin_max), for prof_cache.c's look at grown lists. */
uint32_t tcache_first_max(unsigned sclass)
{
	return bin_max(sclass);
}

/* A list flushed since its last refill grows at this refill (bin_grow). */
void tcache_grow(unsigned sclass)
{
	if (tc.flushed[sclass]) {
		tbin_t *b = &tc.bins[sclass];
		tc.flushed[sclass] = 0;
		bin_grow(b, sclass, b->max >= BURST_MIN_BLOCKS &&
					    (uint32_t)b->nmalloc - tc.flush_nmalloc[sclass] <= b->max);
	}
}

/* sclass's list (or its freed list) was full and gave blocks back. */
void tcache_note_flush(unsigned sclass)
{
	tc.flushed[sclass] = 1;
	tc.flush_nmalloc[sclass] = (uint32_t)tc.bins[sclass].nmalloc;
}

/* A miss: a refill of sclass's list (the caller has initialised the
 * allocator: alloc.c's ensure_init), then one block. */
void *tcache_alloc_slow(unsigned sclass)
{
	if (unlikely(tc.state == TC_NONE))
		setup();
	tbin_t *b = &tc.bins[sclass];
	if (b->avail) /* set-up ran a re-entrant free */
		return tcache_pop(b);
	if (b->head) /* avail ran dry and the caller did not move head over */
		return tcache_pop_freed(b);
	gc_note_low(&tc, sclass, 0); /* the list ran dry */
	tcache_gc();
	tcache_grow(sclass);
	unsigned want = b->max ? b->max / 2u : 1u, got;
	return refill(b, sclass, want > 64 ? 64 : want, (unsigned)b->room + 1, &got);
}

/* ---- giving back what the thread does not use (purge.c's policy) ------------
 * An idle list's blocks are memory no other thread can take back (only the
 * owner touches its cache: the fast paths take no lock), and with 8 threads
 * the soak's caches held 28 MiB at every point of its cycle (docs/soak.md).
 * So the owner looks at its lists at its own slow paths (a refill or a
 * flush), at most once per decay period: the blocks a list held unused all
 * period go back (purge_cache_unused), and a list grown past its first size
 * (bin_grow) shrinks by as much, its bytes back in the thread's budget.  A
 * thread that stopped calling the allocator keeps its cache: nothing runs
 * on its behalf (its cache goes back when it exits, or by malloc_trim in
 * the thread).  Nothing here runs on the fast paths: the low-water mark is
 * a bound from the slow paths and the fast path's nmalloc count. */

/* The list for sclass held count blocks at a refill or flush: the bound on
 * its low-water mark since the last look goes down to it. */
static void gc_note_low(tcache_t *t, unsigned sclass, uint32_t count)
{
	if (t->gc_count[sclass] > count)
		t->gc_count[sclass] = (uint16_t)count;
	if (t->gc_low[sclass] > count)
		t->gc_low[sclass] = (uint16_t)count;
}

/* Starts a period for list c: its count and nmalloc now. */
static void gc_mark_bin(unsigned c)
{
	tc.gc_low[c] = tc.gc_count[c] = (uint16_t)(tc.bins[c].max - (uint32_t)tc.bins[c].room);
	tc.gc_nmalloc[c] = tc.bins[c].nmalloc;
}

/* Starts a period: every list's. */
static void gc_mark(uint64_t now)
{
	tc.gc_ms = now;
	for (unsigned c = 0; c < NCACHED; c++)
		gc_mark_bin(c);
}

/* Bytes the looks gave back, all threads (statistics). */
static atomic_ulong gc_bytes;

uint64_t tcache_gc_bytes(void)
{
	return atomic_load_explicit(&gc_bytes, memory_order_relaxed);
}

/* One list's look: gives back the blocks it held unused all period. */
static void gc_bin(unsigned sclass)
{
	tbin_t *b = &tc.bins[sclass];
	uint32_t count = b->max - (uint32_t)b->room;
	uint32_t unused = purge_cache_unused(tc.gc_count[sclass], tc.gc_low[sclass],
					     b->nmalloc - tc.gc_nmalloc[sclass], count);
	ARENA_ASSERT(unused <= count);
	if (unused == 0)
		return;
	tcache_flush_bin(&tc, sclass, count - unused);
	uint32_t first = bin_max(sclass);
	if (b->max > first) { /* grown: shrink by what went unused */
		uint32_t cut = b->max - first < unused ? b->max - first : unused;
		b->max -= cut;
		b->room -= (int32_t)cut;
		grown_add(&tc, -(long)((size_t)cut * class_size[sclass]));
	}
	atomic_fetch_add_explicit(&gc_bytes, (uint64_t)unused * class_size[sclass],
				  memory_order_relaxed);
}

/* Slow paths per sample of every list and per read of the clock: a slow
 * path is a few hundred instructions, the sample of 66 lists ~1,000 more.
 * bench/instructions (callgrind) after the merge of 8622c41's smaller first
 * lists: hit loop 80.1, burst 83.2-83.7 with both at every slow path; 80.0
 * and 83.0 with the GC off; 79.9-80.1 and 83.0 (twice) every 8th.  Every
 * 32nd since 2026-12-04: a producer whose lists refill from another
 * thread's chains misses every ~6 mallocs, and the samples were 7% of
 * bench/xthread -p 1 -c 1 -n 200000's instructions (70.36 -> 67.28 M;
 * xmalloc -p 1 -c 1 -n 400000 74.10 -> 73.50; glibc_simple, larson,
 * alloc_free within 0.05%).  A look after a new chunk (gc_fresh) does not
 * wait for its turn: gated too, glibc_simple's peak RSS rose 8.9 -> 10.0
 * MiB (-T 9.2 -> 10.7), its lists keeping their blocks longer. */
#define GC_EVERY 32u

/* List c back to its first size, the bytes it grew by off the thread's
 * growth (the caller gave back the blocks past that size). */
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

/* A look at grown list c after a new chunk: what went unused since its
 * last look (gc_bin), or, when no malloc took from it since the sample
 * before (idle: its nmalloc unchanged over the last GC_EVERY slow paths),
 * all it holds past its first size, and the list shrinks to that size.
 * gc_bin alone gives back nothing of a list that ran dry since its last
 * look, which is every list that grew since (it grows at a refill): such a
 * list waited for a look a chunk later, its blocks and slabs under the new
 * size's.  bench/glibc_simple's first batch of 1,600 4 KiB blocks took its
 * chunks with 1.6 MiB of the 1 KiB blocks of the sizes before still cached
 * (active 8,072 KiB at its peak, 6,400 allocated; 6,508 with this);
 * tests/progs/cache_gc is that case without the clock. */
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

/* At a slow path of this thread's cache: a look at every list once per
 * decay period (purge_cache_gc_due), then a new period; and sooner when a
 * refill since the last look made the arena take a new chunk.  Why then:
 * the blocks an idle list holds would spare that memory, and the process's
 * footprint is growing.  bench/glibc_simple runs 1,600 blocks of 16 B, then
 * of 256 B, 1 KiB and 4 KiB, 50 ms each: the lists grown for one size kept
 * their blocks (and their slabs) through the next sizes, 1.6 MiB of 1 KiB
 * blocks under the 4 KiB ones: peak RSS 12.5 MiB, 10.3 with this (glibc
 * 8.1, mimalloc 8.8; /usr/bin/time, median of 3).  Such a look is at the
 * lists grown past their first size only (bin_grow; the others hold 8 KiB
 * each at most, and wait for the clock): one that no malloc took from
 * since the sample before goes back whole to its first size, any other
 * gives back what no malloc took since its previous look (gc_grown), and
 * starts a period of its own.  A new chunk, not pages known
 * zero: purged pages taken again are zero too, and looks at each such
 * refill fed themselves (lists given back, slabs emptied and purged, new
 * slabs on zero pages): bench/alloc_free -t 1 -s mix -w 4096 gave back 36
 * MiB over its run and its peak RSS rose 5.5 -> 6.7 MiB (5.9-6.2 with
 * chunks); and blocks known zero gave back blocks that bench/instructions
 * --burst 1000's loop took again (83.0 -> 83.8 instructions). */
static void tcache_gc(void)
{
	if (tc.state != TC_ACTIVE ||
	    ((++tc.gc_events & (GC_EVERY - 1)) != 0 && !tc.gc_fresh))
		return;
	bool idle[NCACHED]; /* lists no malloc took from since the last sample */
	for (unsigned c = 0; c < NCACHED; c++) { /* the lists' lengths now: samples */
		uint32_t count = tc.bins[c].max - (uint32_t)tc.bins[c].room;
		if (tc.gc_low[c] > count)
			tc.gc_low[c] = (uint16_t)count;
		idle[c] = tc.bins[c].nmalloc == tc.gc_seen[c];
		tc.gc_seen[c] = tc.bins[c].nmalloc;
	}
	uint64_t now = os_now_ms();
	bool fresh = tc.gc_fresh && cfg->tcache_gc;
	tc.gc_fresh = false;
	if (!purge_cache_gc_due(tc.gc_ms, now)) {
		if (fresh) /* the grown lists only, each its own period */
			for (unsigned c = 0; c < NCACHED; c++)
				if (tc.bins[c].max > bin_max(c))
					gc_grown(c, idle[c]), gc_mark_bin(c);
		return;
	}
	if (tc.gc_ms) /* the first look only starts a period */
		for (unsigned c = 0; c < NCACHED; c++)
			gc_bin(c);
	gc_mark(now);
	/* and the arena's empty slabs, when their look is due (slab.c) */
	arena_lock(tc.arena);
	slab_sweep(tc.arena, now);
	arena_unlock(tc.arena);
}

/* Whether p is in the list that starts at head. */
static bool holds(const void *head, const void *p)
{
	for (const void *q = head; q; q = link_next(q))
		if (q == p)
			return true;
	return false;
}

/* A block whose second word is the key was put in a cache once: it is free
 * now if it is still in one of this thread's lists of its class (its own
 * blocks, or the foreign ones waiting to go home) or was given back to its
 * slab.  (A block sitting in another thread's cache is not found: that
 * double free is caught only when both copies reach the slab.) */
static bool already_free(unsigned sclass, void *p)
{
	if (holds(tc.bins[sclass].head, p) || holds(tc.bins[sclass].avail, p) ||
	    holds(tc.foreign[sclass].head, p) ||
	    holds(tc.freed[sclass].head, p) || holds(tc.foreign[NCACHED + sclass].head, p))
		return true;
	arena_chunk_t *c = chunk_hdr_of(p);
	size_t idx = page_index(c, p);
	arena_lock(c->arena);
	/* A block freed by a thread of another arena may wait on the arena's
	 * stacks, not yet in its slab: a second free would otherwise send it
	 * home twice, and the arena hand it out twice. */
	arena_drain_all(c->arena);
	page_info_t pi = c->page[idx];
	slab_t *s = pi.kind == PG_SLAB ? c->ref[idx].slab : NULL;
	bool is_free = s ? slab_block_free(s, p) : pi.kind == PG_FREE;
	arena_unlock(c->arena);
	return is_free;
}

/* Whether p, a block of a cached class that block_of found live, is in
 * fact free: waiting in this thread's cache or flushed back to its slab
 * (realloc and malloc_usable_size of a freed block).  With caches, a freed
 * block carries the key in its second word until it is handed out again,
 * so a live block costs one load; with tcache:false the slab is asked. */
bool tcache_block_freed(void *p, unsigned sclass)
{
	if (cfg->tcache && ((uintptr_t *)p)[1] != tcache_key)
		return false;
	return already_free(sclass, p);
}

/* A freed block straight back to its arena, without a list.  Keyed: it
 * may wait on its arena's remote stack, where a second push would make a
 * loop; a second free finds the key and the block, once already_free has
 * drained the stack. */
static void free_home(void *p, unsigned sclass)
{
	((void **)p)[1] = (void *)tcache_key;
	return_blocks(&p, 1, sclass);
	count_free(sclass);
}

/* A freed block of another arena, checked already: onto this thread's
 * foreign blocks, or home at once without a live cache (tcache:false,
 * debug mode, a thread exiting). */
static void foreign_put(void *p, unsigned sclass)
{
	fbin_t *f = &tc.foreign[sclass];
	if (f->max)
		foreign_push(&tc, f, p);
	else
		free_home(p, sclass);
}

/* free's slow path for a cached class: a full list (half of it goes back
 * to the arenas), a thread without a live cache, or a block whose second
 * word is the key (checked for a double free first). */
static __attribute__((noinline)) void free_slow(void *p, unsigned sclass)
{
	tbin_t *b = &tc.bins[sclass];
	if (b->room < 0) /* the fast path took a place there was not */
		b->room = 0;
	if (((uintptr_t *)p)[1] == tcache_key && already_free(sclass, p)) {
		misuse("double free", p);
		return;
	}
	if (tc.state == TC_NONE)
		setup();
	/* A thread's first free passes the fast path's test with salt 0, and
	 * so does a block of arena 0 in a thread without a cache: here the
	 * arena is known. */
	if (chunk_hdr_of(p)->arena != thread_arena()) {
		foreign_put(p, sclass);
		return;
	}
	if (b->max == 0) {
		free_home(p, sclass);
		return;
	}
	if (b->room == 0) {
		tcache_flush_bin(&tc, sclass, b->max / 2u);
		tcache_note_flush(sclass);
		tcache_gc();
	}
	b->room--;
	tcache_push(b, p);
}

void tcache_free_slow(void *p, unsigned sclass)
{
	free_slow(p, sclass);
}

/* For prof_cache.c's frees: whether p, of sclass, whose second word is
 * the key, is free already (reported: a double free). */
bool tcache_free_double(void *p, unsigned sclass)
{
	if (((uintptr_t *)p)[1] == tcache_key && already_free(sclass, p)) {
		misuse("double free", p);
		return true;
	}
	return false;
}

/* For prof_cache.c's frees: p goes elsewhere than onto this thread's
 * lists (true): a block of another arena onto the foreign blocks, or home
 * without a live cache. */
bool tcache_free_elsewhere(void *p, unsigned sclass)
{
	if (tc.state == TC_NONE)
		setup();
	if (chunk_hdr_of(p)->arena != thread_arena()) {
		foreign_put(p, sclass);
		return true;
	}
	if (tc.state != TC_ACTIVE || tc.bins[sclass].max == 0) {
		free_home(p, sclass);
		return true;
	}
	return false;
}

/* ---- foreign blocks ----------------------------------------------------
 * A block of another arena freed here (another thread's arena: free's fast
 * path refuses it, tcache_push_at's caller finds it through block_of) is
 * not handed out here again: put in this thread's cache, the next malloc of
 * its class would return it, and the two threads would go on writing
 * blocks on one cache line (bench/cache_scratch: every round shared a
 * line, 0.43 s against mimalloc's and jemalloc's 0.31 s).  It waits in a
 * list of foreign blocks of its class, a chain of at most FOREIGN_MAX
 * blocks, and the chain goes home in one push (arena_free_chain: a
 * transfer batch for the owner arena's next refill), as a flush would
 * have sent it.  The common case is api.c's free_other. */
/* Gives t's foreign blocks of list index (a class; NCACHED + the class
 * for the second half, heap profiles) back to their arenas: each run of
 * blocks of one arena as it is linked already, one chain (arena_free_chain),
 * the list walked once.  (Copied into an array and relinked by
 * return_blocks, as a flush of a bin is, the two walks were 27
 * instructions a block, 8% of callgrind xthread -p 1 -c 1 -n 200000.) */
void tcache_foreign_flush(tcache_t *t, unsigned index)
{
	fbin_t *f = &t->foreign[index];
	unsigned sclass = index % NCACHED;
	void *p = f->head;
	ARENA_ASSERT(index < 2 * NCACHED && f->n <= FOREIGN_MAX);
	f->head = NULL;
	f->n = 0;
	while (p) {
		arena_t *a = chunk_hdr_of(p)->arena;
		void *head = p, *tail = p;
		unsigned n = 1;
		/* the next run's first block is read before this run goes */
		for (p = link_next(p); p && chunk_hdr_of(p)->arena == a; p = link_next(p))
			tail = p, n++;
		*(void **)tail = NULL;
		arena_free_chain(a, sclass, head, tail, n, (size_t)n * class_size[sclass],
				 a == t->arena);
	}
}

void tcache_free_foreign(void *p, unsigned sclass)
{
	if (((uintptr_t *)p)[1] == tcache_key && already_free(sclass, p)) {
		misuse("double free", p);
		return;
	}
	if (tc.state == TC_NONE)
		setup();
	foreign_put(p, sclass);
}

/* Told, after a thread's cache is gone, how many live caches are left
 * (background.c: a program whose last thread leaves by pthread_exit must
 * not be kept alive by libarena's own thread). */
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
	grown_add(t, -(long)t->grown); /* its lists are gone: room for the others */
	mutex_lock(&list_mtx);
	live_remove(t);
	t->state = TC_DEAD;
	unsigned left = nlive;
	mutex_unlock(&list_mtx);
	atomic_fetch_sub_explicit(&t->arena->nthreads, 1, memory_order_relaxed);
	if (prof_on) /* heap profiles: this thread's last walk (prof_stack.c) */
		prof_stack_thread_exit();
	void (*hook)(unsigned) = __atomic_load_n(&exit_hook, __ATOMIC_ACQUIRE);
	if (hook)
		hook(left);
}

/* The end of initialisation: the exit hook and the double-free key, a
 * secret of libarena's own (os_random): a freed block shows it to whoever
 * reads the block, so it must be worth nothing else. */
void tcache_init_key(void)
{
	tcache_key = (uintptr_t)os_random() | 1;
	exit_key_ready = pthread_key_create(&exit_key, thread_exit) == 0;
}

/* The allocator is initialised (alloc.c, just before it says so): threads
 * may set up their caches from now on. */
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
	/* The other threads' caches are gone, and what their lists grew by. */
	atomic_store_explicit(&grown_all, tc.state == TC_ACTIVE ? tc.grown : 0, memory_order_relaxed);
	arena_threads_after_fork(tc.state == TC_ACTIVE ? tc.arena : NULL);
}

/* Blocks of class c held in t's lists: its own (lists_held) and another
 * arena's waiting to go home. */
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

/* Threads with a live cache: those that have allocated and not exited
 * (read without the lock: background.c's "is the program threaded"). */
unsigned tcache_nlive(void)
{
	return __atomic_load_n(&nlive, __ATOMIC_RELAXED);
}
