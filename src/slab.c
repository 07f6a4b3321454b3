/* Slabs: runs of pages cut into blocks of one small class.  Each arena
 * keeps per class a list of its slabs with free blocks; a slab's bitmap
 * says which blocks are free, so a block given back twice is caught at its
 * slab.  Descriptors live out of line, so blocks start at the slab's first
 * byte. */
#include "internal.h"

#define META_BYTES ((size_t)64 << 10)
#define SLAB_KEEP_EMPTY 2

static slab_t *desc_alloc(arena_t *a)
{
	slab_t *s = list_first(&a->free_slabs, slab_t, link);
	if (s) {
		ARENA_ASSERT(s->listed == SLAB_ON_NONE);
		list_remove(&a->free_slabs, &s->link);
		return s;
	}
	if (a->meta_end - a->meta_cur < (ptrdiff_t)sizeof(slab_t)) {
		char *m = os_map_meta(META_BYTES);
		if (!m)
			return NULL;
		a->meta_cur = m;
		a->meta_end = m + META_BYTES;
	}
	s = (slab_t *)a->meta_cur;
	a->meta_cur += sizeof(slab_t);
	return s;
}

static void desc_free(arena_t *a, slab_t *s)
{
	list_push_front(&a->free_slabs, &s->link);
}

static void nonfull_push(bin_t *b, slab_t *s)
{
	ARENA_ASSERT(s->listed == SLAB_ON_NONE && s->nfree > 0); /* on one list at most */
	list_push_front(&b->nonfull, &s->link);
	s->listed = SLAB_ON_NONFULL;
}

/* Takes s off whichever list holds it. */
static void unlist(bin_t *b, slab_t *s)
{
	if (s->listed == SLAB_ON_NONFULL) {
		list_remove(&b->nonfull, &s->link);
	} else if (s->listed == SLAB_ON_EMPTY) {
		ARENA_ASSERT(b->nempty > 0);
		list_remove(&b->empty, &s->link);
		if (--b->nempty < b->empty_low)
			b->empty_low = b->nempty;
	}
	s->listed = SLAB_ON_NONE;
}

/* Out of line (both): rare, and inlined they cost every free and refill a
 * save and restore of six registers. */
static __attribute__((noinline)) slab_t *slab_new(arena_t *a, unsigned sclass)
{
	ARENA_ASSERT(sclass < NSMALL && class_nblocks[sclass] <= SLAB_MAX_BLOCKS &&
		     (size_t)class_nblocks[sclass] * class_size[sclass] <=
			     (size_t)class_slab_pages[sclass] << PAGE_SHIFT);
	slab_t *s = desc_alloc(a);
	if (!s)
		return NULL;
	bool zero;
	size_t npages = class_slab_pages[sclass];
	char *base = arena_pages_alloc(a, npages, 1, PG_SLAB, (uint8_t)sclass, &zero);
	if (!base) {
		desc_free(a, s);
		return NULL;
	}
	arena_chunk_t *c = chunk_hdr_of(base);
	size_t first = page_index(c, base);
	for (size_t i = first; i < first + npages; i++)
		c->ref[i].slab = s;
	*s = (slab_t){ .base = base, .sclass = (uint8_t)sclass,
		       .nblocks = class_nblocks[sclass], .nfree = class_nblocks[sclass],
		       .zero_from = zero ? 0 : class_nblocks[sclass] };
	for (unsigned w = 0; w * 64 < s->nblocks; w++) /* bits [0, nblocks) */
		s->free_bits[w] = s->nblocks - w * 64 >= 64 ? ~0ULL : ~(~0ULL << (s->nblocks - w * 64));
	ptab_set(base, npages, slab_entry(sclass, base, arena_salt(a)));
	nonfull_push(&a->bins[sclass], s);
	return s;
}

