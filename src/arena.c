/* Arenas: each owns a set of arena chunks and hands out runs of their pages
 * (for slabs and large blocks) under its own lock.  There are four per CPU by
 * default (ARENA_CONF=narenas:N), and each thread is bound to the arena with
 * the fewest threads when its cache is set up, so threads rarely share a
 * lock.  A block is always given back to the arena of its chunk, whichever
 * thread frees it. */
#include "internal.h"

/* Locks initialised statically, so set-up writes no arena (an arena's pages
 * are first touched by the first thread that uses it).  Adaptive: a
 * contended lock spins briefly before sleeping, since arena critical
 * sections are short (a batch of blocks, a run of pages). */
#define ARENA_INIT { .lock = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP }
#define ARENAS_8 ARENA_INIT, ARENA_INIT, ARENA_INIT, ARENA_INIT, \
	ARENA_INIT, ARENA_INIT, ARENA_INIT, ARENA_INIT
arena_t arenas[MAX_ARENAS] = { ARENAS_8, ARENAS_8, ARENAS_8, ARENAS_8,
			       ARENAS_8, ARENAS_8, ARENAS_8, ARENAS_8 };
unsigned narenas;

_Static_assert(MAX_ARENAS == 64, "ARENAS_8 x 8 initialises every arena");

void arenas_init(void)
{
	unsigned n = conf.narenas ? conf.narenas : 4 * os_ncpus();
	narenas = n < MAX_ARENAS ? n : MAX_ARENAS;
}

/* The arena with the fewest threads bound to it (ties: the lowest). */
arena_t *arena_pick(void)
{
	arena_t *best = &arenas[0];
	unsigned best_n = atomic_load_explicit(&best->nthreads, memory_order_relaxed);
	for (unsigned i = 1; i < narenas && best_n; i++) {
		unsigned n = atomic_load_explicit(&arenas[i].nthreads, memory_order_relaxed);
		if (n < best_n)
			best = &arenas[i], best_n = n;
	}
	atomic_fetch_add_explicit(&best->nthreads, 1, memory_order_relaxed);
	return best;
}

/* An arena chunk with this many pages in use is dense: it is advised
 * MADV_HUGEPAGE (thp:auto), and khugepaged may then collapse it.  Three
 * quarters: a huge page then wastes at most a quarter of its 2 MiB. */
#define DENSE_PAGES (CHUNK_PAGES * 3 / 4)
/* A dense chunk back down to this many pages in use is sparse again: its
 * huge-page advice is taken back and its free pages may be purged.  The
 * gap to DENSE_PAGES keeps a chunk from flapping between the two. */
#define SPARSE_PAGES (CHUNK_PAGES / 4)

/* A chunk changes its huge-page advice at most once per decay_ms (at
 * least every ADVICE_MIN_MS).  A producer/consumer program fills and
 * drains whole chunks in turn, and each crossing of DENSE_PAGES and
 * SPARSE_PAGES was a madvise pair that also split and merged the mapping
 * under the kernel's mmap lock: bench/xthread -p 1 -c 1 -n 500000 made
 * 755 MADV_HUGEPAGE and 755 MADV_NOHUGEPAGE calls in 0.35 s (strace -c). */
#define ADVICE_MIN_MS 10

static bool advice_may_change(const arena_chunk_t *c, uint64_t now)
{
	uint64_t wait = conf.decay_ms > ADVICE_MIN_MS ? (uint64_t)conf.decay_ms : ADVICE_MIN_MS;
	return now - c->advice_ms >= wait;
}

static void advise_dense(arena_chunk_t *c, uint64_t now)
{
	if (conf.thp == THP_AUTO)
		chunk_advise(c, 1, ADV_HUGE);
	c->advised_huge = true;
	c->advice_ms = now;
}

/* A dense chunk that fell back to SPARSE_PAGES in use: MADV_NOHUGEPAGE, so
 * that khugepaged will not fill its free pages again, and from then on its
 * free page runs are purged like any sparse chunk's.  If khugepaged had
 * made it a huge page, the first purge splits it: at most a quarter of it
 * is in use, and keeping the page would hold 1.5 MiB or more of free memory
 * resident.  Measured with bench/soak (two 5-minute runs side by side,
 * docs/soak.md): RSS/live median 3.13 -> 2.49, p99 12.1 -> 7.8. */
