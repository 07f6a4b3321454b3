/* The thread caches with heap profiles on (docs/design.md, "Heap
 * profiles"): every allocation of a cached class counts against its
 * class's sampling with no test on malloc's fast path.  malloc's list
 * (tc.bins[c]) holds only counted blocks, no more than come before the
 * next sampling point, so the malloc reaching the point misses and comes
 * here.  Frees push onto tc.freed[c] (slab words carry PROF_FREED_OFF),
 * which a miss takes whole when it fits before the point.  While a sampled
 * block lives, its page's word carries PROF_SAMPLED_BIT, whose check
 * passes nothing, so that page's frees come to prof_cache_free_near;
 * prof.c changes the bit under prof_mtx with the records. */
#include "internal.h"

/* tc.freed[c].prof_left: blocks of class c before the one holding the next
 * sampling point, less those in tc.bins[c] (an exponential interval of X
 * bytes: floor(X / size) + 1 blocks).  Beside the list a miss takes. */
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

/* The freed list f may hold as many as malloc's list b; f's length stays. */
static void grant(tbin_t *b, tbin_t *f)
{
	f->room += (int32_t)(b->max - f->max);
	f->max = b->max;
}

/* ---- the page words of sampled blocks */

static uint64_t *page_word(const void *p)
{
	/* region 0 first, as chunk_desc_of: realloc's frees come here for every
	 * block */
	size_t off = (size_t)((uintptr_t)p - (uintptr_t)regions[0].base);
	if (likely(off < regions[0].size))
		return &regions[0].ptab[off >> PAGE_SHIFT];
	const region_t *r = &regions[chunk_desc_of(p)->region];
	return &r->ptab[(size_t)((const char *)p - r->base) >> PAGE_SHIFT];
}

/* p, about to be handed out, was sampled: its record, and for a slab
 * block its page's bit. */
static inline __attribute__((always_inline)) void *sampled(void *p, unsigned sclass)
{
	/* the stack from here: the walk's only libarena frame is miss_slow */
	if (prof_take()) {
		uintptr_t pcs[PROF_FRAMES];
		uint64_t tag;
		unsigned n = prof_stack_backtrace_tagged(pcs, PROF_FRAMES, &tag);
		prof_record(p, class_size[sclass], sclass < NSMALL ? page_word(p) : NULL, pcs, n, tag);
	}
	return p;
}

/* p, being freed: its record goes, and its page's bit once no sampled
 * block may start there. */
static void unsampled(void *p, unsigned sclass)
{
	prof_free_page(p, sclass < NSMALL ? page_word(p) : NULL);
}

/* ---- grown lists given back after a new chunk
 * tcache.c's GC does not run with profiles on.  Without its look after a
 * new chunk, lists grown for one phase would keep their blocks and the
 * thread's grow budget.  So every GC_EVERY_REFILLS refills the grown lists
 * are sampled, and after a refill that took a chunk (tc.gc_fresh) the next
 * two samples shrink the idle ones to their first size. */
#define GC_EVERY_REFILLS 8u

/* A bit per cached class. */
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

/* List c back to its first size (first blocks at most in each list). */
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

/* Samples the grown lists; after a new chunk the idle ones shrink. */
static __attribute__((noinline, cold)) void look_grown(void)
{
	if (tc.gc_fresh) {
		tc.gc_fresh = false;
		fresh_looks = cfg->tcache_gc ? 2 : 0;
	}
	for (unsigned w = 0; w < GROWN_WORDS; w++)
		for (uint64_t m = grown[w]; m; m &= m - 1) {
			unsigned c = w * 64 + (unsigned)__builtin_ctzll(m);
			uint64_t n = tcache_nmalloc(c);
			bool idle = n == tc.gc_seen[c];
			tc.gc_seen[c] = n;
			uint32_t first = tcache_first_max(c);
			if (fresh_looks && idle && tc.bins[c].max > first) {
				shrink(c, first);
				grown[w] &= ~(1ULL << (c % 64));
			}
		}
	if (fresh_looks)
		fresh_looks--;
}

/* ---- malloc */

/* The block k links on from q, or the list's last block if it ends first:
 * under misuse:warn a reported forged link cuts a list short of its count. */
static void **skip(void **q, size_t k)
{
	for (void **next; k && (next = link_next(q)); k--)
		q = next;
	return q;
}

/* A refill took got blocks, more than the left before the sampling point:
 * those past left go onto the empty freed list, uncounted (taking only
 * left would make malloc's list miss every few mallocs). */
static void spill(tbin_t *b, tbin_t *f, size_t left, unsigned got)
{
	uint32_t n = got - (uint32_t)left;
	void **q = b->avail;
	if (left == 1) {
		b->avail = NULL;
	} else {
		q = skip(q, left - 2);
		void **rest = link_next(q);
		link_set(q, NULL);
		q = rest;
	}
	f->head = q;
	b->room += (int32_t)n;
	f->room -= (int32_t)n;
	counter_add(&b->nmalloc, -(uint64_t)n); /* counted when avail was filled */
}

/* Empty list b takes f's blocks, as many as come before the sampling point
 * (left > 0): all, or a split from the nearer end. */
