/*
 * sizeclass.c and the size arithmetic of internal.h: the class table, the
 * lookup table of the fast path, slab geometry, the exact division and
 * free()'s one-multiply block test.
 */
#include "fake_os.h"
#include "unit.h"

static void init(void)
{
	sizeclass_init();
}

/* classes: the constant tables, no initialisation needed (the fast path
 * uses them before it); slabs: what sizeclass_init computes. */
TestSuite(slabs, .init = init);

Test(classes, class_table_shape)
{
	for (unsigned c = 0; c < 8; c++)
		cr_assert_eq(class_size[c], 16 * (c + 1), "class %u: %zu", c, class_size[c]);
	for (unsigned c = 1; c < NCLASSES; c++)
		cr_assert_gt(class_size[c], class_size[c - 1], "class_size not increasing at %u", c);
	for (unsigned c = 0; c < NCLASSES; c++)
		cr_assert_eq(class_size[c] % MIN_ALIGN, 0, "class %u: %zu", c, class_size[c]);
	/* Four classes per doubling from 128 on, evenly spaced. */
	for (unsigned c = 8; c < NCLASSES; c++) {
		size_t k = 63 - (size_t)__builtin_clzll(class_size[c] - 1); /* size in (2^k, 2^(k+1)] */
		size_t step = (size_t)1 << (k - 2);
		unsigned j = (c - 8) % 4;
		cr_assert_eq(class_size[c], ((size_t)1 << k) + (j + 1) * step,
			     "class %u: %zu is not 2^%zu + %u * 2^%zu", c, class_size[c], k, j + 1, k - 2);
	}
	cr_assert_eq(class_size[NSMALL - 1], SMALL_MAX);
	cr_assert_gt(class_size[NSMALL], SMALL_MAX);
	cr_assert_eq(class_size[NCLASSES - 1], LARGE_MAX);
	cr_assert_eq(class_size[NCACHED - 1], CACHE_MAX, "the cached classes end at CACHE_MAX");
	for (unsigned c = NSMALL; c < NCLASSES; c++)
		cr_assert_eq(class_size[c] % PAGE_SIZE, 0, "large class %u: %zu", c, class_size[c]);
}

/* The class of every size is the smallest class that holds it. */
Test(classes, size_class_calc_is_the_smallest_fit)
{
	for (size_t s = 0; s <= LARGE_MAX; s++) {
		unsigned c = size_class_calc(s);
		cr_assert_lt(c, NCLASSES, "size %zu: class %u", s, c);
		cr_assert_geq(class_size[c], s, "size %zu: class %u holds %zu", s, c, class_size[c]);
		if (c > 0)
			cr_assert_lt(class_size[c - 1], s, "size %zu: class %u, but %u (%zu) holds it",
				     s, c, c - 1, class_size[c - 1]);
	}
}

/* The fast path's table against the arithmetic, at every size 0..65536. */
Test(classes, lookup_table_matches_the_arithmetic)
{
	for (size_t s = 0; s <= 65536; s++) {
		size_t off = size_bin_offset(s);
		cr_assert_eq(off, bin_off(size_class_calc(s)), "size %zu: bin offset %zu, class %u",
			     s, off, size_class_calc(s));
		cr_assert_eq(size_class(s), size_class_calc(s), "size %zu", s);
	}
	for (size_t i = 0; i <= SIZE_LUT_MAX / 16; i++)
		cr_assert_eq(size_bin_off[i], bin_off(size_class_calc(i * 16)), "size_bin_off[%zu]", i);
}

Test(classes, bin_offsets)
{
	for (unsigned c = 0; c < NCACHED; c++) {
		cr_assert_eq(bin_off(c), BIN_BYTES * (c + 1));
		cr_assert_eq(bin_class(bin_off(c)), c);
		cr_assert_eq(offsetof(tcache_t, bins) + c * sizeof(tbin_t), bin_off(c));
	}
}

Test(classes, fragmentation_bounds)
{
	for (size_t s = 1; s <= LARGE_MAX; s++) {
		size_t cs = class_size[size_class_calc(s)], waste = cs - s;
		if (s <= 128)
			cr_assert_lt(waste, 16, "size %zu: class %zu", s, cs);
		else
			cr_assert(waste * 4 < s && waste * 5 < cs,
				  "size %zu: class %zu wastes %zu (25%% of the request, 20%% of the block)",
				  s, cs, waste);
	}
}

/* Blocks a slab of pages holds, and whether it wastes at most 1/64 of
 * itself past its last block (sizeclass.c, slab_pages_for). */
static bool slab_fits(size_t size, unsigned pages, size_t want)
{
	size_t bytes = pages * PAGE_SIZE, n = bytes / size;
	return n >= want && n <= SLAB_MAX_BLOCKS && (bytes - n * size) * 64 <= bytes;
}

/* The fewest pages (at most 16) that hold at least 8 blocks (as many as 16
 * pages hold, if fewer) and waste at most 1/64 of the slab. */
