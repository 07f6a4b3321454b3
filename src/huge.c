/* Huge blocks: size > 1 MiB, a run of whole chunks starting on a chunk
 * boundary (so the kernel can back them with huge pages and, later, move
 * them with mremap).  The usable size is the request rounded up to 4 KiB;
 * the rest of the last chunk stays untouched.  A huge block grows in place
 * into free chunks after it and shrinks by giving back whole chunks. */
#include "internal.h"

#include <string.h>

atomic_ulong huge_nmalloc, huge_nfree, huge_bytes;

static size_t chunks_for(size_t size)
{
	return ALIGN_UP(size, CHUNK_SIZE) >> CHUNK_SHIFT;
}

/* THP advice for a huge block of usable bytes at base: its whole chunks
 * get huge pages (thp:auto, thp:always); a last chunk it only partly covers
 * gets none, unless thp:always: a huge page there would be resident for a
 * few bytes of the block, the seed thread's "2.1 MiB in 4 MiB" bloat. */
static void advise_block(void *base, size_t usable)
{
	size_t full = usable >> CHUNK_SHIFT, n = chunks_for(usable);
	if (conf.thp == THP_NEVER) {
		chunk_advise(base, n, ADV_NOHUGE);
		return;
	}
	chunk_advise(base, full, ADV_HUGE);
	if (n > full)
		chunk_advise((char *)base + (full << CHUNK_SHIFT), 1,
			     conf.thp == THP_ALWAYS ? ADV_HUGE : ADV_NOHUGE);
}

void *huge_alloc(size_t size, size_t align, bool zero)
{
	size_t usable = ALIGN_UP(size, PAGE_SIZE);
	bool was_zero;
	void *p = chunk_alloc(chunks_for(size), align > CHUNK_SIZE ? align : CHUNK_SIZE,
			      CK_HUGE, usable, &was_zero);
	if (!p)
		return NULL;
	advise_block(p, usable);
	if (zero && !was_zero)
		memset(p, 0, usable);
	else if (zero)
		stats_memset_skipped(usable);
	atomic_fetch_add_explicit(&huge_nmalloc, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&huge_bytes, usable, memory_order_relaxed);
	return p;
}

void huge_free(chunk_desc_t *d, void *p)
{
	atomic_fetch_add_explicit(&huge_nfree, 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&huge_bytes, d->size, memory_order_relaxed);
	chunk_free(p, d->nchunks);
}

/* Resizes the huge block of head descriptor d to size (> LARGE_MAX) without
 * moving it; false when it must grow and the chunks after it are taken. */
bool huge_resize_in_place(chunk_desc_t *d, size_t size)
{
	void *base = chunk_desc_addr(d);
	size_t usable = ALIGN_UP(size, PAGE_SIZE), old_usable = d->size;
	size_t old_n = d->nchunks, new_n = chunks_for(size);
	if (new_n > old_n) {
		if (!chunk_extend(base, old_n, new_n, usable))
			return false;
	} else {
		chunk_shrink(base, old_n, new_n, usable);
	}
	advise_block(base, usable);
	atomic_fetch_add_explicit(&huge_bytes, usable - old_usable, memory_order_relaxed);
	return true;
}
