/*
 * libarena's data structures, all in one place (each layer's functions are in
 * internal.h).  Address space, from big to small:
 *
 *   region   one reservation of address space (PROT_NONE until committed),
 *            2 MiB-aligned; chunks are cut from it.  Usually there is one.
 *   chunk    2 MiB, 2 MiB-aligned: the unit the kernel backs with one huge
 *            page.  Either free, an arena chunk (pages for slabs and large
 *            blocks, with a header in its first pages), or part of a huge
 *            block (a run of whole chunks, no header inside).
 *   page     4 KiB.  Arena chunks keep one page_info per page and bitmaps of
 *            which free pages are still backed (dirty) or known zero.
 *   block    what malloc returns: small (a slot of a slab of one size
 *            class), large (a run of pages), huge (a run of chunks).
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
/* An arena chunk's header starts chunk_colour() bytes into its chunk: one
 * of CHUNK_COLOURS offsets CHUNK_COLOUR_BYTES apart (internal.h). */
#define CHUNK_COLOURS ((size_t)16)
#define CHUNK_COLOUR_BYTES ((size_t)64)

#define MIN_ALIGN 16
#define SMALL_MAX ((size_t)16384)      /* largest small block (slab slot) */
#define LARGE_MAX ((size_t)1 << 20)    /* largest large block (page run)  */
/* 16..128 by 16 (8 classes), 4 per doubling up to 1 KiB (12) and the
 * header classes 272 and 528, and 960 (15), 8 per doubling from 1 to 8 KiB
 * with the header classes 1040, 2112 and 4368 (27; 7280 in 7168's place),
 * and 8704..16384 (8) = 58 small;
 * 4 per doubling from 16 KiB to 1 MiB (6 doublings) = 24 large
 * (sizeclass.c).  At most ARENA_STATS_MAX_CLASSES (96, include/arena.h:
 * arena_stats_t has an entry per class). */
#define NSMALL 58
#define NCLASSES 82
/* Thread caches hold small blocks and large ones up to CACHE_MAX: classes
 * [0, NCACHED). */
#define CACHE_MAX ((size_t)65536)
#define NCACHED 66
/* A slab holds at most this many blocks: 16-byte blocks in one page. */
#define SLAB_MAX_BLOCKS 256

/* Largest request served at all: keeps size arithmetic far from overflow. */
#define HUGE_MAX ((size_t)1 << 46)

/* realloc moves a huge block of at least this many bytes with mremap and
 * copies smaller ones (ARENA_CONF remap_min).  0: every huge block, since
 * moving 2 MiB (the least a huge block holds) costs 10-33 us against 105 us
 * (huge pages) to 245 us (4 KiB pages) for a copy into faulted memory, and
 * 1.6-4.4 ms into fresh memory (bench/probes/remap_cost.c; docs/design.md,
 * "Moving pages"). */
#define REMAP_MIN_DEFAULT ((size_t)0)

/* The globals written at start-up (a fresh process's first malloc): in
 * .data, side by side, not scattered over .bss.  A .bss page costs a page
 * fault at its first write, and two when it is read first (a mutex's kind,
 * a count: the zero page, then a copy); .data is mapped from the file
 * 16 pages at a fault (fault-around), and each page written costs one
 * copy.  A fresh process's calloc(1 GiB) took 9-10 faults with them in
 * .bss (test_pages wants fewer than 10). */
#define START_UP __attribute__((section(".data.start_up")))
/* huge_decay_ms's default (ARENA_CONF huge_decay_ms:auto): 50 ms while few
 * free chunks are dirty, at free past that (purge.c, purge_chunk_at_free). */
#define HUGE_DECAY_AUTO (-2L)

#define MAX_ARENAS 64
/* An arena's salt is its index shifted by this (arena_salt): a slab
 * (at most 255 pages: class_slab_pages is a byte) is shorter than one
 * step, and 64 steps fit in the 32 bits of a slab offset. */
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

/* ---- chunks ---------------------------------------------------------- */

