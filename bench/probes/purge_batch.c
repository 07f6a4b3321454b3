/*
 * purge_batch.c: what purging a chunk's free runs costs, one madvise per
 * run against one process_madvise for all of them (os.c, os_purge_many).
 *
 * What it measures.  A 2 MiB range (MADV_NOHUGEPAGE) is written whole, then
 * 64 runs of 4 pages, one every 8 pages (a chunk partly in use: free runs
 * between blocks), are purged with MADV_DONTNEED
 *   single: one madvise per run (64 calls);
 *   batch:  one process_madvise(PIDFD_SELF_THREAD_GROUP, 64 ranges).
 * 200 rounds over 30 such ranges, each written again before each purge;
 * the mean time of a purge of the 64 runs, in microseconds.  With -t a
 * second thread spins on the other CPU meanwhile: a TLB flush must then
 * interrupt it, which is what a threaded program pays.
 *
 * Why.  bench/soak made 311k purge calls in 180 s, most of them runs of
 * a chunk purged together at decay; Linux 6.16 flushes the TLB once for
 * a whole process_madvise vector.
 *
 * Run (2026-12-03 21:44 UTC, 2 vCPUs, Linux 6.18): build/bench/probes/purge_batch
 * and build/bench/probes/purge_batch -t.  Found: alone, single 181 us,
 * batch 92 us; with the spinning thread, single 938 us, batch 113 us.
 * Exits 1 with the error where the kernel refuses the batch (before 6.15).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define RANGE (2u << 20)
#define RUNS 64
#define RUN (4 * 4096)
#define NRANGES 30
#define ROUNDS 200
#define PIDFD_SELF_PROCESS (-10001)

static atomic_int stop;

/* Standalone (not probe.h): it uses none of the shared helpers but these. */
static void die(const char *what)
{
	fprintf(stderr, "purge_batch: %s: %s\n", what, strerror(errno));
	exit(1);
}

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void advise(void *p, size_t len, int advice, const char *what)
{
	if (madvise(p, len, advice) != 0)
		die(what);
}

static void *spin(void *arg)
{
	(void)arg;
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		;
	return NULL;
}

static void runs_of(char *base, struct iovec *r)
{
	for (int i = 0; i < RUNS; i++)
		r[i] = (struct iovec){ base + (size_t)i * 2 * RUN, RUN };
}

int main(int argc, char **argv)
{
	int threaded = argc > 1 && !strcmp(argv[1], "-t");
	pthread_t th;
	if (threaded && pthread_create(&th, NULL, spin, NULL) != 0)
		die("pthread_create");
	char *b = mmap(NULL, (size_t)NRANGES * RANGE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b == MAP_FAILED)
		die("mmap");
	advise(b, (size_t)NRANGES * RANGE, MADV_NOHUGEPAGE, "MADV_NOHUGEPAGE");
	struct iovec r[RUNS];
	double single = 0, batch = 0;
	for (int k = 0; k < ROUNDS; k++) {
		char *base = b + (size_t)(k % NRANGES) * RANGE;
		runs_of(base, r);
		memset(base, 1, RANGE);
		double t0 = now_us();
		for (int i = 0; i < RUNS; i++)
			advise(r[i].iov_base, r[i].iov_len, MADV_DONTNEED, "madvise");
		single += now_us() - t0;
		memset(base, 1, RANGE);
		t0 = now_us();
		long rc = syscall(SYS_process_madvise, PIDFD_SELF_PROCESS, r, (size_t)RUNS,
				  MADV_DONTNEED, 0u);
		batch += now_us() - t0;
		if (rc != (long)RUNS * RUN)
			die("process_madvise");
		if (base[0] != 0 || base[RUN] != 1)
			die("the runs read zero and the pages between keep their bytes: not so");
	}
	atomic_store(&stop, 1);
	if (threaded)
		pthread_join(th, NULL);
	printf("%s: %d runs of %d pages: %d madvise %.1f us, one process_madvise %.1f us\n",
	       threaded ? "second thread spinning" : "alone", RUNS, RUN / 4096, RUNS,
	       single / ROUNDS, batch / ROUNDS);
	return 0;
}
