/*
 * sandbox: libarena under a strict seccomp filter installed after start-up,
 * as OpenSSH's pre-authentication child installs one after fork: every
 * system call not listed kills the process (SIGSYS), a few are refused
 * with EACCES.  The list is that sandbox's (openssh-portable,
 * sandbox-seccomp-filter.c), with its argument checks: madvise advice
 * other than NORMAL, FREE, DONTNEED, DONTFORK, DONTDUMP and WIPEONFORK,
 * mmap flags beyond PRIVATE|ANONYMOUS|FIXED|FIXED_NOREPLACE and mprotect
 * beyond READ|WRITE get EINVAL.  Run by tests/test_programs.c under
 * LD_PRELOAD.
 *
 * Usage: sandbox [first | advice]
 * first: the filter before the first malloc (libarena's start-up under
 * it), and a block of 1 GiB + 2 MiB, above 1 GiB, from which libarena
 * reads the machine's size (refused here: tried anyway).
 * advice (run with ARENA_CONF=thp:always,decay_ms:-1,huge_decay_ms:-1,
 * dirty_cap:off: nothing is purged, whatever the machine's speed): 100 blocks of 4 MiB
 * malloc'd, written and freed one after the other before the rest, and
 * at most 8 madvise calls among them (the filter refuses huge-page
 * advice: libarena stops asking after the first refusal).
 * After the filter: small, large and huge blocks malloc'd, written,
 * grown and shrunk by realloc, calloc'd and checked zero, freed; 60,000
 * small blocks live at once (new slab metadata mapped inside); every
 * other block of a chunk freed and the rest purged by malloc_trim (runs
 * between blocks in use: where ARENA_CONF=purge_batch:true, a batched
 * purge, which this filter kills); then "ok" on stdout and exit 0.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <malloc.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "arena.h"

#define ALLOW(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), \
		  BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
#define REFUSE(nr, err) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), \
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (err))

/* nr allowed when the low word of argument arg has no bit outside mask,
 * else EINVAL (both branches return: no reload of nr needed). */
#define ALLOW_MASKED(nr, arg, mask) \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 5), \
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[arg])), \
	BPF_STMT(BPF_ALU | BPF_AND | BPF_K, ~(uint32_t)(mask)), \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1), \
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW), \
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL)
/* nr allowed for these values of argument arg (up to 6), else EINVAL. */
#define ALLOW_VALUES(nr, arg, a, b, c, d, e, f) \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 9), \
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[arg])), \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (a), 6, 0), \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (b), 5, 0), \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (c), 4, 0), \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (d), 3, 0), \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (e), 2, 0), \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (f), 1, 0), \
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL), \
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

static const struct sock_filter filter[] = {
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
	REFUSE(__NR_openat, 13), REFUSE(__NR_newfstatat, 13), REFUSE(__NR_fstat, 13),
	REFUSE(__NR_statx, 13),
	ALLOW(__NR_brk), ALLOW(__NR_clock_gettime), ALLOW(__NR_close), ALLOW(__NR_exit),
	ALLOW(__NR_exit_group), ALLOW(__NR_futex), ALLOW(__NR_getpid), ALLOW(__NR_getrandom),
	ALLOW(__NR_gettid), ALLOW(__NR_gettimeofday),
	ALLOW_VALUES(__NR_madvise, 2, MADV_NORMAL, MADV_FREE, MADV_DONTNEED, MADV_DONTFORK,
		     MADV_DONTDUMP, MADV_WIPEONFORK),
	ALLOW_MASKED(__NR_mmap, 3, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_FIXED_NOREPLACE),
	ALLOW_MASKED(__NR_mprotect, 2, PROT_READ | PROT_WRITE | PROT_NONE), ALLOW(__NR_mremap), ALLOW(__NR_munmap), ALLOW(__NR_nanosleep),
	ALLOW(__NR_clock_nanosleep), ALLOW(__NR_read), ALLOW(__NR_rt_sigprocmask),
	ALLOW(__NR_write), ALLOW(__NR_writev),
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
};

static void say(const char *s)
{
	if (write(1, s, strlen(s)) < 0)
		_exit(5);
}

static void fail(const char *what)
{
	say("FAIL: ");
	say(what);
	say("\n");
	_exit(1);
}

static uint64_t rng = 88172645463325252ULL;

static size_t next_size(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	unsigned r = (unsigned)(rng % 100);
	size_t x = (size_t)(rng >> 32);
	return r < 80 ? 1 + x % 1024 : r < 97 ? 1024 + x % (512 << 10) : (1 << 20) + x % (8 << 20);
}

