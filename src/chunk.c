/* Chunks: 2 MiB, 2 MiB-aligned pieces of the allocator's own address space
 * (regions: region.c), handed out in runs to arenas and huge blocks.
 *
 * Free chunks form maximal runs, tagged at both ends (head and tail
 * descriptors hold the run length) so a freed run merges with its neighbours
 * in O(1), and kept in bins by floor(log2(length)); an allocation takes the
 * place that holds the most dirty chunks, then the best fit (bins_find).
 * Each free chunk's descriptor holds its state (enum mem_state): dirty, zero
 * (fresh or purged with DONTNEED) or lazy (MADV_FREE).  Dirty free chunks
 * are also on one of two lists in the order they became dirty, those that
 * held huge blocks and the others (arena chunks), and decay purges each one
 * huge_decay_ms or decay_ms after that (purge.c describes the curve).
 * Purging is always of whole chunks, so it never splits a huge page.  All
 * of this is under one lock: chunks are taken and given back rarely (2 MiB
 * at a time, or huge blocks).  Moves and THP advice: chunk_map.c. */
#include "internal.h"

#include <errno.h>

#define NBINS 48
/* Once a region has handed out this many chunks (512 MiB), its descriptor
 * table (64 bytes a chunk: 2 MiB for 64 GiB) is advised
 * MADV_HUGEPAGE and collapsed: 2 MiB is then 0.4% of the memory it
 * describes.  Measured (build/bench/first_touch -m calloc -s 1g): a first
 * calloc of 1 GiB took 16 minor faults before, 7 of them descriptor pages;
 * with the collapsed table (and statically initialised arenas) 7-8. */
#define DESC_HUGE_AFTER ((size_t)256)

/* Chunks purged per madvise call at most (neighbours that expired together
 * go in one call). */
#define DECAY_BATCH 512

START_UP static list_t bins[NBINS];
START_UP static size_t free_chunks;   /* chunks in free runs                   */
START_UP static size_t dirty_chunks;  /* of those, dirty (on the LRU list)     */
START_UP static size_t lazy_chunks;   /* of those, given MADV_FREE             */
/* Dirty free chunks, oldest first: those that held huge blocks (due after
 * huge_decay_ms) and the others (decay_ms).  A free chunk's size field
 * says which (LRU_HUGE or LRU_OTHER). */
enum { LRU_OTHER, LRU_HUGE, NLRU };
START_UP static list_t lru[NLRU];
START_UP static size_t lru_n[NLRU];
/* Chunks of huge blocks (heads and bodies): with the arenas' pages in use,
 * the active memory the dirty cap is measured against (purge.c).  Written
 * under chunk_mtx, read without it. */
START_UP static size_t huge_chunks;
/* The peak of huge_chunks over the last horizon (purge.c): with
 * huge_decay_ms:auto, dirty free chunks of huge blocks are kept while
 * huge_chunks and they stay under it. */
START_UP static purge_horizon_t huge_horizon;
/* Chunks taken by huge blocks over the last horizon. */
START_UP static purge_horizon_t huge_taken;
/* Chunks of huge blocks the dirty cap purged before they were due, and
 * when it last did: huge blocks that take as many chunks again within
 * decay_ms are its regret, whichever chunks they take (a block growing by
 * realloc takes the ones after it, fresh ones at the frontier too). */
START_UP static size_t capped_huge;
START_UP static uint32_t capped_huge_stamp;

static bool is_huge_kind(uint8_t kind)
{
	return kind == CK_HUGE || kind == CK_HUGE_BODY;
}

static void lru_append(chunk_desc_t *d, uint64_t now)
{
	d->dirty_ms = now;
	list_push_back(&lru[d->size], &d->lru);
	lru_n[d->size]++;
	purge_note_dirty();
}

static void lru_remove(chunk_desc_t *d)
{
	list_remove(&lru[d->size], &d->lru);
	lru_n[d->size]--;
}

/* Sets huge_chunks, keeping its peak. */
static void set_huge_chunks(size_t n, uint64_t now)
{
	__atomic_store_n(&huge_chunks, n, __ATOMIC_RELAXED);
	purge_horizon_peak(&huge_horizon, n, now);
}

/* Dirty free chunks of huge blocks kept at most (huge_decay_ms:auto): the
 * huge blocks' peak over the horizon less what they hold now, and for the
 * runs a bigger block cannot use whole (it takes fresh chunks beside dirty
 * ones) up to 1/HUGE_KEEP_SLACK of the peak, as long as huge blocks took
 * that many chunks within the horizon (so an idle program keeps none).
 * build/bench/large_churn -n 2000 -k 20 -s 5m-25m: 42 k faults without the
 * slack, 14-16 k with 1/8, 9.8 k with 1/4 (every chunk held a decay_ms
 * by age: 12.3 k). SIZE_MAX where chunks of huge blocks decay by age instead. */
#define HUGE_KEEP_SLACK 4

static size_t huge_keep(uint64_t now)
{
	if (!purge_huge_held())
		return SIZE_MAX;
	size_t peak = purge_horizon_peak(&huge_horizon, huge_chunks, now);
	size_t taken = purge_horizon_add(&huge_taken, 0, now);
	size_t slack = peak / HUGE_KEEP_SLACK < taken ? peak / HUGE_KEEP_SLACK : taken;
	return peak - huge_chunks + slack;
}

/* A huge block took a chunk it did not have: counted for huge_keep, and
 * as the cap's regret while it purged such chunks within decay_ms. */
static void huge_chunk_taken(uint64_t now)
{
	purge_horizon_add(&huge_taken, 1, now);
	if (capped_huge && purge_cap_regretted(capped_huge_stamp, now)) {
		purge_cap_regret(CHUNK_SIZE);
		capped_huge--;
	}
}

/* Whether dirty free chunk d is due at now, and when it is; hkeep: the
 * dirty chunks of huge blocks kept (huge_keep), taken: of those, how many
 * are already on their way out. */
