/*
 * xthread: cross-thread frees, a larson-like server pattern.
 *
 * Producer threads malloc blocks of 8 B..64 KiB (log-uniform: a power of two
 * from 8 to 32 Ki picked uniformly, then uniform up to the next one), write
 * them (the first 64 bytes, one byte per 4 KiB page after that, and the last
 * byte) and pass them through bounded single-producer/single-consumer rings
 * to consumer threads, which check the first and last byte and free them, so
 * every free is a remote free.  Producer i sends its k-th block to consumer
 * (i + k) mod c; every producer has one ring per consumer.  A full or empty
 * ring is waited on by spinning briefly, then sleeping 50 us at a time (so
 * that idle threads add little CPU time).  The clock runs from the first
 * thread's start (all threads are ready by then) to the last thread's end,
 * when every consumer has freed every block, as the threads themselves read
 * it.  Random numbers: per-producer xorshift64* seeded from -r.
 *
 * Usage: xthread [-p producers] [-c consumers] [-n blocks per producer]
 *                [-q ring depth] [-r seed]
 * Prints "result ops_per_sec=<blocks passed / wall seconds>" on stdout (one
 * op = one malloc in a producer plus one free in a consumer) and a
 * human-readable line on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax):
 * BENCH tiny: -p 1 -c 1 -n 20000
 * BENCH quick: 1p1c | -p 1 -c 1 -n 2000000
 * BENCH full: 2p2c | -p 2 -c 2 -n 1000000
 * BENCH full: 4p4c | -p 4 -c 4 -n 500000
 * BENCH full: 1p3c | -p 1 -c 3 -n 2000000
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define CACHE_LINE 64
#define PAGE 4096
#define HEAD_BYTES 64
#define SPINS_BEFORE_SLEEP 64
#define SLEEP_NS 50000

typedef struct msg {
	unsigned char *p;
	size_t size;
} msg_t;

/* Single-producer/single-consumer ring; head and tail on their own lines. */
typedef struct ring {
	_Alignas(CACHE_LINE) atomic_size_t tail; /* written by the producer */
	_Alignas(CACHE_LINE) atomic_size_t head; /* written by the consumer */
	atomic_int closed;                       /* producer is done */
	size_t mask;
	msg_t *slots;
} ring_t;

typedef struct shared {
	unsigned nprod, ncons;
	uint64_t nblocks;
	ring_t *rings; /* rings[producer * ncons + consumer] */
	pthread_barrier_t start;
} shared_t;

typedef struct role {
	pthread_t thread;
	unsigned id;
	uint64_t rng;
	shared_t *sh;
	double t_start, t_end; /* this thread's timed phase */
} role_t;

/* Waiting for a ring: spin a little, then sleep, so that an idle thread
 * adds little to the CPU time (user or system) that the run reports. */
static void backoff(unsigned *spins)
{
	static const struct timespec nap = { 0, SLEEP_NS };
	if (++*spins < SPINS_BEFORE_SLEEP)
		__builtin_ia32_pause();
	else
		nanosleep(&nap, NULL);
}

static ring_t *ring_at(shared_t *sh, unsigned prod, unsigned cons)
{
	return &sh->rings[(size_t)prod * sh->ncons + cons];
}

static void ring_push(ring_t *r, msg_t m)
{
	size_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	unsigned spins = 0;
	while (tail - atomic_load_explicit(&r->head, memory_order_acquire) > r->mask)
		backoff(&spins);
	r->slots[tail & r->mask] = m;
	atomic_store_explicit(&r->tail, tail + 1, memory_order_release);
}

/* Takes one message if there is one; returns 0 when the ring is empty. */
static int ring_pop(ring_t *r, msg_t *m)
{
	size_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
	if (head == atomic_load_explicit(&r->tail, memory_order_acquire))
		return 0;
	*m = r->slots[head & r->mask];
	atomic_store_explicit(&r->head, head + 1, memory_order_release);
	return 1;
}

static size_t block_size(uint64_t *rng)
{
	uint64_t r = xorshift64s(rng);
	unsigned shift = 3 + (unsigned)((r >> 32) % 13); /* 8 .. 32 Ki */
	size_t base = (size_t)1 << shift;
	return base + (size_t)((r & 0xffffffffu) % base);
}

static unsigned char tag_of(size_t size)
{
	return (unsigned char)(size * 0x9d + 1);
}

static void write_block(unsigned char *p, size_t size)
{
	unsigned char tag = tag_of(size);
	memset(p, tag, size < HEAD_BYTES ? size : HEAD_BYTES);
	for (size_t off = PAGE; off < size; off += PAGE)
		p[off] = tag;
	p[size - 1] = tag;
}

static int block_ok(const msg_t *m)
{
	unsigned char tag = tag_of(m->size);
	return m->p[0] == tag && m->p[m->size - 1] == tag;
}

static void *producer_main(void *arg)
{
	role_t *me = arg;
	shared_t *sh = me->sh;
	pthread_barrier_wait(&sh->start);
	me->t_start = now_sec();
	for (uint64_t k = 0; k < sh->nblocks; k++) {
		size_t size = block_size(&me->rng);
		unsigned char *p = malloc(size);
		if (!p) {
			fprintf(stderr, "xthread: malloc(%zu) failed\n", size);
			exit(1);
		}
		write_block(p, size);
		ring_push(ring_at(sh, me->id, (unsigned)((me->id + k) % sh->ncons)),
			  (msg_t){ p, size });
	}
	for (unsigned c = 0; c < sh->ncons; c++)
		atomic_store_explicit(&ring_at(sh, me->id, c)->closed, 1, memory_order_release);
	me->t_end = now_sec();
	return NULL;
}

