/* Heap profiles' formats (prof.c holds the samples): the sampling
 * arithmetic (a logarithm and an exponential without libm), a buffered
 * writer on a file descriptor (stdio allocates), the gperftools heap
 * profile text and pprof's profile.proto, encoded by hand.  Pure
 * functions: tests/unit/test_prof_fmt.c checks them against libm and a
 * decoder of its own. */
#include "internal.h"

#include <fcntl.h>
#include <unistd.h>

/* ---- arithmetic */

static double bits_double(uint64_t u)
{
	double d;
	memcpy(&d, &u, sizeof(d));
	return d;
}

static uint64_t double_bits(double d)
{
	uint64_t u;
	memcpy(&u, &d, sizeof(u));
	return u;
}

/* ln x for finite x > 0 (relative error ~1e-15): x = m 2^e with m in
 * [sqrt(1/2), sqrt(2)), ln m = 2 atanh((m - 1) / (m + 1)) by its series. */
double prof_dump_log(double x)
{
	uint64_t u = double_bits(x);
	int e = (int)((u >> 52) & 0x7ff) - 1023;
	if (e == -1023) { /* subnormal: scale up by 2^64 first */
		u = double_bits(x * 18446744073709551616.0);
		e = (int)((u >> 52) & 0x7ff) - 1023 - 64;
	}
	double m = bits_double((u & ((1ULL << 52) - 1)) | 0x3ff0000000000000ULL);
	if (m > 1.4142135623730951) {
		m /= 2;
		e++;
	}
	/* |t| <= 0.1716: terms past t^25/25 are below 1e-17 of the sum.  Horner
	 * form with the 1/(2k+1) folded in and written out: no division, no
	 * loop. */
	double t = (m - 1) / (m + 1), t2 = t * t;
	double sum = 1.0 / 25;
	sum = sum * t2 + 1.0 / 23;
	sum = sum * t2 + 1.0 / 21;
	sum = sum * t2 + 1.0 / 19;
	sum = sum * t2 + 1.0 / 17;
	sum = sum * t2 + 1.0 / 15;
	sum = sum * t2 + 1.0 / 13;
	sum = sum * t2 + 1.0 / 11;
	sum = sum * t2 + 1.0 / 9;
	sum = sum * t2 + 1.0 / 7;
	sum = sum * t2 + 1.0 / 5;
	sum = sum * t2 + 1.0 / 3;
	sum = sum * t2 + 1.0;
	return 2 * t * sum + e * 0.6931471805599453;
}

/* e^x for x in [-700, 700]: x = k ln 2 + r, |r| <= ln 2 / 2, e^r by its
 * series, times 2^k. */
double prof_dump_exp(double x)
{
	if (x < -700)
		return 0;
	if (x > 700)
		x = 700;
	double kf = x / 0.6931471805599453;
	long k = (long)(kf < 0 ? kf - 0.5 : kf + 0.5);
	double r = x - (double)k * 0.6931471805599453, sum = 1, term = 1;
	for (int i = 1; i < 20; i++) {
		term *= r / i;
		sum += term;
	}
	/* 2^k in two steps, so that k down to -1022 - 52 stays exact enough */
	long k1 = k / 2, k2 = k - k1;
	return sum * bits_double((uint64_t)(k1 + 1023) << 52) * bits_double((uint64_t)(k2 + 1023) << 52);
}

/* The factor that turns samples of size-byte blocks into estimates: a
 * Poisson process of rate 1/mean samples such a block with probability
 * 1 - e^(-size/mean), so each sample stands for 1 / (1 - e^(-size/mean)). */
double prof_dump_scale(size_t size, size_t mean)
{
	double p = 1 - prof_dump_exp(-(double)size / (double)mean);
	return p > 0 ? 1 / p : 1;
}

/* A sampling interval: exponential with the given mean, from 53 random
 * bits (u in (0, 1]). */
size_t prof_dump_interval(uint64_t random, size_t mean)
{
	double u = (double)((random >> 11) + 1) * (1.0 / 9007199254740992.0);
	double d = -prof_dump_log(u) * (double)mean;
	return d >= 1e18 ? (size_t)1e18 : (size_t)d;
}

/* ---- writer */

