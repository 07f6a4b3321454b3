/*
 * Page states: calloc writes zeros only where memory is not known to be zero,
 * purging (decay, MADV_DONTNEED / MADV_FREE, fine-grained, background thread,
 * malloc_trim) gives memory back without touching live blocks, and huge-page
 * advice goes where it should.
 *
 * In this process (libarena.a, default configuration): the zero guarantee of
 * calloc across small, large and huge blocks reused dirty, after
 * arena_purge() and in a random mix; realloc growth keeps contents; a fresh
 * calloc of 1 GiB, and one over purged chunks, takes under 10 page faults.
 *
 * Every other configuration is read once at start-up, so it is checked in a
 * fresh process: progs/pages (under LD_PRELOAD=libarena.so with ARENA_CONF)
 * runs one scenario, prints "key=value" facts, checks what the configuration
 * promises and exits 1 with "FAIL: ..." lines when it is broken.  Here each
 * test runs it, requires "ok" and exit 0, and re-checks the key facts.
 */
#include <criterion/criterion.h>
#include <malloc.h>
#include <stdlib.h>

#include "arena.h"
#include "common.h"

#define PAGES_PROG PROGS_DIR "/pages"

static arena_stats_t stats_now(void)
{
	arena_stats_t s;
	cr_assert_eq(arena_stats_get(&s), 0);
	return s;
}

/* Asserts that [p, p + n) reads zero. */
static void assert_zero(const void *p, size_t n, const char *what)
{
	size_t nz = first_nonzero(p, n);
	cr_assert_eq(nz, SIZE_MAX, "%s: calloc(%zu) = %p: byte %zu is 0x%02x, not 0", what, n, p, nz,
		     nz == SIZE_MAX ? 0 : ((const uint8_t *)p)[nz]);
}

/* Sizes across the classes: small (to 16 KiB), large (to 1 MiB), huge
 * (whole chunks and partly covered last chunks). */
static const size_t zsizes[] = {
	1, 8, 16, 17, 24, 100, 128, 129, 255, 700, 1000, 2500, 4095, 4096, 4097, 5000, 8192, 12000, 16383, 16384,
	16385, 20000, 32768, 65535, 65536, 65537, 100000, 262144, 500000, (1 << 20) - 1, 1 << 20,
	(1 << 20) + 1, 2 << 20, (2 << 20) + 4096, (3 << 20) + 123, 4 << 20, (8 << 20) + 1,
};
#define NZ (sizeof zsizes / sizeof zsizes[0])

/* ---- the zero guarantee, in this process -------------------------------------------------------- */

Test(zero, calloc_fresh_every_kind, .timeout = 60)
{
	void *p[NZ];
	for (size_t i = 0; i < NZ; i++) {
		p[i] = calloc(1, zsizes[i]);
		cr_assert_not_null(p[i], "calloc(1, %zu)", zsizes[i]);
		cr_assert_geq(malloc_usable_size(p[i]), zsizes[i]);
		assert_zero(p[i], zsizes[i], "fresh");
	}
	/* nmemb * size forms */
	uint8_t *q = calloc(1000, 100), *h = calloc(3, MiB + 5);
	cr_assert(q && h);
	assert_zero(q, 100000, "calloc(1000, 100)");
	assert_zero(h, 3 * (MiB + 5), "calloc(3, 1 MiB + 5)");
	free(q);
	free(h);
	for (size_t i = 0; i < NZ; i++)
		free(p[i]);
}

/* malloc, fill with 0xAA, free, then calloc of the same and nearby sizes:
 * the memory comes back dirty and must be cleared. */
Test(zero, calloc_clears_dirty_reuse, .timeout = 60)
{
	for (size_t i = 0; i < NZ; i++) {
		size_t s = zsizes[i];
		const size_t near[] = { s, s > 1 ? s - 1 : 1, s + 1, s + 16, s + 4096, s > 8192 ? s - 8192 : 1 };
		for (size_t j = 0; j < sizeof near / sizeof near[0]; j++) {
			uint8_t *p = malloc(s);
			cr_assert_not_null(p);
			memset(p, 0xAA, malloc_usable_size(p));
			uintptr_t old = (uintptr_t)p;
			free(p);
			uint8_t *q = calloc(1, near[j]);
			cr_assert_not_null(q);
			char what[96];
			snprintf(what, sizeof what, "after malloc(%zu) filled with 0xAA and freed (%s)", s,
				 (uintptr_t)q == old ? "same block" : "other block");
			assert_zero(q, near[j], what);
			free(q);
		}
	}
}

/* Many blocks of a size dirtied and freed, then as many callocs: the thread
 * cache, slabs, page runs and chunk runs all hand back dirty memory. */
Test(zero, calloc_clears_batches, .timeout = 60)
{
	static uint8_t *p[64];
	for (size_t i = 0; i < NZ; i++) {
		size_t s = zsizes[i];
		int n = s <= 16384 ? 64 : s <= MiB ? 16 : 4;
		for (int k = 0; k < n; k++) {
			p[k] = malloc(s);
			cr_assert_not_null(p[k]);
			memset(p[k], 0xAA, malloc_usable_size(p[k]));
		}
		for (int k = 0; k < n; k++)
			free(p[k]);
		for (int k = 0; k < n; k++) {
			p[k] = calloc(s, 1);
			cr_assert_not_null(p[k]);
			assert_zero(p[k], s, "batch after dirty frees");
		}
		for (int k = 0; k < n; k++)
			free(p[k]);
	}
}

