/* The OS boundary: the only file that maps, unmaps, protects, advises and
 * remaps memory.  Every call is counted (arena_stats_t.sys_*). */
#include "internal.h"
#include "limit.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/auxv.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

START_UP os_counters_t os_count;
START_UP uint8_t os_thp;              /* enum thp_sys */
START_UP char os_thp_defrag[16];
START_UP bool os_has_madv_free = true;
START_UP bool os_has_dontunmap;
START_UP bool os_has_batch_purge = true;
START_UP static bool os_has_populate = true;
START_UP static uint8_t sim_probe; /* enum sim_probe */
START_UP static bool sim_no_getrandom;
START_UP static bool sim_no_scan;   /* PAGEMAP_SCAN taken as missing */
START_UP bool os_has_guard = true;
/* secure mode: PROT_NONE guards where the kernel has no MADV_GUARD_INSTALL */
START_UP bool os_guard_prot;

static void count(atomic_ulong *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* An anonymous private mapping with MAP_NORESERVE, counted; without it
 * where that is refused with EINVAL (a seccomp filter allowing only
 * PRIVATE|ANONYMOUS|FIXED: OpenSSH's pre-authentication child). */
static void *map_anon(void *addr, size_t size, int prot, int flags)
{
	count(&os_count.mmap);
	void *p = mmap(addr, size, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | flags, -1, 0);
	if (p == MAP_FAILED && errno == EINVAL) {
		count(&os_count.mmap);
		p = mmap(addr, size, prot, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
	}
	return p;
}

/* size bytes of address space aligned to align, PROT_NONE: no commit
 * charge until os_commit.  NULL (errno kept) when refused. */
/* Where a reservation of span bytes is asked for: a random address
 * between 2^40 and 2^46 (the kernel takes it where it is free, else picks
 * its own), so that the heap's distance from libc's mappings, which the
 * kernel otherwise puts beside it, is not known: 24 bits of 2 MiB steps. */
static void *random_hint(size_t span)
{
	const uintptr_t lo = (uintptr_t)1 << 40, hi = (uintptr_t)1 << 46;
	if (span + CHUNK_SIZE >= hi - lo)
		return NULL;
	uintptr_t room = (hi - lo - span) >> CHUNK_SHIFT;
	return (void *)(lo + (os_random() % room << CHUNK_SHIFT));
}

void *os_reserve(size_t size, size_t align)
{
	int saved = errno;
	size_t span = size + align;
	char *p = map_anon(random_hint(span), span, PROT_NONE, 0);
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

static bool protect(void *addr, size_t size, int prot)
{
	int saved = errno;
	count(&os_count.mprotect);
	bool ok = mprotect(addr, size, prot) == 0;
	errno = saved;
	return ok;
}

/* Makes a reserved range read-write (charged now, backed when touched). */
bool os_commit(void *addr, size_t size)
{
	return protect(addr, size, PROT_READ | PROT_WRITE);
}

/* Memory for the allocator's own tables: zeroed, touched lazily. */
void *os_map_meta(size_t size)
{
	int saved = errno;
	void *p = map_anon(NULL, size, PROT_READ | PROT_WRITE, 0);
	errno = saved;
	return p == MAP_FAILED ? NULL : p;
}

/* os_map_meta, aligned to align (a power of two). */
void *os_map_meta_aligned(size_t size, size_t align)
{
	char *p = os_map_meta(size + align);
	if (!p)
		return NULL;
	char *aligned = (char *)ALIGN_UP((uintptr_t)p, align);
	if (aligned > p)
		os_unmap(p, (size_t)(aligned - p));
	if (aligned + size < p + size + align)
		os_unmap(aligned + size, (size_t)(p + size + align - (aligned + size)));
	return aligned;
}

/* A fresh read-write mapping at addr, replacing what is there at once. */
bool os_map_fixed(void *addr, size_t size)
{
	int saved = errno;
	void *p = map_anon(addr, size, PROT_READ | PROT_WRITE, MAP_FIXED);
	if (p != MAP_FAILED)
		errno = saved;
	return p == addr;
}

/* Whether [addr, addr+size) (<= 2 MiB) is all mapped: mincore fails with
 * ENOMEM over a hole. */
bool os_is_mapped(void *addr, size_t size)
{
	unsigned char vec[CHUNK_PAGES];
	int saved = errno;
	bool mapped = mincore(addr, size, vec) == 0 || errno != ENOMEM;
	errno = saved;
	return mapped;
}

void os_unmap(void *addr, size_t size)
{
	int saved = errno;
	count(&os_count.munmap);
	munmap(addr, size);
	errno = saved;
}

static int do_madvise(void *addr, size_t size, int advice)
{
	int saved = errno;
	count(&os_count.madvise);
	int rc = madvise(addr, size, advice) == 0 ? 0 : errno;
	errno = saved;
	return rc;
}

/* The kernel refused huge-page advice where it has THP: only a seccomp
 * filter does.  No advice is tried after that. */
static atomic_bool advice_refused;

/* Whether THP advice may be given: the mode honours it, and no call was
 * refused. */
static bool may_advise(void)
{
	return os_thp_usable() && !atomic_load_explicit(&advice_refused, memory_order_relaxed);
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif

/* Huge pages for the allocator's tables: the advice, then a collapse
 * (Linux 6.1), since a fault never puts a huge page where a page table
 * exists already. */
void os_advise_meta_huge(void *addr, size_t size)
{
	if (!may_advise())
		return;
	do_madvise(addr, size, MADV_HUGEPAGE);
	do_madvise(addr, size, MADV_COLLAPSE);
}

/* A synchronous collapse of an advised range (Linux 6.1); false where the
 * kernel cannot (khugepaged may later). */
bool os_collapse(void *addr, size_t size)
{
	if (!may_advise())
		return false;
	return do_madvise(addr, size, MADV_COLLAPSE) == 0;
}

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102 /* Linux 6.13 */
#define MADV_GUARD_REMOVE 103
#endif

/* Makes [addr, addr + size) a guard region and says which kind it is
 * (enum guard_kind), for os_unguard.  MADV_GUARD_INSTALL: a touch raises
 * SIGSEGV; no new mapping (the VMA count stays), and purges leave it.  At
 * the first refusal MADV_GUARD_REMOVE on the same pages tells a kernel
 * without guards (before Linux 6.13) or a filter refusing them (EINVAL:
 * none is tried again) from a mapping that refuses only installs (mlock'd;
 * a removal of nothing succeeds).  Secure mode then takes PROT_NONE (a
 * mapping more). */
uint8_t os_guard(void *addr, size_t size)
{
	static atomic_bool refusals_seen;
	if (__atomic_load_n(&os_has_guard, __ATOMIC_RELAXED)) {
		if (do_madvise(addr, size, MADV_GUARD_INSTALL) == 0)
			return GUARD_KERNEL;
		if (!atomic_exchange_explicit(&refusals_seen, true, memory_order_relaxed) &&
		    do_madvise(addr, size, MADV_GUARD_REMOVE) != 0)
			__atomic_store_n(&os_has_guard, false, __ATOMIC_RELAXED);
	}
	return os_guard_prot && protect(addr, size, PROT_NONE) ? GUARD_PROT : GUARD_NONE;
}

/* Takes away a guard region of that kind (the pages read zero again):
 * what os_guard made, whatever it makes now. */
void os_unguard(void *addr, size_t size, uint8_t kind)
{
	if (kind == GUARD_KERNEL)
		do_madvise(addr, size, MADV_GUARD_REMOVE);
	else if (kind == GUARD_PROT && protect(addr, size, PROT_READ | PROT_WRITE))
		os_purge_dontneed(addr, size);
}

/* Gives the pages back; the next touch of the range reads zeros. */
bool os_purge_dontneed(void *addr, size_t size)
{
	if (do_madvise(addr, size, MADV_DONTNEED) != 0)
		return false;
	atomic_fetch_add_explicit(&os_count.purged_dontneed, size, memory_order_relaxed);
	return true;
}

/* Splits the huge page holding page, if any, into 4 KiB pages now
 * (page is free: the caller purges it next).  MADV_COLD on a part of a
 * huge page splits it; MADV_DONTNEED on a part leaves it whole, charged to
 * the cgroup in full until reclaim splits it: 256 MiB of huge pages purged
 * by half left the cgroup's usage at 256 MiB, with this first 128 MiB, at
 * 0.14 ms a huge page (a probe program, 3 runs; docs/experiments). */
void os_split_huge(void *page)
{
	do_madvise(page, PAGE_SIZE, MADV_COLD);
}

#ifndef SYS_process_madvise
#define SYS_process_madvise 440 /* Linux 5.10, every architecture */
#endif
/* The calling process as a pidfd (Linux 6.15): no descriptor to close
 * under us, and a fork child advises its own memory. */
#define PIDFD_SELF_PROCESS (-10001)

/* One process_madvise of r[0..n): how many were advised whole.  Errors
 * meaning the kernel cannot turn the batch off. */
static unsigned batch_advise(const struct iovec *r, unsigned n, int advice)
{
	int saved = errno;
	count(&os_count.process_madvise);
	long rc = syscall(SYS_process_madvise, PIDFD_SELF_PROCESS, r, (size_t)n, advice, 0u);
	int err = errno;
	errno = saved;
	if (rc < 0 && (err == ENOSYS || err == EINVAL || err == EBADF || err == EPERM || err == ESRCH))
		os_has_batch_purge = false;
	size_t bytes = rc > 0 ? (size_t)rc : 0;
	unsigned done = 0;
	for (; done < n && bytes >= r[done].iov_len; done++) {
		bytes -= r[done].iov_len;
		count(&os_count.batched_runs);
		atomic_fetch_add_explicit(advice == MADV_FREE ? &os_count.purged_free
							      : &os_count.purged_dontneed,
					  r[done].iov_len, memory_order_relaxed);
	}
	return done;
}

/* Purges the n ranges r with kind; state[i]: what range i is in
 * afterwards.  One process_madvise where the kernel has it: one system
 * call and (Linux 6.16) one TLB flush, where madvise interrupts another
 * running thread's CPU per range (bench/probes/purge_batch).  Only with
 * purge_batch:true: a seccomp sandbox that allows madvise but not
 * process_madvise kills the process at the first call. */
void os_purge_many(const struct iovec *r, unsigned n, uint8_t kind, uint8_t *state)
{
	unsigned done = 0;
	if (n > 1 && os_has_batch_purge) {
		bool lazy = kind == PURGE_FREE && os_has_madv_free;
		done = batch_advise(r, n, lazy ? MADV_FREE : MADV_DONTNEED);
		for (unsigned i = 0; i < done; i++)
			state[i] = lazy ? MS_LAZY : MS_ZERO;
	}
	for (; done < n; done++)
		state[done] = os_purge(r[done].iov_base, r[done].iov_len, kind);
}

/* Purges with kind: the state afterwards.  EINVAL from MADV_FREE (Linux
 * 4.5) means the kernel lacks it: DONTNEED from then on. */
uint8_t os_purge(void *addr, size_t size, uint8_t kind)
{
	if (kind == PURGE_FREE && os_has_madv_free) {
		int rc = do_madvise(addr, size, MADV_FREE);
		if (rc == 0) {
			atomic_fetch_add_explicit(&os_count.purged_free, size, memory_order_relaxed);
			return MS_LAZY;
		}
		if (rc == EINVAL)
			os_has_madv_free = false;
	}
	return os_purge_dontneed(addr, size) ? MS_ZERO : MS_DIRTY;
}

/* Gives the THP advice for a range. */
bool os_advise(void *addr, size_t size, uint8_t advice)
{
	if (advice == ADV_NONE || !may_advise())
		return false;
	bool huge = advice == ADV_HUGE;
	int rc = do_madvise(addr, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
	if (rc == EINVAL || rc == EPERM || rc == EACCES || rc == ENOSYS)
		atomic_store_explicit(&advice_refused, true, memory_order_relaxed);
	if (rc != 0)
		return false;
	if (huge)
		atomic_fetch_add_explicit(&os_count.advised_huge, size >> 21, memory_order_relaxed);
	return true;
}

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4 /* Linux 5.7 */
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* Moves the pages of [src, src+size) to dst, in our own mapping: page
 * tables move, bytes do not (huge pages stay huge when 2 MiB-aligned).
 * MREMAP_DONTUNMAP leaves src mapped, so no other mmap takes the hole.
 * False when the kernel refuses: a source over several mappings before
 * Linux 6.17, or vm.max_map_count. */
bool os_move_pages(void *src, void *dst, size_t size)
{
	int saved = errno;
	count(&os_count.mremap);
	void *p = mremap(src, size, size, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, dst);
	errno = saved;
	return p == dst;
}

/* Whether the kernel moves pages with MREMAP_DONTUNMAP (Linux 5.7). */
static bool probe_dontunmap(void)
{
	int saved = errno;
	count(&os_count.mmap);
	char *p = mmap(NULL, 2 * PAGE_SIZE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		errno = saved;
		return false;
	}
	bool ok = os_move_pages(p, p + PAGE_SIZE, PAGE_SIZE);
	os_unmap(p, 2 * PAGE_SIZE);
	errno = saved;
	return ok;
}

/* Whether MADV_GUARD_INSTALL works (Linux 6.13): asked once at start-up
 * in secure mode, whose fallback is PROT_NONE (a mapping more per guard). */
static bool probe_guard(void)
{
	int saved = errno;
	count(&os_count.mmap);
	char *p = mmap(NULL, PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		errno = saved;
		return false;
	}
	bool ok = do_madvise(p, PAGE_SIZE, MADV_GUARD_INSTALL) == 0;
	os_unmap(p, PAGE_SIZE);
	errno = saved;
	return ok;
}

/* Faults a range in for writing in one call (Linux 5.14). */
void os_populate(void *addr, size_t size)
{
	if (!os_has_populate)
		return;
	int rc = do_madvise(addr, size, MADV_POPULATE_WRITE);
	if (rc == EINVAL)
		os_has_populate = false;
}

/* CPU time of the calling thread, ns, faults included. */
uint64_t os_thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The clock's own cost: the least of 8 pairs of reads, measured once. */
static uint64_t clock_cost(void)
{
	static _Atomic uint64_t cost; /* 0: not measured */
	uint64_t least = atomic_load_explicit(&cost, memory_order_relaxed);
	if (least)
		return least - 1;
	least = UINT64_MAX;
	for (int i = 0; i < 8; i++) {
		uint64_t a = os_thread_cpu_ns(), b = os_thread_cpu_ns();
		least = b - a < least ? b - a : least;
	}
	atomic_store_explicit(&cost, least + 1, memory_order_relaxed);
	return least;
}

/* Pages of 4 KiB the probe writes (and scales to 2 MiB). */
#define PROBE_SMALL_PAGES 64

/* Times first writes of fresh memory in a scratch mapping (thp.c's
 * decision): nhuge runs of 2 MiB advised huge, a byte per 4 KiB, and
 * PROBE_SMALL_PAGES pages advised NOHUGEPAGE.  Huge pages formed when the
 * first writes took most of the time.  The huge figure is the last
 * quarter's mean: a guest hands out last-freed, still host-backed memory
 * first, and a big block's bulk comes from further down.  The unmapped
 * probe goes back to the free lists' head, for the block. */
bool os_fault_probe(os_fault_cost_t *out, unsigned nhuge)
{
	if (!may_advise())
		return false;
	if (sim_probe != SIM_PROBE_OFF) { /* fixed figures: cheap or costly huge pages */
		*out = (os_fault_cost_t){ .huge_ns = sim_probe == SIM_PROBE_COSTLY ? 5800000 : 400000,
					  .small_ns = 1200000, .formed = sim_probe != SIM_PROBE_UNFORMED };
		return true;
	}
	nhuge = nhuge < 1 ? 1 : nhuge > THP_PROBE_PAGES ? THP_PROBE_PAGES : nhuge;
	size_t small = PROBE_SMALL_PAGES * PAGE_SIZE, hbytes = nhuge * CHUNK_SIZE;
	size_t span = hbytes + CHUNK_SIZE + small;
	int saved = errno;
	char *p = map_anon(NULL, span, PROT_READ | PROT_WRITE, 0);
	if (p == MAP_FAILED) {
		errno = saved;
		return false;
	}
	volatile char *huge = (char *)ALIGN_UP((uintptr_t)p, CHUNK_SIZE);
	volatile char *four = huge + hbytes;
	bool ok = do_madvise((char *)huge, hbytes, MADV_HUGEPAGE) == 0 &&
		  do_madvise((char *)four, small, MADV_NOHUGEPAGE) == 0;
	if (ok) {
		/* deep: the last quarter of the runs */
		unsigned deep_from = nhuge - (nhuge + 3) / 4;
		uint64_t first = 0, deep = 0, t0 = os_thread_cpu_ns(), t = t0;
		for (unsigned i = 0; i < nhuge; i++) {
			size_t h = (size_t)i * CHUNK_SIZE;
			huge[h] = 1;
			uint64_t a = os_thread_cpu_ns();
			first += a - t;
			for (size_t off = h + PAGE_SIZE; off < h + CHUNK_SIZE; off += PAGE_SIZE)
				huge[off] = 1;
			uint64_t b = os_thread_cpu_ns();
			if (i >= deep_from)
				deep += b - t;
			t = b;
		}
		/* 4 KiB faults: the median of 64, times 512 (one stall skews a mean) */
		uint64_t each[PROBE_SMALL_PAGES], clock = clock_cost();
		for (size_t i = 0; i < PROBE_SMALL_PAGES; i++) {
			uint64_t a = os_thread_cpu_ns();
			four[i * PAGE_SIZE] = 1;
			uint64_t d = os_thread_cpu_ns() - a;
			each[i] = d > clock ? d - clock : 0;
		}
		for (size_t i = 1; i < PROBE_SMALL_PAGES; i++) /* 64 values */
			for (size_t j = i; j > 0 && each[j - 1] > each[j]; j--) {
				uint64_t x = each[j];
				each[j] = each[j - 1];
				each[j - 1] = x;
			}
		out->huge_ns = deep / (nhuge - deep_from);
		out->formed = 2 * first > t - t0;
		out->small_ns = each[PROBE_SMALL_PAGES / 2] * CHUNK_PAGES;
	}
	os_unmap(p, span);
	errno = saved;
	return ok;
}

/* The first writes of a fresh chunk, before its header: a zero at p and at
 * p + 4 KiB, one timed less the clock's cost: advised huge the first (the
 * huge fault), else the second (a 4 KiB fault; the first also allocates a
 * page-table page). */
uint64_t os_first_write_ns(void *p, bool huge)
{
	volatile char *first = p, *second = first + PAGE_SIZE;
	if (sim_probe != SIM_PROBE_OFF) {
		*first = *second = 0;
		return !huge ? 1200000 / CHUNK_PAGES : sim_probe == SIM_PROBE_COSTLY ? 5800000 : 400000;
	}
	if (!huge)
		*first = 0;
	uint64_t clock = clock_cost(), a = os_thread_cpu_ns();
	*(huge ? first : second) = 0;
	uint64_t d = os_thread_cpu_ns() - a;
	if (huge)
		*second = 0;
	return d > clock ? d - clock : 0;
}

static uint64_t rotl64(uint64_t x, unsigned r)
{
	return x << r | x >> (64 - r);
}

static void sip_round(uint64_t v[4])
{
	v[0] += v[1]; v[1] = rotl64(v[1], 13); v[1] ^= v[0]; v[0] = rotl64(v[0], 32);
	v[2] += v[3]; v[3] = rotl64(v[3], 16); v[3] ^= v[2];
	v[0] += v[3]; v[3] = rotl64(v[3], 21); v[3] ^= v[0];
	v[2] += v[1]; v[1] = rotl64(v[1], 17); v[1] ^= v[2]; v[2] = rotl64(v[2], 32);
}

/* SipHash-2-4 of two words under a 128-bit key. */
static uint64_t siphash2(const uint64_t key[2], uint64_t m0, uint64_t m1)
{
	uint64_t v[4] = { key[0] ^ 0x736f6d6570736575ULL, key[1] ^ 0x646f72616e646f6dULL,
			  key[0] ^ 0x6c7967656e657261ULL, key[1] ^ 0x7465646279746573ULL };
	const uint64_t m[3] = { m0, m1, (uint64_t)16 << 56 };
	for (int i = 0; i < 3; i++) {
		v[3] ^= m[i];
		sip_round(v);
		sip_round(v);
		v[0] ^= m[i];
	}
	v[2] ^= 0xff;
	for (int i = 0; i < 4; i++)
		sip_round(v);
	return v[0] ^ v[1] ^ v[2] ^ v[3];
}

/* The process's own secret, 128 bits, taken once at start-up (os_init,
 * before a sandbox may refuse the call): getrandom, else a keyed hash of
 * AT_RANDOM with the clock and an address; never AT_RANDOM itself (glibc's
 * stack canary and pointer guard come from it, and freed blocks show the
 * caches' key). */
START_UP static uint64_t secret[2];
START_UP static atomic_ulong secret_uses;

static void secret_init(void)
{
	if (!sim_no_getrandom &&
	    syscall(SYS_getrandom, secret, sizeof(secret), GRND_NONBLOCK) == (long)sizeof(secret))
		return;
	uint64_t key[2] = { 0x5d1c0b7a3e9f8241ULL, 0xa47c6e19f03b5d27ULL };
	const char *at_random = (const char *)getauxval(AT_RANDOM);
	if (at_random) /* 16 bytes, maybe unaligned */
		memcpy(key, at_random, sizeof(key));
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t t = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	secret[0] = siphash2(key, (uint64_t)(uintptr_t)&ts, t);
	secret[1] = siphash2(key, t, (uint64_t)(uintptr_t)&ts);
}

/* A fresh secret word: the secret's PRF of a counter, no system call. */
uint64_t os_random(void)
{
	uint64_t n = atomic_fetch_add_explicit(&secret_uses, 1, memory_order_relaxed);
	return siphash2(secret, n, 0x6c696261726e61ULL);
}

/* Milliseconds of the coarse monotonic clock (a vDSO read). */
uint64_t os_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Sleeps while *word holds expect, until os_wake or ms (UINT64_MAX: no
 * limit); may return early. */
void os_wait(atomic_uint *word, unsigned expect, uint64_t ms)
{
	struct timespec ts, *limit = NULL;
	if (ms != UINT64_MAX) {
		ts.tv_sec = (time_t)(ms / 1000);
		ts.tv_nsec = (long)(ms % 1000) * 1000000L;
		limit = &ts;
	}
	syscall(SYS_futex, (void *)word, FUTEX_WAIT_PRIVATE, expect, limit, NULL, 0);
}

void os_wake(atomic_uint *word)
{
	syscall(SYS_futex, (void *)word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* ---- start-up reads, with no call into libc's string functions
 * Each libc function called at start-up maps the 64 KiB around it
 * (fault-around): syscall() and loops of our own instead. */

/* The word in brackets of a sysfs THP file ("always [madvise] never"). */
static int read_bracketed(const char *path, char *word, size_t size)
{
	char buf[128];
	long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	long n = syscall(SYS_read, fd, buf, sizeof(buf) - 1);
	syscall(SYS_close, fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	const char *p = buf;
	while (*p && *p != '[')
		p++;
	if (!*p)
		return -1;
	size_t len = 0;
	for (p++; p[len] && p[len] != ']'; len++)
		if (len + 1 >= size)
			return -1;
		else
			word[len] = p[len];
	if (p[len] != ']')
		return -1;
	word[len] = 0;
	return 0;
}

/* `name` from /proc/self/environ, cut to size - 1 bytes; no allocation. */
static bool environ_file_get(const char *name, char *value, size_t size)
{
	int fd = open("/proc/self/environ", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	enum { MATCH, VALUE, SKIP } state = MATCH;
	size_t nlen = strlen(name), matched = 0, len = 0;
	bool done = false;
	char buf[512];
	ssize_t n;
	while (!done && (n = read(fd, buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < n && !done; i++) {
			char ch = buf[i];
			if (state == VALUE) {
				if (ch == 0)
					done = true;
				else if (len + 1 < size)
					value[len++] = ch;
			} else if (ch == 0) {
				state = MATCH, matched = 0;
			} else if (state == MATCH) {
				if (matched < nlen && ch == name[matched])
					matched++;
				else
					state = matched == nlen && ch == '=' ? VALUE : SKIP;
			}
		}
	}
	close(fd);
	value[len] = 0;
	return state == VALUE;
}

/* getenv(name) into value (cut to size - 1); false if unset.  Before libc
 * sets environ (a malloc from .preinit_array), /proc/self/environ. */
bool os_getenv(const char *name, char *value, size_t size)
{
	extern char **environ;
	if (!environ)
		return environ_file_get(name, value, size);
	for (char **e = environ; *e; e++) {
		const char *v = *e, *n = name;
		while (*n && *v == *n)
			v++, n++;
		if (*n || *v != '=')
			continue;
		size_t len = 0;
		for (v++; v[len] && len + 1 < size; len++)
			value[len] = v[len];
		value[len] = 0;
		return true;
	}
	return false;
}

/* kB of the /proc/meminfo line that starts with key ("MemTotal:"), or 0. */
static unsigned long long meminfo_kb(const char *text, const char *key)
{
	for (const char *line = text; *line;) {
		size_t k = 0;
		while (key[k] && line[k] == key[k])
			k++;
		if (!key[k]) {
			const char *d = line + k;
			while (*d == ' ')
				d++;
			unsigned long long kb = 0;
			while (*d >= '0' && *d <= '9')
				kb = kb * 10 + (unsigned)(*d++ - '0');
			return kb;
		}
		while (*line && *line != '\n')
			line++;
		if (*line)
			line++;
	}
	return 0;
}

/* RAM + swap from /proc/meminfo, bytes; HUGE_MAX where unreadable. */
static size_t ram_and_swap(void)
{
	char buf[4096];
	long fd = syscall(SYS_openat, AT_FDCWD, "/proc/meminfo", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return HUGE_MAX;
	long n = syscall(SYS_read, fd, buf, sizeof(buf) - 1);
	syscall(SYS_close, fd);
	if (n <= 0)
		return HUGE_MAX;
	buf[n] = 0;
	unsigned long long kb = meminfo_kb(buf, "MemTotal:") + meminfo_kb(buf, "SwapTotal:");
	return kb == 0 || kb >= HUGE_MAX >> 10 ? HUGE_MAX : (size_t)kb << 10;
}

/* Requests up to this size are tried without looking at the machine. */
#define BLOCK_ASK_FROM ((size_t)1 << 30)

/* Whether a block (or alignment) of size bytes is worth trying: at most
 * RAM + swap, as the kernel's overcommit heuristic refuses more; nothing
 * else stops malloc(2^46) from writing a 64 TiB block's descriptors.
 * Read at the first request above 1 GiB, from /proc/meminfo: a seccomp
 * filter may kill at sysinfo(2) (tests/progs/sandbox.c). */
bool os_block_fits(size_t size)
{
	static _Atomic size_t limit; /* 0: not read (racing reads agree) */
	if (size <= BLOCK_ASK_FROM)
		return true;
	size_t lim = atomic_load_explicit(&limit, memory_order_relaxed);
	if (lim == 0) {
		lim = ram_and_swap();
		atomic_store_explicit(&limit, lim, memory_order_relaxed);
	}
	return size <= lim;
}

/* What the kernel offers (THP mode and defrag), less what sim removes. */
void os_init(os_sim_t sim)
{
	char mode[16];
	os_thp = THP_SYS_NONE;
	if (sim.thp)
		os_thp = (uint8_t)(sim.thp - 1);
	else if (!sim.no_thp &&
		 read_bracketed("/sys/kernel/mm/transparent_hugepage/enabled", mode, sizeof(mode)) == 0)
		os_thp = !strcmp(mode, "always") ? THP_SYS_ALWAYS
		       : !strcmp(mode, "madvise") ? THP_SYS_MADVISE : THP_SYS_NEVER;
	if (sim.no_thp)
		os_thp = THP_SYS_NONE;
	if (read_bracketed("/sys/kernel/mm/transparent_hugepage/defrag", os_thp_defrag,
			   sizeof(os_thp_defrag)) != 0)
		strcpy(os_thp_defrag, "none");
	os_has_madv_free = !sim.no_madv_free;
	sim_probe = sim.probe;
	sim_no_getrandom = sim.no_getrandom;
	secret_init();
	os_has_guard = !sim.no_guard;
	sim_no_scan = sim.no_scan;
	os_guard_prot = sim.guard_prot;
	if (os_guard_prot && os_has_guard)
		os_has_guard = probe_guard();
	os_has_dontunmap = !sim.no_dontunmap && probe_dontunmap();
	os_has_batch_purge = !sim.no_batch_purge;
}

/* CPUs this process may run on (sched_getaffinity: no malloc). */
unsigned os_ncpus(void)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return 1;
	int n = CPU_COUNT(&set);
	return n > 0 ? (unsigned)n : 1;
}

/* ---- files, polls and events for the memory limit (limit.c, pressure.c) ----
 * Through syscall(), as the start-up reads above: the limit is read at
 * start-up, and the background thread waits on these descriptors. */

/* Up to size - 1 bytes of the file at path into buf, NUL-terminated: the
 * bytes read, or -errno. */
long os_read_file(const char *path, char *buf, size_t size)
{
	long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	long len = 0, n = 0;
	while ((size_t)len + 1 < size &&
	       (n = syscall(SYS_read, fd, buf + len, size - 1 - (size_t)len)) > 0)
		len += n;
	int err = errno;
	syscall(SYS_close, fd);
	buf[len] = 0;
	return n < 0 && len == 0 ? -err : len;
}

/* The file at path opened to watch: a socket is connected to (AF_UNIX,
 * then read: POLLIN), a FIFO opened to read (POLLIN), anything else (a
 * PSI file, cgroup.events) opened read-write if it can be, else read-only
 * (POLLPRI).  The descriptor, its poll events in *events, or -errno. */
int os_open_watch(const char *path, short *events, bool write)
{
	struct stat st;
	if (syscall(SYS_newfstatat, AT_FDCWD, path, &st, 0) != 0)
		return -errno;
	if (S_ISSOCK(st.st_mode)) {
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		size_t n = strlen(path);
		if (n >= sizeof(a.sun_path))
			return -ENAMETOOLONG;
		memcpy(a.sun_path, path, n + 1);
		long fd = syscall(SYS_socket, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0)
			return -errno;
		if (syscall(SYS_connect, fd, &a, sizeof(a)) != 0) {
			int err = errno;
			syscall(SYS_close, fd);
			return -err;
		}
		*events = POLLIN;
		return (int)fd;
	}
	int flags = O_CLOEXEC | O_NONBLOCK | (S_ISFIFO(st.st_mode) ? O_RDONLY : write ? O_RDWR : O_RDONLY);
	long fd = syscall(SYS_openat, AT_FDCWD, path, flags);
	if (fd < 0)
		return -errno;
	*events = S_ISFIFO(st.st_mode) ? POLLIN : POLLPRI;
	return (int)fd;
}

/* open(2) of path with flags (O_CLOEXEC added): the descriptor or -errno. */
int os_open(const char *path, int flags)
{
	long fd = syscall(SYS_openat, AT_FDCWD, path, flags | O_CLOEXEC);
	return fd < 0 ? -errno : (int)fd;
}

/* read(2): the bytes read, 0 at the end, -errno. */
long os_read(int fd, void *buf, size_t n)
{
	long r = syscall(SYS_read, fd, buf, n);
	return r < 0 ? -errno : r;
}

/* write(2) of n bytes: true if all went. */
bool os_write(int fd, const void *buf, size_t n)
{
	return syscall(SYS_write, fd, buf, n) == (long)n;
}

/* pread(2) from offset 0, NUL-terminated: the bytes read, or -errno. */
long os_pread0(int fd, char *buf, size_t size)
{
	long n = syscall(SYS_pread64, fd, buf, size - 1, 0);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	return n;
}

/* read(2) of what a descriptor holds now, thrown away (an eventfd's
 * count, a socket's message). */
void os_drain(int fd)
{
	char buf[256];
	while (syscall(SYS_read, fd, buf, sizeof(buf)) > 0)
		;
}

void os_close(int fd)
{
	syscall(SYS_close, fd);
}

/* A non-blocking eventfd, or -errno. */
int os_eventfd(void)
{
	long fd = syscall(SYS_eventfd2, 0, EFD_CLOEXEC | EFD_NONBLOCK);
	return fd < 0 ? -errno : (int)fd;
}

void os_event_signal(int fd)
{
	uint64_t one = 1;
	syscall(SYS_write, fd, &one, sizeof(one));
}

/* ppoll(2) of n descriptors for at most ms (UINT64_MAX: no limit): how
 * many are ready (their revents set), 0 at the timeout, -errno. */
int os_poll(struct pollfd *fds, unsigned n, uint64_t ms)
{
	struct timespec ts, *limit = NULL;
	if (ms != UINT64_MAX) {
		ts.tv_sec = (time_t)(ms / 1000);
		ts.tv_nsec = (long)(ms % 1000) * 1000000L;
		limit = &ts;
	}
	long r = syscall(SYS_ppoll, fds, n, limit, NULL, (size_t)8);
	return r < 0 ? -errno : (int)r;
}

/* CLOCK_MONOTONIC in microseconds (the pressure signal's latency). */
uint64_t os_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---- resident pages, for statistics ------------------------------------
 * PAGEMAP_SCAN (Linux 6.7) walks the page tables once for a range and
 * answers in runs: present pages that are not the shared zero page (which
 * smaps' Rss does not count either), and whether a huge page maps them.
 * Where it is missing (ENOTTY, EINVAL) or /proc/self/pagemap cannot be
 * opened: mincore, present pages only, a chunk per call. */
/* struct pm_scan_arg, a word per field in this order */
enum { PM_SIZE, PM_FLAGS, PM_START, PM_END, PM_WALK_END, PM_VEC, PM_VEC_LEN, PM_MAX_PAGES,
       PM_INVERTED, PM_MASK, PM_ANYOF, PM_RETURN, PM_FIELDS };
#define PM_SCAN_IOCTL _IOWR('f', 16, uint64_t[PM_FIELDS])
#define PM_PRESENT ((uint64_t)1 << 3)
#define PM_PFNZERO ((uint64_t)1 << 5)

static long scan_runs(int fd, uintptr_t from, uintptr_t to, os_run_t *runs, size_t max,
		      uintptr_t *next)
{
	uint64_t a[PM_FIELDS] = {
		[PM_SIZE] = sizeof(a), [PM_START] = from, [PM_END] = to, [PM_VEC] = (uintptr_t)runs,
		[PM_VEC_LEN] = max, [PM_INVERTED] = PM_PFNZERO, [PM_MASK] = PM_PRESENT | PM_PFNZERO,
		[PM_RETURN] = OS_RUN_HUGE,
	};
	long n = syscall(SYS_ioctl, fd, PM_SCAN_IOCTL, a);
	*next = (uintptr_t)a[PM_WALK_END];
	return n;
}

/* mincore of one chunk at most from `from`, as runs; 0 runs and *next =
 * from when max is too short for them. */
static long mincore_runs(uintptr_t from, uintptr_t to, os_run_t *runs, size_t max, uintptr_t *next)
{
	unsigned char vec[CHUNK_PAGES];
	size_t n = (to - from) >> PAGE_SHIFT, got = 0;
	n = n < CHUNK_PAGES ? n : CHUNK_PAGES;
	*next = from;
	if (max < CHUNK_PAGES / 2 + 1)
		return 0;
	if (syscall(SYS_mincore, from, n << PAGE_SHIFT, vec) != 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (!(vec[i] & 1))
			continue;
		uintptr_t at = from + (i << PAGE_SHIFT);
		if (got && runs[got - 1].end == at)
			runs[got - 1].end += PAGE_SIZE;
		else
			runs[got++] = (os_run_t){ at, at + PAGE_SIZE, 0 };
	}
	*next = from + (n << PAGE_SHIFT);
	return (long)got;
}

/* The resident runs of [from, to) (page-aligned), in order, up to max;
 * *next: where the walk stopped (to when it is done).  *fd: an open
 * /proc/self/pagemap for PAGEMAP_SCAN, set to -1 where that fails (mincore
 * from then on).  The runs written, or -1 where neither answers. */
long os_resident_runs(int *fd, uintptr_t from, uintptr_t to, os_run_t *runs, size_t max,
		      uintptr_t *next)
{
	if (*fd >= 0) {
		long n = sim_no_scan ? -1 : scan_runs(*fd, from, to, runs, max, next);
		if (n >= 0)
			return n;
		syscall(SYS_close, *fd);
		*fd = -1;
	}
	return mincore_runs(from, to, runs, max, next);
}
