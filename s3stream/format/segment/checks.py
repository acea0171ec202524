"""The checks a segment read passes before any row leaves the reader.

A damaged or lying object must surface as :class:`~s3stream.base.errors.CorruptData` naming its source,
never as wrong records or as a pyarrow exception a caller cannot classify. Every reading path (streamed,
picked row groups, whole object) decodes through :func:`decoding` and checks what it decoded with
:func:`check_groups` against the footer index, so they cannot drift apart in what they accept.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s3stream.base.errors import CorruptData, InvalidRequest, S3StreamError
from s3stream.base.records import RECORD_SCHEMA
from s3stream.format.segment.footer_crc import verify_footer
from s3stream.format.segment.format import RowGroupInfo
from s3stream.format.segment.ranged import Extent, RangedFile

__all__ = ["ALL_COLUMNS", "ALL_COLUMN_SET", "check_columns", "check_groups", "checked_group", "decoding",
           "verify_whole"]

_DECODE_ERRORS = (pa.ArrowException, OSError, ValueError, TypeError, KeyError, IndexError, OverflowError,
                  EOFError, struct.error, RuntimeError)
#: The segment's columns, in schema order.
ALL_COLUMNS = tuple(RECORD_SCHEMA.names)
ALL_COLUMN_SET = frozenset(ALL_COLUMNS)


def check_columns(columns: Sequence[str] | None) -> list[str]:
    """The columns a read returns (all when None).

    Raises:
        InvalidRequest: an unknown column name.
    """
    if columns is None:
        return list(ALL_COLUMNS)
    unknown = [c for c in columns if c not in ALL_COLUMNS]
    if unknown:
        raise InvalidRequest(f"unknown segment columns {unknown}; known: {list(ALL_COLUMNS)}")
    return list(columns)


@contextmanager
def decoding(file: RangedFile | None, source: str) -> Iterator[None]:
    """Turn any decode error into CorruptData(source), but let errors of ``file``'s fetches through.

    pyarrow may wrap an exception raised inside its reads of ``file``; the original is kept in
    ``file.fetch_error`` (the caller serializes access to ``file``, so it is this call's).
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
        raise CorruptData(f"cannot decode segment: {e}", source=source) from e


def verify_whole(data: Extent, source: str) -> None:
    """Check a whole object's magic, footer length and footer CRC before Parquet parses it."""
    if len(data) < 12 or data[-4:] != b"PAR1" or data[:4] != b"PAR1":
        raise CorruptData("not a Parquet object (magic)", source=source)
    footer_len = int.from_bytes(data[-8:-4], "little")
    if footer_len > len(data) - 12:
        raise CorruptData(f"footer length {footer_len} exceeds the object", source=source)
    verify_footer(bytes(data[len(data) - 8 - footer_len: -8]), source=source)


def checked_group(table: pa.Table, info: RowGroupInfo, g: int, source: str) -> pa.Table:
    """Check one decoded row group against the footer index; the table without Parquet's metadata."""
    check_groups(table, [info], source, what=f"row group {g} disagrees")
    return table.replace_schema_metadata(None)


def check_groups(table: pa.Table, infos: Sequence[RowGroupInfo], source: str, *,
                 what: str = "row groups disagree") -> None:
    """Check decoded row groups (consecutive in ``table``) against the footer index, all at once: row
    counts, first/last and strictly increasing offsets, timestamp bounds, null keys and values, no null
    header, schema."""
    rows = np.array([g.num_rows for g in infos], dtype=np.int64)
    ends = np.cumsum(rows)
    starts = ends - rows
    offs = np.asarray(table.column("offset").to_numpy(), dtype=np.int64)
    bad = (len(offs) != int(ends[-1]) or not bool(np.all(offs[1:] > offs[:-1]))
           or not np.array_equal(offs[starts], [g.first_offset for g in infos])
           or not np.array_equal(offs[ends - 1], [g.last_offset for g in infos]))
    if not bad and "timestamp" in table.column_names:
        ts = np.asarray(table.column("timestamp").to_numpy(), dtype=np.int64)
        bad = (not np.array_equal(np.minimum.reduceat(ts, starts), [g.min_timestamp for g in infos])
               or not np.array_equal(np.maximum.reduceat(ts, starts), [g.max_timestamp for g in infos]))
    for column, counts in (("key", [g.unkeyed for g in infos]), ("value", [g.tombstones for g in infos])):
        if bad or column not in table.column_names:
            continue
        col = table.column(column)
        bad = any(n is not None and col.slice(int(a), int(r)).null_count != n
                  for a, r, n in zip(starts, rows, counts, strict=True))
    if not bad and "headers" in table.column_names:  # a null header no writer makes (Parquet allows it)
        bad = pc.list_flatten(table.column("headers")).null_count > 0
    if bad or not table.schema.equals(_schema_of(tuple(table.column_names))):
        raise CorruptData(f"{what} with the footer index", source=source)


@functools.lru_cache(maxsize=64)
def _schema_of(names: tuple[str, ...]) -> pa.Schema:
    """The schema of a read of ``names`` (column subsets are few: cached)."""
    return pa.schema([RECORD_SCHEMA.field(n) for n in names])
