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
	unsigned n = cfg->narenas ? cfg->narenas : 4 * os_ncpus();
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

static arena_chunk_t *chunk_new(arena_t *a)
{
	bool zero;
	arena_chunk_t *c = chunk_alloc(1, CHUNK_SIZE, CK_ARENA, 0, &zero);
	if (!c)
		return NULL;
	/* Advised before the header is written: the chunk may still carry an
	 * earlier owner's MADV_HUGEPAGE, and that first write would fault 2 MiB
	 * in. */
	bool huge = thp_new_chunk_huge();
	chunk_advise(c, 1, huge ? ADV_HUGE : ADV_NOHUGE);
	pagemap_init(c, zero);
	c->advised_huge = huge;
	c->advice_ms = 0;
	c->arena = a;
	list_push_front(&a->chunks, &c->link);
	a->nchunks++;
	a->nempty++;
	return c;
}

static void chunk_release(arena_t *a, arena_chunk_t *c)
{
	list_remove(&a->chunks, &c->link);
	a->nchunks--;
	a->nempty--;
	chunk_free(c, 1);
}

/* c turns dense (thp_turns_dense) or sparse again (thp_turns_sparse):
 * its advice given, and the time of the change kept. */
static void set_dense(arena_chunk_t *c, bool dense, uint64_t now)
{
	if (!dense)
		chunk_advise(c, 1, ADV_NOHUGE);
	else if (thp_dense_advised())
		chunk_advise(c, 1, ADV_HUGE);
	c->advised_huge = dense;
	c->advice_ms = now;
}

/* Fine-grained decay: the free dirty pages of c are purged once the oldest
 * of them is due (purge_expired), checked when pages of c are given back
 * and by the sweeps.  Caller holds the arena's lock. */
static void fine_decay(arena_chunk_t *c)
{
	if (!purge_decay_on())
		return;
	uint64_t now = os_now_ms();
	if (c->dirty_ms == 0)
		c->dirty_ms = now;
	if (purge_expired(c->dirty_ms, now))
		pagemap_purge(c, purge_advice());
}

/* fine_decay for every chunk of a whose free pages may be purged, after
 * taking back the huge-page advice of chunks that went sparse while they
 * had to keep it.  Caller holds a->lock. */
static void sweep_locked(arena_t *a)
{
	uint64_t now = os_now_ms();
	list_for_each(c, &a->chunks, arena_chunk_t, link) {
		if (thp_turns_sparse(c, now))
			set_dense(c, false, now);
		if (c->dirty_ms && purge_fine_chunk(c))
			fine_decay(c);
	}
}

/* A sweep of a, if one is due (purge_sweep_due): from its allocation and
 * free paths.  Caller holds a->lock. */
static void sweep_tick(arena_t *a)
{
	if (purge_sweep_due(&a->next_sweep_ms, os_now_ms()))
		sweep_locked(a);
}

/* A sweep of every arena now (the background thread). */
void arena_fine_decay_all(void)
{
	if (!purge_sweeps())
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
	for (c = list_first(&a->chunks, arena_chunk_t, link); c; c = list_next(c, arena_chunk_t, link))
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
	if (!c->advised_huge && c->nfree <= CHUNK_USABLE_PAGES - THP_DENSE_PAGES) {
		uint64_t now = os_now_ms();
		if (thp_turns_dense(c, now))
			set_dense(c, true, now);
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
	if (c->advised_huge && c->nfree >= CHUNK_USABLE_PAGES - THP_SPARSE_PAGES) {
		uint64_t now = os_now_ms();
		if (thp_turns_sparse(c, now))
			set_dense(c, false, now);
	}
	if (c->nfree == CHUNK_USABLE_PAGES && ++a->nempty > 1)
		chunk_release(a, c);
	else if (purge_fine_chunk(c))
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
