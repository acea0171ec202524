"""The segment object format: one partition's sealed records as a Parquet file (both directions).

A segment object is a plain Parquet file of :data:`s3stream.records.RECORD_SCHEMA` that Spark, DuckDB or
pyarrow read as is. s3stream adds only conventions on top of Parquet:

* **Row groups are sized by logical bytes** (``row_group_bytes`` of :func:`s3stream.records.batch_nbytes`
  worth of records, one record minimum), so reading one offset fetches about one row group.
* **Page checksums** (Parquet's CRC32 per page) are always written; readers verify them. They cover every
  data page, hence every key, value and header byte.
* **A footer checksum**: ``s3stream.footer_crc32c`` holds ten ASCII digits, the CRC32C of the whole Thrift
  footer computed with those digits as ``0000000000``; the writer patches them in place after writing.
  Readers check it (:func:`verify_footer`) before the Parquet library parses the footer, because a damaged
  footer can abort the process inside it.
* **Footer key-value metadata** (``s3stream.*`` keys, see :data:`META_KEYS`) carries the segment's offset
  range, counts, timestamps and a compact per-row-group index ``[first_offset, last_offset,
  min_timestamp, max_timestamp, num_rows, size_bytes]``. The offset index and the time index therefore come
  from the footer alone; the row groups' byte ranges come from Parquet's own column-chunk metadata.

Invariants (checked before writing by :func:`encode_segment` and again after reading by
:func:`parse_footer`): offsets strictly increase and lie in ``[base_offset, last_offset]``; row groups are
contiguous byte ranges from byte 4 up to the footer, in offset order, and their row counts and sizes add
up to the segment totals. Zero rows is a valid segment (compaction can empty a range; the range is kept).

Vocabulary: ``size_bytes`` is logical record bytes (what ``segment.bytes`` counts); ``object_size`` is the
length of the encoded object. Everything here is sans-IO: bytes in, values out.
"""

from __future__ import annotations

import io
import itertools
import json
import re
from dataclasses import dataclass

import crc32c
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from s3stream.errors import CorruptData, InternalError
from s3stream.records import RECORD_SCHEMA

__all__ = [
    "META_KEYS",
    "SEGMENT_FORMAT_VERSION",
    "RowGroupInfo",
    "SegmentFooter",
    "SegmentSummary",
    "encode_segment",
    "parse_footer",
    "row_sizes",
    "verify_footer",
]

SEGMENT_FORMAT_VERSION = 1

_PREFIX = "s3stream."
_KEY_FORMAT = "s3stream.format"
_KEY_ROW_GROUPS = "s3stream.row_groups"
_KEY_CRC = "s3stream.footer_crc32c"
_INT_KEYS = ("base_offset", "last_offset", "record_count", "size_bytes", "min_timestamp", "max_timestamp",
             "first_batch_max_timestamp")
#: Every ``s3stream.*`` footer key.
META_KEYS = (_KEY_FORMAT, *(_PREFIX + k for k in _INT_KEYS), _KEY_ROW_GROUPS, _KEY_CRC)
_CRC_PLACEHOLDER = b"0" * 10
# The footer CRC entry as Thrift compact protocol encodes a KeyValue: field 1 (binary) = key,
# field 2 (binary, length 10) = ten ASCII digits. The writer patches the digits in place.
_CRC_ENTRY = b"\x18" + bytes([len(_KEY_CRC)]) + _KEY_CRC.encode() + b"\x18\x0a"
_INT_RE = re.compile(r"-?[0-9]{1,19}")
_PARQUET_MAGIC = b"PAR1"
_DELTA = "DELTA_BINARY_PACKED"


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """What the writer records in the manifest about an encoded segment."""

    base_offset: int
    last_offset: int
    record_count: int
    size_bytes: int  #: logical bytes (records.batch_nbytes over all rows)
    object_size: int  #: len(encoded bytes)
    max_timestamp: int  #: -1 when there are no records
    min_timestamp: int  #: -1 when there are no records
    first_batch_max_timestamp: int  #: rule S2, given by the caller; -1 if unknown
    crc32c: int  #: CRC32C of the whole object


@dataclass(frozen=True, slots=True)
class RowGroupInfo:
    """One row group as the footer index describes it; ``[byte_start, byte_end)`` in the object."""

    first_offset: int
    last_offset: int
    min_timestamp: int
    max_timestamp: int
    num_rows: int
    byte_start: int
    byte_end: int
    size_bytes: int  #: logical bytes of its records


