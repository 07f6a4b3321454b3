/* The page map of an arena chunk: which pages are free (free_map) and which
 * free pages are dirty (dirty_map; a clear bit: known zero).  Runs are
 * found a 64-bit word at a time; longest lets arenas skip full chunks. */
#include "internal.h"

#include <string.h>

/* Whether bits [first, first+n) lie in one word, and its mask: a slab's
 * run, taken and given at every slab made and unmade (~1.2 M bits_put a
 * round of phase_change), takes that path. */
static inline bool one_word(size_t first, size_t n, uint64_t *mask)
{
	*mask = n < 64 ? ((1ULL << n) - 1) << first % 64 : 0;
	return n && n < 64 && first % 64 + n <= 64;
}

/* Sets (value true) or clears bits [first, first+n). */
static inline void bits_put(uint64_t *map, size_t first, size_t n, bool value)
{
	ARENA_ASSERT(first <= CHUNK_PAGES && n <= CHUNK_PAGES - first);
	uint64_t m;
	if (one_word(first, n, &m)) {
		map[first / 64] = value ? map[first / 64] | m : map[first / 64] & ~m;
		return;
	}
	while (n) {
		size_t bit = first % 64, take = 64 - bit < n ? 64 - bit : n;
		uint64_t mask = (take == 64 ? ~0ULL : ((1ULL << take) - 1)) << bit;
		if (value)
			map[first / 64] |= mask;
		else
			map[first / 64] &= ~mask;
		first += take;
		n -= take;
	}
}

/* Whether any bit of [first, first+n) is set (want true) or clear. */
static inline bool bits_any(const uint64_t *map, size_t first, size_t n, bool want)
{
	ARENA_ASSERT(first <= CHUNK_PAGES && n <= CHUNK_PAGES - first);
	uint64_t m;
	if (one_word(first, n, &m))
		return ((want ? map[first / 64] : ~map[first / 64]) & m) != 0;
	while (n) {
		size_t bit = first % 64, take = 64 - bit < n ? 64 - bit : n;
		uint64_t mask = (take == 64 ? ~0ULL : ((1ULL << take) - 1)) << bit;
		uint64_t w = want ? map[first / 64] : ~map[first / 64];
		if (w & mask)
			return true;
		first += take;
		n -= take;
	}
	return false;
}

/* How many bits of [first, first+n) are set. */
static inline size_t bits_count(const uint64_t *map, size_t first, size_t n)
{
	ARENA_ASSERT(first <= CHUNK_PAGES && n <= CHUNK_PAGES - first);
	uint64_t m;
	if (one_word(first, n, &m))
		return (size_t)ones64(map[first / 64] & m);
	size_t count = 0;
	while (n) {
		size_t bit = first % 64, take = 64 - bit < n ? 64 - bit : n;
		uint64_t mask = (take == 64 ? ~0ULL : ((1ULL << take) - 1)) << bit;
		count += (size_t)ones64(map[first / 64] & mask);
		first += take;
		n -= take;
	}
	return count;
}

/* c->ndirty follows dirty_map's count (the arena sums it). */
static void dirty_add(arena_chunk_t *c, size_t n)
{
	c->ndirty += (uint32_t)n;
}

static void dirty_sub(arena_chunk_t *c, size_t n)
{
	ARENA_ASSERT(c->ndirty >= n);
	c->ndirty -= (uint32_t)n;
}

/* Index of the first bit >= from equal to want, or CHUNK_PAGES. */
static size_t bits_next(const uint64_t *map, size_t from, bool want)
{
	while (from < CHUNK_PAGES) {
		uint64_t w = want ? map[from / 64] : ~map[from / 64];
		w &= ~0ULL << (from % 64);
		if (w)
			return (from & ~(size_t)63) + (size_t)__builtin_ctzll(w);
		from = (from & ~(size_t)63) + 64;
	}
	return CHUNK_PAGES;
}

