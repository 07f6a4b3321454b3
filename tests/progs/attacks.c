/*
 * Heap attacks made on purpose: run by test_harden.c under
 * LD_PRELOAD=libarena.so, one attack per process.
 *
 *   attacks double-free-other-thread   a block freed by one thread (into its
 *                                      cache) is freed again by another
 *   attacks placement                  16 consecutive malloc(48): prints how
 *                                      many of the 15 steps are 48 B apart
 *                                      ("adjacent=N")
 *
 * The first expects libarena to report the double free and abort; it prints
 * "survived" and exits 0 if the second free is accepted.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *block;

static void *free_it(void *arg)
{
	(void)arg;
	printf("second free of %p from another thread\n", block);
	fflush(stdout);
	free(block);
	return NULL;
}

static int double_free_other_thread(void)
{
	block = malloc(48);
	free(block); /* into this thread's cache */
	pthread_t t;
	if (pthread_create(&t, NULL, free_it, NULL) != 0)
		return 2;
	pthread_join(t, NULL);
	printf("survived\n");
	return 0;
}

static int placement(void)
{
	char *p[16];
	for (int i = 0; i < 16; i++)
		p[i] = malloc(48);
	int adjacent = 0;
	for (int i = 1; i < 16; i++)
		adjacent += p[i] - p[i - 1] == 48;
	printf("adjacent=%d\n", adjacent);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "double-free-other-thread"))
		return double_free_other_thread();
	if (argc >= 2 && !strcmp(argv[1], "placement"))
		return placement();
	fprintf(stderr, "usage: attacks double-free-other-thread | placement\n");
	return 2;
}
