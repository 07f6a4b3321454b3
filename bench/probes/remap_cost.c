/*
 * remap_cost.c: moving a huge block, memcpy versus mremap(MREMAP_DONTUNMAP).
 *
 * What it measures. For blocks of 2, 4, 8, 16, 32, 64 and 256 MiB whose source and
 * destination are 2 MiB-aligned slices of one big MAP_NORESERVE mapping that is never
 * unmapped (as libarena's regions are), once with 4 KiB pages (region advised
 * MADV_NOHUGEPAGE) and once with huge pages (MADV_HUGEPAGE), the time of:
 *   A1   memcpy into a destination already faulted (dirty free chunks being reused);
 *   A2   memcpy into a destination MADV_DONTNEED'd just before (the copy takes the faults,
 *        served from memory the guest freed a moment ago);
 *   A2r  as A2, but the destination was freed 3 s earlier, so the VM's free page reporting
 *        (order 9) has handed the memory back to the host: the "fresh destination" case;
 *   B    mremap(MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP) into an empty destination;
 *   B1   the same into a faulted destination (the move first zaps the destination's pages);
 * and after each of them a pass that reads and writes one byte per 4 KiB of the moved block
 * (do moved page tables cost anything afterwards: faults, TLB misses?).
 * It also checks AnonHugePages (/proc/self/smaps) of the source before and of the
 * destination after a move (huge pages must move as huge pages), fits time = fixed +
 * per-2-MiB * (size / 2 MiB) by least squares over the sizes for every case (so the fixed
 * cost of one mremap call and its cost per 2 MiB), finds the size from which B beats A1,
 * A2, A2r and B1, and, B winning already at 2 MiB, the size of memcpy that costs as much as
 * one 2 MiB mremap (assuming the copy's cost proportional to its size below 2 MiB).
 *
 * Why. libarena's realloc of a huge block (a run of 2 MiB chunks) that cannot grow in place
 * moves it to another chunk run of its own region (docs/design.md, issue 5): this tells
 * from which size moving the page tables beats copying the bytes.
 *
 * Method. CLOCK_MONOTONIC around the operation alone (all set-up is untimed); minor faults
 * from getrusage. Every case runs 7 times (argument 1 changes it, at most 25) after one
 * untimed warm-up round; the main cases are interleaved in a rotating order (A1 A2 B B1,
 * A2 B B1 A1, ...) and the sizes of A2r likewise. Before each timed operation the source
 * is rewritten (a block being grown has just been written) and the destination is put in
 * the state its case names. Reported: median and min-max, in microseconds.
 *
 * Build and run (takes about 2 minutes):
 *   cc -std=c11 -O2 -D_GNU_SOURCE -o /tmp/remap_cost bench/probes/remap_cost.c && /tmp/remap_cost
 * Output: one "result key=value ..." line per case, then a table for people.
 */
#define PROBE_NAME "remap_cost"
#include "probe.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)
#define PAGE ((size_t)4096)
#define CHUNK (2 * MIB)

#define NSIZES 7
static const size_t size_mib[NSIZES] = {2, 4, 8, 16, 32, 64, 256};
#define MAX_MIB 256 /* the largest size */
#define SUM_MIB 382 /* all sizes together: the A2r destinations, side by side */
#define MAX_REPS 25
#define REPORT_WAIT_S 3 /* free page reporting acts on memory free for ~2 s */

enum { A1, A2, B, B1, NMAIN, A2R = NMAIN, NCASE };
static const char *const case_name[NCASE] = {"A1", "A2", "B", "B1", "A2r"};

enum { M4K, MHUGE, NMODE };
static const char *const mode_name[NMODE] = {"4k", "huge"};

struct sample {
	double op_us, touch_us;
	long op_faults, touch_faults;
};

struct mode {
	char *src;   /* MAX_MIB: the block to move */
	char *dst;   /* MAX_MIB: where A1, A2, B and B1 move it */
	char *fresh; /* SUM_MIB: one destination per size for A2r */
	int dst_faulted;
};

struct thp_check {
	long src_thp_kb, dst_thp_kb, src_rss_kb_after;
};

static struct sample res[NMODE][NSIZES][NCASE][MAX_REPS];
static struct thp_check thp[NMODE][NSIZES];
static int nreps = 7;

