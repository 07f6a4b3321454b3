/*
 * Guard pages after huge blocks, attacked: run by test_harden.c under
 * LD_PRELOAD=libarena.so.
 *
 *   guards write-past SIZE     malloc(SIZE), write the byte after its usable
 *                              end: a guard page makes that a SIGSEGV; the
 *                              program prints "survived" and exits 0 if not
 *   guards after-trim          the same after malloc_trim(0) purged all free
 *                              memory (purges must leave guards)
 *   guards after-realloc       realloc 3 MiB -> 9 MiB (moved or grown in
 *                              place): the old end is inside the block now
 *                              (written), the new end is guarded
 *   guards vmas                64 huge blocks at once: prints how many more
 *                              mappings /proc/self/maps shows ("mappings=+N")
 *   guards vmas-large          the same with 64 large blocks (100-900 KiB)
 *   guards large-resize        a 100 KiB block grown in place to 200 KiB (its
 *                              old end written), then shrunk to 80 KiB, and
 *                              written one byte past its end (SIGSEGV)
 *   guards large-trim          a 100 KiB block, malloc_trim(0), a write past
 *   guards large-dense         16 blocks of 100 KiB turn their chunk dense
 *                              (3/4 in use, advised huge): a write past the
 *                              first lands in its run ("survived"; a guard
 *                              would keep the chunk from its huge page)
 *   guards region-end          (under an RLIMIT_AS that makes the region
 *                              small) 2 MiB blocks up to its last chunk; a
 *                              page mapped right after it where the address
 *                              is free (as the kernel may map libarena's
 *                              tables there), and a linear write from the
 *                              last block toward it: SIGSEGV at the page
 *                              kept after the region, or "victim written"
 *   guards vm                  prints "vm_kb=N" (its address space)
 *   guards refused             a block guarded, then mlockall: the next
 *                              block's guard is refused (a locked mapping);
 *                              munlockall, the first block freed and its
 *                              chunks taken again and written whole (a
 *                              guard left behind faults), then a write past
 *                              a new block (guards work again: SIGSEGV);
 *                              "skip" and exit 0 without mlockall
 *
 * "ok" and exit 0 when a check holds without a fault; "FAIL: ..." lines and
 * exit 1 otherwise.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "prog_check.h"

static int count_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	int n = 0, c;
	if (!f)
		return -1;
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

static void write_past(size_t size)
{
	volatile char *p = malloc(size);
	if (!p)
		exit(2);
	size_t usable = malloc_usable_size((void *)p);
	memset((void *)p, 1, usable);
	printf("writing at %p + %zu\n", (void *)p, usable);
	fflush(stdout);
	p[usable] = 1;
	printf("survived\n");
	exit(0);
}

static void after_trim(void)
{
	void *other = malloc(8 << 20);
	volatile char *p = malloc(5 << 20);
	free(other);
	malloc_trim(0);
	size_t usable = malloc_usable_size((void *)p);
	fflush(stdout);
	p[usable] = 1;
	printf("survived\n");
	exit(0);
}

static void after_realloc(void)
{
	char *p = malloc(3 << 20);
	size_t old = malloc_usable_size(p);
	volatile char *q = realloc(p, 9 << 20);
	size_t usable = malloc_usable_size((void *)q);
	q[old] = 1; /* the old guard's page: inside the block now */
	printf("old end written\n");
	fflush(stdout);
	q[usable] = 1;
	printf("survived\n");
	exit(0);
}

static int vmas(int large)
{
	void *blocks[64];
	int before = count_maps();
	for (int i = 0; i < 64; i++)
		blocks[i] = malloc(large ? (size_t)(100 + 100 * (i % 9)) << 10 : (size_t)(3 + i % 5) << 20);
	int after = count_maps();
	CHECK(before > 0 && after > 0, "cannot read /proc/self/maps");
	printf("mappings=+%d\n", after - before);
	for (int i = 0; i < 64; i++)
		free(blocks[i]);
	return checks_report();
}

