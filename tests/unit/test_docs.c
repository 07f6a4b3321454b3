/*
 * Docs that cannot drift: the sizes and constants docs/design.md quotes,
 * checked against the code.  Each figure is found by a pattern of the prose
 * as it reads today (whitespace and line breaks do not matter):
 *
 *   #   a quantity: 16, 2^46, 4 KiB, 2 MiB, 64 GiB, 1 B (its value in bytes
 *       when a unit follows)
 *   ~   a count in words or digits: one .. sixteen, 3
 *   *   any text, shortest first (at most 300 characters)
 *   \   the next character literally (a backslash in the C string: "\\*")
 *
 * anything else literally.  A pattern that no longer matches fails with the
 * figure it was checking: reword the pattern with the prose.  The values
 * come from the headers, from the layers linked here (sizeclass.c, chunk.c
 * and config.c over the fake OS: what chunk.c asks the kernel for shows its
 * constants), and, for constants private to files not linked here, from
 * their #define lines in src/ (also by pattern).
 *
 * If design.md holds a table after the marker
 * <!-- constants: checked by tests/unit/test_docs.c -->
 * every row's constant is checked too, and the file its "defined in" column
 * names must define it (see marker_table below).  And every citation of a
 * section of design.md in src/, include/, tests/, docs/ and bench/ must
 * name one of its headings (citations_name_headings, at the end).
 */
#include "fake_os.h"
#include "unit.h"

#include <dirent.h>
#include <sys/stat.h>

#ifndef DOCS_DIR
#error "DOCS_DIR: the docs/ directory (the Makefile defines it)"
#endif

#define MARKER "<!-- constants: checked by tests/unit/test_docs.c -->"

/* The file at path with every run of whitespace made one space. */
static char *read_normalized(const char *path)
{
	FILE *f = fopen(path, "r");
	cr_assert(f, "cannot open %s", path);
	size_t cap = 1 << 16, len = 0;
	char *s = malloc(cap);
	int ch, space = 0;
	while ((ch = fgetc(f)) != EOF) {
		if (ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r') {
			space = 1;
			continue;
		}
		if (len + 3 > cap)
			s = realloc(s, cap *= 2);
		if (space && len)
			s[len++] = ' ';
		space = 0;
		s[len++] = (char)ch;
	}
	fclose(f);
	s[len] = 0;
	return s;
}

static const char *design(void)
{
	static char *text;
	if (!text)
		text = read_normalized(DOCS_DIR "/design.md");
	return text;
}

#define NSOURCES 16

static const char *source(const char *file)
{
	static char *text[NSOURCES];
	static char *name[NSOURCES];
	for (int i = 0; i < NSOURCES; i++) {
		if (name[i] && !strcmp(name[i], file))
			return text[i];
		if (!name[i]) {
			char path[512];
			snprintf(path, sizeof(path), "%s/%s", SRC_DIR, file);
			name[i] = strdup(file); /* file may be the caller's buffer */
			return text[i] = read_normalized(path);
		}
	}
	cr_assert_fail("too many sources");
	return NULL;
}

static bool is_alnum(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* A quantity at t: digits (commas between them allowed), an optional ^exp,
 * an optional unit (B, KiB, MiB, GiB, TiB, with or without a space). */
static bool parse_qty(const char *t, uint64_t *out, const char **end)
{
	if (*t < '0' || *t > '9')
		return false;
	uint64_t v = 0;
	while ((*t >= '0' && *t <= '9') || (*t == ',' && t[1] >= '0' && t[1] <= '9'))
		if (*t++ != ',')
			v = v * 10 + (uint64_t)(t[-1] - '0');
	if (*t == '^' && t[1] >= '0' && t[1] <= '9') {
		unsigned e = 0;
		for (t++; *t >= '0' && *t <= '9'; t++)
			e = e * 10 + (unsigned)(*t - '0');
		uint64_t b = v;
		for (v = 1; e--;)
			v *= b;
	}
	static const struct { const char *u; unsigned shift; } units[] = {
		{ "KiB", 10 }, { "MiB", 20 }, { "GiB", 30 }, { "TiB", 40 }, { "B", 0 },
	};
	const char *u = *t == ' ' ? t + 1 : t;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		size_t n = strlen(units[i].u);
		if (!strncmp(u, units[i].u, n) && !is_alnum(u[n])) {
			v <<= units[i].shift;
			t = u + n;
			break;
		}
	}
	*out = v;
	*end = t;
	return true;
}

