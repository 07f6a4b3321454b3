/* The purging policy: when free memory goes back to the kernel, and with
 * which advice.  Decisions only: the chunk layer (whole free chunks) and
 * the arenas (free page runs inside arena chunks) ask these functions and
 * do the purging themselves; background.c drives it from above (the
 * background thread, malloc_trim).
 *
 * What is purged: whole free chunks (2 MiB, 2 MiB-aligned), so a purge never
 * splits a huge page.  Arena chunks go back to the chunk layer when all their
 * pages are free (one empty chunk per arena is kept), and are purged there.
 * Free page runs inside arena chunks are purged only with fine-grained
 * purging (ARENA_CONF=fine_purge:true; by default only where there are no
 * huge pages to split: no THP, or a chunk without huge-page advice) and by
 * malloc_trim.
 *
 * When (decay): a dirty free chunk is purged decay_ms after it became dirty
 * (default 1000 ms; 0: at once, before it is visible as free; -1: never),
 * one that held a huge block when it falls out of the program's working
 * set of huge blocks (huge_decay_ms:auto, below).
 * The curve, for memory freed at t0 and not reused: resident until t0 +
 * decay_ms, then purged within one decay step: a step, not jemalloc's
 * smooth curve, because every chunk is judged by its own age.  The free
 * pages of an arena chunk are judged together, by the chunk's dirty clock
 * (types.h: since its first page given back after the last purge).
 * Decay steps run in chunk allocation and free, in page frees of the
 * same chunk, and in each arena's sweep of all its chunks (at most every
 * decay_ms / 4, at least 10 ms apart) from its allocation and free paths;
 * the background thread (background.c) runs them at the same period, and
 * where it runs, only it (purge_deferred).
 *
 * How: ARENA_CONF=purge:dontneed (default; RSS drops at once and the memory
 * reads zero afterwards, which calloc uses), purge:free (MADV_FREE: cheaper
 * now, RSS drops only under memory pressure, contents unknown) or purge:off.
 * malloc_trim(0) and arena_purge() purge everything now with MADV_DONTNEED. */
#include "internal.h"
#include "limit.h"

/* Whether decay purges anything at all. */
bool purge_decay_on(void)
{
	return cfg->decay_ms >= 0 && cfg->purge != PURGE_OFF;
}

/* Whether memory dirty since dirty_ms is due at now. */
bool purge_expired(uint64_t dirty_ms, uint64_t now)
{
	return purge_decay_on() && now - dirty_ms >= (uint64_t)limit_decay_ms(cfg->decay_ms);
}

/* The advice decay purges with (PURGE_DONTNEED or PURGE_FREE). */
uint8_t purge_advice(void)
{
	return cfg->purge;
}

/* decay_ms:0: chunks are purged as they are freed. */
bool purge_at_free(void)
{
	return cfg->decay_ms == 0 && cfg->purge != PURGE_OFF;
}

/* Fine-grained purging everywhere: ARENA_CONF=fine_purge:true, or by
 * default where there are no huge pages to split. */
bool purge_fine_on(void)
{
	if (cfg->fine_purge != TRI_AUTO)
		return cfg->fine_purge == TRI_ON;
	return cfg->thp == THP_NEVER || os_thp == THP_SYS_NONE || os_thp == THP_SYS_NEVER;
}

/* Whether the free page runs of c may be purged: fine_purge:true, or
 * (auto) where c holds no huge-page advice: no THP at all, or a chunk that
 * is sparse (never dense, or dense once and back under thp.c's
 * THP_SPARSE_PAGES). */
bool purge_fine_chunk(const arena_chunk_t *c)
{
	if (cfg->fine_purge != TRI_AUTO)
		return cfg->fine_purge == TRI_ON;
	return purge_fine_on() || !c->advised_huge;
}

