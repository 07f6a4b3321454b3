/*
 * Misuse detection: free of a foreign pointer (stack, static, mmap'd, glibc's
 * heap and mmap'd blocks, a free page of an arena chunk), of an interior pointer
 * (small, large, huge), double free (small, large, huge), realloc of a freed,
 * interior or stack pointer, free_sized / free_aligned_sized with a size
 * larger than the block, malloc_usable_size of an interior, freed or stack
 * pointer, free_sized with a size the block was not allocated with,
 * free_aligned_sized with an alignment the block does not have: each prints
 * one "libarena: ..." line naming the address and the kind of error
 * (misuse_keyword) and aborts.
 *
 * In this process (libarena linked in, default configuration) each case runs
 * in a forked child whose stderr goes to a pipe.  The configured behaviours
 * (ARENA_CONF=misuse:abort|warn|ignore) are read at start-up, so they are
 * checked with progs/misuse run under LD_PRELOAD.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "arena.h"
#include "common.h"
#include "misuse_cases.h"

#define MISUSE_PROG PROGS_DIR "/misuse"

/* The address the child announced ("addr=0x..."), copied into addr. */
static int child_addr(const run_result *r, char *addr, size_t n)
{
	const char *a = strstr(r->out, "addr=");
	if (!a)
		return -1;
	a += 5;
	size_t len = strcspn(a, "\n");
	if (len == 0 || len >= n)
		return -1;
	memcpy(addr, a, len);
	addr[len] = '\0';
	return 0;
}

/* Whether s contains one of the '|'-separated words of words (any case). */
static int contains_one_of(const char *s, const char *words)
{
	char w[64];
	while (*words) {
		size_t len = strcspn(words, "|");
		if (len < sizeof w) {
			memcpy(w, words, len);
			w[len] = '\0';
			if (contains_ci(s, w))
				return 1;
		}
		words += len;
		if (*words == '|')
			words++;
	}
	return 0;
}

/*
 * Checks the one line the allocator must print for case name: starts with
 * "libarena: ", names the kind of error (misuse_keyword: "free" for the
 * free family, any case) and the address.  Returns NULL when fine, else a
 * description of what is wrong (static buffer).
 */
static const char *bad_message(const run_result *r, const char *name, const char *addr)
{
	static char why[256];
	if (r->err_len == 0)
		return "nothing printed on stderr";
	if (count_lines(r->err, r->err_len) != 1) {
		snprintf(why, sizeof why, "%zu lines on stderr, expected one",
			 count_lines(r->err, r->err_len));
		return why;
	}
	if (strncmp(r->err, "libarena: ", 10) != 0)
		return "the line does not start with \"libarena: \"";
	if (!contains_one_of(r->err, misuse_keyword(name))) {
		snprintf(why, sizeof why, "the line does not say \"%s\"", misuse_keyword(name));
		return why;
	}
	if (!contains(r->err, addr)) {
		snprintf(why, sizeof why, "the line does not contain the address %s", addr);
		return why;
	}
	return NULL;
}

/* ---- in this process, default configuration: abort --------------------------------------------- */

static int misuse_child(void *arg)
{
	return misuse_run((const char *)arg);
}

static void expect_abort_here(const char *name)
{
	run_result r;
	char addr[64];
	cr_assert_eq(run_fn(misuse_child, (void *)name, 20, &r), 0);
	cr_assert_eq(child_addr(&r, addr, sizeof addr), 0, "%s: child printed no address (%s); stdout: %s",
		     name, r.desc, r.out);
	cr_assert(run_signaled(&r, SIGABRT), "%s: child %s, expected SIGABRT; stdout: %s stderr: %s",
		  name, r.desc, r.out, r.err);
	const char *why = bad_message(&r, name, addr);
	cr_assert_null(why, "%s: %s; stderr: \"%s\"", name, why, r.err);
	cr_assert_not(contains(r.out, "survived"));
	run_result_free(&r);
}

