"""Rules RET-1..9 (docs/design/kafka-rules.md) end to end: a real store, a ManualClock, explicit record
timestamps and ``roll()`` to shape segments; Kafka's UnifiedLogTest scenarios KT-55/KT-56/KT-62 ported.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import s3stream
from s3stream import ManualClock, OffsetOutOfRange

from .store_kit import DAY, HOUR, REC_BYTES, T0, append_n, exists, offsets, open_at, ranges, shape


def _fifteen_in_three(store: s3stream.Store, config: dict[str, object]) -> s3stream.PartitionLog:
    """Kafka's fixture: 15 equal records, segment.bytes = 5 records, so [0..4] [5..9] [10..14] (active)."""
    store.create_topic("t", config={"segment.bytes": 5 * REC_BYTES, **config})
    log = store.partition("t", 0)
    append_n(log, 15, T0)
    log.flush()
    assert ranges(log) == [(0, 4, True), (5, 9, True), (10, 14, False)]
    return log


# -- RET-5 / KT-62 -----------------------------------------------------------------------------------


def test_ret5_kt62_delete_records_then_retention_deletes_whole_segments_below(store: s3stream.Store) -> None:
    """KT-62 (UnifiedLogTest.shouldDeleteStartOffsetBreachedSegments / testLogDeletionAfterDeleteRecords)."""
    log = _fifteen_in_three(store, {})
    for target, expected_segments in ((1, 3), (6, 2), (15, 1)):
        assert log.delete_records(target) == target
        store.run_retention()
        assert len(log.segments()) == expected_segments
        assert log.log_start_offset == target
        assert log.log_end_offset == 15  # RET-4: deletion never moves the log end
    # the segment containing the log start (the active [10..14]) stays, though wholly unreadable
    assert ranges(log) == [(10, 14, False)]
    with pytest.raises(OffsetOutOfRange):
        log.read(14)
    assert log.read(15) == []


# -- RET-6 / KT-55 / KT-56 ---------------------------------------------------------------------------


def test_ret6_kt55_size_retention_deletes_the_oldest_segment(store: s3stream.Store) -> None:
    """KT-55 (shouldDeleteSizeBasedSegments): retention.bytes of 10 records leaves 2 of 3 segments."""
    log = _fifteen_in_three(store, {"retention.bytes": 10 * REC_BYTES})
    report = store.run_retention()
    assert ranges(log) == [(5, 9, True), (10, 14, False)]
    assert log.log_start_offset == 5
    assert report.segments_deleted == 1 and report.bytes_deleted == 5 * REC_BYTES
    assert report.by_reason == {"retention_bytes": [1, 5 * REC_BYTES]}
    assert offsets(log) == list(range(5, 15))


def test_ret6_kt56_size_exactly_at_the_threshold_deletes_nothing(store: s3stream.Store) -> None:
    """KT-56 (shouldNotDeleteSizeBasedSegmentsWhenUnderThreshold): size == retention.bytes keeps all."""
    log = _fifteen_in_three(store, {"retention.bytes": 15 * REC_BYTES})
    report = store.run_retention()
    assert len(log.segments()) == 3 and log.log_start_offset == 0
    assert report.partitions_changed == 0 and report.segments_deleted == 0


def test_ret6_retention_bytes_is_a_lower_bound(store: s3stream.Store) -> None:
    """RET-6 / KAFKA-8534: 15 records held, 9 allowed: only one segment goes, 10 records stay (>= 9)."""
    log = _fifteen_in_three(store, {"retention.bytes": 9 * REC_BYTES})
    store.run_retention()
    assert sum(s.size_bytes for s in log.segments()) == 10 * REC_BYTES
    assert log.log_start_offset == 5


def test_ret6_the_active_segment_counts_and_can_go(store: s3stream.Store) -> None:
    """RET-6 sums every segment, the active one included; retention.bytes=0 empties the log (after a roll)."""
    log = _fifteen_in_three(store, {"retention.bytes": 0})
    store.run_retention()
    assert log.log_start_offset == log.log_end_offset == 15
    assert ranges(log) == [(15, 14, False)]  # one new, empty active segment
    assert log.manifest().segments == ()


