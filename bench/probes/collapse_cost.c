/*
 * collapse_cost.c: does MADV_COLLAPSE of a dense arena chunk pay for itself?
 *
 * What it measures.
 *  (a) The time of one madvise(MADV_COLLAPSE) of a 2 MiB-aligned 2 MiB chunk whose pages
 *      were touched as 4 KiB pages (MADV_NOHUGEPAGE while touching, MADV_HUGEPAGE just
 *      before collapsing), for chunks with all 512 pages present ("full") and with 3/4 of
 *      them (every 4th page never touched, "3/4"). 64 chunks (128 MiB) per round, full and
 *      3/4 chunks alternating, 7 rounds of each of two kinds:
 *        warm: 128 MiB of huge pages freed just before, so the new huge pages come from
 *              memory the guest freed a moment ago;
 *        cold: a 3 s wait first, so the VM's free page reporting (order 9, ~2 s) has handed
 *              every free 2 MiB block back to the host, and the new huge pages are "fresh".
 *      AnonHugePages of the 128 MiB before and after each round confirms the collapse;
 *      failures are counted and their errno reported.
 *  (b) Random accesses over 128 MiB and over its first 16 MiB (L3 is 32 MiB here), with
 *      4 KiB pages (a region kept MADV_NOHUGEPAGE), after collapse (the region of (a)),
 *      and, for comparison, in huge pages that came from faults: 20 million independent
 *      8-byte reads, 20 million 8-byte writes, and 2 million dependent reads (each address
 *      depends on the value loaded before: latency), xorshift64* addresses, ns per access,
 *      7 times; each measurement is cut into 21 slices and the backings take turns slice
 *      by slice in a rotating order on the same addresses, and the saving (4k - collapsed)
 *      is taken per repetition (paired).
 *  (c) From (a) and (b): the number of random accesses to a chunk after which the
 *      collapse has paid for itself, collapse time / (4k - huge ns per access).
 *
 * Why. libarena advises an arena chunk MADV_HUGEPAGE once 3/4 of its pages are in use and
 * leaves the collapse to khugepaged; this decides whether it should also call
 * MADV_COLLAPSE itself (synchronously, or from its background thread).
 *
 * Method. CLOCK_MONOTONIC around each madvise call or access loop only; minor faults from
 * getrusage; median and min-max (collapse: over all chunks of a kind, and the range of the
 * per-round medians). Full and 3/4 chunks alternate within a round, warm and cold rounds
 * alternate.
 *
 * Build and run (takes about 2.5 minutes):
 *   cc -std=c11 -O2 -D_GNU_SOURCE -o /tmp/collapse_cost bench/probes/collapse_cost.c && /tmp/collapse_cost
 * Output: one "result key=value ..." line per case, then a table for people.
 */
#define PROBE_NAME "collapse_cost"
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

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif

#define MIB ((size_t)1 << 20)
#define PAGE ((size_t)4096)
#define CHUNK (2 * MIB)
#define PAGES_PER_CHUNK (CHUNK / PAGE)
#define NCHUNK 64
#define REGION (NCHUNK * CHUNK)
#define SMALL_WS (16 * MIB)
#define MAX_ROUNDS 15
#define REPORT_WAIT_S 3

enum { WARM, COLD, NTEMP };
static const char *const temp_name[NTEMP] = {"warm", "cold"};
enum { FULL, THREEQ, NFILL };
static const char *const fill_name[NFILL] = {"full", "3/4"};
enum { K_READ, K_WRITE, K_CHASE, NKIND };
static const char *const kind_name[NKIND] = {"read", "write", "chase"};
static const uint64_t kind_count[NKIND] = {20000000, 20000000, 2000000};
enum { B4K, BHUGE, BFAULT, NBACK };
static const char *const back_name[NBACK] = {"4k", "collapsed", "huge_faulted"};
enum { WS_BIG, WS_SMALL, NWS };
static const size_t ws_bytes[NWS] = {REGION, SMALL_WS};

