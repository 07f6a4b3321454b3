/* Stacks for heap profiles: the return addresses, walked from the DWARF
 * call-frame information, so code without frame pointers has stacks too.
 * libarena.so carries libgcc's unwinder (libgcc_eh, hidden): glibc's
 * backtrace() would dlopen libgcc_s at its first call, allocating under
 * the loader's lock.  No deadlock (docs/design.md, "Heap profiles"): with
 * glibc 2.35+ the unwinder finds FDEs with _dl_find_object, lock-free; it
 * takes object_mutex only for frames registered by hand (JITs), and its
 * one pthread_once runs in prof_stack_init, before any fork.  Nothing
 * here allocates; the unwinder's allocations go unsampled (prof.c). */
#include "internal.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>
#include <unwind.h>

/* libarena's frames, left out: its object (libarena.so), or the span of
 * its slow paths (libarena.a: the archive's objects lie together). */
static uintptr_t self_lo, self_hi;

typedef struct walk {
	uintptr_t *pcs;
	unsigned max, n;
	bool top; /* still in libarena's frames */
} walk_t;

static _Unwind_Reason_Code step(struct _Unwind_Context *ctx, void *arg)
{
	walk_t *w = arg;
	uintptr_t pc = (uintptr_t)_Unwind_GetIP(ctx);
	if (pc == 0)
		return _URC_END_OF_STACK;
	if (w->top) {
		if (pc >= self_lo && pc < self_hi)
			return _URC_NO_REASON;
		w->top = false;
	}
	if (w->n >= w->max)
		return _URC_END_OF_STACK;
	w->pcs[w->n++] = pc;
	return _URC_NO_REASON;
}

/* libgcc's walk: each frame's call-frame program interpreted again. */
static unsigned backtrace_libgcc(uintptr_t *pcs, unsigned max)
{
	walk_t w = { .pcs = pcs, .max = max, .n = 0, .top = true };
	_Unwind_Backtrace(step, &w);
	return w.n;
}

#if defined(__x86_64__)
/* ---- the same walk with the rules cached per return address
 * On x86-64 a caller follows from the CFA (rsp or rbp plus an offset), the
 * return address's offset from it, and where rbp was saved.  libgcc works
 * these out at every frame; here once per return address (rule_for), kept
 * in a table.  Anything else (an expression, a signal frame, another CFA
 * register) sends the stack to libgcc. */

struct dwarf_eh_bases { void *tbase, *dbase, *func; };
/* libgcc's since GCC 3.0, not in unwind.h */
extern const void *_Unwind_Find_FDE(void *pc, struct dwarf_eh_bases *bases); // NOLINT(bugprone-reserved-identifier,cert-dcl37-c,cert-dcl51-cpp)

enum { R_CFA_RBP = 1, R_RBP_SAVED = 2, R_END = 4, R_OTHER = 8 };
typedef struct rule {
	int32_t cfa_off; /* CFA = rsp (or rbp, R_CFA_RBP) + cfa_off */
	int16_t rbp_off; /* rbp saved at CFA + rbp_off (R_RBP_SAVED) */
	int8_t ra_off8;  /* the return address at CFA + 8 * ra_off8 */
	uint8_t flags;   /* R_END: outermost; R_OTHER: libgcc's */
} rule_t;
_Static_assert(sizeof(rule_t) == 8, "a rule is one word");

#define DW_RBP 6
#define DW_RSP 7
#define DW_RA 16

static uint64_t uleb(const uint8_t **p, const uint8_t *end)
{
	uint64_t v = 0;
	for (unsigned shift = 0; *p < end && shift < 64; shift += 7) {
		uint8_t b = *(*p)++;
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			break;
	}
	return v;
}

static int64_t sleb(const uint8_t **p, const uint8_t *end)
{
	uint64_t v = 0;
	unsigned shift = 0;
	uint8_t b = 0;
	while (*p < end && shift < 64) {
		b = *(*p)++;
		v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
		if (!(b & 0x80))
			break;
	}
	if (shift < 64 && (b & 0x40))
		v |= ~(uint64_t)0 << shift;
	return (int64_t)v;
}