# -- RET-7 -------------------------------------------------------------------------------------------


def test_ret7_time_retention_is_strict_and_per_segment(store: s3stream.Store, clock: ManualClock) -> None:
    store.create_topic("t", config={"retention.ms": HOUR})
    log = store.partition("t", 0)
    shape(log, [[T0], [T0 + 10], [T0 + 20]])
    clock.set(T0 + HOUR)  # now - ts == retention.ms: not older than it
    assert store.run_retention().partitions_changed == 0
    clock.set(T0 + HOUR + 1)
    store.run_retention()
    assert log.log_start_offset == 1 and ranges(log) == [(1, 1, True), (2, 2, False)]
    clock.set(T0 + HOUR + 11)
    store.run_retention()
    assert log.log_start_offset == 2 and ranges(log) == [(2, 2, False)]


def test_ret7_old_records_stay_while_their_segment_holds_a_younger_one(
        store: s3stream.Store, clock: ManualClock) -> None:
    """RET-7 uses the segment's largest timestamp: two records two days old survive a one-day retention."""
    store.create_topic("t", config={"retention.ms": DAY})
    log = store.partition("t", 0)
    shape(log, [[T0 - 2 * DAY, T0 - 2 * DAY, T0], [T0]])
    clock.set(T0 + 1)
    assert store.run_retention().segments_deleted == 0
    assert [r.timestamp for r in log.read(0)] == [T0 - 2 * DAY, T0 - 2 * DAY, T0, T0]


def test_ret7_uses_record_timestamps_not_upload_time(store: s3stream.Store, clock: ManualClock) -> None:
    """RET-7/ROLL-5: freshly uploaded old records go at once; old objects holding young records stay."""
    store.create_topic("old", config={"retention.ms": DAY})
    old = store.partition("old", 0)
    shape(old, [[T0 - 2 * DAY], [T0]])            # uploaded now, records two days old
    store.create_topic("young", config={"retention.ms": HOUR})
    young = store.partition("young", 0)
    shape(young, [[T0 + 2 * HOUR], [T0 + 3 * HOUR]])  # records stamped in the future of the upload
    store.run_retention()
    assert old.log_start_offset == 1
    clock.set(T0 + 3 * HOUR)                     # objects are 3 h old, the head record exactly 1 h
    store.run_retention()
    assert young.log_start_offset == 0
    clock.set(T0 + 3 * HOUR + 1)
    store.run_retention()
    assert young.log_start_offset == 1


def test_ret7_a_future_timestamp_blocks_every_later_segment(store: s3stream.Store, clock: ManualClock) -> None:
    store.create_topic("t", config={"retention.ms": DAY})
    log = store.partition("t", 0)
    shape(log, [[T0 - 3 * DAY], [T0 + 2 * DAY], [T0 - 3 * DAY], [T0 - 3 * DAY], [T0]])
    store.run_retention()
    assert log.log_start_offset == 1  # [1] is in the future: [2] and [3] are expired but stay
    assert [b for b, _, _ in ranges(log)] == [1, 2, 3, 4]
    clock.set(T0 + 3 * DAY + 1)  # the future segment is now over a day old: everything goes
    store.run_retention()
    assert log.log_start_offset == log.log_end_offset == 5


def test_ret7_ret4_the_active_segment_is_deleted_after_a_roll(store: s3stream.Store, clock: ManualClock) -> None:
    """RET-3+RET-4: when every segment is expired the active one is rolled first, then all are deleted;
    the log keeps a new empty active segment at the unchanged log end, and appends continue there."""
    store.create_topic("t", config={"retention.ms": DAY})
    log = store.partition("t", 0)
    shape(log, [[T0], [T0, T0]])
    keys_before = [s.key for s in log.segments() if s.sealed]
    clock.set(T0 + DAY + 1)
    report = store.run_retention()
    assert report.segments_deleted == 2 and report.by_reason == {"retention_ms": [2, 3 * REC_BYTES]}
    assert log.log_end_offset == 3 and log.log_start_offset == 3
    assert ranges(log) == [(3, 2, False)]
    m = log.manifest()
    assert m.segments == () and m.next_offset == 3
    assert set(keys_before) < {r.key for r in m.removed}  # the rolled active segment was removed too
    with pytest.raises(OffsetOutOfRange):
        log.read(2)
    assert log.read(3) == []
    log.append([s3stream.Record(b"k", b"new", clock.now_ms())])
    assert [(r.offset, r.value) for r in log.read(3)] == [(3, b"new")]
    # RET-3(c): the new active segment is young (and even an empty one is never deleted): a no-op pass
    assert store.run_retention().partitions_changed == 0


