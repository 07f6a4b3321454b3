/*
 * xmalloc: producers allocate, consumers free, blocks passed in batches
 * through one shared queue (xmalloc-test style).
 *
 * After the description of xmalloc-test (Lever and Boreham, "malloc()
 * performance in a multithreaded Linux environment", 2000), written without
 * its code.  p producer threads each malloc n blocks of sizes uniform in
 * [lo, hi] (default 8-128 B), write their first 8 bytes and last byte, and
 * fill them into batches of b pointers; a full batch goes on a queue shared
 * by all (a mutex and a condition variable); c consumer threads take batches
 * off it, check and free every block in them, and put the empty batch on a
 * second shared queue, where producers get their next one.  There are q
 * batches in all, allocated at start, so at most q * b blocks are in flight
 * and a producer that runs ahead waits for the consumers (on the condition
 * variable: an idle thread sleeps).  Every free is of a block another
 * thread allocated, and each consumer frees blocks of every producer.
 *
 * How it differs from bench/xthread: there, each producer has its own
 * single-producer/single-consumer ring to each consumer, one block per
 * message, sizes up to 64 KiB written page by page; here many producers and
 * consumers share one queue, blocks travel by hundreds, and they are small,
 * so the figure is about the allocator's remote-free and refill paths
 * rather than about the rings or the memory traffic.
 *
 * The clock runs from the start barrier to the last consumer's end (every
 * block freed), as the threads read it.  Random numbers: a per-producer
 * xorshift64* seeded from -r and the producer number.
 *
 * Usage: xmalloc [-p producers] [-c consumers] [-n blocks per producer]
 *                [-b batch size] [-q batches] [-s LO-HI] [-r seed]
 * Prints "result ops_per_sec=<blocks / seconds> waits=<times a thread
 * slept on the queue>" on stdout (one op: a malloc in a producer and the
 * free of that block in a consumer) and a human-readable line on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax):
 * BENCH tiny: -p 1 -c 1 -n 20000
 * BENCH quick: 1p1c | -p 1 -c 1 -n 8000000
 * BENCH quick: 2p2c | -p 2 -c 2 -n 4000000
 * BENCH full: 1p2c | -p 1 -c 2 -n 4000000
 * BENCH full: 2p1c | -p 2 -c 1 -n 2000000
 * BENCH full: 4p4c | -p 4 -c 4 -n 1000000
 * BENCH full: 2p2c-b16 | -p 2 -c 2 -n 2000000 -b 16 -q 256
 * BENCH full: 2p2c-1KiB | -p 2 -c 2 -n 1000000 -s 129-1024
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef struct batch {
	struct batch *next;
	unsigned count;
	unsigned char **blocks;
	uint32_t *sizes;
} batch_t;

/* A FIFO of batches under a mutex; waiters sleep on its condition. */
typedef struct queue {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	batch_t *head, *tail;
	unsigned producers_left; /* full queue: producers not done yet */
	uint64_t waits;
} queue_t;

typedef struct shared {
	queue_t full, empty;
	uint64_t nblocks;
	unsigned batch;
	size_t lo, hi;
	pthread_barrier_t start;
} shared_t;

typedef struct role {
	pthread_t thread;
	unsigned id;
	uint64_t rng;
	shared_t *sh;
	double t_start, t_end;
	int failed;
} role_t;

static void queue_init(queue_t *q, unsigned producers)
{
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->cond, NULL);
	q->head = q->tail = NULL;
	q->producers_left = producers;
	q->waits = 0;
}

static void queue_put(queue_t *q, batch_t *b)
{
	b->next = NULL;
	pthread_mutex_lock(&q->lock);
	if (q->tail)
		q->tail->next = b;
	else
		q->head = b;
	q->tail = b;
	pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->lock);
}

/* The oldest batch; NULL once the queue is empty and no producer is left
 * (only the full queue's producers_left ever reaches 0). */
static batch_t *queue_take(queue_t *q, int until_producers_done)
{
	pthread_mutex_lock(&q->lock);
	while (!q->head && !(until_producers_done && q->producers_left == 0)) {
		q->waits++;
		pthread_cond_wait(&q->cond, &q->lock);
	}
	batch_t *b = q->head;
	if (b && !(q->head = b->next))
		q->tail = NULL;
	pthread_mutex_unlock(&q->lock);
	return b;
}

static void producer_done(queue_t *q)
{
	pthread_mutex_lock(&q->lock);
	q->producers_left--;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
}

static unsigned char tag_of(uint32_t size)
{
	return (unsigned char)(size * 0xa7 + 3);
}

static void *producer_main(void *arg)
{
	role_t *me = arg;
	shared_t *sh = me->sh;
	pthread_barrier_wait(&sh->start);
	me->t_start = now_sec();
	uint64_t left = sh->nblocks;
	while (left) {
		batch_t *b = queue_take(&sh->empty, 0);
		b->count = 0;
		while (left && b->count < sh->batch) {
			uint32_t size = (uint32_t)(sh->lo + xorshift64s(&me->rng) % (sh->hi - sh->lo + 1));
			unsigned char *p = malloc(size);
			if (!p) {
				fprintf(stderr, "xmalloc: malloc(%" PRIu32 ") failed\n", size);
				exit(1);
			}
			memset(p, tag_of(size), size < 8 ? size : 8);
			p[size - 1] = tag_of(size);
			b->blocks[b->count] = p;
			b->sizes[b->count++] = size;
			left--;
		}
		queue_put(&sh->full, b);
	}
	me->t_end = now_sec();
	producer_done(&sh->full);
	return NULL;
}