/* Bytes of a pointer in encoding enc (DW_EH_PE_*), 0 when not fixed. */
static unsigned enc_size(uint8_t enc)
{
	switch (enc & 0x0f) {
	case 0x00: case 0x04: case 0x0c: return 8;
	case 0x02: case 0x0a: return 2;
	case 0x03: case 0x0b: return 4;
	default: return 0;
	}
}

/* The state of the registers that matter, row by row. */
typedef struct cfa_row {
	int64_t cfa_off, rbp_off, ra_off;
	uint8_t cfa_reg;
	uint8_t rbp_how, ra_how; /* 0 same value, 1 saved at CFA + off, 2 undefined */
} cfa_row_t;

/* advance_loc1/2/4: an n-byte little-endian delta times the code
 * alignment. */
static bool advance_loc(const uint8_t **p, const uint8_t *end, unsigned n, uint64_t code_align,
			uintptr_t *loc)
{
	uint32_t d = 0;
	if (*p + n > end)
		return false;
	memcpy(&d, *p, n);
	*loc += d * code_align;
	*p += n;
	return true;
}

/* Runs a call-frame program over row r while its address is below pc;
 * false on what this reader does not take. */
static bool run_cfa(const uint8_t *p, const uint8_t *end, cfa_row_t *r, const cfa_row_t *init,
		    uint64_t code_align, int64_t data_align, uintptr_t *loc, uintptr_t pc)
{
	cfa_row_t saved[8];
	unsigned nsaved = 0;
	while (p < end && *loc < pc) {
		uint8_t op = *p++, low = op & 0x3f;
		uint64_t reg = 0;
		int64_t off = 0;
		switch (op >> 6) {
		case 1: /* advance_loc */
			*loc += low * code_align;
			continue;
		case 2: /* offset */
			reg = low;
			off = (int64_t)uleb(&p, end) * data_align;
			goto saved_at;
		case 3: /* restore */
			reg = low;
			goto restore;
		}
		switch (op) {
		case 0x00: /* nop */
			break;
		case 0x02: /* advance_loc1 */
		case 0x03: /* advance_loc2 */
		case 0x04: /* advance_loc4 */
			if (!advance_loc(&p, end, op == 0x04 ? 4u : op - 1u, code_align, loc))
				return false;
			break;
		case 0x05: /* offset_extended */
			reg = uleb(&p, end);
			off = (int64_t)uleb(&p, end) * data_align;
			goto saved_at;
		case 0x11: /* offset_extended_sf */
			reg = uleb(&p, end);
			off = sleb(&p, end) * data_align;
			goto saved_at;
		case 0x06: /* restore_extended */
			reg = uleb(&p, end);
			goto restore;
		case 0x07: /* undefined */
			reg = uleb(&p, end);
			if (reg == DW_RBP)
				r->rbp_how = 2;
			else if (reg == DW_RA)
				r->ra_how = 2;
			break;
		case 0x08: /* same_value */
			reg = uleb(&p, end);
			if (reg == DW_RBP)
				r->rbp_how = 0;
			else if (reg == DW_RA)
				return false;
			break;
		case 0x09: /* register */
			reg = uleb(&p, end);
			(void)uleb(&p, end);
			if (reg == DW_RBP || reg == DW_RA)
				return false;
			break;
		case 0x0a: /* remember_state */
			if (nsaved == sizeof(saved) / sizeof(saved[0]))
				return false;
			saved[nsaved++] = *r;
			break;
		case 0x0b: /* restore_state */
			if (nsaved == 0)
				return false;
			*r = saved[--nsaved];
			break;
		case 0x0c: /* def_cfa */
			r->cfa_reg = (uint8_t)uleb(&p, end);
			r->cfa_off = (int64_t)uleb(&p, end);
			break;
		case 0x12: /* def_cfa_sf */
			r->cfa_reg = (uint8_t)uleb(&p, end);
			r->cfa_off = sleb(&p, end) * data_align;
			break;
		case 0x0d: /* def_cfa_register */
			r->cfa_reg = (uint8_t)uleb(&p, end);
			break;
		case 0x0e: /* def_cfa_offset */
			r->cfa_off = (int64_t)uleb(&p, end);
			break;
		case 0x13: /* def_cfa_offset_sf */
			r->cfa_off = sleb(&p, end) * data_align;
			break;
		case 0x10: /* expression */
		case 0x16: /* val_expression */
			reg = uleb(&p, end);
			off = (int64_t)uleb(&p, end);
			if (reg == DW_RBP || reg == DW_RA || off < 0 || off > end - p)
				return false;
			p += off;
			break;
		case 0x14: /* val_offset */
		case 0x15: /* val_offset_sf */
			reg = uleb(&p, end);
			(void)(op == 0x14 ? (int64_t)uleb(&p, end) : sleb(&p, end));
			if (reg == DW_RBP || reg == DW_RA)
				return false;
			break;
		case 0x2e: /* GNU_args_size */
			(void)uleb(&p, end);
			break;
		default: /* set_loc, def_cfa_expression, the rest */
			return false;
		}
		continue;
saved_at:
		if (reg == DW_RBP)
			r->rbp_how = 1, r->rbp_off = off;
		else if (reg == DW_RA)
			r->ra_how = 1, r->ra_off = off;
		continue;
restore:
		if (reg == DW_RBP)
			r->rbp_how = init->rbp_how, r->rbp_off = init->rbp_off;
		else if (reg == DW_RA)
			r->ra_how = init->ra_how, r->ra_off = init->ra_off;
	}
	return true;
}

