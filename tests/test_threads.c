/*
 * Threads: a multi-threaded stress with cross-thread frees through a shared
 * lock-free exchange array; many short-lived threads (the nthreads statistic
 * falls back after they are joined); producer/consumer loops whose memory must
 * stay bounded.
 */
#include <criterion/criterion.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>

#include "arena.h"
#include "common.h"

/* ---- stress with cross-thread frees ---------------------------------------------------------- */

enum { XSLOTS = 512, LOCAL = 64 };
static _Atomic(rec_t *) xslots[XSLOTS];

typedef struct worker {
	pthread_t tid;
	uint32_t id;
	long ops;
	long done;
} worker_t;

static void *stress_worker(void *arg)
{
	worker_t *w = arg;
	rec_t *local[LOCAL] = { 0 };
	rng_t r;
	rng_seed(&r, 1000 + w->id);
	for (long i = 0; i < w->ops && !tfailed(); i++) {
		int k = (int)rng_below(&r, LOCAL);
		uint64_t what = rng_below(&r, 16);
		if (!local[k]) {
			local[k] = rec_new(&r, w->id);
		} else if (what < 4) {
			/* Swap with the exchange array: what comes back was most
			 * likely made by another thread. */
			rec_t *got = atomic_exchange(&xslots[rng_below(&r, XSLOTS)], local[k]);
			local[k] = got;
			if (got)
				rec_check(got, "received", w->id);
		} else if (what < 5) {
			rec_realloc(local[k], &r, w->id);
		} else {
			rec_free(local[k], w->id);
			local[k] = NULL;
		}
		w->done++;
	}
	for (int k = 0; k < LOCAL; k++)
		if (local[k])
			rec_free(local[k], w->id);
	return NULL;
}

static void run_stress(int nthreads, long ops_per_thread)
{
	worker_t w[16];
	for (int i = 0; i < nthreads; i++) {
		w[i] = (worker_t){ .id = (uint32_t)i, .ops = ops_per_thread };
		cr_assert_eq(pthread_create(&w[i].tid, NULL, stress_worker, &w[i]), 0);
	}
	/* Read the statistics now and then while the threads work. */
	for (int k = 0; k < 20; k++) {
		arena_stats_t s;
		cr_assert_eq(arena_stats_get(&s), 0);
		usleep(10000);
	}
	long total = 0;
	for (int i = 0; i < nthreads; i++) {
		pthread_join(w[i].tid, NULL);
		total += w[i].done;
	}
	for (int i = 0; i < XSLOTS; i++) {
		rec_t *x = atomic_exchange(&xslots[i], NULL);
		if (x)
			rec_free(x, 99);
	}
	cr_assert_not(tfailed(), "%s", tfail_msg);
	cr_assert_eq(total, nthreads * ops_per_thread);
	arena_stats_t s;
	cr_assert_eq(arena_stats_get(&s), 0);
	cr_assert_geq(s.mapped, s.active);
	cr_assert_geq(s.active, s.allocated);
}

Test(threads, stress_8_threads_cross_thread_frees, .timeout = 120)
{
	run_stress(8, 250000);
}

Test(threads, stress_4_threads_cross_thread_frees, .timeout = 120)
{
	run_stress(4, 400000);
}

/* Many threads hammering one small size class, freeing each other's blocks. */
enum { PING_THREADS = 6, PING_OPS = 200000, PING_SLOTS = 64 };
static _Atomic(uint64_t *) ping_slots[PING_SLOTS];

static void *ping_worker(void *arg)
{
	uint32_t id = (uint32_t)(uintptr_t)arg;
	rng_t r;
	rng_seed(&r, id * 31 + 7);
	for (long i = 0; i < PING_OPS && !tfailed(); i++) {
		uint64_t *p = malloc(48);
		if (!p) {
			tfail("malloc(48) failed");
			break;
		}
		for (int k = 0; k < 6; k++)
			p[k] = ((uint64_t)(uintptr_t)p) ^ (uint64_t)k;
		uint64_t *q = atomic_exchange(&ping_slots[rng_below(&r, PING_SLOTS)], p);
		if (q) {
			for (int k = 0; k < 6; k++)
				if (q[k] != (((uint64_t)(uintptr_t)q) ^ (uint64_t)k)) {
					tfail("48-byte block %p word %d corrupt: %#lx", (void *)q, k,
					      (unsigned long)q[k]);
					break;
				}
			free(q);
		}
	}
	return NULL;
}

