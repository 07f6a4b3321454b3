/* Blocks going back to their arena: a thread cache's flush hands a chain
 * of blocks to the arena of their chunk, which puts them back into slabs
 * and page runs under its lock, or, when another thread holds it or the
 * blocks are another arena's, leaves them on a lock-free stack for that
 * arena: its remote stack (single blocks, drained under the lock) or one
 * of its transfer stacks (whole chains, taken by its refills).  Above the
 * slabs and arenas it gives blocks back to, below the large and huge
 * blocks and the thread caches that use it. */
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
		void *next = *(void **)p;
		arena_chunk_t *c = chunk_hdr_of(p);
		bytes += (long)class_size[c->page[page_index(c, p)].sclass];
		free_block_locked(c, p);
		p = next;
	}
	return bytes;
}

/* Blocks on a's remote stack (linked through their first word) go back to
 * their slabs and pages. */
void arena_drain_remote(arena_t *a)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	if (!atomic_load_explicit(&a->remote, memory_order_relaxed))
		return;
	void *p = atomic_exchange_explicit(&a->remote, NULL, memory_order_acquire);
	atomic_fetch_sub_explicit(&a->remote_bytes, free_list_locked(p), memory_order_relaxed);
}

/* ---- transfer batches ----------------------------------------------------
 * In a producer/consumer program every block one thread allocates is freed
 * by another: it goes back through the consumer's cache, a flush of half
 * a list, and the producer's refill.  Put back into slabs and pages and
 * taken out again there, each block cost two bitmap updates under the
 * producer's lock and, for large classes, a page-run search (xthread -p 1
 * -c 1 under callgrind: 635 instructions per block, 50% of them in refills;
 * tcmalloc 155).  Instead a flush of blocks of another arena hands the
 * chain over whole: one compare-and-swap onto that arena's stack for the
 * class, and that arena's next refill of the class takes one chain into its
 * cache, with no slab touched.  Only refills take chains, under the arena's
 * lock, so no two threads pop at once (no ABA).  What waits on an arena's
 * stacks is bounded (REMOTE_MAX_BYTES): past it the thread that pushes puts
 * everything back into slabs itself.
 * Double frees: a block in a chain carries the cache key like any cached
 * block, and is found when freed again by the thread whose cache holds it,
 * or at its slab; a block in transit between two threads' caches is not
 * (as a block in another thread's cache was not before), docs/design.md. */

/* Bytes waiting on an arena's remote and transfer stacks past which the
 * thread that pushes drains them itself (under the lock): the bound on what
 * threads that only free leave for an arena whose threads have stopped
 * allocating (or exited). */
#define REMOTE_MAX_BYTES ((long)16 << 20)

/* A chain's first block carries, in its second word, the next chain on
 * the stack and its own length: next << 16 | n.  Taking a chain then
 * touches no other block of it (counting them walked blocks another core
 * had just written: arena_take_batch took 29% of bench/xmalloc -p 2 -c 2's
 * time, perf cpu-clock samples).  User addresses are below 2^47 (2^48 is
 * checked when a region is made: chunk.c), blocks are in regions, chains
 * hold at most 64 blocks. */
#define BATCH_LINK(next, n) ((uintptr_t)(next) << 16 | (uintptr_t)(n))
#define BATCH_NEXT(word) ((void *)((uintptr_t)(word) >> 16))
#define BATCH_LEN(word) ((unsigned)((uintptr_t)(word) & 0xffff))
_Static_assert(FOREIGN_MAX <= 0xffff, "a chain's length fits BATCH_LEN's 16 bits");

/* Puts every chain on a's transfer stacks back into slabs and pages. */
static void drain_batches(arena_t *a)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	for (unsigned c = 0; c < NCACHED; c++) {
		void **h = atomic_exchange_explicit(&a->xfer[c], NULL, memory_order_acquire);
		long bytes = 0;
		while (h) {
			void **next_batch = BATCH_NEXT(h[1]);
			bytes += free_list_locked(h);
			h = next_batch;
		}
		atomic_fetch_sub_explicit(&a->remote_bytes, bytes, memory_order_relaxed);
	}
}

/* Everything waiting on a's stacks back into its slabs and pages, so that
 * they say exactly which blocks are free (tcache.c, a suspected double
 * free: a block freed by another thread may wait here). */
void arena_drain_all(arena_t *a)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	arena_drain_remote(a);
	drain_batches(a);
}

