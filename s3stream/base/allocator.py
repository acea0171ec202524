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

A Kafka server is the opposite case: it allocates and frees request-sized blocks (a produce request, its
batch, its decoded columns: hundreds of KiB to a few MiB, several per MB produced) all the time, and a
fresh mmap costs ~0.5 ms of CPU per MB in page faults (the kernel zeroes every page), ~25x a reused heap
block (measured: a 500 KB bytearray, 0.51 against 0.01 ms/MB; a batch's decode 1.66 against 1.0 ms/MB).
``tune_allocator(request_buffers=True)`` (``s3stream serve`` with its Kafka listener) keeps blocks up to
32 MiB in the heaps (a read-ahead's encoded batches, a WAL object being uploaded) and up to 256 MiB free at
their tops instead, trading that RSS for the CPU. Measured on ``s3stream serve``, 512 MiB produced twice
through confluent-kafka: with 4 MiB / 32 MiB the second pass still took 170-230 page faults per MB (the
in-flight volume swings by more than the trim threshold, so the heap shrinks and is faulted in again); with
32 MiB / 256 MiB it took 25-31, and produced 161-166 MB/s against 133-140, at the same peak RSS (~680 MB,
which the requests in flight set either way).

A library must not change its host's allocator, so :func:`s3stream.open_store` never calls this; users
embedding s3stream can set ``MALLOC_MMAP_THRESHOLD_=131072`` and ``MALLOC_ARENA_MAX=2`` in the environment
for the same effect.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["ARENA_MAX", "MMAP_THRESHOLD_BYTES", "REQUEST_MMAP_THRESHOLD_BYTES", "REQUEST_TRIM_THRESHOLD_BYTES",
           "allocator_setting", "tune_allocator"]

MMAP_THRESHOLD_BYTES = 128 * 1024
ARENA_MAX = 2
REQUEST_MMAP_THRESHOLD_BYTES = 32 << 20
REQUEST_TRIM_THRESHOLD_BYTES = 256 << 20
# glibc's mallopt parameter numbers and the environment variables that set them
_MMAP = ("MALLOC_MMAP_THRESHOLD_", -3)
_TRIM = ("MALLOC_TRIM_THRESHOLD_", -1)
_ARENAS = ("MALLOC_ARENA_MAX", -8)
_ENVS = (_MMAP[0], _TRIM[0], _ARENAS[0])

_applied: dict[str, str] = {}  # env variable -> what was applied in its place


def allocator_setting() -> str:
    """What this process runs with, for benchmark reports."""
    parts = list(_applied.values())
    parts += [f"{env}={os.environ[env]}" for env in _ENVS if env in os.environ]
    return ", ".join(parts) if parts else "allocator defaults"


def tune_allocator(*, request_buffers: bool = False) -> bool:
    """Apply each setting the environment does not choose; True when any was applied (False off glibc).

    ``request_buffers``: the Kafka server's settings (module docstring); may follow a plain call."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False  # not glibc (musl, macOS)
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    settings = [(_ARENAS, ARENA_MAX, f"{ARENA_MAX} glibc arenas")]
    if request_buffers:
        settings += [(_MMAP, REQUEST_MMAP_THRESHOLD_BYTES, f"glibc mmap threshold {REQUEST_MMAP_THRESHOLD_BYTES} B"),
                     (_TRIM, REQUEST_TRIM_THRESHOLD_BYTES, f"trim threshold {REQUEST_TRIM_THRESHOLD_BYTES} B")]
    else:
        settings.insert(0, (_MMAP, MMAP_THRESHOLD_BYTES, f"glibc mmap threshold pinned at {MMAP_THRESHOLD_BYTES} B"))
    for (env, param), value, description in settings:
        if env not in os.environ and _applied.get(env) != description and mallopt(param, value):
            _applied[env] = description
    return bool(_applied)
