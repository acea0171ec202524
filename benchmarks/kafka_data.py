"""The Kafka benchmark's records, checksums, pacing and CPU accounting, shared by its two paths.

A record is keyless with a ``record_bytes`` value: a 16-byte head (send time in ``perf_counter_ns``, partition,
index within the partition; little-endian, so :func:`benchmarks.e2e.sent_ns` reads the send time) and a slice of
a random pool picked by (partition, index), so values are unique and incompressible. Whatever reads a
partition back checks the record count and a CRC32C chained over its values in offset order: the chained CRC
of the values equals the CRC of their concatenation, so a consumer updating it per message and ``read_arrow``
taking it over an Arrow value buffer at once compute the same number, and any record lost, duplicated,
reordered or altered changes it.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import crc32c
import numpy as np
import pyarrow as pa

from benchmarks.core.measure import LatencySummary, mb_per_s
from benchmarks.core.producers import random_bytes

__all__ = ["HEAD", "Checksums", "CpuMeter", "ServerMeter", "Values", "e2e_summary", "expected_checksums", "ticks",
           "values_crc"]

#: send time (ns, 0 outside the end-to-end phase), partition, index within the partition
HEAD = struct.Struct("<qii")
_HEAD_DTYPE = np.dtype([("stamp", "<i8"), ("partition", "<i4"), ("index", "<i4")])
_POOL_BYTES = 4 << 20


class Values:
    """Record values of one run: ``value(partition, index, stamp)``, unique per (partition, index)."""

    def __init__(self, record_bytes: int, seed: int = 26) -> None:
        if record_bytes < HEAD.size:
            raise ValueError(f"records need at least {HEAD.size} bytes (the head)")
        self.record_bytes, self.seed = record_bytes, seed
        self._body = record_bytes - HEAD.size
        self._pool = memoryview(random_bytes(_POOL_BYTES + self._body, seed=seed))
        self._span = _POOL_BYTES

    def __reduce__(self) -> tuple[type[Values], tuple[int, int]]:  # the pool is made again, not sent
        return Values, (self.record_bytes, self.seed)

    def value(self, partition: int, index: int, stamp: int = 0) -> bytes:
        o = self._offset(partition, index)
        return HEAD.pack(stamp, partition, index) + self._pool[o:o + self._body]

    def batch(self, partition: int, first: int, count: int) -> list[bytes]:
        return [self.value(partition, i) for i in range(first, first + count)]

    def chunk(self, partition: int, first: int, count: int) -> memoryview:
        """``value(partition, i)`` for ``first <= i < first + count`` back to back (``record_bytes`` each),
        built with a few numpy copies: the harness's own cost per record stays out of the measurement."""
        out = np.empty((count, self.record_bytes), dtype=np.uint8)
        heads = np.zeros(count, dtype=_HEAD_DTYPE)
        heads["partition"], heads["index"] = partition, np.arange(first, first + count)
        out[:, :HEAD.size] = heads.view(np.uint8).reshape(count, HEAD.size)
        pool = np.frombuffer(self._pool, dtype=np.uint8)
        done = 0
        while done < count:  # a run of consecutive bodies, up to where the pool wraps
            o = self._offset(partition, first + done)
            run = min(count - done, (self._span - o) // self._body + 1)
            out[done:done + run, HEAD.size:] = pool[o:o + run * self._body].reshape(run, self._body)
            done += run
        return out.reshape(-1).data.toreadonly()

    def arrow(self, partition: int, first: int, count: int) -> pa.Array:
        """:meth:`chunk` as a binary Arrow array, without a Python object per record."""
        offsets = np.arange(0, (count + 1) * self.record_bytes, self.record_bytes, dtype=np.int32)
        return pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets),
                                                          pa.py_buffer(self.chunk(partition, first, count))])

    def _offset(self, partition: int, index: int) -> int:
        """Where the body of (partition, index) starts in the pool: consecutive indices have consecutive
        bodies (one copy per run), distinct partitions far apart."""
        return ((partition * 1_000_003 + index) * self._body) % self._span


