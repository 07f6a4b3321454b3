/*
 * prof_stack.c: the stacks of heap profiles, walked with rules cached per
 * return address (x86-64), must be libgcc's, frame for frame: chains of
 * frames of every shape gcc gives (the stack pointer's offset moving with
 * pushes and local arrays, frames addressed by rbp: a variable-length
 * array, -fno-omit-frame-pointer), the same stacks again (cached), and a
 * stack through a signal handler (the signal frame is libgcc's); a walk
 * that is the thread's last again is found by its reads, and one that
 * differs from it only up the stack is not.
 */
#include <signal.h>
#include <unwind.h>

#include "unit.h"

typedef struct ref {
	uintptr_t *pcs;
	unsigned n, max;
} ref_t;

static _Unwind_Reason_Code ref_step(struct _Unwind_Context *ctx, void *arg)
{
	ref_t *r = arg;
	uintptr_t pc = (uintptr_t)_Unwind_GetIP(ctx);
	if (pc == 0 || r->n >= r->max)
		return _URC_END_OF_STACK;
	r->pcs[r->n++] = pc;
	return _URC_NO_REASON;
}

/* libgcc's walk; pcs[0] is in this function. */
static __attribute__((noinline)) unsigned ref_backtrace(uintptr_t *pcs, unsigned max)
{
	ref_t r = { pcs, 0, max };
	_Unwind_Backtrace(ref_step, &r);
	return r.n;
}

static volatile unsigned ncompared; /* written in a signal handler too */

/* Both walks from here: libgcc's pcs[0] is in its walker, pcs[1] a return
 * address in this function (a different call site each); from pcs[2] on
 * (this function's caller and up) prof_stack_backtrace's must be the same.  Its
 * own start with this function's return address when the cached walk
 * takes the stack (prof_stack_backtrace walks from its caller), with the
 * walker's when libgcc's does (a signal frame): the first frames up to
 * this function's caller are left out of the comparison. */
static __attribute__((noinline)) void compare_here(void)
{
	uintptr_t got[PROF_FRAMES], want[PROF_FRAMES];
	unsigned n = prof_stack_backtrace(got, PROF_FRAMES);
	unsigned m = ref_backtrace(want, PROF_FRAMES);
	cr_assert_gt(m, 3, "%u frames", m);
	unsigned k = 0;
	while (k < 3 && k < n && got[k] != want[2])
		k++;
	cr_assert(k < 3 && k < n, "the caller's return address %#lx not in the first frames",
		  (unsigned long)want[2]);
	/* the same length, unless one of them stopped at PROF_FRAMES */
	if (n < PROF_FRAMES && m < PROF_FRAMES)
		cr_assert_eq(n - k, m - 2, "%u frames from the caller, libgcc %u", n - k, m - 2);
	for (unsigned i = 2; i < m && i - 2 + k < n; i++)
		cr_assert_eq(got[i - 2 + k], want[i], "frame %u of %u: %#lx, libgcc %#lx", i, m,
			     (unsigned long)got[i - 2 + k], (unsigned long)want[i]);
	ncompared++;
}

static void chain(unsigned depth, uint64_t shape);

/* A frame addressed from the stack pointer, with callee-saved registers
 * and a local array. */
static __attribute__((noinline)) uint64_t frame_sp(unsigned depth, uint64_t shape)
{
	volatile uint64_t local[7];
	for (unsigned i = 0; i < 7; i++)
		local[i] = shape + i;
	chain(depth, shape);
	return local[(shape >> 3) % 7];
}

/* A variable-length array: gcc addresses the frame by rbp. */
static __attribute__((noinline)) uint64_t frame_vla(unsigned depth, uint64_t shape)
{
	volatile char buf[16 + (shape & 255)];
	buf[0] = (char)shape;
	chain(depth, shape);
	return (uint64_t)buf[0];
}

/* A frame with a frame pointer: gcc's optimize attribute; clang has none
 * (it warns, and -Werror stops the build), and makes one for a function
 * that reads __builtin_frame_address(0), as gcc does too. */
#ifdef __clang__
#define WITH_FRAME_POINTER
#else
#define WITH_FRAME_POINTER __attribute__((optimize("no-omit-frame-pointer")))
#endif
static __attribute__((noinline)) WITH_FRAME_POINTER uint64_t
frame_fp(unsigned depth, uint64_t shape)
{
	volatile uint64_t x = shape;
	volatile uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
	chain(depth, shape);
	return x + (fp & 0);
}

static volatile uint64_t sink;

