/*
 * Decay of dirty free chunks (chunk.c, docs/design.md "Purging"): each
 * dirty free chunk is purged decay_ms after it became dirty, oldest first,
 * neighbours that expired together in one call of at most 512 chunks; -1
 * never, 0 before the chunk is visible as free.  The fake OS's clock only
 * moves when a test moves it.
 */
#include "fake_os.h"
#include "unit.h"

#define T0 ((uint64_t)5000000)

/* The chunks here are huge blocks'; the tests of decay_ms give them the
 * same decay as the others (huge_decay_ms:-1), those of huge_decay_ms
 * (below) the default. */
static void start(void)
{
	fake.now_ms = T0;
	conf.huge_decay_ms = -1;
	chunk_init();
}

static char *alloc(size_t n)
{
	bool zero;
	char *p = chunk_alloc(n, CHUNK_SIZE, CK_HUGE, n * CHUNK_SIZE, &zero);
	cr_assert(p);
	return p;
}

static void at(uint64_t ms)
{
	fake.now_ms = T0 + ms;
	chunk_decay();
}

Test(decay, purged_only_after_decay_ms)
{
	start();
	cr_assert_eq(conf.decay_ms, 1000);
	char *a = alloc(1);
	alloc(1);
	chunk_free(a, 1);
	at(0);
	at(999);
	cr_assert_eq(fake.npurge, 0, "purged %u times before decay_ms", fake.npurge);
	cr_assert_eq(chunk_desc_of(a)->state, MS_DIRTY);
	cr_assert_eq(chunk_figures().dirty, CHUNK_SIZE);
	at(1000);
	cr_assert_eq(fake.npurge, 1);
	cr_assert_eq(fake.purge[0].addr, a);
	cr_assert_eq(fake.purge[0].size, CHUNK_SIZE);
	cr_assert_eq(fake.purge[0].kind, PURGE_DONTNEED);
	cr_assert_eq(chunk_desc_of(a)->state, MS_ZERO);
	cr_assert_eq(chunk_figures().dirty, 0);
	at(5000);
	cr_assert_eq(fake.npurge, 1, "purged once");
	bool zero;
	cr_assert(chunk_alloc(1, CHUNK_SIZE, CK_HUGE, CHUNK_SIZE, &zero) == a && zero);
}

Test(decay, steps_run_on_allocation_and_free)
{
	start();
	char *a = alloc(1), *b = alloc(1), *c = alloc(1);
	alloc(1);
	chunk_free(a, 1);
	fake.now_ms = T0 + 1000;
	alloc(2); /* a is too small: from the frontier, then a decay step */
	cr_assert_eq(fake.npurge, 1, "the allocation's step");
	cr_assert_eq(fake.purge[0].addr, a);
	chunk_free(b, 1);
	fake.now_ms = T0 + 2000;
	chunk_free(c, 1);
	cr_assert_eq(fake.npurge, 2, "the free's step");
	cr_assert(fake.purge[1].addr == b && fake.purge[1].size == CHUNK_SIZE,
		  "b alone (c is fresh dirt, a is zero)");
}

/* Oldest first; neighbours that expired together in one call. */
Test(decay, oldest_first_neighbours_together)
{
	start();
	char *x = alloc(4);
	alloc(1);
	char *y = alloc(1);
	alloc(1);
	chunk_free(x, 2);
	chunk_free(x + 2 * CHUNK_SIZE, 2);
	fake.now_ms = T0 + 500;
	chunk_free(y, 1);
	at(999);
	cr_assert_eq(fake.npurge, 0);
	at(1000);
	cr_assert_eq(fake.npurge, 1, "x's four chunks in one call");
	cr_assert(fake.purge[0].addr == x && fake.purge[0].size == 4 * CHUNK_SIZE);
	cr_assert_eq(chunk_desc_of(y)->state, MS_DIRTY, "y is younger");
	at(1499);
	cr_assert_eq(fake.npurge, 1);
	at(1500);
	cr_assert_eq(fake.npurge, 2);
	cr_assert_eq(fake.purge[1].addr, y);
}

