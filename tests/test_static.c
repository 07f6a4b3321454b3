/*
 * A program linked with libarena.a (progs/static_link.c, no LD_PRELOAD):
 * its malloc, libc's internal allocations and the arena_ names are one
 * allocator, and arena_stats_get counts what it did.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "arena.h"
#include "common.h"

#define STATIC_PROG PROGS_DIR "/static_link"

/* The number printed as "key=N" on its own line; -1 if missing. */
static long long get_num(const char *out, const char *key)
{
	char pat[64];
	snprintf(pat, sizeof pat, "%s=", key);
	for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (strncmp(l, pat, strlen(pat)) == 0)
			return strtoll(l + strlen(pat), NULL, 10);
	return -1;
}

/* Runs the program with ARENA_CONF=conf (NULL: unset).  Before it in the
 * environment: names that only look like it, and 3000 bytes of padding, so
 * that reading /proc/self/environ (the program's first malloc runs before
 * libc has set environ) crosses read boundaries and must match the name
 * exactly. */
static void run_static(const char *conf, run_result *r)
{
	const char *argv[] = { STATIC_PROG, NULL };
	static char pad[3100];
	char var[128];
	snprintf(pad, sizeof pad, "LIBARENA_TEST_PAD=%03000d", 0);
	const char *env[] = { pad, "ARENA_CONFX=stats_print:true", "XARENA_CONF=stats_print:true",
			      NULL, NULL };
	if (conf) {
		snprintf(var, sizeof var, "ARENA_CONF=%s", conf);
		env[3] = var;
	}
	cr_assert_eq(run_prog(argv, env, NULL, 30, r), 0, "cannot run %s", STATIC_PROG);
	cr_assert(run_exited0(r), "%s: %s; stdout: %s; stderr: %s", STATIC_PROG, r->desc, r->out,
		  r->err);
	cr_assert(contains(r->out, "\ndone\n"), "output: %s", r->out);
}

Test(static_link, counts_and_one_allocator, .timeout = 30)
{
	run_result r;
	run_static(NULL, &r);
	const char *o = r.out;
	cr_assert_eq(r.err_len, 0, "stderr: %s", r.err);
	cr_assert_geq(get_num(o, "nmalloc_small"), 1000, "1000 mallocs of 5000 bytes:\n%s", o);
	cr_assert_geq(get_num(o, "nmalloc_large"), 10, "10 mallocs of 100000 bytes:\n%s", o);
	cr_assert_eq(get_num(o, "nmalloc_huge"), 3, "3 arena_mallocs of 3 MiB:\n%s", o);
	cr_assert_eq(get_num(o, "nfree_huge"), 3, "3 frees of 3 MiB blocks:\n%s", o);
	cr_assert_geq(get_num(o, "nmalloc_total"), 1013, "%s", o);
	cr_assert_geq(get_num(o, "allocated_delta"), 1000LL * 5000 + 10 * 100000 + 3LL * (3 << 20),
		      "%s", o);
	cr_assert(contains(o, "same_allocator=yes\n"), "malloc and arena_malloc disagree:\n%s", o);
	/* libc's strdup went through libarena: 2 bytes are a 16-byte block
	 * (glibc would say 24). */
	cr_assert_eq(get_num(o, "strdup_usable"), 16, "%s", o);
	cr_assert_eq(get_num(o, "usable_5000"), 5120, "%s", o);
	run_result_free(&r);
}

Test(static_link, reads_arena_conf, .timeout = 30)
{
	run_result r;
	run_static("stats_print:true", &r);
	cr_assert_gt(r.err_len, 0, "stats_print:true printed nothing");
	cr_assert(contains(r.err, "libarena"), "stats output: %s", r.err);
	run_result_free(&r);

	run_static("stats_print:false", &r);
	cr_assert_eq(r.err_len, 0, "stats_print:false printed: %s", r.err);
	run_result_free(&r);

	run_static("bogus_key:1", &r);
	cr_assert_eq(count_lines(r.err, r.err_len), 1, "expected one warning line: %s", r.err);
	cr_assert(contains(r.err, "libarena") && contains(r.err, "bogus_key"), "warning: %s", r.err);
	run_result_free(&r);
}

/* The same program with the allocator's cache off and one arena. */
Test(static_link, runs_with_other_settings, .timeout = 30)
{
	run_result r;
	run_static("tcache:false,narenas:1", &r);
	cr_assert_eq(r.err_len, 0, "stderr: %s", r.err);
	cr_assert(contains(r.out, "same_allocator=yes\n"), "%s", r.out);
	cr_assert_eq(get_num(r.out, "nmalloc_huge"), 3, "%s", r.out);
	run_result_free(&r);
}