static void bound_remote(arena_t *a, size_t bytes)
{
	long now = atomic_fetch_add_explicit(&a->remote_bytes, (long)bytes, memory_order_relaxed);
	if (now + (long)bytes > REMOTE_MAX_BYTES) {
		arena_lock(a);
		arena_drain_remote(a);
		drain_batches(a);
		arena_unlock(a);
	}
}

static void push_remote(arena_t *a, void *head, void *tail, size_t bytes)
{
	void *old = atomic_load_explicit(&a->remote, memory_order_relaxed);
	do
		*(void **)tail = old;
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
		h[1] = (void *)BATCH_LINK(old, n);
	while (!atomic_compare_exchange_weak_explicit(&a->xfer[sclass], &old, head,
						      memory_order_release, memory_order_relaxed));
	bound_remote(a, bytes);
	purge_note_dirty();
}

/* One chain of class sclass from a's transfer stack, of at most max
 * blocks (the rest go back to their slabs): its first block (its second
 * word cleared), the number of blocks in *n; NULL if none.  Under a's
 * lock: the only poppers are refills. */
void *arena_take_batch(arena_t *a, unsigned sclass, unsigned max, unsigned *n)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	ARENA_ASSERT(sclass < NCACHED && max > 0);
	void **h = atomic_load_explicit(&a->xfer[sclass], memory_order_acquire);
	while (h && !atomic_compare_exchange_weak_explicit(&a->xfer[sclass], (void **)&h,
							   BATCH_NEXT(h[1]), memory_order_acquire,
							   memory_order_acquire))
		;
	if (!h)
		return NULL;
	unsigned k = BATCH_LEN(h[1]);
	ARENA_ASSERT(k > 0 && k <= FOREIGN_MAX);
	h[1] = NULL;
	a->xfer_takes++;
	long bytes = (long)k * (long)class_size[sclass];
	if (k > max) { /* longer than the list's room: the rest back to slabs */
		void **last = h;
		for (unsigned i = 1; i < max; i++)
			last = last[0];
		free_list_locked(last[0]); /* counted in bytes already */
		last[0] = NULL;
		k = max;
	}
	atomic_fetch_sub_explicit(&a->remote_bytes, bytes, memory_order_relaxed);
	*n = k;
	return h;
}

/* Gives back a chain of a's blocks of class sclass (bytes in all), head to
 * tail linked through their first word.  A thread of another arena hands
 * the chain to a's refills (a transfer batch) or, without thread caches or
 * in debug mode, pushes it on a's remote stack: one
 * compare-and-swap either way, never a's lock, which a's own threads need.
 * A thread of a gives the blocks back at once if the lock is free. */
void arena_free_chain(arena_t *a, unsigned sclass, void *head, void *tail, unsigned n,
		      size_t bytes, bool own)
{
	/* head to tail, n blocks, ended at tail */
	ARENA_ASSERT(n > 0 && head && tail && *(void **)tail == NULL && (n > 1 || head == tail));
	if (own && mutex_trylock(&a->lock) == 0) {
		arena_drain_remote(a);
		free_list_locked(head);
		arena_unlock(a);
		return;
	}
	if (!own && cfg->tcache && !cfg->debug && regions_below_2_48)
		push_batch(a, sclass, head, n, bytes);
	else
		push_remote(a, head, tail, bytes);
}

/* The background thread's look at a's stacks, once per decay period while
 * anything waits there: the remote stack goes back
 * to the slabs; the transfer batches too if no refill took one since the
 * last look (their arena's threads stopped allocating, or exited), so that
 * what waits there for ever is purged like any free memory.  Returns
 * whether batches are still waiting. */
bool arena_drain_stale(arena_t *a)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	arena_drain_remote(a);
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

/* Unmakes every empty slab and purges the free dirty pages of every arena
 * chunk; returns bytes. */
size_t arena_purge_all(void)
{
	size_t pages = 0;
	for (unsigned i = 0, nused = arenas_used(); i < nused; i++) {
		arena_lock(&arenas[i]);
		arena_drain_remote(&arenas[i]);
		drain_batches(&arenas[i]);
		slab_release_all(&arenas[i]);
		list_for_each(c, &arenas[i].chunks, arena_chunk_t, link)
			pages += arena_chunk_purge(c, PURGE_DONTNEED);
		arena_unlock(&arenas[i]);
	}
	return pages << PAGE_SHIFT;
}
