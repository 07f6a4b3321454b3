/* Blocks going back to their arena: a cache's flush hands an array of
 * them to their chunk's arena, which puts them back under its lock, or
 * chains them onto a lock-free stack: the remote stack (drained under the
 * lock) or a transfer stack (whole chains for refills). */
#include "internal.h"

/* Gives block p of chunk c back: to its slab, or its pages if it is large. */
static void free_block_locked(arena_chunk_t *c, void *p)
{
	size_t idx = page_index(c, p);
	ARENA_ASSERT_LOCKED(&c->arena->lock);
	/* a slab's block, or a large block's first page */
	ARENA_ASSERT(c->page[idx].kind == PG_SLAB ||
		     (c->page[idx].kind == PG_LARGE && c->page[idx].head == idx));
	if (unlikely(cfg->debug))
		junk_links(p, class_size[c->page[idx].sclass]);
	if (c->page[idx].kind == PG_SLAB)
		slab_free_block(c, c->ref[idx].slab, p);
	else
		arena_pages_free(c, idx, large_pages_of(c, idx));
}

/* Gives back a chain of blocks (linked through their first word) and
 * returns their bytes; all of one arena (free_block_locked: its lock). */
static long free_list_locked(void *p)
{
	long bytes = 0;
	while (p) {
		void *next = link_next(p);
		arena_chunk_t *c = chunk_hdr_of(p);
		bytes += (long)class_size[c->page[page_index(c, p)].sclass];
		free_block_locked(c, p);
		p = next;
	}
	return bytes;
}

/* Blocks on a's remote stack (linked through their first word) go back to
 * their slabs and pages. */
void remote_drain(arena_t *a)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	if (!atomic_load_explicit(&a->remote, memory_order_relaxed))
		return;
	void *p = atomic_exchange_explicit(&a->remote, NULL, memory_order_acquire);
	atomic_fetch_sub_explicit(&a->remote_bytes, free_list_locked(p), memory_order_relaxed);
}

/* Gives back blocks[0, n), all of a (its lock held): no link read; runs of
 * slab blocks go to slab_free_array. */
static void free_array_locked(arena_t *a, void *const *blocks, unsigned n)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	for (unsigned i = 0; i < n; i++) {
		if (likely(!cfg->debug) && (i += slab_free_array(a, blocks + i, n - i)) == n)
			break;
		free_block_locked(chunk_hdr_of(blocks[i]), blocks[i]);
	}
}

/* ---- transfer batches
 * In a producer/consumer program, another thread frees every block.  A
 * flush of another arena's blocks hands the chain over whole: a
 * compare-and-swap onto that arena's stack for the class, taken whole by
 * its next refill of the class, no slab touched.  Only refills pop, under
 * the lock: no ABA.  REMOTE_MAX_BYTES bounds what waits.  A chained block
 * carries the cache key: a double free is found by the thread caching it
 * or at its slab, not in transit between caches (docs/design.md). */

/* Past this, the pushing thread drains the arena's stacks itself. */
#define REMOTE_MAX_BYTES ((long)16 << 20)

/* Past this many blocks of one class pushed with no refill taking a chain
 * of it, the arena's threads are not taking the class (a program that
 * moved on to other sizes): a pusher gives its chain to the slabs itself,
 * while its blocks are in its cache, not to a drain that reads every link
 * from memory (bench/phase_change, cachegrind: 87% of drained blocks
 * missed on it).  In blocks: the misses are per block.  Not blocks
 * waiting: a consumer that runs ahead of its producer leaves thousands
 * waiting that the producer still takes (bench/xmalloc -p 1 -c 1 -n
 * 2000000, callgrind: 233 M allocator instructions, 362 M giving chains
 * to the slabs past 1,024 waiting, 232 M past 16,384 untaken, while
 * phase_change -s 150 -r 1 keeps its 2,452 -> 2,325 M). */
#define XFER_CLASS_MAX_BLOCKS 16384u

/* A chain's first block's second word: next << 16 | n, encoded as a link
 * (link_word), so taking a chain touches no other block.  Blocks lie below
 * 2^48 (regions_below_2_48); chains hold at most 64. */
#define BATCH_LINK(next, n) ((uintptr_t)(next) << 16 | (uintptr_t)(n))
#define BATCH_NEXT(word) ((uintptr_t)(word) >> 16)
#define BATCH_LEN(word) ((unsigned)((uintptr_t)(word) & 0xffff))
_Static_assert(FOREIGN_MAX <= 0xffff, "a chain's length fits BATCH_LEN's 16 bits");

/* The chain after h's on its stack, checked as a link, h's length in *n;
 * a length out of 1..FOREIGN_MAX makes the link misaligned: reported. */
static void **batch_next(void **h, unsigned *n)
{
	uintptr_t w = link_word(&h[1], (uintptr_t)h[1]);
	*n = BATCH_LEN(w);
	return link_checked(h, BATCH_NEXT(w) | (*n - 1u >= FOREIGN_MAX));
}

