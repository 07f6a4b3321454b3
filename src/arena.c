/* Arenas: each owns arena chunks and hands out runs of their pages under
 * its own lock.  A thread is bound to the arena with the fewest threads; a
 * block always goes back to its chunk's arena. */
#include "internal.h"

/* In .bss and opened as threads need them: static locks would put all 64
 * in .data, mapped whole by fault-around.  Adaptive locks, taken after a
 * spin of libarena's own where contended (arena_lock_contended). */
arena_t arenas[MAX_ARENAS];
/* arena_max(); 0 until first needed */
static unsigned narenas;
/* os_ncpus() as arena_max() first read it; 0 until then */
static unsigned ncpus;
START_UP static atomic_uint nopen;         /* arenas 0..nopen-1 are open */
/* opens arenas (a leaf lock); fork's prepare handler takes it */
START_UP static pthread_mutex_t open_mtx = PTHREAD_MUTEX_INITIALIZER;

static void open_locked(unsigned i)
{
	arenas[i].lock = (mutex_t){ .m = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP };
	atomic_store_explicit(&nopen, i + 1, memory_order_release);
}

unsigned arena_count(void)
{
	return atomic_load_explicit(&nopen, memory_order_acquire);
}

void arena_init(void)
{
	open_locked(0);
}

/* Four per CPU: fewer keep less memory (freed pages stay dirty in one
 * arena while another faults fresh ones), more keep threads off each
 * other's locks (narenas: docs/tuning.md).  Counted when a thread first
 * finds arena 0 taken: a single-threaded program never pays for
 * sched_getaffinity's stretch of libc.  Racing threads agree. */
#define ARENAS_PER_CPU 4

unsigned arena_max(void)
{
	unsigned n = __atomic_load_n(&narenas, __ATOMIC_RELAXED);
	if (n == 0) {
		unsigned cpus = os_ncpus();
		__atomic_store_n(&ncpus, cpus, __ATOMIC_RELAXED);
		n = cfg->narenas ? cfg->narenas : ARENAS_PER_CPU * cpus;
		n = n < MAX_ARENAS ? n : MAX_ARENAS;
		__atomic_store_n(&narenas, n, __ATOMIC_RELAXED);
	}
	return n;
}
_Static_assert(((uint64_t)MAX_ARENAS << ARENA_SALT_SHIFT) <= (uint64_t)1 << 32,
	       "every arena's salt fits a slab offset's 32 bits");

/* Arena i, opened here or by another thread meanwhile. */
static arena_t *open_next(unsigned i)
{
	pthread_mutex_lock(&open_mtx);
	if (atomic_load_explicit(&nopen, memory_order_relaxed) == i)
		open_locked(i);
	pthread_mutex_unlock(&open_mtx);
	return &arenas[i];
}

/* The arena with the fewest threads (ties: the lowest). */
arena_t *arena_pick(void)
{
	unsigned used = arena_count();
	arena_t *best = &arenas[0];
	unsigned best_n = atomic_load_explicit(&best->nthreads, memory_order_relaxed);
	for (unsigned i = 1; i < used && best_n; i++) {
		unsigned n = atomic_load_explicit(&arenas[i].nthreads, memory_order_relaxed);
		if (n < best_n)
			best = &arenas[i], best_n = n;
	}
	if (best_n && used < arena_max())
		best = open_next(used);
	atomic_fetch_add_explicit(&best->nthreads, 1, memory_order_relaxed);
	return best;
}

/* After fork: the one thread left is bound to survivor (NULL: none). */
void arena_threads_after_fork(const arena_t *survivor)
{
	for (unsigned i = 0, used = arena_count(); i < used; i++)
		atomic_store_explicit(&arenas[i].nthreads, &arenas[i] == survivor, memory_order_relaxed);
}

/* a->dirty_pages follows c->ndirty (was before).  Written under the lock,
 * read without: a store, not an atomic add. */
static void dirty_note(arena_t *a, const arena_chunk_t *c, size_t before)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	ARENA_ASSERT(a->dirty_pages + c->ndirty >= before); /* never below 0 */
	__atomic_store_n(&a->dirty_pages, a->dirty_pages + c->ndirty - before, __ATOMIC_RELAXED);
}

static void active_note(arena_t *a, size_t pages_in, size_t pages_out)
{
	ARENA_ASSERT(a->active_pages + pages_in >= pages_out);
	__atomic_store_n(&a->active_pages, a->active_pages + pages_in - pages_out, __ATOMIC_RELAXED);
}

