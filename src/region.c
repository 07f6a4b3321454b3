/* Regions: the allocator's own address space, and the tables that describe
 * it (split out of chunk.c; the chunk layer above hands chunks out of them).
 *
 * Address space comes in regions: one large PROT_NONE reservation (64 GiB by
 * default, smaller if the kernel refuses, more regions when one fills up).
 * Why one reservation and not a mapping per chunk: huge blocks must be able
 * to grow in place into the chunks after them and be moved by mremap
 * inside space that no other mmap can take; "is this pointer ours?" is a
 * range check per region that never touches the pointer; and a PROT_NONE
 * reservation costs neither memory nor commit charge.  Chunks are committed
 * (mprotect read-write) in steps as the region's frontier advances, so the
 * region stays two mappings: the committed prefix and the reserved rest.
 * Each region has a descriptor per chunk (chunk_desc_t), a word per page
 * (ptab, free()'s fast path) and a header table for its arena chunks, no
 * header within an overflow's reach of a block.  Neighbouring chunks with the same map_tag lie
 * in one kernel mapping; every call that may split one gives a new tag.
 * The caller holds the chunk lock for region_new and region_commit_to. */
#include "internal.h"

#define REGION_DEFAULT ((size_t)64 << 30)
#define REGION_MIN ((size_t)64 << 20)
#define COMMIT_STEP ((size_t)16) /* chunks committed per mprotect, at least */

START_UP mutex_t chunk_mtx = MUTEX_INITIALIZER;
/* region 0's first fields in one cache line */
START_UP region_t regions[MAX_REGIONS] __attribute__((aligned(64)));
START_UP atomic_uint nregions;
bool regions_below_2_48 = true;
START_UP uintptr_t region_link_key;
START_UP size_t region_link_limit;

/* chunk_desc_of() for the regions after the first. */
chunk_desc_t *region_desc_of_other(const void *p)
{
	unsigned n = atomic_load_explicit(&nregions, memory_order_acquire);
	for (unsigned i = 1; i < n; i++) {
		size_t off = (size_t)((uintptr_t)p - (uintptr_t)regions[i].base);
		if (off < regions[i].size)
			return &regions[i].desc[off >> CHUNK_SHIFT];
	}
	return NULL;
}

/* A link that is not NULL or region 0's (link_checked): another region's
 * block, or a forged link, reported with the block holding it; with
 * misuse:warn the list ends there (its blocks are lost). */
void *region_link_bad(const void *block, uintptr_t next)
{
	if (next == 0 || (next % MIN_ALIGN == 0 && region_desc_of_other((void *)next)))
		return (void *)next;
	out_misuse("free list corrupted (a forged link or a write after free)", block);
	return NULL;
}

START_UP static atomic_uint last_tag;   /* chunk_desc_t.map_tag */

uint32_t region_new_tag(void)
{
	return atomic_fetch_add_explicit(&last_tag, 1, memory_order_relaxed) + 1;
}

static void set_tag(chunk_desc_t *d, size_t n, uint32_t tag)
{
	for (size_t i = 0; i < n; i++)
		d[i].map_tag = tag;
}

size_t region_desc_bytes(size_t nchunks)
{
	return ALIGN_UP(nchunks * sizeof(chunk_desc_t), CHUNK_SIZE);
}

/* Commits r's chunks up to end (at least COMMIT_STEP more at a time). */
bool region_commit_to(region_t *r, size_t end)
{
	ARENA_ASSERT_LOCKED(&chunk_mtx);
	ARENA_ASSERT(end <= r->nchunks && r->committed <= r->nchunks);
	if (end <= r->committed)
		return true;
	size_t to = end - r->committed < COMMIT_STEP ? r->committed + COMMIT_STEP : end;
	if (to > r->nchunks)
		to = r->nchunks;
	if (!os_commit(r->base + (r->committed << CHUNK_SHIFT),
		       (to - r->committed) << CHUNK_SHIFT))
		return false;
	/* their headers' pages (the first may hold the last chunk's already) */
	uintptr_t from = (uintptr_t)(r->hdrs + r->committed * CHUNK_HDR_BYTES) & ~(PAGE_SIZE - 1);
	uintptr_t end_h = ALIGN_UP((uintptr_t)(r->hdrs + to * CHUNK_HDR_BYTES), PAGE_SIZE);
	if (!os_commit((void *)from, end_h - from))
		return false;
	set_tag(&r->desc[r->committed], to - r->committed, region_new_tag());
	r->committed = to;
	return true;
}

