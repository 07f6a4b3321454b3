/* libarena's functions, layer by layer (data structures: types.h). */
#ifndef ARENA_INTERNAL_H
#define ARENA_INTERNAL_H

#include "types.h"
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/uio.h> /* struct iovec: os_purge_many */

/* Hidden: an access is one rip-relative load, not one through the GOT
 * (-fvisibility=hidden covers only definitions). */
#pragma GCC visibility push(hidden)

#define API __attribute__((visibility("default")))
#define ALIAS(name) __attribute__((alias(#name), visibility("default")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((size_t)(a) - 1))

static inline void errno_enomem(void) { errno = ENOMEM; }

/* The bits set in x, without libgcc's call (__builtin_popcountll is one
 * where the baseline x86-64 the library is built for has no popcnt). */
static inline unsigned ones64(uint64_t x)
{
	x -= x >> 1 & 0x5555555555555555ULL;
	x = (x & 0x3333333333333333ULL) + (x >> 2 & 0x3333333333333333ULL);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	return (unsigned)((x * 0x0101010101010101ULL) >> 56);
}

/* ---- os.c: the only layer that talks to the kernel about memory */
typedef struct os_counters {
	atomic_ulong mmap, munmap, mprotect, madvise, mremap;
	atomic_ulong process_madvise, batched_runs; /* os_purge_many */
	atomic_ulong purged_dontneed, purged_free; /* bytes */
	atomic_ulong advised_huge;                 /* chunks given MADV_HUGEPAGE */
} os_counters_t;
enum thp_sys { THP_SYS_NONE = 0, THP_SYS_NEVER, THP_SYS_MADVISE, THP_SYS_ALWAYS };
extern os_counters_t os_count;
extern uint8_t os_thp;
/* Whether the THP mode makes huge pages of memory advised MADV_HUGEPAGE. */
static inline bool os_thp_usable(void)
{
	return os_thp == THP_SYS_MADVISE || os_thp == THP_SYS_ALWAYS;
}
extern char os_thp_defrag[16];
extern bool os_has_madv_free;
extern bool os_has_dontunmap;
extern bool os_has_batch_purge;
extern bool os_has_guard; /* MADV_GUARD_INSTALL (Linux 6.13) */
extern bool os_guard_prot; /* else PROT_NONE (secure mode) */
/* Kernel features to behave as if missing (sim_* settings). */
typedef struct os_sim {
	bool no_thp, no_madv_free, no_dontunmap, no_getrandom, no_guard, no_scan;
	bool no_batch_purge; /* not sim: ARENA_CONF=purge_batch */
	bool guard_prot;     /* not sim: secure mode's PROT_NONE guards */
	uint8_t thp; /* enum thp_sys + 1 instead of the sysfs file; 0: read it */
	uint8_t probe; /* enum sim_probe: os_fault_probe's answer */
} os_sim_t;
enum sim_probe { SIM_PROBE_OFF = 0, SIM_PROBE_CHEAP, SIM_PROBE_COSTLY, SIM_PROBE_UNFORMED };
void os_init(os_sim_t sim);
/* A first write's cost in fresh memory: thread CPU time, ns. */
typedef struct os_fault_cost {
	uint64_t huge_ns;  /* 2 MiB advised huge, a write per 4 KiB */
	uint64_t small_ns; /* 512 times the median 4 KiB first write */
	bool formed;       /* the 2 MiB took one fault: a huge page */
} os_fault_cost_t;
bool os_fault_probe(os_fault_cost_t *out, unsigned nhuge);
uint64_t os_first_write_ns(void *p, bool huge);
uint64_t os_now_ms(void);
uint64_t os_thread_cpu_ns(void);
uint64_t os_random(void); /* a secret of this process's own */
void os_wait(atomic_uint *word, unsigned expect, uint64_t ms); /* a futex */
void os_wake(atomic_uint *word);
bool os_getenv(const char *name, char *value, size_t size);
uint8_t os_purge(void *addr, size_t size, uint8_t kind);
void os_purge_many(const struct iovec *r, unsigned n, uint8_t kind, uint8_t *state);
bool os_advise(void *addr, size_t size, uint8_t advice);
void *os_reserve(size_t size, size_t align);   /* PROT_NONE, aligned */
bool os_commit(void *addr, size_t size);       /* make read-write */
void *os_map_meta(size_t size);                /* zeroed, read-write */
void *os_map_meta_aligned(size_t size, size_t align);
void os_advise_meta_huge(void *addr, size_t size);
bool os_collapse(void *addr, size_t size);
void os_unmap(void *addr, size_t size);
bool os_purge_dontneed(void *addr, size_t size); /* afterwards: zero */
void os_split_huge(void *page);
/* os_guard's answer: none, MADV_GUARD_INSTALL's, or PROT_NONE */
enum guard_kind { GUARD_NONE = 0, GUARD_KERNEL, GUARD_PROT };
uint8_t os_guard(void *addr, size_t size);
void os_unguard(void *addr, size_t size, uint8_t kind);
unsigned os_ncpus(void);
/* Whether a request (or alignment) may be tried: at most RAM + swap. */
bool os_block_fits(size_t size);
bool os_move_pages(void *src, void *dst, size_t size); /* src left zero */
void os_populate(void *addr, size_t size);
bool os_map_fixed(void *addr, size_t size);     /* fresh, replacing */
bool os_is_mapped(void *addr, size_t size);     /* no hole (<= 2 MiB) */
/* Resident runs of pages as the kernel counts them (statistics only): the
 * layout of PAGEMAP_SCAN's struct page_region; huge: mapped by a huge page. */
typedef struct os_run {
	uint64_t start, end, flags;
} os_run_t;
#define OS_RUN_HUGE ((uint64_t)1 << 6)
long os_resident_runs(int *fd, uintptr_t from, uintptr_t to, os_run_t *runs, size_t max,
		      uintptr_t *next);

/* ---- out.c: messages on stderr without stdio or malloc */
void out_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void out_vprintf(const char *fmt, va_list ap);
void out_misuse(const char *what, const void *ptr);
void out_misuse_in(const char *op, const char *what, const void *ptr);
void out_set_misuse(uint8_t action); /* enum misuse_action */
_Noreturn void out_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

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

/* A spin-wait's hint: the core gives its pipeline to its sibling thread. */
static inline void cpu_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("isb" ::: "memory");
#endif
}

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

