/*
 * chunk.c: regions, chunk descriptors, runs of free chunks (boundary tags,
 * merging, best fit, splitting), the frontier, growth and shrinking in place,
 * moves (a refused mremap copies), THP advice, and what happens when the
 * kernel refuses address space or commit.  The clock of the fake OS stands
 * still, so nothing decays here (test_decay.c).
 */
#include "fake_os.h"
#include "unit.h"

#include <errno.h>

static void start(void)
{
	fake.now_ms = 1000000;
	/* Huge blocks' chunks are freed dirty here, as arena chunks are (by
	 * default they are purged at free: test_decay.c). */
	conf.huge_decay_ms = -1;
	chunk_init();
}

static char *alloc_kind(size_t n, uint8_t kind, bool *zero)
{
	bool z;
	char *p = chunk_alloc(n, CHUNK_SIZE, kind, kind == CK_HUGE ? n * CHUNK_SIZE : 0, &z);
	cr_assert(p, "chunk_alloc(%zu) failed", n);
	if (zero)
		*zero = z;
	return p;
}

static char *alloc(size_t n)
{
	return alloc_kind(n, CK_HUGE, NULL);
}

static size_t idx(const void *p)
{
	return (size_t)((const char *)p - regions[0].base) >> CHUNK_SHIFT;
}

static chunk_desc_t *desc(const void *p)
{
	return chunk_desc_of(p);
}

/* [p, p + n chunks) is one free run (both boundary tags say n). */
static void assert_free_run(const char *p, size_t n)
{
	chunk_desc_t *d = desc(p);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(d[i].kind, CK_FREE, "chunk %zu of the run is not free", i);
	cr_assert_eq(d[0].nchunks, n, "run head at chunk %zu says %u chunks, want %zu", idx(p),
		     d[0].nchunks, n);
	cr_assert_eq(d[n - 1].nchunks, n, "run tail says %u chunks, want %zu", d[n - 1].nchunks, n);
	if (idx(p) > 0)
		cr_assert_neq(d[-1].kind, CK_FREE, "the run is not maximal on the left");
	if (idx(p) + n < regions[0].frontier)
		cr_assert_neq(d[n].kind, CK_FREE, "the run is not maximal on the right");
}

Test(chunk, first_region)
{
	start();
	cr_assert_eq(atomic_load(&nregions), 1);
	region_t *r = &regions[0];
	cr_assert_eq(fake.nreserve, 2, "the region, its header table");
	cr_assert_eq(r->size + PAGE_SIZE, fake.reserve_size[0], "the region and a page after it");
	cr_assert_eq(r->size, (size_t)64 << 30, "a 64 GiB region by default, got %zu", r->size);
	cr_assert_eq((uintptr_t)r->base % CHUNK_SIZE, 0);
	cr_assert_eq(r->nchunks, r->size / CHUNK_SIZE);
	cr_assert_eq(r->frontier, 0);
	cr_assert_eq(r->committed, 0);
	cr_assert_eq(chunk_figures().mapped, 0);
	cr_assert_eq(sizeof(chunk_desc_t), 64);
}

Test(chunk, fresh_chunks_are_zero_and_described)
{
	start();
	bool zero = false;
	char *a = alloc_kind(1, CK_ARENA, &zero);
	cr_assert_eq(a, regions[0].base);
	cr_assert(zero, "a fresh chunk is zero");
	cr_assert_eq(desc(a)->kind, CK_ARENA);
	cr_assert_eq(regions[0].frontier, 1);
	cr_assert_eq(regions[0].committed, 16, "commits 16 chunks at least");
	cr_assert_eq(fake.ncommit, 2, "the chunks, their headers");
	cr_assert_eq(fake.commit[0].size, 16 * CHUNK_SIZE);
	cr_assert_eq(fake.commit[1].size, ALIGN_UP(16 * CHUNK_HDR_BYTES, PAGE_SIZE));

	char *h = alloc_kind(3, CK_HUGE, &zero);
	cr_assert_eq(h, a + CHUNK_SIZE);
	cr_assert(zero);
	chunk_desc_t *d = desc(h);
	cr_assert_eq(d[0].kind, CK_HUGE);
	cr_assert_eq(d[0].nchunks, 3);
	cr_assert_eq(d[0].size, 3 * CHUNK_SIZE);
	for (unsigned i = 1; i < 3; i++) {
		cr_assert_eq(d[i].kind, CK_HUGE_BODY);
		cr_assert_eq(d[i].nchunks, i, "a body chunk holds its distance to the head");
	}
	cr_assert_eq(chunk_figures().mapped, 4 * CHUNK_SIZE);
	cr_assert_eq(chunk_figures().nfree, 0);
}

Test(chunk, desc_of_only_our_chunks)
{
	start();
	char *a = alloc(2);
	int local;
	cr_assert_eq(desc(a + CHUNK_SIZE + 5), &regions[0].desc[1]);
	cr_assert_eq(desc(regions[0].base + regions[0].size - 1), &regions[0].desc[regions[0].nchunks - 1]);
	cr_assert_null(desc(&local));
	cr_assert_null(desc(regions[0].base - 1));
	cr_assert_null(desc(regions[0].base + regions[0].size));
	cr_assert_eq(chunk_base_of(a + CHUNK_SIZE + 12345), a + CHUNK_SIZE);
	cr_assert_eq(chunk_desc_addr(desc(a + CHUNK_SIZE)), a + CHUNK_SIZE);
}

