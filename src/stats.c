/* Statistics: arena_stats_get() for programs, malloc_stats() (under both
 * names) and ARENA_CONF=stats_print:true (at exit) for people. */
#include "arena.h"
#include "internal.h"
#include "limit.h"

#include <stddef.h>

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

/* Adds the pages of chunk c's slabs and runs to their classes' counts. */
static void count_class_pages(const arena_chunk_t *c, arena_stats_t *out)
{
	for (size_t i = 0; i < CHUNK_PAGES; i++) {
		page_info_t pg = c->page[i];
		if ((pg.kind == PG_SLAB || pg.kind == PG_LARGE) && pg.sclass < NCLASSES)
			out->classes[pg.sclass].pages++;
	}
}

static void sum_arenas(arena_stats_t *out)
{
	for (unsigned i = 0, nused = arena_count(); i < nused; i++) {
		arena_t *a = &arenas[i];
		arena_lock(a);
		out->active += a->active_pages << PAGE_SHIFT;
		out->chunks += a->nchunks;
		size_t dirty = 0, lazy = 0, free_pages = 0;
		list_for_each(c, &a->chunks, arena_chunk_t, link) {
			pagemap_count(c, &dirty, &lazy);
			free_pages += c->nfree;
			count_class_pages(c, out);
		}
		arena_unlock(a);
		out->dirty += dirty << PAGE_SHIFT;
		out->lazy += lazy << PAGE_SHIFT;
		out->zero += (free_pages - dirty - lazy) << PAGE_SHIFT;
	}
}

_Static_assert(NCLASSES <= ARENA_STATS_MAX_CLASSES, "arena_stats_t has an entry per class");

static void sum_classes(arena_stats_t *out)
{
	uint64_t nmalloc[NCLASSES], nfree[NCLASSES], cached[NCLASSES];
	tcache_sum(nmalloc, nfree, cached, &out->nthreads);
	out->nclasses = NCLASSES;
	for (unsigned c = 0; c < NCLASSES; c++) {
		arena_class_stats_t *cs = &out->classes[c];
		cs->size = class_size[c];
		cs->nmalloc = nmalloc[c];
		cs->nfree = nfree[c];
		cs->live = nmalloc[c] > nfree[c] ? nmalloc[c] - nfree[c] : 0;
		cs->cached = cached[c];
		if (c < NCACHED) /* above: runs of the request's pages (large.c) */
			out->allocated += cs->live * cs->size;
		if (c < NSMALL)
			out->nmalloc_small += nmalloc[c], out->nfree_small += nfree[c];
		else
			out->nmalloc_large += nmalloc[c], out->nfree_large += nfree[c];
	}
}

