"""Pure planner tests (no store): every rule RET-1..9 of docs/design/kafka-rules.md and its boundaries.

Kafka test cases are cited by their marks (KT-55/KT-56/KT-61/KT-62/KT-63) and UnifiedLogTest names.
"""

from __future__ import annotations

from s3stream.policy.retention import Deletion, RetentionPlan, SegmentSnapshot

from .planner_kit import BOTH, COMPACT, DELETE, NOW, build, deleted_bases, leo, plan, reasons, uniform

# -- RET-1: order and policies -----------------------------------------------------------------------


def test_ret1_order_is_log_start_then_size_then_time() -> None:
    """RET-1: each step runs on what the previous one left, and deletions are labelled in that order."""
    segs = build([(5, 50, NOW - 100_000), (5, 50, NOW - 100_000), (5, 50, NOW - 100_000),
                  (5, 50, NOW - 100_000), (5, 50, NOW)])
    p = plan(segs, lso=5, nbytes=150, ms=50_000)
    # RET-5 drops [0..4] (next base 5 <= lso); RET-6 then sees 200 bytes > 150: drops [5..9]; RET-7 drops the
    # rest that expired ([10..14], [15..19]); the young active segment stays.
    assert reasons(p) == ["log_start_offset", "retention_bytes", "retention_ms", "retention_ms"]
    assert deleted_bases(p) == [0, 5, 10, 15]
    assert p.new_log_start_offset == 20
    assert not p.roll_first


def test_ret1_size_step_is_recomputed_after_the_log_start_step() -> None:
    """RET-1: RET-6's total excludes what RET-5 already deleted, so it deletes less than on the full log."""
    segs = uniform(4)  # 200 bytes
    alone = plan(segs, nbytes=100)
    assert deleted_bases(alone) == [0, 5]
    after_lso = plan(segs, lso=5, nbytes=100)  # RET-5 takes [0..4]; 150 left, so RET-6 takes one more only
    assert deleted_bases(after_lso) == [0, 5]
    assert reasons(after_lso) == ["log_start_offset", "retention_bytes"]


def test_ret1_kt63_log_start_deletion_unblocks_time_deletion_in_the_same_pass() -> None:
    """KT-63 (KAFKA-12177, UnifiedLogTest.testRetentionIdempotency): a future-timestamped head segment
    below the log start goes first (RET-5), so time retention can delete the next one in the same pass."""
    segs = build([(1, 30, NOW + 100), (1, 30, NOW - 1000), (1, 30, NOW + 100)])
    p = plan(segs, lso=1, ms=100)
    assert reasons(p) == ["log_start_offset", "retention_ms"]
    assert deleted_bases(p) == [0, 1]
    assert p.new_log_start_offset == 2
    # the old (wrong) order would have been blocked by the future segment: time alone deletes nothing
    assert plan(segs, ms=100).deletions == ()


def test_ret1_compact_only_runs_only_the_log_start_step() -> None:
    """RET-1/KT-61: with cleanup.policy=compact, size and time limits are ignored; RET-5 still applies."""
    segs = uniform(3, ts=NOW - 10**9)
    assert plan(segs, policy=COMPACT, ms=0, nbytes=0).deletions == ()
    p = plan(segs, policy=COMPACT, lso=5, ms=0, nbytes=0)
    assert deleted_bases(p) == [0] and reasons(p) == ["log_start_offset"]
    assert p.new_log_start_offset == 5


def test_ret1_compact_delete_runs_all_three_steps() -> None:
    segs = uniform(3, ts=NOW - 10**9)
    p = plan(segs, policy=BOTH, lso=5, nbytes=50, ms=1)
    assert reasons(p) == ["log_start_offset", "retention_bytes", "retention_ms"]
    assert deleted_bases(p) == [0, 5, 10]
    assert p.roll_first


def test_ret1_empty_policy_is_infinite_retention_but_honours_the_log_start() -> None:
    """KAFKA-19112: an empty cleanup.policy keeps everything; only RET-5 runs (like compact-only)."""
    segs = uniform(3, ts=NOW - 10**9)
    assert plan(segs, policy=frozenset(), ms=0, nbytes=0).deletions == ()
    assert deleted_bases(plan(segs, policy=frozenset(), lso=10)) == [0, 5]


# -- RET-3: the shared walk ------------------------------------------------------------------------


def test_ret3_deletions_are_a_prefix_an_old_segment_behind_a_young_one_stays() -> None:
    segs = build([(5, 50, NOW - 100), (5, 50, NOW - 10**6), (5, 50, NOW - 10**6)])
    assert plan(segs, ms=1000).deletions == ()


