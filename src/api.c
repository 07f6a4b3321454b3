/* The public API: the malloc family under its standard names and with the
 * arena_ prefix, lazy initialisation, and fork handling. */
#include "arena.h"
#include "internal.h"

#include <sched.h>
#include <string.h>

/* ---- initialisation ---------------------------------------------------
 * Lazy, on the first call, safe before main, from constructors and from
 * inside dlsym.  The core (size classes, address space, arenas) is set up
 * first and never allocates; then pthread_key_create and pthread_atfork run,
 * which may call back into malloc: such re-entrant calls on the initialising
 * thread are served by the core.  Other threads wait for the end. */

atomic_int init_done;
static atomic_int init_started, core_ready;
/* How the API entry points behave, set once configuration is read: until
 * then every call takes the slow way through initialisation. */
enum api_mode { MODE_UNSET = 0, MODE_PLAIN, MODE_DEBUG };
static uint8_t api_mode;
static _Thread_local bool initialising __attribute__((tls_model("initial-exec")));

/* ---- fork ----------------------------------------------------------------
 * The prepare handler takes every allocator lock so that the child gets
 * the heap in a consistent state, with two rules (docs/design.md, "fork"):
 *
 * 1. Only when the process has more than one thread, as glibc does for its
 *    own malloc.  A single-threaded process may fork from a signal handler
 *    that interrupted malloc (glibc's tst-mallocfork2): the interrupted
 *    call holds a lock the handler would wait for forever.  Its child may
 *    only call async-signal-safe functions; one thread is all there is, so
 *    nothing else can be in the middle of a change either.
 * 2. stdio's list lock first.  glibc's fork takes it after the prepare
 *    handlers: a forker that held our locks there could wait for it while
 *    its holder (fflush(NULL)) waits for a FILE whose holder (getline)
 *    waits for our lock.  Taking it before ours puts every allocator lock
 *    after every stdio lock, as glibc orders its own malloc's locks, and no
 *    allocator code takes any lock outside the allocator while holding one
 *    of its own.  The list lock is recursive, so glibc's fork takes it
 *    again; in the child glibc has reset it before the child handlers run. */
/* glibc's names, hence reserved identifiers: */
/* NOLINTBEGIN(bugprone-reserved-identifier,cert-dcl37-c,cert-dcl51-cpp) */
extern void _IO_list_lock(void) __attribute__((weak));
extern void _IO_list_unlock(void) __attribute__((weak));
extern void _IO_list_resetlock(void) __attribute__((weak));
/* glibc 2.32: false once a second thread was ever created. */
extern char __libc_single_threaded __attribute__((weak));
/* NOLINTEND(bugprone-reserved-identifier,cert-dcl37-c,cert-dcl51-cpp) */

/* Whether the prepare handler took the locks: read and written only by the
 * forking thread (glibc runs one fork's handlers at a time). */
static bool fork_locked;

static bool single_threaded(void)
{
	return &__libc_single_threaded != NULL && __libc_single_threaded;
}

static void fork_prepare(void)
{
	fork_locked = !single_threaded();
	if (!fork_locked)
		return;
	if (_IO_list_lock)
		_IO_list_lock();
	tcache_lock_list();
	arena_lock_all();
	chunk_lock_all();
}

static void fork_parent(void)
{
	if (!fork_locked)
		return;
	chunk_unlock_all();
	arena_unlock_all();
	tcache_unlock_list();
	if (_IO_list_unlock)
		_IO_list_unlock();
}

static void fork_child(void)
{
	purge_after_fork_child();
	if (!fork_locked)
		return;
	chunk_unlock_all();
	arena_unlock_all();
	tcache_after_fork_child();
	tcache_unlock_list();
	/* Already reset by glibc when it saw threads too; if it did not, the
	 * lock is ours alone, and this thread is the only one. */
	if (_IO_list_resetlock)
		_IO_list_resetlock();
}

bool init_slow(void)
{
	if (atomic_load(&init_done))
		return true;
	if (initialising)
		return atomic_load(&core_ready);
	int expected = 0;
	if (!atomic_compare_exchange_strong(&init_started, &expected, 1)) {
		while (!atomic_load(&init_done))
			sched_yield();
		return true;
	}
	initialising = true;
	config_read();
	__atomic_store_n(&api_mode, conf.debug ? MODE_DEBUG : MODE_PLAIN, __ATOMIC_RELEASE);
	os_init();
	sizeclass_init();
	chunk_init();
	arenas_init();
	atomic_store(&core_ready, 1);
	tcache_init_key();
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	atomic_store(&init_done, 1);
	initialising = false;
	return true;
}

