/* The soft memory limit (ARENA_CONF=memory_limit:auto|off|BYTES|N%):
 * which limit is in force, where it came from, and what it asks of the
 * purging policy.  Decisions only: purge.c shortens decay and caps dirty
 * memory by what this file says, pressure.c purges.
 *
 * Which limit.  auto (the default) reads the process's memory cgroup:
 * /proc/self/cgroup names it, /proc/self/mountinfo where its hierarchy is
 * mounted; the limit is cgroup v2's memory.high, else memory.max, else v1's
 * memory.soft_limit_in_bytes, else memory.limit_in_bytes, the least of the
 * cgroup's and its ancestors' up to the mount's root.  "max" and v1's
 * "unlimited" (a number past 2^60) are no limit.  N% is of that limit, or
 * of RAM (MemTotal) where there is none; BYTES is a figure of its own.  The
 * files are read at start-up and again at most once a second (limit_reread,
 * from slow paths and the background thread's passes): limits change at
 * run time.
 *
 * What it asks.  What libarena holds resident (pressure.c adds it up:
 * pages in use, the thread caches' included, and dirty free pages), or,
 * against a cgroup's limit, the cgroup's usage less its inactive page
 * cache where that is more (limit_read_usage), is compared with the
 * limit: from LIMIT_ZONE_256 / 256 of it (80%) decay shortens in
 * proportion, to an eighth at the limit, and no huge pages are advised;
 * dirty memory is capped at what is left of the limit after the rest
 * (purge.c, the dirty cap); a step short of the limit dirty memory is
 * purged at the next slow path before more is taken (pressure.c).  A
 * soft limit, as Go's GOMEMLIMIT: no allocation fails for it. */
#include "limit.h"

#include <fcntl.h>

START_UP static atomic_size_t limit;       /* bytes, 0: none       */
START_UP static atomic_uchar source;       /* enum limit_source    */
static atomic_size_t resident;             /* the last figure      */
static atomic_uint level;                  /* 0..256               */
static atomic_ulong pressure_ms;           /* the last signal      */
static atomic_ulong reread_ms;             /* the last reading     */
static atomic_flag reading = ATOMIC_FLAG_INIT;
atomic_ulong limit_purged, pressure_purged, pressure_signals;

/* The process's memory cgroup: its version (0: none found) and directory. */
START_UP static unsigned cg_version;
static char cg_dir[PROF_PATH_MAX + 256];
static size_t cg_root_len; /* the mount's root: no ancestor above it */
static atomic_ulong events_seen; /* memory.events' high + max, or failcnt */

/* The cgroup's own figure, where the limit is a cgroup's (by_cgroup): the
 * directory the limit came from, its reclaimable page cache, and its usage
 * less that less libarena's own figure at the last reading (other). */
static bool by_cgroup;
static char usage_dir[sizeof(cg_dir)];
static atomic_size_t inactive_file;
static atomic_long other, other_cur, other_prev;
static atomic_ulong usage_ms;
static atomic_ulong zone_ms; /* the last look in the zone */

#define UNLIMITED ((uint64_t)1 << 60)

/* root + a + b + c into out; false if it does not fit. */
static bool join(char *out, size_t size, const char *root, const char *a, const char *b, const char *c)
{
	const char *parts[4] = { root, a, b, c };
	size_t n = 0;
	for (unsigned i = 0; i < 4; i++)
		for (const char *s = parts[i]; s && *s; s++) {
			if (n + 1 >= size)
				return false;
			out[n++] = *s;
		}
	out[n] = 0;
	return true;
}

/* The path of a cgroup or /proc file, under sim_cgroup_root in tests. */
static bool path_of(char *out, size_t size, const char *a, const char *b, const char *c)
{
	return join(out, size, cfg->sim_cgroup_root, a, b, c);
}

/* A file of a directory found already (cg_dir: the root is in it). */
static bool file_of(char *out, size_t size, const char *dir, const char *a, const char *b)
{
	return join(out, size, "", dir, a, b);
}

