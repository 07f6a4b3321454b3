/*
 * thp_bloat: resident memory of blocks just over a huge page, when
 * transparent huge pages (THP) fill in memory the allocator thinks is unused.
 *
 * The case comes from the seed thread (THP page faults break allocators'
 * purge accounting): with 4 MiB chunks, nearly 50% of the memory that many
 * 2.1 MiB blocks take can be waste (4 MiB resident per 2.1 MiB block),
 * because a THP page fault backs the untouched tail of each block's second
 * 2 MiB with a whole huge page, which the allocator still counts as clean
 * (nothing to purge).  The suggested cure
 * is to purge at 2 MiB boundaries in multiples of 2 MiB.
 *
 * Steps, each followed by a measurement:
 *   alloc   malloc blocks until the next one would take the bytes requested
 *           past -T; each block is written in full (memset) after its malloc.
 *   free    free half of the blocks, scattered: every other one in
 *           allocation order (-f alternate) or a random half (-f random).
 *   refill  malloc blocks again (with -s LO-HI, new random sizes) until the
 *           next one would pass -T, each written in full.
 *   trim    only with -t: malloc_trim(0).  glibc and libarena define it;
 *           jemalloc, tcmalloc and mimalloc do not, so under them the call
 *           reaches glibc's, which has nothing of theirs to give back.
 * A measurement is the bytes requested by the live blocks and, from
 * /proc/self/smaps_rollup, the process's Rss and AnonHugePages (the whole
 * process: its code, libraries and bookkeeping add 1-3 MiB, nothing at the
 * default 1 GiB but some percent in the tiny mode).  The first and last byte
 * of a block are checked before it is freed.
 *
 * THP emulation (-A): THP is often enabled=always in production, while
 * allocators in their default configuration get huge pages only where they
 * madvise(MADV_HUGEPAGE) when the machine is in madvise mode.  -A madvises
 * MADV_HUGEPAGE, before writing a new block, over the block rounded out to
 * 2 MiB boundaries (errors ignored: part of that range may be unmapped), which
 * is what enabled=always gives the block's memory.  An approximation: a page
 * the allocator itself wrote before returning the block (a header just before
 * it, a free-list word in it) was faulted in as a small page, and its 2 MiB
 * range stays small-paged, where always could have made it huge.
 *
 * Usage: thp_bloat [-T total] [-s size] [-f alternate|random] [-r seed]
 *                  [-t] [-A]
 *   -T  bytes requested at the peak (default 1G); suffixes K, M, G (KiB, MiB,
 *       GiB), decimals allowed: 16M, 1.5G.  -T 16M is the tiny mode for
 *       smoke tests (7 blocks of 2.1 MiB; about 0.05 s).
 *   -s  block size: N[K|M|G] (default 2.1M = 2202010 bytes), LO-HI (uniform
 *       in [LO, HI]), or mix (1M-3M).
 *   -f  which half is freed (default alternate); -r seeds random choices.
 * Prints on stdout one line per step,
 *   series step=<alloc|free|refill|trim> requested=<bytes> rss=<bytes> anonhuge=<bytes>
 * and then
 *   result rss_ratio_peak=<max over the steps of rss/requested>
 *          rss_ratio_final=<rss/requested at the last step>
 *          anonhuge_mib_peak=<max AnonHugePages, MiB>
 * (one line), and a human-readable line per step on stderr (with the
 * LazyFree bytes too: pages given back with MADV_FREE still count in Rss).
 *
 * Runs for bench/run (see bench/run --help for the syntax); THP is the point,
 * so the peers' huge-page configurations run too (BENCH thp), and the series
 * plot shows RSS / requested and AnonHugePages / requested per step:
 * BENCH thp: yes
 * BENCH ratio: rss_ratio_final
 * BENCH series: rss/requested, anonhuge/requested
 * BENCH tiny: -T 16M -s mix -f random -t -A
 * BENCH quick: 2.1M | -T 1G -s 2.1M -f alternate -t
 * BENCH quick: 4.1M | -T 1G -s 4.1M -f alternate
 * BENCH quick: mix | -T 1G -s mix -f random -t
 * BENCH quick: 2.1M-always | -T 1G -s 2.1M -f alternate -A
 * BENCH full: 2.1M-random | -T 1G -s 2.1M -f random -t
 * BENCH full: 4.1M-always | -T 1G -s 4.1M -f alternate -A
 * BENCH full: mix-always | -T 1G -s mix -f random -t -A
 * BENCH full: 2.1M-2G | -T 2G -s 2.1M -f alternate -t
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench.h"

#define MIB ((size_t)1 << 20)
#define HUGE_PAGE ((uintptr_t)2 << 20)
#define MAX_STEPS 4
#define MAX_BYTES 1000000000000000ull /* 1e15: -T and -s */

