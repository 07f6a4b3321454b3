/*
 * prog_redis: a real program, redis-server driven by redis-benchmark over
 * the loopback.
 *
 * The workload starts the server under test (-s; default Debian's
 * /usr/bin/redis-server) on a free port of 127.0.0.1 with no persistence
 * (--save "" --appendonly no), its directory and log in a fresh temporary
 * directory, and waits until it answers PING.  The server inherits the
 * environment, LD_PRELOAD included.  Debian's redis-server is linked with
 * libjemalloc.so.2, which serves its malloc when nothing is preloaded; so
 * that the glibc configuration measures glibc's malloc, the workload then
 * preloads the C library itself (the libc.so.6 it maps) for the server
 * alone (-J keeps the linked jemalloc instead).  With another allocator
 * preloaded, the server's mallctl and nallocx calls still reach the linked
 * jemalloc (statistics and its idle background thread; nallocx decides only
 * whether shrinking a string needs a realloc, and a larger answer than the
 * block's never makes it skip one it needs).
 *
 * The client, redis-benchmark (-b), is a helper: it runs without LD_PRELOAD
 * or any allocator variable (spawn_helper_env), once per value size (-d, a
 * comma-separated list; default 16,256,4096 bytes), each time
 *   redis-benchmark -q -n N -P 16 -r K -d SIZE -t set,get,lpush,lpop
 * (N requests per test, -n; random keys out of K, -r), so that the keyspace
 * is refilled with larger values at each size and a list grows and shrinks.
 * Each test's requests per second is a `series` step (SET-16, GET-16, ...).
 *
 * Then the workload reads the server's VmHWM and VmRSS (/proc/PID/status)
 * and its CPU time (/proc/PID/stat), sends SHUTDOWN NOSAVE and waits for
 * it.  What is measured is the server alone, from the fork to the wait's
 * return: wall time, user and system time, minor faults and peak RSS as
 * wait4 reports them (the `measured` line; spawn.h), not the client's.
 *
 * Usage: prog_redis [-n requests] [-r keys] [-d sizes] [-P pipeline]
 *                   [-s redis-server] [-b redis-benchmark] [-J] [-k]
 *   -k  keep the temporary directory (its name is printed on stderr)
 * Prints "series step=<TEST>-<size> rps=<requests/s>" per test, the
 * `measured` line and "result requests_per_sec=<all requests / the tests'
 * time> server_cpu_s=<user + sys before the shutdown, /proc>
 * server_vmhwm_kib=<VmHWM before the shutdown>" on stdout, a line on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax):
 * BENCH tiny: -n 2000 -r 100 -d 16
 * BENCH ratio: requests_per_sec
 * BENCH series: rps
 * BENCH configs: libarena-thp-never, libarena-thp-always
 * BENCH preload: redis-server, !redis-benchmark
 * BENCH quick: 100k | -n 100000 -r 50000 -d 16,128,1024
 * BENCH full: 300k | -n 300000 -r 100000 -d 16,128,1024,4096
 */
#include <arpa/inet.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "bench.h"
#include "spawn.h"

#define MAX_SIZES 8
#define MAX_STEPS 64

/* A port of 127.0.0.1 that nothing listens on now (the kernel's choice for
 * a socket bound to port 0); 0 on failure. */
static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* Sends an inline command to the server on 127.0.0.1:port and reads the
 * first line of the answer into reply; 0 on success. */
static int command(int port, const char *cmd, char *reply, size_t len)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	int rc = -1;
	size_t got = 0;
	if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	    write(fd, cmd, strlen(cmd)) == (ssize_t)strlen(cmd)) {
		ssize_t n;
		while (got + 1 < len && (n = read(fd, reply + got, len - 1 - got)) > 0) {
			got += (size_t)n;
			if (memchr(reply, '\n', got))
				break;
		}
		rc = 0;
	}
	reply[got] = 0;
	close(fd);
	return rc;
}

/* The path of the libc.so.6 this process maps, into out; -1 if none. */
static int libc_path(char *out, size_t len)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[PATH_MAX + 128];
	int rc = -1;
	while (f && rc < 0 && fgets(line, sizeof line, f)) {
		char *p = strchr(line, '/');
		line[strcspn(line, "\n")] = 0;
		if (p && strstr(p, "/libc.so.6") && strlen(p) < len) {
			strcpy(out, p);
			rc = 0;
		}
	}
	if (f)
		fclose(f);
	return rc;
}

