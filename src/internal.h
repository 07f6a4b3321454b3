/* libarena's internal functions, layer by layer (data structures: types.h). */
#ifndef ARENA_INTERNAL_H
#define ARENA_INTERNAL_H

#include "types.h"
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/uio.h> /* struct iovec: os_purge_many */

/* Everything declared here is defined inside libarena: hidden, so that an
 * access is one rip-relative load, not a load of its address from the GOT
 * first (the library is built -fvisibility=hidden, but that covers only
 * definitions: declarations of extern variables need this). */
#pragma GCC visibility push(hidden)

#define API __attribute__((visibility("default")))
/* A public name for an entry point, defined in the same file as it. */
#define ALIAS(name) __attribute__((alias(#name), visibility("default")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((size_t)(a) - 1))

static inline void errno_enomem(void) { errno = ENOMEM; }

/* ---- os.c: the only layer that talks to the kernel about memory -------- */
typedef struct os_counters {
	atomic_ulong mmap, munmap, mprotect, madvise, mremap;
	atomic_ulong process_madvise, batched_runs; /* os_purge_many */
	atomic_ulong purged_dontneed, purged_free; /* bytes */
	atomic_ulong advised_huge;                 /* chunks given MADV_HUGEPAGE */
} os_counters_t;
enum thp_sys { THP_SYS_NONE = 0, THP_SYS_NEVER, THP_SYS_MADVISE, THP_SYS_ALWAYS };
extern os_counters_t os_count;
extern uint8_t os_thp;
extern char os_thp_defrag[16];
extern bool os_has_madv_free;
extern bool os_has_dontunmap;
extern bool os_has_batch_purge; /* process_madvise on the calling process */
/* Kernel features to behave as if missing (ARENA_CONF's sim_* settings),
 * so that the fallbacks are tested on any machine. */
typedef struct os_sim {
	bool no_thp, no_madv_free, no_dontunmap, no_getrandom;
	bool no_batch_purge; /* not sim: ARENA_CONF=purge_batch, off by default */
	uint8_t thp; /* enum thp_sys + 1 to read instead of the sysfs file; 0: read it */
	uint8_t probe; /* enum sim_probe: what os_fault_probe answers instead of timing */
} os_sim_t;
enum sim_probe { SIM_PROBE_OFF = 0, SIM_PROBE_CHEAP, SIM_PROBE_COSTLY, SIM_PROBE_UNFORMED };
void os_init(os_sim_t sim);
/* What a first write costs in fresh memory (os_fault_probe): thread CPU
 * time, ns. */
typedef struct os_fault_cost {
	uint64_t huge_ns;  /* 2 MiB advised MADV_HUGEPAGE, one write per 4 KiB
			      (the mean of the last quarter of the runs) */
	uint64_t small_ns; /* 2 MiB of 4 KiB pages (MADV_NOHUGEPAGE): 512 times
			      the median of 64 first writes */
	bool formed;       /* the 2 MiB took one fault: a huge page formed */
} os_fault_cost_t;
bool os_fault_probe(os_fault_cost_t *out, unsigned nhuge);
uint64_t os_first_write_ns(void *p, bool huge);
uint64_t os_now_ms(void);
uint64_t os_random(void); /* a secret of this process's own */
void os_wait(atomic_uint *word, unsigned expect, uint64_t ms); /* a futex */
void os_wake(atomic_uint *word);
bool os_getenv(const char *name, char *value, size_t size);
uint8_t os_purge(void *addr, size_t size, uint8_t kind);
void os_purge_many(const struct iovec *r, unsigned n, uint8_t kind, uint8_t *state);
bool os_advise(void *addr, size_t size, uint8_t advice);
void *os_reserve(size_t size, size_t align);   /* PROT_NONE, aligned     */
bool os_commit(void *addr, size_t size);       /* make read-write        */
void *os_map_meta(size_t size);                /* zeroed, read-write     */
void *os_map_meta_aligned(size_t size, size_t align);
void os_advise_meta_huge(void *addr, size_t size);
bool os_collapse(void *addr, size_t size);
void os_unmap(void *addr, size_t size);
bool os_purge_dontneed(void *addr, size_t size); /* afterwards: zero      */
unsigned os_ncpus(void);
/* Whether a request (or an alignment) of size bytes may be tried: at most
 * RAM + swap (read at the first request above 1 GiB). */
bool os_block_fits(size_t size);
bool os_move_pages(void *src, void *dst, size_t size); /* src left zero */
void os_populate(void *addr, size_t size);
bool os_map_fixed(void *addr, size_t size);     /* fresh, replacing       */
bool os_is_mapped(void *addr, size_t size);     /* no hole (<= 2 MiB)     */

/* ---- out.c: messages on stderr without stdio or malloc ----------------- */
void out_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void out_vprintf(const char *fmt, va_list ap);
void misuse(const char *what, const void *ptr);
void misuse_in(const char *op, const char *what, const void *ptr);
void out_set_misuse(uint8_t action); /* enum misuse_action */
_Noreturn void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The locks of mutex_t (types.h).  With ARENA_DEBUG they keep the holder, so
 * that a function whose caller must hold a lock says so in code
 * (ARENA_ASSERT_LOCKED, at its start), and a thread that takes a lock it
 * holds already, or gives back one it does not hold, stops with a message
 * instead of hanging; without it they are pthread's calls alone.  The holder
 * is pthread_self(): in the child of fork it is the forking thread's still,
 * which gives back the locks that fork's prepare handler took. */
#ifdef ARENA_DEBUG
static inline bool mutex_held(const mutex_t *m)
{
	return __atomic_load_n(&m->owner, __ATOMIC_RELAXED) == (uintptr_t)pthread_self();
}
#define ARENA_ASSERT_LOCKED(m) ARENA_ASSERT(mutex_held(m))
#define ARENA_ASSERT_UNLOCKED(m) ARENA_ASSERT(!mutex_held(m))
#else
#define ARENA_ASSERT_LOCKED(m) ((void)sizeof(*(m)))
#define ARENA_ASSERT_UNLOCKED(m) ((void)sizeof(*(m)))
#endif

static inline void mutex_lock(mutex_t *m)
{
	ARENA_ASSERT_UNLOCKED(m);
	pthread_mutex_lock(&m->m);
#ifdef ARENA_DEBUG
	ARENA_ASSERT(__atomic_load_n(&m->owner, __ATOMIC_RELAXED) == 0);
	__atomic_store_n(&m->owner, (uintptr_t)pthread_self(), __ATOMIC_RELAXED);
#endif
}

/* Takes m if it is free (0), else returns pthread_mutex_trylock's error
 * at once. */