/* statistics: born huge, of them after the dirty cap, collapsed again */
atomic_ulong arena_born_huge, arena_born_regrown, arena_refilled_huge;

/* A new chunk for a (dirty_only: one given back dirty), or NULL. */
static arena_chunk_t *chunk_new(arena_t *a, bool dirty_only)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	bool zero = false, regrown = false;
	void *base = dirty_only ? chunk_alloc_dirty(CK_ARENA) : chunk_alloc_arena(&zero, &regrown);
	if (!base)
		return NULL;
	/* advised before the chunk's first write, which faults 2 MiB in when
	 * advised huge */
	uint64_t now = os_now_ms();
	bool huge = thp_new_chunk_huge(a->ndense, a->nchunks, regrown, now);
	chunk_map_advise(base, 1, huge ? ADV_HUGE : ADV_NOHUGE);
	if (zero && thp_times_first_writes()) /* its first write faults: timed */
		thp_chunk_first_write(huge, os_first_write_ns(base, huge), now);
	arena_chunk_t *c = chunk_hdr_of(base);
	pagemap_init(c, zero);
	c->base = base;
	dirty_note(a, c, 0);
	c->advised_huge = huge;
	c->nguards = 0;
	c->advice_ms = 0;
	c->regret_pages = 0;
	a->ndense += huge;
	if (huge && thp_dense_advised()) {
		a->filling = c;
		atomic_fetch_add_explicit(&arena_born_huge, 1, memory_order_relaxed);
		if (regrown)
			atomic_fetch_add_explicit(&arena_born_regrown, 1, memory_order_relaxed);
	}
	c->arena = a;
	c->salt = arena_salt(a);
	list_push_front(&a->chunks, &c->link);
	if (++a->nchunks > a->peak_chunks)
		a->peak_chunks = a->nchunks;
	a->chunks_taken++;
	a->nempty++;
	return c;
}

static void chunk_release(arena_t *a, arena_chunk_t *c)
{
	ARENA_ASSERT(c->arena == a && c->nfree == CHUNK_PAGES && c->nguards == 0);
	ARENA_ASSERT(a->nchunks > 0 && a->nempty > 0 && a->dirty_pages >= c->ndirty);
	list_remove(&a->chunks, &c->link);
	a->nchunks--;
	a->nempty--;
	a->ndense -= c->advised_huge;
	if (a->filling == c)
		a->filling = NULL;
	if (a->slab_hint == c)
		a->slab_hint = NULL;
	/* its dirty pages are the chunk layer's now */
	__atomic_store_n(&a->dirty_pages, a->dirty_pages - c->ndirty, __ATOMIC_RELAXED);
	chunk_free(c->base, 1);
}

/* not the chunk its arena is filling */
static bool turns_sparse(const arena_chunk_t *c, uint64_t now)
{
	return c != c->arena->filling && thp_turns_sparse(c, now);
}

static bool sparse_by_use(const arena_chunk_t *c)
{
	return c != c->arena->filling && thp_sparse_by_use(c);
}

/* The guard pages after c's large blocks go (large.c), their pages stay
 * in the blocks' runs: a guard keeps the 2 MiB from being a huge page. */
static void unguard_blocks(arena_chunk_t *c)
{
	for (size_t i = 0; i < CHUNK_PAGES && c->nguards; i++) {
		struct large_run *r = &c->ref[i].run;
		if (c->page[i].kind != PG_LARGE || c->page[i].head != i ||
		    c->page[i].sclass < NCACHED || r->guard == GUARD_NONE)
			continue;
		os_unguard(page_addr(c, i + r->pages), PAGE_SIZE, r->guard);
		r->guard = GUARD_NONE;
		c->nguards--;
	}
}

/* c turns dense or sparse: its advice, and the time. */
static void set_dense(arena_chunk_t *c, bool dense, uint64_t now)
{
	/* a change, or ndense miscounts */
	ARENA_ASSERT(c->advised_huge != dense && (dense || c->arena->ndense > 0));
	if (dense)
		unguard_blocks(c);
	if (!dense)
		chunk_map_advise(c->base, 1, ADV_NOHUGE);
	else if (thp_dense_advised())
		chunk_map_advise(c->base, 1, ADV_HUGE);
	c->arena->ndense += dense ? 1 : (size_t)-1;
	c->advised_huge = dense;
	c->advice_ms = now;
}

