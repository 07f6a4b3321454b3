/*
 * refault.c: what a purged page costs when it is written again, by how long
 * ago it was purged.
 *
 * What it measures.  A region of -m MiB (default 128; MADV_NOHUGEPAGE, or
 * MADV_HUGEPAGE with -H) is written once, one byte per 4 KiB page (fresh).
 * Then, -r times (default 5) for each case, the whole region is given back
 * and written again the same way, in microseconds per 4 KiB page and minor
 * faults per page:
 *   warm:       written again, nothing given back (what a page kept dirty costs);
 *   dontneed+W: MADV_DONTNEED, then a wait of W ms (0, 100, 1000, 3000);
 *   free+0:     MADV_FREE and at once (nothing reclaimed: no fault).
 * Where the kernel reports free memory to its hypervisor (virtio-balloon's
 * free page reporting), the amount reported during each case is printed too
 * (/sys/module/page_reporting/parameters/reported_kib, where that exists).
 *
 * Why.  libarena's purges (decay, the dirty cap) are paid for when the pages
 * are taken again: a fault and a cleared page in the guest, and, on a virtual
 * machine whose host takes freed memory back, a fault on the host's side
 * too.  bench/soak's rate against a build that purges less (docs/soak.md)
 * depends on which of these this machine has.
 *
 * Run: build/bench/probes/refault [-m MiB] [-r rounds] [-H]
 *
 * Found (2026-12-04 11:25 UTC, 2 vCPUs, Linux 6.18 "fc" guest, load 0.0;
 * median of 5): 4 KiB pages: fresh 10.7 us/page, warm 0.010, dontneed+0
 * 9.33 [9.22-9.51], +100 ms 9.24, +1000 ms 9.12, +3000 ms 9.13-9.46 (2-16
 * MiB reported meanwhile): a purged 4 KiB page costs as much as a fresh one
 * whenever it is taken again; MADV_FREE+0 3.8-4.4 us/page with no guest
 * fault.  -H -m 64 (huge pages): fresh 6.3 us per 4 KiB, dontneed+0 0.21,
 * +100 ms 0.23, +1000 ms 0.24 [0.23-4.41], +3000 ms 5.19 [4.75-5.57] with
 * 298 MiB reported to the host: a purged huge page is cheap to take again
 * until the host has taken it back (free page reporting, order 9), then
 * 25x dearer.  Earlier that day (08:45 UTC, the previous machine, load ~19
 * with a soak pair running): dontneed+0 12.45 [10.2-14.1], +3000 ms 13.4
 * us/page.
 */
#define PROBE_NAME "refault"
#include "probe.h"

#include <unistd.h>

#define PAGE 4096u
#define MAX_ROUNDS 64

static const char REPORTED[] = "/sys/module/page_reporting/parameters/reported_kib";

/* KiB the guest has reported free to its host so far, -1 if not known. */
static long reported_kib(void)
{
	FILE *f = fopen(REPORTED, "r");
	long v = -1;
	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

/* Writes one byte of every page; microseconds per page, and minor faults
 * per page through *faults. */
static double write_pages(unsigned char *p, size_t len, double *faults)
{
	long f0 = minor_faults();
	double t0 = now_us();
	for (size_t o = 0; o < len; o += PAGE)
		p[o] = (unsigned char)(o >> 12);
	double us = now_us() - t0;
	*faults = (double)(minor_faults() - f0) / (double)(len / PAGE);
	return us / (double)(len / PAGE);
}

/* One case: advice (0: none) then wait_ms, then the write, -r times. */
static void run_case(const char *name, unsigned char *p, size_t len, int advice, long wait_ms,
		     int rounds)
{
	double us[MAX_ROUNDS], flt[MAX_ROUNDS];
	long rep = 0, r0 = reported_kib();
	for (int i = 0; i < rounds; i++) {
		if (advice)
			advise(p, len, advice, name);
		if (wait_ms)
			sleep_ms(wait_ms);
		us[i] = write_pages(p, len, &flt[i]);
	}
	if (r0 >= 0)
		rep = reported_kib() - r0;
	struct stat3 s = stats(us, rounds), f = stats(flt, rounds);
	printf("%-14s %8.3f us/page [%.3f-%.3f]  faults/page %.2f", name, s.med, s.min, s.max,
	       f.med);
	if (r0 >= 0)
		printf("  reported to the host meanwhile: %ld MiB", rep / 1024);
	printf("\n");
}

int main(int argc, char **argv)
{
	size_t mib = 128;
	int rounds = 5, huge = 0, opt;
	while ((opt = getopt(argc, argv, "m:r:H")) != -1) {
		if (opt == 'm')
			mib = strtoul(optarg, NULL, 10);
		else if (opt == 'r')
			rounds = atoi(optarg);
		else if (opt == 'H')
			huge = 1;
		else {
			fprintf(stderr, "usage: refault [-m MiB] [-r rounds] [-H]\n");
			return 2;
		}
	}
	if (mib == 0 || rounds < 1 || rounds > MAX_ROUNDS) {
		fprintf(stderr, "refault: -m at least 1, -r 1 to %d\n", MAX_ROUNDS);
		return 2;
	}
	size_t len = mib << 20, align = (size_t)2 << 20;
	unsigned char *raw = mmap(NULL, len + align, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED)
		die("mmap");
	unsigned char *p = (unsigned char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
	advise(p, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE, "advice");

	printf("refault: %zu MiB, %s, %d rounds; median [min-max]\n", mib,
	       huge ? "MADV_HUGEPAGE" : "4 KiB pages (MADV_NOHUGEPAGE)", rounds);
	double f;
	double fresh = write_pages(p, len, &f);
	printf("%-14s %8.3f us/page (one pass)  faults/page %.2f\n", "fresh", fresh, f);
	run_case("warm", p, len, 0, 0, rounds);
	static const long waits[] = {0, 100, 1000, 3000};
	for (unsigned i = 0; i < sizeof waits / sizeof *waits; i++) {
		char name[32];
		snprintf(name, sizeof name, "dontneed+%ld", waits[i]);
		run_case(name, p, len, MADV_DONTNEED, waits[i], rounds);
	}
	run_case("free+0", p, len, MADV_FREE, 0, rounds);
	return 0;
}
