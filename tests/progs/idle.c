/*
 * idle: a burst, then idleness (tests/test_idle.c; issue 17).  Run under
 * LD_PRELOAD=libarena.so.
 *
 *   idle threaded  two threads allocate 384 MiB of small, large and huge
 *                  blocks between them, written, and free all but every
 *                  33rd; they stay alive, blocked; the main thread sleeps
 *                  decay_ms + 1.5 s without calling the allocator, then
 *                  reads RSS, and counts the context switches of the
 *                  threads it did not create over 2 s more.
 *   idle single    the same burst in the main thread alone.
 *   idle busy      two threads churn small, large and 64 KiB blocks for a
 *                  second, a tenth of them freed by the other thread; the
 *                  helper's wake-ups and passes.
 *   idle fork      the threaded burst, then fork: the child allocates and
 *                  frees (small, large, huge), counts its threads and
 *                  exits 0; the parent reports the child's status.
 *   idle lastexit  busy's churn (the helper starts), then main leaves by
 *                  pthread_exit while a third thread runs, which returns
 *                  300 ms later: the process must end then (status 0).
 *   idle forkexit  busy's churn, then a thread forks; in the child that
 *                  thread churns beside a thread of its own (the child's
 *                  helper starts), joins it and leaves by pthread_exit,
 *                  as python3's test_threading does: the child must end
 *                  (status 0; the parent gives it 30 s, then kills it).
 * Prints key=value lines (live, rss, rss_live, threads, switches, and the
 * statistics' background thread figures) and "ok" at the end.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "arena.h"
#include "preload.h"

#define BURST ((size_t)384 << 20)
#define KEEP_EVERY 33

static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static unsigned done;
static int finish;
static size_t live_bytes;
static pid_t worker_tid[2];

static size_t block_size(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	unsigned kind = (unsigned)(*x % 100);
	size_t r = (size_t)(*x >> 8);
	if (kind < 90)
		return 16 + r % 1009;
	if (kind < 99)
		return ((size_t)16 << 10) + r % ((size_t)496 << 10);
	return ((size_t)2 << 20) + r % ((size_t)6 << 20);
}

static void burst(size_t bytes, uint64_t seed)
{
	size_t cap = (size_t)1 << 17, n = 0, total = 0, live = 0;
	void **blocks = malloc(cap * sizeof(*blocks));
	size_t *sizes = malloc(cap * sizeof(*sizes));
	if (!blocks || !sizes)
		exit(3);
	while (total < bytes && n < cap) {
		size_t s = block_size(&seed);
		char *p = malloc(s);
		if (!p)
			exit(3);
		memset(p, 0x5a, s);
		blocks[n] = p;
		sizes[n++] = s;
		total += s;
	}
	for (size_t i = 0; i < n; i++) {
		if (i % KEEP_EVERY == KEEP_EVERY - 1)
			live += sizes[i];
		else
			free(blocks[i]);
	}
	free(blocks);
	free(sizes);
	pthread_mutex_lock(&mtx);
	live_bytes += live;
	pthread_mutex_unlock(&mtx);
}

static void *worker(void *arg)
{
	unsigned i = (unsigned)(uintptr_t)arg;
	worker_tid[i] = (pid_t)syscall(SYS_gettid);
	burst(BURST / 2, 0x9e3779b97f4a7c15ull * (i + 1));
	pthread_mutex_lock(&mtx);
	done++;
	pthread_cond_broadcast(&cond);
	while (!finish)
		pthread_cond_wait(&cond, &mtx);
	pthread_mutex_unlock(&mtx);
	return NULL;
}

static pthread_t workers[2];

static void threaded_burst(void)
{
	for (uintptr_t i = 0; i < 2; i++)
		if (pthread_create(&workers[i], NULL, worker, (void *)i) != 0)
			exit(3);
	pthread_mutex_lock(&mtx);
	while (done < 2)
		pthread_cond_wait(&cond, &mtx);
	pthread_mutex_unlock(&mtx);
}

static void end_workers(void)
{
	pthread_mutex_lock(&mtx);
	finish = 1;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&mtx);
	for (int i = 0; i < 2; i++)
		pthread_join(workers[i], NULL);
}

static size_t rss_bytes(void)
{
	char buf[128];
	int fd = open("/proc/self/statm", O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0)
		close(fd);
	unsigned long size, resident;
	if (n <= 0)
		return 0;
	buf[n] = 0;
	return sscanf(buf, "%lu %lu", &size, &resident) == 2 ? resident * 4096 : 0;
}

struct dirent64_raw {
	uint64_t ino;
	int64_t off;
	unsigned short reclen;
	unsigned char type;
	char name[];
};

/* Context switches of thread tid, from its status file. */
static unsigned long switches_of(pid_t tid)
{
	char path[64], text[8192];
	snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)tid);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return 0;
	ssize_t got = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (got <= 0)
		return 0;
	text[got] = 0;
	unsigned long n = 0;
	const char *v = strstr(text, "\nvoluntary_ctxt_switches:");
	const char *nv = strstr(text, "\nnonvoluntary_ctxt_switches:");
	if (v)
		n += strtoul(v + strlen("\nvoluntary_ctxt_switches:"), NULL, 10);
	if (nv)
		n += strtoul(nv + strlen("\nnonvoluntary_ctxt_switches:"), NULL, 10);
	return n;
}

