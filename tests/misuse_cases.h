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
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "common.h"

#include <malloc.h>

/* Resolved at load time: from libarena.a in the test, from libarena.so
 * (LD_PRELOAD) in progs/misuse, which is linked without libarena. */
#pragma weak free_sized
#pragma weak free_aligned_sized

/* glibc's own allocator, under its internal names: "another allocator's" block. */
extern void *__libc_malloc(size_t size);
extern void __libc_free(void *ptr);

/* The cases libarena detects (each must be reported and abort by default). */
static const char *const misuse_names[] = {
	"stack", "static", "mmap", "mmap_2m", "interior_small", "interior_small_8",
	"interior_large", "interior_large_16", "interior_huge", "interior_huge_chunk",
	"double_small", "double_small_flushed", "double_large", "double_huge",
	"glibc_small", "glibc_mmap", "chunk_free_page",
	"realloc_freed_small", "realloc_freed_small_flushed", "realloc_freed_large",
	"realloc_freed_huge", "realloc_interior_small", "realloc_interior_large",
	"realloc_interior_huge", "realloc_stack",
	"free_sized_larger_small", "free_sized_larger_large", "free_sized_larger_huge",
	"free_aligned_sized_larger",
	"usable_stack", "usable_interior_small", "usable_interior_huge", "usable_freed_large",
	"usable_freed_huge",
	/* found undetected by these tests, then fixed: */
	"realloc_freed_small_same", "realloc_freed_small_flushed_same",
	"free_sized_smaller_small", "free_sized_smaller_large", "free_sized_smaller_huge",
	"free_aligned_sized_alignment", "usable_freed_small",
	"slab_tail", "double_small_other_thread", "double_small_other_thread_flushed",
	"double_small_swapped",
};
#define MISUSE_COUNT ((int)(sizeof misuse_names / sizeof *misuse_names))

/* Heap overflows: caught only in debug mode (ARENA_CONF=debug:true), at the
 * block's free (or realloc, or malloc_usable_size). */
static const char *const overflow_names[] = {
	"overflow_small", "overflow_small_8", "overflow_large", "overflow_huge",
	"realloc_overflow_small", "usable_overflow_large",
};
#define OVERFLOW_COUNT ((int)(sizeof overflow_names / sizeof *overflow_names))

/* Writes after free: caught only in debug mode, at the allocation that
 * hands the block out again (the thread cache gives it back at once). */
static const char *const uaf_names[] = {
	"write_after_free_small", "write_after_free_small_end", "write_after_free_large",
	"write_after_free_calloc",
};
#define UAF_COUNT ((int)(sizeof uaf_names / sizeof *uaf_names))




/*
 * The word(s) the report of a case must contain ('|' between alternatives,
 * any case): what the program did wrong.  A realloc of a freed small block
 * may be caught as the double free its copy-and-free would be.
 */
static inline const char *misuse_keyword(const char *name)
{
	if (!strncmp(name, "write_after_free", 16))
		return "write after free";
	if (!strncmp(name, "realloc_", 8))
		return "realloc|free";
	if (!strncmp(name, "usable_", 7))
		return "malloc_usable_size";
	return "free";
}

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

/* Misuse: free of the first address past the last block of a slab: 48-byte
 * blocks, 85 to a one-page slab, the 16 bytes from 4080 are its tail.  An
 * offset that is a multiple of the class size, so a test of that alone
 * passed it, and the next malloc(40) handed it out, running into the next
 * page (found by the issue-14 work). */
static inline int misuse_slab_tail(void)
{
	uint8_t *p = malloc(40);
	if (!p)
		return misuse_fail("malloc failed");
	uint8_t *tail = (uint8_t *)(((uintptr_t)p & ~(uintptr_t)4095) + 85 * 48);
	misuse_announce(tail);
	free(opaque_ptr(tail));
	for (int i = 0; i < 200; i++) {
		uint8_t *q = malloc(40);
		if (q == tail)
			return misuse_fail("the slab's tail was handed out by malloc");
		escape(q);
	}
	free(p);
	return misuse_heap_sound(40);
}

