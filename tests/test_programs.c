/*
 * Real programs under LD_PRELOAD=libarena.so, their output compared with the
 * same run without it: python3, sort, sqlite3, git, a shell pipeline;
 * progs/ctor_dlsym (allocation before main, dlsym/dlerror/dlopen); the
 * ARENA_CONF settings stats_print and the warning for bad entries.
 * Bigger programs: part of python3's own regression suite (same outcome per
 * module), a redis-server loaded by redis-benchmark, gcc -O2 on a generated
 * file of a few MB (same executable).  Figures go to stderr (the suite's log)
 * as "[note] ..." lines; a test whose program is not installed is skipped
 * with a "[SKIP] ..." line.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include "arena.h"
#include "common.h"

#define PRELOAD "LD_PRELOAD=" ARENA_SO
#define PYTHON "/usr/bin/python3"
#define SORT "/usr/bin/sort"
#define SQLITE "/usr/bin/sqlite3"
#define GIT "/usr/bin/git"
#define CTOR_PROG PROGS_DIR "/ctor_dlsym"
#define SANDBOX_PROG PROGS_DIR "/sandbox"

static char tmp[64];

static void tmp_make(void)
{
	cr_assert_eq(make_tmpdir(tmp), 0, "mkdtemp failed");
}

static void tmp_remove(void)
{
	if (tmp[0])
		remove_tree(tmp);
	tmp[0] = '\0';
}

static void need(const char *path)
{
	cr_assert_eq(access(path, X_OK), 0, "%s is missing (`make deps-test` installs it)", path);
}

static void path_in_tmp(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/%s", tmp, name);
}

/* Runs argv with env; asserts exit 0 and, if quiet, an empty stderr. */
static void run_ok(const char *const argv[], const char *const env[], const char *in, double timeout,
		   int quiet, run_result *r)
{
	cr_assert_eq(run_prog(argv, env, in, timeout, r), 0, "cannot start %s", argv[0]);
	int preload = 0;
	for (int i = 0; env && env[i]; i++)
		preload |= strncmp(env[i], "LD_PRELOAD=", 11) == 0;
	cr_assert(run_exited0(r), "%s %s (%s): %s\nstderr: %.2000s", argv[0], argv[1] ? argv[1] : "",
		  preload ? "with libarena" : "without libarena", r->desc, r->err);
	if (quiet)
		cr_assert_eq(r->err_len, 0, "%s %s (%s) wrote on stderr: %.2000s", argv[0],
			     argv[1] ? argv[1] : "", preload ? "with libarena" : "without libarena",
			     r->err);
}

/* First line where a and b differ, for messages. */
static const char *first_diff(const char *a, const char *b)
{
	static char msg[512];
	size_t line = 1, i = 0;
	while (a[i] && a[i] == b[i]) {
		if (a[i] == '\n')
			line++;
		i++;
	}
	size_t la = i, lb = i;
	while (la > 0 && a[la - 1] != '\n')
		la--;
	lb = la;
	snprintf(msg, sizeof msg, "line %zu: with libarena \"%.120s\" vs without \"%.120s\"", line,
		 a + la, b + lb);
	return msg;
}

/* ---- python3 ------------------------------------------------------------------------------------ */

static void python_compare(const char *conf, const char *pymalloc)
{
	need(PYTHON);
	const char *argv[] = { PYTHON, TESTS_DIR "/scripts/alloc_heavy.py", NULL };
	char confvar[128], pymvar[64];
	snprintf(confvar, sizeof confvar, "ARENA_CONF=%s", conf ? conf : "");
	snprintf(pymvar, sizeof pymvar, "PYTHONMALLOC=%s", pymalloc);
	const char *env_ref[] = { pymvar, "PYTHONHASHSEED=0", "LC_ALL=C", "PYTHONDONTWRITEBYTECODE=1",
				  NULL };
	const char *env_pre[] = { pymvar, "PYTHONHASHSEED=0", "LC_ALL=C", "PYTHONDONTWRITEBYTECODE=1",
				  PRELOAD, conf ? confvar : NULL, NULL };
	run_result pre, ref;
	run_ok(argv, env_pre, NULL, 200, 1, &pre);
	run_ok(argv, env_ref, NULL, 200, 1, &ref);
	cr_assert(contains(ref.out, "dict 400000\n") && contains(ref.out, "\ndone\n"),
		  "reference run output: %s", ref.out);
	cr_assert_str_eq(pre.out, ref.out, "python3 output differs with libarena: %s",
			 first_diff(pre.out, ref.out));
	run_result_free(&pre);
	run_result_free(&ref);
}

Test(programs, python_alloc_heavy_malloc, .timeout = 300)
{
	python_compare(NULL, "malloc");
}

Test(programs, python_alloc_heavy_pymalloc_one_arena_no_tcache, .timeout = 300)
{
	python_compare("narenas:1,tcache:false", "pymalloc");
}

/* ---- sort of ~50 MB ----------------------------------------------------------------------------------- */

