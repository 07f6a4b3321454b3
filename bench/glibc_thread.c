/*
 * glibc_thread: threads replacing random blocks of a working set for a fixed
 * time; after glibc's benchtests/bench-malloc-thread (written from its
 * description, not its code).
 *
 * Each of t threads keeps a working set of w slots (default 1024, empty at
 * start) and loops until the run's time is up: pick a random slot, free
 * what it holds (nothing the first time), malloc a block of a size drawn
 * from a fixed table into it and write its first byte.  One pass, a free and
 * a malloc, is one op.  The table holds 8000 sizes from 4 B to 32 KiB
 * drawn once (from seed -r) with a density falling as 1/size^2, as glibc's
 * benchmark draws them: mostly small sizes, with a long tail of large ones;
 * every thread draws its sizes from that same table.
 *
 * Timing: the threads and the main thread meet at a barrier; the main
 * thread sleeps -S seconds and raises a stop flag, which the threads read
 * every 64 ops; the clock runs from the barrier to the last thread's stop,
 * as the threads read it.  Each thread's own ops per second is counted too:
 * their spread shows whether the threads got even shares of the CPUs.
 * Random numbers: a per-thread xorshift64* seeded from -r and the thread
 * number.
 *
 * Fixed work (-n ops): each thread does exactly that many ops (rounded up to
 * a multiple of 64) instead of running for -S seconds, for counting the
 * instructions and cache misses an allocator spends per op (callgrind,
 * cachegrind) independently of the machine's speed.
 *
 * Usage: glibc_thread [-t threads] [-S seconds | -n ops] [-w working set] [-r seed]
 * Prints "result ops_per_sec=<all threads' ops / seconds>
 * ns_per_op=<the threads' CPU time / their ops>" on stdout and a
 * human-readable line on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax):
 * BENCH tiny: -t 2 -S 0.05
 * BENCH quick: 1t | -t 1 -S 1
 * BENCH quick: 2t | -t 2 -S 1
 * BENCH full: 1t-5s | -t 1 -S 5
 * BENCH full: 4t | -t 4 -S 2
 * BENCH full: 8t | -t 8 -S 2
 * BENCH full: 2t-w16k | -t 2 -S 2 -w 16384
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define NSIZES 8000
#define MIN_SIZE 4
#define MAX_SIZE 32768
#define CHECK_EVERY 64

static size_t size_table[NSIZES];
static atomic_int stop;
static uint64_t fixed_ops; /* per thread; 0: run for the time given */

typedef struct worker {
	pthread_t thread;
	unsigned id;
	uint64_t rng, ops;
	size_t window;
	pthread_barrier_t *start;
	double t_start, t_end, cpu_s;
	int failed;
} worker_t;

/* Sizes with density proportional to 1/x^2 on [MIN_SIZE, MAX_SIZE]: the
 * inverse of its distribution function at a uniform u. */
static void fill_size_table(uint64_t seed)
{
	uint64_t rng = rng_seed(seed, 0xffff);
	const double a = 1.0 / MIN_SIZE, b = 1.0 / MAX_SIZE;
	for (unsigned i = 0; i < NSIZES; i++) {
		double u = (double)(xorshift64s(&rng) >> 11) / 9007199254740992.0; /* [0, 1) */
		size_table[i] = (size_t)(1.0 / (a - u * (a - b)));
	}
}

static double thread_cpu_sec(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *worker_main(void *arg)
{
	worker_t *w = arg;
	char **slots = calloc(w->window, sizeof(*slots));
	if (!slots)
		w->failed = 1;
	pthread_barrier_wait(w->start);
	w->t_start = now_sec();
	double c0 = thread_cpu_sec();
	while (slots && !atomic_load_explicit(&stop, memory_order_relaxed) &&
	       (!fixed_ops || w->ops < fixed_ops)) {
		for (unsigned k = 0; k < CHECK_EVERY; k++) {
			uint64_t r = xorshift64s(&w->rng);
			size_t i = (size_t)(r % w->window);
			free(slots[i]);
			char *p = malloc(size_table[(r >> 32) % NSIZES]);
			if (!p) {
				w->failed = 1;
				goto out;
			}
			p[0] = (char)k;
			slots[i] = p;
		}
		w->ops += CHECK_EVERY;
	}
out:
	w->cpu_s = thread_cpu_sec() - c0;
	w->t_end = now_sec();
	for (size_t i = 0; slots && i < w->window; i++)
		free(slots[i]);
	free(slots);
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: glibc_thread [-t threads] [-S seconds | -n ops] [-w working set] "
		"[-r seed]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t nthreads = 1, window = 1024, seed = 1;
	double seconds = 1;
	int c;

	while ((c = getopt(argc, argv, "t:S:n:w:r:h")) != -1) {
		int bad = 0;
		switch (c) {
		case 't': bad = parse_u64(optarg, 1, 1024, &nthreads); break;
		case 'S': bad = parse_double(optarg, 0, 3600, &seconds); break;
		case 'n': bad = parse_u64(optarg, 1, UINT64_MAX / 2, &fixed_ops); break;
		case 'w': bad = parse_u64(optarg, 1, 1u << 30, &window); break;
		case 'r': bad = parse_u64(optarg, 0, UINT64_MAX, &seed); break;
		default: usage();
		}
		if (bad)
			usage();
	}
	if (optind != argc)
		usage();
	fill_size_table(seed);

	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, (unsigned)nthreads + 1);
	worker_t *workers = calloc(nthreads, sizeof(*workers));
	if (!workers)
		return 1;
	for (unsigned i = 0; i < nthreads; i++) {
		workers[i] = (worker_t){ .id = i, .window = window, .start = &start,
					 .rng = rng_seed(seed, i) };
		if (pthread_create(&workers[i].thread, NULL, worker_main, &workers[i])) {
			fprintf(stderr, "glibc_thread: pthread_create failed\n");
			return 1;
		}
	}
	pthread_barrier_wait(&start);
	struct timespec nap = { (time_t)seconds, (long)((seconds - floor(seconds)) * 1e9) };
	while (!fixed_ops && nanosleep(&nap, &nap) != 0)
		;
	if (!fixed_ops)
		atomic_store(&stop, 1);

	double t0 = 0, t1 = 0, cpu = 0, lo = 0, hi = 0;
	uint64_t ops = 0;
	int failed = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		worker_t *w = &workers[i];
		pthread_join(w->thread, NULL);
		double rate = (double)w->ops / (w->t_end - w->t_start);
		failed |= w->failed;
		ops += w->ops;
		cpu += w->cpu_s;
		if (i == 0 || w->t_start < t0)
			t0 = w->t_start;
		if (w->t_end > t1)
			t1 = w->t_end;
		if (i == 0 || rate < lo)
			lo = rate;
		if (i == 0 || rate > hi)
			hi = rate;
	}
	free(workers);
	if (failed) {
		fprintf(stderr, "glibc_thread: malloc returned NULL\n");
		return 1;
	}
	double secs = t1 - t0;
	fprintf(stderr, "glibc_thread: %" PRIu64 " thread(s), working set %" PRIu64 ", %.2f s: %"
		PRIu64 " ops, %.2f Mops/s (threads %.2f-%.2f), %.2f ns CPU per op\n", nthreads, window,
		secs, ops, (double)ops / secs / 1e6, lo / 1e6, hi / 1e6, cpu * 1e9 / (double)ops);
	printf("result ops_per_sec=%.0f ns_per_op=%.3f\n", (double)ops / secs, cpu * 1e9 / (double)ops);
	return 0;
}