Test(threads, same_class_ping_pong, .timeout = 60)
{
	pthread_t t[PING_THREADS];
	for (int i = 0; i < PING_THREADS; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, ping_worker, (void *)(uintptr_t)i), 0);
	for (int i = 0; i < PING_THREADS; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < PING_SLOTS; i++)
		free(atomic_exchange(&ping_slots[i], NULL));
	cr_assert_not(tfailed(), "%s", tfail_msg);
}

/* ---- blocks freed by a thread of another arena go home ----------------------------------------- */

enum { HOME_N = 74, HOME_SIZE = 40 }; /* 64 go in one batch, 10 at the thread's exit */
static void *home_blocks[HOME_N];

/* Frees the main thread's blocks, then allocates: none of them may come
 * back here (a block freed by a thread of another arena waits to go home
 * instead of going into this thread's cache, where the next malloc would
 * hand it out next to its owner's blocks: false sharing). */
static void *home_freer(void *arg)
{
	(void)arg;
	for (int i = 0; i < HOME_N; i++)
		free(home_blocks[i]);
	static void *mine[1024];
	const char *err = NULL;
	for (int i = 0; i < 1024 && !err; i++) {
		if (!(mine[i] = malloc(HOME_SIZE)))
			err = "malloc failed";
		for (int j = 0; j < HOME_N && !err; j++)
			if (mine[i] == home_blocks[j])
				err = "a thread got back a block of another arena that it had freed";
	}
	for (int i = 0; i < 1024; i++)
		free(mine[i]);
	return (void *)err;
}

Test(threads, blocks_freed_by_another_arenas_thread_go_home, .timeout = 60)
{
	for (int i = 0; i < HOME_N; i++)
		cr_assert_not_null(home_blocks[i] = malloc(HOME_SIZE));
	pthread_t t;
	void *err;
	cr_assert_eq(pthread_create(&t, NULL, home_freer, NULL), 0);
	pthread_join(t, &err);
	cr_assert_null(err, "%s", (const char *)err);
	/* The main thread's next refills take them back. */
	enum { TRIES = 4096 };
	static void *again[TRIES];
	int back = 0;
	for (int i = 0; i < TRIES && back < HOME_N; i++) {
		cr_assert_not_null(again[i] = malloc(HOME_SIZE));
		for (int j = 0; j < HOME_N; j++)
			back += again[i] == home_blocks[j];
	}
	cr_assert_eq(back, HOME_N, "%d of the %d blocks freed by the other thread came back to their "
		     "owner in %d mallocs", back, HOME_N, TRIES);
	for (int i = 0; i < TRIES; i++)
		free(again[i]);
}

/* ---- an arena lends its dirty pages ------------------------------------------------------------ */

enum { LEND_N = 6, LEND_SIZE = 256 << 10 };
static char *lend_freed[LEND_N];

/* A thread of another arena (fresh: no chunks of its own) takes LEND_N
 * blocks of the freed ones' size: each must land on pages the main thread
 * freed, dirty, rather than on fresh memory. */
static void *lend_taker(void *arg)
{
	(void)arg;
	static char *mine[LEND_N];
	const char *err = NULL;
	for (int i = 0; i < LEND_N && !err; i++) {
		if (!(mine[i] = malloc(LEND_SIZE))) {
			err = "malloc failed";
			break;
		}
		memset(mine[i], 0x5a, LEND_SIZE);
		bool on_freed = false;
		for (int j = 0; j < LEND_N; j++)
			on_freed |= mine[i] >= lend_freed[j] && mine[i] < lend_freed[j] + LEND_SIZE;
		if (!on_freed)
			err = "a large block of a thread of another arena was put on fresh pages while "
			      "the main thread's freed pages waited dirty";
	}
	for (int i = 0; i < LEND_N; i++)
		free(mine[i]);
	return (void *)err;
}