@dataclass(slots=True)
class Checksums:
    """Per partition: records and payload bytes seen, and the CRC32C chained over their values."""

    partitions: int
    records: list[int] = field(default_factory=list)
    crcs: list[int] = field(default_factory=list)
    nbytes: int = 0

    def __post_init__(self) -> None:
        self.records = [0] * self.partitions
        self.crcs = [0] * self.partitions

    def add(self, partition: int, value: bytes) -> None:
        self.crcs[partition] = crc32c.crc32c(value, self.crcs[partition])
        self.records[partition] += 1
        self.nbytes += len(value)

    def add_joined(self, partition: int, joined: bytes, rows: int) -> None:
        """``rows`` values of ``partition`` given concatenated (their chained CRC is the CRC of the whole)."""
        self.crcs[partition] = crc32c.crc32c(joined, self.crcs[partition])
        self.records[partition] += rows
        self.nbytes += len(joined)

    def add_column(self, partition: int, values: pa.ChunkedArray | pa.Array, rows: int) -> None:
        crc, nbytes = values_crc(values, self.crcs[partition])
        self.crcs[partition] = crc
        self.records[partition] += rows
        self.nbytes += nbytes

    @property
    def total(self) -> int:
        return sum(self.records)

    def compare(self, what: str, expected: Checksums) -> list[str]:
        """What differs from ``expected``, partition by partition (empty when all is well)."""
        problems = []
        for p in range(self.partitions):
            if self.records[p] != expected.records[p]:
                problems.append(f"{what}: partition {p}: {self.records[p]} records read, {expected.records[p]} "
                                "written")
            elif self.crcs[p] != expected.crcs[p]:
                problems.append(f"{what}: partition {p}: the values read differ from those written (CRC32C)")
        return problems


def values_crc(values: pa.ChunkedArray | pa.Array, crc: int) -> tuple[int, int]:
    """``crc`` chained over the values of a binary column in order (no per-record Python); and their bytes."""
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    nbytes = 0
    for chunk in chunks:
        if len(chunk) == 0:
            continue
        if chunk.null_count:
            raise ValueError("a null value where every record has one")
        bufs = chunk.buffers()
        width = 8 if pa.types.is_large_binary(chunk.type) else 4
        offsets = np.frombuffer(bufs[1], dtype=f"<i{width}", count=len(chunk) + 1, offset=chunk.offset * width)
        start, end = int(offsets[0]), int(offsets[-1])
        if end > start and bufs[2] is not None:
            crc = crc32c.crc32c(memoryview(bufs[2])[start:end], crc)
        nbytes += end - start
    return crc, nbytes


def expected_checksums(values: Values, counts: Sequence[int], chunk: int = 4096) -> Checksums:
    """What reading back ``counts[p]`` records of each partition written with ``values`` must give."""
    out = Checksums(len(counts))
    for p, n in enumerate(counts):
        crc = 0
        for first in range(0, n, chunk):
            crc = crc32c.crc32c(values.chunk(p, first, min(chunk, n - first)), crc)
        out.crcs[p], out.records[p] = crc, n
        out.nbytes += n * values.record_bytes
    return out


def e2e_summary(records: int, seconds: float, record_bytes: int, latencies_ns: Sequence[int] | np.ndarray,
                acks_s: Sequence[float], sent: Checksums, seen: Checksums, problems: list[str], what: str
                ) -> dict[str, Any]:
    """One end-to-end run's figures: offered records, achieved MB/s, latency and ack latency percentiles; and
    what went wrong (a record without a latency sample, counts or checksums that differ from those sent)."""
    lat = np.asarray(latencies_ns, dtype=np.float64) / 1e9
    if len(lat) != records:
        problems = [*problems, f"{what}: {len(lat)} latency samples for {records} records sent"]
    return {"records": records, "seconds": round(seconds, 3),
            "mb_per_s": round(mb_per_s(records * record_bytes, seconds), 3),
            "e2e": LatencySummary.of_seconds(lat.tolist()).as_dict(),
            "ack": LatencySummary.of_seconds(list(acks_s)).as_dict(),
            "problems": problems + seen.compare(what, sent)}


