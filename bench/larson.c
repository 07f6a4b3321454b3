/*
 * larson: a larson-style server churn, with blocks handed between threads.
 *
 * After the benchmark of Larson and Krishnan ("Memory allocation for
 * long-running server applications", ISMM 1998), as the allocator papers
 * describe it; written from that description, not from its code.  Each of
 * t threads keeps a window of w live blocks (sizes uniform in [lo, hi],
 * default 16-1000 B) and, n times, replaces a random one: mallocs a block
 * of a new random size and writes it (its first 16 bytes hold a tag and its
 * size, its last byte after them a tag), and gets rid of the old one.  Getting rid
 * of it is a free, except that x percent of the old blocks are handed over
 * instead to the next thread, (i + 1) mod t, through that thread's inbox: a
 * lock-free stack linked through the blocks themselves (one atomic
 * compare-and-swap per push).  Every thread empties its own inbox every 64
 * steps (one atomic exchange takes it all) and frees what it finds, after
 * checking each block's size and last byte: a remote free of a block another
 * thread allocated, the server pattern where a request is allocated by one
 * thread and released by another.  With one thread the inbox is the thread's
 * own (frees delayed by up to 64 steps, none remote).  An inbox holds at
 * most 4096 blocks: a thread that would push more (its neighbour is not
 * running, on a loaded machine) empties its own inbox and yields until the
 * neighbour has caught up, so memory stays bounded and every run hands over
 * the same blocks.  One step, a malloc plus the free of an old block
 * wherever it happens, is one op.
 *
 * The clock runs from the start barrier (every window full) to the last
 * thread's end of its n steps, as the threads read it; the frees of blocks
 * still in an inbox then, and of the windows, are not timed.  Random numbers:
 * a per-thread xorshift64* seeded from -r and the thread number, so every
 * allocator gets the same sequence of sizes, slots and hand-overs.
 *
 * Usage: larson [-t threads] [-n steps per thread] [-w window]
 *               [-s LO-HI] [-x percent handed over] [-r seed]
 * Prints "result ops_per_sec=<t * n / seconds> handed=<blocks handed over>"
 * on stdout and a human-readable line on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax):
 * BENCH tiny: -t 2 -n 20000 -w 500
 * BENCH quick: 1t | -t 1 -n 10000000 -w 5000 -s 16-1000 -x 10
 * BENCH quick: 2t | -t 2 -n 5000000 -w 5000 -s 16-1000 -x 10
 * BENCH full: 4t | -t 4 -n 1500000 -w 5000 -s 16-1000 -x 10
 * BENCH full: 8t | -t 8 -n 750000 -w 5000 -s 16-1000 -x 10
 * BENCH full: 2t-x50 | -t 2 -n 3000000 -w 5000 -s 16-1000 -x 50
 * BENCH full: 2t-8-128B | -t 2 -n 3000000 -w 5000 -s 16-128 -x 10
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define DRAIN_EVERY 64  /* steps between two emptyings of a thread's inbox */
#define MAX_PENDING 4096 /* blocks in an inbox not yet taken by its owner */
#define MIN_BLOCK 16   /* the header: link or size, then tag */

/* What a block starts with: while it is live, a tag and its size; while it
 * waits in an inbox, the link to the next one in place of the tag. */
typedef struct header {
	union {
		struct header *next;
		uint64_t tag;
	};
	uint64_t size;
} header_t;

typedef struct worker {
	pthread_t thread;
	unsigned id;
	uint64_t rng, nops, window, handed, freed_remote;
	size_t lo, hi;
	unsigned percent;
	uint64_t pushed;                         /* blocks this one handed over */
	_Alignas(64) _Atomic(header_t *) inbox; /* pushed by the previous thread */
	atomic_uint_fast64_t taken;              /* blocks taken from the inbox */
	struct worker *next;                     /* where this one hands blocks */
	pthread_barrier_t *start;
	atomic_uint *finished; /* threads done with their steps */
	unsigned nthreads;
	double t_start, t_end;
	int failed;
} worker_t;

static unsigned char tag_of(uint64_t size)
{
	return (unsigned char)(size * 0x6b + 0x35);
}

static header_t *new_block(worker_t *w)
{
	size_t size = w->lo + (size_t)(xorshift64s(&w->rng) % (w->hi - w->lo + 1));
	header_t *h = malloc(size);
	if (!h)
		return NULL;
	h->size = size;
	h->tag = tag_of(size);
	if (size > sizeof(*h))
		((unsigned char *)h)[size - 1] = tag_of(size);
	return h;
}

/* The size and last byte of a block (and its tag while it is live). */
static int block_ok(const worker_t *w, const header_t *h, int live)
{
	uint64_t size = h->size;
	return size >= w->lo && size <= w->hi && (!live || h->tag == tag_of(size)) &&
	       (size == sizeof(*h) || ((const unsigned char *)h)[size - 1] == tag_of(size));
}

static void hand_over(worker_t *to, header_t *h)
{
	header_t *top = atomic_load_explicit(&to->inbox, memory_order_relaxed);
	do
		h->next = top;
	while (!atomic_compare_exchange_weak_explicit(&to->inbox, &top, h, memory_order_release,
						      memory_order_relaxed));
}

/* Frees what is in w's inbox; -1 on a corrupted block. */
static int drain(worker_t *w)
{
	header_t *h = atomic_exchange_explicit(&w->inbox, NULL, memory_order_acquire);
	uint64_t n = 0;
	while (h) {
		header_t *next = h->next;
		if (!block_ok(w, h, 0)) {
			fprintf(stderr, "larson: thread %u: handed block %p was overwritten\n",
				w->id, (void *)h);
			return -1;
		}
		free(h);
		n++;
		h = next;
	}
	w->freed_remote += n;
	if (n)
		atomic_fetch_add_explicit(&w->taken, n, memory_order_relaxed);
	return 0;
}

