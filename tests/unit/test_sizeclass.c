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

/* 16..128 by 16, then four classes per doubling up to 1 KiB with 2^k + 16
 * in the doublings above 256 and 512 bytes and SUB1K_CLASS (960) before
 * 1 KiB, eight per doubling from 1 to 16 KiB with a header class first
 * (HDR_CLASS: 1040, 2112, 4368, 9360; OVER8K_CLASS, 8704, before 9360),
 * SLAB9_CLASS (7280) in 7168's place and without 11264 (a 16-page slab
 * holds 5: 14% tail), then four per doubling (issue 16): 58 small classes
 * (40 before), 24 large. */
Test(classes, class_table_shape)
{
	size_t want[NCLASSES + 1];
	unsigned n = 0;
	for (size_t s = 16; s <= 128; s += 16)
		want[n++] = s;
	for (unsigned k = 7; k < 20 && n < NCLASSES; k++) {
		size_t base = (size_t)1 << k;
		unsigned per = k >= HDR_K_FIRST && k <= HDR_K_LAST ? 8 : 4;
		if (k >= HDR16_K_FIRST && k < HDR_K_FIRST)
			want[n++] = base + 16;
		if (base == 8192)
			want[n++] = OVER8K_CLASS;
		if (k >= HDR_K_FIRST && k <= HDR_K_LAST)
			want[n++] = HDR_CLASS(k);
		for (unsigned j = 1; j <= per; j++) {
			size_t size = base + j * (base / per);
			if (size == 7168)
				size = SLAB9_CLASS;
			if (size == 1024)
				want[n++] = SUB1K_CLASS;
			if (size > want[n - 1] && size != 11264)
				want[n++] = size;
		}
	}
	cr_assert_eq(n, NCLASSES, "the rule gives %u classes, NCLASSES is %u", n, NCLASSES);
	for (unsigned c = 0; c < NCLASSES; c++)
		cr_assert_eq(class_size[c], want[c], "class %u: %zu, the rule says %zu", c, class_size[c],
			     want[c]);
	for (unsigned c = 1; c < NCLASSES; c++)
		cr_assert_gt(class_size[c], class_size[c - 1], "class_size not increasing at %u", c);
	for (unsigned c = 0; c < NCLASSES; c++)
		cr_assert_eq(class_size[c] % MIN_ALIGN, 0, "class %u: %zu", c, class_size[c]);
	static const size_t hdr[] = { 1040, 2112, 4368, 9360 };
	for (unsigned i = 0; i < 4; i++) {
		cr_assert_eq(HDR_CLASS(10 + i), hdr[i]);
		/* a 16-page slab holds one block fewer than of 2^k, no fewer */
		size_t per = (16 * PAGE_SIZE >> (10 + i)) - 1;
		cr_assert_leq(per * hdr[i], 16 * PAGE_SIZE);
		cr_assert_gt(per * (hdr[i] + 16), 16 * PAGE_SIZE);
	}
	cr_assert_eq(SLAB9_CLASS, 7280);
	cr_assert_leq(9 * SLAB9_CLASS, 16 * PAGE_SIZE, "a 16-page slab holds nine");
	cr_assert_gt(9 * (SLAB9_CLASS + 16), 16 * PAGE_SIZE, "and no larger multiple of 16");
	cr_assert_eq(SUB1K_CLASS, 960);
	cr_assert_eq(OVER8K_CLASS, 8704);
	cr_assert_eq(NSMALL, 58);
	cr_assert_eq(NCLASSES - NSMALL, 24);
	cr_assert_eq(NCACHED, 66);
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

/* The fast path's table (every small size) and the large classes'
 * arithmetic against the search of the class table, at every size
 * 0..65536 and at the large classes' edges up to LARGE_MAX. */
Test(classes, lookup_table_matches_the_arithmetic)
{
	for (size_t s = 0; s <= LARGE_MAX; s += s < 65536 ? 1 : 4093) {
		size_t off = size_bin_offset(s);
		cr_assert_eq(off, bin_off(size_class_calc(s)), "size %zu: bin offset %zu, class %u",
			     s, off, size_class_calc(s));
		cr_assert_eq(size_class(s), size_class_calc(s), "size %zu", s);
		cr_assert_eq(size_class_calc(s), sizeclass_search(s), "size %zu", s);
		if (s > SMALL_MAX)
			cr_assert_eq(size_class_large(s), sizeclass_search(s), "size %zu", s);
	}
	for (unsigned c = NSMALL; c < NCLASSES; c++)
		for (size_t s = class_size[c - 1] + 1; s <= class_size[c]; s += class_size[c] - class_size[c - 1] - 1)
			cr_assert_eq(size_class_large(s), c, "size %zu", s);
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

/* Blocks of a power of two plus a header, 2^k + h, what real programs
 * allocate most (docs/design.md, "Blocks of a page plus a header"): up to
 * 2^k + 16 they waste under 16 bytes from 256 bytes to 1 KiB, and from 1
 * to 4 KiB they take the header class (1040, 2112, 4368) while h fits it;
 * every 2^k + h with h up to 2^k/8 wastes under a ninth of its block (an
 * eighth above 8 KiB, where 8192 + h takes 8704 up to h = 512, then 9360).  sqlite's page-cache blocks
 * (4096 + 272) and statement-journal chunks (1024 + 8), redis's 1 KiB
 * values (1024 + 6) fit to 16 bytes. */
Test(classes, page_plus_header_takes_the_header_class)
{
	for (unsigned k = HDR16_K_FIRST; k < HDR_K_FIRST; k++)
		for (size_t h = 1; h <= 16; h++)
			cr_assert_eq(class_size[size_class(((size_t)1 << k) + h)], ((size_t)1 << k) + 16);
	for (unsigned k = HDR_K_FIRST; k <= HDR_K_LAST; k++) {
		size_t page = (size_t)1 << k, hdr = HDR_CLASS(k);
		for (size_t h = 1; page + h <= hdr; h++) {
			size_t want = page == 8192 && page + h <= OVER8K_CLASS ? OVER8K_CLASS : hdr;
			cr_assert_eq(class_size[size_class(page + h)], want, "%zu + %zu", page, h);
		}
		for (size_t h = 1; h <= page / 8; h++) {
			size_t cs = class_size[size_class(page + h)];
			cr_assert_lt((cs - page - h) * (k < HDR_K_LAST ? 9 : 8), cs, "%zu + %zu wastes %zu of %zu",
				     page, h, cs - page - h, cs);
		}
		cr_assert_eq(class_size[size_class(page)], page, "%zu: its own class", page);
		cr_assert_eq(class_size[size_class(hdr + 1)], page + page / 8 + (k == HDR_K_LAST ? page / 8 : 0),
			     "%zu + 1", hdr);
	}
	cr_assert_eq(class_size[size_class(4096 + 272)], 4096 + 272, "sqlite's page-cache block");
	cr_assert_eq(class_size[size_class(1024 + 8)], 1040, "sqlite's journal chunk");
	cr_assert_eq(class_size[size_class(1024 + 6)], 1040, "redis's 1 KiB value");
	cr_assert_eq(class_size[size_class(7203)], 7280, "redis's list node of 7 such values");
	cr_assert_eq(class_size[size_class(7168)], 7280, "7 KiB: 112 bytes over");
	/* 4096 + 8 .. 512, the shapes of issue 16: at most 1/16 unused */
	for (size_t h = 8; h <= 512; h *= 2) {
		size_t usable = class_size[size_class(4096 + h)];
		cr_assert_leq((usable - 4096 - h) * 16, usable, "4096 + %zu: %zu", h, usable);
	}
	cr_assert_eq(class_size[size_class(256 + 8)], 272);
	cr_assert_eq(class_size[size_class(512 + 8)], 528);
	cr_assert_eq(class_size[size_class(16384 + 8)], 20480);
}

/* Blocks a slab of pages holds, and whether it wastes at most 1/64 of
 * itself past its last block (sizeclass.c, slab_pages_for). */
static bool slab_fits(size_t size, unsigned pages, size_t want)
{
	size_t bytes = pages * PAGE_SIZE, n = bytes / size;
	return n >= want && n <= SLAB_MAX_BLOCKS && (bytes - n * size) * 64 <= bytes;
}

/* Bytes an arena chunk filled with slabs of pages pages wastes: its last
 * pages, fewer than a slab, and every slab's tail. */
static size_t chunk_waste(size_t size, unsigned pages)
{
	size_t bytes = pages * PAGE_SIZE;
	return (CHUNK_PAGES % pages) * PAGE_SIZE + CHUNK_PAGES / pages * (bytes % size);
}

static bool chunk_fits(size_t size, unsigned pages)
{
	return chunk_waste(size, pages) * 64 <= CHUNK_PAGES * PAGE_SIZE;
}

/* The fewest pages (at most 40) that hold at least 8 blocks (as many as 16
 * pages hold, if fewer), waste at most 1/64 of the slab and at most 1/64
 * of an arena chunk full of such slabs (every class has such a count), so
 * that a chunk in one huge page holds no more than 1/64 that no block
 * uses. */
Test(slabs, slab_geometry)
{
	for (unsigned c = 0; c < NSMALL; c++) {
		size_t size = class_size[c], want = 16 * PAGE_SIZE / size;
		if (want > 8)
			want = 8;
		unsigned pages = class_slab_pages[c];
		cr_assert(pages >= 1 && pages <= 40, "class %u (%zu B): %u pages", c, size, pages);
		cr_assert_eq(class_nblocks[c], pages * PAGE_SIZE / size, "class %u", c);
		cr_assert_leq(class_nblocks[c], SLAB_MAX_BLOCKS, "class %u: %u blocks", c, class_nblocks[c]);
		cr_assert(slab_fits(size, pages, want), "class %u (%zu B): %u pages, %u blocks, waste %zu B",
			  c, size, pages, class_nblocks[c], pages * PAGE_SIZE - class_nblocks[c] * size);
		cr_assert(chunk_fits(size, pages), "class %u (%zu B): %u pages waste %zu B of a chunk", c,
			  size, pages, chunk_waste(size, pages));
		for (unsigned p = 1; p < pages; p++)
			cr_assert_not(slab_fits(size, p, want) && chunk_fits(size, p),
				      "class %u (%zu B): %u pages, but %u would do", c, size, pages, p);
		cr_assert_geq(class_nblocks[c], want, "class %u: %u blocks", c, class_nblocks[c]);
	}
	cr_assert_eq(class_nblocks[0], SLAB_MAX_BLOCKS, "16-byte blocks fill one page");
	cr_assert_eq(class_slab_pages[0], 1);
}

/* What a block really costs: its share of its slab.  The rule's examples:
 * 5120-byte blocks took 12 pages for 9 (5,461 bytes each) at 1/16; now 10
 * pages for 8.  Classes whose slabs wasted at most 1/64 keep them, unless
 * a chunk of them wasted more; a chunk's 512 pages hold 16-page slabs
 * whole: 7280 B 16 pages for 9 blocks, 16 KiB 16 for 4. */
Test(slabs, slab_tail_waste)
{
	for (unsigned c = 0; c < NSMALL; c++) {
		size_t bytes = class_slab_pages[c] * PAGE_SIZE, used = class_nblocks[c] * class_size[c];
		cr_assert_leq((bytes - used) * 64, bytes, "class %u (%zu B): %zu of %zu bytes unused", c,
			      class_size[c], bytes - used, bytes);
	}
	static const struct { size_t size; unsigned pages, blocks; } want[] = {
		{ 48, 1, 85 },    { 112, 1, 36 },  { 160, 2, 51 },  { 320, 3, 38 },   { 448, 1, 9 },
		{ 640, 3, 19 },   { 768, 3, 16 },  { 1280, 5, 16 }, { 1536, 3, 8 },   { 1792, 4, 9 },
		{ 2560, 5, 8 },   { 4096, 8, 8 },  { 5120, 10, 8 }, { 10240, 15, 6 }, { 16384, 16, 4 },
		{ 1408, 8, 23 }, { 2816, 11, 16 }, { 5632, 11, 8 }, { 7680, 15, 8 }, { 13312, 13, 4 },
		{ 7280, 16, 9 },
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		unsigned c = size_class(want[i].size);
		cr_assert_eq(class_size[c], want[i].size);
		cr_assert(class_slab_pages[c] == want[i].pages && class_nblocks[c] == want[i].blocks,
			  "class %zu B: %u pages for %u blocks, want %u for %u", want[i].size,
			  class_slab_pages[c], class_nblocks[c], want[i].pages, want[i].blocks);
	}
}

/* The header classes' slabs (the 1/64 rules give them): what a block
 * really costs (its share of its slab) is at most 1.6% more than its
 * class. */
Test(slabs, header_class_slabs)
{
	static const struct { size_t size; unsigned pages, blocks; } want[] = {
		{ 272, 1, 15 }, { 528, 3, 23 }, { 1040, 10, 39 }, { 2112, 15, 29 }, { 4368, 15, 14 },
		{ 9360, 16, 7 },
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		unsigned c = size_class(want[i].size);
		size_t bytes = class_slab_pages[c] * PAGE_SIZE;
		cr_assert_eq(class_size[c], want[i].size);
		cr_assert(class_slab_pages[c] == want[i].pages && class_nblocks[c] == want[i].blocks,
			  "class %zu B: %u pages for %u blocks, want %u for %u", want[i].size,
			  class_slab_pages[c], class_nblocks[c], want[i].pages, want[i].blocks);
		cr_assert_leq(bytes * 63, class_nblocks[c] * want[i].size * 64, "class %zu B: %zu B a block",
			      want[i].size, bytes / class_nblocks[c]);
	}
}

/* free()'s block test for the header classes, at every offset of a slab
 * and a block past it: exactly the starts of the slab's blocks pass (the
 * same as installed_block_test_is_exact for every class, spelled out for
 * the classes that are not four per doubling). */
Test(slabs, header_class_block_test)
{
	for (unsigned k = 10; k <= 13; k++) {
		unsigned c = size_class(HDR_CLASS(k));
		const slab_check_t *ck = &slab_checks[c + 1];
		uint64_t size = class_size[c], n = class_nblocks[c], passed = 0;
		cr_assert_eq(size, HDR_CLASS(k));
		for (uint64_t x = 0; x < (uint64_t)class_slab_pages[c] * PAGE_SIZE + size; x++) {
			bool pass = x * ck->magic < ck->thresh;
			passed += pass;
			if (pass != (x % size == 0 && x / size < n))
				cr_assert_fail("class %" PRIu64 " B: offset %" PRIu64 " %s", size, x,
					       pass ? "passes" : "is refused");
		}
		cr_assert_eq(passed, n, "class %" PRIu64 " B: %" PRIu64 " offsets pass", size, passed);
		/* free's fast path takes the class from the page table: bin_off */
		cr_assert_eq(bin_class(bin_off(c)), c);
	}
	cr_assert(sizeclass_verify());
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

/* free()'s test through a slab's page-table word (slab_entry): with the
 * salt of the slab's own arena, exactly the block starts pass; with the
 * salt of any other arena, nothing at all (a block of another arena must
 * leave the fast path: tcache.c, "foreign blocks").  Slabs at a few bases
 * (the low 32 bits of an address are what the word keeps), arenas 0, 1,
 * 7 and 63, every offset of the slab (and a class size past it). */
Test(slabs, only_the_own_arenas_salt_passes)
{
	static const uintptr_t bases[] = { 0x7f0000200000, 0x7f00fff01000, 0x7fffffe00000 + 0x1f000 };
	static const unsigned arena_ids[] = { 0, 1, 7, 63 };
	for (unsigned c = 0; c < NSMALL; c += 3)
		for (unsigned b = 0; b < 3; b++)
			for (unsigned own = 0; own < 4; own++)
				for (unsigned other = 0; other < 4; other++) {
					uint32_t salt_own = arena_ids[own] << ARENA_SALT_SHIFT;
					uint32_t salt_other = arena_ids[other] << ARENA_SALT_SHIFT;
					uint64_t e = slab_entry(c, (const void *)bases[b], salt_own);
					const slab_check_t *ck = (const slab_check_t *)((const char *)slab_checks + (e >> 32));
					uint64_t size = class_size[c], n = class_nblocks[c];
					for (uint64_t x = 0; x < (uint64_t)class_slab_pages[c] * PAGE_SIZE + size; x++) {
						const void *p = (const void *)(bases[b] + x);
						uint64_t off = slab_entry_offset(e, p, &salt_other);
						bool pass = off * ck->magic < ck->thresh;
						bool want = own == other && x % size == 0 && x / size < n;
						if (pass != want)
							cr_assert_fail("class %u, arena %u's slab at %#lx, salt of "
								       "arena %u: offset %" PRIu64 " %s", c,
								       arena_ids[own], (unsigned long)bases[b],
								       arena_ids[other], x,
								       pass ? "passes" : "is refused");
					}
				}
}

/* A large block of a cached class is a slab of one block to free's fast
 * path (large.c, mark_head): through its first page's word, its start
 * passes with its own arena's salt, and nothing else: not an offset into
 * the page, not the start with another arena's salt. */
Test(slabs, large_cached_classes_pass_only_their_start)
{
	static const uintptr_t bases[] = { 0x7f0000204000, 0x7f00fff01000 };
	for (unsigned c = NSMALL; c < NCACHED; c++)
		for (unsigned b = 0; b < 2; b++)
			for (unsigned own = 0; own < 3; own++)
				for (unsigned other = 0; other < 3; other++) {
					uint32_t salt_own = (own * 5) << ARENA_SALT_SHIFT;
					uint32_t salt_other = (other * 5) << ARENA_SALT_SHIFT;
					uint64_t e = slab_entry(c, (const void *)bases[b], salt_own);
					const slab_check_t *ck = (const slab_check_t *)((const char *)slab_checks + (e >> 32));
					for (uint64_t x = 0; x < PAGE_SIZE + 64; x++) {
						const void *p = (const void *)(bases[b] + x);
						uint64_t off = slab_entry_offset(e, p, &salt_other);
						bool pass = off * ck->magic < ck->thresh;
						bool want = own == other && x == 0;
						if (pass != want)
							cr_assert_fail("class %u, salts %u/%u, offset %" PRIu64 " %s",
								       c, own, other, x,
								       pass ? "passes" : "is refused");
					}
				}
}

Test(slabs, debug_mode_block_test_passes_nothing)
{
	memset(slab_checks, 0, sizeof(slab_checks));
	conf.debug = true;
	sizeclass_init();
	for (unsigned c = 0; c <= NCACHED; c++)
		cr_assert_eq(slab_checks[c].thresh, 0, "entry %u", c);
}
