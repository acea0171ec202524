"""DeleteRecords (rule RET-8): ``PartitionLog.delete_records(before_offset)`` and what retention does next.

The log start moves at once (reads below it fail immediately, before any object is deleted), never
backwards and never past the log end; -1 means the log end; compact-only topics refuse it with
PolicyViolation; the next retention pass drops the segments wholly below the new start (RET-5).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import s3stream
from s3stream import ManualClock, OffsetOutOfRange, PolicyViolation

from .store_kit import DAY, T0, append_n, exists, offsets, open_at, ranges, shape


def _log(store: s3stream.Store, config: dict[str, object] | None = None) -> s3stream.PartitionLog:
    store.create_topic("t", config=config or {})
    log = store.partition("t", 0)
    shape(log, [[T0] * 5, [T0] * 5, [T0] * 5])  # [0..4] [5..9] sealed, [10..14] active
    return log


def test_moves_the_log_start_and_reads_below_fail_at_once(store: s3stream.Store) -> None:
    log = _log(store)
    head_key = log.segments()[0].key
    assert log.delete_records(6) == 6
    assert log.log_start_offset == 6 and log.log_end_offset == 15
    with pytest.raises(OffsetOutOfRange) as info:
        log.read(5)
    assert (info.value.log_start_offset, info.value.log_end_offset) == (6, 15)
    assert offsets(log) == list(range(6, 15))
    # nothing was deleted yet: the objects and segments are all still there
    assert head_key is not None and exists(store.object_store, head_key)
    assert len(log.segments()) == 3
    assert log.manifest().log_start_offset == 6


def test_never_moves_backwards(store: s3stream.Store) -> None:
    log = _log(store)
    log.delete_records(8)
    assert log.delete_records(3) == 8
    assert log.delete_records(8) == 8
    assert log.log_start_offset == 8


def test_never_past_the_log_end(store: s3stream.Store) -> None:
    log = _log(store)
    for bad in (16, 1000, -2):
        with pytest.raises(OffsetOutOfRange):
            log.delete_records(bad)
    assert log.log_start_offset == 0
    assert log.delete_records(15) == 15  # exactly the log end is allowed


def test_minus_one_means_the_log_end(store: s3stream.Store) -> None:
    log = _log(store)
    assert log.delete_records(-1) == 15
    assert log.read(15) == []
    with pytest.raises(OffsetOutOfRange):
        log.read(14)
    store.run_retention()
    # RET-5: both sealed segments are wholly below; the active one holds no readable record but stays
    assert ranges(log) == [(10, 14, False)]
    log.append([s3stream.Record(b"k", b"after", T0)])
    assert [(r.offset, r.value) for r in log.read(15)] == [(15, b"after")]


def test_works_inside_the_unsealed_active_segment(store: s3stream.Store) -> None:
    log = _log(store)
    log.delete_records(12)
    assert offsets(log) == [12, 13, 14]
    store.run_retention()
    assert ranges(log) == [(10, 14, False)] and log.log_start_offset == 12


@pytest.mark.parametrize("policy", ["compact", ""])
def test_rejected_on_topics_whose_policy_lacks_delete(store: s3stream.Store, policy: str) -> None:
    """RET-8: DeleteRecords on a topic without ``delete`` fails with POLICY_VIOLATION."""
    store.create_topic("t", config={"cleanup.policy": policy})
    log = store.partition("t", 0)
    log.append([s3stream.Record(b"k", b"v", T0)])
    with pytest.raises(PolicyViolation):
        log.delete_records(1)
    assert log.log_start_offset == 0


def test_allowed_on_compact_delete_topics(store: s3stream.Store) -> None:
    log = _log(store, {"cleanup.policy": "compact,delete"})
    assert log.delete_records(5) == 5
    store.run_retention()
    assert ranges(log)[0][0] == 5


def test_policy_change_to_compact_refuses_further_delete_records(store: s3stream.Store) -> None:
    """Changing cleanup.policy on a live topic applies to the very next DeleteRecords."""
    log = _log(store)
    log.delete_records(2)
    store.alter_topic_config("t", {"cleanup.policy": "compact"})
    with pytest.raises(PolicyViolation):
        log.delete_records(4)
    store.alter_topic_config("t", {"cleanup.policy": None})  # back to the default, delete
    assert log.delete_records(4) == 4


def test_kt63_delete_records_then_time_deletion_in_the_same_pass(store: s3stream.Store, clock: ManualClock) -> None:
    """KT-63 (KAFKA-12177): a future-stamped head segment below the new log start goes first (RET-5), which
    unblocks time retention of the next, expired segment in the same pass: one pass, one commit."""
    store.create_topic("t", config={"retention.ms": DAY})
    log = store.partition("t", 0)
    shape(log, [[T0 + 2 * DAY], [T0 - 2 * DAY], [T0]])
    log.delete_records(1)
    seq = log.manifest().seq
    report = store.run_retention()
    assert report.by_reason == {"log_start_offset": [1, report.by_reason["log_start_offset"][1]],
                                "retention_ms": [1, report.by_reason["retention_ms"][1]]}
    assert log.log_start_offset == 2 and ranges(log) == [(2, 2, False)]
    assert log.manifest().seq == seq + 1
    assert store.run_retention().partitions_changed == 0  # idempotent: nothing left for a second pass


def test_delete_records_by_another_process_is_honoured(mem_url: str, tmp_path: Path, clock: ManualClock) -> None:
    """A process that does not write the partition moves its log start; readers and retention see it,
    and the writer's later commits (a seal) rebase over it."""
    with open_at(mem_url, tmp_path / "writer", clock) as writer:
        writer.create_topic("t")
        log = writer.partition("t", 0)
        shape(log, [[T0] * 5, [T0] * 5, [T0] * 5])
        with open_at(mem_url, tmp_path / "admin", clock) as admin:
            assert admin.partition("t", 0).delete_records(10) == 10
            admin.run_retention()
            with open_at(mem_url, tmp_path / "reader", clock) as reader:
                rlog = reader.partition("t", 0)
                assert rlog.log_start_offset == 10
                with pytest.raises(OffsetOutOfRange):
                    rlog.read(9)
                assert offsets(rlog) == list(range(10, 15))
                assert [s.base_offset for s in rlog.segments()] == [10]
        writer.run_retention()  # the writer's own pass re-reads the manifest
        assert log.log_start_offset == 10
        with pytest.raises(OffsetOutOfRange):
            log.read(9)
        append_n(log, 1, T0)  # the writer keeps appending after the other process's edits
        log.roll()
        m = log.manifest()
        assert m.log_start_offset == 10
        assert [(s.base_offset, s.last_offset) for s in m.segments] == [(10, 15)]
        assert offsets(log) == list(range(10, 16))


def test_writer_process_sees_another_process_delete_records_at_once(
        mem_url: str, tmp_path: Path, clock: ManualClock) -> None:
    with open_at(mem_url, tmp_path / "writer", clock) as writer:
        writer.create_topic("t")
        log = writer.partition("t", 0)
        shape(log, [[T0] * 5, [T0] * 5])
        with open_at(mem_url, tmp_path / "admin", clock) as admin:
            admin.partition("t", 0).delete_records(7)
        with pytest.raises(OffsetOutOfRange):
            log.read(0)
