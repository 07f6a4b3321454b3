/*
 * alloc_free: small-object malloc/free throughput.
 *
 * Each thread keeps a window of live blocks.  It fills the window, waits for
 * the others, and then, N times, replaces a random slot: checks the old
 * block's first byte, frees it, mallocs a block of a new size and writes its
 * first bytes (so the allocation is real).  One such step is one op (a free
 * plus a malloc).  The clock runs from the first thread's start of its steps
 * (all windows are full by then) to the last thread's end of them, as the
 * threads themselves read it; emptying the windows is not timed.
 * Random numbers come from a per-thread xorshift64* seeded from -r and the
 * thread number, so a run is the same sequence of sizes under every allocator.
 *
 * Usage: alloc_free [-t threads] [-n ops per thread] [-s size mode]
 *                   [-w window] [-r seed]
 *   size modes: mix          (default) realistic mix: 80% 16-256 B,
 *                            17% 257 B-4 KiB, 3% 4-16 KiB
 *               fixed:N      always N bytes
 *               range:LO-HI  uniform in [LO, HI]
 * Prints "result ops_per_sec=<total ops / wall seconds>" on stdout and a
 * human-readable line on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax):
 * BENCH tiny: -t 2 -n 20000 -s mix -w 256
 * BENCH quick: 1t-mix | -t 1 -n 10000000 -s mix -w 4096
 * BENCH quick: 2t-mix | -t 2 -n 10000000 -s mix -w 4096
 * BENCH full: 4t-mix | -t 4 -n 5000000 -s mix -w 4096
 * BENCH full: 1t-64B | -t 1 -n 10000000 -s fixed:64 -w 4096
 * BENCH full: 2t-64B | -t 2 -n 10000000 -s fixed:64 -w 4096
 * BENCH full: 1t-mix-w256k | -t 1 -n 5000000 -s mix -w 262144
 * BENCH full: 2t-4-16KiB | -t 2 -n 2000000 -s range:4097-16384 -w 1024
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define TOUCH_BYTES 64 /* bytes written at the start of each new block */

typedef struct size_mode {
	enum { SIZE_MIX, SIZE_RANGE } kind;
	size_t lo, hi; /* SIZE_RANGE: inclusive bounds (fixed:N is N..N) */
} size_mode_t;

/* The mix: weights in percent, sizes uniform within each band. */
static const struct band {
	unsigned weight;
	size_t lo, hi;
} mix_bands[] = {
	{ 30, 16, 32 },      { 25, 33, 64 },     { 15, 65, 128 },
	{ 10, 129, 256 },    { 12, 257, 1024 },  { 5, 1025, 4096 },
	{ 3, 4097, 16384 },
};

typedef struct worker {
	pthread_t thread;
	unsigned id;
	uint64_t rng;
	uint64_t nops;
	size_t window;
	size_mode_t mode;
	pthread_barrier_t *start, *stop;
	double t_start, t_end; /* this thread's timed phase */
	int failed;
} worker_t;

static size_t uniform(uint64_t r, size_t lo, size_t hi)
{
	return lo + (size_t)(r % (hi - lo + 1));
}

static size_t next_size(const size_mode_t *m, uint64_t *rng)
{
	uint64_t r = xorshift64s(rng);
	if (m->kind == SIZE_RANGE)
		return uniform(r, m->lo, m->hi);
	unsigned pick = (unsigned)((r >> 32) % 100);
	const struct band *b = mix_bands;
	while (pick >= b->weight) {
		pick -= b->weight;
		b++;
	}
	return uniform(r & 0xffffffffu, b->lo, b->hi);
}

/* Allocates a block, writes its first bytes with tag; NULL on failure. */
static unsigned char *alloc_block(size_t size, unsigned char tag)
{
	unsigned char *p = malloc(size);
	if (p)
		memset(p, tag, size < TOUCH_BYTES ? size : TOUCH_BYTES);
	return p;
}

static int fill_window(worker_t *w, unsigned char **slots, unsigned char *tags)
{
	for (size_t i = 0; i < w->window; i++) {
		tags[i] = (unsigned char)i;
		slots[i] = alloc_block(next_size(&w->mode, &w->rng), tags[i]);
		if (!slots[i])
			return -1;
	}
	return 0;
}

