/*
 * prog_git: a real program, git on a repository the workload generates.
 *
 * The workload builds a repository in a fresh temporary directory: f source
 * files of about l lines each (-f, -l) in 16 directories, then c commits
 * (-c), each of which changes m files (-m): in each, a few lines replaced,
 * deleted and inserted at one place, every line computed from a seed, so
 * the history is the same in every run.  It writes the history as a
 * fast-import stream and has a helper git load it (`git init`, `git
 * fast-import`, then the first commit is tagged `first`).  The helper runs
 * without LD_PRELOAD or any allocator variable (spawn_helper_env), through a
 * symbolic link named githelper in the temporary directory, so that its
 * processes are told apart from the git under test (bench/run's check that
 * the preloaded library is mapped, BENCH preload below).
 *
 * Then the git under test (-g; default Debian's /usr/bin/git), with the
 * workload's environment (LD_PRELOAD included) and HOME in the temporary
 * directory and no system configuration, runs three commands, each a
 * `series` step with its wall time:
 *   log   `git log -p` of the whole history (a diff per changed file of
 *         every commit), its output to /dev/null;
 *   diff  `git diff first HEAD`, the tree's whole change, to /dev/null;
 *   gc    `git gc` (repack with delta search over every object, in
 *         pack.threads = CPUs threads, prune, pack-refs); its git
 *         subprocesses (repack, pack-objects, ...) inherit LD_PRELOAD.
 *
 * What is measured is the three commands alone: their wall times, user and
 * system times and minor faults summed, and the largest peak RSS of any of
 * their processes, from wait4 (the `measured` line; spawn.h).  Building the
 * repository is not in it.  Each command must exit 0, and the log output
 * must not be empty.
 *
 * Usage: prog_git [-f files] [-l lines] [-c commits] [-m files per commit]
 *                 [-g path of git] [-k]
 *   -k  keep the temporary directory (its name is printed on stderr)
 * Prints "series step=<command> seconds=<s>" per command, the `measured`
 * line and "result seconds=<the commands' wall time> log_mib=<size of the
 * log>" on stdout and a line on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax):
 * BENCH tiny: -f 20 -l 30 -c 20 -m 3
 * BENCH ratio: seconds
 * BENCH series: seconds
 * BENCH configs: libarena-thp-never, libarena-thp-always
 * BENCH preload: git, !githelper
 * BENCH quick: 1200c | -f 400 -l 150 -c 1200 -m 8
 * BENCH full: 4000c | -f 1000 -l 200 -c 4000 -m 10
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "spawn.h"

#define NDIRS 16

/* A file's lines, each a seed its text is computed from. */
typedef struct {
	uint64_t *line;
	size_t n, cap;
} file_t;

static void *xrealloc(void *p, size_t size)
{
	p = realloc(p, size);
	if (!p) {
		perror("prog_git");
		exit(1);
	}
	return p;
}

static const char *const words[] = { "count", "index", "buffer", "offset", "length", "state",
				     "value", "result", "flags", "limit", "entry", "table" };
#define NWORDS (sizeof words / sizeof words[0])

/* The text of the line with seed h: C-like, 20-90 characters. */
static int render_line(char *out, size_t len, uint64_t h)
{
	const char *a = words[h % NWORDS], *b = words[(h >> 8) % NWORDS];
	switch ((h >> 16) % 5) {
	case 0:
		return snprintf(out, len, "\t%s_%x = %s(%s, %u);\n", a, (unsigned)(h >> 24) & 0xfff,
				b, a, (unsigned)(h >> 40) % 1000);
	case 1:
		return snprintf(out, len, "\tif (%s > %u && %s != NULL)\n", a,
				(unsigned)(h >> 24) % 100000, b);
	case 2:
		return snprintf(out, len, "\t/* %s of the %s, see %s_%x */\n", a, b, b,
				(unsigned)(h >> 28) & 0xffff);
	case 3:
		return snprintf(out, len, "\t\treturn %s[%u] + %s->%s;\n", a, (unsigned)(h >> 24) % 64,
				b, words[(h >> 32) % NWORDS]);
	default:
		return snprintf(out, len, "static int %s_%s_%x(struct %s *p);\n", a, b,
				(unsigned)(h >> 24) & 0xffffff, b);
	}
}

