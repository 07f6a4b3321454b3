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

#define ARENA_VERSION "0.1.0"

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

/* Size classes of small blocks (slabs) and large blocks (page runs). */
#define ARENA_STATS_MAX_CLASSES 64

typedef struct arena_class_stats {
	size_t size;        /* usable size of a block of this class */
	uint64_t nmalloc;   /* blocks handed out, ever */
	uint64_t nfree;     /* blocks given back, ever */
	uint64_t live;      /* nmalloc - nfree at the time of reading */
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
	/* Bytes of free pages still backed by memory (dirty). */
	size_t dirty;
	size_t chunks;          /* chunks in use (arena chunks + huge chunks) */
	size_t chunks_free;     /* committed chunks that are free */
	unsigned narenas;
	unsigned nthreads;      /* running threads that have used the allocator */
	uint64_t nmalloc_small, nfree_small;
	uint64_t nmalloc_large, nfree_large;
	uint64_t nmalloc_huge, nfree_huge;
	/* System calls made by the allocator, by kind. */
	uint64_t sys_mmap, sys_munmap, sys_mprotect, sys_madvise, sys_mremap;
	unsigned nclasses;
	arena_class_stats_t classes[ARENA_STATS_MAX_CLASSES];
} arena_stats_t;

/* Fills *out; returns 0, or -1 with errno = EINVAL when out is NULL. */
int arena_stats_get(arena_stats_t *out);

/* Prints statistics to stderr (what malloc_stats() prints). */
void arena_stats_print(void);

#ifdef __cplusplus
}
#endif
#endif /* ARENA_H */
