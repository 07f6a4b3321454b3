/*
 * realloc: contents survive every transition between size classes and kinds
 * (small, large, huge), growing and shrinking; long random walks; failure
 * leaves the block intact; reallocarray overflow.
 */
#include <criterion/criterion.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>

#include "arena.h"
#include "common.h"

typedef void *(*realloc_fn)(void *, size_t);

/* Checks [0, n) of p against seed, failing with a precise message. */
static void expect_pattern(const void *p, size_t n, uint32_t seed, const char *ctx, size_t from,
			   size_t to)
{
	size_t bad = pat_check(p, 0, n, seed);
	if (bad != SIZE_MAX)
		cr_assert_fail("%s %zu -> %zu: byte %zu of %zu is %#x, expected %#x (block %p)", ctx,
			       from, to, bad, n, ((const uint8_t *)p)[bad], pat_byte(bad, seed), p);
}

/* realloc(p of size from, to) keeps the first min(from, to) bytes. */
static void *transition(realloc_fn re, void *p, size_t from, size_t to, uint32_t seed,
			const char *ctx)
{
	void *q = re(p, opaque_size(to));
	cr_assert_not_null(q, "%s %zu -> %zu returned NULL", ctx, from, to);
	cr_assert(is_aligned(q, 16), "%s %zu -> %zu: %p not 16-aligned", ctx, from, to, q);
	cr_assert_geq(malloc_usable_size(q), to, "%s %zu -> %zu: usable size %zu", ctx, from, to,
		      malloc_usable_size(q));
	expect_pattern(q, from < to ? from : to, seed, ctx, from, to);
	if (to > from)
		pat_fill(q, from, to, seed);
	return q;
}

static const size_t SIZES[] = {
	1, 8, 16, 17, 100, 128, 129, 1000, 4096, 16383, 16384, 16385, 20000, 65536,
	300000, MiB - 1, MiB, MiB + 1, 2 * MiB - 1, 2 * MiB, 2 * MiB + 1, 3 * MiB,
	5 * MiB + 123, 17 * MiB,
};
enum { NSIZES = sizeof SIZES / sizeof *SIZES };

/* Every ordered pair of sizes: small<->large<->huge, both ways. */
static void all_pairs(realloc_fn re, const char *ctx)
{
	uint32_t seed = 1;
	for (int i = 0; i < NSIZES; i++) {
		for (int j = 0; j < NSIZES; j++) {
			if (i == j)
				continue;
			seed++;
			void *p = malloc(SIZES[i]);
			cr_assert_not_null(p);
			pat_fill(p, 0, SIZES[i], seed);
			p = transition(re, p, SIZES[i], SIZES[j], seed, ctx);
			/* and back again */
			p = transition(re, p, SIZES[j], SIZES[i], seed, ctx);
			expect_pattern(p, SIZES[i], seed, ctx, SIZES[j], SIZES[i]);
			free(p);
		}
	}
}

Test(realloc, every_transition_keeps_contents, .timeout = 120)
{
	all_pairs(realloc, "realloc");
}

Test(realloc, every_transition_keeps_contents_arena, .timeout = 120)
{
	all_pairs(arena_realloc, "arena_realloc");
}

/* Resizing inside the same size class (and within the usable size). */
Test(realloc, same_class_keeps_contents)
{
	static const size_t sizes[] = { 1, 20, 100, 130, 1000, 5000, 16000, 17000, 100000, 900000,
					MiB + 10, 3 * MiB + 5 };
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
		size_t n = sizes[i];
		uint8_t *p = malloc(n);
		cr_assert_not_null(p);
		size_t u = malloc_usable_size(p);
		pat_fill(p, 0, n, (uint32_t)i);
		/* grow to the usable size, shrink by one, grow by one */
		p = transition(realloc, p, n, u, (uint32_t)i, "realloc same class");
		p = transition(realloc, p, u, u - 1, (uint32_t)i, "realloc same class");
		p = transition(realloc, p, u - 1, u, (uint32_t)i, "realloc same class");
		p = transition(realloc, p, u, n, (uint32_t)i, "realloc same class");
		expect_pattern(p, n, (uint32_t)i, "realloc same class", u, n);
		free(p);
	}
}

/* One byte at a time up to 5000, then by growing steps up to 8 MiB, then down. */
Test(realloc, grow_and_shrink_step_by_step, .timeout = 120)
{
	uint32_t seed = 77;
	size_t n = 1;
	uint8_t *p = malloc(n);
	cr_assert_not_null(p);
	pat_fill(p, 0, n, seed);
	for (; n < 5000; n++)
		p = transition(realloc, p, n, n + 1, seed, "realloc +1");
	rng_t r;
	rng_seed(&r, 5);
	while (n < 8 * MiB) {
		size_t m = n + 1 + rng_below(&r, n / 4 + 1);
		if (m > 8 * MiB)
			m = 8 * MiB;
		p = transition(realloc, p, n, m, seed, "realloc grow");
		n = m;
	}
	while (n > 1) {
		size_t m = n - 1 - rng_below(&r, n / 4 + 1);
		if (m == 0)
			m = 1;
		p = transition(realloc, p, n, m, seed, "realloc shrink");
		n = m;
	}
	free(p);
}

