/* Heap profiles (docs/profiling.md; docs/design.md, "Heap profiles"): a
 * Poisson process of mean prof_sample bytes cuts what a thread allocates;
 * a block holding a point is sampled (probability 1 - e^(-size/mean)) and
 * stands for 1 / (1 - e^(-size/mean)) blocks.  Cached classes keep one
 * process per class and thread (prof_cache.c), others one per thread
 * (prof_big).  Stacks are interned; a site is a stack and a size; a record
 * maps a sampled block to its site.  All under prof_mtx, which frees take
 * only when a lock-free filter (prof_filter) says they may. */
#include "internal.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

START_UP bool prof_on; /* with the start-up globals */

#define STACKS_LOG 14
#define SITES_LOG 16
#define RECS_LOG 18

typedef struct pstack {
	uint64_t hash;
	uint32_t depth; /* 0: empty slot */
	uint32_t pad;
	uintptr_t pc[PROF_FRAMES];
} pstack_t;

typedef struct psite {
	uint32_t stack; /* index + 1; 0: empty slot */
	uint32_t pad;
	size_t size;
	uint64_t inuse, allocs; /* samples */
} psite_t;

typedef struct prec {
	uintptr_t ptr; /* 0: empty slot */
	uint64_t site;
} prec_t;

/* prof_mtx: a futex lock (0 free, 1 held, 2 maybe waited for). */
static atomic_uint prof_mtx;
#ifdef ARENA_DEBUG
/* Its holder (pthread_self), for the tables' lock assertions. */
static uintptr_t prof_owner;
#define PROF_ASSERT_LOCKED() \
	ARENA_ASSERT(__atomic_load_n(&prof_owner, __ATOMIC_RELAXED) == (uintptr_t)pthread_self())
#else
#define PROF_ASSERT_LOCKED() ((void)0)
#endif

static __attribute__((noinline)) void mtx_wait(void)
{
	while (atomic_exchange_explicit(&prof_mtx, 2, memory_order_acquire) != 0)
		os_wait(&prof_mtx, 2, UINT64_MAX);
}

static inline void mtx_lock(void)
{
	unsigned free_word = 0;
	if (unlikely(!atomic_compare_exchange_strong_explicit(&prof_mtx, &free_word, 1,
							      memory_order_acquire,
							      memory_order_relaxed)))
		mtx_wait();
#ifdef ARENA_DEBUG
	ARENA_ASSERT(__atomic_load_n(&prof_owner, __ATOMIC_RELAXED) == 0);
	__atomic_store_n(&prof_owner, (uintptr_t)pthread_self(), __ATOMIC_RELAXED);
#endif
}

static inline void mtx_unlock(void)
{
	PROF_ASSERT_LOCKED();
#ifdef ARENA_DEBUG
	__atomic_store_n(&prof_owner, 0, __ATOMIC_RELAXED);
#endif
	if (unlikely(atomic_exchange_explicit(&prof_mtx, 0, memory_order_release) == 2))
		os_wake(&prof_mtx);
}
static pstack_t *stacks;
static psite_t *sites;
static prec_t *recs;
atomic_uint *prof_filter;
/* By block address: a sampled block's page neighbours learn without
 * prof_mtx that they have no record. */
static atomic_uint *block_filter;

static atomic_uint *block_filter_of(const void *p)
{
	return &block_filter[(((uintptr_t)p >> 4) * 0x9e3779b97f4a7c15ULL) >> (64 - PROF_FILTER_LOG)];
}

/* false: p certainly has no record */
bool prof_block_maybe_sampled(const void *p)
{
	return atomic_load_explicit(block_filter_of(p), memory_order_acquire) != 0;
}

static size_t nstacks, nsites, nrecs;
static uint64_t ndropped;        /* a table full, or re-entered */
static size_t mean;              /* prof_sample */
/* prof_interval: the in-use estimate at which the next dump is due */
static double inuse_est, next_dump_at;
static atomic_uint dump_seq;     /* N of PATH.PID.N.heap */

static _Thread_local uint64_t rng __attribute__((tls_model("initial-exec")));
static _Thread_local bool busy __attribute__((tls_model("initial-exec")));
static _Thread_local size_t big_left __attribute__((tls_model("initial-exec")));
static _Thread_local bool big_ready __attribute__((tls_model("initial-exec")));

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static atomic_ulong seeds;

