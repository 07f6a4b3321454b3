/* libarena's data structures (functions: internal.h).  A region reserves
 * address space; chunks (2 MiB, one huge page each) are cut from it: free,
 * arena chunks (slabs and large blocks: runs of 4 KiB pages; their headers
 * in the region's header table), or runs of whole chunks holding a huge
 * block. */
#ifndef ARENA_TYPES_H
#define ARENA_TYPES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "list.h"

#define PAGE_SHIFT 12
#define PAGE_SIZE ((size_t)1 << PAGE_SHIFT)
#define CHUNK_SHIFT 21
#define CHUNK_SIZE ((size_t)1 << CHUNK_SHIFT)
#define CHUNK_MASK (CHUNK_SIZE - 1)
#define CHUNK_PAGES (CHUNK_SIZE / PAGE_SIZE) /* 512 */
#define CHUNK_WORDS (CHUNK_PAGES / 64)       /* bitmap words per chunk */

#define MIN_ALIGN 16
#define SMALL_MAX ((size_t)16384)      /* largest slab slot */
#define LARGE_MAX ((size_t)1 << 20)    /* largest page run */
/* Small: 16..128 by 16, 4 per doubling to 1 KiB with 272, 528, 960, 8 per
 * doubling to 8 KiB with 1040, 2112, 4368, 7280, then 8704..16384 (58).
 * Large: 4 per doubling to 1 MiB (24).  At most ARENA_STATS_MAX_CLASSES. */
#define NSMALL 58
#define NCLASSES 82
/* Thread caches hold classes [0, NCACHED). */
#define CACHE_MAX ((size_t)65536)
#define NCACHED 66
/* 16-byte blocks in one page. */
#define SLAB_MAX_BLOCKS 256

/* size arithmetic stays far from overflow */
#define HUGE_MAX ((size_t)1 << 46)

/* huge blocks this big move by mremap on realloc (remap_min) */
#define REMAP_MIN_DEFAULT ((size_t)0)

/* The globals written at start-up, together in .data: a .bss page costs a
 * fault at its first write, .data faults in 16 pages at a time
 * (tests/test_pages). */
#define START_UP __attribute__((section(".data.start_up")))
/* huge_decay_ms:auto: chunks of huge blocks held while in the working set (purge.c) */
#define HUGE_DECAY_AUTO (-2L)

#define MAX_ARENAS 64
/* A slab (< 256 pages) is shorter than a salt step; 64 steps fit 32 bits. */
#define ARENA_SALT_SHIFT 20
_Static_assert(((size_t)UINT8_MAX << PAGE_SHIFT) < ((size_t)1 << ARENA_SALT_SHIFT),
	       "the longest slab is shorter than one salt step");
#define MAX_REGIONS 64

/* A lock of libarena's whose holder other functions may require (an
 * arena's, the chunk lock, the list of live caches): a pthread mutex, and in
 * debug builds (ARENA_DEBUG) the thread that holds it, which pthread does
 * not tell, for the lock assertions (internal.h, mutex_lock).  In release
 * builds it is the mutex alone. */
typedef struct mutex {
	pthread_mutex_t m;
#ifdef ARENA_DEBUG
	uintptr_t owner;    /* pthread_self() of the holder, 0 when free */
#endif
} mutex_t;
#define MUTEX_INITIALIZER { .m = PTHREAD_MUTEX_INITIALIZER }

/* ---- chunks */

enum chunk_kind {
	CK_UNUSED = 0, /* beyond the region's frontier */
	CK_FREE,       /* in a free run */
	CK_ARENA,      /* header + slabs + large blocks */
	CK_HUGE,       /* first chunk of a huge block */
	CK_HUGE_BODY,  /* later chunk of a huge block */
};

enum mem_state {
	MS_DIRTY = 0, /* written, backed */
	MS_ZERO,      /* reads zero */
	MS_LAZY,      /* MADV_FREE: contents unknown */
};

enum thp_advice { ADV_NONE = 0, ADV_HUGE, ADV_NOHUGE };

/* One per chunk, beside its region.  Written under the chunk lock (advice:
 * by the chunk's owner); read without it by free for pointers it owns. */
