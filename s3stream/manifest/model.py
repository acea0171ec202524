"""The partition manifest as an immutable value, and the invariants every stored manifest keeps.

Vocabulary (offsets as in :mod:`s3stream.base.records`):

* **manifest**: the whole committed state of one partition ("log"): its sealed segments, log start
  offset, the WAL position folded into segments, the writer and cleaner epochs, and the objects it
  dropped that still await physical deletion. Version ``seq`` is stored at
  ``layout.manifest_key(topic_id, partition, seq)``; seq 0 is the empty manifest, never stored.
* **segment** (:class:`SegmentRef`): one sealed, immutable segment object covering the inclusive offset
  range ``[base_offset, last_offset]``; compaction may leave gaps inside it, never between segments.
* **active segment**: the data since the last roll, at offsets ``>= next_offset``; it lives in WAL
  objects (found through :class:`WalCursor`) and is not listed here.
* **epoch** (:class:`Epoch`): a fencing token; a writer or cleaner whose epoch was superseded must stop.
* **removed object** (:class:`RemovedObject`): a key dropped from the manifest (retention, compaction)
  that GC deletes after ``file.delete.delay.ms`` so slow readers of older manifests can finish.
* **producers** (:class:`~s3stream.base.producer.ProducerSnapshot`): the idempotent producers' state as
  of ``through_offset`` (the sealed end when the writer last sealed), so whoever writes the partition
  next rebuilds it from this snapshot plus the producer batches its WAL objects list past that offset.

Invariants (:func:`check_invariants`; checked on every decode and before every commit):

* segments are sorted and contiguous: ``seg[i+1].base_offset == seg[i].last_offset + 1``;
* ``base_offset <= last_offset`` for every segment; ``next_offset == segments[-1].end_offset`` when
  there are segments (the active segment starts where the sealed ones end);
* segment keys are unique, and no removed key is still referenced by a segment;
* offsets, sizes and counts are non-negative; ``seq >= 0`` and ``parent_seq < seq``;
* the producer snapshot covers no offset past the sealed end: ``producers.through_offset <= next_offset``.

The value is frozen and slotted, its collections are tuples and a read-only mapping, so a manifest can
be shared between threads, hashed and pickled (Spark ships it to executors) without copying.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from s3stream.base.errors import CorruptData
from s3stream.base.producer import ProducerSnapshot

__all__ = [
    "Epoch",
    "FrozenMap",
    "Manifest",
    "RemovedObject",
    "SegmentRef",
    "WalCursor",
    "check_invariants",
]


class FrozenMap(Mapping[str, str]):
    """A read-only, hashable, picklable ``str -> str`` mapping (the manifest's ``attributes``)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        self._items: dict[str, str] = dict(sorted(dict(items).items()))

    def __getitem__(self, key: str) -> str:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._items) == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenMap({self._items!r})"

    def __getstate__(self) -> dict[str, str]:
        return self._items

    def __setstate__(self, state: dict[str, str]) -> None:
        self._items = dict(state)


