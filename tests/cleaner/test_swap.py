"""The atomic swap (issue 4, item 5): crashes at each step, races with seal and retention, fencing, GC.

Each "process" is its own store on one memory namespace: a writer, cleaners, readers. Races use a
:class:`~tests.cleaner.kit.HookStore` under the cleaner, which runs the competing action right before
the cleaner's manifest PUT (after its outputs were PUT).
"""

from __future__ import annotations

from typing import Any

import pytest

import s3stream
from s3stream.base import layout
from s3stream.base.crashpoints import CrashPoints, SimulatedCrash
from s3stream.base.errors import CorruptData

from .conftest import Env
from .kit import COMPACT, fold, kv, put_segment, read_all, triples

HOUR = 3_600_000


@pytest.fixture
def env(any_env: Env) -> Env:
    """Every test here runs on memory:// and on SeaweedFS."""
    return any_env


def setup_log(env: Env, **overrides: Any) -> tuple[s3stream.Store, s3stream.PartitionLog]:
    writer = env.open("w")
    writer.create_topic("t", 1, {**COMPACT, **overrides})
    log = writer.partition("t", 0)
    put_segment(log, [("a", "1"), ("b", "1"), ("a", "2")])
    put_segment(log, [("c", "1"), ("b", "2"), ("a", None)])
    log.append([kv("d", "1")])                       # the active segment
    log.flush()
    return writer, log


def segment_objects(env: Env, log: s3stream.PartitionLog) -> set[str]:
    """Every segment object of ``log`` in the bucket (referenced or not)."""
    prefix = layout.log_prefix(log.topic_id, log.partition) + "segments/"
    return {e.key for e in env.raw.list(prefix)}


def reader(env: Env, topic: str = "t") -> s3stream.PartitionLog:
    """The partition as a process that does not write it sees it (its manifest is re-read on every read)."""
    return env.open(f"reader-{len(env.stores)}").partition(topic, 0)


def referenced(log: s3stream.PartitionLog) -> set[str]:
    return {s.key for s in log.manifest().segments}


EXPECTED = [(3, b"c", b"1"), (4, b"b", b"2"), (5, b"a", None), (6, b"d", b"1")]


def test_swap_replaces_inputs_and_gc_deletes_them_after_the_delay(env: Env) -> None:
    writer, log = setup_log(env, **{"file.delete.delay.ms": 60_000})
    inputs = referenced(log)
    r = writer.run_cleaner().cleaned
    assert r is not None and not r.aborted
    m = log.manifest()
    assert {x.key for x in m.removed} == inputs and not inputs & referenced(log)
    assert all(s.cleaned for s in m.segments)
    env.clock.advance(59_999)
    assert writer.collect_garbage().count("removed_segment") == 0
    assert inputs <= segment_objects(env, log)              # slow readers of the old manifest still work
    env.clock.advance(1)
    assert writer.collect_garbage().count("removed_segment") == 2
    assert segment_objects(env, log) == referenced(log)
    assert log.manifest().removed == ()
    assert triples(read_all(log)) == EXPECTED


@pytest.mark.parametrize("point", ["clean.after_outputs_put", "clean.after_swap"])
def test_crash_at_each_step_of_a_round_leaves_a_readable_correct_log(env: Env, point: str) -> None:
    _, log = setup_log(env)
    before = fold(read_all(log))
    crash = CrashPoints()
    crash.arm(point)
    doomed = env.open("c1", crash_points=crash)
    with pytest.raises(SimulatedCrash):
        doomed.run_cleaner()
    # the cleaner process is dead; a fresh reader sees a complete, correct log
    rlog = env.open("r").partition("t", 0)
    assert fold(read_all(rlog)) == before
    assert rlog.log_end_offset == 7 and rlog.log_start_offset == 0
    swapped = point == "clean.after_swap"
    assert (rlog.manifest().cleaner_checkpoint == 6) is swapped
    assert len(read_all(rlog)) == (4 if swapped else 7)
    # a restarted cleaner finishes the work (or finds none left)
    again = env.open("c2")
    r = again.run_cleaner()
    assert (r.cleaned is None) is swapped
    assert triples(read_all(rlog)) == EXPECTED
    # GC removes the crashed round's orphans / replaced inputs, and nothing that is referenced
    env.clock.advance(2 * HOUR)
    again.collect_garbage()
    assert segment_objects(env, rlog) == referenced(rlog)
    assert triples(read_all(env.open("r2").partition("t", 0))) == EXPECTED
    log.append([kv("e", "1")])
    assert log.log_end_offset == 8