static inline int mutex_trylock(mutex_t *m)
{
	ARENA_ASSERT_UNLOCKED(m);
	int err = pthread_mutex_trylock(&m->m);
#ifdef ARENA_DEBUG
	if (err == 0)
		__atomic_store_n(&m->owner, (uintptr_t)pthread_self(), __ATOMIC_RELAXED);
#endif
	return err;
}

static inline void mutex_unlock(mutex_t *m)
{
	ARENA_ASSERT_LOCKED(m);
#ifdef ARENA_DEBUG
	__atomic_store_n(&m->owner, 0, __ATOMIC_RELAXED);
#endif
	pthread_mutex_unlock(&m->m);
}

/* ---- config.c ------------------------------------------------------------ */
/* The configuration: written once, by config_read at initialisation (before
 * any other thread can run libarena's code), read-only after. */
extern const config_t *const cfg;
void config_read(void);
#ifdef ARENA_UNIT
config_t *config_for_test(void); /* tests/unit/ only: the settings, writable */
#endif

/* ---- sizeclass.c ------------------------------------------------------- */
extern const size_t class_size[NCLASSES];
void sizeclass_init(void);

unsigned size_class_search(size_t size);

/* The header classes (sizeclass.c): 2^k + 16 for 2^k = 256 and 512 bytes
 * (HDR16_K_FIRST..), and for 2^k = 1..8 KiB (HDR_K_FIRST..HDR_K_LAST) the
 * largest multiple of 16 of which a 16-page slab holds one block fewer
 * than of 2^k: 1040, 2112, 4368 and 9360 bytes. */
#define HDR16_K_FIRST 8
#define HDR_K_FIRST 10
#define HDR_K_LAST 13
#define HDR_CLASS(k) ((16 * PAGE_SIZE / ((16 * PAGE_SIZE >> (k)) - 1)) & ~(size_t)15)
/* In 7168's place (sizeclass.c): the largest multiple of 16 of which a
 * 16-page slab holds nine blocks, one more than of 8 KiB (7280 bytes). */
#define SLAB9_CLASS ((16 * PAGE_SIZE / 9) & ~(size_t)15)
/* A sixteenth of a power of two away from it (sizeclass.c): 960 bytes in
 * the doubling's last step below 1 KiB, 8704 in the first above 8 KiB,
 * where blocks of 897-960 bytes took 1024 and of 8193-8704 took 9360. */
#define SUB1K_CLASS ((size_t)1024 - 1024 / 16)
#define OVER8K_CLASS ((size_t)8192 + 8192 / 16)

/* Class of a large request (SMALL_MAX < size <= LARGE_MAX), by arithmetic:
 * four classes per doubling.  With x = size - 1 in [2^k, 2^(k+1)) and e its
 * top four bits (8..15: the eighth of the doubling it falls in), the
 * doubling's four classes are e / 2 - 4 from its first.  Small requests
 * take the table below (size_bin_off), whose classes need no arithmetic. */
static inline __attribute__((always_inline)) unsigned size_class_large(size_t size)
{
	ARENA_ASSERT(size > SMALL_MAX && size <= LARGE_MAX);
	size_t x = size - 1;
	unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)x);
	unsigned e = (unsigned)(x >> (k - 3));
	return NSMALL + 4 * (k - 14) + (e >> 1) - 4;
}

/* Size class of a request of at most LARGE_MAX bytes. */
static inline unsigned size_class_calc(size_t size)
{
	return size <= SMALL_MAX ? size_class_search(size) : size_class_large(size);
}

/* A class's thread-cache bin is bin_off(class) = BIN_BYTES * (class + 1)
 * bytes into the cache (tcache_t.bins starts one bin in): the fast paths
 * carry that offset, never the class itself, so that no shift or add
 * stands between a table load and the bin. */
#define BIN_SHIFT 5
#define BIN_BYTES ((size_t)1 << BIN_SHIFT)
static inline size_t bin_off(unsigned sclass)
{
	ARENA_ASSERT(sclass < NCLASSES);
	return ((size_t)sclass + 1) << BIN_SHIFT;
}
static inline unsigned bin_class(size_t off)
{
	ARENA_ASSERT(off >= BIN_BYTES && off % BIN_BYTES == 0);
	return (unsigned)(off >> BIN_SHIFT) - 1;
}
_Static_assert(sizeof(tbin_t) == BIN_BYTES && offsetof(tcache_t, bins) == BIN_BYTES,
	       "bin_off(c) is the offset of tc.bins[c]");
/* With heap profiles on, slabs' page-table words carry bin_off(class) +
 * PROF_FREED_OFF (slab_entry): free's fast path then pushes onto
 * tc.freed[class] and checks against slab_checks' second copy (prof.c
 * fills it), with no instruction of its own (prof_cache.c). */
#define PROF_FREED_OFF ((size_t)NCACHED * BIN_BYTES)
_Static_assert(offsetof(tcache_t, freed) == BIN_BYTES + PROF_FREED_OFF,
	       "bin_off(c) + PROF_FREED_OFF is the offset of tc.freed[c]");

/* Requests up to SIZE_LUT_MAX bytes, every small one, take their bin
 * offset from a constant table, indexed by the size in 16-byte steps
 * (2 KiB): one load instead of arithmetic, valid before initialisation,
 * and any small class that is a multiple of 16 costs nothing.
 * sizeclass_init checks it against the class table. */
#define SIZE_LUT_MAX SMALL_MAX
extern const uint16_t size_bin_off[SIZE_LUT_MAX / 16 + 1];

static inline size_t size_bin_offset(size_t size)
{
	if (likely(size <= SIZE_LUT_MAX))
		return size_bin_off[(size + 15) >> 4];
	return bin_off(size_class_large(size));
}

static inline unsigned size_class(size_t size)
{
	return bin_class(size_bin_offset(size));
}

/* free()'s test that an offset x in a slab of a class is the start of one
 * of its blocks, in one multiply and one compare: x * magic mod 2^64 <
 * thresh.  With magic = ceil(2^64 / size), x * magic mod 2^64 < magic
 * exactly when size divides x, for x < 2^32 (Lemire, Kaser and Kurz,
 * "Faster remainder by direct computation", 2019); otherwise it is at
 * least magic (>= 2^50 here).  And for x = q * size it is q * err, with
 * err = size * magic - 2^64 (0 < err < size), so thresh = nblocks * err
 * also refuses q >= nblocks: the slab's tail past its last block.  A power
 * of two has err = 0; it takes magic = 2^64 / size + 1 instead, which
 * leaves x itself for block starts: thresh = nblocks * size.  Entry 0 has
 * thresh 0 (nothing passes): non-slab pages, and every page in debug mode.
 * sizeclass_verify() checks every offset of every class. */
