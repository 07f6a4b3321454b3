/*
 * Running programs and functions in children (static inline, header only):
 * run_prog / run_prog_limited / run_fn with stdout and stderr captured
 * through pipes and a timeout, the child's environment (child_envp), and
 * the string helpers used on what they print.
 *
 * Children forked by run_fn must never use cr_assert: they report through
 * their exit status and their output only.
 */
#ifndef ARENA_TESTS_RUN_H
#define ARENA_TESTS_RUN_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ---- time ----------------------------------------------------------------------------- */

static inline double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- strings ---------------------------------------------------------------------------- */

static inline int contains(const char *hay, const char *needle)
{
	return hay && strstr(hay, needle) != NULL;
}

static inline int contains_ci(const char *hay, const char *needle)
{
	return hay && strcasestr(hay, needle) != NULL;
}

/* Number of lines (a last line without '\n' counts too). */
static inline size_t count_lines(const char *s, size_t len)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++)
		if (s[i] == '\n')
			n++;
	if (len > 0 && s[len - 1] != '\n')
		n++;
	return n;
}

/* ---- running children with captured output ---------------------------------------------- */

typedef struct run_result {
	int status;     /* as from waitpid */
	int timed_out;  /* killed by us after the timeout */
	char *out;      /* captured stdout, NUL-terminated (never NULL after a run) */
	size_t out_len;
	char *err;      /* captured stderr, NUL-terminated */
	size_t err_len;
	char desc[64];  /* "exited 0", "killed by signal 6", "timed out" */
} run_result;

static inline void run_result_free(run_result *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
}

static inline int run_exited0(const run_result *r)
{
	return !r->timed_out && WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0;
}

static inline int run_signaled(const run_result *r, int sig)
{
	return !r->timed_out && WIFSIGNALED(r->status) && WTERMSIG(r->status) == sig;
}

static inline void run_describe(run_result *r)
{
	if (r->timed_out)
		snprintf(r->desc, sizeof r->desc, "timed out (killed)");
	else if (WIFEXITED(r->status))
		snprintf(r->desc, sizeof r->desc, "exited %d", WEXITSTATUS(r->status));
	else if (WIFSIGNALED(r->status))
		snprintf(r->desc, sizeof r->desc, "killed by signal %d (%s)",
			 WTERMSIG(r->status), strsignal(WTERMSIG(r->status)));
	else
		snprintf(r->desc, sizeof r->desc, "status 0x%x", r->status);
}

static inline void buf_append(char **buf, size_t *len, size_t *cap, const char *data, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t nc = *cap ? *cap : 4096;
		while (nc < *len + n + 1)
			nc *= 2;
		char *nb = realloc(*buf, nc);
		if (!nb)
			abort();
		*buf = nb;
		*cap = nc;
	}
	memcpy(*buf + *len, data, n);
	*len += n;
	(*buf)[*len] = '\0';
}

/* Reads both pipes until EOF (or the deadline), then reaps pid. */
static inline void run_collect(pid_t pid, int ofd, int efd, double timeout_s, run_result *r)
{
	size_t ocap = 0, ecap = 0;
	double deadline = now_s() + timeout_s;
	char tmp[65536];

	r->out = r->err = NULL;
	r->out_len = r->err_len = 0;
	r->timed_out = 0;
	buf_append(&r->out, &r->out_len, &ocap, "", 0);
	buf_append(&r->err, &r->err_len, &ecap, "", 0);

	while (ofd >= 0 || efd >= 0) {
		struct pollfd pf[2];
		int n = 0;
		if (ofd >= 0)
			pf[n++] = (struct pollfd){ .fd = ofd, .events = POLLIN };
		if (efd >= 0)
			pf[n++] = (struct pollfd){ .fd = efd, .events = POLLIN };
		double left = deadline - now_s();
		if (left <= 0) {
			r->timed_out = 1;
			kill(pid, SIGKILL);
			break;
		}
		int rc = poll(pf, (nfds_t)n, left > 1.0 ? 1000 : (int)(left * 1000) + 1);
		if (rc < 0 && errno == EINTR)
			continue;
		for (int i = 0; i < n; i++) {
			if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			ssize_t k = read(pf[i].fd, tmp, sizeof tmp);
			if (k < 0 && errno == EINTR)
				continue;
			if (pf[i].fd == ofd) {
				if (k <= 0) { close(ofd); ofd = -1; }
				else buf_append(&r->out, &r->out_len, &ocap, tmp, (size_t)k);
			} else {
				if (k <= 0) { close(efd); efd = -1; }
				else buf_append(&r->err, &r->err_len, &ecap, tmp, (size_t)k);
			}
		}
	}
	if (ofd >= 0)
		close(ofd);
	if (efd >= 0)
		close(efd);

	/* The pipes may close before the child exits: wait, within the deadline. */
	for (;;) {
		pid_t w = waitpid(pid, &r->status, r->timed_out ? 0 : WNOHANG);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR) {
			r->status = -1;
			break;
		}
		if (w == 0) {
			if (now_s() > deadline) {
				r->timed_out = 1;
				kill(pid, SIGKILL);
			} else {
				usleep(2000);
			}
		}
	}
	run_describe(r);
}