enum chunk_kind {
	CK_UNUSED = 0, /* never handed out (beyond the region's frontier)   */
	CK_FREE,       /* in a free run of chunks                           */
	CK_ARENA,      /* arena chunk: header + slabs + large blocks        */
	CK_HUGE,       /* first chunk of a huge block                       */
	CK_HUGE_BODY,  /* later chunk of a huge block                       */
};

/* What the kernel holds for free memory (a free chunk, a free page). */
enum mem_state {
	MS_DIRTY = 0, /* written (or may have been), still backed             */
	MS_ZERO,      /* reads zero: fresh, or purged with MADV_DONTNEED       */
	MS_LAZY,      /* MADV_FREE given: backed or not, contents unknown      */
};

/* The THP advice last given for a chunk (the kernel keeps it per range). */
enum thp_advice { ADV_NONE = 0, ADV_HUGE, ADV_NOHUGE };

/* One per chunk of a region, in a table beside the region (never inside the
 * chunk: huge blocks start at the chunk's first byte).  Written under the
 * chunk lock (advice: by the chunk's owner); read without it by free() for
 * pointers the caller owns. */
typedef struct chunk_desc {
	uint8_t kind;
	uint8_t state;      /* CK_FREE: enum mem_state                        */
	uint8_t region;     /* index of the region holding this chunk         */
	uint8_t advice;     /* enum thp_advice                                */
	uint32_t nchunks;   /* CK_FREE run head and tail, CK_HUGE: run length;
			       CK_HUGE_BODY: distance back to the head        */
	size_t size;        /* CK_HUGE: usable size (request rounded to pages) */
	link_t bin_link;    /* CK_FREE run heads: on their free-run bin      */
	/* CK_FREE and MS_DIRTY: the list of dirty free chunks, oldest first,
	 * and when this one became dirty (ms, monotonic). */
	link_t lru;
	uint64_t dirty_ms;
	/* Neighbouring chunks with the same tag lie in one kernel mapping
	 * (VMA).  Every call that may split a mapping (commit, THP advice, a
	 * move) gives the chunks it touched a new tag; the kernel may merge
	 * mappings again, which only makes this conservative.  Moves use it
	 * to give mremap one mapping at a time (chunk_move). */
	uint32_t map_tag;
	/* CK_FREE: when the dirty cap purged it (ms, low 32 bits; 0: it did
	 * not), so that taking it again soon counts as the cap's regret. */
	uint32_t capped_ms;
} chunk_desc_t;
_Static_assert(sizeof(chunk_desc_t) == 64, "a chunk descriptor is 64 bytes (docs/design.md)");
_Static_assert(MAX_REGIONS <= UINT8_MAX + 1, "chunk_desc_t.region indexes every region");

typedef struct region {
	char *base;
	size_t size;         /* bytes */
	size_t nchunks;      /* size of the reservation in chunks */
	size_t frontier;     /* chunks [0, frontier) were handed out once      */
	size_t committed;    /* chunks [0, committed) are readable and writable */
	bool desc_huge;      /* the descriptor table was advised MADV_HUGEPAGE */
	chunk_desc_t *desc;  /* nchunks descriptors */
	/* One word per 4 KiB page, for free()'s fast path: a page of a slab
	 * holds slab_entry(class, slab base) (internal.h), any other page 0.
	 * Written under the arena lock when a slab is made or unmade; read
	 * without it.  8 bytes per 4 KiB (0.2%) of address space, reserved
	 * without commit charge and touched 4 KiB per arena chunk. */
	uint64_t *ptab;
} region_t;

/* ---- arena chunks and pages ----------------------------------------- */

enum page_kind {
	PG_FREE = 0,
	PG_HEADER,
	PG_SLAB,
	PG_LARGE,
};

typedef struct page_info {
	uint8_t kind;
	uint8_t sclass;     /* PG_SLAB, PG_LARGE: size class of the run       */
	uint16_t head;      /* PG_SLAB, PG_LARGE: index of the run's 1st page */
} page_info_t;
_Static_assert(CHUNK_WORDS * 64 == CHUNK_PAGES, "the page bitmaps have a bit per page");
_Static_assert(CHUNK_PAGES <= UINT16_MAX, "16 bits count a chunk's pages (head, nfree, longest)");
_Static_assert(NCLASSES <= UINT8_MAX + 1, "8 bits hold every class (page_info_t, slab_t)");

