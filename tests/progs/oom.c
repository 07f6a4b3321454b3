/*
 * Out of memory, for test_oom.c: run under LD_PRELOAD=libarena.so with
 * RLIMIT_AS already set (by the test, between fork and exec, so that the
 * limit is in force when libarena reserves its address space).
 *
 *   oom probe        prints vm_kb=<VmSize> (run without LD_PRELOAD and without
 *                    a limit, it gives the test the size of the program
 *                    itself), and reserved=<bytes> when libarena is loaded
 *   oom big          requests beyond the limit in every API fail with ENOMEM and
 *                    leave the blocks allocated before intact and usable
 *   oom fill_huge    8 MiB blocks until failure; freed memory is usable again,
 *                    also as one big block
 *   oom fill_small   64-byte blocks until failure, twice (as many the second time)
 *   oom fill_mixed   blocks of 1 B .. 4 MiB until failure, twice
 *   oom threads      4 threads run every allocation function until it fails
 *
 * Each case prints "reserved=..." and facts as key=value lines, problems as
 * "FAIL: ..." lines, and "done" at the end (exit 0), all on stdout through
 * write(2) from a stack buffer: nothing is allocated to report, so reports
 * work when memory is exhausted.  stderr is the allocator's.
 */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>

#include "arena.h"
#include "common.h"

static int failures;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof buf - 2)
		n = (int)sizeof buf - 2;
	buf[n++] = '\n';
	for (int off = 0; off < n;) {
		ssize_t w = write(1, buf + off, (size_t)(n - off));
		if (w <= 0)
			break;
		off += (int)w;
	}
}

#define FAIL(...) (failures++, say("FAIL: " __VA_ARGS__))

/* VmSize of this process, in KiB (read without stdio: no malloc). */
static long vm_kb(void)
{
	char buf[4096];
	int fd = open("/proc/self/status", O_RDONLY);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	const char *v = strstr(buf, "VmSize:");
	return v ? strtol(v + 7, NULL, 10) : -1;
}

static int (*stats_get)(arena_stats_t *);

static void print_reserved(void)
{
	static arena_stats_t s;
	free(opaque_ptr(malloc(1))); /* libarena is initialised */
	if (stats_get && stats_get(&s) == 0)
		say("reserved=%zu", s.reserved);
	say("vm_kb=%ld", vm_kb());
}

/* ---- big: requests beyond the limit ------------------------------------------------- */

typedef struct held {
	uint8_t *p;
	size_t n;
	uint32_t seed;
} held_t;

static void held_check(const held_t *h, int nh, const char *when)
{
	for (int i = 0; i < nh; i++) {
		size_t bad = pat_check_sparse(h[i].p, h[i].n, h[i].seed);
		if (bad != SIZE_MAX)
			FAIL("%s: block %p of %zu bytes changed at offset %zu", when, h[i].p, h[i].n,
			     bad);
	}
}

/* Checks that a call that must fail did: NULL and ENOMEM. */
static void expect_enomem(const char *what, size_t size, void *p, int err)
{
	if (p) {
		FAIL("%s(%#zx) = %p beyond the address-space limit, expected NULL", what, size, p);
		free(p);
	} else if (err != ENOMEM) {
		FAIL("%s(%#zx) = NULL with errno %d, expected ENOMEM", what, size, err);
	}
}

