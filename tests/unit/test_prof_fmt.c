/*
 * prof_dump.c: the sampling arithmetic against libm, the intervals'
 * distribution, the writer, the gperftools heap profile lines and the
 * protobuf encoding of profile.proto's pieces (varints, packed fields,
 * embedded messages), byte for byte.
 */
#include <fcntl.h>
#include <math.h>

#include "unit.h"

Test(prof_fmt, log_and_exp_match_libm)
{
	urng_t r = { 7 };
	for (int i = 0; i < 100000; i++) {
		/* x over many magnitudes, subnormals included */
		double x = ldexp((double)(urng_next(&r) >> 11) / 9007199254740992.0 + 0.5,
				 (int)(urng_next(&r) % 2100) - 1070);
		if (x <= 0)
			continue;
		double want = log(x), got = prof_dump_log(x);
		cr_assert(fabs(got - want) <= 1e-13 * fabs(want) + 1e-14, "log(%g): %.17g, libm %.17g", x,
			  got, want);
	}
	for (double x = -700; x <= 700; x += 0.0137) {
		double want = exp(x), got = prof_dump_exp(x);
		cr_assert(fabs(got - want) <= 1e-13 * want, "exp(%g): %.17g, libm %.17g", x, got, want);
	}
	cr_assert_eq(prof_dump_exp(-800), 0);
}

/* 1 / (1 - e^(-size/mean)): about mean/size for small blocks, 1 for huge
 * ones. */
Test(prof_fmt, scale)
{
	size_t mean = 512 << 10;
	size_t sizes[] = { 16, 1024, 65536, 524288, 1 << 20, 64 << 20 };
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		double want = 1 / (1 - exp(-(double)sizes[i] / (double)mean));
		cr_assert(fabs(prof_dump_scale(sizes[i], mean) - want) < 1e-9 * want, "%zu", sizes[i]);
	}
	cr_assert(fabs(prof_dump_scale(16, mean) - 32768.5) < 0.01);
}

/* Intervals: exponential with the mean asked for (mean within 1%, the
 * share above the mean e^-1 within 1%, above 3x the mean e^-3). */
Test(prof_fmt, intervals_are_exponential)
{
	urng_t r = { 11 };
	size_t mean = 512 << 10;
	double sum = 0;
	unsigned n = 400000, above = 0, above3 = 0;
	for (unsigned i = 0; i < n; i++) {
		size_t x = prof_dump_interval(urng_next(&r), mean);
		sum += (double)x;
		above += x > mean;
		above3 += x > 3 * mean;
	}
	cr_assert(fabs(sum / n / (double)mean - 1) < 0.01, "mean %.0f", sum / n);
	cr_assert(fabs((double)above / n - exp(-1)) < 0.01, "P(> mean) %.4f", (double)above / n);
	cr_assert(fabs((double)above3 / n - exp(-3)) < 0.005, "P(> 3 mean) %.4f", (double)above3 / n);
	/* the extremes: u = 1 gives 0, u near 0 a finite interval */
	cr_assert_eq(prof_dump_interval(UINT64_MAX, mean), 0);
	cr_assert(prof_dump_interval(0, mean) > 30 * mean);
}

static char out[1 << 16];

static size_t write_to_string(void (*fn)(pwriter_t *w))
{
	char tmpl[] = "/tmp/prof-fmt-XXXXXX";
	int fd = mkstemp(tmpl);
	cr_assert(fd >= 0);
	unlink(tmpl);
	static char buf[64]; /* small: the writer flushes many times */
	pwriter_t w = { .fd = fd, .buf = buf, .cap = sizeof(buf), .len = 0, .err = 0 };
	fn(&w);
	prof_dump_flush(&w);
	cr_assert_eq(w.err, 0);
	lseek(fd, 0, SEEK_SET);
	ssize_t n = read(fd, out, sizeof(out) - 1);
	close(fd);
	cr_assert(n >= 0);
	out[n] = 0;
	return (size_t)n;
}