typedef struct slab_check {
	uint64_t magic, thresh;
	/* 0, 0: a check nothing passes, PROF_SAMPLED_K bytes in (heap profiles:
	 * the words of pages where a sampled block lives point here) */
	uint64_t none[2];
} slab_check_t;
/* With heap profiles on, a slab page's word while a sampled block that
 * starts in the page lives: its bin offset (high half) + PROF_SAMPLED_K,
 * whose check is the entry's none (free's fast path refuses every block
 * of the page), the low half unchanged; free_other sends the page's other
 * blocks to prof_cache_free_near (prof_cache.c). */
#define PROF_SAMPLED_K ((size_t)16)
#define PROF_SAMPLED_BIT ((uint64_t)PROF_SAMPLED_K << 32)
_Static_assert(PROF_SAMPLED_K == offsetof(slab_check_t, none) && PROF_SAMPLED_K < BIN_BYTES,
	       "a tagged word's check is its entry's none");
_Static_assert(sizeof(slab_check_t) == BIN_BYTES, "slab checks indexed like bins");
bool sizeclass_verify(void);
/* The tables sizeclass_init computes, in one struct within one page: as
 * separate arrays they straddled a page boundary, and a fresh process's
 * first calloc of 1 GiB took a page fault more for them (test_pages wants
 * fewer than 10). */
typedef struct sizeclass_tables {
	/* entry c + 1 for class c; with heap profiles, the same again from
	 * PROF_FREED_OFF on (entry NCACHED + c + 1) */
	slab_check_t checks[NCACHED + NSMALL + 1];
	/* Added to the class's bin offset in slabs' page-table words
	 * (slab_entry): 0, or PROF_FREED_OFF with heap profiles (set by
	 * prof_init with the checks' second copy, before any slab is made). */
	uint32_t entry_off;
} sizeclass_tables_t;
_Static_assert(sizeof(sizeclass_tables_t) <= 4096, "aligned to 4 KiB, within a page");
extern sizeclass_tables_t sc_tables;
/* The slab geometry, apart: the checks' two copies fill most of a page
 * since the 56 small classes of issue 16 (58 now: 4,000 bytes).  Within
 * 512 bytes, so within one page as well. */
typedef struct sizeclass_geom {
	uint32_t div_magic[NSMALL];
	uint16_t nblocks[NSMALL];
	uint8_t slab_pages[NSMALL];
} sizeclass_geom_t;
_Static_assert(sizeof(sizeclass_geom_t) <= 512, "aligned to 512 B, within a page");
extern sizeclass_geom_t sc_geom;
#define slab_checks (sc_tables.checks)
#define class_div_magic (sc_geom.div_magic)
#define class_nblocks (sc_geom.nblocks)
#define class_slab_pages (sc_geom.slab_pages)

/* Index of the block at byte offset off of a slab (exact for every offset
 * inside a slab: checked in sizeclass_init). */
static inline unsigned slab_block_index(unsigned sclass, size_t off)
{
	ARENA_ASSERT(sclass < NSMALL && off < (size_t)class_slab_pages[sclass] << PAGE_SHIFT);
	return (unsigned)((off * class_div_magic[sclass]) >> 32);
}

/* ---- prof_dump.c: heap profiles' formats (docs/profiling.md) ------------- */
#define PROF_FRAMES 64     /* return addresses kept per sampled stack      */
/* A buffered writer on a file descriptor (fd -1: a string, cut at cap). */
typedef struct pwriter {
	int fd, err;
	char *buf;
	size_t cap, len;
} pwriter_t;
/* A protobuf message being built (profile.proto's messages are small). */
typedef struct pbuf {
	size_t len;
	bool overflow;
	uint8_t data[1024];
} pbuf_t;
double prof_log(double x);
double prof_exp(double x);
double prof_scale(size_t size, size_t mean);
size_t prof_interval_from(uint64_t random, size_t mean);
void pw_flush(pwriter_t *w);
void pw_bytes(pwriter_t *w, const void *p, size_t n);
void pw_str(pwriter_t *w, const char *s);
void pw_num(pwriter_t *w, uint64_t v, unsigned base, unsigned width);
void prof_heap_header(pwriter_t *w, const uint64_t totals[4], size_t mean);
void prof_heap_line(pwriter_t *w, uint64_t inuse, uint64_t allocs, size_t size,
		    const uintptr_t *pcs, unsigned depth);
void prof_heap_maps(pwriter_t *w);
void pb_varint(pbuf_t *b, uint64_t v);
void pb_uint(pbuf_t *b, unsigned field, uint64_t v);
void pb_packed(pbuf_t *b, unsigned field, const uint64_t *v, unsigned n);
void pb_embed(pbuf_t *b, unsigned field, const void *data, size_t n);
void pw_message(pwriter_t *w, unsigned field, const pbuf_t *m);
void pw_pstring(pwriter_t *w, const char *s, size_t n);

/* ---- prof_stack.c: heap profiles' stacks --------------------------------- */
unsigned prof_backtrace(uintptr_t *pcs, unsigned max);
unsigned prof_backtrace_tagged(uintptr_t *pcs, unsigned max, uint64_t *tag);
void prof_backtrace_tag(uint64_t tag);
void prof_stack_thread_exit(void);
void prof_stack_after_fork_child(void);
void prof_stack_init(uintptr_t lo, uintptr_t hi);

/* ---- prof.c: heap profiles' samples and dumps ---------------------------- */
/* prof_on: sampling is on (set once at initialisation). */
extern bool prof_on;
/* A counter per hash bucket of pages: non-zero when a sampled block may
 * start in a page that hashes there (frees look here before taking
 * prof.c's lock).  By page, not by block: frees of neighbouring blocks
 * read the same word, which stays in cache (by block, each free read a
 * random word of the 256 KiB table: bench/xmalloc took twice as long). */
#define PROF_FILTER_LOG 16
extern atomic_uint *prof_filter;
static inline atomic_uint *prof_filter_of(const void *p)
{
	return &prof_filter[(((uintptr_t)p >> PAGE_SHIFT) * 0x9e3779b97f4a7c15ULL) >>
			    (64 - PROF_FILTER_LOG)];
}
static inline bool prof_maybe_sampled(const void *p)
{
	return atomic_load_explicit(prof_filter_of(p), memory_order_acquire) != 0;
}
void prof_init(uintptr_t self_lo, uintptr_t self_hi);
size_t prof_draw(void);
void prof_sampled(void *p, size_t size, uint64_t *word);
bool prof_take(void);
void prof_record(void *p, size_t size, uint64_t *word, const uintptr_t *pcs, unsigned n,
		 uint64_t tag);