static int case_big(void)
{
	/* Blocks allocated before: small, large, huge, and aligned ones. */
	held_t h[5] = {
		{ malloc(100), 100, 1 },
		{ malloc(200 * KiB), 200 * KiB, 2 },
		{ malloc(8 * MiB), 8 * MiB, 3 },
		{ aligned_alloc(4096, 5000), 5000, 4 },
		{ calloc(1, 40000), 40000, 5 },
	};
	for (int i = 0; i < 5; i++) {
		if (!h[i].p) {
			FAIL("allocating %zu bytes below the limit failed (errno %d)", h[i].n, errno);
			return 3;
		}
		pat_fill_sparse(h[i].p, h[i].n, h[i].seed);
	}
	/* Sizes above what is left under the limit (a few hundred MiB), but
	 * below libarena's own maximum (2^46): only the limit refuses them. */
	static const size_t sizes[] = { 300 * MiB, GiB, 16 * GiB, (size_t)1 << 40, (size_t)1 << 46 };
	for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
		size_t s = opaque_size(sizes[k]);
		void *p;
		errno = 0, p = malloc(s), expect_enomem("malloc", s, p, errno);
		errno = 0, p = calloc(1, s), expect_enomem("calloc(1, n)", s, p, errno);
		errno = 0, p = calloc(s / 4096, 4096), expect_enomem("calloc(n/4096, 4096)", s, p, errno);
		errno = 0, p = aligned_alloc(64, s), expect_enomem("aligned_alloc(64)", s, p, errno);
		errno = 0, p = aligned_alloc(2 * MiB, s), expect_enomem("aligned_alloc(2M)", s, p, errno);
		errno = 0, p = memalign(4096, s), expect_enomem("memalign(4096)", s, p, errno);
		errno = 0, p = valloc(s), expect_enomem("valloc", s, p, errno);
		errno = 0, p = pvalloc(s), expect_enomem("pvalloc", s, p, errno);
		void *out = (void *)0x5a5a;
		int rc = posix_memalign(&out, 4096, s);
		if (rc != ENOMEM)
			FAIL("posix_memalign(4096, %#zx) = %d, expected ENOMEM", s, rc);
		if (out != (void *)0x5a5a)
			FAIL("posix_memalign(4096, %#zx) wrote *out (%p) on failure", s, out);
		/* realloc: NULL, ENOMEM, and the block is left as it was. */
		for (int i = 0; i < 5; i++) {
			errno = 0;
			p = realloc(h[i].p, s);
			expect_enomem("realloc", s, p, errno);
			if (p)
				return 3; /* h[i].p is gone */
			errno = 0;
			p = reallocarray(h[i].p, s / 16, 16);
			expect_enomem("reallocarray", s, p, errno);
			if (p)
				return 3;
		}
		held_check(h, 5, "after the failed requests");
		if (failures)
			return 3;
	}
	/* Smaller requests keep working, of every kind. */
	static const size_t small[] = { 1, 100, 5000, 16384, 50000, 500 * KiB, 3 * MiB, 20 * MiB };
	for (size_t k = 0; k < sizeof small / sizeof *small; k++) {
		uint8_t *p = malloc(small[k]);
		if (!p) {
			FAIL("malloc(%zu) after the failures: NULL (errno %d)", small[k], errno);
			continue;
		}
		pat_fill_sparse(p, small[k], 7);
		if (pat_check_sparse(p, small[k], 7) != SIZE_MAX)
			FAIL("malloc(%zu) after the failures: block not writable", small[k]);
		free(p);
	}
	/* The blocks allocated before can still be resized and freed. */
	size_t grow[5] = { 3000, 900 * KiB, 24 * MiB, 9000, 100000 };
	for (int i = 0; i < 5; i++) {
		uint8_t *q = realloc(h[i].p, grow[i]);
		if (!q) {
			FAIL("realloc(%p, %zu) after the failures: NULL (errno %d)", h[i].p, grow[i],
			     errno);
			continue;
		}
		size_t bad = pat_check_sparse(q, h[i].n, h[i].seed);
		if (bad != SIZE_MAX)
			FAIL("realloc(%zu -> %zu) lost the contents at %zu", h[i].n, grow[i], bad);
		h[i].p = q;
	}
	for (int i = 0; i < 5; i++)
		free(h[i].p);
	say("big_checked=%zu", sizeof sizes / sizeof *sizes);
	return failures ? 3 : 0;
}

/* ---- fill_huge: 8 MiB blocks until failure ---------------------------------------- */

