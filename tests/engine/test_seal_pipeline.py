"""The flush and seal pipeline under load: no busy loops while uploads are saturated, seals of different
partitions overlap (``seal_concurrency``), and a seal's WAL-object chunks are fetched ahead, once each."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import s3stream
from s3stream import Record
from s3stream.format.walobject import WalChunkIndex
from s3stream.objectstore.forwarding import ForwardingObjectStore
from s3stream.objectstore.memory import MemoryObjectStore
from s3stream.objectstore.protocol import ByteRange, ObjectMeta, ObjectStore
from s3stream.read.tiers import ChunkCache, LogView, MemBatch, chunks_to_fetch
from s3stream.read.walscan import ChunkRef
from s3stream.write.uploader import Uploader

from .helpers import CountingStore

KIB = 1024


def _open(url: str, tmp_path: Path, inner: ObjectStore, **opts: Any) -> s3stream.Store:
    return s3stream.open_store(url, object_store=inner, probe=False, wal_dir=str(tmp_path / "wal"),
                               wal_fsync=False, **opts)


def _count_calls(monkeypatch: pytest.MonkeyPatch, cls: type, name: str) -> list[int]:
    calls = [0]
    real = getattr(cls, name)

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, counted)
    return calls


def test_flush_thread_waits_instead_of_spinning_when_every_upload_slot_is_busy(
        mem_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inner = CountingStore(MemoryObjectStore(mem_url.removeprefix("memory://")))
    store = _open(mem_url, tmp_path, inner, upload_concurrency=1, flush_interval_ms=1)
    try:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.append([Record(b"k", b"v")])
        store.flush()
        inner.stall()
        log.append([Record(b"k", b"first")])  # its object's PUT blocks: the only upload slot is taken
        assert inner.blocked.wait(5)
        log.append([Record(b"k", b"second")])  # overdue within 1 ms, but no slot is free
        time.sleep(0.05)
        due = _count_calls(monkeypatch, Uploader, "_due")
        time.sleep(0.5)
        # a waiting flush thread checks once per wake-up (idle poll 0.5 s); a spinning one, thousands of times
        assert due[0] < 20, f"the flush thread checked {due[0]} times in 0.5 s"
    finally:
        inner.release()
        store.close()
    with _open(mem_url, tmp_path, MemoryObjectStore(mem_url.removeprefix("memory://"))) as again:
        assert [r.value for r in again.partition("t", 0).read(0)] == [b"v", b"first", b"second"]


def test_appends_waiting_for_room_do_not_wake_each_other(
        mem_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inner = CountingStore(MemoryObjectStore(mem_url.removeprefix("memory://")))
    store = _open(mem_url, tmp_path, inner, upload_concurrency=1, buffer_bytes=4 * KIB, flush_bytes=KIB)
    threads: list[threading.Thread] = []
    try:
        store.create_topic("t", partitions=4)
        logs = [store.partition("t", p) for p in range(4)]
        for log in logs:
            log.append([Record(b"k", b"x")])
        store.flush()
        inner.stall()
        big = [Record(b"k", b"v" * (3 * KIB))]
        logs[0].append(big)
        assert inner.blocked.wait(5)
        checks = _count_calls(monkeypatch, Uploader, "_check_locked")
        threads = [threading.Thread(target=log.append, args=(big,), daemon=True) for log in logs]
        for t in threads:
            t.start()
        time.sleep(0.5)
        assert all(t.is_alive() for t in threads)  # backpressure: every append waits for room
        # each waiter re-checks on its 50 ms timeout (~40 in 0.5 s for four); a notify storm, thousands
        assert checks[0] < 200, f"{checks[0]} wake-ups of four waiting appends in 0.5 s"
    finally:
        inner.release()
        for t in threads:
            t.join(10)
        store.close()


class _SegmentPutBarrier(ForwardingObjectStore):
    """Segment PUTs wait until ``parties`` of them are in flight at once (or time out)."""

    def __init__(self, inner: MemoryObjectStore, parties: int) -> None:
        super().__init__(inner)
        self.barrier = threading.Barrier(parties, timeout=10)
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most = 0

    def put(self, key: str, data: bytes | bytearray | memoryview, *, if_none_match: bool = False,
            if_match: str | None = None) -> ObjectMeta:
        if "/segments/" not in key:
            return super().put(key, data, if_none_match=if_none_match, if_match=if_match)
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            self.barrier.wait()
            return super().put(key, data, if_none_match=if_none_match, if_match=if_match)
        finally:
            with self.lock:
                self.in_flight -= 1


def test_segments_of_different_partitions_are_sealed_concurrently(mem_url: str, tmp_path: Path) -> None:
    barrier = _SegmentPutBarrier(MemoryObjectStore(mem_url.removeprefix("memory://")), parties=2)
    with _open(mem_url, tmp_path, barrier, seal_concurrency=2) as store:
        store.create_topic("t", partitions=2, config={"segment.bytes": 4 * KIB})
        logs = [store.partition("t", p) for p in range(2)]
        for i in range(2):  # the second append of each partition rolls its first segment
            for log in logs:
                log.append([Record(b"k", b"v" * (3 * KIB))])
        store.flush()  # waits for both seals: they pass the barrier only together
        assert [len([s for s in log.segments() if s.sealed]) for log in logs] == [1, 1]
        assert barrier.most == 2


class _GetLog(ForwardingObjectStore):
    def __init__(self, inner: MemoryObjectStore) -> None:
        super().__init__(inner)
        self.gets: list[tuple[str, ByteRange | None]] = []
        self.lock = threading.Lock()

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        with self.lock:
            self.gets.append((key, byte_range))
        return super().get(key, byte_range)


def test_seals_prefetch_wal_chunks_and_fetch_each_once(mem_url: str, tmp_path: Path) -> None:
    name = mem_url.removeprefix("memory://")
    # the tail cache is off, so the seal reads every record back from the WAL objects
    with _open(mem_url, tmp_path, MemoryObjectStore(name), cache_bytes=0) as store:
        store.create_topic("t", config={"segment.bytes": 1 << 30})
        log = store.partition("t", 0)
        for i in range(12):
            log.append([Record(b"k", bytes([i]) * KIB) for _ in range(64)])
            store.flush()  # one WAL object (one chunk) per append
        recorder = _GetLog(MemoryObjectStore(name))
        store.runtime.chunks = ChunkCache(recorder)
        log.roll()
        wal_gets = [g for g in recorder.gets if g[0].startswith("wal/")]
        # every chunk once (the newest may still be in memory: it was unflushed when the cache last evicted)
        assert len(set(wal_gets)) == len(wal_gets) >= 11
        assert [r.value for r in log.read(0, max_records=1000)] == [
            bytes([i]) * KIB for i in range(12) for _ in range(64)]


def _ref(n: int, first: int, count: int, nbytes: int) -> ChunkRef:
    chunk = WalChunkIndex(log_id="l", base_offset=first, last_offset=first + count - 1, record_count=count,
                          size_bytes=nbytes, max_timestamp=0, first_timestamp=0, byte_start=0, byte_end=nbytes,
                          crc32c=0, roll_offsets=())
    return ChunkRef(key=f"wal/{n}", seq=n, chunk=chunk)


def test_chunks_to_fetch_skips_the_cached_suffix_and_stops_at_the_byte_budget() -> None:
    refs = tuple(_ref(i, 100 * i, 100, 1000) for i in range(6))  # offsets 0..599
    memory = (MemBatch(450, 599, 1, None),)
    view = LogView(0, 600, 0, chunks=refs, memory=memory)
    # wanted [150, 600): chunks 1..4 hold offsets below the cache (4 only in part, 400..449)
    assert [r.seq for r in chunks_to_fetch(view, 150, 600, 10_000)] == [1, 2, 3, 4]
    assert [r.seq for r in chunks_to_fetch(view, 150, 600, 2000)] == [1, 2]
    assert [r.seq for r in chunks_to_fetch(view, 150, 600, 10)] == [1]  # at least one
    assert chunks_to_fetch(view, 450, 600, 10_000) == []  # all cached
    assert [r.seq for r in chunks_to_fetch(view, 150, 250, 10_000)] == [1, 2]  # stops at ``end``