static bool parse_count(const char *t, uint64_t *out, const char **end)
{
	static const char *const words[] = { "zero", "one", "two", "three", "four", "five", "six",
					     "seven", "eight", "nine", "ten", "eleven", "twelve",
					     "thirteen", "fourteen", "fifteen", "sixteen" };
	for (uint64_t i = sizeof(words) / sizeof(words[0]); i-- > 0;) {
		size_t n = strlen(words[i]);
		if (!strncasecmp(t, words[i], n) && !is_alnum(t[n])) {
			*out = i;
			*end = t + n;
			return true;
		}
	}
	return parse_qty(t, out, end);
}

#define MAXQ 24

static bool match_at(const char *t, const char *p, uint64_t *v, unsigned *nv, const char **end)
{
	while (*p) {
		const char *e;
		if (*p == '#' || *p == '~') {
			if (*nv == MAXQ || !(*p == '#' ? parse_qty : parse_count)(t, &v[*nv], &e))
				return false;
			(*nv)++;
			t = e;
			p++;
		} else if (*p == '*') {
			unsigned saved = *nv;
			for (size_t k = 0; k <= 300 && t[k]; k++) {
				if (match_at(t + k, p + 1, v, nv, end))
					return true;
				*nv = saved;
			}
			return false;
		} else {
			if (*p == '\\' && p[1])
				p++;
			if (*t++ != *p++)
				return false;
		}
	}
	*end = t;
	return true;
}

/* The first place text matches pat: its quantities in v. */
static bool find(const char *text, const char *pat, uint64_t *v, unsigned *nv, const char **at,
		 size_t *len)
{
	for (const char *t = text; *t; t++) {
		const char *e;
		*nv = 0;
		if (match_at(t, pat, v, nv, &e)) {
			*at = t;
			*len = (size_t)(e - t);
			return true;
		}
	}
	return false;
}

struct want {
	const char *what; /* where the code's value comes from; NULL: not checked */
	uint64_t value;
};

/* design.md must say pat, with each # or ~ equal to its want. */
static void check_in(const char *file, const char *text, const char *pat, const struct want *w,
		     unsigned n)
{
	uint64_t v[MAXQ];
	unsigned nv;
	const char *at;
	size_t len;
	if (!find(text, pat, v, &nv, &at, &len)) {
		cr_expect_fail("%s no longer says \"%s\" (%s = %" PRIu64 "%s): reworded? Change the "
			       "pattern in tests/unit/test_docs.c with the prose",
			       file, pat, w[0].what ? w[0].what : "?", w[0].value, n > 1 ? ", ..." : "");
		return;
	}
	cr_assert_eq(nv, n, "pattern \"%s\": %u figures, %u wanted", pat, nv, n);
	for (unsigned i = 0; i < n; i++)
		if (w[i].what)
			cr_expect_eq(v[i], w[i].value,
				     "%s says \"%.*s\": figure %u is %" PRIu64 ", but %s is %" PRIu64,
				     file, (int)len, at, i + 1, v[i], w[i].what, w[i].value);
}

#define WANTS(...) (const struct want[]){ __VA_ARGS__ }, \
	(unsigned)(sizeof((const struct want[]){ __VA_ARGS__ }) / sizeof(struct want))
#define DOC(pat, ...) check_in("docs/design.md", design(), pat, WANTS(__VA_ARGS__))
/* design.md must say pat (no figures in it). */
#define DOC_SAYS(pat) cr_expect(strstr(design(), pat), "docs/design.md no longer says \"%s\"", pat)

/* A number in a file of src/, by pattern (constants private to a file that
 * is not linked here). */
static uint64_t src_num(const char *file, const char *pat, unsigned i)
{
	uint64_t v[MAXQ];
	unsigned nv;
	const char *at;
	size_t len;
	cr_assert(find(source(file), pat, v, &nv, &at, &len) && i < nv,
		  "src/%s no longer says \"%s\": change tests/unit/test_docs.c with it", file, pat);
	return v[i];
}

/* ---- what the chunk layer asks of the kernel shows its private constants ---- */
static struct {
	uint64_t region_default, region_min, commit_step, desc_huge_after, desc_bytes;
} ck;

static void probe_chunk_layer(void)
{
	fake.reserve_fail = true;
	chunk_init(); /* every size refused: from the default down to the least */
	cr_assert(fake.nreserve >= 2 && atomic_load(&nregions) == 0);
	/* each with a page after it (region.c) */
	ck.region_default = fake.reserve_size[0] - PAGE_SIZE;
	ck.region_min = fake.reserve_size[fake.nreserve - 1] - PAGE_SIZE;
	fake.reserve_fail = false;
	fake_clear_log();
	chunk_init();
	cr_assert_eq(atomic_load(&nregions), 1);
	ck.desc_bytes = regions[0].nchunks * sizeof(chunk_desc_t);
	bool zero;
	cr_assert(chunk_alloc(1, CHUNK_SIZE, CK_ARENA, 0, &zero));
	ck.commit_step = fake.commit[0].size / CHUNK_SIZE;
	while (fake.nmeta_huge == 0 && regions[0].frontier < 100000)
		cr_assert(chunk_alloc(1, CHUNK_SIZE, CK_ARENA, 0, &zero));
	ck.desc_huge_after = regions[0].frontier - 1;
}

