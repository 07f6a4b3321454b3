/*
 * first_touch: what the first touch of a large block costs, and who pays it.
 *
 * A fresh anonymous mapping costs nothing until it is used: each 4 KiB page
 * is a minor fault at its first write (~1.1 us on a laptop, ~12 us on the
 * development VM), the second write to it a few ns.  Through the malloc API:
 *   -m memset  malloc + memset of the whole block to 0: the allocation pays
 *              every fault, and the kernel and the program both zero it;
 *   -m calloc  calloc: free over a fresh mapping (the kernel's pages are
 *              zero), the faults come at the first use; over reused memory
 *              the allocator must clear it, unless it knows it is zero;
 *   -m touch   malloc and nothing else.
 * Then, in every mode, "pass 1" writes one byte per 4 KiB (at offsets 0,
 * 4096, ... from the block's start) and "pass 2" does it again.  Each phase
 * (allocation, pass 1, pass 2) is timed with CLOCK_MONOTONIC and its minor
 * faults counted (getrusage(RUSAGE_SELF) ru_minflt before and after).  In
 * pass 1 of the calloc and memset modes, every byte written must have been 0
 * before; otherwise the workload reports it and exits with status 1.  stderr
 * also shows each phase per 4 KiB page, the free, and the process's
 * AnonHugePages after pass 2 (from /proc/self/smaps_rollup).
 *
 * -r N repeats allocate / pass 1 / pass 2 / free N times with the same size,
 * so that from round 2 on the allocator may hand back the block it was just
 * given (its pages dirty, or purged): calloc -r shows whether it clears
 * them again (alloc_ms high, pass1_minflt 0), returns them to the kernel and
 * faults them anew (alloc_ms ~0, pass1_minflt ~size/4 KiB), or knows that
 * purged pages read zero and skips the clearing.  The figures reported are
 * the LAST round's (stderr says so and shows every round).  The block is
 * freed after each round; that free is timed on stderr only.  The value
 * written changes with the round (1, 2, ...), never 0.
 *
 * The passes write each byte with one read-modify-write instruction (xadd),
 * which returns the old byte for the check in the same access: a plain read
 * before the write would take a read fault that maps the shared zero page
 * and then a copy-on-write fault for the write, two faults per page instead
 * of one (measured: calloc's pass 1 at 1 GiB took 524286 faults and 2-5x
 * the time of touch's).  The same instruction is used in pass 2 and in touch
 * mode, so that every pass runs the same code.  memset is called through a
 * volatile function pointer, so that gcc cannot turn malloc + memset(0) into
 * calloc; the asm stores cannot be dropped as dead before the free.
 *
 * Usage: first_touch [-m memset|calloc|touch] [-s size] [-r rounds]
 *   -m  mode (default calloc)
 *   -s  block size in bytes, or with a suffix k, m, g (KiB, MiB, GiB),
 *       fractions allowed (1.5g); default 1g.  -s 8388608 (8 MiB) is the
 *       tiny mode for CI smoke tests: well under a second under every
 *       allocator.
 *   -r  rounds (default 1)
 * Prints "result alloc_ms=.. alloc_minflt=.. pass1_ms=.. pass1_minflt=..
 * pass2_ms=.. pass2_minflt=.." on stdout (one line) and a human-readable
 * account on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax).  Quick runs take
 * 1-4 s each on the development VM; calloc -r 3 is at 512 MiB because at
 * 1 GiB it took 8 s under glibc, which munmaps the block at every free and
 * faults it anew.  16 MiB is under glibc's largest mmap threshold (32 MiB):
 * from round 2 on glibc serves it from the heap and has to clear it.
 * calloc-2g needs 2 GiB of free memory.
 * BENCH tiny: -m calloc -s 8388608 -r 2
 * BENCH ratio: none
 * BENCH quick: calloc-1g | -m calloc -s 1g
 * BENCH quick: memset-1g | -m memset -s 1g
 * BENCH quick: touch-1g | -m touch -s 1g
 * BENCH quick: calloc-512m-r3 | -m calloc -s 512m -r 3
 * BENCH full: calloc-2g | -m calloc -s 2g
 * BENCH full: calloc-64m | -m calloc -s 64m
 * BENCH full: memset-64m | -m memset -s 64m
 * BENCH full: memset-512m-r3 | -m memset -s 512m -r 3
 * BENCH full: calloc-64m-r20 | -m calloc -s 64m -r 20
 * BENCH full: calloc-16m-r10 | -m calloc -s 16m -r 10
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define PAGE 4096

enum mode { MODE_MEMSET, MODE_CALLOC, MODE_TOUCH };
static const char *const mode_names[] = { "memset", "calloc", "touch" };

/* Opaque to the compiler: keeps malloc + memset(0) from becoming calloc. */
static void *(*volatile memset_fn)(void *, int, size_t) = memset;

