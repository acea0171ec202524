"""Reading segment objects and WAL chunks by ranged GETs from an ObjectStore alone (no Store, no WAL).

This is how Spark tasks, the driver's planning and the distributed jobs touch data: open the object
store from the URL, then use the codecs (:class:`~s3stream.format.segment.SegmentReader`,
:func:`~s3stream.format.walobject.decode_chunk`) on byte ranges known from the manifest or the WAL index.

Offsets: a segment staged by a Spark write stores offsets ``0..n-1`` and its manifest entry says
``offset_delta``: real offset = stored offset + ``offset_delta``. Every function here takes and returns
*real* offsets; the delta is applied in one place. A segment whose footer disagrees with its manifest
entry (range, delta) is :class:`~s3stream.base.errors.CorruptData`, like any other damaged object.

Row groups are chosen from the footer index alone: only those overlapping the wanted offset range and,
when given, the timestamp range are fetched, in runs of about :data:`CHUNK_BYTES` of records.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from s3stream.base.errors import CorruptData
from s3stream.format.segment import RowGroupInfo, SegmentReader
from s3stream.format.walobject import WalChunkIndex, decode_chunk
from s3stream.objectstore.fetch import ranged_fetch
from s3stream.objectstore.protocol import ByteRange, ObjectStore

__all__ = ["CHUNK_BYTES", "SegmentSource", "chunk_table", "open_segment", "segment_tables", "time_filter"]

#: Logical record bytes fetched and decoded per step of a segment scan (whole row groups, at least one).
CHUNK_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class SegmentSource:
    """What a task needs to read one segment object (picklable; from a manifest ``SegmentRef``)."""

    key: str
    object_size: int
    base_offset: int  # real offsets, inclusive
    last_offset: int
    offset_delta: int = 0
    max_timestamp: int = -1
    record_count: int = 0
    size_bytes: int = 0


def open_segment(store: ObjectStore, src: SegmentSource, *, block_bytes: int = 1 << 20) -> SegmentReader:
    """A ranged reader of ``src``; checks that its footer matches the manifest entry (with the delta)."""
    key = src.key
    reader = SegmentReader(ranged_fetch(store, key), src.object_size, source=key,
                           block_bytes=block_bytes)
    footer = reader.footer
    delta = src.offset_delta
    if (footer.base_offset + delta, footer.last_offset + delta) != (src.base_offset, src.last_offset):
        raise CorruptData(f"segment footer covers [{footer.base_offset}, {footer.last_offset}] + delta {delta}, "
                          f"the manifest says [{src.base_offset}, {src.last_offset}]", source=key)
    return reader


def _wanted(g: RowGroupInfo, lo: int, hi: int, min_ts: int | None, max_ts: int | None) -> bool:
    return (g.last_offset >= lo and g.first_offset < hi and (min_ts is None or g.max_timestamp >= min_ts)
            and (max_ts is None or g.min_timestamp <= max_ts))


def _runs(groups: Sequence[RowGroupInfo], keep: Sequence[bool], chunk_bytes: int) -> list[list[RowGroupInfo]]:
    """Consecutive wanted row groups, cut into runs of about ``chunk_bytes`` (at least one group)."""
    runs: list[list[RowGroupInfo]] = []
    size = 0
    prev = -2
    for i, g in enumerate(groups):
        if not keep[i]:
            continue
        if runs and prev == i - 1 and size < chunk_bytes:
            runs[-1].append(g)
            size += g.size_bytes
        else:
            runs.append([g])
            size = g.size_bytes
        prev = i
    return runs


def segment_tables(store: ObjectStore, src: SegmentSource, start: int, end: int, *, min_ts: int | None = None,
                   max_ts: int | None = None, columns: Sequence[str] | None = None,
                   chunk_bytes: int = CHUNK_BYTES, reader: SegmentReader | None = None) -> Iterator[pa.Table]:
    """Rows of ``src`` with real offsets in ``[start, end)``, in offset order, as tables of whole row groups.

    Row groups outside the offset range or (when given) the inclusive timestamp range are not fetched;
    rows of the fetched groups are not filtered by timestamp here (see :func:`time_filter`).
    """
    delta = src.offset_delta
    lo, hi = start - delta, end - delta  # stored offsets
    if lo >= hi:
        return
    reader = reader or open_segment(store, src)
    groups = reader.row_groups
    keep = [_wanted(g, lo, hi, min_ts, max_ts) for g in groups]
    cols = None if columns is None else ["offset", *(c for c in columns if c != "offset")]
    for run in _runs(groups, keep, chunk_bytes):
        first = max(lo, run[0].first_offset)
        table = reader.read(first, max_records=sum(g.num_rows for g in run), columns=cols)
        offsets = table.column("offset")
        table = table.filter(pc.and_(pc.less_equal(offsets, min(run[-1].last_offset, hi - 1)),
                                     pc.greater_equal(offsets, lo)))
        if delta:
            shifted = pc.add(table.column("offset"), pa.scalar(delta, pa.int64()))
            table = table.set_column(table.schema.get_field_index("offset"), table.schema.field("offset"), shifted)
        if table.num_rows:
            yield table


def chunk_table(store: ObjectStore, key: str, chunk: WalChunkIndex, start: int, end: int) -> pa.Table:
    """Rows of one WAL-object chunk with offsets in ``[start, end)`` (one ranged GET, CRC-checked)."""
    data = store.get(key, ByteRange(chunk.byte_start, chunk.byte_end))
    batch = decode_chunk(data, chunk, source=key)
    table = pa.Table.from_batches([batch])
    offsets = table.column("offset")
    if chunk.base_offset >= start and chunk.last_offset < end:
        return table
    return table.filter(pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end)))


def time_filter(table: pa.Table, min_ts: int | None, max_ts: int | None) -> pa.Table:
    """Rows whose timestamp lies in the inclusive range (a bound of None is open)."""
    if table.num_rows == 0 or (min_ts is None and max_ts is None):
        return table
    ts = table.column("timestamp")
    masks = []
    if min_ts is not None:
        masks.append(pc.greater_equal(ts, pa.scalar(min_ts, pa.int64())))
    if max_ts is not None:
        masks.append(pc.less_equal(ts, pa.scalar(max_ts, pa.int64())))
    mask = masks[0] if len(masks) == 1 else pc.and_(masks[0], masks[1])
    return table.filter(mask)
