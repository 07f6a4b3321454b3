/*
 * limit: libarena's memory limit and pressure signal, run by
 * tests/test_limit.c under LD_PRELOAD.  Prints key=value lines.
 *
 * Usage: limit MODE [ARG]
 *   stats            the limit in force, its source, the signal watched
 *                    (with a second thread, so the background thread runs)
 *   fifo PATH        threaded; 32 MiB freed (dirty), then one byte written
 *                    to the FIFO PATH (MEMORY_PRESSURE_WATCH): prints the
 *                    time until the statistics show the purge (latency_us);
 *                    then closed: the signal watched (after_close)
 *   counters FILE    the same, the signal being FILE (a fake memory.events)
 *                    rewritten with a higher "high" count; threaded unless
 *                    ARG2 is "single" (then malloc misses look)
 *   resident [whole] a mixed workload, every block written (whole: all of
 *                    malloc_usable_size), half freed: the Rss of
 *                    libarena's mappings (smaps) against its figure
 *   wait             threaded; 32 MiB freed (dirty), then up to 3 s for a
 *                    pressure purge (the signal comes from the test)
 *   usage [MB]       single-threaded; MB (default 0) of huge blocks held
 *                    and never written (then 300 ms of malloc misses),
 *                    32 MiB freed dirty, then malloc
 *                    misses for 100 ms (the limit's looks at the cgroup's
 *                    usage, a fake memory.current)
 *   squeeze MB       threaded; 3/4 of MB freed dirty, 1/4 live, then MB/2
 *                    of anonymous memory outside libarena touched: under a
 *                    cgroup limit of MB the pressure signal must purge
 */
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "preload.h"

/* malloc and free that the compiler cannot drop as a pair */
static void churn(size_t size)
{
	void *volatile p = malloc(size);
	free(p);
}

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void *touch(void *arg)
{
	churn(100);
	pause(); /* alive: two threads hold caches */
	return arg;
}

/* A second thread allocates: the background thread starts (auto). */
static void threaded(void)
{
	pthread_t t;
	pthread_create(&t, NULL, touch, NULL);
	usleep(20000);
	for (int i = 0; i < 200; i++) /* malloc misses: bg_start */
		free(malloc(200000));
	usleep(50000);
}

static void print_stats(void)
{
	arena_stats_t s;
	stats_now(&s);
	printf("limit=%zu\nsource=%s\npressure=%s\nsignals=%lu\npurged_pressure=%lu\npurged_limit=%lu\n"
	       "resident=%zu\ndirty=%zu\nbackground=%u\n",
	       s.memory_limit, s.memory_limit_source, s.pressure_source,
	       (unsigned long)s.pressure_signals, (unsigned long)s.purged_pressure,
	       (unsigned long)s.purged_limit, s.resident, s.resident_dirty, s.background_thread);
}

static void **dirty_up(size_t mb)
{
	size_t n = mb * 16; /* 64 KiB blocks and larger */
	void **p = malloc(n * sizeof(*p));
	for (size_t i = 0; i < n; i++) {
		size_t sz = (i % 3 == 0) ? 65536 : (i % 3 == 1) ? 100000 : 24576;
		p[i] = malloc(sz);
		memset(p[i], 1, sz);
	}
	for (size_t i = 0; i < n; i++)
		free(p[i]);
	free(p);
	return NULL;
}

/* Waits up to ms for a pressure purge: the latency in us, or -1. */
static double wait_purge(double t0, int ms, int single)
{
	arena_stats_t s;
	for (int i = 0; i < ms * 10; i++) {
		if (single)
			for (int k = 0; k < 100; k++)
				churn(300000); /* misses: the slow path's look */
		stats_now(&s);
		if (s.purged_pressure > 0)
			return now_us() - t0;
		usleep(100);
	}
	return -1;
}

static int mode_fifo(const char *path)
{
	threaded();
	dirty_up(32);
	int fd = open(path, O_WRONLY | O_NONBLOCK);
	if (fd < 0) {
		printf("FAIL: open %s\n", path);
		return 1;
	}
	double t0 = now_us();
	if (write(fd, "x", 1) != 1)
		return 1;
	printf("latency_us=%.0f\n", wait_purge(t0, 2000, 0));
	print_stats();
	close(fd); /* the writer gone: the thread stops polling the FIFO */
	usleep(200000);
	arena_stats_t st;
	stats_now(&st);
	printf("after_close=%s\n", st.pressure_source);
	return 0;
}

static int mode_counters(const char *file, int single)
{
	if (!single)
		threaded();
	dirty_up(16);
	sleep(1); /* the counters are read at most once a second */
	FILE *f = fopen(file, "w");
	fprintf(f, "low 0\nhigh 3\nmax 0\noom 0\noom_kill 0\n");
	fclose(f);
	double t0 = now_us();
	if (single)
		dirty_up(16);
	printf("latency_us=%.0f\n", wait_purge(t0, 5000, single));
	print_stats();
	return 0;
}

