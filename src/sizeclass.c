/* Size classes.  16..128 bytes in steps of 16, then four classes per
 * doubling: a request just above a power of two 2^k is rounded up by at most
 * 2^(k-2), so internal fragmentation is under 20% of the block (25% of the
 * request) from 129 bytes up; below 128 bytes the waste is under 16 bytes.
 * Classes up to SMALL_MAX are slab slots; above, up to LARGE_MAX, page runs
 * (every large class is a multiple of 4 KiB).  size_class() (internal.h)
 * maps a size to its class. */
#include "internal.h"

#define STEP(k) ((size_t)1 << ((k) - 2))
#define DOUBLING(k) \
	((size_t)1 << (k)) + STEP(k), ((size_t)1 << (k)) + 2 * STEP(k), \
	((size_t)1 << (k)) + 3 * STEP(k), (size_t)1 << ((k) + 1)

const size_t class_size[NCLASSES] = {
	16, 32, 48, 64, 80, 96, 112, 128,
	DOUBLING(7), DOUBLING(8), DOUBLING(9), DOUBLING(10), DOUBLING(11),
	DOUBLING(12), DOUBLING(13), /* small: up to 16 KiB */
	DOUBLING(14), DOUBLING(15), DOUBLING(16), DOUBLING(17), DOUBLING(18),
	DOUBLING(19), /* large: up to 1 MiB */
};

uint8_t class_slab_pages[NSMALL];
uint16_t class_nblocks[NSMALL];
uint32_t class_div_magic[NSMALL];

/* Pages per slab: the fewest (at most 16) whose tail waste is at most 1/16
 * of the slab, with at most SLAB_MAX_BLOCKS blocks. */
static unsigned slab_pages_for(size_t size)
{
	for (unsigned p = 1; p <= 16; p++) {
		size_t bytes = p * PAGE_SIZE;
		if (bytes / size == 0 || bytes / size > SLAB_MAX_BLOCKS)
			continue;
		if ((bytes % size) * 16 <= bytes)
			return p;
	}
	return 16;
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
	}
	if (class_size[NSMALL - 1] != SMALL_MAX || class_size[NCLASSES - 1] != LARGE_MAX)
		fatal("size class table is inconsistent\n");
}
