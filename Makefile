# libarena: `make` builds build/libarena.so and build/libarena.a;
# `make test` installs what the tests need, builds, and runs every test;
# `make bench` installs what the benchmarks need, builds, and runs the comparison.

CC      ?= cc
PREFIX  ?= /usr/local
DESTDIR ?=
# `make DEBUG=1`: the assertions of libarena's invariants compiled in
# (-DARENA_DEBUG, src/arena_assert.h), into build-debug/.  The UBSan build
# (SANITIZE=undefined, build-undefined/) and the unit tests (make check)
# always have them; the release build has none, its objects the same as
# without them.
DEBUG   ?=
DEBUG_ON := $(if $(filter-out 0,$(DEBUG))$(filter undefined,$(SANITIZE)),1)
SUFFIX  := $(if $(SANITIZE),-$(SANITIZE),$(if $(DEBUG_ON),-debug))
BUILD   := build$(SUFFIX)

WARN     := -Wall -Wextra -Werror
CFLAGS   ?= -O2 -g
# initial-exec TLS: the library is loaded by LD_PRELOAD at start-up, so its
# thread cache can live in the static TLS block (no __tls_get_addr, no malloc).
LIBFLAGS := -std=c11 $(WARN) -D_GNU_SOURCE -fPIC -ftls-model=initial-exec \
            -fvisibility=hidden -fno-builtin-malloc -Iinclude -Isrc
SAN_undefined := -fsanitize=undefined -fno-sanitize-recover=undefined
SANFLAGS := $(if $(SANITIZE),$(SAN_$(SANITIZE)),)
DBGFLAGS := $(if $(DEBUG_ON),-DARENA_DEBUG)

