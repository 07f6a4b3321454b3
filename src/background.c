/* Purging driven from above the arenas: everything now (malloc_trim,
 * arena_purge) and the background thread.  What is purged and when is
 * purge.c's policy; this file runs it outside the allocation paths.
 *
 * The background thread.  Decay runs inside allocator calls, so a program
 * that frees a burst and then waits would keep every page it freed.  The
 * thread runs a decay step and a sweep of every arena, learns when the
 * next dirty memory is due, and sleeps until then (a futex wait); with
 * nothing dirty it sleeps without a timeout until the first layer that
 * makes memory dirty wakes it (purge_note_dirty).  An idle program with
 * nothing to give back sees no wake-up.
 *
 * When: background_thread:auto (the default) starts it once two threads
 * have allocated; a single-threaded program stays so (the kernel refuses
 * unshare(CLONE_NEWUSER) to a threaded process, glibc locks stdio once a
 * second thread exists) and bounds its dirty memory at free (the dirty
 * cap).  true: at the first malloc slow path; false: never.
 *
 * Safety.  The thread is created from malloc's slow path (api.c) with no
 * lock of ours held, after the allocation: never from calloc, with which
 * pthread_create allocates a thread's DTV.  It blocks every signal and
 * holds an arena's or the chunk layer's lock only while it purges; fork's
 * handlers take those locks first.  exit does not wait for it.  A fork
 * child starts its own, lazily.
 *
 * The last thread.  A process whose threads all end by pthread_exit ends
 * when glibc counts its last thread gone, and libarena's thread would keep
 * it alive for ever.  So when the last live thread cache goes (the caches'
 * exit hook), the thread is told to quit and joined there, in the exiting
 * thread's key destructor, which stays the last thread.  A thread that
 * allocates after that starts a new one. */
#include "internal.h"

#include <signal.h>

static atomic_bool bg_started;  /* created, or being created */
static atomic_bool bg_running;  /* created */
/* The futex word the thread sleeps on: a poke bumps it. */
static atomic_uint bg_seq;
/* True while the thread looks for work or sleeps with none: memory made
 * dirty then wakes it (bg_poke); false while it sleeps with a timeout. */
static atomic_bool bg_idle;
static atomic_ulong bg_wakeups, bg_passes;
/* 1: the thread returns (bg_stop); its naps wait on it. */
static atomic_uint bg_quit;
static pthread_t bg_thread;

/* Everything free purged now with MADV_DONTNEED, this thread's cache
 * flushed first; the bytes purged. */
size_t background_purge_now(void)
{
	/* the flush may set off the dirty cap: that counts too */
	uint64_t capped = atomic_load_explicit(&arena_cap_purged, memory_order_relaxed);
	if (tc.state == TC_ACTIVE)
		for (unsigned c = 0; c < NCACHED; c++)
			tcache_flush_bin(&tc, c, 0);
	size_t purged = remote_purge_all() + chunk_purge_all();
	return purged + (atomic_load_explicit(&arena_cap_purged, memory_order_relaxed) - capped);
}

/* purge_note_dirty's hook: one load while the thread is busy or waits with
 * a timeout, a futex wake once when it sleeps with nothing to do.
 * Sequentially consistent with the thread's store of bg_idle: either it
 * sees this memory or this sees bg_idle (no lost wake-up). */
static void bg_poke(void)
{
	if (!atomic_load(&bg_idle) || !atomic_exchange(&bg_idle, false))
		return;
	atomic_fetch_add(&bg_seq, 1);
	os_wake(&bg_seq);
}

/* A look at every arena's stacks (remote_drain_stale) and empty slabs, a
 * decay step and a sweep: when the next dirty memory is due (a period
 * from now while transfer batches wait). */
static uint64_t bg_pass(void)
{
	atomic_fetch_add_explicit(&bg_passes, 1, memory_order_relaxed);
	uint64_t next = UINT64_MAX;
	for (unsigned i = 0, nused = arena_count(); i < nused; i++) {
		arena_lock(&arenas[i]);
		if (remote_drain_stale(&arenas[i]))
			next = os_now_ms() + purge_period_ms();
		slab_sweep(&arenas[i], os_now_ms());
		arena_unlock(&arenas[i]);
	}
	uint64_t chunks_due = chunk_decay(), pages_due = arena_sweep_all();
	next = chunks_due < next ? chunks_due : next;
	return pages_due < next ? pages_due : next;
}

/* The coarse clock lags by up to a tick (4 ms at HZ=250): a wait this much
 * longer finds the memory due. */
#define WAIT_SLACK_MS 10