static __attribute__((noinline)) void slab_destroy(arena_t *a, arena_chunk_t *c, slab_t *s)
{
	/* only a slab whose blocks are all free is unmade */
	ARENA_ASSERT(s->nfree == s->nblocks && c->ref[page_index(c, s->base)].slab == s);
	unlist(&a->bins[s->sclass], s);
	size_t first = page_index(c, s->base), npages = class_slab_pages[s->sclass];
	ptab_set(s->base, npages, 0);
	for (size_t i = first; i < first + npages; i++)
		c->ref[i].slab = NULL;
	arena_pages_free(c, first, npages);
	desc_free(a, s);
}

/* ---- Empty slabs
 * A slab whose last block comes back moves to its class's empty list and
 * is taken again only when no slab of nonfull has a free block: blocks go
 * to slabs with some in use, so an emptying slab gets time to empty.  Its
 * pages stay in use, so a class that empties and refills a slab does not
 * remake it each time.  Not for ever: with 8 arenas and 58 classes a few
 * empty slabs each would hold tens of MiB resident for classes no longer
 * used.  So at most SLAB_KEEP_EMPTY per class, and the sweep (slab_sweep,
 * once per decay period) unmakes those unused all period: their pages go
 * back to the chunk free and dirty, for decay to purge. */

/* The first slab with a free block: nonfull's, else the last emptied, else
 * a new one; NULL when memory runs out. */
static slab_t *slab_next(arena_t *a, unsigned sclass)
{
	bin_t *b = &a->bins[sclass];
	slab_t *s = list_first(&b->nonfull, slab_t, link);
	if (s)
		return s;
	if ((s = list_first(&b->empty, slab_t, link))) {
		unlist(b, s);
		nonfull_push(b, s);
		return s;
	}
	return slab_new(a, sclass);
}

/* Takes up to n (<= 64) blocks of sclass from a's slabs into out; returns
 * how many (fewer only when memory runs out).  Bit i of *zero is set when
 * out[i] is known to read zero.  A slab hands out its blocks in address
 * order, so those known zero are the last ones a word gives. */
unsigned slab_alloc_batch(arena_t *a, unsigned sclass, void **out, unsigned n, uint64_t *zero)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	ARENA_ASSERT(sclass < NSMALL && n > 0 && n <= 64); /* *zero: a bit per block */
	bin_t *b = &a->bins[sclass];
	size_t size = class_size[sclass];
	unsigned got = 0;
	uint64_t z = 0;
	while (got < n) {
		slab_t *s = slab_next(a, sclass);
		if (!s)
			break;
		ARENA_ASSERT(s->sclass == sclass && s->nfree > 0 && s->listed == SLAB_ON_NONFULL);
		unsigned zero_from = s->zero_from, first = got;
		for (unsigned w = 0; w * 64 < s->nblocks && got < n; w++) {
			uint64_t bits = s->free_bits[w], left = bits;
			unsigned take = ones64(bits);
			if (take > n - got)
				take = n - got;
			char *base = s->base + (size_t)w * 64 * size;
			unsigned low = bits ? (unsigned)__builtin_ctzll(bits) : 0;
			uint64_t run = take == 64 ? ~0ULL : (1ULL << take) - 1;
			if (take && (bits >> low & run) == run) {
				/* consecutive blocks (a new slab's): no bit search, no
				 * multiply per block */
				ARENA_ASSERT(w * 64 + low + take <= s->nblocks);
				char *p = base + (size_t)low * size;
				for (unsigned k = 0; k < take; k++, p += size)
					out[got + k] = p;
				left = bits & ~(run << low);
			} else {
				for (unsigned k = 0; k < take; k++) {
					ARENA_ASSERT(w * 64 + (unsigned)__builtin_ctzll(left) < s->nblocks);
					out[got + k] = base + (unsigned)__builtin_ctzll(left) * size;
					left &= left - 1;
				}
			}
			s->free_bits[w] = left;
			/* the taken blocks at or past zero_from: the last ones */
			uint64_t known = zero_from <= w * 64 ? ~0ULL
				: zero_from - w * 64 >= 64 ? 0 : ~0ULL << (zero_from - w * 64);
			unsigned nz = ones64((bits ^ left) & known);
			if (nz) {
				z |= (~0ULL >> (64 - nz)) << (got + take - nz);
				s->zero_from = (uint16_t)(w * 64 + 64 - (unsigned)__builtin_clzll(bits ^ left));
			}
			got += take;
		}
		ARENA_ASSERT(got - first <= s->nfree);
		s->nfree = (uint16_t)(s->nfree - (got - first));
		if (s->nfree == 0)
			unlist(b, s);
		ARENA_ASSERT(slab_validate_free_list(s));
	}
	*zero = z;
	return got;
}