bool prof_block_maybe_sampled(const void *p);
bool prof_pause(void);
void prof_resume(bool was);
void prof_big(void *p, size_t size);
void prof_free(void *p);
void prof_free_page(void *p, uint64_t *word);
void prof_moved(void *old, void *new);
int prof_dump_file(const char *path);
void prof_lock(void);
void prof_unlock(void);
void prof_after_fork_child(void);

/* ---- purge.c: the purging policy (decisions; chunk.c and arena.c purge) --- */
bool purge_decay_on(void);
bool purge_expired(uint64_t dirty_ms, uint64_t now);
uint8_t purge_advice(void);      /* PURGE_DONTNEED or PURGE_FREE */
bool purge_at_free(void);
bool purge_fine_on(void);
bool purge_fine_chunk(const arena_chunk_t *c);
bool purge_dense_chunk(const arena_chunk_t *c);
bool purge_sweeps(void);
uint64_t purge_period_ms(void);
bool purge_sweep_due(uint64_t *next_ms, uint64_t now);
uint64_t purge_due_at(uint64_t dirty_ms);
long purge_huge_decay_ms(void);
bool purge_chunk_expired(uint64_t dirty_ms, uint64_t now, bool huge);
uint64_t purge_chunk_due_at(uint64_t dirty_ms, bool huge);
bool purge_chunk_at_free(bool huge, size_t n, size_t dirty_chunks);
bool purge_huge_held(void);
bool purge_chunk_warm(uint64_t purged_ms, uint64_t now);
bool purge_cache_gc_due(uint64_t last_ms, uint64_t now);
uint32_t purge_cache_unused(uint32_t low_then, uint32_t seen, uint64_t taken, uint32_t now);
size_t purge_cache_grow_share(unsigned ncaches, size_t most);
bool purge_cache_may_grow(size_t mine, size_t all, size_t bytes, size_t most);
void purge_set_dirty_hook(void (*hook)(void));
void purge_note_dirty(void);
void purge_set_background(bool running);
size_t purge_dirty_cap(size_t active);
size_t purge_cap_pass(size_t cap);
bool purge_cap_regretted(uint32_t capped_ms, uint64_t now);
void purge_cap_regret(size_t bytes);
uint32_t purge_cap_stamp(uint64_t now);
size_t purge_cap_learned(void);

/* ---- thp.c: the huge-page advice policy (decisions; the callers advise) -- */
/* An arena chunk with this many pages in use is dense: it is advised
 * MADV_HUGEPAGE (thp:auto), and khugepaged may then collapse it.  Three
 * quarters: a huge page then wastes at most a quarter of its 2 MiB. */
#define THP_DENSE_PAGES (CHUNK_PAGES * 3 / 4)
/* A dense chunk back down to this many pages in use is sparse again: its
 * huge-page advice is taken back and its free pages may be purged.  The
 * gap to THP_DENSE_PAGES keeps a chunk from flapping between the two. */
#define THP_SPARSE_PAGES (CHUNK_PAGES / 4)
bool thp_meta_huge(void);
bool thp_new_chunk_huge(size_t ndense, size_t nchunks, bool regrown, uint64_t now);
bool thp_times_first_writes(void);
void thp_chunk_first_write(bool huge, uint64_t ns, uint64_t now);
bool thp_turns_dense(const arena_chunk_t *c, uint64_t now);
bool thp_refill_collapse(const arena_chunk_t *c, size_t peak_chunks);
bool thp_dense_advised(void);
bool thp_turns_sparse(const arena_chunk_t *c, uint64_t now);
bool thp_sparse_by_use(const arena_chunk_t *c);
uint64_t thp_sparse_at(const arena_chunk_t *c);
uint8_t thp_huge_block_advice(bool whole_chunk, bool fresh);
/* The run-time decision (thp.c): what fresh memory of huge blocks gets.
 * Ordered: from THP_V_OFF on, no probe runs. */
enum thp_verdict {
	THP_V_UNPROBED = 0, /* no probe yet: huge pages, as THP_V_HUGE     */
	THP_V_HUGE,         /* a fresh huge page costs no more than 4 KiB ones */
	THP_V_SMALL,        /* it costs more: fresh chunks in 4 KiB pages   */
	THP_V_UNFORMED,     /* advised, no huge page formed: no advice      */
	THP_V_OFF,          /* the kernel has no THP (or never)             */
	THP_V_ALWAYS,       /* ARENA_CONF thp:always                        */
	THP_V_NEVER,        /* ARENA_CONF thp:never                         */
};
typedef struct thp_decision {
	const char *name;  /* "unprobed", "huge", "small", "unformed", "off", ... */
	uint64_t probes, huge_ns, small_ns; /* the last probe's figures */
	/* a growing heap's chunks born huge timed, their mean first write at
	 * the last (ns per 2 MiB), 512 4 KiB ones, chunks kept small by them */
	uint64_t heap_checks, heap_huge_ns, heap_small_ns, heap_kept_small;
} thp_decision_t;
/* A probe times as many huge pages as thp_probe_runs() gives for the
 * block's fresh whole chunks: an eighth of them, at least THP_PROBE_MIN
 * (or the block's own number, if fewer), at most THP_PROBE_PAGES
 * (os_fault_probe).  So its scratch memory, resident for the probe's
 * moment, is never more than the block it probes for, nor more than an
 * eighth of it past 64 MiB (it was as many as the block, up to 128 MiB,
 * from 128 MiB on). */
#define THP_PROBE_PAGES 64
#define THP_PROBE_MIN 4
unsigned thp_probe_runs(size_t nchunks);
uint8_t thp_verdict(void);
bool thp_probe_due(uint64_t now);
void thp_probe_result(const os_fault_cost_t *cost);
thp_decision_t thp_decision(void);

/* ---- region.c: the address space and its tables (caller holds the chunk lock) ---- */
uint32_t region_new_tag(void);
size_t region_desc_bytes(size_t nchunks);
bool region_commit_to(region_t *r, size_t end);
bool region_new(size_t min_chunks);
extern region_t regions[MAX_REGIONS];
/* The chunk lock: the regions' frontiers, commits and descriptors, and the
 * chunk layer's free runs (chunk.c takes it; kept here, where the region
 * functions that need it held can assert it). */
extern mutex_t chunk_mtx;
extern atomic_uint nregions;
/* Whether every region lies below 2^48: a block address then fits in 48
 * bits (remote.c's transfer batches pack one with a count). */
extern bool regions_below_2_48;
/* chunk_desc_of() (below) for the regions after the first. */
chunk_desc_t *chunk_desc_of_other(const void *p);

