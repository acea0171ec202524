"""Reading segment objects by offset or timestamp with ranged fetches only.

:class:`SegmentReader` opens a segment lazily: one suffix fetch of the last :data:`FOOTER_FETCH_BYTES`
(a second one only when the footer is larger), validated by :func:`format.parse_footer`, gives the offset
and time index. A read then fetches only the byte ranges of the row groups (and, for a column subset, the
column chunks) it needs, coalescing consecutive row groups up to ``block_bytes`` per fetch.
``pyarrow.parquet`` decodes through a :class:`ranged.RangedFile` with page-checksum verification on.

Every row group read is checked against the footer index (row count, first/last offset, strictly
increasing offsets, timestamp bounds), so a damaged object yields :class:`CorruptData` naming ``source``,
never wrong records. Errors raised by ``fetch`` itself (not found, throttled, ...) propagate unchanged.

Callers cache one reader per segment object (a consumer reading sequentially must not refetch the footer);
a reader is thread-safe (one lock) and keeps a few MiB of fetched bytes for sequential reads.
"""

from __future__ import annotations

import bisect
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from s3stream.errors import CorruptData, InvalidRequest, S3StreamError
from s3stream.records import RECORD_SCHEMA
from s3stream.segment.format import RowGroupInfo, SegmentFooter, parse_footer, row_sizes, verify_footer
from s3stream.segment.ranged import RangedFile

__all__ = ["FOOTER_FETCH_BYTES", "SegmentReader"]

#: Bytes fetched from the end of the object to find the footer (one fetch for most segments).
FOOTER_FETCH_BYTES = 64 << 10
_DECODE_ERRORS = (pa.ArrowException, OSError, ValueError, TypeError, KeyError, IndexError, OverflowError,
                  EOFError, struct.error, RuntimeError)
_SIZE_COLUMNS = ("key", "value", "headers")
_ALL_COLUMNS = tuple(RECORD_SCHEMA.names)

#: sequential read-ahead window, in blocks; within it adjacent row groups are merged into GETs of up to
#: _GET_BLOCKS blocks (per-request overhead dominates small GETs) that are fetched concurrently
_WINDOW_BLOCKS = 8
_GET_BLOCKS = 4


