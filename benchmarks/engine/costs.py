"""S3 PUTs per GiB ingested (1 partition and many), and sequential reads from sealed segments.

PUT cost: a fresh store whose ObjectStore is wrapped in a
:class:`~s3stream.objectstore.recording.RecordingObjectStore`. First the one-time costs, counted apart:
one 1-record append per partition and a flush (the node's namespace *fence*, one writer-epoch
manifest *claim* per partition, one small WAL object). Then the steady state: the recorder is reset,
``cost_bytes`` of records are appended (evenly over the partitions) and the store is flushed. Every
PUT is classified by key (:mod:`s3stream.base.layout`):

* ``wal/{node}/{seq}.wal``: WAL objects (and, once per process start, the fence);
* ``logs/.../segments/...``: sealed segment objects;
* ``logs/.../manifest/...``: manifest versions (one per seal in the steady state);
* anything else (topic documents, probe scratch keys).

Data PUTs = WAL objects + segments of the steady state, per GiB of record bytes (the unit of
``flush.bytes``), against the bound ``1.1 * (1 GiB / flush.bytes) + sealed segments per GiB``.
If producers cannot fill ``flush.bytes`` within ``flush.interval.ms``, WAL objects are flushed by
time and are smaller: the ingest rate of the run is reported beside the counts for that reason.

Sequential read: the 1-partition log, rolled so every record is in a sealed segment, is read back by a
*fresh* store (cold caches, its own empty WAL directory) with ``PartitionLog.read_arrow`` in a loop
of ``read_max_bytes`` requests, from the log start to the log end; every offset must come back once.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.core.measure import CpuMeter, mb_per_s
from benchmarks.core.producers import ProduceResult, Producers, make_batches
from benchmarks.core.profiler import maybe_sample
from benchmarks.core.progress import PhaseProgress
from benchmarks.core.targets import Target
from benchmarks.engine.params import GiB, Params
from s3stream import open_store
from s3stream.objectstore.recording import RecordingObjectStore

__all__ = ["PutCost", "classify_puts", "measure_put_cost", "sealed_objects", "sequential_read"]

_TOPIC = "cost"


@dataclass(frozen=True, slots=True)
class PutCost:
    """PUT counts of one cost run, and the store it wrote (for the read phase)."""

    store_name: str
    partitions: int
    details: dict[str, Any]


def classify_puts(log: list[tuple[str, str, int]], *, node_opened: bool = False) -> dict[str, int]:
    """Count PUTs by object kind (see the module docstring).

    ``node_opened``: the log starts before the node opened, so its first WAL-key PUT is the fence.
    """
    counts = {"wal_object": 0, "fence": 0, "segment": 0, "manifest": 0, "other": 0}
    for op, key, _size in log:
        if op != "PUT":
            continue
        if key.startswith("wal/") and key.endswith(".wal"):
            first = node_opened and counts["fence"] == 0 and counts["wal_object"] == 0
            counts["fence" if first else "wal_object"] += 1
        elif "/segments/" in key:
            counts["segment"] += 1
        elif "/manifest/" in key:
            counts["manifest"] += 1
        else:
            counts["other"] += 1
    return counts


def measure_put_cost(target: Target, params: Params, partitions: int, progress: PhaseProgress,
                     *, roll_at_end: bool) -> PutCost:
    """Ingest ``cost_bytes`` into ``partitions`` partitions of a fresh store and count its PUTs."""
    name = f"cost-{partitions}p"
    url, inner = target.store(name)
    recorder = RecordingObjectStore(inner, log_size=2_000_000)
    store = open_store(url, object_store=recorder, wal_dir=target.wal_dir(name), **params.open_options())
    try:
        store.create_topic(_TOPIC, partitions=partitions, config={"segment.bytes": params.segment_bytes})
        logs = [store.partition(_TOPIC, p) for p in range(partitions)]
        per_partition = max(1, params.cost_bytes // params.record_bytes // partitions)
        batch_records = max(1, min(params.batch_records, per_partition // 4))
        batches = make_batches(batch_records, params.record_bytes, seed=params.seed + 2,
                               pool_bytes=params.record_pool_bytes)
        producers = Producers(logs, batches, producers=params.producers)
        appends = math.ceil(params.cost_bytes / producers.batch_payload_bytes)
        with progress.phase(f"PUT cost: {partitions} partition(s)", total=appends * producers.batch_payload_bytes,
                            completed=lambda: producers.appended_bytes):
            recorder.reset()
            for plog in logs:  # one-time costs: the node's fence, one writer claim per partition
                plog.append(batches[0][:1])
            store.flush()
            one_time = classify_puts(recorder.log, node_opened=True)
            recorder.reset()
            produced = producers.run(max_appends=appends)
            store.flush()
        counts = classify_puts(recorder.log)
        sealed = sealed_objects(recorder.log)
        requests = recorder.counts()
        if roll_at_end:
            for plog in logs:
                plog.roll()
    finally:
        store.close()
    details = _cost_details(produced, counts, sealed, params, partitions)
    details.update(batch_records=batch_records, requests=requests, one_time_puts=one_time)
    return PutCost(name, partitions, details)


def sealed_objects(log: list[tuple[str, str, int]]) -> int:
    """Distinct segment objects PUT: a segment above one upload part costs several requests on one key."""
    return len({key for op, key, _size in log if op == "PUT" and "/segments/" in key})


def _cost_details(produced: ProduceResult, counts: dict[str, int], sealed: int, params: Params,
                  partitions: int) -> dict[str, Any]:
    """PUT counts per GiB of record bytes, and the bound they are judged against (one PUT per seal)."""
    settings = params.settings()
    gib = produced.record_bytes / GiB
    data_puts = counts["wal_object"] + counts["segment"]
    bound = 1.1 * (GiB / settings.flush_bytes) + sealed / gib
    return {
        "partitions": partitions, "appends": produced.appends,
        "record_bytes_ingested": produced.record_bytes, "payload_bytes_ingested": produced.payload_bytes,
        "puts": counts, "flush_bytes": settings.flush_bytes,
        "segment_bytes": params.segment_bytes, "sealed_segments": sealed,
        "data_puts": data_puts, "data_puts_per_gib": round(data_puts / gib, 2),
        "all_puts_per_gib": round(sum(counts.values()) / gib, 2),
        "wal_object_puts_per_gib": round(counts["wal_object"] / gib, 2),
        "segment_puts_per_gib": round(counts["segment"] / gib, 2),
        "manifest_puts_per_gib": round(counts["manifest"] / gib, 2),
        "manifest_puts_beyond_seals": counts["manifest"] - sealed,
        "bound_per_gib": round(bound, 2),
        "ingest_seconds": round(produced.seconds, 3),
        "ingest_payload_mb_per_s": round(produced.mb_per_s, 2),
        "size_triggered_flush_needs_mb_per_s": round(settings.flush_bytes * 1000 / settings.flush_interval_ms / 1e6, 2),
    }


def _payload_bytes(table: pa.Table) -> int:
    total = 0
    for name in ("key", "value"):
        s = pc.sum(pc.binary_length(table.column(name))).as_py()
        total += int(s) if s is not None else 0
    return total


def sequential_read(target: Target, params: Params, store_name: str,
                    progress: PhaseProgress) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Read partition 0 of ``store_name`` start to end through a fresh store: (measurements, profile)."""
    url, inner = target.store(store_name)
    recorder = RecordingObjectStore(inner, log_size=1000)
    store = open_store(url, object_store=recorder, wal_dir=target.wal_dir(store_name + "-reader"),
                       **params.open_options())
    try:
        plog = store.partition(_TOPIC, 0)
        start, end = plog.log_start_offset, plog.log_end_offset
        segments = plog.segments()
        unsealed = [s for s in segments if not s.sealed and s.record_count]
        recorder.reset()
        position = [start]
        with progress.phase("sequential read (cold store)", total=max(end - start, 1),
                            completed=lambda: position[0] - start), maybe_sample(params.profile) as sampler:
            cpu = CpuMeter()
            t0 = time.perf_counter()
            rows, payload, calls = _read_all(plog, start, end, params.read_max_bytes, position)
            elapsed = time.perf_counter() - t0
            cpu_used = cpu.read()
    finally:
        store.close()
    return {
        "records": rows, "payload_bytes": payload, "seconds": round(elapsed, 3),
        "payload_mb_per_s": round(mb_per_s(payload, elapsed), 2),
        "object_bytes_read": recorder.bytes_read,
        "object_mb_per_s": round(mb_per_s(recorder.bytes_read, elapsed), 2),
        "read_calls": calls, "read_max_bytes": params.read_max_bytes, "requests": recorder.counts(),
        "sealed_segments": sum(1 for s in segments if s.sealed), "unsealed_records": sum(
            s.record_count for s in unsealed), "log_start_offset": start, "log_end_offset": end, "cpu": cpu_used,
        "read_amplification": round(recorder.bytes_read / payload, 3) if payload else None,
    }, (sampler.result() if sampler is not None else None)


def _read_all(plog: Any, start: int, end: int, max_bytes: int, position: list[int]) -> tuple[int, int, int]:
    """Read ``[start, end)`` in order; check every offset comes back once. Returns rows, bytes, calls."""
    offset, rows, payload, calls = start, 0, 0, 0
    while offset < end:
        table = plog.read_arrow(offset, max_bytes=max_bytes)
        calls += 1
        if table.num_rows == 0:
            raise RuntimeError(f"read_arrow({offset}) returned nothing before the log end {end}")
        offsets = table.column("offset")
        first, last = offsets[0].as_py(), offsets[-1].as_py()
        if first != offset or last - first + 1 != table.num_rows:
            raise RuntimeError(f"read_arrow({offset}) returned offsets {first}..{last} in {table.num_rows} rows")
        rows += table.num_rows
        payload += _payload_bytes(table)
        offset = last + 1
        position[0] = offset
    return rows, payload, calls