/* Read and write one byte of every 4 KiB page. */
static void touch_pass(char *p, size_t len)
{
	volatile char *v = p;
	for (size_t off = 0; off < len; off += PAGE)
		v[off] = (char)(v[off] + 1);
}

static void move_block(char *src, char *dst, size_t len)
{
	void *r = mremap(src, len, len, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, dst);
	if (r == MAP_FAILED)
		die("mremap");
	if (r != dst) {
		fprintf(stderr, "remap_cost: mremap moved to %p, not %p\n", r, (void *)dst);
		exit(1);
	}
}


/* Statistics of one field of the samples of a case. */
enum field { F_OP, F_TOUCH, F_OPFLT, F_TOUCHFLT };

static struct stat3 case_stats(int m, int si, int c, enum field f)
{
	double v[MAX_REPS];
	for (int r = 0; r < nreps; r++) {
		const struct sample *s = &res[m][si][c][r];
		v[r] = f == F_OP ? s->op_us : f == F_TOUCH ? s->touch_us
			: f == F_OPFLT ? (double)s->op_faults : (double)s->touch_faults;
	}
	return stats(v, nreps);
}

/* One timed run of case c (A1, A2, B or B1) for a block of len bytes; rep < 0: warm-up. */
static void run_main_case(struct mode *md, int m, int si, int c, int rep)
{
	size_t len = size_mib[si] * MIB;
	int want_faulted = c == A1 || c == B1;
	char fill = (char)(0x21 + (rep & 0x3f));
	struct sample s;
	long f0, f1, f2;
	double t0, t1, t2;

	if (want_faulted && !md->dst_faulted)
		memset(md->dst, 0x5a, len);
	if (!want_faulted && md->dst_faulted)
		advise(md->dst, len, MADV_DONTNEED, "madvise(DONTNEED) destination");
	memset(md->src, fill, len);

	f0 = minor_faults();
	t0 = now_us();
	if (c == A1 || c == A2)
		memcpy(md->dst, md->src, len);
	else
		move_block(md->src, md->dst, len);
	t1 = now_us();
	f1 = minor_faults();
	touch_pass(md->dst, len);
	t2 = now_us();
	f2 = minor_faults();
	md->dst_faulted = 1;

	if (md->dst[len - 1] != fill) {
		fprintf(stderr, "remap_cost: case %s moved the wrong bytes\n", case_name[c]);
		exit(1);
	}
	if (rep < 0)
		return;
	s.op_us = t1 - t0;
	s.touch_us = t2 - t1;
	s.op_faults = f1 - f0;
	s.touch_faults = f2 - f1;
	res[m][si][c][rep] = s;
}

static void run_main(struct mode *md, int m)
{
	for (int si = 0; si < NSIZES; si++) {
		size_t len = size_mib[si] * MIB;

		/* start each size from empty source and destination */
		advise(md->src, MAX_MIB * MIB, MADV_DONTNEED, "madvise(DONTNEED) source");
		advise(md->dst, MAX_MIB * MIB, MADV_DONTNEED, "madvise(DONTNEED) destination");
		md->dst_faulted = 0;
		for (int rep = -1; rep < nreps; rep++)
			for (int k = 0; k < NMAIN; k++)
				run_main_case(md, m, si, (k + (rep < 0 ? 0 : rep)) % NMAIN, rep);

		/* huge pages: does the source have them, and does the move keep them? */
		advise(md->dst, len, MADV_DONTNEED, "madvise(DONTNEED) destination");
		memset(md->src, 0x33, len);
		thp[m][si].src_thp_kb = smaps_kb(md->src, len, "AnonHugePages");
		move_block(md->src, md->dst, len);
		thp[m][si].dst_thp_kb = smaps_kb(md->dst, len, "AnonHugePages");
		thp[m][si].src_rss_kb_after = smaps_kb(md->src, len, "Rss");
		md->dst_faulted = 1;
		fprintf(stderr, "remap_cost: %s pages, %zu MiB done\n", mode_name[m], size_mib[si]);
	}
	advise(md->dst, MAX_MIB * MIB, MADV_DONTNEED, "madvise(DONTNEED) destination");
	md->dst_faulted = 0;
}

