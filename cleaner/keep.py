"""Which records survive a cleaning round: rules C-KEEP1 and C-TOMB1-3, one pure function over Arrow.

This is the single definition of the keep rules; the in-process cleaner and the Spark compaction job
both call :func:`retain`, so their results are identical by construction.

For each record of a rewritten segment, in this order (C-KEEP1):

1. ``offset > latest_offset`` (outside this round's map): keep, whatever it is.
2. no key: drop (counted as invalid: an unkeyed record in a log that became compacted).
3. keyed: keep iff ``offset >= map[key]`` (absent: -1) and, for a tombstone (``value`` null; an empty
   value is not a tombstone), its delete horizon is unset or still in the future (C-TOMB2).

A retained tombstone without a horizon gets ``now + delete.retention.ms`` (C-TOMB1, KIP-534: the
horizon is based on the cleaning time, not the record's timestamp); a superseded tombstone is dropped
at once (C-TOMB3). Offsets and timestamps are never changed (G2, G3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cleaner.offsetmap import OffsetMap

__all__ = ["KeepStats", "retain"]


@dataclass(frozen=True, slots=True)
class KeepStats:
    records_read: int
    records_kept: int
    invalid_dropped: int
    tombstones_dropped: int
    horizons_stamped: int

    @property
    def records_removed(self) -> int:
        return self.records_read - self.records_kept


def retain(table: pa.Table, offset_map: OffsetMap, *, now_ms: int,
           delete_retention_ms: int) -> tuple[pa.Table, KeepStats]:
    """The surviving rows of ``table`` (RECORD_SCHEMA), with tombstone horizons stamped."""
    n = table.num_rows
    if n == 0:
        return table, KeepStats(0, 0, 0, 0, 0)
    offsets = table.column("offset")
    above = pc.greater(offsets, offset_map.latest_offset)
    has_key = pc.is_valid(table.column("key"))
    latest = _lookup(table, offset_map)
    is_latest = pc.greater_equal(offsets, latest)
    tombstone = pc.is_null(table.column("value"))
    horizon = table.column("horizon_ms")
    horizon_open = pc.or_(pc.is_null(horizon), pc.greater(pc.fill_null(horizon, 0), now_ms))  # C-TOMB2: now < h
    keyed_keep = pc.and_(is_latest, pc.or_(pc.invert(tombstone), horizon_open))
    keep = pc.or_(above, pc.and_(has_key, keyed_keep))
    kept = table.filter(keep)
    stamp = pc.and_(pc.is_null(kept.column("value")), pc.is_null(kept.column("horizon_ms")))
    stamped = int(pc.sum(pc.cast(stamp, pa.int64())).as_py() or 0)
    if stamped:
        new_horizon = pc.if_else(stamp, pa.scalar(now_ms + delete_retention_ms, pa.int64()), kept.column("horizon_ms"))
        kept = kept.set_column(kept.schema.get_field_index("horizon_ms"), kept.schema.field("horizon_ms"), new_horizon)
    invalid = int(pc.sum(pc.cast(pc.and_(pc.invert(above), pc.invert(has_key)), pa.int64())).as_py() or 0)
    dropped_tomb = int(pc.sum(pc.cast(pc.and_(tombstone, pc.invert(keep)), pa.int64())).as_py() or 0)
    return kept, KeepStats(n, kept.num_rows, invalid, dropped_tomb, stamped)


def _lookup(table: pa.Table, offset_map: OffsetMap) -> pa.ChunkedArray | pa.Array:
    """``map[key]`` for every row (-1 when absent or unkeyed): one hash lookup per row, order kept."""
    if offset_map.size == 0:
        return pa.array(np.full(table.num_rows, -1, dtype=np.int64))
    entries = offset_map.entries
    index = pc.index_in(table.column("key"), value_set=entries.column("key").combine_chunks())
    return pc.fill_null(pc.take(entries.column("map_offset"), index), -1)