SRCS := $(wildcard src/*.c)
OBJS := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(SRCS))
HDRS := $(wildcard src/*.h) include/arena.h

BENCH_SRCS := $(wildcard bench/*.c)
BENCH_BINS := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRCS))
LIB_SO := $(BUILD)/libarena.so
LIB_A  := $(BUILD)/libarena.a

# The fuzzer (tests/fuzz/fuzz_alloc.c): always clang, in its own build dir.
FUZZ_CC    := clang
FUZZ_BUILD := build-fuzz$(SUFFIX)
FUZZ_OBJS  := $(patsubst src/%.c,$(FUZZ_BUILD)/obj/%.o,$(SRCS))
FUZZ_BIN   := $(FUZZ_BUILD)/fuzz_alloc
FUZZ_TIME  ?= 600
FUZZ_PKGS  := clang libclang-rt-14-dev
FUZZ_ARGS  := -max_len=4096 -rss_limit_mb=2048 -timeout=30 -print_final_stats=1

.PHONY: all test bench install clean deps-test deps-bench tests-build bench-build fuzz deps-fuzz lint ci gate deps-gate

all: $(LIB_SO) $(LIB_A)

$(BUILD)/obj/%.o: src/%.c $(HDRS) | $(BUILD)/obj
	$(CC) $(CFLAGS) $(LIBFLAGS) $(SANFLAGS) $(DBGFLAGS) -c -o $@ $<

$(BUILD)/obj $(BUILD)/tests $(BUILD)/tests/progs $(BUILD)/bench:
	mkdir -p $@

$(LIB_A): $(OBJS)
	rm -f $@ && ar rcs $@ $^

$(LIB_SO): $(OBJS)
	$(CC) $(CFLAGS) $(SANFLAGS) -shared -static-libgcc -Wl,-soname,libarena.so -Wl,-z,now -o $@ $^ \
		-lpthread -Wl,-Bstatic -lgcc_eh -Wl,-Bdynamic

# ---- tests -----------------------------------------------------------------
# tests/test_*.c: Criterion suites, linked with libarena.a so that every
# malloc in the test process (Criterion's own too) goes through libarena.
# tests/progs/*.c: helper programs run by the suites; progs/static_*.c are
# linked with libarena.a, the others run under LD_PRELOAD=build/libarena.so.
TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
PROG_SRCS := $(wildcard tests/progs/*.c)
PROG_BINS := $(patsubst tests/progs/%.c,$(BUILD)/tests/progs/%,$(PROG_SRCS))
TESTFLAGS := -std=gnu11 $(WARN) -O1 -g -D_GNU_SOURCE -Iinclude -Itests \
             -DARENA_SO='"$(abspath $(LIB_SO))"' \
             -DPROGS_DIR='"$(abspath $(BUILD)/tests/progs)"' \
             -DTESTS_DIR='"$(abspath tests)"' \
             -DBENCH_SRC='"$(abspath bench)"' -DBENCH_BIN='"$(abspath $(BUILD)/bench)"' \
             -DFUZZ_BIN='"$(abspath $(FUZZ_BIN))"' -DFUZZ_BUILD='"$(abspath $(FUZZ_BUILD))"'

$(BUILD)/tests/test_%: tests/test_%.c $(LIB_A) $(wildcard tests/*.h) include/arena.h | $(BUILD)/tests
	$(CC) $(TESTFLAGS) $(SANFLAGS) -o $@ $< $(LIB_A) -lcriterion -lpthread -ldl

$(BUILD)/tests/progs/static_%: tests/progs/static_%.c $(LIB_A) $(wildcard tests/*.h) | $(BUILD)/tests/progs
	$(CC) $(TESTFLAGS) $(SANFLAGS) -o $@ $< $(LIB_A) -lpthread

$(BUILD)/tests/progs/%: tests/progs/%.c $(wildcard tests/*.h) include/arena.h | $(BUILD)/tests/progs
	$(CC) $(TESTFLAGS) -o $@ $< -lpthread -ldl $(PROG_LDFLAGS)

# its pthread_key_create comes before glibc's for libarena.so
$(BUILD)/tests/progs/secure_fork: PROG_LDFLAGS := -rdynamic

tests-build: all $(TEST_BINS) $(PROG_BINS) $(BENCH_BINS) $(FUZZ_BIN)

test: deps-test
	$(MAKE) tests-build
	@status=0; $(MAKE) check || status=1; tests/run-all $(TEST_BINS) || status=1; exit $$status

# ---- unit tests of the internals: `make check` (tests/unit/, tests/README.md) ----
# tests/unit/test_*.c: Criterion suites that include src/internal.h and link
# the lower layers' objects, built with the library's flags and the
# assertions (-DARENA_DEBUG) into $(BUILD)/unit/obj/, against
# tests/unit/fake_os.c (an OS boundary with
# switches: a clock, refused reservations, failing purges and mremap)
# instead of src/os.c; test_os.c alone links the real src/os.c.  The test
# process keeps glibc's malloc.  Seconds, not minutes.
UNIT_BUILD  := $(BUILD)/unit
UNIT_SRCS   := $(wildcard tests/unit/test_*.c)
UNIT_BINS   := $(patsubst tests/unit/%.c,$(UNIT_BUILD)/%,$(UNIT_SRCS))
UNIT_LAYERS := $(patsubst %,$(UNIT_BUILD)/obj/%.o,slab arena pagemap region chunk chunk_map thp purge limit sizeclass config out prof_dump prof_stack)
UNIT_OS     := $(UNIT_BUILD)/obj/fake_os.o
UNIT_FLAGS  := -std=gnu11 $(WARN) -O1 -g -D_GNU_SOURCE -DARENA_UNIT -DARENA_DEBUG -Isrc -Itests/unit \
               -DDOCS_DIR='"$(abspath docs)"' -DSRC_DIR='"$(abspath src)"'

$(UNIT_BUILD)/obj/%.o: src/%.c $(HDRS) | $(UNIT_BUILD)/obj
	$(CC) $(CFLAGS) $(LIBFLAGS) $(SANFLAGS) -DARENA_UNIT -DARENA_DEBUG -c -o $@ $<

$(UNIT_BUILD)/obj/fake_os.o: tests/unit/fake_os.c tests/unit/fake_os.h $(HDRS) | $(UNIT_BUILD)/obj
	$(CC) $(CFLAGS) $(LIBFLAGS) $(SANFLAGS) -DARENA_UNIT -DARENA_DEBUG -Itests/unit -c -o $@ $<

$(UNIT_BUILD)/obj:
	mkdir -p $@

$(UNIT_BUILD)/test_os: UNIT_OS := $(UNIT_BUILD)/obj/os.o
$(UNIT_BINS): $(UNIT_BUILD)/%: tests/unit/%.c $(UNIT_LAYERS) $(UNIT_BUILD)/obj/fake_os.o \
		$(UNIT_BUILD)/obj/os.o $(wildcard tests/unit/*.h) $(HDRS)
	$(CC) $(UNIT_FLAGS) $(SANFLAGS) -o $@ $< $(UNIT_LAYERS) $(UNIT_OS) -lcriterion -lpthread -lm

.PHONY: check check-build
check-build: $(UNIT_BINS)

check: check-build
	@tests/run-all $(UNIT_BINS)

TEST_PKGS := libcriterion-dev python3 sqlite3 git coreutils gcc libpython3.11-testsuite \
             redis-server redis-tools google-perftools binutils $(FUZZ_PKGS)
deps-test:
	@.ci/deps $(TEST_PKGS)

# ---- static analysis: cppcheck and clang-tidy over src/ (.ci/lint, .clang-tidy), and
# the layer check (.ci/layers: no call or global use from a lower layer to a higher
# one, no cycle between files, src/X.c's functions named X_*; the order is
# docs/design.md's "Layers" block), and the history check (.ci/history: no dates,
# commit ids, issue numbers or outside paths in src/, include/, docs/design.md;
# comments at most a third of src/'s bytes) ----
lint:
	@.ci/deps cppcheck clang-tidy python3
	.ci/lint

# The layer check alone, with the table of writable globals other files use.
.PHONY: layers
layers:
	@.ci/layers --globals

# ---- CI: every gate, as CI runs them (.ci/run: lint, test, test SANITIZE=undefined,
# 2 minutes of the UBSan fuzzer); 9-11 minutes on 2 cores.
ci:
	.ci/run

# ---- fuzzing ---------------------------------------------------------------------
# tests/fuzz/fuzz_alloc.c: a libFuzzer target linked with libarena's objects,
# built by clang with coverage into $(FUZZ_BUILD)/ (whatever CC is). No ASan:
# libarena is the process's malloc, libFuzzer's own included. test_fuzz runs
# it for 20 s; `make fuzz FUZZ_TIME=seconds` as long as asked (default 600),
# new inputs into $(FUZZ_BUILD)/corpus, crashes into $(FUZZ_BUILD)/artifacts.
# -fsanitize=fuzzer needs libclang_rt.fuzzer, from libclang-rt-14-dev.
# No comparison tracing in libarena's objects: it hands libFuzzer the
# operands of every compare, the free-list key among them, which the fuzzer
# then writes into live blocks' data (a free of such a block is taken for a
# double free, as the key says it is free); a program cannot learn the key.
$(FUZZ_BUILD)/obj/%.o: src/%.c $(HDRS) | $(FUZZ_BUILD)/obj
	$(FUZZ_CC) $(CFLAGS) $(LIBFLAGS) $(SANFLAGS) $(DBGFLAGS) -fsanitize=fuzzer-no-link \
		-fno-sanitize-coverage=trace-cmp -c -o $@ $<

$(FUZZ_BUILD)/obj $(FUZZ_BUILD)/corpus $(FUZZ_BUILD)/artifacts:
	mkdir -p $@

# -fno-builtin: the checks read what the malloc family returned and the errno
# it set; clang must not assume either (it takes calloc memory for zero, and
# forwards an errno stored before aligned_alloc to a load after it).
$(FUZZ_BIN): tests/fuzz/fuzz_alloc.c $(FUZZ_OBJS) include/arena.h
	$(FUZZ_CC) -std=gnu11 $(WARN) $(CFLAGS) -D_GNU_SOURCE -Iinclude $(SANFLAGS) -fno-builtin \
		-fsanitize=fuzzer -o $@ $< $(FUZZ_OBJS) -lpthread

fuzz: deps-fuzz
	$(MAKE) $(FUZZ_BIN) $(FUZZ_BUILD)/corpus $(FUZZ_BUILD)/artifacts
	$(FUZZ_BIN) $(FUZZ_ARGS) -max_total_time=$(FUZZ_TIME) \
		-artifact_prefix=$(FUZZ_BUILD)/artifacts/ $(FUZZ_BUILD)/corpus tests/fuzz/corpus

deps-fuzz:
	@.ci/deps $(FUZZ_PKGS)

# ---- benchmarks ----------------------------------------------------------------

$(BUILD)/bench/%: bench/%.c $(wildcard bench/*.h) include/arena.h | $(BUILD)/bench
	$(CC) -std=gnu11 $(WARN) -O2 -g -D_GNU_SOURCE -o $@ $< -lpthread -lm

# bench/probes/*.c: one-off measurements behind constants in src/ (each
# file says what it measures and how it was run); built, not run, by bench.
PROBE_BINS := $(patsubst bench/probes/%.c,$(BUILD)/bench/probes/%,$(wildcard bench/probes/*.c))
$(BUILD)/bench/probes/%: bench/probes/%.c bench/probes/probe.h bench/bench.h | $(BUILD)/bench
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(WARN) -O2 -D_GNU_SOURCE -o $@ $<

bench-build: all $(BENCH_BINS) $(PROBE_BINS)

BENCH_PKGS := linux-perf libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0 gnuplot-nox python3 time gcc valgrind sqlite3 git redis-server redis-tools
bench: deps-bench
	$(MAKE) bench-build
	bench/run $(if $(FULL),--full,) $(if $(ONLY),--only $(ONLY),)
	$(if $(ONLY),,bench/instructions --docs && bench/instructions --docs --burst 1000)
	$(if $(ONLY),,bench/gate --peers --out bench/results/gate-latest.md)

deps-bench:
	@.ci/deps $(BENCH_PKGS)

# ---- the performance gate: bench/gate against bench/gate.baseline -----------------
# libarena's instructions (callgrind), page faults, system calls (perf's
# tracepoints) and peak RSS on a few rows; fails on a figure over its
# baseline's tolerance (bench/gate --help).  About a minute.
GATE_PKGS := linux-perf valgrind time
GATE_BINS := $(patsubst %,$(BUILD)/bench/%,instr_loop glibc_thread large_churn realloc_grow first_touch)
gate: deps-gate
	$(MAKE) all $(GATE_BINS)
	bench/gate

deps-gate:
	@.ci/deps $(GATE_PKGS)

# ---- install ---------------------------------------------------------------------
install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(LIB_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 include/arena.h $(DESTDIR)$(PREFIX)/include/
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
		'Name: arena' 'Description: libarena, a page-aware malloc' 'Version: 0.3.0' \
		'Libs: -L$${libdir} -larena' 'Libs.private: -lpthread -lgcc_s' 'Cflags: -I$${includedir}' \
		> $(DESTDIR)$(PREFIX)/lib/pkgconfig/arena.pc

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD)