/* Arena chunk headers live out of their chunks, in the region's header
 * table between two pages never committed (no overflow of a block reaches
 * one), CHUNK_HDR_BYTES apart: the first lines of 64 chunks in a row fall in
 * 64 cache sets (4 KiB apart: the sets of a 32 KiB 8-way L1). */
Test(chunk, arena_chunk_headers_are_out_of_line_and_coloured)
{
	start();
	char *a = alloc(128);
	region_t *r = &regions[0];
	bool seen[64] = { false };
	for (size_t k = 0; k < 128; k++) {
		char *base = a + (k << CHUNK_SHIFT);
		arena_chunk_t *c = chunk_hdr_of(base + 777 * PAGE_SIZE / 2);
		cr_assert_eq((char *)c, r->hdrs + (size_t)(base - r->base) / CHUNK_SIZE * CHUNK_HDR_BYTES);
		cr_assert((char *)c + sizeof(*c) <= base || (char *)c >= r->base + r->size,
			  "chunk %zu: header inside the region", k);
		seen[(uintptr_t)c % PAGE_SIZE / 64] = true;
		c->arena = NULL; /* committed */
		c->base = base;
		cr_assert_eq(page_addr(c, 0), base);
		cr_assert_eq(page_addr(c, 300), base + 300 * PAGE_SIZE);
		cr_assert_eq(page_index(c, base + 300 * PAGE_SIZE + 4095), 300);
	}
	for (size_t i = 0; i < 64; i++)
		cr_assert(seen[i], "colour %zu never used", i);
	/* the pages around the table: committed never */
	char *lead = r->hdrs - PAGE_SIZE;
	char *tail = r->hdrs + ALIGN_UP(r->nchunks * CHUNK_HDR_BYTES, PAGE_SIZE);
	cr_assert_gt(fake.ncommit, 0);
	for (unsigned i = 0; i < fake.ncommit && i < FAKE_LOG; i++) {
		char *from = fake.commit[i].addr, *to = from + fake.commit[i].size;
		cr_assert(to <= lead || from >= lead + PAGE_SIZE, "commit %u: the leading guard", i);
		cr_assert(to <= tail || from >= tail + PAGE_SIZE, "commit %u: the trailing guard", i);
	}
}

Test(chunk, freed_chunks_are_dirty_and_reused)
{
	start();
	char *a = alloc(1);
	alloc(1);
	chunk_free(a, 1);
	cr_assert_eq(desc(a)->kind, CK_FREE);
	cr_assert_eq(desc(a)->state, MS_DIRTY);
	cr_assert_eq(chunk_figures().nfree, 1);
	cr_assert_eq(chunk_figures().dirty, CHUNK_SIZE);
	bool zero = true;
	cr_assert_eq(alloc_kind(1, CK_ARENA, &zero), a, "the free chunk before the frontier");
	cr_assert_not(zero, "a freed chunk is dirty");
	cr_assert_eq(chunk_figures().dirty, 0);
	cr_assert_eq(chunk_figures().mapped, 2 * CHUNK_SIZE);
}

/* chunk_alloc_dirty: the arena chunk given back dirty longest ago, out of
 * the middle of its free run (the rest stays one run on either side);
 * never a huge block's dirty chunk, never a zero one. */
Test(chunk, alloc_dirty_takes_only_arena_chunks_given_back_dirty)
{
	start();
	char *huge = alloc(2);
	char *run = alloc_kind(3, CK_ARENA, NULL), *guard = alloc(1);
	cr_assert_null(chunk_alloc_dirty(CK_ARENA), "nothing is free");
	chunk_free(huge, 2);
	cr_assert_null(chunk_alloc_dirty(CK_ARENA), "a huge block's dirty chunks are not taken");
	chunk_free(run + CHUNK_SIZE, 1);
	fake.now_ms++;
	chunk_free(run, 1);
	chunk_free(run + 2 * CHUNK_SIZE, 1);
	assert_free_run(huge, 5);
	cr_assert_eq(chunk_alloc_dirty(CK_ARENA), run + CHUNK_SIZE, "the oldest dirty one");
	cr_assert_eq(desc(run + CHUNK_SIZE)->kind, CK_ARENA);
	assert_free_run(huge, 3);
	assert_free_run(run + 2 * CHUNK_SIZE, 1);
	cr_assert_eq(chunk_figures().dirty, 4 * CHUNK_SIZE);
	cr_assert_eq(chunk_alloc_dirty(CK_ARENA), run);
	cr_assert_eq(chunk_alloc_dirty(CK_ARENA), run + 2 * CHUNK_SIZE);
	cr_assert_null(chunk_alloc_dirty(CK_ARENA), "only the huge block's chunks are left");
	cr_assert_eq(chunk_figures().dirty, 2 * CHUNK_SIZE);
	(void)guard;
}

/* chunk_alloc_arena tells whether the chunk it gives was purged by the
 * dirty cap (chunk_trim_dirty, before it was due) and is taken again within
 * decay_ms: a heap growing back, which arena.c advises huge at birth. */