/* ---- chunk.c: runs of chunks ---------------------------------------------- */
void chunk_init(void);
/* What chunks taken out of the free ones held before (chunk.c, mark_used). */
typedef struct {
	bool warm;      /* the zero ones were all purged within PURGE_WARM_MS */
	bool regretted; /* the dirty cap purged one within decay_ms      */
} chunk_past_t;
void *chunk_alloc(size_t nchunks, size_t align, uint8_t kind, size_t size, bool *zero);
void *chunk_alloc_arena(bool *zero, bool *regretted);
bool chunk_collapse(void *base);
void *chunk_alloc_huge(size_t nchunks, size_t align, size_t size, bool *zero, bool *warm);
void *chunk_alloc_dirty(uint8_t kind);
void chunk_free(void *base, size_t nchunks);
void chunk_free_moved(void *base, size_t nchunks);
bool chunk_extend(void *base, size_t old_n, size_t new_n, size_t size);
void chunk_shrink(void *base, size_t old_n, size_t new_n, size_t size);
size_t chunk_purge_all(void);
uint64_t chunk_decay(void);
void chunk_trim_dirty(size_t keep_bytes);
size_t chunk_dirty_bytes(void);
size_t chunk_huge_bytes(void);
void chunk_stats(size_t *mapped, size_t *reserved, size_t *free_chunks, size_t *dirty,
		 size_t *lazy);
void chunk_lock_all(void);
void chunk_unlock_all(void);
/* Validators (ARENA_DEBUG builds, unit tests): true when consistent, else
 * false with what is wrong printed (out.c).  Caller holds the chunk lock. */
bool chunk_validate_runs(void);

/* The descriptor of the chunk holding p, or NULL when p is not in any region
 * of ours.  Never touches memory outside our own tables. */
static inline chunk_desc_t *chunk_desc_of(const void *p)
{
	/* Region 0 first, without the loop: it is all there is, mostly.  Its
	 * size is 0 until it exists. */
	size_t off = (size_t)((uintptr_t)p - (uintptr_t)regions[0].base);
	if (likely(off < regions[0].size))
		return &regions[0].desc[off >> CHUNK_SHIFT];
	return chunk_desc_of_other(p);
}

/* The page-table word for a page of a slab of sclass at base, of the arena
 * with that salt: the high half is bin_off(sclass) (the offset of its bin
 * and of its slab_checks entry), the low half minus base and salt, so that
 * the low half of word + p + salt is p's offset in its slab.  A thread of
 * another arena adds its own salt instead, and gets an offset at least one
 * salt step (1 MiB) away from every offset of the slab, which the check
 * refuses: free's fast path takes only its own arena's blocks, and the
 * others go home (tcache.c, "foreign blocks") instead of being handed out
 * again by the freeing thread, next to its owner's blocks (false sharing:
 * bench/cache_scratch). */
static inline uint64_t slab_entry(unsigned sclass, const void *base, uint32_t salt)
{
	/* with heap profiles, frees go to the freed lists (prof_cache.c) */
	uint64_t off = bin_off(sclass) + sc_tables.entry_off;
	return off << 32 | (uint32_t)(-(uintptr_t)base - salt);
}

/* The offset of p in its slab, from its page-table word and the salt of
 * the arena it is checked against (see slab_entry), passed by reference
 * so that x86 adds it straight from memory (this thread's cache).  In
 * assembly there: two 32-bit instructions, which clear the high half on
 * their own; gcc 12 adds a third to clear it again (a whole free takes 2
 * instructions more in C than with this). */
static inline uint64_t slab_entry_offset(uint64_t entry, const void *p, const uint32_t *salt)
{
#if defined(__x86_64__)
	uint64_t x;
	__asm__("leal (%1,%2), %k0\n\taddl %3, %k0" : "=&r"(x) : "r"(entry), "r"(p), "m"(*salt));
	return x;
#else
	return (uint32_t)((uint32_t)(entry + (uintptr_t)p) + *salt);
#endif
}

/* Sets the page-table words of the npages pages at base (ours). */
static inline void ptab_set(const void *base, size_t npages, uint64_t entry)
{
	chunk_desc_t *d = chunk_desc_of(base);
	ARENA_ASSERT(d && d->kind == CK_ARENA && ((uintptr_t)base & (PAGE_SIZE - 1)) == 0);
	const region_t *r = &regions[d->region];
	size_t first = (size_t)((const char *)base - r->base) >> PAGE_SHIFT;
	for (size_t i = first; i < first + npages; i++)
		__atomic_store_n(&r->ptab[i], entry, __ATOMIC_RELAXED);
}

static inline void *chunk_base_of(const void *p)
{
	return (void *)((uintptr_t)p & ~(uintptr_t)CHUNK_MASK);
}

/* An arena chunk's header does not sit at the chunk's first byte but
 * CHUNK_COLOURS lines further along from one chunk to the next (its colour:
 * the chunk's address mod CHUNK_COLOURS chunks, times 64 bytes; at most
 * 960 bytes, inside the header's two pages).  With every header at the
 * same offset, the fields read on every slow free (c->arena, the page map)
 * fell into one cache set in every chunk: the L1's set index is address
 * bits 6-11, and where a host backs a guest's huge pages contiguously the
 * L2 and L3 index bits up to 16 and beyond as well (docs/design.md, "Huge
 * pages and the program's own speed").  A shift, a mask and an add. */
static inline size_t chunk_colour(const void *base)
{
	return ((uintptr_t)base >> CHUNK_SHIFT) % CHUNK_COLOURS * CHUNK_COLOUR_BYTES;
}

/* The header of the arena chunk holding p. */
static inline arena_chunk_t *chunk_hdr_of(const void *p)
{
	char *base = chunk_base_of(p);
	return (arena_chunk_t *)(base + chunk_colour(base));
}

static inline void *chunk_desc_addr(const chunk_desc_t *d)
{
	const region_t *r = &regions[d->region];
	return r->base + ((size_t)(d - r->desc) << CHUNK_SHIFT);
}

/* ---- chunk_map.c: moves and THP advice of chunks ----------------------------- */
size_t chunk_move(void *src, void *dst, size_t n, size_t usable);
void chunk_advise(void *base, size_t n, uint8_t want);

/* ---- pagemap.c: free pages of an arena chunk --------------------------- */
void pagemap_init(arena_chunk_t *c, bool zero);
long pagemap_find(arena_chunk_t *c, size_t npages, size_t align_pages);
bool pagemap_range_free(const arena_chunk_t *c, size_t first, size_t npages);
long pagemap_find_dirty(const arena_chunk_t *c, size_t npages, size_t align_pages);
bool pagemap_run_zero(const arena_chunk_t *c, size_t first, size_t npages);
bool pagemap_take(arena_chunk_t *c, size_t first, size_t npages);
size_t pagemap_give(arena_chunk_t *c, size_t first, size_t npages);
size_t pagemap_purge(arena_chunk_t *c, uint8_t kind);
size_t pagemap_purge_free(arena_chunk_t *c);
void pagemap_count(const arena_chunk_t *c, size_t *dirty, size_t *lazy);
bool pagemap_validate_runs(const arena_chunk_t *c); /* a validator, as chunk_validate_runs */

