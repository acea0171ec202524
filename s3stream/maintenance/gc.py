"""Store-wide garbage collection: per-partition GC, deleted topics' data, and unneeded WAL objects.

Never earlier than allowed, and never trusting LIST alone for what is referenced:

* **Partitions** (``manifest.gc.collect_log_garbage``): objects removed from a manifest are deleted after
  the topic's ``file.delete.delay.ms``; never-committed segment objects after ``orphan_min_age_ms``; old
  manifest versions after ``manifest_min_age_ms`` (the latest is always kept).
* **Deleted or re-created topics**: every object under ``logs/{topic_id}/`` of a topic id that is no
  longer the live one, once the deleting commit is older than ``file.delete.delay.ms``.
* **WAL objects**: one is needed while some chunk in it holds records of a partition whose latest
  manifest (loaded by probing) still points its WAL cursor at or before it with those records unsealed.
  An unneeded one is deleted once older than ``orphan_min_age_ms`` (a reader that still holds an older
  view gets NoSuchKey, re-reads the manifest and continues from the sealed segment). The newest object
  of each namespace is always kept: it is the fence floor (see :mod:`s3stream.write.node`). An upload that
  landed above a fence of its own epoch is never read (``walscan.fenced_upload``) and goes regardless of its
  chunks; the fence goes only after the uploads it voids (without it they would read as data again).
* **Abandoned job directories** (``_spark/jobs/{id}/``, :data:`s3stream.base.layout.JOBS_PREFIX`): a
  running job re-PUTs its heartbeat there every ``JOB_HEARTBEAT_INTERVAL_MS`` and deletes the directory
  when it ends; one whose newest object is older than ``JOB_ABANDONED_AFTER_MS`` (and
  ``orphan_min_age_ms``) belongs to a job that crashed, and its job objects are deleted: only keys of the
  job layout (``heartbeat``, ``maps/{topic_id}-{partition}.arrow``), so a store nested under the jobs
  directory (its prefix ``<this store>/_spark/jobs``) is never taken for abandoned jobs.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from s3stream.base import layout
from s3stream.base.errors import CorruptData, ObjectNotFound, S3StreamError
from s3stream.base.topic_config import TopicConfig
from s3stream.format.walobject import WalObjectIndex
from s3stream.manifest.gc import collect_log_garbage
from s3stream.manifest.model import Manifest
from s3stream.manifest.topicdoc import TopicDoc
from s3stream.manifest.versioned import manifest_store
from s3stream.read.walscan import fenced_upload

if TYPE_CHECKING:
    from s3stream.engine.runtime import Runtime

__all__ = ["GarbageReport", "collect_garbage"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class GarbageReport:
    """What one GC pass deleted (or would delete, with ``dry_run``), by kind."""

    dry_run: bool = False
    deleted: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def count(self, kind: str | None = None) -> int:
        if kind is not None:
            return len(self.deleted.get(kind, []))
        return sum(len(v) for v in self.deleted.values())

    def summary(self) -> dict[str, int]:
        return {k: len(v) for k, v in sorted(self.deleted.items())}


def collect_garbage(rt: Runtime, *, dry_run: bool = False) -> GarbageReport:
    """One GC pass over the whole store (see the module docstring)."""
    report = GarbageReport(dry_run=dry_run)
    now = rt.clock.now_ms()
    docs = rt.catalog.docs(include_deleted=True)
    live = {d.name: d for d in docs if not d.deleted}
    for doc in live.values():
        _collect_topic(rt, doc, now, report)
    _collect_dead_topic_ids(rt, docs, now, report)
    _collect_wal_objects(rt, live, now, report)
    _collect_abandoned_jobs(rt, now, report)
    for kind, keys in report.deleted.items():
        if not dry_run and keys:
            rt.metrics.garbage_deleted.labels(kind).inc(len(keys))
    return report


def _collect_topic(rt: Runtime, doc: TopicDoc, now: int, report: GarbageReport) -> None:
    cfg = TopicConfig.from_overrides(doc.config)
    for partition in range(doc.partitions):
        vstore = manifest_store(rt.objstore, topic=doc.name, topic_id=doc.topic_id, partition=partition,
                                clock=rt.clock, ids=rt.ids, crash_points=rt.crash)
        try:
            r = collect_log_garbage(rt.objstore, vstore, now_ms=now, delete_delay_ms=cfg.file_delete_delay_ms,
                                    orphan_min_age_ms=rt.settings.orphan_min_age_ms,
                                    manifest_min_age_ms=rt.settings.manifest_min_age_ms,
                                    dry_run=report.dry_run, crash_points=rt.crash)
        except S3StreamError as exc:
            log.warning("GC of %s-%d skipped: %s", doc.name, partition, exc)
            continue
        report.deleted["removed_segment"].extend(r.removed_keys)
        report.deleted["orphan_segment"].extend(r.orphan_keys)
        report.deleted["manifest"].extend(r.manifest_keys)
        for key in r.removed_keys:
            rt.segments.evict(key)


def _collect_dead_topic_ids(rt: Runtime, docs: list[TopicDoc], now: int, report: GarbageReport) -> None:
    """Data of deleted topics, and of earlier incarnations of re-created ones."""
    for doc in docs:
        vstore = rt.catalog.versions(doc.name)
        delay = TopicConfig.from_overrides(doc.config).file_delete_delay_ms
        dead: dict[str, int] = {}
        for seq in vstore.list_seqs():
            try:
                old = vstore.load(seq)
            except (ObjectNotFound, CorruptData):
                continue
            if old.topic_id != doc.topic_id or doc.deleted:
                dead.setdefault(old.topic_id, 0)
        if not dead:
            continue
        # the live (or last) incarnation was committed at doc.committed_at_ms: everything older is unreferenced
        if now - doc.committed_at_ms < delay:
            continue
        for topic_id in dead:
            if topic_id == doc.topic_id and not doc.deleted:
                continue
            keys = [e.key for e in rt.objstore.list(f"logs/{topic_id}/")]
            report.deleted["deleted_topic_object"].extend(keys)
            if not report.dry_run:
                for key in keys:
                    rt.objstore.delete(key)


def _collect_wal_objects(rt: Runtime, live: dict[str, TopicDoc], now: int, report: GarbageReport) -> None:
    namespaces: dict[str, list[tuple[int, str, int]]] = defaultdict(list)
    for entry in rt.objstore.list("wal/"):
        parsed = layout.parse_wal_key(entry.key)
        if parsed is not None:
            namespaces[parsed[0]].append((parsed[1], entry.key, entry.last_modified_ms))
    manifests: dict[str, Manifest | None] = {}
    for node_id, objects in namespaces.items():
        objects.sort()
        indexes: dict[int, WalObjectIndex] = {}
        for seq, key, _ in objects:
            try:
                indexes[seq] = rt.walindex.get(key)
            except ObjectNotFound:
                continue
            except CorruptData as exc:
                log.error("WAL object %s is corrupt; kept for inspection: %s", key, exc)
        fences = sorted(seq for seq, index in indexes.items() if index.fence)
        void = {seq for seq, index in indexes.items() if fenced_upload(index, seq, fences)}
        old = {seq: key for seq, key, modified_ms in objects[:-1]  # the newest is the fence floor: always kept
               if seq in indexes and now - modified_ms >= rt.settings.orphan_min_age_ms}
        uploads = [seq for seq in old if seq in void]  # landed after a fence of their epoch: never read
        gone = set(uploads)
        rest = []
        for seq in sorted(set(old) - gone):
            index = indexes[seq]
            if index.fence:
                # a fence is what voids the uploads of its epoch that landed above it: it goes after them
                if any(v not in gone and fenced_upload(indexes[v], v, [seq]) for v in void):
                    continue
            elif _wal_object_needed(rt, live, manifests, node_id, seq, index.chunks):
                continue
            rest.append(seq)
        for seq in [*uploads, *rest]:
            report.deleted["wal_object"].append(old[seq])
            if not report.dry_run:
                rt.objstore.delete(old[seq])


def _collect_abandoned_jobs(rt: Runtime, now: int, report: GarbageReport) -> None:
    """Scratch objects of distributed jobs that stopped without deleting them (see the module docstring)."""
    grace = max(rt.settings.orphan_min_age_ms, layout.JOB_ABANDONED_AFTER_MS)
    jobs: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for entry in rt.objstore.list(layout.JOBS_PREFIX):
        job_id = layout.parse_job_key(entry.key)  # only the job layout's keys: never a nested store's
        if job_id is not None:
            jobs[job_id].append((entry.key, entry.last_modified_ms))
    for objects in jobs.values():
        if now - max(modified_ms for _, modified_ms in objects) < grace:
            continue  # a heartbeat (or a task's output) is recent: the job may still be running
        keys = [key for key, _ in objects]
        report.deleted["abandoned_job"].extend(keys)
        if not report.dry_run:
            for key in keys:
                rt.objstore.delete(key)


def _wal_object_needed(rt: Runtime, live: dict[str, TopicDoc], manifests: dict[str, Manifest | None],
                       node_id: str, seq: int, chunks: tuple[object, ...]) -> bool:
    for chunk in chunks:
        log_id: str = chunk.log_id  # type: ignore[attr-defined]
        last_offset: int = chunk.last_offset  # type: ignore[attr-defined]
        m = _manifest_for(rt, live, manifests, log_id)
        if m is None:
            continue  # topic deleted or re-created: this data is garbage
        if m.wal is None or m.wal.node_id != node_id:
            continue
        if seq >= m.wal.from_seq and last_offset >= m.next_offset:
            return True
    return False


def _manifest_for(rt: Runtime, live: dict[str, TopicDoc], cache: dict[str, Manifest | None],
                  log_id: str) -> Manifest | None:
    if log_id in cache:
        return cache[log_id]
    result: Manifest | None = None
    try:
        name, topic_id, part = log_id.split("/")
        doc = live.get(name)
        if doc is not None and doc.topic_id == topic_id and part.isdigit() and int(part) < doc.partitions:
            vstore = manifest_store(rt.objstore, topic=name, topic_id=topic_id, partition=int(part),
                                    clock=rt.clock, ids=rt.ids)
            result = vstore.load_latest_or_empty()
    except ValueError:
        result = None
    cache[log_id] = result
    return result
