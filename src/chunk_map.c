/* Mappings of chunks: moving a huge block's pages to another run of chunks
 * (mremap), and the THP advice of chunks (split out of chunk.c; above it:
 * a move frees the source run through it).  Both may split the kernel's
 * mappings, so both keep the chunks' map_tag (region.c) up to date. */
#include "internal.h"

#include <errno.h>
#include <string.h>

/* Moves the pages of the k chunks at src, all in one mapping, to dst;
 * false when the kernel refused (nothing moved: a move of one mapping
 * fails whole).  The moved chunks keep their THP advice (the kernel moves
 * it with them); both ranges are now mappings of their own. */
static bool move_one_mapping(char *src, char *dst, size_t k)
{
	chunk_desc_t *s = chunk_desc_of(src), *t = chunk_desc_of(dst);
	if (!os_move_pages(src, dst, k << CHUNK_SHIFT))
		return false;
	uint32_t src_tag = region_new_tag(), dst_tag = region_new_tag();
	for (size_t i = 0; i < k; i++) {
		t[i].advice = s[i].advice;
		t[i].map_tag = dst_tag;
		s[i].map_tag = src_tag;
	}
	return true;
}

/* Moves the huge block of n chunks at src (usable bytes) into the first n
 * chunks of dst, a run the caller has allocated, and frees src.  One mremap
 * per mapping the block spans (map_tag): usually one or two (a block that
 * grew in place after a move).  Linux 6.17 also moves ranges spanning
 * several mappings in one call, but may then fail half-way with no way to
 * tell which part moved; a move of one mapping fails whole.  A part the
 * kernel will not move (too many mappings) is copied.  Returns the chunks
 * copied. */
size_t chunk_map_move(void *src, void *dst, size_t n, size_t usable)
{
	chunk_desc_t *s = chunk_desc_of(src);
	/* a huge block of n chunks onto a run of at least n */
	ARENA_ASSERT(s && s->kind == CK_HUGE && s->nchunks == n && usable <= n << CHUNK_SHIFT);
	ARENA_ASSERT(chunk_desc_of(dst) && chunk_desc_of(dst)->kind == CK_HUGE &&
		     chunk_desc_of(dst)->nchunks >= n);
	size_t copied = 0;
	for (size_t i = 0; i < n;) {
		size_t j = i + 1;
		while (j < n && s[j].map_tag == s[i].map_tag)
			j++;
		char *from = (char *)src + (i << CHUNK_SHIFT), *to = (char *)dst + (i << CHUNK_SHIFT);
		if (move_one_mapping(from, to, j - i)) {
			chunk_free_moved(from, j - i);
		} else {
			size_t off = i << CHUNK_SHIFT, len = (j - i) << CHUNK_SHIFT;
			chunk_fill_holes(to, j - i);
			memcpy(to, from, usable - off < len ? usable - off : len);
			chunk_free(from, j - i);
			copied += j - i;
		}
		i = j;
	}
	return copied;
}

/* Gives the THP advice `want` to n chunks at base, which the caller owns:
 * ADV_HUGE asks for huge pages; ADV_NOHUGE for none (MADV_NOHUGEPAGE where
 * the system would give them anyway, or where an earlier owner asked for
 * them).  Only chunks whose recorded advice differs get a call. */
void chunk_map_advise(void *base, size_t n, uint8_t want)
{
	if (os_thp == THP_SYS_NONE || os_thp == THP_SYS_NEVER || want == ADV_NONE)
		return;
	chunk_desc_t *d = chunk_desc_of(base);
	ARENA_ASSERT(d && want <= ADV_NOHUGE && ((uintptr_t)base & CHUNK_MASK) == 0);
	bool always = os_thp == THP_SYS_ALWAYS;
	for (size_t i = 0; i < n;) {
		uint8_t cur = d[i].advice;
		bool ok = want == ADV_HUGE ? cur == ADV_HUGE
			: always ? cur == ADV_NOHUGE : cur != ADV_HUGE;
		if (ok) {
			i++;
			continue;
		}
		/* One call per mapping, which the advice may split off. */
		size_t j = i + 1;
		while (j < n && d[j].advice == cur && d[j].map_tag == d[i].map_tag)
			j++;
		if (os_advise((char *)base + (i << CHUNK_SHIFT), (j - i) << CHUNK_SHIFT, want)) {
			uint32_t tag = region_new_tag();
			for (size_t k = i; k < j; k++)
				d[k].advice = want, d[k].map_tag = tag;
		}
		i = j;
	}
}