/* Whether c is purged only whole, not in parts: under a memory limit
 * (limit.c), a chunk that may be a huge page (advised huge, now or once).
 * A huge page purged in part stays charged to the cgroup whole until the
 * limit's reclaim splits it (memory.failcnt), and its purged pages fault
 * in anew beside it: bench/cgroup_limit's first phase formed 54-130 MiB
 * of huge pages, and where the cap purged them in parts the next phase
 * hit the limit 45-65 times, 45 MiB charged to nothing libarena held. */
bool purge_whole_only(const arena_chunk_t *c)
{
	return limit_bytes() && (c->advised_huge || c->advice_ms != 0);
}

/* Whether chunks' free pages are ever purged by decay (sweeps run). */
bool purge_sweeps(void)
{
	return purge_decay_on() && cfg->fine_purge != TRI_OFF;
}

/* The period of sweeps and background decay steps: decay_ms / 4, at least
 * 10 ms (at most 1 s for the background thread's sleep, background.c). */
uint64_t purge_period_ms(void)
{
	uint64_t every = cfg->decay_ms > 0 ? (uint64_t)cfg->decay_ms / 4 : 0;
	return every < 10 ? 10 : every;
}

/* An arena's sweep of all its chunks (arena.c): a chunk that sees no more
 * frees would keep its dirty pages for ever, and with mixed lifetimes many
 * do.  bench/soak -d 600 -p 60, side by side: the dirty pages of sparse
 * chunks, median of each minute, 99-143 MiB without the sweep, 43-66 MiB
 * with it.  Whether one is due at now; if so, *next_ms is moved on. */
bool purge_sweep_due(uint64_t *next_ms, uint64_t now)
{
	if (!purge_sweeps() || now < *next_ms)
		return false;
	*next_ms = now + purge_period_ms();
	return true;
}

/* When memory dirty since dirty_ms is due; UINT64_MAX when decay is off. */
uint64_t purge_due_at(uint64_t dirty_ms)
{
	return purge_decay_on() ? dirty_ms + (uint64_t)limit_decay_ms(cfg->decay_ms) : UINT64_MAX;
}

/* ---- chunks that held huge blocks: churn or idleness ----------------------
 * huge_decay_ms:auto (the default) tells churn from idleness by the
 * program's own working set: a free chunk that held a huge block stays
 * dirty while the huge blocks in use now, plus the dirty chunks kept, stay
 * under their peak over the last horizon (between half and all of decay_ms:
 * purge_horizon_peak); what is over it is purged at once, the chunk freed
 * longest ago first.  A program that frees a block and takes one again
 * (realloc growth over passes, a set of big buffers rebuilt one by one)
 * keeps its pages and takes no fault; a program whose huge blocks stay
 * under their peak for a horizon gives back every chunk.  build/bench/
 * large_churn -n 600 -k 20 -s 5m-25m (bench/gate): 131 k faults and 3.4 k
 * huge pages faulted when chunks were purged at free past 16 MiB dirty, as
 * few as the allocators that keep freed memory once they are held.
 * A figure set by hand (huge_decay_ms:N) is a plain decay for these chunks,
 * never later than decay_ms; -1: decay_ms. */
long purge_huge_decay_ms(void)
{
	long h = cfg->huge_decay_ms == HUGE_DECAY_AUTO ? cfg->decay_ms : cfg->huge_decay_ms;
	return h < 0 || cfg->decay_ms < 0 || h > cfg->decay_ms ? cfg->decay_ms : h;
}

/* Whether huge blocks' chunks are held by their working set
 * (huge_decay_ms:auto, the default, with decay on). */
bool purge_huge_held(void)
{
	return cfg->huge_decay_ms == HUGE_DECAY_AUTO && purge_decay_on() && cfg->decay_ms > 0;
}

/* Starts a new window of h when the current one is over at now: the one
 * before takes its figure (or 0 when it ended more than a window ago). */
static void horizon_roll(purge_horizon_t *h, uint64_t now)
{
	uint64_t half = cfg->decay_ms > 1 ? (uint64_t)cfg->decay_ms / 2 : 1;
	if (now < h->roll_ms)
		return;
	h->prev = now >= h->roll_ms + half ? 0 : h->cur;
	h->cur = 0;
	h->roll_ms = now + half;
}

