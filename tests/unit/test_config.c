/*
 * config.c: ARENA_CONF parsing, with the variable given by the fake
 * os_getenv and the warnings (out.c, fd 2) captured.  Every key, bad values
 * (one warning each, the setting left as it was), sizes with k/m/g.
 */
#include "fake_os.h"
#include "unit.h"

static config_t defaults;

static void init(void)
{
	defaults = conf;
}

TestSuite(config, .init = init);

static char msgs[8192];

/* config_read of env from the defaults; the warnings in msgs. */
static void read_conf(const char *env)
{
	conf = defaults;
	fake.env = env;
	capture_t c;
	capture_begin(&c);
	config_read();
	capture_end(&c, msgs, sizeof(msgs));
}

/* The first field where a and b differ, or NULL. */
static const char *conf_diff(const config_t *a, const config_t *b)
{
#define F(f) if (a->f != b->f) return #f
	F(narenas); F(stats_print); F(tcache); F(misuse); F(purge); F(thp); F(fine_purge);
	F(background_thread); F(decay_ms); F(sim_no_madv_free); F(sim_no_thp); F(remap_min);
	F(populate_on_grow); F(sim_no_dontunmap); F(debug); F(dirty_cap); F(huge_decay_ms);
	F(tcache_gc); F(prof); F(prof_leak); F(prof_sample); F(prof_interval);
#undef F
	if (strcmp(a->prof_dump, b->prof_dump) != 0)
		return "prof_dump";
	return NULL;
}

static void assert_conf(const config_t *want, const char *env)
{
	const char *f = conf_diff(&conf, want);
	cr_assert_null(f, "ARENA_CONF=\"%s\": field %s differs", env, f);
}

Test(config, defaults)
{
	cr_assert_eq(conf.narenas, 0);
	cr_assert_not(conf.stats_print);
	cr_assert(conf.tcache);
	cr_assert_eq(conf.misuse, MISUSE_ABORT);
	cr_assert_eq(conf.purge, PURGE_DONTNEED);
	cr_assert_eq(conf.thp, THP_AUTO);
	cr_assert_eq(conf.fine_purge, TRI_AUTO);
	cr_assert_eq(conf.background_thread, TRI_AUTO);
	cr_assert_eq(conf.dirty_cap, 25);
	cr_assert_eq(conf.decay_ms, 1000);
	cr_assert_eq(conf.huge_decay_ms, HUGE_DECAY_AUTO);
	cr_assert(conf.tcache_gc);
	cr_assert_not(conf.sim_no_madv_free || conf.sim_no_thp || conf.sim_no_dontunmap);
	cr_assert_eq(conf.remap_min, REMAP_MIN_DEFAULT);
	cr_assert_not(conf.populate_on_grow);
	cr_assert_not(conf.debug);
	cr_assert_not(conf.prof || conf.prof_leak);
	cr_assert_eq(conf.prof_sample, 512 << 10);
	cr_assert_eq(conf.prof_interval, 0);
	cr_assert_str_empty(conf.prof_dump);
	read_conf(NULL);
	assert_conf(&defaults, "(unset)");
	cr_assert_str_empty(msgs);
}