Test(chunk, alloc_arena_tells_a_chunk_the_cap_purged)
{
	start();
	bool zero, regretted = true;
	char *a = chunk_alloc_arena(&zero, &regretted);
	cr_assert(a);
	cr_assert_not(regretted, "from the frontier");
	char *guard = alloc(1);
	chunk_free(a, 1);
	cr_assert_eq(chunk_alloc_arena(&zero, &regretted), a);
	cr_assert_not(regretted, "given back dirty and taken again: nothing was purged");
	chunk_free(a, 1);
	chunk_trim_dirty(0);
	cr_assert_eq(chunk_figures().dirty, 0, "the cap purged it");
	fake.now_ms += 10;
	cr_assert_eq(chunk_alloc_arena(&zero, &regretted), a);
	cr_assert(regretted, "the cap purged it 10 ms before");
	chunk_free(a, 1);
	chunk_trim_dirty(0);
	fake.now_ms += (uint64_t)conf.decay_ms + 1;
	cr_assert_eq(chunk_alloc_arena(&zero, &regretted), a);
	cr_assert_not(regretted, "after decay_ms: decay would have purged it too");
	(void)guard;
}

/* Three neighbours freed in every order become one run of 6. */
Test(chunk, free_runs_merge_with_both_neighbours)
{
	static const int orders[6][3] = { { 0, 1, 2 }, { 0, 2, 1 }, { 1, 0, 2 },
					  { 1, 2, 0 }, { 2, 0, 1 }, { 2, 1, 0 } };
	start();
	for (int o = 0; o < 6; o++) {
		char *p[3];
		static const size_t len[3] = { 2, 3, 1 };
		p[0] = alloc(6); /* the run of a previous round, or the frontier */
		chunk_free(p[0], 6);
		for (int i = 0; i < 3; i++)
			p[i] = alloc(len[i]);
		cr_assert(p[1] == p[0] + 2 * CHUNK_SIZE && p[2] == p[1] + 3 * CHUNK_SIZE,
			  "round %d: not neighbours", o);
		if (o == 0)
			alloc(1); /* a guard after them */
		for (int i = 0; i < 3; i++)
			chunk_free(p[orders[o][i]], len[orders[o][i]]);
		assert_free_run(p[0], 6);
		cr_assert_eq(chunk_figures().nfree, 6, "round %d", o);
	}
	cr_assert_eq(chunk_figures().mapped, 7 * CHUNK_SIZE, "every round reused the same chunks");
}

/* Best fit: the shortest run that fits, not the first one listed. */
Test(chunk, best_fit_takes_the_shortest_fitting_run)
{
	start();
	char *a = alloc(5); alloc(1);
	char *b = alloc(3); alloc(1);
	char *c = alloc(4); alloc(1);
	char *e = alloc(7); alloc(1);
	size_t mapped = chunk_figures().mapped;
	chunk_free(a, 5);
	chunk_free(b, 3);
	chunk_free(c, 4);
	chunk_free(e, 7); /* bin [4, 8) now lists e, c, a */
	cr_assert_eq(alloc(4), c, "4 chunks: the run of 4, not the 7 listed first");
	cr_assert_eq(alloc(3), b);
	cr_assert_eq(alloc(5), a, "5 chunks: the run of 5, not the 7");
	cr_assert_eq(alloc(6), e, "6 chunks: the start of the only run that fits");
	assert_free_run(e + 6 * CHUNK_SIZE, 1);
	cr_assert_eq(chunk_figures().mapped, mapped, "no run was taken from the frontier");
	cr_assert_eq(chunk_figures().nfree, 1);
}

/* The shortest fit also when a longer one is listed after it. */
Test(chunk, best_fit_whatever_the_list_order)
{
	start();
	char *six = alloc(6); alloc(1);
	char *five = alloc(5); alloc(1);
	chunk_free(six, 6);
	chunk_free(five, 5); /* bin [4, 8) lists five, six */
	cr_assert_eq(alloc(4), five, "4 chunks: from the run of 5, not the 6 listed after it");
	cr_assert_eq(alloc(6), six);
}

Test(chunk, equal_runs_most_recently_freed_first)
{
	start();
	char *x = alloc(3); alloc(1);
	char *y = alloc(3); alloc(1);
	chunk_free(x, 3);
	chunk_free(y, 3);
	cr_assert_eq(alloc(3), y);
	cr_assert_eq(alloc(3), x);
}

Test(chunk, split_leaves_the_rest_as_one_run)
{
	start();
	char *a = alloc(5);
	alloc(1);
	chunk_free(a, 5);
	cr_assert_eq(alloc(2), a);
	assert_free_run(a + 2 * CHUNK_SIZE, 3);
	cr_assert_eq(alloc(3), a + 2 * CHUNK_SIZE);
	cr_assert_eq(chunk_figures().nfree, 0);
}