static int case_fill_huge(void)
{
	enum { MAXB = 4096 };
	static uint8_t *b[MAXB];
	int n = 0;
	const size_t sz = 8 * MiB;
	uint8_t *small = malloc(100);
	if (!small)
		return FAIL("malloc(100) failed"), 3;
	memset(small, 0x77, 100);
	for (;;) {
		if (n == MAXB)
			return FAIL("%d blocks of 8 MiB and no failure: is the limit in force?", n), 3;
		errno = 0;
		uint8_t *p = malloc(sz);
		if (!p) {
			if (errno != ENOMEM)
				FAIL("malloc(8 MiB) failed with errno %d, expected ENOMEM", errno);
			break;
		}
		pat_fill_sparse(p, sz, (uint32_t)n);
		b[n++] = p;
	}
	say("huge_blocks=%d", n);
	/* Failure did not break the allocator: small and large still work. */
	for (int i = 0; i < 100; i++) {
		void *q = malloc(i * 97 + 1), *r = malloc(20000);
		if (!q || !r)
			FAIL("small or large malloc after the huge failure: NULL (errno %d)", errno);
		free(q);
		free(r);
	}
	/* Growing a block beyond what is left fails and keeps it. */
	errno = 0;
	void *g = realloc(b[0], 40 * sz);
	expect_enomem("realloc of a huge block", 40 * sz, g, errno);
	for (int i = 0; i < n; i++) {
		size_t bad = pat_check_sparse(b[i], sz, (uint32_t)i);
		if (bad != SIZE_MAX)
			FAIL("8 MiB block %d changed at %zu", i, bad);
	}
	for (int i = 0; i < 100; i++)
		if (small[i] != 0x77)
			FAIL("the small block changed at %d", i);
	/* One freed block makes room for one more. */
	free(b[n - 1]);
	b[n - 1] = malloc(sz);
	if (!b[n - 1])
		FAIL("malloc(8 MiB) after freeing an 8 MiB block: NULL (errno %d)", errno);
	else
		pat_fill_sparse(b[n - 1], sz, (uint32_t)(n - 1));
	/* Everything freed: the memory is usable again, as much of it as before,
	 * also in one block of half of it. */
	for (int i = 0; i < n; i++)
		free(b[i]);
	size_t half = (size_t)n * sz / 2;
	uint8_t *big = malloc(half);
	if (!big) {
		FAIL("malloc(%zu) (half of what was held) after freeing everything: NULL", half);
	} else {
		pat_fill_sparse(big, half, 99);
		if (pat_check_sparse(big, half, 99) != SIZE_MAX)
			FAIL("the big block is not writable");
		free(big);
	}
	int again = 0;
	while (again < n && (b[again] = malloc(sz)))
		again++;
	say("huge_blocks_again=%d", again);
	if (again < n)
		FAIL("after freeing everything only %d of %d blocks of 8 MiB could be allocated again",
		     again, n);
	for (int i = 0; i < again; i++)
		free(b[i]);
	free(small);
	return failures ? 3 : 0;
}

/* ---- fill_small: 64-byte blocks until failure ------------------------------------- */

/* A 64-byte block: linked to the one allocated before it, stamped with its
 * index.  The list lives in the blocks: no array that the limit would have
 * to leave room for. */
typedef struct node {
	struct node *next;
	uint64_t idx;
	uint64_t stamp[6];
} node_t;

static uint64_t stamp_of(uint64_t idx, int k)
{
	return (idx + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)k;
}

static node_t *fill_nodes(size_t *count)
{
	node_t *head = NULL;
	size_t n = 0;
	for (;;) {
		errno = 0;
		node_t *x = malloc(sizeof *x);
		if (!x) {
			if (errno != ENOMEM)
				FAIL("malloc(64) failed with errno %d, expected ENOMEM", errno);
			break;
		}
		x->next = head;
		x->idx = n;
		for (int k = 0; k < 6; k++)
			x->stamp[k] = stamp_of(n, k);
		head = x;
		n++;
	}
	*count = n;
	return head;
}

/* Checks and frees the whole list; returns the number of bad blocks. */
static size_t free_nodes(node_t *head, size_t count)
{
	size_t bad = 0, expect = count;
	while (head) {
		node_t *next = head->next;
		expect--;
		int ok = head->idx == expect;
		for (int k = 0; k < 6 && ok; k++)
			ok = head->stamp[k] == stamp_of(head->idx, k);
		if (!ok && bad++ == 0)
			FAIL("64-byte block %p (expected index %zu) was overwritten", (void *)head, expect);
		free(head);
		head = next;
	}
	return bad;
}

static int case_fill_small(void)
{
	size_t n1, n2;
	node_t *l = fill_nodes(&n1);
	say("small_blocks=%zu", n1);
	/* At the limit, a small block can still be freed and allocated again. */
	if (l) {
		node_t *keep = l->next;
		uint64_t idx = l->idx;
		free(l);
		l = malloc(sizeof *l);
		if (!l) {
			FAIL("malloc(64) right after freeing a 64-byte block at the limit: NULL");
			l = keep;
		} else {
			l->next = keep;
			l->idx = idx;
			for (int k = 0; k < 6; k++)
				l->stamp[k] = stamp_of(idx, k);
		}
	}
	if (free_nodes(l, n1))
		return 3;
	l = fill_nodes(&n2);
	say("small_blocks_again=%zu", n2);
	if (n2 < n1 - n1 / 50)
		FAIL("after freeing %zu blocks, only %zu could be allocated again", n1, n2);
	if (free_nodes(l, n2))
		return 3;
	/* Memory that held small blocks is usable by a big one. */
	size_t big = n1 * 64 / 4;
	void *p = malloc(big);
	if (!p)
		FAIL("malloc(%zu) (a quarter of what the small blocks held) after freeing them: NULL",
		     big);
	free(p);
	return failures ? 3 : 0;
}

