/*
 * soak: a long randomised stress run of the whole malloc family, checking
 * every block's contents, with the memory use of the process over time.
 *
 * Not a benchmark workload (it declares no quick or full run, so bench/run
 * skips it; the tiny run is tests/test_bench.c's 5-second smoke test); see
 * docs/soak.md for how it is run and what the last run found.
 * BENCH tiny: -d 2 -t 2 -L 4m -H 16m -m 4m -F 1
 *
 * Each of -t threads loops doing random operations until -d seconds have
 * passed:
 *  - malloc, calloc (checked to read zero), realloc(NULL, n), posix_memalign,
 *    aligned_alloc and memalign (alignment 16 B .. 64 KiB, rarely 2 MiB;
 *    checked), realloc growing and shrinking, free;
 *  - sizes log-uniform: mostly 1 B .. 1 KiB, some up to 256 KiB and 1 MiB,
 *    rarely huge (1 MiB .. -m, default 64 MiB);
 *  - lifetimes: a short-lived pool (256 slots per thread, a slot picked at
 *    random is freed and refilled) and a long-lived pool (a block picked at
 *    random from all those the thread holds is resized, handed off, checked or
 *    freed);
 *  - cross-thread frees: a long-lived block is handed to another thread
 *    through that thread's inbox (a mutex-protected array); the receiver checks
 *    it, then frees it or keeps it in its own long-lived pool;
 *  - fork: every -F seconds one thread forks; the child checks some of the
 *    forking thread's inherited blocks, allocates, reallocates and frees blocks
 *    of its own, frees a few inherited ones and _exit(0)s; the parent waits (at
 *    most 30 s) and checks the exit status.
 *
 * Every block is filled with a pattern derived from its id (unique, not
 * address-dependent): byte o of block id is byte o & 7 of the little-endian
 * word splitmix64(id) + (o >> 3) * golden.  A block is checked before every
 * free and realloc, on hand-off and now and then while it lives: in full up
 * to 256 KiB, sampled above (the first and last 4 KiB and one word of every
 * 4 KiB page).  After a realloc the kept prefix is checked the same way and
 * the grown part is filled.  calloc blocks are checked to read zero (sampled
 * the same way) before they are filled.  A mismatch prints the block (id,
 * size, thread, operation) and the offset and exits 1 at once.
 *
 * Live bytes (the requested sizes of every block the soak holds, including
 * those in inboxes) follow a target oscillating between -L (64 MiB) and -H
 * (512 MiB) with a period of -p seconds (300): a thread above its share
 * (target / threads) mostly frees and shrinks, one below mostly allocates.
 * No new block or growth may take the live bytes above -H + 25 %.
 *
 * A watchdog stops the run (exit 1, abort for a core) when a thread has made
 * no progress for 60 s, so a deadlock does not hang it forever.
 *
 * Usage: soak [-t threads] [-d seconds] [-i interval] [-r seed] [-L low]
 *             [-H high] [-p period] [-m max block] [-F fork interval, 0: none]
 * Every -i seconds (1) it prints on stdout
 *   series t=<s> live=<bytes> rss=<bytes> ratio=<rss/live> ops=<total>
 *          usable=<bytes>
 * (usable: the malloc_usable_size of the same blocks; rss from
 * /proc/self/statm) followed, when the allocator has arena_stats_get (found with dlsym, so the
 * soak runs under any allocator), by allocated=, active=, mapped=, dirty=,
 * lazy= (bytes), and forks=; and with arena_stats_get, at the first sample
 * past each trough of the target (every -p seconds), a line
 *   classes t=<s> <size>:<live KiB>/<cached KiB>/<pages KiB> ... all:...
 * (cached: blocks in the threads' caches)
 * of the classes whose slabs and runs hold pages (where a trough's memory
 * is).  At the end:
 *   result ops=<n> ratio_p50=<x> ratio_p99=<x> ratio_max=<x> checks=<n>
 *          forks=<n> ...
 * (one line; the ratios over the samples after the first 10 s of warm-up),
 * then, under libarena, its statistics once every block is freed and 3 s
 * later.  aligned_alloc sizes are rounded up to the alignment, and that is
 * the size counted.
 */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "../include/arena.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the block pattern assumes a little-endian machine"
