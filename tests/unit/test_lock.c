/*
 * arena_lock (arena.c): a thread that finds the lock taken spins on it,
 * then sleeps, and gets it only when its holder lets go; on one CPU it
 * sleeps at once.  Real threads on the fake OS's arenas.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "fake_os.h"
#include "unit.h"

static arena_t *start(unsigned ncpus)
{
	fake.ncpus = ncpus;
	fake.now_ms = 1000000;
	sizeclass_init();
	chunk_init();
	arena_init();
	return &arenas[0];
}

static atomic_bool held, waiting;

/* Takes the lock the main thread holds: what `held` read once it had it. */
static void *waiter(void *arg)
{
	arena_t *a = arg;
	atomic_store(&waiting, true);
	arena_lock(a);
	bool still_held = atomic_load(&held);
	arena_unlock(a);
	return (void *)(uintptr_t)still_held;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = ms * 1000000L };
	while (nanosleep(&ts, &ts) != 0)
		;
}

/* Holds a's lock 20 ms (longer than any spin) while another thread waits. */
static void waiter_gets_it_after_release(unsigned ncpus)
{
	arena_t *a = start(ncpus);
	arena_lock(a);
	atomic_store(&held, true);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, waiter, a), 0);
	while (!atomic_load(&waiting))
		sleep_ms(1);
	sleep_ms(20);
	atomic_store(&held, false);
	arena_unlock(a);
	void *still_held;
	cr_assert_eq(pthread_join(t, &still_held), 0);
	cr_assert_eq((uintptr_t)still_held, 0, "the waiter took the lock while it was held (%u CPUs)",
		     ncpus);
}

Test(lock, waiter_spins_then_sleeps_until_release) { waiter_gets_it_after_release(2); }

Test(lock, one_cpu_waiter_sleeps_until_release) { waiter_gets_it_after_release(1); }

/* The spin follows the CPU count arena_max() read; before it, a spin. */
Test(lock, no_spin_on_one_cpu)
{
	start(1);
	cr_assert_gt(arena_lock_spin_limit(), 0, "no CPU count read yet: the spin");
	arena_max();
	cr_assert_eq(arena_lock_spin_limit(), 0, "one CPU: no spin");
}

Test(lock, spin_on_two_cpus)
{
	start(2);
	arena_max();
	cr_assert_gt(arena_lock_spin_limit(), 0);
}

#define HAMMER_THREADS 4
#define HAMMER_ROUNDS 20000
#define HOLD_PAUSES 50 /* a hold the other threads find taken */

static unsigned long counted; /* written under arenas[0]'s lock only */
static pthread_barrier_t all_started;

static void *hammer(void *arg)
{
	arena_t *a = arg;
	pthread_barrier_wait(&all_started);
	for (int i = 0; i < HAMMER_ROUNDS; i++) {
		arena_lock(a);
		unsigned long v = counted;
		for (int k = 0; k < HOLD_PAUSES; k++) /* a window for a second holder */
			cpu_pause();
		__asm__ __volatile__("" ::: "memory");
		counted = v + 1;
		arena_unlock(a);
	}
	return NULL;
}

/* Four threads on two CPUs, each holding the lock for 50 pauses: takes
 * that find it held go through the spin. */
Test(lock, contended_takes_exclude_each_other)
{
	arena_t *a = start(2);
	pthread_t t[HAMMER_THREADS];
	cr_assert_eq(pthread_barrier_init(&all_started, NULL, HAMMER_THREADS), 0);
	for (int i = 0; i < HAMMER_THREADS; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, hammer, a), 0);
	for (int i = 0; i < HAMMER_THREADS; i++)
		cr_assert_eq(pthread_join(t[i], NULL), 0);
	cr_assert_eq(counted, (unsigned long)HAMMER_THREADS * HAMMER_ROUNDS);
}
