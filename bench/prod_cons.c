/*
 * prod_cons: producer threads malloc blocks and pass them through bounded
 * queues to consumer threads, which free them.
 *
 * p producers and c consumers (default 1 and 1), joined by one bounded
 * single-producer single-consumer queue per pair (a ring of -q slots,
 * rounded up to a power of two, default 1024; lock-free: one index
 * written by each side, each on a cache line of its own).  Producer i
 * mallocs n blocks of random sizes in [lo, hi] (default 16-512 B), writes
 * in each its size and a tag (first 16 bytes) and a tag in its last byte,
 * and sends block k to consumer k mod c.  Each consumer polls its queues in
 * turn, takes what they hold, checks each block and frees it: every free
 * is of a block another thread allocated, the pattern of a pipeline or of
 * a server that hands requests from thread to thread.  A producer that
 * finds its queue full, or a consumer that finds all of its queues empty,
 * spins 64 times on the other side's index, then yields the CPU
 * (sched_yield) between further looks.  A NULL from malloc or a block
 * found overwritten ends the program at once (exit status 1): the other
 * side would wait for it forever.  Random numbers: a per-producer
 * xorshift64* seeded from -r and the producer's number.
 *
 * Fixed work: p * n blocks, each one malloc and one free (one op).  The
 * clock runs from the barrier all threads start at to the last consumer's
 * last free, as the threads read it.
 *
 * Usage: prod_cons [-p producers] [-c consumers] [-n blocks per producer]
 *                  [-q queue slots] [-s LO-HI bytes] [-r seed]
 * Prints "result ops_per_sec=<p * n / seconds> seconds=<s>" on stdout and
 * a human-readable line on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax):
 * BENCH tiny: -p 1 -c 1 -n 20000
 * BENCH quick: 1p1c | -p 1 -c 1 -n 10000000
 * BENCH quick: 1p1c-q64 | -p 1 -c 1 -n 3000000 -q 64
 * BENCH full: 2p2c | -p 2 -c 2 -n 5000000
 * BENCH full: 1p1c-1-16k | -p 1 -c 1 -n 4000000 -s 1024-16384
 * BENCH full: 4p4c | -p 4 -c 4 -n 2500000
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

#define MIN_BLOCK 16 /* the header: size, tag */
#define SPINS 64

/* A single-producer single-consumer ring of block pointers. */
typedef struct queue {
	_Alignas(64) atomic_uint_fast64_t tail; /* written by the producer */
	_Alignas(64) atomic_uint_fast64_t head; /* written by the consumer */
	_Alignas(64) uint64_t mask;
	uint64_t **slot;
} queue_t;

typedef struct thread {
	pthread_t thread;
	unsigned id, nprod, ncons;
	uint64_t rng, nblocks; /* producer: to make; consumer: to take */
	size_t lo, hi;
	queue_t *queues;       /* [producer * ncons + consumer] */
	pthread_barrier_t *start;
	double t_start, t_end;
} thread_t;

static uint64_t tag_of(uint64_t size)
{
	return splitmix64(size) | 1;
}

static uint64_t *new_block(thread_t *t)
{
	size_t size = t->lo + (size_t)(xorshift64s(&t->rng) % (t->hi - t->lo + 1));
	uint64_t *b = malloc(size);
	if (!b)
		return NULL;
	b[0] = size;
	b[1] = tag_of(size);
	if (size > MIN_BLOCK)
		((unsigned char *)b)[size - 1] = (unsigned char)size;
	return b;
}

static int block_ok(const thread_t *t, const uint64_t *b)
{
	uint64_t size = b[0];
	return size >= t->lo && size <= t->hi && b[1] == tag_of(size) &&
	       (size == MIN_BLOCK || ((const unsigned char *)b)[size - 1] == (unsigned char)size);
}

/* Waits (spinning, then yielding) until the queue has room, and sends b. */
static void send(queue_t *q, uint64_t *b)
{
	uint64_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
	for (unsigned spin = 0;
	     tail - atomic_load_explicit(&q->head, memory_order_acquire) > q->mask; spin++)
		if (spin >= SPINS)
			sched_yield();
	q->slot[tail & q->mask] = b;
	atomic_store_explicit(&q->tail, tail + 1, memory_order_release);
}

static void *producer_main(void *arg)
{
	thread_t *t = arg;
	pthread_barrier_wait(t->start);
	t->t_start = now_sec();
	for (uint64_t k = 0; k < t->nblocks; k++) {
		uint64_t *b = new_block(t);
		if (!b) {
			/* The consumers would wait for it: no way but out. */
			fprintf(stderr, "prod_cons: producer %u: malloc returned NULL\n", t->id);
			exit(1);
		}
		send(&t->queues[t->id * t->ncons + k % t->ncons], b);
	}
	t->t_end = now_sec();
	return NULL;
}

/* Takes and frees what queue q holds; the number taken, -1 on a bad
 * block. */
