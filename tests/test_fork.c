/*
 * fork() while other threads allocate and free in a tight loop: the child
 * must be able to use the allocator fully (blocks inherited from the parent,
 * new blocks, new threads) and exit 0; the parent goes on working.
 */
#include <criterion/criterion.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>

#include "arena.h"
#include "common.h"

enum { BG = 3, LOCAL = 128, PARENT_BLOCKS = 400, FORKS = 20 };

static atomic_int bg_stop;
static atomic_long bg_ops;

/* Background thread: allocate, check, realloc, free, as fast as it can. */
static void *bg_main(void *arg)
{
	uint32_t id = (uint32_t)(uintptr_t)arg;
	rec_t *local[LOCAL] = { 0 };
	rng_t r;
	rng_seed(&r, 4000 + id);
	while (!atomic_load_explicit(&bg_stop, memory_order_relaxed) && !tfailed()) {
		int k = (int)rng_below(&r, LOCAL);
		if (!local[k])
			local[k] = rec_new(&r, id);
		else if (rng_below(&r, 8) == 0)
			rec_realloc(local[k], &r, id);
		else {
			rec_free(local[k], id);
			local[k] = NULL;
		}
		atomic_fetch_add_explicit(&bg_ops, 1, memory_order_relaxed);
	}
	for (int k = 0; k < LOCAL; k++)
		if (local[k])
			rec_free(local[k], id);
	return NULL;
}

static pthread_t bg_threads[BG];

static void bg_start(void)
{
	atomic_store(&bg_stop, 0);
	atomic_store(&bg_ops, 0);
	for (int i = 0; i < BG; i++)
		cr_assert_eq(pthread_create(&bg_threads[i], NULL, bg_main, (void *)(uintptr_t)(i + 1)), 0);
	/* Let them get going. */
	while (atomic_load(&bg_ops) < 10000)
		usleep(1000);
}

static void bg_stop_join(void)
{
	atomic_store(&bg_stop, 1);
	for (int i = 0; i < BG; i++)
		pthread_join(bg_threads[i], NULL);
	cr_assert_not(tfailed(), "%s", tfail_msg);
}

/* Blocks the main thread made before forking; the child checks and frees them. */
static rec_t *parent_blocks[PARENT_BLOCKS];

static void parent_blocks_make(void)
{
	rng_t r;
	rng_seed(&r, 31337);
	for (int i = 0; i < PARENT_BLOCKS; i++) {
		parent_blocks[i] = rec_new(&r, 0);
		cr_assert_not_null(parent_blocks[i]);
	}
}

static void parent_blocks_check_free(void)
{
	for (int i = 0; i < PARENT_BLOCKS; i++) {
		if (parent_blocks[i])
			rec_free(parent_blocks[i], 0);
		parent_blocks[i] = NULL;
	}
	cr_assert_not(tfailed(), "%s", tfail_msg);
}

/* ---- what the child does ------------------------------------------------------------------------ */

static void *child_thread_main(void *arg)
{
	uint32_t id = (uint32_t)(uintptr_t)arg;
	rng_t r;
	rng_seed(&r, 9000 + id);
	rec_t *local[64] = { 0 };
	for (int i = 0; i < 5000 && !tfailed(); i++) {
		int k = (int)rng_below(&r, 64);
		if (local[k]) {
			rec_free(local[k], id);
			local[k] = NULL;
		} else {
			local[k] = rec_new(&r, id);
		}
	}
	for (int k = 0; k < 64; k++)
		if (local[k])
			rec_free(local[k], id);
	return NULL;
}

