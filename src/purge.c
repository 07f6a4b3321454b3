/* Purging: giving free memory back to the kernel.
 *
 * What is purged: whole free chunks (2 MiB, 2 MiB-aligned), so a purge never
 * splits a huge page.  Arena chunks go back to the chunk layer when all their
 * pages are free (one empty chunk per arena is kept), and are purged there.
 * Free page runs inside arena chunks are purged only with fine-grained
 * purging (ARENA_CONF=fine_purge:true; by default only where there are no
 * huge pages) and by malloc_trim.
 *
 * When (decay): a dirty free chunk is purged decay_ms after it became dirty
 * (default 1000 ms; 0: at once; -1: never).  The curve, for memory freed at
 * t0 and not reused: resident until t0 + decay_ms, then purged within one
 * decay step: a step, not jemalloc's smooth curve, because every chunk is
 * judged by its own age.  Decay steps run in chunk allocation and free
 * (no thread by default) and purge every chunk that has expired; with
 * ARENA_CONF=background_thread:true a thread also runs them every
 * decay_ms / 4 (at least 10 ms, at most 1 s), so an idle program's memory
 * goes back too.  The thread is started by the first free that reaches a
 * slow path with no lock held (creating a thread allocates).
 *
 * How: ARENA_CONF=purge:dontneed (default; RSS drops at once and the memory
 * reads zero afterwards, which calloc uses), purge:free (MADV_FREE: cheaper
 * now, RSS drops only under memory pressure, contents unknown) or purge:off.
 * malloc_trim(0) and arena_purge() purge everything now with MADV_DONTNEED. */
#include "arena.h"
#include "internal.h"

#include <time.h>

static atomic_bool bg_started;

size_t purge_all(void)
{
	if (tc.state == TC_ACTIVE)
		for (unsigned c = 0; c < NCACHED; c++)
			tcache_flush_bin(&tc, c, 0);
	return arena_purge_all() + chunk_purge_all();
}

static void *background_main(void *arg)
{
	(void)arg;
	long ms = conf.decay_ms / 4;
	ms = ms < 10 ? 10 : ms > 1000 ? 1000 : ms;
	struct timespec tick = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };
	for (;;) {
		nanosleep(&tick, NULL);
		chunk_decay();
		arena_fine_decay_all();
	}
	return NULL;
}

/* Starts the background purging thread once, if configured: called from
 * paths that free memory, never during initialisation (creating a thread
 * allocates). */
void purge_background_start(void)
{
	if (!conf.background_thread || conf.decay_ms <= 0 || conf.purge == PURGE_OFF ||
	    atomic_load_explicit(&bg_started, memory_order_relaxed) ||
	    atomic_exchange(&bg_started, true))
		return;
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, background_main, NULL) != 0)
		atomic_store(&bg_started, false);
	pthread_attr_destroy(&attr);
}

/* The child of fork has no background thread: the next free starts one. */
void purge_after_fork_child(void)
{
	atomic_store(&bg_started, false);
}
