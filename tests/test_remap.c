/*
 * realloc of huge blocks moves pages, not bytes (issue 5).
 *
 * A huge block (> 1 MiB) is a run of 2 MiB chunks.  realloc shrinks it in
 * place, grows it in place into free chunks after it, and otherwise moves it
 * with mremap(MREMAP_DONTUNMAP) one kernel mapping at a time (the source
 * stays mapped, reads zero, and is freed as zero memory), or copies it below
 * ARENA_CONF remap_min or without MREMAP_DONTUNMAP.
 *
 * In this process (libarena.a, default configuration): moves keep contents
 * and do not copy (remap, whole-chunk and partly covered last chunk, 2x then
 * 5x), the source is handed out again as known-zero memory, huge pages stay
 * huge across a move, resizes in place, 100,000 moves do not pile up
 * mappings, and threads resizing huge blocks concurrently.  A move is forced
 * by placing a blocker chunk right after the block (remap.h).  Configurations
 * (sim_no_dontunmap, remap_min, populate_on_grow) and moves with the
 * process's mappings at vm.max_map_count run progs/remap in a fresh process
 * under LD_PRELOAD, which prints "key=value" facts.
 */
#include <criterion/criterion.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>

#include "arena.h"
#include "common.h"
#include "remap.h"

#define REMAP_PROG PROGS_DIR "/remap"

static arena_stats_t stats_now(void)
{
	arena_stats_t s;
	cr_assert_eq(arena_stats_get(&s), 0);
	return s;
}

#define GREW(s1, s0, field) ((unsigned long long)((s1).field - (s0).field))

/* This kernel has MREMAP_DONTUNMAP (5.7+): then the allocator must use it
 * (a probe that wrongly fails would silently turn every move into a copy). */
static void need_dontunmap(void)
{
	arena_stats_t s = stats_now();
	if (!kernel_at_least(5, 7))
		cr_skip_test("kernel older than 5.7: no MREMAP_DONTUNMAP, moves are copies");
	cr_assert_eq(s.remap_dontunmap, 1, "kernel >= 5.7 but remap_dontunmap = %u", s.remap_dontunmap);
}

static void place(placed_t *b, size_t n)
{
	cr_assert_eq(place_blocked(b, n), 0,
		     "could not place a %zu-byte block between two taken chunks (placement, not a move)", n);
}

/* A block with its next chunk taken: for the second move of a moved block. */
static void *block_after(const void *p, size_t n)
{
	void *b = take_at(end_of(p, n), CHUNK, TAKE_TRIES);
	cr_assert_not_null(b, "could not take the chunk after %p (%zu bytes)", p, n);
	return b;
}

/*
 * realloc(p of n bytes, m) where p cannot grow in place: asserts it moved by
 * mremap: a new address, one more huge_moved_remap and no copy, at least one
 * mremap per kernel mapping the block spanned (counted in /proc/self/maps
 * before), and RSS that did not grow by the block's size (a copy writes a
 * second copy of every page; a move writes none).  Returns the new block.
 */
static uint8_t *expect_remap_move(uint8_t *p, size_t n, size_t m)
{
	int maps = maps_count((uintptr_t)p, end_of(p, n));
	uintptr_t from = (uintptr_t)p;
	size_t rss0 = rss_bytes();
	arena_stats_t s0 = stats_now();
	uint8_t *q = realloc(p, m);
	arena_stats_t s1 = stats_now();
	size_t rss1 = rss_bytes();
	cr_assert_not_null(q, "realloc(%zu -> %zu) failed", n, m);
	cr_assert_neq((uintptr_t)q, from, "realloc(%zu -> %zu) of a block whose next chunk is taken stayed at %p",
		      n, m, q);
	cr_assert_eq(GREW(s1, s0, huge_moved_remap), 1,
		     "move %zu -> %zu: huge_moved_remap grew by %llu (copy by %llu)", n, m,
		     GREW(s1, s0, huge_moved_remap), GREW(s1, s0, huge_moved_copy));
	cr_assert_eq(GREW(s1, s0, huge_moved_copy), 0, "move %zu -> %zu counted as a copy", n, m);
	cr_assert_geq(GREW(s1, s0, sys_mremap), (unsigned long long)maps,
		      "move %zu -> %zu: %llu mremap calls for a block spanning %d mappings", n, m,
		      GREW(s1, s0, sys_mremap), maps);
	cr_assert_lt(rss1, rss0 + n / 2, "move %zu -> %zu: RSS grew %zu -> %zu: bytes were copied", n, m, rss0,
		     rss1);
	cr_assert_geq(malloc_usable_size(q), m);
	return q;
}

/* Asserts realloc(p, m) resized p in place (huge): same address, one more
 * huge_resized_in_place, no move, no mremap.  Catches a resize that moves
 * (or calls mremap) although the chunks it needs are free or its own. */