/* Pages are counted from the chunk's first byte, not from its (coloured)
 * header: chunk_colour. */
static inline size_t page_index(const arena_chunk_t *c, const void *p)
{
	(void)c;
	return (size_t)((uintptr_t)p & CHUNK_MASK) >> PAGE_SHIFT;
}

static inline void *page_addr(arena_chunk_t *c, size_t idx)
{
	ARENA_ASSERT(idx < CHUNK_PAGES);
	return (char *)chunk_base_of(c) + (idx << PAGE_SHIFT);
}

/* ---- arena.c ------------------------------------------------------------ */
/* Pages of the large block (large.c) whose first page is page idx of c:
 * its class's up to CACHE_MAX (the thread caches hold blocks by class),
 * above it as many as its request took (the run's length, in c->ref). */
static inline size_t large_pages_of(const arena_chunk_t *c, size_t idx)
{
	/* its first page */
	ARENA_ASSERT(c->page[idx].kind == PG_LARGE && c->page[idx].head == idx);
	unsigned sclass = c->page[idx].sclass;
	return sclass < NCACHED ? class_size[sclass] >> PAGE_SHIFT : c->ref[idx].run_pages;
}
extern arena_t arenas[MAX_ARENAS];
/* index << ARENA_SALT_SHIFT: subtracted in the page-table words of the
 * arena's slabs, added back by free's fast path from the freeing thread's
 * cache (slab_entry), so that only a block of the thread's own arena
 * passes that path's check.  Computed, not stored: arenas_init writing it
 * into all 64 arenas touched 30 pages of them (a process's first calloc
 * of 1 GiB took 30 page faults instead of 9, test_pages). */
static inline uint32_t arena_salt(const arena_t *a)
{
	ARENA_ASSERT(a >= arenas && a < arenas + MAX_ARENAS);
	return (uint32_t)(a - arenas) << ARENA_SALT_SHIFT;
}
unsigned arenas_max(void);
extern atomic_ulong arena_born_huge, arena_born_regrown, arena_refilled_huge;
unsigned arenas_used(void);
void arenas_init(void);
arena_t *arena_pick(void);
void *arena_pages_alloc(arena_t *a, size_t npages, size_t align_pages,
			uint8_t kind, uint8_t sclass, bool *zero);
void *arena_pages_alloc_large(arena_t *a, size_t npages, size_t align_pages, uint8_t sclass,
			      bool *zero, arena_t **owner);
extern atomic_ulong arena_lent_pages;
void arena_pages_free(arena_chunk_t *c, size_t first, size_t npages);
uint64_t arena_sweep_all(void);
void arena_pages_grow(arena_chunk_t *c, size_t first, size_t npages);
size_t arena_chunk_purge(arena_chunk_t *c, uint8_t kind);
void arena_cap_chunks(void);
extern atomic_ulong arena_cap_purged;
void arena_lock_all(void);
void arena_unlock_all(void);
void arena_threads_after_fork(const arena_t *survivor);

static inline void arena_lock(arena_t *a) { mutex_lock(&a->lock); }
static inline void arena_unlock(arena_t *a) { mutex_unlock(&a->lock); }

/* ---- slab.c ---------------------------------------------------------------- */
unsigned slab_alloc_batch(arena_t *a, unsigned sclass, void **out, unsigned n, uint64_t *zero);
void slab_free_block(arena_chunk_t *c, slab_t *s, void *p);
bool slab_block_free(const slab_t *s, const void *p);
bool slab_validate_free_list(const slab_t *s); /* a validator, as chunk_validate_runs */
void slab_sweep(arena_t *a, uint64_t now);
void slab_release_all(arena_t *a);

/* ---- remote.c: blocks going back to their arena -------------------------- */
void arena_free_chain(arena_t *a, unsigned sclass, void *head, void *tail, unsigned n,
		      size_t bytes, bool own);
void *arena_take_batch(arena_t *a, unsigned sclass, unsigned max, unsigned *n);
void arena_drain_remote(arena_t *a);
void arena_drain_all(arena_t *a);
bool arena_drain_stale(arena_t *a);
size_t arena_purge_all(void);

/* Debug mode fills free bytes with JUNK (debug.c).  The words a free block
 * may hold that the program did not write are its first LINK_WORDS: the
 * cache link and the cache's double-free key (tcache.c). */
#define JUNK 0x5a
#define LINK_WORDS (2 * sizeof(void *))

/* A free block of size bytes going back from a cache to its slab or page
 * run, in debug mode: the cache's words in it are junk again, so that
 * debug.c's write-after-free check of a later, bigger block there does not
 * find them. */
static inline void junk_links(void *p, size_t size)
{
	memset(p, JUNK, size < LINK_WORDS ? size : LINK_WORDS);
}

/* ---- large.c --------------------------------------------------------------- */
extern atomic_ulong large_run_bytes;
void *large_alloc(arena_t *a, size_t size, size_t align, bool *zero, size_t *usable);
unsigned large_alloc_batch(arena_t *a, unsigned sclass, void **out, unsigned n);
void large_free(arena_chunk_t *c, size_t idx);
bool large_resize_in_place(arena_chunk_t *c, size_t idx, size_t size);

/* ---- huge.c ---------------------------------------------------------------- */
void *huge_alloc(size_t size, size_t align, bool *zero, bool probe);
void huge_free(chunk_desc_t *d, void *p);
bool huge_resize_in_place(chunk_desc_t *d, size_t size);
void *huge_move(chunk_desc_t *d, void *p, size_t size);
extern atomic_ulong huge_nmalloc, huge_nfree, huge_bytes;
extern atomic_ulong huge_peak_blocks, huge_peak_bytes;
extern atomic_ulong huge_nin_place, huge_nremap, huge_ncopy, huge_nsmall_chunks;


/* ---- tcache.c --------------------------------------------------------------- */
extern _Thread_local tcache_t tc __attribute__((tls_model("initial-exec")));
extern uintptr_t tcache_key;
arena_t *thread_arena(void);
void *tcache_alloc_slow(unsigned sclass);
void tcache_free_slow(void *p, unsigned sclass);
void count_alloc(unsigned sclass);
void count_free(unsigned sclass);

/* An increment of a counter this thread alone writes (statistics read it
 * from other threads, relaxed).  On x86-64 one `incq` on memory, outside
 * the C memory model (an aligned 8-byte add is never torn); elsewhere a
 * relaxed atomic store, which takes a load, an add and a store. */
