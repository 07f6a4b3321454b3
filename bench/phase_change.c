/*
 * phase_change: one thread fills memory with blocks of one size, another
 * frees 99% of them, and the program moves on to the next size.
 *
 * Two threads, a filler and a freer.  A round is ten phases, one per block
 * size, in this order: 48, 96, 200, 400, 800, 1600, 3200, 8000, 16000 and
 * 40000 B.  In each phase the filler mallocs -s MiB (default 150) of blocks
 * of that size (-s MiB / size of them) into an array, writing in each block
 * a tag in its first 8 bytes and one byte in every further 4 KiB, so that
 * every page of it is touched.  It then hands the whole array over to the
 * freer and starts the next phase in a second array.  The freer checks each
 * block's tag and frees it (a free of a block another thread allocated),
 * except one in -k (default 100: 1%, the blocks whose index is a multiple
 * of k), which it keeps until the end of the round and then frees too.  So
 * the memory freed by one phase (all but 1% of it, scattered) is there to
 * be reused by the following phases' different sizes, while the freer's
 * frees of phase p run at the same time as the filler's mallocs of phase
 * p + 1.  Before it hands phase p over, the filler waits until the freer
 * has finished phase p - 1 (so two arrays are enough, and at most two
 * phases' blocks are live beside the survivors: one being filled, one
 * being freed).  Right then, with only phase p's blocks and the survivors
 * live, it reads the process's RSS (/proc/self/statm): the -s MiB just
 * filled, the survivors, the two arrays of pointers (8 B per 48 B block of
 * -s each: ~52 MiB at -s 150), and what the allocator holds on to.  -r
 * rounds (default 3) follow each other.  Hand-overs go through a mutex and
 * a condition variable (once per phase).
 *
 * Fixed work: every block is one malloc and one free, two ops.  The clock
 * runs from the start of the first phase to the freer's last free, as the
 * threads read it.
 *
 * Usage: phase_change [-s MiB per phase] [-r rounds] [-k keep one block in k]
 * Prints "result seconds=<s> ops_per_sec=<mallocs + frees / s>
 * peak_rss_mib=<the largest RSS read>" on stdout, a `series` line per phase
 * (step=<round>-<size> rss_mib=<RSS at the hand-over> ms=<the phase's
 * filling time>), and a human-readable account on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax):
 * BENCH tiny: -s 4 -r 1
 * BENCH series: rss_mib, ms
 * BENCH quick: 150m-r3 | -s 150 -r 3
 * BENCH full: 150m-r10 | -s 150 -r 10
 * BENCH full: 500m-r1 | -s 500 -r 1
 * BENCH full: 150m-r3-keep10 | -s 150 -r 3 -k 10
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define NSIZES 10
#define PAGE 4096

static const size_t sizes[NSIZES] = { 48, 96, 200, 400, 800, 1600, 3200, 8000, 16000, 40000 };

/* What one phase hands over: its blocks and their size. */
typedef struct phase {
	uint64_t **blocks;
	size_t count, size;
} phase_t;

typedef struct shared {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	phase_t handed[2];  /* by array: valid while busy[i] */
	int busy[2];        /* array i handed over, not yet emptied */
	uint64_t nhanded;   /* phases handed over, in order */
	uint64_t nphases;   /* phases in the run */
	uint64_t keep;      /* -k */
	size_t per_phase;   /* bytes */
	double t_end;       /* the freer's last free */
	uint64_t frees;
	int failed;
} shared_t;

/* What block i of a phase of blocks of size bytes holds in its first 8. */
static uint64_t tag_of(size_t i, size_t size)
{
	return splitmix64(i * 131 + size);
}

static double rss_mib(void)
{
	long pages = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
			resident = 0;
		fclose(f);
	}
	return (double)resident * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

/* Mallocs the phase's blocks into blocks[], each written; -1 on NULL. */
static int fill(uint64_t **blocks, size_t count, size_t size)
{
	for (size_t i = 0; i < count; i++) {
		unsigned char *p = malloc(size);
		if (!p)
			return -1;
		*(uint64_t *)p = tag_of(i, size);
		for (size_t off = PAGE; off < size; off += PAGE)
			p[off] = (unsigned char)i;
		blocks[i] = (uint64_t *)p;
	}
	return 0;
}

/* Frees a handed-over phase but for its survivors, which move to
 * survivors[]; -1 on a block whose tag was overwritten. */
static int empty_phase(shared_t *s, const phase_t *ph, uint64_t **survivors, size_t *nsurv)
{
	for (size_t i = 0; i < ph->count; i++) {
		uint64_t *b = ph->blocks[i];
		if (*b != tag_of(i, ph->size)) {
			fprintf(stderr, "phase_change: block %zu of %zu B (%p) was overwritten\n",
				i, ph->size, (void *)b);
			return -1;
		}
		if (i % s->keep == 0) {
			survivors[(*nsurv)++] = b;
		} else {
			free(b);
			s->frees++;
		}
	}
	return 0;
}