/* Blocks freed after p to push it out of the thread cache: more than a
 * list holds even grown to its largest (CACHE_GROW_MAX, 2048 blocks). */
enum { MISUSE_FLUSH_BLOCKS = 4096 };

/* Misuse: free of p twice. */
/* A block of the main thread freed twice by a thread bound to another
 * arena, where it waits with the blocks that go home (not in that thread's
 * own cache: tcache.c, "foreign blocks"), or, flushed, after it went home
 * with MISUSE_FLUSH_BLOCKS others (and may wait on its arena's stacks). */
static void *double_other_main(void *arg)
{
	void **p = arg;
	size_t n = (size_t)(uintptr_t)p[1];
	void **others = p[2];
	misuse_announce(p[0]);
	free(opaque_ptr(p[0]));
	if (others)
		for (int i = 0; i < MISUSE_FLUSH_BLOCKS; i++)
			free(others[i]);
	free(p[0]);
	void *a = malloc(n), *b = malloc(n);
	if (!a || !b || a == b)
		return (void *)"after a double free, malloc returned the same block twice";
	free(a);
	free(b);
	return NULL;
}

static inline int misuse_double_other_thread(size_t n, int flush)
{
	static void *others[MISUSE_FLUSH_BLOCKS];
	if (flush)
		for (int i = 0; i < MISUSE_FLUSH_BLOCKS; i++)
			if (!(others[i] = malloc(n)))
				return misuse_fail("malloc failed");
	void *args[3] = { malloc(n), (void *)(uintptr_t)n, flush ? others : NULL };
	pthread_t t;
	if (!args[0] || pthread_create(&t, NULL, double_other_main, args) != 0)
		return misuse_fail("malloc or pthread_create failed");
	void *ret;
	pthread_join(t, &ret);
	if (ret)
		return misuse_fail((const char *)ret);
	return misuse_heap_sound(n);
}

/* After a double free of a block of n bytes that the process survived
 * (misuse:warn or ignore): two mallocs of its size are two blocks, and the
 * heap is sound. */
static inline int misuse_after_double(size_t n)
{
	void *a = malloc(n), *b = malloc(n);
	if (!a || !b)
		return misuse_fail("malloc failed");
	if (a == b)
		return misuse_fail("after a double free, malloc returned the same block twice");
	free(a);
	free(b);
	return misuse_heap_sound(n);
}

static inline int misuse_double(size_t n, int flush)
{
	enum { F = MISUSE_FLUSH_BLOCKS };
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
	return misuse_after_double(n);
}

/* Misuse: p freed twice while, with the default thread cache, it waits in
 * the list that malloc pops, not in the one free pushes onto (src/tcache.c,
 * "Two lists"): p and q are freed, then blocks are taken (and kept) until
 * malloc hands out q, which it does when the freed blocks become the list
 * it pops, p next in it.  In other configurations p may come back first (it
 * is freed once more, correctly, before the double free) or neither does
 * (debug mode's quarantine). */
static inline int misuse_double_swapped(size_t n)
{
	enum { K = 4096 };
	static void *taken[K];
	uint8_t *p = malloc(n), *q = malloc(n);
	if (!p || !q)
		return misuse_fail("malloc failed");
	misuse_announce(p);
	free(opaque_ptr(p));
	free(opaque_ptr(q));
	for (int k = 0; k < K; k++) {
		if (!(taken[k] = malloc(n)))
			return misuse_fail("malloc failed");
		if (taken[k] == p) {
			free(p);
			break;
		}
		if (taken[k] == q)
			break;
	}
	free(p);
	return misuse_after_double(n);
}

/* Misuse: realloc of p (n bytes) after it was freed, to m bytes; flush: p is
 * pushed out of the thread cache first.  If that survives, realloc may
 * return NULL or a new block, never p itself (still free). */
