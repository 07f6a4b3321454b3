/*
 * prog_sqlite: a real program, the sqlite3 shell on an in-memory database.
 *
 * The workload writes an SQL script into a fresh temporary directory and
 * forks and execs the shell on it (-s; default Debian's /usr/bin/sqlite3)
 * as `sqlite3 -batch -bail :memory:` with the script on stdin, and waits for
 * it.  The shell inherits the environment, LD_PRELOAD included; SQLite's
 * memory (page cache, statements, sorter, strings) comes from malloc.  The
 * script, with n rows (-n) and a page cache of c MiB (-c, PRAGMA
 * cache_size), in phases that `.timer on` times statement by statement:
 *   insert   a table of n rows (an integer key, a group, two strings, a
 *            float and a note of 10-99 characters, all computed from the
 *            row number) filled by one INSERT ... SELECT over a recursive CTE;
 *   index    two index builds: on the name, and on (group, score);
 *   groupby  a GROUP BY over the n/120 groups with count, avg and
 *            group_concat;
 *   join     a table of the groups, joined with the rows, grouped and
 *            ordered;
 *   update   every third row's note and score rewritten (the note grows);
 *   delete   every fifth row deleted, then a count that is checked.
 * Each phase is printed as a `series` step with its statements' real time.
 *
 * What is measured is the sqlite3 process alone: its wall time from the
 * fork to the wait's return, user and system time, minor faults and peak
 * RSS as wait4 reports them (the `measured` line; spawn.h).  The shell must
 * exit 0 and the final count must be n - n/5.
 *
 * Usage: prog_sqlite [-n rows] [-c cache MiB] [-s sqlite3] [-k]
 *   -k  keep the temporary directory (its name is printed on stderr)
 * Prints "series step=<phase> seconds=<s>" per phase, the `measured` line,
 * "result seconds=<wall time> statements_s=<sum of the statements' times>"
 * on stdout and a line on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax):
 * BENCH tiny: -n 3000
 * BENCH ratio: seconds
 * BENCH series: seconds
 * BENCH configs: libarena-thp-never, libarena-thp-always
 * BENCH preload: sqlite3
 * BENCH quick: 250k | -n 250000
 * BENCH full: 600k | -n 600000
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "spawn.h"

static const char *const phases[] = { "insert", "index", "groupby", "join", "update", "delete" };
#define NPHASES (sizeof phases / sizeof phases[0])

static int write_script(const char *path, uint64_t n, uint64_t cache_mib)
{
	uint64_t groups = n / 120 ? n / 120 : 1;
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fprintf(f,
		".timer on\n"
		"PRAGMA cache_size = -%" PRIu64 ";\n"
		".print phase insert\n"
		"CREATE TABLE items(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, email TEXT,\n"
		"                   score REAL, note TEXT);\n"
		"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < %" PRIu64 ")\n"
		"INSERT INTO items SELECT x, (x * 7919) %% %" PRIu64 ", printf('user%%d', (x * 104729) %% 1000003),\n"
		"    printf('u%%d@example.org', x * 13), (x %% 1000) * 0.25,\n"
		"    substr('lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod ' ||\n"
		"           'tempor incididunt ut labore et dolore magna aliqua ut enim ad minim veniam',\n"
		"           1 + (x * 31) %% 40, 10 + (x * 17) %% 90)\n"
		"FROM c;\n"
		".print phase index\n"
		"CREATE INDEX items_name ON items(name);\n"
		"CREATE INDEX items_grp_score ON items(grp, score);\n"
		".print phase groupby\n"
		"SELECT 'groups', count(*), sum(n) FROM (SELECT grp, count(*) AS n, avg(score) AS s,\n"
		"    length(group_concat(substr(name, 1, 3))) AS g FROM items GROUP BY grp);\n"
		".print phase join\n"
		"CREATE TABLE groups(grp INTEGER PRIMARY KEY, label TEXT, weight REAL);\n"
		"WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x < %" PRIu64 ")\n"
		"INSERT INTO groups SELECT x, printf('group-%%d', x), (x %% 97) * 0.5 FROM c;\n"
		"SELECT g.label, count(*), sum(i.score * g.weight) FROM items i JOIN groups g\n"
		"    ON g.grp = i.grp WHERE g.weight > 20 GROUP BY g.label ORDER BY 3 DESC LIMIT 3;\n"
		".print phase update\n"
		"UPDATE items SET note = note || ' ' || name, score = score + 1 WHERE id %% 3 = 0;\n"
		".print phase delete\n"
		"DELETE FROM items WHERE id %% 5 = 0;\n"
		"SELECT 'check', count(*), sum(length(note)) FROM items;\n",
		cache_mib * 1024, n, groups, groups - 1);
	return fclose(f) == 0 ? 0 : -1;
}

/* Sums the "Run Time: real <s>" lines of the shell's output into the phase
 * that the last "phase <name>" line named; returns the final count (the
 * "check|<count>|..." line), -1 if it is missing. */