/* One mapping of /proc/self/smaps: its range and counts (bytes). */
typedef struct map {
	uintptr_t lo, hi;
	size_t rss, lazy, huge;
} map_t;

enum { MAXMAPS = 4096 };
static map_t maps[MAXMAPS];

static size_t read_smaps(void)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	size_t n = 0, kb;
	unsigned long lo, hi;
	while (f && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
			if (n < MAXMAPS)
				maps[n++] = (map_t){ .lo = lo, .hi = hi };
		} else if (n && sscanf(line, "Rss: %zu kB", &kb) == 1) {
			maps[n - 1].rss = kb << 10;
		} else if (n && sscanf(line, "LazyFree: %zu kB", &kb) == 1) {
			maps[n - 1].lazy = kb << 10;
		} else if (n && sscanf(line, "AnonHugePages: %zu kB", &kb) == 1) {
			maps[n - 1].huge = kb << 10;
		}
	}
	if (f)
		fclose(f);
	return n;
}

/* The kernel's counts of libarena's chunks: the mappings that hold one of
 * the blocks addrs and those that touch them without a gap (a region is
 * one reservation, split into mappings by commits, advice and moves; its
 * tables are mapped apart).  verbose: each mapping on stdout. */
static map_t kernel_counts(void *const *addrs, size_t naddrs, int verbose)
{
	size_t n = read_smaps();
	char *in = calloc(n ? n : 1, 1);
	map_t sum = { 0 };
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < naddrs && !in[i]; k++)
			in[i] = addrs[k] && (uintptr_t)addrs[k] >= maps[i].lo &&
				(uintptr_t)addrs[k] < maps[i].hi;
	for (int changed = 1; changed;) {
		changed = 0;
		for (size_t i = 0; i + 1 < n; i++)
			if (maps[i].hi == maps[i + 1].lo && in[i] != in[i + 1])
				in[i] = in[i + 1] = 1, changed = 1;
	}
	for (size_t i = 0; i < n; i++) {
		if (!in[i])
			continue;
		sum.rss += maps[i].rss, sum.lazy += maps[i].lazy, sum.huge += maps[i].huge;
		if (verbose && maps[i].rss)
			printf("map %lx-%lx rss=%zu huge=%zu lazy=%zu\n", (unsigned long)maps[i].lo,
			       (unsigned long)maps[i].hi, maps[i].rss, maps[i].huge, maps[i].lazy);
	}
	free(in);
	return sum;
}

static void *fill(size_t size, int c)
{
	char *p = malloc(size);
	if (p)
		memset(p, c, size);
	return p;
}

enum { N = 60000, NGROW = 24 };
static void *p[N + NGROW];
static size_t sz[N];

/* Small, large and huge blocks written (whole: all of malloc_usable_size),
 * half freed, everything free purged (malloc_trim), a quarter taken back;
 * blocks grown by realloc from 48 KiB to 9 MiB (in place, moved, copied),
 * every third freed; a decay period's wait (decay_ms:200) purges what was
 * freed before it. */
static void mixed_workload(int whole)
{
	unsigned x = 12345;
	for (int i = 0; i < N; i++) {
		x = x * 1103515245u + 12345u;
		unsigned r = (x >> 8) % 1000;
		sz[i] = r < 900 ? 16 + r % 2000 : r < 995 ? 20000 + (x >> 12) % 200000 : 1500000 + (x >> 4) % 3000000;
		p[i] = malloc(sz[i]);
		sz[i] = whole ? malloc_usable_size(p[i]) : sz[i];
		memset(p[i], 0x5a, sz[i]);
	}
	for (int i = 0; i < N; i += 2)
		free(p[i]), p[i] = NULL;
	malloc_trim(0);
	for (int i = 0; i < N; i += 4) /* and some back */
		p[i] = fill(sz[i], 0x5b);
	for (int g = 0; g < NGROW; g++)
		p[N + g] = fill(48 << 10, 0x5c);
	for (size_t size = 48 << 10; size < (9u << 20); size = size * 3 / 2)
		for (int g = 0; g < NGROW; g++) {
			size_t to = size * 3 / 2 + (size_t)g * 4096;
			char *q = realloc(p[N + g], to);
			memset(q + size, 0x5d, to - size);
			p[N + g] = q;
		}
	for (int g = 0; g < NGROW; g += 3)
		free(p[N + g]), p[N + g] = NULL;
	usleep(500000); /* decay */
	for (int i = 1; i < N; i += 8) /* freed after the decay: dirty */
		free(p[i]), p[i] = NULL;
}

