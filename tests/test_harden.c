/*
 * Hardening against heap attacks, each attack made on purpose in a child
 * process (tests/progs/) and its outcome checked.
 */
#include <criterion/criterion.h>

#include <signal.h>

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

/* ---- guard pages after huge blocks ----------------------------------------------------- */

#define GUARDS_PROG PROGS_DIR "/guards"

static void run_guards(const char *conf, const char *const args[], run_result *r)
{
	const char *argv[] = { GUARDS_PROG, args[0], args[1], NULL };
	const char *env[] = { "LD_PRELOAD=" ARENA_SO, conf, NULL };
	cr_assert_eq(run_prog(argv, env, NULL, 60, r), 0, "cannot run %s", argv[0]);
	run_describe(r);
}

/* A write one byte past a huge block's usable end faults, whether the
 * block ends inside its last chunk or on a chunk boundary (4 MiB). */
Test(guards, write_past_a_huge_block_faults, .timeout = 60)
{
	static const char *sizes[] = { "3145728", "1500000", "5000000" };
	for (unsigned i = 0; i < 3; i++) {
		run_result r;
		run_guards("ARENA_CONF=", (const char *[]){ "write-past", sizes[i] }, &r);
		cr_assert(run_signaled(&r, SIGSEGV), "a write past a %s B block: %s\n%s%s", sizes[i],
			  r.desc, r.out, r.err);
		run_result_free(&r);
	}
}

/* malloc_trim's purge leaves the guards; realloc moves them to the new end. */
Test(guards, kept_by_purges_and_moved_by_realloc, .timeout = 60)
{
	run_result r;
	run_guards("ARENA_CONF=", (const char *[]){ "after-trim", NULL }, &r);
	cr_assert(run_signaled(&r, SIGSEGV), "after malloc_trim: %s\n%s%s", r.desc, r.out, r.err);
	run_result_free(&r);
	run_guards("ARENA_CONF=", (const char *[]){ "after-realloc", NULL }, &r);
	cr_assert(contains(r.out, "old end written"), "the old guard stayed inside the block:\n%s%s",
		  r.out, r.err);
	cr_assert(run_signaled(&r, SIGSEGV), "past the grown block: %s\n%s%s", r.desc, r.out, r.err);
	run_result_free(&r);
}

/* Guards are no mappings of their own: 64 huge blocks take as many
 * mappings with guards as without (their huge-page advice may split some). */
static int vmas_added(const char *conf, const char *mode)
{
	run_result r;
	run_guards(conf, (const char *[]){ mode, NULL }, &r);
	cr_assert(run_exited0(&r), "%s\n%s%s", r.desc, r.out, r.err);
	const char *at = strstr(r.out, "mappings=+");
	cr_assert(at, "%s", r.out);
	int n = atoi(at + strlen("mappings=+"));
	run_result_free(&r);
	return n;
}

Test(guards, no_new_mappings, .timeout = 60)
{
	/* the huge-page decision fixed: its advice splits mappings too */
	int guarded = vmas_added("ARENA_CONF=sim_thp_probe:cheap", "vmas");
	int bare = vmas_added("ARENA_CONF=sim_thp_probe:cheap,sim_no_guard:true", "vmas");
	cr_log_info("64 huge blocks: %d more mappings with guards, %d without", guarded, bare);
	cr_assert_eq(guarded, bare, "guards added mappings: %d against %d", guarded, bare);
}

/* Without MADV_GUARD_INSTALL (Linux before 6.13) blocks have no guard: the
 * write lands in the block's own last chunk, and the program goes on. */
Test(guards, fallback_without_the_kernels_guards, .timeout = 60)
{
	run_result r;
	run_guards("ARENA_CONF=sim_no_guard:true", (const char *[]){ "write-past", "3145728" }, &r);
	cr_assert(run_exited0(&r) && contains(r.out, "survived"), "%s\n%s%s", r.desc, r.out, r.err);
	run_result_free(&r);
}

/* ---- guard pages after large blocks -------------------------------------------------------- */

#define GL "ARENA_CONF=guard_large:true"

/* guard_large:true, blocks above 64 KiB in a chunk not advised huge: a write one byte past
 * the end faults; after malloc_trim too, and after a resize in place
 * (grown: the old end is the block's; shrunk: the new end is guarded). */
