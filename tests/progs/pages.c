/*
 * Page states, purging and transparent huge pages, seen from a program.
 * Run by test_pages.c under LD_PRELOAD=libarena.so with ARENA_CONF set: the
 * configuration is read once at start-up, so every configuration is a fresh
 * process.
 *
 *   pages SCENARIO [MODE]
 *
 * Each scenario prints what it saw as "key=value" lines (bytes, counts),
 * checks what its configuration promises, and prints one "FAIL: ..." line per
 * broken promise (exit 1), else "ok" (exit 0).  Every scenario keeps live
 * blocks (small, large, huge, one huge block on each side of the block it
 * frees) and checks their patterns after every purge: purging must never
 * destroy live data.
 *
 * Scenarios (the configuration test_pages.c gives them):
 *   at_once dontneed|free|nofree   decay_ms:0 with purge:dontneed / purge:free /
 *                                  purge:free,sim_no_madv_free:true
 *   no_purge                       purge:off (default decay, decay_ms:0, decay_ms:100), decay_ms:-1
 *   decay                          decay_ms:200
 *   background huge|large|fine     background_thread:true,decay_ms:100 (fine: + fine_purge:true)
 *   trim                           default
 *   fine purged|lazy|kept          fine_purge:..,decay_ms:0 (...)
 *   stale -                        fine_purge:true,decay_ms:100
 *   thp default|always|never|none  decay_ms:0 (+ thp:always / thp:never / sim_no_thp:true)
 *   sparse default|never|always    default, thp:never (thp:always: no check)
 *   stats                          default
 *   decide real|cheap|costly|unformed|calloc|off|always|never
 *                                  the run-time huge-page decision: default,
 *                                  sim_thp_probe:cheap/costly/unformed, default
 *                                  with calloc only, sim_thp:never or sim_no_thp,
 *                                  thp:always, thp:never (decay_ms:-1)
 *   dense touched|grown|always|kept  decay_ms:10,tcache:false (+ background_thread:true but
 *                                  for kept; always: + thp:always; grown: + sim_thp_probe:cheap)
 *   grow born|checked|timed|none   sim_thp_probe:cheap, sim_thp_probe:costly, default
 *                                  (none: thp:never / sim_no_thp:true / fine_purge:true)
 *   regrow born|none               decay_ms:5000 (born: + sim_thp_probe:cheap; none: + thp:never /
 *                                  dirty_cap:off / sim_no_thp:true)
 *   refill collapse|none           decay_ms:5000 (+ thp:never / dirty_cap:off / sim_no_thp:true)
 */
#include <dlfcn.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/utsname.h>

#include "arena.h"
#include "common.h"
#include "prog_check.h"

static int (*stats_get)(arena_stats_t *);
static size_t (*purge_now)(void);
static size_t (*anon_huge)(void);


#define ALIGN_UP_PAGE(x) (((x) + 4095) & ~(size_t)4095)
#define ALIGN_UP_2M(x) (((x) + (2 * MiB - 1)) & ~(uintptr_t)(2 * MiB - 1))

#define BIG (256 * MiB)  /* the block that is freed and purged */
#define TOL (8 * MiB)    /* slack for metadata, caches, other blocks */

static double mib(size_t b)
{
	return (double)b / (double)MiB;
}

static void snap(arena_stats_t *s)
{
	if (stats_get(s) != 0) {
		printf("FAIL: arena_stats_get failed\n");
		exit(3);
	}
}

/* a - b for counters that only grow (0 if one went backwards). */
static size_t grew(uint64_t a, uint64_t b)
{
	return a > b ? (size_t)(a - b) : 0;
}

/* Prints the state of free memory and what was purged since base. */
static void facts(const char *tag, const arena_stats_t *s, const arena_stats_t *base, size_t rss)
{
	printf("%s.dirty=%zu\n%s.lazy=%zu\n%s.zero=%zu\n", tag, s->dirty, tag, s->lazy, tag, s->zero);
	printf("%s.purged_dontneed=%zu\n%s.purged_free=%zu\n", tag,
	       grew(s->purged_dontneed, base->purged_dontneed), tag,
	       grew(s->purged_free, base->purged_free));
	printf("%s.rss=%zu\n", tag, rss);
}

/* ---- live blocks --------------------------------------------------------------------- */

typedef struct blk {
	uint8_t *p;
	size_t n;
	uint32_t seed;
} blk_t;

#define NLIVE 32
static blk_t live[NLIVE];
static int nlive;

static uint8_t *live_add(size_t n)
{
	uint8_t *p = malloc(n);
	if (!p) {
		printf("FAIL: malloc(%zu) for a live block failed\n", n);
		exit(3);
	}
	uint32_t seed = 1000u + (uint32_t)nlive;
	pat_fill_sparse(p, n, seed);
	if (nlive < NLIVE)
		live[nlive++] = (blk_t){ p, n, seed };
	return p;
}

/* Small, large and one huge block (which lands before the next huge one). */
static void live_setup(void)
{
	static const size_t sizes[] = { 24, 100, 500, 3000, 16000, 20000, 100000, 300000, MiB,
					3 * MiB + 4321 };
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
		live_add(sizes[i]);
}

static void live_check(const char *when)
{
	for (int i = 0; i < nlive; i++) {
		size_t bad = pat_check_sparse(live[i].p, live[i].n, live[i].seed);
		CHECK(bad == SIZE_MAX, "%s: live block %p of %zu bytes corrupt at offset %zu", when,
		      (void *)live[i].p, live[i].n, bad);
	}
}

static uint8_t *written(size_t n, uint32_t seed)
{
	uint8_t *p = malloc(n);
	if (!p) {
		printf("FAIL: malloc(%zu) failed\n", n);
		exit(3);
	}
	pat_fill_sparse(p, n, seed);
	return p;
}

/* Sleeps without calling the allocator. */
static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L }, rem;
	while (nanosleep(&ts, &rem) != 0 && errno == EINTR)
		ts = rem;
}

/* live blocks, then BIG written, then a huge live block after it. */
static uint8_t *setup_big(void)
{
	live_setup();
	uint8_t *b = written(BIG, 7);
	live_add(4 * MiB + 1234);
	return b;
}

/* The start of the purge scenarios: the big block written next to the live
 * ones, then freed; statistics and RSS before (s0, rss0) and after (s1,
 * rss1), the "freed" facts printed.  Returns the freed block's address (to
 * compare with later blocks only). */
static uintptr_t free_big(arena_stats_t *s0, size_t *rss0, arena_stats_t *s1, size_t *rss1)
{
	uint8_t *b = setup_big();
	snap(s0);
	*rss0 = rss_bytes();
	uintptr_t addr = (uintptr_t)b;
	free(b);
	snap(s1);
	*rss1 = rss_bytes();
	facts("freed", s1, s0, *rss1);
	return addr;
}

/* ---- at_once: decay_ms:0, purge:dontneed|free (sim_no_madv_free) --------------------- */

