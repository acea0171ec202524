"""Process-wide allocator settings for s3stream's own processes (the CLI, ``serve``, the benchmarks).

Two glibc behaviours cost a threaded engine RSS without buying speed:

* glibc raises its mmap threshold each time a large block is freed (up to 32 MiB), after which blocks of
  hundreds of KiB to MiBs (append batches, WAL entries, GET bodies) come from its heaps instead, where
  freed space is kept and fragments: ~80 MiB of RSS in the ingest benchmark. Pinning the threshold at
  128 KiB (glibc's default starting point) returns large blocks to the OS when freed.
* every thread that allocates gets an arena of its own (up to 8 per core), and an arena keeps what was
  freed in it: the fetch pool, sealers, uploader and cleaner threads each held their own few MiB of GET
  bodies, ~150 MiB of RSS in the compaction benchmark. Two arenas hold them all, and Python allocates
  under the GIL anyway.

A library must not change its host's allocator, so :func:`s3stream.open_store` never calls this; users
embedding s3stream can set ``MALLOC_MMAP_THRESHOLD_=131072`` and ``MALLOC_ARENA_MAX=2`` in the environment
for the same effect.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["ARENA_MAX", "MMAP_THRESHOLD_BYTES", "allocator_setting", "tune_allocator"]

MMAP_THRESHOLD_BYTES = 128 * 1024
ARENA_MAX = 2
# glibc's mallopt parameter numbers, the environment variables that set them, and the values we choose
_SETTINGS = (("MALLOC_MMAP_THRESHOLD_", -3, MMAP_THRESHOLD_BYTES, "glibc mmap threshold pinned at {} B"),
             ("MALLOC_ARENA_MAX", -8, ARENA_MAX, "{} glibc arenas"))

_applied: list[str] = []


def allocator_setting() -> str:
    """What this process runs with, for benchmark reports."""
    parts = list(_applied)
    parts += [f"{env}={os.environ[env]}" for env, *_ in _SETTINGS if env in os.environ]
    return ", ".join(parts) if parts else "allocator defaults"


def tune_allocator() -> bool:
    """Apply each setting the environment does not choose; True when any was applied (False off glibc)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False  # not glibc (musl, macOS)
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    for env, param, value, text in _SETTINGS:
        description = text.format(value)
        if env not in os.environ and description not in _applied and mallopt(param, value):
            _applied.append(description)
    return bool(_applied)