#endif

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define PAGE 4096
#define GOLDEN 0x9e3779b97f4a7c15ull
#define FULL_CHECK_MAX (256 * KiB) /* above: sampled */
#define NSHORT 256                 /* short-lived slots per thread */
#define NLONG 65536                /* long-lived blocks per thread, at most */
#define INBOX_CAP 1024
#define WARMUP_SEC 10.0
#define STALL_SEC 60.0
#define CHILD_WAIT_SEC 30.0
#define NONE ((size_t)-1)

typedef struct blk {
	unsigned char *p;
	size_t size;   /* requested */
	size_t usable; /* malloc_usable_size */
	uint64_t id;
} blk_t;

typedef struct inbox {
	pthread_mutex_t lock;
	atomic_size_t n;
	blk_t b[INBOX_CAP];
} inbox_t;

typedef struct worker {
	pthread_t thread;
	unsigned idx;
	uint64_t rng;
	uint64_t next_id;
	blk_t shortp[NSHORT];
	blk_t *longp; /* nlong blocks, dense */
	size_t nlong;
	inbox_t inbox;
	/* read by the reporter */
	_Alignas(64) atomic_size_t live, usable;
	/* Bytes of blocks the allocator has returned and the thread is still
	 * filling (or checking) before hold() counts them in live: a new
	 * block's size, a realloc's change of size (wrapping when it shrank).
	 * live + filling is what the program holds (held=). */
	atomic_size_t filling;
	atomic_uint_fast64_t ops, checks;
	atomic_uint_fast64_t n_malloc, n_calloc, n_aligned, n_realloc, n_free;
	atomic_uint_fast64_t n_sent, n_huge;
} worker_t;

static struct {
	unsigned nthreads;
	double seconds, interval, period;
	uint64_t seed;
	size_t low, high, cap, max_block;
	double fork_every;
	worker_t *w;
	atomic_int stop;
	atomic_size_t transit;       /* bytes in inboxes */
	atomic_size_t transit_usable;
	_Atomic double next_fork;    /* when the next fork is due */
	atomic_uint_fast64_t forks;
	double t0;
	int in_child;
} S;

/* ---- random numbers and sizes ------------------------------------------ */

static uint64_t rnd(worker_t *w)
{
	return xorshift64s(&w->rng);
}

static double unit(worker_t *w)
{
	return (double)(rnd(w) >> 11) * (1.0 / 9007199254740992.0);
}

/* Log-uniform in [lo, hi]. */
static size_t log_uniform(worker_t *w, size_t lo, size_t hi)
{
	double v = (double)lo * exp(unit(w) * log((double)hi / (double)lo));
	size_t n = (size_t)v;
	return n < lo ? lo : n > hi ? hi : n;
}

/* A block size: mostly small, rarely huge (long-lived blocks only). */
static size_t pick_size(worker_t *w, int allow_huge)
{
	unsigned r = (unsigned)(rnd(w) % 10000);
	if (r < 8500)
		return log_uniform(w, 1, KiB);
	if (r < 9700)
		return log_uniform(w, KiB, 256 * KiB);
	if (r < 9990 || !allow_huge)
		return log_uniform(w, 256 * KiB, MiB);
	return log_uniform(w, MiB, S.max_block);
}

/* ---- the block pattern ---------------------------------------------------- */

static inline uint64_t pat_base(uint64_t id)
{
	return splitmix64(id);
}

static inline uint64_t pat_word(uint64_t base, size_t k)
{
	return base + (uint64_t)k * GOLDEN;
}

static inline unsigned char pat_byte(uint64_t base, size_t off)
{
	return (unsigned char)(pat_word(base, off >> 3) >> (8 * (off & 7)));
}

/* Writes the pattern of base over [from, to) of p (p is 8-byte aligned). */
static void fill(unsigned char *p, uint64_t base, size_t from, size_t to)
{
	size_t o = from;
	for (; o < to && (o & 7); o++)
		p[o] = pat_byte(base, o);
	for (; o + 8 <= to; o += 8) {
		uint64_t v = pat_word(base, o >> 3);
		memcpy(p + o, &v, 8);
	}
	for (; o < to; o++)
		p[o] = pat_byte(base, o);
}

/* The first offset in [from, to) of p that differs from the pattern of base
 * (zero == 1: from zero), or NONE. */
static size_t scan(const unsigned char *p, uint64_t base, size_t from, size_t to, int zero)
{
	size_t o = from;
	for (; o < to && (o & 7); o++)
		if (p[o] != (zero ? 0 : pat_byte(base, o)))
			return o;
	for (; o + 8 <= to; o += 8) {
		uint64_t v;
		memcpy(&v, p + o, 8);
		if (v != (zero ? 0 : pat_word(base, o >> 3)))
			break;
	}
	for (; o < to; o++)
		if (p[o] != (zero ? 0 : pat_byte(base, o)))
			return o;
	return NONE;
}