static bool decays(const arena_chunk_t *c)
{
	return (purge_fine_chunk(c) || purge_dense_chunk(c)) && !purge_whole_only(c);
}

/* Fine-grained decay: the free dirty pages of c are purged once its dirty
 * clock is due (purge_expired), checked when pages of c are given back
 * (not where the background thread purges: purge_deferred) and by the
 * sweeps. */
static void fine_decay(arena_chunk_t *c, uint64_t now)
{
	ARENA_ASSERT_LOCKED(&c->arena->lock);
	if (!purge_decay_on())
		return;
	if (c->dirty_ms == 0)
		c->dirty_ms = now;
	if (purge_expired(c->dirty_ms, now)) {
		/* a dense chunk's advice goes first: khugepaged would fill the
		 * purged pages in again */
		if (purge_dense_chunk(c))
			set_dense(c, false, now);
		arena_chunk_purge(c, purge_advice());
	}
}

/* fine_decay for every chunk of a whose free pages may be purged, after
 * taking back the huge-page advice of chunks that went sparse while they
 * had to keep it.  Returns when the next of them is due (a dirty chunk's
 * pages, or a sparse chunk's advice), UINT64_MAX if none: what the
 * background thread sleeps until. */
static uint64_t sweep_locked(arena_t *a, uint64_t now)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	uint64_t next = UINT64_MAX;
	list_for_each(c, &a->chunks, arena_chunk_t, link) {
		if (turns_sparse(c, now))
			set_dense(c, false, now);
		else if (sparse_by_use(c) && c->ndirty && thp_sparse_at(c) < next)
			next = thp_sparse_at(c);
		if (c->dirty_ms && decays(c)) {
			fine_decay(c, now);
			if (c->dirty_ms && purge_due_at(c->dirty_ms) < next)
				next = purge_due_at(c->dirty_ms);
		}
	}
	return next;
}

/* A sweep of a, if one is due (purge_sweep_due): from its allocation and
 * free paths, which read the clock already; not where the background
 * thread sweeps (purge_deferred). */
static void sweep_tick(arena_t *a, uint64_t now)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	if (!purge_deferred() && purge_sweep_due(&a->next_sweep_ms, now))
		sweep_locked(a, now);
}

/* Sweeps every arena (the background thread): when the next is due. */
uint64_t arena_sweep_all(void)
{
	uint64_t next = UINT64_MAX, now = os_now_ms();
	if (!purge_sweeps())
		return next;
	for (unsigned i = 0, nused = arena_count(); i < nused; i++) {
		arena_lock(&arenas[i]);
		uint64_t n = sweep_locked(&arenas[i], now);
		arena_unlock(&arenas[i]);
		next = n < next ? n : next;
	}
	return next;
}

/* ---- the dirty cap (purge_dirty_cap) */

/* Bytes the cap purged, ever (malloc_trim counts those it caused). */
atomic_ulong arena_cap_purged;

static size_t arenas_dirty_bytes(void)
{
	size_t pages = 0;
	for (unsigned i = 0, nused = arena_count(); i < nused; i++)
		pages += __atomic_load_n(&arenas[i].dirty_pages, __ATOMIC_RELAXED);
	return pages << PAGE_SHIFT;
}

/* Whether a cap is on (purge_dirty_cap's SIZE_MAX: none). */
static bool cap_on(void)
{
	return purge_dirty_cap(0) != SIZE_MAX;
}

/* The cap for the active memory now (SIZE_MAX: none). */
static size_t cap_now(void)
{
	if (!cap_on()) /* off: nothing to add up */
		return SIZE_MAX;
	size_t pages = 0;
	for (unsigned i = 0, nused = arena_count(); i < nused; i++)
		pages += __atomic_load_n(&arenas[i].active_pages, __ATOMIC_RELAXED);
	return purge_dirty_cap((pages << PAGE_SHIFT) + chunk_huge_bytes());
}

/* Purges the chunk layer's oldest dirty chunks down to keep in all. */
static void trim_chunks(size_t keep)
{
	size_t arena_dirty = arenas_dirty_bytes(), before = chunk_dirty_bytes();
	chunk_trim_dirty(arena_dirty < keep ? keep - arena_dirty : 0);
	size_t after = chunk_dirty_bytes();
	if (after < before)
		atomic_fetch_add_explicit(&arena_cap_purged, before - after, memory_order_relaxed);
}

