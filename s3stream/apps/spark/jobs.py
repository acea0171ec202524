"""Distributed jobs on Spark: compaction of many or large partitions, export to Parquet, backfill from it.

* :func:`compact`: the cleaner's round for every eligible compacted partition of the given topics, as
  Spark tasks (:mod:`s3stream.apps.spark.compaction`): one map task per partition, then one rewrite task per
  group of segments of every partition at once, then one atomic swap per partition on the driver. The
  result is identical to the in-process cleaner's (same keep rules, groups, checkpoint, horizons).
  Claiming a new cleaner epoch fences the in-process cleaner of a running ``s3stream serve`` for those
  partitions: it leaves them alone until it restarts (run the job when the server's cleaner is off, or
  let the job own compaction of those topics). While it runs, the driver keeps a heartbeat object in the
  job's scratch directory fresh (:class:`JobHeartbeat`), so store GC leaves the directory alone; GC deletes
  it only once the heartbeat stopped, i.e. after a crash that skipped the job's own cleanup.
* :func:`export`: a topic (or any read options) as a Parquet (or other format) table, partitioned by
  ``partition`` by default; columns are the source's (key, value, topic, partition, offset, timestamp,
  timestampType) and headers (``includeHeaders`` on, so a backfill restores them).
* :func:`backfill`: append a table with columns value and optionally key, partition, timestamp,
  headers to a topic. When the table has ``partition`` and ``offset`` columns (an export) each partition's
  records are appended in offset order.

Each takes a SparkSession (registers the data source on it) and the store URL; on a cluster the
executors need s3stream installed and the store reachable (``docs/spark.md``).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from s3stream.apps.spark.compaction import (
    GroupResult,
    MapResult,
    PartitionPlan,
    build_map,
    groups_of,
    plan_compaction,
    rewrite_group,
    swap,
)
from s3stream.apps.spark.session import register
from s3stream.apps.spark.snapshot import LogReader
from s3stream.base import layout
from s3stream.base.clock import SystemClock
from s3stream.base.errors import CommitConflict, Fenced, S3StreamError
from s3stream.base.ids import IdSource
from s3stream.base.settings import StoreSettings
from s3stream.objectstore.protocol import ObjectStore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CompactReport", "JobHeartbeat", "PartitionOutcome", "backfill", "compact", "export"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """What the compaction job did to one partition."""

    topic: str
    partition: int
    status: str  # "cleaned", "conflict" (inputs changed: outputs discarded), "fenced"
    segments_in: int
    segments_out: int
    records_read: int
    records_kept: int
    bytes_read: int
    bytes_written: int
    checkpoint: int
    map_full: bool


@dataclass(slots=True)
class CompactReport:
    """The job's result: one outcome per partition it planned, and the partitions it skipped."""

    job_id: str
    now_ms: int
    outcomes: list[PartitionOutcome] = field(default_factory=list)
    skipped: list[tuple[str, int]] = field(default_factory=list)

    @property
    def cleaned(self) -> list[PartitionOutcome]:
        return [o for o in self.outcomes if o.status == "cleaned"]


class JobHeartbeat:
    """Re-PUTs ``layout.job_heartbeat_key(job_id)`` every ``interval_ms`` from a daemon thread while entered.

    Store GC deletes a job directory whose newest object is older than ``layout.JOB_ABANDONED_AFTER_MS``:
    the heartbeat keeps a live job's directory young however long its tasks take. On exit the heartbeat
    object is deleted (the caller deletes the rest).
    """

    def __init__(self, store: ObjectStore, job_id: str, *,
                 interval_ms: int = layout.JOB_HEARTBEAT_INTERVAL_MS) -> None:
        self._store = store
        self._key = layout.job_heartbeat_key(job_id)
        self._body = json.dumps({"job_id": job_id}).encode()
        self._interval_s = interval_ms / 1000.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"s3stream-job-heartbeat-{job_id}", daemon=True)

    def __enter__(self) -> JobHeartbeat:
        self._store.put(self._key, self._body)  # before any scratch object: GC never sees them without it
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        try:
            self._store.delete(self._key)
        except S3StreamError as err:
            log.warning("could not delete %s (GC will once it is old): %s", self._key, err)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._store.put(self._key, self._body)
            except S3StreamError as err:  # the next beat retries; GC waits ten intervals
                log.warning("job heartbeat %s failed: %s", self._key, err)


def _plans(reader: LogReader, url: str, job_id: str, topics: Iterable[str], partitions: Sequence[int] | None,
           now_ms: int, settings: StoreSettings, force: bool, report: CompactReport) -> list[PartitionPlan]:
    plans: list[PartitionPlan] = []
    for name in topics:
        info = reader.topic(name)
        for p in partitions if partitions is not None else range(info.partitions):
            plan = plan_compaction(reader, url, job_id, reader.fresh_snapshot(info, p), now_ms=now_ms,
                                   settings=settings, force=force)
            if plan is None:
                report.skipped.append((name, p))
            else:
                plans.append(plan)
    return plans


