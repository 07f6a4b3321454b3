/*
 * Shared helpers of the libarena test suites, by what they serve (each
 * header is static inline and can be included alone):
 *
 *  - pattern.h  blocks' contents: opaque_size/opaque_ptr/escape, pat_* fills
 *               and checks, rng_* (a small per-thread PRNG)
 *  - stress.h   multi-threaded stress tests: tfail (first failure of a
 *               worker), rec_* (blocks in flight between threads)
 *  - run.h      children: run_prog / run_prog_limited / run_fn with output
 *               captured and a timeout, child_envp, string helpers, now_s
 *  - files.h    files and temporary directories
 *  - procmem.h  this process's memory: RSS, faults, zero checks, key=value
 *               facts, THP mode, smaps
 *
 * This header includes them all (every suite includes it).
 */
#ifndef ARENA_TESTS_COMMON_H
#define ARENA_TESTS_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* libarena provides these; glibc 2.36's headers do not declare them. */
void free_sized(void *ptr, size_t size);
void free_aligned_sized(void *ptr, size_t alignment, size_t size);

#include "pattern.h"
#include "stress.h"
#include "run.h"
#include "files.h"
#include "procmem.h"

#endif /* ARENA_TESTS_COMMON_H */
