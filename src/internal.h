/* libarena's internal functions, layer by layer (data structures: types.h). */
#ifndef ARENA_INTERNAL_H
#define ARENA_INTERNAL_H

#include "types.h"
#include <errno.h>
#include <stdarg.h>
#include <string.h>

#define API __attribute__((visibility("default")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((size_t)(a) - 1))

static inline void errno_enomem(void) { errno = ENOMEM; }

/* ---- os.c: the only layer that talks to the kernel about memory -------- */
typedef struct os_counters {
	atomic_ulong mmap, munmap, mprotect, madvise, mremap;
	atomic_ulong purged_dontneed, purged_free; /* bytes */
	atomic_ulong advised_huge;                 /* chunks given MADV_HUGEPAGE */
} os_counters_t;
enum thp_sys { THP_SYS_NONE = 0, THP_SYS_NEVER, THP_SYS_MADVISE, THP_SYS_ALWAYS };
extern os_counters_t os_count;
extern uint8_t os_thp;
extern char os_thp_defrag[16];
extern bool os_has_madv_free;
extern bool os_has_dontunmap;
extern size_t os_block_limit; /* requests above fail with ENOMEM (<= HUGE_MAX) */
void os_init(void);
uint64_t os_now_ms(void);
bool os_getenv(const char *name, char *value, size_t size);
uint8_t os_purge(void *addr, size_t size, uint8_t kind);
bool os_advise(void *addr, size_t size, uint8_t advice);
void *os_reserve(size_t size, size_t align);   /* PROT_NONE, aligned     */
bool os_commit(void *addr, size_t size);       /* make read-write        */
void *os_map_meta(size_t size);                /* zeroed, read-write     */
void *os_map_meta_aligned(size_t size, size_t align);
void os_advise_meta_huge(void *addr, size_t size);
void os_unmap(void *addr, size_t size);
bool os_purge_dontneed(void *addr, size_t size); /* afterwards: zero      */
unsigned os_ncpus(void);
bool os_move_pages(void *src, void *dst, size_t size); /* src left zero */
void os_populate(void *addr, size_t size);
bool os_map_fixed(void *addr, size_t size);     /* fresh, replacing       */
bool os_is_mapped(void *addr, size_t size);     /* no hole (<= 2 MiB)     */

/* ---- out.c: messages on stderr without stdio or malloc ----------------- */
void out_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void out_vprintf(const char *fmt, va_list ap);
void misuse(const char *what, const void *ptr);
void misuse_in(const char *op, const char *what, const void *ptr);
_Noreturn void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- config.c ------------------------------------------------------------ */
extern config_t conf;
void config_read(void);

/* ---- sizeclass.c ------------------------------------------------------- */
extern const size_t class_size[NCLASSES];
extern uint8_t class_slab_pages[NSMALL];
extern uint16_t class_nblocks[NSMALL];
extern uint32_t class_div_magic[NSMALL];
void sizeclass_init(void);

/* Size class of a request of at most LARGE_MAX bytes: pure arithmetic, so
 * malloc's fast path needs no table and works before initialisation. */
static inline unsigned size_class(size_t size)
{
	if (size <= 128)
		return size ? (unsigned)((size - 1) >> 4) : 0;
	unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)(size - 1));
	unsigned shift = k - 2; /* size in (2^k, 2^(k+1)], 4 steps of 2^(k-2) */
	unsigned j = (unsigned)((size - 1 - ((size_t)1 << k)) >> shift); /* 0..3 */
	return 8 + (k - 7) * 4 + j;
}

/* Index of the block at byte offset off of a slab (exact for every offset
 * inside a slab: checked in sizeclass_init). */
static inline unsigned slab_block_index(unsigned sclass, size_t off)
{
	return (unsigned)((off * class_div_magic[sclass]) >> 32);
}

/* ---- chunk.c: regions and runs of chunks ------------------------------- */
extern region_t regions[MAX_REGIONS];
extern atomic_uint nregions;
void chunk_init(void);
void *chunk_alloc(size_t nchunks, size_t align, uint8_t kind, size_t size, bool *zero);
void chunk_free(void *base, size_t nchunks);
bool chunk_extend(void *base, size_t old_n, size_t new_n, size_t size);
void chunk_shrink(void *base, size_t old_n, size_t new_n, size_t size);
size_t chunk_move(void *src, void *dst, size_t n, size_t usable);
size_t chunk_purge_all(void);
void chunk_decay(void);
void chunk_advise(void *base, size_t n, uint8_t want);
void chunk_stats(size_t *mapped, size_t *reserved, size_t *free_chunks, size_t *dirty,
		 size_t *lazy);