Test(guards, write_past_a_large_block_faults, .timeout = 60)
{
	static const char *sizes[] = { "65537", "100000", "1048576" };
	run_result r;
	for (unsigned i = 0; i < 3; i++) {
		run_guards(GL, (const char *[]){ "write-past", sizes[i] }, &r);
		cr_assert(run_signaled(&r, SIGSEGV), "past %s B: %s\n%s%s", sizes[i], r.desc, r.out,
			  r.err);
		run_result_free(&r);
	}
	/* the default has none: its cost (large.c) */
	run_guards("ARENA_CONF=", (const char *[]){ "write-past", "100000" }, &r);
	cr_assert(run_exited0(&r) && contains(r.out, "survived"), "%s\n%s%s", r.desc, r.out, r.err);
	run_result_free(&r);
	run_guards(GL, (const char *[]){ "large-trim", NULL }, &r);
	cr_assert(run_signaled(&r, SIGSEGV), "after malloc_trim: %s\n%s%s", r.desc, r.out, r.err);
	run_result_free(&r);
	run_guards(GL, (const char *[]){ "large-resize", NULL }, &r);
	cr_assert(contains(r.out, "old end written") && run_signaled(&r, SIGSEGV), "%s\n%s%s",
		  r.desc, r.out, r.err);
	run_result_free(&r);
}

/* A chunk turning dense (advised huge) loses its guards, which would keep
 * it from its huge page; under thp:never none turns dense and they stay. */
Test(guards, large_blocks_of_a_dense_chunk_have_none, .timeout = 60)
{
	run_result r;
	run_guards(GL ",sim_thp:madvise", (const char *[]){ "large-dense", NULL }, &r);
	cr_assert(run_exited0(&r) && contains(r.out, "survived"), "%s\n%s%s", r.desc, r.out, r.err);
	run_result_free(&r);
	run_guards(GL ",thp:never", (const char *[]){ "large-dense", NULL }, &r);
	cr_assert(run_signaled(&r, SIGSEGV), "thp:never: %s\n%s%s", r.desc, r.out, r.err);
	run_result_free(&r);
}

Test(guards, large_blocks_no_new_mappings, .timeout = 60)
{
	int guarded = vmas_added(GL ",thp:never", "vmas-large");
	int bare = vmas_added(GL ",thp:never,sim_no_guard:true", "vmas-large");
	cr_assert_eq(guarded, bare, "guards added mappings: %d against %d", guarded, bare);
}

/* A guard the kernel refused (a block taken after mlockall) leaves the
 * others as they were: the guard of a block freed after it goes with it
 * (its chunks are written whole again), and blocks after munlockall are
 * guarded.  Secure mode puts PROT_NONE where the kernel refused. */
Test(guards, a_refused_guard_leaves_the_others_exact, .timeout = 60)
{
	run_result r;
	run_guards("ARENA_CONF=", (const char *[]){ "refused", NULL }, &r);
	if (contains(r.out, "skip")) {
		cr_log_info("%s", r.out);
		run_result_free(&r);
		return;
	}
	cr_assert(contains(r.out, "reused whole") && contains(r.out, "past the refused guard") &&
		  run_signaled(&r, SIGSEGV), "%s\n%s%s", r.desc, r.out, r.err);
	run_result_free(&r);
	run_guards("ARENA_CONF=secure:true", (const char *[]){ "refused", NULL }, &r);
	cr_assert(contains(r.out, "reused whole") && !contains(r.out, "past the refused") &&
		  run_signaled(&r, SIGSEGV), "secure: %s\n%s%s", r.desc, r.out, r.err);
	run_result_free(&r);
}

/* ---- double frees, from any thread ------------------------------------------------------ */

#define ATTACKS_PROG PROGS_DIR "/attacks"

static void run_attack_conf(const char *attack, const char *conf, run_result *r)
{
	const char *argv[] = { ATTACKS_PROG, attack, NULL };
	const char *env[] = { "LD_PRELOAD=" ARENA_SO, conf, NULL };
	cr_assert_eq(run_prog(argv, env, NULL, 60, r), 0, "cannot run %s", argv[0]);
	run_describe(r);
}

static void run_attack(const char *attack, run_result *r)
{
	run_attack_conf(attack, NULL, r);
}