/* After arena_purge() calloc reads zero, and large and huge callocs over
 * the purged memory skip their memset (memset_skipped grows by their size);
 * over memory freed dirty they do not (huge blocks' chunks are purged at
 * free by default, so those are checked only where the free left them dirty). */
Test(zero, calloc_after_purge_skips_only_known_zero, .timeout = 60)
{
	const size_t sizes[] = { 100000, 300000, MiB, 3 * MiB + 123, 8 * MiB };
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		size_t s = sizes[i];
		/* dirty reuse: written */
		uint8_t *p = malloc(s);
		cr_assert_not_null(p);
		memset(p, 0xAA, malloc_usable_size(p));
		uintptr_t old = (uintptr_t)p;
		arena_stats_t sb = stats_now();
		free(p);
		arena_stats_t s0 = stats_now();
		/* A huge block's chunks may be purged at its free
		 * (huge_decay_ms:0): then they read zero, and may skip it. */
		bool freed_dirty = s <= MiB || s0.dirty >= sb.dirty + s;
		uint8_t *q = calloc(1, s);
		arena_stats_t s1 = stats_now();
		cr_assert_not_null(q);
		assert_zero(q, s, "over memory freed dirty");
		if ((uintptr_t)q == old && freed_dirty)
			cr_assert_eq(s1.memset_skipped, s0.memset_skipped,
				     "calloc(%zu) over the block just freed dirty skipped %lu bytes of memset", s,
				     (unsigned long)(s1.memset_skipped - s0.memset_skipped));
		memset(q, 0xAA, malloc_usable_size(q));
		arena_stats_t sf = stats_now();
		free(q);

		/* after arena_purge: known zero (a huge block's chunks may
		 * have been purged at its free already: huge_decay_ms:0) */
		size_t purged = arena_purge();
		arena_stats_t sp = stats_now();
		cr_assert_gt(sp.purged_dontneed - sf.purged_dontneed, 0,
			     "free and arena_purge() of %zu written bytes purged nothing (arena_purge: %zu)", s,
			     purged);
		arena_stats_t s2 = stats_now();
		cr_assert_eq(s2.dirty, 0, "after arena_purge() dirty = %zu", s2.dirty);
		uint8_t *z = calloc(1, s);
		arena_stats_t s3 = stats_now();
		cr_assert_not_null(z);
		assert_zero(z, s, "after arena_purge()");
		cr_assert_eq(s3.memset_skipped - s2.memset_skipped, malloc_usable_size(z),
			     "calloc(%zu) after arena_purge(): memset_skipped grew by %lu, expected the block's %zu bytes",
			     s, (unsigned long)(s3.memset_skipped - s2.memset_skipped), malloc_usable_size(z));
		free(z);
	}
}

/* A random mix of malloc (filled with 0xAA), calloc (checked, then
 * filled) and free over 32 slots, with arena_purge() now and then. */
Test(zero, calloc_random_mix, .timeout = 60)
{
	static uint8_t *slot[32];
	static size_t len[32];
	rng_t r;
	rng_seed(&r, 4242);
	for (int op = 0; op < 6000; op++) {
		int k = (int)rng_below(&r, 32);
		uint64_t kind = rng_below(&r, 100);
		size_t n = kind < 70 ? 1 + (size_t)rng_below(&r, 16384)
			 : kind < 96 ? rng_logsize(&r, 16385, MiB) : rng_logsize(&r, MiB + 1, 6 * MiB);
		if (slot[k]) {
			free(slot[k]);
			slot[k] = NULL;
		} else if (rng_below(&r, 2)) {
			slot[k] = malloc(n);
			cr_assert_not_null(slot[k]);
			memset(slot[k], 0xAA, malloc_usable_size(slot[k]));
		} else {
			slot[k] = calloc(1, n);
			cr_assert_not_null(slot[k]);
			char what[64];
			snprintf(what, sizeof what, "random mix, op %d", op);
			assert_zero(slot[k], n, what);
			memset(slot[k], 0xAA, malloc_usable_size(slot[k]));
		}
		len[k] = n;
		if (op % 700 == 699)
			arena_purge();
	}
	for (int k = 0; k < 32; k++)
		free(slot[k]);
	(void)len;
}

/* realloc growth across small, large and huge (and back) keeps contents,
 * also with arena_purge() between steps. */
Test(zero, realloc_growth_keeps_contents, .timeout = 60)
{
	const size_t steps[] = { 100, 1000, 20000, 100000, MiB, MiB + 1, 3 * MiB, 10 * MiB, 50 * MiB,
				 7 * MiB, 2 * MiB + 5, 600000, 5000, 40 };
	size_t n = steps[0];
	uint8_t *p = malloc(n);
	cr_assert_not_null(p);
	pat_fill_sparse(p, n, 77);
	uint8_t *other = malloc(3 * MiB);
	cr_assert_not_null(other);
	pat_fill_sparse(other, 3 * MiB, 78);
	for (size_t i = 1; i < sizeof steps / sizeof steps[0]; i++) {
		size_t m = steps[i], keep = m < n ? m : n;
		uint8_t *q = realloc(p, m);
		cr_assert_not_null(q, "realloc(%zu -> %zu)", n, m);
		/* the kept prefix: fully where the pattern was full, else sparse */
		size_t bad = SIZE_MAX;
		if (n <= SPARSE_FULL) {
			bad = pat_check(q, 0, keep, 77);
		} else {
			bad = pat_check(q, 0, keep < 4096 ? keep : 4096, 77);
			for (size_t off = 4096; bad == SIZE_MAX && off + 32 <= keep && off + 32 <= n - 4096;
			     off += 1024)
				bad = pat_check(q, off, off + 32, 77);
		}
		cr_assert_eq(bad, SIZE_MAX, "realloc %zu -> %zu lost byte %zu", n, m, bad);
		p = q;
		n = m;
		pat_fill_sparse(p, n, 77);
		if (i % 2)
			arena_purge();
		cr_assert_eq(pat_check_sparse(p, n, 77), SIZE_MAX, "block of %zu after arena_purge", n);
		cr_assert_eq(pat_check_sparse(other, 3 * MiB, 78), SIZE_MAX,
			     "a live 3 MiB block lost data while another block was resized and purged");
	}
	free(p);
	free(other);
}

