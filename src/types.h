/*
 * libarena's data structures (each layer's functions: internal.h).
 *   region   a reservation of address space, PROT_NONE until committed,
 *            2 MiB-aligned; chunks are cut from it.
 *   chunk    2 MiB, 2 MiB-aligned: one huge page.  Free, an arena chunk
 *            (a header, then slabs and large blocks), or part of a huge
 *            block (a run of whole chunks, no header).
 *   page     4 KiB.  Arena chunks keep a page_info per page and bitmaps of
 *            which free pages are backed (dirty) or known zero.
 *   block    what malloc returns: small (a slot of a slab), large (a run
 *            of pages), huge (a run of chunks).
 */
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
/* Pages at the start of an arena chunk that hold its header. */
#define CHUNK_HDR_PAGES 2
#define CHUNK_USABLE_PAGES (CHUNK_PAGES - CHUNK_HDR_PAGES)
/* An arena chunk's header starts chunk_colour() bytes into its chunk. */
#define CHUNK_COLOURS ((size_t)16)
#define CHUNK_COLOUR_BYTES ((size_t)64)

#define MIN_ALIGN 16
#define SMALL_MAX ((size_t)16384)      /* largest slab slot */
#define LARGE_MAX ((size_t)1 << 20)    /* largest page run */
/* Small: 16..128 by 16 (8), 4 per doubling to 1 KiB with 272, 528 and 960
 * (15), 8 per doubling from 1 to 8 KiB with 1040, 2112, 4368 and 7280 for
 * 7168 (27), 8704..16384 (8).  Large: 4 per doubling from 16 KiB to 1 MiB
 * (24).  At most ARENA_STATS_MAX_CLASSES (include/arena.h). */
#define NSMALL 58
#define NCLASSES 82
/* Thread caches hold classes [0, NCACHED): blocks up to CACHE_MAX. */
#define CACHE_MAX ((size_t)65536)
#define NCACHED 66
/* 16-byte blocks in one page. */
#define SLAB_MAX_BLOCKS 256

/* The largest request: size arithmetic stays far from overflow. */
#define HUGE_MAX ((size_t)1 << 46)

/* realloc moves huge blocks of at least this many bytes with mremap, copies
 * smaller ones (ARENA_CONF remap_min). */
#define REMAP_MIN_DEFAULT ((size_t)0)

/* The globals written at start-up, side by side in .data: a .bss page costs
 * a fault at its first write (two if read first), while .data is mapped 16
 * pages at a fault (tests/test_pages counts a fresh process's faults). */
#define START_UP __attribute__((section(".data.start_up")))
/* huge_decay_ms:auto: 50 ms while few free chunks are dirty, at free past
 * that (purge_chunk_at_free). */
#define HUGE_DECAY_AUTO (-2L)

#define MAX_ARENAS 64
/* An arena's salt is its index << this (arena_salt): a slab (< 256 pages)
 * is shorter than a step, and 64 steps fit in a 32-bit slab offset. */
#define ARENA_SALT_SHIFT 20
#define MAX_REGIONS 64

/* ---- chunks */

enum chunk_kind {
	CK_UNUSED = 0, /* beyond the region's frontier */
	CK_FREE,       /* in a free run */
	CK_ARENA,      /* header + slabs + large blocks */
	CK_HUGE,       /* first chunk of a huge block */
	CK_HUGE_BODY,  /* later chunk of a huge block */
};

/* What the kernel holds for free memory. */
enum mem_state {
	MS_DIRTY = 0, /* written (or may be), backed */
	MS_ZERO,      /* reads zero: fresh, or MADV_DONTNEED */
	MS_LAZY,      /* MADV_FREE: backed or not, contents unknown */
};

/* The THP advice last given to a chunk. */
enum thp_advice { ADV_NONE = 0, ADV_HUGE, ADV_NOHUGE };

/* One per chunk, in a table beside its region (huge blocks start at the
 * chunk's first byte).  Written under the chunk lock (advice: by the
 * chunk's owner); read without it by free for pointers the caller owns. */
