/*
 * thp_speed.c: does a program's own code run slower on memory put in huge pages, and why?
 * (issue 16, point 2)
 *
 * What it measures. The same data, in regions that got their pages in different ways,
 * read by three kinds of the program's own code, ns per access:
 *   chase    a pointer chase over a random single cycle through every 64-byte node of the
 *            region (latency bound: cache misses, TLB misses, page walks);
 *   bsearch  binary search for random keys over the region's nodes taken as sorted 64-byte
 *            records (a b-tree page or a sorted index: the first steps hit cached lines, the
 *            last ones miss); ns per lookup and per step (log2(nodes) steps);
 *   place    a short cycle through M nodes (M = 8..128), one in each of M consecutive 2 MiB
 *            chunks, the next address depending on the value loaded (0), at
 *              same    the same offset in every chunk (what a slab laid out alike in every
 *                      chunk gives): virtual bits 6-20 equal, so in a physically contiguous
 *                      2 MiB page every node falls in the same L2 set (bits 6-16) and, but
 *                      for the L3's slice hash, the same L3 set (bits 6-20); on 4 KiB pages
 *                      bits 12-20 come from wherever each page landed;
 *              page    the same offset plus c * 4 KiB in chunk c (same L1 set, different
 *                      L2/L3 sets if the 2 MiB is physically contiguous);
 *              line    the same offset plus c * (4 KiB + 64) (different sets everywhere).
 *            "same" against "page" on huge pages is the cache-set aliasing hypothesis;
 *            "same" on huge pages against "same" on 4 KiB pages says whether the 2 MiB page
 *            is physically contiguous all the way down, i.e. whether the host backs it with
 *            a huge page of its own (the guest cannot see that otherwise).
 *   The regions (V variants, 256 MiB each by default):
 *     4k          MADV_NOHUGEPAGE, then written (4 KiB faults);
 *     4k-wait     as 4k, but written after a 3 s pause in which nothing was freed;
 *     huge-warm   MADV_HUGEPAGE before the first touch, written right after the probe freed
 *                 as many huge pages (memory the guest freed a moment ago, still backed);
 *     collapsed   written as 4 KiB pages, then MADV_HUGEPAGE and MADV_COLLAPSE of every
 *                 2 MiB (advice after first touch; what khugepaged does, done at once), the
 *                 new huge pages from memory freed a moment before;
 *     huge-cold   MADV_HUGEPAGE before the first touch, written after a 3 s pause that follows
 *                 the probe freeing everything: the VM's free page reporting (order 9, ~2 s)
 *                 has handed the free 2 MiB blocks back to the host, so the host backs these
 *                 pages anew;
 *     huge-aged   as huge-cold, but set up once, before the first round, and kept: does the
 *                 host change its backing as time goes on (host khugepaged)?
 *   For each: write time per 2 MiB and minor faults while written (how each variant got its
 *   pages: a host-reclaimed 2 MiB costs 1.7-3.6 ms instead of ~0.14 ms), AnonHugePages and
 *   Rss of the region (/proc/self/smaps) after set-up and after the kernels, minor faults
 *   during the kernels (should be 0).
 *
 * Method. Every round sets the regions up again (but huge-aged) in the order above that
 * gives each its kind of memory, then runs the kernels: each kernel's accesses are cut into
 * slices, and the variants take turns slice by slice in a rotating order (4k, 4k-wait, ...,
 * then 4k-wait, ..., 4k), all walking the same addresses relative to their region. Timed
 * per slice: wall (CLOCK_MONOTONIC), this thread's CPU time (CLOCK_THREAD_CPUTIME_ID) and
 * user time (getrusage). Reported: median and min-max over rounds, and the ratio of each
 * variant to 4k taken within each round (the machine is shared: ratios within a round are
 * steadier than absolute figures).
 *
 * Mode -k SECONDS (khugepaged): a 32 MiB region written as 4 KiB pages, then MADV_HUGEPAGE
 * and left to khugepaged; a 4 KiB control region alongside; both chased in turns for
 * SECONDS, one line per step (20 slices of 50,000 accesses each, then 0.3 s asleep): CPU ns
 * per access of each, AnonHugePages of the advised region, the slowest slice (a stall while
 * khugepaged collapses under the program's feet).
 *
 * Mode -c SECONDS (churn): a 128 MiB region in huge pages and one in 4 KiB pages chased in
 * turns (CPU time) for SECONDS, in phases of 10 s: quiet, then churn (each step frees 32 MiB
 * of a 512 MiB huge-page pool and writes again what it freed more than 3 s before, which
 * free page reporting has handed to the host by then), quiet, churn...: does
 * the host's handling of the 2 MiB blocks the process gives back slow its accesses to the
 * memory it keeps (host huge pages split, EPT entries invalidated)?
 *
 * Run 2026-12-02 02:53-03:06 UTC (2 vCPUs, load average 17-22) as below, and with -s 64; the
 * figures and what they rule in and out: docs/design.md, "The cost of a fresh huge page".
 *
 * Build and run (about 3 minutes with the defaults, 1.8 GiB of memory):
 *   make bench-build && build/bench/probes/thp_speed [-r ROUNDS] [-s MIB]
 *   build/bench/probes/thp_speed -k 90
 *   build/bench/probes/thp_speed -c 120
 * Output: one "result key=value ..." line per case, then tables for people.
 */
