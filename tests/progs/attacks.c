/*
 * Heap attacks made on purpose: run by test_harden.c under
 * LD_PRELOAD=libarena.so, one attack per process.
 *
 *   attacks double-free-other-thread   a block freed by one thread (into its
 *                                      cache) is freed again by another
 *   attacks placement                  16 consecutive malloc(48): prints how
 *                                      many of the 15 steps are 48 B apart
 *                                      ("adjacent=N")
 *   attacks chunk-overflow             a linear overflow from the last block
 *                                      of one 2 MiB chunk 8 KiB into the
 *                                      next, which holds blocks too; then
 *                                      every block freed and the heap used
 *
 * The first expects libarena to report the double free and abort; it prints
 * "survived" and exits 0 if the second free is accepted.  The last prints
 * what the overflow hit ("hit=block": a block of the program's own, at the
 * next chunk's first byte) and "survived" if the heap still works.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *block;

static void *free_it(void *arg)
{
	(void)arg;
	printf("second free of %p from another thread\n", block);
	fflush(stdout);
	free(block);
	return NULL;
}

static int double_free_other_thread(void)
{
	block = malloc(48);
	free(block); /* into this thread's cache */
	pthread_t t;
	if (pthread_create(&t, NULL, free_it, NULL) != 0)
		return 2;
	pthread_join(t, NULL);
	printf("survived\n");
	return 0;
}

static int placement(void)
{
	char *p[16];
	for (int i = 0; i < 16; i++)
		p[i] = malloc(48);
	int adjacent = 0;
	for (int i = 1; i < 16; i++)
		adjacent += p[i] - p[i - 1] == 48;
	printf("adjacent=%d\n", adjacent);
	return 0;
}

enum { NOVER = 600, OVER_SIZE = 16384, REACH = 8192 };
#define CHUNK ((uintptr_t)2 << 20)

static char *over[NOVER];

/* The block of over[] ending last in the chunk before boundary, or -1. */
static int last_before(uintptr_t boundary)
{
	int best = -1;
	for (int i = 0; i < NOVER; i++) {
		uintptr_t end = (uintptr_t)over[i] + OVER_SIZE;
		if (end <= boundary && end > boundary - CHUNK &&
		    (best < 0 || end > (uintptr_t)over[best] + OVER_SIZE))
			best = i;
	}
	return best;
}

static int chunk_overflow(void)
{
	for (int i = 0; i < NOVER; i++) {
		if (!(over[i] = malloc(OVER_SIZE)))
			return 2;
		memset(over[i], 0x5a, OVER_SIZE);
	}
	/* a chunk holding blocks whose predecessor holds blocks too */
	int from = -1, hit = -1;
	uintptr_t boundary = 0;
	for (int i = 0; i < NOVER && from < 0; i++) {
		boundary = (uintptr_t)over[i] & ~(CHUNK - 1);
		from = last_before(boundary);
	}
	if (from < 0)
		return 2;
	for (int i = 0; i < NOVER; i++)
		if ((uintptr_t)over[i] == boundary)
			hit = i;
	char *start = over[from] + OVER_SIZE;
	size_t n = boundary + REACH - (uintptr_t)start;
	printf("overflow of %zu bytes from %p to %p: %s\n", n, (void *)start,
	       (void *)(boundary + REACH), hit >= 0 ? "hit=block" : "hit=other");
	fflush(stdout);
	memset(start, 0x41, n);
	for (int i = 0; i < NOVER; i++)
		free(over[i]);
	for (int round = 0; round < 4; round++) {
		for (int i = 0; i < NOVER; i++)
			if ((over[i] = malloc(OVER_SIZE / (1 + round))))
				memset(over[i], round, OVER_SIZE / (1 + round));
		for (int i = NOVER - 1; i >= 0; i--)
			free(over[i]);
	}
	printf("survived\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "double-free-other-thread"))
		return double_free_other_thread();
	if (argc >= 2 && !strcmp(argv[1], "placement"))
		return placement();
	if (argc >= 2 && !strcmp(argv[1], "chunk-overflow"))
		return chunk_overflow();
	fprintf(stderr, "usage: attacks double-free-other-thread | placement | chunk-overflow\n");
	return 2;
}
