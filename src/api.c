/* The public API: the malloc family under both names, the fast paths, and
 * the dispatch between the plain allocator (alloc.c), debug mode and
 * secure mode. */
#include "arena.h"
#include "internal.h"

#include <string.h>

/* ---- entry points */

/* Leave the plain path: before initialisation, in debug or secure mode,
 * with heap profiles.  One byte compare. */
static inline bool unusual(void)
{
	return unlikely(__atomic_load_n(&api_mode, __ATOMIC_RELAXED) != MODE_PLAIN);
}

/* After unusual(): initialised (false when that failed), and in debug mode? */
static bool debug_mode(void)
{
	return ensure_init() && __atomic_load_n(&api_mode, __ATOMIC_ACQUIRE) == MODE_DEBUG;
}

/* After unusual(): initialised, and in secure mode? */
static bool secure_mode(void)
{
	return ensure_init() && __atomic_load_n(&api_mode, __ATOMIC_ACQUIRE) == MODE_SECURE;
}

static void *alloc_aligned(size_t align, size_t size)
{
	if (unusual()) {
		if (debug_mode())
			return debug_aligned(align, size);
		if (secure_mode())
			return secure_aligned(align, size);
	}
	return alloc_plain_aligned(align, size);
}

/* A block found by block_of, freed (the checked frees). */
static void block_free(void *p, const block_t *b)
{
	if (unusual() && secure_mode())
		secure_block_free(p, b);
	else
		alloc_block_free(p, b);
}

static bool is_pow2(size_t x)
{
	return x && !(x & (x - 1));
}

/* Out of line: the fast paths stay leaf functions. */
static __attribute__((noinline)) void *malloc_other(size_t size)
{
	if (__atomic_load_n(&api_mode, __ATOMIC_RELAXED) == MODE_PROF) {
		void *p = malloc_plain(size);
		background_start();
		return p;
	}
	if (debug_mode())
		return debug_malloc(size);
	return secure_mode() ? secure_malloc(size) : malloc_plain(size);
}

/* What the fast path does not serve: bigger blocks, an empty list, and
 * every call before initialisation and in debug mode (empty caches). */
static __attribute__((noinline)) void *malloc_miss(size_t size)
{
	uint8_t mode = __atomic_load_n(&api_mode, __ATOMIC_RELAXED);
	if (unlikely(mode != MODE_PLAIN)) {
		if (mode == MODE_SECURE && ensure_init())
			return secure_malloc(size);
		if (likely(mode == MODE_PROF) && likely(size <= SIZE_LUT_MAX))
			return prof_cache_miss(size_bin_off[(size + 15) >> 4]);
		return malloc_other(size);
	}
	void *p = malloc_plain(size);
	/* the background thread starts here: no lock held, and malloc, not
	 * pthread_create's calloc */
	background_start();
	return p;
}

API void *arena_malloc(size_t size)
{
	size_t off;
	if (likely(size <= SIZE_LUT_MAX))
		off = size_bin_off[(size + 15) >> 4];
	else if (size <= CACHE_MAX)
		off = bin_off(size_class_large(size));
	else
		return malloc_miss(size);
	void *p = tcache_alloc_at(off);
	return likely(p != NULL) ? p : malloc_miss(size);
}

static __attribute__((noinline)) void free_miss(void *p)
{
	if (unusual()) {
		uint8_t mode = __atomic_load_n(&api_mode, __ATOMIC_RELAXED);
		if (mode == MODE_SECURE && ensure_init()) {
			if (p)
				secure_free(p);
			return;
		}
		/* heap profiles first: every large cached block comes here */
		if (mode == MODE_PROF) {
			if (p)
				alloc_plain_free(p);
		} else if (debug_mode()) {
			debug_free(p, "free");
		} else if (p) {
			if (secure_mode())
				secure_free(p);
			else
				alloc_plain_free(p);
		}
	} else if (p) {
		alloc_plain_free(p);
	}
}