#define PROBE_NAME "thp_speed"
#include "probe.h"

#include <sys/resource.h>
#include <unistd.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif

#define MIB ((size_t)1 << 20)
#define CHUNK (2 * MIB)
#define LINE ((size_t)64)
#define WAIT_S 3
#define MAX_ROUNDS 25
#define SLICES 8

enum { V_4K, V_4K_WAIT, V_WARM, V_COLL, V_COLD, V_AGED, NVAR };
static const char *const var_name[NVAR] = {"4k",        "4k-wait",   "huge-warm",
					   "collapsed", "huge-cold", "huge-aged"};

enum { P_SAME, P_PAGE, P_LINE, NPLACE };
static const char *const place_name[NPLACE] = {"same", "page", "line"};
#define NM 5
static const int place_m[NM] = {8, 16, 32, 64, 128};

static size_t region_bytes = 256 * MIB;
static size_t nodes;
static int nrounds = 7;
static uint64_t chase_count = 4000000, lookup_count = 400000, place_count = 16000000;
static volatile uint64_t sink;

static char *region[NVAR], *pool;
static uint64_t *next_of; /* the chase's cycle: next node of node i */

/* per variant, per round */
static double fill_us_per_chunk[NVAR][MAX_ROUNDS], collapse_us_per_chunk[MAX_ROUNDS];
static long fill_faults[NVAR][MAX_ROUNDS], collapse_fail[MAX_ROUNDS];
static long thp_kb[NVAR][MAX_ROUNDS], thp_kb_after[NVAR][MAX_ROUNDS], rss_kb[NVAR][MAX_ROUNDS];
static long kernel_faults[NVAR][MAX_ROUNDS];

enum { T_WALL, T_CPU, T_USER, NT };
static const char *const t_name[NT] = {"wall", "cpu", "user"};
enum { K_CHASE, K_BSEARCH, NK };
static const char *const k_name[NK] = {"chase", "bsearch"};
static double k_ns[NK][NT][NVAR][MAX_ROUNDS];	     /* ns per access (per lookup for bsearch) */
static double p_ns[NM][NPLACE][NVAR][MAX_ROUNDS];     /* cpu ns per access */
static double p_best[NM][NPLACE][NVAR][MAX_ROUNDS];   /* the fastest slice, cpu ns per access */
static double max_slice_ns[NK][NVAR][MAX_ROUNDS];     /* the slowest slice, wall ns per access */

static double cpu_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static double user_us(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec * 1e6 + (double)ru.ru_utime.tv_usec;
}

/* Sattolo's shuffle: a random permutation that is a single cycle through all n nodes. */
static uint64_t *make_cycle(size_t n, uint64_t seed)
{
	uint64_t *a = malloc(n * sizeof *a), s = seed | 1;

	if (!a)
		die("malloc");
	for (size_t i = 0; i < n; i++)
		a[i] = i;
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = (size_t)(xorshift64s(&s) % i);
		uint64_t t = a[i];
		a[i] = a[j];
		a[j] = t;
	}
	return a;
}

