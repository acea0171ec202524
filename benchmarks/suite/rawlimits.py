"""The suite's raw limits: what the WAL disk and the target can do with no s3stream code in the way.

The measurements are those of the engine benchmark (:mod:`benchmarks.rawlimits`, the same object and
block sizes: 4 MiB fsync'd disk blocks, 4 KiB fsync appends, 8 threads PUTting 8 MiB objects, ranged
GETs of 4 MiB), each run for ``params.raw_seconds``, plus single 4 KiB ranged GETs for half that: their
latency is about a GET's time to first byte (what a tailing reader's poll pays). The result is a flat
dict of figures that workloads and ratios use (``disk_mb_per_s``, ``fsync_p99_ms``, ``put_p50_ms``,
``get_mb_per_s``, ...) with a ``details`` entry holding every measurement in full.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.progress import PhaseProgress
from benchmarks.rawlimits import Throughput, disk_write_bandwidth, fsync_latency, get_bandwidth, put_bandwidth
from benchmarks.suite.model import MiB, SuiteParams
from benchmarks.targets import Target

__all__ = ["RAW_PHASES", "RAW_UNITS", "measure_raw_limits"]

DISK_BLOCK_BYTES = 4 * MiB
FSYNC_BLOCK_BYTES = 4096
PUT_THREADS = 8
PUT_OBJECT_BYTES = 8 * MiB
GET_RANGE_BYTES = 4 * MiB
SMALL_GET_BYTES = 4096
RAW_PHASES = 7

RAW_UNITS: dict[str, str] = {
    "disk_mb_per_s": "MB/s", "fsync_p50_ms": "ms", "fsync_p99_ms": "ms",
    "put_mb_per_s": "MB/s", "put_p50_ms": "ms", "put_p99_ms": "ms",
    "put_single_mb_per_s": "MB/s", "put_single_p50_ms": "ms", "put_single_p99_ms": "ms",
    "get_mb_per_s": "MB/s", "get_p50_ms": "ms", "get_p99_ms": "ms",
    "get_single_mb_per_s": "MB/s", "get_single_p50_ms": "ms", "get_single_p99_ms": "ms",
    "get_small_p50_ms": "ms", "get_small_p99_ms": "ms",
}


def _flat(prefix: str, t: Throughput, *, bandwidth: bool = True) -> dict[str, float]:
    out = {f"{prefix}_p50_ms": t.latency.p50_ms, f"{prefix}_p99_ms": t.latency.p99_ms}
    if bandwidth:
        out[f"{prefix}_mb_per_s"] = t.mb_per_s
    return out


def measure_raw_limits(target: Target, params: SuiteParams, progress: PhaseProgress) -> dict[str, Any]:
    """Measure every raw limit (``RAW_PHASES`` progress phases of ``params.raw_seconds`` each)."""
    seconds = params.raw_seconds
    wal_disk = Path(target.wal_dir("raw"))
    with progress.phase("raw: fsync'd disk write bandwidth", seconds=seconds):
        disk = disk_write_bandwidth(wal_disk, seconds, DISK_BLOCK_BYTES)
    with progress.phase("raw: fsync latency (4 KiB)", seconds=seconds):
        fsync = fsync_latency(wal_disk, seconds, FSYNC_BLOCK_BYTES)
    with progress.phase(f"raw: PUT {PUT_OBJECT_BYTES // MiB} MiB ({PUT_THREADS} threads)", seconds=seconds):
        put, keys = put_bandwidth(target.raw, threads=PUT_THREADS, object_bytes=PUT_OBJECT_BYTES, seconds=seconds)
    with progress.phase(f"raw: PUT {PUT_OBJECT_BYTES // MiB} MiB (1 thread)", seconds=seconds):
        put_single, more = put_bandwidth(target.raw, threads=1, object_bytes=PUT_OBJECT_BYTES, seconds=seconds,
                                         key_prefix="put1")
    keys += more
    with progress.phase(f"raw: ranged GET {GET_RANGE_BYTES // MiB} MiB ({PUT_THREADS} threads)", seconds=seconds):
        get = get_bandwidth(target.raw, keys, threads=PUT_THREADS, object_bytes=PUT_OBJECT_BYTES,
                            range_bytes=GET_RANGE_BYTES, seconds=seconds)
    with progress.phase(f"raw: ranged GET {GET_RANGE_BYTES // MiB} MiB (1 thread)", seconds=seconds):
        get_single = get_bandwidth(target.raw, keys, threads=1, object_bytes=PUT_OBJECT_BYTES,
                                   range_bytes=GET_RANGE_BYTES, seconds=seconds)
    with progress.phase("raw: small GET latency (4 KiB range, 1 thread)", seconds=seconds / 2):
        small = get_bandwidth(target.raw, keys[:PUT_THREADS], threads=1, object_bytes=PUT_OBJECT_BYTES,
                              range_bytes=SMALL_GET_BYTES, seconds=seconds / 2)
    figures: dict[str, Any] = {
        "disk_mb_per_s": disk.mb_per_s, **_flat("fsync", fsync, bandwidth=False), **_flat("put", put),
        **_flat("put_single", put_single), **_flat("get", get), **_flat("get_single", get_single),
        **_flat("get_small", small, bandwidth=False),
    }
    figures["details"] = {
        "disk_fsync_write": {**disk.as_dict(), "block_bytes": DISK_BLOCK_BYTES, "directory": str(wal_disk)},
        "fsync_latency": {**fsync.as_dict(), "block_bytes": FSYNC_BLOCK_BYTES},
        "put": {**put.as_dict(), "object_bytes": PUT_OBJECT_BYTES},
        "put_single": {**put_single.as_dict(), "object_bytes": PUT_OBJECT_BYTES},
        "ranged_get": {**get.as_dict(), "range_bytes": GET_RANGE_BYTES},
        "ranged_get_single": {**get_single.as_dict(), "range_bytes": GET_RANGE_BYTES},
        "small_get": {**small.as_dict(), "range_bytes": SMALL_GET_BYTES},
        "seconds_each": seconds,
    }
    return figures
