/* Acting on the memory limit and on memory-pressure signals (limit.c says
 * what the limit is and what it asks; this file adds up what libarena holds
 * and purges).
 *
 * The signal.  Where the background thread runs (background.c), it waits on
 * the first of these it can open, beside its own wake-ups:
 *   1. $MEMORY_PRESSURE_WATCH (systemd's protocol): a PSI file, a FIFO or
 *      a socket, with $MEMORY_PRESSURE_WRITE's base64 bytes written to it
 *      first ("/dev/null": no signal);
 *   2. the cgroup's v2 memory.pressure, as a PSI trigger ("some 150000
 *      1000000": 150 ms of stall in a second; often read-only in
 *      containers);
 *   3. v2 memory.events (POLLPRI when any count changes; a signal when
 *      high or max grew);
 *   4. v1 memory.pressure_level at "low" through cgroup.event_control (an
 *      eventfd).
 * It then waits in ppoll on that descriptor and an eventfd its wake-ups
 * write, instead of on its futex; where none opens (or eventfd or ppoll
 * fails, or sim_no_poll), it keeps the futex and reads the cgroup's
 * counters at its passes.  A signal purges every free dirty page at once
 * and has every thread cache give back what it holds unused at its next
 * slow path (limit.c, purge.c).  With no pressure, nothing wakes.
 *
 * Without the background thread, the slow paths (a malloc miss) read the
 * cgroup's counters at most once a second (limit.c, limit_events_grew).
 *
 * The limit.  Every 10 ms of slow paths, and from half the limit at each
 * step of growth (STEP_DIV), a slow path adds up what libarena holds
 * resident and tells limit.c; a step short of the limit the oldest dirty
 * chunks, or if they are not enough everything free, are purged before
 * the allocation goes on taking memory. */
#include "limit.h"

#include <fcntl.h>

static atomic_int wake_fd = -1;  /* the thread's eventfd: its pokes       */
static int sig_fd = -1;          /* the signal's descriptor               */
static int v1_level_fd = -1;     /* v1: memory.pressure_level, kept open  */
static short sig_events;
static atomic_uchar kind;        /* enum pressure_kind                    */
static uint64_t events_count;    /* memory.events' high + max             */
static atomic_ulong checked_ms;  /* the last slow path's look             */
static atomic_ulong counted_ms;  /* the last look at the counters         */
atomic_ulong pressure_last_us;

#define CHECK_EVERY_MS 10

/* Bytes libarena holds resident: pages in use (thread caches' blocks
 * included) and arena chunks' headers, huge blocks' bytes (huge), and
 * free dirty and lazy pages; *dirty: the dirty ones. */
static size_t held_with(size_t huge, size_t *dirty)
{
	size_t active = 0, d = 0, headers = 0;
	for (unsigned i = 0, nused = arena_count(); i < nused; i++) {
		active += __atomic_load_n(&arenas[i].active_pages, __ATOMIC_RELAXED);
		headers += __atomic_load_n(&arenas[i].nchunks, __ATOMIC_RELAXED) * CHUNK_HDR_BYTES;
		d += __atomic_load_n(&arenas[i].dirty_pages, __ATOMIC_RELAXED);
	}
	*dirty = (d << PAGE_SHIFT) + chunk_dirty_bytes();
	return (active << PAGE_SHIFT) + headers + huge + *dirty;
}

/* What counts against the limit: huge blocks by their whole chunks, as
 * the dirty cap counts them (arena.c: its room, limit_dirty_room, is
 * this figure's estimate less the active bytes it is given, so both
 * count alike; the rest of a last chunk is not resident, which the
 * cgroup's usage tells limit.c). */
static size_t held(size_t *dirty)
{
	return held_with(chunk_huge_bytes(), dirty);
}

size_t pressure_resident(void)
{
	size_t dirty;
	return held_with(atomic_load_explicit(&huge_bytes, memory_order_relaxed), &dirty);
}

/* Everything free purged now: for a pressure signal. */
static void purge_everything(bool signal, uint64_t t0_us)
{
	size_t bytes = remote_purge_all() + chunk_purge_all();
	atomic_fetch_add_explicit(signal ? &pressure_purged : &limit_purged, bytes, memory_order_relaxed);
	limit_note_pressure(os_now_ms(), signal);
	if (signal)
		atomic_store_explicit(&pressure_last_us, os_now_us() - t0_us, memory_order_relaxed);
	size_t dirty;
	limit_note_resident(held(&dirty));
}