Test(chunk, alignment_from_the_frontier_and_from_runs)
{
	start();
	alloc(1);
	size_t align = 8 * MiB;
	bool zero;
	char *p = chunk_alloc(1, align, CK_HUGE, CHUNK_SIZE, &zero);
	cr_assert(p && (uintptr_t)p % align == 0, "%p not 8 MiB-aligned", (void *)p);
	cr_assert(zero);
	size_t gap = idx(p) - 1;
	cr_assert_eq(chunk_figures().nfree, gap, "the skipped chunks are free");
	cr_assert_eq(chunk_figures().dirty, 0, "and zero");
	if (gap) {
		assert_free_run(regions[0].base + CHUNK_SIZE, gap);
		cr_assert(alloc_kind(gap, CK_HUGE, &zero) == regions[0].base + CHUNK_SIZE && zero);
	}

	/* From a free run: the aligned start inside it. */
	char *r = alloc(12);
	alloc(1);
	chunk_free(r, 12);
	size_t mapped = chunk_figures().mapped;
	char *q = chunk_alloc(2, 4 * MiB, CK_HUGE, 2 * CHUNK_SIZE, &zero);
	cr_assert(q && (uintptr_t)q % (4 * MiB) == 0);
	cr_assert(q >= r && q + 2 * CHUNK_SIZE <= r + 12 * CHUNK_SIZE, "taken from the run");
	cr_assert_eq(chunk_figures().mapped, mapped);
	cr_assert_eq(chunk_figures().nfree, 10, "both sides of the run stay free");
}

Test(chunk, grow_and_shrink_in_place)
{
	start();
	char *h = alloc(2);
	size_t nfresh = 0;
	cr_assert(chunk_extend(h, 2, 4, 4 * CHUNK_SIZE, &nfresh), "grows at the frontier");
	cr_assert_eq(nfresh, 2, "the frontier's chunks were never touched");
	cr_assert_eq(regions[0].frontier, 4);
	cr_assert_eq(desc(h)->nchunks, 4);
	cr_assert_eq(desc(h)[3].kind, CK_HUGE_BODY);
	cr_assert_eq(desc(h)[3].nchunks, 3);
	char *g = alloc(1);
	cr_assert_eq(g, h + 4 * CHUNK_SIZE);

	chunk_shrink(h, 4, 1, 100);
	cr_assert_eq(desc(h)->nchunks, 1);
	cr_assert_eq(desc(h)->size, 100);
	assert_free_run(h + CHUNK_SIZE, 3);
	cr_assert_eq(desc(h + CHUNK_SIZE)->state, MS_DIRTY);

	cr_assert(chunk_extend(h, 1, 3, 3 * CHUNK_SIZE, &nfresh), "grows into the free chunks after it");
	cr_assert_eq(nfresh, 0, "dirty chunks are not fresh");
	cr_assert_eq(desc(h)->nchunks, 3);
	cr_assert_eq(desc(h)->size, 3 * CHUNK_SIZE);
	cr_assert_eq(desc(h)[2].kind, CK_HUGE_BODY);
	assert_free_run(h + 3 * CHUNK_SIZE, 1);
	cr_assert_not(chunk_extend(h, 3, 5, 5 * CHUNK_SIZE, &nfresh), "one free chunk, two needed");
	cr_assert(chunk_extend(h, 3, 4, 4 * CHUNK_SIZE, &nfresh));
	cr_assert_not(chunk_extend(h, 4, 5, 5 * CHUNK_SIZE, &nfresh), "the next chunk is in use");
	cr_assert_eq(chunk_figures().nfree, 0);
}

/* A block grown into huge pages purged a moment ago is not growing into
 * fresh memory (the kernel still backs them); a second after, or where the
 * purged pages were 4 KiB ones, it is. */
Test(chunk, growth_into_purged_chunks_is_fresh_once_they_are_cold)
{
	start();
	os_thp = THP_SYS_MADVISE;
	char *h = alloc(1), *x = alloc(3);
	alloc(1); /* in use after them */
	chunk_map_advise(x, 2, ADV_HUGE);
	chunk_map_advise(x + 2 * CHUNK_SIZE, 1, ADV_NOHUGE);
	chunk_free(x, 3);
	cr_assert_gt(chunk_purge_all(), 0);
	size_t nfresh = 9;
	cr_assert(chunk_extend(h, 1, 2, 2 * CHUNK_SIZE, &nfresh));
	cr_assert_eq(nfresh, 0, "a huge page purged a moment ago: warm");
	cr_assert(chunk_extend(h, 2, 4, 4 * CHUNK_SIZE, &nfresh));
	cr_assert_eq(nfresh, 1, "and one with 4 KiB pages purged a moment ago: fresh");
	chunk_shrink(h, 4, 2, 2 * CHUNK_SIZE);
	cr_assert_gt(chunk_purge_all(), 0);
	fake.now_ms += 1000;
	cr_assert(chunk_extend(h, 2, 3, 3 * CHUNK_SIZE, &nfresh));
	cr_assert_eq(nfresh, 1, "a huge page purged a second ago: fresh");
}

/* An arena chunk advised huge once dense kept its 4 KiB pages: purged a
 * moment ago, it is fresh to a huge block all the same. */
Test(chunk, a_purged_arena_chunk_is_fresh_to_a_huge_block)
{
	start();
	os_thp = THP_SYS_MADVISE;
	char *h = alloc(1), *a = alloc_kind(1, CK_ARENA, NULL);
	alloc(1); /* in use after them */
	chunk_map_advise(a, 1, ADV_HUGE);
	chunk_free(a, 1);
	cr_assert_gt(chunk_purge_all(), 0);
	size_t nfresh = 0;
	cr_assert(chunk_extend(h, 1, 2, 2 * CHUNK_SIZE, &nfresh));
	cr_assert_eq(nfresh, 1);
}

