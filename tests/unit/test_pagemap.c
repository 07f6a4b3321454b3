/*
 * pagemap.c: the free/dirty/lazy bitmaps of an arena chunk.  Headers live in
 * ordinary memory here (pagemap.c never touches the pages it describes; the
 * fake os_purge only records the ranges it is given).  A model (one bool per
 * page and state) is kept beside the real map and compared after every step.
 */
#include "fake_os.h"
#include "unit.h"
#include "limit.h"

static arena_chunk_t *chunk_new(bool zero)
{
	arena_chunk_t *c = aligned_alloc(PAGE_SIZE, ALIGN_UP(sizeof(arena_chunk_t), PAGE_SIZE));
	cr_assert(c);
	pagemap_init(c, zero);
	return c;
}

static bool bit(const uint64_t *map, size_t i)
{
	return map[i / 64] >> (i % 64) & 1;
}

/* The model. */
typedef struct model {
	bool free[CHUNK_PAGES], dirty[CHUNK_PAGES], lazy[CHUNK_PAGES];
} model_t;

static void model_init(model_t *m, bool zero)
{
	for (size_t i = 0; i < CHUNK_PAGES; i++) {
		m->free[i] = true;
		m->dirty[i] = m->free[i] && !zero;
		m->lazy[i] = false;
	}
}

/* First index of npages pages aligned to align that are all set in avail
 * (the model's free or dirty pages), or -1: first fit. */
static long model_find_in(const bool *avail, size_t npages, size_t align)
{
	for (size_t i = 0; i + npages <= CHUNK_PAGES; i += align) {
		size_t k = 0;
		while (k < npages && avail[i + k])
			k++;
		if (k == npages)
			return (long)i;
	}
	return -1;
}

static long model_find(const model_t *m, size_t npages, size_t align)
{
	return model_find_in(m->free, npages, align);
}

static size_t model_longest(const model_t *m)
{
	size_t best = 0, run = 0;
	for (size_t i = 0; i < CHUNK_PAGES; i++) {
		run = m->free[i] ? run + 1 : 0;
		if (run > best)
			best = run;
	}
	return best;
}

static void check_same(const arena_chunk_t *c, const model_t *m, const char *when)
{
	size_t nfree = 0, dirty = 0, lazy = 0;
	for (size_t i = 0; i < CHUNK_PAGES; i++) {
		cr_assert_eq(bit(c->free_map, i), m->free[i], "%s: free bit of page %zu", when, i);
		cr_assert_eq(bit(c->dirty_map, i), m->dirty[i], "%s: dirty bit of page %zu", when, i);
		cr_assert_eq(bit(c->lazy_map, i), m->lazy[i], "%s: lazy bit of page %zu", when, i);
		nfree += m->free[i];
		dirty += m->dirty[i];
		lazy += m->lazy[i];
	}
	cr_assert_eq(c->nfree, nfree, "%s: nfree %u, model %zu", when, c->nfree, nfree);
	cr_assert_geq(c->longest, model_longest(m), "%s: longest %u below the longest run %zu",
		      when, c->longest, model_longest(m));
	size_t cd = 0, cl = 0;
	pagemap_count(c, &cd, &cl);
	cr_assert_eq(cd, dirty, "%s: pagemap_count dirty %zu, model %zu", when, cd, dirty);
	cr_assert_eq(cl, lazy, "%s: pagemap_count lazy %zu, model %zu", when, cl, lazy);
	cr_assert_eq(c->ndirty, dirty, "%s: ndirty %u, model %zu", when, c->ndirty, dirty);
}

Test(pagemap, header_fits_its_place)
{
	cr_assert_leq(sizeof(arena_chunk_t), CHUNK_HDR_BYTES,
		      "arena_chunk_t is %zu bytes, a header's place %zu", sizeof(arena_chunk_t),
		      (size_t)CHUNK_HDR_BYTES);
	cr_assert_eq(CHUNK_HDR_BYTES % 128, 64, "an odd multiple of 64 bytes");
	cr_assert_eq(CHUNK_PAGES, 512);
	cr_assert_eq(CHUNK_WORDS * 64, CHUNK_PAGES);
}

