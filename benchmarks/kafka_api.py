"""The Python API path of the Kafka benchmark: what the server's work is compared with, on the same store.

* :func:`ingest`: ``append_arrow_async`` from a few threads (each owns some partitions and keeps a window of
  appends in flight), with the ack mode the server gives acks=all;
* :func:`read_pass`: ``read_arrow`` of every partition to its end, one partition after the other;
* :func:`e2e_api`: the end-to-end phase's producer and reader: records paced as the Kafka producer's, batched
  per partition as librdkafka batches them (sent when the first record has waited ``linger_ms`` or the batch
  holds ``batch_bytes``), and a reader thread polling ``read_arrow`` at the log end of every partition.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.core.measure import mb_per_s
from benchmarks.e2e import sent_ns
from benchmarks.kafka_clients import KafkaBenchError
from benchmarks.kafka_data import Checksums, Values, e2e_summary, ticks
from s3stream import AppendResult, PartitionLog

__all__ = ["POLL_S", "e2e_api", "ingest", "read_pass"]

#: the end-to-end reader's sleep after a round of polls that found nothing
POLL_S = 0.001


def _batch(values: list[bytes]) -> pa.RecordBatch:
    return pa.record_batch([pa.array(values, type=pa.binary())], names=["value"])


def ingest(logs: Sequence[PartitionLog], values: Values, counts: list[int], *, threads: int, batch_records: int,
           window: int, ack: str) -> dict[str, Any]:
    """Append ``counts[p]`` records to each partition in ``batch_records`` batches; wait for every ack."""
    problems: list[str] = []

    def produce(t: int) -> None:
        mine = [p for p in range(len(logs)) if p % threads == t]
        pending: collections.deque[Future[AppendResult]] = collections.deque()
        try:
            barrier.wait()
            for first in range(0, max(counts[p] for p in mine), batch_records):
                for p in mine:
                    if first < counts[p]:
                        batch = pa.record_batch([values.arrow(p, first, min(batch_records, counts[p] - first))],
                                                names=["value"])
                        pending.append(logs[p].append_arrow_async(batch, ack=ack))
                        if len(pending) >= window:
                            pending.popleft().result()
            for future in pending:
                future.result()
        except Exception as exc:  # noqa: BLE001 - a failed append is a problem of the run, reported with it
            problems.append(f"Python API ingest: thread {t}: {type(exc).__name__}: {exc}")

    workers = [threading.Thread(target=produce, args=(t,), name=f"bench-api-producer-{t}")
               for t in range(threads) if any(p % threads == t for p in range(len(logs)))]
    barrier = threading.Barrier(len(workers) + 1)
    for w in workers:
        w.start()
    barrier.wait()
    started = time.perf_counter()
    for w in workers:
        w.join()
    seconds = time.perf_counter() - started
    records = sum(counts)
    nbytes = records * values.record_bytes
    for p, plog in enumerate(logs):
        if plog.log_end_offset != counts[p]:
            problems.append(f"Python API ingest: partition {p} ends at {plog.log_end_offset}, {counts[p]} appended")
    return {"records": records, "payload_bytes": nbytes, "seconds": round(seconds, 3),
            "mb_per_s": round(mb_per_s(nbytes, seconds), 3), "records_per_s": round(records / seconds, 1),
            "threads": len(workers), "batch_records": batch_records, "window": window, "ack": ack,
            "problems": problems}


def read_pass(logs: Sequence[PartitionLog], *, read_bytes: int) -> dict[str, Any]:
    """Read every partition from its log start to its log end with ``read_arrow``; checksums and time."""
    seen = Checksums(len(logs))
    problems: list[str] = []
    started = time.perf_counter()
    for p, plog in enumerate(logs):
        offset, end = plog.log_start_offset, plog.log_end_offset
        while offset < end:
            table = plog.read_arrow(offset, max_bytes=read_bytes)
            rows = table.num_rows
            if rows == 0:
                raise KafkaBenchError(f"read_arrow: partition {p}: nothing at {offset} below the log end {end}")
            offsets = table.column("offset")
            first, last = offsets[0].as_py(), offsets[-1].as_py()
            if first != offset or last - first + 1 != rows:
                problems.append(f"read_arrow: partition {p}: offsets {first}..{last} in {rows} rows from {offset}")
            seen.add_column(p, table.column("value"), rows)
            offset = last + 1
    return {"seen": seen, "seconds": time.perf_counter() - started, "problems": problems}


class _Reader:
    """The end-to-end reader: one thread polling ``read_arrow`` at the log end of every partition in turn."""

    def __init__(self, logs: Sequence[PartitionLog], read_bytes: int) -> None:
        self.logs = logs
        self.read_bytes = read_bytes
        self.offsets = [0] * len(logs)
        self.seen = Checksums(len(logs))
        self.latencies: list[np.ndarray] = []
        self.problems: list[str] = []
        self.target: list[int] | None = None
        self.stop = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                got = 0
                for p, plog in enumerate(self.logs):
                    got += self._poll(p, plog)
                target = self.target
                if target is not None and all(s >= t for s, t in zip(self.seen.records, target, strict=True)):
                    return
                if not got:
                    time.sleep(POLL_S)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the phase after the thread ends
            self.failure = exc

    def _poll(self, p: int, plog: PartitionLog) -> int:
        table = plog.read_arrow(self.offsets[p], max_bytes=self.read_bytes)
        rows = int(table.num_rows)
        if rows == 0:
            return 0
        now = time.perf_counter_ns()
        first, last = table.column("offset")[0].as_py(), table.column("offset")[-1].as_py()
        if (first != self.offsets[p] or last - first + 1 != rows) and len(self.problems) < 20:
            self.problems.append(f"Python API end to end: partition {p}: offsets {first}..{last} in {rows} rows "
                                 f"from {self.offsets[p]}")
        column = table.column("value")
        stamps = sent_ns(column)
        self.latencies.append(now - stamps[stamps > 0])
        self.seen.add_column(p, column, rows)
        self.offsets[p] = last + 1
        return rows

    def wait_for(self, counts: list[int], timeout_s: float, what: str) -> None:
        deadline = time.perf_counter() + timeout_s
        while any(s < c for s, c in zip(self.seen.records, counts, strict=True)):
            if self.failure is not None:
                raise KafkaBenchError(f"{what}: the reader failed: {self.failure!r}") from self.failure
            if time.perf_counter() > deadline:
                raise KafkaBenchError(f"{what}: the reader saw {self.seen.records} of {counts} records within "
                                      f"{timeout_s:g} s")
            time.sleep(0.005)


class _Batcher:
    """Per-partition batches as librdkafka builds them: sent after ``linger_ms`` or at ``batch_bytes``."""

    def __init__(self, logs: Sequence[PartitionLog], ack: str, linger_ms: int, batch_bytes: int) -> None:
        self.logs, self.ack = logs, ack
        self.linger_ns, self.batch_bytes = linger_ms * 1_000_000, batch_bytes
        self.pending: list[list[bytes]] = [[] for _ in logs]
        self.stamps: list[list[int]] = [[] for _ in logs]
        self.nbytes = [0] * len(logs)
        self.futures: list[Future[AppendResult]] = []
        self.acks: list[tuple[int, list[int]]] = []  # (ack time ns, send times ns) per batch

    def add(self, p: int, value: bytes, stamp: int) -> None:
        self.pending[p].append(value)
        self.stamps[p].append(stamp)
        self.nbytes[p] += len(value)
        if self.nbytes[p] >= self.batch_bytes:
            self.send(p)

    def due(self, now_ns: int) -> None:
        for p, stamps in enumerate(self.stamps):
            if stamps and now_ns - stamps[0] >= self.linger_ns:
                self.send(p)

    def send(self, p: int) -> None:
        values, stamps = self.pending[p], self.stamps[p]
        self.pending[p], self.stamps[p], self.nbytes[p] = [], [], 0
        future = self.logs[p].append_arrow_async(_batch(values), ack=self.ack)
        future.add_done_callback(lambda _f: self.acks.append((time.perf_counter_ns(), stamps)))
        self.futures.append(future)

    def ack_latencies_s(self) -> list[float]:
        return [(done - s) / 1e9 for done, stamps in self.acks for s in stamps if s]


def e2e_api(logs: Sequence[PartitionLog], values: Values, *, rate_per_s: float, seconds: float, linger_ms: int,
            batch_bytes: int, ack: str, tick_s: float, read_bytes: int, timeout_s: float) -> dict[str, Any]:
    """The Python API's end-to-end phase (see the module docstring): the same records, rate and batching as
    the Kafka producer's, read back by a thread polling ``read_arrow``."""
    partitions = len(logs)
    sent = Checksums(partitions)
    for p, plog in enumerate(logs):  # warm-up: claims the partitions; unstamped, so no latency sample
        value = values.value(p, 0)
        plog.append_arrow(_batch([value]), ack=ack)
        sent.add(p, value)
    reader = _Reader(logs, read_bytes)
    thread = threading.Thread(target=reader.run, name="bench-api-tail", daemon=True)
    thread.start()
    batcher = _Batcher(logs, ack, linger_ms, batch_bytes)
    problems: list[str] = []
    try:
        reader.wait_for(list(sent.records), timeout_s, "Python API end to end (warm-up)")
        k = 0
        started = time.perf_counter()
        for due in ticks(rate_per_s, seconds, tick_s):
            for _ in range(due):
                p, i = k % partitions, k // partitions + 1
                stamp = time.perf_counter_ns()
                value = values.value(p, i, stamp)
                batcher.add(p, value, stamp)
                sent.add(p, value)
                k += 1
            batcher.due(time.perf_counter_ns())
        for p in range(partitions):
            if batcher.pending[p]:
                batcher.send(p)
        produced_s = time.perf_counter() - started
        for future in batcher.futures:
            try:
                future.result(timeout_s)
            except Exception as exc:  # noqa: BLE001 - a failed append is a problem of the run
                problems.append(f"Python API end to end: append failed: {type(exc).__name__}: {exc}")
        reader.target = list(sent.records)
        reader.wait_for(reader.target, timeout_s, "Python API end to end")
    finally:
        reader.stop.set()
        thread.join(timeout_s)
    latencies = np.concatenate(reader.latencies) if reader.latencies else np.zeros(0, dtype=np.int64)
    return e2e_summary(k, produced_s, values.record_bytes, latencies, batcher.ack_latencies_s(), sent, reader.seen,
                       problems + reader.problems, "Python API end to end")
