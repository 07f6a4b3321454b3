/*
 * spawn.h: what the real-program workloads (bench/prog_*.c) share: a private
 * temporary directory, and running a program in a child process that it
 * waits for.
 *
 * The child is forked and execs the program with this process's
 * environment, so LD_PRELOAD (the allocator under test) reaches it and
 * everything it starts in turn.  The parent waits for it with wait4, whose
 * rusage covers the child and every descendant the child itself waited for
 * (gcc waits for cc1 and as): user and system time and page faults summed,
 * ru_maxrss the largest of them.  The same holds one level up, so the
 * figures that bench/run gets from GNU time's wait4 for the workload cover
 * the program and its children too.
 */
#ifndef BENCH_SPAWN_H
#define BENCH_SPAWN_H

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/* A new directory under $TMPDIR (or /tmp) into dir; -1 on failure. */
static inline int spawn_temp_dir(const char *prefix, char *dir, size_t len)
{
	const char *base = getenv("TMPDIR");
	if (!base || !*base)
		base = "/tmp";
	if ((size_t)snprintf(dir, len, "%s/%s.XXXXXX", base, prefix) >= len)
		return -1;
	return mkdtemp(dir) ? 0 : -1;
}

/* Runs argv[0] (looked up in PATH) with argv and this environment and waits
 * for it.  *seconds: wall time from before the fork to after the wait;
 * *ru: the child's rusage as wait4 returned it.  Returns the child's exit
 * status, 128 + its signal if it was killed, -1 if it could not be started. */
static inline int spawn_wait(char *const argv[], double *seconds, struct rusage *ru)
{
	int status;
	fflush(NULL);
	double t0 = now_sec();
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		execvp(argv[0], argv);
		fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	while (wait4(pid, &status, 0, ru) < 0)
		if (errno != EINTR)
			return -1;
	*seconds = now_sec() - t0;
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

/* dir/name into out (PATH_MAX bytes); -1 if it does not fit. */
static inline int spawn_path(char *out, const char *dir, const char *name)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", dir, name);
	return n < 0 || n >= PATH_MAX ? -1 : 0;
}

#endif /* BENCH_SPAWN_H */