/* The peak of value over the last horizon, as value is now: two windows
 * of half a horizon each, the current one and the one before. */
size_t purge_horizon_peak(purge_horizon_t *h, size_t value, uint64_t now)
{
	horizon_roll(h, now);
	if (value > h->cur)
		h->cur = value;
	return h->cur > h->prev ? h->cur : h->prev;
}

/* Adds n to the count of h's current window; returns the count over the
 * last horizon (this window and the one before). */
size_t purge_horizon_add(purge_horizon_t *h, size_t n, uint64_t now)
{
	horizon_roll(h, now);
	h->cur += n;
	return h->cur + h->prev;
}

/* When the peak may next fall (a window ends). */
uint64_t purge_horizon_next(const purge_horizon_t *h)
{
	return h->roll_ms;
}

/* Whether a free chunk dirty since dirty_ms (huge: it held a huge block)
 * is due at now, and when it will be (UINT64_MAX: decay is off).  A held
 * chunk of a huge block is not judged by its age (chunk.c keeps the
 * working set). */
bool purge_chunk_expired(uint64_t dirty_ms, uint64_t now, bool huge)
{
	if (!huge)
		return purge_expired(dirty_ms, now);
	return purge_decay_on() && now - dirty_ms >= (uint64_t)limit_decay_ms(purge_huge_decay_ms());
}

uint64_t purge_chunk_due_at(uint64_t dirty_ms, bool huge)
{
	if (!huge)
		return purge_due_at(dirty_ms);
	return purge_decay_on() ? dirty_ms + (uint64_t)limit_decay_ms(purge_huge_decay_ms()) : UINT64_MAX;
}

/* Whether n chunks freed now (huge: they held a huge block) are purged
 * before they are visible as free: decay_ms:0, or huge_decay_ms:0. */
bool purge_chunk_at_free(bool huge)
{
	if (!huge)
		return purge_at_free();
	return purge_decay_on() && purge_huge_decay_ms() == 0;
}

/* Whether memory the chunk layer purged at purged_ms (0: never touched,
 * or its pages moved away) is still warm at now: its pages went back to
 * the kernel's free lists so recently that a fault takes them again before
 * the host has taken them back (on this VM free page reporting gives the
 * guest's free 2 MiB blocks back about 2 s after they were freed:
 * docs/design.md, "The cost of a fresh huge page").  Such memory refaults
 * as a huge page in 240-260 us of CPU per 2 MiB, and as 4 KiB pages in
 * 1150-1170 us (docs/soak.md): the run-time decision's probe of fresh memory
 * says nothing about it. */
#define PURGE_WARM_MS 1000

bool purge_chunk_warm(uint64_t purged_ms, uint64_t now)
{
	return purged_ms != 0 && now - purged_ms < PURGE_WARM_MS;
}

/* Whether a huge block taken on dirty chunks has the rest of its last
 * chunk purged: in the memory limit's zone (limit.c).  A block ends inside
 * its last chunk, whose pages past its end hold what an earlier, longer
 * block wrote: resident, never used, and no purge of free memory reaches
 * them. */
bool purge_huge_tail(void)
{
	return limit_level() != 0;
}

/* ---- thread caches give back what their thread does not use ----------------
 * A thread's cache holds up to ~2 MiB of blocks (more once lists grew), and
 * the arenas cannot take it back: only its thread touches it (the fast
 * paths take no lock).  So the thread itself looks, at its cache's slow
 * paths (a refill or a flush), at most once per period (decay_ms): a list
 * that was never shorter than L blocks since the last look held L of its
 * blocks unused all along (each block taken removed at most one of those
 * there at the look), and L go back to their arenas.  L is not tracked on the fast paths
 * (they stay a straight line): it is bounded from below by what the
 * slow paths and the counters already know: the count at the last look,
 * lowered at every refill (the list ran dry: 0) and flush (to what stayed),
 * minus the blocks taken since (tcache_nmalloc). */
