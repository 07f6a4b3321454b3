/*
 * Linked with libarena.a: a multi-threaded stress (cross-thread frees
 * through an exchange array) for running under different ARENA_CONF
 * settings.  Usage: static_stress THREADS OPS_PER_THREAD.
 * Prints the statistics seen while all threads were alive, then "ok";
 * exits 1 (with a "FAIL: ..." line) on a corrupt block.
 */
#include <pthread.h>
#include <stdlib.h>

#include "arena.h"
#include "common.h"

enum { SLOTS = 256, LOCAL = 64, MAXT = 64 };
static _Atomic(rec_t *) slots[SLOTS];
static long ops;
static pthread_barrier_t bar;

static void *worker(void *arg)
{
	uint32_t id = (uint32_t)(uintptr_t)arg;
	rec_t *local[LOCAL] = { 0 };
	rng_t r;
	rng_seed(&r, id + 1);
	for (int k = 0; k < 8; k++)
		local[k] = rec_new(&r, id);
	pthread_barrier_wait(&bar); /* all alive, all allocated: main reads stats */
	pthread_barrier_wait(&bar);
	for (long i = 0; i < ops && !tfailed(); i++) {
		int k = (int)rng_below(&r, LOCAL);
		uint64_t what = rng_below(&r, 16);
		if (!local[k]) {
			local[k] = rec_new(&r, id);
		} else if (what < 4) {
			rec_t *got = atomic_exchange(&slots[rng_below(&r, SLOTS)], local[k]);
			local[k] = got;
			if (got)
				rec_check(got, "received", id);
		} else if (what < 5) {
			rec_realloc(local[k], &r, id);
		} else {
			rec_free(local[k], id);
			local[k] = NULL;
		}
	}
	for (int k = 0; k < LOCAL; k++)
		if (local[k])
			rec_free(local[k], id);
	return NULL;
}

int main(int argc, char **argv)
{
	int nt = argc > 1 ? atoi(argv[1]) : 8;
	ops = argc > 2 ? atol(argv[2]) : 100000;
	if (nt < 1 || nt > MAXT || ops < 0)
		return 2;
	pthread_t t[MAXT];
	pthread_barrier_init(&bar, NULL, (unsigned)nt + 1);
	for (int i = 0; i < nt; i++)
		if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i))
			return 2;
	pthread_barrier_wait(&bar);
	arena_stats_t s;
	if (arena_stats_get(&s) != 0)
		return 2;
	printf("narenas=%u\nnthreads=%u\n", s.narenas, s.nthreads);
	fflush(stdout);
	pthread_barrier_wait(&bar);
	for (int i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < SLOTS; i++) {
		rec_t *x = atomic_exchange(&slots[i], NULL);
		if (x)
			rec_free(x, 999);
	}
	if (tfailed()) {
		printf("FAIL: %s\n", tfail_msg);
		return 1;
	}
	if (arena_stats_get(&s) != 0)
		return 2;
	printf("narenas_end=%u\nnthreads_end=%u\n", s.narenas, s.nthreads);
	printf("ok\n");
	return 0;
}
