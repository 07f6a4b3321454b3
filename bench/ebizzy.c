/*
 * ebizzy: an ebizzy-style web-application-server workload: large blocks
 * allocated, copied into, searched and freed over and over.
 *
 * Written from the description of ebizzy 0.3 (Val Henson: "a workload
 * resembling common web application server workloads ... highly threaded,
 * has a large in-memory working set with low locality, and allocates and
 * deallocates memory frequently"); not from its code.  At start, n chunks of
 * s bytes are malloc'ed and filled with records: sorted, distinct 64-bit keys
 * (record j of chunk c is j << 24 plus 24 pseudo-random bits from c and j, so
 * any key can be recomputed without reading memory).  Then t threads, for S
 * seconds, each repeat: pick a random chunk, allocate a copy of it (malloc,
 * or mmap with -m), memcpy the chunk into it, binary-search k random records
 * of the copy, free it (free, or munmap).  Every searched key is recomputed
 * from its chunk and index and must be found at that index in the copy;
 * if not, the program says so and exits 1.  With -R, each copy is of a random
 * number of leading records (1 to all, uniform) instead of the whole chunk.
 *
 * The point: a copy is one large block freed right after use.  An allocator
 * that gives such a block's pages back to the kernel at every free
 * (munmap, or MADV_DONTNEED purging) pays a page fault, and the zeroing of a
 * page, for every 4 KiB of the next copy; one that keeps them (or purges
 * lazily, MADV_FREE) does not.  The minor faults per copy printed on stderr
 * show which is happening: about s / 4096 when pages go back every time,
 * about 0 when they are reused (plus the faults of the first copies, before
 * the allocator holds the pages: a few per copy in a 2 s run of 5 MiB chunks,
 * e.g. glibc faults in 2 copies' worth per thread, the first one mmap'ed).
 *
 * Timing: the threads and the main thread meet at a barrier; the clock runs
 * from there to the last thread's end of its last iteration (the main thread
 * sleeps S seconds, then raises a stop flag; iterations under way complete
 * and count).  Random numbers: a per-thread xorshift64* seeded from -r and
 * the thread number; the keys depend on -r as well.
 *
 * Usage: ebizzy [-s chunk size] [-n chunks] [-t threads] [-S seconds]
 *               [-k searches per copy] [-R] [-m | -M] [-T] [-z] [-r seed]
 *   -s SIZE  bytes per chunk, a multiple of 8 (rounded down); suffixes k, m,
 *            g (binary) and fractions accepted (default 512k, as ebizzy)
 *   -n N     number of chunks (default 10, as ebizzy)
 *   -t N     threads (default twice the online CPUs, as ebizzy)
 *   -S SECS  seconds to run, may be fractional (default 10, as ebizzy)
 *   -k N     records searched in each copy (default 1, as ebizzy)
 *   -R       random copy sizes (see above)
 *   -m       always mmap: copies are mmap'ed and munmap'ed directly (malloc
 *            is not used for them; the chunks still come from malloc)
 *   -M       never mmap: copies by malloc (the default), and, as ebizzy does,
 *            mallopt(M_MMAP_MAX, 0) first, which only glibc's malloc acts on
 *            (it then keeps its trim threshold at 128 KiB, so that every free
 *            of a copy at the top of the heap gives its pages back: ~1 fault
 *            per page of the next copy, as with -m)
 *   -T       touch only: write one byte per page of each copy instead of
 *            copying and searching (one record counted per copy)
 *   -z       linear search instead of binary search (a sanity check; slow)
 *   -r SEED  random seed (default 1)
 * Prints "result records_per_sec=<records searched / wall seconds>" on stdout
 * (with k = 1 that is copies per second, ebizzy's "records/s") and details on
 * stderr: copies, GiB/s copied, minor faults during the timed phase (total,
 * per copy), the RSS at the end of the timed phase and its peak (VmHWM).
 *
 * Tiny mode, for CI smoke tests (about 0.2 s):
 *   ebizzy -S 0.2 -s 65536 -n 4 -t 1
 *
 * Runs for bench/run (see bench/run --help for the syntax):
 * BENCH tiny: -S 0.2 -s 65536 -n 4 -t 1
 * BENCH quick: 5mib-2t | -s 5242880 -n 10 -t 2 -S 2
 * BENCH quick: 512k-2t | -s 524288 -n 64 -t 2 -S 2
 * BENCH full: 5mib-1t | -s 5242880 -n 10 -t 1 -S 3
 * BENCH full: 5mib-2t-10s | -s 5242880 -n 10 -t 2 -S 10
 * BENCH full: 5mib-2t-rand | -s 5242880 -n 10 -t 2 -S 3 -R
 * BENCH full: 5mib-4t | -s 5242880 -n 10 -t 4 -S 3
 * BENCH full: 512k-1t | -s 524288 -n 64 -t 1 -S 3
 * BENCH full: 512k-2t-rand | -s 524288 -n 64 -t 2 -S 3 -R
 * BENCH full: 64k-2t-rand | -s 65536 -n 256 -t 2 -S 3 -R
 * (5mib-2t-10s runs past jemalloc's default 10 s dirty-page decay; 5mib-4t
 * oversubscribes the CPUs as ebizzy's default of 2 threads per CPU does.
 * For the cost of giving the pages back at every free, which is what an
 * allocator that purges eagerly pays, run a case with -m: mmap/munmap
 * directly, the same under every allocator.)
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define RECORD sizeof(uint64_t)
#define PAGE 4096

typedef struct config {
	size_t chunk_size;  /* bytes, a multiple of RECORD */
	size_t nrec;        /* records per chunk */
	uint64_t nchunks;
	uint64_t nthreads;
	uint64_t searches;  /* per copy */
	double seconds;
	uint64_t seed;
	int random_size, always_mmap, never_mmap, touch_only, linear;
} config_t;

