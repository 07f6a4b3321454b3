/*
 * The two policies, on their own (src/purge.c, src/thp.c; docs/design.md
 * "One home per policy"): when memory is due for purging and with which
 * advice, and which memory gets huge-page advice and when that changes.
 * They read the configuration and the kernel's THP mode (os_thp, set here
 * as the fake OS's start-up detection would) and the fields of an arena
 * chunk descriptor built by hand.
 */
#include "fake_os.h"
#include "unit.h"
#include "limit.h"

static arena_chunk_t chunk_with(size_t pages_in_use, bool advised_huge, uint64_t advice_ms)
{
	arena_chunk_t c;
	memset(&c, 0, sizeof c);
	c.nfree = (uint16_t)(CHUNK_PAGES - pages_in_use);
	c.advised_huge = advised_huge;
	c.advice_ms = advice_ms;
	return c;
}

Test(policy, decay_expiry_follows_decay_ms)
{
	cr_assert_eq(conf.decay_ms, 1000);
	cr_assert(purge_decay_on());
	cr_assert_not(purge_expired(5000, 5999));
	cr_assert(purge_expired(5000, 6000));
	cr_assert_not(purge_at_free());
	cr_assert_eq(purge_advice(), PURGE_DONTNEED);
	conf.decay_ms = 0;
	cr_assert(purge_at_free());
	cr_assert(purge_expired(5000, 5000));
	conf.decay_ms = -1;
	cr_assert_not(purge_decay_on());
	cr_assert_not(purge_expired(0, UINT64_MAX / 2), "decay_ms:-1 never purges");
	conf.decay_ms = 1000;
	conf.purge = PURGE_OFF;
	cr_assert_not(purge_expired(0, UINT64_MAX / 2), "purge:off never purges");
	cr_assert_not(purge_sweeps());
	conf.decay_ms = 0;
	cr_assert_not(purge_at_free(), "purge:off, even with decay_ms:0");
	conf.purge = PURGE_FREE;
	cr_assert_eq(purge_advice(), PURGE_FREE);
}

Test(policy, fine_purging_where_no_huge_page_would_split)
{
	arena_chunk_t sparse = chunk_with(10, false, 0), dense = chunk_with(500, true, 0);
	os_thp = THP_SYS_MADVISE;
	cr_assert_not(purge_fine_on());
	cr_assert(purge_fine_chunk(&sparse));
	cr_assert_not(purge_fine_chunk(&dense), "a chunk advised huge keeps its free pages");
	os_thp = THP_SYS_NEVER;
	cr_assert(purge_fine_on(), "no huge pages to split");
	cr_assert(purge_fine_chunk(&dense));
	os_thp = THP_SYS_NONE;
	cr_assert(purge_fine_on());
	os_thp = THP_SYS_ALWAYS;
	conf.thp = THP_NEVER;
	cr_assert(purge_fine_on(), "thp:never: nothing is advised huge");
	conf.thp = THP_AUTO;
	conf.fine_purge = TRI_OFF;
	cr_assert_not(purge_fine_chunk(&sparse));
	cr_assert_not(purge_sweeps());
	conf.fine_purge = TRI_ON;
	cr_assert(purge_fine_chunk(&dense));
}

/* Dense chunks that turned dense after their first touch (advice_ms set
 * by the change) decay like sparse ones; a chunk advised huge at birth
 * (advice_ms still 0: a growing heap's, or thp:always) keeps its pages. */
Test(policy, dense_chunks_decay_unless_born_huge)
{
	arena_chunk_t touched = chunk_with(400, true, 5000), born = chunk_with(400, true, 0);
	arena_chunk_t sparse = chunk_with(10, false, 5000);
	os_thp = THP_SYS_MADVISE;
	cr_assert_not(purge_dense_chunk(&touched), "no background thread: the dirty cap's rule");
	purge_set_background(true);
	cr_assert(purge_dense_chunk(&touched), "dense after its first touch: decays");
	cr_assert_not(purge_dense_chunk(&born), "born huge: keeps its free pages");
	cr_assert_not(purge_dense_chunk(&sparse), "sparse: purge_fine_chunk's");
	conf.fine_purge = TRI_OFF;
	cr_assert_not(purge_dense_chunk(&touched), "fine_purge:false purges no page run");
	conf.fine_purge = TRI_ON;
	cr_assert_not(purge_dense_chunk(&touched), "fine_purge:true: purge_fine_chunk's");
	purge_set_background(false);
}