static void init(void)
{
	sizeclass_init();
	probe_chunk_layer();
}

TestSuite(docs, .init = init);

Test(docs, address_space)
{
	DOC("chunks of # aligned to #", { "CHUNK_SIZE", CHUNK_SIZE }, { "CHUNK_SIZE", CHUNK_SIZE });
	DOC("one large reservation of address space, # by default",
	    { "chunk.c's first reservation (REGION_DEFAULT)", ck.region_default });
	DOC("in steps of at least # chunks", { "chunk.c's first commit (COMMIT_STEP)", ck.commit_step });
	DOC("if the kernel refuses # (", { "REGION_DEFAULT", ck.region_default });
	DOC("halves until it fits, down to #;", { "chunk.c's last try (REGION_MIN)", ck.region_min });
	DOC("another is reserved (up to # regions)", { "MAX_REGIONS", MAX_REGIONS });
	DOC("mapping, # bytes per chunk, # per # region",
	    { "sizeof(chunk_desc_t)", sizeof(chunk_desc_t) },
	    { "the descriptor table of a default region", ck.desc_bytes },
	    { "REGION_DEFAULT", ck.region_default });
	DOC("desc[(p - base) >> #]", { "CHUNK_SHIFT", CHUNK_SHIFT });
	DOC("run heads sit in # bins", { "NBINS (src/chunk.c)", src_num("chunk.c", "define NBINS #", 0) });
	DOC("collapsed once, when it reaches # of chunks",
	    { "DESC_HUGE_AFTER chunks (when chunk.c advises its table)",
	      ck.desc_huge_after * CHUNK_SIZE });
	DOC("\\*\\*What.\\*\\* Whole free chunks: #, #-aligned", { "CHUNK_SIZE", CHUNK_SIZE },
	    { "CHUNK_SIZE", CHUNK_SIZE });
}