/* The memory limit's figures, and resident memory by state. */
static void limit_stats(arena_stats_t *out)
{
	out->memory_limit = limit_bytes();
	strcpy(out->memory_limit_source, limit_source_name(limit_source()));
	strcpy(out->pressure_source, pressure_kind_name());
	out->pressure_signals = atomic_load(&pressure_signals);
	out->purged_limit = atomic_load(&limit_purged);
	out->purged_pressure = atomic_load(&pressure_purged);
	out->pressure_purge_us = atomic_load(&pressure_last_us);
	size_t headers = 0;
	for (unsigned i = 0, nused = arena_count(); i < nused; i++)
		headers += __atomic_load_n(&arenas[i].nchunks, __ATOMIC_RELAXED) * CHUNK_HDR_BYTES;
	out->resident_live = out->active + headers;
	out->resident_dirty = out->dirty;
	out->resident_lazy = out->lazy;
	out->resident = out->resident_live + out->dirty + out->lazy;
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
	size_t huge = atomic_load(&huge_bytes), chunk_dirty, chunk_lazy;
	out->allocated += huge + atomic_load(&large_run_bytes);
	out->active += huge;
	out->nmalloc_huge = atomic_load(&huge_nmalloc);
	out->nfree_huge = atomic_load(&huge_nfree);
	chunk_stats(&out->mapped, &out->reserved, &out->chunks_free, &chunk_dirty, &chunk_lazy);
	out->dirty += chunk_dirty;
	out->lazy += chunk_lazy;
	out->zero += (out->chunks_free << CHUNK_SHIFT) - chunk_dirty - chunk_lazy;
	size_t mapped_chunks = out->mapped >> CHUNK_SHIFT;
	out->chunks = mapped_chunks - out->chunks_free;
	out->narenas = arena_count(); /* not arena_max(): no sched_getaffinity */
	out->sys_mmap = atomic_load(&os_count.mmap);
	out->sys_munmap = atomic_load(&os_count.munmap);
	out->sys_mprotect = atomic_load(&os_count.mprotect);
	out->sys_madvise = atomic_load(&os_count.madvise);
	out->sys_mremap = atomic_load(&os_count.mremap);
	out->purged_dontneed = atomic_load(&os_count.purged_dontneed);
	out->purged_free = atomic_load(&os_count.purged_free);
	out->chunks_advised_huge = atomic_load(&os_count.advised_huge);
	out->memset_skipped = atomic_load(&alloc_memset_skipped);
	out->huge_resized_in_place = atomic_load(&huge_nin_place);
	out->huge_moved_remap = atomic_load(&huge_nremap);
	out->huge_moved_copy = atomic_load(&huge_ncopy);
	out->remap_dontunmap = os_has_dontunmap;
	static const char *const modes[] = { "none", "never", "madvise", "always" };
	strcpy(out->thp_mode, modes[os_thp]);
	thp_decision_t d = thp_decision();
	strcpy(out->thp_decision, d.name);
	out->thp_probes = d.probes;
	out->thp_probe_huge_ns = d.huge_ns;
	out->thp_probe_small_ns = d.small_ns;
	out->thp_chunks_small = atomic_load(&huge_nsmall_chunks);
	out->thp_heap_checks = d.heap_checks;
	out->thp_heap_huge_ns = d.heap_huge_ns;
	out->thp_heap_small_ns = d.heap_small_ns;
	out->thp_heap_kept_small = d.heap_kept_small;
	out->thp_chunks_born_huge = atomic_load(&arena_born_huge);
	out->thp_chunks_born_regrown = atomic_load(&arena_born_regrown);
	out->thp_chunks_refilled = atomic_load(&arena_refilled_huge);
	bg_stats_t bg = background_stats();
	out->background_thread = bg.running;
	out->background_wakeups = bg.wakeups;
	out->background_passes = bg.passes;
	out->dirty_cap = purge_dirty_cap(out->active);
	out->purged_cap = atomic_load(&arena_cap_purged);
	out->large_lent_pages = atomic_load(&arena_lent_pages);
	out->sys_process_madvise = atomic_load(&os_count.process_madvise);
	out->purge_batched_runs = atomic_load(&os_count.batched_runs);
	limit_stats(out);
	return 0;
}

/* ---- resident memory by state, as the kernel counts it --------------------
 * The kernel's present pages of each region's chunks (os_resident_runs),
 * RES_BATCH chunks at a time without a lock, then each page put in its
 * state: free chunks' by their descriptor and huge blocks' as live under
 * the chunk lock, arena chunks' by their page map under their arena's (the
 * two locks one after the other, never nested).  A page that changes state
 * between the walk and the look counts in its old or new state. */
#define RES_BATCH 32
#define RES_RUNS 512

typedef struct res_scan {
	int fd;
	os_run_t runs[RES_RUNS];
	uint64_t present[RES_BATCH * CHUNK_WORDS], huge[RES_BATCH * CHUNK_WORDS];
} res_scan_t;

/* Sets bits [first, end) of map. */
static void res_bits(uint64_t *map, size_t first, size_t end)
{
	for (; first < end && first % 64; first++)
		map[first / 64] |= 1ULL << (first % 64);
	for (; first + 64 <= end; first += 64)
		map[first / 64] = ~0ULL;
	for (; first < end; first++)
		map[first / 64] |= 1ULL << (first % 64);
}

/* The present (and huge) pages of n chunks of r from chunk i0 into s's
 * bitmaps; false where the kernel does not say. */