static bool desc_expired(const chunk_desc_t *d, uint64_t now, size_t hkeep, size_t taken)
{
	if (d->size == LRU_HUGE && hkeep != SIZE_MAX)
		return lru_n[LRU_HUGE] - taken > hkeep;
	return purge_chunk_expired(d->dirty_ms, now, d->size == LRU_HUGE);
}

static uint64_t desc_due_at(const chunk_desc_t *d, size_t hkeep)
{
	if (d->size == LRU_HUGE && hkeep != SIZE_MAX)
		return lru_n[LRU_HUGE] > hkeep ? d->dirty_ms : purge_horizon_next(&huge_horizon);
	return purge_chunk_due_at(d->dirty_ms, d->size == LRU_HUGE);
}

/* The dirty free chunk due first (the head of one of the lists), or NULL. */
static chunk_desc_t *lru_first_due(size_t hkeep)
{
	chunk_desc_t *best = NULL;
	for (unsigned i = 0; i < NLRU; i++) {
		chunk_desc_t *d = list_first(&lru[i], chunk_desc_t, lru);
		if (d && (!best || desc_due_at(d, hkeep) < desc_due_at(best, hkeep)))
			best = d;
	}
	return best;
}

/* Sets the state of free chunk d, keeping the counts and the list. */
static void set_state(chunk_desc_t *d, uint8_t state, uint64_t now)
{
	ARENA_ASSERT(d->kind == CK_FREE && state <= MS_LAZY &&
		     (d->state != MS_DIRTY || dirty_chunks) &&
		     (d->state != MS_LAZY || lazy_chunks));
	if (d->state == MS_DIRTY)
		lru_remove(d), dirty_chunks--;
	else if (d->state == MS_LAZY)
		lazy_chunks--;
	d->state = state;
	if (state == MS_DIRTY)
		lru_append(d, now), dirty_chunks++;
	else if (state == MS_LAZY)
		lazy_chunks++;
}

static unsigned bin_of(size_t n)
{
	return 63u - (unsigned)__builtin_clzll((unsigned long long)n);
}

static region_t *region_of_desc(chunk_desc_t *d)
{
	return &regions[d->region];
}

static size_t desc_index(chunk_desc_t *d)
{
	return (size_t)(d - region_of_desc(d)->desc);
}

static void bin_insert(chunk_desc_t *head)
{
	list_push_front(&bins[bin_of(head->nchunks)], &head->bin_link);
}

static void bin_remove(chunk_desc_t *head)
{
	list_remove(&bins[bin_of(head->nchunks)], &head->bin_link);
}

/* Makes [first, first+n) of r one free run (its chunks already CK_FREE with
 * their zero flags set), merged with free neighbours, and bins it. */
static void run_insert(region_t *r, size_t first, size_t n)
{
	ARENA_ASSERT_LOCKED(&chunk_mtx);
	ARENA_ASSERT(n > 0 && first + n <= r->frontier && r->desc[first].kind == CK_FREE &&
		     r->desc[first + n - 1].kind == CK_FREE);
	if (first > 0 && r->desc[first - 1].kind == CK_FREE) {
		chunk_desc_t *tail = &r->desc[first - 1];
		size_t len = tail->nchunks;
		bin_remove(&r->desc[first - len]);
		first -= len;
		n += len;
	}
	size_t next = first + n;
	if (next < r->frontier && r->desc[next].kind == CK_FREE) {
		size_t len = r->desc[next].nchunks;
		bin_remove(&r->desc[next]);
		n += len;
	}
	r->desc[first].nchunks = (uint32_t)n;
	r->desc[first + n - 1].nchunks = (uint32_t)n;
	bin_insert(&r->desc[first]);
}

/* purged_ms: when the chunks were purged (a state other than dirty; 0 if
 * they never held pages, or their pages moved away): see mark_used. */
static void mark_free(region_t *r, size_t first, size_t n, uint8_t state, uint64_t purged_ms)
{
	uint64_t now = state == MS_DIRTY ? os_now_ms() : 0;
	ARENA_ASSERT(n > 0 && first + n <= r->frontier);
	for (size_t i = first; i < first + n; i++) {
		chunk_desc_t *d = &r->desc[i];
		ARENA_ASSERT(d->kind != CK_FREE); /* in use, or (frontier_take's gap) unused */
		bool huge = is_huge_kind(d->kind);
		if (huge)
			set_huge_chunks(huge_chunks - 1, now ? now : os_now_ms());
		d->kind = CK_FREE;
		d->capped_ms = 0;
		d->size = huge ? LRU_HUGE : LRU_OTHER; /* which list, while free */
		d->state = MS_ZERO; /* counted as neither dirty nor lazy yet */
		set_state(d, state, now);
		if (state != MS_DIRTY)
			d->dirty_ms = purged_ms;
	}
	free_chunks += n;
}

/* A huge block's chunk held dirty by huge_decay_ms:auto and taken by an
 * arena: purged first.  Its pages may be a huge page, which a sparse arena
 * chunk would hold resident whole; purged at free, as until
 * huge_decay_ms:auto, it came back in 4 KiB pages. */
static void purge_for_arena(region_t *r, chunk_desc_t *d, uint64_t now)
{
	uint8_t state = os_purge(r->base + (desc_index(d) << CHUNK_SHIFT), CHUNK_SIZE, purge_advice());
	if (state != MS_DIRTY) {
		set_state(d, state, now);
		d->dirty_ms = now;
	}
}

/* Whether a free chunk's purged pages were a huge page: the guest's 2 MiB
 * block it gave back is one the next huge-page fault can take while the
 * host still backs it.  4 KiB pages given back rarely make up such a block
 * (a buffer grown again after a purge of its 4 KiB pages took 6-9 ms per
 * huge page).  A huge block's chunk advised huge had one; an arena chunk
 * advised huge once dense mostly kept its 4 KiB pages. */
static bool had_huge_pages(const chunk_desc_t *d)
{
	return d->size == LRU_HUGE &&
	       (d->advice == ADV_HUGE || (d->advice == ADV_NONE && os_thp == THP_SYS_ALWAYS));
}