/* Write every node of a region: word 0 the byte offset of the next node of the chase,
 * word 2 the record's key (2i + 1: sorted, and odd so that every key looked up is found),
 * word 1 stays 0 (the place kernel adds it to its next address). Sequential, so this is
 * also the region's first touch. */
static void fill(char *base, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t *w = (uint64_t *)(base + i * LINE);
		w[0] = next_of[i] * LINE;
		w[2] = 2 * (uint64_t)i + 1;
	}
}

static void fill_timed(int v, int round)
{
	long f0 = minor_faults();
	double t0 = now_us();

	fill(region[v], nodes);
	fill_us_per_chunk[v][round] = (now_us() - t0) / (double)(region_bytes / CHUNK);
	fill_faults[v][round] = minor_faults() - f0;
}

/* Free a region's pages and give it the advice its variant starts with. */
static void reset(int v)
{
	advise(region[v], region_bytes, MADV_DONTNEED, "madvise(DONTNEED)");
	advise(region[v], region_bytes, v == V_WARM || v == V_COLD || v == V_AGED ? MADV_HUGEPAGE
										 : MADV_NOHUGEPAGE,
	       "madvise(advice)");
}

/* Memory the guest freed a moment ago: fault the pool as huge pages, then free it. */
static void warm_pool(void)
{
	memset(pool, 1, region_bytes);
	advise(pool, region_bytes, MADV_DONTNEED, "madvise(DONTNEED) pool");
}

static void setup_round(int round)
{
	for (int v = 0; v < NVAR; v++)
		if (v != V_AGED || round == 0)
			reset(v);
	advise(pool, region_bytes, MADV_DONTNEED, "madvise(DONTNEED) pool");
	sleep_s(WAIT_S);
	fill_timed(V_COLD, round);
	if (round == 0)
		fill_timed(V_AGED, round);
	fill_timed(V_4K_WAIT, round);
	warm_pool();
	fill_timed(V_WARM, round);
	fill_timed(V_4K, round);
	fill_timed(V_COLL, round);
	warm_pool();
	advise(region[V_COLL], region_bytes, MADV_HUGEPAGE, "madvise(HUGEPAGE) collapsed");
	double t0 = now_us();
	for (size_t c = 0; c < region_bytes / CHUNK; c++)
		if (madvise(region[V_COLL] + c * CHUNK, CHUNK, MADV_COLLAPSE) != 0)
			collapse_fail[round]++;
	collapse_us_per_chunk[round] = (now_us() - t0) / (double)(region_bytes / CHUNK);
	for (int v = 0; v < NVAR; v++) {
		thp_kb[v][round] = smaps_kb(region[v], region_bytes, "AnonHugePages");
		rss_kb[v][round] = smaps_kb(region[v], region_bytes, "Rss");
	}
}

/* The kernels: each runs n accesses from where its walker stands. */
struct walker {
	uint64_t pos, rng;
};

static uint64_t chase(const char *base, uint64_t n, struct walker *w)
{
	uint64_t off = w->pos;
	for (uint64_t i = 0; i < n; i++)
		off = *(const uint64_t *)(base + off);
	w->pos = off;
	return off;
}

static uint64_t bsearch_nodes(const char *base, uint64_t n, struct walker *w)
{
	uint64_t s = w->rng, acc = 0;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t key = 2 * (xorshift64s(&s) % nodes) + 1;
		size_t lo = 0, hi = nodes;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			uint64_t k = ((const uint64_t *)(base + mid * LINE))[2];
			if (k < key)
				lo = mid + 1;
			else
				hi = mid;
		}
		acc += lo;
	}
	w->rng = s;
	return acc;
}

/* M node offsets of placement p; the value loaded (word 1: 0) is added to the next one. */
static void place_offsets(int p, int m, size_t *off)
{
	const size_t base = MIB + 5 * LINE + 8;
	for (int c = 0; c < m; c++) {
		size_t in = p == P_SAME ? 0 : p == P_PAGE ? (size_t)c * 4096 : (size_t)c * (4096 + LINE);
		off[c] = (size_t)c * CHUNK + base + in % (CHUNK - base);
	}
}

