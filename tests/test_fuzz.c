/*
 * The libFuzzer target tests/fuzz/fuzz_alloc.c (built by `make tests-build`
 * into build-fuzz/) run for a bounded time: 20 s from the seed corpus
 * tests/fuzz/corpus, and 10 s more each with ARENA_CONF=debug:true, secure:true and guard_large:true. New inputs go to a temporary directory (the committed
 * corpus is only read); a crash is written to build-fuzz/artifacts/. `make fuzz`
 * runs it for as long as asked.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "common.h"

#define FUZZ_CORPUS TESTS_DIR "/fuzz/corpus"
#define FUZZ_SECONDS "20"

static char tmp[64];

static void tmp_remove(void)
{
	if (tmp[0])
		remove_tree(tmp);
	tmp[0] = '\0';
}

/* The number after "key" in libFuzzer's output (its final statistics), or -1. */
static long long stat_of(const char *out, const char *key)
{
	const char *s = strstr(out, key);
	return s ? strtoll(s + strlen(key), NULL, 10) : -1;
}

/* Runs the target for `seconds` from the seed corpus with env added to the
 * environment (NULL: none) and requires a clean exit. */
static void run_fuzz(const char *seconds, const char *const env[])
{
	cr_assert_eq(access(FUZZ_BIN, X_OK), 0, "%s is missing (`make tests-build` builds it)",
		     FUZZ_BIN);
	cr_assert_eq(make_tmpdir(tmp), 0, "mkdtemp failed");
	cr_assert_eq(mkdir(FUZZ_BUILD "/artifacts", 0755) == 0 || errno == EEXIST, 1,
		     "cannot make %s/artifacts", FUZZ_BUILD);
	char max_time[64];
	snprintf(max_time, sizeof max_time, "-max_total_time=%s", seconds);
	const char *argv[] = { FUZZ_BIN, max_time, "-max_len=4096",
			       "-rss_limit_mb=2048", "-timeout=30", "-print_final_stats=1",
			       "-artifact_prefix=" FUZZ_BUILD "/artifacts/", tmp, FUZZ_CORPUS,
			       NULL };
	run_result r;
	cr_assert_eq(run_prog(argv, env, NULL, 90, &r), 0, "cannot run %s", FUZZ_BIN);
	long long runs = stat_of(r.err, "stat::number_of_executed_units:");
	long long rate = stat_of(r.err, "stat::average_exec_per_sec:");
	long long rss = stat_of(r.err, "stat::peak_rss_mb:");
	long long units = stat_of(r.err, "stat::new_units_added:");
	fprintf(stderr, "fuzz_alloc%s: %lld executions in %s s (%lld/s), %lld new inputs, "
		"peak RSS %lld MB\n", env ? env[0] + strlen("ARENA_CONF=") : "", runs, seconds, rate,
		units, rss);
	/* On a failure: the model's complaint (or libarena's report) and
	 * libFuzzer's summary, with the artifact's name (the input that
	 * reproduces it: FUZZ_ALLOC_TRACE=1 FUZZ_BIN artifact prints every
	 * operation). */
	const char *why = strstr(r.err, "fuzz_alloc: operation");
	if (!why)
		why = strstr(r.err, "libarena: ");
	if (!why)
		why = strstr(r.err, "==ERROR");
	if (!why)
		why = r.err_len > 3000 ? r.err + r.err_len - 3000 : r.err;
	cr_assert(run_exited0(&r), "%s: %s\n%.3000s", FUZZ_BIN, r.desc, why);
	cr_assert_gt(runs, 0, "no executions counted:\n%s", why);
	cr_assert(!strstr(r.err, "libarena: "), "libarena reported a misuse:\n%.3000s", why);
	run_result_free(&r);
}

Test(fuzz, fuzz_alloc_20s, .timeout = 120, .fini = tmp_remove)
{
	run_fuzz(FUZZ_SECONDS, NULL);
}

/* Debug mode under the same operations: its checks (canaries, junk, writes
 * after free) must report nothing on a correct program, and blocks as
 * small as asked must still hold their contents. */
Test(fuzz, fuzz_alloc_debug_10s, .timeout = 120, .fini = tmp_remove)
{
	const char *const env[] = { "ARENA_CONF=debug:true", NULL };
	run_fuzz("10", env);
}

/* Secure mode under the same operations: its checked lists, quarantine and
 * zeroing report nothing on a correct program, and blocks keep their
 * contents while live. */
Test(fuzz, fuzz_alloc_secure_10s, .timeout = 120, .fini = tmp_remove)
{
	const char *const env[] = { "ARENA_CONF=secure:true", NULL };
	run_fuzz("10", env);
}

/* Guards after large blocks under the same operations: every write the
 * fuzzer makes inside a block, resized in place or freed and taken again,
 * misses them (a guard left behind or misplaced faults). */
Test(fuzz, fuzz_alloc_guard_large_10s, .timeout = 120, .fini = tmp_remove)
{
	const char *const env[] = { "ARENA_CONF=guard_large:true", NULL };
	run_fuzz("10", env);
}