/* A2r: memcpy into destinations whose memory the host has taken back. One wait per round
 * serves every size: each size has its own destination, freed before the wait. */
static void run_fresh(struct mode *md, int m)
{
	size_t off[NSIZES];
	size_t o = 0;

	for (int si = 0; si < NSIZES; si++) {
		off[si] = o;
		o += size_mib[si] * MIB;
	}
	memset(md->src, 0x44, MAX_MIB * MIB); /* in use through the waits */
	for (int rep = 0; rep < nreps; rep++) {
		advise(md->fresh, SUM_MIB * MIB, MADV_DONTNEED, "madvise(DONTNEED) fresh");
		sleep_s(REPORT_WAIT_S);
		for (int k = 0; k < NSIZES; k++) {
			int si = (k + rep) % NSIZES;
			size_t len = size_mib[si] * MIB;
			char *dst = md->fresh + off[si];
			char fill = (char)(0x21 + rep);
			struct sample *s = &res[m][si][A2R][rep];
			long f0, f1, f2;
			double t0, t1, t2;

			memset(md->src, fill, len);
			f0 = minor_faults();
			t0 = now_us();
			memcpy(dst, md->src, len);
			t1 = now_us();
			f1 = minor_faults();
			touch_pass(dst, len);
			t2 = now_us();
			f2 = minor_faults();
			s->op_us = t1 - t0;
			s->touch_us = t2 - t1;
			s->op_faults = f1 - f0;
			s->touch_faults = f2 - f1;
		}
		fprintf(stderr, "remap_cost: %s pages, fresh round %d done\n", mode_name[m], rep + 1);
	}
	advise(md->fresh, SUM_MIB * MIB, MADV_DONTNEED, "madvise(DONTNEED) fresh");
}

/* Least squares y = a + b x over the sizes, x in units of 2 MiB, y the median of case c. */
static void fit(int m, int c, double *a, double *b)
{
	double sx = 0, sy = 0, sxx = 0, sxy = 0, n = NSIZES;
	for (int si = 0; si < NSIZES; si++) {
		double x = (double)size_mib[si] / 2, y = case_stats(m, si, c, F_OP).med;
		sx += x;
		sy += y;
		sxx += x * x;
		sxy += x * y;
	}
	*b = (n * sxy - sx * sy) / (n * sxx - sx * sx);
	*a = (sy - *b * sx) / n;
}

/* The smallest size from which B's median is below case c's at every larger size too;
 * 0 if B never wins at 256 MiB. */
static size_t crossover(int m, int c)
{
	size_t from = 0;
	for (int si = NSIZES - 1; si >= 0; si--) {
		if (case_stats(m, si, B, F_OP).med < case_stats(m, si, c, F_OP).med)
			from = size_mib[si];
		else
			break;
	}
	return from;
}

/* The size of a case-c operation that costs as much as B at 2 MiB, in MiB, assuming c's
 * cost grows in proportion to the size from 2 MiB down (a copy roughly does; the fitted
 * lines do not help here, memcpy's rate changes with the caches). */
static double equivalent_mib(int m, int c)
{
	return 2 * case_stats(m, 0, B, F_OP).med / case_stats(m, 0, c, F_OP).med;
}

