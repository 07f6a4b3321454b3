/*
 * fork_arenas: the child of a fork gets arenas back from the threads that
 * did not survive it.  The main thread allocates (arena 0), and NARENAS - 1
 * holder threads allocate and wait, one in each other arena; the main
 * thread forks.  In the child only the main thread lives: a new thread
 * there must be bound to an arena of its own, so that blocks of the main
 * thread it frees go home instead of into its cache and out again to it
 * (test_threads' go-home property).  A child that kept the parent's counts
 * saw every arena with one thread and bound it to the lowest, arena 0.
 * Run under LD_PRELOAD=libarena.so with ARENA_CONF=narenas:NARENAS by
 * test_fork, in a fresh process (a test process inherits its runner's).
 *
 * usage: fork_arenas NARENAS
 * prints "ok", or "FAIL: ..." and exits 1.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

enum { NBLOCKS = 74, SIZE = 40, TRIES = 1024, MAX_HOLDERS = 63 };

static pthread_barrier_t held, done;
static void *blocks[NBLOCKS];

static void *holder(void *arg)
{
	(void)arg;
	void *volatile p = malloc(SIZE);
	pthread_barrier_wait(&held);
	pthread_barrier_wait(&done);
	free(p);
	return NULL;
}

/* In the child: frees the main thread's blocks, then allocates; none of
 * them may come back to this thread. */
static void *freer(void *arg)
{
	(void)arg;
	for (int i = 0; i < NBLOCKS; i++)
		free(blocks[i]);
	static void *mine[TRIES];
	const char *err = NULL;
	for (int i = 0; i < TRIES && !err; i++) {
		if (!(mine[i] = malloc(SIZE)))
			err = "malloc failed";
		for (int j = 0; j < NBLOCKS && !err; j++)
			if (mine[i] == blocks[j])
				err = "a new thread of the child got back a block of the main thread's arena";
	}
	for (int i = 0; i < TRIES; i++)
		free(mine[i]);
	return (void *)err;
}

static int child(void)
{
	pthread_t t;
	void *err;
	if (pthread_create(&t, NULL, freer, NULL) != 0)
		return printf("FAIL: pthread_create in the child\n"), 1;
	pthread_join(t, &err);
	if (err)
		return printf("FAIL: %s\n", (const char *)err), 1;
	return 0;
}

int main(int argc, char **argv)
{
	int nholders = argc > 1 ? atoi(argv[1]) - 1 : 1;
	if (nholders < 1 || nholders > MAX_HOLDERS)
		return printf("FAIL: usage: fork_arenas NARENAS (2..%d)\n", MAX_HOLDERS + 1), 1;
	for (int i = 0; i < NBLOCKS; i++)
		if (!(blocks[i] = malloc(SIZE)))
			return printf("FAIL: malloc\n"), 1;
	pthread_t h[MAX_HOLDERS];
	pthread_barrier_init(&held, NULL, (unsigned)nholders + 1);
	pthread_barrier_init(&done, NULL, (unsigned)nholders + 1);
	for (int i = 0; i < nholders; i++)
		if (pthread_create(&h[i], NULL, holder, NULL) != 0)
			return printf("FAIL: pthread_create\n"), 1;
	pthread_barrier_wait(&held); /* every holder has allocated */
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return printf("FAIL: fork\n"), 1;
	if (pid == 0) {
		int rc = child();
		fflush(stdout);
		_exit(rc);
	}
	int status;
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return printf("FAIL: the child failed (status %d)\n", status), 1;
	pthread_barrier_wait(&done);
	for (int i = 0; i < nholders; i++)
		pthread_join(h[i], NULL);
	for (int i = 0; i < NBLOCKS; i++)
		free(blocks[i]);
	printf("ok\n");
	return 0;
}
