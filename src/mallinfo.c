/* glibc's statistics interfaces over libarena's figures (mallinfo2,
 * mallinfo, malloc_info), for monitoring tools; the mapping, field by
 * field, is in docs/compat.md. */
#include "arena.h"
#include "internal.h"

#include <limits.h>
#include <malloc.h>
#include <stdio.h>

/* What one arena holds, read under its lock. */
typedef struct arena_view {
	size_t chunk_bytes;              /* arena chunks, 2 MiB each */
	size_t active;                   /* pages in slabs and large blocks */
	uint32_t free_blocks[NSMALL];    /* free slots in slabs, per class */
} arena_view_t;

static void arena_view(arena_t *a, arena_view_t *v)
{
	arena_lock(a);
	v->chunk_bytes = a->nchunks << CHUNK_SHIFT;
	v->active = a->active_pages << PAGE_SHIFT;
	for (unsigned c = 0; c < NSMALL; c++) {
		uint32_t n = a->bins[c].nempty * (uint32_t)class_nblocks[c];
		list_for_each(s, &a->bins[c].nonfull, slab_t, link)
			n += s->nfree;
		v->free_blocks[c] = n;
	}
	arena_unlock(a);
}

/* glibc's fields as libarena fills them: docs/compat.md. */
static struct mallinfo2 fill_mallinfo2(void)
{
	static arena_stats_t *sp; /* large: not on the stack; mapped on first use */
	static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
	struct mallinfo2 m = { 0 };
	pthread_mutex_lock(&mtx);
	if (!sp)
		sp = os_map_meta(sizeof(*sp));
	if (sp && arena_stats_get(sp) == 0) {
		const arena_stats_t s = *sp;
		size_t huge = atomic_load(&huge_bytes), arena_bytes = 0;
		for (unsigned i = 0, nused = arena_count(); i < nused; i++) {
			arena_lock(&arenas[i]);
			arena_bytes += arenas[i].nchunks << CHUNK_SHIFT;
			arena_unlock(&arenas[i]);
		}
		m.arena = arena_bytes;
		m.ordblks = s.chunks_free;
		m.hblks = (size_t)(s.nmalloc_huge - s.nfree_huge);
		m.hblkhd = huge;
		m.uordblks = s.allocated > huge ? s.allocated - huge : 0;
		m.fordblks = arena_bytes > m.uordblks ? arena_bytes - m.uordblks : 0;
		m.keepcost = s.dirty + s.lazy;
	}
	pthread_mutex_unlock(&mtx);
	return m;
}

API struct mallinfo2 arena_mallinfo2(void)
{
	return fill_mallinfo2();
}

/* int fields, converted as glibc's (they wrap past 2 GiB). */
API struct mallinfo arena_mallinfo(void)
{
	struct mallinfo2 m2 = fill_mallinfo2();
	struct mallinfo m = {
		.arena = (int)m2.arena, .ordblks = (int)m2.ordblks, .smblks = (int)m2.smblks,
		.hblks = (int)m2.hblks, .hblkhd = (int)m2.hblkhd, .usmblks = (int)m2.usmblks,
		.fsmblks = (int)m2.fsmblks, .uordblks = (int)m2.uordblks,
		.fordblks = (int)m2.fordblks, .keepcost = (int)m2.keepcost,
	};
	return m;
}

/* One <heap> per arena with chunks (arena 0 always): per class its slabs'
 * free slots, then totals; "max" is the current figure. */
static bool print_heap(FILE *fp, unsigned nr, const arena_view_t *v, size_t *rest_n,
		       size_t *rest_bytes)
{
	size_t count = 0, bytes = 0;
	bool ok = fprintf(fp, "<heap nr=\"%u\">\n<sizes>\n", nr) >= 0;
	for (unsigned c = 0; c < NSMALL; c++) {
		if (!v->free_blocks[c])
			continue;
		size_t from = c ? class_size[c - 1] + 1 : 1;
		ok &= fprintf(fp, "  <size from=\"%zu\" to=\"%zu\" total=\"%zu\" count=\"%u\"/>\n",
			      from, class_size[c], (size_t)v->free_blocks[c] * class_size[c],
			      v->free_blocks[c]) >= 0;
		count += v->free_blocks[c];
		bytes += (size_t)v->free_blocks[c] * class_size[c];
	}
	ok &= fprintf(fp, "</sizes>\n<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
		    "<total type=\"rest\" count=\"%zu\" size=\"%zu\"/>\n"
		    "<system type=\"current\" size=\"%zu\"/>\n<system type=\"max\" size=\"%zu\"/>\n"
		    "<aspace type=\"total\" size=\"%zu\"/>\n<aspace type=\"mprotect\" size=\"%zu\"/>\n"
		    "</heap>\n", count, bytes, v->chunk_bytes, v->chunk_bytes, v->chunk_bytes,
		v->chunk_bytes) >= 0;
	*rest_n += count;
	*rest_bytes += bytes;
	return ok;
}

/* As glibc: options other than 0 give EINVAL; a failed write to fp gives
 * -1 with the stream's errno. */
API int arena_malloc_info(int options, FILE *fp)
{
	static arena_view_t *views; /* ~10 KiB: not on the stack; mapped on first use */
	static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
	if (options != 0)
		return EINVAL;
	if (!ensure_init())
		return ENOMEM;
	struct mallinfo2 m = fill_mallinfo2();
	pthread_mutex_lock(&mtx);
	if (!views && !(views = os_map_meta(MAX_ARENAS * sizeof(*views)))) {
		pthread_mutex_unlock(&mtx);
		return ENOMEM;
	}
	/* read first: fprintf may allocate, with no allocator lock held */
	for (unsigned i = 0, nused = arena_count(); i < nused; i++)
		arena_view(&arenas[i], &views[i]);
	size_t rest_n = 0, rest_bytes = 0, system = 0;
	bool ok = fputs("<malloc version=\"1\">\n", fp) >= 0;
	for (unsigned i = 0, nr = 0, nused = arena_count(); i < nused; i++) {
		if (i > 0 && views[i].chunk_bytes == 0)
			continue;
		ok &= print_heap(fp, nr++, &views[i], &rest_n, &rest_bytes);
		system += views[i].chunk_bytes;
	}
	system += m.hblkhd;
	ok &= fprintf(fp, "<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
		    "<total type=\"rest\" count=\"%zu\" size=\"%zu\"/>\n"
		    "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n"
		    "<system type=\"current\" size=\"%zu\"/>\n<system type=\"max\" size=\"%zu\"/>\n"
		    "<aspace type=\"total\" size=\"%zu\"/>\n<aspace type=\"mprotect\" size=\"%zu\"/>\n"
		    "</malloc>\n", rest_n + m.ordblks, rest_bytes + (m.ordblks << CHUNK_SHIFT),
		m.hblks, m.hblkhd, system, system, system, system) >= 0;
	pthread_mutex_unlock(&mtx);
	return ok ? 0 : -1;
}

struct mallinfo2 mallinfo2(void) ALIAS(arena_mallinfo2);
struct mallinfo mallinfo(void) ALIAS(arena_mallinfo);
int malloc_info(int, FILE *) ALIAS(arena_malloc_info);
