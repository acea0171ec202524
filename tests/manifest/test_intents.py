"""Intents: each edit's effect, idempotency (apply twice == once) and conflicts."""

from __future__ import annotations

import dataclasses

import pytest

from s3stream.base.errors import CommitConflict, InternalError
from s3stream.manifest.intents import (
    Intent,
    add_segment,
    advance_log_start,
    claim_cleaner,
    claim_writer,
    compose,
    drop_segments,
    forget_removed,
    replace_segments,
    set_wal_cursor,
)
from s3stream.manifest.model import Epoch, Manifest, RemovedObject, WalCursor, check_invariants

from .helpers import PARTITION, TOPIC, TOPIC_ID, manifest_with, seg


def apply_committed(intent: Intent, cur: Manifest) -> Manifest | None:
    """Apply like a commit would: the result becomes version ``cur.seq + 1`` and must be valid."""
    new = intent(cur)
    if new is None:
        return None
    new = dataclasses.replace(new, seq=cur.seq + 1, parent_seq=cur.seq)
    check_invariants(new)
    return new


def assert_idempotent(intent: Intent, cur: Manifest) -> Manifest:
    once = apply_committed(intent, cur)
    assert once is not None
    assert intent(once) is None  # re-running on its own result changes nothing
    return once


def test_claim_writer_bumps_the_epoch() -> None:
    empty = Manifest.empty(TOPIC, TOPIC_ID, PARTITION)
    first = claim_writer("node-a")(empty)
    assert first is not None and first.writer == Epoch(1, "node-a")
    second = claim_writer("node-b")(first)
    assert second is not None and second.writer == Epoch(2, "node-b")
    again = claim_writer("node-b")(second)  # not idempotent by nature: a new epoch each run
    assert again is not None and again.writer == Epoch(3, "node-b")
    assert second.cleaner is None


def test_claim_cleaner_bumps_its_own_epoch() -> None:
    m = dataclasses.replace(manifest_with((0, 9)), writer=Epoch(5, "w"), cleaner=Epoch(2, "c0"))
    out = claim_cleaner("c1")(m)
    assert out is not None and out.cleaner == Epoch(3, "c1") and out.writer == Epoch(5, "w")
    with pytest.raises(InternalError):
        claim_cleaner("")


def test_add_segment_appends_and_moves_the_cursor() -> None:
    m = manifest_with((0, 9), seq=4)
    ref = seg(10, 19)
    out = assert_idempotent(add_segment(ref, WalCursor("node-a", 8)), m)
    assert out.segments[-1] == dataclasses.replace(ref, added_seq=5)
    assert out.next_offset == 20 and out.wal == WalCursor("node-a", 8)


def test_add_segment_on_empty_log() -> None:
    out = assert_idempotent(add_segment(seg(0, 4), None), Manifest.empty(TOPIC, TOPIC_ID, PARTITION))
    assert out.next_offset == 5 and out.wal is None


def test_add_segment_without_cursor_keeps_the_current_one() -> None:
    m = dataclasses.replace(manifest_with((0, 9)), wal=WalCursor("node-a", 3))
    out = add_segment(seg(10, 11), None)(m)
    assert out is not None and out.wal == WalCursor("node-a", 3)


def test_add_segment_already_present_is_a_no_op_even_on_a_newer_state() -> None:
    ref = seg(10, 19)
    landed = add_segment(ref, None)(manifest_with((0, 9)))
    assert landed is not None
    newer = add_segment(seg(20, 29), None)(landed)
    assert newer is not None
    assert add_segment(ref, None)(newer) is None


def test_add_segment_conflicts_when_the_sealed_end_moved() -> None:
    with pytest.raises(CommitConflict):
        add_segment(seg(15, 19), None)(manifest_with((0, 9)))
    with pytest.raises(CommitConflict):
        add_segment(seg(5, 19), None)(manifest_with((0, 9)))


def test_set_wal_cursor_never_moves_backwards_for_one_node() -> None:
    m = manifest_with((0, 9))
    out = assert_idempotent(set_wal_cursor(WalCursor("n1", 5)), m)
    assert set_wal_cursor(WalCursor("n1", 4))(out) is None
    moved = set_wal_cursor(WalCursor("n2", 0))(out)  # a new writer's namespace
    assert moved is not None and moved.wal == WalCursor("n2", 0)


def test_advance_log_start_is_monotonic() -> None:
    m = manifest_with((0, 9), log_start=3)
    out = assert_idempotent(advance_log_start(7), m)
    assert out.log_start_offset == 7
    assert advance_log_start(3)(m) is None
    assert advance_log_start(2)(out) is None
    beyond = advance_log_start(50)(m)  # no LEO check here: callers check bounds
    assert beyond is not None and beyond.log_start_offset == 50


def test_forget_removed_drops_only_the_named_entries() -> None:
    removed = (RemovedObject("a", 1, 1), RemovedObject("b", 2, 1), RemovedObject("c", 3, 2))
    m = dataclasses.replace(manifest_with((0, 9)), removed=removed)
    out = assert_idempotent(forget_removed(["a", "c", "zzz"]), m)
    assert [r.key for r in out.removed] == ["b"]
    assert forget_removed(["nothing"])(m) is None