static void make_sort_input(const char *path, size_t bytes)
{
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	static char buf[1 << 20];
	setvbuf(f, buf, _IOFBF, sizeof buf);
	rng_t r;
	rng_seed(&r, 50);
	static const char alpha[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ,.-";
	char line[128];
	size_t written = 0;
	while (written < bytes) {
		size_t len = 1 + rng_below(&r, 100);
		for (size_t i = 0; i < len; i++)
			line[i] = alpha[rng_below(&r, sizeof alpha - 1)];
		line[len] = '\n';
		int copies = rng_below(&r, 50) == 0 ? 3 : 1; /* some duplicate lines */
		for (int c = 0; c < copies; c++)
			fwrite(line, 1, len + 1, f);
		written += (len + 1) * (size_t)copies;
	}
	cr_assert_eq(fclose(f), 0);
}

Test(programs, sort_50mb, .timeout = 300, .fini = tmp_remove)
{
	need(SORT);
	tmp_make();
	char in[128], ref[128], pre[128], pre2[128];
	path_in_tmp(in, sizeof in, "in.txt");
	path_in_tmp(ref, sizeof ref, "ref.txt");
	path_in_tmp(pre, sizeof pre, "pre.txt");
	path_in_tmp(pre2, sizeof pre2, "pre2.txt");
	make_sort_input(in, 50 * MiB);
	long long insize = file_size(in);

	const char *env_ref[] = { "LC_ALL=C", NULL };
	const char *env_pre[] = { "LC_ALL=C", PRELOAD, NULL };
	run_result r;
	const char *a_ref[] = { SORT, "-o", ref, in, NULL };
	run_ok(a_ref, env_ref, NULL, 200, 1, &r);
	run_result_free(&r);
	/* One big buffer, default settings. */
	const char *a_pre[] = { SORT, "-o", pre, in, NULL };
	run_ok(a_pre, env_pre, NULL, 200, 1, &r);
	run_result_free(&r);
	/* Small buffer (temporary files, merges) and two sorting threads. */
	const char *a_pre2[] = { SORT, "--parallel=2", "-S", "8M", "-T", tmp, "-o", pre2, in, NULL };
	run_ok(a_pre2, env_pre, NULL, 200, 1, &r);
	run_result_free(&r);

	cr_assert_eq(file_size(ref), insize);
	cr_assert_eq(file_size(pre), insize, "sorted output has %lld bytes, input %lld",
		     file_size(pre), insize);
	cr_assert(files_equal(pre, ref), "sort output differs with libarena");
	cr_assert(files_equal(pre2, ref), "sort --parallel=2 -S 8M output differs with libarena");
}

/* ---- sqlite3 -------------------------------------------------------------------------------------- */

static const char SQL[] =
	"PRAGMA journal_mode=WAL;\n"
	"CREATE TABLE t(id INTEGER PRIMARY KEY, a INTEGER, b TEXT, c BLOB);\n"
	"WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM s WHERE x<100000)\n"
	"INSERT INTO t SELECT x, (x*7919)%1000,\n"
	"  printf('row-%08d-%s', x, substr('abcdefghijklmnopqrstuvwxyz', 1 + x%26)), zeroblob(x%200)\n"
	"  FROM s;\n"
	"CREATE INDEX ta ON t(a);\n"
	"CREATE INDEX tb ON t(b);\n"
	"SELECT count(*), sum(a), sum(length(b)), sum(length(c)) FROM t;\n"
	"SELECT a, count(*) FROM t GROUP BY a ORDER BY count(*) DESC, a LIMIT 3;\n"
	"SELECT b FROM t WHERE a = 17 ORDER BY b DESC LIMIT 2;\n"
	"UPDATE t SET b = b || b || b WHERE id % 3 = 0;\n"
	"DELETE FROM t WHERE id % 5 = 0;\n"
	"SELECT count(*), sum(length(b)), max(length(b)) FROM t;\n"
	"SELECT group_concat(id) FROM (SELECT id FROM t ORDER BY b DESC LIMIT 5);\n"
	"SELECT count(DISTINCT substr(b, 1, 12)) FROM t;\n"
	"VACUUM;\n"
	"PRAGMA integrity_check;\n";

Test(programs, sqlite3_100k_rows, .timeout = 300, .fini = tmp_remove)
{
	need(SQLITE);
	tmp_make();
	char script[128], dbpre[128], dbref[128];
	path_in_tmp(script, sizeof script, "script.sql");
	path_in_tmp(dbpre, sizeof dbpre, "pre.db");
	path_in_tmp(dbref, sizeof dbref, "ref.db");
	cr_assert_eq(write_str(script, SQL), 0);
	const char *a_pre[] = { SQLITE, "-batch", dbpre, NULL };
	const char *a_ref[] = { SQLITE, "-batch", dbref, NULL };
	const char *env_pre[] = { "LC_ALL=C", PRELOAD, NULL };
	const char *env_ref[] = { "LC_ALL=C", NULL };
	run_result pre, ref;
	run_ok(a_pre, env_pre, script, 200, 1, &pre);
	run_ok(a_ref, env_ref, script, 200, 1, &ref);
	cr_assert(contains(pre.out, "\n100000|"), "row count missing: %s", pre.out);
	cr_assert(contains(pre.out, "\n80000|"), "count after DELETE missing: %s", pre.out);
	size_t n = pre.out_len;
	cr_assert(n >= 3 && strcmp(pre.out + n - 3, "ok\n") == 0, "integrity_check: %s", pre.out);
	cr_assert_str_eq(pre.out, ref.out, "sqlite3 output differs with libarena: %s",
			 first_diff(pre.out, ref.out));
	run_result_free(&pre);
	run_result_free(&ref);
}

/* ---- git ---------------------------------------------------------------------------------------- */

static void write_tree_files(const char *dir, int version)
{
	char path[256];
	snprintf(path, sizeof path, "%s/src", dir);
	mkdir(path, 0755);
	rng_t r;
	for (int i = 0; i < 240; i++) {
		if (version == 2 && i % 17 == 0) { /* deleted in the second commit */
			snprintf(path, sizeof path, "%s/src/f%03d.txt", dir, i);
			unlink(path);
			continue;
		}
		if (version == 1 && i >= 200)
			continue; /* added in the second commit */
		rng_seed(&r, (uint64_t)i * 1000 + (uint64_t)(version == 2 && i % 4 == 0 ? 2 : 1));
		size_t len = 200 + rng_below(&r, 8000);
		char *buf = malloc(len);
		cr_assert_not_null(buf);
		for (size_t k = 0; k < len; k++)
			buf[k] = (k % 61 == 60) ? '\n' : (char)('a' + rng_below(&r, 26));
		snprintf(path, sizeof path, "%s/src/f%03d.txt", dir, i);
		cr_assert_eq(write_file(path, buf, len), 0);
		free(buf);
	}
}

/* The whole git session in dir; returns everything it printed. */
static char *git_session(const char *dir, int preload)
{
	char home[128], repo[128];
	snprintf(home, sizeof home, "HOME=%s", dir);
	snprintf(repo, sizeof repo, "%s/repo", dir);
	const char *env[] = { home, "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C", "TZ=UTC",
			      "GIT_AUTHOR_DATE=2020-02-02T12:00:00Z",
			      "GIT_COMMITTER_DATE=2020-02-02T12:00:00Z", "GIT_TERMINAL_PROMPT=0",
			      preload ? PRELOAD : NULL, NULL };
#define G(...) (const char *[]) { GIT, "-c", "user.name=Arena Test", "-c", \
				  "user.email=arena@example.com", "-C", repo, __VA_ARGS__, NULL }
	const char *init[] = { GIT, "-c", "init.defaultBranch=main", "init", "-q", repo, NULL };
	const char **steps[] = {
		init,
		NULL, /* files, version 1 */
		G("add", "-A"),
		G("commit", "-q", "-m", "first commit"),
		NULL, /* files, version 2 */
		G("add", "-A"),
		G("commit", "-q", "-m", "second commit"),
		G("log", "--format=%H %T %s"),
		G("diff", "--stat", "HEAD~1", "HEAD"),
		G("fsck", "--strict", "--no-progress"),
		G("gc", "-q", "--aggressive"),
		G("count-objects", "-v"),
		G("log", "-p", "--format=%H", "-n", "1", "--", "src/f004.txt"),
		G("ls-files", "-s"),
	};
#undef G
	size_t cap = 0, len = 0;
	char *all = NULL;
	buf_append(&all, &len, &cap, "", 0);
	int version = 0;
	for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
		if (!steps[i]) {
			write_tree_files(repo, ++version);
			continue;
		}
		run_result r;
		run_ok(steps[i], env, NULL, 120, 0, &r);
		/* git writes progress and hints on stderr; only exit codes and
		 * stdout are compared. */
		char head[256];
		snprintf(head, sizeof head, "== %s\n", i == 0 ? "init" : steps[i][7]);
		buf_append(&all, &len, &cap, head, strlen(head));
		if (i == 11) { /* count-objects: sizes may vary with packing; keep the counts */
			for (char *l = r.out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
				if (!strncmp(l, "count:", 6) || !strncmp(l, "in-pack:", 8) ||
				    !strncmp(l, "packs:", 6))
					buf_append(&all, &len, &cap, l, strcspn(l, "\n") + 1);
		} else {
			buf_append(&all, &len, &cap, r.out, r.out_len);
		}
		run_result_free(&r);
	}
	return all;
}

Test(programs, git_init_add_commit_log_gc, .timeout = 300, .fini = tmp_remove)
{
	need(GIT);
	tmp_make();
	char dpre[128], dref[128];
	path_in_tmp(dpre, sizeof dpre, "pre");
	path_in_tmp(dref, sizeof dref, "ref");
	cr_assert_eq(mkdir(dpre, 0755), 0);
	cr_assert_eq(mkdir(dref, 0755), 0);
	char *pre = git_session(dpre, 1);
	char *ref = git_session(dref, 0);
	cr_assert(contains(ref, " second commit\n") && contains(ref, " first commit\n"),
		  "reference git log: %s", ref);
	cr_assert_str_eq(pre, ref, "git output differs with libarena: %s", first_diff(pre, ref));
	free(pre);
	free(ref);
}

/* ---- a shell pipeline (fork, exec, pipes, all preloaded) ---------------------------------------------- */

Test(programs, shell_pipeline, .timeout = 120)
{
	const char *argv[] = { "/bin/sh", "-c",
			       "seq 1 300000 | sort -rn | head -3; "
			       "seq 1 200000 | sed 's/1/one/g' | sort | uniq -c | sort -rn | head -3; "
			       "seq 1 100000 | sort -R --random-source=/dev/zero | sort -n | cksum",
			       NULL };
	const char *env_pre[] = { "LC_ALL=C", PRELOAD, NULL };
	const char *env_ref[] = { "LC_ALL=C", NULL };
	run_result pre, ref;
	run_ok(argv, env_pre, NULL, 60, 1, &pre);
	run_ok(argv, env_ref, NULL, 60, 1, &ref);
	cr_assert(contains(ref.out, "300000\n299999\n299998\n"), "reference output: %s", ref.out);
	cr_assert_str_eq(pre.out, ref.out, "pipeline output differs with libarena: %s",
			 first_diff(pre.out, ref.out));
	run_result_free(&pre);
	run_result_free(&ref);
}

/* ---- allocation before main, dlsym, dlerror ------------------------------------------------------- */

