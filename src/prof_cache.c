/* The thread caches with heap profiles on (ARENA_CONF=prof:true;
 * docs/design.md "Heap profiles"): every allocation of a cached class is
 * counted against its class's sampling process with no test on malloc's
 * fast path, and frees keep free's fast path.
 *
 * A thread's list of a class (tc.bins[c], which malloc's fast path pops)
 * holds only blocks already counted ("prepaid"): at most as many as come
 * before the class's next sampling point, so that the malloc that reaches
 * the point finds the list empty and comes here, which samples it.  Frees
 * never push onto it: with prof on, slabs' page-table words carry
 * PROF_FREED_OFF (slab_entry), so free's fast path, the same instructions,
 * pushes onto tc.freed[c], a second list malloc does not pop.  A miss of
 * malloc's list takes the freed list whole (prof_cache_miss) when it fits
 * before the sampling point, else as many of its blocks as fit.  Each list
 * holds at most max blocks (the freed list's max follows the list's:
 * grant).
 *
 * A sampled block's free must remove its record, so the fast path must not
 * take it: while it lives, the word of the page it starts in carries
 * PROF_SAMPLED_BIT, whose check passes nothing, and every free of a block
 * starting in that page comes to prof_cache_free_near (from api.c's
 * free_other), which removes the record if the block filter says there may
 * be one, and pushes the block onto the freed list.  The bit goes once no
 * sampled block may start in the page (prof_filter is by page).  prof.c
 * sets and clears it under prof_mtx with the records' changes, so a free
 * never gives the fast path back a page whose sampled block lives.  The
 * slab cannot be unmade meanwhile: the block being sampled or freed is
 * live.  About 0.8% of pages at the default rate (4 KiB / 512 KiB) hold a
 * sampled block. */
#include "internal.h"

/* tc.freed[c].prof_left: blocks of class c this thread may still allocate
 * before the one that holds its next sampling point, less the blocks in
 * its list (tc.bins[c]).  An interval of X bytes (exponential) puts the
 * point in block floor(X / size) + 1 from here; after a sampled block, a
 * new interval starts at its end (the process is memoryless).  Kept in
 * the freed list's bin (its nmalloc, unused there), so that malloc's miss
 * finds it beside the list it takes. */
static _Thread_local bool prof_ready __attribute__((tls_model("initial-exec")));

static size_t *nleft(unsigned sclass)
{
	return &tc.freed[sclass].prof_left;
}

static size_t prof_blocks(unsigned sclass)
{
	return prof_draw() / class_size[sclass];
}

static void prof_start(void)
{
	for (unsigned c = 0; c < NCACHED; c++)
		*nleft(c) = prof_blocks(c);
	prof_ready = true;
}

/* The freed list f may hold as many as malloc's list b (its max, which
 * grows); f's length (max - room) is kept. */
static void grant(tbin_t *b, tbin_t *f)
{
	f->room += (int32_t)(b->max - f->max);
	f->max = b->max;
}

/* ---- the page words of sampled blocks ----------------------------------- */

static uint64_t *page_word(const void *p)
{
	/* region 0 first, as chunk_desc_of: realloc's frees come here for
	 * every block (prof_cache_free; sqlite3 under callgrind: 13
	 * instructions a call through the chunk's descriptor, 3.5 M in all) */
	size_t off = (size_t)((uintptr_t)p - (uintptr_t)regions[0].base);
	if (likely(off < regions[0].size))
		return &regions[0].ptab[off >> PAGE_SHIFT];
	const region_t *r = &regions[chunk_desc_of(p)->region];
	return &r->ptab[(size_t)((const char *)p - r->base) >> PAGE_SHIFT];
}

/* p, a block of sclass, was sampled (not handed out yet): its record, and
 * for a slab block PROF_SAMPLED_BIT in its page's word, so that frees of
 * the blocks that start in that page leave the fast path while it lives. */
