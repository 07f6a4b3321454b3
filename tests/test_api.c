/*
 * The public API, standard names and arena_ names: edge cases, sizes,
 * alignments, errno, statistics.
 */
#include <criterion/criterion.h>
#include <malloc.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>

#include "arena.h"
#include "common.h"

/* Both sets of names, called through pointers (which also keeps the compiler
 * from folding calls it thinks it understands). */
typedef struct api {
	const char *name;
	void *(*malloc)(size_t);
	void (*free)(void *);
	void *(*calloc)(size_t, size_t);
	void *(*realloc)(void *, size_t);
	void *(*reallocarray)(void *, size_t, size_t);
	int (*posix_memalign)(void **, size_t, size_t);
	void *(*aligned_alloc)(size_t, size_t);
	void *(*memalign)(size_t, size_t);
	void *(*valloc)(size_t);
	void *(*pvalloc)(size_t);
	size_t (*usable)(void *);
	void (*free_sized)(void *, size_t);
	void (*free_aligned_sized)(void *, size_t, size_t);
	int (*trim)(size_t);
	void (*stats)(void);
	int (*mallopt)(int, int);
} api_t;

static const api_t API_STD = {
	"", malloc, free, calloc, realloc, reallocarray, posix_memalign,
	aligned_alloc, memalign, valloc, pvalloc, malloc_usable_size,
	free_sized, free_aligned_sized, malloc_trim, malloc_stats, mallopt,
};

static const api_t API_ARENA = {
	"arena_", arena_malloc, arena_free, arena_calloc, arena_realloc,
	arena_reallocarray, arena_posix_memalign, arena_aligned_alloc,
	arena_memalign, arena_valloc, arena_pvalloc, arena_malloc_usable_size,
	arena_free_sized, arena_free_aligned_sized, arena_malloc_trim,
	arena_malloc_stats, arena_mallopt,
};

static const api_t *const APIS[2] = { &API_STD, &API_ARENA };

#define PAGE ((size_t)4096)

static size_t round_up(size_t n, size_t a)
{
	return (n + a - 1) / a * a;
}

/* The size class of a request of n bytes (up to 1 MiB), by the rule (see
 * the size classes in docs/design.md). */
static size_t model_class(size_t n)
{
	if (n <= 16)
		return 16;
	if (n <= 128)
		return round_up(n, 16);
	if (n <= MiB) {
		int b = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^b < n <= 2^(b+1) */
		size_t base = (size_t)1 << b;
		if ((b == 8 || b == 9) && n <= base + 16) /* the header classes, 2^k + 16 */
			return base + 16;
		if (b == 9 && n > 896 && n <= 960) /* 1 KiB - 1/16 */
			return 960;
		if (b == 13 && n <= 8192 + 512) /* 8 KiB + 1/16 */
			return 8192 + 512;
		if (b >= 10 && b <= 13) { /* 2^k + 2^k / (2^(16-k) - 1), to 16 B */
			size_t hdr = ((size_t)65536 / (((size_t)65536 >> b) - 1)) & ~(size_t)15;
			if (n <= hdr)
				return hdr;
			size_t r = round_up(n, base / 8); /* eight per doubling */
			size_t nine = ((size_t)65536 / 9) & ~(size_t)15; /* 7280 in 7168's place */
			if (n > 6656 && n <= nine)
				return nine;
			return r == 11264 ? 12288 : r;    /* but 11264 */
		}
		return round_up(n, base / 4);
	}
	return round_up(n, PAGE);
}

/* What malloc_usable_size says of malloc(n): its class's size, but above
 * 64 KiB (the largest class the thread caches hold) and for huge blocks
 * the request rounded up to a page. */
static size_t model_usable(size_t n)
{
	return n > 65536 ? round_up(n, PAGE) : model_class(n);
}

static arena_stats_t stats_now(void)
{
	arena_stats_t s;
	memset(&s, 0xff, sizeof s);
	cr_assert_eq(arena_stats_get(&s), 0, "arena_stats_get failed");
	return s;
}

/* ---- malloc ------------------------------------------------------------------------- */

Test(malloc, zero_size_unique_nonnull)
{
	enum { N = 1000 };
	static void *ptrs[N];
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		for (int i = 0; i < N; i++) {
			ptrs[i] = A->malloc(opaque_size(0));
			cr_assert_not_null(ptrs[i], "%smalloc(0) returned NULL", A->name);
			cr_assert(is_aligned(ptrs[i], 16), "%smalloc(0) = %p not 16-aligned",
				  A->name, ptrs[i]);
			for (int j = 0; j < i; j++)
				if (ptrs[i] == ptrs[j])
					cr_assert_fail("%smalloc(0) returned %p twice", A->name,
						       ptrs[i]);
		}
		for (int i = 0; i < N; i++)
			A->free(ptrs[i]);
	}
}

Test(malloc, free_null_is_noop)
{
	for (int a = 0; a < 2; a++) {
		errno = 4242;
		APIS[a]->free(opaque_ptr(NULL));
		cr_assert_eq(errno, 4242, "%sfree(NULL) changed errno", APIS[a]->name);
	}
	free_sized(opaque_ptr(NULL), 0);
	arena_free_sized(opaque_ptr(NULL), 0);
	free_aligned_sized(opaque_ptr(NULL), 64, 0);
	arena_free_aligned_sized(opaque_ptr(NULL), 64, 0);
}

Test(malloc, free_preserves_errno)
{
	static const size_t sizes[] = { 1, 100, 16384, 16385, 300000, MiB, MiB + 1, 3 * MiB, 40 * MiB };
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
			void *p = A->malloc(sizes[i]);
			cr_assert_not_null(p);
			memset(p, 1, sizes[i]);
			escape(p); /* the compiler may not drop the block */
			errno = EILSEQ;
			A->free(p);
			cr_assert_eq(errno, EILSEQ, "%sfree of a %zu-byte block changed errno to %d",
				     A->name, sizes[i], errno);
			p = A->malloc(sizes[i]);
			cr_assert_not_null(p);
			errno = EILSEQ;
			A->free_sized(p, sizes[i]);
			cr_assert_eq(errno, EILSEQ, "%sfree_sized of a %zu-byte block changed errno",
				     A->name, sizes[i]);
		}
	}
}

/* Every size 0..4096, then a stride up to 70000: all blocks kept live, filled
 * over their whole usable size, then checked (so blocks may not overlap). */
static void sweep(const api_t *A)
{
	enum { MAXN = 6000 };
	void **ptrs = A->calloc(MAXN, sizeof *ptrs);
	size_t *usable = A->calloc(MAXN, sizeof *usable);
	cr_assert(ptrs && usable);
	int n = 0;
	for (size_t size = 0; size <= 70000; size = size < 4096 ? size + 1 : size + 61) {
		void *p = A->malloc(opaque_size(size));
		cr_assert_not_null(p, "%smalloc(%zu) failed", A->name, size);
		cr_assert(is_aligned(p, 16), "%smalloc(%zu) = %p, not 16-aligned", A->name, size, p);
		size_t u = A->usable(p);
		cr_assert_geq(u, size, "%smalloc_usable_size(%smalloc(%zu)) = %zu", A->name,
			      A->name, size, u);
		pat_fill(p, 0, u, (uint32_t)n);
		ptrs[n] = p;
		usable[n] = u;
		n++;
		cr_assert_lt(n, MAXN);
	}
	for (int i = 0; i < n; i++) {
		size_t bad = pat_check(ptrs[i], 0, usable[i], (uint32_t)i);
		cr_assert_eq(bad, SIZE_MAX,
			     "%s block #%d (%p, usable %zu) overwritten at offset %zu", A->name, i,
			     ptrs[i], usable[i], bad);
		cr_assert_eq(A->usable(ptrs[i]), usable[i], "usable size changed");
	}
	for (int i = 0; i < n; i++)
		A->free(ptrs[i]);
	A->free(ptrs);
	A->free(usable);
}

