/* Assertions of libarena's invariants.  Compiled in by ARENA_DEBUG (make
 * DEBUG=1, the UBSan build and the unit tests: Makefile); a failure prints
 * one line through the messages layer (out.c: no stdio, no malloc), with the
 * file, line, function and the expression's text, then aborts.  Without
 * ARENA_DEBUG an assertion is nothing: its condition is never evaluated,
 * only named under sizeof, so that what it names stays used and the code
 * around it compiles exactly as without it.
 *
 * A condition may call the validators (chunk_validate_runs,
 * pagemap_validate_runs, slab_validate_free_list: internal.h), which are
 * declared in every build and defined only with ARENA_DEBUG. */
#ifndef ARENA_ASSERT_H
#define ARENA_ASSERT_H

#ifdef ARENA_DEBUG
/* out.c: "libarena: assertion failed: FILE:LINE: FUNC: EXPR", then abort. */
__attribute__((visibility("hidden"), cold)) _Noreturn void
out_assert_fail(const char *expr, const char *file, int line, const char *func);
#define ARENA_ASSERT(cond) \
	(__builtin_expect(!!(cond), 1) ? (void)0 \
				       : out_assert_fail(#cond, __FILE__, __LINE__, __func__))
#else
#define ARENA_ASSERT(cond) ((void)sizeof(!(cond)))
#endif

#endif /* ARENA_ASSERT_H */