Test(policy, sweeps_every_quarter_of_decay_ms_at_least_10_ms)
{
	uint64_t next = 0;
	cr_assert(purge_sweep_due(&next, 1000));
	cr_assert_eq(next, 1250);
	cr_assert_not(purge_sweep_due(&next, 1249));
	cr_assert_eq(next, 1250, "a sweep that is not due leaves the time alone");
	cr_assert(purge_sweep_due(&next, 1250));
	conf.decay_ms = 20;
	cr_assert_eq(purge_period_ms(), 10);
	conf.decay_ms = 0;
	cr_assert_eq(purge_period_ms(), 10);
	conf.decay_ms = 8000;
	cr_assert_eq(purge_period_ms(), 2000);
}

Test(policy, dense_at_three_quarters_sparse_under_a_quarter)
{
	os_thp = THP_SYS_MADVISE;
	uint64_t now = 100000;
	cr_assert_eq(THP_DENSE_PAGES, 384);
	cr_assert_eq(THP_SPARSE_PAGES, 128);
	arena_chunk_t c = chunk_with(THP_DENSE_PAGES - 1, false, 0);
	cr_assert_not(thp_turns_dense(&c, now));
	c = chunk_with(THP_DENSE_PAGES, false, 0);
	cr_assert(thp_turns_dense(&c, now));
	cr_assert(thp_dense_advised());
	c = chunk_with(THP_DENSE_PAGES, false, now - 999);
	cr_assert_not(thp_turns_dense(&c, now), "advice changes at most once per decay_ms");
	c = chunk_with(THP_DENSE_PAGES, true, 0);
	cr_assert_not(thp_turns_dense(&c, now), "dense already");
	c = chunk_with(THP_SPARSE_PAGES + 1, true, 0);
	cr_assert_not(thp_turns_sparse(&c, now));
	c = chunk_with(THP_SPARSE_PAGES, true, 0);
	cr_assert(thp_turns_sparse(&c, now));
	c = chunk_with(THP_SPARSE_PAGES, true, now - 999);
	cr_assert_not(thp_turns_sparse(&c, now));
	c = chunk_with(THP_SPARSE_PAGES, true, now - 1000);
	cr_assert(thp_turns_sparse(&c, now));
	conf.decay_ms = 0;
	c = chunk_with(THP_SPARSE_PAGES, true, now - 9);
	cr_assert_not(thp_turns_sparse(&c, now), "at least 10 ms between changes");
	c = chunk_with(THP_SPARSE_PAGES, true, now - 10);
	cr_assert(thp_turns_sparse(&c, now));
	conf.fine_purge = TRI_OFF;
	cr_assert_not(thp_turns_sparse(&c, now), "fine_purge set: the advice stays");
	conf.fine_purge = TRI_AUTO;
	os_thp = THP_SYS_NEVER;
	c = chunk_with(CHUNK_PAGES, false, 0);
	cr_assert_not(thp_turns_dense(&c, now), "no THP: nothing turns dense");
}

Test(policy, advice_by_mode)
{
	os_thp = THP_SYS_MADVISE;
	cr_assert_not(thp_new_chunk_huge(0, 0, false, 0));
	cr_assert(thp_meta_huge());
	cr_assert_eq(thp_huge_block_advice(CHUNK_PAGES, true), ADV_HUGE);
	cr_assert_eq(thp_huge_block_advice(THP_DENSE_PAGES - 1, true), ADV_NOHUGE,
		     "no huge page for a block's tail under 3/4 covered");
	cr_assert_eq(thp_huge_block_advice(THP_DENSE_PAGES, true), ADV_HUGE,
		     "a tail covered as a dense chunk is: huge, as the whole chunks");
	conf.thp = THP_ALWAYS;
	cr_assert(thp_new_chunk_huge(0, 0, false, 0));
	cr_assert_not(thp_dense_advised(), "thp:always: advised at creation already");
	cr_assert_eq(thp_huge_block_advice(THP_DENSE_PAGES - 1, true), ADV_HUGE);
	conf.thp = THP_NEVER;
	cr_assert_not(thp_new_chunk_huge(0, 0, false, 0));
	cr_assert_not(thp_meta_huge());
	cr_assert_eq(thp_huge_block_advice(CHUNK_PAGES, false), ADV_NOHUGE);
	cr_assert_eq(thp_huge_block_advice(THP_DENSE_PAGES - 1, false), ADV_NOHUGE);
}