/* ---- calloc of 1 GiB: no page touched ------------------------------------------------------------------ */

Test(calloc_1g, fresh_and_purged_without_faults, .timeout = 60)
{
	/* This test runs in a process forked from Criterion's: the first write
	 * to each page of the allocator's globals is a copy-on-write fault.
	 * A small huge calloc/free and a statistics read touch them first. */
	void *w = calloc(1, 4 * MiB);
	cr_assert_not_null(w);
	free(w);
	arena_stats_t s0 = stats_now();

	long f0 = minor_faults();
	uint8_t *p = calloc(1, GiB);
	long f1 = minor_faults();
	arena_stats_t s1 = stats_now();
	cr_assert_not_null(p, "calloc(1 GiB) failed");
	cr_log_info("a fresh calloc(1 GiB): %ld minor faults", f1 - f0);
	cr_assert_lt(f1 - f0, 10, "a fresh calloc(1 GiB) took %ld minor faults", f1 - f0);
	cr_assert_geq(s1.memset_skipped - s0.memset_skipped, GiB,
		      "a fresh calloc(1 GiB): memset_skipped grew by %lu bytes",
		      (unsigned long)(s1.memset_skipped - s0.memset_skipped));
	assert_zero(p, GiB, "fresh 1 GiB");

	/* used: every byte written; then freed and purged */
	memset(p, 0xAA, GiB);
	uintptr_t old = (uintptr_t)p;
	arena_stats_t sf = stats_now();
	free(p); /* purged by arena_purge (or here, under huge_decay_ms:0) */
	size_t purged = arena_purge();
	arena_stats_t sp = stats_now();
	cr_assert_geq(sp.purged_dontneed - sf.purged_dontneed, GiB,
		      "free and arena_purge() of a written 1 GiB purged %lu bytes (arena_purge: %zu)",
		      (unsigned long)(sp.purged_dontneed - sf.purged_dontneed), purged);

	arena_stats_t s2 = stats_now();
	f0 = minor_faults();
	uint8_t *q = calloc(1, GiB);
	f1 = minor_faults();
	arena_stats_t s3 = stats_now();
	cr_assert_not_null(q, "second calloc(1 GiB) failed");
	cr_assert((uintptr_t)q < old + GiB && old < (uintptr_t)q + GiB,
		  "the second calloc(1 GiB) (%p) did not reuse the purged chunks (%#lx): nothing to test", q,
		  (unsigned long)old);
	cr_log_info("calloc(1 GiB) over purged chunks: %ld minor faults", f1 - f0);
	cr_assert_lt(f1 - f0, 10, "calloc(1 GiB) over purged chunks took %ld minor faults", f1 - f0);
	cr_assert_geq(s3.memset_skipped - s2.memset_skipped, GiB,
		      "calloc(1 GiB) over purged chunks: memset_skipped grew by %lu bytes",
		      (unsigned long)(s3.memset_skipped - s2.memset_skipped));
	assert_zero(q, GiB, "1 GiB over written, freed and purged chunks");
	free(q);
}

/* The same in a fresh process, where the calloc also initialises the
 * allocator and its descriptor table grows past the point where it is
 * collapsed into a huge page (bench/first_touch, its `result` line).
 * Caught: descriptors written before that collapse cost a fault per 4 KiB
 * page of the table (14 faults instead of 7).  7-9 here, once 10 in a
 * loaded `make test`: the bound is 12. */
Test(calloc_1g, fresh_process_first_allocation, .timeout = 60)
{
	const char *argv[] = { BENCH_BIN "/first_touch", "-m", "calloc", "-s", "1g", NULL };
	const char *env[] = { "LD_PRELOAD=" ARENA_SO, NULL };
	run_result r;
	cr_assert_eq(run_prog(argv, env, NULL, 60, &r), 0, "cannot run %s", argv[0]);
	const char *at = strstr(r.out, " alloc_minflt=");
	long long faults = at ? strtoll(at + strlen(" alloc_minflt="), NULL, 10) : -1;
	cr_log_info("first_touch -m calloc -s 1g: %lld minor faults in the calloc", faults);
	cr_assert(faults >= 0 && faults < 12, "a process's first calloc(1 GiB) took %lld minor faults\n%s",
		  faults, r.out);
	run_result_free(&r);
}

/* ---- pages taken again -------------------------------------------------------------------------- */

/* Batches of 1600 blocks of 4 KiB malloc'd and freed whole, as glibc's
 * bench-malloc-simple does: the second batch must find the pages the first
 * one dirtied.  Caught: the first batch's frees left a chunk empty, which
 * went back to the chunk layer dirty, and the second batch faulted in the
 * zero tail of the arena's last chunk before taking that chunk back (RSS at
 * the second batch's peak 1.6 MiB above the first's). */
