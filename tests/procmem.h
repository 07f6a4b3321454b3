/*
 * What the kernel says about this process's memory (static inline, header
 * only): resident size, page faults, zero checks, key=value facts printed by
 * helper programs, the THP mode, AnonHugePages from /proc/self/smaps.
 */
#ifndef ARENA_TESTS_PROCMEM_H
#define ARENA_TESTS_PROCMEM_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* ---- memory of this process ------------------------------------------------------------------ */

/* Resident set size in bytes (from /proc/self/statm), or 0. */
static inline size_t rss_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long size = 0, res = 0;
	if (!f)
		return 0;
	if (fscanf(f, "%lu %lu", &size, &res) != 2)
		res = 0;
	fclose(f);
	return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

/* ---- page states: faults, zero checks, key=value facts, THP (test_pages, progs/pages) ---------- */

/* Minor page faults of this process so far (getrusage). */
static inline long minor_faults(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return -1;
	return ru.ru_minflt;
}

/* Offset of the first non-zero byte of [p, p + n), or SIZE_MAX when every
 * byte is zero.  Reads words, 64 at a time: fast enough for 1 GiB. */
static inline size_t first_nonzero(const void *p, size_t n)
{
	const uint8_t *b = p;
	size_t i = 0;
	while (i < n && ((uintptr_t)(b + i) & 7))
		if (b[i++])
			return i - 1;
	while (n - i >= 512) {
		const uint64_t *w = (const uint64_t *)(const void *)(b + i);
		uint64_t acc = 0;
		for (int k = 0; k < 64; k++)
			acc |= w[k];
		if (acc)
			break;
		i += 512;
	}
	for (; i < n; i++)
		if (b[i])
			return i;
	return SIZE_MAX;
}

/* The number printed as "key=N" at the start of a line of out (decimal);
 * missing when there is no such line. */
static inline long long kv_num(const char *out, const char *key, long long missing)
{
	size_t kl = strlen(key);
	for (const char *l = out; l && *l;) {
		if (strncmp(l, key, kl) == 0 && l[kl] == '=')
			return strtoll(l + kl + 1, NULL, 10);
		const char *nl = strchr(l, '\n');
		l = nl ? nl + 1 : NULL;
	}
	return missing;
}

/* The word of "key=word" at the start of a line of out, copied into buf
 * (n bytes); "" when missing. */
static inline const char *kv_str(const char *out, const char *key, char *buf, size_t n)
{
	size_t kl = strlen(key);
	buf[0] = '\0';
	for (const char *l = out; l && *l;) {
		if (strncmp(l, key, kl) == 0 && l[kl] == '=') {
			size_t len = strcspn(l + kl + 1, "\n");
			if (len >= n)
				len = n - 1;
			memcpy(buf, l + kl + 1, len);
			buf[len] = '\0';
			break;
		}
		const char *nl = strchr(l, '\n');
		l = nl ? nl + 1 : NULL;
	}
	return buf;
}

/* The system's transparent huge page mode: the bracketed word of
 * /sys/kernel/mm/transparent_hugepage/enabled ("always", "madvise",
 * "never") into buf; -1 when the file is missing or unreadable. */
static inline int thp_sys_mode(char *buf, size_t n)
{
	char line[128];
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	if (!f)
		return -1;
	char *got = fgets(line, sizeof line, f);
	fclose(f);
	char *o = got ? strchr(line, '[') : NULL, *c = o ? strchr(o, ']') : NULL;
	if (!c || (size_t)(c - o - 1) >= n)
		return -1;
	memcpy(buf, o + 1, (size_t)(c - o - 1));
	buf[c - o - 1] = '\0';
	return 0;
}

/* Whether line is a mapping header of /proc/<pid>/smaps ("start-end perms ..."):
 * fills *start and *end. */
static inline int smaps_header(const char *line, unsigned long *start, unsigned long *end)
{
	char *e1, *e2;
	if (!((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f')))
		return 0;
	*start = strtoul(line, &e1, 16);
	if (*e1 != '-')
		return 0;
	*end = strtoul(e1 + 1, &e2, 16);
	return e2 != e1 + 1 && *e2 == ' ';
}

/* Bytes of AnonHugePages of the mappings of this process that overlap
 * [lo, hi), from /proc/self/smaps; SIZE_MAX when it cannot be read. */
static inline size_t smaps_anon_huge_range(uintptr_t lo, uintptr_t hi)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	size_t total = 0;
	int in = 0;
	if (!f)
		return SIZE_MAX;
	while (fgets(line, sizeof line, f)) {
		unsigned long s, e, kb;
		if (smaps_header(line, &s, &e))
			in = s < hi && e > lo;
		else if (in && sscanf(line, "AnonHugePages: %lu kB", &kb) == 1)
			total += (size_t)kb << 10;
	}
	fclose(f);
	return total;
}

/* Resident bytes of this process from /proc/self/smaps_rollup (the Rss
 * line), or 0. */
static inline size_t rss_rollup_bytes(void)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	unsigned long kb = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "Rss: %lu kB", &kb) == 1)
			break;
	fclose(f);
	return (size_t)kb << 10;
}

#endif /* ARENA_TESTS_PROCMEM_H */
