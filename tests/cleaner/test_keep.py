"""The keep rules over Arrow: CLEAN-KEEP-1 and the two-phase tombstone CLEAN-TOMB-1..3 (KT-23, KT-24, KD-05)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from cleaner.keep import droppable, dropped_whole, retain
from cleaner.offsetmap import MAP_SCHEMA, OffsetMap
from s3stream.base.records import RECORD_SCHEMA

NOW = 5_000
DR = 1_000


def table(rows: Sequence[tuple[int, str | None, str | None, int | None]]) -> pa.Table:
    """(offset, key, value, horizon) rows; timestamps are all 1 (old: irrelevant to horizons, KT-24)."""
    return pa.Table.from_pylist([
        {"offset": o, "timestamp": 1, "key": None if k is None else k.encode(),
         "value": None if v is None else v.encode(), "headers": None, "horizon_ms": h} for o, k, v, h in rows],
        schema=RECORD_SCHEMA)


def omap(entries: dict[str, int], latest: int, start: int = 0) -> OffsetMap:
    """A map over ``[start, latest]``: every keyed record there must have its key in ``entries``."""
    t = pa.table({"key": [k.encode() for k in entries], "map_offset": list(entries.values())}, schema=MAP_SCHEMA)
    return OffsetMap(t, latest, False, 100, start)


def kept(t: pa.Table) -> list[tuple[int, str | None, int | None]]:
    return [(r["offset"], None if r["value"] is None else r["value"].decode(), r["horizon_ms"])
            for r in t.to_pylist()]


def test_superseded_values_are_dropped_latest_kept() -> None:
    t = table([(0, "a", "1", None), (1, "b", "1", None), (2, "a", "2", None)])
    out, stats = retain(t, omap({"a": 2, "b": 1}, 2), now_ms=NOW, delete_retention_ms=DR)
    assert kept(out) == [(1, "1", None), (2, "2", None)]
    assert (stats.records_read, stats.records_kept, stats.records_removed) == (3, 2, 1)


def test_keys_absent_from_the_map_are_kept() -> None:
    t = table([(0, "old", "x", None), (1, "a", "1", None)])      # offset 0 is in the clean section
    out, _ = retain(t, omap({"a": 1}, 1, start=1), now_ms=NOW, delete_retention_ms=DR)
    assert [r[0] for r in kept(out)] == [0, 1]


def test_records_above_the_map_are_copied_untouched() -> None:
    # duplicates and unkeyed records past latest_offset stay (CLEAN-KEEP-1, first check)
    t = table([(0, "a", "1", None), (5, "a", "2", None), (6, None, "u", None), (7, "a", "3", None)])
    out, stats = retain(t, omap({"a": 0}, 4), now_ms=NOW, delete_retention_ms=DR)
    assert [r[0] for r in kept(out)] == [0, 5, 6, 7]
    assert stats.invalid_dropped == 0


def test_unkeyed_records_in_the_cleaned_range_are_dropped_and_counted() -> None:
    t = table([(0, None, "u", None), (1, "a", "1", None), (2, None, "v", None)])
    out, stats = retain(t, omap({"a": 1}, 2), now_ms=NOW, delete_retention_ms=DR)
    assert [r[0] for r in kept(out)] == [1]
    assert stats.invalid_dropped == 2


def test_empty_value_is_not_a_tombstone() -> None:
    t = table([(0, "a", "", None)])
    out, stats = retain(t, omap({"a": 0}, 0), now_ms=NOW, delete_retention_ms=DR)
    assert kept(out) == [(0, "", None)]
    assert stats.horizons_stamped == 0


def test_tombstone_phase_one_stamps_now_plus_delete_retention() -> None:
    t = table([(0, "a", "1", None), (1, "a", None, None)])
    out, stats = retain(t, omap({"a": 1}, 1), now_ms=NOW, delete_retention_ms=DR)
    assert kept(out) == [(1, None, NOW + DR)]          # KT-24: based on the clean time, not the timestamp
    assert stats.horizons_stamped == 1 and stats.tombstones_dropped == 0


def test_tombstone_phase_two_drops_at_and_after_the_horizon_only() -> None:
    t = table([(1, "a", None, NOW + 1)])                   # in the clean section of a later round
    m = omap({}, 5, start=2)
    assert kept(retain(t, m, now_ms=NOW, delete_retention_ms=DR)[0]) == [(1, None, NOW + 1)]
    out, stats = retain(t, m, now_ms=NOW + 1, delete_retention_ms=DR)
    assert kept(out) == [] and stats.tombstones_dropped == 1
    assert kept(retain(t, m, now_ms=NOW + 50, delete_retention_ms=DR)[0]) == []


def test_existing_horizon_is_never_restamped() -> None:
    t = table([(1, "a", None, NOW + 10)])
    out, stats = retain(t, omap({"a": 1}, 1), now_ms=NOW, delete_retention_ms=DR)
    assert kept(out) == [(1, None, NOW + 10)] and stats.horizons_stamped == 0


def test_kd05_superseded_tombstone_is_dropped_at_once() -> None:
    t = table([(0, "a", None, None), (1, "a", "back", None)])
    out, stats = retain(t, omap({"a": 1}, 1), now_ms=NOW, delete_retention_ms=DR)
    assert kept(out) == [(1, "back", None)]
    assert stats.tombstones_dropped == 1 and stats.horizons_stamped == 0


def test_kt23_tombstone_in_the_dirty_range_removes_earlier_values() -> None:
    t = table([(0, "a", "1", None), (1, "b", "1", None), (2, "a", None, None)])
    out, _ = retain(t, omap({"a": 2, "b": 1}, 2), now_ms=NOW, delete_retention_ms=DR)
    assert kept(out) == [(1, "1", None), (2, None, NOW + DR)]


def test_tombstone_above_the_map_is_kept_and_stamped() -> None:
    t = table([(3, "a", None, None)])
    out, _ = retain(t, omap({}, 1), now_ms=NOW, delete_retention_ms=DR)
    assert kept(out) == [(3, None, NOW + DR)]


def test_empty_table() -> None:
    out, stats = retain(table([]), omap({}, 0), now_ms=NOW, delete_retention_ms=DR)
    assert out.num_rows == 0 and stats.records_read == 0


def test_order_timestamps_and_headers_are_preserved() -> None:
    t = pa.Table.from_pylist([
        {"offset": 10, "timestamp": 7, "key": b"x", "value": b"1", "headers": [{"key": "h", "value": b"v"}],
         "horizon_ms": None},
        {"offset": 12, "timestamp": 3, "key": b"y", "value": b"2", "headers": None, "horizon_ms": None},
    ], schema=RECORD_SCHEMA)
    out, _ = retain(t, omap({"x": 10, "y": 12}, 12), now_ms=NOW, delete_retention_ms=DR)
    assert out.to_pylist() == t.to_pylist()
    assert out.schema.equals(RECORD_SCHEMA)


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from(["a", "b", "c", None]), st.sampled_from(["v", None]),
                               st.sampled_from([None, NOW - 1, NOW + 1])), min_size=8, max_size=30),
       start=st.integers(0, 4), extra=st.integers(4, 25), lo=st.integers(0, 12), width=st.integers(0, 4))
def test_droppable_ranges_keep_nothing_and_count_as_retain_does(
        rows: list[tuple[str | None, str | None, int | None]], start: int, extra: int, lo: int, width: int) -> None:
    """droppable(first, last) is exact enough for the cleaner to skip the range: retain keeps none of it,
    and dropped_whole reports the statistics retain reports for it."""
    t = table([(i, k, v, h) for i, (k, v, h) in enumerate(rows)])
    latest = min(len(rows) - 1, start + extra)
    latest_of: dict[str, int] = {k: i for i, (k, _, _) in enumerate(rows) if k is not None and start <= i <= latest}
    m = omap(latest_of, latest, start)
    first, last = lo, lo + width
    part = t.filter(pa.array([first <= o <= last for o in range(len(rows))]))
    out, stats = retain(part, m, now_ms=NOW, delete_retention_ms=DR)
    if droppable(m, first, last):
        assert out.num_rows == 0
        unkeyed, tombstones = part.column("key").null_count, part.column("value").null_count
        assert stats == dropped_whole(part.num_rows, unkeyed, tombstones)
    elif start <= first and last <= latest and part.num_rows == last - first + 1:
        assert any(first <= w <= last for w in m.winners)  # not droppable only because a winner is inside