/* The rule of the frame returning to pc, from its FDE. */
static rule_t rule_for(uintptr_t pc)
{
	rule_t other = { .flags = R_OTHER }, end_rule = { .flags = R_END };
	struct dwarf_eh_bases bases;
	const uint8_t *fde = _Unwind_Find_FDE((void *)(pc - 1), &bases);
	if (!fde)
		return end_rule; /* as libgcc: no frame information, the end */
	uint32_t len, cie_off;
	memcpy(&len, fde, 4);
	memcpy(&cie_off, fde + 4, 4);
	if (len == 0 || len == 0xffffffffu || cie_off == 0)
		return other;
	const uint8_t *fde_end = fde + 4 + len, *cie = fde + 4 - cie_off;
	uint32_t cie_len;
	memcpy(&cie_len, cie, 4);
	if (cie_len == 0 || cie_len == 0xffffffffu)
		return other;
	const uint8_t *cie_end = cie + 4 + cie_len, *p = cie + 8;
	uint8_t version = *p++;
	const char *aug = (const char *)p;
	while (p < cie_end && *p)
		p++;
	p++;
	uint64_t code_align = uleb(&p, cie_end);
	int64_t data_align = sleb(&p, cie_end);
	uint64_t ra_reg = version == 1 ? *p++ : uleb(&p, cie_end);
	uint8_t fde_enc = 0; /* absptr */
	bool has_z = aug[0] == 'z';
	if (has_z) {
		uint64_t n = uleb(&p, cie_end);
		const uint8_t *a = p;
		for (const char *c = aug + 1; *c; c++) {
			if (*c == 'R') {
				fde_enc = *a++;
			} else if (*c == 'L') {
				a++;
			} else if (*c == 'P') {
				uint8_t e = *a++;
				unsigned sz = enc_size(e);
				if (!sz || (e & 0x70) == 0x50)
					return other;
				a += sz;
			} else {
				return other; /* 'S': a signal frame; anything else */
			}
		}
		p += n;
	} else if (aug[0]) {
		return other;
	}
	if (ra_reg != DW_RA || p > cie_end)
		return other;
	unsigned psize = enc_size(fde_enc);
	if (!psize)
		return other;
	const uint8_t *q = fde + 8 + (size_t)2 * psize;
	if (has_z) {
		uint64_t n = uleb(&q, fde_end);
		q += n;
	}
	if (q > fde_end)
		return other;
	cfa_row_t r = { .cfa_reg = DW_RSP }, init;
	uintptr_t loc = (uintptr_t)bases.func;
	if (!run_cfa(p, cie_end, &r, &r, code_align, data_align, &loc, UINTPTR_MAX))
		return other;
	init = r;
	loc = (uintptr_t)bases.func;
	if (!run_cfa(q, fde_end, &r, &init, code_align, data_align, &loc, pc))
		return other;
	if (r.ra_how == 2)
		return end_rule;
	if (r.ra_how != 1 || (r.cfa_reg != DW_RSP && r.cfa_reg != DW_RBP) || r.ra_off % 8 ||
	    r.ra_off / 8 < INT8_MIN || r.ra_off / 8 > INT8_MAX || r.cfa_off < INT32_MIN ||
	    r.cfa_off > INT32_MAX || (r.rbp_how == 1 && (r.rbp_off < INT16_MIN || r.rbp_off > INT16_MAX)) ||
	    r.rbp_how == 2)
		return other;
	return (rule_t){ .cfa_off = (int32_t)r.cfa_off, .rbp_off = (int16_t)r.rbp_off,
			 .ra_off8 = (int8_t)(r.ra_off / 8),
			 .flags = (uint8_t)((r.cfa_reg == DW_RBP ? R_CFA_RBP : 0) |
					    (r.rbp_how == 1 ? R_RBP_SAVED : 0)) };
}

