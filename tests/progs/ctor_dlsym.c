/*
 * Run under LD_PRELOAD=libarena.so: allocates in a constructor (before
 * main), uses dlsym(RTLD_NEXT, "malloc"), dlerror(), dlopen() (the dynamic
 * loader allocates through the preloaded malloc too), threads, then normal
 * work.  Prints "FAIL: ..." lines on problems and "ok" at the end; exits 0
 * only if everything held.
 */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *early;
static void *early_big;
static void *(*early_next_malloc)(size_t);
static int failures;

#define CHECK(cond, ...)                                 \
	do {                                             \
		if (!(cond)) {                           \
			printf("FAIL: " __VA_ARGS__);    \
			printf("\n");                    \
			failures++;                      \
		}                                        \
	} while (0)

__attribute__((constructor(101))) static void early_init(void)
{
	early = malloc(64);
	if (early)
		strcpy(early, "made in a constructor");
	early_big = calloc(1, 3 << 20);
	char *s = strdup("strdup in a constructor");
	free(s);
	early_next_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
	(void)dlerror();
}

static void *thread_main(void *arg)
{
	uintptr_t id = (uintptr_t)arg;
	void *v[100];
	for (int round = 0; round < 100; round++) {
		for (int i = 0; i < 100; i++) {
			v[i] = malloc(16 + (size_t)((i * 37 + (int)id) % 5000));
			if (!v[i])
				return (void *)1;
			memset(v[i], (int)id, 16);
		}
		for (int i = 0; i < 100; i++)
			free(v[i]);
	}
	/* dlerror() keeps a per-thread, malloc'd message */
	if (dlsym(RTLD_DEFAULT, "no_such_symbol_in_thread") != NULL || dlerror() == NULL)
		return (void *)2;
	return NULL;
}

int main(void)
{
	CHECK(early && strcmp(early, "made in a constructor") == 0, "block from the constructor");
	CHECK(early_big != NULL, "calloc in the constructor");
	if (early_big) {
		const unsigned char *b = early_big;
		for (size_t i = 0; i < (3u << 20); i += 4096)
			if (b[i]) {
				CHECK(0, "calloc'd memory from the constructor not zero at %zu", i);
				break;
			}
	}

	/* libarena is the malloc of this process. */
	void *stats = dlsym(RTLD_DEFAULT, "arena_stats_get");
	CHECK(stats != NULL, "arena_stats_get not found: libarena is not preloaded");
	void *(*next_malloc)(size_t) = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
	void *(*def_malloc)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "malloc");
	void (*next_free)(void *) = (void (*)(void *))dlsym(RTLD_NEXT, "free");
	CHECK(next_malloc != NULL, "dlsym(RTLD_NEXT, \"malloc\") is NULL");
	CHECK(next_free != NULL, "dlsym(RTLD_NEXT, \"free\") is NULL");
	CHECK(next_malloc == def_malloc, "RTLD_NEXT and RTLD_DEFAULT malloc differ");
	CHECK(early_next_malloc == next_malloc, "dlsym in the constructor gave another malloc");
	Dl_info info;
	CHECK(next_malloc && dladdr((void *)next_malloc, &info) && info.dli_fname &&
		      strstr(info.dli_fname, "libarena"),
	      "malloc does not come from libarena (%s)", next_malloc && dladdr((void *)next_malloc, &info) ? info.dli_fname : "?");

	/* Blocks cross between the names. */
	if (next_malloc && next_free) {
		char *p = next_malloc(1000);
		CHECK(p != NULL, "malloc through dlsym");
		if (p) {
			memset(p, 7, 1000);
			free(p);
		}
		p = malloc(5000);
		if (p) {
			memset(p, 8, 5000);
			next_free(p);
		}
	}

	/* dlerror after a failed lookup: a message, then NULL. */
	(void)dlerror();
	void *none = dlsym(RTLD_DEFAULT, "no_such_symbol_libarena_test");
	const char *err = dlerror();
	CHECK(none == NULL, "dlsym found a symbol that does not exist");
	CHECK(err != NULL && strstr(err, "no_such_symbol_libarena_test"), "dlerror() message: %s",
	      err ? err : "(null)");
	CHECK(dlerror() == NULL, "second dlerror() not NULL");

	/* dlopen: success and failure. */
	void *h = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
	CHECK(h != NULL, "dlopen(libm.so.6): %s", dlerror());
	if (h) {
		double (*cosp)(double) = (double (*)(double))dlsym(h, "cos");
		CHECK(cosp && cosp(0.0) == 1.0, "cos from libm");
		CHECK(dlclose(h) == 0, "dlclose");
	}
	void *h2 = dlopen("libdoes-not-exist-libarena.so", RTLD_NOW);
	const char *err2 = dlerror();
	CHECK(h2 == NULL && err2 != NULL, "dlopen of a missing library");

	/* Threads, each with its own dlerror buffer. */
	pthread_t t[4];
	for (uintptr_t i = 0; i < 4; i++)
		CHECK(pthread_create(&t[i], NULL, thread_main, (void *)(i + 1)) == 0, "pthread_create");
	for (int i = 0; i < 4; i++) {
		void *rv = NULL;
		pthread_join(t[i], &rv);
		CHECK(rv == NULL, "thread %d failed (%ld)", i, (long)(intptr_t)rv);
	}

	/* Ordinary work afterwards. */
	char *s = NULL;
	size_t n = 0;
	for (int i = 0; i < 10000; i++) {
		char *q = realloc(s, n + 10);
		CHECK(q != NULL, "realloc");
		if (!q)
			break;
		s = q;
		memcpy(s + n, "0123456789", 10);
		n += 10;
	}
	for (size_t i = 0; i < n; i++)
		if (s[i] != (char)('0' + i % 10)) {
			CHECK(0, "realloc'd string damaged at %zu", i);
			break;
		}
	free(s);
	CHECK(malloc_usable_size(early) >= 64, "malloc_usable_size of the constructor's block");
	free(early);
	free(early_big);

	if (failures)
		return 1;
	printf("ok\n");
	return 0;
}