Test(malloc, usable_and_alignment_sweep_std, .timeout = 60)
{
	sweep(&API_STD);
}

Test(malloc, usable_and_alignment_sweep_arena, .timeout = 60)
{
	sweep(&API_ARENA);
}

Test(malloc, huge_sizes, .timeout = 60)
{
	static const size_t sizes[] = {
		MiB + 1, 2 * MiB - 1, 2 * MiB, 2 * MiB + 1, 3 * MiB, 4 * MiB + 4095, 17 * MiB,
		64 * MiB + 12345,
	};
	enum { N = sizeof sizes / sizeof *sizes };
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		void *p[N];
		for (int i = 0; i < N; i++) {
			p[i] = A->malloc(opaque_size(sizes[i]));
			cr_assert_not_null(p[i], "%smalloc(%zu) failed", A->name, sizes[i]);
			cr_assert(is_aligned(p[i], 16));
			size_t u = A->usable(p[i]);
			cr_assert_geq(u, sizes[i], "%smalloc_usable_size = %zu < %zu", A->name, u,
				      sizes[i]);
			pat_fill_sparse(p[i], u, (uint32_t)i + 7);
		}
		for (int i = 0; i < N; i++) {
			size_t bad = pat_check_sparse(p[i], A->usable(p[i]), (uint32_t)i + 7);
			cr_assert_eq(bad, SIZE_MAX, "huge block of %zu overwritten at %zu", sizes[i], bad);
			A->free(p[i]);
		}
	}
}

/* Free chunk runs are reused best fit: with runs of 5 and 4 chunks free
 * (the 5 freed last), an 8 MiB block takes the 4, and the 5 stays whole
 * for a later 10 MiB block.  Caught: first fit in the log2 bin (both runs
 * are in bin 2), which split the 5 and pushed later big blocks to fresh
 * address space (bench/soak: mapped kept growing). */
Test(malloc, huge_blocks_reuse_the_best_fitting_run, .timeout = 30)
{
	void *s0 = malloc(opaque_size(2 * MiB)), *a = malloc(opaque_size(10 * MiB));
	void *s1 = malloc(opaque_size(2 * MiB)), *b = malloc(opaque_size(8 * MiB));
	void *s2 = malloc(opaque_size(2 * MiB));
	cr_assert(s0 && a && s1 && b && s2);
	cr_assert_eq((char *)s1, (char *)a + 10 * MiB, "the 10 MiB block is not followed by the next");
	free(b);
	free(a);
	void *p = malloc(opaque_size(8 * MiB));
	cr_assert_eq(p, b, "8 MiB block at %p: expected the 4-chunk run at %p, not the 5 at %p", p, b, a);
	void *q = malloc(opaque_size(10 * MiB));
	cr_assert_eq(q, a, "10 MiB block at %p: expected the 5-chunk run at %p", q, a);
	free(p), free(q), free(s0), free(s1), free(s2);
}

/* The size classes described for libarena: exact usable sizes. */
Test(malloc, usable_size_matches_size_classes, .timeout = 60)
{
	for (size_t n = 1; n <= 20000; n++) {
		void *p = malloc(opaque_size(n));
		cr_assert_not_null(p);
		cr_assert_eq(malloc_usable_size(p), model_usable(n),
			     "malloc_usable_size(malloc(%zu)) = %zu, size class model says %zu", n,
			     malloc_usable_size(p), model_usable(n));
		free(p);
	}
	for (size_t n = 16385; n <= 3 * MiB; n = n * 9 / 8 + 1) {
		static const long deltas[] = { -4097, -4096, -1, 0, 1, 4095, 4096 };
		for (int d = 0; d < 7; d++) {
			size_t m = (size_t)((long)n + deltas[d]);
			void *p = malloc(opaque_size(m));
			cr_assert_not_null(p);
			cr_assert_eq(malloc_usable_size(p), model_usable(m),
				     "malloc_usable_size(malloc(%zu)) = %zu, size class model says %zu",
				     m, malloc_usable_size(p), model_usable(m));
			free(p);
		}
	}
	static const size_t edges[] = { 16384, 16385, MiB - 1, MiB, MiB + 1, 2 * MiB, 17 * MiB + 1 };
	for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) {
		void *p = malloc(opaque_size(edges[i]));
		cr_assert_not_null(p);
		cr_assert_eq(malloc_usable_size(p), model_usable(edges[i]),
			     "malloc_usable_size(malloc(%zu)) = %zu, size class model says %zu",
			     edges[i], malloc_usable_size(p), model_usable(edges[i]));
		free(p);
	}
}

/* Beyond RAM + swap a request fails at once, as glibc's does under the
 * kernel's heuristic overcommit; within it (a sparse block) it succeeds.
 * Caught by the fuzzer before: malloc(2^46) took 5.9 s and left 2 GB of
 * chunk descriptors resident. */
Test(malloc, larger_than_ram_and_swap_enomem, .timeout = 30)
{
	struct sysinfo si;
	cr_assert_eq(sysinfo(&si), 0);
	size_t limit = (size_t)(((unsigned long long)si.totalram + si.totalswap) * si.mem_unit);
	const size_t sizes[] = { limit + 2 * MiB, limit + GiB, (size_t)1 << 46 };
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
		errno = 0;
		void *p = malloc(opaque_size(sizes[i]));
		cr_assert_null(p, "malloc(%zu) beyond RAM + swap (%zu) = %p", sizes[i], limit, p);
		cr_assert_eq(errno, ENOMEM);
		p = malloc(4 * MiB);
		cr_assert_not_null(p);
		errno = 0;
		void *r = realloc(opaque_ptr(p), opaque_size(sizes[i]));
		cr_assert_null(r, "realloc to %zu beyond RAM + swap", sizes[i]);
		cr_assert_eq(errno, ENOMEM);
		free(opaque_ptr(p)); /* a failed realloc leaves the block */
	}
	void *q = malloc(opaque_size(limit / 2)); /* sparse: never touched */
	cr_assert_not_null(q, "malloc of half of RAM + swap (%zu) failed", limit / 2);
	free(q);
}

Test(malloc, impossible_sizes_enomem)
{
	static const size_t sizes[] = {
		SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 15, SIZE_MAX - 4095, SIZE_MAX - 2 * MiB + 1,
		SIZE_MAX - GiB, SIZE_MAX / 2 + 1, (size_t)PTRDIFF_MAX, (size_t)PTRDIFF_MAX + 1,
		(size_t)PTRDIFF_MAX - 4095, (size_t)1 << 62,
	};
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
			errno = 0;
			void *p = A->malloc(opaque_size(sizes[i]));
			cr_assert_null(p, "%smalloc(%#zx) = %p, expected NULL", A->name, sizes[i], p);
			cr_assert_eq(errno, ENOMEM, "%smalloc(%#zx): errno %d, expected ENOMEM",
				     A->name, sizes[i], errno);
			errno = 0;
			p = A->realloc(NULL, opaque_size(sizes[i]));
			cr_assert_null(p, "%srealloc(NULL, %#zx) = %p", A->name, sizes[i], p);
			cr_assert_eq(errno, ENOMEM, "%srealloc(NULL, %#zx): errno %d", A->name,
				     sizes[i], errno);
			errno = 0;
			p = A->calloc(1, opaque_size(sizes[i]));
			cr_assert_null(p, "%scalloc(1, %#zx) = %p", A->name, sizes[i], p);
			cr_assert_eq(errno, ENOMEM, "%scalloc(1, %#zx): errno %d", A->name, sizes[i],
				     errno);
			errno = 0;
			p = A->valloc(opaque_size(sizes[i]));
			cr_assert_null(p, "%svalloc(%#zx) = %p", A->name, sizes[i], p);
			cr_assert_eq(errno, ENOMEM, "%svalloc(%#zx): errno %d", A->name, sizes[i], errno);
			errno = 0;
			p = A->pvalloc(opaque_size(sizes[i]));
			cr_assert_null(p, "%spvalloc(%#zx) = %p", A->name, sizes[i], p);
			cr_assert_eq(errno, ENOMEM, "%spvalloc(%#zx): errno %d", A->name, sizes[i], errno);
		}
		/* The allocator still works afterwards. */
		void *p = A->malloc(100);
		cr_assert_not_null(p);
		A->free(p);
	}
}

