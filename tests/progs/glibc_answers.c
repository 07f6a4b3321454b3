/*
 * What the malloc family answers at its edges: values, errno, alignment,
 * mallinfo/mallinfo2 growth, malloc_info's shape.  test_glibc runs it once
 * under plain glibc and once under LD_PRELOAD=libarena.so and compares the
 * two outputs line by line: every line printed here is a promise glibc
 * makes that a drop-in must keep.  Nothing printed depends on addresses.
 */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ERRNO_SENTINEL 4321

/* The smallest power of two >= a (1 for 0). */
static size_t pow2_at_least(size_t a)
{
	size_t p = 1;
	while (p < a && p <= SIZE_MAX / 2)
		p <<= 1;
	return p;
}

static const char *errno_name(int e)
{
	switch (e) {
	case 0: return "0";
	case ENOMEM: return "ENOMEM";
	case EINVAL: return "EINVAL";
	case ERRNO_SENTINEL: return "unchanged";
	default: return "other";
	}
}

/* "NULL errno=X" or "block aligned=yes|no" (to the power of two that the
 * alignment asked for rounds up to, at least 16). */
static void report(const char *call, void *p, size_t align, int err)
{
	if (!p) {
		printf("%s = NULL errno=%s\n", call, errno_name(err));
		return;
	}
	size_t a = pow2_at_least(align < 16 ? 16 : align);
	printf("%s = block aligned=%s\n", call, (uintptr_t)p % a == 0 ? "yes" : "no");
	free(p);
}

static const size_t aligns[] = {
	0, 1, 2, 8, 16, 24, 32, 48, 100, 4096, 4097, 65537, (size_t)1 << 20, (size_t)3 << 20,
	(size_t)1 << 46, ((size_t)1 << 46) + 1, SIZE_MAX / 4, SIZE_MAX / 2, SIZE_MAX / 2 + 1,
	SIZE_MAX / 2 + 2, SIZE_MAX - 4095, SIZE_MAX,
};
static const size_t sizes[] = { 0, 1, 10, 4096, 100000, SIZE_MAX / 2, SIZE_MAX - 4096, SIZE_MAX };
#define N(a) (sizeof(a) / sizeof((a)[0]))

static void aligned_family(void)
{
	char call[128];
	for (size_t i = 0; i < N(aligns); i++) {
		for (size_t j = 0; j < N(sizes); j++) {
			size_t a = aligns[i], n = sizes[j];
			errno = ERRNO_SENTINEL;
			void *p = memalign(a, n);
			snprintf(call, sizeof call, "memalign(%#zx, %#zx)", a, n);
			report(call, p, a, errno);

			errno = ERRNO_SENTINEL;
			p = aligned_alloc(a, n);
			snprintf(call, sizeof call, "aligned_alloc(%#zx, %#zx)", a, n);
			report(call, p, a, errno);

			/* posix_memalign answers with its return value; *out is
			 * left alone on failure; errno: glibc sets it on ENOMEM
			 * only. */
			void *out = (void *)&call;
			errno = ERRNO_SENTINEL;
			int rc = posix_memalign(&out, a, n);
			int err = errno;
			printf("posix_memalign(%#zx, %#zx) = %s errno=%s out=%s\n", a, n,
			       rc == 0 ? "0" : errno_name(rc), rc == 0 ? "-" : errno_name(err),
			       rc == 0 ? ((uintptr_t)out % pow2_at_least(a) == 0 ? "aligned" : "misaligned")
				       : out == (void *)&call ? "untouched" : "changed");
			if (rc == 0)
				free(out);
		}
	}
}

static void page_family(void)
{
	char call[64];
	for (size_t j = 0; j < N(sizes); j++) {
		size_t n = sizes[j];
		errno = ERRNO_SENTINEL;
		void *p = valloc(n);
		snprintf(call, sizeof call, "valloc(%#zx)", n);
		report(call, p, 4096, errno);
		errno = ERRNO_SENTINEL;
		p = pvalloc(n);
		snprintf(call, sizeof call, "pvalloc(%#zx)", n);
		if (p)
			printf("pvalloc(%#zx) usable>=pages=%s\n", n,
			       malloc_usable_size(p) >= ((n + 4095) & ~(size_t)4095) ? "yes" : "no");
		report(call, p, 4096, errno);
	}
}

static void plain_family(void)
{
	char call[64];
	for (size_t j = 0; j < N(sizes); j++) {
		size_t n = sizes[j];
		errno = ERRNO_SENTINEL;
		snprintf(call, sizeof call, "malloc(%#zx)", n);
		report(call, malloc(n), 16, errno);
		errno = ERRNO_SENTINEL;
		snprintf(call, sizeof call, "calloc(1, %#zx)", n);
		report(call, calloc(1, n), 16, errno);
		errno = ERRNO_SENTINEL;
		snprintf(call, sizeof call, "calloc(%#zx, 16)", n);
		report(call, calloc(n, 16), 16, errno);
		errno = ERRNO_SENTINEL;
		snprintf(call, sizeof call, "reallocarray(NULL, %#zx, 3)", n);
		report(call, reallocarray(NULL, n, 3), 16, errno);

		char *q = malloc(100);
		memset(q, 0x5a, 100);
		errno = ERRNO_SENTINEL;
		char *r = realloc(q, n);
		if (n == 0) {
			printf("realloc(p, 0) = %s errno=%s\n", r ? "block" : "NULL", errno_name(errno));
			free(r);
		} else if (!r) {
			printf("realloc(p, %#zx) = NULL errno=%s kept=%s\n", n, errno_name(errno),
			       q[0] == 0x5a && q[99] == 0x5a ? "yes" : "no");
			free(q);
		} else {
			printf("realloc(p, %#zx) = block\n", n);
			free(r);
		}
	}
	errno = ERRNO_SENTINEL;
	free(NULL);
	printf("free(NULL) errno=%s\n", errno_name(errno));
	printf("malloc_usable_size(NULL) = %zu\n", malloc_usable_size(NULL));
	void *z = realloc(NULL, 0);
	printf("realloc(NULL, 0) = %s\n", z ? "block" : "NULL");
	free(z);
}

