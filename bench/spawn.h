/*
 * spawn.h: what the real-program workloads (bench/prog_*.c) share: a private
 * temporary directory, running programs in child processes, the environment
 * of helper programs and the report of what the program under test used.
 *
 * The program under test is forked and execs with this process's
 * environment, so LD_PRELOAD (the allocator under test) and its settings
 * (ARENA_CONF, MALLOC_CONF, ...) reach it and everything it starts in turn.
 * A helper that is not under test (the git that builds a repository, the
 * benchmark client of a server) runs with spawn_helper_env(): the same
 * environment without them, so that it runs on glibc's malloc whatever the
 * configuration and only the program under test is measured.  The parent
 * waits for a child with wait4, whose rusage covers the child and every
 * descendant the child itself waited for (gcc waits for cc1 and as): user
 * and system time and page faults summed, ru_maxrss the largest of them.
 *
 * A workload sums the rusage of the program under test's runs in a
 * spawn_usage and prints it as a `measured` line (spawn_print_measured):
 * bench/run then shows those figures, not those of the whole workload
 * (which include writing the inputs and the helpers' work).
 */
#ifndef BENCH_SPAWN_H
#define BENCH_SPAWN_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

extern char **environ;

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

/* Whether the environment entry "NAME=value" sets a variable that chooses
 * or tunes an allocator (the ones bench/run sets per configuration). */
static inline int spawn_tuning_var(const char *entry)
{
	static const char *const exact[] = { "LD_PRELOAD=", "ARENA_CONF=", "GLIBC_TUNABLES=" };
	static const char *const prefix[] = { "MALLOC_", "MIMALLOC_", "TCMALLOC_" };
	for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
		if (strncmp(entry, exact[i], strlen(exact[i])) == 0)
			return 1;
	for (size_t i = 0; i < sizeof prefix / sizeof prefix[0]; i++)
		if (strncmp(entry, prefix[i], strlen(prefix[i])) == 0)
			return 1;
	return 0;
}

/* The environment of helper programs: this process's environment, as it is
 * now, without the allocator variables (spawn_tuning_var).  Built once. */
static inline char **spawn_helper_env(void)
{
	static char **env;
	if (env)
		return env;
	size_t n = 0;
	while (environ[n])
		n++;
	env = calloc(n + 1, sizeof *env);
	if (!env)
		return environ;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (!spawn_tuning_var(environ[i]))
			env[k++] = environ[i];
	return env;
}

/* Forks and execs argv[0] (looked up in PATH) with argv and envp (NULL:
 * this environment), its stdin read from in and its stdout written to out
 * (created or truncated) when they are not NULL.  Returns the child's pid,
 * -1 if the fork failed; a child that cannot open a file or exec exits 127. */
static inline pid_t spawn_start(char *const argv[], char *const envp[], const char *in,
				const char *out)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	int fd;
	if (in && ((fd = open(in, O_RDONLY)) < 0 || dup2(fd, 0) < 0)) {
		fprintf(stderr, "cannot open %s: %s\n", in, strerror(errno));
		_exit(127);
	}
	if (out && ((fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0 || dup2(fd, 1) < 0)) {
		fprintf(stderr, "cannot open %s: %s\n", out, strerror(errno));
		_exit(127);
	}
	execvpe(argv[0], argv, envp ? envp : environ);
	fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

/* Waits for the child pid; *ru: its rusage as wait4 returned it.  Returns
 * its exit status, 128 + its signal if it was killed, -1 on error. */
static inline int spawn_reap(pid_t pid, struct rusage *ru)
{
	int status;
	while (wait4(pid, &status, 0, ru) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

/* Runs argv as spawn_start does and waits for it.  *seconds: wall time from
 * before the fork to after the wait; *ru: the child's rusage.  Returns what
 * spawn_reap does, -1 if it could not be started. */
static inline int spawn_run(char *const argv[], char *const envp[], const char *in,
			    const char *out, double *seconds, struct rusage *ru)
{
	double t0 = now_sec();
	pid_t pid = spawn_start(argv, envp, in, out);
	if (pid < 0)
		return -1;
	int rc = spawn_reap(pid, ru);
	*seconds = now_sec() - t0;
	return rc;
}

/* Runs argv with this environment and waits for it (spawn_run). */
static inline int spawn_wait(char *const argv[], double *seconds, struct rusage *ru)
{
	return spawn_run(argv, NULL, NULL, NULL, seconds, ru);
}

/* dir/name into out (PATH_MAX bytes); -1 if it does not fit. */
static inline int spawn_path(char *out, const char *dir, const char *name)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", dir, name);
	return n < 0 || n >= PATH_MAX ? -1 : 0;
}

/* What the program under test used over its runs: times and faults summed,
 * the largest peak RSS. */
typedef struct {
	double wall_s, user_s, sys_s;
	long minflt, majflt, peak_rss_kib;
	int runs;
} spawn_usage;

static inline double spawn_tv(struct timeval tv)
{
	return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

/* Adds one run: its wall time and the rusage wait4 gave for it. */
static inline void spawn_usage_add(spawn_usage *u, double wall_s, const struct rusage *ru)
{
	u->wall_s += wall_s;
	u->user_s += spawn_tv(ru->ru_utime);
	u->sys_s += spawn_tv(ru->ru_stime);
	u->minflt += ru->ru_minflt;
	u->majflt += ru->ru_majflt;
	if (ru->ru_maxrss > u->peak_rss_kib)
		u->peak_rss_kib = ru->ru_maxrss;
	u->runs++;
}

/* The `measured` line bench/run reads in place of its own figures for the
 * whole workload: wall, user and system seconds, minor faults and peak RSS
 * (KiB) of the program under test. */
static inline void spawn_print_measured(const spawn_usage *u)
{
	printf("measured wall_s=%.6f user_s=%.6f sys_s=%.6f minflt=%ld peak_rss_kib=%ld\n",
	       u->wall_s, u->user_s, u->sys_s, u->minflt, u->peak_rss_kib);
}

#endif /* BENCH_SPAWN_H */