static uint8_t *expect_in_place(uint8_t *p, size_t n, size_t m, uint32_t seed)
{
	uintptr_t from = (uintptr_t)p;
	arena_stats_t s0 = stats_now();
	uint8_t *q = realloc(p, m);
	arena_stats_t s1 = stats_now();
	cr_assert_eq((uintptr_t)q, from, "realloc(%zu -> %zu) moved %#lx to %p, expected in place", n, m,
		     (unsigned long)from, q);
	cr_assert_eq(GREW(s1, s0, huge_resized_in_place), 1, "realloc(%zu -> %zu): in place grew by %llu", n,
		     m, GREW(s1, s0, huge_resized_in_place));
	cr_assert_eq(GREW(s1, s0, huge_moved_remap) + GREW(s1, s0, huge_moved_copy), 0);
	cr_assert_eq(GREW(s1, s0, sys_mremap), 0, "realloc(%zu -> %zu) in place called mremap", n, m);
	cr_assert_geq(malloc_usable_size(q), m);
	size_t keep = n < m ? n : m, bad = stripe_check(q, keep, seed);
	cr_assert_eq(bad, SIZE_MAX, "realloc(%zu -> %zu) in place lost byte %zu", n, m, bad);
	stripe_fill(q, keep, m, seed);
	return q;
}

/* ---- 1. a move by mremap keeps contents -------------------------------------------------------- */

/* Catches: a move that loses, shifts or truncates bytes (a wrong length, a
 * missed mapping or chunk), a block that "moves" without mremap (a copy), a
 * block that grows over its neighbour, and, for 5 MiB + 12 KiB (whole
 * chunks MADV_HUGEPAGE, the partly covered last one MADV_NOHUGEPAGE: two
 * mappings), a move that treats two mappings as one (one mremap for both,
 * which kernels before 6.17 refuse). */
static void move_2x_5x(size_t n, uint32_t seed)
{
	need_dontunmap();
	placed_t b;
	place(&b, n);
	pat_fill(b.p, 0, n, seed);
	uint8_t *q = expect_remap_move(b.p, n, 2 * n);
	size_t bad = pat_check(q, 0, n, seed);
	cr_assert_eq(bad, SIZE_MAX, "2x move of %zu bytes to %p lost byte %zu", n, q, bad);
	pat_fill(q, n, 2 * n, seed);

	void *blk = block_after(q, 2 * n);
	uint8_t *r = expect_remap_move(q, 2 * n, 5 * n);
	bad = pat_check(r, 0, 2 * n, seed);
	cr_assert_eq(bad, SIZE_MAX, "5x move of %zu bytes to %p lost byte %zu", 2 * n, r, bad);
	pat_fill(r, 2 * n, 5 * n, seed); /* the new tail is writable */
	cr_assert_eq(pat_check(r, 0, 5 * n, seed), SIZE_MAX);
	free(blk);
	placed_release(&b);
	free(r);
}

Test(move, whole_chunks_keep_contents, .timeout = 60)
{
	move_2x_5x(8 * MiB, 11);
}

Test(move, partial_last_chunk_two_mappings_keep_contents, .timeout = 60)
{
	char mode[16];
	size_t n = 5 * MiB + 12 * KiB;
	need_dontunmap();
	/* with THP advice the block spans two mappings: check the premise */
	if (thp_sys_mode(mode, sizeof mode) == 0 && strcmp(mode, "never") != 0) {
		placed_t b;
		place(&b, n);
		int maps = maps_count((uintptr_t)b.p, end_of(b.p, n));
		cr_assert_geq(maps, 2, "5 MiB + 12 KiB block %p spans %d mapping(s), expected 2 (THP advice)", b.p,
			      maps);
		placed_release(&b);
		free(b.p);
	}
	move_2x_5x(n, 12);
}

/* A block moved into chunks that already carry its advice (a freed 8 MiB
 * block's: no madvise, so no new mapping boundary is announced there), then
 * shrunk and grown back in place: it now spans the mapping its pages were
 * moved into and the rest of the old one.  Its next move must give mremap
 * each mapping separately.  Catches: the allocator's record of mapping
 * boundaries (map_tag) not updated by a move, so two mappings look like one
 * (one mremap across both: refused before Linux 6.17, which then copies). */
Test(move, moved_then_grown_in_place_moves_again, .timeout = 60)
{
	need_dontunmap();
	placed_t home, b;
	place(&home, 8 * MiB);           /* 4 chunks that will be free, between taken ones */
	place(&b, 4 * MiB);
	pat_fill(b.p, 0, 4 * MiB, 13);
	uintptr_t dst = (uintptr_t)home.p;
	free(home.p);                    /* the newest free run of 4 chunks: the move's target */
	uint8_t *q = expect_remap_move(b.p, 4 * MiB, 8 * MiB);
	cr_assert_eq((uintptr_t)q, dst, "the 4 MiB block moved to %p, not into the freed 8 MiB block at %#lx", q,
		     (unsigned long)dst);
	q = expect_in_place(q, 8 * MiB, 4 * MiB, 13);
	q = expect_in_place(q, 4 * MiB, 8 * MiB, 13);
	int maps = maps_count((uintptr_t)q, (uintptr_t)q + 8 * MiB);
	if (maps < 2)
		cr_skip_test("the kernel merged the moved pages' mapping with its neighbour: nothing to test");
	uint8_t *r = expect_remap_move(q, 8 * MiB, 16 * MiB); /* home's blocker is after it */
	size_t bad = pat_check(r, 0, 4 * MiB, 13);
	cr_assert_eq(bad, SIZE_MAX, "moved, grown in place and moved again: byte %zu lost", bad);
	placed_release(&b);
	placed_release(&home);
	free(r);
}

