"""The naive baseline, and the timed producer driver it shares with the s3stream workloads.

The naive log is what one would build on object storage without s3stream's two ideas: there is no
local WAL and no multi-partition object. Each appended batch is encoded as one Arrow IPC stream and
PUT (put-if-absent) as its own object ``naive/{topic}/{partition}/{seq:020d}`` before ``append``
returns; a reader LISTs a partition's prefix and GETs every object. Every ingest and catch-up figure
has a naive figure next to it, measured on the same ObjectStore kind with the same record batches and
the same producer threads, so the gap between them is what the design buys.

Sequence numbers are reserved in memory (one writer process per partition, as in the benchmark) and
the PUTs of one partition run concurrently; put-if-absent still refuses a second writer's object.
A reader that starts after the writers finished sees every object; a tailing reader could see a later
sequence land before an earlier one (no ordering: the baseline does not pretend to be a log server).

The driver: :class:`benchmarks.core.producers.Producers` reports latency percentiles only, so every log it
drives is wrapped in a thin recorder that keeps each append's start and end times; that gives the
latency samples (for CDFs) and the completion times (for throughput over time) of s3stream and naive
runs alike. ``Producers`` only calls ``append``, so the recorder stands in for a ``PartitionLog``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

import pyarrow as pa

from benchmarks.core.measure import LatencySummary, mb_per_s
from benchmarks.core.producers import ProduceResult, Producers, make_batches
from benchmarks.core.result import Series
from benchmarks.suite.context import MiB, SuiteParams
from s3stream import PartitionLog, Record
from s3stream.objectstore.protocol import ObjectStore

__all__ = [
    "NAIVE_SCHEMA",
    "Appendable",
    "NaiveLog",
    "TimedRun",
    "decode_naive",
    "drive",
    "encode_naive",
    "naive_key",
    "naive_prefix",
    "record_batches",
    "run_naive",
    "throughput_series",
]

NAIVE_SCHEMA = pa.schema([pa.field("key", pa.binary()), pa.field("value", pa.binary())])


# -- the naive log -----------------------------------------------------------------------------------


def naive_prefix(topic: str, partition: int) -> str:
    return f"naive/{topic}/{partition}/"


def naive_key(topic: str, partition: int, seq: int) -> str:
    return f"{naive_prefix(topic, partition)}{seq:020d}"


def encode_naive(records: Sequence[Record]) -> pa.Buffer:
    """One batch as an Arrow IPC stream (key and value columns; no compression: values are random)."""
    keys = pa.array([r.key for r in records], pa.binary())
    values = pa.array([r.value for r in records], pa.binary())
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, NAIVE_SCHEMA) as writer:
        writer.write_batch(pa.record_batch([keys, values], schema=NAIVE_SCHEMA))
    return sink.getvalue()


def decode_naive(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(data).read_all()


class NaiveLog:
    """One partition of the naive baseline: one object per append. Thread-safe."""

    def __init__(self, store: ObjectStore, topic: str, partition: int) -> None:
        self._store = store
        self._topic = topic
        self._partition = partition
        self._lock = threading.Lock()
        keys = self.keys()  # continue after what an earlier process left (one LIST)
        self._next_seq = int(keys[-1].rsplit("/", 1)[1]) + 1 if keys else 0

    def append(self, records: Iterable[Record]) -> None:
        """Encode ``records`` and PUT them as one new object; returns once the object is stored."""
        recs = list(records)
        if not recs:
            raise ValueError("append needs at least one record")
        data = encode_naive(recs)
        with self._lock:
            seq = self._next_seq
            self._next_seq += 1
        self._store.put(naive_key(self._topic, self._partition, seq), memoryview(data), if_none_match=True)

    def keys(self) -> list[str]:
        """The partition's object keys in sequence order (LIST, 1000 keys per request)."""
        prefix = naive_prefix(self._topic, self._partition)
        return sorted(e.key for e in self._store.list(prefix))

    def read(self, keys: Sequence[str] | None = None) -> Iterator[pa.Table]:
        """GET and decode the partition's objects (or ``keys``) in order, one table per object."""
        for key in self.keys() if keys is None else keys:
            yield decode_naive(self._store.get(key))


# -- the timed producer driver -------------------------------------------------------------------------


class Appendable(Protocol):
    """What the driver needs of a log: ``PartitionLog`` and :class:`NaiveLog` both qualify."""

    def append(self, records: Iterable[Record]) -> object: ...