typedef struct phase {
	double ms;
	long minflt;
} phase_t;

typedef struct round {
	phase_t alloc, pass1, pass2, free;
} round_t;

/* A phase's start: the fault count first, so the clock read is the last. */
static void phase_begin(phase_t *ph, double *t0)
{
	ph->minflt = minor_faults();
	*t0 = now_sec();
}

static void phase_end(phase_t *ph, double t0)
{
	ph->ms = (now_sec() - t0) * 1e3;
	ph->minflt = minor_faults() - ph->minflt;
}

static unsigned char *allocate(enum mode mode, size_t size)
{
	unsigned char *p;
	switch (mode) {
	case MODE_MEMSET:
		p = malloc(size);
		if (p)
			memset_fn(p, 0, size);
		return p;
	case MODE_CALLOC:
		return calloc(1, size);
	default:
		return malloc(size);
	}
}

/*
 * Adds `value` to the byte at p (old + value, so `value` over a 0), and
 * returns the old byte, in one instruction: a single write access, so that a
 * fresh page takes one write fault, as with a plain store.  A plain read
 * before the store would take a read fault that maps the shared zero page,
 * then a copy-on-write fault for the store: two faults per page.  xadd
 * without the lock prefix: no barrier, unlike xchg (15-16 ms for a resident
 * 1 GiB pass against ~7 for plain stores).
 */
static inline unsigned char write_byte(unsigned char *p, unsigned char value)
{
#if defined(__x86_64__) || defined(__i386__)
	__asm__ volatile("xaddb %0, %1" : "+q"(value), "+m"(*p) : : "memory");
	return value;
#else
	return __atomic_fetch_add(p, value, __ATOMIC_RELAXED);
#endif
}

/*
 * Writes `value` at offsets 0, PAGE, 2*PAGE, ... of the block, one
 * write_byte each.  With check, each byte must have been 0; returns the
 * offset of the first that was not (after writing it), or SIZE_MAX.
 */
static size_t pass(unsigned char *p, size_t size, unsigned char value, int check)
{
	for (size_t off = 0; off < size; off += PAGE) {
		unsigned char old = write_byte(&p[off], value);
		if (check && old != 0)
			return off;
	}
	return SIZE_MAX;
}

/* AnonHugePages of the whole process, in KiB (-1 if unreadable). */
static long anon_huge_kib(void)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	long kib = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "AnonHugePages: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

