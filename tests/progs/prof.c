/* Helper of tests/test_prof.c, run under LD_PRELOAD=libarena.so: heap
 * profiles.  Usage: prof MODE [PATH]
 *   ratio PATH   hold memory from two functions, 3:1, through sizes 16 B to
 *                1 MiB (each size drawn: 3 blocks from three(), 1 from
 *                one()); print "three=B" and "one=B" (usable bytes), then
 *                dump a profile to PATH (arena_prof_dump)
 *   off PATH     arena_prof_dump's answer; prints "dump=E"
 *   fork         allocate, fork; the child allocates from child_keeps and
 *                exits (its exit dump); the parent waits, then exits
 *   xthread PATH one thread allocates from made_here (16 B-4 KiB, every
 *                16th block 16-64 KiB), another frees every block; dump to
 *                PATH
 *   leak         keep blocks from leaky (for prof_leak), exit
 *   misuse       free each of blocks of 24 B, 100 B, 3000 B and 40 KiB
 *                twice (run with misuse:warn), then free 2,000 blocks of
 *                made_here's sizes twice over; prints "done"
 *   counts       arena_stats_get's malloc and free counts and allocated
 *                bytes before and after 400,000 random mallocs and frees of
 *                16 B-40 KiB in 256 slots, all freed at the end; prints
 *                dmalloc=N, dfree=N and dalloc=N, a line each
 *   batch        64 blocks of 16 KiB made here and freed in order by
 *                another thread (of another arena: run with narenas:2),
 *                then 32 taken again here; prints "batch_hits=N", how
 *                many of those 32 are among the last 32 freed
 * Sizes come from a fixed xorshift sequence: the same run each time. */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arena.h"

typedef int (*dump_fn)(const char *);
static uint64_t rng = 88172645463325252ULL;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* 16 B .. 1 MiB, about log-uniform */
static size_t some_size(void)
{
	unsigned shift = 4 + (unsigned)(next() % 16);
	size_t lo = (size_t)1 << shift;
	return lo + (size_t)(next() % lo);
}

static void *volatile sink;

/* Allocate k blocks of size bytes each and keep them; the usable bytes. */
static __attribute__((noinline)) size_t three(void **keep, size_t *n, size_t size)
{
	size_t held = 0;
	for (int k = 0; k < 3; k++) {
		void *p = malloc(size);
		if (!p)
			abort();
		memset(p, 1, 16);
		held += malloc_usable_size(p);
		keep[(*n)++] = p;
	}
	sink = keep;
	return held;
}

static __attribute__((noinline)) size_t one(void **keep, size_t *n, size_t size)
{
	void *p = malloc(size);
	if (!p)
		abort();
	memset(p, 2, 16);
	keep[(*n)++] = p;
	sink = keep;
	return malloc_usable_size(p);
}

static dump_fn dumper(void)
{
	dump_fn f = (dump_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "arena_prof_dump");
	if (!f) {
		fprintf(stderr, "arena_prof_dump not found\n");
		exit(3);
	}
	return f;
}

static __attribute__((noinline)) void *child_keeps(size_t bytes)
{
	void *p = malloc(bytes);
	memset(p, 3, 64);
	return p;
}

#define XN 20000
static void *xblocks[XN];

static __attribute__((noinline)) void made_here(void)
{
	/* every 16th of a large cached class (16-64 KiB): their frees by
	 * another arena's thread take prof_cache_free's foreign way */
	for (int i = 0; i < XN; i++)
		xblocks[i] = malloc(i % 16 ? some_size() % 4096 + 16 : (16 << 10) + some_size() % (48 << 10));
}

static void *maker(void *arg)
{
	(void)arg;
	made_here();
	return NULL;
}

static void *freer(void *arg)
{
	(void)arg;
	for (int i = 0; i < XN; i++)
		free(xblocks[i]);
	return NULL;
}

static __attribute__((noinline)) void leaky(void)
{
	for (int i = 0; i < 64; i++)
		sink = malloc(256 << 10);
}

#define BATCH_N 64

static void *free_all(void *arg)
{
	void **blocks = arg;
	for (unsigned i = 0; i < BATCH_N; i++)
		free(blocks[i]);
	return NULL;
}

/* The blocks another thread freed come back to this thread's refills as
 * transfer batches, the last freed first; with every allocation a sampling
 * point, a sample's refill must take a batch whole (the rest handed out by
 * the next mallocs), not one block of it with the others given back to
 * their pages (taken again later, after the next batches). */
