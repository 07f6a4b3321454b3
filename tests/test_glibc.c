/*
 * glibc's malloc contract (issue 13): the answers a correct program can see
 * are glibc's own.  progs/glibc_answers prints, for the aligned family
 * (memalign, aligned_alloc, posix_memalign: 22 alignments x 8 sizes),
 * valloc/pvalloc, malloc/calloc/reallocarray/realloc at the size edges,
 * free(NULL), malloc_usable_size(NULL), mallinfo/mallinfo2 growth and
 * malloc_info's shape, one line per answer (value kind, errno, alignment;
 * never an address).  It runs once under plain glibc and once under
 * LD_PRELOAD=libarena.so, and the two outputs must be equal.  The other
 * tests check, in this process (linked with libarena.a), what glibc's
 * output cannot show: libarena's own figures behind mallinfo2 and
 * malloc_info, malloc_stats under cancellation, and free's fast-path
 * block test over every slab offset.
 */
#include <criterion/criterion.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>

#include "arena.h"
#include "common.h"

#define ANSWERS_PROG PROGS_DIR "/glibc_answers"

static void run_answers(int preload, run_result *r)
{
	const char *argv[] = { ANSWERS_PROG, "all", NULL };
	const char *env[] = { "LD_PRELOAD=" ARENA_SO, NULL };
	cr_assert_eq(run_prog(argv, preload ? env : NULL, NULL, 60, r), 0, "cannot run %s",
		     ANSWERS_PROG);
	cr_assert(run_exited0(r), "%s (%s): %s; stderr: %s", ANSWERS_PROG,
		  preload ? "libarena" : "glibc", r->desc, r->err);
	cr_assert(contains(r->out, "\nend\n"), "%s did not finish: %s", ANSWERS_PROG, r->out);
}

/* The first line where a and b differ, with its number; NULL if equal. */
static const char *first_difference(const char *a, const char *b, int *line, char *buf,
				    size_t n)
{
	*line = 1;
	while (*a || *b) {
		size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
		if (la != lb || memcmp(a, b, la) != 0) {
			snprintf(buf, n, "glibc: \"%.*s\"; libarena: \"%.*s\"", (int)la, a, (int)lb, b);
			return buf;
		}
		a += la + (a[la] == '\n');
		b += lb + (b[lb] == '\n');
		(*line)++;
	}
	return NULL;
}

Test(glibc, answers_are_glibcs, .timeout = 120)
{
	run_result g, a;
	run_answers(0, &g);
	run_answers(1, &a);
	int line;
	char buf[512];
	const char *diff = first_difference(g.out, a.out, &line, buf, sizeof buf);
	cr_assert_null(diff, "line %d differs: %s", line, diff);
	cr_assert_gt(count_lines(g.out, g.out_len), 500, "too few answers compared: %s", g.out);
	cr_assert_eq(a.err_len, 0, "libarena printed: %s", a.err);
	run_result_free(&g);
	run_result_free(&a);
}

/* posix_memalign answers with its return value and leaves *out alone on
 * failure; errno as glibc: untouched for EINVAL, ENOMEM for ENOMEM (glibc's
 * tst-malloc-thread-fail reads it; the Linux manual says errno is not set:
 * docs/compat.md).  The probe compares the same with glibc; this checks it
 * in this process, for the statically linked library. */
