/* Secure mode (ARENA_CONF=secure:true): what the default's fast path
 * cannot afford.  The thread caches are empty and full (tcache.c) and
 * free's checks pass nothing (sizeclass.c), so every call comes here, as
 * in debug mode; the default's fast paths are the same code.
 *
 * - A thread's free small blocks wait on lists of its own whose links are
 *   encoded with two secrets and the link's own address, and checked where
 *   popped: the next block must be one of libarena's, of the list's class,
 *   and the popped block must still hold the key.  A forged link (written
 *   after free, or by an overflow into a free neighbour) is reported with
 *   the block's address and aborts.
 * - No other block holds a link: blocks go home in arrays under their
 *   arena's lock, never on a remote stack or in a transfer batch.
 * - A freed small block is zeroed (a read after free sees zeros and the
 *   key) and waits in a quarantine of QUARANTINE places, one taken at
 *   random, before it is reused; it must still be zero when it leaves.
 * - The key in the second word marks a free block, as in the default.
 * - A block above CACHE_MAX gets a run of chunks of its own, as a huge
 *   block, and so a guard page after it; one that would end on a chunk
 *   boundary gets a page more, so that its guard fits (huge.c). */
#include "internal.h"

#include <pthread.h>

/* Blocks a thread's list of a class holds; a refill brings half. */
#define LIST_MAX 32u
/* Freed small blocks held back per thread: at most 1 MiB (16 KiB blocks). */
#define QUARANTINE 64u
/* Bytes of a leaving block checked for writes after free: a forged link's
 * words and what follows (callgrind, bench/instructions: 256 cost 90
 * instructions per malloc+free more). */
#define CHECK_BYTES 64u

typedef struct secure_list {
	void *head;
	uint32_t n;
} secure_list_t;

enum { SC_NONE = 0, SC_SETUP, SC_ACTIVE, SC_DEAD };

typedef struct secure_cache {
	uint8_t state;
	secure_list_t lists[NSMALL];
	void *quarantine[QUARANTINE];
	uint8_t quarantine_class[QUARANTINE];
} secure_cache_t;

static _Thread_local secure_cache_t sc __attribute__((tls_model("initial-exec")));
/* xorshift state: refills' order, quarantine places */
static _Thread_local uint64_t rng __attribute__((tls_model("initial-exec")));
/* the links' secrets, set once before any list exists */
START_UP static uintptr_t k0, k1;
START_UP static pthread_key_t exit_key;
START_UP static atomic_uint keys_state; /* 0, KEYS_SET, or being set (keys_ready) */

static inline uintptr_t rotl(uintptr_t x, unsigned r)
{
	r &= 63;
	return (x << r) | (x >> ((64 - r) & 63));
}

static inline uintptr_t rotr(uintptr_t x, unsigned r)
{
	r &= 63;
	return (x >> r) | (x << ((64 - r) & 63));
}

/* As mimalloc's encoded lists: a rotation and an add keep a link and its
 * address from giving away the secrets by one xor. */
static inline uintptr_t encode(const void *slot, const void *next)
{
	return rotl((uintptr_t)next ^ (uintptr_t)slot ^ k1, (unsigned)k0) + k0;
}

static inline void *decode(const void *slot, uintptr_t word)
{
	return (void *)(rotr(word - k0, (unsigned)k0) ^ (uintptr_t)slot ^ k1);
}

static uint64_t next_random(void)
{
	uint64_t x = rng ? rng : (k0 ^ (uintptr_t)&sc) | 1;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng = x;
}

static void thread_exit(void *arg);

/* The secrets and the exit key, once; false while another thread sets
 * them.  Being set is odd and carries the fork generation: a fork while
 * another thread sets them leaves the child's state odd for good, and the
 * child's calls set them anew. */
#define KEYS_SET 2u

static bool keys_ready(void)
{
	unsigned s = atomic_load_explicit(&keys_state, memory_order_acquire);
	if (likely(s == KEYS_SET))
		return true;
	unsigned gen = atomic_load_explicit(&alloc_forks, memory_order_relaxed);
	if ((s != 0 && s >> 1 == gen) ||
	    !atomic_compare_exchange_strong(&keys_state, &s, gen << 1 | 1))
		return false;
	k0 = (uintptr_t)os_random();
	k1 = (uintptr_t)os_random();
	if (pthread_key_create(&exit_key, thread_exit) != 0)
		out_fatal("secure mode: no thread key\n");
	atomic_store_explicit(&keys_state, KEYS_SET, memory_order_release);
	return true;
}

