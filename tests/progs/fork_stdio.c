/*
 * fork from threads while other threads hold stdio locks and allocate:
 *   - forkers: fork in a loop; each child mallocs, frees, starts a thread
 *     and (every few rounds) forks a grandchild, then exits 0;
 *   - readers: read /proc/self/maps with getline and malloc per line while
 *     holding the FILE's lock;
 *   - a flusher: fflush(NULL) (the stdio list lock, then each FILE's lock)
 *     and malloc in a loop.
 * glibc's fork takes the stdio list lock after the pthread_atfork prepare
 * handlers have run: an allocator that holds its locks from its prepare
 * handler on can deadlock with a reader waiting for those locks under a
 * FILE lock, while the flusher holds the list lock and waits for that FILE.
 * Run under LD_PRELOAD=libarena.so by test_fork with a watchdog.
 *
 * usage: fork_stdio SECONDS
 * prints "forks=N", "lines=M" and "ok", or "FAIL: ..." lines.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

enum { FORKERS = 2, READERS = 2 };

static atomic_int stop;
static atomic_long nforks, nlines, child_failures, fork_failures;

static void *child_thread(void *arg)
{
	char *p = malloc(100 + (size_t)(uintptr_t)arg);
	if (p)
		memset(p, 1, 100);
	free(p);
	return p ? arg : NULL;
}

/* The child of a threaded fork: it may use the whole allocator. */
static int child_main(int depth)
{
	alarm(20);
	void *blocks[64];
	for (int i = 0; i < 64; i++) {
		blocks[i] = malloc((size_t)(16 << (i % 12)));
		if (!blocks[i])
			return 2;
		memset(blocks[i], i, 16);
	}
	for (int i = 0; i < 64; i++)
		free(blocks[i]);
	pthread_t t;
	void *res = NULL;
	if (pthread_create(&t, NULL, child_thread, (void *)(uintptr_t)1) != 0)
		return 3;
	pthread_join(t, &res);
	if (res != (void *)(uintptr_t)1)
		return 4;
	if (depth == 0) {
		pid_t pid = fork();
		if (pid == 0)
			_exit(child_main(1));
		int status;
		if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0)
			return 5;
	}
	return 0;
}

static void *forker(void *arg)
{
	long round = 0;
	(void)arg;
	while (!atomic_load(&stop)) {
		pid_t pid = fork();
		if (pid == 0)
			_exit(child_main(round++ % 4 == 0 ? 0 : 1));
		if (pid < 0) {
			atomic_fetch_add(&fork_failures, 1);
			continue;
		}
		int status;
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			atomic_fetch_add(&child_failures, 1);
		atomic_fetch_add(&nforks, 1);
	}
	return NULL;
}

/* The reader holds the FILE's lock for a whole file (flockfile; getline
 * takes it again, recursively), and mallocs under it: getline's buffer
 * for each line, and a copy of the line in a block of 16 B to 256 KiB that
 * is kept until the file is closed, so that mallocs often miss the thread
 * cache and go to the arena (blocks above 64 KiB always do). */
static void *reader(void *arg)
{
	enum { KEEP = 4096 };
	static _Thread_local char *kept[KEEP];
	uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)&kept;
	(void)arg;
	while (!atomic_load(&stop)) {
		FILE *f = fopen("/proc/self/maps", "r");
		if (!f)
			continue;
		int nkept = 0;
		flockfile(f);
		for (;;) {
			char *line = NULL;
			size_t cap = 0;
			ssize_t n = getline(&line, &cap, f);
			if (n <= 0 || nkept + 2 > KEEP) {
				free(line);
				break;
			}
			rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
			size_t size = (size_t)16 << (rng % 15);
			char *copy = malloc(size > (size_t)n ? size : (size_t)n + 1);
			if (copy)
				memcpy(copy, line, (size_t)n);
			kept[nkept++] = line;
			kept[nkept++] = copy;
			atomic_fetch_add_explicit(&nlines, 1, memory_order_relaxed);
		}
		funlockfile(f);
		fclose(f);
		while (nkept > 0)
			free(kept[--nkept]);
	}
	return NULL;
}

static void *flusher(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		fflush(NULL);
		free(malloc(1000));
	}
	return NULL;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 2.0;
	pthread_t t[FORKERS + READERS + 1];
	int n = 0;
	for (int i = 0; i < FORKERS; i++)
		CHECK(pthread_create(&t[n++], NULL, forker, NULL) == 0, "pthread_create");
	for (int i = 0; i < READERS; i++)
		CHECK(pthread_create(&t[n++], NULL, reader, NULL) == 0, "pthread_create");
	CHECK(pthread_create(&t[n++], NULL, flusher, NULL) == 0, "pthread_create");
	struct timespec ts = { (time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9) };
	nanosleep(&ts, NULL);
	atomic_store(&stop, 1);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	CHECK(atomic_load(&fork_failures) == 0, "%ld forks failed", atomic_load(&fork_failures));
	CHECK(atomic_load(&child_failures) == 0, "%ld children failed",
	      atomic_load(&child_failures));
	CHECK(atomic_load(&nforks) > 0, "no fork completed");
	printf("forks=%ld\nlines=%ld\n", atomic_load(&nforks), atomic_load(&nlines));
	return checks_report();
}