def test_r3a_never_past_the_high_watermark() -> None:
    """RET-3(a): a segment whose upper bound is above HW (= the log end passed in) is never deleted."""
    segs = uniform(3, ts=NOW - 10**6)
    p = plan(segs, ms=0, end=9)  # HW inside the second segment: only [0..4] has upper bound 5 <= 9
    assert deleted_bases(p) == [0]
    assert p.new_log_start_offset == 5
    p = plan(segs, ms=0, end=4)  # HW inside the first segment: nothing
    assert p.deletions == () and p.new_log_start_offset == 0


def test_r3c_the_last_segment_is_kept_when_empty() -> None:
    """RET-3(c): an empty active segment is never deletable, so a pass after a full deletion is a no-op."""
    segs = build([(5, 50, NOW - 10**6), (0, 0, NOW)])
    p = plan(segs, ms=0, nbytes=0)
    assert deleted_bases(p) == [0]
    assert not p.roll_first  # the active segment is empty: nothing to roll
    assert p.new_log_start_offset == 5
    assert plan(build([(0, 0, NOW)]), ms=0, nbytes=0).deletions == ()


def test_ret3_a_non_empty_active_segment_is_deletable_and_needs_a_roll_first() -> None:
    """RET-3 + RET-4: the active segment may be deleted (HW = LEO), which requires rolling it first."""
    segs = uniform(3, ts=NOW - 10**6)
    p = plan(segs, ms=1000)
    assert deleted_bases(p) == [0, 5, 10]
    assert p.roll_first
    assert p.keys == ("seg-00000", "seg-00005")  # the active one has no object key yet
    assert p.new_log_start_offset == 15 == leo(segs)


# -- RET-4: the delete action ----------------------------------------------------------------------


def test_ret4_log_start_moves_to_the_next_segment_base_never_backwards() -> None:
    segs = uniform(3, ts=NOW - 10**6)
    segs[-1] = SegmentSnapshot(10, 15, 50, NOW, 5, None)
    assert plan(segs, ms=1000).new_log_start_offset == 10
    # a log start already inside a later segment stays where it is (max)
    assert plan(segs, ms=1000, lso=12).new_log_start_offset == 12


def test_ret4_nothing_to_delete_keeps_the_log_start_and_needs_no_roll() -> None:
    segs = uniform(3, ts=NOW)
    p = plan(segs, lso=3, ms=1000, nbytes=10_000)
    assert p == RetentionPlan((), 3, False)
    assert p.keys == () and p.bytes_deleted == 0 and p.by_reason() == {}


def test_ret4_full_deletion_moves_the_log_start_to_the_log_end() -> None:
    segs = uniform(2, ts=NOW - 10**6)
    p = plan(segs, nbytes=0)
    assert p.roll_first and p.new_log_start_offset == 10
    assert p.bytes_deleted == 100
    assert p.by_reason() == {"retention_bytes": (2, 100)}


# -- RET-5: log start offset breach ----------------------------------------------------------------


def test_ret5_kt62_whole_segments_below_the_log_start_go_the_one_containing_it_stays() -> None:
    """KT-62 (UnifiedLogTest.shouldDeleteStartOffsetBreachedSegments / testLogDeletionAfterDeleteRecords)."""
    segs = uniform(3)  # [0..4] [5..9] [10..14], the last active
    assert plan(segs, lso=1).deletions == ()
    assert plan(segs, lso=4).deletions == ()          # next base 5 > 4: [0..4] still holds offset 4
    p = plan(segs, lso=5)                             # exactly the next base: [0..4] is wholly below
    assert deleted_bases(p) == [0] and p.new_log_start_offset == 5
    p = plan(segs, lso=6)
    assert deleted_bases(p) == [0] and p.new_log_start_offset == 6
    p = plan(segs, lso=15)                            # the active segment [10..14] has no next: kept
    assert deleted_bases(p) == [0, 5] and p.new_log_start_offset == 15
    assert not p.roll_first


# -- RET-6: size breach ----------------------------------------------------------------------------


def test_ret6_kt55_deletes_down_to_retention_bytes() -> None:
    """KT-55 (shouldDeleteSizeBasedSegments): 15 records in 3 segments, retention of 10 records' bytes."""
    p = plan(uniform(3), nbytes=100)
    assert deleted_bases(p) == [0] and p.new_log_start_offset == 5


def test_ret6_kt56_size_exactly_at_the_threshold_deletes_nothing() -> None:
    """KT-56 (shouldNotDeleteSizeBasedSegmentsWhenUnderThreshold): size == retention.bytes is not over."""
    assert plan(uniform(3), nbytes=150).deletions == ()
    assert plan(uniform(3), nbytes=151).deletions == ()


def test_ret6_retention_bytes_is_a_lower_bound_on_what_is_kept() -> None:
    """RET-6 / KAFKA-8534: never delete a segment if that would leave less than retention.bytes."""
    segs = uniform(3)
    p = plan(segs, nbytes=99)  # deleting two segments would leave 50 < 99
    assert deleted_bases(p) == [0]
    kept = sum(s.size_bytes for s in segs) - p.bytes_deleted
    assert kept == 100 >= 99