static long long read_output(const char *path, double secs[NPHASES])
{
	FILE *f = fopen(path, "r");
	char line[4096];
	int phase = -1;
	long long count = -1;
	while (f && fgets(line, sizeof line, f)) {
		double t;
		if (strncmp(line, "phase ", 6) == 0) {
			line[strcspn(line, "\n")] = 0;
			for (size_t i = 0; i < NPHASES; i++)
				if (strcmp(line + 6, phases[i]) == 0)
					phase = (int)i;
		} else if (sscanf(line, "Run Time: real %lf", &t) == 1) {
			if (phase >= 0)
				secs[phase] += t;
		} else if (strncmp(line, "check|", 6) == 0) {
			count = strtoll(line + 6, NULL, 10);
		}
	}
	if (f)
		fclose(f);
	return count;
}

static void usage(void)
{
	fprintf(stderr, "usage: prog_sqlite [-n rows] [-c cache MiB] [-s sqlite3] [-k]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t rows = 600000, cache_mib = 256;
	char *sqlite = "/usr/bin/sqlite3";
	int keep = 0, c;

	while ((c = getopt(argc, argv, "n:c:s:kh")) != -1) {
		int bad = 0;
		switch (c) {
		case 'n': bad = parse_u64(optarg, 10, 100000000, &rows); break;
		case 'c': bad = parse_u64(optarg, 1, 1 << 20, &cache_mib); break;
		case 's': sqlite = optarg; break;
		case 'k': keep = 1; break;
		default: usage();
		}
		if (bad)
			usage();
	}
	if (optind != argc)
		usage();

	char dir[PATH_MAX], script[PATH_MAX], out[PATH_MAX];
	if (spawn_temp_dir("prog_sqlite", dir, sizeof dir) < 0 ||
	    spawn_path(script, dir, "work.sql") < 0 || spawn_path(out, dir, "out.txt") < 0 ||
	    write_script(script, rows, cache_mib) < 0) {
		perror("prog_sqlite: writing the script");
		return 1;
	}

	char *cmd[] = { sqlite, "-batch", "-bail", ":memory:", NULL };
	struct rusage ru;
	double secs = 0, phase_s[NPHASES] = { 0 };
	int rc = spawn_run(cmd, NULL, script, out, &secs, &ru);
	long long count = read_output(out, phase_s);
	long long want = (long long)(rows - rows / 5);
	if (keep) {
		fprintf(stderr, "prog_sqlite: kept %s\n", dir);
	} else {
		unlink(out);
		unlink(script);
		rmdir(dir);
	}
	if (rc != 0 || count != want) {
		fprintf(stderr, "prog_sqlite: %s failed (status %d, final count %lld, expected %lld)\n",
			sqlite, rc, count, want);
		return 1;
	}
	double total = 0;
	for (size_t i = 0; i < NPHASES; i++) {
		printf("series step=%s seconds=%.6f\n", phases[i], phase_s[i]);
		total += phase_s[i];
	}
	spawn_usage u = { 0 };
	spawn_usage_add(&u, secs, &ru);
	spawn_print_measured(&u);
	fprintf(stderr, "prog_sqlite: %s, %" PRIu64 " rows, cache %" PRIu64 " MiB: %.3f s, %.3f s user, "
		"%.3f s sys, peak RSS %.1f MiB, %ld minor faults\n", sqlite, rows, cache_mib, secs,
		u.user_s, u.sys_s, u.peak_rss_kib / 1024.0, u.minflt);
	printf("result seconds=%.6f statements_s=%.6f\n", secs, total);
	return 0;
}