/* Sleeps ms milliseconds, pokes or not (only bg_stop wakes bg_quit). */
static void bg_nap(uint64_t ms)
{
	os_wait(&bg_quit, 0, ms);
	atomic_fetch_add_explicit(&bg_wakeups, 1, memory_order_relaxed);
}

static bool quitting(void)
{
	return atomic_load(&bg_quit) != 0;
}

/* Passes are at least a sweep period (decay_ms / 4) apart: a program that
 * frees all the time would otherwise poke the thread after every pass,
 * and each pass takes every arena's lock. */
static void *background_main(void *arg)
{
	(void)arg;
	uint64_t last = 0;
	/* bg_stop sets bg_quit, then bumps bg_seq: each wait either sees the new
	 * bg_seq or is woken, and the loop's test sees bg_quit. */
	while (!quitting()) {
		uint64_t now = os_now_ms(), gap = purge_period_ms();
		if (last && now < last + gap)
			bg_nap(last + gap - now);
		unsigned seq = atomic_load(&bg_seq);
		if (quitting())
			break;
		atomic_store(&bg_idle, true);
		uint64_t next = bg_pass();
		last = os_now_ms();
		if (next == UINT64_MAX) {
			os_wait(&bg_seq, seq, UINT64_MAX); /* at once if poked since */
		} else {
			/* pokes during the pass are answered by this wait's end */
			atomic_store(&bg_idle, false);
			seq = atomic_load(&bg_seq);
			if (quitting())
				break;
			os_wait(&bg_seq, seq, (next > last ? next - last : 0) + WAIT_SLACK_MS);
		}
		atomic_fetch_add_explicit(&bg_wakeups, 1, memory_order_relaxed);
	}
	return NULL;
}

/* The caches' exit hook: with no live cache left, the thread quits and is
 * joined here, in the exiting thread's key destructor, with no lock of
 * libarena's held; the join waits for at most the current pass. */
static void bg_stop(unsigned nlive_left)
{
	if (nlive_left != 0 || !atomic_load(&bg_running) ||
	    pthread_equal(pthread_self(), bg_thread) || !atomic_exchange(&bg_running, false))
		return;
	atomic_store(&bg_quit, 1);
	os_wake(&bg_quit);
	atomic_fetch_add(&bg_seq, 1);
	os_wake(&bg_seq);
	int cancel_was;
	/* pthread_join is a cancellation point: this may be a cancelled thread
	 * unwinding */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_was);
	pthread_join(bg_thread, NULL);
	pthread_setcancelstate(cancel_was, NULL);
	purge_set_dirty_hook(NULL);
	purge_set_background(false); /* the dirty cap applies again */
	atomic_store(&bg_idle, false);
	atomic_store(&bg_started, false); /* a thread that allocates starts another */
}

/* Whether the thread should run now. */
static bool wanted(void)
{
	if (cfg->background_thread == TRI_OFF || !purge_decay_on() || cfg->decay_ms == 0)
		return false;
	return cfg->background_thread == TRI_ON || tcache_nlive() >= 2;
}

/* Starts the background thread once, if wanted: from malloc's slow path,
 * no lock held (creating a thread allocates); one load once it runs. */
void background_start(void)
{
	if (atomic_load_explicit(&bg_started, memory_order_relaxed) || !wanted() ||
	    atomic_exchange(&bg_started, true))
		return;
	purge_set_dirty_hook(bg_poke);
	tcache_set_exit_hook(bg_stop);
	atomic_store(&bg_quit, 0);
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	bool prof_was = prof_pause(); /* its stack and TLS are libarena's */
	bool ok = pthread_create(&bg_thread, NULL, background_main, NULL) == 0;
	prof_resume(prof_was);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!ok) {
		purge_set_dirty_hook(NULL);
		atomic_store(&bg_started, false);
		return;
	}
	pthread_setname_np(bg_thread, "arena-bg");
	atomic_store(&bg_running, true);
	purge_set_background(true); /* the dirty cap is the thread's job now */
}

/* A fork child has no background thread: the cap applies again, and the
 * thread starts again on the same rules. */
void background_after_fork_child(void)
{
	purge_set_dirty_hook(NULL);
	purge_set_background(false);
	atomic_store(&bg_idle, false);
	atomic_store(&bg_quit, 0);
	atomic_store(&bg_running, false); /* the parent's: never joined here */
	atomic_store(&bg_started, false);
}

bg_stats_t background_stats(void)
{
	return (bg_stats_t){
		.running = atomic_load(&bg_running),
		.wakeups = atomic_load_explicit(&bg_wakeups, memory_order_relaxed),
		.passes = atomic_load_explicit(&bg_passes, memory_order_relaxed),
	};
}