static void at_once(const char *mode)
{
	int dontneed = !strcmp(mode, "dontneed"), lazy = !strcmp(mode, "free"),
	    nofree = !strcmp(mode, "nofree");
	arena_stats_t s0, s1, s2, s3, s4, s5;
	size_t rss0, rss1;
	uintptr_t b = free_big(&s0, &rss0, &s1, &rss1);
	printf("freed.rss_drop=%zd\n", (ssize_t)(rss0 - rss1));
	live_check("after free");
	size_t pd = grew(s1.purged_dontneed, s0.purged_dontneed);
	size_t pf = grew(s1.purged_free, s0.purged_free);
	if (dontneed || nofree) {
		CHECK(pd >= BIG, "freeing 256 MiB purged only %.1f MiB with MADV_DONTNEED", mib(pd));
		CHECK(s1.dirty <= TOL, "after the free dirty = %.1f MiB, expected it purged at once",
		      mib(s1.dirty));
		CHECK(rss1 + BIG - TOL <= rss0, "RSS went %.1f -> %.1f MiB: the freed 256 MiB did not go back",
		      mib(rss0), mib(rss1));
	}
	if (nofree) {
		CHECK(s1.purged_free == 0, "sim_no_madv_free: purged_free = %.1f MiB, expected 0",
		      mib(s1.purged_free));
		CHECK(s1.lazy == 0, "sim_no_madv_free: lazy = %.1f MiB, expected 0", mib(s1.lazy));
	}
	if (lazy) {
		CHECK(pf >= BIG, "purge:free: purged_free grew by %.1f MiB, expected >= 256",
		      mib(pf));
		CHECK(s1.lazy >= BIG, "purge:free: lazy = %.1f MiB, expected >= 256", mib(s1.lazy));
		CHECK(s1.dirty <= TOL, "purge:free: dirty = %.1f MiB after the free", mib(s1.dirty));
		CHECK(pd < BIG, "purge:free: purged_dontneed grew by %.1f MiB", mib(pd));
	}

	/* calloc of the same size takes the purged chunks back: zero, and
	 * without writing them only if they are known zero. */
	snap(&s2);
	uint8_t *c = calloc(1, BIG);
	snap(&s3);
	CHECK(c != NULL, "calloc(256 MiB) failed");
	if (c) {
		size_t skipped = grew(s3.memset_skipped, s2.memset_skipped);
		printf("calloc.same_address=%d\ncalloc.memset_skipped=%zu\n", (uintptr_t)c == b, skipped);
		size_t nz = first_nonzero(c, BIG);
		CHECK(nz == SIZE_MAX, "calloc(256 MiB) after the purge: byte %zu is 0x%02x", nz,
		      nz == SIZE_MAX ? 0 : c[nz]);
		if (dontneed || nofree)
			CHECK(skipped >= BIG, "calloc over DONTNEED-purged chunks wrote them: memset_skipped grew by %.1f MiB",
			      mib(skipped));
		if (lazy)
			CHECK(skipped < BIG, "calloc over MADV_FREE'd chunks skipped %.1f MiB of memset",
			      mib(skipped));
		free(c);
	}
	live_check("after calloc");

	/* malloc of the same size: writable, keeps what is written. */
	uint8_t *m = written(BIG, 8);
	size_t bad = pat_check_sparse(m, BIG, 8);
	CHECK(bad == SIZE_MAX, "malloc(256 MiB) after the purge: byte %zu does not keep its value", bad);
	free(m);

	/* arena_purge: everything purgeable, now, with MADV_DONTNEED. */
	snap(&s4);
	size_t rss4 = rss_bytes();
	size_t ret = purge_now();
	snap(&s5);
	size_t rss5 = rss_bytes();
	facts("purged", &s5, &s4, rss5);
	printf("purged.returned=%zu\n", ret);
	CHECK(s5.dirty == 0 && s5.lazy == 0, "after arena_purge(): dirty %zu, lazy %zu bytes",
	      s5.dirty, s5.lazy);
	if (lazy) {
		size_t d = grew(s5.purged_dontneed, s4.purged_dontneed);
		CHECK(s4.lazy >= BIG, "purge:free: lazy = %.1f MiB after the second free", mib(s4.lazy));
		CHECK(d >= BIG, "arena_purge() purged %.1f MiB of lazily freed memory with DONTNEED",
		      mib(d));
		CHECK(rss5 + BIG - TOL <= rss4, "arena_purge(): RSS went %.1f -> %.1f MiB",
		      mib(rss4), mib(rss5));
	}
	live_check("after arena_purge");
}

/* ---- no_purge: purge:off, decay_ms:-1 ------------------------------------------------------ */

static void no_purge(void)
{
	arena_stats_t s0, s1, s2, s3;
	size_t rss0, rss1;
	free_big(&s0, &rss0, &s1, &rss1);
	CHECK(s1.dirty >= BIG, "after the free dirty = %.1f MiB, expected the 256 MiB kept",
	      mib(s1.dirty));
	CHECK(s1.purged_dontneed == s0.purged_dontneed && s1.purged_free == s0.purged_free,
	      "something was purged at the free");
	CHECK(rss1 + TOL >= rss0, "RSS went %.1f -> %.1f MiB", mib(rss0), mib(rss1));

	/* time passes and a chunk is taken and given back: still nothing */
	sleep_ms(300);
	uint8_t *h = written(4 * MiB, 9);
	free(h);
	snap(&s2);
	size_t rss2 = rss_bytes();
	facts("later", &s2, &s0, rss2);
	CHECK(s2.dirty >= BIG, "300 ms later dirty = %.1f MiB", mib(s2.dirty));
	CHECK(s2.purged_dontneed == s0.purged_dontneed && s2.purged_free == s0.purged_free,
	      "decay purged %.1f MiB although purging is off",
	      mib(grew(s2.purged_dontneed + s2.purged_free, s0.purged_dontneed + s0.purged_free)));
	CHECK(rss2 + TOL >= rss0, "RSS went %.1f -> %.1f MiB", mib(rss0), mib(rss2));
	live_check("later");

	size_t ret = purge_now();
	snap(&s3);
	size_t rss3 = rss_bytes();
	facts("purged", &s3, &s2, rss3);
	printf("purged.returned=%zu\n", ret);
	CHECK(ret >= BIG, "arena_purge() returned %zu", ret);
	CHECK(grew(s3.purged_dontneed, s2.purged_dontneed) >= BIG,
	      "arena_purge() purged %.1f MiB with DONTNEED",
	      mib(grew(s3.purged_dontneed, s2.purged_dontneed)));
	CHECK(s3.dirty == 0, "after arena_purge() dirty = %zu", s3.dirty);
	CHECK(rss3 + BIG - TOL <= rss2, "arena_purge(): RSS went %.1f -> %.1f MiB", mib(rss2),
	      mib(rss3));
	live_check("after arena_purge");
}

/* ---- decay: decay_ms:200 ------------------------------------------------------------------ */

static void decay(void)
{
	arena_stats_t s0, s1, s2, s3;
	size_t rss0, rss1;
	free_big(&s0, &rss0, &s1, &rss1);
	CHECK(s1.dirty >= BIG, "right after the free dirty = %.1f MiB, expected >= 256 (decay_ms:200)",
	      mib(s1.dirty));
	CHECK(rss1 + TOL >= rss0, "right after the free RSS went %.1f -> %.1f MiB", mib(rss0),
	      mib(rss1));

	sleep_ms(500);
	/* one chunk allocation and one free: decay runs there */
	uint8_t *h = written(4 * MiB, 9);
	free(h);
	snap(&s2);
	size_t rss2 = rss_bytes();
	facts("decayed", &s2, &s0, rss2);
	size_t pd = grew(s2.purged_dontneed, s0.purged_dontneed);
	/* the 4 MiB malloc may reuse 2 chunks of the old block before the
	 * decay step runs; the rest (>= 252 MiB) is older than decay_ms */
	CHECK(pd >= BIG - 4 * MiB,
	      "500 ms after freeing 256 MiB (decay_ms:200) and one huge malloc/free, only %.1f MiB was purged",
	      mib(pd));
	CHECK(s2.dirty <= 2 * TOL, "500 ms later dirty = %.1f MiB, expected the old 256 MiB purged",
	      mib(s2.dirty));
	CHECK(rss2 + BIG - 2 * TOL <= rss0, "500 ms later RSS went %.1f -> %.1f MiB", mib(rss0),
	      mib(rss2));
	live_check("after decay");

	/* How many more huge malloc/free pairs it takes (a diagnostic). */
	int cycles = 0;
	for (; cycles < 64; cycles++) {
		snap(&s3);
		if (s3.dirty <= 2 * TOL)
			break;
		h = opaque_ptr(malloc(4 * MiB));
		escape(h);
		free(h);
	}
	printf("decay.extra_cycles=%d\ndecay.final_dirty=%zu\n", cycles, s3.dirty);
	live_check("end");
}

/* ---- background: background_thread:true,decay_ms:100 --------------------------------------------- */

#define NBG 512
#define BG_SIZE (512 * KiB)

static void background(const char *mode)
{
	arena_stats_t s0, s1, s2;
	static uint8_t *blocks[NBG];
	uint8_t *b = NULL;
	size_t rss0;
	size_t expect = BIG;
	if (!strcmp(mode, "huge")) {
		b = setup_big();
		snap(&s0);
		rss0 = rss_bytes();
		free(b);
	} else if (!strcmp(mode, "fine")) {
		/* fine_purge:true: page runs inside arena chunks that stay in
		 * use (every 8th 128 KiB block kept).  A huge block is freed
		 * first, so that the thread runs whatever starts it. */
		live_setup();
		uint8_t *h = written(4 * MiB, 1);
		for (int i = 0; i < NBG; i++)
			blocks[i] = written(128 * KiB, (uint32_t)i);
		free(h);
		snap(&s0);
		rss0 = rss_bytes();
		for (int i = 0; i < NBG; i++)
			if (i % 8) {
				free(blocks[i]);
				blocks[i] = NULL;
			}
		expect = (size_t)(NBG - NBG / 8) * 128 * KiB; /* 56 MiB */
	} else {
		/* large blocks only: no huge block is ever freed */
		live_setup();
		for (int i = 0; i < NBG; i++)
			blocks[i] = written(BG_SIZE, (uint32_t)i);
		snap(&s0);
		rss0 = rss_bytes();
		for (int i = 0; i < NBG; i++)
			free(blocks[i]);
	}
	snap(&s1);
	size_t rss1 = rss_bytes();
	sleep_ms(1000); /* idle: no allocator call */
	snap(&s2);
	size_t rss2 = rss_bytes();
	facts("freed", &s1, &s0, rss1);
	facts("idle", &s2, &s0, rss2);
	size_t pd = grew(s2.purged_dontneed, s0.purged_dontneed);
	size_t tol = expect == BIG ? 2 * TOL : TOL;
	CHECK(s2.dirty <= tol,
	      "background_thread:true,decay_ms:100: 1 s after freeing %.0f MiB (%s) dirty = %.1f MiB",
	      mib(expect), mode, mib(s2.dirty));
	CHECK(pd + tol >= expect, "1 s idle after freeing %.0f MiB (%s): purged %.1f MiB", mib(expect),
	      mode, mib(pd));
	CHECK(rss2 + expect <= rss0 + tol, "1 s idle after freeing %.0f MiB (%s): RSS %.1f -> %.1f MiB",
	      mib(expect), mode, mib(rss0), mib(rss2));
	if (!strcmp(mode, "fine"))
		for (int i = 0; i < NBG; i += 8) {
			size_t bad = pat_check_sparse(blocks[i], 128 * KiB, (uint32_t)i);
			CHECK(bad == SIZE_MAX, "live 128 KiB block %d corrupt at %zu after the purge", i, bad);
		}
	live_check("after idle");
}