Test(threads, an_arena_lends_its_dirty_pages_to_another_arenas_large_blocks, .timeout = 60)
{
	/* 1.5 MiB freed, under the dirty cap's 4 MiB floor, in a chunk that
	 * a kept block holds in the main thread's arena. */
	char *keep = malloc(LEND_SIZE);
	cr_assert_not_null(keep);
	for (int i = 0; i < LEND_N; i++) {
		cr_assert_not_null(lend_freed[i] = malloc(LEND_SIZE));
		memset(lend_freed[i], 0xa5, LEND_SIZE);
	}
	for (int i = 0; i < LEND_N; i++)
		free(lend_freed[i]);
	arena_stats_t s0, s;
	cr_assert_eq(arena_stats_get(&s0), 0);
	pthread_t t;
	void *err;
	cr_assert_eq(pthread_create(&t, NULL, lend_taker, NULL), 0);
	pthread_join(t, &err);
	cr_assert_null(err, "%s", (const char *)err);
	cr_assert_eq(arena_stats_get(&s), 0);
	cr_assert_geq(s.large_lent_pages - s0.large_lent_pages, (uint64_t)LEND_N * (LEND_SIZE >> 12),
		      "lent %llu pages", (unsigned long long)(s.large_lent_pages - s0.large_lent_pages));
	free(keep);
}

/* ---- short-lived threads ------------------------------------------------------------------------ */

enum { WAVES = 25, WAVE = 8, KEEP = 50 }; /* 200 threads */

typedef struct shortlived {
	pthread_barrier_t *bar;
	uint32_t id;
	rec_t *kept[KEEP]; /* handed over to the main thread at exit */
} shortlived_t;

static void *shortlived_main(void *arg)
{
	shortlived_t *s = arg;
	rng_t r;
	rng_seed(&r, 77 + s->id);
	rec_t *tmp[200];
	for (int i = 0; i < 200; i++)
		tmp[i] = rec_new(&r, s->id);
	for (int i = 0; i < KEEP; i++)
		s->kept[i] = rec_new(&r, s->id);
	pthread_barrier_wait(s->bar); /* main reads the statistics here */
	pthread_barrier_wait(s->bar);
	for (int i = 0; i < 200; i++)
		if (tmp[i])
			rec_free(tmp[i], s->id);
	return NULL;
}

Test(threads, short_lived_threads_release_their_caches, .timeout = 120)
{
	static shortlived_t sl[WAVE];
	pthread_barrier_t bar;
	void *warm = malloc(100); /* the main thread has its cache */
	escape(warm);
	arena_stats_t s0, s;
	cr_assert_eq(arena_stats_get(&s0), 0);
	unsigned max_seen = 0;
	for (int wave = 0; wave < WAVES; wave++) {
		pthread_t t[WAVE];
		pthread_barrier_init(&bar, NULL, WAVE + 1);
		for (int i = 0; i < WAVE; i++) {
			sl[i].bar = &bar;
			sl[i].id = (uint32_t)(wave * WAVE + i);
			cr_assert_eq(pthread_create(&t[i], NULL, shortlived_main, &sl[i]), 0);
		}
		pthread_barrier_wait(&bar);
		cr_assert_eq(arena_stats_get(&s), 0);
		if (s.nthreads > max_seen)
			max_seen = s.nthreads;
		cr_assert_geq(s.nthreads, s0.nthreads + WAVE,
			      "wave %d: %d threads are allocating, nthreads = %u (baseline %u)", wave,
			      WAVE, s.nthreads, s0.nthreads);
		pthread_barrier_wait(&bar);
		for (int i = 0; i < WAVE; i++)
			pthread_join(t[i], NULL);
		pthread_barrier_destroy(&bar);
		/* The blocks they left behind are freed here, after they died. */
		for (int i = 0; i < WAVE; i++)
			for (int k = 0; k < KEEP; k++)
				if (sl[i].kept[k])
					rec_free(sl[i].kept[k], 1000);
		cr_assert_not(tfailed(), "%s", tfail_msg);
	}
	cr_assert_eq(arena_stats_get(&s), 0);
	cr_assert_leq(s.nthreads, s0.nthreads,
		      "after joining %d threads nthreads = %u (baseline %u, max seen %u)",
		      WAVES * WAVE, s.nthreads, s0.nthreads, max_seen);
	cr_assert_leq(s.allocated, s0.allocated + MiB,
		      "every block of the dead threads was freed, yet allocated %zu -> %zu",
		      s0.allocated, s.allocated);
	cr_assert_leq(s.active, s0.active + 64 * MiB,
		      "every block of %d dead threads was freed, yet active %zu -> %zu",
		      WAVES * WAVE, s0.active, s.active);
	free(warm);
}

