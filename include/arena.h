/*
 * libarena: public interface.
 *
 * Linking libarena.a (or LD_PRELOAD=libarena.so) replaces the whole malloc
 * family (malloc, free, calloc, realloc, ...).  The arena_-prefixed functions
 * below are the same allocator under names of its own, for programs that link
 * statically and want to name it, and for statistics and control.
 */
#ifndef ARENA_H
#define ARENA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ARENA_VERSION "0.3.0"

void *arena_malloc(size_t size);
void arena_free(void *ptr);
void *arena_calloc(size_t nmemb, size_t size);
void *arena_realloc(void *ptr, size_t size);
void *arena_reallocarray(void *ptr, size_t nmemb, size_t size);
int arena_posix_memalign(void **out, size_t alignment, size_t size);
void *arena_aligned_alloc(size_t alignment, size_t size);
void *arena_memalign(size_t alignment, size_t size);
void *arena_valloc(size_t size);
void *arena_pvalloc(size_t size);
size_t arena_malloc_usable_size(void *ptr);
void arena_free_sized(void *ptr, size_t size);
void arena_free_aligned_sized(void *ptr, size_t alignment, size_t size);
int arena_malloc_trim(size_t pad);
void arena_malloc_stats(void);
int arena_mallopt(int param, int value);

/* Gives free memory back to the kernel now; returns bytes purged. */
size_t arena_purge(void);

/* Writes a heap profile of the sampled allocations (ARENA_CONF=prof:true;
 * docs/profiling.md) to path: pprof's profile.proto when path ends in .pb
 * or .pb.gz (not compressed), else the gperftools heap profile text.  NULL:
 * the next PATH.PID.N.heap of prof_dump:PATH ("arena" without it).
 * Returns 0, or an errno value (ENOENT: profiling is off). */
int arena_prof_dump(const char *path);

/* Size classes of small blocks (slabs) and large blocks (page runs): room
 * for this many; nclasses says how many there are (80 since 0.2.0, when
 * this grew from 64: arena_stats_t changed size, hence the version). */
#define ARENA_STATS_MAX_CLASSES 96

typedef struct arena_class_stats {
	size_t size;        /* usable size of a block of this class (of the
			     * largest, above 64 KiB: blocks there take the
			     * pages their request needs) */
	uint64_t nmalloc;   /* blocks handed out, ever */
	uint64_t nfree;     /* blocks given back, ever */
	uint64_t live;      /* nmalloc - nfree at the time of reading */
	/* Pages (4 KiB) of this class's slabs and runs in every arena: its
	 * live blocks, the free slots beside them and the blocks parked in
	 * thread caches.  pages * 4096 - live * size is what the class holds
	 * beyond what the program asked for (its fragmentation). */
	uint64_t pages;     /* (since 0.3.0: arena_stats_t changed size) */
	/* Blocks of this class held in the threads' caches, free (in no
	 * program's hands, not in their slabs either); part of pages. */
	uint64_t cached;
} arena_class_stats_t;