/* Claims [first, first+n) out of free chunks: sets their kinds and returns
 * whether all of them were zero; *past (if not NULL): how many are fresh,
 * without pages the kernel still backs (never touched, or zero and not
 * purged by this layer as a huge page within PURGE_WARM_MS:
 * purge_chunk_warm; a free chunk's dirty_ms is when it was purged, once it
 * is not dirty; a lazy one's pages stay until the kernel reclaims them),
 * and whether the dirty cap purged one of them within decay_ms (its
 * regret). */
static bool mark_used(region_t *r, size_t first, size_t n, uint8_t kind, size_t size,
		      chunk_past_t *past)
{
	bool zero = true, regretted = false;
	size_t nfresh = 0;
	uint64_t now = os_now_ms();
	ARENA_ASSERT(kind == CK_ARENA || kind == CK_HUGE);
	for (size_t i = first; i < first + n; i++) {
		chunk_desc_t *d = &r->desc[i];
		/* free, never used, or (chunk_extend) the huge block's own */
		ARENA_ASSERT(d->kind == CK_FREE || d->kind == CK_UNUSED ||
			     (kind == CK_HUGE && is_huge_kind(d->kind)));
		if (d->kind == CK_FREE) {
			if (purge_cap_regretted(d->capped_ms, now)) {
				purge_cap_regret(CHUNK_SIZE);
				/* an arena's chunk born huge for it: not a huge
				 * block's, whose pages were never an arena's */
				regretted |= d->size == LRU_OTHER;
			}
			d->capped_ms = 0;
			free_chunks--;
			if (kind == CK_ARENA && d->state == MS_DIRTY && d->size == LRU_HUGE &&
			    purge_huge_held())
				purge_for_arena(r, d, now);
			zero &= d->state == MS_ZERO;
			if (d->state == MS_ZERO)
				nfresh += !purge_chunk_warm(d->dirty_ms, now) || !had_huge_pages(d);
			set_state(d, MS_ZERO, 0);
		}
		if (d->kind == CK_UNUSED) /* from the frontier: never touched */
			nfresh++;
		uint8_t was = d->kind;
		d->kind = i == first || kind == CK_ARENA ? kind : CK_HUGE_BODY;
		if (is_huge_kind(d->kind) != is_huge_kind(was)) {
			set_huge_chunks(huge_chunks + (is_huge_kind(was) ? -1 : 1), now);
			if (!is_huge_kind(was))
				huge_chunk_taken(now);
		}
		d->nchunks = (uint32_t)(i == first || kind == CK_ARENA ? n : i - first);
		d->size = i == first ? size : 0;
	}
	if (past)
		past->nfresh = nfresh, past->regretted = regretted;
	return zero;
}

/* Takes [start, start+n) out of the free run whose head is desc index head;
 * what is left on either side goes back to the bins. */
static void run_take(region_t *r, size_t head, size_t start, size_t n)
{
	size_t len = r->desc[head].nchunks;
	ARENA_ASSERT_LOCKED(&chunk_mtx);
	ARENA_ASSERT(r->desc[head].kind == CK_FREE && n > 0 && start >= head &&
		     start + n <= head + len);
	bin_remove(&r->desc[head]);
	if (start > head) {
		r->desc[head].nchunks = (uint32_t)(start - head);
		r->desc[start - 1].nchunks = (uint32_t)(start - head);
		bin_insert(&r->desc[head]);
	}
	size_t end = start + n, run_end = head + len;
	if (run_end > end) {
		r->desc[end].nchunks = (uint32_t)(run_end - end);
		r->desc[run_end - 1].nchunks = (uint32_t)(run_end - end);
		bin_insert(&r->desc[end]);
	}
}

/* First chunk index >= first in r whose address is aligned to align bytes. */
static size_t aligned_index(region_t *r, size_t first, size_t align)
{
	uintptr_t addr = (uintptr_t)r->base + (first << CHUNK_SHIFT);
	return (ALIGN_UP(addr, align) - (uintptr_t)r->base) >> CHUNK_SHIFT;
}

/* Set by frontier_take when the kernel refused to commit memory (the
 * commit limit): a new region would be refused the same, so none is made. */
START_UP static bool commit_refused;

/* Advances the frontier of r over n chunks aligned to align; the skipped
 * gap becomes a free (zero) run.  Returns the first index, or SIZE_MAX. */
static size_t frontier_take(region_t *r, size_t n, size_t align)
{
	ARENA_ASSERT_LOCKED(&chunk_mtx);
	ARENA_ASSERT(n > 0 && align >= CHUNK_SIZE && (align & (align - 1)) == 0);
	size_t start = aligned_index(r, r->frontier, align);
	if (start > r->nchunks || r->nchunks - start < n)
		return SIZE_MAX;
	/* Before commit_to writes the new chunks' descriptors: the collapse
	 * then gives them a huge page instead of a fault per 4 KiB page. */
	if (!r->desc_huge && start + n > DESC_HUGE_AFTER && thp_meta_huge()) {
		os_advise_meta_huge(r->desc, region_desc_bytes(r->nchunks));
		r->desc_huge = true;
	}
	if (!region_commit_to(r, start + n)) {
		commit_refused = true;
		return SIZE_MAX;
	}
	uint8_t ridx = (uint8_t)(r - regions);
	for (size_t i = r->frontier; i < start + n; i++)
		r->desc[i].region = ridx;
	size_t gap = r->frontier;
	r->frontier = start + n;
	if (start > gap) {
		mark_free(r, gap, start - gap, MS_ZERO, 0);
		run_insert(r, gap, start - gap);
	}
	return start;
}

/* A free run that holds n chunks aligned to align: region and start index.
 * Best fit: the shortest such run (the first of equal ones, i.e. the most
 * recently freed, whose pages are likeliest still resident).  Bin b holds
 * runs of 2^b to 2^(b+1) - 1 chunks, so the first bin with a fit holds the
 * best one.  First fit took long runs apart for short requests, and huge
 * blocks then found no run and pushed the frontier: bench/soak -d 600 -p 60
 * side by side, mapped grew 1382 -> 1650 MiB over 10 cycles with first fit
 * and stayed at 1436 MiB from the first cycle on with best fit. */
