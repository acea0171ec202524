"""The retention task: one pass applies the pure planner (:mod:`s3stream.policy.retention`) to every partition.

Per partition: snapshot (manifest + unsealed active segment), plan, and — when something is
deletable — one manifest commit (``drop_segments``) that removes the segments and moves the log start
offset. The commit rebases over concurrent appends and seals; if a concurrent compaction replaced a
segment the plan is recomputed. Dropped objects stay in the manifest's ``removed`` list and are
deleted physically by GC after ``file.delete.delay.ms`` (reads fail at once: the log start moved).
When the active segment itself must go (RET-4), it is rolled first, and that roll's seal is a commit of
its own; only a process that may roll does so (it writes the partition, or its node did), and any
other process drops the sealed segments alone and leaves the active one to the writer's pass.

Steady state costs one manifest probe (a GET) per partition, plus one LIST of the topic names and
probes of each topic's document. A process that does not write a partition also scans the writer's WAL
namespace for the unsealed tail (a LIST per partition whose manifest names a WAL cursor), since the
active segment counts for retention.bytes and may expire. A commit adds its own probe and PUT, and
the writing process re-reads the manifest after it (its reads go through that cached manifest).
Config changes made on a live topic apply at the next pass (the topic document is re-read every pass).

A pass reports only what its own commits changed: when another process's identical edit landed first
(the intent then has nothing left to do), the partition is not counted as changed here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from s3stream.base.errors import CommitConflict, UnknownTopic
from s3stream.base.records import SegmentInfo
from s3stream.base.topic_config import TopicConfig
from s3stream.manifest.intents import Intent, drop_segments
from s3stream.manifest.model import Manifest
from s3stream.policy.retention import RetentionPlan, SegmentSnapshot, plan_retention

if TYPE_CHECKING:
    from s3stream.engine.runtime import Runtime
    from s3stream.partition.host import LogHost
    from s3stream.partition.log import PartitionLog

__all__ = ["RetentionReport", "retain_partition", "run_retention_pass"]

log = logging.getLogger(__name__)

_MAX_ATTEMPTS = 4


@dataclass(slots=True)
class RetentionReport:
    """What one pass did."""

    partitions_checked: int = 0
    partitions_changed: int = 0
    segments_deleted: int = 0
    bytes_deleted: int = 0
    by_reason: dict[str, list[int]] = field(default_factory=dict)   # reason -> [segments, bytes]
    duration_s: float = 0.0

    def add(self, plan: RetentionPlan) -> None:
        self.partitions_changed += 1
        self.segments_deleted += len(plan.deletions)
        self.bytes_deleted += plan.bytes_deleted
        for reason, (n, b) in plan.by_reason().items():
            acc = self.by_reason.setdefault(reason, [0, 0])
            acc[0] += n
            acc[1] += b


def run_retention_pass(rt: Runtime) -> RetentionReport:
    """One retention pass over every partition of every live topic, at the engine clock's ``now``."""
    started = rt.clock.monotonic()
    report = RetentionReport()
    for name in rt.catalog.names():
        try:
            doc = rt.catalog.get(name, refresh=True)
        except UnknownTopic:
            continue
        cfg = TopicConfig.from_overrides(doc.config)
        if cfg.compact and not rt.settings.log_cleaner_enable:
            continue  # Kafka: with the cleaner off, compacted topics get no retention at all (CFG-2)
        for partition in range(doc.partitions):
            plog = rt.partition(name, partition)
            report.partitions_checked += 1
            plan, log_start = _retain(rt, plog, cfg, rt.clock.now_ms())
            if plan is not None and plan.deletions:
                report.add(plan)
                rt.metrics.retention_deleted(name, plan)
            rt.metrics.log_start_offset.labels(name, str(partition)).set(log_start)
    report.duration_s = rt.clock.monotonic() - started
    rt.metrics.retention_pass_seconds.observe(report.duration_s)
    return report


def load_snapshot(plog: PartitionLog, now_ms: int) -> tuple[Manifest, list[SegmentSnapshot] | None]:
    """The latest manifest and the partition's segments, with one manifest probe.

    The writing process refreshes its cached manifest (another process may have moved the log start)
    and lists its unsealed segments from memory; any other process gets both from one fresh view
    (``segments()`` re-reads the manifest itself, so reading it here too would cost a second GET).
    """
    if plog.is_writer:
        plog.manifest(refresh=True)
    infos = plog.segments()
    m = plog.manifest(refresh=False)
    return m, snapshot_segments(m, infos, now_ms)