/* Frees what ring r holds now and returns how many; aborts on a corrupted
 * block (an allocator bug: the run shows as a crash). */
static unsigned long drain(ring_t *r)
{
	unsigned long n = 0;
	msg_t m;
	while (ring_pop(r, &m)) {
		if (!block_ok(&m)) {
			fprintf(stderr, "xthread: block %p (%zu bytes) was overwritten\n",
				(void *)m.p, m.size);
			abort();
		}
		free(m.p);
		n++;
	}
	return n;
}

static void *consumer_main(void *arg)
{
	role_t *me = arg;
	shared_t *sh = me->sh;
	unsigned open = sh->nprod, spins = 0;
	unsigned char *done = calloc(sh->nprod, 1);
	if (!done) {
		fprintf(stderr, "xthread: out of memory at set-up\n");
		exit(1);
	}
	pthread_barrier_wait(&sh->start);
	me->t_start = now_sec();
	while (open) {
		unsigned long got = 0;
		for (unsigned pr = 0; pr < sh->nprod; pr++) {
			ring_t *r = ring_at(sh, pr, me->id);
			if (done[pr])
				continue;
			/* closed is read before the drain, so nothing pushed before
			 * close can be left behind. */
			int closed = atomic_load_explicit(&r->closed, memory_order_acquire);
			got += drain(r);
			if (closed) {
				done[pr] = 1;
				open--;
			}
		}
		if (got)
			spins = 0;
		else
			backoff(&spins);
	}
	me->t_end = now_sec();
	free(done);
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: xthread [-p producers] [-c consumers] [-n blocks per producer] "
			"[-q ring depth, a power of two] [-r seed]\n");
	exit(2);
}

static int init_rings(shared_t *sh, size_t depth)
{
	size_t n = (size_t)sh->nprod * sh->ncons;
	sh->rings = aligned_alloc(CACHE_LINE, n * sizeof(ring_t));
	if (!sh->rings)
		return -1;
	for (size_t i = 0; i < n; i++) {
		ring_t *r = &sh->rings[i];
		atomic_init(&r->tail, 0);
		atomic_init(&r->head, 0);
		atomic_init(&r->closed, 0);
		r->mask = depth - 1;
		r->slots = calloc(depth, sizeof(msg_t));
		if (!r->slots)
			return -1;
	}
	return 0;
}

static int start_roles(role_t *roles, unsigned n, void *(*fn)(void *), shared_t *sh,
		       uint64_t seed)
{
	for (unsigned i = 0; i < n; i++) {
		roles[i] = (role_t){ .id = i, .sh = sh, .rng = rng_seed(seed, i) };
		if (pthread_create(&roles[i].thread, NULL, fn, &roles[i]))
			return -1;
	}
	return 0;
}

/* Joins the threads and widens [*t0, *t1] (0 = unset) to their timed phases. */
static void join_roles(role_t *roles, unsigned n, double *t0, double *t1)
{
	for (unsigned i = 0; i < n; i++) {
		pthread_join(roles[i].thread, NULL);
		if (*t0 == 0 || roles[i].t_start < *t0)
			*t0 = roles[i].t_start;
		if (roles[i].t_end > *t1)
			*t1 = roles[i].t_end;
	}
}

int main(int argc, char **argv)
{
	uint64_t nprod = 1, ncons = 1, nblocks = 1000000, depth = 1024, seed = 1;
	shared_t sh = { 0 };
	int c;

	while ((c = getopt(argc, argv, "p:c:n:q:r:h")) != -1) {
		int bad = 0;
		switch (c) {
		case 'p': bad = parse_u64(optarg, 1, 256, &nprod); break;
		case 'c': bad = parse_u64(optarg, 1, 256, &ncons); break;
		case 'n': bad = parse_u64(optarg, 1, UINT64_MAX, &nblocks); break;
		case 'q': bad = parse_u64(optarg, 2, (uint64_t)1 << 24, &depth) || (depth & (depth - 1)); break;
		case 'r': bad = parse_u64(optarg, 0, UINT64_MAX, &seed); break;
		default: usage();
		}
		if (bad)
			usage();
	}
	if (optind != argc)
		usage();

	sh.nprod = (unsigned)nprod;
	sh.ncons = (unsigned)ncons;
	sh.nblocks = nblocks;
	role_t *prods = calloc(nprod, sizeof(role_t)), *conss = calloc(ncons, sizeof(role_t));
	if (!prods || !conss || init_rings(&sh, depth) < 0) {
		fprintf(stderr, "xthread: out of memory at set-up\n");
		return 1;
	}
	pthread_barrier_init(&sh.start, NULL, sh.nprod + sh.ncons);
	if (start_roles(conss, sh.ncons, consumer_main, &sh, seed) < 0 ||
	    start_roles(prods, sh.nprod, producer_main, &sh, seed + 1) < 0) {
		fprintf(stderr, "xthread: pthread_create failed\n");
		return 1;
	}
	double t0 = 0, t1 = 0;
	join_roles(prods, sh.nprod, &t0, &t1);
	join_roles(conss, sh.ncons, &t0, &t1);
	double secs = t1 - t0;

	double total = (double)nprod * (double)nblocks;
	fprintf(stderr, "xthread: %" PRIu64 " producer(s) x %" PRIu64 " blocks -> %" PRIu64
		" consumer(s), ring depth %" PRIu64 ": %.3f s, %.2f Mops/s\n",
		nprod, nblocks, ncons, depth, secs, total / secs / 1e6);
	printf("result ops_per_sec=%.0f\n", total / secs);
	return 0;
}