void chunk_lock_all(void);
void chunk_unlock_all(void);

/* The descriptor of the chunk holding p, or NULL when p is not in any region
 * of ours.  Never touches memory outside our own tables. */
chunk_desc_t *chunk_desc_of_other(const void *p);
static inline chunk_desc_t *chunk_desc_of(const void *p)
{
	/* Region 0 first, without the loop: it is all there is, mostly.  Its
	 * size is 0 until it exists. */
	size_t off = (size_t)((uintptr_t)p - (uintptr_t)regions[0].base);
	if (likely(off < regions[0].size))
		return &regions[0].desc[off >> CHUNK_SHIFT];
	return chunk_desc_of_other(p);
}

static inline void *chunk_base_of(const void *p)
{
	return (void *)((uintptr_t)p & ~(uintptr_t)CHUNK_MASK);
}

static inline void *chunk_desc_addr(const chunk_desc_t *d)
{
	const region_t *r = &regions[d->region];
	return r->base + ((size_t)(d - r->desc) << CHUNK_SHIFT);
}

/* ---- pagemap.c: free pages of an arena chunk --------------------------- */
void pagemap_init(arena_chunk_t *c, bool zero);
long pagemap_find(arena_chunk_t *c, size_t npages, size_t align_pages);
bool pagemap_range_free(const arena_chunk_t *c, size_t first, size_t npages);
bool pagemap_take(arena_chunk_t *c, size_t first, size_t npages);
size_t pagemap_give(arena_chunk_t *c, size_t first, size_t npages);
size_t pagemap_purge(arena_chunk_t *c, uint8_t kind);
void pagemap_count(const arena_chunk_t *c, size_t *dirty, size_t *lazy);

static inline size_t page_index(const arena_chunk_t *c, const void *p)
{
	return (size_t)((const char *)p - (const char *)c) >> PAGE_SHIFT;
}

static inline void *page_addr(arena_chunk_t *c, size_t idx)
{
	return (char *)c + (idx << PAGE_SHIFT);
}

/* ---- arena.c ------------------------------------------------------------ */
extern arena_t arenas[MAX_ARENAS];
extern unsigned narenas;
void arenas_init(void);
arena_t *arena_pick(void);
void *arena_pages_alloc(arena_t *a, size_t npages, size_t align_pages,
			uint8_t kind, uint8_t sclass, bool *zero);
void arena_pages_free(arena_chunk_t *c, size_t first, size_t npages);
void arena_free_chain(arena_t *a, void *head, void *tail);
void arena_drain_remote(arena_t *a);
size_t arena_purge_all(void);
bool fine_purge_on(void);
void arena_fine_decay_all(void);
void arena_lock_all(void);
void arena_unlock_all(void);

static inline void arena_lock(arena_t *a) { pthread_mutex_lock(&a->lock); }
static inline void arena_unlock(arena_t *a) { pthread_mutex_unlock(&a->lock); }

/* ---- slab.c ---------------------------------------------------------------- */
unsigned slab_alloc_batch(arena_t *a, unsigned sclass, void **out, unsigned n, uint64_t *zero);
void slab_free_block(arena_chunk_t *c, slab_t *s, void *p);
bool slab_block_free(const slab_t *s, const void *p);

/* ---- large.c --------------------------------------------------------------- */
void *large_alloc(size_t size, size_t align, bool zero);
unsigned large_alloc_batch(arena_t *a, unsigned sclass, void **out, unsigned n);
void large_free(arena_chunk_t *c, size_t idx);
bool large_resize_in_place(arena_chunk_t *c, size_t idx, size_t size);

/* ---- huge.c ---------------------------------------------------------------- */
void *huge_alloc(size_t size, size_t align, bool zero);
void huge_free(chunk_desc_t *d, void *p);
bool huge_resize_in_place(chunk_desc_t *d, size_t size);
void *huge_move(chunk_desc_t *d, void *p, size_t size);
extern atomic_ulong huge_nmalloc, huge_nfree, huge_bytes;
extern atomic_ulong huge_nin_place, huge_nremap, huge_ncopy;

void stats_memset_skipped(size_t bytes); /* stats.c */

/* ---- tcache.c --------------------------------------------------------------- */
extern _Thread_local tcache_t tc __attribute__((tls_model("initial-exec")));
extern uintptr_t tcache_key;
arena_t *thread_arena(void);
void *tcache_alloc_slow(unsigned sclass);
void tcache_free_slow(void *p, unsigned sclass);
void count_alloc(unsigned sclass);
void count_free(unsigned sclass);