/* One round; returns 0, or 1 after reporting a failure. */
static int run_round(enum mode mode, size_t size, unsigned rno, round_t *r, long *thp_kib)
{
	double t0;
	unsigned char value = (unsigned char)(rno % 255 + 1); /* never 0 */

	phase_begin(&r->alloc, &t0);
	unsigned char *p = allocate(mode, size);
	phase_end(&r->alloc, t0);
	if (!p) {
		fprintf(stderr, "first_touch: round %u: %s of %zu bytes failed: %s\n",
			rno, mode == MODE_CALLOC ? "calloc" : "malloc", size, strerror(errno));
		return 1;
	}

	phase_begin(&r->pass1, &t0);
	size_t bad = pass(p, size, value, mode != MODE_TOUCH);
	phase_end(&r->pass1, t0);
	if (bad != SIZE_MAX) {
		fprintf(stderr, "first_touch: round %u: %s block %p of %zu bytes: the byte at "
			"offset %zu was not 0\n", rno, mode_names[mode], (void *)p, size, bad);
		return 1;
	}

	phase_begin(&r->pass2, &t0);
	pass(p, size, value, 0);
	phase_end(&r->pass2, t0);
	*thp_kib = anon_huge_kib();

	phase_begin(&r->free, &t0);
	free(p);
	phase_end(&r->free, t0);
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: first_touch [-m memset|calloc|touch] [-s bytes[k|m|g]] "
			"[-r rounds]\n");
	exit(2);
}

static void show_phase(const char *name, const phase_t *ph, size_t pages)
{
	fprintf(stderr, "  %-10s %10.1f ms %9ld minor faults %8.0f ns per 4 KiB\n",
		name, ph->ms, ph->minflt, ph->ms * 1e6 / (double)pages);
}

int main(int argc, char **argv)
{
	enum mode mode = MODE_CALLOC;
	uint64_t size_arg = (uint64_t)1 << 30, rounds = 1;
	int c;

	while ((c = getopt(argc, argv, "m:s:r:h")) != -1) {
		int bad = 0;
		switch (c) {
		case 'm':
			if (strcmp(optarg, "memset") == 0)
				mode = MODE_MEMSET;
			else if (strcmp(optarg, "calloc") == 0)
				mode = MODE_CALLOC;
			else if (strcmp(optarg, "touch") == 0)
				mode = MODE_TOUCH;
			else
				bad = 1;
			break;
		case 's': bad = parse_size(optarg, 1, SIZE_MAX >> 1, &size_arg); break;
		case 'r': bad = parse_u64(optarg, 1, 1000000, &rounds); break;
		default: usage();
		}
		if (bad)
			usage();
	}
	if (optind != argc)
		usage();

	size_t size = (size_t)size_arg, pages = (size + PAGE - 1) / PAGE;
	round_t r = { 0 };
	long thp_kib = -1;
	/* The first clock read faults in the vDSO's data pages (two on Linux 6.18:
	 * vvar and vvar_vclock): taken here, before the first phase, so that the
	 * allocation's count is the allocator's own. */
	(void)now_sec();
	(void)minor_faults();
	fprintf(stderr, "first_touch: %s of %zu bytes (%.1f MiB, %zu pages of 4 KiB), %" PRIu64
		" round(s)\n", mode_names[mode], size, (double)size / (1 << 20), pages, rounds);
	for (unsigned i = 1; i <= rounds; i++) {
		if (run_round(mode, size, i, &r, &thp_kib))
			return 1;
		if (rounds > 1)
			fprintf(stderr, " round %u:\n", i);
		show_phase("allocation", &r.alloc, pages);
		show_phase("pass 1", &r.pass1, pages);
		show_phase("pass 2", &r.pass2, pages);
		show_phase("free", &r.free, pages);
		if (thp_kib >= 0)
			fprintf(stderr, "  AnonHugePages of the process after pass 2: %ld KiB\n",
				thp_kib);
	}
	if (rounds > 1)
		fprintf(stderr, "first_touch: the result line has round %" PRIu64 "'s figures "
			"(the last of %" PRIu64 ")\n", rounds, rounds);
	printf("result alloc_ms=%.3f alloc_minflt=%ld pass1_ms=%.3f pass1_minflt=%ld "
	       "pass2_ms=%.3f pass2_minflt=%ld\n", r.alloc.ms, r.alloc.minflt,
	       r.pass1.ms, r.pass1.minflt, r.pass2.ms, r.pass2.minflt);
	return 0;
}