/* ---- finding a block ------------------------------------------------------ */

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
		arena_chunk_t *c = b.chunk = chunk_base_of(p);
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

static size_t block_usable(const block_t *b)
{
	return b->kind == BLK_HUGE ? b->desc->size : class_size[b->sclass];
}

static void block_free(void *p, const block_t *b)
{
	switch (b->kind) {
	case BLK_SMALL:
		tcache_free(p, b->sclass);
		break;
	case BLK_LARGE:
		if (b->sclass < NCACHED) {
			tcache_free(p, b->sclass);
		} else {
			large_free(b->chunk, b->page);
			count_free(b->sclass);
		}
		break;
	case BLK_HUGE:
		huge_free(b->desc, p);
		break;
	default:
		misuse(b->error, p);
	}
}

/* ---- allocation ----------------------------------------------------------- */

/* Blocks above SMALL_MAX, or aligned beyond what a small class gives. */
static void *alloc_big(size_t size, size_t align, bool zero)
{
	if (!ensure_init())
		return errno_enomem(), NULL;
	if (size == 0) /* from an aligned request: still a unique block */
		size = 1;
	void *p = NULL;
	if (size <= LARGE_MAX && align <= LARGE_MAX) {
		if ((p = large_alloc(size, align, zero)))
			count_alloc(size_class(size > SMALL_MAX ? size : SMALL_MAX + 1));
	} else if (size <= os_block_limit && align <= os_block_limit) {
		/* An alignment beyond RAM + swap fails as glibc's does: its
		 * mapping of size + align is refused by the kernel's overcommit
		 * heuristic; ours would reserve that much address space. */
		p = huge_alloc(size, align, zero);
	}
	if (!p)
		errno_enomem();
	return p;
}

/* The smallest small class at least size bytes whose blocks are aligned to
 * align (blocks sit at multiples of the class size from a page boundary), or
 * NSMALL. */
static unsigned aligned_small_class(size_t size, size_t align)
{
	unsigned c = size_class(size);
	while (c < NSMALL && (class_size[c] & (align - 1)) != 0)
		c++;
	return c;
}

static inline void *malloc_plain(size_t size)
{
	if (likely(size <= CACHE_MAX))
		return tcache_alloc_at(size_bin_offset(size));
	return alloc_big(size, MIN_ALIGN, false);
}

/* Whether the entry points must leave the plain path: before
 * initialisation, and in debug mode.  One byte compare on the fast path. */
static inline bool unusual(void)
{
	return unlikely(__atomic_load_n(&api_mode, __ATOMIC_RELAXED) != MODE_PLAIN);
}

/* After unusual(): initialised (false when that failed), and in debug mode? */
static bool debug_mode(void)
{
	return ensure_init() && __atomic_load_n(&api_mode, __ATOMIC_ACQUIRE) == MODE_DEBUG;
}

static void *alloc_aligned_plain(size_t align, size_t size)
{
	if (align <= MIN_ALIGN)
		return malloc_plain(size);
	if (size <= SMALL_MAX && align <= PAGE_SIZE) {
		unsigned c = aligned_small_class(size, align);
		if (c < NSMALL)
			return tcache_alloc(c);
	}
	return alloc_big(size, align, false);
}

static void *alloc_aligned(size_t align, size_t size)
{
	if (unusual() && debug_mode())
		return debug_aligned(align, size);
	return alloc_aligned_plain(align, size);
}

static bool is_pow2(size_t x)
{
	return x && !(x & (x - 1));
}

/* Out of line, so that the fast paths stay leaf functions (a call there
 * would cost them a register save and restore on every call). */
static __attribute__((noinline)) void *malloc_unusual(size_t size)
{
	return debug_mode() ? debug_malloc(size) : malloc_plain(size);
}

/* Everything the fast path does not serve: bigger blocks, an empty list,
 * and every call before initialisation and in debug mode (the caches are
 * empty then: the fast path never tests the mode). */
static __attribute__((noinline)) void *malloc_miss(size_t size)
{
	if (unusual())
		return malloc_unusual(size);
	return malloc_plain(size);
}