typedef struct worker {
	_Alignas(64) pthread_t thread;
	unsigned id;
	uint64_t rng;
	uint64_t copies, records;
	double bytes;        /* copied (or touched) */
	double t_end;        /* end of this thread's last iteration */
	int failed;
} worker_t;

static const config_t *cfg;
static uint64_t **chunks;
static uint64_t *chunk_salt;
static pthread_barrier_t go;
static atomic_int stop;

/* Record j of chunk c: increasing in j, distinct, recomputable. */
static inline uint64_t record_key(size_t c, size_t j)
{
	return ((uint64_t)j << 24) | (splitmix64(chunk_salt[c] ^ j) >> 40);
}

/* Index of key in a[0..n), or -1. */
static inline ptrdiff_t binary_search(const uint64_t *a, size_t n, uint64_t key)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (a[mid] < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && a[lo] == key ? (ptrdiff_t)lo : -1;
}

static inline ptrdiff_t linear_search(const uint64_t *a, size_t n, uint64_t key)
{
	for (size_t i = 0; i < n; i++)
		if (a[i] == key)
			return (ptrdiff_t)i;
	return -1;
}

static void *copy_alloc(size_t size)
{
	if (cfg->always_mmap) {
		void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		return p == MAP_FAILED ? NULL : p;
	}
	return malloc(size);
}

static void copy_free(void *p, size_t size)
{
	if (cfg->always_mmap)
		munmap(p, size);
	else
		free(p);
}

