"""One cleaning round of one partition: build the offset map, rewrite, swap atomically (I/O adapter).

Order of effects (crash points in brackets): read the dirty range's keys (column projection) into the
offset map -> read every group of segments overlapping ``[0, end_offset)`` chunk by chunk (skipping row
groups the keep rules drop whole, :func:`cleaner.keep.droppable`), filter it through the shared keep
rules (:mod:`cleaner.keep`) and upload its survivors as one new segment under a
fresh key as they come (newest group first; reads, filtering and uploads overlap, and a group's upload
completes while the next group is filtered: :mod:`cleaner.scan`, :mod:`cleaner.output`) ->
[clean.after_outputs_put] -> ONE manifest commit that replaces exactly the input segments and sets the
checkpoint, applied only if every input is still present and this cleaner's epoch is current ->
[clean.after_swap]. A conflict (retention or another cleaner changed the inputs) aborts the round and
deletes its outputs at once (provably never referenced), and so does an error while rewriting; a crash
before the swap leaves orphans that GC removes. Replaced inputs are deleted by GC after ``file.delete.delay.ms``.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from cleaner.grouping import group_segments
from cleaner.intents import HORIZON_ATTRIBUTE, set_attribute
from cleaner.keep import KeepStats, droppable, dropped_whole, retain
from cleaner.offsetmap import OffsetMap, OffsetMapBuilder
from cleaner.output import OutputStream
from cleaner.scan import Dropped, prefetched, read_ahead, segment_chunks, segment_keys
from cleaner.selection import LogToClean
from s3stream.base.errors import CommitConflict, Fenced, S3StreamError
from s3stream.base.topic_config import TopicConfig
from s3stream.manifest.intents import compose, replace_segments
from s3stream.manifest.model import Epoch, Manifest, SegmentRef
from s3stream.manifest.versioned import cleaner_fence

if TYPE_CHECKING:
    from s3stream.engine.runtime import Runtime
    from s3stream.partition.log import PartitionLog

__all__ = ["CleanResult", "build_offset_map", "clean_log"]

log = logging.getLogger(__name__)

#: Segments whose keys are read at once while the offset map is built (bounded waste if the map fills).
_MAP_READERS = 2
#: Output segments of a round open at once: one receiving survivors, one completing its upload.
_OUTPUTS_IN_FLIGHT = 2


@dataclass(frozen=True, slots=True)
class CleanResult:
    """Statistics of one round (Kafka's CleanerStats, plus what the swap did).

    Byte counts are logical record bytes (what ``segment.bytes`` counts): ``bytes_read`` of the rewritten
    inputs, ``bytes_written`` of the outputs, so ``bytes_written / bytes_read`` is Kafka's recopy ratio;
    ``map_bytes_read`` is what the offset map read (offsets and keys only); ``records_unread`` of the
    records read were dropped from the footer alone (row groups with no survivor are never fetched).
    """

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
    map_bytes_read: int = 0
    records_unread: int = 0

    @property
    def records_removed(self) -> int:
        return self.records_read - self.records_kept


def build_offset_map(rt: Runtime, m: Manifest, plan: LogToClean, capacity: int) -> tuple[OffsetMap, int]:
    """The round's offset map over ``[first_dirty, U)``, and the bytes it read (keys + offsets only)."""
    upper = plan.first_uncleanable
    dirty = [s for s in m.segments if s.base_offset < upper and s.end_offset > plan.first_dirty]
    builder = OffsetMapBuilder(start_offset=plan.first_dirty, capacity=capacity)
    read = 0
    with rt.pool(_MAP_READERS, "s3stream-cleaner-map") as pool:
        for seg, rows in prefetched(pool, lambda s: segment_keys(rt, s, plan.first_dirty), dirty,
                                    depth=_MAP_READERS):
            read += int(rows.nbytes)
            if not builder.add_segment(rows, next_base=min(upper, seg.end_offset)):
                break
    return builder.finish(upper=upper), read


@dataclass(slots=True)
class _Rewrite:
    """What the rewrite of one round produced (outputs are PUT but not yet referenced)."""

    outputs: list[SegmentRef]
    totals: KeepStats
    min_horizon: int | None
    bytes_read: int
    unread: int = 0


def clean_log(rt: Runtime, plog: PartitionLog, plan: LogToClean, *, epoch: Epoch, capacity: int,
              cfg: TopicConfig, now_ms: int) -> CleanResult:
    """Clean one partition once (see the module docstring).

    Raises Fenced when another cleaner claimed the partition (this round's outputs are deleted first).
    """
    started = rt.clock.monotonic()
    m = plog.manifest(refresh=True)
    omap, map_read = build_offset_map(rt, m, plan, capacity)
    groups = group_segments(list(m.segments), end_offset=omap.end_offset, max_bytes=cfg.segment_bytes,
                            upper=plan.first_uncleanable)

    def result(rw: _Rewrite, *, aborted: bool) -> CleanResult:
        t = rw.totals
        return CleanResult(plog.log_id, aborted, plan.first_dirty, omap.end_offset, omap.full,
                           omap.utilization, rw.bytes_read, 0 if aborted else sum(r.size_bytes for r in rw.outputs),
                           t.records_read, t.records_kept, t.invalid_dropped, t.tombstones_dropped,
                           sum(len(g) for g in groups), 0 if aborted else len(rw.outputs),
                           rt.clock.monotonic() - started, rw.min_horizon, map_read, rw.unread)

    if not groups:  # the segments went away since the plan (retention): nothing to swap
        return result(_Rewrite([], KeepStats(0, 0, 0, 0, 0), None, 0), aborted=True)
    rw = _Rewrite([], KeepStats(0, 0, 0, 0, 0), None, 0)
    try:
        try:
            _rewrite(rt, plog, groups, omap, rw, cfg=cfg, now_ms=now_ms)
        except Exception:
            _discard(rt, rw.outputs)  # failed before the swap: outputs already uploaded are referenced nowhere
            rw.outputs.clear()
            raise
        rt.crash.hit("clean.after_outputs_put")
        _swap(plog, groups, rw, epoch=epoch, checkpoint=omap.end_offset, now_ms=now_ms)
    except CommitConflict as exc:
        log.info("cleaning %s aborted: %s", plog.log_id, exc)
        _discard(rt, rw.outputs)
        return result(rw, aborted=True)
    except Fenced:
        _discard(rt, rw.outputs)  # the check failed before any PUT of ours landed: never referenced
        raise
    rt.crash.hit("clean.after_swap")
    for g in groups:
        for s in g:
            rt.segments.evict(s.key)
    plog.manifest(refresh=True)
    return result(rw, aborted=False)


def _rewrite(rt: Runtime, plog: PartitionLog, groups: list[list[SegmentRef]], omap: OffsetMap, rw: _Rewrite, *,
             cfg: TopicConfig, now_ms: int) -> None:
    """Filter each group chunk by chunk into one new segment (CLEAN-GRP-2); fills ``rw`` as it goes.

    Pipelined: one worker reads and decodes the next chunk, another encodes and uploads the group's output
    as its survivors arrive (:class:`cleaner.output.OutputStream`), while this thread applies the keep rules.
    A group's output completes its upload while this thread goes on with the next group (waiting for it
    there was a third of a round: the survivors are in the last segments, so are the largest uploads);
    at most :data:`_OUTPUTS_IN_FLIGHT` outputs are open at once. Groups go newest first
    (:func:`_tagged_chunks`); the outputs are put back in offset order for the swap.
    """
    with rt.pool(1, "s3stream-cleaner-read") as reading, rt.pool(_OUTPUTS_IN_FLIGHT, "s3stream-cleaner-out") as writers:
        output: OutputStream | None = None
        ending: deque[OutputStream] = deque()  # ended, upload completing, in group order
        try:
            for gi, chunk in read_ahead(reading, _tagged_chunks(rt, groups, omap)):
                if isinstance(chunk, Dropped):  # never fetched: the footer says every record goes
                    rw.totals = _add(rw.totals, dropped_whole(chunk.records, chunk.unkeyed, chunk.tombstones))
                    rw.unread += chunk.records
                    continue
                if output is None:
                    if len(ending) == _OUTPUTS_IN_FLIGHT:  # a worker for the new output: the oldest's
                        rw.outputs.append(ending.popleft().result())
                    output = OutputStream(writers, rt, plog, groups[gi])
                if chunk is not None:
                    kept, stats = retain(chunk, omap, now_ms=now_ms, delete_retention_ms=cfg.delete_retention_ms)
                    rw.totals = _add(rw.totals, stats)
                    rw.min_horizon = _min_horizon(kept, rw.min_horizon)
                    output.send(kept)
                    continue
                rw.bytes_read += sum(s.size_bytes for s in groups[gi])
                output.end()
                ending.append(output)
                output = None
            while ending:
                rw.outputs.append(ending.popleft().result())
            rw.outputs.sort(key=lambda ref: ref.base_offset)
        finally:
            for left in [*ending, *([] if output is None else [output])]:
                done = left.abort()
                if done is not None:
                    rw.outputs.append(done)  # uploaded although the round failed: deleted with the rest


def _tagged_chunks(rt: Runtime, groups: list[list[SegmentRef]], omap: OffsetMap
                   ) -> Iterator[tuple[int, pa.Table | Dropped | None]]:
    """``(group index, chunk)`` for every chunk of every group, then ``(group index, None)`` ending it.

    Newest group first: the latest records are the likeliest to be kept, so the largest outputs start
    first and upload while the older groups (mostly dropped, decode-bound) are filtered, instead of
    leaving the round waiting for the largest upload at its end.
    """
    def drop(first: int, last: int) -> bool:
        return droppable(omap, first, last)

    for gi in reversed(range(len(groups))):
        for chunk in segment_chunks(rt, groups[gi], droppable=drop):
            yield gi, chunk
        yield gi, None


def _swap(plog: PartitionLog, groups: list[list[SegmentRef]], rw: _Rewrite, *, epoch: Epoch, checkpoint: int,
          now_ms: int) -> None:
    """ONE commit: inputs -> outputs and the new checkpoint, only if every input is still there."""
    inputs = [s.key for g in groups for s in g]
    horizon = None if rw.min_horizon is None else str(rw.min_horizon)
    plog.manifest_store.commit(compose(replace_segments(inputs, rw.outputs, now_ms=now_ms, checkpoint=checkpoint),
                                       set_attribute(HORIZON_ATTRIBUTE, horizon)),
                               check=cleaner_fence(epoch))


def _discard(rt: Runtime, outputs: list[SegmentRef]) -> None:
    """Delete outputs no manifest can reference (best effort: GC removes whatever is left)."""
    for ref in outputs:
        try:
            rt.objstore.delete(ref.key)
        except S3StreamError as exc:
            log.warning("could not delete unused cleaner output %s (GC will): %s", ref.key, exc)


def _min_horizon(table: pa.Table, current: int | None) -> int | None:
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