/* ---- calloc ------------------------------------------------------------------------ */

static void check_zero(const void *p, size_t n, const char *what, size_t size)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(b[i], 0, "%s(%zu): byte %zu is %#x, not 0", what, size, i, b[i]);
}

Test(calloc, zeroes_reused_memory, .timeout = 60)
{
	static const size_t sizes[] = {
		1, 15, 16, 17, 100, 128, 129, 1000, 4096, 8191, 16384, 16385, 50000, 300000,
		MiB - 1, MiB, MiB + 1, 3 * MiB, 9 * MiB + 7,
	};
	enum { K = 16 };
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
			size_t n = sizes[i];
			void *d[K];
			/* Dirty K blocks of this size, free them, then calloc K. */
			for (int k = 0; k < K; k++) {
				d[k] = A->malloc(n);
				cr_assert_not_null(d[k]);
				memset(d[k], 0xCD, A->usable(d[k]));
			}
			for (int k = 0; k < K; k++)
				A->free(d[k]);
			for (int k = 0; k < K; k++) {
				d[k] = A->calloc(1, opaque_size(n));
				cr_assert_not_null(d[k], "%scalloc(1, %zu) failed", A->name, n);
				cr_assert(is_aligned(d[k], 16));
				cr_assert_geq(A->usable(d[k]), n);
				check_zero(d[k], n, "calloc", n);
				memset(d[k], 0xCD, n);
			}
			for (int k = 0; k < K; k++)
				A->free(d[k]);
			/* nmemb * size split the other way. */
			void *p = A->calloc(opaque_size(n), 1);
			cr_assert_not_null(p);
			check_zero(p, n, "calloc(n,1)", n);
			A->free(p);
		}
	}
}

/* Small blocks from fresh slabs are handed out known zero (the cache link's
 * low bit), so calloc skips their memset; blocks that were used must still
 * be zeroed.  Catches: small calloc never skipping (memset_skipped does not
 * move), and a used block wrongly flagged zero (the bytes check, after the
 * same class was dirtied and freed in bulk so dirty blocks reach the cache
 * between fresh ones). */
Test(calloc, small_fresh_blocks_skip_memset, .timeout = 60)
{
	enum { N = 512 };
	static const size_t sizes[] = { 48, 640, 3072, 12288 };
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
		size_t n = sizes[i];
		static void *d[N];
		arena_stats_t before, after;
		cr_assert_eq(arena_stats_get(&before), 0);
		for (int k = 0; k < N; k++) {
			d[k] = calloc(1, opaque_size(n));
			cr_assert_not_null(d[k]);
			check_zero(d[k], n, "fresh calloc", n);
		}
		cr_assert_eq(arena_stats_get(&after), 0);
		cr_assert_gt(after.memset_skipped, before.memset_skipped,
			     "%d callocs of %zu bytes from fresh slabs skipped no memset", N, n);
		for (int k = 0; k < N; k++)
			memset(d[k], 0xA5, n);
		for (int k = 0; k < N; k += 2) /* half back: dirty blocks among fresh */
			free(d[k]);
		for (int k = 0; k < N; k += 2) {
			d[k] = calloc(opaque_size(n), 1);
			cr_assert_not_null(d[k]);
			check_zero(d[k], n, "calloc after dirty frees", n);
		}
		for (int k = 0; k < N; k++)
			free(d[k]);
		for (int k = 0; k < N; k++) {
			d[k] = calloc(1, opaque_size(n));
			check_zero(d[k], n, "calloc of reused blocks", n);
		}
		for (int k = 0; k < N; k++)
			free(d[k]);
	}
}

Test(calloc, zero_sizes)
{
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		void *p = A->calloc(opaque_size(0), 0);
		void *q = A->calloc(opaque_size(0), 100);
		void *r = A->calloc(opaque_size(100), 0);
		cr_assert(p && q && r, "%scalloc with a zero factor returned NULL", A->name);
		cr_assert(p != q && q != r && p != r);
		A->free(p);
		A->free(q);
		A->free(r);
		/* A zero factor with an enormous one is no overflow. */
		p = A->calloc(opaque_size(0), opaque_size(SIZE_MAX));
		q = A->calloc(opaque_size(SIZE_MAX), opaque_size(0));
		r = A->reallocarray(NULL, opaque_size(0), opaque_size(SIZE_MAX));
		cr_assert_not_null(p, "%scalloc(0, SIZE_MAX) returned NULL", A->name);
		cr_assert_not_null(q, "%scalloc(SIZE_MAX, 0) returned NULL", A->name);
		cr_assert_not_null(r, "%sreallocarray(NULL, 0, SIZE_MAX) returned NULL", A->name);
		A->free(p);
		A->free(q);
		A->free(r);
	}
}

Test(calloc, overflow_enomem)
{
	static const size_t pairs[][2] = {
		{ SIZE_MAX, 2 }, { 2, SIZE_MAX }, { (size_t)1 << 32, (size_t)1 << 32 },
		{ SIZE_MAX / 2 + 1, 2 }, { SIZE_MAX / 3 + 1, 3 }, { (size_t)1 << 33, (size_t)1 << 31 },
		{ 65537, 281470681808897ull }, /* product wraps to exactly 1 */
		{ SIZE_MAX, SIZE_MAX },
	};
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
			errno = 0;
			void *p = A->calloc(opaque_size(pairs[i][0]), opaque_size(pairs[i][1]));
			cr_assert_null(p, "%scalloc(%#zx, %#zx) = %p, expected NULL", A->name,
				       pairs[i][0], pairs[i][1], p);
			cr_assert_eq(errno, ENOMEM, "%scalloc(%#zx, %#zx): errno %d", A->name,
				     pairs[i][0], pairs[i][1], errno);
			errno = 0;
			p = A->reallocarray(NULL, opaque_size(pairs[i][0]), opaque_size(pairs[i][1]));
			cr_assert_null(p, "%sreallocarray(NULL, %#zx, %#zx) = %p", A->name,
				       pairs[i][0], pairs[i][1], p);
			cr_assert_eq(errno, ENOMEM);
		}
	}
}

/* ---- realloc (the basics; test_realloc.c has the rest) ----------------------------------- */

Test(realloc, null_is_malloc)
{
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		static const size_t sizes[] = { 0, 1, 100, 20000, 3 * MiB };
		for (size_t i = 0; i < 5; i++) {
			void *p = A->realloc(opaque_ptr(NULL), opaque_size(sizes[i]));
			cr_assert_not_null(p, "%srealloc(NULL, %zu) returned NULL", A->name, sizes[i]);
			cr_assert(is_aligned(p, 16));
			cr_assert_geq(A->usable(p), sizes[i]);
			memset(p, 0x11, sizes[i]);
			escape(p); /* the compiler may not drop the block */
			A->free(p);
		}
	}
}

Test(realloc, zero_size_frees_and_returns_null)
{
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		static const size_t sizes[] = { 1, 100, 20000, 3 * MiB };
		for (size_t i = 0; i < 4; i++) {
			void *p = A->malloc(sizes[i]);
			cr_assert_not_null(p);
			void *q = A->realloc(p, opaque_size(0));
			cr_assert_null(q, "%srealloc(p, 0) = %p, glibc returns NULL", A->name, q);
		}
		/* "Frees": the huge block is counted as freed. */
		void *p = A->malloc(5 * MiB);
		cr_assert_not_null(p);
		arena_stats_t s0 = stats_now();
		cr_assert_null(A->realloc(p, opaque_size(0)));
		arena_stats_t s1 = stats_now();
		cr_assert_eq(s1.nfree_huge, s0.nfree_huge + 1,
			     "%srealloc(huge, 0) did not free the block (nfree_huge %lu -> %lu)",
			     A->name, (unsigned long)s0.nfree_huge, (unsigned long)s1.nfree_huge);
		cr_assert_leq(s1.allocated + 5 * MiB, s0.allocated,
			      "allocated %zu -> %zu after %srealloc(5 MiB block, 0)", s0.allocated,
			      s1.allocated, A->name);
	}
}

