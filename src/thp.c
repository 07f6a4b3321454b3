/* The huge-page advice policy: which memory is advised MADV_HUGEPAGE or
 * MADV_NOHUGEPAGE, and when that changes.  Decisions only: the chunk layer
 * (descriptor tables), the arenas (arena chunks) and the huge blocks ask
 * these functions and give the advice themselves (chunk_map_advise).
 *
 * ARENA_CONF=thp:auto (default): huge blocks' whole chunks and dense arena
 * chunks are advised huge, everything else NOHUGE (so that THP `always`
 * gives no huge page to a sparse chunk either); thp:always advises every
 * chunk huge; thp:never advises every chunk NOHUGE. */
#include "internal.h"
#include "limit.h"

/* A chunk changes its huge-page advice at most once per decay_ms (at
 * least every ADVICE_MIN_MS).  A producer/consumer program fills and
 * drains whole chunks in turn, and each crossing of THP_DENSE_PAGES and
 * THP_SPARSE_PAGES was a madvise pair that also split and merged the
 * mapping under the kernel's mmap lock: bench/xthread -p 1 -c 1 -n 500000
 * made 755 MADV_HUGEPAGE and 755 MADV_NOHUGEPAGE calls in 0.35 s
 * (strace -c). */
#define ADVICE_MIN_MS 10

static bool advice_may_change(const arena_chunk_t *c, uint64_t now)
{
	uint64_t wait = cfg->decay_ms > ADVICE_MIN_MS ? (uint64_t)cfg->decay_ms : ADVICE_MIN_MS;
	return now - c->advice_ms >= wait;
}

/* Whether the chunk descriptor tables get huge pages once they are big
 * enough (chunk.c's DESC_HUGE_AFTER). */
bool thp_meta_huge(void)
{
	return cfg->thp != THP_NEVER;
}

/* Fresh huge pages lose when one costs more than the 512 4 KiB faults of
 * the same memory: measured, 0.2-0.8 of them where huge pages won a first
 * touch, 1.4-3.9 where they lost (docs/design.md, "Deciding at run time").
 * A verdict turns to 4 KiB pages only past THP_SMALL_MARGIN times their
 * cost, and back at 1: a wrong `small` costs more than its faults (4 KiB
 * pages for the memory's life: a pointer chase 1.6x slower, thp_speed;
 * 512 faults where one would do when it is purged and taken again), a
 * wrong `huge` under the margin at most the 4 KiB pages' cost once, and
 * readings near 1 are the ones a shared CPU blurs.  The probes of build/bench/large_churn -n 600 -k 20
 * -s 5m-25m fell apart: 0.25-0.55 on memory freed a moment ago, 8.2-10.0
 * after a peer's run (where 4 KiB pages took 0.26 s of system time against
 * 0.94 s in huge pages, docs/experiments): the margin keeps both. */
#define THP_SMALL_MARGIN 2

/* Whether first writes of huge_ns per huge page against small_ns per 2 MiB
 * in 4 KiB pages make fresh memory small, given whether it is now. */
static bool dearer_huge(uint64_t huge_ns, uint64_t small_ns, bool small_now)
{
	return huge_ns > (small_now ? 1 : THP_SMALL_MARGIN) * small_ns;
}
/* A probe at most this often (ms): the host's reclaim of free memory
 * changes over seconds; a probe costs 0.2-6 ms. */
#define THP_PROBE_MS 5000

/* ---- a growing heap's own first writes (thp:auto) --------------------------
 * The run-time probe below runs at huge blocks only, and most programs
 * have none: git, redis-server and gcc never probed, and their growing
 * heaps' chunks were born huge whatever a fresh huge page cost.  On a VM
 * whose host takes the guest's free 2 MiB blocks back (docs/design.md,
 * "The cost of a fresh huge page"), each such chunk's first write cost
 * milliseconds: redis-server's system time 1.14 s against 0.78 under
 * thp:never, git's 0.38 against 0.27 (bench/run's real programs).
 * So the heap's own first writes are the probe:
 * arena.c times the first write of every fresh chunk it takes (one 4 KiB
 * fault in a chunk born small, the whole huge page in one born huge;
 * os_first_write_ns) and tells thp_chunk_first_write.  When the chunks
 * born huge cost on average (the last HEAP_HUGE_SAMPLES) more than 512
 * times the median 4 KiB fault of the last HEAP_SMALL_SAMPLES chunks born
 * small (THP_SMALL_MARGIN times, as a probe needs), the heap's next
 * chunks are born small for THP_PROBE_MS; then one
 * is born huge again, and its first write decides anew.  What it costs:
 * two clock reads (system calls) per fresh chunk, and up to
 * HEAP_HUGE_SAMPLES costly huge pages per period. */
