/* The plain allocator: initialisation, fork handlers, and the allocation
 * and free of every kind of block without debug mode's checks.  api.c's
 * entry points sit on top of it, and so does debug.c. */
#include "internal.h"
#include "limit.h"

#include <sched.h>
#include <string.h>

/* ---- initialisation
 * Lazy, safe before main and inside dlsym.  The core (classes, address
 * space, arenas) never allocates; calls back into malloc from
 * pthread_key_create or pthread_atfork are served by it.  Other threads
 * wait for the end. */

START_UP atomic_int init_done;
START_UP static atomic_int init_started;
START_UP static atomic_int core_ready;
/* enum api_mode: until set every call goes through initialisation */
START_UP uint8_t api_mode;
static _Thread_local bool initialising __attribute__((tls_model("initial-exec")));

/* ---- fork
 * The prepare handler takes every allocator lock (docs/design.md, "fork"):
 * only with more than one thread, as glibc (a single-threaded process may
 * fork from a signal handler that interrupted malloc); and after stdio's
 * list lock, which glibc's fork takes after the prepare handlers, so that
 * every allocator lock comes after every stdio lock. */
/* glibc's names, hence reserved identifiers: */
/* NOLINTBEGIN(bugprone-reserved-identifier,cert-dcl37-c,cert-dcl51-cpp) */
extern void _IO_list_lock(void) __attribute__((weak));
extern void _IO_list_unlock(void) __attribute__((weak));
extern void _IO_list_resetlock(void) __attribute__((weak));
/* false once a second thread was created (glibc 2.32) */
extern char __libc_single_threaded __attribute__((weak));
/* NOLINTEND(bugprone-reserved-identifier,cert-dcl37-c,cert-dcl51-cpp) */

/* the prepare handler took the locks (the forking thread's) */
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

/* Fork children this process descends from (a generation: secure.c). */
START_UP atomic_uint alloc_forks;

static void fork_child(void)
{
	atomic_fetch_add_explicit(&alloc_forks, 1, memory_order_relaxed);
	background_after_fork_child();
	prof_after_fork_child();
	if (!fork_locked)
		return;
	prof_unlock();
	chunk_unlock_all();
	arena_unlock_all();
	tcache_after_fork_child();
	tcache_unlock_list();
	/* reset by glibc already when it saw threads; else the lock is ours alone */
	if (_IO_list_resetlock)
		_IO_list_resetlock();
}

/* libarena's code when linked into the program (left out of stacks). */
static const uintptr_t code_marks[] = {
	(uintptr_t)alloc_init_slow, (uintptr_t)alloc_big, (uintptr_t)alloc_plain_aligned,
	(uintptr_t)alloc_plain_malloc, (uintptr_t)alloc_plain_free, (uintptr_t)alloc_block_free,
	(uintptr_t)tcache_alloc_slow, (uintptr_t)tcache_free_slow, (uintptr_t)prof_sampled,
	(uintptr_t)alloc_free_cached_slow, (uintptr_t)prof_cache_alloc, (uintptr_t)prof_cache_free,
	(uintptr_t)prof_big, (uintptr_t)prof_stack_backtrace, (uintptr_t)large_alloc, (uintptr_t)huge_alloc,
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

bool alloc_init_slow(void)
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
	__atomic_store_n(&api_mode, cfg->debug ? MODE_DEBUG : cfg->secure ? MODE_SECURE : MODE_PLAIN,
			 __ATOMIC_RELEASE);
	os_init((os_sim_t){ .no_thp = cfg->sim_no_thp, .no_madv_free = cfg->sim_no_madv_free,
			    .no_dontunmap = cfg->sim_no_dontunmap, .no_getrandom = cfg->sim_no_getrandom,
			    .no_guard = cfg->sim_no_guard, .no_scan = cfg->sim_no_pagemap_scan,
			    .no_batch_purge = !cfg->purge_batch, .guard_prot = cfg->secure && !cfg->debug,
			    .thp = cfg->sim_thp,
			    .probe = cfg->sim_thp_probe });
	limit_init();
	sizeclass_init();
	chunk_init();
	arena_init();
	atomic_store(&core_ready, 1);
	prof_init(self_lo(), self_hi());
	if (prof_on && !cfg->debug && !cfg->secure) /* malloc's misses go to prof_cache.c */
		__atomic_store_n(&api_mode, MODE_PROF, __ATOMIC_RELEASE);
	tcache_init_key();
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	tcache_enable();
	atomic_store(&init_done, 1);
	initialising = false;
	return true;
}

