"""The mixed workload: producers, tailing consumers, the cleaner and retention, all at once on one topic.

What a ``cleanup.policy=compact,delete`` topic lives through in production, compressed into ``duration_s``:
rate-limited producers append keyed records (keys from a pool of 10k, so compaction has work) to small
segments that roll by size or by ``segment.ms`` (a fifth of the run), consumers in the same store read every
partition from the start and follow the tail, a cleaner thread runs ``Store.run_cleaner()`` in a loop and a
retention thread ``Store.run_retention()``; ``retention.ms`` is a third of the run, so the first segments
expire while it lasts (a fixed few seconds less than the run would expire nothing in a long run whose
segments take longer than that to fill).

End-to-end lag is the time from the append call to a consumer seeing the record: each value carries the
send time (``perf_counter_ns``) in its first 8 bytes, decoded with pyarrow from whole ``read_arrow`` tables.
A consumer whose offset fell below the log start (retention moved it) skips to the log start and counts it.
Any exception in any thread stops the run and is re-raised at the end; a partition the cleaner marks
uncleanable counts as such an error.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import s3stream
from benchmarks.core.measure import LatencySummary, mb_per_s
from benchmarks.core.producers import random_bytes
from benchmarks.core.result import Series, WorkloadResult
from benchmarks.suite.context import MiB, SuiteContext, SuiteParams
from s3stream import OffsetOutOfRange, PartitionLog, Record
from s3stream.objectstore.recording import RecordingObjectStore

__all__ = ["MixedShape", "run_mixed", "send_times_ns", "shape_for"]

NAME = "mixed"
TOPIC = "mixed"
KEY_POOL = 10_000
DEFAULT_RATE_MB_PER_S = 4.0
BATCH_POOL = 61          # pre-built batches (a prime, so batches and partitions do not pair up)
READ_BYTES = 4 * MiB
IDLE_WAIT_S = 0.005
STAMP_BYTES = 8
SAMPLES = 5000           # latency samples kept per name (the result thins them to this anyway)


@dataclass(frozen=True, slots=True)
class MixedShape:
    """The topic and the offered load of a run, derived from the suite's parameters."""

    rate_bytes_per_s: float
    segment_bytes: int
    segment_ms: int
    retention_ms: int
    cleaner_backoff_s: float
    retention_backoff_s: float

    def topic_config(self) -> dict[str, object]:
        return {"cleanup.policy": "compact,delete", "segment.bytes": self.segment_bytes,
                "segment.ms": self.segment_ms, "retention.ms": self.retention_ms,
                "min.cleanable.dirty.ratio": 0.01}