/* Calls line(text, arg) for each line of the file at path, cut to 1 KiB;
 * false if it cannot be opened. */
static bool each_line(const char *path, void (*line)(char *text, void *arg), void *arg)
{
	int fd = os_open(path, O_RDONLY);
	if (fd < 0)
		return false;
	char buf[1024];
	size_t len = 0;
	bool cut = false;
	for (long n; (n = os_read(fd, buf + len, sizeof(buf) - 1 - len)) > 0;) {
		len += (size_t)n;
		size_t start = 0;
		for (size_t i = 0; i < len; i++) {
			if (buf[i] != '\n')
				continue;
			buf[i] = 0;
			if (!cut)
				line(buf + start, arg);
			cut = false;
			start = i + 1;
		}
		if (start == 0 && len == sizeof(buf) - 1) /* a line longer than buf */
			cut = true, start = len;
		len -= start;
		for (size_t i = 0; i < len; i++)
			buf[i] = buf[start + i];
	}
	os_close(fd);
	return true;
}

static bool starts(const char *s, const char *prefix)
{
	while (*prefix)
		if (*s++ != *prefix++)
			return false;
	return true;
}

static size_t slen(const char *s)
{
	size_t n = 0;
	while (s[n])
		n++;
	return n;
}

static void scopy(char *out, size_t size, const char *s, size_t n)
{
	n = n < size - 1 ? n : size - 1;
	for (size_t i = 0; i < n; i++)
		out[i] = s[i];
	out[n] = 0;
}

/* /proc/self/cgroup: the v2 path ("0::/p") and the v1 memory path. */
struct cg_paths {
	char v2[256], v1[256];
	bool has_v2, has_v1;
};

static void cgroup_line(char *text, void *arg)
{
	struct cg_paths *p = arg;
	char *a = text;
	while (*a && *a != ':')
		a++;
	if (!*a)
		return;
	char *ctl = ++a;
	while (*a && *a != ':')
		a++;
	if (!*a)
		return;
	*a++ = 0;
	if (!*ctl && text[0] == '0') {
		scopy(p->v2, sizeof(p->v2), a, slen(a));
		p->has_v2 = true;
		return;
	}
	for (char *w = ctl; *w;) { /* a comma-separated list of controllers */
		char *e = w;
		while (*e && *e != ',')
			e++;
		if (e - w == 6 && starts(w, "memory")) {
			scopy(p->v1, sizeof(p->v1), a, slen(a));
			p->has_v1 = true;
		}
		w = *e ? e + 1 : e;
	}
}

/* /proc/self/mountinfo: where cgroup2 and the v1 memory hierarchy are
 * mounted, and their roots. */
struct cg_mounts {
	char v2_point[256], v2_root[256], v1_point[256], v1_root[256];
	bool has_v2, has_v1;
};

/* The n-th space-separated field of line (0-based), NUL-terminated in place
 * is not possible for several fields: its start and length. */
static const char *field(const char *line, unsigned n, size_t *len)
{
	const char *s = line;
	for (unsigned i = 0; i < n; i++) {
		while (*s && *s != ' ')
			s++;
		if (!*s)
			return NULL;
		s++;
	}
	const char *e = s;
	while (*e && *e != ' ')
		e++;
	*len = (size_t)(e - s);
	return s;
}