/* Chains walked side by side by free_chains_locked. */
#define CHAINS_AT_ONCE 8

/* Gives back n chains (n <= CHAINS_AT_ONCE), a block of each in turn, and
 * returns their bytes.  A block's link is most likely a cache miss (another
 * core freed the block, and it waited): one chain at a time waits for each
 * in turn, chains side by side keep n of them in flight. */
static long free_chains_locked(void **at, unsigned n)
{
	long bytes = 0;
	while (n) {
		for (unsigned i = 0; i < n; i++) {
			void *p = at[i], *next = link_next(p);
			if (next)
				__builtin_prefetch(next);
			arena_chunk_t *c = chunk_hdr_of(p);
			bytes += (long)class_size[c->page[page_index(c, p)].sclass];
			free_block_locked(c, p);
			at[i] = next;
		}
		unsigned live = 0;
		for (unsigned i = 0; i < n; i++)
			if (at[i])
				at[live++] = at[i];
		n = live;
	}
	return bytes;
}

/* Puts every chain on a's transfer stacks back into slabs and pages,
 * CHAINS_AT_ONCE of them side by side.  Caller holds a->lock. */
static void drain_batches(arena_t *a)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	for (unsigned c = 0; c < NCACHED; c++) {
		void **h = atomic_exchange_explicit(&a->xfer[c], NULL, memory_order_acquire);
		long bytes = 0;
		while (h) {
			void *at[CHAINS_AT_ONCE];
			unsigned n = 0;
			for (; h && n < CHAINS_AT_ONCE; n++) {
				unsigned len;
				at[n] = h;
				h = batch_next(h, &len);
			}
			bytes += free_chains_locked(at, n);
		}
		atomic_fetch_sub_explicit(&a->remote_bytes, bytes, memory_order_relaxed);
	}
}

/* Everything waiting on a's stacks back into its slabs and pages, so that
 * they say exactly which blocks are free (tcache.c, a suspected double
 * free: a block freed by another thread may wait here). */
void remote_drain_all(arena_t *a)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	remote_drain(a);
	drain_batches(a);
}

static void bound_remote(arena_t *a, size_t bytes)
{
	long now = atomic_fetch_add_explicit(&a->remote_bytes, (long)bytes, memory_order_relaxed);
	if (now + (long)bytes > REMOTE_MAX_BYTES) {
		arena_lock(a);
		remote_drain(a);
		drain_batches(a);
		arena_unlock(a);
	}
}

static void push_remote(arena_t *a, void *head, void *tail, size_t bytes)
{
	void *old = atomic_load_explicit(&a->remote, memory_order_relaxed);
	do
		link_set(tail, old);
	while (!atomic_compare_exchange_weak_explicit(&a->remote, &old, head,
						      memory_order_release, memory_order_relaxed));
	bound_remote(a, bytes);
	purge_note_dirty();
}

static void push_batch(arena_t *a, unsigned sclass, void *head, unsigned n, size_t bytes)
{
	/* the link word packs head (48 bits) and n (16) */
	ARENA_ASSERT(sclass < NCACHED && n > 0 && n <= FOREIGN_MAX && (uintptr_t)head >> 48 == 0);
	void **h = head;
	void *old = atomic_load_explicit(&a->xfer[sclass], memory_order_relaxed);
	do
		h[1] = (void *)link_word(&h[1], BATCH_LINK(old, n));
	while (!atomic_compare_exchange_weak_explicit(&a->xfer[sclass], &old, head,
						      memory_order_release, memory_order_relaxed));
	bound_remote(a, bytes);
	purge_note_dirty();
}

/* One chain of class sclass from a's transfer stack, of at most max
 * blocks (the rest go back to their slabs): its first block (its second
 * word cleared), the number of blocks in *n; NULL if none.  Under a's
 * lock: the only poppers are refills. */
void *remote_take_batch(arena_t *a, unsigned sclass, unsigned max, unsigned *n)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	ARENA_ASSERT(sclass < NCACHED && max > 0);
	void **h = atomic_load_explicit(&a->xfer[sclass], memory_order_acquire);
	unsigned k = 0;
	while (h && !atomic_compare_exchange_weak_explicit(&a->xfer[sclass], (void **)&h,
							   batch_next(h, &k), memory_order_acquire,
							   memory_order_acquire))
		;
	/* a refill of the class takes it, found empty too: a stack a drain
	 * emptied gets no push while pushers think it untaken */
	if (atomic_load_explicit(&a->xfer_untaken[sclass], memory_order_relaxed))
		atomic_store_explicit(&a->xfer_untaken[sclass], 0, memory_order_relaxed);
	if (!h || unlikely(k - 1u >= FOREIGN_MAX)) /* misuse:warn: a forged one lost */
		return NULL;
	h[1] = NULL;
	a->xfer_takes++;
	long bytes = (long)k * (long)class_size[sclass];
	if (k > max) { /* longer than the list's room: the rest back to slabs */
		void **last = h, **next;
		for (unsigned i = 1; i < max && (next = link_next(last)); i++)
			last = next;
		free_list_locked(link_next(last)); /* in bytes already */
		link_set(last, NULL);
		k = max;
	}
	atomic_fetch_sub_explicit(&a->remote_bytes, bytes, memory_order_relaxed);
	*n = k;
	return h;
}