/* free of a region 0 pointer the fast path refused: another arena's block
 * onto the foreign list, a sampled page's block to prof_cache_free_near,
 * anything else to free_miss. */
static __attribute__((noinline)) void free_other(void *p, uint64_t e)
{
	size_t k = (size_t)(e >> 32);
	/* k 0: maybe a huge block */
	if (k != 0) {
		const slab_check_t *ck = (const slab_check_t *)((const char *)slab_checks + k);
		uint32_t salt = chunk_hdr_of(p)->salt;
		uint64_t x = (uint32_t)((uint32_t)(e + (uintptr_t)p) + salt);
		tcache_t *t = &tc;
		fbin_t *f = foreign_at(t, k);
		if (x * ck->magic < ck->thresh && ((uintptr_t *)p)[1] != tcache_key && f->max) {
			/* never a sampled block: its page's check passes nothing */
			foreign_push(t, f, p);
			return;
		}
		/* heap profiles: a page where a sampled block lives */
		if (unlikely(k & PROF_SAMPLED_K) && prof_cache_free_near(p, e))
			return;
	}
	free_miss(p);
}

/* free_other with p's page word read again: the fast path's split keeps
 * only its high half, and holds no register for more. */
static __attribute__((noinline)) void free_refused(void *p)
{
	size_t off = (size_t)((uintptr_t)p - (uintptr_t)regions[0].base);
	free_other(p, __atomic_load_n(&regions[0].ptab[off >> PAGE_SHIFT], __ATOMIC_RELAXED));
}

/* The fast path: the page word gives the class and, with this arena's
 * salt, p's offset in its slab, which must be a block start.  Another
 * arena's block takes free_other, any other pointer free_miss.  No mode
 * test: region 0 is empty before initialisation, and debug mode's checks
 * pass nothing. */
API void arena_free(void *p)
{
	size_t off = (size_t)((uintptr_t)p - (uintptr_t)regions[0].base);
	if (likely(off < regions[0].size)) {
		size_t k;
		uint64_t e = __atomic_load_n(&regions[0].ptab[off >> PAGE_SHIFT], __ATOMIC_RELAXED);
		uint64_t x = slab_entry_split_tc(e, p, &k);
		if (likely(slab_check_passes(x, k))) {
			free_cached_at(p, k);
			return;
		}
		free_refused(p);
		return;
	}
	free_miss(p);
}

API void *arena_calloc(size_t nmemb, size_t size)
{
	size_t total;
	if (unlikely(__builtin_mul_overflow(nmemb, size, &total)))
		return errno_enomem(), NULL;
	if (unusual()) {
		if (debug_mode())
			return debug_calloc(total);
		if (secure_mode())
			return secure_calloc(total);
	}
	if (total <= SMALL_MAX)
		return calloc_small(total);
	return alloc_big(total, MIN_ALIGN, true);
}

/* realloc but for a small block of this thread's arena. */
static __attribute__((noinline)) void *realloc_other(void *p, size_t size)
{
	if (unusual()) {
		if (debug_mode())
			return debug_realloc(p, size);
		if (secure_mode())
			return secure_realloc(p, size);
	}
	if (!p)
		return arena_malloc(size);
	if (size == 0) { /* as glibc: free and return NULL */
		arena_free(p);
		return NULL;
	}
	block_t b = block_of(p);
	if (unlikely(b.kind == BLK_BAD)) {
		out_misuse("realloc of an invalid pointer", p);
		return errno_enomem(), NULL;
	}
	if (unlikely(block_freed(p, &b))) {
		out_misuse("realloc of a freed block", p);
		return errno_enomem(), NULL;
	}
	if (alloc_resize_in_place(&b, size))
		return p;
	if (b.kind == BLK_HUGE && size > LARGE_MAX && os_block_fits(size)) {
		void *q = huge_move(b.desc, p, size);
		if (unlikely(prof_on) && q && q != p)
			prof_moved(p, q);
		return q;
	}
	void *q = malloc_plain(size);
	if (!q)
		return NULL;
	size_t old = block_usable(&b);
	memcpy(q, p, old < size ? old : size);
	alloc_block_free(p, &b);
	return q;
}