/* Returns the child's exit status: 0 when everything worked. */
static int child_work(void *arg)
{
	uint32_t seed = (uint32_t)(uintptr_t)arg;
	alarm(30); /* a deadlocked child dies of SIGALRM */
	rng_t r;
	rng_seed(&r, seed);

	/* Inherited blocks: intact, and they can be resized and freed here. */
	for (int i = 0; i < PARENT_BLOCKS; i++) {
		rec_t *x = parent_blocks[i];
		if (!x)
			continue;
		if (i % 2)
			rec_realloc(x, &r, 100);
		rec_free(x, 100);
		parent_blocks[i] = NULL;
	}

	/* Lots of single-threaded work. */
	rec_t *local[256] = { 0 };
	for (int i = 0; i < 20000 && !tfailed(); i++) {
		int k = (int)rng_below(&r, 256);
		uint64_t what = rng_below(&r, 8);
		if (!local[k])
			local[k] = rec_new(&r, 100);
		else if (what == 0)
			rec_realloc(local[k], &r, 100);
		else {
			rec_free(local[k], 100);
			local[k] = NULL;
		}
	}

	/* New threads in the child. */
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		if (pthread_create(&t[i], NULL, child_thread_main, (void *)(uintptr_t)(200 + i))) {
			fprintf(stderr, "child: pthread_create failed\n");
			return 2;
		}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);

	for (int k = 0; k < 256; k++)
		if (local[k])
			rec_free(local[k], 100);

	arena_stats_t s;
	if (arena_stats_get(&s) != 0 || s.active < s.allocated || s.mapped < s.active) {
		fprintf(stderr, "child: statistics broken\n");
		return 3;
	}
	if (tfailed()) {
		fprintf(stderr, "child: %s\n", tfail_msg);
		return 1;
	}
	printf("child ok\n");
	return 0;
}

static void expect_child_ok(run_result *res, int round)
{
	cr_assert(run_exited0(res), "fork #%d: child %s; stderr: %s", round, res->desc, res->err);
	cr_assert(contains(res->out, "child ok"), "fork #%d: child output: %s", round, res->out);
	run_result_free(res);
}

/* The parent's own work between forks. */
static void parent_work(rng_t *r)
{
	for (int i = 0; i < 5000; i++) {
		rec_t *x = rec_new(r, 0);
		cr_assert_not_null(x);
		rec_free(x, 0);
	}
	cr_assert_not(tfailed(), "%s", tfail_msg);
}

Test(fork, fork_while_threads_allocate, .timeout = 180)
{
	rng_t r;
	rng_seed(&r, 1);
	parent_blocks_make();
	bg_start();
	for (int round = 0; round < FORKS; round++) {
		run_result res;
		cr_assert_eq(run_fn(child_work, (void *)(uintptr_t)(round + 1), 60, &res), 0);
		expect_child_ok(&res, round);
		parent_work(&r);
	}
	bg_stop_join();
	/* The parent's blocks were not disturbed by the children's frees. */
	parent_blocks_check_free();
}

/* fork() called from a thread that is not the main thread, while the main
 * thread and the other threads allocate. */
typedef struct forker {
	int rounds;
	int failed_round;
	run_result res;
} forker_t;

static void *forker_main(void *arg)
{
	forker_t *f = arg;
	f->failed_round = -1;
	for (int round = 0; round < f->rounds; round++) {
		if (run_fn(child_work, (void *)(uintptr_t)(round + 50), 60, &f->res) != 0 ||
		    !run_exited0(&f->res) || !contains(f->res.out, "child ok")) {
			f->failed_round = round;
			return NULL;
		}
		run_result_free(&f->res);
	}
	return NULL;
}

Test(fork, fork_from_another_thread, .timeout = 180)
{
	rng_t r;
	rng_seed(&r, 2);
	parent_blocks_make();
	bg_start();
	forker_t f = { .rounds = 8 };
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, forker_main, &f), 0);
	for (int i = 0; i < 10; i++)
		parent_work(&r);
	pthread_join(t, NULL);
	cr_assert_eq(f.failed_round, -1, "fork #%d from a thread: child %s; stderr: %s",
		     f.failed_round, f.res.desc, f.res.err ? f.res.err : "");
	bg_stop_join();
	parent_blocks_check_free();
}

