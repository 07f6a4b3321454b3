/*
 * Out of memory.
 *
 * oom_limit: progs/oom under LD_PRELOAD with its address space limited
 * (RLIMIT_AS = the size of the program itself + 256 MiB, set between fork and
 * exec, so that it is in force when libarena reserves its region: the 64 GiB
 * reservation is refused and halved down to what fits, 128 MiB here).
 * Requests beyond the limit must fail with NULL and ENOMEM in every API,
 * leave the blocks allocated before intact, and leave the allocator working.
 *
 * oom_sizes: in this process, requests no machine can satisfy (above 2^46,
 * libarena's maximum, up to SIZE_MAX; alignments above 2^46; calloc products
 * that overflow) in every API: NULL with ENOMEM (posix_memalign: ENOMEM,
 * *out untouched), no crash, no block.
 */
#include <criterion/criterion.h>
#include <malloc.h>
#include <stdlib.h>

#include "arena.h"
#include "common.h"

#define OOM_PROG PROGS_DIR "/oom"
#define LIMIT_HEADROOM (256 * MiB)

/* ---- running progs/oom with RLIMIT_AS set before exec ------------------------------------- */

/* Runs progs/oom case with env added (LD_PRELOAD is the caller's to give)
 * and, when limit is not 0, RLIMIT_AS set to limit bytes in the child
 * before exec (run_prog_limited, common.h). */
static void run_oom(const char *oom_case, const char *conf, int preload, size_t limit,
		    run_result *r)
{
	const char *argv[] = { OOM_PROG, oom_case, NULL };
	char conf_var[128];
	const char *env[3] = { NULL, NULL, NULL };
	size_t k = 0;
	if (preload)
		env[k++] = "LD_PRELOAD=" ARENA_SO;
	if (conf) {
		snprintf(conf_var, sizeof conf_var, "ARENA_CONF=%s", conf);
		env[k++] = conf_var;
	}
	cr_assert_eq(run_prog_limited(argv, env, NULL, 60, limit, r), 0, "cannot run %s", OOM_PROG);
}

/* The limit: the program's own size (VmSize of `oom probe` without libarena
 * and without a limit) plus LIMIT_HEADROOM. */
static size_t oom_limit(void)
{
	run_result r;
	run_oom("probe", NULL, 0, 0, &r);
	cr_assert(run_exited0(&r), "oom probe: %s; stderr: %s", r.desc, r.err);
	long long kb = kv_num(r.out, "vm_kb", -1);
	cr_assert_gt(kb, 0, "oom probe printed no vm_kb: %s", r.out);
	run_result_free(&r);
	return (size_t)kb * KiB + LIMIT_HEADROOM;
}

/* Runs a case under the limit: it must print "done", exit 0, report no
 * problem, and the allocator must print nothing (running out of memory is
 * not a misuse). */
static void expect_case_ok(const char *oom_case, const char *conf, run_result *r)
{
	size_t limit = oom_limit();
	run_oom(oom_case, conf, 1, limit, r);
	cr_assert_not(contains(r->out, "FAIL:"), "oom %s (limit %zu MiB, ARENA_CONF=%s): %s",
		      oom_case, limit / MiB, conf ? conf : "", r->out);
	cr_assert(run_exited0(r), "oom %s: %s; stdout: %s stderr: %s", oom_case, r->desc, r->out,
		  r->err);
	cr_assert(contains(r->out, "done"), "oom %s did not finish: %s", oom_case, r->out);
	cr_assert_eq(r->err_len, 0, "oom %s: the allocator printed: %s", oom_case, r->err);
	long long reserved = kv_num(r->out, "reserved", -1);
	cr_assert(reserved > 0 && (size_t)reserved < limit,
		  "oom %s: %lld bytes reserved under a limit of %zu: the limit was not in force "
		  "when libarena started", oom_case, reserved, limit);
}

/* The limit is in force when libarena initialises: the 64 GiB reservation is
 * refused and libarena settles for a smaller region (at least 64 MiB)
 * instead of failing to start.  Catches a test harness that sets the limit
 * too late (every other oom_limit test would then prove nothing) and an
 * allocator that cannot start under a limit. */
Test(oom_limit, allocator_starts_under_the_limit, .timeout = 60)
{
	size_t limit = oom_limit();
	run_result r;
	run_oom("probe", NULL, 1, limit, &r);
	cr_assert(run_exited0(&r), "%s; stderr: %s", r.desc, r.err);
	long long reserved = kv_num(r.out, "reserved", -1);
	cr_assert_geq(reserved, (long long)(64 * MiB), "reserved %lld: %s", reserved, r.out);
	cr_assert_lt(reserved, (long long)limit, "reserved %lld under a limit of %zu", reserved,
		     limit);
	cr_assert_eq(r.err_len, 0, "stderr: %s", r.err);
	run_result_free(&r);
}

