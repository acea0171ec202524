"""The ingest workload: saturating producers with ``ack=wal``, then ``ack=s3``, then the naive baseline.

Each mode gets a fresh store root and ``duration_s`` seconds of ``producers`` threads appending
``batch_records`` x ``record_bytes`` keyless records to ``partitions`` partitions, each producer
appending again as soon as its previous append is acknowledged. Before the clock starts, one append per
partition claims the partitions and opens the node (one-time costs), and the request counters are reset.

* throughput (MB/s, records/s) counts the payload *acknowledged* within the duration: what producers
  were told is safe (``ack=wal``: fsync'd locally; ``ack=s3``: in a committed WAL object; naive: its
  object PUT);
* latency: every append's acknowledgement latency (call to return);
* requests: the object-store requests of the timed run *and* the final ``Store.flush()``, so PUTs per
  GiB include the WAL objects and segments that make the acknowledged data durable in the bucket.
  Data PUTs are WAL objects + sealed segments (:func:`benchmarks.engine.costs.classify_puts`); per GiB of
  payload (keys + values) appended.

The topic's ``segment.bytes`` is the run's ``segment_bytes``, so partitions roll and seal during the run
as they would in production (each byte is PUT twice: WAL object, then segment).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.core.result import WorkloadResult
from benchmarks.engine.costs import classify_puts
from benchmarks.engine.params import GiB
from benchmarks.suite.context import SuiteContext
from benchmarks.suite.naive import TimedRun, drive, record_batches, run_naive
from s3stream import Record, open_store
from s3stream.objectstore.recording import RecordingObjectStore

__all__ = ["run_ingest"]

_TOPIC = "ingest"
_LOG_SIZE = 1_000_000   # requests kept for classifying PUTs by key (far above a 60 s run's count)


@dataclass(frozen=True, slots=True)
class _Mode:
    """One measured mode: its producer run and the requests it cost."""

    run: TimedRun
    requests: dict[str, int]
    puts: dict[str, int]
    flush_s: float

    @property
    def gib(self) -> float:
        return self.run.produced.payload_bytes / GiB

    def per_gib(self, count: int) -> float:
        return count / self.gib if self.gib > 0 else 0.0


def run_ingest(ctx: SuiteContext) -> WorkloadResult:
    """Measure ingest with ``ack=wal``, ``ack=s3`` and the naive baseline (see the module docstring)."""
    params = ctx.params
    result = WorkloadResult("ingest")
    batches = record_batches(params)
    started = time.perf_counter()
    modes = {ack: _run_mode(ctx, ack, batches) for ack in ("wal", "s3")}
    naive = _run_naive(ctx, batches)
    result.seconds = time.perf_counter() - started

    for ack, mode in modes.items():
        _throughput_figures(result, f"ack_{ack}_", mode.run)
        result.latencies_ms[f"ack={ack}"] = mode.run.latencies_ms()
        result.series.append(mode.run.series(f"ack={ack}"))
    wal, s3 = modes["wal"], modes["s3"]
    data_puts = {ack: m.puts["wal_object"] + m.puts["segment"] for ack, m in modes.items()}
    result.figure("put_per_gib", wal.per_gib(data_puts["wal"]), "PUT/GiB")
    result.figure("get_per_gib", wal.per_gib(wal.requests["GET"]), "GET/GiB")
    result.figure("ack_s3_put_per_gib", s3.per_gib(data_puts["s3"]), "PUT/GiB")
    result.figure("ack_s3_get_per_gib", s3.per_gib(s3.requests["GET"]), "GET/GiB")
    result.requests = dict(wal.requests)
    result.payload_bytes = wal.run.produced.payload_bytes

    latency = naive.run.latency()
    result.baseline.update({
        "naive_mb_per_s": naive.run.mb_per_s(), "naive_records_per_s": naive.run.records_per_s(),
        "naive_p50_ms": latency.p50_ms, "naive_p99_ms": latency.p99_ms, "naive_p999_ms": latency.p999_ms,
        "naive_put_per_gib": naive.per_gib(naive.requests["PUT"]),
    })
    result.latencies_ms["naive"] = naive.run.latencies_ms()
    result.series.append(naive.run.series("naive"))

    p = params
    result.notes.append(f"{p.producers} saturating producers, {p.partitions} partitions, {p.batch_records} x "
                        f"{p.record_bytes} B keyless records per append, {p.duration_s:g} s per mode; "
                        f"segment.bytes {p.segment_bytes}, flush.bytes {p.flush_bytes}")
    for ack, mode in modes.items():
        result.notes.append(f"ack={ack}: {mode.run.produced.appends} appends, "
                            f"{mode.run.produced.payload_bytes} payload bytes, final flush {mode.flush_s:.3f} s; "
                            f"requests {mode.requests}; PUTs by kind {mode.puts}")
    result.notes.append(f"naive: {naive.run.produced.appends} appends (one object each), requests {naive.requests}")
    return result


def _throughput_figures(result: WorkloadResult, prefix: str, run: TimedRun) -> None:
    latency = run.latency()
    result.figure(f"{prefix}mb_per_s", run.mb_per_s(), "MB/s")
    result.figure(f"{prefix}records_per_s", run.records_per_s(), "records/s")
    result.figure(f"{prefix}p50_ms", latency.p50_ms, "ms")
    result.figure(f"{prefix}p99_ms", latency.p99_ms, "ms")
    result.figure(f"{prefix}p999_ms", latency.p999_ms, "ms")


def _run_mode(ctx: SuiteContext, ack: str, batches: Sequence[Sequence[Record]]) -> _Mode:
    """One s3stream store with ``ack``: warm up, reset the counters, produce, flush, count."""
    params = ctx.params
    name = f"ingest-ack-{ack}"
    url, inner = ctx.target.store(name)
    recorder = RecordingObjectStore(inner, log_size=_LOG_SIZE)
    store = open_store(url, object_store=recorder, wal_dir=ctx.target.wal_dir(name),
                       **params.open_options(ack=ack))
    try:
        store.create_topic(_TOPIC, partitions=params.partitions, config={"segment.bytes": params.segment_bytes})
        logs = [store.partition(_TOPIC, p) for p in range(params.partitions)]
        for plog in logs:  # one-time costs: the node's fence, one writer claim per partition
            plog.append(batches[0][:1])
        store.flush()
        recorder.reset()
        with ctx.progress.phase(f"ingest ack={ack}", seconds=params.duration_s):
            run = drive(logs, batches, producers=params.producers, seconds=params.duration_s)
            t0 = time.perf_counter()
            store.flush()
            flush_s = time.perf_counter() - t0
        requests = recorder.counts()
        puts = classify_puts(recorder.log)
    finally:
        store.close()
    if sum(puts.values()) != requests["PUT"]:
        raise RuntimeError(f"ingest ack={ack}: the request log overflowed ({requests['PUT']} PUTs)")
    return _Mode(run, requests, puts, flush_s)


def _run_naive(ctx: SuiteContext, batches: Sequence[Sequence[Record]]) -> _Mode:
    """The naive baseline for the same duration, on a fresh root of the same target."""
    params = ctx.params
    _, inner = ctx.target.store("ingest-naive")
    recorder = RecordingObjectStore(inner, log_size=1000)
    try:
        with ctx.progress.phase("ingest naive baseline", seconds=params.duration_s):
            run = run_naive(recorder, batches, topic=_TOPIC, partitions=params.partitions,
                            producers=params.producers, seconds=params.duration_s)
        requests = recorder.counts()
    finally:
        recorder.close()
    return _Mode(run, requests, {"object": requests["PUT"]}, 0.0)
