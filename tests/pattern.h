/*
 * Test helpers for blocks' contents (static inline, header only): keeping the
 * compiler from folding allocator calls (opaque_size, opaque_ptr, escape),
 * byte patterns that depend on the offset and a seed (pat_*: a shifted or
 * foreign copy is caught), and a small per-thread PRNG (rng_*).
 */
#ifndef ARENA_TESTS_PATTERN_H
#define ARENA_TESTS_PATTERN_H

#include <stddef.h>
#include <stdint.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* ---- defeating the optimiser ------------------------------------------------ */

static inline size_t opaque_size(size_t x)
{
	__asm__ volatile("" : "+r"(x));
	return x;
}

static inline void *opaque_ptr(void *p)
{
	__asm__ volatile("" : "+r"(p));
	return p;
}

/* Makes p (and the memory it points to) visible to the outside world. */
static inline void escape(const void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

static inline int is_aligned(const void *p, size_t a)
{
	return ((uintptr_t)p & (a - 1)) == 0;
}

/* ---- patterns ------------------------------------------------------------------ */

/* The byte expected at offset off of a block filled with seed. */
static inline uint8_t pat_byte(size_t off, uint32_t seed)
{
	uint64_t x = (uint64_t)off * 0x9E3779B97F4A7C15ull +
		     ((uint64_t)seed + 1) * 0xD6E8FEB86659FD93ull;
	return (uint8_t)((x >> 56) ^ (x >> 29));
}

/* Fills bytes [from, to) of p. */
static inline void pat_fill(void *p, size_t from, size_t to, uint32_t seed)
{
	uint8_t *b = p;
	for (size_t i = from; i < to; i++)
		b[i] = pat_byte(i, seed);
}

/* Checks bytes [from, to) of p; returns the first bad offset, or SIZE_MAX. */
static inline size_t pat_check(const void *p, size_t from, size_t to, uint32_t seed)
{
	const uint8_t *b = p;
	for (size_t i = from; i < to; i++)
		if (b[i] != pat_byte(i, seed))
			return i;
	return SIZE_MAX;
}

/*
 * Sparse pattern for big blocks, so that stress tests stay fast: blocks up to
 * SPARSE_FULL bytes are filled whole; bigger ones get their first and last
 * 4 KiB and 32 bytes in every KiB (so every page is touched).
 */
#define SPARSE_FULL (64 * KiB)

static inline void pat_fill_sparse(void *p, size_t n, uint32_t seed)
{
	if (n <= SPARSE_FULL) {
		pat_fill(p, 0, n, seed);
		return;
	}
	pat_fill(p, 0, 4096, seed);
	for (size_t off = 4096; off + 32 <= n - 4096; off += 1024)
		pat_fill(p, off, off + 32, seed);
	pat_fill(p, n - 4096, n, seed);
}

static inline size_t pat_check_sparse(const void *p, size_t n, uint32_t seed)
{
	size_t bad;
	if (n <= SPARSE_FULL)
		return pat_check(p, 0, n, seed);
	if ((bad = pat_check(p, 0, 4096, seed)) != SIZE_MAX)
		return bad;
	for (size_t off = 4096; off + 32 <= n - 4096; off += 1024)
		if ((bad = pat_check(p, off, off + 32, seed)) != SIZE_MAX)
			return bad;
	return pat_check(p, n - 4096, n, seed);
}

/* ---- random numbers --------------------------------------------------------------- */

typedef struct { uint64_t s; } rng_t;

static inline void rng_seed(rng_t *r, uint64_t seed)
{
	r->s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
	if (r->s == 0)
		r->s = 1;
}

static inline uint64_t rng_next(rng_t *r)
{
	uint64_t x = r->s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	r->s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [0, n) (n > 0). */
static inline uint64_t rng_below(rng_t *r, uint64_t n)
{
	return (rng_next(r) >> 11) % n;
}

/* Roughly log-uniform in [lo, hi] (1 <= lo <= hi). */
static inline size_t rng_logsize(rng_t *r, size_t lo, size_t hi)
{
	int lb = 63 - __builtin_clzll(lo), hb = 63 - __builtin_clzll(hi);
	for (;;) {
		int b = lb + (int)rng_below(r, (uint64_t)(hb - lb + 1));
		size_t base = (size_t)1 << b;
		size_t n = base + (size_t)rng_below(r, base);
		if (n >= lo && n <= hi)
			return n;
	}
}

#endif /* ARENA_TESTS_PATTERN_H */
