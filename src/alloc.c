/* The plain allocator: initialisation, fork handlers, what a pointer is
 * (block_of, internal.h) and the allocation and free of every kind of
 * block without debug mode's checks.  api.c's entry points and fast paths
 * sit on top of it, and so does debug.c's wrapping. */
#include "internal.h"
#include "limit.h"

#include <sched.h>

/* ---- initialisation ---------------------------------------------------
 * Lazy, on the first call, safe before main, from constructors and from
 * inside dlsym.  The core (size classes, address space, arenas) is set up
 * first and never allocates; then pthread_key_create and pthread_atfork run,
 * which may call back into malloc: such re-entrant calls on the initialising
 * thread are served by the core.  Other threads wait for the end. */

START_UP atomic_int init_done;
START_UP static atomic_int init_started;
START_UP static atomic_int core_ready;
/* How the API entry points behave (enum api_mode), set once configuration
 * is read: until then every call takes the slow way through
 * initialisation. */
START_UP uint8_t api_mode;
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
	prof_lock();
}

static void fork_parent(void)
{
	if (!fork_locked)
		return;
	prof_unlock();
	chunk_unlock_all();
	arena_unlock_all();
	tcache_unlock_list();
	if (_IO_list_unlock)
		_IO_list_unlock();
}

static void fork_child(void)
{
	bg_after_fork_child();
	prof_after_fork_child();
	if (!fork_locked)
		return;
	prof_unlock();
	chunk_unlock_all();
	arena_unlock_all();
	tcache_after_fork_child();
	tcache_unlock_list();
	/* Already reset by glibc when it saw threads too; if it did not, the
	 * lock is ours alone, and this thread is the only one. */
	if (_IO_list_resetlock)
		_IO_list_resetlock();
}

/* The span of libarena's code when it is linked into the program (heap
 * profiles leave it out of stacks: prof_stack.c): the entry points' slow
 * paths, from the lowest to the highest of their addresses, plus a page. */
static const uintptr_t code_marks[] = {
	(uintptr_t)init_slow, (uintptr_t)alloc_big, (uintptr_t)plain_aligned,
	(uintptr_t)plain_malloc, (uintptr_t)plain_free, (uintptr_t)block_free,
	(uintptr_t)tcache_alloc_slow, (uintptr_t)tcache_free_slow, (uintptr_t)prof_sampled,
	(uintptr_t)free_cached_slow, (uintptr_t)prof_cache_alloc, (uintptr_t)prof_cache_free,
	(uintptr_t)prof_big, (uintptr_t)prof_backtrace, (uintptr_t)large_alloc, (uintptr_t)huge_alloc,
};

static uintptr_t self_lo(void)
{
	uintptr_t lo = UINTPTR_MAX;
	for (size_t i = 0; i < sizeof(code_marks) / sizeof(code_marks[0]); i++)
		lo = code_marks[i] < lo ? code_marks[i] : lo;
	return lo;
}

static uintptr_t self_hi(void)
{
	uintptr_t hi = 0;
	for (size_t i = 0; i < sizeof(code_marks) / sizeof(code_marks[0]); i++)
		hi = code_marks[i] > hi ? code_marks[i] : hi;
	return hi + PAGE_SIZE;
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
	out_set_misuse(cfg->misuse);
	__atomic_store_n(&api_mode, cfg->debug ? MODE_DEBUG : MODE_PLAIN, __ATOMIC_RELEASE);
	os_init((os_sim_t){ .no_thp = cfg->sim_no_thp, .no_madv_free = cfg->sim_no_madv_free,
			    .no_dontunmap = cfg->sim_no_dontunmap, .no_getrandom = cfg->sim_no_getrandom,
			    .no_batch_purge = !cfg->purge_batch, .thp = cfg->sim_thp,
			    .probe = cfg->sim_thp_probe });
	limit_init();
	sizeclass_init();
	chunk_init();
	arenas_init();
	atomic_store(&core_ready, 1);
	prof_init(self_lo(), self_hi());
	if (prof_on && !cfg->debug) /* malloc's misses: prof_cache.c's (api.c) */
		__atomic_store_n(&api_mode, MODE_PROF, __ATOMIC_RELEASE);
	tcache_init_key();
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	tcache_enable();
	atomic_store(&init_done, 1);
	initialising = false;
	return true;
}