/* ---- the run-time decision (thp.c) ---------------------------------------- */

static os_fault_cost_t cost(uint64_t huge_us, uint64_t small_us, bool formed)
{
	return (os_fault_cost_t){ .huge_ns = huge_us * 1000, .small_ns = small_us * 1000,
				  .formed = formed };
}

static const char *decision(void)
{
	return thp_decision().name;
}

/* thp:auto: a new arena chunk starts in huge pages only in a growing heap
 * (at least eight chunks dense, and no more than a quarter of them not) or
 * one growing back into chunks the dirty cap purged, only where fresh huge
 * pages pay, and never where fine purging is on. */
Test(policy, new_chunks_huge_in_a_growing_heap)
{
	os_thp = THP_SYS_MADVISE;
	cr_assert_not(thp_new_chunk_huge(0, 0, false, 0), "a new heap: sparse until proven dense");
	cr_assert_not(thp_new_chunk_huge(7, 7, false, 0), "under 16 MiB dense is not a growing heap");
	cr_assert(thp_new_chunk_huge(8, 8, false, 0));
	cr_assert(thp_new_chunk_huge(9, 12, false, 0), "three of four dense");
	cr_assert_not(thp_new_chunk_huge(8, 11, false, 0), "more than a quarter have room");
	cr_assert(thp_new_chunk_huge(12, 16, false, 0));
	cr_assert_not(thp_new_chunk_huge(11, 16, false, 0));
	cr_assert(thp_new_chunk_huge(0, 0, true, 0), "growing back into what the cap purged");
	cr_assert(thp_new_chunk_huge(2, 16, true, 0));
	os_fault_cost_t c = cost(5800, 1200, true);
	thp_probe_result(&c);
	cr_assert_not(thp_new_chunk_huge(8, 8, false, 0), "fresh huge pages cost more: 4 KiB pages");
	cr_assert_not(thp_new_chunk_huge(0, 0, true, 0), "growing back: the verdict holds too");
	c = cost(500, 1200, true);
	thp_probe_result(&c);
	cr_assert(thp_new_chunk_huge(8, 8, false, 0));
	c = cost(500, 1200, false);
	thp_probe_result(&c);
	cr_assert_not(thp_new_chunk_huge(8, 8, false, 0), "huge pages do not form");
	c = cost(500, 1200, true);
	thp_probe_result(&c);
	conf.fine_purge = TRI_ON;
	cr_assert_not(thp_new_chunk_huge(8, 8, false, 0), "fine purging would split it");
	cr_assert_not(thp_new_chunk_huge(0, 0, true, 0));
	conf.fine_purge = TRI_AUTO;
	conf.thp = THP_NEVER;
	cr_assert_not(thp_new_chunk_huge(8, 8, false, 0));
	cr_assert_not(thp_new_chunk_huge(0, 0, true, 0));
	conf.thp = THP_AUTO;
	os_thp = THP_SYS_NEVER;
	cr_assert_not(thp_new_chunk_huge(8, 8, false, 0), "no THP");
}

/* thp:auto: a growing heap's own chunks born huge are the probe where no
 * huge block ran one.  Their first writes costing on average (the last 4)
 * more than 512 times the median 4 KiB first write of chunks born small,
 * the next chunks are born small for 5 s, and fresh chunks of huge blocks
 * get 4 KiB pages too; then one is born huge again and decides alone.  No
 * 4 KiB figure yet: nothing to compare with. */