static void run_ctor(const char *conf, run_result *r)
{
	const char *argv[] = { CTOR_PROG, NULL };
	char var[160];
	const char *env[] = { PRELOAD, NULL, NULL };
	if (conf) {
		snprintf(var, sizeof var, "ARENA_CONF=%s", conf);
		env[1] = var;
	}
	cr_assert_eq(run_prog(argv, env, NULL, 60, r), 0, "cannot run %s", CTOR_PROG);
	cr_assert(run_exited0(r), "%s (ARENA_CONF=%s): %s\nstdout: %s\nstderr: %s", CTOR_PROG,
		  conf ? conf : "", r->desc, r->out, r->err);
	cr_assert_str_eq(r->out, "ok\n", "output: %s", r->out);
}

Test(programs, ctor_dlsym_dlerror, .timeout = 60)
{
	run_result r;
	run_ctor(NULL, &r);
	cr_assert_eq(r.err_len, 0, "stderr: %s", r.err);
	run_result_free(&r);
	run_ctor("tcache:false,narenas:1", &r);
	cr_assert_eq(r.err_len, 0, "stderr: %s", r.err);
	run_result_free(&r);
	run_ctor("narenas:8,tcache:true,misuse:abort,stats_print:false", &r);
	cr_assert_eq(r.err_len, 0, "every key valid, yet stderr: %s", r.err);
	run_result_free(&r);
}

/* ---- a seccomp sandbox ----------------------------------------------------------------------------- */

/* A run's bound (a hang), not its time: quiet, the three runs of
 * seccomp_sandbox_after_start_up fitted in 60 s (every .ci/run before);
 * under UBSan with three 8-thread soaks beside them on the 2 vCPUs (load
 * 28, 2026-12-04 18:53 UTC) the default run took 35 s and decay_ms:0's
 * 23 s, over the test's old 60 s.  Each test's timeout covers its runs
 * at this bound. */
#define SANDBOX_LIMIT_S 120

/* tests/progs/sandbox.c under conf (NULL: the defaults), with arg (or
 * NULL). */
static void run_sandbox_arg(const char *conf, const char *arg, run_result *r)
{
	char conf_var[128];
	snprintf(conf_var, sizeof conf_var, "ARENA_CONF=%s", conf ? conf : "");
	const char *argv[] = { SANDBOX_PROG, arg, NULL };
	const char *env[] = { PRELOAD, conf_var, NULL };
	cr_assert_eq(run_prog(argv, env, NULL, SANDBOX_LIMIT_S, r), 0, "cannot run %s", SANDBOX_PROG);
}

static void run_sandbox(const char *conf, run_result *r)
{
	run_sandbox_arg(conf, NULL, r);
}

/* tests/progs/sandbox.c with arg under conf must print "ok" and exit 0;
 * the test skips where the filter cannot be (not x86-64, or no seccomp
 * filter can be installed). */
static void sandbox_expect_ok(const char *conf, const char *arg)
{
#ifndef __x86_64__
	cr_skip_test("the filter in tests/progs/sandbox.c is written for x86-64");
#endif
	run_result r;
	run_sandbox_arg(conf, arg, &r);
	if (run_exited0(&r) && contains(r.out, "skipped")) {
		cr_log_warn("%s", r.out);
		run_result_free(&r);
		cr_skip_test("no seccomp filter can be installed here");
	}
	cr_assert(run_exited0(&r) && contains(r.out, "ok\n"), "%s %s: %s\n%s\nstderr: %s",
		  conf ? conf : "defaults", arg ? arg : "", r.desc, r.out, r.err);
	run_result_free(&r);
}

/* A strict seccomp filter installed after start-up, OpenSSH's
 * pre-authentication child's list (any other system call kills): small,
 * large and huge blocks, realloc, calloc, purges.  The defaults make no
 * call outside it; purge_batch:true does (process_madvise), and the
 * filter kills that run with SIGSYS: this check can fail. */
Test(programs, seccomp_sandbox_after_start_up, .timeout = 3 * SANDBOX_LIMIT_S + 10)
{
	sandbox_expect_ok(NULL, NULL);
	run_result r;
	run_sandbox("decay_ms:0", &r); /* every free purges at once */
	cr_assert(run_exited0(&r) && contains(r.out, "ok\n"), "decay_ms:0: %s\n%s\nstderr: %s",
		  r.desc, r.out, r.err);
	run_result_free(&r);
	run_sandbox("purge_batch:true", &r);
	cr_assert(run_signaled(&r, SIGSYS), "purge_batch:true calls process_madvise: %s\n%s", r.desc,
		  r.out);
	run_result_free(&r);
}

/* The same filter before the program's first malloc: libarena's start-up
 * makes no call outside it either (it called sysinfo(2) once, which the
 * filter kills), and a block above 1 GiB (1 GiB + 2 MiB), for which
 * libarena reads the machine's size (/proc/meminfo: refused with EACCES),
 * is still tried. */
Test(programs, seccomp_sandbox_before_the_first_malloc, .timeout = SANDBOX_LIMIT_S + 10)
{
	sandbox_expect_ok(NULL, "first");
}

/* Under the same filter, huge-page advice is refused (EINVAL): libarena
 * stops asking after the first refusal instead of once each time a chunk
 * is taken again (100 blocks of 4 MiB under thp:always, nothing purged:
 * 100 refused calls before, at most 8 madvise calls allowed now, the
 * program counts them). */
Test(programs, seccomp_sandbox_refused_advice_not_retried, .timeout = SANDBOX_LIMIT_S + 10)
{
	sandbox_expect_ok("thp:always,decay_ms:-1,huge_decay_ms:-1,dirty_cap:off", "advice");
}

/* ---- ARENA_CONF ----------------------------------------------------------------------------------- */

Test(programs, stats_print_at_exit, .timeout = 60)
{
	run_result r;
	run_ctor("stats_print:true", &r);
	cr_assert_gt(r.err_len, 0, "stats_print:true printed nothing on stderr");
	cr_assert(contains(r.err, "libarena"), "statistics do not mention libarena: %s", r.err);
	run_result_free(&r);

	/* A program of the system, too; its own output is untouched.  (Not a
	 * coreutils program: those close stderr in an atexit handler.) */
	need(SQLITE);
	const char *argv[] = { SQLITE, ":memory:", "select 1+1;", NULL };
	const char *env[] = { "LC_ALL=C", PRELOAD, "ARENA_CONF=stats_print:true", NULL };
	run_ok(argv, env, NULL, 30, 0, &r);
	cr_assert_str_eq(r.out, "2\n");
	cr_assert(contains(r.err, "libarena"), "sqlite3 with stats_print:true, stderr: %s", r.err);
	run_result_free(&r);

	run_ctor("stats_print:false", &r);
	cr_assert_eq(r.err_len, 0, "stats_print:false printed: %s", r.err);
	run_result_free(&r);
}

static void expect_warnings(const char *conf, size_t lines, const char *key1, const char *key2)
{
	run_result r;
	run_ctor(conf, &r);
	cr_assert_eq(count_lines(r.err, r.err_len), lines,
		     "ARENA_CONF=%s: expected %zu warning line(s), got: \"%s\"", conf, lines, r.err);
	cr_assert(contains(r.err, "libarena"), "ARENA_CONF=%s: warning without \"libarena\": %s",
		  conf, r.err);
	cr_assert(contains(r.err, key1), "ARENA_CONF=%s: warning does not name %s: %s", conf, key1,
		  r.err);
	if (key2)
		cr_assert(contains(r.err, key2), "ARENA_CONF=%s: warning does not name %s: %s", conf,
			  key2, r.err);
	run_result_free(&r);
}

Test(programs, bad_conf_entries_warn_once, .timeout = 60)
{
	expect_warnings("bogus:1", 1, "bogus", NULL);
	expect_warnings("narenas:abc", 1, "narenas", NULL);
	expect_warnings("tcache:maybe", 1, "tcache", NULL);
	expect_warnings("stats_print:2", 1, "stats_print", NULL);
	expect_warnings("misuse:sometimes", 1, "misuse", NULL);
	/* a bad entry among good ones: only it is reported */
	expect_warnings("tcache:false,bogus:1,narenas:2", 1, "bogus", NULL);
	/* two bad entries: one line each */
	expect_warnings("bogus:1,other_bogus:2", 2, "bogus", "other_bogus");
}

