/*
 * bench.h: helpers shared by the benchmark workloads, bench/<name>.c: random
 * numbers, the clock, the minor-fault count and the parsing of option values.
 * Each workload is one C file built on its own (make bench-build), so these
 * are static inline; what is a workload's own stays in its file.
 */
#ifndef BENCH_H
#define BENCH_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

/* splitmix64: a 64-bit mix of x, for seeds and for values recomputable from
 * an index. */
static inline uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* xorshift64*: the next number of the generator whose state is *s (never 0). */
static inline uint64_t xorshift64s(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

/* The xorshift64* state of thread (or stream) i of a run seeded with seed:
 * a run is the same sequence of numbers under every allocator. */
static inline uint64_t rng_seed(uint64_t seed, uint64_t i)
{
	return splitmix64(seed * 1000003u + i) | 1;
}

/* CLOCK_MONOTONIC, in seconds. */
static inline double now_sec(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* This process's minor page faults so far (getrusage ru_minflt). */
static inline long minor_faults(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

/* A decimal integer in [min, max] into *out; -1 (and *out unchanged) if s is
 * anything else. */
static inline int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

/* A number greater than gt and at most max (strtod's syntax, so fractions
 * too) into *out; -1 if s is anything else. */
static inline int parse_double(const char *s, double gt, double max, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v > gt && v <= max))
		return -1;
	*out = v;
	return 0;
}

/* The multiplier of a binary size suffix k, m or g (either case) at *p,
 * stepping *p over it; 1, *p unchanged, if there is none. */
static inline uint64_t size_suffix(char **p)
{
	switch (**p) {
	case 'k': case 'K': ++*p; return (uint64_t)1 << 10;
	case 'm': case 'M': ++*p; return (uint64_t)1 << 20;
	case 'g': case 'G': ++*p; return (uint64_t)1 << 30;
	}
	return 1;
}

/*
 * A size in bytes into *out: a number with an optional suffix k, m or g
 * (KiB, MiB, GiB; either case), in [min, max].  "8388608", "512m", "1G";
 * fractions too, rounded to the nearest byte: "2.1M", "1.5g".  A whole number
 * is exact; anything else is read by strtod (and must be above 0).  -1 (and
 * *out unchanged) on a bad value.
 */
static inline int parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	uint64_t scale, v;
	if (s[0] == '-')
		return -1;
	errno = 0;
	unsigned long long n = strtoull(s, &end, 10);
	if (!errno && end != s) {
		scale = size_suffix(&end);
		if (*end == '\0') {
			if (n > max / scale)
				return -1;
			v = n * scale;
			goto range;
		}
	}
	errno = 0;
	double d = strtod(s, &end);
	if (errno || end == s || !(d > 0))
		return -1;
	scale = size_suffix(&end);
	d = round(d * (double)scale);
	if (*end || !(d < 18446744073709551616.0)) /* 2^64 */
		return -1;
	v = (uint64_t)d;
range:
	if (v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

#endif /* BENCH_H */
