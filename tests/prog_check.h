/*
 * For the child programs in tests/progs/: CHECK(cond, fmt, ...) prints one
 * "FAIL: ..." line on stdout when cond is false and counts it; the suite
 * that runs the program reads those lines.  checks_report() ends the run:
 * "N check(s) failed" and 1, or "ok" and 0.
 */
#ifndef PROG_CHECK_H
#define PROG_CHECK_H

#include <stdio.h>

static int nfail;

#define CHECK(cond, ...)                              \
	do {                                          \
		if (!(cond)) {                        \
			printf("FAIL: " __VA_ARGS__); \
			printf("\n");                 \
			nfail++;                      \
		}                                     \
	} while (0)

static inline int checks_report(void)
{
	if (nfail) {
		printf("%d check(s) failed\n", nfail);
		return 1;
	}
	printf("ok\n");
	return 0;
}

#endif /* PROG_CHECK_H */