static void write_past_end(volatile char *p)
{
	size_t usable = malloc_usable_size((void *)p);
	printf("writing at %p + %zu\n", (void *)p, usable);
	fflush(stdout);
	p[usable] = 1;
	printf("survived\n");
	exit(0);
}

static void large_resize(void)
{
	char *p = malloc(100 << 10);
	size_t old = malloc_usable_size(p);
	volatile char *q = realloc(p, 200 << 10);
	if (q != p) {
		printf("skip: moved\n");
		exit(0);
	}
	q[old] = 1; /* the old guard's page: inside the block now */
	printf("old end written\n");
	q = realloc((void *)q, 80 << 10);
	write_past_end(q);
}

static void large_trim(void)
{
	volatile char *p = malloc(100 << 10);
	void *other = malloc(300 << 10);
	free(other);
	malloc_trim(0);
	write_past_end(p);
}

static void large_dense(void)
{
	char *b[16];
	for (int i = 0; i < 16; i++)
		b[i] = malloc(100 << 10);
	write_past_end(b[0]);
}

static size_t vm_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long pages = 0;
	if (!f || fscanf(f, "%lu", &pages) != 1)
		exit(2);
	fclose(f);
	return pages * 4096;
}

static void region_end(void)
{
	const size_t two = 2 << 20;
	char *prev = NULL, *p;
	for (int i = 0; i < 512 && (p = malloc(two)); i++) {
		if (prev && p != prev + two)
			break; /* another region */
		prev = p;
	}
	char *end = prev + two; /* nothing more fitted: the region's end */
	char *victim = mmap(end, 4096, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (victim != end)
		victim = mmap(end + 4096, 4096, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (!prev || victim == MAP_FAILED || victim > end + 4096) {
		printf("skip: no page free after the region (vm %zu MiB)\n", vm_bytes() >> 20);
		exit(0);
	}
	printf("last block %p, victim %p\n", (void *)prev, (void *)victim);
	fflush(stdout);
	memset(prev, 0x41, (size_t)(victim + 4096 - prev));
	printf("victim written\n");
	exit(0);
}

static void refused(void)
{
	char *a = malloc(3 << 20);
	if (mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) != 0) {
		printf("skip: mlockall refused\n");
		exit(0);
	}
	volatile char *b = malloc(3 << 20); /* its guard refused */
	size_t b_usable = malloc_usable_size((void *)b);
	munlockall();
	free(a);
	char *p = malloc((7 << 20) / 2); /* a's chunks, most dirty */
	if (p != a) {
		printf("skip: a's chunks not taken again\n");
		exit(0);
	}
	memset(p, 1, malloc_usable_size(p));
	printf("reused whole\n");
	fflush(stdout);
	b[b_usable] = 1; /* secure mode: PROT_NONE in its place */
	printf("past the refused guard\n");
	fflush(stdout);
	volatile char *q = malloc(3 << 20);
	q[malloc_usable_size((void *)q)] = 1;
	printf("survived\n");
	exit(0);
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "write-past"))
		write_past(strtoull(argv[2], NULL, 0));
	if (argc >= 2 && !strcmp(argv[1], "after-trim"))
		after_trim();
	if (argc >= 2 && !strcmp(argv[1], "after-realloc"))
		after_realloc();
	if (argc >= 2 && !strcmp(argv[1], "vmas"))
		return vmas(0);
	if (argc >= 2 && !strcmp(argv[1], "vmas-large"))
		return vmas(1);
	if (argc >= 2 && !strcmp(argv[1], "large-resize"))
		large_resize();
	if (argc >= 2 && !strcmp(argv[1], "large-trim"))
		large_trim();
	if (argc >= 2 && !strcmp(argv[1], "large-dense"))
		large_dense();
	if (argc >= 2 && !strcmp(argv[1], "region-end"))
		region_end();
	if (argc >= 2 && !strcmp(argv[1], "vm")) {
		printf("vm_kb=%zu\n", vm_bytes() >> 10);
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "refused"))
		refused();
	fprintf(stderr, "usage: guards write-past SIZE | after-trim | after-realloc | vmas | vmas-large | large-resize | large-trim | large-dense | region-end | vm | refused\n");
	return 2;
}