static void advise_sparse(arena_chunk_t *c, uint64_t now)
{
	chunk_advise(c, 1, ADV_NOHUGE);
	c->advised_huge = false;
	c->advice_ms = now;
}

/* Whether c is a dense chunk back under SPARSE_PAGES in use that may take
 * its huge-page advice back now. */
static bool sparse_again(const arena_chunk_t *c, uint64_t now)
{
	return c->advised_huge && conf.thp == THP_AUTO && conf.fine_purge == TRI_AUTO &&
	       c->nfree >= CHUNK_USABLE_PAGES - SPARSE_PAGES && advice_may_change(c, now);
}

/* Fine-grained purging (free page runs inside arena chunks, which splits
 * huge pages): ARENA_CONF=fine_purge:true, or by default where there are no
 * huge pages to split. */
bool fine_purge_on(void)
{
	if (conf.fine_purge != TRI_AUTO)
		return conf.fine_purge == TRI_ON;
	return conf.thp == THP_NEVER || os_thp == THP_SYS_NONE || os_thp == THP_SYS_NEVER;
}

/* Whether the free page runs of c may be purged: fine_purge:true, or
 * (auto) where c holds no huge-page advice: no THP at all, or a chunk that
 * is sparse (never dense, or dense once and back under SPARSE_PAGES). */
static bool fine_purge_chunk(const arena_chunk_t *c)
{
	if (conf.fine_purge != TRI_AUTO)
		return conf.fine_purge == TRI_ON;
	return fine_purge_on() || !c->advised_huge;
}

static arena_chunk_t *chunk_new(arena_t *a)
{
	bool zero;
	arena_chunk_t *c = chunk_alloc(1, CHUNK_SIZE, CK_ARENA, 0, &zero);
	if (!c)
		return NULL;
	/* Sparse until proven dense: no huge page yet (thp:auto), so that an
	 * arena holding a few blocks does not keep 2 MiB resident.  Advised
	 * before the header is written: the chunk may still carry an earlier
	 * owner's MADV_HUGEPAGE, and that first write would fault 2 MiB in. */
	chunk_advise(c, 1, conf.thp == THP_ALWAYS ? ADV_HUGE : ADV_NOHUGE);
	pagemap_init(c, zero);
	c->advised_huge = conf.thp == THP_ALWAYS;
	c->advice_ms = 0;
	c->arena = a;
	c->next = a->chunks;
	if (a->chunks)
		a->chunks->prev = c;
	a->chunks = c;
	a->nchunks++;
	a->nempty++;
	return c;
}

static void chunk_release(arena_t *a, arena_chunk_t *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		a->chunks = c->next;
	if (c->next)
		c->next->prev = c->prev;
	a->nchunks--;
	a->nempty--;
	chunk_free(c, 1);
}

/* Fine-grained decay: the free dirty pages of c are purged once the oldest
 * of them has been dirty for decay_ms (checked when pages are given back and
 * by the background thread).  Caller holds the arena's lock. */
static void fine_decay(arena_chunk_t *c)
{
	if (conf.decay_ms < 0 || conf.purge == PURGE_OFF)
		return;
	uint64_t now = os_now_ms();
	if (c->dirty_ms == 0)
		c->dirty_ms = now;
	if (now - c->dirty_ms >= (uint64_t)conf.decay_ms)
		pagemap_purge(c, conf.purge);
}

/* fine_decay for every chunk of a, after giving back the huge-page advice
 * of chunks that went sparse while they had to keep it (advice_may_change).
 * Caller holds a->lock. */
static void sweep_locked(arena_t *a)
{
	uint64_t now = os_now_ms();
	for (arena_chunk_t *c = a->chunks; c; c = c->next) {
		if (sparse_again(c, now))
			advise_sparse(c, now);
		if (c->dirty_ms && fine_purge_chunk(c))
			fine_decay(c);
	}
}

/* fine_decay runs when pages of the same chunk are given back, so a chunk
 * that sees no more frees would keep its dirty pages for ever: with mixed
 * lifetimes many do.  bench/soak -d 600 -p 60, side by side: the dirty
 * pages of sparse chunks, median of each minute, 99-143 MiB without the
 * sweep, 43-66 MiB with it.
 * Each arena therefore also sweeps all its chunks from its allocation and
 * free paths, at most every decay_ms / 4 (>= 10 ms), as the background
 * thread does.  Caller holds a->lock. */