/* Checks the first len bytes of p against the pattern (or zero): in full up
 * to FULL_CHECK_MAX, else the first and last page and one word of every page
 * in between (its place in the page varies with the page and the block). */
static size_t check_prefix(const unsigned char *p, uint64_t base, size_t len, int zero)
{
	if (len <= FULL_CHECK_MAX)
		return scan(p, base, 0, len, zero);
	size_t bad = scan(p, base, 0, PAGE, zero);
	if (bad == NONE)
		bad = scan(p, base, len - PAGE, len, zero);
	for (size_t pg = PAGE; bad == NONE && pg + PAGE <= len - PAGE; pg += PAGE) {
		size_t o = pg + ((splitmix64(base ^ pg) & (PAGE - 1)) & ~(size_t)7);
		bad = scan(p, base, o, o + 8, zero);
	}
	return bad;
}

static void say(const char *msg)
{
	size_t n = strlen(msg);
	if (write(2, msg, n) < 0 || (!S.in_child && write(1, msg, n) < 0))
		return;
}

/* Reports a bad block and ends the process (1; 3 in a fork child). */
static void corrupt(const char *op, const worker_t *w, const blk_t *b, size_t off, int zero)
{
	char msg[512];
	unsigned want = zero ? 0 : pat_byte(pat_base(b->id), off);
	snprintf(msg, sizeof msg,
		 "soak: FAIL%s: block id=%#" PRIx64 " size=%zu at %p (thread %u, %s): "
		 "offset %zu reads %#04x, expected %#04x%s\n",
		 S.in_child ? " in fork child" : "", b->id, b->size, (void *)b->p,
		 w->idx, op, off, b->p[off], want, zero ? " (calloc must read zero)" : "");
	say(msg);
	_exit(S.in_child ? 3 : 1);
}

static void die(const char *what, const worker_t *w, size_t size)
{
	char msg[256];
	snprintf(msg, sizeof msg, "soak: FAIL%s: %s (thread %u, size %zu)\n",
		 S.in_child ? " in fork child" : "", what, w ? w->idx : 0u, size);
	say(msg);
	_exit(S.in_child ? 3 : 1);
}

static void check(worker_t *w, const blk_t *b, const char *op)
{
	size_t bad = check_prefix(b->p, pat_base(b->id), b->size, 0);
	if (bad != NONE)
		corrupt(op, w, b, bad, 0);
	atomic_fetch_add_explicit(&w->checks, 1, memory_order_relaxed);
}

/* ---- operations ---------------------------------------------------------------- */

static size_t global_live(void)
{
	size_t n = atomic_load_explicit(&S.transit, memory_order_relaxed);
	for (unsigned i = 0; i < S.nthreads; i++)
		n += atomic_load_explicit(&S.w[i].live, memory_order_relaxed);
	return n;
}

/* What the threads hold, counted from the moment the allocator returned
 * each block (live counts a new or grown block only once it is filled). */
static size_t global_held(void)
{
	size_t n = global_live();
	for (unsigned i = 0; i < S.nthreads; i++)
		n += atomic_load_explicit(&S.w[i].filling, memory_order_relaxed);
	return n;
}

static size_t global_usable(void)
{
	size_t n = atomic_load_explicit(&S.transit_usable, memory_order_relaxed);
	for (unsigned i = 0; i < S.nthreads; i++)
		n += atomic_load_explicit(&S.w[i].usable, memory_order_relaxed);
	return n;
}

static void add(atomic_size_t *c, size_t n)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

/* Block b joins (sign 1) or leaves (-1) what w holds. */
static void hold(worker_t *w, const blk_t *b, int sign)
{
	add(&w->live, sign > 0 ? b->size : -b->size);
	add(&w->usable, sign > 0 ? b->usable : -b->usable);
}

static void count(atomic_uint_fast64_t *c)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

