/*
 * slab.c over arena.c and the chunk layer (the fake OS's address space):
 * slab_validate_free_list on slabs as the allocator leaves them and on
 * planted faults, and the assertions a debug build stops at (the unit
 * objects are built with -DARENA_DEBUG): the arena lock not held, a block
 * that is not one of its slab's.
 */
#include "fake_os.h"
#include "unit.h"

static arena_t *start(void)
{
	fake.now_ms = 1000000;
	sizeclass_init();
	chunk_init();
	arena_init();
	return &arenas[0];
}

static slab_t *slab_of(void *p)
{
	arena_chunk_t *c = chunk_hdr_of(p);
	return c->ref[page_index(c, p)].slab;
}


/* Bit i of the returned mask: out[i] known zero, as slab_alloc_batch says. */
static uint64_t take_zero(arena_t *a, unsigned sclass, void **out, unsigned n)
{
	uint64_t zero;
	arena_lock(a);
	unsigned got = slab_alloc_batch(a, sclass, out, n, &zero);
	arena_unlock(a);
	cr_assert_eq(got, n, "slab_alloc_batch(class %u, %u) gave %u", sclass, n, got);
	return zero;
}

/* n blocks of sclass into out, under a's lock. */
static unsigned take(arena_t *a, unsigned sclass, void **out, unsigned n)
{
	take_zero(a, sclass, out, n);
	return n;
}

static void give(void *p)
{
	arena_chunk_t *c = chunk_hdr_of(p);
	arena_lock(c->arena);
	slab_free_block(c, slab_of(p), p);
	arena_unlock(c->arena);
}

static bool valid(const slab_t *s, char *out, size_t size)
{
	arena_t *a = chunk_hdr_of(s->base)->arena;
	capture_t cap;
	capture_begin(&cap);
	arena_lock(a);
	bool ok = slab_validate_free_list(s);
	arena_unlock(a);
	capture_end(&cap, out, size);
	return ok;
}

static void accepted(const slab_t *s)
{
	char out[512];
	cr_assert(valid(s, out, sizeof(out)), "refused: %s", out);
	cr_assert_str_empty(out);
}

static void refused(const slab_t *s, const char *what)
{
	char out[512];
	cr_assert_not(valid(s, out, sizeof(out)), "planted: %s; validated", what);
	cr_assert(strstr(out, "libarena: slab_validate_free_list: slab ") && strstr(out, what),
		  "planted: %s; reported: %s", what, out);
	cr_assert_eq(count_lines(out), 1, "one line: %s", out);
}

/* Every small class: a slab partly used, full (on no list), emptied (on
 * the empty list), and taken again. */
Test(slab, validate_good_slabs)
{
	arena_t *a = start();
	static void *blocks[SLAB_MAX_BLOCKS];
	for (unsigned c = 0; c < NSMALL; c++) {
		unsigned n = class_nblocks[c];
		take(a, c, blocks, 3);
		slab_t *s = slab_of(blocks[0]);
		cr_assert_eq(s->listed, SLAB_ON_NONFULL);
		accepted(s);
		for (unsigned got = 3; got < n; got += n - got < 64 ? n - got : 64)
			take(a, c, blocks + got, n - got < 64 ? n - got : 64);
		cr_assert_eq(slab_of(blocks[n - 1]), s, "class %u: one slab", c);
		cr_assert_eq(s->listed, SLAB_ON_NONE, "class %u: full, on no list", c);
		accepted(s);
		for (unsigned i = 0; i < n; i += 2)
			give(blocks[i]);
		accepted(s);
		for (unsigned i = 1; i < n; i += 2)
			give(blocks[i]);
		cr_assert_eq(s->listed, SLAB_ON_EMPTY, "class %u: empty", c);
		accepted(s);
		take(a, c, blocks, 1);
		cr_assert_eq(slab_of(blocks[0]), s, "class %u: the empty slab taken again", c);
		accepted(s);
	}
}

