"""Concurrent commits racing a retention commit: both land, the retention intent is rebased, nothing lost.

The object store is wrapped so that right before retention's manifest PUT (the first manifest PUT of
the thread running the pass) another commit lands: a seal by ``roll()`` from another thread, an
append + roll, a DeleteRecords, or another process's retention pass. Retention's put-if-absent then
loses, reloads the manifest and re-applies its intent (drop a prefix, move the log start) on top.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import s3stream
from s3stream import ManualClock
from s3stream.objectstore.memory import MemoryObjectStore

from .store_kit import DAY, T0, HookedStore, append_n, offsets, open_at, rec, shape


@pytest.fixture
def hooked(mem_url: str, tmp_path: Path, clock: ManualClock) -> Iterator[tuple[s3stream.Store, HookedStore]]:
    objstore = HookedStore(MemoryObjectStore(mem_url.removeprefix("memory://"), clock=clock))
    st = open_at(mem_url, tmp_path / "wal", clock, object_store=objstore)
    yield st, objstore
    st.close()


def _in_thread(fn: Callable[[], object]) -> Callable[[], None]:
    """A hook running ``fn`` in another thread (another actor of the process) and waiting for it."""

    def hook() -> None:
        errors: list[BaseException] = []

        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - surfaced in the test thread below
                errors.append(exc)

        t = threading.Thread(target=run, name="racer")
        t.start()
        t.join(30)
        assert not t.is_alive() and not errors, errors

    return hook


def _arm_before_retention_put(objstore: HookedStore, hook: Callable[[], None]) -> None:
    me = threading.current_thread().name
    objstore.arm(lambda key, thread: "/manifest/" in key and thread == me, hook)


def _log(store: s3stream.Store) -> s3stream.PartitionLog:
    """[0..1] expired under retention.ms = 1 day; the active segment [2] is young."""
    store.create_topic("t", config={"retention.ms": DAY})
    log = store.partition("t", 0)
    shape(log, [[T0 - 2 * DAY] * 2, [T0]])
    return log


def test_a_seal_by_roll_lands_first(hooked: tuple[s3stream.Store, HookedStore]) -> None:
    store, objstore = hooked
    log = _log(store)
    seq = log.manifest().seq
    _arm_before_retention_put(objstore, _in_thread(log.roll))
    report = store.run_retention()
    assert objstore.fired == 1
    assert report.segments_deleted == 1
    m = log.manifest()
    assert m.seq == seq + 2  # the seal at seq + 1, the rebased retention commit at seq + 2
    assert [(s.base_offset, s.last_offset) for s in m.segments] == [(2, 2)]  # the seal survived
    assert m.log_start_offset == 2 and len(m.removed) == 1  # and so did the retention edit
    assert offsets(log) == [2]


def test_an_append_and_roll_land_first(hooked: tuple[s3stream.Store, HookedStore]) -> None:
    store, objstore = hooked
    log = _log(store)

    def append_and_roll() -> None:
        log.append([rec(3, T0), rec(4, T0)])
        log.roll()

    _arm_before_retention_put(objstore, _in_thread(append_and_roll))
    store.run_retention()
    m = log.manifest()
    assert [(s.base_offset, s.last_offset) for s in m.segments] == [(2, 4)]
    assert m.log_start_offset == 2 and m.next_offset == 5
    assert offsets(log) == [2, 3, 4]
    assert [r.timestamp for r in log.read(2)] == [T0, T0, T0]


def test_an_automatic_seal_lands_first(mem_url: str, tmp_path: Path, clock: ManualClock) -> None:
    """The background sealer (a roll decided at append by segment.bytes) commits in its own thread."""
    objstore = HookedStore(MemoryObjectStore(mem_url.removeprefix("memory://"), clock=clock))
    with open_at(mem_url, tmp_path / "wal", clock, object_store=objstore) as store:
        store.create_topic("t", config={"retention.ms": DAY, "segment.bytes": 2 * rec(0, 0).size_bytes})
        log = store.partition("t", 0)
        append_n(log, 2, T0 - 2 * DAY)
        append_n(log, 1, T0)
        log.flush()
        assert [s.sealed for s in log.segments()] == [True, False]

        def append_past_segment_bytes() -> None:
            append_n(log, 2, T0)  # [2, 3] fill the active segment; 4 rolls it
            log.flush()           # waits for the sealer's commit

        _arm_before_retention_put(objstore, _in_thread(append_past_segment_bytes))
        store.run_retention()
        m = log.manifest()
        assert m.log_start_offset == 2
        assert [(s.base_offset, s.last_offset) for s in m.segments] == [(2, 3)]
        assert offsets(log) == [2, 3, 4]


def test_a_delete_records_lands_first(hooked: tuple[s3stream.Store, HookedStore]) -> None:
    store, objstore = hooked
    log = _log(store)
    _arm_before_retention_put(objstore, _in_thread(lambda: log.delete_records(3)))
    store.run_retention()
    m = log.manifest()
    assert m.log_start_offset == 3  # never moved backwards by the rebased retention commit
    assert m.segments == () and len(m.removed) == 1
    assert offsets(log) == []
    assert log.log_end_offset == 3


def test_another_process_retention_lands_first(
        hooked: tuple[s3stream.Store, HookedStore], mem_url: str, tmp_path: Path, clock: ManualClock) -> None:
    """Two passes race on the same segments: the edit lands once; the loser commits nothing."""
    store, objstore = hooked
    log = _log(store)
    head_key = log.segments()[0].key
    with open_at(mem_url, tmp_path / "other", clock) as other:
        other_reports: list[object] = []
        _arm_before_retention_put(objstore, lambda: other_reports.append(other.run_retention()))
        seq = log.manifest().seq
        report = store.run_retention()
    assert objstore.fired == 1
    m = log.manifest()
    assert m.seq == seq + 1  # one retention commit in all
    assert m.log_start_offset == 2 and [r.key for r in m.removed] == [head_key]  # removed once
    assert other_reports[0].segments_deleted == 1  # type: ignore[attr-defined]
    assert report.segments_deleted == 0 and report.partitions_changed == 0  # not counted twice
    assert offsets(log) == [2]


def test_another_process_deleting_part_of_the_plan_first_makes_the_pass_replan(
        hooked: tuple[s3stream.Store, HookedStore], mem_url: str, tmp_path: Path, clock: ManualClock) -> None:
    """The other pass drops only [0..1] (its retention is looser); ours planned [0..1] and [2..3]: the
    rebase finds part of its input gone (CommitConflict), re-plans, and drops [2..3] alone."""
    store, objstore = hooked
    store.create_topic("t", config={"retention.ms": DAY})
    log = store.partition("t", 0)
    shape(log, [[T0 - 3 * DAY] * 2, [T0 - 2 * DAY] * 2, [T0]])
    with open_at(mem_url, tmp_path / "other", clock) as other:
        def other_pass_with_looser_retention() -> None:
            other.alter_topic_config("t", {"retention.ms": int(2.5 * DAY)})
            other.run_retention()
            other.alter_topic_config("t", {"retention.ms": DAY})

        _arm_before_retention_put(objstore, other_pass_with_looser_retention)
        report = store.run_retention()
    m = log.manifest()
    assert m.log_start_offset == 4 and len(m.removed) == 2 and m.segments == ()
    assert report.segments_deleted == 1
    assert offsets(log) == [4]
