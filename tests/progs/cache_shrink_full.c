/*
 * cache_shrink_full: a free that finds its list full, where the cache's
 * look at its grown lists (tcache.c tcache_gc, gc_grown) shrinks that very
 * list, still has a place for its block (tests/test_idle.c).  Run under
 * LD_PRELOAD=libarena.so with a decay_ms longer than the run: no look
 * follows the clock, and what happens is decided by the calls alone.
 *
 * A thread of its own grows its 1 KiB list (1,600 blocks malloc'ed and
 * freed, 12 rounds), takes 2,049 blocks of 1 KiB, then 32 KiB blocks until
 * its arena takes a new chunk (so the cache's next look is one at its grown
 * lists), and frees the 1 KiB blocks.  The 1 KiB list is idle at that look
 * if a sample (every 32nd slow path) came after its last malloc: each 32
 * KiB malloc is a slow path, ~62 of them before the new chunk today.  The free that finds the list full gives half
 * back, and the look there shrinks the idle list to its first size, which
 * the blocks it kept fill: the free must make a place again.  Without one
 * the list held a block more than its count, which no flush gave back: the
 * thread's exit left it in its dead cache (a debug build stops there).
 *
 * Prints the 1 KiB blocks the caches held after the rounds (`grown`: the
 * list grew to hold them) and after the frees (`cached`: the list's first
 * size or less once shrunk), the 1 KiB class's slab pages
 * (all arenas) before the thread and after it exited and malloc_trim(0)
 * gave the empty slabs back (`pages_before`, `pages_after`), and "ok".
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "arena.h"
#include "preload.h"

enum { N_SMALL = 1600, ROUNDS = 12, N_TAKEN = 2049, BIG = 32768, N_BIG = 1024 };

static void *blocks[N_TAKEN];
static void *bigs[N_BIG];
static unsigned nbig;
static unsigned long long grown, cached;

/* The 1 KiB class's figures now (every arena). */
static const arena_class_stats_t *class_1k(void)
{
	static arena_stats_t s;
	stats_now(&s);
	for (unsigned c = 0; c < s.nclasses; c++)
		if (s.classes[c].size == 1024)
			return &s.classes[c];
	printf("FAIL: no 1 KiB class\n");
	exit(3);
}

/* 32 KiB blocks until the arena takes a chunk: the refill that took it
 * makes the cache's next look one at its grown lists. */
static void until_new_chunk(void)
{
	arena_stats_t s;
	stats_now(&s);
	size_t chunks = s.chunks;
	while (nbig < N_BIG) {
		bigs[nbig++] = take_block(BIG);
		stats_now(&s);
		if (s.chunks != chunks)
			return;
	}
	printf("FAIL: no new chunk in %u blocks of 32 KiB\n", nbig);
	exit(3);
}

static void *run(void *arg)
{
	(void)arg;
	for (int r = 0; r < ROUNDS; r++) {
		for (int i = 0; i < N_SMALL; i++)
			blocks[i] = take_block(1024);
		for (int i = 0; i < N_SMALL; i++)
			free(blocks[i]);
	}
	grown = class_1k()->cached;
	for (int i = 0; i < N_TAKEN; i++)
		blocks[i] = take_block(1024);
	until_new_chunk();
	for (int i = 0; i < N_TAKEN; i++)
		free(blocks[i]);
	cached = class_1k()->cached;
	for (unsigned i = 0; i < nbig; i++)
		free(bigs[i]);
	return NULL;
}

int main(void)
{
	stats_find();
	malloc_trim(0);
	unsigned long long before = class_1k()->pages;
	pthread_t t;
	if (pthread_create(&t, NULL, run, NULL) != 0 || pthread_join(t, NULL) != 0) {
		printf("FAIL: pthread\n");
		return 3;
	}
	malloc_trim(0);
	printf("grown=%llu\ncached=%llu\npages_before=%llu\npages_after=%llu\nok\n", grown, cached,
	       before, (unsigned long long)class_1k()->pages);
	return 0;
}
