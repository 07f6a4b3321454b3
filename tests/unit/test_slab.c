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

/* n blocks of sclass into out, under a's lock. */
static unsigned take(arena_t *a, unsigned sclass, void **out, unsigned n)
{
	uint64_t zero;
	arena_lock(a);
	unsigned got = slab_alloc_batch(a, sclass, out, n, &zero);
	arena_unlock(a);
	cr_assert_eq(got, n, "slab_alloc_batch(class %u, %u) gave %u", sclass, n, got);
	return got;
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
}
