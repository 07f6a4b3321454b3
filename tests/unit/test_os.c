/*
 * os.c, the real OS boundary (this suite alone links src/os.c instead of
 * fake_os.c): reservations, commit, purges and what memory reads after
 * them, page moves, the environment, the clock, THP detection.
 */
#include "unit.h"

#include <stdio.h>
#include <time.h>

static void *reserve_commit(size_t size)
{
	char *p = os_reserve(size, CHUNK_SIZE);
	cr_assert(p);
	cr_assert_eq((uintptr_t)p % CHUNK_SIZE, 0);
	cr_assert(os_commit(p, size));
	return p;
}

Test(os, reserve_is_aligned_and_commit_makes_it_writable)
{
	for (int i = 0; i < 4; i++) {
		char *p = os_reserve(64 * MiB, CHUNK_SIZE);
		cr_assert(p && (uintptr_t)p % CHUNK_SIZE == 0, "%p", (void *)p);
		cr_assert(os_is_mapped(p, CHUNK_SIZE));
		cr_assert(os_commit(p, CHUNK_SIZE));
		p[0] = 1;
		p[CHUNK_SIZE - 1] = 2;
		os_unmap(p, 64 * MiB);
		cr_assert_not(os_is_mapped(p, CHUNK_SIZE), "unmapped");
	}
	cr_assert_geq(atomic_load(&os_count.mmap), 4);
	cr_assert_geq(atomic_load(&os_count.mprotect), 4);
}

Test(os, purge_dontneed_reads_zero)
{
	char *p = reserve_commit(CHUNK_SIZE);
	memset(p, 0xab, CHUNK_SIZE);
	cr_assert_eq(os_purge(p, CHUNK_SIZE, PURGE_DONTNEED), MS_ZERO);
	for (size_t i = 0; i < CHUNK_SIZE; i += 4096)
		cr_assert_eq(p[i], 0, "byte %zu after MADV_DONTNEED", i);
	cr_assert_eq(atomic_load(&os_count.purged_dontneed), CHUNK_SIZE);
	memset(p, 0xcd, CHUNK_SIZE);
	cr_assert(os_purge_dontneed(p, CHUNK_SIZE));
	cr_assert_eq(p[12345], 0);
}

/* Eight runs of 4 pages, every other 4 pages: purged by os_purge_many in
 * one process_madvise (where the kernel has it) or one madvise each; the
 * pages between keep their bytes. */
static void purge_many_runs(char *p, bool batch)
{
	enum { RUNS = 8, RUN = 4 * 4096 };
	struct iovec r[RUNS];
	uint8_t state[RUNS];
	memset(p, 0xab, 2 * RUNS * RUN);
	for (int i = 0; i < RUNS; i++)
		r[i] = (struct iovec){ p + 2 * i * RUN, RUN };
	os_has_batch_purge = batch;
	unsigned long calls = atomic_load(&os_count.madvise);
	unsigned long batches = atomic_load(&os_count.process_madvise);
	os_purge_many(r, RUNS, PURGE_DONTNEED, state);
	for (int i = 0; i < RUNS; i++) {
		cr_assert_eq(state[i], MS_ZERO, "run %d", i);
		for (size_t o = 0; o < RUN; o += 1024) {
			cr_assert_eq(p[2 * i * RUN + o], 0, "run %d, byte %zu", i, o);
			cr_assert_eq((uint8_t)p[(2 * i + 1) * RUN + o], 0xab, "between runs %d and %d", i, i + 1);
		}
	}
	calls = atomic_load(&os_count.madvise) - calls;
	batches = atomic_load(&os_count.process_madvise) - batches;
	if (batch && os_has_batch_purge) /* the kernel took it (Linux 6.15) */
		cr_assert(batches == 1 && calls == 0, "%lu process_madvise, %lu madvise", batches, calls);
	else
		cr_assert_eq(calls, RUNS, "without the batch: %lu madvise for %d runs", calls, RUNS);
}

Test(os, purge_many_batches_or_falls_back)
{
	char *p = reserve_commit(CHUNK_SIZE);
	purge_many_runs(p, true);
	purge_many_runs(p, false);
	os_has_batch_purge = true;
}

Test(os, purge_free_is_lazy_or_falls_back)
{
	char *p = reserve_commit(CHUNK_SIZE);
	memset(p, 0xab, CHUNK_SIZE);
	uint8_t s = os_purge(p, CHUNK_SIZE, PURGE_FREE);
	cr_assert(s == MS_LAZY || (s == MS_ZERO && !os_has_madv_free),
		  "MADV_FREE: state %u, madv_free %d", s, os_has_madv_free);
	os_has_madv_free = false; /* as sim_no_madv_free */
	memset(p, 0xab, CHUNK_SIZE);
	cr_assert_eq(os_purge(p, CHUNK_SIZE, PURGE_FREE), MS_ZERO);
	cr_assert_eq(p[100], 0);
}