Test(realloc, reallocarray_basic_and_overflow)
{
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		uint32_t *p = A->reallocarray(NULL, 100, sizeof *p);
		cr_assert_not_null(p);
		for (uint32_t i = 0; i < 100; i++)
			p[i] = i * 2654435761u;
		errno = 0;
		void *q = A->reallocarray(p, opaque_size(SIZE_MAX / 2), opaque_size(3));
		cr_assert_null(q);
		cr_assert_eq(errno, ENOMEM, "%sreallocarray overflow: errno %d", A->name, errno);
		for (uint32_t i = 0; i < 100; i++)
			cr_assert_eq(p[i], i * 2654435761u, "block changed by failed reallocarray");
		p = A->reallocarray(p, 100000, sizeof *p);
		cr_assert_not_null(p);
		for (uint32_t i = 0; i < 100; i++)
			cr_assert_eq(p[i], i * 2654435761u, "reallocarray lost the contents");
		A->free(p);
	}
}

/* ---- aligned allocation ------------------------------------------------------------------- */

static const size_t align_sizes[] = { 1, 200, 20000, 3 * MiB };
enum { NALIGN_SIZES = sizeof align_sizes / sizeof *align_sizes };

static void touch_block(void *p, size_t n, uint32_t seed)
{
	size_t head = n < 64 ? n : 64;
	pat_fill(p, 0, head, seed);
	if (n > 64)
		pat_fill(p, n - 64, n, seed);
}

static void check_block(void *p, size_t n, uint32_t seed, const char *what, size_t al)
{
	size_t head = n < 64 ? n : 64, bad;
	bad = pat_check(p, 0, head, seed);
	if (bad == SIZE_MAX && n > 64)
		bad = pat_check(p, n - 64, n, seed);
	cr_assert_eq(bad, SIZE_MAX, "%s(align %zu, size %zu) = %p overwritten at %zu", what, al,
		     n, p, bad);
}

Test(aligned, every_power_of_two_posix_memalign, .timeout = 120)
{
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		for (int lg = 3; lg <= 30; lg++) {
			size_t al = (size_t)1 << lg;
			void *p[NALIGN_SIZES];
			for (int i = 0; i < NALIGN_SIZES; i++) {
				void *out = (void *)0x5a5a;
				int rc = A->posix_memalign(&out, opaque_size(al), align_sizes[i]);
				cr_assert_eq(rc, 0, "%sposix_memalign(align %zu, size %zu) = %d",
					     A->name, al, align_sizes[i], rc);
				cr_assert(is_aligned(out, al > 16 ? al : 16),
					  "%sposix_memalign(align %zu, size %zu) = %p misaligned",
					  A->name, al, align_sizes[i], out);
				cr_assert_geq(A->usable(out), align_sizes[i]);
				touch_block(out, align_sizes[i], (uint32_t)(lg * 8 + i));
				p[i] = out;
			}
			for (int i = 0; i < NALIGN_SIZES; i++) {
				check_block(p[i], align_sizes[i], (uint32_t)(lg * 8 + i),
					    "posix_memalign", al);
				A->free(p[i]);
			}
		}
	}
}

Test(aligned, every_power_of_two_aligned_alloc_and_memalign, .timeout = 120)
{
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		for (int lg = 3; lg <= 30; lg++) {
			size_t al = (size_t)1 << lg;
			void *p[2 * NALIGN_SIZES];
			for (int i = 0; i < 2 * NALIGN_SIZES; i++) {
				size_t n = align_sizes[i % NALIGN_SIZES];
				const char *fn = i < NALIGN_SIZES ? "aligned_alloc" : "memalign";
				p[i] = i < NALIGN_SIZES ? A->aligned_alloc(opaque_size(al), n)
							: A->memalign(opaque_size(al), n);
				cr_assert_not_null(p[i], "%s%s(%zu, %zu) failed", A->name, fn, al, n);
				cr_assert(is_aligned(p[i], al > 16 ? al : 16),
					  "%s%s(%zu, %zu) = %p misaligned", A->name, fn, al, n, p[i]);
				cr_assert_geq(A->usable(p[i]), n);
				touch_block(p[i], n, (uint32_t)(lg * 16 + i));
			}
			for (int i = 0; i < 2 * NALIGN_SIZES; i++) {
				check_block(p[i], align_sizes[i % NALIGN_SIZES], (uint32_t)(lg * 16 + i),
					    i < NALIGN_SIZES ? "aligned_alloc" : "memalign", al);
				A->free(p[i]);
			}
		}
	}
}

/* Many aligned blocks live at once, fully patterned: no overlap between them
 * or with plain blocks allocated in between. */
Test(aligned, many_live_blocks_do_not_overlap, .timeout = 60)
{
	enum { N = 600 };
	static void *p[N];
	static size_t sz[N];
	rng_t r;
	rng_seed(&r, 99);
	for (int i = 0; i < N; i++) {
		size_t al = (size_t)1 << (3 + rng_below(&r, 14)); /* 8 .. 64 KiB */
		sz[i] = rng_logsize(&r, 1, 200000);
		if (i % 3 == 0) {
			p[i] = malloc(sz[i]);
			cr_assert_not_null(p[i]);
		} else if (i % 3 == 1) {
			cr_assert_eq(posix_memalign(&p[i], al, sz[i]), 0);
			cr_assert(is_aligned(p[i], al));
		} else {
			p[i] = aligned_alloc(al, sz[i]);
			cr_assert_not_null(p[i]);
			cr_assert(is_aligned(p[i], al));
		}
		pat_fill(p[i], 0, sz[i], (uint32_t)i);
	}
	for (int i = 0; i < N; i++) {
		size_t bad = pat_check(p[i], 0, sz[i], (uint32_t)i);
		cr_assert_eq(bad, SIZE_MAX, "block %d (%p, %zu bytes) overwritten at %zu", i, p[i],
			     sz[i], bad);
		free(p[i]);
	}
}

Test(aligned, posix_memalign_einval_leaves_out_untouched)
{
	static const size_t bad[] = {
		0, 1, 2, 3, 4, 5, 12, 24, 40, 48, 72, 100, 4097, 3 * 4096, MiB + 8,
		SIZE_MAX, SIZE_MAX / 2 + 2,
	};
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
			void *out = (void *)0x5a5a;
			int rc = A->posix_memalign(&out, opaque_size(bad[i]), 64);
			cr_assert_eq(rc, EINVAL, "%sposix_memalign(align %zu) = %d, expected EINVAL",
				     A->name, bad[i], rc);
			cr_assert_eq(out, (void *)0x5a5a, "%sposix_memalign(align %zu) wrote *out",
				     A->name, bad[i]);
		}
	}
}

Test(aligned, enomem_when_size_cannot_fit)
{
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		static const size_t al[] = { 8, 64, 4096, 2 * MiB, GiB };
		for (int i = 0; i < 5; i++) {
			void *out = (void *)0x5a5a;
			int rc = A->posix_memalign(&out, al[i], opaque_size(SIZE_MAX - al[i] + 1));
			cr_assert_eq(rc, ENOMEM, "%sposix_memalign(%zu, SIZE_MAX-%zu+1) = %d", A->name,
				     al[i], al[i], rc);
			rc = A->posix_memalign(&out, al[i], opaque_size(SIZE_MAX / 2));
			cr_assert_eq(rc, ENOMEM, "%sposix_memalign(%zu, SIZE_MAX/2) = %d", A->name,
				     al[i], rc);
			errno = 0;
			void *p = A->aligned_alloc(al[i], opaque_size(SIZE_MAX - al[i] + 1));
			cr_assert_null(p);
			cr_assert_eq(errno, ENOMEM, "%saligned_alloc(%zu, huge) errno %d", A->name,
				     al[i], errno);
			errno = 0;
			p = A->memalign(al[i], opaque_size(SIZE_MAX - al[i] + 1));
			cr_assert_null(p);
			cr_assert_eq(errno, ENOMEM, "%smemalign(%zu, huge) errno %d", A->name, al[i],
				     errno);
		}
	}
}