static void heap_sample(pwriter_t *w)
{
	uint64_t totals[4] = { 3, 3072, 10, 10240 };
	uintptr_t pcs[] = { 0x401001, 0x402002, 0x7f0000003003 };
	prof_dump_heap_header(w, totals, 524288);
	prof_dump_heap_line(w, 3, 10, 1024, pcs, 3);
	prof_dump_heap_line(w, 0, 1, 16, pcs, 1);
}

/* The lines google-pprof's parser reads: the first address one back, the
 * others as they are (pprof takes one from each of those). */
Test(prof_fmt, heap_profile_lines)
{
	write_to_string(heap_sample);
	cr_assert_str_eq(out, "heap profile:      3:     3072 [    10:    10240] @ heap_v2/524288\n"
			      "     3:     3072 [    10:    10240] @ 0x401000 0x402002 0x7f0000003003\n"
			      "     0:        0 [     1:       16] @ 0x401000\n");
}

/* A string writer (fd -1) cuts instead of flushing. */
Test(prof_fmt, string_writer_cuts)
{
	char buf[8];
	pwriter_t w = { .fd = -1, .buf = buf, .cap = sizeof(buf), .len = 0, .err = 0 };
	prof_dump_str(&w, "0123456789");
	cr_assert_eq(w.len, 8);
	cr_assert(memcmp(buf, "01234567", 8) == 0);
	cr_assert_eq(w.err, 0);
}

/* Protobuf: varints (1 -> 01, 150 -> 96 01, 300 -> ac 02, 2^64-1 -> ten
 * bytes), a field key, a packed field with its byte length, an embedded
 * message. */
Test(prof_fmt, protobuf_encoding)
{
	pbuf_t b = { .len = 0 };
	prof_dump_pb_varint(&b, 1);
	prof_dump_pb_varint(&b, 150);
	prof_dump_pb_varint(&b, 300);
	prof_dump_pb_varint(&b, UINT64_MAX);
	const uint8_t want1[] = { 0x01, 0x96, 0x01, 0xac, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff,
				  0xff, 0xff, 0xff, 0xff, 0x01 };
	cr_assert_eq(b.len, sizeof(want1));
	cr_assert(memcmp(b.data, want1, sizeof(want1)) == 0);

	pbuf_t m = { .len = 0 };
	prof_dump_pb_uint(&m, 1, 150);             /* 08 96 01 */
	uint64_t v[] = { 3, 270, 86942 };
	prof_dump_pb_packed(&m, 4, v, 3);          /* 22 06 03 8e 02 9e a7 05 */
	pbuf_t inner = { .len = 0 };
	prof_dump_pb_uint(&inner, 2, 1);           /* 10 01 */
	prof_dump_pb_embed(&m, 3, inner.data, inner.len); /* 1a 02 10 01 */
	const uint8_t want2[] = { 0x08, 0x96, 0x01, 0x22, 0x06, 0x03, 0x8e, 0x02, 0x9e, 0xa7, 0x05,
				  0x1a, 0x02, 0x10, 0x01 };
	cr_assert_eq(m.len, sizeof(want2));
	cr_assert(memcmp(m.data, want2, sizeof(want2)) == 0);
	cr_assert_not(m.overflow);

	/* a message too big for its buffer says so */
	pbuf_t big = { .len = 0 };
	static uint8_t junk[2000];
	prof_dump_pb_embed(&big, 1, junk, sizeof(junk));
	cr_assert(big.overflow);
}

static void proto_sample(pwriter_t *w)
{
	prof_dump_pstring(w, "", 0);
	prof_dump_pstring(w, "inuse_space", 11);
	pbuf_t b = { .len = 0 };
	prof_dump_pb_uint(&b, 1, 1);
	prof_dump_message(w, 1, &b);
}

/* Top-level fields: strings (field 6) and a message (field 1). */
Test(prof_fmt, protobuf_top_level)
{
	size_t n = write_to_string(proto_sample);
	const uint8_t want[] = { 0x32, 0x00, 0x32, 0x0b, 'i', 'n', 'u', 's', 'e', '_', 's', 'p',
				 'a', 'c', 'e', 0x0a, 0x02, 0x08, 0x01 };
	cr_assert_eq(n, sizeof(want));
	cr_assert(memcmp(out, want, sizeof(want)) == 0);
}
