/*
 * The misuse cases, shared by test_misuse.c (run in a forked child of the
 * test, libarena linked in) and progs/misuse.c (run under LD_PRELOAD with
 * ARENA_CONF=misuse:...).
 *
 * misuse_run(name) prints "addr=0x<hex>" (the pointer handed to free) on
 * stdout, commits the misuse, and if the process survives it (misuse:warn or
 * misuse:ignore) checks that the heap is still sound, prints "survived" and
 * returns 0.  Problems after the misuse are printed on stdout as "FAIL: ..."
 * (stderr is reserved for the allocator) and give 3; an unknown case gives 2.
 */
#ifndef ARENA_TESTS_MISUSE_CASES_H
#define ARENA_TESTS_MISUSE_CASES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common.h"

static const char *const misuse_names[] = {
	"stack", "static", "mmap", "mmap_2m", "interior_small", "interior_small_8",
	"interior_large", "interior_large_16", "interior_huge", "interior_huge_chunk",
	"double_small", "double_small_flushed", "double_large", "double_huge",
};
#define MISUSE_COUNT ((int)(sizeof misuse_names / sizeof *misuse_names))

static inline void misuse_announce(void *p)
{
	printf("addr=0x%lx\n", (unsigned long)(uintptr_t)p);
	fflush(stdout);
}

static inline int misuse_fail(const char *what)
{
	printf("FAIL: %s\n", what);
	fflush(stdout);
	return 3;
}

/*
 * After a misuse that was warned about or ignored the heap must still work:
 * blocks of size n (and of other sizes) are distinct and keep their contents.
 */
static inline int misuse_heap_sound(size_t n)
{
	enum { K = 300 };
	static void *v[K];
	static size_t sz[K];
	rng_t r;
	rng_seed(&r, n);
	for (int i = 0; i < K; i++) {
		sz[i] = i % 2 ? n : rng_logsize(&r, 1, 200000);
		v[i] = malloc(sz[i]);
		if (!v[i])
			return misuse_fail("malloc failed after the misuse");
		pat_fill(v[i], 0, sz[i] < 8192 ? sz[i] : 8192, (uint32_t)i);
	}
	for (int i = 0; i < K; i++) {
		if (pat_check(v[i], 0, sz[i] < 8192 ? sz[i] : 8192, (uint32_t)i) != SIZE_MAX)
			return misuse_fail("blocks overlap after the misuse (same block handed out twice?)");
		for (int j = 0; j < i; j++)
			if (v[i] == v[j])
				return misuse_fail("the same block was handed out twice after the misuse");
	}
	for (int i = 0; i < K; i++)
		free(v[i]);
	return 0;
}

static inline int misuse_survived(int rc)
{
	if (rc == 0) {
		printf("survived\n");
		fflush(stdout);
	}
	return rc;
}

/* Misuse: free of memory that is not libarena's; the memory is left alone. */
static inline int misuse_foreign(uint8_t *mem, size_t len)
{
	pat_fill(mem, 0, len, 5);
	misuse_announce(mem);
	free(opaque_ptr(mem));
	if (pat_check(mem, 0, len, 5) != SIZE_MAX)
		return misuse_fail("the foreign memory was written by free()");
	return misuse_heap_sound(100);
}

/* Misuse: free of p + off, p a block of n bytes; the block stays intact and
 * can then be freed normally. */
static inline int misuse_interior(size_t n, size_t off)
{
	uint8_t *p = malloc(n);
	if (!p)
		return misuse_fail("malloc failed");
	size_t len = n < 65536 ? n : 65536;
	pat_fill(p, 0, len, 9);
	misuse_announce(p + off);
	free(opaque_ptr(p + off));
	if (pat_check(p, 0, len, 9) != SIZE_MAX)
		return misuse_fail("the block changed after free() of an interior pointer");
	void *q = malloc(n);
	if (!q)
		return misuse_fail("malloc failed");
	if ((uint8_t *)q <= p + off && p + off < (uint8_t *)q + n)
		return misuse_fail("the interior pointer was handed out by malloc");
	free(q);
	free(p); /* the real free: no complaint expected */
	return misuse_heap_sound(n);
}