Test(reuse, a_second_batch_faults_in_nothing_new, .timeout = 60)
{
	enum { N = 1600, ROUNDS = 4 };
	static void *p[N];
	size_t peak[ROUNDS];
	for (int r = 0; r < ROUNDS; r++) {
		for (int i = 0; i < N; i++) {
			p[i] = malloc(4096);
			cr_assert_not_null(p[i]);
			*(volatile char *)p[i] = 1;
		}
		peak[r] = rss_bytes();
		for (int i = 0; i < N; i++)
			free(p[i]);
	}
	for (int r = 1; r < ROUNDS; r++)
		cr_assert(peak[r] <= peak[0] + 256 * KiB,
			  "RSS at batch %d's peak %zu KiB, at the first's %zu KiB", r, peak[r] / KiB,
			  peak[0] / KiB);
}

/* A huge block freed and taken again at once keeps its pages: ebizzy's
 * loop (bench/ebizzy -s 5242880: malloc, memcpy, free of 5 MiB blocks), the
 * seed thread's benchmark, where purging at free cut records/s from
 * millions to thousands.  Its chunks wait huge_decay_ms (50) before their
 * purge.  Caught: with the default at 0 (purged at free, 2026-12-02 to
 * 12-03) every round faulted its 1 MiB tail in 4 KiB pages and its whole
 * chunks as huge pages again, ~258 faults a round (ebizzy 5mib-2t: 1.6k
 * records/s against glibc's 4.6k; 4.9k with auto).  A quarter of that is
 * the bound: a loaded machine may stall a round past 50 ms now and then. */
Test(reuse, a_huge_block_freed_and_taken_again_keeps_its_pages, .timeout = 60)
{
	enum { ROUNDS = 200 };
	const size_t size = 5 * MiB;
	uint8_t *p = malloc(size);
	cr_assert_not_null(p);
	memset(p, 1, size);
	__asm__ volatile("" : : "r"(p) : "memory");
	free(p);
	long f0 = minor_faults();
	for (int r = 0; r < ROUNDS; r++) {
		p = malloc(size);
		cr_assert_not_null(p);
		memset(p, r, size);
		/* the writes and the block must happen: without this gcc drops
		 * the malloc, memset and free of a block nothing reads, and the
		 * test passed with the default at 0 */
		__asm__ volatile("" : : "r"(p) : "memory");
		free(p);
	}
	long faults = minor_faults() - f0;
	cr_assert_lt(faults, ROUNDS * 258 / 4, "%d rounds of a 5 MiB block: %ld minor faults", ROUNDS,
		     faults);
}

/* ---- configurations, in fresh processes ------------------------------------------------------------ */

/* Runs progs/pages SCENARIO MODE under ARENA_CONF=conf; r must be freed. */
static void run_pages(const char *conf, const char *scenario, const char *mode, run_result *r)
{
	const char *argv[] = { PAGES_PROG, scenario, mode, NULL };
	char conf_var[256];
	snprintf(conf_var, sizeof conf_var, "ARENA_CONF=%s", conf);
	const char *env[] = { "LD_PRELOAD=" ARENA_SO, conf_var, NULL };
	cr_assert_eq(run_prog(argv, env, NULL, 60, r), 0, "cannot run %s", PAGES_PROG);
}

/* Runs a scenario and requires it to pass: exit 0, "ok", and nothing on
 * stderr unless allowed (a bad ARENA_CONF key would warn there). */
static void expect_ok(const char *conf, const char *scenario, const char *mode, run_result *r,
		      bool stderr_ok)
{
	run_pages(conf, scenario, mode, r);
	cr_assert(run_exited0(r) && contains(r->out, "\nok\n"),
		  "pages %s %s under ARENA_CONF=%s: %s\n%s\nstderr: %s", scenario, mode, conf, r->desc,
		  r->out, r->err);
	if (!stderr_ok)
		cr_assert_eq(r->err_len, 0, "ARENA_CONF=%s: stderr: %s", conf, r->err);
}

#define BIG ((long long)256 << 20)

Test(purge, dontneed_at_once, .timeout = 60)
{
	run_result r;
	expect_ok("purge:dontneed,decay_ms:0", "at_once", "dontneed", &r, false);
	cr_assert_geq(kv_num(r.out, "freed.purged_dontneed", -1), BIG, "%s", r.out);
	cr_assert_leq(kv_num(r.out, "freed.dirty", -1), 8 << 20, "%s", r.out);
	cr_assert_geq(kv_num(r.out, "freed.rss_drop", -1), BIG - (8 << 20), "%s", r.out);
	cr_assert_geq(kv_num(r.out, "calloc.memset_skipped", -1), BIG, "%s", r.out);
	run_result_free(&r);
}

Test(purge, madv_free_at_once_is_lazy, .timeout = 60)
{
	run_result r;
	expect_ok("purge:free,decay_ms:0", "at_once", "free", &r, false);
	cr_assert_geq(kv_num(r.out, "freed.purged_free", -1), BIG, "%s", r.out);
	cr_assert_geq(kv_num(r.out, "freed.lazy", -1), BIG, "%s", r.out);
	cr_assert_lt(kv_num(r.out, "calloc.memset_skipped", BIG), BIG,
		     "calloc over MADV_FREE'd memory must write it:\n%s", r.out);
	run_result_free(&r);
}