def shape_for(params: SuiteParams) -> MixedShape:
    """Small segments (1 MiB in quick runs, ``segment_bytes // 8`` otherwise) that also roll by time, and a
    retention a third of the run long, so both the cleaner and retention have work within the run."""
    duration_ms = max(1, int(params.duration_s * 1000))
    rate = params.rate_mb_per_s if params.rate_mb_per_s else DEFAULT_RATE_MB_PER_S
    seg = MiB if params.quick else max(MiB, params.segment_bytes // 8)
    return MixedShape(rate_bytes_per_s=rate * 1e6, segment_bytes=seg, segment_ms=max(50, duration_ms // 5),
                      retention_ms=max(100, duration_ms // 3),
                      cleaner_backoff_s=min(0.5, params.duration_s / 10),
                      retention_backoff_s=min(1.0, params.duration_s / 5))


def send_times_ns(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """The send times stamped in the first 8 bytes of ``values`` (little-endian ``perf_counter_ns``)."""
    stamps = pc.binary_slice(values, 0, STAMP_BYTES).cast(pa.binary(STAMP_BYTES))
    if isinstance(stamps, pa.ChunkedArray):
        stamps = stamps.combine_chunks()
    return np.frombuffer(stamps.buffers()[1], dtype="<i8", count=len(stamps), offset=stamps.offset * STAMP_BYTES)


# ----------------------------------------------------------------------------------------------- threads


@dataclass(slots=True)
class _Run:
    """What every thread of a run shares: the stop signal, the clock origin, the errors."""

    t0: float
    deadline: float
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[tuple[str, BaseException]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def thread(self, name: str, body: Callable[[], None]) -> threading.Thread:
        """A thread that records any exception of ``body`` and stops the run."""
        def guarded() -> None:
            try:
                body()
            except BaseException as exc:  # noqa: BLE001 - re-raised by run_mixed after every thread stops
                with self.lock:
                    self.errors.append((name, exc))
                self.stop.set()

        return threading.Thread(target=guarded, name=f"bench-mixed-{name}", daemon=True)


@dataclass(slots=True)
class _Produced:
    ends_s: list[float] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)


@dataclass(slots=True)
class _Consumed:
    reads_s: list[float] = field(default_factory=list)
    reads_bytes: list[int] = field(default_factory=list)
    lags_ms: list[np.ndarray] = field(default_factory=list)
    out_of_range: int = 0


@dataclass(slots=True)
class _Maintenance:
    cleaner_passes: int = 0
    cleaner_rounds: int = 0
    cleaner_aborted: int = 0
    cleaner_bytes_removed: int = 0
    cleaner_records_removed: int = 0
    cleaner_retention_deleted: int = 0
    retention_passes: int = 0
    retention_deleted: int = 0


Batch = tuple[list[bytes], list[bytes]]   # keys, value tails (the send time is prepended at append)


def _batches(params: SuiteParams) -> tuple[list[Batch], int]:
    """Keyed batches built up front, and the payload bytes of one append."""
    rng = np.random.default_rng(params.seed)
    keys = [b"key-%05d" % i for i in range(KEY_POOL)]
    tail = max(0, params.record_bytes - len(keys[0]) - STAMP_BYTES)
    n = params.batch_records
    pool = random_bytes(BATCH_POOL * n * tail, seed=params.seed)
    picks = rng.integers(0, KEY_POOL, size=(BATCH_POOL, n))
    batches = [([keys[k] for k in picks[b]], [pool[(b * n + r) * tail:(b * n + r + 1) * tail] for r in range(n)])
               for b in range(BATCH_POOL)]
    return batches, n * (len(keys[0]) + STAMP_BYTES + tail)


def _producer(run: _Run, logs: Sequence[PartitionLog], batches: Sequence[Batch], tickets: itertools.count[int],
              index: int, producers: int, interval: float, out: _Produced) -> None:
    """Append on a fixed schedule (never bursting to catch up) until the deadline."""
    next_at = run.t0 + interval * index / producers
    while not run.stop.wait(max(0.0, next_at - time.perf_counter())):
        if time.perf_counter() >= run.deadline:
            return
        ticket = next(tickets)
        keys, tails = batches[ticket % len(batches)]
        stamp = time.perf_counter_ns().to_bytes(STAMP_BYTES, "little")
        records = [Record(key=k, value=stamp + t) for k, t in zip(keys, tails, strict=True)]
        started = time.perf_counter()
        logs[ticket % len(logs)].append(records)
        ended = time.perf_counter()
        out.latencies_s.append(ended - started)
        out.ends_s.append(ended - run.t0)
        next_at = max(next_at + interval, ended)


def _consumer(run: _Run, logs: Sequence[PartitionLog], out: _Consumed) -> None:
    """Read every partition from offset 0 and follow the tail; skip to the log start when retention passed us."""
    offsets = [0] * len(logs)
    while not run.stop.is_set():
        rows = 0
        for p, log in enumerate(logs):
            try:
                table = log.read_arrow(offsets[p], max_bytes=READ_BYTES)
            except OffsetOutOfRange as exc:
                if exc.log_start_offset is None or exc.log_start_offset <= offsets[p]:
                    raise
                offsets[p] = exc.log_start_offset
                out.out_of_range += 1
                continue
            if not table.num_rows:
                continue
            seen_ns = time.perf_counter_ns()
            rows += table.num_rows
            offsets[p] = int(table.column("offset")[-1].as_py()) + 1
            values, keys = table.column("value"), table.column("key")
            out.reads_s.append(time.perf_counter() - run.t0)
            out.reads_bytes.append(int(pc.sum(pc.binary_length(values)).as_py() or 0)
                                   + int(pc.sum(pc.binary_length(keys)).as_py() or 0))
            out.lags_ms.append((seen_ns - send_times_ns(values)) / 1e6)
        if not rows:
            run.stop.wait(IDLE_WAIT_S)


def _cleaner(run: _Run, store: s3stream.Store, shape: MixedShape, out: _Maintenance) -> None:
    while not run.stop.is_set():
        report = store.run_cleaner()
        out.cleaner_passes += 1
        r = report.cleaned
        if r is not None and r.aborted:   # retention dropped its segments or won the swap: nothing removed
            out.cleaner_aborted += 1
        elif r is not None:
            out.cleaner_rounds += 1
            out.cleaner_bytes_removed += r.bytes_read - r.bytes_written
            out.cleaner_records_removed += r.records_removed
        out.cleaner_retention_deleted += report.retention_segments_deleted
        if report.uncleanable:
            raise RuntimeError(f"the cleaner marked partitions uncleanable: {report.uncleanable}")
        run.stop.wait(shape.cleaner_backoff_s)


def _retention(run: _Run, store: s3stream.Store, shape: MixedShape, out: _Maintenance) -> None:
    while not run.stop.is_set():
        report = store.run_retention()
        out.retention_passes += 1
        out.retention_deleted += report.segments_deleted
        run.stop.wait(shape.retention_backoff_s)


# ----------------------------------------------------------------------------------------------- run


@dataclass(slots=True)
class _Outcome:
    elapsed_s: float        # start to the last producer and consumer stopping: the throughput window
    drain_s: float          # how much longer the cleaner and retention threads took to finish their pass
    batch_bytes: int
    producers: list[_Produced]
    consumers: list[_Consumed]
    maintenance: _Maintenance


def _run_threads(ctx: SuiteContext, store: s3stream.Store, logs: Sequence[PartitionLog], shape: MixedShape
                 ) -> _Outcome:
    params = ctx.params
    batches, batch_bytes = _batches(params)
    producers, consumers = max(1, params.producers), max(1, params.consumers)
    interval = batch_bytes * producers / shape.rate_bytes_per_s
    t0 = time.perf_counter()
    run = _Run(t0=t0, deadline=t0 + params.duration_s)
    produced = [_Produced() for _ in range(producers)]
    consumed = [_Consumed() for _ in range(consumers)]
    maint = _Maintenance()
    tickets = itertools.count()
    threads = [run.thread(f"producer-{i}", partial(_producer, run, logs, batches, tickets, i, producers, interval,
                                                   produced[i])) for i in range(producers)]
    threads += [run.thread(f"consumer-{i}", partial(_consumer, run, logs, consumed[i])) for i in range(consumers)]
    threads += [run.thread("cleaner", partial(_cleaner, run, store, shape, maint)),
                run.thread("retention", partial(_retention, run, store, shape, maint))]
    with ctx.progress.phase(f"mixed: {producers} producers, {consumers} consumers, cleaner, retention",
                            seconds=params.duration_s):
        for t in threads:
            t.start()
        try:
            run.stop.wait(params.duration_s)   # returns early when a thread fails
        finally:
            run.stop.set()
            for t in threads[:producers + consumers]:
                t.join()
            elapsed = time.perf_counter() - t0
            for t in threads[producers + consumers:]:
                t.join()
    drain = time.perf_counter() - t0 - elapsed
    if run.errors:
        name, first = run.errors[0]
        first.add_note(f"mixed workload: {len(run.errors)} thread error(s); the first in {name}: "
                       + "; ".join(f"{n}: {e!r}" for n, e in run.errors[:5]))
        raise first
    return _Outcome(elapsed, drain, batch_bytes, produced, consumed, maint)


def run_mixed(ctx: SuiteContext) -> WorkloadResult:
    """Produce, consume, clean and retain at once for ``duration_s``; raise if any thread failed."""
    params = ctx.params
    started = time.perf_counter()
    shape = shape_for(params)
    url, objstore = ctx.target.store(NAME)
    rec = RecordingObjectStore(objstore, log_size=1)
    store = s3stream.open_store(url, object_store=rec, wal_dir=ctx.target.wal_dir(NAME), **params.open_options())
    try:
        store.create_topic(TOPIC, params.partitions, shape.topic_config())
        logs = [store.partition(TOPIC, i) for i in range(params.partitions)]
        rec.reset()
        outcome = _run_threads(ctx, store, logs, shape)
        requests = rec.counts()
    finally:
        store.close()
    result = _result(params, shape, outcome, requests)
    result.seconds = time.perf_counter() - started
    return result


# ----------------------------------------------------------------------------------------------- result


def _rank(ordered: np.ndarray, q: float) -> float:
    """Nearest-rank percentile of a sorted sample (the rule of :class:`LatencySummary`)."""
    return float(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))])


def _thin(ordered: np.ndarray, limit: int = SAMPLES) -> list[float]:
    """A sorted sample thinned to ``limit`` evenly spaced ranks (as :func:`model.downsample`, without a sort)."""
    if len(ordered) <= limit:
        return [float(x) for x in ordered]
    idx = np.round(np.arange(limit) * ((len(ordered) - 1) / (limit - 1))).astype(np.int64)
    return [float(x) for x in ordered[idx]]


def _buckets(t_s: np.ndarray, elapsed: float) -> tuple[np.ndarray, np.ndarray]:
    """The 1 s bucket of each time, and each bucket's length: the last one absorbs a partial second of
    0.5 s or less (threads stopping after the deadline) instead of showing a near-empty bucket."""
    n = max(1, round(elapsed))
    widths = np.ones(n)
    widths[-1] = max(elapsed - (n - 1), 1e-3)
    return np.clip(t_s.astype(np.int64), 0, n - 1), widths


def _per_second(t_s: np.ndarray, weights: np.ndarray, elapsed: float) -> tuple[list[float], list[float]]:
    """Sum of ``weights`` per 1 s bucket divided by the bucket's length."""
    idx, widths = _buckets(t_s, elapsed)
    sums = np.bincount(idx, weights=weights, minlength=len(widths))
    return [float(i) for i in range(len(widths))], [float(x) for x in sums / widths]


def _lag_p99_series(t_s: np.ndarray, lags: np.ndarray, elapsed: float) -> tuple[list[float], list[float]]:
    """The p99 lag of the records seen in each 1 s bucket (buckets where nothing was seen are left out)."""
    idx, widths = _buckets(t_s, elapsed)
    ts, values = [], []
    for b in range(len(widths)):
        sel = np.sort(lags[idx == b])
        if len(sel):
            ts.append(float(b))
            values.append(_rank(sel, 0.99))
    return ts, values


def _result(params: SuiteParams, shape: MixedShape, out: _Outcome, requests: dict[str, int]) -> WorkloadResult:
    result = WorkloadResult(NAME)
    elapsed, consumers, maint = out.elapsed_s, len(out.consumers), out.maintenance
    latencies = [x for p in out.producers for x in p.latencies_s]
    ends = np.array([x for p in out.producers for x in p.ends_s], dtype=np.float64)
    produced_bytes = len(latencies) * out.batch_bytes
    read_t = np.array([x for c in out.consumers for x in c.reads_s], dtype=np.float64)
    read_bytes = np.array([x for c in out.consumers for x in c.reads_bytes], dtype=np.float64)
    lag_parts = [lag for c in out.consumers for lag in c.lags_ms]
    if not latencies or not lag_parts:
        raise RuntimeError(f"mixed: nothing {'produced' if not latencies else 'consumed'} in {elapsed:.1f} s")
    lag_t = np.concatenate([np.full(len(lag), t) for c in out.consumers for t, lag in zip(c.reads_s, c.lags_ms,
                                                                                           strict=True)])
    lags = np.concatenate(lag_parts)
    ordered_lags = np.sort(lags)
    ack = LatencySummary.of_seconds(latencies)
    result.figure("produce_mb_per_s", mb_per_s(produced_bytes, elapsed), "MB/s")
    result.figure("offered_mb_per_s", shape.rate_bytes_per_s / 1e6, "MB/s")
    result.figure("produce_p50_ms", ack.p50_ms, "ms")
    result.figure("produce_p99_ms", ack.p99_ms, "ms")
    result.figure("consume_mb_per_s", mb_per_s(float(read_bytes.sum()), elapsed) / consumers, "MB/s")
    result.figure("consumer_lag_p50_ms", _rank(ordered_lags, 0.50), "ms")
    result.figure("consumer_lag_p99_ms", _rank(ordered_lags, 0.99), "ms")
    result.figure("consumer_out_of_range", sum(c.out_of_range for c in out.consumers), "skips")
    result.figure("cleaner_passes", maint.cleaner_passes, "passes")
    result.figure("cleaner_rounds", maint.cleaner_rounds, "rounds")
    result.figure("cleaner_aborted_rounds", maint.cleaner_aborted, "rounds")
    result.figure("cleaner_bytes_removed", maint.cleaner_bytes_removed, "bytes")
    result.figure("cleaner_records_removed", maint.cleaner_records_removed, "records")
    result.figure("retention_passes", maint.retention_passes, "passes")
    result.figure("retention_segments_deleted", maint.retention_deleted + maint.cleaner_retention_deleted, "segments")
    result.figure("errors", 0, "errors")   # a thread error raises before this point
    t, v = _per_second(ends, np.full(len(ends), out.batch_bytes / 1e6), elapsed)
    result.series.append(Series("produce_mb_per_s", "MB/s", t, v))
    t, v = _per_second(read_t, read_bytes / 1e6 / consumers, elapsed)
    result.series.append(Series("consume_mb_per_s", "MB/s", t, v))
    t, v = _lag_p99_series(lag_t, lags, elapsed)
    result.series.append(Series("consumer_lag_p99_ms", "ms", t, v))
    result.latencies_ms["produce"] = _thin(np.sort(np.array(latencies)) * 1000.0)
    result.latencies_ms["lag"] = _thin(ordered_lags)
    result.requests = dict(requests)
    result.payload_bytes = produced_bytes
    result.notes += [
        f"{len(out.producers)} producers at {shape.rate_bytes_per_s / 1e6:g} MB/s offered in total, "
        f"{params.batch_records}-record batches of {params.record_bytes} B keyed records ({KEY_POOL:,} keys), "
        f"{params.partitions} partitions; {consumers} tailing consumers from offset 0; "
        f"{elapsed:.1f} s (the cleaner and retention threads finished their last pass {out.drain_s:.1f} s later)",
        f"topic: cleanup.policy=compact,delete, segment.bytes={shape.segment_bytes}, "
        f"segment.ms={shape.segment_ms}, retention.ms={shape.retention_ms}, min.cleanable.dirty.ratio=0.01; "
        f"cleaner loop backoff {shape.cleaner_backoff_s:g} s, retention loop {shape.retention_backoff_s:g} s "
        "(each pass flushes the store first, as Store.run_cleaner/run_retention do)",
        "consume_mb_per_s is per consumer (payload bytes read); lag = append call to the consumer seeing the record",
        f"retention_segments_deleted: {maint.retention_deleted} by run_retention, "
        f"{maint.cleaner_retention_deleted} by the cleaner's retention of compacted logs",
    ]
    return result
