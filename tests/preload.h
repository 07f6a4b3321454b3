/*
 * For the helper programs that run under LD_PRELOAD=libarena.so
 * (tests/progs/): libarena's statistics, found at run time (the program
 * is not linked with libarena).  stats_find() in main, before any thread
 * starts; stats_now() then reads them, and the program exits 5 with a FAIL
 * line when it is not running under libarena.  take_block() mallocs and
 * writes a block's first byte, or exits 3 with a FAIL line.
 */
#ifndef ARENA_TEST_PRELOAD_H
#define ARENA_TEST_PRELOAD_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"

static int (*stats_get)(arena_stats_t *);

static inline void stats_find(void)
{
	stats_get = (int (*)(arena_stats_t *))dlsym(RTLD_DEFAULT, "arena_stats_get");
}

static inline void stats_now(arena_stats_t *s)
{
	memset(s, 0, sizeof(*s));
	if (!stats_get || stats_get(s) != 0) {
		printf("FAIL: arena_stats_get missing: not under libarena\n");
		exit(5);
	}
}

static inline void *take_block(size_t size)
{
	char *p = malloc(size);
	if (!p) {
		printf("FAIL: malloc(%zu)\n", size);
		exit(3);
	}
	p[0] = 1;
	return p;
}

#endif /* ARENA_TEST_PRELOAD_H */