/* A run's chunks keep the times they became dirty: merged runs decay chunk
 * by chunk. */
Test(decay, merged_run_decays_chunk_by_chunk)
{
	start();
	char *a = alloc(1), *b = alloc(1);
	alloc(1);
	chunk_free(a, 1);
	fake.now_ms = T0 + 600;
	chunk_free(b, 1);
	at(1000);
	cr_assert_eq(fake.npurge, 1);
	cr_assert(fake.purge[0].addr == a && fake.purge[0].size == CHUNK_SIZE, "a alone");
	at(1599);
	cr_assert_eq(fake.npurge, 1);
	at(1600);
	cr_assert_eq(fake.npurge, 2);
	cr_assert_eq(fake.purge[1].addr, b);
}

/* Neighbours that expired together go in one call (a freed 1 GiB block
 * is one madvise, as a purge at free was), up to 512 chunks. */
Test(decay, neighbours_in_one_call)
{
	start();
	char *z = alloc(520);
	alloc(1);
	chunk_free(z, 520);
	at(1000);
	cr_assert_eq(fake.npurge, 2);
	cr_assert_eq(fake.purge[0].size, 512 * CHUNK_SIZE);
	cr_assert_eq(fake.purge[1].addr, z + 512 * CHUNK_SIZE);
	cr_assert_eq(fake.purge[1].size, 8 * CHUNK_SIZE);
}

Test(decay, freed_again_restarts_the_clock)
{
	start();
	char *a = alloc(1);
	alloc(1);
	chunk_free(a, 1);
	fake.now_ms = T0 + 900;
	cr_assert_eq(alloc(1), a);
	chunk_free(a, 1);
	at(1000);
	at(1899);
	cr_assert_eq(fake.npurge, 0, "dirty since 900 ms only");
	at(1900);
	cr_assert_eq(fake.npurge, 1);
}

Test(decay, minus_one_never_purges)
{
	conf.decay_ms = -1;
	start();
	char *a = alloc(1);
	alloc(1);
	chunk_free(a, 1);
	at((uint64_t)1 << 40);
	cr_assert_eq(fake.npurge, 0);
	cr_assert_eq(chunk_figures().dirty, CHUNK_SIZE);
}

static uint8_t kind_at_purge;

static void record_kind(void *addr, size_t size)
{
	(void)size;
	kind_at_purge = chunk_desc_of(addr)->kind;
}

Test(decay, zero_purges_before_the_chunk_is_free)
{
	conf.decay_ms = 0;
	start();
	fake.on_purge = record_kind;
	char *a = alloc(2);
	alloc(1);
	chunk_free(a, 2);
	cr_assert_eq(fake.npurge, 1);
	cr_assert(fake.purge[0].addr == a && fake.purge[0].size == 2 * CHUNK_SIZE);
	cr_assert_eq(kind_at_purge, CK_HUGE, "purged while still in use, not once free");
	cr_assert_eq(chunk_desc_of(a)->state, MS_ZERO);
	cr_assert_eq(chunk_figures().dirty, 0);
}

Test(decay, purge_off_never_purges)
{
	conf.purge = PURGE_OFF;
	start();
	char *a = alloc(1);
	alloc(1);
	chunk_free(a, 1);
	at(100000);
	cr_assert_eq(fake.npurge, 0);
	conf.decay_ms = 0;
	char *b = alloc(2);
	chunk_free(b, 2);
	cr_assert_eq(fake.npurge, 0, "decay_ms:0 with purge:off");
	cr_assert_eq(chunk_figures().dirty, 3 * CHUNK_SIZE);
}