/* Index of the last bit < from equal to want, or -1. */
static long bits_prev(const uint64_t *map, size_t from, bool want)
{
	while (from > 0) {
		size_t w = (from - 1) / 64, bits = from - w * 64; /* 1..64 */
		uint64_t x = want ? map[w] : ~map[w];
		if (bits < 64)
			x &= (1ULL << bits) - 1;
		if (x)
			return (long)(w * 64 + 63 - (size_t)__builtin_clzll(x));
		from = w * 64;
	}
	return -1;
}

/* Where the run of set bits holding bit first starts: bits_prev's answer
 * + 1, read from first's own word when the run starts there (pagemap_give,
 * at every slab unmade, asks it twice). */
static inline size_t run_start(const uint64_t *map, size_t first)
{
	ARENA_ASSERT(first < CHUNK_PAGES);
	uint64_t below = ~map[first / 64] & ((1ULL << first % 64) - 1);
	if (below)
		return (first & ~(size_t)63) + 64 - (size_t)__builtin_clzll(below);
	return (size_t)(bits_prev(map, first, false) + 1);
}

/* bits_next(map, from, false), from's own word inline. */
static inline size_t run_end(const uint64_t *map, size_t from)
{
	uint64_t above = from < CHUNK_PAGES ? ~map[from / 64] & (~0ULL << from % 64) : 0;
	if (above)
		return (from & ~(size_t)63) + (size_t)__builtin_ctzll(above);
	return bits_next(map, from, false);
}

/* The next run of set bits at or after *from: [*start, *end).  False when
 * there is none. */
static bool next_run(const uint64_t *map, size_t from, size_t *start, size_t *end)
{
	*start = bits_next(map, from, true);
	if (*start >= CHUNK_PAGES)
		return false;
	*end = bits_next(map, *start, false);
	return true;
}

/* The longest run of set bits in map, counting at most to limit (the
 * bits set in all). */
static uint16_t longest_run(const uint64_t *map, size_t limit)
{
	size_t longest = 0, start, end;
	for (size_t at = 0; longest < limit && next_run(map, at, &start, &end); at = end)
		if (end - start > longest)
			longest = end - start;
	return (uint16_t)longest;
}

/* Exact longest free run.  Between calls, longest is only an upper bound:
 * taking pages leaves it alone, giving pages back raises it to the run they
 * join, and a search that fails recomputes it.  longest_dirty is the same
 * for runs of dirty free pages: a search for a dirty place then skips a
 * chunk without reading its bitmap (a heap of scattered dirty runs, where
 * every new slab walked every chunk's runs: phase_change's bits_next). */
static void update_longest(arena_chunk_t *c)
{
	c->longest = longest_run(c->free_map, c->nfree);
}

/* A fresh header: every page free, dirty unless known zero. */
void pagemap_init(arena_chunk_t *c, bool zero)
{
	memset(c, 0, sizeof(*c));
	bits_put(c->free_map, 0, CHUNK_PAGES, true);
	if (!zero) {
		bits_put(c->dirty_map, 0, CHUNK_PAGES, true);
		dirty_add(c, CHUNK_PAGES);
	}
	c->nfree = CHUNK_PAGES;
	c->longest = CHUNK_PAGES;
	c->longest_dirty = zero ? 0 : CHUNK_PAGES;
	ARENA_ASSERT(pagemap_validate_runs(c));
}

/* m[i] &= m[i + k] for every bit i of the map (bits past the end are 0). */
static void and_shifted(uint64_t *m, unsigned k)
{
	for (unsigned w = 0; w < CHUNK_WORDS; w++) {
		uint64_t next = w + 1 < CHUNK_WORDS ? m[w + 1] : 0;
		m[w] &= m[w] >> k | next << (64 - k);
	}
}

/* First fit for up to 64 pages aligned to up to 64, all words at once:
 * after ANDing the map with itself shifted by 1, 2, 4, ... (n - 1 in all),
 * bit i is set iff pages [i, i + n) are free.  ~100 operations whatever
 * the fragmentation. */