/* Size 0 with every alignment: a unique, aligned block that can be freed. */
Test(aligned, zero_size_every_alignment, .timeout = 60)
{
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		for (int lg = 3; lg <= 30; lg++) {
			size_t al = (size_t)1 << lg;
			void *p[3] = { (void *)0x5a5a, NULL, NULL };
			int rc = A->posix_memalign(&p[0], al, opaque_size(0));
			cr_assert_eq(rc, 0, "%sposix_memalign(%zu, 0) = %d", A->name, al, rc);
			p[1] = A->aligned_alloc(al, opaque_size(0));
			p[2] = A->memalign(al, opaque_size(0));
			for (int k = 0; k < 3; k++) {
				static const char *fn[] = { "posix_memalign", "aligned_alloc", "memalign" };
				cr_assert_not_null(p[k], "%s%s(%zu, 0) returned NULL", A->name, fn[k], al);
				cr_assert(is_aligned(p[k], al), "%s%s(%zu, 0) = %p misaligned", A->name,
					  fn[k], al, p[k]);
				for (int j = 0; j < k; j++)
					cr_assert_neq(p[j], p[k], "%s(%zu, 0) returned %p twice", fn[k], al, p[k]);
			}
			for (int k = 0; k < 3; k++)
				A->free(p[k]);
		}
	}
}

/* glibc 2.36's aligned_alloc is its memalign: an alignment that is not a
 * power of two is rounded up to the next one; above SIZE_MAX / 2 + 1 it
 * cannot be one, and the answer is EINVAL (test_glibc compares every such
 * answer with glibc's own). */
Test(aligned, aligned_alloc_answers_as_glibc)
{
	static const size_t bad[] = { 3, 5, 6, 12, 24, 48, 100, 1000, 3000, 4097, MiB + 16, 3 * MiB };
	static const size_t beyond[] = { SIZE_MAX / 2 + 2, SIZE_MAX - 4095, SIZE_MAX };
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
			size_t want = 16;
			while (want < bad[i])
				want <<= 1;
			void *p = A->aligned_alloc(opaque_size(bad[i]), bad[i] * 2);
			cr_assert_not_null(p, "%saligned_alloc(%zu, ...) = NULL", A->name, bad[i]);
			cr_assert(is_aligned(p, want), "%saligned_alloc(%zu, ...) = %p, not aligned to %zu",
				  A->name, bad[i], p, want);
			A->free(p);
		}
		for (size_t i = 0; i < sizeof beyond / sizeof *beyond; i++) {
			errno = 0;
			void *p = A->aligned_alloc(opaque_size(beyond[i]), 64);
			cr_assert_null(p, "%saligned_alloc(%#zx, 64) = %p", A->name, beyond[i], p);
			cr_assert_eq(errno, EINVAL, "%saligned_alloc(%#zx, 64): errno %d, expected EINVAL",
				     A->name, beyond[i], errno);
			errno = 0;
			p = A->memalign(opaque_size(beyond[i]), 64);
			cr_assert_null(p, "%smemalign(%#zx, 64) = %p", A->name, beyond[i], p);
			cr_assert_eq(errno, EINVAL, "%smemalign(%#zx, 64): errno %d, expected EINVAL",
				     A->name, beyond[i], errno);
		}
	}
}

Test(aligned, memalign_rounds_alignment_up)
{
	static const size_t cases[][2] = {
		/* alignment asked, alignment expected */
		{ 1, 16 }, { 2, 16 }, { 4, 16 }, { 24, 32 }, { 100, 128 }, { 3000, 4096 },
		{ 5000, 8192 }, { 65535, 65536 }, { MiB + 1, 2 * MiB }, { 3 * MiB, 4 * MiB },
	};
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
			for (int k = 0; k < 4; k++) {
				size_t n = align_sizes[k];
				void *p = A->memalign(opaque_size(cases[i][0]), n);
				cr_assert_not_null(p, "%smemalign(%zu, %zu) failed", A->name,
						   cases[i][0], n);
				cr_assert(is_aligned(p, cases[i][1]),
					  "%smemalign(%zu, %zu) = %p, not %zu-aligned", A->name,
					  cases[i][0], n, p, cases[i][1]);
				cr_assert_geq(A->usable(p), n);
				memset(p, 0x77, n);
				escape(p); /* the compiler may not drop the block */
				A->free(p);
			}
		}
	}
}

Test(aligned, valloc_page_aligned)
{
	static const size_t sizes[] = { 0, 1, 100, 4095, 4096, 4097, 20000, 100000, MiB + 1, 3 * MiB };
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		void *p[10];
		for (int i = 0; i < 10; i++) {
			p[i] = A->valloc(opaque_size(sizes[i]));
			cr_assert_not_null(p[i], "%svalloc(%zu) failed", A->name, sizes[i]);
			cr_assert(is_aligned(p[i], PAGE), "%svalloc(%zu) = %p", A->name, sizes[i], p[i]);
			cr_assert_geq(A->usable(p[i]), sizes[i]);
			pat_fill(p[i], 0, sizes[i], (uint32_t)i);
		}
		for (int i = 0; i < 10; i++) {
			cr_assert_eq(pat_check(p[i], 0, sizes[i], (uint32_t)i), SIZE_MAX);
			A->free(p[i]);
		}
	}
}

Test(aligned, pvalloc_rounds_size_to_page)
{
	static const size_t sizes[] = { 0, 1, 100, 4095, 4096, 4097, 20000, 100001, MiB + 1, 3 * MiB + 1 };
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		for (int i = 0; i < 10; i++) {
			size_t want = sizes[i] ? round_up(sizes[i], PAGE) : PAGE;
			void *p = A->pvalloc(opaque_size(sizes[i]));
			cr_assert_not_null(p, "%spvalloc(%zu) failed", A->name, sizes[i]);
			cr_assert(is_aligned(p, PAGE), "%spvalloc(%zu) = %p", A->name, sizes[i], p);
			cr_assert_geq(A->usable(p), want, "%spvalloc(%zu): usable %zu < %zu", A->name,
				      sizes[i], A->usable(p), want);
			memset(p, 0x5c, want); /* the whole rounded size is ours */
			escape(p); /* the compiler may not drop the block */
			A->free(p);
		}
	}
}

/* ---- usable size, sized free ---------------------------------------------------------------- */

Test(usable, null_is_zero)
{
	cr_assert_eq(malloc_usable_size(opaque_ptr(NULL)), 0);
	cr_assert_eq(arena_malloc_usable_size(opaque_ptr(NULL)), 0);
}

Test(usable, same_allocator_under_both_names)
{
	static const size_t sizes[] = { 0, 1, 17, 1000, 16385, 300000, 3 * MiB };
	for (int i = 0; i < 7; i++) {
		void *p = malloc(sizes[i]);
		void *q = arena_malloc(sizes[i]);
		cr_assert(p && q);
		cr_assert_eq(arena_malloc_usable_size(p), malloc_usable_size(p));
		cr_assert_eq(arena_malloc_usable_size(q), malloc_usable_size(q));
		cr_assert_eq(malloc_usable_size(p), malloc_usable_size(q),
			     "malloc and arena_malloc disagree on %zu bytes", sizes[i]);
		/* Freed crosswise. */
		arena_free(p);
		free(q);
	}
	void *p = arena_calloc(10, 10);
	p = realloc(p, 5000);
	p = arena_realloc(p, 3 * MiB);
	cr_assert_not_null(p);
	free(p);
}

