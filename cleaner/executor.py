"""One cleaning round of one partition: build the offset map, rewrite, swap atomically (I/O adapter).

Order of effects (crash points in brackets): read the dirty range's keys (column projection) into the
offset map -> read and rewrite every group of segments overlapping ``[0, end_offset)`` through the
shared keep rules (:mod:`cleaner.keep`) -> PUT each output under a fresh key ->
[clean.after_outputs_put] -> ONE manifest commit that replaces exactly the input segments and sets the
checkpoint, applied only if every input is still present and this cleaner's epoch is current ->
[clean.after_swap]. A conflict (retention or another cleaner changed the inputs) aborts the round and
deletes its outputs at once (provably never referenced); a crash before the swap leaves orphans that GC
removes. Replaced inputs are deleted by GC after ``file.delete.delay.ms``.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from cleaner.grouping import group_segments
from cleaner.intents import HORIZON_ATTRIBUTE, set_attribute
from cleaner.keep import KeepStats, retain
from cleaner.offsetmap import OffsetMap, OffsetMapBuilder
from cleaner.selection import LogToClean
from s3stream.config import TopicConfig
from s3stream.errors import CommitConflict
from s3stream.manifest.intents import compose, replace_segments
from s3stream.manifest.model import Epoch, Manifest, SegmentRef
from s3stream.manifest.versioned import cleaner_fence
from s3stream.records import RECORD_SCHEMA
from s3stream.sealing import write_segment

if TYPE_CHECKING:
    from s3stream.log import PartitionLog
    from s3stream.runtime import Runtime

__all__ = ["CleanResult", "build_offset_map", "clean_log"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CleanResult:
    """Statistics of one round (Kafka's CleanerStats, plus what the swap did)."""

    log_id: str
    aborted: bool
    first_dirty: int
    end_offset: int
    map_full: bool
    map_utilization: float
    bytes_read: int
    bytes_written: int
    records_read: int
    records_kept: int
    invalid_dropped: int
    tombstones_dropped: int
    segments_in: int
    segments_out: int
    duration_s: float
    min_horizon_ms: int | None

    @property
    def records_removed(self) -> int:
        return self.records_read - self.records_kept


def build_offset_map(rt: Runtime, m: Manifest, plan: LogToClean, capacity: int) -> tuple[OffsetMap, int]:
    """The round's offset map over ``[first_dirty, U)``, and the bytes it read (keys + offsets only)."""
    upper = plan.first_uncleanable
    dirty = [s for s in m.segments if s.base_offset < upper and s.end_offset > plan.first_dirty]
    builder = OffsetMapBuilder(start_offset=plan.first_dirty, capacity=capacity)
    read = 0
    for i, seg in enumerate(dirty):
        next_base = dirty[i + 1].base_offset if i + 1 < len(dirty) else upper
        rows = rt.segments.get(seg).read(max(seg.base_offset, plan.first_dirty), columns=["offset", "key"])
        read += int(rows.nbytes)
        if not builder.add_segment(rows, next_base=min(next_base, seg.end_offset)):
            break
    return builder.finish(upper=upper), read


def clean_log(rt: Runtime, plog: PartitionLog, plan: LogToClean, *, epoch: Epoch, capacity: int,
              cfg: TopicConfig, now_ms: int) -> CleanResult:
    """Clean one partition once (see the module docstring)."""
    started = rt.clock.monotonic()
    m = plog.manifest(refresh=True)
    omap, bytes_read = build_offset_map(rt, m, plan, capacity)
    groups = group_segments(list(m.segments), end_offset=omap.end_offset, max_bytes=cfg.segment_bytes,
                            upper=plan.first_uncleanable)
    outputs: list[SegmentRef] = []
    totals = KeepStats(0, 0, 0, 0, 0)
    min_horizon: int | None = None
    try:
        for group in groups:
            table = _read_group(rt, group)
            bytes_read += int(table.nbytes)
            kept, stats = retain(table, omap, now_ms=now_ms, delete_retention_ms=cfg.delete_retention_ms)
            totals = _add(totals, stats)
            min_horizon = _min_horizon(kept, min_horizon)
            ref = write_segment(rt, topic_id=plog.topic_id, partition=plog.partition, table=kept,
                                base_offset=group[0].base_offset, last_offset=group[-1].last_offset,
                                first_batch_max_ts=int(kept.column("timestamp")[0].as_py()) if kept.num_rows else -1,
                                cleaned=True)
            outputs.append(dataclasses.replace(ref, created_ms=group[-1].created_ms))  # C-GRP2: last source's mtime
        rt.crash.hit("clean.after_outputs_put")
        inputs = [s.key for g in groups for s in g]
        horizon = None if min_horizon is None else str(min_horizon)
        plog.manifest_store.commit(compose(replace_segments(inputs, outputs, now_ms=now_ms, checkpoint=omap.end_offset),
                                           set_attribute(HORIZON_ATTRIBUTE, horizon)),
                                   check=cleaner_fence(epoch))
    except CommitConflict as exc:
        log.info("cleaning %s aborted: %s", plog.log_id, exc)
        for ref in outputs:
            rt.objstore.delete(ref.key)
        return _result(plog, plan, omap, totals, bytes_read, 0, len(groups), 0, rt.clock.monotonic() - started,
                       min_horizon, aborted=True)
    rt.crash.hit("clean.after_swap")
    for g in groups:
        for s in g:
            rt.segments.evict(s.key)
    plog.manifest(refresh=True)
    written = sum(r.object_size for r in outputs)
    return _result(plog, plan, omap, totals, bytes_read, written, sum(len(g) for g in groups), len(outputs),
                   rt.clock.monotonic() - started, min_horizon, aborted=False)


def _read_group(rt: Runtime, group: list[SegmentRef]) -> pa.Table:
    tables = [rt.segments.get(s).read_all(verify_crc32c=s.crc32c) for s in group]
    tables = [t.select(RECORD_SCHEMA.names).cast(RECORD_SCHEMA) for t in tables]
    return pa.concat_tables(tables) if tables else RECORD_SCHEMA.empty_table()


def _min_horizon(table: pa.Table, current: int | None) -> int | None:
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return current
    low = pc.min(table.column("horizon_ms")).as_py()
    if low is None:
        return current
    return int(low) if current is None else min(current, int(low))


def _add(a: KeepStats, b: KeepStats) -> KeepStats:
    return KeepStats(a.records_read + b.records_read, a.records_kept + b.records_kept,
                     a.invalid_dropped + b.invalid_dropped, a.tombstones_dropped + b.tombstones_dropped,
                     a.horizons_stamped + b.horizons_stamped)


def _result(plog: PartitionLog, plan: LogToClean, omap: OffsetMap, totals: KeepStats, bytes_read: int,
            bytes_written: int, segments_in: int, segments_out: int, duration_s: float, min_horizon: int | None,
            *, aborted: bool) -> CleanResult:
    return CleanResult(plog.log_id, aborted, plan.first_dirty, omap.end_offset, omap.full, omap.utilization,
                       bytes_read, bytes_written, totals.records_read, totals.records_kept, totals.invalid_dropped,
                       totals.tombstones_dropped, segments_in, segments_out, duration_s, min_horizon)