/* A child that forks again while its own new threads allocate. */
static int nested_work(void *arg)
{
	(void)arg;
	alarm(60);
	atomic_store(&bg_stop, 0);
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		if (pthread_create(&t[i], NULL, bg_main, (void *)(uintptr_t)(300 + i)))
			return 2;
	int rc = 0;
	for (int round = 0; round < 4 && rc == 0; round++) {
		run_result res;
		if (run_fn(child_work, (void *)(uintptr_t)(700 + round), 45, &res) != 0)
			rc = 3;
		else if (!run_exited0(&res) || !contains(res.out, "child ok")) {
			fprintf(stderr, "grandchild #%d: %s; %s\n", round, res.desc, res.err);
			rc = 4;
		}
		if (rc != 3)
			run_result_free(&res);
	}
	atomic_store(&bg_stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	if (tfailed()) {
		fprintf(stderr, "child: %s\n", tfail_msg);
		return 1;
	}
	printf("child ok\n");
	return rc;
}

Test(fork, nested_fork_in_child_with_threads, .timeout = 180)
{
	parent_blocks_make();
	bg_start();
	for (int round = 0; round < 2; round++) {
		run_result res;
		cr_assert_eq(run_fn(nested_work, NULL, 120, &res), 0);
		expect_child_ok(&res, round);
	}
	bg_stop_join();
	parent_blocks_check_free();
}

/* pthread_atfork handlers that allocate (common in libraries). */
static void *atfork_blocks[3];

static void *atfork_alloc(int which, size_t n)
{
	void *p = malloc(n);
	if (!p)
		abort();
	memset(p, which + 1, n);
	free(atfork_blocks[which]);
	atfork_blocks[which] = p;
	return p;
}

static void atfork_prepare(void) { atfork_alloc(0, 1000); }
static void atfork_parent(void) { atfork_alloc(1, 3000); }
static void atfork_child(void) { atfork_alloc(2, 200000); }

Test(fork, atfork_handlers_that_allocate, .timeout = 120)
{
	cr_assert_eq(pthread_atfork(atfork_prepare, atfork_parent, atfork_child), 0);
	parent_blocks_make();
	bg_start();
	rng_t r;
	rng_seed(&r, 3);
	for (int round = 0; round < 10; round++) {
		run_result res;
		cr_assert_eq(run_fn(child_work, (void *)(uintptr_t)(round + 80), 60, &res), 0);
		expect_child_ok(&res, round);
		cr_assert_not_null(atfork_blocks[0]);
		cr_assert_not_null(atfork_blocks[1]);
		parent_work(&r);
	}
	bg_stop_join();
	parent_blocks_check_free();
	for (int i = 0; i < 3; i++)
		free(atfork_blocks[i]);
}

/* Many quick forks whose children only free and exit. */
static int quick_child(void *arg)
{
	(void)arg;
	alarm(20);
	for (int i = 0; i < PARENT_BLOCKS; i++)
		if (parent_blocks[i])
			rec_free(parent_blocks[i], 1);
	void *p = malloc(100), *q = malloc(3 * MiB), *z = calloc(1, 50000);
	if (!p || !q || !z)
		return 2;
	escape(p);
	escape(q);
	escape(z);
	free(p);
	free(q);
	free(z);
	if (tfailed()) {
		fprintf(stderr, "child: %s\n", tfail_msg);
		return 1;
	}
	printf("child ok\n");
	return 0;
}

Test(fork, many_quick_forks, .timeout = 120)
{
	parent_blocks_make();
	bg_start();
	for (int round = 0; round < 100; round++) {
		run_result res;
		cr_assert_eq(run_fn(quick_child, NULL, 30, &res), 0);
		expect_child_ok(&res, round);
	}
	bg_stop_join();
	parent_blocks_check_free();
}

/* ---- glibc's fork promises (issue 13), in fresh processes under LD_PRELOAD ---------------------- */

#define FORK_SIGNAL_PROG PROGS_DIR "/fork_signal"
#define FORK_STDIO_PROG PROGS_DIR "/fork_stdio"

/* Runs prog with args under libarena (and ARENA_CONF=conf when not NULL)
 * with a watchdog of timeout_s: a hang is reported as a deadlock with what
 * ran, not left to the suite's timeout. */
static void run_fork_prog(const char *prog, const char *a1, const char *a2, const char *conf,
			  const char *what, int round)
{
	char conf_var[128];
	snprintf(conf_var, sizeof conf_var, "ARENA_CONF=%s", conf ? conf : "");
	const char *argv[] = { prog, a1, a2, NULL };
	const char *env[] = { "LD_PRELOAD=" ARENA_SO, conf_var, NULL };
	run_result r;
	cr_assert_eq(run_prog(argv, env, NULL, 30, &r), 0, "cannot run %s", prog);
	cr_assert(!r.timed_out, "%s (run %d, ARENA_CONF=%s): DEADLOCK: no exit within 30 s "
		  "(the run takes %s s); output so far: %s", what, round, conf ? conf : "", a1, r.out);
	cr_assert(run_exited0(&r) && contains(r.out, "\nok\n"), "%s (run %d, ARENA_CONF=%s): %s; "
		  "stdout: %s; stderr: %s", what, round, conf ? conf : "", r.desc, r.out, r.err);
	long forks = kv_num(r.out, "forks", -1);
	cr_assert_geq(forks, 1, "%s: no fork completed: %s", what, r.out);
	cr_log_info("%s run %d (%s): %s", what, round, conf ? conf : "defaults", r.out);
	run_result_free(&r);
}

/* A single-threaded loop of malloc/free/realloc (16 B to 1 MiB)
 * interrupted by SIGALRM every 300-500 us; the handler forks and the child
 * _exits.  Before the fix the first fork that interrupted an allocation
 * waited for a lock the interrupted call held: every run hung. */
Test(fork, fork_from_signal_handler_single_threaded, .timeout = 120)
{
	run_fork_prog(FORK_SIGNAL_PROG, "3", "500", NULL, "fork from a signal handler", 0);
	run_fork_prog(FORK_SIGNAL_PROG, "2", "300", NULL, "fork from a signal handler", 1);
	run_fork_prog(FORK_SIGNAL_PROG, "2", "500", "tcache:false", "fork from a signal handler", 2);
}

/* Threads fork in a loop (children malloc, start a thread, fork again)
 * while readers malloc under a FILE's lock and a flusher runs fflush(NULL).
 * Before the fix: 5 hangs in 5 runs of 2 s (default configuration), every
 * run with tcache:false; gdb showed the forker in glibc's fork waiting for
 * the stdio list lock with our locks held, the flusher holding the list
 * lock waiting for a reader's FILE, the reader waiting for an arena lock.
 * Eight runs: a race that shows 2 runs in 5 passes all eight by chance
 * with probability 0.6^8 < 2%. */
Test(fork, fork_from_threads_with_stdio_locks_held, .timeout = 300)
{
	for (int round = 0; round < 5; round++)
		run_fork_prog(FORK_STDIO_PROG, "2", NULL, NULL, "threaded fork with stdio", round);
	for (int round = 0; round < 3; round++)
		run_fork_prog(FORK_STDIO_PROG, "2", NULL, "tcache:false", "threaded fork with stdio",
			      round);
}

/* ---- the child's threads get arenas of their own ------------------------------------------------- */

#define FORK_ARENAS_PROG PROGS_DIR "/fork_arenas"

/* A child of a process whose threads held every arena binds its next
 * thread to an arena other than the main thread's: the places of the
 * threads that did not survive the fork are given up
 * (arena_threads_after_fork).  Without that, every run failed. */
Test(fork, child_threads_get_arenas_the_dead_threads_held, .timeout = 60)
{
	static const char *const narenas[] = { "2", "8" };
	for (unsigned i = 0; i < sizeof(narenas) / sizeof(narenas[0]); i++) {
		char conf[64];
		snprintf(conf, sizeof conf, "ARENA_CONF=narenas:%s", narenas[i]);
		const char *argv[] = { FORK_ARENAS_PROG, narenas[i], NULL };
		const char *env[] = { "LD_PRELOAD=" ARENA_SO, conf, NULL };
		run_result r;
		cr_assert_eq(run_prog(argv, env, NULL, 30, &r), 0, "cannot run %s", FORK_ARENAS_PROG);
		cr_assert(run_exited0(&r) && contains(r.out, "ok\n"), "narenas:%s: %s; stdout: %s; stderr: %s",
			  narenas[i], r.desc, r.out, r.err);
		run_result_free(&r);
	}
}
