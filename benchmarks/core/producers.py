"""The ingest workload: 1 KiB records in pre-built batches, appended by producer threads to partitions.

Vocabulary: a **ticket** is one append's number in a run (a shared counter hands them out), and the
ticket picks the partition (``ticket % partitions``), so appends spread evenly over partitions however
the threads interleave. A **payload byte** is a key or value byte; a **record byte** is what s3stream
counts per record (:attr:`s3stream.Record.size_bytes`: payload + 21 bytes of per-record overhead), the
unit of ``flush.bytes`` and ``segment.bytes``.

A run stops at a deadline, after a number of appends, or both; producers are either saturating (each
appends again as soon as the previous append is acknowledged) or rate-limited (each keeps a fixed
schedule and never bursts to catch up, so the offered load stays at the asked rate). Record objects
are built once, before the timed part: the benchmark measures s3stream's append path, not the caller's
record construction.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.core.measure import CpuMeter, Helpers, LatencySummary, mb_per_s
from s3stream import PartitionLog, Record

__all__ = ["ProduceResult", "Producers", "make_batches", "random_bytes"]


def random_bytes(nbytes: int, *, seed: int) -> bytes:
    """Incompressible, reproducible bytes (object stores and Parquet cannot shrink them)."""
    return random.Random(seed).randbytes(nbytes)


def _prime_at_least(n: int) -> int:
    def prime(k: int) -> bool:
        return k >= 2 and all(k % d for d in range(2, int(k**0.5) + 1))

    while not prime(n):
        n += 1
    return n


def make_batches(batch_records: int, record_bytes: int, *, seed: int, pool_bytes: int = 32 << 20) -> list[list[Record]]:
    """A pool of ~``pool_bytes`` of keyless records with unique random ``record_bytes``-byte values.

    The pool holds a prime number of batches, so appends cycling through it (``ticket % len``) give
    every partition every batch whatever the partition count (unless it is a multiple of that prime):
    data repeats only every ``pool_bytes``, far beyond any compression window or Parquet page, so
    neither WAL objects nor segments compress better than real data would.
    """
    count = _prime_at_least(max(7, pool_bytes // max(1, batch_records * record_bytes)))
    pool = random_bytes(count * batch_records * record_bytes, seed=seed)
    values = [pool[i * record_bytes:(i + 1) * record_bytes] for i in range(count * batch_records)]
    return [[Record(key=None, value=values[b * batch_records + r]) for r in range(batch_records)]
            for b in range(count)]


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """What a producer run appended, how long it took, and every append's acknowledgement latency."""

    appends: int
    records: int
    payload_bytes: int
    record_bytes: int
    seconds: float
    latency: LatencySummary
    cpu: dict[str, float]

    @property
    def mb_per_s(self) -> float:
        return mb_per_s(self.payload_bytes, self.seconds)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"appends": self.appends, "records": self.records, "payload_bytes": self.payload_bytes,
                "record_bytes": self.record_bytes, "seconds": round(self.seconds, 3),
                "payload_mb_per_s": round(self.mb_per_s, 2), "records_per_s": round(self.records_per_s, 1),
                "ack_latency_ms": self.latency.as_dict(), "cpu": self.cpu}


class Producers:
    """``producers`` threads appending ``batches`` (cycled) to ``logs``; the CPU reported includes ``helpers``.

    :attr:`appended_bytes` grows live for the progress bar (updated without a lock: approximate while
    running, never used for results, which count each producer's own appends).
    """

    def __init__(self, logs: Sequence[PartitionLog], batches: Sequence[Sequence[Record]], *, producers: int,
                 helpers: Helpers | None = None) -> None:
        self._helpers = helpers  # processes whose CPU counts as the store's (seal workers)
        if not logs or not batches or producers < 1:
            raise ValueError("Producers needs partitions, batches and at least one producer")
        self._logs = list(logs)
        self._batches = [list(b) for b in batches]
        self._producers = producers
        sizes = {(len(b), sum(len(r.value or b"") + len(r.key or b"") for r in b), sum(r.size_bytes for r in b))
                 for b in self._batches}
        if len(sizes) != 1:
            raise ValueError("every batch must have the same records count and sizes")
        self._batch_records, self._batch_payload, self._batch_record_bytes = sizes.pop()
        self.appended_bytes = 0

    @property
    def batch_payload_bytes(self) -> int:
        """Payload bytes (keys + values) of one append."""
        return self._batch_payload

    def run(self, *, seconds: float | None = None, max_appends: int | None = None,
            rate_bytes_per_s: float | None = None) -> ProduceResult:
        """Append until ``seconds`` pass or ``max_appends`` appends are done (at least one must be given).

        ``rate_bytes_per_s`` (payload bytes, all producers together) rate-limits the producers.
        Raises the first error any producer hit, after stopping the others.
        """
        if seconds is None and max_appends is None:
            raise ValueError("give seconds, max_appends or both")
        tickets = itertools.count()
        stop = threading.Event()
        results: list[list[float]] = []
        errors: list[BaseException] = []
        lock = threading.Lock()
        interval = None
        if rate_bytes_per_s:
            interval = self._batch_payload * self._producers / rate_bytes_per_s
        start = time.perf_counter()
        deadline = start + seconds if seconds is not None else None

        def worker(index: int) -> None:
            try:
                outcome = self._produce(index, tickets, stop, deadline, max_appends, interval)
            except BaseException as exc:  # noqa: BLE001 - re-raised by run() after the others stop
                stop.set()
                with lock:
                    errors.append(exc)
                return
            with lock:
                results.append(outcome)

        cpu = CpuMeter(self._helpers)
        threads = [threading.Thread(target=worker, args=(i,), name=f"bench-producer-{i}")
                   for i in range(self._producers)]
        for t in threads:
            t.start()
        try:
            for t in threads:
                t.join()
        finally:  # Ctrl-C in join: stop the producers before the store closes under them
            stop.set()
            for t in threads:
                t.join()
        elapsed = time.perf_counter() - start
        if errors:
            raise errors[0]
        return self._result(results, elapsed, cpu.read())

    def _produce(self, index: int, tickets: itertools.count[int], stop: threading.Event, deadline: float | None,
                 max_appends: int | None, interval: float | None) -> list[float]:
        """One producer's loop; returns its acknowledgement latencies (one per append)."""
        latencies: list[float] = []
        next_at = time.perf_counter() + (interval * index / self._producers if interval else 0.0)
        while not stop.is_set():
            if interval is not None and stop.wait(max(0.0, next_at - time.perf_counter())):
                break
            now = time.perf_counter()
            if deadline is not None and now >= deadline:
                break
            ticket = next(tickets)
            if max_appends is not None and ticket >= max_appends:
                break
            self._logs[ticket % len(self._logs)].append(self._batches[ticket % len(self._batches)])
            latencies.append(time.perf_counter() - now)
            self.appended_bytes += self._batch_payload
            if interval is not None:  # keep the schedule, but never burst to catch up
                next_at = max(next_at + interval, time.perf_counter())
        return latencies

    def _result(self, per_producer: list[list[float]], elapsed: float, cpu: dict[str, float]) -> ProduceResult:
        latencies = [x for lat in per_producer for x in lat]
        appends = len(latencies)
        return ProduceResult(appends=appends, records=appends * self._batch_records,
                             payload_bytes=appends * self._batch_payload,
                             record_bytes=appends * self._batch_record_bytes, seconds=elapsed,
                             latency=LatencySummary.of_seconds(latencies), cpu=cpu)
