/*
 * large_churn: large blocks replaced at random, each new one zero-filled by
 * the program's own writes (memset, not calloc), as a program that keeps a
 * set of big buffers and rebuilds them keeps doing.
 *
 * Each of t threads keeps k slots (default 20), empty at start, and does n
 * steps: pick a random slot, free what it holds, malloc a block of a size
 * drawn uniformly from [lo, hi] into it and memset all of it to zero.  The
 * memory a thread holds stays about k * (lo + hi) / 2, so a freed block's
 * pages are what the next steps take again: an allocator that gives freed
 * memory back at once pays a fault (and the kernel's zeroing) for every
 * page of every step, one that keeps it pays nothing.  At the end every
 * slot's first and last byte is checked (a wrong value fails the run).
 *
 * Usage: large_churn [-t threads] [-n steps per thread] [-k slots]
 *                    [-s lo-hi (bytes, k/m/g suffixes)] [-r seed]
 * Prints "result seconds=<wall time of the steps> steps_per_sec=<all
 * threads' steps / seconds> minflt=<minor faults during the steps>" on
 * stdout and a human-readable line on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax):
 * BENCH tiny: -n 40 -k 4 -s 1m-4m
 * BENCH ratio: seconds
 * BENCH quick: 5-25m | -n 2000 -k 20 -s 5m-25m
 * BENCH quick: 1-64m | -n 600 -k 12 -s 1m-64m
 * BENCH quick: 64k-1m-1t | -n 100000 -k 64 -s 64k-1m
 * BENCH quick: 64k-1m-2t | -t 2 -n 50000 -k 64 -s 64k-1m
 * BENCH full: 1-64m-2t | -t 2 -n 300 -k 6 -s 1m-64m
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* memset through a pointer the compiler cannot see through: malloc then
 * memset(0) is otherwise turned into calloc, which skips the writes on
 * memory known to be zero, and this workload is about the program's own
 * writes. */
static void *(*volatile zero_fill)(void *, int, size_t) = memset;

typedef struct worker {
	pthread_t thread;
	uint64_t rng, steps;
	size_t lo, hi;
	unsigned nslots;
	int failed;
} worker_t;

typedef struct slot {
	unsigned char *block;
	size_t size;
} slot_t;

static int slot_ok(const slot_t *s)
{
	return !s->block || (s->block[0] == 0 && s->block[s->size - 1] == 0);
}

/* One step: the slot's block replaced by a fresh zero-filled one. */
static int replace(worker_t *w, slot_t *s)
{
	if (!slot_ok(s))
		return -1;
	free(s->block);
	s->size = w->lo + (size_t)(xorshift64s(&w->rng) % (w->hi - w->lo + 1));
	s->block = malloc(s->size);
	if (!s->block)
		return -1;
	zero_fill(s->block, 0, s->size);
	return 0;
}

static void *run_worker(void *arg)
{
	worker_t *w = arg;
	slot_t *slots = calloc(w->nslots, sizeof(*slots));
	if (!slots) {
		w->failed = 1;
		return NULL;
	}
	for (uint64_t i = 0; i < w->steps && !w->failed; i++)
		if (replace(w, &slots[xorshift64s(&w->rng) % w->nslots]) != 0)
			w->failed = 1;
	for (unsigned i = 0; i < w->nslots; i++) {
		if (!slot_ok(&slots[i]))
			w->failed = 1;
		free(slots[i].block);
	}
	free(slots);
	return NULL;
}

static int parse_range(const char *s, uint64_t *lo, uint64_t *hi)
{
	char buf[64];
	const char *dash = strchr(s, '-');
	if (!dash || (size_t)(dash - s) >= sizeof(buf))
		return -1;
	memcpy(buf, s, (size_t)(dash - s));
	buf[dash - s] = '\0';
	if (parse_size(buf, 1, (uint64_t)1 << 40, lo) || parse_size(dash + 1, 1, (uint64_t)1 << 40, hi))
		return -1;
	return *lo <= *hi ? 0 : -1;
}

static void usage(void)
{
	fprintf(stderr, "usage: large_churn [-t threads] [-n steps] [-k slots] [-s lo-hi] [-r seed]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t nthreads = 1, steps = 2000, nslots = 20, lo = 5 << 20, hi = 25 << 20, seed = 1;
	int opt;
	while ((opt = getopt(argc, argv, "t:n:k:s:r:")) != -1) {
		int bad = 0;
		switch (opt) {
		case 't': bad = parse_u64(optarg, 1, 256, &nthreads); break;
		case 'n': bad = parse_u64(optarg, 1, UINT32_MAX, &steps); break;
		case 'k': bad = parse_u64(optarg, 1, 1 << 20, &nslots); break;
		case 's': bad = parse_range(optarg, &lo, &hi); break;
		case 'r': bad = parse_u64(optarg, 0, UINT64_MAX, &seed); break;
		default: usage();
		}
		if (bad)
			usage();
	}
	worker_t *workers = calloc(nthreads, sizeof(*workers));
	if (!workers)
		return 1;
	long faults = minor_faults();
	double start = now_sec();
	for (unsigned i = 0; i < nthreads; i++) {
		workers[i] = (worker_t){ .rng = rng_seed(seed, i), .steps = steps, .lo = lo, .hi = hi,
					 .nslots = (unsigned)nslots };
		if (pthread_create(&workers[i].thread, NULL, run_worker, &workers[i]) != 0)
			return 1;
	}
	int failed = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		pthread_join(workers[i].thread, NULL);
		failed |= workers[i].failed;
	}
	double seconds = now_sec() - start;
	faults = minor_faults() - faults;
	free(workers);
	if (failed) {
		fprintf(stderr, "large_churn: a block was lost or read wrong\n");
		return 1;
	}
	printf("result seconds=%.4f steps_per_sec=%.1f minflt=%ld\n", seconds,
	       (double)(steps * nthreads) / seconds, faults);
	fprintf(stderr, "large_churn: %" PRIu64 " thread(s) x %" PRIu64 " steps, %" PRIu64
		" slots of %" PRIu64 "-%" PRIu64 " B: %.3f s, %ld minor faults\n",
		nthreads, steps, nslots, lo, hi, seconds, faults);
	return 0;
}