/* A new block of size bytes, by one of the allocation calls, filled. */
static blk_t new_block(worker_t *w, size_t size)
{
	blk_t b = { NULL, size, 0, ((uint64_t)w->idx << 48) | ++w->next_id };
	unsigned r = (unsigned)(rnd(w) % 100);
	int zero = 0;
	if (r < 60) {
		b.p = malloc(size);
		count(&w->n_malloc);
	} else if (r < 75) {
		b.p = calloc(1, size);
		zero = 1;
		count(&w->n_calloc);
	} else if (r < 80) {
		b.p = realloc(NULL, size);
		count(&w->n_malloc);
	} else {
		size_t align = (size_t)16 << (rnd(w) % 13); /* 16 B .. 64 KiB */
		if (rnd(w) % 200 == 0)
			align = 2 * MiB;
		if (r < 88) {
			void *p = NULL;
			int e = posix_memalign(&p, align, size);
			if (e)
				die("posix_memalign failed", w, size);
			b.p = p;
		} else if (r < 95) {
			/* C11: size a multiple of the alignment (the size asked for) */
			b.size = size = (size + align - 1) / align * align;
			b.p = aligned_alloc(align, size);
		} else {
			b.p = memalign(align, size);
		}
		if (b.p && ((uintptr_t)b.p & (align - 1))) {
			char what[96];
			snprintf(what, sizeof what, "block %p not aligned to %zu", (void *)b.p, align);
			die(what, w, size);
		}
		count(&w->n_aligned);
	}
	if (!b.p)
		die("allocation returned NULL", w, size);
	add(&w->filling, size);
	b.usable = malloc_usable_size(b.p);
	if (b.usable < size)
		die("malloc_usable_size below the requested size", w, size);
	if (size > MiB)
		count(&w->n_huge);
	if (zero) {
		size_t bad = check_prefix(b.p, 0, size, 1);
		if (bad != NONE)
			corrupt("calloc", w, &b, bad, 1);
	}
	fill(b.p, pat_base(b.id), 0, size);
	hold(w, &b, 1);
	add(&w->filling, -size);
	return b;
}

static void free_block(worker_t *w, blk_t *b, const char *op)
{
	check(w, b, op);
	free(b->p);
	hold(w, b, -1);
	count(&w->n_free);
	b->p = NULL;
}

/* Resizes *b to size, checking it before and the kept prefix after. */
static void resize(worker_t *w, blk_t *b, size_t size)
{
	check(w, b, "before realloc");
	unsigned char *p = realloc(b->p, size);
	if (!p)
		die("realloc returned NULL", w, size);
	size_t old = b->size, kept = old < size ? old : size;
	add(&w->filling, size - old);
	blk_t nb = { p, size, malloc_usable_size(p), b->id };
	if (nb.usable < size)
		die("malloc_usable_size below the requested size after realloc", w, size);
	size_t bad = check_prefix(p, pat_base(b->id), kept, 0);
	if (bad != NONE) {
		nb.size = kept;
		corrupt("after realloc, kept prefix", w, &nb, bad, 0);
	}
	if (size > old)
		fill(p, pat_base(b->id), old, size);
	hold(w, b, -1);
	*b = nb;
	hold(w, b, 1);
	add(&w->filling, old - size);
	count(&w->n_realloc);
	if (size > MiB && old <= MiB)
		count(&w->n_huge);
}

static void long_remove(worker_t *w, size_t i)
{
	w->longp[i] = w->longp[--w->nlong];
}

/* Hands block i of the long pool to another thread (freed here if its inbox
 * is full). */
static void send(worker_t *w, size_t i)
{
	blk_t b = w->longp[i];
	long_remove(w, i);
	unsigned to = (w->idx + 1 + (unsigned)(rnd(w) % (S.nthreads - 1))) % S.nthreads;
	inbox_t *in = &S.w[to].inbox;
	check(w, &b, "before hand-off");
	pthread_mutex_lock(&in->lock);
	size_t n = atomic_load_explicit(&in->n, memory_order_relaxed);
	if (n < INBOX_CAP) {
		in->b[n] = b;
		atomic_fetch_add_explicit(&S.transit, b.size, memory_order_relaxed);
		atomic_fetch_add_explicit(&S.transit_usable, b.usable, memory_order_relaxed);
		hold(w, &b, -1);
		atomic_store_explicit(&in->n, n + 1, memory_order_release);
		b.p = NULL;
	}
	pthread_mutex_unlock(&in->lock);
	if (b.p)
		free_block(w, &b, "free (inbox full)");
	else
		count(&w->n_sent);
}

/* Takes the blocks other threads handed to w: each is checked, then freed
 * (a cross-thread free) or kept as w's own. */
