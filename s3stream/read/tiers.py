"""Reading a partition across its three tiers: sealed segments, WAL-object chunks, and memory.

A :class:`LogView` is an immutable snapshot of where every offset of a partition lives:

* ``[log_start_offset, next_offset)`` in sealed segment objects (the manifest),
* ``[next_offset, ...)`` in WAL-object chunks and in memory (the tail cache of the writing process),
* ending at ``log_end_offset``.

:func:`read_table` walks them in offset order with ranged GETs, stopping at a record or byte budget,
and returns one Arrow table; nothing here loops over records in Python. Segment readers apply the budget
themselves (one decode and one size computation per row group); a stream whose read-ahead reaches the end
of a segment has the next segments opened and their first windows fetched in the background.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from s3stream.base.records import RECORD_SCHEMA
from s3stream.format.segment import SegmentReader, row_sizes
from s3stream.format.segment.ranged import fetches
from s3stream.format.walobject import decode_chunk
from s3stream.manifest.model import SegmentRef
from s3stream.objectstore.fetch import ranged_fetch
from s3stream.objectstore.protocol import ByteRange, ObjectStore
from s3stream.read.walscan import ChunkRef

__all__ = ["ChunkCache", "LogView", "MemBatch", "SegmentReaderCache", "chunks_to_fetch", "read_table", "shift_offsets",
           "take_budget"]

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

    def segment_after(self, seg: SegmentRef) -> SegmentRef | None:
        """The sealed segment following ``seg`` (None if ``seg`` is the last or not in the view)."""
        i = bisect.bisect_left(self._seg_last, seg.last_offset)
        if i + 1 < len(self.segments) and self.segments[i].key == seg.key:
            return self.segments[i + 1]
        return None


class SegmentReaderCache:
    """Open :class:`SegmentReader` objects by key, so sequential reads reuse footers and blocks.

    A reader dropped from the cache releases its bytes (cached and in flight), unless a read is using it.
    """

    def __init__(self, store: ObjectStore, *, max_entries: int = 256, block_bytes: int = 1 << 20,
                 executor: Executor | None = None) -> None:
        self._store = store
        self._executor = executor  # the readers' read-ahead (None: the process-wide fetch pool)
        self._max = max_entries
        self._block = block_bytes
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, SegmentReader] = OrderedDict()

    @property
    def max_entries(self) -> int:
        return self._max

    def get(self, seg: SegmentRef) -> SegmentReader:
        with self._lock:
            reader = self._cache.get(seg.key)
            if reader is not None:
                self._cache.move_to_end(seg.key)
                return reader
        key = seg.key
        reader = SegmentReader(ranged_fetch(self._store, key), seg.object_size,
                               source=key, block_bytes=self._block, executor=self._executor)
        dropped: list[SegmentReader] = []
        with self._lock:
            self._cache[key] = reader
            while len(self._cache) > self._max:
                dropped.append(self._cache.popitem(last=False)[1])
        for old in dropped:
            old.release()
        return reader

    def warm(self, seg: SegmentRef) -> None:
        """Open ``seg`` and start fetching its first window in the background (a stream is about to enter it)."""
        self.get(seg).warm(seg.base_offset - seg.offset_delta)

    def evict(self, key: str) -> None:
        with self._lock:
            reader = self._cache.pop(key, None)
        if reader is not None:
            reader.release()


class ChunkCache:
    """Decoded WAL-object chunks, bounded by bytes (tailing readers and sealing from the bucket).

    :meth:`prefetch` loads chunks on the shared fetch pool ahead of a reader that will need them (a seal
    walks its segment's chunks in order); a :meth:`get` of a chunk being prefetched waits for that load
    instead of issuing a second GET. Pool tasks never wait for one another (the pool's rule).

    It holds at most ``max_bytes``, and at most ``room()`` when given: what a budget shared with another
    cache leaves it (a store's ``cache_bytes``, shared with its tail cache, which shrinks this one first:
    :meth:`shrink`). The chunk just loaded is kept even beyond the bound, so a prefetch is not wasted.
    """

    def __init__(self, store: ObjectStore, *, max_bytes: int = 64 << 20, room: Callable[[], int] | None = None,
                 executor: Executor | None = None) -> None:
        self._executor = executor  # prefetches (None: the process-wide fetch pool)
        self._store = store
        self._max = max_bytes
        self._room = room
        self._bytes = 0
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, str], pa.RecordBatch] = OrderedDict()
        self._pending: dict[tuple[str, str], Future[pa.RecordBatch]] = {}

    @property
    def nbytes(self) -> int:
        """Decoded bytes held."""
        return self._bytes

    def shrink(self, max_bytes: int) -> None:
        """Evict least recently used chunks until at most ``max_bytes`` (none when negative) are held."""
        with self._lock:
            while self._bytes > max_bytes and self._cache:
                _, old = self._cache.popitem(last=False)
                self._bytes -= old.nbytes

    def get(self, ref: ChunkRef, log_id: str) -> pa.RecordBatch:
        ck = (ref.key, log_id)
        with self._lock:
            hit = self._cache.get(ck)
            if hit is not None:
                self._cache.move_to_end(ck)
                return hit
            pending = self._pending.get(ck)
        if pending is not None:
            try:
                return pending.result()
            except Exception:  # noqa: BLE001 - the load is repeated here, so a real error surfaces here
                pass
        return self._load(ref, log_id)

    def prefetch(self, refs: Sequence[ChunkRef], log_id: str) -> None:
        """Start loading ``refs`` (neither cached nor loading yet) in the background."""
        todo: list[tuple[ChunkRef, Future[pa.RecordBatch]]] = []
        with self._lock:
            for ref in refs:
                ck = (ref.key, log_id)
                if ck not in self._cache and ck not in self._pending:
                    todo.append((ref, self._pending.setdefault(ck, Future())))
        pool = fetches(self._executor)  # submitted unlocked: an inline executor loads at once, taking the lock
        for ref, future in todo:
            pool.submit(self._prefetched, ref, log_id, future)

    def _prefetched(self, ref: ChunkRef, log_id: str, future: Future[pa.RecordBatch]) -> None:
        try:
            batch = self._load(ref, log_id)
        except BaseException as exc:  # noqa: BLE001 - a get() waiting for it loads again and meets the error
            future.set_exception(exc)
            return
        finally:
            with self._lock:
                self._pending.pop((ref.key, log_id), None)
        future.set_result(batch)

    def _load(self, ref: ChunkRef, log_id: str) -> pa.RecordBatch:
        ck = (ref.key, log_id)
        c = ref.chunk
        data = self._store.get(ref.key, ByteRange(c.byte_start, c.byte_end))
        batch = decode_chunk(data, c, source=ref.key)
        limit = self._max if self._room is None else min(self._max, self._room())
        with self._lock:
            if ck not in self._cache:
                self._cache[ck] = batch
                self._bytes += batch.nbytes
                while self._bytes > limit and len(self._cache) > 1:
                    _, old = self._cache.popitem(last=False)
                    self._bytes -= old.nbytes
        return batch


def chunks_to_fetch(view: LogView, start: int, end: int, max_object_bytes: int) -> list[ChunkRef]:
    """The WAL-object chunks a read of ``[start, end)`` will GET (those below the tail cache), in offset
    order, up to about ``max_object_bytes`` of objects (at least one chunk when any is needed)."""
    mem_start = view.memory[0].first if view.memory else view.log_end_offset  # the cache is a suffix
    out: list[ChunkRef] = []
    total = 0
    for ref in view.chunks:
        c = ref.chunk
        if c.last_offset < start or max(c.base_offset, start) >= min(end, mem_start):
            continue  # not wanted, or its wanted part is in the cache
        if out and total + (c.byte_end - c.byte_start) > max_object_bytes:
            break
        out.append(ref)
        total += c.byte_end - c.byte_start
    return out


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
        if pos < view.next_offset:
            table, used, cut, next_pos = _read_segment(view, pos, segments, records_left, bytes_left,
                                                       at_least_one=not parts)
        else:
            table, next_pos = _read_unsealed(view, pos, log_id, chunks)
            used, cut = 0, False
            if table is not None and table.num_rows:
                table, used, cut = take_budget(table, records_left, bytes_left, at_least_one=not parts)
        if table is not None and table.num_rows:
            parts.append(table)
            bytes_left -= used
            if records_left is not None:
                records_left -= table.num_rows
            next_pos = max(next_pos, table.column("offset")[-1].as_py() + 1)
        if cut or next_pos <= pos:
            break
        pos = next_pos
    if not parts:
        return RECORD_SCHEMA.empty_table()
    table = pa.concat_tables(parts)
    if until is not None and table.num_rows and table.column("offset")[-1].as_py() >= until:
        table = table.filter(pc.less(table.column("offset"), until))
    return table


def _read_segment(view: LogView, pos: int, segments: SegmentReaderCache, records_left: int | None,
                  bytes_left: int, *, at_least_one: bool) -> tuple[pa.Table | None, int, bool, int]:
    """Read the sealed segment holding ``pos``: (table, its bytes, cut by a budget, where to continue)."""
    seg = view.segment_at(pos)
    if seg is None:
        return None, 0, False, view.next_offset
    reader = segments.get(seg)

    def warm_next() -> None:
        # a stream about to leave this segment: open the next ones (a window's worth of objects, at least
        # one) and start their first windows meanwhile
        # (fewer than the cache holds: warming more would evict the reader in use and the first warmed ones)
        ahead, opened, following = 0, 0, view.segment_after(seg)
        while following is not None and ahead < reader.window_bytes and opened < segments.max_entries - 2:
            segments.warm(following)
            ahead += following.object_size
            opened += 1
            following = view.segment_after(following)

    got = reader.read_budgeted(max(pos, seg.base_offset) - seg.offset_delta, max_records=records_left,
                               max_bytes=bytes_left, at_least_one=at_least_one, on_tail=warm_next)
    # a read not cut by a budget returned everything of this segment from ``pos``
    return shift_offsets(got.table, seg.offset_delta), got.nbytes, got.cut, (pos if got.cut else seg.end_offset)


def _read_unsealed(view: LogView, pos: int, log_id: str, chunks: ChunkCache) -> tuple[pa.Table | None, int]:
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