/* A small block of the thread's arena stays within its class (as
 * alloc_resize_in_place) or moves. */
API void *arena_realloc(void *p, size_t size)
{
	size_t k = likely(!unusual()) ? realloc_small_off(p, size) : 0;
	if (likely(k != 0)) {
		if (size <= SMALL_MAX && size_bin_off[(size + 15) >> 4] == k)
			return p;
		return alloc_realloc_move(p, size, k);
	}
	return realloc_other(p, size);
}

API void *arena_reallocarray(void *p, size_t nmemb, size_t size)
{
	size_t total;
	if (__builtin_mul_overflow(nmemb, size, &total))
		return errno_enomem(), NULL;
	return arena_realloc(p, total);
}

/* As glibc: EINVAL with errno untouched, ENOMEM with errno set. */
API int arena_posix_memalign(void **out, size_t align, size_t size)
{
	if (!is_pow2(align) || align % sizeof(void *) != 0)
		return EINVAL;
	void *p = alloc_aligned(align, size);
	if (!p) {
		errno = ENOMEM;
		return ENOMEM;
	}
	*out = p;
	return 0;
}

/* As glibc: up to 16 is malloc; above SIZE_MAX / 2 + 1, EINVAL; not a
 * power of two, rounded up; too large, ENOMEM (docs/compat.md). */
API void *arena_memalign(size_t align, size_t size)
{
	if (align <= MIN_ALIGN)
		return arena_malloc(size);
	if (align > SIZE_MAX / 2 + 1) {
		errno = EINVAL;
		return NULL;
	}
	if (!is_pow2(align)) {
		size_t a = (size_t)2 * MIN_ALIGN;
		while (a < align)
			a <<= 1;
		align = a;
	}
	if (align > HUGE_MAX)
		return errno_enomem(), NULL;
	return alloc_aligned(align, size);
}

/* glibc's aligned_alloc is memalign (it rounds a bad alignment up). */
API void *arena_aligned_alloc(size_t align, size_t size)
{
	return arena_memalign(align, size);
}

API void *arena_valloc(size_t size)
{
	return alloc_aligned(PAGE_SIZE, size);
}

API void *arena_pvalloc(size_t size)
{
	if (size > HUGE_MAX)
		return errno_enomem(), NULL;
	return alloc_aligned(PAGE_SIZE, size ? ALIGN_UP(size, PAGE_SIZE) : PAGE_SIZE);
}

API size_t arena_malloc_usable_size(void *p)
{
	if (!p)
		return 0;
	if (unusual()) {
		if (debug_mode())
			return debug_usable(p);
		if (secure_mode())
			return secure_usable(p);
	}
	block_t b = block_of(p);
	if (b.kind == BLK_BAD) {
		out_misuse("malloc_usable_size of an invalid pointer", p);
		return 0;
	}
	if (block_freed(p, &b)) {
		out_misuse("malloc_usable_size of a freed block", p);
		return 0;
	}
	return block_usable(&b);
}

/* Whether size could have made b: its class, or for runs of pages and
 * huge blocks its usable size. */
static bool size_fits_block(const block_t *b, size_t size)
{
	if (b->kind == BLK_HUGE) /* secure mode: from CACHE_MAX, maybe a page more */
		return api_mode == MODE_SECURE ? size > CACHE_MAX && size <= b->desc->size &&
						 size + 2 * PAGE_SIZE > b->desc->size
					       : size > LARGE_MAX && ALIGN_UP(size, PAGE_SIZE) == b->desc->size;
	if (size > LARGE_MAX)
		return false;
	if (b->sclass >= NCACHED) /* a page run: the request rounded to 4 KiB */
		return size > CACHE_MAX && ALIGN_UP(size, PAGE_SIZE) == block_usable(b);
	unsigned c = size_class(size);
	if (c == b->sclass)
		return true;
	/* aligned_alloc takes the smallest class from c on whose size the
	 * alignment divides: the block's own alignment gives its class */
	if (b->sclass >= NSMALL || c > b->sclass)
		return false;
	size_t align = class_size[b->sclass] & (0 - class_size[b->sclass]);
	while (c < b->sclass && (class_size[c] & (align - 1)) != 0)
		c++;
	return c == b->sclass;
}