/* A block in one thread's cache freed again by another thread: the key in
 * the block says it is free, whichever cache holds it. */
Test(double_free, from_another_thread_is_reported, .timeout = 60)
{
	run_result r;
	run_attack("double-free-other-thread", &r);
	const char *at = strstr(r.out, "second free of ");
	cr_assert(at, "%s\n%s", r.out, r.err);
	char addr[32] = "";
	sscanf(at + strlen("second free of "), "%31s", addr);
	cr_assert(run_signaled(&r, SIGABRT), "accepted: %s\n%s%s", r.desc, r.out, r.err);
	cr_assert(contains(r.err, "double free") && contains(r.err, addr),
		  "no report naming %s:\n%s", addr, r.err);
	run_result_free(&r);
}

/* ---- free lists a write cannot steer ----------------------------------------------------- */

/* A forged link in a free block (the attack prints which) is reported
 * with that block's address when the block leaves its list, and aborts;
 * nothing hands out the fake address. */
static void expect_forged_link_caught(const char *attack)
{
	run_result r;
	run_attack(attack, &r);
	const char *at = strstr(r.out, "forged link in ");
	cr_assert(at, "%s\n%s", r.out, r.err);
	char addr[32] = "";
	sscanf(at + strlen("forged link in "), "%31s", addr);
	cr_assert(run_signaled(&r, SIGABRT) && contains(r.err, "free list corrupted") &&
			  contains(r.err, addr),
		  "%s: %s, no report naming %s\n%s%s", attack, r.desc, addr, r.out, r.err);
	cr_assert(!contains(r.out, "exploited"), "%s", r.out);
	run_result_free(&r);
}

/* One freed 48 B block's link overwritten, then mallocs until it is popped. */
Test(links, forged_after_free_is_reported, .timeout = 60)
{
	expect_forged_link_caught("forged-link-one");
}

/* A live block's linear overflow into the free block after it. */
Test(links, forged_by_overflow_is_reported, .timeout = 60)
{
	expect_forged_link_caught("forged-link-neighbour");
}

/* Blocks freed by another thread go home as a transfer batch: a link in
 * the chain, and the word linking the batches. */
Test(links, forged_on_a_transfer_batch_is_reported, .timeout = 60)
{
	expect_forged_link_caught("forged-link-remote");
	expect_forged_link_caught("forged-batch-link");
}

/* misuse:warn reports a forged link and goes on with the list cut short,
 * heap profiles on too: a split of the profiles' freed list (a sampling
 * point every ~20 blocks of 48 B) then meets the cut end before its count.
 * The split comes in about half the runs, hence eight. */
Test(links, warn_goes_on_past_a_cut_list, .timeout = 120)
{
	for (int i = 0; i < 8; i++) {
		run_result r;
		run_attack_conf("forged-link-one", "ARENA_CONF=misuse:warn,prof:true,prof_sample:1k", &r);
		cr_assert(run_exited0(&r) && contains(r.out, "survived") &&
				  contains(r.err, "free list corrupted"),
			  "run %d: %s\n%s%s", i, r.desc, r.out, r.err);
		run_result_free(&r);
	}
}

/* ---- metadata out of reach ------------------------------------------------------------------- */

/* 8 KiB written past the last block of a chunk land in the next chunk's
 * first block, the program's own data, not in a header (which sat there,
 * and a later free crashed without a word): every block frees and the heap
 * goes on. */
Test(chunk_overflow, reaches_blocks_not_metadata, .timeout = 60)
{
	run_result r;
	run_attack("chunk-overflow", &r);
	cr_assert(run_exited0(&r) && contains(r.out, "survived"), "%s\n%s%s", r.desc, r.out, r.err);
	cr_assert(contains(r.out, "hit=block"), "the overflow hit no block:\n%s", r.out);
	run_result_free(&r);
}

/* An overflow off a region's last chunk, toward a page mapped right after
 * the region (where the kernel may put libarena's tables when it refuses
 * the address asked for): the page kept after every region stops it.  The
 * region is made small (RLIMIT_AS: the program's size + 256 MiB) so that
 * 2 MiB blocks fill it. */