/* ---- 2. the source left behind is zero ------------------------------------------------------------ */

/* After a move the old chunks are free and known zero: between the guard
 * and the blocker they form a run of their own, at the head of the free
 * list, so calloc of the same size must get them back; it must read zero,
 * and skip its memset (memset_skipped grows by the block's usable size).
 * Catches: source chunks not freed (calloc lands elsewhere), freed as zero
 * while still holding the old bytes (calloc reads them), or freed as dirty
 * (calloc writes what it could skip). */
static void source_reads_zero(size_t n)
{
	need_dontunmap();
	placed_t b;
	place(&b, n);
	memset(b.p, 0xA5, n);
	uintptr_t old = (uintptr_t)b.p;
	uint8_t *q = expect_remap_move(b.p, n, 3 * n);
	arena_stats_t s0 = stats_now();
	uint8_t *z = calloc(1, n);
	arena_stats_t s1 = stats_now();
	cr_assert_not_null(z);
	cr_assert_eq((uintptr_t)z, old, "calloc(%zu) after the move got %p, not the freed source %#lx", n, z,
		     (unsigned long)old);
	size_t nz = first_nonzero(z, n);
	cr_assert_eq(nz, SIZE_MAX, "calloc(%zu) over the moved-from chunks: byte %zu is 0x%02x", n, nz,
		     nz == SIZE_MAX ? 0 : z[nz]);
	cr_assert_eq(GREW(s1, s0, memset_skipped), malloc_usable_size(z),
		     "calloc(%zu) over the moved-from chunks: memset_skipped grew by %llu, expected %zu", n,
		     GREW(s1, s0, memset_skipped), malloc_usable_size(z));
	for (size_t i = 0; i < n; i++)
		if (q[i] != 0xA5)
			cr_assert_fail("the moved block (%p) lost byte %zu: 0x%02x", q, i, q[i]);
	free(z);
	placed_release(&b);
	free(q);
}

Test(source, whole_chunks_come_back_zero, .timeout = 60)
{
	source_reads_zero(8 * MiB);
}

Test(source, partial_last_chunk_comes_back_zero, .timeout = 60)
{
	source_reads_zero(5 * MiB + 12 * KiB);
}

/* ---- 3. huge pages move as huge pages --------------------------------------------------------------- */

/* An 8 MiB block of whole chunks, written: 4 huge pages.  After a forced
 * move its mappings still hold >= 8 MiB of AnonHugePages and the old range
 * none.  Catches: a move that splits the huge pages (an unaligned or
 * partial move), or a copy into memory that is not advised huge (a
 * fallback that maps the destination afresh, without MADV_HUGEPAGE). */
Test(thp, huge_pages_move_as_huge_pages, .timeout = 60)
{
	arena_stats_t s = stats_now();
	if (strcmp(s.thp_mode, "madvise") != 0 && strcmp(s.thp_mode, "always") != 0)
		cr_skip_test("THP mode is %s: no huge pages to move", s.thp_mode);
	need_dontunmap();
	const size_t n = 8 * MiB;
	placed_t b;
	place(&b, n);
	pat_fill(b.p, 0, n, 31);
	size_t before = smaps_anon_huge_range((uintptr_t)b.p, (uintptr_t)b.p + n);
	size_t total_before = arena_stats_anon_huge();
	if (before < n || total_before < n)
		cr_skip_test("the written 8 MiB block got %zu KiB of huge pages (%zu KiB in all): none to move",
			     before >> 10, total_before >> 10);
	uintptr_t old = (uintptr_t)b.p;
	uint8_t *q = expect_remap_move(b.p, n, 2 * n);
	size_t after = smaps_anon_huge_range((uintptr_t)q, (uintptr_t)q + n);
	size_t total_after = arena_stats_anon_huge();
	size_t left = smaps_anon_huge_range(old, old + n);
	cr_log_info("AnonHugePages of the block: %zu KiB before, %zu KiB after the move; %zu KiB left at the source",
		    before >> 10, after >> 10, left >> 10);
	cr_assert_geq(after, n, "after the move the block has %zu KiB of huge pages, before %zu KiB", after >> 10,
		      before >> 10);
	cr_assert_geq(total_after, n, "arena_stats_anon_huge() after the move: %zu KiB", total_after >> 10);
	cr_assert_eq(left, 0, "the moved-from chunks still hold %zu KiB of huge pages", left >> 10);
	size_t bad = pat_check(q, 0, n, 31);
	cr_assert_eq(bad, SIZE_MAX, "moved huge pages lost byte %zu", bad);
	placed_release(&b);
	free(q);
}

