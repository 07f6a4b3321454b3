/* Purging driven from above the arenas: everything now (malloc_trim,
 * arena_purge) and the background thread.  What is purged, and when, is
 * purge.c's policy; this file only decides when to run it from outside
 * the allocation paths.
 *
 * With ARENA_CONF=background_thread:true a thread runs a decay step of the
 * chunks and a sweep of every arena every decay_ms / 4 (at least 10 ms, at
 * most 1 s), so an idle program's memory goes back too.  The thread is
 * started by the first free that reaches a slow path with no lock held
 * (creating a thread allocates). */
#include "internal.h"

#include <time.h>

static atomic_bool bg_started;

/* Everything free, purged now with MADV_DONTNEED (this thread's cache
 * flushed first); the bytes purged. */
size_t bg_purge_now(void)
{
	if (tc.state == TC_ACTIVE)
		for (unsigned c = 0; c < NCACHED; c++)
			tcache_flush_bin(&tc, c, 0);
	return arena_purge_all() + chunk_purge_all();
}

static void *background_main(void *arg)
{
	(void)arg;
	uint64_t ms = purge_period_ms();
	ms = ms > 1000 ? 1000 : ms;
	struct timespec tick = { .tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L };
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
void bg_start(void)
{
	if (!cfg->background_thread || cfg->decay_ms <= 0 || cfg->purge == PURGE_OFF ||
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
void bg_after_fork_child(void)
{
	atomic_store(&bg_started, false);
}
