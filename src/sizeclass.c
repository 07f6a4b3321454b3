/* Size classes.  16..128 bytes in steps of 16, then four classes per
 * doubling up to 1 KiB and eight per doubling from 1 to 16 KiB (three in
 * the doubling above 8 KiB: below), then four per doubling up to 1 MiB: a
 * request just above a power of two 2^k is rounded up by at most 2^(k-2),
 * so internal fragmentation is under 20% of the block from 129 bytes up,
 * under 10% from 1 to 8 KiB and under 17% from 8 to 16 KiB (10241 bytes
 * take 12288); below 128 bytes the waste is under 16 bytes.  Classes up to
 * SMALL_MAX are slab slots; above, up to LARGE_MAX, page runs (every large
 * class is a multiple of 4 KiB).  size_class() (internal.h) maps a size to
 * its class.
 *
 * The header classes (issue 16): what real programs allocate most is a
 * power of two plus a small header, and glibc fits those to 16 bytes.
 * 272 and 528 bytes (2^k + 16), and from 1 to 8 KiB the largest multiple
 * of 16 that a 16-page slab holds one block fewer of than of 2^k: 1040
 * (63 blocks of 1 KiB), 2112 (31), 4368 (15), 9360 (7): 2^k + 16, + 64,
 * + 272, + 1168.  Measured in the heaps of the real programs at their peak
 * (docs/design.md, "Blocks of a page plus a header"): sqlite's statement
 * journal (1024 + 8) and page cache (4096 + 272), redis's 1 KiB values
 * (1024 + 6), git's blobs of any size from 3 to 10 KiB.
 *
 * SLAB9_CLASS, 7280, takes the place of 7168 (issue 16, third round): the
 * largest multiple of 16 of which a 16-page slab holds nine blocks, one
 * more than of 8 KiB.  A node of a list filled to just under 8 KiB with
 * entries of about 1 KiB holds seven, a little over 7 KiB: redis's list
 * nodes of 7,203 bytes (seven 1 KiB values) took 7680 (6.2% unused,
 * 14,286 of them: 6.5 MiB at redis's peak) and take 7280 (1.1%); a
 * 7168-byte request pays 112 bytes (1.5%), and the doubling's worst
 * rounding is 6657 bytes in 7280 (8.6%).  The eight classes per doubling
 * above 8 KiB leave out 11264: its slab would be 16 pages for 5 blocks
 * (14% tail).
 *
 * SUB1K_CLASS and OVER8K_CLASS, 960 and 8704 (issue 16, fourth round): a
 * sixteenth below 1 KiB and above 8 KiB, where git's heap at its peak had
 * 7,563 blocks of 949-952 bytes (in 1024: 539 KiB unused) and 1,169 of
 * 8193-9000 (in 9360: 877 KiB); docs/design.md, "Blocks a sixteenth off a
 * power of two".  58 small classes and 24 large: NCLASSES 82, NCACHED 66. */
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

/* size_bin_offset() for requests up to SIZE_LUT_MAX (= SMALL_MAX): entry i
 * is bin_off() of the class of every size in (16 * (i - 1), 16 * i].
 * C(c, from, to): class c holds the sizes in (from, to].  sizeclass_init
 * checks every entry against the class table. */
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

/* The geometry apart from the checks, within 512 bytes (so within one page
 * wherever it lands among the start-up globals; test_pages counts a first
 * calloc's faults). */
START_UP sizeclass_geom_t sc_geom __attribute__((aligned(512)));
START_UP sizeclass_tables_t sc_tables __attribute__((aligned(4096)));


/* Pages per slab: the fewest (at most 16) that hold at least
 * SLAB_MIN_BLOCKS blocks (as many as 16 pages hold, if fewer), at most
 * SLAB_MAX_BLOCKS, and waste at most 1/SLAB_TAIL_DIV of the slab past its
 * last block.  Why at least 8 blocks: a slab of one or two blocks (4 KiB
 * blocks took one page each) is made and unmade for every block or two that
 * goes through the slabs; allocating 1,600 blocks of 4 KiB and freeing them
 * again cost 1,115 instructions per malloc+free under callgrind, most of
 * them in slab_new and slab_destroy (tcmalloc 83, mimalloc 353).  Why 1/64
 * (issue 16; it was 1/16, the fewest pages wasting that much, then times
 * the factor that gave 8 blocks): a slab's tail is memory every block of
 * the class pays for, 6.25% of it in 9 of the classes (5120-byte blocks
 * took 12 pages for 9, 5,461 bytes each; 1280-byte ones 3 pages for 9);
 * at 1/64 it is at most 1.6%, no class takes more than 16 pages, and the
 * classes that had 1.6% or less keep their slabs (docs/design.md,
 * "Slabs"). */