/* This thread's lists, set up once (its exit gives them back); calls made
 * meanwhile (pthread_setspecific may allocate) go to the arenas. */
static bool cache_on(void)
{
	if (likely(sc.state == SC_ACTIVE))
		return true;
	if (sc.state != SC_NONE || !keys_ready())
		return false;
	sc.state = SC_SETUP;
	sc.state = pthread_setspecific(exit_key, &sc) == 0 ? SC_ACTIVE : SC_DEAD;
	return sc.state == SC_ACTIVE;
}

static bool small_of(void *p, unsigned sclass)
{
	block_t b = block_of(p);
	return b.kind == BLK_SMALL && b.sclass == sclass;
}

/* p's page word, if p is in region 0 (else 0: no slab's). */
static inline uint64_t page_word(const void *p)
{
	size_t off = (size_t)((uintptr_t)p - (uintptr_t)regions[0].base);
	if (off >= regions[0].size)
		return 0;
	return __atomic_load_n(&regions[0].ptab[off >> PAGE_SHIFT], __ATOMIC_RELAXED);
}

/* Whether p, on a page of word e of class c's slab, is a block start of a
 * slab of this thread's arena (the salt: free's fast path's test). */
static inline bool own_block_start(uint64_t e, const void *p, unsigned c)
{
	uint64_t x = slab_entry_offset(e, p, &tc.salt);
	if (x >= (uint64_t)class_slab_pages[c] << PAGE_SHIFT)
		return false;
	unsigned i = slab_block_index(c, (size_t)x);
	return i * class_size[c] == x && i < class_nblocks[c];
}

/* The class of p if it is a block start of a slab of this thread's arena
 * in region 0, else -1.  Cheaper than block_of (about 60 instructions). */
static inline int own_small_class(const void *p)
{
	uint64_t e = page_word(p);
	size_t k = (size_t)(e >> 32) - sc_tables.entry_off;
	if (k < BIN_BYTES || k > (size_t)NSMALL * BIN_BYTES || k % BIN_BYTES != 0)
		return -1;
	unsigned c = bin_class(k);
	return own_block_start(e, p, c) ? (int)c : -1;
}

/* A popped link: a block start of the list's class (the lists hold this
 * thread's arena's blocks only), or NULL. */
static inline bool link_ok(void *next, unsigned sclass)
{
	if (!next)
		return true;
	uint64_t e = page_word(next);
	if (likely((e >> 32) == bin_off(sclass) + sc_tables.entry_off) &&
	    likely(own_block_start(e, next, sclass)))
		return true;
	return small_of(next, sclass);
}

/* A list found corrupt: reported (aborts by default); with misuse:warn
 * its blocks are left where they are. */
static __attribute__((noinline)) void *corrupt(secure_list_t *l, void *p)
{
	out_misuse("free list corrupted (a forged link or a write after free)", p);
	l->head = NULL;
	l->n = 0;
	return NULL;
}

static void *list_pop(secure_list_t *l, unsigned sclass)
{
	void **p = l->head;
	void *next = decode(p, (uintptr_t)p[0]);
	if (unlikely((uintptr_t)p[1] != tcache_key) || unlikely(!link_ok(next, sclass)))
		return corrupt(l, p);
	l->head = next;
	l->n--;
	p[0] = p[1] = NULL;
	return p;
}

static void list_push(secure_list_t *l, void *block)
{
	void **p = block;
	p[0] = (void *)encode(p, l->head);
	p[1] = (void *)tcache_key;
	l->head = p;
	l->n++;
}

/* Gives n blocks of the list back to their arena (this thread's). */
static void list_flush(secure_list_t *l, unsigned sclass, unsigned n)
{
	void *batch[LIST_MAX];
	unsigned k = 0;
	while (k < n && k < LIST_MAX && l->head) {
		void *p = list_pop(l, sclass);
		if (p)
			batch[k++] = p;
	}
	if (k)
		remote_free_blocks(chunk_hdr_of(batch[0])->arena, batch, k);
}