static size_t ptab_bytes(size_t region_size)
{
	return (region_size >> PAGE_SHIFT) * sizeof(uint64_t);
}

/* The header table's reservation: a guard page, the headers, a guard page.
 * Reserved apart from the region, so no chunk's pages border a header; the
 * guards are pages never committed. */
static size_t hdr_area_bytes(size_t nchunks)
{
	return ALIGN_UP(nchunks * CHUNK_HDR_BYTES, PAGE_SIZE) + 2 * PAGE_SIZE;
}

/* Gives back the header table's pages that hold only headers of chunks
 * [first, first + n), free ones being purged (a header is written afresh
 * when its chunk turns arena chunk): malloc_trim takes them too. */
void region_purge_hdrs(region_t *r, size_t first, size_t n)
{
	ARENA_ASSERT(first + n <= r->committed);
	uintptr_t from = ALIGN_UP((uintptr_t)(r->hdrs + first * CHUNK_HDR_BYTES), PAGE_SIZE);
	uintptr_t to = (uintptr_t)(r->hdrs + (first + n) * CHUNK_HDR_BYTES) & ~(PAGE_SIZE - 1);
	if (to > from)
		os_purge_dontneed((void *)from, to - from);
}

/* A region of size bytes with its tables, or false (nothing kept).  A
 * page after it stays reserved, never committed: whatever the kernel maps
 * next to a region (where it refused the address asked for, it picks one
 * below its other mappings, the tables' among them), an overflow off the
 * region's last chunk faults there.  No mapping more: the reserved rest. */
static bool region_map(region_t *r, size_t size)
{
	char *base = os_reserve(size + PAGE_SIZE, CHUNK_SIZE);
	if (!base)
		return false;
	size_t nchunks = size >> CHUNK_SHIFT;
	/* Whole huge pages, 2 MiB-aligned, so that it can be advised later. */
	chunk_desc_t *desc = os_map_meta_aligned(region_desc_bytes(nchunks), CHUNK_SIZE);
	uint64_t *ptab = desc ? os_map_meta(ptab_bytes(size)) : NULL;
	char *hdrs = ptab ? os_reserve(hdr_area_bytes(nchunks), PAGE_SIZE) : NULL;
	if (!hdrs) {
		if (ptab)
			os_unmap(ptab, ptab_bytes(size));
		if (desc)
			os_unmap(desc, region_desc_bytes(nchunks));
		os_unmap(base, size + PAGE_SIZE);
		return false;
	}
	*r = (region_t){ .base = base, .size = size, .nchunks = nchunks, .desc = desc,
			 .ptab = ptab, .hdrs = hdrs + PAGE_SIZE };
	if (r == regions)
		region_link_limit = size / MIN_ALIGN;
	if ((uintptr_t)base + size > ((uintptr_t)1 << 48))
		regions_below_2_48 = false;
	return true;
}

/* Reserves a new region of at least min_chunks chunks: REGION_DEFAULT, or
 * halves until the kernel agrees (an address-space limit), tables and all. */
bool region_new(size_t min_chunks)
{
	ARENA_ASSERT_LOCKED(&chunk_mtx);
	ARENA_ASSERT(min_chunks > 0);
	unsigned n = atomic_load_explicit(&nregions, memory_order_relaxed);
	if (n == MAX_REGIONS)
		return false;
	if (n == 0) /* before any block: no link written yet */
		region_link_key = (uintptr_t)os_random();
	size_t min = min_chunks << CHUNK_SHIFT;
	size_t size = min > REGION_DEFAULT ? min : REGION_DEFAULT;
	while (!region_map(&regions[n], size)) {
		if (size / 2 < min || size / 2 < REGION_MIN)
			return false;
		size /= 2;
	}
	atomic_store_explicit(&nregions, n + 1, memory_order_release);
	return true;
}
