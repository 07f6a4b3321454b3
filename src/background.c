/* Purging driven from above the arenas: everything now (malloc_trim,
 * arena_purge) and the background thread.  What is purged, and when, is
 * purge.c's policy; this file only decides when to run it from outside
 * the allocation paths.
 *
 * The background thread.  Decay runs inside allocator calls, so a program
 * that frees a burst and then waits keeps every page it freed.  The thread
 * gives that memory back without a periodic tick: it runs a decay step of
 * the chunks and a sweep of every arena (purge.c says what is due), learns
 * from them when the next dirty memory will be due, and sleeps until then
 * (a futex wait with that timeout); when nothing is dirty it sleeps with
 * no timeout at all, and the first layer that makes memory dirty again
 * (purge_note_dirty, the hook registered here) wakes it.  So an idle
 * program with nothing to give back sees no wake-up, and one with memory
 * to give back sees one per decay period until it is gone.
 *
 * When: ARENA_CONF=background_thread:auto (default) starts it once the
 * program is threaded (two threads have allocated); a single-threaded
 * program stays single-threaded (the kernel refuses unshare(CLONE_NEWUSER)
 * to a threaded process, glibc locks stdio once a second thread exists,
 * programs count their threads) and bounds its dirty memory at free time
 * instead (purge.c, the dirty cap).  true: started at the first malloc that
 * needs the slow path, threaded or not; false: never (the cap applies).
 *
 * Safety.  The thread is created from malloc's slow path (api.c,
 * malloc_miss), with no lock of ours held, after the allocation is done:
 * never from calloc, which is what glibc's pthread_create allocates a new
 * thread's DTV with, so never inside pthread_create's own allocation; a
 * second thread's first malloc is such a miss (its cache is empty), so the
 * thread starts as soon as the program is threaded.  The thread blocks every
 * signal (a program's handlers run in its own threads), and holds an
 * arena's or the chunk layer's lock only while it purges, as any thread
 * does; fork's handlers take those locks first.  exit does not wait for it
 * (exit_group ends it wherever it is).  A child after fork has no thread:
 * it is started again, lazily, on the same rules.
 *
 * The last thread.  A process whose threads all end by pthread_exit (or by
 * returning from their start routine: main that calls pthread_exit, the
 * child of a fork taken in a worker thread) ends when glibc counts its
 * last thread gone, and libarena's thread is one of them: it kept such a
 * process alive for ever, its main thread a zombie (python3's
 * test_threading hung so).  So when the last live thread cache goes (the
 * thread caches' exit hook: no thread that has allocated is left), the
 * thread is told to quit and joined there, in the exiting thread's key
 * destructor, before glibc counts that thread out: the exiting thread
 * stays the last one, and glibc's exit(0) runs in it as without libarena.
 * A thread that allocates after that starts a new one, on the same rules. */
#include "internal.h"
#include "limit.h"

#include <signal.h>

static atomic_bool bg_started;  /* created, or being created                */
static atomic_bool bg_running;  /* created                                  */
/* The futex word the thread sleeps on: every wake-up by a poke bumps it. */
static atomic_uint bg_seq;
/* True while the thread looks for work or sleeps with none: memory made
 * dirty then must wake it (bg_poke); false while it sleeps with a timeout
 * (it looks again by then anyway). */
static atomic_bool bg_idle;
static atomic_ulong bg_wakeups, bg_passes;
/* Set to 1 to make the thread return (bg_stop); its naps wait on it. */
static atomic_uint bg_quit;
static pthread_t bg_thread;

/* Everything free, purged now with MADV_DONTNEED (this thread's cache
 * flushed first); the bytes purged. */
size_t bg_purge_now(void)
{
	/* The flush may set off the dirty cap: what it purges counts too. */
	uint64_t capped = atomic_load_explicit(&arena_cap_purged, memory_order_relaxed);
	if (tc.state == TC_ACTIVE)
		for (unsigned c = 0; c < NCACHED; c++)
			tcache_flush_bin(&tc, c, 0);
	size_t purged = arena_purge_all() + chunk_purge_all();
	return purged + (atomic_load_explicit(&arena_cap_purged, memory_order_relaxed) - capped);
}

/* purge_note_dirty's hook: memory just turned dirty.  One load when the
 * thread is busy or waits with a timeout; a futex wake, once, when it
 * sleeps with nothing to do.  The load is sequentially consistent: with
 * the thread's store of bg_idle before it looks at the memory, either the
 * thread sees this memory or this sees bg_idle (no lost wake-up). */
static void bg_poke(void)
{
	if (!atomic_load(&bg_idle) || !atomic_exchange(&bg_idle, false))
		return;
	atomic_fetch_add(&bg_seq, 1);
	pressure_wake(&bg_seq);
}

/* A look at every arena's stacks (arena_drain_stale) and empty slabs
 * (slab_sweep), a decay step and a sweep; when the next dirty memory is
 * due (a period from now while transfer batches wait). */