/* Blocks of small class sclass from this thread's arena: the first is
 * returned, the others (up to want - 1) pushed onto l in a random order
 * (no list: want 1). */
static void *refill(secure_list_t *l, unsigned sclass, unsigned want)
{
	void *batch[LIST_MAX];
	uint64_t zero = 0;
	arena_t *a = tcache_arena();
	arena_lock(a);
	remote_drain(a);
	unsigned got = slab_alloc_batch(a, sclass, batch, want, &zero);
	arena_unlock(a);
	if (got == 0)
		return errno_enomem(), NULL;
	for (unsigned i = got - 1; i > 0; i--) {
		unsigned j = (unsigned)(next_random() % (i + 1));
		void *t = batch[i];
		batch[i] = batch[j];
		batch[j] = t;
	}
	for (unsigned i = 1; l && i < got; i++)
		list_push(l, batch[i]);
	void **p = batch[0];
	p[0] = p[1] = NULL;
	return p;
}

static void *alloc_small(unsigned sclass)
{
	void *p = NULL;
	if (likely(cache_on())) {
		secure_list_t *l = &sc.lists[sclass];
		if (l->head)
			p = list_pop(l, sclass);
		if (!p)
			p = refill(l, sclass, LIST_MAX / 2);
	} else {
		p = refill(NULL, sclass, 1);
	}
	if (p)
		tcache_count_alloc(sclass);
	return p;
}

/* A block leaving the quarantine: still zero past its key, or written
 * after free. */
static void check_unchanged(void *p, size_t size)
{
	const uintptr_t *w = p;
	uintptr_t any = w[0] | (w[1] ^ tcache_key);
	if (likely(size >= CHECK_BYTES)) { /* straight-line */
		for (size_t i = 2; i < CHECK_BYTES / sizeof(uintptr_t); i++)
			any |= w[i];
	} else {
		for (size_t i = 2; i < size / sizeof(uintptr_t); i++)
			any |= w[i];
	}
	if (unlikely(any != 0))
		out_misuse("write after free: a freed block changed in quarantine", p);
}

/* A small block of class sclass out of the quarantine: onto this
 * thread's list if of its arena (half the list goes home when full), else
 * home. */
static void release(void *p, unsigned sclass)
{
	arena_chunk_t *c = chunk_hdr_of(p);
	check_unchanged(p, class_size[sclass]);
	/* tc.arena: set by the refill that handed out every block of this
	 * thread's arena (NULL before: the block goes home) */
	if (c->arena != tc.arena || sc.state != SC_ACTIVE) {
		remote_free_blocks(c->arena, &p, 1);
		return;
	}
	secure_list_t *l = &sc.lists[sclass];
	if (l->n >= LIST_MAX)
		list_flush(l, sclass, LIST_MAX / 2);
	list_push(l, p);
}

static void free_small(void *p, unsigned sclass)
{
	if (unlikely(((uintptr_t *)p)[1] == tcache_key)) {
		out_misuse("double free", p);
		return;
	}
	memset(p, 0, class_size[sclass]);
	((uintptr_t *)p)[1] = tcache_key;
	tcache_count_free(sclass);
	if (unlikely(!cache_on())) {
		release(p, sclass);
		return;
	}
	unsigned i = (unsigned)(next_random() % QUARANTINE), old_class = sc.quarantine_class[i];
	void *old = sc.quarantine[i];
	sc.quarantine[i] = p;
	sc.quarantine_class[i] = (uint8_t)sclass;
	if (old)
		release(old, old_class);
}

/* Frees b (found at p): small blocks through the quarantine, large ones of
 * a cached class home at once (no list), the others as the default. */
void secure_block_free(void *p, const block_t *b)
{
	if (b->kind == BLK_SMALL) {
		free_small(p, b->sclass);
	} else if (b->kind == BLK_LARGE && b->sclass < NCACHED) {
		remote_free_blocks(b->chunk->arena, &p, 1);
		tcache_count_free(b->sclass);
	} else {
		alloc_block_free(p, b);
	}
}

void secure_free(void *p)
{
	int c = own_small_class(p);
	if (likely(c >= 0)) {
		free_small(p, (unsigned)c);
		return;
	}
	block_t b = block_of(p);
	secure_block_free(p, &b);
}