/* ---- 5. grow and shrink in place ---------------------------------------------------------------- */

/* A 4 MiB block at the start of a freed 8 MiB span: the chunks after it are
 * free, so it grows in place, also by part of a chunk and within its last
 * chunk. */
Test(in_place, grow_into_free_chunks, .timeout = 60)
{
	void *span = malloc(8 * MiB);
	cr_assert_not_null(span);
	uintptr_t x = (uintptr_t)span;
	free(span);
	uint8_t *p = take_at(x, 4 * MiB, TAKE_TRIES);
	cr_assert_not_null(p, "could not take a 4 MiB block at the start of a freed span");
	stripe_fill(p, 0, 4 * MiB, 51);
	p = expect_in_place(p, 4 * MiB, 5 * MiB + 12 * KiB, 51);   /* one more chunk, partly */
	p = expect_in_place(p, 5 * MiB + 12 * KiB, 6 * MiB, 51);   /* within the last chunk */
	p = expect_in_place(p, 6 * MiB, 8 * MiB, 51);              /* one more whole chunk */
	free(p);
}

/* Shrink (same address, tail chunks freed), then grow back into them. */
Test(in_place, shrink_then_grow_back, .timeout = 60)
{
	uint8_t *p = malloc(16 * MiB);
	cr_assert_not_null(p);
	stripe_fill(p, 0, 16 * MiB, 52);
	p = expect_in_place(p, 16 * MiB, 3 * MiB, 52);
	p = expect_in_place(p, 3 * MiB, 2 * MiB + 4 * KiB, 52);
	p = expect_in_place(p, 2 * MiB + 4 * KiB, 16 * MiB, 52);
	cr_assert_eq(stripe_check(p, 16 * MiB, 52), SIZE_MAX);
	free(p);
}

/* A large block (page run in an arena chunk) shrunk keeps its address.
 * Catches a shrink that allocates and copies. */
Test(in_place, large_block_shrinks_in_place, .timeout = 60)
{
	const size_t sizes[] = { 200 * KiB, 120 * KiB, 64 * KiB, 40 * KiB, 20 * KiB };
	uint8_t *p = malloc(sizes[0]);
	cr_assert_not_null(p);
	pat_fill(p, 0, sizes[0], 53);
	for (size_t i = 1; i < sizeof sizes / sizeof sizes[0]; i++) {
		uintptr_t from = (uintptr_t)p;
		uint8_t *q = realloc(p, sizes[i]);
		cr_assert_eq((uintptr_t)q, from, "realloc(%zu -> %zu) of a large block moved it: %#lx -> %p",
			     sizes[i - 1], sizes[i], (unsigned long)from, q);
		p = q;
		size_t bad = pat_check(q, 0, sizes[i], 53);
		cr_assert_eq(bad, SIZE_MAX, "realloc(%zu -> %zu) lost byte %zu", sizes[i - 1], sizes[i], bad);
	}
	free(p);
}

/* ---- 6. mappings stay bounded ---------------------------------------------------------------------- */

/*
 * Two 4-chunk slots between guard chunks: [g][slot 1][g][slot 2][g].  The
 * 4 MiB block fills half a slot and a 4 MiB filler the other half, so
 * growing to 8 MiB must move it, to the other slot (the only free 4-chunk
 * run, and the newest).  Then the filler is freed, the block shrinks back in
 * place, and a new filler takes the chunks it freed: the next growth moves
 * it back.  Every round trip is two mremap moves over the same 10 chunks.
 */
typedef struct pingpong {
	uint8_t *a;          /* the block (4 MiB between moves) */
	uintptr_t addr;      /* its address, for messages */
	void *filler;        /* 4 MiB right after it */
	void *guard[3];
	uint64_t misses;     /* rounds whose filler did not land after the block */
} pingpong_t;

static void pingpong_setup(pingpong_t *pp)
{
	void *span = malloc(11 * CHUNK);
	cr_assert_not_null(span);
	uintptr_t x = (uintptr_t)span;
	free(span);
	pp->guard[0] = take_at(x, CHUNK, TAKE_TRIES);
	pp->a = take_at(x + CHUNK, 4 * MiB, TAKE_TRIES);
	pp->filler = take_at(x + 3 * CHUNK, 4 * MiB, TAKE_TRIES);
	pp->guard[1] = take_at(x + 5 * CHUNK, CHUNK, TAKE_TRIES);
	pp->guard[2] = take_at(x + 10 * CHUNK, CHUNK, TAKE_TRIES);
	cr_assert(pp->guard[0] && pp->a && pp->filler && pp->guard[1] && pp->guard[2],
		  "could not lay out two slots between guards at %#lx", (unsigned long)x);
	pp->misses = 0;
	pp->addr = (uintptr_t)pp->a;
	/* one word in each of its two chunks: they move with it */
	memcpy(pp->a, &(uint64_t){ 0 }, 8);
	memcpy(pp->a + CHUNK, &(uint64_t){ 0 }, 8);
}

