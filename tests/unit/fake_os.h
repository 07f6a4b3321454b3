/*
 * A fake OS boundary for the unit tests: defines every os_* function and
 * variable that src/internal.h declares, and is linked instead of src/os.c.
 *
 * Address space is real where the layers above write to it (reservations,
 * commits, the allocator's own tables: real mmap/mprotect), so that chunk.c
 * runs unchanged; everything else is recorded and answered by switches:
 *
 *   fake.now_ms          the clock os_now_ms() reads (set it, nothing ticks)
 *   fake.cpu_ns          the thread's CPU time os_thread_cpu_ns() reads
 *   fake.env             ARENA_CONF as os_getenv() sees it (NULL: unset)
 *   fake.reserve_max     os_reserve() refuses more bytes than this (0: no limit)
 *   fake.reserve_fail    os_reserve() refuses everything
 *   fake.commit_fail     os_commit() refuses (no mprotect)
 *   fake.meta_fail       os_map_meta*() refuse
 *   fake.purge_fail      os_purge()/os_purge_dontneed() fail: memory stays dirty
 *   fake.advise_fail     os_advise() fails
 *   fake.move_fail       os_move_pages() refuses (the mremap that fails)
 *   fake.move_fail_hole  ... having unmapped the destination first, as
 *                        mremap may
 *   fake.probe           what os_fault_probe() measures (where THP is there)
 *   fake.ncpus           what os_ncpus() answers (0: 2)
 *
 * os_purge() never touches memory (the page-map tests pass headers that are
 * not in any chunk): it logs and answers MS_LAZY for PURGE_FREE while
 * os_has_madv_free, MS_ZERO otherwise.  os_thp is THP_SYS_NONE (no THP) until
 * a test sets it.  Each Criterion test runs in a process of its own, so the
 * fake starts from this state in every test.
 */
#ifndef ARENA_FAKE_OS_H
#define ARENA_FAKE_OS_H

#include "internal.h"

#define FAKE_LOG 512

struct fake_call {
	char *addr;
	size_t size;
	uint8_t kind; /* purge: enum purge_kind; advise: enum thp_advice */
};

struct fake_os {
	uint64_t now_ms, cpu_ns;
	const char *env;
	size_t reserve_max;
	bool reserve_fail, commit_fail, meta_fail, purge_fail, advise_fail, move_fail;
	bool move_fail_hole;
	/* Called by os_purge and os_purge_dontneed before they answer. */
	void (*on_purge)(void *addr, size_t size);
	os_fault_cost_t probe;
	unsigned ncpus;

	/* What was asked (calls past FAKE_LOG are counted, not kept). */
	unsigned nreserve, ncommit, npurge, nadvise, nmeta_huge, nmove, npopulate, nprobe;
	unsigned ncollapse; /* os_collapse calls */
	unsigned nunguard;  /* os_unguard calls */
	unsigned nsplit;    /* os_split_huge calls, the last one's page: */
	char *split_at;
	size_t reserve_size[FAKE_LOG]; /* every os_reserve, refused ones too */
	struct fake_call commit[FAKE_LOG];
	struct fake_call purge[FAKE_LOG]; /* os_purge and os_purge_dontneed */
	struct fake_call advise[FAKE_LOG];
	struct fake_call move[FAKE_LOG];  /* addr: src, size; dst in move_dst */
	char *move_dst[FAKE_LOG];
};

extern struct fake_os fake;

/* Forgets the calls logged so far (switches and clock stay). */
void fake_clear_log(void);

#endif /* ARENA_FAKE_OS_H */