/* ---- config.c */
/* Written once at initialisation; read-only after. */
extern const config_t *const cfg;
void config_read(void);
#ifdef ARENA_UNIT
config_t *config_for_test(void); /* tests/unit/ only: writable settings */
#endif

/* ---- sizeclass.c */
extern const size_t class_size[NCLASSES];
void sizeclass_init(void);

unsigned sizeclass_search(size_t size);

/* The header classes: 2^k + 16 for 256 and 512, and from 1 to 8 KiB the
 * largest multiple of 16 of which a 16-page slab holds one block fewer
 * than of 2^k: 1040, 2112, 4368, 9360. */
#define HDR16_K_FIRST 8
#define HDR_K_FIRST 10
#define HDR_K_LAST 13
#define HDR_CLASS(k) ((16 * PAGE_SIZE / ((16 * PAGE_SIZE >> (k)) - 1)) & ~(size_t)15)
/* 7168's place: a 16-page slab holds nine (7280). */
#define SLAB9_CLASS ((16 * PAGE_SIZE / 9) & ~(size_t)15)
/* A sixteenth off 1 KiB and 8 KiB: 960 and 8704. */
#define SUB1K_CLASS ((size_t)1024 - 1024 / 16)
#define OVER8K_CLASS ((size_t)8192 + 8192 / 16)

/* Class of a large request: four per doubling.  With x = size - 1 in
 * [2^k, 2^(k+1)) and e its top four bits, e / 2 - 4 from the first. */
static inline __attribute__((always_inline)) unsigned size_class_large(size_t size)
{
	ARENA_ASSERT(size > SMALL_MAX && size <= LARGE_MAX);
	size_t x = size - 1;
	unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)x);
	unsigned e = (unsigned)(x >> (k - 3));
	return NSMALL + 4 * (k - 14) + (e >> 1) - 4;
}

static inline unsigned size_class_calc(size_t size)
{
	return size <= SMALL_MAX ? sizeclass_search(size) : size_class_large(size);
}

/* Class c's bin is BIN_BYTES * (c + 1) bytes into tc: the fast paths
 * carry that offset, so nothing stands between a table load and the bin. */
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
_Static_assert(offsetof(tcache_t, salt) == 0, "slab_entry_offset_tc reads the salt at tc's start");
_Static_assert(sizeof(tbin_t) == BIN_BYTES && offsetof(tcache_t, bins) == BIN_BYTES,
	       "bin_off(c) is the offset of tc.bins[c]");
/* With heap profiles, slab words carry bin_off + PROF_FREED_OFF: free's
 * fast path pushes onto tc.freed[class] and checks slab_checks' copy. */
#define PROF_FREED_OFF ((size_t)NCACHED * BIN_BYTES)
_Static_assert(offsetof(tcache_t, freed) == BIN_BYTES + PROF_FREED_OFF,
	       "bin_off(c) + PROF_FREED_OFF is the offset of tc.freed[c]");

/* Small requests' bin offsets from a table by 16-byte steps: one load,
 * valid before initialisation (checked by sizeclass_init). */
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

/* free's test that offset x in a slab is a block start: x * magic mod 2^64
 * < thresh.  With magic = ceil(2^64 / size), x * magic mod 2^64 < magic
 * exactly when size divides x, for x < 2^32 (Lemire, Kaser and Kurz,
 * "Faster remainder by direct computation"); for x = q * size it is
 * q * err, err = size * magic - 2^64, so thresh = nblocks * err refuses
 * the tail too.  A power of two (err 0) takes magic + 1 and thresh =
 * nblocks * size.  Entry 0 passes nothing (non-slab pages; debug mode).
 * sizeclass_verify checks every offset. */
typedef struct slab_check {
	uint64_t magic, thresh;
	/* passes nothing: tagged words' check */
	uint64_t none[2];
} slab_check_t;
/* With heap profiles, a slab page's word while a sampled block starting
 * there lives: + PROF_SAMPLED_K, whose check passes nothing, so free_other
 * sends the page's blocks to prof_cache_free_near. */
#define PROF_SAMPLED_K ((size_t)16)
#define PROF_SAMPLED_BIT ((uint64_t)PROF_SAMPLED_K << 32)
_Static_assert(PROF_SAMPLED_K == offsetof(slab_check_t, none) && PROF_SAMPLED_K < BIN_BYTES,
	       "a tagged word's check is its entry's none");
_Static_assert(sizeof(slab_check_t) == BIN_BYTES, "slab checks indexed like bins");
bool sizeclass_verify(void);
/* sizeclass_init's tables within one page (tests/test_pages). */
typedef struct sizeclass_tables {
	/* entry c + 1: class c; with heap profiles again from PROF_FREED_OFF */
	slab_check_t checks[NCACHED + NSMALL + 1];
	/* slab_entry's addend: 0, or PROF_FREED_OFF */
	uint32_t entry_off;
} sizeclass_tables_t;
_Static_assert(sizeof(sizeclass_tables_t) <= 4096, "aligned to 4 KiB, within a page");
extern sizeclass_tables_t sc_tables;
/* The slab geometry, within 512 bytes. */
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

/* The block at offset off of a slab (exact: sizeclass_init). */
static inline unsigned slab_block_index(unsigned sclass, size_t off)
{
	ARENA_ASSERT(sclass < NSMALL && off < (size_t)class_slab_pages[sclass] << PAGE_SHIFT);
	return (unsigned)((off * class_div_magic[sclass]) >> 32);
}

/* ---- prof_dump.c: heap profiles' formats (docs/profiling.md) */
#define PROF_FRAMES 64     /* return addresses per sampled stack */
/* A buffered writer on a descriptor (fd -1: a string, cut at cap). */
typedef struct pwriter {
	int fd, err;
	char *buf;
	size_t cap, len;
} pwriter_t;
/* A protobuf message being built. */
typedef struct pbuf {
	size_t len;
	bool overflow;
	uint8_t data[1024];
} pbuf_t;
double prof_dump_log(double x);
double prof_dump_exp(double x);
double prof_dump_scale(size_t size, size_t mean);
size_t prof_dump_interval(uint64_t random, size_t mean);
void prof_dump_flush(pwriter_t *w);
void prof_dump_bytes(pwriter_t *w, const void *p, size_t n);
void prof_dump_str(pwriter_t *w, const char *s);
void prof_dump_num(pwriter_t *w, uint64_t v, unsigned base, unsigned width);
void prof_dump_heap_header(pwriter_t *w, const uint64_t totals[4], size_t mean);
void prof_dump_heap_line(pwriter_t *w, uint64_t inuse, uint64_t allocs, size_t size,
			 const uintptr_t *pcs, unsigned depth);
