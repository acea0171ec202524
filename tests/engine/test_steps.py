"""``background=manual``: the store starts no thread of its own and is driven by step calls from one thread.

Every background activity (append drains, the local WAL's writes and fsyncs, flush + publication, seals,
retention, GC, manifest probes) is a step the threads run in production; here the test runs them, with a
``ManualClock(pacing="manual")`` and a seeded ``IdSource``, checks the outcomes the threaded mode gives, and
that the same seed gives the same object keys.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import s3stream
from s3stream import ManualClock, Record
from s3stream.base.errors import BufferFull
from s3stream.base.ids import IdSource
from tests.engine.helpers import T0, open_mem, read_all, recs, values

TOPIC_CONFIG = {"segment.ms": "60000", "retention.ms": "120000", "file.delete.delay.ms": "0"}


def _open(tmp: Path, name: str, *, seed: int = 7, **opts: Any) -> tuple[s3stream.Store, ManualClock]:
    clock = ManualClock(T0, pacing="manual")
    opts.setdefault("flush_interval_ms", 100)
    store = open_mem(f"memory://steps-{name}-{tmp.name}", tmp, clock=clock, wal=f"wal-{name}", ids=IdSource(seed),
                     background="manual", orphan_min_age_ms=1000, manifest_min_age_ms=1000, **opts)
    return store, clock


def _ours(before: set[threading.Thread]) -> list[str]:
    """Threads started since ``before`` (the store's: the test starts none)."""
    return sorted(t.name for t in set(threading.enumerate()) - before if t.is_alive())


def _scenario(store: s3stream.Store, clock: ManualClock) -> list[Record]:
    """Appends, a flush, a roll sealed by the sealer step, more appends: all driven by steps; returns the log."""
    steps = store.runtime.steps()
    store.create_topic("t", 1, TOPIC_CONFIG)
    log = store.partition("t", 0)
    futures = [log.append_async(recs(3, start=3 * i)) for i in range(4)]
    assert not any(f.done() for f in futures)  # queued: no drainer thread writes them
    node = store.runtime.existing_node()
    assert node is not None
    assert steps.drain()
    assert not steps.drain()
    assert not any(f.done() for f in futures)  # in the local WAL's queue: not durable yet
    assert steps.write_wal()
    assert not any(f.done() for f in futures)  # written, not synced: a crash now may lose it
    assert steps.sync_wal()
    assert [f.result(timeout=0).base_offset for f in futures] == [0, 3, 6, 9]  # fsynced, in this thread
    assert node.uploader.puts == 0
    assert not steps.flush()  # not due before flush.interval.ms
    clock.advance(100)
    assert steps.flush()
    assert node.uploader.puts == 1 and node.uploader.buffered_bytes == 0

    s3_ack = log.append_async(recs(2, start=12), ack="s3")
    assert steps.drain()
    assert not s3_ack.done()
    clock.advance(100)
    assert steps.flush()
    assert s3_ack.result(timeout=0).base_offset == 12  # published by the step, in this thread

    clock.advance(60_000)  # segment.ms: the next append rolls the segment
    rolled = log.append_async(recs(2, start=14))
    assert steps.drain()
    assert steps.write_wal() and steps.sync_wal()
    rolled.result(timeout=0)
    assert store.runtime.sealer.pending() == [log.log_id]
    assert [s.sealed for s in log.segments()] == [False, False]
    assert steps.seal()
    assert not steps.seal()
    assert [s.sealed for s in log.segments()] == [True, False]
    clock.advance(100)
    assert steps.run_until_idle() >= 1
    return read_all(log)


def test_a_manual_store_is_driven_by_steps_alone(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    store, clock = _open(tmp_path, "drive")
    try:
        got = _scenario(store, clock)
        assert [r.offset for r in got] == list(range(16))
        assert values(got) == values(recs(16))
        log = store.partition("t", 0)
        assert log.read(0, max_records=2)[1].offset == 1  # the sealed tier: its manifest probe runs inline

        clock.advance(90_000)  # past retention.ms for the sealed segment only
        report = store.run_retention()
        assert report.segments_deleted == 1 and log.log_start_offset == 14
        assert [r.offset for r in read_all(log)] == [14, 15]
        clock.advance(10_000)  # past the grace periods
        garbage = store.collect_garbage()
        assert garbage.count() >= 1
        assert [r.offset for r in read_all(log)] == [14, 15]
        assert log.append(recs(1, start=16)).base_offset == 16
        store.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": "300",
                                    "min.cleanable.dirty.ratio": "0.01"})
        compacted = store.partition("c", 0)
        for i in range(12):
            compacted.append([Record(b"k%d" % (i % 3), b"v%d" % i)])  # rolls every few records
        report = store.run_cleaner()  # its scans, decodes and output uploads run here, in this thread
        assert report.cleaned is not None and report.cleaned.records_kept < report.cleaned.records_read
        assert {r.key: r.value for r in read_all(compacted)} == {b"k0": b"v9", b"k1": b"v10", b"k2": b"v11"}
        assert _ours(before) == []
    finally:
        store.close()
    assert _ours(before) == []