Test(policy, growing_heap_born_small_where_its_huge_pages_cost_more)
{
	os_thp = THP_SYS_MADVISE;
	cr_assert(thp_times_first_writes());
	thp_chunk_first_write(true, 9000000, 0);
	cr_assert(thp_new_chunk_huge(8, 8, false, 1), "no 4 KiB figure to compare with");
	for (int i = 0; i < 8; i++) /* 2 MiB in 4 KiB pages: 1.024 ms */
		thp_chunk_first_write(false, i == 3 ? 90000 : 2000, 1);
	thp_chunk_first_write(true, 300000, 2); /* mean (9 + 0.3) / 2 ms */
	cr_assert_not(thp_new_chunk_huge(8, 8, false, 3), "4.65 ms against 1.02: 4 KiB pages");
	cr_assert_not(thp_new_chunk_huge(0, 0, true, 3), "growing back: the same");
	fake.now_ms = 3;
	cr_assert_eq(thp_huge_block_advice(CHUNK_PAGES, true), ADV_NOHUGE, "fresh chunks of huge blocks too");
	cr_assert_eq(thp_huge_block_advice(CHUNK_PAGES, false), ADV_HUGE, "reused ones keep their pages");
	cr_assert_not(thp_new_chunk_huge(8, 8, false, 5001));
	cr_assert(thp_new_chunk_huge(7, 7, false, 5001) == false, "not a growing heap: not counted");
	thp_decision_t d = thp_decision();
	cr_assert_eq(d.heap_checks, 2);
	cr_assert_eq(d.heap_huge_ns, 4650000);
	cr_assert_eq(d.heap_small_ns, 2000 * 512, "the median, not one slow fault");
	cr_assert_eq(d.heap_kept_small, 3);
	cr_assert(thp_new_chunk_huge(8, 8, false, 5002), "5 s later one is born huge again");
	fake.now_ms = 5002;
	cr_assert_eq(thp_huge_block_advice(CHUNK_PAGES, true), ADV_HUGE);
	thp_chunk_first_write(true, 400000, 5002);
	cr_assert(thp_new_chunk_huge(8, 8, false, 5003), "and decides alone: 0.4 ms");
	thp_chunk_first_write(true, 1000000, 5003);
	cr_assert(thp_new_chunk_huge(8, 8, false, 5004), "mean 0.7 ms");
	thp_chunk_first_write(true, 3000000, 5004);
	cr_assert(thp_new_chunk_huge(8, 8, false, 5005), "mean 1.47 ms: within the margin");
	cr_assert_eq(thp_decision().heap_huge_ns, 1466666);
	thp_chunk_first_write(true, 5000000, 5005);
	cr_assert_not(thp_new_chunk_huge(8, 8, false, 5006), "mean 2.35 ms, past 2 x 1.02");
	conf.thp = THP_NEVER;
	cr_assert_not(thp_times_first_writes(), "thp:never: nothing to decide");
	conf.thp = THP_AUTO;
	conf.fine_purge = TRI_ON;
	cr_assert_not(thp_times_first_writes(), "fine purging: no chunk is born huge");
}

/* thp:auto: a chunk whose free pages the dirty cap purged is collapsed
 * into a huge page again once the heap took 128 of its pages back and it
 * is over a quarter used, in a heap that has held 16 chunks; not where
 * fresh huge pages lose, fine purging is on, or THP is off. */
Test(policy, refilled_chunks_collapse_in_a_big_heap)
{
	os_thp = THP_SYS_MADVISE;
	arena_chunk_t c = chunk_with(200, false, 0);
	c.regret_pages = 128;
	cr_assert(thp_refill_collapse(&c, 16));
	cr_assert_not(thp_refill_collapse(&c, 15), "a heap that never held 32 MiB");
	c.regret_pages = 127;
	cr_assert_not(thp_refill_collapse(&c, 16), "127 pages taken back: not yet");
	c.regret_pages = 128;
	arena_chunk_t sparse = chunk_with(THP_SPARSE_PAGES - 2, false, 0);
	sparse.regret_pages = 200;
	cr_assert_not(thp_refill_collapse(&sparse, 16), "a quarter used or less: sparse");
	arena_chunk_t huge = chunk_with(200, true, 0);
	huge.regret_pages = 200;
	cr_assert_not(thp_refill_collapse(&huge, 16), "advised huge already");
	os_fault_cost_t cst = cost(5800, 1200, true);
	thp_probe_result(&cst);
	cr_assert_not(thp_refill_collapse(&c, 16), "fresh huge pages cost more");
	cst = cost(500, 1200, true);
	thp_probe_result(&cst);
	cr_assert(thp_refill_collapse(&c, 16));
	conf.fine_purge = TRI_ON;
	cr_assert_not(thp_refill_collapse(&c, 16), "fine purging would split it again");
	conf.fine_purge = TRI_AUTO;
	conf.thp = THP_NEVER;
	cr_assert_not(thp_refill_collapse(&c, 16));
	conf.thp = THP_AUTO;
	os_thp = THP_SYS_NONE;
	cr_assert_not(thp_refill_collapse(&c, 16), "no THP");
}

