"""Planning a read (pure): a partition snapshot and an offset range become Spark input partitions.

Vocabulary:

* **read task** (:class:`ReadTask`): one Spark input partition. It names the store URL, the topic
  partition, the manifest version it was planned from, an offset range ``[start_offset, end_offset)``
  and the **sources** holding it: one sealed segment (key, size, offset range, ``offset_delta``), or a
  run of consecutive WAL-object chunks (key and byte range of each). Tasks carry no open handles: they
  are pickled to executors, which fetch exactly those byte ranges.
* **bounds** (:class:`Bounds`): what filter pushdown learned: topics, partitions, an offset range and
  an inclusive millisecond timestamp range. Offsets and partitions shrink the plan; timestamps prune
  segments and chunks whose max timestamp is too small, and executors prune row groups by the footer's
  time index, then filter rows exactly.

Invariants: the tasks of a partition cover disjoint offset ranges inside ``[start, end)``; segment
tasks stay below the sealed end (``next_offset``) and chunk tasks at or above it, so a record is
produced once even when a WAL chunk straddles the sealed end. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from s3stream.apps.spark.segio import SegmentSource
from s3stream.apps.spark.snapshot import PartitionSnapshot, segment_source
from s3stream.format.walobject import WalChunkIndex

__all__ = ["Bounds", "ChunkSource", "ReadTask", "plan_partition"]

#: Object bytes of WAL chunks grouped into one read task.
CHUNK_TASK_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class ChunkSource:
    """One partition's chunk inside one WAL object."""

    key: str
    chunk: WalChunkIndex


@dataclass(frozen=True, slots=True)
class Bounds:
    """Pushed-down restrictions (None: unrestricted); timestamps are inclusive milliseconds."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    min_offset: int = 0
    max_offset: int | None = None  # inclusive
    min_timestamp: int | None = None
    max_timestamp: int | None = None

    def allows(self, topic: str, partition: int) -> bool:
        return ((self.topics is None or topic in self.topics)
                and (self.partitions is None or partition in self.partitions))

    def offsets(self, start: int, end: int) -> tuple[int, int]:
        """``[start, end)`` narrowed by the offset bounds (possibly empty: start >= end)."""
        hi = end if self.max_offset is None else min(end, self.max_offset + 1)
        return max(start, self.min_offset), hi

    @property
    def impossible(self) -> bool:
        """The bounds contradict themselves (no row can pass)."""
        return ((self.max_offset is not None and self.max_offset < self.min_offset)
                or (self.min_timestamp is not None and self.max_timestamp is not None
                    and self.max_timestamp < self.min_timestamp)
                or self.topics == frozenset() or self.partitions == frozenset())


@dataclass(frozen=True, slots=True)
class ReadTask:
    """One Spark input partition (picklable; see the module docstring)."""

    url: str
    topic: str
    topic_id: str
    partition: int
    timestamp_type: int
    manifest_seq: int
    start_offset: int
    end_offset: int
    sources: tuple[SegmentSource | ChunkSource, ...]
    min_timestamp: int | None = None
    max_timestamp: int | None = None
    include_headers: bool = True
    fail_on_data_loss: bool = True


def _task(snap: PartitionSnapshot, url: str, start: int, end: int, sources: tuple[SegmentSource | ChunkSource, ...],
          bounds: Bounds, include_headers: bool, fail_on_data_loss: bool) -> ReadTask:
    t = snap.topic
    return ReadTask(url, t.name, t.topic_id, snap.partition, t.timestamp_type, snap.manifest_seq, start, end,
                    sources, bounds.min_timestamp, bounds.max_timestamp, include_headers, fail_on_data_loss)


def plan_partition(snap: PartitionSnapshot, start: int, end: int, *, url: str, bounds: Bounds = Bounds(),
                   include_headers: bool = True, fail_on_data_loss: bool = True,
                   chunk_task_bytes: int = CHUNK_TASK_BYTES) -> list[ReadTask]:
    """The read tasks covering offsets ``[start, end)`` of ``snap`` within ``bounds``, in offset order."""
    if bounds.impossible or not bounds.allows(snap.topic.name, snap.partition):
        return []
    start, end = bounds.offsets(max(start, snap.log_start_offset), min(end, snap.log_end_offset))
    if start >= end:
        return []
    view = snap.view
    min_ts = bounds.min_timestamp
    tasks: list[ReadTask] = []
    for ref in view.segments:
        lo, hi = max(start, ref.base_offset), min(end, ref.end_offset, view.next_offset)
        if lo >= hi or ref.record_count == 0 or (min_ts is not None and ref.max_timestamp < min_ts):
            continue
        tasks.append(_task(snap, url, lo, hi, (segment_source(ref),), bounds, include_headers, fail_on_data_loss))
    run: list[ChunkSource] = []
    run_bytes = 0
    floor = max(start, view.next_offset)

    def close_run() -> None:
        nonlocal run, run_bytes
        if run:
            lo = max(floor, run[0].chunk.base_offset)
            hi = min(end, run[-1].chunk.last_offset + 1)
            tasks.append(_task(snap, url, lo, hi, tuple(run), bounds, include_headers, fail_on_data_loss))
        run, run_bytes = [], 0

    for cref in view.chunks:
        c = cref.chunk
        if c.record_count == 0 or c.last_offset < floor or c.base_offset >= end:
            continue
        if min_ts is not None and c.max_timestamp < min_ts:
            close_run()  # keep each task's sources contiguous
            continue
        if run and run_bytes + (c.byte_end - c.byte_start) > chunk_task_bytes:
            close_run()
        run.append(ChunkSource(cref.key, c))
        run_bytes += c.byte_end - c.byte_start
    close_run()
    return tasks
