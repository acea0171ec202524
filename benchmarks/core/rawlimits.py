"""Raw limits: what the machine and the target can do with no s3stream code in the way.

* **disk**: sequential writes of ``block_bytes`` blocks to a file in the WAL directory, each followed
  by ``fdatasync`` (what the WAL's group commit does at best: one large write, one sync);
* **fsync latency**: a 4 KiB append followed by ``fdatasync``, repeated (the floor of an ``ack=wal``
  acknowledgement);
* **PUT**: ``threads`` threads each PUTting ``object_bytes`` objects back to back (boto3 directly on
  S3 targets), bandwidth over the whole interval and the per-request latency; and the same with one
  thread (one request in flight: the ceiling of a pipeline that PUTs one object at a time);
* **ranged GET**: ``threads`` threads GETting ``range_bytes`` ranges of the objects just written,
  and the same with one thread (a single sequential reader's ceiling, for context).

Every measurement starts with one untimed request per thread (connection set-up is not a limit) and
ends when the last request in flight finishes, so no started work is left out of the interval.

:func:`measure_raw_limits` is the set the suite's ratios are taken against (the engine's sizes: 4 MiB
fsync'd disk blocks, 4 KiB fsync appends, 8 threads PUTting 8 MiB objects, ranged GETs of 4 MiB, each for
``seconds``, plus single 4 KiB ranged GETs for half that: their latency is about a GET's time to first
byte, what a tailing reader's poll pays), as a flat dict of figures (``disk_mb_per_s``, ``fsync_p99_ms``,
``put_p50_ms``, ``get_mb_per_s``, ...) with a ``details`` entry holding every measurement in full. The
engine measures its own set with its run's sizes (:mod:`benchmarks.engine.run`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.core.measure import CpuMeter, LatencySummary, mb_per_s
from benchmarks.core.producers import random_bytes
from benchmarks.core.progress import PhaseProgress
from benchmarks.core.targets import RawObjects, Target

__all__ = ["RAW_PHASES", "RAW_UNITS", "Throughput", "disk_write_bandwidth", "fsync_latency", "get_bandwidth",
           "measure_raw_limits", "put_bandwidth"]

_SYNC = getattr(os, "fdatasync", os.fsync)


@dataclass(frozen=True, slots=True)
class Throughput:
    """Bytes moved over an interval by ``threads`` workers, with per-request latencies."""

    mb_per_s: float
    nbytes: int
    seconds: float
    requests: int
    threads: int
    latency: LatencySummary
    cpu: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return {"mb_per_s": round(self.mb_per_s, 2), "bytes": self.nbytes, "seconds": round(self.seconds, 3),
                "requests": self.requests, "threads": self.threads, "latency_ms": self.latency.as_dict(),
                "cpu": self.cpu}


def _timed_threads(threads: int, seconds: float, op: Callable[[int, int], int]) -> Throughput:
    """Run ``op(thread, i)`` (returns bytes moved) in ``threads`` threads for ``seconds``; i = -1 warms up."""
    barrier = threading.Barrier(threads + 1)
    lock = threading.Lock()
    latencies: list[float] = []
    moved = [0]
    errors: list[BaseException] = []
    deadline = [0.0]

    def worker(t: int) -> None:
        try:
            op(t, -1)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller below
            errors.append(exc)
        barrier.wait()
        mine: list[float] = []
        total = 0
        i = 0
        while not errors and time.perf_counter() < deadline[0]:
            t0 = time.perf_counter()
            try:
                total += op(t, i)
            except BaseException as exc:  # noqa: BLE001 - reported to the caller below
                errors.append(exc)
                break
            mine.append(time.perf_counter() - t0)
            i += 1
        with lock:
            latencies.extend(mine)
            moved[0] += total

    workers = [threading.Thread(target=worker, args=(t,), name=f"bench-raw-{t}") for t in range(threads)]
    for w in workers:
        w.start()
    deadline[0] = time.perf_counter() + seconds + 1e9  # parked until every worker has warmed up
    barrier.wait()
    start = time.perf_counter()
    deadline[0] = start + seconds
    cpu = CpuMeter()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return Throughput(mb_per_s(moved[0], elapsed), moved[0], elapsed, len(latencies), threads,
                      LatencySummary.of_seconds(latencies), cpu.read())


def disk_write_bandwidth(directory: Path, seconds: float, block_bytes: int = 4 << 20) -> Throughput:
    """fdatasync'd sequential write bandwidth of ``directory``'s disk (one writer, ``block_bytes`` blocks)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "raw-disk.bin"
    block = random_bytes(block_bytes, seed=1)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        def write(_t: int, _i: int) -> int:
            written = os.write(fd, block)
            _SYNC(fd)
            return written

        return _timed_threads(1, seconds, write)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