typedef struct arena_stats {
	/* Bytes in blocks the program holds (usable sizes; blocks parked in
	 * thread caches are not counted). */
	size_t allocated;
	/* Bytes of pages that hold live blocks or slabs (small + large +
	 * huge), so active >= allocated. */
	size_t active;
	/* Bytes of chunks taken from the address-space reservation and made
	 * accessible (committed); includes free chunks not yet returned. */
	size_t mapped;
	/* Bytes of address space reserved (PROT_NONE until committed). */
	size_t reserved;
	/* Free memory by state: still backed (dirty); given MADV_FREE (lazy:
	 * the kernel may or may not have taken it back); known to read zero
	 * (fresh, or purged with MADV_DONTNEED). */
	size_t dirty;
	size_t lazy;
	size_t zero;
	size_t chunks;          /* chunks in use (arena chunks + huge chunks) */
	size_t chunks_free;     /* committed chunks that are free */
	/* Arenas in use: opened by a thread's first allocation (how many
	 * there may be, ARENA_CONF narenas or 4 per CPU, is not counted here:
	 * reading it would ask the kernel for this process's CPUs, a call a
	 * seccomp sandbox may forbid). */
	unsigned narenas;
	unsigned nthreads;      /* running threads that have used the allocator */
	uint64_t nmalloc_small, nfree_small;
	uint64_t nmalloc_large, nfree_large;
	uint64_t nmalloc_huge, nfree_huge;
	/* System calls made by the allocator, by kind. */
	uint64_t sys_mmap, sys_munmap, sys_mprotect, sys_madvise, sys_mremap;
	/* Bytes purged, by kind (madvise calls are in sys_madvise). */
	uint64_t purged_dontneed, purged_free;
	/* Bytes calloc did not have to write because they were known zero. */
	uint64_t memset_skipped;
	/* Chunks (2 MiB) given MADV_HUGEPAGE, ever. */
	uint64_t chunks_advised_huge;
	/* realloc of huge blocks (> 1 MiB): resized without moving (grown into
	 * the free chunks after the block, or shrunk); moved by mremap (pages
	 * moved, not bytes); moved by copying (smaller than ARENA_CONF
	 * remap_min, or no MREMAP_DONTUNMAP). */
	uint64_t huge_resized_in_place, huge_moved_remap, huge_moved_copy;
	/* 1 when huge blocks are moved with mremap(MREMAP_DONTUNMAP): the kernel
	 * has it (Linux 5.7+) and ARENA_CONF does not forbid it. */
	unsigned remap_dontunmap;
	/* The system's transparent huge page mode as read at start-up:
	 * "always", "madvise", "never", or "none" (no THP, or sim_no_thp). */
	char thp_mode[8];
	unsigned nclasses;
	arena_class_stats_t classes[ARENA_STATS_MAX_CLASSES];
	/* The background purging thread (ARENA_CONF background_thread): 1 while
	 * it runs; how many times it woke (each wait that ended) and how many
	 * decay passes it ran.  Without it, the dirty cap: free memory kept
	 * dirty at most (bytes; SIZE_MAX when no cap applies). */
	unsigned background_thread;
	uint64_t background_wakeups, background_passes;
	size_t dirty_cap;
	uint64_t purged_cap;    /* bytes the dirty cap purged, ever */
	/* The huge-page decision made at run time (thp:auto; docs/design.md,
	 * "Deciding at run time"): whether fresh memory of huge blocks gets
	 * huge pages.  "unprobed" (no probe yet: it does), "huge" (a fresh huge
	 * page costs no more than 4 KiB pages), "small" (it costs more: fresh
	 * chunks stay in 4 KiB pages), "unformed" (advised, no huge page formed:
	 * no advice given), "off" (the kernel has no THP or says never),
	 * "always"/"never" (ARENA_CONF thp:always/never).  The probes run, the
	 * last one's thread CPU time to write 2 MiB advised huge and 2 MiB of
	 * 4 KiB pages (ns), and the chunks of huge blocks the decision kept in
	 * 4 KiB pages. */
	char thp_decision[12];
	uint64_t thp_probes, thp_probe_huge_ns, thp_probe_small_ns;
	uint64_t thp_chunks_small;
	/* Arena chunks advised huge before their first write because their
	 * arena's heap was growing (thp:auto; docs/design.md, "A growing heap
	 * in huge pages"); of them, those growing back into chunks the dirty
	 * cap had just purged ("A heap growing back").  Chunks whose free pages
	 * the dirty cap purged, collapsed into a huge page again as the heap
	 * refilled them (same section). */
	uint64_t thp_chunks_born_huge, thp_chunks_born_regrown, thp_chunks_refilled;
	/* A growing heap's own check of its chunks born huge (thp:auto;
	 * docs/design.md, "A growing heap's own first writes"): how many such
	 * chunks' first writes were timed; at the last, the mean of the recent
	 * ones and 512 times the median first write of a 4 KiB page of chunks
	 * born small (thread CPU time, ns per 2 MiB); and the chunks born small
	 * because huge ones cost more. */
	uint64_t thp_heap_checks, thp_heap_huge_ns, thp_heap_small_ns, thp_heap_kept_small;
	/* Pages of large blocks (above 64 KiB) taken from another arena's
	 * dirty free pages where the thread's own arena would have faulted in
	 * fresh memory, ever (docs/design.md, "Arenas lend their dirty pages"). */
	uint64_t large_lent_pages;
	/* Purges of several free runs in one process_madvise (Linux 5.10,
	 * on the calling process 6.15; not counted in sys_madvise), and the
	 * runs they purged; both 0 where the kernel lacks it (then each run
	 * is one madvise) and unless ARENA_CONF=purge_batch:true. */
	uint64_t sys_process_madvise, purge_batched_runs;
	/* The soft memory limit (ARENA_CONF memory_limit; docs/tuning.md,
	 * "The memory limit"): bytes, 0 for none, and where it came from
	 * ("none", "ARENA_CONF", "cgroup v2 memory.high", "cgroup v2
	 * memory.max", "cgroup v1 memory.soft_limit_in_bytes", "cgroup v1
	 * memory.limit_in_bytes", "RAM"); the pressure signal watched ("none",
	 * "MEMORY_PRESSURE_WATCH", "memory.pressure", "memory.events",
	 * "memory.pressure_level", "counters"), the signals seen, and the bytes
	 * purged because the limit was passed and because of signals; the last
	 * signal's time from its arrival to all purged (us). */
	size_t memory_limit;
	char memory_limit_source[40];
	char pressure_source[24];
	uint64_t pressure_signals, purged_limit, purged_pressure, pressure_purge_us;
	/* What libarena holds resident by its own account (the memory limit's
	 * figure, kept without system calls), by state: live (pages of blocks
	 * in use, of slabs and of thread caches, and arena chunks' headers),
	 * free dirty, lazy-free (MADV_FREE'd), and the sum.  It takes every
	 * page of a block, and of a free chunk that held one, for resident,
	 * and a huge page's untouched rest for not: arena_stats_resident()
	 * has the kernel's count. */
	size_t resident, resident_live, resident_dirty, resident_lazy;
} arena_stats_t;