Test(slab, validate_planted_faults)
{
	arena_t *a = start();
	/* a class whose blocks do not fill the bitmap's last word */
	unsigned c = 0;
	while (class_nblocks[c] % 64 == 0)
		c++;
	void *blocks[8];
	take(a, c, blocks, 8);
	give(blocks[3]);
	slab_t *s = slab_of(blocks[0]);
	arena_chunk_t *ch = chunk_hdr_of(s->base);
	size_t first = page_index(ch, s->base);
	unsigned n = s->nblocks;
	accepted(s);

	s->free_bits[0] |= 1; /* block 0, in use, marked free */
	refused(s, "nfree, not its bitmap's count");
	s->free_bits[0] &= ~1ULL;

	s->free_bits[n / 64] |= 1ULL << (n % 64); /* the first bit past the last block */
	s->nfree++;
	refused(s, "a free block past its last one");
	s->free_bits[n / 64] &= ~(1ULL << (n % 64));
	s->nfree--;

	uint16_t zero_from = s->zero_from;
	s->zero_from = 2; /* blocks 2.. read zero, but 2 is in use */
	refused(s, "a block known zero in use");
	s->zero_from = zero_from;

	s->nblocks++;
	refused(s, "blocks, not its class's");
	s->nblocks--;

	s->listed = SLAB_ON_EMPTY;
	refused(s, "on another list than its count says");
	s->listed = SLAB_ON_NONFULL;

	ch->ref[first].slab = NULL;
	refused(s, "a page not the slab's");
	ch->ref[first].slab = s;

	ch->page[first].sclass++;
	refused(s, "a page not the slab's");
	ch->page[first].sclass--;

	link_t stranger = { 0 };
	link_t *next = s->link.next;
	s->link.next = &stranger; /* its successor does not link back */
	refused(s, "not linked on its list");
	s->link.next = next;

	accepted(s);
}


/* A slab hands out its blocks in address order, the known-zero ones (from
 * zero_from on, never handed out) marked, across a bitmap word's end. */
Test(slab, alloc_batch_marks_fresh_blocks)
{
	arena_t *a = start();
	unsigned c = 0;
	while (class_nblocks[c] < 130)
		c++;
	void *b[64], *again[4];
	cr_assert_eq(take_zero(a, c, b, 64), ~0ULL, "a new slab's blocks read zero");
	slab_t *s = slab_of(b[0]);
	give(b[3]);
	give(b[63]);
	/* blocks 3 and 63 (used), then 64 and 65 (fresh) */
	cr_assert_eq(take_zero(a, c, again, 4), 0xcULL);
	cr_assert(again[0] == b[3] && again[1] == b[63]);
	cr_assert_eq((char *)again[2], s->base + 64 * class_size[c]);
	cr_assert_eq((char *)again[3], s->base + 65 * class_size[c]);
	cr_assert_eq(s->zero_from, 66);
	accepted(s);
}

/* Runs of free blocks, whole or broken, come out in address order: from
 * mid-word on and across a word's end, and around a block given back. */
Test(slab, alloc_batch_runs_in_address_order)
{
	arena_t *a = start();
	unsigned c = 0;
	while (class_nblocks[c] < 200)
		c++;
	size_t size = class_size[c];
	void *b[64], *d[64];
	take(a, c, b, 5);
	slab_t *s = slab_of(b[0]);
	for (unsigned i = 0; i < 5; i++)
		cr_assert_eq((char *)b[i], s->base + i * size);
	cr_assert_eq(take_zero(a, c, d, 64), ~0ULL, "never handed out: zero");
	for (unsigned i = 0; i < 64; i++)
		cr_assert_eq((char *)d[i], s->base + (5 + i) * size, "block %u of 64", i);
	cr_assert_eq(s->free_bits[0], 0);
	cr_assert_eq(s->free_bits[1], ~0ULL << 5);
	give(d[10]); /* block 15: a gap before the run from 69 on */
	give(d[40]); /* block 45 */
	take(a, c, b, 3);
	cr_assert(b[0] == d[10] && b[1] == d[40], "the used ones first, in order");
	cr_assert_eq((char *)b[2], s->base + 69 * size);
	cr_assert_eq(s->nfree, s->nblocks - 70);
	accepted(s);
}