static bool bins_find_fit(size_t n, size_t align, region_t **rp, size_t *headp, size_t *startp)
{
	chunk_desc_t *best = NULL;
	for (unsigned b = bin_of(n); b < NBINS && !best; b++) {
		list_for_each(d, &bins[b], chunk_desc_t, bin_link) {
			region_t *r = region_of_desc(d);
			size_t head = desc_index(d);
			size_t start = aligned_index(r, head, align);
			if (start + n > head + d->nchunks || (best && d->nchunks >= best->nchunks))
				continue;
			best = d, *rp = r, *headp = head, *startp = start;
			if (d->nchunks == n)
				break;
		}
	}
	return best != NULL;
}

/* Chunks of [start, start+n) in r that are not zero (dirty or lazy). */
static size_t backed_in(const region_t *r, size_t start, size_t n)
{
	size_t k = 0;
	for (size_t i = start; i < start + n; i++)
		k += r->desc[i].state != MS_ZERO;
	return k;
}

/* A free run and the place in it for n chunks aligned to align, as
 * bins_find_fit, but the place that holds the most dirty (or lazy) chunks
 * first: backed memory taken again costs no fault and leaves the RSS, where
 * a zero chunk taken beside it faults in a new page and the dirty one waits
 * for its purge.  Ties: the shortest run, then the one listed first, then
 * the first place in it.  It walks every free run that fits, under the
 * chunk lock (a few hundred descriptors: huge blocks and arena chunks are
 * taken a few hundred times a second at most); with nothing dirty it is
 * best fit.  A huge block (growable) goes inside a run only where every
 * chunk is backed: elsewhere at the run's start, with room to grow in
 * place (realloc growth over passes: one dirty chunk left at the end of a
 * freed run drew the next pass's block there, which then grew into fresh
 * chunks at the frontier, 1 GiB more mapped each pass). */
static bool bins_find(size_t n, size_t align, bool growable, region_t **rp, size_t *headp,
		      size_t *startp)
{
	if (dirty_chunks + lazy_chunks == 0)
		return bins_find_fit(n, align, rp, headp, startp);
	chunk_desc_t *best = NULL;
	size_t best_backed = 0, step = align >> CHUNK_SHIFT;
	for (unsigned b = bin_of(n); b < NBINS; b++) {
		/* A longer run (a later bin) cannot beat a place wholly backed. */
		if (best && best_backed == n)
			break;
		list_for_each(d, &bins[b], chunk_desc_t, bin_link) {
			region_t *r = region_of_desc(d);
			size_t head = desc_index(d), end = head + d->nchunks;
			size_t first = aligned_index(r, head, align), k = 0;
			for (size_t start = first; start + n <= end; start += step) {
				/* One step on: the window gains a chunk and loses one. */
				if (step == 1 && start > first)
					k += (size_t)(r->desc[start + n - 1].state != MS_ZERO) -
					     (size_t)(r->desc[start - 1].state != MS_ZERO);
				else
					k = backed_in(r, start, n);
				if (best && (k < best_backed ||
					     (k == best_backed && d->nchunks >= best->nchunks)))
					continue;
				if (growable && start > first && k < n)
					continue; /* room to grow after it: a run's start */
				best = d, best_backed = k, *rp = r, *headp = head, *startp = start;
			}
		}
	}
	return best != NULL;
}

/* After a refused move, the k chunks at dst may have lost their mapping:
 * mremap unmaps the destination before it moves and can fail after that
 * (usually it refuses before, e.g. near vm.max_map_count, and dst is
 * intact).  Maps afresh each chunk that has a hole, so the region has none
 * another mmap could take; a fresh mapping at a hole needs no split, so it
 * fits where the move did not. */
void chunk_fill_holes(char *dst, size_t k)
{
	chunk_desc_t *t = chunk_desc_of(dst);
	for (size_t i = 0; i < k; i++) {
		char *c = dst + (i << CHUNK_SHIFT);
		if (os_is_mapped(c, CHUNK_SIZE))
			continue;
		if (!os_map_fixed(c, CHUNK_SIZE))
			out_fatal("cannot map %p again after a failed mremap (errno %d)\n",
				  (void *)c, errno);
		t[i].map_tag = region_new_tag();
		t[i].advice = ADV_NONE;
	}
}

/* Whether chunk e, about to be taken, has no pages: never used or purged. */
static bool place_zero(const chunk_desc_t *e)
{
	return e->kind == CK_UNUSED || (e->kind == CK_FREE && e->state == MS_ZERO);
}

/* The oldest dirty free chunk of a huge block outside [start, start+n) of r. */
static chunk_desc_t *dirty_outside(const region_t *r, size_t start, size_t n)
{
	list_for_each(d, &lru[LRU_HUGE], chunk_desc_t, lru) {
		size_t i = desc_index(d);
		if (region_of_desc(d) != r || i < start || i >= start + n)
			return d;
	}
	return NULL;
}

/* Past this many chunks committed in all regions (8 GiB) assemble stops:
 * each chunk moved into may stay a mapping of its own, and vm.max_map_count
 * (65,530 by default) is the whole process's. */
#define ASSEMBLE_MAX_CHUNKS ((size_t)4096)

/* Set by a refused move (near vm.max_map_count, or a source chunk the
 * program split into several mappings): fresh chunks fault as before. */
static bool assemble_refused;

static size_t chunks_committed(void)
{
	size_t n = 0;
	unsigned nr = atomic_load_explicit(&nregions, memory_order_relaxed);
	for (unsigned i = 0; i < nr; i++)
		n += regions[i].frontier;
	return n;
}

/* Whether a huge block's fresh chunks fault in 4 KiB pages (thp.c's
 * advice, or no huge pages from the kernel at all). */
