"""Reading a partition across its three tiers: sealed segments, WAL-object chunks, and memory.

A :class:`LogView` is an immutable snapshot of where every offset of a partition lives:

* ``[log_start_offset, next_offset)`` in sealed segment objects (the manifest),
* ``[next_offset, ...)`` in WAL-object chunks and in memory (the tail cache of the writing process),
* ending at ``log_end_offset``.

:func:`read_table` walks them in offset order with ranged GETs, stopping at a record or byte budget,
and returns one Arrow table; nothing here loops over records in Python.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from s3stream.manifest.model import SegmentRef
from s3stream.objectstore.protocol import ByteRange, ObjectStore
from s3stream.records import RECORD_SCHEMA
from s3stream.segment import SegmentReader, row_sizes
from s3stream.walobject import decode_chunk
from s3stream.walscan import ChunkRef

__all__ = ["ChunkCache", "LogView", "MemBatch", "SegmentReaderCache", "read_table", "shift_offsets", "take_budget"]

DEFAULT_MAX_BYTES = 1 << 20


class MemBatch(NamedTuple):
    """A batch of the writer's tail cache with its offset bounds (kept so lookups never touch Arrow)."""

    first: int
    last: int
    nbytes: int
    batch: pa.RecordBatch


@dataclass(frozen=True, slots=True)
class LogView:
    """Where each offset of a partition lives, at one instant."""

    log_start_offset: int
    log_end_offset: int
    next_offset: int
    segments: tuple[SegmentRef, ...] = ()
    chunks: tuple[ChunkRef, ...] = ()
    memory: tuple[MemBatch, ...] = ()
    _seg_last: list[int] = field(default_factory=list, compare=False, repr=False)
    _mem_last: list[int] = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._seg_last.extend(s.last_offset for s in self.segments)
        self._mem_last.extend(m.last for m in self.memory)

    def memory_at(self, offset: int) -> MemBatch | None:
        """The first cached batch ending at or after ``offset`` (batches are in offset order)."""
        i = bisect.bisect_left(self._mem_last, offset)
        return self.memory[i] if i < len(self.memory) else None

    def segment_at(self, offset: int) -> SegmentRef | None:
        """The first sealed segment whose range ends at or after ``offset``."""
        i = bisect.bisect_left(self._seg_last, offset)
        return self.segments[i] if i < len(self.segments) else None


class SegmentReaderCache:
    """Open :class:`SegmentReader` objects by key, so sequential reads reuse footers and blocks."""

    def __init__(self, store: ObjectStore, *, max_entries: int = 256, block_bytes: int = 1 << 20) -> None:
        self._store = store
        self._max = max_entries
        self._block = block_bytes
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, SegmentReader] = OrderedDict()

    def get(self, seg: SegmentRef) -> SegmentReader:
        with self._lock:
            reader = self._cache.get(seg.key)
            if reader is not None:
                self._cache.move_to_end(seg.key)
                return reader
        key = seg.key
        reader = SegmentReader(lambda start, end: self._store.get(key, ByteRange(start, end)), seg.object_size,
                               source=key, block_bytes=self._block)
        with self._lock:
            self._cache[key] = reader
            while len(self._cache) > self._max:
                self._cache.popitem(last=False)
        return reader

    def evict(self, key: str) -> None:
        with self._lock:
            self._cache.pop(key, None)


class ChunkCache:
    """Decoded WAL-object chunks, bounded by bytes (tailing readers and sealing from the bucket)."""

    def __init__(self, store: ObjectStore, *, max_bytes: int = 64 << 20) -> None:
        self._store = store
        self._max = max_bytes
        self._bytes = 0
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, str], pa.RecordBatch] = OrderedDict()

    def get(self, ref: ChunkRef, log_id: str) -> pa.RecordBatch:
        ck = (ref.key, log_id)
        with self._lock:
            hit = self._cache.get(ck)
            if hit is not None:
                self._cache.move_to_end(ck)
                return hit
        c = ref.chunk
        data = self._store.get(ref.key, ByteRange(c.byte_start, c.byte_end))
        batch = decode_chunk(data, c, source=ref.key)
        with self._lock:
            if ck not in self._cache:
                self._cache[ck] = batch
                self._bytes += batch.nbytes
                while self._bytes > self._max and len(self._cache) > 1:
                    _, old = self._cache.popitem(last=False)
                    self._bytes -= old.nbytes
        return batch


def _row_sizes(table: pa.Table | pa.RecordBatch) -> pa.Array:
    """Record sizes as ``Record.size_bytes`` counts them (headers included), like the segment reader's."""
    return pa.array(row_sizes(table), type=pa.int64())