Test(decay, purge_free_leaves_lazy_chunks)
{
	conf.purge = PURGE_FREE;
	start();
	char *a = alloc(1);
	alloc(1);
	char *b = alloc(1);
	alloc(1);
	chunk_free(a, 1);
	at(1000);
	cr_assert_eq(fake.npurge, 1);
	cr_assert_eq(fake.purge[0].kind, PURGE_FREE);
	cr_assert_eq(chunk_desc_of(a)->state, MS_LAZY);
	cr_assert_eq(chunk_figures().lazy, CHUNK_SIZE);
	cr_assert_eq(chunk_figures().dirty, 0);
	bool zero = true;
	cr_assert(chunk_alloc(1, CHUNK_SIZE, CK_HUGE, CHUNK_SIZE, &zero) == a);
	cr_assert_not(zero, "a lazily freed chunk is not known zero");
	cr_assert_eq(chunk_figures().lazy, 0);

	chunk_free(b, 1);
	at(2000);
	cr_assert_eq(chunk_figures().lazy, CHUNK_SIZE);
	fake_clear_log();
	cr_assert_eq(chunk_purge_all(), CHUNK_SIZE, "trim takes lazy chunks too");
	cr_assert_eq(fake.purge[0].kind, PURGE_DONTNEED);
	cr_assert_eq(chunk_figures().lazy, 0);
	cr_assert_eq(chunk_desc_of(b)->state, MS_ZERO);
}

Test(decay, failed_purge_is_tried_again)
{
	start();
	char *a = alloc(1);
	alloc(1);
	chunk_free(a, 1);
	fake.purge_fail = true;
	at(1000);
	cr_assert_eq(fake.npurge, 1);
	cr_assert_eq(chunk_desc_of(a)->state, MS_DIRTY);
	cr_assert_eq(chunk_figures().dirty, CHUNK_SIZE);
	fake.purge_fail = false;
	at(1001);
	cr_assert_eq(fake.npurge, 2);
	cr_assert_eq(chunk_desc_of(a)->state, MS_ZERO);
}

/* ---- what the background thread and the dirty cap read (issue 17) ---- */

Test(decay, step_says_when_the_next_chunk_is_due)
{
	start();
	cr_assert_eq(chunk_decay(), UINT64_MAX, "nothing dirty: no time to wake at");
	char *a = alloc(1), *b = alloc(1);
	alloc(1);
	chunk_free(a, 1);
	fake.now_ms = T0 + 300;
	chunk_free(b, 1);
	fake.now_ms = T0 + 500;
	cr_assert_eq(chunk_decay(), T0 + 1000, "the oldest dirty chunk, a, is due at 1000");
	fake.now_ms = T0 + 1000;
	cr_assert_eq(chunk_decay(), T0 + 1300, "a purged: b is next, at 1300");
	cr_assert_eq(fake.npurge, 1);
	fake.now_ms = T0 + 1300;
	cr_assert_eq(chunk_decay(), UINT64_MAX);
	cr_assert_eq(fake.npurge, 2);
	conf.decay_ms = -1;
	chunk_free(alloc(1), 1);
	cr_assert_eq(chunk_decay(), UINT64_MAX, "decay_ms:-1: never due");
}

Test(decay, trim_purges_oldest_first_down_to_keep)
{
	start();
	char *p[4];
	for (int i = 0; i < 4; i++)
		p[i] = alloc(1);
	alloc(1); /* no free neighbour past the last */
	for (int i = 0; i < 4; i++) {
		fake.now_ms = T0 + 10 * (uint64_t)i;
		chunk_free(p[3 - i], 1); /* p[3] oldest ... p[0] youngest */
	}
	cr_assert_eq(chunk_dirty_bytes(), 4 * CHUNK_SIZE);
	chunk_trim_dirty(2 * CHUNK_SIZE);
	cr_assert_eq(chunk_dirty_bytes(), 2 * CHUNK_SIZE, "%zu", chunk_dirty_bytes());
	cr_assert_eq(chunk_desc_of(p[3])->state, MS_ZERO, "the oldest went first");
	cr_assert_eq(chunk_desc_of(p[2])->state, MS_ZERO);
	cr_assert_eq(chunk_desc_of(p[1])->state, MS_DIRTY, "younger ones stay");
	cr_assert_eq(chunk_desc_of(p[0])->state, MS_DIRTY);
	chunk_trim_dirty(0);
	cr_assert_eq(chunk_dirty_bytes(), 0);
}