@dataclass(frozen=True, slots=True)
class Epoch:
    """A fencing token: ``owner`` (a node id or cleaner id) holds the role at ``epoch``."""

    epoch: int
    owner: str


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """One sealed segment object and the facts retention, roll and compaction need without reading it."""

    key: str
    base_offset: int
    last_offset: int
    size_bytes: int  # logical bytes: what segment.bytes / retention.bytes count
    object_size: int  # bytes of the stored object
    record_count: int
    max_timestamp: int  # max record timestamp, -1 if none (rule ROLL-5: created_ms is used then)
    first_batch_max_timestamp: int  # rules ROLL-2 / CLEAN-SEL-4, -1 if none
    created_ms: int  # when sealed or rewritten (the segment's "mtime")
    crc32c: int  # of the whole object
    added_seq: int = 0  # manifest seq that added it
    cleaned: bool = False  # produced by the cleaner
    offset_delta: int = 0  # stored offsets + offset_delta = real offsets (segments staged by Spark tasks)

    @property
    def end_offset(self) -> int:
        """The exclusive end: ``last_offset + 1``."""
        return self.last_offset + 1

    @property
    def largest_timestamp(self) -> int:
        """Rule ROLL-5: the max record timestamp, or the segment's mtime when it has no timestamps."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.created_ms


@dataclass(frozen=True, slots=True)
class WalCursor:
    """Where unsealed data may be: WAL objects of ``node_id`` with seq ``>= from_seq``."""

    node_id: str
    from_seq: int


@dataclass(frozen=True, slots=True)
class RemovedObject:
    """A key dropped from the manifest at ``removed_seq``; GC deletes it after the delete delay."""

    key: str
    removed_at_ms: int
    removed_seq: int


def _empty_attributes() -> Mapping[str, str]:
    return FrozenMap()


@dataclass(frozen=True, slots=True)
class Manifest:
    """The committed state of one partition at version ``seq`` (see the module docstring)."""

    topic: str
    topic_id: str
    partition: int
    format: int = 1
    seq: int = 0
    parent_seq: int | None = None
    commit_id: str = ""
    committed_at_ms: int = 0
    writer: Epoch | None = None
    cleaner: Epoch | None = None
    log_start_offset: int = 0
    next_offset: int = 0  # end offset of the sealed segments = base of the active segment
    segments: tuple[SegmentRef, ...] = ()
    wal: WalCursor | None = None
    removed: tuple[RemovedObject, ...] = ()  # dropped objects awaiting physical deletion
    cleaner_checkpoint: int | None = None
    attributes: Mapping[str, str] = field(default_factory=_empty_attributes)
    producers: ProducerSnapshot | None = None  # idempotent producers' state (None: no producer seen)

    def __post_init__(self) -> None:
        # Normalise so a caller's list or dict can never alias (and later mutate) a manifest.
        segments: object = self.segments
        removed: object = self.removed
        if not isinstance(segments, tuple):
            object.__setattr__(self, "segments", tuple(self.segments))
        if not isinstance(removed, tuple):
            object.__setattr__(self, "removed", tuple(self.removed))
        if not isinstance(self.attributes, FrozenMap):
            object.__setattr__(self, "attributes", FrozenMap(self.attributes))

    @classmethod
    def empty(cls, topic: str, topic_id: str, partition: int) -> Manifest:
        """The state of a partition before its first commit (seq 0; never stored)."""
        return cls(topic=topic, topic_id=topic_id, partition=partition)

    def segment_index_for(self, offset: int) -> int | None:
        """Index of the sealed segment whose range contains ``offset``, or None (O(log n))."""
        idx = bisect.bisect_right(self.segments, offset, key=_base_offset) - 1
        if idx < 0 or offset > self.segments[idx].last_offset:
            return None
        return idx

    @property
    def sealed_bytes(self) -> int:
        """Logical bytes of all sealed segments (what retention.bytes compares)."""
        return sum(s.size_bytes for s in self.segments)


def _base_offset(ref: SegmentRef) -> int:
    return ref.base_offset


def check_invariants(m: Manifest, *, source: str | None = None) -> None:
    """Raise CorruptData (naming ``source``) unless ``m`` keeps every invariant of the module docstring."""
    problem = _header_problem(m) or _segments_problem(m) or _removed_problem(m)
    if problem is not None:
        raise CorruptData(f"invalid manifest (seq {m.seq}): {problem}", source=source)


def _header_problem(m: Manifest) -> str | None:
    if m.format < 1:
        return f"format {m.format} < 1"
    if m.seq < 0:
        return "seq < 0"
    if m.parent_seq is not None and not 0 <= m.parent_seq < m.seq:
        return f"parent_seq {m.parent_seq} is not in [0, seq)"
    if m.partition < 0:
        return "partition < 0"
    if m.log_start_offset < 0 or m.next_offset < 0:
        return "log_start_offset and next_offset must be >= 0"
    if m.cleaner_checkpoint is not None and m.cleaner_checkpoint < 0:
        return "cleaner_checkpoint < 0"
    for role, ep in (("writer", m.writer), ("cleaner", m.cleaner)):
        if ep is not None and (ep.epoch < 1 or not ep.owner):
            return f"{role} epoch must be >= 1 with a non-empty owner"
    if m.wal is not None and (m.wal.from_seq < 0 or not m.wal.node_id):
        return "wal cursor needs a node id and from_seq >= 0"
    if m.producers is not None and m.producers.through_offset > m.next_offset:
        return f"producer snapshot through {m.producers.through_offset} is past next_offset {m.next_offset}"
    return None


def _segments_problem(m: Manifest) -> str | None:
    keys: set[str] = set()
    prev: SegmentRef | None = None
    for s in m.segments:
        if not s.key or s.key in keys:
            return f"empty or duplicate segment key {s.key!r}"
        keys.add(s.key)
        if s.base_offset < 0 or s.last_offset < s.base_offset:
            return f"segment {s.key}: bad range [{s.base_offset}, {s.last_offset}]"
        if min(s.size_bytes, s.object_size, s.record_count, s.added_seq) < 0:
            return f"segment {s.key}: negative size, count or added_seq"
        if not 0 <= s.offset_delta <= s.base_offset:
            return f"segment {s.key}: offset_delta {s.offset_delta} outside [0, base_offset]"
        if s.record_count > s.end_offset - s.base_offset:
            return f"segment {s.key}: record_count exceeds its offset range"
        if min(s.max_timestamp, s.first_batch_max_timestamp) < -1 or not 0 <= s.crc32c < 2**32:
            return f"segment {s.key}: timestamp < -1 or crc32c out of range"
        if prev is not None and s.base_offset != prev.end_offset:
            return f"segment {s.key} starts at {s.base_offset}, expected {prev.end_offset} (gap or overlap)"
        prev = s
    if prev is not None and m.next_offset != prev.end_offset:
        return f"next_offset {m.next_offset} != end of the last segment {prev.end_offset}"
    return None


def _removed_problem(m: Manifest) -> str | None:
    live = {s.key for s in m.segments}
    seen: set[str] = set()
    for r in m.removed:
        if not r.key or r.key in seen:
            return f"empty or duplicate removed key {r.key!r}"
        if r.key in live:
            return f"removed key {r.key} is still referenced by a segment"
        if r.removed_seq < 0:
            return f"removed key {r.key}: removed_seq < 0"
        seen.add(r.key)
    return None
