#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_alloc (tests/fuzz/corpus/): a few short
programs in its input format (see the opcodes in run_op, fuzz_alloc.c).
Run from anywhere; the files are committed, rerun only when the format changes."""
import os

# Opcodes (the first byte of an operation, taken % 32).
MALLOC, CALLOC, REALLOC, REALLOCARRAY = 0, 8, 10, 13
ALIGNED_ALLOC, POSIX_MEMALIGN, MEMALIGN_FAMILY = 14, 15, 16
FREE, FREE_SIZED, USABLE, PURGE_OR_CHECK, REWRITE = 17, 22, 23, 24, 25
W_MALLOC, W_FREE, W_REALLOC_OR_EXIT = 26, 28, 29

EDGES = 37          # entries in edge_sizes
IMPOSSIBLE = 0      # impossible_sizes[0] is SIZE_MAX


def tiny(n):        # 0..255
    return [0, n]


def small(n):       # < 18 KiB
    return [112, n & 255, n >> 8]


def large(n):       # < 1 MiB + 64 KiB
    return [176, n & 255, (n >> 8) & 255, n >> 16]


def huge(n):        # <= 8 MiB
    return [208, n & 255, (n >> 8) & 255, n >> 16]


def edge(i, delta=0):
    return [228, i, delta + 8]


def impossible(i=IMPOSSIBLE):
    return [252, i]


def align(log2):    # 16 << (log2 - 4), log2 in 4..20
    return [log2 - 4]


def bad_align(i):   # bad_aligns[i]
    return [232 + (i - 232 % 14) % 14]


seeds = {
    "small_churn": (
        [MALLOC] + tiny(0) + [MALLOC] + tiny(24) + [MALLOC] + tiny(200) + [MALLOC] + small(5000)
        + [FREE, 1] + [MALLOC] + tiny(24) + [USABLE, 0] + [FREE_SIZED, 0] + [FREE_SIZED, 0]
        + [FREE, 0]),
    "calloc_realloc": (
        [CALLOC] + small(3000) + [4] + [REALLOC, 1, 0] + small(9000)
        + [REALLOC, 1, 0] + large(300000) + [REALLOC, 1, 0] + huge(3 << 20)
        + [REALLOC, 1, 0] + tiny(100) + [REALLOCARRAY, 1, 0] + small(4096) + [4]
        + [REALLOC, 1, 0] + tiny(0) + [CALLOC] + huge(5 << 20) + [1]),
    "aligned": (
        [ALIGNED_ALLOC] + align(4) + tiny(10) + [ALIGNED_ALLOC] + align(12) + small(100)
        + [POSIX_MEMALIGN] + align(16) + large(70000) + [POSIX_MEMALIGN] + align(20) + tiny(1)
        + [MEMALIGN_FAMILY, 0] + align(13) + huge(3 << 20)
        + [MEMALIGN_FAMILY, 1, 0] + small(5000) + [MEMALIGN_FAMILY, 2, 0] + tiny(0)
        + [ALIGNED_ALLOC] + bad_align(3) + tiny(5) + [POSIX_MEMALIGN] + bad_align(2) + tiny(5)
        + [MEMALIGN_FAMILY, 0] + bad_align(6) + small(1000)
        + [PURGE_OR_CHECK, 2] + [FREE, 2] + [FREE, 0]),
    "huge_and_trim": (
        [MALLOC] + edge(29) + [MALLOC] + edge(30, 1) + [MALLOC] + huge(8 << 20)
        + [FREE, 1] + [PURGE_OR_CHECK, 0] + [REALLOC, 1, 0] + huge(7 << 20)
        + [REALLOC, 1, 1] + edge(25) + [PURGE_OR_CHECK, 1] + [REWRITE, 0] + [USABLE, 1]),
    "threads": (
        [W_MALLOC, 0] + tiny(64) + [W_MALLOC, 1] + small(6000) + [MALLOC] + tiny(64)
        + [W_FREE, 1, 2] + [W_REALLOC_OR_EXIT, 0, 0] + large(200000) + [FREE, 0]
        + [W_REALLOC_OR_EXIT, 0x80] + [W_MALLOC, 0] + tiny(48) + [W_REALLOC_OR_EXIT, 0x81]
        + [W_FREE, 1, 0]),
    # a worker frees 70 of the main thread's blocks (a transfer batch home at
    # 64, the rest at its exit), then the main thread's refills take them
    "transfer_batch": (
        ([MALLOC] + tiny(48)) * 70 + [W_FREE, 0, 0] * 70 + [W_REALLOC_OR_EXIT, 0x80]
        + ([MALLOC] + tiny(48)) * 70 + [FREE, 0] * 70),
    "impossible": (
        [MALLOC] + impossible(0) + [MALLOC] + impossible(8) + [CALLOC] + tiny(10) + [250]
        + [MALLOC] + tiny(40) + [REALLOC, 1, 0] + impossible(3) + [REALLOCARRAY, 1, 0] + tiny(8)
        + [245] + [ALIGNED_ALLOC] + align(6) + impossible(5) + [POSIX_MEMALIGN] + align(12)
        + impossible(1) + [MEMALIGN_FAMILY, 1, 0] + impossible(2) + [FREE, 0]),
}

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
os.makedirs(out, exist_ok=True)
for name, ops in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes(ops))