Test(decay, huge_bytes_follow_huge_blocks)
{
	start();
	cr_assert_eq(chunk_huge_bytes(), 0);
	char *a = alloc(3);
	bool zero;
	char *arena_chunk = chunk_alloc(1, CHUNK_SIZE, CK_ARENA, 0, &zero);
	cr_assert(arena_chunk);
	cr_assert_eq(chunk_huge_bytes(), 3 * CHUNK_SIZE, "arena chunks are not huge blocks");
	chunk_free(a, 3);
	cr_assert_eq(chunk_huge_bytes(), 0);
}

Test(cap, dirty_cap_policy)
{
	size_t mib = (size_t)1 << 20;
	cr_assert_eq(purge_dirty_cap(400 * mib), 100 * mib, "a quarter of the active memory");
	cr_assert_eq(purge_dirty_cap(2 * mib), 4 * mib, "at least 4 MiB");
	purge_set_background(true);
	cr_assert_eq(purge_dirty_cap(400 * mib), SIZE_MAX, "the background thread's job");
	purge_set_background(false);
	conf.decay_ms = 0;
	cr_assert_eq(purge_dirty_cap(400 * mib), SIZE_MAX, "decay_ms:0 purges at free anyway");
	conf.decay_ms = -1;
	cr_assert_eq(purge_dirty_cap(400 * mib), SIZE_MAX, "decay_ms:-1: the user keeps it all");
	conf.decay_ms = 1000;
	conf.purge = PURGE_OFF;
	cr_assert_eq(purge_dirty_cap(400 * mib), SIZE_MAX);
}

static unsigned pokes;
static void count_poke(void) { pokes++; }

Test(cap, dirty_memory_pokes_the_hook)
{
	start();
	char *a = alloc(1);
	alloc(1);
	purge_set_dirty_hook(count_poke, NULL);
	chunk_free(a, 1);
	cr_assert_eq(pokes, 1, "a chunk turned dirty: the hook ran");
	purge_set_dirty_hook(NULL, NULL);
	chunk_free(alloc(1), 1);
	cr_assert_eq(pokes, 1);
}

Test(cap, regret_is_learned)
{
	size_t mib = (size_t)1 << 20;
	cr_assert_eq(purge_cap_pass(8 * mib), 4 * mib, "nothing learned: half the cap");
	cr_assert(purge_cap_regretted(purge_cap_stamp(T0), T0 + 999), "taken again within decay_ms");
	cr_assert(purge_cap_regretted(purge_cap_stamp(T0 + 1), T0 + 1), "in the same millisecond");
	cr_assert_not(purge_cap_regretted(purge_cap_stamp(T0), T0 + 1001), "after decay_ms");
	cr_assert_not(purge_cap_regretted(0, T0), "never capped");
	purge_cap_regret(100 * mib);
	cr_assert_eq(purge_cap_pass(8 * mib), 125 * mib, "5/4 of the regret kept from now on");
	cr_assert_eq(purge_dirty_cap(0), 125 * mib, "the cap never goes below what it learned");
	purge_cap_regret(8 * mib);
	cr_assert_eq(purge_cap_pass(8 * mib), 135 * mib, "regret adds up");
	cr_assert_eq(purge_cap_pass(8 * mib), (size_t)135 * mib / 2, "no new regret: halved");
	cr_assert_eq(purge_cap_pass(8 * mib), (size_t)135 * mib / 4);
}

/* The chunk layer reports a chunk the cap purged and that is taken again
 * within decay_ms; not one decay purged. */
Test(cap, chunk_layer_reports_regret)
{
	start();
	char *a = alloc(2), *b = alloc(2);
	alloc(1);
	chunk_free(a, 2);
	chunk_trim_dirty(0); /* a purged by the cap, not due */
	cr_assert_eq(chunk_dirty_bytes(), 0);
	fake.now_ms = T0 + 500;
	bool zero;
	cr_assert(chunk_alloc(2, CHUNK_SIZE, CK_HUGE, 2 * CHUNK_SIZE, &zero) == a && zero);
	cr_assert_eq(purge_cap_pass(8 << 20), (size_t)5 << 20 /* 4 MiB regret * 5/4 */);
	chunk_free(b, 2);
	fake.now_ms = T0 + 2000;
	chunk_decay(); /* b purged by decay: due */
	fake.now_ms = T0 + 2100;
	cr_assert(chunk_alloc(2, CHUNK_SIZE, CK_HUGE, 2 * CHUNK_SIZE, &zero) == b && zero);
	purge_cap_pass(8 << 20);
	cr_assert_eq(purge_cap_learned(), (size_t)5 << 19, "decay's purge is no regret: halved, not grown");
}