Test(chunk_overflow, stops_at_the_regions_end, .timeout = 60)
{
	run_result r;
	const char *vm_argv[] = { GUARDS_PROG, "vm", NULL };
	const char *vm_env[] = { "LD_PRELOAD=", NULL }; /* the program's own size */
	cr_assert_eq(run_prog(vm_argv, vm_env, NULL, 60, &r), 0, "cannot run %s", vm_argv[0]);
	run_describe(&r);
	const char *at = strstr(r.out, "vm_kb=");
	cr_assert(run_exited0(&r) && at, "%s\n%s", r.desc, r.out);
	size_t limit = ((size_t)atol(at + 6) << 10) + ((size_t)256 << 20);
	run_result_free(&r);
	const char *argv[] = { GUARDS_PROG, "region-end", NULL };
	const char *env[] = { "LD_PRELOAD=" ARENA_SO, NULL };
	cr_assert_eq(run_prog_limited(argv, env, NULL, 60, limit, &r), 0, "cannot run %s", argv[0]);
	run_describe(&r);
	cr_assert(contains(r.out, "victim") && run_signaled(&r, SIGSEGV), "%s\n%s%s", r.desc, r.out,
		  r.err);
	run_result_free(&r);
}

/* ---- placement ------------------------------------------------------------------------------ */

/* 16 consecutive malloc(48) in a fresh process: a refill hands its blocks
 * out in a random order, so most steps are not to the next block (all 15
 * were, in every run, before). */
Test(placement, consecutive_mallocs_are_not_neighbours, .timeout = 60)
{
	for (int run = 0; run < 5; run++) {
		run_result r;
		run_attack("placement", &r);
		cr_assert(run_exited0(&r), "%s\n%s%s", r.desc, r.out, r.err);
		const char *at = strstr(r.out, "adjacent=");
		cr_assert(at, "%s", r.out);
		int adjacent = atoi(at + strlen("adjacent="));
		cr_assert(adjacent <= 7, "%d of 15 steps to the next block", adjacent);
		run_result_free(&r);
	}
}

/* ---- secure mode (ARENA_CONF=secure:true) ------------------------------------------------ */

#define SECURE "ARENA_CONF=secure:true"

/* The attack is reported with libarena's message and aborts. */
static void expect_caught(const char *attack, const char *conf, const char *message)
{
	run_result r;
	run_attack_conf(attack, conf, &r);
	cr_assert(run_signaled(&r, SIGABRT) && contains(r.err, message),
		  "%s (%s): %s, not reported as \"%s\"\n%s%s", attack, conf, r.desc, message, r.out,
		  r.err);
	cr_assert(!contains(r.out, "exploited"), "%s", r.out);
	run_result_free(&r);
}

/* 512 forged links, after free and by overflows: caught by both. */
Test(secure, forged_link_after_free_is_reported, .timeout = 60)
{
	expect_caught("forged-link", SECURE, "free list corrupted");
	expect_caught("forged-link", "ARENA_CONF=", "free list corrupted");
}

Test(secure, forged_link_by_overflow_is_reported, .timeout = 60)
{
	expect_caught("forged-link-overflow", SECURE, "free list corrupted");
	expect_caught("forged-link-overflow", "ARENA_CONF=", "free list corrupted");
}

/* A block written after its free is caught when it leaves the quarantine. */
Test(secure, write_after_free_is_reported, .timeout = 60)
{
	expect_caught("write-after-free", SECURE, "write after free");
}

Test(secure, double_free_from_another_thread_is_reported, .timeout = 60)
{
	expect_caught("double-free-other-thread", SECURE, "double free");
}

/* A freed block reads zero but for its key: no data, no address, no
 * secret (the default shows an encoded link: no address either). */
Test(secure, read_after_free_sees_zeros, .timeout = 60)
{
	run_result r;
	run_attack_conf("read-freed", SECURE, &r);
	cr_assert(run_exited0(&r) && contains(r.out, "data=0 pointers=0 secrets=0"), "%s\n%s%s",
		  r.desc, r.out, r.err);
	run_result_free(&r);
	run_attack("read-freed", &r);
	cr_assert(run_exited0(&r) && contains(r.out, "pointers=0 secrets=0"), "%s\n%s%s", r.desc,
		  r.out, r.err);
	run_result_free(&r);
}

/* 4 KiB written past a 100 KiB block and past a 4 MiB one (a chunk
 * boundary, where the default has no guard) fault at a guard page; so
 * they do without the kernel's guards (PROT_NONE). */
