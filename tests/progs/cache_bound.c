/*
 * cache_bound: the most blocks of 64 B a thread's list holds (its first
 * size, before any growth: 8 KiB, 128 blocks capped at 64, tcache.c
 * bin_max) across frees and mallocs that fill both of its lists: for
 * every k, a fresh thread keeps 300 blocks, frees k, mallocs one (avail
 * takes head) and frees 200 more, reading its cached blocks after every
 * call.  Run under LD_PRELOAD=libarena.so.
 *
 * Prints max_cached=N (the most seen) and "ok".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "arena.h"
#include "preload.h"

enum { LIVE = 300, MORE = 200, SIZE = 64 };

static unsigned cls;
static uint64_t base, most;
static void *blocks[LIVE + 1];

static void look(void)
{
	arena_stats_t s;
	stats_now(&s);
	uint64_t n = s.classes[cls].cached - base;
	if (n > most)
		most = n;
}

static void *one(void *arg)
{
	int k = (int)(long)arg, i;
	for (i = 0; i < LIVE; i++)
		if (!(blocks[i] = malloc(SIZE)))
			exit(3);
	for (i = 0; i < k; i++, look())
		free(blocks[i]);
	if (!(blocks[0] = malloc(SIZE)))
		exit(3);
	look();
	for (i = k; i < k + MORE && i < LIVE; i++, look())
		free(blocks[i]);
	free(blocks[0]);
	for (; i < LIVE; i++)
		free(blocks[i]);
	return NULL;
}

int main(void)
{
	stats_find();
	arena_stats_t s;
	stats_now(&s);
	for (cls = 0; cls < s.nclasses && s.classes[cls].size != SIZE; cls++)
		;
	if (cls == s.nclasses) {
		printf("FAIL: no class of %d B\n", SIZE);
		return 3;
	}
	base = s.classes[cls].cached;
	for (long k = 1; k <= 100; k++) {
		pthread_t t;
		if (pthread_create(&t, NULL, one, (void *)k) != 0 || pthread_join(t, NULL) != 0) {
			printf("FAIL: pthread\n");
			return 3;
		}
	}
	printf("max_cached=%llu\nok\n", (unsigned long long)most);
	return 0;
}