/* In-use bytes as mallinfo2 reports them: uordblks (ordinary blocks) plus
 * hblkhd (blocks mapped on their own). */
static size_t in_use2(void)
{
	struct mallinfo2 m = mallinfo2();
	return m.uordblks + m.hblkhd;
}

/* mallinfo is deprecated (int fields) but still called by monitoring. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static size_t in_use1(void)
{
	struct mallinfo m = mallinfo();
	return (size_t)(unsigned)m.uordblks + (size_t)(unsigned)m.hblkhd;
}
#pragma GCC diagnostic pop

/* Allocates about 10 MB in blocks of `size` and says whether mallinfo2 and
 * mallinfo count at least that much more in use, and back after freeing. */
static void mallinfo_growth(size_t size)
{
	enum { TOTAL = 10 * 1000 * 1000 };
	size_t n = TOTAL / size + 1;
	void **blocks = calloc(n, sizeof *blocks);
	size_t before2 = in_use2(), before1 = in_use1();
	for (size_t i = 0; i < n; i++) {
		blocks[i] = malloc(size);
		memset(blocks[i], 1, size < 64 ? size : 64);
	}
	size_t after2 = in_use2(), after1 = in_use1();
	printf("mallinfo2 after %zu x %zu B: in use grew by >= 10 MB: %s\n", n, size,
	       after2 >= before2 + TOTAL ? "yes" : "no");
	printf("mallinfo after %zu x %zu B: in use grew by >= 10 MB: %s\n", n, size,
	       after1 >= before1 + TOTAL ? "yes" : "no");
	struct mallinfo2 m = mallinfo2();
	printf("mallinfo2 arena >= uordblks: %s, arena > 0: %s\n",
	       m.arena >= m.uordblks ? "yes" : "no", m.arena > 0 ? "yes" : "no");
	for (size_t i = 0; i < n; i++)
		free(blocks[i]);
	free(blocks);
	printf("mallinfo2 after freeing them: in use below +1 MB: %s\n",
	       in_use2() < before2 + 1000 * 1000 ? "yes" : "no");
}

/* mallopt's answers (it has no effect under libarena, but programs test
 * what it returns). */
static void mallopt_answers(void)
{
	static const int values[] = { 0, 1, 64, 160, 161, 100000, -1 };
	for (int param = -9; param <= 5; param++)
		for (size_t j = 0; j < N(values); j++)
			printf("mallopt(%d, %d) = %d\n", param, values[j], mallopt(param, values[j]));
	printf("mallopt(100, 1) = %d\n", mallopt(100, 1));
}

static void malloc_info_shape(void)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	errno = ERRNO_SENTINEL;
	int rc = malloc_info(0, f);
	fclose(f);
	printf("malloc_info(0) = %d\n", rc);
	printf("malloc_info starts with <malloc version=\"1\">: %s\n",
	       strncmp(text, "<malloc version=\"1\">\n", 21) == 0 ? "yes" : "no");
	printf("malloc_info ends with </malloc>: %s\n",
	       len >= 10 && strcmp(text + len - 10, "</malloc>\n") == 0 ? "yes" : "no");
	printf("malloc_info has <heap nr=\"0\">, <sizes>, <total type=\"mmap\": %s\n",
	       strstr(text, "<heap nr=\"0\">") && strstr(text, "<sizes>") &&
	       strstr(text, "<total type=\"mmap\"") ? "yes" : "no");
	free(text);
	f = open_memstream(&text, &len);
	errno = ERRNO_SENTINEL;
	rc = malloc_info(1, f);
	int err = errno;
	fclose(f);
	printf("malloc_info(1) = %d errno=%s bytes=%zu\n", rc, errno_name(err), len);
	free(text);
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "all";
	int all = !strcmp(what, "all");
	if (all || !strcmp(what, "aligned"))
		aligned_family();
	if (all || !strcmp(what, "page"))
		page_family();
	if (all || !strcmp(what, "plain"))
		plain_family();
	if (all || !strcmp(what, "mallinfo")) {
		mallinfo_growth(100);
		mallinfo_growth(5000);
		mallinfo_growth(300000);
		mallinfo_growth(3 << 20);
	}
	if (all || !strcmp(what, "mallopt"))
		mallopt_answers();
	if (all || !strcmp(what, "info"))
		malloc_info_shape();
	printf("end\n");
	return 0;
}