void prof_dump_heap_maps(pwriter_t *w);
void prof_dump_pb_varint(pbuf_t *b, uint64_t v);
void prof_dump_pb_uint(pbuf_t *b, unsigned field, uint64_t v);
void prof_dump_pb_packed(pbuf_t *b, unsigned field, const uint64_t *v, unsigned n);
void prof_dump_pb_embed(pbuf_t *b, unsigned field, const void *data, size_t n);
void prof_dump_message(pwriter_t *w, unsigned field, const pbuf_t *m);
void prof_dump_pstring(pwriter_t *w, const char *s, size_t n);

/* ---- prof_stack.c: heap profiles' stacks */
unsigned prof_stack_backtrace(uintptr_t *pcs, unsigned max);
unsigned prof_stack_backtrace_tagged(uintptr_t *pcs, unsigned max, uint64_t *tag);
void prof_stack_backtrace_tag(uint64_t tag);
void prof_stack_thread_exit(void);
void prof_stack_after_fork_child(void);
void prof_stack_init(uintptr_t lo, uintptr_t hi);

/* ---- prof.c: heap profiles' samples and dumps */
/* sampling is on (set at initialisation) */
extern bool prof_on;
/* Per hash bucket of pages: non-zero when a sampled block may start in a
 * page hashing there (frees look before taking prof.c's lock).  By page:
 * neighbouring blocks' frees read one cached word. */
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
int prof_save(const char *path);
void prof_lock(void);
void prof_unlock(void);
void prof_after_fork_child(void);

/* ---- purge.c: the purging policy (decisions; chunk.c and arena.c purge) */
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
bool purge_chunk_at_free(bool huge);
bool purge_huge_held(void);
/* A peak over the last horizon (purge.c; its owner keeps it under its lock). */
typedef struct purge_horizon {
	size_t cur, prev;  /* peaks (or counts) of this window and the one before */
	uint64_t roll_ms;  /* when this window ends */
} purge_horizon_t;
size_t purge_horizon_peak(purge_horizon_t *h, size_t value, uint64_t now);
size_t purge_horizon_add(purge_horizon_t *h, size_t n, uint64_t now);
uint64_t purge_horizon_next(const purge_horizon_t *h);
bool purge_chunk_warm(uint64_t purged_ms, uint64_t now);
bool purge_huge_tail(void);
bool purge_whole_only(const arena_chunk_t *c);
bool purge_cache_gc_due(uint64_t last_ms, uint64_t now);
uint32_t purge_cache_unused(uint32_t low_then, uint32_t seen, uint64_t taken, uint32_t now);
size_t purge_cache_grow_share(unsigned ncaches, size_t most);
bool purge_cache_may_grow(size_t mine, size_t all, size_t bytes, size_t most);
void purge_set_dirty_hook(void (*hook)(void), void (*due)(void));
void purge_note_dirty(void);
void purge_note_due(void);
void purge_set_background(bool running);
bool purge_deferred(void);
size_t purge_dirty_cap(size_t active);
size_t purge_cap_pass(size_t cap);
bool purge_cap_regretted(uint32_t capped_ms, uint64_t now);
void purge_cap_regret(size_t bytes);
uint32_t purge_cap_stamp(uint64_t now);
size_t purge_cap_learned(void);

/* ---- thp.c: the huge-page advice policy (decisions; the callers advise) -- */
/* Pages in use of a dense chunk, advised huge (thp:auto): a huge page
 * wastes at most a quarter. */
#define THP_DENSE_PAGES (CHUNK_PAGES * 3 / 4)
/* A dense chunk down to this is sparse again (advice taken back, free
 * pages purgeable); the gap stops flapping. */
#define THP_SPARSE_PAGES (CHUNK_PAGES / 4)
bool thp_meta_huge(void);
bool thp_new_chunk_huge(size_t ndense, size_t nchunks, bool regrown, uint64_t now);
bool thp_times_first_writes(void);
void thp_chunk_first_write(bool huge, uint64_t ns, uint64_t now);
bool thp_turns_dense(const arena_chunk_t *c, uint64_t now);
bool thp_guard_ok(const arena_chunk_t *c);
bool thp_refill_collapse(const arena_chunk_t *c, size_t peak_chunks);
bool thp_dense_advised(void);
bool thp_turns_sparse(const arena_chunk_t *c, uint64_t now);
bool thp_sparse_by_use(const arena_chunk_t *c);
uint64_t thp_sparse_at(const arena_chunk_t *c);
uint8_t thp_huge_block_advice(size_t pages, bool fresh);
/* thp.c's decision for huge blocks' fresh memory: up to THP_V_HUGE fresh
 * chunks are advised huge, from THP_V_OFF on no probe runs (thp.c
 * compares verdicts by this order). */
enum thp_verdict {
	THP_V_UNPROBED = 0, /* no probe yet: huge pages, as THP_V_HUGE */
	THP_V_HUGE,         /* a fresh huge page costs no more than 4 KiB ones */
	THP_V_SMALL,        /* it costs more: fresh chunks in 4 KiB pages */
	THP_V_UNFORMED,     /* advised, no huge page formed: no advice */
	THP_V_OFF,          /* the kernel has no THP (or never) */
	THP_V_ALWAYS,       /* ARENA_CONF thp:always */
	THP_V_NEVER,        /* ARENA_CONF thp:never */
};
typedef struct thp_decision {
	const char *name;  /* "unprobed", "huge", "small", "unformed", "off", ... */
	uint64_t probes, huge_ns, small_ns; /* the last probe's figures */
	/* growing heaps: chunks born huge timed, mean first writes (ns per
	 * 2 MiB) huge and 4 KiB, chunks kept small */
	uint64_t heap_checks, heap_huge_ns, heap_small_ns, heap_kept_small;
} thp_decision_t;
/* A probe times thp_probe_runs() huge pages: an eighth of the block's
 * fresh chunks, THP_PROBE_MIN to THP_PROBE_PAGES, never more than the
 * block. */