def test_drop_segments_removes_a_prefix_and_records_removals() -> None:
    m = manifest_with((0, 9), (10, 19), (20, 29), log_start=2, seq=8)
    keys = [m.segments[0].key, m.segments[1].key]
    out = assert_idempotent(drop_segments(keys, now_ms=1000, new_log_start=20), m)
    assert [s.base_offset for s in out.segments] == [20]
    assert out.log_start_offset == 20
    assert out.removed == tuple(RemovedObject(k, 1000, 9) for k in keys)


def test_drop_segments_moves_log_start_at_least_past_the_dropped_range() -> None:
    m = manifest_with((0, 9), (10, 19), log_start=0)
    out = drop_segments([m.segments[0].key], now_ms=0, new_log_start=0)(m)
    assert out is not None and out.log_start_offset == 10  # RET-4: Kafka's next segment base


def test_drop_segments_conflicts() -> None:
    m = manifest_with((0, 9), (10, 19), (20, 29))
    with pytest.raises(CommitConflict, match="prefix"):
        drop_segments([m.segments[1].key], now_ms=0, new_log_start=20)(m)
    with pytest.raises(CommitConflict, match="gone"):
        drop_segments([m.segments[0].key, "vanished"], now_ms=0, new_log_start=10)(m)
    # Gone (e.g. compacted away) while the log start did not reach the target: re-plan.
    with pytest.raises(CommitConflict):
        drop_segments(["vanished"], now_ms=0, new_log_start=5)(m)


def test_drop_segments_replay_after_more_appends_is_a_no_op() -> None:
    m = manifest_with((0, 9), (10, 19))
    intent = drop_segments([m.segments[0].key], now_ms=0, new_log_start=10)
    landed = intent(m)
    assert landed is not None
    newer = add_segment(seg(20, 29), None)(landed)
    assert newer is not None
    assert intent(newer) is None


def test_replace_segments_swaps_a_contiguous_run() -> None:
    m = manifest_with((0, 9), (10, 19), (20, 29), (30, 39), seq=3)
    inputs = [m.segments[1].key, m.segments[2].key]
    outputs = [seg(10, 24, cleaned=True, created_ms=5), seg(25, 29, cleaned=True, created_ms=5)]
    out = assert_idempotent(replace_segments(inputs, outputs, now_ms=777, checkpoint=30), m)
    assert [(s.base_offset, s.last_offset) for s in out.segments] == [(0, 9), (10, 24), (25, 29), (30, 39)]
    assert [s.added_seq for s in out.segments[1:3]] == [4, 4]
    assert out.cleaner_checkpoint == 30 and out.next_offset == 40
    assert out.removed == tuple(RemovedObject(k, 777, 4) for k in inputs)


def test_replace_segments_keeps_checkpoint_when_none() -> None:
    m = dataclasses.replace(manifest_with((0, 9)), cleaner_checkpoint=4)
    out = replace_segments([m.segments[0].key], [seg(0, 9)], now_ms=0, checkpoint=None)(m)
    assert out is not None and out.cleaner_checkpoint == 4


def test_replace_segments_conflicts_when_an_input_is_gone() -> None:
    m = manifest_with((0, 9), (10, 19), (20, 29))
    retained = drop_segments([m.segments[0].key], now_ms=0, new_log_start=10)(m)
    assert retained is not None
    swap = replace_segments([m.segments[0].key, m.segments[1].key], [seg(0, 19)], now_ms=0, checkpoint=20)
    with pytest.raises(CommitConflict, match="gone"):
        swap(retained)


def test_replace_segments_rejects_malformed_outputs() -> None:
    m = manifest_with((0, 9), (10, 19), (20, 29))
    with pytest.raises(InternalError, match="cover"):
        replace_segments([m.segments[0].key], [seg(0, 8)], now_ms=0, checkpoint=None)(m)
    with pytest.raises(InternalError, match="contiguous"):
        replace_segments([m.segments[0].key], [seg(0, 3), seg(5, 9)], now_ms=0, checkpoint=None)
    with pytest.raises(InternalError, match="contiguous"):
        replace_segments([m.segments[0].key, m.segments[2].key], [seg(0, 29)], now_ms=0, checkpoint=None)(m)
    with pytest.raises(InternalError):
        replace_segments([], [seg(0, 9)], now_ms=0, checkpoint=None)


def test_compose_applies_in_order_and_is_none_when_nothing_changes() -> None:
    m = manifest_with((0, 9))
    both = compose(add_segment(seg(10, 19), WalCursor("n", 2)), advance_log_start(12))
    out = assert_idempotent(both, m)
    assert out.next_offset == 20 and out.log_start_offset == 12
    assert compose(advance_log_start(0), forget_removed(["x"]))(m) is None
    assert compose()(m) is None


def test_compose_propagates_conflicts() -> None:
    with pytest.raises(CommitConflict):
        compose(advance_log_start(3), add_segment(seg(50, 60), None))(manifest_with((0, 9)))
