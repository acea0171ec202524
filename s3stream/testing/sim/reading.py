"""Reading a partition whole for the audit: every record, as :class:`~s3stream.testing.sim.model.Row` values."""

from __future__ import annotations

import pyarrow as pa

from s3stream.base.errors import OffsetOutOfRange
from s3stream.partition.log import PartitionLog
from s3stream.testing.sim.model import Row

__all__ = ["read_all", "table_rows"]


def table_rows(table: pa.Table, delta: int = 0) -> list[Row]:
    """The records of ``table`` (RECORD_SCHEMA), their stored offsets moved by ``delta``."""
    offsets = table.column("offset").to_pylist()
    keys = table.column("key").to_pylist()
    tombstones = table.column("value").is_null().to_pylist()
    headers = table.column("headers").to_pylist()
    out: list[Row] = []
    for off, k, tomb, hs in zip(offsets, keys, tombstones, headers, strict=True):
        ident = next((h["value"].decode() for h in hs or () if h["key"] == "sim"), "?")
        out.append(Row(off + delta, ident, k, bool(tomb)))
    return out


def read_all(plog: PartitionLog, *, start: int | None = None) -> tuple[list[Row], int, int]:
    """Every record of ``plog`` from its log start (or ``start``) to its log end, by paged reads; with the log
    start and end the read used."""
    log_start, leo = plog.log_start_offset, plog.log_end_offset
    rows: list[Row] = []
    pos = log_start if start is None else max(start, log_start)
    while pos < leo:
        try:
            table = plog.read_arrow(pos, max_bytes=1 << 20)
        except OffsetOutOfRange as exc:
            # another process moved the log start since this one's view: a reader starts again from there
            moved = exc.log_start_offset
            if moved is None or moved <= pos or rows:
                raise
            pos = log_start = moved
            continue
        if table.num_rows == 0:
            break
        got = table_rows(table)
        rows.extend(got)
        pos = got[-1].offset + 1
    return rows, log_start, leo