API void *arena_malloc(size_t size)
{
	size_t off;
	if (likely(size <= SIZE_LUT_MAX))
		off = size_bin_off[(size + 15) >> 4];
	else if (size <= CACHE_MAX)
		off = bin_off(size_class_calc(size));
	else
		return malloc_miss(size);
	tbin_t *b = tc_bin_at(off);
	if (likely(b->head != NULL))
		return tcache_pop(b);
	return malloc_miss(size);
}

static __attribute__((noinline)) void free_slow(void *p)
{
	block_t b = block_of(p);
	block_free(p, &b);
	purge_background_start(); /* no lock held here: it may create a thread */
}

/* For debug.c: the allocator without debug mode's wrapping. */
const char api_freed_block[] = "use of a freed block";
void *api_malloc_plain(size_t size) { return malloc_plain(size); }
void *api_aligned_plain(size_t align, size_t size) { return alloc_aligned_plain(align, size); }
void api_free_plain(void *p) { free_slow(p); }

/* The usable size of block p; 0 with *error set (when error is not NULL)
 * if p is not a live block. */
size_t api_usable_plain(void *p, const char **error)
{
	block_t b = block_of(p);
	if (b.kind == BLK_BAD) {
		if (error)
			*error = b.error;
		return 0;
	}
	if (error && b.kind != BLK_HUGE && b.sclass < NCACHED && tcache_block_freed(p, b.sclass)) {
		*error = api_freed_block;
		return 0;
	}
	return block_usable(&b);
}

static __attribute__((noinline)) void free_miss(void *p)
{
	if (unusual()) {
		if (debug_mode())
			debug_free(p, "free");
		else if (p)
			free_slow(p);
	} else if (p) {
		free_slow(p);
	}
}

/* The fast path: one page-table word gives the page's slab class and p's
 * offset in its slab, which must be a block start (slab_checks); any other
 * pointer, NULL included (outside every region), takes free_slow, which
 * says what is wrong with it.  The mode is not tested: before
 * initialisation region 0 is empty, and in debug mode slab_checks passes
 * nothing. */
API void arena_free(void *p)
{
	size_t off = (size_t)((uintptr_t)p - (uintptr_t)regions[0].base);
	if (likely(off < regions[0].size)) {
		uint64_t e = __atomic_load_n(&regions[0].ptab[off >> PAGE_SHIFT], __ATOMIC_RELAXED);
		size_t k = (size_t)(e >> 32);
		const slab_check_t *ck = (const slab_check_t *)((const char *)slab_checks + k);
		uint64_t x = (uint32_t)(e + (uintptr_t)p);
		if (likely(x * ck->magic < ck->thresh)) {
			tcache_free_at(p, k);
			return;
		}
	}
	free_miss(p);
}

API void *arena_calloc(size_t nmemb, size_t size)
{
	size_t total;
	if (unlikely(__builtin_mul_overflow(nmemb, size, &total)))
		return errno_enomem(), NULL;
	if (unusual() && debug_mode())
		return debug_calloc(total);
	if (total <= SMALL_MAX)
		return tcache_calloc(size_class(total), total);
	return alloc_big(total, MIN_ALIGN, true);
}

/* Resizes without moving when the block's kind allows it. */
static bool resize_in_place(const block_t *b, size_t size)
{
	switch (b->kind) {
	case BLK_SMALL:
		return size <= SMALL_MAX && size_class(size) == b->sclass;
	case BLK_LARGE:
		if (size > SMALL_MAX && size <= LARGE_MAX &&
		    large_resize_in_place(b->chunk, b->page, size)) {
			unsigned c = size_class(size);
			if (c != b->sclass)
				count_free(b->sclass), count_alloc(c);
			return true;
		}
		return false;
	case BLK_HUGE:
		return size > LARGE_MAX && size <= os_block_limit && huge_resize_in_place(b->desc, size);
	}
	return false;
}

API void *arena_realloc(void *p, size_t size)
{
	if (unusual() && debug_mode())
		return debug_realloc(p, size);
	if (!p)
		return arena_malloc(size);
	if (size == 0) { /* as glibc: free and return NULL */
		arena_free(p);
		return NULL;
	}
	block_t b = block_of(p);
	if (unlikely(b.kind == BLK_BAD)) {
		misuse("realloc of an invalid pointer", p);
		return errno_enomem(), NULL;
	}
	if (unlikely(b.kind != BLK_HUGE && b.sclass < NCACHED && tcache_block_freed(p, b.sclass))) {
		misuse("realloc of a freed block", p);
		return errno_enomem(), NULL;
	}
	if (resize_in_place(&b, size))
		return p;
	if (b.kind == BLK_HUGE && size > LARGE_MAX && size <= os_block_limit)
		return huge_move(b.desc, p, size);
	void *q = malloc_plain(size);
	if (!q)
		return NULL;
	size_t old = block_usable(&b);
	memcpy(q, p, old < size ? old : size);
	block_free(p, &b);
	return q;
}