static void write_blob(FILE *out, const char *path, const file_t *f, char **buf, size_t *cap)
{
	size_t used = 0;
	char line[160];
	for (size_t i = 0; i < f->n; i++) {
		int k = render_line(line, sizeof line, f->line[i]);
		if (used + (size_t)k + 1 > *cap) {
			*cap = (*cap + (size_t)k + 1) * 2;
			*buf = xrealloc(*buf, *cap);
		}
		memcpy(*buf + used, line, (size_t)k);
		used += (size_t)k;
	}
	fprintf(out, "M 100644 inline %s\ndata %zu\n", path, used);
	fwrite(*buf, 1, used, out);
	fputc('\n', out);
}

/* Replaces a few lines at one place of f, deletes and inserts some. */
static void change_file(file_t *f, uint64_t *rng)
{
	size_t at = f->n ? xorshift64s(rng) % f->n : 0;
	size_t del = xorshift64s(rng) % 5, add = xorshift64s(rng) % 5, rep = 1 + xorshift64s(rng) % 3;
	for (size_t i = at; i < f->n && i < at + rep; i++)
		f->line[i] = xorshift64s(rng);
	at = f->n ? xorshift64s(rng) % f->n : 0;
	if (del > f->n - at)
		del = f->n - at;
	memmove(f->line + at, f->line + at + del, (f->n - at - del) * sizeof *f->line);
	f->n -= del;
	if (f->n + add > f->cap) {
		f->cap = (f->n + add) * 2;
		f->line = xrealloc(f->line, f->cap * sizeof *f->line);
	}
	memmove(f->line + at + add, f->line + at, (f->n - at) * sizeof *f->line);
	for (size_t i = 0; i < add; i++)
		f->line[at + i] = xorshift64s(rng);
	f->n += add;
}

static int write_stream(const char *path, uint64_t nfiles, uint64_t nlines, uint64_t ncommits,
			uint64_t per_commit)
{
	FILE *out = fopen(path, "w");
	if (!out)
		return -1;
	file_t *files = calloc(nfiles, sizeof *files);
	if (!files) {
		fclose(out);
		return -1;
	}
	uint64_t rng = rng_seed(42, 0);
	char name[64], *buf = NULL;
	size_t cap = 0;
	for (uint64_t i = 0; i < nfiles; i++) {
		files[i].n = nlines / 2 + xorshift64s(&rng) % (nlines + 1);
		files[i].cap = files[i].n * 2 + 8;
		files[i].line = xrealloc(NULL, files[i].cap * sizeof *files[i].line);
		for (size_t j = 0; j < files[i].n; j++)
			files[i].line[j] = xorshift64s(&rng);
	}
	for (uint64_t c = 1; c <= ncommits; c++) {
		fprintf(out, "commit refs/heads/main\nmark :%" PRIu64 "\n"
			"committer Bench <bench@example.org> %" PRIu64 " +0000\n", c,
			(uint64_t)1700000000 + c * 600);
		char msg[200];
		int k = snprintf(msg, sizeof msg, "Change %" PRIu64 ": %s of the %s\n\nCommit %" PRIu64
				 " of the generated history.\n", c, words[c % NWORDS],
				 words[(c / NWORDS) % NWORDS], c);
		fprintf(out, "data %d\n%s", k, msg);
		if (c > 1)
			fprintf(out, "from :%" PRIu64 "\n", c - 1);
		for (uint64_t j = 0; j < (c == 1 ? nfiles : per_commit); j++) {
			uint64_t i = c == 1 ? j : xorshift64s(&rng) % nfiles;
			if (c > 1)
				change_file(&files[i], &rng);
			snprintf(name, sizeof name, "src%02u/file%04" PRIu64 ".c", (unsigned)(i % NDIRS), i);
			write_blob(out, name, &files[i], &buf, &cap);
		}
		fputc('\n', out);
	}
	fprintf(out, "reset refs/tags/first\nfrom :1\n\n");
	for (uint64_t i = 0; i < nfiles; i++)
		free(files[i].line);
	free(files);
	free(buf);
	return fclose(out) == 0 ? 0 : -1;
}

static void usage(void)
{
	fprintf(stderr, "usage: prog_git [-f files] [-l lines] [-c commits] [-m files per commit] "
		"[-g git] [-k]\n");
	exit(2);
}

/* Runs a helper git command (argv[0] is the githelper link); 0 if it exited 0. */
static int helper(char *const argv[], const char *in)
{
	struct rusage ru;
	double secs;
	int rc = spawn_run(argv, spawn_helper_env(), in, NULL, &secs, &ru);
	if (rc != 0)
		fprintf(stderr, "prog_git: helper git %s failed (status %d)\n", argv[3], rc);
	return rc;
}

