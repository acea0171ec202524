"""The flush pipeline: one WAL object per flush whatever the partition count, triggers, backpressure."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import s3stream
from s3stream import ManualClock, Record
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.recording import RecordingObjectStore

from .helpers import T0, CountingStore, read_all


def _wal_puts(rec: RecordingObjectStore) -> list[str]:
    return [key for op, key, _ in rec.log if op == "PUT" and key.startswith("wal/")]


def _eventually(cond, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return bool(cond())


def test_one_wal_object_per_flush_for_100_partitions(mem_url: str, tmp_path: Path) -> None:
    rec = RecordingObjectStore(MemoryObjectStore(mem_url.removeprefix("memory://")))
    store = s3stream.open_store(mem_url, object_store=rec, clock=ManualClock(T0), probe=False,
                                wal_dir=str(tmp_path / "wal"), flush_interval_ms=600_000, wal_fsync=False)
    try:
        store.create_topic("t", partitions=100)
        logs = [store.partition("t", p) for p in range(100)]
        for i in range(10):
            for log in logs:
                log.append([Record(b"k", b"p%d-%d" % (log.partition, i))])
        before = _wal_puts(rec)
        assert len(before) == 1  # only the node's fence object so far
        store.flush()
        after = _wal_puts(rec)
        assert len(after) - len(before) == 1
        for log in logs[::17]:
            assert [r.value for r in log.read(0)] == [b"p%d-%d" % (log.partition, i) for i in range(10)]
    finally:
        store.close()
    with s3stream.open_store(mem_url, clock=ManualClock(T0), probe=False, wal_dir=str(tmp_path / "r")) as reader:
        assert all(reader.partition("t", p).log_end_offset == 10 for p in range(0, 100, 9))


def test_flush_bytes_and_interval_trigger_uploads(mem_url: str, tmp_path: Path) -> None:
    rec = RecordingObjectStore(MemoryObjectStore(mem_url.removeprefix("memory://")))
    with s3stream.open_store(mem_url, object_store=rec, clock=ManualClock(T0), probe=False,
                             wal_dir=str(tmp_path / "wal"), flush_interval_ms=600_000,
                             flush_bytes=2000) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.append([Record(b"k", b"x" * 500)])
        base = len(_wal_puts(rec))
        time.sleep(0.2)
        assert len(_wal_puts(rec)) == base  # under flush.bytes, long interval: nothing uploaded
        log.append([Record(b"k", b"x" * 1000) for _ in range(2)])
        assert _eventually(lambda: len(_wal_puts(rec)) == base + 1)
    rec2 = RecordingObjectStore(MemoryObjectStore(mem_url.removeprefix("memory://") + "-b"))
    try:
        with s3stream.open_store(mem_url + "-b", object_store=rec2, clock=ManualClock(T0), probe=False,
                                 wal_dir=str(tmp_path / "wal2"), flush_interval_ms=30) as store:
            store.create_topic("t")
            log = store.partition("t", 0)
            log.append([Record(b"k", b"small")])  # no flush() call: the interval uploads it
            assert _eventually(lambda: len(_wal_puts(rec2)) == 2)  # the fence object, then the data
            assert len(_wal_puts(rec2)) == 2
    finally:
        MemoryObjectStore.drop_namespace(mem_url.removeprefix("memory://") + "-b")


def test_ack_s3_latency_follows_flush_interval(mem_url: str, tmp_path: Path) -> None:
    with s3stream.open_store(mem_url, clock=ManualClock(T0), probe=False, wal_dir=str(tmp_path / "wal"),
                             ack="s3", flush_interval_ms=10) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.append([Record(b"k", b"warm-up")])
        start = time.monotonic()
        for i in range(10):
            log.append([Record(b"k", b"%d" % i)])
        assert time.monotonic() - start < 2.0  # an idle poll (0.5 s) per append would take >= 5 s


def test_backpressure_blocks_appends_until_the_store_recovers(mem_url: str, tmp_path: Path) -> None:
    stalled = CountingStore(MemoryObjectStore(mem_url.removeprefix("memory://")))
    store = s3stream.open_store(mem_url, object_store=stalled, clock=ManualClock(T0), probe=False,
                                wal_dir=str(tmp_path / "wal"), flush_interval_ms=10, flush_bytes=600,
                                buffer_bytes=600, wal_fsync=False)
    try:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.append([Record(b"k", b"first")])
        store.flush()
        stalled.stall()
        done: list[int] = []
        errors: list[BaseException] = []

        def producer() -> None:
            try:
                for i in range(40):
                    done.append(log.append([Record(b"k", b"x" * 80 + b"%d" % i)]).base_offset)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        t = threading.Thread(target=producer, daemon=True)
        t.start()
        assert stalled.blocked.wait(5)
        time.sleep(0.3)
        assert t.is_alive() and not errors
        assert len(done) < 40  # appends wait for room instead of failing or dropping
        stalled.release()
        t.join(20)
        assert not t.is_alive() and not errors
        assert done == list(range(1, 41))
        got = read_all(log)
        assert [r.offset for r in got] == list(range(41))
        assert got[-1].value == b"x" * 80 + b"39"
    finally:
        stalled.release()
        store.close()
