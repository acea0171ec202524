"""Crashes between retention's steps (crash points of s3stream/base/crashpoints.py), then a restart.

The order is: [roll's seal commit] -> retention's manifest commit -> (file.delete.delay.ms) -> GC's
DELETEs -> GC's forget commit. A crash at any step leaves the bucket consistent: what the committed
manifest dropped is unreadable and is deleted later (by the restarted process's GC); what it did
not drop stays readable; no offset is ever readable twice, and nothing above the log start is lost.

"Process death" here: the crash point raises SimulatedCrash in the thread running the pass; the store
is then closed, which writes nothing to the bucket (asserted: every record was flushed and sealed by
the pass before the crash point was reached), and a new store is opened on the same bucket and WAL
directory, as a restarted process would be.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import s3stream
from s3stream import ManualClock, OffsetOutOfRange
from s3stream.base.crashpoints import CrashPoints, SimulatedCrash
from s3stream.objectstore.memory import MemoryObjectStore

from .store_kit import DAY, T0, HookedStore, exists, offsets, open_at, shape

_DELAY = 60_000


class _Bucket:
    """Opens stores on one memory bucket + WAL dir, each with its own crash points; counts PUTs."""

    def __init__(self, url: str, wal: Path, clock: ManualClock) -> None:
        self.url, self.wal, self.clock = url, wal, clock
        self.objstore = HookedStore(MemoryObjectStore(url.removeprefix("memory://"), clock=clock))
        self.open: list[s3stream.Store] = []

    def start(self) -> tuple[s3stream.Store, CrashPoints]:
        cp = CrashPoints()
        st = open_at(self.url, self.wal, self.clock, object_store=self.objstore, crash_points=cp)
        self.open.append(st)
        return st, cp

    def die(self, st: s3stream.Store) -> None:
        """The crashed process goes away: closing it must not write anything more to the bucket."""
        before = len(self.objstore.puts)
        st.close()
        assert self.objstore.puts[before:] == []


@pytest.fixture
def bucket(mem_url: str, tmp_path: Path, clock: ManualClock) -> Iterator[_Bucket]:
    b = _Bucket(mem_url, tmp_path / "wal", clock)
    yield b
    for st in b.open:
        st.close()


def _expired_log(store: s3stream.Store) -> tuple[s3stream.PartitionLog, list[str]]:
    """[0..1] [2..3] two days old, active [4] young, under retention.ms = 1 day."""
    store.create_topic("t", config={"retention.ms": DAY, "file.delete.delay.ms": _DELAY})
    log = store.partition("t", 0)
    shape(log, [[T0 - 2 * DAY] * 2, [T0 - 2 * DAY] * 2, [T0]])
    return log, [s.key for s in log.segments() if s.key is not None]


def _assert_once_each(log: s3stream.PartitionLog) -> None:
    """Every offset from the log start to the log end is readable exactly once, in order."""
    got = offsets(log)
    assert got == list(range(log.log_start_offset, log.log_end_offset))


def test_crash_after_the_retention_commit_objects_are_deleted_later(bucket: _Bucket, clock: ManualClock) -> None:
    store, cp = bucket.start()
    _log, keys = _expired_log(store)
    cp.arm("retention.after_commit")
    with pytest.raises(SimulatedCrash):
        store.run_retention()
    bucket.die(store)

    store, _cp = bucket.start()
    log = store.partition("t", 0)
    assert log.log_start_offset == 4 and log.log_end_offset == 5
    assert [r.key for r in log.manifest().removed] == keys  # the drop landed, the deletion is pending
    assert all(exists(store.object_store, k) for k in keys)
    with pytest.raises(OffsetOutOfRange):
        log.read(3)
    _assert_once_each(log)
    assert store.run_retention().partitions_changed == 0  # nothing to redo: the edit is idempotent
    assert len(log.manifest().removed) == 2
    clock.advance(_DELAY)
    assert sorted(store.collect_garbage().deleted["removed_segment"]) == sorted(keys)
    assert not any(exists(store.object_store, k) for k in keys)
    _assert_once_each(log)
    assert offsets(log) == [4]


def test_crash_between_gc_delete_and_its_forget_commit(bucket: _Bucket, clock: ManualClock) -> None:
    store, cp = bucket.start()
    _log, keys = _expired_log(store)
    store.run_retention()
    clock.advance(_DELAY)
    cp.arm("gc.after_delete")
    with pytest.raises(SimulatedCrash):
        store.collect_garbage()
    bucket.die(store)

    store, _cp = bucket.start()
    log = store.partition("t", 0)
    assert not any(exists(store.object_store, k) for k in keys)  # deleted...
    assert [r.key for r in log.manifest().removed] == keys  # ...but not yet forgotten
    _assert_once_each(log)
    report = store.collect_garbage()  # re-deleting a missing key is harmless (C6)
    assert sorted(report.deleted["removed_segment"]) == sorted(keys)
    assert log.manifest().removed == ()
    assert store.collect_garbage().count() == 0
    _assert_once_each(log)


def test_crash_before_the_retention_commit_changes_nothing(bucket: _Bucket) -> None:
    store, cp = bucket.start()
    _log, _keys = _expired_log(store)
    cp.arm("manifest.before_put")  # the first manifest PUT of this pass is retention's (no roll needed)
    with pytest.raises(SimulatedCrash):
        store.run_retention()
    bucket.die(store)

    store, _cp = bucket.start()
    log = store.partition("t", 0)
    assert log.log_start_offset == 0 and log.manifest().removed == ()
    _assert_once_each(log)
    assert store.run_retention().segments_deleted == 2
    assert log.log_start_offset == 4
    _assert_once_each(log)


def test_crash_after_the_roll_before_the_retention_commit(bucket: _Bucket, clock: ManualClock) -> None:
    """RET-4's roll is a seal: a crash after it loses nothing; the restarted pass deletes everything."""
    store, cp = bucket.start()
    log, _keys = _expired_log(store)
    clock.set(T0 + DAY + 1)  # the active segment expired too: the pass must roll first
    cp.arm("seal.after_manifest_commit")
    with pytest.raises(SimulatedCrash):
        store.run_retention()
    bucket.die(store)

    store, _cp = bucket.start()
    log = store.partition("t", 0)
    assert log.log_start_offset == 0
    assert [s.base_offset for s in log.manifest().segments] == [0, 2, 4]  # the roll's seal landed
    _assert_once_each(log)
    assert offsets(log) == [0, 1, 2, 3, 4]
    report = store.run_retention()
    assert report.segments_deleted == 3
    assert log.log_start_offset == log.log_end_offset == 5
    assert log.read(5) == []
    log.append([s3stream.Record(b"k", b"after", clock.now_ms())])
    _assert_once_each(log)
    assert offsets(log) == [5]
