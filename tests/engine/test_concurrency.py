"""Concurrent appenders, readers, background flushes and seals on one store: offsets stay dense and unique."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import s3stream
from s3stream import Record
from s3stream.write.node_runtime import NodeRuntime

from .helpers import abandon, open_mem, read_all

THREADS = 6
PER_THREAD = 40


def test_concurrent_appends_reads_and_seals(mem_url: str, tmp_path: Path) -> None:
    store = open_mem(mem_url, tmp_path, flush_interval_ms=5, wal_fsync=False, cache_bytes=2000)
    store.create_topic("t", partitions=2, config={"segment.bytes": 600})
    logs = [store.partition("t", p) for p in range(2)]
    errors: list[BaseException] = []
    results: dict[int, list[tuple[int, int]]] = {t: [] for t in range(THREADS)}
    stop = threading.Event()

    def producer(t: int) -> None:
        try:
            for i in range(PER_THREAD):
                log = logs[(t + i) % 2]
                res = log.append([Record(b"t%d" % t, b"%d-%d" % (t, i)), Record(b"t%d" % t, b"%d-%db" % (t, i))])
                assert res.last_offset == res.base_offset + 1
                results[t].append((log.partition, res.base_offset))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def reader() -> None:
        try:
            while not stop.is_set():
                for log in logs:
                    got = read_all(log, 0)
                    assert [r.offset for r in got] == list(range(len(got)))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=producer, args=(t,)) for t in range(THREADS)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for th in threads + readers:
        th.start()
    for th in threads:
        th.join(60)
    stop.set()
    for th in readers:
        th.join(60)
    assert not errors, errors

    def verify(s: s3stream.Store) -> None:
        for p in range(2):
            got = read_all(s.partition("t", p), 0)
            assert [r.offset for r in got] == list(range(len(got)))
            by_offset = {r.offset: r.value for r in got}
            for t, placed in results.items():
                for i, (part, base) in enumerate(placed):
                    if part == p:
                        assert by_offset[base] == b"%d-%d" % (t, i)
                        assert by_offset[base + 1] == b"%d-%db" % (t, i)
            assert len(got) == sum(2 for placed in results.values() for part, _ in placed if part == p)

    verify(store)
    abandon(store)
    with open_mem(mem_url, tmp_path) as recovered:
        verify(recovered)
        for p in range(2):
            segs = recovered.partition("t", p).segments()
            assert all(s.size_bytes <= 600 for s in segs)


def test_an_append_racing_node_recovery_waits_for_it(mem_url: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Recovery ends by detaching the partitions it touched: an append claiming a partition while the node
    still recovers would lose its writer state, and the next append would reuse its offsets (a CI flake)."""
    store = open_mem(mem_url, tmp_path, wal_fsync=False)
    store.create_topic("t", partitions=1)
    log = store.partition("t", 0)
    rt = store.runtime
    recovering = threading.Event()
    appended = threading.Event()
    real_recover = rt._recover

    def slow_recover(node: NodeRuntime) -> None:
        real_flush = node.uploader.flush

        def flush_then_pause(timeout_s: float | None = None) -> None:
            # the window: after recovery's flush, before it detaches the partitions it knows
            real_flush(timeout_s)
            recovering.set()
            appended.wait(1.0)  # the racing append must NOT get through while we recover

        monkeypatch.setattr(node.uploader, "flush", flush_then_pause)
        real_recover(node)
        monkeypatch.setattr(node.uploader, "flush", real_flush)

    monkeypatch.setattr(rt, "_recover", slow_recover)
    results: list[int] = []

    def racer() -> None:
        recovering.wait(10)
        results.append(log.append([Record(b"k", b"racer")]).base_offset)
        appended.set()

    th = threading.Thread(target=racer)
    th.start()
    results.append(log.append([Record(b"k", b"opener")]).base_offset)
    th.join(10)
    results.append(log.append([Record(b"k", b"after")]).base_offset)
    assert sorted(results) == [0, 1, 2]
    assert [r.offset for r in read_all(log, 0)] == [0, 1, 2]
    store.close()