static bool res_walk(res_scan_t *s, const region_t *r, size_t i0, size_t n)
{
	memset(s->present, 0, sizeof(s->present));
	memset(s->huge, 0, sizeof(s->huge));
	uintptr_t lo = (uintptr_t)r->base + (i0 << CHUNK_SHIFT), from = lo;
	uintptr_t to = from + (n << CHUNK_SHIFT), next;
	while (from < to) {
		long k = os_resident_runs(&s->fd, from, to, s->runs, RES_RUNS, &next);
		if (k < 0 || (k == 0 && next <= from))
			return k == 0 && next >= to;
		for (long i = 0; i < k; i++) {
			size_t a = (size_t)(s->runs[i].start - lo) >> PAGE_SHIFT;
			size_t b = (size_t)(s->runs[i].end - lo) >> PAGE_SHIFT;
			res_bits(s->present, a, b);
			if (s->runs[i].flags & OS_RUN_HUGE)
				res_bits(s->huge, a, b);
		}
		from = next;
	}
	return true;
}

static size_t res_count(const uint64_t *map)
{
	size_t n = 0;
	for (unsigned w = 0; w < CHUNK_WORDS; w++)
		n += (size_t)ones64(map[w]);
	return n << PAGE_SHIFT;
}

/* Arena chunk c's present pages p by its page map, under its arena's
 * lock; false if it is no longer that arena's chunk. */
static bool res_arena_chunk(arena_resident_t *out, const chunk_desc_t *d, arena_chunk_t *c,
			    const uint64_t *p)
{
	arena_t *a = __atomic_load_n(&c->arena, __ATOMIC_RELAXED);
	if (a < arenas || a >= arenas + MAX_ARENAS)
		return false;
	arena_lock(a);
	bool ours = d->kind == CK_ARENA && c->arena == a;
	for (unsigned w = 0; ours && w < CHUNK_WORDS; w++) {
		uint64_t f = c->free_map[w], dm = c->dirty_map[w], lm = c->lazy_map[w];
		out->live += (size_t)ones64(p[w] & ~f) << PAGE_SHIFT;
		out->dirty += (size_t)ones64(p[w] & dm) << PAGE_SHIFT;
		out->lazy += (size_t)ones64(p[w] & lm) << PAGE_SHIFT;
		out->zero += (size_t)ones64(p[w] & f & ~dm & ~lm) << PAGE_SHIFT;
	}
	arena_unlock(a);
	return ours;
}

/* The walked chunks [i0, i0 + n) of r put in their states. */
static void res_classify(arena_resident_t *out, const res_scan_t *s, region_t *r, size_t i0,
			 size_t n)
{
	uint64_t arena_chunks = 0;
	mutex_lock(&chunk_mtx);
	for (size_t j = 0; j < n; j++) {
		const chunk_desc_t *d = &r->desc[i0 + j];
		size_t bytes = res_count(s->present + j * CHUNK_WORDS);
		if (d->kind == CK_ARENA)
			arena_chunks |= 1ULL << j;
		else if (d->kind == CK_HUGE || d->kind == CK_HUGE_BODY)
			out->live += bytes;
		else if (d->kind == CK_FREE)
			*(d->state == MS_DIRTY ? &out->dirty : d->state == MS_LAZY ? &out->lazy
										 : &out->zero) += bytes;
	}
	mutex_unlock(&chunk_mtx);
	for (size_t j = 0; j < n; j++)
		if (arena_chunks >> j & 1)
			res_arena_chunk(out, &r->desc[i0 + j],
					(arena_chunk_t *)(r->hdrs + (i0 + j) * CHUNK_HDR_BYTES),
					s->present + j * CHUNK_WORDS);
	for (size_t j = 0; j < n; j++)
		out->huge += res_count(s->huge + j * CHUNK_WORDS);
}