/* Whether a's threads stopped taking sclass, n blocks more pushed.  Past
 * the bound only read: the counters share cache lines with those of the
 * classes a's threads do take, which their refills read. */
static bool class_not_taken(arena_t *a, unsigned sclass, unsigned n)
{
	atomic_uint *untaken = &a->xfer_untaken[sclass];
	return atomic_load_explicit(untaken, memory_order_relaxed) >= XFER_CLASS_MAX_BLOCKS ||
	       atomic_fetch_add_explicit(untaken, n, memory_order_relaxed) >= XFER_CLASS_MAX_BLOCKS;
}

/* Links blocks[0, n) in order, the last to NULL. */
static void link_array(void *const *blocks, unsigned n)
{
	for (unsigned i = 0; i + 1 < n; i++)
		link_set(blocks[i], blocks[i + 1]);
	link_set(blocks[n - 1], NULL);
}

/* Gives back blocks[0, n), all of a and of class sclass (linked: each
 * links to the next already, the last to NULL): another arena's thread
 * hands them to a's refills as a chain (a transfer batch) or, without
 * caches or in debug mode, onto a's remote stack, without a's lock unless
 * a's threads stopped taking the class (class_not_taken: then to the
 * slabs under it, from the array); a's own thread frees the blocks at
 * once if the lock is free. */
void remote_free_chain(arena_t *a, unsigned sclass, void *const *blocks, unsigned n,
		      bool linked, bool own)
{
	bool batch = !own && cfg->tcache && !cfg->debug && !cfg->secure && regions_below_2_48;
	ARENA_ASSERT(n > 0 && sclass < NCACHED);
	/* linked: blocks[0] to blocks[n - 1], ended there */
	ARENA_ASSERT(!linked || (!link_next(blocks[n - 1]) &&
				 (n == 1 || link_next(blocks[n - 2]) == blocks[n - 1])));
	bool full = batch && class_not_taken(a, sclass, n);
	if (full)
		arena_lock(a);
	if (full || (own && mutex_trylock(&a->lock) == 0)) {
		remote_drain(a);
		free_array_locked(a, blocks, n);
		arena_unlock(a);
		return;
	}
	if (!linked)
		link_array(blocks, n);
	size_t bytes = (size_t)n * class_size[sclass];
	if (batch)
		push_batch(a, sclass, blocks[0], n, bytes);
	else
		push_remote(a, blocks[0], blocks[n - 1], bytes);
}

/* Gives back n blocks of a (an array: no link written into a block) under
 * a's lock, taken and waited for: secure mode's way home. */
void remote_free_blocks(arena_t *a, void *const *blocks, unsigned n)
{
	arena_lock(a);
	remote_drain(a);
	for (unsigned i = 0; i < n; i++)
		free_block_locked(chunk_hdr_of(blocks[i]), blocks[i]);
	arena_unlock(a);
}

/* The background thread's look at a's stacks, once per decay period while
 * anything waits there: the remote stack goes back
 * to the slabs; the transfer batches too if no refill took one since the
 * last look (their arena's threads stopped allocating, or exited), so that
 * what waits there for ever is purged like any free memory.  Returns
 * whether batches are still waiting. */
bool remote_drain_stale(arena_t *a)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	remote_drain(a);
	bool waiting = false;
	for (unsigned c = 0; c < NCACHED && !waiting; c++)
		waiting = atomic_load_explicit(&a->xfer[c], memory_order_relaxed) != NULL;
	if (waiting && a->xfer_takes == a->xfer_seen) {
		drain_batches(a);
		waiting = false;
	}
	a->xfer_seen = a->xfer_takes;
	return waiting;
}

/* Unmakes empty slabs and purges every arena chunk: bytes. */
size_t remote_purge_all(void)
{
	size_t pages = 0;
	for (unsigned i = 0, nused = arena_count(); i < nused; i++) {
		arena_lock(&arenas[i]);
		remote_drain(&arenas[i]);
		drain_batches(&arenas[i]);
		slab_release_all(&arenas[i]);
		list_for_each(c, &arenas[i].chunks, arena_chunk_t, link)
			pages += arena_chunk_purge(c, PURGE_DONTNEED);
		arena_unlock(&arenas[i]);
	}
	return pages << PAGE_SHIFT;
}