static int mode_resident(int whole)
{
	static void *addrs[N + NGROW];
	int (*res_get)(arena_resident_t *) =
		(int (*)(arena_resident_t *))dlsym(RTLD_DEFAULT, "arena_stats_resident");
	void *live = fill(1 << 20, 1); /* an address in the region whatever happens */
	mixed_workload(whole);
	memcpy(addrs, p, sizeof(addrs));
	addrs[0] = live;
	arena_stats_t s;
	stats_now(&s);
	arena_resident_t k = { .source = "none" };
	double t0 = now_us();
	if (res_get)
		res_get(&k);
	printf("scan_us=%.0f\n", now_us() - t0);
	map_t m = kernel_counts(addrs, N + NGROW, getenv("LIMIT_VERBOSE") != NULL);
	size_t mine = res_get ? k.total : s.resident;
	double err = ((double)mine - (double)m.rss) / (double)m.rss;
	printf("resident=%zu\nkernel_rss=%zu\nkernel_lazy=%zu\nkernel_huge=%zu\nerror_pct=%.3f\n"
	       "source=%s\nlive=%zu\ndirty=%zu\nlazy=%zu\nzero=%zu\nhuge=%zu\n"
	       "own_resident=%zu\nown_live=%zu\nown_dirty=%zu\nown_lazy=%zu\nown_zero=%zu\n"
	       "own_error_pct=%.3f\n",
	       mine, m.rss, m.lazy, m.huge, 100 * err, k.source, k.live, k.dirty, k.lazy, k.zero,
	       k.huge, s.resident, s.resident_live, s.resident_dirty, s.resident_lazy, s.zero,
	       100 * ((double)s.resident - (double)m.rss) / (double)m.rss);
	return 0;
}

static int mode_wait(void)
{
	threaded();
	dirty_up(32);
	printf("latency_us=%.0f\n", wait_purge(now_us(), 3000, 0));
	print_stats();
	return 0;
}

static int mode_usage(size_t unwritten_mb)
{
	for (size_t i = 0; i < unwritten_mb / 8; i++) /* held to the end */
		if (!malloc(8 << 20))
			return 1;
	for (int i = 0; unwritten_mb && i < 300; i++) { /* looks past the reading before them */
		churn(300000);
		usleep(1000);
	}
	dirty_up(32);
	for (int i = 0; i < 100; i++) {
		churn(300000);
		usleep(1000);
	}
	print_stats();
	return 0;
}

static int mode_squeeze(size_t mb)
{
	threaded();
	size_t live_n = mb * 4; /* 1/4 of mb in 64 KiB blocks */
	void **live = malloc(live_n * sizeof(*live));
	for (size_t i = 0; i < live_n; i++) {
		live[i] = malloc(65536);
		memset(live[i], 1, 65536);
	}
	dirty_up(mb / 2);
	arena_stats_t s;
	stats_now(&s);
	printf("before_dirty=%zu\n", s.resident_dirty);
	size_t n = (mb / 2) << 20;
	char *q = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double t0 = now_us();
	/* 2 MiB at a time with a breath between: the signal is asynchronous,
	 * and a touch of all of it in a few ms would outrun any reaction */
	for (size_t i = 0; i < n; i += 4096) {
		if (i % (2u << 20) == 0)
			usleep(5000);
		q[i] = 1;
	}
	printf("touch_us=%.0f\n", now_us() - t0);
	usleep(200000);
	print_stats();
	printf("pressure_purge_us=%lu\n", (unsigned long)s.pressure_purge_us);
	stats_now(&s);
	printf("last_purge_us=%lu\n", (unsigned long)s.pressure_purge_us);
	return 0;
}

int main(int argc, char **argv)
{
	stats_find();
	setvbuf(stdout, NULL, _IONBF, 0);
	const char *mode = argc > 1 ? argv[1] : "stats";
	if (!strcmp(mode, "stats")) {
		threaded();
		print_stats();
		return 0;
	}
	if (!strcmp(mode, "fifo") && argc > 2)
		return mode_fifo(argv[2]);
	if (!strcmp(mode, "counters") && argc > 2)
		return mode_counters(argv[2], argc > 3 && !strcmp(argv[3], "single"));
	if (!strcmp(mode, "wait"))
		return mode_wait();
	if (!strcmp(mode, "usage"))
		return mode_usage(argc > 2 ? (size_t)atoi(argv[2]) : 0);
	if (!strcmp(mode, "resident"))
		return mode_resident(argc > 2 && !strcmp(argv[2], "whole"));
	if (!strcmp(mode, "squeeze") && argc > 2)
		return mode_squeeze((size_t)atoi(argv[2]));
	printf("usage: limit stats|fifo PATH|counters FILE [single]|wait|usage [MB]|resident|squeeze MB\n");
	return 2;
}