API int arena_stats_resident(arena_resident_t *out)
{
	static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
	static res_scan_t *s; /* mapped on first use (see print_stats) */
	if (!out) {
		errno = EINVAL;
		return -1;
	}
	memset(out, 0, sizeof(*out));
	strcpy(out->source, "none");
	if (!ensure_init())
		return 0;
	pthread_mutex_lock(&mtx);
	if (!s)
		s = os_map_meta(sizeof(*s));
	bool ok = s != NULL;
	if (ok)
		s->fd = os_open("/proc/self/pagemap", O_RDONLY);
	for (unsigned i = 0, nr = atomic_load(&nregions); ok && i < nr; i++) {
		region_t *r = &regions[i];
		size_t end = __atomic_load_n(&r->frontier, __ATOMIC_RELAXED);
		for (size_t i0 = 0; ok && i0 < end; i0 += RES_BATCH) {
			size_t n = end - i0 < RES_BATCH ? end - i0 : RES_BATCH;
			if ((ok = res_walk(s, r, i0, n)))
				res_classify(out, s, r, i0, n);
		}
	}
	if (ok)
		strcpy(out->source, s->fd >= 0 ? "PAGEMAP_SCAN" : "mincore");
	else
		memset(out, 0, offsetof(arena_resident_t, source));
	if (s && s->fd >= 0)
		os_close(s->fd);
	pthread_mutex_unlock(&mtx);
	out->total = out->live + out->dirty + out->lazy + out->zero;
	return 0;
}

static size_t kib(size_t bytes)
{
	return (bytes + 1023) / 1024;
}

/* glibc's malloc_stats summary with libarena's figures (per arena: its
 * chunks and pages in use; in all: mapped, and the bytes held; "mmap"
 * regions: huge blocks at their peak), for what reads glibc's lines;
 * libarena's own follow. */
static void print_glibc_summary(const arena_stats_t *s)
{
	for (unsigned i = 0, nused = arena_count(); i < nused; i++) {
		arena_t *a = &arenas[i];
		arena_lock(a);
		size_t system = a->nchunks << CHUNK_SHIFT, in_use = a->active_pages << PAGE_SHIFT;
		arena_unlock(a);
		if (i > 0 && system == 0)
			continue;
		out_printf("Arena %u:\nsystem bytes     = %10zu\nin use bytes     = %10zu\n", i, system,
			   in_use);
	}
	out_printf("Total (incl. mmap):\nsystem bytes     = %10zu\nin use bytes     = %10zu\n"
		   "max mmap regions = %10lu\nmax mmap bytes   = %10lu\n", s->mapped, s->allocated,
		   (unsigned long)atomic_load(&huge_peak_blocks),
		   (unsigned long)atomic_load(&huge_peak_bytes));
}

