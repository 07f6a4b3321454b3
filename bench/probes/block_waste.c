/*
 * block_waste.c: what blocks of a power of two plus a small header cost.
 *
 * What it measures.  For requests 2^k + h (2^k in 256 .. 8192, h in 8 .. 512,
 * doubling), under whichever malloc is loaded (LD_PRELOAD):
 *   usable    malloc_usable_size of one block: the size class it landed in;
 *   waste     (usable - request) / usable: the part of the block the program
 *             cannot use;
 *   resident  (with -r) the memory one block really costs: a child process
 *             mallocs N blocks (-n, default 4096) and writes every byte of
 *             them; the growth of its resident set (/proc/self/statm) over N.
 *             This counts what the class table does not show: a slab's tail
 *             past its last block, headers, metadata, rounding of page runs;
 *   overhead  (resident - request) / resident.
 * With -a SIZE it only mallocs and writes N blocks of SIZE bytes and exits,
 * for `/usr/bin/time -f %M` to read the peak resident set.
 *
 * Why.  Page caches (sqlite's, most databases') allocate blocks of a page
 * plus a header of 8 to 512 bytes; with four classes per doubling such a
 * block of 4096 + h landed in the 5120-byte class and left up to a fifth of
 * it unused (issue 16).  docs/design.md, "Blocks of a page plus a header",
 * quotes this probe (before and after the header classes, and the other
 * allocators).
 *
 * Run: LD_PRELOAD=build/libarena.so build/bench/probes/block_waste -r
 *      (and with each allocator's library; glibc without LD_PRELOAD).
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what)
{
	fprintf(stderr, "block_waste: %s: %s\n", what, strerror(errno));
	exit(1);
}

static long resident_pages(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	long size = 0, rss = 0;
	if (!f || fscanf(f, "%ld %ld", &size, &rss) != 2)
		die("/proc/self/statm");
	fclose(f);
	return rss;
}

/* mallocs n blocks of size bytes and writes all of them; the blocks stay. */
static void fill(size_t size, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char *p = malloc(size);
		if (!p)
			die("malloc");
		memset(p, (int)(i | 1), size);
	}
}

/* Resident bytes per block of size bytes, n of them, in a child process
 * (each shape starts from the same heap: the parent's). */
static double resident_per_block(size_t size, size_t n)
{
	int fd[2];
	if (pipe(fd) != 0)
		die("pipe");
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		close(fd[0]);
		long before = resident_pages();
		fill(size, n);
		double per = (double)(resident_pages() - before) * (double)sysconf(_SC_PAGESIZE) /
			     (double)n;
		if (write(fd[1], &per, sizeof(per)) != (ssize_t)sizeof(per))
			_exit(1);
		_exit(0);
	}
	close(fd[1]);
	double per = -1;
	if (read(fd[0], &per, sizeof(per)) != (ssize_t)sizeof(per))
		per = -1;
	close(fd[0]);
	int status;
	waitpid(pid, &status, 0);
	return per;
}

int main(int argc, char **argv)
{
	size_t n = 4096, only = 0;
	int resident = 0, opt;
	while ((opt = getopt(argc, argv, "n:ra:")) != -1) {
		if (opt == 'n')
			n = strtoul(optarg, NULL, 0);
		else if (opt == 'r')
			resident = 1;
		else if (opt == 'a')
			only = strtoul(optarg, NULL, 0);
		else {
			fprintf(stderr, "usage: block_waste [-r] [-n blocks] [-a size]\n");
			return 2;
		}
	}
	if (only) {
		fill(only, n);
		return 0;
	}
	static const size_t bases[] = { 256, 512, 1024, 2048, 4096, 8192 };
	static const size_t hdrs[] = { 8, 16, 32, 64, 128, 256, 512 };
	printf("| request | usable | waste |%s\n", resident ? " resident/block | overhead |" : "");
	printf("|---|---|---|%s\n", resident ? "---|---|" : "");
	for (size_t b = 0; b < sizeof(bases) / sizeof(bases[0]); b++)
		for (size_t h = 0; h < sizeof(hdrs) / sizeof(hdrs[0]); h++) {
			size_t req = bases[b] + hdrs[h];
			void *p = malloc(req);
			if (!p)
				die("malloc");
			size_t usable = malloc_usable_size(p);
			free(p);
			printf("| %zu + %zu | %zu | %.1f%% |", bases[b], hdrs[h], usable,
			       100.0 * (double)(usable - req) / (double)usable);
			if (resident) {
				double per = resident_per_block(req, n);
				printf(" %.0f | %.1f%% |", per, 100.0 * (per - (double)req) / per);
			}
			printf("\n");
			fflush(stdout);
		}
	return 0;
}