uint64_t tcache_count(const tcache_t *t, unsigned sclass, bool is_free);
#if defined(__x86_64__)
#define counter_inc(c) __asm__ volatile("incq %0" : "+m"(*(c)))
#else
static inline void counter_inc(uint64_t *c)
{
	__atomic_store_n(c, *c + 1, __ATOMIC_RELAXED);
}
#endif

/* A cached block's first word links to the next block; its second holds
 * tcache_key once the block was freed into a cache (free's double-free
 * test), or zero_mark() when a refill put it there from fresh slab memory
 * that still reads zero past the two words (calloc skips its memset), or
 * 0.  Keeping that flag out of the link leaves malloc's pop a plain load. */
static inline void *link_next(const void *block)
{
	return *(void *const *)block;
}

static inline uintptr_t zero_mark(void)
{
	return tcache_key ^ 2; /* the key is odd: the mark is neither it nor 0 */
}

/* This thread's bin at byte offset off (bin_off(class)). */
static inline tbin_t *tc_bin_at(size_t off)
{
	return (tbin_t *)((char *)&tc + off);
}

/* Lists hold blocks only while the cache is live, so pop and push count in
 * the cache itself.  A pop takes from avail, which is not empty. */
static inline void *tcache_pop(tbin_t *b)
{
	ARENA_ASSERT(b->avail != NULL);
	void **p = b->avail;
	b->avail = p[0];
	p[1] = NULL; /* the key: a later free must not look like a double one */
	b->room++;
	counter_inc(&b->nmalloc);
	return p;
}

/* avail ran dry: the blocks freed since (head) become it. */
static inline void tcache_take_freed(tbin_t *b)
{
	b->avail = b->head;
	b->head = NULL;
}

/* tcache_take_freed, head not empty, and one block popped. */
static inline void *tcache_pop_freed(tbin_t *b)
{
	tcache_take_freed(b);
	return tcache_pop(b);
}

/* Pushes block onto b's freed blocks (head), whose room the caller has
 * taken. */
static inline void tcache_push(tbin_t *b, void *block)
{
	void **p = block;
	p[1] = (void *)tcache_key;
	p[0] = b->head;
	b->head = p;
}

/* tcache_pop for calloc, of an avail list that is not empty: *zero tells
 * whether the block is known to read zero (its zero mark: fresh slab
 * memory), its link word then cleared (the pop clears the mark). */
static inline void *tcache_pop_known_zero(tbin_t *b, bool *zero)
{
	void **p = b->avail;
	*zero = (uintptr_t)p[1] == zero_mark();
	tcache_pop(b);
	if (*zero)
		p[0] = NULL;
	return p;
}

/* free of a valid small block, given its class's bin offset: a push,
 * unless the block carries the key (maybe freed already) or the list is
 * full (room was 0): false then, and the caller takes tcache_free_slow,
 * which gives the place back. */
static inline bool tcache_push_at(void *p, size_t off)
{
	tbin_t *b = tc_bin_at(off);
	if (likely(((uintptr_t *)p)[1] != tcache_key) && likely(--b->room >= 0)) {
		tcache_push(b, p);
		return true;
	}
	return false;
}
void tcache_flush_bin(tcache_t *t, unsigned sclass, unsigned keep);
bool tcache_block_freed(void *p, unsigned sclass);
/* For prof_cache.c, the heap profiles' paths above this layer: */
void *tcache_refill(unsigned sclass, unsigned want, unsigned chain, unsigned *got);
void tcache_grow(unsigned sclass);
void tcache_note_flush(unsigned sclass);
uint32_t tcache_first_max(unsigned sclass);
void tcache_back_to_first(unsigned sclass);
void tcache_give_back(tcache_t *t, tbin_t *l, unsigned sclass, unsigned n);
bool tcache_free_double(void *p, unsigned sclass);
bool tcache_free_elsewhere(void *p, unsigned sclass);
void tcache_free_foreign(void *p, unsigned sclass);
void tcache_foreign_flush(tcache_t *t, unsigned sclass);
/* The longest chain of foreign blocks (tcache.c): remote.c's transfer
 * batches hold at most 64 blocks. */
#define FOREIGN_MAX 64u

/* Adds p, a block of another arena, to t's foreign blocks of sclass, and
 * sends them home when there are enough (t's cache is live). */
static inline void foreign_push(tcache_t *t, fbin_t *f, void *p)
{
	void **q = p;
	q[1] = (void *)tcache_key;
	q[0] = f->head;
	f->head = q;
	counter_inc(&f->nfree);
	if (++f->n >= f->max)
		tcache_foreign_flush(t, (unsigned)(f - t->foreign));
}

/* t's foreign blocks of the class whose bin is at offset off (with heap
 * profiles, off may be a freed list's: the second half of t->foreign). */
static inline fbin_t *foreign_at(tcache_t *t, size_t off)
{
	ARENA_ASSERT(off >= BIN_BYTES && off <= (size_t)2 * NCACHED * BIN_BYTES);
	return (fbin_t *)((char *)t->foreign + off - BIN_BYTES);
}
_Static_assert(sizeof(fbin_t) == BIN_BYTES, "foreign bins at bin offsets");
void tcache_init_key(void);
void tcache_enable(void);
void tcache_lock_list(void);
void tcache_unlock_list(void);
void tcache_after_fork_child(void);
void tcache_sum(uint64_t *nmalloc, uint64_t *nfree, uint64_t *cached, unsigned *nthreads);
unsigned tcache_nlive(void);
void tcache_set_exit_hook(void (*hook)(unsigned nlive_left));
uint64_t tcache_gc_bytes(void);

/* ---- prof_cache.c: the thread caches with heap profiles on ------------------- */
void *prof_cache_alloc(unsigned sclass);
void *prof_cache_miss(size_t off);
void prof_cache_free(void *p, unsigned sclass);
void prof_cache_free_full(void *p, unsigned sclass);
bool prof_cache_free_near(void *p, uint64_t e);

/* ---- background.c: purging driven from above (trim, background thread) ------ */
size_t bg_purge_now(void);
void bg_start(void);
void bg_after_fork_child(void);
/* The background thread as statistics show it. */
typedef struct bg_stats {
	bool running;
	uint64_t wakeups;  /* times its thread woke (each wait that returned) */
	uint64_t passes;   /* decay steps and sweeps it ran                   */
} bg_stats_t;
bg_stats_t bg_stats(void);

/* ---- stats.c ------------------------------------------------------------------ */

