/* The huge-page advice policy: which memory is advised MADV_HUGEPAGE or
 * MADV_NOHUGEPAGE, and when that changes.  Decisions only: the chunk layer
 * (descriptor tables), the arenas (arena chunks) and the huge blocks ask
 * these functions and give the advice themselves (chunk_advise).
 *
 * ARENA_CONF=thp:auto (default): huge blocks' whole chunks and dense arena
 * chunks are advised huge, everything else NOHUGE (so that THP `always`
 * gives no huge page to a sparse chunk either); thp:always advises every
 * chunk huge; thp:never advises every chunk NOHUGE. */
#include "internal.h"

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

/* Whether a new arena chunk starts advised huge.  Sparse until proven
 * dense (thp:auto), so that an arena holding a few blocks does not keep
 * 2 MiB resident. */
bool thp_new_chunk_huge(void)
{
	return cfg->thp == THP_ALWAYS;
}

/* Whether c, whose pages in use just grew, turns dense now.  A dense chunk
 * is advised huge (thp_dense_advised) and khugepaged may then collapse it.
 * Not where fine purging is on everywhere: nothing would keep its huge
 * page whole. */
bool thp_turns_dense(const arena_chunk_t *c, uint64_t now)
{
	return !c->advised_huge && c->nfree <= CHUNK_USABLE_PAGES - THP_DENSE_PAGES &&
	       !purge_fine_on() && advice_may_change(c, now);
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
	       c->nfree >= CHUNK_USABLE_PAGES - THP_SPARSE_PAGES;
}

/* When c, sparse by its pages in use, may take back its advice. */
uint64_t thp_sparse_at(const arena_chunk_t *c)
{
	uint64_t wait = cfg->decay_ms > ADVICE_MIN_MS ? (uint64_t)cfg->decay_ms : ADVICE_MIN_MS;
	return c->advice_ms + wait;
}

/* The advice for one chunk of a huge block: its whole chunks get huge
 * pages (thp:auto, thp:always); a last chunk it only partly covers gets
 * none, unless thp:always: a huge page there would be resident for a few
 * bytes of the block, the seed thread's "2.1 MiB in 4 MiB" bloat. */
uint8_t thp_huge_block_advice(bool whole_chunk)
{
	if (cfg->thp == THP_NEVER)
		return ADV_NOHUGE;
	return whole_chunk || cfg->thp == THP_ALWAYS ? ADV_HUGE : ADV_NOHUGE;
}