static void sweep_tick(arena_t *a)
{
	if (conf.decay_ms < 0 || conf.purge == PURGE_OFF || conf.fine_purge == TRI_OFF)
		return;
	uint64_t now = os_now_ms();
	if (now < a->next_sweep_ms)
		return;
	uint64_t every = (uint64_t)conf.decay_ms / 4;
	a->next_sweep_ms = now + (every < 10 ? 10 : every);
	sweep_locked(a);
}

/* fine_decay for every chunk of every arena (the background thread). */
void arena_fine_decay_all(void)
{
	if (conf.fine_purge == TRI_OFF)
		return;
	for (unsigned i = 0; i < narenas; i++) {
		arena_lock(&arenas[i]);
		sweep_locked(&arenas[i]);
		arena_unlock(&arenas[i]);
	}
}

/* npages pages aligned to align_pages pages from a's chunks (a new chunk if
 * none has room), marked kind/sclass.  *zero: all of them known zero.
 * Caller holds a->lock. */
void *arena_pages_alloc(arena_t *a, size_t npages, size_t align_pages,
			uint8_t kind, uint8_t sclass, bool *zero)
{
	arena_chunk_t *c;
	long first = -1;
	for (c = a->chunks; c; c = c->next)
		if (c->longest >= npages && (first = pagemap_find(c, npages, align_pages)) >= 0)
			break;
	if (!c) {
		if (!(c = chunk_new(a)) || (first = pagemap_find(c, npages, align_pages)) < 0)
			return NULL;
	}
	if (c->nfree == CHUNK_USABLE_PAGES)
		a->nempty--;
	*zero = pagemap_take(c, (size_t)first, npages);
	for (size_t i = (size_t)first; i < (size_t)first + npages; i++)
		c->page[i] = (page_info_t){ .kind = kind, .sclass = sclass, .head = (uint16_t)first };
	a->active_pages += npages;
	if (!c->advised_huge && c->nfree <= CHUNK_USABLE_PAGES - DENSE_PAGES && !fine_purge_on()) {
		uint64_t now = os_now_ms();
		if (advice_may_change(c, now))
			advise_dense(c, now);
	}
	sweep_tick(a);
	return page_addr(c, (size_t)first);
}

/* Gives pages back to their chunk; a chunk left empty goes back to the chunk
 * layer unless it is the arena's only empty one (kept to absorb the next
 * allocation without a round trip).  Caller holds the arena's lock. */
void arena_pages_free(arena_chunk_t *c, size_t first, size_t npages)
{
	arena_t *a = c->arena;
	pagemap_give(c, first, npages);
	a->active_pages -= npages;
	if (c->advised_huge && c->nfree >= CHUNK_USABLE_PAGES - SPARSE_PAGES) {
		uint64_t now = os_now_ms();
		if (sparse_again(c, now))
			advise_sparse(c, now);
	}
	if (c->nfree == CHUNK_USABLE_PAGES && ++a->nempty > 1)
		chunk_release(a, c);
	else if (fine_purge_chunk(c))
		fine_decay(c);
	sweep_tick(a);
}

/* Gives block p of chunk c back: to its slab, or its pages if it is large.
 * Caller holds the lock of c's arena. */
static void free_block_locked(arena_chunk_t *c, void *p)
{
	size_t idx = page_index(c, p);
	if (unlikely(conf.debug))
		debug_forget_links(p, class_size[c->page[idx].sclass]);
	if (c->page[idx].kind == PG_SLAB)
		slab_free_block(c, c->slab_of[idx], p);
	else
		arena_pages_free(c, idx, class_size[c->page[idx].sclass] >> PAGE_SHIFT);
}

static void free_list_locked(void *p)
{
	while (p) {
		void *next = *(void **)p;
		free_block_locked(chunk_base_of(p), p);
		p = next;
	}
}

/* Blocks on a's remote stack (linked through their first word) go back to
 * their slabs and pages.  Caller holds a->lock. */