bool purge_cache_gc_due(uint64_t last_ms, uint64_t now)
{
	if (!cfg->tcache_gc || !purge_decay_on())
		return false;
	long decay = limit_decay_ms(cfg->decay_ms);
	uint64_t every = decay < 10 ? 10 : (uint64_t)decay;
	return now - last_ms >= every || limit_pressure_ms() > last_ms; /* limit.c */
}

/* What one thread's cache lists may grow by in all past their first sizes
 * (tcache.c, bin_grow), with ncaches threads holding a cache: a share of
 * CACHE_GROW_SHARED, at least CACHE_GROW_MIN and at most most (the
 * cache's own bound), as tcmalloc bounds its thread caches together.
 * bench/soak's 8 threads, allowed 4 MiB each, kept 45-46 MiB of blocks in
 * caches, foreign bins and free slab slots at the median sample (active -
 * allocated, 34-35 MiB at 1 MiB each: in three 300 s pairs against 4 MiB
 * each (bench/scripts/soak-pair) RSS/live p99 fell by 0.18-0.67, the median
 * moved by -0.10, +0.02 and -0.05, and the operations rose 1.7-3.0%.  One
 * or two threads keep their 4 MiB (glibc_simple's lists need 1.6 MiB). */
#define CACHE_GROW_SHARED ((size_t)8 << 20)
#define CACHE_GROW_MIN ((size_t)1 << 20)

size_t purge_cache_grow_share(unsigned ncaches, size_t most)
{
	size_t share = CACHE_GROW_SHARED / (ncaches ? ncaches : 1);
	if (share < CACHE_GROW_MIN)
		share = CACHE_GROW_MIN;
	return share < most ? share : most;
}

/* Whether a list that a burst of mallocs ran dry may grow past the
 * thread's share (tcache.c, bin_grow): by bytes, mine being what the
 * thread's lists grew by already and all what every live cache's did, up
 * to most in the thread and CACHE_GROW_SHARED in all, a pool as
 * tcmalloc's thread caches share one.  A thread that works while the
 * others wait (bench/glibc_simple -T: the main thread holds a cache and
 * joins) may take what they left: its rounds of 1,600 blocks of 4 KiB
 * (6.4 MiB) went through the slabs at every round within its share (36 ns
 * a malloc and free against tcmalloc's 12; 13 with the pool). */
bool purge_cache_may_grow(size_t mine, size_t all, size_t bytes, size_t most)
{
	return mine + bytes <= most && all + bytes <= CACHE_GROW_SHARED;
}

/* Blocks of a list to give back at a look.  low_then: a bound from below
 * on its low-water mark, the length at the last look lowered by refills and
 * flushes since, of which taken blocks were taken since; seen: the least
 * length seen at this thread's slow paths since (sampled: at least the
 * low-water mark); now: its length now.  Certainly unused: low_then -
 * taken.  Likely unused: seen; three quarters of it go (as jemalloc's
 * cache GC gives back 3/4 of its low-water mark), so that a list whose
 * length only dipped between samples is not emptied outright. */
uint32_t purge_cache_unused(uint32_t low_then, uint32_t seen, uint64_t taken, uint32_t now)
{
	uint32_t sure = taken >= low_then ? 0 : low_then - (uint32_t)taken;
	uint32_t likely = seen - seen / 4;
	uint32_t n = sure > likely ? sure : likely;
	return n < now ? n : now;
}

/* ---- who is told when memory turns dirty ------------------------------------
 * The layers that make memory dirty that decay will purge (arena.c,
 * chunk.c, remote.c) call
 * purge_note_dirty(); background.c, above them, registers what that does
 * (wake its thread if it sleeps with nothing to do).  A callback, so that
 * the lower layers need not know the higher one.  purge_note_due() asks
 * for a pass now (memory is due that the thread was not waiting for). */
static void (*dirty_hook)(void);
static void (*due_hook)(void);

void purge_set_dirty_hook(void (*hook)(void), void (*due)(void))
{
	__atomic_store_n(&due_hook, due, __ATOMIC_RELEASE);
	__atomic_store_n(&dirty_hook, hook, __ATOMIC_RELEASE);
}

