"""The catch-up workload: a cold reader reads a whole sealed log back, next to the naive baseline's.

Setup (not measured): ``catchup_bytes`` of payload is appended to ``partitions`` partitions, the store
is flushed, every partition rolled so all of it is in sealed segments, and the store closed. Then a
*fresh* store (cold caches, its own empty WAL directory, a new ObjectStore on the same URL) reads every
partition from its log start to its log end with ``read_arrow`` (:data:`READ_BYTES` per call),
``consumers`` threads taking partitions from a shared queue. Every offset must come back exactly once.

The naive baseline writes the same batches as one object per append (setup, not measured), then a
fresh ObjectStore reads them back the same way: ``consumers`` threads, each LISTing a partition and
GETting and decoding its objects in order.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.core.measure import mb_per_s
from benchmarks.core.producers import Producers
from benchmarks.core.result import WorkloadResult
from benchmarks.engine.params import GiB
from benchmarks.suite.context import MiB, SuiteContext
from benchmarks.suite.naive import NaiveLog, record_batches, run_naive, throughput_series
from s3stream import PartitionLog, Record, open_store
from s3stream.objectstore.recording import RecordingObjectStore

__all__ = ["READ_BYTES", "run_catchup", "table_payload_bytes"]

READ_BYTES = 8 * MiB
_TOPIC = "catchup"


def table_payload_bytes(table: pa.Table) -> int:
    """Key + value bytes of a table of records (vectorized)."""
    total = 0
    for name in ("key", "value"):
        s = pc.sum(pc.binary_length(table.column(name))).as_py()
        total += int(s) if s is not None else 0
    return total


@dataclass(frozen=True, slots=True)
class _Read:
    """What one catch-up read measured."""

    records: int
    payload_bytes: int
    seconds: float
    done: list[tuple[float, int]]   # (seconds since the start, payload bytes) per read call
    requests: dict[str, int]

    @property
    def mb_per_s(self) -> float:
        return mb_per_s(self.payload_bytes, self.seconds)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def get_per_gib(self) -> float:
        gib = self.payload_bytes / GiB
        return self.requests["GET"] / gib if gib > 0 else 0.0


def run_catchup(ctx: SuiteContext) -> WorkloadResult:
    """Measure cold sequential read-back of sealed data, s3stream and naive (see the module docstring)."""
    params = ctx.params
    batches = record_batches(params, seed_offset=3)
    result = WorkloadResult("catchup")
    started = time.perf_counter()
    appends = max(params.partitions, math.ceil(params.catchup_bytes / _batch_payload(batches)))
    ends = _write(ctx, batches, appends)
    read = _read(ctx, ends, appends * _batch_payload(batches))
    written_naive = _write_naive(ctx, batches, appends)
    naive = _read_naive(ctx, written_naive, len(batches[0]))
    result.seconds = time.perf_counter() - started

    result.figure("catchup_mb_per_s", read.mb_per_s, "MB/s")
    result.figure("catchup_records_per_s", read.records_per_s, "records/s")
    result.figure("catchup_seconds", read.seconds, "s")
    result.figure("catchup_get_per_gib", read.get_per_gib(), "GET/GiB")
    result.series.append(throughput_series("catchup", read.done, read.seconds))
    result.series.append(throughput_series("naive", naive.done, naive.seconds))
    result.baseline.update({
        "naive_catchup_mb_per_s": naive.mb_per_s, "naive_catchup_records_per_s": naive.records_per_s,
        "naive_catchup_seconds": naive.seconds, "naive_catchup_get_per_gib": naive.get_per_gib(),
    })
    result.notes.append(f"{read.records} records ({read.payload_bytes} payload bytes) in {params.partitions} "
                        f"sealed partitions read by {params.consumers} thread(s) of a cold store, "
                        f"{READ_BYTES // MiB} MiB per read_arrow; every offset verified once; setup not timed")
    result.notes.append(f"requests of the cold read: {read.requests}; naive read-back: {naive.requests} "
                        f"({written_naive} objects)")
    return result


def _batch_payload(batches: Sequence[Sequence[Record]]) -> int:
    return sum(len(r.value or b"") + len(r.key or b"") for r in batches[0])


def _write(ctx: SuiteContext, batches: Sequence[Sequence[Record]], appends: int) -> list[tuple[int, int]]:
    """Append, flush, roll every partition, close; returns each partition's (log start, log end)."""
    params = ctx.params
    url, inner = ctx.target.store(_TOPIC)
    store = open_store(url, object_store=inner, wal_dir=ctx.target.wal_dir("catchup-writer"), **params.open_options())
    try:
        store.create_topic(_TOPIC, partitions=params.partitions, config={"segment.bytes": params.segment_bytes})
        logs = [store.partition(_TOPIC, p) for p in range(params.partitions)]
        producers = Producers(logs, batches, producers=params.producers)
        with ctx.progress.phase("catchup: write and seal (setup, not timed)", total=appends * _batch_payload(batches),
                                completed=lambda: producers.appended_bytes):
            producers.run(max_appends=appends)
            store.flush()
            for plog in logs:
                plog.roll()
        return [(plog.log_start_offset, plog.log_end_offset) for plog in logs]
    finally:
        store.close()