/* libarena's own statistics, on stderr. */
static void print_body(const arena_stats_t *s)
{
	out_printf("libarena %s statistics\n", ARENA_VERSION);
	out_printf("  allocated %zu KiB, active %zu KiB, mapped %zu KiB, dirty %zu KiB, reserved %zu MiB\n",
		   kib(s->allocated), kib(s->active), kib(s->mapped), kib(s->dirty), s->reserved >> 20);
	out_printf("  chunks %zu in use, %zu free; arenas %u in use; threads %u\n",
		   s->chunks, s->chunks_free, s->narenas, s->nthreads);
	out_printf("  small  malloc %lu free %lu\n  large  malloc %lu free %lu (dirty pages lent by another arena %lu KiB)\n  huge   malloc %lu free %lu\n",
		   (unsigned long)s->nmalloc_small, (unsigned long)s->nfree_small,
		   (unsigned long)s->nmalloc_large, (unsigned long)s->nfree_large,
		   (unsigned long)(s->large_lent_pages << (PAGE_SHIFT - 10)),
		   (unsigned long)s->nmalloc_huge, (unsigned long)s->nfree_huge);
	out_printf("  free memory: dirty %zu KiB, lazy %zu KiB, zero %zu KiB; purged: dontneed %lu KiB, free %lu KiB\n",
		   kib(s->dirty), kib(s->lazy), kib(s->zero), (unsigned long)(s->purged_dontneed >> 10),
		   (unsigned long)(s->purged_free >> 10));
	out_printf("  calloc memset skipped %lu KiB; chunks advised huge %lu (born huge in a growing heap %lu, of them growing back after the dirty cap %lu; collapsed again as the heap refilled them %lu); THP mode %s\n",
		   (unsigned long)(s->memset_skipped >> 10), (unsigned long)s->chunks_advised_huge,
		   (unsigned long)s->thp_chunks_born_huge, (unsigned long)s->thp_chunks_born_regrown,
		   (unsigned long)s->thp_chunks_refilled, s->thp_mode);
	out_printf("  huge pages for fresh memory: %s (%lu probes; last: 2 MiB huge %lu us, in 4 KiB pages %lu us); chunks kept small %lu\n",
		   s->thp_decision, (unsigned long)s->thp_probes,
		   (unsigned long)(s->thp_probe_huge_ns / 1000), (unsigned long)(s->thp_probe_small_ns / 1000),
		   (unsigned long)s->thp_chunks_small);
	out_printf("  growing heap's chunks born huge: %lu timed (last: 2 MiB huge %lu us, in 4 KiB pages %lu us); chunks born small instead %lu\n",
		   (unsigned long)s->thp_heap_checks, (unsigned long)(s->thp_heap_huge_ns / 1000),
		   (unsigned long)(s->thp_heap_small_ns / 1000), (unsigned long)s->thp_heap_kept_small);
	out_printf("  huge realloc: in place %lu, moved by mremap %lu, copied %lu (%s)\n",
		   (unsigned long)s->huge_resized_in_place, (unsigned long)s->huge_moved_remap,
		   (unsigned long)s->huge_moved_copy,
		   s->remap_dontunmap ? "mremap DONTUNMAP" : "no mremap: copies");
	out_printf("  syscalls: mmap %lu munmap %lu mprotect %lu madvise %lu mremap %lu process_madvise %lu (for %lu free runs)\n",
		   (unsigned long)s->sys_mmap, (unsigned long)s->sys_munmap,
		   (unsigned long)s->sys_mprotect, (unsigned long)s->sys_madvise,
		   (unsigned long)s->sys_mremap, (unsigned long)s->sys_process_madvise,
		   (unsigned long)s->purge_batched_runs);
	if (s->background_thread)
		out_printf("  background thread: running; woke %lu times, %lu passes\n",
			   (unsigned long)s->background_wakeups, (unsigned long)s->background_passes);
	else if (s->dirty_cap != SIZE_MAX)
		out_printf("  background thread: none; dirty cap %zu KiB (purged by it: %lu KiB)\n",
			   kib(s->dirty_cap), (unsigned long)(s->purged_cap >> 10));
	else
		out_printf("  background thread: none; no dirty cap\n");
	if (s->memory_limit)
		out_printf("  memory limit %zu KiB (%s); resident %zu KiB (%zu%%)\n", kib(s->memory_limit),
			   s->memory_limit_source, kib(s->resident), s->resident / (s->memory_limit / 100 + 1));
	else
		out_printf("  memory limit: none (%s); resident %zu KiB\n", s->memory_limit_source,
			   kib(s->resident));
	out_printf("  resident by libarena's account: live %zu KiB, free dirty %zu KiB, lazy-free %zu KiB; free zero %zu KiB\n",
		   kib(s->resident_live), kib(s->resident_dirty), kib(s->resident_lazy), kib(s->zero));
	arena_resident_t k;
	arena_stats_resident(&k);
	out_printf("  resident by the kernel's count (%s): %zu KiB: live %zu KiB, free dirty %zu KiB, lazy-free %zu KiB, free zero %zu KiB; in huge pages %zu KiB\n",
		   k.source, kib(k.total), kib(k.live), kib(k.dirty), kib(k.lazy), kib(k.zero),
		   kib(k.huge));
	out_printf("  pressure signal: %s; %lu signals; purged for the limit %lu KiB, for pressure %lu KiB (last signal purged in %lu us)\n",
		   s->pressure_source, (unsigned long)s->pressure_signals,
		   (unsigned long)(s->purged_limit >> 10), (unsigned long)(s->purged_pressure >> 10),
		   (unsigned long)s->pressure_purge_us);
	out_printf("  thread caches: unused blocks given back %lu KiB\n",
		   (unsigned long)(tcache_gc_bytes() >> 10));
	out_printf("  %8s %12s %12s %10s %10s %10s\n", "class", "malloc", "free", "live", "cached",
		   "pages KiB");
	for (unsigned c = 0; c < s->nclasses; c++)
		if (s->classes[c].nmalloc)
			out_printf("  %8zu %12lu %12lu %10lu %10lu %10lu\n", s->classes[c].size,
				   (unsigned long)s->classes[c].nmalloc,
				   (unsigned long)s->classes[c].nfree,
				   (unsigned long)s->classes[c].live,
				   (unsigned long)s->classes[c].cached,
				   (unsigned long)(s->classes[c].pages << (PAGE_SHIFT - 10)));
}