typedef struct chunk_desc {
	uint8_t kind;
	uint8_t state;      /* CK_FREE: enum mem_state */
	uint8_t region;     /* index of its region */
	uint8_t advice;     /* enum thp_advice */
	uint32_t nchunks;   /* CK_FREE run ends, CK_HUGE: length; CK_HUGE_BODY: to the head */
	size_t size;        /* CK_HUGE: request rounded to pages */
	link_t bin_link;    /* CK_FREE run heads: their bin */
	/* CK_FREE and MS_DIRTY: on the dirty LRU, and since when (ms) */
	link_t lru;
	uint64_t dirty_ms;
	/* Neighbouring chunks with one tag lie in one kernel mapping: every call
	 * that may split a mapping (commit, advice, a move) gives its chunks a new
	 * tag; the kernel merging them again only makes this conservative.
	 * chunk_map_move gives mremap one mapping at a time. */
	uint32_t map_tag;
	/* CK_FREE: when the dirty cap purged it (ms, low 32 bits; 0: not), so
	 * that taking it soon counts as the cap's regret. */
	uint32_t capped_ms;
} chunk_desc_t;

typedef struct region {
	char *base;
	size_t size;
	size_t nchunks;
	size_t frontier;     /* chunks [0, frontier) were handed out once */
	size_t committed;    /* chunks [0, committed) are read-write */
	bool desc_huge;      /* the descriptor table advised huge */
	chunk_desc_t *desc;
	/* A word per 4 KiB page for free's fast path: slab_entry() for a slab's
	 * pages, 0 for others.  Written under the arena lock, read without it. */
	uint64_t *ptab;
} region_t;

/* ---- arena chunks and pages */

enum page_kind {
	PG_FREE = 0,
	PG_HEADER,
	PG_SLAB,
	PG_LARGE,
};

typedef struct page_info {
	uint8_t kind;
	uint8_t sclass;     /* PG_SLAB, PG_LARGE: the run's class */
	uint16_t head;      /* PG_SLAB, PG_LARGE: the run's first page */
} page_info_t;

struct arena;
struct slab;

/* An arena chunk's header.  Page states:
 *   in use       page_info.kind PG_SLAB or PG_LARGE (free_map 0)
 *   free, dirty  free_map 1, dirty_map 1, lazy_map 0
 *   free, lazy   free_map 1, dirty_map 0, lazy_map 1 (MADV_FREE)
 *   free, zero   free_map 1, dirty_map 0, lazy_map 0 */
typedef struct arena_chunk {
	struct arena *arena;
	uint32_t salt;                   /* arena_salt(arena) */
	uint16_t nfree;                  /* free pages                      */
	uint16_t longest;                /* >= the longest free run */
	link_t link;
	uint32_t ndirty;                 /* dirty_map's count */
	uint64_t free_map[CHUNK_WORDS];
	uint64_t dirty_map[CHUNK_WORDS];
	uint64_t lazy_map[CHUNK_WORDS];
	/* Fine purging: when a page was first given back since the last purge;
	 * not reset when the dirty pages are taken again (decay may then purge a
	 * later page early, which costs less than tracking it). */
	uint64_t dirty_ms;
	uint64_t advice_ms;              /* when advised_huge last changed */
	bool advised_huge;               /* MADV_HUGEPAGE given (dense) */
	uint64_t capped_ms;              /* last purge by the dirty cap */
	/* pages taken again within decay_ms of it: the cap's regret */
	uint32_t regret_pages;
	page_info_t page[CHUNK_PAGES];
	/* PG_SLAB: the slab; a large block's first page above CACHE_MAX: the
	 * run's length */
	union page_ref {
		struct slab *slab;
		size_t run_pages;
	} ref[CHUNK_PAGES];
} arena_chunk_t;
_Static_assert(sizeof(arena_chunk_t) + (CHUNK_COLOURS - 1) * CHUNK_COLOUR_BYTES <=
		       CHUNK_HDR_PAGES * PAGE_SIZE,
	       "a coloured arena chunk header fits its pages");

/* ---- slabs */

/* Out of line, so that blocks start at the slab's first byte and
 * power-of-two classes are naturally aligned. */
typedef struct slab {
	link_t link;              /* on its bin's list, or the free descriptors */
	char *base;               /* first block */
	uint16_t nfree;
	uint16_t nblocks;
	uint8_t sclass;
	uint8_t listed;           /* enum slab_list */
	/* Blocks from this index on still read zero (nblocks: none). */
	uint16_t zero_from;
	uint64_t free_bits[SLAB_MAX_BLOCKS / 64]; /* set: free */
} slab_t;

enum slab_list { SLAB_ON_NONE = 0, SLAB_ON_NONFULL, SLAB_ON_EMPTY };