class SegmentReader:
    """Offset and timestamp reads of one immutable segment object through ranged fetches."""

    def __init__(self, fetch: Callable[[int, int], bytes], object_size: int, *, source: str,
                 block_bytes: int = 1 << 20) -> None:
        self._fetch = fetch
        self._object_size = object_size
        self._source = source
        self._block_bytes = block_bytes
        self._lock = threading.RLock()
        self._file = RangedFile(fetch, object_size, source=source, block_bytes=block_bytes,
                                cache_bytes=max((_WINDOW_BLOCKS + 2) * block_bytes, 2 * FOOTER_FETCH_BYTES))
        self._pf: pq.ParquetFile | None = None
        self._footer: SegmentFooter | None = None
        self._last_offsets: list[int] = []

    # -- index (from the footer alone) --------------------------------------------------------------------

    @property
    def source(self) -> str:
        return self._source

    @property
    def object_size(self) -> int:
        return self._object_size

    @property
    def footer(self) -> SegmentFooter:
        """The validated footer (opens the segment on first use)."""
        with self._lock:
            self._open()
            assert self._footer is not None
            return self._footer

    @property
    def base_offset(self) -> int:
        return self.footer.base_offset

    @property
    def last_offset(self) -> int:
        return self.footer.last_offset

    @property
    def record_count(self) -> int:
        return self.footer.record_count

    @property
    def row_groups(self) -> list[RowGroupInfo]:
        return list(self.footer.row_groups)

    @property
    def fetch_count(self) -> int:
        """Fetches issued so far (footer included)."""
        return self._file.fetch_count

    @property
    def fetched_bytes(self) -> int:
        return self._file.fetched_bytes

    # -- reads --------------------------------------------------------------------------------------------

    def read(self, from_offset: int, *, max_records: int | None = None, max_bytes: int | None = None,
             columns: Sequence[str] | None = None) -> pa.Table:
        """Rows with ``offset >= from_offset`` in offset order, limited by ``max_records``/``max_bytes``.

        ``max_bytes`` counts logical record bytes and is soft: the first record is returned even if
        larger. Only the row groups needed are fetched.

        Raises:
            InvalidRequest: ``max_records < 1`` or an unknown column name.
            CorruptData: the object failed a checksum or disagrees with its footer.
        """
        if max_records is not None and max_records < 1:
            raise InvalidRequest(f"max_records must be >= 1, got {max_records}")
        out_cols = _check_columns(columns)
        need = ["offset", *(c for c in out_cols if c != "offset")]
        if max_bytes is not None:
            need += [c for c in _SIZE_COLUMNS if c not in need]
        with self._lock, self._decoding(self._file):
            self._open()
            groups = self._groups()
            g = bisect.bisect_left(self._last_offsets, from_offset)
            pieces: list[pa.Table] = []
            rows = nbytes = 0
            while g < len(groups) and not _satisfied(rows, nbytes, max_records, max_bytes):
                self._prefetch(g, from_offset, max_records, max_bytes, need)
                table = self._read_group(g, need)
                if table.num_rows and table.column("offset")[0].as_py() < from_offset:
                    offs = table.column("offset").to_numpy()
                    table = table.slice(int(np.searchsorted(offs, from_offset)))
                pieces.append(table)
                rows += table.num_rows
                nbytes += int(row_sizes(table).sum()) if max_bytes is not None else 0
                g += 1
            result = _concat(pieces, need)
            return _limit(result, max_records, max_bytes).select(out_cols)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The earliest offset whose record timestamp is ``>= timestamp``; None if there is none.

        Timestamps need not be monotonic: the first row group whose max timestamp qualifies holds the
        answer (every earlier group has only smaller timestamps), and only its two index columns are read.
        """
        with self._lock, self._decoding(self._file):
            self._open()
            groups = self._groups()
            for g, info in enumerate(groups):
                if info.max_timestamp >= timestamp:
                    self._prefetch(g, info.first_offset, 1, None, ["offset", "timestamp"])
                    table = self._read_group(g, ["offset", "timestamp"])
                    idx = pc.index(pc.greater_equal(table.column("timestamp"), timestamp), True).as_py()
                    if idx < 0:
                        raise CorruptData(f"row group {g} has no timestamp >= its indexed max",
                                          source=self._source)
                    return int(table.column("offset")[idx].as_py())
            return None

    def read_all(self, *, verify_crc32c: int | None = None, columns: Sequence[str] | None = None) -> pa.Table:
        """The whole segment in one fetch, CRC32C-verified when ``verify_crc32c`` is given.

        Raises:
            CorruptData: CRC mismatch, or any decode/validation failure.
        """
        out_cols = _check_columns(columns)
        data = RangedFile(self._fetch, self._object_size, source=self._source).fetch(0, self._object_size)
        if verify_crc32c is not None and crc32c.crc32c(data) != verify_crc32c:
            raise CorruptData("segment object CRC32C mismatch", source=self._source)
        with self._decoding(None):
            _verify_whole(data, self._source)
            pf = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True, pre_buffer=False)
            footer = parse_footer(pf.metadata, pf.schema_arrow, self._object_size, source=self._source)
            need = ["offset", *(c for c in out_cols if c != "offset")]
            tables = [self._checked(pf.read_row_group(g, columns=need, use_threads=True), info, g)
                      for g, info in enumerate(footer.row_groups)]
            return _concat(tables, need).select(out_cols)

    # -- internals ----------------------------------------------------------------------------------------

    @contextmanager
    def _decoding(self, file: RangedFile | None) -> Iterator[None]:
        """Turn any decode error into CorruptData(source), but let errors of ``file``'s fetches through.

        pyarrow may wrap an exception raised inside its reads of ``file``; the original is kept in
        ``file.fetch_error`` (the caller holds the lock, so it is this call's).
        """
        if file is not None:
            file.fetch_error = None
        try:
            yield
        except S3StreamError:
            raise
        except _DECODE_ERRORS as e:
            if file is not None and file.fetch_error is not None:
                raise file.fetch_error from None
            raise CorruptData(f"cannot decode segment: {e}", source=self._source) from e

    def _open(self) -> None:
        if self._pf is not None:
            return
        with self._decoding(self._file):
            self._prime_footer()
            pf = pq.ParquetFile(self._file, page_checksum_verification=True, pre_buffer=False)
            footer = parse_footer(pf.metadata, pf.schema_arrow, self._object_size, source=self._source)
        self._pf, self._footer = pf, footer
        self._last_offsets = [g.last_offset for g in footer.row_groups]

    def _prime_footer(self) -> None:
        size = self._object_size
        if size < 12:
            raise CorruptData(f"object of {size} bytes is too small for a segment", source=self._source)
        start = max(0, size - FOOTER_FETCH_BYTES)
        tail = self._file.fetch(start, size)
        if tail[-4:] != b"PAR1":
            raise CorruptData("missing Parquet magic at the end of the object", source=self._source)
        footer_len = struct.unpack("<I", tail[-8:-4])[0]
        footer_start = size - 8 - footer_len
        if footer_start < 4:
            raise CorruptData(f"footer length {footer_len} exceeds the object", source=self._source)
        if footer_start < start:
            tail = self._file.fetch(footer_start, start) + tail
            start = footer_start
        verify_footer(tail[footer_start - start: len(tail) - 8], source=self._source)
        self._file.prime(start, tail)

    def _groups(self) -> tuple[RowGroupInfo, ...]:
        assert self._footer is not None
        return self._footer.row_groups

    def _prefetch(self, g: int, from_offset: int, max_records: int | None, max_bytes: int | None,
                  columns: Sequence[str]) -> None:
        """Fetch group ``g`` and the following groups the read will likely need, coalesced."""
        assert self._pf is not None
        groups = self._groups()
        spans: list[tuple[int, int]] = []
        rows = nbytes = 0
        for i in range(g, len(groups)):
            span = _column_span(self._pf.metadata.row_group(i), columns)
            if spans and (span[1] - spans[0][0] > _WINDOW_BLOCKS * self._block_bytes
                          or _satisfied(rows, nbytes, max_records, max_bytes)):
                break
            spans.append(span)
            info = groups[i]
            if i == g and info.first_offset < from_offset:  # only part of it is wanted: estimate pro rata
                frac = (info.last_offset - from_offset + 1) / (info.last_offset - info.first_offset + 1)
                rows += max(1, int(info.num_rows * frac))
                nbytes += int(info.size_bytes * frac)
            else:
                rows += info.num_rows
                nbytes += info.size_bytes
        # groups already cached are skipped (a sequential reader fetches each byte once); the rest of the
        # read-ahead window is fetched concurrently, one request per contiguous run of row groups
        missing = [sp for sp in spans if not self._file.covers(*sp)]
        self._file.prefetch_many(_coalesce(missing, limit=_GET_BLOCKS * self._block_bytes))

    def _read_group(self, g: int, columns: Sequence[str]) -> pa.Table:
        assert self._pf is not None
        table = self._pf.read_row_group(g, columns=list(columns), use_threads=False)
        return self._checked(table, self._groups()[g], g)

    def _checked(self, table: pa.Table, info: RowGroupInfo, g: int) -> pa.Table:
        """Check a decoded row group against the footer index (count, offsets, timestamps, schema)."""
        offs = np.asarray(table.column("offset").to_numpy(), dtype=np.int64)
        bad = (table.num_rows != info.num_rows or len(offs) == 0 or int(offs[0]) != info.first_offset
               or int(offs[-1]) != info.last_offset or not bool(np.all(np.diff(offs) > 0)))
        if not bad and "timestamp" in table.column_names:
            mm = pc.min_max(table.column("timestamp"))
            bad = (mm["min"].as_py(), mm["max"].as_py()) != (info.min_timestamp, info.max_timestamp)
        expected = pa.schema([RECORD_SCHEMA.field(n) for n in table.column_names])
        if bad or not table.schema.equals(expected):
            raise CorruptData(f"row group {g} disagrees with the footer index", source=self._source)
        return table.replace_schema_metadata(None)


def _verify_whole(data: bytes, source: str) -> None:
    if len(data) < 12 or data[-4:] != b"PAR1" or data[:4] != b"PAR1":
        raise CorruptData("not a Parquet object (magic)", source=source)
    footer_len = int.from_bytes(data[-8:-4], "little")
    if footer_len > len(data) - 12:
        raise CorruptData(f"footer length {footer_len} exceeds the object", source=source)
    verify_footer(data[len(data) - 8 - footer_len: -8], source=source)


def _check_columns(columns: Sequence[str] | None) -> list[str]:
    if columns is None:
        return list(_ALL_COLUMNS)
    unknown = [c for c in columns if c not in _ALL_COLUMNS]
    if unknown:
        raise InvalidRequest(f"unknown segment columns {unknown}; known: {list(_ALL_COLUMNS)}")
    return list(columns)


def _satisfied(rows: int, nbytes: int, max_records: int | None, max_bytes: int | None) -> bool:
    if max_records is None and max_bytes is None:
        return False
    return (rows > 0 and (max_records is None or rows >= max_records)
            and (max_bytes is None or nbytes >= max_bytes))


def _column_span(rg: pq.RowGroupMetaData, columns: Sequence[str]) -> tuple[int, int]:
    """The byte span of the column chunks of ``columns`` (top-level names) in one row group."""
    starts: list[int] = []
    ends: list[int] = []
    for c in range(rg.num_columns):
        col = rg.column(c)
        if col.path_in_schema.split(".")[0] in columns:
            start = int(col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset)
            starts.append(start)
            ends.append(start + int(col.total_compressed_size))
    return min(starts), max(ends)


def _coalesce(spans: list[tuple[int, int]], *, limit: int | None = None) -> list[tuple[int, int]]:
    """Merge touching spans (never splitting one, so a row group stays in one cached extent), up to ``limit``."""
    out: list[tuple[int, int]] = []
    for start, end in spans:
        if out and start <= out[-1][1] and (limit is None or max(out[-1][1], end) - out[-1][0] <= limit):
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _concat(tables: list[pa.Table], columns: Sequence[str]) -> pa.Table:
    if not tables:
        return pa.schema([RECORD_SCHEMA.field(c) for c in columns]).empty_table()
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _limit(table: pa.Table, max_records: int | None, max_bytes: int | None) -> pa.Table:
    if max_records is not None and table.num_rows > max_records:
        table = table.slice(0, max_records)
    if max_bytes is not None and table.num_rows > 1:
        cum = np.cumsum(row_sizes(table))
        keep = max(1, int(np.searchsorted(cum, max_bytes, side="right")))
        table = table.slice(0, keep)
    return table