/* ---- chunks of huge blocks decay sooner (huge_decay_ms, issue 17 point 4) ---- */

static char *alloc_arena(void)
{
	bool zero;
	char *p = chunk_alloc(1, CHUNK_SIZE, CK_ARENA, 0, &zero);
	cr_assert(p);
	return p;
}

Test(huge_decay, huge_chunks_at_250_ms_arena_chunks_at_decay_ms)
{
	fake.now_ms = T0;
	chunk_init();
	cr_assert_eq(conf.huge_decay_ms, HUGE_DECAY_AUTO, "the default: auto");
	conf.huge_decay_ms = 250;
	char *h = alloc(2), *ar = alloc_arena();
	alloc(1);
	chunk_free(ar, 1); /* the arena chunk first: older, but due later */
	fake.now_ms = T0 + 10;
	chunk_free(h, 2);
	cr_assert_eq(chunk_decay(), T0 + 260, "the huge block's chunks are due first");
	at(259);
	cr_assert_eq(fake.npurge, 0);
	at(260);
	cr_assert_eq(fake.npurge, 1, "both chunks of the huge block in one call");
	cr_assert_eq(fake.purge[0].addr, h);
	cr_assert_eq(fake.purge[0].size, 2 * CHUNK_SIZE);
	cr_assert_eq(chunk_desc_of(ar)->state, MS_DIRTY, "the arena chunk waits for decay_ms");
	cr_assert_eq(chunk_decay(), T0 + 1000);
	at(999);
	cr_assert_eq(fake.npurge, 1);
	at(1000);
	cr_assert_eq(fake.npurge, 2);
	cr_assert_eq(fake.purge[1].addr, ar);
}

Test(huge_decay, a_shrunk_blocks_tail_decays_as_huge)
{
	fake.now_ms = T0;
	conf.huge_decay_ms = 250;
	chunk_init();
	char *h = alloc(3);
	alloc(1);
	chunk_shrink(h, 3, 1, CHUNK_SIZE);
	at(250);
	cr_assert_eq(fake.npurge, 1);
	cr_assert_eq(fake.purge[0].addr, h + CHUNK_SIZE);
	cr_assert_eq(fake.purge[0].size, 2 * CHUNK_SIZE);
}

Test(huge_decay, never_later_than_decay_ms_zero_at_free_minus_one_follows)
{
	fake.now_ms = T0;
	chunk_init();
	conf.huge_decay_ms = 250;
	conf.decay_ms = 100;
	cr_assert_eq(purge_huge_decay_ms(), 100, "capped at decay_ms");
	conf.decay_ms = 1000;
	conf.huge_decay_ms = -1;
	cr_assert_eq(purge_huge_decay_ms(), 1000);
	conf.huge_decay_ms = 0;
	char *h = alloc(1), *ar = alloc_arena();
	alloc(1);
	chunk_free(h, 1);
	cr_assert_eq(fake.npurge, 1, "huge_decay_ms:0 purges a huge block's chunks at free");
	cr_assert_eq(chunk_desc_of(h)->state, MS_ZERO);
	chunk_free(ar, 1);
	cr_assert_eq(fake.npurge, 1, "but not an arena chunk's");
	conf.decay_ms = -1;
	cr_assert_not(purge_chunk_expired(0, UINT64_MAX / 2, true), "decay_ms:-1: never");
	cr_assert_eq(purge_chunk_due_at(5, true), UINT64_MAX);
}

