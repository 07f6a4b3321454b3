/*
 * Files and temporary directories of the tests (static inline, header only).
 */
#ifndef ARENA_TESTS_FILES_H
#define ARENA_TESTS_FILES_H

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "run.h"

/* ---- files ------------------------------------------------------------------------------ */

static inline int write_file(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t w = fwrite(data, 1, n, f);
	return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static inline int write_str(const char *path, const char *s)
{
	return write_file(path, s, strlen(s));
}

/* Returns 1 when both files exist and have the same contents. */
static inline int files_equal(const char *a, const char *b)
{
	FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
	int eq = fa && fb;
	static char ba[65536], bb[65536];
	while (eq) {
		size_t na = fread(ba, 1, sizeof ba, fa);
		size_t nb = fread(bb, 1, sizeof bb, fb);
		if (na != nb || memcmp(ba, bb, na) != 0)
			eq = 0;
		if (na == 0)
			break;
	}
	if (fa)
		fclose(fa);
	if (fb)
		fclose(fb);
	return eq;
}

static inline long long file_size(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* Creates a fresh directory under /tmp; path must hold 64 bytes. */
static inline int make_tmpdir(char *path)
{
	strcpy(path, "/tmp/arena-test-XXXXXX");
	return mkdtemp(path) ? 0 : -1;
}

static inline void remove_tree(const char *path)
{
	if (!path || strncmp(path, "/tmp/arena-test-", 16) != 0)
		return;
	const char *argv[] = { "/bin/rm", "-rf", path, NULL };
	run_result r;
	if (run_prog(argv, NULL, NULL, 60, &r) == 0)
		run_result_free(&r);
}

#endif /* ARENA_TESTS_FILES_H */