#define SLAB_MIN_BLOCKS 8
#define SLAB_TAIL_DIV 64

/* A chunk filled with one class's slabs wastes its last pages (fewer than
 * a slab) and every slab's tail.  Once the chunk is a huge page (dense,
 * or new in a growing heap: thp.c) all of it is resident, so the slab's
 * pages are the fewest (up to SLAB_FIT_PAGES) whose chunk-wide waste is
 * also at most 1/SLAB_TAIL_DIV; the fewest of the rule above where no
 * count fits.  16-page slabs of 7280-byte blocks left 14 of a chunk's 510
 * pages (2.77%) in every chunk redis-server filled with them: 4 MiB of its
 * 180 MiB peak, all of it resident in huge pages. */
#define SLAB_FIT_PAGES 40
_Static_assert(SLAB_FIT_PAGES <= UINT8_MAX, "class_slab_pages is a byte");

static bool slab_fits(size_t size, unsigned pages, size_t want)
{
	size_t bytes = pages * PAGE_SIZE, n = bytes / size;
	return n >= want && n <= SLAB_MAX_BLOCKS && (bytes - n * size) * SLAB_TAIL_DIV <= bytes;
}

static size_t chunk_waste(size_t size, unsigned pages)
{
	size_t nslabs = CHUNK_USABLE_PAGES / pages, bytes = pages * PAGE_SIZE;
	return (CHUNK_USABLE_PAGES % pages) * PAGE_SIZE + nslabs * (bytes % size);
}

static unsigned slab_pages_for(size_t size)
{
	size_t want = 16 * PAGE_SIZE / size;
	if (want > SLAB_MIN_BLOCKS)
		want = SLAB_MIN_BLOCKS;
	for (unsigned p = 1; p <= SLAB_FIT_PAGES; p++)
		if (slab_fits(size, p, want) &&
		    chunk_waste(size, p) * SLAB_TAIL_DIV <= CHUNK_USABLE_PAGES * PAGE_SIZE)
			return p;
	for (unsigned p = 1; p <= 16; p++)
		if (slab_fits(size, p, want))
			return p;
	return 16; /* none: every class has one (tests/unit/test_sizeclass.c) */
}

/* The smallest class that holds size (<= LARGE_MAX), by a search of the
 * table: what the lookup table and size_class_large are checked against
 * (here at start-up, and in the unit tests). */
unsigned size_class_search(size_t size)
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

/* Whether the slab test is exact for every offset of a slab of every
 * class (tests call it: 2.4 million offsets, too many for start-up). */
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
		/* ceil(2^32 / size): (off * magic) >> 32 == off / size exactly
		 * while off * size < 2^32; slabs are at most 64 KiB and size at
		 * most 16 KiB, so off * size < 2^30. */
		class_div_magic[c] = (uint32_t)((((uint64_t)1 << 32) + size - 1) / size);
		/* In debug mode free's fast path must pass nothing: thresh 0. */
		if (!cfg->debug)
			slab_checks[c + 1] = slab_check_for(size, class_nblocks[c]);
	}
	/* A large block of a cached class is a slab of one block for free's
	 * fast path: its run's first page has a slab word (large.c,
	 * mark_head), and only offset 0 passes (x * 1 < 1).  Not with heap
	 * profiles: their second copy of the checks holds the small classes
	 * only (prof.c), and large.c gives no such word then. */
	for (unsigned c = NSMALL; c < NCACHED; c++)
		if (!cfg->debug)
			slab_checks[c + 1] = (slab_check_t){ .magic = 1, .thresh = 1 };
	/* Entry i against the class table in one walk: the smallest class
	 * holding 16 * i must hold 16 * i - 15 too (what size_class_search
	 * would say, for both ends).  A search per entry cost 572,000
	 * instructions, 75% of a program that mallocs once (callgrind). */
	unsigned want = 0;
	for (size_t i = 0; i <= SIZE_LUT_MAX / 16; i++) {
		while (class_size[want] < i * 16)
			want++;
		if (bin_class(size_bin_off[i]) != want ||
		    (i > 0 && want > 0 && class_size[want - 1] >= i * 16 - 15))
			fatal("size class lookup table is inconsistent at %zu bytes\n", i * 16);
	}
	if (class_size[NSMALL - 1] != SMALL_MAX || class_size[NCLASSES - 1] != LARGE_MAX ||
	    class_size[NCACHED - 1] != CACHE_MAX || size_class_large(SMALL_MAX + 1) != NSMALL)
		fatal("size class table is inconsistent\n");
}