typedef struct chunk_desc {
	uint8_t kind;
	uint8_t state;      /* CK_FREE: enum mem_state */
	uint8_t region;
	uint8_t advice;     /* enum thp_advice */
	uint32_t nchunks;   /* CK_FREE run ends, CK_HUGE: length; CK_HUGE_BODY: to the head */
	size_t size;        /* CK_HUGE: rounded to pages */
	link_t bin_link;    /* CK_FREE run heads */
	/* CK_FREE, MS_DIRTY: dirty LRU, since (ms) */
	link_t lru;
	uint64_t dirty_ms;
	/* Neighbouring chunks with one tag lie in one kernel mapping: a call that
	 * may split a mapping gives its chunks a new tag (chunk_map_move moves one
	 * mapping at a time). */
	uint32_t map_tag;
	/* CK_FREE: when the dirty cap purged it (ms, low 32 bits; 0: not).
	 * CK_HUGE head: 1 if a guard page follows the block (huge.c). */
	uint32_t capped_ms;
} chunk_desc_t;
_Static_assert(sizeof(chunk_desc_t) == 64, "a chunk descriptor is 64 bytes (docs/design.md)");
_Static_assert(MAX_REGIONS <= UINT8_MAX + 1, "chunk_desc_t.region indexes every region");

typedef struct region {
	/* first: the fields of free's fast path and of the table look-ups */
	char *base;
	size_t size;
	/* A word per page for free's fast path: slab_entry() for slab pages, else
	 * 0.  Written under the arena lock, read without it. */
	uint64_t *ptab;
	chunk_desc_t *desc;
	/* Arena chunk headers, out of the chunks: chunk i's at hdrs +
	 * i * CHUNK_HDR_BYTES, committed with the chunks (region.c). */
	char *hdrs;
	size_t nchunks;
	size_t frontier;     /* chunks [0, frontier) were handed out once */
	size_t committed;    /* chunks [0, committed) are read-write */
	bool desc_huge;      /* the descriptor table advised huge */
} region_t;

/* ---- arena chunks and pages */

enum page_kind {
	PG_FREE = 0,
	PG_SLAB,
	PG_LARGE,
};

typedef struct page_info {
	uint8_t kind;
	uint8_t sclass;     /* PG_SLAB, PG_LARGE: the run's class */
	uint16_t head;      /* PG_SLAB, PG_LARGE: the run's first page */
} page_info_t;
_Static_assert(CHUNK_WORDS * 64 == CHUNK_PAGES, "the page bitmaps have a bit per page");
_Static_assert(CHUNK_PAGES <= UINT16_MAX, "16 bits count a chunk's pages (head, nfree, longest)");
_Static_assert(NCLASSES <= UINT8_MAX + 1, "8 bits hold every class (page_info_t, slab_t)");

struct arena;
struct slab;

/* An arena chunk's header.  Free pages: dirty (dirty_map), lazy (lazy_map:
 * MADV_FREE given), or zero (neither). */
typedef struct arena_chunk {
	struct arena *arena;
	char *base;                      /* the chunk's first byte */
	uint32_t salt;                   /* arena_salt(arena) */
	uint16_t nfree;
	uint16_t longest;                /* >= the longest free run */
	link_t link;
	uint32_t ndirty;                 /* dirty_map's count */
	uint16_t longest_dirty;          /* >= the longest dirty free run */
	uint64_t free_map[CHUNK_WORDS];
	uint64_t dirty_map[CHUNK_WORDS];
	uint64_t lazy_map[CHUNK_WORDS];
	/* fine purging: first page given back since the last purge */
	uint64_t dirty_ms;
	uint64_t advice_ms;
	bool advised_huge;               /* MADV_HUGEPAGE given (dense) */
	uint16_t nguards;                /* large blocks' guard pages (large.c) */
	uint64_t capped_ms;
	/* taken again within decay_ms of it */
	uint32_t regret_pages;
	page_info_t page[CHUNK_PAGES];
	/* PG_SLAB: the slab; a large block above CACHE_MAX: its pages, and
	 * whether its run has a page more, a guard (enum guard_kind) or not */
	union page_ref {
		struct slab *slab;
		struct large_run {
			uint32_t pages;
			uint8_t spare, guard;
		} run;
	} ref[CHUNK_PAGES];
} arena_chunk_t;
/* Headers lie CHUNK_HDR_BYTES apart, an odd multiple of 64 bytes: the
 * first lines of consecutive chunks' headers fall in different cache sets. */
#define CHUNK_HDR_BYTES ((sizeof(arena_chunk_t) + 127) / 128 * 128 + 64)

/* ---- slabs */

/* Out of line: blocks start at the slab's first byte, so power-of-two
 * classes are naturally aligned. */