/* A huge page that costs more than its 512 small pages (the host took
 * the memory back: 5.8 ms against 1.2 ms here) sends fresh memory of huge
 * blocks to 4 KiB pages; one that costs less (0.5 ms: memory freed a
 * moment ago) keeps huge pages; reused memory keeps them either way. */
Test(policy, fresh_memory_goes_where_its_first_write_is_cheaper)
{
	os_thp = THP_SYS_MADVISE;
	cr_assert_str_eq(decision(), "unprobed");
	cr_assert_eq(thp_huge_block_advice(CHUNK_PAGES, true), ADV_HUGE, "no probe yet: huge pages");
	os_fault_cost_t c = cost(5800, 1200, true);
	thp_probe_result(&c);
	cr_assert_str_eq(decision(), "small");
	cr_assert_eq(thp_huge_block_advice(CHUNK_PAGES, true), ADV_NOHUGE, "fresh: 4 KiB pages");
	cr_assert_eq(thp_huge_block_advice(CHUNK_PAGES, false), ADV_HUGE, "reused memory keeps huge pages");
	cr_assert_eq(thp_huge_block_advice(THP_DENSE_PAGES - 1, false), ADV_NOHUGE);
	c = cost(500, 1200, true);
	thp_probe_result(&c);
	cr_assert_str_eq(decision(), "huge");
	cr_assert_eq(thp_huge_block_advice(CHUNK_PAGES, true), ADV_HUGE);
	c = cost(1200, 1200, true);
	thp_probe_result(&c);
	cr_assert_str_eq(decision(), "huge", "the small pages' cost is still a tie");
	c = cost(2401, 1200, true);
	thp_probe_result(&c);
	cr_assert_str_eq(decision(), "small");
	thp_decision_t d = thp_decision();
	cr_assert_eq(d.probes, 4);
	cr_assert_eq(d.huge_ns, 2401000);
	cr_assert_eq(d.small_ns, 1200000);
}

/* The verdict does not flip on readings near 1, which a shared CPU blurs
 * and where either answer costs little: to `small` past twice the 4 KiB
 * pages' cost, back to `huge` at once at 1.  What a probe after a peer's
 * run reads (6.5 ms against 0.8) and one on memory freed a moment ago
 * (0.25 ms) still decide. */
Test(policy, verdict_flips_only_past_its_margin)
{
	os_thp = THP_SYS_MADVISE;
	os_fault_cost_t c = cost(1300, 1200, true);
	thp_probe_result(&c);
	cr_assert_str_eq(decision(), "huge", "1.08x: not worth 4 KiB pages");
	c = cost(2400, 1200, true);
	thp_probe_result(&c);
	cr_assert_str_eq(decision(), "huge", "2x: still within the margin");
	c = cost(6500, 800, true);
	thp_probe_result(&c);
	cr_assert_str_eq(decision(), "small", "a peer's memory, taken back by the host");
	cr_assert_eq(thp_huge_block_advice(CHUNK_PAGES, true), ADV_NOHUGE);
	c = cost(1300, 1200, true);
	thp_probe_result(&c);
	cr_assert_str_eq(decision(), "small", "1.08x: stays small (hysteresis)");
	c = cost(1200, 1200, true);
	thp_probe_result(&c);
	cr_assert_str_eq(decision(), "huge", "no dearer: back to huge pages");
	c = cost(1900, 1200, false);
	thp_probe_result(&c);
	cr_assert_str_eq(decision(), "unformed", "the margin is for costs, not for forming");
	c = cost(1900, 1200, true);
	thp_probe_result(&c);
	cr_assert_str_eq(decision(), "huge");
	fake.now_ms = 1;
	cr_assert_eq(thp_huge_block_advice(CHUNK_PAGES, true), ADV_HUGE);
}

/* A 2 MiB advised huge that took a fault per page formed no huge page:
 * advice is then no use, and none is given (not even NOHUGE). */
Test(policy, no_advice_where_huge_pages_do_not_form)
{
	os_thp = THP_SYS_ALWAYS;
	os_fault_cost_t c = cost(900, 1000, false);
	thp_probe_result(&c);
	cr_assert_str_eq(decision(), "unformed");
	cr_assert_eq(thp_huge_block_advice(CHUNK_PAGES, true), ADV_NONE);
	cr_assert_eq(thp_huge_block_advice(CHUNK_PAGES, false), ADV_NONE);
	cr_assert_eq(thp_huge_block_advice(THP_DENSE_PAGES - 1, false), ADV_NONE);
	c = cost(300, 1000, true);
	thp_probe_result(&c);
	cr_assert_str_eq(decision(), "huge", "a later probe that got one decides again");
}

