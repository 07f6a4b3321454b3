/*
 * realloc of huge blocks (issue 5), seen from a program whose ARENA_CONF the
 * test chooses.  Run by test_remap.c under LD_PRELOAD=libarena.so: the
 * configuration is read once at start-up, so each one is a fresh process.
 *
 *   remap moves SIZE...   each SIZE (bytes, k/m suffix) a huge block that
 *                         cannot grow in place, filled, realloc'd to twice
 *                         its size (a forced move); per size TAG (the
 *                         argument as given): TAG.moved, TAG.remap,
 *                         TAG.copy, TAG.mremap (counter deltas of that move)
 *   remap populate        a huge block grown in place, and one moved, each
 *                         by a 256 MiB tail over memory that is not resident;
 *                         inplace.tail_faults, moved.tail_faults: minor
 *                         faults taken writing the tail
 *   remap maplimit SPARE  a forced move with the process's mappings at
 *                         vm.max_map_count less SPARE (see maplimit())
 *
 * Both print remap_dontunmap, sys_mremap (the total) and thp_mode, check what
 * holds in every configuration (contents kept, the block moved or grew where
 * it had to) and print one "FAIL: ..." line per broken promise (exit 1), else
 * "ok" (exit 0).  What depends on the configuration, the test checks.
 */
#include <dlfcn.h>
#include <malloc.h>
#include <sys/mman.h>

#include "arena.h"
#include "common.h"
#include "remap.h"
#include "prog_check.h"

static int (*stats_get)(arena_stats_t *);
static size_t (*purge_now)(void);


static void snap(arena_stats_t *s)
{
	if (stats_get(s) != 0) {
		printf("FAIL: arena_stats_get failed\n");
		exit(3);
	}
}

static unsigned long long delta(uint64_t a, uint64_t b)
{
	return (unsigned long long)(a - b);
}

/* "16m" -> 16 MiB; 0 when malformed. */
static size_t parse_size_arg(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end == 'k' || *end == 'K')
		v <<= 10, end++;
	else if (*end == 'm' || *end == 'M')
		v <<= 20, end++;
	return *end ? 0 : (size_t)v;
}

/* ---- moves: one forced move per size ------------------------------------------------- */

static void move_one(const char *tag, size_t n, uint32_t seed)
{
	placed_t b;
	if (place_blocked(&b, n) != 0) {
		printf("FAIL: %s: could not place a %zu-byte block between two taken chunks\n", tag, n);
		return;
	}
	pat_fill_sparse(b.p, n, seed);
	arena_stats_t s0, s1;
	uintptr_t from = (uintptr_t)b.p;
	snap(&s0);
	uint8_t *q = realloc(b.p, 2 * n);
	snap(&s1);
	CHECK(q != NULL, "%s: realloc(%zu -> %zu) failed", tag, n, 2 * n);
	if (!q) {
		placed_release(&b);
		free(b.p);
		return;
	}
	printf("%s.moved=%d\n", tag, (uintptr_t)q != from);
	printf("%s.remap=%llu\n%s.copy=%llu\n%s.mremap=%llu\n", tag,
	       delta(s1.huge_moved_remap, s0.huge_moved_remap), tag,
	       delta(s1.huge_moved_copy, s0.huge_moved_copy), tag, delta(s1.sys_mremap, s0.sys_mremap));
	CHECK((uintptr_t)q != from, "%s: a block with its next chunk taken grew in place at %p", tag, (void *)q);
	size_t bad = pat_check_sparse(q, n, seed);
	CHECK(bad == SIZE_MAX, "%s: moved %#lx -> %p, byte %zu of %zu lost", tag, (unsigned long)from, (void *)q,
	      bad, n);
	placed_release(&b);
	free(q);
}

static void moves(int argc, char **argv)
{
	for (int i = 0; i < argc; i++) {
		size_t n = parse_size_arg(argv[i]);
		if (n <= MiB) {
			printf("FAIL: size %s is not a huge block\n", argv[i]);
			continue;
		}
		move_one(argv[i], n, 100u + (uint32_t)i);
	}
}

/* ---- populate: faults writing a grown block's new tail ------------------------------------ */

#define HEAD (4 * MiB)
#define TAIL (256 * MiB)

/* Minor faults taken writing [HEAD, HEAD + TAIL) of p. */
static long write_tail(uint8_t *p)
{
	long f0 = minor_faults();
	memset(p + HEAD, 0x5A, TAIL);
	long f1 = minor_faults();
	escape(p);
	return f1 - f0;
}

/* A block of HEAD + TAIL bytes shrunk to HEAD (its tail chunks stay free
 * after it), every free chunk purged (nothing resident), then grown back in
 * place. */
static void grow_in_place(void)
{
	arena_stats_t s0, s1;
	uint8_t *p = malloc(HEAD + TAIL);
	CHECK(p != NULL, "malloc(260 MiB) failed");
	if (!p)
		return;
	uintptr_t from = (uintptr_t)p;
	uint8_t *q = realloc(p, HEAD);
	CHECK((uintptr_t)q == from, "shrinking a huge block moved it (%#lx -> %p)", (unsigned long)from, (void *)q);
	if (!q)
		return;
	pat_fill(q, 0, 4096, 1);
	purge_now();
	snap(&s0);
	uint8_t *g = realloc(q, HEAD + TAIL);
	snap(&s1);
	CHECK((uintptr_t)g == from, "growing back into the free chunks after it moved the block (%#lx -> %p)",
	      (unsigned long)from, (void *)g);
	CHECK(s1.huge_resized_in_place == s0.huge_resized_in_place + 1,
	      "growing in place: huge_resized_in_place grew by %llu",
	      delta(s1.huge_resized_in_place, s0.huge_resized_in_place));
	if (!g)
		return;
	printf("inplace.tail_faults=%ld\n", write_tail(g));
	CHECK(pat_check(g, 0, 4096, 1) == SIZE_MAX, "the block's first page changed while it grew");
	free(g);
}

