/*
 * Commits one misuse of the allocator (argv[1] names it; see misuse_cases.h)
 * and, if it survives, checks the heap and prints "survived".
 * Run under LD_PRELOAD=libarena.so with ARENA_CONF=misuse:abort|warn|ignore.
 */
#include <dlfcn.h>

#include "misuse_cases.h"

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: misuse CASE\n");
		return 2;
	}
	if (!dlsym(RTLD_DEFAULT, "arena_stats_get")) {
		printf("FAIL: libarena is not loaded (LD_PRELOAD?)\n");
		return 4;
	}
	return misuse_run(argv[1]);
}