/* Each key with good values: that field alone changes, nothing printed. */
Test(config, every_key)
{
	struct kv { const char *env; config_t want; } k[64];
	unsigned n = 0;
#define WANT(e, f, v) do { k[n].env = e; k[n].want = defaults; k[n].want.f = v; n++; } while (0)
	WANT("narenas:1", narenas, 1);
	WANT("narenas:8", narenas, 8);
	WANT("narenas:64", narenas, 64);
	WANT("stats_print:true", stats_print, true);
	WANT("stats_print:1", stats_print, true);
	WANT("tcache:false", tcache, false);
	WANT("tcache:0", tcache, false);
	WANT("misuse:warn", misuse, MISUSE_WARN);
	WANT("misuse:ignore", misuse, MISUSE_IGNORE);
	WANT("purge:free", purge, PURGE_FREE);
	WANT("purge:off", purge, PURGE_OFF);
	WANT("decay_ms:0", decay_ms, 0);
	WANT("decay_ms:250", decay_ms, 250);
	WANT("decay_ms:-1", decay_ms, -1);
	WANT("huge_decay_ms:0", huge_decay_ms, 0);
	WANT("huge_decay_ms:auto", huge_decay_ms, HUGE_DECAY_AUTO);
	WANT("huge_decay_ms:-1", huge_decay_ms, -1);
	WANT("huge_decay_ms:5000", huge_decay_ms, 5000);
	WANT("tcache_gc:false", tcache_gc, false);
	WANT("decay_ms:1099511627776", decay_ms, 1099511627776L);
	WANT("thp:always", thp, THP_ALWAYS);
	WANT("thp:never", thp, THP_NEVER);
	WANT("fine_purge:true", fine_purge, TRI_ON);
	WANT("fine_purge:false", fine_purge, TRI_OFF);
	WANT("background_thread:true", background_thread, TRI_ON);
	WANT("background_thread:false", background_thread, TRI_OFF);
	WANT("background_thread:auto", background_thread, TRI_AUTO);
	WANT("dirty_cap:off", dirty_cap, 0);
	WANT("dirty_cap:50%", dirty_cap, 50);
	WANT("dirty_cap:10", dirty_cap, 10);
	WANT("dirty_cap:10000%", dirty_cap, 10000);
	WANT("sim_no_madv_free:true", sim_no_madv_free, true);
	WANT("sim_no_thp:1", sim_no_thp, true);
	WANT("remap_min:12345", remap_min, 12345);
	WANT("populate_on_grow:true", populate_on_grow, true);
	WANT("sim_no_dontunmap:true", sim_no_dontunmap, true);
	WANT("debug:true", debug, true);
	WANT("prof:true", prof, true);
	WANT("prof_leak:1", prof_leak, true);
	WANT("prof_sample:1", prof_sample, 1);
	WANT("prof_sample:64k", prof_sample, 64 << 10);
	WANT("prof_sample:2m", prof_sample, 2 << 20);
	WANT("prof_interval:1g", prof_interval, (size_t)1 << 30);
#undef WANT
	for (unsigned i = 0; i < n; i++) {
		read_conf(k[i].env);
		assert_conf(&k[i].want, k[i].env);
		cr_assert_str_empty(msgs, "ARENA_CONF=\"%s\" printed: %s", k[i].env, msgs);
	}
	/* prof_dump: the path, as given (colons after the first are its own) */
	read_conf("prof_dump:/tmp/a:b/heap");
	cr_assert_str_eq(conf.prof_dump, "/tmp/a:b/heap");
	cr_assert_str_empty(msgs);
	/* The defaults spelled out change nothing. */
	read_conf("misuse:abort,purge:dontneed,thp:auto,fine_purge:auto,tcache:true,debug:false");
	assert_conf(&defaults, "defaults spelled out");
	cr_assert_str_empty(msgs);
}