#define HEAP_SMALL_SAMPLES 8
#define HEAP_HUGE_SAMPLES 4

START_UP static _Atomic uint32_t heap_small_ns[HEAP_SMALL_SAMPLES]; /* per 4 KiB fault */
START_UP static atomic_uint heap_nsmall;
START_UP static _Atomic uint64_t heap_huge_ns[HEAP_HUGE_SAMPLES];
START_UP static atomic_uint heap_nhuge;         /* since the last decision      */
START_UP static _Atomic uint64_t heap_small_until; /* ms; 0: chunks may be born huge */
START_UP static atomic_ulong heap_checks, heap_kept_small;
START_UP static _Atomic uint64_t heap_last_huge_ns, heap_last_small_ns;

static bool heap_small_now(uint64_t now)
{
	uint64_t until = atomic_load_explicit(&heap_small_until, memory_order_relaxed);
	if (!until)
		return false;
	if (now < until)
		return true;
	/* the period is over: the next chunk born huge is the new probe */
	atomic_store_explicit(&heap_nhuge, 0, memory_order_relaxed);
	atomic_store_explicit(&heap_small_until, 0, memory_order_relaxed);
	return false;
}

/* 512 times the median of the 4 KiB first writes kept, or 0 if none. */
static uint64_t heap_small_2mib(void)
{
	unsigned taken = atomic_load_explicit(&heap_nsmall, memory_order_relaxed), n = 0;
	uint32_t v[HEAP_SMALL_SAMPLES];
	for (; n < taken && n < HEAP_SMALL_SAMPLES; n++) { /* insertion sort */
		uint32_t x = atomic_load_explicit(&heap_small_ns[n], memory_order_relaxed), j = n;
		for (; j > 0 && v[j - 1] > x; j--)
			v[j] = v[j - 1];
		v[j] = x;
	}
	if (n == 0)
		return 0;
	return (uint64_t)v[n / 2] * CHUNK_PAGES;
}

/* Whether the arenas time the first write of a fresh chunk: where a
 * growing heap's chunks may be born huge by the verdict (thp:auto). */
bool thp_times_first_writes(void)
{
	return cfg->thp == THP_AUTO && !purge_fine_on() && thp_verdict() <= THP_V_HUGE;
}

/* A fresh arena chunk's first write took ns: a huge page's (born huge) or
 * one 4 KiB page's.  now: ms. */
void thp_chunk_first_write(bool huge, uint64_t ns, uint64_t now)
{
	if (!huge) {
		unsigned i = atomic_fetch_add_explicit(&heap_nsmall, 1, memory_order_relaxed);
		atomic_store_explicit(&heap_small_ns[i % HEAP_SMALL_SAMPLES],
				      ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns, memory_order_relaxed);
		return;
	}
	unsigned i = atomic_fetch_add_explicit(&heap_nhuge, 1, memory_order_relaxed);
	atomic_store_explicit(&heap_huge_ns[i % HEAP_HUGE_SAMPLES], ns, memory_order_relaxed);
	atomic_fetch_add_explicit(&heap_checks, 1, memory_order_relaxed);
	uint64_t sum = 0, n = 0, small = heap_small_2mib();
	for (; n <= i && n < HEAP_HUGE_SAMPLES; n++)
		sum += atomic_load_explicit(&heap_huge_ns[n], memory_order_relaxed);
	uint64_t mean = sum / n; /* n >= 1: this sample */
	atomic_store_explicit(&heap_last_huge_ns, mean, memory_order_relaxed);
	atomic_store_explicit(&heap_last_small_ns, small, memory_order_relaxed);
	if (small && dearer_huge(mean, small, false))
		atomic_store_explicit(&heap_small_until, now + THP_PROBE_MS, memory_order_relaxed);
}