void purge_note_dirty(void)
{
	void (*hook)(void) = __atomic_load_n(&dirty_hook, __ATOMIC_ACQUIRE);
	if (hook)
		hook();
}

void purge_note_due(void)
{
	void (*hook)(void) = __atomic_load_n(&due_hook, __ATOMIC_ACQUIRE);
	if (hook)
		hook();
}

/* ---- the dirty cap: programs without the background thread ------------------
 * Decay runs inside allocator calls: a program that frees a burst and then
 * stops calling the allocator keeps every dirty page it freed.  Without the
 * background thread (a single-threaded program by default, or
 * background_thread:false) a free that leaves more than dirty_cap percent
 * of the active memory dirty (default 25%; at least DIRTY_CAP_MIN) purges
 * the oldest dirty memory at once, due or not, down to half the cap, so
 * that a pass does real work and the next waits for more (arena.c).
 *
 * It learns.  A program that frees a big block and allocates it again at
 * once (realloc growth, a buffer per request, calloc in a loop) would pay
 * a purge and the page faults again at every round.  Memory the cap purged
 * and that is taken again within decay_ms (decay would have kept it) is
 * the cap's regret (chunk.c and arena.c report it): the program's working
 * set is that much bigger than the cap thought.  At its next pass the cap
 * adds 5/4 of it to what it learned, which it does not go below; a pass
 * with no regret since the last halves it (the program stopped taking
 * back what was purged: two threads, one freeing while the other still
 * allocated, had taught it 30-90 MiB that stayed dirty when both went
 * idle).  What is learned is the program's own churn.  A program that
 * frees a burst and goes idle regrets nothing and keeps the plain cap.
 * Figures: docs/tuning.md (bench/idle_return -t 1; realloc_grow,
 * first_touch, thp_bloat, prog_python before and after). */
/* The cap's floor.  Was 8 MiB: python3's heap under pymalloc (a 10 MiB
 * heap beside the interpreter's own arenas) then kept up to 8 MiB dirty,
 * peak RSS 69.4 MB against glibc's 65.7 (1.057x), and
 * bench/idle_return -t 1 (10.3 MiB live) ended at RSS/live 2.41-2.48.
 * At 4 MiB: 68.2 MB (1.039x) and 2.09-2.19
 * (3 interleaved runs each).  Its cost: a program that frees
 * 4-8 MiB and takes it back pays one round of faults before the cap
 * learns (glibc_simple -s 4096 -c 1600: 1.7k -> 4.2k faults in all, once;
 * python3 -m malloc 15.0k -> 16.1k); git, sqlite3 and gcc unchanged (faults
 * and peak RSS).  At 2 MiB pymalloc gained 0.7 MB more, but in 2 of 3
 * runs of glibc_simple -d 0.05 its worst configuration took 6.4-6.7 us a
 * pair (41-63 ns with the 8 MiB floor): purges and faults at every batch. */
#define DIRTY_CAP_MIN ((size_t)4 << 20)

static atomic_bool bg_running;
static atomic_size_t cap_regret;   /* bytes, since the cap's last pass */
static atomic_size_t cap_learned;  /* the cap never goes below it      */

void purge_set_background(bool running)
{
	atomic_store_explicit(&bg_running, running, memory_order_relaxed);
}

/* Whether decay's purges are the background thread's alone: it runs.  A
 * purge (MADV_DONTNEED) flushes the TLB of every CPU that runs one of the
 * process's threads, an interrupt each and a wait for all of them in the
 * purging thread; in the paths that free and allocate, another thread pays
 * it on its hot path.  Those paths then only note memory dirty or due, and
 * the thread purges what is due at its next pass, at most a sweep period
 * later, all of it together (bench/scripts/purge-threads on
 * bench/phase_change -s 150 -r 3: 6.8 k purges by the program's own
 * threads purging inline, 1 deferred).
 * Without the thread (one thread: no other CPU to flush) they purge
 * inline, and so do the memory limit's purges past its room. */