/* Round i: grow (a move), check and bump the words, shrink back, refill. */
static void pingpong_round(pingpong_t *pp, uint64_t i)
{
	uintptr_t from = pp->addr;
	uint8_t *q = realloc(pp->a, 8 * MiB);
	if (!q)
		cr_assert_fail("round %llu: realloc(4 MiB -> 8 MiB) failed", (unsigned long long)i);
	pp->a = q;
	uint64_t w0, w1;
	memcpy(&w0, q, 8);
	memcpy(&w1, q + CHUNK, 8);
	if (w0 != i || w1 != i)
		cr_assert_fail("round %llu: after realloc %#lx -> %p the block's words are %llu, %llu",
			       (unsigned long long)i, (unsigned long)from, q, (unsigned long long)w0, (unsigned long long)w1);
	i++;
	memcpy(q, &i, 8);
	memcpy(q + CHUNK, &i, 8);
	free(pp->filler);
	uintptr_t grown = (uintptr_t)q;
	pp->a = realloc(q, 4 * MiB);
	pp->addr = (uintptr_t)pp->a;
	if (pp->addr != grown)
		cr_assert_fail("round %llu: shrinking 8 MiB -> 4 MiB moved %#lx to %p", (unsigned long long)i,
			       (unsigned long)grown, pp->a);
	pp->filler = take_at(end_of(pp->a, 4 * MiB), 4 * MiB, 8);
	if (!pp->filler)
		pp->misses++;
}

#define PP_ROUNDS 100000
#define PP_CHECKPOINT 10000

/* Catches: mappings that pile up with every move (a source left as a hole
 * and mapped afresh elsewhere, chunks leaked so that every move takes new
 * address space, a mapping per chunk kept forever), which would end at
 * vm.max_map_count with mremap failing (ENOMEM) and every move copying. */
Test(mappings, bounded_after_100k_moves, .timeout = 120)
{
	need_dontunmap();
	pingpong_t pp;
	pingpong_setup(&pp);
	arena_stats_t s0 = stats_now();
	double t0 = now_s();
	int maps_start = maps_count(0, 0), maps_mid = -1;
	for (uint64_t i = 0; i < PP_ROUNDS; i++) {
		pingpong_round(&pp, i);
		if (i + 1 == PP_CHECKPOINT)
			maps_mid = maps_count(0, 0);
	}
	int maps_end = maps_count(0, 0);
	double dt = now_s() - t0;
	arena_stats_t s1 = stats_now();
	long limit = max_map_count();
	cr_log_info("%d moves: %llu by mremap, %llu copied, %llu fillers missed; mappings %d at the start, "
		    "%d after %d, %d after %d (vm.max_map_count %ld); %.1f s",
		    PP_ROUNDS, GREW(s1, s0, huge_moved_remap), GREW(s1, s0, huge_moved_copy),
		    (unsigned long long)pp.misses, maps_start, maps_mid, PP_CHECKPOINT, maps_end, PP_ROUNDS, limit,
		    dt);
	cr_assert_geq(GREW(s1, s0, huge_moved_remap), PP_ROUNDS * 9ull / 10,
		      "only %llu of %d growths moved by mremap (%llu copied, %llu in place)",
		      GREW(s1, s0, huge_moved_remap), PP_ROUNDS, GREW(s1, s0, huge_moved_copy),
		      GREW(s1, s0, huge_resized_in_place));
	cr_assert_eq(GREW(s1, s0, huge_moved_copy), 0, "%llu moves fell back to copying",
		     GREW(s1, s0, huge_moved_copy));
	cr_assert_leq(maps_end, maps_mid + 16, "mappings: %d after %d moves, %d after %d", maps_mid,
		      PP_CHECKPOINT, maps_end, PP_ROUNDS);
	cr_assert_lt(maps_end, limit / 8, "%d mappings (vm.max_map_count %ld)", maps_end, limit);
	free(pp.a);
	free(pp.filler);
	for (int k = 0; k < 3; k++)
		free(pp.guard[k]);
}

/* ---- 7. threads ---------------------------------------------------------------------------------- */

#define NRESIZERS 4
#define NMIXERS 2
#define RESIZES 800          /* per resizing thread */
#define RBLOCKS 2            /* huge blocks per resizing thread */

typedef struct resizer {
	unsigned id;
	unsigned long resizes, forced;
} resizer_t;

static atomic_int resizers_left;

/* realloc of block k to m, forced to move now and then (a blocker in the
 * chunk after it when it must grow by chunks); checks the kept stripes and
 * writes the new ones.  0, or -1 after a tfail. */