/* No address space at all: ENOMEM, and allocation works once the kernel
 * agrees again. */
Test(chunk, no_address_space_is_enomem)
{
	fake.reserve_fail = true;
	start();
	cr_assert_eq(atomic_load(&nregions), 0);
	bool zero;
	errno = 0;
	cr_assert_null(chunk_alloc(1, CHUNK_SIZE, CK_HUGE, CHUNK_SIZE, &zero));
	cr_assert_eq(errno, ENOMEM);
	fake.reserve_fail = false;
	cr_assert_not_null(chunk_alloc(1, CHUNK_SIZE, CK_HUGE, CHUNK_SIZE, &zero));
	cr_assert_eq(atomic_load(&nregions), 1);
}

/* A kernel that grants only 64 MiB: the reservation halves down to it;
 * once full (and no more granted), ENOMEM; a chunk given back can be had
 * again; when the kernel grants more, a second region. */
Test(chunk, region_exhaustion)
{
	fake.reserve_max = 64 * MiB + PAGE_SIZE; /* and the page after it */
	start();
	cr_assert_eq(atomic_load(&nregions), 1);
	cr_assert_eq(regions[0].size, 64 * MiB);
	cr_assert_eq(fake.nreserve, 12, "64 GiB halved 10 times and the headers, got %u calls",
		     fake.nreserve);
	cr_assert_eq(fake.reserve_size[0], 64 * GiB + PAGE_SIZE);
	cr_assert_eq(fake.reserve_size[10], 64 * MiB + PAGE_SIZE);

	fake.reserve_fail = true;
	char *p[32];
	for (int i = 0; i < 32; i++)
		p[i] = alloc(1);
	bool zero;
	errno = 0;
	cr_assert_null(chunk_alloc(1, CHUNK_SIZE, CK_HUGE, CHUNK_SIZE, &zero), "the region is full");
	cr_assert_eq(errno, ENOMEM);
	errno = 0;
	cr_assert_null(chunk_alloc(33, CHUNK_SIZE, CK_HUGE, 33 * CHUNK_SIZE, &zero));
	cr_assert_eq(errno, ENOMEM);
	chunk_free(p[7], 1);
	cr_assert_eq(alloc(1), p[7]);

	fake.reserve_fail = false; /* 64 MiB again */
	unsigned before = fake.nreserve;
	char *q = alloc(1);
	cr_assert_eq(atomic_load(&nregions), 2);
	cr_assert_gt(fake.nreserve, before);
	cr_assert_eq(regions[1].size, 64 * MiB);
	cr_assert_eq(chunk_desc_of(q), &regions[1].desc[0], "found in the second region");
	cr_assert_eq((char *)chunk_hdr_of(q + 12345), regions[1].hdrs, "its header, the second's first");
	cr_assert_eq(chunk_desc_of(q)->region, 1);
	errno = 0;
	cr_assert_null(chunk_alloc(40, CHUNK_SIZE, CK_HUGE, 40 * CHUNK_SIZE, &zero),
		       "more than the kernel grants");
	cr_assert_eq(errno, ENOMEM);
}

Test(chunk, commit_refused_is_enomem)
{
	start();
	fake.commit_fail = true;
	bool zero;
	errno = 0;
	cr_assert_null(chunk_alloc(1, CHUNK_SIZE, CK_HUGE, CHUNK_SIZE, &zero));
	cr_assert_eq(errno, ENOMEM);
	cr_assert_eq(regions[0].frontier, 0);
	cr_assert_eq(regions[0].committed, 0);
	/* A refused commit is out of memory, not out of address space: no new
	 * region is reserved for it (each one was 64 GiB and its tables). */
	for (int i = 0; i < 3; i++)
		cr_assert_null(chunk_alloc(1, CHUNK_SIZE, CK_HUGE, CHUNK_SIZE, &zero));
	cr_assert_eq(atomic_load(&nregions), 1, "%u regions after 4 refused commits",
		     atomic_load(&nregions));
	fake.commit_fail = false;
	cr_assert_eq(alloc_kind(1, CK_HUGE, &zero), regions[0].base);
	cr_assert(zero);
}

static void fill(char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i += 512)
		p[i] = (char)(i / 512 * 31 + seed);
}

static bool same(const char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i += 512)
		if (p[i] != (char)(i / 512 * 31 + seed))
			return false;
	return true;
}

Test(chunk, move_by_mremap_or_copy_when_refused)
{
	start();
	size_t n = 2, bytes = n * CHUNK_SIZE;
	char *src = alloc(n), *dst = alloc(n);
	fill(src, bytes, 1);
	cr_assert_eq(chunk_map_move(src, dst, n, bytes), 0, "nothing copied");
	cr_assert_eq(fake.nmove, 1, "one mapping, one mremap");
	cr_assert(same(dst, bytes, 1));
	cr_assert_eq(src[0], 0, "the source reads zero after a move");
	cr_assert_eq(desc(src)->kind, CK_FREE);
	cr_assert_eq(desc(src)->state, MS_ZERO);

	char *src2 = alloc(n), *dst2 = alloc(n);
	fill(src2, bytes, 2);
	fake.move_fail = true;
	fake_clear_log();
	cr_assert_eq(chunk_map_move(src2, dst2, n, bytes), n, "refused: every chunk copied");
	cr_assert_eq(fake.nmove, 1);
	cr_assert(same(dst2, bytes, 2));
	cr_assert_eq(desc(src2)->kind, CK_FREE);
	cr_assert_eq(desc(src2)->state, MS_DIRTY, "copied from: dirty");
}