static inline int misuse_realloc_freed(size_t n, size_t m, int flush)
{
	enum { F = MISUSE_FLUSH_BLOCKS };
	static void *others[F];
	if (flush)
		for (int i = 0; i < F; i++)
			if (!(others[i] = malloc(n)))
				return misuse_fail("malloc failed");
	uint8_t *p = malloc(n);
	if (!p)
		return misuse_fail("malloc failed");
	misuse_announce(p); /* before the free: nothing may be allocated in between */
	free(opaque_ptr(p));
	if (flush)
		for (int i = 0; i < F; i++)
			free(others[i]);
	void *q = realloc(opaque_ptr(p), m);
	if (q == p)
		return misuse_fail("realloc of a freed block returned that block");
	free(q);
	void *a = malloc(n), *b = malloc(n);
	if (!a || !b)
		return misuse_fail("malloc failed");
	if (a == b)
		return misuse_fail("after realloc of a freed block, malloc returned a block twice");
	free(a);
	free(b);
	return misuse_heap_sound(n);
}

/* Misuse: realloc of p + off (p a block of n bytes) to m bytes.  If that
 * survives: NULL, and the block keeps its contents and can be freed. */
static inline int misuse_realloc_interior(size_t n, size_t off, size_t m)
{
	uint8_t *p = malloc(n);
	if (!p)
		return misuse_fail("malloc failed");
	size_t len = n < 65536 ? n : 65536;
	pat_fill(p, 0, len, 11);
	misuse_announce(p + off);
	void *q = realloc(opaque_ptr(p + off), m);
	if (q)
		return misuse_fail("realloc of an interior pointer returned a block");
	if (pat_check(p, 0, len, 11) != SIZE_MAX)
		return misuse_fail("the block changed after realloc of an interior pointer");
	free(p);
	return misuse_heap_sound(n);
}

/* Misuse: free_sized(p, size) or free_aligned_sized(p, align, size) (align
 * != 0) of a block of n bytes (aligned_alloc(align_alloc, n) when
 * align_alloc != 0).  align SIZE_MAX: twice the largest power of two p is
 * aligned to (p is not aligned to it: certainly a wrong alignment).  If that
 * survives the block must be intact; it is
 * then left allocated (a second free could hide a block freed silently). */
static inline int misuse_sized(size_t n, size_t align_alloc, size_t align, size_t size)
{
	uint8_t *p = align_alloc ? aligned_alloc(align_alloc, n) : malloc(n);
	if (!p)
		return misuse_fail("allocation failed");
	if (!free_sized || !free_aligned_sized)
		return misuse_fail("free_sized or free_aligned_sized not found");
	if (align == SIZE_MAX)
		align = 2 * ((uintptr_t)p & -(uintptr_t)p);
	size_t len = n < 65536 ? n : 65536;
	pat_fill(p, 0, len, 13);
	misuse_announce(p);
	if (align)
		free_aligned_sized(opaque_ptr(p), opaque_size(align), opaque_size(size));
	else
		free_sized(opaque_ptr(p), opaque_size(size));
	if (pat_check(p, 0, len, 13) != SIZE_MAX)
		return misuse_fail("the block changed after a free_sized with a wrong size");
	for (int i = 0; i < 4; i++) {
		void *q = malloc(n);
		if (q == p)
			return misuse_fail("the block was handed out again while still allocated");
		free(q);
	}
	return misuse_heap_sound(n);
}

/* Misuse: malloc_usable_size of a pointer that is not a live block.  If
 * that survives it must return 0. */
static inline int misuse_usable(void *p, size_t heap_n)
{
	size_t got = malloc_usable_size(opaque_ptr(p));
	if (got != 0)
		return misuse_fail("malloc_usable_size of an invalid pointer returned non-zero");
	return misuse_heap_sound(heap_n);
}

static inline int misuse_usable_interior(size_t n, size_t off)
{
	uint8_t *p = malloc(n);
	if (!p)
		return misuse_fail("malloc failed");
	misuse_announce(p + off);
	int rc = misuse_usable(p + off, n);
	free(p);
	return rc;
}

static inline int misuse_usable_freed(size_t n)
{
	uint8_t *p = malloc(n);
	if (!p)
		return misuse_fail("malloc failed");
	misuse_announce(p);
	free(opaque_ptr(p));
	return misuse_usable(p, n);
}

