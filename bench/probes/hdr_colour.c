/*
 * hdr_colour.c: the allocator's own metadata at the same offset in every 2 MiB chunk.
 * (issue 16: the colouring of arena chunk headers)
 *
 * What it measures.  An allocator that keeps a header at the start of every 2 MiB
 * chunk puts the same fields at the same address bits 0-20 in every chunk: in the
 * same L1 set (bits 6-11) whatever the page size, and, where a huge page is physically
 * contiguous (a host that backs its guest with huge pages), in the same L2 set
 * (bits 6-16) too.  A walk over more such headers than the cache has ways misses on
 * every one.  libarena walks its arena's chunks (c->longest, c->link) to place a
 * large block, and reads c->page[] and the page maps to free one.
 *
 * The workload, under whichever malloc is loaded (LD_PRELOAD): -m chunks' worth of
 * large blocks (-s bytes, default 128 KiB: 15 to a libarena chunk) are allocated and
 * written once; then -n times a random block is freed and a block of the same size
 * allocated in its place (the freed run is the only one that fits, so libarena walks
 * its chunks up to it).  Reported: ns per free+malloc (this thread's CPU time, and
 * wall), the median of -r rounds, and the RSS.  Under valgrind --tool=cachegrind
 * --cache-sim=yes the D1 and LL misses count the aliasing (cachegrind indexes its
 * caches by virtual address, which for the L1 is the physical index as well).
 *
 * Run: LD_PRELOAD=build/libarena.so build/bench/probes/hdr_colour -m 64
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545F4914F6CDD1Dull;
}

int main(int argc, char **argv)
{
	size_t size = 128 << 10, chunks = 64;
	long n = 200000, rounds = 5;
	int opt;
	while ((opt = getopt(argc, argv, "s:m:n:r:")) != -1) {
		switch (opt) {
		case 's': size = strtoul(optarg, NULL, 0); break;
		case 'm': chunks = strtoul(optarg, NULL, 0); break;
		case 'n': n = strtol(optarg, NULL, 0); break;
		case 'r': rounds = strtol(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: hdr_colour [-s bytes] [-m chunks] [-n ops] [-r rounds]\n");
			return 2;
		}
	}
	size_t per_chunk = ((2u << 20) - 8192) / size, nblocks = chunks * (per_chunk ? per_chunk : 1);
	char **b = calloc(nblocks, sizeof *b);
	if (!b)
		return 1;
	for (size_t i = 0; i < nblocks; i++) {
		if (!(b[i] = malloc(size))) {
			fprintf(stderr, "hdr_colour: malloc: %s\n", strerror(errno));
			return 1;
		}
		memset(b[i], (int)i, size);
	}
	double *cpu = calloc((size_t)rounds, sizeof *cpu), *wall = calloc((size_t)rounds, sizeof *wall);
	unsigned long sum = 0;
	for (long r = 0; r < rounds; r++) {
		double c0 = now_s(CLOCK_THREAD_CPUTIME_ID), w0 = now_s(CLOCK_MONOTONIC);
		for (long i = 0; i < n; i++) {
			size_t k = next_rand() % nblocks;
			free(b[k]);
			b[k] = malloc(size);
			b[k][0] = (char)i;
			sum += (uintptr_t)b[k] >> 12 & 1;
		}
		cpu[r] = (now_s(CLOCK_THREAD_CPUTIME_ID) - c0) / (double)n * 1e9;
		wall[r] = (now_s(CLOCK_MONOTONIC) - w0) / (double)n * 1e9;
	}
	qsort(cpu, (size_t)rounds, sizeof *cpu, cmp_double);
	qsort(wall, (size_t)rounds, sizeof *wall, cmp_double);
	long rss_kib = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f) {
		long pages, res;
		if (fscanf(f, "%ld %ld", &pages, &res) == 2)
			rss_kib = res * (sysconf(_SC_PAGESIZE) / 1024);
		fclose(f);
	}
	printf("result cpu_ns_per_op=%.1f cpu_min=%.1f cpu_max=%.1f wall_ns_per_op=%.1f blocks=%zu rss_kib=%ld check=%lu\n",
	       cpu[rounds / 2], cpu[0], cpu[rounds - 1], wall[rounds / 2], nblocks, rss_kib, sum & 1);
	return 0;
}