#define PER_ROUND (NCHUNK / NFILL)
static double col_us[NTEMP][NFILL][MAX_ROUNDS * PER_ROUND];
static double col_round_med[NTEMP][NFILL][MAX_ROUNDS];
static long col_fail[NTEMP][NFILL];
static int col_errno[NTEMP][NFILL];
static long thp_before_kb[NTEMP][MAX_ROUNDS], thp_after_kb[NTEMP][MAX_ROUNDS];
static long rss_after_kb[NTEMP][MAX_ROUNDS];
static double acc_ns[NWS][NKIND][NBACK][MAX_ROUNDS];
static long acc_faults[NWS][NKIND][NBACK];
/* 4k - collapsed and 4k - huge_faulted, ns per access, same repetition */
static double acc_saved[NWS][NKIND][MAX_ROUNDS], acc_saved_fault[NWS][NKIND][MAX_ROUNDS];
static int nreps = 7;
static volatile uint64_t sink;

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}



/* Fill every touched page of a region with words of the generator seeded with seed; in a
 * 3/4 chunk, pages whose index is 3 mod 4 are not touched. */
static void fill_pages(char *base, size_t len, int fill_of_chunk_parity, uint64_t seed)
{
	uint64_t s = seed;
	for (size_t c = 0; c < len / CHUNK; c++) {
		int fill = fill_of_chunk_parity < 0 ? FULL : (int)((c + (size_t)fill_of_chunk_parity) % NFILL);
		for (size_t pg = 0; pg < PAGES_PER_CHUNK; pg++) {
			uint64_t *w = (uint64_t *)(base + c * CHUNK + pg * PAGE);
			if (fill == THREEQ && pg % 4 == 3)
				continue;
			for (size_t i = 0; i < PAGE / sizeof *w; i++)
				w[i] = xorshift(&s);
		}
	}
}

/* (a) One round of collapses: 64 chunks, full and 3/4 alternating (which is which changes
 * every round). */
static void collapse_round(char *region, char *pool, int temp, int round)
{
	double t[NCHUNK];
	int n_of[NFILL] = {0, 0};
	double per_round[NFILL][PER_ROUND];
	int parity = round % NFILL;

	advise(region, REGION, MADV_NOHUGEPAGE, "madvise(NOHUGEPAGE)");
	advise(region, REGION, MADV_DONTNEED, "madvise(DONTNEED)");
	fill_pages(region, REGION, parity, 12345 + (uint64_t)round);
	if (temp == WARM)
		advise(pool, REGION, MADV_DONTNEED, "madvise(DONTNEED) pool");
	else
		sleep_s(REPORT_WAIT_S);
	thp_before_kb[temp][round] = smaps_kb(region, REGION, "AnonHugePages");
	advise(region, REGION, MADV_HUGEPAGE, "madvise(HUGEPAGE)");
	for (int c = 0; c < NCHUNK; c++) {
		int fill = (c + parity) % NFILL;
		double t0 = now_us();
		int rc = madvise(region + (size_t)c * CHUNK, CHUNK, MADV_COLLAPSE);
		int err = errno;

		t[c] = now_us() - t0;
		if (rc != 0) {
			col_fail[temp][fill]++;
			col_errno[temp][fill] = err;
		}
		col_us[temp][fill][round * PER_ROUND + n_of[fill]] = t[c];
		per_round[fill][n_of[fill]++] = t[c];
	}
	thp_after_kb[temp][round] = smaps_kb(region, REGION, "AnonHugePages");
	rss_after_kb[temp][round] = smaps_kb(region, REGION, "Rss");
	for (int f = 0; f < NFILL; f++)
		col_round_med[temp][f][round] = stats(per_round[f], PER_ROUND).med;
	if (temp == WARM)
		memset(pool, 1, REGION); /* huge pages again, to be freed before the next warm round */
}

/* Where a stream of random accesses stands: the generator, and for K_CHASE the index. */
struct walker {
	uint64_t s, idx;
};