static void receive(worker_t *w, int keep)
{
	static _Thread_local blk_t got[INBOX_CAP];
	inbox_t *in = &w->inbox;
	if (!atomic_load_explicit(&in->n, memory_order_acquire))
		return;
	pthread_mutex_lock(&in->lock);
	size_t n = atomic_load_explicit(&in->n, memory_order_relaxed);
	memcpy(got, in->b, n * sizeof *got);
	atomic_store_explicit(&in->n, 0, memory_order_relaxed);
	pthread_mutex_unlock(&in->lock);
	for (size_t i = 0; i < n; i++) {
		atomic_fetch_sub_explicit(&S.transit, got[i].size, memory_order_relaxed);
		atomic_fetch_sub_explicit(&S.transit_usable, got[i].usable, memory_order_relaxed);
		hold(w, &got[i], 1);
		if (keep && rnd(w) % 2 && w->nlong < NLONG) {
			check(w, &got[i], "received");
			w->longp[w->nlong++] = got[i];
		} else {
			free_block(w, &got[i], "cross-thread free");
		}
	}
}

/* ---- fork ---------------------------------------------------------------------- */

/* The child: the only thread left is w's. */
static void child(worker_t *w)
{
	S.in_child = 1;
	for (unsigned k = 0; k < 8 && w->nlong; k++)
		check(w, &w->longp[rnd(w) % w->nlong], "inherited, in child");
	for (unsigned k = 0; k < NSHORT; k++)
		if (w->shortp[k].p)
			check(w, &w->shortp[k], "inherited, in child");
	blk_t mine[256];
	for (unsigned k = 0; k < 256; k++)
		mine[k] = new_block(w, pick_size(w, 0));
	for (unsigned k = 0; k < 256; k += 3)
		resize(w, &mine[k], pick_size(w, 0));
	for (unsigned k = 0; k < 256; k++)
		free_block(w, &mine[k], "free in child");
	for (unsigned k = 0; k < 8 && w->nlong; k++) {
		size_t i = rnd(w) % w->nlong;
		free_block(w, &w->longp[i], "free inherited, in child");
		long_remove(w, i);
	}
	_exit(0);
}

static void do_fork(worker_t *w)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		die("fork failed", w, 0);
	if (pid == 0)
		child(w);
	double deadline = now_sec() + CHILD_WAIT_SEC;
	int status;
	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			break;
		if (r < 0 && errno != EINTR)
			die("waitpid failed", w, 0);
		if (now_sec() > deadline) {
			char what[128];
			snprintf(what, sizeof what,
				 "fork child %d still running after %.0f s (deadlock after fork?); "
				 "left stopped with SIGSTOP for a debugger", (int)pid, CHILD_WAIT_SEC);
			kill(pid, SIGSTOP);
			die(what, w, 0);
		}
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		char what[128];
		if (WIFSIGNALED(status))
			snprintf(what, sizeof what, "fork child %d killed by signal %d",
				 (int)pid, WTERMSIG(status));
		else
			snprintf(what, sizeof what, "fork child %d exited with %d",
				 (int)pid, WEXITSTATUS(status));
		die(what, w, 0);
	}
	atomic_fetch_add(&S.forks, 1);
}

/* ---- the worker loop ------------------------------------------------------------ */

static double target_live(double t)
{
	double phase = (1.0 - cos(2.0 * M_PI * t / S.period)) / 2.0;
	return (double)S.low + (double)(S.high - S.low) * phase;
}

static void long_op(worker_t *w, size_t share, size_t glive)
{
	size_t live = atomic_load_explicit(&w->live, memory_order_relaxed);
	int over = live > share;
	if (w->nlong == 0 || (!over && rnd(w) % 2 && w->nlong < NLONG)) {
		size_t size = pick_size(w, 1);
		if (glive + size > S.cap)
			size = log_uniform(w, 1, KiB);
		w->longp[w->nlong++] = new_block(w, size);
		return;
	}
	size_t i = rnd(w) % w->nlong;
	blk_t *b = &w->longp[i];
	unsigned r = (unsigned)(rnd(w) % 100);
	unsigned p_free = over ? 75 : 15, p_shrink = over ? 15 : 15;
	unsigned p_send = S.nthreads > 1 ? (over ? 10 : 20) : 0;
	unsigned p_grow = over ? 0 : 35;
	if (r < p_free) {
		free_block(w, b, "free");
		long_remove(w, i);
	} else if (r < p_free + p_shrink) {
		resize(w, b, b->size > 1 ? 1 + (size_t)(unit(w) * (double)(b->size - 1)) : 1);
	} else if (r < p_free + p_shrink + p_send) {
		send(w, i);
	} else if (r < p_free + p_shrink + p_send + p_grow) {
		size_t size = (size_t)((double)b->size * (1.0 + 3.0 * unit(w))) + 1;
		if (size > S.max_block)
			size = S.max_block;
		if (size > MiB && b->size <= MiB && rnd(w) % 8)
			size = MiB; /* growing into a huge block: rarely */
		if (size > b->size && glive + (size - b->size) <= S.cap)
			resize(w, b, size);
		else
			check(w, b, "long-lived");
	} else {
		check(w, b, "long-lived");
	}
}

