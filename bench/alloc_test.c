/*
 * alloc_test: threads replacing random blocks of mixed sizes in a ring of
 * live blocks, a fixed number of times.
 *
 * In the style of the classic multi-threaded "alloc-test" (written from a
 * description, not from its code).  Each of t threads keeps a ring of w
 * slots (default 10000), filled before the clock starts, and does n ops
 * (per thread): an op picks a random slot, checks and frees the block in it
 * and mallocs a new one into it, of a size drawn from a mixed distribution:
 *   90%  8-256 B     (uniform)
 *    9%  257 B-4 KiB (uniform)
 *    1%  4-64 KiB    (uniform)
 * and writes it: its size and a tag in its first 16 bytes (its size in its
 * first byte if it is smaller), a tag in its last byte; the free checks
 * them first.
 * No block goes to another thread.  Random numbers: a per-thread xorshift64*
 * seeded from -r and the thread number, so every allocator gets the same
 * sequence of sizes and slots.
 *
 * The clock runs from the barrier the threads start at (rings full) to the
 * last thread's end of its n ops, as the threads read it; the ring's final
 * frees are not timed.
 *
 * Usage: alloc_test [-t threads] [-n ops per thread] [-w ring slots] [-r seed]
 * Prints "result ops_per_sec=<t * n / seconds> ns_per_op=<the threads' CPU
 * time / their ops>" on stdout and a human-readable line on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax):
 * BENCH tiny: -t 2 -n 20000 -w 1000
 * BENCH quick: 1t | -t 1 -n 20000000
 * BENCH quick: 2t | -t 2 -n 20000000
 * BENCH full: 4t | -t 4 -n 10000000
 * BENCH full: 8t | -t 8 -n 5000000
 * BENCH full: 2t-w100k | -t 2 -n 10000000 -w 100000
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define HEADER 16 /* size, tag */

typedef struct worker {
	pthread_t thread;
	unsigned id;
	uint64_t rng, nops, window;
	pthread_barrier_t *start;
	double t_start, t_end, cpu_s;
	int failed;
} worker_t;

/* A size from the mix, from the random number r. */
static size_t draw_size(uint64_t r)
{
	unsigned pick = (unsigned)(r % 100);
	uint64_t u = r >> 16;
	if (pick < 90)
		return 8 + (size_t)(u % 249);
	if (pick < 99)
		return 257 + (size_t)(u % (4096 - 256));
	return 4097 + (size_t)(u % (65536 - 4096));
}

static unsigned char tag_of(size_t size)
{
	return (unsigned char)(size * 0x9d + 0x5b);
}

/* A ring slot: a live block and its size. */
typedef struct slot {
	unsigned char *p;
	size_t size;
} slot_t;

/* Mallocs and writes a block of a size drawn from r into *s; -1 on NULL. */
static int new_block(slot_t *s, uint64_t r)
{
	size_t size = draw_size(r);
	unsigned char *p = malloc(size);
	if (!p)
		return -1;
	if (size >= HEADER) {
		uint64_t h[2] = { size, tag_of(size) };
		memcpy(p, h, sizeof(h));
	} else {
		p[0] = (unsigned char)size;
	}
	if (size != HEADER)
		p[size - 1] = tag_of(size);
	*s = (slot_t){ p, size };
	return 0;
}

/* The block's header and last byte are still what new_block wrote. */
static int block_ok(const slot_t *s)
{
	const unsigned char *p = s->p;
	if (s->size >= HEADER) {
		uint64_t h[2];
		memcpy(h, p, sizeof(h));
		if (h[0] != s->size || h[1] != tag_of(s->size))
			return 0;
	} else if (p[0] != s->size) {
		return 0;
	}
	return s->size == HEADER || p[s->size - 1] == tag_of(s->size);
}

static double thread_cpu_sec(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int churn(worker_t *w, slot_t *slots)
{
	for (uint64_t op = 0; op < w->nops; op++) {
		uint64_t r = xorshift64s(&w->rng);
		slot_t *s = &slots[r % w->window];
		if (!block_ok(s)) {
			fprintf(stderr, "alloc_test: thread %u: block %p was overwritten\n", w->id,
				(void *)s->p);
			return -1;
		}
		free(s->p);
		if (new_block(s, xorshift64s(&w->rng)) < 0)
			return -1;
	}
	return 0;
}

static void *worker_main(void *arg)
{
	worker_t *w = arg;
	slot_t *slots = calloc(w->window, sizeof(*slots));
	w->failed = !slots;
	for (uint64_t i = 0; !w->failed && i < w->window; i++)
		w->failed = new_block(&slots[i], xorshift64s(&w->rng)) < 0;
	pthread_barrier_wait(w->start);
	w->t_start = now_sec();
	double c0 = thread_cpu_sec();
	if (!w->failed && churn(w, slots) < 0)
		w->failed = 1;
	w->cpu_s = thread_cpu_sec() - c0;
	w->t_end = now_sec();
	for (uint64_t i = 0; slots && i < w->window; i++)
		free(slots[i].p);
	free(slots);
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: alloc_test [-t threads] [-n ops per thread] [-w ring slots] "
			"[-r seed]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t nthreads = 1, nops = 1000000, window = 10000, seed = 1;
	int c;

	while ((c = getopt(argc, argv, "t:n:w:r:h")) != -1) {
		int bad = 0;
		switch (c) {
		case 't': bad = parse_u64(optarg, 1, 1024, &nthreads); break;
		case 'n': bad = parse_u64(optarg, 1, UINT64_MAX, &nops); break;
		case 'w': bad = parse_u64(optarg, 1, 1u << 28, &window); break;
		case 'r': bad = parse_u64(optarg, 0, UINT64_MAX, &seed); break;
		default: usage();
		}
		if (bad)
			usage();
	}
	if (optind != argc)
		usage();

	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, (unsigned)nthreads);
	worker_t *ws = calloc(nthreads, sizeof(*ws));
	if (!ws)
		return 1;
	for (unsigned i = 0; i < nthreads; i++) {
		ws[i] = (worker_t){ .id = i, .nops = nops, .window = window, .start = &start,
				    .rng = rng_seed(seed, i) };
		if (pthread_create(&ws[i].thread, NULL, worker_main, &ws[i])) {
			fprintf(stderr, "alloc_test: pthread_create failed\n");
			return 1;
		}
	}
	double t0 = 0, t1 = 0, cpu = 0;
	int failed = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		pthread_join(ws[i].thread, NULL);
		failed |= ws[i].failed;
		cpu += ws[i].cpu_s;
		if (i == 0 || ws[i].t_start < t0)
			t0 = ws[i].t_start;
		if (ws[i].t_end > t1)
			t1 = ws[i].t_end;
	}
	free(ws);
	if (failed) {
		fprintf(stderr, "alloc_test: a thread failed (malloc returned NULL or a block was "
				"overwritten)\n");
		return 1;
	}
	double secs = t1 - t0, ops = (double)nthreads * (double)nops;
	fprintf(stderr, "alloc_test: %" PRIu64 " thread(s) x %" PRIu64 " ops, ring of %" PRIu64
		": %.3f s, %.2f Mops/s, %.1f ns CPU per op\n", nthreads, nops, window, secs,
		ops / secs / 1e6, cpu * 1e9 / ops);
	printf("result ops_per_sec=%.0f ns_per_op=%.3f\n", ops / secs, cpu * 1e9 / ops);
	return 0;
}
