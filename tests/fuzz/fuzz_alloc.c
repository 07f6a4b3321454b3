/*
 * libFuzzer target for libarena: the input is a program of allocator calls,
 * checked against a shadow model of every live block.
 *
 * Built with clang -fsanitize=fuzzer and linked with libarena's objects (built
 * with -fsanitize=fuzzer-no-link, so the allocator's own branches guide the
 * fuzzer), without ASan: libarena is the process's malloc, libFuzzer's too.
 *
 * Input: a sequence of operations, each an opcode byte and its operands (a
 * missing byte reads as 0). Sizes run from 0 to 8 MiB, weighted toward small,
 * with edges (class and chunk boundaries) and impossible sizes (above 2^46,
 * near SIZE_MAX: NULL and ENOMEM expected). Alignments 16 B .. 1 MiB and
 * invalid ones (EINVAL as each function documents).
 *
 * Model: per live block its pointer, requested and usable size and a pattern
 * seed; the pattern (a function of seed and offset) covers the whole usable
 * size (whole for blocks up to FULL_MAX, else the first and last 4 KiB and a
 * 32-byte window in every page). After every operation: both ends of every
 * live block are intact, the blocks the operation touched and their address
 * neighbours are intact in full, no two live blocks overlap (usable extents,
 * kept sorted by address), alignment holds, usable >= requested, calloc reads
 * zero, realloc keeps the old prefix (and the whole block when it fails).
 * Every block is checked again before it is freed; all are freed at the end
 * of the input, so executions start from an empty live set.
 *
 * Threads: two worker threads allocate, free and realloc blocks on request,
 * one request at a time (the main thread waits for each), so execution is
 * deterministic but blocks cross thread caches and arenas; a worker can be
 * made to exit (its cache is given back) and is started again when needed.
 *
 * A model violation prints one "fuzz_alloc: ..." line and traps, which
 * libFuzzer records as a crash. FUZZ_ALLOC_TRACE=1 prints every operation.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"

/* libarena provides these; glibc 2.36's headers do not declare them. */
void free_sized(void *ptr, size_t size);
void free_aligned_sized(void *ptr, size_t alignment, size_t size);

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

#define MAX_LIVE 256            /* live blocks at most */
#define MAX_BYTES (64 * MiB)    /* requested bytes live at most */
#define MAX_SIZE (8 * MiB)      /* largest possible request made */
#define FULL_MAX (64 * KiB)     /* blocks up to this are written and checked whole */
#define SMALL_MAX (16 * KiB)
#define LARGE_MAX MiB
#define HUGE_MAX ((size_t)1 << 46) /* requests above fail (docs/design.md) */
#define NWORKERS 2

/* ---- failing ------------------------------------------------------------------ */

static unsigned long op_no;     /* operation number in this input */
static int trace;
/* The least malloc_usable_size of any block: libarena's smallest class, but
 * in debug mode (ARENA_CONF=debug:true) exactly the size asked for. */
static size_t min_usable = 16;

#define FAIL(...)                                                                  \
	do {                                                                       \
		fprintf(stderr, "fuzz_alloc: operation %lu: ", op_no);             \
		fprintf(stderr, __VA_ARGS__);                                      \
		fputc('\n', stderr);                                               \
		__builtin_trap();                                                  \
	} while (0)

#define TRACE(...)                                                                 \
	do {                                                                       \
		if (trace) {                                                       \
			fprintf(stderr, "op %lu: ", op_no);                        \
			fprintf(stderr, __VA_ARGS__);                              \
			fputc('\n', stderr);                                       \
		}                                                                  \
	} while (0)

/* Keeps the compiler from reasoning about what the allocator returned (such as
 * calloc memory reading zero). */
static inline void *opaque(void *p)
{
	__asm__ volatile("" : "+r"(p));
	return p;
}

/* ---- input -------------------------------------------------------------------- */

typedef struct rd {
	const uint8_t *d;
	size_t n, i;
} rd_t;

static unsigned rd8(rd_t *r)
{
	return r->i < r->n ? r->d[r->i++] : 0;
}

static size_t rdn(rd_t *r, int bytes)
{
	size_t x = 0;
	for (int k = 0; k < bytes; k++)
		x |= (size_t)rd8(r) << (8 * k);
	return x;
}