/* A relaxed increment of a counter this thread alone writes (statistics read
 * it from other threads). */
uint64_t *tcache_counter(tcache_t *t, unsigned sclass, bool is_free);
static inline void counter_inc(uint64_t *c)
{
	__atomic_store_n(c, *c + 1, __ATOMIC_RELAXED);
}

/* A cached block's first word links to the next block.  Its low bit
 * (blocks are 16-byte aligned) says the block itself reads zero past that
 * word: fresh slab memory, handed to the cache by a refill. */
#define LINK_ZERO ((uintptr_t)1)
static inline void *link_next(const void *block)
{
	return (void *)(*(const uintptr_t *)block & ~LINK_ZERO);
}

/* Lists hold blocks only while the cache is live, so pop and push count in
 * the cache itself. */
static inline void *tcache_pop(tbin_t *b)
{
	void **p = b->head;
	b->head = link_next(p);
	p[1] = NULL; /* the key: a later free must not look like a double one */
	b->count--;
	counter_inc(&b->nmalloc);
	return p;
}

static inline void tcache_push(tbin_t *b, void *block)
{
	void **p = block;
	p[0] = b->head;
	p[1] = (void *)tcache_key;
	b->head = p;
	b->count++;
	counter_inc(&b->nfree);
}

/* malloc of a small class: a pop from this thread's list, else the arena. */
static inline void *tcache_alloc(unsigned sclass)
{
	tbin_t *b = &tc.bins[sclass];
	if (likely(b->head != NULL))
		return tcache_pop(b);
	return tcache_alloc_slow(sclass);
}

/* calloc of size bytes of a small class: as tcache_alloc, but a block
 * known to be zero needs only its link word cleared (the key word was
 * cleared by the pop). */
static inline void *tcache_calloc(unsigned sclass, size_t size)
{
	tbin_t *b = &tc.bins[sclass];
	void **p = b->head;
	if (unlikely(p == NULL)) {
		p = tcache_alloc_slow(sclass);
		if (p)
			memset(p, 0, size);
		return p;
	}
	bool zero = *(uintptr_t *)p & LINK_ZERO;
	tcache_pop(b);
	if (zero) {
		p[0] = NULL;
		stats_memset_skipped(size > 2 * sizeof(void *) ? size - 2 * sizeof(void *) : 0);
	} else {
		memset(p, 0, size);
	}
	return p;
}

/* free of a valid small block of class sclass. */
static inline void tcache_free(void *p, unsigned sclass)
{
	tbin_t *b = &tc.bins[sclass];
	if (likely(b->count < b->max && ((uintptr_t *)p)[1] != tcache_key)) {
		tcache_push(b, p);
		return;
	}
	tcache_free_slow(p, sclass);
}
void tcache_flush_bin(tcache_t *t, unsigned sclass, unsigned keep);
bool tcache_block_freed(void *p, unsigned sclass);
void tcache_init_key(void);
void tcache_lock_list(void);
void tcache_unlock_list(void);
void tcache_after_fork_child(void);
void tcache_sum(uint64_t *nmalloc, uint64_t *nfree, unsigned *nthreads);

/* ---- purge.c ----------------------------------------------------------------- */
size_t purge_all(void);
void purge_background_start(void);
void purge_after_fork_child(void);

/* ---- stats.c ------------------------------------------------------------------ */

/* ---- debug.c: ARENA_CONF=debug:true --------------------------------------------- */
void *debug_malloc(size_t size);
void *debug_aligned(size_t align, size_t size);
void *debug_calloc(size_t total);
void *debug_realloc(void *p, size_t size);
void debug_free(void *p, const char *op);
void debug_free_sized(void *p, size_t align, size_t size);
size_t debug_usable(void *p);
void debug_forget_links(void *p, size_t size);

/* ---- api.c --------------------------------------------------------------------- */
void *api_malloc_plain(size_t size);
void *api_aligned_plain(size_t align, size_t size);
void api_free_plain(void *p);
size_t api_usable_plain(void *p, const char **error);
extern const char api_freed_block[]; /* the error for a block found free */
extern atomic_int init_done;
bool init_slow(void);
static inline bool ensure_init(void)
{
	return likely(atomic_load_explicit(&init_done, memory_order_acquire)) || init_slow();
}

#endif /* ARENA_INTERNAL_H */
