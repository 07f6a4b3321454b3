/* Stack capture for heap profiles (prof.c): the return addresses of the
 * calling thread, walked with libgcc's unwinder from the DWARF call-frame
 * information (.eh_frame), so that binaries built without frame pointers
 * (Debian's) have stacks too.  libarena.so carries the unwinder itself
 * (libgcc_eh, linked in statically, its symbols hidden), so it is there
 * from start-up (glibc's backtrace() would dlopen libgcc_s at its first
 * call, allocating, under the loader's lock) and costs a page only when
 * used (libgcc_s as a library of its own cost every process 80 KiB of RSS,
 * prof or not); a program linked with libarena.a gets it from libgcc_s
 * or, linked statically, libgcc_eh.
 *
 * Why this cannot deadlock (docs/design.md, "Heap profiles"): with glibc
 * 2.35 and later and gcc 12's libgcc, the unwinder finds a frame's FDE with
 * _dl_find_object, which reads the loader's table of objects without a lock
 * (a dlopen in another thread publishes a new version; the reader retries);
 * it takes object_mutex only when some code registered frames by hand
 * (__register_frame_info: JITs; crtbegin.o does it only without
 * .eh_frame_hdr), and runs a pthread_once to size its register table the
 * first time.  prof_stack_init walks once at initialisation, so that the
 * once is done before any thread could fork in the middle of it.  Nothing
 * here allocates; should anything the unwinder calls allocate, prof.c's
 * per-thread guard serves that allocation unsampled. */
#include "internal.h"

#include <dlfcn.h>
#include <link.h>
#include <unwind.h>

/* The code to leave out of stacks: libarena's own frames, at the top of
 * every stack taken from inside malloc.  Either the whole object that holds
 * libarena (libarena.so), or, when libarena is linked into the program
 * (libarena.a), the span from the lowest to the highest of its entry
 * points and slow paths: the archive's objects are laid out together. */
static uintptr_t self_lo, self_hi;

typedef struct walk {
	uintptr_t *pcs;
	unsigned max, n;
	bool top; /* still in libarena's frames */
} walk_t;

static _Unwind_Reason_Code step(struct _Unwind_Context *ctx, void *arg)
{
	walk_t *w = arg;
	uintptr_t pc = (uintptr_t)_Unwind_GetIP(ctx);
	if (pc == 0)
		return _URC_END_OF_STACK;
	if (w->top) {
		if (pc >= self_lo && pc < self_hi)
			return _URC_NO_REASON;
		w->top = false;
	}
	if (w->n >= w->max)
		return _URC_END_OF_STACK;
	w->pcs[w->n++] = pc;
	return _URC_NO_REASON;
}

unsigned prof_backtrace(uintptr_t *pcs, unsigned max)
{
	walk_t w = { .pcs = pcs, .max = max, .n = 0, .top = true };
	_Unwind_Backtrace(step, &w);
	return w.n;
}

/* lo..hi: the span of libarena's code in the program, for a program that
 * links libarena.a (alloc.c gives the addresses of its slow paths). */
void prof_stack_init(uintptr_t lo, uintptr_t hi)
{
	struct dl_find_object fo;
	if (_dl_find_object((void *)(uintptr_t)prof_backtrace, &fo) == 0 && fo.dlfo_link_map &&
	    fo.dlfo_link_map->l_name && fo.dlfo_link_map->l_name[0]) {
		/* a shared object of its own: all of it */
		self_lo = (uintptr_t)fo.dlfo_map_start;
		self_hi = (uintptr_t)fo.dlfo_map_end;
	} else {
		self_lo = lo;
		self_hi = hi;
	}
	uintptr_t pcs[4];
	(void)prof_backtrace(pcs, 4); /* the unwinder's one-time set-up, now */
}
