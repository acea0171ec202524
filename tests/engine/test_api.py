"""The public API contract of PartitionLog: offsets, reads across tiers, budgets, timestamps, headers."""

from __future__ import annotations

from pathlib import Path

import pytest

from s3stream import ManualClock, OffsetOutOfRange, PolicyViolation, Record
from s3stream.base.errors import Closed

from .helpers import T0, open_mem, read_all, recs, values


def test_append_returns_consecutive_offsets(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        r1 = log.append(recs(3))
        r2 = log.append(recs(1))
        r3 = log.append(recs(5))
        assert (r1.base_offset, r1.last_offset) == (0, 2)
        assert (r2.base_offset, r2.last_offset) == (3, 3)
        assert (r3.base_offset, r3.last_offset) == (4, 8)
        assert log.log_start_offset == 0
        assert log.log_end_offset == 9


@pytest.mark.parametrize("cache_bytes", [None, 0])
def test_read_across_batches_segments_and_tiers(mem_url: str, tmp_path: Path, cache_bytes: int | None) -> None:
    opts = {} if cache_bytes is None else {"cache_bytes": cache_bytes}  # 0: the tail cache is always evicted
    with open_mem(mem_url, tmp_path, **opts) as store:
        store.create_topic("t", config={"segment.bytes": 400})
        log = store.partition("t", 0)
        expected: list[Record] = []
        for b in range(12):
            batch = recs(3, start=b * 3)
            log.append(batch)
            expected.extend(batch)
            if b == 5:
                log.flush()  # some data in sealed segments and WAL objects, the rest in memory
        segs = log.segments()
        assert sum(1 for s in segs if s.sealed) >= 1 and len(segs) >= 3  # later rolls may still be sealing
        got = read_all(log)
        assert [r.offset for r in got] == list(range(36))
        assert values(got) == values(expected)
        assert [r.key for r in got] == [r.key for r in expected]
        # from the middle of a sealed segment and from inside a batch
        mid = log.read(4, max_records=5)
        assert [r.offset for r in mid] == [4, 5, 6, 7, 8]
        log.flush()
    with open_mem(mem_url, tmp_path) as again:
        got = read_all(again.partition("t", 0))
        assert values(got) == values(expected)


def test_read_at_leo_is_empty_and_out_of_range(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t", config={"cleanup.policy": "delete"})
        log = store.partition("t", 0)
        assert log.read(0) == []
        with pytest.raises(OffsetOutOfRange):
            log.read(1)
        log.append(recs(5))
        assert log.read(5) == []
        with pytest.raises(OffsetOutOfRange) as info:
            log.read(6)
        assert info.value.log_end_offset == 5
        with pytest.raises(OffsetOutOfRange):
            log.read(-1)
        log.roll()
        log.delete_records(3)
        assert log.log_start_offset == 3
        with pytest.raises(OffsetOutOfRange) as info:
            log.read(2)
        assert info.value.log_start_offset == 3
        assert [r.offset for r in log.read(3)] == [3, 4]


def test_max_records_and_max_bytes(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t", config={"segment.bytes": 500})
        log = store.partition("t", 0)
        for i in range(20):
            log.append([Record(b"k%d" % i, b"x" * 100)])
        log.flush()
        for start in (0, 7, 15):  # sealed, across boundary, unsealed
            assert [r.offset for r in log.read(start, max_records=3)] == [start, start + 1, start + 2]
            one = log.read(start, max_bytes=1)
            assert [r.offset for r in one] == [start]  # always at least one record
            size = Record(b"k10", b"x" * 100).size_bytes
            two = log.read(start, max_bytes=2 * size + 5)
            assert len(two) == 2
        assert log.read(0, max_records=0) == []
        assert len(log.read(0, max_records=1000, max_bytes=1 << 30)) == 20


def test_timestamps_default_to_store_clock_and_log_append_time(mem_url: str, tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with open_mem(mem_url, tmp_path, clock=clock) as store:
        store.create_topic("ct")
        store.create_topic("lat", config={"message.timestamp.type": "LogAppendTime"})
        ct = store.partition("ct", 0)
        ct.append([Record(b"a", b"1"), Record(b"b", b"2", T0 - 500)])
        clock.advance(1000)
        lat = store.partition("lat", 0)
        lat.append([Record(b"a", b"1", T0 - 500), Record(b"b", b"2")])
        assert [r.timestamp for r in ct.read(0)] == [T0, T0 - 500]
        assert [r.timestamp for r in lat.read(0)] == [T0 + 1000, T0 + 1000]
        ct.roll()
        lat.roll()
        assert [r.timestamp for r in ct.read(0)] == [T0, T0 - 500]
        assert [r.timestamp for r in lat.read(0)] == [T0 + 1000, T0 + 1000]


def test_headers_and_nulls_round_trip(mem_url: str, tmp_path: Path) -> None:
    batch = [
        Record(b"k", b"v", T0, [("h1", b"x"), ("h2", b""), ("h1", b"again")]),
        Record(None, b"nokey", T0),
        Record(b"tomb", None, T0),
        Record(None, None, T0),
        Record(b"", b"", T0, [("e", b"\x00\xff")]),
    ]
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.append(batch)
        before = log.read(0)
        assert before == batch
        assert [tuple(r.headers) for r in before] == [tuple(r.headers) for r in batch]
        log.roll()
        assert log.segments()[0].sealed
        after = log.read(0)
        assert after == batch
        assert [r.offset for r in after] == [0, 1, 2, 3, 4]
    with open_mem(mem_url, tmp_path) as again:
        assert again.partition("t", 0).read(0) == batch


def test_read_before_and_after_roll(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("t")
        log = store.partition("t", 0)
        log.append(recs(4))
        assert [r.offset for r in log.read(0)] == [0, 1, 2, 3]
        log.roll()
        log.append(recs(2, start=4))
        segs = log.segments()
        assert [(s.base_offset, s.last_offset, s.sealed) for s in segs] == [(0, 3, True), (4, 5, False)]
        assert [r.offset for r in log.read(0)] == list(range(6))
        assert [r.offset for r in log.read(4)] == [4, 5]
        assert [r.offset for r in log.read(2)] == [2, 3, 4, 5]


def test_reader_store_sees_flushed_records(mem_url: str, tmp_path: Path) -> None:
    """A store that never wrote the partition reads sealed segments and the writer's WAL objects."""
    with open_mem(mem_url, tmp_path, wal="w1") as writer:
        writer.create_topic("t", config={"segment.bytes": 300})
        log = writer.partition("t", 0)
        for i in range(10):
            log.append(recs(2, start=2 * i))
        log.flush()
        log.append(recs(3, start=20))
        writer.flush()
        reader = open_mem(mem_url, tmp_path, wal="w2")
        try:
            rlog = reader.partition("t", 0)
            assert rlog.log_end_offset == 23
            got = read_all(rlog)
            assert [r.offset for r in got] == list(range(23))
            assert [r.key for r in got] == [f"k{i}".encode() for i in range(23)]
            segs = rlog.segments()
            assert segs[-1].sealed is False and segs[-1].last_offset == 22
            assert reader.node_id is None  # reading never made it a writer
        finally:
            reader.close()


def test_delete_records_rules(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path) as store:
        store.create_topic("c", config={"cleanup.policy": "compact"})
        store.create_topic("d", config={"cleanup.policy": "compact,delete"})
        store.partition("c", 0).append(recs(3))
        with pytest.raises(PolicyViolation):
            store.partition("c", 0).delete_records(1)
        log = store.partition("d", 0)
        log.append(recs(5))
        assert log.delete_records(2) == 2
        assert log.delete_records(1) == 2  # never moves backwards
        with pytest.raises(OffsetOutOfRange):
            log.delete_records(6)
        assert log.delete_records(-1) == 5
        assert log.read(5) == []
        assert log.append(recs(1)).base_offset == 5
    with open_mem(mem_url, tmp_path) as again:
        log = again.partition("d", 0)
        assert (log.log_start_offset, log.log_end_offset) == (5, 6)


def test_closed_store_refuses_work(mem_url: str, tmp_path: Path) -> None:
    store = open_mem(mem_url, tmp_path)
    store.create_topic("t")
    log = store.partition("t", 0)
    log.append(recs(2))
    store.close()
    store.close()  # idempotent
    with pytest.raises(Closed):
        log.append(recs(1))
    with pytest.raises(Closed):
        store.partition("t", 0)
    with open_mem(mem_url, tmp_path) as again:
        assert again.partition("t", 0).log_end_offset == 2
