/*
 * Heap attacks made on purpose, one per process: run by test_harden.c and
 * bench/scripts/attack-table under LD_PRELOAD of an allocator.
 *
 *   attacks read-freed                 reads a freed 48 B block: prints how
 *                                      many of its 6 words still hold the
 *                                      program's bytes, look like heap
 *                                      addresses, or hold glibc's pointer
 *                                      guard or canary ("data=D pointers=P
 *                                      secrets=S")
 *   attacks forged-link                512 malloc(48) freed, then a use after
 *                                      free writes a fake link (a static
 *                                      buffer's address) into each
 *   attacks forged-link-overflow       512 malloc(48), every other freed; each
 *                                      live one overflows 64 bytes of the fake
 *                                      link into what follows it
 *   attacks forged-link-one            one malloc(48) freed, a fake link
 *                                      written into it ("forged link in P")
 *   attacks forged-link-neighbour      a live malloc(48) overflows 16 bytes
 *                                      of fake link into the free block
 *                                      right after it ("forged link in P")
 *   attacks forged-link-remote         64 malloc(48) freed by another thread
 *                                      (a transfer batch home), then a fake
 *                                      link written into one ("forged link
 *                                      in P"); forged-batch-link: into the
 *                                      batch's second word
 *   attacks write-after-free           64 malloc(48) freed, then a byte of
 *                                      each changed; 1024 malloc/free after
 *   attacks double-free-other-thread   a block freed by one thread (into its
 *                                      cache) is freed again by another
 *   attacks overflow-chunk-boundary    a malloc(48) within 4 KiB of a 2 MiB
 *                                      boundary overflows 8 KiB across it
 *   attacks write-past-huge            writes 4 KiB past a 4 MiB block's
 *                                      usable end, then frees it
 *   attacks write-past-large           the same for a 100 KiB block
 *   attacks placement                  16 consecutive malloc(48): prints how
 *                                      many of the 15 steps go to the next
 *                                      block up, 1-64 B on ("adjacent=N")
 *   attacks chunk-overflow             a linear overflow from the last block
 *                                      of one 2 MiB chunk 8 KiB into the
 *                                      next, which holds blocks too; then
 *                                      every block freed and the heap used:
 *                                      prints what it hit ("hit=block": a
 *                                      block at the next chunk's first byte)
 *
 * The overflows print "written" once their bytes are written (a fault
 * before it is a guard page's).
 * After each the program mallocs on: "exploited: ..." when the fake link
 * came back as a block or one block was handed out twice; "survived" (exit
 * 0) when nothing stopped it.  An allocator that catches an attack aborts
 * with its message on stderr; a guard page makes it a SIGSEGV.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBLOCKS 512
#define MALLOCS 1024

/* where a forged link points: not heap memory */
static char target[4096] __attribute__((aligned(4096)));

/* p, out of the compiler's sight: the attacks use blocks after free and
 * past their ends on purpose */
static void *hide(void *p)
{
	__asm__ volatile("" : "+r"(p));
	return p;
}

static int is_target(const void *p)
{
	return (const char *)p >= target && (const char *)p < target + sizeof(target);
}

/* mallocs of 48 B after an attack: 1 if one is the fake link's target */
static int malloc_to_target(void)
{
	for (int i = 0; i < MALLOCS; i++) {
		void *p = malloc(48);
		if (is_target(p)) {
			printf("exploited: malloc %d returned the forged address %p\n", i, p);
			return 1;
		}
	}
	printf("survived\n");
	return 0;
}

static int read_freed(void)
{
	uintptr_t *mine = malloc(48), *q = malloc(48);
	volatile uintptr_t *p = hide(mine);
	memset(mine, 0x41, 48);
	free(q);
	free(mine);
	uintptr_t guard = 0, canary = 0;
#if defined(__x86_64__)
	__asm__ volatile("mov %%fs:0x30, %0" : "=r"(guard));
	__asm__ volatile("mov %%fs:0x28, %0" : "=r"(canary));
#endif
	int data = 0, pointers = 0, secrets = 0;
	for (int w = 0; w < 6; w++) {
		uintptr_t v = p[w], d = v > (uintptr_t)p ? v - (uintptr_t)p : (uintptr_t)p - v;
		data += v == 0x4141414141414141ULL;
		pointers += v != 0 && d < ((uintptr_t)1 << 32);
		secrets += v != 0 && (((v ^ guard) >> 8) == 0 || ((v ^ canary) >> 8) == 0);
	}
	printf("data=%d pointers=%d secrets=%d\n", data, pointers, secrets);
	return 0;
}

static int forged_link(void)
{
	void **b[NBLOCKS];
	void **seen_b[NBLOCKS];
	for (int i = 0; i < NBLOCKS; i++)
		seen_b[i] = hide(b[i] = malloc(48));
	for (int i = 0; i < NBLOCKS; i++)
		free(b[i]);
	for (int i = 0; i < NBLOCKS; i++)
		seen_b[i][0] = target; /* a write after free */
	return malloc_to_target();
}