def test_crash_after_gc_deleted_replaced_inputs_before_forgetting_them(env: Env) -> None:
    writer, log = setup_log(env)
    writer.run_cleaner()
    replaced = {x.key for x in log.manifest().removed}
    env.clock.advance(2 * HOUR)
    crash = CrashPoints()
    crash.arm("gc.after_delete")
    gc_proc = env.open("g1", crash_points=crash)
    with pytest.raises(SimulatedCrash):
        gc_proc.collect_garbage()
    assert not replaced & segment_objects(env, log)        # deleted, but still listed as removed
    assert {x.key for x in log.manifest().removed} == replaced
    assert triples(read_all(env.open("r").partition("t", 0))) == EXPECTED
    env.open("g2").collect_garbage()                         # re-deleting is harmless; then forgotten
    assert log.manifest().removed == ()
    assert triples(read_all(log)) == EXPECTED


def test_a_seal_racing_the_swap_is_rebased_over(env: Env) -> None:
    _, log = setup_log(env)
    cleaner, hook = env.open_hooked("c")

    def seal() -> None:
        log.append([kv("a", "late")])
        log.roll()                                           # commits add_segment before the cleaner's PUT

    hook.arm(seal)
    r = cleaner.run_cleaner().cleaned
    assert hook.fired == 1
    assert r is not None and not r.aborted and r.end_offset == 6
    m = log.manifest(refresh=True)
    assert [s.base_offset for s in m.segments][-1] == 6 and m.next_offset == 8
    assert m.cleaner_checkpoint == 6
    assert triples(read_all(log)) == [*EXPECTED, (7, b"a", b"late")]
    cleaner.run_cleaner()                                   # the sealed segment is cleaned next time
    assert triples(read_all(reader(env))) == [(3, b"c", b"1"), (4, b"b", b"2"), (6, b"d", b"1"), (7, b"a", b"late")]


def test_retention_racing_the_swap_aborts_it_and_outputs_are_deleted(env: Env) -> None:
    writer = env.open("w")
    writer.create_topic("t", 1, {**COMPACT, "cleanup.policy": "compact,delete", "retention.ms": 60_000,
                                 "segment.bytes": 80})
    log = writer.partition("t", 0)
    put_segment(log, [("a", "1"), ("b", "1"), ("a", "2")], ts=env.t0)
    put_segment(log, [("c", "1"), ("b", "2")], ts=env.t0 + 100_000)
    log.append([kv("d", "1", env.t0 + 100_000)])
    log.flush()
    old = log.manifest().segments[0].key
    cleaner, hook = env.open_hooked("c")
    env.clock.advance(90_000)                                # the first segment is now past retention.ms
    hook.arm(lambda: writer.run_retention())
    report = cleaner.run_cleaner()
    assert hook.fired == 1
    assert report.cleaned is not None and report.cleaned.aborted
    outputs = {k for k in hook.puts if "/segments/" in k}
    assert len(outputs) == 2 and not outputs & segment_objects(env, log)   # deleted at once, never referenced
    m = log.manifest(refresh=True)
    assert old not in referenced(log) and m.cleaner_checkpoint is None
    assert log.log_start_offset == 3
    assert triples(read_all(reader(env))) == [(3, b"c", b"1"), (4, b"b", b"2"), (5, b"d", b"1")]
    r = cleaner.run_cleaner().cleaned                        # the next pass cleans what is left
    assert r is not None and not r.aborted and r.first_dirty == 3
    assert segment_objects(env, log) == referenced(log) | {x.key for x in log.manifest().removed}


def test_a_second_cleaner_fences_the_first_mid_round(env: Env) -> None:
    _, log = setup_log(env)
    first, hook = env.open_hooked("c1")
    assert first.run_cleaner().cleaned is not None            # first claims cleaner epoch 1
    put_segment(log, [("a", "3"), ("b", "3")])
    second = env.open("c2")
    hook.arm(lambda: second.run_cleaner())                   # claims epoch 2 and cleans first
    report = first.run_cleaner()
    assert hook.fired == 1 and report.cleaned is None
    m = log.manifest(refresh=True)
    assert m.cleaner is not None and m.cleaner.epoch == 2
    outputs = {k for k in hook.puts if "/segments/" in k}
    assert not outputs & referenced(log)
    env.clock.advance(2 * HOUR)
    second.collect_garbage()
    assert segment_objects(env, log) == referenced(log)
    assert fold(read_all(reader(env))) == {b"c": (3, b"1"), b"d": (6, b"1"), b"a": (7, b"3"), b"b": (8, b"3")}
    # the fenced cleaner leaves the partition alone from now on; the new one keeps cleaning
    put_segment(log, [("c", "2")])
    assert first.run_cleaner().cleaned is None
    assert second.run_cleaner().cleaned is not None
    assert read_all(reader(env))[0].offset == 6
    counted = first.metrics_registry.get_sample_value("s3stream_cleaner_rounds_total", {"outcome": "fenced"})
    assert counted == 1.0