static const size_t edge_sizes[] = {
	0, 1, 8, 15, 16, 17, 32, 112, 128, 129, 160, 256, 1024, 4095, 4096, 4097, 8192,
	SMALL_MAX - 1, SMALL_MAX, SMALL_MAX + 1, 20 * KiB, 64 * KiB, 512 * KiB,
	LARGE_MAX - 4096, LARGE_MAX - 1, LARGE_MAX, LARGE_MAX + 1, 2 * MiB - 4096, 2 * MiB - 1,
	2 * MiB, 2 * MiB + 1, 2 * MiB + 4096, 4 * MiB, 4 * MiB + 1, 6 * MiB + 12 * KiB,
	MAX_SIZE - 1, MAX_SIZE,
};

static const size_t impossible_sizes[] = {
	SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 15, SIZE_MAX - 4095, SIZE_MAX - MiB,
	SIZE_MAX / 2 + 1, (size_t)1 << 63, ((size_t)1 << 47) + 3, HUGE_MAX + 1,
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* A request size: at most MAX_SIZE, or one of impossible_sizes (> HUGE_MAX). */
static size_t take_size(rd_t *r)
{
	unsigned k = rd8(r);
	if (k < 112)
		return rd8(r);                                  /* 0..255: 44% */
	if (k < 176)
		return rdn(r, 2) % (SMALL_MAX + 2 * KiB);       /* small: 25% */
	if (k < 208)
		return rdn(r, 3) % (LARGE_MAX + 64 * KiB);      /* large: 12.5% */
	if (k < 228)
		return rdn(r, 3) % (MAX_SIZE + 1);              /* huge: 8% */
	if (k < 252) {                                          /* edges +-8: 9% */
		size_t s = edge_sizes[rd8(r) % NELEM(edge_sizes)];
		int d = (int)(rd8(r) % 17) - 8;
		if (d < 0 && s < (size_t)-d)
			return 0;
		s += (size_t)(ptrdiff_t)d;
		return s > MAX_SIZE ? MAX_SIZE : s;
	}
	return impossible_sizes[rd8(r) % NELEM(impossible_sizes)]; /* 1.6% */
}

/* ---- patterns ------------------------------------------------------------------ */

static inline uint64_t pat_word(uint64_t seed, size_t w)
{
	uint64_t x = ((uint64_t)w + 1) * 0x9E3779B97F4A7C15ull ^ seed;
	return x ^ (x >> 29);
}

static inline uint8_t pat_byte(uint64_t seed, size_t off)
{
	return (uint8_t)(pat_word(seed, off >> 3) >> ((off & 7) * 8));
}

/* Writes the pattern over bytes [from, to) of p (p 8-byte aligned). */
static void fill_range(uint8_t *p, size_t from, size_t to, uint64_t seed)
{
	size_t i = from;
	for (; i < to && (i & 7); i++)
		p[i] = pat_byte(seed, i);
	for (; i + 8 <= to; i += 8) {
		uint64_t w = pat_word(seed, i >> 3);
		__builtin_memcpy(p + i, &w, 8);
	}
	for (; i < to; i++)
		p[i] = pat_byte(seed, i);
}

/* Checks bytes [from, to) of p; the first bad offset, or SIZE_MAX. */
static size_t check_range(const uint8_t *p, size_t from, size_t to, uint64_t seed)
{
	size_t i = from;
	for (; i < to && (i & 7); i++)
		if (p[i] != pat_byte(seed, i))
			return i;
	for (; i + 8 <= to; i += 8) {
		uint64_t w;
		__builtin_memcpy(&w, p + i, 8);
		if (w != pat_word(seed, i >> 3))
			break;
	}
	for (; i < to; i++)
		if (p[i] != pat_byte(seed, i))
			return i;
	return SIZE_MAX;
}

/* First non-zero byte in [from, to), or SIZE_MAX. */
static size_t check_zero(const uint8_t *p, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		if (p[i])
			return i;
	return SIZE_MAX;
}

/*
 * The bytes of a block of n bytes that the model writes and checks: all of
 * them up to FULL_MAX; beyond, the first and the last 4 KiB and a 32-byte
 * window in every page between (at an offset varying from page to page).
 * seg_next gives them as ranges [*from, *to), clipped to [0, lim).
 */
typedef struct seg {
	size_t n, lim, k;
} seg_t;

static seg_t seg_start(size_t n, size_t lim)
{
	return (seg_t){ .n = n, .lim = lim < n ? lim : n, .k = 0 };
}

static int seg_next(seg_t *s, size_t *from, size_t *to)
{
	for (;;) {
		size_t f, t;
		if (s->n <= FULL_MAX) {
			if (s->k++ > 0)
				return 0;
			f = 0, t = s->n;
		} else {
			size_t npages = s->n / 4096;
			size_t k = s->k++;
			if (k == 0) {
				f = 0, t = 4096;
			} else if (k < npages) {
				f = k * 4096 + (k * 1064) % (4096 - 32);
				t = f + 32;
				if (t > s->n - 4096) /* the tail range covers it */
					continue;
			} else if (k == npages) {
				f = s->n - 4096, t = s->n;
			} else {
				return 0;
			}
		}
		if (f >= s->lim)
			continue; /* later ranges start later still, but keep it simple */
		*from = f;
		*to = t < s->lim ? t : s->lim;
		return 1;
	}
}

/* ---- the model --------------------------------------------------------------------- */

enum { K_PLAIN, K_ALIGNED, K_PAGE }; /* malloc/calloc/realloc; aligned_alloc,
                                      * posix_memalign, memalign; valloc, pvalloc */

typedef struct blk {
	uint8_t *p;
	size_t req;     /* bytes asked for */
	size_t usable;  /* malloc_usable_size when it was made */
	uint64_t seed;  /* pattern */
	unsigned align; /* log2 of the alignment promised */
	int kind;       /* K_PLAIN, K_ALIGNED, K_PAGE: which sized free fits */
	const char *how;
} blk_t;

static blk_t live[MAX_LIVE];      /* in order of allocation (stable across runs) */
static unsigned nlive;
static unsigned byaddr[MAX_LIVE]; /* indices into live[], sorted by address */
static size_t live_bytes;
static uint64_t seed_seq;

static uint64_t next_seed(void)
{
	uint64_t z = (++seed_seq) * 0x9E3779B97F4A7C15ull;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	return z ^ (z >> 27);
}

/* First position in byaddr whose block starts at or after p. */
static unsigned addr_pos(const uint8_t *p)
{
	unsigned lo = 0, hi = nlive;
	while (lo < hi) {
		unsigned mid = (lo + hi) / 2;
		if ((uintptr_t)live[byaddr[mid]].p < (uintptr_t)p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void describe(const blk_t *b, char *buf, size_t n)
{
	snprintf(buf, n, "%p (%s of %zu, usable %zu)", (void *)b->p, b->how, b->req, b->usable);
}

/* Checks the pattern of b over [0, lim) of its written bytes. */
static void check_blk(const blk_t *b, size_t lim, const char *when)
{
	seg_t s = seg_start(b->usable, lim);
	size_t f, t;
	while (seg_next(&s, &f, &t)) {
		size_t bad = check_range(b->p, f, t, b->seed);
		if (bad != SIZE_MAX) {
			char d[128];
			describe(b, d, sizeof d);
			FAIL("%s: block %s changed at offset %zu: 0x%02x, expected 0x%02x", when, d,
			     bad, b->p[bad], pat_byte(b->seed, bad));
		}
	}
}

/* Both ends of b: its first and last 8 bytes. */
static void check_ends(const blk_t *b)
{
	size_t end = b->usable < 8 ? b->usable : 8; /* debug mode: as small as asked */
	size_t bad = check_range(b->p, 0, end, b->seed);
	if (bad == SIZE_MAX)
		bad = check_range(b->p, b->usable - end, b->usable, b->seed);
	if (bad != SIZE_MAX) {
		char d[128];
		describe(b, d, sizeof d);
		FAIL("block %s changed at offset %zu: 0x%02x, expected 0x%02x", d, bad, b->p[bad],
		     pat_byte(b->seed, bad));
	}
}

static void fill_blk(const blk_t *b)
{
	seg_t s = seg_start(b->usable, b->usable);
	size_t f, t;
	while (seg_next(&s, &f, &t))
		fill_range(b->p, f, t, b->seed);
}

/* The block at byaddr position i and its neighbours, checked in full. */
static void check_around(unsigned pos)
{
	for (unsigned i = pos ? pos - 1 : 0; i <= pos + 1 && i < nlive; i++)
		check_blk(&live[byaddr[i]], SIZE_MAX, "neighbour check");
}

/* The blocks on either side of where p was, checked in full. */
static void check_near(const void *p)
{
	unsigned pos = addr_pos(p);
	if (pos > 0)
		check_blk(&live[byaddr[pos - 1]], SIZE_MAX, "check of the block before a freed one");
	if (pos < nlive)
		check_blk(&live[byaddr[pos]], SIZE_MAX, "check of the block after a freed one");
}

/* Adds b (its usable extent) to the address order; fails on an overlap. */
static unsigned addr_insert(unsigned slot)
{
	const blk_t *b = &live[slot];
	unsigned pos = addr_pos(b->p);
	char d1[128], d2[128];
	if (pos > 0) {
		const blk_t *prev = &live[byaddr[pos - 1]];
		if ((uintptr_t)prev->p + prev->usable > (uintptr_t)b->p) {
			describe(b, d1, sizeof d1), describe(prev, d2, sizeof d2);
			FAIL("new block %s overlaps live block %s", d1, d2);
		}
	}
	if (pos < nlive) {
		const blk_t *next = &live[byaddr[pos]];
		if ((uintptr_t)b->p + b->usable > (uintptr_t)next->p) {
			describe(b, d1, sizeof d1), describe(next, d2, sizeof d2);
			FAIL("new block %s overlaps live block %s", d1, d2);
		}
	}
	memmove(&byaddr[pos + 1], &byaddr[pos], (nlive - pos) * sizeof byaddr[0]);
	byaddr[pos] = slot;
	return pos;
}

static void addr_remove(unsigned slot)
{
	unsigned pos = addr_pos(live[slot].p);
	if (pos >= nlive || byaddr[pos] != slot)
		FAIL("model: block %p not found by address", (void *)live[slot].p);
	memmove(&byaddr[pos], &byaddr[pos + 1], (nlive - pos - 1) * sizeof byaddr[0]);
}

/* Checks a block the allocator just returned; fills it with a fresh pattern
 * (after checking it reads zero when zero is set) and adds it to the model.
 * Returns its slot. */
static unsigned track(void *ptr, size_t req, size_t align, int kind, int zero,
		      const char *how)
{
	uint8_t *p = opaque(ptr);
	if (req > MAX_SIZE + 4096) /* pvalloc rounds up */
		FAIL("model: a request of %zu bytes was made", req);
	if (!p)
		FAIL("%s(%zu) returned NULL (errno %d)", how, req, errno);
	if (align < 16)
		align = 16;
	if ((uintptr_t)p & (align - 1))
		FAIL("%s(%zu) returned %p, not aligned to %zu", how, req, (void *)p, align);
	size_t usable = malloc_usable_size(p);
	if (usable < req || usable < min_usable)
		FAIL("%s(%zu) returned %p with usable size %zu", how, req, (void *)p, usable);
	if (nlive >= MAX_LIVE)
		FAIL("model: live set full");
	unsigned slot = nlive;
	blk_t *b = &live[slot];
	*b = (blk_t){ .p = p, .req = req, .usable = usable, .seed = next_seed(),
		      .align = (unsigned)__builtin_ctzl(align), .kind = kind, .how = how };
	unsigned pos = addr_insert(slot);
	nlive++;
	live_bytes += req;
	if (zero) {
		seg_t s = seg_start(req, req);
		size_t f, t;
		while (seg_next(&s, &f, &t)) {
			size_t bad = check_zero(p, f, t);
			if (bad != SIZE_MAX)
				FAIL("%s(%zu) = %p: byte %zu is 0x%02x, not zero", how, req, (void *)p,
				     bad, p[bad]);
		}
	}
	fill_blk(b);
	check_around(pos);
	TRACE("%s(%zu) = %p usable %zu slot %u", how, req, (void *)p, usable, slot);
	return slot;
}

/* Removes slot from the model (the block is about to be, or was, given back). */
static void untrack(unsigned slot)
{
	addr_remove(slot);
	live_bytes -= live[slot].req;
	unsigned last = nlive - 1;
	if (slot != last) {
		unsigned pos = addr_pos(live[last].p);
		if (pos >= nlive || byaddr[pos] != last)
			FAIL("model: last block not found by address");
		byaddr[pos] = slot;
		live[slot] = live[last];
	}
	nlive--;
}

/* ---- worker threads ----------------------------------------------------------------- */

enum { W_MALLOC, W_FREE, W_REALLOC, W_EXIT };

typedef struct worker {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int running;
	int sleepers;        /* threads in pthread_cond_wait on cv */
	_Atomic int state;   /* 0 idle, 1 request posted, 2 done */
	int op;
	void *p;
	size_t n;
	void *ret;
	int err;
} worker_t;

static worker_t workers[NWORKERS];

/* The hand-over between the main thread and a worker: a condition variable.
 * All threads of the target run on one CPU (LLVMFuzzerInitialize): a wake-up
 * is then a switch on the same CPU (microseconds) instead of an interrupt to
 * an idle CPU, which on a virtual machine can take a millisecond. */
static void w_set(worker_t *w, int state)
{
	pthread_mutex_lock(&w->mu);
	atomic_store(&w->state, state);
	if (w->sleepers)
		pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static void w_wait(worker_t *w, int state)
{
	pthread_mutex_lock(&w->mu);
	w->sleepers++;
	while (atomic_load(&w->state) != state)
		pthread_cond_wait(&w->cv, &w->mu);
	w->sleepers--;
	pthread_mutex_unlock(&w->mu);
}

static void *worker_main(void *arg)
{
	worker_t *w = arg;
	for (;;) {
		w_wait(w, 1);
		int op = w->op;
		void *ret = NULL;
		errno = 0;
		if (op == W_MALLOC)
			ret = malloc(w->n);
		else if (op == W_FREE)
			free(w->p);
		else if (op == W_REALLOC)
			ret = realloc(w->p, w->n);
		w->err = errno;
		w->ret = ret;
		w_set(w, 2);
		if (op == W_EXIT)
			return NULL;
	}
}

/* Runs one operation on worker i and waits for it. */
static void *on_worker(unsigned i, int op, void *p, size_t n, int *err)
{
	worker_t *w = &workers[i];
	if (!w->running) {
		if (op == W_EXIT)
			return NULL;
		static int inited[NWORKERS];
		if (!inited[i]) {
			pthread_mutex_init(&w->mu, NULL);
			pthread_cond_init(&w->cv, NULL);
			inited[i] = 1;
		}
		atomic_store(&w->state, 0);
		if (pthread_create(&w->th, NULL, worker_main, w) != 0)
			FAIL("cannot start a worker thread");
		w->running = 1;
	}
	w->op = op, w->p = p, w->n = n;
	w_set(w, 1);
	w_wait(w, 2);
	atomic_store(&w->state, 0);
	if (err)
		*err = w->err;
	if (op == W_EXIT) {
		pthread_join(w->th, NULL);
		w->running = 0;
	}
	return w->ret;
}

/* ---- operations ---------------------------------------------------------------------- */

static void expect_enomem(void *p, int err, const char *how, size_t size)
{
	if (p)
		FAIL("%s(%zu) returned %p, expected NULL", how, size, opaque(p));
	if (err != ENOMEM)
		FAIL("%s(%zu) returned NULL with errno %d, expected ENOMEM", how, size, err);
	TRACE("%s(%zu) = NULL, ENOMEM", how, size);
}

/* Makes room for a request of size bytes (frees blocks chosen by the input
 * while the live set is at its cap). */
static void make_room(rd_t *r, size_t size)
{
	while (nlive > 0 && (nlive >= MAX_LIVE || live_bytes + size > MAX_BYTES)) {
		unsigned slot = rd8(r) % nlive;
		check_blk(&live[slot], SIZE_MAX, "before free");
		void *p = live[slot].p;
		untrack(slot);
		free(p);
		TRACE("free(%p) to make room", p);
	}
}

/* Frees slot: with free, or (sized) with what the API allows for its kind:
 * free_sized with the size requested for a block of malloc, calloc or
 * realloc, free_aligned_sized with the alignment and size requested for an
 * aligned one (valloc and pvalloc blocks: free). */
static void do_free(unsigned slot, int sized)
{
	blk_t b = live[slot];
	check_blk(&b, SIZE_MAX, "before free");
	untrack(slot);
	if (sized && b.kind == K_PLAIN) {
		free_sized(b.p, b.req);
		TRACE("free_sized(%p, %zu)", (void *)b.p, b.req);
	} else if (sized && b.kind == K_ALIGNED) {
		free_aligned_sized(b.p, (size_t)1 << b.align, b.req);
		TRACE("free_aligned_sized(%p, %zu, %zu)", (void *)b.p, (size_t)1 << b.align, b.req);
	} else {
		free(b.p);
		TRACE("free(%p)", (void *)b.p);
	}
	check_near(b.p);
}

/* realloc / reallocarray / realloc on a worker of slot (or NULL when slot <
 * 0) to size bytes; impossible sizes must fail and leave the block intact. */
static void do_realloc(int slot, size_t nmemb, size_t elem, int kind)
{
	blk_t old = slot >= 0 ? live[slot] : (blk_t){ 0 };
	size_t size;
	int overflow = __builtin_mul_overflow(nmemb, elem, &size);
	const char *how = kind == 0 ? "realloc" : kind == 1 ? "reallocarray" : "worker realloc";
	if (slot >= 0)
		check_blk(&old, SIZE_MAX, "before realloc");
	errno = 0;
	void *q;
	int err;
	if (kind == 0)
		q = realloc(old.p, size), err = errno;
	else if (kind == 1)
		q = reallocarray(old.p, nmemb, elem), err = errno;
	else
		q = on_worker(kind - 2, W_REALLOC, old.p, size, &err);
	q = opaque(q);
	if (overflow || size > HUGE_MAX) {
		expect_enomem(q, err, how, size);
		if (slot >= 0)
			check_blk(&live[slot], SIZE_MAX, "after a failed realloc");
		return;
	}
	if (slot >= 0 && size == 0 && !q) { /* freed, as glibc */
		TRACE("%s(%p, 0) = NULL (freed)", how, (void *)old.p);
		untrack((unsigned)slot);
		return;
	}
	if (!q)
		FAIL("%s(%p, %zu) returned NULL (errno %d)", how, (void *)old.p, size, err);
	if (slot < 0) {
		track(q, size, 16, K_PLAIN, 0, how);
		return;
	}
	/* The old block is gone; q keeps min(old.req, size) bytes of it. */
	untrack((unsigned)slot);
	size_t keep = old.req < size ? old.req : size;
	blk_t tmp = old;
	tmp.p = q;
	seg_t s = seg_start(old.usable, keep);
	size_t f, t;
	while (seg_next(&s, &f, &t)) {
		size_t bad = check_range(q, f, t, old.seed);
		if (bad != SIZE_MAX) {
			char d[128];
			describe(&old, d, sizeof d);
			FAIL("%s(%s, %zu) = %p lost byte %zu of %zu kept: 0x%02x, expected 0x%02x",
			     how, d, size, q, bad, keep, tmp.p[bad], pat_byte(old.seed, bad));
		}
	}
	track(q, size, 16, K_PLAIN, 0, how);
	TRACE("  (from %p of %zu, %zu kept)", (void *)old.p, old.req, keep);
	if (q != old.p)
		check_near(old.p);
}

/* glibc declares these alloc_align: through a pointer, clang neither assumes
 * the alignment of their result nor (UBSan) checks it for invalid alignments,
 * which are the point here. */
static void *(*volatile aligned_alloc_fn)(size_t, size_t) = aligned_alloc;
static void *(*volatile memalign_fn)(size_t, size_t) = memalign;

static const size_t bad_aligns[] = {
	0, 1, 2, 4, 8, 3, 24, 48, 96, 4097, 65535, MiB + 16, 3 * MiB / 2, SIZE_MAX,
};

/* aligned_alloc, posix_memalign, memalign, valloc, pvalloc. */
static void do_aligned(rd_t *r, unsigned fn)
{
	unsigned k = rd8(r);
	size_t align = k < 232 ? (size_t)16 << (k % 17) : bad_aligns[k % NELEM(bad_aligns)];
	size_t size = take_size(r);
	int pow2 = align && !(align & (align - 1));
	int impossible = size > HUGE_MAX;
	if (!impossible)
		make_room(r, size);
	errno = 0;
	if (fn == 0 || fn == 2) {
		/* glibc 2.36: aligned_alloc is memalign, which rounds an alignment
		 * up to a power of two and refuses one above SIZE_MAX / 2 + 1. */
		const char *name = fn == 0 ? "aligned_alloc" : "memalign";
		void *p = fn == 0 ? aligned_alloc_fn(align, size) : memalign_fn(align, size);
		int err = errno;
		if (align > SIZE_MAX / 2 + 1) {
			if (p || err != EINVAL)
				FAIL("%s(%zu, %zu) = %p errno %d, expected NULL EINVAL", name, align,
				     size, opaque(p), err);
			TRACE("%s(%zu, %zu) = NULL, EINVAL", name, align, size);
		} else if (align > HUGE_MAX || impossible) {
			expect_enomem(p, err, name, size);
		} else {
			size_t a = 16;
			while (a < align)
				a <<= 1;
			track(p, size, a, K_ALIGNED, 0, name);
		}
	} else if (fn == 1) {
		void *p = (void *)(uintptr_t)0x5a5a; /* must stay untouched on failure */
		int rc = posix_memalign(&p, align, size);
		int expect = !pow2 || align % sizeof(void *) ? EINVAL : impossible ? ENOMEM : 0;
		if (rc != expect)
			FAIL("posix_memalign(%zu, %zu) returned %d, expected %d", align, size, rc,
			     expect);
		if (rc) {
			if (p != (void *)(uintptr_t)0x5a5a)
				FAIL("posix_memalign(%zu, %zu) failed but wrote its result", align,
				     size);
			TRACE("posix_memalign(%zu, %zu) = %d", align, size, rc);
		} else {
			track(p, size, align, K_ALIGNED, 0, "posix_memalign");
		}
	} else if (fn == 3) {
		void *p = valloc(size);
		if (impossible)
			expect_enomem(p, errno, "valloc", size);
		else
			track(p, size, 4096, K_PAGE, 0, "valloc");
	} else {
		void *p = pvalloc(size);
		if (impossible)
			expect_enomem(p, errno, "pvalloc", size);
		else
			track(p, size ? (size + 4095) & ~(size_t)4095 : 4096, 4096, K_PAGE, 0,
			      "pvalloc");
	}
}

/* nmemb and elem with nmemb * elem <= size, or an overflowing pair. */
static void split(rd_t *r, size_t size, size_t *nmemb, size_t *elem)
{
	unsigned k = rd8(r);
	if (k >= 240) {
		*nmemb = (SIZE_MAX >> (k & 7)) - (k & 3);
		*elem = 2 + (k & 8) * 1000;
		return;
	}
	if (size > HUGE_MAX) { /* stays impossible: nmemb * elem > size (or overflows) */
		*nmemb = 1 + k % 16;
		*elem = size / *nmemb + 1;
		return;
	}
	*nmemb = k % 17;
	*elem = size / (*nmemb ? *nmemb : 1);
}

static int pick(rd_t *r)
{
	return nlive ? (int)(rd8(r) % nlive) : -1;
}

static void run_op(rd_t *r)
{
	unsigned op = rd8(r) % 32;
	errno = 0;
	switch (op) {
	case 0: case 1: case 2: case 3: case 4: case 5: case 6: case 7: { /* malloc */
		size_t size = take_size(r);
		if (size > HUGE_MAX) {
			void *p = malloc(size);
			expect_enomem(p, errno, "malloc", size);
			break;
		}
		make_room(r, size);
		track(malloc(size), size, 16, K_PLAIN, 0, "malloc");
		break;
	}
	case 8: case 9: { /* calloc */
		size_t size = take_size(r), nmemb, elem, total;
		split(r, size, &nmemb, &elem);
		if (__builtin_mul_overflow(nmemb, elem, &total) || total > HUGE_MAX) {
			void *p = calloc(nmemb, elem);
			expect_enomem(p, errno, "calloc", total);
			break;
		}
		make_room(r, total);
		track(calloc(nmemb, elem), total, 16, K_PLAIN, 1, "calloc");
		break;
	}
	case 10: case 11: case 12: case 13: { /* realloc, reallocarray */
		int slot = rd8(r) % 8 ? pick(r) : -1; /* sometimes realloc(NULL, n) */
		size_t size = take_size(r), nmemb = 1, elem = size;
		if (op == 13)
			split(r, size, &nmemb, &elem);
		if (size <= HUGE_MAX)
			make_room(r, size);
		if (slot >= 0 && (unsigned)slot >= nlive) /* make_room moved it */
			slot = pick(r);
		do_realloc(slot, nmemb, elem, op == 13 ? 1 : 0);
		break;
	}
	case 14: case 15: case 16: { /* the aligned family */
		unsigned fn = op == 16 ? rd8(r) % 3 + 2 : op - 14;
		do_aligned(r, fn);
		break;
	}
	case 17: case 18: case 19: case 20: case 21: case 30: case 31: { /* free */
		int slot = pick(r);
		if (slot >= 0)
			do_free((unsigned)slot, 0);
		else
			free(NULL);
		break;
	}
	case 22: { /* free_sized, free_aligned_sized */
		int slot = pick(r);
		if (slot >= 0)
			do_free((unsigned)slot, 1);
		break;
	}
	case 23: { /* malloc_usable_size: unchanged while the block lives */
		int slot = pick(r);
		if (slot < 0) {
			if (malloc_usable_size(NULL) != 0)
				FAIL("malloc_usable_size(NULL) != 0");
			break;
		}
		blk_t *b = &live[slot];
		size_t u = malloc_usable_size(b->p);
		if (u != b->usable)
			FAIL("malloc_usable_size(%p) = %zu, was %zu (requested %zu)", (void *)b->p,
			     u, b->usable, b->req);
		break;
	}
	case 24: { /* purge, or a full check of every block */
		unsigned k = rd8(r);
		if (k % 8 == 0) {
			malloc_trim(0);
			TRACE("malloc_trim(0)");
		} else if (k % 8 == 1) {
			arena_purge();
			TRACE("arena_purge()");
		} else {
			for (unsigned i = 0; i < nlive; i++)
				check_blk(&live[i], SIZE_MAX, "full check");
		}
		break;
	}
	case 25: { /* rewrite a block with a new pattern */
		int slot = pick(r);
		if (slot >= 0) {
			check_blk(&live[slot], SIZE_MAX, "before rewrite");
			live[slot].seed = next_seed();
			fill_blk(&live[slot]);
		}
		break;
	}
	case 26: case 27: { /* a worker allocates */
		unsigned w = rd8(r) % NWORKERS;
		size_t size = take_size(r);
		int err;
		if (size > HUGE_MAX) {
			void *p = on_worker(w, W_MALLOC, NULL, size, &err);
			expect_enomem(p, err, "worker malloc", size);
			break;
		}
		make_room(r, size);
		track(on_worker(w, W_MALLOC, NULL, size, NULL), size, 16, K_PLAIN, 0,
		      "worker malloc");
		break;
	}
	case 28: { /* a worker frees a block (from any thread) */
		unsigned w = rd8(r) % NWORKERS;
		int slot = pick(r);
		if (slot < 0)
			break;
		blk_t b = live[slot];
		check_blk(&b, SIZE_MAX, "before free");
		untrack((unsigned)slot);
		on_worker(w, W_FREE, b.p, 0, NULL);
		TRACE("worker %u free(%p)", w, (void *)b.p);
		check_near(b.p);
		break;
	}
	case 29: { /* a worker reallocs, or exits */
		unsigned k = rd8(r);
		unsigned w = k % NWORKERS;
		if (k & 0x80) {
			on_worker(w, W_EXIT, NULL, 0, NULL);
			TRACE("worker %u exits", w);
			break;
		}
		int slot = pick(r);
		size_t size = take_size(r);
		if (size <= HUGE_MAX)
			make_room(r, size);
		if (slot >= 0 && (unsigned)slot >= nlive)
			slot = pick(r);
		do_realloc(slot, 1, size, 2 + (int)w);
		break;
	}
	}
	/* Both ends of every block: cheap, and catches most stray writes. */
	for (unsigned i = 0; i < nlive; i++)
		check_ends(&live[i]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	const char *t = getenv("FUZZ_ALLOC_TRACE");
	trace = t && *t && *t != '0';
	const char *conf = getenv("ARENA_CONF");
	if (conf && strstr(conf, "debug:true"))
		min_usable = 0;
	/* One CPU for every thread (see w_set); the workers inherit it. */
	int cpu = sched_getcpu();
	cpu_set_t set;
	CPU_ZERO(&set);
	if (cpu >= 0) {
		CPU_SET(cpu, &set);
		sched_setaffinity(0, sizeof set, &set);
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	rd_t r = { .d = data, .n = size, .i = 0 };
	op_no = 0;
	seed_seq = 0;
	while (r.i < r.n) {
		op_no++;
		run_op(&r);
	}
	op_no++;
	TRACE("end: freeing %u blocks", nlive);
	while (nlive > 0) {
		blk_t b = live[nlive - 1];
		check_blk(&b, SIZE_MAX, "at the end");
		untrack(nlive - 1);
		free(b.p);
	}
	if (live_bytes != 0)
		FAIL("model: %zu bytes left", live_bytes);
	return 0;
}