/* Misuse: free of p twice. */
static inline int misuse_double(size_t n, int flush)
{
	enum { F = 1000 };
	static void *others[F];
	if (flush)
		for (int i = 0; i < F; i++)
			if (!(others[i] = malloc(n)))
				return misuse_fail("malloc failed");
	uint8_t *p = malloc(n);
	if (!p)
		return misuse_fail("malloc failed");
	memset(p, 1, n < 4096 ? n : 4096);
	/* Announced before the first free: printing may allocate (the stdio
	 * buffer), and nothing may be allocated between the two frees, or p
	 * could legitimately be a live block again. */
	misuse_announce(p);
	free(opaque_ptr(p)); /* (opaque: the compiler may not know that p is freed) */
	if (flush) /* push p out of the thread cache, without reusing it */
		for (int i = 0; i < F; i++)
			free(others[i]);
	free(p);
	void *a = malloc(n), *b = malloc(n);
	if (!a || !b)
		return misuse_fail("malloc failed");
	if (a == b)
		return misuse_fail("after a double free, malloc returned the same block twice");
	free(a);
	free(b);
	return misuse_heap_sound(n);
}

static inline int misuse_run(const char *name)
{
	static uint8_t static_buf[4096];
	int rc = 2;
	if (!strcmp(name, "none")) {
		void *p = malloc(100);
		misuse_announce(p);
		free(p);
		rc = misuse_heap_sound(100);
	} else if (!strcmp(name, "stack")) {
		uint8_t buf[512];
		rc = misuse_foreign(buf, sizeof buf);
	} else if (!strcmp(name, "static")) {
		rc = misuse_foreign(static_buf, sizeof static_buf);
	} else if (!strcmp(name, "mmap")) {
		uint8_t *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return misuse_fail("mmap failed");
		rc = misuse_foreign(m, 4096);
		munmap(m, 4096);
	} else if (!strcmp(name, "mmap_2m")) {
		/* A 2 MiB-aligned address, as a chunk of libarena's would be. */
		size_t len = 6 * MiB;
		uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return misuse_fail("mmap failed");
		uint8_t *a = (uint8_t *)(((uintptr_t)m + 2 * MiB - 1) & ~(uintptr_t)(2 * MiB - 1));
		rc = misuse_foreign(a, 2 * MiB);
		munmap(m, len);
	} else if (!strcmp(name, "interior_small")) {
		rc = misuse_interior(64, 16);
	} else if (!strcmp(name, "interior_small_8")) {
		rc = misuse_interior(200, 8);
	} else if (!strcmp(name, "interior_large")) {
		rc = misuse_interior(100000, 4096);
	} else if (!strcmp(name, "interior_large_16")) {
		rc = misuse_interior(300000, 16);
	} else if (!strcmp(name, "interior_huge")) {
		rc = misuse_interior(3 * MiB, 4096);
	} else if (!strcmp(name, "interior_huge_chunk")) {
		rc = misuse_interior(5 * MiB, 2 * MiB); /* a chunk boundary inside the block */
	} else if (!strcmp(name, "double_small")) {
		rc = misuse_double(32, 0);
	} else if (!strcmp(name, "double_small_flushed")) {
		rc = misuse_double(48, 1);
	} else if (!strcmp(name, "double_large")) {
		rc = misuse_double(100000, 0);
	} else if (!strcmp(name, "double_huge")) {
		rc = misuse_double(3 * MiB, 0);
	} else {
		printf("unknown case %s\n", name);
		return 2;
	}
	return misuse_survived(rc);
}

#endif /* ARENA_TESTS_MISUSE_CASES_H */