static void mount_line(char *text, void *arg)
{
	struct cg_mounts *m = arg;
	const char *dash = text;
	while (*dash && !(dash[0] == ' ' && dash[1] == '-' && dash[2] == ' '))
		dash++;
	if (!*dash)
		return;
	size_t tlen = 0, rlen = 0, plen = 0, olen = 0;
	const char *type = field(dash + 3, 0, &tlen), *root = field(text, 3, &rlen);
	const char *point = field(text, 4, &plen), *opts = field(dash + 3, 2, &olen);
	if (!type || !root || !point)
		return;
	if (tlen == 7 && starts(type, "cgroup2") && !m->has_v2) {
		scopy(m->v2_point, sizeof(m->v2_point), point, plen);
		scopy(m->v2_root, sizeof(m->v2_root), root, rlen);
		m->has_v2 = true;
	} else if (tlen == 6 && starts(type, "cgroup") && opts && !m->has_v1) {
		for (size_t i = 0; i + 6 <= olen; i++)
			if ((i == 0 || opts[i - 1] == ',') && starts(opts + i, "memory") &&
			    (i + 6 == olen || opts[i + 6] == ',')) {
				scopy(m->v1_point, sizeof(m->v1_point), point, plen);
				scopy(m->v1_root, sizeof(m->v1_root), root, rlen);
				m->has_v1 = true;
			}
	}
}

/* dir = R + point + (path less root), its mount's root's length in *root_len. */
static bool join_dir(const char *point, const char *root, const char *path)
{
	size_t r = slen(root);
	if (r > 1 && starts(path, root))
		path += r;
	else if (r > 1) /* the cgroup is outside what is mounted here */
		return false;
	if (!path_of(cg_dir, sizeof(cg_dir), point, path[0] == '/' && path[1] == 0 ? "" : path, ""))
		return false;
	cg_root_len = slen(cfg->sim_cgroup_root) + slen(point);
	return true;
}

/* Finds the process's memory cgroup: cg_version and cg_dir. */
static void find_cgroup(void)
{
	char path[PROF_PATH_MAX + 32];
	struct cg_paths p = { 0 };
	struct cg_mounts m = { 0 };
	cg_version = 0;
	if (!path_of(path, sizeof(path), "/proc/self/cgroup", "", "") ||
	    !each_line(path, cgroup_line, &p))
		return;
	if (!path_of(path, sizeof(path), "/proc/self/mountinfo", "", "") ||
	    !each_line(path, mount_line, &m))
		return;
	char probe[sizeof(cg_dir) + 32], buf[32];
	if (p.has_v2 && m.has_v2 && join_dir(m.v2_point, m.v2_root, p.v2) &&
	    file_of(probe, sizeof(probe), cg_dir, "/memory.max", "") &&
	    os_read_file(probe, buf, sizeof(buf)) != -ENOENT) {
		/* the root cgroup has no memory.max: look at memory.current */
		cg_version = 2;
		return;
	}
	if (p.has_v2 && m.has_v2 && join_dir(m.v2_point, m.v2_root, p.v2) &&
	    file_of(probe, sizeof(probe), cg_dir, "/memory.current", "") &&
	    os_read_file(probe, buf, sizeof(buf)) != -ENOENT) {
		cg_version = 2;
		return;
	}
	if (p.has_v1 && m.has_v1 && join_dir(m.v1_point, m.v1_root, p.v1))
		cg_version = 1;
}

/* A cgroup file's figure: bytes; UNLIMITED for "max" or v1's unlimited;
 * 0 where the file is missing.  A file that cannot be read or holds no
 * figure is said once (loud), and counts as missing. */
static uint64_t read_limit(const char *dir, const char *name, bool loud)
{
	char path[sizeof(cg_dir) + 48], buf[64];
	if (!file_of(path, sizeof(path), dir, "/", name))
		return 0;
	long n = os_read_file(path, buf, sizeof(buf));
	if (n == -ENOENT)
		return 0;
	if (n < 0) {
		if (loud)
			out_printf("libarena: memory_limit: cannot read %s (errno %ld); not taken as a limit\n",
				   path, -n);
		return 0;
	}
	if (starts(buf, "max"))
		return UNLIMITED;
	uint64_t v = 0;
	const char *s = buf;
	for (; *s >= '0' && *s <= '9'; s++)
		v = v > UNLIMITED ? v : v * 10 + (uint64_t)(*s - '0');
	if (s == buf || (*s && *s != '\n')) {
		if (loud)
			out_printf("libarena: memory_limit: %s holds no size ('%.16s'); not taken as a limit\n",
				   path, buf);
		return 0;
	}
	return v >= UNLIMITED ? UNLIMITED : v;
}