static uint64_t place(const char *base, const size_t *off, int m, uint64_t n, struct walker *w)
{
	uint64_t x = 0;
	size_t i = (size_t)w->pos;
	for (uint64_t k = 0; k < n; k++) {
		x = *(const uint64_t *)(base + off[i] + x);
		i = i + 1 == (size_t)m ? 0 : i + 1;
	}
	w->pos = i;
	return x;
}

/* One kernel (k = K_CHASE, K_BSEARCH, or NK + index into place cases), all variants in
 * turns slice by slice; per variant wall/cpu/user ns per access into out[t][v][round]. */
static void run_kernel(int k, uint64_t count, int round, double out[NT][NVAR][MAX_ROUNDS],
		       double slowest[NVAR][MAX_ROUNDS])
{
	struct walker w[NVAR];
	double t[NT][NVAR] = {{0}}, worst[NVAR] = {0}, best[NVAR];
	uint64_t per = count / SLICES;
	size_t off[128];
	int m = 0;

	if (k >= NK) {
		int pc = k - NK;
		m = place_m[pc / NPLACE];
		place_offsets(pc % NPLACE, m, off);
	}
	for (int v = 0; v < NVAR; v++) {
		w[v] = (struct walker){0, 0x9e3779b97f4a7c15ull * (uint64_t)(round + 1) | 1};
		best[v] = 1e300;
	}
	for (int sl = 0; sl < SLICES; sl++)
		for (int j = 0; j < NVAR; j++) {
			int v = (sl + j) % NVAR;
			long f0 = minor_faults();
			double w0 = now_us(), c0 = cpu_us(), u0 = user_us(), dw;

			if (k == K_CHASE)
				sink += chase(region[v], per, &w[v]);
			else if (k == K_BSEARCH)
				sink += bsearch_nodes(region[v], per, &w[v]);
			else
				sink += place(region[v], off, m, per, &w[v]);
			dw = now_us() - w0;
			double dc = cpu_us() - c0;
			t[T_CPU][v] += dc;
			if (dc < best[v])
				best[v] = dc;
			t[T_USER][v] += user_us() - u0;
			t[T_WALL][v] += dw;
			if (dw > worst[v])
				worst[v] = dw;
			kernel_faults[v][round] += minor_faults() - f0;
		}
	for (int v = 0; v < NVAR; v++) {
		for (int i = 0; i < NT; i++)
			if (out)
				out[i][v][round] = t[i][v] * 1e3 / (double)(per * SLICES);
		if (slowest)
			slowest[v][round] = worst[v] * 1e3 / (double)per;
		if (!out) {
			p_ns[(k - NK) / NPLACE][(k - NK) % NPLACE][v][round] =
				t[T_CPU][v] * 1e3 / (double)(per * SLICES);
			p_best[(k - NK) / NPLACE][(k - NK) % NPLACE][v][round] = best[v] * 1e3 / (double)per;
		}
	}
}

static void run_round(int round)
{
	run_kernel(K_CHASE, chase_count, round, k_ns[K_CHASE], max_slice_ns[K_CHASE]);
	run_kernel(K_BSEARCH, lookup_count, round, k_ns[K_BSEARCH], max_slice_ns[K_BSEARCH]);
	for (int pc = 0; pc < NM * NPLACE; pc++)
		if ((size_t)place_m[pc / NPLACE] <= region_bytes / CHUNK)
			run_kernel(NK + pc, place_count, round, NULL, NULL);
	for (int v = 0; v < NVAR; v++)
		thp_kb_after[v][round] = smaps_kb(region[v], region_bytes, "AnonHugePages");
}

static struct stat3 lstats(const long *v, int n)
{
	double d[MAX_ROUNDS];
	for (int i = 0; i < n; i++)
		d[i] = (double)v[i];
	return stats(d, n);
}

/* Ratio of variant v to 4k, per round, for a table of [NVAR][MAX_ROUNDS]. */
static struct stat3 ratio(double a[NVAR][MAX_ROUNDS], int v)
{
	double r[MAX_ROUNDS];
	for (int i = 0; i < nrounds; i++)
		r[i] = a[v][i] / a[V_4K][i];
	return stats(r, nrounds);
}