typedef struct block {
	unsigned char *p; /* NULL once freed */
	size_t size;
	unsigned char tag;
} block_t;

typedef struct step {
	const char *name;
	size_t requested, rss, anonhuge, lazyfree;
} step_t;

typedef struct bench {
	size_t total;      /* -T */
	size_t lo, hi;     /* block sizes, uniform in [lo, hi] */
	int random_half;   /* -f random */
	int trim;          /* -t */
	int advise;        /* -A */
	uint64_t rng;
	block_t *blocks;
	size_t nblocks, cap;
	size_t requested;  /* bytes of the live blocks */
	step_t steps[MAX_STEPS];
	unsigned nsteps;
} bench_t;

static size_t next_size(bench_t *b)
{
	if (b->lo == b->hi)
		return b->lo;
	return b->lo + (size_t)(xorshift64s(&b->rng) % (b->hi - b->lo + 1));
}

/* Reads "<key>   <n> kB" from smaps_rollup text; -1 if absent. */
static long long kib_field(const char *text, const char *key)
{
	size_t n = strlen(key);
	for (const char *s = text; s && *s; s = strchr(s, '\n'), s = s ? s + 1 : NULL)
		if (strncmp(s, key, n) == 0 && s[n] == ':')
			return strtoll(s + n + 1, NULL, 10);
	return -1;
}

/* Reads a small /proc file into buf (no stdio: nothing is malloc'd);
 * returns its length or -1. */
static ssize_t read_proc(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t len = 0;
	ssize_t got;
	while (len + 1 < cap && (got = read(fd, buf + len, cap - 1 - len)) != 0) {
		if (got < 0) {
			if (errno == EINTR)
				continue;
			close(fd);
			return -1;
		}
		len += (size_t)got;
	}
	close(fd);
	buf[len] = '\0';
	return (ssize_t)len;
}

/* Rss and AnonHugePages (and LazyFree) of this process, in bytes; falls
 * back on statm's resident pages (AnonHugePages then 0) without
 * smaps_rollup (Linux < 4.14).  Returns -1 if neither can be read. */