static void sized_free_loop(const api_t *A, size_t n, int iters)
{
	arena_stats_t s0 = stats_now();
	for (int i = 0; i < iters; i++) {
		char *p = A->malloc(opaque_size(n));
		cr_assert_not_null(p);
		p[0] = (char)i;
		p[n - 1] = (char)i;
		escape(p); /* the compiler may not drop the block */
		A->free_sized(p, n);
	}
	arena_stats_t s1 = stats_now();
	cr_assert_leq(s1.allocated, s0.allocated + 64 * KiB,
		      "%sfree_sized(p, %zu) x %d: allocated grew %zu -> %zu", A->name, n, iters,
		      s0.allocated, s1.allocated);
	cr_assert_leq(s1.active, s0.active + 8 * MiB,
		      "%sfree_sized(p, %zu) x %d: active grew %zu -> %zu", A->name, n, iters,
		      s0.active, s1.active);
	if (n > MiB)
		cr_assert_eq(s1.nfree_huge - s0.nfree_huge, (uint64_t)iters,
			     "%sfree_sized of huge blocks: nfree_huge +%lu, expected +%d", A->name,
			     (unsigned long)(s1.nfree_huge - s0.nfree_huge), iters);
}

Test(usable, free_sized_frees, .timeout = 60)
{
	static const size_t sizes[] = { 1, 16, 100, 1000, 16384, 16385, 100000, MiB, MiB + 1, 3 * MiB };
	for (int a = 0; a < 2; a++)
		for (int i = 0; i < 10; i++)
			sized_free_loop(APIS[a], sizes[i], sizes[i] > MiB ? 300 : 3000);
}

Test(usable, free_aligned_sized_frees, .timeout = 60)
{
	static const size_t cases[][2] = {
		{ 16, 1 }, { 64, 100 }, { 256, 3000 }, { 4096, 5000 }, { 65536, 20000 },
		{ 2 * MiB, 100 }, { 2 * MiB, 3 * MiB }, { 64, MiB + 5 },
	};
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
			size_t al = cases[c][0], n = cases[c][1];
			arena_stats_t s0 = stats_now();
			for (int i = 0; i < 500; i++) {
				char *p = A->aligned_alloc(al, n);
				cr_assert_not_null(p);
				cr_assert(is_aligned(p, al));
				p[0] = p[n - 1] = 1;
				escape(p); /* the compiler may not drop the block */
				A->free_aligned_sized(p, al, n);
			}
			arena_stats_t s1 = stats_now();
			cr_assert_leq(s1.allocated, s0.allocated + 64 * KiB,
				      "%sfree_aligned_sized(p, %zu, %zu): allocated %zu -> %zu",
				      A->name, al, n, s0.allocated, s1.allocated);
			cr_assert_leq(s1.active, s0.active + 16 * MiB,
				      "%sfree_aligned_sized(p, %zu, %zu): active %zu -> %zu", A->name,
				      al, n, s0.active, s1.active);
		}
	}
}

/* ---- glibc extras: malloc_trim, mallopt, malloc_stats ------------------------------------------ */

Test(extras, malloc_trim_returns_0_or_1)
{
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		void *p[64];
		for (int i = 0; i < 64; i++) {
			p[i] = A->malloc(200000);
			cr_assert_not_null(p[i]);
			memset(p[i], 1, 200000);
			escape(p[i]); /* the compiler may not drop the block */
		}
		for (int i = 0; i < 64; i++)
			A->free(p[i]);
		int rc = A->trim(0);
		cr_assert(rc == 0 || rc == 1, "%smalloc_trim(0) = %d", A->name, rc);
		rc = A->trim(MiB);
		cr_assert(rc == 0 || rc == 1, "%smalloc_trim(1 MiB) = %d", A->name, rc);
		void *q = A->malloc(200000); /* still works */
		cr_assert_not_null(q);
		A->free(q);
	}
}

Test(extras, mallopt_answers_as_glibc)
{
	for (int a = 0; a < 2; a++) {
		const api_t *A = APIS[a];
		cr_assert_eq(A->mallopt(M_MMAP_THRESHOLD, 256 * 1024), 1, "%smallopt(M_MMAP_THRESHOLD)", A->name);
		cr_assert_eq(A->mallopt(M_TRIM_THRESHOLD, 512 * 1024), 1, "%smallopt(M_TRIM_THRESHOLD)", A->name);
		cr_assert_eq(A->mallopt(M_ARENA_MAX, 2), 1, "%smallopt(M_ARENA_MAX)", A->name);
		cr_assert_eq(A->mallopt(M_TOP_PAD, 64 * 1024), 1, "%smallopt(M_TOP_PAD)", A->name);
		cr_assert_eq(A->mallopt(M_MMAP_MAX, 65536), 1, "%smallopt(M_MMAP_MAX)", A->name);
		cr_assert_eq(A->mallopt(-3, 128 * 1024), 1);
		cr_assert_eq(A->mallopt(-8, 4), 1);
		/* glibc 2.36 answers 1 to parameters it does not know, and 0 only
		 * to M_MXFAST outside 0..160 (test_glibc compares with glibc). */
		cr_assert_eq(A->mallopt(12345, 1), 1, "%smallopt(12345)", A->name);
		cr_assert_eq(A->mallopt(-12345, 1), 1, "%smallopt(-12345)", A->name);
		cr_assert_eq(A->mallopt(M_MXFAST, 160), 1, "%smallopt(M_MXFAST, 160)", A->name);
		cr_assert_eq(A->mallopt(M_MXFAST, 161), 0, "%smallopt(M_MXFAST, 161)", A->name);
		cr_assert_eq(A->mallopt(M_MXFAST, -1), 0, "%smallopt(M_MXFAST, -1)", A->name);
		/* Still allocating normally. */
		void *p = A->malloc(300000);
		cr_assert_not_null(p);
		memset(p, 3, 300000);
		escape(p); /* the compiler may not drop the block */
		A->free(p);
	}
}

static int call_stats_fn(void *arg)
{
	void (*fn)(void) = (void (*)(void))arg;
	void *keep = malloc(1000);
	escape(keep);
	fn();
	return 0;
}

Test(extras, malloc_stats_print_to_stderr, .timeout = 30)
{
	static void (*const fns[])(void) = { malloc_stats, arena_malloc_stats, arena_stats_print };
	static const char *names[] = { "malloc_stats", "arena_malloc_stats", "arena_stats_print" };
	for (int i = 0; i < 3; i++) {
		run_result r;
		cr_assert_eq(run_fn(call_stats_fn, (void *)fns[i], 20, &r), 0);
		cr_assert(run_exited0(&r), "child calling %s(): %s", names[i], r.desc);
		cr_assert_gt(r.err_len, 0, "%s() printed nothing on stderr", names[i]);
		cr_assert_eq(r.out_len, 0, "%s() printed on stdout: %s", names[i], r.out);
		run_result_free(&r);
	}
}

/* ---- statistics --------------------------------------------------------------------------------- */

Test(stats, null_is_einval)
{
	errno = 0;
	cr_assert_eq(arena_stats_get(opaque_ptr(NULL)), -1);
	cr_assert_eq(errno, EINVAL);
}