def snapshot_segments(m: Manifest, infos: Sequence[SegmentInfo], now_ms: int) -> list[SegmentSnapshot] | None:
    """Sealed segments from ``m`` plus the unsealed ones of ``infos``; None if they do not line up (retry).

    The last snapshot ends at the log end offset (the unsealed ones run up to it; with none, the
    sealed end is the log end).
    """
    snaps = [SegmentSnapshot(s.base_offset, s.end_offset, s.size_bytes, s.largest_timestamp, s.record_count, s.key)
             for s in m.segments]
    expected = m.next_offset
    for info in infos:
        if info.sealed:
            continue
        if info.base_offset != expected:
            return None
        largest = info.max_timestamp if info.max_timestamp >= 0 else now_ms
        snaps.append(SegmentSnapshot(info.base_offset, info.last_offset + 1, info.size_bytes, largest,
                                     info.record_count, None))
        expected = info.last_offset + 1
    return snaps


def retain_partition(rt: LogHost, plog: PartitionLog, cfg: TopicConfig, *, now_ms: int) -> RetentionPlan | None:
    """Plan and commit retention for one partition; returns the plan this call applied (or None)."""
    plan, _log_start = _retain(rt, plog, cfg, now_ms)
    return plan


def _retain(rt: LogHost, plog: PartitionLog, cfg: TopicConfig, now_ms: int) -> tuple[RetentionPlan | None, int]:
    """:func:`retain_partition`, plus the partition's log start offset once it is done."""
    for _ in range(_MAX_ATTEMPTS):
        m, snaps = load_snapshot(plog, now_ms)
        if snaps is None:
            continue
        leo = snaps[-1].end_offset if snaps else m.next_offset  # one view of the log, not two
        plan = plan_retention(snaps, log_start_offset=m.log_start_offset, log_end_offset=leo,
                              policy=cfg.cleanup_policy, retention_ms=cfg.retention_ms,
                              retention_bytes=cfg.retention_bytes, now_ms=now_ms)
        if plan.roll_first:
            if _may_roll(rt, plog, m):
                plog.roll()  # RET-4: seal the active segment, so the log keeps a new empty one
                continue
            plan = _sealed_only(plan, m)
        if not plan.keys:
            return None, m.log_start_offset
        drop = _Tracked(drop_segments(plan.keys, now_ms=now_ms, new_log_start=plan.new_log_start_offset))
        try:
            committed = plog.manifest_store.commit(drop)  # a ManifestStore: no manifest yet = the empty one
        except CommitConflict as exc:
            log.info("retention of %s rebasing: %s", plog.log_id, exc)
            continue
        rt.crash.hit("retention.after_commit")
        for key in plan.keys:
            rt.segments.evict(key)
        if plog.is_writer:
            plog.manifest(refresh=True)  # the writer reads through its cached manifest: show the new start now
        # None: another process's identical edit landed first; it is not counted twice
        return (plan if drop.changed else None), committed.log_start_offset
    log.warning("retention of %s gave up after %d attempts (contention)", plog.log_id, _MAX_ATTEMPTS)
    return None, plog.manifest(refresh=False).log_start_offset


class _Tracked:
    """An intent that remembers whether its latest application changed anything.

    The commit protocol re-applies an intent after every lost race, and commits the result of the
    last application (or nothing, when that returned None), so ``changed`` tells whether the commit
    that ended the call carried this edit.
    """

    def __init__(self, intent: Intent) -> None:
        self._intent = intent
        self.changed = False

    def __call__(self, cur: Manifest) -> Manifest | None:
        nxt = self._intent(cur)
        self.changed = nxt is not None
        return nxt


def _may_roll(rt: LogHost, plog: PartitionLog, m: Manifest) -> bool:
    """Roll only where it cannot fence another live writer: we write it, or our node did, or nobody."""
    if plog.is_writer:
        return True
    node = rt.existing_node()
    return m.writer is None or (node is not None and m.writer.owner == node.node_id)


def _sealed_only(plan: RetentionPlan, m: Manifest) -> RetentionPlan:
    sealed = tuple(d for d in plan.deletions if d.segment.key is not None)
    if not sealed:
        return RetentionPlan((), m.log_start_offset, False)
    return RetentionPlan(sealed, max(m.log_start_offset, sealed[-1].segment.end_offset), False)
