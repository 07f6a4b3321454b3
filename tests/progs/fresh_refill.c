/*
 * A refill of fresh page-sized blocks links them lazily: run by
 * test_pages.c under LD_PRELOAD=libarena.so and ARENA_CONF=thp:never.
 *
 * Rounds of 64 mallocs and 64 frees of SIZE bytes (argv[1], default 4096)
 * grow the thread's list, so that its refills take up to 64 blocks; then
 * NEW mallocs of fresh blocks, none written by the program.  A refill that
 * linked every block it took faulted in all their first pages at one
 * malloc (32-35 faults); linked a page at a time, a malloc faults in about
 * one.  It prints the most minor faults one malloc took ("max=N") and how
 * many steps went to the next block ("adjacent=N" of NEW - 1): the blocks
 * of a fresh run go out in a random order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

enum { ROUNDS = 6, N = 64, NEW = 200 };

static long minor_faults(void)
{
	struct rusage r;
	getrusage(RUSAGE_SELF, &r);
	return r.ru_minflt;
}

int main(int argc, char **argv)
{
	size_t size = argc > 1 ? strtoul(argv[1], NULL, 0) : 4096;
	static char *p[NEW];
	for (int r = 0; r < ROUNDS; r++) {
		for (int i = 0; i < N; i++) {
			if (!(p[i] = malloc(size)))
				return 1;
			p[i][0] = 1;
		}
		for (int i = 0; i < N; i++)
			free(p[i]);
	}
	long most = 0;
	int adjacent = 0;
	for (int i = 0; i < NEW; i++) {
		long f = minor_faults();
		if (!(p[i] = malloc(size)))
			return 1;
		f = minor_faults() - f;
		most = f > most ? f : most;
		adjacent += i > 0 && p[i] - p[i - 1] == (long)size;
	}
	printf("max=%ld adjacent=%d\n", most, adjacent);
	for (int i = 0; i < NEW; i++)
		free(p[i]);
	return 0;
}