/* A long random walk over sizes 1 .. 8 MiB on several blocks at once. */
Test(realloc, random_walk_many_blocks, .timeout = 120)
{
	enum { NB = 12, STEPS = 4000 };
	void *p[NB];
	size_t sz[NB];
	uint32_t seed[NB];
	rng_t r;
	rng_seed(&r, 2024);
	for (int b = 0; b < NB; b++) {
		sz[b] = rng_logsize(&r, 1, 8 * MiB);
		seed[b] = (uint32_t)rng_next(&r);
		p[b] = malloc(sz[b]);
		cr_assert_not_null(p[b]);
		pat_fill(p[b], 0, sz[b], seed[b]);
	}
	for (int step = 0; step < STEPS; step++) {
		int b = (int)rng_below(&r, NB);
		uint64_t what = rng_below(&r, 100);
		size_t m = rng_logsize(&r, 1, 8 * MiB);
		if (what < 5) {
			/* replace the block */
			expect_pattern(p[b], sz[b], seed[b], "walk before free", sz[b], 0);
			free(p[b]);
			seed[b] = (uint32_t)rng_next(&r);
			p[b] = what < 2 ? realloc(NULL, m) : malloc(m);
			cr_assert_not_null(p[b]);
			pat_fill(p[b], 0, m, seed[b]);
		} else if (what < 15) {
			/* a small step around the current size */
			size_t d = rng_below(&r, 64);
			m = (what & 1) ? sz[b] + d : (sz[b] > d + 1 ? sz[b] - d : 1);
			p[b] = transition(what < 10 ? realloc : arena_realloc, p[b], sz[b], m, seed[b],
					  "walk step");
		} else {
			p[b] = transition(what < 60 ? realloc : arena_realloc, p[b], sz[b], m, seed[b],
					  "walk");
		}
		sz[b] = m;
	}
	for (int b = 0; b < NB; b++) {
		expect_pattern(p[b], sz[b], seed[b], "walk end", sz[b], sz[b]);
		free(p[b]);
	}
}

/* Failed realloc returns NULL, sets ENOMEM, leaves the old block intact and usable. */
Test(realloc, failure_leaves_block_intact)
{
	static const size_t sizes[] = { 10, 3000, 40000, 700000, 3 * MiB };
	static const size_t impossible[] = { SIZE_MAX / 2, SIZE_MAX, (size_t)PTRDIFF_MAX,
					     SIZE_MAX - 4095, SIZE_MAX - 2 * MiB + 1 };
	for (int a = 0; a < 2; a++) {
		realloc_fn re = a ? arena_realloc : realloc;
		for (int i = 0; i < 5; i++) {
			size_t n = sizes[i];
			uint8_t *p = malloc(n);
			cr_assert_not_null(p);
			pat_fill(p, 0, n, (uint32_t)i);
			size_t u = malloc_usable_size(p);
			for (int k = 0; k < 5; k++) {
				errno = 0;
				void *q = re(p, opaque_size(impossible[k]));
				cr_assert_null(q, "realloc(%zu-byte block, %#zx) = %p", n, impossible[k], q);
				cr_assert_eq(errno, ENOMEM, "realloc(%zu-byte block, %#zx): errno %d", n,
					     impossible[k], errno);
				expect_pattern(p, n, (uint32_t)i, "failed realloc", n, impossible[k]);
				cr_assert_eq(malloc_usable_size(p), u, "failed realloc changed usable size");
			}
			p = transition(re, p, n, n * 2 + 1, (uint32_t)i, "realloc after failure");
			free(p);
		}
	}
}

Test(realloc, reallocarray_overflow_leaves_block_intact)
{
	static const size_t pairs[][2] = {
		{ SIZE_MAX / 2 + 1, 2 }, { 2, SIZE_MAX / 2 + 1 }, { (size_t)1 << 32, (size_t)1 << 32 },
		{ SIZE_MAX, SIZE_MAX }, { 65537, 281470681808897ull },
	};
	for (int a = 0; a < 2; a++) {
		void *(*ra)(void *, size_t, size_t) = a ? arena_reallocarray : reallocarray;
		uint8_t *p = ra(NULL, 1000, 3);
		cr_assert_not_null(p);
		pat_fill(p, 0, 3000, 9);
		for (int k = 0; k < 5; k++) {
			errno = 0;
			void *q = ra(p, opaque_size(pairs[k][0]), opaque_size(pairs[k][1]));
			cr_assert_null(q, "reallocarray(p, %#zx, %#zx) = %p", pairs[k][0], pairs[k][1], q);
			cr_assert_eq(errno, ENOMEM, "reallocarray(p, %#zx, %#zx): errno %d", pairs[k][0],
				     pairs[k][1], errno);
			expect_pattern(p, 3000, 9, "failed reallocarray", 3000, 0);
		}
		p = ra(p, 1000, 3000); /* 3 MB: huge */
		cr_assert_not_null(p);
		expect_pattern(p, 3000, 9, "reallocarray", 3000, 3000000);
		p = ra(p, 10, 10);
		cr_assert_not_null(p);
		expect_pattern(p, 100, 9, "reallocarray", 3000000, 100);
		free(p);
	}
}

