/* The purging policy: when free memory goes back to the kernel, and with
 * which advice.  Decisions only: the chunk layer (whole free chunks) and
 * the arenas (free page runs inside arena chunks) ask these functions and
 * do the purging themselves; background.c drives it from above (the
 * background thread, malloc_trim).
 *
 * What is purged: whole free chunks (2 MiB, 2 MiB-aligned), so a purge never
 * splits a huge page.  Arena chunks go back to the chunk layer when all their
 * pages are free (one empty chunk per arena is kept), and are purged there.
 * Free page runs inside arena chunks are purged only with fine-grained
 * purging (ARENA_CONF=fine_purge:true; by default only where there are no
 * huge pages to split: no THP, or a chunk without huge-page advice) and by
 * malloc_trim.
 *
 * When (decay): a dirty free chunk is purged decay_ms after it became dirty
 * (default 1000 ms; 0: at once, before it is visible as free; -1: never).
 * The curve, for memory freed at t0 and not reused: resident until t0 +
 * decay_ms, then purged within one decay step: a step, not jemalloc's
 * smooth curve, because every chunk is judged by its own age.  The free
 * pages of an arena chunk are judged by the age of the oldest of them.
 * Decay steps run in chunk allocation and free, in page frees of the
 * same chunk, and in each arena's sweep of all its chunks (at most every
 * decay_ms / 4, at least 10 ms apart) from its allocation and free paths;
 * the background thread (background.c) runs them at the same period.
 *
 * How: ARENA_CONF=purge:dontneed (default; RSS drops at once and the memory
 * reads zero afterwards, which calloc uses), purge:free (MADV_FREE: cheaper
 * now, RSS drops only under memory pressure, contents unknown) or purge:off.
 * malloc_trim(0) and arena_purge() purge everything now with MADV_DONTNEED. */
#include "internal.h"

/* Whether decay purges anything at all. */
bool purge_decay_on(void)
{
	return cfg->decay_ms >= 0 && cfg->purge != PURGE_OFF;
}

/* Whether memory dirty since dirty_ms is due at now. */
bool purge_expired(uint64_t dirty_ms, uint64_t now)
{
	return purge_decay_on() && now - dirty_ms >= (uint64_t)cfg->decay_ms;
}

/* The advice decay purges with (PURGE_DONTNEED or PURGE_FREE). */
uint8_t purge_advice(void)
{
	return cfg->purge;
}

/* decay_ms:0: chunks are purged as they are freed. */
bool purge_at_free(void)
{
	return cfg->decay_ms == 0 && cfg->purge != PURGE_OFF;
}

/* Fine-grained purging everywhere: ARENA_CONF=fine_purge:true, or by
 * default where there are no huge pages to split. */
bool purge_fine_on(void)
{
	if (cfg->fine_purge != TRI_AUTO)
		return cfg->fine_purge == TRI_ON;
	return cfg->thp == THP_NEVER || os_thp == THP_SYS_NONE || os_thp == THP_SYS_NEVER;
}

/* Whether the free page runs of c may be purged: fine_purge:true, or
 * (auto) where c holds no huge-page advice: no THP at all, or a chunk that
 * is sparse (never dense, or dense once and back under thp.c's
 * THP_SPARSE_PAGES). */
bool purge_fine_chunk(const arena_chunk_t *c)
{
	if (cfg->fine_purge != TRI_AUTO)
		return cfg->fine_purge == TRI_ON;
	return purge_fine_on() || !c->advised_huge;
}

/* Whether chunks' free pages are ever purged by decay (sweeps run). */
bool purge_sweeps(void)
{
	return purge_decay_on() && cfg->fine_purge != TRI_OFF;
}

/* The period of sweeps and background decay steps: decay_ms / 4, at least
 * 10 ms (at most 1 s for the background thread's sleep, background.c). */
uint64_t purge_period_ms(void)
{
	uint64_t every = cfg->decay_ms > 0 ? (uint64_t)cfg->decay_ms / 4 : 0;
	return every < 10 ? 10 : every;
}

/* An arena's sweep of all its chunks (arena.c): a chunk that sees no more
 * frees would keep its dirty pages for ever, and with mixed lifetimes many
 * do.  bench/soak -d 600 -p 60, side by side: the dirty pages of sparse
 * chunks, median of each minute, 99-143 MiB without the sweep, 43-66 MiB
 * with it.  Whether one is due at now; if so, *next_ms is moved on. */
bool purge_sweep_due(uint64_t *next_ms, uint64_t now)
{
	if (!purge_sweeps() || now < *next_ms)
		return false;
	*next_ms = now + purge_period_ms();
	return true;
}