static void report(void)
{
	for (int v = 0; v < NVAR; v++) {
		struct stat3 f = stats(fill_us_per_chunk[v], v == V_AGED ? 1 : nrounds);
		struct stat3 ff = lstats(fill_faults[v], v == V_AGED ? 1 : nrounds);
		struct stat3 th = lstats(thp_kb[v], nrounds), tha = lstats(thp_kb_after[v], nrounds);
		struct stat3 rs = lstats(rss_kb[v], nrounds), kf = lstats(kernel_faults[v], nrounds);
		printf("result probe=thp_speed case=setup variant=%s fill_us_per_2mib_med=%.0f"
		       " fill_us_min=%.0f fill_us_max=%.0f fill_faults_med=%.0f anonhuge_kb_min=%.0f"
		       " anonhuge_kb_max=%.0f anonhuge_kb_after_min=%.0f rss_kb_med=%.0f"
		       " kernel_faults_max=%.0f\n",
		       var_name[v], f.med, f.min, f.max, ff.med, th.min, th.max, tha.min, rs.med, kf.max);
	}
	struct stat3 cu = stats(collapse_us_per_chunk, nrounds);
	long cf = 0;
	for (int i = 0; i < nrounds; i++)
		cf += collapse_fail[i];
	printf("result probe=thp_speed case=collapse us_per_2mib_med=%.0f min=%.0f max=%.0f failures=%ld\n",
	       cu.med, cu.min, cu.max, cf);
	for (int k = 0; k < NK; k++)
		for (int v = 0; v < NVAR; v++)
			for (int t = 0; t < NT; t++) {
				struct stat3 s = stats(k_ns[k][t][v], nrounds), r = ratio(k_ns[k][t], v);
				printf("result probe=thp_speed case=%s time=%s variant=%s ns_med=%.2f ns_min=%.2f"
				       " ns_max=%.2f ratio_to_4k_med=%.3f ratio_min=%.3f ratio_max=%.3f\n",
				       k_name[k], t_name[t], var_name[v], s.med, s.min, s.max, r.med, r.min, r.max);
			}
	for (int mi = 0; mi < NM; mi++)
		for (int p = 0; p < NPLACE; p++)
			for (int v = 0; v < NVAR; v++) {
				if ((size_t)place_m[mi] > region_bytes / CHUNK)
					continue;
				struct stat3 s = stats(p_ns[mi][p][v], nrounds), b = stats(p_best[mi][p][v], nrounds);
				printf("result probe=thp_speed case=place m=%d placement=%s variant=%s cpu_ns_med=%.2f"
				       " cpu_ns_min=%.2f cpu_ns_max=%.2f best_slice_ns_med=%.2f\n",
				       place_m[mi], place_name[p], var_name[v], s.med, s.min, s.max, b.med);
			}

	printf("\nset-up (%zu MiB per region, %d rounds): write us per 2 MiB, minor faults while"
	       " written, AnonHugePages kB after set-up / after the kernels (min), faults in kernels\n",
	       region_bytes / MIB, nrounds);
	for (int v = 0; v < NVAR; v++) {
		int n = v == V_AGED ? 1 : nrounds;
		struct stat3 f = stats(fill_us_per_chunk[v], n);
		struct stat3 th = lstats(thp_kb[v], nrounds), tha = lstats(thp_kb_after[v], nrounds);
		struct stat3 kf = lstats(kernel_faults[v], nrounds);
		printf("  %-10s %6.0f [%.0f-%.0f] us  faults %6.0f  AnonHugePages %7.0f-%.0f / %.0f  kernel"
		       " faults %.0f\n",
		       var_name[v], f.med, f.min, f.max, lstats(fill_faults[v], n).med, th.min, th.max,
		       tha.min, kf.max);
	}
	printf("  MADV_COLLAPSE: %.0f [%.0f-%.0f] us per 2 MiB, %ld failures\n", cu.med, cu.min, cu.max, cf);
	for (int k = 0; k < NK; k++) {
		printf("\n%s, ns per %s: median [min-max] over rounds; ratio to 4k within the round;"
		       " slowest slice\n",
		       k_name[k], k == K_CHASE ? "access" : "lookup");
		for (int v = 0; v < NVAR; v++) {
			struct stat3 w = stats(k_ns[k][T_WALL][v], nrounds), u = stats(k_ns[k][T_USER][v], nrounds);
			struct stat3 c = stats(k_ns[k][T_CPU][v], nrounds);
			struct stat3 rw = ratio(k_ns[k][T_WALL], v), rc = ratio(k_ns[k][T_CPU], v);
			struct stat3 sl = stats(max_slice_ns[k][v], nrounds);
			printf("  %-10s wall %7.1f [%.1f-%.1f] cpu %7.1f [%.1f-%.1f] user %7.1f |"
			       " x4k wall %.3f [%.3f-%.3f] cpu %.3f [%.3f-%.3f] | slowest %.1f\n",
			       var_name[v], w.med, w.min, w.max, c.med, c.min, c.max, u.med, rw.med, rw.min,
			       rw.max, rc.med, rc.min, rc.max, sl.max);
		}
	}
	printf("\nplace, cpu ns per access: median [min-max] over rounds, then the median of each round's"
	       " fastest slice; columns: variants\n  %-10s", "m/placement");
	for (int v = 0; v < NVAR; v++)
		printf(" %24s", var_name[v]);
	printf("\n");
	for (int mi = 0; mi < NM; mi++)
		for (int p = 0; p < NPLACE; p++) {
			if ((size_t)place_m[mi] > region_bytes / CHUNK)
				continue;
			printf("  %3d %-6s", place_m[mi], place_name[p]);
			for (int v = 0; v < NVAR; v++) {
				struct stat3 s = stats(p_ns[mi][p][v], nrounds), b = stats(p_best[mi][p][v], nrounds);
				printf("  %5.1f [%4.1f-%5.1f] %4.1f", s.med, s.min, s.max, b.med);
			}
			printf("\n");
		}
	printf("\naged huge-cold region, chase wall ns per access by round:");
	for (int i = 0; i < nrounds; i++)
		printf(" %.1f", k_ns[K_CHASE][T_WALL][V_AGED][i]);
	printf("\n");
}