/* "<key>: <n> kB" from /proc/<pid>/status, in KiB; -1 if absent. */
static long status_kib(pid_t pid, const char *key)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	long v = -1;
	size_t k = strlen(key);
	while (f && fgets(line, sizeof line, f))
		if (strncmp(line, key, k) == 0 && line[k] == ':')
			v = strtol(line + k + 1, NULL, 10);
	if (f)
		fclose(f);
	return v;
}

/* The user + system CPU seconds of pid so far (/proc/<pid>/stat, fields 14
 * and 15, in clock ticks); -1 on failure. */
static double stat_cpu_s(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')'); /* the name may hold spaces */
	unsigned long long utime, stime;
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
			 &utime, &stime) != 2)
		return -1;
	return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

typedef struct {
	char name[48];
	double rps;
} step_t;

/* Appends the "<TEST>: <n> requests per second" lines of redis-benchmark's
 * output (its progress lines end in carriage returns) to steps, each named
 * TEST-size; returns how many it found. */
static int read_rps(const char *path, const char *size, step_t *steps, int nsteps)
{
	FILE *f = fopen(path, "r");
	char buf[1 << 16];
	size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = 0;
	int found = 0;
	for (char *save, *line = strtok_r(buf, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
		char test[32];
		double rps;
		while (*line == ' ')
			line++;
		if (sscanf(line, "%31[^:]: %lf requests per second", test, &rps) == 2 &&
		    nsteps + found < MAX_STEPS) {
			snprintf(steps[nsteps + found].name, sizeof steps[0].name, "%s-%s", test, size);
			steps[nsteps + found].rps = rps;
			found++;
		}
	}
	return found;
}

static void usage(void)
{
	fprintf(stderr, "usage: prog_redis [-n requests] [-r keys] [-d sizes] [-P pipeline] "
		"[-s redis-server] [-b redis-benchmark] [-J] [-k]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t requests = 200000, keys = 100000, pipeline = 16;
	char *server = "/usr/bin/redis-server", *bench = "/usr/bin/redis-benchmark";
	char sizes_arg[128] = "16,256,4096";
	int keep = 0, linked = 0, c;

	while ((c = getopt(argc, argv, "n:r:d:P:s:b:Jkh")) != -1) {
		int bad = 0;
		switch (c) {
		case 'n': bad = parse_u64(optarg, 1, 1000000000, &requests); break;
		case 'r': bad = parse_u64(optarg, 1, 1000000000, &keys); break;
		case 'd':
			bad = strlen(optarg) >= sizeof sizes_arg ? -1 : 0;
			if (!bad)
				strcpy(sizes_arg, optarg);
			break;
		case 'P': bad = parse_u64(optarg, 1, 10000, &pipeline); break;
		case 's': server = optarg; break;
		case 'b': bench = optarg; break;
		case 'J': linked = 1; break;
		case 'k': keep = 1; break;
		default: usage();
		}
		if (bad)
			usage();
	}
	if (optind != argc)
		usage();
	char *sizes[MAX_SIZES], *save;
	int nsizes = 0;
	for (char *s = strtok_r(sizes_arg, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
		uint64_t v;
		if (nsizes == MAX_SIZES || parse_u64(s, 1, 1 << 30, &v) < 0)
			usage();
		sizes[nsizes++] = s;
	}
	if (!nsizes)
		usage();

	char dir[PATH_MAX], logf[PATH_MAX], out[PATH_MAX];
	if (spawn_temp_dir("prog_redis", dir, sizeof dir) < 0 || spawn_path(logf, dir, "redis.log") < 0 ||
	    spawn_path(out, dir, "benchmark.txt") < 0) {
		perror("prog_redis: temporary directory");
		return 1;
	}
	const char *preload = getenv("LD_PRELOAD");
	char libc[PATH_MAX];
	if (!linked && (!preload || !*preload)) {
		if (libc_path(libc, sizeof libc) < 0) {
			fprintf(stderr, "prog_redis: libc.so.6 not found in /proc/self/maps\n");
			return 1;
		}
		setenv("LD_PRELOAD", libc, 1);
	}
	int port = free_port();
	char port_s[16], n_s[24], r_s[24], p_s[24];
	snprintf(port_s, sizeof port_s, "%d", port);
	snprintf(n_s, sizeof n_s, "%" PRIu64, requests);
	snprintf(r_s, sizeof r_s, "%" PRIu64, keys);
	snprintf(p_s, sizeof p_s, "%" PRIu64, pipeline);
	char *srv[] = { server, "--port", port_s, "--bind", "127.0.0.1", "--save", "",
			"--appendonly", "no", "--daemonize", "no", "--dir", dir, "--logfile", logf,
			NULL };
	double t0 = now_sec();
	pid_t pid = port ? spawn_start(srv, NULL, "/dev/null", NULL) : -1;
	if (pid < 0) {
		fprintf(stderr, "prog_redis: cannot start %s\n", server);
		return 1;
	}
	if (preload && *preload)
		setenv("LD_PRELOAD", preload, 1);
	else
		unsetenv("LD_PRELOAD");

	/* Up to 10 s for the server to answer PING. */
	char reply[256];
	int up = 0, status;
	for (int i = 0; i < 1000 && !up; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid) {
			fprintf(stderr, "prog_redis: %s exited at start-up (see %s)\n", server, logf);
			return 1;
		}
		up = command(port, "PING\r\n", reply, sizeof reply) == 0 &&
		     strncmp(reply, "+PONG", 5) == 0;
		if (!up)
			usleep(10000);
	}
	step_t steps[MAX_STEPS];
	int nsteps = 0, failed = !up;
	double bench_s = 0, total_requests = 0;
	for (int i = 0; i < nsizes && !failed; i++) {
		char *cmd[] = { bench, "-h", "127.0.0.1", "-p", port_s, "-q", "-n", n_s, "-P", p_s,
				"-r", r_s, "-d", sizes[i], "-t", "set,get,lpush,lpop", NULL };
		struct rusage ru;
		double secs;
		int rc = spawn_run(cmd, spawn_helper_env(), "/dev/null", out, &secs, &ru);
		int found = read_rps(out, sizes[i], steps, nsteps);
		if (rc != 0 || found != 4) {
			fprintf(stderr, "prog_redis: %s failed (status %d, %d results)\n", bench, rc, found);
			failed = 1;
		}
		for (int j = nsteps; j < nsteps + found; j++) {
			bench_s += (double)requests / steps[j].rps;
			total_requests += (double)requests;
		}
		nsteps += found;
	}
	long hwm = status_kib(pid, "VmHWM"), rss = status_kib(pid, "VmRSS");
	double cpu = stat_cpu_s(pid);
	if (command(port, "SHUTDOWN NOSAVE\r\n", reply, sizeof reply) != 0)
		kill(pid, SIGTERM);
	struct rusage ru;
	int rc = spawn_reap(pid, &ru);
	double wall = now_sec() - t0;
	if (keep) {
		fprintf(stderr, "prog_redis: kept %s\n", dir);
	} else {
		unlink(out);
		unlink(logf);
		rmdir(dir);
	}
	if (failed || rc != 0) {
		fprintf(stderr, "prog_redis: %s %s (status %d)\n", server,
			up ? "failed" : "did not answer PING in 10 s", rc);
		return 1;
	}
	for (int i = 0; i < nsteps; i++)
		printf("series step=%s rps=%.2f\n", steps[i].name, steps[i].rps);
	spawn_usage u = { 0 };
	spawn_usage_add(&u, wall, &ru);
	spawn_print_measured(&u);
	double rps = total_requests / bench_s;
	fprintf(stderr, "prog_redis: %s on port %d, %d sizes, %s requests per test: %.0f requests/s; "
		"server %.3f s, %.3f s user, %.3f s sys, VmHWM %.1f MiB (VmRSS %.1f at the end), "
		"%ld minor faults\n", server, port, nsizes, n_s, rps, wall, u.user_s, u.sys_s,
		hwm / 1024.0, rss / 1024.0, u.minflt);
	printf("result requests_per_sec=%.1f server_cpu_s=%.3f server_vmhwm_kib=%ld\n", rps, cpu, hwm);
	return 0;
}