static inline __attribute__((always_inline)) void *sampled(void *p, unsigned sclass)
{
	/* the stack taken here, in malloc's miss (miss_slow, cache_alloc
	 * inlined): the only frame of libarena's the walk goes through */
	if (prof_take()) {
		uintptr_t pcs[PROF_FRAMES];
		uint64_t tag;
		unsigned n = prof_stack_backtrace_tagged(pcs, PROF_FRAMES, &tag);
		prof_record(p, class_size[sclass], sclass < NSMALL ? page_word(p) : NULL, pcs, n, tag);
	}
	return p;
}

/* p, a live block of sclass being freed: its record goes, and for a slab
 * block its page's word loses PROF_SAMPLED_BIT once no sampled block may
 * start in the page. */
static void unsampled(void *p, unsigned sclass)
{
	prof_free_page(p, sclass < NSMALL ? page_word(p) : NULL);
}

/* ---- grown lists given back after a new chunk --------------------------------
 * The cache's GC (tcache.c) does not run with profiling on: its looks are
 * in the plain slow paths, which prof's misses do not take, and its clock
 * looks would cost every prof slow path.  But without its look after a new
 * chunk (gc_grown), lists grown for one phase of a program kept their
 * blocks and the thread's grow budget (4 MiB) for good, and the lists of
 * the next phase could not grow: glibc_simple's sizes in one process (16 B
 * to 4 KiB, -s 16,256,1024,4096), 98.3 instructions a malloc+free against
 * 80.5 without profiles (98.3 too with tcache_gc:false).  So the same
 * look, at prof's refills: every GC_EVERY_REFILLS, the lists grown since
 * their last shrink are sampled (grown: those tcache_grow was called for),
 * and after a refill that made the arena take a new chunk (tc.gc_fresh)
 * the next two samples give back the lists no malloc took from since the
 * sample before, down to their first size: malloc's list (its blocks were
 * counted: the countdown gets them back) and the freed list, and their
 * bytes go back to the thread's budget. */
#define GC_EVERY_REFILLS 8u

/* A bit per cached class (NCACHED: 66 since the classes 960 and 8704). */
#define GROWN_WORDS ((NCACHED + 63) / 64)
static _Thread_local uint64_t grown[GROWN_WORDS] __attribute__((tls_model("initial-exec")));

static bool any_grown(void)
{
	uint64_t any = 0;
	for (unsigned w = 0; w < GROWN_WORDS; w++)
		any |= grown[w];
	return any != 0;
}
static _Thread_local unsigned fresh_looks __attribute__((tls_model("initial-exec")));

/* List c goes back to its first size (first blocks at most in each of its
 * two lists). */
static void shrink(unsigned c, uint32_t first)
{
	tbin_t *b = &tc.bins[c], *f = &tc.freed[c];
	uint32_t nb = b->max - (uint32_t)b->room, nf = f->max - (uint32_t)f->room;
	if (nb > first) {
		tcache_give_back(&tc, b, c, nb - first);
		*nleft(c) += nb - first; /* counted, never handed out */
	}
	if (nf > first)
		tcache_give_back(&tc, f, c, nf - first);
	tcache_back_to_first(c);
	grant(b, f);
}

/* Every GC_EVERY_REFILLS refills: which grown lists no malloc took from
 * since the last sample, and, after a new chunk, those go back. */
static __attribute__((noinline, cold)) void look_grown(void)
{
	if (tc.gc_fresh) {
		tc.gc_fresh = false;
		fresh_looks = cfg->tcache_gc ? 2 : 0;
	}
	for (unsigned w = 0; w < GROWN_WORDS; w++)
		for (uint64_t m = grown[w]; m; m &= m - 1) {
			unsigned c = w * 64 + (unsigned)__builtin_ctzll(m);
			bool idle = tc.bins[c].nmalloc == tc.gc_seen[c];
			tc.gc_seen[c] = tc.bins[c].nmalloc;
			uint32_t first = tcache_first_max(c);
			if (fresh_looks && idle && tc.bins[c].max > first) {
				shrink(c, first);
				grown[w] &= ~(1ULL << (c % 64));
			}
		}
	if (fresh_looks)
		fresh_looks--;
}