Test(purge, without_madv_free_falls_back_to_dontneed, .timeout = 60)
{
	run_result r;
	expect_ok("purge:free,decay_ms:0,sim_no_madv_free:true", "at_once", "nofree", &r, false);
	cr_assert_eq(kv_num(r.out, "freed.purged_free", -1), 0, "%s", r.out);
	cr_assert_geq(kv_num(r.out, "freed.purged_dontneed", -1), BIG, "%s", r.out);
	cr_assert_eq(kv_num(r.out, "freed.lazy", -1), 0, "%s", r.out);
	run_result_free(&r);
}

/* purge:off: with the default decay, at once (decay_ms:0) and after a
 * decay period that has passed (decay_ms:100, the scenario waits 300 ms). */
Test(purge, off_keeps_memory_until_arena_purge, .timeout = 60)
{
	const char *confs[] = { "purge:off", "purge:off,decay_ms:0", "purge:off,decay_ms:100" };
	for (size_t i = 0; i < sizeof confs / sizeof confs[0]; i++) {
		run_result r;
		expect_ok(confs[i], "no_purge", "", &r, false);
		cr_assert_geq(kv_num(r.out, "later.dirty", -1), BIG, "%s:\n%s", confs[i], r.out);
		cr_assert_geq(kv_num(r.out, "purged.purged_dontneed", -1), BIG, "%s:\n%s", confs[i], r.out);
		run_result_free(&r);
	}
}

/* purge_batch:true: a chunk's free runs between blocks in use go in one
 * process_madvise (os_purge_many), or one madvise each without it; the blocks in use keep
 * their contents either way (pages.c, batch). */
Test(purge, free_runs_purged_in_one_call, .timeout = 60)
{
	run_result r;
	expect_ok("decay_ms:-1,purge_batch:true", "batch", "", &r, false);
	if (kv_num(r.out, "batch.kernel", -1) == 1)
		cr_assert_geq(kv_num(r.out, "batch.runs", -1), 12, "%s", r.out);
	run_result_free(&r);
}

/* The default (purge_batch:false, and any kernel without the batch). */
Test(purge, without_process_madvise_one_madvise_a_run, .timeout = 60)
{
	run_result r;
	expect_ok("decay_ms:-1", "batch", "single", &r, false);
	cr_assert_eq(kv_num(r.out, "batch.runs", -1), 0, "%s", r.out);
	cr_assert_geq(kv_num(r.out, "batch.madvise", -1), 12, "%s", r.out);
	run_result_free(&r);
}

Test(purge, decay_never_keeps_memory_until_arena_purge, .timeout = 60)
{
	run_result r;
	expect_ok("decay_ms:-1", "no_purge", "", &r, false);
	cr_assert_geq(kv_num(r.out, "later.dirty", -1), BIG, "%s", r.out);
	cr_assert_geq(kv_num(r.out, "purged.purged_dontneed", -1), BIG, "%s", r.out);
	run_result_free(&r);
}

/* decay_ms:200 (huge_decay_ms:-1: the huge blocks' chunks too, which
 * are purged at free by default): kept right after the free; 500 ms later one huge
 * malloc/free (decay runs on chunk allocation and free) purges it.
 * (dirty_cap:off: with the cap, this single-threaded program would purge
 * the 256 MiB at the free, as test_idle.c's single_threaded_stays_single
 * requires.) */
Test(purge, decay_purges_after_decay_ms, .timeout = 60)
{
	run_result r;
	expect_ok("decay_ms:200,huge_decay_ms:-1,dirty_cap:off", "decay", "", &r, false);
	cr_assert_geq(kv_num(r.out, "freed.dirty", -1), BIG, "%s", r.out);
	cr_assert_geq(kv_num(r.out, "decayed.purged_dontneed", -1), BIG - (4 << 20), "%s", r.out);
	run_result_free(&r);
}

/* background_thread:true: an idle program's memory goes back, whether it
 * freed a huge block or only large ones. */
Test(purge, background_thread_after_huge_free, .timeout = 60)
{
	run_result r;
	expect_ok("background_thread:true,decay_ms:100", "background", "huge", &r, false);
	cr_assert_leq(kv_num(r.out, "idle.dirty", -1), 16 << 20, "%s", r.out);
	run_result_free(&r);
}

Test(purge, background_thread_after_large_frees, .timeout = 60)
{
	run_result r;
	expect_ok("background_thread:true,decay_ms:100", "background", "large", &r, false);
	cr_assert_leq(kv_num(r.out, "idle.dirty", -1), 16 << 20, "%s", r.out);
	run_result_free(&r);
}

/* With the thread running (a huge block was freed), fine-grained purging of
 * page runs inside arena chunks in use happens while the program idles. */
Test(purge, background_thread_purges_page_runs, .timeout = 60)
{
	run_result r;
	expect_ok("background_thread:true,decay_ms:100,fine_purge:true", "background", "fine", &r, false);
	cr_assert_leq(kv_num(r.out, "idle.dirty", -1), 8 << 20, "%s", r.out);
	run_result_free(&r);
}

/* 1 GiB of small, large and huge blocks, 95% freed, malloc_trim(0): RSS is
 * what is still allocated, within 32 MiB. */
Test(purge, malloc_trim_returns_all_free_memory, .timeout = 60)
{
	run_result r;
	expect_ok("", "trim", "", &r, false);
	long long after = kv_num(r.out, "trim.rss_after", -1), base = kv_num(r.out, "trim.rss_base", -1),
		  live = kv_num(r.out, "trim.live_bytes", -1), arrays = kv_num(r.out, "trim.arrays", -1);
	cr_assert(after > 0 && base > 0 && live > 0 && arrays >= 0, "%s", r.out);
	cr_assert_leq(after, base + live + arrays + (32 << 20), "%s", r.out);
	cr_assert_geq(kv_num(r.out, "trim.rss_full", -1), 1LL << 30, "the 1 GiB was not resident:\n%s",
		      r.out);
	run_result_free(&r);
}

