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
 * are free. */
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
		c->ref[idx].run_pages = npages;
		atomic_fetch_add_explicit(&large_run_bytes, npages << PAGE_SHIFT,
					  memory_order_relaxed);
	}
}

/* Takes the block at page idx of c out of large_run_bytes (before its
 * pages are freed or remarked). */
static void unmark_run(const arena_chunk_t *c, size_t idx)
{
	ARENA_ASSERT(c->page[idx].kind == PG_LARGE && c->page[idx].head == idx);
	if (c->page[idx].sclass >= NCACHED)
		atomic_fetch_sub_explicit(&large_run_bytes, c->ref[idx].run_pages << PAGE_SHIFT,
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
	arena_lock(a);
	remote_drain(a);
	if (sclass >= NCACHED)
		p = arena_pages_alloc_large(a, npages, align_pages, (uint8_t)sclass, zero, &owner);
	else
		p = arena_pages_alloc(a, npages, align_pages, PG_LARGE, (uint8_t)sclass, zero);
	if (p) {
		arena_chunk_t *c = chunk_hdr_of(p);
		mark_run(c, page_index(c, p), npages, sclass);
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
	unmark_run(c, idx);
	arena_pages_free(c, idx, large_pages_of(c, idx));
	arena_unlock(a);
}

/* Resizes the large block at page idx of c to size bytes (a large size)
 * without moving it; false when the pages after it are not free. */
bool large_resize_in_place(arena_chunk_t *c, size_t idx, size_t size)
{
	arena_t *a = c->arena;
	unsigned sclass = size_class(size);
	size_t new_pages = pages_for(size, sclass);
	bool ok = true;
	arena_lock(a);
	size_t old_pages = large_pages_of(c, idx);
	if (new_pages > old_pages) {
		size_t extra = new_pages - old_pages;
		ok = pagemap_range_free(c, idx + old_pages, extra);
		if (ok)
			arena_pages_grow(c, idx + old_pages, extra);
	}
	if (ok) {
		unmark_run(c, idx);
		if (new_pages < old_pages)
			arena_pages_free(c, idx + new_pages, old_pages - new_pages);
		mark_run(c, idx, new_pages, sclass);
	}
	arena_unlock(a);
	return ok;
}