int main(int argc, char **argv)
{
	uint64_t nfiles = 400, nlines = 150, ncommits = 1200, per_commit = 8;
	char *git = "/usr/bin/git";
	int keep = 0, c;

	while ((c = getopt(argc, argv, "f:l:c:m:g:kh")) != -1) {
		int bad = 0;
		switch (c) {
		case 'f': bad = parse_u64(optarg, 1, 1000000, &nfiles); break;
		case 'l': bad = parse_u64(optarg, 1, 1000000, &nlines); break;
		case 'c': bad = parse_u64(optarg, 2, 10000000, &ncommits); break;
		case 'm': bad = parse_u64(optarg, 1, 1000000, &per_commit); break;
		case 'g': git = optarg; break;
		case 'k': keep = 1; break;
		default: usage();
		}
		if (bad)
			usage();
	}
	if (optind != argc)
		usage();

	char dir[PATH_MAX], stream[PATH_MAX], repo[PATH_MAX], link[PATH_MAX], logf[PATH_MAX];
	if (spawn_temp_dir("prog_git", dir, sizeof dir) < 0 || spawn_path(stream, dir, "history.fi") < 0 ||
	    spawn_path(repo, dir, "repo") < 0 || spawn_path(link, dir, "githelper") < 0 ||
	    spawn_path(logf, dir, "log.txt") < 0) {
		perror("prog_git: temporary directory");
		return 1;
	}
	char *git_path = realpath(git, NULL);
	if (!git_path || symlink(git_path, link) < 0) {
		fprintf(stderr, "prog_git: cannot link %s as %s\n", git, link);
		return 1;
	}
	if (write_stream(stream, nfiles, nlines, ncommits, per_commit) < 0) {
		perror("prog_git: writing the fast-import stream");
		return 1;
	}
	/* No system or user configuration: the same git on every machine. */
	setenv("HOME", dir, 1);
	setenv("GIT_CONFIG_NOSYSTEM", "1", 1);
	unsetenv("GIT_DIR");
	unsetenv("GIT_WORK_TREE");

	char *init[] = { link, "-C", dir, "init", "-q", "-b", "main", repo, NULL };
	char *import[] = { link, "-C", repo, "fast-import", "--quiet", NULL };
	if (helper(init, NULL) != 0 || helper(import, stream) != 0)
		return 1;
	unlink(stream);

	struct {
		const char *step;
		char *argv[12];
		const char *out;
	} cmds[] = {
		{ "log", { git, "-C", repo, "log", "-p", "--no-color", NULL }, logf },
		{ "diff", { git, "-C", repo, "diff", "--no-color", "first", "HEAD", NULL }, "/dev/null" },
		{ "gc", { git, "-C", repo, "-c", "gc.autoDetach=false", "gc", "--quiet", NULL }, NULL },
	};
	spawn_usage u = { 0 };
	double step_s[3];
	int failed = 0;
	for (size_t i = 0; i < 3 && !failed; i++) {
		struct rusage ru;
		int rc = spawn_run(cmds[i].argv, NULL, NULL, cmds[i].out, &step_s[i], &ru);
		if (rc != 0) {
			fprintf(stderr, "prog_git: git %s failed (status %d)\n", cmds[i].step, rc);
			failed = 1;
		}
		spawn_usage_add(&u, step_s[i], &ru);
	}
	struct stat st;
	double log_mib = stat(logf, &st) == 0 ? (double)st.st_size / 1048576 : 0;
	if (!failed && log_mib <= 0) {
		fprintf(stderr, "prog_git: git log -p printed nothing\n");
		failed = 1;
	}
	if (keep) {
		fprintf(stderr, "prog_git: kept %s\n", dir);
	} else {
		char *rm[] = { "rm", "-rf", dir, NULL };
		struct rusage ru;
		double secs;
		spawn_run(rm, spawn_helper_env(), NULL, NULL, &secs, &ru);
	}
	free(git_path);
	if (failed)
		return 1;
	for (size_t i = 0; i < 3; i++)
		printf("series step=%s seconds=%.6f\n", cmds[i].step, step_s[i]);
	spawn_print_measured(&u);
	fprintf(stderr, "prog_git: %s on %" PRIu64 " files, %" PRIu64 " commits of %" PRIu64
		" files: log %.3f s (%.1f MiB), diff %.3f s, gc %.3f s; %.3f s user, %.3f s sys, "
		"peak RSS %.1f MiB, %ld minor faults\n", git, nfiles, ncommits, per_commit, step_s[0],
		log_mib, step_s[1], step_s[2], u.user_s, u.sys_s, u.peak_rss_kib / 1024.0, u.minflt);
	printf("result seconds=%.6f log_mib=%.3f\n", u.wall_s, log_mib);
	return 0;
}
