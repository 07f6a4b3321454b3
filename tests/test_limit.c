/*
 * The soft memory limit and the memory-pressure signal (docs/tuning.md,
 * "The memory limit"): tests/progs/limit.c under LD_PRELOAD.  Where the
 * limit comes from (ARENA_CONF, a cgroup v2 tree faked under
 * sim_cgroup_root, a real cgroup v1 child of this process's own), bad
 * input, the signal (a FIFO as MEMORY_PRESSURE_WATCH, the counters'
 * fallback with and without the background thread, v1's
 * memory.pressure_level under a real limit), and libarena's resident
 * figure against the kernel's.  The real cgroup tests skip, saying why,
 * where a child cgroup cannot be made.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "arena.h"
#include "common.h"

#define LIMIT_PROG PROGS_DIR "/limit"

static void run_limit(const char *conf, const char *const argv_tail[], const char *extra_env,
		      run_result *r)
{
	const char *argv[8] = { LIMIT_PROG };
	for (int i = 0; argv_tail[i] && i < 6; i++)
		argv[i + 1] = argv_tail[i];
	char conf_var[512];
	snprintf(conf_var, sizeof conf_var, "ARENA_CONF=%s", conf);
	const char *env[] = { "LD_PRELOAD=" ARENA_SO, conf_var, extra_env, NULL };
	cr_assert_eq(run_prog(argv, env, NULL, 60, r), 0, "cannot run %s", LIMIT_PROG);
	cr_assert(run_exited0(r), "limit %s under ARENA_CONF=%s: %s\n%s\nstderr: %s", argv[1], conf,
		  r->desc, r->out, r->err);
}

static const char *const STATS[] = { "stats", NULL };

static void put(const char *dir, const char *name, const char *text)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	cr_assert(f, "cannot write %s", path);
	fputs(text, f);
	fclose(f);
}

static void mkdirs(const char *path)
{
	char p[512];
	snprintf(p, sizeof p, "%s", path);
	for (char *s = p + 1; *s; s++)
		if (*s == '/') {
			*s = 0;
			mkdir(p, 0755);
			*s = '/';
		}
	mkdir(p, 0755);
}

/* A fake cgroup v2 tree under a fresh directory: /proc/self/cgroup says
 * 0::/app.slice/app, mountinfo mounts cgroup2 at /sys/fs/cgroup; the
 * parent's memory.max is parent_max, the cgroup's memory.high and max. */
static void fake_v2(char *root, size_t n, const char *parent_max, const char *high, const char *max)
{
	snprintf(root, n, "/tmp/arena-cg-XXXXXX");
	cr_assert(mkdtemp(root));
	char d[512];
	snprintf(d, sizeof d, "%s/proc/self", root);
	mkdirs(d);
	put(d, "cgroup", "0::/app.slice/app\n");
	put(d, "mountinfo",
	    "22 1 0:21 / / rw - ext4 /dev/vda rw\n"
	    "35 22 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
	snprintf(d, sizeof d, "%s/sys/fs/cgroup/app.slice/app", root);
	mkdirs(d);
	put(d, "memory.high", high);
	put(d, "memory.max", max);
	put(d, "memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n");
	put(d, "memory.current", "0\n");
	snprintf(d, sizeof d, "%s/sys/fs/cgroup/app.slice", root);
	put(d, "memory.max", parent_max);
}

Test(limit, default_is_auto_and_says_where_it_came_from)
{
	run_result r;
	run_limit("", STATS, NULL, &r);
	char buf[64];
	cr_assert(kv_str(r.out, "source", buf, sizeof buf)[0], "%s", r.out);
	cr_assert_eq(r.err_len, 0, "a clean start says nothing: %s", r.err);
	run_result_free(&r);
}

Test(limit, bytes_from_arena_conf)
{
	run_result r;
	run_limit("memory_limit:64m", STATS, NULL, &r);
	char buf[64];
	cr_assert_eq(kv_num(r.out, "limit", -1), 64 << 20, "%s", r.out);
	cr_assert_str_eq(kv_str(r.out, "source", buf, sizeof buf), "ARENA_CONF");
	run_result_free(&r);
}

Test(limit, bad_values_say_so_and_keep_the_default)
{
	static const char *const bad[] = { "memory_limit:12q", "memory_limit:512k", "memory_limit:0%",
					   "memory_limit:101%", "memory_limit:" };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		run_result r;
		run_limit(bad[i], STATS, NULL, &r);
		cr_assert(contains(r.err, "libarena: ARENA_CONF: memory_limit"), "%s: %s", bad[i], r.err);
		cr_assert_eq(count_lines(r.err, r.err_len), 1, "%s: one line: %s", bad[i], r.err);
		cr_assert(contains(r.err, "stays auto"), "%s", r.err);
		run_result_free(&r);
	}
}