struct arena;
struct slab;

/* The header at the start of every arena chunk.  Page states:
 *   in use       page_info.kind is PG_SLAB or PG_LARGE (free_map bit 0)
 *   free, dirty  free_map 1, dirty_map 1, lazy_map 0 (written, still backed)
 *   free, lazy   free_map 1, dirty_map 0, lazy_map 1 (MADV_FREE given)
 *   free, zero   free_map 1, dirty_map 0, lazy_map 0 (fresh or DONTNEED) */
typedef struct arena_chunk {
	struct arena *arena;
	uint32_t salt;                   /* arena_salt(arena), for free_foreign */
	uint16_t nfree;                  /* free pages                      */
	uint16_t longest;                /* >= the longest free run (pagemap.c) */
	link_t link;                     /* on the arena's list of chunks */
	uint32_t ndirty;                 /* free dirty pages (dirty_map's count) */
	uint64_t free_map[CHUNK_WORDS];
	uint64_t dirty_map[CHUNK_WORDS];
	uint64_t lazy_map[CHUNK_WORDS];  /* free pages given MADV_FREE       */
	/* Fine purging: when a page was first given back since the last
	 * purge.  Not reset when the chunk's dirty pages are all taken again,
	 * so decay may purge a page freed since sooner than decay_ms: kept so,
	 * it cost 3.8% of bench/soak's operations and saved 0.08 of its
	 * RSS/live median in a 300 s pair (docs/soak.md, eighth round). */
	uint64_t dirty_ms;
	uint64_t advice_ms;              /* when advised_huge last changed   */
	bool advised_huge;               /* MADV_HUGEPAGE given (dense)      */
	uint64_t capped_ms;              /* last purge by the dirty cap      */
	/* Pages taken again within decay_ms of that purge (the cap's regret
	 * in this chunk), since it: arena.c, refill_huge. */
	uint32_t regret_pages;
	page_info_t page[CHUNK_PAGES];
	/* PG_SLAB pages: their slab; the first page of a large block above
	 * CACHE_MAX (a run of as many pages as its request needs, large.c):
	 * the run's length in pages */
	union page_ref {
		struct slab *slab;
		size_t run_pages;
	} ref[CHUNK_PAGES];
} arena_chunk_t;
/* The header, moved by its chunk's colour (internal.h, chunk_colour), stays
 * inside the header pages. */
_Static_assert(sizeof(arena_chunk_t) + (CHUNK_COLOURS - 1) * CHUNK_COLOUR_BYTES <=
		       CHUNK_HDR_PAGES * PAGE_SIZE,
	       "a coloured arena chunk header fits its pages");
_Static_assert(sizeof(arena_chunk_t) + (CHUNK_COLOURS - 1) * CHUNK_COLOUR_BYTES >
		       (CHUNK_HDR_PAGES - 1) * PAGE_SIZE,
	       "CHUNK_HDR_PAGES is the fewest pages that hold a coloured header");

/* ---- slabs -------------------------------------------------------------- */

/* Out of line, so blocks start at the slab's first byte and power-of-two
 * classes are naturally aligned (what small aligned requests use). */
typedef struct slab {
	link_t link;              /* on the bin's list, or the arena's free descriptors */
	char *base;               /* first block                               */
	uint16_t nfree;
	uint16_t nblocks;
	uint8_t sclass;
	uint8_t listed;           /* SLAB_ON_NONE, SLAB_ON_NONFULL, SLAB_ON_EMPTY */
	/* Blocks from this index on were never handed out since the slab was
	 * built on zero pages: they still read zero (nblocks: none known). */
	uint16_t zero_from;
	uint64_t free_bits[SLAB_MAX_BLOCKS / 64]; /* bit set = block free      */
} slab_t;
_Static_assert(sizeof(slab_t) == 64, "a slab descriptor is 64 bytes (docs/design.md)");
_Static_assert(SLAB_MAX_BLOCKS == PAGE_SIZE / MIN_ALIGN && SLAB_MAX_BLOCKS <= UINT16_MAX,
	       "slab_t's counts and bitmap hold the blocks of a page of the smallest class");