def test_uncleanable_partition_is_reported_and_skipped_while_others_go_on(env: Env) -> None:
    writer = env.open("w")
    writer.create_topic("bad", 1, dict(COMPACT))
    writer.create_topic("good", 1, {**COMPACT, "cleanup.policy": "compact,delete", "retention.ms": 60_000})
    bad, good = writer.partition("bad", 0), writer.partition("good", 0)
    put_segment(bad, [("a", "1"), ("a", "2")])
    put_segment(good, [("a", "1")], ts=env.t0 - 120_000)
    put_segment(good, [("a", "2"), ("b", "1")])
    put_segment(good, [("b", "2")])
    good.append([kv("z", "1")])
    key = bad.manifest().segments[0].key
    env.raw.put(key, b"PAR1 this is not a segment PAR1")
    cleaner = env.open("c")
    first = cleaner.run_cleaner()                            # bad is dirtier (ratio 1.0): chosen, fails
    assert first.chosen is not None and first.chosen.log_id == bad.log_id
    assert first.cleaned is None
    assert list(first.uncleanable) == [bad.log_id] and "CorruptData" in first.uncleanable[bad.log_id]
    assert first.retention_segments_deleted == 1              # good still gets its retention
    assert cleaner.metrics_registry.get_sample_value("s3stream_cleaner_uncleanable_partitions_count") == 1.0
    assert (cleaner.metrics_registry.get_sample_value("s3stream_cleaner_uncleanable_bytes") or 0) > 0
    second = cleaner.run_cleaner()
    assert second.cleaned is not None and second.cleaned.log_id == good.log_id
    assert cleaner.run_cleaner().cleaned is None             # bad stays skipped
    writer.flush()
    assert triples(read_all(reader(env, "good"))) == [(1, b"a", b"2"), (3, b"b", b"2"), (4, b"z", b"1")]
    with pytest.raises(CorruptData):
        read_all(reader(env, "bad"))


def test_a_partition_whose_manifest_cannot_be_read_is_uncleanable(env: Env) -> None:
    writer = env.open("w")
    writer.create_topic("bad", 1, dict(COMPACT))
    writer.create_topic("good", 1, dict(COMPACT))
    bad, good = writer.partition("bad", 0), writer.partition("good", 0)
    put_segment(bad, [("a", "1"), ("a", "2")])
    put_segment(good, [("a", "1"), ("a", "2")])
    m = bad.manifest()
    env.raw.put(bad.manifest_store.key_for_seq(m.seq + 1), b"{not a manifest")
    report = env.open("c").run_cleaner()
    assert list(report.uncleanable) == [bad.log_id]
    assert report.cleaned is not None and report.cleaned.log_id == good.log_id
    assert triples(read_all(reader(env, "good"))) == [(1, b"a", b"2")]


def test_cleaner_metrics_are_exported(env: Env) -> None:
    writer = env.open("w")
    writer.create_topic("t", 1, {**COMPACT, "max.compaction.lag.ms": 1000, "min.cleanable.dirty.ratio": "0.9"})
    log = writer.partition("t", 0)
    put_segment(log, [("a", "1"), ("b", "1")])
    cleaned = writer.run_cleaner().cleaned
    assert cleaned is not None
    put_segment(log, [("a", "2"), ("a", "3")], ts=env.t0 - 5_000)     # ratio 0.5 < 0.9, but overdue
    report = writer.run_cleaner()
    assert report.chosen is not None and report.chosen.need_compaction_now
    reg = writer.metrics_registry

    def sample(name: str, labels: dict[str, str] | None = None) -> float:
        value = reg.get_sample_value(name, labels or {})
        assert value is not None, name
        return float(value)

    assert sample("s3stream_cleaner_max_dirty_percent") == pytest.approx(50.0)
    assert sample("s3stream_cleaner_max_compaction_delay_secs") == pytest.approx(4.0)
    assert sample("s3stream_cleaner_num_logs_compacted_by_max_compaction_lag") == 1.0
    assert sample("s3stream_cleaner_max_clean_time_secs") > 0
    assert 0 < sample("s3stream_cleaner_max_buffer_utilization_percent") < 1
    assert 0 < sample("s3stream_cleaner_recopy_percent") < 100
    assert sample("s3stream_cleaner_uncleanable_partitions_count") == 0
    assert sample("s3stream_cleaner_uncleanable_bytes") == 0
    assert sample("s3stream_cleaner_rounds_total", {"outcome": "cleaned"}) == 2
    assert sample("s3stream_cleaner_records_removed_total") == 2
    assert sample("s3stream_cleaner_bytes_read_total") > sample("s3stream_cleaner_bytes_written_total") > 0
    assert sample("s3stream_cleaner_round_seconds_count") == 2