/* The least figure of file name in the cgroup and its ancestors up to the
 * mount's root; 0 where none holds one (missing everywhere), UNLIMITED
 * where all say unlimited; the directory it came from in from. */
static uint64_t least_up(const char *name, bool loud, char *from)
{
	char dir[sizeof(cg_dir)];
	scopy(dir, sizeof(dir), cg_dir, slen(cg_dir));
	uint64_t least = 0;
	size_t from_len = 0; /* an ancestor's directory is a prefix of cg_dir */
	for (unsigned depth = 0; depth < 16; depth++) {
		uint64_t v = read_limit(dir, name, loud);
		size_t n = slen(dir);
		if (v && (!least || v < least))
			least = v, from_len = n;
		if (n <= cg_root_len)
			break;
		while (n > cg_root_len && dir[n - 1] != '/')
			n--;
		dir[n > cg_root_len ? n - 1 : cg_root_len] = 0;
	}
	if (least)
		scopy(from, sizeof(cg_dir), cg_dir, from_len);
	return least;
}

/* The cgroup's limit and its source, or LIMIT_NONE. */
static uint8_t cgroup_limit(uint64_t *bytes, bool loud, char *from)
{
	static const struct {
		const char *file;
		uint8_t version, source;
	} files[] = {
		{ "memory.high", 2, LIMIT_V2_HIGH },
		{ "memory.max", 2, LIMIT_V2_MAX },
		{ "memory.soft_limit_in_bytes", 1, LIMIT_V1_SOFT },
		{ "memory.limit_in_bytes", 1, LIMIT_V1_HARD },
	};
	for (unsigned i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		if (files[i].version != cg_version)
			continue;
		uint64_t v = least_up(files[i].file, loud, from);
		if (v && v < UNLIMITED) {
			*bytes = v;
			return files[i].source;
		}
	}
	return LIMIT_NONE;
}

static uint64_t ram_bytes(void)
{
	char buf[256];
	if (os_read_file("/proc/meminfo", buf, sizeof(buf)) <= 0 || !starts(buf, "MemTotal:"))
		return 0;
	uint64_t kb = 0;
	for (const char *s = buf + 9; *s; s++)
		if (*s >= '0' && *s <= '9')
			kb = kb * 10 + (uint64_t)(*s - '0');
		else if (kb)
			break;
	return kb << 10;
}

/* memory.stat's inactive file pages (v1: total_, the hierarchy's). */
static void stat_line(char *text, void *arg)
{
	size_t *bytes = arg;
	const char *key = cg_version == 2 ? "inactive_file " : "total_inactive_file ";
	if (!starts(text, key))
		return;
	size_t v = 0;
	for (const char *s = text + slen(key); *s >= '0' && *s <= '9'; s++)
		v = v * 10 + (size_t)(*s - '0');
	*bytes = v;
}

static void read_inactive_file(void)
{
	char path[sizeof(usage_dir) + 16];
	size_t bytes = 0;
	if (file_of(path, sizeof(path), usage_dir, "/memory.stat", ""))
		each_line(path, stat_line, &bytes);
	atomic_store_explicit(&inactive_file, bytes, memory_order_relaxed);
}

