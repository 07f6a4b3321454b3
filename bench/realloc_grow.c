/*
 * realloc_grow: a block grown by realloc, its new tail written each time.
 *
 * The realloc micro-benchmarks of the MREMAP_NOHOLE thread (linux-mm, 2015;
 * glibc 32.8 s, jemalloc 70.4 s, tcmalloc 68.8 s there): glibc grows a block
 * above its mmap threshold with mremap, which moves page tables and copies
 * nothing; an allocator that copies pays a memcpy of the old content and the
 * page faults of the new block.  One round: ptr = NULL, then for each size
 * of the growth pattern, ptr = realloc(ptr, size) and memset of the NEW part
 * [old size, size); free(ptr) at the end of the round.  Sizes go from the
 * start size, multiplied by the factor (rounded down, at least +1 byte), for
 * as long as they do not exceed the maximum (so 4 MiB doubling to 512 MiB is
 * 4, 8, ..., 512 MiB, as the seed's `size < 1 GiB`).
 *   -m seed1        the seed's first program: start 4 MiB, factor 2, 1 round
 *   -m seed2        (default) its second: start 4 B, factor 2, 64 rounds
 *   -m grow15       as seed2 with factor 1.5 (a vector growing by half)
 *   -m interleaved  a growth pattern (-g, default seed2) with, around every
 *                   realloc, a 1 MiB block malloc'ed and written (one byte
 *                   per 4 KiB) before it and freed after it, as in the
 *                   seed's commented-out variant, so that the memory right
 *                   after the growing block may be taken and growing in
 *                   place is not free.  -h size: the interleaved block's
 *                   size (default 1 MiB); -k: keep each one to the end of
 *                   the round (live blocks among the growing one's moves)
 *   -m floor        no malloc at all: one mmap of the final size, rounded up
 *                   to and aligned on 2 MiB (-H: also madvise MADV_HUGEPAGE),
 *                   then the same byte ranges of the pattern (-g, default
 *                   seed2) written in the same order, with the same checks:
 *                   the cost of writing the bytes plus their page faults,
 *                   the floor a realloc is judged against.  The mapping is
 *                   made once, so rounds after the first fault nothing (the
 *                   floor of an allocator that keeps the block); -u unmaps
 *                   it at the end of each round and maps it anew at the
 *                   start of the next (the floor of one that returns it).
 * -s, -f and -r override the pattern's start size, factor and rounds.
 *
 * Check: after each realloc of a non-NULL block, the first byte and the last
 * byte of the part written so far must have survived (each step writes its
 * own byte value, which changes with the round too), and in interleaved
 * mode, so must the 1 MiB block's bytes; the whole block's ends are checked
 * again before the free.  A mismatch is reported on stderr: exit status 1.
 * An asm barrier after each memset keeps gcc from dropping the last one as a
 * dead store before free().
 *
 * Timing: CLOCK_MONOTONIC from before the first round to after the last
 * (every realloc, memset, check, 1 MiB block and free; in floor mode the
 * mmap and madvise, and with -u every munmap, but not the final munmap).
 * Minor faults of that span (getrusage) go to stderr, with per-round times.
 *
 * Usage: realloc_grow [-m seed1|seed2|grow15|interleaved|floor]
 *                     [-g seed1|seed2|grow15] [-M max] [-s start]
 *                     [-f factor] [-r rounds] [-H] [-u] [-h size] [-k]
 *   sizes in bytes or with a suffix k, m, g (KiB, MiB, GiB), fractions
 *   allowed (1.5m); -M default 512m; -f > 1; -H and -u in floor mode only.
 *   Tiny mode for CI smoke tests, well under a second in every mode:
 *   -M 8388608 -r 2 (e.g. realloc_grow -m interleaved -M 8388608 -r 2).
 * Prints "result ms=<ms of the rounds> moves=<reallocs that returned a
 * different address> reallocs=<reallocs of a non-NULL block>" on stdout (the
 * realloc(NULL, start) opening each round is not counted; floor mode: 0 and
 * 0) and a human-readable account on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax).  Quick runs take
 * 0.5-2.5 s each under glibc on the 2-vCPU development VM (a 4 KiB page
 * fault costs 3-7 us there, so 512 MiB of fresh memory is ~0.5-1 s of
 * faults); the seed's second program (64 rounds to 512 MiB) would take ~50
 * s, hence fewer rounds or a smaller maximum.  Full runs: up to ~20 s under
 * glibc.  The -rN rows repeat the growth N times, the block freed between
 * rounds, for both patterns (seed1: 4 MiB up, seed2: 4 B up) and both
 * factors (x2, and x1.5 with -f 1.5): seed1-r3-1g is 4, 8, ... 1024 MiB
 * three times; seed1-x1.5-r3-1g 4 MiB x 1.5 up to 778 MiB (the last size
 * <= 1 GiB) three times; seed2-r8-512m (the same arguments as the full
 * seed2-r8) is 4 B doubling to 512 MiB eight times (x1.5 eight times:
 * the full grow15-r8).
 * BENCH tiny: -m interleaved -M 8388608 -r 2
 * BENCH thp: yes
 * BENCH quick: seed1 | -m seed1
 * BENCH quick: seed2-r4-128m | -m seed2 -r 4 -M 128m
 * BENCH quick: grow15-r4-128m | -m grow15 -r 4 -M 128m
 * BENCH quick: interleaved-r4-128m | -m interleaved -g seed2 -r 4 -M 128m
 * BENCH quick: interleaved-keep-r4-128m | -m interleaved -g seed2 -r 4 -M 128m -h 2m -k
 * BENCH quick: floor-seed1 | -m floor -g seed1
 * BENCH quick: floor-seed1-thp | -m floor -g seed1 -H
 * BENCH quick: seed1-r3-1g | -m seed1 -r 3 -M 1g
 * BENCH quick: seed1-x1.5-r3-1g | -m seed1 -f 1.5 -r 3 -M 1g
 * BENCH quick: seed2-r4-512m | -m seed2 -r 4 -M 512m
 * BENCH quick: seed2-x1.5-r4-512m | -m seed2 -f 1.5 -r 4 -M 512m
 * BENCH quick: seed2-r8-512m | -m seed2 -r 8 -M 512m
 * BENCH full: seed1-r8 | -m seed1 -r 8
 * BENCH full: seed2-r8 | -m seed2 -r 8
 * BENCH full: seed2-128m | -m seed2 -M 128m
 * BENCH full: grow15-r8 | -m grow15 -r 8
 * BENCH full: interleaved-r8 | -m interleaved -g seed2 -r 8
 * BENCH full: interleaved-seed1 | -m interleaved -g seed1
 * BENCH full: interleaved-keep-r8 | -m interleaved -g seed2 -r 8 -h 2m -k
 * BENCH full: floor-seed2-r8 | -m floor -g seed2 -r 8
 * BENCH full: floor-seed2-r8-fresh | -m floor -g seed2 -r 8 -u
 * BENCH full: floor-seed2-r8-thp-fresh | -m floor -g seed2 -r 8 -H -u
 * BENCH full: floor-grow15-r8-fresh | -m floor -g grow15 -r 8 -u
 * BENCH full: seed1-r8-1g | -m seed1 -r 8 -M 1g
 * BENCH full: seed1-x1.5-r8-1g | -m seed1 -f 1.5 -r 8 -M 1g
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"

#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)
#define PAGE 4096
#define HOLE_SIZE MIB       /* interleaved mode's block, by default */
#define ALIGN (2 * MIB)     /* floor mode's mapping: a huge page */
#define MAX_LIMIT (64 * GIB) /* sanity bound for -M */