/* malloc, calloc, realloc, reallocarray, aligned_alloc, posix_memalign,
 * memalign, valloc, pvalloc of 300 MiB .. 2^46 under the limit.  Catches: a
 * request that succeeds anyway (the limit ignored, or a block smaller than
 * asked), a NULL without ENOMEM, posix_memalign setting *out or returning
 * something else, a failed realloc that frees, moves or damages the block
 * (small, large, huge, aligned, calloc'd), an allocator that is broken after
 * a failure (smaller blocks of every kind, resizing the old blocks). */
Test(oom_limit, requests_beyond_the_limit_fail_cleanly, .timeout = 60)
{
	run_result r;
	expect_case_ok("big", NULL, &r);
	cr_assert_eq(kv_num(r.out, "big_checked", 0), 5, "%s", r.out);
	run_result_free(&r);
}

/* 8 MiB blocks until malloc fails.  Catches: no failure at all, a failure
 * without ENOMEM, small and large allocation broken once the chunks are
 * exhausted, a failed growth of a huge block that loses it, held blocks
 * damaged, freed chunks not reusable (one freed block, then everything: as
 * many blocks again, and one block of half the total, i.e. free chunks merge
 * back into runs). */
Test(oom_limit, huge_blocks_until_failure, .timeout = 60)
{
	run_result r;
	expect_case_ok("fill_huge", NULL, &r);
	long long n = kv_num(r.out, "huge_blocks", -1);
	/* The limit leaves about 190 MiB for chunks: at least 64 MiB must be usable. */
	cr_assert_geq(n, 8, "only %lld blocks of 8 MiB under a 256 MiB headroom", n);
	cr_assert_leq(n, 32, "%lld blocks of 8 MiB under a 256 MiB headroom", n);
	run_result_free(&r);
}

/* 64-byte blocks until malloc fails (millions of them), then all freed and
 * allocated again.  Catches: a failure without ENOMEM, a slab or cache
 * refill failing half-way and losing blocks or handing one out twice (the
 * stamps), memory leaked by the failure path (fewer blocks the second time),
 * arena chunks not given back when their slabs empty (no big block after). */
Test(oom_limit, small_blocks_until_failure, .timeout = 60)
{
	run_result r;
	expect_case_ok("fill_small", NULL, &r);
	long long n = kv_num(r.out, "small_blocks", -1);
	cr_assert_geq(n, (long long)(64 * MiB / 64), "only %lld blocks of 64 bytes", n);
	run_result_free(&r);
}

/* The same with one arena and no thread cache (every malloc goes to the
 * arena under its lock: the uncached failure path). */
Test(oom_limit, small_blocks_until_failure_no_tcache, .timeout = 60)
{
	run_result r;
	expect_case_ok("fill_small", "tcache:false,narenas:1", &r);
	cr_assert_geq(kv_num(r.out, "small_blocks", -1), (long long)(64 * MiB / 64), "%s", r.out);
	run_result_free(&r);
}

/* Blocks of 1 B .. 4 MiB (malloc, calloc, aligned_alloc) until 300 requests
 * have failed, then all freed and the same sequence again.  Catches: failures
 * of one kind breaking another, contents damaged, memory lost by failures
 * (fewer bytes the second time). */
Test(oom_limit, mixed_blocks_until_failure, .timeout = 60)
{
	run_result r;
	expect_case_ok("fill_mixed", NULL, &r);
	cr_assert_geq(kv_num(r.out, "mixed_bytes", -1), (long long)(64 * MiB), "%s", r.out);
	run_result_free(&r);
}

/* Four threads run malloc, calloc, realloc, reallocarray, aligned_alloc,
 * posix_memalign, memalign, valloc and pvalloc (64 B to 3 MiB) until each
 * fails, as glibc's tst-malloc-thread-fail does.  Catches: a failure that
 * crashes or aborts in a thread (metadata that cannot be mapped, a thread
 * cache or arena set up under the limit), a NULL without ENOMEM,
 * posix_memalign answering anything but ENOMEM, blocks damaged, and memory
 * that cannot be allocated again once every thread freed its blocks. */
Test(oom_limit, every_function_in_threads_until_failure, .timeout = 120)
{
	run_result r;
	expect_case_ok("threads", NULL, &r);
	cr_assert_eq(kv_num(r.out, "thread_fills", -1), 4 * 9, "%s", r.out);
	run_result_free(&r);
}