/* One request: copy a chunk, search it, free the copy.  -1 on failure. */
static int request(worker_t *w)
{
	size_t c = (size_t)(xorshift64s(&w->rng) % cfg->nchunks);
	size_t n = cfg->nrec;
	if (cfg->random_size)
		n = 1 + (size_t)(xorshift64s(&w->rng) % cfg->nrec);
	size_t size = n * RECORD;
	uint64_t *copy = copy_alloc(size);
	if (!copy) {
		fprintf(stderr, "ebizzy: thread %u: cannot allocate a %zu-byte copy: %s\n",
			w->id, size, strerror(errno));
		return -1;
	}
	w->copies++;
	w->bytes += (double)size;
	if (cfg->touch_only) {
		for (size_t off = 0; off < size; off += PAGE)
			((volatile unsigned char *)copy)[off] = 0xff;
		w->records++;
		copy_free(copy, size);
		return 0;
	}
	memcpy(copy, chunks[c], size);
	for (uint64_t s = 0; s < cfg->searches; s++) {
		size_t j = (size_t)(xorshift64s(&w->rng) % n);
		uint64_t key = record_key(c, j);
		ptrdiff_t at = cfg->linear ? linear_search(copy, n, key)
					   : binary_search(copy, n, key);
		if (at != (ptrdiff_t)j) {
			fprintf(stderr, "ebizzy: thread %u: key %#" PRIx64 " (chunk %zu, record %zu) "
				"%s in the %zu-record copy at %p\n", w->id, key, c, j,
				at < 0 ? "not found" : "found at the wrong index", n, (void *)copy);
			copy_free(copy, size);
			return -1;
		}
	}
	w->records += cfg->searches;
	copy_free(copy, size);
	return 0;
}

static void *worker_main(void *arg)
{
	worker_t *w = arg;
	pthread_barrier_wait(&go);
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		if (request(w) < 0) {
			w->failed = 1;
			atomic_store(&stop, 1);
			break;
		}
	}
	w->t_end = now_sec();
	return NULL;
}

/* VmRSS and VmHWM of this process in KiB (0 if unreadable). */
static void read_rss(long *rss, long *hwm)
{
	char line[256];
	FILE *f = fopen("/proc/self/status", "r");
	*rss = *hwm = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "VmRSS: %ld", rss);
		sscanf(line, "VmHWM: %ld", hwm);
	}
	fclose(f);
}

