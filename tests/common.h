/*
 * Shared helpers of the libarena test suites (static inline, header only).
 *
 *  - opaque_size, opaque_ptr, escape: keep the compiler from folding or deleting allocator
 *    calls whose results the test inspects (malloc(SIZE_MAX), malloc+free).
 *  - pat_*: fill a block with a pattern that depends on the byte offset and a
 *    seed, and check it byte by byte (a shifted or foreign copy is caught).
 *  - rng_*: small per-thread PRNG.
 *  - run_prog / run_fn: run a program (or a function in a forked child) with
 *    stdout and stderr captured through pipes, with a timeout.
 *  - tmpdir, file helpers, string helpers, RSS reading.
 *
 * Children forked by run_fn must never use cr_assert: they report through
 * their exit status and their output only.
 */
#ifndef ARENA_TESTS_COMMON_H
#define ARENA_TESTS_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* libarena provides these; glibc 2.36's headers do not declare them. */
void free_sized(void *ptr, size_t size);
void free_aligned_sized(void *ptr, size_t alignment, size_t size);

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* ---- defeating the optimiser ------------------------------------------------ */

static inline size_t opaque_size(size_t x)
{
	__asm__ volatile("" : "+r"(x));
	return x;
}

static inline void *opaque_ptr(void *p)
{
	__asm__ volatile("" : "+r"(p));
	return p;
}