/* Detached threads that exit on their own. */
static atomic_int detached_left;

static void *detached_main(void *arg)
{
	rng_t r;
	rng_seed(&r, (uint64_t)(uintptr_t)arg);
	for (int i = 0; i < 300; i++) {
		rec_t *x = rec_new(&r, 5);
		if (x)
			rec_free(x, 5);
	}
	atomic_fetch_sub(&detached_left, 1);
	return NULL;
}

Test(threads, detached_threads, .timeout = 60)
{
	void *warm = malloc(100);
	escape(warm);
	arena_stats_t s0, s;
	cr_assert_eq(arena_stats_get(&s0), 0);
	for (int round = 0; round < 10; round++) {
		atomic_store(&detached_left, 10);
		for (int i = 0; i < 10; i++) {
			pthread_t t;
			pthread_attr_t at;
			pthread_attr_init(&at);
			pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
			cr_assert_eq(pthread_create(&t, &at, detached_main,
						    (void *)(uintptr_t)(round * 10 + i + 1)), 0);
			pthread_attr_destroy(&at);
		}
		while (atomic_load(&detached_left) > 0)
			usleep(1000);
	}
	cr_assert_not(tfailed(), "%s", tfail_msg);
	/* A detached thread may still be between its last store and its end. */
	double until = now_s() + 5;
	do {
		cr_assert_eq(arena_stats_get(&s), 0);
		if (s.nthreads <= s0.nthreads)
			break;
		usleep(10000);
	} while (now_s() < until);
	cr_assert_leq(s.nthreads, s0.nthreads, "100 detached threads exited, nthreads %u -> %u",
		      s0.nthreads, s.nthreads);
	free(warm);
}

/* ---- producer / consumer ------------------------------------------------------------------------ */

enum { RING = 1024, PAIRS = 2, ITEMS = 400000 };

typedef struct ring {
	_Alignas(64) atomic_size_t head; /* written by the consumer */
	_Alignas(64) atomic_size_t tail; /* written by the producer */
	rec_t slot[RING];
	uint32_t id;
} ring_t;

static ring_t rings[PAIRS];
static atomic_int pc_running;

static void *producer_main(void *arg)
{
	ring_t *q = arg;
	rng_t r;
	rng_seed(&r, 500 + q->id);
	for (long i = 0; i < ITEMS && !tfailed(); i++) {
		size_t t = atomic_load_explicit(&q->tail, memory_order_relaxed);
		while (t - atomic_load_explicit(&q->head, memory_order_acquire) >= RING) {
			if (tfailed())
				return NULL;
			sched_yield();
		}
		rec_t *x = &q->slot[t % RING];
		x->n = rng_below(&r, 500) == 0 ? rng_logsize(&r, 16385, 256 * KiB)
					       : rng_logsize(&r, 1, 16384);
		x->seed = (uint32_t)i;
		x->owner = q->id;
		x->p = malloc(x->n);
		if (!x->p) {
			tfail("producer: malloc(%zu) failed", x->n);
			return NULL;
		}
		size_t h = x->n < 64 ? x->n : 64;
		pat_fill(x->p, 0, h, x->seed);
		pat_fill(x->p, x->n - h, x->n, x->seed);
		atomic_store_explicit(&q->tail, t + 1, memory_order_release);
	}
	return NULL;
}

static void *consumer_main(void *arg)
{
	ring_t *q = arg;
	for (long i = 0; i < ITEMS && !tfailed(); i++) {
		size_t h = atomic_load_explicit(&q->head, memory_order_relaxed);
		while (atomic_load_explicit(&q->tail, memory_order_acquire) == h) {
			if (tfailed())
				return NULL;
			sched_yield();
		}
		rec_t *x = &q->slot[h % RING];
		size_t e = x->n < 64 ? x->n : 64, bad;
		if ((bad = pat_check(x->p, 0, e, x->seed)) != SIZE_MAX ||
		    (bad = pat_check(x->p, x->n - e, x->n, x->seed)) != SIZE_MAX)
			tfail("consumer: block %p of %zu bytes corrupt at %zu", x->p, x->n, bad);
		free(x->p);
		atomic_store_explicit(&q->head, h + 1, memory_order_release);
	}
	return NULL;
}