size_t prof_draw(void)
{
	if (unlikely(rng == 0))
		rng = mix((uintptr_t)&rng ^ os_now_ms() ^ ((uint64_t)getpid() << 32) ^
			  atomic_fetch_add(&seeds, 0x9e3779b97f4a7c15ULL)) | 1;
	rng ^= rng >> 12; /* xorshift64* */
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return prof_dump_interval(rng * 0x2545f4914f6cdd1dULL, mean);
}

void prof_init(uintptr_t self_lo, uintptr_t self_hi)
{
	if (!cfg->prof && !cfg->prof_dump[0] && !cfg->prof_leak && !cfg->prof_interval)
		return;
	mean = cfg->prof_sample;
	stacks = os_map_meta(sizeof(pstack_t) << STACKS_LOG);
	sites = os_map_meta(sizeof(psite_t) << SITES_LOG);
	recs = os_map_meta(sizeof(prec_t) << RECS_LOG);
	prof_filter = os_map_meta(sizeof(atomic_uint) << PROF_FILTER_LOG);
	block_filter = os_map_meta(sizeof(atomic_uint) << PROF_FILTER_LOG);
	if (!stacks || !sites || !recs || !prof_filter || !block_filter) {
		out_printf("libarena: prof: no memory for the profile's tables, profiling off\n");
		return;
	}
	next_dump_at = (double)cfg->prof_interval;
	/* free's fast path checks the slab checks' second copy, set before any
	 * slab is */
	for (unsigned c = 0; c < NSMALL; c++)
		slab_checks[NCACHED + c + 1] = slab_checks[c + 1];
	sc_tables.entry_off = PROF_FREED_OFF;
	busy = true;
	prof_stack_init(self_lo, self_hi);
	busy = false;
	prof_on = true;
}

/* ---- tables (caller holds prof_mtx) ------------------------------------------ */

/* A multiply and a rotate per frame, mixed once at the end. */
static uint64_t stack_hash(const uintptr_t *pcs, unsigned n)
{
	uint64_t h = n;
	for (unsigned i = 0; i < n; i++) {
		h = (h ^ pcs[i]) * 0x9e3779b97f4a7c15ULL;
		h = h << 29 | h >> 35;
	}
	return mix(h) | 1;
}

/* The index of the stack, added if new; -1 when the table is full. */
static long stack_intern(const uintptr_t *pcs, unsigned n)
{
	size_t mask = ((size_t)1 << STACKS_LOG) - 1;
	uint64_t h = stack_hash(pcs, n);
	PROF_ASSERT_LOCKED();
	ARENA_ASSERT(n <= PROF_FRAMES);
	for (size_t i = h & mask;; i = (i + 1) & mask) {
		pstack_t *s = &stacks[i];
		if (s->depth == 0) {
			if (nstacks >= mask * 3 / 4)
				return -1;
			s->hash = h;
			s->depth = n ? n : 1; /* an empty stack is kept as one 0 */
			memcpy(s->pc, pcs, n * sizeof(pcs[0]));
			if (!n)
				s->pc[0] = 0;
			nstacks++;
			return (long)i;
		}
		if (s->hash == h && s->depth == (n ? n : 1) && memcmp(s->pc, pcs, n * sizeof(pcs[0])) == 0)
			return (long)i;
	}
}

static psite_t *site_intern(size_t stack, size_t size)
{
	PROF_ASSERT_LOCKED();
	ARENA_ASSERT(stack < ((size_t)1 << STACKS_LOG) && stacks[stack].depth != 0);
	size_t mask = ((size_t)1 << SITES_LOG) - 1;
	for (size_t i = mix(stack * 0x9e3779b97f4a7c15ULL ^ size) & mask;; i = (i + 1) & mask) {
		psite_t *s = &sites[i];
		if (s->stack == 0) {
			if (nsites >= mask * 3 / 4)
				return NULL;
			s->stack = (uint32_t)stack + 1;
			s->size = size;
			nsites++;
			return s;
		}
		if (s->stack == stack + 1 && s->size == size)
			return s;
	}
}

static size_t rec_slot(uintptr_t p)
{
	return mix(p) >> (64 - RECS_LOG);
}