typedef struct bin {
	list_t nonfull;           /* slabs with free blocks and blocks in use */
	/* Slabs with every block free, the last emptied first: taken only when
	 * nonfull is empty (slab.c). */
	list_t empty;
	uint16_t nempty;
	uint16_t empty_low;       /* the fewest on empty since the last sweep */
} bin_t;

/* ---- arenas */

typedef struct arena {
	pthread_mutex_t lock;
	bin_t bins[NSMALL];
	list_t chunks;
	size_t nchunks;
	size_t peak_chunks;        /* the most it held */
	size_t nempty;             /* chunks with every page free */
	size_t ndense;             /* chunks advised huge (thp.c) */
	/* The last chunk born huge in a growing heap: not sparse while it fills. */
	struct arena_chunk *filling;
	size_t active_pages;       /* pages in slabs and large blocks */
	size_t dirty_pages;        /* free dirty pages: the sum of ndirty */
	list_t free_slabs;         /* recycled slab descriptors */
	uint64_t slab_sweep_ms;    /* next slab_sweep */
	uint64_t chunks_taken;     /* arena chunks taken, ever (tcache_gc) */
	/* Page runs given back, ever; when a walk for dirty pages found no place
	 * for miss_npages pages, gives then: no walk for as many can succeed
	 * before a run is given back (arena.c, backed_instead). */
	uint64_t gives, miss_gives;
	size_t miss_npages;
	/* Blocks given back by other arenas' threads (or this arena's when its
	 * lock was taken): a lock-free stack through the blocks' first word,
	 * drained by the next holder of the lock, bounded by remote_bytes
	 * (remote.c). */
	_Atomic(void *) remote;
	atomic_long remote_bytes;
	/* Per cached class, chains flushed by other arenas' threads, for refills
	 * to take whole (transfer batches, remote.c): a lock-free stack linked
	 * through each chain's first block's second word; in remote_bytes too. */
	_Atomic(void *) xfer[NCACHED];
	char *meta_cur, *meta_end; /* bump space for slab descriptors */
	atomic_uint nthreads;      /* threads whose cache points here */
	uint64_t next_sweep_ms;    /* arena.c sweep_tick: the next look */
	/* Refills that took a transfer batch, and that count at the background
	 * thread's last look (remote_drain_stale). */
	uint32_t xfer_takes, xfer_seen;
} __attribute__((aligned(64))) arena_t;

/* ---- thread caches */

/* 32 bytes: class c's bin is at 32 * (c + 1) bytes (internal.h, bin_off). */
typedef struct tbin {
	/* Two lists through the blocks' first word: free pushes onto head, malloc
	 * pops avail, and a dry avail takes head whole (tcache.c).  A freed list
	 * (heap profiles) uses head only. */
	void *head;
	/* max - blocks in both lists: free takes a place with a decrement, and its
	 * slow path gives it back when that went below 0. */
	int32_t room;
	uint32_t max;
	/* The class's mallocs, beside head: counting costs no cache line.  Frees
	 * are nmalloc + the blocks in the lists + nfree_adj (tcache_count).  A
	 * freed list counts no mallocs: it holds the class's sampling countdown
	 * (prof_cache.c). */
	union {
		uint64_t nmalloc;
		size_t prof_left;
	};
	void *avail;
} tbin_t;

/* Blocks of another arena freed here, per class, going home in batches
 * (tcache.c, "foreign blocks"). */
typedef struct fbin {
	void *head;
	uint32_t n;
	uint32_t max;   /* n at which they go; 0 without a live cache */
	uint64_t nfree; /* blocks put here (tcache_count) */
	uint64_t pad;   /* 32 bytes, as a bin */
} fbin_t;

enum tcache_state { TC_NONE = 0, TC_ACTIVE, TC_DEAD };