static inline void child_no_core(void)
{
	struct rlimit rl = { 0, 0 };
	setrlimit(RLIMIT_CORE, &rl);
}

/* Is "KEY=..." (or "KEY") the variable named by key (up to '=')? */
static inline int env_same_key(const char *a, const char *b)
{
	size_t la = strcspn(a, "="), lb = strcspn(b, "=");
	return la == lb && memcmp(a, b, la) == 0;
}

/*
 * The environment for a child: this process's less LD_PRELOAD and
 * ARENA_CONF, plus env (NULL-terminated "KEY=VALUE" entries, may be NULL;
 * they override inherited ones).  The array is malloc'ed (free it); the
 * strings are not copied.  NULL if out of memory.
 */
static inline char **child_envp(const char *const env[])
{
	size_t ne = 0, nx = 0, k = 0;
	while (environ[ne])
		ne++;
	while (env && env[nx])
		nx++;
	char **envp = calloc(ne + nx + 1, sizeof *envp);
	if (!envp)
		return NULL;
	for (size_t i = 0; i < ne; i++) {
		int drop = env_same_key(environ[i], "LD_PRELOAD") ||
			   env_same_key(environ[i], "ARENA_CONF");
		for (size_t j = 0; j < nx && !drop; j++)
			drop = env_same_key(environ[i], env[j]);
		if (!drop)
			envp[k++] = environ[i];
	}
	for (size_t j = 0; j < nx; j++)
		envp[k++] = (char *)env[j];
	envp[k] = NULL;
	return envp;
}

/*
 * Runs argv[0] (an absolute path) with argv, stdin from stdin_path (NULL:
 * /dev/null), the environment child_envp(env), and, when as_limit is not 0,
 * RLIMIT_AS set to as_limit bytes between fork and exec (so the allocator
 * starts under it).  Waits at most timeout_s seconds.
 * Returns 0, or -1 if the child could not be started.
 */
static inline int run_prog_limited(const char *const argv[], const char *const env[],
				   const char *stdin_path, double timeout_s, size_t as_limit,
				   run_result *r)
{
	char **envp = child_envp(env);
	if (!envp)
		return -1;
	int op[2], ep[2];
	if (pipe2(op, O_CLOEXEC) || pipe2(ep, O_CLOEXEC)) {
		free(envp);
		return -1;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		free(envp);
		return -1;
	}
	if (pid == 0) {
		int in = open(stdin_path ? stdin_path : "/dev/null", O_RDONLY);
		if (in < 0)
			_exit(126);
		dup2(in, 0);
		dup2(op[1], 1);
		dup2(ep[1], 2);
		child_no_core();
		if (as_limit) {
			struct rlimit rl = { as_limit, as_limit };
			if (setrlimit(RLIMIT_AS, &rl) != 0) {
				dprintf(2, "setrlimit: %s\n", strerror(errno));
				_exit(125);
			}
		}
		execve(argv[0], (char *const *)argv, envp);
		dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	free(envp);
	close(op[1]);
	close(ep[1]);
	run_collect(pid, op[0], ep[0], timeout_s, r);
	return 0;
}

/* run_prog_limited without a limit. */
static inline int run_prog(const char *const argv[], const char *const env[],
			   const char *stdin_path, double timeout_s, run_result *r)
{
	return run_prog_limited(argv, env, stdin_path, timeout_s, 0, r);
}

/*
 * Runs fn(arg) in a forked child whose stdout and stderr go to pipes; the
 * child exits with fn's return value.  Core dumps are off in the child.
 */
static inline int run_fn(int (*fn)(void *), void *arg, double timeout_s, run_result *r)
{
	int op[2], ep[2];
	if (pipe2(op, O_CLOEXEC) || pipe2(ep, O_CLOEXEC))
		return -1;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(op[1], 1);
		dup2(ep[1], 2);
		child_no_core();
		int rc = fn(arg);
		fflush(NULL);
		_exit(rc);
	}
	close(op[1]);
	close(ep[1]);
	run_collect(pid, op[0], ep[0], timeout_s, r);
	return 0;
}

#endif /* ARENA_TESTS_RUN_H */
