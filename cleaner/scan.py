"""How the cleaner reads segments: dedicated ranged readers, chosen row groups, and one step of read-ahead.

A cleaning round scans segments twice, both times through a :class:`~s3stream.format.segment.SegmentReader` of
its own (scanning through the store's shared reader cache would fill it with blocks nobody reads again)
and both times only the row groups it needs (:meth:`~s3stream.format.segment.SegmentReader.read_groups`: fetched
by ranged GETs, decoded in one call, checked by each row group's CRC32C, or by page checksums when only
some columns are read, and against the CRC-protected footer index). For the offset map only the
``offset`` and ``key`` columns are read (:func:`segment_keys`). The rewrite (:func:`segment_chunks`)
reads every column in chunks of whole row groups (about :data:`CHUNK_BYTES` of records, :data:`DECODERS`
at once), and skips the row groups the keep rules drop whole, which the footer alone tells (their
offsets hold no winner of the offset map, and the index counts their null keys and values for the
round's statistics): after a round over a key space that fits the map, most of the older segments' row
groups are never fetched. A round holds a few decoded chunks, never a whole segment. Damaged bytes raise
CorruptData naming the object.

Offsets come out real: a segment staged with relative offsets (``SegmentRef.offset_delta``, Spark writes)
stores ``0..n-1``; its footer must cover the manifest's range once shifted by the delta, and the delta is
added to every offset read, so the map, the keep rules and the outputs (which have no delta) never see
stored offsets.

:func:`read_ahead` overlaps I/O and decoding with the caller's work: while the caller processes item i,
one worker thread produces item i+1 (pyarrow releases the GIL while decoding), so memory grows by one
item at most; :func:`prefetched` runs a bounded number of independent reads ahead (the offset map's
key columns).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s3stream.base.errors import CorruptData
from s3stream.format.segment import RowGroupInfo, SegmentReader
from s3stream.manifest.model import SegmentRef
from s3stream.objectstore.fetch import ranged_fetch, ranged_fetch_many

if TYPE_CHECKING:
    from s3stream.engine.runtime import Runtime

__all__ = [
    "CHUNK_BYTES",
    "Droppable",
    "Dropped",
    "prefetched",
    "read_ahead",
    "segment_chunks",
    "segment_keys",
    "segment_reader",
]

#: Logical bytes of records per chunk of the rewrite (whole row groups; at least one).
CHUNK_BYTES = 8 << 20
#: Chunks of one object decoded concurrently by the rewrite.
DECODERS = 2

T = TypeVar("T")
A = TypeVar("A")
_END = object()


def segment_reader(rt: Runtime, seg: SegmentRef) -> SegmentReader:
    """A reader of ``seg`` of its own (not the store's shared cache), fetching by ranged GETs (a key scan's
    ranges in one call where the store serves them without request latency)."""
    store, key = rt.objstore, seg.key
    return SegmentReader(ranged_fetch(store, key), seg.object_size, source=key,
                         block_bytes=max(rt.settings.read_ahead_bytes, 1 << 20),
                         fetch_many=ranged_fetch_many(store, key), executor=rt.fetches)


def segment_keys(rt: Runtime, seg: SegmentRef, from_offset: int) -> pa.Table:
    """Columns ``offset`` and ``key`` of ``seg`` from ``from_offset`` (column projection: values are not read)."""
    reader = segment_reader(rt, seg)
    groups = _check_range(reader, seg)
    start = max(seg.base_offset, from_offset) - seg.offset_delta
    table = reader.read_groups([i for i, g in enumerate(groups) if g.last_offset >= start], columns=["offset", "key"])
    offsets = np.asarray(table.column("offset").to_numpy(), dtype=np.int64)
    return _real_offsets(table.slice(int(np.searchsorted(offsets, start))), seg.offset_delta)


def _check_range(reader: SegmentReader, seg: SegmentRef) -> list[RowGroupInfo]:
    """The footer's row groups, after checking that the footer covers the manifest's range (with the delta).

    A segment staged with relative offsets (``offset_delta``, Spark writes) stores ``0..n-1``; everything
    the cleaner computes is in real offsets.
    """
    footer, delta = reader.footer, seg.offset_delta
    if (footer.base_offset + delta, footer.last_offset + delta) != (seg.base_offset, seg.last_offset):
        raise CorruptData(f"segment footer covers [{footer.base_offset}, {footer.last_offset}] + delta {delta}, "
                          f"the manifest says [{seg.base_offset}, {seg.last_offset}]", source=seg.key)
    return list(footer.row_groups)


def _real_offsets(table: pa.Table, delta: int) -> pa.Table:
    if not delta:
        return table
    i = table.schema.get_field_index("offset")
    return table.set_column(i, table.schema.field(i), pc.add(table.column(i), pa.scalar(delta, pa.int64())))


@dataclass(frozen=True, slots=True)
class Dropped:
    """Row groups of a segment whose every record the keep rules drop, known from the footer alone."""

    records: int
    unkeyed: int
    tombstones: int


#: ``droppable(first, last)``: whether the keep rules drop every record at offsets ``[first, last]``.
Droppable = Callable[[int, int], bool]


def segment_chunks(rt: Runtime, segments: Sequence[SegmentRef], *, droppable: Droppable | None = None,
                   chunk_bytes: int = CHUNK_BYTES, decoders: int = DECODERS) -> Iterator[pa.Table | Dropped]:
    """Every record of ``segments`` in offset order, as tables of whole row groups of ~``chunk_bytes``.

    Row groups ``droppable`` says are dropped whole (and whose footer counts their null keys and values)
    are never fetched: each segment's come out first, as one :class:`Dropped` with those counts.
    ``decoders`` chunks are fetched and decoded at once (pyarrow releases the GIL) and the next segment's
    footer is fetched meanwhile: memory is two footers and ``decoders`` chunks, never a whole segment.
    """
    if not segments:
        return
    with rt.pool(decoders + 1, "s3stream-cleaner-decode") as pool:
        opening: Future[tuple[SegmentReader, list[RowGroupInfo]]] = pool.submit(_open, rt, segments[0])
        for i, seg in enumerate(segments):
            reader, groups = opening.result()
            if i + 1 < len(segments):
                opening = pool.submit(_open, rt, segments[i + 1])
            window: deque[Dropped | Future[pa.Table]] = deque()
            for item in _plan(groups, seg.offset_delta, droppable, chunk_bytes):
                window.append(item if isinstance(item, Dropped) else pool.submit(_decode, reader, seg, item))
                yield from _ready(window, decoders - 1)
            yield from _ready(window, 0)


def _open(rt: Runtime, seg: SegmentRef) -> tuple[SegmentReader, list[RowGroupInfo]]:
    reader = segment_reader(rt, seg)
    return reader, _check_range(reader, seg)


def _ready(window: deque[Dropped | Future[pa.Table]], keep: int) -> Iterator[pa.Table | Dropped]:
    """Pop the window's head while it is a Dropped or more than ``keep`` decodes are queued, in order."""
    while window and (len(window) > keep or isinstance(window[0], Dropped)):
        head = window.popleft()
        yield head if isinstance(head, Dropped) else head.result()