/* A growing heap: an arena whose chunks are dense but for a quarter at
 * most, with at least this many dense, is filling chunk after chunk, and
 * its next chunk is advised huge before its first touch (thp_new_chunk_huge).
 * Why 8 (16 MiB): a chunk born huge holds its untouched pages resident,
 * and with 2 cc1 (prog_gcc -f 120) peaked at 66.4 MB against 63.8 in 4 KiB
 * pages (glibc 62.3); with 8, 64.0.  The programs whose heaps grow well
 * past it (sqlite3, python3, redis-server) keep most of the gain. */
#define THP_GROWING_DENSE 8

/* Whether a new arena chunk starts advised huge, for an arena with ndense
 * chunks advised huge among nchunks.  thp:always: always.  thp:auto: only
 * in a growing heap (THP_GROWING_DENSE), where the chunk will most likely
 * turn dense too, and only where fresh huge pages pay (the run-time
 * verdict); anywhere else sparse until proven dense, so that an arena
 * holding a few blocks does not keep 2 MiB resident.  Advice given after
 * the first touch (a dense chunk) waits for khugepaged, seconds to minutes:
 * a program that runs for a few seconds never had its heap in huge pages.
 *
 * Or regrown: the dirty cap purged the chunk and the heap takes it back
 * within decay_ms (its regret, purge.c), growing back to where it was a
 * moment ago.  python3 -m malloc's `del records` then json.loads: the cap
 * purged 116 MiB of whole chunks during the frees (a -n 100000 run), and
 * the rebuild faulted them in again 4 KiB at a time until 8 were dense:
 * 16.2k minor faults, wall 0.751 s against tcmalloc's 0.590; born huge,
 * 10.2k and 0.617 (prog_python -n 30000 -m malloc, 7 interleaved rounds
 * with every peer; docs/design.md, "A heap growing
 * back").  Without the cap (dirty_cap:off) nothing is purged early: 5.0k. */
bool thp_new_chunk_huge(size_t ndense, size_t nchunks, bool regrown, uint64_t now)
{
	if (cfg->thp == THP_ALWAYS)
		return true;
	if (cfg->thp != THP_AUTO || purge_fine_on() || thp_verdict() > THP_V_HUGE || !limit_thp_ok())
		return false;
	if (!regrown && !(ndense >= THP_GROWING_DENSE && 4 * (nchunks - ndense) <= nchunks))
		return false;
	if (heap_small_now(now)) {
		atomic_fetch_add_explicit(&heap_kept_small, 1, memory_order_relaxed);
		return false;
	}
	return true;
}

/* A chunk the dirty cap purged and the heap fills again (arena.c,
 * refill_huge) is collapsed back into a huge page once the heap took back
 * THP_REFILL_PAGES of it within decay_ms of the purge and it is over a
 * quarter used (not sparse), in a heap that has held THP_REFILL_CHUNKS
 * chunks at once.  The collapse (~0.5 ms) makes the chunk's free pages
 * resident at once: 128 pages taken back say the heap is refilling it,
 * and in a heap of 32 MiB or more the free part of one chunk (at most 3/4
 * of 2 MiB) is under 5% of it.  python3 under pymalloc keeps a 10 MiB heap
 * that refills chunks the cap purged too, but not for long: without the
 * heap's size in the rule its peak RSS rose 0.6 MB (68.2 -> 68.9 MB, glibc
 * 65.6), with no fault saved. */
#define THP_REFILL_PAGES 128
#define THP_REFILL_CHUNKS 16

bool thp_refill_collapse(const arena_chunk_t *c, size_t peak_chunks)
{
	/* the chunk's own counts first: a call for every run of pages taken */
	return c->regret_pages >= THP_REFILL_PAGES && !c->advised_huge &&
	       c->nfree < CHUNK_PAGES - THP_SPARSE_PAGES && peak_chunks >= THP_REFILL_CHUNKS &&
	       cfg->thp == THP_AUTO && !purge_fine_on() && thp_verdict() <= THP_V_HUGE && limit_thp_ok();
}

/* Whether c, whose pages in use just grew, turns dense now.  A dense chunk
 * is advised huge (thp_dense_advised) and khugepaged may then collapse it.
 * Not where fine purging is on everywhere: nothing would keep its huge
 * page whole. */