Test(slabs, slab_geometry)
{
	for (unsigned c = 0; c < NSMALL; c++) {
		size_t size = class_size[c], want = 16 * PAGE_SIZE / size;
		if (want > 8)
			want = 8;
		unsigned pages = class_slab_pages[c];
		cr_assert(pages >= 1 && pages <= 16, "class %u (%zu B): %u pages", c, size, pages);
		cr_assert_eq(class_nblocks[c], pages * PAGE_SIZE / size, "class %u", c);
		cr_assert_leq(class_nblocks[c], SLAB_MAX_BLOCKS, "class %u: %u blocks", c, class_nblocks[c]);
		cr_assert(slab_fits(size, pages, want), "class %u (%zu B): %u pages, %u blocks, waste %zu B",
			  c, size, pages, class_nblocks[c], pages * PAGE_SIZE - class_nblocks[c] * size);
		for (unsigned p = 1; p < pages; p++)
			cr_assert_not(slab_fits(size, p, want), "class %u (%zu B): %u pages, but %u would do",
				      c, size, pages, p);
		cr_assert(class_nblocks[c] >= 8 || class_nblocks[c] == want, "class %u: %u blocks", c,
			  class_nblocks[c]);
	}
	cr_assert_eq(class_nblocks[0], SLAB_MAX_BLOCKS, "16-byte blocks fill one page");
	cr_assert_eq(class_slab_pages[0], 1);
}

/* What a block really costs: its share of its slab.  The rule's examples:
 * 5120-byte blocks took 12 pages for 9 (5,461 bytes each) at 1/16; now 10
 * pages for 8.  Classes whose slabs wasted at most 1/64 keep them. */
Test(slabs, slab_tail_waste)
{
	for (unsigned c = 0; c < NSMALL; c++) {
		size_t bytes = class_slab_pages[c] * PAGE_SIZE, used = class_nblocks[c] * class_size[c];
		cr_assert_leq((bytes - used) * 64, bytes, "class %u (%zu B): %zu of %zu bytes unused", c,
			      class_size[c], bytes - used, bytes);
	}
	static const struct { size_t size; unsigned pages, blocks; } want[] = {
		{ 48, 1, 85 },   { 112, 1, 36 },  { 160, 2, 51 },  { 320, 3, 38 },   { 448, 1, 9 },
		{ 640, 3, 19 },  { 768, 3, 16 },  { 1280, 5, 16 }, { 1536, 3, 8 },   { 1792, 4, 9 },
		{ 2560, 5, 8 },  { 4096, 8, 8 },  { 5120, 10, 8 }, { 10240, 15, 6 }, { 16384, 16, 4 },
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		unsigned c = size_class(want[i].size);
		cr_assert_eq(class_size[c], want[i].size);
		cr_assert(class_slab_pages[c] == want[i].pages && class_nblocks[c] == want[i].blocks,
			  "class %zu B: %u pages for %u blocks, want %u for %u", want[i].size,
			  class_slab_pages[c], class_nblocks[c], want[i].pages, want[i].blocks);
	}
}

Test(slabs, exact_division)
{
	for (unsigned c = 0; c < NSMALL; c++) {
		size_t size = class_size[c], bytes = class_slab_pages[c] * PAGE_SIZE;
		for (size_t off = 0; off < bytes; off++)
			if (slab_block_index(c, off) != off / size)
				cr_assert_fail("class %u: slab_block_index(%zu) = %u, want %zu", c, off,
					       slab_block_index(c, off), off / size);
	}
}

Test(slabs, verify_passes)
{
	cr_assert(sizeclass_verify());
}

/* The table free() uses (sizeclass_verify recomputes its own): at every
 * offset of every slab, exactly the starts of the slab's blocks pass. */
Test(slabs, installed_block_test_is_exact)
{
	cr_assert_eq(slab_checks[0].thresh, 0, "entry 0 passes nothing");
	for (unsigned c = 0; c < NSMALL; c++) {
		const slab_check_t *ck = &slab_checks[c + 1];
		uint64_t size = class_size[c], n = class_nblocks[c];
		for (uint64_t x = 0; x < (uint64_t)class_slab_pages[c] * PAGE_SIZE + size; x++) {
			bool pass = x * ck->magic < ck->thresh, want = x % size == 0 && x / size < n;
			if (pass != want)
				cr_assert_fail("class %u (%" PRIu64 " B): offset %" PRIu64 " %s", c, size,
					       x, pass ? "passes" : "is refused");
		}
	}
}

Test(slabs, debug_mode_block_test_passes_nothing)
{
	memset(slab_checks, 0, sizeof(slab_checks));
	conf.debug = true;
	sizeclass_init();
	for (unsigned c = 0; c <= NSMALL; c++)
		cr_assert_eq(slab_checks[c].thresh, 0, "entry %u", c);
}