Test(pagemap, init_zero_and_dirty)
{
	for (int zero = 0; zero < 2; zero++) {
		arena_chunk_t *c = chunk_new(zero);
		model_t m;
		model_init(&m, zero);
		check_same(c, &m, zero ? "init zero" : "init dirty");
		cr_assert_eq(c->nfree, CHUNK_PAGES);
		cr_assert_eq(c->longest, CHUNK_PAGES);
		for (size_t i = 0; i < CHUNK_PAGES; i++)
			cr_assert_eq(c->page[i].kind, PG_FREE, "page %zu: every page is the blocks'", i);
		cr_assert(pagemap_range_free(c, 0, CHUNK_PAGES));
		cr_assert_not(pagemap_range_free(c, 1, CHUNK_PAGES),
			      "a range past the chunk's end is not free");
		free(c);
	}
}

Test(pagemap, find_with_alignment_in_a_fresh_chunk)
{
	arena_chunk_t *c = chunk_new(true);
	static const struct { size_t n, align; long want; } cases[] = {
		{ 1, 1, 0 },     { 512, 1, 0 },   { 513, 1, -1 },  { 1, 2, 0 },
		{ 1, 4, 0 },     { 3, 8, 0 },     { 1, 64, 0 },    { 64, 64, 0 },
		{ 65, 64, 0 },   { 100, 128, 0 }, { 2, 256, 0 },   { 256, 256, 0 },
		{ 257, 256, 0 }, { 512, 64, 0 },  { 513, 64, -1 }, { 1, 512, 0 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		long got = pagemap_find(c, cases[i].n, cases[i].align);
		cr_assert_eq(got, cases[i].want, "pagemap_find(%zu pages, align %zu) = %ld, want %ld",
			     cases[i].n, cases[i].align, got, cases[i].want);
	}
	free(c);
}

Test(pagemap, take_and_give_back)
{
	arena_chunk_t *c = chunk_new(true);
	model_t m;
	model_init(&m, true);
	cr_assert(pagemap_take(c, 0, 2), "fresh pages are zero");
	cr_assert(pagemap_take(c, 2, 8), "fresh pages are zero");
	for (size_t i = 0; i < 10; i++)
		m.free[i] = false;
	check_same(c, &m, "take [0,10)");
	cr_assert_eq(pagemap_find(c, 1, 1), 10);
	cr_assert_not(pagemap_range_free(c, 9, 2));
	cr_assert(pagemap_range_free(c, 10, 2));
	for (size_t i = 2; i < 10; i++)
		c->page[i] = (page_info_t){ .kind = PG_LARGE, .sclass = 40, .head = 2 };
	cr_assert_eq(pagemap_give(c, 2, 8), 8);
	for (size_t i = 2; i < 10; i++) {
		m.free[i] = m.dirty[i] = true;
		cr_assert_eq(c->page[i].kind, PG_FREE, "page %zu given back", i);
		cr_assert_eq(c->page[i].sclass, 0);
		cr_assert_eq(c->page[i].head, 0);
	}
	check_same(c, &m, "give [2,10)");
	cr_assert_eq(pagemap_find(c, 1, 1), 2);
	cr_assert_not(pagemap_take(c, 4, 2), "pages given back are dirty, not zero");
	cr_assert(pagemap_take(c, 10, 2), "pages never given back are still zero");
	free(c);
}

/* longest: an upper bound; take leaves it, give raises it to the run the
 * pages join, a failed unaligned search makes it exact. */
Test(pagemap, longest_run_bookkeeping)
{
	arena_chunk_t *c = chunk_new(true);
	pagemap_take(c, 0, CHUNK_PAGES);
	cr_assert_eq(c->nfree, 0);
	cr_assert_eq(c->longest, CHUNK_PAGES, "take leaves longest alone (a bound)");
	cr_assert_eq(pagemap_find(c, 1, 1), -1);
	cr_assert_eq(c->longest, 0, "a failed search recomputes longest");

	pagemap_give(c, 100, 10);
	cr_assert_eq(c->longest, 10);
	pagemap_give(c, 110, 10);
	cr_assert_eq(c->longest, 20, "pages joining a run raise longest to the joined run");
	pagemap_give(c, 90, 10);
	cr_assert_eq(c->longest, 30, "joining on the left too");
	pagemap_give(c, 300, 5);
	cr_assert_eq(c->longest, 30, "a shorter run leaves it");
	cr_assert_eq(pagemap_find(c, 30, 1), 90);
	cr_assert_eq(pagemap_find(c, 31, 1), -1);
	cr_assert_eq(c->longest, 30);

	pagemap_take(c, 90, 30);
	cr_assert_eq(c->longest, 30, "stale after take");
	cr_assert_eq(pagemap_find(c, 6, 4), -1);
	cr_assert_eq(c->longest, 30, "an aligned search that fails proves nothing about longest");
	cr_assert_eq(pagemap_find(c, 20, 1), -1);
	cr_assert_eq(c->longest, 5, "recomputed by a failed short search");
	cr_assert_eq(pagemap_find(c, 5, 1), 300);
	cr_assert_eq(pagemap_find(c, 6, 1), -1, "c->longest < npages answers at once");

	/* The long path (more than 64 pages). */
	pagemap_give(c, 2, 80);
	pagemap_give(c, 200, 100);
	cr_assert_eq(c->longest, 105, "[200,305) joined the run at 300");
	cr_assert_eq(pagemap_find(c, 80, 1), 2);
	cr_assert_eq(pagemap_find(c, 81, 1), 200);
	cr_assert_eq(pagemap_find(c, 100, 128), -1, "[256,305) is too short");
	cr_assert_eq(pagemap_find(c, 40, 128), 256);
	pagemap_take(c, 200, 105);
	cr_assert_eq(pagemap_find(c, 81, 1), -1);
	cr_assert_eq(c->longest, 80, "recomputed by a failed long search");
	free(c);
}

/* A give raises longest and longest_dirty to exactly the run the pages
 * join, wherever its ends fall: inside the given pages' first or last
 * word, or words away; neighbours purged (zero) join the free run only. */
Test(pagemap, give_joins_runs_across_words)
{
	static const size_t firsts[] = { 0, 1, 63, 64, 65, 130, 200, 448, 500 };
	static const size_t sides[] = { 0, 1, 5, 63, 64, 70 };
	static const size_t lens[] = { 1, 2, 16, 64 };
	arena_chunk_t *c = chunk_new(true);
	for (size_t f = 0; f < sizeof(firsts) / sizeof(firsts[0]); f++)
		for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
			for (size_t a = 0; a < sizeof(sides) / sizeof(sides[0]); a++)
				for (size_t purged = 0; purged < 2; purged++) {
					size_t first = firsts[f], n = lens[l], left = sides[a];
					size_t right = sides[(a + 2) % 6];
					if (left > first)
						left = first;
					if (first + n > CHUNK_PAGES)
						continue;
					if (right > CHUNK_PAGES - first - n)
						right = CHUNK_PAGES - first - n;
					pagemap_init(c, true);
					pagemap_take(c, 0, CHUNK_PAGES);
					if (left)
						pagemap_give(c, first - left, left);
					if (right)
						pagemap_give(c, first + n, right);
					if (purged)
						pagemap_purge(c, PURGE_DONTNEED);
					c->longest = c->longest_dirty = 0;
					pagemap_give(c, first, n);
					cr_assert_eq(c->longest, left + n + right,
						     "give at %zu of %zu, %zu and %zu free beside",
						     first, n, left, right);
					cr_assert_eq(c->longest_dirty, purged ? n : left + n + right,
						     "give at %zu of %zu, %zu and %zu dirty beside",
						     first, n, left, right);
				}
	free(c);
}

/* Random takes and gives, with every find checked against the model's
 * first fit and every bit against the model. */
Test(pagemap, random_runs_match_the_model)
{
	static const size_t sizes[] = { 1, 2, 3, 5, 8, 13, 31, 63, 64, 65, 100, 200, 300, 510 };
	static const size_t aligns[] = { 1, 2, 4, 8, 16, 64, 128, 256 };
	arena_chunk_t *c = chunk_new(false);
	model_t m;
	model_init(&m, false);
	struct { size_t first, n; } live[CHUNK_PAGES];
	size_t nlive = 0;
	urng_t r = { 12345 };
	for (int step = 0; step < 4000; step++) {
		if (nlive == 0 || urng_below(&r, 100) < 55) {
			size_t n = urng_below(&r, 4) ? 1 + urng_below(&r, 24)
						     : sizes[urng_below(&r, sizeof(sizes) / sizeof(sizes[0]))];
			size_t a = urng_below(&r, 3) ? 1 : aligns[urng_below(&r, sizeof(aligns) / sizeof(aligns[0]))];
			long got = pagemap_find(c, n, a), want = model_find(&m, n, a);
			cr_assert_eq(got, want, "step %d: find(%zu, align %zu) = %ld, model %ld", step, n,
				     a, got, want);
			if (got < 0)
				continue;
			bool zero = true;
			for (size_t i = (size_t)got; i < (size_t)got + n; i++) {
				zero &= !m.dirty[i] && !m.lazy[i];
				m.free[i] = m.dirty[i] = m.lazy[i] = false;
			}
			cr_assert_eq(pagemap_take(c, (size_t)got, n), zero, "step %d: take's zero", step);
			live[nlive].first = (size_t)got;
			live[nlive++].n = n;
		} else if (urng_below(&r, 100) < 90) {
			size_t k = urng_below(&r, nlive);
			cr_assert_eq(pagemap_give(c, live[k].first, live[k].n), live[k].n);
			for (size_t i = live[k].first; i < live[k].first + live[k].n; i++) {
				m.free[i] = m.dirty[i] = true;
				m.lazy[i] = false;
			}
			live[k] = live[--nlive];
		} else {
			uint8_t kind = urng_below(&r, 2) ? PURGE_FREE : PURGE_DONTNEED;
			pagemap_purge(c, kind);
			for (size_t i = 0; i < CHUNK_PAGES; i++) {
				if (m.dirty[i] || (kind == PURGE_DONTNEED && m.lazy[i])) {
					m.lazy[i] = kind == PURGE_FREE;
					m.dirty[i] = false;
				}
			}
		}
		check_same(c, &m, "after a step");
		for (size_t q = 0; q < 3; q++) {
			size_t n = 1 + urng_below(&r, 130), a = aligns[urng_below(&r, 8)];
			long got = pagemap_find(c, n, a), want = model_find(&m, n, a);
			cr_assert_eq(got, want, "step %d: probe find(%zu, align %zu) = %ld, model %ld",
				     step, n, a, got, want);
			got = pagemap_find_dirty(c, n, a), want = model_find_in(m.dirty, n, a);
			cr_assert_eq(got, want, "step %d: find_dirty(%zu, align %zu) = %ld, model %ld",
				     step, n, a, got, want);
			size_t at = urng_below(&r, CHUNK_PAGES - n + 1);
			bool zero = true;
			for (size_t i = at; i < at + n; i++)
				zero &= !m.dirty[i] && !m.lazy[i];
			cr_assert_eq(pagemap_run_zero(c, at, n), zero, "step %d: run_zero(%zu, %zu)",
				     step, at, n);
		}
	}
	free(c);
}

static size_t page_of(const arena_chunk_t *c, const char *addr)
{
	return page_index(c, addr); /* from the chunk's start, as page_addr */
}

Test(pagemap, purge_dontneed_makes_free_pages_zero)
{
	arena_chunk_t *c = chunk_new(false);
	pagemap_take(c, 10, 10);
	c->dirty_ms = 1234;
	cr_assert_eq(pagemap_purge(c, PURGE_DONTNEED), CHUNK_PAGES - 10);
	cr_assert_eq(fake.npurge, 2, "one call per run of dirty pages, got %u", fake.npurge);
	cr_assert_eq(page_of(c, fake.purge[0].addr), 0);
	cr_assert_eq(fake.purge[0].size, 10 * PAGE_SIZE);
	cr_assert_eq(page_of(c, fake.purge[1].addr), 20);
	cr_assert_eq(fake.purge[1].size, (CHUNK_PAGES - 20) * PAGE_SIZE);
	cr_assert_eq(fake.purge[0].kind, PURGE_DONTNEED);
	size_t dirty = 0, lazy = 0;
	pagemap_count(c, &dirty, &lazy);
	cr_assert_eq(dirty + lazy, 0);
	cr_assert_eq(c->dirty_ms, 0, "purge resets the chunk's dirty clock");
	cr_assert(pagemap_take(c, 0, 10), "purged pages are zero");
	fake_clear_log();
	cr_assert_eq(pagemap_purge(c, PURGE_DONTNEED), 0);
	cr_assert_eq(fake.npurge, 0, "nothing dirty: no call");
	free(c);
}

/* pagemap_purge_free: every free run, zero pages and all (khugepaged may
 * have filled them in), one call per free run; counts the dirty ones. */
Test(pagemap, purge_free_runs_takes_zero_pages_too)
{
	arena_chunk_t *c = chunk_new(true);
	pagemap_take(c, 0, 2);
	pagemap_take(c, 10, 10);
	pagemap_give(c, 12, 3);
	c->dirty_ms = 1234;
	cr_assert_eq(pagemap_purge_free(c), 3, "the 3 dirty pages");
	cr_assert_eq(fake.npurge, 3, "one call per free run, got %u", fake.npurge);
	cr_assert_eq(page_of(c, fake.purge[0].addr), 2);
	cr_assert_eq(fake.purge[0].size, 8 * PAGE_SIZE, "the zero run before: purged too");
	cr_assert_eq(page_of(c, fake.purge[1].addr), 12);
	cr_assert_eq(fake.purge[1].size, 3 * PAGE_SIZE);
	cr_assert_eq(page_of(c, fake.purge[2].addr), 20);
	cr_assert_eq(fake.purge[0].kind, PURGE_DONTNEED);
	cr_assert_eq(c->ndirty, 0);
	cr_assert_eq(c->dirty_ms, 0);
	cr_assert(pagemap_take(c, 12, 3), "purged pages are zero");
	free(c);
}

/* Under a memory limit a chunk that may be a huge page has the huge page
 * split before its free pages go (MADV_DONTNEED alone leaves it charged
 * whole), once per purge, at a free page: never without a limit, nor for
 * MADV_FREE (the kernel splits for it). */
Test(pagemap, purge_under_a_limit_splits_the_huge_page_first)
{
	arena_chunk_t *c = chunk_new(false);
	pagemap_take(c, 0, 2);
	pagemap_take(c, 10, 10);
	c->advice_ms = 5000;
	pagemap_purge_free(c);
	cr_assert_eq(fake.nsplit, 0, "no limit: no split");
	conf.memory_limit_kind = MEMLIMIT_BYTES;
	conf.memory_limit = 256 * MiB;
	limit_init();
	pagemap_give(c, 12, 2);
	pagemap_purge(c, PURGE_FREE);
	cr_assert_eq(fake.nsplit, 0, "MADV_FREE splits in the kernel");
	pagemap_give(c, 15, 1);
	cr_assert_eq(pagemap_purge_free(c), 3, "2 lazy, 1 dirty");
	cr_assert_eq(fake.nsplit, 1, "one split per purge, got %u", fake.nsplit);
	cr_assert_eq(page_of(c, fake.split_at), 2, "at the first free page");
	c->advice_ms = 0;
	pagemap_give(c, 17, 1);
	pagemap_purge(c, PURGE_DONTNEED);
	cr_assert_eq(fake.nsplit, 1, "never advised huge: no split");
	free(c);
}

Test(pagemap, purge_free_makes_pages_lazy_then_dontneed_zero)
{
	arena_chunk_t *c = chunk_new(false);
	pagemap_take(c, 2, 100);
	cr_assert_eq(pagemap_purge(c, PURGE_FREE), CHUNK_PAGES - 100);
	cr_assert_eq(fake.purge[0].kind, PURGE_FREE);
	size_t dirty = 0, lazy = 0;
	pagemap_count(c, &dirty, &lazy);
	cr_assert_eq(dirty, 0);
	cr_assert_eq(lazy, CHUNK_PAGES - 100);
	cr_assert(bit(c->lazy_map, 102) && bit(c->free_map, 102) && !bit(c->dirty_map, 102));
	cr_assert_not(pagemap_take(c, 102, 1), "lazily freed pages are not known zero");

	fake_clear_log();
	cr_assert_eq(pagemap_purge(c, PURGE_FREE), 0, "MADV_FREE again: lazy pages are left");
	cr_assert_eq(fake.npurge, 0);

	pagemap_give(c, 102, 1);
	cr_assert(bit(c->dirty_map, 102) && !bit(c->lazy_map, 102), "give: dirty, not lazy");
	cr_assert_eq(pagemap_purge(c, PURGE_DONTNEED), CHUNK_PAGES - 100,
		     "DONTNEED takes the lazy pages too");
	dirty = lazy = 0;
	pagemap_count(c, &dirty, &lazy);
	cr_assert_eq(dirty + lazy, 0);
	cr_assert(pagemap_take(c, 102, 10), "zero after DONTNEED");
	free(c);
}

Test(pagemap, failed_purge_leaves_pages_dirty)
{
	arena_chunk_t *c = chunk_new(false);
	fake.purge_fail = true;
	cr_assert_eq(pagemap_purge(c, PURGE_DONTNEED), 0);
	cr_assert_eq(fake.npurge, 1);
	size_t dirty = 0, lazy = 0;
	pagemap_count(c, &dirty, &lazy);
	cr_assert_eq(dirty, CHUNK_PAGES);
	cr_assert_eq(lazy, 0);
	os_has_madv_free = false; /* a kernel without MADV_FREE: os_purge falls back */
	fake.purge_fail = false;
	cr_assert_eq(pagemap_purge(c, PURGE_FREE), CHUNK_PAGES);
	dirty = lazy = 0;
	pagemap_count(c, &dirty, &lazy);
	cr_assert_eq(dirty + lazy, 0, "the DONTNEED fallback leaves zero pages, not lazy ones");
	free(c);
}

/* ---- pagemap_validate_runs (the unit objects are built with -DARENA_DEBUG) ---- */

/* Whether c validates, its report (if any) in out. */
static bool validates(const arena_chunk_t *c, char *out, size_t size)
{
	capture_t cap;
	capture_begin(&cap);
	bool ok = pagemap_validate_runs(c);
	capture_end(&cap, out, size);
	return ok;
}

/* c does not validate, and says why: a line with what. */
static void refused(const arena_chunk_t *c, const char *what)
{
	char out[512];
	cr_assert_not(validates(c, out, sizeof(out)), "planted: %s; validated", what);
	cr_assert(strstr(out, "libarena: pagemap_validate_runs: ") && strstr(out, what),
		  "planted: %s; reported: %s", what, out);
	cr_assert_eq(count_lines(out), 1, "one line: %s", out);
}

static void accepted(const arena_chunk_t *c)
{
	char out[512];
	cr_assert(validates(c, out, sizeof(out)), "refused: %s", out);
	cr_assert_str_empty(out);
}

Test(pagemap, validate_runs_good_maps)
{
	arena_chunk_t *c = chunk_new(false);
	accepted(c);
	urng_t r = { 7 };
	for (unsigned step = 0; step < 2000; step++) {
		size_t n = 1 + urng_below(&r, 40), first = urng_below(&r, 400);
		if (urng_below(&r, 2) && pagemap_range_free(c, first, n)) {
			pagemap_take(c, first, n);
			/* marked as arena.c's take marks them */
			for (size_t i = first; i < first + n; i++)
				c->page[i] = (page_info_t){ .kind = PG_LARGE, .sclass = NSMALL,
							    .head = (uint16_t)first };
		} else if (c->page[first].kind == PG_LARGE && c->page[first].head == first) {
			size_t end = first + 1;
			while (end < CHUNK_PAGES && c->page[end].kind == PG_LARGE &&
			       c->page[end].head == first)
				end++;
			pagemap_give(c, first, end - first);
		} else if (step % 97 == 0) {
			pagemap_purge(c, step % 2 ? PURGE_FREE : PURGE_DONTNEED);
		}
		accepted(c);
	}
	free(c);
}

Test(pagemap, validate_runs_planted_faults)
{
	arena_chunk_t *c = chunk_new(false);
	pagemap_take(c, 10, 5);
	for (size_t i = 10; i < 15; i++)
		c->page[i] = (page_info_t){ .kind = PG_LARGE, .sclass = NSMALL, .head = 10 };
	pagemap_purge(c, PURGE_FREE); /* some lazy pages */
	accepted(c);

	c->dirty_map[0] |= 1ULL << 12; /* a page in use, dirty */
	refused(c, "a dirty page not free");
	c->dirty_map[0] &= ~(1ULL << 12);

	c->dirty_map[1] |= 1ULL << 20; /* page 84: lazy, now dirty too */
	refused(c, "a page both dirty and lazy");
	c->dirty_map[1] &= ~(1ULL << 20);

	c->lazy_map[0] |= 1ULL << 11;
	refused(c, "a lazy page not free");
	c->lazy_map[0] &= ~(1ULL << 11);

	c->nfree--;
	refused(c, "nfree, not the free pages' count");
	c->nfree++;

	c->ndirty++;
	refused(c, "ndirty, not the dirty pages' count");
	c->ndirty--;

	c->longest = 100; /* [15, 512) is longer */
	refused(c, "longest, shorter than a free run");
	c->longest = CHUNK_PAGES;

	c->page[200].kind = PG_SLAB; /* a free page */
	refused(c, "a free page in use");
	c->page[200].kind = PG_FREE;

	c->page[12].head = 11; /* a run's page naming another head */
	refused(c, "a page of a run whose head is not its run's");
	c->page[12].head = 10;

	accepted(c);
	free(c);
}

static void take_twice(void *arg)
{
	pagemap_take(arg, 10, 5);
}

/* An assertion that fails prints one line (file, line, function, the
 * expression) and aborts: pagemap_take of pages in use. */
Test(pagemap, take_of_pages_in_use_aborts)
{
	arena_chunk_t *c = chunk_new(false);
	pagemap_take(c, 10, 5);
	char out[1024];
	expect_abort(take_twice, c, out, sizeof(out),
		     (const char *const[]){ "libarena: assertion failed: src/pagemap.c:",
					    ": pagemap_take: ",
					    "pagemap_range_free(c, first, npages)", NULL });
	cr_assert_eq(count_lines(out), 1, "%s", out);
	free(c);
}