/* Writes `by` bytes just past the n bytes asked for, then hands the block to
 * free, realloc or malloc_usable_size (op 'f', 'r', 'u'). */
static inline int misuse_overflow(size_t n, size_t by, char op)
{
	uint8_t *p = malloc(n);
	if (!p)
		return misuse_fail("malloc failed");
	misuse_announce(p);
	volatile uint8_t *v = p; /* the compiler may drop a store it can see is out of bounds */
	for (size_t i = 0; i < by; i++)
		v[n + i] = 0x11;
	if (op == 'r')
		p = realloc(opaque_ptr(p), 2 * n);
	else if (op == 'u')
		(void)malloc_usable_size(opaque_ptr(p));
	free(p);
	return misuse_heap_sound(100);
}

/* Frees a block of n bytes, writes one byte at offset `at` of it, then asks
 * for n bytes again (calloc if zero), which must give the same block back. */
static inline int misuse_write_after_free(size_t n, size_t at, int zero)
{
	uint8_t *p = malloc(n);
	if (!p)
		return misuse_fail("malloc failed");
	misuse_announce(p);
	free(opaque_ptr(p));
	((volatile uint8_t *)p)[at] = 0x11;
	uint8_t *q = zero ? calloc(1, n) : malloc(n);
	if (q != p)
		return misuse_fail("the freed block was not handed out again");
	free(q);
	return misuse_heap_sound(100);
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
	} else if (!strcmp(name, "overflow_small")) {
		rc = misuse_overflow(100, 1, 'f');
	} else if (!strcmp(name, "overflow_small_8")) {
		rc = misuse_overflow(64, 8, 'f');
	} else if (!strcmp(name, "overflow_large")) {
		rc = misuse_overflow(100000, 3, 'f');
	} else if (!strcmp(name, "overflow_huge")) {
		rc = misuse_overflow(3 * MiB + 5, 1, 'f');
	} else if (!strcmp(name, "realloc_overflow_small")) {
		rc = misuse_overflow(40, 2, 'r');
	} else if (!strcmp(name, "usable_overflow_large")) {
		rc = misuse_overflow(50000, 1, 'u');
	} else if (!strcmp(name, "write_after_free_small")) {
		rc = misuse_write_after_free(100, 40, 0);
	} else if (!strcmp(name, "write_after_free_small_end")) {
		rc = misuse_write_after_free(64, 63, 0);
	} else if (!strcmp(name, "write_after_free_large")) {
		rc = misuse_write_after_free(20000, 12345, 0);
	} else if (!strcmp(name, "write_after_free_calloc")) {
		rc = misuse_write_after_free(300, 16, 1);
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
	} else if (!strcmp(name, "slab_tail")) {
		rc = misuse_slab_tail();
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
	} else if (!strcmp(name, "double_small_other_thread")) {
		rc = misuse_double_other_thread(32, 0);
	} else if (!strcmp(name, "double_small_other_thread_flushed")) {
		rc = misuse_double_other_thread(32, 1);
	} else if (!strcmp(name, "double_small_swapped")) {
		rc = misuse_double_swapped(80);
	} else if (!strcmp(name, "double_small_flushed")) {
		rc = misuse_double(48, 1);
	} else if (!strcmp(name, "double_large")) {
		rc = misuse_double(100000, 0);
	} else if (!strcmp(name, "double_huge")) {
		rc = misuse_double(3 * MiB, 0);
	} else if (!strcmp(name, "glibc_small")) {
		uint8_t *m = __libc_malloc(64);
		if (!m)
			return misuse_fail("__libc_malloc failed");
		rc = misuse_foreign(m, 64);
		__libc_free(m);
	} else if (!strcmp(name, "glibc_mmap")) {
		uint8_t *m = __libc_malloc(MiB); /* above glibc's mmap threshold */
		if (!m)
			return misuse_fail("__libc_malloc failed");
		rc = misuse_foreign(m, MiB);
		__libc_free(m);
	} else if (!strcmp(name, "chunk_free_page")) {
		/* The last page of the arena chunk of a small block, early in
		 * the process: a free page, never handed out. */
		uint8_t *p = malloc(64);
		if (!p)
			return misuse_fail("malloc failed");
		uint8_t *h = (uint8_t *)(((uintptr_t)p & ~(uintptr_t)(2 * MiB - 1)) + 2 * MiB - 4096);
		misuse_announce(h);
		free(opaque_ptr(h));
		free(p);
		rc = misuse_heap_sound(64);
	} else if (!strcmp(name, "realloc_freed_small")) {
		rc = misuse_realloc_freed(32, 200, 0);
	} else if (!strcmp(name, "realloc_freed_small_flushed")) {
		rc = misuse_realloc_freed(48, 300, 1);
	} else if (!strcmp(name, "realloc_freed_small_same")) {
		rc = misuse_realloc_freed(32, 32, 0);
	} else if (!strcmp(name, "realloc_freed_small_flushed_same")) {
		rc = misuse_realloc_freed(48, 48, 1);
	} else if (!strcmp(name, "realloc_freed_large")) {
		rc = misuse_realloc_freed(100000, 100000, 0);
	} else if (!strcmp(name, "realloc_freed_huge")) {
		rc = misuse_realloc_freed(3 * MiB, 5 * MiB, 0);
	} else if (!strcmp(name, "realloc_interior_small")) {
		rc = misuse_realloc_interior(64, 16, 100);
	} else if (!strcmp(name, "realloc_interior_large")) {
		rc = misuse_realloc_interior(100000, 4096, 200000);
	} else if (!strcmp(name, "realloc_interior_huge")) {
		rc = misuse_realloc_interior(5 * MiB, 2 * MiB, 8 * MiB);
	} else if (!strcmp(name, "realloc_stack")) {
		uint8_t buf[512];
		pat_fill(buf, 0, sizeof buf, 5);
		misuse_announce(buf);
		void *q = realloc(opaque_ptr(buf), 1000);
		if (q)
			return misuse_fail("realloc of a stack pointer returned a block");
		if (pat_check(buf, 0, sizeof buf, 5) != SIZE_MAX)
			return misuse_fail("realloc of a stack pointer wrote to it");
		rc = misuse_heap_sound(100);
	} else if (!strcmp(name, "free_sized_larger_small")) {
		rc = misuse_sized(100, 0, 0, 5000);
	} else if (!strcmp(name, "free_sized_larger_large")) {
		rc = misuse_sized(100000, 0, 0, 600000);
	} else if (!strcmp(name, "free_sized_larger_huge")) {
		rc = misuse_sized(3 * MiB, 0, 0, 7 * MiB);
	} else if (!strcmp(name, "free_sized_smaller_small")) {
		rc = misuse_sized(3000, 0, 0, 10);
	} else if (!strcmp(name, "free_sized_smaller_large")) {
		rc = misuse_sized(100000, 0, 0, 20000);
	} else if (!strcmp(name, "free_sized_smaller_huge")) {
		rc = misuse_sized(3 * MiB, 0, 0, 100);
	} else if (!strcmp(name, "free_aligned_sized_larger")) {
		rc = misuse_sized(64, 64, 64, 100000);
	} else if (!strcmp(name, "free_aligned_sized_alignment")) {
		rc = misuse_sized(64, 64, SIZE_MAX, 64);
	} else if (!strcmp(name, "usable_stack")) {
		uint8_t buf[64];
		misuse_announce(buf);
		rc = misuse_usable(buf, 100);
	} else if (!strcmp(name, "usable_interior_small")) {
		rc = misuse_usable_interior(64, 16);
	} else if (!strcmp(name, "usable_interior_huge")) {
		rc = misuse_usable_interior(3 * MiB, 4096);
	} else if (!strcmp(name, "usable_freed_large")) {
		rc = misuse_usable_freed(100000);
	} else if (!strcmp(name, "usable_freed_huge")) {
		rc = misuse_usable_freed(3 * MiB);
	} else if (!strcmp(name, "usable_freed_small")) {
		rc = misuse_usable_freed(100);
	} else {
		printf("unknown case %s\n", name);
		return 2;
	}
	return misuse_survived(rc);
}

#endif /* ARENA_TESTS_MISUSE_CASES_H */