/* ---- fill_mixed: blocks of every kind until failure ------------------------------- */

/* A block of n >= 32 bytes: linked, its size and seed in the first 32
 * bytes, a pattern after (sparse for big blocks). */
typedef struct mnode {
	struct mnode *next;
	size_t n;
	uint64_t seed;
	uint64_t pad;
} mnode_t;

static void mfill(mnode_t *x)
{
	size_t n = x->n, head = n < 4096 ? n : 4096;
	pat_fill(x, sizeof *x, head, (uint32_t)x->seed);
	if (n > 4096)
		pat_fill(x, n - 256, n, (uint32_t)x->seed);
}

static int mcheck(const mnode_t *x)
{
	size_t n = x->n, head = n < 4096 ? n : 4096;
	if (pat_check(x, sizeof *x, head, (uint32_t)x->seed) != SIZE_MAX)
		return -1;
	if (n > 4096 && pat_check(x, n - 256, n, (uint32_t)x->seed) != SIZE_MAX)
		return -1;
	return 0;
}

/* Allocates until 300 requests have failed; returns the list, the bytes
 * held and the number of blocks. */
static mnode_t *fill_mixed(uint64_t seed, size_t *bytes, size_t *count)
{
	rng_t r;
	rng_seed(&r, seed);
	mnode_t *head = NULL;
	size_t fails = 0;
	*bytes = *count = 0;
	while (fails < 300) {
		size_t n = stress_size(&r);
		if (n < sizeof(mnode_t))
			n = sizeof(mnode_t);
		int how = (int)rng_below(&r, 4);
		errno = 0;
		mnode_t *x = how == 0 ? calloc(1, n) : how == 1 ? aligned_alloc(64, n) : malloc(n);
		if (!x) {
			if (errno != ENOMEM && fails == 0)
				FAIL("allocating %zu bytes failed with errno %d, expected ENOMEM", n, errno);
			fails++;
			continue;
		}
		x->next = head;
		x->n = n;
		x->seed = rng_next(&r);
		mfill(x);
		head = x;
		*bytes += n;
		++*count;
	}
	return head;
}

static size_t free_mixed(mnode_t *head)
{
	size_t bad = 0;
	while (head) {
		mnode_t *next = head->next;
		if (mcheck(head) != 0 && bad++ == 0)
			FAIL("block %p of %zu bytes was overwritten", (void *)head, head->n);
		free(head);
		head = next;
	}
	return bad;
}

static int case_fill_mixed(void)
{
	size_t b1, c1, b2, c2;
	mnode_t *l = fill_mixed(1, &b1, &c1);
	say("mixed_bytes=%zu", b1);
	say("mixed_blocks=%zu", c1);
	if (free_mixed(l))
		return 3;
	l = fill_mixed(1, &b2, &c2);
	say("mixed_bytes_again=%zu", b2);
	if (b2 < b1 - b1 / 10)
		FAIL("after freeing %zu bytes in %zu blocks, only %zu bytes could be allocated again",
		     b1, c1, b2);
	if (free_mixed(l))
		return 3;
	return failures ? 3 : 0;
}

/* ---- threads: every allocation function, in threads, until it fails ----------------- */

/* Each function as malloc-shaped: a block of at least n bytes or NULL with
 * errno set as the function sets it (posix_memalign: its return value). */
static void *t_malloc(size_t n) { return malloc(n); }
static void *t_calloc(size_t n) { return calloc(n / 16, 16); }
static void *t_realloc(size_t n)
{
	void *p = malloc(16);
	void *q = p ? realloc(p, n) : NULL;
	if (p && !q) {
		int err = errno;
		free(p);
		errno = err;
	}
	return q;
}
static void *t_reallocarray(size_t n) { return reallocarray(NULL, n / 8, 8); }
static void *t_aligned_alloc(size_t n) { return aligned_alloc(64, n); }
static void *t_memalign(size_t n) { return memalign(4096, n); }
static void *t_valloc(size_t n) { return valloc(n); }
static void *t_pvalloc(size_t n) { return pvalloc(n); }
static void *t_posix_memalign(size_t n)
{
	void *p = NULL;
	int rc = posix_memalign(&p, 256, n);
	if (rc != 0 && rc != ENOMEM)
		FAIL("posix_memalign(256, %zu) returned %d under the limit, expected ENOMEM", n, rc);
	errno = rc;
	return rc == 0 ? p : NULL;
}