Test(limit, percent_of_ram_without_a_cgroup)
{
	char conf[256];
	snprintf(conf, sizeof conf, "memory_limit:50%%,sim_cgroup_root:/nonexistent");
	run_result r;
	run_limit(conf, STATS, NULL, &r);
	char buf[64];
	cr_assert_str_eq(kv_str(r.out, "source", buf, sizeof buf), "RAM", "%s", r.out);
	cr_assert_gt(kv_num(r.out, "limit", 0), 0);
	run_result_free(&r);
}

Test(limit, v2_max_is_the_least_up_the_tree)
{
	char root[64], conf[256], buf[64];
	fake_v2(root, sizeof root, "33554432\n", "max\n", "67108864\n");
	snprintf(conf, sizeof conf, "sim_cgroup_root:%s", root);
	run_result r;
	run_limit(conf, STATS, NULL, &r);
	cr_assert_eq(kv_num(r.out, "limit", -1), 32 << 20, "%s", r.out);
	cr_assert_str_eq(kv_str(r.out, "source", buf, sizeof buf), "cgroup v2 memory.max", "%s", r.out);
	/* the background thread watches memory.events (memory.pressure is missing) */
	cr_assert_str_eq(kv_str(r.out, "pressure", buf, sizeof buf), "memory.events", "%s", r.out);
	run_result_free(&r);
}

Test(limit, v2_high_first_and_percent_of_it)
{
	char root[64], conf[256], buf[64];
	fake_v2(root, sizeof root, "max\n", "50331648\n", "67108864\n");
	snprintf(conf, sizeof conf, "sim_cgroup_root:%s", root);
	run_result r;
	run_limit(conf, STATS, NULL, &r);
	cr_assert_eq(kv_num(r.out, "limit", -1), 48 << 20, "%s", r.out);
	cr_assert_str_eq(kv_str(r.out, "source", buf, sizeof buf), "cgroup v2 memory.high");
	run_result_free(&r);
	snprintf(conf, sizeof conf, "sim_cgroup_root:%s,memory_limit:50%%", root);
	run_limit(conf, STATS, NULL, &r);
	cr_assert_eq(kv_num(r.out, "limit", -1), 24 << 20, "%s", r.out);
	run_result_free(&r);
}

Test(limit, v2_max_everywhere_is_no_limit)
{
	char root[64], conf[256], buf[64];
	fake_v2(root, sizeof root, "max\n", "max\n", "max\n");
	snprintf(conf, sizeof conf, "sim_cgroup_root:%s", root);
	run_result r;
	run_limit(conf, STATS, NULL, &r);
	cr_assert_eq(kv_num(r.out, "limit", -1), 0, "%s", r.out);
	cr_assert_str_eq(kv_str(r.out, "source", buf, sizeof buf), "none");
	run_result_free(&r);
}

Test(limit, unreadable_cgroup_file_says_so)
{
	char root[64], conf[256], buf[64];
	fake_v2(root, sizeof root, "max\n", "bogus\n", "67108864\n");
	snprintf(conf, sizeof conf, "sim_cgroup_root:%s", root);
	run_result r;
	run_limit(conf, STATS, NULL, &r);
	cr_assert(contains(r.err, "libarena: memory_limit:") && contains(r.err, "memory.high"), "%s", r.err);
	cr_assert_str_eq(kv_str(r.out, "source", buf, sizeof buf), "cgroup v2 memory.max", "%s", r.out);
	run_result_free(&r);
	/* a directory where the file should be: read fails (EISDIR) */
	char d[512];
	snprintf(d, sizeof d, "%s/sys/fs/cgroup/app.slice/app/memory.high", root);
	unlink(d);
	mkdir(d, 0755);
	run_limit(conf, STATS, NULL, &r);
	cr_assert(contains(r.err, "cannot read"), "%s", r.err);
	run_result_free(&r);
}

