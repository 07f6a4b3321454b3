/*
 * false_share: do threads' small objects end up on the same cache line?
 *
 * After the active-false and passive-false tests of the Hoard allocator's
 * paper (Berger et al., ASPLOS 2000), written from their description, not
 * from their code.  Each of t threads, n times: mallocs an object of s
 * bytes (default 8), zeroes it, writes it w times over (every byte loaded,
 * incremented and stored through a volatile pointer, so that every write
 * is a store to the object's cache line, not kept in a register), and
 * frees it.  No object is ever shared, but if the allocator gave two
 * threads objects in the same 64-byte cache line, every store of one
 * thread takes the line away from the other: on two cores at once the run
 * can be many times slower than with each thread's objects on lines of
 * its own.
 *   -m active   (default) the threads' objects are all their own mallocs:
 *               does the allocator itself put different threads' objects
 *               on one line?
 *   -m passive  before the threads start, the main thread callocs t
 *               objects of s bytes, one after the other (so most likely on
 *               one or two lines), and hands object i to thread i, which
 *               writes it w times, frees it (a free of the main thread's
 *               block) and then does its n objects as above: does a
 *               block freed by a thread come back to that thread's next
 *               malloc, false sharing and all?
 * Fixed work per thread, whatever t is: n objects (default 150000), each
 * written w times (default 1000), n * w * s byte writes (plus w * s for
 * the handed object in passive mode).  The clock runs from the barrier
 * all threads start at to the last thread's end, as the threads read it.
 * As a hint of what happened, each thread records the cache line of the
 * first object it malloc'ed itself (in passive mode, right after freeing
 * the one it was handed): `shared` counts the threads whose first object
 * was on the same line as another thread's.
 *
 * Usage: false_share [-m active|passive] [-t threads] [-n objects per thread]
 *                    [-w writes per object] [-s object size, 1-64]
 * Prints "result seconds=<s> ns_per_write=<s * threads / byte writes, ns>
 * shared=<threads>" on stdout and a human-readable line on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax):
 * BENCH tiny: -m passive -t 2 -n 1000 -w 100
 * BENCH quick: active-2t | -m active -t 2 -n 150000 -w 1000 -s 8
 * BENCH quick: passive-2t | -m passive -t 2 -n 150000 -w 1000 -s 8
 * BENCH full: active-4t | -m active -t 4 -n 75000 -w 1000 -s 8
 * BENCH full: passive-4t | -m passive -t 4 -n 75000 -w 1000 -s 8
 * BENCH full: active-2t-32B | -m active -t 2 -n 40000 -w 1000 -s 32
 * BENCH full: passive-2t-32B | -m passive -t 2 -n 40000 -w 1000 -s 32
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define LINE 64

typedef struct worker {
	pthread_t thread;
	unsigned char *handed;   /* passive: the main thread's object */
	uint64_t nobjs, writes;
	size_t size;
	uintptr_t first_line;    /* of its first own object */
	pthread_barrier_t *start;
	double t_start, t_end;
	unsigned sum;
	int failed;
} worker_t;

/* w passes over the object's bytes, each byte read and written. */
static unsigned write_object(unsigned char *p, size_t size, uint64_t w)
{
	volatile unsigned char *v = p;
	for (uint64_t j = 0; j < w; j++)
		for (size_t k = 0; k < size; k++)
			v[k] = (unsigned char)(v[k] + 1);
	return v[0];
}

static void *worker_main(void *arg)
{
	worker_t *w = arg;
	pthread_barrier_wait(w->start);
	w->t_start = now_sec();
	if (w->handed) {
		w->sum += write_object(w->handed, w->size, w->writes);
		free(w->handed);
	}
	for (uint64_t i = 0; i < w->nobjs; i++) {
		unsigned char *p = malloc(w->size);
		if (!p) {
			w->failed = 1;
			break;
		}
		if (i == 0)
			w->first_line = (uintptr_t)p / LINE;
		memset(p, 0, w->size);
		w->sum += write_object(p, w->size, w->writes);
		free(p);
	}
	w->t_end = now_sec();
	return NULL;
}

/* Threads whose first object shared its line with another thread's. */
static unsigned count_shared(const worker_t *ws, unsigned n)
{
	unsigned shared = 0;
	for (unsigned i = 0; i < n; i++)
		for (unsigned j = 0; j < n; j++)
			if (j != i && ws[j].first_line == ws[i].first_line) {
				shared++;
				break;
			}
	return shared;
}

static void usage(void)
{
	fprintf(stderr, "usage: false_share [-m active|passive] [-t threads] [-n objects per "
			"thread] [-w writes per object] [-s object size, 1-64]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t nthreads = 2, nobjs = 150000, writes = 1000, size = 8;
	int passive = 0, c;

	while ((c = getopt(argc, argv, "m:t:n:w:s:h")) != -1) {
		int bad = 0;
		switch (c) {
		case 'm':
			passive = strcmp(optarg, "passive") == 0;
			bad = !passive && strcmp(optarg, "active") != 0;
			break;
		case 't': bad = parse_u64(optarg, 1, 1024, &nthreads); break;
		case 'n': bad = parse_u64(optarg, 1, UINT64_MAX, &nobjs); break;
		case 'w': bad = parse_u64(optarg, 1, UINT64_MAX, &writes); break;
		case 's': bad = parse_u64(optarg, 1, LINE, &size); break;
		default: usage();
		}
		if (bad)
			usage();
	}
	if (optind != argc)
		usage();

	unsigned t = (unsigned)nthreads;
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, t);
	worker_t *ws = calloc(t, sizeof(*ws));
	if (!ws)
		return 1;
	for (unsigned i = 0; i < t; i++) {
		ws[i] = (worker_t){ .nobjs = nobjs, .writes = writes, .size = size, .start = &start };
		if (passive && !(ws[i].handed = calloc(1, size)))
			return 1;
	}
	for (unsigned i = 0; i < t; i++)
		if (pthread_create(&ws[i].thread, NULL, worker_main, &ws[i])) {
			fprintf(stderr, "false_share: pthread_create failed\n");
			return 1;
		}
	double t0 = 0, t1 = 0;
	unsigned sum = 0;
	int failed = 0;
	for (unsigned i = 0; i < t; i++) {
		pthread_join(ws[i].thread, NULL);
		failed |= ws[i].failed;
		sum += ws[i].sum;
		if (i == 0 || ws[i].t_start < t0)
			t0 = ws[i].t_start;
		if (ws[i].t_end > t1)
			t1 = ws[i].t_end;
	}
	if (failed) {
		fprintf(stderr, "false_share: malloc returned NULL\n");
		return 1;
	}
	unsigned shared = count_shared(ws, t);
	free(ws);
	double secs = t1 - t0;
	double nwrites = (double)t * (double)(nobjs + passive) * (double)writes * (double)size;
	fprintf(stderr, "false_share: %s, %u thread(s) x %" PRIu64 " objects of %" PRIu64 " B, "
		"each written %" PRIu64 " times: %.3f s, %.2f ns per byte write; %u thread(s)' "
		"first object on another's line (sum %u)\n", passive ? "passive" : "active", t,
		nobjs, size, writes, secs, secs * t / nwrites * 1e9, shared, sum);
	printf("result seconds=%.4f ns_per_write=%.3f shared=%u\n", secs, secs * t / nwrites * 1e9,
	       shared);
	return 0;
}