@dataclass(frozen=True, slots=True)
class SegmentFooter:
    """The validated footer: segment totals plus the offset/time index."""

    base_offset: int
    last_offset: int
    record_count: int
    size_bytes: int
    min_timestamp: int
    max_timestamp: int
    first_batch_max_timestamp: int
    row_groups: tuple[RowGroupInfo, ...]


# ----------------------------------------------------------------------------------------------- encoding


def row_sizes(data: pa.Table | pa.RecordBatch) -> npt.NDArray[np.int64]:
    """Per-row logical sizes (their sum is :func:`records.batch_nbytes`), computed column-wise."""
    chunks = [_batch_row_sizes(b) for b in _batches(data)]
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)


def _batches(data: pa.Table | pa.RecordBatch) -> list[pa.RecordBatch]:
    return [data] if isinstance(data, pa.RecordBatch) else data.to_batches()


def _lengths(col: pa.Array) -> npt.NDArray[np.int64]:
    return np.asarray(pc.fill_null(pc.binary_length(col), 0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _batch_row_sizes(batch: pa.RecordBatch) -> npt.NDArray[np.int64]:
    n = batch.num_rows
    sizes = np.full(n, 21, dtype=np.int64) + _lengths(batch.column("key")) + _lengths(batch.column("value"))
    headers = batch.column("headers")
    if n and headers.null_count != n:
        flat = headers.flatten()
        if len(flat):
            entry = _lengths(flat.field("key")) + _lengths(flat.field("value")) + 8
            parents = np.asarray(pc.list_parent_indices(headers).to_numpy(), dtype=np.int64)
            sizes += np.bincount(parents, weights=entry, minlength=n).astype(np.int64)
    return sizes


def _as_table(data: pa.Table | pa.RecordBatch) -> pa.Table:
    table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
    if not table.schema.equals(RECORD_SCHEMA):
        raise InternalError(f"segment data must have RECORD_SCHEMA, got {table.schema}")
    return table


def _check_offsets(offsets: npt.NDArray[np.int64], base_offset: int, last_offset: int) -> None:
    if base_offset < 0 or last_offset < base_offset:
        raise InternalError(f"invalid segment range [{base_offset}, {last_offset}]")
    if len(offsets) == 0:
        return
    if offsets[0] < base_offset or offsets[-1] > last_offset:
        raise InternalError(f"offsets [{offsets[0]}, {offsets[-1]}] outside [{base_offset}, {last_offset}]")
    if len(offsets) > 1 and not bool(np.all(np.diff(offsets) > 0)):
        raise InternalError("segment offsets must be strictly increasing")


def _group_starts(sizes: npt.NDArray[np.int64], row_group_bytes: int) -> npt.NDArray[np.int64]:
    """Row indices where row groups start: a new group when the bytes before a row cross a boundary."""
    if len(sizes) == 0:
        return np.zeros(0, dtype=np.int64)
    before = np.cumsum(sizes) - sizes
    gid = before // max(1, row_group_bytes)
    return np.concatenate([[0], np.flatnonzero(np.diff(gid)) + 1]).astype(np.int64)


def _index_rows(offsets: npt.NDArray[np.int64], ts: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64],
                starts: npt.NDArray[np.int64]) -> list[list[int]]:
    if len(starts) == 0:
        return []
    ends = np.append(starts[1:], len(offsets))
    cols = (offsets[starts], offsets[ends - 1], np.minimum.reduceat(ts, starts),
            np.maximum.reduceat(ts, starts), ends - starts, np.add.reduceat(sizes, starts))
    return [list(row) for row in zip(*(c.tolist() for c in cols), strict=True)]


def encode_segment(data: pa.Table | pa.RecordBatch, *, base_offset: int, last_offset: int,
                   first_batch_max_timestamp: int = -1, row_group_bytes: int = 1 << 20,
                   compression: str = "zstd") -> tuple[bytes, SegmentSummary]:
    """Encode records as a segment object; validates before writing.

    Raises:
        InternalError: wrong schema, offsets not strictly increasing or outside ``[base, last]``.
    """
    table = _as_table(data)
    offsets = np.asarray(table.column("offset").to_numpy(), dtype=np.int64)
    ts = np.asarray(table.column("timestamp").to_numpy(), dtype=np.int64)
    _check_offsets(offsets, base_offset, last_offset)
    if first_batch_max_timestamp < -1:
        raise InternalError(f"first_batch_max_timestamp must be >= -1, got {first_batch_max_timestamp}")
    sizes = row_sizes(table)
    starts = _group_starts(sizes, row_group_bytes)
    n = len(offsets)
    meta = {
        _KEY_FORMAT: str(SEGMENT_FORMAT_VERSION),
        _PREFIX + "base_offset": str(base_offset), _PREFIX + "last_offset": str(last_offset),
        _PREFIX + "record_count": str(n), _PREFIX + "size_bytes": str(int(sizes.sum())),
        _PREFIX + "min_timestamp": str(int(ts.min()) if n else -1),
        _PREFIX + "max_timestamp": str(int(ts.max()) if n else -1),
        _PREFIX + "first_batch_max_timestamp": str(first_batch_max_timestamp),
        _KEY_ROW_GROUPS: json.dumps(_index_rows(offsets, ts, sizes, starts), separators=(",", ":")),
    }
    meta[_KEY_CRC] = _CRC_PLACEHOLDER.decode()
    encoded = _seal_footer(_write_parquet(table, starts, meta, compression))
    summary = SegmentSummary(base_offset, last_offset, n, int(sizes.sum()), len(encoded),
                             int(meta[_PREFIX + "max_timestamp"]), int(meta[_PREFIX + "min_timestamp"]),
                             first_batch_max_timestamp, crc32c.crc32c(encoded))
    return encoded, summary


def _write_parquet(table: pa.Table, starts: npt.NDArray[np.int64], meta: dict[str, str],
                   compression: str) -> bytes:
    sink = io.BytesIO()
    writer = pq.ParquetWriter(
        sink, RECORD_SCHEMA, compression=compression, use_dictionary=False, write_page_checksum=True,
        write_statistics=["offset", "timestamp", "horizon_ms"],
        column_encoding={"offset": _DELTA, "timestamp": _DELTA, "horizon_ms": _DELTA})
    try:
        bounds = [*starts.tolist(), table.num_rows]
        for start, end in itertools.pairwise(bounds):
            writer.write_table(table.slice(start, end - start), row_group_size=end - start)
        writer.add_key_value_metadata(meta)
    finally:
        writer.close()
    return sink.getvalue()


def _seal_footer(encoded: bytes) -> bytes:
    """Patch the CRC32C of the Thrift footer (computed with the placeholder digits) into the footer."""
    out = bytearray(encoded)
    footer_len = int.from_bytes(out[-8:-4], "little")
    footer_start = len(out) - 8 - footer_len
    footer = bytes(out[footer_start:-8])
    at = footer.find(_CRC_ENTRY + _CRC_PLACEHOLDER)
    if at < 0 or footer.count(_CRC_ENTRY) != 1:
        raise InternalError("cannot locate the footer CRC entry in the Parquet footer")
    digits = footer_start + at + len(_CRC_ENTRY)
    out[digits: digits + 10] = b"%010d" % crc32c.crc32c(footer)
    return bytes(out)


def verify_footer(footer: bytes, *, source: str) -> None:
    """Check the footer CRC32C before any Parquet library parses the footer.

    ``footer`` is the Thrift ``FileMetaData`` bytes (between the column chunks and the trailing
    length + ``PAR1``). Parsing a damaged footer can abort the process inside the Parquet library, so
    this runs first.

    Raises:
        CorruptData: the CRC entry is missing, malformed or does not match.
    """
    at = footer.find(_CRC_ENTRY)
    if at < 0 or footer.count(_CRC_ENTRY) != 1:
        raise CorruptData("segment footer has no s3stream CRC entry", source=source)
    digits = at + len(_CRC_ENTRY)
    stored = footer[digits: digits + 10]
    if len(stored) != 10 or not stored.isdigit():
        raise CorruptData("segment footer CRC entry is malformed", source=source)
    if crc32c.crc32c(footer[:digits] + _CRC_PLACEHOLDER + footer[digits + 10:]) != int(stored):
        raise CorruptData("segment footer CRC32C mismatch", source=source)


# ----------------------------------------------------------------------------------------------- decoding


def parse_footer(metadata: pq.FileMetaData, arrow_schema: pa.Schema, object_size: int, *,
                 source: str) -> SegmentFooter:
    """Validate a segment's Parquet footer and build its offset/time index from it alone.

    Raises:
        CorruptData: unknown version, metadata CRC mismatch, or any inconsistency between the
            ``s3stream.*`` index, Parquet's row-group metadata and ``object_size``.
    """
    meta = _kv(metadata, source)
    version = meta.get(_KEY_FORMAT)
    if version != str(SEGMENT_FORMAT_VERSION):
        raise CorruptData(f"unsupported segment format version {version!r}", source=source)
    if any(k not in meta for k in META_KEYS):
        raise CorruptData("segment footer metadata is incomplete", source=source)
    if not arrow_schema.equals(RECORD_SCHEMA):
        raise CorruptData(f"segment schema is not RECORD_SCHEMA: {arrow_schema}", source=source)
    ints = {k: _parse_int(meta[_PREFIX + k], k, source) for k in _INT_KEYS}
    groups = _row_groups(meta[_KEY_ROW_GROUPS], metadata, object_size, source)
    footer = SegmentFooter(ints["base_offset"], ints["last_offset"], ints["record_count"],
                           ints["size_bytes"], ints["min_timestamp"], ints["max_timestamp"],
                           ints["first_batch_max_timestamp"], groups)
    _check_footer(footer, metadata, source)
    return footer


def _kv(metadata: pq.FileMetaData, source: str) -> dict[str, str]:
    try:
        raw = metadata.metadata or {}
        return {k.decode(): v.decode() for k, v in raw.items() if k.startswith(_PREFIX.encode())}
    except UnicodeDecodeError as e:
        raise CorruptData("segment footer metadata is not UTF-8", source=source) from e


def _parse_int(text: str, what: str, source: str) -> int:
    if not _INT_RE.fullmatch(text):
        raise CorruptData(f"segment footer {what} is not an integer: {text[:40]!r}", source=source)
    return int(text)


def _row_groups(text: str, metadata: pq.FileMetaData, object_size: int,
                source: str) -> tuple[RowGroupInfo, ...]:
    try:
        rows = json.loads(text)
    except ValueError as e:
        raise CorruptData("segment row-group index is not JSON", source=source) from e
    ok = isinstance(rows, list) and all(
        isinstance(r, list) and len(r) == 6 and all(type(x) is int for x in r) for r in rows)
    if not ok or len(rows) != metadata.num_row_groups:
        raise CorruptData("segment row-group index does not match the Parquet row groups", source=source)
    footer_start = object_size - 8 - metadata.serialized_size
    out: list[RowGroupInfo] = []
    expected_start = len(_PARQUET_MAGIC)
    for i, (first, last, min_ts, max_ts, num_rows, size_bytes) in enumerate(rows):
        start, end = _byte_range(metadata.row_group(i))
        if start != expected_start or end > footer_start or metadata.row_group(i).num_rows != num_rows:
            raise CorruptData(f"row group {i} byte range or row count is inconsistent", source=source)
        expected_start = end
        out.append(RowGroupInfo(first, last, min_ts, max_ts, num_rows, start, end, size_bytes))
    if expected_start != footer_start:
        raise CorruptData(f"object size {object_size} does not match the footer", source=source)
    return tuple(out)


def _byte_range(rg: pq.RowGroupMetaData) -> tuple[int, int]:
    starts: list[int] = []
    ends: list[int] = []
    for c in range(rg.num_columns):
        col = rg.column(c)
        start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
        starts.append(int(start))
        ends.append(int(start) + int(col.total_compressed_size))
    return (min(starts), max(ends)) if starts else (0, 0)


def _check_footer(f: SegmentFooter, metadata: pq.FileMetaData, source: str) -> None:
    groups = f.row_groups
    problems = [
        f.base_offset < 0 or f.last_offset < f.base_offset,
        f.record_count != metadata.num_rows or f.record_count != sum(g.num_rows for g in groups),
        f.size_bytes != sum(g.size_bytes for g in groups),
        f.first_batch_max_timestamp < -1,
    ]
    prev_last = f.base_offset - 1
    for g in groups:
        problems.append(not (prev_last < g.first_offset <= g.last_offset <= f.last_offset))
        problems.append(g.num_rows < 1 or g.num_rows > g.last_offset - g.first_offset + 1)
        problems.append(g.min_timestamp > g.max_timestamp or g.size_bytes < 21 * g.num_rows)
        prev_last = g.last_offset
    if groups:
        problems.append(f.min_timestamp != min(g.min_timestamp for g in groups))
        problems.append(f.max_timestamp != max(g.max_timestamp for g in groups))
    else:
        problems.append(f.min_timestamp != -1 or f.max_timestamp != -1)
    if any(problems):
        raise CorruptData("segment footer index is inconsistent", source=source)
    for i, g in enumerate(groups):
        stats = metadata.row_group(i).column(0).statistics
        if stats is not None and stats.has_min_max and (stats.min, stats.max) != (g.first_offset,
                                                                                 g.last_offset):
            raise CorruptData(f"row group {i} offset statistics disagree with the index", source=source)
