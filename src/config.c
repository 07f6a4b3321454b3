/* ARENA_CONF="key:value,key:value", read once at initialisation.  An unknown
 * key or a bad value gets one warning and is ignored. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Written by config_read alone (and by unit tests through
 * config_for_test); others read it through cfg, a pointer to const. */
static config_t settings = {
	.narenas = 0,
	.stats_print = false,
	.tcache = true,
	.misuse = MISUSE_ABORT,
	.purge = PURGE_DONTNEED,
	.thp = THP_AUTO,
	.fine_purge = TRI_AUTO,
	.background_thread = TRI_AUTO,
	/* purge.c's dirty cap, % of active memory (docs/tuning.md) */
	.dirty_cap = 25,
	/* Free memory stays backed this long: on a virtual machine the host takes
	 * memory idle for ~1 s back anyway (a huge-page fault then costs 10x
	 * more), so longer buys little; jemalloc's default is 10 s. */
	.decay_ms = 1000,
	/* Chunks that held huge blocks: held while in the working set (purge.c). */
	.huge_decay_ms = HUGE_DECAY_AUTO,
	.tcache_gc = true,
	.remap_min = REMAP_MIN_DEFAULT,
	.populate_on_grow = false,
	/* tcmalloc's and jemalloc's mean sampling interval */
	.prof_sample = (size_t)512 << 10,
};

const config_t *const cfg = &settings;

#ifdef ARENA_UNIT
config_t *config_for_test(void)
{
	return &settings;
}
#endif

typedef struct span {
	const char *s;
	size_t n;
} span_t;

static const char *span_str(span_t v, char *buf, size_t size);

static bool span_is(span_t v, const char *word)
{
	return strlen(word) == v.n && memcmp(v.s, word, v.n) == 0;
}

static bool parse_bool(span_t v, bool *out)
{
	if (span_is(v, "true") || span_is(v, "1"))
		return *out = true, true;
	if (span_is(v, "false") || span_is(v, "0"))
		return *out = false, true;
	return false;
}

static bool parse_size(span_t v, size_t max, size_t *out)
{
	size_t n = 0;
	if (v.n == 0 || v.n > 19)
		return false;
	for (size_t i = 0; i < v.n; i++) {
		if (v.s[i] < '0' || v.s[i] > '9')
			return false;
		n = n * 10 + (size_t)(v.s[i] - '0');
	}
	if (n > max)
		return false;
	*out = n;
	return true;
}

static bool set_narenas(span_t v)
{
	size_t n;
	if (!parse_size(v, MAX_ARENAS, &n) || n == 0)
		return false;
	settings.narenas = (unsigned)n;
	return true;
}

static bool set_stats_print(span_t v) { return parse_bool(v, &settings.stats_print); }
static bool set_tcache(span_t v) { return parse_bool(v, &settings.tcache); }

/* v as one of n names: *out = its index. */
static bool parse_word(span_t v, const char *const *names, uint8_t n, uint8_t *out)
{
	for (uint8_t i = 0; i < n; i++)
		if (span_is(v, names[i]))
			return *out = i, true;
	return false;
}

static bool set_misuse(span_t v)
{
	static const char *const names[] = { "abort", "warn", "ignore" };
	return parse_word(v, names, 3, &settings.misuse);
}

static bool set_purge(span_t v)
{
	static const char *const names[] = { "dontneed", "free", "off" };
	return parse_word(v, names, 3, &settings.purge);
}

static bool set_thp(span_t v)
{
	static const char *const names[] = { "auto", "always", "never" };
	return parse_word(v, names, 3, &settings.thp);
}

static bool set_fine_purge(span_t v)
{
	static const char *const names[] = { "auto", "true", "false" };
	return parse_word(v, names, 3, &settings.fine_purge);
}

static bool set_background_thread(span_t v)
{
	static const char *const names[] = { "auto", "true", "false" };
	return parse_word(v, names, 3, &settings.background_thread);
}

/* dirty_cap:N% (or N) of the active memory, 1-10000, or off. */
static bool set_dirty_cap(span_t v)
{
	size_t n;
	if (span_is(v, "off"))
		return settings.dirty_cap = 0, true;
	if (v.n > 1 && v.s[v.n - 1] == '%')
		v.n--;
	if (!parse_size(v, 10000, &n) || n == 0)
		return false;
	settings.dirty_cap = (unsigned)n;
	return true;
}

static bool set_decay_ms(span_t v)
{
	size_t ms;
	if (span_is(v, "-1"))
		return settings.decay_ms = -1, true;
	if (!parse_size(v, (size_t)1 << 40, &ms))
		return false;
	settings.decay_ms = (long)ms;
	return true;
}