/* This thread's cached blocks and every arena's empty slabs go back
 * (their pages turn dirty, for what the program takes next): a phase of
 * other sizes never takes them.  bench/cgroup_limit's phases of large
 * and huge blocks ran beside 15 MiB of the 1-16 KiB phase's slabs, and
 * no cache of theirs saw a slow path to give back at. */
static void give_back_caches(void)
{
	if (tc.state == TC_ACTIVE)
		for (unsigned c = 0; c < NCACHED; c++)
			tcache_flush_bin(&tc, c, 0);
	for (unsigned i = 0, nused = arena_count(); i < nused; i++) {
		arena_lock(&arenas[i]);
		slab_release_all(&arenas[i]);
		arena_unlock(&arenas[i]);
	}
}

/* Past the limit less a step: the caches give back, the oldest dirty free
 * chunks are purged until over bytes went, and if that was not enough,
 * everything free. */
static void purge_for_limit(size_t over)
{
	give_back_caches();
	size_t before = chunk_dirty_bytes();
	chunk_trim_dirty(before > over ? before - over : 0);
	size_t after = chunk_dirty_bytes(), done = before > after ? before - after : 0;
	if (done < over) {
		purge_everything(false, 0);
	} else {
		atomic_fetch_add_explicit(&limit_purged, done, memory_order_relaxed);
		size_t dirty;
		limit_note_resident(held(&dirty));
	}
}

/* How much the footprint may grow between two looks near the limit: a
 * 32nd of it (8 MiB of 256).  From half the limit a slow path looks
 * whenever libarena's own figure grew by a step since the last look, not
 * only every CHECK_EVERY_MS: bench/cgroup_limit took fresh pages at about
 * 0.45 MiB a millisecond, and the coarse clock and the spacing of slow
 * paths put looks 10-40 ms apart.  The limit's purge starts a step short
 * of it, the growth the next look may find. */
#define STEP_DIV 32

static atomic_flag checking = ATOMIC_FLAG_INIT;
static atomic_size_t checked_own;

/* A malloc miss, or a pass of the background thread. */
void pressure_slow_path(void)
{
	if (!limit_watching())
		return;
	size_t dirty, lim = limit_bytes(), step = lim / STEP_DIV;
	uint64_t now = os_now_ms();
	if (now - atomic_load_explicit(&checked_ms, memory_order_relaxed) < CHECK_EVERY_MS &&
	    (!lim || limit_resident() < lim / 2 ||
	     held(&dirty) < atomic_load_explicit(&checked_own, memory_order_relaxed) + step))
		return;
	if (atomic_flag_test_and_set(&checking))
		return;
	atomic_store_explicit(&checked_ms, now, memory_order_relaxed);
	limit_reread(now);
	lim = limit_bytes(), step = lim / STEP_DIV;
	uint8_t k = atomic_load_explicit(&kind, memory_order_relaxed);
	/* no descriptor watched: the counters, at most once a second */
	if ((k == PRESSURE_NONE || k == PRESSURE_COUNTERS) &&
	    now - atomic_load_explicit(&counted_ms, memory_order_relaxed) >= LIMIT_REREAD_MS &&
	    (atomic_store_explicit(&counted_ms, now, memory_order_relaxed), limit_events_grew())) {
		purge_everything(true, os_now_us());
	} else {
		size_t own = held(&dirty);
		limit_read_usage(now, own);
		limit_note_resident(own);
		size_t est = limit_resident();
		if (lim && est + step > lim && dirty) /* room for two steps after it */
			purge_for_limit(est + 2 * step - lim);
	}
	atomic_store_explicit(&checked_own, held(&dirty), memory_order_relaxed);
	atomic_flag_clear(&checking);
}

/* systemd's MEMORY_PRESSURE_WRITE: base64, decoded into out; its length. */
static size_t base64(const char *s, unsigned char *out, size_t size)
{
	size_t n = 0;
	unsigned bits = 0, acc = 0;
	for (; *s && *s != '='; s++) {
		char c = *s;
		int v = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26
		      : c >= '0' && c <= '9' ? c - '0' + 52 : c == '+' ? 62 : c == '/' ? 63 : -1;
		if (v < 0)
			continue;
		acc = (acc << 6) | (unsigned)v;
		bits += 6;
		if (bits >= 8 && n < size) {
			bits -= 8;
			out[n++] = (unsigned char)(acc >> bits);
		}
	}
	return n;
}

