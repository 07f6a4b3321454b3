/*
 * prof_stack.c: the stacks of heap profiles, walked with rules cached per
 * return address (x86-64), must be libgcc's, frame for frame: chains of
 * frames of every shape gcc gives (the stack pointer's offset moving with
 * pushes and local arrays, frames addressed by rbp: a variable-length
 * array, -fno-omit-frame-pointer), the same stacks again (cached), and a
 * stack through a signal handler (the signal frame is libgcc's).
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

/* Both walks from here: pcs[0] is in the walker, pcs[1] a return address
 * in this function (a different call site each); from pcs[2] on (this
 * function's caller and up) they must be equal. */
static __attribute__((noinline)) void compare_here(void)
{
	uintptr_t got[PROF_FRAMES], want[PROF_FRAMES];
	unsigned n = prof_backtrace(got, PROF_FRAMES);
	unsigned m = ref_backtrace(want, PROF_FRAMES);
	cr_assert_eq(n, m, "%u frames, libgcc %u", n, m);
	cr_assert_gt(n, 3, "%u frames", n);
	for (unsigned i = 2; i < n; i++)
		cr_assert_eq(got[i], want[i], "frame %u of %u: %#lx, libgcc %#lx", i, n,
			     (unsigned long)got[i], (unsigned long)want[i]);
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

/* A frame with a frame pointer. */
static __attribute__((noinline, optimize("no-omit-frame-pointer"))) uint64_t
frame_fp(unsigned depth, uint64_t shape)
{
	volatile uint64_t x = shape;
	chain(depth, shape);
	return x;
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