static long find_short(const uint64_t *map, size_t npages, size_t align_pages)
{
	if (npages == 1 && align_pages == 1) { /* most slabs: the first bit set */
		for (unsigned w = 0; w < CHUNK_WORDS; w++)
			if (map[w])
				return (long)w * 64 + __builtin_ctzll(map[w]);
		return -1;
	}
	uint64_t m[CHUNK_WORDS];
	memcpy(m, map, sizeof(m));
	for (size_t done = 1; done < npages;) {
		size_t k = done < npages - done ? done : npages - done;
		and_shifted(m, (unsigned)k);
		done += k;
	}
	uint64_t aligned = align_pages >= 64 ? 1 : ~0ULL / ((1ULL << align_pages) - 1);
	for (unsigned w = 0; w < CHUNK_WORDS; w++)
		if (m[w] & aligned)
			return (long)w * 64 + __builtin_ctzll(m[w] & aligned);
	return -1;
}

/* First index of npages free pages whose address is a multiple of
 * align_pages pages, or -1. */
long pagemap_find(arena_chunk_t *c, size_t npages, size_t align_pages)
{
	size_t start, end;
	ARENA_ASSERT(npages > 0 && align_pages > 0 && (align_pages & (align_pages - 1)) == 0);
	if (c->longest < npages)
		return -1;
	if (npages <= 64 && align_pages <= 64) {
		long first = find_short(c->free_map, npages, align_pages);
		if (first < 0 && align_pages == 1)
			update_longest(c);
		ARENA_ASSERT(first < 0 || pagemap_range_free(c, (size_t)first, npages));
		return first;
	}
	for (size_t at = 0; next_run(c->free_map, at, &start, &end); at = end) {
		size_t first = ALIGN_UP(start, align_pages);
		if (first + npages <= end)
			return (long)first;
	}
	if (align_pages == 1)
		update_longest(c);
	return -1;
}

/* The first place for npages pages aligned to align_pages among c's free
 * dirty pages (taken again without a fault), -1 if none. */
long pagemap_find_dirty(arena_chunk_t *c, size_t npages, size_t align_pages)
{
	size_t start, end;
	ARENA_ASSERT(npages > 0 && align_pages > 0 && (align_pages & (align_pages - 1)) == 0);
	if (c->ndirty < npages || c->longest_dirty < npages)
		return -1;
	long first = -1;
	if (npages <= 64 && align_pages <= 64)
		first = find_short(c->dirty_map, npages, align_pages);
	else
		for (size_t at = 0; first < 0 && next_run(c->dirty_map, at, &start, &end); at = end)
			if (ALIGN_UP(start, align_pages) + npages <= end)
				first = (long)ALIGN_UP(start, align_pages);
	if (first < 0 && align_pages == 1)
		c->longest_dirty = longest_run(c->dirty_map, c->ndirty);
	ARENA_ASSERT(first < 0 || !bits_any(c->dirty_map, (size_t)first, npages, false));
	return first;
}

bool pagemap_range_free(const arena_chunk_t *c, size_t first, size_t npages)
{
	return first + npages <= CHUNK_PAGES && !bits_any(c->free_map, first, npages, false);
}

/* Whether pages [first, first+npages) are all known zero: taking them
 * faults in new memory. */
bool pagemap_run_zero(const arena_chunk_t *c, size_t first, size_t npages)
{
	return !bits_any(c->dirty_map, first, npages, true) &&
	       !bits_any(c->lazy_map, first, npages, true);
}

/* Marks free pages [first, first+npages) in use: whether all were known
 * zero. */
bool pagemap_take(arena_chunk_t *c, size_t first, size_t npages)
{
	/* free -> in use */
	ARENA_ASSERT(npages > 0 && pagemap_range_free(c, first, npages));
	size_t dirty = bits_count(c->dirty_map, first, npages);
	bool zero = dirty == 0 && !bits_any(c->lazy_map, first, npages, true);
	dirty_sub(c, dirty);
	bits_put(c->free_map, first, npages, false);
	bits_put(c->dirty_map, first, npages, false);
	bits_put(c->lazy_map, first, npages, false);
	c->nfree = (uint16_t)(c->nfree - npages);
	ARENA_ASSERT(pagemap_validate_runs(c));
	return zero;
}