static int resize_one(resizer_t *w, uint8_t **p, size_t *n, uint32_t seed, size_t m, int force)
{
	void *blk = NULL;
	if (force && chunks_of(m) > chunks_of(*n)) {
		blk = take_at(end_of(*p, *n), CHUNK, 16);
		w->forced += blk != NULL;
	}
	uint8_t *q = realloc(*p, m);
	if (!q) {
		tfail("thread %u: realloc(%zu -> %zu) failed", w->id, *n, m);
		free(blk);
		*p = NULL, *n = 0; /* left to leak: the test has failed */
		return -1;
	}
	*p = q;
	size_t keep = *n < m ? *n : m, bad = stripe_check(q, keep, seed);
	if (bad != SIZE_MAX) {
		tfail("thread %u: realloc(%zu -> %zu) = %p%s lost byte %zu", w->id, *n, m, q,
		      blk ? " (forced move)" : "", bad);
		free(blk);
		return -1;
	}
	stripe_fill(q, keep, m, seed);
	free(blk);
	*n = m;
	w->resizes++;
	return 0;
}

static void *resizer_main(void *arg)
{
	resizer_t *w = arg;
	rng_t r;
	rng_seed(&r, 7000 + w->id);
	uint8_t *p[RBLOCKS];
	size_t n[RBLOCKS];
	uint32_t seed[RBLOCKS];
	for (int k = 0; k < RBLOCKS; k++) {
		n[k] = rng_logsize(&r, 3 * MiB / 2, 64 * MiB);
		seed[k] = w->id * 16 + (uint32_t)k;
		p[k] = malloc(n[k]);
		if (!p[k]) {
			tfail("thread %u: malloc(%zu) failed", w->id, n[k]);
			return NULL;
		}
		stripe_fill(p[k], 0, n[k], seed[k]);
	}
	for (int i = 0; i < RESIZES && !tfailed(); i++) {
		int k = (int)rng_below(&r, RBLOCKS);
		size_t m = rng_logsize(&r, 3 * MiB / 2, 64 * MiB);
		if (resize_one(w, &p[k], &n[k], seed[k], m, rng_below(&r, 2) == 0))
			break;
	}
	for (int k = 0; k < RBLOCKS; k++) {
		size_t bad = stripe_check(p[k], n[k], seed[k]);
		if (bad != SIZE_MAX)
			tfail("thread %u: block %p of %zu bytes corrupt at %zu at the end", w->id, p[k], n[k], bad);
		free(p[k]);
	}
	atomic_fetch_sub(&resizers_left, 1);
	return NULL;
}

/* Small and large blocks (rarely a huge one) allocated, checked and freed
 * until the resizers are done. */
static void *mixer_main(void *arg)
{
	uint32_t me = (uint32_t)(uintptr_t)arg;
	rng_t r;
	rng_seed(&r, 9000 + me);
	rec_t *slot[64] = { 0 };
	while (atomic_load(&resizers_left) > 0 && !tfailed()) {
		int k = (int)rng_below(&r, 64);
		if (slot[k]) {
			rec_free(slot[k], me);
			slot[k] = NULL;
		} else {
			slot[k] = rec_new(&r, me);
		}
	}
	for (int k = 0; k < 64; k++)
		if (slot[k])
			rec_free(slot[k], me);
	return NULL;
}

/* Catches: races between moves and other chunk traffic (a source freed
 * before its pages moved, a destination handed out twice, descriptors of
 * moved chunks updated under another thread's feet), seen as lost or
 * foreign bytes in a block, and moves falling back to copies. */
Test(threads, resizers_and_mixers, .timeout = 120)
{
	need_dontunmap();
	pthread_t t[NRESIZERS + NMIXERS];
	resizer_t w[NRESIZERS];
	atomic_store(&resizers_left, NRESIZERS);
	arena_stats_t s0 = stats_now();
	double t0 = now_s();
	for (unsigned i = 0; i < NRESIZERS; i++) {
		w[i] = (resizer_t){ .id = i };
		cr_assert_eq(pthread_create(&t[i], NULL, resizer_main, &w[i]), 0);
	}
	for (unsigned i = 0; i < NMIXERS; i++)
		cr_assert_eq(pthread_create(&t[NRESIZERS + i], NULL, mixer_main, (void *)(uintptr_t)(100 + i)), 0);
	for (unsigned i = 0; i < NRESIZERS + NMIXERS; i++)
		pthread_join(t[i], NULL);
	arena_stats_t s1 = stats_now();
	cr_assert(!tfailed(), "%s", tfail_msg);
	unsigned long resizes = 0, forced = 0;
	for (unsigned i = 0; i < NRESIZERS; i++)
		resizes += w[i].resizes, forced += w[i].forced;
	cr_log_info("%lu reallocs (%lu forced to move) in %.1f s: %llu moved by mremap, %llu copied, %llu in place",
		    resizes, forced, now_s() - t0, GREW(s1, s0, huge_moved_remap), GREW(s1, s0, huge_moved_copy),
		    GREW(s1, s0, huge_resized_in_place));
	cr_assert_eq(resizes, (unsigned long)NRESIZERS * RESIZES);
	cr_assert_gt(forced, 0, "no move was forced: nothing tested");
	cr_assert_geq(GREW(s1, s0, huge_moved_remap), forced, "%lu moves forced, %llu moved by mremap", forced,
		      GREW(s1, s0, huge_moved_remap));
	cr_assert_eq(GREW(s1, s0, huge_moved_copy), 0, "%llu moves fell back to copying",
		     GREW(s1, s0, huge_moved_copy));
}