/* A bad entry does not stop the good ones from working. */
Test(programs, bad_conf_entry_keeps_good_ones, .timeout = 60)
{
	run_result r;
	run_ctor("bogus:1,stats_print:true", &r);
	cr_assert_geq(count_lines(r.err, r.err_len), 2, "expected a warning and statistics: %s", r.err);
	cr_assert(contains(r.err, "bogus"));
	run_result_free(&r);
}

/* ---- bigger programs: helpers ------------------------------------------------------------------------- */

#define REDIS_SERVER "/usr/bin/redis-server"
#define REDIS_CLI "/usr/bin/redis-cli"
#define REDIS_BENCH "/usr/bin/redis-benchmark"
#define GCC "/usr/bin/gcc"

/* A figure for the log: the tests' stderr goes to build/tests/test_programs.log. */
#define note(...)                                            \
	do {                                                 \
		fprintf(stderr, "[note] " __VA_ARGS__);      \
		fputc('\n', stderr);                         \
	} while (0)

/* Skips the test, with a line in the log, when path is not installed. */
static void need_or_skip(const char *path, const char *pkg)
{
	if (access(path, X_OK) == 0)
		return;
	fprintf(stderr, "[SKIP] %s is not installed (Debian package %s): test skipped\n", path, pkg);
	cr_skip_test("%s is not installed (Debian package %s)", path, pkg);
}

/* Copies the line starting at *p (without "\r\n") into buf and moves *p to
 * the next one; returns 0 at the end of s. */
static int next_line(const char **p, char *buf, size_t n)
{
	const char *l = *p;
	if (!l || !*l)
		return 0;
	size_t len = strcspn(l, "\n");
	*p = l[len] ? l + len + 1 : l + len;
	if (len > 0 && l[len - 1] == '\r')
		len--;
	if (len >= n)
		len = n - 1;
	memcpy(buf, l, len);
	buf[len] = '\0';
	return 1;
}

static double elapsed_since(double t0)
{
	return now_s() - t0;
}

/* ---- python3's own regression tests ---------------------------------------------------------------- */

/* Modules of python3's test suite that allocate a lot (containers, strings,
 * bytes, JSON, XML, regular expressions, compression, threads): ~10 s of CPU
 * per run on the reference 2-vCPU machine.  Those that the installed version
 * does not have (test_unicode became test_str in 3.13) are left out. */
static const char *const PY_MODULES[] = {
	"test_list", "test_dict", "test_dictviews", "test_userdict", "test_collections",
	"test_bytes", "test_unicode", "test_str", "test_struct", "test_marshal", "test_heapq",
	"test_sort", "test_json", "test_re", "test_csv", "test_xml_etree", "test_zlib",
	"test_mmap", "test_thread",
};
#define PY_MAX_MODULES 64

typedef struct py_module {
	char name[48];
	long ran;         /* "Ran N tests" */
	char result[96];  /* "OK", "OK (skipped=3)", "FAILED (failures=1)"; "" if none */
	/* " pkg.mod.Class.test_a ..." from its "FAIL: "/"ERROR: " lines; those
	 * that did not fit are left out whole, and failing_cut says so */
	char failing[600];
	bool failing_cut;
} py_module;

typedef struct py_report {
	py_module m[PY_MAX_MODULES];
	int n;
	char overall[48]; /* from "== Tests result: SUCCESS ==" */
} py_report;

/* Adds a test's id to m's failing list: "test_x (pkg.mod.Class.test_x)
 * ..." gives the part in parentheses, so that two classes' test_x differ. */
static void py_add_failing(py_module *m, const char *what)
{
	const char *id = what;
	size_t len = strcspn(what, " ");
	const char *open = strstr(what, " (");
	if (open && open == what + len && strchr(open, ')')) {
		id = open + 2;
		len = strcspn(id, ") ");
	}
	size_t used = strlen(m->failing);
	if (used + 1 + len >= sizeof m->failing) {
		m->failing_cut = true;
		return;
	}
	snprintf(m->failing + used, sizeof m->failing - used, " %.*s", (int)len, id);
}

/* Reads the verbose output of `python3 -m test -v`: a module starts at its
 * "[ k/N] test_x" line, its unittest summary follows. */
static void py_parse(const char *out, py_report *rep)
{
	char line[512];
	const char *p = out;
	memset(rep, 0, sizeof *rep);
	py_module *cur = NULL;
	while (next_line(&p, line, sizeof line)) {
		const char *br = strstr(line, "] test_");
		if (strstr(line, " load avg: ") && br && rep->n < PY_MAX_MODULES) {
			cur = &rep->m[rep->n++];
			size_t len = strcspn(br + 2, " ");
			snprintf(cur->name, sizeof cur->name, "%.*s", (int)len, br + 2);
		} else if (cur && strncmp(line, "Ran ", 4) == 0) {
			cur->ran = strtol(line + 4, NULL, 10);
		} else if (cur && (strncmp(line, "FAIL: ", 6) == 0 || strncmp(line, "ERROR: ", 7) == 0)) {
			py_add_failing(cur, strchr(line, ' ') + 1);
		} else if (cur && (strcmp(line, "OK") == 0 || strncmp(line, "OK (", 4) == 0 ||
				   strncmp(line, "FAILED (", 8) == 0)) {
			snprintf(cur->result, sizeof cur->result, "%.95s", line);
		} else if (strncmp(line, "== Tests result: ", 17) == 0) {
			size_t len = strcspn(line + 17, " ");
			snprintf(rep->overall, sizeof rep->overall, "%.*s", (int)len, line + 17);
		}
	}
}

static int py_ok(const py_module *m)
{
	return strncmp(m->result, "OK", 2) == 0;
}