/* ---- grow: a growing heap's chunks born huge ------------------------------------------------- */

#define NGROW 768

/* 48 MiB of 64 KiB blocks, written as they come: the arena fills chunk
 * after chunk (31 blocks each), and once 8 are dense (thp.c,
 * THP_GROWING_DENSE) its next ones are advised huge at birth under
 * thp:auto where their huge pages cost no more than 4 KiB ones ("born":
 * sim_thp_probe:cheap); never under thp:never, without THP, or where fine
 * purging is on ("none").  The first write of each fresh chunk is timed
 * (thp.c, "a growing heap's own first writes"): where a huge page costs
 * more (sim_thp_probe:costly, "checked") the first chunk born huge is the
 * only one, the rest are born small, and so are the 4 chunks of a fresh 8
 * MiB block from calloc (no probe); with the real clock ("timed") each
 * chunk past the 8th is born huge and timed or born small by the rule. */
static void grow(const char *mode)
{
	static uint8_t *blocks[NGROW];
	arena_stats_t s0, s1;
	snap(&s0);
	for (int i = 0; i < NGROW; i++)
		blocks[i] = written(64 * KiB, 900u + (uint32_t)i);
	snap(&s1);
	size_t born = grew(s1.thp_chunks_born_huge, s0.thp_chunks_born_huge);
	size_t timed = grew(s1.thp_heap_checks, s0.thp_heap_checks);
	size_t kept = grew(s1.thp_heap_kept_small, s0.thp_heap_kept_small);
	/* a fresh huge block by calloc, which runs no probe: only the heap's
	 * own figures can keep its 4 chunks in 4 KiB pages */
	void *big = calloc(1, 8 * MiB);
	CHECK(big != NULL, "calloc(8 MiB) failed");
	arena_stats_t s2;
	snap(&s2);
	size_t small = grew(s2.thp_chunks_small, s1.thp_chunks_small);
	free(big);
	printf("grow.born_huge=%zu\ngrow.timed=%zu\ngrow.kept_small=%zu\ngrow.block_small=%zu\n"
	       "grow.decision=%s\n", born, timed, kept, small, s2.thp_decision);
	if (!strcmp(mode, "born")) {
		CHECK(born >= 10, "thp:auto: 48 MiB of 64 KiB blocks: %zu chunks born huge, expected 10+",
		      born);
		CHECK(timed == born && kept == 0 && small == 0,
		      "cheap huge pages: %zu born huge, %zu timed, %zu kept small, %zu of a block", born,
		      timed, kept, small);
	} else if (!strcmp(mode, "checked")) {
		CHECK(born == 1 && timed == 1 && kept >= 10,
		      "costly huge pages: %zu born huge (1 expected), %zu timed, %zu born small (10+)",
		      born, timed, kept);
		CHECK(small == 4 && !strcmp(s2.thp_decision, "unprobed"),
		      "costly huge pages: %zu chunks of a fresh 8 MiB block in 4 KiB pages (4 expected), "
		      "decision %s", small, s2.thp_decision);
	} else if (!strcmp(mode, "timed")) {
		CHECK(born >= 1 && timed == born && born + kept >= 10,
		      "the real clock: %zu born huge, %zu timed, %zu born small (10+ in all)", born, timed,
		      kept);
	} else {
		CHECK(born == 0 && timed == 0, "%s: %zu chunks born huge (%zu timed), expected none", mode,
		      born, timed);
	}
	for (int i = 0; i < NGROW; i++) {
		size_t bad = pat_check_sparse(blocks[i], 64 * KiB, 900u + (uint32_t)i);
		CHECK(bad == SIZE_MAX, "64 KiB block %d corrupt at %zu", i, bad);
		free(blocks[i]);
	}
}

/* ---- regrow: a heap growing back into chunks the dirty cap purged ---------------------------- */

#define NREGROW 217 /* 64 KiB blocks: 7 chunks, under THP_GROWING_DENSE */

/* 14 MiB of 64 KiB blocks written, all freed (the empty chunks go back to
 * the chunk layer, and the dirty cap of this single-threaded program purges
 * them at once, before they are due), then allocated again at once: the
 * chunks taken back are advised huge at birth under thp:auto ("born": 3 or
 * more of the 5 the cap purged); never under thp:never, without the cap, or
 * without THP ("none").  The heap stays under 8 dense chunks, so no chunk
 * is born huge by the growing-heap rule. */
static void regrow(const char *mode)
{
	static uint8_t *blocks[NREGROW];
	arena_stats_t s0, s1;
	for (int round = 0; round < 2; round++) {
		if (round == 1)
			snap(&s0);
		for (int i = 0; i < NREGROW; i++)
			blocks[i] = written(64 * KiB, 1700u + (uint32_t)i);
		for (int i = 0; i < NREGROW; i++) {
			size_t bad = pat_check_sparse(blocks[i], 64 * KiB, 1700u + (uint32_t)i);
			CHECK(bad == SIZE_MAX, "64 KiB block %d corrupt at %zu", i, bad);
			if (round == 0)
				free(blocks[i]);
		}
	}
	snap(&s1);
	size_t born = grew(s1.thp_chunks_born_regrown, s0.thp_chunks_born_regrown);
	size_t all = grew(s1.thp_chunks_born_huge, s0.thp_chunks_born_huge);
	printf("regrow.born_regrown=%zu\nregrow.born_huge=%zu\nregrow.purged_cap=%zu\n", born, all,
	       (size_t)s1.purged_cap);
	CHECK(born == all, "%zu chunks born huge, %zu of them growing back", all, born);
	if (!strcmp(mode, "born"))
		CHECK(born >= 3, "growing back into 14 MiB the cap purged: %zu chunks born huge, expected 3+",
		      born);
	else
		CHECK(born == 0, "%s: %zu chunks born huge growing back, expected none", mode, born);
	for (int i = 0; i < NREGROW; i++)
		free(blocks[i]);
}

/* ---- refill: chunks the dirty cap purged, collapsed again as the heap refills them ---------- */

#define NREFILL (20 * 31) /* 64 KiB blocks: 31 to a chunk, 20 chunks (thp.c: 16 or more) */
#define REFILL_KEEP 6     /* of each chunk's 31: 96 pages, under a quarter in use */

/* Whether the kernel has MADV_COLLAPSE (Linux 6.1). */
static int kernel_collapses(void)
{
	struct utsname u;
	int major = 0, minor = 0;
	if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &major, &minor) != 2)
		return 0;
	return major > 6 || (major == 6 && minor >= 1);
}

/* 40 MiB of 64 KiB blocks written, then all but 6 of every 31 freed: each
 * chunk under a quarter in use, and this single-threaded program's dirty
 * cap purges their free pages at once (splitting the huge pages of those
 * born huge).  Then as many blocks again at once: the heap refills those
 * chunks, and each one it took 128 pages of back is collapsed into a huge
 * page again under thp:auto ("collapse": 8 or more of the 20, and with
 * MADV_COLLAPSE 16 MiB more in huge pages than after the frees); never under
 * thp:never, without the cap, or without THP ("none"). */