static int forged_link_overflow(void)
{
	char *b[NBLOCKS];
	for (int i = 0; i < NBLOCKS; i++)
		b[i] = malloc(48);
	for (int i = 1; i < NBLOCKS; i += 2)
		free(b[i]);
	for (int i = 0; i < NBLOCKS; i += 2) {
		void *fake[8];
		for (int w = 0; w < 8; w++)
			fake[w] = target;
		memcpy((char *)hide(b[i]) + 48, fake, sizeof(fake)); /* 64 bytes past the block */
	}
	return malloc_to_target();
}

/* After "forged link in P": the mallocs, with stdout flushed (an abort
 * does not flush it). */
static int forged_in(const void *p)
{
	printf("forged link in %p\n", p);
	fflush(stdout);
	return malloc_to_target();
}

static int forged_link_one(void)
{
	void **b = malloc(48), **seen_b = hide(b);
	free(b);
	seen_b[0] = target; /* a write after free */
	return forged_in(seen_b);
}

static int forged_link_neighbour(void)
{
	static char *b[NBLOCKS];
	for (int i = 0; i < NBLOCKS; i++)
		b[i] = malloc(48);
	for (int i = 0; i < NBLOCKS; i++)
		for (int j = 0; j < NBLOCKS; j++)
			if (b[j] == b[i] + 48) {
				void *fake[2] = { target, target }, *victim = hide(b[j]);
				free(b[j]);
				memcpy((char *)hide(b[i]) + 48, fake, sizeof(fake)); /* 16 bytes past */
				return forged_in(victim);
			}
	printf("no neighbours\n");
	return 3;
}

static void *remote_blocks[64];

static void *free_all(void *arg)
{
	(void)arg;
	for (int i = 0; i < 64; i++)
		free(remote_blocks[i]);
	return NULL;
}

/* 64 blocks freed by another thread (another arena's: a batch home, whose
 * first block is the last freed), then word w of block i forged. */
static int forged_link_remote(int i, int w)
{
	for (int k = 0; k < 64; k++)
		remote_blocks[k] = malloc(48);
	pthread_t t;
	if (pthread_create(&t, NULL, free_all, NULL) != 0)
		return 2;
	pthread_join(t, NULL);
	void **seen_b = hide(remote_blocks[i]);
	seen_b[w] = target;
	return forged_in(seen_b);
}

static int forged_link_remote_one(void)
{
	return forged_link_remote(10, 0);
}

static int forged_batch_link(void)
{
	return forged_link_remote(63, 1);
}

static int write_after_free(void)
{
	char *b[64], *seen_b[64];
	for (int i = 0; i < 64; i++)
		seen_b[i] = hide(b[i] = malloc(48));
	for (int i = 0; i < 64; i++)
		free(b[i]);
	for (int i = 0; i < 64; i++)
		seen_b[i][24] = 1;
	for (int i = 0; i < MALLOCS; i++)
		free(hide(malloc(48)));
	printf("survived\n");
	return 0;
}

static void *block;
static void *seen[2][64];

static void *free_it(void *arg)
{
	(void)arg;
	printf("second free of %p from another thread\n", block);
	fflush(stdout);
	free(block);
	for (int i = 0; i < 64; i++)
		seen[1][i] = malloc(48);
	return NULL;
}

static int double_free_other_thread(void)
{
	block = malloc(48);
	free(block); /* into this thread's cache */
	pthread_t t;
	if (pthread_create(&t, NULL, free_it, NULL) != 0)
		return 2;
	pthread_join(t, NULL);
	for (int i = 0; i < 64; i++)
		seen[0][i] = malloc(48);
	for (int i = 0; i < 64; i++)
		for (int j = 0; j < 64; j++)
			if (seen[0][i] == seen[1][j]) {
				printf("exploited: %p handed out to both threads\n", seen[0][i]);
				return 0;
			}
	printf("survived\n");
	return 0;
}

static int overflow_chunk_boundary(void)
{
	const uintptr_t chunk = (uintptr_t)2 << 20;
	static char *b[200000];
	int n = 0;
	char *victim = NULL;
	while (n < 200000 && !victim) {
		char *p = b[n++] = malloc(48);
		uintptr_t left = chunk - ((uintptr_t)p & (chunk - 1));
		if (left > 48 && left <= 4096)
			victim = p;
	}
	if (!victim) {
		printf("no block near a 2 MiB boundary\n");
		return 3;
	}
	printf("overflow from %p across %p\n", (void *)victim,
	       (void *)(((uintptr_t)victim + chunk) & ~(chunk - 1)));
	fflush(stdout);
	memset((char *)hide(victim) + 48, 0x41, 8192);
	printf("written\n");
	fflush(stdout);
	for (int i = 0; i < n; i++)
		if (b[i] != victim)
			free(b[i]);
	for (int i = 0; i < 100000; i++)
		free(hide(malloc((size_t)(16 + i % 4096))));
	printf("survived\n");
	return 0;
}