API void *arena_reallocarray(void *p, size_t nmemb, size_t size)
{
	size_t total;
	if (__builtin_mul_overflow(nmemb, size, &total))
		return errno_enomem(), NULL;
	return arena_realloc(p, total);
}

/* As glibc 2.36: EINVAL returned with errno untouched; ENOMEM returned
 * with errno set to ENOMEM too (glibc's tst-malloc-thread-fail reads
 * errno after a failed posix_memalign). */
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

/* memalign, as glibc 2.36 answers: an alignment up to 16 is malloc's; one
 * above SIZE_MAX / 2 + 1 cannot be a power of two and fails with EINVAL;
 * any other alignment that is not a power of two is rounded up to the
 * next one (from 32); alignments beyond what a block can have fail as any
 * too-large request, with ENOMEM.  docs/compat.md. */
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

/* glibc 2.36's aligned_alloc is memalign (C11 leaves a bad alignment to
 * the implementation; glibc rounds it up). */
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
	if (unusual() && debug_mode())
		return debug_usable(p);
	block_t b = block_of(p);
	if (b.kind == BLK_BAD) {
		misuse("malloc_usable_size of an invalid pointer", p);
		return 0;
	}
	if (b.kind != BLK_HUGE && b.sclass < NCACHED && tcache_block_freed(p, b.sclass)) {
		misuse("malloc_usable_size of a freed block", p);
		return 0;
	}
	return block_usable(&b);
}

/* Whether size could have been the request that made block b by malloc,
 * calloc or realloc: the same size class, or for a huge block the same
 * usable size (the request rounded up to 4 KiB). */
static bool size_fits_block(const block_t *b, size_t size)
{
	if (b->kind == BLK_HUGE)
		return size > LARGE_MAX && ALIGN_UP(size, PAGE_SIZE) == b->desc->size;
	return size <= LARGE_MAX && size_class(size) == b->sclass;
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
		misuse("free_sized with a size the block was not allocated with", p);
		return;
	}
	block_free(p, &b);
}

/* Aligned blocks may come from a larger class than their size alone would
 * give (alloc_aligned), so only a size beyond the block is caught, and an
 * alignment the block does not have. */
API void arena_free_aligned_sized(void *p, size_t align, size_t size)
{
	if (!p)
		return;
	if (unusual() && debug_mode()) {
		if (is_pow2(align))
			debug_free_sized(p, align, size);
		else
			misuse("free_aligned_sized with an invalid alignment", p);
		return;
	}
	block_t b = block_of(p);
	if (b.kind != BLK_BAD && (!is_pow2(align) || ((uintptr_t)p & (align - 1)) != 0)) {
		misuse("free_aligned_sized with an alignment the block was not allocated with", p);
		return;
	}
	if (b.kind != BLK_BAD && size > block_usable(&b)) {
		misuse("free_aligned_sized with a size larger than the block", p);
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
	return ensure_init() ? purge_all() : 0;
}

API void arena_malloc_stats(void)
{
	stats_print_malloc_stats();
}

/* Accepted and without effect: libarena's own knobs are in ARENA_CONF.
 * The answer is glibc 2.36's: 1 for every parameter, known or not, but 0
 * for M_MXFAST (1) outside 0..160 (glibc's largest fastbin size, 80 *
 * sizeof(size_t) / 4). */
API int arena_mallopt(int param, int value)
{
	enum { M_MXFAST_PARAM = 1, MAX_FAST = 80 * sizeof(size_t) / 4 };
	if (param == M_MXFAST_PARAM && (value < 0 || value > MAX_FAST))
		return 0;
	return 1;
}

/* ---- the standard names ---------------------------------------------------- */
#define ALIAS(name) __attribute__((alias(#name), visibility("default")))

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
void malloc_stats(void) ALIAS(arena_malloc_stats);
int mallopt(int, int) ALIAS(arena_mallopt);
