/* Size classes: 16..128 by 16, four per doubling to 1 KiB, eight from 1 to
 * 8 KiB, then to 16 KiB, and four per doubling to 1 MiB: a request is
 * rounded up by at most a quarter of its power of two.  Slab slots up to
 * SMALL_MAX, page runs above.  Added for what programs allocate most
 * (docs/design.md, "Blocks of a page plus a header", "Blocks a sixteenth
 * off a power of two"): 272, 528, and the largest multiple of 16 of which
 * a 16-page slab holds one block fewer than of 2^k (1040, 2112, 4368,
 * 9360); 7280 for 7168 (nine in 16 pages); 960 and 8704. */
#include "internal.h"

#define STEP(k) ((size_t)1 << ((k) - 2))
#define DOUBLING(k) \
	((size_t)1 << (k)) + STEP(k), ((size_t)1 << (k)) + 2 * STEP(k), \
	((size_t)1 << (k)) + 3 * STEP(k), (size_t)1 << ((k) + 1)
#define STEP8(k) ((size_t)1 << ((k) - 3))
#define DOUBLING8(k) \
	((size_t)1 << (k)) + STEP8(k), ((size_t)1 << (k)) + 2 * STEP8(k), \
	((size_t)1 << (k)) + 3 * STEP8(k), ((size_t)1 << (k)) + 4 * STEP8(k), \
	((size_t)1 << (k)) + 5 * STEP8(k), ((size_t)1 << (k)) + 6 * STEP8(k), \
	((size_t)1 << (k)) + 7 * STEP8(k), (size_t)1 << ((k) + 1)

const size_t class_size[NCLASSES] = {
	16, 32, 48, 64, 80, 96, 112, 128,
	DOUBLING(7), 272, DOUBLING(8), 528, 640, 768, 896, SUB1K_CLASS, 1024,
	1040, DOUBLING8(10), 2112, DOUBLING8(11),
	4368, 4608, 5120, 5632, 6144, 6656, SLAB9_CLASS, 7680, 8192,
	OVER8K_CLASS, 9360, 10240, 12288, 13312, 14336, 15360, 16384, /* small: up to 16 KiB */
	DOUBLING(14), DOUBLING(15), DOUBLING(16), DOUBLING(17), DOUBLING(18),
	DOUBLING(19), /* large: up to 1 MiB */
};

/* size_bin_offset's table: entry i for sizes in (16 (i - 1), 16 i];
 * C(c, from, to): class c holds (from, to]. */
#define B(c) (((c) + 1) << BIN_SHIFT)
#define C(c, from, to) [(from) / 16 + 1 ... (to) / 16] = B(c)
_Static_assert(SLAB9_CLASS == 7280 && SUB1K_CLASS == 960 && OVER8K_CLASS == 8704,
	       "the lookup table's classes 21, 47 and 50");
const uint16_t size_bin_off[SIZE_LUT_MAX / 16 + 1] = {
	[0] = B(0),
	C(0, 0, 16), C(1, 16, 32), C(2, 32, 48), C(3, 48, 64), C(4, 64, 80), C(5, 80, 96),
	C(6, 96, 112), C(7, 112, 128), C(8, 128, 160), C(9, 160, 192), C(10, 192, 224),
	C(11, 224, 256), C(12, 256, 272), C(13, 272, 320), C(14, 320, 384), C(15, 384, 448),
	C(16, 448, 512), C(17, 512, 528), C(18, 528, 640), C(19, 640, 768), C(20, 768, 896),
	C(21, 896, 960), C(22, 960, 1024), C(23, 1024, 1040), C(24, 1040, 1152),
	C(25, 1152, 1280), C(26, 1280, 1408), C(27, 1408, 1536), C(28, 1536, 1664),
	C(29, 1664, 1792), C(30, 1792, 1920), C(31, 1920, 2048), C(32, 2048, 2112),
	C(33, 2112, 2304), C(34, 2304, 2560), C(35, 2560, 2816), C(36, 2816, 3072),
	C(37, 3072, 3328), C(38, 3328, 3584), C(39, 3584, 3840), C(40, 3840, 4096),
	C(41, 4096, 4368), C(42, 4368, 4608), C(43, 4608, 5120), C(44, 5120, 5632),
	C(45, 5632, 6144), C(46, 6144, 6656), C(47, 6656, 7280), C(48, 7280, 7680),
	C(49, 7680, 8192), C(50, 8192, 8704), C(51, 8704, 9360), C(52, 9360, 10240),
	C(53, 10240, 12288), C(54, 12288, 13312), C(55, 13312, 14336), C(56, 14336, 15360),
	C(57, 15360, 16384),
};

/* within 512 bytes: one page */
START_UP sizeclass_geom_t sc_geom __attribute__((aligned(512)));
START_UP sizeclass_tables_t sc_tables __attribute__((aligned(4096)));


/* Pages per slab: the fewest (<= 16) holding SLAB_MIN_BLOCKS blocks (or
 * what 16 pages hold), at most SLAB_MAX_BLOCKS, with a tail of at most
 * 1/SLAB_TAIL_DIV. */
