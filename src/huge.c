/* Huge blocks: size > 1 MiB, a run of whole chunks starting on a chunk
 * boundary (so the kernel can back them with huge pages and move them with
 * mremap).  The usable size is the request rounded up to 4 KiB; the rest of
 * the last chunk stays untouched.  realloc resizes a huge block in place
 * when it can: it shrinks by giving back whole chunks, and grows into the
 * free chunks after it (no copy; no system call unless THP advice changes).
 * Otherwise it moves: pages with mremap (chunk_map_move), bytes with memcpy
 * below remap_min or without MREMAP_DONTUNMAP. */
#include "internal.h"

#include <string.h>

START_UP atomic_ulong huge_nmalloc, huge_nfree, huge_bytes;
START_UP atomic_ulong huge_peak_blocks, huge_peak_bytes; /* malloc_stats' "max mmap" */
START_UP atomic_ulong huge_nin_place, huge_nremap, huge_ncopy;

static void count(atomic_ulong *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* Raises *peak to at least v. */
static void raise_peak(atomic_ulong *peak, unsigned long v)
{
	unsigned long old = atomic_load_explicit(peak, memory_order_relaxed);
	while (old < v && !atomic_compare_exchange_weak_explicit(peak, &old, v, memory_order_relaxed,
								 memory_order_relaxed))
		;
}

/* Adds delta bytes (wrapping: may be "negative") to the huge bytes live. */
static void add_bytes(size_t delta)
{
	unsigned long now = atomic_fetch_add_explicit(&huge_bytes, delta, memory_order_relaxed) + delta;
	raise_peak(&huge_peak_bytes, now);
}

static size_t chunks_for(size_t size)
{
	return ALIGN_UP(size, CHUNK_SIZE) >> CHUNK_SHIFT;
}

/* ---- a guard page after huge blocks ----------------------------------------
 * The page after a huge block's usable bytes is a guard (os_guard,
 * MADV_GUARD_INSTALL) wherever that costs no huge page: a linear overflow
 * off the block's end faults there instead of running on into the next
 * block or chunk header.  One madvise at malloc and one at free, no new
 * mapping.  A guard splits a huge page and leaves a page table under its
 * 2 MiB, so the range faults in 4 KiB pages from then on; so there is none
 * where the last chunk is advised huge (covered 3/4 or more, thp.c) or may
 * hold a huge page still (taken dirty from a block whose whole chunk it
 * was, or a whole chunk a shrink left partly covered), nor after a block
 * that ends on a chunk boundary: a guard in a chunk of its own cost
 * realloc growth, which grows into that chunk, 8x the faults (bench/gate
 * realloc rows: 1.1 k -> 9.5 k).  The block's head descriptor says
 * which kind it has, if any (chunk_set_guard), so that the guard's
 * removal undoes what its installation did. */
static void guard_end(void *base, size_t usable, bool zero)
{
	size_t tail_pages = (usable & (CHUNK_SIZE - 1)) >> PAGE_SHIFT;
	if (!tail_pages)
		return;
	void *last = (char *)base + (usable & ~(CHUNK_SIZE - 1));
	/* secure mode: a guard whatever the last chunk's huge page costs */
	if (!cfg->secure && (thp_huge_block_advice(tail_pages, zero) == ADV_HUGE ||
			     (!zero && chunk_desc_of(last)->advice == ADV_HUGE)))
		return;
	chunk_set_guard(base, os_guard((char *)base + usable, PAGE_SIZE));
}

static void unguard_end(void *base, size_t usable)
{
	uint8_t kind = chunk_guard(base);
	if (kind == GUARD_NONE)
		return;
	os_unguard((char *)base + usable, PAGE_SIZE, kind);
	chunk_set_guard(base, GUARD_NONE);
}

/* Chunks of huge blocks that the run-time decision kept in 4 KiB pages
 * (thp.c: fresh, and a huge page cost more than 4 KiB pages). */
START_UP atomic_ulong huge_nsmall_chunks;

/* THP advice for a huge block of usable bytes at base, chunk by chunk
 * as thp.c's policy says: its whole chunks, and a last one it only partly
 * covers; chunks before `from` keep theirs.  nfresh: how many of the chunks
 * from `from` on have no pages the kernel still backs (chunk.c's
 * mark_used); the statistics count those kept small. */
static void advise_block(void *base, size_t usable, size_t from, size_t nfresh)
{
	size_t full = usable >> CHUNK_SHIFT, n = chunks_for(usable);
	size_t tail_pages = (usable & (CHUNK_SIZE - 1)) >> PAGE_SHIFT;
	uint8_t whole = thp_huge_block_advice(CHUNK_PAGES, nfresh > 0);
	uint8_t tail = thp_huge_block_advice(tail_pages, nfresh > 0);
	if (whole == ADV_NOHUGE && thp_huge_block_advice(CHUNK_PAGES, false) == ADV_HUGE && full > from)
		atomic_fetch_add_explicit(&huge_nsmall_chunks, nfresh < full - from ? nfresh : full - from,
					  memory_order_relaxed);
	if (n > full && tail == whole)
		full = n;
	if (full > from)
		chunk_map_advise((char *)base + (from << CHUNK_SHIFT), full - from, whole);
	if (n > full && n - 1 >= from)
		chunk_map_advise((char *)base + (full << CHUNK_SHIFT), 1, tail);
}

/* Before nfresh fresh chunks of a block are advised: the run-time
 * decision's probe, when one is due (thp.c).  Not for calloc (probe
 * false): a block asked for zeroed is often written only in part, or not
 * at all, and its first call should stay free of faults. */
static void probe_if_due(size_t nfresh, bool probe)
{
	if (!nfresh || !probe)
		return;
	os_fault_cost_t cost;
	unsigned runs = thp_probe_runs(nfresh);
	bool dear = thp_watch_dear(nfresh);
	if (thp_probe_due(os_now_ms(), runs, dear) && os_fault_probe(&cost, runs))
		thp_probe_result(&cost);
}

/* A huge block of size bytes (usable: size rounded up to a page) aligned
 * to align; *zero: whether it is known to read zero (as large_alloc).
 * probe (not calloc): the huge-page decision may probe first, and chunks
 * without pages may take freed ones (chunk.c's assemble). */
void *huge_alloc(size_t size, size_t align, bool *zero, bool probe)
{
	size_t usable = ALIGN_UP(size, PAGE_SIZE);
	size_t nfresh;
	void *p = chunk_alloc_huge(chunks_for(usable), align > CHUNK_SIZE ? align : CHUNK_SIZE,
				   usable, probe, zero, &nfresh);
	if (!p)
		return NULL;
	size_t tail = ALIGN_UP(usable, CHUNK_SIZE) - usable;
	if (!*zero && tail && purge_huge_tail()) {
		os_split_huge((char *)p + usable); /* the chunk may be a huge page */
		os_purge_dontneed((char *)p + usable, tail);
	}
	guard_end(p, usable, *zero);
	probe_if_due(nfresh, probe);
	advise_block(p, usable, 0, nfresh);
	unsigned long n = atomic_fetch_add_explicit(&huge_nmalloc, 1, memory_order_relaxed) + 1;
	raise_peak(&huge_peak_blocks, n - atomic_load_explicit(&huge_nfree, memory_order_relaxed));
	add_bytes(usable);
	return p;
}

void huge_free(chunk_desc_t *d, void *p)
{
	ARENA_ASSERT(d->kind == CK_HUGE && chunk_desc_addr(d) == p);
	atomic_fetch_add_explicit(&huge_nfree, 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&huge_bytes, d->size, memory_order_relaxed);
	unguard_end(p, d->size);
	chunk_free(p, d->nchunks);
	arena_cap_chunks();
}

/* Resizes the huge block of head descriptor d to size (> LARGE_MAX) without
 * moving it; false when it must grow and the chunks after it are taken. */
bool huge_resize_in_place(chunk_desc_t *d, size_t size)
{
	ARENA_ASSERT(d->kind == CK_HUGE && size > LARGE_MAX);
	void *base = chunk_desc_addr(d);
	size_t usable = ALIGN_UP(size, PAGE_SIZE), old_usable = d->size;
	size_t old_n = d->nchunks, new_n = chunks_for(usable);
	size_t nfresh = 0;
	if (new_n > old_n && !chunk_extend(base, old_n, new_n, usable, &nfresh))
		return false;
	if (usable != old_usable)
		unguard_end(base, old_usable);
	if (new_n <= old_n)
		chunk_shrink(base, old_n, new_n, usable);
	if (usable != old_usable)
		guard_end(base, usable, false);
	/* From the last chunk it had (it may now be whole), or has (it may now
	 * be partly covered).  Chunks it grew into get the decision's advice
	 * when one of them is fresh, else huge advice: they hold their pages,
	 * or huge pages purged a moment ago that the kernel still backs (a
	 * buffer grown again after the dirty cap purged it at free). */
	bool grew = new_n > old_n;
	probe_if_due(nfresh, true);
	advise_block(base, usable, (grew ? old_n : new_n) - 1, nfresh);
	if (cfg->populate_on_grow && usable > old_usable)
		os_populate((char *)base + old_usable, usable - old_usable);
	add_bytes(usable - old_usable);
	count(&huge_nin_place);
	return true;
}

/* Moves the huge block p (head descriptor d) to a new run of chunks for
 * size bytes (> LARGE_MAX), its pages by mremap or its bytes by memcpy;
 * NULL with ENOMEM (p untouched) when no run is free. */
void *huge_move(chunk_desc_t *d, void *p, size_t size)
{
	ARENA_ASSERT(d->kind == CK_HUGE && chunk_desc_addr(d) == p && size > LARGE_MAX);
	size_t old_usable = d->size, old_n = d->nchunks;
	size_t usable = ALIGN_UP(size, PAGE_SIZE), keep = old_usable < usable ? old_usable : usable;
	bool remap = os_has_dontunmap && old_usable >= cfg->remap_min;
	bool zero;
	size_t nfresh;
	void *q = chunk_alloc_huge(chunks_for(usable), CHUNK_SIZE, usable, false, &zero, &nfresh);
	if (!q)
		return NULL;
	unguard_end(p, old_usable); /* a move would carry it into the block */
	size_t from = 0; /* chunks moved by mremap keep their pages and advice */
	if (remap && usable >= old_usable) {
		size_t copied = chunk_map_move(p, q, old_n, old_usable);
		count(copied ? &huge_ncopy : &huge_nremap);
		from = copied ? 0 : old_n - 1;
	} else {
		memcpy(q, p, keep);
		chunk_free(p, old_n);
		count(&huge_ncopy);
	}
	guard_end(q, usable, zero);
	/* at most the chunks the old pages did not land in */
	size_t tail = (usable >> CHUNK_SHIFT) - from;
	nfresh = nfresh < tail ? nfresh : tail;
	probe_if_due(nfresh, true);
	advise_block(q, usable, from, nfresh);
	if (cfg->populate_on_grow && usable > old_usable)
		os_populate((char *)q + old_usable, usable - old_usable);
	add_bytes(usable - old_usable);
	return q;
}
