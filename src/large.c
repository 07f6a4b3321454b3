/* Large blocks: 16 KiB < size <= 1 MiB, a run of pages of an arena chunk,
 * rounded to a large size class (a multiple of 4 KiB).  They can grow and
 * shrink in place while the pages after them are free. */
#include "internal.h"

static size_t class_pages(unsigned sclass)
{
	return class_size[sclass] >> PAGE_SHIFT;
}

/* A block of arena a (the caller's thread's: the thread caches know which)
 * of at least size bytes (size <= LARGE_MAX) aligned to align (a power of
 * two <= LARGE_MAX); *zero: whether all of it is known to read zero (the
 * caller clears it for calloc, or counts the memset it saved).  NULL when
 * out of memory. */
void *large_alloc(arena_t *a, size_t size, size_t align, bool *zero)
{
	unsigned sclass = size_class(size > SMALL_MAX ? size : SMALL_MAX + 1);
	size_t align_pages = align > PAGE_SIZE ? align >> PAGE_SHIFT : 1;
	arena_lock(a);
	arena_drain_remote(a);
	void *p = arena_pages_alloc(a, class_pages(sclass), align_pages, PG_LARGE,
				    (uint8_t)sclass, zero);
	arena_unlock(a);
	return p;
}

/* Up to n blocks of large class sclass for a thread cache.  Caller holds
 * a->lock. */
unsigned large_alloc_batch(arena_t *a, unsigned sclass, void **out, unsigned n)
{
	unsigned got = 0;
	bool zero;
	while (got < n && (out[got] = arena_pages_alloc(a, class_pages(sclass), 1, PG_LARGE,
							(uint8_t)sclass, &zero)))
		got++;
	return got;
}

void large_free(arena_chunk_t *c, size_t idx)
{
	arena_t *a = c->arena;
	arena_lock(a);
	arena_pages_free(c, idx, class_pages(c->page[idx].sclass));
	arena_unlock(a);
}

/* Resizes the large block at page idx of c to the class of size (a large
 * size) without moving it; false when the pages after it are not free. */
bool large_resize_in_place(arena_chunk_t *c, size_t idx, size_t size)
{
	arena_t *a = c->arena;
	unsigned sclass = size_class(size);
	size_t new_pages = class_pages(sclass);
	bool ok = true;
	arena_lock(a);
	size_t old_pages = class_pages(c->page[idx].sclass);
	if (new_pages < old_pages) {
		arena_pages_free(c, idx + new_pages, old_pages - new_pages);
	} else if (new_pages > old_pages) {
		size_t extra = new_pages - old_pages;
		ok = pagemap_range_free(c, idx + old_pages, extra);
		if (ok)
			arena_pages_grow(c, idx + old_pages, extra);
	}
	if (ok)
		for (size_t i = idx; i < idx + new_pages; i++)
			c->page[i] = (page_info_t){ .kind = PG_LARGE, .sclass = (uint8_t)sclass,
						    .head = (uint16_t)idx };
	arena_unlock(a);
	return ok;
}