static inline void take_freed(tbin_t *b, tbin_t *f, unsigned sclass, size_t left)
{
	uint32_t n = f->max - (uint32_t)f->room;
	b->avail = f->head;
	if (n <= left) {
		f->head = NULL;
	} else if (left <= n - left) { /* the first left */
		void **q = skip(f->head, left - 1);
		f->head = link_next(q);
		link_set(q, NULL);
		n = (uint32_t)left;
	} else { /* the last left: the shorter walk */
		void **q = skip(f->head, n - left - 1);
		b->avail = link_next(q);
		link_set(q, NULL);
		n = (uint32_t)left;
	}
	b->room -= (int32_t)n;
	f->room += (int32_t)n;
	counter_add(&b->nmalloc, n); /* tcache_take_freed's count */
	*nleft(sclass) = left - n;
}

/* A refill of empty b (f empty too): a list's worth, the first handed
 * out, those past left - 1 onto the freed list. */
static void *refill(tbin_t *b, tbin_t *f, unsigned sclass, size_t left)
{
	size_t want = b->max ? b->max : 1, chain = (size_t)b->room + 1;
	if (want > 64)
		want = 64;
	unsigned got;
	void *p = tcache_refill(sclass, (unsigned)want, (unsigned)chain, &got);
	if (!p)
		return NULL;
	/* counted only while a list is grown */
	if (unlikely(any_grown()) && (++tc.gc_events & (GC_EVERY_REFILLS - 1)) == 0)
		look_grown();
	grant(b, f);
	if (got > left)
		spill(b, f, left, got);
	*nleft(sclass) = left - (got < left ? got : left);
	return p;
}

/* A miss: the block holding the sampling point, the freed list moved over,
 * or a refill.  Inlined in miss_slow and prof_cache_alloc. */
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
		if (p) { /* a freed one, handed out as a pop would */
			f->head = link_next(p);
			f->room++;
			p[1] = NULL;
			counter_inc(&b->nmalloc);
			/* the rest now, as the next miss would */
			if (f->head && *nleft(sclass))
				take_freed(b, f, sclass, *nleft(sclass));
		} else {
			/* a whole refill, its first block sampled (+ 1): one block
			 * would break the transfer batch it takes */
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

/* ---- free */

/* p, checked, its record gone: onto the freed list unless elsewhere; a
 * full one gives half back, uncounted. */
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

/* free's fast path did not push p: the freed list full, or p maybe free. */
void prof_cache_free_full(void *p, unsigned sclass)
{
	if (((uintptr_t *)p)[1] != tcache_key)
		tc.freed[sclass].room++; /* the fast path's decrement */
	else if (tcache_free_double(p, sclass))
		return;
	put(p, sclass);
}

/* Any other free of a cached class with prof on: a sampled block, a large
 * cached class, free_sized, realloc, another arena's block. */
void prof_cache_free(void *p, unsigned sclass)
{
	if (chunk_hdr_of(p)->arena == tc.arena) {
		/* p cannot have been sampled: as free's fast path would */
		if (sclass < NSMALL ? !(__atomic_load_n(page_word(p), __ATOMIC_RELAXED) & PROF_SAMPLED_BIT)
				    : !prof_maybe_sampled(p)) {
			if (!tcache_push_at(p, bin_off(sclass) + PROF_FREED_OFF))
				prof_cache_free_full(p, sclass);
			return;
		}
	} else if (tc.state == TC_ACTIVE && !prof_maybe_sampled(p)) {
		/* another arena's block that cannot have been sampled: as without
		 * profiles */
		tcache_free_foreign(p, sclass);
		return;
	}
	if (tcache_free_double(p, sclass))
		return;
	unsampled(p, sclass);
	put(p, sclass);
}

/* free's fast path refused p, of region 0, its page's word e tagged: a
 * block of this arena goes onto the freed list, after its record if the
 * block filter says it may have one (most neighbours need no prof_mtx).
 * Else false: block_of says what is wrong. */
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

/* malloc's miss of the list at bin offset off: mostly the freed list
 * becomes the list, a leaf with no frame; else prof_cache_alloc (which
 * also grows a flushed list). */
static __attribute__((noinline)) void *miss_slow(unsigned sclass)
{
	/* the background thread's start, at refills only: not at a sample's
	 * slow misses */
	bool refills = tc.freed[sclass].head == NULL;
	void *p = cache_alloc(sclass);
	if (refills)
		background_start();
	return p;
}

void *prof_cache_miss(size_t off)
{
	tbin_t *f = tc_bin_at(off + PROF_FREED_OFF), *b = tc_bin_at(off);
	if (unlikely(b->avail != NULL)) /* a link the fast path left to link_next */
		return tcache_pop(b);
	void **p = f->head;
	size_t n = f->max - (uint32_t)f->room, left = f->prof_left;
	if (likely(p != NULL) && likely(n <= left)) {
		f->prof_left = left - n;
		f->head = NULL;
		f->room = (int32_t)f->max;
		b->avail = link_next(p); /* the rest of them, p handed out */
		b->room -= (int32_t)n - 1;
		p[1] = NULL;
		counter_add(&b->nmalloc, n); /* p and avail's (tcache_take_freed) */
		return p;
	}
	return miss_slow(bin_class(off));
}