/* ---- configurations, in fresh processes (progs/remap) -------------------------------------------- */

/* Runs progs/remap with args under ARENA_CONF=conf (no ARENA_CONF when
 * conf is NULL) and requires "ok", exit 0 and an empty stderr (a bad
 * ARENA_CONF key would warn there); r must be freed. */
static void expect_ok(const char *conf, const char *const args[], run_result *r)
{
	const char *argv[16] = { REMAP_PROG };
	int n = 1;
	for (; args[n - 1] && n < 15; n++)
		argv[n] = args[n - 1];
	argv[n] = NULL;
	char conf_var[256];
	snprintf(conf_var, sizeof conf_var, "ARENA_CONF=%s", conf ? conf : "");
	const char *env[] = { "LD_PRELOAD=" ARENA_SO, conf ? conf_var : NULL, NULL };
	cr_assert_eq(run_prog(argv, env, NULL, 60, r), 0, "cannot run %s", REMAP_PROG);
	cr_assert(run_exited0(r) && contains(r->out, "\nok\n"), "remap %s under ARENA_CONF=%s: %s\n%s\nstderr: %s",
		  args[0], conf ? conf : "(none)", r->desc, r->out, r->err);
	cr_assert_eq(r->err_len, 0, "ARENA_CONF=%s: stderr: %s", conf ? conf : "(none)", r->err);
}

/* TAG.key of the output, or -1. */
static long long fact(const run_result *r, const char *tag, const char *key)
{
	char k[64];
	snprintf(k, sizeof k, "%s.%s", tag, key);
	return kv_num(r->out, k, -1);
}

/* Asserts the move of tag was by mremap (remap) or by copying. */
static void expect_moved_by(const run_result *r, const char *conf, const char *tag, int remap)
{
	cr_assert_eq(fact(r, tag, "moved"), 1, "ARENA_CONF=%s: %s block did not move\n%s", conf, tag, r->out);
	cr_assert_eq(fact(r, tag, "remap"), remap, "ARENA_CONF=%s: %s block: huge_moved_remap delta\n%s", conf,
		     tag, r->out);
	cr_assert_eq(fact(r, tag, "copy"), !remap, "ARENA_CONF=%s: %s block: huge_moved_copy delta\n%s", conf,
		     tag, r->out);
	if (remap)
		cr_assert_geq(fact(r, tag, "mremap"), 1, "ARENA_CONF=%s: %s block moved without mremap\n%s", conf,
			      tag, r->out);
	else
		cr_assert_eq(fact(r, tag, "mremap"), 0, "ARENA_CONF=%s: %s block copied with %lld mremap calls\n%s",
			     conf, tag, fact(r, tag, "mremap"), r->out);
}

static const char *const FALLBACK_SIZES[] = { "8m", "5132k", "16m" };

/* The control for the next test: without ARENA_CONF every forced move is by
 * mremap (so the copies there come from the configuration). */
Test(fallback, default_moves_by_mremap, .timeout = 60)
{
	need_dontunmap();
	run_result r;
	const char *args[] = { "moves", "8m", "5132k", "16m", NULL };
	expect_ok(NULL, args, &r);
	cr_assert_eq(kv_num(r.out, "remap_dontunmap", -1), 1, "%s", r.out);
	for (size_t i = 0; i < sizeof FALLBACK_SIZES / sizeof *FALLBACK_SIZES; i++)
		expect_moved_by(&r, "(none)", FALLBACK_SIZES[i], 1);
	run_result_free(&r);
}

/* Without MREMAP_DONTUNMAP every move copies and no mremap is ever made.
 * Catches: the simulation ignored (mremap used anyway), or a move that
 * counts as a copy but loses bytes. */
Test(fallback, no_dontunmap_copies, .timeout = 60)
{
	run_result r;
	const char *args[] = { "moves", "8m", "5132k", "16m", NULL };
	expect_ok("sim_no_dontunmap:true", args, &r);
	cr_assert_eq(kv_num(r.out, "remap_dontunmap", -1), 0, "%s", r.out);
	cr_assert_eq(kv_num(r.out, "sys_mremap", -1), 0, "sim_no_dontunmap: mremap was called\n%s", r.out);
	for (size_t i = 0; i < sizeof FALLBACK_SIZES / sizeof *FALLBACK_SIZES; i++)
		expect_moved_by(&r, "sim_no_dontunmap:true", FALLBACK_SIZES[i], 0);
	run_result_free(&r);
}

/* remap_min: blocks smaller than it are copied, blocks at least as big are
 * moved by mremap; the same with the threshold in KiB and in bytes.
 * Catches: remap_min ignored or misparsed (suffix), compared with the new
 * size instead of the block's, or off by one at the threshold. */