enum mode { MODE_SEED1, MODE_SEED2, MODE_GROW15, MODE_INTERLEAVED, MODE_FLOOR };
static const char *const mode_names[] = { "seed1", "seed2", "grow15", "interleaved", "floor" };

typedef struct pattern {
	size_t start;
	double factor;
	uint64_t rounds;
} pattern_t;

/* Indexed by the modes that are patterns (seed1, seed2, grow15). */
static const pattern_t patterns[] = {
	{ 4 * MIB, 2.0, 1 },
	{ 4, 2.0, 64 },
	{ 4, 1.5, 64 },
};

typedef struct config {
	enum mode mode;
	enum mode pattern;      /* seed1, seed2 or grow15 */
	size_t start, max;
	double factor;
	uint64_t rounds;
	int huge, fresh;        /* floor: -H, -u */
	size_t hole;            /* interleaved: -h, the interleaved block's size */
	int keep;               /* interleaved: -k, keep them to the round's end */
} config_t;

typedef struct stats {
	uint64_t reallocs, moves;
	uint64_t steps;         /* sizes per round */
	size_t final;           /* the last size of a round */
} stats_t;

/* Tells gcc that the block's bytes are used: no dead-store elimination. */
static inline void escape(void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

static size_t next_size(size_t size, double factor)
{
	double n = floor((double)size * factor);
	size_t next = n >= (double)(SIZE_MAX / 2) ? SIZE_MAX / 2 : (size_t)n;
	return next > size ? next : size + 1;
}

/* The byte value that step `step` of round `round` writes: 1..255. */
static unsigned char tag(uint64_t round, uint64_t step)
{
	return (unsigned char)(1 + (round * 37 + step * 11) % 255);
}

static int check_ends(const unsigned char *p, size_t len, unsigned char first,
		      unsigned char last, uint64_t round, uint64_t step, const char *when)
{
	if (p[0] == first && p[len - 1] == last)
		return 0;
	fprintf(stderr, "realloc_grow: round %" PRIu64 " step %" PRIu64 " %s, block %p: "
		"byte 0 is 0x%02x (want 0x%02x), byte %zu is 0x%02x (want 0x%02x)\n",
		round + 1, step, when, (const void *)p, p[0], first, len - 1, p[len - 1], last);
	return -1;
}

static void hole_write(unsigned char *hole, size_t size, unsigned char value)
{
	for (size_t off = 0; off < size; off += PAGE)
		hole[off] = value;
}

static int hole_check(const unsigned char *hole, size_t size, unsigned char value,
		      uint64_t round, uint64_t step)
{
	for (size_t off = 0; off < size; off += PAGE) {
		if (hole[off] != value) {
			fprintf(stderr, "realloc_grow: round %" PRIu64 " step %" PRIu64
				": the interleaved block %p was overwritten at offset %zu "
				"(0x%02x, want 0x%02x) by the realloc\n",
				round + 1, step, (const void *)hole, off, hole[off], value);
			return -1;
		}
	}
	return 0;
}

/* -k: the interleaved blocks of a round, kept until its end. */
#define MAX_KEPT 256
typedef struct kept {
	unsigned char *block[MAX_KEPT];
	unsigned char tag[MAX_KEPT];
	size_t n;
} kept_t;

/* Checks and frees the kept blocks; -1 if one was overwritten. */
static int kept_release(const config_t *c, kept_t *k, uint64_t round)
{
	int rc = 0;
	for (size_t i = 0; i < k->n; i++) {
		if (rc == 0 && hole_check(k->block[i], c->hole, k->tag[i], round, i) < 0)
			rc = -1;
		free(k->block[i]);
	}
	k->n = 0;
	return rc;
}

/*
 * One round of growth.  With base (floor mode) every "realloc" is the
 * mapping at base; otherwise the block is grown by realloc (with an
 * interleaved block malloc'ed before each call if interleave: freed after
 * the call, or with -k kept to the end of the round).  Returns -1 on
 * failure.
 */
static int grow_round(const config_t *c, uint64_t round, unsigned char *base, int interleave,
		      stats_t *st)
{
	static kept_t kept;
	unsigned char *p = NULL, first = 0, last = 0;
	size_t old = 0;
	uint64_t step = 0;

	for (size_t size = c->start; size <= c->max; size = next_size(size, c->factor), step++) {
		unsigned char *hole = NULL, *q;
		unsigned char hole_tag = (unsigned char)~tag(round, step);

		if (interleave) {
			hole = malloc(c->hole);
			if (!hole) {
				fprintf(stderr, "realloc_grow: malloc(%zu) failed\n", c->hole);
				free(p);
				return -1;
			}
			hole_write(hole, c->hole, hole_tag);
		}
		if (base) {
			q = base;
		} else {
			q = realloc(p, size);
			if (!q) {
				fprintf(stderr, "realloc_grow: realloc(%p, %zu) failed\n", (void *)p, size);
				free(hole);
				free(p);
				return -1;
			}
		}
		if (p) {
			st->reallocs += !base;
			st->moves += q != p;
		}
		if (old && check_ends(q, old, first, last, round, step, "after realloc") < 0)
			return -1;
		if (hole && c->keep && kept.n < MAX_KEPT) {
			kept.block[kept.n] = hole;
			kept.tag[kept.n++] = hole_tag;
		} else if (hole) {
			if (hole_check(hole, c->hole, hole_tag, round, step) < 0)
				return -1;
			free(hole);
		}
		p = q;
		last = tag(round, step);
		if (step == 0)
			first = last;
		memset(p + old, last, size - old);
		escape(p);
		old = size;
	}
	if (step == 0)
		return 0;
	if (check_ends(p, old, first, last, round, step, "before free") < 0)
		return -1;
	if (!base)
		free(p);
	if (kept_release(c, &kept, round) < 0)
		return -1;
	st->steps = step;
	st->final = old;
	return 0;
}

static size_t final_size(const config_t *c)
{
	size_t last = 0;
	for (size_t size = c->start; size <= c->max; size = next_size(size, c->factor))
		last = size;
	return last;
}

/* An anonymous mapping of len bytes (a multiple of ALIGN) aligned on ALIGN. */
static unsigned char *map_aligned(size_t len, int huge)
{
	unsigned char *raw = mmap(NULL, len + ALIGN, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED) {
		fprintf(stderr, "realloc_grow: mmap(%zu): %s\n", len + ALIGN, strerror(errno));
		return NULL;
	}
	uintptr_t a = ((uintptr_t)raw + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1);
	unsigned char *base = (unsigned char *)a;
	size_t head = (size_t)(base - raw), tail = ALIGN - head;
	if (head)
		munmap(raw, head);
	if (tail)
		munmap(base + len, tail);
	if (huge && madvise(base, len, MADV_HUGEPAGE) != 0) {
		fprintf(stderr, "realloc_grow: madvise(MADV_HUGEPAGE): %s\n", strerror(errno));
		munmap(base, len);
		return NULL;
	}
	return base;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int parse_name(const char *s, int n, enum mode *out)
{
	for (int i = 0; i < n; i++) {
		if (strcmp(s, mode_names[i]) == 0) {
			*out = (enum mode)i;
			return 0;
		}
	}
	return -1;
}

static void usage(void)
{
	fprintf(stderr, "usage: realloc_grow [-m seed1|seed2|grow15|interleaved|floor] "
			"[-g seed1|seed2|grow15] [-M max] [-s start] [-f factor] [-r rounds] "
			"[-H] [-u] [-h size] [-k]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	config_t c = { .mode = MODE_SEED2, .pattern = MODE_SEED2 };
	uint64_t max = 512 * MIB, start = 0, rounds = 0, hole = HOLE_SIZE;
	double factor = 0;
	int have_pattern = 0, opt;

	while ((opt = getopt(argc, argv, "m:g:M:s:f:r:Huh:k")) != -1) {
		int bad = 0;
		switch (opt) {
		case 'm': bad = parse_name(optarg, 5, &c.mode); break;
		case 'g': bad = parse_name(optarg, 3, &c.pattern); have_pattern = 1; break;
		case 'M': bad = parse_size(optarg, 1, MAX_LIMIT, &max); break;
		case 's': bad = parse_size(optarg, 1, MAX_LIMIT, &start); break;
		case 'f': bad = parse_double(optarg, 1.0, 64.0, &factor); break;
		case 'r': bad = parse_u64(optarg, 1, 1000000, &rounds); break;
		case 'H': c.huge = 1; break;
		case 'u': c.fresh = 1; break;
		case 'h': bad = parse_size(optarg, PAGE, MAX_LIMIT, &hole); break;
		case 'k': c.keep = 1; break;
		default: usage();
		}
		if (bad)
			usage();
	}
	if (optind != argc)
		usage();
	if (c.mode <= MODE_GROW15) {
		if (have_pattern) {
			fprintf(stderr, "realloc_grow: -g is for -m interleaved and -m floor\n");
			usage();
		}
		c.pattern = c.mode;
	}
	if ((c.huge || c.fresh) && c.mode != MODE_FLOOR) {
		fprintf(stderr, "realloc_grow: -H and -u are for -m floor\n");
		usage();
	}
	if ((hole != HOLE_SIZE || c.keep) && c.mode != MODE_INTERLEAVED) {
		fprintf(stderr, "realloc_grow: -h and -k are for -m interleaved\n");
		usage();
	}
	c.hole = (size_t)hole;
	c.max = (size_t)max;
	c.start = start ? (size_t)start : patterns[c.pattern].start;
	c.factor = factor ? factor : patterns[c.pattern].factor;
	c.rounds = rounds ? rounds : patterns[c.pattern].rounds;
	if (c.start > c.max) {
		fprintf(stderr, "realloc_grow: start size %zu exceeds the maximum %zu\n",
			c.start, c.max);
		return 2;
	}

	size_t final = final_size(&c);
	size_t map_len = (final + ALIGN - 1) & ~(ALIGN - 1);
	double *round_ms = calloc(c.rounds, sizeof(*round_ms));
	if (!round_ms)
		return 1;
	stats_t st = { 0 };
	unsigned char *base = NULL;
	int failed = 0;

	long flt0 = minor_faults();
	double t0 = now_sec(), t = t0;
	for (uint64_t r = 0; r < c.rounds && !failed; r++) {
		if (c.mode == MODE_FLOOR && (r == 0 || c.fresh)) {
			base = map_aligned(map_len, c.huge);
			if (!base) {
				failed = 1;
				break;
			}
		}
		failed = grow_round(&c, r, base, c.mode == MODE_INTERLEAVED, &st) < 0;
		if (c.mode == MODE_FLOOR && c.fresh) {
			munmap(base, map_len);
			base = NULL;
		}
		double t1 = now_sec();
		round_ms[r] = (t1 - t) * 1e3;
		t = t1;
	}
	double ms = (t - t0) * 1e3;
	long faults = minor_faults() - flt0;
	if (base)
		munmap(base, map_len);
	if (failed) {
		fprintf(stderr, "realloc_grow: failed\n");
		return 1;
	}

	char what[160];
	if (c.mode == MODE_FLOOR)
		snprintf(what, sizeof(what), "floor of %s%s%s", mode_names[c.pattern],
			 c.huge ? ", MADV_HUGEPAGE" : "", c.fresh ? ", fresh mapping each round" : "");
	else if (c.mode == MODE_INTERLEAVED)
		snprintf(what, sizeof(what), "interleaved, pattern %s", mode_names[c.pattern]);
	else
		snprintf(what, sizeof(what), "%s", mode_names[c.mode]);
	double mib = (double)st.final * (double)c.rounds / (double)MIB;
	char moved[80] = "no malloc";
	if (c.mode != MODE_FLOOR)
		snprintf(moved, sizeof(moved), "%" PRIu64 " of %" PRIu64 " reallocs moved the block",
			 st.moves, st.reallocs);
	fprintf(stderr, "realloc_grow: %s: %" PRIu64 " round(s) of %" PRIu64 " sizes, %zu B x %g"
		" up to %zu B (max %zu): %.1f ms, %s; %ld minor faults for %.0f MiB written"
		" (%.1f per MiB)\n", what, c.rounds, st.steps, c.start, c.factor, st.final, c.max,
		ms, moved, faults, mib, mib > 0 ? (double)faults / mib : 0.0);
	if (c.rounds > 1) {
		double first = round_ms[0];
		qsort(round_ms + 1, c.rounds - 1, sizeof(*round_ms), cmp_double);
		fprintf(stderr, "realloc_grow: round 1 %.1f ms; rounds 2-%" PRIu64
			" median %.1f ms (%.1f-%.1f)\n", first, c.rounds,
			round_ms[1 + (c.rounds - 1) / 2], round_ms[1], round_ms[c.rounds - 1]);
	}
	free(round_ms);
	printf("result ms=%.3f moves=%" PRIu64 " reallocs=%" PRIu64 "\n", ms, st.moves, st.reallocs);
	return 0;
}
