"""The bounded offset map (dedupe buffer): latest offset per key over the dirty range, rules CLEAN-MAP-1..4.

Built with pyarrow, never a per-record Python dict: each segment's ``(offset, key)`` columns (read with
column projection) are merged into a table of ``key -> latest offset`` by a group-by.

Capacity follows Kafka exactly (CLEAN-MAP-2): ``slots = per-thread buffer / 24``, ``max entries =
floor(slots * load_factor)``, and the check happens before *every* put, even an overwrite of a key
already in the map. When the map is full the round stops at that record: ``latest_offset`` is the last
record processed before it and the checkpoint becomes ``latest_offset + 1`` (partial cleaning,
KAFKA-3894). After a segment is scanned completely, ``latest_offset`` jumps to the next segment's
base minus one, so offset gaps are skipped (KAFKA-8764). Unlike Kafka (MD5 of the key, CLEAN-MAP-4) keys
are exact, so a hash collision can never drop a record; the memory per entry is therefore the key
size plus 8 bytes, while the *entry count* bound is Kafka's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from s3stream.base.errors import InvalidConfig

__all__ = ["OffsetMap", "OffsetMapBuilder", "map_capacity"]

_ENTRY_BYTES = 24  # Kafka's SkimpyOffsetMap: 16-byte MD5 + 8-byte offset
MAP_SCHEMA = pa.schema([pa.field("key", pa.binary(), nullable=False),
                        pa.field("map_offset", pa.int64(), nullable=False)])


def map_capacity(dedupe_buffer_bytes: int, threads: int, load_factor: float) -> int:
    """Max entries of one cleaner thread's map (CLEAN-MAP-2); at least one must fit (CLEAN-MAP-3)."""
    per_thread = min(dedupe_buffer_bytes // max(threads, 1), 2**31 - 1)
    capacity = int((per_thread // _ENTRY_BYTES) * load_factor)
    if capacity < 1:
        raise InvalidConfig("log.cleaner.dedupe.buffer.size is too small for one offset-map entry per thread",
                            key="log.cleaner.dedupe.buffer.size")
    return capacity


@dataclass(frozen=True, slots=True)
class OffsetMap:
    """The result of one round's map building.

    Invariant (true of every map :class:`OffsetMapBuilder` builds): every keyed record at an offset in
    ``[start_offset, latest_offset]`` was put, so its key is in ``entries``. Hence such a record is the
    latest of its key iff its offset is one of the map's values (``winners``, sorted), which
    :func:`cleaner.keep.retain` checks with a binary search instead of a hash lookup per record.
    """

    entries: pa.Table          # MAP_SCHEMA: the latest offset of each key
    latest_offset: int         # the last offset the map accounts for (CLEAN-MAP-2)
    full: bool                 # stopped early: partial cleaning
    capacity: int
    start_offset: int = 0      # the round's first dirty offset: the map covers [start_offset, latest_offset]
    winners: npt.NDArray[np.int64] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        offsets = self.entries.column("map_offset").to_numpy() if self.entries.num_rows else np.zeros(0)
        object.__setattr__(self, "winners", np.sort(np.asarray(offsets, dtype=np.int64)))

    @property
    def end_offset(self) -> int:
        """The new checkpoint (CLEAN-MAP-3)."""
        return self.latest_offset + 1

    @property
    def size(self) -> int:
        return int(self.entries.num_rows)

    @property
    def utilization(self) -> float:
        return self.size / self.capacity if self.capacity else 0.0


class OffsetMapBuilder:
    """Feed segments oldest first with :meth:`add_segment` until it returns False (full or done).

    Rows are merged into the key -> offset table lazily: while even all-new keys could not fill the map,
    segments are only collected, and one group-by folds them in (at the latest when the collected rows and
    the table together take the map's share of the dedupe buffer, ``capacity * 24`` bytes; each fold
    regroups the whole table, so folding every few segments cost a round three times one group-by).
    """

    def __init__(self, *, start_offset: int, capacity: int) -> None:
        self._start = start_offset
        self._capacity = capacity
        self._entries: pa.Table = MAP_SCHEMA.empty_table()
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self._latest = start_offset - 1
        self._full = False

    @property
    def full(self) -> bool:
        return self._full

    def add_segment(self, rows: pa.Table, *, next_base: int) -> bool:
        """Map ``rows`` (columns offset, key; offset order) of one segment ending before ``next_base``.

        Returns False once the map is full (the caller stops scanning).
        """
        if self._full:
            return False
        if rows.num_rows and rows.column("offset")[0].as_py() < self._start:  # offsets ascend
            rows = rows.filter(pc.greater_equal(rows.column("offset"), self._start))
        keyed = rows.filter(pc.is_valid(rows.column("key"))) if rows.column("key").null_count else rows
        if self._entries.num_rows + self._pending_rows + keyed.num_rows <= self._capacity:
            self._collect(keyed)  # even if every key were new, no put finds the map full
            self._latest = max(self._latest, next_base - 1)
            return True
        self._materialize()
        stop = self._stop_index(keyed)
        if stop is None:
            self._collect(keyed)
            self._latest = max(self._latest, next_base - 1)
            return True
        self._full = True
        stop_offset = int(keyed.column("offset")[stop].as_py())
        self._collect(keyed.slice(0, stop))
        before = rows.filter(pc.less(rows.column("offset"), stop_offset))
        if before.num_rows:
            self._latest = max(self._latest, int(before.column("offset")[-1].as_py()))
        return False

    def _stop_index(self, keyed: pa.Table) -> int | None:
        """Index of the first keyed row whose put would find the map full, or None (entries are exact)."""
        n = keyed.num_rows
        size = self._entries.num_rows
        if n == 0 or size + n <= self._capacity:
            return None
        keys = keyed.column("key")
        known = pc.is_in(keys, value_set=self._entries.column("key").combine_chunks()) if size else None
        indexed = pa.table({"key": keys, "i": pa.array(np.arange(n, dtype=np.int64))})
        first = indexed.group_by("key", use_threads=False).aggregate([("i", "min")]).column("i_min")
        is_first = pc.is_in(indexed.column("i"), value_set=first.combine_chunks())
        is_new = is_first if known is None else pc.and_(is_first, pc.invert(known))
        new_count = pc.cumulative_sum(pc.cast(is_new, pa.int64()))
        before = pc.add(pc.subtract(new_count, pc.cast(is_new, pa.int64())), size)
        full_at = pc.greater_equal(before, self._capacity)
        idx = pc.index(full_at, True).as_py()
        return None if idx is None or idx < 0 else int(idx)

    def _collect(self, keyed: pa.Table) -> None:
        if keyed.num_rows == 0:
            return
        pending = pa.table({"key": keyed.column("key"), "map_offset": keyed.column("offset")})
        self._pending.append(pending)
        self._pending_rows += pending.num_rows
        self._pending_bytes += pending.nbytes
        if self._pending_bytes + self._entries.nbytes > self._capacity * _ENTRY_BYTES:
            self._materialize()

    def _materialize(self) -> None:
        """Fold the collected rows into the exact key -> latest offset table (one group-by)."""
        if not self._pending:
            return
        both = pa.concat_tables([self._entries, *(t.cast(MAP_SCHEMA) for t in self._pending)])
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
        merged = both.group_by("key", use_threads=False).aggregate([("map_offset", "max")])
        self._entries = merged.rename_columns(["key", "map_offset"]).select(["key", "map_offset"]).cast(MAP_SCHEMA)

    def finish(self, *, upper: int) -> OffsetMap:
        """The map; when nothing filled it, it accounts for everything below ``upper`` (U)."""
        self._materialize()
        latest = self._latest if self._full else max(self._latest, upper - 1)
        return OffsetMap(self._entries, latest, self._full, self._capacity, self._start)