Test(docs, blocks_and_size_classes)
{
	unsigned least_pages = 255, most_pages = 0;
	for (unsigned c = 0; c < NSMALL; c++) {
		least_pages = class_slab_pages[c] < least_pages ? class_slab_pages[c] : least_pages;
		most_pages = class_slab_pages[c] > most_pages ? class_slab_pages[c] : most_pages;
	}
	DOC("| small | # .. # | a slot in a slab (#-# pages", { NULL, 0 }, { "SMALL_MAX", SMALL_MAX },
	    { "the fewest pages of any class's slab (class_slab_pages)", least_pages },
	    { "the most pages of any class's slab (class_slab_pages)", most_pages });
	DOC("| large | # + 1 .. # |", { "SMALL_MAX", SMALL_MAX }, { "LARGE_MAX", LARGE_MAX });
	DOC("the class size (a multiple of #)", { "PAGE_SIZE", PAGE_SIZE });
	DOC("| huge | > # |", { "LARGE_MAX", LARGE_MAX });
	DOC("the request rounded up to #", { "PAGE_SIZE", PAGE_SIZE });
	DOC("`malloc(0)` is a #-byte small block", { "class_size[size_class(0)]", class_size[size_class(0)] });
	DOC("at most # bytes, which keeps size arithmetic", { "HUGE_MAX", HUGE_MAX });

	unsigned per_doubling = 0, per_doubling8 = 0;
	for (unsigned c = 0; c < NCLASSES; c++) {
		per_doubling += class_size[c] > 256 + 16 && class_size[c] <= 512;
		per_doubling8 += class_size[c] > 2048 + 64 && class_size[c] <= 4096;
	}
	DOC("#..# bytes in steps of #, then ~ classes per doubling up to # (#, #, #, #, #, ... #), eight "
	    "per doubling from # to # (#, #, ... #; # left out, below) and ~ per doubling for large "
	    "(# ... #)",
	    { "class_size[0]", class_size[0] }, { "class_size[7]", class_size[7] },
	    { "class_size[1] - class_size[0]", class_size[1] - class_size[0] },
	    { "the classes in (272, 512]", per_doubling }, { "class_size[22]", class_size[22] },
	    { "class_size[8]", class_size[8] }, { "class_size[9]", class_size[9] },
	    { "class_size[10]", class_size[10] }, { "class_size[11]", class_size[11] },
	    { "class_size[13]", class_size[13] }, { "class_size[22]", class_size[22] },
	    { "2^HDR_K_FIRST", (uint64_t)1 << HDR_K_FIRST }, { "class_size[NSMALL - 1]", class_size[NSMALL - 1] },
	    { "class_size[24]", class_size[24] }, { "class_size[25]", class_size[25] },
	    { "class_size[NSMALL - 1]", class_size[NSMALL - 1] },
	    { "the class left out", 11264 }, { "the classes in (16 KiB, 32 KiB]", per_doubling },
	    { "class_size[NSMALL]", class_size[NSMALL] }, { "class_size[NCLASSES - 1]", class_size[NCLASSES - 1] });
	cr_expect_eq(per_doubling8, 8, "eight per doubling from 1 to 16 KiB");
	cr_expect_neq(class_size[size_class(11264)], 11264);
	DOC("2^k + # above # and # (# and # bytes) and, above #, #, # and #, the largest multiple of "
	    "# bytes of which a #-page slab holds one block fewer than of 2^k (#, #, # and # bytes), and # "
	    "and # bytes, a sixteenth of # and # below and above them (\"Blocks a sixteenth off a power "
	    "of two\", below): # small and # large classes",
	    { "2^k + 16", 16 }, { "2^HDR16_K_FIRST", (uint64_t)1 << HDR16_K_FIRST },
	    { "2^(HDR16_K_FIRST + 1)", (uint64_t)2 << HDR16_K_FIRST },
	    { "class 272", class_size[size_class(257)] }, { "class 528", class_size[size_class(513)] },
	    { "1 (KiB)", 1 }, { "2 (KiB)", 2 }, { "4 (KiB)", 4 }, { "2^HDR_K_LAST", (uint64_t)1 << HDR_K_LAST },
	    { "MIN_ALIGN", MIN_ALIGN }, { "the slab's pages", 16 },
	    { "HDR_CLASS(10)", class_size[size_class(HDR_CLASS(10))] },
	    { "HDR_CLASS(11)", class_size[size_class(HDR_CLASS(11))] },
	    { "HDR_CLASS(12)", class_size[size_class(HDR_CLASS(12))] },
	    { "HDR_CLASS(13)", class_size[size_class(HDR_CLASS(13))] },
	    { "SUB1K_CLASS", class_size[size_class(SUB1K_CLASS)] },
	    { "OVER8K_CLASS", class_size[size_class(OVER8K_CLASS)] }, { "1 (KiB)", 1 }, { "8 KiB", 8192 },
	    { "NSMALL", NSMALL },
	    { "NCLASSES - NSMALL", NCLASSES - NSMALL });
	cr_expect_eq(HDR_K_LAST - HDR_K_FIRST, 3, "design.md names four header classes");
	DOC("Every block is aligned to at least # bytes", { "MIN_ALIGN", MIN_ALIGN });
	DOC("dividing its class size (up to #): an aligned request up to # with alignment up to #",
	    { "PAGE_SIZE", PAGE_SIZE }, { "SMALL_MAX", SMALL_MAX }, { "PAGE_SIZE", PAGE_SIZE });
	DOC("Larger alignments up to # take a large block", { "LARGE_MAX", LARGE_MAX });
}

/* "the fewest (up to P) that hold at least B blocks (as many as Q pages
 * hold, if fewer) and waste at most N/D of the slab": the doc's rule
 * computed here must give sizeclass.c's geometry. */