/* ---- malloc ------------------------------------------------------------- */

/* The block k links on from q in a list (k of them there at least).  A
 * list split at the sampling point walks up to half its length (the freed
 * list of a grown class: up to 2,048 blocks): sixteen links a round, ~1.2
 * instructions a block instead of 4 (callgrind, glibc_simple -s 1024 -n
 * 80000, prof:true: the split's walk was ~575 instructions a sample). */
static void **skip(void **q, size_t k)
{
	for (; k >= 16; k -= 16) {
		q = q[0], q = q[0], q = q[0], q = q[0], q = q[0], q = q[0], q = q[0], q = q[0];
		q = q[0], q = q[0], q = q[0], q = q[0], q = q[0], q = q[0], q = q[0], q = q[0];
	}
	for (; k; k--)
		q = q[0];
	return q;
}

/* A refill took got blocks (the first handed out, the rest in b), more
 * than the left that come before the sampling point: those past the first
 * left go onto the freed list (empty at a refill), not counted yet.
 * Refills used to take only left: one that came just before a sampling
 * point left the class with a few blocks in its two lists until the next,
 * and malloc's list then missed every few mallocs (bench/instr_loop under
 * callgrind, some runs: 1.9 instructions per malloc+free in misses instead
 * of 1.0). */
static void spill(tbin_t *b, tbin_t *f, size_t left, unsigned got)
{
	uint32_t n = got - (uint32_t)left;
	void **q = b->avail;
	if (left == 1) {
		b->avail = NULL;
	} else {
		q = skip(q, left - 2);
		void **rest = q[0];
		q[0] = NULL;
		q = rest;
	}
	f->head = q;
	b->room += (int32_t)n;
	f->room -= (int32_t)n;
}

/* The empty list b of sclass takes the freed list f's blocks, as many as
 * come before the sampling point (left > 0): all of them, or a split,
 * from the end nearer the point (the list's length is known). */
static inline void take_freed(tbin_t *b, tbin_t *f, unsigned sclass, size_t left)
{
	uint32_t n = f->max - (uint32_t)f->room;
	b->avail = f->head;
	if (n <= left) {
		f->head = NULL;
	} else if (left <= n - left) { /* the first left blocks */
		void **q = skip(f->head, left - 1);
		f->head = q[0];
		q[0] = NULL;
		n = (uint32_t)left;
	} else { /* the last left: the shorter walk */
		void **q = skip(f->head, n - left - 1);
		b->avail = q[0];
		q[0] = NULL;
		n = (uint32_t)left;
	}
	b->room -= (int32_t)n;
	f->room += (int32_t)n;
	*nleft(sclass) = left - n;
}

/* A refill of the empty list b of sclass, f's freed list empty too: a
 * whole list's worth (frees do not need room in it), the first block
 * handed out; of the rest, those past the left - 1 that come before the
 * sampling point go onto the freed list, uncounted. */
static void *refill(tbin_t *b, tbin_t *f, unsigned sclass, size_t left)
{
	size_t want = b->max ? b->max : 1, chain = (size_t)b->room + 1;
	if (want > 64)
		want = 64;
	unsigned got;
	void *p = tcache_refill(sclass, (unsigned)want, (unsigned)chain, &got);
	if (!p)
		return NULL;
	/* (tc.gc_events: the GC's count of slow paths, which it does not
	 * keep with profiling on; counted only while a list is grown: the
	 * count cost bench/xthread's producer, which refills at every other
	 * malloc and grows nothing, 5 instructions a refill) */
	if (unlikely(any_grown()) && (++tc.gc_events & (GC_EVERY_REFILLS - 1)) == 0)
		look_grown();
	grant(b, f);
	if (got > left)
		spill(b, f, left, got);
	*nleft(sclass) = left - (got < left ? got : left);
	return p;
}