/* After a huge block's chunks went back: the cap, no arena lock held. */
void arena_cap_chunks(void)
{
	size_t cap = cap_now();
	if (cap == SIZE_MAX || arenas_dirty_bytes() + chunk_dirty_bytes() <= cap)
		return;
	trim_chunks(purge_cap_pass(cap));
}

/* fine purging allows it, or c is dense by advice but sparse by use */
static bool cap_purgeable(const arena_chunk_t *c)
{
	return (purge_fine_chunk(c) || sparse_by_use(c)) && !purge_whole_only(c);
}

/* Purges a's chunks' free pages, oldest chunk first, while more than keep
 * bytes are dirty in all; a dense chunk that is sparse by its pages in use
 * takes back its advice at once for it. */
static void cap_purge_arena(arena_t *a, size_t keep, uint64_t now)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	while (arenas_dirty_bytes() + chunk_dirty_bytes() > keep) {
		arena_chunk_t *oldest = NULL;
		list_for_each(c, &a->chunks, arena_chunk_t, link) {
			if (!c->ndirty || !cap_purgeable(c))
				continue;
			if (!oldest || c->dirty_ms < oldest->dirty_ms)
				oldest = c;
		}
		if (!oldest)
			return;
		if (oldest->advised_huge)
			set_dense(oldest, false, now);
		size_t pages = arena_chunk_purge(oldest, purge_advice());
		if (pages == 0)
			return; /* madvise refused: a later pass */
		oldest->capped_ms = purge_cap_stamp(now);
		oldest->regret_pages = 0;
		atomic_fetch_add_explicit(&arena_cap_purged, pages << PAGE_SHIFT, memory_order_relaxed);
	}
}

static atomic_size_t cap_freed;

/* Checked when a's pages are given back (npages of them; turned: a chunk
 * of a just became cap_purgeable): over the cap, the chunk layer's oldest
 * dirty chunks are purged first (whole chunks, one madvise each run), then
 * a's chunks' free pages, then those of every other arena whose lock is
 * free (a trylock: never a wait, whatever the lock order), down to half
 * the cap.  Memory no pass can purge (dense chunks' free pages) would make
 * every free walk the chunks: the next pass waits until a quarter of the
 * cap more was given back, or a chunk turned purgeable; after a pass that
 * found an arena busy, the next page free tries again. */
static void cap_check(arena_t *a, size_t npages, bool turned)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	size_t freed = atomic_fetch_add_explicit(&cap_freed, npages << PAGE_SHIFT,
						 memory_order_relaxed) + (npages << PAGE_SHIFT);
	size_t cap = cap_now();
	if (cap == SIZE_MAX || arenas_dirty_bytes() + chunk_dirty_bytes() <= cap ||
	    (freed < cap / 4 && !turned))
		return;
	atomic_store_explicit(&cap_freed, 0, memory_order_relaxed);
	size_t keep = purge_cap_pass(cap);
	uint64_t now = os_now_ms();
	trim_chunks(keep);
	cap_purge_arena(a, keep, now);
	bool busy = false;
	for (unsigned i = 0, nused = arena_count(); i < nused; i++) {
		arena_t *other = &arenas[i];
		if (arenas_dirty_bytes() + chunk_dirty_bytes() <= keep)
			break;
		if (other == a || !__atomic_load_n(&other->dirty_pages, __ATOMIC_RELAXED))
			continue;
		if (mutex_trylock(&other->lock) != 0) {
			busy = true;
			continue;
		}
		cap_purge_arena(other, keep, now);
		arena_unlock(other);
	}
	/* an arena was busy: the next page free tries again */
	if (busy)
		atomic_store_explicit(&cap_freed, cap / 4, memory_order_relaxed);
}

/* A place for npages pages aligned to align_pages pages on dirty free
 * pages of a's chunks: the chunk, and the first page in *first; NULL if
 * none (*first untouched).  The walk reads every chunk's header: not
 * while the heap only grows (nothing dirty), nor again while nothing was
 * given back since one for as many pages found nothing.  A slab tries the
 * chunk of the last slab's find first: the walk read 22 chunk headers per
 * new slab (bench/phase_change); large blocks keep first fit, the hint cost
 * them 8% more faults (bench/gate large_churn-64k-1m).  (a: the lender,
 * for borrow_from.) */