static bool fresh_in_small_pages(void)
{
	return os_thp == THP_SYS_NONE || os_thp == THP_SYS_NEVER ||
	       thp_huge_block_advice(CHUNK_PAGES, true) != ADV_HUGE;
}

/* A huge block's place [start, start+n) of r (committed, not yet taken)
 * gets, in each of its chunks without pages, the pages of a dirty free
 * chunk of a huge block from elsewhere, moved by mremap (the source reads
 * zero after it), when there are enough for all of them: the place's
 * memory is then the program's freed memory, wherever it lay.  Random
 * sizes leave the dirty chunks in runs too short for the next block:
 * build/bench/large_churn -n 2000 -k 20 -s 5m-25m held 239 fresh chunks
 * for the 195 it ever had live at once.  Only where fresh chunks fault in
 * 4 KiB pages: a move (one mremap of the chunk's page table, 10-33 us,
 * build/bench/probes/remap_cost) then saves 512 faults; in a huge page it
 * would save one.  Returns the chunks moved. */
static size_t assemble(region_t *r, size_t start, size_t n)
{
	size_t nzero = 0, inside = 0, moved = 0;
	if (!os_has_dontunmap || assemble_refused || !fresh_in_small_pages() ||
	    chunks_committed() > ASSEMBLE_MAX_CHUNKS)
		return 0;
	for (size_t i = start; i < start + n; i++) {
		const chunk_desc_t *e = &r->desc[i];
		nzero += place_zero(e);
		inside += e->kind == CK_FREE && e->state == MS_DIRTY && e->size == LRU_HUGE;
	}
	if (nzero == 0 || nzero > lru_n[LRU_HUGE] - inside)
		return 0;
	for (size_t i = start; i < start + n; i++) {
		chunk_desc_t *t = &r->desc[i], *d;
		if (!place_zero(t) || !(d = dirty_outside(r, start, n)))
			continue;
		char *src = region_of_desc(d)->base + (desc_index(d) << CHUNK_SHIFT);
		char *dst = r->base + (i << CHUNK_SHIFT);
		if (!os_move_pages(src, dst, CHUNK_SIZE)) {
			assemble_refused = true;
			chunk_fill_holes(dst, 1); /* t keeps no pages: still zero */
			break;
		}
		/* the pages' mapping and advice moved; both are mappings of their own */
		t->advice = d->advice;
		t->map_tag = region_new_tag();
		d->map_tag = region_new_tag();
		set_state(d, MS_ZERO, 0);
		d->dirty_ms = 0;
		moved++;
	}
	return moved;
}

static void *alloc_locked(size_t n, size_t align, uint8_t kind, size_t size, bool *zero,
			  chunk_past_t *past)
{
	ARENA_ASSERT_LOCKED(&chunk_mtx);
	region_t *r = NULL;
	size_t head = 0, start = 0;
	if (bins_find(n, align, kind != CK_ARENA, &r, &head, &start)) {
		run_take(r, head, start, n);
	} else {
		unsigned nr = atomic_load_explicit(&nregions, memory_order_relaxed);
		start = SIZE_MAX;
		commit_refused = false;
		for (unsigned i = 0; i < nr && start == SIZE_MAX; i++)
			start = frontier_take(r = &regions[i], n, align);
		/* Out of address space in every region: another; out of memory
		 * the kernel will commit: not (each refused commit reserved a
		 * new 64 GiB region and its tables, up to MAX_REGIONS). */
		if (start == SIZE_MAX && commit_refused)
			return NULL;
		if (start == SIZE_MAX) {
			size_t need = n + (align >> CHUNK_SHIFT);
			if (!region_new(need))
				return NULL;
			r = &regions[atomic_load_explicit(&nregions, memory_order_relaxed) - 1];
			if ((start = frontier_take(r, n, align)) == SIZE_MAX)
				return NULL;
		}
	}
	size_t moved = past && past->fill ? assemble(r, start, n) : 0;
	*zero = mark_used(r, start, n, kind, size, past) && !moved;
	if (moved && !assemble_refused) /* every chunk without pages took some */
		past->nfresh = 0;
	return r->base + (start << CHUNK_SHIFT);
}

/* Purges dirty free chunks, the one due first first: every one that has
 * been dirty for huge_decay_ms (chunks of huge blocks) or decay_ms (the
 * others), and more while more than keep are dirty (the dirty cap,
 * purge.c; SIZE_MAX: no cap).  Neighbours that go together share one
 * madvise of up to DECAY_BATCH chunks.  Under the chunk lock: a large
 * expiry (1 GiB of 4 KiB pages: ~100 ms; of huge pages: ~3 ms) holds it
 * that long, once.  Returns when the oldest chunk left dirty is due
 * (purge_chunk_due_at), UINT64_MAX if none. */
static uint64_t decay_locked(uint64_t now, size_t keep)
{
	ARENA_ASSERT_LOCKED(&chunk_mtx);
	chunk_desc_t *d;
	size_t hkeep = huge_keep(now);
	while ((d = lru_first_due(hkeep))) {
		bool over = dirty_chunks > keep;
		if (!over && !desc_expired(d, now, hkeep, 0))
			return desc_due_at(d, hkeep);
		region_t *r = region_of_desc(d);
		size_t first = desc_index(d), n = 1, nhuge = d->size == LRU_HUGE;
		while (n < DECAY_BATCH && first + n < r->frontier) {
			chunk_desc_t *e = &r->desc[first + n];
			if (e->kind != CK_FREE || e->state != MS_DIRTY ||
			    (!desc_expired(e, now, hkeep, nhuge) && dirty_chunks - n <= keep))
				break;
			nhuge += e->size == LRU_HUGE;
			n++;
		}
		uint8_t state = os_purge(r->base + (first << CHUNK_SHIFT), n << CHUNK_SHIFT,
					 purge_advice());
		if (state == MS_DIRTY) /* madvise failed: leave them dirty */
			return UINT64_MAX;
		for (size_t i = first; i < first + n; i++) {
			chunk_desc_t *e = &r->desc[i];
			/* purged before it was due: the cap's doing */
			bool early = !desc_expired(e, now, hkeep, 0);
			e->capped_ms = early && e->size == LRU_OTHER ? purge_cap_stamp(now) : 0;
			if (early && e->size == LRU_HUGE) {
				capped_huge++;
				capped_huge_stamp = purge_cap_stamp(now);
			}
			set_state(e, state, now);
			e->dirty_ms = now; /* purged: warm for a while (mark_used) */
		}
	}
	return UINT64_MAX;
}