/* Reads the limit in force (loud: at start-up, bad files are said). */
static void read_all(bool loud)
{
	uint64_t bytes = 0;
	uint8_t src = LIMIT_NONE;
	if (cfg->memory_limit_kind == MEMLIMIT_BYTES) {
		bytes = cfg->memory_limit, src = LIMIT_CONF;
	} else if (cfg->memory_limit_kind != MEMLIMIT_OFF) {
		src = cg_version ? cgroup_limit(&bytes, loud, usage_dir) : LIMIT_NONE;
		if (cfg->memory_limit_kind == MEMLIMIT_PERCENT) {
			if (src == LIMIT_NONE)
				bytes = ram_bytes(), src = bytes ? LIMIT_RAM : LIMIT_NONE;
			bytes = bytes / 100 * cfg->memory_limit + bytes % 100 * cfg->memory_limit / 100;
		}
	}
	if (src != LIMIT_NONE && bytes < LIMIT_MIN_BYTES) {
		if (loud)
			out_printf("libarena: memory_limit: %s gives %lu bytes, under 1 MiB; no limit\n",
				   limit_source_name(src), (unsigned long)bytes);
		bytes = 0, src = LIMIT_NONE;
	}
	atomic_store_explicit(&limit, src == LIMIT_NONE ? 0 : (size_t)bytes, memory_order_relaxed);
	atomic_store_explicit(&source, src, memory_order_relaxed);
	by_cgroup = src >= LIMIT_V2_HIGH && src <= LIMIT_V1_HARD;
	if (by_cgroup)
		read_inactive_file();
	else
		atomic_store_explicit(&other, 0, memory_order_relaxed);
}

/* At initialisation: the cgroup, the limit, the events' count so far. */
void limit_init(void)
{
	if (cfg->memory_limit_kind == MEMLIMIT_AUTO || cfg->memory_limit_kind == MEMLIMIT_PERCENT)
		find_cgroup();
	read_all(true);
	atomic_store_explicit(&reread_ms, os_now_ms(), memory_order_relaxed);
	limit_events_grew();
}

/* Whether there is anything to read again or to hold resident memory to. */
bool limit_watching(void)
{
	return cg_version != 0 || atomic_load_explicit(&limit, memory_order_relaxed) != 0;
}

/* The cgroup's files read again, if a second went by since the last time
 * (one thread reads; the others go on). */
void limit_reread(uint64_t now)
{
	if (!cg_version || now - atomic_load_explicit(&reread_ms, memory_order_relaxed) < LIMIT_REREAD_MS ||
	    atomic_flag_test_and_set(&reading))
		return;
	atomic_store_explicit(&reread_ms, now, memory_order_relaxed);
	read_all(false);
	atomic_flag_clear(&reading);
}

size_t limit_bytes(void)
{
	return atomic_load_explicit(&limit, memory_order_relaxed);
}

uint8_t limit_source(void)
{
	return atomic_load_explicit(&source, memory_order_relaxed);
}

const char *limit_source_name(uint8_t src)
{
	static const char *const names[] = {
		"none", "ARENA_CONF", "cgroup v2 memory.high", "cgroup v2 memory.max",
		"cgroup v1 memory.soft_limit_in_bytes", "cgroup v1 memory.limit_in_bytes", "RAM",
	};
	return src < sizeof(names) / sizeof(names[0]) ? names[src] : "?";
}

unsigned limit_cgroup(const char **dir)
{
	*dir = cg_dir;
	return cg_version;
}

/* What counts against the limit, libarena's own figure being own: the
 * cgroup's usage as last read, moved by what own moved since. */
static size_t estimate(size_t own)
{
	long o = atomic_load_explicit(&other, memory_order_relaxed);
	return o > 0 ? own + (size_t)o : (size_t)-o < own ? own - (size_t)-o : 0;
}

/* The cgroup's usage read again (pressure.c, at most every 10 ms of slow
 * paths), where the limit is a cgroup's: it counts what libarena's own
 * figure does not (the program's other memory, page tables, stacks, the
 * rest of a huge page that has a few pages in use, and the huge pages
 * partly purged that stay charged until reclaim splits them) and does not
 * count what that figure does (pages of blocks never written).  Read
 * every time from half the limit, once a second below.  Less the inactive
 * page cache (memory.stat, once a second): the kernel reclaims it first,
 * as the working set Kubernetes evicts by. */
#define OTHER_WINDOW_MS 100

