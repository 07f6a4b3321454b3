/* Statistics: arena_stats_get() for programs, malloc_stats() and
 * ARENA_CONF=stats_print:true (at exit) for people. */
#include "arena.h"
#include "internal.h"

#include <string.h>

static size_t dirty_pages_of(const arena_chunk_t *c)
{
	size_t n = 0;
	for (unsigned w = 0; w < CHUNK_WORDS; w++)
		n += (size_t)__builtin_popcountll(c->dirty_map[w]);
	return n;
}

static void sum_arenas(arena_stats_t *out)
{
	for (unsigned i = 0; i < narenas; i++) {
		arena_t *a = &arenas[i];
		arena_lock(a);
		out->active += a->active_pages << PAGE_SHIFT;
		out->chunks += a->nchunks;
		for (arena_chunk_t *c = a->chunks; c; c = c->next)
			out->dirty += dirty_pages_of(c) << PAGE_SHIFT;
		arena_unlock(a);
	}
}

static void sum_classes(arena_stats_t *out)
{
	uint64_t nmalloc[NCLASSES], nfree[NCLASSES];
	tcache_sum(nmalloc, nfree, &out->nthreads);
	out->nclasses = NCLASSES;
	for (unsigned c = 0; c < NCLASSES; c++) {
		arena_class_stats_t *cs = &out->classes[c];
		cs->size = class_size[c];
		cs->nmalloc = nmalloc[c];
		cs->nfree = nfree[c];
		cs->live = nmalloc[c] > nfree[c] ? nmalloc[c] - nfree[c] : 0;
		out->allocated += cs->live * cs->size;
		if (c < NSMALL)
			out->nmalloc_small += nmalloc[c], out->nfree_small += nfree[c];
		else
			out->nmalloc_large += nmalloc[c], out->nfree_large += nfree[c];
	}
}

API int arena_stats_get(arena_stats_t *out)
{
	if (!out) {
		errno = EINVAL;
		return -1;
	}
	memset(out, 0, sizeof(*out));
	if (!ensure_init())
		return 0;
	sum_classes(out);
	sum_arenas(out);
	size_t huge = atomic_load(&huge_bytes), chunk_dirty;
	out->allocated += huge;
	out->active += huge;
	out->nmalloc_huge = atomic_load(&huge_nmalloc);
	out->nfree_huge = atomic_load(&huge_nfree);
	chunk_stats(&out->mapped, &out->reserved, &out->chunks_free, &chunk_dirty);
	out->dirty += chunk_dirty;
	size_t mapped_chunks = out->mapped >> CHUNK_SHIFT;
	out->chunks = mapped_chunks - out->chunks_free;
	out->narenas = narenas;
	out->sys_mmap = atomic_load(&os_count.mmap);
	out->sys_munmap = atomic_load(&os_count.munmap);
	out->sys_mprotect = atomic_load(&os_count.mprotect);
	out->sys_madvise = atomic_load(&os_count.madvise);
	out->sys_mremap = atomic_load(&os_count.mremap);
	return 0;
}

static size_t kib(size_t bytes)
{
	return (bytes + 1023) / 1024;
}

API void arena_stats_print(void)
{
	static arena_stats_t s; /* large: not on the stack of a small thread */
	static pthread_mutex_t print_mtx = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_lock(&print_mtx);
	arena_stats_get(&s);
	out_printf("libarena %s statistics\n", ARENA_VERSION);
	out_printf("  allocated %zu KiB, active %zu KiB, mapped %zu KiB, dirty %zu KiB, reserved %zu MiB\n",
		   kib(s.allocated), kib(s.active), kib(s.mapped), kib(s.dirty), s.reserved >> 20);
	out_printf("  chunks %zu in use, %zu free; arenas %u; threads %u\n",
		   s.chunks, s.chunks_free, s.narenas, s.nthreads);
	out_printf("  small  malloc %lu free %lu\n  large  malloc %lu free %lu\n  huge   malloc %lu free %lu\n",
		   (unsigned long)s.nmalloc_small, (unsigned long)s.nfree_small,
		   (unsigned long)s.nmalloc_large, (unsigned long)s.nfree_large,
		   (unsigned long)s.nmalloc_huge, (unsigned long)s.nfree_huge);
	out_printf("  syscalls: mmap %lu munmap %lu mprotect %lu madvise %lu mremap %lu\n",
		   (unsigned long)s.sys_mmap, (unsigned long)s.sys_munmap,
		   (unsigned long)s.sys_mprotect, (unsigned long)s.sys_madvise,
		   (unsigned long)s.sys_mremap);
	out_printf("  %8s %12s %12s %10s\n", "class", "malloc", "free", "live");
	for (unsigned c = 0; c < s.nclasses; c++)
		if (s.classes[c].nmalloc)
			out_printf("  %8zu %12lu %12lu %10lu\n", s.classes[c].size,
				   (unsigned long)s.classes[c].nmalloc,
				   (unsigned long)s.classes[c].nfree,
				   (unsigned long)s.classes[c].live);
	pthread_mutex_unlock(&print_mtx);
}

__attribute__((destructor)) static void print_at_exit(void)
{
	if (conf.stats_print && atomic_load(&init_done))
		arena_stats_print();
}
