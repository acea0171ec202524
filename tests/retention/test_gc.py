"""Deferred physical deletion (``Store.collect_garbage()``) after retention.

Segments dropped from the manifest are unreadable at once (the log start moved) but their objects are
deleted only once ``file.delete.delay.ms`` has passed since the drop (at exactly the delay counts);
WAL objects whose data is all sealed, or belongs to deleted topics, are collected too (after
``orphan_min_age_ms``; the newest WAL object of a namespace is always kept as the fence floor).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import s3stream
from s3stream import ManualClock, OffsetOutOfRange

from .store_kit import DAY, HOUR, T0, exists, offsets, open_at, shape

_DELAY = 60_000


def _expire_two_segments(store: s3stream.Store, clock: ManualClock, **config: object) -> tuple[
        s3stream.PartitionLog, list[str]]:
    store.create_topic("t", config={"retention.ms": DAY, **config})
    log = store.partition("t", 0)
    shape(log, [[T0] * 2, [T0] * 2, [T0 + 2 * DAY]])
    keys = [s.key for s in log.segments() if s.key is not None]
    clock.set(T0 + DAY + 1)
    assert store.run_retention().segments_deleted == 2
    return log, keys


def test_dropped_segments_are_deleted_only_after_file_delete_delay(store: s3stream.Store, clock: ManualClock) -> None:
    log, keys = _expire_two_segments(store, clock, **{"file.delete.delay.ms": _DELAY})
    dropped_at = clock.now_ms()
    assert [r.key for r in log.manifest().removed] == keys
    clock.set(dropped_at + _DELAY - 1)
    report = store.collect_garbage()
    assert report.count("removed_segment") == 0
    assert all(exists(store.object_store, k) for k in keys)
    with pytest.raises(OffsetOutOfRange):  # unreadable although still stored
        log.read(0)
    clock.set(dropped_at + _DELAY)  # exactly the delay: due
    report = store.collect_garbage()
    assert sorted(report.deleted["removed_segment"]) == sorted(keys)
    assert not any(exists(store.object_store, k) for k in keys)
    assert log.manifest().removed == ()  # forgotten once deleted
    assert store.collect_garbage().count("removed_segment") == 0
    with pytest.raises(OffsetOutOfRange):
        log.read(3)
    assert offsets(log) == [4]


def test_default_delay_is_one_minute(store: s3stream.Store, clock: ManualClock) -> None:
    _log, keys = _expire_two_segments(store, clock)
    clock.advance(59_999)
    assert store.collect_garbage().count("removed_segment") == 0
    clock.advance(1)
    assert store.collect_garbage().count("removed_segment") == 2
    assert not any(exists(store.object_store, k) for k in keys)


def test_zero_delay_deletes_at_the_first_gc(store: s3stream.Store, clock: ManualClock) -> None:
    _log, _keys = _expire_two_segments(store, clock, **{"file.delete.delay.ms": 0})
    assert store.collect_garbage().count("removed_segment") == 2


def test_dry_run_deletes_nothing(store: s3stream.Store, clock: ManualClock) -> None:
    log, keys = _expire_two_segments(store, clock, **{"file.delete.delay.ms": 0})
    report = store.collect_garbage(dry_run=True)
    assert report.dry_run and sorted(report.deleted["removed_segment"]) == sorted(keys)
    assert all(exists(store.object_store, k) for k in keys)
    assert len(log.manifest().removed) == 2


def test_delay_is_read_per_topic_at_gc_time(store: s3stream.Store, clock: ManualClock) -> None:
    _log, _keys = _expire_two_segments(store, clock, **{"file.delete.delay.ms": DAY})
    clock.advance(HOUR)
    assert store.collect_garbage().count("removed_segment") == 0
    store.alter_topic_config("t", {"file.delete.delay.ms": HOUR})
    assert store.collect_garbage().count("removed_segment") == 2


def _wal_keys(store: s3stream.Store) -> list[str]:
    return sorted(e.key for e in store.object_store.list("wal/"))


def test_wal_objects_whose_data_is_all_sealed_are_collected(
        mem_url: str, tmp_path: Path, clock: ManualClock) -> None:
    with open_at(mem_url, tmp_path / "wal", clock, orphan_min_age_ms=1000) as store:
        store.create_topic("t")
        store.create_topic("other")
        log = store.partition("t", 0)
        for i in range(3):  # three WAL objects whose records are then sealed
            log.append([s3stream.Record(b"k", b"sealed-%d" % i, T0)])
            store.flush()
            log.roll()
        log.append([s3stream.Record(b"k", b"unsealed", T0)])
        store.flush()  # a WAL object holding t/0's active segment: still needed
        store.partition("other", 0).append([s3stream.Record(b"k", b"newest", T0)])
        store.flush()  # the newest WAL object: the fence floor, always kept
        wal = _wal_keys(store)
        assert len(wal) >= 5
        assert store.collect_garbage().count("wal_object") == 0  # too young (orphan_min_age_ms)
        clock.advance(1000)
        report = store.collect_garbage()
        kept = _wal_keys(store)
        assert kept == wal[-2:]  # the one with unsealed records, and the newest
        assert sorted(report.deleted["wal_object"]) == wal[:-2]
        assert [r.value for r in log.read(0)] == [b"sealed-0", b"sealed-1", b"sealed-2", b"unsealed"]


def test_everything_of_a_fully_expired_partition_is_collected(
        mem_url: str, tmp_path: Path, clock: ManualClock) -> None:
    """Retention rolls and drops the active segment too; then GC removes its segments and WAL objects."""
    with open_at(mem_url, tmp_path / "wal", clock, orphan_min_age_ms=0) as store:
        store.create_topic("t", config={"retention.ms": DAY, "file.delete.delay.ms": 0})
        log = store.partition("t", 0)
        for group in ([T0] * 3, [T0] * 3, [T0] * 3):
            log.append([s3stream.Record(b"k", b"v", ts) for ts in group])
            store.flush()
            log.roll()
        log.append([s3stream.Record(b"k", b"v", T0)])
        store.flush()
        clock.set(T0 + DAY + 1)
        store.run_retention()
        report = store.collect_garbage()
        assert report.count("removed_segment") == 4
        assert not list(store.object_store.list(f"logs/{log.topic_id}/0/segments/"))
        assert len(_wal_keys(store)) == 1  # only the newest, the fence floor
        assert log.log_start_offset == log.log_end_offset == 10
        log.append([s3stream.Record(b"k", b"after", clock.now_ms())])
        assert offsets(log) == [10]


def test_wal_objects_of_deleted_topics_are_collected(mem_url: str, tmp_path: Path, clock: ManualClock) -> None:
    with open_at(mem_url, tmp_path / "wal", clock, orphan_min_age_ms=0) as store:
        for name in ("gone", "kept", "late"):
            store.create_topic(name, config={"file.delete.delay.ms": 0})
        for i in range(2):
            store.partition("gone", 0).append([s3stream.Record(b"k", b"v%d" % i, T0)])
            store.flush()
        store.partition("kept", 0).append([s3stream.Record(b"k", b"v", T0)])
        store.flush()  # unsealed records of a live topic: needed
        store.partition("late", 0).append([s3stream.Record(b"k", b"v", T0)])
        store.flush()  # the newest: the fence floor
        wal = _wal_keys(store)  # [the namespace's fence object, gone, gone, kept, late]
        assert len(wal) == 5
        store.delete_topic("gone")
        report = store.collect_garbage()
        assert sorted(report.deleted["wal_object"]) == wal[:3]
        assert _wal_keys(store) == wal[3:]
        assert [r.value for r in store.partition("kept", 0).read(0)] == [b"v"]


def test_abandoned_job_directories_are_collected_live_ones_kept(
        mem_url: str, tmp_path: Path, clock: ManualClock) -> None:
    """A crashed Spark job leaves ``_spark/jobs/{id}/``; a running one keeps its heartbeat fresh."""
    from s3stream.base import layout

    with open_at(mem_url, tmp_path / "wal", clock, orphan_min_age_ms=0) as store:
        objects = store.object_store
        crashed = [layout.job_heartbeat_key("crashed"), layout.job_map_key("crashed", "tid", 0)]
        live = [layout.job_heartbeat_key("live"), layout.job_map_key("live", "tid", 1)]
        for key in crashed + live:
            objects.put(key, b"x")
        objects.put("_spark/other", b"not a job directory")
        for _ in range(layout.JOB_ABANDONED_AFTER_MS // layout.JOB_HEARTBEAT_INTERVAL_MS):
            assert store.collect_garbage().count("abandoned_job") == 0
            clock.advance(layout.JOB_HEARTBEAT_INTERVAL_MS)
            objects.put(live[0], b"x")  # the live job's heartbeat
        assert store.collect_garbage(dry_run=True).deleted["abandoned_job"] == crashed
        assert all(exists(objects, k) for k in crashed)
        report = store.collect_garbage()
        assert sorted(report.deleted["abandoned_job"]) == sorted(crashed)
        assert not any(exists(objects, k) for k in crashed)
        assert all(exists(objects, k) for k in live) and exists(objects, "_spark/other")


def test_abandoned_jobs_wait_for_orphan_min_age_too(mem_url: str, tmp_path: Path, clock: ManualClock) -> None:
    from s3stream.base import layout

    with open_at(mem_url, tmp_path / "wal", clock, orphan_min_age_ms=DAY) as store:
        store.object_store.put(layout.job_map_key("crashed", "tid", 0), b"x")
        clock.advance(DAY - 1)
        assert store.collect_garbage().count("abandoned_job") == 0
        clock.advance(1)
        assert store.collect_garbage().count("abandoned_job") == 1


def test_only_the_job_layouts_keys_are_job_keys() -> None:
    """GC takes only what a job writes (its heartbeat, its offset maps) for a job's: never the keys of a store
    nested under the jobs directory."""
    from s3stream.base import layout

    assert layout.parse_job_key(layout.job_heartbeat_key("j-1")) == "j-1"
    assert layout.parse_job_key(layout.job_map_key("j-1", "01jx2c", 12)) == "j-1"
    for key in ("_spark/jobs/topics/t/meta/00000000000000000001.json", "_spark/jobs/wal/n-1/heartbeat",
                "_spark/jobs/j-1/maps/tid-0.arrow/x", "_spark/jobs/j-1/heartbeat.tmp", "_spark/jobs/j-1/",
                "_spark/jobs/j-1/maps/TID-0.arrow", "_spark/jobs/j-1/maps/tid-01.arrow", "_spark/other",
                "logs/t/0/heartbeat", "_spark/jobs//heartbeat"):
        assert layout.parse_job_key(key) is None, key