static arena_chunk_t *dirty_place(arena_t *a, size_t npages, size_t align_pages, bool slab,
				  long *first)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	bool missed = a->gives == a->miss_gives && npages >= a->miss_npages;
	if (a->dirty_pages < npages || missed)
		return NULL;
	long at;
	arena_chunk_t *h = a->slab_hint;
	if (slab && h && (at = pagemap_find_dirty(h, npages, align_pages)) >= 0) {
		*first = at;
		return h;
	}
	list_for_each(d, &a->chunks, arena_chunk_t, link) {
		if ((at = pagemap_find_dirty(d, npages, align_pages)) >= 0) {
			*first = at;
			if (slab)
				a->slab_hint = d;
			return d;
		}
	}
	a->miss_gives = a->gives;
	a->miss_npages = npages;
	return NULL;
}

/* The first fit is on zero pages, while backed pages wait for their purge:
 * dirty pages of a's chunks instead, else a dirty chunk. */
static void backed_instead(arena_t *a, size_t npages, size_t align_pages, bool slab,
			   arena_chunk_t **c, long *first)
{
	arena_chunk_t *d = dirty_place(a, npages, align_pages, slab, first);
	if (d) {
		*c = d;
		return;
	}
	arena_chunk_t *dirty;
	if (chunk_dirty_bytes() && (dirty = chunk_new(a, true))) {
		long at = pagemap_find(dirty, npages, align_pages); /* an empty chunk: fits */
		if (at >= 0)
			*c = dirty, *first = at;
	}
}

/* c, purged by the dirty cap and filled again (thp_refill_collapse), is
 * advised huge and collapsed rather than faulted in 4 KiB at a time
 * (docs/design.md, "A heap growing back"). */
static void refill_huge(arena_chunk_t *c, uint64_t now)
{
	set_dense(c, true, now); /* MADV_HUGEPAGE */
	chunk_collapse(c->base);
	c->capped_ms = 0;
	c->regret_pages = 0;
	atomic_fetch_add_explicit(&arena_refilled_huge, 1, memory_order_relaxed);
}

/* Where a's next npages pages aligned to align_pages pages come from: the
 * first fit of its chunks, or pages already backed instead of a zero one
 * (backed_instead); *c NULL when none fits (a new chunk).  Returns the
 * first page. */
static long place(arena_t *a, size_t npages, size_t align_pages, bool slab, arena_chunk_t **c)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	ARENA_ASSERT(npages > 0 && npages <= CHUNK_PAGES);
	long first = -1;
	arena_chunk_t *d;
	for (d = list_first(&a->chunks, arena_chunk_t, link); d; d = list_next(d, arena_chunk_t, link))
		if (d->longest >= npages && (first = pagemap_find(d, npages, align_pages)) >= 0)
			break;
	/* nothing dirty, here or in the chunk layer: no backed place to prefer */
	if (d && (a->dirty_pages >= npages || chunk_dirty_bytes()) &&
	    pagemap_run_zero(d, (size_t)first, npages))
		backed_instead(a, npages, align_pages, slab, &d, &first);
	*c = d;
	return first;
}

/* Takes pages [first, first + npages) of c (a chunk of a; NULL: a new
 * one), marked kind/sclass. */
static void *take(arena_t *a, arena_chunk_t *c, long first, size_t npages, size_t align_pages,
		  uint8_t kind, uint8_t sclass, bool *zero)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	ARENA_ASSERT((kind == PG_SLAB && sclass < NSMALL) ||
		     (kind == PG_LARGE && sclass >= NSMALL && sclass < NCLASSES));
	if (!c) {
		if (!(c = chunk_new(a, false)) || (first = pagemap_find(c, npages, align_pages)) < 0)
			return NULL;
	}
	ARENA_ASSERT(c->arena == a && first >= 0);
	ARENA_ASSERT(((uintptr_t)page_addr(c, (size_t)first) &
		      ((align_pages << PAGE_SHIFT) - 1)) == 0);
	if (c->nfree == CHUNK_PAGES) {
		ARENA_ASSERT(a->nempty > 0);
		a->nempty--;
	}
	size_t before = c->ndirty;
	*zero = pagemap_take(c, (size_t)first, npages);
	dirty_note(a, c, before);
	uint64_t now = os_now_ms();
	if (*zero && purge_cap_regretted((uint32_t)c->capped_ms, now)) {
		purge_cap_regret(npages << PAGE_SHIFT);
		c->regret_pages += (uint32_t)npages;
	}
	for (size_t i = (size_t)first; i < (size_t)first + npages; i++)
		c->page[i] = (page_info_t){ .kind = kind, .sclass = sclass, .head = (uint16_t)first };
	active_note(a, npages, 0);
	if (thp_refill_collapse(c, a->peak_chunks))
		refill_huge(c, now);
	if (c->nfree <= CHUNK_PAGES - THP_DENSE_PAGES) {
		if (!c->advised_huge && thp_turns_dense(c, now))
			set_dense(c, true, now);
		if (c == a->filling)
			a->filling = NULL; /* dense: it may turn sparse from here on */
	}
	sweep_tick(a, now);
	return page_addr(c, (size_t)first);
}