/* Is name one of the space-separated words of list? */
static int py_listed(const char *list, const char *name)
{
	size_t len = strlen(name);
	for (const char *p = strstr(list, name); p; p = strstr(p + 1, name))
		if ((p == list || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\0'))
			return 1;
	return 0;
}

/* Whether every test failing in b (with libarena) fails in a too: a's
 * list, if cut, is taken as holding them. */
static bool py_failing_covered(const py_module *a, const py_module *b)
{
	char names[sizeof b->failing], *save = NULL;
	snprintf(names, sizeof names, "%s", b->failing);
	for (char *name = strtok_r(names, " ", &save); name; name = strtok_r(NULL, " ", &save))
		if (!a->failing_cut && !py_listed(a->failing, name))
			return false;
	return true;
}

/* A module failing both ways: each test failing with libarena (b) fails
 * without it (a) too, and a module that gave a summary without libarena
 * gives one with it (no crash). */
static void py_expect_failing_without(const py_module *a, const py_module *b)
{
	if (a->result[0])
		cr_assert(b->result[0], "%s: \"%s\" without libarena, no summary with it (a crash?)",
			  a->name, a->result);
	cr_assert(py_failing_covered(a, b),
		  "%s: tests fail with libarena that pass without it (failing with:%s; without:%s)",
		  a->name, b->failing, a->failing);
}

/* Appends " module(result: failing tests)" to list (size bytes). */
static void py_list_module(char *list, size_t size, const py_module *m)
{
	size_t used = strlen(list);
	snprintf(list + used, size - used, " %s(%s:%s%s)", m->name,
		 m->result[0] ? m->result : "no summary", m->failing, m->failing_cut ? " ..." : "");
}

/* Re-runs of a module alone that tell a flaky module from libarena's failure. */
#define PY_RERUNS 3

/* In how many of PY_RERUNS runs of b's module alone without libarena
 * (env) the tests that failed with libarena fail too: runs that time out
 * or give no summary count for nothing.  -1, no re-run: a failure with no
 * test named (a crash) or too many to name is never excused. */
static int py_reference_fails_too(const py_module *b, const char *const env[])
{
	if (!b->result[0] || !b->failing[0] || b->failing_cut)
		return -1;
	const char *argv[] = { PYTHON, "-m", "test", "-v", b->name, NULL };
	int fails = 0;
	for (int i = 0; i < PY_RERUNS; i++) {
		run_result r;
		cr_assert_eq(run_prog(argv, env, NULL, 180, &r), 0);
		static py_report rep;
		py_parse(r.out, &rep);
		const py_module *a = &rep.m[0];
		fails += !r.timed_out && rep.n == 1 && a->result[0] && !py_ok(a) &&
			 py_failing_covered(a, b);
		run_result_free(&r);
	}
	return fails;
}

static long py_skipped(const py_module *m)
{
	const char *s = strstr(m->result, "skipped=");
	return s ? strtol(s + 8, NULL, 10) : 0;
}

Test(programs, python_regrtest_modules_same_outcome, .timeout = 420, .fini = tmp_remove)
{
	need_or_skip(PYTHON, "python3");
	tmp_make();

	/* Is the regression suite installed?  The version comes first, for the message. */
	const char *probe[] = { PYTHON, "-c",
				"import os, sys\n"
				"print('%d.%d' % sys.version_info[:2], flush=True)\n"
				"import test.libregrtest\n"
				"print(os.path.dirname(test.__file__))\n",
				NULL };
	const char *env_probe[] = { "LC_ALL=C", "PYTHONDONTWRITEBYTECODE=1", NULL };
	run_result r;
	cr_assert_eq(run_prog(probe, env_probe, NULL, 60, &r), 0);
	char ver[32] = "", testdir[256] = "";
	const char *p = r.out;
	next_line(&p, ver, sizeof ver);
	next_line(&p, testdir, sizeof testdir);
	if (!run_exited0(&r) || !testdir[0]) {
		fprintf(stderr, "[SKIP] python%s's regression tests (test.libregrtest) are not installed "
				"(Debian package libpython%s-testsuite): test skipped\n", ver, ver);
		cr_skip_test("python%s's regression tests are not installed (Debian package "
			     "libpython%s-testsuite)", ver, ver);
	}
	run_result_free(&r);

	const char *argv[PY_MAX_MODULES + 8];
	int na = 0;
	argv[na++] = PYTHON;
	argv[na++] = "-m";
	argv[na++] = "test";
	argv[na++] = "-v";
	char absent[512] = "";
	for (size_t i = 0; i < sizeof PY_MODULES / sizeof *PY_MODULES; i++) {
		char f[400], d[400];
		snprintf(f, sizeof f, "%s/%s.py", testdir, PY_MODULES[i]);
		snprintf(d, sizeof d, "%s/%s/__init__.py", testdir, PY_MODULES[i]);
		if (access(f, R_OK) == 0 || access(d, R_OK) == 0)
			argv[na++] = PY_MODULES[i];
		else
			snprintf(absent + strlen(absent), sizeof absent - strlen(absent), " %s",
				 PY_MODULES[i]);
	}
	argv[na] = NULL;
	cr_assert_geq(na - 4, 12, "only %d of the chosen test modules exist in %s (absent:%s)", na - 4,
		      testdir, absent);

	/* PYTHONMALLOC=malloc: every object, small ones too, comes from malloc
	 * (pymalloc would serve those from its own pools). */
	char tmpvar[96];
	snprintf(tmpvar, sizeof tmpvar, "TMPDIR=%s", tmp);
	const char *env_ref[] = { "PYTHONMALLOC=malloc", "PYTHONHASHSEED=0", "LC_ALL=C",
				  "PYTHONDONTWRITEBYTECODE=1", tmpvar, NULL };
	const char *env_pre[] = { "PYTHONMALLOC=malloc", "PYTHONHASHSEED=0", "LC_ALL=C",
				  "PYTHONDONTWRITEBYTECODE=1", tmpvar, PRELOAD, NULL };
	run_result ref, pre;
	double t0 = now_s();
	cr_assert_eq(run_prog(argv, env_ref, NULL, 180, &ref), 0);
	double t_ref = elapsed_since(t0);
	t0 = now_s();
	cr_assert_eq(run_prog(argv, env_pre, NULL, 180, &pre), 0);
	double t_pre = elapsed_since(t0);

	cr_assert(!ref.timed_out && WIFEXITED(ref.status),
		  "python3 -m test without libarena: %s\nstderr: %.2000s", ref.desc, ref.err);
	cr_assert(!pre.timed_out && WIFEXITED(pre.status),
		  "python3 -m test with libarena: %s (without: %s)\nstdout tail: %s\nstderr: %.3000s",
		  pre.desc, ref.desc, pre.out + (pre.out_len > 3000 ? pre.out_len - 3000 : 0), pre.err);

	static py_report rr, rp;
	py_parse(ref.out, &rr);
	py_parse(pre.out, &rp);
	cr_assert_eq(rr.n, na - 4, "without libarena: %d modules reported, %d asked for; stdout tail: %s",
		     rr.n, na - 4, ref.out + (ref.out_len > 3000 ? ref.out_len - 3000 : 0));
	cr_assert_eq(rp.n, rr.n, "with libarena: %d modules reported, %d without", rp.n, rr.n);

	/* A module failing without libarena is the machine's business, whatever
	 * it does with libarena, as long as every test failing with libarena
	 * fails without it too.  One failing with libarena only is libarena's,
	 * unless its failing tests fail alone without libarena too in one of
	 * PY_RERUNS tries: then it is flaky here (a module failed one full run
	 * in dozens with neither allocator at fault). */
	long ran = 0, skipped = 0;
	int passed = 0, ref_ok = 0, pre_failed = 0;
	char failed_ref[512] = "", failed_ref_only[512] = "", flaky[512] = "";
	for (int i = 0; i < rr.n; i++) {
		const py_module *a = &rr.m[i], *b = &rp.m[i];
		cr_assert_str_eq(b->name, a->name, "module %d: %s with libarena, %s without", i + 1,
				 b->name, a->name);
		pre_failed += !py_ok(b);
		ref_ok += py_ok(a);
		if (!py_ok(a)) {
			if (!py_ok(b))
				py_expect_failing_without(a, b);
			py_list_module(py_ok(b) ? failed_ref_only : failed_ref, sizeof failed_ref, a);
		} else if (!py_ok(b)) {
			int ref_fails = py_reference_fails_too(b, env_ref);
			cr_assert_gt(ref_fails, 0,
				     "%s passed without libarena (%ld tests, \"%s\") but not with it "
				     "(\"%s\", failing:%s%s); %s", a->name, a->ran, a->result,
				     b->result, b->failing, b->failing_cut ? " ..." : "",
				     ref_fails < 0 ? "no re-run: no failing test named, or too many"
						   : "alone without libarena those tests passed in "
						     "every re-run");
			snprintf(flaky + strlen(flaky), sizeof flaky - strlen(flaky),
				 " %s(failing with libarena:%s; alone without it, in %d of %d re-runs)",
				 a->name, b->failing, ref_fails, PY_RERUNS);
		} else {
			cr_assert_str_eq(b->result, a->result, "%s: \"%s\" with libarena, \"%s\" without",
					 a->name, b->result, a->result);
			cr_assert_eq(b->ran, a->ran, "%s: %ld tests ran with libarena, %ld without",
				     a->name, b->ran, a->ran);
		}
		ran += a->ran;
		skipped += py_skipped(a);
		passed += py_ok(a) && py_ok(b);
	}
	cr_assert(rp.overall[0], "python3 -m test with libarena printed no overall result; stdout tail: %s",
		  pre.out + (pre.out_len > 3000 ? pre.out_len - 3000 : 0));
	if (!pre_failed && ref_ok == rr.n) {
		cr_assert_str_eq(rp.overall, rr.overall, "overall result: %s with libarena, %s without",
				 rp.overall, rr.overall);
		cr_assert_eq(WEXITSTATUS(pre.status), WEXITSTATUS(ref.status),
			     "python3 -m test exited %d with libarena, %d without",
			     WEXITSTATUS(pre.status), WEXITSTATUS(ref.status));
	}

	char names[1024] = "";
	for (int i = 0; i < rr.n; i++)
		snprintf(names + strlen(names), sizeof names - strlen(names), " %s", rr.m[i].name);
	note("python%s regrtest (PYTHONMALLOC=malloc):%s", ver, names);
	note("python%s regrtest: %d modules, %d passed both ways, %ld tests (%ld skipped), result %s "
	     "without libarena, %s with; %.1f s without libarena, %.1f s with; failing both ways:%s; "
	     "failing without libarena only:%s; flaky:%s; absent:%s",
	     ver, rr.n, passed, ran, skipped, rr.overall, rp.overall, t_ref, t_pre,
	     failed_ref[0] ? failed_ref : " none", failed_ref_only[0] ? failed_ref_only : " none",
	     flaky[0] ? flaky : " none", absent[0] ? absent : " none");
	/* Modules failing without libarena too are the machine's business, but
	 * with most of them failing the comparison would say little. */
	cr_assert_geq(ref_ok, rr.n / 2, "most modules fail without libarena:%s%s", failed_ref,
		      failed_ref_only);
	run_result_free(&ref);
	run_result_free(&pre);
}

/* ---- redis-server under redis-benchmark ------------------------------------------------------------ */

/* A loopback TCP port that is free now (bound, then released). */
static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = 0 };
	socklen_t len = sizeof a;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
		close(fd);
		return -1;
	}
	close(fd);
	return ntohs(a.sin_port);
}