/* huge_decay_ms:auto (the default): a huge block's chunks stay dirty while
 * the huge blocks in use and they stay under the blocks' peak over the
 * horizon (half to all of decay_ms), with a quarter of the peak more while
 * blocks take chunks; over it the oldest go at once; an idle program's go
 * once the horizon forgets the peak.  A figure set by hand is a plain
 * decay. */
Test(huge_decay, held_while_in_the_working_set)
{
	fake.now_ms = T0;
	conf.huge_decay_ms = HUGE_DECAY_AUTO;
	chunk_init();
	cr_assert_eq(purge_huge_decay_ms(), 1000, "auto: decay_ms, for what the horizon lets go");
	cr_assert_not(purge_chunk_at_free(true), "auto: never purged at free");
	conf.huge_decay_ms = 0;
	cr_assert(purge_chunk_at_free(true), "huge_decay_ms:0: at free");
	conf.huge_decay_ms = HUGE_DECAY_AUTO;
	char *h = alloc(3), *big = alloc(6);
	alloc(1);
	chunk_free(h, 3);
	chunk_free(big, 6);
	cr_assert_eq(fake.npurge, 0, "9 chunks freed under a peak of 10: held");
	bool zero;
	char *again = chunk_alloc(6, CHUNK_SIZE, CK_HUGE, 6 * CHUNK_SIZE, &zero);
	cr_assert(again && !zero, "a block taken again gets dirty chunks back");
	at(600);
	cr_assert_eq(fake.npurge, 0, "the peak is still in the horizon");
	cr_assert_eq(chunk_figures().dirty, 3 * CHUNK_SIZE);
	cr_assert_eq(chunk_decay(), T0 + 1100, "held chunks wake the caller when a window ends");
	at(1200);
	cr_assert_eq(fake.npurge, 1, "idle for a horizon: the peak is forgotten");
	cr_assert_eq(chunk_figures().dirty, 0);
	cr_assert_eq(chunk_decay(), UINT64_MAX, "nothing dirty: no wake-up");
}

/* Over the working set, the chunks freed longest ago go first, at once. */
Test(huge_decay, over_the_working_set_oldest_first)
{
	fake.now_ms = T0;
	conf.huge_decay_ms = HUGE_DECAY_AUTO;
	chunk_init();
	char *a = alloc(4), *b = alloc(4);
	at(1200); /* the first peak forgotten: 8 in use */
	chunk_free(a, 4);
	fake.now_ms = T0 + 1201;
	chunk_free(b, 4);
	cr_assert_eq(fake.npurge, 0, "8 chunks freed under a peak of 8: held");
	char *c = alloc(16); /* fresh: the peak is 16 now, in use 16, 8 dirty */
	cr_assert(c);
	cr_assert(fake.npurge >= 1, "8 dirty chunks over a working set of 4 (a quarter of 16)");
	cr_assert_eq(fake.purge[0].addr, a, "the chunks freed first go first");
	cr_assert_eq(chunk_figures().dirty, 4 * CHUNK_SIZE);
	cr_assert_eq(chunk_desc_of(b)->state, MS_DIRTY);
}

/* Where the background thread runs, the paths that take and give back
 * chunks purge nothing themselves: memory due at once (over the working
 * set) asks the thread for a step, and its step purges. */
static unsigned dues;
static void count_due(void) { dues++; }

Test(huge_decay, deferred_over_the_working_set_asks_the_thread)
{
	fake.now_ms = T0;
	conf.huge_decay_ms = HUGE_DECAY_AUTO;
	chunk_init();
	purge_set_dirty_hook(NULL, count_due);
	purge_set_background(true);
	cr_assert(purge_deferred());
	char *a = alloc(4), *b = alloc(4);
	at(1200);
	chunk_free(a, 4);
	fake.now_ms = T0 + 1201;
	chunk_free(b, 4);
	cr_assert_eq(dues, 0, "held: nothing due");
	char *c = alloc(16);
	cr_assert(c);
	cr_assert_eq(fake.npurge, 0, "no purge in the allocating thread");
	cr_assert(dues >= 1, "the thread is asked for a step");
	cr_assert_eq(chunk_figures().dirty, 8 * CHUNK_SIZE);
	chunk_decay(); /* the thread's step */
	cr_assert_eq(fake.npurge, 1);
	cr_assert_eq(fake.purge[0].addr, a, "the chunks freed first go first");
	cr_assert_eq(chunk_figures().dirty, 4 * CHUNK_SIZE);
	fake.now_ms = T0 + 3000;
	chunk_free(c, 16);
	cr_assert_eq(fake.npurge, 1, "due by age: the thread's step, not the free's");
	purge_set_background(false);
	purge_set_dirty_hook(NULL, NULL);
	cr_assert_not(purge_deferred());
	chunk_free(alloc(1), 1);
	cr_assert(fake.npurge > 1, "no thread: the free purges what is due");
}