static void chain(unsigned depth, uint64_t shape)
{
	if (depth == 0) {
		compare_here();
		return;
	}
	switch (shape % 3) {
	case 0: sink += frame_sp(depth - 1, shape / 3); break;
	case 1: sink += frame_vla(depth - 1, shape / 3); break;
	default: sink += frame_fp(depth - 1, shape / 3); break;
	}
}

TestSuite(prof_stack, .init = NULL);

Test(prof_stack, cached_walk_is_libgcc_walk)
{
	prof_stack_init(0, 0);
	uint64_t r = 0x9e3779b97f4a7c15ULL;
	for (unsigned i = 0; i < 400; i++) { /* every chain twice: rules cached */
		uint64_t shape = r;
		r ^= r << 13, r ^= r >> 7, r ^= r << 17;
		unsigned depth = (unsigned)(shape >> 58) % 40;
		chain(depth, shape);
		chain(depth, shape);
	}
	cr_assert_eq(ncompared, 800);
}

static void on_signal(int sig)
{
	(void)sig;
	chain(5, 12345);
}

Test(prof_stack, through_a_signal_handler)
{
	prof_stack_init(0, 0);
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGUSR1, &sa, NULL);
	ncompared = 0;
	for (unsigned i = 0; i < 3; i++)
		raise(SIGUSR1);
	cr_assert_eq(ncompared, 3, "%u", ncompared);
}

/* prof_stack_backtrace_tagged from here, and libgcc's walk into want (want[2]
 * on: this function's caller and up). */
static uintptr_t tagged_want[PROF_FRAMES];
static unsigned tagged_m;

static __attribute__((noinline)) unsigned tagged_leaf(uintptr_t *pcs, uint64_t *tag)
{
	unsigned n = prof_stack_backtrace_tagged(pcs, PROF_FRAMES, tag);
	tagged_m = ref_backtrace(tagged_want, PROF_FRAMES);
	sink++;
	return n;
}

/* The walk's frames from the caller of tagged_leaf on are libgcc's. */
static void check_walk(const uintptr_t *got, unsigned n)
{
	cr_assert_gt(tagged_m, 3);
	unsigned k = 0;
	while (k < 3 && k < n && got[k] != tagged_want[2])
		k++;
	cr_assert(k < 3 && k < n);
	cr_assert_eq(n - k, tagged_m - 2);
	for (unsigned i = 2; i < tagged_m; i++)
		cr_assert_eq(got[i - 2 + k], tagged_want[i]);
}

Test(prof_stack, the_last_walk_again_is_found_by_its_reads)
{
	prof_stack_init(0, 0);
	uintptr_t first[2][PROF_FRAMES];
	unsigned nfirst[2] = { 0, 0 };
	/* two call sites of tagged_leaf at the same depth (the same start:
	 * return address in tagged_leaf, stack pointer), each twice in a row,
	 * then the first again: the walk from the other site differs in one
	 * word up the stack */
	static const int site_of[] = { 0, 0, 1, 1, 0, 0, 1 };
	for (unsigned i = 0; i < sizeof(site_of) / sizeof(site_of[0]); i++) {
		uintptr_t pcs[PROF_FRAMES];
		uint64_t tag;
		unsigned n, site = (unsigned)site_of[i];
		if (site) {
			sink += 3;
			n = tagged_leaf(pcs, &tag);
			sink *= 5;
		} else {
			sink += 7;
			n = tagged_leaf(pcs, &tag);
			sink ^= 9;
		}
		bool again = i > 0 && site_of[i - 1] == (int)site;
		if (!again) { /* a walk: libgcc's frames; tagged for next time */
			cr_assert_eq(tag, 0, "walk %u: tag %llu", i, (unsigned long long)tag);
			check_walk(pcs, n);
			memcpy(first[site], pcs, n * sizeof(pcs[0]));
			nfirst[site] = n;
			prof_stack_backtrace_tag(100 + site);
		} else { /* the same as the last: its tag and frame count */
			cr_assert_eq(tag, 100 + site, "walk %u: tag %llu", i, (unsigned long long)tag);
			cr_assert_eq(n, nfirst[site]);
			check_walk(first[site], n);
		}
	}
	/* the two sites' stacks differ (the compiler kept both calls) */
	cr_assert_eq(nfirst[0], nfirst[1]);
	bool differ = false;
	for (unsigned i = 0; i < nfirst[0]; i++)
		differ |= first[0][i] != first[1][i];
	cr_assert(differ);
}