static void refill(const char *mode)
{
	static uint8_t *blocks[NREFILL];
	arena_stats_t s0, s1;
	for (int i = 0; i < NREFILL; i++)
		blocks[i] = written(64 * KiB, 2300u + (uint32_t)i);
	for (int i = 0; i < NREFILL; i++)
		if (i % 31 >= REFILL_KEEP) {
			free(blocks[i]);
			blocks[i] = NULL;
		}
	snap(&s0);
	size_t huge0 = anon_huge();
	for (int i = 0; i < NREFILL; i++)
		if (!blocks[i])
			blocks[i] = written(64 * KiB, 2300u + (uint32_t)i);
	snap(&s1);
	size_t huge1 = anon_huge();
	size_t refilled = grew(s1.thp_chunks_refilled, s0.thp_chunks_refilled);
	printf("refill.collapsed=%zu\nrefill.purged_cap=%zu\nrefill.anon_huge_before=%zu\n"
	       "refill.anon_huge_after=%zu\n",
	       refilled, (size_t)s0.purged_cap, huge0, huge1);
	if (!strcmp(mode, "collapse")) {
		CHECK(refilled >= 8, "20 chunks refilled after the cap's purge: %zu collapsed, expected 8+",
		      refilled);
		if (kernel_collapses())
			CHECK(huge1 >= huge0 + 16 * MiB,
			      "collapsed chunks: AnonHugePages %zu -> %zu, expected 16 MiB more", huge0,
			      huge1);
	} else {
		CHECK(refilled == 0, "%s: %zu chunks collapsed, expected none", mode, refilled);
	}
	for (int i = 0; i < NREFILL; i++) {
		size_t bad = pat_check_sparse(blocks[i], 64 * KiB, 2300u + (uint32_t)i);
		CHECK(bad == SIZE_MAX, "64 KiB block %d corrupt at %zu", i, bad);
		free(blocks[i]);
	}
}

/* ---- dense: the free pages of dense chunks ---------------------------------------------------- */

/* n blocks of 64 KiB, written (31 to a chunk), then every other one freed:
 * every chunk stays half used, over the quarter under which a dense chunk
 * takes its huge-page advice back.  Under decay_ms:10,tcache:false (every
 * free reaches its chunk; 400 ms later decay is long due) and with the
 * background thread running, a chunk that turned
 * dense once its pages were touched has its free pages purged at the free
 * (purge.c, purge_dense_chunk); one born huge in a growing heap (thp:auto)
 * or under thp:always keeps them, so as not to split its huge page.
 *   touched  192 blocks (6 chunks, too few for a growing heap): every
 *            chunk turned dense after its first touch, all freed pages go
 *   grown    768 blocks (25 chunks): from the 9th on they are born huge,
 *            and those keep their freed pages (1 MiB each), the rest go
 *   always   thp:always, 192 blocks: every chunk born advised, all kept
 *   kept     192 blocks without the background thread (the dirty cap's
 *            programs): dense chunks keep their free pages, all kept
 * (touched, grown and always run with background_thread:true.) */
static void dense(const char *mode)
{
	static uint8_t *blocks[NGROW];
	int n = !strcmp(mode, "grown") ? NGROW : 192;
	arena_stats_t s0, s1, s2;
	snap(&s0);
	for (int i = 0; i < n; i++)
		blocks[i] = written(64 * KiB, 700u + (uint32_t)i);
	snap(&s1);
	size_t born = grew(s1.thp_chunks_born_huge, s0.thp_chunks_born_huge);
	size_t advised = grew(s1.chunks_advised_huge, s0.chunks_advised_huge);
	for (int i = 1; i < n; i += 2) {
		free(blocks[i]);
		blocks[i] = NULL;
	}
	sleep_ms(400); /* 40 decay periods: the background thread purged what decays */
	snap(&s2);
	size_t freed = (size_t)(n / 2) * 64 * KiB;
	size_t purged = grew(s2.purged_dontneed, s1.purged_dontneed);
	printf("dense.born_huge=%zu\ndense.advised=%zu\ndense.freed=%zu\n", born, advised, freed);
	facts("dense", &s2, &s1, rss_bytes());
	if (!strcmp(mode, "touched")) {
		CHECK(born == 0 && advised >= 5, "6 chunks: %zu born huge, %zu advised (0, 5+ expected)",
		      born, advised);
		CHECK(s2.dirty <= 1 * MiB && purged + 1 * MiB >= freed,
		      "dense chunks not born huge: %.2f MiB left dirty, %.2f of %.2f MiB purged",
		      mib(s2.dirty), mib(purged), mib(freed));
	} else if (!strcmp(mode, "grown")) {
		CHECK(born >= 10, "48 MiB of 64 KiB blocks: %zu chunks born huge, expected 10+", born);
		/* each chunk born huge keeps its ~1 MiB freed (the last one may
		 * be partly filled); the 8+ that turned dense after their first
		 * touch give theirs back */
		CHECK(s2.dirty + 2 * MiB >= born * MiB, "%zu chunks born huge kept only %.2f MiB dirty",
		      born, mib(s2.dirty));
		CHECK(purged >= 7 * MiB && s2.dirty <= (born + 2) * MiB,
		      "purged %.2f of %.2f MiB freed, %.2f left dirty, %zu chunks born huge", mib(purged),
		      mib(freed), mib(s2.dirty), born);
	} else {
		CHECK(purged == 0 && s2.dirty + 1 * MiB >= freed,
		      "%s: %.2f MiB purged, %.2f of %.2f MiB kept dirty", mode, mib(purged),
		      mib(s2.dirty), mib(freed));
	}
	for (int i = 0; i < n; i += 2) {
		size_t bad = pat_check_sparse(blocks[i], 64 * KiB, 700u + (uint32_t)i);
		CHECK(bad == SIZE_MAX, "64 KiB block %d corrupt at %zu", i, bad);
		free(blocks[i]);
	}
}

/* ---- trim: malloc_trim(0) after freeing 95% of 1 GiB ----------------------------------------- */

typedef struct tblk {
	uint8_t *p;
	uint32_t n;
} tblk_t;

static void trim(void)
{
	size_t rss_base = rss_bytes();
	rng_t r;
	rng_seed(&r, 12345);
	const size_t want[3] = { 256 * MiB, 384 * MiB, 384 * MiB };
	const size_t lo[3] = { 64, 16 * KiB, MiB + 1 }, hi[3] = { 4 * KiB, MiB, 8 * MiB };
	size_t cap[3] = { want[0] / 64 + 16, want[1] / (16 * KiB) + 16, want[2] / MiB + 16 };
	tblk_t *bl[3];
	size_t nb[3] = { 0, 0, 0 };
	for (int k = 0; k < 3; k++) {
		size_t bytes = ALIGN_UP_PAGE(cap[k] * sizeof(tblk_t));
		bl[k] = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (bl[k] == MAP_FAILED) {
			printf("FAIL: mmap of %zu bytes\n", bytes);
			exit(3);
		}
	}
	/* interleaved: small, large and huge blocks share the address space */
	size_t got[3] = { 0, 0, 0 };
	while (got[0] < want[0] || got[1] < want[1] || got[2] < want[2]) {
		for (int k = 0; k < 3; k++) {
			if (got[k] >= want[k] || nb[k] == cap[k])
				continue;
			int reps = k == 0 ? 64 : k == 1 ? 4 : 1;
			for (int j = 0; j < reps && got[k] < want[k]; j++) {
				size_t n = rng_logsize(&r, lo[k], hi[k]);
				uint8_t *p = written(n, (uint32_t)(k << 28 | nb[k]));
				bl[k][nb[k]++] = (tblk_t){ p, (uint32_t)n };
				got[k] += n;
			}
		}
	}
	size_t rss_full = rss_bytes();
	/* only the used part of the arrays is resident */
	size_t arrays_rss = 0;
	for (int k = 0; k < 3; k++)
		arrays_rss += ALIGN_UP_PAGE(nb[k] * sizeof(tblk_t));
	/* keep about 5%: the last 5% of small blocks (allocated last, so
	 * packed), every 20th large and huge block */
	size_t live_bytes = 0, kept = 0;
	for (int k = 0; k < 3; k++) {
		for (size_t i = 0; i < nb[k]; i++) {
			int keep = k == 0 ? i >= nb[k] - nb[k] / 20 : i % 20 == 0;
			if (keep) {
				live_bytes += malloc_usable_size(bl[k][i].p);
				kept++;
			} else {
				free(bl[k][i].p);
				bl[k][i].p = NULL;
			}
		}
	}
	size_t rss_freed = rss_bytes();
	int rc = malloc_trim(0);
	size_t rss_trim = rss_bytes();
	arena_stats_t s;
	snap(&s);
	printf("trim.blocks=%zu+%zu+%zu\ntrim.kept=%zu\ntrim.live_bytes=%zu\n", nb[0], nb[1], nb[2],
	       kept, live_bytes);
	printf("trim.rss_base=%zu\ntrim.rss_full=%zu\ntrim.rss_freed=%zu\ntrim.rss_after=%zu\n",
	       rss_base, rss_full, rss_freed, rss_trim);
	printf("trim.returned=%d\ntrim.arrays=%zu\ntrim.dirty=%zu\ntrim.lazy=%zu\n", rc, arrays_rss,
	       s.dirty, s.lazy);
	size_t limit = rss_base + arrays_rss + live_bytes + 32 * MiB;
	CHECK(rss_trim <= limit,
	      "after freeing 95%% of 1 GiB and malloc_trim(0), RSS = %.1f MiB, expected <= %.1f MiB "
	      "(baseline %.1f + %.1f MiB still allocated + %.1f MiB of test arrays + 32)",
	      mib(rss_trim), mib(limit), mib(rss_base), mib(live_bytes), mib(arrays_rss));
	CHECK(rc == 1, "malloc_trim(0) returned %d, expected 1 (memory was released)", rc);
	CHECK(s.dirty == 0 && s.lazy == 0, "after malloc_trim(0) dirty %zu, lazy %zu", s.dirty, s.lazy);
	for (int k = 0; k < 3; k++)
		for (size_t i = 0; i < nb[k]; i++)
			if (bl[k][i].p) {
				size_t bad = pat_check_sparse(bl[k][i].p, bl[k][i].n,
							      (uint32_t)(k << 28 | i));
				CHECK(bad == SIZE_MAX, "after malloc_trim: block %p of %u bytes corrupt at %zu",
				      (void *)bl[k][i].p, bl[k][i].n, bad);
			}
}