def take_budget(table: pa.Table, max_records: int | None, max_bytes: int | None, *,
                at_least_one: bool = True) -> tuple[pa.Table, int, bool]:
    """The longest prefix within both budgets, its byte size, and whether it was cut.

    With ``at_least_one`` (the first piece of a read) the prefix has at least one row even when that row
    alone exceeds ``max_bytes``; later pieces of the same read stay strictly within the budget.
    """
    n = table.num_rows
    if n == 0:
        return table, 0, False
    limit = n if max_records is None else min(n, max_records)
    sizes = _row_sizes(table)
    cumulative = pc.cumulative_sum(sizes)
    if max_bytes is not None:
        fitting = int(pc.sum(pc.less_equal(cumulative, max_bytes)).as_py() or 0)
        limit = min(limit, max(1, fitting) if at_least_one else fitting)
    if limit == 0:
        return table.slice(0, 0), 0, True
    used = int(cumulative[limit - 1].as_py())
    return table.slice(0, limit), used, limit < n


def _from_offset(batch: pa.RecordBatch | pa.Table, offset: int) -> pa.Table:
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    if table.num_rows == 0:
        return table
    first = table.column("offset")[0].as_py()
    if first >= offset:
        return table
    mask = pc.greater_equal(table.column("offset"), offset)
    return table.filter(mask)


def _mem_or_chunk(view: LogView, pos: int) -> tuple[pa.RecordBatch | None, ChunkRef | None]:
    mem = view.memory_at(pos)
    if mem is not None and mem.first <= pos:
        return mem.batch, None
    for ref in view.chunks:
        if ref.chunk.base_offset <= pos <= ref.chunk.last_offset:
            return None, ref
    # no source contains pos exactly: take the first that starts after it (gaps are legal)
    starts: list[tuple[int, pa.RecordBatch | None, ChunkRef | None]] = []
    if mem is not None:
        starts.append((mem.first, mem.batch, None))
    starts.extend((r.chunk.base_offset, None, r) for r in view.chunks if r.chunk.base_offset > pos)
    if not starts:
        return None, None
    _, b, r = min(starts, key=lambda t: t[0])
    return b, r


def read_table(view: LogView, offset: int, *, log_id: str, segments: SegmentReaderCache, chunks: ChunkCache,
               max_records: int | None = None, max_bytes: int | None = None, until: int | None = None) -> pa.Table:
    """Records at offsets >= ``offset`` (and < ``until``) in order, across tiers, within the budgets.

    At least one record is returned when any exists, even if it alone exceeds ``max_bytes``.
    """
    if max_bytes is None:
        max_bytes = DEFAULT_MAX_BYTES
    end = view.log_end_offset if until is None else min(until, view.log_end_offset)
    parts: list[pa.Table] = []
    pos = offset
    records_left = max_records
    bytes_left = max_bytes
    while pos < end and (records_left is None or records_left > 0) and bytes_left > 0:
        table, next_pos = _read_step(view, pos, log_id, segments, chunks, records_left, bytes_left)
        if table is not None and table.num_rows:
            table, used, cut = take_budget(table, records_left, bytes_left, at_least_one=not parts)
            if table.num_rows == 0:
                break
            parts.append(table)
            bytes_left -= used
            if records_left is not None:
                records_left -= table.num_rows
            if cut:
                break
            next_pos = max(next_pos, table.column("offset")[-1].as_py() + 1)
        if next_pos <= pos:
            break
        pos = next_pos
    if not parts:
        return RECORD_SCHEMA.empty_table()
    table = pa.concat_tables(parts)
    if until is not None and table.num_rows and table.column("offset")[-1].as_py() >= until:
        table = table.filter(pc.less(table.column("offset"), until))
    return table


def _read_step(view: LogView, pos: int, log_id: str, segments: SegmentReaderCache, chunks: ChunkCache,
               records_left: int | None, bytes_left: int) -> tuple[pa.Table | None, int]:
    if pos < view.next_offset:
        seg = view.segment_at(pos)
        if seg is None:
            return None, view.next_offset
        reader = segments.get(seg)
        table = shift_offsets(reader.read(max(pos, seg.base_offset) - seg.offset_delta, max_records=records_left,
                                          max_bytes=bytes_left), seg.offset_delta)
        # the reader may stop early (budget, row groups): the caller continues after the last row it got,
        # and only an empty answer proves that nothing of this segment is left from ``pos``
        return table, (seg.end_offset if table.num_rows == 0 else pos)
    batch, ref = _mem_or_chunk(view, pos)
    if batch is None and ref is None:
        return None, view.log_end_offset
    source = batch if batch is not None else chunks.get(ref, log_id)  # type: ignore[arg-type]
    table = _from_offset(source, pos)
    last = source.column(0)[-1].as_py() if source.num_rows else pos
    return table, last + 1


def shift_offsets(table: pa.Table, delta: int) -> pa.Table:
    """Stored offsets -> real offsets for a segment staged with relative offsets (``SegmentRef.offset_delta``)."""
    if not delta or table.num_rows == 0 or "offset" not in table.column_names:
        return table
    idx = table.schema.get_field_index("offset")
    return table.set_column(idx, table.schema.field(idx), pc.add(table.column(idx), pa.scalar(delta, pa.int64())))


def _size(table: pa.Table) -> int:
    s = pc.sum(_row_sizes(table)).as_py()
    return int(s) if s is not None else 0


def tables_nbytes(tables: Sequence[pa.Table]) -> int:
    """Logical byte size of several tables."""
    return sum(_size(t) for t in tables)
