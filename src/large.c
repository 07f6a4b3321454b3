/* Large blocks: 16 KiB < size <= 1 MiB, a run of pages of an arena chunk.
 * Up to CACHE_MAX (64 KiB) the run is the block's large size class (a
 * multiple of 4 KiB), as the thread caches hold blocks by class; above it
 * the run is the request rounded up to 4 KiB, its length kept in the run's
 * first page (large_pages_of, internal.h).  Why: the classes above 64 KiB
 * (four per doubling) left about 9% of such a block unused on average, and
 * in bench/soak, whose live bytes are mostly blocks of 64 KiB-1 MiB, the
 * rounding of every class was 7.9% of live over a 300 s run, 2.7% by the
 * page (a page leaves at most 4 KiB: under 6.3% at 64 KiB, 0.4% at 1 MiB);
 * RSS/live median 1.611 -> 1.571 (docs/design.md, "Large blocks by the
 * page").  Blocks can grow and shrink in place while the pages after them
 * are free.
 *
 * With guard_large:true, a block above CACHE_MAX in a chunk not advised
 * huge takes a page more, its guard (MADV_GUARD_INSTALL: no new mapping,
 * left by purges): a linear overflow off its end faults there.  Off by
 * default: build/bench/large_churn -n 20000 -k 64 -s 64k-1m took 10.3 k
 * faults against 6.3 k and 7,624 madvise calls against 535 (a guard zaps
 * a backed page, its removal leaves one to fault in again).  The guard moves with the
 * block's end when it is resized in place and goes when it is freed, or
 * when its chunk turns dense (arena.c: a guard keeps the 2 MiB from being
 * a huge page); where none can be installed the page goes back at once. */
#include "internal.h"

/* Bytes in blocks above CACHE_MAX (their runs): arena_stats_get's
 * allocated, where a class's size no longer says a block's. */
START_UP atomic_ulong large_run_bytes;

/* Pages of a large block of size bytes (> SMALL_MAX), of class sclass. */
static size_t pages_for(size_t size, unsigned sclass)
{
	ARENA_ASSERT(size > SMALL_MAX && size <= LARGE_MAX && sclass >= NSMALL &&
		     sclass < NCLASSES);
	if (sclass < NCACHED)
		return class_size[sclass] >> PAGE_SHIFT;
	return ALIGN_UP(size, PAGE_SIZE) >> PAGE_SHIFT;
}

/* The page-table word of the first page of a large block at p of class
 * sclass: a block of a cached class is a slab of one block to free's fast
 * path (sizeclass.c: only its start passes), so that its free is a push
 * onto its thread's list like a small block's, not a walk of block_of
 * (150-220 instructions: bench/xthread's blocks of 16-64 KiB, 15% of its
 * frees, took 6.9 M of its 64.8 M under callgrind; 60.7 M with this).  0
 * above CACHE_MAX.
 * The arenas clear it when the run's pages go back (arena_pages_free). */
static void mark_head(arena_chunk_t *c, void *p, unsigned sclass)
{
	/* not with heap profiles: their second copy of the checks has the
	 * small classes only (prof.c), and a sampled block must reach
	 * prof_cache_free, whose slow path sees it */
	ptab_set(p, 1, sclass < NCACHED && !prof_on ? slab_entry(sclass, p, c->salt) : 0);
}

/* Marks pages [idx, idx + npages) of c as one large block of class sclass. */
static void mark_run(arena_chunk_t *c, size_t idx, size_t npages, unsigned sclass)
{
	ARENA_ASSERT(npages > 0 && idx + npages <= CHUNK_PAGES);
	for (size_t i = idx; i < idx + npages; i++)
		c->page[i] = (page_info_t){ .kind = PG_LARGE, .sclass = (uint8_t)sclass,
					    .head = (uint16_t)idx };
	mark_head(c, page_addr(c, idx), sclass);
	if (sclass >= NCACHED) {
		c->ref[idx].run = (struct large_run){ .pages = (uint32_t)npages };
		atomic_fetch_add_explicit(&large_run_bytes, npages << PAGE_SHIFT,
					  memory_order_relaxed);
	}
}

/* The pages of the block at page idx of c's run: its own and its guard's. */
static size_t run_of(const arena_chunk_t *c, size_t idx)
{
	size_t n = large_pages_of(c, idx);
	return c->page[idx].sclass < NCACHED ? n : n + c->ref[idx].run.spare;
}

/* Whether a block of class sclass in c gets a guard page (thp.c: it costs
 * no huge page there), where the kernel has guards. */
static bool wants_guard(const arena_chunk_t *c, unsigned sclass)
{
	return sclass >= NCACHED && cfg->guard_large && os_has_guard && thp_guard_ok(c);
}

/* The block at page idx of c (marked, its run's page after it taken): a
 * guard there, or the page back to the chunk if none is installed. */
static void guard_after(arena_chunk_t *c, size_t idx)
{
	struct large_run *r = &c->ref[idx].run;
	c->page[idx + r->pages] = c->page[idx]; /* the run's, if it just grew */
	uint8_t kind = os_guard(page_addr(c, idx + r->pages), PAGE_SIZE);
	if (kind == GUARD_NONE) {
		arena_pages_free(c, idx + r->pages, 1);
		return;
	}
	r->spare = 1;
	r->guard = kind;
	c->nguards++;
}

/* Takes away the guard after the block at page idx of c, if any (its page
 * stays in the run). */