/* ---- fine: purging page runs inside arena chunks -------------------------------------------------- */

#define NFINE 1024
#define FINE_SIZE (64 * KiB)

static void fine(const char *mode)
{
	/* kept_dense: every other block stays, so the chunks stay half used
	 * (dense ones keep their huge-page advice and their free pages); in
	 * the other modes 1 block in 8 stays (under a quarter: sparse again) */
	int purged = !strcmp(mode, "purged"), lazy = !strcmp(mode, "lazy"),
	    kept = !strcmp(mode, "kept") || !strcmp(mode, "kept_dense");
	int step = !strcmp(mode, "kept_dense") ? 2 : 8;
	static uint8_t *blocks[NFINE], *again[NFINE];
	arena_stats_t s0, s1, s2, s3;
	live_setup();
	for (int i = 0; i < NFINE; i++)
		blocks[i] = written(FINE_SIZE, (uint32_t)i);
	snap(&s0);
	size_t rss0 = rss_bytes();
	/* A chunk changes its huge-page advice at most every 10 ms (thp.c,
	 * ADVICE_MIN_MS): one that turned dense in the last 10 ms of the
	 * allocations would keep its free pages (under load, 2.5 chunks of
	 * them were: 5 MiB, 1 run in 8).  Waiting 30 ms makes every chunk
	 * free to turn sparse, whatever the load. */
	if (purged)
		sleep_ms(30);
	for (int i = 0; i < NFINE; i++)
		if (i % step) {
			free(blocks[i]);
			blocks[i] = NULL;
		}
	snap(&s1);
	size_t rss1 = rss_bytes();
	facts("freed", &s1, &s0, rss1);
	printf("freed.chunks_free=%zu\n", s1.chunks_free);
	size_t freed = (size_t)(NFINE - NFINE / step) * FINE_SIZE; /* 56 or 32 MiB */
	size_t pd = grew(s1.purged_dontneed, s0.purged_dontneed);
	size_t pf = grew(s1.purged_free, s0.purged_free);
	/* blocks of 64 KiB stay in the thread cache (up to 1 MiB once its list grew) */
	if (purged) {
		/* 2 MiB, and one chunk more: a chunk changes its huge-page advice
		 * at most every 10 ms (thp.c, advice_may_change), so the chunk
		 * filled last may still be dense when its blocks are freed, and
		 * keeps its free pages until a sweep (seen 2/30 runs under load:
		 * 2.62 MiB) */
		CHECK(s1.dirty <= 4 * MiB, "fine purging at once: dirty = %.2f MiB after freeing %.0f MiB",
		      mib(s1.dirty), mib(freed));
		CHECK(pd >= freed - TOL, "fine purging at once: purged %.1f MiB of %.0f", mib(pd), mib(freed));
		CHECK(rss1 + freed - TOL <= rss0, "fine purging at once: RSS %.1f -> %.1f MiB",
		      mib(rss0), mib(rss1));
	}
	if (lazy) {
		CHECK(s1.dirty <= 2 * MiB, "fine purging with MADV_FREE: dirty = %.2f MiB", mib(s1.dirty));
		CHECK(s1.lazy >= freed - TOL, "fine purging with MADV_FREE: lazy = %.1f MiB", mib(s1.lazy));
		CHECK(pf >= freed - TOL, "fine purging with MADV_FREE: purged_free grew by %.1f MiB",
		      mib(pf));
	}
	if (kept) {
		CHECK(s1.dirty >= freed - TOL, "no fine purging: dirty = %.1f MiB, expected the %.0f MiB kept",
		      mib(s1.dirty), mib(freed));
		CHECK(pd == 0 && pf == 0, "no fine purging: %.1f MiB purged (dontneed) and %.1f (free)",
		      mib(pd), mib(pf));
	}
	for (int i = 0; i < NFINE; i += step) {
		size_t bad = pat_check_sparse(blocks[i], FINE_SIZE, (uint32_t)i);
		CHECK(bad == SIZE_MAX, "live 64 KiB block %d corrupt at %zu after the purge", i, bad);
	}
	live_check("after the frees");

	/* calloc into the freed page runs: zero whatever their state */
	snap(&s2);
	int nonzero = 0;
	for (int i = 0; i < NFINE - NFINE / step; i++) {
		again[i] = calloc(1, FINE_SIZE);
		CHECK(again[i] != NULL, "calloc(64 KiB) failed");
		if (!again[i])
			break;
		size_t nz = first_nonzero(again[i], FINE_SIZE);
		if (nz != SIZE_MAX && nonzero++ < 5)
			CHECK(0, "calloc(64 KiB) #%d = %p: byte %zu is 0x%02x", i, (void *)again[i], nz,
			      again[i][nz]);
	}
	snap(&s3);
	size_t skipped = grew(s3.memset_skipped, s2.memset_skipped);
	printf("calloc.nonzero_blocks=%d\ncalloc.memset_skipped=%zu\n", nonzero, skipped);
	CHECK(nonzero == 0, "%d of %d calloc(64 KiB) blocks were not zero", nonzero,
	      NFINE - NFINE / step);
	if (purged)
		CHECK(skipped >= freed - TOL, "calloc over DONTNEED-purged pages wrote them: skipped %.1f MiB",
		      mib(skipped));
	else
		CHECK(skipped <= 2 * MiB, "calloc over %s pages skipped %.1f MiB of memset", mode,
		      mib(skipped));
	for (int i = 0; i < NFINE; i += step) {
		size_t bad = pat_check_sparse(blocks[i], FINE_SIZE, (uint32_t)i);
		CHECK(bad == SIZE_MAX, "live 64 KiB block %d corrupt at %zu after the callocs", i, bad);
	}

	/* arena_purge: dirty and lazy page runs too */
	for (int i = 0; i < NFINE - NFINE / step; i++)
		free(again[i]);
	size_t ret = purge_now();
	snap(&s3);
	printf("purged.returned=%zu\npurged.dirty=%zu\npurged.lazy=%zu\n", ret, s3.dirty, s3.lazy);
	CHECK(s3.dirty == 0 && s3.lazy == 0, "after arena_purge() dirty %zu lazy %zu", s3.dirty, s3.lazy);
	for (int i = 0; i < NFINE; i += step) {
		size_t bad = pat_check_sparse(blocks[i], FINE_SIZE, (uint32_t)i);
		CHECK(bad == SIZE_MAX, "live 64 KiB block %d corrupt at %zu after arena_purge", i, bad);
	}
	live_check("end");
}

/* Sparse chunks whose pages were freed and that then see no more frees:
 * their dirty pages must still be purged once decay_ms has passed, by the
 * next allocation anywhere in the arena (no background thread). */
/* ---- batch: a chunk's free runs purged by one system call ------------------- */

#define NBATCH 24             /* blocks of BATCH_SIZE; every other one freed */
#define BATCH_SIZE (80 * KiB) /* above 64 KiB: no thread cache keeps them */

/* Whether this kernel takes MADV_DONTNEED for the calling process through
 * process_madvise (PIDFD_SELF_THREAD_GROUP, Linux 6.15), asked directly. */
static int kernel_batches(void)
{
	uint8_t *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return 0;
	p[0] = 1;
	struct iovec one = { p, 4096 };
	long rc = syscall(440 /* SYS_process_madvise */, -10001, &one, 1UL, MADV_DONTNEED, 0U);
	int ok = rc == 4096 && p[0] == 0;
	munmap(p, 4096);
	return ok;
}