def test_blocking_calls_run_their_steps_inline(tmp_path: Path) -> None:
    """``append`` (both acks), ``roll``, ``flush`` and ``close`` do not wait for a thread that is not there."""
    before = set(threading.enumerate())
    store, _ = _open(tmp_path, "blocking")
    store.create_topic("t", 1)
    log = store.partition("t", 0)
    assert log.append(recs(2)).base_offset == 0
    assert log.append(recs(2, start=2), ack="s3").base_offset == 2
    log.roll()
    assert [s.sealed for s in log.segments()] == [True, False]
    log.append(recs(1, start=4))
    store.flush()
    assert _ours(before) == []
    store.close()
    assert _ours(before) == []


def test_backpressure_is_immediate_without_a_flush_thread(tmp_path: Path) -> None:
    """With nobody to make room meanwhile, a full buffer refuses at once (BufferFull, nothing written);
    a flush step makes room."""
    store, _ = _open(tmp_path, "full", buffer_bytes=1024, flush_bytes=1024)
    try:
        store.create_topic("t", 1)
        log = store.partition("t", 0)
        steps = store.runtime.steps()
        first = log.append_async(recs(1, size=900))
        assert steps.drain()
        assert steps.write_wal() and steps.sync_wal()
        first.result(timeout=0)
        with pytest.raises(BufferFull):
            log.append_async(recs(1, size=900))
        assert steps.flush()  # the refused append asked for a flush: due now
        assert log.append_async(recs(1, size=900, start=1)) is not None
        assert steps.drain()
    finally:
        store.close()


def test_same_seed_same_object_keys(tmp_path: Path) -> None:
    def keys(name: str, seed: int) -> list[str]:
        store, clock = _open(tmp_path, name, seed=seed)
        try:
            _scenario(store, clock)
            return sorted(e.key for e in store.object_store.list(""))
        finally:
            store.close()

    first = keys("a", 11)
    assert first == keys("b", 11)
    assert any("/segments/" in k for k in first) and any(k.startswith("wal/") for k in first)
    assert first != keys("c", 12)


def test_an_upload_is_one_put_attempt_per_flush_step(tmp_path: Path) -> None:
    """A failed WAL-object PUT leaves the object in flight; a later step retries it, once its backoff passed
    (the same seq and bytes), so an outage is a series of steps a simulator interleaves with others."""
    from s3stream.objectstore.memory import MemoryObjectStore
    from s3stream.testing.faults import FaultRule, FaultyObjectStore

    clock = ManualClock(T0, pacing="manual")
    faulty = FaultyObjectStore(MemoryObjectStore("", clock=clock), ids=IdSource(3))
    store = open_mem("memory://steps-retry", tmp_path, clock=clock, wal="wal-retry", ids=IdSource(5),
                     background="manual", object_store=faulty, flush_interval_ms=100,
                     upload_retry_backoff_ms=50, upload_retry_backoff_max_ms=50)
    try:
        store.create_topic("t", 1)
        log = store.partition("t", 0)
        steps = store.runtime.steps()
        acked = log.append_async(recs(2), ack="s3")  # the node opens (its fence lands)
        faulty.set_rules([FaultRule("put", "wal/", "error", count=2)])
        assert steps.drain()
        clock.advance(100)
        node = store.runtime.existing_node()
        assert node is not None
        assert steps.flush() and not acked.done()  # the first attempt failed: in flight, retried later
        assert not steps.flush()  # its backoff has not passed
        clock.advance(50)
        assert steps.flush() and not acked.done()  # the second attempt failed too
        clock.advance(50)
        assert steps.flush()
        assert acked.result(timeout=0).base_offset == 0 and node.uploader.puts == 1
        assert faulty.injected() == {"error": 2}
    finally:
        store.close()