Test(docs, slabs_and_arena_chunks)
{
	uint64_t v[MAXQ];
	unsigned nv;
	const char *at;
	size_t len;
	const char *pat = "a slab's pages are the fewest (up to #) that hold at least # blocks (as many "
			  "as # pages hold, if fewer) and waste at most #/# of the slab, and at most #/# of "
			  "an arena chunk full of such slabs; where no count up to # does, the fewest up to "
			  "# that meet the rest";
	if (!find(design(), pat, v, &nv, &at, &len)) {
		cr_expect_fail("docs/design.md no longer says \"%s\"", pat);
	} else {
		for (unsigned c = 0; c < NSMALL; c++) {
			uint64_t size = class_size[c], pages = 0, want = v[2] * PAGE_SIZE / size;
			if (want > v[1])
				want = v[1];
			for (int pass = 0; pass < 2 && !pages; pass++)
				for (uint64_t p = 1; p <= (pass ? v[8] : v[0]) && !pages; p++) {
					uint64_t bytes = p * PAGE_SIZE, n = bytes / size;
					uint64_t nslabs = CHUNK_PAGES / p;
					uint64_t chunk_waste = (CHUNK_PAGES % p) * PAGE_SIZE +
							       nslabs * (bytes - n * size);
					if (n >= want && n <= SLAB_MAX_BLOCKS &&
					    (bytes - n * size) * v[4] <= bytes * v[3] &&
					    (pass || chunk_waste * v[6] <= CHUNK_PAGES * PAGE_SIZE * v[5]))
						pages = p;
				}
			cr_expect_eq(class_slab_pages[c], pages,
				     "docs/design.md: \"%.*s\" gives %" PRIu64 " pages to class %u (%" PRIu64
				     " B), sizeclass.c %u", (int)len, at, pages, c, size, class_slab_pages[c]);
		}
		cr_expect_eq(v[7], v[0]);
	}
	DOC("The slab descriptor (# bytes: * a #-bit free bitmap", { "sizeof(slab_t)", sizeof(slab_t) },
	    { "SLAB_MAX_BLOCKS", SLAB_MAX_BLOCKS });
	cr_expect_eq(sizeof(((slab_t *)0)->free_bits) * 8, SLAB_MAX_BLOCKS);

	const arena_chunk_t *c = NULL;
	size_t maps = (sizeof(c->free_map) + sizeof(c->dirty_map) + sizeof(c->lazy_map)) /
		      sizeof(c->free_map);
	DOC("and ~ #-bit maps", { "the page maps of arena_chunk_t (free_map, dirty_map, lazy_map)", maps },
	    { "CHUNK_PAGES", CHUNK_PAGES });
	DOC("All # pages hold slabs", { "CHUNK_PAGES", CHUNK_PAGES });
}

Test(docs, arenas_caches_and_fast_path)
{
	DOC("There are # arenas per CPU (`ARENA_CONF=narenas:N`, at most #)",
	    { "arenas per CPU (src/arena.c)", src_num("arena.c", "define ARENAS_PER_CPU #", 0) },
	    { "MAX_ARENAS", MAX_ARENAS });
	DOC("for each class up to # free blocks", { "CACHE_MAX", CACHE_MAX });
	cr_expect_eq(class_size[NCACHED - 1], CACHE_MAX);
	DOC("`bin_off(class) = # * (class + 1)`", { "BIN_BYTES", BIN_BYTES });
	DOC("requests up to # take their bin's offset from a constant table", { "SIZE_LUT_MAX", SIZE_LUT_MAX });
	DOC("one word per # page", { "PAGE_SIZE", PAGE_SIZE });
	DOC("(`region_t.ptab`, # bytes per page", { "sizeof(*region_t.ptab)", sizeof(*regions[0].ptab) });
	DOC("unmade, # per arena chunk touched",
	    { "CHUNK_PAGES * sizeof(*region_t.ptab)", CHUNK_PAGES * sizeof(*regions[0].ptab) });
	uint64_t remote = src_num("remote.c", "define REMOTE_MAX_BYTES ((long)# << #)", 0)
			  << src_num("remote.c", "define REMOTE_MAX_BYTES ((long)# << #)", 1);
	DOC("are bounded (#, `REMOTE_MAX_BYTES`)", { "REMOTE_MAX_BYTES (src/remote.c)", remote });
}

Test(docs, purging_and_defaults)
{
	DOC("purged `decay_ms` (default #) after", { "conf.decay_ms's default", (uint64_t)conf.decay_ms });
	uint64_t dn = src_num("internal.h", "define THP_DENSE_PAGES (CHUNK_PAGES * # / #)", 0);
	uint64_t dd = src_num("internal.h", "define THP_DENSE_PAGES (CHUNK_PAGES * # / #)", 1);
	DOC("A chunk that reached #/# in use", { "THP_DENSE_PAGES's numerator (src/internal.h)", dn },
	    { "its denominator", dd });
	DOC_SAYS("Once under a quarter (`THP_SPARSE_PAGES`");
	cr_expect_eq(src_num("internal.h", "define THP_SPARSE_PAGES (CHUNK_PAGES / #)", 0), 4,
		     "design.md says THP_SPARSE_PAGES is a quarter of a chunk");
	DOC("so `remap_min` (`ARENA_CONF`) defaults to #", { "conf.remap_min's default", conf.remap_min });
	cr_expect_eq(conf.remap_min, REMAP_MIN_DEFAULT);
	DOC_SAYS("`purge:dontneed` (default)");
	cr_expect_eq(conf.purge, PURGE_DONTNEED, "design.md: purge:dontneed is the default");
	DOC_SAYS("thp:auto (default)");
	cr_expect_eq(conf.thp, THP_AUTO, "design.md: thp:auto is the default");
	DOC_SAYS("by default (`fine_purge:auto`)");
	cr_expect_eq(conf.fine_purge, TRI_AUTO, "design.md: fine_purge:auto is the default");
	DOC_SAYS("(`populate_on_grow`, default off)");
	cr_expect_not(conf.populate_on_grow, "design.md: populate_on_grow is off by default");
}

