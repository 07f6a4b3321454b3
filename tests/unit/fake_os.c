/* The fake OS boundary (fake_os.h says what is real and what is faked). */
#include "fake_os.h"

#include <string.h>
#include <sys/mman.h>

struct fake_os fake;

os_counters_t os_count;
uint8_t os_thp = THP_SYS_NONE;
char os_thp_defrag[16] = "fake";
bool os_has_madv_free = true;
bool os_has_dontunmap = true;
bool os_block_fits(size_t size) { return size <= HUGE_MAX; }

void fake_clear_log(void)
{
	fake.nreserve = fake.ncommit = fake.npurge = fake.nadvise = 0;
	fake.nmeta_huge = fake.nmove = fake.npopulate = 0;
}

static void log_call(struct fake_call *log, unsigned *n, void *addr, size_t size, uint8_t kind)
{
	if (*n < FAKE_LOG)
		log[*n] = (struct fake_call){ .addr = addr, .size = size, .kind = kind };
	(*n)++;
}

void os_init(os_sim_t sim) { (void)sim; }

uint64_t os_now_ms(void)
{
	return fake.now_ms;
}

uint64_t os_thread_cpu_ns(void)
{
	return fake.cpu_ns;
}

/* Secrets (region.c's link key): fixed, so runs repeat. */
uint64_t os_random(void)
{
	return 0x5eed5eed5eed5eedULL;
}

bool os_getenv(const char *name, char *value, size_t size)
{
	if (strcmp(name, "ARENA_CONF") != 0 || !fake.env)
		return false;
	size_t len = strnlen(fake.env, size - 1);
	memcpy(value, fake.env, len);
	value[len] = 0;
	return true;
}

uint8_t os_purge(void *addr, size_t size, uint8_t kind)
{
	log_call(fake.purge, &fake.npurge, addr, size, kind);
	if (fake.on_purge)
		fake.on_purge(addr, size);
	if (fake.purge_fail)
		return MS_DIRTY;
	return kind == PURGE_FREE && os_has_madv_free ? MS_LAZY : MS_ZERO;
}

/* As the real one without process_madvise: a call per range, logged. */
void os_purge_many(const struct iovec *r, unsigned n, uint8_t kind, uint8_t *state)
{
	for (unsigned i = 0; i < n; i++)
		state[i] = os_purge(r[i].iov_base, r[i].iov_len, kind);
}

bool os_purge_dontneed(void *addr, size_t size)
{
	log_call(fake.purge, &fake.npurge, addr, size, PURGE_DONTNEED);
	if (fake.on_purge)
		fake.on_purge(addr, size);
	return !fake.purge_fail;
}

void os_split_huge(void *page)
{
	fake.nsplit++;
	fake.split_at = page;
}

bool os_advise(void *addr, size_t size, uint8_t advice)
{
	log_call(fake.advise, &fake.nadvise, addr, size, advice);
	return os_thp != THP_SYS_NONE && advice != ADV_NONE && !fake.advise_fail;
}

void os_advise_meta_huge(void *addr, size_t size)
{
	(void)addr, (void)size;
	fake.nmeta_huge++;
}

bool os_collapse(void *addr, size_t size)
{
	(void)addr, (void)size;
	fake.ncollapse++;
	return os_thp != THP_SYS_NONE && !fake.advise_fail;
}

/* Guards: none installed (large.c is not linked); removals counted. */
uint8_t os_guard(void *addr, size_t size)
{
	(void)addr, (void)size;
	return GUARD_NONE;
}

void os_unguard(void *addr, size_t size, uint8_t kind)
{
	(void)addr, (void)size, (void)kind;
	fake.nunguard++;
}

/* As os.c: PROT_NONE, MAP_NORESERVE, aligned by over-mapping. */
void *os_reserve(size_t size, size_t align)
{
	if (fake.nreserve < FAKE_LOG)
		fake.reserve_size[fake.nreserve] = size;
	fake.nreserve++;
	if (fake.reserve_fail || (fake.reserve_max && size > fake.reserve_max))
		return NULL;
	size_t span = size + align;
	char *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	char *aligned = (char *)ALIGN_UP((uintptr_t)p, align);
	if (aligned > p)
		munmap(p, (size_t)(aligned - p));
	size_t tail = (size_t)(p + span - (aligned + size));
	if (tail)
		munmap(aligned + size, tail);
	return aligned;
}

bool os_commit(void *addr, size_t size)
{
	log_call(fake.commit, &fake.ncommit, addr, size, 0);
	if (fake.commit_fail)
		return false;
	return mprotect(addr, size, PROT_READ | PROT_WRITE) == 0;
}

void *os_map_meta(size_t size)
{
	if (fake.meta_fail)
		return NULL;
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void *os_map_meta_aligned(size_t size, size_t align)
{
	char *p = os_map_meta(size + align);
	if (!p)
		return NULL;
	char *aligned = (char *)ALIGN_UP((uintptr_t)p, align);
	if (aligned > p)
		munmap(p, (size_t)(aligned - p));
	if (aligned + size < p + size + align)
		munmap(aligned + size, (size_t)(p + size + align - (aligned + size)));
	return aligned;
}

void os_unmap(void *addr, size_t size)
{
	munmap(addr, size);
}

unsigned os_ncpus(void)
{
	return fake.ncpus ? fake.ncpus : 2;
}

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif

bool os_move_pages(void *src, void *dst, size_t size)
{
	if (fake.nmove < FAKE_LOG)
		fake.move_dst[fake.nmove] = dst;
	log_call(fake.move, &fake.nmove, src, size, 0);
	if (fake.move_fail) {
		if (fake.move_fail_hole)
			munmap(dst, size);
		return false;
	}
	return mremap(src, size, size, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, dst) == dst;
}

void os_populate(void *addr, size_t size)
{
	(void)addr, (void)size;
	fake.npopulate++;
}

bool os_map_fixed(void *addr, size_t size)
{
	return mmap(addr, size, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == addr;
}

bool os_is_mapped(void *addr, size_t size)
{
	unsigned char vec[CHUNK_PAGES];
	return mincore(addr, size, vec) == 0 || errno != ENOMEM;
}

bool os_fault_probe(os_fault_cost_t *out, unsigned nhuge)
{
	(void)nhuge;
	fake.nprobe++;
	if (os_thp != THP_SYS_MADVISE && os_thp != THP_SYS_ALWAYS)
		return false;
	*out = fake.probe;
	return true;
}

/* limit.c's reads: real files (tests point sim_cgroup_root at a tree of
 * their own). */
#include "limit.h"
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

long os_read_file(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t len = read(fd, buf, size - 1);
	int err = errno;
	close(fd);
	if (len < 0)
		return -err;
	buf[len] = 0;
	return len;
}

int os_open(const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

long os_read(int fd, void *buf, size_t n)
{
	ssize_t r = read(fd, buf, n);
	return r < 0 ? -errno : r;
}

void os_close(int fd)
{
	close(fd);
}

/* arena.c's chunks timed at their first write (thp.c asks for it): none
 * here. */
uint64_t os_first_write_ns(void *p, bool huge)
{
	(void)p;
	(void)huge;
	return 0;
}
