"""Sustained ingest with ``ack=wal``, append latency at half that load, and peak memory while ingesting.

Sustained ingest: ``producers`` threads append batches of ``batch_records`` 1 KiB records to
``partitions`` partitions for ``duration_s`` seconds, then the store is flushed (every acknowledged
record in a committed WAL object, every rolled segment sealed). The throughput counts the flush:
payload bytes / (producing time + final flush time), i.e. data *in the target*, not just acknowledged.
The topic's ``segment.bytes`` (64 MiB in full runs) makes partitions roll during the run, so the
steady state includes sealing: each byte is PUT twice (WAL object, then segment), as in production,
where every byte is eventually sealed; the object bytes PUT per payload byte are reported.
Before the clock starts, one append per partition claims the partitions and opens the node (one-time
costs, not ingest).

Latency at half load: the same store, a fresh topic, producers rate-limited to half the sustained
payload rate, appending ``latency_batch_records``-record batches; each append's acknowledgement
latency (call to return: WAL fsync'd, group commit) is one sample. Meanwhile separate processes probe
the raw fsync latency of the same disk (:mod:`benchmarks.core.fsyncprobe`): the disk in the phase's
conditions, with nothing of s3stream in between. The judged reference is the *appenders' probe*: as
many writers as producers, each writing one append's payload bytes + fdatasync to a file of its own on
the producers' schedule (same count, size and pace), so the raw fsyncs are sampled as the appends are:
a disk stall delays every writer in flight once, as it delays every append in flight once. A single
4 KiB writer every 5 ms is reported beside it (it records a stall once, where the appenders record it
once per producer, so its p99 undercounts the stalls the appends see). The appenders' probe doubles the
phase's writes to the disk; the acks are measured under that load too.

Memory: peak RSS of the process over the sustained-ingest phase (producers and final flush), plus the
peak RSS of each seal worker process (``seal.workers``; s3:// targets seal in workers, as a user's store
would): the sum of the peaks, an upper bound. The workers' CPU counts as the process's too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.core.fsyncprobe import FsyncProbe
from benchmarks.core.measure import PeakRss, current_rss_bytes, mb_per_s
from benchmarks.core.producers import ProduceResult, Producers, make_batches
from benchmarks.core.profiler import maybe_sample
from benchmarks.core.progress import PhaseProgress
from benchmarks.core.targets import Target
from benchmarks.engine.params import Params
from s3stream import Store, open_store

__all__ = ["IngestOutcome", "engine_counters", "engine_gauges", "measure_ingest",
           "seal_worker_baselines", "seal_worker_pids"]

@dataclass(frozen=True, slots=True)
class IngestOutcome:
    """The measurements of the ingest phases, ready for the report."""

    sustained: dict[str, Any]
    latency: dict[str, Any]
    memory: dict[str, Any]
    profiles: dict[str, Any]


def engine_counters(store: Store) -> dict[str, Any]:
    """WAL objects uploaded and sealed segments so far (internals; empty if they moved)."""
    out: dict[str, Any] = {}
    try:
        node = store.runtime.existing_node()
        if node is not None:
            out["wal_objects_put"] = node.uploader.puts
            out["wal_object_bytes_put"] = node.uploader.bytes_put
        segments = [s for plog in store.runtime.open_logs() for s in plog.manifest(refresh=False).segments]
        out["sealed_segments"] = len(segments)
        out["segment_object_bytes_put"] = sum(s.object_size for s in segments)
    except AttributeError:
        pass
    return out


def seal_worker_baselines(store: Store) -> dict[int, int]:
    """pid -> resident bytes once started, of the store's seal worker processes ({} when it seals in threads)."""
    workers = getattr(store.runtime, "seal_workers", None)
    return {} if workers is None else dict(workers.ready_rss_bytes)


def seal_worker_pids(store: Store) -> Callable[[], list[int]]:
    """The live seal worker pids of ``store``, read when called (workers start on the first seal)."""
    return lambda: list(seal_worker_baselines(store))


def engine_gauges(store: Store) -> dict[str, int]:
    """Bytes the engine holds now, by holder (internals, sampled for the memory breakdown; {} if moved).

    ``uploader_buffered``: appends waiting for or inside a WAL-object flush; ``tail_cache``: batches in
    the partitions' tail caches (the store's accounting); ``chunk_cache``: decoded WAL-object chunks.
    """
    rt = store.runtime
    out: dict[str, int] = {}
    node = rt.existing_node()
    if node is not None:
        out["uploader_buffered"] = int(node.uploader.buffered_bytes)
    for name, holder, attr in (("tail_cache", rt, "_memory_bytes"), ("chunk_cache", rt.chunks, "_bytes")):
        value = getattr(holder, attr, None)
        if isinstance(value, int):
            out[name] = value
    return out


def _warm_up(store: Store, topic: str, partitions: int, batch: list[Any]) -> list[Any]:
    logs = [store.partition(topic, p) for p in range(partitions)]
    for plog in logs:
        plog.append(batch)
    store.flush()
    return logs