/* systemd's protocol over a FIFO: the signal purges within 100 ms; the
 * FIFO is dropped once its writer is gone. */
Test(pressure, watch_signal_purges_within_100ms)
{
	char fifo[64] = "/tmp/arena-pressure-XXXXXX", env[128];
	cr_assert(mkdtemp(fifo));
	strcat(fifo, "/watch");
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	snprintf(env, sizeof env, "MEMORY_PRESSURE_WATCH=%s", fifo);
	const char *argv[] = { "fifo", fifo, NULL };
	run_result r;
	run_limit("decay_ms:60000", argv, env, &r);
	char buf[64];
	cr_assert_str_eq(kv_str(r.out, "pressure", buf, sizeof buf), "MEMORY_PRESSURE_WATCH", "%s", r.out);
	long long us = kv_num(r.out, "latency_us", -1);
	cr_log_info("pressure signal to purge done: %lld us", us);
	cr_assert(us >= 0 && us < 100000, "purge %lld us after the signal:\n%s", us, r.out);
	cr_assert_gt(kv_num(r.out, "purged_pressure", 0), 16 << 20, "%s", r.out);
	cr_assert_eq(kv_num(r.out, "signals", 0), 1, "%s", r.out);
	/* a FIFO whose writer closed polls ready at once for ever: dropped */
	cr_assert_str_eq(kv_str(r.out, "after_close", buf, sizeof buf), "counters", "%s", r.out);
	run_result_free(&r);
}

/* systemd's protocol over a socket: libarena connects, writes
 * MEMORY_PRESSURE_WRITE decoded, and a byte back is a signal. */
struct watch_server {
	int lfd;
	char got[64];
	long n;
	bool done;
};

static void *serve_watch(void *arg)
{
	struct watch_server *w = arg;
	int c = accept(w->lfd, NULL, NULL);
	if (c < 0)
		return NULL;
	struct pollfd p = { .fd = c, .events = POLLIN };
	if (poll(&p, 1, 5000) > 0)
		w->n = read(c, w->got, sizeof(w->got) - 1);
	usleep(300000); /* the program has freed its 32 MiB */
	if (write(c, "x", 1) == 1)
		while (!__atomic_load_n(&w->done, __ATOMIC_ACQUIRE))
			usleep(10000); /* open until the program is done */
	close(c);
	return NULL;
}

Test(pressure, watch_socket_gets_the_write_and_signals, .timeout = 30)
{
	char dir[64] = "/tmp/arena-pressure-XXXXXX", watch[160], conf[] = "ARENA_CONF=decay_ms:60000";
	cr_assert(mkdtemp(dir));
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s/sock", dir);
	struct watch_server w = { .lfd = socket(AF_UNIX, SOCK_STREAM, 0) };
	cr_assert(w.lfd >= 0 && bind(w.lfd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(w.lfd, 1) == 0);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, serve_watch, &w), 0);
	snprintf(watch, sizeof watch, "MEMORY_PRESSURE_WATCH=%s", a.sun_path);
	const char *argv[] = { LIMIT_PROG, "wait", NULL };
	const char *env[] = { "LD_PRELOAD=" ARENA_SO, conf, watch,
			      "MEMORY_PRESSURE_WRITE=c29tZSAxNTAwMDAgMTAwMDAwMA==", NULL };
	run_result r;
	cr_assert_eq(run_prog(argv, env, NULL, 20, &r), 0);
	__atomic_store_n(&w.done, true, __ATOMIC_RELEASE);
	shutdown(w.lfd, SHUT_RDWR); /* accept returns if nothing connected */
	pthread_join(t, NULL);
	close(w.lfd);
	cr_assert(run_exited0(&r), "%s\n%s", r.out, r.err);
	w.got[w.n > 0 ? w.n : 0] = 0;
	cr_assert_str_eq(w.got, "some 150000 1000000", "what libarena wrote to the socket");
	char buf[64];
	cr_assert_str_eq(kv_str(r.out, "pressure", buf, sizeof buf), "MEMORY_PRESSURE_WATCH", "%s", r.out);
	cr_assert_gt(kv_num(r.out, "purged_pressure", 0), 16 << 20, "%s", r.out);
	cr_assert_geq(kv_num(r.out, "latency_us", -1), 0, "%s", r.out);
	run_result_free(&r);
}