/* Marks pages [first, first+npages) free and dirty; returns how many. */
size_t pagemap_give(arena_chunk_t *c, size_t first, size_t npages)
{
	/* in use -> free: none of them free already */
	ARENA_ASSERT(npages > 0 && first < CHUNK_PAGES && npages <= CHUNK_PAGES - first &&
		     !bits_any(c->free_map, first, npages, true));
	for (size_t i = first; i < first + npages; i++)
		c->page[i] = (page_info_t){ .kind = PG_FREE };
	bits_put(c->free_map, first, npages, true);
	bits_put(c->dirty_map, first, npages, true);
	bits_put(c->lazy_map, first, npages, false);
	dirty_add(c, npages); /* pages in use were neither dirty nor lazy */
	c->nfree = (uint16_t)(c->nfree + npages);
	size_t free_start = run_start(c->free_map, first);
	size_t free_end = run_end(c->free_map, first + npages);
	if (free_end - free_start > c->longest)
		c->longest = (uint16_t)(free_end - free_start);
	size_t dirty_start = run_start(c->dirty_map, first);
	size_t dirty_end = run_end(c->dirty_map, first + npages);
	if (dirty_end - dirty_start > c->longest_dirty)
		c->longest_dirty = (uint16_t)(dirty_end - dirty_start);
	ARENA_ASSERT(pagemap_validate_runs(c));
	return npages;
}

/* Runs per system call (os_purge_many): 1 KiB of stack. */
#define PURGE_BATCH 64

/* Run r of c's free pages purged into state (MS_ZERO or MS_LAZY): its
 * pages leave dirty_map (for lazy_map with MADV_FREE).  How many were
 * dirty or lazy. */
static size_t mark_purged(arena_chunk_t *c, const struct iovec *r, uint8_t state)
{
	size_t start = page_index(c, r->iov_base);
	size_t n = r->iov_len >> PAGE_SHIFT;
	/* free pages only, and a purge's outcome */
	ARENA_ASSERT(pagemap_range_free(c, start, n) && (state == MS_ZERO || state == MS_LAZY));
	size_t dirty = bits_count(c->dirty_map, start, n);
	size_t purged = dirty + bits_count(c->lazy_map, start, n);
	dirty_sub(c, dirty);
	bits_put(c->dirty_map, start, n, false);
	bits_put(c->lazy_map, start, n, state == MS_LAZY);
	return purged;
}

/* Purges every run of the pages set in todo with kind: how many were
 * dirty or lazy (never both). */
static size_t purge_runs(arena_chunk_t *c, const uint64_t *todo, uint8_t kind)
{
	struct iovec run[PURGE_BATCH];
	uint8_t state[PURGE_BATCH];
	size_t purged = 0, start, end, at = 0;
	bool more = true, split = kind == PURGE_DONTNEED && purge_whole_only(c);
	while (more) {
		unsigned n = 0;
		while (n < PURGE_BATCH && (more = next_run(todo, at, &start, &end))) {
			run[n++] = (struct iovec){ page_addr(c, start), (end - start) << PAGE_SHIFT };
			at = end;
		}
		if (n && split) /* before the first run only: the chunk is one huge page */
			os_split_huge(run[0].iov_base), split = false;
		os_purge_many(run, n, kind, state); /* one call for all: purge_batch */
		for (unsigned i = 0; i < n; i++)
			if (state[i] != MS_DIRTY)
				purged += mark_purged(c, &run[i], state[i]);
	}
	c->dirty_ms = 0;
	ARENA_ASSERT(pagemap_validate_runs(c));
	return purged;
}

/* Purges every run of free dirty pages with kind (with MADV_DONTNEED the
 * lazy ones too: malloc_trim wants RSS down now): the pages purged. */
size_t pagemap_purge(arena_chunk_t *c, uint8_t kind)
{
	uint64_t todo[CHUNK_WORDS];
	for (unsigned w = 0; w < CHUNK_WORDS; w++)
		todo[w] = c->dirty_map[w] | (kind == PURGE_DONTNEED ? c->lazy_map[w] : 0);
	return purge_runs(c, todo, kind);
}