/* The rules: a return address in one of WAYS slots from its hash, read as
 * a sequence lock (a writer claims the key with BUSY, writes the rule,
 * then the key; a reader checks the key before and after).  Several ways:
 * one loop's return addresses must not evict each other. */
#define RULES_LOG 12
#define BUSY 1
#define WAYS 4
typedef struct rule_slot {
	atomic_ulong key;
	atomic_ulong rule;
} rule_slot_t;
static rule_slot_t *rules;

/* The rule of pc as a word, from its WAYS slots, or worked out and kept. */
static __attribute__((noinline)) uint64_t rule_slow(uintptr_t pc)
{
	size_t first = (pc * 0x9e3779b97f4a7c15ULL) >> (64 - RULES_LOG);
	rule_slot_t *s = NULL;
	uint64_t w;
	for (size_t i = 0; i < WAYS; i++) {
		rule_slot_t *t = &rules[(first + i) & (((size_t)1 << RULES_LOG) - 1)];
		uint64_t k = atomic_load_explicit(&t->key, memory_order_acquire);
		if (k == pc) {
			w = atomic_load_explicit(&t->rule, memory_order_relaxed);
			atomic_thread_fence(memory_order_acquire);
			if (atomic_load_explicit(&t->key, memory_order_relaxed) == pc)
				return w;
		}
		if (!s && k == 0)
			s = t; /* the first free slot */
	}
	if (!s) /* all taken: one of them goes */
		s = &rules[(first + (pc >> 4) % WAYS) & (((size_t)1 << RULES_LOG) - 1)];
	rule_t r = rule_for(pc);
	memcpy(&w, &r, sizeof(w));
	uint64_t old = atomic_load_explicit(&s->key, memory_order_relaxed);
	if (old != BUSY && atomic_compare_exchange_strong_explicit(&s->key, &old, BUSY,
								     memory_order_relaxed,
								     memory_order_relaxed)) {
		atomic_thread_fence(memory_order_release);
		atomic_store_explicit(&s->rule, w, memory_order_relaxed);
		atomic_store_explicit(&s->key, pc, memory_order_release);
	}
	return w;
}