static uint64_t access_loop(int kind, uint64_t *p, uint64_t mask, uint64_t n, struct walker *w)
{
	uint64_t s = w->s, acc = 0, idx = w->idx;

	switch (kind) {
	case K_READ:
		for (uint64_t i = 0; i < n; i++)
			acc += p[(xorshift(&s) >> 20) & mask];
		break;
	case K_WRITE:
		for (uint64_t i = 0; i < n; i++) {
			uint64_t x = xorshift(&s);
			p[(x >> 20) & mask] = x;
		}
		break;
	default:
		for (uint64_t i = 0; i < n; i++)
			idx = (p[idx] ^ xorshift(&s)) & mask;
		acc = idx;
		break;
	}
	w->s = s;
	w->idx = idx;
	return acc;
}

/* (b) Random accesses, one repetition; rep < 0: warm-up. Each measurement is cut into
 * SLICES slices and the backings take turns slice by slice in a rotating order, so that
 * the machine's noise falls on all alike; all run the same addresses. The warm-up runs a
 * tenth of the accesses. */
#define SLICES 21
static void access_rep(uint64_t *back[NBACK], int rep)
{
	for (int ws = 0; ws < NWS; ws++)
		for (int k = 0; k < NKIND; k++) {
			uint64_t mask = ws_bytes[ws] / sizeof(uint64_t) - 1;
			uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(rep + 2) + (uint64_t)(ws * 8 + k);
			uint64_t per_slice = kind_count[k] / SLICES / (rep < 0 ? 10 : 1);
			struct walker w[NBACK];
			double us[NBACK] = {0};
			long flt[NBACK] = {0};

			for (int b = 0; b < NBACK; b++)
				w[b] = (struct walker){seed | 1, seed & mask};
			for (int sl = 0; sl < SLICES; sl++)
				for (int j = 0; j < NBACK; j++) {
					int b = (sl + j) % NBACK;
					long f0 = minor_faults();
					double t0 = now_us();

					sink += access_loop(k, back[b], mask, per_slice, &w[b]);
					us[b] += now_us() - t0;
					flt[b] += minor_faults() - f0;
				}
			if (rep < 0)
				continue;
			for (int b = 0; b < NBACK; b++) {
				acc_ns[ws][k][b][rep] = us[b] * 1e3 / (double)(per_slice * SLICES);
				acc_faults[ws][k][b] += flt[b];
			}
			acc_saved[ws][k][rep] = acc_ns[ws][k][B4K][rep] - acc_ns[ws][k][BHUGE][rep];
			acc_saved_fault[ws][k][rep] = acc_ns[ws][k][B4K][rep] - acc_ns[ws][k][BFAULT][rep];
		}
}