/* A miss of this thread's list of sclass (the allocator is initialised):
 * the block that holds the sampling point, or the freed list moved over,
 * or a refill of as many as fit before the point.  Inlined in malloc's
 * miss (miss_slow) and in prof_cache_alloc. */
static inline __attribute__((always_inline)) void *cache_alloc(unsigned sclass)
{
	if (unlikely(tc.state == TC_NONE))
		(void)tcache_arena(); /* sets the cache up */
	tbin_t *b = &tc.bins[sclass], *f = &tc.freed[sclass];
	if (unlikely(b->avail != NULL)) /* set-up ran a re-entrant malloc */
		return tcache_pop(b);
	if (unlikely(!prof_ready))
		prof_start();
	size_t left = *nleft(sclass);
	if (unlikely(left == 0)) { /* this block holds the sampling point */
		*nleft(sclass) = prof_blocks(sclass);
		void **p = f->head;
		if (p) { /* a freed one: handed out as a pop would */
			f->head = p[0];
			f->room++;
			p[1] = NULL;
			counter_inc(&b->nmalloc);
			/* the rest now, as the next malloc's miss would */
			if (f->head && *nleft(sclass))
				take_freed(b, f, sclass, *nleft(sclass));
		} else {
			/* a whole refill, as at any miss: its first block is
			 * the sampled one (the + 1), the rest count from its
			 * end.  A refill of one block, as until 2026-12-02,
			 * broke the transfer batch it took, the rest back to
			 * slabs and pages: in bench/xthread's producer, a
			 * large class's page run given back and searched for
			 * again at each sample (~1,300 instructions). */
			if (!(p = refill(b, f, sclass, *nleft(sclass) + 1)))
				return NULL;
		}
		return sampled(p, sclass);
	}
	if (tc.flushed[sclass]) {
		tcache_grow(sclass);
		grown[sclass / 64] |= 1ULL << (sclass % 64);
	}
	if (f->head) {
		take_freed(b, f, sclass, left);
		grant(b, f);
		return tcache_pop(b);
	}
	return refill(b, f, sclass, left);
}

void *prof_cache_alloc(unsigned sclass)
{
	return cache_alloc(sclass);
}

/* ---- free ---------------------------------------------------------------- */

/* p, of this thread's arena or not, checked, its record gone: onto the
 * freed list, unless it goes elsewhere (tcache.c).  A full freed list
 * gives half of itself back to the arenas, as a full list does without
 * prof (its blocks were not counted: nothing goes back in the count). */
static void put(void *p, unsigned sclass)
{
	if (tcache_free_elsewhere(p, sclass))
		return;
	tbin_t *b = &tc.bins[sclass], *f = &tc.freed[sclass];
	grant(b, f);
	if (f->room <= 0) { /* max >= 1: tcache_free_elsewhere took max 0 */
		uint32_t n = f->max - (uint32_t)f->room;
		tcache_give_back(&tc, f, sclass, n - n / 2);
		tcache_note_flush(sclass);
	}
	f->room--;
	tcache_push(f, p);
}

/* free's fast path did not push p (its arena's, or arena 0's in a thread
 * without a cache; never a sampled block) onto the freed list of sclass:
 * full, or p may be free already. */
void prof_cache_free_full(void *p, unsigned sclass)
{
	if (((uintptr_t *)p)[1] != tcache_key)
		tc.freed[sclass].room++; /* the fast path's decrement */
	else if (tcache_free_double(p, sclass))
		return;
	put(p, sclass);
}

/* Any other free of a cached class with prof on (alloc_block_free): a sampled
 * block (its page's word is tagged while it lives), a large cached class,
 * free_sized, realloc, a block of another arena. */