/* cgroup v2's memory.pressure, where it can be written: the PSI trigger
 * (150 ms of stall in a second) goes into it and it is what is watched. */
Test(pressure, psi_trigger_written_to_memory_pressure)
{
	char root[64], conf[256], d[512], got[64] = "";
	fake_v2(root, sizeof root, "max\n", "max\n", "max\n");
	snprintf(d, sizeof d, "%s/sys/fs/cgroup/app.slice/app", root);
	put(d, "memory.pressure", "");
	snprintf(conf, sizeof conf, "sim_cgroup_root:%s", root);
	run_result r;
	run_limit(conf, STATS, NULL, &r);
	char buf[64];
	cr_assert_str_eq(kv_str(r.out, "pressure", buf, sizeof buf), "memory.pressure", "%s", r.out);
	run_result_free(&r);
	strcat(d, "/memory.pressure");
	FILE *f = fopen(d, "r");
	cr_assert(f && fgets(got, sizeof got, f), "%s", d);
	fclose(f);
	cr_assert_str_eq(got, "some 150000 1000000");
}

/* Without eventfd/ppoll (sim_no_poll) the thread reads the counters at its
 * passes; a single-threaded program at its slow paths. */
static void counters_case(bool single)
{
	char root[64], conf[256], buf[64], events[512];
	fake_v2(root, sizeof root, "max\n", "max\n", "max\n");
	snprintf(conf, sizeof conf, "sim_cgroup_root:%s,decay_ms:4000%s", root,
		 single ? "" : ",sim_no_poll:true");
	snprintf(events, sizeof events, "%s/sys/fs/cgroup/app.slice/app/memory.events", root);
	const char *argv[] = { "counters", events, single ? "single" : NULL, NULL };
	run_result r;
	run_limit(conf, argv, NULL, &r);
	cr_assert_str_eq(kv_str(r.out, "pressure", buf, sizeof buf), single ? "none" : "counters", "%s",
			 r.out);
	cr_assert_gt(kv_num(r.out, "purged_pressure", 0), 0, "%s", r.out);
	cr_assert_geq(kv_num(r.out, "latency_us", -1), 0, "%s", r.out);
	run_result_free(&r);
}

Test(pressure, counters_fallback_without_poll, .timeout = 30)
{
	counters_case(false);
}

Test(pressure, counters_at_slow_paths_single_threaded, .timeout = 30)
{
	counters_case(true);
}

/* What counts against a cgroup's limit is the cgroup's usage less its
 * inactive page cache, above or below libarena's own figure: of 32 MiB
 * freed under a 256 MiB memory.max, what is left dirty fits beside 250 MiB
 * of memory.current, and all stays when it says 0, when 200 MiB of it is
 * inactive file, or when it says 40 MiB beside 240 MiB of huge blocks never
 * written (libarena's own figure counts them whole). */
static long long usage_case(const char *current, const char *stat, const char *unwritten_mb)
{
	char root[64], conf[256], d[512];
	fake_v2(root, sizeof root, "max\n", "max\n", "268435456\n");
	snprintf(d, sizeof d, "%s/sys/fs/cgroup/app.slice/app", root);
	put(d, "memory.current", current);
	put(d, "memory.stat", stat);
	snprintf(conf, sizeof conf, "sim_cgroup_root:%s,decay_ms:60000,dirty_cap:off", root);
	const char *argv[] = { "usage", unwritten_mb, NULL };
	run_result r;
	run_limit(conf, argv, NULL, &r);
	cr_assert_eq(kv_num(r.out, "limit", -1), 256 << 20, "%s", r.out);
	long long dirty = kv_num(r.out, "dirty", -1);
	run_result_free(&r);
	return dirty;
}

Test(limit, the_cgroups_usage_counts)
{
	long long full = usage_case("262144000\n", "anon 262144000\ninactive_file 0\n", NULL);
	cr_assert(full >= 0 && full < (8 << 20), "dirty %lld", full);
	cr_assert_gt(usage_case("0\n", "anon 0\n", NULL), 24 << 20);
	cr_assert_gt(usage_case("262144000\n", "anon 52428800\ninactive_file 209715200\n", NULL), 24 << 20);
	cr_assert_gt(usage_case("41943040\n", "anon 41943040\n", "240"), 24 << 20);
}

