"""Hypothesis properties of the pure planner over arbitrary logs, configs and clocks (rules RET-1..9).

* deletions are always a prefix of whole segments (RET-3, RET-9), labelled in RET-1 order;
* the size step never leaves less than retention.bytes when the log held at least that much (RET-6);
* the log start never moves backwards and never passes the log end (RET-4, RET-8);
* a roll is requested exactly when the active segment is deleted (RET-4);
* planning again on the result deletes nothing (idempotence, KAFKA-12177 / KT-63).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from s3stream.policy.retention import RetentionPlan, SegmentSnapshot, plan_retention

from .planner_kit import NOW, build

_ORDER = {"log_start_offset": 0, "retention_bytes": 1, "retention_ms": 2}
_POLICIES = [frozenset(), frozenset({"delete"}), frozenset({"compact"}), frozenset({"compact", "delete"})]


@st.composite
def logs(draw: st.DrawFn) -> tuple[list[SegmentSnapshot], int, dict[str, object]]:
    """A contiguous log (sealed segments + a possibly empty active one), a log start and a config."""
    sealed = draw(st.lists(st.tuples(st.integers(1, 20), st.integers(1, 500),
                                     st.integers(NOW - 100_000, NOW + 1_000)), max_size=8))
    active_count = draw(st.integers(0, 20))
    active = (active_count, draw(st.integers(1, 500)) if active_count else 0, draw(st.integers(NOW - 100_000, NOW)))
    segs = build([*sealed, active])
    end = segs[-1].end_offset
    lso = draw(st.integers(0, end))
    cfg: dict[str, object] = {
        "policy": draw(st.sampled_from(_POLICIES)),
        "retention_ms": draw(st.one_of(st.just(-1), st.integers(0, 120_000))),
        "retention_bytes": draw(st.one_of(st.just(-1), st.integers(0, 5_000))),
        "now_ms": draw(st.integers(NOW - 1_000, NOW + 50_000)),
    }
    return segs, lso, cfg


def _plan(segs: list[SegmentSnapshot], lso: int, cfg: dict[str, object]) -> RetentionPlan:
    end = segs[-1].end_offset if segs else 0
    return plan_retention(segs, log_start_offset=lso, log_end_offset=end, policy=cfg["policy"],  # type: ignore[arg-type]
                          retention_ms=cfg["retention_ms"], retention_bytes=cfg["retention_bytes"],  # type: ignore[arg-type]
                          now_ms=cfg["now_ms"])  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(logs())
def test_plan_invariants(case: tuple[list[SegmentSnapshot], int, dict[str, object]]) -> None:
    segs, lso, cfg = case
    p = _plan(segs, lso, cfg)
    _check_prefix_in_rule_order(p, segs, cfg)
    _check_log_start(p, segs, lso)
    _check_size_step(p, segs, cfg)
    _check_roll_first(p, segs)


def _check_prefix_in_rule_order(p: RetentionPlan, segs: list[SegmentSnapshot], cfg: dict[str, object]) -> None:
    """RET-3/RET-9: a prefix of whole segments; RET-1: log start, then size, then time; compact: RET-5 only."""
    assert [d.segment for d in p.deletions] == segs[:len(p.deletions)]
    ranks = [_ORDER[d.reason] for d in p.deletions]
    assert ranks == sorted(ranks)
    if "delete" not in cfg["policy"]:  # type: ignore[operator]
        assert set(ranks) <= {0}


def _check_log_start(p: RetentionPlan, segs: list[SegmentSnapshot], lso: int) -> None:
    """RET-4/RET-8: never backwards, never past the log end, past every deleted offset."""
    assert lso <= p.new_log_start_offset <= segs[-1].end_offset
    if p.deletions:
        assert p.new_log_start_offset >= p.deletions[-1].segment.end_offset
    else:
        assert p.new_log_start_offset == lso


def _check_size_step(p: RetentionPlan, segs: list[SegmentSnapshot], cfg: dict[str, object]) -> None:
    """RET-6: what the size step leaves is >= retention.bytes whenever the log it saw held that much."""
    limit = cfg["retention_bytes"]
    assert isinstance(limit, int)
    by_lso = {d.segment for d in p.deletions if d.reason == "log_start_offset"}
    by_size = {d.segment for d in p.deletions if d.reason == "retention_bytes"}
    before_size = [s for s in segs if s not in by_lso]
    if limit >= 0 and sum(s.size_bytes for s in before_size) >= limit:
        assert sum(s.size_bytes for s in before_size if s not in by_size) >= limit


def _check_roll_first(p: RetentionPlan, segs: list[SegmentSnapshot]) -> None:
    """RET-4: a roll is requested exactly when the (non-empty) active segment goes, as the last of all."""
    active_deleted = any(d.segment.key is None for d in p.deletions)
    assert p.roll_first == active_deleted
    if active_deleted:
        assert len(p.deletions) == len(segs)
        assert segs[-1].record_count > 0  # RET-3(c): an empty last segment is never deleted
        assert p.new_log_start_offset == segs[-1].end_offset


@settings(max_examples=120, deadline=None)
@given(logs())
def test_size_only_retention_keeps_at_least_retention_bytes(
        case: tuple[list[SegmentSnapshot], int, dict[str, object]]) -> None:
    """RET-6 alone (no time limit, log start at 0): the retained log is >= retention.bytes if it was."""
    segs, _lso, cfg = case
    cfg = {**cfg, "retention_ms": -1, "policy": frozenset({"delete"})}
    p = _plan(segs, 0, cfg)
    limit = cfg["retention_bytes"]
    assert isinstance(limit, int)
    total = sum(s.size_bytes for s in segs)
    if limit >= 0 and total >= limit:
        assert total - p.bytes_deleted >= limit


@settings(max_examples=120, deadline=None)
@given(logs())
def test_planning_again_on_the_result_deletes_nothing(
        case: tuple[list[SegmentSnapshot], int, dict[str, object]]) -> None:
    """Idempotence (KAFKA-12177): the pass after a pass at the same ``now`` is a no-op."""
    segs, lso, cfg = case
    p = _plan(segs, lso, cfg)
    rest = segs[len(p.deletions):]
    if p.roll_first or not rest:  # RET-4: the roll left a new, empty active segment at the log end
        end = segs[-1].end_offset
        rest = [SegmentSnapshot(end, end, 0, NOW, 0, None)]
    again = _plan(rest, p.new_log_start_offset, cfg)
    assert again.deletions == ()
    assert again.new_log_start_offset == p.new_log_start_offset
