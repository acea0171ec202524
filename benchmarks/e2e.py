"""The end-to-end latency workload: from ``append()`` to the record being seen by a tailing reader.

A producer store (``ack=wal``, the run's flush settings) appends rate-limited batches
(``rate_mb_per_s``, default :data:`DEFAULT_RATE_MB_PER_S`) for ``duration_s`` seconds. Each record's
value starts with its send time (``time.perf_counter_ns()``, 8 bytes little-endian, taken right before
the append), so a reader computes every record's latency from a ``read_arrow`` table at once (an Arrow
binary slice viewed as int64; no per-record loop).

A reader polls ``read_arrow`` from its last offset of each partition, one poller thread per partition
(as a consumer keeps a fetch in flight per partition; polling partitions in turn would add every other
partition's round trips to each record's latency), sleeping :data:`POLL_S` after a poll that finds
nothing:

* ``consumers`` *cross-node* readers in a second Store opened on the same URL with its own WAL
  directory: a different node that reads the unsealed tail through object storage (the manifest, then
  the writer's WAL objects). It sees a record once the WAL object holding it is committed, so this is
  the figure to compare with other object-storage logs (WarpStream quotes an e2e p99 of ~900 ms);
* one *same-node* reader through the producer's own store, served from its tail cache.

Verification: every reader must see every appended record exactly once (offsets contiguous from the
log end at the start to the log end after the final flush, and as many latency samples as records);
anything else raises. Before the clock starts, one append per partition claims the partitions.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.core.measure import LatencySummary, mb_per_s
from benchmarks.core.result import Series, WorkloadResult
from benchmarks.suite.context import MiB, SuiteContext
from benchmarks.suite.naive import drive, record_batches
from s3stream import PartitionLog, Record, open_store
from s3stream.objectstore.recording import RecordingObjectStore

__all__ = ["DEFAULT_RATE_MB_PER_S", "POLL_S", "run_e2e", "sent_ns"]

DEFAULT_RATE_MB_PER_S = 4.0
POLL_S = 0.005
_READ_BYTES = 8 * MiB
_DRAIN_TIMEOUT_S = 30.0   # after the final flush, how long readers get to reach the log end
_TOPIC = "e2e"
_STAMP = struct.Struct("<q")


def _stamp(batch: Sequence[Record]) -> list[Record]:
    """The batch with its send time in the first 8 bytes of every value."""
    stamp = _STAMP.pack(time.perf_counter_ns())
    return [Record(key=r.key, value=stamp + (r.value or b"")[8:]) for r in batch]


def sent_ns(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """The send times stamped in the first 8 bytes of ``values``, as int64 nanoseconds."""
    heads = pc.binary_slice(values, 0, 8).cast(pa.binary(8))
    if isinstance(heads, pa.ChunkedArray):
        heads = heads.combine_chunks()
    data = heads.buffers()[1]
    assert data is not None
    return np.frombuffer(data, dtype="<i8", count=len(heads), offset=heads.offset * 8)


@dataclass
class _Tailer:
    """One tailing reader: a poller thread per partition, so one slow partition delays no other."""

    name: str
    logs: Sequence[PartitionLog]
    offsets: list[int]
    reads: list[tuple[float, np.ndarray]] = field(default_factory=list)  # (perf_counter s, latencies ms)
    errors: list[BaseException] = field(default_factory=list)
    ends: list[int] | None = None
    stop: threading.Event = field(default_factory=threading.Event)

    def threads(self) -> list[threading.Thread]:
        label = self.name.replace(" ", "-")
        return [threading.Thread(target=self._tail, args=(i,), name=f"bench-{label}-p{i}")
                for i in range(len(self.logs))]

    def _tail(self, index: int) -> None:
        try:
            while not self.stop.is_set():
                got = self._poll(index)
                ends = self.ends
                if ends is not None and self.offsets[index] >= ends[index]:
                    if self.offsets[index] > ends[index]:
                        raise RuntimeError(f"{self.name}: partition {index}: read past the log end "
                                           f"({self.offsets[index]} > {ends[index]})")
                    return
                if not got:
                    self.stop.wait(POLL_S)
        except BaseException as exc:  # noqa: BLE001 - reported by the workload after the readers stop
            self.errors.append(exc)
            self.stop.set()

    def _poll(self, index: int) -> int:
        offset = self.offsets[index]
        table = self.logs[index].read_arrow(offset, max_bytes=_READ_BYTES)
        rows = int(table.num_rows)
        if rows == 0:
            return 0
        now_ns = time.perf_counter_ns()
        first, last = table.column("offset")[0].as_py(), table.column("offset")[-1].as_py()
        if first != offset or last - first + 1 != rows:
            raise RuntimeError(f"{self.name}: partition {index}: read_arrow({offset}) returned offsets "
                               f"{first}..{last} in {rows} rows (a missing or duplicated record)")
        latency = (now_ns - sent_ns(table.column("value"))) / 1e6
        if latency.min() < 0:
            raise RuntimeError(f"{self.name}: partition {index}: a record stamped after it was read")
        self.reads.append((now_ns / 1e9, latency))
        self.offsets[index] = last + 1
        return rows

    @property
    def records(self) -> int:
        return sum(len(a) for _, a in self.reads)

    def samples_ms(self) -> list[float]:
        return np.concatenate([a for _, a in self.reads]).tolist() if self.reads else []


def run_e2e(ctx: SuiteContext) -> WorkloadResult:
    """Measure append-to-visible latency, cross-node and same-node (see the module docstring)."""
    params = ctx.params
    if params.record_bytes < _STAMP.size:
        raise ValueError(f"e2e needs records of at least {_STAMP.size} bytes (the send time)")
    rate = (params.rate_mb_per_s or DEFAULT_RATE_MB_PER_S) * 1e6
    batches = record_batches(params)
    result = WorkloadResult("e2e")
    started = time.perf_counter()
    url, inner = ctx.target.store("e2e")
    writer = open_store(url, object_store=inner, wal_dir=ctx.target.wal_dir("e2e-writer"), **params.open_options())
    try:
        writer.create_topic(_TOPIC, partitions=params.partitions, config={"segment.bytes": params.segment_bytes})
        wlogs = [writer.partition(_TOPIC, p) for p in range(params.partitions)]
        for plog in wlogs:  # claim the partitions before the clock starts
            plog.append(_stamp(batches[0][:1]))
        writer.flush()
        starts = [plog.log_end_offset for plog in wlogs]
        _, reader_inner = ctx.target.store("e2e")
        recorder = RecordingObjectStore(reader_inner, log_size=1000)
        reader = open_store(url, object_store=recorder, wal_dir=ctx.target.wal_dir("e2e-reader"),
                            **params.open_options())
        try:
            rlogs = [reader.partition(_TOPIC, p) for p in range(params.partitions)]
            recorder.reset()
            tailers = [_Tailer(f"cross-node reader {i}", rlogs, list(starts)) for i in range(params.consumers)]
            tailers.append(_Tailer("same-node reader", wlogs, list(starts)))
            threads = [thread for t in tailers for thread in t.threads()]
            for thread in threads:
                thread.start()
            try:
                with ctx.progress.phase(f"e2e latency at {rate / 1e6:g} MB/s", seconds=params.duration_s):
                    run = drive(wlogs, batches, producers=params.producers, seconds=params.duration_s,
                                rate_bytes_per_s=rate, prepare=_stamp)
                    writer.flush()
                    ends = [plog.log_end_offset for plog in wlogs]
                    for t in tailers:
                        t.ends = ends
                    deadline = time.perf_counter() + _DRAIN_TIMEOUT_S
                    for thread in threads:
                        thread.join(max(0.0, deadline - time.perf_counter()))
                tail_requests = recorder.counts()
                tail_s = time.perf_counter() - run.start
            finally:
                for t in tailers:
                    t.stop.set()
                for thread in threads:
                    thread.join()
        finally:
            reader.close()
    finally:
        writer.close()
    result.seconds = time.perf_counter() - started
    expected = sum(e - s for s, e in zip(starts, ends, strict=True))
    _verify(tailers, ends, expected, run.produced.records)
    _figures(result, tailers, run.latencies_ms(), expected)
    result.series.append(run.series("produce"))
    result.series.append(_p99_series("e2e p99 (cross-node)", tailers[:-1], run.start, run.seconds))
    result.notes.append(f"offered load {rate / 1e6:g} MB/s ({params.producers} rate-limited producers, "
                        f"{params.batch_records} x {params.record_bytes} B per append), {params.partitions} "
                        f"partitions, achieved {mb_per_s(run.produced.payload_bytes, run.produced.seconds):.2f} MB/s")
    result.notes.append(f"{params.consumers} cross-node reader(s) in a second store on the same URL and 1 "
                        f"same-node reader (a poller thread per partition, {POLL_S * 1000:g} ms sleep after an "
                        f"empty poll); each saw all {expected} records exactly once; "
                        f"flush.interval.ms {params.flush_interval_ms}")
    result.figure("tail_requests_per_s", sum(tail_requests.values()) / tail_s, "requests/s")
    result.notes.append(f"requests of the cross-node readers' store while tailing ({tail_s:.1f} s): {tail_requests}")
    return result


def _verify(tailers: Sequence[_Tailer], ends: list[int], expected: int, produced: int) -> None:
    if expected != produced:
        raise RuntimeError(f"e2e: the log ends moved by {expected} records, but {produced} were appended")
    for t in tailers:
        if t.errors:
            raise RuntimeError(f"e2e: {t.name} failed: {t.errors[0]!r}") from t.errors[0]
        if t.offsets != ends or t.records != expected:
            raise RuntimeError(f"e2e: {t.name} saw {t.records} of {expected} records within "
                               f"{_DRAIN_TIMEOUT_S:g} s of the final flush (at {t.offsets}, ends {ends})")


def _figures(result: WorkloadResult, tailers: Sequence[_Tailer], produce_ms: list[float], expected: int) -> None:
    cross = [x for t in tailers[:-1] for x in t.samples_ms()]
    same = tailers[-1].samples_ms()
    for name, samples in (("e2e", cross), ("same-node", same), ("produce", produce_ms)):
        result.latencies_ms[name] = samples
    summaries = {name: LatencySummary.of_seconds([x / 1000.0 for x in s])
                 for name, s in (("e2e", cross), ("same_node", same), ("produce", produce_ms))}
    result.figure("e2e_p50_ms", summaries["e2e"].p50_ms, "ms")
    result.figure("e2e_p99_ms", summaries["e2e"].p99_ms, "ms")
    result.figure("e2e_p999_ms", summaries["e2e"].p999_ms, "ms")
    result.figure("same_node_p50_ms", summaries["same_node"].p50_ms, "ms")
    result.figure("same_node_p99_ms", summaries["same_node"].p99_ms, "ms")
    result.figure("produce_p50_ms", summaries["produce"].p50_ms, "ms")
    result.figure("produce_p99_ms", summaries["produce"].p99_ms, "ms")
    result.figure("records_verified", float(expected), "records")


def _p99_series(name: str, tailers: Sequence[_Tailer], start: float, seconds: float) -> Series:
    """p99 e2e latency of the records read in each 1 s bucket (by read time) of the producing run."""
    reads = [read for t in tailers for read in t.reads]
    if not reads:
        return Series(name, "ms", [], [])
    t_all = np.concatenate([np.full(len(a), at - start) for at, a in reads])
    lat_all = np.concatenate([a for _, a in reads])
    t_s: list[float] = []
    values: list[float] = []
    for i in range(int(np.ceil(max(seconds, float(t_all.max())))) or 1):
        in_bucket = lat_all[(t_all >= i) & (t_all < i + 1)]
        if len(in_bucket):
            t_s.append(float(i + 1))
            values.append(float(np.percentile(in_bucket, 99, method="inverted_cdf")))
    return Series(name, "ms", t_s, values)
