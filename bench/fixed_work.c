/*
 * fixed_work: a fixed, deterministic amount of bignum arithmetic on the
 * heap, for counting the instructions an allocator executes (callgrind) as
 * well as for timing.
 *
 * A small bignum library in the style of a naive calculator's: a number is
 * a malloc'ed header holding a malloc'ed array of 32-bit limbs, every
 * operation that makes a new number (sum, product, copy) mallocs it, an
 * in-place multiplication by a small number grows the limbs with realloc
 * (by a quarter at a time), and decimal output appends 9 digits at a time
 * to a string grown by realloc each time (exactly).  The work is n units
 * (-n, default 3000); unit k, for k = 0 .. n - 1:
 *   1. m! for m = 100 + (37 k mod 400), by a product tree (binary
 *      splitting: the products of the two halves of [lo, hi], multiplied
 *      schoolbook; ~2m numbers of 1 to ~120 limbs made and freed);
 *   2. its decimal digits (a copy divided by 10^9 in place over and over,
 *      the string grown by realloc 9 digits at a time, up to ~1.2 KB);
 *   3. the Fibonacci number F(j), j = 200 + (53 k mod 800), by j - 1
 *      sums, each a new number, the older addend freed;
 *   4. F(j) * m!, a new number, and its limbs multiplied in place by
 *      3, 5, 7, ... 31 (each may realloc);
 *   5. every 16th unit also (2000 + k mod 1000)! with its digits (numbers
 *      up to ~950 limbs, 3.8 KB, strings up to ~9.2 KB), and every 128th
 *      (5000 + k mod 3000)! with its digits (up to ~2900 limbs, 11.5 KB,
 *      strings up to ~28 KB).
 * So many small and medium blocks, from 16 B to ~28 KB, of ever-changing
 * sizes, short-lived, and reallocs that grow.  Everything is freed at the
 * end of its unit.  A 64-bit FNV-1a hash of every decimal string and of the
 * limbs of the numbers of step 4 is the checksum: the same under every
 * allocator (or something went wrong), and the work cannot be optimised
 * away.  Single-threaded.
 *
 * Timing: CLOCK_MONOTONIC around the n units.  The calls to malloc,
 * realloc and free are counted.
 *
 * Usage: fixed_work [-n units]
 * Prints "result seconds=<s> mallocs=<n> reallocs=<n> frees=<n>
 * checksum=0x<hex>" on stdout (the checksum is not a number to bench/run,
 * which records only the others) and a human-readable line on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax).  On the 2-vCPU
 * development VM a unit takes ~0.25 ms natively and ~4 ms under callgrind
 * (the arithmetic, ~70% of the instructions under glibc, slows down less
 * there than a malloc-bound loop): the quick run ~0.75 s natively, ~12 s
 * under callgrind; the full one ~2.5 s and ~40 s.
 * BENCH tiny: -n 20
 * BENCH quick: n3000 | -n 3000
 * BENCH full: n10000 | -n 10000
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef struct big {
	size_t n, cap;   /* limbs used (no leading zero limb but for 0), held */
	uint32_t *d;     /* least significant first */
} big_t;

static uint64_t nmalloc, nrealloc, nfree, hash = 0xcbf29ce484222325ull;

static void *xmalloc(size_t size)
{
	void *p = malloc(size);
	if (!p) {
		fprintf(stderr, "fixed_work: malloc(%zu) returned NULL\n", size);
		exit(1);
	}
	nmalloc++;
	return p;
}

static void *xrealloc(void *old, size_t size)
{
	void *p = realloc(old, size);
	if (!p) {
		fprintf(stderr, "fixed_work: realloc(%zu) returned NULL\n", size);
		exit(1);
	}
	nrealloc++;
	return p;
}

static void xfree(void *p)
{
	free(p);
	nfree++;
}

static void hash_bytes(const void *p, size_t len)
{
	const unsigned char *s = p;
	for (size_t i = 0; i < len; i++)
		hash = (hash ^ s[i]) * 0x100000001b3ull;
}

static big_t *big_new(size_t cap)
{
	big_t *b = xmalloc(sizeof(*b));
	b->n = 0;
	b->cap = cap ? cap : 1;
	b->d = xmalloc(b->cap * sizeof(uint32_t));
	return b;
}

static void big_free(big_t *b)
{
	xfree(b->d);
	xfree(b);
}

static big_t *big_from(uint32_t v)
{
	big_t *b = big_new(1);
	b->d[0] = v;
	b->n = 1;
	return b;
}

static big_t *big_copy(const big_t *a)
{
	big_t *b = big_new(a->n);
	memcpy(b->d, a->d, a->n * sizeof(uint32_t));
	b->n = a->n;
	return b;
}

static void big_trim(big_t *b)
{
	while (b->n > 1 && b->d[b->n - 1] == 0)
		b->n--;
}

static big_t *big_add(const big_t *a, const big_t *b)
{
	if (a->n < b->n) {
		const big_t *t = a;
		a = b;
		b = t;
	}
	big_t *r = big_new(a->n + 1);
	uint64_t carry = 0;
	for (size_t i = 0; i < a->n; i++) {
		carry += (uint64_t)a->d[i] + (i < b->n ? b->d[i] : 0);
		r->d[i] = (uint32_t)carry;
		carry >>= 32;
	}
	r->d[a->n] = (uint32_t)carry;
	r->n = a->n + 1;
	big_trim(r);
	return r;
}