static int batch(void)
{
	static void *blocks[BATCH_N];
	for (unsigned i = 0; i < BATCH_N; i++)
		blocks[i] = malloc(16 << 10);
	pthread_t t;
	if (pthread_create(&t, NULL, free_all, blocks) != 0 || pthread_join(t, NULL) != 0)
		return 4;
	void *again[BATCH_N / 2];
	unsigned hits = 0;
	for (unsigned i = 0; i < BATCH_N / 2; i++) {
		again[i] = malloc(16 << 10);
		for (unsigned j = BATCH_N / 2; j < BATCH_N; j++)
			hits += again[i] == blocks[j];
	}
	printf("batch_hits=%u\n", hits);
	for (unsigned i = 0; i < BATCH_N / 2; i++)
		free(again[i]);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	const char *mode = argv[1];
	if (!strcmp(mode, "ratio") && argc == 3) {
		enum { DRAWS = 3000 };
		size_t n = 0;
		void **keep = calloc(4 * DRAWS, sizeof(void *));
		size_t a = 0, b = 0;
		/* each size drawn: three blocks from three(), one from one() */
		for (int i = 0; i < DRAWS; i++) {
			size_t size = some_size();
			a += three(keep, &n, size);
			b += one(keep, &n, size);
		}
		printf("three=%zu\none=%zu\n", a, b);
		fflush(stdout);
		int err = dumper()(argv[2]);
		printf("dump=%d\n", err);
		return err != 0;
	}
	if (!strcmp(mode, "off") && argc == 3) {
		for (int i = 0; i < 1000; i++)
			sink = malloc(some_size());
		printf("dump=%d\n", dumper()(argv[2]));
		return 0;
	}
	if (!strcmp(mode, "fork")) {
		pthread_t t; /* a threaded parent: fork takes every lock */
		pthread_create(&t, NULL, maker, NULL);
		pthread_join(t, NULL);
		pid_t pid = fork();
		if (pid == 0) {
			for (int i = 0; i < 32; i++)
				sink = child_keeps((size_t)1 << 20);
			printf("child=%d\n", (int)getpid());
			fflush(stdout);
			exit(0);
		}
		int st;
		waitpid(pid, &st, 0);
		printf("parent=%d\n", (int)getpid());
		return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
	}
	if (!strcmp(mode, "xthread") && argc == 3) {
		pthread_t t;
		pthread_create(&t, NULL, maker, NULL);
		pthread_join(t, NULL);
		pthread_create(&t, NULL, freer, NULL);
		pthread_join(t, NULL);
		printf("dump=%d\n", dumper()(argv[2]));
		return 0;
	}
	if (!strcmp(mode, "leak")) {
		leaky();
		return 0;
	}
	if (!strcmp(mode, "misuse")) {
		static const size_t sizes[] = { 24, 100, 3000, 40 << 10 };
		for (unsigned i = 0; i < 4; i++) {
			char *volatile p = malloc(sizes[i]);
			free(p);
			free(p);
		}
		static void *blocks[2000];
		for (unsigned i = 0; i < 2000; i++)
			blocks[i] = malloc(some_size() % 2000 + 1);
		for (unsigned i = 0; i < 2000; i++)
			free(blocks[i]);
		for (unsigned i = 0; i < 2000; i++)
			free(blocks[i]);
		printf("done\n");
		return 0;
	}
	if (!strcmp(mode, "batch"))
		return batch();
	if (!strcmp(mode, "counts")) {
		int (*get)(arena_stats_t *) = (int (*)(arena_stats_t *))dlsym(RTLD_DEFAULT, "arena_stats_get");
		if (!get)
			return 3;
		static void *slot[256];
		arena_stats_t a, b;
		get(&a);
		for (unsigned i = 0; i < 400000; i++) {
			uint64_t r = next();
			unsigned k = (unsigned)(r % 256);
			free(slot[k]);
			slot[k] = (r >> 8) % 64 == 0 ? malloc(16 + (r >> 16) % (40 << 10)) : malloc(16 + (r >> 16) % 500);
		}
		for (unsigned k = 0; k < 256; k++)
			free(slot[k]);
		get(&b);
		printf("dmalloc=%llu\ndfree=%llu\ndalloc=%lld\n",
		       (unsigned long long)(b.nmalloc_small + b.nmalloc_large - a.nmalloc_small - a.nmalloc_large),
		       (unsigned long long)(b.nfree_small + b.nfree_large - a.nfree_small - a.nfree_large),
		       (long long)b.allocated - (long long)a.allocated);
		return 0;
	}
	return 2;
}