enum slab_list { SLAB_ON_NONE = 0, SLAB_ON_NONFULL, SLAB_ON_EMPTY };

typedef struct bin {
	list_t nonfull;           /* slabs with free blocks and blocks in use  */
	/* Slabs with every block free, the last emptied first: taken only
	 * when no slab of nonfull has a block (slab.c, "Empty slabs"). */
	list_t empty;
	uint16_t nempty;          /* slabs on empty                            */
	uint16_t empty_low;       /* the fewest on empty since the last sweep  */
} bin_t;

/* ---- arenas -------------------------------------------------------------- */

typedef struct arena {
	mutex_t lock;
	bin_t bins[NSMALL];
	list_t chunks;             /* every arena chunk of this arena          */
	size_t nchunks;
	size_t peak_chunks;        /* the most it ever held at once             */
	size_t nempty;             /* chunks with every page free              */
	size_t ndense;             /* chunks advised huge (thp.c)              */
	/* The last chunk born huge in a growing heap (thp_new_chunk_huge),
	 * until it turns dense: kept from turning sparse while it fills. */
	struct arena_chunk *filling;
	size_t active_pages;       /* pages in slabs and large blocks          */
	size_t dirty_pages;        /* free dirty pages of its chunks (the sum
				      of their ndirty; the dirty cap reads it) */
	list_t free_slabs;         /* recycled slab descriptors                */
	uint64_t slab_sweep_ms;    /* slab.c slab_sweep: when it is due next   */
	uint64_t chunks_taken;     /* arena chunks it took, ever (a thread
				      cache's refill reads it: tcache_gc) */
	/* Page runs given back, ever; and, when a walk for dirty pages found
	 * no place for miss_npages pages, that count then (arena.c,
	 * backed_instead: no later walk for as many pages can find one
	 * before a run is given back). */
	uint64_t gives, miss_gives;
	size_t miss_npages;
	/* Blocks given back by threads of other arenas (and by this arena's
	 * own when its lock was taken): a lock-free stack linked through the
	 * blocks' first word, drained by the next holder of the lock; and the
	 * bytes on it, which bound it (arena.c, arena_free_chain). */
	_Atomic(void *) remote;
	atomic_long remote_bytes;
	/* Per cached class, batches of its blocks flushed by threads of other
	 * arenas, for this arena's refills to take whole (arena.c, "transfer
	 * batches"): a lock-free stack of chains, linked through the second
	 * word of each chain's first block; counted in remote_bytes too. */
	_Atomic(void *) xfer[NCACHED];
	char *meta_cur, *meta_end; /* bump space for slab descriptors          */
	atomic_uint nthreads;      /* threads whose cache points here          */
	uint64_t next_sweep_ms;    /* arena.c sweep_tick: when to look again   */
	/* Refills that took a transfer batch, and that count when the
	 * background thread last looked (remote.c, arena_drain_stale). */
	uint32_t xfer_takes, xfer_seen;
} __attribute__((aligned(64))) arena_t;

/* ---- thread caches -------------------------------------------------------- */

/* 32 bytes: the fast paths find a class's bin at 32 * (class + 1) bytes
 * from the cache's start (internal.h, bin offsets). */
typedef struct tbin {
	/* Two lists of blocks linked through their first word: free pushes
	 * onto head, malloc pops avail, and when avail runs dry, head's blocks
	 * become avail at once (tcache.c, "Two lists").  A malloc right after
	 * a free of the same class then does not wait on that free's stores
	 * to the list (mimalloc's local free list, per thread here):
	 * glibc_thread 1t +26% (docs/design.md, "Two lists per class").  A freed
	 * list (heap profiles) uses head only. */
	void *head;
	/* max - blocks in both lists.  free takes a place with one decrement
	 * and goes to its slow path when that went below 0; the slow path
	 * gives the place back. */
	int32_t room;
	uint32_t max;
	/* What this thread's program asked for of this class; here, beside
	 * head, so that counting costs no extra cache line.  What it gave back
	 * is not counted per free (that was an instruction on free's fast
	 * path): it is nmalloc + the blocks in the lists + tcache_t's
	 * nfree_adj, which the slow paths keep right when blocks enter or
	 * leave the lists other than by a malloc or a free (tcache.c,
	 * tcache_count).  A freed list (heap
	 * profiles, tc.freed) counts no mallocs: it holds prof_left there, its
	 * class's sampling countdown (prof_cache.c), beside the head that
	 * malloc's miss takes with it. */
	union {
		uint64_t nmalloc;
		size_t prof_left;
	};
	void *avail;
} tbin_t;