typedef struct tcache {
	/* The bins start one bin in, so that a bin's offset indexes its class's
	 * slab_checks entry (entry 0 passes nothing).  That place holds the salt
	 * of the thread's arena, which free's fast path adds. */
	uint32_t salt;
	uint32_t unused[7]; /* to the first bin */
	tbin_t bins[NCACHED];
	/* With heap profiles (prof_cache.c), the lists free pushes onto,
	 * PROF_FREED_OFF bytes after the bins: slabs' page-table words carry that
	 * offset, so malloc's fast path never hands out a block not counted
	 * against the sampling countdown.  Empty and without room otherwise. */
	tbin_t freed[NCACHED];
	/* The classes not cached.  Counters are written by their thread only, read
	 * by statistics (relaxed). */
	uint64_t large_nmalloc[NCLASSES - NCACHED];
	uint64_t large_nfree[NCLASSES - NCACHED];
	/* Per cached class: frees = nmalloc + blocks in the lists + this. */
	int64_t nfree_adj[NCACHED];
	arena_t *arena;
	/* Bytes this thread's lists grew past their first sizes (bin_grow). */
	size_t grown;
	/* Class c's list overflowed since its last refill: the refill grows it. */
	uint8_t flushed[NCACHED];
	/* Per list, nmalloc (low 32 bits) at its last flush: running dry within
	 * its length of mallocs after that is a burst (tcache_grow).  tcache_t's
	 * size sets where the bins fall in a page; a bin at the page offset of
	 * the blocks' links (0 for 4 KiB classes) makes their loads wait on its
	 * stores (4K aliasing), so fields are sized to keep the layout. */
	uint32_t flush_nmalloc[NCACHED];
	uint8_t state;
	link_t link;                /* on the list of live caches */
	/* Blocks of other arenas freed here, by class, at a bin's offset
	 * (foreign_at).  The second half sits at the freed lists' offsets (heap
	 * profiles) and goes home with class index - NCACHED. */
	fbin_t foreign[2 * NCACHED];
	/* The GC (tcache_gc): its last run, and per list the blocks held then,
	 * lowered at refills and flushes, and nmalloc then.  Owner only. */
	uint64_t gc_ms;
	uint32_t gc_events;        /* every GC_EVERY-th slow path samples */
	/* a refill since the last look took a chunk: a look is due */
	bool gc_fresh;
	/* 16 bits: a list holds at most CACHE_GROW_MAX (2,048) blocks */
	uint16_t gc_count[NCACHED];
	uint16_t gc_low[NCACHED];  /* least length since */
	uint64_t gc_nmalloc[NCACHED];
	uint64_t gc_seen[NCACHED]; /* nmalloc at the last sample */
} tcache_t;

/* ---- configuration */

#define PROF_PATH_MAX 256 /* with its NUL */

enum misuse_action { MISUSE_ABORT = 0, MISUSE_WARN, MISUSE_IGNORE };
enum purge_kind { PURGE_DONTNEED = 0, PURGE_FREE, PURGE_OFF };
enum thp_policy { THP_AUTO = 0, THP_ALWAYS, THP_NEVER };
enum tristate { TRI_AUTO = 0, TRI_ON, TRI_OFF };

typedef struct config {
	unsigned narenas;          /* 0: four per CPU */
	bool stats_print;
	bool tcache;
	uint8_t misuse;            /* enum misuse_action                       */
	uint8_t purge;             /* enum purge_kind                          */
	uint8_t thp;               /* enum thp_policy                          */
	uint8_t fine_purge;        /* enum tristate */
	uint8_t background_thread; /* enum tristate: auto once a second thread allocates */
	long decay_ms;             /* -1: never by time; 0: at once */
	long huge_decay_ms;        /* -1: decay_ms; HUGE_DECAY_AUTO: purge.c's */
	bool tcache_gc;            /* caches give back unused blocks */
	unsigned dirty_cap;        /* % of active kept dirty without the background thread; 0: off */
	bool sim_no_madv_free;     /* as without MADV_FREE */
	bool sim_no_thp;           /* as without THP */
	uint8_t sim_thp;           /* 0, or enum thp_sys + 1 to behave as under */
	uint8_t sim_thp_probe;     /* enum sim_probe */
	size_t remap_min;          /* huge blocks this big move by mremap */
	bool populate_on_grow;     /* fault in a grown huge block's tail */
	bool sim_no_dontunmap;     /* as without MREMAP_DONTUNMAP */
	bool sim_no_getrandom;     /* as without getrandom */
	bool purge_batch;          /* a chunk's runs in one process_madvise */
	bool debug;                /* canaries after blocks, junk in freed ones */
	bool prof;                 /* sample allocations */
	bool prof_leak;            /* at exit, the sampled blocks still live */
	size_t prof_sample;        /* mean bytes between samples */
	size_t prof_interval;      /* dump each time in-use grows this much */
	char prof_dump[PROF_PATH_MAX]; /* at exit, to PATH.PID.N.heap */
} config_t;

#endif /* ARENA_TYPES_H */