static void report(void)
{
	for (int m = 0; m < NMODE; m++)
		for (int si = 0; si < NSIZES; si++)
			for (int c = 0; c < NCASE; c++) {
				struct stat3 op = case_stats(m, si, c, F_OP);
				struct stat3 to = case_stats(m, si, c, F_TOUCH);
				printf("result probe=remap_cost pages=%s size_mib=%zu case=%s reps=%d"
				       " us_med=%.1f us_min=%.1f us_max=%.1f faults_med=%.0f"
				       " touch_us_med=%.1f touch_us_min=%.1f touch_us_max=%.1f"
				       " touch_faults_med=%.0f\n",
				       mode_name[m], size_mib[si], case_name[c], nreps, op.med, op.min,
				       op.max, case_stats(m, si, c, F_OPFLT).med, to.med, to.min, to.max,
				       case_stats(m, si, c, F_TOUCHFLT).med);
			}
	for (int m = 0; m < NMODE; m++)
		for (int si = 0; si < NSIZES; si++)
			printf("result probe=remap_cost pages=%s size_mib=%zu check=thp src_anonhuge_kb=%ld"
			       " dst_anonhuge_kb_after_B=%ld src_rss_kb_after_B=%ld\n",
			       mode_name[m], size_mib[si], thp[m][si].src_thp_kb, thp[m][si].dst_thp_kb,
			       thp[m][si].src_rss_kb_after);
	for (int m = 0; m < NMODE; m++) {
		printf("result probe=remap_cost pages=%s summary=fit", mode_name[m]);
		for (int c = 0; c < NCASE; c++) {
			double a, b;
			fit(m, c, &a, &b);
			printf(" %s_fixed_us=%.1f %s_per_2mib_us=%.2f", case_name[c], a, case_name[c], b);
		}
		printf("\nresult probe=remap_cost pages=%s summary=crossover", mode_name[m]);
		for (int c = 0; c < NCASE; c++) {
			if (c == B)
				continue;
			printf(" B_beats_%s_from_mib=%zu B_costs_%s_of_mib=%.2f", case_name[c],
			       crossover(m, c), case_name[c], equivalent_mib(m, c));
		}
		printf("\n");
	}

	printf("\nmicroseconds, median [min-max] of %d; touch = 1 byte per 4 KiB read+written after"
	       " the move; faults = median minor faults of the operation\n", nreps);
	for (int m = 0; m < NMODE; m++) {
		printf("\n%s pages   A1 memcpy->faulted | A2 memcpy->fresh | A2r memcpy->host-fresh |"
		       " B mremap->empty | B1 mremap->faulted | touch after A1 | touch after B |"
		       " THP MiB src/dst\n", mode_name[m]);
		for (int si = 0; si < NSIZES; si++) {
			static const int order[] = {A1, A2, A2R, B, B1};
			printf("%4zu MiB", size_mib[si]);
			for (int k = 0; k < 5; k++) {
				struct stat3 s = case_stats(m, si, order[k], F_OP);
				printf(" | %.0f [%.0f-%.0f] f%.0f", s.med, s.min, s.max,
				       case_stats(m, si, order[k], F_OPFLT).med);
			}
			for (int k = 0; k < 2; k++) {
				struct stat3 s = case_stats(m, si, k ? B : A1, F_TOUCH);
				printf(" | %.0f [%.0f-%.0f]", s.med, s.min, s.max);
			}
			printf(" | %ld/%ld\n", thp[m][si].src_thp_kb / 1024, thp[m][si].dst_thp_kb / 1024);
		}
		for (int c = 0; c < NCASE; c++) {
			double a, b;
			fit(m, c, &a, &b);
			printf("  fit %-3s: %.1f us + %.2f us per 2 MiB", case_name[c], a, b);
			if (c != B)
				printf("; B faster from %zu MiB on; B(2 MiB) costs %s of %.2f MiB",
				       crossover(m, c), case_name[c], equivalent_mib(m, c));
			printf("\n");
		}
	}
}

int main(int argc, char **argv)
{
	size_t span = (2 * (MAX_MIB + 2) + SUM_MIB) * MIB;

	if (argc > 1) {
		nreps = atoi(argv[1]);
		if (nreps < 1 || nreps > MAX_REPS) {
			fprintf(stderr, "usage: %s [repetitions 1..%d]\n", argv[0], MAX_REPS);
			return 2;
		}
	}
	for (int m = 0; m < NMODE; m++) {
		struct mode md;
		char *raw = mmap(NULL, span + CHUNK, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		char *base;

		if (raw == MAP_FAILED)
			die("mmap");
		base = (char *)(((uintptr_t)raw + CHUNK - 1) & ~(uintptr_t)(CHUNK - 1));
		advise(base, span, m == M4K ? MADV_NOHUGEPAGE : MADV_HUGEPAGE, "madvise(region)");
		md.src = base;
		md.dst = base + (MAX_MIB + 2) * MIB;
		md.fresh = base + 2 * (MAX_MIB + 2) * MIB;
		md.dst_faulted = 0;
		run_main(&md, m);
		run_fresh(&md, m);
		/* the region stays mapped, like an allocator's; later modes use their own */
	}
	report();
	return 0;
}