def test_ret6_stops_at_the_first_segment_that_does_not_fit() -> None:
    """RET-6 is a prefix walk: a big head segment blocks smaller later ones that would fit."""
    segs = build([(5, 80, NOW), (1, 10, NOW), (1, 10, NOW), (1, 10, NOW)])
    assert plan(segs, nbytes=50).deletions == ()  # diff 60 < 80: the head stays, and so does the rest


def test_ret6_counts_the_active_segment() -> None:
    """RET-6: size sums every segment including the active one (Kafka's ``size``)."""
    segs = build([(5, 50, NOW), (5, 50, NOW), (1, 60, NOW)])
    assert deleted_bases(plan(segs, nbytes=100)) == [0]  # 160 - 100 = 60: the 50-byte head goes


def test_ret6_negative_retention_bytes_disables_the_limit() -> None:
    assert plan(uniform(3), nbytes=-1).deletions == ()
    assert plan(uniform(3), nbytes=-5).deletions == ()


def test_ret6_zero_retention_bytes_deletes_everything_after_a_roll() -> None:
    p = plan(uniform(3), nbytes=0)
    assert deleted_bases(p) == [0, 5, 10] and p.roll_first and p.new_log_start_offset == 15


# -- RET-7: time breach ----------------------------------------------------------------------------


def test_ret7_strictly_older_than_retention_ms() -> None:
    ms = 60_000
    at_limit = build([(5, 50, NOW - ms), (5, 50, NOW)])
    assert plan(at_limit, ms=ms).deletions == ()
    over = build([(5, 50, NOW - ms - 1), (5, 50, NOW)])
    assert deleted_bases(plan(over, ms=ms)) == [0]


def test_ret7_uses_the_largest_record_timestamp_of_the_segment() -> None:
    """Records older than retention stay while they share a segment with a younger record."""
    segs = build([(5, 50, NOW - 10), (5, 50, NOW)])  # largest ts young, whatever the oldest record
    assert plan(segs, ms=1000).deletions == ()


def test_ret7_a_future_timestamp_blocks_every_later_segment() -> None:
    segs = build([(5, 50, NOW - 10**6), (5, 50, NOW + 10**6), (5, 50, NOW - 10**6), (5, 50, NOW)])
    p = plan(segs, ms=1000)
    assert deleted_bases(p) == [0]
    assert plan(segs, ms=1000, now=NOW + 10**7).deletions != ()  # once it is in the past, it goes


def test_ret7_negative_retention_ms_disables_the_limit() -> None:
    assert plan(uniform(3, ts=0), ms=-1).deletions == ()


def test_ret7_zero_retention_ms_deletes_everything_older_than_now() -> None:
    segs = build([(5, 50, NOW - 1), (5, 50, NOW)])
    assert deleted_bases(plan(segs, ms=0)) == [0]


# -- RET-8/RET-9: log start movement and segment granularity -----------------------------------------


def test_ret9_whole_segments_only_the_log_start_may_point_inside_one() -> None:
    segs = uniform(3)
    p = plan(segs, lso=7, nbytes=100)  # RET-5 drops [0..4]; 100 bytes left: RET-6 stops
    assert [(d.segment.base_offset, d.segment.end_offset) for d in p.deletions] == [(0, 5)]
    assert p.new_log_start_offset == 7  # inside [5..9]: offsets 5, 6 stay stored but unreadable


def test_ret8_the_new_log_start_never_passes_the_log_end() -> None:
    segs = uniform(2, ts=NOW - 10**6)
    p = plan(segs, ms=0, lso=10)
    assert p.new_log_start_offset == 10 == leo(segs)


def test_plan_reports_bytes_and_reasons() -> None:
    segs = build([(5, 40, NOW - 10**6), (5, 60, NOW - 10**6), (5, 50, NOW)])
    p = plan(segs, lso=5, ms=1000)
    assert p.by_reason() == {"log_start_offset": (1, 40), "retention_ms": (1, 60)}
    assert p.bytes_deleted == 100
    assert p.deletions[0] == Deletion(segs[0], "log_start_offset")


def test_planner_on_an_empty_log_does_nothing() -> None:
    assert plan([], ms=0, nbytes=0) == RetentionPlan((), 0, False)


def test_compact_policy_constants_are_what_the_store_parses() -> None:
    """The store parses ``cleanup.policy`` into the same frozensets the tests pass the planner."""
    from s3stream.base.topic_config import TopicConfig

    assert TopicConfig.from_overrides({"cleanup.policy": "compact,delete"}).cleanup_policy == BOTH
    assert TopicConfig.from_overrides({"cleanup.policy": "compact"}).cleanup_policy == COMPACT
    assert TopicConfig.from_overrides({}).cleanup_policy == DELETE