/* Purges every free run of c with MADV_DONTNEED, zero ones included: in a
 * chunk advised huge once, khugepaged may have filled its free zero pages
 * in, and purging only the dirty runs would leave those resident.  The
 * pages purged that were dirty or lazy. */
size_t pagemap_purge_free(arena_chunk_t *c)
{
	return purge_runs(c, c->free_map, PURGE_DONTNEED);
}

/* Free pages of c by state: dirty, lazily freed. */
void pagemap_count(const arena_chunk_t *c, size_t *dirty, size_t *lazy)
{
	for (unsigned w = 0; w < CHUNK_WORDS; w++) {
		*dirty += (size_t)ones64(c->dirty_map[w]);
		*lazy += (size_t)ones64(c->lazy_map[w]);
	}
}

#ifdef ARENA_DEBUG
static bool pagemap_bad(const arena_chunk_t *c, const char *what, size_t v)
{
	out_printf("libarena: pagemap_validate_runs: chunk %p: %s (%zu)\n", c->base, what,
		   v);
	return false;
}

/* Whether c's page map is consistent: its header pages are the header's,
 * never free; free pages are PG_FREE, and the dirty and lazily freed ones
 * are free pages, none both; nfree and ndirty are the maps' counts; longest
 * is at least the longest free run; and the pages in use of a run (a slab's
 * or a large block's) name its first page, which is in use too, of the same
 * kind and class, with no other run in between.  (Pages just taken may
 * still be PG_FREE until the arena marks them: arena.c, take.) */
bool pagemap_validate_runs(const arena_chunk_t *c)
{
	size_t nfree = 0, ndirty = 0;
	for (unsigned w = 0; w < CHUNK_WORDS; w++) {
		uint64_t f = c->free_map[w], d = c->dirty_map[w], l = c->lazy_map[w];
		size_t at = (size_t)w * 64;
		if (d & ~f)
			return pagemap_bad(c, "a dirty page not free",
					   at + (size_t)__builtin_ctzll(d & ~f));
		if (l & ~f)
			return pagemap_bad(c, "a lazy page not free",
					   at + (size_t)__builtin_ctzll(l & ~f));
		if (d & l)
			return pagemap_bad(c, "a page both dirty and lazy",
					   at + (size_t)__builtin_ctzll(d & l));
		nfree += (size_t)ones64(f);
		ndirty += (size_t)ones64(d);
	}
	if (nfree != c->nfree || nfree > CHUNK_PAGES)
		return pagemap_bad(c, "nfree, not the free pages' count", c->nfree);
	if (ndirty != c->ndirty)
		return pagemap_bad(c, "ndirty, not the dirty pages' count", c->ndirty);
	size_t longest = 0, start, end;
	for (size_t at = 0; next_run(c->free_map, at, &start, &end); at = end)
		longest = end - start > longest ? end - start : longest;
	if (longest > c->longest)
		return pagemap_bad(c, "longest, shorter than a free run", c->longest);
	for (size_t i = 0; i < CHUNK_PAGES; i++) {
		page_info_t pi = c->page[i];
		bool free = c->free_map[i / 64] >> (i % 64) & 1;
		if (free && pi.kind != PG_FREE) {
			return pagemap_bad(c, "a free page in use", i);
		} else if (pi.kind == PG_SLAB || pi.kind == PG_LARGE) {
			page_info_t h = c->page[pi.head];
			bool head_free = c->free_map[pi.head / 64] >> (pi.head % 64) & 1;
			if (pi.head > i || head_free ||
			    h.kind != pi.kind || h.sclass != pi.sclass || h.head != pi.head ||
			    (i > pi.head && c->page[i - 1].head != pi.head))
				return pagemap_bad(c, "a page of a run whose head is not its run's",
						   i);
		} else if (pi.kind != PG_FREE) {
			return pagemap_bad(c, "a page of no kind", i);
		}
	}
	return true;
}
#endif