/* "One file per layer": the layer table names every .c file of src/, and only those. */
Test(docs, layer_table_names_every_source_file)
{
	const char *t = strstr(design(), "| file | layer | what it does |");
	cr_assert(t, "docs/design.md: the layer table (\"| file | layer | what it does |\") is gone");
	const char *end = strstr(t, "## ");
	char listed[64][32];
	unsigned nlisted = 0;
	for (const char *p = t; (p = strstr(p, "| `")) && (!end || p < end); p += 3) {
		const char *name = p + 3, *q = strchr(name, '`');
		if (q && q - name < 31 && q - name > 2 && !strncmp(q - 2, ".c", 2) && nlisted < 64) {
			memcpy(listed[nlisted], name, (size_t)(q - name));
			listed[nlisted++][q - name] = 0;
		}
	}
	DIR *d = opendir(SRC_DIR);
	cr_assert(d);
	unsigned nsrc = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		if (n < 3 || strcmp(e->d_name + n - 2, ".c"))
			continue;
		nsrc++;
		bool found = false;
		for (unsigned i = 0; i < nlisted; i++)
			found |= !strcmp(listed[i], e->d_name);
		cr_expect(found, "src/%s is not in design.md's layer table", e->d_name);
	}
	closedir(d);
	for (unsigned i = 0; i < nlisted; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", SRC_DIR, listed[i]);
		cr_expect(access(path, F_OK) == 0, "design.md's layer table names %s, not in src/", listed[i]);
	}
	cr_expect_eq(nlisted, nsrc, "%u files in the table, %u in src/", nlisted, nsrc);
}

/* The "defined in" cell of the table's row for the constant name (nlen
 * bytes), from its '|' on: when it names a file of src/ (`types.h`,
 * `region.c`), that file must define the constant: a #define, a struct's
 * typedef for sizeof(T), a configuration default (.key =) for a lower-case
 * name.  Constants move between files; the column must follow them. */
static void defined_in(const char *name, int nlen, const char *cell)
{
	const char *f = cell ? strchr(cell, '`') : NULL, *e = f ? strchr(f + 1, '`') : NULL;
	if (!e || e - f < 4 || e[-2] != '.' || (e[-1] != 'c' && e[-1] != 'h'))
		return; /* no file named (NLARGE: arithmetic) */
	char file[64], needle[96];
	snprintf(file, sizeof(file), "%.*s", (int)(e - f - 1), f + 1);
	if (nlen > 8 && !strncmp(name, "sizeof(", 7))
		snprintf(needle, sizeof(needle), "} %.*s;", nlen - 8, name + 7);
	else if (name[0] >= 'a' && name[0] <= 'z')
		snprintf(needle, sizeof(needle), ".%.*s =", nlen, name);
	else
		snprintf(needle, sizeof(needle), "define %.*s ", nlen, name);
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", SRC_DIR, file);
	if (access(path, F_OK) != 0) {
		cr_expect_fail("design.md's table: %.*s is defined in %s, which is not in src/", nlen,
			       name, file);
		return;
	}
	cr_expect(strstr(source(file), needle),
		  "design.md's table says %.*s is defined in %s, but src/%s has no \"%s\"", nlen, name,
		  file, file, needle);
}

/* The optional table after MARKER: rows "| `NAME` | value | ... |", every
 * NAME one of these. */