static const struct tfn {
	const char *name;
	void *(*fn)(size_t);
} tfns[] = {
	{ "malloc", t_malloc }, { "calloc", t_calloc }, { "realloc", t_realloc },
	{ "reallocarray", t_reallocarray }, { "aligned_alloc", t_aligned_alloc },
	{ "posix_memalign", t_posix_memalign }, { "memalign", t_memalign },
	{ "valloc", t_valloc }, { "pvalloc", t_pvalloc },
};
#define NTFN (sizeof tfns / sizeof tfns[0])
enum { OOM_THREADS = 4 };
static const size_t tsizes[] = { 64, 4096, 100000, 3 << 20 };
static atomic_long tfailed_ok, tblocks;

/* Blocks of one size from one function until it fails (with ENOMEM, or
 * that is a failure of the test), linked through their first word; then
 * all of them are checked and freed. */
static void fill_with(const struct tfn *f, size_t size, long id)
{
	void **head = NULL;
	long n = 0;
	for (;;) {
		errno = 0;
		void **p = f->fn(size);
		if (!p) {
			if (errno != ENOMEM)
				FAIL("thread %ld: %s(%zu) failed with errno %d, expected ENOMEM", id,
				     f->name, size, errno);
			break;
		}
		p[0] = head;
		p[1] = (void *)(uintptr_t)(n ^ id);
		head = p;
		n++;
	}
	atomic_fetch_add(&tfailed_ok, 1);
	atomic_fetch_add(&tblocks, n);
	while (head) {
		void **next = head[0];
		if (head[1] != (void *)(uintptr_t)(--n ^ id))
			FAIL("thread %ld: a %s(%zu) block was overwritten", id, f->name, size);
		free(head);
		head = next;
	}
}

static void *oom_thread(void *arg)
{
	long id = (long)(intptr_t)arg;
	for (size_t k = 0; k < NTFN; k++)
		fill_with(&tfns[(k + (size_t)id) % NTFN], tsizes[(k + (size_t)id) % 4], id);
	return NULL;
}

/* As glibc's tst-malloc-thread-fail: OOM_THREADS threads run every
 * allocation function until it fails under the limit; each failure must be
 * NULL (posix_memalign: its code) with ENOMEM, blocks intact. */
static int case_threads(void)
{
	pthread_t t[OOM_THREADS];
	int started = 0;
	for (long i = 0; i < OOM_THREADS; i++)
		if (pthread_create(&t[started], NULL, oom_thread, (void *)(intptr_t)i) == 0)
			started++;
	if (started < 2)
		FAIL("only %d threads started under the limit", started);
	for (int i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	say("thread_fills=%ld", atomic_load(&tfailed_ok));
	say("thread_blocks=%ld", atomic_load(&tblocks));
	void *p = malloc(1 << 20);
	if (!p)
		FAIL("malloc(1 MiB) fails after the threads freed everything");
	free(p);
	return failures ? 3 : 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		say("usage: oom probe|big|fill_huge|fill_small|fill_mixed|threads");
		return 2;
	}
	stats_get = (int (*)(arena_stats_t *))dlsym(RTLD_DEFAULT, "arena_stats_get");
	int rc;
	if (!strcmp(argv[1], "probe")) {
		print_reserved();
		say("done");
		return 0;
	}
	if (!stats_get) {
		say("FAIL: libarena is not loaded (LD_PRELOAD?)");
		return 4;
	}
	print_reserved();
	if (!strcmp(argv[1], "big"))
		rc = case_big();
	else if (!strcmp(argv[1], "fill_huge"))
		rc = case_fill_huge();
	else if (!strcmp(argv[1], "fill_small"))
		rc = case_fill_small();
	else if (!strcmp(argv[1], "fill_mixed"))
		rc = case_fill_mixed();
	else if (!strcmp(argv[1], "threads"))
		rc = case_threads();
	else
		return say("unknown case %s", argv[1]), 2;
	if (rc == 0)
		say("done");
	return rc;
}
