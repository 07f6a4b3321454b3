/* Size classes.  16..128 bytes in steps of 16, then four classes per
 * doubling: a request just above a power of two 2^k is rounded up by at most
 * 2^(k-2), so internal fragmentation is under 20% of the block (25% of the
 * request) from 129 bytes up; below 128 bytes the waste is under 16 bytes.
 * Classes up to SMALL_MAX are slab slots; above, up to LARGE_MAX, page runs
 * (every large class is a multiple of 4 KiB).  size_class() (internal.h)
 * maps a size to its class.
 *
 * The header classes (issue 16): the doublings above 1, 2, 4 and 8 KiB have
 * a fifth class, 2^k + 2^k/8 (1152, 2304, 4608, 9216 bytes), for blocks of
 * a page plus a header, what page caches allocate (sqlite's are the page
 * plus 272 bytes, its sorter's two pages plus 100-350, and it has
 * page + 8 blocks).  4096 + 8..512 bytes wasted 10-20% of a 5120-byte block
 * and now 0-11% of a 4608-byte one (docs/design.md, "Blocks of a page plus
 * a header", has the shapes measured and the ones left alone).  With 64 classes the table
 * fills arena_stats_t's ARENA_STATS_MAX_CLASSES: a class more would change
 * the public struct. */
#include "internal.h"

#define STEP(k) ((size_t)1 << ((k) - 2))
#define DOUBLING(k) \
	((size_t)1 << (k)) + STEP(k), ((size_t)1 << (k)) + 2 * STEP(k), \
	((size_t)1 << (k)) + 3 * STEP(k), (size_t)1 << ((k) + 1)
/* A doubling with its header class first. */
#define DOUBLING_HDR(k) HDR_CLASS(k), DOUBLING(k)

const size_t class_size[NCLASSES] = {
	16, 32, 48, 64, 80, 96, 112, 128,
	DOUBLING(7), DOUBLING(8), DOUBLING(9), DOUBLING_HDR(10), DOUBLING_HDR(11),
	DOUBLING_HDR(12), DOUBLING_HDR(13), /* small: up to 16 KiB */
	DOUBLING(14), DOUBLING(15), DOUBLING(16), DOUBLING(17), DOUBLING(18),
	DOUBLING(19), /* large: up to 1 MiB */
};

/* size_bin_offset() for requests up to SIZE_LUT_MAX: entry i is bin_off()
 * of the class of every size in (16 * (i - 1), 16 * i]. */
#define B(c) (((c) + 1) << BIN_SHIFT)
#define B4(c) B(c), B(c), B(c), B(c)
const uint16_t size_bin_off[SIZE_LUT_MAX / 16 + 1] = {
	B(0), B(0), B(1), B(2), B(3), B(4), B(5), B(6), B(7),         /* ..128 by 16 */
	B(8), B(8), B(9), B(9), B(10), B(10), B(11), B(11),           /* ..256 by 32 */
	B4(12), B4(13), B4(14), B4(15),                               /* ..512 by 64 */
	B4(16), B4(16), B4(17), B4(17), B4(18), B4(18), B4(19), B4(19), /* ..1024 */
};

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

static unsigned slab_pages_for(size_t size)
{
	size_t want = 16 * PAGE_SIZE / size;
	if (want > SLAB_MIN_BLOCKS)
		want = SLAB_MIN_BLOCKS;
	for (unsigned p = 1; p <= 16; p++) {
		size_t bytes = p * PAGE_SIZE, n = bytes / size;
		if (n < want || n > SLAB_MAX_BLOCKS)
			continue;
		if ((bytes - n * size) * SLAB_TAIL_DIV <= bytes)
			return p;
	}
	return 16; /* none: every class has one (tests/unit/test_sizeclass.c) */
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
	for (size_t i = 0; i <= SIZE_LUT_MAX / 16; i++) {
		unsigned c = bin_class(size_bin_off[i]);
		if (c != size_class_calc(i * 16) || (i > 0 && c != size_class_calc(i * 16 - 15)))
			fatal("size class lookup table is inconsistent at %zu bytes\n", i * 16);
	}
	if (class_size[NSMALL - 1] != SMALL_MAX || class_size[NCLASSES - 1] != LARGE_MAX)
		fatal("size class table is inconsistent\n");
}