void prof_cache_free(void *p, unsigned sclass)
{
	if (chunk_hdr_of(p)->arena == tc.arena) {
		/* (realloc's and free_sized's frees, mostly: onto the freed
		 * list as free's fast path would, when p cannot have been
		 * sampled) */
		if (sclass < NSMALL ? !(__atomic_load_n(page_word(p), __ATOMIC_RELAXED) & PROF_SAMPLED_BIT)
				    : !prof_maybe_sampled(p)) {
			if (!tcache_push_at(p, bin_off(sclass) + PROF_FREED_OFF))
				prof_cache_free_full(p, sclass);
			return;
		}
	} else if (tc.state == TC_ACTIVE && !prof_maybe_sampled(p)) {
		/* another arena's block that cannot have been sampled (its
		 * page holds no record): as without profiles.  A consumer's
		 * free of a large class (bench/xthread) took the record's
		 * look and tcache_free_elsewhere's: ~80 instructions more. */
		tcache_free_foreign(p, sclass);
		return;
	}
	if (tcache_free_double(p, sclass))
		return;
	unsampled(p, sclass);
	put(p, sclass);
}

/* free's fast path refused p, of region 0, whose page's word e carries
 * PROF_SAMPLED_BIT (free_other).  A block of this thread's arena goes onto
 * the freed list as the fast path would have put it, after its record if
 * the block filter says it may have one (most are its neighbours, which it
 * says are not, without prof_mtx): about 40 instructions, against 150
 * through block_of.  Anything else (another arena's block, not a block
 * start, a block that may be free already) returns false, for the way
 * through block_of, which says what is wrong. */
bool prof_cache_free_near(void *p, uint64_t e)
{
	size_t k = (size_t)(e >> 32) - PROF_SAMPLED_K;
	const slab_check_t *ck = (const slab_check_t *)((const char *)slab_checks + k);
	uint64_t x = slab_entry_offset(e, p, &tc.salt);
	if (!(x * ck->magic < ck->thresh))
		return false;
	if (unlikely(prof_block_maybe_sampled(p))) {
		if (((uintptr_t *)p)[1] == tcache_key)
			return false;
		prof_free_page(p, page_word(p));
	}
	if (!tcache_push_at(p, k))
		prof_cache_free_full(p, bin_class(k) - NCACHED);
	return true;
}

/* malloc's miss of the list at bin offset off, from api.c (heap profiles
 * on, initialised, not debug mode).  Mostly, the freed list becomes the
 * list (all of it fits before the sampling point): a leaf, no frame, 25
 * instructions (gcc 12).  Else prof_cache_alloc, and at a refill the
 * background thread's start, as at any malloc miss.  A list flushed since
 * (tc.flushed) grows at the next miss that finds the freed list empty, in
 * prof_cache_alloc: testing it here cost every miss 6 instructions, and
 * with prof on a list that overflowed runs dry again soon after (that is
 * how its frees come back to malloc). */
static __attribute__((noinline)) void *miss_slow(unsigned sclass)
{
	/* the background thread's start, at refills only: not at the two
	 * slow misses of every sample (~40 instructions each) */
	bool refills = tc.freed[sclass].head == NULL;
	void *p = cache_alloc(sclass);
	if (refills)
		background_start();
	return p;
}

void *prof_cache_miss(size_t off)
{
	tbin_t *f = tc_bin_at(off + PROF_FREED_OFF);
	void **p = f->head;
	size_t n = f->max - (uint32_t)f->room, left = f->prof_left;
	if (likely(p != NULL) && likely(n <= left)) {
		tbin_t *b = tc_bin_at(off);
		f->prof_left = left - n;
		f->head = NULL;
		f->room = (int32_t)f->max;
		b->avail = p[0]; /* (b was empty) the rest of them, p handed out */
		b->room -= (int32_t)n - 1;
		p[1] = NULL;
		counter_inc(&b->nmalloc);
		return p;
	}
	return miss_slow(bin_class(off));
}