/* A huge block (not calloc's, not a move's) whose place has chunks without
 * pages takes the pages of dirty free chunks of huge blocks from elsewhere,
 * by mremap, when there are enough for all of them; those read zero then. */
static char *alloc_fill(size_t n, bool fill, bool *zero)
{
	size_t nfresh;
	char *p = chunk_alloc_huge(n, CHUNK_SIZE, n * CHUNK_SIZE, fill, zero, &nfresh);
	cr_assert(p);
	return p;
}

/* Four chunks taken, the first and third (*a, *c: filled with seeds 1 and
 * 2) freed dirty: no free run of two.  Returns the fourth. */
static char *two_dirty_chunks_apart(char **a, char **c)
{
	start();
	*a = alloc(1);
	alloc(1);
	*c = alloc(1);
	char *d = alloc(1);
	fill(*a, CHUNK_SIZE, 1);
	fill(*c, CHUNK_SIZE, 2);
	chunk_free(*a, 1);
	chunk_free(*c, 1);
	fake_clear_log();
	return d;
}

Test(chunk, zero_chunks_of_a_huge_block_take_freed_pages)
{
	bool zero;
	char *a, *c, *d = two_dirty_chunks_apart(&a, &c);
	char *p = alloc_fill(2, true, &zero);
	cr_assert_eq(idx(p), idx(d) + 1, "no run holds it: the frontier");
	cr_assert_eq(fake.nmove, 2, "one mremap per chunk without pages");
	cr_assert_not(zero, "its pages are freed ones");
	cr_assert(same(p, CHUNK_SIZE, 1) && same(p + CHUNK_SIZE, CHUNK_SIZE, 2), "oldest first");
	cr_assert_eq(desc(a)->state, MS_ZERO, "the sources read zero");
	cr_assert_eq(desc(c)->state, MS_ZERO);
	cr_assert_eq(chunk_figures().dirty, 0);
	cr_assert_neq(desc(p)[0].map_tag, desc(p)[1].map_tag, "each moved chunk a mapping");

	/* not enough dirty chunks for every zero one: none moves */
	chunk_free(p, 2);
	fake_clear_log();
	char *q = alloc_fill(3, true, &zero);
	cr_assert_eq(fake.nmove, 0);
	cr_assert(zero);
	(void)q;
}

/* A refused move may have unmapped its destination (mremap unmaps it
 * first): the chunk is mapped again, the block reads zero, the source keeps
 * its pages, and no later block tries again. */
Test(chunk, a_refused_freed_page_move_leaves_no_hole)
{
	bool zero;
	char *a, *c, *d = two_dirty_chunks_apart(&a, &c);
	fake.move_fail = fake.move_fail_hole = true;
	char *p = alloc_fill(2, true, &zero);
	cr_assert_eq(idx(p), idx(d) + 1);
	cr_assert_eq(fake.nmove, 1, "the first refusal ends it");
	cr_assert(zero, "nothing moved: fresh pages");
	cr_assert(os_is_mapped(p, CHUNK_SIZE) && os_is_mapped(p + CHUNK_SIZE, CHUNK_SIZE), "a hole");
	cr_assert(p[0] == 0 && p[CHUNK_SIZE - 1] == 0 && p[CHUNK_SIZE] == 0, "reads zero");
	fill(p, 2 * CHUNK_SIZE, 3);
	cr_assert_eq(desc(a)->state, MS_DIRTY, "the source keeps its pages");
	cr_assert(same(a, CHUNK_SIZE, 1));
	cr_assert_eq(chunk_figures().dirty, 2 * CHUNK_SIZE);

	fake.move_fail = fake.move_fail_hole = false;
	fake_clear_log();
	alloc_fill(2, true, &zero);
	cr_assert_eq(fake.nmove, 0, "refused once: no more moves");
	(void)c;
}

/* Where fresh chunks get huge pages a move would save one fault: none. */
Test(chunk, no_freed_pages_moved_where_fresh_chunks_are_huge)
{
	bool zero;
	char *a, *c;
	two_dirty_chunks_apart(&a, &c);
	os_thp = THP_SYS_MADVISE; /* thp:auto, no verdict yet: huge */
	alloc_fill(2, true, &zero);
	cr_assert_eq(fake.nmove, 0);
	cr_assert(zero);
}

/* calloc's blocks and a move's destination: the same place as above, no move. */
Test(chunk, calloc_and_moves_take_no_freed_pages)
{
	bool zero;
	char *a, *c;
	two_dirty_chunks_apart(&a, &c);
	alloc_fill(2, false, &zero);
	cr_assert_eq(fake.nmove, 0);
	cr_assert(zero);
	cr_assert_eq(desc(a)->state, MS_DIRTY);
	cr_assert_eq(desc(c)->state, MS_DIRTY);
}

/* A block whose last chunk got other THP advice is two mappings: one
 * mremap each. */
