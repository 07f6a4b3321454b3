/*
 * Hardening against heap attacks, each attack made on purpose in a child
 * process (tests/progs/) and its outcome checked.
 */
#include <criterion/criterion.h>

#include "run.h"

#define SECRETS_PROG PROGS_DIR "/secrets"

/* Runs the secrets program with ARENA_CONF=conf; returns its key. */
static unsigned long long run_secrets(const char *conf)
{
	const char *argv[] = { SECRETS_PROG, NULL };
	const char *env[] = { "LD_PRELOAD=" ARENA_SO, conf, NULL };
	run_result r;
	cr_assert_eq(run_prog(argv, env, NULL, 60, &r), 0, "cannot run %s", argv[0]);
	run_describe(&r);
	cr_assert(run_exited0(&r), "%s (%s): %s\n%s%s", argv[0], conf, r.desc, r.out, r.err);
	const char *at = strstr(r.out, "key=");
	cr_assert(at, "no key printed:\n%s", r.out);
	unsigned long long key = strtoull(at + 4, NULL, 16);
	run_result_free(&r);
	return key;
}

/* A freed block holds the caches' key: it is neither glibc's pointer guard
 * nor its canary nor AT_RANDOM's bytes, and each process has its own. */
Test(secrets, freed_blocks_hold_no_secret_of_glibc, .timeout = 60)
{
	unsigned long long a = run_secrets("ARENA_CONF=");
	unsigned long long b = run_secrets("ARENA_CONF=");
	cr_assert_neq(a, b, "two processes share the key %llx", a);
}

/* Without getrandom the key is a keyed hash of AT_RANDOM: the same
 * checks hold, and the key still differs between processes. */
Test(secrets, without_getrandom, .timeout = 60)
{
	unsigned long long a = run_secrets("ARENA_CONF=sim_no_getrandom:true");
	unsigned long long b = run_secrets("ARENA_CONF=sim_no_getrandom:true");
	cr_assert_neq(a, b, "two processes share the key %llx", a);
}