/* A block of a cached class: into this thread's cache if it is of this
 * thread's arena, else gathered to go home (tcache.c, "foreign blocks").
 * With heap profiles on, prof_cache.c's (a sampled block's record goes,
 * and the lists malloc pops take no frees). */
static void free_cached(void *p, const block_t *b)
{
	if (unlikely(prof_on))
		prof_cache_free(p, b->sclass);
	else if (b->chunk->arena == thread_arena())
		free_cached_at(p, bin_off(b->sclass));
	else
		tcache_free_foreign(p, b->sclass);
}

/* free_cached_at's push did not happen: list index (a class; with heap
 * profiles on, NCACHED + class for a freed list: free's fast path) full,
 * or the block maybe freed already. */
void free_cached_slow(void *p, unsigned index)
{
	if (index >= NCACHED)
		prof_cache_free_full(p, index - NCACHED);
	else
		tcache_free_slow(p, index);
}

void block_free(void *p, const block_t *b)
{
	switch (b->kind) {
	case BLK_SMALL:
		free_cached(p, b);
		break;
	case BLK_LARGE:
		if (b->sclass < NCACHED) {
			free_cached(p, b);
		} else {
			if (unlikely(prof_on))
				prof_free(p);
			large_free(b->chunk, b->page);
			count_free(b->sclass);
		}
		break;
	case BLK_HUGE:
		if (unlikely(prof_on))
			prof_free(p);
		huge_free(b->desc, p);
		break;
	default:
		misuse(b->error, p);
	}
}


/* ---- allocation ----------------------------------------------------------- */

START_UP atomic_ulong alloc_memset_skipped;

/* Blocks above SMALL_MAX, or aligned beyond what a small class gives;
 * cleared if zero. */
void *alloc_big(size_t size, size_t align, bool zero)
{
	if (!ensure_init())
		return errno_enomem(), NULL;
	if (size == 0) /* from an aligned request: still a unique block */
		size = 1;
	void *p = NULL;
	size_t usable = 0;
	bool known_zero = false;
	if (size <= LARGE_MAX && align <= LARGE_MAX) {
		unsigned c = size_class(size > SMALL_MAX ? size : SMALL_MAX + 1);
		if ((p = large_alloc(thread_arena(), size, align, &known_zero, &usable)))
			count_alloc(c);
	} else if (os_block_fits(size) && os_block_fits(align)) {
		/* An alignment beyond RAM + swap fails as glibc's does: its
		 * mapping of size + align is refused by the kernel's overcommit
		 * heuristic; ours would reserve that much address space. */
		p = huge_alloc(size, align, &known_zero, !zero);
		usable = ALIGN_UP(size, PAGE_SIZE);
	}
	if (!p)
		return errno_enomem(), NULL;
	if (zero)
		calloc_clear(p, usable, known_zero);
	if (unlikely(prof_on))
		prof_big(p, usable);
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

/* aligned_alloc without debug mode: a small class whose blocks have the
 * alignment, else a large or huge block. */
void *plain_aligned(size_t align, size_t size)
{
	if (align <= MIN_ALIGN)
		return malloc_plain(size);
	if (size <= SMALL_MAX && align <= PAGE_SIZE) {
		unsigned c = aligned_small_class(size, align);
		if (c < NSMALL)
			return alloc_cached_at(bin_off(c));
	}
	return alloc_big(size, align, false);
}

/* free of a pointer the fast path did not take (and debug mode's free of
 * a checked block): what block_of finds, freed or reported. */
void plain_free(void *p)
{
	block_t b = block_of(p);
	block_free(p, &b);
}

/* For debug.c: malloc without debug mode's wrapping (out of line). */
const char plain_freed_block[] = "use of a freed block";
void *plain_malloc(size_t size) { return malloc_plain(size); }

/* The usable size of block p; 0 with *error set (when error is not NULL)
 * if p is not a live block. */
size_t plain_usable(void *p, const char **error)
{
	block_t b = block_of(p);
	if (b.kind == BLK_BAD) {
		if (error)
			*error = b.error;
		return 0;
	}
	if (error && b.kind != BLK_HUGE && b.sclass < NCACHED && tcache_block_freed(p, b.sclass)) {
		*error = plain_freed_block;
		return 0;
	}
	return block_usable(&b);
}

/* Resizes without moving when the block's kind allows it. */
bool block_resize_in_place(const block_t *b, size_t size)
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
		return size > LARGE_MAX && os_block_fits(size) && huge_resize_in_place(b->desc, size);
	}
	return false;
}