#define THP_PROBE_PAGES 64
#define THP_PROBE_MIN 4
unsigned thp_probe_runs(size_t nchunks);
uint8_t thp_verdict(void);
bool thp_probe_due(uint64_t now, unsigned runs, bool dear);
bool thp_watch_dear(size_t nchunks);
void thp_probe_result(const os_fault_cost_t *cost);
thp_decision_t thp_decision(void);

/* ---- region.c: the address space and its tables (caller holds the chunk lock) ---- */
uint32_t region_new_tag(void);
size_t region_desc_bytes(size_t nchunks);
bool region_commit_to(region_t *r, size_t end);
void region_purge_hdrs(region_t *r, size_t first, size_t n);
bool region_new(size_t min_chunks);
extern region_t regions[MAX_REGIONS];
/* The chunk lock: the regions' frontiers, commits and descriptors, and the
 * chunk layer's free runs (chunk.c takes it; kept here, where the region
 * functions that need it held can assert it). */
extern mutex_t chunk_mtx;
extern atomic_uint nregions;
/* Every region is below 2^48 (transfer batches pack addresses in 48 bits). */
extern bool regions_below_2_48;
/* chunk_desc_of() beyond region 0. */
chunk_desc_t *region_desc_of_other(const void *p);

/* A free block's link (its first word; a transfer chain's, its second too)
 * is stored encoded: next ^ its own address ^ region_link_key (a secret of
 * libarena's own, set before any block exists), so a write that does not
 * know the secret decodes to a random word; and it is checked where it is
 * read: NULL, or a 16-aligned address in a region (region_link_bad reports
 * anything else with the block's address: out_misuse).  Every read and write of a
 * link goes through link_word, link_set and link_next. */
extern uintptr_t region_link_key;
extern size_t region_link_limit; /* region 0's size / 16 */
void *region_link_bad(const void *block, uintptr_t next);

/* The encoding, its own inverse: v ^ slot ^ the secret. */
static inline uintptr_t link_word(const void *slot, uintptr_t v)
{
	return v ^ (uintptr_t)slot ^ region_link_key;
}

/* Whether next is 16-aligned in region 0: one rotation makes a misaligned
 * offset too large (the base is chunk-aligned). */
static inline bool link_in_region0(uintptr_t next)
{
	uintptr_t off = next - (uintptr_t)regions[0].base;
	return (off >> 4 | off << 60) < region_link_limit;
}

/* next, a link read from block: itself if it is one, else the verdict of
 * region_link_bad (NULL, another region's block, or reported). */
static inline void *link_checked(const void *block, uintptr_t next)
{
	if (likely(link_in_region0(next)))
		return (void *)next;
	return region_link_bad(block, next);
}

static inline void link_set(void *block, const void *next)
{
	*(uintptr_t *)block = link_word(block, (uintptr_t)next);
}

static inline void *link_next(const void *block)
{
	return link_checked(block, link_word(block, *(const uintptr_t *)block));
}

/* The fast paths' read: whether the link is in region 0 (else NULL, or
 * left to the slow paths' link_next). */
static inline bool link_next_fast(const void *block, void **next)
{
#if defined(__x86_64__)
	/* link_word and link_in_region0 in seven instructions, where gcc
	 * takes a register more, a copy and a shift */
	uintptr_t n, off;
	bool in;
	__asm__("movq (%[b]), %[n]\n\t"
		"xorq %[key], %[n]\n\t"
		"xorq %[b], %[n]\n\t"
		"movq %[n], %[o]\n\t"
		"subq %[base], %[o]\n\t"
		"rorq $4, %[o]\n\t"
		"cmpq %[lim], %[o]"
		: [n] "=&r"(n), [o] "=&r"(off), "=@ccb"(in)
		: [b] "r"(block), [key] "m"(region_link_key), [base] "m"(regions[0].base),
		  [lim] "m"(region_link_limit), "m"(*(const uintptr_t *)block));
#else
	uintptr_t n = link_word(block, *(const uintptr_t *)block);
	bool in = link_in_region0(n);
#endif
	*next = (void *)n;
	return in;
}

/* ---- chunk.c: runs of chunks */
void chunk_init(void);
/* What chunks taken from the free ones held (chunk.c, mark_used). */
typedef struct {
	size_t nfresh;  /* those without pages the kernel still backs */
	bool regretted; /* the dirty cap purged one within decay_ms */
	bool fill;      /* in: a huge block's zero chunks take freed pages (assemble) */
} chunk_past_t;
void *chunk_alloc(size_t nchunks, size_t align, uint8_t kind, size_t size, bool *zero);
void *chunk_alloc_arena(bool *zero, bool *regretted);
bool chunk_collapse(void *base);
void *chunk_alloc_huge(size_t nchunks, size_t align, size_t size, bool fill, bool *zero,
		       size_t *nfresh);
void *chunk_alloc_dirty(uint8_t kind);
void chunk_free(void *base, size_t nchunks);
void chunk_free_moved(void *base, size_t nchunks);
/* After a refused move: maps afresh each of the k chunks at dst that lost
 * its mapping (mremap unmaps the destination first). */
void chunk_fill_holes(char *dst, size_t k);
bool chunk_extend(void *base, size_t old_n, size_t new_n, size_t size, size_t *nfresh);
void chunk_set_guard(void *base, uint8_t kind);
uint8_t chunk_guard(const void *base);
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

/* The descriptor of p's chunk, or NULL when p is in no region of ours.
 * Reads only our tables. */
static inline chunk_desc_t *chunk_desc_of(const void *p)
{
	/* region 0 first (size 0 until it exists) */
	size_t off = (size_t)((uintptr_t)p - (uintptr_t)regions[0].base);
	if (likely(off < regions[0].size))
		return &regions[0].desc[off >> CHUNK_SHIFT];
	return region_desc_of_other(p);
}

/* A slab page's word for sclass at base in the arena with that salt: high
 * half bin_off(sclass), low half -(base + salt), so the low half of word +
 * p + salt is p's offset in the slab.  Another arena's thread adds its own
 * salt and gets an offset a salt step (1 MiB) off, which the check
 * refuses: the fast path takes only its own arena's blocks. */
static inline uint64_t slab_entry(unsigned sclass, const void *base, uint32_t salt)
{
	/* with heap profiles, frees go to the freed lists */
	uint64_t off = bin_off(sclass) + sc_tables.entry_off;
	return off << 32 | (uint32_t)(-(uintptr_t)base - salt);
}

/* p's offset in its slab; the salt by reference, so x86 adds it from
 * memory in two 32-bit instructions (gcc adds a third). */
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

