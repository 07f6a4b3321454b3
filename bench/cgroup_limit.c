/*
 * cgroup_limit: a program whose live peak is ~80% of its memory limit but
 * that frees and reallocates in bursts, in phases of different block
 * sizes, so that what one phase freed is of little use to the next unless
 * the allocator gives it back.  Run inside a cgroup with the limit by
 * bench/cgroup_limit.sh, once per allocator (LD_PRELOAD), each in a fresh
 * child cgroup: OOM kills, failcnt, peak usage and throughput.
 *
 * Usage: cgroup_limit [-L MiB] [-f live fraction] [-r rounds] [-b bursts] [-v]
 *   -L  the limit the live peak is measured against (default 256)
 *   -f  live peak as a fraction of it (default 0.8)
 *   -r  rounds of the four phases (default 3)
 *   -b  bursts per phase: a third of the live blocks freed and taken again
 *       (default 20)
 *   -v  each phase's seconds and minor faults on stderr
 * Phases: small blocks (16-512 B), medium (1-16 KiB), large (64 KiB-1 MiB),
 * huge (2-8 MiB); every block written whole.  Prints
 * "result ops=N seconds=S mops=M peak_rss_mib=P".
 *
 * BENCH tiny: -L 32 -r 1 -b 2
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench.h"

static size_t size_of(unsigned phase, uint64_t *rng)
{
	uint64_t x = xorshift64s(rng);
	switch (phase) {
	case 0: return 16 + x % 497;
	case 1: return 1024 + x % (15 * 1024);
	case 2: return 65536 + x % (960 * 1024);
	default: return (2u << 20) + x % (6u << 20);
	}
}

static long minflt(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

int main(int argc, char **argv)
{
	uint64_t limit_mib = 256, rounds = 3, bursts = 20;
	double frac = 0.8;
	int verbose = 0;
	for (int o; (o = getopt(argc, argv, "L:f:r:b:v")) != -1;) {
		if (o == 'v') {
			verbose = 1;
			continue;
		}
		if ((o == 'L' && parse_u64(optarg, 8, 1 << 20, &limit_mib)) ||
		    (o == 'f' && parse_double(optarg, 0, 1, &frac)) ||
		    (o == 'r' && parse_u64(optarg, 1, 1000, &rounds)) ||
		    (o == 'b' && parse_u64(optarg, 0, 100000, &bursts)) || o == '?') {
			fprintf(stderr, "usage: cgroup_limit [-L MiB] [-f fraction] [-r rounds] [-b bursts] [-v]\n");
			return 2;
		}
	}
	size_t target = (size_t)((double)(limit_mib << 20) * frac);
	size_t cap = 4u << 20; /* most blocks a phase can hold (16 B ones) */
	void **blk = malloc(cap * sizeof(*blk));
	size_t *sz = malloc(cap * sizeof(*sz));
	uint64_t rng = 0x9e3779b97f4a7c15ull, ops = 0;
	double t0 = now_sec();
	for (uint64_t r = 0; r < rounds; r++) {
		for (unsigned phase = 0; phase < 4; phase++) {
			size_t n = 0, live = 0;
			double p0 = now_sec();
			long f0 = minflt();
			while (live < target && n < cap) { /* the phase builds up */
				sz[n] = size_of(phase, &rng);
				blk[n] = malloc(sz[n]);
				memset(blk[n], (int)n, sz[n]);
				live += sz[n++];
				ops++;
			}
			for (uint64_t b = 0; b < bursts; b++) { /* bursts: a third out, back in */
				for (size_t i = b % 3; i < n; i += 3)
					free(blk[i]), ops++;
				for (size_t i = b % 3; i < n; i += 3) {
					blk[i] = malloc(sz[i]);
					memset(blk[i], (int)i, sz[i]);
					ops++;
				}
			}
			for (size_t i = 0; i < n; i++) /* the phase ends */
				free(blk[i]), ops++;
			if (verbose)
				fprintf(stderr, "phase %lu.%u blocks=%zu seconds=%.3f minflt=%ld\n",
					(unsigned long)r, phase, n, now_sec() - p0, minflt() - f0);
		}
	}
	double secs = now_sec() - t0;
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("result ops=%lu seconds=%.3f mops=%.3f peak_rss_mib=%.1f\n", (unsigned long)ops, secs,
	       (double)ops / secs / 1e6, (double)ru.ru_maxrss / 1024.0);
	return 0;
}