/* arena_stats_resident() after progs/limit's mixed workload (small, large
 * and huge blocks, realloc growth, frees, malloc_trim, decay) against
 * smaps of libarena's mappings: the sum within 1% of Rss, the lazy part of
 * LazyFree, the huge part (PAGEMAP_SCAN) of AnonHugePages; the kernel's
 * dirty and lazy pages among those libarena counts so; under thp:never no
 * free page libarena takes for zero is resident.  Returns the source. */
static void resident_case(const char *conf, bool never, const char *want_source)
{
	const char *argv[] = { "resident", NULL };
	run_result r;
	char source[32];
	run_limit(conf, argv, NULL, &r);
	long long mine = kv_num(r.out, "resident", -1), rss = kv_num(r.out, "kernel_rss", -1);
	cr_log_info("%s: resident %lld, kernel Rss %lld", conf, mine, rss);
	cr_assert_gt(rss, 0, "%s", r.out);
	cr_assert_str_eq(kv_str(r.out, "source", source, sizeof source), want_source, "%s", r.out);
	double err = (double)(mine - rss) / (double)rss, pct = (double)rss / 100;
	cr_assert(err < 0.01 && err > -0.01, "%s: resident off by %.2f%%:\n%s", conf, 100 * err, r.out);
	long long lazy = kv_num(r.out, "lazy", -1), huge = kv_num(r.out, "huge", -1);
	cr_assert_lt(llabs(lazy - kv_num(r.out, "kernel_lazy", -1)), pct, "%s:\n%s", conf, r.out);
	if (!strcmp(want_source, "PAGEMAP_SCAN"))
		cr_assert_lt(llabs(huge - kv_num(r.out, "kernel_huge", -1)), pct, "%s:\n%s", conf, r.out);
	cr_assert_leq(kv_num(r.out, "dirty", -1), kv_num(r.out, "own_dirty", -1), "%s", r.out);
	cr_assert_leq(lazy, kv_num(r.out, "own_lazy", -1), "%s", r.out);
	if (never)
		cr_assert_lt(kv_num(r.out, "zero", -1), pct, "%s:\n%s", conf, r.out);
	run_result_free(&r);
}

Test(stats, resident_matches_smaps_thp_never)
{
	resident_case("thp:never,decay_ms:200", true, "PAGEMAP_SCAN");
}

/* THP as the system has it (madvise here: chunks of huge blocks and dense
 * arena chunks advised), and advice everywhere, as THP `always` would. */
Test(stats, resident_matches_smaps_thp)
{
	resident_case("decay_ms:200", false, "PAGEMAP_SCAN");
	resident_case("thp:always,decay_ms:200", false, "PAGEMAP_SCAN");
}

Test(stats, resident_matches_smaps_lazy_free)
{
	resident_case("purge:free,decay_ms:200", false, "PAGEMAP_SCAN");
}

Test(stats, resident_matches_smaps_by_mincore)
{
	resident_case("sim_no_pagemap_scan:true,thp:never,decay_ms:200", true, "mincore");
}

/* ---- a real cgroup v1 child of this process's memory cgroup ---------------------------- */

static bool cgroup_v1_child(char *dir, size_t n, const char *name)
{
	FILE *f = fopen("/proc/self/cgroup", "r");
	char line[512], path[400] = "";
	while (f && fgets(line, sizeof line, f)) {
		char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
		if (b && !strncmp(a + 1, "memory:", 7)) {
			b[strcspn(b, "\n")] = 0;
			snprintf(path, sizeof path, "%s", b + 1);
		}
	}
	if (f)
		fclose(f);
	if (!path[0])
		return false;
	snprintf(dir, n, "/sys/fs/cgroup/memory%s/%s-%d", strcmp(path, "/") ? path : "", name, getpid());
	return mkdir(dir, 0755) == 0;
}

static void cg_put(const char *dir, const char *file, const char *v)
{
	char p[600];
	snprintf(p, sizeof p, "%s/%s", dir, file);
	FILE *f = fopen(p, "w");
	cr_assert(f, "%s", p);
	fputs(v, f);
	fclose(f);
}