Test(threads, producer_consumer_memory_stays_bounded, .timeout = 120)
{
	const size_t bound = 256 * MiB; /* at most ~2 x 1024 blocks of <= 256 KiB in flight */
	pthread_t p[PAIRS], c[PAIRS];
	atomic_store(&pc_running, 1);
	for (int i = 0; i < PAIRS; i++) {
		rings[i].id = (uint32_t)i;
		cr_assert_eq(pthread_create(&p[i], NULL, producer_main, &rings[i]), 0);
		cr_assert_eq(pthread_create(&c[i], NULL, consumer_main, &rings[i]), 0);
	}
	size_t max_active = 0, max_mapped = 0;
	int samples = 0;
	for (;;) {
		arena_stats_t s;
		cr_assert_eq(arena_stats_get(&s), 0);
		if (s.active > max_active)
			max_active = s.active;
		if (s.mapped > max_mapped)
			max_mapped = s.mapped;
		samples++;
		size_t consumed = 0;
		for (int i = 0; i < PAIRS; i++)
			consumed += atomic_load(&rings[i].head);
		if (consumed >= (size_t)PAIRS * ITEMS || tfailed())
			break;
		if (max_active > bound)
			break;
		usleep(20000);
	}
	if (max_active > bound)
		tfail("active reached %zu bytes (bound %zu) with at most %d blocks in flight",
		      max_active, bound, PAIRS * RING);
	for (int i = 0; i < PAIRS; i++) {
		pthread_join(p[i], NULL);
		pthread_join(c[i], NULL);
	}
	cr_assert_not(tfailed(), "%s", tfail_msg);
	arena_stats_t s;
	cr_assert_eq(arena_stats_get(&s), 0);
	cr_assert_leq(s.active, bound, "active %zu after the producer/consumer loop", s.active);
	cr_assert_leq(max_mapped, 2 * bound + 64 * MiB,
		      "mapped reached %zu during the producer/consumer loop", max_mapped);
	cr_assert_gt(samples, 0);
}

/* Threads that each build and tear down a big working set, round after
 * round: memory use must come back to the same level each round. */
static void *churn_main(void *arg)
{
	rng_t r;
	rng_seed(&r, (uint64_t)(uintptr_t)arg);
	enum { N = 3000 };
	rec_t **v = malloc(N * sizeof *v);
	if (!v) {
		tfail("malloc failed");
		return NULL;
	}
	for (int i = 0; i < N; i++)
		v[i] = rec_new(&r, 7);
	for (int i = 0; i < N; i++)
		if (v[i])
			rec_free(v[i], 7);
	free(v);
	return NULL;
}

Test(threads, rounds_of_threads_do_not_grow_memory, .timeout = 120)
{
	size_t active_after[12];
	for (int round = 0; round < 12; round++) {
		pthread_t t[4];
		for (int i = 0; i < 4; i++)
			cr_assert_eq(pthread_create(&t[i], NULL, churn_main,
						    (void *)(uintptr_t)(round * 4 + i + 1)), 0);
		for (int i = 0; i < 4; i++)
			pthread_join(t[i], NULL);
		cr_assert_not(tfailed(), "%s", tfail_msg);
		arena_stats_t s;
		cr_assert_eq(arena_stats_get(&s), 0);
		active_after[round] = s.active;
	}
	/* Rounds 4..11 may not keep growing beyond the level of the first rounds. */
	size_t base = 0;
	for (int i = 0; i < 4; i++)
		if (active_after[i] > base)
			base = active_after[i];
	for (int i = 4; i < 12; i++)
		cr_assert_leq(active_after[i], base + 32 * MiB,
			      "active after round %d is %zu; after the first rounds at most %zu", i,
			      active_after[i], base);
}

/* ---- the same stress under other settings (read at start-up: a fresh process) ---------------- */