/* ---- in this process: sizes no machine can satisfy ------------------------------------------ */

#define P46 ((size_t)1 << 46)
#define P47 ((size_t)1 << 47)
#define P63 ((size_t)1 << 63)

/* Above libarena's maximum (2^46): near 2^46, 2^47, 2^63 and SIZE_MAX. */
static const size_t beyond[] = {
	P46 + 1, P46 + 4096, P46 + 2 * MiB, P46 + GiB, P47 - 1, P47, P47 + 1, P47 + 2 * MiB,
	(size_t)1 << 48, P63 - 4096, P63 - 1, P63, P63 + 1, P63 + 2 * MiB, SIZE_MAX - 2 * MiB,
	SIZE_MAX - 4096, SIZE_MAX - 16, SIZE_MAX - 1, SIZE_MAX,
};
#define NBEYOND (sizeof beyond / sizeof *beyond)

static void enomem_or_fail(const char *what, size_t a, size_t b, void *p, int err)
{
	if (p)
		free(p);
	cr_assert_null(p, "%s(%#zx, %#zx) = %p, expected NULL", what, a, b, p);
	cr_assert_eq(err, ENOMEM, "%s(%#zx, %#zx): errno %d, expected ENOMEM", what, a, b, err);
}

/* Every allocating API with every size of beyond[].  Catches: size
 * arithmetic that wraps (rounding up to a page, a chunk or an alignment,
 * adding a header) and hands out a small block or crashes, a missing
 * ENOMEM, posix_memalign writing *out, realloc and reallocarray freeing or
 * damaging the block on failure. */
Test(oom_sizes, beyond_the_maximum_every_api, .timeout = 60)
{
	uint8_t *small = malloc(100), *large = malloc(300 * KiB), *huge = malloc(3 * MiB);
	cr_assert(small && large && huge);
	pat_fill_sparse(small, 100, 1);
	pat_fill_sparse(large, 300 * KiB, 2);
	pat_fill_sparse(huge, 3 * MiB, 3);
	uint8_t *held[3] = { small, large, huge };
	for (size_t i = 0; i < NBEYOND; i++) {
		size_t s = opaque_size(beyond[i]);
		void *p;
		errno = 0, p = malloc(s), enomem_or_fail("malloc", s, 0, p, errno);
		errno = 0, p = calloc(1, s), enomem_or_fail("calloc", 1, s, p, errno);
		errno = 0, p = calloc(s, 1), enomem_or_fail("calloc", s, 1, p, errno);
		errno = 0, p = realloc(NULL, s), enomem_or_fail("realloc(NULL)", s, 0, p, errno);
		errno = 0, p = reallocarray(NULL, s, 1), enomem_or_fail("reallocarray(NULL)", s, 1, p, errno);
		errno = 0, p = valloc(s), enomem_or_fail("valloc", s, 0, p, errno);
		errno = 0, p = pvalloc(s), enomem_or_fail("pvalloc", s, 0, p, errno);
		static const size_t al[] = { 16, 64, 4096, 2 * MiB, GiB };
		for (int j = 0; j < 5; j++) {
			errno = 0, p = aligned_alloc(al[j], s);
			enomem_or_fail("aligned_alloc", al[j], s, p, errno);
			errno = 0, p = memalign(al[j], s);
			enomem_or_fail("memalign", al[j], s, p, errno);
			void *out = (void *)0x5a5a;
			int rc = posix_memalign(&out, al[j], s);
			cr_assert_eq(rc, ENOMEM, "posix_memalign(%zu, %#zx) = %d, expected ENOMEM",
				     al[j], s, rc);
			cr_assert_eq(out, (void *)0x5a5a, "posix_memalign(%zu, %#zx) wrote *out", al[j], s);
		}
		for (int j = 0; j < 3; j++) {
			errno = 0, p = realloc(opaque_ptr(held[j]), s);
			enomem_or_fail("realloc(block)", (size_t)j, s, p, errno);
			errno = 0, p = reallocarray(opaque_ptr(held[j]), 1, s);
			enomem_or_fail("reallocarray(block, 1, n)", (size_t)j, s, p, errno);
			errno = 0, p = reallocarray(opaque_ptr(held[j]), s, 1);
			enomem_or_fail("reallocarray(block, n, 1)", (size_t)j, s, p, errno);
		}
	}
	cr_assert_eq(pat_check_sparse(small, 100, 1), SIZE_MAX, "small block damaged");
	cr_assert_eq(pat_check_sparse(large, 300 * KiB, 2), SIZE_MAX, "large block damaged");
	cr_assert_eq(pat_check_sparse(huge, 3 * MiB, 3), SIZE_MAX, "huge block damaged");
	cr_assert_eq(malloc_usable_size(huge), 3 * MiB);
	free(small);
	free(large);
	free(huge);
	void *p = malloc(100);
	cr_assert_not_null(p, "malloc(100) after the impossible requests");
	free(p);
}