void arena_drain_remote(arena_t *a)
{
	if (!atomic_load_explicit(&a->remote, memory_order_relaxed))
		return;
	void *p = atomic_exchange_explicit(&a->remote, NULL, memory_order_acquire);
	long bytes = 0;
	while (p) {
		void *next = *(void **)p;
		arena_chunk_t *c = chunk_base_of(p);
		bytes += (long)class_size[c->page[page_index(c, p)].sclass];
		free_block_locked(c, p);
		p = next;
	}
	atomic_fetch_sub_explicit(&a->remote_bytes, bytes, memory_order_relaxed);
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

/* Puts every chain on a's transfer stacks back into slabs and pages.
 * Caller holds a->lock. */
static void drain_batches(arena_t *a)
{
	for (unsigned c = 0; c < NCACHED; c++) {
		void **h = atomic_exchange_explicit(&a->xfer[c], NULL, memory_order_acquire);
		long bytes = 0;
		while (h) {
			void **next_batch = BATCH_NEXT(h[1]);
			for (void **p = h, *next; p; p = next) {
				next = p[0];
				free_block_locked(chunk_base_of(p), p);
				bytes += (long)class_size[c];
			}
			h = next_batch;
		}
		atomic_fetch_sub_explicit(&a->remote_bytes, bytes, memory_order_relaxed);
	}
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
}

static void push_batch(arena_t *a, unsigned sclass, void *head, unsigned n, size_t bytes)
{
	void **h = head;
	void *old = atomic_load_explicit(&a->xfer[sclass], memory_order_relaxed);
	do
		h[1] = (void *)BATCH_LINK(old, n);
	while (!atomic_compare_exchange_weak_explicit(&a->xfer[sclass], &old, head,
						      memory_order_release, memory_order_relaxed));
	bound_remote(a, bytes);
}

/* One chain of class sclass from a's transfer stack, of at most max
 * blocks (the rest go back to their slabs): its first block (its second
 * word cleared), the number of blocks in *n; NULL if none.  Caller holds
 * a->lock (the only poppers are refills). */
void *arena_take_batch(arena_t *a, unsigned sclass, unsigned max, unsigned *n)
{
	void **h = atomic_load_explicit(&a->xfer[sclass], memory_order_acquire);
	while (h && !atomic_compare_exchange_weak_explicit(&a->xfer[sclass], (void **)&h,
							   BATCH_NEXT(h[1]), memory_order_acquire,
							   memory_order_acquire))
		;
	if (!h)
		return NULL;
	unsigned k = BATCH_LEN(h[1]);
	h[1] = NULL;
	long bytes = (long)k * (long)class_size[sclass];
	if (k > max) { /* longer than the list's room: the rest back to slabs */
		void **last = h;
		for (unsigned i = 1; i < max; i++)
			last = last[0];
		for (void **p = last[0], *next; p; p = next) {
			next = p[0];
			free_block_locked(chunk_base_of(p), p);
		}
		last[0] = NULL;
		k = max;
	}
	atomic_fetch_sub_explicit(&a->remote_bytes, bytes, memory_order_relaxed);
	*n = k;
	return h;
}

/* Gives back a chain of a's blocks of class sclass (bytes in all), head to
 * tail linked through their first word.  A thread of another arena hands
 * the chain to a's refills (a transfer batch) or, for a single block or
 * without thread caches, pushes it on a's remote stack: one
 * compare-and-swap either way, never a's lock, which a's own threads need.
 * A thread of a gives the blocks back at once if the lock is free. */
void arena_free_chain(arena_t *a, unsigned sclass, void *head, void *tail, unsigned n,
		      size_t bytes, bool own)
{
	if (own && pthread_mutex_trylock(&a->lock) == 0) {
		arena_drain_remote(a);
		free_list_locked(head);
		arena_unlock(a);
		return;
	}
	if (!own && conf.tcache && !conf.debug && regions_below_2_48)
		push_batch(a, sclass, head, n, bytes);
	else
		push_remote(a, head, tail, bytes);
}

/* Purges the free dirty pages of every arena chunk; returns bytes. */
size_t arena_purge_all(void)
{
	size_t pages = 0;
	for (unsigned i = 0; i < narenas; i++) {
		arena_lock(&arenas[i]);
		arena_drain_remote(&arenas[i]);
		drain_batches(&arenas[i]);
		for (arena_chunk_t *c = arenas[i].chunks; c; c = c->next)
			pages += pagemap_purge(c, PURGE_DONTNEED);
		arena_unlock(&arenas[i]);
	}
	return pages << PAGE_SHIFT;
}

void arena_lock_all(void)
{
	for (unsigned i = 0; i < narenas; i++)
		arena_lock(&arenas[i]);
}

void arena_unlock_all(void)
{
	for (unsigned i = narenas; i-- > 0;)
		arena_unlock(&arenas[i]);
}