Test(glibc, posix_memalign_errno_as_glibc, .timeout = 30)
{
	static const size_t bad_align[] = { 0, 1, 4, 12, 24, 100, 4097 };
	void *p = &p;
	for (size_t i = 0; i < sizeof bad_align / sizeof *bad_align; i++) {
		errno = 4321;
		int rc = posix_memalign(&p, bad_align[i], 10);
		cr_assert_eq(rc, EINVAL, "posix_memalign(&p, %zu, 10) = %d", bad_align[i], rc);
		cr_assert_eq(errno, 4321, "posix_memalign(&p, %zu, 10) set errno to %d", bad_align[i],
			     errno);
		cr_assert_eq(p, (void *)&p, "posix_memalign wrote *out on failure");
	}
	static const size_t big[] = { SIZE_MAX, SIZE_MAX - 4096, (size_t)1 << 62, (size_t)1 << 47 };
	for (size_t i = 0; i < sizeof big / sizeof *big; i++) {
		errno = 4321;
		int rc = posix_memalign(&p, 64, big[i]);
		cr_assert_eq(rc, ENOMEM, "posix_memalign(&p, 64, %#zx) = %d", big[i], rc);
		cr_assert_eq(errno, ENOMEM, "posix_memalign(&p, 64, %#zx): errno %d", big[i], errno);
		cr_assert_eq(p, (void *)&p, "posix_memalign wrote *out on failure");
	}
	errno = 4321;
	cr_assert_eq(posix_memalign(&p, 4096, 100), 0);
	cr_assert_eq(errno, 4321);
	cr_assert(is_aligned(p, 4096));
	free(p);
}

/* malloc_stats in a thread with a cancellation request pending (glibc's
 * tst-malloc-stats-cancellation): it is not a cancellation point, so it
 * prints everything (glibc's summary lines included: "max mmap bytes"),
 * the thread is cancelled at its next cancellation point instead, and a
 * later malloc_stats does not find its lock still held. */
static pthread_barrier_t gate;
static void *stats_then_cancel(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&gate);
	malloc_stats();
	for (;;)
		pthread_testcancel();
	return NULL;
}

static int stats_cancel_child(void *arg)
{
	(void)arg;
	alarm(20);
	pthread_t t;
	pthread_barrier_init(&gate, NULL, 2);
	if (pthread_create(&t, NULL, stats_then_cancel, NULL) != 0)
		return 2;
	pthread_cancel(t);
	pthread_barrier_wait(&gate);
	void *rv;
	pthread_join(t, &rv);
	if (rv != PTHREAD_CANCELED)
		return 3;
	fprintf(stderr, "---\n");
	malloc_stats(); /* deadlocks if the cancelled thread kept the lock */
	printf("child ok\n");
	return 0;
}

Test(glibc, malloc_stats_is_not_a_cancellation_point, .timeout = 60)
{
	run_result r;
	cr_assert_eq(run_fn(stats_cancel_child, NULL, 30, &r), 0);
	cr_assert(run_exited0(&r), "%s; stderr: %s", r.desc, r.err);
	const char *second = strstr(r.err, "---\n");
	cr_assert_not_null(second, "stderr: %s", r.err);
	cr_assert(strstr(r.err, "max mmap bytes") && strstr(r.err, "max mmap bytes") < second,
		  "the cancelled thread's malloc_stats was cut short: %s", r.err);
	cr_assert_not_null(strstr(second, "libarena"), "second malloc_stats: %s", second);
	run_result_free(&r);
}

/* The slab test of free's fast path (a multiply and a compare) is exact
 * for every offset of a slab of every class: block starts pass, interior
 * offsets and the tail past the last block do not. */
bool sizeclass_verify(void);
Test(glibc, free_fast_path_block_test_is_exact, .timeout = 30)
{
	cr_assert(sizeclass_verify());
}

static size_t in_use(void)
{
	struct mallinfo2 m = mallinfo2();
	return m.uordblks + m.hblkhd;
}

/* mallinfo2 is libarena's: in use grows by what was allocated (small,
 * large and huge blocks) and falls back when it is freed; hblks/hblkhd
 * count huge blocks; the heap is at least what is in use in it.  glibc's
 * own mallinfo2 here (libarena linked in) would report its untouched heap:
 * uordblks 0. */
