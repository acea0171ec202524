"""How the cleaner reads segments: dedicated ranged readers, bounded chunks, and one step of read-ahead.

A cleaning round scans whole segments once or twice (keys for the offset map, then every column for the
rewrite). Scanning through the store's shared reader cache would fill it with blocks nobody reads again,
so each scan uses its own :class:`~s3stream.segment.SegmentReader`, dropped when the segment is done.
The rewrite reads a segment in chunks of whole row groups (about :data:`CHUNK_BYTES` of records), so a
round holds a few chunks in memory, never a whole segment object plus its decoded copy. Every read goes
through the segment reader's checks (footer CRC32C, page checksums, row-group index): damaged bytes
raise CorruptData naming the object.

:func:`read_ahead` overlaps I/O and decoding with the caller's work: while the caller processes item i,
one worker thread produces item i+1 (pyarrow releases the GIL while decoding), so memory grows by one
item at most.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar, cast

import pyarrow as pa

from s3stream.manifest.model import SegmentRef
from s3stream.objectstore.protocol import ByteRange
from s3stream.segment import SegmentReader

if TYPE_CHECKING:
    from s3stream.runtime import Runtime

__all__ = ["CHUNK_BYTES", "read_ahead", "segment_chunks", "segment_keys", "segment_reader"]

#: Logical bytes of records per chunk of the rewrite (whole row groups; at least one).
CHUNK_BYTES = 8 << 20

T = TypeVar("T")


def segment_reader(rt: Runtime, seg: SegmentRef) -> SegmentReader:
    """A reader of ``seg`` of its own (not the store's shared cache), fetching by ranged GETs."""
    store, key = rt.objstore, seg.key
    return SegmentReader(lambda start, end: store.get(key, ByteRange(start, end)), seg.object_size, source=key,
                         block_bytes=max(rt.settings.read_ahead_bytes, 1 << 20))


def segment_keys(rt: Runtime, seg: SegmentRef, from_offset: int) -> pa.Table:
    """Columns ``offset`` and ``key`` of ``seg`` from ``from_offset`` (column projection: values are not read)."""
    return segment_reader(rt, seg).read(max(seg.base_offset, from_offset), columns=["offset", "key"])


def segment_chunks(rt: Runtime, segments: Sequence[SegmentRef], *, chunk_bytes: int = CHUNK_BYTES
                   ) -> Iterator[pa.Table]:
    """Every record of ``segments`` in offset order, as tables of whole row groups of ~``chunk_bytes``."""
    for seg in segments:
        reader = segment_reader(rt, seg)
        groups = reader.row_groups
        i = 0
        while i < len(groups):
            j, rows, size = i, 0, 0
            while j < len(groups) and (j == i or size < chunk_bytes):
                rows += groups[j].num_rows
                size += groups[j].size_bytes
                j += 1
            yield reader.read(groups[i].first_offset, max_records=rows)
            i = j


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