class _TimedLog:
    """Appends to ``inner`` and records the append's (start, end) in ``spans`` (list.append is atomic)."""

    def __init__(self, inner: Appendable, spans: list[tuple[float, float]],
                 prepare: Callable[[Sequence[Record]], Sequence[Record]] | None) -> None:
        self._inner = inner
        self._spans = spans
        self._prepare = prepare

    def append(self, records: Sequence[Record]) -> None:
        batch = self._prepare(records) if self._prepare is not None else records
        start = time.perf_counter()
        self._inner.append(batch)
        self._spans.append((start, time.perf_counter()))


@dataclass(frozen=True, slots=True)
class TimedRun:
    """A producer run with every append's (start, end) in ``perf_counter`` seconds.

    ``start`` is when the producers were started and ``seconds`` the asked duration (the measured one
    when the run was bounded by an append count instead): acknowledged throughput counts the appends
    that completed within ``[start, start + seconds]``.
    """

    produced: ProduceResult
    start: float
    seconds: float
    spans: list[tuple[float, float]]
    batch_payload: int
    batch_records: int

    def latencies_ms(self) -> list[float]:
        return [(end - begin) * 1000.0 for begin, end in self.spans]

    def latency(self) -> LatencySummary:
        return LatencySummary.of_seconds([end - begin for begin, end in self.spans])

    def acked_appends(self) -> int:
        deadline = self.start + self.seconds
        return sum(1 for _, end in self.spans if end <= deadline)

    def mb_per_s(self) -> float:
        """Payload MB (10^6 bytes) acknowledged per second within the duration."""
        return mb_per_s(self.acked_appends() * self.batch_payload, self.seconds)

    def records_per_s(self) -> float:
        return self.acked_appends() * self.batch_records / self.seconds if self.seconds > 0 else 0.0

    def series(self, name: str, *, bucket_s: float = 1.0) -> Series:
        """Acknowledged MB/s per ``bucket_s`` bucket over the duration."""
        done = [(end - self.start, self.batch_payload) for _, end in self.spans]
        return throughput_series(name, done, self.seconds, bucket_s=bucket_s)


def throughput_series(name: str, done: Iterable[tuple[float, int]], seconds: float, *,
                      bucket_s: float = 1.0) -> Series:
    """MB/s per bucket from ``(seconds since start, payload bytes)`` completions within ``seconds``.

    A point's time is its bucket's end; the last bucket may be shorter than ``bucket_s``.
    """
    buckets = max(1, math.ceil(seconds / bucket_s - 1e-9))
    totals = [0] * buckets
    for t, nbytes in done:
        if 0.0 <= t <= seconds:
            totals[min(buckets - 1, int(t / bucket_s))] += nbytes
    t_s: list[float] = []
    values: list[float] = []
    for i, total in enumerate(totals):
        width = min(bucket_s, seconds - i * bucket_s)
        if width <= 0:
            break
        t_s.append(i * bucket_s + width)
        values.append(mb_per_s(total, width))
    return Series(name, "MB/s", t_s, values)


def drive(logs: Sequence[Appendable], batches: Sequence[Sequence[Record]], *, producers: int,
          seconds: float | None = None, max_appends: int | None = None, rate_bytes_per_s: float | None = None,
          prepare: Callable[[Sequence[Record]], Sequence[Record]] | None = None) -> TimedRun:
    """Run :class:`Producers` over ``logs`` (any :class:`Appendable`) and time every append.

    ``prepare`` rewrites each batch right before its append (the e2e workload stamps send times).
    """
    spans: list[tuple[float, float]] = []
    timed = [_TimedLog(log, spans, prepare) for log in logs]
    # Producers only calls append(): the recorder stands in for a PartitionLog
    runner = Producers(cast("Sequence[PartitionLog]", timed), batches, producers=producers)
    start = time.perf_counter()
    produced = runner.run(seconds=seconds, max_appends=max_appends, rate_bytes_per_s=rate_bytes_per_s)
    return TimedRun(produced, start, seconds if seconds is not None else produced.seconds, spans,
                    runner.batch_payload_bytes, len(batches[0]))


def record_batches(params: SuiteParams, *, seed_offset: int = 0) -> list[list[Record]]:
    """The run's record pool (32 MiB; 8 MiB in quick runs), built before any clock starts."""
    pool = 8 * MiB if params.quick else 32 * MiB
    return make_batches(params.batch_records, params.record_bytes, seed=params.seed + seed_offset, pool_bytes=pool)


def run_naive(store: ObjectStore, batches: Sequence[Sequence[Record]], *, topic: str, partitions: int,
              producers: int, seconds: float | None = None, max_appends: int | None = None) -> TimedRun:
    """Saturating producers appending ``batches`` to ``partitions`` naive logs on ``store``."""
    logs = [NaiveLog(store, topic, p) for p in range(partitions)]
    return drive(logs, batches, producers=producers, seconds=seconds, max_appends=max_appends)