static bool set_huge_decay_ms(span_t v)
{
	size_t ms;
	if (span_is(v, "-1"))
		return settings.huge_decay_ms = -1, true;
	if (span_is(v, "auto"))
		return settings.huge_decay_ms = HUGE_DECAY_AUTO, true;
	if (!parse_size(v, (size_t)1 << 40, &ms))
		return false;
	settings.huge_decay_ms = (long)ms;
	return true;
}

static bool set_tcache_gc(span_t v) { return parse_bool(v, &settings.tcache_gc); }

/* Bytes, with an optional k, m or g suffix (powers of 1024). */
static bool parse_bytes(span_t v, size_t *out)
{
	unsigned shift = 0;
	if (v.n > 1) {
		char c = v.s[v.n - 1];
		shift = c == 'k' || c == 'K' ? 10 : c == 'm' || c == 'M' ? 20 : c == 'g' || c == 'G' ? 30 : 0;
		if (shift)
			v.n--;
	}
	size_t n;
	if (!parse_size(v, HUGE_MAX >> shift, &n))
		return false;
	*out = n << shift;
	return true;
}

static bool set_remap_min(span_t v) { return parse_bytes(v, &settings.remap_min); }
static bool set_populate_on_grow(span_t v) { return parse_bool(v, &settings.populate_on_grow); }
static bool set_sim_no_dontunmap(span_t v) { return parse_bool(v, &settings.sim_no_dontunmap); }
static bool set_sim_no_getrandom(span_t v) { return parse_bool(v, &settings.sim_no_getrandom); }
static bool set_sim_no_guard(span_t v) { return parse_bool(v, &settings.sim_no_guard); }
static bool set_sim_no_scan(span_t v) { return parse_bool(v, &settings.sim_no_pagemap_scan); }
static bool set_purge_batch(span_t v) { return parse_bool(v, &settings.purge_batch); }
static bool set_guard_large(span_t v) { return parse_bool(v, &settings.guard_large); }
static bool set_debug(span_t v) { return parse_bool(v, &settings.debug); }
static bool set_secure(span_t v) { return parse_bool(v, &settings.secure); }
static bool set_sim_no_madv_free(span_t v) { return parse_bool(v, &settings.sim_no_madv_free); }
static bool set_sim_no_thp(span_t v) { return parse_bool(v, &settings.sim_no_thp); }

/* The kernel's THP mode as libarena is to believe it (os_sim_t.thp):
 * enum thp_sys + 1, names in its order from THP_SYS_NEVER. */
static bool set_sim_thp(span_t v)
{
	static const char *const names[] = { "never", "madvise", "always" };
	uint8_t i;
	if (!parse_word(v, names, 3, &i))
		return false;
	settings.sim_thp = (uint8_t)(THP_SYS_NEVER + i + 1);
	return true;
}

/* What the huge-page decision's probe is to find (enum sim_probe). */
static bool set_sim_thp_probe(span_t v)
{
	static const char *const names[] = { "off", "cheap", "costly", "unformed" };
	return parse_word(v, names, 4, &settings.sim_thp_probe);
}

static bool set_prof(span_t v) { return parse_bool(v, &settings.prof); }
static bool set_prof_leak(span_t v) { return parse_bool(v, &settings.prof_leak); }

static bool set_prof_sample(span_t v)
{
	size_t n;
	if (!parse_bytes(v, &n) || n == 0)
		return false;
	settings.prof_sample = n;
	return true;
}

static bool set_prof_interval(span_t v)
{
	size_t n;
	if (!parse_bytes(v, &n) || n == 0)
		return false;
	settings.prof_interval = n;
	return true;
}

/* A file name prefix: not empty, shorter than PROF_PATH_MAX - 1. */
static bool set_prof_dump(span_t v)
{
	if (v.n == 0 || v.n >= PROF_PATH_MAX - 1)
		return false;
	memcpy(settings.prof_dump, v.s, v.n);
	settings.prof_dump[v.n] = 0;
	return true;
}

/* memory_limit:auto|off|BYTES|N% (limit.c): bytes (k/m/g suffix) at least
 * 1 MiB, N 1-100.  A bad value says what is wanted and keeps the setting. */
