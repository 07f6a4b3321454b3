/*
 * cache_alone: a single-threaded program's list holds a whole round of
 * 1,600 blocks of 4 KiB (6,400 KiB: glibc_simple's largest quick
 * configuration) once it has grown, because a thread alone may grow its
 * lists by 8 MiB (tcache.c, CACHE_GROW_BYTES; tests/test_idle.c); with
 * "thread", the rounds run in a second thread while the main thread, which
 * has a cache too, waits for it (glibc_simple -T): the one that works may
 * take the whole pool (purge_cache_may_grow).  Run under
 * LD_PRELOAD=libarena.so, in a process with no other thread (a test
 * runner's own threads would share the growth budget).
 *
 * Prints key=value lines: the threads with a cache, the KiB of free blocks
 * in pages in use after the last round's frees (active - allocated: the
 * thread's list, and slots of slabs not yet empty), and "ok".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "preload.h"

enum { N = 1600, ROUNDS = 12 }; /* a list doubles at most once a round */

static void *blocks[N];

static void *rounds(void *arg)
{
	(void)arg;
	for (int r = 0; r < ROUNDS; r++) {
		for (int i = 0; i < N; i++) {
			char *p = malloc(4096);
			if (!p) {
				printf("FAIL: malloc(4096)\n");
				exit(3);
			}
			p[0] = 1;
			blocks[i] = p;
		}
		for (int i = 0; i < N; i++)
			free(blocks[i]);
	}
	arena_stats_t s;
	stats_now(&s);
	printf("nthreads=%u\n", s.nthreads);
	printf("cached_kib=%zu\n", (s.active - s.allocated) >> 10);
	return NULL;
}

int main(int argc, char **argv)
{
	stats_find();
	free(malloc(16)); /* the main thread's cache is live */
	if (argc > 1 && strcmp(argv[1], "thread") == 0) {
		pthread_t t;
		if (pthread_create(&t, NULL, rounds, NULL) != 0 || pthread_join(t, NULL) != 0) {
			printf("FAIL: pthread\n");
			return 3;
		}
	} else {
		rounds(NULL);
	}
	printf("ok\n");
	return 0;
}