#define SLAB_MIN_BLOCKS 8 /* callgrind: 1,115 instructions a 4 KiB malloc+free with 1-block slabs */
#define SLAB_TAIL_DIV 64 /* a class pays at most 1.6% for tails; no slab over 16 pages */

/* A chunk of one class's slabs is resident whole once a huge page: the
 * fewest pages (up to SLAB_FIT_PAGES) whose chunk-wide waste is also at
 * most 1/SLAB_TAIL_DIV, else the rule above's. */
#define SLAB_FIT_PAGES 40 /* 16-page slabs of 7280 bytes wasted 2.77% of each chunk */
_Static_assert(SLAB_FIT_PAGES <= UINT8_MAX, "class_slab_pages is a byte");

static bool slab_fits(size_t size, unsigned pages, size_t want)
{
	size_t bytes = pages * PAGE_SIZE, n = bytes / size;
	return n >= want && n <= SLAB_MAX_BLOCKS && (bytes - n * size) * SLAB_TAIL_DIV <= bytes;
}

static size_t chunk_waste(size_t size, unsigned pages)
{
	size_t nslabs = CHUNK_PAGES / pages, bytes = pages * PAGE_SIZE;
	return (CHUNK_PAGES % pages) * PAGE_SIZE + nslabs * (bytes % size);
}

static unsigned slab_pages_for(size_t size)
{
	size_t want = 16 * PAGE_SIZE / size;
	if (want > SLAB_MIN_BLOCKS)
		want = SLAB_MIN_BLOCKS;
	for (unsigned p = 1; p <= SLAB_FIT_PAGES; p++)
		if (slab_fits(size, p, want) &&
		    chunk_waste(size, p) * SLAB_TAIL_DIV <= CHUNK_PAGES * PAGE_SIZE)
			return p;
	for (unsigned p = 1; p <= 16; p++)
		if (slab_fits(size, p, want))
			return p;
	return 16; /* none: every class has one (test_sizeclass) */
}

/* The smallest class holding size, by a search: the tables' reference. */
unsigned sizeclass_search(size_t size)
{
	unsigned c = 0;
	while (c + 1 < NCLASSES && class_size[c] < size)
		c++;
	return c;
}

/* internal.h, slab_check_t, says why this works. */
static slab_check_t slab_check_for(uint64_t size, uint64_t nblocks)
{
	uint64_t magic = UINT64_MAX / size + 1; /* ceil(2^64 / size) */
	uint64_t err = size * magic;            /* size * magic - 2^64 */
	if ((size & (size - 1)) == 0)
		return (slab_check_t){ .magic = magic + 1, .thresh = nblocks * size };
	return (slab_check_t){ .magic = magic, .thresh = nblocks * err };
}

/* The slab test, exact for every offset (for tests: 2.4 M offsets). */
bool sizeclass_verify(void)
{
	for (unsigned c = 0; c < NSMALL; c++) {
		uint64_t size = class_size[c], nblocks = class_nblocks[c];
		slab_check_t ck = slab_check_for(size, nblocks);
		for (uint64_t x = 0; x < (uint64_t)class_slab_pages[c] * PAGE_SIZE; x++)
			if ((x * ck.magic < ck.thresh) != (x % size == 0 && x / size < nblocks))
				return false;
	}
	return true;
}

void sizeclass_init(void)
{
	for (unsigned c = 0; c < NSMALL; c++) {
		size_t size = class_size[c];
		class_slab_pages[c] = (uint8_t)slab_pages_for(size);
		class_nblocks[c] = (uint16_t)(class_slab_pages[c] * PAGE_SIZE / size);
		/* ceil(2^32 / size): (off * magic) >> 32 == off / size while
		 * off * size < 2^32 (slabs <= 64 KiB, size <= 16 KiB) */
		class_div_magic[c] = (uint32_t)((((uint64_t)1 << 32) + size - 1) / size);
		/* in debug and secure mode free's fast path passes nothing: thresh 0 */
		if (!cfg->debug && !cfg->secure)
			slab_checks[c + 1] = slab_check_for(size, class_nblocks[c]);
	}
	/* A large cached block is a one-block slab for free's fast path (its
	 * first page's slab word: large.c, mark_head); not with heap profiles. */
	for (unsigned c = NSMALL; c < NCACHED; c++)
		if (!cfg->debug && !cfg->secure)
			slab_checks[c + 1] = (slab_check_t){ .magic = 1, .thresh = 1 };
	/* Entry i against the class table in one walk: the smallest class
	 * holding 16 * i must hold 16 * i - 15 too. */
	unsigned want = 0;
	for (size_t i = 0; i <= SIZE_LUT_MAX / 16; i++) {
		while (class_size[want] < i * 16)
			want++;
		if (bin_class(size_bin_off[i]) != want ||
		    (i > 0 && want > 0 && class_size[want - 1] >= i * 16 - 15))
			out_fatal("size class lookup table is inconsistent at %zu bytes\n", i * 16);
	}
	if (class_size[NSMALL - 1] != SMALL_MAX || class_size[NCLASSES - 1] != LARGE_MAX ||
	    class_size[NCACHED - 1] != CACHE_MAX || size_class_large(SMALL_MAX + 1) != NSMALL)
		out_fatal("size class table is inconsistent\n");
}
