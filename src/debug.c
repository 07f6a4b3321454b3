/* Debug mode (ARENA_CONF=debug:true): every block gets a tail of canary
 * bytes and, in its last word, the size the program asked for; freed blocks
 * are filled with junk.  A write past the end of a block (a heap overflow)
 * is reported at the block's free, realloc or malloc_usable_size, with its
 * address; a second free finds the junk where the size was.  Blocks are
 * never resized in place, so every realloc checks and junks the old block.
 * Costs: 16 bytes or more per block and a pass over each block at free.
 *
 *   [0, size)                 the program's bytes
 *   [size, usable - 8)        CANARY, at least 8 bytes
 *   [usable - 8, usable)      size (size_t)
 */
#include "internal.h"

#include <string.h>

#define CANARY 0xca
#define JUNK 0x5a
#define TAIL (2 * sizeof(size_t))

static size_t *size_slot(void *p, size_t usable)
{
	return (size_t *)((char *)p + usable) - 1;
}

/* p (from the plain allocator, for size + TAIL bytes) armed for size. */
static void *arm(void *p, size_t size)
{
	if (!p)
		return NULL;
	size_t usable = api_usable_plain(p, NULL);
	memset((char *)p + size, CANARY, usable - sizeof(size_t) - size);
	*size_slot(p, usable) = size;
	return p;
}

static bool all_junk(const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i] != JUNK)
			return false;
	return true;
}

/* The size p was allocated with, its tail checked; SIZE_MAX when p is not
 * a live block (reported as a misuse of `op`).  A damaged tail is reported
 * and the block is still usable (misuse:warn goes on). */
static size_t checked_size(void *p, const char *op, size_t *usable_out)
{
	const char *error = NULL;
	size_t usable = api_usable_plain(p, &error);
	bool freeing = !strcmp(op, "free");
	if (error) {
		misuse_in(op, error == api_freed_block && freeing ? "double free" : error, p);
		return SIZE_MAX;
	}
	size_t size = *size_slot(p, usable), end = usable - sizeof(size_t);
	if (size > end) {
		if (all_junk(size_slot(p, usable), sizeof(size_t)))
			misuse_in(op, freeing ? "double free (the block is junk)"
					      : "use of a freed block (it is junk)", p);
		else
			misuse_in(op, "heap overflow: the end of the block was overwritten", p);
		return SIZE_MAX;
	}
	const unsigned char *tail = (const unsigned char *)p + size;
	for (size_t i = 0; i < end - size; i++) {
		if (tail[i] != CANARY) {
			misuse_in(op, "heap overflow: bytes after the block were overwritten", p);
			break;
		}
	}
	*usable_out = usable;
	return size;
}

void *debug_malloc(size_t size)
{
	if (size > HUGE_MAX)
		return errno_enomem(), NULL;
	return arm(api_malloc_plain(size + TAIL), size);
}

void *debug_aligned(size_t align, size_t size)
{
	if (size > HUGE_MAX)
		return errno_enomem(), NULL;
	return arm(api_aligned_plain(align, size + TAIL), size);
}

void *debug_calloc(size_t total)
{
	void *p = debug_malloc(total);
	if (p)
		memset(p, 0, total);
	return p;
}

void debug_free(void *p, const char *op)
{
	size_t usable;
	if (!p || checked_size(p, op, &usable) == SIZE_MAX)
		return;
	memset(p, JUNK, usable);
	api_free_plain(p);
}

void *debug_realloc(void *p, size_t size)
{
	if (!p)
		return debug_malloc(size);
	if (size == 0) {
		debug_free(p, "realloc");
		return NULL;
	}
	size_t usable, old = checked_size(p, "realloc", &usable);
	if (old == SIZE_MAX)
		return errno_enomem(), NULL;
	void *q = debug_malloc(size);
	if (!q)
		return NULL;
	memcpy(q, p, old < size ? old : size);
	memset(p, JUNK, usable);
	api_free_plain(p);
	return q;
}

size_t debug_usable(void *p)
{
	size_t usable, size = checked_size(p, "malloc_usable_size", &usable);
	return size == SIZE_MAX ? 0 : size;
}

/* free_sized and free_aligned_sized: the size must be the one asked for,
 * the alignment one the block has. */
void debug_free_sized(void *p, size_t align, size_t size)
{
	size_t usable, want = checked_size(p, "free", &usable);
	if (want == SIZE_MAX)
		return;
	if (size != want || (align && ((uintptr_t)p & (align - 1)) != 0)) {
		misuse_in("free", align ? "free_aligned_sized with a size or alignment the block was "
					  "not allocated with"
					: "free_sized with a size the block was not allocated with", p);
		return;
	}
	memset(p, JUNK, usable);
	api_free_plain(p);
}