void limit_read_usage(uint64_t now, size_t own)
{
	size_t lim = limit_bytes();
	uint64_t last = atomic_load_explicit(&usage_ms, memory_order_relaxed);
	if (!lim || !by_cgroup || (estimate(own) < lim / 2 && now - last < LIMIT_REREAD_MS) ||
	    atomic_flag_test_and_set(&reading))
		return;
	uint64_t usage = read_limit(usage_dir, cg_version == 2 ? "memory.current" : "memory.usage_in_bytes",
				    false);
	atomic_flag_clear(&reading);
	if (!usage || usage >= UNLIMITED)
		return;
	size_t cache = atomic_load_explicit(&inactive_file, memory_order_relaxed);
	size_t set = usage > cache ? (size_t)usage - cache : 0;
	long o = set >= own ? (long)(set - own) : -(long)(own - set);
	/* the highest reading of the last OTHER_WINDOW_MS or two: own counts
	 * the block just taken at this slow path before its pages are
	 * written, and the reading after a burst of such blocks is low by as
	 * much */
	if (now / OTHER_WINDOW_MS != atomic_load_explicit(&usage_ms, memory_order_relaxed) / OTHER_WINDOW_MS) {
		atomic_store_explicit(&other_prev, atomic_load_explicit(&other_cur, memory_order_relaxed),
				      memory_order_relaxed);
		atomic_store_explicit(&other_cur, o, memory_order_relaxed);
	} else if (o > atomic_load_explicit(&other_cur, memory_order_relaxed)) {
		atomic_store_explicit(&other_cur, o, memory_order_relaxed);
	}
	long prev = atomic_load_explicit(&other_prev, memory_order_relaxed);
	long cur = atomic_load_explicit(&other_cur, memory_order_relaxed);
	atomic_store_explicit(&other, cur > prev ? cur : prev, memory_order_relaxed);
	atomic_store_explicit(&usage_ms, now, memory_order_relaxed);
}

/* What libarena holds resident now (pressure.c): where what counts
 * against the limit is in the zone. */
void limit_note_resident(size_t own)
{
	size_t lim = limit_bytes(), bytes = estimate(own);
	unsigned lv = 0;
	atomic_store_explicit(&resident, bytes, memory_order_relaxed);
	if (lim) {
		size_t from = lim / 256 * LIMIT_ZONE_256;
		if (bytes >= lim)
			lv = 256;
		else if (bytes > from)
			lv = (unsigned)((bytes - from) * 256 / (lim - from));
	}
	atomic_store_explicit(&level, lv, memory_order_relaxed);
	if (lv)
		atomic_store_explicit(&zone_ms, os_now_ms(), memory_order_relaxed);
}

/* Whether huge pages may be advised (thp.c): not from half the limit, nor
 * within LIMIT_THP_QUIET_MS of the zone.  A huge page partly purged stays
 * charged to the cgroup until reclaim splits it, and a huge page fault that
 * finds the cgroup near its limit reclaims, fails (memory.failcnt) and
 * falls back: bench/cgroup_limit's phases, each begun well under the
 * limit, formed 100 MiB of huge pages; it hit the limit 322-630 times a
 * run, none under thp:never, 36-150 with no advice in the zone, 41-60 with
 * none for 5 s after it too.  Its phases last 0.5-3 s.  Advice up to the
 * zone formed 190 MiB of huge pages in its first phase: with that, or
 * without purge.c's purge_whole_only, 3 runs of 6 hit the limit (16-71
 * times); with both, none of 6. */
#define LIMIT_THP_QUIET_MS 5000

bool limit_thp_ok(void)
{
	uint64_t z = atomic_load_explicit(&zone_ms, memory_order_relaxed);
	size_t lim = limit_bytes();
	return !limit_level() && (!lim || limit_resident() < lim / 2) &&
	       (!z || os_now_ms() - z >= LIMIT_THP_QUIET_MS);
}

size_t limit_resident(void)
{
	return atomic_load_explicit(&resident, memory_order_relaxed);
}