static bool rec_insert(uintptr_t p, size_t site)
{
	PROF_ASSERT_LOCKED();
	ARENA_ASSERT(p != 0 && site < ((size_t)1 << SITES_LOG) && sites[site].stack != 0);
	size_t mask = ((size_t)1 << RECS_LOG) - 1;
	if (nrecs >= mask * 3 / 4)
		return false;
	size_t i = rec_slot(p);
	while (recs[i].ptr)
		i = (i + 1) & mask;
	recs[i].ptr = p;
	recs[i].site = site;
	nrecs++;
	atomic_fetch_add_explicit(prof_filter_of((void *)p), 1, memory_order_release);
	atomic_fetch_add_explicit(block_filter_of((void *)p), 1, memory_order_release);
	return true;
}

/* Removes p's record, moving back the probed entries after it; its site,
 * or -1. */
static long rec_remove(uintptr_t p)
{
	PROF_ASSERT_LOCKED();
	size_t mask = ((size_t)1 << RECS_LOG) - 1;
	size_t i = rec_slot(p);
	while (recs[i].ptr && recs[i].ptr != p)
		i = (i + 1) & mask;
	if (!recs[i].ptr)
		return -1;
	long site = (long)recs[i].site;
	for (size_t j = (i + 1) & mask; recs[j].ptr; j = (j + 1) & mask) {
		size_t home = rec_slot(recs[j].ptr);
		/* j's entry may fill the hole at i if its home is not in (i, j] */
		if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
			recs[i] = recs[j];
			i = j;
		}
	}
	recs[i].ptr = 0;
	ARENA_ASSERT(nrecs > 0 && sites[site].inuse > 0);
	nrecs--;
	atomic_fetch_sub_explicit(prof_filter_of((void *)p), 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(block_filter_of((void *)p), 1, memory_order_relaxed);
	return site;
}

static double site_bytes(const psite_t *s, uint64_t n)
{
	return (double)n * (double)s->size * prof_dump_scale(s->size, mean);
}

/* The in-use estimate, for prof_interval only. */
static void inuse_add(const psite_t *s, double sign)
{
	PROF_ASSERT_LOCKED();
	if (cfg->prof_interval)
		inuse_est += sign * site_bytes(s, 1);
}

/* ---- sampling */

static bool interval_due(void)
{
	PROF_ASSERT_LOCKED();
	if (!cfg->prof_interval || inuse_est < next_dump_at)
		return false;
	next_dump_at = inuse_est + (double)cfg->prof_interval;
	return true;
}

/* Sampling off for this thread until prof_resume: what libarena allocates
 * for itself through malloc is not the program's. */
bool prof_pause(void)
{
	bool was = busy;
	busy = true;
	return was;
}

void prof_resume(bool was)
{
	busy = was;
}

/* A sample is about to be taken: false (dropped) inside the unwinder, a
 * dump or prof_pause; else busy until prof_record. */
bool prof_take(void)
{
	if (busy) {
		__atomic_fetch_add(&ndropped, 1, __ATOMIC_RELAXED);
		return false;
	}
	busy = true;
	return true;
}

/* p's record, with stack pcs (n frames) or the tag (index + 1) of the
 * stack interned at the same walk before (stacks are never removed).  With
 * word (p's page's), PROF_SAMPLED_BIT is set under prof_mtx. */
void prof_record(void *p, size_t size, uint64_t *word, const uintptr_t *pcs, unsigned n,
		 uint64_t tag)
{
	bool dump = false;
	mtx_lock();
	long st = tag ? (long)tag - 1 : stack_intern(pcs, n);
	if (!tag && st >= 0)
		prof_stack_backtrace_tag((uint64_t)st + 1);
	psite_t *s = st >= 0 ? site_intern((size_t)st, size) : NULL;
	if (s && rec_insert((uintptr_t)p, (size_t)(s - sites))) {
		s->inuse++;
		s->allocs++;
		inuse_add(s, 1);
		dump = interval_due();
		if (word)
			__atomic_store_n(word, __atomic_load_n(word, __ATOMIC_RELAXED) | PROF_SAMPLED_BIT,
					 __ATOMIC_RELAXED);
	} else {
		__atomic_fetch_add(&ndropped, 1, __ATOMIC_RELAXED);
	}
	mtx_unlock();
	if (dump)
		(void)prof_save(NULL);
	busy = false;
}