typedef struct slab {
	link_t link;              /* its bin's list, or the free ones */
	char *base;
	uint16_t nfree;
	uint16_t nblocks;
	uint8_t sclass;
	uint8_t listed;           /* enum slab_list */
	/* blocks from here on still read zero */
	uint16_t zero_from;
	uint64_t free_bits[SLAB_MAX_BLOCKS / 64]; /* set: free */
} slab_t;
_Static_assert(sizeof(slab_t) == 64, "a slab descriptor is 64 bytes (docs/design.md)");
_Static_assert(SLAB_MAX_BLOCKS == PAGE_SIZE / MIN_ALIGN && SLAB_MAX_BLOCKS <= UINT16_MAX,
	       "slab_t's counts and bitmap hold the blocks of a page of the smallest class");

enum slab_list { SLAB_ON_NONE = 0, SLAB_ON_NONFULL, SLAB_ON_EMPTY };

typedef struct bin {
	list_t nonfull;           /* slabs with free blocks and blocks in use */
	/* all free, the last emptied first: used when nonfull is empty */
	list_t empty;
	uint16_t nempty;
	uint16_t empty_low;       /* fewest since the last sweep */
} bin_t;

/* ---- arenas */

typedef struct arena {
	mutex_t lock;
	bin_t bins[NSMALL];
	list_t chunks;
	size_t nchunks;
	size_t peak_chunks;        /* the most it held */
	size_t nempty;
	size_t ndense;             /* chunks advised huge (thp.c) */
	/* born huge in a growing heap: not sparse while it fills */
	struct arena_chunk *filling;
	struct arena_chunk *slab_hint; /* dirty_place's last find for a slab */
	size_t active_pages;       /* pages in slabs and large blocks */
	size_t dirty_pages;        /* the sum of ndirty */
	list_t free_slabs;
	uint64_t slab_sweep_ms;    /* next slab_sweep */
	uint64_t chunks_taken;     /* ever (tcache_gc) */
	/* Runs given back, ever; gives when a walk for miss_npages dirty pages
	 * failed: none for as many can succeed before a give (backed_instead). */
	uint64_t gives, miss_gives;
	size_t miss_npages;
	/* Blocks given back by other threads: a lock-free stack through their
	 * first word, drained by the lock's next holder (remote.c). */
	_Atomic(void *) remote;
	atomic_long remote_bytes;
	/* Transfer batches per cached class: chains for refills to take whole, a
	 * lock-free stack through each chain's second word (remote.c). */
	_Atomic(void *) xfer[NCACHED];
	atomic_uint xfer_untaken[NCACHED]; /* pushed since a take of xfer[c] */
	char *meta_cur, *meta_end; /* bump space for slab descriptors */
	atomic_uint nthreads;      /* threads whose cache points here */
	uint64_t next_sweep_ms;    /* sweep_tick's next look */
	/* Refills that took a batch; that count at the last stale look. */
	uint32_t xfer_takes, xfer_seen;
} __attribute__((aligned(64))) arena_t;

/* ---- thread caches */

/* 32 bytes: class c's bin is at 32 * (c + 1) (bin_off). */
typedef struct tbin {
	/* free pushes onto head, malloc pops avail, a dry avail takes head whole */
	void *head;
	/* max - blocks held: free takes a place with a decrement */
	int32_t room;
	uint32_t max;
	/* Beside head: counting costs no cache line.  Frees = nmalloc + held +
	 * nfree_adj.  A freed list holds its class's sampling countdown. */
	union {
		uint64_t nmalloc;
		size_t prof_left;
	};
	void *avail;
} tbin_t;

/* Another arena's blocks freed here, per class, going home in batches. */
typedef struct fbin {
	void *head;
	uint32_t n;
	uint32_t max;   /* n at which they go; 0: no live cache */
	uint64_t nfree;
	uint64_t pad;
} fbin_t;

enum tcache_state { TC_NONE = 0, TC_ACTIVE, TC_DEAD };