unsigned limit_level(void)
{
	return atomic_load_explicit(&level, memory_order_relaxed);
}

/* decay_ms, shortened by the zone: all of it below, an eighth at the
 * limit (LIMIT_DECAY_MIN_8).  Not to nothing: with decay at 0 every page
 * free purged its chunk's free pages, and bench/cgroup_limit at its 80%
 * live peak made 1.04 M madvise calls and ran at 0.64x its speed without
 * a limit; past the limit the slow paths purge everything anyway
 * (pressure.c), and the dirty cap keeps dirty memory within the limit. */
#define LIMIT_DECAY_MIN_8 1u

long limit_decay_ms(long decay_ms)
{
	unsigned lv = limit_level();
	if (lv == 0 || decay_ms <= 0)
		return decay_ms;
	uint64_t d = (uint64_t)decay_ms, least = d * LIMIT_DECAY_MIN_8 / 8;
	return (long)(least + (d - least) * (256 - lv) / 256);
}

/* Dirty bytes the limit leaves room for beside active bytes in use (and
 * the cgroup's other usage); SIZE_MAX without a limit. */
size_t limit_dirty_room(size_t active)
{
	size_t lim = limit_bytes(), used = estimate(active);
	if (!lim)
		return SIZE_MAX;
	return used < lim ? lim - used : 0;
}

/* What a pass of the dirty cap keeps where the limit's room (cap) is
 * less than what the cap learned the program takes back: the room less
 * the two steps the limit's own purge keeps free (pressure.c), at least
 * half of it.  Half of it at every pass: bench/cgroup_limit's bursts of
 * huge blocks (68 MiB freed and taken again, 58-68 MiB of room) purged
 * and refaulted 37 MiB each. */
size_t limit_cap_keep(size_t cap)
{
	size_t margin = limit_bytes() / 16;
	return cap - margin > cap / 2 && margin < cap ? cap - margin : cap / 2;
}

/* A pressure signal (or the limit passed) at now: thread caches give back at their next slow
 * path (purge.c, purge_cache_gc_due). */
void limit_note_pressure(uint64_t now, bool signal)
{
	if (signal)
		atomic_fetch_add_explicit(&pressure_signals, 1, memory_order_relaxed);
	atomic_store_explicit(&pressure_ms, now ? now : 1, memory_order_relaxed);
}

uint64_t limit_pressure_ms(void)
{
	return atomic_load_explicit(&pressure_ms, memory_order_relaxed);
}

/* Whether the cgroup's own count of limit events grew since the last look:
 * v2 memory.events' high and max, v1 memory.failcnt (the cheap counters a
 * process without the background thread reads at its slow paths). */
/* The sum of the counts in a cgroup counters file's text: of the "high"
 * and "max" lines of v2's memory.events, or of every line (v1's failcnt). */
uint64_t limit_events_sum(const char *text, bool every_line)
{
	uint64_t count = 0;
	for (const char *s = text; *s;) {
		bool take = every_line || starts(s, "high ") || starts(s, "max ");
		while (*s && (*s < '0' || *s > '9') && *s != '\n')
			s++;
		uint64_t v = 0;
		for (; *s >= '0' && *s <= '9'; s++)
			v = v * 10 + (uint64_t)(*s - '0');
		count += take ? v : 0;
		while (*s && *s != '\n')
			s++;
		if (*s)
			s++;
	}
	return count;
}

bool limit_events_grew(void)
{
	char path[sizeof(cg_dir) + 32], buf[256];
	if (!cg_version ||
	    !file_of(path, sizeof(path), cg_dir, cg_version == 2 ? "/memory.events" : "/memory.failcnt", "") ||
	    os_read_file(path, buf, sizeof(buf)) <= 0)
		return false;
	uint64_t count = limit_events_sum(buf, cg_version == 1);
	return atomic_exchange_explicit(&events_seen, count, memory_order_relaxed) < count;
}
