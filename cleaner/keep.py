"""Which records survive a cleaning round: rules CLEAN-KEEP-1 and CLEAN-TOMB-1..3, one pure function over Arrow.

This is the single definition of the keep rules; the in-process cleaner and the Spark compaction job
both call :func:`retain`, so their results are identical by construction.

For each record of a rewritten segment, in this order (CLEAN-KEEP-1):

1. ``offset > latest_offset`` (outside this round's map): keep, whatever it is.
2. no key: drop (counted as invalid: an unkeyed record in a log that became compacted).
3. keyed: keep iff ``offset >= map[key]`` (absent: -1) and, for a tombstone (``value`` null; an empty
   value is not a tombstone), its delete horizon is unset or still in the future (CLEAN-TOMB-2).

A retained tombstone without a horizon gets ``now + delete.retention.ms`` (CLEAN-TOMB-1, KIP-534: the
horizon is based on the cleaning time, not the record's timestamp); a superseded tombstone is dropped
at once (CLEAN-TOMB-3). Offsets and timestamps are never changed (CLEAN-GUAR-2, CLEAN-GUAR-3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from cleaner.offsetmap import OffsetMap

__all__ = ["KeepStats", "droppable", "dropped_whole", "retain"]


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
    offsets = np.asarray(table.column("offset").to_numpy(), dtype=np.int64)
    above = offsets > offset_map.latest_offset
    has_key = _bools(pc.is_valid(table.column("key")))
    tombstone = _bools(pc.is_null(table.column("value")))
    horizon = table.column("horizon_ms")
    horizon_open = _bools(pc.or_(pc.is_null(horizon), pc.greater(pc.fill_null(horizon, 0), now_ms)))  # now < h
    keep = above | (has_key & _is_latest(table, offsets, offset_map) & (~tombstone | horizon_open))
    kept = table.filter(pa.array(keep))
    stamp = pc.and_(pc.is_null(kept.column("value")), pc.is_null(kept.column("horizon_ms")))
    stamped = int(pc.sum(pc.cast(stamp, pa.int64())).as_py() or 0)
    if stamped:
        new_horizon = pc.if_else(stamp, pa.scalar(now_ms + delete_retention_ms, pa.int64()), kept.column("horizon_ms"))
        kept = kept.set_column(kept.schema.get_field_index("horizon_ms"), kept.schema.field("horizon_ms"), new_horizon)
    invalid = int(np.count_nonzero(~above & ~has_key))
    dropped_tomb = int(np.count_nonzero(tombstone & ~keep))
    return kept, KeepStats(n, kept.num_rows, invalid, dropped_tomb, stamped)


def droppable(offset_map: OffsetMap, first: int, last: int) -> bool:
    """Whether :func:`retain` drops every record at offsets ``[first, last]``, whatever their keys and values.

    True iff the range lies in the map's ``[start_offset, latest_offset]`` and holds none of its winners:
    there every keyed record that is not a winner is superseded (tombstone or not) and every unkeyed one
    is invalid (rules 2 and 3 of CLEAN-KEEP-1), so the cleaner need not even read such records.
    """
    if first < offset_map.start_offset or last > offset_map.latest_offset:
        return False
    winners = offset_map.winners
    i = int(np.searchsorted(winners, first))
    return i == winners.size or int(winners[i]) > last


def dropped_whole(records: int, unkeyed: int, tombstones: int) -> KeepStats:
    """The statistics :func:`retain` would report for ``records`` it drops entirely (see :func:`droppable`)."""
    return KeepStats(records, 0, unkeyed, tombstones, 0)


def _bools(values: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.bool_]:
    out: npt.NDArray[np.bool_] = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.bool_)
    return out


def _is_latest(table: pa.Table, offsets: npt.NDArray[np.int64], offset_map: OffsetMap) -> npt.NDArray[np.bool_]:
    """Per row: ``offset >= map.get(key, -1)`` (only meaningful for keyed rows at or below the map's end).

    In the map's range every keyed row was put (see :class:`OffsetMap`), so a row is the latest of its key
    iff its offset is a map value: a binary search in the sorted winners. Below the range (the clean
    section) no map value can be smaller, so a row survives iff its key is absent from the map.
    """
    winners = offset_map.winners
    latest: npt.NDArray[np.bool_] = np.zeros(len(offsets), dtype=np.bool_)
    if winners.size:
        idx = np.minimum(np.searchsorted(winners, offsets), winners.size - 1)
        latest = np.equal(winners[idx], offsets)
    clean = offsets < offset_map.start_offset
    if clean.any():
        if offset_map.size == 0:
            latest[clean] = True
        else:
            keys = table.column("key").filter(pa.array(clean))
            found = pc.index_in(keys, value_set=offset_map.entries.column("key").combine_chunks())
            latest[clean] = _bools(pc.is_null(found))
    return latest