/* Threads of this process, and the context switches of those that are not
 * in mine[] (the allocator's); no malloc (getdents64 and read(2)). */
static unsigned threads_and_switches(const pid_t *mine, int nmine, unsigned long *switches)
{
	char buf[4096];
	unsigned n = 0;
	*switches = 0;
	int dfd = open("/proc/self/task", O_RDONLY | O_DIRECTORY);
	if (dfd < 0)
		return 0;
	long got;
	while ((got = syscall(SYS_getdents64, dfd, buf, sizeof(buf))) > 0) {
		for (long off = 0; off < got;) {
			struct dirent64_raw *d = (void *)(buf + off);
			off += d->reclen;
			if (d->name[0] == '.')
				continue;
			n++;
			pid_t tid = (pid_t)atoi(d->name);
			int skip = 0;
			for (int i = 0; i < nmine; i++)
				skip |= mine[i] == tid;
			if (!skip)
				*switches += switches_of(tid);
		}
	}
	close(dfd);
	return n;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0)
		;
}

static long decay_ms(void)
{
	const char *c = getenv("ARENA_CONF");
	const char *d = c ? strstr(c, "decay_ms:") : NULL;
	return d ? strtol(d + strlen("decay_ms:"), NULL, 10) : 1000;
}

/* After the burst: idle, then the figures. */
static void report_idle(int threaded)
{
	pid_t mine[3] = { (pid_t)syscall(SYS_gettid), worker_tid[0], worker_tid[1] };
	int nmine = threaded ? 3 : 1;
	sleep_ms(decay_ms() + 1500);
	size_t rss = rss_bytes();
	unsigned long sw0, sw1;
	threads_and_switches(mine, nmine, &sw0);
	sleep_ms(2000);
	unsigned threads = threads_and_switches(mine, nmine, &sw1);
	arena_stats_t s;
	stats_now(&s);
	printf("live=%zu\nrss=%zu\nrss_live_x100=%zu\nthreads=%u\nswitches=%ld\nswitches_before=%lu\n",
	       live_bytes, rss, rss * 100 / live_bytes, threads, (long)(sw1 - sw0), sw0);
	printf("background_thread=%u\nbackground_wakeups=%lu\ndirty=%zu\n", s.background_thread,
	       (unsigned long)s.background_wakeups, s.dirty);
}

/* busy: two threads churn blocks of every kind for a second (each keeps a
 * window of 256 and replaces a random one), then the helper's wake-ups. */
static void *swap[256]; /* blocks in transit between the two threads */

static void *churn(void *arg)
{
	uint64_t x = 0x2545f4914f6cdd1dull * ((uintptr_t)arg + 1);
	static __thread void *win[256];
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		for (int i = 0; i < 1000; i++) {
			unsigned k = (unsigned)(x % 256);
			if (i % 10 == 0) { /* a tenth change hands: freed by the other thread */
				pthread_mutex_lock(&mtx);
				void *mine = win[k];
				win[k] = swap[k];
				swap[k] = mine;
				pthread_mutex_unlock(&mtx);
			}
			free(win[k]);
			size_t n = block_size(&x);
			if (n > ((size_t)1 << 20))
				n = 64 << 10; /* huge blocks are the burst's; churn the rest */
			if (!(win[k] = malloc(n)))
				exit(3);
			memset(win[k], 1, n < 64 ? n : 64);
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 1000);
	for (int k = 0; k < 256; k++)
		free(win[k]);
	return NULL;
}