/* Whether offset x (slab_entry_offset) starts a block by the check at
 * byte k of slab_checks: x * magic < thresh.  On x86 both loads index the
 * table by k, where C adds k to the table's address first. */
static inline bool slab_check_passes(uint64_t x, size_t k)
{
#if defined(__x86_64__)
	bool below;
	__asm__("imulq (%[t],%[k]), %[x]\n\tcmpq 8(%[t],%[k]), %[x]"
		: [x] "+r"(x), "=@ccb"(below)
		: [t] "r"(slab_checks), [k] "r"(k), "m"(sc_tables));
	return below;
#else
	const slab_check_t *ck = (const slab_check_t *)((const char *)slab_checks + k);
	return x * ck->magic < ck->thresh;
#endif
}

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

/* An arena chunk's header (p in an arena chunk): out of the chunk, in its
 * region's header table, so that no overflow of a block reaches it.  No
 * call (the callers stay leaves): p is in some region, so the walk ends. */
static inline arena_chunk_t *chunk_hdr_of(const void *p)
{
	const region_t *r = regions;
	size_t off;
	while ((off = (size_t)((uintptr_t)p - (uintptr_t)r->base)) >= r->size)
		r++;
	return (arena_chunk_t *)(r->hdrs + (off >> CHUNK_SHIFT) * CHUNK_HDR_BYTES);
}

static inline void *chunk_desc_addr(const chunk_desc_t *d)
{
	const region_t *r = &regions[d->region];
	return r->base + ((size_t)(d - r->desc) << CHUNK_SHIFT);
}

/* ---- chunk_map.c: moves and THP advice of chunks */
size_t chunk_map_move(void *src, void *dst, size_t n, size_t usable);
void chunk_map_advise(void *base, size_t n, uint8_t want);

/* ---- pagemap.c: free pages of an arena chunk */
void pagemap_init(arena_chunk_t *c, bool zero);
long pagemap_find(arena_chunk_t *c, size_t npages, size_t align_pages);
bool pagemap_range_free(const arena_chunk_t *c, size_t first, size_t npages);
long pagemap_find_dirty(arena_chunk_t *c, size_t npages, size_t align_pages);
bool pagemap_run_zero(const arena_chunk_t *c, size_t first, size_t npages);
bool pagemap_take(arena_chunk_t *c, size_t first, size_t npages);
size_t pagemap_give(arena_chunk_t *c, size_t first, size_t npages);
size_t pagemap_purge(arena_chunk_t *c, uint8_t kind);
size_t pagemap_purge_free(arena_chunk_t *c);
void pagemap_count(const arena_chunk_t *c, size_t *dirty, size_t *lazy);
bool pagemap_validate_runs(const arena_chunk_t *c); /* a validator, as chunk_validate_runs */

/* Pages count from the chunk's first byte. */
static inline size_t page_index(const arena_chunk_t *c, const void *p)
{
	(void)c;
	return (size_t)((uintptr_t)p & CHUNK_MASK) >> PAGE_SHIFT;
}

static inline void *page_addr(arena_chunk_t *c, size_t idx)
{
	ARENA_ASSERT(idx < CHUNK_PAGES);
	return c->base + (idx << PAGE_SHIFT);
}

/* ---- arena.c */
/* Pages of the large block at page idx of c: its class's up to CACHE_MAX,
 * above it the run's (c->ref). */
static inline size_t large_pages_of(const arena_chunk_t *c, size_t idx)
{
	/* its first page */
	ARENA_ASSERT(c->page[idx].kind == PG_LARGE && c->page[idx].head == idx);
	unsigned sclass = c->page[idx].sclass;
	return sclass < NCACHED ? class_size[sclass] >> PAGE_SHIFT : c->ref[idx].run.pages;
}
extern arena_t arenas[MAX_ARENAS];
/* index << ARENA_SALT_SHIFT.  Computed: stored, it would touch every
 * arena's page at start-up (tests/test_pages). */
static inline uint32_t arena_salt(const arena_t *a)
{
	ARENA_ASSERT(a >= arenas && a < arenas + MAX_ARENAS);
	return (uint32_t)(a - arenas) << ARENA_SALT_SHIFT;
}
unsigned arena_max(void);
extern atomic_ulong arena_born_huge, arena_born_regrown, arena_refilled_huge;
unsigned arena_count(void);
void arena_init(void);
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

void arena_lock_contended(arena_t *a);
#ifdef ARENA_UNIT
unsigned arena_lock_spin_limit(void);
#endif

static inline void arena_lock(arena_t *a)
{
	if (unlikely(mutex_trylock(&a->lock) != 0))
		arena_lock_contended(a);
}
static inline void arena_unlock(arena_t *a) { mutex_unlock(&a->lock); }

/* ---- slab.c */
unsigned slab_alloc_batch(arena_t *a, unsigned sclass, void **out, unsigned n, uint64_t *zero);
void slab_free_block(arena_chunk_t *c, slab_t *s, void *p);
unsigned slab_free_array(arena_t *a, void *const *blocks, unsigned n);
bool slab_block_free(const slab_t *s, const void *p);
bool slab_validate_free_list(const slab_t *s); /* a validator, as chunk_validate_runs */
void slab_sweep(arena_t *a, uint64_t now);
void slab_release_all(arena_t *a);

/* ---- remote.c: blocks going back to their arena */
void remote_free_chain(arena_t *a, unsigned sclass, void *const *blocks, unsigned n,
		      bool linked, bool own);
void *remote_take_batch(arena_t *a, unsigned sclass, unsigned max, unsigned *n);
void remote_drain(arena_t *a);
void remote_drain_all(arena_t *a);
void remote_free_blocks(arena_t *a, void *const *blocks, unsigned n);
bool remote_drain_stale(arena_t *a);
size_t remote_purge_all(void);

/* Debug mode's junk (debug.c); a free block's first LINK_WORDS hold the
 * cache's link and key. */
#define JUNK 0x5a
#define LINK_WORDS (2 * sizeof(void *))

/* Debug mode: a block back from a cache has those words junk again. */
static inline void junk_links(void *p, size_t size)
{
	memset(p, JUNK, size < LINK_WORDS ? size : LINK_WORDS);
}

/* ---- large.c */
extern atomic_ulong large_run_bytes;
void *large_alloc(arena_t *a, size_t size, size_t align, bool *zero, size_t *usable);
unsigned large_alloc_batch(arena_t *a, unsigned sclass, void **out, unsigned n);
void large_free(arena_chunk_t *c, size_t idx);
bool large_resize_in_place(arena_chunk_t *c, size_t idx, size_t size);

