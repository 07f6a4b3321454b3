/*
 * cache_gc: a thread's cache gives back a grown list that went idle, at the
 * first look after the arena took a new chunk (tests/test_idle.c; tcache.c
 * gc_grown; docs/design.md "Thread caches give back what their thread does
 * not use").  Run under LD_PRELOAD=libarena.so with a decay_ms longer than
 * the run, so that no look follows the clock: every look here is one after
 * a new chunk, and what happens is decided by the calls alone.
 *
 * A thread of its own (a cache and an arena of its own: none of the
 * process's earlier allocations) mallocs 1,600 blocks of 1 KiB and frees
 * them, 12 rounds: its 1 KiB list grows to hold them all, running dry on the
 * way (a refill after every overflow), and its arena takes one chunk for
 * their slabs.  Then 256 blocks of 4 KiB (1 MiB, more than that chunk has
 * left, less than a chunk): the arena takes one new chunk, and the thread's
 * next sampled slow path looks at the grown lists.  The 1 KiB list, which
 * no malloc took from since, goes back whole (to its first size).  Before,
 * that look gave back only what stayed unused since the list's previous
 * look (none: it ran dry since), and the list waited for a look a chunk
 * later.
 *
 * Prints key=value lines: the active bytes (KiB) the thread added after
 * the 1 KiB rounds (`grown_kib`) and with its 4 KiB blocks live
 * (`after_kib`), the chunks in use before and after the 4 KiB blocks, and
 * "ok" at the end.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "arena.h"
#include "preload.h"

enum { N_SMALL = 1600, N_BIG = 256, ROUNDS = 12 };

static void *blocks[N_SMALL];
static arena_stats_t s0, s1, s2;

static void *run(void *arg)
{
	(void)arg;
	stats_now(&s0);
	for (int r = 0; r < ROUNDS; r++) {
		for (int i = 0; i < N_SMALL; i++)
			blocks[i] = take_block(1024);
		for (int i = 0; i < N_SMALL; i++)
			free(blocks[i]);
	}
	stats_now(&s1);
	for (int i = 0; i < N_BIG; i++)
		blocks[i] = take_block(4096);
	stats_now(&s2);
	for (int i = 0; i < N_BIG; i++)
		free(blocks[i]);
	return NULL;
}

int main(void)
{
	stats_find();
	pthread_t t;
	if (pthread_create(&t, NULL, run, NULL) != 0 || pthread_join(t, NULL) != 0) {
		printf("FAIL: pthread\n");
		return 3;
	}
	printf("grown_kib=%zu\n", (s1.active - s0.active) >> 10);
	printf("after_kib=%zu\n", (s2.active - s0.active) >> 10);
	printf("chunks_before=%zu\nchunks_after=%zu\n", s1.chunks, s2.chunks);
	printf("ok\n");
	return 0;
}