/* A cached class's block: into this thread's cache if of its arena, else
 * gathered to go home; with heap profiles, prof_cache.c's. */
static void free_cached(void *p, const block_t *b)
{
	if (unlikely(prof_on))
		prof_cache_free(p, b->sclass);
	else if (b->chunk->arena == tcache_arena())
		free_cached_at(p, bin_off(b->sclass));
	else
		tcache_free_foreign(p, b->sclass);
}

/* free_cached_at's push failed: list index full, or the block maybe free. */
void alloc_free_cached_slow(void *p, unsigned index)
{
	if (index >= NCACHED)
		prof_cache_free_full(p, index - NCACHED);
	else
		tcache_free_slow(p, index);
}

void alloc_block_free(void *p, const block_t *b)
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
			tcache_count_free(b->sclass);
		}
		break;
	case BLK_HUGE:
		if (unlikely(prof_on))
			prof_free(p);
		huge_free(b->desc, p);
		break;
	default:
		out_misuse(b->error, p);
	}
}


/* ---- allocation */

START_UP atomic_ulong alloc_memset_skipped;

/* Above SMALL_MAX, or aligned beyond a small class; cleared if zero. */
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
		if ((p = large_alloc(tcache_arena(), size, align, &known_zero, &usable)))
			tcache_count_alloc(c);
	} else if (os_block_fits(size) && os_block_fits(align)) {
		/* beyond RAM + swap: fails as glibc's does */
		p = huge_alloc(size, align, &known_zero, !zero);
		usable = ALIGN_UP(size, PAGE_SIZE);
	}
	if (!p)
		return errno_enomem(), NULL;
	/* a large block's pages may hold a freed block's key, which free
	 * would take for a double free (once the block is in a cached class,
	 * or shrunk into one in place); a huge block is never keyed, and a
	 * write would fault in a page the program may never touch */
	if (!known_zero && usable <= LARGE_MAX)
		((void **)p)[1] = NULL;
	if (zero)
		calloc_clear(p, usable, known_zero);
	if (unlikely(prof_on))
		prof_big(p, usable);
	return p;
}



/* The smallest small class of at least size bytes aligned to align. */
static unsigned aligned_small_class(size_t size, size_t align)
{
	unsigned c = size_class(size);
	while (c < NSMALL && (class_size[c] & (align - 1)) != 0)
		c++;
	return c;
}

/* aligned_alloc without debug mode. */
void *alloc_plain_aligned(size_t align, size_t size)
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

/* free of what the fast path did not take: freed, or reported. */
void alloc_plain_free(void *p)
{
	block_t b = block_of(p);
	alloc_block_free(p, &b);
}

/* For debug.c: malloc without its wrapping. */
const char plain_freed_block[] = "use of a freed block";
void *alloc_plain_malloc(size_t size) { return malloc_plain(size); }

/* p's usable size; 0 with *error if p is not a live block. */
size_t alloc_plain_usable(void *p, const char **error)
{
	block_t b = block_of(p);
	if (b.kind == BLK_BAD) {
		if (error)
			*error = b.error;
		return 0;
	}
	if (error && block_freed(p, &b)) {
		*error = plain_freed_block;
		return 0;
	}
	return block_usable(&b);
}

/* realloc's move of p, a live small block at bin offset k
 * (realloc_small_off): a malloc, a copy and a cached free. */
void *alloc_realloc_move(void *p, size_t size, size_t k)
{
	size_t old = class_size[bin_class(k)];
	void *q = malloc_plain(size);
	if (q) {
		memcpy(q, p, old < size ? old : size);
		free_cached_at(p, k);
	}
	return q;
}

/* Resizes without moving when the block's kind allows it. */
bool alloc_resize_in_place(const block_t *b, size_t size)
{
	switch (b->kind) {
	case BLK_SMALL:
		return size <= SMALL_MAX && size_class(size) == b->sclass;
	case BLK_LARGE:
		if (size > SMALL_MAX && size <= LARGE_MAX &&
		    large_resize_in_place(b->chunk, b->page, size)) {
			unsigned c = size_class(size);
			if (c != b->sclass)
				tcache_count_free(b->sclass), tcache_count_alloc(c);
			return true;
		}
		return false;
	case BLK_HUGE:
		return size > LARGE_MAX && os_block_fits(size) && huge_resize_in_place(b->desc, size);
	}
	return false;
}