/* Slab s, all free now, goes on its class's empty list; past
 * SLAB_KEEP_EMPTY, the one emptied longest ago is unmade. */
static void slab_emptied(arena_t *a, slab_t *s)
{
	bin_t *b = &a->bins[s->sclass];
	ARENA_ASSERT(s->nfree == s->nblocks);
	unlist(b, s);
	list_push_front(&b->empty, &s->link);
	s->listed = SLAB_ON_EMPTY;
	if (++b->nempty > SLAB_KEEP_EMPTY) {
		slab_t *old = list_last(&b->empty, slab_t, link);
		ARENA_ASSERT(old != NULL && old != s);
		slab_destroy(a, chunk_hdr_of(old->base), old);
	}
}

/* freed blocks came back to slab s: its count and lists. */
static inline void slab_freed(arena_t *a, slab_t *s, unsigned freed)
{
	if (freed == 0)
		return;
	s->nfree = (uint16_t)(s->nfree + freed);
	if (s->nfree == s->nblocks)
		slab_emptied(a, s);
	else if (s->listed == SLAB_ON_NONE)
		nonfull_push(&a->bins[s->sclass], s);
	ARENA_ASSERT(slab_validate_free_list(s));
}

/* Sets block p's bit in s (its index in it i): false for a double free,
 * reported. */
static inline bool slab_put(slab_t *s, unsigned i, void *p)
{
	uint64_t bit = 1ULL << (i % 64);
	if (s->free_bits[i / 64] & bit) {
		out_misuse("double free", p);
		return false;
	}
	s->free_bits[i / 64] |= bit;
	return true;
}

/* Gives block p back to its slab s in chunk c. */
void slab_free_block(arena_chunk_t *c, slab_t *s, void *p)
{
	ARENA_ASSERT_LOCKED(&c->arena->lock);
	unsigned i = slab_block_index(s->sclass, (size_t)((char *)p - s->base));
	/* p is the start of one of s's blocks */
	ARENA_ASSERT(c->ref[page_index(c, p)].slab == s && i < s->nblocks &&
		     (char *)p == s->base + (size_t)i * class_size[s->sclass]);
	slab_freed(c->arena, s, slab_put(s, i, p));
}

/* A slab whose blocks slab_free_array is giving back: how many so far. */
typedef struct free_run {
	slab_t *s;
	uintptr_t base;
	size_t span;        /* 0: no slab, no block falls in it */
	uint64_t magic;     /* slab_block_index's, held */
	unsigned freed;
} free_run_t;

/* Gives blocks[0, n) of a (its lock held) back to their slabs, up to the
 * first that is not a slab's: how many went.  Two slabs at a time: a
 * refill's shuffle interleaves two, so runs of one slab's blocks are short
 * (2.6 blocks, bench/phase_change), and a block of the other one switches
 * to it with no page entry read.  A slab's count and lists change once,
 * when a third slab's block comes or at the end. */
