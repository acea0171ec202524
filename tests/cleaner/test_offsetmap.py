"""The bounded offset map: rules CLEAN-MAP-1..4 (KT-18 partial cleaning, KT-21 offset holes, full at overwrite)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pytest

from cleaner.offsetmap import OffsetMapBuilder, map_capacity
from s3stream.base.errors import InvalidConfig


def rows(offsets: Sequence[int], keys: Sequence[str | None]) -> pa.Table:
    return pa.table({"offset": pa.array(offsets, pa.int64()),
                     "key": pa.array([None if k is None else k.encode() for k in keys], pa.binary())})


def as_dict(builder: OffsetMapBuilder, upper: int) -> tuple[dict[bytes, int], int, bool]:
    m = builder.finish(upper=upper)
    return dict(zip(m.entries.column("key").to_pylist(), m.entries.column("map_offset").to_pylist(),
                    strict=True)), m.end_offset, m.full


def test_capacity_follows_kafka_sizing() -> None:
    assert map_capacity(24 * 3, 1, 0.9) == 2             # floor(3 slots * 0.9)
    assert map_capacity(128 * 2**20, 1, 0.9) == int((128 * 2**20 // 24) * 0.9)
    assert map_capacity(24 * 100, 2, 1.0) == 50          # the buffer is shared by the threads
    assert map_capacity(2**40, 1, 1.0) == (2**31 - 1) // 24   # per-thread cap at 2^31-1 bytes


def test_capacity_below_one_entry_is_rejected() -> None:
    with pytest.raises(InvalidConfig):
        map_capacity(24, 1, 0.9)


def test_latest_offset_wins_including_duplicates_in_one_batch() -> None:
    b = OffsetMapBuilder(start_offset=0, capacity=100)
    assert b.add_segment(rows([0, 1, 2, 3], ["a", "a", "b", "a"]), next_base=4)
    assert b.add_segment(rows([4, 5], ["b", "c"]), next_base=6)
    assert as_dict(b, 6) == ({b"a": 3, b"b": 4, b"c": 5}, 6, False)


def test_unkeyed_records_and_records_below_the_start_are_not_mapped() -> None:
    b = OffsetMapBuilder(start_offset=2, capacity=100)
    b.add_segment(rows([0, 1, 2, 3, 4], ["a", "b", None, "a", None]), next_base=5)
    assert as_dict(b, 5) == ({b"a": 3}, 5, False)


def test_full_at_overwrite_stops_before_that_record() -> None:
    # capacity 2: a, b fill the map; the overwrite of a at offset 2 already finds it full (CLEAN-MAP-2).
    b = OffsetMapBuilder(start_offset=0, capacity=2)
    assert not b.add_segment(rows([0, 1, 2, 3], ["a", "b", "a", "c"]), next_base=4)
    entries, end, full = as_dict(b, 4)
    assert entries == {b"a": 0, b"b": 1}
    assert (end, full) == (2, True)          # checkpoint mid-segment: partial cleaning (KT-18)


def test_full_across_segments_keeps_the_earlier_segments() -> None:
    b = OffsetMapBuilder(start_offset=0, capacity=3)
    assert b.add_segment(rows([0, 1], ["a", "b"]), next_base=2)
    assert not b.add_segment(rows([2, 3, 4], ["c", "d", "e"]), next_base=5)
    assert not b.add_segment(rows([5], ["f"]), next_base=6)      # once full it stays full
    assert as_dict(b, 6) == ({b"a": 0, b"b": 1, b"c": 2}, 3, True)


def test_full_on_the_first_record_of_a_segment_ends_at_the_previous_segment() -> None:
    b = OffsetMapBuilder(start_offset=0, capacity=2)
    assert b.add_segment(rows([0, 1], ["a", "b"]), next_base=5)   # offsets 2-4 were compacted away
    assert not b.add_segment(rows([5, 6], ["c", "d"]), next_base=7)
    assert as_dict(b, 7)[1:] == (5, True)


def test_kt21_offset_holes_fast_forward_to_the_next_segment() -> None:
    # KAFKA-8764: the last record of a segment is at 3 but the segment ends at 9 (compaction gap).
    b = OffsetMapBuilder(start_offset=0, capacity=10)
    assert b.add_segment(rows([0, 3], ["a", "b"]), next_base=10)
    assert b.finish(upper=10).latest_offset == 9


def test_empty_dirty_range_accounts_for_everything_below_u() -> None:
    b = OffsetMapBuilder(start_offset=20, capacity=10)
    m = b.finish(upper=20)
    assert (m.size, m.end_offset, m.full) == (0, 20, False)


def test_empty_segment_advances_latest_offset() -> None:
    b = OffsetMapBuilder(start_offset=0, capacity=10)
    assert b.add_segment(rows([], []), next_base=10)
    assert b.finish(upper=30).end_offset == 30


def test_utilization() -> None:
    b = OffsetMapBuilder(start_offset=0, capacity=4)
    b.add_segment(rows([0, 1, 2], ["a", "b", "a"]), next_base=3)
    assert b.finish(upper=3).utilization == 0.5


def test_many_keys_merge_exactly() -> None:
    b = OffsetMapBuilder(start_offset=0, capacity=10_000)
    n = 5000
    for seg in range(4):
        base = seg * n
        b.add_segment(rows(range(base, base + n), [f"k{(i * 7) % 1234}" for i in range(base, base + n)]),
                      next_base=base + n)
    entries, end, full = as_dict(b, 4 * n)
    expected: dict[bytes, int] = {}
    for i in range(4 * n):
        expected[f"k{(i * 7) % 1234}".encode()] = i
    assert entries == expected and end == 4 * n and not full