/* The dirty cap's purge of a huge block's held chunks is regretted when
 * huge blocks take as many chunks again within decay_ms, whichever they
 * take, so realloc growth over passes keeps its memory from its third pass. */
Test(huge_decay, capped_chunks_taken_again_are_regret)
{
	fake.now_ms = T0;
	conf.huge_decay_ms = HUGE_DECAY_AUTO;
	chunk_init();
	char *a = alloc(4);
	chunk_free(a, 4);
	purge_cap_pass(0); /* start from nothing learned */
	chunk_trim_dirty(0);
	cr_assert_eq(chunk_figures().dirty, 0, "the cap purged the held chunks");
	fake.now_ms = T0 + 500;
	alloc(8);
	cr_assert_eq(purge_cap_pass(0), 4 * CHUNK_SIZE + CHUNK_SIZE, "5/4 of the 4 chunks regretted");
}

Test(huge_decay, reused_chunk_leaves_its_list)
{
	fake.now_ms = T0;
	conf.huge_decay_ms = 250;
	chunk_init();
	char *h = alloc(1);
	alloc(1);
	chunk_free(h, 1);
	fake.now_ms = T0 + 100;
	cr_assert(alloc(1) == h, "the dirty chunk is taken again");
	cr_assert_eq(chunk_figures().dirty, 0);
	cr_assert_eq(chunk_decay(), UINT64_MAX, "nothing left on either list");
	at(5000);
	cr_assert_eq(fake.npurge, 0);
}

/* ---- chunks taken again: dirty ones first; purged ones stay warm a while ---- */

/* Best fit would take the run of 2 (zero); the dirty run of 3 holds 2 dirty
 * chunks, and backed memory taken again costs no fault. */
Test(reuse, dirty_chunks_before_a_better_fitting_zero_run)
{
	start();
	char *a = alloc(2);
	alloc(1);
	char *b = alloc(3);
	alloc(1);
	chunk_free(a, 2);
	at(1000); /* a purged: zero */
	cr_assert_eq(chunk_desc_of(a)->state, MS_ZERO);
	chunk_free(b, 3);
	cr_assert(alloc(2) == b, "the dirty run, not the zero one that fits better");
	cr_assert(alloc(2) == a, "then best fit again");
}

Test(reuse, dirty_place_inside_a_run)
{
	start();
	char *x = alloc(2), *y = alloc(2);
	alloc(1);
	chunk_free(x, 2);
	at(1000); /* x purged */
	chunk_free(y, 2); /* one run: zero, zero, dirty, dirty */
	cr_assert_eq(chunk_desc_of(x)->nchunks, 4);
	cr_assert(alloc(2) == y, "the dirty half of the run");
	cr_assert_eq(chunk_figures().dirty, 0);
}

/* A huge block does not go to a place only partly backed inside a run:
 * it goes to the run's start, where it can grow in place. */
Test(reuse, partly_dirty_place_is_a_runs_start)
{
	start();
	char *x = alloc(3), *y = alloc(1);
	alloc(1);
	chunk_free(x, 3);
	at(1000); /* x purged */
	chunk_free(y, 1); /* one run: zero, zero, zero, dirty */
	cr_assert(alloc(2) == x, "the run's start, not the place holding the dirty chunk");
}