static pid_t server_pid;

/* Starts argv[0] in the background in dir with stdout and stderr to files,
 * the environment child_envp(env) (common.h).  It gets SIGKILL if this process dies. */
static pid_t spawn_logged(const char *const argv[], const char *const env[], const char *dir,
			  const char *out_path, const char *err_path)
{
	char **envp = child_envp(env);
	cr_assert_not_null(envp);
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		int in = open("/dev/null", O_RDONLY);
		int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (in < 0 || out < 0 || err < 0 || chdir(dir) != 0)
			_exit(126);
		dup2(in, 0);
		dup2(out, 1);
		dup2(err, 2);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		child_no_core();
		execve(argv[0], (char *const *)argv, envp);
		dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	free(envp);
	return pid;
}

/* Waits up to timeout_s for pid; returns 1 and its status when it ended. */
static int wait_for(pid_t pid, double timeout_s, int *status)
{
	double deadline = now_s() + timeout_s;
	for (;;) {
		pid_t w = waitpid(pid, status, WNOHANG);
		if (w == pid)
			return 1;
		if (w < 0 && errno != EINTR)
			return 0;
		if (now_s() > deadline)
			return 0;
		usleep(10000);
	}
}

static void server_stop(void)
{
	if (server_pid > 0) {
		int st;
		kill(server_pid, SIGKILL);
		wait_for(server_pid, 10, &st);
	}
	server_pid = 0;
	tmp_remove();
}

/* Contents of a (small) file, NUL-terminated; "" when unreadable. */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL, tmpb[8192];
	size_t len = 0, cap = 0, n;
	buf_append(&buf, &len, &cap, "", 0);
	if (!f)
		return buf;
	while ((n = fread(tmpb, 1, sizeof tmpb, f)) > 0)
		buf_append(&buf, &len, &cap, tmpb, n);
	fclose(f);
	return buf;
}

/* The value of "key:value" in INFO output (lines end in "\r\n") into buf. */
static const char *info_field(const char *info, const char *key, char *buf, size_t n)
{
	char line[512];
	size_t kl = strlen(key);
	const char *p = info;
	buf[0] = '\0';
	while (next_line(&p, line, sizeof line))
		if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
			snprintf(buf, n, "%s", line + kl + 1);
			break;
		}
	return buf;
}

static long long info_num(const char *info, const char *key)
{
	char v[128];
	info_field(info, key, v, sizeof v);
	return v[0] ? strtoll(v, NULL, 10) : -1;
}

/* From "cmdstat_<cmd>:calls=N,...,rejected_calls=R,failed_calls=F" of INFO
 * commandstats: N, and R + F in *bad. */
static long long cmd_calls(const char *info, const char *cmd, long long *bad)
{
	char key[64], v[256];
	snprintf(key, sizeof key, "cmdstat_%s", cmd);
	info_field(info, key, v, sizeof v);
	const char *c = strstr(v, "calls="), *r = strstr(v, "rejected_calls="),
		   *f = strstr(v, "failed_calls=");
	*bad = (r ? strtoll(r + 15, NULL, 10) : 0) + (f ? strtoll(f + 13, NULL, 10) : 0);
	return c == v ? strtoll(c + 6, NULL, 10) : 0;
}

/* "VmRSS" or "VmHWM" of pid, in KiB. */
static long proc_status_kb(pid_t pid, const char *key)
{
	char path[64], line[256];
	long kb = -1;
	size_t kl = strlen(key);
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, key, kl) == 0 && line[kl] == ':')
			kb = strtol(line + kl + 1, NULL, 10);
	fclose(f);
	return kb;
}

static char redis_port[16];

/* redis-cli -p <port> args... (without libarena), stdin from in; asserts exit 0. */
static void cli(run_result *r, const char *in, const char *a1, const char *a2, const char *a3)
{
	const char *argv[] = { REDIS_CLI, "-h", "127.0.0.1", "-p", redis_port, a1, a2, a3, NULL };
	const char *env[] = { "LC_ALL=C", NULL };
	cr_assert_eq(run_prog(argv, env, in, 60, r), 0);
	cr_assert(run_exited0(r), "redis-cli %s %s: %s\nstdout: %.500s\nstderr: %.500s", a1,
		  a2 ? a2 : "", r->desc, r->out, r->err);
}

/* Rounds of redis-benchmark: value sizes for small (16, 1000 B), large
 * (50 kB) and huge (3 MB) blocks; LPUSH always goes to the one list
 * "mylist", SET/GET to keys drawn from -r of them. */
static const struct bench_round {
	const char *d, *n, *P, *r, *c, *tests;
	int lrange;  /* tests include lrange_100 (preceded by n more LPUSH) */
	int nlines;  /* CSV result lines */
} ROUNDS[] = {
	{ "16", "20000", "1", "100000", "50", "set,get,lpush,lrange_100", 1, 5 },
	{ "1000", "40000", "16", "100000", "50", "set,get,lpush", 0, 3 },
	{ "50000", "1000", "2", "2000", "20", "set,get,lpush", 0, 3 },
	{ "3000000", "60", "1", "10", "5", "set,get", 0, 2 },
};

/* Starts redis-server under libarena on a free port; retries when another
 * process took the port first.  Returns once it answers PING. */
static void redis_start(const char *outp, const char *errp)
{
	const char *env[] = { "LC_ALL=C", PRELOAD, NULL };
	for (int attempt = 0; attempt < 3; attempt++) {
		int port = free_port();
		cr_assert_gt(port, 0, "no free loopback port: %s", strerror(errno));
		snprintf(redis_port, sizeof redis_port, "%d", port);
		const char *argv[] = { REDIS_SERVER, "--port", redis_port, "--bind", "127.0.0.1",
				       "--save", "", "--appendonly", "no", "--daemonize", "no",
				       "--dir", tmp, "--protected-mode", "yes", "--logfile", "",
				       NULL };
		server_pid = spawn_logged(argv, env, tmp, outp, errp);
		double deadline = now_s() + 20;
		while (now_s() < deadline) {
			int st;
			if (waitpid(server_pid, &st, WNOHANG) == server_pid) {
				server_pid = 0;
				char *log = slurp(outp), *err = slurp(errp);
				int busy = contains(log, "in use") || contains(err, "in use");
				cr_assert(busy, "redis-server ended at start-up (status 0x%x)\nlog: "
					  "%.2000s\nstderr: %.2000s", st, log, err);
				free(log);
				free(err);
				break;
			}
			const char *argv_ping[] = { REDIS_CLI, "-h", "127.0.0.1", "-p", redis_port,
						    "PING", NULL };
			run_result r;
			if (run_prog(argv_ping, NULL, NULL, 10, &r) == 0) {
				int up = run_exited0(&r) && strcmp(r.out, "PONG\n") == 0;
				run_result_free(&r);
				if (up)
					return;
			}
			usleep(50000);
		}
		cr_assert_eq(server_pid, 0, "redis-server on port %s does not answer PING after 20 s",
			     redis_port);
	}
	cr_assert_fail("redis-server could not get a free port in 3 attempts");
}