static void *consumer_main(void *arg)
{
	role_t *me = arg;
	shared_t *sh = me->sh;
	pthread_barrier_wait(&sh->start);
	me->t_start = now_sec();
	batch_t *b;
	while ((b = queue_take(&sh->full, 1))) {
		for (unsigned i = 0; i < b->count; i++) {
			unsigned char *p = b->blocks[i];
			uint32_t size = b->sizes[i];
			if (p[0] != tag_of(size) || p[size - 1] != tag_of(size)) {
				fprintf(stderr, "xmalloc: block %p (%" PRIu32 " bytes) was overwritten\n",
					(void *)p, size);
				me->failed = 1;
			}
			free(p);
		}
		queue_put(&sh->empty, b);
	}
	me->t_end = now_sec();
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: xmalloc [-p producers] [-c consumers] [-n blocks per producer] "
			"[-b batch size] [-q batches] [-s LO-HI bytes] [-r seed]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t nprod = 1, ncons = 1, nblocks = 1000000, batch = 256, nbatches = 64, seed = 1;
	unsigned long long lo = 8, hi = 128;
	char tail;
	int c;

	while ((c = getopt(argc, argv, "p:c:n:b:q:s:r:h")) != -1) {
		int bad = 0;
		switch (c) {
		case 'p': bad = parse_u64(optarg, 1, 256, &nprod); break;
		case 'c': bad = parse_u64(optarg, 1, 256, &ncons); break;
		case 'n': bad = parse_u64(optarg, 1, UINT64_MAX, &nblocks); break;
		case 'b': bad = parse_u64(optarg, 1, 1u << 20, &batch); break;
		case 'q': bad = parse_u64(optarg, 1, 1u << 20, &nbatches); break;
		case 'r': bad = parse_u64(optarg, 0, UINT64_MAX, &seed); break;
		case 's':
			bad = sscanf(optarg, "%llu-%llu%c", &lo, &hi, &tail) != 2 || lo == 0 || hi < lo ||
			      hi > UINT32_MAX;
			break;
		default: usage();
		}
		if (bad)
			usage();
	}
	if (optind != argc)
		usage();

	shared_t sh = { .nblocks = nblocks, .batch = (unsigned)batch, .lo = lo, .hi = hi };
	queue_init(&sh.full, (unsigned)nprod);
	queue_init(&sh.empty, 0);
	pthread_barrier_init(&sh.start, NULL, (unsigned)(nprod + ncons));
	for (uint64_t i = 0; i < nbatches; i++) {
		batch_t *b = calloc(1, sizeof(*b));
		if (!b || !(b->blocks = calloc(batch, sizeof(*b->blocks))) ||
		    !(b->sizes = calloc(batch, sizeof(*b->sizes)))) {
			fprintf(stderr, "xmalloc: out of memory at set-up\n");
			return 1;
		}
		queue_put(&sh.empty, b);
	}
	sh.empty.waits = 0;

	role_t *roles = calloc(nprod + ncons, sizeof(*roles));
	if (!roles)
		return 1;
	for (unsigned i = 0; i < nprod + ncons; i++) {
		int is_prod = i < nprod;
		roles[i] = (role_t){ .id = i, .sh = &sh, .rng = rng_seed(seed, i) };
		if (pthread_create(&roles[i].thread, NULL, is_prod ? producer_main : consumer_main,
				   &roles[i])) {
			fprintf(stderr, "xmalloc: pthread_create failed\n");
			return 1;
		}
	}
	double t0 = 0, t1 = 0;
	int failed = 0;
	for (unsigned i = 0; i < nprod + ncons; i++) {
		pthread_join(roles[i].thread, NULL);
		failed |= roles[i].failed;
		if (i == 0 || roles[i].t_start < t0)
			t0 = roles[i].t_start;
		if (roles[i].t_end > t1)
			t1 = roles[i].t_end;
	}
	free(roles);
	for (batch_t *b = sh.empty.head, *next; b; b = next) { /* every batch is back here */
		next = b->next;
		free(b->blocks);
		free(b->sizes);
		free(b);
	}
	if (failed)
		return 1;
	double secs = t1 - t0, total = (double)nprod * (double)nblocks;
	uint64_t waits = sh.full.waits + sh.empty.waits;
	fprintf(stderr, "xmalloc: %" PRIu64 " producer(s) x %" PRIu64 " blocks of %llu-%llu B -> %"
		PRIu64 " consumer(s), batches of %" PRIu64 " (%" PRIu64 " of them), %" PRIu64
		" waits: %.3f s, %.2f Mops/s\n", nprod, nblocks, lo, hi, ncons, batch, nbatches,
		waits, secs, total / secs / 1e6);
	printf("result ops_per_sec=%.0f waits=%" PRIu64 "\n", total / secs, waits);
	return 0;
}