static bool open_watch(void)
{
	char path[PROF_PATH_MAX], wr[512];
	if (!os_getenv("MEMORY_PRESSURE_WATCH", path, sizeof(path)) || !path[0])
		return false;
	if (!__builtin_strcmp(path, "/dev/null"))
		return true; /* the service manager says: no signal */
	int fd = os_open_watch(path, &sig_events, true);
	if (fd < 0)
		return false;
	if (os_getenv("MEMORY_PRESSURE_WRITE", wr, sizeof(wr))) {
		unsigned char data[384];
		size_t n = base64(wr, data, sizeof(data));
		if (n && !os_write(fd, data, n) && !(sig_events & POLLIN)) { /* a FIFO: read-only */
			os_close(fd);
			return false;
		}
	}
	sig_fd = fd;
	return true;
}

static bool cgroup_file(char *out, size_t size, const char *dir, const char *name)
{
	size_t n = 0;
	for (const char *s = dir; *s; s++)
		if (n + 1 < size)
			out[n++] = *s;
	for (const char *s = name; *s; s++)
		if (n + 1 < size)
			out[n++] = *s;
	out[n] = 0;
	return n + 1 < size;
}

/* The high and max counts of memory.events at fd. */
static uint64_t events_of(int fd)
{
	char buf[256];
	if (os_pread0(fd, buf, sizeof(buf)) <= 0)
		return 0;
	return limit_events_sum(buf, false);
}

static uint8_t open_cgroup(void)
{
	const char *dir;
	char path[PROF_PATH_MAX + 256], line[64];
	unsigned version = limit_cgroup(&dir);
	if (version == 2) {
		static const char trigger[] = "some 150000 1000000";
		if (cgroup_file(path, sizeof(path), dir, "/memory.pressure")) {
			int fd = os_open_watch(path, &sig_events, true);
			if (fd >= 0 && os_write(fd, trigger, sizeof(trigger))) {
				sig_fd = fd;
				return PRESSURE_PSI;
			}
			if (fd >= 0)
				os_close(fd);
		}
		if (cgroup_file(path, sizeof(path), dir, "/memory.events")) {
			int fd = os_open(path, O_RDONLY | O_NONBLOCK);
			if (fd >= 0) {
				sig_fd = fd, sig_events = POLLPRI;
				events_count = events_of(fd);
				return PRESSURE_EVENTS;
			}
		}
	} else if (version == 1) {
		int efd = os_eventfd();
		int lfd = cgroup_file(path, sizeof(path), dir, "/memory.pressure_level") ? os_open(path, O_RDONLY) : -1;
		int cfd = cgroup_file(path, sizeof(path), dir, "/cgroup.event_control") ? os_open(path, O_WRONLY) : -1;
		if (efd >= 0 && lfd >= 0 && cfd >= 0) {
			/* "<eventfd> <pressure_level fd> low" */
			size_t n = 0;
			int nums[2] = { efd, lfd };
			for (unsigned i = 0; i < 2; i++) {
				char d[12];
				unsigned k = 0, v = (unsigned)nums[i];
				do
					d[k++] = (char)('0' + v % 10);
				while ((v /= 10));
				while (k)
					line[n++] = d[--k];
				line[n++] = ' ';
			}
			for (const char *s = "low"; *s; s++)
				line[n++] = *s;
			line[n] = 0;
			if (os_write(cfd, line, n + 1)) {
				os_close(cfd);
				sig_fd = efd, sig_events = POLLIN, v1_level_fd = lfd;
				return PRESSURE_V1;
			}
		}
		if (efd >= 0)
			os_close(efd);
		if (lfd >= 0)
			os_close(lfd);
		if (cfd >= 0)
			os_close(cfd);
	}
	return PRESSURE_NONE;
}