Test(programs, redis_server_benchmark, .timeout = 300, .fini = server_stop)
{
	need_or_skip(REDIS_SERVER, "redis-server");
	need_or_skip(REDIS_BENCH, "redis-tools");
	need_or_skip(REDIS_CLI, "redis-tools");
	tmp_make();
	char outp[128], errp[128], valp[128];
	path_in_tmp(outp, sizeof outp, "redis.log");
	path_in_tmp(errp, sizeof errp, "redis.err");
	double t0 = now_s();
	redis_start(outp, errp);

	/* libarena is in the server, and serves its malloc. */
	char maps[64];
	snprintf(maps, sizeof maps, "/proc/%d/maps", (int)server_pid);
	char *m = slurp(maps);
	cr_assert(contains(m, "libarena.so"), "libarena.so is not mapped in redis-server");
	int jemalloc_lib = contains(m, "libjemalloc");
	free(m);

	long long want_set = 0, want_get = 0, want_lpush = 0, want_lrange = 0, requests = 0;
	run_result r;
	const char *env_bench[] = { "LC_ALL=C", NULL };
	for (size_t i = 0; i < sizeof ROUNDS / sizeof *ROUNDS; i++) {
		const struct bench_round *b = &ROUNDS[i];
		const char *argv[] = { REDIS_BENCH, "-h", "127.0.0.1", "-p", redis_port, "-n", b->n,
				       "-d", b->d, "-P", b->P, "-r", b->r, "-c", b->c, "-t", b->tests,
				       "--csv", NULL };
		cr_assert_eq(run_prog(argv, env_bench, NULL, 120, &r), 0);
		cr_assert(run_exited0(&r), "redis-benchmark -d %s -n %s -t %s: %s\nstdout: %.1000s\n"
			  "stderr: %.1000s", b->d, b->n, b->tests, r.desc, r.out, r.err);
		cr_assert(!contains_ci(r.err, "error"), "redis-benchmark -d %s: %.1000s", b->d, r.err);
		long long n = strtoll(b->n, NULL, 10);
		char line[256], summary[512] = "";
		int lines = 0;
		const char *p = r.out;
		while (next_line(&p, line, sizeof line)) {
			if (strncmp(line, "\"test\"", 6) == 0 || line[0] != '"')
				continue;
			char *q = strchr(line + 1, '"');
			cr_assert(q && q[1] == ',' && q[2] == '"', "CSV line: %s", line);
			*q = '\0';
			double rps = strtod(q + 3, NULL);
			cr_assert_gt(rps, 0, "%s: rps %s", line + 1, q + 3);
			snprintf(summary + strlen(summary), sizeof summary - strlen(summary),
				 " %s %.0f/s;", line + 1, rps);
			lines++;
		}
		cr_assert_eq(lines, b->nlines, "redis-benchmark -t %s printed %d results: %s", b->tests,
			     lines, r.out);
		note("redis-benchmark -d %s -n %s -P %s -c %s:%s", b->d, b->n, b->P, b->c, summary);
		run_result_free(&r);
		want_set += n;
		want_get += n;
		if (strstr(b->tests, "lpush"))
			want_lpush += n;
		if (b->lrange) {
			want_lpush += n;
			want_lrange += n;
		}
	}
	requests = want_set + want_get + want_lpush + want_lrange;

	/* Every request was served: the server's own counts. */
	cli(&r, NULL, "INFO", "commandstats", NULL);
	struct { const char *cmd; long long want; } counts[] = {
		{ "set", want_set }, { "get", want_get }, { "lpush", want_lpush },
		{ "lrange", want_lrange },
	};
	for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
		long long bad, got = cmd_calls(r.out, counts[i].cmd, &bad);
		cr_assert_eq(got, counts[i].want, "%s: %lld calls served, %lld sent\n%s", counts[i].cmd,
			     got, counts[i].want, r.out);
		cr_assert_eq(bad, 0, "%s: %lld calls rejected or failed", counts[i].cmd, bad);
	}
	run_result_free(&r);
	cli(&r, NULL, "LLEN", "mylist", NULL);
	cr_assert_eq(strtoll(r.out, NULL, 10), want_lpush, "LLEN mylist: %s, %lld pushed", r.out,
		     want_lpush);
	run_result_free(&r);

	/* Values written and read back byte for byte: 40 kB (large) and 1.5 MB (huge). */
	path_in_tmp(valp, sizeof valp, "value.txt");
	static const size_t vsizes[] = { 40000, 1500000 };
	for (size_t i = 0; i < 2; i++) {
		size_t vn = vsizes[i];
		char *v = malloc(vn + 2);
		cr_assert_not_null(v);
		for (size_t k = 0; k < vn; k++)
			v[k] = (char)('a' + pat_byte(k, (uint32_t)i + 7) % 26);
		cr_assert_eq(write_file(valp, v, vn), 0);
		cli(&r, valp, "-x", "SET", "arena:check");
		cr_assert_str_eq(r.out, "OK\n", "SET of %zu bytes: %s", vn, r.out);
		run_result_free(&r);
		cli(&r, NULL, "GET", "arena:check", NULL);
		v[vn] = '\n';
		v[vn + 1] = '\0';
		cr_assert(r.out_len == vn + 1 && memcmp(r.out, v, vn + 1) == 0,
			  "GET of a %zu-byte value gave %zu bytes back, or other bytes", vn, r.out_len);
		run_result_free(&r);
		free(v);
	}

	/* Memory figures for the log. */
	cli(&r, NULL, "INFO", "memory", NULL);
	char alloc_name[64];
	info_field(r.out, "mem_allocator", alloc_name, sizeof alloc_name);
	long long used = info_num(r.out, "used_memory"), rss = info_num(r.out, "used_memory_rss"),
		  peak = info_num(r.out, "used_memory_peak"),
		  je_alloc = info_num(r.out, "allocator_allocated");
	long vmrss = proc_status_kb(server_pid, "VmRSS"), vmhwm = proc_status_kb(server_pid, "VmHWM");
	run_result_free(&r);
	cli(&r, NULL, "DBSIZE", NULL, NULL);
	long long keys = strtoll(r.out, NULL, 10);
	run_result_free(&r);
	note("redis-server: %lld requests served; %lld keys, mylist %lld entries; mem_allocator:%s%s; "
	     "used_memory %lld (peak %lld), used_memory_rss %lld, allocator_allocated %lld; "
	     "VmRSS %ld KiB, VmHWM %ld KiB",
	     requests, keys, want_lpush, alloc_name,
	     jemalloc_lib ? " (libjemalloc.so.2 linked; its malloc/free/realloc are interposed)" : "",
	     used, peak, rss, je_alloc, vmrss, vmhwm);
	cr_assert(alloc_name[0], "INFO memory has no mem_allocator");
	cr_assert_gt(used, 40 * (long long)MiB, "used_memory %lld: the data set is missing", used);
	/* Built for jemalloc (Debian links libjemalloc.so.2): "allocator_*" come
	 * from jemalloc's mallctl, while used_memory counts malloc_usable_size of
	 * every block, both served by libarena: jemalloc must have seen next to
	 * nothing, or LD_PRELOAD did not take effect. */
	if (strncmp(alloc_name, "jemalloc", 8) == 0)
		cr_assert_lt(je_alloc, used / 4, "jemalloc has %lld bytes of %lld allocated: its "
			     "malloc was not replaced by libarena", je_alloc, used);

	/* Clean shutdown. */
	const char *argv_down[] = { REDIS_CLI, "-h", "127.0.0.1", "-p", redis_port, "SHUTDOWN",
				    "NOSAVE", NULL };
	cr_assert_eq(run_prog(argv_down, NULL, NULL, 30, &r), 0);
	run_result_free(&r);
	int st;
	cr_assert(wait_for(server_pid, 30, &st), "redis-server still running 30 s after SHUTDOWN");
	server_pid = 0;
	char *log = slurp(outp), *err = slurp(errp);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "redis-server ended with status 0x%x (%s)\nlog tail: %s\nstderr: %.2000s", st,
		  WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "exit",
		  log + (strlen(log) > 2000 ? strlen(log) - 2000 : 0), err);
	cr_assert(!contains(err, "libarena") && !contains(log, "libarena"),
		  "libarena wrote to redis-server's output:\nstderr: %.2000s\nlog: %.2000s", err, log);
	cr_assert(contains(log, "ready to exit"), "redis-server log tail: %s",
		  log + (strlen(log) > 2000 ? strlen(log) - 2000 : 0));
	note("redis-server: exited 0 after SHUTDOWN NOSAVE, stderr %zu bytes; %.1f s in all",
	     strlen(err), elapsed_since(t0));
	free(log);
	free(err);
}

