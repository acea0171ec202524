"""GC: the pure planners at their boundaries, and a whole pass over one partition."""

from __future__ import annotations

import dataclasses

import pytest

from s3stream.base import layout
from s3stream.base.clock import ManualClock
from s3stream.base.crashpoints import CrashPoints, SimulatedCrash
from s3stream.base.errors import InternalError
from s3stream.base.ids import IdSource
from s3stream.manifest.gc import (
    GcReport,
    collect_log_garbage,
    plan_manifest_deletions,
    plan_orphan_deletions,
    plan_removed_deletions,
    segment_key_time_ms,
)
from s3stream.manifest.intents import add_segment, claim_writer, drop_segments
from s3stream.manifest.model import RemovedObject
from s3stream.manifest.versioned import ManifestStore
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.protocol import ListEntry, ObjectStore

from .helpers import PARTITION, TOPIC, TOPIC_ID, FaultyStore, manifest_with, seg, seg_key

MIN = 60_000
HOUR = 3_600_000

# --- planners -------------------------------------------------------------------------------------


def test_removed_deletions_boundary_and_references() -> None:
    m = dataclasses.replace(manifest_with((0, 9)), removed=(
        RemovedObject("a", 1_000, 1), RemovedObject("b", 1_001, 1), RemovedObject("c", 0, 1)))
    none: frozenset[str] = frozenset()
    assert plan_removed_deletions(m, now_ms=1_000 + MIN, delete_delay_ms=MIN, referenced=none) == ["a", "c"]
    assert plan_removed_deletions(m, now_ms=1_000 + MIN, delete_delay_ms=MIN,
                                  referenced=frozenset({"c"})) == ["a"]
    assert plan_removed_deletions(m, now_ms=999 + MIN, delete_delay_ms=MIN, referenced=none) == ["c"]


def _entry(key: str, mtime: int) -> ListEntry:
    return ListEntry(key, 100, mtime)


def test_segment_key_time() -> None:
    assert segment_key_time_ms(seg_key(0, 123_456)) == 123_456
    assert segment_key_time_ms("logs/t/0/segments/notes.txt") is None
    bad_ulid = "logs/t/0/segments/00000000000000000000-" + "!" * 26 + ".parquet"
    assert segment_key_time_ms(bad_ulid) is None


def test_orphan_deletions_need_both_clocks_old() -> None:
    now, age = 10 * HOUR, HOUR
    old, young = now - age, now - age + 1
    both_old = seg_key(1, old)
    at_boundary = seg_key(2, old)
    ulid_young = seg_key(3, young)
    mtime_young = seg_key(4, old)
    referenced, removed = seg_key(5, 0), seg_key(6, 0)
    listing = [
        _entry(both_old, old - 5), _entry(at_boundary, old), _entry(ulid_young, old - 5),
        _entry(mtime_young, young), _entry("logs/t/0/segments/unparsable.parquet", 0),
        _entry(referenced, 0), _entry(removed, 0),
    ]
    out = plan_orphan_deletions(listing, referenced=frozenset({referenced}), removed=frozenset({removed}),
                                now_ms=now, orphan_min_age_ms=age)
    assert out == [both_old, at_boundary]


def test_manifest_deletions_keep_latest_and_young() -> None:
    seqs = [1, 2, 3, 4, 5, 6]
    mtimes = {1: 0, 2: 0, 3: 50, 4: 0, 5: 0, 6: 0}
    assert plan_manifest_deletions(seqs, keep_latest=2, last_modified_ms=mtimes, now_ms=100,
                                   manifest_min_age_ms=100) == [1, 2, 4]
    assert plan_manifest_deletions(seqs, keep_latest=10, last_modified_ms=mtimes, now_ms=100,
                                   manifest_min_age_ms=1) == []
    # The listing lags: seq 6 is the latest found by probing; it and newer are never deleted.
    assert plan_manifest_deletions([1, 2, 6, 7], keep_latest=1, last_modified_ms={1: 0, 2: 0, 6: 0, 7: 0},
                                   now_ms=10, manifest_min_age_ms=0, latest_seq=6) == [1, 2]
    assert plan_manifest_deletions([1, 2, 3], keep_latest=1, last_modified_ms={2: 0}, now_ms=10,
                                   manifest_min_age_ms=0) == [2]
    with pytest.raises(InternalError):
        plan_manifest_deletions(seqs, keep_latest=0, last_modified_ms=mtimes, now_ms=0, manifest_min_age_ms=0)


# --- one GC pass ------------------------------------------------------------------------------------


