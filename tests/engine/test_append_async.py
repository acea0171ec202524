"""append_async and the per-call ack: many appends in flight, one WAL entry per drain round, offsets in call
order, atomic batches, ack=s3 per call, typed errors, recovery of acknowledged appends, close with appends queued."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

import s3stream
from s3stream import AppendResult, Record
from s3stream.base.errors import (
    Closed,
    Fenced,
    InvalidArgument,
    InvalidConfig,
    InvalidRecord,
    RecordTooLarge,
    UnknownTopic,
)
from s3stream.write.node_runtime import NodeRuntime

from .helpers import abandon, open_mem, read_all, recs, values


def _node(store: s3stream.Store) -> NodeRuntime:
    node = store.runtime.existing_node()
    assert node is not None
    return node


def test_async_appends_from_one_thread_land_in_call_order(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        futures = [log.append_async([Record(b"k", b"%d" % i)]) for i in range(300)]
        futures.append(log.append_async(recs(5, prefix="tail")))
        results = [f.result(timeout=30) for f in futures]
        assert [r.base_offset for r in results[:300]] == list(range(300))
        assert results[-1] == AppendResult(300, 304)
        got = read_all(log)
        assert values(got)[:300] == [b"%d" % i for i in range(300)]
        assert [r.key for r in got[300:]] == [b"tail%d" % i for i in range(5)]


def test_queued_appends_share_one_wal_entry(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.append([Record(b"k", b"first")])  # the node is open and the partition claimed
        node = _node(store)
        before = node.wal.next_seq
        with node.append_lock:  # the first round waits for the lock: everything after it queues up
            futures = [log.append_async([Record(b"k", b"%d" % i)]) for i in range(100)]
        results = [f.result(timeout=30) for f in futures]
        assert [r.base_offset for r in results] == list(range(1, 101))
        assert node.wal.next_seq - before <= 2  # one entry for the first round, one for the 99 queued
        assert values(read_all(log))[1:] == [b"%d" % i for i in range(100)]


def test_concurrent_appends_are_atomic_and_dense(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path, wal_fsync=False) as store:
        store.create_topic("t", config={"segment.bytes": 4000})  # rolls inside drain rounds
        log = store.partition("t", 0)
        landed: dict[tuple[int, int], AppendResult] = {}
        errors: list[BaseException] = []

        def producer(t: int) -> None:
            try:
                pending: list[tuple[int, Future[AppendResult]]] = []
                for i in range(60):
                    batch = [Record(b"t%d" % t, b"%d-%d-%d" % (t, i, j)) for j in range(1 + i % 3)]
                    if i % 2:
                        pending.append((i, log.append_async(batch)))
                    else:
                        landed[(t, i)] = log.append(batch)
                for i, fut in pending:
                    landed[(t, i)] = fut.result(timeout=30)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=producer, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        assert not errors, errors
        log.flush()
        got = read_all(log)
        assert [r.offset for r in got] == list(range(len(got)))
        assert len(got) == sum(1 + i % 3 for _t in range(8) for i in range(60))
        by_offset = {r.offset: r.value for r in got}
        for (t, i), res in landed.items():
            assert res.last_offset - res.base_offset == i % 3  # one append = consecutive offsets
            assert [by_offset[o] for o in range(res.base_offset, res.last_offset + 1)] == [
                b"%d-%d-%d" % (t, i, j) for j in range(1 + i % 3)]
        assert len(log.segments()) > 2


def test_ack_per_call(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path, flush_interval_ms=300) as store, \
            open_mem(mem_url, tmp_path, wal="reader") as reader:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.append([Record(b"k", b"wal")], ack="wal")  # in the local WAL; its WAL object comes within 300 ms
        fut = log.append_async([Record(b"k", b"s3")], ack="s3")
        assert fut.result(timeout=30) == AppendResult(1, 1)
        # acknowledged with ack=s3: its WAL object is committed, so another process reads it
        assert values(reader.partition("t", 0).read(0)) == [b"wal", b"s3"]
        assert log.append([Record(b"k", b"again")], ack="s3") == AppendResult(2, 2)
        for bad in ("all", "S3", 1):
            with pytest.raises(InvalidArgument, match="ack"):
                log.append([Record(b"k", b"x")], ack=bad)  # type: ignore[arg-type]
        assert log.log_end_offset == 3
    with open_mem(mem_url, tmp_path, wal="short", flush_interval_ms=500, max_block_ms=400) as short:
        with pytest.raises(InvalidConfig, match="max_block_ms"):  # every ack=s3 append would time out
            short.partition("t", 0).append_async([Record(b"k", b"x")], ack="s3")


def test_errors_before_writing_raise_at_the_call(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("c", config={"cleanup.policy": "compact", "max.message.bytes": "200"})
        log = store.partition("c", 0)
        with pytest.raises(InvalidRecord, match="record 1 has a null key"):
            log.append_async([Record(b"k", b"v"), Record(None, b"v")])
        with pytest.raises(RecordTooLarge, match="record 0"):
            log.append_async([Record(b"k", b"v" * 300)])
        with pytest.raises(InvalidRecord, match="at least one"):
            log.append_async([])
        with pytest.raises(InvalidArgument):
            log.append_async(None)  # type: ignore[arg-type]
        with pytest.raises(InvalidRecord, match=r"not an s3stream\.Record"):
            log.append_async([Record(b"k", b"v"), (b"k", b"v")])  # type: ignore[list-item]
        assert log.append_async([Record(b"k", b"ok")]).result(timeout=30) == AppendResult(0, 0)
        store.delete_topic("c")
        with pytest.raises(UnknownTopic):
            log.append_async([Record(b"k", b"v")])
    with pytest.raises(Closed):
        log.append_async([Record(b"k", b"v")])


def test_a_fenced_node_fails_the_futures(mem_url: str, tmp_path: Path) -> None:
    a = open_mem(mem_url, tmp_path, wal="a", flush_interval_ms=5)
    b = open_mem(mem_url, tmp_path, wal="b", flush_interval_ms=5)
    try:
        a.create_topic("t")
        la = a.partition("t", 0)
        la.append_async([Record(b"k", b"a0")], ack="s3").result(timeout=30)
        b.partition("t", 0).append([Record(b"k", b"b0")])  # takes the partition over: fences a's namespace
        futures = [la.append_async([Record(b"k", b"a%d" % i)], ack="s3") for i in range(1, 20)]
        for fut in futures:  # a's next WAL object collides with the fence: nothing is acknowledged
            with pytest.raises(Fenced):
                fut.result(timeout=30)
        with pytest.raises(Fenced):
            la.append_async([Record(b"k", b"late")])
        assert values(read_all(b.partition("t", 0))) == [b"a0", b"b0"]
    finally:
        b.close()
        a.close()


def test_acknowledged_async_appends_survive_a_crash(mem_url: str, tmp_path: Path) -> None:
    store = open_mem(mem_url, tmp_path, flush_interval_ms=60_000)
    store.create_topic("t", config={"segment.bytes": 2000})
    log = store.partition("t", 0)
    futures = [log.append_async([Record(b"k", b"%d" % i)]) for i in range(200)]
    assert [f.result(timeout=30).base_offset for f in futures] == list(range(200))
    abandon(store)  # nothing was uploaded: the records are only in the local WAL
    with open_mem(mem_url, tmp_path) as again:
        assert values(read_all(again.partition("t", 0))) == [b"%d" % i for i in range(200)]


def test_close_writes_the_queued_appends(mem_url: str, tmp_path: Path) -> None:
    store = open_mem(mem_url, tmp_path)
    store.create_topic("t")
    log = store.partition("t", 0)
    futures = [log.append_async([Record(b"k", b"%d" % i)], ack="s3") for i in range(50)]
    store.close()
    assert [f.result(timeout=0).base_offset for f in futures] == list(range(50))
    with open_mem(mem_url, tmp_path, wal="other") as reader:
        assert values(read_all(reader.partition("t", 0))) == [b"%d" % i for i in range(50)]


def test_roll_and_flush_include_queued_appends(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        for i in range(10):
            log.append_async([Record(b"k", b"%d" % i)])
        log.roll()
        sealed = [s for s in log.segments() if s.sealed]
        assert [(s.base_offset, s.last_offset) for s in sealed] == [(0, 9)]
        log.append_async([Record(b"k", b"late")])
        log.flush()  # the queued append is in a WAL object: another process reads it
        with open_mem(mem_url, tmp_path, wal="reader") as reader:
            assert values(read_all(reader.partition("t", 0)))[-1] == b"late"