static void *worker_main(void *arg)
{
	worker_t *w = arg;
	size_t share = S.low / S.nthreads, glive = 0;
	for (uint64_t n = 0;; n++) {
		if ((n & 63) == 0) {
			if (atomic_load_explicit(&S.stop, memory_order_relaxed))
				break;
			receive(w, 1);
			double t = now_sec();
			share = (size_t)(target_live(t - S.t0) / S.nthreads);
			glive = global_live();
			double due = atomic_load_explicit(&S.next_fork, memory_order_relaxed);
			if (S.fork_every > 0 && t >= due &&
			    atomic_compare_exchange_strong(&S.next_fork, &due, t + S.fork_every))
				do_fork(w);
		}
		if (rnd(w) % 100 < 45) {
			blk_t *b = &w->shortp[rnd(w) % NSHORT];
			if (b->p)
				free_block(w, b, "free (short-lived)");
			else
				*b = new_block(w, glive > S.cap ? 64 : pick_size(w, 0));
		} else {
			long_op(w, share, glive);
		}
		atomic_store_explicit(&w->ops, n + 1, memory_order_relaxed);
	}
	for (unsigned k = 0; k < NSHORT; k++)
		if (w->shortp[k].p)
			free_block(w, &w->shortp[k], "free at end");
	while (w->nlong) {
		free_block(w, &w->longp[w->nlong - 1], "free at end");
		w->nlong--;
	}
	receive(w, 0);
	return NULL;
}

/* ---- the reporter --------------------------------------------------------------- */

static size_t rss_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long size = 0, res = 0;
	if (f) {
		if (fscanf(f, "%lu %lu", &size, &res) != 2)
			res = 0;
		fclose(f);
	}
	return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

static uint64_t sum(size_t field)
{
	uint64_t n = 0;
	for (unsigned i = 0; i < S.nthreads; i++)
		n += atomic_load_explicit((atomic_uint_fast64_t *)((char *)&S.w[i] + field),
					  memory_order_relaxed);
	return n;
}

/* At each trough of the target (t a multiple of the period): one line of
 * what each class's slabs and runs hold (KiB of pages) against its live
 * blocks and the blocks in the threads' caches (KiB),
 * "size:live/cached/pages", for the classes holding pages. */