Test(secure, write_past_large_and_huge_blocks_faults, .timeout = 60)
{
	static const char *confs[] = { SECURE, SECURE ",sim_no_guard:true" };
	static const char *attacks[] = { "write-past-large", "write-past-huge" };
	for (unsigned i = 0; i < 2; i++)
		for (unsigned j = 0; j < 2; j++) {
			run_result r;
			run_attack_conf(attacks[j], confs[i], &r);
			cr_assert(run_signaled(&r, SIGSEGV), "%s (%s): %s\n%s%s", attacks[j], confs[i],
				  r.desc, r.out, r.err);
			run_result_free(&r);
		}
}

/* Blocks whose last chunk is 3/4 covered or more (the default advises it
 * huge and puts no guard there) are guarded all the same in secure mode,
 * with the kernel's guards and without. */
Test(secure, write_past_a_block_with_a_huge_tail_faults, .timeout = 60)
{
	static const char *confs[] = { SECURE, SECURE ",sim_thp_probe:cheap",
				       SECURE ",sim_no_guard:true" };
	static const char *sizes[] = { "1945600", "3000000", "4000000" };
	for (unsigned i = 0; i < 3; i++)
		for (unsigned j = 0; j < 3; j++) {
			run_result r;
			run_guards(confs[i], (const char *[]){ "write-past", sizes[j] }, &r);
			cr_assert(run_signaled(&r, SIGSEGV), "%s B (%s): %s\n%s%s", sizes[j], confs[i],
				  r.desc, r.out, r.err);
			run_result_free(&r);
		}
}

/* The huge-block guards of the default's tests, without the kernel's
 * guards: PROT_NONE pages (mappings of their own). */
Test(secure, prot_none_guards_without_the_kernels, .timeout = 60)
{
	const char *conf = SECURE ",sim_no_guard:true";
	run_result r;
	run_guards(conf, (const char *[]){ "write-past", "3145728" }, &r);
	cr_assert(run_signaled(&r, SIGSEGV), "%s\n%s%s", r.desc, r.out, r.err);
	run_result_free(&r);
	run_guards(conf, (const char *[]){ "after-trim", NULL }, &r);
	cr_assert(run_signaled(&r, SIGSEGV), "after malloc_trim: %s\n%s%s", r.desc, r.out, r.err);
	run_result_free(&r);
	run_guards(conf, (const char *[]){ "after-realloc", NULL }, &r);
	cr_assert(contains(r.out, "old end written") && run_signaled(&r, SIGSEGV), "%s\n%s%s",
		  r.desc, r.out, r.err);
	run_result_free(&r);
	/* the huge-page decision fixed: its advice splits mappings too */
	cr_assert_gt(vmas_added(SECURE ",sim_no_guard:true,sim_thp_probe:cheap", "vmas"),
		     vmas_added(SECURE ",sim_thp_probe:cheap", "vmas"), "PROT_NONE guards are mappings");
}

/* A fork while another thread sets secure mode's secrets: the child sets
 * them anew and has its lists (a freed block waits in its quarantine). */
Test(secure, fork_while_the_secrets_are_set, .timeout = 60)
{
	const char *argv[] = { PROGS_DIR "/secure_fork", NULL };
	const char *env[] = { "LD_PRELOAD=" ARENA_SO, SECURE, NULL };
	run_result r;
	cr_assert_eq(run_prog(argv, env, NULL, 60, &r), 0, "cannot run %s", argv[0]);
	run_describe(&r);
	cr_assert(run_exited0(&r) && contains(r.out, "child: quarantined"), "%s\n%s%s", r.desc,
		  r.out, r.err);
	run_result_free(&r);
}

/* Secure mode keeps no secret of glibc's either, and blocks stay apart. */
Test(secure, secrets_and_placement, .timeout = 60)
{
	unsigned long long a = run_secrets(SECURE), b = run_secrets(SECURE);
	cr_assert_neq(a, b, "two processes share the key %llx", a);
	run_result r;
	run_attack_conf("placement", SECURE, &r);
	const char *at = strstr(r.out, "adjacent=");
	cr_assert(run_exited0(&r) && at && atoi(at + strlen("adjacent=")) <= 7, "%s\n%s", r.desc,
		  r.out);
	run_result_free(&r);
}
