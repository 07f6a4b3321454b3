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