static long long cg_num(const char *dir, const char *file, const char *key)
{
	char p[600], line[256];
	snprintf(p, sizeof p, "%s/%s", dir, file);
	FILE *f = fopen(p, "r");
	long long v = -1;
	while (f && fgets(line, sizeof line, f))
		if (!key)
			v = atoll(line);
		else if (!strncmp(line, key, strlen(key)) && line[strlen(key)] == ' ')
			v = atoll(line + strlen(key) + 1);
	if (f)
		fclose(f);
	return v;
}

/* Runs the limit program inside the cgroup dir (moved in by a shell). */
static void run_in(const char *dir, const char *conf, const char *args, run_result *r)
{
	char cmd[1024], conf_var[256];
	snprintf(cmd, sizeof cmd, "echo $$ > %s/cgroup.procs && exec %s %s", dir, LIMIT_PROG, args);
	snprintf(conf_var, sizeof conf_var, "ARENA_CONF=%s", conf);
	const char *argv[] = { "/bin/sh", "-c", cmd, NULL };
	const char *env[] = { "LD_PRELOAD=" ARENA_SO, conf_var, NULL };
	cr_assert_eq(run_prog(argv, env, NULL, 60, r), 0);
}

Test(cgroup_v1, limit_and_soft_limit_are_read)
{
	char dir[512], buf[64];
	if (!cgroup_v1_child(dir, sizeof dir, "arena-limit"))
		cr_skip_test("no cgroup v1 memory child can be made here (%s)", strerror(errno));
	cg_put(dir, "memory.limit_in_bytes", "268435456");
	run_result r;
	run_in(dir, "", "stats", &r);
	cr_expect_eq(kv_num(r.out, "limit", -1), 256 << 20, "%s %s", r.out, r.err);
	cr_expect_str_eq(kv_str(r.out, "source", buf, sizeof buf), "cgroup v1 memory.limit_in_bytes");
	cr_expect_str_eq(kv_str(r.out, "pressure", buf, sizeof buf), "memory.pressure_level");
	run_result_free(&r);
	cg_put(dir, "memory.soft_limit_in_bytes", "134217728");
	run_in(dir, "", "stats", &r);
	cr_expect_eq(kv_num(r.out, "limit", -1), 128 << 20, "%s", r.out);
	cr_expect_str_eq(kv_str(r.out, "source", buf, sizeof buf), "cgroup v1 memory.soft_limit_in_bytes");
	run_result_free(&r);
	rmdir(dir);
}

/* 96 MiB of libarena's freed dirty, 32 live, then 64 MiB of other memory
 * touched under a 128 MiB limit.  v1's pressure_level fires only once the
 * cgroup reclaims at its limit, where the kernel's OOM killer races the
 * background thread's purge: the signal saves the program in some runs
 * (7-9 of 10 here, with another test beside it), and without it
 * (memory_limit:off, no signal watched) the kernel kills every run. */
static int squeeze_runs(const char *dir, const char *conf, int runs, long long *purged)
{
	int lived = 0;
	for (int i = 0; i < runs; i++) {
		run_result r;
		run_in(dir, conf, "squeeze 128", &r);
		if (run_exited0(&r) && kv_num(r.out, "signals", 0) > 0) {
			lived++;
			*purged = kv_num(r.out, "purged_pressure", 0);
		}
		run_result_free(&r);
	}
	return lived;
}

Test(cgroup_v1, pressure_signal_saves_the_program, .timeout = 120)
{
	char dir[512];
	if (!cgroup_v1_child(dir, sizeof dir, "arena-squeeze"))
		cr_skip_test("no cgroup v1 memory child can be made here (%s)", strerror(errno));
	cg_put(dir, "memory.limit_in_bytes", "134217728");
	long long purged = 0, unused = 0;
	int lived = squeeze_runs(dir, "decay_ms:60000", 10, &purged);
	int lived_off = squeeze_runs(dir, "decay_ms:60000,memory_limit:off", 3, &unused);
	cr_log_info("lived %d of 10 runs with the signal, %d of 3 without; failcnt %lld, oom kills %lld",
		    lived, lived_off, cg_num(dir, "memory.failcnt", NULL),
		    cg_num(dir, "memory.oom_control", "oom_kill"));
	cr_expect_gt(lived, 0, "the pressure signal saved no run of 10");
	cr_expect_eq(lived_off, 0, "without the signal %d of 3 runs lived: the squeeze is too weak", lived_off);
	cr_expect(lived == 0 || purged > (32 << 20), "a run that lived purged only %lld bytes", purged);
	rmdir(dir);
}