/* Blocks that came from the aligned allocators resize like any other. */
Test(realloc, aligned_blocks_resize)
{
	static const size_t al[] = { 32, 256, 4096, 65536, 2 * MiB };
	static const size_t sizes[] = { 10, 5000, 100000, 3 * MiB };
	for (int i = 0; i < 5; i++) {
		for (int j = 0; j < 4; j++) {
			for (int k = 0; k < 4; k++) {
				void *p = NULL;
				cr_assert_eq(posix_memalign(&p, al[i], sizes[j]), 0);
				pat_fill(p, 0, sizes[j], (uint32_t)(i * 16 + j));
				p = transition(realloc, p, sizes[j], sizes[k], (uint32_t)(i * 16 + j),
					       "realloc of aligned block");
				free(p);
			}
		}
	}
}

/* realloc(p, 0) frees p (and returns NULL, as glibc); the block is not leaked. */
Test(realloc, zero_size_frees_every_kind, .timeout = 60)
{
	static const size_t sizes[] = { 1, 500, 16385, 200000, MiB + 1, 4 * MiB };
	for (int i = 0; i < 6; i++) {
		arena_stats_t s0, s1;
		cr_assert_eq(arena_stats_get(&s0), 0);
		for (int k = 0; k < 2000; k++) {
			void *p = malloc(opaque_size(sizes[i]));
			cr_assert_not_null(p);
			memset(p, 7, sizes[i] < 4096 ? sizes[i] : 4096);
			escape(p); /* the compiler may not drop the block */
			cr_assert_null(realloc(p, opaque_size(0)));
		}
		cr_assert_eq(arena_stats_get(&s1), 0);
		cr_assert_leq(s1.allocated, s0.allocated + 64 * KiB,
			      "2000 x (malloc(%zu), realloc(p, 0)): allocated %zu -> %zu", sizes[i],
			      s0.allocated, s1.allocated);
	}
}

/* A large block of a cached class (16-64 KiB) resized in place changes
 * class, and free's fast path reads the class from its first page's word
 * (large.c, mark_head): the word must follow, or the block goes into the
 * list of its old class and a later malloc of that class gets a run too
 * short for it.  Shrunk 40 KiB -> 20 KiB in place, freed, then every
 * malloc of 40 KiB must have 40 KiB; and the other way, grown in place. */
Test(realloc, large_block_resized_in_place_is_freed_by_its_new_class)
{
	static const size_t pairs[][2] = { { 40960, 20480 }, { 20480, 40960 }, { 65536, 16385 } };
	for (unsigned i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		size_t from = pairs[i][0], to = pairs[i][1];
		char *p = malloc(opaque_size(from));
		cr_assert_not_null(p);
		uintptr_t was = (uintptr_t)p;
		char *q = realloc(p, opaque_size(to));
		cr_assert_not_null(q);
		bool in_place = (uintptr_t)q == was;
		free(q);
		void *got[8];
		for (unsigned k = 0; k < 8; k++) {
			got[k] = malloc(opaque_size(from));
			cr_assert_not_null(got[k]);
			cr_assert_geq(malloc_usable_size(got[k]), from,
				      "%zu -> %zu (%s), then malloc(%zu): usable %zu", from, to,
				      in_place ? "in place" : "moved", from,
				      malloc_usable_size(got[k]));
			memset(got[k], 0x5a, from);
		}
		for (unsigned k = 0; k < 8; k++)
			free(got[k]);
	}
}

/* realloc's path for small blocks of the thread's own arena: within the
 * class the block stays, across classes it moves with its bytes, and
 * another arena's block (made by another thread) takes the general path
 * with the same results. */
static void *small_block(void *arg)
{
	(void)arg;
	void *p = malloc(100);
	if (p)
		pat_fill(p, 0, 100, 7);
	return p;
}

Test(realloc, small_blocks_of_this_and_another_arena)
{
	void *p = malloc(100);
	cr_assert_not_null(p);
	pat_fill(p, 0, 100, 7);
	uintptr_t was = (uintptr_t)p;
	p = realloc(p, 112);
	cr_assert_eq((uintptr_t)p, was, "within its class a small block stays");
	void *q = transition(realloc, p, 100, 3000, 7, "realloc small move");
	cr_assert_neq((uintptr_t)q, was);
	free(q);
	pthread_t t;
	void *theirs = NULL;
	cr_assert_eq(pthread_create(&t, NULL, small_block, NULL), 0);
	cr_assert_eq(pthread_join(t, &theirs), 0);
	cr_assert_not_null(theirs);
	was = (uintptr_t)theirs;
	theirs = realloc(theirs, 112);
	cr_assert_eq((uintptr_t)theirs, was, "another thread's block stays too (its arena, if not ours)");
	q = transition(realloc, theirs, 100, 3000, 7, "realloc other arena");
	free(q);
}