static void print_classes(const arena_stats_t *st, double t)
{
	uint64_t live = 0, cached = 0, pages = 0;
	printf("classes t=%.0f", t);
	for (unsigned c = 0; c < st->nclasses && c < ARENA_STATS_MAX_CLASSES; c++) {
		const arena_class_stats_t *cs = &st->classes[c];
		if (!cs->pages)
			continue;
		uint64_t lk = cs->live * cs->size / KiB, ck = cs->cached * cs->size / KiB;
		uint64_t pk = cs->pages * (PAGE / KiB);
		printf(" %zu:%" PRIu64 "/%" PRIu64 "/%" PRIu64, cs->size, lk, ck, pk);
		live += lk;
		cached += ck;
		pages += pk;
	}
	printf(" all:%" PRIu64 "/%" PRIu64 "/%" PRIu64 "\n", live, cached, pages);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void usage(void)
{
	fprintf(stderr, "usage: soak [-t threads] [-d seconds] [-i interval] [-r seed] [-L low] "
		"[-H high] [-p period] [-m max block] [-F fork interval]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t threads = 8, seed = 1, low = 64 * MiB, high = 512 * MiB, maxb = 64 * MiB;
	double seconds = 600, interval = 1, period = 300, fork_every = 3;
	int c;
	while ((c = getopt(argc, argv, "t:d:i:r:L:H:p:m:F:")) != -1) {
		int bad = 0;
		switch (c) {
		case 't': bad = parse_u64(optarg, 1, 256, &threads); break;
		case 'd': bad = parse_double(optarg, 0, 1e7, &seconds); break;
		case 'i': bad = parse_double(optarg, 0, 3600, &interval); break;
		case 'r': bad = parse_u64(optarg, 0, UINT64_MAX, &seed); break;
		case 'L': bad = parse_size(optarg, MiB, (uint64_t)1 << 40, &low); break;
		case 'H': bad = parse_size(optarg, MiB, (uint64_t)1 << 40, &high); break;
		case 'p': bad = parse_double(optarg, 0, 1e7, &period); break;
		case 'm': bad = parse_size(optarg, 2 * MiB, (uint64_t)1 << 34, &maxb); break;
		case 'F':
			if (strcmp(optarg, "0") == 0)
				fork_every = 0;
			else
				bad = parse_double(optarg, 0, 1e7, &fork_every);
			break;
		default: usage();
		}
		if (bad) {
			fprintf(stderr, "soak: bad value for -%c: %s\n", c, optarg);
			usage();
		}
	}
	if (optind != argc || low > high)
		usage();
	S.nthreads = (unsigned)threads;
	S.seconds = seconds;
	S.interval = interval;
	S.period = period;
	S.seed = seed;
	S.low = low;
	S.high = high;
	S.cap = high + high / 4;
	S.max_block = maxb;
	S.fork_every = fork_every;

	int (*stats_get)(arena_stats_t *) =
		(int (*)(arena_stats_t *))dlsym(RTLD_DEFAULT, "arena_stats_get");
	printf("# soak threads=%u seconds=%g interval=%g seed=%" PRIu64 " low=%zu high=%zu "
	       "period=%g max_block=%zu fork_every=%g arena_stats=%s\n",
	       S.nthreads, seconds, interval, seed, S.low, S.high, period, S.max_block,
	       fork_every, stats_get ? "yes" : "no");
	fflush(stdout);

	S.w = calloc(S.nthreads, sizeof *S.w);
	if (!S.w)
		die("calloc of the workers failed", NULL, 0);
	for (unsigned i = 0; i < S.nthreads; i++) {
		worker_t *w = &S.w[i];
		w->idx = i;
		w->rng = rng_seed(seed, i);
		w->longp = malloc(NLONG * sizeof *w->longp);
		if (!w->longp)
			die("malloc of a pool failed", w, 0);
		pthread_mutex_init(&w->inbox.lock, NULL);
	}
	size_t nsamples = (size_t)(seconds / interval) + 16, ns = 0;
	double *ratios = malloc(nsamples * sizeof *ratios);
	double *held_ratios = malloc(nsamples * sizeof *held_ratios);
	uint64_t *last_ops = calloc(S.nthreads, sizeof *last_ops);
	double *last_move = malloc(S.nthreads * sizeof *last_move);
	if (!ratios || !last_ops || !last_move)
		die("malloc of the reporter's arrays failed", NULL, 0);

	S.t0 = now_sec();
	atomic_store(&S.next_fork, S.t0 + fork_every);
	for (unsigned i = 0; i < S.nthreads; i++) {
		last_move[i] = S.t0;
		if (pthread_create(&S.w[i].thread, NULL, worker_main, &S.w[i]))
			die("pthread_create failed", NULL, 0);
	}

	double ratio_max = 0, held_max = 0, last_trough = 0;
	size_t live_max = 0, rss_max = 0;
	for (unsigned k = 1;; k++) {
		double due = S.t0 + k * interval, t = now_sec();
		if (due > t)
			nanosleep(&(struct timespec){ (time_t)(due - t),
						      (long)((due - t - (time_t)(due - t)) * 1e9) },
				  NULL);
		t = now_sec();
		size_t held = global_held(), live = global_live(), rss = rss_bytes();
		uint64_t ops = sum(offsetof(worker_t, ops));
		double ratio = live ? (double)rss / (double)live : 0;
		printf("series t=%.0f live=%zu rss=%zu ratio=%.4f ops=%" PRIu64 " usable=%zu",
		       t - S.t0, live, rss, ratio, ops, global_usable());
		arena_stats_t st;
		bool got = stats_get && stats_get(&st) == 0;
		if (got)
			printf(" allocated=%zu active=%zu mapped=%zu dirty=%zu lazy=%zu",
			       st.allocated, st.active, st.mapped, st.dirty, st.lazy);
		printf(" forks=%" PRIuFAST64 " held=%zu\n", atomic_load(&S.forks), held);
		double trough = floor((t - S.t0) / S.period) * S.period;
		if (got && trough > last_trough) {
			last_trough = trough;
			print_classes(&st, t - S.t0);
		}
		fflush(stdout);
		if (t - S.t0 >= WARMUP_SEC && live && ns < nsamples) {
			double hr = held ? (double)rss / (double)held : ratio;
			held_ratios[ns] = hr;
			ratios[ns++] = ratio;
			if (ratio > ratio_max)
				ratio_max = ratio;
			if (hr > held_max)
				held_max = hr;
		}
		if (live > live_max)
			live_max = live;
		if (rss > rss_max)
			rss_max = rss;
		for (unsigned i = 0; i < S.nthreads; i++) {
			uint64_t o = atomic_load_explicit(&S.w[i].ops, memory_order_relaxed);
			if (o != last_ops[i]) {
				last_ops[i] = o;
				last_move[i] = t;
			} else if (t - last_move[i] > STALL_SEC) {
				fprintf(stderr, "soak: FAIL: thread %u made no progress for %.0f s "
					"(ops %" PRIu64 "; deadlock?); aborting\n", i, STALL_SEC, o);
				printf("soak: FAIL: thread %u made no progress for %.0f s\n", i, STALL_SEC);
				fflush(stdout);
				abort();
			}
		}
		if (t - S.t0 >= seconds)
			break;
	}
	atomic_store(&S.stop, 1);
	for (unsigned i = 0; i < S.nthreads; i++)
		pthread_join(S.w[i].thread, NULL);
	/* Blocks handed to a thread after it had stopped. */
	for (unsigned i = 0; i < S.nthreads; i++) {
		S.w[i].next_id = 0;
		receive(&S.w[i], 0);
	}
	size_t left = global_live();
	if (left)
		die("live bytes not zero after every block was freed", NULL, left);
	arena_stats_t st;
	if (stats_get && stats_get(&st) == 0) {
		printf("# after every block was freed: allocated=%zu active=%zu mapped=%zu "
		       "dirty=%zu lazy=%zu rss=%zu\n", st.allocated, st.active, st.mapped,
		       st.dirty, st.lazy, rss_bytes());
		sleep(3);
		stats_get(&st);
		printf("# 3 s later: allocated=%zu active=%zu mapped=%zu dirty=%zu lazy=%zu "
		       "rss=%zu\n", st.allocated, st.active, st.mapped, st.dirty, st.lazy,
		       rss_bytes());
	}

	double p50 = 0, p99 = 0, held_p50 = 0, held_p99 = 0;
	if (ns) {
		qsort(ratios, ns, sizeof *ratios, cmp_double);
		p50 = ratios[(ns - 1) / 2];
		p99 = ratios[(size_t)((double)(ns - 1) * 0.99)];
		qsort(held_ratios, ns, sizeof *held_ratios, cmp_double);
		held_p50 = held_ratios[(ns - 1) / 2];
		held_p99 = held_ratios[(size_t)((double)(ns - 1) * 0.99)];
	}
	printf("result ops=%" PRIu64 " ratio_p50=%.4f ratio_p99=%.4f ratio_max=%.4f "
	       "checks=%" PRIu64 " forks=%" PRIuFAST64 " seconds=%.0f live_max=%zu rss_max=%zu "
	       "malloc=%" PRIu64 " calloc=%" PRIu64 " aligned=%" PRIu64 " realloc=%" PRIu64
	       " free=%" PRIu64 " handed_off=%" PRIu64 " huge=%" PRIu64 " rss_end=%zu"
	       " held_p50=%.4f held_p99=%.4f held_max=%.4f\n",
	       sum(offsetof(worker_t, ops)), p50, p99, ratio_max,
	       sum(offsetof(worker_t, checks)), atomic_load(&S.forks), now_sec() - S.t0,
	       live_max, rss_max, sum(offsetof(worker_t, n_malloc)),
	       sum(offsetof(worker_t, n_calloc)), sum(offsetof(worker_t, n_aligned)),
	       sum(offsetof(worker_t, n_realloc)), sum(offsetof(worker_t, n_free)),
	       sum(offsetof(worker_t, n_sent)), sum(offsetof(worker_t, n_huge)), rss_bytes(),
	       held_p50, held_p99, held_max);
	fprintf(stderr, "soak: ok: %" PRIu64 " operations, %" PRIu64 " checks, %" PRIuFAST64
		" forks, RSS/live median %.3f, p99 %.3f, max %.3f\n",
		sum(offsetof(worker_t, ops)), sum(offsetof(worker_t, checks)),
		atomic_load(&S.forks), p50, p99, ratio_max);
	return 0;
}