/* Decay in the paths that take and give back chunks: a step, or where the
 * background thread purges (purge_deferred) a word to it when a chunk is
 * due now (a huge block's, past the working set) rather than a purge. */
static void decay_here(uint64_t now)
{
	ARENA_ASSERT_LOCKED(&chunk_mtx);
	if (!purge_deferred()) {
		decay_locked(now, SIZE_MAX);
		return;
	}
	size_t hkeep = huge_keep(now);
	chunk_desc_t *d = lru_first_due(hkeep);
	if (d && desc_expired(d, now, hkeep, 0))
		purge_note_due();
}

/* One decay step now (the background thread, and the allocation paths);
 * returns when the next dirty chunk is due, UINT64_MAX if none is dirty. */
uint64_t chunk_decay(void)
{
	mutex_lock(&chunk_mtx);
	uint64_t next = decay_locked(os_now_ms(), SIZE_MAX);
	ARENA_ASSERT(chunk_validate_runs());
	mutex_unlock(&chunk_mtx);
	return next;
}

/* Purges the oldest dirty free chunks, due or not, until at most keep_bytes
 * of them are left dirty (the dirty cap, purge.c). */
void chunk_trim_dirty(size_t keep_bytes)
{
	mutex_lock(&chunk_mtx);
	decay_locked(os_now_ms(), keep_bytes >> CHUNK_SHIFT);
	ARENA_ASSERT(chunk_validate_runs());
	mutex_unlock(&chunk_mtx);
}

/* Bytes of dirty free chunks, and of chunks held by huge blocks: read
 * without the lock (the dirty cap's check on free paths; a stale figure
 * only moves a purge by one call). */
size_t chunk_dirty_bytes(void)
{
	return __atomic_load_n(&dirty_chunks, __ATOMIC_RELAXED) << CHUNK_SHIFT;
}

size_t chunk_huge_bytes(void)
{
	return __atomic_load_n(&huge_chunks, __ATOMIC_RELAXED) << CHUNK_SHIFT;
}

/* n chunks aligned to align bytes (a power of two >= CHUNK_SIZE), given the
 * kind (CK_ARENA or CK_HUGE) and, for huge blocks, the usable size.  *zero
 * tells whether all the memory is known to be zero.  NULL with ENOMEM. */
static void *alloc_chunks(size_t n, size_t align, uint8_t kind, size_t size, bool *zero,
			  chunk_past_t *past)
{
	ARENA_ASSERT(n > 0 && (kind == CK_ARENA || kind == CK_HUGE));
	mutex_lock(&chunk_mtx);
	void *p = alloc_locked(n, align, kind, size, zero, past);
	decay_here(os_now_ms());
	ARENA_ASSERT(chunk_validate_runs());
	mutex_unlock(&chunk_mtx);
	if (!p)
		errno = ENOMEM;
	return p;
}

void *chunk_alloc(size_t n, size_t align, uint8_t kind, size_t size, bool *zero)
{
	return alloc_chunks(n, align, kind, size, zero, NULL);
}

/* An arena's chunk (as chunk_alloc); *regretted: the dirty cap purged it
 * and it is taken again within decay_ms, the heap growing back to where it
 * just was (arena.c advises such a chunk huge at birth). */
void *chunk_alloc_arena(bool *zero, bool *regretted)
{
	chunk_past_t past = { 0 };
	void *p = alloc_chunks(1, CHUNK_SIZE, CK_ARENA, 0, zero, &past);
	*regretted = p && past.regretted;
	return p;
}

/* Collapses the arena chunk at base, advised huge, into one huge page now
 * (os_collapse): its pages not present are filled with zeros.  false where
 * the kernel would not (the advice stays). */
bool chunk_collapse(void *base)
{
	return os_collapse(base, CHUNK_SIZE);
}

/* The free chunk an arena gave back dirty longest ago (the first due of
 * the non-huge decay list), for kind; NULL (errno untouched) if there is
 * none.  An arena about to fault in zero pages of its own takes it instead
 * (arena.c, backed_instead).  Huge blocks' dirty chunks are left to their
 * own decay (huge_decay_ms, which tests and users set apart). */
void *chunk_alloc_dirty(uint8_t kind)
{
	void *p = NULL;
	mutex_lock(&chunk_mtx);
	chunk_desc_t *d = list_first(&lru[LRU_OTHER], chunk_desc_t, lru);
	if (d) {
		region_t *r = region_of_desc(d);
		size_t at = desc_index(d), head = at;
		while (head > 0 && r->desc[head - 1].kind == CK_FREE) /* runs are maximal */
			head--;
		run_take(r, head, at, 1);
		mark_used(r, at, 1, kind, 0, NULL);
		p = r->base + (at << CHUNK_SHIFT);
	}
	ARENA_ASSERT(chunk_validate_runs());
	mutex_unlock(&chunk_mtx);
	return p;
}

/* A huge block's n chunks (as chunk_alloc); *nfresh: how many of them have
 * no pages the kernel still backs (mark_used), for the huge-page
 * decision.  fill: its zero chunks may take freed pages (assemble); not
 * for calloc, which would then clear them, nor a move's, whose old pages
 * land there. */
void *chunk_alloc_huge(size_t n, size_t align, size_t size, bool fill, bool *zero, size_t *nfresh)
{
	chunk_past_t past = { .fill = fill };
	void *p = alloc_chunks(n, align, CK_HUGE, size, zero, &past);
	*nfresh = past.nfresh;
	return p;
}