bool thp_turns_dense(const arena_chunk_t *c, uint64_t now)
{
	return !c->advised_huge && c->nfree <= CHUNK_PAGES - THP_DENSE_PAGES &&
	       !purge_fine_on() && limit_thp_ok() && advice_may_change(c, now);
}

/* Whether a chunk turning dense is given MADV_HUGEPAGE (thp:auto; under
 * thp:always it has it already). */
bool thp_dense_advised(void)
{
	return cfg->thp == THP_AUTO;
}

/* Whether c, dense and with pages just freed, is back under
 * THP_SPARSE_PAGES in use and takes its huge-page advice back now
 * (MADV_NOHUGEPAGE, so that khugepaged does not fill its free pages again;
 * its free page runs are then purged like any sparse chunk's).  If
 * khugepaged had made it a huge page, the first purge splits it: at most a
 * quarter of it is in use, and keeping the page would hold 1.5 MiB or more
 * of free memory resident.  Measured with bench/soak (two 5-minute runs
 * side by side, docs/soak.md): RSS/live median 3.13 -> 2.49, p99 12.1 -> 7.8.
 * The sweep asks again for chunks that went sparse while they had to keep
 * their advice (advice_may_change). */
bool thp_turns_sparse(const arena_chunk_t *c, uint64_t now)
{
	return thp_sparse_by_use(c) && advice_may_change(c, now);
}

/* Whether c is dense by its advice and sparse by its pages in use: it
 * turns sparse when its advice may change (thp_sparse_at), or at once
 * when the dirty cap needs its free pages (arena.c). */
bool thp_sparse_by_use(const arena_chunk_t *c)
{
	return c->advised_huge && cfg->thp == THP_AUTO && cfg->fine_purge == TRI_AUTO &&
	       c->nfree >= CHUNK_PAGES - THP_SPARSE_PAGES;
}

/* When c, sparse by its pages in use, may take back its advice. */
uint64_t thp_sparse_at(const arena_chunk_t *c)
{
	uint64_t wait = cfg->decay_ms > ADVICE_MIN_MS ? (uint64_t)cfg->decay_ms : ADVICE_MIN_MS;
	return c->advice_ms + wait;
}

/* ---- the run-time decision (thp:auto) --------------------------------------
 *
 * Whether fresh memory (chunks the process never touched, or purged) of
 * huge blocks gets huge pages.  What decides is what a first write costs:
 * huge.c, at a huge block from fresh chunks (malloc or realloc, not calloc)
 * when a probe is due (thp_probe_due), times first writes of scratch
 * memory advised huge (an eighth of the block's fresh chunks, 4 to
 * THP_PROBE_PAGES: thp_probe_runs) and
 * of 4 KiB pages (os_fault_probe) and tells thp_probe_result.  A huge page
 * that costs more than its 512 small pages (the host took the guest's free
 * 2 MiB blocks back: 1.7-5.8 ms against 1-1.5 ms here) makes
 * fresh memory cheaper in 4 KiB pages; a huge page that did not
 * form (fragmentation, defrag off, PR_SET_THP_DISABLE) is no use advised.
 * Dense arena chunks keep their advice: their pages are faulted already,
 * and khugepaged collapses them in its own time.  Memory reused, which has
 * its pages, keeps them.  The statistics show the verdict and the figures. */

START_UP static _Atomic uint64_t probe_next_ms;  /* 0: none yet */
START_UP static _Atomic uint8_t verdict = THP_V_UNPROBED;
START_UP static atomic_ulong probes;
START_UP static _Atomic uint64_t last_huge_ns, last_small_ns;

/* The verdict now, also for the statistics: thp:always and thp:never and a
 * kernel without THP decide before any probe. */
uint8_t thp_verdict(void)
{
	if (cfg->thp == THP_ALWAYS)
		return THP_V_ALWAYS;
	if (cfg->thp == THP_NEVER)
		return THP_V_NEVER;
	if (os_thp != THP_SYS_MADVISE && os_thp != THP_SYS_ALWAYS)
		return THP_V_OFF;
	return atomic_load_explicit(&verdict, memory_order_relaxed);
}

START_UP static _Atomic unsigned last_runs; /* the last probe's depth */