/* The timed loop; returns -1 on malloc failure or a corrupted block. */
static int churn(worker_t *w, unsigned char **slots, unsigned char *tags)
{
	for (uint64_t op = 0; op < w->nops; op++) {
		size_t i = (size_t)(xorshift64s(&w->rng) % w->window);
		if (slots[i][0] != tags[i]) {
			fprintf(stderr, "alloc_free: thread %u: block %p was overwritten\n",
				w->id, (void *)slots[i]);
			return -1;
		}
		free(slots[i]);
		tags[i] = (unsigned char)(tags[i] + 1);
		slots[i] = alloc_block(next_size(&w->mode, &w->rng), tags[i]);
		if (!slots[i])
			return -1;
	}
	return 0;
}

static void empty_window(worker_t *w, unsigned char **slots)
{
	for (size_t i = 0; i < w->window; i++)
		free(slots[i]);
}

static void *worker_main(void *arg)
{
	worker_t *w = arg;
	unsigned char **slots = calloc(w->window, sizeof(*slots));
	unsigned char *tags = malloc(w->window);
	if (!slots || !tags || fill_window(w, slots, tags) < 0)
		w->failed = 1;
	pthread_barrier_wait(w->start);
	w->t_start = now_sec();
	if (!w->failed && churn(w, slots, tags) < 0)
		w->failed = 1;
	w->t_end = now_sec();
	pthread_barrier_wait(w->stop); /* nobody empties a window while others churn */
	if (slots)
		empty_window(w, slots);
	free(slots);
	free(tags);
	return NULL;
}

static int parse_size_mode(const char *s, size_mode_t *m)
{
	unsigned long long lo, hi;
	char tail;
	if (strcmp(s, "mix") == 0) {
		m->kind = SIZE_MIX;
		return 0;
	}
	m->kind = SIZE_RANGE;
	if (sscanf(s, "fixed:%llu%c", &lo, &tail) == 1)
		hi = lo;
	else if (sscanf(s, "range:%llu-%llu%c", &lo, &hi, &tail) != 2)
		return -1;
	if (lo == 0 || hi < lo)
		return -1;
	m->lo = (size_t)lo;
	m->hi = (size_t)hi;
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: alloc_free [-t threads] [-n ops per thread] "
			"[-s mix|fixed:N|range:LO-HI] [-w window] [-r seed]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t nthreads = 1, nops = 1000000, window = 4096, seed = 1;
	const char *mode_arg = "mix";
	size_mode_t mode;
	int c;

	while ((c = getopt(argc, argv, "t:n:s:w:r:h")) != -1) {
		int bad = 0;
		switch (c) {
		case 't': bad = parse_u64(optarg, 1, 1024, &nthreads); break;
		case 'n': bad = parse_u64(optarg, 1, UINT64_MAX, &nops); break;
		case 's': mode_arg = optarg; break;
		case 'w': bad = parse_u64(optarg, 1, UINT64_MAX, &window); break;
		case 'r': bad = parse_u64(optarg, 0, UINT64_MAX, &seed); break;
		default: usage();
		}
		if (bad)
			usage();
	}
	if (optind != argc || parse_size_mode(mode_arg, &mode) < 0)
		usage();

	pthread_barrier_t start, stop;
	pthread_barrier_init(&start, NULL, (unsigned)nthreads);
	pthread_barrier_init(&stop, NULL, (unsigned)nthreads);
	worker_t *workers = calloc(nthreads, sizeof(*workers));
	if (!workers)
		return 1;
	for (unsigned i = 0; i < nthreads; i++) {
		workers[i] = (worker_t){ .id = i, .nops = nops, .window = window,
					 .mode = mode, .start = &start, .stop = &stop,
					 .rng = rng_seed(seed, i) };
		if (pthread_create(&workers[i].thread, NULL, worker_main, &workers[i])) {
			fprintf(stderr, "alloc_free: pthread_create failed\n");
			return 1;
		}
	}
	int failed = 0;
	double t0 = 0, t1 = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		worker_t *w = &workers[i];
		pthread_join(w->thread, NULL);
		failed |= w->failed;
		if (i == 0 || w->t_start < t0)
			t0 = w->t_start;
		if (w->t_end > t1)
			t1 = w->t_end;
	}
	double secs = t1 - t0;
	free(workers);
	if (failed) {
		fprintf(stderr, "alloc_free: a thread failed (malloc returned NULL or a block was corrupted)\n");
		return 1;
	}
	double total = (double)nthreads * (double)nops;
	fprintf(stderr, "alloc_free: %" PRIu64 " thread(s) x %" PRIu64 " ops, sizes %s, window %" PRIu64
		": %.3f s, %.2f Mops/s\n", nthreads, nops, mode_arg, window, secs, total / secs / 1e6);
	printf("result ops_per_sec=%.0f\n", total / secs);
	return 0;
}