static void busy(void)
{
	pthread_t t[2];
	for (uintptr_t i = 0; i < 2; i++)
		if (pthread_create(&t[i], NULL, churn, (void *)i) != 0)
			exit(3);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	for (int k = 0; k < 256; k++) {
		free(swap[k]);
		swap[k] = NULL;
	}
	arena_stats_t s;
	stats_now(&s);
	printf("background_thread=%u\nbackground_wakeups=%lu\nbackground_passes=%lu\n",
	       s.background_thread, (unsigned long)s.background_wakeups,
	       (unsigned long)s.background_passes);
}

/* lastexit's third thread: outlives main by 300 ms, allocating. */
static void *late_worker(void *arg)
{
	(void)arg;
	sleep_ms(300);
	for (int i = 0; i < 1000; i++)
		free(malloc(16 + (size_t)i * 100));
	return NULL;
}

static void last_exit(void)
{
	busy();
	pthread_t t;
	if (pthread_create(&t, NULL, late_worker, NULL) != 0)
		exit(3);
	printf("ok\n");
	fflush(stdout);
	pthread_exit(NULL); /* the process ends when late_worker returns */
}

/* forkexit: the forking thread, in the child, churns beside a thread of
 * its own, joins it and leaves by pthread_exit: the child's last thread. */
static void *fork_from_thread(void *arg)
{
	(void)arg;
	pid_t pid = fork();
	if (pid < 0)
		exit(3);
	if (pid > 0)
		return (void *)(intptr_t)pid;
	pthread_t t;
	if (pthread_create(&t, NULL, churn, (void *)1) != 0)
		_exit(3);
	churn((void *)0);
	pthread_join(t, NULL);
	for (int k = 0; k < 256; k++)
		free(swap[k]);
	arena_stats_t s;
	stats_now(&s);
	printf("child.background_thread=%u\n", s.background_thread);
	fflush(stdout);
	pthread_exit(NULL);
}

/* Waits for pid at most secs seconds: its status, or -1 (killed then). */
static int wait_child(pid_t pid, int secs)
{
	int status;
	for (int i = 0; i < secs * 20; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		sleep_ms(50);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return -1;
}

static void fork_exit(void)
{
	busy();
	fflush(stdout); /* not written twice by the child */
	pthread_t t;
	void *pid;
	if (pthread_create(&t, NULL, fork_from_thread, NULL) != 0 || pthread_join(t, &pid) != 0)
		exit(3);
	printf("child_status=%d\n", wait_child((pid_t)(intptr_t)pid, 30));
}

/* The child of a fork taken with the helper thread running. */
static int child(void)
{
	uint64_t x = 42;
	for (int round = 0; round < 4; round++) {
		void *p[512];
		for (int i = 0; i < 512; i++)
			if (!(p[i] = malloc(block_size(&x))))
				return 4;
		for (int i = 0; i < 512; i++)
			free(p[i]);
	}
	unsigned long sw;
	unsigned threads = threads_and_switches(NULL, 0, &sw);
	arena_stats_t s;
	stats_now(&s);
	printf("child.threads=%u\nchild.background_thread=%u\n", threads, s.background_thread);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	stats_find();
	if (!strcmp(mode, "threaded")) {
		threaded_burst();
		report_idle(1);
		end_workers();
	} else if (!strcmp(mode, "single")) {
		burst(BURST, 7);
		report_idle(0);
	} else if (!strcmp(mode, "busy")) {
		busy();
	} else if (!strcmp(mode, "fork")) {
		threaded_burst();
		arena_stats_t s;
		stats_now(&s);
		printf("background_thread=%u\n", s.background_thread);
		fflush(stdout);
		pid_t pid = fork();
		if (pid < 0)
			return 3;
		if (pid == 0)
			_exit(child());
		int status;
		if (waitpid(pid, &status, 0) != pid)
			return 3;
		printf("child_status=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
		end_workers();
	} else if (!strcmp(mode, "lastexit")) {
		last_exit();
	} else if (!strcmp(mode, "forkexit")) {
		fork_exit();
	} else {
		fprintf(stderr, "idle: threaded|single|busy|fork|lastexit|forkexit\n");
		return 2;
	}
	printf("ok\n");
	return 0;
}
