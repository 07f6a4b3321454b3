/*
 * Linked with libarena.a (no LD_PRELOAD): malloc is libarena's.  Allocates
 * known numbers of blocks and prints the statistics it reads back, then
 * checks that malloc and arena_malloc are one allocator.  test_static.c
 * checks the output.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"

enum { NSMALL = 1000, NLARGE = 10, NHUGE = 3 };

/* The first call into the allocator, from .preinit_array: before libc has
 * set environ (sanitizer and fuzzer runtimes allocate there).  ARENA_CONF
 * must still be read (test_static.c, reads_arena_conf). */
static void *preinit_block;
static void preinit_alloc(void)
{
	preinit_block = malloc(100);
}
__attribute__((section(".preinit_array"), used)) static void (*const preinit)(void) = preinit_alloc;

int main(void)
{
	arena_stats_t s0, s1, s2;
	static void *small[NSMALL], *large[NLARGE], *huge[NHUGE];

	if (!preinit_block) {
		printf("malloc in .preinit_array failed\n");
		return 2;
	}
	free(preinit_block);
	if (arena_stats_get(&s0) != 0) {
		printf("arena_stats_get failed\n");
		return 2;
	}
	for (int i = 0; i < NSMALL; i++)
		small[i] = malloc(5000); /* class 5120 */
	for (int i = 0; i < NLARGE; i++)
		large[i] = malloc(100000);
	for (int i = 0; i < NHUGE; i++)
		huge[i] = arena_malloc(3 << 20); /* through the other name */
	for (int i = 0; i < NSMALL; i++)
		if (!small[i])
			return 3;
	for (int i = 0; i < NLARGE; i++)
		if (!large[i])
			return 3;
	for (int i = 0; i < NHUGE; i++)
		if (!huge[i])
			return 3;
	if (arena_stats_get(&s1) != 0)
		return 2;
	printf("nmalloc_small=%llu\n", (unsigned long long)(s1.nmalloc_small - s0.nmalloc_small));
	printf("nmalloc_large=%llu\n", (unsigned long long)(s1.nmalloc_large - s0.nmalloc_large));
	printf("nmalloc_huge=%llu\n", (unsigned long long)(s1.nmalloc_huge - s0.nmalloc_huge));
	printf("nmalloc_total=%llu\n",
	       (unsigned long long)(s1.nmalloc_small + s1.nmalloc_large + s1.nmalloc_huge));
	printf("allocated_delta=%zu\n", s1.allocated - s0.allocated);

	for (int i = 0; i < NSMALL; i++)
		arena_free(small[i]);
	for (int i = 0; i < NLARGE; i++)
		free(large[i]);
	for (int i = 0; i < NHUGE; i++)
		free(huge[i]);
	if (arena_stats_get(&s2) != 0)
		return 2;
	printf("nfree_huge=%llu\n", (unsigned long long)(s2.nfree_huge - s1.nfree_huge));

	/* One allocator under both names, libc's own allocations included. */
	int same = 1;
	static const size_t sizes[] = { 0, 1, 24, 1000, 5000, 16385, 100000, 3 << 20 };
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
		void *p = malloc(sizes[i]), *q = arena_malloc(sizes[i]);
		if (!p || !q || arena_malloc_usable_size(p) != malloc_usable_size(p) ||
		    malloc_usable_size(q) != arena_malloc_usable_size(q) ||
		    malloc_usable_size(p) != malloc_usable_size(q))
			same = 0;
		arena_free(p);
		free(q);
	}
	char *dup = strdup("x");
	printf("strdup_usable=%zu\n", arena_malloc_usable_size(dup));
	arena_free(dup);
	printf("usable_5000=%zu\n", malloc_usable_size(small[0] = malloc(5000)));
	free(small[0]);
	printf("same_allocator=%s\n", same ? "yes" : "no");
	printf("done\n");
	return 0;
}
