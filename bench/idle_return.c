/*
 * idle_return: does an idle program give its memory back, and at what cost
 * in wake-ups? (issue 17)
 *
 * t threads (-t, default 2; 1: the main thread alone, the program stays
 * single-threaded) each allocate their share of m MiB (-m, default 512) in
 * a mix of blocks, writing every byte: by count 90% small (16 B-1 KiB), 9%
 * large (16-512 KiB), 1% huge (2-8 MiB), which puts about a third of the
 * bytes in each kind.  Then each frees all but every k-th block (-k,
 * default 33: ~3% kept) and waits on a condition variable, alive, without
 * calling the allocator again.  The main thread, from the moment the last
 * free returned, samples the process's RSS every 100 ms for s seconds (-s,
 * default 7.5), reading /proc/self/statm with read(2): the allocator is
 * not called while it watches.
 *
 * Wake-ups: the context switches (voluntary + involuntary, from
 * /proc/self/task/TID/status) of every thread the workload did not create
 * itself, that is the allocator's own, between w1 and w2 seconds after the
 * last free (-w, default 2,7: decay_ms + 1 s with libarena's default decay
 * of 1 s, and 5 s after that).  Idle threads of the workload sleep on a
 * futex with no timeout and switch no more.
 *
 * Figures: live bytes (the kept blocks' requested sizes), RSS / live at the
 * end of the watch, at w1 and the peak RSS after the burst, the wake-ups,
 * and the number of threads the process has at the end.
 *
 * Usage: idle_return [-t threads] [-m MiB] [-k keep-every] [-s seconds]
 *                    [-w from,to] [-r seed]
 * Prints "series step=<ms after the last free> rss_mib=<> rss_live=<>" per
 * sample, then "result rss_live=<end> rss_live_w1=<at w1> rss_mib=<end>
 * live_mib=<> wakeups=<> threads=<>" on stdout, a line on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax):
 * BENCH tiny: -t 2 -m 16 -s 0.3 -w 0.1,0.2
 * BENCH ratio: rss_live, rss_live_w1
 * BENCH series: rss_live
 * BENCH quick: 2t | -t 2
 * BENCH quick: 1t | -t 1
 */
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define MAX_THREADS 16
#define MAX_SAMPLES 4096

typedef struct worker {
	pthread_t thread;
	unsigned index;
	pid_t tid;
	size_t bytes;    /* to allocate                */
	size_t live;     /* kept, requested sizes      */
	uint64_t seed;
} worker_t;

static unsigned keep_every = 33;
static unsigned nthreads = 2;
static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static unsigned done;   /* workers whose burst is over */
static int finish;      /* set by main: workers may return */

static size_t block_size(uint64_t r)
{
	unsigned kind = (unsigned)(r % 100);
	r >>= 8;
	if (kind < 90)
		return 16 + r % 1009;
	if (kind < 99)
		return ((size_t)16 << 10) + r % ((size_t)496 << 10);
	return ((size_t)2 << 20) + r % ((size_t)6 << 20);
}

/* The burst: allocate w->bytes, write it, keep every k-th block. */
static void burst(worker_t *w)
{
	size_t cap = 1 << 16, n = 0, total = 0;
	void **blocks = malloc(cap * sizeof(*blocks));
	size_t *sizes = malloc(cap * sizeof(*sizes));
	uint64_t rng = w->seed;
	if (!blocks || !sizes)
		abort();
	while (total < w->bytes) {
		if (n == cap) {
			cap *= 2;
			blocks = realloc(blocks, cap * sizeof(*blocks));
			sizes = realloc(sizes, cap * sizeof(*sizes));
			if (!blocks || !sizes)
				abort();
		}
		size_t s = block_size(xorshift64s(&rng));
		char *p = malloc(s);
		if (!p)
			abort();
		memset(p, (int)(n & 0xff) | 1, s);
		blocks[n] = p;
		sizes[n++] = s;
		total += s;
	}
	for (size_t i = 0; i < n; i++) {
		if (i % keep_every == keep_every - 1)
			w->live += sizes[i]; /* kept: stays allocated to the end */
		else
			free(blocks[i]);
	}
	/* The lists are the workload's own bookkeeping, not the program's
	 * live memory: gone before the watch starts. */
	free(blocks);
	free(sizes);
}