static void check_invariants(const arena_stats_t *s)
{
	cr_assert_gt(s->allocated, 0, "allocated is 0 with live blocks");
	cr_assert_geq(s->active, s->allocated, "active %zu < allocated %zu", s->active, s->allocated);
	cr_assert_geq(s->mapped, s->active, "mapped %zu < active %zu", s->mapped, s->active);
	cr_assert_geq(s->reserved, s->mapped, "reserved %zu < mapped %zu", s->reserved, s->mapped);
	cr_assert_geq(s->narenas, 1);
	cr_assert_geq(s->chunks, 1);
	cr_assert_leq(s->nclasses, ARENA_STATS_MAX_CLASSES);
	cr_assert_gt(s->nclasses, 0);
	cr_assert_geq(s->nmalloc_small, s->nfree_small);
	cr_assert_geq(s->nmalloc_large, s->nfree_large);
	cr_assert_geq(s->nmalloc_huge, s->nfree_huge);
	cr_assert_geq(s->sys_mmap, 1, "no mmap counted, yet memory is mapped");
	cr_assert_eq(s->mapped % (2 * MiB), 0, "mapped %zu is not whole chunks", s->mapped);
	cr_assert_eq(s->active % PAGE, 0, "active %zu is not whole pages", s->active);
	for (unsigned i = 0; i < s->nclasses; i++) {
		const arena_class_stats_t *c = &s->classes[i];
		if (i > 0)
			cr_assert_gt(c->size, s->classes[i - 1].size, "class sizes not increasing at %u", i);
		cr_assert_geq(c->nmalloc, c->nfree, "class %zu: nfree > nmalloc", c->size);
		cr_assert_eq(c->live, c->nmalloc - c->nfree, "class %zu: live != nmalloc - nfree",
			     c->size);
	}
}

Test(stats, invariants_hold)
{
	void *keep[4] = { malloc(10), malloc(5000), malloc(100000), malloc(3 * MiB) };
	escape(keep);
	arena_stats_t s = stats_now();
	check_invariants(&s);
	cr_assert_geq(s.allocated, 3 * MiB + 100000 + 5000 + 10);
	cr_assert_geq(s.nthreads, 1, "the main thread allocates, nthreads = %u", s.nthreads);
	cr_assert_geq(s.chunks, 2, "a huge block and an arena chunk are live: chunks = %zu", s.chunks);
	for (int i = 0; i < 4; i++)
		free(keep[i]);
	s = stats_now();
	check_invariants(&s);
}

Test(stats, class_table_matches_model)
{
	arena_stats_t s = stats_now();
	size_t want[ARENA_STATS_MAX_CLASSES];
	unsigned n = 0;
	for (size_t sz = 16; sz <= MiB; sz = model_class(sz + 1))
		want[n++] = sz;
	cr_assert_eq(n, 82); /* sanity of the model itself */
	cr_assert_eq(s.nclasses, n, "nclasses = %u, model has %u classes", s.nclasses, n);
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(s.classes[i].size, want[i], "class %u has size %zu, model says %zu", i,
			     s.classes[i].size, want[i]);
}

Test(stats, per_class_counters_add_up)
{
	void *p[300];
	rng_t r;
	rng_seed(&r, 300);
	for (int i = 0; i < 300; i++) {
		p[i] = malloc(rng_logsize(&r, 1, MiB));
		cr_assert_not_null(p[i]);
	}
	escape(p);
	for (int i = 0; i < 300; i += 2)
		free(p[i]);
	arena_stats_t s = stats_now();
	uint64_t ms = 0, fs = 0, ml = 0, fl = 0;
	for (unsigned i = 0; i < s.nclasses; i++) {
		if (s.classes[i].size <= 16384) {
			ms += s.classes[i].nmalloc;
			fs += s.classes[i].nfree;
		} else {
			ml += s.classes[i].nmalloc;
			fl += s.classes[i].nfree;
		}
	}
	cr_assert_eq(ms, s.nmalloc_small, "sum of small classes' nmalloc %lu != nmalloc_small %lu",
		     (unsigned long)ms, (unsigned long)s.nmalloc_small);
	cr_assert_eq(fs, s.nfree_small, "sum of small classes' nfree %lu != nfree_small %lu",
		     (unsigned long)fs, (unsigned long)s.nfree_small);
	cr_assert_eq(ml, s.nmalloc_large, "sum of large classes' nmalloc %lu != nmalloc_large %lu",
		     (unsigned long)ml, (unsigned long)s.nmalloc_large);
	cr_assert_eq(fl, s.nfree_large, "sum of large classes' nfree %lu != nfree_large %lu",
		     (unsigned long)fl, (unsigned long)s.nfree_large);
	for (int i = 1; i < 300; i += 2)
		free(p[i]);
}

Test(stats, allocated_follows_large_and_huge_blocks)
{
	static const size_t sizes[] = { MiB, 3 * MiB, 600 * KiB, 40 * MiB };
	for (int i = 0; i < 4; i++) {
		size_t n = sizes[i];
		int huge = n > MiB;
		arena_stats_t s0 = stats_now();
		void *p = malloc(opaque_size(n));
		cr_assert_not_null(p);
		memset(p, 1, n);
		escape(p);
		arena_stats_t s1 = stats_now();
		check_invariants(&s1);
		cr_assert_geq(s1.allocated, s0.allocated + n, "malloc(%zu): allocated %zu -> %zu", n,
			      s0.allocated, s1.allocated);
		cr_assert_geq(s1.active, s0.active + n, "malloc(%zu): active %zu -> %zu", n, s0.active,
			      s1.active);
		if (huge)
			cr_assert_eq(s1.nmalloc_huge, s0.nmalloc_huge + 1, "malloc(%zu): nmalloc_huge %lu -> %lu",
				     n, (unsigned long)s0.nmalloc_huge, (unsigned long)s1.nmalloc_huge);
		else
			cr_assert_gt(s1.nmalloc_large, s0.nmalloc_large, "malloc(%zu): nmalloc_large %lu -> %lu",
				     n, (unsigned long)s0.nmalloc_large, (unsigned long)s1.nmalloc_large);
		free(p);
		arena_stats_t s2 = stats_now();
		cr_assert_leq(s2.allocated + n, s1.allocated, "free(%zu): allocated %zu -> %zu", n,
			      s1.allocated, s2.allocated);
		if (huge)
			cr_assert_eq(s2.nfree_huge, s1.nfree_huge + 1, "free(%zu): nfree_huge %lu -> %lu", n,
				     (unsigned long)s1.nfree_huge, (unsigned long)s2.nfree_huge);
	}
}

Test(stats, small_counters_count_blocks)
{
	enum { N = 1000 };
	static void *p[N];
	/* 5000 bytes: class 5120, which nothing else here uses. */
	arena_stats_t s0 = stats_now();
	unsigned ci;
	for (ci = 0; ci < s0.nclasses && s0.classes[ci].size != 5120; ci++)
		;
	cr_assert_lt(ci, s0.nclasses, "no class of 5120 bytes");
	for (int i = 0; i < N; i++) {
		p[i] = malloc(opaque_size(5000));
		cr_assert_not_null(p[i]);
	}
	arena_stats_t s1 = stats_now();
	cr_assert_geq(s1.nmalloc_small - s0.nmalloc_small, N, "%d small mallocs: nmalloc_small +%lu", N,
		      (unsigned long)(s1.nmalloc_small - s0.nmalloc_small));
	cr_assert_geq(s1.classes[ci].nmalloc - s0.classes[ci].nmalloc, N,
		      "%d mallocs of 5000: class 5120 nmalloc +%lu", N,
		      (unsigned long)(s1.classes[ci].nmalloc - s0.classes[ci].nmalloc));
	cr_assert_geq(s1.classes[ci].live, s0.classes[ci].live + N);
	/* 1000 blocks of 5120 bytes hold at least 1250 pages in their slabs,
	 * and, in slabs of 4 blocks (5 pages), not much more. */
	uint64_t grew = s1.classes[ci].pages - s0.classes[ci].pages;
	cr_assert(grew >= N * 5120 / 4096 && grew <= N * 5120 / 4096 + 64,
		  "%d blocks of 5120: the class's pages grew by %lu", N, (unsigned long)grew);
	cr_assert_geq(s1.allocated, s0.allocated + (size_t)N * 5120, "allocated %zu -> %zu",
		      s0.allocated, s1.allocated);
	for (int i = 0; i < N; i++)
		free(p[i]);
	arena_stats_t s2 = stats_now();
	cr_assert_leq(s2.allocated + (size_t)N * 5120, s1.allocated + 64 * KiB,
		      "freeing %d blocks of 5120: allocated %zu -> %zu", N, s1.allocated, s2.allocated);
	cr_assert_leq(s2.classes[ci].live + N, s1.classes[ci].live + 64,
		      "class 5120 live %lu -> %lu after %d frees", (unsigned long)s1.classes[ci].live,
		      (unsigned long)s2.classes[ci].live, N);
	/* the thread's list of the class keeps some of them (its first size
	 * is 4 blocks; a flush keeps half), all inside the class's pages */
	cr_assert_geq(s2.classes[ci].cached, 1, "class 5120: %lu blocks cached after %d frees",
		      (unsigned long)s2.classes[ci].cached, N);
	cr_assert_leq(s2.classes[ci].cached * 5120, s2.classes[ci].pages * 4096,
		      "class 5120: %lu blocks cached in %lu pages", (unsigned long)s2.classes[ci].cached,
		      (unsigned long)s2.classes[ci].pages);
	cr_assert_leq(s2.classes[ci].pages, s0.classes[ci].pages + 64,
		      "class 5120 holds %lu pages after its %d blocks were freed (%lu before)",
		      (unsigned long)s2.classes[ci].pages, N, (unsigned long)s0.classes[ci].pages);
}