static void *freer_main(void *arg)
{
	shared_t *s = arg;
	size_t cap = 0;
	for (int i = 0; i < NSIZES; i++)
		cap += s->per_phase / sizes[i] / s->keep + 1;
	uint64_t **survivors = malloc(cap * sizeof(*survivors));
	size_t nsurv = 0;
	int failed = !survivors;

	for (uint64_t p = 0; p < s->nphases; p++) {
		pthread_mutex_lock(&s->lock);
		while (s->nhanded <= p && !s->failed)
			pthread_cond_wait(&s->cond, &s->lock);
		failed |= s->failed;
		phase_t ph = s->handed[p % 2];
		pthread_mutex_unlock(&s->lock);
		if (!failed && empty_phase(s, &ph, survivors, &nsurv) < 0)
			failed = 1;
		if (p % NSIZES == NSIZES - 1 || failed) {
			for (size_t i = 0; i < nsurv; i++)
				free(survivors[i]);
			s->frees += nsurv;
			nsurv = 0;
		}
		pthread_mutex_lock(&s->lock);
		s->busy[p % 2] = 0;
		s->failed |= failed;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
		if (failed)
			break;
	}
	s->t_end = now_sec();
	free(survivors);
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: phase_change [-s MiB per phase] [-r rounds] [-k keep one in k]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t mib = 150, rounds = 3, keep = 100;
	int c;

	while ((c = getopt(argc, argv, "s:r:k:h")) != -1) {
		int bad = 0;
		switch (c) {
		case 's': bad = parse_u64(optarg, 1, 1 << 16, &mib); break;
		case 'r': bad = parse_u64(optarg, 1, 1000, &rounds); break;
		case 'k': bad = parse_u64(optarg, 1, UINT32_MAX, &keep); break;
		default: usage();
		}
		if (bad)
			usage();
	}
	if (optind != argc)
		usage();

	shared_t s = { .nphases = rounds * NSIZES, .keep = keep, .per_phase = (size_t)mib << 20 };
	pthread_mutex_init(&s.lock, NULL);
	pthread_cond_init(&s.cond, NULL);
	size_t most = s.per_phase / sizes[0];
	uint64_t **arrays[2] = { malloc(most * sizeof(uint64_t *)), malloc(most * sizeof(uint64_t *)) };
	if (!arrays[0] || !arrays[1])
		return 1;
	memset(arrays[0], 0, most * sizeof(uint64_t *)); /* fault them in before the clock */
	memset(arrays[1], 0, most * sizeof(uint64_t *));

	pthread_t freer;
	if (pthread_create(&freer, NULL, freer_main, &s)) {
		fprintf(stderr, "phase_change: pthread_create failed\n");
		return 1;
	}
	uint64_t mallocs = 0;
	double peak = 0, t0 = now_sec();
	int stop = 0;
	for (uint64_t p = 0; p < s.nphases && !stop; p++) {
		size_t size = sizes[p % NSIZES], count = s.per_phase / size;
		double tp = now_sec();
		int failed = fill(arrays[p % 2], count, size) < 0;
		double ms = (now_sec() - tp) * 1e3;
		mallocs += count;
		pthread_mutex_lock(&s.lock);
		while (p > 0 && s.busy[(p - 1) % 2] && !s.failed)
			pthread_cond_wait(&s.cond, &s.lock);
		stop = s.failed;
		pthread_mutex_unlock(&s.lock);
		double rss = rss_mib();
		peak = rss > peak ? rss : peak;
		printf("series step=%" PRIu64 "-%zu rss_mib=%.1f ms=%.2f\n", p / NSIZES + 1, size, rss, ms);
		pthread_mutex_lock(&s.lock);
		s.handed[p % 2] = (phase_t){ arrays[p % 2], count, size };
		s.busy[p % 2] = 1;
		s.nhanded = p + 1;
		if (failed) {
			fprintf(stderr, "phase_change: malloc(%zu) returned NULL\n", size);
			s.failed = 1;
		}
		stop |= s.failed;
		pthread_cond_broadcast(&s.cond);
		pthread_mutex_unlock(&s.lock);
	}
	pthread_join(freer, NULL);
	free(arrays[0]);
	free(arrays[1]);
	if (s.failed || s.frees != mallocs) {
		fprintf(stderr, "phase_change: failed (%" PRIu64 " mallocs, %" PRIu64 " frees)\n",
			mallocs, s.frees);
		return 1;
	}
	double secs = s.t_end - t0, ops = (double)(mallocs + s.frees);
	fprintf(stderr, "phase_change: %" PRIu64 " round(s) of 10 sizes x %" PRIu64 " MiB, one block"
		" in %" PRIu64 " kept to the round's end: %" PRIu64 " mallocs and as many frees, %.3f s,"
		" %.2f Mops/s, peak RSS at a hand-over %.1f MiB\n", rounds, mib, keep,
		mallocs, secs, ops / secs / 1e6, peak);
	printf("result seconds=%.4f ops_per_sec=%.0f peak_rss_mib=%.1f\n", secs, ops / secs, peak);
	return 0;
}