/* Gives back n chunks at base, which hold memory in the given state
 * (purged_ms: as mark_free). */
static void free_run(void *base, size_t n, uint8_t state, uint64_t purged_ms)
{
	chunk_desc_t *d = chunk_desc_of(base);
	ARENA_ASSERT(d && n > 0 && ((uintptr_t)base & CHUNK_MASK) == 0);
	region_t *r = region_of_desc(d);
	size_t first = desc_index(d);
	mutex_lock(&chunk_mtx);
	mark_free(r, first, n, state, purged_ms);
	run_insert(r, first, n);
	decay_here(os_now_ms());
	ARENA_ASSERT(chunk_validate_runs());
	mutex_unlock(&chunk_mtx);
}

/* Gives back n chunks at base whose pages an mremap moved away: they read
 * zero, and are not warm (chunk_map.c's chunk_map_move). */
void chunk_free_moved(void *base, size_t n)
{
	free_run(base, n, MS_ZERO, 0);
}

/* Gives back n chunks at base, dirty.  With decay_ms:0 (for chunks of a
 * huge block: huge_decay_ms:0) they are purged first, before they are visible as free (so no other
 * thread can be handed them while madvise runs). */
void chunk_free(void *base, size_t n)
{
	uint8_t state = MS_DIRTY;
	if (purge_chunk_at_free(is_huge_kind(chunk_desc_of(base)->kind)))
		state = os_purge(base, n << CHUNK_SHIFT, purge_advice());
	free_run(base, n, state, state == MS_DIRTY ? 0 : os_now_ms());
}

/* The kind of guard page (enum guard_kind) after the huge block at base
 * (huge.c): kept in its head descriptor's capped_ms, which only free
 * chunks use otherwise (mark_free and mark_used clear it).  Its owner's
 * alone while it lives. */
void chunk_set_guard(void *base, uint8_t kind)
{
	chunk_desc_of(base)->capped_ms = kind;
}

uint8_t chunk_guard(const void *base)
{
	return (uint8_t)chunk_desc_of(base)->capped_ms;
}

/* Grows the huge block at base from old_n to new_n chunks in place when the
 * chunks after it are free (or unused, at the frontier); *nfresh: as
 * chunk_alloc_huge's, of the chunks it grew into. */
bool chunk_extend(void *base, size_t old_n, size_t new_n, size_t size, size_t *nfresh)
{
	chunk_desc_t *d = chunk_desc_of(base);
	region_t *r = region_of_desc(d);
	size_t first = desc_index(d), next = first + old_n, need = new_n - old_n;
	bool ok = false;
	ARENA_ASSERT(new_n > old_n && d->kind == CK_HUGE && d->nchunks == old_n);
	mutex_lock(&chunk_mtx);
	if (next < r->frontier) {
		chunk_desc_t *n = &r->desc[next];
		if (n->kind == CK_FREE && n->nchunks >= need) {
			run_take(r, next, next, need);
			ok = true;
		}
	} else if (next == r->frontier) {
		ok = frontier_take(r, need, CHUNK_SIZE) == next;
	}
	chunk_past_t past = { 0 };
	if (ok) { /* the block's own chunks: neither free nor unused */
		mark_used(r, first, new_n, CK_HUGE, size, &past);
		*nfresh = past.nfresh;
	}
	ARENA_ASSERT(chunk_validate_runs());
	mutex_unlock(&chunk_mtx);
	return ok;
}

/* Shrinks the huge block at base from old_n to new_n chunks (new_n >= 1). */
void chunk_shrink(void *base, size_t old_n, size_t new_n, size_t size)
{
	chunk_desc_t *d = chunk_desc_of(base);
	ARENA_ASSERT(new_n >= 1 && new_n <= old_n && d->kind == CK_HUGE && d->nchunks == old_n);
	mutex_lock(&chunk_mtx);
	d->nchunks = (uint32_t)new_n;
	d->size = size;
	mutex_unlock(&chunk_mtx);
	if (old_n > new_n)
		chunk_free((char *)base + (new_n << CHUNK_SHIFT), old_n - new_n);
}

/* Purges every dirty or lazy free chunk with MADV_DONTNEED, whatever the
 * purge kind (malloc_trim: RSS drops now); returns bytes purged. */
size_t chunk_purge_all(void)
{
	size_t purged = 0;
	mutex_lock(&chunk_mtx);
	for (unsigned b = 0; b < NBINS; b++) {
		list_for_each(d, &bins[b], chunk_desc_t, bin_link) {
			region_t *r = region_of_desc(d);
			size_t head = desc_index(d);
			for (size_t i = head; i < head + d->nchunks; i++) {
				if (r->desc[i].state == MS_ZERO)
					continue;
				size_t j = i;
				while (j < head + d->nchunks && r->desc[j].state != MS_ZERO)
					j++;
				if (os_purge_dontneed(r->base + (i << CHUNK_SHIFT), (j - i) << CHUNK_SHIFT)) {
					region_purge_hdrs(r, i, j - i);
					for (size_t k = i; k < j; k++) {
						set_state(&r->desc[k], MS_ZERO, 0);
						r->desc[k].dirty_ms = os_now_ms();
					}
					purged += (j - i) << CHUNK_SHIFT;
				}
				i = j;
			}
		}
	}
	ARENA_ASSERT(chunk_validate_runs());
	mutex_unlock(&chunk_mtx);
	return purged;
}

void chunk_stats(size_t *mapped, size_t *reserved, size_t *nfree, size_t *dirty, size_t *lazy)
{
	mutex_lock(&chunk_mtx);
	*mapped = *reserved = 0;
	unsigned nr = atomic_load_explicit(&nregions, memory_order_relaxed);
	for (unsigned i = 0; i < nr; i++) {
		*mapped += regions[i].frontier << CHUNK_SHIFT;
		*reserved += regions[i].nchunks << CHUNK_SHIFT;
	}
	*nfree = free_chunks;
	*dirty = dirty_chunks << CHUNK_SHIFT;
	*lazy = lazy_chunks << CHUNK_SHIFT;
	mutex_unlock(&chunk_mtx);
}