/* Makes p (and the memory it points to) visible to the outside world. */
static inline void escape(const void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

static inline int is_aligned(const void *p, size_t a)
{
	return ((uintptr_t)p & (a - 1)) == 0;
}

/* ---- patterns ------------------------------------------------------------------ */

/* The byte expected at offset off of a block filled with seed. */
static inline uint8_t pat_byte(size_t off, uint32_t seed)
{
	uint64_t x = (uint64_t)off * 0x9E3779B97F4A7C15ull +
		     ((uint64_t)seed + 1) * 0xD6E8FEB86659FD93ull;
	return (uint8_t)((x >> 56) ^ (x >> 29));
}

/* Fills bytes [from, to) of p. */
static inline void pat_fill(void *p, size_t from, size_t to, uint32_t seed)
{
	uint8_t *b = p;
	for (size_t i = from; i < to; i++)
		b[i] = pat_byte(i, seed);
}

/* Checks bytes [from, to) of p; returns the first bad offset, or SIZE_MAX. */
static inline size_t pat_check(const void *p, size_t from, size_t to, uint32_t seed)
{
	const uint8_t *b = p;
	for (size_t i = from; i < to; i++)
		if (b[i] != pat_byte(i, seed))
			return i;
	return SIZE_MAX;
}

/*
 * Sparse pattern for big blocks, so that stress tests stay fast: blocks up to
 * SPARSE_FULL bytes are filled whole; bigger ones get their first and last
 * 4 KiB and 32 bytes in every KiB (so every page is touched).
 */
#define SPARSE_FULL (64 * KiB)

static inline void pat_fill_sparse(void *p, size_t n, uint32_t seed)
{
	if (n <= SPARSE_FULL) {
		pat_fill(p, 0, n, seed);
		return;
	}
	pat_fill(p, 0, 4096, seed);
	for (size_t off = 4096; off + 32 <= n - 4096; off += 1024)
		pat_fill(p, off, off + 32, seed);
	pat_fill(p, n - 4096, n, seed);
}

static inline size_t pat_check_sparse(const void *p, size_t n, uint32_t seed)
{
	size_t bad;
	if (n <= SPARSE_FULL)
		return pat_check(p, 0, n, seed);
	if ((bad = pat_check(p, 0, 4096, seed)) != SIZE_MAX)
		return bad;
	for (size_t off = 4096; off + 32 <= n - 4096; off += 1024)
		if ((bad = pat_check(p, off, off + 32, seed)) != SIZE_MAX)
			return bad;
	return pat_check(p, n - 4096, n, seed);
}

/* ---- random numbers --------------------------------------------------------------- */

typedef struct { uint64_t s; } rng_t;

static inline void rng_seed(rng_t *r, uint64_t seed)
{
	r->s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
	if (r->s == 0)
		r->s = 1;
}

static inline uint64_t rng_next(rng_t *r)
{
	uint64_t x = r->s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	r->s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [0, n) (n > 0). */
static inline uint64_t rng_below(rng_t *r, uint64_t n)
{
	return (rng_next(r) >> 11) % n;
}

/* Roughly log-uniform in [lo, hi] (1 <= lo <= hi). */
static inline size_t rng_logsize(rng_t *r, size_t lo, size_t hi)
{
	int lb = 63 - __builtin_clzll(lo), hb = 63 - __builtin_clzll(hi);
	for (;;) {
		int b = lb + (int)rng_below(r, (uint64_t)(hb - lb + 1));
		size_t base = (size_t)1 << b;
		size_t n = base + (size_t)rng_below(r, base);
		if (n >= lo && n <= hi)
			return n;
	}
}

/* ---- first failure of a multi-threaded or forked test ------------------------------- */

/*
 * Criterion's assertions may only run on the test's main thread, so worker
 * threads record the first failure here and stop; the main thread asserts.
 */
static atomic_int tfail_flag;
static char tfail_msg[512];

static inline void tfail(const char *fmt, ...)
{
	int expected = 0;
	if (!atomic_compare_exchange_strong(&tfail_flag, &expected, 1))
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(tfail_msg, sizeof tfail_msg, fmt, ap);
	va_end(ap);
}

static inline int tfailed(void)
{
	return atomic_load_explicit(&tfail_flag, memory_order_relaxed);
}

/* ---- blocks in flight (stress tests) -------------------------------------------------------- */

/* A block in flight: the record itself is malloc'd too, by one thread, and
 * often freed by another. */
typedef struct rec {
	uint8_t *p;
	size_t n;
	uint32_t seed;
	uint32_t owner;
} rec_t;

static inline size_t stress_size(rng_t *r)
{
	uint64_t k = rng_below(r, 10000);
	if (k < 9000)
		return 1 + (size_t)rng_below(r, 256);
	if (k < 9850)
		return rng_logsize(r, 257, 16384);
	if (k < 9990)
		return rng_logsize(r, 16385, MiB);
	return rng_logsize(r, MiB + 1, 4 * MiB);
}

static inline rec_t *rec_new(rng_t *r, uint32_t owner)
{
	rec_t *x = malloc(sizeof *x);
	if (!x) {
		tfail("malloc(%zu) for a record failed", sizeof *x);
		return NULL;
	}
	x->n = stress_size(r);
	x->seed = (uint32_t)rng_next(r);
	x->owner = owner;
	switch (rng_below(r, 8)) {
	case 0:
		x->p = calloc(1, x->n);
		if (x->p && x->n <= 4096) {
			for (size_t i = 0; i < x->n; i++)
				if (x->p[i]) {
					tfail("calloc(1, %zu) = %p: byte %zu not zero", x->n, x->p, i);
					break;
				}
		}
		break;
	case 1:
		x->p = aligned_alloc(64, x->n);
		if (x->p && !is_aligned(x->p, 64))
			tfail("aligned_alloc(64, %zu) = %p", x->n, x->p);
		break;
	default:
		x->p = malloc(x->n);
		break;
	}
	if (!x->p) {
		tfail("allocating %zu bytes failed", x->n);
		free(x);
		return NULL;
	}
	if (!is_aligned(x->p, 16))
		tfail("block %p of %zu bytes not 16-aligned", x->p, x->n);
	pat_fill_sparse(x->p, x->n, x->seed);
	return x;
}

static inline int rec_check(const rec_t *x, const char *when, uint32_t me)
{
	size_t bad = pat_check_sparse(x->p, x->n, x->seed);
	if (bad != SIZE_MAX) {
		tfail("%s: block %p (%zu bytes, made by thread %u, checked by %u) corrupt at offset %zu",
		      when, x->p, x->n, x->owner, me, bad);
		return -1;
	}
	return 0;
}

static inline void rec_free(rec_t *x, uint32_t me)
{
	rec_check(x, "before free", me);
	if (x->n > 4096 && (x->seed & 1))
		free_sized(x->p, x->n);
	else
		free(x->p);
	free(x);
}

/* Resizes the block (which may have been made by another thread) to a new
 * random size, checking what it keeps and refilling the pattern. */
static inline void rec_realloc(rec_t *x, rng_t *r, uint32_t me)
{
	size_t m = stress_size(r);
	if (rec_check(x, "before realloc", me))
		return;
	uint8_t *q = realloc(x->p, m);
	if (!q) {
		tfail("realloc(%p, %zu) failed", x->p, m);
		return;
	}
	size_t keep = m < x->n ? m : x->n;
	x->p = q;
	/* The sparse pattern depends on the size: check the kept prefix the
	 * simple way where it was fully written, then rewrite the block. */
	if (keep <= SPARSE_FULL && x->n <= SPARSE_FULL) {
		size_t bad = pat_check(q, 0, keep, x->seed);
		if (bad != SIZE_MAX)
			tfail("realloc %zu -> %zu lost byte %zu", x->n, m, bad);
	} else {
		size_t bad = pat_check(q, 0, keep < 4096 ? keep : 4096, x->seed);
		if (bad != SIZE_MAX)
			tfail("realloc %zu -> %zu lost byte %zu", x->n, m, bad);
	}
	x->n = m;
	pat_fill_sparse(q, m, x->seed);
}

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

/* ---- files ------------------------------------------------------------------------------ */

static inline int write_file(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t w = fwrite(data, 1, n, f);
	return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static inline int write_str(const char *path, const char *s)
{
	return write_file(path, s, strlen(s));
}

/* Returns 1 when both files exist and have the same contents. */
static inline int files_equal(const char *a, const char *b)
{
	FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
	int eq = fa && fb;
	static char ba[65536], bb[65536];
	while (eq) {
		size_t na = fread(ba, 1, sizeof ba, fa);
		size_t nb = fread(bb, 1, sizeof bb, fb);
		if (na != nb || memcmp(ba, bb, na) != 0)
			eq = 0;
		if (na == 0)
			break;
	}
	if (fa)
		fclose(fa);
	if (fb)
		fclose(fb);
	return eq;
}

static inline long long file_size(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* Creates a fresh directory under /tmp; path must hold 64 bytes. */
static inline int make_tmpdir(char *path)
{
	strcpy(path, "/tmp/arena-test-XXXXXX");
	return mkdtemp(path) ? 0 : -1;
}

static inline void remove_tree(const char *path)
{
	if (!path || strncmp(path, "/tmp/arena-test-", 16) != 0)
		return;
	const char *argv[] = { "/bin/rm", "-rf", path, NULL };
	run_result r;
	if (run_prog(argv, NULL, NULL, 60, &r) == 0)
		run_result_free(&r);
}

/* ---- memory of this process ------------------------------------------------------------------ */

/* Resident set size in bytes (from /proc/self/statm), or 0. */
static inline size_t rss_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long size = 0, res = 0;
	if (!f)
		return 0;
	if (fscanf(f, "%lu %lu", &size, &res) != 2)
		res = 0;
	fclose(f);
	return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

/* ---- page states: faults, zero checks, key=value facts, THP (test_pages, progs/pages) ---------- */

/* Minor page faults of this process so far (getrusage). */
static inline long minor_faults(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return -1;
	return ru.ru_minflt;
}

/* Offset of the first non-zero byte of [p, p + n), or SIZE_MAX when every
 * byte is zero.  Reads words, 64 at a time: fast enough for 1 GiB. */
static inline size_t first_nonzero(const void *p, size_t n)
{
	const uint8_t *b = p;
	size_t i = 0;
	while (i < n && ((uintptr_t)(b + i) & 7))
		if (b[i++])
			return i - 1;
	while (n - i >= 512) {
		const uint64_t *w = (const uint64_t *)(const void *)(b + i);
		uint64_t acc = 0;
		for (int k = 0; k < 64; k++)
			acc |= w[k];
		if (acc)
			break;
		i += 512;
	}
	for (; i < n; i++)
		if (b[i])
			return i;
	return SIZE_MAX;
}

/* The number printed as "key=N" at the start of a line of out (decimal);
 * missing when there is no such line. */
static inline long long kv_num(const char *out, const char *key, long long missing)
{
	size_t kl = strlen(key);
	for (const char *l = out; l && *l;) {
		if (strncmp(l, key, kl) == 0 && l[kl] == '=')
			return strtoll(l + kl + 1, NULL, 10);
		const char *nl = strchr(l, '\n');
		l = nl ? nl + 1 : NULL;
	}
	return missing;
}

/* The word of "key=word" at the start of a line of out, copied into buf
 * (n bytes); "" when missing. */
static inline const char *kv_str(const char *out, const char *key, char *buf, size_t n)
{
	size_t kl = strlen(key);
	buf[0] = '\0';
	for (const char *l = out; l && *l;) {
		if (strncmp(l, key, kl) == 0 && l[kl] == '=') {
			size_t len = strcspn(l + kl + 1, "\n");
			if (len >= n)
				len = n - 1;
			memcpy(buf, l + kl + 1, len);
			buf[len] = '\0';
			break;
		}
		const char *nl = strchr(l, '\n');
		l = nl ? nl + 1 : NULL;
	}
	return buf;
}

/* The system's transparent huge page mode: the bracketed word of
 * /sys/kernel/mm/transparent_hugepage/enabled ("always", "madvise",
 * "never") into buf; -1 when the file is missing or unreadable. */
static inline int thp_sys_mode(char *buf, size_t n)
{
	char line[128];
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	if (!f)
		return -1;
	char *got = fgets(line, sizeof line, f);
	fclose(f);
	char *o = got ? strchr(line, '[') : NULL, *c = o ? strchr(o, ']') : NULL;
	if (!c || (size_t)(c - o - 1) >= n)
		return -1;
	memcpy(buf, o + 1, (size_t)(c - o - 1));
	buf[c - o - 1] = '\0';
	return 0;
}

/* Whether line is a mapping header of /proc/<pid>/smaps ("start-end perms ..."):
 * fills *start and *end. */
static inline int smaps_header(const char *line, unsigned long *start, unsigned long *end)
{
	char *e1, *e2;
	if (!((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f')))
		return 0;
	*start = strtoul(line, &e1, 16);
	if (*e1 != '-')
		return 0;
	*end = strtoul(e1 + 1, &e2, 16);
	return e2 != e1 + 1 && *e2 == ' ';
}

/* Bytes of AnonHugePages of the mappings of this process that overlap
 * [lo, hi), from /proc/self/smaps; SIZE_MAX when it cannot be read. */
static inline size_t smaps_anon_huge_range(uintptr_t lo, uintptr_t hi)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	size_t total = 0;
	int in = 0;
	if (!f)
		return SIZE_MAX;
	while (fgets(line, sizeof line, f)) {
		unsigned long s, e, kb;
		if (smaps_header(line, &s, &e))
			in = s < hi && e > lo;
		else if (in && sscanf(line, "AnonHugePages: %lu kB", &kb) == 1)
			total += (size_t)kb << 10;
	}
	fclose(f);
	return total;
}

/* Resident bytes of this process from /proc/self/smaps_rollup (the Rss
 * line), or 0. */
static inline size_t rss_rollup_bytes(void)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	unsigned long kb = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "Rss: %lu kB", &kb) == 1)
			break;
	fclose(f);
	return (size_t)kb << 10;
}

#endif /* ARENA_TESTS_COMMON_H */