static void *worker_main(void *arg)
{
	worker_t *w = arg;
	w->tid = (pid_t)syscall(SYS_gettid);
	burst(w);
	pthread_mutex_lock(&mtx);
	done++;
	pthread_cond_broadcast(&cond);
	while (!finish)
		pthread_cond_wait(&cond, &mtx);
	pthread_mutex_unlock(&mtx);
	return NULL;
}

/* RSS in bytes, from /proc/self/statm, with read(2) into the stack. */
static size_t rss_bytes(void)
{
	char buf[128];
	int fd = open("/proc/self/statm", O_RDONLY);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	unsigned long size, resident;
	if (sscanf(buf, "%lu %lu", &size, &resident) != 2)
		return 0;
	return resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* The number in "key:\t<n>" of a status file's text. */
static unsigned long status_field(const char *text, const char *key)
{
	const char *p = strstr(text, key);
	return p ? strtoul(p + strlen(key), NULL, 10) : 0;
}

struct linux_dirent64 {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

/* Context switches of the threads not in skip[0..nskip) (the allocator's),
 * and the number of threads in all; getdents64 and read(2), no malloc. */
static unsigned long foreign_switches(const pid_t *skip, unsigned nskip, unsigned *threads)
{
	char dirbuf[4096], path[64], text[2048];
	unsigned long sum = 0;
	*threads = 0;
	int dfd = open("/proc/self/task", O_RDONLY | O_DIRECTORY);
	if (dfd < 0)
		return 0;
	long n;
	while ((n = syscall(SYS_getdents64, dfd, dirbuf, sizeof(dirbuf))) > 0) {
		for (long off = 0; off < n;) {
			struct linux_dirent64 *d = (void *)(dirbuf + off);
			off += d->d_reclen;
			if (d->d_name[0] == '.')
				continue;
			(*threads)++;
			pid_t tid = (pid_t)atoi(d->d_name);
			int mine = 0;
			for (unsigned i = 0; i < nskip; i++)
				mine |= skip[i] == tid;
			if (mine)
				continue;
			snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)tid);
			int fd = open(path, O_RDONLY);
			if (fd < 0)
				continue;
			ssize_t got = read(fd, text, sizeof(text) - 1);
			close(fd);
			if (got <= 0)
				continue;
			text[got] = 0;
			sum += status_field(text, "voluntary_ctxt_switches:") +
			       status_field(text, "nonvoluntary_ctxt_switches:");
		}
	}
	close(dfd);
	return sum;
}

static void sleep_until(double t)
{
	double left = t - now_sec();
	if (left <= 0)
		return;
	struct timespec ts = { (time_t)left, (long)((left - (double)(time_t)left) * 1e9) };
	while (nanosleep(&ts, &ts) != 0)
		;
}