/* Twelve free runs of 20 pages between blocks in use, purged at once by
 * arena_purge: one process_madvise for a chunk's runs where the kernel
 * has it, one madvise a run otherwise ("single": purge_batch off, or
 * the kernel without it); either way exactly the free runs go and the
 * blocks in use keep their contents. */
static void batch(const char *mode)
{
	static uint8_t *blocks[NBATCH];
	arena_stats_t s0, s1;
	for (int i = 0; i < NBATCH; i++)
		blocks[i] = written(BATCH_SIZE, 500u + (uint32_t)i);
	for (int i = 1; i < NBATCH; i += 2)
		free(blocks[i]);
	snap(&s0);
	size_t purged = purge_now();
	snap(&s1);
	size_t calls = grew(s1.sys_madvise, s0.sys_madvise);
	size_t batches = grew(s1.sys_process_madvise, s0.sys_process_madvise);
	size_t runs = grew(s1.purge_batched_runs, s0.purge_batched_runs);
	int kernel = kernel_batches(), single = !strcmp(mode, "single") || !kernel;
	printf("batch.kernel=%d\nbatch.madvise=%zu\nbatch.process_madvise=%zu\nbatch.runs=%zu\n"
	       "batch.purged=%zu\n", kernel, calls, batches, runs, purged);
	for (int i = 0; i < NBATCH; i += 2) {
		size_t bad = pat_check_sparse(blocks[i], BATCH_SIZE, 500u + (uint32_t)i);
		CHECK(bad == SIZE_MAX, "block %d in use between purged runs: corrupt at offset %zu", i, bad);
	}
	CHECK(purged >= NBATCH / 2 * BATCH_SIZE, "arena_purge purged %zu bytes, freed %zu", purged,
	      (size_t)NBATCH / 2 * BATCH_SIZE);
	if (single) {
		CHECK(runs == 0, "%zu runs purged in batches (%s)", runs, kernel ? "purge_batch off" : "no kernel support");
		CHECK(calls >= NBATCH / 2, "%zu madvise calls for %d free runs", calls, NBATCH / 2);
	} else {
		CHECK(runs >= NBATCH / 2, "%zu of the %d free runs purged in batches", runs, NBATCH / 2);
		CHECK(batches >= 1 && batches + calls < NBATCH / 4,
		      "%zu process_madvise and %zu madvise calls for %d free runs", batches, calls, NBATCH / 2);
	}
	for (int i = 0; i < NBATCH; i += 2)
		free(blocks[i]);
}

static void stale(void)
{
	static uint8_t *blocks[NFINE];
	arena_stats_t s0, s1, s2;
	live_setup();
	for (int i = 0; i < NFINE; i++)
		blocks[i] = written(FINE_SIZE, (uint32_t)i);
	for (int i = 0; i < NFINE; i++)
		if (i % 8) {
			free(blocks[i]);
			blocks[i] = NULL;
		}
	snap(&s0);
	sleep_ms(300);
	snap(&s1);
	/* 512 KiB: above the thread cache's largest class, so this reaches
	 * the arena (and takes pages of one of the freed runs) */
	uint8_t *p = malloc(512 * KiB);
	CHECK(p != NULL, "malloc(512 KiB) failed");
	snap(&s2);
	printf("stale.dirty_freed=%zu\nstale.dirty_idle=%zu\nstale.dirty_after=%zu\n", s0.dirty, s1.dirty,
	       s2.dirty);
	size_t freed = (size_t)(NFINE - NFINE / 8) * FINE_SIZE;
	CHECK(s1.dirty >= freed - TOL, "decay_ms:100: %.1f MiB dirty before any call, expected the %.0f MiB freed",
	      mib(s1.dirty), mib(freed));
	CHECK(s2.dirty <= 2 * MiB,
	      "one allocation 300 ms after the frees (decay_ms:100): %.1f MiB still dirty of %.0f MiB freed",
	      mib(s2.dirty), mib(freed));
	free(p);
	for (int i = 0; i < NFINE; i += 8) {
		size_t bad = pat_check_sparse(blocks[i], FINE_SIZE, (uint32_t)i);
		CHECK(bad == SIZE_MAX, "live 64 KiB block %d corrupt at %zu after the purge", i, bad);
	}
	live_check("end");
}

/* ---- thp: huge-page advice ------------------------------------------------------------------------------- */

/* AnonHugePages the kernel gives a plain aligned 4 MiB MADV_HUGEPAGE
 * mapping (not the allocator's): is THP available here at all? */
static size_t kernel_thp_probe(void)
{
	size_t len = 8 * MiB;
	char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return 0;
	char *a = (char *)ALIGN_UP_2M((uintptr_t)m);
	madvise(a, 4 * MiB, MADV_HUGEPAGE);
	memset(a, 1, 4 * MiB);
	size_t got = smaps_anon_huge_range((uintptr_t)a, (uintptr_t)a + 4 * MiB);
	munmap(m, len);
	return got == SIZE_MAX ? 0 : got;
}

static void touch(uint8_t *p, size_t n)
{
	for (size_t off = 0; off < n; off += 4096)
		((volatile uint8_t *)p)[off] = p[off];
}