/* The kernel's modes: probes run where advice can give huge pages (madvise,
 * always), not under never or without the sysfs knobs; ARENA_CONF's
 * thp:always and thp:never decide without a probe, whatever a probe said. */
Test(policy, probes_only_where_advice_matters)
{
	static const uint8_t modes[] = { THP_SYS_NONE, THP_SYS_NEVER, THP_SYS_MADVISE, THP_SYS_ALWAYS };
	static const char *const want[] = { "off", "off", "unprobed", "unprobed" };
	for (unsigned i = 0; i < 4; i++) {
		os_thp = modes[i];
		cr_assert_str_eq(decision(), want[i], "kernel mode %u", modes[i]);
		cr_assert_eq(thp_probe_due(10000 * (i + 1), 4, false), modes[i] >= THP_SYS_MADVISE, "kernel mode %u", modes[i]);
	}
	os_thp = THP_SYS_MADVISE;
	os_fault_cost_t c = cost(5800, 1200, true);
	thp_probe_result(&c);
	conf.thp = THP_ALWAYS;
	cr_assert_str_eq(decision(), "always");
	cr_assert_not(thp_probe_due(UINT64_MAX / 2, 4, false));
	cr_assert_eq(thp_huge_block_advice(CHUNK_PAGES, true), ADV_HUGE, "thp:always overrides the probe");
	conf.thp = THP_NEVER;
	cr_assert_str_eq(decision(), "never");
	cr_assert_not(thp_probe_due(UINT64_MAX / 2, 4, false));
	cr_assert_eq(thp_huge_block_advice(CHUNK_PAGES, false), ADV_NOHUGE);
	conf.thp = THP_AUTO;
	cr_assert_str_eq(decision(), "small");
}

/* At most one probe per 5 s, and one thread's: the turn is taken. */
/* A probe's depth (issue 16): an eighth of the block's fresh chunks, at
 * least 4 runs (or the block's own number), at most 64: its scratch memory
 * is never more than the block, nor more than an eighth of it from 64 MiB
 * on, and at most 128 MiB. */
Test(policy, probe_depth_is_an_eighth_of_the_block)
{
	cr_assert_eq(thp_probe_runs(1), 1);
	cr_assert_eq(thp_probe_runs(3), 3);
	cr_assert_eq(thp_probe_runs(4), 4, "the 8 MiB block of test_pages' decide scenario");
	cr_assert_eq(thp_probe_runs(31), 4);
	cr_assert_eq(thp_probe_runs(32), 4);
	cr_assert_eq(thp_probe_runs(128), 16, "256 MiB: 32 MiB of scratch");
	cr_assert_eq(thp_probe_runs(512), 64, "1 GiB: the 64 runs that predicted after idle");
	cr_assert_eq(thp_probe_runs(1 << 20), THP_PROBE_PAGES);
	for (size_t n = 1; n < 4096; n++) {
		unsigned r = thp_probe_runs(n);
		cr_assert(r >= 1 && r <= n && r <= THP_PROBE_PAGES, "%zu chunks: %u runs", n, r);
		cr_assert(n < 32 || r * 8 <= n, "%zu chunks: %u runs, more than an eighth", n, r);
	}
}

Test(policy, one_probe_per_period)
{
	os_thp = THP_SYS_MADVISE;
	cr_assert(thp_probe_due(100000, 4, false));
	cr_assert_not(thp_probe_due(100000, 4, false), "the turn is taken");
	cr_assert_not(thp_probe_due(104999, 4, false));
	cr_assert(thp_probe_due(105000, 4, false));
	cr_assert_not(thp_probe_due(105001, 4, false));
}

/* A probe's turn taken at once (the watch said dear), inside the period. */
Test(policy, a_dear_watch_probes_inside_the_period)
{
	os_thp = THP_SYS_MADVISE;
	cr_assert(thp_probe_due(100000, 4, false));
	cr_assert(thp_probe_due(100001, 4, true), "at once, 1 ms after the last");
	cr_assert_not(thp_probe_due(104999, 4, false), "the period starts again from it");
	conf.thp = THP_NEVER;
	cr_assert_not(thp_probe_due(100002, 4, true), "thp:never: no probe at all");
}

