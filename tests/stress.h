/*
 * Helpers of the multi-threaded stress tests (static inline, header only):
 * the first failure seen by a worker thread (tfail: Criterion asserts only on
 * the main thread) and blocks in flight between threads (rec_*).
 */
#ifndef ARENA_TESTS_STRESS_H
#define ARENA_TESTS_STRESS_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "pattern.h"

/* libarena provides it; glibc 2.36's headers do not declare it. */
void free_sized(void *ptr, size_t size);

/* ---- first failure of a multi-threaded or forked test ------------------------------- */

/*
 * Criterion's assertions may only run on the test's main thread, so worker
 * threads record the first failure here and stop; the main thread asserts.
 */
static atomic_int tfail_flag;
static char tfail_msg[512];

static inline void tfail(const char *fmt, ...)
{
	int expected = 0;
	if (!atomic_compare_exchange_strong(&tfail_flag, &expected, 1))
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(tfail_msg, sizeof tfail_msg, fmt, ap);
	va_end(ap);
}

static inline int tfailed(void)
{
	return atomic_load_explicit(&tfail_flag, memory_order_relaxed);
}

/* ---- blocks in flight (stress tests) -------------------------------------------------------- */

/* A block in flight: the record itself is malloc'd too, by one thread, and
 * often freed by another. */
typedef struct rec {
	uint8_t *p;
	size_t n;
	uint32_t seed;
	uint32_t owner;
} rec_t;

static inline size_t stress_size(rng_t *r)
{
	uint64_t k = rng_below(r, 10000);
	if (k < 9000)
		return 1 + (size_t)rng_below(r, 256);
	if (k < 9850)
		return rng_logsize(r, 257, 16384);
	if (k < 9990)
		return rng_logsize(r, 16385, MiB);
	return rng_logsize(r, MiB + 1, 4 * MiB);
}

static inline rec_t *rec_new(rng_t *r, uint32_t owner)
{
	rec_t *x = malloc(sizeof *x);
	if (!x) {
		tfail("malloc(%zu) for a record failed", sizeof *x);
		return NULL;
	}
	x->n = stress_size(r);
	x->seed = (uint32_t)rng_next(r);
	x->owner = owner;
	switch (rng_below(r, 8)) {
	case 0:
		x->p = calloc(1, x->n);
		if (x->p && x->n <= 4096) {
			for (size_t i = 0; i < x->n; i++)
				if (x->p[i]) {
					tfail("calloc(1, %zu) = %p: byte %zu not zero", x->n, x->p, i);
					break;
				}
		}
		break;
	case 1:
		x->p = aligned_alloc(64, x->n);
		if (x->p && !is_aligned(x->p, 64))
			tfail("aligned_alloc(64, %zu) = %p", x->n, x->p);
		break;
	default:
		x->p = malloc(x->n);
		break;
	}
	if (!x->p) {
		tfail("allocating %zu bytes failed", x->n);
		free(x);
		return NULL;
	}
	if (!is_aligned(x->p, 16))
		tfail("block %p of %zu bytes not 16-aligned", x->p, x->n);
	pat_fill_sparse(x->p, x->n, x->seed);
	return x;
}

static inline int rec_check(const rec_t *x, const char *when, uint32_t me)
{
	size_t bad = pat_check_sparse(x->p, x->n, x->seed);
	if (bad != SIZE_MAX) {
		tfail("%s: block %p (%zu bytes, made by thread %u, checked by %u) corrupt at offset %zu",
		      when, x->p, x->n, x->owner, me, bad);
		return -1;
	}
	return 0;
}

static inline void rec_free(rec_t *x, uint32_t me)
{
	rec_check(x, "before free", me);
	if (x->n > 4096 && (x->seed & 1))
		free_sized(x->p, x->n);
	else
		free(x->p);
	free(x);
}

/* Resizes the block (which may have been made by another thread) to a new
 * random size, checking what it keeps and refilling the pattern. */
static inline void rec_realloc(rec_t *x, rng_t *r, uint32_t me)
{
	size_t m = stress_size(r);
	if (rec_check(x, "before realloc", me))
		return;
	uint8_t *q = realloc(x->p, m);
	if (!q) {
		tfail("realloc(%p, %zu) failed", x->p, m);
		return;
	}
	size_t keep = m < x->n ? m : x->n;
	x->p = q;
	/* The sparse pattern depends on the size: check the kept prefix the
	 * simple way where it was fully written, then rewrite the block. */
	if (keep <= SPARSE_FULL && x->n <= SPARSE_FULL) {
		size_t bad = pat_check(q, 0, keep, x->seed);
		if (bad != SIZE_MAX)
			tfail("realloc %zu -> %zu lost byte %zu", x->n, m, bad);
	} else {
		size_t bad = pat_check(q, 0, keep < 4096 ? keep : 4096, x->seed);
		if (bad != SIZE_MAX)
			tfail("realloc %zu -> %zu lost byte %zu", x->n, m, bad);
	}
	x->n = m;
	pat_fill_sparse(q, m, x->seed);
}

#endif /* ARENA_TESTS_STRESS_H */