Test(fallback, remap_min_threshold, .timeout = 60)
{
	need_dontunmap();
	const char *confs[] = { "remap_min:64m", "remap_min:65536k", "remap_min:67108864" };
	const char *args[] = { "moves", "16m", "63m", "64m", "96m", NULL };
	for (size_t i = 0; i < sizeof confs / sizeof *confs; i++) {
		run_result r;
		expect_ok(confs[i], args, &r);
		cr_assert_eq(kv_num(r.out, "remap_dontunmap", -1), 1, "%s", r.out);
		expect_moved_by(&r, confs[i], "16m", 0);
		expect_moved_by(&r, confs[i], "63m", 0);
		expect_moved_by(&r, confs[i], "64m", 1);
		expect_moved_by(&r, confs[i], "96m", 1);
		run_result_free(&r);
	}
}

/* ---- the kernel refuses a move: out of mappings -------------------------------------------------- */

/* Runs progs/remap maplimit SPARE (default configuration); r must be freed. */
static void run_maplimit(int spare, run_result *r)
{
	char arg[16];
	snprintf(arg, sizeof arg, "%d", spare);
	const char *args[] = { "maplimit", arg, NULL };
	expect_ok(NULL, args, r);
	char res[16];
	kv_str(r->out, "maplimit.result", res, sizeof res);
	cr_log_info("maplimit %d: %d mappings, %s (remap %lld, copy %lld)", spare,
		    (int)kv_num(r->out, "maplimit.maps_before", -1), res, kv_num(r->out, "maplimit.remap", -1),
		    kv_num(r->out, "maplimit.copy", -1));
	if (!strcmp(res, "moved"))
		cr_assert_eq(kv_num(r->out, "maplimit.remap", -1) + kv_num(r->out, "maplimit.copy", -1), 1, "%s",
			     r->out);
	else
		cr_assert_str_eq(res, "enomem", "%s", r->out);
}

/* A few mappings short of vm.max_map_count the kernel refuses mremap
 * (ENOMEM) and the move must fall back to copying (or fail with ENOMEM),
 * contents kept.  Catches: a refused move that loses the block or its
 * bytes, or kills the program. */
Test(mappings, move_near_map_count_limit, .timeout = 60)
{
	need_dontunmap();
	int copied = 0;
	for (int spare = 1; spare <= 4; spare++) {
		run_result r;
		run_maplimit(spare, &r);
		copied += kv_num(r.out, "maplimit.copy", 0) == 1;
		run_result_free(&r);
	}
	cr_assert_gt(copied, 0, "no refused move was exercised (every move near the limit went through)");
}

/* At the limit itself the kernel refuses the move before it touches the
 * destination; the fallback must copy into the still-mapped destination,
 * not map it afresh (which needs a split the process has no mapping left
 * for).  Caught before the fix: libarena aborted ("cannot map ... again
 * after a failed mremap"). */
Test(mappings, move_at_map_count_limit_does_not_abort, .timeout = 60)
{
	need_dontunmap();
	run_result r;
	run_maplimit(0, &r);
	run_result_free(&r);
}

/* ---- 8. populate_on_grow ---------------------------------------------------------------------------- */

#define TAIL_CHUNKS 128 /* progs/remap grows blocks by 256 MiB */

/* With populate_on_grow:true a grown block's new tail (256 MiB, in place
 * and after a move) is faulted in by the realloc: writing it takes almost
 * no faults (under 64, where it would take at least 128 huge-page faults,
 * or 65536 without huge pages).  Catches: the option ignored, or applied to
 * the wrong range (the head instead of the new tail). */
Test(populate, on_grow_true_prefaults_tail, .timeout = 60)
{
	run_result r;
	const char *args[] = { "populate", NULL };
	expect_ok("populate_on_grow:true", args, &r);
	long long in = kv_num(r.out, "inplace.tail_faults", -1), mv = kv_num(r.out, "moved.tail_faults", -1);
	cr_log_info("populate_on_grow:true: writing a 256 MiB tail took %lld faults (in place), %lld (moved)", in,
		    mv);
	cr_assert(in >= 0 && in < 64, "grown in place: writing the new 256 MiB tail took %lld faults\n%s", in,
		  r.out);
	cr_assert(mv >= 0 && mv < 64, "grown by a move: writing the new 256 MiB tail took %lld faults\n%s", mv,
		  r.out);
	run_result_free(&r);
}

/* The default: the tail is not faulted in, so writing it takes at least a
 * fault per 2 MiB.  Catches populating by default (memory committed that
 * the program may never touch), and shows the test above measures faults. */
Test(populate, default_leaves_tail_to_faults, .timeout = 60)
{
	run_result r;
	const char *args[] = { "populate", NULL };
	expect_ok(NULL, args, &r);
	long long in = kv_num(r.out, "inplace.tail_faults", -1), mv = kv_num(r.out, "moved.tail_faults", -1);
	cr_log_info("default: writing a 256 MiB tail took %lld faults (in place), %lld (moved)", in, mv);
	cr_assert_geq(in, TAIL_CHUNKS, "grown in place: writing the new 256 MiB tail took %lld faults\n%s", in,
		      r.out);
	cr_assert_geq(mv, TAIL_CHUNKS, "grown by a move: writing the new 256 MiB tail took %lld faults\n%s", mv,
		      r.out);
	run_result_free(&r);
}