/* A block of HEAD bytes that cannot grow in place, every free chunk purged,
 * then grown to HEAD + TAIL: it moves, and its tail lies on purged chunks. */
static void grow_moved(void)
{
	placed_t b;
	if (place_blocked(&b, HEAD) != 0) {
		printf("FAIL: could not place a 4 MiB block between two taken chunks\n");
		return;
	}
	pat_fill(b.p, 0, HEAD, 2);
	purge_now();
	uintptr_t from = (uintptr_t)b.p;
	uint8_t *g = realloc(b.p, HEAD + TAIL);
	placed_release(&b);
	CHECK(g != NULL && (uintptr_t)g != from, "growing a blocked 4 MiB block to 260 MiB: %#lx -> %p",
	      (unsigned long)from, (void *)g);
	if (!g)
		return;
	if ((uintptr_t)g != from) {
		printf("moved.tail_faults=%ld\n", write_tail(g));
		CHECK(pat_check(g, 0, HEAD, 2) == SIZE_MAX, "moved block lost its first 4 MiB");
	}
	free(g);
}

/* ---- maplimit: a forced move when the process is out of mappings --------------------------- */

/*
 * Fills this process's mappings up to vm.max_map_count (every other page of
 * a PROT_NONE area made readable: a mapping each), gives `spare` of them
 * back, then grows a 4 MiB block that cannot grow in place into a free
 * 4-chunk run (already committed).  The kernel refuses the mremap when the
 * count is near the limit; realloc must then copy, or fail with ENOMEM
 * leaving the block intact: never abort the program.  Prints
 * maplimit.maps_before, maplimit.result (moved|enomem), maplimit.remap,
 * maplimit.copy.
 */
static void maplimit(int spare)
{
	placed_t b;
	if (place_blocked(&b, HEAD) != 0) {
		printf("FAIL: could not place a 4 MiB block between two taken chunks\n");
		return;
	}
	pat_fill(b.p, 0, HEAD, 3);
	free(malloc(2 * HEAD)); /* a free, committed run for the move */
	printf("maplimit.spare=%d\n", spare);
	fflush(stdout);
	size_t np = 2 * (size_t)max_map_count() + 64, last = 0;
	char *area = mmap(NULL, np * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (area == MAP_FAILED) {
		printf("FAIL: mmap of the filler area\n");
		return;
	}
	for (size_t i = 1; i < np && mprotect(area + i * 4096, 4096, PROT_READ) == 0; i += 2)
		last = i;
	for (int k = 0; k < spare && last >= 2; k++, last -= 2)
		mprotect(area + last * 4096, 4096, PROT_NONE); /* merges three mappings into one */
	int maps = maps_count(0, 0);
	arena_stats_t s0, s1;
	snap(&s0);
	errno = 0;
	uint8_t *q = realloc(b.p, 2 * HEAD);
	int err = errno;
	snap(&s1);
	munmap(area, np * 4096);
	printf("maplimit.maps_before=%d\nmaplimit.result=%s\n", maps, q ? "moved" : "enomem");
	printf("maplimit.remap=%llu\nmaplimit.copy=%llu\n", delta(s1.huge_moved_remap, s0.huge_moved_remap),
	       delta(s1.huge_moved_copy, s0.huge_moved_copy));
	uint8_t *keep = q ? q : b.p;
	CHECK(q || err == ENOMEM, "realloc failed with errno %d, not ENOMEM", err);
	CHECK(pat_check(keep, 0, HEAD, 3) == SIZE_MAX, "the block (%s) lost its contents", q ? "moved" : "kept");
	placed_release(&b);
	free(keep);
}

int main(int argc, char **argv)
{
	stats_get = (int (*)(arena_stats_t *))dlsym(RTLD_DEFAULT, "arena_stats_get");
	purge_now = (size_t (*)(void))dlsym(RTLD_DEFAULT, "arena_purge");
	if (!stats_get || !purge_now) {
		printf("FAIL: libarena is not loaded (LD_PRELOAD?)\n");
		return 4;
	}
	if (argc < 2) {
		fprintf(stderr, "usage: remap moves SIZE... | remap populate | remap maplimit SPARE\n");
		return 2;
	}
	if (!strcmp(argv[1], "moves")) {
		moves(argc - 2, argv + 2);
	} else if (!strcmp(argv[1], "maplimit") && argc == 3) {
		maplimit(atoi(argv[2]));
	} else if (!strcmp(argv[1], "populate")) {
		grow_in_place();
		grow_moved();
	} else {
		fprintf(stderr, "remap: unknown scenario %s\n", argv[1]);
		return 2;
	}
	arena_stats_t s;
	snap(&s);
	printf("remap_dontunmap=%u\nsys_mremap=%llu\nthp_mode=%s\n", s.remap_dontunmap,
	       (unsigned long long)s.sys_mremap, s.thp_mode);
	return checks_report();
}
