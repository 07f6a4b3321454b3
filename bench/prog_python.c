/*
 * prog_python: a real program, python3 on an allocation-heavy script.
 *
 * The workload writes a Python script of its own into a fresh temporary
 * directory and forks and execs the interpreter on it (-p; default
 * Debian's /usr/bin/python3, not whatever python3 PATH finds first), with
 * the scale n as its argument, and waits for it.  The interpreter inherits
 * the environment, LD_PRELOAD included.  The script's four phases, each
 * timed by the script and printed as a `series` step:
 *   json  n records (dicts with strings, a list, a float, a nested dict)
 *         dumped to one JSON string and loaded back, checked;
 *   dict  a dict of n string keys churned 4n times: a new string value
 *         stored under a random key, and every third time a random key
 *         deleted (strings of 1-60 characters come and go);
 *   sort  2n (float, string) tuples sorted, then the loaded records sorted
 *         by a key function that builds a string for each;
 *   set   a set of 4n ints built and shrunk, and two sets of 2n strings
 *         intersected.
 * PYTHONHASHSEED=0 makes the string hashes, and so the work, the same in
 * every run.  CPython takes its objects of up to 512 bytes from its own
 * allocator (pymalloc, arenas of 1 MiB from mmap), so by default malloc
 * sees only the larger blocks; -m malloc sets PYTHONMALLOC=malloc, which
 * sends every object to malloc: the small-object-heavy case, and the one
 * that shows the allocator.  (-m pymalloc, the default, removes any
 * PYTHONMALLOC from the environment.)
 *
 * What is measured is the interpreter alone: its wall time from the fork
 * to the wait's return (start-up included, about 20 ms), user and system
 * time, minor faults and peak RSS as wait4 reports them (the `measured`
 * line; spawn.h).  The script must exit 0.
 *
 * Usage: prog_python [-n scale] [-m pymalloc|malloc] [-p python] [-k]
 *   -k  keep the temporary directory (its name is printed on stderr)
 * Prints the script's "series step=<phase> seconds=<s>" lines, the
 * `measured` line and "result seconds=<wall time>" on stdout, a line on
 * stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax):
 * BENCH tiny: -n 2000 -m malloc
 * BENCH ratio: seconds
 * BENCH series: seconds
 * BENCH configs: libarena-thp-never, libarena-thp-always
 * BENCH preload: python3
 * BENCH quick: malloc | -n 30000 -m malloc
 * BENCH quick: pymalloc | -n 30000 -m pymalloc
 * BENCH full: malloc-150k | -n 150000 -m malloc
 * BENCH full: pymalloc-150k | -n 150000 -m pymalloc
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "spawn.h"

static const char script[] =
	"import json, random, sys, time\n"
	"\n"
	"n = int(sys.argv[1])\n"
	"rnd = random.Random(12345)\n"
	"\n"
	"def done(name, t0):\n"
	"    print('series step=%s seconds=%.6f' % (name, time.perf_counter() - t0), flush=True)\n"
	"\n"
	"t0 = time.perf_counter()\n"
	"records = [{'id': i, 'name': 'user%d' % i, 'email': 'user%d@example.org' % (i * 7),\n"
	"            'tags': ['t%d' % (i % 17), 'g%d' % (i % 5), 'x'], 'score': i * 0.5,\n"
	"            'active': i % 3 == 0, 'meta': {'a': i, 'b': str(i), 'c': [i, i + 1]}}\n"
	"           for i in range(n)]\n"
	"text = json.dumps(records)\n"
	"del records\n"
	"back = json.loads(text)\n"
	"assert len(back) == n and back[-1]['meta']['c'][1] == n\n"
	"del text\n"
	"done('json', t0)\n"
	"\n"
	"t0 = time.perf_counter()\n"
	"d = {}\n"
	"for i in range(4 * n):\n"
	"    d['key%d' % rnd.randrange(n)] = 'v' * (i % 60) + str(i)\n"
	"    if i % 3 == 0:\n"
	"        d.pop('key%d' % rnd.randrange(n), None)\n"
	"assert 0 < len(d) <= n\n"
	"del d\n"
	"done('dict', t0)\n"
	"\n"
	"t0 = time.perf_counter()\n"
	"pairs = [(rnd.random(), 's%d' % i) for i in range(2 * n)]\n"
	"pairs.sort()\n"
	"assert pairs[0] <= pairs[-1]\n"
	"del pairs\n"
	"back.sort(key=lambda r: r['name'][::-1] + r['email'])\n"
	"done('sort', t0)\n"
	"\n"
	"t0 = time.perf_counter()\n"
	"s = set()\n"
	"for i in range(4 * n):\n"
	"    s.add((i * 7919) % (3 * n))\n"
	"for i in range(0, 3 * n, 2):\n"
	"    s.discard(i)\n"
	"a = {'x%d' % i for i in range(2 * n)}\n"
	"b = {'x%d' % i for i in range(n, 3 * n)}\n"
	"assert len(a & b) == n\n"
	"del s, a, b, back\n"
	"done('set', t0)\n";

static void usage(void)
{
	fprintf(stderr, "usage: prog_python [-n scale] [-m pymalloc|malloc] [-p python] [-k]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t scale = 100000;
	char *python = "/usr/bin/python3";
	const char *mode = "pymalloc";
	int keep = 0, c;

	while ((c = getopt(argc, argv, "n:m:p:kh")) != -1) {
		switch (c) {
		case 'n':
			if (parse_u64(optarg, 1, 1000000000, &scale) < 0)
				usage();
			break;
		case 'm': mode = optarg; break;
		case 'p': python = optarg; break;
		case 'k': keep = 1; break;
		default: usage();
		}
	}
	if (optind != argc)
		usage();
	if (strcmp(mode, "malloc") == 0)
		setenv("PYTHONMALLOC", "malloc", 1);
	else if (strcmp(mode, "pymalloc") == 0)
		unsetenv("PYTHONMALLOC");
	else
		usage();
	setenv("PYTHONHASHSEED", "0", 1);

	char dir[PATH_MAX], path[PATH_MAX], arg[32];
	FILE *f;
	if (spawn_temp_dir("prog_python", dir, sizeof dir) < 0 ||
	    spawn_path(path, dir, "churn.py") < 0 || !(f = fopen(path, "w"))) {
		perror("prog_python: temporary directory");
		return 1;
	}
	if (fputs(script, f) < 0 || fclose(f) != 0) {
		perror("prog_python: writing the script");
		return 1;
	}
	snprintf(arg, sizeof arg, "%" PRIu64, scale);

	char *cmd[] = { python, "-B", path, arg, NULL };
	struct rusage ru;
	double secs = 0;
	int rc = spawn_wait(cmd, &secs, &ru);
	if (keep) {
		fprintf(stderr, "prog_python: kept %s\n", dir);
	} else {
		unlink(path);
		rmdir(dir);
	}
	if (rc != 0) {
		fprintf(stderr, "prog_python: %s failed (status %d)\n", python, rc);
		return 1;
	}
	spawn_usage u = { 0 };
	spawn_usage_add(&u, secs, &ru);
	spawn_print_measured(&u);
	fprintf(stderr, "prog_python: %s, scale %" PRIu64 ", %s: %.3f s, %.3f s user, %.3f s sys, "
		"peak RSS %.1f MiB, %ld minor faults\n", python, scale, mode, secs, u.user_s, u.sys_s,
		u.peak_rss_kib / 1024.0, u.minflt);
	printf("result seconds=%.6f\n", secs);
	return 0;
}