int main(int argc, char **argv)
{
	uint64_t mib = 512, seed = 17, v;
	double watch = 7.5, w1 = 2.0, w2 = 7.0;
	int opt;
	while ((opt = getopt(argc, argv, "t:m:k:s:w:r:")) != -1) {
		switch (opt) {
		case 't': if (parse_u64(optarg, 1, MAX_THREADS, &v)) return 2; nthreads = (unsigned)v; break;
		case 'm': if (parse_u64(optarg, 1, 1 << 16, &mib)) return 2; break;
		case 'k': if (parse_u64(optarg, 1, 1000000, &v)) return 2; keep_every = (unsigned)v; break;
		case 's': if (parse_double(optarg, 0, 3600, &watch)) return 2; break;
		case 'w':
			if (sscanf(optarg, "%lf,%lf", &w1, &w2) != 2 || w1 < 0 || w2 < w1) {
				fprintf(stderr, "idle_return: -w from,to\n");
				return 2;
			}
			break;
		case 'r': if (parse_u64(optarg, 0, UINT64_MAX, &seed)) return 2; break;
		default:
			fprintf(stderr, "usage: idle_return [-t threads] [-m MiB] [-k keep-every] "
					"[-s seconds] [-w from,to] [-r seed]\n");
			return 2;
		}
	}
	if (w2 > watch)
		watch = w2;
	static worker_t w[MAX_THREADS];
	pid_t mine[MAX_THREADS + 1];
	mine[0] = (pid_t)syscall(SYS_gettid);
	size_t share = (size_t)(mib << 20) / nthreads;
	for (unsigned i = 0; i < nthreads; i++)
		w[i] = (worker_t){ .index = i, .bytes = share, .seed = rng_seed(seed, i) };
	if (nthreads == 1) {
		burst(&w[0]);
	} else {
		for (unsigned i = 0; i < nthreads; i++)
			if (pthread_create(&w[i].thread, NULL, worker_main, &w[i]) != 0)
				return 1;
		pthread_mutex_lock(&mtx);
		while (done < nthreads)
			pthread_cond_wait(&cond, &mtx);
		pthread_mutex_unlock(&mtx);
	}
	/* From here to the report the allocator is not called. */
	double t0 = now_sec();
	unsigned nmine = 1;
	for (unsigned i = 0; nthreads > 1 && i < nthreads; i++)
		mine[nmine++] = w[i].tid;
	size_t live = 0;
	for (unsigned i = 0; i < nthreads; i++)
		live += w[i].live;
	static size_t rss[MAX_SAMPLES];
	static double at[MAX_SAMPLES];
	unsigned ns = 0, threads = 0;
	unsigned long sw1 = 0, sw2 = 0;
	size_t rss_w1 = 0, peak = 0;
	int have_w1 = 0, have_w2 = 0;
	for (double t = 0; ns < MAX_SAMPLES; t += 0.1) {
		sleep_until(t0 + t);
		double now = now_sec() - t0;
		if (!have_w1 && now >= w1) {
			sw1 = foreign_switches(mine, nmine, &threads);
			rss_w1 = rss_bytes();
			have_w1 = 1;
		}
		if (!have_w2 && now >= w2) {
			sw2 = foreign_switches(mine, nmine, &threads);
			have_w2 = 1;
		}
		at[ns] = now;
		rss[ns] = rss_bytes();
		peak = rss[ns] > peak ? rss[ns] : peak;
		ns++;
		if (now >= watch)
			break;
	}
	foreign_switches(mine, nmine, &threads);
	double mb = 1024.0 * 1024.0;
	for (unsigned i = 0; i < ns; i++)
		printf("series step=%.0f rss_mib=%.1f rss_live=%.3f\n", at[i] * 1000, (double)rss[i] / mb,
		       (double)rss[i] / (double)live);
	printf("result rss_live=%.3f rss_live_w1=%.3f rss_mib=%.1f live_mib=%.1f peak_after_mib=%.1f "
	       "wakeups=%lu threads=%u\n",
	       (double)rss[ns - 1] / (double)live, (double)rss_w1 / (double)live, (double)rss[ns - 1] / mb,
	       (double)live / mb, (double)peak / mb, sw2 - sw1, threads);
	fprintf(stderr, "idle_return: %u thread(s), %" PRIu64 " MiB, live %.1f MiB: RSS/live %.2f at "
			"%.1f s, %.2f at %.1f s; %lu allocator wake-ups in [%.1f, %.1f] s; %u threads\n",
		nthreads, mib, (double)live / mb, (double)rss_w1 / (double)live, w1,
		(double)rss[ns - 1] / (double)live, at[ns - 1], sw2 - sw1, w1, w2, threads);
	if (nthreads > 1) {
		pthread_mutex_lock(&mtx);
		finish = 1;
		pthread_cond_broadcast(&cond);
		pthread_mutex_unlock(&mtx);
		for (unsigned i = 0; i < nthreads; i++)
			pthread_join(w[i].thread, NULL);
	}
	return 0;
}