/* Fine-grained purging: arena chunks with every 8th 64 KiB block alive. */
Test(purge, fine_purge_true_purges_page_runs, .timeout = 60)
{
	run_result r;
	expect_ok("fine_purge:true,decay_ms:0", "fine", "purged", &r, false);
	cr_assert_leq(kv_num(r.out, "freed.dirty", -1), 2 << 20, "%s", r.out);
	run_result_free(&r);
}

Test(purge, fine_purge_with_madv_free_is_lazy_and_calloc_clears, .timeout = 60)
{
	run_result r;
	expect_ok("fine_purge:true,decay_ms:0,purge:free", "fine", "lazy", &r, false);
	cr_assert_geq(kv_num(r.out, "freed.lazy", -1), 48 << 20, "%s", r.out);
	cr_assert_eq(kv_num(r.out, "calloc.nonzero_blocks", -1), 0, "%s", r.out);
	run_result_free(&r);
}

Test(purge, fine_purge_false_keeps_page_runs, .timeout = 60)
{
	run_result r;
	expect_ok("fine_purge:false,decay_ms:0", "fine", "kept", &r, false);
	cr_assert_geq(kv_num(r.out, "freed.dirty", -1), 48 << 20, "%s", r.out);
	run_result_free(&r);
}

/* fine_purge:auto: chunks that hold no huge-page advice are purged in
 * parts: all of them without THP; with THP, a chunk that went dense (advised
 * huge pages) keeps its free pages while it stays over a quarter used, and
 * gives its advice back and is purged once it falls under (7 blocks in 8
 * freed).  Caught: a dense chunk purged in parts (kept_dense), a chunk back
 * under a quarter never purged (fine, THP).  (decay_ms:0: no background
 * thread, whose programs purge dense chunks not born huge too:
 * dense_chunks_not_born_huge_are_purged below.) */
Test(purge, fine_purge_auto_follows_thp, .timeout = 60)
{
	char sys[16];
	int thp = thp_sys_mode(sys, sizeof sys) == 0 && strcmp(sys, "never") != 0;
	run_result r;
	expect_ok("decay_ms:0", "fine", "purged", &r, false);
	run_result_free(&r);
	expect_ok("decay_ms:0", "fine", thp ? "kept_dense" : "purged", &r, false);
	run_result_free(&r);
	expect_ok("thp:never,decay_ms:0", "fine", "purged", &r, false);
	run_result_free(&r);
	expect_ok("sim_no_thp:true,decay_ms:0", "fine", "purged", &r, false);
	run_result_free(&r);
}

/* Free page runs of chunks that see no more frees are purged by the next
 * allocation in their arena once decay_ms has passed.  Caught: purging
 * only when pages of the same chunk are given back (56 MiB left dirty).
 * (dirty_cap:off: the scenario needs the 56 MiB still dirty after the
 * frees, which the dirty cap of a single-threaded program would purge at
 * once; test_idle.c tests the cap.) */
Test(purge, fine_purge_of_chunks_left_alone, .timeout = 60)
{
	run_result r;
	expect_ok("fine_purge:true,decay_ms:100,dirty_cap:off", "stale", "-", &r, false);
	run_result_free(&r);
}

/* ---- transparent huge pages -------------------------------------------------------------------------- */

static void need_thp(void)
{
	char sys[16];
	if (thp_sys_mode(sys, sizeof sys) != 0)
		cr_skip_test("no /sys/kernel/mm/transparent_hugepage/enabled: no THP here");
	if (!strcmp(sys, "never"))
		cr_skip_test("transparent huge pages are [never] on this machine");
}

/* The run-time decision (thp.c, docs/design.md "Deciding at run time"): a
 * probe at the first fresh huge block of malloc (none for calloc, none where
 * the kernel has no THP or says never, or under thp:always/never); its
 * finding, simulated both ways (sim_thp_probe), decides whether fresh chunks
 * get huge pages, and reused ones keep them.  Kernel modes are simulated
 * with sim_thp (libarena believes the mode; advice the real kernel ignores
 * only costs a call) and sim_no_thp (no sysfs knobs). */
Test(thp, decision_probes_fresh_memory, .timeout = 60)
{
	need_thp();
	run_result r;
	expect_ok("decay_ms:-1,dirty_cap:off", "decide", "real", &r, false);
	run_result_free(&r);
	expect_ok("decay_ms:-1,dirty_cap:off,sim_thp:always", "decide", "real", &r, false);
	run_result_free(&r);
	expect_ok("decay_ms:-1,dirty_cap:off,sim_thp:madvise", "decide", "real", &r, false);
	run_result_free(&r);
	expect_ok("decay_ms:-1,dirty_cap:off", "decide", "calloc", &r, false);
	run_result_free(&r);
}

