/*
 * cache_scratch: a probe for passive false sharing, cache-scratch style.
 *
 * After the description of cache-scratch in the Hoard paper (Berger et al.,
 * ASPLOS 2000), written without its code.  The main thread mallocs t blocks
 * of s bytes (default 8) one after the other, so that an allocator that
 * carves small blocks from one run of memory puts them side by side, on
 * the same cache lines, and hands block i to thread i.  Each thread then does
 * k rounds: write every byte of its current block w times (read-modify-
 * write through a volatile pointer, so each write is a store the CPU must
 * make), free the block, malloc a new one of s bytes.  The first round writes
 * the main thread's blocks, side by side for every allocator; what happens
 * next is the allocator's: one that keeps the freed block in the freeing
 * thread's cache and hands it straight back goes on writing the same shared
 * cache line from several CPUs, and every write waits for the line to come
 * back (the "passive" false sharing cache-scratch was made to show); one
 * that serves each thread from memory of its own pays that in round 1 only.
 *
 * The figure is time: the clock runs from the start barrier to the last
 * thread's end, as the threads read it; each thread's own time and the
 * rounds in which a thread's new block shared a 64-byte line with another
 * thread's current block (each thread publishes its block's address in a
 * shared array at each round) are counted too.
 *
 * Usage: cache_scratch [-t threads] [-k rounds] [-w writes per byte]
 *                      [-s block size]
 * Prints "result seconds=<timed phase> thread_s_max=<slowest thread>
 * thread_s_min=<fastest> shared_rounds=<rounds on a shared line>" on stdout
 * and a human-readable line on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax):
 * BENCH tiny: -t 2 -k 20 -w 1000
 * BENCH ratio: seconds
 * BENCH quick: 2t-8B | -t 2 -k 1000 -w 20000 -s 8
 * BENCH full: 4t-8B | -t 4 -k 1000 -w 10000 -s 8
 * BENCH full: 2t-32B | -t 2 -k 1000 -w 5000 -s 32
 * BENCH full: 2t-64B | -t 2 -k 1000 -w 2500 -s 64
 * BENCH full: 2t-8B-k100k | -t 2 -k 100000 -w 200 -s 8
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define LINE 64

typedef struct shared {
	unsigned nthreads;
	uint64_t rounds, writes;
	size_t size;
	_Atomic(uintptr_t) *current; /* each thread's block, for the line count */
	pthread_barrier_t start;
} shared_t;

typedef struct worker {
	pthread_t thread;
	unsigned id;
	unsigned char *block; /* the main thread's, then the thread's own */
	shared_t *sh;
	uint64_t shared_rounds;
	double t_start, t_end;
	int failed;
} worker_t;

/* Whether p's first line is that of another thread's current block. */
static int line_shared(const worker_t *w, const unsigned char *p)
{
	uintptr_t line = (uintptr_t)p / LINE;
	for (unsigned j = 0; j < w->sh->nthreads; j++)
		if (j != w->id &&
		    atomic_load_explicit(&w->sh->current[j], memory_order_relaxed) / LINE == line)
			return 1;
	return 0;
}

static void *worker_main(void *arg)
{
	worker_t *w = arg;
	shared_t *sh = w->sh;
	unsigned char *p = w->block;
	pthread_barrier_wait(&sh->start);
	w->t_start = now_sec();
	for (uint64_t r = 0; r < sh->rounds; r++) {
		volatile unsigned char *v = p;
		for (uint64_t k = 0; k < sh->writes; k++)
			for (size_t i = 0; i < sh->size; i++)
				v[i]++;
		/* Each byte was increased writes times from its start value. */
		if (p[0] != (unsigned char)(w->id + sh->writes)) {
			fprintf(stderr, "cache_scratch: thread %u: block %p was written by "
					"someone else\n", w->id, (void *)p);
			w->failed = 1;
			break;
		}
		free(p);
		p = malloc(sh->size);
		if (!p) {
			w->failed = 1;
			break;
		}
		memset(p, (int)w->id, sh->size);
		atomic_store_explicit(&sh->current[w->id], (uintptr_t)p, memory_order_relaxed);
		w->shared_rounds += (uint64_t)line_shared(w, p);
	}
	w->t_end = now_sec();
	free(p);
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: cache_scratch [-t threads] [-k rounds] [-w writes per byte] "
			"[-s block size]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t nthreads = 2, rounds = 1000, writes = 10000, size = 8;
	int c;

	while ((c = getopt(argc, argv, "t:k:w:s:h")) != -1) {
		int bad = 0;
		switch (c) {
		case 't': bad = parse_u64(optarg, 1, 1024, &nthreads); break;
		case 'k': bad = parse_u64(optarg, 1, UINT64_MAX, &rounds); break;
		case 'w': bad = parse_u64(optarg, 1, UINT64_MAX, &writes); break;
		case 's': bad = parse_u64(optarg, 1, 1u << 20, &size); break;
		default: usage();
		}
		if (bad)
			usage();
	}
	if (optind != argc)
		usage();

	shared_t sh = { .nthreads = (unsigned)nthreads, .rounds = rounds, .writes = writes,
			.size = size };
	sh.current = calloc(nthreads, sizeof(*sh.current));
	worker_t *workers = calloc(nthreads, sizeof(*workers));
	if (!sh.current || !workers)
		return 1;
	pthread_barrier_init(&sh.start, NULL, (unsigned)nthreads);
	/* The blocks, one right after the other, from this thread. */
	for (unsigned i = 0; i < nthreads; i++) {
		unsigned char *p = malloc(size);
		if (!p)
			return 1;
		memset(p, (int)i, size);
		workers[i] = (worker_t){ .id = i, .block = p, .sh = &sh };
		atomic_init(&sh.current[i], (uintptr_t)p);
	}
	for (unsigned i = 0; i < nthreads; i++)
		if (pthread_create(&workers[i].thread, NULL, worker_main, &workers[i])) {
			fprintf(stderr, "cache_scratch: pthread_create failed\n");
			return 1;
		}
	double t0 = 0, t1 = 0, tmax = 0, tmin = 0;
	uint64_t shared = 0;
	int failed = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		worker_t *w = &workers[i];
		pthread_join(w->thread, NULL);
		double t = w->t_end - w->t_start;
		failed |= w->failed;
		shared += w->shared_rounds;
		if (i == 0 || w->t_start < t0)
			t0 = w->t_start;
		if (w->t_end > t1)
			t1 = w->t_end;
		if (i == 0 || t > tmax)
			tmax = t;
		if (i == 0 || t < tmin)
			tmin = t;
	}
	free(workers);
	free(sh.current);
	if (failed)
		return 1;
	double secs = t1 - t0;
	fprintf(stderr, "cache_scratch: %" PRIu64 " thread(s), %" PRIu64 " rounds of %" PRIu64
		" writes to each byte of a %" PRIu64 "-byte block: %.3f s (threads %.3f-%.3f s), "
		"%" PRIu64 " of %" PRIu64 " new blocks on another thread's line\n", nthreads, rounds,
		writes, size, secs, tmin, tmax, shared, nthreads * rounds);
	printf("result seconds=%.6f thread_s_max=%.6f thread_s_min=%.6f shared_rounds=%" PRIu64 "\n",
	       secs, tmax, tmin, shared);
	return 0;
}