static int64_t take_all(const thread_t *t, queue_t *q)
{
	uint64_t head = atomic_load_explicit(&q->head, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&q->tail, memory_order_acquire);
	for (uint64_t i = head; i < tail; i++) {
		uint64_t *b = q->slot[i & q->mask];
		if (!block_ok(t, b)) {
			fprintf(stderr, "prod_cons: consumer %u: block %p was overwritten\n", t->id,
				(void *)b);
			return -1;
		}
		free(b);
	}
	atomic_store_explicit(&q->head, tail, memory_order_release);
	return (int64_t)(tail - head);
}

static void *consumer_main(void *arg)
{
	thread_t *t = arg;
	uint64_t taken = 0;
	unsigned idle = 0;
	pthread_barrier_wait(t->start);
	t->t_start = now_sec();
	while (taken < t->nblocks) {
		int64_t got = 0;
		for (unsigned p = 0; p < t->nprod && got >= 0; p++) {
			int64_t n = take_all(t, &t->queues[p * t->ncons + t->id]);
			got = n < 0 ? -1 : got + n;
		}
		if (got < 0)
			exit(1); /* the producers would wait for room */
		taken += (uint64_t)got;
		idle = got ? 0 : idle + 1;
		if (idle > SPINS)
			sched_yield();
	}
	t->t_end = now_sec();
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: prod_cons [-p producers] [-c consumers] [-n blocks per producer] "
			"[-q queue slots] [-s LO-HI bytes] [-r seed]\n");
	exit(2);
}

static int start_threads(thread_t *ts, unsigned n, void *(*fn)(void *))
{
	for (unsigned i = 0; i < n; i++)
		if (pthread_create(&ts[i].thread, NULL, fn, &ts[i])) {
			fprintf(stderr, "prod_cons: pthread_create failed\n");
			return -1;
		}
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t np = 1, nc = 1, n = 1000000, qslots = 1024, seed = 1;
	unsigned long long lo = 16, hi = 512;
	char tail;
	int c;

	while ((c = getopt(argc, argv, "p:c:n:q:s:r:h")) != -1) {
		int bad = 0;
		switch (c) {
		case 'p': bad = parse_u64(optarg, 1, 256, &np); break;
		case 'c': bad = parse_u64(optarg, 1, 256, &nc); break;
		case 'n': bad = parse_u64(optarg, 1, UINT64_MAX / 256, &n); break;
		case 'q': bad = parse_u64(optarg, 1, 1u << 24, &qslots); break;
		case 'r': bad = parse_u64(optarg, 0, UINT64_MAX, &seed); break;
		case 's':
			bad = sscanf(optarg, "%llu-%llu%c", &lo, &hi, &tail) != 2 || lo < MIN_BLOCK ||
			      hi < lo || hi > (1ull << 30);
			break;
		default: usage();
		}
		if (bad)
			usage();
	}
	if (optind != argc)
		usage();

	uint64_t cap = 1;
	while (cap < qslots)
		cap <<= 1;
	queue_t *queues = aligned_alloc(64, np * nc * sizeof(*queues));
	thread_t *ts = calloc(np + nc, sizeof(*ts));
	if (!queues || !ts)
		return 1;
	for (uint64_t i = 0; i < np * nc; i++) {
		atomic_init(&queues[i].tail, 0);
		atomic_init(&queues[i].head, 0);
		queues[i].mask = cap - 1;
		if (!(queues[i].slot = calloc(cap, sizeof(uint64_t *))))
			return 1;
	}
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, (unsigned)(np + nc));
	for (unsigned i = 0; i < np + nc; i++) {
		unsigned id = i < np ? i : (unsigned)(i - np);
		/* Consumer id gets blocks k = id, id + c, ... of every producer. */
		uint64_t take = np * (n / nc + (id < n % nc));
		ts[i] = (thread_t){ .id = id, .nprod = (unsigned)np, .ncons = (unsigned)nc,
				    .rng = rng_seed(seed, id), .nblocks = i < np ? n : take,
				    .lo = lo, .hi = hi, .queues = queues, .start = &start };
	}
	if (start_threads(ts + np, (unsigned)nc, consumer_main) ||
	    start_threads(ts, (unsigned)np, producer_main))
		return 1;
	double t0 = 0, t1 = 0;
	for (unsigned i = 0; i < np + nc; i++) {
		pthread_join(ts[i].thread, NULL);
		if (i == 0 || ts[i].t_start < t0)
			t0 = ts[i].t_start;
		if (ts[i].t_end > t1)
			t1 = ts[i].t_end;
	}
	for (uint64_t i = 0; i < np * nc; i++)
		free(queues[i].slot);
	free(queues);
	free(ts);
	double secs = t1 - t0, ops = (double)np * (double)n;
	fprintf(stderr, "prod_cons: %" PRIu64 " producer(s) x %" PRIu64 " blocks of %llu-%llu B to %"
		PRIu64 " consumer(s), queues of %" PRIu64 ": %.3f s, %.2f Mops/s\n", np, n, lo, hi, nc,
		cap, secs, ops / secs / 1e6);
	printf("result ops_per_sec=%.0f seconds=%.4f\n", ops / secs, secs);
	return 0;
}
