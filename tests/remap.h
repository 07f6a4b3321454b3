/*
 * Helpers of test_remap.c and progs/remap.c (issue 5: realloc of huge blocks
 * moves pages with mremap).  Header only; needs common.h first.
 *
 * A realloc can only be shown to move when the block cannot grow in place,
 * so these helpers put blocks where the test wants them.  The allocator
 * hands out chunk runs from its free runs (the head of the run it picks)
 * before it advances its frontier, so mallocs of one size land on a free
 * target chunk after at most as many tries as there are free runs searched
 * before it: take_at() keeps allocating until one lands there.
 *
 *  - take_at(target, size, tries): a huge block starting exactly at target.
 *  - place_blocked(&b, n): a huge block of n bytes with a guard in the chunk
 *    before it and a blocker in the chunk after it: it cannot grow in place,
 *    and its chunks, once freed, form a free run of their own (so the next
 *    request of that size gets exactly them back).
 *  - maps_*: mappings of this process (/proc/self/maps).
 */
#ifndef ARENA_TESTS_REMAP_H
#define ARENA_TESTS_REMAP_H

#include <dlfcn.h>
#include <sys/utsname.h>

#define CHUNK (2 * MiB)
#define TAKE_TRIES 256

/* Chunks a huge block of n bytes occupies. */
static inline size_t chunks_of(size_t n)
{
	return (n + CHUNK - 1) / CHUNK;
}

/* The first chunk after the huge block p of n bytes. */
static inline uintptr_t end_of(const void *p, size_t n)
{
	return (uintptr_t)p + chunks_of(n) * CHUNK;
}

/* malloc(size) (huge) until a block starts at target, at most tries times;
 * the misses are freed again.  NULL when target was never handed out (it
 * is taken, or more free runs come first than tries). */
static inline void *take_at(uintptr_t target, size_t size, int tries)
{
	void *miss[TAKE_TRIES], *hit = NULL;
	int n = 0;
	if (tries > TAKE_TRIES)
		tries = TAKE_TRIES;
	while (n < tries) {
		void *p = malloc(size);
		if (!p)
			break;
		if ((uintptr_t)p == target) {
			hit = p;
			break;
		}
		miss[n++] = p;
	}
	while (n > 0)
		free(miss[--n]);
	return hit;
}

typedef struct placed {
	uint8_t *p;          /* the block */
	size_t n;            /* its size */
	void *guard;         /* the chunk before it */
	void *blocker;       /* the chunk after it */
} placed_t;

/*
 * A huge block of n bytes between a guard chunk and a blocker chunk: a span
 * of chunks_of(n) + 2 chunks is allocated and freed (a span comes from the
 * head of a free run or from the frontier, so the chunk before it is not
 * free), then guard, block and blocker are taken at its start, second chunk
 * and last chunk.  Returns 0, or -1 (nothing held) if one did not land.
 */
static inline int place_blocked(placed_t *b, size_t n)
{
	size_t k = chunks_of(n);
	void *span = malloc((k + 2) * CHUNK);
	if (!span)
		return -1;
	uintptr_t x = (uintptr_t)span;
	free(span);
	/* every chunk of the span in one state: the chunk layer takes the
	 * dirtiest place first, and the dirty cap may have purged all of the
	 * freed span but its newest chunk, which would be taken back first
	 * (arena_purge by dlsym: progs/remap has libarena by LD_PRELOAD) */
	size_t (*purge)(void) = (size_t (*)(void))dlsym(RTLD_DEFAULT, "arena_purge");
	if (purge)
		purge();
	b->n = n;
	b->guard = take_at(x, CHUNK, TAKE_TRIES);
	b->p = take_at(x + CHUNK, n, TAKE_TRIES);
	b->blocker = take_at(x + (k + 1) * CHUNK, CHUNK, TAKE_TRIES);
	if (b->guard && b->p && b->blocker)
		return 0;
	free(b->guard);
	free(b->p);
	free(b->blocker);
	return -1;
}

/* Frees what place_blocked() put around the block (not the block). */
static inline void placed_release(placed_t *b)
{
	free(b->guard);
	free(b->blocker);
	b->guard = b->blocker = NULL;
}

/* Mappings of this process overlapping [lo, hi); every mapping when
 * hi == 0.  -1 when /proc/self/maps cannot be read. */
static inline int maps_count(uintptr_t lo, uintptr_t hi)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f)) {
		unsigned long s, e;
		if (!strchr(line, '\n') && !feof(f))
			continue; /* the rest of an overlong line comes next */
		if (sscanf(line, "%lx-%lx", &s, &e) != 2)
			continue;
		if (hi == 0 || (s < hi && e > lo))
			n++;
	}
	fclose(f);
	return n;
}

/* vm.max_map_count, or 65530 (the kernel's default) when unreadable. */
static inline long max_map_count(void)
{
	long v = 65530;
	FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = 65530;
		fclose(f);
	}
	return v;
}

/* Whether the running kernel is at least major.minor. */
static inline int kernel_at_least(int major, int minor)
{
	struct utsname u;
	int ma = 0, mi = 0;
	if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &ma, &mi) != 2)
		return 0;
	return ma > major || (ma == major && mi >= minor);
}

/* Stripes: 16 bytes of the offset pattern at the start of every 4 KiB page,
 * so the pattern does not depend on the block's size (a kept prefix stays
 * valid across any resize) and checking 64 MiB stays cheap. */
#define STRIPE 16

static inline void stripe_fill(uint8_t *p, size_t from, size_t to, uint32_t seed)
{
	for (size_t off = from & ~(size_t)4095; off < to; off += 4096)
		pat_fill(p, off, off + STRIPE < to ? off + STRIPE : to, seed);
}

/* First bad offset of the stripes in [0, n), or SIZE_MAX. */
static inline size_t stripe_check(const uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t off = 0; off < n; off += 4096) {
		size_t bad = pat_check(p, off, off + STRIPE < n ? off + STRIPE : n, seed);
		if (bad != SIZE_MAX)
			return bad;
	}
	return SIZE_MAX;
}

#endif /* ARENA_TESTS_REMAP_H */