/* npages pages aligned to align_pages pages from a's chunks (a new chunk if
 * none has room), marked kind/sclass.  *zero: all of them known zero. */
void *arena_pages_alloc(arena_t *a, size_t npages, size_t align_pages,
			uint8_t kind, uint8_t sclass, bool *zero)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	arena_chunk_t *c;
	long first = place(a, npages, align_pages, kind == PG_SLAB, &c);
	return take(a, c, first, npages, align_pages, kind, sclass, zero);
}

/* Pages lent to another arena's thread, ever. */
atomic_ulong arena_lent_pages;

/* Dirty free pages of lender b, taken, b locked; NULL (unlocked) if b is
 * busy or has none. */
static void *borrow_from(arena_t *b, size_t npages, size_t align_pages, uint8_t sclass)
{
	if (__atomic_load_n(&b->dirty_pages, __ATOMIC_RELAXED) < npages ||
	    mutex_trylock(&b->lock) != 0)
		return NULL;
	long at;
	arena_chunk_t *c = dirty_place(b, npages, align_pages, false, &at);
	if (!c) {
		arena_unlock(b);
		return NULL;
	}
	bool zero;
	atomic_fetch_add_explicit(&arena_lent_pages, npages, memory_order_relaxed);
	return take(b, c, at, npages, align_pages, PG_LARGE, sclass, &zero);
}

/* For a large block no cache holds: where a's place is on zero pages, or
 * a new chunk, another arena's dirty pages first, if its lock is free
 * (trylock: a is held), rather than fault fresh pages while those wait.
 * *owner: the chunk's arena, locked (a, or the lender). */
void *arena_pages_alloc_large(arena_t *a, size_t npages, size_t align_pages, uint8_t sclass,
			      bool *zero, arena_t **owner)
{
	arena_chunk_t *c;
	long first = place(a, npages, align_pages, false, &c);
	*owner = a;
	if (!c || pagemap_run_zero(c, (size_t)first, npages)) {
		for (unsigned i = 0, nused = arena_count(); i < nused; i++) {
			arena_t *b = &arenas[i];
			void *p;
			if (b != a && (p = borrow_from(b, npages, align_pages, sclass))) {
				*zero = false;
				*owner = b;
				return p;
			}
		}
	}
	return take(a, c, first, npages, align_pages, PG_LARGE, sclass, zero);
}

/* Gives pages back to their chunk; a chunk left empty goes back to the chunk
 * layer unless it is the arena's only empty one (kept to absorb the next
 * allocation without a round trip). */