/* Blocks this thread freed that belong to another arena, gathered per
 * class and given back to their arena in batches (tcache.c, "foreign
 * blocks"), never handed out here. */
typedef struct fbin {
	void *head;
	uint32_t n;
	uint32_t max;   /* n at which they go; 0 without a live cache */
	uint64_t nfree; /* blocks put here (tcache_count adds them)    */
	uint64_t pad;   /* 32 bytes, as a bin: found at the same offset */
} fbin_t;

enum tcache_state { TC_NONE = 0, TC_ACTIVE, TC_DEAD };

typedef struct tcache {
	/* The bins start one bin in, so that a bin's offset is also the index
	 * of its class's slab_checks entry, whose entry 0 is the one that
	 * nothing passes (internal.h).  The first bin's place holds the salt
	 * of this thread's arena (arena_salt), which free's fast path adds. */
	uint32_t salt;
	uint32_t unused[7]; /* to the first bin, BIN_BYTES in */
	tbin_t bins[NCACHED];
	/* With heap profiles on (prof_cache.c), the lists free pushes onto,
	 * PROF_FREED_OFF bytes after each class's bin: the page-table words of
	 * slabs then carry that offset (slab_entry), so that free's fast path
	 * (unchanged) finds these, and malloc's fast path, which pops bins,
	 * never hands out a block that was not counted against the sampling
	 * countdown.  Empty and without room with prof off. */
	tbin_t freed[NCACHED];
	/* The same counts for the classes not cached.  All counters are written
	 * by their thread only and read by statistics from others (relaxed). */
	uint64_t large_nmalloc[NCLASSES - NCACHED];
	uint64_t large_nfree[NCLASSES - NCACHED];
	/* Per cached class, what tcache_count adds to nmalloc and the blocks
	 * in the lists to make the frees (tcache.c, adj_add). */
	int64_t nfree_adj[NCACHED];
	arena_t *arena;
	/* Bytes by which this thread's lists grew past their first sizes
	 * (tcache.c, bin_grow; purge_cache_may_grow). */
	size_t grown;
	/* Byte c: class c's list was flushed (it overflowed) since its last
	 * refill; a refill that finds it set grows the list (tcache.c). */
	uint8_t flushed[NCACHED];
	/* Per list, its nmalloc (low 32 bits) at its last flush: a list that
	 * runs dry within its length of mallocs after it was full was emptied
	 * by a burst, not by a random walk (tcache.c, tcache_grow).  Made
	 * room for by gc_count and gc_low's 16 bits: tcache_t's size decides
	 * where the bins fall in a page (the thread pointer is at the end of
	 * the library's TLS block), and a bin whose page offset matches that
	 * of the blocks' links (0 for the classes of 4 KiB multiples) makes
	 * their loads wait on its stores ("4K aliasing"): 264 bytes more put
	 * the 4 KiB class's bin of bench/glibc_simple -T's worker at offset 0,
	 * its 4 KiB steps 11.2 -> 14.6 ns a pair. */
	uint32_t flush_nmalloc[NCACHED];
	uint8_t state;
	link_t link;                /* on the list of live caches (statistics) */
	/* Blocks of other arenas freed here, by class, found at a bin's
	 * offset from foreign_at (internal.h).  The second half is found at
	 * the freed lists' offsets (heap profiles: free's foreign path finds
	 * it from a page-table word with PROF_FREED_OFF in it); its blocks go
	 * home with their class, index - NCACHED. */
	fbin_t foreign[2 * NCACHED];
	/* The cache's GC (tcache.c, tcache_gc): when it last ran, and per list
	 * the blocks it held then, lowered at every refill (to 0: the list ran
	 * dry) and flush (to what was kept), and the list's nmalloc then.
	 * Written by the owner thread only, on its slow paths. */
	uint64_t gc_ms;
	uint32_t gc_events;        /* slow paths: every GC_EVERY-th samples */
	/* A refill since the last look made its arena take a chunk (tcache.c,
	 * tcache_gc: a look is due then, whatever the clock). */
	bool gc_fresh;
	/* (16 bits: a list holds at most 2,048 blocks, tcache.c
	 * CACHE_GROW_MAX; they made room for flush_nmalloc, so that tcache_t,
	 * and with it where each bin falls in a page, did not change: see
	 * flush_nmalloc) */
	uint16_t gc_count[NCACHED];
	uint16_t gc_low[NCACHED];  /* least length seen at slow paths since */
	uint64_t gc_nmalloc[NCACHED];
	uint64_t gc_seen[NCACHED]; /* nmalloc at the last sampled slow path */
} tcache_t;
/* Its size places every bin in a page (flush_nmalloc, above): a change of
 * it is measured first. */