/* Whether b (found live at p) is free: a small block with the key. */
bool secure_block_freed(void *p, const block_t *b)
{
	return b->kind == BLK_SMALL && ((uintptr_t *)p)[1] == tcache_key;
}

/* Above CACHE_MAX: a huge block, guarded (huge.c, guard_end); cleared
 * if zero. */
static void *alloc_guarded(size_t size, size_t align, bool zero)
{
	if (!os_block_fits(size) || !os_block_fits(align))
		return errno_enomem(), NULL;
	if ((ALIGN_UP(size, PAGE_SIZE) & (CHUNK_SIZE - 1)) == 0)
		size += PAGE_SIZE; /* room for the guard in a last chunk */
	bool known_zero = false;
	void *p = huge_alloc(size, align, &known_zero, !zero);
	if (!p)
		return errno_enomem(), NULL;
	if (zero)
		calloc_clear(p, ALIGN_UP(size, PAGE_SIZE), known_zero);
	return p;
}

static void *alloc_large(size_t size, size_t align, bool zero)
{
	if (size > CACHE_MAX || align > CACHE_MAX)
		return alloc_guarded(size, align, zero);
	return alloc_big(size, align, zero);
}

void *secure_malloc(size_t size)
{
	if (size <= SMALL_MAX)
		return alloc_small(size_class(size));
	return alloc_large(size, MIN_ALIGN, false);
}

void *secure_aligned(size_t align, size_t size)
{
	if (align <= MIN_ALIGN)
		return secure_malloc(size);
	if (size <= SMALL_MAX && align <= PAGE_SIZE) {
		unsigned c = size_class(size);
		while (c < NSMALL && (class_size[c] & (align - 1)) != 0)
			c++;
		if (c < NSMALL)
			return alloc_small(c);
	}
	return alloc_large(size, align, false);
}

void *secure_calloc(size_t total)
{
	if (total > SMALL_MAX)
		return alloc_large(total, MIN_ALIGN, true);
	void *p = secure_malloc(total);
	if (p)
		memset(p, 0, total);
	return p;
}

void *secure_realloc(void *p, size_t size)
{
	if (!p)
		return secure_malloc(size);
	if (size == 0) {
		secure_free(p);
		return NULL;
	}
	block_t b = block_of(p);
	if (unlikely(b.kind == BLK_BAD) || unlikely(secure_block_freed(p, &b))) {
		out_misuse(b.kind == BLK_BAD ? "realloc of an invalid pointer" : "realloc of a freed block",
			   p);
		return errno_enomem(), NULL;
	}
	/* a block ending on a chunk boundary would have no guard */
	bool guard_fits = (ALIGN_UP(size, PAGE_SIZE) & (CHUNK_SIZE - 1)) != 0;
	if (b.kind != BLK_LARGE && (b.kind == BLK_SMALL || guard_fits) &&
	    alloc_resize_in_place(&b, size))
		return p;
	if (b.kind == BLK_HUGE && size > LARGE_MAX && os_block_fits(size) && guard_fits)
		return huge_move(b.desc, p, size);
	void *q = secure_malloc(size);
	if (!q)
		return NULL;
	size_t old = block_usable(&b);
	memcpy(q, p, old < size ? old : size);
	secure_block_free(p, &b);
	return q;
}

size_t secure_usable(void *p)
{
	block_t b = block_of(p);
	if (b.kind == BLK_BAD || secure_block_freed(p, &b)) {
		out_misuse(b.kind == BLK_BAD ? "malloc_usable_size of an invalid pointer"
					     : "malloc_usable_size of a freed block", p);
		return 0;
	}
	return block_usable(&b);
}

/* The thread's quarantine and lists go home. */
static void thread_exit(void *arg)
{
	secure_cache_t *t = arg;
	if (t != &sc || t->state != SC_ACTIVE)
		return;
	for (unsigned i = 0; i < QUARANTINE; i++) {
		void *p = t->quarantine[i];
		t->quarantine[i] = NULL;
		if (p)
			release(p, t->quarantine_class[i]);
	}
	t->state = SC_DEAD; /* later calls: the arenas */
	for (unsigned c = 0; c < NSMALL; c++)
		list_flush(&t->lists[c], c, UINT32_MAX);
}
