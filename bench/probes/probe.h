/*
 * What the probes in bench/probes/ share: failing with a message, the
 * clock in microseconds, madvise that must succeed, sleeping, a field of
 * /proc/self/smaps over a range, and median/min/max of samples.  Each
 * probe defines PROBE_NAME (its name in messages) before including this.
 */
#ifndef PROBE_H
#define PROBE_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "../bench.h" /* now_sec, minor_faults */

static inline void die(const char *what)
{
	fprintf(stderr, PROBE_NAME ": %s: %s\n", what, strerror(errno));
	exit(1);
}

static inline double now_us(void)
{
	return now_sec() * 1e6;
}

static inline void advise(void *p, size_t len, int advice, const char *what)
{
	if (madvise(p, len, advice) != 0)
		die(what);
}

static inline void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static inline void sleep_s(int s)
{
	sleep_ms(s * 1000L);
}

/* Sum of a field ("AnonHugePages", "Rss") over the mappings that overlap [p, p + len), in
 * kB. The caller keeps the rest of those mappings free of pages (or apart by PROT_NONE gaps). */
static inline long smaps_kb(const void *p, size_t len, const char *field)
{
	uintptr_t lo = (uintptr_t)p, hi = lo + len;
	size_t flen = strlen(field);
	FILE *f = fopen("/proc/self/smaps", "r");
	char *line = NULL;
	size_t cap = 0;
	int inside = 0;
	long total = 0;

	if (!f)
		die("/proc/self/smaps");
	while (getline(&line, &cap, f) > 0) {
		unsigned long start, end;
		char perms[8];
		if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) == 3) {
			inside = start < hi && end > lo;
			continue;
		}
		if (inside && strncmp(line, field, flen) == 0 && line[flen] == ':')
			total += strtol(line + flen + 1, NULL, 10);
	}
	free(line);
	fclose(f);
	return total;
}

static inline int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

struct stat3 {
	double med, min, max;
};

/* Median, min and max of n samples (v is not changed). */
static inline struct stat3 stats(const double *v, int n)
{
	double *t = malloc((size_t)n * sizeof *t);
	struct stat3 s;

	if (!t)
		die("malloc");
	memcpy(t, v, (size_t)n * sizeof *t);
	qsort(t, (size_t)n, sizeof *t, cmp_double);
	s.min = t[0];
	s.max = t[n - 1];
	s.med = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
	free(t);
	return s;
}

#endif /* PROBE_H */