#define STRESS_PROG PROGS_DIR "/static_stress"

static long long out_num(const char *out, const char *key)
{
	const char *p = strstr(out, key);
	return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

static void stress_with_conf(const char *conf, long long max_arenas)
{
	const char *argv[] = { STRESS_PROG, "8", "150000", NULL };
	char var[128];
	snprintf(var, sizeof var, "ARENA_CONF=%s", conf);
	const char *env[] = { var, NULL };
	run_result r;
	cr_assert_eq(run_prog(argv, env, NULL, 60, &r), 0, "cannot run %s", STRESS_PROG);
	cr_assert(run_exited0(&r), "ARENA_CONF=%s: %s; stdout: %s; stderr: %s", conf, r.desc, r.out,
		  r.err);
	cr_assert(contains(r.out, "\nok\n"), "ARENA_CONF=%s: %s", conf, r.out);
	cr_assert_eq(r.err_len, 0, "ARENA_CONF=%s: stderr: %s", conf, r.err);
	long long na = out_num(r.out, "narenas="); /* the first line */
	cr_assert_geq(na, 1, "ARENA_CONF=%s: narenas = %lld", conf, na);
	if (max_arenas > 0)
		cr_assert_leq(na, max_arenas, "ARENA_CONF=%s: 8 threads made %lld arenas", conf, na);
	long long nt_end = out_num(r.out, "nthreads_end=");
	cr_assert_leq(nt_end, 1, "ARENA_CONF=%s: after joining, nthreads = %lld", conf, nt_end);
	run_result_free(&r);
}

Test(threads, stress_default_conf, .timeout = 60)
{
	stress_with_conf("", 0);
}

Test(threads, stress_one_arena, .timeout = 60)
{
	stress_with_conf("narenas:1", 1);
}

Test(threads, stress_two_arenas_no_tcache, .timeout = 60)
{
	stress_with_conf("narenas:2,tcache:false", 2);
}

Test(threads, stress_no_tcache, .timeout = 60)
{
	stress_with_conf("tcache:false", 0);
}

Test(threads, stress_many_arenas, .timeout = 60)
{
	stress_with_conf("narenas:32", 32);
}

/* More threads alive at once than arenas (or cores). */
static void *crowd_main(void *arg)
{
	rng_t r;
	rng_seed(&r, (uint64_t)(uintptr_t)arg);
	rec_t *local[16] = { 0 };
	for (int i = 0; i < 4000 && !tfailed(); i++) {
		int k = (int)rng_below(&r, 16);
		if (local[k]) {
			/* hand it to whoever comes next */
			rec_t *got = atomic_exchange(&xslots[rng_below(&r, XSLOTS)], local[k]);
			local[k] = NULL;
			if (got)
				rec_free(got, 0);
		} else {
			local[k] = rec_new(&r, 0);
		}
	}
	for (int k = 0; k < 16; k++)
		if (local[k])
			rec_free(local[k], 0);
	return NULL;
}

Test(threads, sixty_four_threads_at_once, .timeout = 120)
{
	enum { N = 64 };
	pthread_t t[N];
	for (int i = 0; i < N; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, crowd_main, (void *)(uintptr_t)(i + 1)), 0);
	for (int i = 0; i < N; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < XSLOTS; i++) {
		rec_t *x = atomic_exchange(&xslots[i], NULL);
		if (x)
			rec_free(x, 0);
	}
	cr_assert_not(tfailed(), "%s", tfail_msg);
}

/* The thread cache is initial-exec TLS, which glibc places in each
 * thread's stack: a thread asking for a small stack (20 KiB; glibc's own
 * malloc leaves room for 16 KiB) is still created, and allocates. */
Test(threads, a_thread_with_a_20_kib_stack, .timeout = 30)
{
	const char *argv[] = { PROGS_DIR "/small_stack", "20480", NULL };
	const char *env[] = { "LD_PRELOAD=" ARENA_SO, NULL };
	run_result r;
	cr_assert_eq(run_prog(argv, env, NULL, 30, &r), 0, "cannot run %s", argv[0]);
	cr_assert(run_exited0(&r) && contains(r.out, "allocated"), "%s\n%s%s", r.desc, r.out, r.err);
	run_result_free(&r);
}