def fsync_latency(directory: Path, seconds: float, block_bytes: int = 4096) -> Throughput:
    """Latency of a small append + fdatasync, repeated for ``seconds`` (one writer)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "raw-fsync.bin"
    block = random_bytes(block_bytes, seed=2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        def write(_t: int, _i: int) -> int:
            written = os.write(fd, block)
            _SYNC(fd)
            return written

        return _timed_threads(1, seconds, write)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


def put_bandwidth(raw: RawObjects, *, threads: int, object_bytes: int, seconds: float,
                  key_prefix: str = "put") -> tuple[Throughput, list[str]]:
    """Concurrent PUT bandwidth; also returns the keys written (the GET measurement reads them)."""
    bodies = [random_bytes(object_bytes, seed=100 + t) for t in range(threads)]
    keys: list[list[str]] = [[] for _ in range(threads)]

    def put(t: int, i: int) -> int:
        key = f"{key_prefix}/{t}/{'warmup' if i < 0 else i}"
        raw.put(key, bodies[t])
        keys[t].append(key)
        return object_bytes

    result = _timed_threads(threads, seconds, put)
    return result, [k for ks in keys for k in ks]


def get_bandwidth(raw: RawObjects, keys: list[str], *, threads: int, object_bytes: int, range_bytes: int,
                  seconds: float) -> Throughput:
    """Concurrent ranged-GET bandwidth over ``keys`` (objects of ``object_bytes``), ``range_bytes`` each."""
    if not keys:
        raise ValueError("get_bandwidth needs objects to read")
    per_object = max(1, object_bytes // range_bytes)
    ranges = [(key, r * range_bytes) for key in keys for r in range(per_object)]

    def get(t: int, i: int) -> int:
        key, start = ranges[(t * len(ranges) // threads + max(i, 0)) % len(ranges)]
        end = min(start + range_bytes, object_bytes)
        data = raw.get_range(key, start, end)
        if len(data) != end - start:
            raise RuntimeError(f"ranged GET of {key} [{start}, {end}) returned {len(data)} bytes")
        return len(data)

    return _timed_threads(threads, seconds, get)


# -- the suite's set -----------------------------------------------------------------------------------

_MiB = 1 << 20
DISK_BLOCK_BYTES = 4 * _MiB
FSYNC_BLOCK_BYTES = 4096
PUT_THREADS = 8
PUT_OBJECT_BYTES = 8 * _MiB
GET_RANGE_BYTES = 4 * _MiB
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


def measure_raw_limits(target: Target, seconds: float, progress: PhaseProgress) -> dict[str, Any]:
    """Measure every raw limit of the suite's set (``RAW_PHASES`` progress phases of ``seconds`` each)."""
    wal_disk = Path(target.wal_dir("raw"))
    with progress.phase("raw: fsync'd disk write bandwidth", seconds=seconds):
        disk = disk_write_bandwidth(wal_disk, seconds, DISK_BLOCK_BYTES)
    with progress.phase("raw: fsync latency (4 KiB)", seconds=seconds):
        fsync = fsync_latency(wal_disk, seconds, FSYNC_BLOCK_BYTES)
    with progress.phase(f"raw: PUT {PUT_OBJECT_BYTES // _MiB} MiB ({PUT_THREADS} threads)", seconds=seconds):
        put, keys = put_bandwidth(target.raw, threads=PUT_THREADS, object_bytes=PUT_OBJECT_BYTES, seconds=seconds)
    with progress.phase(f"raw: PUT {PUT_OBJECT_BYTES // _MiB} MiB (1 thread)", seconds=seconds):
        put_single, more = put_bandwidth(target.raw, threads=1, object_bytes=PUT_OBJECT_BYTES, seconds=seconds,
                                         key_prefix="put1")
    keys += more
    with progress.phase(f"raw: ranged GET {GET_RANGE_BYTES // _MiB} MiB ({PUT_THREADS} threads)", seconds=seconds):
        get = get_bandwidth(target.raw, keys, threads=PUT_THREADS, object_bytes=PUT_OBJECT_BYTES,
                            range_bytes=GET_RANGE_BYTES, seconds=seconds)
    with progress.phase(f"raw: ranged GET {GET_RANGE_BYTES // _MiB} MiB (1 thread)", seconds=seconds):
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