Test(config, sizes_with_suffixes)
{
	static const struct { const char *v; size_t want; } cases[] = {
		{ "0", 0 }, { "1", 1 }, { "4096", 4096 }, { "1k", 1024 }, { "1K", 1024 },
		{ "64k", 64 << 10 }, { "65536k", 64 << 20 }, { "1m", 1 << 20 }, { "3M", 3 << 20 },
		{ "64m", 64 << 20 }, { "1g", (size_t)1 << 30 }, { "2G", (size_t)2 << 30 },
		{ "0k", 0 }, { "65536g", (size_t)1 << 46 }, { "70368744177664", (size_t)1 << 46 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char env[64];
		snprintf(env, sizeof(env), "remap_min:%s", cases[i].v);
		read_conf(env);
		cr_assert_eq(conf.remap_min, cases[i].want, "%s: %zu, want %zu", env, conf.remap_min,
			     cases[i].want);
		cr_assert_str_empty(msgs, "%s printed: %s", env, msgs);
	}
}

/* A bad value: one warning naming it, the setting as it was. */
Test(config, bad_values_warned_and_ignored)
{
	static const char *const bad[][2] = {
		{ "narenas", "0" },     { "narenas", "65" },     { "narenas", "abc" },
		{ "narenas", "" },      { "narenas", "-1" },     { "narenas", "4x" },
		{ "stats_print", "yes" }, { "tcache", "TRUE" },  { "tcache", "2" },
		{ "misuse", "die" },    { "misuse", "" },        { "purge", "madvise" },
		{ "huge_decay_ms", "-2" }, { "huge_decay_ms", "soon" }, { "tcache_gc", "maybe" },
		{ "decay_ms", "-2" },   { "decay_ms", "1.5" },   { "decay_ms", "1099511627777" },
		{ "decay_ms", "99999999999999999999" },          { "thp", "sometimes" },
		{ "fine_purge", "on" }, { "background_thread", "y" }, { "sim_no_madv_free", "" },
		{ "sim_no_thp", "no" }, { "remap_min", "1x" },   { "remap_min", "k" },
		{ "remap_min", "-1" },  { "remap_min", "1kk" },  { "remap_min", "70368744177665" },
		{ "remap_min", "65537g" }, { "remap_min", "67108865m" }, { "remap_min", "1 k" },
		{ "populate_on_grow", "x" }, { "sim_no_dontunmap", "truee" }, { "debug", "on" },
		{ "dirty_cap", "0" },   { "dirty_cap", "%" },    { "dirty_cap", "10001%" },
		{ "dirty_cap", "25%%" }, { "dirty_cap", "false" },
		{ "prof", "on" },       { "prof", "" },          { "prof_leak", "yes" },
		{ "prof_sample", "0" }, { "prof_sample", "-1" }, { "prof_sample", "1x" },
		{ "prof_sample", "k" }, { "prof_sample", "65537g" }, { "prof_interval", "0" },
		{ "prof_interval", "1.5m" }, { "prof_interval", "" }, { "prof_dump", "" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char env[128], want[256];
		snprintf(env, sizeof(env), "%s:%s", bad[i][0], bad[i][1]);
		read_conf(env);
		assert_conf(&defaults, env);
		snprintf(want, sizeof(want), "libarena: ARENA_CONF: bad value '%s' for key '%s', ignored\n",
			 bad[i][1], bad[i][0]);
		cr_assert_str_eq(msgs, want, "ARENA_CONF=\"%s\" printed \"%s\"", env, msgs);
	}
	/* A key without a value is a bad (empty) value. */
	read_conf("debug");
	assert_conf(&defaults, "debug");
	cr_assert_str_eq(msgs, "libarena: ARENA_CONF: bad value '' for key 'debug', ignored\n");
}

/* prof_dump: a path prefix of at most PROF_PATH_MAX - 2 bytes (the dump
 * names append .PID.N.heap to it); a longer one is a bad value. */
Test(config, prof_dump_too_long)
{
	char env[PROF_PATH_MAX + 32], path[PROF_PATH_MAX + 1];
	memset(path, 'a', PROF_PATH_MAX - 2);
	path[PROF_PATH_MAX - 2] = 0;
	snprintf(env, sizeof(env), "prof_dump:%s", path);
	read_conf(env);
	cr_assert_str_eq(conf.prof_dump, path);
	cr_assert_str_empty(msgs);
	path[PROF_PATH_MAX - 2] = 'a';
	path[PROF_PATH_MAX - 1] = 0;
	snprintf(env, sizeof(env), "prof_dump:%s", path);
	read_conf(env);
	assert_conf(&defaults, "prof_dump too long");
	cr_assert(strstr(msgs, "for key 'prof_dump', ignored"), "%s", msgs);
}

Test(config, unknown_keys_warned_and_ignored)
{
	static const char *const keys[] = { "frobnicate", "Narenas", "narenas ", " narenas", "decay" };
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		char env[64], want[128];
		snprintf(env, sizeof(env), "%s:4", keys[i]);
		read_conf(env);
		assert_conf(&defaults, env);
		snprintf(want, sizeof(want), "libarena: ARENA_CONF: unknown key '%s', ignored\n", keys[i]);
		cr_assert_str_eq(msgs, want, "ARENA_CONF=\"%s\" printed \"%s\"", env, msgs);
	}
}

Test(config, bad_entries_do_not_stop_the_rest)
{
	const char *env = "narenas:0,tcache:false,bogus,decay_ms:7,thp:bad,remap_min:2m";
	read_conf(env);
	config_t want = defaults;
	want.tcache = false;
	want.decay_ms = 7;
	want.remap_min = 2 << 20;
	assert_conf(&want, env);
	cr_assert_eq(count_lines(msgs), 3, "three warnings: %s", msgs);
	cr_assert(strstr(msgs, "bad value '0' for key 'narenas'"), "%s", msgs);
	cr_assert(strstr(msgs, "unknown key 'bogus'"), "%s", msgs);
	cr_assert(strstr(msgs, "bad value 'bad' for key 'thp'"), "%s", msgs);
}

Test(config, several_keys_and_the_last_wins)
{
	read_conf("narenas:3,stats_print:true,narenas:5,purge:free");
	config_t want = defaults;
	want.narenas = 5;
	want.stats_print = true;
	want.purge = PURGE_FREE;
	assert_conf(&want, "several");
	cr_assert_str_empty(msgs);
}

Test(config, empty_entries_are_skipped)
{
	static const char *const envs[] = { "", ",", ",,,", ":5", ",:,", "narenas:2,", ",narenas:2" };
	for (size_t i = 0; i < sizeof(envs) / sizeof(envs[0]); i++) {
		read_conf(envs[i]);
		cr_assert_str_empty(msgs, "ARENA_CONF=\"%s\" printed %s", envs[i], msgs);
		cr_assert_eq(conf.narenas, strstr(envs[i], "narenas") ? 2u : 0u, "\"%s\"", envs[i]);
	}
}

/* Messages quote at most 63 bytes; settings past 1023 bytes are cut. */
Test(config, long_input_is_cut)
{
	char env[2048], want[256];
	memset(env, 'v', 200);
	memcpy(env, "debug:", 6);
	env[200] = 0;
	read_conf(env);
	snprintf(want, sizeof(want), "libarena: ARENA_CONF: bad value '%.63s' for key 'debug', ignored\n",
		 env + 6);
	cr_assert_str_eq(msgs, want);

	memset(env, ',', 1019);
	strcpy(env + 1019, "narenas:5");
	read_conf(env);
	cr_assert_eq(conf.narenas, 0, "past the first 1023 bytes");
	cr_assert_str_eq(msgs, "libarena: ARENA_CONF: unknown key 'nare', ignored\n");
}