/* calloc and reallocarray products that overflow, including products that
 * wrap to 0, 1, 2 or a small size: NULL and ENOMEM, never a (small) block.
 * Also products that do not overflow but exceed 2^46. */
Test(oom_sizes, overflowing_products, .timeout = 30)
{
	static const size_t prod[][2] = {
		{ SIZE_MAX, 2 }, { 2, SIZE_MAX }, { SIZE_MAX, SIZE_MAX },
		{ (size_t)1 << 32, (size_t)1 << 32 },   /* wraps to 0 */
		{ (size_t)1 << 33, (size_t)1 << 31 },   /* wraps to 0 */
		{ 65537, 281470681808897ull },          /* wraps to 1 */
		{ 3, 0x5555555555555556ull },           /* wraps to 2 */
		{ P63, 2 }, { P47, P47 }, { P46, 1024 }, { 4096, P63 / 2048 + 1 },
		{ (size_t)1 << 23, ((size_t)1 << 23) + 1 }, /* 2^46 + 2^23: no overflow, too big */
		{ P46 + 1, 1 }, { 1, P46 + 1 },
	};
	void *held = malloc(64);
	cr_assert_not_null(held);
	memset(held, 0x42, 64);
	for (size_t i = 0; i < sizeof prod / sizeof *prod; i++) {
		size_t a = opaque_size(prod[i][0]), b = opaque_size(prod[i][1]);
		void *p;
		errno = 0, p = calloc(a, b), enomem_or_fail("calloc", a, b, p, errno);
		errno = 0, p = reallocarray(NULL, a, b);
		enomem_or_fail("reallocarray(NULL)", a, b, p, errno);
		errno = 0, p = reallocarray(opaque_ptr(held), a, b);
		enomem_or_fail("reallocarray(block)", a, b, p, errno);
	}
	for (int i = 0; i < 64; i++)
		cr_assert_eq(((uint8_t *)held)[i], 0x42, "block damaged by a failed reallocarray");
	free(held);
}

/* Alignments above 2^46 (2^47 needs a 2^48 span: more than user space),
 * with small and big sizes.  Catches: alignment arithmetic that wraps (span
 * = size + align overflowing for 2^63) and unmaps or returns garbage. */
Test(oom_sizes, alignments_beyond_the_maximum, .timeout = 30)
{
	static const size_t al[] = { P47, (size_t)1 << 48, (size_t)1 << 62, P63 };
	static const size_t sz[] = { 1, 100, 3 * MiB, P46 };
	for (int i = 0; i < 4; i++) {
		for (int j = 0; j < 4; j++) {
			void *p;
			errno = 0, p = aligned_alloc(al[i], sz[j]);
			enomem_or_fail("aligned_alloc", al[i], sz[j], p, errno);
			errno = 0, p = memalign(al[i], sz[j]);
			enomem_or_fail("memalign", al[i], sz[j], p, errno);
			void *out = (void *)0x5a5a;
			int rc = posix_memalign(&out, al[i], sz[j]);
			cr_assert_eq(rc, ENOMEM, "posix_memalign(%#zx, %#zx) = %d", al[i], sz[j], rc);
			cr_assert_eq(out, (void *)0x5a5a, "posix_memalign(%#zx, %#zx) wrote *out",
				     al[i], sz[j]);
		}
	}
	void *p = malloc(100);
	cr_assert_not_null(p);
	free(p);
}

/* Exactly 2^46, libarena's maximum (docs/design.md: above it fails): the
 * kernel may or may not give that much address space, so either NULL with
 * ENOMEM, or a real block of at least 2^46 bytes whose first and last bytes
 * can be written, that can be freed.  Catches a size at the edge handled as
 * beyond it with no ENOMEM, or a block shorter than asked. */
Test(oom_sizes, exactly_the_maximum, .timeout = 30)
{
	errno = 0;
	uint8_t *p = malloc(opaque_size(P46));
	if (!p) {
		cr_assert_eq(errno, ENOMEM, "malloc(2^46) = NULL with errno %d", errno);
		return;
	}
	cr_assert_geq(malloc_usable_size(p), P46);
	p[0] = 1;
	p[P46 - 1] = 2;
	cr_assert_eq(p[0] + p[P46 - 1], 3);
	free(p);
	p = malloc(100);
	cr_assert_not_null(p);
	free(p);
}