/* p was sampled: its stack and record. */
void prof_sampled(void *p, size_t size, uint64_t *word)
{
	if (!prof_take())
		return;
	uintptr_t pcs[PROF_FRAMES];
	uint64_t tag;
	unsigned n = prof_stack_backtrace_tagged(pcs, PROF_FRAMES, &tag);
	prof_record(p, size, word, pcs, n, tag);
}

/* Blocks no cache holds: counted down here, per thread. */
void prof_big(void *p, size_t size)
{
	if (unlikely(!big_ready)) {
		big_left = prof_draw();
		big_ready = true;
	}
	if (big_left >= size) {
		big_left -= size;
		return;
	}
	big_left = prof_draw();
	prof_sampled(p, size, NULL);
}

/* p is being freed: its record goes; a tagged page word loses the bit
 * once no sampled block may start there (under prof_mtx). */
void prof_free_page(void *p, uint64_t *word)
{
	bool refused = word && (__atomic_load_n(word, __ATOMIC_RELAXED) & PROF_SAMPLED_BIT);
	if (refused) { /* not sampled, and the page may still hold a sampled block */
		if (!prof_block_maybe_sampled(p) &&
		    atomic_load_explicit(prof_filter_of(p), memory_order_relaxed) != 0)
			return;
	} else if (atomic_load_explicit(prof_filter_of(p), memory_order_acquire) == 0) {
		return;
	}
	mtx_lock();
	long site = rec_remove((uintptr_t)p);
	if (site >= 0) {
		sites[site].inuse--;
		inuse_add(&sites[site], -1);
	}
	if (refused && atomic_load_explicit(prof_filter_of(p), memory_order_relaxed) == 0)
		__atomic_store_n(word, __atomic_load_n(word, __ATOMIC_RELAXED) & ~PROF_SAMPLED_BIT,
				 __ATOMIC_RELAXED);
	mtx_unlock();
}

void prof_free(void *p)
{
	prof_free_page(p, NULL);
}

/* realloc moved block old to new (huge blocks moved by mremap). */
void prof_moved(void *old, void *new)
{
	if (atomic_load_explicit(prof_filter_of(old), memory_order_acquire) == 0)
		return;
	mtx_lock();
	long site = rec_remove((uintptr_t)old);
	if (site >= 0 && !rec_insert((uintptr_t)new, (size_t)site)) {
		sites[site].inuse--;
		inuse_add(&sites[site], -1);
	}
	mtx_unlock();
}

/* ---- fork */

void prof_lock(void)
{
	if (prof_on)
		mtx_lock();
}

void prof_unlock(void)
{
	if (prof_on)
		mtx_unlock();
}

/* The child keeps the samples and numbers its dumps from 0. */
void prof_after_fork_child(void)
{
	atomic_store(&dump_seq, 0);
	prof_stack_after_fork_child();
}

/* ---- dumps */

/* Mapped at the first dump, not in .bss among the start-up globals. */
#define WBUF_BYTES ((size_t)1 << 16)
static char *wbuf;

static void write_heap(pwriter_t *w)
{
	uint64_t totals[4] = { 0, 0, 0, 0 };
	for (size_t i = 0; i < ((size_t)1 << SITES_LOG); i++) {
		const psite_t *s = &sites[i];
		if (!s->stack)
			continue;
		totals[0] += s->inuse, totals[1] += s->inuse * s->size;
		totals[2] += s->allocs, totals[3] += s->allocs * s->size;
	}
	prof_dump_heap_header(w, totals, mean);
	for (size_t i = 0; i < ((size_t)1 << SITES_LOG); i++) {
		const psite_t *s = &sites[i];
		if (!s->stack)
			continue;
		const pstack_t *st = &stacks[s->stack - 1];
		prof_dump_heap_line(w, s->inuse, s->allocs, s->size, st->pc, st->depth);
	}
	prof_dump_heap_maps(w);
}

/* ---- profile.proto -- */

typedef struct pmap {
	uintptr_t start, limit, offset;
	uint64_t name; /* string index */
} pmap_t;

#define PROTO_MAPS 512
#define LOC_LOG 20