def test_r3c_an_emptied_log_stays_empty_and_passes_are_no_ops(store: s3stream.Store, clock: ManualClock) -> None:
    store.create_topic("t", config={"retention.ms": 0})
    log = store.partition("t", 0)
    shape(log, [[T0 - 1], [T0 - 1]])
    store.run_retention()
    seq = log.manifest().seq
    for _ in range(2):
        clock.advance(DAY)
        assert store.run_retention().partitions_changed == 0
    assert log.manifest().seq == seq  # no commit at all on a no-op pass
    assert ranges(log) == [(2, 1, False)]


# -- RET-8 / RET-9 -----------------------------------------------------------------------------------


def test_ret8_reads_below_the_new_log_start_fail_before_the_objects_are_deleted(
        store: s3stream.Store, clock: ManualClock) -> None:
    store.create_topic("t", config={"retention.ms": DAY})
    log = store.partition("t", 0)
    shape(log, [[T0 - 2 * DAY] * 2, [T0 - 2 * DAY] * 2, [T0]])
    dropped = [s.key for s in log.segments() if s.sealed]
    store.run_retention()
    assert all(k is not None and exists(store.object_store, k) for k in dropped)  # still in the bucket
    for offset in (0, 1, 2, 3):
        with pytest.raises(OffsetOutOfRange) as info:
            log.read(offset)
        assert info.value.log_start_offset == 4
    assert offsets(log) == [4]


def test_ret9_log_start_inside_a_segment_keeps_the_segment(store: s3stream.Store) -> None:
    """RET-9: only whole segments go; offsets 5 and 6 stay stored in [5..9] but are unreadable."""
    log = _fifteen_in_three(store, {})
    log.delete_records(7)
    store.run_retention()
    assert ranges(log) == [(5, 9, True), (10, 14, False)]
    assert log.log_start_offset == 7
    for offset in (5, 6):
        with pytest.raises(OffsetOutOfRange):
            log.read(offset)
    assert offsets(log) == list(range(7, 15))


# -- RET-2: who runs retention -------------------------------------------------------------------------


def test_ret2_without_the_cleaner_compacted_topics_get_no_retention(
        mem_url: str, tmp_path: Path, clock: ManualClock) -> None:
    """CFG-2 log.cleaner.enable=false: LogManager runs retention only on non-compacted logs."""
    with open_at(mem_url, tmp_path / "wal", clock, log_cleaner_enable=False) as store:
        for name, policy in (("d", "delete"), ("cd", "compact,delete")):
            store.create_topic(name, config={"cleanup.policy": policy, "retention.ms": DAY})
            shape(store.partition(name, 0), [[T0 - 2 * DAY], [T0]])
        report = store.run_retention()
        assert report.partitions_checked == 1
        assert store.partition("d", 0).log_start_offset == 1
        assert store.partition("cd", 0).log_start_offset == 0


def test_ret2_retention_covers_every_partition_of_every_topic(store: s3stream.Store, clock: ManualClock) -> None:
    store.create_topic("a", partitions=3, config={"retention.ms": DAY})
    store.create_topic("b", partitions=2, config={"retention.ms": DAY})
    for name, n in (("a", 3), ("b", 2)):
        for p in range(n):
            shape(store.partition(name, p), [[T0 - 2 * DAY]] * (p + 1) + [[T0]])
    report = store.run_retention()
    assert report.partitions_checked == 5 and report.partitions_changed == 5
    assert report.segments_deleted == (1 + 2 + 3) + (1 + 2)
    for name, n in (("a", 3), ("b", 2)):
        for p in range(n):
            assert store.partition(name, p).log_start_offset == p + 1