Test(reuse, nothing_dirty_is_best_fit)
{
	start();
	char *a = alloc(2);
	alloc(1);
	char *b = alloc(3);
	alloc(1);
	chunk_free(b, 3);
	chunk_free(a, 2);
	at(1000);
	cr_assert_eq(chunk_figures().dirty, 0);
	cr_assert(alloc(2) == a);
}

static char *alloc_huge(size_t n, bool *zero, size_t *nfresh)
{
	char *p = chunk_alloc_huge(n, CHUNK_SIZE, n * CHUNK_SIZE, true, zero, nfresh);
	cr_assert(p);
	chunk_map_advise(p, n, ADV_HUGE); /* as huge.c advises its whole chunks */
	return p;
}

/* Huge pages purged a moment ago are not fresh to the huge-page decision
 * (the kernel still backs them), for a second; 4 KiB ones are. */
Test(reuse, purged_chunks_are_warm_for_a_second)
{
	start();
	os_thp = THP_SYS_MADVISE;
	bool zero;
	size_t nfresh;
	char *h = alloc_huge(2, &zero, &nfresh);
	cr_assert(zero);
	cr_assert_eq(nfresh, 2, "from the frontier: fresh");
	alloc(1);
	chunk_free(h, 2);
	at(1000); /* purged at T0 + 1000 */
	fake.now_ms = T0 + 1999;
	cr_assert(alloc_huge(2, &zero, &nfresh) == h);
	cr_assert(zero);
	cr_assert_eq(nfresh, 0, "purged 999 ms ago");
	chunk_free(h, 2);
	at(3000); /* dirty from T0 + 1999, purged at T0 + 3000 */
	fake.now_ms = T0 + 4000;
	cr_assert(alloc_huge(2, &zero, &nfresh) == h);
	cr_assert(zero);
	cr_assert_eq(nfresh, 2, "purged a second ago: cold");
	chunk_map_advise(h + CHUNK_SIZE, 1, ADV_NOHUGE);
	chunk_free(h, 2);
	at(5000);
	fake.now_ms = T0 + 5001;
	cr_assert(alloc_huge(2, &zero, &nfresh) == h);
	cr_assert_eq(nfresh, 1, "one chunk's 4 KiB pages purged a moment ago: fresh");
}

/* MADV_FREE leaves the pages until the kernel reclaims them: lazy chunks
 * are not fresh, however long ago and whatever their pages were. */
Test(reuse, lazy_chunks_are_not_fresh)
{
	start();
	os_thp = THP_SYS_MADVISE;
	os_has_madv_free = true;
	conf.purge = PURGE_FREE;
	bool zero;
	size_t nfresh;
	char *h = alloc_huge(2, &zero, &nfresh);
	alloc(1);
	chunk_map_advise(h + CHUNK_SIZE, 1, ADV_NOHUGE);
	chunk_free(h, 2);
	at(1000);
	cr_assert_eq(chunk_figures().lazy, 2 * CHUNK_SIZE, "purged with MADV_FREE");
	fake.now_ms = T0 + 9000;
	cr_assert(alloc_huge(2, &zero, &nfresh) == h);
	cr_assert_not(zero);
	cr_assert_eq(nfresh, 0);
}

Test(reuse, purged_at_free_is_warm_a_moved_blocks_source_is_not)
{
	start();
	os_thp = THP_SYS_MADVISE;
	conf.huge_decay_ms = 0;
	bool zero;
	size_t nfresh;
	char *h = alloc(1);
	chunk_map_advise(h, 1, ADV_HUGE);
	alloc(1);
	chunk_free(h, 1);
	cr_assert(alloc_huge(1, &zero, &nfresh) == h);
	cr_assert(zero && nfresh == 0, "purged at free just now");
	os_has_dontunmap = true;
	char *dst = alloc(1);
	alloc(1);
	cr_assert_eq(chunk_map_move(h, dst, 1, CHUNK_SIZE), 0);
	cr_assert(alloc_huge(1, &zero, &nfresh) == h);
	cr_assert(zero);
	cr_assert_eq(nfresh, 1, "its pages moved away: fresh");
}