unsigned slab_free_array(arena_t *a, void *const *blocks, unsigned n)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	arena_chunk_t *c = NULL;
	uintptr_t chunk = 0;
	free_run_t cur = { 0 }, alt = { 0 };
	unsigned k = 0;
	for (; k < n; k++) {
		char *p = blocks[k];
		uintptr_t off = (uintptr_t)p - cur.base;
		if (off >= cur.span && alt.s && (uintptr_t)p - alt.base < alt.span) {
			free_run_t t = cur;
			cur = alt, alt = t;
			off = (uintptr_t)p - cur.base;
		} else if (off >= cur.span) {
			if (!c || ((uintptr_t)p & ~(uintptr_t)CHUNK_MASK) != chunk) {
				c = chunk_hdr_of(p);
				chunk = (uintptr_t)p & ~(uintptr_t)CHUNK_MASK;
			}
			ARENA_ASSERT(c->arena == a);
			size_t idx = page_index(c, p);
			if (c->page[idx].kind != PG_SLAB)
				break;
			if (alt.s) /* the other one goes */
				slab_freed(a, alt.s, alt.freed);
			alt = cur;
			slab_t *s = c->ref[idx].slab;
			cur = (free_run_t){ .s = s, .base = (uintptr_t)s->base,
					    .span = (size_t)class_slab_pages[s->sclass] << PAGE_SHIFT,
					    .magic = class_div_magic[s->sclass] };
			off = (uintptr_t)p - cur.base;
		}
		unsigned i = (unsigned)((off * cur.magic) >> 32);
		/* p is the start of one of its slab's blocks */
		ARENA_ASSERT(i == slab_block_index(cur.s->sclass, off) &&
			     chunk_hdr_of(p)->ref[page_index(chunk_hdr_of(p), p)].slab == cur.s &&
			     i < cur.s->nblocks && p == cur.s->base + (size_t)i * class_size[cur.s->sclass]);
		cur.freed += slab_put(cur.s, i, p);
	}
	if (alt.s)
		slab_freed(a, alt.s, alt.freed);
	if (cur.s)
		slab_freed(a, cur.s, cur.freed);
	return k;
}

/* Unmakes a's empty slabs of class c unused since the last sweep (every:
 * all of them), the oldest first. */
static void release_empty(arena_t *a, unsigned c, bool every)
{
	bin_t *b = &a->bins[c];
	ARENA_ASSERT(b->empty_low <= b->nempty);
	for (unsigned n = every ? b->nempty : b->empty_low; n > 0; n--) {
		slab_t *old = list_last(&b->empty, slab_t, link);
		ARENA_ASSERT(old != NULL);
		slab_destroy(a, chunk_hdr_of(old->base), old);
	}
	b->empty_low = b->nempty;
}

/* Once per decay period (purge_sweep_due): the empty slabs that stayed
 * unused all period are unmade. */
void slab_sweep(arena_t *a, uint64_t now)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	if (!purge_sweep_due(&a->slab_sweep_ms, now))
		return;
	for (unsigned c = 0; c < NSMALL; c++)
		release_empty(a, c, false);
}

/* Every empty slab of a unmade now (malloc_trim). */
void slab_release_all(arena_t *a)
{
	ARENA_ASSERT_LOCKED(&a->lock);
	for (unsigned c = 0; c < NSMALL; c++)
		release_empty(a, c, true);
}

/* Whether block p of slab s is free in it. */
bool slab_block_free(const slab_t *s, const void *p)
{
	ARENA_ASSERT_LOCKED(&chunk_hdr_of(s->base)->arena->lock);
	unsigned i = slab_block_index(s->sclass, (size_t)((const char *)p - s->base));
	ARENA_ASSERT(i < s->nblocks);
	return s->free_bits[i / 64] >> (i % 64) & 1;
}

#ifdef ARENA_DEBUG
static bool slab_bad(const slab_t *s, const char *what, size_t v)
{
	out_printf("libarena: slab_validate_free_list: slab %p, class %u: %s (%zu)\n",
		   (void *)s->base, s->sclass, what, v);
	return false;
}