Test(docs, marker_table)
{
	const char *t = strstr(design(), MARKER);
	if (!t)
		cr_skip_test("docs/design.md has no \"" MARKER "\" table: only the prose is checked");
	const struct { const char *name; uint64_t value; } known[] = {
		{ "PAGE_SIZE", PAGE_SIZE },
		{ "CHUNK_SIZE", CHUNK_SIZE },
		{ "CHUNK_PAGES", CHUNK_PAGES },
		{ "CHUNK_HDR_BYTES", CHUNK_HDR_BYTES },
		{ "MIN_ALIGN", MIN_ALIGN },
		{ "SMALL_MAX", SMALL_MAX },
		{ "LARGE_MAX", LARGE_MAX },
		{ "CACHE_MAX", CACHE_MAX },
		{ "HUGE_MAX", HUGE_MAX },
		{ "NSMALL", NSMALL },
		{ "NLARGE", NCLASSES - NSMALL },
		{ "NCLASSES", NCLASSES },
		{ "NCACHED", NCACHED },
		{ "SLAB_MAX_BLOCKS", SLAB_MAX_BLOCKS },
		{ "SIZE_LUT_MAX", SIZE_LUT_MAX },
		{ "BIN_BYTES", BIN_BYTES },
		{ "MAX_ARENAS", MAX_ARENAS },
		{ "MAX_REGIONS", MAX_REGIONS },
		{ "REMAP_MIN_DEFAULT", REMAP_MIN_DEFAULT },
		{ "sizeof(chunk_desc_t)", sizeof(chunk_desc_t) },
		{ "sizeof(slab_t)", sizeof(slab_t) },
		{ "sizeof(arena_chunk_t)", sizeof(arena_chunk_t) },
		{ "REGION_DEFAULT", ck.region_default },
		{ "REGION_MIN", ck.region_min },
		{ "COMMIT_STEP", ck.commit_step },
		{ "DESC_HUGE_AFTER", ck.desc_huge_after },
		{ "NBINS", src_num("chunk.c", "define NBINS #", 0) },
		{ "REMOTE_MAX_BYTES", src_num("remote.c", "define REMOTE_MAX_BYTES ((long)# << #)", 0)
					      << src_num("remote.c", "define REMOTE_MAX_BYTES ((long)# << #)", 1) },
		{ "decay_ms", (uint64_t)conf.decay_ms },
	};
	/* The table is read line by line from the file itself: the lines
	 * starting with '|' right after the marker (blank lines between). */
	FILE *f = fopen(DOCS_DIR "/design.md", "r");
	cr_assert(f);
	char line[1024];
	bool in = false;
	unsigned rows = 0;
	while (fgets(line, sizeof(line), f)) {
		if (!in) {
			in = strstr(line, MARKER) != NULL;
			continue;
		}
		if (line[0] == '\n' && rows == 0)
			continue;
		if (line[0] != '|')
			break;
		if (strncmp(line, "| `", 3) != 0)
			continue; /* the header and the |---| line */
		const char *name = line + 3, *q = strchr(name, '`');
		cr_assert(q, "design.md's table: %s", line);
		int nlen = (int)(q - name);
		const char *cell = q + 1;
		while (*cell == ' ')
			cell++;
		cr_assert_eq(*cell, '|', "design.md's table row %.*s: no value cell", nlen, name);
		for (cell++; *cell == ' '; cell++)
			;
		uint64_t v;
		const char *e;
		cr_assert(parse_qty(cell, &v, &e), "design.md's table row %.*s: no value", nlen, name);
		bool found = false;
		for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
			if (strlen(known[i].name) != (size_t)nlen || strncmp(known[i].name, name, (size_t)nlen))
				continue;
			found = true;
			cr_expect_eq(v, known[i].value, "design.md's table: %s is %" PRIu64 ", the code has %" PRIu64,
				     known[i].name, v, known[i].value);
		}
		cr_expect(found, "design.md's table: %.*s is not a constant tests/unit/test_docs.c knows",
			  nlen, name);
		defined_in(name, nlen, strchr(cell, '|'));
		rows++;
	}
	fclose(f);
	cr_assert_gt(rows, 0, "design.md's marker is followed by no table rows");
}

/* ---- citations of design.md's sections ---------------------------------
 * Code and docs cite a section as design.md, then a comma (or not) and
 * the heading in double quotes, often across a line break of a comment.
 * Every such citation in src/, include/, tests/, docs/ and bench/ must
 * name a heading of docs/design.md (a line starting with '#': the text
 * after the #'s and a space), so that renaming a section cannot leave its
 * citations pointing nowhere. */

#define REPO_ROOT DOCS_DIR "/.."
#define MAX_HEADINGS 256

static char *headings[MAX_HEADINGS];
static unsigned nheadings;

/* s with every run of whitespace one space, trimmed. */
static void collapse(char *s)
{
	char *w = s;
	bool space = false;
	for (const char *r = s; *r; r++) {
		if (*r == ' ' || *r == '\t' || *r == '\n' || *r == '\r') {
			space = w != s;
			continue;
		}
		if (space)
			*w++ = ' ';
		space = false;
		*w++ = *r;
	}
	*w = 0;
}

static void read_headings(void)
{
	FILE *f = fopen(DOCS_DIR "/design.md", "r");
	cr_assert(f, "cannot open docs/design.md");
	char line[1024];
	bool fence = false;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "```", 3))
			fence = !fence;
		if (fence || line[0] != '#')
			continue;
		char *h = line;
		while (*h == '#')
			h++;
		if (*h != ' ')
			continue;
		collapse(h);
		cr_assert_lt(nheadings, MAX_HEADINGS, "docs/design.md: more than %d headings",
			     MAX_HEADINGS);
		headings[nheadings++] = strdup(h);
	}
	fclose(f);
}