/* The rule of pc: its first slot inline, else rule_slow. */
static inline uint64_t rule_word(uintptr_t pc)
{
	rule_slot_t *t = &rules[(pc * 0x9e3779b97f4a7c15ULL) >> (64 - RULES_LOG)];
	if (likely(atomic_load_explicit(&t->key, memory_order_acquire) == pc)) {
		uint64_t w = atomic_load_explicit(&t->rule, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		if (likely(atomic_load_explicit(&t->key, memory_order_relaxed) == pc))
			return w;
	}
	return rule_slow(pc);
}

/* A rule word's fields (rule_t's bytes, little-endian). */
#define W_FLAGS(w) ((unsigned)((w) >> 56))
#define W_CFA_OFF(w) ((intptr_t)(int32_t)(uint32_t)(w))
#define W_RBP_OFF(w) ((intptr_t)(int16_t)(uint16_t)((w) >> 32))
#define W_RA_OFF(w) ((intptr_t)(int8_t)(uint8_t)((w) >> 48) * 8)
_Static_assert(offsetof(rule_t, cfa_off) == 0 && offsetof(rule_t, rbp_off) == 4 &&
		       offsetof(rule_t, ra_off8) == 6 && offsetof(rule_t, flags) == 7,
	       "the rule word's layout");

/* A wrong rule stops the walk rather than read far away. */
#define FRAME_MAX ((uintptr_t)1 << 24)

enum { STEP_ON, STEP_END, STEP_OTHER };

/* ---- the last walk, per thread
 * A walk depends only on its start (the caller's return address, stack
 * pointer and rbp), the rules, and the words it reads, each address
 * following from the words before.  So a walk starting where this
 * thread's last did and finding the same words is the same walk, checked
 * a load and a compare a word, and returns the tag its caller set (prof.c:
 * the stack's index).  The entry rbp counts only when a CFA used it
 * before a saved rbp replaced it. */
#define MEMO_READS 96
#define MEMO_SLOTS 256
typedef struct memo {
	atomic_uint owner; /* 0: free */
	bool bp0_used;
	unsigned nreads, n, max;
	uintptr_t pc0, sp0, bp0; /* pc0 0: nothing kept */
	uint64_t tag;
	const uintptr_t *addr[MEMO_READS];
	uintptr_t val[MEMO_READS];
} memo_t;
static memo_t *memos;
static _Thread_local memo_t *my_memo __attribute__((tls_model("initial-exec")));
static _Thread_local bool memo_none __attribute__((tls_model("initial-exec")));

/* This thread's slot, claimed at its first walk (NULL: none left, or
 * exiting). */
static memo_t *memo_mine(void)
{
	if (likely(my_memo != NULL) || memo_none || !memos)
		return my_memo;
	memo_none = true; /* one try */
	for (unsigned i = 0; i < MEMO_SLOTS; i++) {
		unsigned free_slot = 0;
		if (atomic_compare_exchange_strong_explicit(&memos[i].owner, &free_slot, 1,
							     memory_order_relaxed, memory_order_relaxed)) {
			memos[i].pc0 = 0;
			memo_none = false;
			return my_memo = &memos[i];
		}
	}
	return NULL;
}

void prof_stack_thread_exit(void)
{
	memo_none = true; /* no slot for a later sample */
	if (my_memo) {
		my_memo->pc0 = 0;
		atomic_store_explicit(&my_memo->owner, 0, memory_order_release);
		my_memo = NULL;
	}
}

/* After fork only the forking thread lives: the other slots are free. */
void prof_stack_after_fork_child(void)
{
	if (!memos)
		return;
	for (unsigned i = 0; i < MEMO_SLOTS; i++)
		if (&memos[i] != my_memo)
			atomic_store_explicit(&memos[i].owner, 0, memory_order_relaxed);
}

static inline void memo_read(memo_t *m, const uintptr_t *a, uintptr_t v)
{
	if (m->nreads < MEMO_READS) {
		m->addr[m->nreads] = a;
		m->val[m->nreads] = v;
	}
	m->nreads++;
}

/* One frame up; the words read go into m (NULL: none); *bp_fresh false
 * while bp is the entry's. */
static inline int frame_up(uintptr_t *pc, uintptr_t *sp, uintptr_t *bp, memo_t *m,
			   bool *bp_fresh)
{
	uint64_t w = rule_word(*pc);
	unsigned f = W_FLAGS(w);
	if (unlikely(f & (R_END | R_OTHER)))
		return f & R_OTHER ? STEP_OTHER : STEP_END;
	if (f & R_CFA_RBP && m && !*bp_fresh)
		m->bp0_used = true;
	uintptr_t cfa = (f & R_CFA_RBP ? *bp : *sp) + (uintptr_t)W_CFA_OFF(w);
	/* cfa <= sp, over FRAME_MAX above it, or misaligned: the end */
	if (unlikely(cfa - *sp - 1 >= FRAME_MAX || (cfa & 7)))
		return STEP_END;
	if (f & R_RBP_SAVED) {
		const uintptr_t *a = (const uintptr_t *)(cfa + (uintptr_t)W_RBP_OFF(w));
		*bp = *a;
		*bp_fresh = true;
		if (m)
			memo_read(m, a, *bp);
	}
	const uintptr_t *a = (const uintptr_t *)(cfa + (uintptr_t)W_RA_OFF(w));
	*pc = *a;
	if (m)
		memo_read(m, a, *pc);
	*sp = cfa;
	return STEP_ON;
}

/* The walk from the caller of prof_stack_backtrace*, frame fp: its return
 * address, stack pointer and rbp are exact.  libarena's frames first, not
 * kept.  -1 when a frame needs libgcc. */
static __attribute__((noinline)) int backtrace_cached(uintptr_t *pcs, unsigned max,
						      const uintptr_t *fp, memo_t *m)
{
	uintptr_t pc = fp[1], sp = (uintptr_t)(fp + 2), bp = fp[0];
	unsigned n = 0;
	int st = STEP_ON;
	bool bp_fresh = false;
	if (m) {
		m->pc0 = 0;
		m->nreads = 0;
		m->bp0_used = false;
		m->tag = 0;
	}
	while (pc && pc - self_lo < self_hi - self_lo &&
	       (st = frame_up(&pc, &sp, &bp, m, &bp_fresh)) == STEP_ON)
		;
	while (st == STEP_ON && pc && n < max) {
		pcs[n++] = pc;
		st = frame_up(&pc, &sp, &bp, m, &bp_fresh);
	}
	if (st == STEP_OTHER)
		return -1;
	if (m && m->nreads <= MEMO_READS) {
		m->n = n;
		m->max = max;
		m->sp0 = (uintptr_t)(fp + 2);
		m->bp0 = fp[0];
		m->pc0 = fp[1];
	}
	return (int)n;
}

/* Whether a walk from fp would be m's. */
static bool memo_same(const memo_t *m, const uintptr_t *fp, unsigned max)
{
	if (m->pc0 != fp[1] || m->sp0 != (uintptr_t)(fp + 2) || m->max != max || !m->tag ||
	    (m->bp0_used && m->bp0 != fp[0]))
		return false;
	for (unsigned i = 0; i < m->nreads; i++)
		if (*m->addr[i] != m->val[i])
			return false;
	return true;
}
#endif

/* The caller's stack without libarena's frames; or, when it is this
 * thread's tagged last walk again, its frame count and *tag (else 0). */
__attribute__((noinline)) unsigned prof_stack_backtrace_tagged(uintptr_t *pcs, unsigned max,
							       uint64_t *tag)
{
	*tag = 0;
#if defined(__x86_64__)
	if (rules) {
		const uintptr_t *fp = __builtin_frame_address(0);
		memo_t *m = memo_mine();
		if (m && memo_same(m, fp, max)) {
			*tag = m->tag;
			return m->n;
		}
		int n = backtrace_cached(pcs, max, fp, m);
		if (n >= 0)
			return (unsigned)n;
	}
#endif
	return backtrace_libgcc(pcs, max);
}

/* This thread's last walk is known to its caller by tag (not 0). */
void prof_stack_backtrace_tag(uint64_t tag)
{
#if defined(__x86_64__)
	if (my_memo && my_memo->pc0)
		my_memo->tag = tag;
#else
	(void)tag;
#endif
}

/* The stack of the caller, libarena's frames left out. */
__attribute__((noinline)) unsigned prof_stack_backtrace(uintptr_t *pcs, unsigned max)
{
#if defined(__x86_64__)
	if (rules) {
		int n = backtrace_cached(pcs, max, __builtin_frame_address(0), NULL);
		if (n >= 0)
			return (unsigned)n;
	}
#endif
	return backtrace_libgcc(pcs, max);
}

/* lo..hi: libarena's code when linked into the program (libarena.a). */
void prof_stack_init(uintptr_t lo, uintptr_t hi)
{
	struct dl_find_object fo;
	if (_dl_find_object((void *)(uintptr_t)prof_stack_backtrace, &fo) == 0 && fo.dlfo_link_map &&
	    fo.dlfo_link_map->l_name && fo.dlfo_link_map->l_name[0]) {
		/* a shared object of its own: all of it */
		self_lo = (uintptr_t)fo.dlfo_map_start;
		self_hi = (uintptr_t)fo.dlfo_map_end;
	} else {
		self_lo = lo;
		self_hi = hi;
	}
	uintptr_t pcs[4];
	(void)backtrace_libgcc(pcs, 4); /* the unwinder's one-time set-up, now */
#if defined(__x86_64__)
	rules = os_map_meta(sizeof(rule_slot_t) << RULES_LOG);
	memos = os_map_meta(ALIGN_UP(sizeof(memo_t) * MEMO_SLOTS, PAGE_SIZE));
#endif
}