static void usage(void)
{
	fprintf(stderr, "usage: ebizzy [-s chunk size] [-n chunks] [-t threads] [-S seconds]\n"
			"              [-k searches per copy] [-R] [-m | -M] [-T] [-z] [-r seed]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static config_t conf;
	uint64_t size = 512 * 1024;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int c;

	conf = (config_t){ .nchunks = 10, .nthreads = 2 * (uint64_t)(ncpu > 0 ? ncpu : 1),
			   .searches = 1, .seconds = 10, .seed = 1 };
	while ((c = getopt(argc, argv, "s:n:t:S:k:RmMTzr:h")) != -1) {
		int bad = 0;
		switch (c) {
		case 's': bad = parse_size(optarg, RECORD, (uint64_t)1 << 40, &size); break;
		case 'n': bad = parse_u64(optarg, 1, 1u << 20, &conf.nchunks); break;
		case 't': bad = parse_u64(optarg, 1, 1024, &conf.nthreads); break;
		case 'S': bad = parse_double(optarg, 0, 1e6, &conf.seconds); break;
		case 'k': bad = parse_u64(optarg, 1, UINT64_MAX, &conf.searches); break;
		case 'R': conf.random_size = 1; break;
		case 'm': conf.always_mmap = 1; break;
		case 'M': conf.never_mmap = 1; break;
		case 'T': conf.touch_only = 1; break;
		case 'z': conf.linear = 1; break;
		case 'r': bad = parse_u64(optarg, 0, UINT64_MAX, &conf.seed); break;
		default: usage();
		}
		if (bad)
			usage();
	}
	if (optind != argc)
		usage();
	if (conf.always_mmap && conf.never_mmap) {
		fprintf(stderr, "ebizzy: -m (always mmap) and -M (never mmap) exclude each other\n");
		usage();
	}
	conf.nrec = (size_t)(size / RECORD);
	conf.chunk_size = conf.nrec * RECORD;
	cfg = &conf;
	if (conf.never_mmap)
		mallopt(M_MMAP_MAX, 0);

	/* The working set. */
	chunks = calloc(conf.nchunks, sizeof(*chunks));
	chunk_salt = calloc(conf.nchunks, sizeof(*chunk_salt));
	if (!chunks || !chunk_salt)
		return 1;
	for (size_t i = 0; i < conf.nchunks; i++) {
		chunk_salt[i] = splitmix64(conf.seed * 0x100000001b3ull + i);
		chunks[i] = malloc(conf.chunk_size);
		if (!chunks[i]) {
			fprintf(stderr, "ebizzy: cannot allocate chunk %zu of %zu bytes\n",
				i, conf.chunk_size);
			return 1;
		}
		for (size_t j = 0; j < conf.nrec; j++)
			chunks[i][j] = record_key(i, j);
	}

	worker_t *workers = calloc(conf.nthreads, sizeof(*workers));
	if (!workers)
		return 1;
	pthread_barrier_init(&go, NULL, (unsigned)conf.nthreads + 1);
	for (unsigned i = 0; i < conf.nthreads; i++) {
		workers[i].id = i;
		workers[i].rng = rng_seed(conf.seed, i);
		if (pthread_create(&workers[i].thread, NULL, worker_main, &workers[i])) {
			fprintf(stderr, "ebizzy: pthread_create failed\n");
			return 1;
		}
	}

	struct rusage ru0, ru1;
	getrusage(RUSAGE_SELF, &ru0);
	pthread_barrier_wait(&go);
	double t0 = now_sec();
	struct timespec nap = { .tv_sec = (time_t)conf.seconds,
				.tv_nsec = (long)((conf.seconds - floor(conf.seconds)) * 1e9) };
	while (nanosleep(&nap, &nap) < 0 && errno == EINTR)
		;
	atomic_store(&stop, 1);

	int failed = 0;
	double t1 = t0, bytes = 0;
	uint64_t copies = 0, records = 0;
	for (unsigned i = 0; i < conf.nthreads; i++) {
		worker_t *w = &workers[i];
		pthread_join(w->thread, NULL);
		failed |= w->failed;
		if (w->t_end > t1)
			t1 = w->t_end;
		copies += w->copies;
		records += w->records;
		bytes += w->bytes;
	}
	getrusage(RUSAGE_SELF, &ru1);
	long rss, hwm;
	read_rss(&rss, &hwm);
	if (failed) {
		fprintf(stderr, "ebizzy: a thread failed (allocation failure or a bad copy)\n");
		return 1;
	}

	double secs = t1 - t0;
	long faults = ru1.ru_minflt - ru0.ru_minflt;
	double avg_pages = copies ? bytes / (double)copies / PAGE : 0;
	fprintf(stderr, "ebizzy: %" PRIu64 " thread(s), %" PRIu64 " chunks x %.2f MiB%s, copies by %s%s, "
		"%" PRIu64 " search(es)/copy: %.3f s, %" PRIu64 " copies (%.0f/s, %.2f GiB/s), "
		"%.0f records/s\n",
		conf.nthreads, conf.nchunks, (double)conf.chunk_size / 1048576,
		conf.random_size ? " (random copy sizes)" : "",
		conf.always_mmap ? "mmap/munmap" : "malloc/free",
		conf.touch_only ? " (touch only)" : conf.linear ? " (linear search)" : "",
		conf.searches, secs, copies, (double)copies / secs, bytes / secs / 1073741824.0,
		(double)records / secs);
	fprintf(stderr, "ebizzy: timed phase: %ld minor faults (%.2f per copy of %.1f pages on "
		"average), user %.2f s, sys %.2f s; RSS at end %.1f MiB, peak %.1f MiB\n",
		faults, copies ? (double)faults / (double)copies : 0.0, avg_pages,
		(double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
			(double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) * 1e-6,
		(double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
			(double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) * 1e-6,
		(double)rss / 1024, (double)hwm / 1024);
	printf("result records_per_sec=%.0f\n", (double)records / secs);

	for (size_t i = 0; i < conf.nchunks; i++)
		free(chunks[i]);
	free(chunks);
	free(chunk_salt);
	free(workers);
	pthread_barrier_destroy(&go);
	return 0;
}