/* Inside the period, a probe twice as deep as the last is due while fresh
 * chunks get huge pages; not once they get 4 KiB pages. */
Test(policy, a_deeper_probe_inside_the_period)
{
	os_thp = THP_SYS_MADVISE;
	cr_assert(thp_probe_due(100000, 2, false));
	cr_assert_not(thp_probe_due(100001, 3, false), "not twice as deep");
	cr_assert(thp_probe_due(100002, 4, false), "twice as deep");
	cr_assert(thp_probe_due(100003, 32, false));
	cr_assert_not(thp_probe_due(100004, 32, false));
	os_fault_cost_t c = cost(300, 1000, true);
	thp_probe_result(&c);
	cr_assert(thp_probe_due(100005, 64, false), "huge: deeper still");
	c = cost(5800, 1000, true);
	thp_probe_result(&c);
	cr_assert_str_eq(decision(), "small");
	cr_assert_not(thp_probe_due(100006, 64 * 4, false), "small: once per period");
	cr_assert(thp_probe_due(105006, 4, false));
}

/* The watch: the thread's CPU time per fresh chunk it was given, over a
 * window of at least 32 of them, against twice the probe's 4 KiB figure
 * (1 ms per 2 MiB here). */
Test(policy, the_watch_sees_fresh_chunks_turn_dear)
{
	os_thp = THP_SYS_MADVISE;
	os_fault_cost_t c = cost(300, 1000, true);
	thp_probe_result(&c);
	fake.cpu_ns = 1000000;
	cr_assert_not(thp_watch_dear(16), "the window opens");
	fake.cpu_ns += 16 * 3000000; /* 3 ms each: dear, but a window of 16 */
	cr_assert_not(thp_watch_dear(16), "16 chunks: too few to judge");
	fake.cpu_ns += 16 * 3000000;
	cr_assert(thp_watch_dear(8), "32 chunks at 3 ms each: over twice 1 ms");
	fake.cpu_ns += 8 * 1900000;
	cr_assert_not(thp_watch_dear(32), "a new window of 8");
	fake.cpu_ns += 32 * 1900000; /* 40 chunks at 1.9 ms: under twice */
	cr_assert_not(thp_watch_dear(64));
	fake.cpu_ns += 64 * 2100000;
	cr_assert(thp_watch_dear(1), "64 chunks at 2.1 ms each");
	cr_assert_not(thp_watch_dear(40));
	fake.cpu_ns = 1000; /* a child of fork: its thread's clock starts again */
	cr_assert_not(thp_watch_dear(8), "a clock gone back opens a new window");
	fake.cpu_ns += 40 * 1000000;
	cr_assert_not(thp_watch_dear(1), "8 chunks: too few to judge");
}

/* Where fresh chunks are not advised huge, or no probe gave a 4 KiB figure
 * yet, the watch says nothing. */
Test(policy, the_watch_is_quiet_without_huge_fresh_chunks)
{
	os_thp = THP_SYS_MADVISE;
	cr_assert_not(thp_watch_dear(64), "unprobed: the window opens");
	fake.cpu_ns += 64 * 9000000;
	cr_assert_not(thp_watch_dear(1), "no 4 KiB figure to weigh it against");
	os_fault_cost_t c = cost(5800, 1000, true);
	thp_probe_result(&c);
	cr_assert_str_eq(decision(), "small");
	cr_assert_not(thp_watch_dear(64));
	fake.cpu_ns += 64 * 9000000;
	cr_assert_not(thp_watch_dear(1), "fresh chunks in 4 KiB pages: nothing to watch");
	conf.thp = THP_ALWAYS;
	cr_assert_not(thp_watch_dear(64));
	fake.cpu_ns += 64 * 9000000;
	cr_assert_not(thp_watch_dear(1), "thp:always: no verdict to change");
}

/* Thread caches' GC (tcache.c, purge.c's purge_cache_*): what a look gives
 * back and when looks are due. */