/* slab_free_array gives back blocks of several slabs in any order, two
 * slabs' counts held at a time, and stops at the first block that is not a
 * slab's; every slab stays valid and ends empty. */
Test(slab, free_array_runs_and_stops)
{
	arena_t *a = start();
	static void *blocks[3 * SLAB_MAX_BLOCKS];
	unsigned c = 2, n = 3 * class_nblocks[c];
	for (unsigned got = 0; got < n; got += n - got < 64 ? n - got : 64)
		take(a, c, blocks + got, n - got < 64 ? n - got : 64);
	urng_t r = { 7 };
	for (unsigned i = n - 1; i > 0; i--) { /* a shuffle: runs of one or more */
		unsigned j = (unsigned)urng_below(&r, i + 1);
		void *t = blocks[i];
		blocks[i] = blocks[j];
		blocks[j] = t;
	}
	bool zero;
	arena_lock(a);
	char *big = arena_pages_alloc(a, 1, 1, PG_LARGE, NSMALL, &zero);
	cr_assert(big);
	void *array[] = { blocks[0], blocks[1], big, blocks[2] };
	cr_assert_eq(slab_free_array(a, array, 4), 2, "stops at the large block");
	cr_assert_eq(slab_free_array(a, blocks + 2, n - 2), n - 2);
	arena_chunk_t *bc = chunk_hdr_of(big);
	arena_pages_free(bc, page_index(bc, big), 1);
	arena_unlock(a);
	/* three slabs emptied: two kept, the third unmade */
	unsigned kept = 0;
	for (unsigned i = 0; i < n; i++) {
		slab_t *s = slab_of(blocks[i]);
		if (!s)
			continue;
		cr_assert(s->nfree == s->nblocks, "block %u's slab empty", i);
		accepted(s);
		kept++;
	}
	cr_assert_eq(kept, 2 * class_nblocks[c]);
	cr_assert_eq(a->bins[c].nempty, 2);
	cr_assert_null(list_first(&a->bins[c].nonfull, slab_t, link));
}

static void free_twice_in_array(void *arg)
{
	arena_t *a = arg;
	void *b[3];
	take(a, 1, b, 2);
	b[2] = b[0];
	arena_lock(a);
	slab_free_array(a, b, 3);
}

static void alloc_unlocked(void *arg)
{
	void *out[1];
	uint64_t zero;
	slab_alloc_batch(arg, 0, out, 1, &zero);
}

static void unlock_unheld(void *arg)
{
	arena_unlock(arg);
}

static void free_interior(void *arg)
{
	char *p = arg;
	arena_chunk_t *c = chunk_hdr_of(p);
	arena_lock(c->arena);
	slab_free_block(c, slab_of(p), p + 8); /* not a block's start */
}

/* What a debug build stops at, one line each: a caller without the arena's
 * lock, a release of a lock not held, a block that is not its slab's. */
Test(slab, assertions_stop_with_a_message)
{
	arena_t *a = start();
	char out[1024];
	expect_abort(alloc_unlocked, a, out, sizeof(out),
		     (const char *const[]){ "libarena: assertion failed: src/slab.c:",
					    ": slab_alloc_batch: mutex_held(&a->lock)", NULL });
	cr_assert_eq(count_lines(out), 1, "%s", out);
	expect_abort(unlock_unheld, a, out, sizeof(out),
		     (const char *const[]){ ": mutex_unlock: mutex_held(m)", NULL });
	void *p;
	take(a, 3, &p, 1);
	expect_abort(free_interior, p, out, sizeof(out),
		     (const char *const[]){ ": slab_free_block: ", "class_size[s->sclass]", NULL });
	give(p); /* the block itself goes back without a word */
	expect_abort(free_twice_in_array, a, out, sizeof(out),
		     (const char *const[]){ "double free", NULL });
}