void arena_pages_free(arena_chunk_t *c, size_t first, size_t npages)
{
	arena_t *a = c->arena;
	ARENA_ASSERT_LOCKED(&a->lock);
	/* in use, one run's pages (a large block's tail, when it shrinks) */
	ARENA_ASSERT(npages > 0 && first + npages <= CHUNK_PAGES);
	ARENA_ASSERT((c->page[first].kind == PG_SLAB || c->page[first].kind == PG_LARGE) &&
		     c->page[first + npages - 1].kind == c->page[first].kind &&
		     c->page[first + npages - 1].head == c->page[first].head);
	/* the cap's test of c, only where a cap is on (off with the background
	 * thread): two calls for every run of pages given back */
	bool capped = cap_on(), was_purgeable = capped && cap_purgeable(c);
	size_t before = c->ndirty;
	/* a large block's first page loses its slab word */
	if (c->page[first].kind == PG_LARGE)
		ptab_set(page_addr(c, first), 1, 0);
	pagemap_give(c, first, npages);
	a->gives++;
	dirty_note(a, c, before);
	active_note(a, 0, npages);
	uint64_t now = os_now_ms();
	if (c->advised_huge && c->nfree >= CHUNK_PAGES - THP_SPARSE_PAGES &&
	    turns_sparse(c, now))
		set_dense(c, false, now);
	if (c->dirty_ms == 0) /* the chunk's dirty clock */
		c->dirty_ms = now;
	bool turned_purgeable = capped && !was_purgeable && cap_purgeable(c);
	if (c->nfree == CHUNK_PAGES && ++a->nempty > 1) {
		chunk_release(a, c); /* the chunk layer's now */
	} else {
		/* wake the background thread only where decay will purge */
		bool decaying = decays(c);
		if (decaying || cap_purgeable(c))
			purge_note_dirty();
		if (decaying && !purge_deferred())
			fine_decay(c, now);
	}
	sweep_tick(a, now);
	if (capped)
		cap_check(a, npages, turned_purgeable);
}

/* Pages [first, first+npages) of c, free, taken by a large block that
 * grows in place. */
void arena_pages_grow(arena_chunk_t *c, size_t first, size_t npages)
{
	ARENA_ASSERT_LOCKED(&c->arena->lock);
	ARENA_ASSERT(first > 0 && c->page[first - 1].kind == PG_LARGE); /* after a large block */
	size_t before = c->ndirty;
	pagemap_take(c, first, npages);
	dirty_note(c->arena, c, before);
	active_note(c->arena, npages, 0);
}

/* pagemap_purge, counted in the arena's dirty pages. */
size_t arena_chunk_purge(arena_chunk_t *c, uint8_t kind)
{
	ARENA_ASSERT_LOCKED(&c->arena->lock);
	size_t before = c->ndirty;
	/* once advised huge, khugepaged may have filled free pages in: all go */
	bool all = kind == PURGE_DONTNEED && c->advice_ms != 0;
	size_t pages = all ? pagemap_purge_free(c) : pagemap_purge(c, kind);
	dirty_note(c->arena, c, before);
	return pages;
}

/* How long a thread spins for a taken arena lock before it sleeps: the
 * holders' flushes and refills outlast the mutex's own adaptive spin (10
 * to 100 tries), and a sleep costs the waker a futex call and the sleeper
 * a context switch.  bench/phase_change -s 150 -r 3, 2 vCPUs, an x86 pause
 * 17 ns: 9,900 voluntary context switches at no spin, 400 at 512 pauses,
 * 170 at 2,048; 1.55x -> 1.37x tcmalloc's time; 8 threads on 2 CPUs as
 * before. */
#define LOCK_SPIN_PAUSES 2048

/* No spin on one CPU: the holder cannot run meanwhile.  Before arena_max()
 * has read the count (no second thread bound yet), the spin. */
static unsigned lock_spin_limit(void)
{
	return __atomic_load_n(&ncpus, __ATOMIC_RELAXED) == 1 ? 0 : LOCK_SPIN_PAUSES;
}

#ifdef ARENA_UNIT
unsigned arena_lock_spin_limit(void)
{
	return lock_spin_limit();
}
#endif

/* Whether a's lock is free, read without taking its cache line for
 * writing: waiting threads spin on their own copies. */
static bool lock_looks_free(arena_t *a)
{
#ifdef __GLIBC__
	return __atomic_load_n(&a->lock.m.__data.__lock, __ATOMIC_RELAXED) == 0;
#else
	(void)a;
	return true;
#endif
}

void arena_lock_contended(arena_t *a)
{
	for (unsigned i = 0, spins = lock_spin_limit(); i < spins; i++) {
		cpu_pause();
		if (lock_looks_free(a) && mutex_trylock(&a->lock) == 0)
			return;
	}
	mutex_lock(&a->lock);
}

void arena_lock_all(void)
{
	pthread_mutex_lock(&open_mtx); /* first: no arena opens meanwhile */
	for (unsigned i = 0, n = arena_count(); i < n; i++)
		arena_lock(&arenas[i]);
}

void arena_unlock_all(void)
{
	for (unsigned i = arena_count(); i-- > 0;)
		arena_unlock(&arenas[i]);
	pthread_mutex_unlock(&open_mtx);
}