static void unguard_after(arena_chunk_t *c, size_t idx)
{
	struct large_run *r = &c->ref[idx].run;
	if (c->page[idx].sclass < NCACHED || r->guard == GUARD_NONE)
		return;
	os_unguard(page_addr(c, idx + r->pages), PAGE_SIZE, r->guard);
	r->guard = GUARD_NONE;
	c->nguards--;
}

/* Takes the block at page idx of c out of large_run_bytes (before its
 * pages are freed or remarked). */
static void unmark_run(const arena_chunk_t *c, size_t idx)
{
	ARENA_ASSERT(c->page[idx].kind == PG_LARGE && c->page[idx].head == idx);
	if (c->page[idx].sclass >= NCACHED)
		atomic_fetch_sub_explicit(&large_run_bytes, (size_t)c->ref[idx].run.pages << PAGE_SHIFT,
					  memory_order_relaxed);
}

/* A block of arena a (the caller's thread's: the thread caches know which)
 * of at least size bytes (size <= LARGE_MAX) aligned to align (a power of
 * two <= LARGE_MAX); *zero: whether all of it is known to read zero (the
 * caller clears it for calloc, or counts the memset it saved); *usable:
 * its usable size.  NULL when out of memory. */
void *large_alloc(arena_t *a, size_t size, size_t align, bool *zero, size_t *usable)
{
	ARENA_ASSERT(size <= LARGE_MAX && align > 0 && align <= LARGE_MAX &&
		     (align & (align - 1)) == 0);
	if (size <= SMALL_MAX)
		size = SMALL_MAX + 1;
	unsigned sclass = size_class(size);
	size_t npages = pages_for(size, sclass);
	size_t align_pages = align > PAGE_SIZE ? align >> PAGE_SHIFT : 1;
	arena_t *owner = a;
	void *p;
	/* a page more for the guard, where the kernel has them */
	size_t spare = sclass >= NCACHED && cfg->guard_large && os_has_guard;
	arena_lock(a);
	remote_drain(a);
	if (sclass >= NCACHED)
		p = arena_pages_alloc_large(a, npages + spare, align_pages, (uint8_t)sclass, zero,
					    &owner);
	else
		p = arena_pages_alloc(a, npages, align_pages, PG_LARGE, (uint8_t)sclass, zero);
	if (p) {
		arena_chunk_t *c = chunk_hdr_of(p);
		size_t idx = page_index(c, p);
		mark_run(c, idx, npages, sclass);
		if (spare && wants_guard(c, sclass))
			guard_after(c, idx);
		else if (spare)
			arena_pages_free(c, idx + npages, 1);
	}
	if (owner != a)
		arena_unlock(owner);
	arena_unlock(a);
	ARENA_ASSERT(((uintptr_t)p & (align - 1)) == 0);
	*usable = npages << PAGE_SHIFT;
	return p;
}

/* Up to n blocks of large class sclass (< NCACHED) for a thread cache. */
unsigned large_alloc_batch(arena_t *a, unsigned sclass, void **out, unsigned n)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	ARENA_ASSERT(sclass >= NSMALL && sclass < NCACHED);
	unsigned got = 0;
	bool zero;
	size_t npages = pages_for(class_size[sclass], sclass);
	while (got < n && (out[got] = arena_pages_alloc(a, npages, 1, PG_LARGE, (uint8_t)sclass,
							&zero))) {
		mark_head(chunk_hdr_of(out[got]), out[got], sclass);
		got++;
	}
	return got;
}

void large_free(arena_chunk_t *c, size_t idx)
{
	arena_t *a = c->arena;
	arena_lock(a);
	unguard_after(c, idx);
	unmark_run(c, idx);
	arena_pages_free(c, idx, run_of(c, idx));
	arena_unlock(a);
}

/* Resizes the large block at page idx of c to size bytes (a large size)
 * without moving it; false when the pages after it are not free.  Its
 * guard moves to the new end (none where the page after that is taken). */
bool large_resize_in_place(arena_chunk_t *c, size_t idx, size_t size)
{
	arena_t *a = c->arena;
	unsigned sclass = size_class(size);
	size_t new_pages = pages_for(size, sclass);
	arena_lock(a);
	size_t old_pages = large_pages_of(c, idx), old_run = run_of(c, idx);
	size_t spare = wants_guard(c, sclass), new_run = new_pages + spare;
	if (new_run > old_run && !pagemap_range_free(c, idx + old_run, new_run - old_run))
		new_run = new_pages, spare = 0; /* room for the block, not its guard */
	if (new_run > old_run && !pagemap_range_free(c, idx + old_run, new_run - old_run)) {
		arena_unlock(a);
		return false;
	}
	bool same_end = new_pages == old_pages && new_run == old_run && sclass >= NCACHED &&
			c->page[idx].sclass >= NCACHED;
	if (same_end) { /* the guard stays where it is */
		struct large_run r = c->ref[idx].run;
		unmark_run(c, idx);
		mark_run(c, idx, new_pages, sclass);
		c->ref[idx].run = r;
		arena_unlock(a);
		return true;
	}
	unguard_after(c, idx);
	if (new_run > old_run)
		arena_pages_grow(c, idx + old_run, new_run - old_run);
	unmark_run(c, idx);
	if (new_run < old_run)
		arena_pages_free(c, idx + new_run, old_run - new_run);
	mark_run(c, idx, new_pages, sclass);
	if (spare)
		guard_after(c, idx);
	arena_unlock(a);
	return true;
}
