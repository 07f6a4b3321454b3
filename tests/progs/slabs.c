/*
 * slabs: what becomes of a class's empty slabs (slab.c, "Empty slabs").
 * Run under LD_PRELOAD=libarena.so in a fresh process (nothing else has
 * used the 5120-byte class), with the ARENA_CONF the mode says:
 *
 *   order  (tcache:false: every malloc and free goes to the slabs) two
 *          slabs of 8 blocks; a block of the second slab is freed, then
 *          every block of the first: the next malloc must take the second
 *          slab's free block, not one of the empty slab.  Prints
 *          from_partial=1 when it did.
 *   trim   (tcache:false) 64 blocks made and freed; malloc_trim(0); prints
 *          the class's pages before and after (after: 0).
 *   sweep  (decay_ms:50) 64 blocks made and freed, then 600 ms in which the
 *          thread mallocs and frees rounds of 512 blocks of 32 KiB (more
 *          than its cache may hold: its slow paths, where its GC looks once
 *          per decay period); prints
 *          the class's pages after the frees and at the end (end: 0: the
 *          cache gave its unused blocks back, and the slabs left empty
 *          went after a period unused).
 *
 * Prints key=value lines and "ok".
 */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "arena.h"
#include "preload.h"

enum { SIZE = 5000, CLASS = 5120, PER_SLAB = 8, N = 64 };

static void *blocks[N];

static uint64_t class_pages(void)
{
	arena_stats_t s;
	stats_now(&s);
	for (unsigned c = 0; c < s.nclasses; c++)
		if (s.classes[c].size == CLASS)
			return s.classes[c].pages;
	printf("FAIL: no class of %d bytes\n", CLASS);
	exit(3);
}

static void *take(size_t size)
{
	void *p = malloc(size);
	if (!p) {
		printf("FAIL: malloc(%zu)\n", size);
		exit(3);
	}
	memset(p, 1, size < 64 ? size : 64);
	return p;
}

static void order(void)
{
	for (int i = 0; i < 2 * PER_SLAB; i++)
		blocks[i] = take(SIZE);
	/* the slabs' blocks, in address order within each slab */
	char *second = blocks[PER_SLAB + 3];
	free(second);
	for (int i = 0; i < PER_SLAB; i++)
		free(blocks[i]);
	void *p = take(SIZE);
	printf("from_partial=%d\n", p == second);
}

static void trim(void)
{
	for (int i = 0; i < N; i++)
		blocks[i] = take(SIZE);
	for (int i = 0; i < N; i++)
		free(blocks[i]);
	printf("pages_freed=%lu\n", (unsigned long)class_pages());
	malloc_trim(0);
	printf("pages_end=%lu\n", (unsigned long)class_pages());
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sweep(void)
{
	static void *other[512];
	for (int i = 0; i < N; i++)
		blocks[i] = take(SIZE);
	for (int i = 0; i < N; i++)
		free(blocks[i]);
	printf("pages_freed=%lu\n", (unsigned long)class_pages());
	for (double end = now_ms() + 600; now_ms() < end;) {
		for (int i = 0; i < 512; i++)
			other[i] = take(32768);
		for (int i = 0; i < 512; i++)
			free(other[i]);
		nanosleep(&(struct timespec){ 0, 5000000 }, NULL);
	}
	printf("pages_end=%lu\n", (unsigned long)class_pages());
}

int main(int argc, char **argv)
{
	stats_find();
	const char *mode = argc > 1 ? argv[1] : "";
	if (!strcmp(mode, "order"))
		order();
	else if (!strcmp(mode, "trim"))
		trim();
	else if (!strcmp(mode, "sweep"))
		sweep();
	else {
		printf("FAIL: mode order, trim or sweep\n");
		return 2;
	}
	printf("ok\n");
	return 0;
}