static int write_past(size_t size)
{
	char *p = malloc(size);
	size_t usable = malloc_usable_size(p);
	memset(p, 1, usable);
	printf("writing 4 KiB at %p + %zu\n", (void *)p, usable);
	fflush(stdout);
	memset((char *)hide(p) + usable, 0x41, 4096);
	printf("written\n");
	fflush(stdout);
	free(p);
	for (int i = 0; i < 64; i++)
		free(hide(malloc(size)));
	printf("survived\n");
	return 0;
}

static int placement(void)
{
	char *p[16];
	for (int i = 0; i < 16; i++)
		p[i] = malloc(48);
	int adjacent = 0;
	for (int i = 1; i < 16; i++)
		adjacent += p[i] > p[i - 1] && p[i] - p[i - 1] <= 64;
	printf("adjacent=%d\n", adjacent);
	return 0;
}

enum { NOVER = 600, OVER_SIZE = 16384, REACH = 8192 };
#define CHUNK ((uintptr_t)2 << 20)

static char *over[NOVER];

/* The block of over[] ending last in the chunk before boundary, or -1. */
static int last_before(uintptr_t boundary)
{
	int best = -1;
	for (int i = 0; i < NOVER; i++) {
		uintptr_t end = (uintptr_t)over[i] + OVER_SIZE;
		if (end <= boundary && end > boundary - CHUNK &&
		    (best < 0 || end > (uintptr_t)over[best] + OVER_SIZE))
			best = i;
	}
	return best;
}

static int chunk_overflow(void)
{
	for (int i = 0; i < NOVER; i++) {
		if (!(over[i] = malloc(OVER_SIZE)))
			return 2;
		memset(over[i], 0x5a, OVER_SIZE);
	}
	/* a chunk holding blocks whose predecessor holds blocks too */
	int from = -1, hit = -1;
	uintptr_t boundary = 0;
	for (int i = 0; i < NOVER && from < 0; i++) {
		boundary = (uintptr_t)over[i] & ~(CHUNK - 1);
		from = last_before(boundary);
	}
	if (from < 0)
		return 2;
	for (int i = 0; i < NOVER; i++)
		if ((uintptr_t)over[i] == boundary)
			hit = i;
	char *start = over[from] + OVER_SIZE;
	size_t n = boundary + REACH - (uintptr_t)start;
	printf("overflow of %zu bytes from %p to %p: %s\n", n, (void *)start,
	       (void *)(boundary + REACH), hit >= 0 ? "hit=block" : "hit=other");
	fflush(stdout);
	memset(start, 0x41, n);
	for (int i = 0; i < NOVER; i++)
		free(over[i]);
	for (int round = 0; round < 4; round++) {
		for (int i = 0; i < NOVER; i++)
			if ((over[i] = malloc(OVER_SIZE / (1 + round))))
				memset(over[i], round, OVER_SIZE / (1 + round));
		for (int i = NOVER - 1; i >= 0; i--)
			free(over[i]);
	}
	printf("survived\n");
	return 0;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*run)(void);
	} attacks[] = {
		{ "read-freed", read_freed },
		{ "forged-link", forged_link },
		{ "forged-link-overflow", forged_link_overflow },
		{ "forged-link-one", forged_link_one },
		{ "forged-link-neighbour", forged_link_neighbour },
		{ "forged-link-remote", forged_link_remote_one },
		{ "forged-batch-link", forged_batch_link },
		{ "write-after-free", write_after_free },
		{ "double-free-other-thread", double_free_other_thread },
		{ "overflow-chunk-boundary", overflow_chunk_boundary },
		{ "placement", placement },
		{ "chunk-overflow", chunk_overflow },
	};
	for (size_t i = 0; argc >= 2 && i < sizeof(attacks) / sizeof(attacks[0]); i++)
		if (!strcmp(argv[1], attacks[i].name))
			return attacks[i].run();
	if (argc >= 2 && !strcmp(argv[1], "write-past-huge"))
		return write_past((size_t)4 << 20);
	if (argc >= 2 && !strcmp(argv[1], "write-past-large"))
		return write_past((size_t)100 << 10);
	fprintf(stderr, "usage: attacks read-freed | forged-link | forged-link-overflow | "
			"forged-link-one | forged-link-neighbour | forged-link-remote | "
			"forged-batch-link | write-after-free | "
			"double-free-other-thread | overflow-chunk-boundary | write-past-huge | "
			"write-past-large | placement | chunk-overflow\n");
	return 2;
}