Test(policy, cache_gc_gives_back_what_stayed_unused)
{
	/* 20 blocks at the last look, 5 taken since, never seen below 18:
	 * 15 certainly stayed; 3/4 of 18 (14) likely: 15. */
	cr_assert_eq(purge_cache_unused(20, 18, 5, 30), 15);
	/* ran dry (refill: bound 0, seen 0): nothing */
	cr_assert_eq(purge_cache_unused(0, 0, 0, 12), 0);
	/* busy list, taken more than it held, seen low 8: 3/4 of 8 */
	cr_assert_eq(purge_cache_unused(20, 8, 500, 16), 6);
	/* never more than the list holds now */
	cr_assert_eq(purge_cache_unused(40, 40, 0, 7), 7);
	/* a 1-block low-water mark goes whole (1 - 1/4 rounds to 1) */
	cr_assert_eq(purge_cache_unused(0, 1, 3, 4), 1);
	cr_assert_eq(purge_cache_unused(64, 0, 0, 64), 64, "certainly unused, whatever was seen");
}

/* Thread caches grow by a share of 8 MiB: 4 MiB each for one or two
 * threads (their own bound), 1 MiB each from eight on. */
Test(policy, cache_growth_shared_among_threads)
{
	size_t most = (size_t)4 << 20, mib = (size_t)1 << 20;
	cr_assert_eq(purge_cache_grow_share(0, most), most, "before the first cache");
	cr_assert_eq(purge_cache_grow_share(1, most), most);
	cr_assert_eq(purge_cache_grow_share(2, most), most);
	cr_assert_eq(purge_cache_grow_share(4, most), 2 * mib);
	cr_assert_eq(purge_cache_grow_share(8, most), mib);
	cr_assert_eq(purge_cache_grow_share(64, most), mib, "never under 1 MiB");
	cr_assert_eq(purge_cache_grow_share(1, mib / 2), mib / 2, "nor over the cache's bound");
}

/* A list a burst ran dry grows past its thread's share from the 8 MiB
 * pool: all of it for a thread alone (within its own bound), what the
 * others left otherwise. */
Test(policy, burst_growth_from_the_pool)
{
	size_t most = (size_t)8 << 20, mib = (size_t)1 << 20;
	cr_assert(purge_cache_may_grow(0, 0, 8 * mib, most), "a thread alone takes the pool");
	cr_assert_not(purge_cache_may_grow(4 * mib, 4 * mib, 4 * mib + 1, most), "nor past it");
	cr_assert(purge_cache_may_grow(2 * mib, 5 * mib, 3 * mib, most), "what the others left");
	cr_assert_not(purge_cache_may_grow(2 * mib, 6 * mib, 3 * mib, most), "not more");
	cr_assert_not(purge_cache_may_grow(0, 0, mib, mib / 2), "nor over the cache's bound");
}

Test(policy, cache_gc_due_once_per_decay_period)
{
	cr_assert(conf.tcache_gc);
	cr_assert_not(purge_cache_gc_due(5000, 5999));
	cr_assert(purge_cache_gc_due(5000, 6000));
	conf.tcache_gc = false;
	cr_assert_not(purge_cache_gc_due(0, 100000), "tcache_gc:false");
	conf.tcache_gc = true;
	conf.decay_ms = -1;
	cr_assert_not(purge_cache_gc_due(0, 100000), "decay off: caches keep their blocks");
	conf.decay_ms = 0;
	cr_assert_not(purge_cache_gc_due(5000, 5009));
	cr_assert(purge_cache_gc_due(5000, 5010), "decay_ms:0: every 10 ms at most");
}

/* Under a memory limit a chunk that may be a huge page (advised huge, now
 * or once) is purged whole or not at all: a huge page purged in part stays
 * charged to the cgroup whole; and a pass of the dirty cap that the
 * limit's room bounds keeps that room less two 32nds of the limit. */
Test(policy, under_a_limit_huge_pages_are_purged_whole)
{
	arena_chunk_t born = chunk_with(10, true, 0), once = chunk_with(10, false, 5000);
	arena_chunk_t never = chunk_with(10, false, 0);
	cr_assert_not(purge_whole_only(&born), "no limit: purged in parts as before");
	conf.memory_limit_kind = MEMLIMIT_BYTES;
	conf.memory_limit = 256 * MiB;
	limit_init();
	cr_assert_eq(limit_bytes(), 256 * MiB);
	cr_assert(purge_whole_only(&born));
	cr_assert(purge_whole_only(&once), "advice taken back: the huge page may still be there");
	cr_assert_not(purge_whole_only(&never));
	cr_assert_eq(limit_cap_keep(64 * MiB), 48 * MiB);
	cr_assert_eq(limit_cap_keep(20 * MiB), 10 * MiB, "at least half the room");
}