static big_t *big_mul(const big_t *a, const big_t *b)
{
	big_t *r = big_new(a->n + b->n);
	memset(r->d, 0, (a->n + b->n) * sizeof(uint32_t));
	for (size_t i = 0; i < a->n; i++) {
		uint64_t carry = 0, x = a->d[i];
		for (size_t j = 0; j < b->n; j++) {
			carry += x * b->d[j] + r->d[i + j];
			r->d[i + j] = (uint32_t)carry;
			carry >>= 32;
		}
		r->d[i + b->n] = (uint32_t)carry;
	}
	r->n = a->n + b->n;
	big_trim(r);
	return r;
}

/* b *= m, growing b's limbs by a quarter when they are full. */
static void big_mul_small(big_t *b, uint32_t m)
{
	uint64_t carry = 0;
	for (size_t i = 0; i < b->n; i++) {
		carry += (uint64_t)b->d[i] * m;
		b->d[i] = (uint32_t)carry;
		carry >>= 32;
	}
	if (!carry)
		return;
	if (b->n == b->cap) {
		b->cap += b->cap / 4 + 1;
		b->d = xrealloc(b->d, b->cap * sizeof(uint32_t));
	}
	b->d[b->n++] = (uint32_t)carry;
}

/* b /= m; the remainder. */
static uint32_t big_div_small(big_t *b, uint32_t m)
{
	uint64_t rem = 0;
	for (size_t i = b->n; i-- > 0;) {
		rem = rem << 32 | b->d[i];
		b->d[i] = (uint32_t)(rem / m);
		rem %= m;
	}
	big_trim(b);
	return (uint32_t)rem;
}

static int big_is_zero(const big_t *b)
{
	return b->n == 1 && b->d[0] == 0;
}

/* The product of lo .. hi, by binary splitting. */
static big_t *product(uint32_t lo, uint32_t hi)
{
	if (hi - lo < 4) {
		big_t *r = big_from(lo);
		for (uint32_t i = lo + 1; i <= hi; i++)
			big_mul_small(r, i);
		return r;
	}
	uint32_t mid = lo + (hi - lo) / 2;
	big_t *a = product(lo, mid), *b = product(mid + 1, hi);
	big_t *r = big_mul(a, b);
	big_free(a);
	big_free(b);
	return r;
}

/* The decimal digits of b, least significant first (the string is only
 * hashed, never printed), grown by realloc 9 digits at a time; hashed and
 * freed. */
static void hash_decimal(const big_t *b)
{
	big_t *t = big_copy(b);
	char *s = NULL;
	size_t len = 0;
	do {
		uint32_t group = big_div_small(t, 1000000000u);
		s = xrealloc(s, len + 9);
		for (int i = 0; i < 9; i++, group /= 10)
			s[len++] = (char)('0' + group % 10);
	} while (!big_is_zero(t));
	big_free(t);
	hash_bytes(s, len);
	xfree(s);
}

static big_t *fibonacci(uint32_t j)
{
	big_t *a = big_from(0), *b = big_from(1);
	for (uint32_t i = 1; i < j; i++) {
		big_t *c = big_add(a, b);
		big_free(a);
		a = b;
		b = c;
	}
	big_free(a);
	return b;
}

static void factorial_digits(uint32_t m)
{
	big_t *f = product(1, m);
	hash_decimal(f);
	big_free(f);
}

static void unit(uint64_t k)
{
	uint32_t m = 100 + (uint32_t)(k * 37 % 400), j = 200 + (uint32_t)(k * 53 % 800);
	big_t *f = product(1, m);
	hash_decimal(f);
	big_t *fib = fibonacci(j);
	big_t *p = big_mul(fib, f);
	for (uint32_t q = 3; q <= 31; q += 2)
		big_mul_small(p, q);
	hash_bytes(p->d, p->n * sizeof(uint32_t));
	big_free(p);
	big_free(fib);
	big_free(f);
	if (k % 16 == 15)
		factorial_digits(2000 + (uint32_t)(k % 1000));
	if (k % 128 == 127)
		factorial_digits(5000 + (uint32_t)(k % 3000));
}

static void usage(void)
{
	fprintf(stderr, "usage: fixed_work [-n units]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t n = 3000;
	int c;

	while ((c = getopt(argc, argv, "n:h")) != -1) {
		if (c != 'n' || parse_u64(optarg, 1, UINT32_MAX, &n))
			usage();
	}
	if (optind != argc)
		usage();

	double t0 = now_sec();
	for (uint64_t k = 0; k < n; k++)
		unit(k);
	double secs = now_sec() - t0;
	fprintf(stderr, "fixed_work: %" PRIu64 " units: %.3f s, %" PRIu64 " mallocs, %" PRIu64
		" reallocs, %" PRIu64 " frees, checksum 0x%016" PRIx64 "\n", n, secs, nmalloc,
		nrealloc, nfree, hash);
	printf("result seconds=%.4f mallocs=%" PRIu64 " reallocs=%" PRIu64 " frees=%" PRIu64
	       " checksum=0x%016" PRIx64 "\n", secs, nmalloc, nrealloc, nfree, hash);
	return 0;
}