Test(chunk, move_one_mapping_per_call)
{
	start();
	os_thp = THP_SYS_MADVISE;
	char *src = alloc(3), *dst = alloc(3);
	fill(src, 3 * CHUNK_SIZE, 3);
	chunk_map_advise(src + 2 * CHUNK_SIZE, 1, ADV_HUGE);
	cr_assert_neq(desc(src)[2].map_tag, desc(src)[1].map_tag, "advice gives a new tag");
	cr_assert_eq(chunk_map_move(src, dst, 3, 3 * CHUNK_SIZE), 0);
	cr_assert_eq(fake.nmove, 2);
	cr_assert_eq(fake.move[0].size, 2 * CHUNK_SIZE);
	cr_assert_eq(fake.move[1].addr, src + 2 * CHUNK_SIZE);
	cr_assert_eq(desc(dst)[2].advice, ADV_HUGE, "advice moves with the pages");
	cr_assert(same(dst, 3 * CHUNK_SIZE, 3));
}

Test(chunk, advice_only_where_it_changes)
{
	start();
	char *p = alloc(3);
	chunk_map_advise(p, 3, ADV_HUGE);
	cr_assert_eq(fake.nadvise, 0, "no THP: no advice");

	os_thp = THP_SYS_MADVISE;
	chunk_map_advise(p, 3, ADV_HUGE);
	cr_assert_eq(fake.nadvise, 1);
	cr_assert(fake.advise[0].addr == p && fake.advise[0].size == 3 * CHUNK_SIZE);
	chunk_map_advise(p, 3, ADV_HUGE);
	cr_assert_eq(fake.nadvise, 1, "already advised");
	chunk_map_advise(p, 3, ADV_NOHUGE);
	cr_assert_eq(fake.nadvise, 2, "taking huge pages back");
	cr_assert_eq(fake.advise[1].kind, ADV_NOHUGE);
	chunk_map_advise(p, 3, ADV_NOHUGE);
	cr_assert_eq(fake.nadvise, 2);

	char *q = alloc(1);
	chunk_map_advise(q, 1, ADV_NOHUGE);
	cr_assert_eq(fake.nadvise, 2, "THP madvise: a chunk never advised needs no NOHUGEPAGE");
	os_thp = THP_SYS_ALWAYS;
	chunk_map_advise(q, 1, ADV_NOHUGE);
	cr_assert_eq(fake.nadvise, 3, "THP always: it does");

	fake.advise_fail = true;
	chunk_map_advise(q, 1, ADV_HUGE);
	cr_assert_eq(desc(q)->advice, ADV_NOHUGE, "refused advice is not recorded");
	fake.advise_fail = false;
	chunk_map_advise(q, 1, ADV_HUGE);
	cr_assert_eq(fake.nadvise, 5, "and is tried again");
	cr_assert_eq(desc(q)->advice, ADV_HUGE);
}

/* The descriptor table gets huge pages once its region has handed out
 * more than 256 chunks (512 MiB), never under thp:never. */
Test(chunk, descriptor_table_advised_once_past_512_mib)
{
	start();
	alloc(256);
	cr_assert_eq(fake.nmeta_huge, 0);
	alloc(1);
	cr_assert_eq(fake.nmeta_huge, 1);
	alloc(10);
	cr_assert_eq(fake.nmeta_huge, 1, "once");
	cr_assert(regions[0].desc_huge);
}

Test(chunk, descriptor_table_not_advised_under_thp_never)
{
	conf.thp = THP_NEVER;
	start();
	alloc(300);
	cr_assert_eq(fake.nmeta_huge, 0);
}

Test(chunk, purge_all_makes_every_free_chunk_zero)
{
	start();
	char *a = alloc(2);
	alloc(1);
	char *b = alloc(1);
	alloc(1);
	chunk_free(a, 2);
	chunk_free(b, 1);
	fake_clear_log();
	cr_assert_eq(chunk_purge_all(), 3 * CHUNK_SIZE);
	/* one call per run, and one for the pages of its chunks' headers */
	region_t *r = &regions[0];
	cr_assert_eq(fake.npurge, 4);
	bool run_a = false, run_b = false;
	for (unsigned i = 0; i < 4; i++) {
		run_a |= fake.purge[i].addr == r->hdrs && fake.purge[i].size == 3 * PAGE_SIZE;
		run_b |= fake.purge[i].addr == r->hdrs + 5 * PAGE_SIZE && fake.purge[i].size == PAGE_SIZE;
	}
	cr_assert(run_a, "a's headers, [0, 13,184): their 3 whole pages");
	cr_assert(run_b, "b's header, [19,776, 26,368): the one page none of its neighbours' shares");
	cr_assert_eq(chunk_figures().dirty, 0);
	cr_assert_eq(desc(a)->state, MS_ZERO);
	fake_clear_log();
	cr_assert_eq(chunk_purge_all(), 0);
	cr_assert_eq(fake.npurge, 0, "nothing left to purge");
	bool zero;
	cr_assert(alloc_kind(2, CK_HUGE, &zero) == a && zero, "purged chunks are zero again");
}

/* ---- chunk_validate_runs (the unit objects are built with -DARENA_DEBUG:
 * chunk.c also asserts it before each of its locked sections ends) ---- */