/* ---- huge.c */
void *huge_alloc(size_t size, size_t align, bool *zero, bool probe);
void huge_free(chunk_desc_t *d, void *p);
bool huge_resize_in_place(chunk_desc_t *d, size_t size);
void *huge_move(chunk_desc_t *d, void *p, size_t size);
extern atomic_ulong huge_nmalloc, huge_nfree, huge_bytes;
extern atomic_ulong huge_peak_blocks, huge_peak_bytes;
extern atomic_ulong huge_nin_place, huge_nremap, huge_ncopy, huge_nsmall_chunks;


/* ---- tcache.c */
extern _Thread_local tcache_t tc __attribute__((tls_model("initial-exec")));
extern uintptr_t tcache_key;
arena_t *tcache_arena(void);
void *tcache_alloc_slow(unsigned sclass);
void tcache_free_slow(void *p, unsigned sclass);
void tcache_count_alloc(unsigned sclass);
void tcache_count_free(unsigned sclass);
uint64_t tcache_count(const tcache_t *t, unsigned sclass, bool is_free);
/* sclass's mallocs from this thread's bin (owner only; walks avail). */
uint64_t tcache_nmalloc(unsigned sclass);

/* An increment of a counter only this thread writes, others read: one
 * incq on x86-64 (an aligned 8-byte add is never torn). */
#if defined(__x86_64__)
#define counter_inc(c) __asm__ volatile("incq %0" : "+m"(*(c)))
#else
static inline void counter_inc(uint64_t *c)
{
	__atomic_store_n(c, *c + 1, __ATOMIC_RELAXED);
}
#endif
/* The owner adds n (mod 2^64); others read the counter relaxed. */
static inline void counter_add(uint64_t *c, uint64_t n)
{
	__atomic_store_n(c, *c + n, __ATOMIC_RELAXED);
}

/* A cached block's first word links to the next (link_set); its second
 * holds tcache_key once freed into a cache, zero_mark() for fresh slab
 * memory (calloc skips its memset), or 0. */
static inline uintptr_t zero_mark(void)
{
	return tcache_key ^ 2; /* odd key: the mark is neither it nor 0 */
}

static inline tbin_t *tc_bin_at(size_t off)
{
	return (tbin_t *)((char *)&tc + off);
}

/* A pop from a non-empty avail (lists hold blocks only while live). */
static inline void *tcache_pop(tbin_t *b)
{
	ARENA_ASSERT(b->avail != NULL);
	void **p = b->avail;
	b->avail = link_next(p);
	p[1] = NULL; /* no key: a later free is not a double one */
	b->room++;
	return p;
}

/* tcache_pop if the link passes link_next_fast, else NULL (avail kept). */
static inline void *tcache_pop_fast(tbin_t *b)
{
	void **p = b->avail, *next;
	if (unlikely(!link_next_fast(p, &next)) && next)
		return NULL;
	b->avail = next;
	p[1] = NULL;
	b->room++;
	return p;
}

/* The blocks in b's head while avail is empty: room counts the rest, the
 * thread's run of unlinked fresh blocks (tcache.c, "linked lazily"). */
static inline uint32_t tcache_head_len(const tbin_t *b, unsigned sclass)
{
	uint32_t n = b->max - (uint32_t)b->room;
	return tc.lazy_n && tc.lazy_class == sclass ? n - tc.lazy_n : n;
}

/* avail ran dry: head (n blocks) becomes it, the n counted as taken now
 * (nmalloc leads the mallocs by avail's length, tcache_nmalloc). */
static inline void tcache_take_freed(tbin_t *b, uint32_t n)
{
	ARENA_ASSERT(b->avail == NULL);
	counter_add(&b->nmalloc, n);
	b->avail = b->head;
	b->head = NULL;
}

static inline void *tcache_pop_freed(tbin_t *b, unsigned sclass)
{
	tcache_take_freed(b, tcache_head_len(b, sclass));
	return tcache_pop(b);
}

/* Pushes onto b's head; the caller took the room. */
static inline void tcache_push(tbin_t *b, void *block)
{
	void **p = block;
	p[1] = (void *)tcache_key;
	link_set(p, b->head);
	b->head = p;
}

/* tcache_pop for calloc: *zero for a zero-marked block, its link cleared. */
static inline void *tcache_pop_known_zero(tbin_t *b, bool *zero)
{
	void **p = b->avail;
	*zero = (uintptr_t)p[1] == zero_mark();
	tcache_pop(b);
	if (*zero) /* live now: its link's word is the program's, zero */
		p[0] = NULL;
	return p;
}

#if defined(__x86_64__)
/* The thread cache's offset from the thread pointer (initial-exec TLS): the
 * fast paths address its words %fs-relative, base plus the bin's offset,
 * where C takes two adds more to make &tc + off.  Pure: one load a call. */
static inline uintptr_t tc_tpoff(void)
{
	uintptr_t t;
	__asm__("movq tc@gottpoff(%%rip), %0" : "=r"(t));
	return t;
}
#endif

/* slab_entry_offset with this thread's salt (tc.salt, the cache's first
 * word), read %fs-relative from the base the fast paths address the bins
 * by. */
static inline uint64_t slab_entry_offset_tc(uint64_t entry, const void *p)
{
#if defined(__x86_64__)
	uint64_t x;
	__asm__ volatile("leal (%1,%2), %k0\n\taddl %%fs:(%3), %k0"
			 : "=&r"(x) : "r"(entry), "r"(p), "r"(tc_tpoff()) : "memory");
	return x;
#else
	return slab_entry_offset(entry, p, &tc.salt);
#endif
}

/* slab_entry_offset_tc, and *k the entry's bin offset (its high half):
 * the shift reuses the entry's register once the offset is taken, where
 * gcc copies the entry first (one instruction more a free). */
static inline uint64_t slab_entry_split_tc(uint64_t entry, const void *p, size_t *k)
{
#if defined(__x86_64__)
	uint64_t x;
	__asm__ volatile("leal (%[e],%[p]), %k[x]\n\taddl %%fs:(%[t]), %k[x]\n\tshrq $32, %[e]"
			 : [x] "=&r"(x), [e] "+r"(entry)
			 : [p] "r"(p), [t] "r"(tc_tpoff())
			 : "memory", "cc");
	*k = (size_t)entry;
	return x;
#else
	*k = (size_t)(entry >> 32);
	return slab_entry_offset(entry, p, &tc.salt);
#endif
}