def _plan(groups: Sequence[RowGroupInfo], delta: int, droppable: Droppable | None,
          chunk_bytes: int) -> Iterator[list[int] | Dropped]:
    """The row groups to decode, in ascending runs of about ``chunk_bytes`` of records (at least one group;
    not necessarily adjacent), after one :class:`Dropped` summing the groups dropped whole (if any)."""
    drop = [droppable is not None and g.unkeyed is not None and g.tombstones is not None
            and droppable(g.first_offset + delta, g.last_offset + delta) for g in groups]
    if any(drop):
        gone = [g for g, d in zip(groups, drop, strict=True) if d]
        yield Dropped(sum(g.num_rows for g in gone), sum(g.unkeyed or 0 for g in gone),
                      sum(g.tombstones or 0 for g in gone))
    run: list[int] = []
    size = 0
    for i, g in enumerate(groups):
        if drop[i]:
            continue
        if run and size + g.size_bytes > chunk_bytes:
            yield run
            run, size = [], 0
        run.append(i)
        size += g.size_bytes
    if run:
        yield run


def _decode(reader: SegmentReader, seg: SegmentRef, groups: list[int]) -> pa.Table:
    """Row groups ``groups`` of ``seg``, every column, checked against the footer, in real offsets."""
    return _real_offsets(reader.read_groups(groups), seg.offset_delta)


def prefetched(pool: Executor, fn: Callable[[A], T], items: Iterable[A], *, depth: int
               ) -> Iterator[tuple[A, T]]:
    """``(item, fn(item))`` in order, with up to ``depth`` calls running ahead in ``pool``.

    A caller that stops early leaves at most ``depth`` calls to finish (the pool's shutdown waits).
    """
    todo = iter(items)
    window: deque[tuple[A, Future[T]]] = deque((item, pool.submit(fn, item)) for item in itertools.islice(todo, depth))
    while window:
        item, future = window.popleft()
        result = future.result()
        nxt = next(todo, _END)
        if nxt is not _END:
            window.append((cast(A, nxt), pool.submit(fn, cast(A, nxt))))
        yield item, result


def read_ahead(pool: Executor, items: Iterator[T]) -> Iterator[T]:
    """``items`` in order, the next one produced in ``pool`` while the caller works on the current one.

    Errors (and crash points) raised while producing an item surface here, in the caller's thread.
    """
    done = object()

    def produce() -> object:
        return next(items, done)

    pending: Future[object] = pool.submit(produce)
    while True:
        item = pending.result()
        if item is done:
            return
        pending = pool.submit(produce)
        yield cast(T, item)
