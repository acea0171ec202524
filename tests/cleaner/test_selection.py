"""The selection planner (pure): rules CLEAN-SEL-1..5 and CLEAN-RANGE-1..2 over hand-built LogSnapshots.

Marks name the Kafka cases they port (LogCleanerManagerTest): KT-01 (mid-segment first dirty counted in
both byte sums), KT-05/KT-06 (first dirty at or past the active segment: nothing cleanable, no endless
loop), KT-07/KT-08 (invalid checkpoints reset, even when the log is not chosen), KD-01..03 (max lag).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from cleaner.selection import LogSnapshot, SegmentFacts, choose_filthiest, plan_log

NOW = 1_000_000
LONG_MAX = 2**63 - 1


def segs(*sizes: int, span: int = 10, ts: Sequence[int] | None = None) -> tuple[SegmentFacts, ...]:
    """Contiguous segments of ``span`` offsets each, with the given byte sizes and timestamps."""
    stamps = ts if ts is not None else [NOW - 10_000] * len(sizes)
    return tuple(SegmentFacts(i * span, (i + 1) * span, size, stamps[i], stamps[i])
                 for i, size in enumerate(sizes))


def snap(segments: tuple[SegmentFacts, ...], *, log_id: str = "t/x/0", checkpoint: int | None = None,
         log_start: int = 0, active_extra: int = 5, ratio: float = 0.5, min_lag: int = 0,
         max_lag: int = LONG_MAX, horizon: int | None = None, on_idle: bool = False) -> LogSnapshot:
    active = segments[-1].end_offset if segments else 0
    return LogSnapshot(log_id, segments, active, log_start, active + active_extra, checkpoint, ratio, min_lag,
                       max_lag, horizon, on_idle)


def test_fresh_log_everything_sealed_is_cleanable() -> None:
    plan = plan_log(snap(segs(100, 100, 100)), NOW)
    assert (plan.first_dirty, plan.first_uncleanable) == (0, 30)
    assert (plan.clean_bytes, plan.cleanable_bytes, plan.cleanable_ratio) == (0, 300, 1.0)
    assert not plan.checkpoint_reset and not plan.need_compaction_now


def test_checkpoint_splits_clean_and_dirty_bytes() -> None:
    plan = plan_log(snap(segs(100, 100, 100, 100), checkpoint=20), NOW)
    assert (plan.first_dirty, plan.clean_bytes, plan.cleanable_bytes) == (20, 200, 200)
    assert plan.cleanable_ratio == 0.5


def test_kt01_mid_segment_first_dirty_counts_in_both_sums() -> None:
    plan = plan_log(snap(segs(100, 100, 100), checkpoint=15), NOW)
    assert plan.clean_bytes == 200        # segments with base < 15: [0,10) and [10,20)
    assert plan.cleanable_bytes == 200    # from the segment containing 15 up to U=30
    assert plan.first_uncleanable == 30


@pytest.mark.parametrize("checkpoint", [30, 33])
def test_kt05_kt06_first_dirty_at_or_past_active_base_cleans_nothing(checkpoint: int) -> None:
    # KAFKA-9826 / KAFKA-9133: no segment lies in [first_dirty, U): cleanable bytes 0, never chosen.
    s = snap(segs(100, 100, 100), checkpoint=checkpoint, ratio=0.0)
    plan = plan_log(s, NOW)
    assert (plan.first_dirty, plan.first_uncleanable) == (checkpoint, 30)
    assert plan.cleanable_bytes == 0 and not plan.checkpoint_reset
    best, _ = choose_filthiest([s], NOW)
    assert best is None


def test_kt05_log_start_past_active_base() -> None:
    # KAFKA-9133: DeleteRecords moved the log start into the active segment; the checkpoint is below it.
    s = snap(segs(100, 100), checkpoint=5, log_start=22, active_extra=10)
    plan = plan_log(s, NOW)
    assert plan.first_dirty == 22 and plan.checkpoint_reset
    assert plan.cleanable_bytes == 0
    assert choose_filthiest([s], NOW)[0] is None


def test_kt06_bytes_past_u_are_not_in_the_ratio() -> None:
    # min lag makes segment [20,30) uncleanable: U = 20; its bytes count nowhere.
    s = snap(segs(100, 100, 900, ts=[0, 0, NOW]), min_lag=1000)
    plan = plan_log(s, NOW)
    assert plan.first_uncleanable == 20
    assert (plan.clean_bytes, plan.cleanable_bytes) == (0, 200)


@pytest.mark.parametrize(("checkpoint", "log_start"), [(3, 10), (99, 0)])
def test_kt07_kt08_invalid_checkpoint_resets_to_log_start(checkpoint: int, log_start: int) -> None:
    plan = plan_log(snap(segs(100, 100, 100), checkpoint=checkpoint, log_start=log_start), NOW)
    assert plan.checkpoint_reset
    assert plan.first_dirty == log_start


def test_kt07_kt08_reset_is_reported_even_when_not_chosen() -> None:
    dirty = snap(segs(100, 100), log_id="a")                                # ratio 1.0, chosen
    invalid = snap(segs(100, 100), log_id="b", checkpoint=999, ratio=1.0)   # never eligible
    best, plans = choose_filthiest([dirty, invalid], NOW)
    assert best is not None and best.log_id == "a"
    assert [p.log_id for p in plans if p.checkpoint_reset] == ["b"]


def test_valid_checkpoint_at_the_log_end_is_not_reset() -> None:
    s = snap(segs(100, 100), checkpoint=25, active_extra=5)   # LEO = 25
    assert not plan_log(s, NOW).checkpoint_reset


def test_ratio_threshold_is_strict() -> None:
    at = snap(segs(100, 100, 100, 100), checkpoint=20, ratio=0.5)          # exactly 0.5
    above = snap(segs(100, 100, 100, 101), checkpoint=20, ratio=0.5)       # 201/401
    assert choose_filthiest([at], NOW)[0] is None
    chosen = choose_filthiest([above], NOW)[0]
    assert chosen is not None and chosen.cleanable_ratio > 0.5


def test_dirtiest_eligible_log_is_chosen() -> None:
    logs = [snap(segs(100, 100, 100, 100), log_id="quarter", checkpoint=30, ratio=0.1),
            snap(segs(100, 100, 100, 100), log_id="three-quarters", checkpoint=10, ratio=0.1),
            snap(segs(100, 100, 100, 100), log_id="half", checkpoint=20, ratio=0.1)]
    best, plans = choose_filthiest(logs, NOW)
    assert best is not None and best.log_id == "three-quarters"
    assert len(plans) == 3


def test_in_progress_and_uncleanable_logs_are_skipped() -> None:
    logs = [snap(segs(100), log_id="a"), snap(segs(100, 100, 100), log_id="b", checkpoint=10)]
    best, plans = choose_filthiest(logs, NOW, skip=frozenset({"a"}))
    assert best is not None and best.log_id == "b"
    assert [p.log_id for p in plans] == ["b"]


def test_empty_log_is_never_chosen() -> None:
    s = LogSnapshot("e", (), 0, 0, 0, None, 0.0, 0, LONG_MAX)
    plan = plan_log(s, NOW)
    assert plan.total_bytes == 0
    assert choose_filthiest([s], NOW)[0] is None


def test_min_compaction_lag_bounds_u_at_the_first_young_segment() -> None:
    s = snap(segs(100, 100, 100, ts=[NOW - 5000, NOW - 500, NOW - 5000]), min_lag=1000)
    plan = plan_log(s, NOW)
    assert plan.first_uncleanable == 10    # segment [10,20) is too young, and so is all after it
    assert plan.cleanable_bytes == 100


def test_min_lag_with_everything_young_cleans_nothing() -> None:
    s = snap(segs(100, 100, ts=[NOW, NOW]), min_lag=1000, ratio=0.0)
    plan = plan_log(s, NOW)
    assert plan.first_uncleanable == 0 and plan.cleanable_bytes == 0
    assert choose_filthiest([s], NOW)[0] is None


def test_kd02_max_lag_makes_a_log_eligible_below_the_ratio() -> None:
    s = snap(segs(100, 100, 100, 100, ts=[NOW - 9000] * 4), checkpoint=30, ratio=0.9, max_lag=5000)
    plan = plan_log(s, NOW)
    assert plan.max_compaction_delay_ms == 4000 and plan.need_compaction_now
    assert plan.cleanable_ratio == 0.25
    best, _ = choose_filthiest([s], NOW)
    assert best is not None


def test_max_lag_uses_the_earliest_first_batch_timestamp_of_dirty_segments() -> None:
    # the clean segment [0,10) is very old but does not count; dirty ones from the checkpoint do.
    s = snap(segs(100, 100, 100, ts=[1, NOW - 7000, NOW - 6000]), checkpoint=10, max_lag=5000)
    assert plan_log(s, NOW).max_compaction_delay_ms == 2000


def test_kd03_segments_without_timestamps_never_trigger_max_lag() -> None:
    s = snap(segs(100, 100, ts=[0, -1]), max_lag=1, ratio=1.0)
    plan = plan_log(s, NOW)
    assert plan.max_compaction_delay_ms == 0
    assert choose_filthiest([s], NOW)[0] is None


def test_kd01_max_lag_without_cleanable_bytes_is_not_eligible() -> None:
    # the overdue data sits in the active segment only (idle partition): nothing sealed is dirty.
    s = snap(segs(100, 100, ts=[NOW - 9000, NOW - 9000]), checkpoint=20, max_lag=10, ratio=1.0)
    plan = plan_log(s, NOW)
    assert plan.cleanable_bytes == 0 and plan.max_compaction_delay_ms == 0
    assert choose_filthiest([s], NOW)[0] is None


def test_max_lag_does_not_change_priority() -> None:
    overdue = snap(segs(100, 100, 100, 100, ts=[NOW - 9000] * 4), log_id="overdue", checkpoint=30, ratio=0.2,
                   max_lag=1000)
    dirtier = snap(segs(100, 100, 100, 100), log_id="dirtier", checkpoint=10, ratio=0.2)
    best, _ = choose_filthiest([overdue, dirtier], NOW)
    assert best is not None and best.log_id == "dirtier"


def test_tombstone_cleanup_on_idle_is_opt_in() -> None:
    clean = segs(100, 100)
    kafka = snap(clean, checkpoint=20, ratio=0.5, horizon=NOW - 1)
    opt_in = snap(clean, checkpoint=20, ratio=0.5, horizon=NOW - 1, on_idle=True)
    not_yet = snap(clean, checkpoint=20, ratio=0.5, horizon=NOW + 1, on_idle=True)
    assert choose_filthiest([kafka], NOW)[0] is None
    best = choose_filthiest([opt_in], NOW)[0]
    assert best is not None and best.tombstones_due
    assert choose_filthiest([not_yet], NOW)[0] is None


def test_horizon_exactly_now_is_due() -> None:
    s = snap(segs(100), checkpoint=10, horizon=NOW, on_idle=True)
    assert plan_log(s, NOW).tombstones_due