_Static_assert(sizeof(tcache_t) == 10968, "tcache_t's size keeps its bins off 4 KiB aliases");

/* ---- configuration --------------------------------------------------------- */

#define PROF_PATH_MAX 256 /* prof_dump's PATH, with its NUL */

enum misuse_action { MISUSE_ABORT = 0, MISUSE_WARN, MISUSE_IGNORE };
enum purge_kind { PURGE_DONTNEED = 0, PURGE_FREE, PURGE_OFF };
enum thp_policy { THP_AUTO = 0, THP_ALWAYS, THP_NEVER };
enum tristate { TRI_AUTO = 0, TRI_ON, TRI_OFF };

typedef struct config {
	unsigned narenas;          /* 0: four per CPU                          */
	bool stats_print;
	bool tcache;
	uint8_t misuse;            /* enum misuse_action                       */
	uint8_t purge;             /* enum purge_kind                          */
	uint8_t thp;               /* enum thp_policy                          */
	uint8_t fine_purge;        /* enum tristate: purge page runs           */
	uint8_t background_thread; /* enum tristate: auto starts it once a
				      second thread allocates           */
	long decay_ms;             /* -1: never purge by time; 0: at once      */
	long huge_decay_ms;        /* chunks of huge blocks; -1: decay_ms;     */
	                           /* HUGE_DECAY_AUTO: purge.c's bound         */
	bool tcache_gc;            /* thread caches give back unused blocks   */
	unsigned dirty_cap;        /* % of active memory kept dirty at most
				      without the background thread; 0: off */
	bool sim_no_madv_free;     /* behave as on a kernel without MADV_FREE  */
	bool sim_no_thp;           /* behave as on a kernel without THP        */
	uint8_t sim_thp;           /* 0, or the THP mode to behave as under:
				      enum thp_sys + 1 (internal.h)            */
	uint8_t sim_thp_probe;     /* enum sim_probe: the THP probe's finding  */
	size_t remap_min;          /* huge blocks at least this big move by mremap */
	bool populate_on_grow;     /* fault in the new tail of a grown huge block */
	bool sim_no_dontunmap;     /* behave as without MREMAP_DONTUNMAP       */
	bool sim_no_getrandom;     /* behave as without getrandom(2)           */
	bool purge_batch;          /* a chunk's free runs in one process_madvise
				      (off by default: os.c, os_purge_many)  */
	bool debug;                /* canaries after blocks, junk in freed ones */
	bool prof;                 /* heap profiling: sample allocations      */
	bool prof_leak;            /* at exit, the sampled blocks still live   */
	size_t prof_sample;        /* mean bytes between samples               */
	size_t prof_interval;      /* dump each time in-use grows this much    */
	char prof_dump[PROF_PATH_MAX]; /* dump at exit to PATH.PID.N.heap      */
} config_t;

#endif /* ARENA_TYPES_H */
