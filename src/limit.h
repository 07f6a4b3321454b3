/* The memory limit (limit.c) and the memory-pressure signal (pressure.c),
 * with the OS calls they use (os.c): apart from internal.h, so that the
 * files that do not deal with the limit do not see them. */
#ifndef ARENA_LIMIT_H
#define ARENA_LIMIT_H

#include "internal.h"
#include <poll.h>

#pragma GCC visibility push(hidden)

/* ---- os.c: files, polls and events --------------------------------------- */
long os_read_file(const char *path, char *buf, size_t size);
int os_open_watch(const char *path, short *events, bool write);
int os_open(const char *path, int flags);
long os_read(int fd, void *buf, size_t n);
bool os_write(int fd, const void *buf, size_t n);
long os_pread0(int fd, char *buf, size_t size);
void os_drain(int fd);
void os_close(int fd);
int os_eventfd(void);
void os_event_signal(int fd);
int os_poll(struct pollfd *fds, unsigned n, uint64_t ms);
uint64_t os_now_us(void);

/* ---- limit.c: the soft memory limit (decisions; pressure.c acts) ---------- */
/* Where the limit in force came from. */
enum limit_source {
	LIMIT_NONE = 0,   /* none: off, or no limit found                      */
	LIMIT_CONF,       /* ARENA_CONF=memory_limit:BYTES                     */
	LIMIT_V2_HIGH,    /* cgroup v2 memory.high                             */
	LIMIT_V2_MAX,     /* cgroup v2 memory.max                              */
	LIMIT_V1_SOFT,    /* cgroup v1 memory.soft_limit_in_bytes              */
	LIMIT_V1_HARD,    /* cgroup v1 memory.limit_in_bytes                   */
	LIMIT_RAM,        /* N% of RAM (no cgroup limit)                       */
};
/* The limit's zone starts at this many 256ths of it: from there decay
 * shortens, to an eighth of it at the limit (80%). */
#define LIMIT_ZONE_256 205u

/* How often the cgroup's files are read again, at most (ms). */
#define LIMIT_REREAD_MS 1000
void limit_init(void);
bool limit_watching(void);
void limit_reread(uint64_t now);
size_t limit_bytes(void);
uint8_t limit_source(void);
const char *limit_source_name(uint8_t source);
unsigned limit_cgroup(const char **dir); /* cgroup version (0: none), its memory dir */
bool limit_thp_ok(void);
unsigned limit_level(void);              /* 0..256: where usage is in the zone */
void limit_read_usage(uint64_t now, size_t own);
void limit_note_resident(size_t own);
size_t limit_resident(void);
long limit_decay_ms(long decay_ms);
size_t limit_dirty_room(size_t active);
size_t limit_cap_keep(size_t cap);
void limit_note_pressure(uint64_t now, bool signal);
uint64_t limit_pressure_ms(void);
bool limit_events_grew(void);
uint64_t limit_events_sum(const char *text, bool every_line);
/* Bytes purged for the limit and for pressure signals, signals seen. */
extern atomic_ulong limit_purged, pressure_purged, pressure_signals;

/* ---- pressure.c: the pressure signal and the limit's purges --------------- */
enum pressure_kind {
	PRESSURE_NONE = 0, PRESSURE_WATCH, PRESSURE_PSI, PRESSURE_EVENTS, PRESSURE_V1,
	PRESSURE_COUNTERS, /* no descriptor: the cgroup's counters, read at passes */
};
void pressure_slow_path(void);
void pressure_open(void);
void pressure_close(void);
void pressure_wait(atomic_uint *word, unsigned expect, uint64_t ms);
void pressure_wake(atomic_uint *word);
void pressure_after_fork_child(void);
uint8_t pressure_kind(void);
const char *pressure_kind_name(void);
size_t pressure_resident(void);
/* The last signal's purge: from the descriptor ready to all purged (us). */
extern atomic_ulong pressure_last_us;

#pragma GCC visibility pop
#endif /* ARENA_LIMIT_H */
