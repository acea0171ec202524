"""Process-wide allocator settings for s3stream's own processes (the CLI, ``serve``, the benchmarks).

glibc raises its mmap threshold each time a large block is freed (up to 32 MiB), after which blocks of
hundreds of KiB to MiBs (append batches, WAL entries, GET bodies) come from its heaps instead, where
freed space is kept and fragments: ~80 MiB of RSS in the ingest benchmark. Pinning the threshold at
128 KiB (glibc's default starting point) returns large blocks to the OS when freed. A library must
not change its host's allocator, so :func:`s3stream.open_store` never calls this; users embedding
s3stream can set ``MALLOC_MMAP_THRESHOLD_=131072`` in the environment for the same effect.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["MMAP_THRESHOLD_BYTES", "allocator_setting", "tune_allocator"]

MMAP_THRESHOLD_BYTES = 128 * 1024
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number


_applied = False


def allocator_setting() -> str:
    """What this process runs with, for benchmark reports."""
    if _applied:
        return f"glibc mmap threshold pinned at {MMAP_THRESHOLD_BYTES} B"
    env = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    return f"MALLOC_MMAP_THRESHOLD_={env}" if env is not None else "allocator defaults"


def tune_allocator() -> bool:
    """Pin glibc's mmap threshold; True when applied (False off glibc or when the environment sets it)."""
    global _applied
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False  # the operator chose
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # not glibc (musl, macOS)
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _applied = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    return _applied
