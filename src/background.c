/* Purging driven from above the arenas: everything now (malloc_trim,
 * arena_purge) and the background thread; what and when is purge.c's.
 *
 * Decay runs inside allocator calls, so a program that frees a burst and
 * waits would keep its pages.  The thread runs a decay step and a sweep,
 * sleeps until the next dirty memory is due (a futex wait), and with
 * nothing dirty until a layer makes memory dirty (purge_note_dirty): an
 * idle program with nothing to give back sees no wake-up.
 *
 * background_thread:auto starts it once two threads have allocated: a
 * single-threaded program stays so (unshare(CLONE_NEWUSER), glibc's stdio
 * locks) and bounds its dirty memory at free (the dirty cap).  It is
 * created from malloc's slow path with no lock held, never from calloc
 * (pthread_create allocates the DTV with it); it blocks every signal and
 * holds arena and chunk locks only while it purges.  When the last live
 * thread cache goes it is joined in the exiting thread's key destructor:
 * a process whose threads all call pthread_exit must still end. */
#include "internal.h"
#include "limit.h"

#include <signal.h>

static atomic_bool bg_started;  /* created, or being created */
static atomic_bool bg_running;  /* created */
/* The futex word the thread sleeps on: a poke bumps it. */
static atomic_uint bg_seq;
/* True while the thread looks for work or sleeps with none: dirty memory
 * then wakes it. */
static atomic_bool bg_idle;
/* A chunk-layer decay step is asked for now (purge_note_due): set by the
 * first asker, which wakes the thread; the step clears it. */
static atomic_bool bg_due;
static atomic_ulong bg_wakeups, bg_passes;
/* 1: the thread returns (bg_stop); its naps wait on it. */
static atomic_uint bg_quit;
static pthread_t bg_thread;

/* Everything free purged now, this thread's cache flushed first: bytes. */
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

/* purge_note_dirty's hook: a futex wake once when the thread sleeps with
 * nothing to do.  Sequentially consistent with its store of bg_idle: no
 * lost wake-up. */
static void bg_poke(void)
{
	if (!atomic_load(&bg_idle) || !atomic_exchange(&bg_idle, false))
		return;
	atomic_fetch_add(&bg_seq, 1);
	pressure_wake(&bg_seq);
}

/* purge_note_due's hook: chunks are due now that the thread did not wait
 * for (huge blocks' chunks past their working set).  One wake-up for all
 * that turn due before the thread's step: the freeing threads never purge
 * themselves. */
static void bg_poke_due(void)
{
	if (atomic_load(&bg_due) || atomic_exchange(&bg_due, true))
		return;
	atomic_fetch_add(&bg_seq, 1);
	pressure_wake(&bg_seq);
}

/* The chunk layer's step asked for by bg_poke_due, if it was. */
static void bg_due_step(void)
{
	if (atomic_load(&bg_due) && atomic_exchange(&bg_due, false))
		chunk_decay();
}

/* Stale stacks, empty slabs, a decay step and a sweep: when the next dirty
 * memory is due (a period on while transfer batches wait). */
static uint64_t bg_pass(void)
{
	atomic_fetch_add_explicit(&bg_passes, 1, memory_order_relaxed);
	atomic_store(&bg_due, false); /* chunk_decay below */
	pressure_slow_path();
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

/* the coarse clock lags up to a tick (4 ms at HZ=250) */
#define WAIT_SLACK_MS 10

static bool quitting(void)
{
	return atomic_load(&bg_quit) != 0;
}

/* Sleeps ms milliseconds, dirty pokes or not; a due poke (bg_poke_due)
 * runs the chunk layer's step, which takes no arena lock, and naps on, as
 * does a wake-up that was neither (a poke's stale eventfd count, a
 * pressure signal, purged there). */
static void bg_nap(uint64_t ms)
{
	for (uint64_t end = os_now_ms() + ms, now; !quitting() && (now = os_now_ms()) < end;) {
		unsigned seq = atomic_load(&bg_seq);
		if (atomic_load(&bg_due)) {
			bg_due_step();
			continue;
		}
		pressure_wait(&bg_seq, seq, end - now);
	}
	atomic_fetch_add_explicit(&bg_wakeups, 1, memory_order_relaxed);
}

/* Passes at least a sweep period apart: each takes every arena's lock. */
static void *background_main(void *arg)
{
	(void)arg;
	uint64_t last = 0;
	pressure_open();
	/* bg_stop sets bg_quit then bumps bg_seq: a wait sees it or is woken */
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
			/* pokes during the pass are answered by this wait's end */
			atomic_store(&bg_idle, false);
			seq = atomic_load(&bg_seq);
			if (quitting())
				break;
			/* a due poke after the pass's chunk step bumped the seq read
			 * above: bg_nap runs the step */
			if (atomic_load(&bg_due))
				continue;
			pressure_wait(&bg_seq, seq, (next > last ? next - last : 0) + WAIT_SLACK_MS);
		}
		atomic_fetch_add_explicit(&bg_wakeups, 1, memory_order_relaxed);
	}
	return NULL;
}

/* The caches' exit hook: with none left, the thread quits and is joined
 * here (at most the current pass), no lock of ours held. */
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
	/* a cancellation point: this may be a cancelled thread */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_was);
	pthread_join(bg_thread, NULL);
	pthread_setcancelstate(cancel_was, NULL);
	pressure_close();
	purge_set_dirty_hook(NULL, NULL);
	purge_set_background(false); /* the dirty cap applies again */
	atomic_store(&bg_idle, false);
	atomic_store(&bg_due, false);
	atomic_store(&bg_started, false); /* a thread that allocates starts another */
}

/* Whether the thread should run now. */
static bool wanted(void)
{
	if (cfg->background_thread == TRI_OFF || !purge_decay_on() || cfg->decay_ms == 0)
		return false;
	return cfg->background_thread == TRI_ON || tcache_nlive() >= 2;
}

/* Starts the thread once if wanted (malloc's slow path, no lock held). */
void background_start(void)
{
	pressure_slow_path(); /* the memory limit's look (pressure.c) */
	if (atomic_load_explicit(&bg_started, memory_order_relaxed) || !wanted() ||
	    atomic_exchange(&bg_started, true))
		return;
	purge_set_dirty_hook(bg_poke, bg_poke_due);
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
		purge_set_dirty_hook(NULL, NULL);
		atomic_store(&bg_started, false);
		return;
	}
	pthread_setname_np(bg_thread, "arena-bg");
	atomic_store(&bg_running, true);
	purge_set_background(true); /* the dirty cap is the thread's job now */
}

/* A fork child has no thread: the cap applies, and it starts again. */
void background_after_fork_child(void)
{
	pressure_after_fork_child();
	purge_set_dirty_hook(NULL, NULL);
	purge_set_background(false);
	atomic_store(&bg_idle, false);
	atomic_store(&bg_due, false);
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