int main(int argc, char **argv)
{
	/* region | gap | pool | gap | 4k region: the gaps keep the mappings apart */
	size_t span = 3 * REGION + 2 * CHUNK;
	char *raw, *base, *region, *pool, *flat;
	uint64_t *back[NBACK];
	long thp_flat, thp_region, thp_pool, rss_flat;

	if (argc > 1) {
		nreps = atoi(argv[1]);
		if (nreps < 1 || nreps > MAX_ROUNDS) {
			fprintf(stderr, "usage: %s [repetitions 1..%d]\n", argv[0], MAX_ROUNDS);
			return 2;
		}
	}
	raw = mmap(NULL, span + CHUNK, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (raw == MAP_FAILED)
		die("mmap");
	base = (char *)(((uintptr_t)raw + CHUNK - 1) & ~(uintptr_t)(CHUNK - 1));
	region = base;
	pool = base + REGION + CHUNK;
	flat = pool + REGION + CHUNK;
	if (mprotect(region + REGION, CHUNK, PROT_NONE) || mprotect(pool + REGION, CHUNK, PROT_NONE))
		die("mprotect");
	advise(pool, REGION, MADV_HUGEPAGE, "madvise(HUGEPAGE) pool");
	memset(pool, 1, REGION);
	advise(flat, REGION, MADV_NOHUGEPAGE, "madvise(NOHUGEPAGE) 4k region");

	/* (a) */
	for (int round = 0; round < nreps; round++)
		for (int temp = 0; temp < NTEMP; temp++) {
			collapse_round(region, pool, temp, round);
			fprintf(stderr, "collapse_cost: %s round %d: AnonHugePages %ld -> %ld kB\n",
				temp_name[temp], round + 1, thp_before_kb[temp][round],
				thp_after_kb[temp][round]);
		}

	/* (b): the collapsed region against the same bytes in 4 KiB pages, and in huge pages
	 * that came from faults (the pool, populated with MADV_HUGEPAGE) */
	fill_pages(region, REGION, -1, 777);
	fill_pages(flat, REGION, -1, 777);
	fill_pages(pool, REGION, -1, 777);
	thp_region = smaps_kb(region, REGION, "AnonHugePages");
	thp_pool = smaps_kb(pool, REGION, "AnonHugePages");
	thp_flat = smaps_kb(flat, REGION, "AnonHugePages");
	rss_flat = smaps_kb(flat, REGION, "Rss");
	back[B4K] = (uint64_t *)flat;
	back[BHUGE] = (uint64_t *)region;
	back[BFAULT] = (uint64_t *)pool;
	for (int rep = -1; rep < nreps; rep++) {
		access_rep(back, rep);
		fprintf(stderr, "collapse_cost: access round %d done\n", rep + 1);
	}
	long thp_region_after = smaps_kb(region, REGION, "AnonHugePages");
	long thp_flat_after = smaps_kb(flat, REGION, "AnonHugePages");

	/* machine-readable results */
	for (int temp = 0; temp < NTEMP; temp++)
		for (int f = 0; f < NFILL; f++) {
			struct stat3 s = stats(col_us[temp][f], nreps * PER_ROUND);
			struct stat3 r = stats(col_round_med[temp][f], nreps);
			printf("result probe=collapse_cost case=collapse dest=%s chunk=%s chunks=%d"
			       " us_med=%.1f us_min=%.1f us_max=%.1f round_med_min=%.1f"
			       " round_med_max=%.1f failures=%ld errno=%s\n",
			       temp_name[temp], f == FULL ? "full" : "3q", nreps * PER_ROUND, s.med,
			       s.min, s.max, r.min, r.max, col_fail[temp][f],
			       col_fail[temp][f] ? strerror(col_errno[temp][f]) : "none");
		}
	for (int temp = 0; temp < NTEMP; temp++)
		for (int r = 0; r < nreps; r++)
			printf("result probe=collapse_cost case=check dest=%s round=%d"
			       " anonhuge_kb_before=%ld anonhuge_kb_after=%ld rss_kb_after=%ld expect_kb=%zu\n",
			       temp_name[temp], r + 1, thp_before_kb[temp][r], thp_after_kb[temp][r],
			       rss_after_kb[temp][r], REGION / 1024);
	printf("result probe=collapse_cost case=check_access anonhuge_kb_4k=%ld/%ld"
	       " anonhuge_kb_collapsed=%ld/%ld anonhuge_kb_huge_faulted=%ld rss_kb_4k=%ld"
	       " (before/after the accesses)\n",
	       thp_flat, thp_flat_after, thp_region, thp_region_after, thp_pool, rss_flat);
	for (int ws = 0; ws < NWS; ws++)
		for (int k = 0; k < NKIND; k++)
			for (int b = 0; b < NBACK; b++) {
				struct stat3 s = stats(acc_ns[ws][k][b], nreps);
				printf("result probe=collapse_cost case=access ws_mib=%zu kind=%s pages=%s"
				       " accesses=%llu ns_med=%.2f ns_min=%.2f ns_max=%.2f faults=%ld\n",
				       ws_bytes[ws] / MIB, kind_name[k], back_name[b],
				       (unsigned long long)kind_count[k], s.med, s.min, s.max,
				       acc_faults[ws][k][b]);
			}
	double cost_us[3] = {
		stats(col_us[WARM][FULL], nreps * PER_ROUND).med,
		stats(col_us[WARM][THREEQ], nreps * PER_ROUND).med,
		stats(col_us[COLD][FULL], nreps * PER_ROUND).med,
	};
	static const char *const cost_name[3] = {"warm_full", "warm_3q", "cold_full"};
	for (int ws = 0; ws < NWS; ws++)
		for (int k = 0; k < NKIND; k++) {
			struct stat3 sv = stats(acc_saved[ws][k], nreps);
			double save = sv.med;
			struct stat3 sf = stats(acc_saved_fault[ws][k], nreps);
			printf("result probe=collapse_cost case=breakeven ws_mib=%zu kind=%s saved_ns_med=%.2f"
			       " saved_ns_min=%.2f saved_ns_max=%.2f huge_faulted_saved_ns_med=%.2f"
			       " huge_faulted_saved_ns_min=%.2f huge_faulted_saved_ns_max=%.2f",
			       ws_bytes[ws] / MIB, kind_name[k], save, sv.min, sv.max, sf.med, sf.min, sf.max);
			for (int c = 0; c < 3; c++) {
				if (save > 0)
					printf(" accesses_per_chunk_%s=%.0f", cost_name[c], cost_us[c] * 1e3 / save);
				else
					printf(" accesses_per_chunk_%s=never", cost_name[c]);
			}
			printf("\n");
		}

	/* for people */
	printf("\n(a) MADV_COLLAPSE of one 2 MiB chunk, us: median [min-max] over %d chunks;"
	       " per-round medians min-max; failures\n", nreps * PER_ROUND);
	for (int temp = 0; temp < NTEMP; temp++)
		for (int f = 0; f < NFILL; f++) {
			struct stat3 s = stats(col_us[temp][f], nreps * PER_ROUND);
			struct stat3 r = stats(col_round_med[temp][f], nreps);
			printf("  %-4s dest, %-4s chunk: %7.0f [%.0f-%.0f]  rounds %.0f-%.0f  failures %ld%s%s\n",
			       temp_name[temp], fill_name[f], s.med, s.min, s.max, r.min, r.max,
			       col_fail[temp][f], col_fail[temp][f] ? " " : "",
			       col_fail[temp][f] ? strerror(col_errno[temp][f]) : "");
		}
	printf("  AnonHugePages of the 128 MiB after each round (kB):");
	for (int temp = 0; temp < NTEMP; temp++)
		for (int r = 0; r < nreps; r++)
			printf(" %ld", thp_after_kb[temp][r]);
	printf("\n(b) random access, ns per access: median [min-max] of %d; saved = 4k - collapsed,"
	       " paired by repetition;\n    huge-faulted = huge pages from faults, for comparison\n", nreps);
	for (int ws = 0; ws < NWS; ws++)
		for (int k = 0; k < NKIND; k++) {
			struct stat3 a = stats(acc_ns[ws][k][B4K], nreps);
			struct stat3 h = stats(acc_ns[ws][k][BHUGE], nreps);
			struct stat3 g = stats(acc_ns[ws][k][BFAULT], nreps);
			struct stat3 sv = stats(acc_saved[ws][k], nreps);
			struct stat3 sf = stats(acc_saved_fault[ws][k], nreps);
			printf("  %3zu MiB %-5s: 4k %.1f [%.1f-%.1f] | collapsed %.1f [%.1f-%.1f] saved %.1f"
			       " [%.1f-%.1f] | huge-faulted %.1f [%.1f-%.1f] saved %.1f [%.1f-%.1f]\n",
			       ws_bytes[ws] / MIB, kind_name[k], a.med, a.min, a.max, h.med, h.min, h.max,
			       sv.med, sv.min, sv.max, g.med, g.min, g.max, sf.med, sf.min, sf.max);
		}
	printf("(c) break-even: random accesses per chunk for the collapse (%.0f us warm full,"
	       " %.0f us warm 3/4, %.0f us cold full) to pay\n", cost_us[0], cost_us[1], cost_us[2]);
	for (int ws = 0; ws < NWS; ws++)
		for (int k = 0; k < NKIND; k++) {
			double save = stats(acc_saved[ws][k], nreps).med;
			printf("  %3zu MiB %-5s:", ws_bytes[ws] / MIB, kind_name[k]);
			for (int c = 0; c < 3; c++) {
				if (save > 0)
					printf(" %10.0f", cost_us[c] * 1e3 / save);
				else
					printf(" %10s", "never");
			}
			printf("\n");
		}
	return 0;
}
