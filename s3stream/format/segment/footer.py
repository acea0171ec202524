"""Parsing and validating a segment's footer: the index every ranged read is planned from.

A reader fetches only the byte ranges the footer index names and trusts its offsets, timestamps and
counts to skip row groups, so a footer that lies would make it return wrong records instead of failing.
:func:`parse_footer` therefore cross-checks the ``s3stream.*`` index against Parquet's own row-group
metadata and the object's size before anything uses it, and reports any disagreement as
:class:`~s3stream.base.errors.CorruptData`. (The footer's checksum is checked earlier, before Parquet
parses the bytes: :mod:`.footer_crc`.)
"""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq

from s3stream.base.errors import CorruptData
from s3stream.base.records import RECORD_SCHEMA
from s3stream.format.segment.format import (
    INDEX_WIDTH,
    INT_KEYS,
    KEY_FORMAT,
    KEY_PREFIX,
    KEY_ROW_GROUPS,
    META_KEYS,
    PARQUET_MAGIC,
    RowGroupInfo,
    SegmentFooter,
)

__all__ = ["parse_footer"]

_INT_RE = re.compile(r"-?[0-9]{1,19}")


def parse_footer(metadata: pq.FileMetaData, arrow_schema: pa.Schema, object_size: int, *,
                 source: str) -> SegmentFooter:
    """Validate a segment's Parquet footer and build its offset/time index from it alone.

    Raises:
        CorruptData: unknown version, metadata CRC mismatch, or any inconsistency between the
            ``s3stream.*`` index, Parquet's row-group metadata and ``object_size``.
    """
    meta = _kv(metadata, source)
    version = next((v for v in INDEX_WIDTH if meta.get(KEY_FORMAT) == str(v)), None)
    if version is None:
        raise CorruptData(f"unsupported segment format version {meta.get(KEY_FORMAT)!r}", source=source)
    if any(k not in meta for k in META_KEYS):
        raise CorruptData("segment footer metadata is incomplete", source=source)
    if not arrow_schema.equals(RECORD_SCHEMA):
        raise CorruptData(f"segment schema is not RECORD_SCHEMA: {arrow_schema}", source=source)
    ints = {k: _parse_int(meta[KEY_PREFIX + k], k, source) for k in INT_KEYS}
    groups = _row_groups(meta[KEY_ROW_GROUPS], INDEX_WIDTH[version], metadata, object_size, source)
    footer = SegmentFooter(ints["base_offset"], ints["last_offset"], ints["record_count"],
                           ints["size_bytes"], ints["min_timestamp"], ints["max_timestamp"],
                           ints["first_batch_max_timestamp"], groups, version)
    _check_footer(footer, metadata, source)
    return footer


def _kv(metadata: pq.FileMetaData, source: str) -> dict[str, str]:
    try:
        raw = metadata.metadata or {}
        return {k.decode(): v.decode() for k, v in raw.items() if k.startswith(KEY_PREFIX.encode())}
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
    expected_start = len(PARQUET_MAGIC)
    for i, row in enumerate(rows):
        first, last, min_ts, max_ts, num_rows, size_bytes = row[:6]
        unkeyed, tombstones, crc = row[6:9] if len(row) == 9 else (None, None, None)
        rg = metadata.row_group(i)
        if rg.num_columns != metadata.num_columns:  # pyarrow aborts the process on a chunk the schema lacks
            raise CorruptData(f"row group {i} has {rg.num_columns} column chunks, the schema "
                              f"{metadata.num_columns} columns", source=source)
        start, end = _byte_range(rg)
        if start != expected_start or end > footer_start or rg.num_rows != num_rows:
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
    # Parquet's column statistics are deliberately not read: ``ColumnChunkMetaData.statistics`` lets a C++
    # exception escape (the process aborts) for a footer whose CRC32C a forger recomputed and whose chunk
    # type or encoded min/max contradict the schema. Every read checks the decoded offsets against this
    # index instead (``checks.check_groups``), through pyarrow's reader, which reports such a footer.
