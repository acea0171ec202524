"""The cleaner service: one selection-and-clean pass, and the background loops of ``s3stream serve``.

A pass (CLEAN-SEL-1): snapshot every compacted partition from its manifest, rewrite invalid checkpoints
(CLEAN-SEL-2(b)), pick the dirtiest eligible partition (CLEAN-SEL-3), clean it, then run retention on every
compacted partition (RET-2: compacted logs get retention from the cleaner). A partition whose cleaning
raises an unexpected error is marked uncleanable (CLEAN-ERR-1): reported, skipped for cleaning and for
cleaner-driven retention until the process restarts; the others go on. A partition another cleaner
claimed (a newer cleaner epoch) is left to it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cleaner.executor import CleanResult, clean_log
from cleaner.intents import HORIZON_ATTRIBUTE, reset_checkpoint
from cleaner.metrics import CleanerMetrics
from cleaner.offsetmap import map_capacity
from cleaner.selection import LogSnapshot, LogToClean, SegmentFacts, choose_filthiest
from s3stream.base.errors import Fenced, S3StreamError, UnknownTopic
from s3stream.base.topic_config import TopicConfig
from s3stream.maintenance.retention import retain_partition
from s3stream.manifest.intents import claim_cleaner
from s3stream.manifest.model import Epoch, Manifest

if TYPE_CHECKING:
    from s3stream.engine.runtime import Runtime
    from s3stream.partition.log import PartitionLog

__all__ = ["Cleaner", "CleanerPassReport", "CleanerService", "run_cleaner_pass"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class CleanerPassReport:
    """What one pass did."""

    enabled: bool = True
    cleaned: CleanResult | None = None
    chosen: LogToClean | None = None
    candidates: int = 0
    checkpoints_reset: int = 0
    retention_segments_deleted: int = 0
    uncleanable: dict[str, str] = field(default_factory=dict)


class _CleanerState:
    """Per-store cleaner bookkeeping (uncleanable set, epochs, in-progress set, metrics)."""

    def __init__(self, rt: Runtime) -> None:
        self.runtime = rt
        self.lock = threading.Lock()
        self.uncleanable: dict[str, str] = {}
        self.in_progress: set[str] = set()
        self.fenced: set[str] = set()
        self.epochs: dict[str, Epoch] = {}
        self.owner = f"cleaner-{rt.ids.token(6)}"
        self.metrics = CleanerMetrics(rt.metrics.registry)


def _snapshot(plog: PartitionLog, m: Manifest, cfg: TopicConfig) -> LogSnapshot:
    horizon = m.attributes.get(HORIZON_ATTRIBUTE)
    return LogSnapshot(
        log_id=plog.log_id,
        segments=tuple(SegmentFacts(s.base_offset, s.end_offset, s.size_bytes, s.largest_timestamp,
                                    s.first_batch_max_timestamp) for s in m.segments),
        active_base=m.next_offset,
        log_start_offset=m.log_start_offset,
        log_end_offset=plog.log_end_offset if plog.is_writer else m.next_offset,
        checkpoint=m.cleaner_checkpoint,
        min_cleanable_dirty_ratio=cfg.min_cleanable_dirty_ratio,
        min_compaction_lag_ms=cfg.min_compaction_lag_ms,
        max_compaction_lag_ms=cfg.max_compaction_lag_ms,
        tombstone_horizon_ms=int(horizon) if horizon is not None else None,
        tombstone_cleanup_on_idle=cfg.tombstone_cleanup_on_idle,
    )


def _compacted(rt: Runtime) -> list[tuple[PartitionLog, TopicConfig]]:
    out: list[tuple[PartitionLog, TopicConfig]] = []
    for name in rt.catalog.names():
        try:
            doc = rt.catalog.get(name, refresh=True)
        except UnknownTopic:
            continue
        cfg = TopicConfig.from_overrides(doc.config)
        if cfg.compact:
            out.extend((rt.partition(name, p), cfg) for p in range(doc.partitions))
    return out


class Cleaner:
    """The cleaner of one open store: its bookkeeping across passes (partitions found uncleanable, cleaner
    epochs, rounds in progress, metrics). The Store owns one; passes and the service loops share it."""

    def __init__(self, rt: Runtime) -> None:
        self.runtime = rt
        self._state = _CleanerState(rt)

    def run_pass(self) -> CleanerPassReport:
        """One pass (see the module docstring); a no-op report when ``log.cleaner.enable`` is false."""
        return _run_pass(self.runtime, self._state)


def run_cleaner_pass(cleaner: Cleaner) -> CleanerPassReport:
    """One pass of ``cleaner`` (see :meth:`Cleaner.run_pass`)."""
    return cleaner.run_pass()


def _run_pass(rt: Runtime, st: _CleanerState) -> CleanerPassReport:
    if not rt.settings.log_cleaner_enable:
        return CleanerPassReport(enabled=False)
    now = rt.clock.now_ms()
    logs = _compacted(rt)
    by_id = {plog.log_id: (plog, cfg) for plog, cfg in logs}
    with st.lock:
        skip = frozenset(st.uncleanable) | frozenset(st.in_progress) | frozenset(st.fenced)
    snapshots = _snapshots(st, [(plog, cfg) for plog, cfg in logs if plog.log_id not in skip])
    best, plans = choose_filthiest(snapshots, now, skip=skip)
    report = CleanerPassReport(candidates=len(plans), chosen=best)
    for plan in plans:
        if plan.checkpoint_reset and (best is None or plan.log_id != best.log_id):
            report.checkpoints_reset += _reset_checkpoint(st, by_id[plan.log_id][0], plan)
    _update_gauges(st, plans)
    if best is not None:
        report.cleaned = _clean_chosen(rt, st, best, *by_id[best.log_id], now)
    report.retention_segments_deleted = _cleaner_retention(st, logs, rt.clock.now_ms())
    with st.lock:
        report.uncleanable = dict(st.uncleanable)
    st.metrics.uncleanable_partitions_count.set(len(report.uncleanable))
    st.metrics.uncleanable_bytes.set(sum(_sealed_bytes(by_id[i][0]) for i in report.uncleanable if i in by_id))
    return report


def _snapshots(st: _CleanerState, logs: list[tuple[PartitionLog, TopicConfig]]) -> list[LogSnapshot]:
    """Selection input of every candidate; a partition that cannot even be read is uncleanable (KAFKA-8725)."""
    out: list[LogSnapshot] = []
    for plog, cfg in logs:
        try:
            out.append(_snapshot(plog, plog.manifest(refresh=True), cfg))
        except Exception as exc:  # noqa: BLE001 - CLEAN-ERR-1: errors while choosing mark the partition too
            _mark_uncleanable(st, plog.log_id, exc)
    return out


def _reset_checkpoint(st: _CleanerState, plog: PartitionLog, plan: LogToClean) -> int:
    """CLEAN-SEL-2(b) (KT-07/KT-08, KAFKA-6266): persist the reset of an invalid checkpoint now; 1 if it was written."""
    try:
        plog.manifest_store.commit(reset_checkpoint(plan.first_dirty))
    except Exception as exc:  # noqa: BLE001 - CLEAN-ERR-1
        _mark_uncleanable(st, plog.log_id, exc)
        return 0
    return 1


def _cleaner_retention(st: _CleanerState, logs: list[tuple[PartitionLog, TopicConfig]], now_ms: int) -> int:
    """RET-2: compacted logs get retention from the cleaner, except uncleanable or in-progress ones."""
    deleted = 0
    for plog, cfg in logs:
        with st.lock:
            if plog.log_id in st.uncleanable or plog.log_id in st.in_progress:
                continue
        try:
            retained = retain_partition(st.runtime, plog, cfg, now_ms=now_ms)
        except Exception as exc:  # noqa: BLE001 - CLEAN-ERR-1: retention errors mark the partition too
            _mark_uncleanable(st, plog.log_id, exc)
            continue
        if retained is not None:
            deleted += len(retained.deletions)
    return deleted


def _sealed_bytes(plog: PartitionLog) -> int:
    try:
        return plog.manifest(refresh=False).sealed_bytes
    except S3StreamError:
        return 0


def _clean_chosen(rt: Runtime, st: _CleanerState, plan: LogToClean, plog: PartitionLog, cfg: TopicConfig,
                  now: int) -> CleanResult | None:
    with st.lock:
        if plog.log_id in st.in_progress:
            return None  # another cleaner thread of this process took it meanwhile
        st.in_progress.add(plog.log_id)
    try:
        epoch = st.epochs.get(plog.log_id)
        if epoch is None:
            m = plog.manifest_store.commit(claim_cleaner(st.owner))
            assert m.cleaner is not None
            epoch = st.epochs[plog.log_id] = m.cleaner
        s = rt.settings
        capacity = map_capacity(s.log_cleaner_dedupe_buffer_size, s.log_cleaner_threads,
                                s.log_cleaner_io_buffer_load_factor)
        result = clean_log(rt, plog, plan, epoch=epoch, capacity=capacity, cfg=cfg, now_ms=now)
        _record(st, result)
        return result
    except Fenced as exc:
        log.warning("cleaner of %s was fenced by a newer cleaner; leaving the partition to it: %s", plog.log_id, exc)
        with st.lock:
            st.fenced.add(plog.log_id)
        st.metrics.rounds.labels("fenced").inc()
        return None
    except Exception as exc:  # noqa: BLE001 - CLEAN-ERR-1: any unexpected error marks the partition uncleanable
        _mark_uncleanable(st, plog.log_id, exc)
        return None
    finally:
        with st.lock:
            st.in_progress.discard(plog.log_id)


def _mark_uncleanable(st: _CleanerState, log_id: str, exc: BaseException) -> None:
    log.error("marking %s uncleanable after an unexpected error: %r", log_id, exc)
    with st.lock:
        st.uncleanable[log_id] = repr(exc)
    st.metrics.rounds.labels("error").inc()


def _record(st: _CleanerState, r: CleanResult) -> None:
    m = st.metrics
    m.rounds.labels("aborted" if r.aborted else "cleaned").inc()
    m.max_clean_time_secs.set(r.duration_s)
    m.round_seconds.observe(r.duration_s)
    m.max_buffer_utilization_percent.set(100.0 * r.map_utilization)
    m.recopy_percent.set(100.0 * r.bytes_written / r.bytes_read if r.bytes_read else 0.0)
    m.bytes_read.inc(r.bytes_read)
    m.bytes_written.inc(r.bytes_written)
    m.records_kept.inc(r.records_kept)
    m.records_removed.inc(r.records_removed)


def _update_gauges(st: _CleanerState, plans: list[LogToClean]) -> None:
    m = st.metrics
    m.max_dirty_percent.set(100.0 * max((p.cleanable_ratio for p in plans), default=0.0))
    m.max_compaction_delay_secs.set(max((p.max_compaction_delay_ms for p in plans), default=0) / 1000.0)
    m.logs_compacted_by_max_lag.set(sum(1 for p in plans if p.need_compaction_now and p.cleanable_bytes > 0))


class CleanerService:
    """``log.cleaner.threads`` loops, each: a pass, then ``log.cleaner.backoff.ms`` sleep if idle."""

    def __init__(self, cleaner: Cleaner) -> None:
        self._cleaner = cleaner
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        s = self._cleaner.runtime.settings
        if not s.log_cleaner_enable:
            return
        for i in range(s.log_cleaner_threads):
            t = threading.Thread(target=self._loop, name=f"s3stream-cleaner-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def step(self) -> bool:
        """One cleaning round, as a loop runs it (errors logged, never raised); True when it cleaned a
        partition, False when idle (a loop then backs off ``log.cleaner.backoff.ms``)."""
        try:
            return self._cleaner.run_pass().cleaned is not None
        except Exception as exc:  # noqa: BLE001 - the loop must survive; the error is logged
            log.error("cleaner pass failed: %r", exc)
            return False

    def _loop(self) -> None:
        backoff_s = self._cleaner.runtime.settings.log_cleaner_backoff_ms / 1000.0
        clock = self._cleaner.runtime.clock
        while not self._stop.is_set():
            if not self.step():
                clock.wait(self._stop, backoff_s)

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop after the current round (a round in progress finishes or aborts cleanly)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout_s)