def _parallel(consumers: int, partitions: int, read_one: Callable[[int, Callable[[int], None]], int],
              done: list[tuple[float, int]]) -> tuple[int, int, float]:
    """Run ``read_one(partition, note)`` over every partition on ``consumers`` threads.

    ``read_one`` calls ``note(payload_bytes)`` after each read (appended to ``done`` with its time, which
    the progress bar watches) and returns the partition's record count. Returns (records, payload
    bytes, seconds); raises the first error a reader hit.
    """
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for p in range(partitions):
        todo.put(p)
    totals = [0]
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = time.perf_counter()

    def note(nbytes: int) -> None:
        done.append((time.perf_counter() - start, nbytes))

    def worker() -> None:
        while not errors:
            try:
                p = todo.get_nowait()
            except queue.Empty:
                return
            try:
                records = read_one(p, note)
            except BaseException as exc:  # noqa: BLE001 - re-raised after the other readers stop
                with lock:
                    errors.append(exc)
                return
            with lock:
                totals[0] += records

    threads = [threading.Thread(target=worker, name=f"bench-catchup-{i}") for i in range(max(1, consumers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    if errors:
        raise errors[0]
    return totals[0], sum(n for _, n in done), seconds


def _read(ctx: SuiteContext, ends: list[tuple[int, int]], payload_bytes: int) -> _Read:
    """Read every partition start to end through a fresh store, verifying every offset once."""
    params = ctx.params
    url, inner = ctx.target.store(_TOPIC)
    recorder = RecordingObjectStore(inner, log_size=1000)
    store = open_store(url, object_store=recorder, wal_dir=ctx.target.wal_dir("catchup-reader"),
                       **params.open_options())
    try:
        logs = [store.partition(_TOPIC, p) for p in range(params.partitions)]
        seen = [(plog.log_start_offset, plog.log_end_offset) for plog in logs]
        if seen != ends:
            raise RuntimeError(f"catchup: the cold store sees log ranges {seen}, the writer left {ends}")
        recorder.reset()
        expected = sum(end - start for start, end in ends)

        def read_one(p: int, note: Callable[[int], None]) -> int:
            return _read_partition(logs[p], *ends[p], note)

        done: list[tuple[float, int]] = []
        with ctx.progress.phase(f"catchup: cold read of {params.partitions} partitions", total=payload_bytes,
                                completed=lambda: sum(n for _, n in done)):
            records, payload, seconds = _parallel(params.consumers, params.partitions, read_one, done)
        requests = recorder.counts()
    finally:
        store.close()
    if records != expected:
        raise RuntimeError(f"catchup: read {records} records, the log holds {expected}")
    return _Read(records, payload, seconds, done, requests)


def _read_partition(plog: PartitionLog, start: int, end: int, note: Callable[[int], None]) -> int:
    offset = start
    while offset < end:
        table = plog.read_arrow(offset, max_bytes=READ_BYTES)
        if table.num_rows == 0:
            raise RuntimeError(f"catchup: {plog}: read_arrow({offset}) returned nothing before the log end {end}")
        offsets = table.column("offset")
        first, last = offsets[0].as_py(), offsets[-1].as_py()
        if first != offset or last - first + 1 != table.num_rows or last >= end:
            raise RuntimeError(f"catchup: {plog}: read_arrow({offset}) returned offsets {first}..{last} "
                               f"in {table.num_rows} rows (log end {end})")
        note(table_payload_bytes(table))
        offset = last + 1
    return end - start


def _write_naive(ctx: SuiteContext, batches: Sequence[Sequence[Record]], appends: int) -> int:
    """Write the same appends to the naive baseline (setup, not timed); returns the object count."""
    params = ctx.params
    _, inner = ctx.target.store("catchup-naive")
    try:
        with ctx.progress.phase("catchup: naive baseline write (setup, not timed)"):
            run = run_naive(inner, batches, topic=_TOPIC, partitions=params.partitions,
                            producers=params.producers, max_appends=appends)
    finally:
        inner.close()
    return run.produced.appends


def _read_naive(ctx: SuiteContext, objects: int, batch_records: int) -> _Read:
    """LIST, GET and decode every naive object through a fresh ObjectStore, ``consumers`` threads."""
    params = ctx.params
    _, inner = ctx.target.store("catchup-naive")
    recorder = RecordingObjectStore(inner, log_size=1000)
    logs = [NaiveLog(recorder, _TOPIC, p) for p in range(params.partitions)]
    recorder.reset()

    def read_one(p: int, note: Callable[[int], None]) -> int:
        records = 0
        for table in logs[p].read():
            records += table.num_rows
            note(table_payload_bytes(table))
        return records

    done: list[tuple[float, int]] = []
    try:
        with ctx.progress.phase("catchup: naive baseline read", total=objects, completed=lambda: len(done)):
            records, payload, seconds = _parallel(params.consumers, params.partitions, read_one, done)
        requests = recorder.counts()
    finally:
        recorder.close()
    if requests["GET"] != objects or records != objects * batch_records:
        raise RuntimeError(f"catchup: the naive read-back got {requests['GET']} of {objects} objects, "
                           f"{records} of {objects * batch_records} records")
    return _Read(records, payload, seconds, done, requests)