#define ABORT_TEST(c) \
	Test(misuse_abort, c, .timeout = 30) { expect_abort_here(#c); }

ABORT_TEST(stack)
ABORT_TEST(static)
ABORT_TEST(mmap)
ABORT_TEST(mmap_2m)
ABORT_TEST(interior_small)
ABORT_TEST(interior_small_8)
ABORT_TEST(interior_large)
ABORT_TEST(interior_large_16)
ABORT_TEST(interior_huge)
ABORT_TEST(interior_huge_chunk)
ABORT_TEST(double_small)
ABORT_TEST(double_small_flushed)
ABORT_TEST(double_large)
ABORT_TEST(double_huge)
ABORT_TEST(glibc_small)
ABORT_TEST(glibc_mmap)
ABORT_TEST(chunk_free_page)
ABORT_TEST(realloc_freed_small)
ABORT_TEST(realloc_freed_small_flushed)
ABORT_TEST(realloc_freed_large)
ABORT_TEST(realloc_freed_huge)
ABORT_TEST(realloc_interior_small)
ABORT_TEST(realloc_interior_large)
ABORT_TEST(realloc_interior_huge)
ABORT_TEST(realloc_stack)
ABORT_TEST(free_sized_larger_small)
ABORT_TEST(free_sized_larger_large)
ABORT_TEST(free_sized_larger_huge)
ABORT_TEST(free_aligned_sized_larger)
ABORT_TEST(usable_stack)
ABORT_TEST(usable_interior_small)
ABORT_TEST(usable_interior_huge)
ABORT_TEST(usable_freed_large)
ABORT_TEST(usable_freed_huge)
ABORT_TEST(realloc_freed_small_same)
ABORT_TEST(realloc_freed_small_flushed_same)
ABORT_TEST(free_sized_smaller_small)
ABORT_TEST(free_sized_smaller_large)
ABORT_TEST(free_sized_smaller_huge)
ABORT_TEST(free_aligned_sized_alignment)
ABORT_TEST(usable_freed_small)
ABORT_TEST(slab_tail)
ABORT_TEST(double_small_other_thread)
ABORT_TEST(double_small_other_thread_flushed)
ABORT_TEST(double_small_swapped)

/* Every case of misuse_names has its ABORT_TEST (a case added to the list
 * but not here would only run under LD_PRELOAD). */
Test(misuse_abort, every_case_has_a_test)
{
	cr_assert_eq(MISUSE_COUNT, 45, "misuse_names has %d cases: add ABORT_TESTs", MISUSE_COUNT);
}

/* No false alarm: correct use prints nothing and survives. */
Test(misuse_abort, correct_use_is_silent, .timeout = 30)
{
	run_result r;
	cr_assert_eq(run_fn(misuse_child, (void *)"none", 20, &r), 0);
	cr_assert(run_exited0(&r), "child %s; stderr: %s", r.desc, r.err);
	cr_assert_eq(r.err_len, 0, "stderr: %s", r.err);
	cr_assert(contains(r.out, "survived"));
	run_result_free(&r);
}

/* Criterion's own view: a double free kills the test with SIGABRT. */
Test(misuse_abort, double_free_raises_sigabrt, .signal = SIGABRT, .timeout = 30)
{
	child_no_core();
	/* keep the message out of the report */
	int fd = open("/dev/null", O_WRONLY);
	dup2(fd, 2);
	void *p = malloc(24);
	free(opaque_ptr(p));
	free(p);
}

/* ---- under LD_PRELOAD, with ARENA_CONF ---------------------------------------------------------------- */

static void run_misuse_prog(const char *conf, const char *name, run_result *r)
{
	const char *argv[] = { MISUSE_PROG, name, NULL };
	char conf_var[128];
	const char *env[3] = { "LD_PRELOAD=" ARENA_SO, NULL, NULL };
	if (conf) {
		snprintf(conf_var, sizeof conf_var, "ARENA_CONF=%s", conf);
		env[1] = conf_var;
	}
	cr_assert_eq(run_prog(argv, env, NULL, 30, r), 0, "cannot run %s", MISUSE_PROG);
}

/* Runs every case; collects the failures so that one run reports them all. */
typedef const char *(*judge_fn)(const run_result *r, const char *name, const char *addr);

static void every_case(const char *conf, judge_fn judge)
{
	char report[8192] = "";
	int failures = 0;
	for (int i = 0; i < MISUSE_COUNT; i++) {
		run_result r;
		char addr[64] = "?";
		run_misuse_prog(conf, misuse_names[i], &r);
		const char *why;
		if (child_addr(&r, addr, sizeof addr) != 0)
			why = "no address announced (did the program run?)";
		else
			why = judge(&r, misuse_names[i], addr);
		if (why) {
			failures++;
			size_t used = strlen(report);
			snprintf(report + used, sizeof report - used,
				 "\n  %s: %s [%s; stdout: %.100s; stderr: %.200s]", misuse_names[i], why,
				 r.desc, r.out, r.err);
		}
		run_result_free(&r);
	}
	cr_assert_eq(failures, 0, "ARENA_CONF=%s: %d of %d cases wrong:%s", conf ? conf : "(unset)",
		     failures, MISUSE_COUNT, report);
}

static const char *judge_abort(const run_result *r, const char *name, const char *addr)
{
	if (!run_signaled(r, SIGABRT))
		return "expected death by SIGABRT";
	return bad_message(r, name, addr);
}

static const char *judge_warn(const run_result *r, const char *name, const char *addr)
{
	if (contains(r->out, "FAIL:"))
		return "the heap was damaged after the warning";
	if (!run_exited0(r))
		return "expected exit 0 after the warning";
	if (!contains(r->out, "survived"))
		return "did not get to the end";
	return bad_message(r, name, addr);
}

static const char *judge_ignore(const run_result *r, const char *name, const char *addr)
{
	(void)name;
	(void)addr;
	if (contains(r->out, "FAIL:"))
		return "the heap was damaged after the ignored misuse";
	if (!run_exited0(r))
		return "expected exit 0";
	if (r->err_len != 0)
		return "expected nothing on stderr";
	if (!contains(r->out, "survived"))
		return "did not get to the end";
	return NULL;
}

Test(misuse_conf, preload_default_aborts, .timeout = 120)
{
	every_case(NULL, judge_abort);
}

Test(misuse_conf, misuse_abort_aborts, .timeout = 120)
{
	every_case("misuse:abort", judge_abort);
}

Test(misuse_conf, misuse_warn_prints_and_goes_on, .timeout = 120)
{
	every_case("misuse:warn", judge_warn);
}

Test(misuse_conf, misuse_ignore_is_silent, .timeout = 120)
{
	every_case("misuse:ignore", judge_ignore);
}

Test(misuse_conf, misuse_with_other_keys, .timeout = 60)
{
	every_case("tcache:false,misuse:warn,narenas:2", judge_warn);
}

/* Debug mode keeps every report (worded "op: what") ... */
Test(misuse_conf, debug_mode_aborts_every_case, .timeout = 120)
{
	every_case("debug:true", judge_abort);
}

/* Runs misuse case `name` under conf and checks its report: the address
 * announced, death by SIGABRT (or, with warn, exit 0), one line with the
 * case's keyword and the address, and must_say in it unless NULL.  A wrong
 * outcome is appended to report (size bytes); returns 1 for one, else 0. */
static int debug_case(const char *conf, const char *name, bool warn, const char *must_say,
		      char *report, size_t size)
{
	run_result r;
	char addr[64] = "?";
	run_misuse_prog(conf, name, &r);
	const char *why = child_addr(&r, addr, sizeof addr) != 0   ? "no address announced"
			: warn && !run_exited0(&r)                 ? "misuse:warn: expected exit 0"
			: !warn && !run_signaled(&r, SIGABRT)      ? "expected death by SIGABRT"
			: must_say && !contains(r.err, must_say)   ? "the message lacks its kind of error"
								   : bad_message(&r, name, addr);
	if (why) {
		size_t used = strlen(report);
		snprintf(report + used, size - used, "\n  %s (%s): %s [%s; stderr: %.200s]", name, conf, why,
			 r.desc, r.err);
	}
	run_result_free(&r);
	return why != NULL;
}

/* ... and adds heap overflows, reported at the block's free, realloc or
 * malloc_usable_size with the block's address.  Without debug mode they
 * go unseen: that run must survive (the overflow lands in the block's
 * slack or in the next block, which the check does not look at). */
Test(misuse_conf, debug_mode_reports_heap_overflows, .timeout = 60)
{
	char report[4096] = "";
	int failures = 0;
	for (int i = 0; i < OVERFLOW_COUNT; i++)
		failures += debug_case("debug:true", overflow_names[i], false, "heap overflow", report,
				       sizeof report);
	cr_assert_eq(failures, 0, "debug:true: %d of %d overflows wrong:%s", failures, OVERFLOW_COUNT,
		     report);
}

/* ... and writes into a freed block, reported when the block is handed out
 * again, with its address; under misuse:warn the program goes on with the
 * heap sound.  Without debug mode they go unseen. */
Test(misuse_conf, debug_mode_reports_writes_after_free, .timeout = 60)
{
	char report[4096] = "";
	int failures = 0;
	for (int i = 0; i < UAF_COUNT; i++) {
		failures += debug_case("debug:true", uaf_names[i], false, NULL, report, sizeof report);
		failures += debug_case("debug:true,misuse:warn", uaf_names[i], true, NULL, report,
				       sizeof report);
		run_result r;
		run_misuse_prog(NULL, uaf_names[i], &r);
		cr_expect(run_exited0(&r) && r.err_len == 0, "%s without debug mode: %s; stderr: %s",
			  uaf_names[i], r.desc, r.err);
		run_result_free(&r);
	}
	cr_assert_eq(failures, 0, "debug:true: %d of %d writes after free wrong:%s", failures,
		     2 * UAF_COUNT, report);
}

/* Debug mode on correct programs: no report.  Caught: the write-after-free
 * check reading a cache link left inside a later, bigger block, and an arena
 * chunk's header at the start of a huge block (git, gcc and the soak were
 * all reported). */
Test(misuse_conf, debug_mode_is_silent_on_correct_programs, .timeout = 120)
{
	const char *const env[] = { "LD_PRELOAD=" ARENA_SO, "ARENA_CONF=debug:true", NULL };
	const char *const soak[] = { BENCH_BIN "/soak", "-d", "4", "-t", "4", "-L", "8m", "-H", "32m",
				     "-m", "8m", "-F", "1", NULL };
	const char *const py[] = { "/usr/bin/python3", "-c",
				   "import json\n"
				   "d = [{'k': i, 's': str(i) * (i % 50), 'l': [i] * (i % 30)} for i in range(60000)]\n"
				   "for _ in range(3):\n"
				   "    d = json.loads(json.dumps(d))\n"
				   "print(len(d))", NULL };
	const char *const *progs[] = { soak, py };
	for (int i = 0; i < 2; i++) {
		run_result r;
		cr_assert_eq(run_prog(progs[i], env, NULL, 100, &r), 0, "cannot run %s", progs[i][0]);
		cr_expect(run_exited0(&r) && !contains(r.err, "libarena"), "%s under debug:true: %s; stderr: %.600s",
			  progs[i][0], r.desc, r.err);
		run_result_free(&r);
	}
}

/* Correct use: silent and fine in every mode. */
Test(misuse_conf, correct_use_is_silent_in_every_mode, .timeout = 60)
{
	static const char *confs[] = { NULL, "misuse:abort", "misuse:warn", "misuse:ignore",
				       "debug:true" };
	for (int i = 0; i < 5; i++) {
		run_result r;
		run_misuse_prog(confs[i], "none", &r);
		cr_assert(run_exited0(&r), "ARENA_CONF=%s: %s; stderr: %s", confs[i] ? confs[i] : "",
			  r.desc, r.err);
		cr_assert_eq(r.err_len, 0, "ARENA_CONF=%s: stderr: %s", confs[i] ? confs[i] : "", r.err);
		cr_assert(contains(r.out, "survived"));
		run_result_free(&r);
	}
}

/* A misuse mode that does not exist: one warning, the default (abort) stays. */
Test(misuse_conf, bad_misuse_value_warns_and_keeps_abort, .timeout = 30)
{
	run_result r;
	char addr[64];
	run_misuse_prog("misuse:sometimes", "double_small", &r);
	cr_assert_eq(child_addr(&r, addr, sizeof addr), 0, "stdout: %s", r.out);
	cr_assert(run_signaled(&r, SIGABRT), "%s", r.desc);
	cr_assert_eq(count_lines(r.err, r.err_len), 2,
		     "expected the config warning and the double free line, got: %s", r.err);
	cr_assert(contains(r.err, "misuse"), "the warning does not name the key: %s", r.err);
	cr_assert(contains(r.err, addr));
	run_result_free(&r);
}