/* Random blocks written, grown, calloc'd and freed, 20,000 operations. */
static void churn(void)
{
	enum { SLOTS = 256 };
	static unsigned char *slot[SLOTS];
	static size_t len[SLOTS];
	for (int i = 0; i < 20000; i++) {
		unsigned k = (unsigned)(rng % SLOTS);
		free(slot[k]);
		size_t n = next_size();
		if (i % 5 == 0) {
			slot[k] = calloc(1, n);
			if (slot[k] && (slot[k][0] || slot[k][n - 1]))
				fail("calloc block not zero");
		} else {
			slot[k] = malloc(n);
		}
		if (!slot[k])
			fail("malloc returned NULL");
		memset(slot[k], (int)k, n);
		len[k] = n;
		if (i % 7 == 0) {
			size_t m = next_size();
			unsigned char *q = realloc(slot[k], m);
			if (!q)
				fail("realloc returned NULL");
			if (q[0] != (unsigned char)k || q[(m < n ? m : n) - 1] != (unsigned char)k)
				fail("realloc lost the block's bytes");
			slot[k] = q;
			memset(q, (int)k, m);
			len[k] = m;
		}
	}
	for (unsigned k = 0; k < SLOTS; k++)
		if (slot[k] && (slot[k][0] != (unsigned char)k || slot[k][len[k] - 1] != (unsigned char)k))
			fail("a block's bytes changed");
	for (unsigned k = 0; k < SLOTS; k++)
		free(slot[k]);
}

/* 60,000 blocks of 512 B-4 KiB live at once: thousands of slabs, whose
 * descriptors need metadata pages mapped after the filter (64 KiB at a
 * time: slab.c), which the filter's mmap rule refuses with MAP_NORESERVE. */
static void many_slabs(void)
{
	enum { N = 60000 };
	static unsigned char *b[N];
	for (int i = 0; i < N; i++) {
		size_t n = 512 + (size_t)(i * 7919) % 3585;
		if (!(b[i] = malloc(n)))
			fail("malloc of a small block returned NULL (slab metadata refused?)");
		b[i][0] = (unsigned char)i;
	}
	for (int i = 0; i < N; i++) {
		if (b[i][0] != (unsigned char)i)
			fail("a small block's first byte changed");
		free(b[i]);
	}
}

/* Every other block of 80 KiB freed, then malloc_trim: free runs between
 * blocks in use, purged together. */
static void runs_purged(void)
{
	enum { N = 24, SIZE = 80 << 10 };
	static unsigned char *b[N];
	for (int i = 0; i < N; i++) {
		if (!(b[i] = malloc(SIZE)))
			fail("malloc(80 KiB) returned NULL");
		memset(b[i], i + 1, SIZE);
	}
	for (int i = 1; i < N; i += 2)
		free(b[i]);
	malloc_trim(0);
	for (int i = 0; i < N; i += 2) {
		if (b[i][0] != i + 1 || b[i][SIZE - 1] != i + 1)
			fail("a block between purged runs changed");
		free(b[i]);
	}
}

/* 1 GiB + 2 MiB (just above the size from which libarena reads the
 * machine's): its first and last pages written, then freed. */
static void big_block(void)
{
	size_t size = ((size_t)1 << 30) + ((size_t)2 << 20);
	unsigned char *p = malloc(size);
	if (!p)
		fail("malloc of 1 GiB + 2 MiB failed");
	p[0] = 1;
	p[size - 1] = 2;
	if (p[0] != 1 || p[size - 1] != 2)
		fail("the block of 1 GiB + 2 MiB did not keep its bytes");
	free(p);
}

/* 100 blocks of 4 MiB, one at a time: each takes chunks whose advice
 * libarena asks for (thp:always), and with decay off nothing is purged,
 * so every madvise call among them is advice. */
static void refused_advice(void)
{
	int (*stats_get)(arena_stats_t *) =
		(int (*)(arena_stats_t *))dlsym(RTLD_DEFAULT, "arena_stats_get");
	if (!stats_get)
		fail("arena_stats_get not found (is libarena preloaded?)");
	static arena_stats_t before, after;
	stats_get(&before);
	for (int i = 0; i < 100; i++) {
		unsigned char *volatile p = malloc((size_t)4 << 20);
		if (!p)
			fail("malloc of 4 MiB failed");
		p[0] = 1;
		p[(4 << 20) - 1] = 1;
		free(p);
	}
	stats_get(&after);
	char line[96];
	int n = snprintf(line, sizeof line, "madvise calls for 100 blocks of 4 MiB: %llu\n",
			 (unsigned long long)(after.sys_madvise - before.sys_madvise));
	if (n > 0)
		say(line);
	if (after.sys_madvise - before.sys_madvise > 8)
		fail("refused advice asked for again and again");
}

int main(int argc, char **argv)
{
	bool advice = argc > 1 && !strcmp(argv[1], "advice");
	bool first_under_filter = argc > 1 && !strcmp(argv[1], "first");
#ifndef __x86_64__
	say("skipped: the filter is written for x86-64\n");
	return 0;
#endif
	/* Start-up before the filter, as in sshd's child (volatile: a
	 * malloc/free pair the compiler can see may be dropped). */
	if (!first_under_filter) {
		void *volatile first = malloc(100);
		free(first);
	}
	struct sock_fprog prog = { (unsigned short)(sizeof filter / sizeof filter[0]),
				   (struct sock_filter *)filter };
	/* A kernel without seccomp filters, or a container that forbids
	 * installing one: nothing to test here (the test skips). */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
		say("skipped: cannot install a seccomp filter\n");
		return 0;
	}
	if (first_under_filter)
		big_block();
	if (advice)
		refused_advice();
	churn();
	many_slabs();
	runs_purged();
	say("ok\n");
	return 0;
}
