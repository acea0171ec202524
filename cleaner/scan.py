"""How the cleaner reads segments: dedicated ranged readers, bounded chunks, and one step of read-ahead.

A cleaning round scans segments twice. For the offset map only the ``offset`` and ``key`` columns are
read, by ranged GETs of those column chunks (:func:`segment_keys`, through a
:class:`~s3stream.segment.SegmentReader` of its own: scanning through the store's shared reader cache
would fill it with blocks nobody reads again). The rewrite needs every column, so
:func:`segment_chunks` fetches each object with one GET, checks it against the size and CRC32C in the
manifest, and decodes it from memory in chunks of whole row groups (about :data:`CHUNK_BYTES` of
records, :data:`DECODERS` at once), each checked against the footer's row-group index: a round holds at
most two objects (the next one's GET overlaps the current one's last decodes) and a few decoded chunks,
never a whole decoded segment. Damaged bytes raise CorruptData naming the object.

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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, cast

import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from s3stream.errors import CorruptData, S3StreamError
from s3stream.manifest.model import SegmentRef
from s3stream.objectstore.protocol import ByteRange
from s3stream.records import RECORD_SCHEMA
from s3stream.segment import RowGroupInfo, SegmentReader

if TYPE_CHECKING:
    from s3stream.runtime import Runtime

__all__ = ["CHUNK_BYTES", "prefetched", "read_ahead", "segment_chunks", "segment_keys", "segment_reader"]

#: Logical bytes of records per chunk of the rewrite (whole row groups; at least one).
CHUNK_BYTES = 8 << 20
#: Chunks of one object decoded concurrently by the rewrite.
DECODERS = 2

T = TypeVar("T")
A = TypeVar("A")
_END = object()
_DECODE_ERRORS = (pa.ArrowException, OSError, ValueError, TypeError, KeyError, IndexError, OverflowError,
                  EOFError, RuntimeError)


def segment_reader(rt: Runtime, seg: SegmentRef) -> SegmentReader:
    """A reader of ``seg`` of its own (not the store's shared cache), fetching by ranged GETs."""
    store, key = rt.objstore, seg.key
    return SegmentReader(lambda start, end: store.get(key, ByteRange(start, end)), seg.object_size, source=key,
                         block_bytes=max(rt.settings.read_ahead_bytes, 1 << 20))


def segment_keys(rt: Runtime, seg: SegmentRef, from_offset: int) -> pa.Table:
    """Columns ``offset`` and ``key`` of ``seg`` from ``from_offset`` (column projection: values are not read)."""
    reader = segment_reader(rt, seg)
    _check_range(reader, seg)
    delta = seg.offset_delta
    return _real_offsets(reader.read(max(seg.base_offset, from_offset) - delta, columns=["offset", "key"]), delta)


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


def segment_chunks(rt: Runtime, segments: Sequence[SegmentRef], *, chunk_bytes: int = CHUNK_BYTES,
                   decoders: int = DECODERS) -> Iterator[pa.Table]:
    """Every record of ``segments`` in offset order, as tables of whole row groups of ~``chunk_bytes``.

    Each object is fetched with one GET and must match the size and CRC32C the manifest recorded, so
    the bytes decoded are exactly the bytes the writer produced; the footer is validated by the segment
    reader and every chunk is checked against the footer's row-group index.

    ``decoders`` chunks of an object are decoded at once (pyarrow releases the GIL), and the next object
    is fetched while the current one's last chunks decode: at most two objects and ``decoders`` decoded
    chunks are held at any time.
    """
    if not segments:
        return
    with ThreadPoolExecutor(max_workers=decoders + 1, thread_name_prefix="s3stream-cleaner-decode") as pool:
        loading: Future[_Loaded] = pool.submit(_load, rt, segments[0])
        for i in range(len(segments)):
            obj = loading.result()
            spans = list(_batches(obj.groups, chunk_bytes))
            fetch_next = i + 1 < len(segments)
            if fetch_next and not spans:  # a segment cleaned down to nothing
                loading = pool.submit(_load, rt, segments[i + 1])
            window: deque[Future[pa.Table]] = deque()
            for j, (first, last) in enumerate(spans):
                if fetch_next and j == len(spans) - 1:
                    loading = pool.submit(_load, rt, segments[i + 1])  # the next GET overlaps the last decodes
                window.append(pool.submit(_decode, obj, first, last))
                if len(window) >= decoders:
                    yield window.popleft().result()
            while window:
                yield window.popleft().result()
            del obj  # before the object after next is fetched: at most two objects in memory


@dataclass(frozen=True, slots=True)
class _Loaded:
    """One fetched, CRC-checked segment object with its validated row-group index."""

    seg: SegmentRef
    data: bytes
    groups: list[RowGroupInfo]


def _load(rt: Runtime, seg: SegmentRef) -> _Loaded:
    data = rt.objstore.get(seg.key)
    if len(data) != seg.object_size or crc32c.crc32c(data) != seg.crc32c:
        raise CorruptData("segment object does not match the size and CRC32C of the manifest", source=seg.key)
    groups = _check_range(SegmentReader(_slicer(data), len(data), source=seg.key), seg)  # validated footer
    return _Loaded(seg, data, groups)


def _decode(obj: _Loaded, first: int, last: int) -> pa.Table:
    """Row groups ``first..last`` of ``obj`` decoded and checked (a ParquetFile per call: thread-safe)."""
    try:
        pf = pq.ParquetFile(pa.BufferReader(obj.data), pre_buffer=False)
        table = pf.read_row_groups(list(range(first, last + 1)), use_threads=False)
    except S3StreamError:
        raise
    except _DECODE_ERRORS as exc:
        raise CorruptData(f"cannot decode segment: {exc}", source=obj.seg.key) from exc
    return _real_offsets(_checked(table, obj.groups[first:last + 1], obj.seg.key), obj.seg.offset_delta)


def _slicer(data: bytes) -> Callable[[int, int], bytes]:
    def fetch(start: int, end: int) -> bytes:
        return data[start:end]

    return fetch


def _batches(groups: Sequence[RowGroupInfo], chunk_bytes: int) -> Iterator[tuple[int, int]]:
    """``(first, last)`` row-group indexes of consecutive runs of about ``chunk_bytes`` (at least one group)."""
    i = 0
    while i < len(groups):
        j, size = i, 0
        while j < len(groups) and (j == i or size + groups[j].size_bytes <= chunk_bytes):
            size += groups[j].size_bytes
            j += 1
        yield i, j - 1
        i = j


def _checked(table: pa.Table, groups: Sequence[RowGroupInfo], source: str) -> pa.Table:
    """``table`` must hold exactly the rows the footer index promises for ``groups``, in RECORD_SCHEMA."""
    table = table.replace_schema_metadata(None)
    offsets = np.asarray(table.column("offset").to_numpy(), dtype=np.int64)
    ok = (table.schema.equals(RECORD_SCHEMA) and table.num_rows == sum(g.num_rows for g in groups)
          and len(offsets) > 0 and int(offsets[0]) == groups[0].first_offset
          and int(offsets[-1]) == groups[-1].last_offset and bool(np.all(np.diff(offsets) > 0)))
    if not ok:
        raise CorruptData("row groups disagree with the footer index", source=source)
    return table


def prefetched(pool: ThreadPoolExecutor, fn: Callable[[A], T], items: Iterable[A], *, depth: int
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


def read_ahead(pool: ThreadPoolExecutor, items: Iterator[T]) -> Iterator[T]:
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
