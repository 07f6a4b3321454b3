/*
 * Keeps the benchmark workloads alive: every bench/<name>.c declares a tiny
 * run (`BENCH tiny: <args>`), which must run under libarena, exit 0 and print
 * a `result key=<number>` line.  Speed is not checked here (bench/ does it).
 */
#include <criterion/criterion.h>
#include <dirent.h>

#include "common.h"

/* The `BENCH tiny:` arguments of bench/<name>.c, or NULL. */
static char *tiny_args(const char *name)
{
	char path[512], line[1024];
	snprintf(path, sizeof path, "%s/%s.c", BENCH_SRC, name);
	FILE *f = fopen(path, "r");
	char *args = NULL;
	while (f && !args && fgets(line, sizeof line, f)) {
		char *at = strstr(line, "BENCH tiny:");
		if (!at)
			continue;
		at += strlen("BENCH tiny:");
		char *end = strstr(at, "*/");
		if (end)
			*end = 0;
		at[strcspn(at, "\n")] = 0;
		args = strdup(at);
	}
	if (f)
		fclose(f);
	return args;
}

/* Runs the tiny case of workload name under libarena; 0 when it printed a
 * numeric result.  Failures are described in why. */
static int run_tiny(const char *name, char *why, size_t why_len)
{
	char *args = tiny_args(name);
	if (!args)
		return snprintf(why, why_len, "%s: no 'BENCH tiny:' line", name), -1;
	char bin[512];
	snprintf(bin, sizeof bin, "%s/%s", BENCH_BIN, name);
	const char *argv[32] = { bin };
	int argc = 1;
	for (char *tok = strtok(args, " \t"); tok && argc < 31; tok = strtok(NULL, " \t"))
		argv[argc++] = tok;
	const char *env[] = { "LD_PRELOAD=" ARENA_SO, NULL };
	run_result r = { 0 };
	int rc = -1;
	if (run_prog(argv, env, NULL, 60, &r) != 0) {
		snprintf(why, why_len, "%s: could not start %s", name, bin);
	} else if (!run_exited0(&r)) {
		run_describe(&r);
		snprintf(why, why_len, "%s: %s; stderr: %.300s", name, r.desc, r.err);
	} else {
		const char *res = strstr(r.out, "result ");
		const char *eq = res ? strchr(res, '=') : NULL;
		if (eq && (eq[1] == '-' || (eq[1] >= '0' && eq[1] <= '9')))
			rc = 0;
		else
			snprintf(why, why_len, "%s: no numeric 'result' line in: %.300s", name, r.out);
	}
	run_result_free(&r);
	free(args);
	return rc;
}

Test(bench, every_workload_runs_tiny, .timeout = 300)
{
	DIR *d = opendir(BENCH_SRC);
	cr_assert(d, "cannot open %s", BENCH_SRC);
	int seen = 0;
	char why[1024];
	for (struct dirent *e; (e = readdir(d));) {
		size_t n = strlen(e->d_name);
		if (n < 3 || strcmp(e->d_name + n - 2, ".c") != 0)
			continue;
		char name[256];
		snprintf(name, sizeof name, "%.*s", (int)(n - 2), e->d_name);
		cr_expect(run_tiny(name, why, sizeof why) == 0, "%s", why);
		seen++;
	}
	closedir(d);
	cr_assert_geq(seen, 2, "found only %d workloads in %s", seen, BENCH_SRC);
}