Test(os, purge_of_unmapped_memory_fails_dirty)
{
	char *p = reserve_commit(CHUNK_SIZE);
	os_unmap(p, CHUNK_SIZE);
	cr_assert_eq(os_purge(p, CHUNK_SIZE, PURGE_DONTNEED), MS_DIRTY);
}

Test(os, move_pages_leaves_the_source_zero)
{
	os_init((os_sim_t){ 0 });
	if (!os_has_dontunmap)
		cr_skip_test("no MREMAP_DONTUNMAP on this kernel");
	char *p = reserve_commit(2 * CHUNK_SIZE);
	memset(p, 0x5a, CHUNK_SIZE);
	cr_assert(os_move_pages(p, p + CHUNK_SIZE, CHUNK_SIZE));
	cr_assert_eq(p[CHUNK_SIZE + 777], 0x5a);
	cr_assert_eq(p[777], 0, "the source reads zero");
	cr_assert_not(os_move_pages(p + 1, p + CHUNK_SIZE, CHUNK_SIZE), "unaligned: refused");
}

Test(os, meta_mappings_are_zero_and_aligned)
{
	uint64_t *m = os_map_meta_aligned(3 * CHUNK_SIZE, CHUNK_SIZE);
	cr_assert(m && (uintptr_t)m % CHUNK_SIZE == 0);
	cr_assert_eq(m[0] | m[3 * CHUNK_SIZE / 8 - 1], 0);
	m[5] = 1;
	os_unmap(m, 3 * CHUNK_SIZE);
}

Test(os, getenv_copies_and_cuts)
{
	char v[8];
	unsetenv("ARENA_CONF");
	cr_assert_not(os_getenv("ARENA_CONF", v, sizeof(v)));
	setenv("ARENA_CONF", "narenas:4", 1);
	cr_assert(os_getenv("ARENA_CONF", v, sizeof(v)));
	cr_assert_str_eq(v, "narenas", "cut to size - 1 bytes");
	setenv("ARENA_CONF", "", 1);
	cr_assert(os_getenv("ARENA_CONF", v, sizeof(v)));
	cr_assert_str_empty(v);
}

static uint64_t coarse_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

Test(os, clock_is_monotonic_milliseconds)
{
	for (int i = 0; i < 1000; i++) {
		uint64_t t1 = coarse_ms(), o = os_now_ms(), t2 = coarse_ms();
		cr_assert(t1 <= o && o <= t2, "os_now_ms %" PRIu64 " outside [%" PRIu64 ", %" PRIu64 "]",
			  o, t1, t2);
	}
	uint64_t a = os_now_ms();
	struct timespec ts = { 0, 60 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	uint64_t b = os_now_ms();
	cr_assert(b >= a + 40 && b <= a + 5000, "60 ms asleep: %" PRIu64 " ms", b - a);
}

/* MemTotal + SwapTotal of /proc/meminfo, bytes (0: not readable). */
static size_t meminfo_total(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	if (!f)
		return 0;
	char line[256];
	unsigned long long kb, total = 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "MemTotal: %llu kB", &kb) == 1 || sscanf(line, "SwapTotal: %llu kB", &kb) == 1)
			total += kb;
	fclose(f);
	return (size_t)total << 10;
}

/* The limit of a single request: RAM + swap as /proc/meminfo gives them
 * (read here with stdio, in os.c with a parser of its own), looked at only
 * above 1 GiB. */
Test(os, block_limit_is_ram_and_swap)
{
	cr_assert(os_block_fits(1));
	cr_assert(os_block_fits((size_t)1 << 30), "1 GiB is tried without looking");
	cr_assert_not(os_block_fits(HUGE_MAX + 1));
	cr_assert_not(os_block_fits(SIZE_MAX));
	size_t total = meminfo_total();
	if (total == 0 || total >= HUGE_MAX)
		cr_skip_test("/proc/meminfo unreadable here, or RAM + swap >= 2^46");
	cr_assert(os_block_fits(total / 2), "half of RAM + swap (%zu bytes)", total);
	cr_assert(os_block_fits(total), "RAM + swap");
	cr_assert_not(os_block_fits(total + 4096), "RAM + swap and a page");
}

Test(os, thp_mode_read_from_sysfs)
{
	char buf[128] = "";
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	bool has = f && fgets(buf, sizeof(buf), f);
	if (f)
		fclose(f);
	os_init((os_sim_t){ 0 });
	if (!has)
		cr_assert_eq(os_thp, THP_SYS_NONE);
	else if (strstr(buf, "[always]"))
		cr_assert_eq(os_thp, THP_SYS_ALWAYS);
	else if (strstr(buf, "[madvise]"))
		cr_assert_eq(os_thp, THP_SYS_MADVISE);
	else
		cr_assert_eq(os_thp, THP_SYS_NEVER);
	cr_assert_geq(os_ncpus(), 1);
	os_init((os_sim_t){ .no_thp = true, .no_madv_free = true, .no_dontunmap = true });
	cr_assert_eq(os_thp, THP_SYS_NONE, "sim_no_thp");
	cr_assert_not(os_has_madv_free, "sim_no_madv_free");
	cr_assert_not(os_has_dontunmap, "sim_no_dontunmap");
}