/* ---- gcc -O2 on a generated file of a few MB ------------------------------------------------------- */

#define GEN_FUNCS 2000   /* functions; one in GEN_LOOPY has a loop with a switch */
#define GEN_LOOPY 25
#define GEN_ROWS 20000   /* rows of a table of structures with strings */

/* Writes a C program of GEN_FUNCS functions, as many global structures,
 * a table of GEN_ROWS rows and a main that calls every function through a
 * table of pointers and prints a checksum (~1.3 MB of source; gcc -O2 takes
 * ~10 s of CPU on the reference machine). */
static void write_big_c(const char *path)
{
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fprintf(f, "#include <stdio.h>\n#include <string.h>\n\nstatic const unsigned tab[64] = {");
	for (unsigned k = 0; k < 64; k++)
		fprintf(f, "%s%uu", k ? ", " : "", k * 2654435761u);
	fprintf(f, "};\n\nstruct st {\n\tunsigned a, b;\n\tconst char *name;\n};\n\n");
	for (int i = 0; i < GEN_FUNCS; i++) {
		fprintf(f, "struct st g%d = { %uu, %du, \"object number %d\" };\n\n", i,
			(unsigned)i * 40503u, i, i);
		if (i % GEN_LOOPY == 0) {
			int rot = i % 31 + 1;
			fprintf(f, "__attribute__((noinline)) unsigned f%d(unsigned x)\n{\n"
				   "\tstruct st s = g%d;\n\ts.a ^= x;\n"
				   "\tfor (unsigned k = 0; k < %du; k++) {\n"
				   "\t\tswitch ((s.a + k) & 3) {\n"
				   "\t\tcase 0: s.a = s.a * %uu + k; break;\n"
				   "\t\tcase 1: s.a ^= s.a >> %d; break;\n"
				   "\t\tcase 2: s.a += tab[(s.a + %du) & 63]; break;\n"
				   "\t\tdefault: s.a = (s.a << %d) | (s.a >> %d); s.b += s.name[k %% 8]; break;\n"
				   "\t\t}\n\t}\n"
				   "\treturn s.a ^ s.b ^ (unsigned)strlen(s.name);\n}\n\n",
				i, i, i % 7 + 3, 2 * (unsigned)i + 1, i % 13 + 1, i, rot, 32 - rot);
		} else {
			fprintf(f, "unsigned f%d(unsigned x)\n{\n"
				   "\tunsigned y = x * %uu + tab[(x + %du) & 63];\n"
				   "\tif (y & 1)\n\t\ty ^= g%d.a + (unsigned)g%d.name[%d];\n"
				   "\telse\n\t\ty += g%d.b;\n\treturn y;\n}\n\n",
				i, 2 * (unsigned)i + 1, i, i, i, i % 10, i);
		}
	}
	fprintf(f, "static const struct row {\n\tunsigned key;\n\tconst char *text;\n} rows[] = {\n");
	for (int i = 0; i < GEN_ROWS; i++)
		fprintf(f, "\t{ %uu, \"row %d of the table, %s\" },\n", (unsigned)i * 7919u, i,
			i % 3 ? "plain" : "every third one");
	fprintf(f, "};\n\nstatic unsigned (*const fns[])(unsigned) = {\n");
	for (int i = 0; i < GEN_FUNCS; i++)
		fprintf(f, "\tf%d,\n", i);
	fprintf(f, "};\n\nint main(void)\n{\n\tunsigned sum = 0;\n"
		   "\tfor (int i = 0; i < %d; i++)\n\t\tsum = sum * 31u + fns[i](sum);\n"
		   "\tfor (int i = 0; i < %d; i++)\n"
		   "\t\tsum += rows[i].key ^ (unsigned)strlen(rows[i].text);\n"
		   "\tprintf(\"%%u\\n\", sum);\n\treturn 0;\n}\n",
		GEN_FUNCS, GEN_ROWS);
	cr_assert_eq(fclose(f), 0);
}

/* The largest N of the "  small  malloc N" lines of libarena's statistics. */
static long long stats_max_small(const char *err, int *blocks)
{
	char line[256];
	long long max = 0, n;
	const char *p = err;
	*blocks = 0;
	while (next_line(&p, line, sizeof line)) {
		if (strncmp(line, "libarena ", 9) == 0 && contains(line, " statistics"))
			(*blocks)++;
		else if (sscanf(line, " small malloc %lld", &n) == 1 && n > max)
			max = n;
	}
	return max;
}

Test(programs, gcc_O2_big_file_same_executable, .timeout = 300, .fini = tmp_remove)
{
	need_or_skip(GCC, "gcc");
	tmp_make();
	char src[128], ref[128], pre[128], tmpvar[96];
	path_in_tmp(src, sizeof src, "big.c");
	path_in_tmp(ref, sizeof ref, "ref");
	path_in_tmp(pre, sizeof pre, "pre");
	snprintf(tmpvar, sizeof tmpvar, "TMPDIR=%s", tmp);
	write_big_c(src);

	/* gcc runs cc1, as, collect2 and ld: each inherits LD_PRELOAD, and
	 * prints libarena's statistics at exit (stats_print:true). */
	const char *a_ref[] = { GCC, "-O2", "-o", ref, src, NULL };
	const char *a_pre[] = { GCC, "-O2", "-o", pre, src, NULL };
	const char *env_ref[] = { "LC_ALL=C", tmpvar, NULL };
	const char *env_pre[] = { "LC_ALL=C", tmpvar, PRELOAD, "ARENA_CONF=stats_print:true", NULL };
	run_result r;
	double t0 = now_s();
	run_ok(a_ref, env_ref, NULL, 150, 1, &r);
	double t_ref = elapsed_since(t0);
	run_result_free(&r);
	t0 = now_s();
	run_ok(a_pre, env_pre, NULL, 150, 0, &r);
	double t_pre = elapsed_since(t0);

	/* stderr: only statistics blocks, at least gcc's, cc1's and as's. */
	char line[512];
	const char *p = r.err;
	while (next_line(&p, line, sizeof line))
		cr_assert(line[0] == ' ' || (strncmp(line, "libarena ", 9) == 0 &&
					     contains(line, " statistics")),
			  "gcc with libarena wrote on stderr: \"%s\"", line);
	int blocks;
	long long small = stats_max_small(r.err, &blocks);
	cr_assert_geq(blocks, 3, "%d processes printed libarena statistics (gcc, cc1, as, collect2, "
		      "ld expected): %.2000s", blocks, r.err);
	run_result_free(&r);

	cr_assert(files_equal(pre, ref), "the executable built by gcc under libarena (%lld bytes) "
		  "differs from the one built without (%lld bytes)", file_size(pre), file_size(ref));
	const char *x_ref[] = { ref, NULL }, *x_pre[] = { pre, NULL };
	run_result o_ref, o_pre;
	run_ok(x_ref, NULL, NULL, 30, 1, &o_ref);
	run_ok(x_pre, NULL, NULL, 30, 1, &o_pre);
	cr_assert(o_ref.out_len > 1 && strspn(o_ref.out, "0123456789") == o_ref.out_len - 1,
		  "generated program printed: %s", o_ref.out);
	cr_assert_str_eq(o_pre.out, o_ref.out);
	note("gcc -O2: %lld-byte source, %d functions, %d rows -> %lld-byte executable, identical "
	     "with and without libarena (checksum %.*s); %.1f s without, %.1f s with; %d processes "
	     "under libarena, the busiest made %lld small mallocs",
	     file_size(src), GEN_FUNCS, GEN_ROWS, file_size(ref), (int)o_ref.out_len - 1, o_ref.out,
	     t_ref, t_pre, blocks, small);
	run_result_free(&o_ref);
	run_result_free(&o_pre);
}
