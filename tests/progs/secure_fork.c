/*
 * A fork while another thread sets secure mode's secrets: run by
 * test_harden.c under LD_PRELOAD=libarena.so with ARENA_CONF=secure:true.
 *
 * pthread_key_create is interposed (the program's definition comes before
 * glibc's): libarena's first call is the thread caches' (at
 * initialisation), its second secure mode's, made while its secrets are
 * being set.  That second call starts a thread that forks and waits for
 * the child before it goes on, so the child is born with the secrets half
 * set by a thread it does not have.  The child frees a small block: with
 * secure mode's lists it waits in the quarantine; without (the secrets
 * stuck "being set") it goes home and comes back.  Prints "child:
 * quarantined" or "child: not quarantined" and exits 0; "skip: ..." if the
 * second call never came.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int __pthread_key_create(pthread_key_t *key, void (*destructor)(void *));

static int calls, child_status = -1;

/* p, out of the compiler's sight (a read after free on purpose) */
static void *hide(void *p)
{
	__asm__ volatile("" : "+r"(p));
	return p;
}

/* In a fork child: whether a freed block of its own waits in secure
 * mode's quarantine (0), or comes back among the next 1,000 of its class
 * (1): without the thread's lists a freed block goes home at once, and
 * the slab it left hands it out again. */
static int child_check(void)
{
	void *p = hide(malloc(64));
	free(p);
	for (int i = 0; i < 1000; i++)
		if (hide(malloc(64)) == p)
			return 1;
	return 0;
}

static void *forker(void *arg)
{
	(void)arg;
	pid_t pid = fork();
	if (pid == 0)
		_exit(child_check());
	int status;
	if (pid > 0 && waitpid(pid, &status, 0) == pid)
		child_status = WIFEXITED(status) ? WEXITSTATUS(status) : 100;
	return NULL;
}

int pthread_key_create(pthread_key_t *key, void (*destructor)(void *))
{
	if (++calls == 2) {
		pthread_t t;
		if (pthread_create(&t, NULL, forker, NULL) == 0)
			pthread_join(t, NULL);
	}
	return __pthread_key_create(key, destructor);
}

int main(void)
{
	free(hide(malloc(64))); /* secure mode's first call, if none came before */
	if (child_status < 0) {
		printf("skip: no fork during the secrets (%d calls)\n", calls);
		return 0;
	}
	printf("child: %s\n", child_status == 0 ? "quarantined" : "not quarantined");
	return 0;
}