class Log:
    """A partition with real objects: segments PUT under their keys, manifests committed."""

    def __init__(self, store: ObjectStore, clock: ManualClock) -> None:
        self.store, self.clock, self.ids = store, clock, IdSource(11)
        self.vs = self.open()
        self.vs.commit(claim_writer("node-a"))

    def open(self, crash: CrashPoints | None = None) -> ManifestStore:
        return ManifestStore(self.store, topic=TOPIC, topic_id=TOPIC_ID, partition=PARTITION,
                             clock=self.clock, ids=IdSource(12), crash_points=crash)

    def upload(self, base: int) -> str:
        key = seg_key(base, self.clock.now_ms(), ids=self.ids)
        self.store.put(key, b"segment bytes")
        return key

    def seal(self, base: int, last: int) -> str:
        key = self.upload(base)
        self.vs.commit(add_segment(seg(base, last, key=key, created_ms=self.clock.now_ms()), None))
        return key

    def gc(self, *, dry_run: bool = False, crash_points: CrashPoints | None = None) -> GcReport:
        return collect_log_garbage(self.store, self.open(), now_ms=self.clock.now_ms(), delete_delay_ms=MIN,
                                   orphan_min_age_ms=HOUR, manifest_min_age_ms=HOUR, keep_latest_manifests=3,
                                   dry_run=dry_run, crash_points=crash_points)

    def exists(self, key: str) -> bool:
        return any(e.key == key for e in self.store.list(key))


def test_collect_log_garbage_end_to_end() -> None:
    clock = ManualClock(100 * HOUR)
    store = MemoryObjectStore(clock=clock)
    log = Log(store, clock)
    s0, s1, s2 = log.seal(0, 9), log.seal(10, 19), log.seal(20, 29)  # manifests 2..4
    orphan = log.upload(30)  # crashed before its commit
    log.vs.commit(drop_segments([s0], now_ms=clock.now_ms(), new_log_start=10))  # manifest 5
    clock.advance(2 * HOUR)
    young_orphan = log.upload(30)

    dry = log.gc(dry_run=True)
    assert dry.dry_run and dry.removed_keys == (s0,) and dry.orphan_keys == (orphan,)
    assert log.exists(s0) and log.exists(orphan)

    report = log.gc()
    assert report.removed_keys == (s0,) and report.forgot_removed
    assert report.orphan_keys == (orphan,)
    assert report.manifest_keys == tuple(
        layout.manifest_key(TOPIC_ID, PARTITION, s) for s in (1, 2))  # 3 newest of 1..5 are kept
    assert not log.exists(s0) and not log.exists(orphan)
    assert log.exists(s1) and log.exists(s2) and log.exists(young_orphan)
    latest = log.open().load_latest()
    assert latest is not None and latest.seq == 6 and latest.removed == ()
    assert [s.key for s in latest.segments] == [s1, s2]
    assert log.open().list_seqs() == [3, 4, 5, 6]

    again = log.gc()  # idempotent: nothing left but the manifests that aged
    assert again.removed_keys == () and again.orphan_keys == ()
    assert log.open().load_latest() == latest


def test_removed_objects_wait_for_the_delete_delay() -> None:
    clock = ManualClock(10 * HOUR)
    log = Log(MemoryObjectStore(clock=clock), clock)
    s0 = log.seal(0, 9)
    log.seal(10, 19)
    log.vs.commit(drop_segments([s0], now_ms=clock.now_ms(), new_log_start=10))
    clock.advance(MIN - 1)
    assert log.gc().removed_keys == ()
    clock.advance(1)
    assert log.gc().removed_keys == (s0,)


def test_crash_between_delete_and_forget_only_re_deletes() -> None:
    clock = ManualClock(10 * HOUR)
    log = Log(MemoryObjectStore(clock=clock), clock)
    s0 = log.seal(0, 9)
    log.seal(10, 19)
    log.vs.commit(drop_segments([s0], now_ms=clock.now_ms(), new_log_start=10))
    clock.advance(2 * MIN)
    crash = CrashPoints()
    crash.arm("gc.after_delete")
    with pytest.raises(SimulatedCrash):
        log.gc(crash_points=crash)
    assert not log.exists(s0)
    still = log.open().load_latest()
    assert still is not None and [r.key for r in still.removed] == [s0]
    report = log.gc()
    assert report.removed_keys == (s0,) and report.forgot_removed
    latest = log.open().load_latest()
    assert latest is not None and latest.removed == ()


def test_segments_of_a_manifest_the_listing_missed_are_not_orphans() -> None:
    clock = ManualClock(10 * HOUR)
    store = FaultyStore(MemoryObjectStore(clock=clock))
    log = Log(store, clock)
    key = log.upload(0)
    clock.advance(2 * HOUR)  # the segment is old by both clocks when its manifest lands
    log.vs.commit(add_segment(seg(0, 9, key=key), None))
    latest = log.vs.load_latest()
    assert latest is not None
    store.hide_from_list = {layout.manifest_key(TOPIC_ID, PARTITION, latest.seq)}
    report = log.gc()
    assert report.orphan_keys == ()
    assert log.exists(key)


def test_no_manifest_yet_deletes_old_orphans_only() -> None:
    clock = ManualClock(10 * HOUR)
    store = MemoryObjectStore(clock=clock)
    key = seg_key(0, clock.now_ms())
    store.put(key, b"x")
    clock.advance(HOUR)
    vs = ManifestStore(store, topic=TOPIC, topic_id=TOPIC_ID, partition=PARTITION, clock=clock,
                       ids=IdSource(1))
    report = collect_log_garbage(store, vs, now_ms=clock.now_ms(), delete_delay_ms=MIN,
                                 orphan_min_age_ms=HOUR, manifest_min_age_ms=HOUR)
    assert report.orphan_keys == (key,) and report.manifest_keys == ()
    assert list(store.list("logs/")) == []