static bool set_memory_limit(span_t v)
{
	char vbuf[64];
	size_t n;
	if (span_is(v, "auto") || span_is(v, "off")) {
		settings.memory_limit_kind = span_is(v, "auto") ? MEMLIMIT_AUTO : MEMLIMIT_OFF;
		return true;
	}
	span_t num = { v.s, v.n > 1 && v.s[v.n - 1] == '%' ? v.n - 1 : v.n };
	if (num.n < v.n && parse_size(num, 100, &n) && n > 0) {
		settings.memory_limit_kind = MEMLIMIT_PERCENT;
		settings.memory_limit = n;
	} else if (num.n == v.n && parse_bytes(v, &n) && n >= LIMIT_MIN_BYTES) {
		settings.memory_limit_kind = MEMLIMIT_BYTES;
		settings.memory_limit = n;
	} else {
		out_printf("libarena: ARENA_CONF: memory_limit '%s' is not auto, off, a size of at least 1 MiB (k/m/g suffix) or 1%%-100%%; the limit stays %s\n",
			   span_str(v, vbuf, sizeof(vbuf)),
			   settings.memory_limit_kind == MEMLIMIT_OFF ? "off" : "auto");
	}
	return true;
}

static bool set_sim_no_poll(span_t v) { return parse_bool(v, &settings.sim_no_poll); }

/* A directory standing for "/" where the cgroup files are read (tests). */
static bool set_sim_cgroup_root(span_t v)
{
	if (v.n == 0 || v.n >= sizeof(settings.sim_cgroup_root) - 1)
		return false;
	memcpy(settings.sim_cgroup_root, v.s, v.n);
	settings.sim_cgroup_root[v.n] = 0;
	return true;
}

static const struct option {
	const char *key;
	bool (*set)(span_t value);
} options[] = {
	{ "narenas", set_narenas },
	{ "stats_print", set_stats_print },
	{ "tcache", set_tcache },
	{ "misuse", set_misuse },
	{ "purge", set_purge },
	{ "decay_ms", set_decay_ms },
	{ "huge_decay_ms", set_huge_decay_ms },
	{ "tcache_gc", set_tcache_gc },
	{ "thp", set_thp },
	{ "fine_purge", set_fine_purge },
	{ "background_thread", set_background_thread },
	{ "dirty_cap", set_dirty_cap },
	{ "sim_no_madv_free", set_sim_no_madv_free },
	{ "sim_no_thp", set_sim_no_thp },
	{ "sim_thp", set_sim_thp },
	{ "sim_thp_probe", set_sim_thp_probe },
	{ "remap_min", set_remap_min },
	{ "populate_on_grow", set_populate_on_grow },
	{ "sim_no_dontunmap", set_sim_no_dontunmap },
	{ "sim_no_getrandom", set_sim_no_getrandom },
	{ "sim_no_guard", set_sim_no_guard },
	{ "sim_no_pagemap_scan", set_sim_no_scan },
	{ "purge_batch", set_purge_batch },
	{ "guard_large", set_guard_large },
	{ "debug", set_debug },
	{ "secure", set_secure },
	{ "prof", set_prof },
	{ "prof_sample", set_prof_sample },
	{ "prof_interval", set_prof_interval },
	{ "prof_dump", set_prof_dump },
	{ "prof_leak", set_prof_leak },
	{ "memory_limit", set_memory_limit },
	{ "sim_no_poll", set_sim_no_poll },
	{ "sim_cgroup_root", set_sim_cgroup_root },
};

/* A NUL-terminated copy of v for messages, cut to fit. */
static const char *span_str(span_t v, char *buf, size_t size)
{
	size_t n = v.n < size - 1 ? v.n : size - 1;
	memcpy(buf, v.s, n);
	buf[n] = 0;
	return buf;
}

static void apply(span_t key, span_t value)
{
	char kbuf[64], vbuf[64];
	for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++) {
		if (!span_is(key, options[i].key))
			continue;
		if (!options[i].set(value))
			out_printf("libarena: ARENA_CONF: bad value '%s' for key '%s', ignored\n",
				   span_str(value, vbuf, sizeof(vbuf)), options[i].key);
		return;
	}
	out_printf("libarena: ARENA_CONF: unknown key '%s', ignored\n",
		   span_str(key, kbuf, sizeof(kbuf)));
}

void config_read(void)
{
	static char text[1024]; /* longer settings are cut (no allocation here) */
	const char *s = os_getenv("ARENA_CONF", text, sizeof(text)) ? text : NULL;
	while (s && *s) {
		const char *end = strchr(s, ',');
		size_t len = end ? (size_t)(end - s) : strlen(s);
		const char *colon = memchr(s, ':', len);
		span_t key = { s, colon ? (size_t)(colon - s) : len };
		span_t value = { colon ? colon + 1 : s + len,
				 colon ? len - key.n - 1 : 0 };
		if (key.n)
			apply(key, value);
		s = end ? end + 1 : NULL;
	}
}