/* The executable mappings, as Mapping messages (names from first_string). */
static unsigned proto_mappings(pwriter_t *w, pmap_t *maps, uint64_t first_string)
{
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	static char line[4096];
	char buf[4096];
	size_t len = 0;
	unsigned n = 0;
	for (;;) {
		ssize_t got = read(fd, buf, sizeof(buf));
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		for (ssize_t i = 0; i < got; i++) {
			if (buf[i] != '\n') {
				if (len < sizeof(line) - 1)
					line[len++] = buf[i];
				continue;
			}
			line[len] = 0;
			len = 0;
			/* start-limit perms offset dev inode path */
			char *s = line;
			uintptr_t v[3] = { 0, 0, 0 };
			for (int k = 0; k < 3; k++) {
				while (*s == '-' || *s == ' ')
					s++;
				if (k == 2) { /* the permissions */
					bool x = s[2] == 'x';
					while (*s && *s != ' ')
						s++;
					while (*s == ' ')
						s++;
					if (!x)
						goto next;
				}
				for (; (*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f'); s++)
					v[k] = v[k] * 16 + (uintptr_t)(*s <= '9' ? *s - '0' : *s - 'a' + 10);
			}
			for (int k = 0; k < 2; k++) { /* dev, inode */
				while (*s == ' ')
					s++;
				while (*s && *s != ' ')
					s++;
			}
			while (*s == ' ')
				s++;
			if (n < PROTO_MAPS) {
				pmap_t *m = &maps[n];
				m->start = v[0], m->limit = v[1], m->offset = v[2];
				m->name = first_string + n;
				prof_dump_pstring(w, s, strlen(s));
				pbuf_t b = { .len = 0 };
				prof_dump_pb_uint(&b, 1, n + 1);
				prof_dump_pb_uint(&b, 2, m->start);
				prof_dump_pb_uint(&b, 3, m->limit);
				prof_dump_pb_uint(&b, 4, m->offset);
				prof_dump_pb_uint(&b, 5, m->name);
				prof_dump_message(w, 3, &b);
				n++;
			}
		next:;
		}
	}
	close(fd);
	return n;
}

/* A location per distinct address: id from a table of addresses. */
typedef struct ploc {
	uintptr_t pc;
	uint64_t id;
} ploc_t;

static uint64_t loc_id(pwriter_t *w, ploc_t *locs, uint64_t *nlocs, const pmap_t *maps,
		       unsigned nmaps, uintptr_t pc)
{
	size_t mask = ((size_t)1 << LOC_LOG) - 1;
	size_t i = mix(pc) & mask;
	for (; locs[i].pc; i = (i + 1) & mask)
		if (locs[i].pc == pc)
			return locs[i].id;
	if (*nlocs >= mask / 2)
		return 0;
	locs[i].pc = pc;
	locs[i].id = ++*nlocs;
	pbuf_t b = { .len = 0 };
	prof_dump_pb_uint(&b, 1, locs[i].id);
	for (unsigned m = 0; m < nmaps; m++)
		if (pc >= maps[m].start && pc < maps[m].limit) {
			prof_dump_pb_uint(&b, 2, m + 1);
			break;
		}
	prof_dump_pb_uint(&b, 3, pc);
	prof_dump_message(w, 4, &b);
	return locs[i].id;
}

static void write_proto(pwriter_t *w)
{
	static const char *const names[] = { "", "alloc_objects", "count", "alloc_space", "bytes",
					     "inuse_objects", "inuse_space", "space" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		prof_dump_pstring(w, names[i], strlen(names[i]));
	static const uint8_t type_name[4] = { 1, 3, 5, 6 }, type_unit[4] = { 2, 4, 2, 4 };
	for (unsigned t = 0; t < 4; t++) { /* sample types: type, unit */
		pbuf_t b = { .len = 0 };
		prof_dump_pb_uint(&b, 1, type_name[t]);
		prof_dump_pb_uint(&b, 2, type_unit[t]);
		prof_dump_message(w, 1, &b);
	}
	pbuf_t pt = { .len = 0 };
	prof_dump_pb_uint(&pt, 1, 7);
	prof_dump_pb_uint(&pt, 2, 4);
	prof_dump_message(w, 11, &pt);
	pbuf_t per = { .len = 0 };
	prof_dump_pb_uint(&per, 12, mean);
	prof_dump_bytes(w, per.data, per.len);

	size_t maps_bytes = ALIGN_UP(sizeof(pmap_t) * PROTO_MAPS, PAGE_SIZE);
	size_t locs_bytes = sizeof(ploc_t) << LOC_LOG;
	pmap_t *maps = os_map_meta(maps_bytes);
	ploc_t *locs = os_map_meta(locs_bytes);
	if (!maps || !locs) {
		w->err = ENOMEM;
	} else {
		unsigned nmaps = proto_mappings(w, maps, sizeof(names) / sizeof(names[0]));
		uint64_t nlocs = 0;
		for (size_t i = 0; i < ((size_t)1 << SITES_LOG); i++) {
			const psite_t *s = &sites[i];
			if (!s->stack)
				continue;
			const pstack_t *st = &stacks[s->stack - 1];
			uint64_t ids[PROF_FRAMES];
			unsigned n = 0;
			for (unsigned k = 0; k < st->depth; k++) {
				/* return addresses: one back, inside the call */
				uint64_t id = st->pc[k] ? loc_id(w, locs, &nlocs, maps, nmaps, st->pc[k] - 1) : 0;
				if (id)
					ids[n++] = id;
			}
			double f = prof_dump_scale(s->size, mean);
			uint64_t v[4] = {
				(uint64_t)((double)s->allocs * f + 0.5),
				(uint64_t)((double)s->allocs * (double)s->size * f + 0.5),
				(uint64_t)((double)s->inuse * f + 0.5),
				(uint64_t)((double)s->inuse * (double)s->size * f + 0.5),
			};
			pbuf_t b = { .len = 0 };
			prof_dump_pb_packed(&b, 1, ids, n);
			prof_dump_pb_packed(&b, 2, v, 4);
			pbuf_t label = { .len = 0 }; /* key "bytes", num: the block size */
			prof_dump_pb_uint(&label, 1, 4);
			prof_dump_pb_uint(&label, 3, s->size);
			prof_dump_pb_embed(&b, 3, label.data, label.len);
			if (!b.overflow)
				prof_dump_message(w, 2, &b);
		}
	}
	if (maps)
		os_unmap(maps, maps_bytes);
	if (locs)
		os_unmap(locs, locs_bytes);
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The profile to path: profile.proto for .pb or .pb.gz (uncompressed),
 * else the gperftools text.  0 or an errno value. */
static int dump_to(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return errno;
	mtx_lock();
	if (!wbuf && !(wbuf = os_map_meta(WBUF_BYTES))) {
		mtx_unlock();
		close(fd);
		return ENOMEM;
	}
	pwriter_t w = { .fd = fd, .buf = wbuf, .cap = WBUF_BYTES, .len = 0, .err = 0 };
	if (ends_with(path, ".pb") || ends_with(path, ".pb.gz"))
		write_proto(&w);
	else
		write_heap(&w);
	prof_dump_flush(&w);
	mtx_unlock();
	if (close(fd) != 0 && !w.err)
		w.err = errno;
	return w.err;
}

/* PATH.PID.N.heap (PATH "arena" by default). */
static void next_name(char *out, size_t size)
{
	pwriter_t w = { .fd = -1, .buf = out, .cap = size - 1, .len = 0, .err = 0 };
	prof_dump_str(&w, cfg->prof_dump[0] ? cfg->prof_dump : "arena");
	prof_dump_str(&w, ".");
	prof_dump_num(&w, (uint64_t)getpid(), 10, 0);
	prof_dump_str(&w, ".");
	prof_dump_num(&w, atomic_fetch_add(&dump_seq, 1), 10, 0);
	prof_dump_str(&w, ".heap");
	out[w.len < size - 1 ? w.len : size - 1] = 0;
}

/* arena_prof_dump: to path, or to the next PATH.PID.N.heap (path NULL). */
int prof_save(const char *path)
{
	if (!prof_on)
		return ENOENT;
	char name[PROF_PATH_MAX + 64];
	if (!path) {
		next_name(name, sizeof(name));
		path = name;
	}
	bool was = busy;
	busy = true;
	int err = dump_to(path);
	busy = was;
	return err;
}

/* ---- at exit */

/* prof_leak: live sampled blocks by stack, largest first: sums per stack
 * and a selection (no allocation), printed after prof_mtx is released
 * (dladdr takes the loader's lock, held by dlopen while it allocates). */
#define LEAK_ROWS 20
#define LEAK_FRAMES 4

typedef struct leak_row {
	double bytes, blocks;
	unsigned depth;
	uintptr_t pc[LEAK_FRAMES];
} leak_row_t;

static void leak_report(void)
{
	size_t nst = (size_t)1 << STACKS_LOG;
	size_t scratch_bytes = ALIGN_UP(nst * 2 * sizeof(double), PAGE_SIZE);
	double *bytes = os_map_meta(scratch_bytes);
	if (!bytes)
		return;
	double *blocks = bytes + nst, total = 0;
	leak_row_t rows[LEAK_ROWS];
	unsigned nrows = 0;
	mtx_lock();
	size_t live = nrecs;
	for (size_t i = 0; i < ((size_t)1 << SITES_LOG); i++) {
		const psite_t *s = &sites[i];
		if (!s->stack || !s->inuse)
			continue;
		double b = site_bytes(s, s->inuse);
		bytes[s->stack - 1] += b;
		blocks[s->stack - 1] += (double)s->inuse * prof_dump_scale(s->size, mean);
		total += b;
	}
	for (; nrows < LEAK_ROWS; nrows++) {
		size_t best = nst;
		for (size_t st = 0; st < nst; st++)
			if (bytes[st] > 0 && (best == nst || bytes[st] > bytes[best]))
				best = st;
		if (best == nst)
			break;
		leak_row_t *r = &rows[nrows];
		r->bytes = bytes[best], r->blocks = blocks[best];
		r->depth = stacks[best].depth < LEAK_FRAMES ? stacks[best].depth : LEAK_FRAMES;
		memcpy(r->pc, stacks[best].pc, r->depth * sizeof(r->pc[0]));
		bytes[best] = 0;
	}
	mtx_unlock();
	os_unmap(bytes, scratch_bytes);
	out_printf("libarena: prof_leak: %zu bytes (estimated) still allocated at exit, "
		   "%zu sampled blocks (1 sample per %zu bytes allocated, on average)\n",
		   (size_t)total, live, mean);
	uint64_t dropped = __atomic_load_n(&ndropped, __ATOMIC_RELAXED);
	if (dropped)
		out_printf("libarena: prof_leak: %llu samples not recorded (tables full)\n",
			   (unsigned long long)dropped);
	if (nrows)
		out_printf("libarena: prof_leak:     bytes  blocks  allocated at\n");
	for (unsigned i = 0; i < nrows; i++) {
		const leak_row_t *r = &rows[i];
		char where[512];
		pwriter_t w = { .fd = -1, .buf = where, .cap = sizeof(where) - 1, .len = 0, .err = 0 };
		for (unsigned k = 0; k < r->depth; k++) {
			Dl_info info;
			if (k)
				prof_dump_str(&w, " < ");
			bool found = r->pc[k] && dladdr((void *)(r->pc[k] - 1), &info);
			if (found && info.dli_sname) {
				prof_dump_str(&w, info.dli_sname);
				prof_dump_str(&w, "+");
				prof_dump_num(&w, r->pc[k] - (uintptr_t)info.dli_saddr, 16, 0);
			} else if (found && info.dli_fname) {
				/* no symbol: the object and offset, for addr2line -f -e OBJECT OFFSET */
				const char *base = strrchr(info.dli_fname, '/');
				prof_dump_str(&w, base ? base + 1 : info.dli_fname);
				prof_dump_str(&w, "+");
				prof_dump_num(&w, r->pc[k] - 1 - (uintptr_t)info.dli_fbase, 16, 0);
			} else {
				prof_dump_num(&w, r->pc[k], 16, 0);
			}
		}
		where[w.len] = 0;
		out_printf("libarena: prof_leak: %9zu %7zu  %s\n", (size_t)r->bytes,
			   (size_t)(r->blocks + 0.5), where);
	}
}

__attribute__((destructor)) static void prof_at_exit(void)
{
	if (!prof_on)
		return;
	busy = true;
	if (cfg->prof_leak)
		leak_report();
	if (cfg->prof_dump[0] || cfg->prof_leak) {
		char name[PROF_PATH_MAX + 64];
		next_name(name, sizeof(name));
		int err = dump_to(name);
		if (err)
			out_printf("libarena: prof: profile %s not written (errno %d)\n", name, err);
		else if (cfg->prof_leak)
			out_printf("libarena: prof: profile %s written\n", name);
	}
}