/* Reserves the first region (if the kernel refuses, allocations try again
 * and fail with ENOMEM). */
void chunk_init(void)
{
	mutex_lock(&chunk_mtx);
	/* An add of 0, not a load: the first touch of nregions' page (.bss,
	 * with regions[0]) is then a write, one page fault; a read first maps
	 * the zero page and region_new's write faults again (a fresh process's
	 * first calloc counts both: test_pages wants fewer than 10). */
	if (atomic_fetch_add_explicit(&nregions, 0, memory_order_relaxed) == 0)
		region_new(1);
	mutex_unlock(&chunk_mtx);
}

void chunk_lock_all(void) { mutex_lock(&chunk_mtx); }
void chunk_unlock_all(void) { mutex_unlock(&chunk_mtx); }

#ifdef ARENA_DEBUG
static bool chunk_bad(const char *what, const void *at, size_t v)
{
	out_printf("libarena: chunk_validate_runs: %s: %p (%zu)\n", what, at, v);
	return false;
}

/* Whether the chunk layer is consistent.  In every region, below its
 * frontier (committed): free runs, arena chunks and huge blocks (a head of
 * n chunks, then n - 1 bodies counting back to it), nothing unused; a free
 * run is maximal (no free chunk before it), its first and last descriptors
 * hold its length, its chunks are free, each dirty, zero or lazy; each run's
 * head is on the bin of its length, and nothing else is on a bin; the dirty
 * free chunks are those on the decay lists, on the one of what they held,
 * oldest first; and free_chunks, dirty_chunks, lazy_chunks and huge_chunks
 * are the counts.  (Bodies past a head's length are a huge block's chunks
 * on their way back: a tail that chunk_shrink gives back, the rest of a block
 * that chunk_move frees a mapping at a time.) */
bool chunk_validate_runs(void)
{
	ARENA_ASSERT_LOCKED(&chunk_mtx);
	size_t nfree = 0, ndirty = 0, nlazy = 0, nhuge = 0, nruns = 0, nbinned = 0, nlru = 0;
	unsigned nr = atomic_load_explicit(&nregions, memory_order_relaxed);
	for (unsigned ri = 0; ri < nr; ri++) {
		const region_t *r = &regions[ri];
		const chunk_desc_t *t = r->desc;
		if (r->frontier > r->committed || r->committed > r->nchunks)
			return chunk_bad("a region's frontier past its commit", r->base,
					 r->frontier);
		for (size_t i = 0, n; i < r->frontier; i += n) {
			const chunk_desc_t *d = &t[i];
			n = d->nchunks;
			if (d->region != ri)
				return chunk_bad("a chunk's region", d, d->region);
			if (d->kind == CK_FREE) {
				if (n == 0 || n > r->frontier - i || t[i + n - 1].nchunks != n)
					return chunk_bad("a free run's length at its ends", d, n);
				if (i > 0 && t[i - 1].kind == CK_FREE)
					return chunk_bad("a free run after a free chunk", d, n);
				for (size_t j = i; j < i + n; j++) {
					if (t[j].kind != CK_FREE || t[j].state > MS_LAZY ||
					    t[j].size > LRU_HUGE)
						return chunk_bad("a chunk of a free run", &t[j],
								 t[j].kind);
					ndirty += t[j].state == MS_DIRTY;
					nlazy += t[j].state == MS_LAZY;
				}
				nfree += n;
				nruns++;
			} else if (d->kind == CK_ARENA) {
				if (n == 0)
					return chunk_bad("an arena chunk's length", d, n);
				n = 1;
			} else if (d->kind == CK_HUGE) {
				if (n == 0 || n > r->frontier - i)
					return chunk_bad("a huge block's length", d, n);
				for (size_t j = 1; j < n; j++)
					if (t[i + j].kind != CK_HUGE_BODY || t[i + j].nchunks != j)
						return chunk_bad("a huge block's body", &t[i + j],
								 j);
				nhuge += n;
			} else if (d->kind == CK_HUGE_BODY && n > 0 && n <= i) {
				nhuge++; /* past its head's length: on its way back */
				n = 1;
			} else {
				return chunk_bad("a chunk below the frontier of no run", d,
						 d->kind);
			}
		}
	}
	for (unsigned b = 0; b < NBINS; b++) {
		list_for_each(d, &bins[b], chunk_desc_t, bin_link) {
			size_t head = desc_index(d);
			if (d->kind != CK_FREE || bin_of(d->nchunks) != b ||
			    (head > 0 && region_of_desc(d)->desc[head - 1].kind == CK_FREE))
				return chunk_bad("a bin's entry, not a free run's head of its"
						 " length", d, b);
			nbinned++;
		}
	}
	if (nbinned != nruns)
		return chunk_bad("free runs binned, not all of them", NULL, nbinned);
	for (unsigned l = 0; l < NLRU; l++) {
		uint64_t last = 0;
		list_for_each(d, &lru[l], chunk_desc_t, lru) {
			if (d->kind != CK_FREE || d->state != MS_DIRTY || d->size != l ||
			    d->dirty_ms < last)
				return chunk_bad("a decay list's entry, not dirty and free in"
						 " order", d, l);
			last = d->dirty_ms;
			nlru++;
		}
	}
	if (nfree != free_chunks)
		return chunk_bad("free_chunks, not the free runs' chunks", NULL, free_chunks);
	if (ndirty != dirty_chunks || nlru != ndirty)
		return chunk_bad("dirty_chunks, not the dirty free chunks (or those listed)", NULL,
				 dirty_chunks);
	if (nlazy != lazy_chunks)
		return chunk_bad("lazy_chunks, not the lazy free chunks", NULL, lazy_chunks);
	if (nhuge != huge_chunks)
		return chunk_bad("huge_chunks, not the huge blocks' chunks", NULL, huge_chunks);
	return true;
}
#endif