/* Fills *out; returns 0, or -1 with errno = EINVAL when out is NULL. */
int arena_stats_get(arena_stats_t *out);

/* Prints statistics to stderr (what malloc_stats() prints). */
void arena_stats_print(void);

/* What libarena's chunks (its blocks' memory: not its tables) hold
 * resident now, as the kernel counts their pages, by state: pages in use
 * (blocks, slabs, thread caches' blocks, huge blocks' chunks whole), free
 * dirty, lazy-free (given MADV_FREE, not yet taken back), free known zero
 * (a huge page's untouched rest, khugepaged's fill); the sum (what smaps'
 * Rss counts there) and the part in transparent huge pages.  source: how
 * the kernel was asked, "PAGEMAP_SCAN" (Linux 6.7), "mincore" (no huge
 * part), "none" (all 0).  arena_stats_t's resident figures are libarena's
 * own account, kept without system calls; this one walks the page tables
 * (a few ms per GiB): a slow path. */
typedef struct arena_resident {
	size_t live, dirty, lazy, zero, total, huge;
	char source[16];
} arena_resident_t;

/* Fills *out; returns 0, or -1 with errno = EINVAL when out is NULL. */
int arena_stats_resident(arena_resident_t *out);

/* Bytes of the allocator's own memory backed by transparent huge pages (the
 * AnonHugePages of its mappings in /proc/self/smaps; read on each call, so
 * not cheap).  0 when the file cannot be read. */
size_t arena_stats_anon_huge(void);

#ifdef __cplusplus
}
#endif
#endif /* ARENA_H */