/* ---- alloc.c: the plain allocator, initialisation, fork ------------------------ */
extern atomic_int init_done;
/* How the entry points behave (api_mode): set once at initialisation. */
enum api_mode { MODE_UNSET = 0, MODE_PLAIN, MODE_DEBUG, MODE_PROF /* plain, heap profiles on */ };
extern uint8_t api_mode;
bool init_slow(void);
static inline bool ensure_init(void)
{
	return likely(atomic_load_explicit(&init_done, memory_order_acquire)) || init_slow();
}

enum block_kind { BLK_BAD, BLK_SMALL, BLK_LARGE, BLK_HUGE };

typedef struct block {
	uint8_t kind;
	uint8_t sclass;        /* small, large */
	size_t page;           /* small, large: page index in the chunk */
	arena_chunk_t *chunk;  /* small, large */
	chunk_desc_t *desc;
	const char *error;     /* BLK_BAD: what is wrong with the pointer */
} block_t;

/* What p is, checked: ours, the start of a live block (as far as can be told
 * without walking the thread caches).  Never reads memory outside our own
 * tables and headers. */
static inline block_t block_of(void *p)
{
	block_t b = { .kind = BLK_BAD, .desc = chunk_desc_of(p) };
	if (unlikely(!b.desc)) {
		b.error = "invalid free (pointer not allocated by libarena)";
		return b;
	}
	if (likely(b.desc->kind == CK_ARENA)) {
		arena_chunk_t *c = b.chunk = chunk_hdr_of(p);
		size_t idx = b.page = page_index(c, p);
		page_info_t pi = c->page[idx];
		b.sclass = pi.sclass;
		if (likely(pi.kind == PG_SLAB)) {
			/* blocks start at the slab's first page: pi.head */
			size_t off = (size_t)((char *)p - (char *)page_addr(c, pi.head));
			unsigned i = slab_block_index(pi.sclass, off);
			/* past the last block is the slab's tail, not a block */
			if (likely(i * class_size[pi.sclass] == off && i < class_nblocks[pi.sclass]))
				b.kind = BLK_SMALL;
			else
				b.error = "invalid free of an interior pointer";
		} else if (pi.kind == PG_LARGE) {
			if (p == page_addr(c, pi.head))
				b.kind = BLK_LARGE, b.page = pi.head;
			else
				b.error = "invalid free of an interior pointer";
		} else {
			b.error = pi.kind == PG_FREE ? "double free or invalid free (free page)"
						     : "invalid free (allocator metadata)";
		}
		return b;
	}
	if (b.desc->kind == CK_HUGE && p == chunk_desc_addr(b.desc))
		b.kind = BLK_HUGE;
	else if (b.desc->kind == CK_HUGE || b.desc->kind == CK_HUGE_BODY)
		b.error = "invalid free of an interior pointer";
	else
		b.error = "double free or invalid free (free chunk)";
	return b;
}

static inline size_t block_usable(const block_t *b)
{
	if (b->kind == BLK_HUGE)
		return b->desc->size;
	if (b->kind == BLK_LARGE)
		return large_pages_of(b->chunk, b->page) << PAGE_SHIFT;
	return class_size[b->sclass];
}

void block_free(void *p, const block_t *b);
bool block_resize_in_place(const block_t *b, size_t size);
void *alloc_big(size_t size, size_t align, bool zero);

/* free of a valid block of a cached class, given its bin offset: a push
 * onto this thread's list, else the slow path (out of line: the fast
 * paths stay leaf functions). */
void free_cached_slow(void *p, unsigned index);
static inline void free_cached_at(void *p, size_t off)
{
	if (likely(tcache_push_at(p, off)))
		return;
	/* the class, not off: free's fast path then keeps its registers */
	free_cached_slow(p, bin_class(off));
}

/* Bytes calloc did not have to clear: blocks known to read zero. */
extern atomic_ulong alloc_memset_skipped;
void *plain_aligned(size_t align, size_t size);
void plain_free(void *p);
void *plain_malloc(size_t size);
size_t plain_usable(void *p, const char **error);
extern const char plain_freed_block[]; /* plain_usable's error for a block found free */

/* The thread cache's slow path (a refill), once the allocator is
 * initialised: an empty cache is also what every thread has before
 * initialisation (and in debug mode), so this is where it happens. */
static inline void *alloc_cached_slow(unsigned sclass)
{
	if (!ensure_init())
		return NULL;
	return unlikely(prof_on) ? prof_cache_alloc(sclass) : tcache_alloc_slow(sclass);
}

/* malloc of a cached class, given its bin offset: a pop from this
 * thread's lists, else the slow path. */
static inline void *alloc_cached_at(size_t off)
{
	tbin_t *b = tc_bin_at(off);
	if (likely(b->avail != NULL))
		return tcache_pop(b);
	if (likely(b->head != NULL))
		return tcache_pop_freed(b);
	return alloc_cached_slow(bin_class(off));
}

/* malloc without debug mode: a cached class from this thread's cache, the
 * rest from alloc_big. */
static inline void *malloc_plain(size_t size)
{
	if (likely(size <= CACHE_MAX))
		return alloc_cached_at(size_bin_offset(size));
	return alloc_big(size, MIN_ALIGN, false);
}

/* calloc's clearing of n bytes at p: a memset, unless the lower layers
 * said the block is known to read zero (fresh or purged pages). */
static inline void calloc_clear(void *p, size_t n, bool known_zero)
{
	if (known_zero)
		atomic_fetch_add_explicit(&alloc_memset_skipped, n, memory_order_relaxed);
	else
		memset(p, 0, n);
}

/* calloc of size bytes (<= SMALL_MAX): a block known to be zero needs
 * only its first two words cleared, and the cache did that. */
static inline void *calloc_small(size_t size)
{
	unsigned sclass = size_class(size);
	tbin_t *b = &tc.bins[sclass];
	bool known_zero = false;
	/* avail ran dry: head moves over here, so that the blocks of a refill
	 * (tcache.c, refill) are popped with their zero marks read */
	if (unlikely(b->avail == NULL))
		tcache_take_freed(b);
	void *p = likely(b->avail != NULL) ? tcache_pop_known_zero(b, &known_zero)
					   : alloc_cached_slow(sclass);
	if (p)
		calloc_clear(p, known_zero ? (size > LINK_WORDS ? size - LINK_WORDS : 0) : size, known_zero);
	return p;
}

/* ---- debug.c: ARENA_CONF=debug:true --------------------------------------------- */
void *debug_malloc(size_t size);
void *debug_aligned(size_t align, size_t size);
void *debug_calloc(size_t total);
void *debug_realloc(void *p, size_t size);
void debug_free(void *p, const char *op);
void debug_free_sized(void *p, size_t align, size_t size);
size_t debug_usable(void *p);

#pragma GCC visibility pop
#endif /* ARENA_INTERNAL_H */