static uint64_t bg_pass(void)
{
	atomic_fetch_add_explicit(&bg_passes, 1, memory_order_relaxed);
	pressure_slow_path();
	uint64_t next = UINT64_MAX;
	for (unsigned i = 0, nused = arenas_used(); i < nused; i++) {
		arena_lock(&arenas[i]);
		if (arena_drain_stale(&arenas[i]))
			next = os_now_ms() + purge_period_ms();
		slab_sweep(&arenas[i], os_now_ms());
		arena_unlock(&arenas[i]);
	}
	uint64_t chunks_due = chunk_decay(), pages_due = arena_sweep_all();
	next = chunks_due < next ? chunks_due : next;
	return pages_due < next ? pages_due : next;
}

/* The coarse clock (os_now_ms) lags by up to a tick (4 ms at HZ=250): a
 * wait this much longer finds the memory due, not one tick short of it. */
#define WAIT_SLACK_MS 10

static bool quitting(void)
{
	return atomic_load(&bg_quit) != 0;
}

/* Sleeps ms milliseconds, pokes or not (a futex word only bg_stop wakes). */
static void bg_nap(uint64_t ms)
{
	/* a wake-up of the poll that was not bg_stop's (a poke's stale
	 * eventfd count, a pressure signal, purged there) naps on */
	for (uint64_t end = os_now_ms() + ms, now; !quitting() && (now = os_now_ms()) < end;)
		pressure_wait(&bg_quit, 0, end - now);
	atomic_fetch_add_explicit(&bg_wakeups, 1, memory_order_relaxed);
}

/* Passes are at least a sweep period (decay_ms / 4) apart: a program that
 * frees all the time would otherwise poke the thread awake after every
 * pass that found nothing due yet, and each pass takes every arena's lock
 * (bench/larson -t 2, a 50 ms run: 14 to 1,638 wake-ups before this). */
static void *background_main(void *arg)
{
	(void)arg;
	uint64_t last = 0;
	pressure_open();
	/* bg_stop sets bg_quit, then bumps bg_seq: each wait below either
	 * sees the new bg_seq or is woken, and the loop's test sees bg_quit. */
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
			pressure_wait(&bg_seq, seq, UINT64_MAX); /* at once if poked since */
		} else {
			/* Pokes during the pass are answered by this wait's end. */
			atomic_store(&bg_idle, false);
			seq = atomic_load(&bg_seq);
			if (quitting())
				break;
			pressure_wait(&bg_seq, seq, (next > last ? next - last : 0) + WAIT_SLACK_MS);
		}
		atomic_fetch_add_explicit(&bg_wakeups, 1, memory_order_relaxed);
	}
	return NULL;
}

/* The thread caches' exit hook: with no live cache left, the thread quits
 * and is joined here (see "The last thread" at the top).  Runs in the
 * exiting thread's key destructor, with no lock of libarena's held; the
 * join waits for at most the pass the thread is in. */
static void bg_stop(unsigned nlive_left)
{
	if (nlive_left != 0 || !atomic_load(&bg_running) ||
	    pthread_equal(pthread_self(), bg_thread) || !atomic_exchange(&bg_running, false))
		return;
	atomic_store(&bg_quit, 1);
	pressure_wake(&bg_quit);
	atomic_fetch_add(&bg_seq, 1);
	pressure_wake(&bg_seq);
	int cancel_was;
	/* pthread_join is a cancellation point: this may be a cancelled
	 * thread's unwinding */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_was);
	pthread_join(bg_thread, NULL);
	pthread_setcancelstate(cancel_was, NULL);
	pressure_close();
	purge_set_dirty_hook(NULL);
	purge_set_background(false); /* the dirty cap applies again */
	atomic_store(&bg_idle, false);
	atomic_store(&bg_started, false); /* a thread that allocates starts another */
}

/* Whether the thread should run now (see the top of the file). */
static bool wanted(void)
{
	if (cfg->background_thread == TRI_OFF || !purge_decay_on() || cfg->decay_ms == 0)
		return false;
	return cfg->background_thread == TRI_ON || tcache_nlive() >= 2;
}

/* Starts the background thread once, if wanted: called from malloc's slow
 * path, with no lock held (creating a thread allocates); one load when it
 * runs already. */
void bg_start(void)
{
	pressure_slow_path(); /* the memory limit's look (pressure.c) */
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
	/* joinable: bg_stop joins it */
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

/* The child of fork has no background thread: the cap applies again, and
 * the thread is started again on the same rules. */
void bg_after_fork_child(void)
{
	pressure_after_fork_child();
	purge_set_dirty_hook(NULL);
	purge_set_background(false);
	atomic_store(&bg_idle, false);
	atomic_store(&bg_quit, 0);
	atomic_store(&bg_running, false); /* the parent's thread: never joined here */
	atomic_store(&bg_started, false);
}

bg_stats_t bg_stats(void)
{
	return (bg_stats_t){
		.running = atomic_load(&bg_running),
		.wakeups = atomic_load_explicit(&bg_wakeups, memory_order_relaxed),
		.passes = atomic_load_explicit(&bg_passes, memory_order_relaxed),
	};
}
