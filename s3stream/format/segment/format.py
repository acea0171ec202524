"""The segment object format: one partition's sealed records as a Parquet file (both directions).

A segment object is a plain Parquet file of :data:`s3stream.base.records.RECORD_SCHEMA` that Spark, DuckDB or
pyarrow read as is. s3stream adds only conventions on top of Parquet:

* **Row groups are sized by logical bytes** (``row_group_bytes`` of :func:`s3stream.base.records.batch_nbytes`
  worth of records, one record minimum), so reading one offset fetches about one row group.
* **Page checksums** (Parquet's CRC32 per page) are always written; readers of column subsets verify them.
  They cover every data page, hence every key, value and header byte. Readers of whole row groups check
  the row group's CRC32C from the index instead (it also covers the page headers).
* **A footer checksum**: ``s3stream.footer_crc32c`` holds ten ASCII digits, the CRC32C of the whole Thrift
  footer computed with those digits as ``0000000000``; the writer patches them in place after writing.
  Readers check it (:func:`verify_footer`) before the Parquet library parses the footer, because a damaged
  footer can abort the process inside it.
* **Footer key-value metadata** (``s3stream.*`` keys, see :data:`META_KEYS`) carries the segment's offset
  range, counts, timestamps and a compact per-row-group index ``[first_offset, last_offset,
  min_timestamp, max_timestamp, num_rows, size_bytes, unkeyed, tombstones, crc32c]``: ``unkeyed`` and
  ``tombstones`` count records without a key and without a value, ``crc32c`` covers the row group's bytes
  (so a reader fetching whole row groups verifies them at memory speed instead of page by page). Format
  version 1, before these three existed, has the first six entries and is still read (them as unknown).
  The offset index and the time index therefore come from the footer alone, and so does knowing that the
  cleaner drops every record of a row group (it then never fetches it); the row groups' byte ranges come
  from Parquet's own column-chunk metadata.

Encoding is incremental (:class:`SegmentWriter`: tables in, bytes out as row groups complete, so a seal
never holds a whole segment); :func:`encode_segment` is the one-table form over the same writer.

Invariants (checked before writing by :class:`SegmentWriter` and again after reading by
:func:`parse_footer`): offsets strictly increase and lie in ``[base_offset, last_offset]``; row groups are
contiguous byte ranges from byte 4 up to the footer, in offset order, and their row counts and sizes add
up to the segment totals. Zero rows is a valid segment (compaction can empty a range; the range is kept).

Vocabulary: ``size_bytes`` is logical record bytes (what ``segment.bytes`` counts); ``object_size`` is the
length of the encoded object. Everything here is sans-IO: bytes in, values out.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import crc32c
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from s3stream.base.errors import CorruptData, InternalError
from s3stream.base.records import RECORD_SCHEMA
from s3stream.format.segment.codec import INTEGER_COLUMNS, column_codecs

__all__ = [
    "META_KEYS",
    "SEGMENT_FORMAT_VERSION",
    "RowGroupInfo",
    "SegmentFooter",
    "SegmentSummary",
    "SegmentWriter",
    "encode_segment",
    "parse_footer",
    "row_sizes",
    "verify_footer",
]

SEGMENT_FORMAT_VERSION = 2
#: Entries per row group in the footer index, by format version (2 added null counts and a CRC32C).
_INDEX_WIDTH = {1: 6, 2: 9}

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
    unkeyed: int | None = None  #: records with a null key (None: format 1, whose index did not count them)
    tombstones: int | None = None  #: records with a null value (None: format 1)
    crc32c: int | None = None  #: CRC32C of the bytes ``[byte_start, byte_end)`` (None: format 1)


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
    version: int = SEGMENT_FORMAT_VERSION  #: the format version the object was written in


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


def _check_range(base_offset: int, last_offset: int, first_batch_max_timestamp: int) -> None:
    if base_offset < 0 or last_offset < base_offset:
        raise InternalError(f"invalid segment range [{base_offset}, {last_offset}]")
    if first_batch_max_timestamp < -1:
        raise InternalError(f"first_batch_max_timestamp must be >= -1, got {first_batch_max_timestamp}")


def _check_offsets(offsets: npt.NDArray[np.int64], after: int, last_offset: int) -> None:
    """Offsets strictly increase, all above ``after`` (the previous write's last, or base - 1) and <= last."""
    if len(offsets) == 0:
        return
    if offsets[0] <= after or offsets[-1] > last_offset:
        raise InternalError(f"offsets [{offsets[0]}, {offsets[-1]}] not within ({after}, {last_offset}]")
    if len(offsets) > 1 and not bool(np.all(np.diff(offsets) > 0)):
        raise InternalError("segment offsets must be strictly increasing")


class _Tap:
    """The file object the Parquet writer writes to: keeps bytes until :class:`SegmentWriter` takes them."""

    def __init__(self) -> None:
        self.pending: list[bytes] = []
        self.position = 0
        self.closed = False

    def write(self, data: bytes | memoryview) -> int:
        chunk = bytes(data)  # the writer may reuse its buffer after the call
        self.pending.append(chunk)
        self.position += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self.position

    def flush(self) -> None:
        pass

    def writable(self) -> bool:
        return True

    def take(self) -> list[bytes]:
        pieces, self.pending = self.pending, []
        return pieces


@dataclass(slots=True)
class _Group:
    """The row group being built: the caller's table slices (references) and running index stats."""

    gid: int
    tables: list[pa.Table]
    first: int
    last: int
    min_ts: int
    max_ts: int
    rows: int
    size: int
    unkeyed: int
    tombstones: int


class SegmentWriter:
    """Encodes one segment incrementally: tables in offset order in, object bytes out as row groups complete.

    The bytes :func:`encode_segment` would produce for the concatenation of the written tables go to
    ``sink`` in order: each finished row group at once, the footer (with its CRC patched) on
    :meth:`finish`. Memory is the row group being built (slices of the caller's tables) plus the Parquet
    writer's buffers for it, whatever the segment's size, so a seal streams a 1 GiB segment in small pieces.
    Row groups are cut by logical bytes exactly as for a single table; validation (schema, offsets strictly
    increasing within ``[base_offset, last_offset]``) holds across writes and happens before any byte of
    the offending table is encoded. Not thread-safe; after an error, discard the writer.
    """

    def __init__(self, sink: Callable[[bytes], object], *, base_offset: int, last_offset: int,
                 first_batch_max_timestamp: int = -1, row_group_bytes: int = 1 << 20,
                 compression: str = "zstd") -> None:
        _check_range(base_offset, last_offset, first_batch_max_timestamp)
        self._sink = sink
        self._base, self._last, self._first_batch_max_ts = base_offset, last_offset, first_batch_max_timestamp
        self._rgb = max(1, row_group_bytes)
        self._prev = base_offset - 1  # the last offset written so far
        self._rows = 0
        self._bytes = 0  # logical bytes of every row written
        self._min_ts: int | None = None
        self._max_ts: int | None = None
        self._index: list[list[int]] = []
        self._group: _Group | None = None
        self._emitted = 0
        self._crc = 0
        self._done = False
        self._tap = _Tap()
        self._compression = compression
        self._writer: pq.ParquetWriter | None = None  # made for the first row group (it picks the codecs)

    @property
    def bytes_emitted(self) -> int:
        """Object bytes handed to the sink so far."""
        return self._emitted

    def write(self, data: pa.Table | pa.RecordBatch) -> None:
        """Add records (offsets above every earlier write's); completed row groups go to the sink.

        Raises:
            InternalError: wrong schema, offsets not strictly increasing or outside ``[base, last]``,
                or the writer is finished.
        """
        if self._done:
            raise InternalError("SegmentWriter.write after finish")
        table = _as_table(data)
        n = table.num_rows
        if n == 0:
            return
        offsets = np.asarray(table.column("offset").to_numpy(), dtype=np.int64)
        _check_offsets(offsets, self._prev, self._last)
        ts = np.asarray(table.column("timestamp").to_numpy(), dtype=np.int64)
        sizes = row_sizes(table)
        # a new group starts where the logical bytes before a row cross a multiple of row_group_bytes
        gid = (self._bytes + np.cumsum(sizes) - sizes) // self._rgb
        cuts = [0, *(np.flatnonzero(np.diff(gid)) + 1).tolist(), n]
        for start, end in itertools.pairwise(cuts):
            g = int(gid[start])
            if self._group is not None and self._group.gid != g:
                self._emit_group()
            piece = table.slice(start, end - start)
            t_min, t_max = int(ts[start:end].min()), int(ts[start:end].max())
            size = int(sizes[start:end].sum())
            unkeyed, tombstones = piece.column("key").null_count, piece.column("value").null_count
            cur = self._group
            if cur is None:
                self._group = _Group(g, [piece], int(offsets[start]), int(offsets[end - 1]), t_min, t_max,
                                     end - start, size, unkeyed, tombstones)
            else:
                cur.tables.append(piece)
                cur.last = int(offsets[end - 1])
                cur.min_ts, cur.max_ts = min(cur.min_ts, t_min), max(cur.max_ts, t_max)
                cur.rows += end - start
                cur.size += size
                cur.unkeyed += unkeyed
                cur.tombstones += tombstones
        self._prev = int(offsets[-1])
        self._rows += n
        self._bytes += int(sizes.sum())
        lo, hi = int(ts.min()), int(ts.max())
        self._min_ts = lo if self._min_ts is None else min(self._min_ts, lo)
        self._max_ts = hi if self._max_ts is None else max(self._max_ts, hi)

    def _open(self, first_group: pa.Table | None) -> pq.ParquetWriter:
        """The Parquet writer, its codecs chosen on the first row group (:mod:`s3stream.format.segment.codec`)."""
        return pq.ParquetWriter(
            self._tap, RECORD_SCHEMA, compression=column_codecs(self._compression, first_group),
            use_dictionary=False, write_page_checksum=True, write_statistics=list(INTEGER_COLUMNS),
            column_encoding=dict.fromkeys(INTEGER_COLUMNS, _DELTA))

    def _emit_group(self) -> None:
        g = self._group
        assert g is not None
        self._group = None
        table = g.tables[0] if len(g.tables) == 1 else pa.concat_tables(g.tables)
        if table.num_rows and table.column(0).num_chunks > 1:
            # one batch per group: the writer's per-batch work for pieces of a few rows (the survivors of a
            # compaction) cost more than copying them together (measured: 2.8 -> 1.9 ms/MiB encoded)
            table = table.combine_chunks()
        if self._writer is None:
            self._writer = self._open(table)
        self._writer.write_table(table, row_group_size=g.rows)
        group_crc = 0
        for piece in self._tap.take():  # piece by piece: the row group is never copied whole
            skip = max(0, len(_PARQUET_MAGIC) - self._emitted)  # the file's leading magic is no group's
            group_crc = crc32c.crc32c(memoryview(piece)[skip:], group_crc)
            self._emit(piece)
        # the Parquet writer has flushed every column chunk of the group: its bytes end here
        self._index.append([g.first, g.last, g.min_ts, g.max_ts, g.rows, g.size, g.unkeyed, g.tombstones, group_crc])

    def _emit(self, data: bytes) -> None:
        if data:
            self._crc = crc32c.crc32c(data, self._crc)
            self._emitted += len(data)
            self._sink(data)

    def finish(self) -> SegmentSummary:
        """Write the last row group and the footer (metadata, then its CRC patched in); the totals."""
        if self._done:
            raise InternalError("SegmentWriter.finish called twice")
        self._done = True
        if self._group is not None:
            self._emit_group()
        min_ts = -1 if self._min_ts is None else self._min_ts
        max_ts = -1 if self._max_ts is None else self._max_ts
        meta = {
            _KEY_FORMAT: str(SEGMENT_FORMAT_VERSION),
            _PREFIX + "base_offset": str(self._base), _PREFIX + "last_offset": str(self._last),
            _PREFIX + "record_count": str(self._rows), _PREFIX + "size_bytes": str(self._bytes),
            _PREFIX + "min_timestamp": str(min_ts), _PREFIX + "max_timestamp": str(max_ts),
            _PREFIX + "first_batch_max_timestamp": str(self._first_batch_max_ts),
            _KEY_ROW_GROUPS: _index_json(self._index),
            _KEY_CRC: _CRC_PLACEHOLDER.decode(),
        }
        writer = self._writer if self._writer is not None else self._open(None)
        writer.add_key_value_metadata(meta)
        writer.close()
        tail = bytearray(b"".join(self._tap.take()))  # written by close(): the footer (and little else)
        _patch_footer_crc(tail)
        self._emit(bytes(tail))
        return SegmentSummary(self._base, self._last, self._rows, self._bytes, self._emitted, max_ts, min_ts,
                              self._first_batch_max_ts, self._crc)


def _index_json(rows: list[list[int]]) -> str:
    """The footer's row-group index (a function of its own so corruption tests can make it lie)."""
    return json.dumps(rows, separators=(",", ":"))


def encode_segment(data: pa.Table | pa.RecordBatch, *, base_offset: int, last_offset: int,
                   first_batch_max_timestamp: int = -1, row_group_bytes: int = 1 << 20,
                   compression: str = "zstd") -> tuple[bytes, SegmentSummary]:
    """Encode records as a segment object in memory (one :class:`SegmentWriter` write); validates first.

    Raises:
        InternalError: wrong schema, offsets not strictly increasing or outside ``[base, last]``.
    """
    out: list[bytes] = []
    writer = SegmentWriter(out.append, base_offset=base_offset, last_offset=last_offset,
                           first_batch_max_timestamp=first_batch_max_timestamp, row_group_bytes=row_group_bytes,
                           compression=compression)
    writer.write(data)
    summary = writer.finish()
    return b"".join(out), summary


def _patch_footer_crc(tail: bytearray) -> None:
    """Patch the CRC32C of the Thrift footer (computed with the placeholder digits) into ``tail``.

    ``tail`` ends with the footer, its length and ``PAR1``: the digits are patched before they leave.
    """
    footer_len = int.from_bytes(tail[-8:-4], "little")
    footer_start = len(tail) - 8 - footer_len
    if len(tail) < 8 or footer_start < 0:
        raise InternalError("the Parquet footer was not written in one piece at close")
    footer = bytes(tail[footer_start:-8])
    at = footer.find(_CRC_ENTRY + _CRC_PLACEHOLDER)
    if at < 0 or footer.count(_CRC_ENTRY) != 1:
        raise InternalError("cannot locate the footer CRC entry in the Parquet footer")
    digits = footer_start + at + len(_CRC_ENTRY)
    tail[digits: digits + 10] = b"%010d" % crc32c.crc32c(footer)


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
    version = next((v for v in _INDEX_WIDTH if meta.get(_KEY_FORMAT) == str(v)), None)
    if version is None:
        raise CorruptData(f"unsupported segment format version {meta.get(_KEY_FORMAT)!r}", source=source)
    if any(k not in meta for k in META_KEYS):
        raise CorruptData("segment footer metadata is incomplete", source=source)
    if not arrow_schema.equals(RECORD_SCHEMA):
        raise CorruptData(f"segment schema is not RECORD_SCHEMA: {arrow_schema}", source=source)
    ints = {k: _parse_int(meta[_PREFIX + k], k, source) for k in _INT_KEYS}
    groups = _row_groups(meta[_KEY_ROW_GROUPS], _INDEX_WIDTH[version], metadata, object_size, source)
    footer = SegmentFooter(ints["base_offset"], ints["last_offset"], ints["record_count"],
                           ints["size_bytes"], ints["min_timestamp"], ints["max_timestamp"],
                           ints["first_batch_max_timestamp"], groups, version)
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


def _row_groups(text: str, width: int, metadata: pq.FileMetaData, object_size: int,
                source: str) -> tuple[RowGroupInfo, ...]:
    try:
        rows = json.loads(text)
    except ValueError as e:
        raise CorruptData("segment row-group index is not JSON", source=source) from e
    ok = isinstance(rows, list) and all(
        isinstance(r, list) and len(r) == width and all(type(x) is int for x in r) for r in rows)
    if not ok or len(rows) != metadata.num_row_groups:
        raise CorruptData("segment row-group index does not match the Parquet row groups", source=source)
    footer_start = object_size - 8 - metadata.serialized_size
    out: list[RowGroupInfo] = []
    expected_start = len(_PARQUET_MAGIC)
    for i, row in enumerate(rows):
        first, last, min_ts, max_ts, num_rows, size_bytes = row[:6]
        unkeyed, tombstones, crc = row[6:9] if len(row) == 9 else (None, None, None)
        start, end = _byte_range(metadata.row_group(i))
        if start != expected_start or end > footer_start or metadata.row_group(i).num_rows != num_rows:
            raise CorruptData(f"row group {i} byte range or row count is inconsistent", source=source)
        expected_start = end
        out.append(RowGroupInfo(first, last, min_ts, max_ts, num_rows, start, end, size_bytes, unkeyed, tombstones,
                                crc))
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
        problems.extend(n is not None and not 0 <= n <= g.num_rows for n in (g.unkeyed, g.tombstones))
        problems.append(g.crc32c is not None and not 0 <= g.crc32c < 2**32)
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
