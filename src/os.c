/* The OS boundary: the only file that calls mmap, munmap, mprotect, madvise
 * and mremap.  Every call is counted (arena_stats_t.sys_*). */
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <sys/mman.h>

os_counters_t os_count;

static void count(atomic_ulong *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* Reserves size bytes of address space aligned to align, PROT_NONE: a
 * PROT_NONE private mapping is not charged against the commit limit, so a
 * large reservation costs nothing until os_commit makes parts of it usable.
 * Returns NULL (errno preserved) when the kernel refuses. */
void *os_reserve(size_t size, size_t align)
{
	int saved = errno;
	size_t span = size + align;
	count(&os_count.mmap);
	char *p = mmap(NULL, span, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		errno = saved;
		return NULL;
	}
	char *aligned = (char *)ALIGN_UP((uintptr_t)p, align);
	if (aligned > p) {
		count(&os_count.munmap);
		munmap(p, (size_t)(aligned - p));
	}
	size_t tail = (size_t)(p + span - (aligned + size));
	if (tail) {
		count(&os_count.munmap);
		munmap(aligned + size, tail);
	}
	return aligned;
}

/* Makes a reserved range readable and writable (charged to the commit limit
 * now, backed by memory only when touched). */
bool os_commit(void *addr, size_t size)
{
	int saved = errno;
	count(&os_count.mprotect);
	bool ok = mprotect(addr, size, PROT_READ | PROT_WRITE) == 0;
	errno = saved;
	return ok;
}

/* Memory for the allocator's own tables: zeroed, touched lazily. */
void *os_map_meta(size_t size)
{
	int saved = errno;
	count(&os_count.mmap);
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	errno = saved;
	return p == MAP_FAILED ? NULL : p;
}

void os_unmap(void *addr, size_t size)
{
	int saved = errno;
	count(&os_count.munmap);
	munmap(addr, size);
	errno = saved;
}

/* Gives the pages back; the next touch of the range reads zeros. */
bool os_purge_dontneed(void *addr, size_t size)
{
	int saved = errno;
	count(&os_count.madvise);
	bool ok = madvise(addr, size, MADV_DONTNEED) == 0;
	errno = saved;
	return ok;
}

/* CPUs this process may run on (sched_getaffinity: no malloc, unlike some
 * sysconf paths). */
unsigned os_ncpus(void)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return 1;
	int n = CPU_COUNT(&set);
	return n > 0 ? (unsigned)n : 1;
}