static bool is_heading(const char *h)
{
	for (unsigned i = 0; i < nheadings; i++)
		if (!strcmp(headings[i], h))
			return true;
	return false;
}

/* A file's text as one stream: each line without its indentation and a
 * comment marker ("*" or "#" before a space, "//"), lines joined by a
 * space; line_of[i] is the line of stream byte i.  NULL for a file that
 * holds a NUL byte (binary). */
static char *stream_of(const char *path, size_t size, unsigned **line_of)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *text = malloc(size + 1);
	size_t got = fread(text, 1, size, f);
	fclose(f);
	text[got] = 0;
	if (memchr(text, 0, got)) {
		free(text);
		return NULL;
	}
	char *s = malloc(got + 2);
	unsigned *at = malloc((got + 2) * sizeof(*at)), n = 1;
	size_t len = 0;
	for (const char *p = text; *p; n++) {
		while (*p == ' ' || *p == '\t')
			p++;
		if ((p[0] == '*' || p[0] == '#') && (p[1] == ' ' || p[1] == '\n' || !p[1]))
			p++;
		else if (p[0] == '/' && p[1] == '/')
			p += 2;
		for (; *p && *p != '\n'; p++) {
			at[len] = n;
			s[len++] = *p == '\r' || *p == '\t' ? ' ' : *p;
		}
		at[len] = n;
		s[len++] = ' ';
		if (*p)
			p++;
	}
	s[len] = 0;
	free(text);
	*line_of = at;
	return s;
}

static unsigned ncited, nunresolved;

/* Every citation in the file at path (shown as rel). */
static void check_citations(const char *path, size_t size, const char *rel)
{
	unsigned *line_of;
	char *s = stream_of(path, size, &line_of);
	if (!s)
		return;
	static const char *const forms[] = { "design.md, \"", "design.md \"" };
	for (size_t k = 0; k < sizeof(forms) / sizeof(forms[0]); k++) {
		for (const char *p = s; (p = strstr(p, forms[k])); p++) {
			const char *h = p + strlen(forms[k]), *e = strchr(h, '"');
			if (!e || e - h > 200)
				continue; /* no closing quote nearby: not a citation */
			char cited[256];
			snprintf(cited, sizeof(cited), "%.*s", (int)(e - h), h);
			collapse(cited);
			if (!cited[0])
				continue; /* a string that ends with the file name, not a citation */
			ncited++;
			if (is_heading(cited))
				continue;
			nunresolved++;
			cr_expect_fail("%s:%u: cites design.md, \"%s\", which is not a heading of "
				       "docs/design.md", rel, line_of[p - s], cited);
		}
	}
	free(s);
	free(line_of);
}

/* check_citations for every file under dir (rel: its path from the root). */
static void walk(const char *dir, const char *rel)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[4096], sub[4096];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		snprintf(sub, sizeof(sub), "%s/%s", rel, e->d_name);
		struct stat st;
		if (stat(path, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode))
			walk(path, sub);
		else if (S_ISREG(st.st_mode) && st.st_size < (8 << 20))
			check_citations(path, (size_t)st.st_size, sub);
	}
	closedir(d);
}

Test(docs, citations_name_headings)
{
	read_headings();
	cr_assert_gt(nheadings, 10, "docs/design.md: %u headings", nheadings);
	static const char *const dirs[] = { "src", "include", "tests", "docs", "bench" };
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", REPO_ROOT, dirs[i]);
		walk(path, dirs[i]);
	}
	/* the scan itself must find citations, or this test could not fail */
	cr_assert_gt(ncited, 20, "only %u citations of design.md's sections found", ncited);
	cr_expect_eq(nunresolved, 0, "%u of %u citations name no heading of design.md (listed above)",
		     nunresolved, ncited);
}

/* The documents stay short enough to read: the design, the latest
 * benchmark run and the soak method, not their history (docs/experiments/
 * and git keep it). */
static long file_bytes(const char *path)
{
	FILE *f = fopen(path, "rb");
	cr_assert(f, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fclose(f);
	return n;
}

Test(docs, sizes_stay_within_their_budgets)
{
	static const struct { const char *path; long max; } docs[] = {
		{ DOCS_DIR "/design.md", 40000 },
		{ DOCS_DIR "/benchmarks.md", 40000 },
		{ DOCS_DIR "/soak.md", 20000 },
		{ DOCS_DIR "/../tests/README.md", 12000 },
	};
	for (unsigned i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
		long n = file_bytes(docs[i].path);
		cr_assert_leq(n, docs[i].max, "%s: %ld bytes, over its %ld", docs[i].path, n, docs[i].max);
	}
}