static int measure(step_t *st)
{
	char buf[4096];
	if (read_proc("/proc/self/smaps_rollup", buf, sizeof(buf)) > 0) {
		long long rss = kib_field(buf, "Rss"), huge = kib_field(buf, "AnonHugePages");
		long long lazy = kib_field(buf, "LazyFree");
		if (rss >= 0) {
			st->rss = (size_t)rss << 10;
			st->anonhuge = huge > 0 ? (size_t)huge << 10 : 0;
			st->lazyfree = lazy > 0 ? (size_t)lazy << 10 : 0;
			return 0;
		}
	}
	unsigned long long pages_total, resident;
	if (read_proc("/proc/self/statm", buf, sizeof(buf)) > 0 &&
	    sscanf(buf, "%llu %llu", &pages_total, &resident) == 2) {
		static int warned;
		if (!warned++)
			fprintf(stderr, "thp_bloat: no /proc/self/smaps_rollup: RSS from statm, "
					"AnonHugePages reported as 0\n");
		st->rss = (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
		st->anonhuge = st->lazyfree = 0;
		return 0;
	}
	return -1;
}

static double mib(size_t bytes)
{
	return (double)bytes / (double)MIB;
}

static int record(bench_t *b, const char *name)
{
	step_t *st = &b->steps[b->nsteps++];
	st->name = name;
	st->requested = b->requested;
	if (measure(st) < 0) {
		fprintf(stderr, "thp_bloat: cannot read /proc/self/smaps_rollup or statm\n");
		return -1;
	}
	printf("series step=%s requested=%zu rss=%zu anonhuge=%zu\n", name, st->requested,
	       st->rss, st->anonhuge);
	fflush(stdout); /* kept if a later step crashes */
	fprintf(stderr, "thp_bloat: %-6s requested %8.1f MiB  RSS %8.1f MiB (%.3f x)  "
			"AnonHugePages %7.1f MiB  LazyFree %.1f MiB\n", name, mib(st->requested),
		mib(st->rss), st->requested ? (double)st->rss / (double)st->requested : 0.0,
		mib(st->anonhuge), mib(st->lazyfree));
	return 0;
}

/* The block's memory as enabled=always would treat it: MADV_HUGEPAGE over
 * the 2 MiB-aligned range around it (partly unmapped, maybe: ignored). */
static void advise_huge(void *p, size_t size)
{
	uintptr_t lo = (uintptr_t)p & ~(HUGE_PAGE - 1);
	uintptr_t hi = ((uintptr_t)p + size + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
	(void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
}

/* Mallocs and writes blocks while the next fits in -T; -1 on failure. */
static int fill(bench_t *b)
{
	for (;;) {
		size_t size = next_size(b);
		if (b->requested + size > b->total)
			return 0;
		if (b->nblocks == b->cap) {
			fprintf(stderr, "thp_bloat: internal error: block table full\n");
			return -1;
		}
		unsigned char *p = malloc(size);
		if (!p) {
			fprintf(stderr, "thp_bloat: malloc(%zu) failed with %.1f MiB live\n", size,
				mib(b->requested));
			return -1;
		}
		if (b->advise)
			advise_huge(p, size);
		block_t *blk = &b->blocks[b->nblocks];
		blk->p = p;
		blk->size = size;
		blk->tag = (unsigned char)(1u + b->nblocks * 37u % 255u); /* never 0 */
		memset(p, blk->tag, size);
		b->nblocks++;
		b->requested += size;
	}
}

static int free_block(bench_t *b, block_t *blk)
{
	if (blk->p[0] != blk->tag || blk->p[blk->size - 1] != blk->tag) {
		fprintf(stderr, "thp_bloat: block %p (%zu bytes) was overwritten\n",
			(void *)blk->p, blk->size);
		return -1;
	}
	free(blk->p);
	blk->p = NULL;
	b->requested -= blk->size;
	return 0;
}

/* Frees half of the blocks (rounded down), scattered. */
static int free_half(bench_t *b)
{
	size_t n = b->nblocks, half = n / 2;
	if (!b->random_half) {
		for (size_t i = 1; i < n; i += 2)
			if (free_block(b, &b->blocks[i]) < 0)
				return -1;
		return 0;
	}
	/* A seeded random half: the first `half` of a partial Fisher-Yates
	 * shuffle of the indices, freed in that (random) order. */
	size_t *idx = malloc(n * sizeof(*idx));
	if (!idx)
		return -1;
	for (size_t i = 0; i < n; i++)
		idx[i] = i;
	int rc = 0;
	for (size_t i = 0; i < half && rc == 0; i++) {
		size_t j = i + (size_t)(xorshift64s(&b->rng) % (n - i));
		size_t t = idx[i];
		idx[i] = idx[j];
		idx[j] = t;
		rc = free_block(b, &b->blocks[idx[i]]);
	}
	free(idx);
	return rc;
}

static int free_all(bench_t *b)
{
	int rc = 0;
	for (size_t i = 0; i < b->nblocks; i++)
		if (b->blocks[i].p && free_block(b, &b->blocks[i]) < 0)
			rc = -1;
	return rc;
}

/* "123", "2.1M", "1G": bytes (K, M, G are powers of 1024), rounded to the
 * nearest byte, 1 to 1e15; -1 on a bad value. */
static int parse_bytes(const char *s, size_t *out)
{
	uint64_t v;
	if (parse_size(s, 1, MAX_BYTES, &v) < 0)
		return -1;
	*out = (size_t)v;
	return 0;
}

static int parse_sizes(const char *s, size_t *lo, size_t *hi)
{
	if (strcmp(s, "mix") == 0)
		s = "1M-3M";
	const char *dash = strchr(s, '-');
	if (!dash) {
		if (parse_bytes(s, lo) < 0)
			return -1;
		*hi = *lo;
		return 0;
	}
	char first[64];
	size_t n = (size_t)(dash - s);
	if (n == 0 || n >= sizeof(first))
		return -1;
	memcpy(first, s, n);
	first[n] = '\0';
	if (parse_bytes(first, lo) < 0 || parse_bytes(dash + 1, hi) < 0)
		return -1;
	return *hi >= *lo ? 0 : -1;
}

static void usage(void)
{
	fprintf(stderr, "usage: thp_bloat [-T total] [-s N|LO-HI|mix] [-f alternate|random] "
			"[-r seed] [-t] [-A]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	bench_t b = { .total = (size_t)1 << 30 };
	const char *size_arg = "2.1M";
	uint64_t seed = 1;
	int c;

	while ((c = getopt(argc, argv, "T:s:f:r:tAh")) != -1) {
		int bad = 0;
		switch (c) {
		case 'T': bad = parse_bytes(optarg, &b.total); break;
		case 's': size_arg = optarg; break;
		case 'f':
			if (strcmp(optarg, "random") == 0)
				b.random_half = 1;
			else if (strcmp(optarg, "alternate") == 0)
				b.random_half = 0;
			else
				bad = 1;
			break;
		case 'r': bad = parse_u64(optarg, 0, UINT64_MAX, &seed); break;
		case 't': b.trim = 1; break;
		case 'A': b.advise = 1; break;
		default: usage();
		}
		if (bad)
			usage();
	}
	if (optind != argc || parse_sizes(size_arg, &b.lo, &b.hi) < 0)
		usage();
	if (b.hi > b.total) {
		fprintf(stderr, "thp_bloat: -T %zu is smaller than a block (%zu bytes)\n",
			b.total, b.hi);
		return 2;
	}
	b.rng = splitmix64(seed) | 1;
	/* Blocks ever allocated: at most total/lo in each fill. */
	b.cap = 2 * (b.total / b.lo) + 2;
	b.blocks = calloc(b.cap, sizeof(*b.blocks));
	if (!b.blocks)
		return 1;

	int rc = fill(&b);
	size_t first_fill = b.nblocks;
	rc = rc ? rc : record(&b, "alloc");
	rc = rc ? rc : free_half(&b);
	rc = rc ? rc : record(&b, "free");
	rc = rc ? rc : fill(&b);
	rc = rc ? rc : record(&b, "refill");
	if (!rc && b.trim) {
		malloc_trim(0);
		rc = record(&b, "trim");
	}
	if (rc) {
		fprintf(stderr, "thp_bloat: failed\n");
		return 1;
	}

	double peak = 0, final = 0;
	size_t huge_peak = 0;
	for (unsigned i = 0; i < b.nsteps; i++) {
		const step_t *st = &b.steps[i];
		double r = st->requested ? (double)st->rss / (double)st->requested : 0.0;
		peak = r > peak ? r : peak;
		final = r;
		huge_peak = st->anonhuge > huge_peak ? st->anonhuge : huge_peak;
	}
	fprintf(stderr, "thp_bloat: %zu + %zu blocks of %s (%zu-%zu bytes), %s freed%s%s: "
			"RSS / requested peak %.3f, final %.3f; AnonHugePages peak %.1f MiB\n",
		first_fill, b.nblocks - first_fill, size_arg, b.lo, b.hi,
		b.random_half ? "a random half" : "every other block", b.trim ? ", trimmed" : "",
		b.advise ? ", THP advised (-A)" : "", peak, final, mib(huge_peak));
	printf("result rss_ratio_peak=%.4f rss_ratio_final=%.4f anonhuge_mib_peak=%.1f\n",
	       peak, final, mib(huge_peak));
	fflush(stdout);
	rc = free_all(&b);
	free(b.blocks);
	return rc ? 1 : 0;
}