Test(thp, decision_follows_the_probe, .timeout = 60)
{
	need_thp();
	run_result r;
	expect_ok("decay_ms:-1,dirty_cap:off,sim_thp_probe:cheap", "decide", "cheap", &r, false);
	run_result_free(&r);
	expect_ok("decay_ms:-1,dirty_cap:off,sim_thp_probe:costly", "decide", "costly", &r, false);
	cr_assert_eq(kv_num(r.out, "decide.reused_same", -1), 1, "the freed block's chunks were not reused:\n%s",
		     r.out);
	cr_assert_eq(kv_num(r.out, "decide.reused_advised", -1), 4, "%s", r.out);
	run_result_free(&r);
	expect_ok("decay_ms:-1,dirty_cap:off,sim_thp_probe:costly,sim_thp:always", "decide", "costly", &r, false);
	run_result_free(&r);
	expect_ok("decay_ms:-1,dirty_cap:off,sim_thp_probe:unformed", "decide", "unformed", &r, false);
	run_result_free(&r);
}

Test(thp, decision_off_without_thp_or_when_configured, .timeout = 60)
{
	run_result r;
	expect_ok("decay_ms:-1,dirty_cap:off,sim_thp:never", "decide", "off", &r, false);
	run_result_free(&r);
	expect_ok("decay_ms:-1,dirty_cap:off,sim_no_thp:true", "decide", "off", &r, false);
	run_result_free(&r);
	expect_ok("decay_ms:-1,dirty_cap:off,sim_thp_probe:costly,thp:never", "decide", "never", &r, false);
	run_result_free(&r);
	expect_ok("decay_ms:-1,dirty_cap:off,sim_thp_probe:costly,thp:always", "decide", "always", &r, false);
	run_result_free(&r);
}

Test(thp, default_advice, .timeout = 60)
{
	need_thp();
	run_result r;
	expect_ok("decay_ms:0", "thp", "default", &r, false);
	if (contains(r.out, "note: "))
		cr_log_warn("%s", strstr(r.out, "note: "));
	char decision[16];
	kv_str(r.out, "thp.decision", decision, sizeof decision);
	if (!strcmp(decision, "huge") || !strcmp(decision, "unprobed")) {
		cr_assert_geq(kv_num(r.out, "thp.huge_advised", -1), 4, "%s", r.out);
		cr_assert_eq(kv_num(r.out, "thp.partial_advised", -1), 1, "%s", r.out);
	}
	cr_assert_leq(kv_num(r.out, "thp.partial_anon_delta", 1LL << 40), 2 << 20, "%s", r.out);
	cr_assert_geq(kv_num(r.out, "thp.dense_advised", -1), 1, "%s", r.out);
	run_result_free(&r);
}

/* Decay purges the free pages of a dense chunk (3/4 used once, advised
 * huge, over a quarter used still) that turned dense after its pages were
 * touched: khugepaged makes few of them huge pages, and in bench/soak
 * they held 70 of the 75 MiB dirty at the median (docs/soak.md).  Chunks
 * born huge (a growing heap under thp:auto, every chunk under thp:always)
 * keep theirs, and so do all dense chunks without the background thread
 * (the dirty cap's programs).  decay_ms:10,tcache:false: every free
 * reaches its chunk, and the scenario looks 400 ms later (40 decay
 * periods), so the counts are exact.  Caught (1b5dcb7 .. d0642bb):
 * touched, 5.81 of 6 MiB left dirty; grown, none of 24 MiB purged. */
Test(thp, dense_chunks_not_born_huge_are_purged, .timeout = 60)
{
	need_thp();
	run_result r;
	expect_ok("decay_ms:10,tcache:false,background_thread:true", "dense", "touched", &r, false);
	cr_assert_eq(kv_num(r.out, "dense.dirty", -1), 0, "%s", r.out);
	run_result_free(&r);
	expect_ok("decay_ms:10,tcache:false,background_thread:true,sim_thp_probe:cheap", "dense",
		  "grown", &r, false);
	run_result_free(&r);
	/* no background thread: the dirty cap's rule, dense chunks keep theirs */
	expect_ok("decay_ms:10,tcache:false", "dense", "kept", &r, false);
	run_result_free(&r);
	expect_ok("decay_ms:10,tcache:false,background_thread:true,thp:always", "dense", "always", &r,
		  false);
	cr_assert_eq(kv_num(r.out, "dense.purged_dontneed", -1), 0, "%s", r.out);
	run_result_free(&r);
}

/* A growing heap's next chunks are advised huge before their first write
 * under thp:auto (docs/design.md, "A growing heap in huge pages") where
 * their huge pages cost no more than 4 KiB ones, and the statistics count
 * them; where they cost more, the first one is the last (its first write
 * timed: "A growing heap's own first writes"); with the real clock each is
 * born huge and timed or born small; none under thp:never, without THP,
 * or with fine purging. */
Test(thp, growing_heap_chunks_born_huge, .timeout = 60)
{
	need_thp();
	run_result r;
	expect_ok("sim_thp_probe:cheap", "grow", "born", &r, false);
	run_result_free(&r);
	expect_ok("sim_thp_probe:costly", "grow", "checked", &r, false);
	run_result_free(&r);
	expect_ok("", "grow", "timed", &r, false);
	run_result_free(&r);
	expect_ok("thp:never", "grow", "none", &r, false);
	run_result_free(&r);
	expect_ok("sim_no_thp:true", "grow", "none", &r, false);
	run_result_free(&r);
	expect_ok("fine_purge:true", "grow", "none", &r, false);
	run_result_free(&r);
}

/* A rule of the dirty cap's regret (pages taken back within decay_ms of
 * its purge): the scenario's mode `on` by default, "none" under thp:never,
 * without the cap and without THP.  decay_ms:5000: the memory must come
 * back within decay_ms of the purge, a few ms here, with room for a loaded
 * machine. */