void prof_dump_flush(pwriter_t *w)
{
	size_t done = 0;
	while (!w->err && done < w->len) {
		ssize_t n = write(w->fd, w->buf + done, w->len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			w->err = n < 0 ? errno : EIO;
		else
			done += (size_t)n;
	}
	w->len = 0;
}

void prof_dump_bytes(pwriter_t *w, const void *p, size_t n)
{
	const char *s = p;
	while (n) {
		if (w->len == w->cap) {
			if (w->fd < 0) /* a string buffer: cut */
				return;
			prof_dump_flush(w);
		}
		size_t k = w->cap - w->len < n ? w->cap - w->len : n;
		memcpy(w->buf + w->len, s, k);
		w->len += k;
		s += k;
		n -= k;
	}
}

void prof_dump_str(pwriter_t *w, const char *s)
{
	prof_dump_bytes(w, s, strlen(s));
}

/* An unsigned number in base 10 or 16 (with 0x), right-aligned to width. */
void prof_dump_num(pwriter_t *w, uint64_t v, unsigned base, unsigned width)
{
	char d[24];
	unsigned n = 0;
	do {
		d[n++] = "0123456789abcdef"[v % base];
		v /= base;
	} while (v);
	if (base == 16)
		d[n++] = 'x', d[n++] = '0';
	for (unsigned i = n; i < width; i++)
		prof_dump_bytes(w, " ", 1);
	while (n)
		prof_dump_bytes(w, &d[--n], 1);
}

/* ---- the gperftools heap profile */

/* "heap profile: N1: S1 [N2: S2] @ heap_v2/MEAN": in-use and allocated
 * samples and bytes; pprof scales each line by 1 / (1 - e^(-average size /
 * MEAN)), exact for a line of one size, as every line here is. */
void prof_dump_heap_header(pwriter_t *w, const uint64_t totals[4], size_t mean)
{
	prof_dump_str(w, "heap profile: ");
	prof_dump_num(w, totals[0], 10, 6);
	prof_dump_str(w, ": ");
	prof_dump_num(w, totals[1], 10, 8);
	prof_dump_str(w, " [");
	prof_dump_num(w, totals[2], 10, 6);
	prof_dump_str(w, ": ");
	prof_dump_num(w, totals[3], 10, 8);
	prof_dump_str(w, "] @ heap_v2/");
	prof_dump_num(w, mean, 10, 0);
	prof_dump_str(w, "\n");
}

/* One line: samples of size-byte blocks at this stack.  pprof takes one
 * from each return address but the first, to land inside the call, so the
 * first is written minus one. */
void prof_dump_heap_line(pwriter_t *w, uint64_t inuse, uint64_t allocs, size_t size,
			 const uintptr_t *pcs, unsigned depth)
{
	prof_dump_num(w, inuse, 10, 6);
	prof_dump_str(w, ": ");
	prof_dump_num(w, inuse * size, 10, 8);
	prof_dump_str(w, " [");
	prof_dump_num(w, allocs, 10, 6);
	prof_dump_str(w, ": ");
	prof_dump_num(w, allocs * size, 10, 8);
	prof_dump_str(w, "] @");
	for (unsigned i = 0; i < depth; i++) {
		prof_dump_str(w, " ");
		prof_dump_num(w, i == 0 ? pcs[i] - 1 : pcs[i], 16, 0);
	}
	prof_dump_str(w, "\n");
}

/* The process's mappings, for pprof to find the objects. */
void prof_dump_heap_maps(pwriter_t *w)
{
	prof_dump_str(w, "\nMAPPED_LIBRARIES:\n");
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	char buf[4096];
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		prof_dump_bytes(w, buf, (size_t)n);
	}
	close(fd);
}

/* ---- profile.proto
 * Protobuf: a field is a key (number << 3 | wire type), then a varint
 * (type 0) or a length and bytes (type 2: strings, messages, packed
 * numbers).  Messages are built in a small buffer (pbuf_t). */

void prof_dump_pb_varint(pbuf_t *b, uint64_t v)
{
	while (b->len < sizeof(b->data)) {
		uint8_t byte = v & 0x7f;
		v >>= 7;
		b->data[b->len++] = (uint8_t)(byte | (v ? 0x80 : 0));
		if (!v)
			return;
	}
	b->overflow = true;
}

void prof_dump_pb_uint(pbuf_t *b, unsigned field, uint64_t v)
{
	prof_dump_pb_varint(b, (uint64_t)field << 3);
	prof_dump_pb_varint(b, v);
}

/* A packed repeated field of numbers. */
void prof_dump_pb_packed(pbuf_t *b, unsigned field, const uint64_t *v, unsigned n)
{
	unsigned len = 0;
	for (unsigned i = 0; i < n; i++) {
		uint64_t x = v[i];
		do {
			len++;
			x >>= 7;
		} while (x);
	}
	prof_dump_pb_varint(b, (uint64_t)field << 3 | 2);
	prof_dump_pb_varint(b, len);
	for (unsigned i = 0; i < n; i++)
		prof_dump_pb_varint(b, v[i]);
}

/* An embedded message (or bytes) as field of the message in b. */
void prof_dump_pb_embed(pbuf_t *b, unsigned field, const void *data, size_t n)
{
	prof_dump_pb_varint(b, (uint64_t)field << 3 | 2);
	prof_dump_pb_varint(b, n);
	if (b->len + n > sizeof(b->data)) {
		b->overflow = true;
		return;
	}
	memcpy(b->data + b->len, data, n);
	b->len += n;
}

/* Field `field` of the top-level message: m's bytes, written out. */
void prof_dump_message(pwriter_t *w, unsigned field, const pbuf_t *m)
{
	pbuf_t k = { .len = 0 };
	prof_dump_pb_varint(&k, (uint64_t)field << 3 | 2);
	prof_dump_pb_varint(&k, m->len);
	prof_dump_bytes(w, k.data, k.len);
	prof_dump_bytes(w, m->data, m->len);
}

/* A string of the table (field 6 of Profile). */
void prof_dump_pstring(pwriter_t *w, const char *s, size_t n)
{
	pbuf_t k = { .len = 0 };
	prof_dump_pb_varint(&k, 6 << 3 | 2);
	prof_dump_pb_varint(&k, n);
	prof_dump_bytes(w, k.data, k.len);
	prof_dump_bytes(w, s, n);
}