def _map_task(p: PartitionPlan) -> tuple[PartitionPlan, MapResult]:
    return p, build_map(p)


def _rewrite_task(item: tuple[PartitionPlan, MapResult, int]) -> tuple[str, GroupResult]:
    p, m, index = item
    return p.map_key, rewrite_group(p, m, index)


def compact(spark: SparkSession, url: str, topics: str | Sequence[str], *, partitions: Sequence[int] | None = None,
            now_ms: int | None = None, force: bool = False, store_options: Mapping[str, Any] | None = None,
            job_id: str | None = None) -> CompactReport:
    """Compact the eligible partitions of ``topics`` on Spark (see the module docstring).

    Args:
        spark: the session to run on.
        url: the store URL (reachable from the executors).
        topics: one topic name or several.
        partitions: only these partition numbers (default: all).
        now_ms: the cleaning time (tombstone horizons, compaction lags); default: the system clock.
        force: also clean partitions below ``min.cleanable.dirty.ratio`` when anything is cleanable.
        store_options: store settings (``log.cleaner.dedupe.buffer.size``, ``segment.row.group.bytes``...)
            as ``open_store`` takes them; they must match the in-process cleaner's for identical results.
        job_id: names the job's cleaner epoch owner and scratch objects (default: a fresh id).
    """
    settings = StoreSettings.from_options(dict(store_options or {}))
    now = now_ms if now_ms is not None else SystemClock().now_ms()
    job = job_id or IdSource().ulid(now).lower()
    names = [topics] if isinstance(topics, str) else list(topics)
    report = CompactReport(job, now)
    with LogReader.open(url) as reader:
        plans = _plans(reader, url, job, names, partitions, now, settings, force, report)
        if not plans:
            return report
        with JobHeartbeat(reader.object_store, job):
            try:
                _run(spark, reader, plans, report)
            finally:
                for p in plans:
                    _quiet_delete(reader, p.map_key)
    return report


def _run(spark: SparkSession, reader: LogReader, plans: list[PartitionPlan], report: CompactReport) -> None:
    sc = spark.sparkContext
    maps = sc.parallelize(plans, len(plans)).map(_map_task).collect()
    work = [(p, m, i) for p, m in maps for i in range(len(groups_of(p, m)))]
    results: dict[str, list[GroupResult]] = {}
    if work:
        for key, result in sc.parallelize(work, len(work)).map(_rewrite_task).collect():
            results.setdefault(key, []).append(result)
    for p, m in maps:
        report.outcomes.append(_finish(reader, p, m, results.get(p.map_key, [])))


def _finish(reader: LogReader, p: PartitionPlan, m: MapResult, results: list[GroupResult]) -> PartitionOutcome:
    groups = groups_of(p, m)
    status = "cleaned"
    if results:
        try:
            swap(reader, p, m, results)
        except (CommitConflict, Fenced) as exc:
            status = "fenced" if isinstance(exc, Fenced) else "conflict"
            log.info("compaction of %s/%d not applied (%s): %s", p.topic, p.partition, status, exc)
            for r in results:
                _quiet_delete(reader, r.output.key)
    return PartitionOutcome(
        p.topic, p.partition, status, sum(len(g) for g in groups), len(results) if status == "cleaned" else 0,
        sum(r.stats.records_read for r in results), sum(r.stats.records_kept for r in results),
        sum(r.bytes_read for r in results), sum(r.output.size_bytes for r in results), m.latest_offset + 1, m.full)


def _quiet_delete(reader: LogReader, key: str) -> None:
    try:
        reader.object_store.delete(key)
    except S3StreamError as exc:
        log.warning("could not delete %s (delete it by hand, or GC will if it is a segment): %s", key, exc)


def export(spark: SparkSession, url: str, topic: str, path: str, *, format: str = "parquet",
           partition_by: Sequence[str] = ("partition",), mode: str = "errorifexists",
           read_options: Mapping[str, str] | None = None) -> None:
    """Write ``topic``'s records (every partition, log start to end, or as ``read_options`` say) to ``path``."""
    register(spark)
    reader = (spark.read.format("s3stream").option("url", url).option("subscribe", topic)
              .option("includeHeaders", "true"))
    for key, value in (read_options or {}).items():
        reader = reader.option(key, value)
    writer = reader.load().write.mode(mode).format(format)
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(path)


def backfill(spark: SparkSession, url: str, topic: str, path: str, *, format: str = "parquet",
             keep_partitions: bool = True) -> None:
    """Append the table at ``path`` to ``topic`` (see the module docstring for the columns)."""
    register(spark)
    df = spark.read.format(format).load(path)
    wanted = ["key", "value", "timestamp", "headers"] + (["partition"] if keep_partitions else [])
    columns = [c for c in wanted if c in df.columns]
    if keep_partitions and "partition" in df.columns and "offset" in df.columns:
        df = df.repartition("partition").sortWithinPartitions("partition", "offset")
    df.select(*columns).write.format("s3stream").option("url", url).option("topic", topic).mode("append").save()
