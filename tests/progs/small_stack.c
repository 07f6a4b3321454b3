/*
 * Creates one thread with the stack size argv[1] asks for (bytes), which
 * mallocs and frees a block: prints "allocated" and exits 0, or says
 * what pthread_create answered and exits 1.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *thread_main(void *arg)
{
	void *p = malloc(48);
	free(p);
	return p ? arg : NULL;
}

int main(int argc, char **argv)
{
	static int token;
	pthread_attr_t attr;
	pthread_t t;
	void *ret = NULL;
	size_t size = argc > 1 ? strtoul(argv[1], NULL, 0) : 20480;
	if (pthread_attr_init(&attr) || pthread_attr_setstacksize(&attr, size)) {
		printf("bad stack size %zu\n", size);
		return 2;
	}
	int rc = pthread_create(&t, &attr, thread_main, &token);
	if (rc) {
		printf("pthread_create with a %zu-byte stack: %s\n", size, strerror(rc));
		return 1;
	}
	pthread_join(t, &ret);
	printf(ret == &token ? "allocated\n" : "malloc failed\n");
	return ret == &token ? 0 : 1;
}