static bool runs_valid(char *out, size_t size)
{
	capture_t cap;
	capture_begin(&cap);
	chunk_lock_all();
	bool ok = chunk_validate_runs();
	chunk_unlock_all();
	capture_end(&cap, out, size);
	return ok;
}

static void runs_refused(const char *what)
{
	char out[512];
	cr_assert_not(runs_valid(out, sizeof(out)), "planted: %s; validated", what);
	cr_assert(strstr(out, "libarena: chunk_validate_runs: ") && strstr(out, what),
		  "planted: %s; reported: %s", what, out);
	cr_assert_eq(count_lines(out), 1, "one line: %s", out);
}

static void runs_accepted(void)
{
	char out[512];
	cr_assert(runs_valid(out, sizeof(out)), "refused: %s", out);
	cr_assert_str_empty(out);
}

Test(chunk, validate_runs_good)
{
	start();
	runs_accepted();
	char *a = alloc(3), *b = alloc_kind(1, CK_ARENA, NULL), *c = alloc(4);
	alloc(1);
	runs_accepted();
	chunk_free(b, 1);
	chunk_free(a, 3); /* merged with b */
	runs_accepted();
	chunk_shrink(c, 4, 2, 2 * CHUNK_SIZE);
	runs_accepted();
	size_t nfresh;
	cr_assert(chunk_extend(c, 2, 3, 3 * CHUNK_SIZE, &nfresh));
	runs_accepted();
	chunk_free(alloc_kind(2, CK_HUGE, NULL), 1); /* a block freed a part at a time */
	runs_accepted();
	chunk_purge_all();
	runs_accepted();
	cr_assert(alloc(40) && chunk_alloc_dirty(CK_ARENA) == NULL);
	runs_accepted();
}

Test(chunk, validate_runs_planted_faults)
{
	start();
	char *a = alloc(3), *b = alloc(4);
	alloc(1);
	char *h = alloc_kind(1, CK_ARENA, NULL);
	alloc(1);
	char *z = alloc(1);
	alloc(1);
	chunk_free_moved(z, 1); /* a free chunk, zero */
	fake.now_ms += 10;
	chunk_free(b, 4); /* a free run of 4, dirty */
	runs_accepted();
	chunk_desc_t *d = desc(b);

	d[3].nchunks = 3;
	runs_refused("a free run's length at its ends");
	d[3].nchunks = 4;

	d[1].kind = CK_ARENA;
	runs_refused("a chunk of a free run");
	d[1].kind = CK_FREE;

	desc(a)[2].nchunks = 1; /* 2 chunks from its head */
	runs_refused("a huge block's body");
	desc(a)[2].nchunks = 2;

	desc(a)[0].kind = CK_UNUSED;
	runs_refused("a chunk below the frontier of no run");
	desc(a)[0].kind = CK_HUGE;

	d[0].region = 1;
	runs_refused("a chunk's region");
	d[0].region = 0;

	d[2].state = MS_ZERO; /* still on its decay list */
	runs_refused("a decay list's entry, not dirty and free in order");
	d[2].state = MS_DIRTY;

	desc(z)->state = MS_DIRTY; /* on no decay list, not counted */
	runs_refused("dirty_chunks, not the dirty free chunks");
	desc(z)->state = MS_LAZY;
	runs_refused("lazy_chunks, not the lazy free chunks");
	desc(z)->state = MS_ZERO;

	uint64_t ms = d[3].dirty_ms;
	d[3].dirty_ms = ms - 5; /* listed after chunks that became dirty later */
	runs_refused("a decay list's entry, not dirty and free in order");
	d[3].dirty_ms = ms;

	chunk_desc_t saved = *desc(h); /* an arena chunk posing as a run */
	*desc(h) = (chunk_desc_t){ .kind = CK_FREE, .nchunks = 1, .state = MS_ZERO };
	runs_refused("free runs binned, not all of them");
	*desc(h) = saved;

	size_t committed = regions[0].committed;
	regions[0].committed = regions[0].frontier - 1;
	runs_refused("a region's frontier past its commit");
	regions[0].committed = committed;

	runs_accepted();
}

static void new_region_unlocked(void *arg)
{
	(void)arg;
	region_new(1);
}

static void validate_unlocked(void *arg)
{
	(void)arg;
	chunk_validate_runs();
}

static void lock_twice(void *arg)
{
	(void)arg;
	chunk_lock_all();
	chunk_lock_all();
}

/* The lock assertions: a function whose caller must hold the chunk lock,
 * called without it, stops with a message (and one that takes it twice,
 * instead of hanging). */
Test(chunk, chunk_lock_assertions)
{
	start();
	char out[1024];
	expect_abort(new_region_unlocked, NULL, out, sizeof(out),
		     (const char *const[]){ "libarena: assertion failed: src/region.c:",
					    ": region_new: mutex_held(&chunk_mtx)", NULL });
	expect_abort(validate_unlocked, NULL, out, sizeof(out),
		     (const char *const[]){ ": chunk_validate_runs: mutex_held(&chunk_mtx)",
					    NULL });
	expect_abort(lock_twice, NULL, out, sizeof(out),
		     (const char *const[]){ ": mutex_lock: !mutex_held(m)", NULL });
	chunk_lock_all(); /* and with the lock: no message */
	cr_assert(region_new(1));
	chunk_unlock_all();
}