static void thp(const char *mode)
{
	int is_default = !strcmp(mode, "default"), always = !strcmp(mode, "always"),
	    never = !strcmp(mode, "never"), none = !strcmp(mode, "none");
	arena_stats_t s0, s1, s2, s3, s4, s5, s6;
	char sys[16] = "none";
	if (thp_sys_mode(sys, sizeof sys) != 0)
		strcpy(sys, "none");
	snap(&s0);
	printf("thp.mode=%s\nthp.sys=%s\nthp.advised_at_start=%lu\n", s0.thp_mode, sys,
	       (unsigned long)s0.chunks_advised_huge);
	if (none)
		CHECK(!strcmp(s0.thp_mode, "none"), "sim_no_thp: thp_mode is \"%s\"", s0.thp_mode);
	else
		CHECK(!strcmp(s0.thp_mode, sys), "thp_mode is \"%s\", the system says \"%s\"", s0.thp_mode,
		      sys);

	/* a dense arena chunk: 14 blocks of 128 KiB = 448 of the 510 pages of
	 * the first arena chunk (which holds only start-up allocations yet) */
	static uint8_t *dense[14];
	for (int i = 0; i < 14; i++)
		dense[i] = written(128 * KiB, 500u + (uint32_t)i);
	snap(&s1);
	printf("thp.dense_advised=%zu\n", grew(s1.chunks_advised_huge, s0.chunks_advised_huge));
	live_setup();
	snap(&s1);

	/* a huge block of 8 MiB: 4 whole chunks */
	uint8_t *h = written(8 * MiB, 600);
	snap(&s2);
	size_t h_adv = grew(s2.chunks_advised_huge, s1.chunks_advised_huge);
	size_t ah = anon_huge();
	int tries = 0;
	for (; tries < 20 && ah < 4 * MiB && (is_default || always); tries++) {
		sleep_ms(100);
		touch(h, 8 * MiB);
		ah = anon_huge();
	}
	printf("thp.huge_advised=%zu\nthp.huge_anon=%zu\nthp.huge_tries=%d\n", h_adv, ah, tries);
	size_t probe = 0;
	if ((is_default || always) && ah < 4 * MiB) {
		probe = kernel_thp_probe();
		printf("thp.kernel_probe=%zu\n", probe);
		if (probe == 0)
			printf("note: the kernel gave no huge page to a plain MADV_HUGEPAGE mapping either: "
			       "no huge pages on this machine now, anon-huge checks skipped\n");
	}
	int thp_works = ah >= 4 * MiB || probe > 0;

	/* 2.1 MiB: one whole chunk and a partly covered one */
	size_t a0 = anon_huge();
	snap(&s3);
	uint8_t *q = written(2 * MiB + 100 * KiB, 700);
	touch(q, 2 * MiB + 100 * KiB);
	size_t a1 = anon_huge();
	snap(&s4);
	size_t p_adv = grew(s4.chunks_advised_huge, s3.chunks_advised_huge);
	printf("thp.partial_advised=%zu\nthp.partial_anon_delta=%zd\n", p_adv, (ssize_t)(a1 - a0));

	/* shrinking the 8 MiB block to 3 MiB in place: its last 2 chunks go
	 * back and are purged whole (decay_ms:0); the rest keeps its pages */
	size_t a2 = anon_huge();
	snap(&s5);
	uint8_t *h2 = realloc(h, 3 * MiB);
	snap(&s6);
	size_t a3 = anon_huge();
	size_t sh_purged = grew(s6.purged_dontneed + s6.purged_free, s5.purged_dontneed + s5.purged_free);
	printf("thp.shrink_in_place=%d\nthp.shrink_purged=%zu\nthp.shrink_anon_before=%zu\nthp.shrink_anon_after=%zu\n",
	       h2 == h, sh_purged, a2, a3);
	CHECK(h2 != NULL, "realloc(8 MiB -> 3 MiB) failed");
	if (!h2)
		h2 = h;
	CHECK(h2 == h, "realloc(8 MiB -> 3 MiB) moved the block");
	CHECK(sh_purged == 4 * MiB, "shrinking 8 MiB to 3 MiB (decay_ms:0) purged %zu bytes, expected the 2 freed chunks (4 MiB)",
	      sh_purged);
	CHECK(a3 + 4 * MiB >= a2, "shrinking 8 MiB to 3 MiB: anon huge %.1f -> %.1f MiB (more than the 2 freed chunks)",
	      mib(a2), mib(a3));

	arena_stats_t se;
	snap(&se);
	size_t a_end = anon_huge();
	printf("thp.advised_total=%lu\nthp.anon_end=%zu\n", (unsigned long)se.chunks_advised_huge, a_end);

	/* the run-time decision (probed at the 8 MiB block; the next probe is
	 * 5 s away): "small" keeps fresh chunks of huge blocks in 4 KiB pages */
	int small = !strcmp(se.thp_decision, "small") || !strcmp(se.thp_decision, "unformed");
	printf("thp.decision=%s\nthp.chunks_small=%lu\n", se.thp_decision,
	       (unsigned long)se.thp_chunks_small);
	if (is_default) {
		CHECK(grew(s1.chunks_advised_huge, s0.chunks_advised_huge) >= 1,
		      "an arena chunk with 448 of 510 pages in use was not advised MADV_HUGEPAGE");
		CHECK(small || h_adv >= 4, "an 8 MiB huge block: %zu chunks advised huge, expected 4", h_adv);
		CHECK(!small || h_adv == 0, "decision %s: an 8 MiB huge block of fresh chunks: %zu chunks advised huge",
		      se.thp_decision, h_adv);
		CHECK(small || p_adv == 1, "a 2.1 MiB block: %zu chunks advised huge, expected 1 (not its partial last chunk)",
		      p_adv);
		CHECK(a1 <= a0 + 2 * MiB, "a 2.1 MiB block added %.1f MiB of huge pages, expected <= 2",
		      mib(a1 - a0));
		if (thp_works && !small)
			CHECK(ah >= 4 * MiB, "a written 8 MiB huge block: AnonHugePages %.1f MiB after %d tries "
			      "(a plain MADV_HUGEPAGE mapping got %.1f MiB)", mib(ah), tries, mib(probe));
	}
	if (always) {
		CHECK(p_adv == 2, "thp:always: a 2.1 MiB block: %zu chunks advised huge, expected 2", p_adv);
		CHECK(h_adv >= 4, "thp:always: an 8 MiB block: %zu chunks advised huge", h_adv);
	}
	if (never || none) {
		CHECK(se.chunks_advised_huge == 0, "%s: %lu chunks advised huge, expected 0", mode,
		      (unsigned long)se.chunks_advised_huge);
		CHECK(a_end == 0 && ah == 0 && a1 == 0, "%s: AnonHugePages %.1f MiB, expected 0", mode,
		      mib(a_end > ah ? a_end : ah));
	}

	for (int i = 0; i < 14; i++) {
		size_t bad = pat_check_sparse(dense[i], 128 * KiB, 500u + (uint32_t)i);
		CHECK(bad == SIZE_MAX, "dense-chunk block %d corrupt at %zu", i, bad);
	}
	size_t bad = pat_check(h2, 0, 4096, 600);
	for (size_t off = 4096; bad == SIZE_MAX && off + 32 <= 3 * MiB; off += 1024)
		bad = pat_check(h2, off, off + 32, 600);
	CHECK(bad == SIZE_MAX, "the 8 MiB block shrunk to 3 MiB lost byte %zu", bad);
	bad = pat_check_sparse(q, 2 * MiB + 100 * KiB, 700);
	CHECK(bad == SIZE_MAX, "the 2.1 MiB block corrupt at %zu", bad);
	live_check("end");
}

/* ---- decide: the run-time huge-page decision ------------------------------------------------------------- */

/* AnonHugePages inside [p, p + n). */
static size_t anon_in(const void *p, size_t n)
{
	size_t got = smaps_anon_huge_range((uintptr_t)p, (uintptr_t)p + n);
	return got == SIZE_MAX ? 0 : got;
}

/* An 8 MiB block of fresh chunks (4 whole ones), written; freed (decay_ms:-1
 * keeps its chunks dirty) and taken again: reused memory.  What each
 * configuration promises about the decision, its probes and the advice. */
static void decide(const char *mode)
{
	int real = !strcmp(mode, "real"), cheap = !strcmp(mode, "cheap"), costly = !strcmp(mode, "costly"),
	    unformed = !strcmp(mode, "unformed"), use_calloc = !strcmp(mode, "calloc"),
	    off = !strcmp(mode, "off"), always = !strcmp(mode, "always"), never = !strcmp(mode, "never");
	arena_stats_t s0, s1, s2, s3;
	snap(&s0);
	printf("decide.at_start=%s\n", s0.thp_decision);
	uint8_t *h;
	if (use_calloc) {
		h = calloc(1, 8 * MiB);
		CHECK(h != NULL, "calloc(8 MiB) failed");
		if (!h)
			return;
		pat_fill_sparse(h, 8 * MiB, 900);
	} else {
		h = written(8 * MiB, 900);
	}
	snap(&s1);
	size_t adv1 = grew(s1.chunks_advised_huge, s0.chunks_advised_huge), anon1 = anon_in(h, 8 * MiB);
	printf("decide.decision=%s\ndecide.probes=%lu\ndecide.probe_huge_us=%lu\ndecide.probe_small_us=%lu\n"
	       "decide.fresh_advised=%zu\ndecide.fresh_small=%lu\ndecide.fresh_anon=%zu\n",
	       s1.thp_decision, (unsigned long)s1.thp_probes, (unsigned long)(s1.thp_probe_huge_ns / 1000),
	       (unsigned long)(s1.thp_probe_small_ns / 1000), adv1,
	       (unsigned long)s1.thp_chunks_small, anon1);
	free(h);
	snap(&s2);
	uint8_t *r = written(8 * MiB, 901);
	snap(&s3);
	size_t adv2 = grew(s3.chunks_advised_huge, s2.chunks_advised_huge);
	printf("decide.reused_same=%d\ndecide.reused_advised=%zu\ndecide.reused_small=%lu\n", r == h, adv2,
	       (unsigned long)(s3.thp_chunks_small - s1.thp_chunks_small));
	int small = !strcmp(s1.thp_decision, "small");
	if (real) {
		CHECK(s1.thp_probes == 1, "a fresh 8 MiB block under THP %s: %lu probes, expected 1", s1.thp_mode,
		      (unsigned long)s1.thp_probes);
		CHECK(small || !strcmp(s1.thp_decision, "huge") || !strcmp(s1.thp_decision, "unformed"),
		      "decision after a probe: \"%s\"", s1.thp_decision);
		CHECK(s1.thp_probe_huge_ns > 0 && s1.thp_probe_small_ns > 0, "a probe with no figures");
	}
	if (cheap) {
		CHECK(!strcmp(s1.thp_decision, "huge"), "sim_thp_probe:cheap: decision \"%s\"", s1.thp_decision);
		CHECK(adv1 == 4, "decision huge: a fresh 8 MiB block got %zu chunks advised huge, expected 4", adv1);
	}
	if (costly) {
		CHECK(small, "sim_thp_probe:costly: decision \"%s\"", s1.thp_decision);
		CHECK(s1.thp_probe_huge_ns == 5800000, "sim_thp_probe:costly: the probe said %lu ns",
		      (unsigned long)s1.thp_probe_huge_ns);
	}
	if (small || cheap || costly) {
		CHECK(!small || adv1 == 0, "decision small: a fresh 8 MiB block got %zu chunks advised huge", adv1);
		CHECK(!small || s1.thp_chunks_small == 4, "decision small: %lu chunks kept small, expected 4",
		      (unsigned long)s1.thp_chunks_small);
		CHECK(!small || anon1 == 0, "decision small: the fresh block has %.1f MiB of huge pages", mib(anon1));
		CHECK(r != h || adv2 == 4 || !small,
		      "decision small: the block's reused chunks got %zu chunks advised huge, expected 4", adv2);
	}
	if (unformed) {
		CHECK(!strcmp(s1.thp_decision, "unformed"), "sim_thp_probe:unformed: decision \"%s\"", s1.thp_decision);
		CHECK(adv1 == 0 && s1.thp_chunks_small == 0, "decision unformed: %zu advised huge, %lu kept small",
		      adv1, (unsigned long)s1.thp_chunks_small);
	}
	if (use_calloc) {
		CHECK(s1.thp_probes == 0, "calloc(8 MiB): %lu probes, expected none", (unsigned long)s1.thp_probes);
		CHECK(!strcmp(s1.thp_decision, "unprobed") || !strcmp(s1.thp_decision, "off"),
		      "calloc only: decision \"%s\"", s1.thp_decision);
	}
	if (off || always || never) {
		const char *want = off ? "off" : always ? "always" : "never";
		CHECK(!strcmp(s1.thp_decision, want), "decision \"%s\", expected \"%s\"", s1.thp_decision, want);
		CHECK(s3.thp_probes == 0, "%s: %lu probes, expected none", mode, (unsigned long)s3.thp_probes);
		CHECK(s3.thp_chunks_small == 0, "%s: %lu chunks kept small", mode, (unsigned long)s3.thp_chunks_small);
	}
	if (always)
		CHECK(adv1 >= 4, "thp:always: a fresh 8 MiB block got %zu chunks advised huge", adv1);
	size_t bad = pat_check_sparse(r, 8 * MiB, 901);
	CHECK(bad == SIZE_MAX, "the reused 8 MiB block corrupt at %zu", bad);
	free(r);
}