/* Whether slab s is consistent (at rest, under its arena's lock): its
 * bitmap, the list of its free blocks, counts nfree of them, every one a
 * block of the slab (below nblocks: inside its pages, at a multiple of its
 * class size; a bitmap holds none twice), the blocks from zero_from on
 * among them; its geometry is its class's; its pages in its chunk are its
 * own (PG_SLAB of its class, headed at its first page, pointing to s); and
 * the list that holds it is the one its count says (none: all in use,
 * empty: all free, nonfull: the others), linked both ways there. */
bool slab_validate_free_list(const slab_t *s)
{
	arena_chunk_t *c = chunk_hdr_of(s->base);
	ARENA_ASSERT_LOCKED(&c->arena->lock);
	unsigned sclass = s->sclass;
	if (sclass >= NSMALL)
		return slab_bad(s, "not a small class", sclass);
	size_t npages = class_slab_pages[sclass];
	if (s->nblocks != class_nblocks[sclass] || s->nblocks > SLAB_MAX_BLOCKS ||
	    (size_t)s->nblocks * class_size[sclass] > npages << PAGE_SHIFT)
		return slab_bad(s, "blocks, not its class's", s->nblocks);
	size_t nfree = 0;
	for (unsigned w = 0; w < SLAB_MAX_BLOCKS / 64; w++) {
		uint64_t past = w * 64 >= s->nblocks ? ~0ULL
			: s->nblocks - w * 64 >= 64 ? 0 : ~0ULL << (s->nblocks - w * 64);
		if (s->free_bits[w] & past)
			return slab_bad(s, "a free block past its last one",
					(size_t)w * 64 +
						(size_t)__builtin_ctzll(s->free_bits[w] & past));
		nfree += (size_t)ones64(s->free_bits[w]);
	}
	if (nfree != s->nfree)
		return slab_bad(s, "nfree, not its bitmap's count", s->nfree);
	if (s->zero_from > s->nblocks)
		return slab_bad(s, "zero_from past its blocks", s->zero_from);
	for (unsigned w = s->zero_from / 64; w * 64 < s->nblocks; w++) {
		/* bits [zero_from, nblocks) of word w */
		uint64_t known = ~0ULL;
		if (s->zero_from > w * 64)
			known <<= s->zero_from - w * 64;
		if (s->nblocks - w * 64 < 64)
			known &= ~(~0ULL << (s->nblocks - w * 64));
		if ((s->free_bits[w] & known) != known)
			return slab_bad(s, "a block known zero in use",
					(size_t)w * 64 +
						(size_t)__builtin_ctzll(known & ~s->free_bits[w]));
	}
	size_t first = page_index(c, s->base);
	if (((uintptr_t)s->base & (PAGE_SIZE - 1)) || first + npages > CHUNK_PAGES)
		return slab_bad(s, "base, not a page of an arena chunk", first);
	for (size_t i = first; i < first + npages; i++)
		if (c->page[i].kind != PG_SLAB || c->page[i].sclass != sclass ||
		    c->page[i].head != first || c->ref[i].slab != s)
			return slab_bad(s, "a page not the slab's", i);
	uint8_t listed = s->nfree == 0 ? SLAB_ON_NONE
		: s->nfree == s->nblocks ? SLAB_ON_EMPTY : SLAB_ON_NONFULL;
	if (s->listed != listed)
		return slab_bad(s, "on another list than its count says", s->listed);
	if (listed != SLAB_ON_NONE) {
		const bin_t *b = &c->arena->bins[sclass];
		const list_t *l = listed == SLAB_ON_EMPTY ? &b->empty : &b->nonfull;
		if ((s->link.prev ? s->link.prev->next != &s->link : l->head != &s->link) ||
		    (s->link.next ? s->link.next->prev != &s->link : l->tail != &s->link))
			return slab_bad(s, "not linked on its list", listed);
	}
	return true;
}
#endif