Test(glibc, mallinfo2_reports_libarenas_figures, .timeout = 60)
{
	static const size_t sizes[] = { 24, 700, 9000, 200000, 5 << 20 };
	for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
		size_t size = sizes[k], n = 10 * MiB / size + 1;
		void **b = calloc(n, sizeof *b);
		struct mallinfo2 m0 = mallinfo2();
		size_t before = in_use();
		for (size_t i = 0; i < n; i++) {
			b[i] = malloc(size);
			cr_assert_not_null(b[i]);
			memset(b[i], 1, size < 256 ? size : 256);
		}
		struct mallinfo2 m1 = mallinfo2();
		size_t after = m1.uordblks + m1.hblkhd;
		cr_assert_geq(after, before + n * size, "%zu x %zu B: in use %zu -> %zu", n, size,
			      before, after);
		cr_assert_geq(m1.arena, m1.uordblks, "arena %zu < uordblks %zu", m1.arena, m1.uordblks);
		cr_assert_eq(m1.fordblks, m1.arena - m1.uordblks);
		if (size > (1 << 20)) {
			cr_assert_geq(m1.hblks, m0.hblks + n, "hblks %zu -> %zu", m0.hblks, m1.hblks);
			cr_assert_geq(m1.hblkhd, m0.hblkhd + n * size);
		}
		for (size_t i = 0; i < n; i++)
			free(b[i]);
		free(b);
		cr_assert_lt(in_use(), before + MiB, "%zu x %zu B freed: in use %zu, was %zu", n, size,
			     in_use(), before);
	}
	cr_assert_eq(mallinfo2().usmblks, 0);
}

/* The old int-field mallinfo carries the same figures. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
Test(glibc, mallinfo_matches_mallinfo2, .timeout = 30)
{
	void *p = malloc(3 * MiB), *q = malloc(5000);
	escape(p);
	escape(q);
	struct mallinfo m = mallinfo();
	struct mallinfo2 m2 = mallinfo2();
	cr_assert_eq((size_t)m.hblkhd, m2.hblkhd);
	cr_assert_eq(m.hblks, (int)m2.hblks);
	cr_assert_geq(m.uordblks, 5000);
	cr_assert_eq((size_t)m.arena, m2.arena);
	free(p);
	free(q);
}

/* malloc_info writes glibc's XML with libarena's arenas: one <heap> per
 * arena in use with the free slots of its slabs by size class, and the
 * huge blocks as the mmap total.  Options other than 0: EINVAL. */
Test(glibc, malloc_info_shape_and_figures, .timeout = 30)
{
	void *huge[3];
	for (int i = 0; i < 3; i++)
		escape(huge[i] = malloc(4 * MiB));
	void *small[100];
	for (int i = 0; i < 100; i++)
		escape(small[i] = malloc(48));
	for (int i = 0; i < 100; i += 2)
		free(small[i]);
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	cr_assert_eq(malloc_info(0, f), 0);
	fclose(f);
	cr_assert(!strncmp(text, "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n", 42), "%s", text);
	cr_assert(len > 10 && !strcmp(text + len - 10, "</malloc>\n"), "%s", text);
	const char *mm = strstr(text, "<total type=\"mmap\" count=\"");
	cr_assert_not_null(mm, "%s", text);
	long count = strtol(mm + strlen("<total type=\"mmap\" count=\""), NULL, 10);
	cr_assert_geq(count, 3, "%s", mm);
	cr_assert_not_null(strstr(text, "<size from=\"33\" to=\"48\" total=\""), "%s", text);
	int opens = 0, closes = 0;
	for (const char *s = text; (s = strstr(s, "<heap nr=")); s++)
		opens++;
	for (const char *s = text; (s = strstr(s, "</heap>")); s++)
		closes++;
	cr_assert(opens >= 1 && opens == closes, "%d <heap>, %d </heap>", opens, closes);
	free(text);
	f = open_memstream(&text, &len);
	cr_assert_eq(malloc_info(1, f), EINVAL);
	fclose(f);
	cr_assert_eq(len, 0);
	free(text);
	for (int i = 1; i < 100; i += 2)
		free(small[i]);
	for (int i = 0; i < 3; i++)
		free(huge[i]);
}

Test(glibc, malloc_usable_size_of_null_is_zero)
{
	errno = 4321;
	cr_assert_eq(malloc_usable_size(NULL), 0);
	cr_assert_eq(errno, 4321);
}