/* In the background thread, before its first wait: the descriptors. */
void pressure_open(void)
{
	uint8_t k = PRESSURE_NONE;
	int efd = cfg->sim_no_poll ? -1 : os_eventfd();
	if (efd >= 0) {
		if (open_watch())
			k = sig_fd >= 0 ? PRESSURE_WATCH : PRESSURE_NONE;
		else
			k = open_cgroup();
		if (sig_fd < 0) {
			os_close(efd);
			efd = -1;
		}
	}
	if (k == PRESSURE_NONE && limit_watching())
		k = PRESSURE_COUNTERS;
	atomic_store_explicit(&kind, k, memory_order_relaxed);
	atomic_store(&wake_fd, efd); /* before the thread's first look at its word */
}

void pressure_close(void)
{
	int efd = atomic_exchange(&wake_fd, -1);
	if (efd >= 0)
		os_close(efd);
	if (sig_fd >= 0)
		os_close(sig_fd);
	if (v1_level_fd >= 0)
		os_close(v1_level_fd);
	sig_fd = v1_level_fd = -1;
	atomic_store_explicit(&kind, PRESSURE_NONE, memory_order_relaxed);
}

/* The child of fork shares the parent's descriptors: it forgets them (its
 * own background thread opens its own). */
void pressure_after_fork_child(void)
{
	pressure_close();
}

/* A signal came (the descriptor is ready): is it one, and if so, purge. */
static void on_signal(uint64_t t0_us)
{
	uint8_t k = atomic_load_explicit(&kind, memory_order_relaxed);
	if (k == PRESSURE_EVENTS) {
		uint64_t n = events_of(sig_fd);
		bool grew = n > events_count;
		events_count = n;
		if (!grew)
			return;
	} else if (sig_events & POLLIN) {
		os_drain(sig_fd);
	}
	purge_everything(true, t0_us);
}

#define COUNTERS_LOOK_MS 250

/* The background thread's wait: while *word holds expect, for at most ms
 * (UINT64_MAX: no limit), or until a signal (purged before returning). */
void pressure_wait(atomic_uint *word, unsigned expect, uint64_t ms)
{
	int efd = atomic_load(&wake_fd);
	if (efd < 0) {
		/* the counters are all it hears: a look at least this often while
		 * memory waits to be purged (nothing waits: no wake-up at all) */
		if (pressure_kind() == PRESSURE_COUNTERS && ms != UINT64_MAX && ms > COUNTERS_LOOK_MS)
			ms = COUNTERS_LOOK_MS;
		os_wait(word, expect, ms);
		return;
	}
	if (atomic_load(word) != expect)
		return;
	struct pollfd fds[2] = { { .fd = efd, .events = POLLIN }, { .fd = sig_fd, .events = sig_events } };
	int r = os_poll(fds, 2, ms);
	if (r < 0 && r != -EINTR) { /* no ppoll after all: the futex, and the counters */
		pressure_close();
		atomic_store_explicit(&kind, PRESSURE_COUNTERS, memory_order_relaxed);
		return;
	}
	if (r <= 0)
		return;
	if (fds[0].revents)
		os_drain(efd);
	if ((fds[1].revents & POLLHUP) && !(fds[1].revents & POLLIN)) {
		/* the other end is gone (a FIFO's writers, a socket's peer): it
		 * would make every poll return at once (0.64 s of CPU in 2 s
		 * idle after a FIFO's writer closed); the counters instead */
		os_close(sig_fd);
		sig_fd = -1;
		atomic_store_explicit(&kind, limit_watching() ? PRESSURE_COUNTERS : PRESSURE_NONE,
				      memory_order_relaxed);
		return;
	}
	if (fds[1].revents & (sig_events | POLLERR))
		on_signal(os_now_us());
}

/* Wakes the background thread waiting on word (pressure_wait). */
void pressure_wake(atomic_uint *word)
{
	os_wake(word);
	int efd = atomic_load(&wake_fd);
	if (efd >= 0)
		os_event_signal(efd);
}

uint8_t pressure_kind(void)
{
	return atomic_load_explicit(&kind, memory_order_relaxed);
}

const char *pressure_kind_name(void)
{
	static const char *const names[] = { "none", "MEMORY_PRESSURE_WATCH", "memory.pressure",
					     "memory.events", "memory.pressure_level", "counters" };
	uint8_t k = pressure_kind();
	return k < sizeof(names) / sizeof(names[0]) ? names[k] : "?";
}
