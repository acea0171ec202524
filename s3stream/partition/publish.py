"""Bulk publish: segment objects written elsewhere (Spark tasks) with offsets ``0..n-1``, appended at the log
end in ONE manifest commit, each with ``SegmentRef.offset_delta`` = its assigned base (every reader adds it).

The publisher claims the partition like any writer and seals what was appended before, so the staged
segments follow the sealed end directly. A ``(writer_id, batch_id)`` marker recorded in the manifest makes a
replayed batch a no-op.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from s3stream.base.records import AppendResult
from s3stream.manifest.intents import add_segment
from s3stream.manifest.model import FrozenMap, Manifest, SegmentRef
from s3stream.manifest.versioned import writer_fence
from s3stream.partition.state import LogState
from s3stream.partition.writer import Unsealed, WriterState

__all__ = ["PUBLISH_MARKER_PREFIX", "StagedSegment", "publish_segments"]

#: manifest attribute prefix recording the last published batch id per bulk writer (idempotent replays)
PUBLISH_MARKER_PREFIX = "s3stream.publish.batch."


@dataclass(frozen=True, slots=True)
class StagedSegment:
    """A segment object uploaded with offsets ``0..record_count-1``, waiting to be published."""

    key: str
    object_size: int
    record_count: int
    size_bytes: int
    max_timestamp: int
    first_timestamp: int
    crc32c: int


def publish_segments(state: LogState, staged: Sequence[StagedSegment], marker: tuple[str, int] | None,
                     roll: Callable[[], None]) -> AppendResult | None:
    """See ``PartitionLog.publish_segments``; ``roll`` seals the partition's appended records."""
    items = [s for s in staged if s.record_count > 0]
    node = state.host.node_runtime()
    while True:
        roll()
        with state.lock:
            w = state.ensure_writer(node)
            if w.pending or w.active.record_count:
                continue  # an append raced in after the roll: seal it too
            return _publish_locked(state, w, items, marker)


def _publish_locked(state: LogState, w: WriterState, items: Sequence[StagedSegment],
                    marker: tuple[str, int] | None) -> AppendResult | None:
    now = state.host.clock.now_ms()
    refs: list[SegmentRef] = []
    offset = w.leo
    for s in items:
        refs.append(SegmentRef(key=s.key, base_offset=offset, last_offset=offset + s.record_count - 1,
                               size_bytes=s.size_bytes, object_size=s.object_size, record_count=s.record_count,
                               max_timestamp=s.max_timestamp, first_batch_max_timestamp=s.first_timestamp,
                               created_ms=now, crc32c=s.crc32c, offset_delta=offset))
        offset += s.record_count
    m = state.manifest_store.commit(_publish_intent(refs, marker), check=writer_fence(w.epoch))
    state.adopt(m)
    first = refs[0] if refs else None
    if first is None or not any(s.key == first.key and s.base_offset == first.base_offset for s in m.segments):
        return None  # a replayed batch (or nothing to add)
    w.leo = m.next_offset
    w.active = Unsealed(w.leo, w.leo, created_ms=now, jitter_ms=w.active.jitter_ms)
    w.unflushed_from = max(w.unflushed_from, w.leo)
    return AppendResult(refs[0].base_offset, refs[-1].last_offset)


def _publish_intent(refs: Sequence[SegmentRef], marker: tuple[str, int] | None
                    ) -> Callable[[Manifest], Manifest | None]:
    def apply(cur: Manifest) -> Manifest | None:
        attrs = dict(cur.attributes)
        if marker is not None:
            name = PUBLISH_MARKER_PREFIX + marker[0]
            recorded = attrs.get(name)
            if recorded is not None and int(recorded) >= marker[1]:
                return None
            attrs[name] = str(marker[1])
        m = cur
        for ref in refs:
            m = add_segment(ref, None)(m) or m
        if marker is None and m is cur:
            return None
        return dataclasses.replace(m, attributes=FrozenMap(attrs))

    return apply