static void expect_cap_rule(const char *scenario, const char *on)
{
	static const char *const off[] = { "decay_ms:5000,thp:never", "decay_ms:5000,dirty_cap:off",
					   "decay_ms:5000,sim_no_thp:true" };
	run_result r;
	/* where fresh huge pages cost no more than small ones (the rules of
	 * the cap's regret, not the heap's check of its first writes) */
	expect_ok("decay_ms:5000,sim_thp_probe:cheap", scenario, on, &r, false);
	run_result_free(&r);
	for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
		expect_ok(off[i], scenario, "none", &r, false);
		run_result_free(&r);
	}
}

/* A heap growing back into chunks the dirty cap purged a moment before
 * takes them advised huge at birth under thp:auto (thp.c,
 * thp_new_chunk_huge), and the statistics count them apart; not under
 * thp:never, without the cap, nor without THP (expect_cap_rule). */
Test(thp, heap_growing_back_after_the_cap_born_huge, .timeout = 60)
{
	need_thp();
	expect_cap_rule("regrow", "born");
}

/* Chunks whose free pages the dirty cap purged are collapsed into a huge
 * page again as the heap refills them, under thp:auto in a heap of 32 MiB
 * or more (thp.c, thp_refill_collapse), and the statistics count them; not
 * under thp:never, without the cap, nor without THP (expect_cap_rule). */
Test(thp, chunks_refilled_after_the_cap_collapse, .timeout = 60)
{
	need_thp();
	expect_cap_rule("refill", "collapse");
}

Test(thp, always_advises_partial_chunks, .timeout = 60)
{
	need_thp();
	run_result r;
	expect_ok("thp:always,decay_ms:0", "thp", "always", &r, false);
	cr_assert_eq(kv_num(r.out, "thp.partial_advised", -1), 2, "%s", r.out);
	run_result_free(&r);
}

Test(thp, never_advises_nothing, .timeout = 60)
{
	need_thp();
	run_result r;
	expect_ok("thp:never,decay_ms:0", "thp", "never", &r, false);
	cr_assert_eq(kv_num(r.out, "thp.advised_total", -1), 0, "%s", r.out);
	cr_assert_eq(kv_num(r.out, "thp.anon_end", -1), 0, "%s", r.out);
	run_result_free(&r);
}

/* Sparse arena chunks get no huge page, also when their chunks were part of
 * a huge block (advised MADV_HUGEPAGE) before. */
Test(thp, sparse_arena_chunks_get_no_huge_pages, .timeout = 60)
{
	need_thp();
	run_result r;
	expect_ok("", "sparse", "default", &r, false);
	cr_assert_leq(kv_num(r.out, "sparse.anon_after", 1LL << 40), kv_num(r.out, "sparse.anon_before", -1),
		      "%s", r.out);
	run_result_free(&r);
	expect_ok("thp:never", "sparse", "never", &r, false);
	cr_assert_eq(kv_num(r.out, "sparse.anon_after", -1), 0, "%s", r.out);
	run_result_free(&r);
}

/* Behaving as without THP works on any machine. */
Test(thp, sim_no_thp, .timeout = 60)
{
	run_result r;
	char mode[16];
	expect_ok("sim_no_thp:true,decay_ms:0", "thp", "none", &r, false);
	cr_assert_str_eq(kv_str(r.out, "thp.mode", mode, sizeof mode), "none", "%s", r.out);
	cr_assert_eq(kv_num(r.out, "thp.advised_total", -1), 0, "%s", r.out);
	run_result_free(&r);
}

/* ---- statistics ----------------------------------------------------------------------------------------- */

Test(stats, consistent_and_printed, .timeout = 60)
{
	run_result r;
	expect_ok("", "stats", "", &r, true);
	long long d = kv_num(r.out, "freed.dirty", -1), l = kv_num(r.out, "freed.lazy", -1),
		  z = kv_num(r.out, "freed.zero", -1);
	cr_assert(d >= 0 && l >= 0 && z >= 0 && d + l + z > 0, "%s", r.out);
	const char *words[] = { "dirty", "lazy", "zero", "purged", "dontneed", "memset skipped",
				"advised huge", "THP mode" };
	for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
		cr_assert(contains(r.err, words[i]), "malloc_stats() does not print \"%s\":\n%s", words[i],
			  r.err);
	run_result_free(&r);
}

/* ---- refills of fresh blocks -------------------------------------------------------------------- */

/* A list grown to refills of 64 blocks of 4 KiB, then 200 mallocs of fresh
 * blocks the program does not write: no malloc faults in more than a few
 * pages (linking all 64 at the refill faulted in 32-35 at once), and
 * consecutive mallocs are seldom neighbours (lowest first: every step). */
Test(refill, fresh_blocks_linked_a_page_at_a_time, .timeout = 60)
{
	const char *argv[] = { PROGS_DIR "/fresh_refill", "4096", NULL };
	const char *env[] = { "LD_PRELOAD=" ARENA_SO, "ARENA_CONF=thp:never", NULL };
	run_result r;
	cr_assert_eq(run_prog(argv, env, NULL, 60, &r), 0, "cannot run %s", argv[0]);
	run_describe(&r);
	cr_assert(run_exited0(&r), "%s\n%s%s", r.desc, r.out, r.err);
	long most = -1;
	int adjacent = -1;
	cr_assert_eq(sscanf(r.out, "max=%ld adjacent=%d", &most, &adjacent), 2, "%s", r.out);
	cr_assert_leq(most, 8, "one malloc faulted in %ld pages", most);
	cr_assert_leq(adjacent, 50, "%d of 199 steps to the next block", adjacent);
	run_result_free(&r);
}