def measure_ingest(target: Target, params: Params, progress: PhaseProgress) -> IngestOutcome:
    """Run the sustained-ingest and half-load latency phases on one store of ``target``."""
    pool = params.record_pool_bytes
    batches = make_batches(params.batch_records, params.record_bytes, seed=params.seed, pool_bytes=pool)
    small = make_batches(params.latency_batch_records, params.record_bytes, seed=params.seed + 1, pool_bytes=pool)
    baseline_rss = current_rss_bytes()
    url, objstore = target.store("ingest")
    if target.kind != "latency":  # the store opens the URL itself, as a user's would (seal.workers=auto)
        objstore.close()
    store = open_store(url, object_store=objstore if target.kind == "latency" else None,
                       wal_dir=target.wal_dir("ingest"), **params.open_options())
    workers = seal_worker_pids(store)
    try:
        topic_config = {"segment.bytes": params.segment_bytes}
        store.create_topic("ingest", partitions=params.partitions, config=topic_config)
        logs = _warm_up(store, "ingest", params.partitions, batches[0])
        producers = Producers(logs, batches, producers=params.producers, helpers=workers)
        before = engine_counters(store)
        with progress.phase(f"ingest: {params.partitions} partitions, {params.duration_s:g} s",
                            seconds=params.duration_s), \
                PeakRss(gauges=lambda: engine_gauges(store), helpers=workers) as peak, \
                maybe_sample(params.profile) as sampler:
            produced = producers.run(seconds=params.duration_s)
            t0 = time.perf_counter()
            store.flush()
            flush_s = time.perf_counter() - t0
        sustained = _sustained(produced, flush_s, before, engine_counters(store), params)
        memory = {**peak.result(), "baseline_rss_bytes": baseline_rss,
                  "helper_processes_baseline_rss_bytes": sum(seal_worker_baselines(store).values())}
        profiles = {"sustained_ingest": sampler.result()} if sampler is not None else {}
        rate = 0.5 * sustained["payload_mb_per_s"] * 1e6
        store.create_topic("latency", partitions=params.partitions, config=topic_config)
        lat_logs = _warm_up(store, "latency", params.partitions, small[0])
        probe_dir = Path(target.wal_dir("fsync-probe"))
        probe = FsyncProbe(probe_dir, params.latency_seconds)
        append_bytes = params.latency_batch_records * params.record_bytes
        interval_s = params.producers * append_bytes / max(rate, 1.0)  # each producer's schedule (Producers.run)
        appenders_probe = FsyncProbe(probe_dir, params.latency_seconds, block_bytes=append_bytes,
                                     interval_s=interval_s, threads=params.producers)
        with progress.phase(f"ack latency at half load ({rate / 1e6:.1f} MB/s)", seconds=params.latency_seconds), \
                maybe_sample(params.profile) as sampler, probe, appenders_probe:
            paced = Producers(lat_logs, small, producers=params.producers, helpers=workers).run(
                seconds=params.latency_seconds, rate_bytes_per_s=rate)
        if sampler is not None:
            profiles["latency_at_half_load"] = sampler.result()
        latency = {**paced.as_dict(), "offered_payload_mb_per_s": round(rate / 1e6, 2),
                   "batch_records": params.latency_batch_records}
        if probe.summary is not None:
            latency["fsync_during_phase_ms"] = probe.summary.as_dict()
        if appenders_probe.summary is not None:
            latency["appenders_fsync_during_phase_ms"] = {
                **appenders_probe.summary.as_dict(), "block_bytes": append_bytes, "threads": params.producers,
                "interval_ms": round(interval_s * 1e3, 3)}
    finally:
        store.close()
    return IngestOutcome(sustained, latency, memory, profiles)


def _sustained(produced: ProduceResult, flush_s: float, before: dict[str, Any], after: dict[str, Any],
               params: Params) -> dict[str, Any]:
    total_s = produced.seconds + flush_s
    out: dict[str, Any] = {
        **produced.as_dict(),
        "final_flush_seconds": round(flush_s, 3),
        "seconds_to_flushed": round(total_s, 3),
        "payload_mb_per_s": round(mb_per_s(produced.payload_bytes, total_s), 2),
        "records_per_s": round(produced.records / total_s, 1) if total_s > 0 else 0.0,
        "acked_payload_mb_per_s": round(produced.mb_per_s, 2),
        "acked_records_per_s": round(produced.records_per_s, 1),
        "partitions": params.partitions,
        "producers": params.producers,
        "batch_records": params.batch_records,
        "record_value_bytes": params.record_bytes,
    }
    for key in ("wal_objects_put", "wal_object_bytes_put", "sealed_segments", "segment_object_bytes_put"):
        if key in before and key in after:
            out[key] = after[key] - before[key]
    if out.get("wal_objects_put"):
        out["mean_wal_object_bytes"] = out["wal_object_bytes_put"] // out["wal_objects_put"]
    if "wal_object_bytes_put" in out and "segment_object_bytes_put" in out and produced.payload_bytes:
        put_bytes = out["wal_object_bytes_put"] + out["segment_object_bytes_put"]
        out["object_bytes_put_per_payload_byte"] = round(put_bytes / produced.payload_bytes, 3)
        out["object_put_mb_per_s"] = round(mb_per_s(put_bytes, total_s), 2)
    return out
