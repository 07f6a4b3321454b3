/*
 * Real programs under LD_PRELOAD=libarena.so, their output compared with the
 * same run without it: python3, sort, sqlite3, git, a shell pipeline;
 * progs/ctor_dlsym (allocation before main, dlsym/dlerror/dlopen); the
 * ARENA_CONF settings stats_print and the warning for bad entries.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "arena.h"
#include "common.h"

#define PRELOAD "LD_PRELOAD=" ARENA_SO
#define PYTHON "/usr/bin/python3"
#define SORT "/usr/bin/sort"
#define SQLITE "/usr/bin/sqlite3"
#define GIT "/usr/bin/git"
#define CTOR_PROG PROGS_DIR "/ctor_dlsym"

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
