/* Messages on stderr.  No stdio and no malloc (either may call back into the
 * allocator): a small formatter into a stack buffer, then one write(2). */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct buf {
	char text[1024];
	size_t len;
} buf_t;

static void put_char(buf_t *b, char c)
{
	if (b->len < sizeof(b->text))
		b->text[b->len++] = c;
}

static void put_str(buf_t *b, const char *s)
{
	for (s = s ? s : "(null)"; *s; s++)
		put_char(b, *s);
}

static void put_uint(buf_t *b, unsigned long long v, unsigned base)
{
	char digits[24];
	int n = 0;
	do {
		digits[n++] = "0123456789abcdef"[v % base];
		v /= base;
	} while (v);
	while (n)
		put_char(b, digits[--n]);
}

static void put_int(buf_t *b, long long v)
{
	if (v < 0) {
		put_char(b, '-');
		put_uint(b, 0ULL - (unsigned long long)v, 10);
	} else {
		put_uint(b, (unsigned long long)v, 10);
	}
}

/* Right-aligns what was written since start to width characters. */
static void pad_to(buf_t *b, size_t start, size_t width)
{
	size_t len = b->len - start;
	if (len >= width || start + width > sizeof(b->text))
		return;
	memmove(b->text + start + (width - len), b->text + start, len);
	memset(b->text + start, ' ', width - len);
	b->len = start + width;
}

/* Supports %s %c %d %u %x %p %% with a width and the l, ll and z sizes. */
void out_vprintf(const char *fmt, va_list ap)
{
	buf_t b = { .len = 0 };
	for (const char *f = fmt; *f; f++) {
		if (*f != '%') {
			put_char(&b, *f);
			continue;
		}
		int longs = 0;
		bool sz = false;
		size_t width = 0, start = b.len;
		for (f++; *f >= '0' && *f <= '9'; f++)
			width = width * 10 + (size_t)(*f - '0');
		for (; *f == 'l' || *f == 'z'; f++)
			*f == 'l' ? longs++ : (sz = true);
		switch (*f) {
		case 's': put_str(&b, va_arg(ap, const char *)); break;
		case 'c': put_char(&b, (char)va_arg(ap, int)); break;
		case 'p':
			put_str(&b, "0x");
			put_uint(&b, (uintptr_t)va_arg(ap, void *), 16);
			break;
		case 'd':
			put_int(&b, sz ? (long long)va_arg(ap, ptrdiff_t)
				: longs ? va_arg(ap, long long) : va_arg(ap, int));
			break;
		case 'u':
		case 'x': {
			unsigned long long v = sz ? va_arg(ap, size_t)
				: longs == 2 ? va_arg(ap, unsigned long long)
				: longs == 1 ? va_arg(ap, unsigned long)
				: va_arg(ap, unsigned);
			put_uint(&b, v, *f == 'x' ? 16 : 10);
			break;
		}
		case '%': put_char(&b, '%'); break;
		default: put_char(&b, '?'); break;
		}
		pad_to(&b, start, width);
		if (!*f)
			break;
	}
	int saved = errno;
	for (size_t done = 0; done < b.len;) {
		ssize_t w = write(STDERR_FILENO, b.text + done, b.len - done);
		if (w <= 0)
			break;
		done += (size_t)w;
	}
	errno = saved;
}

void out_printf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	out_vprintf(fmt, ap);
	va_end(ap);
}

/* What a misuse does (enum misuse_action): ARENA_CONF's misuse setting,
 * given by initialisation (out_set_misuse); abort until then. */
START_UP static uint8_t misuse_action = MISUSE_ABORT;

void out_set_misuse(uint8_t action)
{
	misuse_action = action;
}

/* A misuse of the API by the program (bad free and the like): reported with
 * the address, then abort, unless ARENA_CONF=misuse:warn|ignore says so. */
void out_misuse(const char *what, const void *ptr)
{
	out_misuse_in(NULL, what, ptr);
}

/* out_misuse() found by operation op (NULL: none named): "libarena: op: what". */
void out_misuse_in(const char *op, const char *what, const void *ptr)
{
	if (misuse_action == MISUSE_IGNORE)
		return;
	if (op)
		out_printf("libarena: %s: %s: %p\n", op, what, ptr);
	else
		out_printf("libarena: %s: %p\n", what, ptr);
	if (misuse_action == MISUSE_ABORT)
		abort();
}

_Noreturn void out_fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	out_printf("libarena: fatal: ");
	out_vprintf(fmt, ap);
	va_end(ap);
	abort();
}

#ifdef ARENA_DEBUG
/* A failed ARENA_ASSERT (arena_assert.h): one line, then abort. */
void out_assert_fail(const char *expr, const char *file, int line, const char *func)
{
	out_printf("libarena: assertion failed: %s:%d: %s: %s\n", file, line, func, expr);
	abort();
}
#endif
