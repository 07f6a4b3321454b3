/*
 * What a read of freed memory shows: run by test_harden.c under
 * LD_PRELOAD=libarena.so (with and without ARENA_CONF=sim_no_getrandom:true).
 *
 * It frees blocks of several small classes and reads every word of each:
 * none may hold glibc's pointer guard, its stack canary or either half of
 * the kernel's AT_RANDOM bytes they come from (nor any of them with its
 * lowest byte changed).  It prints the key it found
 * in the freed blocks' second word ("key=HEX"), so the suite can check that
 * two processes do not share it, and "ok" or one "FAIL: ..." line per
 * finding (exit 1).
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#include "prog_check.h"

#define NBLOCKS 64

static uintptr_t secrets[6];
static unsigned nsecrets;

static void add_secret(uintptr_t s, const char *what)
{
	CHECK(s != 0, "the %s reads 0", what);
	secrets[nsecrets++] = s;
}

static void find_secrets(void)
{
	uintptr_t random[2];
	memcpy(random, (const void *)getauxval(AT_RANDOM), sizeof(random));
	add_secret(random[0], "AT_RANDOM's first word");
	add_secret(random[1], "AT_RANDOM's second word");
	add_secret(random[0] & ~(uintptr_t)0xff, "canary as glibc forms it");
#if defined(__x86_64__)
	uintptr_t guard, canary;
	__asm__ volatile("mov %%fs:0x30, %0" : "=r"(guard));
	__asm__ volatile("mov %%fs:0x28, %0" : "=r"(canary));
	add_secret(guard, "pointer guard");
	add_secret(canary, "stack canary");
#endif
}

/* A word that agrees with a secret on all but its lowest byte leaks it
 * (glibc's canary is AT_RANDOM's word with that byte cleared; a key may
 * set its low bits): 2^-56 of a false alarm. */
static int same_high_bits(uintptr_t word, uintptr_t secret)
{
	return ((word ^ secret) >> 8) == 0;
}

/* Frees NBLOCKS blocks of size bytes, then reads them all (a use after
 * free, on purpose); returns the second word of the last one. */
static uintptr_t read_freed(size_t size)
{
	volatile uintptr_t *blocks[NBLOCKS];
	for (int i = 0; i < NBLOCKS; i++)
		blocks[i] = malloc(size);
	for (int i = 0; i < NBLOCKS; i++)
		free((void *)blocks[i]);
	for (int i = 0; i < NBLOCKS; i++)
		for (size_t w = 0; w < size / sizeof(uintptr_t); w++)
			for (unsigned s = 0; s < nsecrets; s++)
				CHECK(!same_high_bits(blocks[i][w], secrets[s]),
				      "%zu B block %p word %zu holds secret %u",
				      size, (void *)blocks[i], w, s);
	return blocks[NBLOCKS - 1][1];
}

int main(void)
{
	find_secrets();
	static const size_t sizes[] = { 16, 48, 128, 1024, 4096 };
	uintptr_t key = 0;
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uintptr_t k = read_freed(sizes[i]);
		CHECK(k != 0, "a freed %zu B block holds no key", sizes[i]);
		CHECK(!key || k == key, "freed blocks hold different keys: %" PRIxPTR " %" PRIxPTR, key, k);
		key = k;
	}
	printf("key=%" PRIxPTR "\n", key);
	return checks_report();
}
