/*
 * glibc_simple: allocate a batch, free it, over and over; after glibc's
 * benchtests/bench-malloc-simple (written from its description, not its
 * code).
 *
 * For every pair of a size s (-s, default 16, 256, 1024 and 4096 bytes) and
 * a count c (-c, default 25, 100, 400 and 1600 blocks), the loop mallocs c
 * blocks of s bytes into an array, writing the first byte of each, and then
 * frees them in the order they were allocated, and does so again and again
 * for d seconds (default 0.05; the clock is read after each batch), so
 * that a slow configuration does not take the whole run (or, with -n, a
 * fixed number of pairs: -n P runs ceil(P / c) batches of each
 * configuration, no clock in the loop, for instruction counts under
 * callgrind: bench/prof_cost --callgrind): glibc, for one,
 * gives the top of its heap back to the kernel at every batch of 400 or
 * more 4 KiB blocks and takes it back page by page, some 5 us a pair.  Each
 * configuration is timed on its own (CLOCK_MONOTONIC around its batches,
 * after one untimed warm-up batch) and printed as a `series` step; the main
 * figure is the geometric mean over the configurations of the nanoseconds
 * per pair (each configuration weighs the same, whatever its scale).  As in glibc's benchmark, the same loop can run in the main
 * thread (glibc: the main arena, and the single-thread shortcuts taken while
 * the process has no other thread) or, with -T, in a second thread started
 * for it (another arena, and the process is multi-threaded).
 *
 * Usage: glibc_simple [-s SIZE,SIZE,...] [-c COUNT,COUNT,...] [-d seconds]
 *                     [-n pairs] [-T]
 * Prints "series step=<s>Bx<c> ns_per_pair=<ns>" per configuration,
 * "result ns_per_pair=<geometric mean> worst_ns_per_pair=<largest>" on stdout, and
 * a human-readable table on stderr.
 *
 * Runs for bench/run (see bench/run --help for the syntax):
 * BENCH tiny: -d 0.002
 * BENCH series: ns_per_pair
 * BENCH quick: main | -d 0.05
 * BENCH quick: thread | -d 0.05 -T
 * BENCH full: main-long | -d 0.25
 * BENCH full: thread-long | -d 0.25 -T
 * BENCH full: main-small | -d 0.1 -s 8,16,24,32,48,64,96,128 -c 25,100,400,1600
 * BENCH full: main-big | -d 0.1 -s 8192,16384,32768,65536 -c 25,100,400
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MAX_LIST 32

typedef struct config {
	size_t sizes[MAX_LIST], counts[MAX_LIST];
	unsigned nsizes, ncounts;
	double seconds; /* per configuration */
	uint64_t pairs; /* -n: pairs per configuration instead of seconds */
	double ns[MAX_LIST][MAX_LIST]; /* ns per pair, by size and count */
	int failed;
} config_t;

/* One batch: c mallocs of s bytes, then c frees in the same order. */
static int batch(void **blocks, size_t count, size_t size)
{
	for (size_t i = 0; i < count; i++) {
		char *p = malloc(size);
		if (!p)
			return -1;
		p[0] = (char)i;
		blocks[i] = p;
	}
	for (size_t i = 0; i < count; i++)
		free(blocks[i]);
	return 0;
}

static void *run_all(void *arg)
{
	config_t *cf = arg;
	size_t most = 0;
	for (unsigned j = 0; j < cf->ncounts; j++)
		if (cf->counts[j] > most)
			most = cf->counts[j];
	void **blocks = malloc(most * sizeof(*blocks));
	if (!blocks) {
		cf->failed = 1;
		return NULL;
	}
	for (unsigned i = 0; i < cf->nsizes; i++)
		for (unsigned j = 0; j < cf->ncounts; j++) {
			size_t s = cf->sizes[i], c = cf->counts[j];
			uint64_t reps = 0;
			if (batch(blocks, c, s) < 0) /* warm-up, untimed */
				goto fail;
			double t0 = now_sec(), t;
			if (cf->pairs) {
				for (; reps * c < cf->pairs; reps++)
					if (batch(blocks, c, s) < 0)
						goto fail;
				t = now_sec() - t0;
			} else {
				do {
					if (batch(blocks, c, s) < 0)
						goto fail;
					reps++;
				} while ((t = now_sec() - t0) < cf->seconds);
			}
			cf->ns[i][j] = t * 1e9 / ((double)reps * (double)c);
		}
	free(blocks);
	return NULL;
fail:
	fprintf(stderr, "glibc_simple: malloc failed\n");
	cf->failed = 1;
	free(blocks);
	return NULL;
}

