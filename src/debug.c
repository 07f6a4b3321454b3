/* Debug mode (ARENA_CONF=debug:true): every block gets a canary tail and,
 * in its last word, the size asked for; freed blocks are junked.  An
 * overflow is reported at the block's free, realloc or usable-size call; a
 * second free finds junk for the size.  Blocks never resize in place.  A
 * block up to REUSE_CHECK_MAX bytes handed out again must still be junk
 * (or zero) past its first LINK_WORDS, else it was written after free.
 *
 *   [0, size)                 the program's bytes
 *   [size, usable - 8)        CANARY, at least 8 bytes
 *   [usable - 8, usable)      size (size_t)
 */
#include "internal.h"

#include <string.h>

#define CANARY 0xca /* JUNK and LINK_WORDS: internal.h */
#define TAIL (2 * sizeof(size_t))

/* Checked for writes after free when handed out again (a pass over a huge
 * block would fault it in). */
#define REUSE_CHECK_MAX ((size_t)65536)

static size_t *size_slot(void *p, size_t usable)
{
	return (size_t *)((char *)p + usable) - 1;
}

static bool reuse_checked(const void *p, size_t usable)
{
	(void)p;
	return usable <= REUSE_CHECK_MAX;
}

/* Every freed byte was junked, and purging turns pages to zero; the
 * allocator writes only the first LINK_WORDS of a free block. */
static bool unchanged_since_free(const unsigned char *b, size_t usable)
{
	const uint64_t junk = 0x0101010101010101ull * JUNK;
	size_t i = LINK_WORDS;
	/* a word at a time; other words and the tail byte by byte */
	for (; i + 8 <= usable; i += 8) {
		uint64_t w;
		memcpy(&w, b + i, 8);
		if (w != junk && w != 0)
			break;
	}
	for (; i < usable; i++)
		if (b[i] != JUNK && b[i] != 0)
			return false;
	return true;
}

/* p (from the plain allocator, for size + TAIL bytes) armed for size; op
 * names the call for a report. */
static void *arm(void *p, size_t size, const char *op)
{
	if (!p)
		return NULL;
	size_t usable = alloc_plain_usable(p, NULL);
	if (reuse_checked(p, usable) && !unchanged_since_free(p, usable))
		out_misuse_in(op, "write after free: the block was changed after it was freed, before "
				  "this allocation reused it", p);
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

/* p's requested size, its tail checked; SIZE_MAX when p is not a live
 * block (reported for op).  A damaged tail is reported; the block stays
 * usable. */
static size_t checked_size(void *p, const char *op, size_t *usable_out)
{
	const char *error = NULL;
	size_t usable = alloc_plain_usable(p, &error);
	bool freeing = !strcmp(op, "free");
	if (error) {
		out_misuse_in(op, error == plain_freed_block && freeing ? "double free" : error, p);
		return SIZE_MAX;
	}
	size_t size = *size_slot(p, usable), end = usable - sizeof(size_t);
	if (size > end) {
		if (all_junk(size_slot(p, usable), sizeof(size_t)))
			out_misuse_in(op, freeing ? "double free (the block is junk)"
						  : "use of a freed block (it is junk)", p);
		else
			out_misuse_in(op, "heap overflow: the end of the block was overwritten", p);
		return SIZE_MAX;
	}
	const unsigned char *tail = (const unsigned char *)p + size;
	for (size_t i = 0; i < end - size; i++) {
		if (tail[i] != CANARY) {
			out_misuse_in(op, "heap overflow: bytes after the block were overwritten", p);
			break;
		}
	}
	*usable_out = usable;
	return size;
}

static void *alloc_for(size_t size, const char *op)
{
	if (size > HUGE_MAX)
		return errno_enomem(), NULL;
	return arm(alloc_plain_malloc(size + TAIL), size, op);
}

void *debug_malloc(size_t size)
{
	return alloc_for(size, "malloc");
}

void *debug_aligned(size_t align, size_t size)
{
	if (size > HUGE_MAX)
		return errno_enomem(), NULL;
	return arm(alloc_plain_aligned(align, size + TAIL), size, "aligned_alloc");
}

void *debug_calloc(size_t total)
{
	void *p = alloc_for(total, "calloc");
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
	alloc_plain_free(p);
}

void *debug_realloc(void *p, size_t size)
{
	if (!p)
		return alloc_for(size, "realloc");
	if (size == 0) {
		debug_free(p, "realloc");
		return NULL;
	}
	size_t usable, old = checked_size(p, "realloc", &usable);
	if (old == SIZE_MAX)
		return errno_enomem(), NULL;
	void *q = alloc_for(size, "realloc");
	if (!q)
		return NULL;
	memcpy(q, p, old < size ? old : size);
	memset(p, JUNK, usable);
	alloc_plain_free(p);
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
		out_misuse_in("free", align ? "free_aligned_sized with a size or alignment the block was "
					      "not allocated with"
					    : "free_sized with a size the block was not allocated with", p);
		return;
	}
	memset(p, JUNK, usable);
	alloc_plain_free(p);
}