/* Whether the caller, about to advise fresh chunks of a huge block, runs a
 * probe of runs 2 MiB runs now: thp:auto with THP there, and none in the
 * last THP_PROBE_MS, unless dear (thp_watch_dear) or, while fresh chunks
 * get huge pages, twice as deep as the last: a buffer that doubles takes
 * half its fresh chunks in its last step, from further down the guest's
 * free 2 MiB blocks than a probe at its start reached (realloc_grow -m
 * seed1 -M 1g: a probe of 2 runs, then 1.8 s for the last 256 chunks in
 * huge pages).  One thread wins the turn. */
bool thp_probe_due(uint64_t now, unsigned runs, bool dear)
{
	uint8_t v = thp_verdict();
	if (v >= THP_V_OFF)
		return false;
	bool deeper = v <= THP_V_HUGE && /* fresh chunks advised huge */
		      runs >= 2 * atomic_load_explicit(&last_runs, memory_order_relaxed);
	uint64_t next = atomic_load_explicit(&probe_next_ms, memory_order_relaxed);
	if (next && now < next && !dear && !deeper)
		return false;
	if (!atomic_compare_exchange_strong(&probe_next_ms, &next, now + THP_PROBE_MS))
		return false;
	atomic_store_explicit(&last_runs, runs, memory_order_relaxed);
	return true;
}

/* ---- the watch between probes ----------------------------------------------
 * The guest hands out first the 2 MiB blocks it freed last, still backed by
 * the host, and a probe at a block's start reads those: first writes of 1
 * GiB advised huge, 2 MiB at a time, cost 0.35 ms each for the first 64 to
 * 190 and 6.5-9 ms each after (4 KiB pages: 0.8-1.4 ms per 2 MiB), and a
 * buffer grown by realloc takes most of its fresh chunks long after its
 * first probe.  So each thread watches its own CPU time per fresh chunk it
 * was given advised huge, over windows of at least THP_WATCH_CHUNKS: the
 * first writes of those chunks are most of it where a program grows huge
 * blocks.  A window dearer than a probe's huge page would have to be
 * (dearer_huge) makes a probe due at once; the probe decides, so CPU time
 * spent on other work only brings a probe forward, at most one per window
 * (a probe of 4 runs per 32 chunks: an eighth of their first writes). */
#define THP_WATCH_CHUNKS 32

static _Thread_local uint64_t watch_from_ns __attribute__((tls_model("initial-exec")));
static _Thread_local size_t watch_chunks __attribute__((tls_model("initial-exec")));

/* Called as nchunks fresh chunks of a huge block are about to be advised:
 * whether the window the thread's earlier ones close says a probe is due
 * now. */
bool thp_watch_dear(size_t nchunks)
{
	if (thp_verdict() > THP_V_HUGE) {
		watch_chunks = 0; /* none advised huge: no window */
		return false;
	}
	uint64_t cpu_ns = os_thread_cpu_ns();
	bool dear = false;
	if (cpu_ns < watch_from_ns) /* a child of fork: its clock started again */
		watch_chunks = 0;
	if (watch_chunks >= THP_WATCH_CHUNKS) {
		uint64_t small = atomic_load_explicit(&last_small_ns, memory_order_relaxed);
		dear = small && dearer_huge((cpu_ns - watch_from_ns) / watch_chunks, small, false);
		watch_chunks = 0;
	}
	if (!watch_chunks)
		watch_from_ns = cpu_ns;
	watch_chunks += nchunks;
	return dear;
}

/* How many 2 MiB runs a probe for a block of nchunks fresh chunks times:
 * an eighth of the block, between THP_PROBE_MIN and THP_PROBE_PAGES, and
 * never more than the block.  The depth is what predicts (the guest hands
 * out first the 2 MiB blocks it freed last, still backed by the host): a
 * fixed cap of 16 runs said `huge` in 8 of 8 probes after an idle 6 s
 * where the 1 GiB block behind it took 1.9-3.5x longer with huge pages,
 * and 64 runs said `small` in 6 of them (docs/design.md, "Deciding at run time");
 * a shallower probe for a smaller block costs less when wrong, since a
 * first touch costs in proportion to the block. */
