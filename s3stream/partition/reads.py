"""Reads of one partition over its view: records from an offset, and the offset of a timestamp.

A read of the sealed tier of the cached manifest runs alongside a probe for a newer manifest and is done
again if one appeared (:meth:`~s3stream.partition.state.LogState.optimistic_view`); a read that meets a
removed object (retention, compaction, GC) re-reads the manifest and tries again (manifest-protocol.md T4).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from s3stream.base.errors import ObjectNotFound
from s3stream.partition.state import LogState
from s3stream.partition.validate import check_offset
from s3stream.read.tiers import LogView, read_table

__all__ = ["offset_for_timestamp", "read_records"]


def read_records(state: LogState, offset: int, *, max_records: int | None, max_bytes: int | None) -> pa.Table:
    """Records at offsets >= ``offset`` (arguments checked by the caller); see ``PartitionLog.read``."""
    host = state.host
    for attempt in range(3):
        optimistic = state.optimistic_view(offset) if attempt == 0 else None
        view, still_latest = optimistic if optimistic is not None else (state.view(for_offset=offset), None)
        check_offset(offset, view)
        try:
            table = read_table(view, offset, log_id=state.log_id, segments=host.segments, chunks=host.chunks,
                               max_records=max_records, max_bytes=max_bytes)
            if table.num_rows == 0 and offset < view.log_end_offset:
                # only a compaction gap up to the end of a sealed-only view: the records are in the tail
                table = read_table(state.view(), offset, log_id=state.log_id, segments=host.segments,
                                   chunks=host.chunks, max_records=max_records, max_bytes=max_bytes)
                still_latest = None
        except ObjectNotFound:
            if attempt == 2:
                raise
            state.manifest(refresh=True)
            continue
        if still_latest is not None and not still_latest():
            continue  # the manifest moved while we read: read again from the new one
        return table
    raise AssertionError("unreachable: the last attempt returns or raises")


def offset_for_timestamp(state: LogState, timestamp: int) -> int | None:
    """The earliest offset whose record timestamp is >= ``timestamp``, or None."""
    view = state.view()
    for seg in view.segments:
        if seg.last_offset < view.log_start_offset or seg.max_timestamp < timestamp:
            continue
        found = state.host.segments.get(seg).offset_for_timestamp(timestamp)
        if found is not None:
            found += seg.offset_delta
        if found is not None and found >= view.log_start_offset:
            return found
        if found is not None:
            rest = _scan(state, view, view.log_start_offset, timestamp, until=seg.end_offset)
            if rest is not None:
                return rest
    start = max(view.next_offset, view.log_start_offset)
    return _scan(state, view, start, timestamp, until=None)


def _scan(state: LogState, view: LogView, start: int, timestamp: int, until: int | None) -> int | None:
    pos = start
    end = view.log_end_offset if until is None else until
    while pos < end:
        table = read_table(view, pos, log_id=state.log_id, segments=state.host.segments, chunks=state.host.chunks,
                           max_bytes=8 << 20, until=end)
        if table.num_rows == 0:
            return None
        mask = pc.greater_equal(table.column("timestamp"), timestamp)
        idx = pc.index(mask, True).as_py()
        if idx is not None and idx >= 0:
            return int(table.column("offset")[idx].as_py())
        pos = int(table.column("offset")[-1].as_py()) + 1
    return None