/* ---- sparse: arena chunks made from a huge block's chunks --------------------------------------------- */

/* A huge block (advised MADV_HUGEPAGE) is written, freed and purged; then
 * 8 large blocks of 1 MiB need 8 new arena chunks, some of them those
 * chunks, each holding one block with one page touched.  A sparse arena
 * chunk is not to be backed by a huge page (thp:auto; dense ones are
 * advised later), whatever the chunk was before. */
static void sparse(const char *mode)
{
	int always = !strcmp(mode, "always");
	static uint8_t *b[8];
	live_setup();
	uint8_t *h = written(16 * MiB, 800);
	size_t a_h = anon_huge();
	free(h);
	purge_now();
	size_t a0 = anon_huge(), rss0 = rss_bytes();
	arena_stats_t s0, s1;
	snap(&s0);
	for (int i = 0; i < 8; i++) {
		b[i] = malloc(MiB);
		CHECK(b[i] != NULL, "malloc(1 MiB) failed");
		if (!b[i])
			exit(3);
		b[i][0] = (uint8_t)(i + 1);
	}
	snap(&s1);
	size_t a1 = anon_huge(), rss1 = rss_bytes();
	printf("sparse.huge_block_anon=%zu\nsparse.anon_before=%zu\nsparse.anon_after=%zu\n", a_h, a0, a1);
	printf("sparse.new_chunks=%zu\nsparse.rss_growth=%zd\n", s1.chunks - s0.chunks,
	       (ssize_t)(rss1 - rss0));
	if (!always) {
		CHECK(a1 <= a0,
		      "%zu new arena chunks each holding one 1 MiB block (one page touched) gained %.1f MiB of "
		      "huge pages (a purged huge block's chunks were recycled)",
		      s1.chunks - s0.chunks, mib(a1 - a0));
		CHECK(rss1 <= rss0 + 4 * MiB,
		      "8 new sparse arena chunks (one page touched in each) grew RSS by %.1f MiB", mib(rss1 - rss0));
	}
	for (int i = 0; i < 8; i++) {
		CHECK(b[i][0] == (uint8_t)(i + 1), "1 MiB block %d lost its first byte", i);
		free(b[i]);
	}
	live_check("end");
}

/* ---- stats: consistency and malloc_stats --------------------------------------------------------------- */

static void stats(void)
{
	static void *p[400];
	static size_t n[400];
	arena_stats_t s1, s2;
	live_setup();
	rng_t r;
	rng_seed(&r, 99);
	for (int i = 0; i < 400; i++) {
		n[i] = i < 300 ? rng_logsize(&r, 16, 16 * KiB)
		     : i < 390 ? rng_logsize(&r, 16 * KiB + 1, MiB) : rng_logsize(&r, MiB + 1, 6 * MiB);
		p[i] = written(n[i], (uint32_t)i);
	}
	for (int i = 0; i < 400; i++)
		if (i % 3)
			free(p[i]);
	snap(&s1);
	facts("freed", &s1, &s1, rss_bytes());
	printf("freed.chunks_free=%zu\nfreed.chunks=%zu\nfreed.mapped=%zu\nfreed.active=%zu\nfreed.allocated=%zu\n",
	       s1.chunks_free, s1.chunks, s1.mapped, s1.active, s1.allocated);
	size_t fr = s1.dirty + s1.lazy + s1.zero;
	CHECK(fr > 0, "after frees dirty + lazy + zero = 0");
	CHECK(s1.dirty > 0, "after freeing 2/3 of 400 blocks (10 huge) dirty = 0 (default decay 1000 ms)");
	CHECK(fr >= s1.chunks_free * (2 * MiB),
	      "dirty + lazy + zero = %zu < the %zu free chunks", fr, s1.chunks_free);
	CHECK(s1.mapped == (s1.chunks + s1.chunks_free) * (2 * MiB),
	      "mapped %zu != (chunks %zu + free chunks %zu) * 2 MiB", s1.mapped, s1.chunks, s1.chunks_free);
	CHECK(s1.active >= s1.allocated, "active %zu < allocated %zu", s1.active, s1.allocated);
	CHECK(fr <= s1.mapped, "dirty + lazy + zero = %zu > mapped %zu", fr, s1.mapped);
	fflush(stdout);
	malloc_stats();

	size_t ret = purge_now();
	snap(&s2);
	facts("purged", &s2, &s1, rss_bytes());
	printf("purged.returned=%zu\n", ret);
	CHECK(ret >= s1.dirty, "arena_purge() returned %zu, dirty was %zu", ret, s1.dirty);
	CHECK(s2.dirty == 0 && s2.lazy == 0, "after arena_purge() dirty %zu lazy %zu", s2.dirty, s2.lazy);
	CHECK(s2.zero >= s1.zero + s1.dirty + s1.lazy, "after arena_purge() zero %zu < %zu + %zu + %zu",
	      s2.zero, s1.zero, s1.dirty, s1.lazy);
	CHECK(grew(s2.purged_dontneed, s1.purged_dontneed) >= s1.dirty,
	      "arena_purge() purged %zu bytes with DONTNEED, dirty was %zu",
	      grew(s2.purged_dontneed, s1.purged_dontneed), s1.dirty);
	for (int i = 0; i < 400; i += 3) {
		size_t bad = pat_check_sparse(p[i], n[i], (uint32_t)i);
		CHECK(bad == SIZE_MAX, "block %d of %zu bytes corrupt at %zu after arena_purge", i, n[i], bad);
	}
	live_check("end");
}

int main(int argc, char **argv)
{
	stats_get = (int (*)(arena_stats_t *))dlsym(RTLD_DEFAULT, "arena_stats_get");
	purge_now = (size_t (*)(void))dlsym(RTLD_DEFAULT, "arena_purge");
	anon_huge = (size_t (*)(void))dlsym(RTLD_DEFAULT, "arena_stats_anon_huge");
	if (!stats_get || !purge_now || !anon_huge) {
		printf("FAIL: libarena is not loaded (LD_PRELOAD?)\n");
		return 4;
	}
	if (argc < 2) {
		fprintf(stderr, "usage: pages SCENARIO [MODE]\n");
		return 2;
	}
	const char *s = argv[1], *mode = argc > 2 ? argv[2] : "";
	if (!strcmp(s, "at_once"))
		at_once(mode);
	else if (!strcmp(s, "no_purge"))
		no_purge();
	else if (!strcmp(s, "decay"))
		decay();
	else if (!strcmp(s, "background"))
		background(mode);
	else if (!strcmp(s, "trim"))
		trim();
	else if (!strcmp(s, "fine"))
		fine(mode);
	else if (!strcmp(s, "batch"))
		batch(mode);
	else if (!strcmp(s, "stale"))
		stale();
	else if (!strcmp(s, "thp"))
		thp(mode);
	else if (!strcmp(s, "sparse"))
		sparse(mode);
	else if (!strcmp(s, "stats"))
		stats();
	else if (!strcmp(s, "decide"))
		decide(mode);
	else if (!strcmp(s, "grow"))
		grow(mode);
	else if (!strcmp(s, "dense"))
		dense(mode);
	else if (!strcmp(s, "regrow"))
		regrow(mode);
	else if (!strcmp(s, "refill"))
		refill(mode);
	else {
		fprintf(stderr, "pages: unknown scenario %s\n", s);
		return 2;
	}
	return checks_report();
}