/* arena_purge gives free memory back to the kernel: RSS falls, dirty drops. */
Test(stats, purge_returns_memory, .timeout = 60)
{
	enum { N = 512 };
	static void *p[N];
	size_t rss0 = rss_bytes();
	for (int i = 0; i < N; i++) {
		p[i] = malloc(512 * KiB);
		cr_assert_not_null(p[i]);
		memset(p[i], 0xAB, 512 * KiB);
	}
	size_t rss1 = rss_bytes();
	cr_assert_geq(rss1, rss0 + 200 * MiB, "256 MiB written but RSS %zu -> %zu", rss0, rss1);
	for (int i = 0; i < N; i++)
		free(p[i]);
	arena_stats_t s0 = stats_now();
	size_t purged = arena_purge();
	arena_stats_t s1 = stats_now();
	size_t rss2 = rss_bytes();
	cr_assert_leq(rss2 + 200 * MiB, rss1,
		      "after freeing 256 MiB and arena_purge() RSS went %zu -> %zu (purge said %zu)",
		      rss1, rss2, purged);
	if (s0.dirty > 0)
		cr_assert_gt(purged, 0, "dirty was %zu, arena_purge() returned 0", s0.dirty);
	cr_assert_eq(s1.dirty, 0, "dirty = %zu after arena_purge() (was %zu)", s1.dirty, s0.dirty);
	cr_assert_eq(s1.allocated <= s0.allocated, 1);
	/* And the memory is usable again. */
	void *q = malloc(512 * KiB);
	cr_assert_not_null(q);
	memset(q, 1, 512 * KiB);
	escape(q); /* the compiler may not drop the block */
	free(q);
}

/* Allocating and freeing the same big or strongly aligned blocks over and
 * over may not leak memory or address space. */
Test(stats, churn_does_not_leak, .timeout = 120)
{
	static const size_t cases[][3] = {
		/* alignment (0: malloc), size, rounds */
		{ 0, 5 * MiB, 1000 },     { 0, 600 * KiB, 3000 }, { 2 * MiB, 100, 3000 },
		{ 2 * MiB, 3 * MiB, 1000 }, { 64 * MiB, 4096, 300 }, { GiB, 100, 100 },
		{ GiB, 5 * MiB, 100 },
	};
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
		size_t al = cases[c][0], n = cases[c][1];
		/* One round first: the first block of a kind may set up memory
		 * that stays (e.g. chunks up to an alignment boundary). */
		char *w = al ? aligned_alloc(al, n) : malloc(n);
		cr_assert_not_null(w);
		escape(w);
		free(w);
		arena_stats_t s0 = stats_now();
		for (size_t i = 0; i < cases[c][2]; i++) {
			char *p = al ? aligned_alloc(al, n) : malloc(n);
			cr_assert_not_null(p, "round %zu: allocating %zu (align %zu) failed", i, n, al);
			p[0] = p[n - 1] = 1;
			escape(p); /* the compiler may not drop the block */
			free(p);
		}
		arena_stats_t s1 = stats_now();
		cr_assert_leq(s1.allocated, s0.allocated + 64 * KiB,
			      "%zu x (align %zu, size %zu): allocated %zu -> %zu", cases[c][2], al, n,
			      s0.allocated, s1.allocated);
		cr_assert_leq(s1.mapped, s0.mapped + 64 * MiB,
			      "%zu x (align %zu, size %zu): mapped %zu -> %zu", cases[c][2], al, n,
			      s0.mapped, s1.mapped);
		cr_assert_leq(s1.reserved, s0.reserved + 4 * GiB,
			      "%zu x (align %zu, size %zu): reserved %zu -> %zu", cases[c][2], al, n,
			      s0.reserved, s1.reserved);
	}
}

/* Above 64 KiB a large block is a run of the pages its request needs
 * (large.c): usable size, allocated bytes and in-place resizing go by the
 * page, not by the size class (which would round 65537 up to 80 KiB). */
Test(stats, large_runs_above_64k_go_by_the_page)
{
	static const size_t sizes[] = { 64 * KiB + 1, 100 * KiB + 5, 600 * KiB - 4095, MiB };
	for (int i = 0; i < 4; i++) {
		size_t n = sizes[i], pages = round_up(n, PAGE);
		arena_stats_t s0 = stats_now();
		char *p = malloc(opaque_size(n));
		cr_assert_not_null(p);
		escape(p);
		cr_assert_eq(malloc_usable_size(p), pages, "malloc(%zu): usable %zu", n,
			     malloc_usable_size(p));
		arena_stats_t s1 = stats_now();
		cr_assert_eq(s1.allocated - s0.allocated, pages, "malloc(%zu): allocated grew by %zu", n,
			     s1.allocated - s0.allocated);
		/* a page more, then two fewer: in place while the next page is
		 * free (a fresh process's arena chunk: nothing after it) */
		char *q = p;
		if (pages < MiB) {
			q = realloc(p, opaque_size(pages + 1));
			cr_assert_eq(q, p, "realloc(%zu -> %zu) moved", n, pages + 1);
			cr_assert_eq(malloc_usable_size(q), pages + PAGE);
			cr_assert_eq(stats_now().allocated - s0.allocated, pages + PAGE);
		}
		if (pages - PAGE > 64 * KiB) {
			q = realloc(q, opaque_size(pages - PAGE));
			cr_assert_eq(q, p, "shrinking moved");
			cr_assert_eq(malloc_usable_size(q), pages - PAGE);
			cr_assert_eq(stats_now().allocated - s0.allocated, pages - PAGE);
		}
		free(q);
		cr_assert_eq(stats_now().allocated, s0.allocated, "free(%zu): allocated back", n);
	}
}

/* realloc moves the statistics along with the block. */
Test(stats, allocated_follows_realloc)
{
	static const size_t steps[] = { 10 * MiB, 3 * MiB, 40 * MiB, 500 * KiB, 20 * KiB, 100, 6 * MiB };
	char *p = malloc(steps[0]);
	cr_assert_not_null(p);
	escape(p);
	for (size_t i = 1; i < sizeof steps / sizeof *steps; i++) {
		arena_stats_t s0 = stats_now();
		p = realloc(p, opaque_size(steps[i]));
		cr_assert_not_null(p);
		escape(p);
		arena_stats_t s1 = stats_now();
		long long want = (long long)steps[i] - (long long)steps[i - 1];
		long long got = (long long)s1.allocated - (long long)s0.allocated;
		/* within the rounding of the two sizes */
		long long slack = (long long)(steps[i] / 4 + steps[i - 1] / 4 + 64 * KiB);
		cr_assert(got >= want - slack && got <= want + slack,
			  "realloc %zu -> %zu: allocated changed by %lld, expected about %lld",
			  steps[i - 1], steps[i], got, want);
	}
	free(p);
}