API void arena_free_sized(void *p, size_t size)
{
	if (!p)
		return;
	if (unusual() && debug_mode()) {
		debug_free_sized(p, 0, size);
		return;
	}
	block_t b = block_of(p);
	if (b.kind != BLK_BAD && !size_fits_block(&b, size)) {
		out_misuse("free_sized with a size the block was not allocated with", p);
		return;
	}
	block_free(p, &b);
}

/* Aligned blocks may be of a larger class: only a size beyond the block,
 * or a wrong alignment, is caught. */
API void arena_free_aligned_sized(void *p, size_t align, size_t size)
{
	if (!p)
		return;
	if (unusual() && debug_mode()) {
		if (is_pow2(align))
			debug_free_sized(p, align, size);
		else
			out_misuse("free_aligned_sized with an invalid alignment", p);
		return;
	}
	block_t b = block_of(p);
	if (b.kind != BLK_BAD && (!is_pow2(align) || ((uintptr_t)p & (align - 1)) != 0)) {
		out_misuse("free_aligned_sized with an alignment the block was not allocated with", p);
		return;
	}
	if (b.kind != BLK_BAD && size > block_usable(&b)) {
		out_misuse("free_aligned_sized with a size larger than the block", p);
		return;
	}
	block_free(p, &b);
}

API int arena_malloc_trim(size_t pad)
{
	(void)pad;
	if (!ensure_init())
		return 0;
	return arena_purge() > 0;
}

API size_t arena_purge(void)
{
	return ensure_init() ? background_purge_now() : 0;
}

/* No effect (ARENA_CONF holds the knobs); glibc's answers: 1, but 0 for
 * M_MXFAST outside 0..80 * sizeof(size_t) / 4. */
API int arena_mallopt(int param, int value)
{
	enum { M_MXFAST_PARAM = 1, MAX_FAST = 80 * sizeof(size_t) / 4 };
	if (param == M_MXFAST_PARAM && (value < 0 || value > MAX_FAST))
		return 0;
	return 1;
}

/* A heap profile to path, or to the next PATH.PID.N.heap. */
API int arena_prof_dump(const char *path)
{
	return ensure_init() ? prof_save(path) : ENOMEM;
}

/* ---- the standard names
 * (malloc_stats is stats.c's, mallinfo and malloc_info mallinfo.c's.) */

void *malloc(size_t) ALIAS(arena_malloc);
void free(void *) ALIAS(arena_free);
void *calloc(size_t, size_t) ALIAS(arena_calloc);
void *realloc(void *, size_t) ALIAS(arena_realloc);
void *reallocarray(void *, size_t, size_t) ALIAS(arena_reallocarray);
int posix_memalign(void **, size_t, size_t) ALIAS(arena_posix_memalign);
void *aligned_alloc(size_t, size_t) ALIAS(arena_aligned_alloc);
void *memalign(size_t, size_t) ALIAS(arena_memalign);
void *valloc(size_t) ALIAS(arena_valloc);
void *pvalloc(size_t) ALIAS(arena_pvalloc);
size_t malloc_usable_size(void *) ALIAS(arena_malloc_usable_size);
void free_sized(void *, size_t) ALIAS(arena_free_sized);
void free_aligned_sized(void *, size_t, size_t) ALIAS(arena_free_aligned_sized);
int malloc_trim(size_t) ALIAS(arena_malloc_trim);
int mallopt(int, int) ALIAS(arena_mallopt);