/* libarena's statistics on stderr, after glibc's summary for malloc_stats.
 * Not a cancellation point (as glibc's): a thread cancelled in write(2)
 * would leave print_mtx held. */
static void print_stats(bool glibc_summary)
{
	/* Mapped on first use: not on a small thread's stack, and not in .bss
	 * among the variables every process touches. */
	static arena_stats_t *s;
	static pthread_mutex_t print_mtx = PTHREAD_MUTEX_INITIALIZER;
	int cancel_state;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
	pthread_mutex_lock(&print_mtx);
	if (!s)
		s = os_map_meta(sizeof(*s));
	if (s) {
		arena_stats_get(s);
		if (glibc_summary)
			print_glibc_summary(s);
		print_body(s);
	}
	pthread_mutex_unlock(&print_mtx);
	pthread_setcancelstate(cancel_state, NULL);
}

API void arena_stats_print(void)
{
	print_stats(false);
}

/* malloc_stats(): glibc's summary lines, then libarena's. */
API void arena_malloc_stats(void)
{
	print_stats(true);
}

void malloc_stats(void) ALIAS(arena_malloc_stats);

__attribute__((destructor)) static void print_at_exit(void)
{
	if (cfg->stats_print && atomic_load(&init_done))
		arena_stats_print();
}

/* Whether [start, end) lies in one of our regions. */
static bool range_is_ours(uintptr_t start, uintptr_t end)
{
	unsigned n = atomic_load(&nregions);
	for (unsigned i = 0; i < n; i++) {
		uintptr_t base = (uintptr_t)regions[i].base;
		if (start >= base && end <= base + regions[i].size)
			return true;
	}
	return false;
}

static uintptr_t parse_hex(const char **s)
{
	uintptr_t v = 0;
	for (;; (*s)++) {
		char c = **s;
		unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
			   : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) : 16u;
		if (d == 16)
			return v;
		v = v * 16 + d;
	}
}

/* One line of /proc/self/smaps: a mapping's header sets *ours, an
 * AnonHugePages line of one of ours adds to *total. */
static void smaps_line(const char *line, bool *ours, size_t *total)
{
	static const char key[] = "AnonHugePages:";
	const char *s = line;
	uintptr_t start = parse_hex(&s);
	if (s != line && *s == '-') {
		s++;
		*ours = range_is_ours(start, parse_hex(&s));
	} else if (*ours && !strncmp(line, key, sizeof(key) - 1)) {
		size_t kb = 0;
		for (s = line + sizeof(key) - 1; *s == ' '; s++)
			;
		for (; *s >= '0' && *s <= '9'; s++)
			kb = kb * 10 + (size_t)(*s - '0');
		*total += kb << 10;
	}
}

API size_t arena_stats_anon_huge(void)
{
	static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
	static char *buf; /* 64 KiB, mapped on first use (see print_stats) */
	enum { BUF = 1 << 16 };
	int fd = open("/proc/self/smaps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	size_t total = 0, len = 0;
	bool ours = false;
	pthread_mutex_lock(&mtx);
	if (!buf)
		buf = os_map_meta(BUF);
	for (ssize_t n; buf && (n = read(fd, buf + len, BUF - 1 - len)) > 0;) {
		len += (size_t)n;
		buf[len] = 0;
		char *line = buf, *nl;
		while ((nl = strchr(line, '\n'))) {
			*nl = 0;
			smaps_line(line, &ours, &total);
			line = nl + 1;
		}
		len = (size_t)(buf + len - line);
		memmove(buf, line, len);
		if (len == BUF - 1) /* a line longer than the buffer */
			len = 0;
	}
	pthread_mutex_unlock(&mtx);
	close(fd);
	return total;
}