bool purge_deferred(void)
{
	return atomic_load_explicit(&bg_running, memory_order_relaxed);
}

/* Whether decay also purges the free pages of c, a dense chunk (advised
 * huge once 3/4 of it was in use; arena.c takes the advice back first):
 * fine_purge:auto, the background thread runs, and c turned dense after
 * its pages were touched (advice_ms set), not born huge (thp.c,
 * thp_new_chunk_huge: advised before its first write, so most likely one
 * huge page).  A chunk that turned dense has a huge page only once
 * khugepaged collapsed it, seconds to minutes later, and most never are:
 * in bench/soak, 0-8 of 100-190 dense chunks were huge pages (their first
 * page's flags in /proc/kpageflags), and their free pages were 70 of the
 * 75 MiB dirty at the median (0.23 of live), kept for as long as the chunk
 * stayed over a quarter used (docs/soak.md).  Without the thread (a
 * single-threaded program, by default) the dirty cap bounds the footprint
 * and dense chunks keep their pages as before: there they are mostly a
 * growing heap's that phases free and fill again (prog_python -m malloc,
 * one run each: 11.6k minor faults before, 26.5k when decay purged them). */
bool purge_dense_chunk(const arena_chunk_t *c)
{
	return cfg->fine_purge == TRI_AUTO && c->advised_huge && c->advice_ms != 0 &&
	       atomic_load_explicit(&bg_running, memory_order_relaxed);
}

/* Bytes of dirty free memory kept at most, given the active bytes (pages
 * of slabs and large blocks, chunks of huge blocks); SIZE_MAX: no cap
 * (dirty_cap:off, the background thread runs, or decay is off or
 * immediate). */
size_t purge_dirty_cap(size_t active)
{
	size_t room = cfg->purge == PURGE_OFF ? SIZE_MAX : limit_dirty_room(active); /* limit.c */
	if (!cfg->dirty_cap || !purge_decay_on() || cfg->decay_ms == 0 ||
	    atomic_load_explicit(&bg_running, memory_order_relaxed))
		return room;
	size_t cap = active / 100 * cfg->dirty_cap;
	size_t learned = atomic_load_explicit(&cap_learned, memory_order_relaxed);
	cap = cap > DIRTY_CAP_MIN ? cap : DIRTY_CAP_MIN;
	cap = cap > learned ? cap : learned;
	return cap < room ? cap : room;
}

/* What a pass over the cap purges down to: half of it, never below what
 * it learned.  A pass starts here: the regret since the last is learned. */
size_t purge_cap_pass(size_t cap)
{
	size_t regret = atomic_exchange_explicit(&cap_regret, 0, memory_order_relaxed);
	size_t learned = atomic_load_explicit(&cap_learned, memory_order_relaxed);
	learned = regret ? learned + regret + regret / 4 : learned / 2;
	atomic_store_explicit(&cap_learned, learned, memory_order_relaxed);
	size_t keep = cap / 2 > learned ? cap / 2 : learned;
	return keep <= cap || !limit_bytes() ? keep : limit_cap_keep(cap); /* limit.c */
}

/* Whether memory the cap purged at capped_ms (low 32 bits, 0: it did not)
 * and taken again at now counts as regret: within decay_ms. */
bool purge_cap_regretted(uint32_t capped_ms, uint64_t now)
{
	/* the stamp is now | 1: one ms ahead at most */
	return capped_ms && cfg->decay_ms > 0 &&
	       (uint32_t)((uint32_t)now + 1 - capped_ms) <= (uint64_t)cfg->decay_ms;
}

void purge_cap_regret(size_t bytes)
{
	atomic_fetch_add_explicit(&cap_regret, bytes, memory_order_relaxed);
}

/* The time stamp purge_cap_regretted reads: never 0. */
uint32_t purge_cap_stamp(uint64_t now)
{
	return (uint32_t)now | 1;
}

size_t purge_cap_learned(void)
{
	return atomic_load_explicit(&cap_learned, memory_order_relaxed);
}
