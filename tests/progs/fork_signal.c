/*
 * fork from a signal handler in a single-threaded process (glibc's promise,
 * tst-mallocfork and tst-mallocfork2): the main loop mallocs, frees and
 * reallocs blocks of 16 B to 1 MiB while SIGALRM arrives every `usec`
 * microseconds; the handler forks, the child only _exits (all it may do),
 * the parent waits for it.  Run under LD_PRELOAD=libarena.so by test_fork
 * with a watchdog: a hang there is a deadlock in the allocator's fork
 * handling.  Every block carries a pattern, checked before it is freed or
 * resized, so a heap damaged by the forks shows too.
 *
 * usage: fork_signal SECONDS USEC
 * prints "forks=N", "ops=M" and "ok", or "FAIL: ..." lines.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prog_check.h"

enum { SLOTS = 256 };

static volatile sig_atomic_t forks, fork_failures, child_failures;
static double end_time;

static double now(void);

/* The handler stops the timer once the run's time is up: on a loaded
 * machine a fork and its wait can take longer than the timer's period,
 * and then the next signal is pending whenever the handler returns, so the
 * main loop would never run again to see the time (clock_gettime and
 * alarm are async-signal-safe; alarm(0) cancels ITIMER_REAL). */
static void on_alarm(int sig)
{
	(void)sig;
	int saved = errno;
	if (now() >= end_time) {
		alarm(0);
		errno = saved;
		return;
	}
	pid_t pid = fork();
	if (pid == 0)
		_exit(0);
	if (pid < 0) {
		fork_failures++;
	} else {
		int status;
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			child_failures++;
		forks++;
	}
	errno = saved;
}

static uint64_t rng = 88172645463325252ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* 16 B .. 1 MiB, log-uniform: mostly small, some large. */
static size_t pick_size(void)
{
	unsigned shift = 4 + (unsigned)(next() % 17);
	size_t lo = (size_t)1 << shift;
	return lo + (size_t)(next() % lo);
}

typedef struct slot {
	unsigned char *p;
	size_t n;
	unsigned char tag;
} slot_t;

static slot_t slots[SLOTS];

/* Pattern: the first and last 64 bytes hold the tag (checking all of a
 * 1 MiB block each time would make the loop mostly memcmp). */
static void fill(slot_t *s)
{
	size_t k = s->n < 64 ? s->n : 64;
	memset(s->p, s->tag, k);
	memset(s->p + s->n - k, s->tag, k);
}

static int intact(const slot_t *s, size_t n)
{
	size_t k = n < 64 ? n : 64;
	for (size_t i = 0; i < k; i++)
		if (s->p[i] != s->tag)
			return 0;
	if (n == s->n)
		for (size_t i = n - k; i < n; i++)
			if (s->p[i] != s->tag)
				return 0;
	return 1;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 2.0;
	long usec = argc > 2 ? atol(argv[2]) : 300;
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	double end = now() + seconds;
	end_time = end;
	struct itimerval it = { { 0, usec }, { 0, usec } };
	setitimer(ITIMER_REAL, &it, NULL);

	unsigned long ops = 0;
	/* The time is read at every operation: a fork and wait can take longer
	 * than the timer's period, and then little else runs. */
	for (; nfail == 0 && now() < end; ops++) {
		slot_t *s = &slots[next() % SLOTS];
		unsigned what = (unsigned)(next() % 4);
		if (!s->p) {
			s->n = pick_size();
			s->tag = (unsigned char)(next() | 1);
			s->p = what == 0 ? calloc(1, s->n) : malloc(s->n);
			CHECK(s->p != NULL, "allocation of %zu bytes failed", s->n);
			if (s->p)
				fill(s);
		} else if (what == 0) {
			size_t n = pick_size();
			CHECK(intact(s, s->n), "block of %zu bytes damaged before realloc", s->n);
			unsigned char *q = realloc(s->p, n);
			CHECK(q != NULL, "realloc to %zu bytes failed", n);
			if (q) {
				s->p = q;
				CHECK(intact(s, n < s->n ? n : s->n), "realloc lost bytes");
				s->n = n;
				fill(s);
			}
		} else {
			CHECK(intact(s, s->n), "block of %zu bytes damaged before free", s->n);
			free(s->p);
			s->p = NULL;
		}
	}
	struct itimerval off = { { 0, 0 }, { 0, 0 } };
	setitimer(ITIMER_REAL, &off, NULL);
	for (int i = 0; i < SLOTS; i++) {
		if (slots[i].p) {
			CHECK(intact(&slots[i], slots[i].n), "block damaged at the end");
			free(slots[i].p);
		}
	}
	/* The heap still works after thousands of forks in the middle of calls. */
	void *big = malloc(8 << 20), *small = malloc(24);
	CHECK(big && small, "allocation after the forks failed");
	free(big);
	free(small);
	CHECK(fork_failures == 0, "%d forks failed", (int)fork_failures);
	CHECK(child_failures == 0, "%d children did not exit 0", (int)child_failures);
	printf("forks=%d\nops=%lu\n", (int)forks, ops);
	return checks_report();
}