unsigned thp_probe_runs(size_t nchunks)
{
	size_t n = nchunks / 8;
	n = n < THP_PROBE_MIN ? THP_PROBE_MIN : n > THP_PROBE_PAGES ? THP_PROBE_PAGES : n;
	return (unsigned)(n < nchunks ? n : nchunks);
}

/* What a probe measured (os_fault_probe): the verdict from here on. */
void thp_probe_result(const os_fault_cost_t *cost)
{
	bool small_now = atomic_load_explicit(&verdict, memory_order_relaxed) == THP_V_SMALL;
	uint8_t v = !cost->formed ? THP_V_UNFORMED
		  : dearer_huge(cost->huge_ns, cost->small_ns, small_now) ? THP_V_SMALL : THP_V_HUGE;
	atomic_store_explicit(&last_huge_ns, cost->huge_ns, memory_order_relaxed);
	atomic_store_explicit(&last_small_ns, cost->small_ns, memory_order_relaxed);
	atomic_fetch_add_explicit(&probes, 1, memory_order_relaxed);
	atomic_store_explicit(&verdict, v, memory_order_relaxed);
}

/* The decision as the statistics show it. */
thp_decision_t thp_decision(void)
{
	static const char *const names[] = {
		[THP_V_UNPROBED] = "unprobed", [THP_V_HUGE] = "huge", [THP_V_SMALL] = "small",
		[THP_V_UNFORMED] = "unformed", [THP_V_OFF] = "off", [THP_V_ALWAYS] = "always",
		[THP_V_NEVER] = "never",
	};
	return (thp_decision_t){
		.name = names[thp_verdict()],
		.probes = atomic_load_explicit(&probes, memory_order_relaxed),
		.huge_ns = atomic_load_explicit(&last_huge_ns, memory_order_relaxed),
		.small_ns = atomic_load_explicit(&last_small_ns, memory_order_relaxed),
		.heap_checks = atomic_load_explicit(&heap_checks, memory_order_relaxed),
		.heap_huge_ns = atomic_load_explicit(&heap_last_huge_ns, memory_order_relaxed),
		.heap_small_ns = atomic_load_explicit(&heap_last_small_ns, memory_order_relaxed),
		.heap_kept_small = atomic_load_explicit(&heap_kept_small, memory_order_relaxed),
	};
}

/* The advice for one chunk of a huge block, which covers pages of it: its
 * dense chunks (whole, or a last one covered THP_DENSE_PAGES or more, as an
 * arena chunk turns dense) get huge pages (thp:auto, thp:always), unless
 * they are fresh and the run-time
 * decision says fresh memory is cheaper in 4 KiB pages, by the probe or
 * by the growing heap's own chunks born huge (no advice at all when it
 * says huge pages do not form): a probe of 4 runs read memory the host
 * still backed and said `huge`, and idle_return -t 1's 139 chunks of
 * huge blocks then faulted at ~5 ms each (its heap's: 5.4 ms against 1.5
 * in 4 KiB pages); a last chunk it covers less gets none, unless
 * thp:always: a huge page there would be resident for a few bytes of the
 * block (the "2.1 MiB in 4 MiB" bloat); such a chunk holds the block's
 * guard page (huge.c).  Huge tails: build/bench/large_churn -n 600 -k 20
 * -s 5m-25m, 12.8 k faults without, 9.3 k with. */
uint8_t thp_huge_block_advice(size_t pages, bool fresh)
{
	if (cfg->thp == THP_NEVER)
		return ADV_NOHUGE;
	if (cfg->secure && pages < CHUNK_PAGES)
		return ADV_NOHUGE; /* its guard page (huge.c) would split it */
	if (cfg->thp == THP_ALWAYS)
		return ADV_HUGE;
	uint8_t v = thp_verdict();
	if (v == THP_V_UNFORMED)
		return ADV_NONE; /* no call for nothing */
	bool dear = (fresh && (v == THP_V_SMALL || heap_small_now(os_now_ms()))) || !limit_thp_ok();
	return pages >= THP_DENSE_PAGES && !dear ? ADV_HUGE : ADV_NOHUGE;
}

/* Whether a guard page in arena chunk c costs no huge page: c is not
 * advised huge (a guard keeps its 2 MiB from being one, and a chunk
 * turning dense takes its guards away first: arena.c). */
bool thp_guard_ok(const arena_chunk_t *c)
{
	return !c->advised_huge;
}