/* free of a valid small block by bin offset: a push, or false (the key:
 * maybe freed already; or full) for tcache_free_slow. */
static inline bool tcache_push_at(void *p, size_t off)
{
#if defined(__x86_64__)
	uintptr_t key = tcache_key; /* read once: the stores below clobber memory */
	if (unlikely(((uintptr_t *)p)[1] == key))
		return false;
	uintptr_t t = tc_tpoff();
	bool full;
	void *head;
	__asm__ volatile("subl $1, %%fs:%c[room](%[t],%[o])"
			 : "=@ccs"(full)
			 : [t] "r"(t), [o] "r"(off), [room] "i"(offsetof(tbin_t, room))
			 : "memory");
	if (unlikely(full))
		return false;
	((void **)p)[1] = (void *)key;
	__asm__ volatile("movq %%fs:(%1,%2), %0" : "=r"(head) : "r"(t), "r"(off) : "memory");
	link_set(p, head);
	__asm__ volatile("movq %0, %%fs:(%1,%2)" : : "r"(p), "r"(t), "r"(off) : "memory");
	return true;
#else
	tbin_t *b = tc_bin_at(off);
	if (likely(((uintptr_t *)p)[1] != tcache_key) && likely(--b->room >= 0)) {
		tcache_push(b, p);
		return true;
	}
	return false;
#endif
}

/* malloc from bin offset off's lists: NULL when both are empty, or when
 * the link is for the slow path's tcache_pop to check (link_next_fast). */
static inline void *tcache_alloc_at(size_t off)
{
#if defined(__x86_64__)
	uintptr_t t = tc_tpoff();
	void **p, *next;
	__asm__ volatile("movq %%fs:%c[avail](%[t],%[o]), %[p]"
			 : [p] "=r"(p)
			 : [t] "r"(t), [o] "r"(off), [avail] "i"(offsetof(tbin_t, avail))
			 : "memory");
	if (unlikely(p == NULL)) { /* head's blocks, moved over (tcache_take_freed) */
		__asm__ volatile("movq %%fs:(%[t],%[o]), %[p]" : [p] "=r"(p) : [t] "r"(t), [o] "r"(off)
				 : "memory");
		if (p == NULL || (unlikely(tc.lazy_n != 0) && tc.lazy_class == bin_class(off)))
			return NULL;
		uint64_t n; /* tcache_take_freed's count, max - room */
		__asm__ volatile("movl %%fs:%c[max](%[t],%[o]), %k[n]\n\t"
				 "subl %%fs:%c[room](%[t],%[o]), %k[n]\n\t"
				 "addq %[n], %%fs:%c[nmalloc](%[t],%[o])\n\t"
				 "movq $0, %%fs:(%[t],%[o])\n\t"
				 "movq %[p], %%fs:%c[avail](%[t],%[o])"
				 : [n] "=&r"(n)
				 : [p] "r"(p), [t] "r"(t), [o] "r"(off),
				   [avail] "i"(offsetof(tbin_t, avail)), [max] "i"(offsetof(tbin_t, max)),
				   [room] "i"(offsetof(tbin_t, room)),
				   [nmalloc] "i"(offsetof(tbin_t, nmalloc))
				 : "memory", "cc");
	}
	if (unlikely(!link_next_fast(p, &next)) && next)
		return NULL;
	/* tcache_pop's stores */
	__asm__ volatile("movq %[n], %%fs:%c[avail](%[t],%[o])\n\t"
			 "addl $1, %%fs:%c[room](%[t],%[o])"
			 :
			 : [n] "r"(next), [t] "r"(t), [o] "r"(off),
			   [avail] "i"(offsetof(tbin_t, avail)), [room] "i"(offsetof(tbin_t, room))
			 : "memory");
	p[1] = NULL; /* no key: a later free is not a double one */
	return p;
#else
	tbin_t *b = tc_bin_at(off);
	if (likely(b->avail != NULL))
		return tcache_pop_fast(b);
	if (likely(b->head != NULL) && !(tc.lazy_n && tc.lazy_class == bin_class(off))) {
		tcache_take_freed(b, tcache_head_len(b, bin_class(off)));
		return tcache_pop_fast(b);
	}
	return NULL;
#endif
}
void tcache_flush_bin(tcache_t *t, unsigned sclass, unsigned keep);
/* Links one of the fresh blocks a refill kept unlinked: false if none. */
bool tcache_lazy_fill(unsigned sclass);
bool tcache_block_freed(void *p, unsigned sclass);
/* For prof_cache.c: */
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
/* remote.c's batches hold 64 */
#define FOREIGN_MAX 64u

/* Adds another arena's block to t's foreign list, sent home when full. */
static inline void foreign_push(tcache_t *t, fbin_t *f, void *p)
{
	void **q = p;
	q[1] = (void *)tcache_key;
	link_set(q, f->head);
	f->head = q;
	counter_inc(&f->nfree);
	if (++f->n >= f->max)
		tcache_foreign_flush(t, (unsigned)(f - t->foreign));
}

/* t's foreign list for bin offset off (freed lists': the second half). */
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

/* ---- prof_cache.c: the thread caches with heap profiles on */
void *prof_cache_alloc(unsigned sclass);
void *prof_cache_miss(size_t off);
void prof_cache_free(void *p, unsigned sclass);
void prof_cache_free_full(void *p, unsigned sclass);
bool prof_cache_free_near(void *p, uint64_t e);

/* ---- background.c: purging driven from above (trim, background thread) */
size_t background_purge_now(void);
void background_start(void);
void background_after_fork_child(void);
typedef struct background_stats {
	bool running;
	uint64_t wakeups;  /* waits that returned */
	uint64_t passes;   /* decay steps and sweeps */
} bg_stats_t;
bg_stats_t background_stats(void);


/* ---- alloc.c: the plain allocator, initialisation, fork */
extern atomic_int init_done;
enum api_mode { MODE_UNSET = 0, MODE_PLAIN, MODE_DEBUG, MODE_PROF /* heap profiles on */,
	MODE_SECURE };
extern uint8_t api_mode;
bool alloc_init_slow(void);
static inline bool ensure_init(void)
{
	return likely(atomic_load_explicit(&init_done, memory_order_acquire)) || alloc_init_slow();
}