static int churn(worker_t *w, header_t **slots)
{
	for (uint64_t op = 0; op < w->nops; op++) {
		uint64_t r = xorshift64s(&w->rng);
		size_t i = (size_t)((r >> 8) % w->window);
		header_t *old = slots[i];
		if (!block_ok(w, old, 1)) {
			fprintf(stderr, "larson: thread %u: block %p was overwritten\n", w->id,
				(void *)old);
			return -1;
		}
		if ((r & 0xff) * 100 < (uint64_t)w->percent * 256) {
			/* pushed counts what this thread gave the next one */
			while (w->pushed - atomic_load_explicit(&w->next->taken, memory_order_relaxed) >=
			       MAX_PENDING) {
				if (drain(w) < 0)
					return -1;
				sched_yield();
			}
			hand_over(w->next, old);
			w->pushed++;
			w->handed++;
		} else {
			free(old);
		}
		if (!(slots[i] = new_block(w)))
			return -1;
		if (op % DRAIN_EVERY == DRAIN_EVERY - 1 && drain(w) < 0)
			return -1;
	}
	return 0;
}

static void *worker_main(void *arg)
{
	worker_t *w = arg;
	header_t **slots = calloc(w->window, sizeof(*slots));
	if (!slots)
		w->failed = 1;
	for (uint64_t i = 0; !w->failed && i < w->window; i++)
		if (!(slots[i] = new_block(w)))
			w->failed = 1;
	pthread_barrier_wait(w->start);
	w->t_start = now_sec();
	if (!w->failed && churn(w, slots) < 0)
		w->failed = 1;
	w->t_end = now_sec();
	/* Until every thread is done, the others may wait for this inbox to
	 * drain; after that nobody pushes any more and the last drain gets all. */
	atomic_fetch_add_explicit(w->finished, 1, memory_order_release);
	while (atomic_load_explicit(w->finished, memory_order_acquire) < w->nthreads) {
		if (drain(w) < 0)
			w->failed = 1;
		sched_yield();
	}
	if (drain(w) < 0)
		w->failed = 1;
	for (uint64_t i = 0; slots && i < w->window; i++)
		free(slots[i]);
	free(slots);
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: larson [-t threads] [-n steps per thread] [-w window] "
			"[-s LO-HI bytes] [-x percent handed over] [-r seed]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t nthreads = 1, nops = 1000000, window = 5000, seed = 1, percent = 10;
	unsigned long long lo = 16, hi = 1000;
	char tail;
	int c;

	while ((c = getopt(argc, argv, "t:n:w:s:x:r:h")) != -1) {
		int bad = 0;
		switch (c) {
		case 't': bad = parse_u64(optarg, 1, 1024, &nthreads); break;
		case 'n': bad = parse_u64(optarg, 1, UINT64_MAX, &nops); break;
		case 'w': bad = parse_u64(optarg, 1, 1u << 30, &window); break;
		case 'x': bad = parse_u64(optarg, 0, 100, &percent); break;
		case 'r': bad = parse_u64(optarg, 0, UINT64_MAX, &seed); break;
		case 's':
			bad = sscanf(optarg, "%llu-%llu%c", &lo, &hi, &tail) != 2 || lo < MIN_BLOCK ||
			      hi < lo;
			break;
		default: usage();
		}
		if (bad)
			usage();
	}
	if (optind != argc)
		usage();

	pthread_barrier_t start;
	atomic_uint finished = 0;
	pthread_barrier_init(&start, NULL, (unsigned)nthreads);
	worker_t *workers = aligned_alloc(64, nthreads * sizeof(*workers));
	if (!workers)
		return 1;
	for (unsigned i = 0; i < nthreads; i++) {
		workers[i] = (worker_t){ .id = i, .nops = nops, .window = window, .lo = lo, .hi = hi,
					 .percent = (unsigned)percent, .start = &start,
					 .finished = &finished, .nthreads = (unsigned)nthreads,
					 .rng = rng_seed(seed, i),
					 .next = &workers[(i + 1) % nthreads] };
		atomic_init(&workers[i].inbox, NULL);
		atomic_init(&workers[i].taken, 0);
	}
	for (unsigned i = 0; i < nthreads; i++)
		if (pthread_create(&workers[i].thread, NULL, worker_main, &workers[i])) {
			fprintf(stderr, "larson: pthread_create failed\n");
			return 1;
		}
	int failed = 0;
	double t0 = 0, t1 = 0;
	uint64_t handed = 0, remote = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		worker_t *w = &workers[i];
		pthread_join(w->thread, NULL);
		failed |= w->failed;
		handed += w->handed;
		remote += w->freed_remote;
		if (i == 0 || w->t_start < t0)
			t0 = w->t_start;
		if (w->t_end > t1)
			t1 = w->t_end;
	}
	free(workers);
	if (failed || handed != remote) {
		fprintf(stderr, "larson: a thread failed (malloc returned NULL, a block was "
				"corrupted, or %" PRIu64 " handed != %" PRIu64 " freed)\n", handed, remote);
		return 1;
	}
	double secs = t1 - t0, total = (double)nthreads * (double)nops;
	fprintf(stderr, "larson: %" PRIu64 " thread(s) x %" PRIu64 " steps, window %" PRIu64
		", %llu-%llu B, %" PRIu64 "%% handed over (%" PRIu64 "): %.3f s, %.2f Mops/s\n",
		nthreads, nops, window, lo, hi, percent, handed, secs, total / secs / 1e6);
	printf("result ops_per_sec=%.0f handed=%" PRIu64 "\n", total / secs, handed);
	return 0;
}