def ticks(rate_per_s: float, seconds: float, tick_s: float) -> Iterator[int]:
    """Every ``tick_s`` for ``seconds``: how many records are due since the last tick at ``rate_per_s``."""
    start = time.perf_counter()
    sent = 0
    while (elapsed := time.perf_counter() - start) < seconds:
        due = int(elapsed * rate_per_s) - sent
        sent += due
        yield due
        time.sleep(tick_s)


def _thread_cpu() -> dict[int, tuple[str, float]]:
    """CPU seconds of every thread of this process by native id, with its kernel name (empty without /proc)."""
    out: dict[int, tuple[str, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        out[int(tid)] = (comm, (int(fields[11]) + int(fields[12])) / tick)
    return out


def _role(name: str) -> str:
    """A thread's role: ``rdk:broker0`` -> ``rdk:broker`` (librdkafka), ``s3stream-put-3`` -> ``s3stream-put``."""
    word = name.split(" ")[0]
    for prefix in ("s3stream-append", "s3stream-flush", "s3stream-put", "s3stream-sealer", "wal-fsync",
                   "wal-syncer", "kafka-server", "kafka-io", "asyncio"):
        if word.startswith(prefix):
            return prefix
    return word.rstrip("0123456789-_/") or "other"


class CpuMeter:
    """Process CPU (``time.process_time``) and CPU by thread role over a phase, in seconds: started when built,
    read by :meth:`stop` (``cpu_s``, ``wall_s`` and ``by_role_s``; threads that ended before it count as
    ``ended threads``)."""

    def __init__(self) -> None:
        self._before = _thread_cpu()
        self._cpu0 = time.process_time()
        self._wall0 = time.perf_counter()

    def stop(self) -> dict[str, object]:
        cpu = time.process_time() - self._cpu0
        after = _thread_cpu()
        names = {th.native_id: th.name for th in threading.enumerate()}
        by_role: dict[str, float] = defaultdict(float)
        for tid, (comm, seconds) in after.items():
            spent = seconds - self._before.get(tid, ("", 0.0))[1]
            if spent > 0:
                by_role[_role(names.get(tid, comm))] += spent
        ended = cpu - sum(by_role.values())  # threads that ended within the phase are gone from /proc
        if ended > 0:
            by_role["ended threads"] += ended
        return {"cpu_s": round(cpu, 3), "wall_s": round(time.perf_counter() - self._wall0, 3),
                "by_role_s": {k: round(v, 3) for k, v in sorted(by_role.items(), key=lambda kv: -kv[1]) if v >= 0.01}}



class ServerMeter:
    """What the Kafka server's own metrics saw over a phase: requests and their mean time from arrival to response,
    per API, and fetched batches by source (tail cache, cold cache, store)."""

    def __init__(self, metrics: Any) -> None:
        self._metrics = metrics
        self._before = self._snapshot()

    def _snapshot(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for family in (*self._metrics.latency.collect(), *self._metrics.fetch_cache.collect()):
            for sample in family.samples:
                label = sample.labels.get("api") or sample.labels.get("source") or ""
                out[f"{sample.name}|{label}"] = float(sample.value)
        return out

    def stop(self) -> dict[str, Any]:
        after = self._snapshot()
        delta = {k: v - self._before.get(k, 0.0) for k, v in after.items()}
        apis: dict[str, dict[str, float]] = {}
        batches: dict[str, int] = {}
        for key, value in delta.items():
            name, label = key.split("|", 1)
            if name.endswith("_seconds_count") and value > 0:
                total = delta.get(key.replace("_seconds_count|", "_seconds_sum|"), 0.0)
                apis[label] = {"requests": int(value), "mean_ms": round(total / value * 1e3, 2)}
            elif name.startswith("s3stream_kafka_fetch_batches") and name.endswith("_total") and value > 0:
                batches[label] = int(value)
        return {"requests": apis, "fetch_batches_by_source": batches}
