"""Bulk publish: segment objects written elsewhere (Spark tasks) with offsets ``0..n-1``, appended at the log
end in ONE manifest commit, each with ``SegmentRef.offset_delta`` = its assigned base (every reader adds it).

The publisher claims the partition like any writer and seals what was appended before, so the staged
segments follow the sealed end directly. A ``(writer_id, batch_id)`` marker recorded in the manifest makes a
replayed batch a no-op.

Nothing is claimed or committed before every staged segment is checked (:func:`check_staged`): a
:class:`StagedSegment` each, a key of this partition's segment layout (never another partition's object,
which this log would then serve and its retention delete under its owner), sane counts, and an object that
exists with the staged size (one HEAD each).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from s3stream.base import layout
from s3stream.base.errors import CorruptData, InvalidArgument, ObjectNotFound
from s3stream.base.records import INT64_MAX, AppendResult, int_arg
from s3stream.manifest.intents import add_segment
from s3stream.manifest.model import FrozenMap, Manifest, SegmentRef
from s3stream.manifest.versioned import writer_fence
from s3stream.partition.state import LogState
from s3stream.partition.writer import Unsealed, WriterState

__all__ = ["PUBLISH_MARKER_PREFIX", "StagedSegment", "check_staged", "publish_segments"]

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


def check_staged(staged: object, topic_id: str, partition: int) -> list[StagedSegment]:
    """``staged`` as a list of StagedSegments of partition ``partition`` of ``topic_id`` with plain int
    fields; InvalidArgument for anything else (not a sequence of StagedSegments, a key outside this
    partition's segment layout, the same key twice, a negative count or size, an impossible timestamp or
    CRC). The objects themselves are not looked at (:func:`publish_segments` HEADs them)."""
    if isinstance(staged, str | bytes | bytearray | memoryview) or not isinstance(staged, Sequence):
        raise InvalidArgument(f"publish_segments takes a sequence of StagedSegment, not {type(staged).__name__}")
    out: list[StagedSegment] = []
    keys: set[str] = set()
    for i, s in enumerate(staged):
        if not isinstance(s, StagedSegment):
            raise InvalidArgument(f"staged[{i}] is a {type(s).__name__}, not a StagedSegment")
        key: object = s.key  # callers outside mypy may put anything there
        if not isinstance(key, str) or not layout.is_segment_key(key, topic_id, partition):
            raise InvalidArgument(f"staged[{i}].key {key!r} is not a segment key of partition {partition} of "
                                  f"topic id {topic_id} ({layout.segment_prefix(topic_id, partition)}...)")
        if key in keys:
            raise InvalidArgument(f"staged[{i}].key {key!r} is staged twice")
        keys.add(key)
        max_ts = int_arg(f"staged[{i}].max_timestamp", s.max_timestamp, minimum=-1)
        checked = StagedSegment(
            key=key, object_size=int_arg(f"staged[{i}].object_size", s.object_size, minimum=0),
            record_count=int_arg(f"staged[{i}].record_count", s.record_count, minimum=0),
            size_bytes=int_arg(f"staged[{i}].size_bytes", s.size_bytes, minimum=0), max_timestamp=max_ts,
            first_timestamp=int_arg(f"staged[{i}].first_timestamp", s.first_timestamp, minimum=-1, maximum=max_ts),
            crc32c=int_arg(f"staged[{i}].crc32c", s.crc32c, minimum=0, maximum=2**32 - 1))
        out.append(checked)
    return out


def _check_marker(marker: object) -> tuple[str, int] | None:
    """``(writer_id, batch_id)``: a non-empty UTF-8 string (it names a manifest attribute) and an int >= 0."""
    if marker is None:
        return None
    if not isinstance(marker, tuple) or len(marker) != 2 or not isinstance(marker[0], str) or not marker[0]:
        raise InvalidArgument(f"marker must be None or (writer_id: str, batch_id: int), not {marker!r}")
    try:
        marker[0].encode()
    except UnicodeEncodeError:
        raise InvalidArgument(f"marker writer_id {marker[0]!r} is not valid Unicode") from None
    return marker[0], int_arg("marker batch_id", marker[1], minimum=0)


def _check_objects(state: LogState, items: Sequence[StagedSegment]) -> None:
    """Every staged object exists with its staged size: a missing one is InvalidArgument (the partition
    could never be read past it), another size CorruptData."""
    store = state.host.objstore
    for s in items:
        try:
            size = store.head(s.key).size
        except ObjectNotFound:
            raise InvalidArgument(f"staged segment {s.key} does not exist") from None
        if size != s.object_size:
            raise CorruptData(f"staged segment is {size} bytes, staged as {s.object_size}", source=s.key)


def publish_segments(state: LogState, staged: Sequence[StagedSegment], marker: tuple[str, int] | None,
                     roll: Callable[[], None]) -> AppendResult | None:
    """See ``PartitionLog.publish_segments``; ``roll`` seals the partition's appended records."""
    items = [s for s in check_staged(staged, state.topic_id, state.partition) if s.record_count > 0]
    marker = _check_marker(marker)
    _check_objects(state, items)
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
    if offset - 1 > INT64_MAX:
        raise InvalidArgument(f"staged segments of {offset - w.leo} records do not fit after offset {w.leo}")
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