/* -k: a region left to khugepaged, against a 4 KiB control, as time goes on. */
static int khugepaged_mode(int seconds)
{
	const size_t len = 32 * MIB;
	size_t n = len / LINE;
	char *raw = mmap(NULL, 2 * len + 3 * CHUNK, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	char *a, *ctl;

	if (raw == MAP_FAILED)
		die("mmap");
	a = (char *)(((uintptr_t)raw + CHUNK - 1) & ~(uintptr_t)(CHUNK - 1));
	ctl = a + len + CHUNK;
	if (mprotect(a + len, CHUNK, PROT_NONE))
		die("mprotect");
	nodes = n;
	next_of = make_cycle(n, 42);
	advise(a, len, MADV_NOHUGEPAGE, "madvise(NOHUGEPAGE)");
	advise(ctl, len, MADV_NOHUGEPAGE, "madvise(NOHUGEPAGE) control");
	fill(a, n);
	fill(ctl, n);
	advise(a, len, MADV_HUGEPAGE, "madvise(HUGEPAGE)");
	printf("khugepaged: 32 MiB written as 4 KiB pages, then MADV_HUGEPAGE; t_s advised_ns"
	       " control_ns ratio slowest_20th_advised_ns slowest_20th_control_ns AnonHugePages_kB\n");
	struct walker wa = {0, 1}, wc = {0, 1};
	double start = now_sec();
	const uint64_t per = 50000;
	while (now_sec() - start < seconds) {
		double ta = 0, tc = 0, worst_a = 0, worst_c = 0;
		for (int s = 0; s < 20; s++) {
			double t0 = cpu_us();
			sink += chase(s % 2 ? ctl : a, per, s % 2 ? &wc : &wa);
			double t1 = cpu_us();
			sink += chase(s % 2 ? a : ctl, per, s % 2 ? &wa : &wc);
			double t2 = cpu_us();
			double da = s % 2 ? t2 - t1 : t1 - t0, dc = s % 2 ? t1 - t0 : t2 - t1;
			ta += da;
			tc += dc;
			if (da > worst_a)
				worst_a = da;
			if (dc > worst_c)
				worst_c = dc;
		}
		printf("khugepaged t=%.1f advised=%.1f control=%.1f ratio=%.3f slowest_advised=%.1f"
		       " slowest_control=%.1f anonhuge_kb=%ld\n",
		       now_sec() - start, ta * 1e3 / (20.0 * per), tc * 1e3 / (20.0 * per), ta / tc,
		       worst_a * 1e3 / per, worst_c * 1e3 / per, smaps_kb(a, len, "AnonHugePages"));
		fflush(stdout);
		/* about 0.5 s per line */
		struct timespec ts = {0, 300000000};
		nanosleep(&ts, NULL);
	}
	return 0;
}

/* -c: does memory the process frees and the host takes back (free page reporting) slow the
 * process's accesses to the memory it keeps? A 128 MiB region in huge pages and one in
 * 4 KiB pages, chased in turns, in phases of 10 s: quiet, then churn (every step, about
 * 0.5 s, frees 32 MiB of a 512 MiB huge-page pool and writes again every 32 MiB freed more
 * than 3 s before, which the host has taken back by then), and so on. */
static int churn_mode(int seconds)
{
	const size_t len = 128 * MIB, plen = 512 * MIB, slice = 32 * MIB;
	const int nslice = (int)(plen / slice);
	const uint64_t per = 30000;
	size_t n = len / LINE;
	char *raw = mmap(NULL, 2 * len + plen + 4 * CHUNK, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	char *h, *f, *p;
	int freed[64] = {0}, step = 0;
	double freed_at[64] = {0};
	double ratio_of[2][4096];
	double ns_of[2][2][4096], refault_us = 0;
	int nstep[2] = {0, 0}, nrefault = 0;

	if (raw == MAP_FAILED)
		die("mmap");
	h = (char *)(((uintptr_t)raw + CHUNK - 1) & ~(uintptr_t)(CHUNK - 1));
	f = h + len + CHUNK;
	p = f + len + CHUNK;
	if (mprotect(h + len, CHUNK, PROT_NONE) || mprotect(f + len, CHUNK, PROT_NONE))
		die("mprotect");
	nodes = n;
	next_of = make_cycle(n, 43);
	advise(h, len, MADV_HUGEPAGE, "madvise(HUGEPAGE)");
	advise(f, len, MADV_NOHUGEPAGE, "madvise(NOHUGEPAGE)");
	advise(p, plen, MADV_HUGEPAGE, "madvise(HUGEPAGE) pool");
	fill(h, n);
	fill(f, n);
	memset(p, 1, plen);
	printf("churn: t_s phase huge_ns 4k_ns ratio anonhuge_kb_huge refault_us_per_2mib\n");
	struct walker wh = {0, 1}, wf = {0, 1};
	double start = now_sec();
	while (now_sec() - start < seconds && step < 4096) {
		int churn = (int)((now_sec() - start) / 10) % 2;
		double rf = -1;

		if (churn) {
			int s_free = step % nslice;
			for (int i = 0; i < nslice; i++)
				if (freed[i] && now_sec() - freed_at[i] > WAIT_S) {
					double t0 = now_us();
					memset(p + (size_t)i * slice, 1, slice);
					rf = (now_us() - t0) / (double)(slice / CHUNK);
					refault_us += rf;
					nrefault++;
					freed[i] = 0;
				}
			if (!freed[s_free]) {
				advise(p + (size_t)s_free * slice, slice, MADV_DONTNEED, "madvise(DONTNEED) pool");
				freed[s_free] = 1;
				freed_at[s_free] = now_sec();
			}
		} else {
			for (int i = 0; i < nslice; i++)
				if (freed[i]) {
					memset(p + (size_t)i * slice, 1, slice);
					freed[i] = 0;
				}
		}
		double th = 0, tf = 0;
		for (int s = 0; s < 10; s++) {
			double t0 = cpu_us();
			sink += chase(s % 2 ? f : h, per, s % 2 ? &wf : &wh);
			double t1 = cpu_us();
			sink += chase(s % 2 ? h : f, per, s % 2 ? &wh : &wf);
			double t2 = cpu_us();
			th += s % 2 ? t2 - t1 : t1 - t0;
			tf += s % 2 ? t1 - t0 : t2 - t1;
		}
		double nh = th * 1e3 / (10.0 * per), nf = tf * 1e3 / (10.0 * per);
		ns_of[churn][0][nstep[churn]] = nh;
		ns_of[churn][1][nstep[churn]] = nf;
		ratio_of[churn][nstep[churn]++] = nh / nf;
		printf("churn t=%.1f phase=%s huge=%.1f 4k=%.1f ratio=%.3f anonhuge_kb=%ld refault_us=%.0f\n",
		       now_sec() - start, churn ? "churn" : "quiet", nh, nf, nh / nf,
		       smaps_kb(h, len, "AnonHugePages"), rf);
		fflush(stdout);
		step++;
		struct timespec ts = {0, 200000000};
		nanosleep(&ts, NULL);
	}
	for (int c = 0; c < 2; c++) {
		if (!nstep[c])
			continue;
		struct stat3 r = stats(ratio_of[c], nstep[c]), a = stats(ns_of[c][0], nstep[c]);
		struct stat3 b = stats(ns_of[c][1], nstep[c]);
		printf("result probe=thp_speed case=churn phase=%s steps=%d huge_cpu_ns_med=%.1f"
		       " huge_min=%.1f huge_max=%.1f 4k_cpu_ns_med=%.1f 4k_min=%.1f 4k_max=%.1f"
		       " ratio_med=%.3f ratio_min=%.3f ratio_max=%.3f refault_us_per_2mib_mean=%.0f\n",
		       c ? "churn" : "quiet", nstep[c], a.med, a.min, a.max, b.med, b.min, b.max, r.med,
		       r.min, r.max, c && nrefault ? refault_us / nrefault : 0.0);
	}
	return 0;
}

static void usage(const char *me)
{
	fprintf(stderr, "usage: %s [-r ROUNDS 1..%d] [-s MIB (multiple of 2, >= 64)] | -k SECONDS | -c SECONDS\n", me,
		MAX_ROUNDS);
	exit(2);
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		uint64_t x;
		if (i + 1 >= argc)
			usage(argv[0]);
		if (!strcmp(argv[i], "-k")) {
			if (parse_u64(argv[++i], 1, 3600, &x))
				usage(argv[0]);
			return khugepaged_mode((int)x);
		} else if (!strcmp(argv[i], "-c")) {
			if (parse_u64(argv[++i], 1, 3600, &x))
				usage(argv[0]);
			return churn_mode((int)x);
		} else if (!strcmp(argv[i], "-r")) {
			if (parse_u64(argv[++i], 1, MAX_ROUNDS, &x))
				usage(argv[0]);
			nrounds = (int)x;
		} else if (!strcmp(argv[i], "-s")) {
			if (parse_u64(argv[++i], 64, 4096, &x) || x % 2)
				usage(argv[0]);
			region_bytes = x * MIB;
		} else {
			usage(argv[0]);
		}
	}
	nodes = region_bytes / LINE;

	/* NVAR regions and the pool, each followed by a PROT_NONE gap (separate mappings) */
	size_t stride = region_bytes + CHUNK, span = (NVAR + 1) * stride;
	char *raw = mmap(NULL, span + CHUNK, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (raw == MAP_FAILED)
		die("mmap");
	char *base = (char *)(((uintptr_t)raw + CHUNK - 1) & ~(uintptr_t)(CHUNK - 1));
	for (int v = 0; v <= NVAR; v++) {
		char *r = base + (size_t)v * stride;
		if (mprotect(r + region_bytes, CHUNK, PROT_NONE))
			die("mprotect");
		if (v < NVAR)
			region[v] = r;
		else
			pool = r;
	}
	advise(pool, region_bytes, MADV_HUGEPAGE, "madvise(HUGEPAGE) pool");
	next_of = make_cycle(nodes, 0x5eed);

	for (int round = 0; round < nrounds; round++) {
		setup_round(round);
		run_round(round);
		fprintf(stderr, "thp_speed: round %d/%d: chase 4k %.1f huge-warm %.1f huge-cold %.1f ns\n",
			round + 1, nrounds, k_ns[K_CHASE][T_WALL][V_4K][round],
			k_ns[K_CHASE][T_WALL][V_WARM][round], k_ns[K_CHASE][T_WALL][V_COLD][round]);
	}
	report();
	return 0;
}