enum block_kind { BLK_BAD, BLK_SMALL, BLK_LARGE, BLK_HUGE };

typedef struct block {
	uint8_t kind;
	uint8_t sclass;        /* small, large */
	size_t page;           /* page index in the chunk */
	arena_chunk_t *chunk;  /* small, large */
	chunk_desc_t *desc;
	const char *error;     /* BLK_BAD: what is wrong */
} block_t;

/* What p is: ours and a live block's start (short of walking the thread
 * caches).  Reads only our tables and headers. */
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
			size_t off = ((uintptr_t)p & CHUNK_MASK) - ((size_t)pi.head << PAGE_SHIFT);
			unsigned i = slab_block_index(pi.sclass, off);
			/* past the last block: the slab's tail */
			if (likely(i * class_size[pi.sclass] == off && i < class_nblocks[pi.sclass]))
				b.kind = BLK_SMALL;
			else
				b.error = "invalid free of an interior pointer";
		} else if (pi.kind == PG_LARGE) {
			if (((uintptr_t)p & CHUNK_MASK) == (size_t)pi.head << PAGE_SHIFT)
				b.kind = BLK_LARGE, b.page = pi.head;
			else
				b.error = "invalid free of an interior pointer";
		} else {
			b.error = "double free or invalid free (free page)";
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

/* Whether p, found live as b, is in fact free (in a cache or its slab). */
static inline bool block_freed(void *p, const block_t *b)
{
	return b->kind != BLK_HUGE && b->sclass < NCACHED && tcache_block_freed(p, b->sclass);
}

void alloc_block_free(void *p, const block_t *b);
bool alloc_resize_in_place(const block_t *b, size_t size);
void *alloc_realloc_move(void *p, size_t size, size_t k);
void *alloc_big(size_t size, size_t align, bool zero);

/* free of a cached class's block by bin offset: a push, else the slow path
 * (out of line: the fast paths stay leaf functions). */
void alloc_free_cached_slow(void *p, unsigned index);
static inline void free_cached_at(void *p, size_t off)
{
	if (likely(tcache_push_at(p, off)))
		return;
	/* the class: the fast path keeps its registers */
	alloc_free_cached_slow(p, bin_class(off));
}

/* Bytes calloc did not clear (known zero). */
extern atomic_ulong alloc_memset_skipped;
extern atomic_uint alloc_forks;
void *alloc_plain_aligned(size_t align, size_t size);
void alloc_plain_free(void *p);
void *alloc_plain_malloc(size_t size);
size_t alloc_plain_usable(void *p, const char **error);
extern const char plain_freed_block[]; /* alloc_plain_usable's error for a free block */

/* The cache's slow path, initialising first: every cache is empty before
 * initialisation and in debug mode. */
static inline void *alloc_cached_slow(unsigned sclass)
{
	if (!ensure_init())
		return NULL;
	return unlikely(prof_on) ? prof_cache_alloc(sclass) : tcache_alloc_slow(sclass);
}

/* malloc of a cached class by bin offset. */
static inline void *alloc_cached_at(size_t off)
{
	void *p = tcache_alloc_at(off);
	return likely(p != NULL) ? p : alloc_cached_slow(bin_class(off));
}

static inline void *malloc_plain(size_t size)
{
	if (likely(size <= CACHE_MAX))
		return alloc_cached_at(size_bin_offset(size));
	return alloc_big(size, MIN_ALIGN, false);
}

/* For realloc: p's bin offset if p is a live small block of this thread's
 * arena, found as free's fast path finds one (its page's word, the salt,
 * then the key), and size is not 0; else 0, for block_of to sort out.
 * block_of, block_freed and alloc_resize_in_place cost fixed_work's
 * reallocs 157 instructions each, this path 52. */
static inline size_t realloc_small_off(void *p, size_t size)
{
	size_t off = (size_t)((uintptr_t)p - (uintptr_t)regions[0].base);
	if (off >= regions[0].size || size == 0)
		return 0;
	uint64_t e = __atomic_load_n(&regions[0].ptab[off >> PAGE_SHIFT], __ATOMIC_RELAXED);
	size_t k;
	uint64_t x = slab_entry_split_tc(e, p, &k);
	if (!slab_check_passes(x, k) || k > bin_off(NSMALL - 1) ||
	    ((uintptr_t *)p)[1] == tcache_key)
		return 0;
	return k;
}

/* calloc's clearing, unless known zero. */
static inline void calloc_clear(void *p, size_t n, bool known_zero)
{
	if (known_zero)
		atomic_fetch_add_explicit(&alloc_memset_skipped, n, memory_order_relaxed);
	else
		memset(p, 0, n);
}

/* calloc up to SMALL_MAX: a known-zero block needs only its first two
 * words cleared, which the pop did. */
static inline void *calloc_small(size_t size)
{
	unsigned sclass = size_class(size);
	tbin_t *b = &tc.bins[sclass];
	bool known_zero = false;
	/* head moves over here, so the pop reads a refill's zero marks */
	if (unlikely(b->avail == NULL)) {
		if (!b->head)
			tcache_lazy_fill(sclass);
		tcache_take_freed(b, b->head ? tcache_head_len(b, sclass) : 0);
	}
	void *p = likely(b->avail != NULL) ? tcache_pop_known_zero(b, &known_zero)
					   : alloc_cached_slow(sclass);
	if (p)
		calloc_clear(p, known_zero ? (size > LINK_WORDS ? size - LINK_WORDS : 0) : size, known_zero);
	return p;
}

/* ---- debug.c: ARENA_CONF=debug:true */
void *debug_malloc(size_t size);
void *debug_aligned(size_t align, size_t size);
void *debug_calloc(size_t total);
void *debug_realloc(void *p, size_t size);
void debug_free(void *p, const char *op);
void debug_free_sized(void *p, size_t align, size_t size);
size_t debug_usable(void *p);

/* ---- secure.c: ARENA_CONF=secure:true */
void *secure_malloc(size_t size);
void *secure_aligned(size_t align, size_t size);
void *secure_calloc(size_t total);
void *secure_realloc(void *p, size_t size);
void secure_free(void *p);
void secure_block_free(void *p, const block_t *b);
bool secure_block_freed(void *p, const block_t *b);
size_t secure_usable(void *p);

#pragma GCC visibility pop
#endif /* ARENA_INTERNAL_H */