typedef struct tcache {
	/* The bins start one bin in, so a bin's offset indexes slab_checks (entry
	 * 0 passes nothing); the place holds the arena's salt. */
	uint32_t salt;
	/* A refill's fresh blocks not linked yet (tcache.c, "linked lazily"):
	 * lazy_n blocks of lazy_class from lazy_base, in the order lazy_cur +=
	 * lazy_step mod lazy_m. */
	uint16_t lazy_n, lazy_cur, lazy_step, lazy_m;
	uint32_t lazy_class;
	char *lazy_base;
	uint64_t unused; /* to the first bin */
	tbin_t bins[NCACHED];
	/* With heap profiles, the lists free pushes onto (PROF_FREED_OFF on), so
	 * malloc never hands out a block uncounted by the sampling. */
	tbin_t freed[NCACHED];
	/* Uncached classes' counts.  Owner writes, statistics read (relaxed). */
	uint64_t large_nmalloc[NCLASSES - NCACHED];
	uint64_t large_nfree[NCLASSES - NCACHED];
	/* frees = nmalloc + held + this */
	int64_t nfree_adj[NCACHED];
	arena_t *arena;
	/* bytes the lists grew past their first sizes */
	size_t grown;
	/* overflowed since the last refill: the refill grows the list */
	uint8_t flushed[NCACHED];
	/* nmalloc (low 32 bits) at the last flush (tcache_grow: a burst).  Sizes
	 * here keep tcache_t's layout: a bin at the page offset of its blocks'
	 * links makes their loads wait on its stores (4K aliasing). */
	uint32_t flush_nmalloc[NCACHED];
	uint8_t state;
	link_t link;
	/* Other arenas' blocks freed here, at bin offsets (foreign_at); the second
	 * half at the freed lists' (heap profiles). */
	fbin_t foreign[2 * NCACHED];
	/* tcache_gc: its last run; per list the blocks held then, lowered at
	 * refills and flushes, and nmalloc.  Owner only. */
	uint64_t gc_ms;
	uint32_t gc_events;        /* slow paths: every GC_EVERY-th samples */
	/* a refill took a chunk: a look is due */
	bool gc_fresh;
	/* lists hold at most CACHE_GROW_MAX blocks */
	uint16_t gc_count[NCACHED];
	uint16_t gc_low[NCACHED];
	uint64_t gc_nmalloc[NCACHED];
	uint64_t gc_seen[NCACHED]; /* nmalloc at the last sample */
} tcache_t;
/* Its size places every bin in a page (flush_nmalloc, above): a change of
 * it is measured first. */
_Static_assert(sizeof(tcache_t) == 10968, "tcache_t's size keeps its bins off 4 KiB aliases");

/* ---- configuration (ARENA_CONF: docs/tuning.md) */

#define PROF_PATH_MAX 256

enum misuse_action { MISUSE_ABORT = 0, MISUSE_WARN, MISUSE_IGNORE };
enum purge_kind { PURGE_DONTNEED = 0, PURGE_FREE, PURGE_OFF };
enum thp_policy { THP_AUTO = 0, THP_ALWAYS, THP_NEVER };
enum tristate { TRI_AUTO = 0, TRI_ON, TRI_OFF };
enum memory_limit_kind { MEMLIMIT_AUTO = 0, MEMLIMIT_OFF, MEMLIMIT_BYTES, MEMLIMIT_PERCENT };
#define LIMIT_MIN_BYTES ((size_t)1 << 20) /* memory_limit's least */

typedef struct config {
	unsigned narenas;          /* 0: four per CPU */
	bool stats_print;
	bool tcache;
	uint8_t misuse;            /* enum misuse_action */
	uint8_t purge;             /* enum purge_kind */
	uint8_t thp;               /* enum thp_policy */
	uint8_t fine_purge;        /* enum tristate */
	uint8_t background_thread; /* enum tristate: auto once two threads allocate */
	bool secure;               /* secure mode (secure.c) */
	long decay_ms;             /* -1: never by time; 0: at once */
	long huge_decay_ms;        /* -1: decay_ms; HUGE_DECAY_AUTO */
	bool tcache_gc;
	bool guard_large;          /* a guard page after large blocks (large.c) */
	unsigned dirty_cap;        /* % of active; 0: off */
	bool sim_no_madv_free;
	bool sim_no_thp;
	uint8_t sim_thp;           /* enum thp_sys + 1; 0: the kernel's */
	uint8_t sim_thp_probe;     /* enum sim_probe */
	size_t remap_min;
	bool populate_on_grow;
	bool sim_no_dontunmap;
	bool sim_no_getrandom;
	bool sim_no_guard;
	bool purge_batch;
	bool debug;
	bool prof;
	bool prof_leak;
	size_t prof_sample;
	size_t prof_interval;
	char prof_dump[PROF_PATH_MAX];
	uint8_t memory_limit_kind; /* enum memory_limit_kind (limit.c) */
	size_t memory_limit;       /* bytes, or percent (MEMLIMIT_PERCENT) */
	bool sim_no_poll;          /* behave as without eventfd/ppoll (pressure.c) */
	bool sim_no_pagemap_scan;  /* arena_stats_resident by mincore (stats.c) */
	char sim_cgroup_root[PROF_PATH_MAX]; /* tests: "/" of the cgroup files */
} config_t;

#endif /* ARENA_TYPES_H */