/* A comma-separated list of sizes (suffixes k, m, g allowed) into out. */
static int parse_list(const char *s, size_t *out, unsigned *n)
{
	char buf[512];
	if (strlen(s) >= sizeof buf)
		return -1;
	strcpy(buf, s);
	*n = 0;
	for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint64_t v;
		if (*n == MAX_LIST || parse_size(tok, 1, (uint64_t)1 << 32, &v) < 0)
			return -1;
		out[(*n)++] = (size_t)v;
	}
	return *n ? 0 : -1;
}

static void usage(void)
{
	fprintf(stderr, "usage: glibc_simple [-s SIZE,SIZE,...] [-c COUNT,COUNT,...] [-d seconds] [-n pairs] [-T]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	config_t *cf = calloc(1, sizeof(*cf));
	const char *sizes = "16,256,1024,4096", *counts = "25,100,400,1600";
	int in_thread = 0, c;
	if (!cf)
		return 1;
	cf->seconds = 0.05;
	while ((c = getopt(argc, argv, "s:c:d:n:Th")) != -1) {
		switch (c) {
		case 's': sizes = optarg; break;
		case 'c': counts = optarg; break;
		case 'd':
			if (parse_double(optarg, 0, 3600, &cf->seconds) < 0)
				usage();
			break;
		case 'n': {
			uint64_t v;
			if (parse_size(optarg, 1, (uint64_t)1 << 40, &v) < 0)
				usage();
			cf->pairs = v;
			break;
		}
		case 'T': in_thread = 1; break;
		default: usage();
		}
	}
	if (optind != argc || parse_list(sizes, cf->sizes, &cf->nsizes) < 0 ||
	    parse_list(counts, cf->counts, &cf->ncounts) < 0)
		usage();

	if (in_thread) {
		pthread_t t;
		if (pthread_create(&t, NULL, run_all, cf)) {
			fprintf(stderr, "glibc_simple: pthread_create failed\n");
			return 1;
		}
		pthread_join(t, NULL);
	} else {
		run_all(cf);
	}
	if (cf->failed)
		return 1;

	double logs = 0, worst = 0;
	if (cf->pairs)
		fprintf(stderr, "glibc_simple (%s, %llu pairs per configuration): ns per malloc+free\n",
			in_thread ? "in a second thread" : "in the main thread",
			(unsigned long long)cf->pairs);
	else
		fprintf(stderr, "glibc_simple (%s, %g s per configuration): ns per malloc+free\n",
			in_thread ? "in a second thread" : "in the main thread", cf->seconds);
	for (unsigned i = 0; i < cf->nsizes; i++) {
		fprintf(stderr, "  %6zu B:", cf->sizes[i]);
		for (unsigned j = 0; j < cf->ncounts; j++) {
			double ns = cf->ns[i][j];
			printf("series step=%zuBx%zu ns_per_pair=%.3f\n", cf->sizes[i], cf->counts[j], ns);
			fprintf(stderr, "  x%zu %.2f", cf->counts[j], ns);
			logs += log(ns);
			if (ns > worst)
				worst = ns;
		}
		fprintf(stderr, "\n");
	}
	double mean = exp(logs / (cf->nsizes * cf->ncounts));
	fprintf(stderr, "  geometric mean %.2f ns, worst %.2f ns\n", mean, worst);
	printf("result ns_per_pair=%.3f worst_ns_per_pair=%.3f\n", mean, worst);
	free(cf);
	return 0;
}
