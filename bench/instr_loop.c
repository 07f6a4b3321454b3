/*
 * instr_loop: the loop behind bench/instructions, the instruction count of
 * a malloc+free pair (issue 14).
 *
 * 64 slots, filled at start with blocks of 16-271 bytes.  Each iteration
 * draws a random number (xorshift64*), reads the first byte of the block in
 * slot r mod 64, frees it, mallocs a block of 16 + (r >> 8 & 255) bytes,
 * 16-271 B, into the slot and writes its first byte.  After n iterations
 * (argv[1], default 1000000) the slots are freed and a checksum of the bytes
 * read is printed.  Nothing else happens in the loop, so the instructions a
 * run executes are a constant (start-up, filling, exit) plus n times the cost
 * of an iteration; bench/instructions runs it under callgrind with n and 2n
 * and takes the difference.  The loop's own instructions (random number,
 * slot, size, the two byte accesses, the calls) are in the figure, a handful.
 *
 * With a second argument K (bench/instructions --burst K), the loop is the
 * thread cache's miss path instead: n / K rounds of K mallocs of 16-271 B,
 * then K frees in the order they were made, a byte read and written in
 * each block; an iteration is still one malloc and one free.  K above a
 * thread cache's list length sends blocks through refills and flushes.
 *
 * Usage: instr_loop [iterations [burst]]
 * Prints "result iterations=<n> checksum=<sum of the bytes read>".
 *
 * Not a bench/run workload (no quick or full runs); the tiny run keeps it
 * built and working:
 * BENCH tiny: 1000
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

#define SLOTS 64
#define BURST_MAX 65536

/* The miss path: n / k rounds of k mallocs, then k frees, oldest first. */
static int run_bursts(uint64_t n, uint64_t k)
{
	static unsigned char *block[BURST_MAX];
	uint64_t rng = rng_seed(14, 1), sum = 0;
	for (uint64_t round = 0; round < n / k; round++) {
		for (uint64_t i = 0; i < k; i++) {
			uint64_t r = xorshift64s(&rng);
			unsigned char *p = malloc(16 + ((r >> 8) & 255));
			if (!p)
				return 1;
			p[0] = (unsigned char)(r >> 16);
			block[i] = p;
		}
		for (uint64_t i = 0; i < k; i++) {
			sum += block[i][0];
			free(block[i]);
		}
	}
	printf("result iterations=%" PRIu64 " burst=%" PRIu64 " checksum=%" PRIu64 "\n", n, k, sum);
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t n = 1000000, burst = 0, rng = rng_seed(14, 0), sum = 0;
	unsigned char *slot[SLOTS];
	if (argc > 3 || (argc >= 2 && parse_u64(argv[1], 0, UINT64_MAX, &n) < 0) ||
	    (argc == 3 && parse_u64(argv[2], 1, BURST_MAX, &burst) < 0)) {
		fprintf(stderr, "usage: instr_loop [iterations [burst (1..%d)]]\n", BURST_MAX);
		return 2;
	}
	if (burst)
		return run_bursts(n, burst);
	for (unsigned i = 0; i < SLOTS; i++) {
		slot[i] = malloc(16 + i * 4);
		if (!slot[i])
			return 1;
		slot[i][0] = (unsigned char)i;
	}
	for (uint64_t k = 0; k < n; k++) {
		uint64_t r = xorshift64s(&rng);
		unsigned i = (unsigned)(r % SLOTS);
		sum += slot[i][0];
		free(slot[i]);
		unsigned char *p = malloc(16 + ((r >> 8) & 255));
		if (!p)
			return 1;
		p[0] = (unsigned char)(r >> 16);
		slot[i] = p;
	}
	for (unsigned i = 0; i < SLOTS; i++)
		free(slot[i]);
	printf("result iterations=%" PRIu64 " checksum=%" PRIu64 "\n", n, sum);
	return 0;
}
