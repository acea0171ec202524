"""cleanup.policy and live config changes (rule RET-1): which checks run, and when changes take effect.

``delete`` runs all three checks (log start, size, time); ``compact`` alone runs only the log-start
check; ``compact,delete`` runs all three; an empty policy (KAFKA-19112) keeps everything but still
honours the log start. Changing the policy or a retention config of a live topic applies at the next
pass, without reopening anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import s3stream
from s3stream import ManualClock

from .store_kit import DAY, REC_BYTES, T0, append_n, open_at, ranges, shape

_OLD = T0 - 10 * DAY


def _expired_log(store: s3stream.Store, policy: str, **extra: object) -> s3stream.PartitionLog:
    """Three segments, all far older than retention.ms=1 day, and far larger than retention.bytes."""
    store.create_topic("t", config={"cleanup.policy": policy, "retention.ms": DAY,
                                    "retention.bytes": REC_BYTES, **extra})
    log = store.partition("t", 0)
    shape(log, [[_OLD] * 2, [_OLD] * 2, [_OLD] * 2])
    return log


def test_delete_runs_size_and_time_checks(store: s3stream.Store) -> None:
    log = _expired_log(store, "delete")
    report = store.run_retention()
    assert set(report.by_reason) == {"retention_bytes", "retention_ms"}
    assert log.log_start_offset == log.log_end_offset == 6


def test_compact_runs_only_the_log_start_check(store: s3stream.Store) -> None:
    log = _expired_log(store, "compact")
    report = store.run_retention()
    assert report.partitions_checked == 1 and report.partitions_changed == 0
    assert len(log.segments()) == 3 and log.log_start_offset == 0


def test_compact_delete_runs_all_three_checks(store: s3stream.Store) -> None:
    log = _expired_log(store, "compact,delete", **{"retention.bytes": 4 * REC_BYTES, "retention.ms": 20 * DAY})
    log.delete_records(1)
    report = store.run_retention()  # RET-5 keeps [0..1] (holds offset 1); RET-6 drops it: 6 - 2 >= 4
    assert report.by_reason == {"retention_bytes": [1, 2 * REC_BYTES]}
    store.alter_topic_config("t", {"retention.ms": DAY})
    log.delete_records(4)
    report = store.run_retention()  # RET-5 drops [2..3]; RET-7 drops the rest (active rolled first)
    assert set(report.by_reason) == {"log_start_offset", "retention_ms"}
    assert log.log_start_offset == log.log_end_offset == 6


def test_kt61_compact_only_topic_deletes_segments_below_the_log_start(store: s3stream.Store) -> None:
    """KT-61 (shouldDeleteStartOffsetBreachedSegmentsWhenPolicyDoesNotIncludeDelete, KAFKA-7400).

    Kafka moves the log start directly; here DeleteRecords moves it while the topic still allows it,
    then the policy becomes compact-only: retention must still drop what is wholly below it.
    """
    store.create_topic("t", config={"segment.bytes": 5 * REC_BYTES, "retention.ms": 10_000})
    log = store.partition("t", 0)
    append_n(log, 15, 10)  # timestamp 10: long expired for retention.ms=10000, which must not apply
    log.flush()
    log.delete_records(5)
    store.alter_topic_config("t", {"cleanup.policy": "compact"})
    report = store.run_retention()
    assert report.by_reason == {"log_start_offset": [1, 5 * REC_BYTES]}
    segs = log.segments()
    assert len(segs) == 2
    assert segs[0].base_offset <= log.log_start_offset
    assert all(s.base_offset > log.log_start_offset for s in segs[1:])


def test_empty_policy_keeps_everything(store: s3stream.Store) -> None:
    log = _expired_log(store, "")
    assert store.run_retention().partitions_changed == 0
    assert len(log.segments()) == 3


@pytest.mark.parametrize(("before", "after"), [("delete", "compact"), ("compact", "delete"),
                                               ("compact", "compact,delete"), ("delete", "")])
def test_policy_change_on_a_live_topic_applies_at_the_next_pass(
        store: s3stream.Store, before: str, after: str) -> None:
    log = _expired_log(store, before, **{"retention.bytes": -1})
    store.alter_topic_config("t", {"cleanup.policy": after})
    store.run_retention()
    deletes = "delete" in after.split(",")
    assert log.log_start_offset == (6 if deletes else 0)
    assert len(log.segments()) == (1 if deletes else 3)


def test_policy_flip_between_passes(store: s3stream.Store, clock: ManualClock) -> None:
    """compact -> no deletion; flip to delete -> the next pass deletes; flip back -> new data stays."""
    log = _expired_log(store, "compact", **{"retention.bytes": -1})
    assert store.run_retention().partitions_changed == 0
    store.alter_topic_config("t", {"cleanup.policy": "delete"})
    assert store.run_retention().segments_deleted == 3
    store.alter_topic_config("t", {"cleanup.policy": "compact"})
    shape(log, [[_OLD], [_OLD]])
    assert store.run_retention().partitions_changed == 0
    assert ranges(log) == [(6, 6, True), (7, 7, False)]


def test_retention_ms_change_on_a_live_topic(store: s3stream.Store, clock: ManualClock) -> None:
    store.create_topic("t")  # default retention.ms: 7 days
    log = store.partition("t", 0)
    shape(log, [[T0 - 2 * DAY], [T0 - DAY // 2], [T0]])
    assert store.run_retention().partitions_changed == 0
    store.alter_topic_config("t", {"retention.ms": DAY})
    store.run_retention()
    assert log.log_start_offset == 1
    store.alter_topic_config("t", {"retention.ms": -1})  # -1 disables the limit
    clock.advance(100 * DAY)
    assert store.run_retention().partitions_changed == 0
    store.alter_topic_config("t", {"retention.ms": None})  # back to the default (7 days)
    store.run_retention()
    assert log.log_start_offset == log.log_end_offset == 3


def test_retention_bytes_change_on_a_live_topic(store: s3stream.Store) -> None:
    store.create_topic("t")  # default retention.bytes: -1
    log = store.partition("t", 0)
    shape(log, [[T0] * 2, [T0] * 2, [T0] * 2])
    assert store.run_retention().partitions_changed == 0
    store.alter_topic_config("t", {"retention.bytes": 4 * REC_BYTES})
    store.run_retention()
    assert log.log_start_offset == 2 and len(log.segments()) == 2
    store.alter_topic_config("t", {"retention.bytes": 2 * REC_BYTES - 1})
    store.run_retention()  # lower bound: the last 2 records stay (2 * REC_BYTES >= the limit)
    assert log.log_start_offset == 4 and ranges(log) == [(4, 5, False)]


def test_config_changed_by_another_process_applies_at_the_next_pass(
        store: s3stream.Store, mem_url: str, tmp_path: Path, clock: ManualClock) -> None:
    """The pass re-reads the topic document: an admin process's change needs no restart here."""
    store.create_topic("t", config={"retention.ms": 20 * DAY})
    log = store.partition("t", 0)
    shape(log, [[_OLD] * 2, [T0]])
    assert store.run_retention().partitions_changed == 0
    with open_at(mem_url, tmp_path / "admin", clock) as admin:
        admin.alter_topic_config("t", {"retention.ms": DAY})
    assert store.run_retention().segments_deleted == 1
    assert log.log_start_offset == 2
