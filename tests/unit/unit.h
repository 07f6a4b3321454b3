/*
 * Helpers of the unit tests (tests/unit/): a small PRNG and a capture of
 * what the allocator writes on stderr (out.c writes to fd 2 directly).
 * Every Criterion test runs in a fresh process: the globals of the layers
 * under test (conf, the chunk layer's bins, the fake OS) start from their
 * initial values in each test.
 */
#ifndef ARENA_UNIT_H
#define ARENA_UNIT_H

#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"

/* The configuration, writable by the tests (config.c built with
 * -DARENA_UNIT); the library itself reads it through the const cfg. */
#define conf (*config_for_test())

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

typedef struct { uint64_t s; } urng_t;

static inline uint64_t urng_next(urng_t *r)
{
	uint64_t x = r->s ? r->s : 0x9E3779B97F4A7C15ull;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	r->s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [0, n) (n > 0). */
static inline uint64_t urng_below(urng_t *r, uint64_t n)
{
	return (urng_next(r) >> 11) % n;
}

/* Captures fd 2 into a memory file between capture_begin and capture_end. */
typedef struct capture {
	int saved, fd;
} capture_t;

static inline void capture_begin(capture_t *c)
{
	fflush(stderr);
	c->fd = memfd_create("unit-stderr", 0);
	c->saved = dup(2);
	cr_assert(c->fd >= 0 && c->saved >= 0, "memfd_create/dup");
	dup2(c->fd, 2);
}

/* Ends the capture: what was written, NUL-terminated, into buf (cut). */
static inline const char *capture_end(capture_t *c, char *buf, size_t size)
{
	dup2(c->saved, 2);
	close(c->saved);
	off_t n = lseek(c->fd, 0, SEEK_CUR);
	size_t len = n < 0 ? 0 : (size_t)n < size - 1 ? (size_t)n : size - 1;
	ssize_t got = pread(c->fd, buf, len, 0);
	buf[got > 0 ? (size_t)got : 0] = 0;
	close(c->fd);
	return buf;
}

/* Runs fn(arg) in a child with its stderr captured: it must end by
 * SIGABRT (an assertion's abort: the unit objects are built with
 * -DARENA_DEBUG), having printed a line that holds every string of
 * needles (NULL-terminated).  Returns what it printed, in buf. */
static inline const char *expect_abort(void (*fn)(void *), void *arg, char *buf, size_t size,
				       const char *const *needles)
{
	fflush(NULL);
	int fd = memfd_create("unit-abort", 0);
	cr_assert(fd >= 0, "memfd_create");
	pid_t pid = fork();
	cr_assert(pid >= 0, "fork");
	if (pid == 0) {
		dup2(fd, 2);
		fn(arg);
		_exit(0);
	}
	int status = 0;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	ssize_t got = pread(fd, buf, size - 1, 0);
	buf[got > 0 ? (size_t)got : 0] = 0;
	close(fd);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
		  "expected an abort (status %#x), got output: %s", (unsigned)status, buf);
	for (const char *const *n = needles; *n; n++)
		cr_assert(strstr(buf, *n), "no \"%s\" in the output: %s", *n, buf);
	return buf;
}

/* Lines in s. */
static inline unsigned count_lines(const char *s)
{
	unsigned n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* chunk_stats() in one struct (test_chunk, test_decay). */
typedef struct chunk_figures {
	size_t mapped, reserved, nfree, dirty, lazy;
} chunk_figures_t;

static inline chunk_figures_t chunk_figures(void)
{
	chunk_figures_t f;
	chunk_stats(&f.mapped, &f.reserved, &f.nfree, &f.dirty, &f.lazy);
	return f;
}

#endif /* ARENA_UNIT_H */
